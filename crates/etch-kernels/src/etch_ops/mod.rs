//! etch's own custom operators (`etch::` namespace), emitted by
//! `tools/export/qwen3_5_moe.py` and defined in `tools/export/etch_ops.py` (schemas, the
//! PyTorch reference each kernel is checked against). Their exact math is in docs/OPS.md.
//!
//! - [`gdn`]: `etch::gated_delta_net.out`, a Gated DeltaNet token mixer over `T` tokens
//!   (causal depthwise conv with its state, q/k L2 norm, gates, the delta rule with its
//!   recurrent state).
//! - [`moe`]: `etch::moe.out`, a top-k mixture-of-experts block with stacked experts and a
//!   sigmoid-gated shared expert.
//! - [`attention`]: `etch::attention.out`, causal GQA attention after writing `k` and `v`
//!   into the caches at the position held in a tensor, and `etch::gated_attention.out`,
//!   the same times `sigmoid(gate)`.
//! - [`norm`]: `etch::rms_norm.out`, `etch::rms_norm_gated.out` and
//!   `etch::add_rms_norm.out` (a residual add fused with the norm after it), Qwen 3.5's
//!   RMSNorms as one kernel each.
//! - [`rope`]: `etch::rope.out`, rotate-half rotary embedding on the first `R` features
//!   of each head (partial RoPE), and `etch::rope_cos_sin.out`, its cos/sin tables for the
//!   positions from `input_pos` (one op for the table's ~17 elementwise ops).
//! - [`qk_norm_rope`]: `etch::qk_norm_rope.out`, an attention layer's q/gate split, q and
//!   k RMSNorms and RoPE as one op.
//! - [`linear_group`]: `etch::linear_group.out`, several bias-free linears of one input in
//!   one call (made by `etch lower` from consecutive `aten::linear` calls).
//! - [`sample`]: `etch::sample.out`, next-token sampling (greedy, temperature, top-k,
//!   top-p) with a uniform number from the host.
//!
//! Each op has a `*_call` decoder (shapes and dtypes checked, nothing read from tensor
//! data) that the CUDA kernels share, and a CPU kernel.

pub mod attention;
pub mod gdn;
pub mod linear_group;
pub mod moe;
pub mod norm;
pub mod qk_norm_rope;
pub mod rope;
pub mod sample;

use etch_core::{Error, KernelRegistry, Result, ScalarType, TensorRef};

/// Registers the `etch::` kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("etch::gated_delta_net.out", gdn::gated_delta_net_out)?;
    reg.register("etch::moe.out", moe::moe_out)?;
    reg.register("etch::attention.out", attention::attention_out)?;
    reg.register("etch::gated_attention.out", attention::gated_attention_out)?;
    reg.register("etch::sample.out", sample::sample_out)?;
    reg.register("etch::rms_norm.out", norm::rms_norm_out)?;
    reg.register("etch::rms_norm_gated.out", norm::rms_norm_gated_out)?;
    reg.register("etch::add_rms_norm.out", norm::add_rms_norm_out)?;
    reg.register("etch::rope.out", rope::rope_out)?;
    reg.register("etch::rope_cos_sin.out", rope::rope_cos_sin_out)?;
    reg.register("etch::qk_norm_rope.out", qk_norm_rope::qk_norm_rope_out)?;
    reg.register("etch::linear_group.out", linear_group::linear_group_out)?;
    Ok(())
}

/// Checks that `t` has exactly `sizes`.
pub(crate) fn expect_shape(op: &str, what: &str, t: &TensorRef<'_>, sizes: &[usize]) -> Result<()> {
    if t.sizes() != sizes {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be {sizes:?}, got {:?}",
            t.sizes()
        )));
    }
    Ok(())
}

/// Checks that `t` is contiguous and has dtype `dt`.
pub(crate) fn expect_dtype(op: &str, what: &str, t: &TensorRef<'_>, dt: ScalarType) -> Result<()> {
    if t.dtype() != dt {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be {dt}, got {}",
            t.dtype()
        )));
    }
    crate::util::require_contiguous(op, what, t)
}

/// The position tensor: int64 with one element.
pub(crate) fn check_pos(op: &str, t: &TensorRef<'_>) -> Result<()> {
    if t.dtype() != ScalarType::Long || t.numel() != 1 {
        return Err(Error::invalid_argument(format!(
            "{op}: input_pos must be an int64 tensor of one element, got {} {:?}",
            t.dtype(),
            t.sizes()
        )));
    }
    Ok(())
}

/// The IO dtypes the `etch::` kernels take.
pub(crate) fn check_io_dtype(op: &str, what: &str, dt: ScalarType) -> Result<()> {
    match dt {
        ScalarType::Float | ScalarType::BFloat16 | ScalarType::Half => Ok(()),
        other => Err(Error::invalid_argument(format!(
            "{op}: {what} has dtype {other}; expected float32, bfloat16 or float16"
        ))),
    }
}

/// Runs `$body` with `$T` bound to f32, bf16 or f16.
macro_rules! dispatch_io {
    ($dt:expr, $op:expr, $what:expr, |$T:ident| $body:expr) => {{
        match $dt {
            etch_core::ScalarType::Float => {
                type $T = f32;
                $body
            }
            etch_core::ScalarType::Half => {
                type $T = etch_core::f16;
                $body
            }
            etch_core::ScalarType::BFloat16 => {
                type $T = etch_core::bf16;
                $body
            }
            other => Err($crate::util::bad_dtype($op, $what, other)),
        }
    }};
}
pub(crate) use dispatch_io;

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x * sigmoid(x)`.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}
