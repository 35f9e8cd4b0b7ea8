//! `etch generate` on a stock `export_llm` program (the tiny Llama fixture, default
//! sdpa_with_kv_cache recipe): greedy ids equal a greedy loop over ExecuTorch's own runtime
//! (tools/export/gen_generate_expected.py), on the CPU and, lowered, on the simulated
//! device; a prompt longer than the context is an error.

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

fn expected() -> (u64, Vec<(Vec<i64>, Json)>) {
    let j: Json =
        serde_json::from_str(&std::fs::read_to_string(dir().join("generate.json")).unwrap())
            .unwrap();
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

#[test]
fn lowered_program_gives_the_same_ids_on_the_simulated_device() {
    let low = std::env::temp_dir().join(format!("etch-gen-{}.pte", std::process::id()));
    let st = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("lower")
        .arg(dir().join("model.pte"))
        .args(["-o", low.to_str().unwrap(), "--ops", "portable"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let (new, cases) = expected();
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
