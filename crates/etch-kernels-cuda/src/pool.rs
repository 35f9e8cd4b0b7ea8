//! 2-D pooling and upsampling (conv.cu): `max_pool2d_with_indices`, `avg_pool2d`,
//! `_adaptive_avg_pool2d`, `upsample_nearest2d.vec` and `upsample_bilinear2d.vec`, one
//! thread per output element, with the CPU kernels' argument decoding, output sizes and
//! index/weight arithmetic (`etch_kernels::conv`, `etch_kernels::upsample`). Tensors are
//! read and written through their strides (channels-last works).

use crate::context::with_device;
use crate::conv::{T4, run};
use crate::util::{dt_code, ptr, same_device};
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};
use etch_kernels::conv::{out_sizes, pair, pool_out_size, view4};
use etch_kernels::upsample::{nchw, out_size};
use etch_kernels::util::{bad_dtype, same_dtype};

/// `struct PoolArgs` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PoolArgs {
    x: u64,
    out: u64,
    idx: u64,
    dt: i32,
    include_pad: i32,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    oh: i64,
    ow: i64,
    divisor: i64,
    xv: T4,
    ov: T4,
    iv: T4,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for PoolArgs {}

/// `struct UpArgs` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct UpArgs {
    x: u64,
    out: u64,
    dt: i32,
    es: i32,
    align: i32,
    pad: i32,
    ratio_h: f64,
    ratio_w: f64,
    xv: T4,
    ov: T4,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for UpArgs {}

fn float_input(op: &str, t: &TensorRef<'_>) -> Result<i32> {
    if !t.dtype().is_floating() {
        return Err(bad_dtype(op, "input", t.dtype()));
    }
    dt_code(op, t.dtype())
}

fn by_dtype(f32_name: &'static str, f64_name: &'static str, t: ScalarType) -> &'static str {
    if t == ScalarType::Double {
        f64_name
    } else {
        f32_name
    }
}

/// Kernel size, stride (defaulting to the kernel size) and padding: args 1, 2 and 3.
fn window(op: &str, ctx: &KernelContext<'_>) -> Result<[usize; 6]> {
    let (kh, kw) = pair(op, "kernel_size", ctx.int_list(1)?, false, 0)?;
    let stride = ctx.int_list(2)?;
    let (sh, sw) = if stride.is_empty() {
        (kh, kw)
    } else {
        pair(op, "stride", stride, false, 0)?
    };
    let (ph, pw) = pair(op, "padding", ctx.int_list(3)?, false, 0)?;
    Ok([kh, kw, sh, sw, ph, pw])
}

fn launch_pool(
    ctx: &KernelContext<'_>,
    out: &TensorRef<'_>,
    name: &'static str,
    mut a: PoolArgs,
) -> Result<()> {
    let n = (a.xv.n * a.xv.c) as usize * (a.oh * a.ow) as usize;
    if n == 0 {
        return Ok(());
    }
    with_device(ctx, out.device(), |mut l| run(&mut l, name, n, &mut a))
}

/// `max_pool2d_with_indices.out`: args [self, kernel_size, stride, padding, dilation,
/// ceil_mode, out, indices]. Indices are flat offsets within each H×W plane.
pub(crate) fn max_pool2d_with_indices_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::max_pool2d_with_indices.out";
    let x = ctx.tensor(0)?;
    let [kh, kw, sh, sw, ph, pw] = window(OP, ctx)?;
    let (dh, dw) = pair(OP, "dilation", ctx.int_list(4)?, false, 0)?;
    let ceil = ctx.bool(5)?;
    let xv = view4(OP, &x, false)?;
    let oh = pool_out_size(OP, xv.h, kh, sh, ph, dh, ceil)?;
    let ow = pool_out_size(OP, xv.w, kw, sw, pw, dw, ceil)?;
    let osz = out_sizes(&x, oh, ow)?;
    let out = ctx.resize_out(6, &osz)?;
    let idx = ctx.resize_out(7, &osz)?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    if idx.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{OP}: indices must be int64, got {}",
            idx.dtype()
        )));
    }
    same_device(OP, &[&x, &out, &idx])?;
    let i = |v: usize| v as i64;
    let a = PoolArgs {
        x: ptr(&x),
        out: ptr(&out),
        idx: ptr(&idx),
        dt: float_input(OP, &x)?,
        kh: i(kh),
        kw: i(kw),
        sh: i(sh),
        sw: i(sw),
        ph: i(ph),
        pw: i(pw),
        dh: i(dh),
        dw: i(dw),
        oh: i(oh),
        ow: i(ow),
        xv: xv.into(),
        ov: view4(OP, &out, false)?.into(),
        iv: view4(OP, &idx, false)?.into(),
        ..Default::default()
    };
    let name = by_dtype("max_pool2d_f32", "max_pool2d_f64", x.dtype());
    launch_pool(ctx, &out, name, a)
}

/// `avg_pool2d.out`: args [self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override?, out].
pub(crate) fn avg_pool2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::avg_pool2d.out";
    let x = ctx.tensor(0)?;
    let [kh, kw, sh, sw, ph, pw] = window(OP, ctx)?;
    let ceil = ctx.bool(4)?;
    let include_pad = ctx.bool(5)?;
    let divisor = ctx.opt_int(6)?;
    if divisor == Some(0) {
        return Err(Error::invalid_argument(format!(
            "{OP}: divisor_override must be non-zero"
        )));
    }
    let xv = view4(OP, &x, false)?;
    let oh = pool_out_size(OP, xv.h, kh, sh, ph, 1, ceil)?;
    let ow = pool_out_size(OP, xv.w, kw, sw, pw, 1, ceil)?;
    let osz = out_sizes(&x, oh, ow)?;
    let out = ctx.resize_out(7, &osz)?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    same_device(OP, &[&x, &out])?;
    let i = |v: usize| v as i64;
    let a = PoolArgs {
        x: ptr(&x),
        out: ptr(&out),
        dt: float_input(OP, &x)?,
        include_pad: include_pad as i32,
        kh: i(kh),
        kw: i(kw),
        sh: i(sh),
        sw: i(sw),
        ph: i(ph),
        pw: i(pw),
        oh: i(oh),
        ow: i(ow),
        divisor: divisor.unwrap_or(0),
        xv: xv.into(),
        ov: view4(OP, &out, false)?.into(),
        ..Default::default()
    };
    let name = by_dtype("avg_pool2d_f32", "avg_pool2d_f64", x.dtype());
    launch_pool(ctx, &out, name, a)
}

/// `_adaptive_avg_pool2d.out`: args [self, output_size, out].
pub(crate) fn adaptive_avg_pool2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_adaptive_avg_pool2d.out";
    let x = ctx.tensor(0)?;
    let (oh, ow) = pair(OP, "output_size", ctx.int_list(1)?, false, 0)?;
    let xv = view4(OP, &x, false)?;
    if (oh == 0 || ow == 0) && xv.h * xv.w != 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: output_size must be positive"
        )));
    }
    let osz = out_sizes(&x, oh, ow)?;
    let out = ctx.resize_out(2, &osz)?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    same_device(OP, &[&x, &out])?;
    let a = PoolArgs {
        x: ptr(&x),
        out: ptr(&out),
        dt: float_input(OP, &x)?,
        oh: oh as i64,
        ow: ow as i64,
        xv: xv.into(),
        ov: view4(OP, &out, false)?.into(),
        ..Default::default()
    };
    let name = by_dtype(
        "adaptive_avg_pool2d_f32",
        "adaptive_avg_pool2d_f64",
        x.dtype(),
    );
    launch_pool(ctx, &out, name, a)
}

/// PyTorch's `compute_scales_value` in `f32` (or `f64` when `f64`): `1 / scale` when given,
/// else `input / output`.
fn scales_value(f64: bool, scale: Option<f64>, i: usize, o: usize) -> f64 {
    match (scale, f64) {
        (Some(s), true) if s > 0.0 => 1.0 / s,
        (Some(s), false) if s > 0.0 => (1.0 / s) as f32 as f64,
        (_, true) => i as f64 / o as f64,
        (_, false) => (i as f32 / o as f32) as f64,
    }
}

/// The bilinear source-index ratio of one axis (PyTorch's `area_pixel_compute_scale`).
fn linear_ratio(f64: bool, align: bool, scale: Option<f64>, i: usize, o: usize) -> f64 {
    if !align {
        return scales_value(f64, scale, i, o);
    }
    match (o > 1, f64) {
        (false, _) => 0.0,
        (true, true) => (i - 1) as f64 / (o - 1) as f64,
        (true, false) => ((i - 1) as f32 / (o - 1) as f32) as f64,
    }
}

/// Shared by both upsamplings: args [input, output_size?, (align_corners,)
/// scale_factors?, out]; `align` is `Some` for bilinear.
fn upsample(ctx: &mut KernelContext<'_>, op: &str, align: Option<bool>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let (z, _) = nchw(op, &x)?;
    let (scales_i, out_i) = if align.is_some() { (3, 4) } else { (2, 3) };
    let ((oh, ow), sc) = out_size(op, ctx, 1, scales_i, z[2], z[3])?;
    let out = ctx.resize_out(out_i, &[z[0], z[1], oh, ow])?;
    same_dtype(op, x.dtype(), out.dtype())?;
    let dt = match align {
        Some(_) => float_input(op, &x)?,
        None => dt_code(op, x.dtype())?,
    };
    same_device(op, &[&x, &out])?;
    if out.numel() == 0 || z[2] == 0 || z[3] == 0 {
        return Ok(());
    }
    let f64 = x.dtype() == ScalarType::Double;
    let ratio = |k: usize, i: usize, o: usize| match align {
        Some(al) => linear_ratio(f64, al, sc[k], i, o),
        None => scales_value(f64, sc[k], i, o),
    };
    let mut a = UpArgs {
        x: ptr(&x),
        out: ptr(&out),
        dt,
        es: x.dtype().element_size() as i32,
        align: align.unwrap_or(false) as i32,
        pad: 0,
        ratio_h: ratio(0, z[2], oh),
        ratio_w: ratio(1, z[3], ow),
        xv: view4(op, &x, false)?.into(),
        ov: view4(op, &out, false)?.into(),
    };
    let name = match align {
        Some(_) => by_dtype(
            "upsample_bilinear2d_f32",
            "upsample_bilinear2d_f64",
            x.dtype(),
        ),
        None => by_dtype(
            "upsample_nearest2d_f32",
            "upsample_nearest2d_f64",
            x.dtype(),
        ),
    };
    let n = out.numel();
    with_device(ctx, out.device(), |mut l| run(&mut l, name, n, &mut a))
}

/// `upsample_nearest2d.vec_out`: args [input, output_size?, scale_factors?, out].
pub(crate) fn upsample_nearest2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    upsample(ctx, "aten::upsample_nearest2d.vec_out", None)
}

/// `upsample_bilinear2d.vec_out`: args [input, output_size?, align_corners,
/// scale_factors?, out].
pub(crate) fn upsample_bilinear2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let align = ctx.bool(2)?;
    upsample(ctx, "aten::upsample_bilinear2d.vec_out", Some(align))
}
