//! `et_copy::_h2d_copy.out` / `_d2h_copy.out` on the simulated device (spec §15 and the
//! gaps of §20.19 closed: dtype and contiguity checks, no allocator call for zero bytes).

use etch_core::{
    Device, DeviceAllocator, DeviceRegistry, Dynamism, EValue, ErrorCode, KernelContext, Result,
    ScalarType, TensorImpl,
};
use etch_devices::SimulatedAllocator;
use std::sync::Arc;

fn setup() -> (DeviceRegistry, Arc<SimulatedAllocator>) {
    let r = DeviceRegistry::new();
    let sim = Arc::new(SimulatedAllocator::new(2));
    r.register(sim.clone()).unwrap();
    (r, sim)
}

struct Dev {
    ptr: *mut u8,
    sim: Arc<SimulatedAllocator>,
    index: i8,
}
impl Drop for Dev {
    fn drop(&mut self) {
        self.sim.deallocate(self.ptr, self.index).unwrap();
    }
}

fn dev_tensor(
    sim: &Arc<SimulatedAllocator>,
    sizes: &[usize],
    dtype: ScalarType,
    dynamism: Dynamism,
    index: i8,
) -> (Dev, TensorImpl) {
    let n: usize = sizes.iter().product::<usize>() * dtype.element_size();
    let ptr = sim.allocate(n, index, 16).unwrap();
    let t = TensorImpl::new(dtype, sizes, None, dynamism, Device::cuda(index), ptr, n).unwrap();
    (
        Dev {
            ptr,
            sim: sim.clone(),
            index,
        },
        t,
    )
}

fn host_tensor(buf: &mut Vec<f32>, sizes: &[usize], dynamism: Dynamism) -> TensorImpl {
    let n = buf.len() * 4;
    TensorImpl::new(
        ScalarType::Float,
        sizes,
        None,
        dynamism,
        Device::CPU,
        buf.as_mut_ptr() as *mut u8,
        n,
    )
    .unwrap()
}

fn run(
    op: &str,
    reg: &DeviceRegistry,
    src: TensorImpl,
    out: TensorImpl,
) -> (Result<()>, TensorImpl) {
    let kernels = etch_kernels::portable_registry();
    let f = kernels.get(op).unwrap();
    let mut values = vec![
        EValue::Tensor(src),
        EValue::Tensor(out),
        EValue::Tensor(out),
    ];
    let args = [0u32, 1, 2];
    // SAFETY: every tensor points at live host memory or live simulated device memory.
    let mut ctx = unsafe { KernelContext::new(&mut values, &args, op) }.with_devices(reg, true);
    let r = f(&mut ctx);
    let out = *values[1].as_tensor().unwrap();
    (r, out)
}

const H2D: &str = "et_copy::_h2d_copy.out";
const D2H: &str = "et_copy::_d2h_copy.out";

#[test]
fn h2d_then_d2h_round_trips_through_the_allocator() {
    let (reg, sim) = setup();
    let mut host: Vec<f32> = (0..6).map(|i| i as f32 * 1.5).collect();
    let src = host_tensor(&mut host, &[2, 3], Dynamism::Static);
    // A dynamic out planned at the upper bound [4, 3] shrinks to [2, 3].
    let (_d, out) = dev_tensor(&sim, &[4, 3], ScalarType::Float, Dynamism::DynamicBound, 1);
    let (r, out) = run(H2D, &reg, src, out);
    r.unwrap();
    assert_eq!(out.sizes(), &[2, 3]);
    let s = sim.stats();
    assert_eq!((s.h2d_copies, s.h2d_bytes), (1, 24));
    let mut back = vec![0f32; 6];
    let dst = host_tensor(&mut back, &[2, 3], Dynamism::Static);
    let (r, _) = run(D2H, &reg, out, dst);
    r.unwrap();
    assert_eq!(back, host);
    assert_eq!(sim.stats().d2h_copies, 1);
    assert!(sim.foreign_writes().is_empty());
}

#[test]
fn device_preconditions_and_errors() {
    let (reg, sim) = setup();
    let mut host = vec![1f32; 4];
    let src = host_tensor(&mut host, &[4], Dynamism::Static);
    let (_a, dev) = dev_tensor(&sim, &[4], ScalarType::Float, Dynamism::Static, 0);
    let code = |r: (Result<()>, TensorImpl)| r.0.unwrap_err().code();
    // Wrong directions.
    assert_eq!(code(run(H2D, &reg, dev, dev)), ErrorCode::InvalidArgument);
    assert_eq!(code(run(H2D, &reg, src, src)), ErrorCode::InvalidArgument);
    assert_eq!(code(run(D2H, &reg, src, src)), ErrorCode::InvalidArgument);
    assert_eq!(code(run(D2H, &reg, dev, dev)), ErrorCode::InvalidArgument);
    // Dtype mismatch.
    let (_b, dev_i) = dev_tensor(&sim, &[4], ScalarType::Int, Dynamism::Static, 0);
    assert_eq!(code(run(H2D, &reg, src, dev_i)), ErrorCode::InvalidArgument);
    // Dim orders that differ (the same one on both sides is a plain byte copy).
    let mut h2 = vec![0f32; 6];
    let src2 = host_tensor(&mut h2, &[2, 3], Dynamism::Static);
    let (_c, d) = dev_tensor(&sim, &[2, 3], ScalarType::Float, Dynamism::Static, 0);
    let cl = TensorImpl::new(
        ScalarType::Float,
        &[2, 3],
        Some(&[1, 0]),
        Dynamism::Static,
        d.device(),
        d.data_ptr(),
        24,
    )
    .unwrap();
    assert_eq!(code(run(H2D, &reg, src2, cl)), ErrorCode::InvalidArgument);
    let src_cl = TensorImpl::new(
        ScalarType::Float,
        &[2, 3],
        Some(&[1, 0]),
        Dynamism::Static,
        src2.device(),
        src2.data_ptr(),
        24,
    )
    .unwrap();
    assert!(run(H2D, &reg, src_cl, cl).0.is_ok());
    // A static out of another shape, and a dynamic out too small: no copy happens.
    let (_e, small) = dev_tensor(&sim, &[2], ScalarType::Float, Dynamism::Static, 0);
    assert_eq!(code(run(H2D, &reg, src, small)), ErrorCode::InvalidArgument);
    let (_f, small_dyn) = dev_tensor(&sim, &[2], ScalarType::Float, Dynamism::DynamicBound, 0);
    assert_eq!(
        code(run(H2D, &reg, src, small_dyn)),
        ErrorCode::InvalidArgument
    );
    // Only the same-dim-order copy above reached the allocator.
    assert_eq!(sim.stats().h2d_copies, 1);
    // No allocator for the device.
    let empty = DeviceRegistry::new();
    assert_eq!(code(run(H2D, &empty, src, dev)), ErrorCode::NotFound);
    // A failed copy (a device pointer the allocator does not know) is Internal.
    let mut fake = vec![0f32; 4];
    let bogus = TensorImpl::new(
        ScalarType::Float,
        &[4],
        None,
        Dynamism::Static,
        Device::cuda(0),
        fake.as_mut_ptr() as *mut u8,
        16,
    )
    .unwrap();
    assert_eq!(code(run(H2D, &reg, src, bogus)), ErrorCode::Internal);
    assert_eq!(code(run(D2H, &reg, bogus, src)), ErrorCode::Internal);
}

#[test]
fn zero_byte_copies_make_no_allocator_call() {
    let (reg, sim) = setup();
    let mut host: Vec<f32> = vec![];
    let src = host_tensor(&mut host, &[0, 3], Dynamism::Static);
    let (_d, out) = dev_tensor(&sim, &[0, 3], ScalarType::Float, Dynamism::Static, 0);
    let (r, _) = run(H2D, &reg, src, out);
    r.unwrap();
    let (r, _) = run(D2H, &reg, out, src);
    r.unwrap();
    // Even with no allocator registered, an empty copy succeeds without touching one.
    let (r, _) = run(H2D, &DeviceRegistry::new(), src, out);
    r.unwrap();
    let s = sim.stats();
    assert_eq!((s.h2d_copies, s.d2h_copies), (0, 0));
}
