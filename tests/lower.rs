//! `etch lower`: every CPU fixture, lowered to `cuda:0` with the portable kernel set (what
//! the simulated device runs), runs on the simulated device and gives the fixture's
//! PyTorch outputs; re-planned programs are never larger than the stock exporter's and
//! give the same outputs.

mod common;

use common::{require_no_cuda, simulated};

use common::{Fixture, check_output, load_input, manifest, manifest_in};
use etch::compiler::{
    LowerOptions, LowerSummary, MethodSelection, PlanOptions, SupportedOps, lower, replan,
};
use etch::{Device, Module, Program, ProgramParts, Value, WriteOptions};

/// The CPU fixtures plus the small models in tests/fixtures/models (GRU, multi-head
/// attention, GroupNorm, whose output is a static view: `tools/export/export_models.py
/// --out tests/fixtures/models --only gru,mha,group_norm --groups nn`).
fn cpu_fixtures() -> Vec<Fixture> {
    let mut v = manifest();
    v.extend(manifest_in(&common::fixtures_dir().join("models")));
    v
}

fn portable() -> SupportedOps {
    SupportedOps::new(etch::default_kernels().names())
}

fn parts_of(fx: &Fixture) -> ProgramParts {
    ProgramParts::from_program(&Program::from_file(&fx.pte).unwrap()).unwrap()
}

/// Runs every case of `fx` on `bytes` (host inputs; outputs copied to the host).
fn run_cases(what: &str, fx: &Fixture, bytes: &[u8], device_inputs: bool) {
    let (registry, sim) = simulated();
    {
        let mut module = Module::from_bytes(bytes)
            .unwrap()
            .with_devices(registry.clone());
        if let Some(ptd) = &fx.ptd {
            module = module.with_data_file(ptd).unwrap();
        }
        for (ci, case) in fx.cases.iter().enumerate() {
            let meta = module.method_meta(&case.method).unwrap();
            let inputs: Vec<Value> = case
                .inputs
                .iter()
                .zip(&case.input_dtypes)
                .enumerate()
                .map(|(k, (p, d))| {
                    let v = load_input(p, d);
                    let dev = meta
                        .input(k)
                        .ok()
                        .and_then(|i| i.tensor.as_ref().map(|t| t.device));
                    match (v, dev) {
                        (Value::Tensor(t), Some(dev)) if device_inputs && !dev.is_cpu() => {
                            Value::Tensor(t.to_device(dev, &registry).unwrap())
                        }
                        (v, _) => v,
                    }
                })
                .collect();
            let outputs = module
                .execute(&case.method, &inputs)
                .unwrap_or_else(|e| panic!("{what} case {ci} ({}): {e}", case.method));
            assert_eq!(outputs.len(), case.expected.len(), "{what} case {ci}");
            for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
                let host = match got {
                    Value::Tensor(t) => Value::Tensor(t.to_cpu().unwrap()),
                    v => v.clone(),
                };
                check_output(
                    &format!("{what} case {ci} output {oi}"),
                    &host,
                    exp,
                    &case.output_dtypes[oi],
                    case.rtol,
                    case.atol,
                );
            }
            assert!(
                sim.foreign_writes().is_empty(),
                "{what} case {ci}: device memory written outside the allocator"
            );
        }
    }
    let s = sim.stats();
    assert_eq!((s.live_allocations, s.live_bytes), (0, 0), "{what}: leak");
}

fn lowered(fx: &Fixture, opts: &LowerOptions) -> (Vec<u8>, LowerSummary) {
    let mut parts = parts_of(fx);
    let summary = lower(&mut parts, opts).unwrap_or_else(|e| panic!("{}: {e}", fx.name));
    let bytes = parts.to_bytes(WriteOptions::default()).unwrap();
    (bytes, summary)
}

/// Delegates per method where a method cannot become one delegate, with the reason.
fn expected_delegates(fixture: &str) -> usize {
    match fixture {
        // torch.cond: the JumpFalse/Move instructions stay in the outer method, so the
        // predicate and each branch (three basic blocks) become one delegate each.
        "cond" => 3,
        _ => 1,
    }
}

/// With every operator supported, each method becomes one delegate (the `torch.cond`
/// fixture: one per basic block) with no kernel call left on the host, state included;
/// the lowered program gives PyTorch's outputs over every case, run in order on one
/// loaded program (the stateful fixtures' buffers carry over between calls).
/// Both with every portable operator and with the CUDA kernels' operators and dtypes
/// (`--ops cuda`, what runs on a real GPU).
#[test]
fn every_cpu_fixture_lowers_to_cuda_and_matches_on_the_simulated_device() {
    let sets = [
        ("portable", portable()),
        (
            "cuda",
            SupportedOps::with_op_dtypes(etch::cuda_op_support()),
        ),
    ];
    for fx in cpu_fixtures() {
        for (set, ops) in &sets {
            let opts = LowerOptions::new(Device::cuda(0), ops.clone());
            let (bytes, summary) = lowered(&fx, &opts);
            for m in &summary.methods {
                let what = format!("{} {} (--ops {set})", fx.name, m.method);
                assert_eq!(m.delegates, expected_delegates(&fx.name), "{what}");
                assert_eq!(
                    m.host_instructions, 0,
                    "{what}: kernel calls left on the host"
                );
                assert_eq!(m.host_state, 0, "{what}: state left on the host");
                // Every method's device bytes are planned in a cuda:0 buffer.
                assert!(
                    m.plan.after.get(&Device::cuda(0)).copied().unwrap_or(0) > 0,
                    "{what}: no cuda:0 buffer"
                );
            }
            // Attention in-projections exported as expand_copy + bmm become one mm.
            if matches!(fx.name.as_str(), "mha" | "transformer") {
                let rewritten: usize = summary.methods.iter().map(|m| m.matmuls_rewritten).sum();
                assert!(rewritten > 0, "{}: broadcast matmul not rewritten", fx.name);
            }
            let state: usize = summary.methods.iter().map(|m| m.device_state).sum();
            let want = match fx.name.as_str() {
                "stateful" => 1,
                "kv_cache" => 2,
                "kv_decoder" => 4,
                _ => 0,
            };
            assert_eq!(state, want, "{}: state on the device", fx.name);
            run_cases(
                &format!("{} lowered (--ops {set})", fx.name),
                &fx,
                &bytes,
                false,
            );
        }
    }
}

/// An operator listed for f32 only is not delegated where it touches an i64 tensor.
#[test]
fn per_operator_dtypes_decide_what_is_delegated() {
    let fx = cpu_fixtures()
        .into_iter()
        .find(|f| f.name == "token_model")
        .unwrap();
    use etch::ScalarType::{Float, Long};
    let support = |argmax: &[etch::ScalarType]| {
        let kernels = etch::default_kernels();
        SupportedOps::with_op_dtypes(kernels.names().into_iter().map(|n| {
            let d = if n == "aten::argmax.out" {
                argmax.to_vec()
            } else {
                vec![Float, Long]
            };
            (n.to_string(), d)
        }))
    };
    let s = support(&[Float]);
    assert!(s.supports_dtype("aten::argmax.out", Float));
    assert!(!s.supports_dtype("aten::argmax.out", Long));
    assert!(!s.supports_dtype("aten::no_such_op.out", Float));
    // argmax writes an i64 index tensor: f32-only support leaves it on the host.
    for (dtypes, host) in [(&[Float][..], 1), (&[Float, Long][..], 0)] {
        let (bytes, summary) = lowered(&fx, &LowerOptions::new(Device::cuda(0), support(dtypes)));
        assert_eq!(summary.methods[0].host_instructions, host, "{dtypes:?}");
        run_cases(
            &format!("token_model argmax {dtypes:?}"),
            &fx,
            &bytes,
            false,
        );
    }
    // No dtype list: any dtype.
    let any = SupportedOps::with_op_dtypes([("aten::argmax.out", [])]);
    assert!(any.supports_dtype("aten::argmax.out", Long));
}

#[test]
fn every_cpu_fixture_lowers_one_delegate_per_operator() {
    for fx in cpu_fixtures() {
        let mut opts = LowerOptions::new(Device::cuda(0), portable());
        opts.per_op = true;
        let (bytes, summary) = lowered(&fx, &opts);
        for m in &summary.methods {
            assert_eq!(m.delegates, m.delegated_instructions, "{}", fx.name);
        }
        run_cases(&format!("{} lowered per op", fx.name), &fx, &bytes, false);
    }
}

/// With the CUDA kernels' operator set, models split into many small delegates with host
/// instructions between them (views crossing delegate boundaries, outputs that other
/// values view, weights permuted on the host).
#[test]
fn every_cpu_fixture_lowers_with_the_cuda_operator_set() {
    let support = etch::cuda_op_support();
    assert!(!support.is_empty(), "built without the cuda feature");
    for fx in cpu_fixtures() {
        for per_op in [false, true] {
            let supported = SupportedOps::with_op_dtypes(support.clone());
            let mut opts = LowerOptions::new(Device::cuda(0), supported);
            opts.per_op = per_op;
            let (bytes, _) = lowered(&fx, &opts);
            run_cases(
                &format!("{} cuda ops (per op: {per_op})", fx.name),
                &fx,
                &bytes,
                false,
            );
        }
    }
}

#[test]
fn skip_flags_keep_io_on_the_device() {
    for name in ["mlp", "cnn", "transformer", "two_methods", "dynamic_batch"] {
        let fx = manifest().into_iter().find(|f| f.name == name).unwrap();
        let mut opts = LowerOptions::new(Device::cuda(0), portable());
        opts.skip_h2d_inputs = MethodSelection::All;
        opts.skip_d2h_outputs = MethodSelection::All;
        let (bytes, summary) = lowered(&fx, &opts);
        for m in &summary.methods {
            assert!(m.device_inputs > 0 && m.device_outputs > 0, "{name}: {m:?}");
        }
        let program = Program::from_bytes(&bytes).unwrap();
        for method in program.method_names() {
            let meta = etch::MethodMeta::new(&program, method).unwrap();
            for k in 0..meta.num_inputs() {
                let t = meta.input(k).unwrap();
                let t = t.tensor.as_ref().unwrap();
                assert_eq!(t.device, Device::cuda(0), "{name} {method} input {k}");
                assert!(!t.is_memory_planned, "{name} {method} input {k} is planned");
            }
        }
        run_cases(&format!("{name} skip flags"), &fx, &bytes, true);
        run_cases(
            &format!("{name} skip flags, host inputs"),
            &fx,
            &bytes,
            false,
        );
    }
}

#[test]
fn skip_flags_apply_to_the_named_methods_only() {
    let fx = manifest()
        .into_iter()
        .find(|f| f.name == "two_methods")
        .unwrap();
    let mut opts = LowerOptions::new(Device::cuda(0), portable());
    opts.skip_h2d_inputs = MethodSelection::Some(vec!["forward".into()]);
    let (bytes, summary) = lowered(&fx, &opts);
    for m in &summary.methods {
        assert_eq!(m.device_inputs > 0, m.method == "forward", "{m:?}");
    }
    run_cases("two_methods skip forward", &fx, &bytes, true);
    opts.skip_h2d_inputs = MethodSelection::Some(vec!["nope".into()]);
    let e = lower(&mut parts_of(&fx), &opts).unwrap_err();
    assert!(e.message().contains("'nope'"), "{e}");
}

#[test]
fn replanned_fixtures_are_never_larger_and_give_the_same_outputs() {
    let device_dir = common::fixtures_dir().join("device");
    for fx in cpu_fixtures().into_iter().chain(manifest_in(&device_dir)) {
        let mut parts = parts_of(&fx);
        let stats = replan(&mut parts, &PlanOptions::default()).unwrap();
        for s in &stats {
            assert!(
                s.total_after() <= s.total_before(),
                "{} {}: {} > {}",
                fx.name,
                s.method,
                s.total_after(),
                s.total_before()
            );
            for (d, b) in &s.after {
                assert!(
                    *b <= s.before.get(d).copied().unwrap_or(0),
                    "{} {}: {d} grew",
                    fx.name,
                    s.method
                );
            }
        }
        let bytes = parts.to_bytes(WriteOptions::default()).unwrap();
        run_cases(&format!("{} replanned", fx.name), &fx, &bytes, false);
    }
}

#[test]
fn replanning_with_unplanned_inputs_and_outputs_gives_the_same_outputs() {
    for fx in cpu_fixtures() {
        for (i, o) in [(true, false), (false, true), (true, true)] {
            let mut parts = parts_of(&fx);
            let opts = PlanOptions {
                alloc_graph_input: i.then_some(false),
                alloc_graph_output: o.then_some(false),
                ..PlanOptions::default()
            };
            replan(&mut parts, &opts).unwrap_or_else(|e| panic!("{}: {e}", fx.name));
            let bytes = parts.to_bytes(WriteOptions::default()).unwrap();
            let program = Program::from_bytes(&bytes).unwrap();
            for method in program.method_names() {
                let meta = etch::MethodMeta::new(&program, method).unwrap();
                for io in meta
                    .inputs()
                    .iter()
                    .filter(|_| i)
                    .chain(meta.outputs().iter().filter(|_| o))
                {
                    if let Some(t) = &io.tensor {
                        assert!(!t.is_memory_planned, "{} {method}", fx.name);
                    }
                }
            }
            run_cases(
                &format!("{} unplanned io ({i}, {o})", fx.name),
                &fx,
                &bytes,
                false,
            );
        }
    }
}

#[test]
fn lowering_rejects_what_it_cannot_do() {
    let fx = manifest().into_iter().find(|f| f.name == "mlp").unwrap();
    let e = lower(
        &mut parts_of(&fx),
        &LowerOptions::new(Device::CPU, portable()),
    )
    .unwrap_err();
    assert!(e.message().contains("--replan-only"), "{e}");
    // A program that already has device placement.
    let dev = manifest_in(&common::fixtures_dir().join("device"))
        .into_iter()
        .find(|f| f.name == "one_delegate")
        .unwrap();
    let e = lower(
        &mut parts_of(&dev),
        &LowerOptions::new(Device::cuda(0), portable()),
    )
    .unwrap_err();
    assert!(e.message().contains("already"), "{e}");
}

#[test]
fn nothing_supported_leaves_the_program_on_the_host() {
    for fx in cpu_fixtures() {
        let (bytes, summary) = lowered(
            &fx,
            &LowerOptions::new(Device::cuda(0), SupportedOps::default()),
        );
        for m in &summary.methods {
            assert_eq!((m.delegates, m.h2d_copies, m.d2h_copies), (0, 0, 0));
        }
        run_cases(&format!("{} unsupported", fx.name), &fx, &bytes, false);
    }
}

/// What a device program looks like, per method: copies, delegates (with their target
/// devices), where the inputs and outputs live, and the devices of the planned buffers.
#[derive(Debug, PartialEq)]
struct Census {
    h2d: usize,
    d2h: usize,
    delegate_devices: Vec<String>,
    input_devices: Vec<Device>,
    output_devices: Vec<Device>,
    buffer_devices: Vec<Device>,
    planned_bytes: u64,
}

fn census(bytes: &[u8]) -> std::collections::BTreeMap<String, Census> {
    let program = Program::from_bytes(bytes).unwrap();
    let parts = ProgramParts::from_program(&program).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for plan in parts.program.execution_plan.iter().flatten() {
        use etch::compiler::schema::pte;
        let name = plan.name.clone().unwrap();
        let meta = etch::MethodMeta::new(&program, &name).unwrap();
        let ops = plan.operators.clone().unwrap_or_default();
        let (mut h2d, mut d2h) = (0, 0);
        let mut delegate_devices = Vec::new();
        for ins in plan.chains.as_ref().unwrap()[0]
            .instructions
            .iter()
            .flatten()
        {
            match &ins.instr_args {
                Some(pte::InstructionArguments::KernelCall(k)) => {
                    match ops[k.op_index as usize].name.as_deref() {
                        Some("et_copy::_h2d_copy") => h2d += 1,
                        Some("et_copy::_d2h_copy") => d2h += 1,
                        _ => {}
                    }
                }
                Some(pte::InstructionArguments::DelegateCall(d)) => {
                    let del = &plan.delegates.as_ref().unwrap()[d.delegate_index as usize];
                    let spec = del
                        .compile_specs
                        .iter()
                        .flatten()
                        .find(|c| c.key.as_deref() == Some("target_device"))
                        .map(|c| String::from_utf8(c.value.clone().unwrap()).unwrap());
                    delegate_devices.push(spec.unwrap_or_default());
                }
                _ => {}
            }
        }
        let dev = |io: &etch::IoInfo| io.tensor.as_ref().map_or(Device::CPU, |t| t.device);
        out.insert(
            name,
            Census {
                h2d,
                d2h,
                delegate_devices,
                input_devices: meta.inputs().iter().map(dev).collect(),
                output_devices: meta.outputs().iter().map(dev).collect(),
                buffer_devices: (0..meta.num_memory_planned_buffers())
                    .map(|i| meta.memory_planned_buffer_device(i).unwrap())
                    .collect(),
                planned_bytes: (0..meta.num_memory_planned_buffers())
                    .map(|i| meta.memory_planned_buffer_size(i).unwrap())
                    .sum(),
            },
        );
    }
    out
}

/// The stock exporter's device fixtures, and `etch lower` of the CPU export of the same
/// models with the same operator set, partitioning and skip flags: the same delegates,
/// copies and devices, minus the uploads etch deduplicates; no more planned bytes; the
/// same outputs.
#[test]
fn lowering_matches_the_stock_exporter_on_the_device_fixtures() {
    let dir = common::fixtures_dir().join("device");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let entries: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut compared = 0;
    for (fx, entry) in manifest_in(&dir)
        .into_iter()
        .zip(entries.as_array().unwrap())
    {
        let low = &entry["lowering"];
        let devices: Vec<&str> = low["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        if devices.len() != 1 {
            // etch lower places one device per run (two_gpus uses two).
            continue;
        }
        let sel = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) if s == "all" => MethodSelection::All,
            serde_json::Value::Array(a) if a.is_empty() => MethodSelection::None,
            serde_json::Value::Array(a) => {
                MethodSelection::Some(a.iter().map(|m| m.as_str().unwrap().to_string()).collect())
            }
            other => panic!("bad skip value {other}"),
        };
        let ops = low["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_string());
        let mut opts = LowerOptions::new(devices[0].parse().unwrap(), SupportedOps::new(ops));
        opts.per_op = low["per_op"].as_bool().unwrap();
        opts.skip_h2d_inputs = sel(&low["skip_h2d_inputs"]);
        opts.skip_d2h_outputs = sel(&low["skip_d2h_outputs"]);
        let cpu = dir.join(entry["cpu_pte"].as_str().unwrap());
        let mut parts = ProgramParts::from_program(&Program::from_file(&cpu).unwrap()).unwrap();
        let summary = lower(&mut parts, &opts).unwrap();
        let ours_bytes = parts.to_bytes(WriteOptions::default()).unwrap();
        let stock = census(&std::fs::read(&fx.pte).unwrap());
        let ours = census(&ours_bytes);
        for (method, s) in &stock {
            let o = &ours[method];
            let m = summary
                .methods
                .iter()
                .find(|m| &m.method == method)
                .unwrap();
            let what = format!("{} {method}", fx.name);
            assert_eq!(o.delegate_devices, s.delegate_devices, "{what}: delegates");
            assert_eq!(o.h2d + m.uploads_reused, s.h2d, "{what}: h2d copies");
            assert_eq!(o.d2h, s.d2h, "{what}: d2h copies");
            assert_eq!(o.input_devices, s.input_devices, "{what}: input devices");
            assert_eq!(o.output_devices, s.output_devices, "{what}: output devices");
            assert_eq!(o.buffer_devices, s.buffer_devices, "{what}: buffer devices");
            assert!(
                o.planned_bytes <= s.planned_bytes,
                "{what}: {} planned bytes, stock {}",
                o.planned_bytes,
                s.planned_bytes
            );
        }
        run_cases(
            &format!("{} lowered by etch", fx.name),
            &fx,
            &ours_bytes,
            true,
        );
        compared += 1;
    }
    assert!(compared >= 6, "only {compared} fixtures compared");
}

/// On a machine with a CUDA GPU (the H200 run of scripts/gpu-test.sh): every CPU fixture,
/// lowered with the CUDA kernels' operator set, runs on the real GPU (the delegates on
/// etch's CUDA kernels, the copies through the CUDA allocator) and matches PyTorch.
/// Elsewhere this is skipped.
#[test]
fn lowered_fixtures_on_real_cuda() {
    if etch::devices_status().cuda.is_none() {
        require_no_cuda();
        return;
    }
    let supported = || SupportedOps::with_op_dtypes(etch::cuda_op_support());
    for fx in cpu_fixtures() {
        for skip in [false, true] {
            let mut opts = LowerOptions::new(Device::cuda(0), supported());
            if skip {
                opts.skip_h2d_inputs = MethodSelection::All;
                opts.skip_d2h_outputs = MethodSelection::All;
            }
            let (bytes, summary) = lowered(&fx, &opts);
            run_on_cuda(&format!("cuda {} (skip {skip})", fx.name), &fx, &bytes);
            let d: usize = summary.methods.iter().map(|m| m.delegates).sum();
            eprintln!("cuda: {} (skip flags {skip}) ok, {d} delegate(s)", fx.name);
        }
    }
}

/// Runs every case of `fx` on `bytes` on the real GPU, in order on one loaded program
/// (device inputs uploaded), and compares with the fixture's outputs.
fn run_on_cuda(what: &str, fx: &Fixture, bytes: &[u8]) {
    let mut module = Module::from_bytes(bytes).unwrap();
    if let Some(ptd) = &fx.ptd {
        module = module.with_data_file(ptd).unwrap();
    }
    for (ci, case) in fx.cases.iter().enumerate() {
        let meta = module.method_meta(&case.method).unwrap();
        let devices = module.devices();
        let inputs: Vec<Value> = case
            .inputs
            .iter()
            .zip(&case.input_dtypes)
            .enumerate()
            .map(|(k, (p, d))| {
                let dev = meta
                    .input(k)
                    .ok()
                    .and_then(|i| i.tensor.as_ref().map(|t| t.device));
                match (load_input(p, d), dev) {
                    (Value::Tensor(t), Some(dev)) if !dev.is_cpu() => {
                        Value::Tensor(t.to_device(dev, &devices).unwrap())
                    }
                    (v, _) => v,
                }
            })
            .collect();
        let outputs = module
            .execute(&case.method, &inputs)
            .unwrap_or_else(|e| panic!("{what} case {ci}: {e}"));
        for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
            let host = match got {
                Value::Tensor(t) => Value::Tensor(t.to_cpu().unwrap()),
                v => v.clone(),
            };
            check_output(
                &format!("{what} case {ci} output {oi}"),
                &host,
                exp,
                &case.output_dtypes[oi],
                case.rtol.max(1e-5),
                case.atol.max(1e-5),
            );
        }
    }
}

/// The `llama::` / `quantized_decomposed::` fixtures (per-op programs and the tiny
/// `export_llm` Llamas, checked against ExecuTorch's runtime): lowered with every portable
/// operator and with the CUDA kernels' operator set, each method is one delegate with its
/// KV caches on the device and no kernel call left on the host (the device-position
/// rewrite removes the host reads of `input_pos`), and gives ExecuTorch's outputs on the
/// simulated device over every case, run in order on one loaded program.
#[test]
fn llama_programs_lower_to_one_delegate_with_positions_on_the_device() {
    let sets = [
        ("portable", portable()),
        (
            "cuda",
            SupportedOps::with_op_dtypes(etch::cuda_op_support()),
        ),
    ];
    for fx in manifest_in(&common::fixtures_dir().join("llama_ops")) {
        for (set, ops) in &sets {
            let opts = LowerOptions::new(Device::cuda(0), ops.clone());
            let (bytes, summary) = lowered(&fx, &opts);
            // The XNNPACK 8da4w program's linears are CPU delegates between the device ones.
            let xnnpack = fx.name == "tiny_llama_xnn8da4w";
            // The plain KV-cache recipe keeps two reads of input_pos on the host with the
            // CUDA set (readers the position rewrite does not know yet): two delegates.
            let plain_cuda = fx.name == "tiny_llama_kv" && *set == "cuda";
            for m in summary
                .methods
                .iter()
                .filter(|m| m.delegated_instructions > 0 && !xnnpack && !plain_cuda)
            {
                let what = format!("{} {} (--ops {set})", fx.name, m.method);
                assert_eq!(m.delegates, 1, "{what}");
                assert_eq!(m.host_instructions, 0, "{what}: kernel calls on the host");
                assert_eq!(m.host_state, 0, "{what}: state left on the host");
            }
            // Every program that reads input_pos for a llama:: op reads it on the device
            // (gated_delta_rule and the embeddings take no position). The XNNPACK program,
            // split into several device delegates by its CPU ones, is not rewritten yet.
            let positions: usize = summary.methods.iter().map(|m| m.device_positions).sum();
            let reads_pos = !fx.name.starts_with("embedding")
                && !fx.name.contains("gated_delta_rule")
                && fx.name != "quantize_per_token"
                && !xnnpack;
            assert_eq!(positions > 0, reads_pos, "{} (--ops {set})", fx.name);
            run_cases(
                &format!("{} lowered (--ops {set})", fx.name),
                &fx,
                &bytes,
                false,
            );
            eprintln!(
                "{} (--ops {set}): {positions} position reader(s) on the device",
                fx.name
            );
        }
    }
}

/// On a machine with a CUDA GPU: the `llama::` / `quantized_decomposed::` fixtures lowered
/// with the CUDA kernels' operator set run on the GPU (one delegate each; the tiny Llamas'
/// decode steps replayed as CUDA graphs) and match ExecuTorch's runtime. Elsewhere skipped.
#[test]
fn llama_programs_on_real_cuda() {
    if etch::devices_status().cuda.is_none() {
        require_no_cuda();
        return;
    }
    for fx in manifest_in(&common::fixtures_dir().join("llama_ops")) {
        let opts = LowerOptions::new(
            Device::cuda(0),
            SupportedOps::with_op_dtypes(etch::cuda_op_support()),
        );
        let (bytes, summary) = lowered(&fx, &opts);
        run_on_cuda(&format!("cuda {}", fx.name), &fx, &bytes);
        let d: usize = summary.methods.iter().map(|m| m.delegates).sum();
        eprintln!("cuda: {} ok, {d} delegate(s)", fx.name);
    }
}

/// Shared mutable buffers (`share_mutable_buffers`: a buffer holding only state, planned
/// last) keep their own buffer after lowering: regression for device activations that were
/// renumbered into the state buffer and overwrote the KV cache.
#[test]
fn shared_state_buffers_stay_apart_from_device_activations() {
    let dir = common::fixtures_dir().join("prefill_decode");
    let run = |model: &std::path::Path, sim: bool| -> String {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_etch"));
        c.arg("run").arg(model).args(["--method", "decode"]);
        if sim {
            c.args(["--simulate-device", "cuda"]);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    for name in ["sampled.pte", "logits.pte"] {
        let want = run(&dir.join(name), false);
        for per_op in [false, true] {
            let out = std::env::temp_dir().join(format!(
                "etch-shared-state-{}-{per_op}-{name}",
                std::process::id()
            ));
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_etch"));
            c.arg("lower").arg(dir.join(name)).arg("-o").arg(&out);
            c.args(["--ops", "portable"]);
            if per_op {
                c.arg("--per-op");
            }
            let o = c.output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(run(&out, true), want, "{name}, per-op {per_op}");
            std::fs::remove_file(out).ok();
        }
    }
}
