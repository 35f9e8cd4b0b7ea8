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

// Hugging Face checkpoints of a tiny mixture-of-experts model named like transformers' Qwen
// 3.5 MoE text model (fixture: tools/export/export_moe_weights_fixture.py).

fn moe() -> std::path::PathBuf {
    fixtures_dir().join("moe_weights")
}

fn run_moe(weights: &std::path::Path, convert_dtype: bool) -> etch::Result<Vec<etch::Value>> {
    let mut m = Module::from_file(moe().join("model.pte"))?
        .with_weights_opts(weights, etch::WeightOptions { convert_dtype })?;
    m.forward(&[load_input(&moe().join("tokens.npy"), "int64")])
}

fn check_moe(weights: &std::path::Path, convert_dtype: bool, expected: &str) {
    let out = run_moe(weights, convert_dtype).unwrap_or_else(|e| panic!("{weights:?}: {e}"));
    let what = weights.display().to_string();
    check_output(&what, &out[0], &moe().join(expected), "float32", 1e-5, 1e-5);
}

/// A fresh temporary folder.
fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("etch-moe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A temporary copy of a fixture folder.
fn tmp_copy(name: &str) -> std::path::PathBuf {
    let d = tmp(name);
    for f in std::fs::read_dir(moe().join(name)).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, d.join(f.file_name().unwrap())).unwrap();
    }
    d
}

/// Writes the tensors of `src` that `keep` accepts to `dst`.
fn filter_checkpoint(src: &std::path::Path, dst: &std::path::Path, keep: impl Fn(&str) -> bool) {
    let bytes = std::fs::read(src).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<_> = st.tensors().into_iter().filter(|(k, _)| keep(k)).collect();
    safetensors::serialize_to_file(kept, None, dst).unwrap();
}

#[test]
fn hf_checkpoint_layouts_match_pytorch() {
    // Stacked experts; per expert (save_pretrained), as a folder and as the file; the
    // multimodal prefix with vision/mtp tensors to ignore; shards with an index.
    for w in [
        moe().join("fused"),
        moe().join("per_expert"),
        moe().join("per_expert/model.safetensors"),
        moe().join("multimodal"),
        moe().join("sharded"),
    ] {
        check_moe(&w, false, "expected.npy");
    }
}

#[test]
fn tied_embeddings_follow_config_json() {
    check_moe(&moe().join("tied"), false, "expected_tied.npy");
    // `lm_head.weight` is a view of the embedding, not a copy.
    let ck = etch::Safetensors::open(moe().join("tied")).unwrap();
    use etch::NamedDataMap;
    let head = ck.get("lm_head.weight").unwrap().data.as_ptr();
    assert_eq!(
        head,
        ck.get("model.embed_tokens.weight").unwrap().data.as_ptr()
    );
    // The multimodal config says it in `text_config`.
    let d = tmp_copy("tied");
    std::fs::write(
        d.join("config.json"),
        r#"{"tie_word_embeddings": false, "text_config": {"tie_word_embeddings": true}}"#,
    )
    .unwrap();
    check_moe(&d, false, "expected_tied.npy");
    // Untied (no config): the missing output projection is named.
    std::fs::remove_file(d.join("config.json")).unwrap();
    let e = run_moe(&d, false).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("'lm_head.weight'"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bf16_checkpoint_converts_only_when_asked() {
    for name in ["bf16", "bf16_per_expert"] {
        let e = run_moe(&moe().join(name), false).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidProgram, "{e}");
        assert!(
            e.message().contains("bfloat16")
                && e.message().contains("float32")
                && e.message().contains("--convert-dtype"),
            "{e}"
        );
        check_moe(&moe().join(name), true, "expected_bf16.npy");
    }
}

#[test]
fn broken_experts_are_named() {
    let e = run_moe(&moe().join("missing_up"), false).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(
        e.message()
            .contains("'model.layers.0.mlp.experts.2.up_proj.weight' is missing"),
        "{e}"
    );
    let e = run_moe(&moe().join("bad_expert_shape"), false).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram);
    let m = e.message();
    assert!(
        m.contains("'model.layers.0.mlp.experts.1.down_proj.weight'")
            && m.contains("[4, 8]")
            && m.contains("[8, 4]"),
        "{e}"
    );
}

#[test]
fn missing_tensors_list_the_names_tried() {
    let d = tmp("missing-names");
    let src = moe().join("multimodal/model.safetensors");
    filter_checkpoint(&src, &d.join("model.safetensors"), |k| {
        k != "model.language_model.norm.weight" && !k.contains("experts.")
    });
    let e = run_moe(&d, false).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    let ck = etch::Safetensors::open(&d).unwrap();
    let layout = etch::TensorLayout {
        dtype: etch::ScalarType::Float,
        sizes: vec![8],
        dim_order: vec![0],
    };
    for (key, per_expert) in [
        ("model.norm.weight", None),
        (
            "model.layers.0.mlp.experts.gate_up_proj",
            Some("'model.language_model.layers.0.mlp.experts.E.up_proj.weight'"),
        ),
    ] {
        let e = etch::NamedDataMap::get_tensor(&ck, key, &layout).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
        let prefixed = key.replace("model.", "model.language_model.");
        let m = e.message();
        assert!(
            m.contains(&format!("'{key}'")) && m.contains(&format!("'{prefixed}'")),
            "{e}"
        );
        assert!(per_expert.is_none_or(|p| m.contains(p)), "{e}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn shard_errors_name_the_tensor_and_the_file() {
    let shard = "model-00002-of-00002.safetensors";
    let d = tmp_copy("sharded");
    let index_path = d.join("model.safetensors.index.json");
    let index = std::fs::read_to_string(&index_path).unwrap();
    // A shard the index names is missing, or truncated.
    std::fs::remove_file(d.join(shard)).unwrap();
    let bytes = std::fs::read(moe().join("sharded").join(shard)).unwrap();
    for case in ["missing", "truncated"] {
        let e = run_moe(&d, false).unwrap_err();
        let m = e.message();
        assert!(
            m.contains("tensor '") && m.contains(&format!("shard '{shard}'")),
            "{case}: {e}"
        );
        std::fs::write(d.join(shard), &bytes[..bytes.len() - 3]).unwrap();
    }
    // A shard that holds only tensors the program does not use may be missing.
    std::fs::write(d.join(shard), &bytes).unwrap();
    let json: serde_json::Value = serde_json::from_str(&index).unwrap();
    let mut extra = json.clone();
    extra["weight_map"]["model.visual.patch_embed.weight"] = "visual.safetensors".into();
    std::fs::write(&index_path, extra.to_string()).unwrap();
    check_moe(&d, false, "expected.npy");
    // The index lists a tensor in a shard that does not hold it.
    std::fs::write(&index_path, &index).unwrap();
    let key = "model.norm.weight";
    let holder = d.join(json["weight_map"][key].as_str().unwrap());
    let full = std::fs::read(&holder).unwrap();
    let src = d.join("full.bin");
    std::fs::write(&src, full).unwrap();
    filter_checkpoint(&src, &holder, |k| k != key);
    let e = run_moe(&d, false).unwrap_err();
    assert!(
        e.message().contains(key) && e.message().contains("does not hold it"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn cli_convert_dtype_flag() {
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
            .arg("run")
            .arg(moe().join("model.pte"))
            .arg("--input")
            .arg(moe().join("tokens.npy"))
            .arg("--weights")
            .arg(moe().join("bf16_per_expert"))
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--convert-dtype"));
    let out = tmp("cli");
    let o = run(&["--convert-dtype", "--output-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = load_input(&out.join("output_0.npy"), "float32");
    check_output(
        "cli",
        &got,
        &moe().join("expected_bf16.npy"),
        "float32",
        1e-5,
        1e-5,
    );
    std::fs::remove_dir_all(&out).unwrap();
}
