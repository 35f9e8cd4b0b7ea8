//! `et_copy::_h2d_copy.out` and `et_copy::_d2h_copy.out`: the copies ExecuTorch's device
//! pass inserts at delegate boundaries. Bytes move only through the device's allocator.
//!
//! Checks, in order (upstream's, plus the gaps spec §20.19 lists): the source and
//! destination devices, equal dtypes, the same dim order, `out` resized to `self`'s shape
//! (dynamic shapes), then the copy. A zero-byte copy makes no allocator call. No allocator
//! for the device is `NotFound`; a failed copy is `Internal`.

use etch_core::{Error, KernelContext, KernelRegistry, Result, TensorRef};

/// Registers both copy kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("et_copy::_h2d_copy.out", h2d_copy_out)?;
    reg.register("et_copy::_d2h_copy.out", d2h_copy_out)?;
    Ok(())
}

fn check_pair(op: &str, src: &TensorRef<'_>, out: &TensorRef<'_>) -> Result<()> {
    if src.dtype() != out.dtype() {
        return Err(Error::invalid_argument(format!(
            "{op}: dtype mismatch: self is {}, out is {}",
            src.dtype(),
            out.dtype()
        )));
    }
    // A byte copy is exact when both are dense in the same dim order (upstream's CUDA
    // path requires the default one; channels-last copies are fine here).
    if src.dim_order() != out.dim_order() {
        return Err(Error::invalid_argument(format!(
            "{op}: self and out have different dim orders ({:?} and {:?})",
            src.dim_order(),
            out.dim_order()
        )));
    }
    Ok(())
}

/// The allocator of `dev`'s type, or `NotFound` naming the device type.
fn allocator(
    ctx: &KernelContext<'_>,
    op: &str,
    dev: etch_core::Device,
) -> Result<std::sync::Arc<dyn etch_core::DeviceAllocator>> {
    ctx.devices()?.get(dev.kind).ok_or_else(|| {
        Error::not_found(format!(
            "{op}: no device allocator registered for device_type={} ({})",
            dev.kind as i8,
            dev.kind.name()
        ))
    })
}

fn h2d_copy_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "_h2d_copy";
    let src = ctx.tensor(0)?;
    let out = ctx.tensor(1)?;
    if !src.device().is_cpu() {
        return Err(Error::invalid_argument(format!(
            "{OP}: source tensor must be on CPU, got {}",
            src.device()
        )));
    }
    if out.device().is_cpu() {
        return Err(Error::invalid_argument(format!(
            "{OP}: destination tensor must be on a non-CPU device"
        )));
    }
    check_pair(OP, &src, &out)?;
    let out = ctx.resize_out(1, src.sizes()).map_err(|e| {
        Error::invalid_argument(format!(
            "{OP}: cannot resize out to self sizes (self.nbytes()={} exceeds out planned capacity {}?): {}",
            src.nbytes(),
            out.capacity(),
            e.message()
        ))
    })?;
    let bytes = src.bytes()?;
    if bytes.is_empty() {
        return Ok(());
    }
    let dev = out.device();
    let alloc = allocator(ctx, OP, dev)?;
    alloc
        .copy_host_to_device(out.data_ptr(), bytes, dev.index)
        .map_err(|e| Error::internal(format!("{OP}: copy_host_to_device failed: {e}")))
}

fn d2h_copy_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "_d2h_copy";
    let src = ctx.tensor(0)?;
    let out = ctx.tensor(1)?;
    if src.device().is_cpu() {
        return Err(Error::invalid_argument(format!(
            "{OP}: source tensor must be on a non-CPU device"
        )));
    }
    if !out.device().is_cpu() {
        return Err(Error::invalid_argument(format!(
            "{OP}: destination tensor must be on CPU, got {}",
            out.device()
        )));
    }
    check_pair(OP, &src, &out)?;
    let mut out = ctx.resize_out(1, src.sizes()).map_err(|e| {
        Error::invalid_argument(format!(
            "{OP}: cannot resize out to self sizes (self.nbytes()={} exceeds out planned capacity {}?): {}",
            src.nbytes(),
            out.capacity(),
            e.message()
        ))
    })?;
    let n = src.nbytes();
    if n == 0 {
        return Ok(());
    }
    let dev = src.device();
    let alloc = allocator(ctx, OP, dev)?;
    let dst = out.bytes_mut()?;
    alloc
        .copy_device_to_host(dst, src.data_ptr(), dev.index)
        .map_err(|e| Error::internal(format!("{OP}: copy_device_to_host failed: {e}")))
}
