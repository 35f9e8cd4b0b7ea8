//! The `etch` binary: `run` against PyTorch's outputs, `inspect --json`, and clean errors.

mod common;

use common::{check_output, fixtures_dir, manifest};
use std::process::Command;

fn etch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_etch"))
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("etch-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn run_matches_pytorch() {
    for name in ["cnn", "token_model", "mlp_bf16"] {
        let fx = manifest().into_iter().find(|f| f.name == name).unwrap();
        let case = &fx.cases[0];
        let out = tmpdir(name);
        let mut cmd = etch();
        cmd.arg("run").arg(&fx.pte).arg("--output-dir").arg(&out);
        for i in &case.inputs {
            cmd.arg("--input").arg(i);
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("output 0:") && stdout.contains("median"),
            "{stdout}"
        );
        for (oi, exp) in case.expected.iter().enumerate() {
            let got = etch::npy::read(out.join(format!("output_{oi}.npy"))).unwrap();
            // bfloat16 outputs are written as float32.
            let dtype = if case.output_dtypes[oi] == "bfloat16" {
                "float32"
            } else {
                &case.output_dtypes[oi]
            };
            check_output(
                &format!("{name} output {oi}"),
                &etch::Value::Tensor(got),
                exp,
                dtype,
                case.rtol,
                case.atol,
            );
        }
    }
}

/// A method that returns None (as ExecuTorch's ModuleSharedState.set_state does): `etch
/// run` prints it and writes no .npy for it.
#[test]
fn run_prints_a_none_output_and_writes_no_npy() {
    let pte = fixtures_dir().join("none_output/model.pte");
    let out = tmpdir("none_output");
    let o = etch()
        .arg("run")
        .arg(&pte)
        .args(["--method", "set_state", "--output-dir"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("output 0: None"), "{stdout}");
    assert!(!out.join("output_0.npy").exists());
}

/// Several methods in order on one loaded module, each taking its own --input files in
/// order; outputs written as METHOD_output_I.npy; a wrong input count names each method's.
#[test]
fn run_takes_a_sequence_of_methods() {
    let pte = fixtures_dir().join("none_output/model.pte");
    let out = tmpdir("method_sequence");
    let x = out.join("x.npy");
    etch::npy::write(
        &x,
        &etch::Tensor::from_slice(&[1.5f32, -2.0], &[2]).unwrap(),
    )
    .unwrap();
    let run = |extra: &[&std::ffi::OsStr]| {
        etch()
            .arg("run")
            .arg(&pte)
            .args(extra)
            .arg("--output-dir")
            .arg(&out)
            .output()
            .unwrap()
    };
    let o = run(&[
        "--method".as_ref(),
        "set_state".as_ref(),
        "--input".as_ref(),
        x.as_os_str(),
        "--method".as_ref(),
        "get_state".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("method set_state:") && stdout.contains("method get_state:"));
    assert!(out.join("get_state_output_0.npy").exists());
    assert!(!out.join("set_state_output_0.npy").exists());
    let o = run(&[
        "--method".as_ref(),
        "set_state".as_ref(),
        "--method".as_ref(),
        "get_state".as_ref(),
        "--input".as_ref(),
        x.as_os_str(),
        "--input".as_ref(),
        x.as_os_str(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("'set_state' 1, 'get_state' 0"), "{err}");
}

/// Upstream's ModuleSharedState (exported with share_mutable_buffers): `forward` then
/// `get_state` on one module shows forward's update of the shared state.
#[test]
fn run_sequence_shares_declared_state_between_methods() {
    let pte = fixtures_dir().join("upstream/ModuleSharedState.pte");
    let out = tmpdir("shared_state");
    let x = out.join("x.npy");
    etch::npy::write(&x, &etch::Tensor::from_slice(&[2.0f32], &[1]).unwrap()).unwrap();
    let o = etch()
        .arg("run")
        .arg(&pte)
        .args(["--method", "forward", "--input"])
        .arg(&x)
        .args(["--method", "get_state", "--output-dir"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |f: &str| {
        etch::npy::read(out.join(f))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    // The state starts at zero (ExecuTorch serializes no initial value for it), forward
    // adds one and returns state + x, get_state reads the same buffer.
    assert_eq!(read("forward_output_0.npy"), [3.0]);
    assert_eq!(read("get_state_output_0.npy"), [1.0]);
}

#[test]
fn run_carries_state_across_iterations() {
    let fx = manifest()
        .into_iter()
        .find(|f| f.name == "stateful")
        .unwrap();
    let case = &fx.cases[0];
    let out = tmpdir("stateful");
    let o = etch()
        .args([
            "run",
            fx.pte.to_str().unwrap(),
            "--iterations",
            "3",
            "--output-dir",
            out.to_str().unwrap(),
        ])
        .arg("--input")
        .arg(&case.inputs[0])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let x = etch::npy::read(&case.inputs[0])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let got = etch::npy::read(out.join("output_0.npy"))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    // acc starts at zero and adds x each run; the output is acc * 2.
    for (g, xi) in got.iter().zip(&x) {
        assert!(
            (g - 6.0 * xi).abs() <= 1e-5 * (1.0 + g.abs()),
            "{g} vs {}",
            6.0 * xi
        );
    }
}

#[test]
fn run_with_external_data_and_random_inputs() {
    let dir = fixtures_dir().join("mlp_external");
    let o = etch()
        .args([
            "run",
            dir.join("model.pte").to_str().unwrap(),
            "--data",
            dir.join("model.ptd").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = etch()
        .args(["run", dir.join("model.pte").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(".ptd"));
}

#[test]
fn inspect_json_reports_methods_ops_and_buffers() {
    let pte = fixtures_dir().join("two_methods/model.pte");
    let o = etch()
        .args(["inspect", pte.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let methods = j["methods"].as_array().unwrap();
    let names: Vec<&str> = methods
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"forward") && names.contains(&"double_plus"),
        "{names:?}"
    );
    for m in methods {
        assert!(!m["operators"].as_array().unwrap().is_empty());
        let b = &m["planned_buffers"][0];
        assert!(b["size"].as_u64().unwrap() > 0);
        assert_eq!(b["device"], "cpu");
        assert_eq!(m["inputs"][0]["tag"], "Tensor");
        assert_eq!(m["inputs"][0]["dtype"], "float32");
    }
}

#[test]
fn truncated_and_garbage_files_fail_cleanly() {
    let bytes = std::fs::read(fixtures_dir().join("cnn/model.pte")).unwrap();
    let dir = tmpdir("bad");
    for (name, data) in [
        ("truncated.pte", &bytes[..bytes.len() / 2]),
        ("header_only.pte", &bytes[..40]),
        ("empty.pte", &bytes[..0]),
        ("garbage.pte", &b"definitely not a flatbuffer at all"[..]),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        for cmd in ["run", "inspect"] {
            let o = etch().args([cmd, p.to_str().unwrap()]).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{cmd} {name}: {err}");
            assert!(err.starts_with("error:"), "{cmd} {name}: {err}");
            assert!(!err.contains("panicked"), "{cmd} {name}: {err}");
        }
    }
    let o = etch()
        .args(["run", "/nonexistent/model.pte"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let o = etch()
        .args([
            "run",
            fixtures_dir().join("mlp/model.pte").to_str().unwrap(),
            "--input",
            fixtures_dir()
                .join("token_model/forward_0_in0.npy")
                .to_str()
                .unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("input 0"));
}

#[test]
fn device_programs_run_on_the_simulated_device() {
    let dir = fixtures_dir().join("device");
    let fx = common::manifest_in(&dir)
        .into_iter()
        .find(|f| f.name == "two_delegates")
        .unwrap();
    let case = &fx.cases[0];
    let out = tmpdir("device");
    let mut cmd = etch();
    cmd.arg("run")
        .arg(&fx.pte)
        .args(["--simulate-device", "cuda", "--output-dir"])
        .arg(&out);
    for i in &case.inputs {
        cmd.arg("--input").arg(i);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("simulated cuda"));
    let got = etch::npy::read(out.join("output_0.npy")).unwrap();
    check_output(
        "two_delegates",
        &etch::Value::Tensor(got),
        &case.expected[0],
        "float32",
        case.rtol,
        case.atol,
    );
    // Without a device: a clear error, exit 1.
    let o = etch().arg("run").arg(&fx.pte).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cuda:0") && err.contains("--simulate-device cuda"),
        "{err}"
    );
}

#[test]
fn inspect_json_reports_device_buffers_and_tensors() {
    let pte = fixtures_dir().join("device/add_with_device/model.pte");
    let o = etch()
        .args(["inspect", pte.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &j["methods"][0];
    let bufs: Vec<(u64, &str)> = m["planned_buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["size"].as_u64().unwrap(), b["device"].as_str().unwrap()))
        .collect();
    assert_eq!(bufs, [(32, "cpu"), (48, "cuda:0")]);
    assert_eq!(m["tensor_devices"]["cuda:0"], 3);
    assert_eq!(m["tensor_devices"]["cpu"], 3);
    assert_eq!(m["delegates"][0]["backend"], "ExecutorBackend");
    assert_eq!(
        m["delegates"][0]["compile_specs"]["target_device"],
        "cuda:0"
    );
}

#[test]
fn lower_writes_a_device_program_that_runs_on_the_simulated_device() {
    let fx = manifest()
        .into_iter()
        .find(|f| f.name == "transformer")
        .unwrap();
    let case = &fx.cases[0];
    let dir = tmpdir("lower");
    let lowered = dir.join("t.cuda.pte");
    let o = etch()
        .args(["lower"])
        .arg(&fx.pte)
        .arg("-o")
        .arg(&lowered)
        .args(["--ops", "portable", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &j["methods"][0];
    assert_eq!(m["delegates"], 1, "{j}");
    assert_eq!(
        (m["h2d_copies"].as_u64(), m["d2h_copies"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(m["plan"]["after"]["cuda:0"].as_u64().unwrap() > 0, "{j}");
    let out = dir.join("out");
    let mut cmd = etch();
    cmd.arg("run")
        .arg(&lowered)
        .args(["--simulate-device", "cuda", "--output-dir"])
        .arg(&out);
    for i in &case.inputs {
        cmd.arg("--input").arg(i);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = etch::npy::read(out.join("output_0.npy")).unwrap();
    check_output(
        "lowered transformer",
        &etch::Value::Tensor(got),
        &case.expected[0],
        &case.output_dtypes[0],
        case.rtol,
        case.atol,
    );
    // Re-planning alone: a CPU program, never more planned bytes.
    let o = etch()
        .args(["lower"])
        .arg(&fx.pte)
        .arg("-o")
        .arg(dir.join("t.replan.pte"))
        .args(["--replan-only"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("planned bytes 114688 ->"), "{text}");
}

#[test]
fn lower_rejects_bad_arguments_with_messages() {
    let fx = manifest().into_iter().find(|f| f.name == "mlp").unwrap();
    let dir = tmpdir("lower-bad");
    let out = dir.join("x.pte");
    for (args, needle) in [
        (vec![], "--output <OUT.pte>"),
        (
            vec!["-o", out.to_str().unwrap(), "--device", "cpu"],
            "--replan-only",
        ),
        (
            vec!["-o", out.to_str().unwrap(), "--device", "tpu:0"],
            "tpu",
        ),
        (
            vec!["-o", out.to_str().unwrap(), "--skip-h2d-inputs=decode"],
            "'decode'",
        ),
        (
            vec!["-o", out.to_str().unwrap(), "--replan-only", "--per-op"],
            "--per-op",
        ),
        (
            vec!["-o", out.to_str().unwrap(), "--alignment", "3"],
            "power of two",
        ),
        (
            vec!["-o", out.to_str().unwrap(), "--ops", "/nonexistent"],
            "--ops",
        ),
    ] {
        let o = etch()
            .arg("lower")
            .arg(&fx.pte)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn usage_errors_are_reported_by_the_parser() {
    // Usage errors: exit code 2, a message naming the option, then the usage line.
    let model = fixtures_dir().join("mlp/model.pte");
    let m = model.to_str().unwrap();
    for (args, needle) in [
        (vec!["generate", m], "--prompt <TEXT>|--prompt-ids"),
        (
            vec!["generate", m, "--prompt", "a", "--prompt-ids", "1"],
            "cannot be used with",
        ),
        (
            vec!["generate", m, "--prompt-ids", "1,x"],
            "'x' is not an integer",
        ),
        (
            vec!["generate", m, "--prompt-ids", ","],
            "no token ids given",
        ),
        (
            vec!["generate", m, "--prompt-ids", "1", "--top-p", "1.5"],
            "expected a number in (0, 1]",
        ),
        (
            vec!["generate", m, "--prompt-ids", "1", "--temperature", "-1"],
            "expected a number >= 0",
        ),
        (
            vec!["generate", m, "--prompt-ids", "1", "--chat"],
            "cannot be used with '--chat'",
        ),
        (
            vec![
                "generate",
                m,
                "--prompt-ids",
                "1",
                "--max-new-tokens",
                "many",
            ],
            "--max-new-tokens <N>",
        ),
        (
            vec!["run", m, "--iterations", "0"],
            "expected a positive integer",
        ),
        (vec!["run", m, "--bogus"], "unexpected argument '--bogus'"),
        (vec!["run", m, "--simulate-device", "tpu"], "takes 'cuda'"),
        (vec!["inspect"], "<MODEL.pte>"),
        (vec!["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ] {
        let o = etch().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("error:") && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
}

#[test]
fn help_describes_every_subcommand() {
    let o = etch().arg("--help").output().unwrap();
    assert!(o.status.success());
    let top = String::from_utf8_lossy(&o.stdout);
    for cmd in [
        "inspect", "run", "bench", "lower", "generate", "ops", "devices",
    ] {
        assert!(top.contains(cmd), "{top}");
        let o = etch().args(["help", cmd]).output().unwrap();
        assert!(o.status.success(), "{cmd}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(&format!("Usage: etch {cmd}")), "{text}");
    }
    let o = etch().args(["generate", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "prefill(tokens i64[1,T], input_pos i64[1], sampling f32[4])",
        "--top-p <P>",
        "--seed <S>",
        "--chat",
        "--tokenizer <PATH>",
        "--simulate-device <cuda>",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // No command: the help, as a usage error.
    let o = etch().output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Usage: etch <COMMAND>"));
}
