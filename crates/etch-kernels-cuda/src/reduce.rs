//! Reductions (reduce.cu): sum, mean, prod, amax/amin, any/all, argmax/argmin, max/min
//! over a dim, var/std. Arguments are decoded by the CPU kernels' own `*_call` functions
//! (`etch_kernels::reduce`): the same checks, output shapes and plans.

use crate::Family;
use crate::context::{Launch, with_device};
use crate::elementwise::Domain;
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{EValue, KernelContext, Result, TensorRef};
use etch_kernels::reduce::{
    Call, Plan, amax_amin_call, any_all_call, arg_extreme_call, dim_extreme_call, extreme_all_call,
    prod_call, sum_mean_call, var_std_call,
};

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

/// Runs a decoded reduction on the device.
fn run(ctx: &KernelContext<'_>, kind: i32, domain: Domain, c: &Call<'_>) -> Result<()> {
    let idx = c.idx.as_ref().map(|(t, s)| (t, &s[..]));
    launch(
        ctx,
        kind,
        domain,
        &c.a,
        &c.plan,
        &c.out,
        &c.so,
        idx,
        c.correction,
    )
}

/// `sum.IntList_out` / `mean.out`: floats accumulate in f32 when input and out share the
/// dtype (as the CPU), else in f64; integers in i64.
fn sum_mean(ctx: &mut KernelContext<'_>, mean: bool) -> Result<()> {
    let c = sum_mean_call(ctx, mean)?;
    let domain = match (c.out.dtype().is_floating(), c.a.dtype() == c.out.dtype()) {
        (true, true) => Domain::of(c.out.dtype()),
        (true, false) => Domain::F64,
        (false, _) => Domain::I64,
    };
    run(ctx, if mean { MEAN } else { SUM }, domain, &c)
}

pub(crate) fn sum_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, false)
}
pub(crate) fn mean_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, true)
}

fn amax_amin(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let c = amax_amin_call(ctx)?;
    run(
        ctx,
        if max { AMAX } else { AMIN },
        Domain::of(c.a.dtype()),
        &c,
    )
}
pub(crate) fn amax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, true)
}
pub(crate) fn amin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, false)
}

/// `max`/`min` over every element (`.unary_out`); an empty input gives the identity.
fn extreme_all(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let c = extreme_all_call(ctx)?;
    if c.a.numel() == 0 {
        let v = etch_kernels::reduce::extreme_identity(c.out.dtype(), max);
        return crate::elementwise::fill(ctx, &c.out, v);
    }
    run(
        ctx,
        if max { AMAX } else { AMIN },
        Domain::of(c.a.dtype()),
        &c,
    )
}
pub(crate) fn max_unary_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    extreme_all(ctx, true)
}
pub(crate) fn min_unary_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    extreme_all(ctx, false)
}

fn arg_extreme(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let c = arg_extreme_call(ctx)?;
    run(
        ctx,
        if max { ARGMAX } else { ARGMIN },
        Domain::of(c.a.dtype()),
        &c,
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
    let c = any_all_call(ctx, dims, keepdim, out_i)?;
    run(
        ctx,
        if any { ANY } else { ALL },
        Domain::of(c.a.dtype()),
        &c,
    )
}
pub(crate) fn any_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    any_all(ctx, Some(&d), k, 3, true)
}
pub(crate) fn any_dims_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = match ctx.value(1)? {
        EValue::None => None,
        _ => Some(ctx.dims(1)?),
    };
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

/// `var`/`std`: accumulated in f64, as the CPU.
fn var_std(ctx: &mut KernelContext<'_>, std: bool) -> Result<()> {
    let c = var_std_call(ctx)?;
    run(ctx, if std { STD } else { VAR }, Domain::F64, &c)
}
pub(crate) fn var_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, false)
}
pub(crate) fn std_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, true)
}

/// `prod`: f64 for floating results, wrapping i64 otherwise, as the CPU.
fn prod(
    ctx: &mut KernelContext<'_>,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype_i: usize,
    out_i: usize,
) -> Result<()> {
    let c = prod_call(ctx, dims, keepdim, dtype_i, out_i)?;
    let domain = if c.out.dtype().is_floating() {
        Domain::F64
    } else {
        Domain::I64
    };
    run(ctx, PROD, domain, &c)
}
pub(crate) fn prod_int_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    prod(ctx, Some(&d), k, 3, 4)
}
pub(crate) fn prod_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    prod(ctx, None, false, 1, 2)
}

/// `max.dim_max` / `min.dim_min`: values and int64 indices.
fn dim_extreme(ctx: &mut KernelContext<'_>, max: bool) -> Result<()> {
    let c = dim_extreme_call(ctx)?;
    run(
        ctx,
        if max { AMAX } else { AMIN },
        Domain::of(c.a.dtype()),
        &c,
    )
}
pub(crate) fn max_dim(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, true)
}
pub(crate) fn min_dim(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, false)
}
