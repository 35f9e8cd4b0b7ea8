//! Reductions (reduce.cu): sum, mean, prod, amax/amin, any/all, argmax/argmin, max/min
//! over a dim, var/std. Plans (kept and reduced dims, output shapes, out strides) come
//! from the CPU kernels' `etch_kernels::reduce::plan`, so shapes and checks agree.

use crate::Family;
use crate::context::{Launch, with_device};
use crate::elementwise::Domain;
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{EValue, Error, KernelContext, Result, ScalarType, TensorRef};
use etch_kernels::reduce::{Plan, kept_out_strides, plan};
use etch_kernels::util::Shape;

const SUM: i32 = 0;
const MEAN: i32 = 1;
const PROD: i32 = 2;
const AMAX: i32 = 3;
const AMIN: i32 = 4;
const ANY: i32 = 5;
const ALL: i32 = 6;
const ARGMAX: i32 = 7;
const ARGMIN: i32 = 8;
const VAR: i32 = 9;
const STD: i32 = 10;

/// `struct RedArgs` in reduce.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RedArgs {
    inp: u64,
    out: u64,
    out2: u64,
    dt_in: i32,
    dt_out: i32,
    kind: i32,
    nk: i32,
    nr: i32,
    pad: i32,
    n_out: i64,
    count: i64,
    corr: f64,
    kept: [i64; MAX_DIMS],
    kept_in: [i64; MAX_DIMS],
    kept_out: [i64; MAX_DIMS],
    kept_out2: [i64; MAX_DIMS],
    red: [i64; MAX_DIMS],
    red_in: [i64; MAX_DIMS],
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RedArgs {}

fn fill(dst: &mut [i64; MAX_DIMS], src: &[usize]) {
    for (d, &v) in src.iter().enumerate().take(MAX_DIMS) {
        dst[d] = v as i64;
    }
}

/// One reduction launch: `out` (and `out2`, the indices of max/min over a dim) at the
/// kept positions given by `so`/`so2`.
#[allow(clippy::too_many_arguments)]
fn launch(
    ctx: &KernelContext<'_>,
    kind: i32,
    domain: Domain,
    a: &TensorRef<'_>,
    p: &Plan,
    out: &TensorRef<'_>,
    so: &[usize],
    out2: Option<(&TensorRef<'_>, &[usize])>,
    corr: f64,
) -> Result<()> {
    let op = ctx.op_name();
    same_device(op, &[a, out])?;
    check_rank(op, p.kept.len().max(p.red.len()))?;
    let n_out: usize = p.kept.iter().product();
    if n_out == 0 {
        return Ok(());
    }
    let mut r = RedArgs {
        inp: ptr(a),
        out: ptr(out),
        out2: 0,
        dt_in: dt_code(op, a.dtype())?,
        dt_out: dt_code(op, out.dtype())?,
        kind,
        nk: p.kept.len() as i32,
        nr: p.red.len() as i32,
        pad: 0,
        n_out: n_out as i64,
        count: p.count as i64,
        corr,
        kept: [0; MAX_DIMS],
        kept_in: [0; MAX_DIMS],
        kept_out: [0; MAX_DIMS],
        kept_out2: [0; MAX_DIMS],
        red: [0; MAX_DIMS],
        red_in: [0; MAX_DIMS],
    };
    fill(&mut r.kept, &p.kept);
    fill(&mut r.kept_in, &p.kept_in);
    fill(&mut r.kept_out, so);
    fill(&mut r.red, &p.red);
    fill(&mut r.red_in, &p.red_in);
    if let Some((t, s2)) = out2 {
        same_device(op, &[a, t])?;
        r.out2 = ptr(t);
        fill(&mut r.kept_out2, s2);
    }
    let fname = match domain {
        Domain::F32 => "reduce_f32",
        Domain::F64 => "reduce_f64",
        Domain::I64 => "reduce_i64",
    };
    let warps_per_block = 8usize;
    let blocks = n_out.div_ceil(warps_per_block).min(1 << 20) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (32 * warps_per_block as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Reduce, fname)?;
        let mut args = [arg(&mut r)];
        // SAFETY: pointers are live device memory sized for the plan; matches
        // `reduce_*(RedArgs a)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

fn opt_dims(ctx: &KernelContext<'_>, i: usize) -> Result<Option<etch_core::Dims>> {
    match ctx.value(i)? {
        EValue::None => Ok(None),
        _ => Ok(Some(ctx.dims(i)?)),
    }
}

fn opt_dtype(ctx: &KernelContext<'_>, i: usize) -> Result<Option<ScalarType>> {
    match ctx.opt_int(i)? {
        None => Ok(None),
        Some(v) => Ok(Some(ScalarType::from_i8(v as i8)?)),
    }
}

fn same(op: &str, a: ScalarType, b: ScalarType) -> Result<()> {
    etch_kernels::util::same_dtype(op, a, b)
}

/// `sum.IntList_out` / `mean.out`: args [self, dim?, keepdim, dtype?, out].
fn sum_mean(ctx: &mut KernelContext<'_>, mean: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = opt_dims(ctx, 1)?;
    let keepdim = ctx.bool(2)?;
    let dtype = opt_dtype(ctx, 3)?;
    let p = plan(op, &a, dims.as_deref(), keepdim)?;
    let out = ctx.resize_out(4, &p.out_shape)?;
    if let Some(dt) = dtype {
        same(op, dt, out.dtype())?;
    }
    if mean && !out.dtype().is_floating() {
        return Err(Error::invalid_argument(format!(
            "{op}: out must be floating point, got {}",
            out.dtype()
        )));
    }
    let so = kept_out_strides(&p, &out, keepdim, &a, dims.as_deref())?;
    let domain = match (out.dtype().is_floating(), a.dtype() == out.dtype()) {
        (true, true) => Domain::of(out.dtype()),
        (true, false) => Domain::F64,
        (false, _) => Domain::I64,
    };
    launch(
        ctx,
        if mean { MEAN } else { SUM },
        domain,
        &a,
        &p,
        &out,
        &so,
        None,
        0.0,
    )
}

pub(crate) fn sum_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, false)
}
pub(crate) fn mean_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, true)
}

/// `amax`/`amin`: args [self, dim, keepdim, out]. NaN propagates.
fn amax_amin(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = ctx.dims(1)?;
    let keepdim = ctx.bool(2)?;
    let p = plan(op, &a, Some(&dims), keepdim)?;
    if p.count == 0 && a.numel() == 0 && !p.kept.contains(&0) {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot reduce over an empty dimension"
        )));
    }
    let out = ctx.resize_out(3, &p.out_shape)?;
    same(op, a.dtype(), out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, Some(&dims))?;
    let kind = if max { AMAX } else { AMIN };
    launch(
        ctx,
        kind,
        Domain::of(a.dtype()),
        &a,
        &p,
        &out,
        &so,
        None,
        0.0,
    )
}
pub(crate) fn amax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, true)
}
pub(crate) fn amin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, false)
}

/// `argmax`/`argmin`: args [self, dim?, keepdim, out].
fn arg_extreme(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dim = ctx.opt_int(1)?;
    let keepdim = ctx.bool(2)?;
    let dims_buf = [dim.unwrap_or(0)];
    let dims: Option<&[i64]> = dim.map(|_| &dims_buf[..]);
    let mut p = plan(op, &a, dims, keepdim)?;
    if dim.is_none() {
        p.out_shape = if keepdim {
            Shape::filled(a.dim(), 1)?
        } else {
            Shape::new()
        };
    }
    if p.count == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot reduce over an empty dimension"
        )));
    }
    if dim.is_none() && !a.is_default_dim_order() {
        return Err(Error::invalid_argument(format!(
            "{op}: self must be contiguous"
        )));
    }
    let out = ctx.resize_out(3, &p.out_shape)?;
    if out.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: out must be int64, got {}",
            out.dtype()
        )));
    }
    let so = if dim.is_none() {
        Shape::new()
    } else {
        kept_out_strides(&p, &out, keepdim, &a, dims)?
    };
    let kind = if max { ARGMAX } else { ARGMIN };
    launch(
        ctx,
        kind,
        Domain::of(a.dtype()),
        &a,
        &p,
        &out,
        &so,
        None,
        0.0,
    )
}
pub(crate) fn argmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    arg_extreme(ctx, true)
}
pub(crate) fn argmin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    arg_extreme(ctx, false)
}

fn any_all(
    ctx: &mut KernelContext<'_>,
    dims: Option<&[i64]>,
    keepdim: bool,
    out_i: usize,
    any: bool,
) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let p = plan(op, &a, dims, keepdim)?;
    let out = ctx.resize_out(out_i, &p.out_shape)?;
    if out.dtype() != ScalarType::Bool && out.dtype() != ScalarType::Byte {
        return Err(Error::invalid_argument(format!(
            "{op}: out must be bool or uint8, got {}",
            out.dtype()
        )));
    }
    let so = kept_out_strides(&p, &out, keepdim, &a, dims)?;
    let kind = if any { ANY } else { ALL };
    launch(
        ctx,
        kind,
        Domain::of(a.dtype()),
        &a,
        &p,
        &out,
        &so,
        None,
        0.0,
    )
}
pub(crate) fn any_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    any_all(ctx, Some(&d), k, 3, true)
}
pub(crate) fn any_dims_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = opt_dims(ctx, 1)?;
    let k = ctx.bool(2)?;
    any_all(ctx, d.as_deref(), k, 3, true)
}
pub(crate) fn any_all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    any_all(ctx, None, false, 1, true)
}
pub(crate) fn all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    any_all(ctx, Some(&d), k, 3, false)
}
pub(crate) fn all_all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    any_all(ctx, None, false, 1, false)
}

/// `var/std.correction_out`: args [self, dim?, correction?, keepdim, out].
fn var_std(ctx: &mut KernelContext<'_>, std: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = opt_dims(ctx, 1)?;
    let correction = ctx.opt_scalar(2)?.map_or(1.0, |s| s.to_f64());
    let keepdim = ctx.bool(3)?;
    if !a.dtype().is_floating() {
        return Err(etch_kernels::util::bad_dtype(op, "input", a.dtype()));
    }
    let p = plan(op, &a, dims.as_deref(), keepdim)?;
    let out = ctx.resize_out(4, &p.out_shape)?;
    same(op, a.dtype(), out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, dims.as_deref())?;
    let kind = if std { STD } else { VAR };
    launch(ctx, kind, Domain::F64, &a, &p, &out, &so, None, correction)
}
pub(crate) fn var_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, false)
}
pub(crate) fn std_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, true)
}

fn prod(
    ctx: &mut KernelContext<'_>,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype_i: usize,
    out_i: usize,
) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dtype = opt_dtype(ctx, dtype_i)?;
    let p = plan(op, &a, dims, keepdim)?;
    let out = ctx.resize_out(out_i, &p.out_shape)?;
    let want = dtype.unwrap_or(if a.dtype().is_floating() {
        a.dtype()
    } else {
        ScalarType::Long
    });
    same(op, want, out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, dims)?;
    let domain = if want.is_floating() {
        Domain::F64
    } else {
        Domain::I64
    };
    launch(ctx, PROD, domain, &a, &p, &out, &so, None, 0.0)
}
pub(crate) fn prod_int_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    prod(ctx, Some(&d), k, 3, 4)
}
pub(crate) fn prod_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    prod(ctx, None, false, 1, 2)
}

/// `max.dim_max` / `min.dim_min`: args [self, dim, keepdim, values, indices].
fn dim_extreme(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = [ctx.int(1)?];
    let keepdim = ctx.bool(2)?;
    let p = plan(op, &a, Some(&dims), keepdim)?;
    if p.count == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot reduce over an empty dimension"
        )));
    }
    let vals = ctx.resize_out(3, &p.out_shape)?;
    let idxs = ctx.resize_out(4, &p.out_shape)?;
    same(op, a.dtype(), vals.dtype())?;
    if idxs.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64, got {}",
            idxs.dtype()
        )));
    }
    let sv = kept_out_strides(&p, &vals, keepdim, &a, Some(&dims))?;
    let si = kept_out_strides(&p, &idxs, keepdim, &a, Some(&dims))?;
    let kind = if max { AMAX } else { AMIN };
    let domain = Domain::of(a.dtype());
    launch(
        ctx,
        kind,
        domain,
        &a,
        &p,
        &vals,
        &sv,
        Some((&idxs, &si)),
        0.0,
    )
}
pub(crate) fn max_dim(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, true)
}
pub(crate) fn min_dim(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, false)
}
