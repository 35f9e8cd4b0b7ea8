//! Running one operator on the CPU and on a GPU with the same arguments and comparing the
//! results: shared by the op-vs-CPU tests (`etch_ops_vs_cpu.rs`, `llama_vs_cpu.rs`), each
//! of which uses some of the helpers.
#![allow(dead_code)]

use crate::common::{Rng, ix};
use etch_core::{
    Device, DeviceRegistry, DeviceType, Dynamism, EValue, KernelContext, KernelRegistry,
    ScalarType, Tensor, TensorImpl, bf16, f16,
};
use etch_devices::cuda::CudaAllocator;

use ScalarType::{Byte, Char, Double, Float as F32, Half as F16, Int, Long, Short};

/// `v` as a tensor of `dtype` (f32, f16 or bf16).
pub fn tensor(v: &[f32], dtype: ScalarType, sizes: &[usize]) -> Tensor {
    match dtype {
        F32 => Tensor::from_slice(v, sizes),
        F16 => Tensor::from_slice(
            &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
            sizes,
        ),
        _ => Tensor::from_slice(
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
            sizes,
        ),
    }
    .unwrap()
}

/// Uniform values in [-scale, scale).
pub fn rand(rng: &mut Rng, dtype: ScalarType, sizes: &[usize], scale: f32) -> Tensor {
    let n: usize = sizes.iter().product();
    let v: Vec<f32> = (0..n).map(|_| 0.5 * rng.f() * scale).collect();
    tensor(&v, dtype, sizes)
}

/// A position tensor (int64 `[1]`).
pub fn pos(p: i64) -> A {
    A::In(Tensor::from_slice(&[p], &[1]).unwrap())
}

/// One argument of an operator call.
pub enum A {
    In(Tensor),
    /// Updated in place: compared after the call.
    State(Tensor),
    Int(i64),
    Double(f64),
    Bool(bool),
    None,
    Out(ScalarType, Vec<usize>),
    /// A list of input tensors.
    InList(Vec<Tensor>),
    /// A list of outputs of one dtype (an op returning `()`: no return value).
    OutList(ScalarType, Vec<Vec<usize>>),
}

/// An output tensor of `dtype` and `sizes` on `device` (its capacity the bound of a
/// dynamic shape) and its value.
fn out_value(
    dtype: ScalarType,
    sizes: &[usize],
    device: Device,
    devs: &DeviceRegistry,
) -> (Tensor, EValue) {
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
    (t, EValue::Tensor(imp))
}

/// Runs `op` with its tensors on `device`; returns the states, then the outputs, on the
/// host.
pub fn run(
    reg: &KernelRegistry,
    op: &str,
    args: &[A],
    device: Device,
    devs: &DeviceRegistry,
) -> Vec<Tensor> {
    let (results, r) = try_run(reg, op, args, device, devs);
    r.unwrap_or_else(|e| panic!("{op} on {device}: {e}"));
    results
}

/// [`run`], returning the kernel's error (or, on a GPU, the device error word's) instead of
/// panicking, with the states and outputs as they are after the call.
pub fn try_run(
    reg: &KernelRegistry,
    op: &str,
    args: &[A],
    device: Device,
    devs: &DeviceRegistry,
) -> (Vec<Tensor>, etch_core::Result<()>) {
    let mut keep = Vec::new();
    let mut values = Vec::new();
    let mut states = Vec::new();
    let mut outs = Vec::new();
    // Lists: (argument, their items' values), appended after the arguments' values.
    let mut lists: Vec<(usize, Vec<EValue>)> = Vec::new();
    let mut rets = Vec::new();
    for (i, a) in args.iter().enumerate() {
        values.push(match a {
            A::In(t) | A::State(t) => {
                let t = t.to_device(device, devs).unwrap();
                let v = t.view();
                if matches!(a, A::State(_)) {
                    states.push(keep.len());
                }
                keep.push(t);
                EValue::Tensor(v)
            }
            A::Out(dtype, sizes) => {
                let (t, v) = out_value(*dtype, sizes, device, devs);
                outs.push(keep.len());
                rets.push(i as u32);
                keep.push(t);
                v
            }
            A::InList(ts) => {
                let mut items = Vec::new();
                for t in ts {
                    let t = t.to_device(device, devs).unwrap();
                    items.push(EValue::Tensor(t.view()));
                    keep.push(t);
                }
                lists.push((i, items));
                EValue::None
            }
            A::OutList(dtype, sizes) => {
                let mut items = Vec::new();
                for sz in sizes {
                    let (t, v) = out_value(*dtype, sz, device, devs);
                    outs.push(keep.len());
                    keep.push(t);
                    items.push(v);
                }
                lists.push((i, items));
                EValue::None
            }
            A::Int(x) => EValue::Int(*x),
            A::Double(x) => EValue::Double(*x),
            A::Bool(x) => EValue::Bool(*x),
            A::None => EValue::None,
        });
    }
    for (i, items) in lists {
        let first = values.len() as u32;
        let n = items.len() as u32;
        values.extend(items);
        values[i] = EValue::TensorList((first..first + n).collect());
    }
    let mut idx: Vec<u32> = (0..args.len() as u32).collect();
    idx.extend(rets);
    let f = reg.get(op).unwrap_or_else(|| panic!("{op} not registered"));
    // SAFETY: every tensor points at memory held by `keep` for the call.
    let mut ctx =
        unsafe { KernelContext::new(&mut values, &idx, op) }.with_devices(devs, device.is_cpu());
    let mut ran = f(&mut ctx);
    if !device.is_cpu() {
        let alloc = devs.get(DeviceType::Cuda).unwrap();
        let cuda = alloc.as_any().downcast_ref::<CudaAllocator>().unwrap();
        let checked = etch_kernels_cuda::check_device_errors(cuda, device.index);
        ran = ran.and(checked);
    }
    let results = states
        .into_iter()
        .chain(outs)
        .map(|k| keep[k].to_cpu().unwrap())
        .collect();
    (results, ran)
}

/// Relative tolerance of a result of `dtype` (exact for integers and float64).
fn tol_of(dtype: ScalarType) -> f64 {
    match dtype {
        F32 => 1e-4,
        F16 => 1e-2,
        Long | Int | Short | Char | Byte | Double => 0.0,
        _ => 3e-2,
    }
}

/// The least precise floating-point dtype among the call's tensors: a float32 result (a
/// recurrent state, say) computed from bfloat16-rounded intermediates can differ between
/// two correct kernels by what one rounding flip of those intermediates makes, so it is
/// held to that dtype's tolerance, not float32's.
fn compute_tol(args: &[A]) -> f64 {
    args.iter()
        .flat_map(|a| match a {
            A::In(t) | A::State(t) => vec![t.dtype()],
            A::Out(d, _) | A::OutList(d, _) => vec![*d],
            A::InList(ts) => ts.iter().map(|t| t.dtype()).collect(),
            _ => vec![],
        })
        .filter(|d| matches!(d, F32 | F16 | ScalarType::BFloat16))
        .map(tol_of)
        .fold(0.0, f64::max)
}

/// Runs `op` on the CPU and on the GPU and compares the states and outputs: exactly for
/// integer and float64 results, else relative to each element with a floor relative to the
/// tensor's scale (1e-4 for f32, 1e-2 for f16, 3e-2 for bf16; a float result of a call
/// with lower-precision tensors takes their tolerance, see [`compute_tol`]). Prints the
/// worst relative error of each result.
pub fn check(
    reg: (&KernelRegistry, &KernelRegistry),
    devs: &DeviceRegistry,
    what: &str,
    op: &str,
    args: &[A],
) {
    let cpu = run(reg.0, op, args, Device::CPU, devs);
    let gpu = run(reg.1, op, args, Device::cuda(ix()), devs);
    let mut worst = Vec::new();
    for (k, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        assert_eq!(c.sizes(), g.sizes(), "{what}: result {k} shape");
        let tol = match tol_of(c.dtype()) {
            0.0 => 0.0,
            t => t.max(compute_tol(args)),
        };
        let (c, g) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        // Relative to each element, with a floor relative to the tensor's scale.
        let floor = 0.05 * c.iter().fold(0f64, |m, x| m.max(x.abs()));
        let (mut w, mut at) = (0f64, 0usize);
        for (i, (x, y)) in c.iter().zip(&g).enumerate() {
            let r = (x - y).abs() / (floor + x.abs()).max(f64::MIN_POSITIVE);
            if r > w || r.is_nan() {
                (w, at) = (r, i);
            }
            assert!(
                (x - y).abs() <= tol * (floor + x.abs()),
                "{what}: result {k} element {i}: cpu {x}, cuda {y} (tolerance {tol})"
            );
        }
        worst.push(format!("{w:.1e} at {at}"));
    }
    eprintln!(
        "{what}: ok (worst relative error per result: {})",
        worst.join(", ")
    );
}
