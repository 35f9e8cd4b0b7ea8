//! Row-wise normalisations (norm.cu): `_softmax`, `_log_softmax` and `native_layer_norm`,
//! one warp per row, with the CPU kernels' argument rules.

use crate::Family;
use crate::context::{Launch, with_device};
use crate::elementwise::Domain;
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result, TensorRef};
use etch_kernels::util::{Shape, require_contiguous, same_dtype, wrap};

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

fn check_param(
    op: &str,
    what: &str,
    t: &Option<TensorRef<'_>>,
    numel: usize,
    x: &TensorRef<'_>,
) -> Result<()> {
    if let Some(t) = t {
        if t.numel() != numel {
            return Err(Error::invalid_argument(format!(
                "{op}: {what} has {} elements, expected {numel}",
                t.numel()
            )));
        }
        same_dtype(op, x.dtype(), t.dtype())?;
        require_contiguous(op, what, t)?;
        same_device(op, &[x, t])?;
    }
    Ok(())
}

/// `native_layer_norm.out`: args [input, normalized_shape, weight?, bias?, eps, out, mean,
/// rstd].
pub(crate) fn layer_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let norm = ctx.dims(1)?;
    let w = ctx.opt_tensor(2)?;
    let b = ctx.opt_tensor(3)?;
    let eps = ctx.double(4)?;
    let nd = x.dim();
    if norm.is_empty() || norm.len() > nd {
        return Err(Error::invalid_argument(format!(
            "{op}: normalized_shape {norm:?} does not fit input {:?}",
            x.sizes()
        )));
    }
    let axis = nd - norm.len();
    if x.sizes()[axis..]
        .iter()
        .zip(norm.iter())
        .any(|(&s, &n)| s as i64 != n)
    {
        return Err(Error::invalid_argument(format!(
            "{op}: input {:?} does not end with normalized_shape {norm:?}",
            x.sizes()
        )));
    }
    require_contiguous(op, "input", &x)?;
    let domain = float_domain(op, &x)?;
    let n: usize = x.sizes()[axis..].iter().product();
    let m: usize = x.sizes()[..axis].iter().product();
    check_param(op, "weight", &w, n, &x)?;
    check_param(op, "bias", &b, n, &x)?;
    let mut stat = Shape::from_slice(&x.sizes()[..axis])?;
    for _ in axis..nd {
        stat.push(1)?;
    }
    let out = ctx.resize_out(5, x.sizes())?;
    let mean_t = ctx.resize_out(6, &stat)?;
    let rstd_t = ctx.resize_out(7, &stat)?;
    for t in [&out, &mean_t, &rstd_t] {
        same_dtype(op, x.dtype(), t.dtype())?;
        require_contiguous(op, "out", t)?;
        same_device(op, &[&x, t])?;
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mut a = LnArgs {
        inp: ptr(&x),
        w: w.as_ref().map_or(0, ptr),
        b: b.as_ref().map_or(0, ptr),
        out: ptr(&out),
        mean: ptr(&mean_t),
        rstd: ptr(&rstd_t),
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
