//! Every fixture exported by `tools/export/export_fixtures.py` runs through the Module API
//! and matches PyTorch eager's outputs. Cases of a fixture run in order on one loaded
//! module, so mutable state carries over between them.

mod common;

use common::{check_output, manifest};
use etch::Module;

fn run_fixture(name: &str) {
    let fx = manifest()
        .into_iter()
        .find(|f| f.name == name)
        .expect("fixture in manifest");
    let mut module = Module::from_file(&fx.pte).unwrap();
    if let Some(ptd) = &fx.ptd {
        module = module.with_data_file(ptd).unwrap();
    }
    for (ci, case) in fx.cases.iter().enumerate() {
        let inputs = case.load_inputs();
        let outputs = module
            .execute(&case.method, &inputs)
            .unwrap_or_else(|e| panic!("{name} case {ci} ({}): {e}", case.method));
        assert_eq!(
            outputs.len(),
            case.expected.len(),
            "{name} case {ci}: output count"
        );
        for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
            check_output(
                &format!("{name} case {ci} output {oi}"),
                got,
                exp,
                &case.output_dtypes[oi],
                case.rtol,
                case.atol,
            );
        }
    }
}

#[test]
fn every_fixture_is_tested() {
    let names: Vec<String> = manifest().into_iter().map(|f| f.name).collect();
    let tested = [
        "mlp",
        "mlp_f16",
        "mlp_bf16",
        "mlp_external",
        "cnn",
        "convnet",
        "fusenet",
        "transformer",
        "token_model",
        "stateful",
        "dynamic_batch",
        "two_methods",
        "scalar_io",
        "cond",
        "kv_cache",
        "kv_decoder",
    ];
    for n in &names {
        assert!(tested.contains(&n.as_str()), "fixture {n} has no test");
    }
}

macro_rules! fixture_tests {
    ($($name:ident),* $(,)?) => { $( #[test] fn $name() { run_fixture(stringify!($name)); } )* };
}

fixture_tests!(
    mlp,
    mlp_f16,
    mlp_bf16,
    mlp_external,
    cnn,
    convnet,
    fusenet,
    transformer,
    token_model,
    stateful,
    dynamic_batch,
    two_methods,
    scalar_io,
    cond,
    kv_cache,
    kv_decoder,
);

#[test]
fn external_constants_without_ptd_fail_clearly() {
    let fx = manifest()
        .into_iter()
        .find(|f| f.name == "mlp_external")
        .unwrap();
    let mut module = Module::from_file(&fx.pte).unwrap();
    let e = module.load_method("forward").unwrap_err();
    assert_eq!(e.code(), etch::ErrorCode::NotFound);
    assert!(e.message().contains(".ptd"), "{e}");
}
