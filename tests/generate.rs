//! `etch generate`.
//!
//! On a stock `export_llm` program (the tiny Llama fixture, default sdpa_with_kv_cache
//! recipe): greedy ids equal a greedy loop over ExecuTorch's own runtime
//! (tools/export/gen_generate_expected.py), on the CPU and, lowered, on the simulated
//! device; the same for its export with the quantized KV-cache recipe (int8 caches,
//! `llama::custom_quantized_sdpa`); a prompt longer than the context is an error; seeded sampling is reproducible
//! and equals `etch::sample_row` over the logits with one draw per token; the context
//! limit stops generation. With the tiny tokenizer fixture: prompts encode, streamed text
//! decodes and chat templates render as Hugging Face's libraries do. On mocks of etch's
//! prefill/decode convention: the shared cache, chunked and static prefill, device and
//! host sampling.

use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::Command;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops/tiny_llama")
}

fn generate(model: &std::path::Path, prompt: &[i64], new: u64, extra: &[&str]) -> Json {
    let ids: Vec<String> = prompt.iter().map(|x| x.to_string()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("generate")
        .arg(model)
        .args([
            "--prompt-ids",
            &ids.join(","),
            "--max-new-tokens",
            &new.to_string(),
            "--json",
        ])
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

/// The quantized KV-cache recipe's export of the same model (int8 caches,
/// `llama::custom_quantized_sdpa`).
fn qkv_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops/tiny_llama_qkv")
}

fn expected() -> (u64, Vec<(Vec<i64>, Json)>) {
    expected_in(&dir())
}

fn expected_in(dir: &std::path::Path) -> (u64, Vec<(Vec<i64>, Json)>) {
    let j: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generate.json")).unwrap()).unwrap();
    let new = j["max_new_tokens"].as_u64().unwrap();
    let cases = j["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let p = c["prompt_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            (p, c["generated_ids"].clone())
        })
        .collect();
    (new, cases)
}

#[test]
fn greedy_ids_match_executorch() {
    let (new, cases) = expected();
    for (prompt, want) in cases {
        let got = generate(&dir().join("model.pte"), &prompt, new, &[]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
        assert_eq!(got["prompt_ids"].as_array().unwrap().len(), prompt.len());
    }
}

/// `--warmup` (the prompt run once before the timed run) leaves the ids unchanged on an
/// export_llm program: the timed run starts again at position 0.
#[test]
fn warmup_leaves_the_ids_unchanged() {
    let (new, cases) = expected();
    for (prompt, want) in cases {
        let got = generate(&dir().join("model.pte"), &prompt, new, &["--warmup"]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
        assert!(got["warmup_prefill_s"].as_f64().unwrap() > 0.0, "{got}");
    }
}

#[test]
fn lowered_program_gives_the_same_ids_on_the_simulated_device() {
    lowered_ids_match(&dir(), "fp");
}

#[test]
fn quantized_kv_cache_greedy_ids_match_executorch() {
    let (new, cases) = expected_in(&qkv_dir());
    for (prompt, want) in cases {
        let got = generate(&qkv_dir().join("model.pte"), &prompt, new, &[]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
    }
}

/// The tiny Llama exported with 8-bit embeddings (`quantization.embedding_quantize=8,0`).
fn qemb_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops/tiny_llama_qemb8")
}

#[test]
fn quantized_embedding_greedy_ids_match_executorch() {
    let (new, cases) = expected_in(&qemb_dir());
    for (prompt, want) in cases {
        let got = generate(&qemb_dir().join("model.pte"), &prompt, new, &[]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
    }
}

#[test]
fn quantized_embedding_lowered_gives_the_same_ids_on_the_simulated_device() {
    lowered_ids_match(&qemb_dir(), "qemb8");
}

/// export_llm's plain KV-cache recipe (`use_sdpa_with_kv_cache=False`: ATen attention, the
/// caches updated with index_put).
fn kv_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops/tiny_llama_kv")
}

#[test]
fn plain_kv_cache_greedy_ids_match_executorch() {
    let (new, cases) = expected_in(&kv_dir());
    for (prompt, want) in cases {
        let got = generate(&kv_dir().join("model.pte"), &prompt, new, &[]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
    }
}

#[test]
fn plain_kv_cache_lowered_gives_the_same_ids_on_the_simulated_device() {
    lowered_ids_match(&kv_dir(), "kv");
}

/// export_llm with XNNPACK and the 8da4w recipe (8-bit dynamic activations, 4-bit
/// weights in groups of 32): the linears are XNNPACK delegates with a dynamic prompt
/// length, run with fewer rows than declared per call.
fn xnn8da4w_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops/tiny_llama_xnn8da4w")
}

#[test]
fn xnnpack_8da4w_greedy_ids_match_executorch() {
    let (new, cases) = expected_in(&xnn8da4w_dir());
    for (prompt, want) in cases {
        let got = generate(&xnn8da4w_dir().join("model.pte"), &prompt, new, &[]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
    }
}

/// Lowered, the portable ops go to the simulated device; the XNNPACK delegates stay on
/// the CPU.
#[test]
fn xnnpack_8da4w_lowered_gives_the_same_ids_on_the_simulated_device() {
    lowered_ids_match(&xnn8da4w_dir(), "xnn8da4w");
}

#[test]
fn quantized_kv_cache_lowered_gives_the_same_ids_on_the_simulated_device() {
    lowered_ids_match(&qkv_dir(), "qkv");
}

/// `etch lower --ops portable` of `dir`'s model, then greedy generation on the simulated
/// device equals ExecuTorch's ids.
fn lowered_ids_match(dir: &std::path::Path, tag: &str) {
    let low = std::env::temp_dir().join(format!("etch-gen-{tag}-{}.pte", std::process::id()));
    let st = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("lower")
        .arg(dir.join("model.pte"))
        .args(["-o", low.to_str().unwrap(), "--ops", "portable"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let (new, cases) = expected_in(dir);
    for (prompt, want) in cases {
        let got = generate(&low, &prompt, new, &["--simulate-device", "cuda"]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
    }
    std::fs::remove_file(&low).unwrap();
}

#[test]
fn a_prompt_longer_than_the_context_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("generate")
        .arg(dir().join("model.pte"))
        .args(["--prompt-ids", &vec!["1"; 40].join(",")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("longer than the program's context"), "{err}");
}

/// `etch generate` with `args`, its output (not asserted).
fn run_generate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("generate")
        .args(args)
        .output()
        .unwrap()
}

/// `etch generate ... --json`, asserted to succeed, parsed.
fn generate_json(args: &[&str]) -> Json {
    let out = run_generate(&[args, &["--json"]].concat());
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(j: &Json) -> Vec<i64> {
    j.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn model() -> String {
    dir().join("model.pte").to_str().unwrap().to_string()
}

const SAMPLED: [&str; 6] = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.95"];

#[test]
fn seeded_sampling_is_reproducible_and_depends_on_the_seed() {
    let m = model();
    let run = |seed: &str| {
        let args = [
            &[
                m.as_str(),
                "--prompt-ids",
                "1,5,9,23,7",
                "--max-new-tokens",
                "12",
            ][..],
            &SAMPLED,
            &["--seed", seed],
        ]
        .concat();
        ids(&generate_json(&args)["generated_ids"])
    };
    let a = run("7");
    assert_eq!(a.len(), 12);
    assert_eq!(a, run("7"), "the same seed gives the same stream");
    assert_ne!(a, run("8"), "another seed gives another stream");
    let (_, cases) = expected();
    assert_ne!(
        serde_json::json!(a),
        cases[0].1,
        "sampling at 0.9 differs from greedy"
    );
}

#[test]
fn temperature_zero_is_greedy_whatever_the_seed() {
    let (new, cases) = expected();
    let m = model();
    for (prompt, want) in cases {
        let p: Vec<String> = prompt.iter().map(|x| x.to_string()).collect();
        let n = new.to_string();
        let got = generate_json(&[
            &m,
            "--prompt-ids",
            &p.join(","),
            "--max-new-tokens",
            &n,
            "--temperature",
            "0",
            "--top-k",
            "5",
            "--top-p",
            "0.5",
            "--seed",
            "123",
        ]);
        assert_eq!(got["generated_ids"], want, "prompt {prompt:?}");
        assert_eq!(got["sampled_on"], "host");
    }
}

#[test]
fn host_sampling_matches_a_library_loop() {
    // The CLI's stream equals etch::sample_row over forward's logits with one SplitMix64
    // draw per generated token (the prefill's included).
    let prompt = [1i64, 5, 9, 23, 7];
    let m = model();
    let args = [
        &[
            m.as_str(),
            "--prompt-ids",
            "1,5,9,23,7",
            "--max-new-tokens",
            "10",
        ][..],
        &SAMPLED,
        &["--seed", "3"],
    ]
    .concat();
    let got = ids(&generate_json(&args)["generated_ids"]);
    let mut m = etch::Module::from_file(dir().join("model.pte")).unwrap();
    let mut rng = etch::SplitMix64::new(3);
    let mut step = |tokens: &[i64], pos: i64| -> i64 {
        let t = etch::Tensor::from_slice(tokens, &[1, tokens.len()]).unwrap();
        let p = etch::Tensor::from_slice(&[pos], &[1]).unwrap();
        let out = m
            .execute("forward", &[etch::Value::Tensor(t), etch::Value::Tensor(p)])
            .unwrap();
        let logits = out[0].as_tensor().unwrap().to_vec::<f32>().unwrap();
        etch::sample_row(&logits, 0.9, 40, 0.95, rng.next_f32()) as i64
    };
    let mut want = vec![step(&prompt, 0)];
    while want.len() < 10 {
        let pos = (prompt.len() + want.len() - 1) as i64;
        want.push(step(&[*want.last().unwrap()], pos));
    }
    assert_eq!(got, want);
}

#[test]
fn generation_stops_at_the_context_length_with_a_message() {
    // 30 prompt tokens and a 32-token cache: room for three generated tokens.
    let prompt = vec!["1"; 30].join(",");
    let out = run_generate(&[&model(), "--prompt-ids", &prompt, "--max-new-tokens", "10"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stopped at the program's context length (32 tokens)"),
        "{err}"
    );
    assert!(
        err.contains("time to first token") && err.contains("peak host RSS"),
        "{err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.split_whitespace().count(), 3, "{stdout}");
    let j = generate_json(&[&model(), "--prompt-ids", &prompt, "--max-new-tokens", "10"]);
    assert_eq!(
        (
            j["stop"].as_str(),
            j["generated_ids"].as_array().unwrap().len()
        ),
        (Some("context"), 3)
    );
    assert!(j["peak_host_bytes"].as_u64().unwrap() > 0);
}

// Tokenizer: tests/fixtures/tokenizer (tools/export/make_tokenizer_fixture.py), checked
// against Hugging Face tokenizers and transformers.

fn tok_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer")
}

fn tok_expected() -> Json {
    serde_json::from_str(&std::fs::read_to_string(tok_dir().join("expected.json")).unwrap())
        .unwrap()
}

fn tokenizer() -> String {
    tok_dir()
        .join("tokenizer.json")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn prompt_text_is_encoded_as_hugging_face_does() {
    for case in tok_expected()["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got = generate_json(&[
            &model(),
            "--tokenizer",
            &tokenizer(),
            "--prompt",
            text,
            "--max-new-tokens",
            "1",
        ]);
        assert_eq!(got["prompt_ids"], case["ids"], "{text:?}");
        assert_eq!(got["prompt_text"], text);
    }
}

#[test]
fn streamed_text_equals_the_one_shot_decoding() {
    // The tiny Llama's greedy ids are random bytes to this tokenizer: multi-byte characters
    // split across tokens, stray continuation bytes, U+FFFD.
    let (new, cases) = expected();
    let decoded = tok_expected()["decode"].clone();
    for (i, (prompt, want_ids)) in cases.iter().enumerate() {
        assert_eq!(decoded[i]["ids"], *want_ids);
        let want = decoded[i]["text"].as_str().unwrap();
        let p: Vec<String> = prompt.iter().map(|x| x.to_string()).collect();
        let args = [
            &model(),
            "--tokenizer",
            &tokenizer(),
            "--prompt-ids",
            &p.join(","),
            "--max-new-tokens",
            &new.to_string(),
        ];
        let out = run_generate(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let streamed = String::from_utf8(out.stdout).unwrap();
        assert_eq!(streamed, format!("{want}\n"), "prompt {prompt:?}");
        assert_eq!(generate_json(&args)["text"], want);
    }
}

#[test]
fn chat_template_renders_as_transformers_does() {
    let chat = &tok_expected()["chat"];
    let got = generate_json(&[
        &model(),
        "--tokenizer",
        &tokenizer(),
        "--chat",
        "--prompt",
        chat["prompt"].as_str().unwrap(),
        "--max-new-tokens",
        "2",
    ]);
    assert_eq!(got["prompt_text"], chat["rendered"]);
    assert_eq!(got["prompt_ids"], chat["ids"]);
    // generation_config.json beside the tokenizer names the EOS ids.
    assert_eq!(got["eos_ids"], serde_json::json!([255, 253]));
}

/// A checkpoint folder in the temp dir with the fixture tokenizer and `files`.
fn checkpoint(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("etch-gen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(tok_dir().join("tokenizer.json"), d.join("tokenizer.json")).unwrap();
    for (f, text) in files {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

#[test]
fn eos_ids_come_from_the_checkpoint_config() {
    // Greedy from [1, 5, 9, 23, 7] gives 110, 226, 139, ...: EOS 139 stops after three.
    let d = checkpoint("eos", &[("config.json", r#"{"eos_token_id": 139}"#)]);
    let tok = d.join("tokenizer.json");
    let got = generate_json(&[
        &model(),
        "--tokenizer",
        tok.to_str().unwrap(),
        "--prompt-ids",
        "1,5,9,23,7",
    ]);
    assert_eq!(ids(&got["generated_ids"]), [110, 226, 139]);
    assert_eq!(got["stop"], "eos");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn chat_template_errors_are_clear() {
    for (name, files, needle) in [
        (
            "broken",
            vec![(
                "chat_template.jinja",
                "{% for m in messages %}{{ m.content ",
            )],
            "chat template from",
        ),
        (
            "raises",
            vec![(
                "chat_template.jinja",
                "{{ raise_exception('no system prompt allowed') }}",
            )],
            "no system prompt allowed",
        ),
        ("missing", vec![], "no chat template"),
    ] {
        let d = checkpoint(name, &files);
        let tok = d.join("tokenizer.json");
        let out = run_generate(&[
            &model(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--chat",
            "--prompt",
            "hi",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.starts_with("error:") && err.contains(needle),
            "{name}: {err}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn a_text_prompt_needs_a_tokenizer() {
    let out = run_generate(&[&model(), "--prompt", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--prompt needs a tokenizer"), "{err}");
    let out = run_generate(&[&model(), "--prompt-ids", "1,300"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token id 300 is outside the program's vocabulary (256 ids)"),
        "{err}"
    );
}

// etch's prefill/decode convention: tests/fixtures/prefill_decode
// (tools/export/export_prefill_decode_mock.py). Each call writes its tokens into a cache
// shared by both methods; greedy = (sum(cache) + positions filled) % 16; sampled.pte and
// static.pte return floor(u * 16) when temperature > 0; logits.pte returns logits 10 at
// greedy, sampled by the host. EOS 15, context 16.

fn mock(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/prefill_decode/{name}.pte"))
        .to_str()
        .unwrap()
        .to_string()
}

/// The mock's stream: `pick(greedy, u)` chooses each token; stops as etch generate does.
fn simulate(
    prompt: &[i64],
    max_new: usize,
    seed: u64,
    mut pick: impl FnMut(i64, f32) -> i64,
) -> (Vec<i64>, &'static str) {
    let mut cache = prompt.to_vec();
    let mut rng = etch::SplitMix64::new(seed);
    let mut out = Vec::new();
    loop {
        let greedy = (cache.iter().sum::<i64>() + cache.len() as i64) % 16;
        let t = pick(greedy, rng.next_f32());
        out.push(t);
        if t == 15 {
            return (out, "eos");
        }
        if out.len() == max_new {
            return (out, "max-new-tokens");
        }
        if cache.len() >= 16 {
            return (out, "context");
        }
        cache.push(t);
    }
}

fn check_mock(
    name: &str,
    prompt: &[i64],
    max_new: usize,
    extra: &[&str],
    seed: u64,
    pick: impl FnMut(i64, f32) -> i64,
) {
    let p: Vec<String> = prompt.iter().map(|x| x.to_string()).collect();
    let n = max_new.to_string();
    let s = seed.to_string();
    let got = generate_json(
        &[
            &[
                mock(name).as_str(),
                "--prompt-ids",
                &p.join(","),
                "--max-new-tokens",
                &n,
                "--seed",
                &s,
            ][..],
            extra,
        ]
        .concat(),
    );
    let (want, stop) = simulate(prompt, max_new, seed, pick);
    assert_eq!(
        ids(&got["generated_ids"]),
        want,
        "{name} {prompt:?} {extra:?} seed {seed}"
    );
    assert_eq!(got["stop"], stop, "{name} {prompt:?} {extra:?}");
    assert_eq!(got["convention"], "prefill/decode");
    assert_eq!(
        got["sampled_on"],
        if name == "logits" { "host" } else { "device" }
    );
}

#[test]
fn prefill_decode_convention_greedy() {
    // Prompts shorter than, equal to and longer than the prefill bound (8; static: 4, the
    // rest through decode).
    let long: Vec<i64> = (1..=10).collect();
    for name in ["sampled", "logits", "static"] {
        for prompt in [&[2][..], &[3, 1, 4], &[3, 1, 4, 1, 5], &long] {
            check_mock(name, prompt, 8, &[], 0, |g, _| g);
        }
    }
}

#[test]
fn prefill_decode_convention_sampling_draws_once_per_token() {
    let floor16 = |_: i64, u: f32| ((u * 16.0).floor() as i64).min(15);
    for seed in 0..6 {
        check_mock(
            "sampled",
            &[3, 1, 4],
            12,
            &["--temperature", "1"],
            seed,
            floor16,
        );
        check_mock(
            "static",
            &[3, 1, 4, 1, 5],
            12,
            &["--temperature", "1"],
            seed,
            floor16,
        );
        // The host samples logits.pte's logits with the same rule and draws.
        check_mock(
            "logits",
            &[3, 1, 4],
            12,
            &["--temperature", "4", "--top-k", "3"],
            seed,
            |g, u| {
                let logits: Vec<f32> = (0..16).map(|i| if i == g { 10.0 } else { 0.0 }).collect();
                etch::sample_row(&logits, 4.0, 3, 1.0, u) as i64
            },
        );
    }
}
