//! `quantized_decomposed::` ops of ExecuTorch's LLM recipes on CUDA (quantized.cu): the
//! per-token quantization of the quantized KV-cache recipe
//! (`choose_qparams_per_token_asymmetric`, `quantize_per_token`) and the weight-only
//! quantized embeddings (`embedding_byte`, `embedding_4bit`, `.out` and `.dtype_out`).
//! Arguments are decoded and checked by the CPU kernels' `*_call` functions
//! (`etch_kernels::quantized`); the kernels repeat the CPU's float32 / float64 arithmetic
//! operation by operation, so results are the CPU's bit for bit. Indices are checked on
//! the device (the device error word), never read by the host.

use crate::Family;
use crate::context::{Launch, config, rows_config, with_device};
use crate::etch_ops::grid_dim;
use crate::util::{arg, dt_code, ptr, same_device};
use etch_core::{KernelContext, Result, ScalarType};
use etch_kernels::quantized::{
    choose_qparams_per_token_call, quantize_per_token_call, quantized_embedding_call,
};

/// `struct QParams` in quantized.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct QParams {
    x: u64,
    scales: u64,
    zps: u64,
    rows: i64,
    d: i64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for QParams {}

/// `struct QQuant` in quantized.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct QQuant {
    x: u64,
    scales: u64,
    zps: u64,
    out: u64,
    n: i64,
    d: i64,
    qmin: i64,
    qmax: i64,
    odt: i32,
    pad: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for QQuant {}

/// `struct QEmbed` in quantized.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct QEmbed {
    w: u64,
    scales: u64,
    zps: u64,
    idx: u64,
    out: u64,
    err: u64,
    n_idx: i64,
    rows: i64,
    dim: i64,
    row_bytes: i64,
    group_size: i64,
    groups: i64,
    sdt: i32,
    odt: i32,
    is_signed: i32,
    packed4: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for QEmbed {}

/// Rows handled by one block of `q_choose_qparams` (a warp each).
const ROWS_PER_BLOCK: usize = 8;

/// `choose_qparams_per_token_asymmetric.out` on CUDA.
pub(crate) fn choose_qparams_per_token_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = choose_qparams_per_token_call(ctx)?;
    same_device(op, &[&c.input, &c.scales, &c.zero_points])?;
    let d = c.input.sizes().last().copied().unwrap_or(1);
    let rows = c.input.numel() / d.max(1);
    if rows == 0 {
        return Ok(());
    }
    let blocks = grid_dim(
        op,
        "tokens",
        rows.div_ceil(ROWS_PER_BLOCK),
        i32::MAX as usize,
    )?;
    let mut a = QParams {
        x: ptr(&c.input),
        scales: ptr(&c.scales),
        zps: ptr(&c.zero_points),
        rows: rows as i64,
        d: d as i64,
    };
    let cfg = rows_config(blocks as usize, (ROWS_PER_BLOCK * 32) as u32);
    with_device(ctx, c.input.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Quantized, "q_choose_qparams")?;
        // SAFETY: input [rows, d] f32 and outputs [rows] f64 / i64, contiguous on this
        // device, as the decoder checked; the argument matches the kernel's.
        unsafe { l.launch_with(f, cfg, &mut [arg(&mut a)]) }
    })
}

/// `quantize_per_token.out` on CUDA.
pub(crate) fn quantize_per_token_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = quantize_per_token_call(ctx)?;
    same_device(op, &[&c.input, &c.scales, &c.zero_points, &c.out])?;
    let d = c.input.sizes().last().copied().unwrap_or(1);
    let n = c.input.numel();
    if n == 0 {
        return Ok(());
    }
    let mut a = QQuant {
        x: ptr(&c.input),
        scales: ptr(&c.scales),
        zps: ptr(&c.zero_points),
        out: ptr(&c.out),
        n: n as i64,
        d: d as i64,
        qmin: c.quant_min,
        qmax: c.quant_max,
        odt: dt_code(op, c.out.dtype())?,
        pad: 0,
    };
    with_device(ctx, c.input.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Quantized, "q_quantize")?;
        // SAFETY: input and out hold n elements, scales and zero points one per row of d,
        // contiguous on this device, as the decoder checked.
        unsafe { l.launch_with(f, config(n as i64), &mut [arg(&mut a)]) }
    })
}

/// `embedding_byte` / `embedding_4bit` (`.out` / `.dtype_out`) on CUDA.
fn quantized_embedding(ctx: &mut KernelContext<'_>, packed4: bool, has_dtype: bool) -> Result<()> {
    let op = ctx.op_name();
    let c = quantized_embedding_call(ctx, packed4, has_dtype)?;
    same_device(op, &[&c.out, &c.weight, &c.scales, &c.indices])?;
    if let Some(z) = &c.zero_points {
        same_device(op, &[&c.out, z])?;
    }
    let n = c.out.numel();
    if n == 0 {
        return Ok(());
    }
    let mut a = QEmbed {
        w: ptr(&c.weight),
        scales: ptr(&c.scales),
        zps: c.zero_points.as_ref().map_or(0, ptr),
        idx: ptr(&c.indices),
        out: ptr(&c.out),
        err: 0,
        n_idx: c.indices.numel() as i64,
        rows: c.weight.sizes()[0] as i64,
        dim: c.dim as i64,
        row_bytes: c.weight.sizes()[1] as i64,
        group_size: c.group_size as i64,
        groups: (c.dim / c.group_size.max(1)) as i64,
        sdt: dt_code(op, c.scales.dtype())?,
        odt: dt_code(op, c.out.dtype())?,
        is_signed: i32::from(c.weight.dtype() == ScalarType::Char),
        packed4: i32::from(packed4),
    };
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        let f = l.function(Family::Quantized, "q_embedding")?;
        // SAFETY: weight [rows, row_bytes], scales (and zero points) [rows, groups],
        // indices and out as the decoder checked, contiguous on this device; each index is
        // checked on the device before its row is read.
        unsafe { l.launch_with(f, config(n as i64), &mut [arg(&mut a)]) }
    })
}

pub(crate) fn embedding_byte_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, false, false)
}

pub(crate) fn embedding_byte_dtype_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, false, true)
}

pub(crate) fn embedding_4bit_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, true, false)
}

pub(crate) fn embedding_4bit_dtype_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, true, true)
}
