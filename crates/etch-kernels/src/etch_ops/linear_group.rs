//! `etch::linear_group.out(x, weights, *, out)`: several bias-free linears of one input,
//! `out[j] = x @ weights[j]^T`, as one call. `etch lower` makes it from consecutive
//! `aten::linear` calls that read the same activation (the projections of an attention or
//! a Gated DeltaNet layer), so that a device can run them as one kernel: for one row, one
//! GEMV launch over all their weight rows instead of a launch per projection (docs/OPS.md).
//!
//! `x [..., K]`; `weights[j] [N_j, K]`; `out[j] [..., N_j]`; one dtype (f32, f16, bf16);
//! `K > 0`; at most [`MAX_LINEARS`] linears. Each output is what `aten::linear` gives for its pair.

use super::check_io_dtype;
use crate::util::Shape;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// The most linears one call groups (the CUDA kernel's argument table).
pub const MAX_LINEARS: usize = 8;

/// A decoded `etch::linear_group` call: the outputs are resized; [`LinearGroupCall::pair`]
/// gives each (weight, out).
pub struct LinearGroupCall<'a> {
    /// `x [..., K]`.
    pub x: TensorRef<'a>,
    /// How many linears.
    pub len: usize,
    /// Rows of `x` (its elements over `K`).
    pub m: usize,
    /// `K`.
    pub k: usize,
}

impl<'a> LinearGroupCall<'a> {
    /// Weight and output of linear `j`.
    pub fn pair(
        &self,
        ctx: &KernelContext<'a>,
        j: usize,
    ) -> Result<(TensorRef<'a>, TensorRef<'a>)> {
        Ok((ctx.tensor_list_item(1, j)?, ctx.tensor_list_item(2, j)?))
    }
}

/// Decodes `etch::linear_group.out` (args [x, weights, out]) and resizes the outputs.
pub fn linear_group_call<'a>(ctx: &mut KernelContext<'a>) -> Result<LinearGroupCall<'a>> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    check_io_dtype(op, "x", x.dtype())?;
    crate::util::require_contiguous(op, "x", &x)?;
    let len = ctx.tensor_list_len(1)?;
    if len == 0 || len > MAX_LINEARS || ctx.tensor_list_len(2)? != len {
        return Err(Error::invalid_argument(format!(
            "{op}: expected 1 to {MAX_LINEARS} weights and as many outputs, got {} and {}",
            len,
            ctx.tensor_list_len(2)?
        )));
    }
    let k = x.sizes().last().copied().unwrap_or(0);
    if k == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: x must be [..., K] with K > 0, got {:?}",
            x.sizes()
        )));
    }
    for j in 0..len {
        let w = ctx.tensor_list_item(1, j)?;
        if w.dim() != 2 || w.sizes()[1] != k || w.dtype() != x.dtype() {
            return Err(Error::invalid_argument(format!(
                "{op}: weight {j} must be [N, {k}] of {}, got {} {:?}",
                x.dtype(),
                w.dtype(),
                w.sizes()
            )));
        }
        crate::util::require_contiguous(op, "weight", &w)?;
        let mut sizes = Shape::from_slice(x.sizes())?;
        let last = sizes.len() - 1;
        sizes[last] = w.sizes()[0];
        let out = ctx.resize_list_item(2, j, &sizes)?;
        if out.dtype() != x.dtype() {
            return Err(Error::invalid_argument(format!(
                "{op}: output {j} must be {}, got {}",
                x.dtype(),
                out.dtype()
            )));
        }
        crate::util::require_contiguous(op, "out", &out)?;
    }
    Ok(LinearGroupCall {
        m: x.numel() / k,
        x,
        len,
        k,
    })
}

/// `etch::linear_group.out` on the CPU: each linear as `aten::linear` computes it.
pub fn linear_group_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = linear_group_call(ctx)?;
    for j in 0..c.len {
        let (w, mut out) = c.pair(ctx, j)?;
        crate::linalg::linear_into(ctx.op_name(), &c.x, &w, None, &mut out)?;
    }
    Ok(())
}
