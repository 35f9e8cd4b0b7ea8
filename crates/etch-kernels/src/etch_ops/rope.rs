//! `etch::rope.out(x, cos, sin, *, out)`: rotate-half rotary embedding on the first `R`
//! features of each head (Qwen 3.5's partial RoPE), one kernel instead of the ~14 slices,
//! negations, concatenations, products and sums PyTorch exports per tensor (docs/OPS.md).
//!
//! `x [B, T, H, D]`, `cos`/`sin [T, R]` (`R` even, `0 < R <= D`), all one dtype. With
//! `h = R / 2` and `rot_i = -x_{i+h}` for `i < h`, `x_{i-h}` for `h <= i < R`:
//! `out_i = rnd(rnd(x_i * cos_i) + rnd(rot_i * sin_i))` for `i < R`, `x_i` beyond, where
//! `rnd` rounds to the dtype: what the model computes in its dtype, operation by operation.
//!
//! `etch::rope_cos_sin.out(input_pos, x, theta, dim, *, cos, sin)`: the `cos`/`sin [T, dim]`
//! tables for positions `p_t = input_pos[0] + t` (`T = x.sizes()[1]`; `x` gives only `T` and
//! the dtype), as the default rotary embedding computes them in float32:
//! `inv_j = 1 / theta^(2j / dim)` (`j < dim / 2`), `f = float(p_t) * inv_j`, the table
//! `[f, f]`, then `cos`/`sin` rounded to the dtype. One op for the ~17 aranges, powers,
//! products, concatenations, cos, sin and casts that PyTorch exports for it.

use super::{check_io_dtype, dispatch_io, expect_dtype, expect_shape};
use crate::threads::{self, SharedMut};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// A decoded `etch::rope` call.
pub struct RopeCall<'a> {
    /// `x [B, T, H, D]`.
    pub x: TensorRef<'a>,
    /// `cos [T, R]`.
    pub cos: TensorRef<'a>,
    /// `sin [T, R]`.
    pub sin: TensorRef<'a>,
    /// `out`, shaped like `x`.
    pub out: TensorRef<'a>,
    /// `B`, `T`, `H`, `D` and `R`.
    pub dims: [usize; 5],
}

/// Decodes `etch::rope.out` (args [x, cos, sin, out, (ret)]).
pub fn rope_call<'a>(ctx: &mut KernelContext<'a>) -> Result<RopeCall<'a>> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let cos = ctx.tensor(1)?;
    let sin = ctx.tensor(2)?;
    check_io_dtype(op, "x", x.dtype())?;
    expect_dtype(op, "x", &x, x.dtype())?;
    let &[b, t, h, d] = x.sizes() else {
        return Err(Error::invalid_argument(format!(
            "{op}: x must be [B, T, H, D], got {:?}",
            x.sizes()
        )));
    };
    let r = cos.sizes().get(1).copied().unwrap_or(0);
    if cos.dim() != 2 || r == 0 || r % 2 != 0 || r > d {
        return Err(Error::invalid_argument(format!(
            "{op}: cos must be [T, R] with R even and 0 < R <= D = {d}, got {:?}",
            cos.sizes()
        )));
    }
    expect_dtype(op, "cos", &cos, x.dtype())?;
    expect_shape(op, "cos", &cos, &[t, r])?;
    expect_dtype(op, "sin", &sin, x.dtype())?;
    expect_shape(op, "sin", &sin, &[t, r])?;
    let out = ctx.resize_out(3, x.sizes())?;
    expect_dtype(op, "out", &out, x.dtype())?;
    Ok(RopeCall {
        x,
        cos,
        sin,
        out,
        dims: [b, t, h, d, r],
    })
}

/// Elements below which the op stays on the calling thread.
const TASK: usize = 1 << 14;

/// `etch::rope.out` on the CPU.
pub fn rope_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = rope_call(ctx)?;
    dispatch_io!(c.x.dtype(), ctx.op_name(), "x", |T| run::<T>(&mut c))
}

fn run<T: FElem<F = f32>>(c: &mut RopeCall<'_>) -> Result<()> {
    let [b, t, h, d, r] = c.dims;
    let x = c.x.data::<T>()?;
    let (cos, sin) = (c.cos.data::<T>()?, c.sin.data::<T>()?);
    let o = SharedMut::new(c.out.data_mut::<T>()?);
    let rows = b * t * h;
    let tasks = threads::tasks_for(rows * d, TASK).clamp(1, rows.max(1));
    threads::run(tasks, &|task| {
        for row in threads::part(rows, tasks, task) {
            let pos = (row / h) % t;
            let xr = &x[row * d..(row + 1) * d];
            let (cr, sr) = (&cos[pos * r..(pos + 1) * r], &sin[pos * r..(pos + 1) * r]);
            // SAFETY: row `row` is this task's alone.
            let orow = unsafe { o.slice(row * d, d) };
            rope_row(|i| xr[i].to_f(), cr, sr, orow);
        }
    });
    Ok(())
}

/// One row of `etch::rope`: `out` (`D` values) from the row `x(i)` (`i < D`, values of
/// `T`) and its position's `cos`/`sin` (`R` values each).
pub(crate) fn rope_row<T: FElem<F = f32>>(
    x: impl Fn(usize) -> f32,
    cos: &[T],
    sin: &[T],
    out: &mut [T],
) {
    let r = cos.len();
    let half = r / 2;
    let rnd = |v: f32| T::from_f(v).to_f();
    for (i, o) in out.iter_mut().enumerate() {
        if i >= r {
            *o = T::from_f(x(i));
            continue;
        }
        let rot = if i < half { -x(i + half) } else { x(i - half) };
        *o = T::from_f(rnd(x(i) * cos[i].to_f()) + rnd(rot * sin[i].to_f()));
    }
}

/// A decoded `etch::rope_cos_sin` call: `cos`/`sin [T, dim]` in `x`'s dtype for positions
/// `input_pos[0] + t`, `t < T = x.sizes()[1]` (docs/OPS.md).
pub struct RopeCosSinCall<'a> {
    /// `input_pos` int64 `[1]` (not read here: it may live on a device).
    pub pos: TensorRef<'a>,
    /// `cos [T, dim]`.
    pub cos: TensorRef<'a>,
    /// `sin [T, dim]`.
    pub sin: TensorRef<'a>,
    /// The base, as the model's float32 `pow` takes it.
    pub theta: f32,
    /// `T` and `dim`.
    pub dims: [usize; 2],
}

/// Decodes `etch::rope_cos_sin.out` (args [input_pos, x, theta, dim, cos, sin, (ret)]).
pub fn rope_cos_sin_call<'a>(ctx: &mut KernelContext<'a>) -> Result<RopeCosSinCall<'a>> {
    let op = ctx.op_name();
    let pos = ctx.tensor(0)?;
    let x = ctx.tensor(1)?;
    let theta = ctx.double(2)?;
    let dim = ctx.int(3)?;
    super::check_pos(op, &pos)?;
    check_io_dtype(op, "x", x.dtype())?;
    if x.dim() < 2 {
        return Err(Error::invalid_argument(format!(
            "{op}: x must be [B, T, ...] (it gives T and the dtype), got {:?}",
            x.sizes()
        )));
    }
    let dim = usize::try_from(dim)
        .ok()
        .filter(|&d| d > 0 && d % 2 == 0 && d <= 1 << 16)
        .ok_or_else(|| {
            Error::invalid_argument(format!("{op}: dim {dim} must be even, in 2..=65536"))
        })?;
    if !(theta.is_finite() && theta > 0.0) {
        return Err(Error::invalid_argument(format!(
            "{op}: theta {theta} must be finite and positive"
        )));
    }
    let t = x.sizes()[1];
    let cos = ctx.resize_out(4, &[t, dim])?;
    let sin = ctx.resize_out(5, &[t, dim])?;
    expect_dtype(op, "cos", &cos, x.dtype())?;
    expect_dtype(op, "sin", &sin, x.dtype())?;
    Ok(RopeCosSinCall {
        pos,
        cos,
        sin,
        theta: theta as f32,
        dims: [t, dim],
    })
}

/// `1 / theta^(2j / dim)` in float32, as the model computes its `inv_freq` (the exponent
/// divided, the power and the reciprocal each rounded to float32).
pub fn rope_inv_freq(theta: f32, dim: usize, j: usize) -> f32 {
    1.0 / theta.powf((2 * j) as f32 / dim as f32)
}

/// `etch::rope_cos_sin.out` on the CPU.
pub fn rope_cos_sin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = rope_cos_sin_call(ctx)?;
    let p0 = c.pos.data::<i64>()?[0];
    let dt = c.cos.dtype();
    dispatch_io!(dt, op, "x", |T| cos_sin::<T>(&mut c, p0))
}

fn cos_sin<T: FElem<F = f32>>(c: &mut RopeCosSinCall<'_>, p0: i64) -> Result<()> {
    let [_, dim] = c.dims;
    let half = dim / 2;
    let cos = c.cos.data_mut::<T>()?;
    let sin = c.sin.data_mut::<T>()?;
    // inv_freq in chunks on the stack (no allocation), each used for every row.
    let mut inv = [0f32; 256];
    for j0 in (0..half).step_by(inv.len()) {
        let n = (half - j0).min(inv.len());
        for (j, v) in inv[..n].iter_mut().enumerate() {
            *v = rope_inv_freq(c.theta, dim, j0 + j);
        }
        for (i, (cr, sr)) in cos
            .chunks_exact_mut(dim)
            .zip(sin.chunks_exact_mut(dim))
            .enumerate()
        {
            let p = p0.wrapping_add(i as i64) as f32;
            for (j, &f) in inv[..n].iter().enumerate() {
                let a = p * f;
                let (cv, sv) = (T::from_f(a.cos()), T::from_f(a.sin()));
                // The table is [freqs, freqs]: column j and column half + j are equal.
                cr[j0 + j] = cv;
                cr[half + j0 + j] = cv;
                sr[j0 + j] = sv;
                sr[half + j0 + j] = sv;
            }
        }
    }
    Ok(())
}
