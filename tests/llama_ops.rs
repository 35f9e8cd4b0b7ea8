//! ExecuTorch's LLM custom ops (`llama::update_cache`, `llama::custom_sdpa`,
//! `llama::sdpa_with_kv_cache`, and the quantized KV-cache recipe's
//! `llama::custom_quantized_sdpa` with `quantized_decomposed::` per-token quantization, and
//! the weight-only quantized embeddings `quantized_decomposed::embedding_byte` / `embedding_4bit`,
//! and `llama::gated_delta_rule` over a recurrent state in a mutable buffer): programs from `tools/export/export_llama_ops_fixtures.py`
//! run over several calls on one loaded module (a prefill, decode steps, another chunk), so
//! the KV caches in their mutable buffers carry state, and match the outputs of
//! ExecuTorch's own runtime (the wheel's kernels) on the same inputs. `tiny_llama` is a stock
//! `export_llm` program (random weights, `tools/export/export_tiny_llama.py`): a prefill
//! then greedy decode steps; `tiny_llama_qkv` the same model exported with the quantized
//! KV-cache recipe (`model.quantize_kv_cache=True`).

mod common;

use common::{check_output, fixtures_dir, manifest_in};
use etch::{Module, Tensor, Value, npy};

fn run_fixture(name: &str) {
    let dir = fixtures_dir().join("llama_ops");
    let fx = manifest_in(&dir)
        .into_iter()
        .find(|f| f.name == name)
        .expect("fixture in manifest");
    let mut module = Module::from_file(&fx.pte).unwrap();
    let mut worst = 0.0f64;
    for (ci, case) in fx.cases.iter().enumerate() {
        let inputs = case.load_inputs();
        let outputs = module
            .execute(&case.method, &inputs)
            .unwrap_or_else(|e| panic!("{name} case {ci}: {e}"));
        assert_eq!(outputs.len(), case.expected.len(), "{name} case {ci}");
        for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
            check_output(
                &format!("{name} case {ci} output {oi}"),
                got,
                exp,
                &case.output_dtypes[oi],
                case.rtol,
                case.atol,
            );
            if let Value::Tensor(t) = got {
                let e = npy::read(exp).unwrap().to_f64_vec().unwrap();
                for (g, e) in t.to_f64_vec().unwrap().iter().zip(&e) {
                    worst = worst.max((g - e).abs());
                }
            }
        }
    }
    println!(
        "{name}: {} calls, max |etch - ExecuTorch| = {worst:.3e}",
        fx.cases.len()
    );
}

#[test]
fn every_fixture_is_tested() {
    let tested = [
        "custom_sdpa_causal",
        "sdpa_with_kv_cache",
        "custom_sdpa_noncausal",
        "custom_sdpa_mask",
        "sdpa_with_kv_cache_mha",
        "custom_sdpa_bf16",
        "custom_sdpa_f16",
        "quantize_per_token",
        "custom_quantized_sdpa",
        "custom_quantized_sdpa_mask",
        "embedding_byte",
        "embedding_byte_groups",
        "embedding_4bit",
        "embedding_4bit_zp",
        "gated_delta_rule",
        "gated_delta_rule_scalar",
        "gated_delta_rule_gqa",
        "channelwise_gated_delta_rule",
        "tiny_llama",
        "tiny_llama_qkv",
        "tiny_llama_qemb8",
        "tiny_llama_xnn8da4w",
        "tiny_llama_kv",
    ];
    for f in manifest_in(&fixtures_dir().join("llama_ops")) {
        assert!(
            tested.contains(&f.name.as_str()),
            "fixture {} has no test",
            f.name
        );
    }
}

macro_rules! fixture_tests {
    ($($name:ident),* $(,)?) => { $( #[test] fn $name() { run_fixture(stringify!($name)); } )* };
}
fixture_tests!(
    custom_sdpa_causal,
    sdpa_with_kv_cache,
    custom_sdpa_noncausal,
    custom_sdpa_mask,
    sdpa_with_kv_cache_mha,
    custom_sdpa_bf16,
    custom_sdpa_f16,
    quantize_per_token,
    custom_quantized_sdpa,
    custom_quantized_sdpa_mask,
    embedding_byte,
    embedding_byte_groups,
    embedding_4bit,
    embedding_4bit_zp,
    gated_delta_rule,
    gated_delta_rule_scalar,
    gated_delta_rule_gqa,
    channelwise_gated_delta_rule,
    tiny_llama,
    tiny_llama_qkv,
    tiny_llama_qemb8,
    tiny_llama_xnn8da4w,
    tiny_llama_kv,
);

/// A start position past the cache is a typed error, not a panic, and the method stays
/// usable afterwards.
#[test]
fn start_pos_out_of_range_is_an_error() {
    let dir = fixtures_dir().join("llama_ops");
    let fx = manifest_in(&dir)
        .into_iter()
        .find(|f| f.name == "custom_sdpa_causal")
        .unwrap();
    let mut module = Module::from_file(&fx.pte).unwrap();
    let mut inputs = fx.cases[1].load_inputs();
    for bad in [-1i64, 16, 15] {
        // 15 + seq_len 1 fits; the program's own bound check (`start + seq <= 16`) and
        // the kernel reject the others.
        inputs[3] = Value::Tensor(Tensor::from_slice(&[bad], &[1]).unwrap());
        let r = module.execute("forward", &inputs);
        if bad == 15 {
            r.unwrap();
        } else {
            assert!(r.is_err(), "start_pos {bad} should fail");
        }
    }
}

/// `etch lower --ops portable`: each program lowered to `cuda:0` runs on the simulated
/// device over the same calls and gives the same outputs (the caches, updated in place
/// by the `llama::` kernels, live in the delegates and carry over between calls).
#[test]
fn lowered_to_the_simulated_device_matches() {
    use etch::compiler::{LowerOptions, SupportedOps, lower};
    use etch::{Device, Program, ProgramParts, WriteOptions};
    let dir = fixtures_dir().join("llama_ops");
    for fx in manifest_in(&dir) {
        let mut parts = ProgramParts::from_program(&Program::from_file(&fx.pte).unwrap()).unwrap();
        let ops = SupportedOps::new(etch::default_kernels().names());
        let summary = lower(&mut parts, &LowerOptions::new(Device::cuda(0), ops)).unwrap();
        // XNNPACK delegates are CPU backends: the 8da4w program's 9 stay on the host, with
        // the sym_size that reads the prompt length for them.
        let host = if fx.name == "tiny_llama_xnn8da4w" {
            10
        } else {
            0
        };
        for m in summary.methods.iter().filter(|m| m.method == "forward") {
            assert_eq!(m.host_instructions, host, "{} {}: {m:?}", fx.name, m.method);
        }
        for m in summary.methods.iter().filter(|m| m.method != "forward") {
            assert_eq!(m.host_instructions, 0, "{} {}: {m:?}", fx.name, m.method);
        }
        let bytes = parts.to_bytes(WriteOptions::default()).unwrap();
        let (registry, _sim) = common::simulated();
        let mut module = Module::from_bytes(&bytes).unwrap().with_devices(registry);
        for (ci, case) in fx.cases.iter().enumerate() {
            let outputs = module
                .execute(&case.method, &case.load_inputs())
                .unwrap_or_else(|e| panic!("{} lowered, case {ci}: {e}", fx.name));
            for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
                let host = match got {
                    Value::Tensor(t) => Value::Tensor(t.to_cpu().unwrap()),
                    v => v.clone(),
                };
                check_output(
                    &format!("{} lowered, case {ci} output {oi}", fx.name),
                    &host,
                    exp,
                    &case.output_dtypes[oi],
                    case.rtol,
                    case.atol,
                );
            }
        }
    }
}
