//! Device faults on a real GPU end in errors, never in a poisoned context (issue #15): run by
//! the GPU suite (`scripts/gpu-test.sh`, `ETCH_REQUIRE_CUDA=1`); skipped without CUDA.
//!
//! - an allocation beyond the free memory is `MemoryAllocationFailed`, and the GPU keeps
//!   working afterwards;
//! - an out-of-range embedding index in a lowered program is an error, and the same loaded
//!   module then runs valid inputs correctly;
//! - a wrong-shape device input is rejected before any launch;
//! - dropping a module gives back all of its device memory (the driver's free memory is the
//!   same before and after);
//! - two processes sharing one GPU both run correctly.

use etch::{DeviceAllocator, ErrorCode, Module, Tensor, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The CUDA allocator, or None (the test is skipped; with `ETCH_REQUIRE_CUDA=1` it fails).
fn cuda() -> Option<&'static etch_devices::cuda::CudaAllocator> {
    let c = etch::devices_status().cuda.as_deref();
    if c.is_none() {
        assert!(
            std::env::var("ETCH_REQUIRE_CUDA").as_deref() != Ok("1"),
            "ETCH_REQUIRE_CUDA=1 but no CUDA device is usable: {:?}",
            etch::devices_status().cuda_unavailable
        );
        eprintln!("skipped: no CUDA device");
    }
    c
}

/// `token_model` (embedding, layer norm, addmm, argmax, topk) lowered to cuda:0 with etch's
/// CUDA kernel set, in a temporary file named with `tag`.
fn lowered_token_model(tag: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("etch-faults-{}-{tag}.pte", std::process::id()));
    let st = Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("lower")
        .arg(fixtures().join("token_model/model.pte"))
        .arg("-o")
        .arg(&out)
        .args(["--ops", "cuda"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

fn ids(v: &[i64]) -> Value {
    Value::Tensor(Tensor::from_slice(v, &[2, 6]).unwrap())
}

/// The CPU program's outputs for `input` (the reference).
fn on_cpu(input: &Value) -> Vec<Value> {
    let mut m = Module::from_file(fixtures().join("token_model/model.pte")).unwrap();
    m.execute("forward", std::slice::from_ref(input)).unwrap()
}

fn same(what: &str, got: &[Value], want: &[Value]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.as_tensor().unwrap().to_cpu().unwrap();
        let w = w.as_tensor().unwrap();
        let (g, w) = (g.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
        for (x, y) in g.iter().zip(&w) {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{what} output {i}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn allocation_beyond_free_memory_fails_and_the_gpu_keeps_working() {
    let Some(c) = cuda() else { return };
    let (free, _) = c.mem_info(0).unwrap();
    let e = c.allocate(free + (1 << 30), 0, 256).unwrap_err();
    assert_eq!(e.code(), ErrorCode::MemoryAllocationFailed, "{e}");
    assert!(e.message().contains("free"), "{e}");
    // The same process then loads and runs a device program correctly.
    let good = ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let mut m = Module::from_file(lowered_token_model("oom")).unwrap();
    let out = m.execute("forward", std::slice::from_ref(&good)).unwrap();
    same("after a failed allocation", &out, &on_cpu(&good));
}

#[test]
fn out_of_range_embedding_index_is_an_error_and_the_module_stays_usable() {
    if cuda().is_none() {
        return;
    }
    let mut m = Module::from_file(lowered_token_model("oor")).unwrap();
    let good = ids(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    for bad in [[49_999i64; 12], [-7; 12]] {
        let e = m.execute("forward", &[ids(&bad)]).unwrap_err();
        eprintln!("index {}: {e}", bad[0]);
        assert!(
            matches!(
                e.code(),
                ErrorCode::InvalidArgument | ErrorCode::InvalidProgram
            ),
            "{e}"
        );
        // The context is not poisoned: the same module runs valid ids.
        let out = m.execute("forward", std::slice::from_ref(&good)).unwrap();
        same("after an out-of-range index", &out, &on_cpu(&good));
    }
}

#[test]
fn wrong_shape_device_input_is_rejected_before_launch() {
    let Some(c) = cuda() else { return };
    // skip_flags takes both inputs on cuda:0 (no host copy).
    let mut m = Module::from_file(fixtures().join("device/skip_flags/model.pte")).unwrap();
    let meta = m.method_meta("forward").unwrap();
    let sizes: Vec<usize> = meta
        .input(0)
        .unwrap()
        .tensor
        .as_ref()
        .unwrap()
        .sizes
        .clone();
    let mut wrong = sizes.clone();
    wrong[0] += 1;
    let n: usize = wrong.iter().product();
    let dev = etch::Device::cuda(0);
    let t = Tensor::from_slice(&vec![1.0f32; n], &wrong)
        .unwrap()
        .to_device(dev, &m.devices())
        .unwrap();
    let e = m
        .execute("forward", &[Value::Tensor(t.clone()), Value::Tensor(t)])
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    eprintln!("wrong shape: {e}");
    // Rejected before any launch: the device reports no error afterwards, and the module
    // runs right-shaped inputs.
    let ok = |i: usize| {
        let s = meta
            .input(i)
            .unwrap()
            .tensor
            .as_ref()
            .unwrap()
            .sizes
            .clone();
        let t = Tensor::from_slice(&vec![1.0f32; s.iter().product()], &s).unwrap();
        Value::Tensor(t.to_device(dev, &m.devices()).unwrap())
    };
    let right = [ok(0), ok(1)];
    m.execute("forward", &right).unwrap();
    let _ = c;
}

#[test]
fn dropping_a_module_returns_its_device_memory() {
    let Some(c) = cuda() else { return };
    let good = ids(&[3; 12]);
    let path = lowered_token_model("drop");
    // The first module also compiles the kernels and creates the process's handles.
    drop(
        Module::from_file(&path)
            .unwrap()
            .execute("forward", std::slice::from_ref(&good)),
    );
    let free0 = c.mem_info(0).unwrap().0;
    for _ in 0..3 {
        let mut m = Module::from_file(&path).unwrap();
        m.execute("forward", std::slice::from_ref(&good)).unwrap();
        drop(m);
        let free1 = c.mem_info(0).unwrap().0;
        assert_eq!(
            free1, free0,
            "device memory not returned: {free0} -> {free1}"
        );
    }
    assert_eq!(c.stats().live_allocations, 0, "{:?}", c.stats());
}

#[test]
fn two_processes_share_one_gpu() {
    if cuda().is_none() {
        return;
    }
    let path = lowered_token_model("procs");
    let dir = std::env::temp_dir().join(format!("etch-faults-{}-procs", std::process::id()));
    let input = fixtures().join("token_model/forward_0_in0.npy");
    let kids: Vec<_> = (0..2)
        .map(|i| {
            let out = dir.join(i.to_string());
            std::fs::create_dir_all(&out).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_etch"))
                .arg("run")
                .arg(&path)
                .arg("--input")
                .arg(&input)
                .args(["--iterations", "200", "--output-dir"])
                .arg(&out)
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    for (mut child, out) in kids {
        assert!(child.wait().unwrap().success());
        // The argmax output (int64) equals the one PyTorch computed.
        let got = std::fs::read(out.join("output_1.npy")).unwrap();
        let want = std::fs::read(fixtures().join("token_model/forward_0_out1.npy")).unwrap();
        assert_eq!(
            got[got.len() - 96..],
            want[want.len() - 96..],
            "{}",
            out.display()
        );
    }
}
