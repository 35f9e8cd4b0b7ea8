//! Weights from safetensors checkpoints (`Module::with_weights`, `etch run --weights`): a
//! program exported with external constants finds each weight by its state_dict name in a
//! `.safetensors` file or a folder of shards, and matches PyTorch; a missing tensor, a
//! wrong shape or a truncated file is an error naming the problem.
//! Fixture: tools/export/export_weights_fixture.py.

mod common;

use common::{check_output, fixtures_dir, load_input};
use etch::{ErrorCode, Module};

fn dir() -> std::path::PathBuf {
    fixtures_dir().join("weights")
}

fn run(weights: &std::path::Path) -> etch::Result<Vec<etch::Value>> {
    let mut m = Module::from_file(dir().join("model.pte"))?.with_weights(weights)?;
    let x = load_input(&dir().join("input.npy"), "float32");
    m.forward(&[x])
}

#[test]
fn single_file_and_shards_match_pytorch() {
    for w in [dir().join("model.safetensors"), dir().join("shards")] {
        let out = run(&w).unwrap();
        check_output(
            &w.display().to_string(),
            &out[0],
            &dir().join("expected.npy"),
            "float32",
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn missing_tensor_is_named() {
    let e = run(&dir().join("missing.safetensors")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("net.2.weight"), "{e}");
}

#[test]
fn wrong_shape_is_named() {
    let e = run(&dir().join("bad_shape.safetensors")).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram);
    assert!(
        e.message().contains("net.0.weight") && e.message().contains("[32, 16]"),
        "{e}"
    );
}

#[test]
fn truncated_or_missing_checkpoint_is_an_error() {
    let bytes = std::fs::read(dir().join("model.safetensors")).unwrap();
    let tmp = std::env::temp_dir().join(format!("etch-weights-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for cut in [4, 100, bytes.len() - 7] {
        let p = tmp.join(format!("cut{cut}.safetensors"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = Module::from_file(dir().join("model.pte"))
            .unwrap()
            .with_weights(&p)
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidProgram, "cut at {cut}: {e}");
    }
    let empty = tmp.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = Module::from_file(dir().join("model.pte"))
        .unwrap()
        .with_weights(&empty)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}
