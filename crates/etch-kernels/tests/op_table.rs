//! Replays the per-operator PyTorch table against the portable CPU kernels (see
//! `op_table_support`; the CUDA kernels replay the same table in etch-kernels-cuda).

mod op_table_support;

use op_table_support::{Host, replay};

#[test]
fn kernels_match_pytorch_op_table() {
    let reg = etch_kernels::portable_registry();
    let r = replay(&reg, &Host);
    eprintln!(
        "{} cases: {} elements compared, {} error cases",
        r.cases, r.compared, r.errors
    );
    for (op, n) in &r.missing {
        eprintln!("case(s) for {op} ({n}): not registered");
    }
    assert!(
        r.missing.is_empty(),
        "operators without kernels: {:?}",
        r.missing
    );
    assert!(
        r.compared > 1000 && r.errors >= 2,
        "the table exercised too little"
    );
    assert!(
        r.failures.is_empty(),
        "{} of {} cases failed:\n{}",
        r.failures.len(),
        r.cases,
        r.failures.join("\n")
    );
}
