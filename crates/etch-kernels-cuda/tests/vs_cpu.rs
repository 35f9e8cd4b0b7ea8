//! Each CUDA kernel against the portable CPU kernel on random inputs, in f32, f16 and bf16.
//! Skipped (with a message) where there is no CUDA device; run on the H200 by
//! `scripts/gpu-test.sh`.

use etch_core::{
    Device, DeviceRegistry, Dynamism, EValue, IntList, KernelContext, KernelRegistry, ScalarType,
    Tensor, TensorImpl, bf16, f16,
};
use etch_devices::cuda::cuda_for_tests;
use std::sync::{Arc, OnceLock};

mod common;
use common::{Rng, ix};

fn registry() -> Option<&'static Arc<DeviceRegistry>> {
    static R: OnceLock<Option<Arc<DeviceRegistry>>> = OnceLock::new();
    let r = R
        .get_or_init(|| {
            // ETCH_REQUIRE_CUDA=1 turns a missing device into a failure.
            let a = cuda_for_tests().unwrap()?;
            let r = DeviceRegistry::new();
            r.register(Arc::new(a)).ok()?;
            Some(Arc::new(r))
        })
        .as_ref();
    if r.is_none() {
        eprintln!("skipped: no CUDA device");
    }
    r
}

fn host(rng: &mut Rng, dtype: ScalarType, sizes: &[usize]) -> Tensor {
    let n: usize = sizes.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.f()).collect();
    match dtype {
        ScalarType::Float => Tensor::from_slice(&v, sizes).unwrap(),
        ScalarType::Half => Tensor::from_slice(
            &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
            sizes,
        )
        .unwrap(),
        _ => Tensor::from_slice(
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
            sizes,
        )
        .unwrap(),
    }
}

enum Arg {
    T(Tensor),
    Out(Vec<usize>),
    Int(i64),
    Double(f64),
    List(Vec<i64>),
    Bool(bool),
    None,
}

/// Runs `op` from `reg` on tensors placed on `device`; returns the outputs on the host.
fn run(
    reg: &KernelRegistry,
    op: &str,
    args: &[Arg],
    dtype: ScalarType,
    device: Device,
    devs: &DeviceRegistry,
) -> Vec<Tensor> {
    let mut keep = Vec::new();
    let mut values = Vec::new();
    let mut outs = Vec::new();
    for (i, a) in args.iter().enumerate() {
        values.push(match a {
            Arg::T(t) => {
                let t = t.to_device(device, devs).unwrap();
                let v = t.view();
                keep.push(t);
                EValue::Tensor(v)
            }
            Arg::Out(sizes) => {
                let t = Tensor::empty_on(dtype, sizes, device, devs).unwrap();
                let v = t.view();
                let imp = TensorImpl::new(
                    dtype,
                    sizes,
                    None,
                    Dynamism::DynamicBound,
                    device,
                    v.data_ptr(),
                    v.capacity(),
                )
                .unwrap();
                keep.push(t);
                outs.push(i);
                EValue::Tensor(imp)
            }
            Arg::Int(x) => EValue::Int(*x),
            Arg::Double(x) => EValue::Double(*x),
            Arg::Bool(b) => EValue::Bool(*b),
            Arg::None => EValue::None,
            Arg::List(l) => EValue::IntList(IntList {
                items: vec![0; l.len()].into(),
                vals: l.clone().into(),
                dynamic: false,
            }),
        });
    }
    let mut idx: Vec<u32> = (0..args.len() as u32).collect();
    idx.extend(outs.iter().map(|&o| o as u32));
    let f = reg.get(op).unwrap_or_else(|| panic!("{op} not registered"));
    // SAFETY: every tensor points at memory held by `keep` for the call.
    let mut ctx =
        unsafe { KernelContext::new(&mut values, &idx, op) }.with_devices(devs, device.is_cpu());
    f(&mut ctx).unwrap_or_else(|e| panic!("{op} on {device}: {e}"));
    outs.iter()
        .map(|&o| {
            let t = values[o].as_tensor().unwrap();
            let owned = Tensor::empty_on(dtype, t.sizes(), device, devs).unwrap();
            // Copy exactly the produced bytes into a fresh tensor, then to the host.
            if device.is_cpu() {
                // SAFETY: host memory held by `keep`.
                let r = unsafe { etch_core::TensorRef::new(*t) };
                Tensor::from_bytes(dtype, t.sizes(), r.bytes().unwrap()).unwrap()
            } else {
                let alloc = devs.get(device.kind).unwrap();
                alloc
                    .copy_device_to_device(
                        owned.view().data_ptr(),
                        device.index,
                        t.data_ptr(),
                        device.index,
                        t.nbytes(),
                    )
                    .unwrap();
                owned.to_cpu().unwrap()
            }
        })
        .collect()
}

fn compare(op: &str, dtype: ScalarType, cpu: &[Tensor], gpu: &[Tensor]) {
    let tol = match dtype {
        ScalarType::Float => 1e-4,
        ScalarType::Half => 1e-2,
        _ => 3e-2,
    };
    for (c, g) in cpu.iter().zip(gpu) {
        assert_eq!(c.sizes(), g.sizes(), "{op} {dtype}: shape");
        let (c, g) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        for (i, (x, y)) in c.iter().zip(&g).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + x.abs()),
                "{op} {dtype} element {i}: cpu {x}, cuda {y}"
            );
        }
    }
}

#[test]
fn cuda_kernels_match_cpu_kernels() {
    let Some(devs) = registry() else { return };
    let cpu = etch_kernels::portable_registry();
    let gpu = etch_kernels_cuda::cuda_registry();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for dtype in [ScalarType::Float, ScalarType::Half, ScalarType::BFloat16] {
        let cases: Vec<(&str, Vec<Arg>)> = vec![
            (
                "aten::add.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[4, 1, 5])),
                    Arg::T(host(&mut rng, dtype, &[3, 1])),
                    Arg::Double(0.5),
                    Arg::Out(vec![4, 3, 5]),
                ],
            ),
            (
                "aten::sub.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[7, 9])),
                    Arg::T(host(&mut rng, dtype, &[9])),
                    Arg::Int(2),
                    Arg::Out(vec![7, 9]),
                ],
            ),
            (
                "aten::mul.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[2, 3, 4])),
                    Arg::T(host(&mut rng, dtype, &[2, 3, 4])),
                    Arg::Out(vec![2, 3, 4]),
                ],
            ),
            (
                "aten::div.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[5, 6])),
                    Arg::T(host(&mut rng, dtype, &[1, 6])),
                    Arg::Out(vec![5, 6]),
                ],
            ),
            (
                "aten::relu.out",
                vec![Arg::T(host(&mut rng, dtype, &[100])), Arg::Out(vec![100])],
            ),
            (
                "aten::sigmoid.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[3, 33])),
                    Arg::Out(vec![3, 33]),
                ],
            ),
            (
                "aten::tanh.out",
                vec![Arg::T(host(&mut rng, dtype, &[64])), Arg::Out(vec![64])],
            ),
            (
                "aten::permute_copy.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[2, 3, 4, 5])),
                    Arg::List(vec![3, 1, 0, 2]),
                    Arg::Out(vec![5, 3, 2, 4]),
                ],
            ),
            (
                "aten::view_copy.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[6, 4])),
                    Arg::List(vec![3, -1]),
                    Arg::Out(vec![3, 8]),
                ],
            ),
            (
                "aten::clone.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[17])),
                    Arg::None,
                    Arg::Out(vec![17]),
                ],
            ),
            (
                "aten::mm.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[33, 17])),
                    Arg::T(host(&mut rng, dtype, &[17, 9])),
                    Arg::Out(vec![33, 9]),
                ],
            ),
            (
                "aten::bmm.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[3, 8, 16])),
                    Arg::T(host(&mut rng, dtype, &[3, 16, 5])),
                    Arg::Out(vec![3, 8, 5]),
                ],
            ),
            (
                "aten::addmm.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[9])),
                    Arg::T(host(&mut rng, dtype, &[12, 20])),
                    Arg::T(host(&mut rng, dtype, &[20, 9])),
                    Arg::Double(0.5),
                    Arg::Int(2),
                    Arg::Out(vec![12, 9]),
                ],
            ),
            (
                "dim_order_ops::_to_dim_order_copy.out",
                vec![
                    Arg::T(host(&mut rng, dtype, &[2, 3, 4])),
                    Arg::Bool(false),
                    Arg::None,
                    Arg::Out(vec![2, 3, 4]),
                ],
            ),
        ];
        for (op, args) in &cases {
            let c = run(&cpu, op, args, dtype, Device::CPU, devs);
            let g = run(&gpu, op, args, dtype, Device::cuda(ix()), devs);
            compare(op, dtype, &c, &g);
            eprintln!("{op} {dtype}: ok");
        }
    }
}

#[test]
fn unsupported_cases_are_errors() {
    let Some(devs) = registry() else { return };
    let gpu = etch_kernels_cuda::cuda_registry();
    // A host input to a CUDA kernel: an error, not a crash.
    let a = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let o = Tensor::empty_on(ScalarType::Long, &[3], Device::cuda(ix()), devs).unwrap();
    let mut values = vec![
        EValue::Tensor(a.view()),
        EValue::Tensor(a.view()),
        EValue::Int(1),
        EValue::Tensor(o.view()),
    ];
    let idx = [0u32, 1, 2, 3, 3];
    // SAFETY: tensors held above.
    let mut ctx =
        unsafe { KernelContext::new(&mut values, &idx, "aten::add.out") }.with_devices(devs, false);
    let e = gpu.get("aten::add.out").unwrap()(&mut ctx).unwrap_err();
    assert_eq!(e.code(), etch_core::ErrorCode::InvalidArgument);
}
