//! `etch::rope.out` (rope.cu), decoded by the CPU kernel's `rope_call`: one thread per
//! output element; `etch::rope_cos_sin.out` one thread per (position, frequency);
//! `etch::qk_norm_rope.out` one warp per head row.

use super::{grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::etch_ops::qk_norm_rope::qk_norm_rope_call;
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

/// `struct QkNormRopeArgs` in rope.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct QkNormRopeArgs {
    qg: u64,
    k: u64,
    wq: u64,
    wk: u64,
    cos: u64,
    sin: u64,
    q: u64,
    gate: u64,
    kout: u64,
    tokens: i64,
    hq: i64,
    hkv: i64,
    dim: i64,
    rot: i64,
    seq: i64,
    eps: f32,
    offset: f32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for QkNormRopeArgs {}

/// Widest head `qk_norm_rope_*` takes (`QKNR_MAXD`: its shared-memory row).
const QKNR_MAXD: usize = 1024;

/// `etch::qk_norm_rope.out` on CUDA (decoded by the CPU kernel's `qk_norm_rope_call`): one
/// warp per query or key head row.
pub(crate) fn qk_norm_rope_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = qk_norm_rope_call(ctx)?;
    let [q, gate, kout] = &c.out;
    same_device(
        op,
        &[
            q, gate, kout, &c.qg, &c.k, &c.w[0], &c.w[1], &c.cs[0], &c.cs[1],
        ],
    )?;
    let [tokens, hq, hkv, d, r, t] = c.dims;
    if d > QKNR_MAXD {
        return Err(Error::not_supported(format!(
            "{op}: head_dim {d} exceeds the CUDA kernel's {QKNR_MAXD}"
        )));
    }
    let rows = tokens * (hq + hkv);
    if rows == 0 {
        return Ok(());
    }
    let name = io_kernel(
        op,
        c.qg.dtype(),
        ["qk_norm_rope_f32", "qk_norm_rope_bf16", "qk_norm_rope_f16"],
    )?;
    let mut a = QkNormRopeArgs {
        qg: ptr(&c.qg),
        k: ptr(&c.k),
        wq: ptr(&c.w[0]),
        wk: ptr(&c.w[1]),
        cos: ptr(&c.cs[0]),
        sin: ptr(&c.cs[1]),
        q: ptr(q),
        gate: ptr(gate),
        kout: ptr(kout),
        tokens: tokens as i64,
        hq: hq as i64,
        hkv: hkv as i64,
        dim: d as i64,
        rot: r as i64,
        seq: t as i64,
        eps: c.eps,
        offset: c.offset,
    };
    let cfg = LaunchConfig {
        grid_dim: (
            grid_dim(op, "head rows", rows.div_ceil(8), i32::MAX as usize)?,
            1,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, q.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Rope, name)?;
        let mut args = [arg(&mut a)];
        // SAFETY: every tensor is contiguous on this device with the shapes
        // `qk_norm_rope_call` checked (head_dim <= QKNR_MAXD, the kernel's shared row); the
        // argument matches `qk_norm_rope_*(QkNormRopeArgs)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}
