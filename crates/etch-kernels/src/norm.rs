//! Normalisations: `_softmax`, `_log_softmax`, `native_layer_norm`,
//! `_native_batch_norm_legit_no_training`. Half types compute in `f32`.

use crate::dispatch_float;
use crate::threads::{self, SharedMut};
use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, Result, ScalarType, TensorRef};

/// Elements of row-wise work (softmax, layer and group norm) below which it stays on the
/// calling thread, and the least a thread is given.
const ROW_TASK: usize = 1 << 13;

/// Shape with `dim` set to 1: iterating it visits every row along `dim` once.
fn rows_of(sizes: &[usize], dim: usize) -> Result<Shape> {
    let mut s = Shape::from_slice(sizes)?;
    if !s.is_empty() {
        s[dim] = 1;
    }
    Ok(s)
}

fn softmax_impl(ctx: &mut KernelContext<'_>, op: &str, log: bool) -> Result<()> {
    let a = ctx.tensor(0)?;
    let dim = wrap(op, ctx.int(1)?, a.dim())?;
    let half_to_float = ctx.bool(2)?;
    let mut out = ctx.resize_out(3, a.sizes())?;
    if half_to_float {
        return Err(Error::not_supported(format!(
            "{op}: half_to_float=True is not supported"
        )));
    }
    same_dtype(op, a.dtype(), out.dtype())?;
    let n = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    let (ssa, sso) = if a.dim() == 0 {
        (0, 0)
    } else {
        (a.strides()[dim], out.strides()[dim])
    };
    let rows = rows_of(a.sizes(), dim)?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let min_rows = (ROW_TASK / n.max(1)).max(1);
    // Contiguous float32 rows take the vector exponential where the CPU has one.
    if a.dtype() == ScalarType::Float && ssa == 1 && sso == 1 && crate::vmath::available() {
        let x = a.data::<f32>()?;
        let o = SharedMut::new(out.data_mut::<f32>()?);
        let avx512 = crate::util::avx512();
        par_walk(&rows, [&sa, &so], min_rows, |[oa, oo], len, [xa, xo]| {
            for r in 0..len {
                let (ba, bo) = (oa + r * xa, oo + r * xo);
                // SAFETY: every row is one task's.
                let out = unsafe { o.slice(bo, n) };
                softmax_row_f32_dispatch(&x[ba..ba + n], out, log, avx512);
            }
        });
        return Ok(());
    }
    dispatch_float!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        let o = SharedMut::new(out.data_mut::<T>()?);
        par_walk(&rows, [&sa, &so], min_rows, |[oa, oo], len, [xa, xo]| {
            for r in 0..len {
                let (ba, bo) = (oa + r * xa, oo + r * xo);
                let mut mx = <T as FElem>::F::NEG_INFINITY;
                for i in 0..n {
                    let v = x[ba + i * ssa].to_f();
                    if v > mx || v.is_nan() {
                        mx = v;
                    }
                }
                let sum = lane_sum(n, |i| x[ba + i * ssa].to_f().sub(mx).exp_or_zero());
                if log {
                    let lse = sum.ln();
                    for i in 0..n {
                        let v = T::from_f(x[ba + i * ssa].to_f().sub(mx).sub(lse));
                        // SAFETY: every row is one task's.
                        unsafe { o.write(bo + i * sso, v) };
                    }
                } else {
                    let inv = <T as FElem>::F::ONE.div(sum);
                    for i in 0..n {
                        let v = T::from_f(x[ba + i * ssa].to_f().sub(mx).exp_or_zero() * inv);
                        // SAFETY: every row is one task's.
                        unsafe { o.write(bo + i * sso, v) };
                    }
                }
            }
        });
        Ok(())
    })
}

/// The sum of the `n` values `e(0), e(1), ...` in a fixed order that does not wait on each
/// addition: 16 partial sums (element `i` of the first `n - n % 16` into lane `i % 16`, in
/// order), added lane 0 to 15, then the tail of fewer than 16 elements in order. Every
/// softmax row sums this way, vector or scalar, any dtype. (A sum in order waits 4 cycles
/// per element; with 128-element attention rows it took most of the softmax time.)
#[inline(always)]
fn lane_sum<F: Float>(n: usize, mut e: impl FnMut(usize) -> F) -> F {
    let mut acc = [F::ZERO; 16];
    let full = n - n % 16;
    for i in 0..full {
        acc[i % 16] += e(i);
    }
    let mut sum = F::ZERO;
    for &a in &acc {
        sum += a;
    }
    for i in full..n {
        sum += e(i);
    }
    sum
}

/// [`lane_sum`] of a slice, written so that the 16 partial sums are one vector's lanes
/// (the closure form kept them in memory, a store and a reload per element).
#[inline(always)]
fn lane_sum_slice(v: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        for (a, &e) in acc.iter_mut().zip(c) {
            *a += e;
        }
    }
    let mut sum = 0f32;
    for &a in &acc {
        sum += a;
    }
    for &e in chunks.remainder() {
        sum += e;
    }
    sum
}

/// [`softmax_row_f32`] with AVX-512 code generation for its max, differences, sum and
/// scaling when `avx512` (from [`crate::util::avx512`]: the CPU has AVX-512F; the same operations in
/// the same order, so the same bits); else as compiled.
fn softmax_row_f32_dispatch(x: &[f32], out: &mut [f32], log: bool, avx512: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        #[target_feature(enable = "avx512f")]
        fn on_avx512(x: &[f32], out: &mut [f32], log: bool) {
            softmax_row_f32(x, out, log)
        }
        // SAFETY: `avx512` says the CPU has AVX-512F.
        return unsafe { on_avx512(x, out, log) };
    }
    let _ = avx512;
    softmax_row_f32(x, out, log)
}

/// (Log-)softmax of one contiguous float32 row: the max, `e^(x - max)` by
/// `vmath::exp_neg_abs` (`x - max <= 0`; ≤ 1.05 ulp over every f32, `+0` below e^-103.98
/// as `exp_or_zero`), their sum ([`lane_sum`]'s order), then the product by its reciprocal
/// (softmax) or `x - max - ln(sum)` (log-softmax). Lanes of 16 for the max; the
/// differences are written to `out` and exponentiated there.
///
/// The max skips NaNs (the scalar code's is NaN if the row has one), but a NaN element
/// makes its exponential, so the sum, NaN, and every output of the row is NaN either way.
#[inline(always)]
fn softmax_row_f32(x: &[f32], out: &mut [f32], log: bool) {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    for &v in chunks.remainder() {
        lanes[0] = if v > lanes[0] { v } else { lanes[0] };
    }
    let mx = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - mx;
    }
    crate::vmath::exp_neg_abs_in_place(out);
    let sum = lane_sum_slice(out);
    if log {
        let lse = sum.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - mx - lse;
        }
    } else {
        let inv = 1.0 / sum;
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
}

fn softmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    softmax_impl(ctx, "aten::_softmax.out", false)
}
fn log_softmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    softmax_impl(ctx, "aten::_log_softmax.out", true)
}

/// Checks an optional per-channel parameter: `numel` elements of dtype `dt`, contiguous.
pub fn check_param(
    op: &str,
    what: &str,
    t: &Option<TensorRef<'_>>,
    numel: usize,
    dt: ScalarType,
) -> Result<()> {
    if let Some(t) = t {
        if t.numel() != numel {
            return Err(Error::invalid_argument(format!(
                "{op}: {what} has {} elements, expected {numel}",
                t.numel()
            )));
        }
        same_dtype(op, dt, t.dtype())?;
        require_contiguous(op, what, t)?;
    }
    Ok(())
}

/// A decoded `native_layer_norm` call, shared by the CPU and device kernels.
pub struct LayerNormCall<'a> {
    /// The input (row-major).
    pub x: TensorRef<'a>,
    /// Weight and bias (`n` elements each), if given.
    pub w: Option<TensorRef<'a>>,
    /// See `w`.
    pub b: Option<TensorRef<'a>>,
    /// Epsilon.
    pub eps: f64,
    /// The outputs: normalised input, and per-row mean and rstd.
    pub out: TensorRef<'a>,
    /// See `out`.
    pub mean: TensorRef<'a>,
    /// See `out`.
    pub rstd: TensorRef<'a>,
    /// Rows and row length.
    pub m: usize,
    /// See `m`.
    pub n: usize,
}

/// Decodes `native_layer_norm`: args [input, normalized_shape, weight?, bias?, eps, out,
/// mean, rstd].
pub fn layer_norm_call<'a>(ctx: &mut KernelContext<'a>) -> Result<LayerNormCall<'a>> {
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
    let n: usize = x.sizes()[axis..].iter().product();
    let m: usize = x.sizes()[..axis].iter().product();
    check_param(op, "weight", &w, n, x.dtype())?;
    check_param(op, "bias", &b, n, x.dtype())?;
    let mut stat = Shape::from_slice(&x.sizes()[..axis])?;
    for _ in axis..nd {
        stat.push(1)?;
    }
    let out = ctx.resize_out(5, x.sizes())?;
    let mean = ctx.resize_out(6, &stat)?;
    let rstd = ctx.resize_out(7, &stat)?;
    for t in [&out, &mean, &rstd] {
        same_dtype(op, x.dtype(), t.dtype())?;
        require_contiguous(op, "out", t)?;
    }
    Ok(LayerNormCall {
        x,
        w,
        b,
        eps,
        out,
        mean,
        rstd,
        m,
        n,
    })
}

/// `native_layer_norm`.
fn native_layer_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::native_layer_norm.out";
    let LayerNormCall {
        x,
        w,
        b,
        eps,
        mut out,
        mean: mut mean_t,
        rstd: mut rstd_t,
        m,
        n,
    } = layer_norm_call(ctx)?;
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let ws = match &w {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let bs = match &b {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let o = SharedMut::new(out.data_mut::<T>()?);
        let mo = SharedMut::new(mean_t.data_mut::<T>()?);
        let ro = SharedMut::new(rstd_t.data_mut::<T>()?);
        let nf = <F as Compute>::from_i64(n as i64);
        let epsf = <F as Compute>::from_f64(eps);
        let tasks = threads::tasks_for(m * n, ROW_TASK);
        threads::run_parts(m, tasks, &|rows| {
            for r in rows {
                let row = &xs[r * n..(r + 1) * n];
                let mut sum = F::ZERO;
                for &v in row {
                    sum += v.to_f();
                }
                let mean = sum.div(nf);
                let mut var = F::ZERO;
                for &v in row {
                    let d = v.to_f().sub(mean);
                    var += d * d;
                }
                let var = var.div(nf);
                let rstd = F::ONE.div((var + epsf).sqrt());
                // SAFETY: row `r` and its statistics are this task's.
                let orow = unsafe {
                    mo.write(r, T::from_f(mean));
                    ro.write(r, T::from_f(rstd));
                    o.slice(r * n, n)
                };
                for i in 0..n {
                    let mut y = row[i].to_f().sub(mean) * rstd;
                    if let Some(ws) = ws {
                        y *= ws[i].to_f();
                    }
                    if let Some(bs) = bs {
                        y += bs[i].to_f();
                    }
                    orow[i] = T::from_f(y);
                }
            }
        });
        Ok(())
    })
}

/// `_native_batch_norm_legit_no_training`: args [input, weight?, bias?, running_mean,
/// running_var, momentum, eps, out, save_mean, save_invstd]. The two saved statistics are
/// empty in inference, as in ExecuTorch.
fn batch_norm_no_training_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_native_batch_norm_legit_no_training.out";
    let x = ctx.tensor(0)?;
    let w = ctx.opt_tensor(1)?;
    let b = ctx.opt_tensor(2)?;
    let rm = ctx.tensor(3)?;
    let rv = ctx.tensor(4)?;
    let eps = ctx.double(6)?;
    if x.dim() < 2 {
        return Err(Error::invalid_argument(format!(
            "{OP}: input must have at least 2 dims, got {:?}",
            x.sizes()
        )));
    }
    let c = x.sizes()[1];
    check_param(OP, "weight", &w, c, x.dtype())?;
    check_param(OP, "bias", &b, c, x.dtype())?;
    check_param(OP, "running_mean", &Some(rm), c, x.dtype())?;
    check_param(OP, "running_var", &Some(rv), c, x.dtype())?;
    let mut out = ctx.resize_out(7, x.sizes())?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    ctx.resize_out(8, &[0])?;
    ctx.resize_out(9, &[0])?;
    let rows = rows_of(x.sizes(), 1)?;
    let (sx, so) = (
        Shape::from_slice(x.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let (cx, co) = (sx[1], so[1]);
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let ws = match &w {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let bs = match &b {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let (ms, vs) = (rm.data::<T>()?, rv.data::<T>()?);
        let o = SharedMut::new(out.data_mut::<T>()?);
        let epsf = <F as Compute>::from_f64(eps);
        let tasks = threads::tasks_for(x.numel(), ELEMENTWISE_TASK);
        threads::run_parts(c, tasks, &|chans| {
            for ch in chans {
                let rstd = F::ONE.div((vs[ch].to_f() + epsf).sqrt());
                let scale = ws.map_or(F::ONE, |w| w[ch].to_f()) * rstd;
                let shift = bs
                    .map_or(F::ZERO, |b| b[ch].to_f())
                    .sub(ms[ch].to_f() * scale);
                let (bx, bo) = (ch * cx, ch * co);
                walk(&rows, [&sx, &so], |[ox, oo], len, [xx, xo]| {
                    if xx == 1 && xo == 1 {
                        // SAFETY: channel `ch` is this task's.
                        let orow = unsafe { o.slice(bo + oo, len) };
                        for (y, v) in orow.iter_mut().zip(&xs[bx + ox..bx + ox + len]) {
                            *y = T::from_f(v.to_f() * scale + shift);
                        }
                    } else {
                        for i in 0..len {
                            let v = xs[bx + ox + i * xx].to_f();
                            // SAFETY: as above.
                            unsafe { o.write(bo + oo + i * xo, T::from_f(v * scale + shift)) };
                        }
                    }
                });
            }
        });
        Ok(())
    })
}

/// A decoded `native_group_norm` call, shared by the CPU and device kernels.
pub struct GroupNormCall<'a> {
    /// The input (row-major).
    pub x: TensorRef<'a>,
    /// Per-channel weight and bias, if given.
    pub w: Option<TensorRef<'a>>,
    /// See `w`.
    pub b: Option<TensorRef<'a>>,
    /// Batch, channels, spatial size and groups.
    pub n: usize,
    /// See `n`.
    pub c: usize,
    /// See `n`.
    pub hw: usize,
    /// See `n`.
    pub group: usize,
    /// Epsilon.
    pub eps: f64,
    /// The outputs: normalised input, and (N, group) mean and rstd.
    pub out: TensorRef<'a>,
    /// See `out`.
    pub mean: TensorRef<'a>,
    /// See `out`.
    pub rstd: TensorRef<'a>,
}

/// Decodes `native_group_norm`: args [input, weight?, bias?, N, C, HxW, group, eps, out,
/// mean, rstd].
pub fn group_norm_call<'a>(ctx: &mut KernelContext<'a>) -> Result<GroupNormCall<'a>> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let w = ctx.opt_tensor(1)?;
    let b = ctx.opt_tensor(2)?;
    let (n, c, hw, group) = (ctx.int(3)?, ctx.int(4)?, ctx.int(5)?, ctx.int(6)?);
    let eps = ctx.double(7)?;
    if n < 0 || c < 0 || hw < 0 || group <= 0 || c % group != 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: invalid N={n}, C={c}, HxW={hw}, group={group}"
        )));
    }
    let (n, c, hw, group) = (n as usize, c as usize, hw as usize, group as usize);
    if x.dim() < 2 || x.sizes()[0] != n || x.sizes()[1] != c || x.numel() != n * c * hw {
        return Err(Error::invalid_argument(format!(
            "{op}: input {:?} does not match N={n}, C={c}, HxW={hw}",
            x.sizes()
        )));
    }
    require_contiguous(op, "input", &x)?;
    check_param(op, "weight", &w, c, x.dtype())?;
    check_param(op, "bias", &b, c, x.dtype())?;
    let out = ctx.resize_out(8, x.sizes())?;
    let mean = ctx.resize_out(9, &[n, group])?;
    let rstd = ctx.resize_out(10, &[n, group])?;
    for t in [&out, &mean, &rstd] {
        same_dtype(op, x.dtype(), t.dtype())?;
        require_contiguous(op, "out", t)?;
    }
    Ok(GroupNormCall {
        x,
        w,
        b,
        n,
        c,
        hw,
        group,
        eps,
        out,
        mean,
        rstd,
    })
}

/// `native_group_norm`: `mean` and `rstd` have shape (N, group); statistics accumulate in
/// `f64`.
fn native_group_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
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
        mut out,
        mean: mut mean_t,
        rstd: mut rstd_t,
    } = group_norm_call(ctx)?;
    let cg = c / group;
    let len = cg * hw;
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let ws = match &w {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let bs = match &b {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let o = SharedMut::new(out.data_mut::<T>()?);
        let mo = SharedMut::new(mean_t.data_mut::<T>()?);
        let ro = SharedMut::new(rstd_t.data_mut::<T>()?);
        let tasks = threads::tasks_for(x.numel(), ROW_TASK);
        threads::run_parts(n * group, tasks, &|rows| {
            for r in rows {
                let base = r * len;
                let row = &xs[base..base + len];
                let mut sum = 0f64;
                for &v in row {
                    sum += v.to_f().to_f64();
                }
                let mean = if len > 0 { sum / len as f64 } else { 0.0 };
                let mut var = 0f64;
                for &v in row {
                    let d = v.to_f().to_f64() - mean;
                    var += d * d;
                }
                let var = if len > 0 { var / len as f64 } else { 0.0 };
                let rstd = 1.0 / (var + eps).sqrt();
                // SAFETY: group row `r` and its statistics are this task's.
                let orow = unsafe {
                    mo.write(r, T::from_f(<F as Compute>::from_f64(mean)));
                    ro.write(r, T::from_f(<F as Compute>::from_f64(rstd)));
                    o.slice(base, len)
                };
                for ci in 0..cg {
                    let ch = (r % group) * cg + ci;
                    let scale = ws.map_or(1.0, |w| w[ch].to_f().to_f64()) * rstd;
                    let shift = bs.map_or(0.0, |b| b[ch].to_f().to_f64()) - mean * scale;
                    let (sc, sh) = (
                        <F as Compute>::from_f64(scale),
                        <F as Compute>::from_f64(shift),
                    );
                    let at = ci * hw;
                    for i in at..at + hw {
                        orow[i] = T::from_f(xs[base + i].to_f() * sc + sh);
                    }
                }
            }
        });
        Ok(())
    })
}

/// `_native_batch_norm_legit.no_stats`: args [input, weight?, bias?, training, momentum,
/// eps, out, save_mean, save_invstd]. Normalises every channel (dim 1) with the statistics
/// of the input itself (biased variance, as `InstanceNorm` exports); the statistics
/// accumulate in `f64`.
fn batch_norm_no_stats_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_native_batch_norm_legit.no_stats_out";
    let x = ctx.tensor(0)?;
    let w = ctx.opt_tensor(1)?;
    let b = ctx.opt_tensor(2)?;
    let eps = ctx.double(5)?;
    if x.dim() < 2 {
        return Err(Error::invalid_argument(format!(
            "{OP}: input must have at least 2 dims, got {:?}",
            x.sizes()
        )));
    }
    let c = x.sizes()[1];
    check_param(OP, "weight", &w, c, x.dtype())?;
    check_param(OP, "bias", &b, c, x.dtype())?;
    let mut out = ctx.resize_out(6, x.sizes())?;
    let mut mean_t = ctx.resize_out(7, &[c])?;
    let mut rstd_t = ctx.resize_out(8, &[c])?;
    for t in [&out, &mean_t, &rstd_t] {
        same_dtype(OP, x.dtype(), t.dtype())?;
    }
    let count = x.numel() / c.max(1);
    let rows = rows_of(x.sizes(), 1)?;
    let (sx, so) = (
        Shape::from_slice(x.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let (cx, co) = (sx[1], so[1]);
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let ws = match &w {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let bs = match &b {
            Some(t) => Some(t.data::<T>()?),
            None => None,
        };
        let o = out.data_mut::<T>()?;
        let mo = mean_t.data_mut::<T>()?;
        let ro = rstd_t.data_mut::<T>()?;
        for ch in 0..c {
            let bx = ch * cx;
            let mut sum = 0f64;
            walk(&rows, [&sx[..]], |[ox], len, [xx]| {
                for i in 0..len {
                    sum += xs[bx + ox + i * xx].to_f().to_f64();
                }
            });
            let mean = if count > 0 { sum / count as f64 } else { 0.0 };
            let mut var = 0f64;
            walk(&rows, [&sx[..]], |[ox], len, [xx]| {
                for i in 0..len {
                    let d = xs[bx + ox + i * xx].to_f().to_f64() - mean;
                    var += d * d;
                }
            });
            let var = if count > 0 { var / count as f64 } else { 0.0 };
            let rstd = 1.0 / (var + eps).sqrt();
            mo[ch] = T::from_f(<F as Compute>::from_f64(mean));
            ro[ch] = T::from_f(<F as Compute>::from_f64(rstd));
            let scale = ws.map_or(1.0, |w| w[ch].to_f().to_f64()) * rstd;
            let shift = bs.map_or(0.0, |b| b[ch].to_f().to_f64()) - mean * scale;
            let (sc, sh) = (
                <F as Compute>::from_f64(scale),
                <F as Compute>::from_f64(shift),
            );
            let bo = ch * co;
            walk(&rows, [&sx, &so], |[ox, oo], len, [xx, xo]| {
                for i in 0..len {
                    o[bo + oo + i * xo] = T::from_f(xs[bx + ox + i * xx].to_f() * sc + sh);
                }
            });
        }
        Ok(())
    })
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::_softmax.out", softmax_out)?;
    reg.register("aten::_log_softmax.out", log_softmax_out)?;
    reg.register("aten::native_layer_norm.out", native_layer_norm_out)?;
    reg.register("aten::native_group_norm.out", native_group_norm_out)?;
    reg.register(
        "aten::_native_batch_norm_legit.no_stats_out",
        batch_norm_no_stats_out,
    )?;
    reg.register(
        "aten::_native_batch_norm_legit_no_training.out",
        batch_norm_no_training_out,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::softmax_row_f32;

    /// The scalar path's row (softmax_impl's loops) for comparison.
    fn scalar(x: &[f32], log: bool) -> Vec<f32> {
        use crate::util::Float;
        let mut mx = f32::NEG_INFINITY;
        for &v in x {
            if v > mx || v.is_nan() {
                mx = v;
            }
        }
        let sum = super::lane_sum(x.len(), |i| (x[i] - mx).exp_or_zero());
        if log {
            x.iter().map(|&v| v - mx - sum.ln()).collect()
        } else {
            x.iter()
                .map(|&v| (v - mx).exp_or_zero() * (1.0 / sum))
                .collect()
        }
    }

    /// The slice form of the lane sum adds in the closure form's order: the same bits.
    #[test]
    fn lane_sum_slice_is_lane_sum() {
        for n in [0usize, 1, 15, 16, 17, 128, 129, 600] {
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32).sqrt() * 1e-3)
                .collect();
            let want = super::lane_sum(n, |i| v[i]);
            assert_eq!(super::lane_sum_slice(&v).to_bits(), want.to_bits(), "n {n}");
        }
    }

    /// The vector row against the scalar one: the same NaNs and zeros, values within 4
    /// ulp (the exponential's ≤ 1.05 ulp and the sum's rounding), on rows with NaN, ±inf,
    /// far-negative (masked) scores and every length around the 16-lane and 256 chunks.
    #[test]
    fn vector_row_matches_the_scalar_row() {
        if !crate::vmath::available() {
            return;
        }
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for n in [1usize, 2, 15, 16, 17, 31, 255, 256, 257, 600] {
            rows.push(
                (0..n)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.21)
                    .collect(),
            );
            // causal-mask style: the tail far below the max
            rows.push(
                (0..n)
                    .map(|i| if i % 3 == 0 { -1e9 } else { i as f32 * 0.01 })
                    .collect(),
            );
        }
        rows.push(vec![f32::NEG_INFINITY; 20]);
        rows.push(vec![1.0, f32::NAN, 2.0]);
        rows.push(vec![1.0, f32::INFINITY, 2.0]);
        rows.push(
            (0..40)
                .map(|i| if i == 7 { 0.0 } else { f32::NEG_INFINITY })
                .collect(),
        );
        for x in &rows {
            for log in [false, true] {
                let want = scalar(x, log);
                let mut got = vec![0.0; x.len()];
                softmax_row_f32(x, &mut got, log);
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    if w.is_nan() || g.is_nan() {
                        assert!(
                            w.is_nan() && g.is_nan(),
                            "row {x:?} log {log} [{i}]: {g} vs {w}"
                        );
                        continue;
                    }
                    let ulp = (w.abs().max(f32::MIN_POSITIVE) * f32::EPSILON) as f64;
                    let tol = if log {
                        4.0 * ulp + 1e-6 * w.abs() as f64
                    } else {
                        4.0 * ulp
                    };
                    assert!(
                        (g as f64 - w as f64).abs() <= tol || (g == w),
                        "n {} log {log} [{i}]: {g} vs {w}",
                        x.len()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod speed_tests {
    /// One thread, 1024 rows of 128 (an 8-head attention over 128 positions): ns an
    /// element. `cargo test --release -p etch-kernels --lib softmax_speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn softmax_speed() {
        let avx512 = crate::util::avx512();
        let (rows, n) = (1024usize, 128usize);
        let x: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.21)
            .collect();
        let mut out = vec![0f32; rows * n];
        let reps: usize = std::env::var("ETCH_BENCH_REPS").map_or(20, |v| v.parse().unwrap_or(20));
        for _ in 0..3 {
            let t = std::time::Instant::now();
            for _ in 0..reps {
                for (xr, or) in x.chunks(n).zip(out.chunks_mut(n)) {
                    super::softmax_row_f32_dispatch(xr, or, false, avx512);
                }
            }
            let dt = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "softmax {rows}x{n}: {:.1} us, {:.3} ns an element",
                dt * 1e6,
                dt * 1e9 / (rows * n) as f64
            );
        }
    }
}
