//! `etch lower`: every CPU fixture, lowered to `cuda:0` with the portable kernel set (what
//! the simulated device runs), runs on the simulated device and gives the fixture's
//! PyTorch outputs; re-planned programs are never larger than the stock exporter's and
//! give the same outputs.

mod common;

use common::simulated;

use common::{Fixture, check_output, load_input, manifest, manifest_in};
use etch::compiler::{
    LowerOptions, LowerSummary, MethodSelection, PlanOptions, SupportedOps, lower, replan,
};
use etch::{Device, Module, Program, ProgramParts, Value, WriteOptions};

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

#[test]
fn every_cpu_fixture_lowers_to_cuda_and_matches_on_the_simulated_device() {
    for fx in manifest() {
        let opts = LowerOptions::new(Device::cuda(0), portable());
        let (bytes, summary) = lowered(&fx, &opts);
        let delegates: usize = summary.methods.iter().map(|m| m.delegates).sum();
        assert!(delegates > 0, "{}: nothing was delegated", fx.name);
        // Every method's device bytes are planned in a cuda:0 buffer.
        for m in &summary.methods {
            if m.delegates > 0 {
                assert!(
                    m.plan.after.get(&Device::cuda(0)).copied().unwrap_or(0) > 0,
                    "{} {}: no cuda:0 buffer",
                    fx.name,
                    m.method
                );
            }
        }
        run_cases(&format!("{} lowered", fx.name), &fx, &bytes, false);
    }
}

#[test]
fn every_cpu_fixture_lowers_one_delegate_per_operator() {
    for fx in manifest() {
        let mut opts = LowerOptions::new(Device::cuda(0), portable());
        opts.per_op = true;
        let (bytes, summary) = lowered(&fx, &opts);
        for m in &summary.methods {
            assert_eq!(m.delegates, m.delegated_instructions, "{}", fx.name);
        }
        run_cases(&format!("{} lowered per op", fx.name), &fx, &bytes, false);
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
    for fx in manifest().into_iter().chain(manifest_in(&device_dir)) {
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
    for fx in manifest() {
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
