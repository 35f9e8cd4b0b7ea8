//! etch's own `etch::` ops on CUDA, one module and one CUDA source each (`gdn.cu`, `moe.cu`,
//! `attention.cu`, `rope.cu`, `sample.cu`, sharing `io.cuh`; `etch::linear_group`'s GEMV is
//! in `linalg.cu`). Arguments are decoded and checked by the
//! CPU kernels' `*_call` functions (`etch_kernels::etch_ops`), the math follows the CPU
//! kernels (float32 accumulation, rounding to the IO dtype at the same points), and values
//! held in tensors (`input_pos`, the sampling parameters) are read on the device, so no
//! kernel waits for the host. Temporary device memory comes from the per-device scratch
//! buffer.

pub(crate) mod attention;
pub(crate) mod gdn;
pub(crate) mod linear_group;
pub(crate) mod moe;
pub(crate) mod rope;
pub(crate) mod sample;

use etch_core::{Error, Result, ScalarType};

/// The entry point of `names` (the f32, bf16 and f16 kernels) for IO dtype `dt`.
pub(crate) fn io_kernel(
    op: &str,
    dt: ScalarType,
    names: [&'static str; 3],
) -> Result<&'static str> {
    match dt {
        ScalarType::Float => Ok(names[0]),
        ScalarType::BFloat16 => Ok(names[1]),
        ScalarType::Half => Ok(names[2]),
        other => Err(Error::invalid_argument(format!(
            "{op}: the CUDA kernel takes float32, bfloat16 or float16, got {other}"
        ))),
    }
}

/// `n` as a grid dimension of at most `max` blocks.
pub(crate) fn grid_dim(op: &str, what: &str, n: usize, max: usize) -> Result<u32> {
    if n > max {
        return Err(Error::not_supported(format!(
            "{op}: {n} {what} exceed the CUDA kernel's {max}"
        )));
    }
    Ok(n as u32)
}

/// The product of `dims` (a byte count), or an error when it overflows.
pub(crate) fn bytes(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::invalid_argument(format!("{op}: scratch size overflows")))
}

/// Offsets of consecutive scratch regions of `sizes` bytes (each 256-byte aligned) and the
/// bytes they take together.
pub(crate) fn carve<const N: usize>(op: &str, sizes: [usize; N]) -> Result<([u64; N], usize)> {
    let mut offs = [0u64; N];
    let mut end = 0usize;
    for (o, s) in offs.iter_mut().zip(sizes) {
        *o = end as u64;
        end = end
            .checked_add(s.next_multiple_of(256))
            .ok_or_else(|| Error::invalid_argument(format!("{op}: scratch size overflows")))?;
    }
    Ok((offs, end))
}

/// The value of environment variable `name` as a number (a tuning switch, read once by its
/// caller), or `default` when unset or not a number.
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
