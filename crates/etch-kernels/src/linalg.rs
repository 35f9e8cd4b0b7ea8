//! Matrix products on the `gemm` crate: `mm`, `bmm`, `addmm`, `baddbmm`, `linear`.
//!
//! `f32` and `f64` call `gemm` on the tensors in place (any strides); `f16` and `bf16` are
//! widened to `f32`, multiplied with `f32` accumulation, and rounded once per element.
//! Integer dtypes (as in ExecuTorch's portable `mm`/`bmm`/`addmm`) use plain loops with
//! wrapping `i64` arithmetic, which PyTorch's results match after truncation to the dtype.

use crate::gemm::{Axis, GemmElem, Plan, Strides};
use crate::threads::{self, SharedMut};
use crate::util::*;
use etch_core::{
    Error, KernelContext, KernelRegistry, Prepared, Result, ScalarType, TensorRef, bf16, f16,
};

/// A batched matrix operand: data plus (batch, row, col) strides in elements.
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Batch, row and column strides.
    pub strides: [usize; 3],
}

/// Sizes of a batched product `out[b] = a[b] (m×k) · b[b] (k×n)`.
#[derive(Clone, Copy, Debug)]
pub struct GemmDims {
    /// Batch count.
    pub batch: usize,
    /// Rows of `a` and `out`.
    pub m: usize,
    /// Columns of `b` and `out`.
    pub n: usize,
    /// The contracted size.
    pub k: usize,
}

/// A tensor's elements as a matrix operand with the given strides.
fn mat<'a, T: etch_core::Element>(t: &TensorRef<'a>, strides: [usize; 3]) -> Result<MatRef<'a, T>> {
    Ok(MatRef {
        data: t.data::<T>()?,
        strides,
    })
}

fn max_offset(batch: usize, r: usize, c: usize, s: [usize; 3]) -> usize {
    (batch.saturating_sub(1)) * s[0] + r.saturating_sub(1) * s[1] + c.saturating_sub(1) * s[2]
}

/// Multiply-adds below which a product (or a batch of them) stays on the calling thread,
/// and the least work a thread is given.
pub const GEMM_TASK_WORK: usize = 1 << 20;

/// `out[b] = (read_dst ? out[b] : 0) + alpha · a[b] · rhs[b]` for `f32` or `f64`.
///
/// Packing memory comes from the scratch pool (nothing allocates once warm). Large work is
/// split over the thread pool: over the batch, and within a product over blocks of output
/// rows or columns ([`crate::gemm`]); the result does not depend on the split.
#[allow(clippy::too_many_arguments)]
pub fn gemm_batched<F: Float + GemmElem>(
    op: &str,
    d: GemmDims,
    a: MatRef<'_, F>,
    b: MatRef<'_, F>,
    out: &mut [F],
    so: [usize; 3],
    alpha: F,
    read_dst: bool,
) -> Result<()> {
    if d.batch == 0 || d.m == 0 || d.n == 0 {
        return Ok(());
    }
    if d.k == 0 {
        if !read_dst {
            for bi in 0..d.batch {
                for i in 0..d.m {
                    for j in 0..d.n {
                        out[bi * so[0] + i * so[1] + j * so[2]] = F::ZERO;
                    }
                }
            }
        }
        return Ok(());
    }
    // Soundness: every address the product touches must lie inside the slices.
    if max_offset(d.batch, d.m, d.k, a.strides) >= a.data.len()
        || max_offset(d.batch, d.k, d.n, b.strides) >= b.data.len()
        || max_offset(d.batch, d.m, d.n, so) >= out.len()
    {
        return Err(Error::internal(format!(
            "{op}: matrix operand out of bounds"
        )));
    }
    let s = Strides {
        dst: [so[1], so[2]],
        lhs: [a.strides[1], a.strides[2]],
        rhs: [b.strides[1], b.strides[2]],
    };
    let plan = Plan::new::<F>(d.m, d.n, d.k, s);
    let work = d.batch.saturating_mul(d.m * d.n).saturating_mul(d.k);
    // At most two blocks per thread (should tasks per thread rise): every block packs its
    // own copy of one operand.
    let mut tasks = threads::tasks_for(work, GEMM_TASK_WORK).min(2 * threads::num_threads());
    // Units of work: `per_item` blocks of each batch item.
    let (axis, mult, len) = match plan.split() {
        Some((ax, mult)) => (ax, mult, if ax == Axis::Rows { d.m } else { d.n }),
        None => (Axis::Rows, 1, d.m),
    };
    let per_item = if tasks > d.batch && plan.split().is_some() {
        tasks.div_ceil(d.batch).min(len.div_ceil(mult)).max(1)
    } else {
        1
    };
    let units = d.batch * per_item;
    tasks = tasks.min(units);
    // Block `j` of an item: a range of rows or columns on multiples of `mult`.
    let chunks = len.div_ceil(mult);
    let block = |j: usize| {
        let r = threads::part(chunks, per_item, j);
        (r.start * mult)..(r.end * mult).min(len)
    };
    let widest = (0..per_item).map(|j| block(j).len()).max().unwrap_or(0);
    let ws_len = match axis {
        Axis::Rows => plan.workspace_len::<F>(widest, d.n),
        Axis::Cols => plan.workspace_len::<F>(d.m, widest),
    };
    // scratch: one packing workspace per task.
    let mut ws = crate::scratch::take(tasks * ws_len, F::ZERO);
    let ws = SharedMut::new(&mut ws);
    let dst = SharedMut::new(out);
    let (pa, pb) = (a.data.as_ptr() as usize, b.data.as_ptr() as usize);
    threads::run_shares(units, tasks, &|t, range| {
        // SAFETY: task `t` owns workspace `t`.
        let w = unsafe { ws.slice(t * ws_len, ws_len) };
        for u in range {
            let (bi, j) = (u / per_item, u % per_item);
            let (rows, cols) = match axis {
                Axis::Rows => (block(j), 0..d.n),
                Axis::Cols => (0..d.m, block(j)),
            };
            // SAFETY: the bounds were checked above; `out` does not alias `a` or `b` (it is
            // borrowed mutably while they are shared); units write disjoint blocks.
            unsafe {
                plan.run(
                    dst.as_ptr().add(bi * so[0]),
                    (pa as *const F).add(bi * a.strides[0]),
                    (pb as *const F).add(bi * b.strides[0]),
                    s,
                    F::ONE,
                    alpha,
                    read_dst,
                    rows,
                    cols,
                    w,
                );
            }
        }
    });
    Ok(())
}

/// Copies a strided batch of matrices into a contiguous `f32` buffer.
fn widen<T: FElem<F = f32>>(
    src: MatRef<'_, T>,
    batch: usize,
    r: usize,
    c: usize,
) -> crate::scratch::Scratch<f32> {
    // scratch: widened copy of a half-precision operand (pooled, reused across calls).
    let mut v = crate::scratch::take(0, 0f32);
    v.reserve(batch * r * c);
    for bi in 0..batch {
        for i in 0..r {
            for j in 0..c {
                v.push(
                    src.data[bi * src.strides[0] + i * src.strides[1] + j * src.strides[2]].to_f(),
                );
            }
        }
    }
    v
}

/// A bias added to a matrix product: `beta · bias`, broadcast with the given strides over
/// (batch, m, n).
pub struct Bias<'a> {
    /// The bias tensor.
    pub t: TensorRef<'a>,
    /// Broadcast strides over (batch, row, col).
    pub strides: [usize; 3],
    /// Its coefficient.
    pub beta: f64,
}

fn fill_bias<T: Elem, F: Float>(
    d: GemmDims,
    bias: &Bias<'_>,
    src: &[T],
    out: &mut [F],
    so: [usize; 3],
) {
    let beta = F::from_f64(bias.beta);
    let s = bias.strides;
    for bi in 0..d.batch {
        for i in 0..d.m {
            for j in 0..d.n {
                let v: F = src[bi * s[0] + i * s[1] + j * s[2]].to_c().cast();
                out[bi * so[0] + i * so[1] + j * so[2]] = beta * v;
            }
        }
    }
}

/// `out = beta · bias + alpha · a · b` in the dtype of the operands (all must match).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    op: &str,
    d: GemmDims,
    a: &TensorRef<'_>,
    sa: [usize; 3],
    b: &TensorRef<'_>,
    sb: [usize; 3],
    bias: Option<Bias<'_>>,
    alpha: f64,
    out: &mut TensorRef<'_>,
    so: [usize; 3],
) -> Result<()> {
    let dt = a.dtype();
    same_dtype(op, dt, b.dtype())?;
    same_dtype(op, dt, out.dtype())?;
    if let Some(bias) = &bias {
        same_dtype(op, dt, bias.t.dtype())?;
    }
    // With beta == 0 the bias is ignored entirely (NaN/inf in it do not propagate).
    let bias = bias.filter(|b| b.beta != 0.0);
    #[allow(clippy::too_many_arguments)]
    fn native<F: Float + Elem + GemmElem>(
        op: &str,
        d: GemmDims,
        a: MatRef<'_, F>,
        b: MatRef<'_, F>,
        bias: Option<Bias<'_>>,
        alpha: f64,
        out: &mut [F],
        so: [usize; 3],
    ) -> Result<()> {
        if let Some(bias) = &bias {
            let src = bias.t.data::<F>()?;
            fill_bias(d, bias, src, out, so);
        }
        gemm_batched(
            op,
            d,
            a,
            b,
            out,
            so,
            <F as Compute>::from_f64(alpha),
            bias.is_some(),
        )
    }
    #[allow(clippy::too_many_arguments)]
    fn half<T: FElem<F = f32>>(
        op: &str,
        d: GemmDims,
        a: MatRef<'_, T>,
        b: MatRef<'_, T>,
        bias: Option<Bias<'_>>,
        alpha: f64,
        out: &mut [T],
        so: [usize; 3],
    ) -> Result<()> {
        let aw = widen(a, d.batch, d.m, d.k);
        let bw = widen(b, d.batch, d.k, d.n);
        // scratch: f32 accumulator for the product.
        let mut acc = crate::scratch::take(d.batch * d.m * d.n, 0f32);
        let sacc = [d.m * d.n, d.n, 1];
        if let Some(bias) = &bias {
            let src = bias.t.data::<T>()?;
            fill_bias(d, bias, src, &mut acc, sacc);
        }
        let ma = MatRef {
            data: &aw,
            strides: [d.m * d.k, d.k, 1],
        };
        let mb = MatRef {
            data: &bw,
            strides: [d.k * d.n, d.n, 1],
        };
        gemm_batched(op, d, ma, mb, &mut acc, sacc, alpha as f32, bias.is_some())?;
        for bi in 0..d.batch {
            for i in 0..d.m {
                for j in 0..d.n {
                    out[bi * so[0] + i * so[1] + j * so[2]] =
                        T::from_f(acc[bi * sacc[0] + i * d.n + j]);
                }
            }
        }
        Ok(())
    }
    match dt {
        ScalarType::Float => {
            let (ma, mb) = (mat::<f32>(a, sa)?, mat::<f32>(b, sb)?);
            native(op, d, ma, mb, bias, alpha, out.data_mut::<f32>()?, so)
        }
        ScalarType::Double => {
            let (ma, mb) = (mat::<f64>(a, sa)?, mat::<f64>(b, sb)?);
            native(op, d, ma, mb, bias, alpha, out.data_mut::<f64>()?, so)
        }
        ScalarType::Half => {
            let (ma, mb) = (mat::<f16>(a, sa)?, mat::<f16>(b, sb)?);
            half(op, d, ma, mb, bias, alpha, out.data_mut::<f16>()?, so)
        }
        ScalarType::BFloat16 => {
            let (ma, mb) = (mat::<bf16>(a, sa)?, mat::<bf16>(b, sb)?);
            half(op, d, ma, mb, bias, alpha, out.data_mut::<bf16>()?, so)
        }
        ScalarType::Byte => int_matmul::<u8>(op, d, a, sa, b, sb, bias, alpha, out, so),
        ScalarType::Char => int_matmul::<i8>(op, d, a, sa, b, sb, bias, alpha, out, so),
        ScalarType::Short => int_matmul::<i16>(op, d, a, sa, b, sb, bias, alpha, out, so),
        ScalarType::Int => int_matmul::<i32>(op, d, a, sa, b, sb, bias, alpha, out, so),
        ScalarType::Long => int_matmul::<i64>(op, d, a, sa, b, sb, bias, alpha, out, so),
        other => Err(bad_dtype(op, "input", other)),
    }
}

/// `out = beta · bias + alpha · a · b` for an integer dtype: `i64` wrapping arithmetic,
/// truncated to the dtype once per element (PyTorch's result modulo 2^bits). Float `alpha`
/// and `beta` truncate toward zero, as PyTorch converts them for integer tensors.
#[allow(clippy::too_many_arguments)]
fn int_matmul<T: Elem<C = i64>>(
    op: &str,
    d: GemmDims,
    a: &TensorRef<'_>,
    sa: [usize; 3],
    b: &TensorRef<'_>,
    sb: [usize; 3],
    bias: Option<Bias<'_>>,
    alpha: f64,
    out: &mut TensorRef<'_>,
    so: [usize; 3],
) -> Result<()> {
    let (x, y) = (a.data::<T>()?, b.data::<T>()?);
    let bias = match &bias {
        Some(bias) => Some((bias.t.data::<T>()?, bias.strides, bias.beta as i64)),
        None => None,
    };
    let o = out.data_mut::<T>()?;
    if d.batch == 0 || d.m == 0 || d.n == 0 {
        return Ok(());
    }
    let oob = |len: usize, r: usize, c: usize, s: [usize; 3]| {
        r > 0 && c > 0 && max_offset(d.batch, r, c, s) >= len
    };
    if oob(x.len(), d.m, d.k, sa)
        || oob(y.len(), d.k, d.n, sb)
        || oob(o.len(), d.m, d.n, so)
        || bias.is_some_and(|(t, s, _)| oob(t.len(), d.m, d.n, s))
    {
        return Err(Error::internal(format!(
            "{op}: matrix operand out of bounds"
        )));
    }
    let alpha = alpha as i64;
    // scratch: one output row of i64 accumulators.
    let mut acc = crate::scratch::take(d.n, 0i64);
    for bi in 0..d.batch {
        for i in 0..d.m {
            acc.iter_mut().for_each(|v| *v = 0);
            let arow = bi * sa[0] + i * sa[1];
            for kk in 0..d.k {
                let av = x[arow + kk * sa[2]].to_c();
                let brow = bi * sb[0] + kk * sb[1];
                for (j, v) in acc.iter_mut().enumerate() {
                    *v = v.wrapping_add(av.wrapping_mul(y[brow + j * sb[2]].to_c()));
                }
            }
            for (j, &v) in acc.iter().enumerate() {
                let mut r = alpha.wrapping_mul(v);
                if let Some((t, s, beta)) = bias {
                    r = r
                        .wrapping_add(beta.wrapping_mul(t[bi * s[0] + i * s[1] + j * s[2]].to_c()));
                }
                o[bi * so[0] + i * so[1] + j * so[2]] = T::from_c(r);
            }
        }
    }
    Ok(())
}

fn need_dim(op: &str, what: &str, t: &TensorRef<'_>, n: usize) -> Result<()> {
    if t.dim() != n {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be {n}-D, got shape {:?}",
            t.sizes()
        )));
    }
    Ok(())
}

fn s2(t: &TensorRef<'_>) -> [usize; 3] {
    [0, t.strides()[0], t.strides()[1]]
}
fn s3(t: &TensorRef<'_>) -> [usize; 3] {
    [t.strides()[0], t.strides()[1], t.strides()[2]]
}

/// Bias strides over (batch, m, n) for a bias broadcastable to `out`.
fn bias_strides(op: &str, bias: &TensorRef<'_>, out: &[usize]) -> Result<[usize; 3]> {
    let shape = broadcast_shape(op, bias.sizes(), out)?;
    if &shape[..] != out {
        return Err(Error::invalid_argument(format!(
            "{op}: bias of shape {:?} does not broadcast to {out:?}",
            bias.sizes()
        )));
    }
    let s = broadcast_strides(bias.sizes(), bias.strides(), out);
    Ok(match s.len() {
        2 => [0, s[0], s[1]],
        3 => [s[0], s[1], s[2]],
        _ => [0, 0, 0],
    })
}

fn mm_like(ctx: &mut KernelContext<'_>, op: &str, batched: bool, with_bias: bool) -> Result<()> {
    let off = with_bias as usize;
    let a = ctx.tensor(off)?;
    let b = ctx.tensor(off + 1)?;
    let nd = if batched { 3 } else { 2 };
    need_dim(op, "self", &a, nd)?;
    need_dim(op, "mat2", &b, nd)?;
    let (sa, sb) = (a.sizes(), b.sizes());
    let d = if batched {
        if sa[0] != sb[0] || sa[2] != sb[1] {
            return Err(Error::invalid_argument(format!(
                "{op}: cannot multiply {sa:?} by {sb:?}"
            )));
        }
        GemmDims {
            batch: sa[0],
            m: sa[1],
            k: sa[2],
            n: sb[2],
        }
    } else {
        if sa[1] != sb[0] {
            return Err(Error::invalid_argument(format!(
                "{op}: cannot multiply {sa:?} by {sb:?}"
            )));
        }
        GemmDims {
            batch: 1,
            m: sa[0],
            k: sa[1],
            n: sb[1],
        }
    };
    let mut oshape = Shape::new();
    if batched {
        oshape.push(d.batch)?;
    }
    oshape.push(d.m)?;
    oshape.push(d.n)?;
    let (bias, alpha) = if with_bias {
        let t = ctx.tensor(0)?;
        let beta = ctx.scalar(3)?.to_f64();
        let alpha = ctx.scalar(4)?.to_f64();
        let strides = bias_strides(op, &t, &oshape)?;
        (Some(Bias { t, strides, beta }), alpha)
    } else {
        (None, 1.0)
    };
    let out_i = if with_bias { 5 } else { 2 };
    let mut out = ctx.resize_out(out_i, &oshape)?;
    if !batched
        && alpha == 1.0
        && bias.as_ref().is_none_or(|b| b.beta == 1.0)
        && let Some(p) = ctx.prepared::<PackedFc>()
        && prepacked_fc(p, &a, &b, &mut out)?
    {
        return Ok(());
    }
    let (ma, mb, mo) = if batched {
        (s3(&a), s3(&b), s3(&out))
    } else {
        (s2(&a), s2(&b), s2(&out))
    };
    matmul(op, d, &a, ma, &b, mb, bias, alpha, &mut out, mo)
}

fn mm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    mm_like(ctx, "aten::mm.out", false, false)
}
fn bmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    mm_like(ctx, "aten::bmm.out", true, false)
}
fn addmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    mm_like(ctx, "aten::addmm.out", false, true)
}
fn baddbmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    mm_like(ctx, "aten::baddbmm.out", true, true)
}

/// `linear(input, weight, bias?)`: args [input, weight, bias, out].
fn linear_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::linear.out";
    let x = ctx.tensor(0)?;
    let w = ctx.tensor(1)?;
    let bias = ctx.opt_tensor(2)?;
    need_dim(OP, "weight", &w, 2)?;
    if x.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: input must have at least 1 dim"
        )));
    }
    let mut oshape = Shape::from_slice(x.sizes())?;
    let last = oshape.len() - 1;
    oshape[last] = w.sizes()[0];
    let mut out = ctx.resize_out(3, &oshape)?;
    if let Some(p) = ctx.prepared::<PackedFc>()
        && prepacked_fc(p, &x, &w, &mut out)?
    {
        return Ok(());
    }
    linear_into(OP, &x, &w, bias, &mut out)
}

/// A constant float32 right-hand matrix `[k, n]` of a product (the weight; `[n, k]` for
/// `aten::linear`) and its bias row, packed once when the method loads for
/// [`gemm512::fully_connected`] ([`fc_prepare`]).
struct PackedFc {
    packed: Vec<f32>,
    k: usize,
    n: usize,
    /// The weight it was packed from (its data's address and sizes).
    weight: (usize, [usize; 2]),
}

/// The product `out = x · w (+ bias)` on weights packed at load: false (nothing written)
/// when `w` is not the weight they were packed from or `x` and `out` are not contiguous
/// float32 rows of `k` and `n`. Each output is its bias, then one fused multiply-add per
/// term in order: its own order, not `matmul`'s (whose blocked sums differ in the last
/// bits), the same for any thread count.
fn prepacked_fc(
    p: &PackedFc,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &mut TensorRef<'_>,
) -> Result<bool> {
    let f32s = [x.dtype(), w.dtype(), out.dtype()] == [ScalarType::Float; 3];
    if !f32s
        || w.dim() != 2
        || p.weight
            != (
                w.data::<f32>()?.as_ptr() as usize,
                [w.sizes()[0], w.sizes()[1]],
            )
        || x.dim() == 0
        || x.sizes()[x.dim() - 1] != p.k
        || !x.is_default_dim_order()
        || !out.is_default_dim_order()
    {
        return Ok(false);
    }
    let m = x.numel() / p.k.max(1);
    if p.k == 0 || out.numel() != m * p.n {
        return Ok(false);
    }
    let (xs, o) = (x.data::<f32>()?, out.data_mut::<f32>()?);
    let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
    Ok(crate::gemm512::fully_connected(xs, m, p.k, &p.packed, p.n, o, lo, hi).is_ok())
}

/// The load-time hook of `aten::mm.out`, `aten::addmm.out` (`beta` and `alpha` 1) and
/// `aten::linear.out`: a constant float32 2-D weight (and a constant bias of `n`
/// elements) packed once ([`PackedFc`]) for the packed fully-connected kernels. `None`
/// for every other call, bad arguments included (the kernel reports those when it runs).
fn fc_prepare(ctx: &KernelContext<'_>) -> Result<Option<Prepared>> {
    Ok(pack_fc_weight(ctx).ok().flatten())
}

/// [`fc_prepare`]'s packing, or why not.
fn pack_fc_weight(ctx: &KernelContext<'_>) -> Result<Option<Prepared>> {
    let op = ctx.op_name();
    // (weight argument, bias argument, whether the weight is `[n, k]`).
    let (wi, bi, nk) = match op {
        "aten::mm.out" => (1, None, false),
        "aten::addmm.out" => {
            let ones = ctx.scalar(3)?.to_f64() == 1.0 && ctx.scalar(4)?.to_f64() == 1.0;
            if !ones {
                return Ok(None);
            }
            (2, Some(0), false)
        }
        "aten::linear.out" => (1, Some(2), true),
        _ => return Ok(None),
    };
    let w = ctx.tensor(wi)?;
    let bias = match bi {
        Some(i) => ctx.opt_tensor(i)?.map(|b| (i, b)),
        None => None,
    };
    if !crate::gemm512::available()
        || !ctx.is_constant(wi)
        || w.dtype() != ScalarType::Float
        || w.dim() != 2
        || bias
            .as_ref()
            .is_some_and(|(i, b)| !ctx.is_constant(*i) || b.dtype() != ScalarType::Float)
    {
        return Ok(None);
    }
    let (ws, st) = (w.data::<f32>()?, w.strides());
    let (k, n) = if nk {
        (w.sizes()[1], w.sizes()[0])
    } else {
        (w.sizes()[0], w.sizes()[1])
    };
    // The bias row: `n` elements, contiguous, as `[n]` or `[1, n]`.
    let bs = match &bias {
        Some((_, b)) if b.numel() != n || !b.is_default_dim_order() => return Ok(None),
        Some((_, b)) => Some(b.data::<f32>()?),
        None => None,
    };
    let at = |j: usize, kk: usize| {
        let i = if nk {
            j * st[0] + kk * st[1]
        } else {
            kk * st[0] + j * st[1]
        };
        ws[i]
    };
    let Some(packed) = crate::gemm512::pack_fc(n, k, at, bs) else {
        return Ok(None);
    };
    Ok(Some(std::sync::Arc::new(PackedFc {
        packed,
        k,
        n,
        weight: (ws.as_ptr() as usize, [w.sizes()[0], w.sizes()[1]]),
    })))
}

/// `out = x @ w^T (+ bias)` into `out`, already shaped `[..., N]` (`aten::linear`, and each
/// linear of `etch::linear_group`).
pub(crate) fn linear_into(
    op: &str,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    bias: Option<TensorRef<'_>>,
    out: &mut TensorRef<'_>,
) -> Result<()> {
    need_dim(op, "weight", w, 2)?;
    require_contiguous(op, "input", x)?;
    if x.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: input must have at least 1 dim"
        )));
    }
    let kdim = x.sizes()[x.dim() - 1];
    if w.sizes()[1] != kdim {
        return Err(Error::invalid_argument(format!(
            "{op}: input {:?} and weight {:?} do not match",
            x.sizes(),
            w.sizes()
        )));
    }
    let n = w.sizes()[0];
    let m = x.numel() / kdim.max(1);
    require_contiguous(op, "out", out)?;
    let m = if kdim == 0 { out.numel() / n.max(1) } else { m };
    let d = GemmDims {
        batch: 1,
        m,
        n,
        k: kdim,
    };
    let bias = match bias {
        Some(t) => {
            let strides = bias_strides(op, &t, &[m, n])?;
            Some(Bias {
                t,
                strides,
                beta: 1.0,
            })
        }
        None => None,
    };
    let sw = [0, w.strides()[1], w.strides()[0]];
    matmul(op, d, x, [0, kdim, 1], w, sw, bias, 1.0, out, [0, n, 1])
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::mm.out", mm_out)?;
    reg.register("aten::bmm.out", bmm_out)?;
    reg.register("aten::addmm.out", addmm_out)?;
    reg.register("aten::baddbmm.out", baddbmm_out)?;
    reg.register("aten::linear.out", linear_out)?;
    for op in ["aten::mm.out", "aten::addmm.out", "aten::linear.out"] {
        reg.register_prepare(op, fc_prepare);
    }
    Ok(())
}
