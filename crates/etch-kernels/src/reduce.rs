//! Reductions (`sum`, `mean`, `amax`, `amin`, `any`, `all`, `argmax`, `argmin`) and `topk`.
//! Floats accumulate in `f32` (`f64` for doubles), integers in `i64`.

mod rows;

pub use rows::sum_rows_f32;

use crate::binary::{Class, class_of};
use crate::threads::SharedMut;
use crate::util::*;
use crate::{dispatch_all, dispatch_float};
use etch_core::{
    EValue, Error, KernelContext, KernelRegistry, Result, Scalar, ScalarType, TensorRef,
};

/// How to iterate a reduction: kept dims (outer) and reduced dims (inner).
#[derive(Debug)]
pub struct Plan {
    /// Sizes of the kept dims.
    pub kept: Shape,
    /// Input strides of the kept dims.
    pub kept_in: Shape,
    /// Sizes of the reduced dims.
    pub red: Shape,
    /// Input strides of the reduced dims.
    pub red_in: Shape,
    /// The out tensor's shape.
    pub out_shape: Shape,
    /// Number of elements reduced into each output.
    pub count: usize,
}

/// Plans a reduction of `t` over `dims` (`None` or empty: all dims).
pub fn plan(op: &str, t: &TensorRef<'_>, dims: Option<&[i64]>, keepdim: bool) -> Result<Plan> {
    let nd = t.dim();
    let mut mask = [false; etch_core::MAX_DIMS];
    match dims {
        Some(ds) if !ds.is_empty() => {
            for &d in ds {
                let d = wrap(op, d, nd)?;
                if nd > 0 {
                    if mask[d] {
                        return Err(Error::invalid_argument(format!(
                            "{op}: dim {d} appears twice"
                        )));
                    }
                    mask[d] = true;
                }
            }
        }
        _ => mask[..nd].iter_mut().for_each(|m| *m = true),
    }
    let mut p = Plan {
        kept: Shape::new(),
        kept_in: Shape::new(),
        red: Shape::new(),
        red_in: Shape::new(),
        out_shape: Shape::new(),
        count: 1,
    };
    for d in 0..nd {
        let (s, st) = (t.sizes()[d], t.strides()[d]);
        if mask[d] {
            p.red.push(s)?;
            p.red_in.push(st)?;
            p.count *= s;
            if keepdim {
                p.out_shape.push(1)?;
            }
        } else {
            p.kept.push(s)?;
            p.kept_in.push(st)?;
            p.out_shape.push(s)?;
        }
    }
    Ok(p)
}

/// Out strides for the kept dims (the out tensor has `plan.out_shape`), given the reduced
/// `dims` of `mask_from`.
pub fn kept_out_strides(
    p: &Plan,
    out: &TensorRef<'_>,
    keepdim: bool,
    mask_from: &TensorRef<'_>,
    dims: Option<&[i64]>,
) -> Result<Shape> {
    if !keepdim {
        return Shape::from_slice(out.strides());
    }
    // With keepdim, drop the out strides of the reduced (size-1) positions.
    let nd = mask_from.dim();
    let mut red = [dims.is_none_or(|d| d.is_empty()); etch_core::MAX_DIMS];
    if let Some(ds) = dims.filter(|d| !d.is_empty()) {
        red = [false; etch_core::MAX_DIMS];
        for &d in ds {
            red[wrap("reduce", d, nd)?] = true;
        }
    }
    let mut s = Shape::new();
    for d in 0..nd {
        if !red[d] {
            s.push(out.strides()[d])?;
        }
    }
    debug_assert_eq!(s.len(), p.kept.len());
    Ok(s)
}

/// Calls `f(out_offset, reduced_offsets)` for every output element, where
/// `reduced_offsets` walks the input elements reduced into it.
fn for_each_output(
    p: &Plan,
    so: &[usize],
    mut f: impl FnMut(usize, &mut dyn FnMut(&mut dyn FnMut(usize))),
) {
    let kept = if p.kept.is_empty() {
        Shape::new()
    } else {
        p.kept
    };
    let mut visit = |base: usize, oo: usize| {
        let mut inner = |g: &mut dyn FnMut(usize)| {
            walk(&p.red, [&p.red_in[..]], |[o], len, [x]| {
                for i in 0..len {
                    g(base + o + i * x);
                }
            });
        };
        f(oo, &mut inner);
    };
    walk(&kept, [&p.kept_in[..], so], |[oi, oo], len, [xi, xo]| {
        for i in 0..len {
            visit(oi + i * xi, oo + i * xo);
        }
    });
}

/// Elements of reduction work below which it stays on the calling thread, and the least a
/// thread is given.
const REDUCE_TASK: usize = 1 << 16;

/// [`for_each_output`] split over the thread pool by outputs when the reduction is large:
/// `f(base, out_offset, reduced_offsets)`, where `base` is the input offset of the output's
/// first reduced element. Every output is one task's, reduced in the same order whatever
/// the thread count.
fn par_for_each_output(
    p: &Plan,
    so: &[usize],
    f: impl Fn(usize, usize, &mut dyn FnMut(&mut dyn FnMut(usize))) + Sync,
) {
    let kept = if p.kept.is_empty() {
        Shape::new()
    } else {
        p.kept
    };
    let visit = |base: usize, oo: usize| {
        let mut inner = |g: &mut dyn FnMut(usize)| {
            walk(&p.red, [&p.red_in[..]], |[o], len, [x]| {
                for i in 0..len {
                    g(base + o + i * x);
                }
            });
        };
        f(base, oo, &mut inner);
    };
    let min_outputs = (REDUCE_TASK / p.count.max(1)).max(1);
    par_walk(
        &kept,
        [&p.kept_in[..], so],
        min_outputs,
        |[oi, oo], len, [xi, xo]| {
            for i in 0..len {
                visit(oi + i * xi, oo + i * xo);
            }
        },
    );
}

/// True when every output reduces one contiguous run of `count` input elements.
fn reduces_contiguous(p: &Plan) -> bool {
    let mut expect = 1usize;
    for d in (0..p.red.len()).rev() {
        if p.red[d] == 1 {
            continue;
        }
        if p.red_in[d] != expect {
            return false;
        }
        expect *= p.red[d];
    }
    true
}

/// The number of outputs when output `r` reduces the `count` input elements from
/// `r · count` and is stored at `r` (a contiguous input reduced over its innermost dims
/// into a contiguous output: NCHW global average pooling).
fn contiguous_rows(p: &Plan, so: &[usize]) -> Option<usize> {
    if !reduces_contiguous(p) {
        return None;
    }
    let (mut rows, mut step) = (1usize, p.count);
    for d in (0..p.kept.len()).rev() {
        if p.kept[d] == 1 {
            continue;
        }
        if p.kept_in[d] != step || so[d] != rows {
            return None;
        }
        rows = rows.checked_mul(p.kept[d])?;
        step = step.checked_mul(p.kept[d])?;
    }
    Some(rows)
}

/// The sum of `x` in eight interleaved partial sums (vectorisable, and with less rounding
/// error than one running sum).
fn sum_lanes<T: FElem>(x: &[T]) -> T::F {
    let mut acc = [<T::F as Compute>::ZERO; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            acc[k] += c[k].to_f();
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for &v in rest {
        s += v.to_f();
    }
    s
}

/// A decoded reduction call, shared by the CPU and device kernels: the input, its plan,
/// the resized out tensor and the out strides of the kept dims (plus, for max/min over a
/// dim, the indices tensor and its strides), and the variance correction.
pub struct Call<'a> {
    /// The input.
    pub a: TensorRef<'a>,
    /// Kept and reduced dims.
    pub plan: Plan,
    /// The out tensor, resized.
    pub out: TensorRef<'a>,
    /// Out strides of the kept dims.
    pub so: Shape,
    /// Indices of max/min over a dim, with their strides.
    pub idx: Option<(TensorRef<'a>, Shape)>,
    /// var/std correction (default 1).
    pub correction: f64,
}

fn call<'a>(a: TensorRef<'a>, plan: Plan, out: TensorRef<'a>, so: Shape) -> Call<'a> {
    Call {
        a,
        plan,
        out,
        so,
        idx: None,
        correction: 1.0,
    }
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

/// Decodes `sum`/`mean`: args [self, dim?, keepdim, dtype?, out].
pub fn sum_mean_call<'a>(ctx: &mut KernelContext<'a>, mean: bool) -> Result<Call<'a>> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = opt_dims(ctx, 1)?;
    let keepdim = ctx.bool(2)?;
    let dtype = opt_dtype(ctx, 3)?;
    let p = plan(op, &a, dims.as_deref(), keepdim)?;
    let out = ctx.resize_out(4, &p.out_shape)?;
    if let Some(dt) = dtype {
        same_dtype(op, dt, out.dtype())?;
    }
    if mean && !out.dtype().is_floating() {
        return Err(Error::invalid_argument(format!(
            "{op}: out must be floating point, got {}",
            out.dtype()
        )));
    }
    let so = kept_out_strides(&p, &out, keepdim, &a, dims.as_deref())?;
    Ok(call(a, p, out, so))
}

/// Shared body of `sum` and `mean`.
fn sum_mean(ctx: &mut KernelContext<'_>, op: &str, mean: bool) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        ..
    } = sum_mean_call(ctx, mean)?;
    let count = p.count;
    if mean
        && a.dtype() == ScalarType::Float
        && out.dtype() == ScalarType::Float
        && a.is_channels_last()
        && let &[n, c, h, w] = a.sizes()
        && count == h * w
        && count > 0
        && out.numel() == n * c
        && so[..] == [c, 1]
    {
        // Channels-last feature maps (the load-time layout choice): the pixels' mean per
        // channel, as the XNNPACK delegate's global average pooling.
        let (x, o) = (a.data::<f32>()?, out.data_mut::<f32>()?);
        return crate::conv::nhwc::global_avg_pool_f32(n, count, c, x, o)
            .map_err(|e| Error::invalid_argument(format!("{op}: {e}")));
    }
    if a.dtype() == ScalarType::Float
        && out.dtype() == ScalarType::Float
        && count > 0
        && let Some(rows) = contiguous_rows(&p, &so)
    {
        let x = a.data::<f32>()?;
        let o = out.data_mut::<f32>()?;
        if let Some(o) = o.get_mut(..rows)
            && rows::sum_rows_f32(x, count, o, mean)
        {
            return Ok(());
        }
    }
    if a.dtype() == out.dtype() && a.dtype().is_floating() {
        return dispatch_float!(a.dtype(), op, "input", |T| {
            type F = <T as FElem>::F;
            let x = a.data::<T>()?;
            let o = SharedMut::new(out.data_mut::<T>()?);
            let n = <F as Compute>::from_i64(count as i64);
            let contiguous = reduces_contiguous(&p);
            par_for_each_output(&p, &so, |base, oo, inner| {
                let acc = if count == 0 {
                    F::ZERO
                } else if contiguous {
                    sum_lanes(&x[base..base + count])
                } else {
                    let mut acc = F::ZERO;
                    inner(&mut |i| acc += x[i].to_f());
                    acc
                };
                // SAFETY: every output element is one task's.
                unsafe { o.write(oo, T::from_f(if mean { acc.div(n) } else { acc })) };
            });
            Ok(())
        });
    }
    let x = AnySlice::of(op, &a)?;
    let mut o = AnySliceMut::of(op, &mut out)?;
    match class_of(o_dtype(&o)) {
        Class::I64 => for_each_output(&p, &so, |oo, inner| {
            let mut acc = 0i64;
            inner(&mut |i| acc = acc.wrapping_add(x.get::<i64>(i)));
            o.set(oo, acc);
        }),
        _ => for_each_output(&p, &so, |oo, inner| {
            let mut acc = 0f64;
            inner(&mut |i| acc += x.get::<f64>(i));
            o.set(oo, if mean { acc / count as f64 } else { acc });
        }),
    }
    Ok(())
}

fn o_dtype(o: &AnySliceMut<'_>) -> ScalarType {
    match o {
        AnySliceMut::F32(_) => ScalarType::Float,
        AnySliceMut::F64(_) => ScalarType::Double,
        AnySliceMut::F16(_) => ScalarType::Half,
        AnySliceMut::BF16(_) => ScalarType::BFloat16,
        AnySliceMut::U8(_) => ScalarType::Byte,
        AnySliceMut::I8(_) => ScalarType::Char,
        AnySliceMut::I16(_) => ScalarType::Short,
        AnySliceMut::I32(_) => ScalarType::Int,
        AnySliceMut::I64(_) => ScalarType::Long,
        AnySliceMut::Bool(_) => ScalarType::Bool,
    }
}

fn sum_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, "aten::sum.IntList_out", false)
}
fn mean_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    sum_mean(ctx, "aten::mean.out", true)
}

/// Decodes `amax`/`amin`: args [self, dim, keepdim, out].
pub fn amax_amin_call<'a>(ctx: &mut KernelContext<'a>) -> Result<Call<'a>> {
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
    same_dtype(op, a.dtype(), out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, Some(&dims))?;
    Ok(call(a, p, out, so))
}

/// Decodes `max`/`min` over every element (`.unary_out`): args [self, out].
pub fn extreme_all_call<'a>(ctx: &mut KernelContext<'a>) -> Result<Call<'a>> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let p = plan(op, &a, None, false)?;
    let out = ctx.resize_out(1, &p.out_shape)?;
    same_dtype(op, a.dtype(), out.dtype())?;
    let so = kept_out_strides(&p, &out, false, &a, None)?;
    Ok(call(a, p, out, so))
}

/// `amax`/`amin` and `max`/`min` over every element. NaN propagates.
fn extreme(c: Call<'_>, op: &str, max: bool) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        ..
    } = c;
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        let o = SharedMut::new(out.data_mut::<T>()?);
        par_for_each_output(&p, &so, |_, oo, inner| {
            let mut best: Option<<T as Elem>::C> = None;
            inner(&mut |i| {
                let v = x[i].to_c();
                best = Some(match best {
                    None => v,
                    Some(b) if max => b.max_nan(v),
                    Some(b) => b.min_nan(v),
                });
            });
            if let Some(b) = best {
                // SAFETY: every output element is one task's.
                unsafe { o.write(oo, T::from_c(b)) };
            }
        });
        Ok(())
    })
}
fn amax_amin(ctx: &mut KernelContext<'_>, op: &str, max: bool) -> Result<()> {
    extreme(amax_amin_call(ctx)?, op, max)
}
/// The identity of `max` (the dtype's lowest value) or `min` (its highest): what
/// PyTorch's `max`/`min` `.unary_out` give for an empty input.
pub fn extreme_identity(dtype: ScalarType, max: bool) -> Scalar {
    let int = |lo: i64, hi: i64| Scalar::Int(if max { lo } else { hi });
    match dtype {
        ScalarType::Bool => Scalar::Bool(!max),
        ScalarType::Byte => int(0, u8::MAX as i64),
        ScalarType::Char => int(i8::MIN as i64, i8::MAX as i64),
        ScalarType::Short => int(i16::MIN as i64, i16::MAX as i64),
        ScalarType::Int => int(i32::MIN as i64, i32::MAX as i64),
        ScalarType::Long => int(i64::MIN, i64::MAX),
        _ => Scalar::Double(if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }),
    }
}

/// `max`/`min` over every element; of an empty input, [`extreme_identity`].
fn extreme_all(ctx: &mut KernelContext<'_>, op: &str, max: bool) -> Result<()> {
    let mut c = extreme_all_call(ctx)?;
    if c.a.numel() > 0 {
        return extreme(c, op, max);
    }
    let identity = extreme_identity(c.out.dtype(), max);
    crate::shape::fill(op, &mut c.out, identity)
}
fn max_unary_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    extreme_all(ctx, "aten::max.unary_out", true)
}
fn min_unary_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    extreme_all(ctx, "aten::min.unary_out", false)
}
fn amax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, "aten::amax.out", true)
}
fn amin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    amax_amin(ctx, "aten::amin.out", false)
}

/// Decodes `argmax`/`argmin`: args [self, dim?, keepdim, out].
pub fn arg_extreme_call<'a>(ctx: &mut KernelContext<'a>) -> Result<Call<'a>> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dim = ctx.opt_int(1)?;
    let keepdim = ctx.bool(2)?;
    let dims_buf = [dim.unwrap_or(0)];
    let dims: Option<&[i64]> = dim.map(|_| &dims_buf[..]);
    let mut p = plan(op, &a, dims, keepdim)?;
    if dim.is_none() {
        // Over the flattened tensor: keepdim keeps every dim as 1.
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
    if dim.is_none() {
        require_contiguous(op, "self", &a)?;
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
    Ok(call(a, p, out, so))
}

/// `argmax`/`argmin`. First index wins ties; NaN counts as the extreme value.
fn arg_extreme(ctx: &mut KernelContext<'_>, op: &str, max: bool) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        ..
    } = arg_extreme_call(ctx)?;
    let o = out.data_mut::<i64>()?;
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        for_each_output(&p, &so, |oo, inner| {
            let mut best: Option<<T as Elem>::C> = None;
            let (mut bi, mut k) = (0i64, 0i64);
            inner(&mut |i| {
                let v = x[i].to_c();
                let better = match best {
                    None => true,
                    Some(b) => !b.is_nan() && (v.is_nan() || if max { v > b } else { v < b }),
                };
                if better {
                    best = Some(v);
                    bi = k;
                }
                k += 1;
            });
            o[oo] = bi;
        });
        Ok(())
    })
}
fn argmax_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    arg_extreme(ctx, "aten::argmax.out", true)
}
fn argmin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    arg_extreme(ctx, "aten::argmin.out", false)
}

/// Decodes `any`/`all` into a Bool (or Byte) out, given their dims and out position.
pub fn any_all_call<'a>(
    ctx: &mut KernelContext<'a>,
    dims: Option<&[i64]>,
    keepdim: bool,
    out_i: usize,
) -> Result<Call<'a>> {
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
    Ok(call(a, p, out, so))
}

/// `any`/`all` into a Bool (or Byte) out.
fn any_all(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dims: Option<&[i64]>,
    keepdim: bool,
    out_i: usize,
    any: bool,
) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        ..
    } = any_all_call(ctx, dims, keepdim, out_i)?;
    let o = out.data_mut::<u8>()?;
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        for_each_output(&p, &so, |oo, inner| {
            let mut r = !any;
            inner(&mut |i| {
                let t = x[i].to_c().truthy();
                if any { r |= t } else { r &= t }
            });
            o[oo] = r as u8;
        });
        Ok(())
    })
}
fn any_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    any_all(ctx, "aten::any.out", Some(&d), k, 3, true)
}
fn any_dims_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = opt_dims(ctx, 1)?;
    let k = ctx.bool(2)?;
    any_all(ctx, "aten::any.dims_out", d.as_deref(), k, 3, true)
}
fn any_all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    any_all(ctx, "aten::any.all_out", None, false, 1, true)
}
fn all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    any_all(ctx, "aten::all.out", Some(&d), k, 3, false)
}
fn all_all_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    any_all(ctx, "aten::all.all_out", None, false, 1, false)
}

/// `topk`: args [self, k, dim, largest, sorted, values, indices]. Results are always
/// sorted; equal values keep the lower index first; NaN is the largest value.
fn topk_values(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::topk.values";
    let a = ctx.tensor(0)?;
    let k = ctx.int(1)?;
    let dim = wrap(OP, ctx.int(2)?, a.dim())?;
    let largest = ctx.bool(3)?;
    let n = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    if k < 0 || k as usize > n {
        return Err(Error::invalid_argument(format!(
            "{OP}: k={k} out of range for a dim of size {n}"
        )));
    }
    let k = k as usize;
    let mut osz = Shape::from_slice(a.sizes())?;
    if a.dim() > 0 {
        osz[dim] = k;
    }
    let mut vals = ctx.resize_out(5, &osz)?;
    let mut idxs = ctx.resize_out(6, &osz)?;
    same_dtype(OP, a.dtype(), vals.dtype())?;
    if idxs.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{OP}: indices must be int64, got {}",
            idxs.dtype()
        )));
    }
    let Rows {
        rows,
        sa,
        sv,
        si,
        da,
        dv,
        di,
    } = Rows::new(&a, &vals, &idxs, dim)?;
    let io = idxs.data_mut::<i64>()?;
    // scratch: candidate indices of one row.
    let mut order = crate::scratch::take(0, 0usize);
    order.reserve(n);
    dispatch_all!(a.dtype(), OP, "input", |T| {
        let x = a.data::<T>()?;
        let vo = vals.data_mut::<T>()?;
        if k == 0 {
            return Ok(());
        }
        walk(&rows, [&sa, &sv, &si], |[oa, ov, oi], len, [xa, xv, xi]| {
            for r in 0..len {
                let (ba, bv, bi) = (oa + r * xa, ov + r * xv, oi + r * xi);
                let key = |j: usize| x[ba + j * da].to_c();
                let cmp = |&p: &usize, &q: &usize| {
                    let (u, v) = (key(p), key(q));
                    let ord = match (u.is_nan(), v.is_nan()) {
                        (true, true) => std::cmp::Ordering::Equal,
                        (true, false) => std::cmp::Ordering::Greater,
                        (false, true) => std::cmp::Ordering::Less,
                        _ => u.partial_cmp(&v).unwrap_or(std::cmp::Ordering::Equal),
                    };
                    let ord = if largest { ord.reverse() } else { ord };
                    ord.then(p.cmp(&q))
                };
                order.clear();
                order.extend(0..n);
                if k < n {
                    order.select_nth_unstable_by(k - 1, cmp);
                }
                order[..k].sort_unstable_by(cmp);
                for (j, &src) in order[..k].iter().enumerate() {
                    vo[bv + j * dv] = x[ba + src * da];
                    io[bi + j * di] = src as i64;
                }
            }
        });
        Ok(())
    })
}

/// `cumsum`: args [self, dim, dtype?, out]. Integer and bool inputs sum into int64 unless
/// `dtype` says otherwise; floats accumulate in `f64` (PyTorch's CPU accumulate type).
fn cumsum_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::cumsum.out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let dtype = opt_dtype(ctx, 2)?;
    let mut out = ctx.resize_out(3, a.sizes())?;
    let want = dtype.unwrap_or(if a.dtype().is_floating() {
        a.dtype()
    } else {
        ScalarType::Long
    });
    same_dtype(OP, want, out.dtype())?;
    if a.numel() == 0 {
        return Ok(());
    }
    let (n, ssa, sso) = if a.dim() == 0 {
        (1, 0, 0)
    } else {
        (a.sizes()[dim], a.strides()[dim], out.strides()[dim])
    };
    let mut rows = Shape::from_slice(a.sizes())?;
    if !rows.is_empty() {
        rows[dim] = 1;
    }
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let x = AnySlice::of(OP, &a)?;
    let mut o = AnySliceMut::of(OP, &mut out)?;
    let float = want.is_floating();
    walk(&rows, [&sa, &so], |[oa, oo], len, [xa, xo]| {
        for r in 0..len {
            let (ba, bo) = (oa + r * xa, oo + r * xo);
            if float {
                let mut acc = 0f64;
                for i in 0..n {
                    acc += x.get::<f64>(ba + i * ssa);
                    o.set(bo + i * sso, acc);
                }
            } else {
                let mut acc = 0i64;
                for i in 0..n {
                    acc = acc.wrapping_add(x.get::<i64>(ba + i * ssa));
                    o.set(bo + i * sso, acc);
                }
            }
        }
    });
    Ok(())
}

/// Decodes `var.correction_out` / `std.correction_out`: args [self, dim?, correction?,
/// keepdim, out].
pub fn var_std_call<'a>(ctx: &mut KernelContext<'a>) -> Result<Call<'a>> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = opt_dims(ctx, 1)?;
    let correction = ctx.opt_scalar(2)?.map_or(1.0, |s| s.to_f64());
    let keepdim = ctx.bool(3)?;
    if !a.dtype().is_floating() {
        return Err(bad_dtype(op, "input", a.dtype()));
    }
    let p = plan(op, &a, dims.as_deref(), keepdim)?;
    let out = ctx.resize_out(4, &p.out_shape)?;
    same_dtype(op, a.dtype(), out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, dims.as_deref())?;
    Ok(Call {
        correction,
        ..call(a, p, out, so)
    })
}

/// `var`/`std`: divides by `max(0, N - correction)` (default correction 1), as PyTorch
/// does.
fn var_std(ctx: &mut KernelContext<'_>, op: &str, std: bool) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        correction,
        ..
    } = var_std_call(ctx)?;
    let x = AnySlice::of(op, &a)?;
    let mut o = AnySliceMut::of(op, &mut out)?;
    let n = p.count as f64;
    let denom = (n - correction).max(0.0);
    for_each_output(&p, &so, |oo, inner| {
        let mut sum = 0f64;
        inner(&mut |i| sum += x.get::<f64>(i));
        let mean = sum / n;
        let mut sq = 0f64;
        inner(&mut |i| {
            let d = x.get::<f64>(i) - mean;
            sq += d * d;
        });
        let v = sq / denom;
        o.set(oo, if std { v.sqrt() } else { v });
    });
    Ok(())
}
fn var_correction_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, "aten::var.correction_out", false)
}
fn std_correction_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    var_std(ctx, "aten::std.correction_out", true)
}

/// Decodes `prod.int_out` / `prod.out` (dims, dtype and out positions given): integer and
/// bool inputs multiply into int64 unless `dtype` says otherwise.
pub fn prod_call<'a>(
    ctx: &mut KernelContext<'a>,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype_i: usize,
    out_i: usize,
) -> Result<Call<'a>> {
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
    same_dtype(op, want, out.dtype())?;
    let so = kept_out_strides(&p, &out, keepdim, &a, dims)?;
    Ok(call(a, p, out, so))
}

/// Shared body of `prod.int_out` and `prod.out`.
fn prod(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype_i: usize,
    out_i: usize,
) -> Result<()> {
    let Call {
        a,
        plan: p,
        mut out,
        so,
        ..
    } = prod_call(ctx, dims, keepdim, dtype_i, out_i)?;
    let want = out.dtype();
    let x = AnySlice::of(op, &a)?;
    let mut o = AnySliceMut::of(op, &mut out)?;
    if want.is_floating() {
        for_each_output(&p, &so, |oo, inner| {
            let mut acc = 1f64;
            inner(&mut |i| acc *= x.get::<f64>(i));
            o.set(oo, acc);
        });
    } else {
        for_each_output(&p, &so, |oo, inner| {
            let mut acc = 1i64;
            inner(&mut |i| acc = acc.wrapping_mul(x.get::<i64>(i)));
            o.set(oo, acc);
        });
    }
    Ok(())
}
fn prod_int_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = [ctx.int(1)?];
    let k = ctx.bool(2)?;
    prod(ctx, "aten::prod.int_out", Some(&d), k, 3, 4)
}
fn prod_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    prod(ctx, "aten::prod.out", None, false, 1, 2)
}

/// Decodes `max.dim_max` / `min.dim_min`: args [self, dim, keepdim, values, indices].
pub fn dim_extreme_call<'a>(ctx: &mut KernelContext<'a>) -> Result<Call<'a>> {
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
    same_dtype(op, a.dtype(), vals.dtype())?;
    if idxs.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64, got {}",
            idxs.dtype()
        )));
    }
    let sv = kept_out_strides(&p, &vals, keepdim, &a, Some(&dims))?;
    let si = kept_out_strides(&p, &idxs, keepdim, &a, Some(&dims))?;
    Ok(Call {
        idx: Some((idxs, si)),
        ..call(a, p, vals, sv)
    })
}

/// `max.dim_max` / `min.dim_min`. NaN wins (its first occurrence); ties keep the first
/// index.
fn dim_extreme(ctx: &mut KernelContext<'_>, op: &str, max: bool) -> Result<()> {
    let Call {
        a,
        plan: p,
        out: mut vals,
        so: sv,
        idx,
        ..
    } = dim_extreme_call(ctx)?;
    let (mut idxs, si) = idx.ok_or_else(|| Error::internal(format!("{op}: no indices")))?;
    // Map each value offset to its index offset through the kept position.
    let io = idxs.data_mut::<i64>()?;
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        let vo = vals.data_mut::<T>()?;
        let mut pos_i = crate::scratch::take(0, 0usize);
        pos_i.reserve(io.len());
        // Walk the kept dims twice in the same order: once for index offsets.
        let kept = p.kept;
        walk(&kept, [&si[..]], |[oi], len, [xi]| {
            for r in 0..len {
                pos_i.push(oi + r * xi);
            }
        });
        let mut n = 0usize;
        for_each_output(&p, &sv, |oo, inner| {
            let mut best: Option<<T as Elem>::C> = None;
            let (mut bi, mut k) = (0i64, 0i64);
            let mut bv = None;
            inner(&mut |i| {
                let v = x[i].to_c();
                let better = match best {
                    None => true,
                    Some(b) => !b.is_nan() && (v.is_nan() || if max { v > b } else { v < b }),
                };
                if better {
                    best = Some(v);
                    bv = Some(x[i]);
                    bi = k;
                }
                k += 1;
            });
            if let Some(v) = bv {
                vo[oo] = v;
            }
            if let Some(&pi) = pos_i.get(n) {
                io[pi] = bi;
            }
            n += 1;
        });
        Ok(())
    })
}
fn max_dim_max(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, "aten::max.dim_max", true)
}
fn min_dim_min(ctx: &mut KernelContext<'_>) -> Result<()> {
    dim_extreme(ctx, "aten::min.dim_min", false)
}

/// Shared body of `sort.values` and `sort.values_stable`: a stable sort along `dim`; NaN
/// sorts as the largest value (last ascending, first descending), as in PyTorch.
fn sort(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dim_i: usize,
    desc_i: usize,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let dim = wrap(op, ctx.int(dim_i)?, a.dim())?;
    let descending = ctx.bool(desc_i)?;
    let mut vals = ctx.resize_out(out_i, a.sizes())?;
    let mut idxs = ctx.resize_out(out_i + 1, a.sizes())?;
    same_dtype(op, a.dtype(), vals.dtype())?;
    if idxs.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64, got {}",
            idxs.dtype()
        )));
    }
    if a.numel() == 0 {
        return Ok(());
    }
    let n = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    let Rows {
        rows,
        sa,
        sv,
        si,
        da,
        dv,
        di,
    } = Rows::new(&a, &vals, &idxs, dim)?;
    let io = idxs.data_mut::<i64>()?;
    let mut order = crate::scratch::take(0, 0usize);
    order.reserve(n);
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        let vo = vals.data_mut::<T>()?;
        walk(&rows, [&sa, &sv, &si], |[oa, ov, oi], len, [xa, xv, xi]| {
            for r in 0..len {
                let (ba, bv, bi) = (oa + r * xa, ov + r * xv, oi + r * xi);
                let key = |j: usize| x[ba + j * da].to_c();
                order.clear();
                order.extend(0..n);
                order.sort_by(|&p, &q| {
                    let (u, v) = (key(p), key(q));
                    let ord = match (u.is_nan(), v.is_nan()) {
                        (true, true) => std::cmp::Ordering::Equal,
                        (true, false) => std::cmp::Ordering::Greater,
                        (false, true) => std::cmp::Ordering::Less,
                        _ => u.partial_cmp(&v).unwrap_or(std::cmp::Ordering::Equal),
                    };
                    if descending { ord.reverse() } else { ord }
                });
                for (j, &src) in order.iter().enumerate() {
                    vo[bv + j * dv] = x[ba + src * da];
                    io[bi + j * di] = src as i64;
                }
            }
        });
        Ok(())
    })
}
fn sort_values(ctx: &mut KernelContext<'_>) -> Result<()> {
    sort(ctx, "aten::sort.values", 1, 2, 3)
}
fn sort_values_stable(ctx: &mut KernelContext<'_>) -> Result<()> {
    sort(ctx, "aten::sort.values_stable", 2, 3, 4)
}

/// Iteration over the rows along `dim` of a (values, indices) pair of outputs, as topk and
/// sort use it: the row shape (`dim` collapsed), each tensor's strides, and each one's
/// stride along `dim`.
struct Rows {
    rows: Shape,
    sa: Shape,
    sv: Shape,
    si: Shape,
    da: usize,
    dv: usize,
    di: usize,
}

impl Rows {
    fn new(
        a: &TensorRef<'_>,
        vals: &TensorRef<'_>,
        idxs: &TensorRef<'_>,
        dim: usize,
    ) -> Result<Rows> {
        let mut rows = Shape::from_slice(a.sizes())?;
        if a.dim() > 0 {
            rows[dim] = 1;
        }
        let (sa, sv, si) = (
            Shape::from_slice(a.strides())?,
            Shape::from_slice(vals.strides())?,
            Shape::from_slice(idxs.strides())?,
        );
        let (da, dv, di) = if a.dim() == 0 {
            (0, 0, 0)
        } else {
            (sa[dim], sv[dim], si[dim])
        };
        Ok(Rows {
            rows,
            sa,
            sv,
            si,
            da,
            dv,
            di,
        })
    }
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    let list: &[(&str, etch_core::KernelFn)] = &[
        ("aten::sum.IntList_out", sum_out),
        ("aten::mean.out", mean_out),
        ("aten::amax.out", amax_out),
        ("aten::max.unary_out", max_unary_out),
        ("aten::min.unary_out", min_unary_out),
        ("aten::amin.out", amin_out),
        ("aten::argmax.out", argmax_out),
        ("aten::argmin.out", argmin_out),
        ("aten::any.out", any_out),
        ("aten::any.dims_out", any_dims_out),
        ("aten::any.all_out", any_all_out),
        ("aten::all.out", all_out),
        ("aten::all.all_out", all_all_out),
        ("aten::topk.values", topk_values),
        ("aten::cumsum.out", cumsum_out),
        ("aten::var.correction_out", var_correction_out),
        ("aten::std.correction_out", std_correction_out),
        ("aten::prod.int_out", prod_int_out),
        ("aten::prod.out", prod_out),
        ("aten::max.dim_max", max_dim_max),
        ("aten::min.dim_min", min_dim_min),
        ("aten::sort.values", sort_values),
        ("aten::sort.values_stable", sort_values_stable),
    ];
    for &(n, f) in list {
        reg.register(n, f)?;
    }
    Ok(())
}
