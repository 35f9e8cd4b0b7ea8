//! Small helpers shared by the CUDA kernel families.

use etch_core::{Error, Result, ScalarType, TensorRef};

/// Most dims a CUDA kernel's geometry holds (`MAXD` in common.cuh).
pub(crate) const MAX_DIMS: usize = 16;

/// A kernel argument pointer (cuLaunchKernel reads each argument through one).
pub(crate) fn arg<T>(v: &mut T) -> *mut std::ffi::c_void {
    v as *mut T as *mut std::ffi::c_void
}

/// A tensor's device address.
pub(crate) fn ptr(t: &TensorRef<'_>) -> u64 {
    t.data_ptr() as usize as u64
}

/// The dtype code the CUDA sources use (ExecuTorch's ScalarType value), for the dtypes
/// the kernels load and store.
pub(crate) fn dt_code(op: &str, t: ScalarType) -> Result<i32> {
    use ScalarType::*;
    match t {
        Byte | Char | Short | Int | Long | Half | Float | Double | Bool | BFloat16 => {
            Ok(t as i8 as i32)
        }
        other => Err(Error::not_supported(format!(
            "{op}: the CUDA kernels do not handle {other} tensors"
        ))),
    }
}

/// Checks that every tensor is on the device of the first.
pub(crate) fn same_device(op: &str, ts: &[&TensorRef<'_>]) -> Result<()> {
    let d = ts[0].device();
    for t in ts {
        if t.device() != d {
            return Err(Error::invalid_argument(format!(
                "{op}: tensors on {d} and {}",
                t.device()
            )));
        }
    }
    Ok(())
}

/// Checks that `t` has at most [`MAX_DIMS`] dims.
pub(crate) fn check_rank(op: &str, n: usize) -> Result<()> {
    if n > MAX_DIMS {
        return Err(Error::not_supported(format!(
            "{op}: the CUDA kernel handles at most {MAX_DIMS} dims, got {n}"
        )));
    }
    Ok(())
}

/// Row-major strides of `sizes`.
pub(crate) fn contiguous(sizes: &[usize]) -> [i64; MAX_DIMS] {
    let mut s = [0i64; MAX_DIMS];
    let mut acc = 1i64;
    for d in (0..sizes.len().min(MAX_DIMS)).rev() {
        s[d] = acc;
        acc *= sizes[d] as i64;
    }
    s
}
