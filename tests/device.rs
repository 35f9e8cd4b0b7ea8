//! Device programs exported by ExecuTorch's stock exporter (`ExecutorBackend` delegates with
//! `target_device=cuda:0`, `enable_non_cpu_memory_planning=True`) run on the simulated CUDA
//! device and match PyTorch; every device byte moves through the allocator, and nothing
//! leaks.

mod common;

use common::{require_no_cuda, simulated};

use common::{check_output, load_input, manifest_in};
use etch::{Device, DeviceRegistry, DeviceType, ErrorCode, Module, Tensor, Value};
use serde_json::Value as Json;
use std::path::PathBuf;
use std::sync::Arc;

fn device_dir() -> PathBuf {
    common::fixtures_dir().join("device")
}

fn case_devices(name: &str, key: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(device_dir().join("manifest.json")).unwrap();
    let j: Json = serde_json::from_str(&text).unwrap();
    let f = j
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap();
    f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// Runs every case of a device fixture. `device_inputs`: hand inputs the method expects on
/// the device as device tensors (otherwise as host tensors, staged by the runtime).
fn run_device_fixture(name: &str, device_inputs: bool) {
    let fx = manifest_in(&device_dir())
        .into_iter()
        .find(|f| f.name == name)
        .unwrap();
    let in_devs = case_devices(name, "input_devices");
    let out_devs = case_devices(name, "output_devices");
    let (registry, sim) = simulated();
    {
        let mut module = Module::from_file(&fx.pte)
            .unwrap()
            .with_devices(registry.clone());
        for (ci, case) in fx.cases.iter().enumerate() {
            let inputs: Vec<Value> = case
                .inputs
                .iter()
                .zip(&case.input_dtypes)
                .zip(&in_devs[ci])
                .map(|((p, d), dev)| {
                    let v = load_input(p, d);
                    match v {
                        Value::Tensor(t) if device_inputs && dev != "cpu" => {
                            Value::Tensor(t.to_device(dev.parse().unwrap(), &registry).unwrap())
                        }
                        v => v,
                    }
                })
                .collect();
            let outputs = module
                .execute(&case.method, &inputs)
                .unwrap_or_else(|e| panic!("{name} case {ci}: {e}"));
            assert_eq!(outputs.len(), case.expected.len());
            for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
                let t = got.as_tensor().unwrap();
                assert_eq!(
                    t.device().to_string(),
                    out_devs[ci][oi],
                    "{name} case {ci} output {oi} device"
                );
                let host = Value::Tensor(t.to_cpu().unwrap());
                check_output(
                    &format!("{name} case {ci} output {oi}"),
                    &host,
                    exp,
                    &case.output_dtypes[oi],
                    case.rtol,
                    case.atol,
                );
            }
            assert!(
                sim.foreign_writes().is_empty(),
                "{name} case {ci}: device memory written outside the allocator"
            );
        }
        assert!(sim.stats().live_allocations > 0);
    }
    let s = sim.stats();
    assert_eq!(
        (s.live_allocations, s.live_bytes),
        (0, 0),
        "{name}: device memory leaked"
    );
    assert_eq!(s.allocations, s.frees);
}

#[test]
fn one_delegate() {
    run_device_fixture("one_delegate", false);
}

#[test]
fn two_delegates_with_cpu_ops_between() {
    run_device_fixture("two_delegates", false);
}

#[test]
fn one_input_feeding_several_delegates() {
    run_device_fixture("shared_input", false);
}

#[test]
fn skip_flags_with_host_inputs_staged_through_the_allocator() {
    run_device_fixture("skip_flags", false);
}

#[test]
fn skip_flags_with_device_inputs() {
    run_device_fixture("skip_flags", true);
}

#[test]
fn two_methods_with_different_device_config() {
    run_device_fixture("two_methods_config", true);
}

#[test]
fn delegates_on_two_gpus() {
    // cuda:0 and cuda:1 on the simulated device (two devices).
    run_device_fixture("two_gpus", false);
}

#[test]
fn golden_add_with_device() {
    run_device_fixture("add_with_device", false);
    // The layout upstream's tests assert for ModuleAddWithDevice.pte.
    let m = Module::from_file(device_dir().join("add_with_device/model.pte")).unwrap();
    let meta = m.method_meta("forward").unwrap();
    assert_eq!(meta.num_memory_planned_buffers(), 2);
    assert_eq!(meta.memory_planned_buffer_size(0).unwrap(), 32);
    assert_eq!(meta.memory_planned_buffer_size(1).unwrap(), 48);
    assert_eq!(meta.memory_planned_buffer_device(0).unwrap(), Device::CPU);
    assert_eq!(
        meta.memory_planned_buffer_device(1).unwrap(),
        Device::cuda(0)
    );
    assert_eq!(
        meta.memory_planned_buffer_device(2).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    // Loading allocates the 48-byte CUDA buffer through the allocator, freed on drop.
    let (registry, sim) = simulated();
    let mut m = m.with_devices(registry);
    let method = m.method("forward").unwrap();
    assert_eq!(method.planned_bytes(), [32, 48]);
    assert_eq!(
        method.planned_buffer_devices(),
        [Device::CPU, Device::cuda(0)]
    );
    // 48 bytes for the planned CUDA buffer, plus the nested program's own planned buffer
    // (ExecutorBackend places it on cuda:0 too).
    assert!(sim.stats().live_bytes >= 48);
    drop(m);
    assert_eq!(sim.stats().live_allocations, 0);
}

#[test]
fn missing_device_is_a_clear_error() {
    let mut m = Module::from_file(device_dir().join("one_delegate/model.pte"))
        .unwrap()
        .with_devices(Arc::new(DeviceRegistry::new()));
    let e = m.load_method("forward").unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("cuda:0"), "{e}");
    assert!(e.message().contains("--simulate-device cuda"), "{e}");
}

#[test]
fn device_tensor_helpers_round_trip_and_free() {
    let (registry, sim) = simulated();
    {
        let data = [1.0f32, -2.0, 3.5, 4.25];
        let d = Tensor::from_slice_on(&data, &[2, 2], Device::cuda(1), &registry).unwrap();
        assert_eq!(d.device(), Device::cuda(1));
        assert!(d.as_slice::<f32>().is_err());
        let d0 = d.to_device(Device::cuda(0), &registry).unwrap();
        let back = d0.to_cpu().unwrap();
        assert_eq!(back.to_vec::<f32>().unwrap(), data);
        let e =
            Tensor::empty_on(etch::ScalarType::Float, &[0, 3], Device::cuda(0), &registry).unwrap();
        assert_eq!(e.to_cpu().unwrap().numel(), 0);
        assert!(Tensor::from_slice_on(&data, &[2, 2], Device::cuda(5), &registry).is_err());
        let none = DeviceRegistry::new();
        let e = Tensor::from_slice_on(&data, &[4], Device::cuda(0), &none).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound);
        assert_eq!(sim.stats().d2d_copies, 1);
    }
    assert_eq!(sim.stats().live_allocations, 0);
    assert!(sim.foreign_writes().is_empty());
    let _ = DeviceType::Cuda;
}

#[test]
fn malformed_device_programs_are_invalid_program() {
    // Written by tools/export/make_invalid_device_programs.py from add_with_device.
    let cases = [
        ("duplicate_buffer_device", "twice"),
        ("buffer_device_index_zero", "buffer 0"),
        ("buffer_device_out_of_range", "buffer 3"),
        ("buffer_device_negative_index", "invalid device index -1"),
        ("buffer_device_unknown_type", "device type"),
        ("tensor_negative_device_index", "invalid device index -2"),
        ("tensor_unknown_device_type", "device type"),
        (
            "tensor_buffer_device_mismatch",
            "planned in buffer 0 on cpu",
        ),
    ];
    for (name, needle) in cases {
        let path = device_dir().join(format!("invalid/{name}.pte"));
        let (registry, sim) = simulated();
        let mut m = Module::from_file(&path).unwrap().with_devices(registry);
        let e = m.load_method("forward").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidProgram, "{name}: {e}");
        assert!(e.message().contains(needle), "{name}: {e}");
        drop(m);
        assert_eq!(
            sim.stats().live_allocations,
            0,
            "{name}: leaked on a failed load"
        );
    }
}

#[test]
fn methods_share_arenas_per_device() {
    let path = device_dir().join("two_methods_config/model.pte");
    let fx = manifest_in(&device_dir())
        .into_iter()
        .find(|f| f.name == "two_methods_config")
        .unwrap();
    let run = |share: bool| {
        let (registry, sim) = simulated();
        {
            let mut m = Module::from_file(&path)
                .unwrap()
                .with_devices(registry)
                .with_shared_arenas(share);
            for (ci, case) in fx.cases.iter().enumerate() {
                let inputs = case.load_inputs();
                let out = m.execute(&case.method, &inputs).unwrap();
                let host = Value::Tensor(out[0].as_tensor().unwrap().to_cpu().unwrap());
                check_output(
                    &format!("shared={share} case {ci}"),
                    &host,
                    &case.expected[0],
                    &case.output_dtypes[0],
                    case.rtol,
                    case.atol,
                );
            }
        }
        assert_eq!(sim.stats().live_allocations, 0);
        sim.stats().allocations
    };
    let separate = run(false);
    let shared = run(true);
    assert!(shared <= separate, "shared {shared} vs separate {separate}");
}

#[test]
fn cpu_methods_share_arenas() {
    let fx = common::manifest()
        .into_iter()
        .find(|f| f.name == "two_methods")
        .unwrap();
    let mut m = Module::from_file(&fx.pte).unwrap().with_shared_arenas(true);
    for case in &fx.cases {
        let inputs = case.load_inputs();
        let out = m.execute(&case.method, &inputs).unwrap();
        check_output(
            "shared",
            &out[0],
            &case.expected[0],
            &case.output_dtypes[0],
            case.rtol,
            case.atol,
        );
    }
    let fwd = m.method("forward").unwrap().planned_bytes();
    let dp = m.method("double_plus").unwrap().planned_bytes();
    assert_eq!(fwd, dp, "both methods use the same (largest) arena");
}

/// On a machine with a CUDA GPU (the H200 run of scripts/gpu-test.sh), the device fixtures
/// run on real CUDA with the default devices and match PyTorch; elsewhere this is skipped.
#[test]
fn device_fixtures_on_real_cuda() {
    let Some(cuda) = etch::devices_status().cuda.clone() else {
        require_no_cuda();
        return;
    };
    // The first pass also compiles the kernels and creates cuBLAS handles (kept for the
    // process); the second pass must give back every byte it takes.
    let mut free0 = 0;
    for pass in 0..2 {
        if pass == 1 {
            free0 = cuda.mem_info(0).unwrap().0;
        }
        for fx in manifest_in(&device_dir()) {
            let meta = Module::from_file(&fx.pte)
                .unwrap()
                .method_meta(&fx.cases[0].method)
                .unwrap();
            let needs = (0..meta.num_memory_planned_buffers())
                .map(|i| meta.memory_planned_buffer_device(i).unwrap().index as usize + 1)
                .max()
                .unwrap_or(1);
            if needs > cuda.num_devices() {
                eprintln!("cuda: {} skipped (needs {needs} GPUs)", fx.name);
                continue;
            }
            let in_devs = case_devices(&fx.name, "input_devices");
            {
                let pinned_before = cuda.pinned_bytes();
                let mut module = Module::from_file(&fx.pte).unwrap();
                module.load_method(fx.cases[0].method.as_str()).unwrap();
                // Host planned buffers of a device program are page-locked.
                if fx.name != "skip_flags" {
                    assert!(
                        cuda.pinned_bytes() > pinned_before,
                        "{}: no pinned arena",
                        fx.name
                    );
                }
                for (ci, case) in fx.cases.iter().enumerate() {
                    let inputs: Vec<Value> = case
                        .inputs
                        .iter()
                        .zip(&case.input_dtypes)
                        .zip(&in_devs[ci])
                        .map(|((p, d), dev)| match load_input(p, d) {
                            Value::Tensor(t) if dev != "cpu" => Value::Tensor(
                                t.to_device(dev.parse().unwrap(), &module.devices())
                                    .unwrap(),
                            ),
                            v => v,
                        })
                        .collect();
                    let outputs = module
                        .execute(&case.method, &inputs)
                        .unwrap_or_else(|e| panic!("{} case {ci}: {e}", fx.name));
                    for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
                        let host = Value::Tensor(got.as_tensor().unwrap().to_cpu().unwrap());
                        check_output(
                            &format!("cuda {} case {ci} output {oi}", fx.name),
                            &host,
                            exp,
                            &case.output_dtypes[oi],
                            case.rtol.max(1e-5),
                            case.atol.max(1e-5),
                        );
                    }
                }
            }
            eprintln!("cuda: {} ok", fx.name);
        }
    }
    let (free1, _) = cuda.mem_info(0).unwrap();
    assert_eq!(cuda.stats().live_allocations, 0, "{:?}", cuda.stats());
    assert!(free1 + (2 << 20) >= free0, "leaked: {free0} -> {free1}");
}

/// A device input taken without a copy (skip_flags: both inputs on cuda:0) must have the
/// declared shape: a larger one is rejected before the delegate runs (its kernels are
/// planned for the declared shapes), and the module then runs right-shaped inputs.
#[test]
fn wrong_shape_device_inputs_are_rejected() {
    let (registry, _sim) = simulated();
    let pte = device_dir().join("skip_flags/model.pte");
    let mut m = Module::from_file(&pte)
        .unwrap()
        .with_devices(registry.clone());
    let dev = Device::cuda(0);
    let t = |sizes: &[usize]| {
        let n = sizes.iter().product();
        Value::Tensor(
            Tensor::from_slice(&vec![1.0f32; n], sizes)
                .unwrap()
                .to_device(dev, &registry)
                .unwrap(),
        )
    };
    for (a, b) in [([5, 8], [4, 16]), ([4, 8], [4, 17]), ([4, 8], [2, 16])] {
        let e = m.execute("forward", &[t(&a), t(&b)]).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{a:?} {b:?}: {e}");
        assert!(e.message().contains("input"), "{e}");
    }
    m.execute("forward", &[t(&[4, 8]), t(&[4, 16])]).unwrap();
}
