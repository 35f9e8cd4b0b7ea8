//! `etch::rope.out(x, cos, sin, *, out)`: rotate-half rotary embedding on the first `R`
//! features of each head (Qwen 3.5's partial RoPE), one kernel instead of the ~14 slices,
//! negations, concatenations, products and sums PyTorch exports per tensor (docs/OPS.md).
//!
//! `x [B, T, H, D]`, `cos`/`sin [T, R]` (`R` even, `0 < R <= D`), all one dtype. With
//! `h = R / 2` and `rot_i = -x_{i+h}` for `i < h`, `x_{i-h}` for `h <= i < R`:
//! `out_i = rnd(rnd(x_i * cos_i) + rnd(rot_i * sin_i))` for `i < R`, `x_i` beyond, where
//! `rnd` rounds to the dtype: what the model computes in its dtype, operation by operation.

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
    let half = r / 2;
    let rnd = |v: f32| T::from_f(v).to_f();
    let tasks = threads::tasks_for(rows * d, TASK).clamp(1, rows.max(1));
    threads::run(tasks, &|task| {
        for row in threads::part(rows, tasks, task) {
            let pos = (row / h) % t;
            let xr = &x[row * d..(row + 1) * d];
            let (cr, sr) = (&cos[pos * r..(pos + 1) * r], &sin[pos * r..(pos + 1) * r]);
            // SAFETY: row `row` is this task's alone.
            let orow = unsafe { o.slice(row * d, d) };
            for i in 0..r {
                let rot = if i < half {
                    -xr[i + half].to_f()
                } else {
                    xr[i - half].to_f()
                };
                let v = rnd(xr[i].to_f() * cr[i].to_f()) + rnd(rot * sr[i].to_f());
                orow[i] = T::from_f(v);
            }
            orow[r..].copy_from_slice(&xr[r..]);
        }
    });
    Ok(())
}
