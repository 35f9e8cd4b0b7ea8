//! Inputs the fuzz campaign (`fuzz/`, README "Fuzzing") found to crash, panic or hang,
//! replayed through the same harnesses the fuzz targets run (`fuzz/fuzz_targets/common`):
//! each must now load, lower or run to an error or to completion without panicking. Time
//! is bounded the way the harnesses bound it: every method runs under
//! `Method::set_instruction_limit`, and fuzzed programs get a planned-memory limit.
//!
//! Inputs live in `tests/fixtures/fuzz_regressions/<target>/`, one file each.

#[path = "../fuzz/fuzz_targets/common/mod.rs"]
mod harness;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz_regressions")
        .join(target);
    let mut v: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    v.retain(|p| p.is_file());
    v.sort();
    v
}

/// Runs `harness` on every kept input of `target`, reporting all that panic.
fn replay(target: &str, harness: fn(&[u8])) {
    let mut failed = Vec::new();
    for path in inputs(target) {
        let bytes = std::fs::read(&path).unwrap();
        if catch_unwind(AssertUnwindSafe(|| harness(&bytes))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target}: panicked on {failed:#?}");
}

#[test]
fn load_and_run() {
    replay("load_and_run", harness::load_and_run);
}

#[test]
fn ptd() {
    replay("ptd", harness::ptd);
}

#[test]
fn safetensors() {
    replay("safetensors", harness::safetensors);
}

#[test]
fn lower() {
    replay("lower", harness::lower_and_run);
}

#[test]
fn xnnpack() {
    replay("xnnpack", harness::xnnpack_payload);
}

/// The harnesses themselves work: each target's seeds (the fixtures they were taken from)
/// run without panicking too.
#[test]
fn seeds_run() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    harness::load_and_run(&std::fs::read(fixtures.join("mlp/model.pte")).unwrap());
    harness::lower_and_run(&std::fs::read(fixtures.join("mlp/model.pte")).unwrap());
    harness::ptd(&std::fs::read(fixtures.join("mlp_external/model.ptd")).unwrap());
    harness::safetensors(&std::fs::read(fixtures.join("weights/model.safetensors")).unwrap());
    for i in 0..harness::xnnpack::TEMPLATES.len() {
        harness::xnnpack_payload(&[i as u8]);
    }
}
