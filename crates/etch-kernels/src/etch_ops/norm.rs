//! `etch::rms_norm.out(x, weight, eps, unit_offset, *, out)`,
//! `etch::rms_norm_gated.out(x, z, weight, eps, *, out)` and
//! `etch::add_rms_norm.out(x, y, weight, eps, unit_offset, *, sum, out)`: Qwen 3.5's
//! RMSNorms over the last dim, each one kernel instead of the ~9 casts, powers, means and
//! products PyTorch exports (docs/OPS.md).
//!
//! - `rms_norm`: `rnd(x * rsqrt(mean(x^2) + eps) * (unit_offset + w))`, in f32;
//! - `rms_norm_gated`: `rnd(rnd(w * rnd(x * rsqrt(mean(x^2) + eps))) * silu(z))`;
//! - `add_rms_norm`: `sum = rnd(x + y)` (the residual add), then `rms_norm` of `sum`.

use super::{check_io_dtype, dispatch_io, expect_dtype, expect_shape, silu};
use crate::threads::{self, SharedMut};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// A decoded `etch::rms_norm` or `etch::rms_norm_gated` call.
pub struct RmsNormCall<'a> {
    /// `x [..., N]`.
    pub x: TensorRef<'a>,
    /// The gate `z`, shaped like `x` (`rms_norm_gated` only).
    pub z: Option<TensorRef<'a>>,
    /// The addend `y` and the output `sum = x + y`, shaped like `x` (`add_rms_norm` only);
    /// the norm is then of `sum`.
    pub add: Option<(TensorRef<'a>, TensorRef<'a>)>,
    /// `weight [N]`.
    pub w: TensorRef<'a>,
    /// `out`, shaped like `x`.
    pub out: TensorRef<'a>,
    /// Epsilon, and the constant added to the weight (1 for Qwen's `(1 + w)` norm).
    pub eps: f64,
    /// See `eps`.
    pub offset: f32,
    /// Rows and row length.
    pub rows: usize,
    /// See `rows`.
    pub n: usize,
}

/// The three norms.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RmsKind {
    /// `etch::rms_norm.out`: args [x, weight, eps, unit_offset, out, (ret)].
    Plain,
    /// `etch::rms_norm_gated.out`: args [x, z, weight, eps, out, (ret)].
    Gated,
    /// `etch::add_rms_norm.out`: args [x, y, weight, eps, unit_offset, sum, out, (ret)].
    Add,
}

/// Decodes an `etch::rms_norm.out`, `etch::rms_norm_gated.out` or `etch::add_rms_norm.out`
/// call.
pub fn rms_norm_call<'a>(ctx: &mut KernelContext<'a>, kind: RmsKind) -> Result<RmsNormCall<'a>> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let unit =
        |ctx: &KernelContext<'a>, i| -> Result<f32> { Ok(if ctx.bool(i)? { 1.0 } else { 0.0 }) };
    let (second, w, eps, offset) = match kind {
        RmsKind::Plain => (None, ctx.tensor(1)?, ctx.double(2)?, unit(ctx, 3)?),
        RmsKind::Gated => (Some(ctx.tensor(1)?), ctx.tensor(2)?, ctx.double(3)?, 0.0),
        RmsKind::Add => (
            Some(ctx.tensor(1)?),
            ctx.tensor(2)?,
            ctx.double(3)?,
            unit(ctx, 4)?,
        ),
    };
    check_io_dtype(op, "x", x.dtype())?;
    expect_dtype(op, "x", &x, x.dtype())?;
    let n = x.sizes().last().copied().unwrap_or(0);
    if x.dim() == 0 || n == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: x must be [..., N] with N > 0, got {:?}",
            x.sizes()
        )));
    }
    expect_dtype(op, "weight", &w, x.dtype())?;
    expect_shape(op, "weight", &w, &[n])?;
    let what = if kind == RmsKind::Add { "y" } else { "z" };
    if let Some(t) = &second {
        expect_dtype(op, what, t, x.dtype())?;
        expect_shape(op, what, t, x.sizes())?;
    }
    if eps.is_nan() || eps < 0.0 || !eps.is_finite() {
        return Err(Error::invalid_argument(format!(
            "{op}: eps {eps} must be finite and >= 0"
        )));
    }
    let (z, add, out_i) = match kind {
        RmsKind::Add => {
            let sum = ctx.resize_out(5, x.sizes())?;
            expect_dtype(op, "sum", &sum, x.dtype())?;
            (None, second.map(|y| (y, sum)), 6)
        }
        _ => (second, None, 4),
    };
    let out = ctx.resize_out(out_i, x.sizes())?;
    expect_dtype(op, "out", &out, x.dtype())?;
    let rows = x.numel() / n;
    Ok(RmsNormCall {
        x,
        z,
        add,
        w,
        out,
        eps,
        offset,
        rows,
        n,
    })
}

/// Elements below which a norm stays on the calling thread.
const TASK: usize = 1 << 13;

/// `etch::rms_norm.out` on the CPU.
pub fn rms_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = rms_norm_call(ctx, RmsKind::Plain)?;
    dispatch_io!(c.x.dtype(), ctx.op_name(), "x", |T| run::<T>(&mut c))
}

/// `etch::rms_norm_gated.out` on the CPU.
pub fn rms_norm_gated_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = rms_norm_call(ctx, RmsKind::Gated)?;
    dispatch_io!(c.x.dtype(), ctx.op_name(), "x", |T| run::<T>(&mut c))
}

/// `etch::add_rms_norm.out` on the CPU: the sum first (all rows), then its norm.
pub fn add_rms_norm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = rms_norm_call(ctx, RmsKind::Add)?;
    dispatch_io!(c.x.dtype(), ctx.op_name(), "x", |T| {
        add_into::<T>(&mut c)?;
        run::<T>(&mut c)
    })
}

/// `sum = rnd(x + y)`; afterwards the call normalises `sum` (`c.x` becomes it).
fn add_into<T: FElem<F = f32>>(c: &mut RmsNormCall<'_>) -> Result<()> {
    let Some((y, sum)) = &mut c.add else {
        return Ok(());
    };
    let (x, y) = (c.x.data::<T>()?, y.data::<T>()?);
    for ((s, a), b) in sum.data_mut::<T>()?.iter_mut().zip(x).zip(y) {
        *s = T::from_f(a.to_f() + b.to_f());
    }
    c.x = *sum;
    Ok(())
}

fn run<T: FElem<F = f32>>(c: &mut RmsNormCall<'_>) -> Result<()> {
    let (rows, n) = (c.rows, c.n);
    let x = c.x.data::<T>()?;
    let w = c.w.data::<T>()?;
    let z = match &c.z {
        Some(z) => Some(z.data::<T>()?),
        None => None,
    };
    let (eps, offset) = (c.eps as f32, c.offset);
    let o = SharedMut::new(c.out.data_mut::<T>()?);
    let tasks = threads::tasks_for(rows * n, TASK).clamp(1, rows.max(1));
    threads::run(tasks, &|t| {
        for r in threads::part(rows, tasks, t) {
            let xr = &x[r * n..(r + 1) * n];
            let inv = rms_inv(xr, eps);
            // SAFETY: row `r` is this task's alone.
            let orow = unsafe { o.slice(r * n, n) };
            match z {
                None => rms_row(xr, w, inv, offset, |j, v| orow[j] = v),
                Some(z) => {
                    let zr = &z[r * n..(r + 1) * n];
                    for (((y, v), wj), zj) in orow.iter_mut().zip(xr).zip(w).zip(zr) {
                        let h = T::from_f(v.to_f() * inv).to_f();
                        let h = T::from_f(wj.to_f() * h).to_f();
                        *y = T::from_f(h * silu(zj.to_f()));
                    }
                }
            }
        }
    });
    Ok(())
}

/// `1 / sqrt(mean(x²) + eps)` of a row, summed in order (`etch::rms_norm`'s).
pub(crate) fn rms_inv<T: FElem<F = f32>>(xr: &[T], eps: f32) -> f32 {
    let ss: f32 = xr.iter().map(|v| v.to_f() * v.to_f()).sum();
    1.0 / (ss / xr.len() as f32 + eps).sqrt()
}

/// `etch::rms_norm` of a row with its `inv` (`rms_inv`): `put(j, rnd(x_j · inv · (offset +
/// w_j)))`.
pub(crate) fn rms_row<T: FElem<F = f32>>(
    xr: &[T],
    w: &[T],
    inv: f32,
    offset: f32,
    mut put: impl FnMut(usize, T),
) {
    for (j, (v, wj)) in xr.iter().zip(w).enumerate() {
        put(j, T::from_f(v.to_f() * inv * (offset + wj.to_f())));
    }
}
