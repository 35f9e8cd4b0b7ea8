//! The profiler: `etch bench --profile` tables, `--etdump` files read back with etch's
//! reader and, where `/work/venv/bin/python` (or `$ETCH_PYTHON`) exists, with ExecuTorch's
//! Inspector (`tools/check_etdump.py`); kernel calls timed by a device timer; on a machine
//! with a GPU, CUDA delegates timed with CUDA events.

mod common;

use common::{check_output, fixtures_dir, manifest_in};
use etch::etdump::{read_etdump, schema};
use etch::profile::{self, EventKind};
use etch::{Module, Value};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The profiler is process-wide: tests that turn it on take turns.
static PROFILER: Mutex<()> = Mutex::new(());

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("etch-profile-{name}-{}", std::process::id()))
}

/// `etch bench MODEL --profile --etdump DUMP --iterations RUNS [extra]`: its stdout and the
/// dump read back.
fn bench(model: &Path, runs: usize, extra: &[&str], name: &str) -> (String, schema::EtDump) {
    let dump = tmp(&format!("{name}.etdp"));
    let o = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("bench")
        .arg(model)
        .args(["--profile", "--iterations", &runs.to_string(), "--etdump"])
        .arg(&dump)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bytes = std::fs::read(&dump).unwrap();
    (stdout, read_etdump(&bytes).unwrap())
}

/// The profile events of a run: name, or delegate debug id for delegate events.
fn run_events(run: &schema::RunData) -> Vec<&schema::ProfileEvent> {
    let events = run.events.as_deref().unwrap_or_default();
    events
        .iter()
        .filter_map(|e| e.profile_event.as_deref())
        .collect()
}

fn event_name(e: &schema::ProfileEvent) -> &str {
    e.name
        .as_deref()
        .or(e.delegate_debug_id_str.as_deref())
        .unwrap_or("")
}

/// Checks every run of `dump` has exactly the `expect`ed events (name -> count per run),
/// `Method::execute` last, and well-formed times and instruction ids.
fn check_runs(dump: &schema::EtDump, runs: usize, expect: &serde_json::Value) {
    let run_data = dump.run_data.as_deref().unwrap_or_default();
    assert_eq!(run_data.len(), runs);
    for run in run_data {
        assert_eq!(run.name.as_deref(), Some("Execute"));
        let events = run_events(run);
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for e in &events {
            *counts.entry(event_name(e).to_string()).or_default() += 1;
            assert!(e.end_time >= e.start_time, "{e:?}");
            if e.name.as_deref() != Some("Method::execute") {
                assert!(e.chain_index == 0 && e.instruction_id >= 0, "{e:?}");
            }
        }
        let want: BTreeMap<String, u64> = expect
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(counts, want);
        let last = events.last().unwrap();
        assert_eq!(last.name.as_deref(), Some("Method::execute"));
        assert_eq!((last.chain_index, last.instruction_id), (-1, 0));
    }
}

/// Runs tools/check_etdump.py on `dump` when the venv's Python exists (else says so).
fn python_check(dump: &Path, runs: usize, expect: &serde_json::Value, extra: &[&Path]) {
    let python = std::env::var_os("ETCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/venv/bin/python"));
    if !python.exists() {
        eprintln!("skipped the Inspector check: no {}", python.display());
        return;
    }
    let delegated: Vec<&String> = expect
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.contains(" #"))
        .collect();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/check_etdump.py");
    let o = Command::new(python)
        .arg(script)
        .arg(dump)
        .args(["--runs", &runs.to_string(), "--expect", &expect.to_string()])
        .args(["--delegated", &json!(delegated).to_string()])
        .args(extra)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "check_etdump.py failed:\n{out}\n{err}");
    eprintln!("{}", out.trim());
}

#[test]
fn etdump_of_the_mlp_fixture() {
    let fx = fixtures_dir().join("mlp");
    let (stdout, dump) = bench(&fx.join("model.pte"), 3, &[], "mlp");
    assert!(stdout.contains("profile over 3 runs"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("  op  ") && l.ends_with("aten::addmm.out")),
        "{stdout}"
    );
    // The permute_copy of each weight is folded at load; the rest is one event (two with
    // OPERATOR_CALL) per kernel call, at the instruction's index in the program.
    let expect = json!({
        "native_call_addmm.out": 2, "native_call_gelu.out": 1, "native_call__softmax.out": 1,
        "OPERATOR_CALL": 4, "Method::execute": 1
    });
    check_runs(&dump, 3, &expect);
    let ids: Vec<(&str, i32)> = run_events(&dump.run_data.as_ref().unwrap()[0])
        .iter()
        .filter(|e| {
            e.name
                .as_deref()
                .is_some_and(|n| n.starts_with("native_call_"))
        })
        .map(|e| (event_name(e), e.instruction_id))
        .collect();
    assert_eq!(
        ids,
        [
            ("native_call_addmm.out", 1),
            ("native_call_gelu.out", 2),
            ("native_call_addmm.out", 4),
            ("native_call__softmax.out", 5)
        ]
    );
    let (pte, input) = (fx.join("model.pte"), fx.join("forward_0_in0.npy"));
    let upstream: [&Path; 4] = ["--pte".as_ref(), &pte, "--input".as_ref(), &input];
    python_check(&tmp("mlp.etdp"), 3, &expect, &upstream);
    let _ = std::fs::remove_file(tmp("mlp.etdp"));
}

#[test]
fn etdump_of_a_delegate_on_the_simulated_device() {
    let model = fixtures_dir().join("device/one_delegate/model.pte");
    let sim = ["--simulate-device", "cuda"];
    let (stdout, dump) = bench(&model, 2, &sim, "one_delegate");
    for row in [
        "delegate     delegate 0 (ExecutorBackend)",
        "delegate op  aten::relu.out",
    ] {
        assert!(stdout.contains(row), "{row}:\n{stdout}");
    }
    // The delegate's operators are delegate events at the delegate's instruction.
    let expect = json!({
        "native_call__h2d_copy.out": 1, "native_call__d2h_copy.out": 1, "OPERATOR_CALL": 2,
        "DELEGATE_CALL": 1, "aten::addmm.out #1": 1, "aten::relu.out #1": 1,
        "Method::execute": 1
    });
    check_runs(&dump, 2, &expect);
    for run in dump.run_data.as_deref().unwrap() {
        let events = run_events(run);
        let call = events
            .iter()
            .find(|e| e.name.as_deref() == Some("DELEGATE_CALL"));
        let call = call.unwrap();
        for e in events.iter().filter(|e| e.delegate_debug_id_str.is_some()) {
            assert_eq!(e.instruction_id, call.instruction_id);
            assert!(e.start_time >= call.start_time && e.end_time <= call.end_time);
        }
    }
    python_check(&tmp("one_delegate.etdp"), 2, &expect, &[]);
    let _ = std::fs::remove_file(tmp("one_delegate.etdp"));
}

#[test]
fn xnnpack_nodes_are_delegate_events() {
    let model = fixtures_dir().join("xnnpack/elementwise/model.pte");
    let (stdout, dump) = bench(&model, 1, &[], "xnnpack");
    assert!(stdout.contains("delegate op  XNNSin"), "{stdout}");
    let run = &dump.run_data.as_deref().unwrap()[0];
    let events = run_events(run);
    assert!(
        events
            .iter()
            .any(|e| e.name.as_deref() == Some("DELEGATE_CALL"))
    );
    let nodes: Vec<&str> = events
        .iter()
        .filter_map(|e| e.delegate_debug_id_str.as_deref())
        .collect();
    assert!(nodes.contains(&"XNNSin #1"), "{nodes:?}");
    assert!(nodes.contains(&"XNNStaticSlice #2"), "{nodes:?}");
    // Reshapes copy nothing (their outputs share their inputs' bytes), so they run no step.
    assert!(
        !nodes.iter().any(|n| n.starts_with("XNNStaticReshape")),
        "{nodes:?}"
    );
    let _ = std::fs::remove_file(tmp("xnnpack.etdp"));
}

#[test]
fn etdump_to_an_unwritable_path_is_an_error() {
    let model = fixtures_dir().join("mlp/model.pte");
    let o = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("bench")
        .arg(model)
        .args(["--iterations", "1", "--etdump", "/nonexistent-dir/x.etdp"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot write /nonexistent-dir/x.etdp"),
        "{err}"
    );
}

/// A device timer that reports every call as taking 1000 ns more than the last, with
/// 100 ns between calls.
#[derive(Default)]
struct FakeTimer {
    marks: usize,
    resets: usize,
}

impl etch::DeviceOpTimer for FakeTimer {
    fn reset(&mut self) {
        self.marks = 0;
        self.resets += 1;
    }
    fn mark(&mut self) -> etch::Result<()> {
        self.marks += 1;
        Ok(())
    }
    fn read(&mut self, out: &mut Vec<u64>) -> etch::Result<()> {
        let mut t = 0;
        for k in 0..self.marks as u64 {
            out.push(t);
            t += if k % 2 == 0 { 1000 * (k / 2 + 1) } else { 100 };
        }
        self.marks = 0;
        Ok(())
    }
}

/// The host side of timing on a device: with a timer set, a method's kernel calls are
/// recorded with the times the timer reads back after the execution, in call order.
#[test]
fn a_device_timer_times_kernel_calls() {
    let _g = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let fx = &manifest_in(&fixtures_dir())
        .into_iter()
        .find(|f| f.name == "mlp")
        .unwrap();
    let mut module = Module::from_file(&fx.pte).unwrap();
    let inputs = fx.cases[0].load_inputs();
    let m = module.method("forward").unwrap();
    m.set_op_timer(Some(Box::new(FakeTimer::default())));
    assert!(m.has_op_timer());
    m.set_inputs(&inputs).unwrap();
    profile::take();
    profile::set_enabled(true);
    let ran = m.execute();
    profile::set_enabled(false);
    ran.unwrap();
    let p = profile::take();
    assert_eq!(p.runs.len(), 1);
    let ops: Vec<_> = p.runs[0]
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Operator)
        .collect();
    assert_eq!(ops.len(), 4);
    for (k, e) in ops.iter().enumerate() {
        assert!(e.device_timed);
        assert_eq!(e.duration().as_nanos(), 1000 * (k as u128 + 1), "{e:?}");
    }
    assert!(ops.windows(2).all(|w| w[1].start_ns == w[0].end_ns + 100));
    let rows = p.rows();
    let addmm = rows.iter().find(|r| r.name == "aten::addmm.out").unwrap();
    assert_eq!((addmm.calls, addmm.total.as_nanos()), (2, 1000 + 3000));
    assert!(addmm.device_timed);
    // Outputs are unchanged by profiling.
    let out = m.output_value(0).unwrap();
    check_output("mlp", &out, &fx.cases[0].expected[0], "float32", 1e-5, 1e-5);
}

/// A timer that loses marks makes the execution fail with an error, not a panic.
#[test]
fn a_broken_device_timer_is_an_error() {
    struct Lossy;
    impl etch::DeviceOpTimer for Lossy {
        fn reset(&mut self) {}
        fn mark(&mut self) -> etch::Result<()> {
            Ok(())
        }
        fn read(&mut self, out: &mut Vec<u64>) -> etch::Result<()> {
            out.push(0);
            Ok(())
        }
    }
    let _g = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixtures_dir().join("mlp");
    let mut module = Module::from_file(fx.join("model.pte")).unwrap();
    let input = common::load_input(&fx.join("forward_0_in0.npy"), "float32");
    let m = module.method("forward").unwrap();
    m.set_op_timer(Some(Box::new(Lossy)));
    m.set_inputs(&[input]).unwrap();
    profile::set_enabled(true);
    let ran = m.execute();
    profile::set_enabled(false);
    profile::take();
    let e = ran.unwrap_err();
    assert!(e.message().contains("device timer gave 1 marks"), "{e}");
}

/// On a machine with a CUDA GPU (scripts/gpu-test.sh), a CUDA delegate's operators are
/// timed with CUDA events: GPU time inside the delegate call, while the graph recorded
/// before profiling still replays afterwards; elsewhere this is skipped.
#[test]
fn cuda_delegate_ops_are_timed_with_cuda_events() {
    let _g = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    if etch::devices_status().cuda.is_none() {
        return common::require_no_cuda();
    }
    let dir = fixtures_dir().join("device");
    let fx = manifest_in(&dir)
        .into_iter()
        .find(|f| f.name == "one_delegate")
        .unwrap();
    let case = &fx.cases[0];
    let mut module = Module::from_file(&fx.pte).unwrap();
    let inputs = case.load_inputs();
    let m = module.method(&case.method).unwrap();
    let run = |m: &mut etch::Method| {
        m.set_inputs(&inputs).unwrap();
        m.execute().unwrap();
        m.synchronize().unwrap();
    };
    for _ in 0..3 {
        run(m); // the second call records a CUDA graph, the third replays it
    }
    profile::take();
    profile::set_enabled(true);
    for _ in 0..3 {
        run(m);
    }
    profile::set_enabled(false);
    let p = profile::take();
    assert_eq!(p.runs.len(), 3);
    for r in &p.runs {
        let call = r
            .events
            .iter()
            .find(|e| e.kind == EventKind::Delegate)
            .unwrap();
        let ops: Vec<_> = r
            .events
            .iter()
            .filter(|e| e.kind == EventKind::DelegateOp)
            .collect();
        assert!(!ops.is_empty());
        let gpu: u64 = ops.iter().map(|e| e.end_ns - e.start_ns).sum();
        assert!(
            ops.iter().all(|e| e.device_timed && e.end_ns > e.start_ns),
            "{ops:?}"
        );
        assert!(
            gpu <= call.end_ns - call.start_ns,
            "GPU time {gpu} ns > the call's"
        );
    }
    run(m);
    let out = m.output_value(0).unwrap();
    let host = Value::Tensor(out.as_tensor().unwrap().to_cpu().unwrap());
    check_output(
        "after profiling",
        &host,
        &case.expected[0],
        "float32",
        1e-5,
        1e-5,
    );
}
