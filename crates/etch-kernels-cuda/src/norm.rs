//! Normalisations (norm.cu), with the CPU kernels' argument rules: `_softmax`,
//! `_log_softmax` and `native_layer_norm` (one warp per row); batch norm with running
//! statistics (elementwise per channel), batch norm with the input's own statistics and
//! `native_group_norm` (one block per channel or group row, statistics in f64); and
//! `etch::rms_norm` / `etch::rms_norm_gated` (one block per row).

use crate::Family;
use crate::context::{Launch, rows_config, with_device};
use crate::elementwise::Domain;
use crate::etch_ops;
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result, TensorRef};
use etch_kernels::etch_ops::norm::{RmsKind, RmsNormCall, rms_norm_call};
use etch_kernels::norm::{GroupNormCall, group_norm_call, layer_norm_call};
use etch_kernels::util::{same_dtype, wrap};

/// `struct RowArgs` in norm.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RowArgs {
    inp: u64,
    out: u64,
    dt: i32,
    log: i32,
    nd: i32,
    pad: i32,
    rows: i64,
    n: i64,
    sin: i64,
    sout: i64,
    size: [i64; MAX_DIMS],
    st_in: [i64; MAX_DIMS],
    st_out: [i64; MAX_DIMS],
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RowArgs {}

/// `struct LnArgs` in norm.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct LnArgs {
    inp: u64,
    w: u64,
    b: u64,
    out: u64,
    mean: u64,
    rstd: u64,
    dt: i32,
    pad: i32,
    m: i64,
    n: i64,
    eps: f64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for LnArgs {}

/// Eight warps per block, one row each.
fn warp_rows(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.div_ceil(8).clamp(1, 1 << 20) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn float_domain(op: &str, t: &TensorRef<'_>) -> Result<Domain> {
    if !t.dtype().is_floating() {
        return Err(etch_kernels::util::bad_dtype(op, "input", t.dtype()));
    }
    Ok(Domain::of(t.dtype()))
}

fn softmax(ctx: &mut KernelContext<'_>, log: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dim = wrap(op, ctx.int(1)?, a.dim())?;
    let half_to_float = ctx.bool(2)?;
    let out = ctx.resize_out(3, a.sizes())?;
    if half_to_float {
        return Err(Error::not_supported(format!(
            "{op}: half_to_float=True is not supported"
        )));
    }
    same_dtype(op, a.dtype(), out.dtype())?;
    same_device(op, &[&a, &out])?;
    check_rank(op, a.dim())?;
    let domain = float_domain(op, &a)?;
    if a.numel() == 0 {
        return Ok(());
    }
    let mut r = RowArgs {
        inp: ptr(&a),
        out: ptr(&out),
        dt: dt_code(op, a.dtype())?,
        log: log as i32,
        nd: 0,
        pad: 0,
        rows: 1,
        n: 1,
        sin: 0,
        sout: 0,
        size: [0; MAX_DIMS],
        st_in: [0; MAX_DIMS],
        st_out: [0; MAX_DIMS],
    };
    if a.dim() > 0 {
        r.n = a.sizes()[dim] as i64;
        r.sin = a.strides()[dim] as i64;
        r.sout = out.strides()[dim] as i64;
        for d in (0..a.dim()).filter(|&d| d != dim) {
            let k = r.nd as usize;
            r.size[k] = a.sizes()[d] as i64;
            r.st_in[k] = a.strides()[d] as i64;
            r.st_out[k] = out.strides()[d] as i64;
            r.rows *= a.sizes()[d] as i64;
            r.nd += 1;
        }
    }
    let fname = if domain == Domain::F64 {
        "softmax_f64"
    } else {
        "softmax_f32"
    };
    let cfg = warp_rows(r.rows as usize);
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Norm, fname)?;
        let mut args = [arg(&mut r)];
        // SAFETY: pointers are live device memory of `a`'s shape; matches `softmax_*`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

pub(crate) fn softmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    softmax(ctx, false)
}
pub(crate) fn log_softmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    softmax(ctx, true)
}

/// The CPU kernels' parameter check, plus: on `x`'s device.
fn check_param(
    op: &str,
    what: &str,
    t: &Option<TensorRef<'_>>,
    numel: usize,
    x: &TensorRef<'_>,
) -> Result<()> {
    etch_kernels::norm::check_param(op, what, t, numel, x.dtype())?;
    if let Some(t) = t {
        same_device(op, &[x, t])?;
    }
    Ok(())
}

/// `native_layer_norm.out`, decoded by the CPU kernels' `layer_norm_call`.
pub(crate) fn layer_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = layer_norm_call(ctx)?;
    let (x, out, mean_t, rstd_t) = (&c.x, &c.out, &c.mean, &c.rstd);
    let (w, b, eps, m, n) = (&c.w, &c.b, c.eps, c.m, c.n);
    let domain = float_domain(op, x)?;
    for t in [out, mean_t, rstd_t]
        .into_iter()
        .chain(w.iter())
        .chain(b.iter())
    {
        same_device(op, &[x, t])?;
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mut a = LnArgs {
        inp: ptr(x),
        w: w.as_ref().map_or(0, ptr),
        b: b.as_ref().map_or(0, ptr),
        out: ptr(out),
        mean: ptr(mean_t),
        rstd: ptr(rstd_t),
        dt: dt_code(op, x.dtype())?,
        pad: 0,
        m: m as i64,
        n: n as i64,
        eps,
    };
    let fname = if domain == Domain::F64 {
        "layer_norm_f64"
    } else {
        "layer_norm_f32"
    };
    let cfg = warp_rows(m);
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Norm, fname)?;
        let mut args = [arg(&mut a)];
        // SAFETY: pointers are live, contiguous device memory of the checked shapes.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

/// `struct BnArgs` in norm.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct BnArgs {
    inp: u64,
    w: u64,
    b: u64,
    rmean: u64,
    rvar: u64,
    out: u64,
    mean: u64,
    rstd: u64,
    dt: i32,
    nd: i32,
    rows: i64,
    len: i64,
    rx: i64,
    ro: i64,
    groups: i64,
    cg: i64,
    hw: i64,
    eps: f64,
    size: [i64; MAX_DIMS],
    st_in: [i64; MAX_DIMS],
    st_out: [i64; MAX_DIMS],
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for BnArgs {}

/// Kernel arguments normalising every channel (dim 1) of `x` into `out`: one row per
/// channel, its elements over the other dims (strided).
fn channel_rows(op: &str, x: &TensorRef<'_>, out: &TensorRef<'_>, eps: f64) -> Result<BnArgs> {
    check_rank(op, x.dim())?;
    let c = x.sizes()[1];
    let mut a = BnArgs {
        inp: ptr(x),
        w: 0,
        b: 0,
        rmean: 0,
        rvar: 0,
        out: ptr(out),
        mean: 0,
        rstd: 0,
        dt: dt_code(op, x.dtype())?,
        nd: 0,
        rows: c as i64,
        len: (x.numel() / c.max(1)) as i64,
        rx: x.strides()[1] as i64,
        ro: out.strides()[1] as i64,
        groups: c.max(1) as i64,
        cg: 1,
        hw: 1,
        eps,
        size: [0; MAX_DIMS],
        st_in: [0; MAX_DIMS],
        st_out: [0; MAX_DIMS],
    };
    a.hw = a.len.max(1);
    for d in (0..x.dim()).filter(|&d| d != 1) {
        let k = a.nd as usize;
        a.size[k] = x.sizes()[d] as i64;
        a.st_in[k] = x.strides()[d] as i64;
        a.st_out[k] = out.strides()[d] as i64;
        a.nd += 1;
    }
    Ok(a)
}

fn launch_bn(
    ctx: &KernelContext<'_>,
    out: &TensorRef<'_>,
    name: &'static str,
    cfg: LaunchConfig,
    mut a: BnArgs,
) -> Result<()> {
    if a.rows == 0 {
        return Ok(());
    }
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Norm, name)?;
        let mut args = [arg(&mut a)];
        // SAFETY: pointers are live device memory of the checked shapes; matches `name`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

fn dims_at_least_2(op: &str, x: &TensorRef<'_>) -> Result<()> {
    if x.dim() < 2 {
        return Err(Error::invalid_argument(format!(
            "{op}: input must have at least 2 dims, got {:?}",
            x.sizes()
        )));
    }
    Ok(())
}

/// `_native_batch_norm_legit_no_training.out`: args [input, weight?, bias?, running_mean,
/// running_var, momentum, eps, out, save_mean, save_invstd]; the saved statistics are
/// empty, as on the CPU.
pub(crate) fn batch_norm_no_training_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_native_batch_norm_legit_no_training.out";
    let x = ctx.tensor(0)?;
    let w = ctx.opt_tensor(1)?;
    let b = ctx.opt_tensor(2)?;
    let rm = Some(ctx.tensor(3)?);
    let rv = Some(ctx.tensor(4)?);
    let eps = ctx.double(6)?;
    dims_at_least_2(OP, &x)?;
    let c = x.sizes()[1];
    check_param(OP, "weight", &w, c, &x)?;
    check_param(OP, "bias", &b, c, &x)?;
    check_param(OP, "running_mean", &rm, c, &x)?;
    check_param(OP, "running_var", &rv, c, &x)?;
    let out = ctx.resize_out(7, x.sizes())?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    same_device(OP, &[&x, &out])?;
    ctx.resize_out(8, &[0])?;
    ctx.resize_out(9, &[0])?;
    let domain = float_domain(OP, &x)?;
    let mut a = channel_rows(OP, &x, &out, eps)?;
    a.w = w.as_ref().map_or(0, ptr);
    a.b = b.as_ref().map_or(0, ptr);
    a.rmean = rm.as_ref().map_or(0, ptr);
    a.rvar = rv.as_ref().map_or(0, ptr);
    let split = (a.len as usize).div_ceil(256 * 8).clamp(1, 65_535) as u32;
    let cfg = LaunchConfig {
        grid_dim: (c.clamp(1, 1 << 30) as u32, split, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let name = if domain == Domain::F64 {
        "batch_norm_f64"
    } else {
        "batch_norm_f32"
    };
    launch_bn(ctx, &out, name, cfg, a)
}

/// `_native_batch_norm_legit.no_stats_out`: args [input, weight?, bias?, training,
/// momentum, eps, out, save_mean, save_invstd]: every channel normalised with its own
/// statistics (biased variance, accumulated in f64).
pub(crate) fn batch_norm_no_stats_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_native_batch_norm_legit.no_stats_out";
    let x = ctx.tensor(0)?;
    let w = ctx.opt_tensor(1)?;
    let b = ctx.opt_tensor(2)?;
    let eps = ctx.double(5)?;
    dims_at_least_2(OP, &x)?;
    let c = x.sizes()[1];
    check_param(OP, "weight", &w, c, &x)?;
    check_param(OP, "bias", &b, c, &x)?;
    let out = ctx.resize_out(6, x.sizes())?;
    let mean_t = ctx.resize_out(7, &[c])?;
    let rstd_t = ctx.resize_out(8, &[c])?;
    for t in [&out, &mean_t, &rstd_t] {
        same_dtype(OP, x.dtype(), t.dtype())?;
        same_device(OP, &[&x, t])?;
    }
    let domain = float_domain(OP, &x)?;
    let mut a = channel_rows(OP, &x, &out, eps)?;
    a.w = w.as_ref().map_or(0, ptr);
    a.b = b.as_ref().map_or(0, ptr);
    a.mean = ptr(&mean_t);
    a.rstd = ptr(&rstd_t);
    let name = if domain == Domain::F64 {
        "moments_norm_f64"
    } else {
        "moments_norm_f32"
    };
    launch_bn(ctx, &out, name, rows_config(c, 256), a)
}

/// `native_group_norm.out`, decoded by the CPU kernels' `group_norm_call`; `mean` and
/// `rstd` are (N, group), accumulated in f64.
pub(crate) fn group_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::native_group_norm.out";
    let GroupNormCall {
        x,
        w,
        b,
        n,
        c,
        hw,
        group,
        eps,
        out,
        mean: mean_t,
        rstd: rstd_t,
    } = group_norm_call(ctx)?;
    for t in [&out, &mean_t, &rstd_t]
        .into_iter()
        .chain(w.iter())
        .chain(b.iter())
    {
        same_device(OP, &[&x, t])?;
    }
    let domain = float_domain(OP, &x)?;
    let (cg, rows) = (c / group, n * group);
    let len = (cg * hw) as i64;
    let mut size = [0i64; MAX_DIMS];
    let mut unit = [0i64; MAX_DIMS];
    (size[0], unit[0]) = (len, 1);
    let a = BnArgs {
        inp: ptr(&x),
        w: w.as_ref().map_or(0, ptr),
        b: b.as_ref().map_or(0, ptr),
        rmean: 0,
        rvar: 0,
        out: ptr(&out),
        mean: ptr(&mean_t),
        rstd: ptr(&rstd_t),
        dt: dt_code(OP, x.dtype())?,
        nd: 1,
        rows: rows as i64,
        len,
        rx: len,
        ro: len,
        groups: group as i64,
        cg: cg as i64,
        hw: hw.max(1) as i64,
        eps,
        size,
        st_in: unit,
        st_out: unit,
    };
    let name = if domain == Domain::F64 {
        "moments_norm_f64"
    } else {
        "moments_norm_f32"
    };
    launch_bn(ctx, &out, name, rows_config(rows, 256), a)
}

/// `struct RmsArgs` in norm.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RmsArgs {
    x: u64,
    z: u64,
    y: u64,
    sum: u64,
    w: u64,
    out: u64,
    dt: i32,
    pad: i32,
    rows: i64,
    n: i64,
    eps: f32,
    offset: f32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RmsArgs {}

/// Vectors (16 bytes) each thread of `rms_warp_*`/`rms_block_*` holds (`RMS_CACHE`).
const RMS_CACHE: usize = 4;

/// The kernel for a norm call and its block count: the row in registers, a warp per row
/// (`rms_warp_*`, 8 rows a block) or a block per row (`rms_block_*`), when rows are whole
/// 16-byte vectors that fit; else the general `etch_rms_norm` (a block per row, two reads).
fn rms_kernel(op: &str, c: &RmsNormCall<'_>) -> Result<(&'static str, u32)> {
    let dt = c.x.dtype();
    let es = dt.element_size();
    let add = c.add.as_ref();
    let tensors = [
        Some(&c.x),
        Some(&c.w),
        Some(&c.out),
        c.z.as_ref(),
        add.map(|a| &a.0),
        add.map(|a| &a.1),
    ];
    let aligned = tensors
        .iter()
        .flatten()
        .all(|t| (t.data_ptr() as usize).is_multiple_of(16));
    let vecs = (c.n * es) / 16;
    let fits = aligned && (c.n * es).is_multiple_of(16) && vecs > 0;
    let rows = c.rows.clamp(1, 1 << 20);
    if fits && vecs <= 32 * RMS_CACHE {
        let names = ["rms_warp_f32", "rms_warp_bf16", "rms_warp_f16"];
        return Ok((etch_ops::io_kernel(op, dt, names)?, rows.div_ceil(8) as u32));
    }
    if fits && vecs <= 256 * RMS_CACHE {
        let names = ["rms_block_f32", "rms_block_bf16", "rms_block_f16"];
        return Ok((etch_ops::io_kernel(op, dt, names)?, rows as u32));
    }
    Ok(("etch_rms_norm", c.rows.clamp(1, 1 << 16) as u32))
}

/// `etch::rms_norm.out`, `etch::rms_norm_gated.out` and `etch::add_rms_norm.out`
/// (arguments decoded by `etch_kernels::etch_ops::norm::rms_norm_call`), 256 threads a
/// block (see [`rms_kernel`]).
fn etch_rms_norm(ctx: &mut KernelContext<'_>, kind: RmsKind) -> Result<()> {
    let op = ctx.op_name();
    let c = rms_norm_call(ctx, kind)?;
    same_device(op, &[&c.x, &c.w, &c.out])?;
    if let Some(z) = &c.z {
        same_device(op, &[&c.x, z])?;
    }
    if let Some((y, sum)) = &c.add {
        same_device(op, &[&c.x, y, sum])?;
    }
    if c.rows == 0 {
        return Ok(());
    }
    let mut a = RmsArgs {
        x: ptr(&c.x),
        z: c.z.as_ref().map_or(0, ptr),
        y: c.add.as_ref().map_or(0, |a| ptr(&a.0)),
        sum: c.add.as_ref().map_or(0, |a| ptr(&a.1)),
        w: ptr(&c.w),
        out: ptr(&c.out),
        dt: dt_code(op, c.x.dtype())?,
        pad: 0,
        rows: c.rows as i64,
        n: c.n as i64,
        eps: c.eps as f32,
        offset: c.offset,
    };
    let (name, blocks) = rms_kernel(op, &c)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Norm, name)?;
        let mut args = [arg(&mut a)];
        // SAFETY: pointers are live, contiguous device memory of the checked shapes.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

/// `etch::rms_norm.out`.
pub(crate) fn etch_rms_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    etch_rms_norm(ctx, RmsKind::Plain)
}

/// `etch::add_rms_norm.out`.
pub(crate) fn etch_add_rms_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    etch_rms_norm(ctx, RmsKind::Add)
}

/// `etch::rms_norm_gated.out`.
pub(crate) fn etch_rms_norm_gated_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    etch_rms_norm(ctx, RmsKind::Gated)
}
