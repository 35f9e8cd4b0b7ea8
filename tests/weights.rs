//! Weights from safetensors checkpoints (`Module::with_weights`, `etch run --weights`): a
//! program exported with external constants finds each weight by its state_dict name in a
//! `.safetensors` file or a folder of shards, and matches PyTorch; a missing tensor, a
//! wrong shape or a truncated file is an error naming the problem.
//! Fixture: tools/export/export_weights_fixture.py.

mod common;

use common::{check_output, fixtures_dir, load_input};
use etch::{ErrorCode, Module};
use std::sync::Arc;

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

// Weights streamed to a device (the simulated one): stacked and converted tensors are
// produced from the checkpoint chunk by chunk into device memory, with no host copy, and
// must equal what the host builds.

/// The MoE fixture lowered whole to `cuda:0` with the portable operators (which the
/// simulated device runs).
fn moe_lowered() -> Vec<u8> {
    use etch::compiler::{LowerOptions, SupportedOps, lower};
    let program = etch::Program::from_file(moe().join("model.pte")).unwrap();
    let mut parts = etch::ProgramParts::from_program(&program).unwrap();
    let ops = SupportedOps::new(etch::default_kernels().names());
    let summary = lower(&mut parts, &LowerOptions::new(etch::Device::cuda(0), ops)).unwrap();
    assert!(summary.methods.iter().all(|m| m.host_instructions == 0));
    parts.to_bytes(etch::WriteOptions::default()).unwrap()
}

/// Staging on the simulated device with tiny buffers, so every weight takes many chunks,
/// shared by several threads, through a ring of three buffers.
fn tiny_staging() -> etch::SimStaging {
    etch::SimStaging {
        threshold: 0,
        buffers: 3,
        buffer_len: 256,
        plan: etch::StagingPlan {
            min_chunk: 64,
            threads: 4,
            min_share: 64,
        },
    }
}

fn f32_bits(v: &etch::Value) -> Vec<u32> {
    let t = v.as_tensor().unwrap().to_cpu().unwrap();
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[test]
fn weights_streamed_to_the_device_equal_the_host_built_ones() {
    use etch::{ByteSource, DeviceAllocator, NamedDataMap};
    let meta = Module::from_file(moe().join("model.pte"))
        .unwrap()
        .method_meta("forward")
        .unwrap();
    for (ckpt, convert_dtype) in [
        ("per_expert", false),
        ("bf16_per_expert", true),
        ("bf16", true),
        ("sharded", false),
    ] {
        let opts = etch::WeightOptions { convert_dtype };
        let ck = etch::Safetensors::open_with(moe().join(ckpt), opts).unwrap();
        for staging in [None, Some(tiny_staging())] {
            let (_, sim) = common::simulated();
            sim.set_staging(staging);
            for c in meta.external_constants() {
                let layout = etch::TensorLayout {
                    dtype: c.dtype,
                    sizes: c.sizes.iter().map(|&s| s as i64).collect(),
                    dim_order: (0..c.sizes.len() as u8).collect(),
                };
                let src = ck.get_tensor_source(&c.name, &layout).unwrap().unwrap();
                assert_eq!(src.bytes.len(), c.nbytes, "{ckpt} {}", c.name);
                let p = sim.allocate(c.nbytes, 1, 64).unwrap();
                sim.copy_host_to_device_from(p, &*src.bytes, 1).unwrap();
                let mut got = vec![0u8; c.nbytes];
                sim.copy_device_to_host(&mut got, p, 1).unwrap();
                let host = ck.get_tensor(&c.name, &layout).unwrap().unwrap();
                assert!(got == host.data, "{ckpt} {}: streamed != built", c.name);
                sim.deallocate(p, 1).unwrap();
            }
            assert!(sim.foreign_writes().is_empty());
        }
    }
}

#[test]
fn lowered_moe_with_streamed_weights_matches_the_cpu_bit_for_bit() {
    let lowered = moe_lowered();
    let tokens = load_input(&moe().join("tokens.npy"), "int64");
    for (ckpt, convert_dtype) in [("per_expert", false), ("bf16_per_expert", true)] {
        let w = moe().join(ckpt);
        let cpu = f32_bits(&run_moe(&w, convert_dtype).unwrap()[0]);
        for staging in [None, Some(tiny_staging())] {
            let (registry, sim) = common::simulated();
            sim.set_staging(staging);
            let mut m = Module::from_bytes(&lowered)
                .unwrap()
                .with_devices(registry)
                .with_weights_opts(&w, etch::WeightOptions { convert_dtype })
                .unwrap();
            let out = m.forward(std::slice::from_ref(&tokens)).unwrap();
            assert!(f32_bits(&out[0]) == cpu, "{ckpt} staging {staging:?}");
            // Every weight went to the device once, and was counted.
            let weights: usize = m
                .method_meta("forward")
                .unwrap()
                .external_constants()
                .iter()
                .map(|c| c.nbytes)
                .sum();
            let uploaded = m.device_constants().uploaded_bytes();
            assert!(uploaded >= weights as u64, "{uploaded} < {weights}");
            assert!(sim.foreign_writes().is_empty());
        }
    }
}

/// Forwards to a checkpoint and counts the host builds (`get_tensor`) and the streamed
/// reads (`get_tensor_source`) asked of it.
struct Counting {
    inner: etch::Safetensors,
    host: std::sync::atomic::AtomicUsize,
    streamed: std::sync::atomic::AtomicUsize,
}

impl etch::NamedDataMap for Counting {
    fn get(&self, key: &str) -> Option<etch::NamedBlob<'_>> {
        self.inner.get(key)
    }
    fn keys(&self) -> Vec<&str> {
        self.inner.keys()
    }
    fn get_tensor(
        &self,
        key: &str,
        expected: &etch::TensorLayout,
    ) -> etch::Result<Option<etch::NamedBlob<'_>>> {
        self.host.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.get_tensor(key, expected)
    }
    fn get_tensor_source(
        &self,
        key: &str,
        expected: &etch::TensorLayout,
    ) -> etch::Result<Option<etch::TensorSource<'_>>> {
        self.streamed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.get_tensor_source(key, expected)
    }
}

/// A lowered program keeps its weights' values in the outer method, but only the delegate
/// (which loads its own, on the device) uses them: loading must not build them on the host
/// (for a 35B checkpoint that was 20 s and 33 GB of host memory). Each weight is streamed
/// to the device once and never read through `get_tensor`.
#[test]
fn lowered_program_streams_each_weight_once_and_builds_none_on_the_host() {
    let lowered = moe_lowered();
    let program = etch::Program::from_bytes(&lowered).unwrap();
    let (registry, _sim) = common::simulated();
    let ck = etch::Safetensors::open(moe().join("per_expert")).unwrap();
    let counting = Arc::new(Counting {
        inner: ck,
        host: Default::default(),
        streamed: Default::default(),
    });
    let mut config = etch::LoadConfig::new(
        Arc::new(etch::default_kernels()),
        Arc::new(etch::default_backends()),
    );
    config.devices = registry;
    config.named_data = Some(counting.clone());
    let method = etch::Method::load(&program, "forward", &config).unwrap();
    let n = method.meta().external_constants().len();
    assert!(n > 0);
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(counting.host.load(Relaxed), 0, "weights built on the host");
    assert_eq!(counting.streamed.load(Relaxed), n);
}
