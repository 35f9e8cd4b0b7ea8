//! `etch::rope.out` (rope.cu), decoded by the CPU kernel's `rope_call`: one thread per
//! output element; `etch::rope_cos_sin.out` one thread per (position, frequency).

use super::io_kernel;
use crate::Family;
use crate::context::{Launch, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{KernelContext, Result};
use etch_kernels::etch_ops::rope::{rope_call, rope_cos_sin_call};

/// `struct RopeArgs` in rope.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RopeArgs {
    x: u64,
    cos: u64,
    sin: u64,
    out: u64,
    total: i64,
    seq: i64,
    heads: i64,
    dim: i64,
    rot: i64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RopeArgs {}

/// `etch::rope.out` on CUDA.
pub(crate) fn rope_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = rope_call(ctx)?;
    same_device(op, &[&c.out, &c.x, &c.cos, &c.sin])?;
    let total = c.x.numel();
    if total == 0 {
        return Ok(());
    }
    let [_, t, h, d, r] = c.dims;
    let name = io_kernel(op, c.x.dtype(), ["rope_f32", "rope_bf16", "rope_f16"])?;
    let mut a = RopeArgs {
        x: ptr(&c.x),
        cos: ptr(&c.cos),
        sin: ptr(&c.sin),
        out: ptr(&c.out),
        total: total as i64,
        seq: t as i64,
        heads: h as i64,
        dim: d as i64,
        rot: r as i64,
    };
    let cfg = LaunchConfig {
        grid_dim: (total.div_ceil(256).min(1 << 20) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Rope, name)?;
        let mut args = [arg(&mut a)];
        // SAFETY: x/out hold `total` elements and cos/sin T x R, contiguous on this device
        // (checked by `rope_call`); the argument matches `rope_*(RopeArgs)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

/// `struct RopeCosSinArgs` in rope.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RopeCosSinArgs {
    pos: u64,
    cos: u64,
    sin: u64,
    seq: i64,
    dim: i64,
    theta: f32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RopeCosSinArgs {}

/// `etch::rope_cos_sin.out` on CUDA (decoded by the CPU kernel's `rope_cos_sin_call`).
pub(crate) fn rope_cos_sin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = rope_cos_sin_call(ctx)?;
    same_device(op, &[&c.cos, &c.sin, &c.pos])?;
    let [t, dim] = c.dims;
    let total = t * (dim / 2);
    if total == 0 {
        return Ok(());
    }
    let name = io_kernel(
        op,
        c.cos.dtype(),
        ["rope_cos_sin_f32", "rope_cos_sin_bf16", "rope_cos_sin_f16"],
    )?;
    let mut a = RopeCosSinArgs {
        pos: ptr(&c.pos),
        cos: ptr(&c.cos),
        sin: ptr(&c.sin),
        seq: t as i64,
        dim: dim as i64,
        theta: c.theta,
    };
    let cfg = LaunchConfig {
        grid_dim: (total.div_ceil(256).min(1 << 20) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, c.cos.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Rope, name)?;
        let mut args = [arg(&mut a)];
        // SAFETY: cos/sin hold T x dim elements and input_pos one int64, contiguous on this
        // device (checked by `rope_cos_sin_call` and `same_device`); the argument matches
        // `rope_cos_sin_*(RopeCosSinArgs)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}
