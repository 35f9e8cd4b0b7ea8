//! Qwen 3.5 MoE end to end (issue #12): our export of a small random checkpoint
//! (tests/fixtures/qwen3_5_moe, made by tools/export/export_qwen35_fixture.py: 5 layers of
//! Gated DeltaNet and gated attention, 6 experts, top-3), with weights read straight from
//! the checkpoint that `save_pretrained` wrote (per-expert keys), generates exactly the
//! token ids of transformers' `generate(do_sample=False)`, through the library API and
//! through `etch generate`.

use etch::{Module, Tensor, Value};
use serde_json::Value as Json;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_5_moe")
}

/// The fixture's cases: (prompt ids, transformers' greedy ids).
pub fn cases() -> Vec<(Vec<i64>, Vec<i64>)> {
    let j: Json =
        serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap())
            .unwrap();
    let ids = |v: &Json| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    j["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(&c["prompt_ids"]), ids(&c["generated_ids"])))
        .collect()
}

/// The token a `prefill`/`decode` call returns.
fn call(m: &mut Module, method: &str, tokens: &[i64], pos: i64) -> i64 {
    let t = Tensor::from_slice(tokens, &[1, tokens.len()]).unwrap();
    let p = Tensor::from_slice(&[pos], &[1]).unwrap();
    let greedy = Tensor::from_slice(&[0f32, 0.0, 1.0, 0.0], &[4]).unwrap();
    let out = m
        .execute(
            method,
            &[Value::Tensor(t), Value::Tensor(p), Value::Tensor(greedy)],
        )
        .unwrap();
    match &out[0] {
        Value::Tensor(t) => t.to_cpu().unwrap().to_f64_vec().unwrap()[0] as i64,
        v => panic!("{method} returned {v:?}"),
    }
}

fn greedy(m: &mut Module, prompt: &[i64], n: usize) -> Vec<i64> {
    let mut out = vec![call(m, "prefill", prompt, 0)];
    while out.len() < n {
        let pos = (prompt.len() + out.len() - 1) as i64;
        out.push(call(m, "decode", &[*out.last().unwrap()], pos));
    }
    out
}

#[test]
fn library_greedy_ids_equal_transformers() {
    let mut m = Module::from_file(dir().join("model.pte"))
        .unwrap()
        .with_weights(dir().join("ckpt"))
        .unwrap()
        .with_shared_arenas(true);
    // The same module runs every case: prefill at position 0 resets the states.
    for (prompt, want) in cases() {
        assert_eq!(
            greedy(&mut m, &prompt, want.len()),
            want,
            "prompt {prompt:?}"
        );
    }
}

fn etch_generate(model: &std::path::Path, prompt: &[i64], n: usize, extra: &[&str]) -> Json {
    let ids: Vec<String> = prompt.iter().map(|x| x.to_string()).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("generate")
        .arg(model)
        .arg("--weights")
        .arg(dir().join("ckpt"))
        .args(["--prompt-ids", &ids.join(","), "--max-new-tokens"])
        .arg(n.to_string())
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(j: &Json) -> Vec<i64> {
    j["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn etch_generate_greedy_ids_equal_transformers() {
    for (prompt, want) in cases() {
        let j = etch_generate(&dir().join("model.pte"), &prompt, want.len(), &[]);
        assert_eq!(ids(&j), want, "prompt {prompt:?}");
        assert_eq!(j["convention"], "prefill/decode");
        assert_eq!(j["sampled_on"], "device");
        // On the CPU nothing is copied to a device.
        assert_eq!(
            (j["load_bytes"].as_u64(), j["load_gb_s"].as_f64()),
            (Some(0), Some(0.0))
        );
    }
}

/// `--warmup` runs the prompt once before the timed run (state left behind is overwritten
/// from position 0): the ids stay transformers', on the CPU and lowered on the simulated
/// device, and the warm-up's prefill time is reported.
#[test]
fn warmup_leaves_the_ids_unchanged() {
    let cuda = lower("cuda", &[], "warmup");
    for (model, extra) in [
        (dir().join("model.pte"), &["--warmup"][..]),
        (cuda, &["--warmup", "--simulate-device", "cuda"][..]),
    ] {
        for (prompt, want) in cases() {
            let j = etch_generate(&model, &prompt, want.len(), extra);
            assert_eq!(ids(&j), want, "{extra:?}, prompt {prompt:?}");
            assert!(j["warmup_prefill_s"].as_f64().unwrap() > 0.0, "{j}");
        }
    }
    let j = etch_generate(&dir().join("model.pte"), &cases()[0].0, 2, &[]);
    assert!(j["warmup_prefill_s"].is_null(), "{j}");
}

/// Teacher forcing: fed transformers' own ids, the program picks transformers' ids at every
/// position; the picks are the program's (a forced id that differs, the last one here, is
/// counted as a disagreement and never fed).
#[test]
fn teacher_forced_picks_follow_the_forced_ids() {
    let (prompt, want) = cases().into_iter().next().unwrap();
    let mut forced = want.clone();
    let last = forced.len() - 1;
    forced[last] = (forced[last] + 1) % 100;
    let list = forced
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let args = ["--force-ids", list.as_str()];
    let j = etch_generate(&dir().join("model.pte"), &prompt, 1000, &args);
    assert_eq!(ids(&j), want);
    assert_eq!(j["forced_agreement"], want.len() - 1);
    // --save-logits needs logits, which this program (sampling inside) does not return.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("generate")
        .arg(dir().join("model.pte"))
        .args([
            "--weights",
            dir().join("ckpt").to_str().unwrap(),
            "--prompt-ids",
            "1,2",
        ])
        .args(["--save-logits", "/dev/null", "--json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--logits"));
}

#[test]
fn seeded_sampling_is_reproducible() {
    let model = dir().join("model.pte");
    let args = [
        "--temperature",
        "0.9",
        "--top-k",
        "20",
        "--top-p",
        "0.95",
        "--seed",
        "11",
    ];
    let a = ids(&etch_generate(&model, &[3, 1, 4], 16, &args));
    let b = ids(&etch_generate(&model, &[3, 1, 4], 16, &args));
    assert_eq!(a, b);
    let mut other = args;
    other[7] = "12";
    assert_ne!(a, ids(&etch_generate(&model, &[3, 1, 4], 16, &other)));
}

/// `etch lower` with `ops` into a temporary file named with `tag`; returns its path.
fn lower(ops: &str, extra: &[&str], tag: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "etch-qwen35-{}-{ops}{}{tag}.pte",
        std::process::id(),
        extra.join("")
    ));
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("lower")
        .arg(dir().join("model.pte"))
        .arg("-o")
        .arg(&out)
        .args(["--ops", ops])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// Lowered whole (weights, KV caches, conv and recurrent states on the device; only the
/// token ids, the position and the sampling parameters cross), the program generates the
/// same ids on the simulated device.
#[test]
fn lowered_program_generates_the_same_ids_on_the_simulated_device() {
    for (ops, extra) in [
        ("portable", &[][..]),
        ("portable", &["--per-op"][..]),
        ("cuda", &[][..]),
    ] {
        let model = lower(ops, extra, "sim");
        for (prompt, want) in cases() {
            let j = etch_generate(&model, &prompt, want.len(), &["--simulate-device", "cuda"]);
            assert_eq!(ids(&j), want, "--ops {ops} {extra:?}, prompt {prompt:?}");
            // Lowered whole, prefill and decode share one device copy of the weights
            // (495,384 bytes) and of the state (58,080 bytes): the peak stays well below
            // two copies of the weights.
            // The weights (and the program's own constants) went to the device once,
            // streamed from the checkpoint; the rate is reported.
            let uploaded = j["load_bytes"].as_u64().unwrap();
            assert!(
                (495_384..495_384 + 1024).contains(&uploaded),
                "load_bytes {uploaded}"
            );
            assert!(j["load_gb_s"].as_f64().unwrap() > 0.0, "{j}");
            // Per decode step only the inputs cross to the device (token id 8 B, position
            // 8 B, sampling parameters 16 B) and the sampled token id comes back (8 B).
            let calls = j["decode_calls"].as_u64().unwrap();
            let t = &j["decode_transfers"];
            assert_eq!(calls as usize, want.len() - 1, "{j}");
            assert_eq!(t["h2d_bytes"].as_u64(), Some(32 * calls), "{j}");
            assert_eq!(t["h2d_copies"].as_u64(), Some(3 * calls), "{j}");
            assert_eq!(t["d2h_bytes"].as_u64(), Some(8 * calls), "{j}");
            assert_eq!(t["d2h_copies"].as_u64(), Some(calls), "{j}");
            // The simulated device records no graphs (it has no device hooks): nothing to
            // report.
            assert!(j["decode_graphs"].is_null(), "{j}");
            let peak = j["peak_device_bytes"].as_u64().unwrap();
            if extra.is_empty() {
                assert!(
                    peak < 495_384 + 58_080 + 200_000,
                    "peak device bytes {peak}"
                );
            }
        }
        std::fs::remove_file(model).ok();
    }
}

/// Lowered with its inputs and outputs left on the device (`--skip-h2d-inputs
/// --skip-d2h-outputs`), `etch generate` keeps the decode inputs there: the next token is
/// the sampled one copied on the device, positions and sampling numbers come from tables
/// uploaded once. Per decode step nothing crosses to the device and only the token id (8 B)
/// comes back; the ids equal the host-input program's (greedy and sampled).
#[test]
fn device_resident_decode_inputs_cross_pcie_only_as_the_token_id() {
    let model = lower(
        "cuda",
        &["--skip-h2d-inputs", "--skip-d2h-outputs"],
        "devin",
    );
    for (prompt, want) in cases() {
        let j = etch_generate(&model, &prompt, want.len(), &["--simulate-device", "cuda"]);
        assert_eq!(ids(&j), want, "prompt {prompt:?}");
        let calls = j["decode_calls"].as_u64().unwrap();
        let t = &j["decode_transfers"];
        assert_eq!(calls as usize, want.len() - 1, "{j}");
        assert_eq!(t["h2d_copies"].as_u64(), Some(0), "{j}");
        assert_eq!(t["d2h_bytes"].as_u64(), Some(8 * calls), "{j}");
        assert_eq!(t["d2h_copies"].as_u64(), Some(calls), "{j}");
    }
    // Sampled: the same ids as the program fed from the host, with the same seed.
    let host = lower("cuda", &[], "hostin");
    let (prompt, _) = &cases()[0];
    let sampled = [
        "--simulate-device",
        "cuda",
        "--temperature",
        "0.8",
        "--top-k",
        "20",
        "--seed",
        "7",
    ];
    let a = etch_generate(&host, prompt, 12, &sampled);
    let b = etch_generate(&model, prompt, 12, &sampled);
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(b["decode_transfers"]["h2d_copies"].as_u64(), Some(0), "{b}");
    std::fs::remove_file(model).ok();
    std::fs::remove_file(host).ok();
}

/// With `--ops cuda` every instruction is delegated (the `etch::` ops have CUDA kernels),
/// the state lives on the device and the linears become `etch::linear_group` calls.
#[test]
fn lowering_with_the_cuda_op_set_delegates_everything() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("lower")
        .arg(dir().join("model.pte"))
        .args(["-o", "/dev/null", "--ops", "cuda", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Json = serde_json::from_slice(&out.stdout).unwrap();
    for m in j["methods"].as_array().unwrap() {
        if m["method"] == "prefill" || m["method"] == "decode" {
            assert_eq!(m["delegates"], 1, "{m}");
            assert_eq!(m["host_instructions"], 0, "{m}");
            assert_eq!(m["device_state"], 10, "{m}");
            assert_eq!(m["host_state"], 0, "{m}");
            // The 24 linears with constant weights become 11 etch::linear_group calls: per
            // DeltaNet layer its 4 input projections and out_proj, per attention layer q/k/v
            // and o_proj, and the LM head.
            assert_eq!(m["linears_grouped"], 24, "{m}");
            assert_eq!(m["linear_groups"], 11, "{m}");
        }
    }
}

/// How `etch generate` says its decode steps ran on the GPU. The program is one CUDA
/// delegate a method: with CUDA graphs, the first decode call runs op by op (nothing to
/// compare with yet), the second repeats its inputs and is recorded, every later one
/// replays the recording; without, every call runs op by op.
fn assert_decode_graphs(j: &Json, on: bool) {
    let calls = j["decode_calls"].as_u64().unwrap();
    let g = &j["decode_graphs"];
    if calls == 0 {
        assert!(g.is_null(), "{j}");
        return;
    }
    let (op_by_op, recorded, replayed) = match (on, calls) {
        (false, _) => (calls, 0, 0),
        (true, 0..=1) => (calls, 0, 0),
        (true, _) => (1, 1, calls - 2),
    };
    assert_eq!(g["op_by_op"].as_u64(), Some(op_by_op), "{j}");
    assert_eq!(g["recorded"].as_u64(), Some(recorded), "{j}");
    assert_eq!(g["replayed"].as_u64(), Some(replayed), "{j}");
}

/// On a real GPU (the GPU suite sets ETCH_REQUIRE_CUDA=1), the lowered program generates
/// transformers' ids with the CUDA kernels, with and without CUDA graphs.
#[test]
fn lowered_program_generates_the_same_ids_on_a_real_gpu() {
    if etch::devices_status().cuda.is_none() {
        assert!(
            std::env::var("ETCH_REQUIRE_CUDA").as_deref() != Ok("1"),
            "ETCH_REQUIRE_CUDA=1 but no CUDA device is usable"
        );
        eprintln!("skipped: no CUDA device");
        return;
    }
    let model = lower("cuda", &[], "real");
    let resident = lower(
        "cuda",
        &["--skip-h2d-inputs", "--skip-d2h-outputs"],
        "realdev",
    );
    for graphs in [&[][..], &["--no-cuda-graphs"][..]] {
        for (prompt, want) in cases() {
            let j = etch_generate(&model, &prompt, want.len(), graphs);
            assert_eq!(ids(&j), want, "{graphs:?} prompt {prompt:?}");
            assert_decode_graphs(&j, graphs.is_empty());
            // As on the simulated device (the allocator counts every host <-> device copy):
            // the CUDA delegate's error word is host memory mapped into the device, which a
            // kernel writes only when it fails, so it adds nothing.
            let calls = j["decode_calls"].as_u64().unwrap();
            let t = &j["decode_transfers"];
            assert_eq!(t["h2d_bytes"].as_u64(), Some(32 * calls), "{j}");
            assert_eq!(t["d2h_bytes"].as_u64(), Some(8 * calls), "{j}");
            assert_eq!(t["d2h_copies"].as_u64(), Some(calls), "{j}");
            // Inputs and outputs left on the device: nothing up, only the token id down.
            let j = etch_generate(&resident, &prompt, want.len(), graphs);
            assert_eq!(ids(&j), want, "device inputs {graphs:?} prompt {prompt:?}");
            assert_decode_graphs(&j, graphs.is_empty());
            let calls = j["decode_calls"].as_u64().unwrap();
            let t = &j["decode_transfers"];
            assert_eq!(t["h2d_bytes"].as_u64(), Some(0), "{j}");
            assert_eq!(t["h2d_copies"].as_u64(), Some(0), "{j}");
            assert_eq!(t["d2h_bytes"].as_u64(), Some(8 * calls), "{j}");
            assert_eq!(t["d2h_copies"].as_u64(), Some(calls), "{j}");
        }
    }
    std::fs::remove_file(model).ok();
    std::fs::remove_file(resident).ok();
}
