//! Elementwise nodes: binary ops with broadcasting and fused output clamps, unary
//! activations, clamp, softmax, global average pooling. Tensors are viewed in XNNPACK's
//! own shapes, so broadcasting follows XNNPACK's (numpy's) rules.

use super::super::graph::{BinaryOp, Node, Op, UnaryOp};
use super::super::plan::{Builder, bounded};
use etch_core::{Error, KernelContext, KernelFn, Result, ScalarType};
use etch_kernels::binary::{
    Add, BinOp, Clamped, Div, Mul, PRelu, Sub, inplace_f32, planes_by_vector_f32,
    rows_by_vector_f32, tensor_tensor,
};
use etch_kernels::unary::{Hardswish, XnnCos, XnnSigmoid, XnnSigmoidMul, XnnSin, unary_float};

/// Checks that `out`'s shape is the numpy broadcast of `x`'s and `y`'s.
fn check_broadcast(b: &Builder<'_>, [x, y, out]: [u32; 3]) -> Result<()> {
    let (dx, dy, dout) = (&b.value(x).dims, &b.value(y).dims, &b.value(out).dims);
    let n = dx.len().max(dy.len());
    let at = |d: &[usize], i: usize| {
        if i + d.len() >= n {
            d[i + d.len() - n]
        } else {
            1
        }
    };
    let ok = dout.len() == n
        && (0..n).all(|i| {
            let (p, q) = (at(dx, i), at(dy, i));
            (p == q || p == 1 || q == 1) && dout[i] == if p == 1 { q } else { p }
        });
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_program(format!(
            "{:?} and {:?} do not broadcast to {:?}",
            &dx[..],
            &dy[..],
            &dout[..]
        )))
    }
}

/// Checks that a unary node keeps its input's shape.
fn check_same(b: &Builder<'_>, x: u32, out: u32) -> Result<()> {
    let (dx, dout) = (&b.value(x).dims, &b.value(out).dims);
    if dx == dout {
        Ok(())
    } else {
        Err(Error::invalid_program(format!(
            "input {:?} and output {:?} differ",
            &dx[..],
            &dout[..]
        )))
    }
}

/// Views of the operands `ids` of an elementwise node. When one of them is laid out
/// channels-first and all can be viewed as contiguous NCHW tensors ([`Builder::dense_nchw`]),
/// those views: the kernels' contiguous paths, and the same numpy broadcasting over the
/// permuted dims (every operand is 4-d). Otherwise the values in XNNPACK's own shapes.
fn elementwise_views<const N: usize>(b: &mut Builder<'_>, ids: [u32; N]) -> Result<[u32; N]> {
    if ids.iter().any(|&id| b.is_channels_first(id)) {
        let mut views = [0; N];
        let mut dense = true;
        for (v, &id) in views.iter_mut().zip(&ids) {
            match b.dense_nchw(id)? {
                Some(t) => *v = t,
                None => {
                    dense = false;
                    break;
                }
            }
        }
        if dense {
            return Ok(views);
        }
    }
    let mut views = [0; N];
    for (v, &id) in views.iter_mut().zip(&ids) {
        *v = b.tensor(id)?;
    }
    Ok(views)
}

/// `a (op) b`, then the node's clamp (in the same pass for float32 sums, differences,
/// products and quotients: [`Clamped`]).
pub fn binary(b: &mut Builder<'_>, node: &Node, op: BinaryOp, ids: [u32; 3]) -> Result<()> {
    check_broadcast(b, ids)?;
    if let Some(ip) = b.inplace() {
        // The output has the bytes of input `ip.x` (the memory plan's choice): in place.
        let Some(f) = in_place(op) else {
            return Err(Error::internal(format!("{op:?} planned in place")));
        };
        let (o, y) = (b.tensor(ids[2])?, b.tensor(ip.y)?);
        let (run, swap) = (b.int(ip.run as i64), b.boolean(ip.swap));
        let (lo, hi) = b.clamp_bounds(node.clamp);
        b.kernel_fn(node.name, f, &[o, y, run, swap, lo, hi]);
        return Ok(());
    }
    let f32s = ids.iter().try_fold(true, |all, &id| {
        Ok::<_, Error>(all && b.dtype(id)? == ScalarType::Float)
    })?;
    if f32s && by_channel(b, node, op, ids)? {
        return Ok(());
    }
    let [x, y, o] = elementwise_views(b, ids)?;
    if let Some((lo, hi)) = bounded(node.clamp)
        && f32s
        && let Some((name, f, _, _)) = one_pass(op)
    {
        let (lo, hi) = (b.double(lo as f64), b.double(hi as f64));
        b.kernel_fn(name, f, &[x, y, lo, hi, o]);
        return Ok(());
    }
    match op {
        BinaryOp::Add | BinaryOp::Sub => {
            let alpha = b.int(1);
            let name = if op == BinaryOp::Add {
                "aten::add.out"
            } else {
                "aten::sub.out"
            };
            b.kernel(name, &[x, y, alpha, o])?;
        }
        BinaryOp::Mul => b.kernel("aten::mul.out", &[x, y, o])?,
        BinaryOp::Div => b.kernel("aten::div.out", &[x, y, o])?,
        BinaryOp::Min => b.kernel("aten::minimum.out", &[x, y, o])?,
        BinaryOp::Max => b.kernel("aten::maximum.out", &[x, y, o])?,
        BinaryOp::PRelu => b.kernel_fn("XNNPReLU", prelu_out, &[x, y, o]),
    }
    b.clamp(o, node.clamp);
    Ok(())
}

/// A float32 sum, difference, product or quotient of an NHWC value and a vector of its
/// channels (`[1, 1, 1, c]` or `[c]`), then the node's clamp, in one pass: over rows of `c`
/// ([`rows_by_vector_f32`]), or over planes when the value and the output are laid out
/// channels-first ([`planes_by_vector_f32`]); `Ok(false)` for other nodes.
fn by_channel(b: &mut Builder<'_>, node: &Node, op: BinaryOp, [x, y, o]: [u32; 3]) -> Result<bool> {
    let Some((_, _, f, planes)) = one_pass(op) else {
        return Ok(false);
    };
    let dout = b.value(o).dims;
    let c = dout[dout.len().saturating_sub(1)];
    let vector = |d: &[usize]| d.last() == Some(&c) && d.iter().product::<usize>() == c;
    let (dx, dy) = (b.value(x).dims, b.value(y).dims);
    let (full, vec, swap) = if dx == dout && vector(&dy) {
        (x, y, false)
    } else if dy == dout && vector(&dx) {
        (y, x, true)
    } else {
        return Ok(false);
    };
    if dout.len() < 2 || dout[..dout.len() - 1].iter().product::<usize>() < 2 {
        return Ok(false);
    }
    let (f, full, o) = if [full, o].iter().any(|&id| b.is_channels_first(id)) {
        let (Some(full), Some(o)) = (b.dense_nchw(full)?, b.dense_nchw(o)?) else {
            return Ok(false);
        };
        (planes, full, o)
    } else {
        (f, b.tensor(full)?, b.tensor(o)?)
    };
    // (A vector laid out channels-first is `[1, 1, 1, c]`: its NCHW view is the same
    // bytes.)
    let vec = match b.dense_nchw(vec)? {
        Some(v) if b.is_channels_first(vec) => v,
        _ => b.view(vec, &[c], None)?,
    };
    let swap = b.boolean(swap);
    let (lo, hi) = b.clamp_bounds(node.clamp);
    b.kernel_fn(node.name, f, &[full, vec, swap, lo, hi, o]);
    Ok(true)
}

/// The in-place kernels of a sum, difference, product or quotient ([`inplace`]).
fn in_place(op: BinaryOp) -> Option<KernelFn> {
    Some(match op {
        BinaryOp::Add => add_inplace,
        BinaryOp::Sub => sub_inplace,
        BinaryOp::Mul => mul_inplace,
        BinaryOp::Div => div_inplace,
        _ => return None,
    })
}

/// `[out, y, run, swap, lo, hi]`: `out = op(out, y)` (`op(y, out)` with `swap`) in place,
/// `y`'s element `(i / run) % len` meeting element `i` (a scalar `y` meets every one),
/// then clamped to `[lo, hi]` in the same pass.
fn inplace<O: BinOp>(ctx: &mut KernelContext<'_>, op: O) -> Result<()> {
    let (mut o, y) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let (run, swap) = (ctx.int(2)? as usize, ctx.bool(3)?);
    let (lo, hi) = (ctx.double(4)? as f32, ctx.double(5)? as f32);
    let (o, y) = (o.data_mut::<f32>()?, y.data::<f32>()?);
    // (A scalar meets all the elements there are: the leading dims may be dynamic.)
    let run = if y.len() == 1 { o.len() } else { run };
    if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
        return inplace_f32(op, o, y, run, swap);
    }
    inplace_f32(Clamped { op, lo, hi }, o, y, run, swap)
}

fn add_inplace(ctx: &mut KernelContext<'_>) -> Result<()> {
    inplace(ctx, Add)
}
fn sub_inplace(ctx: &mut KernelContext<'_>) -> Result<()> {
    inplace(ctx, Sub)
}
fn mul_inplace(ctx: &mut KernelContext<'_>) -> Result<()> {
    inplace(ctx, Mul)
}
fn div_inplace(ctx: &mut KernelContext<'_>) -> Result<()> {
    inplace(ctx, Div)
}

/// The float32 one-pass kernels of a sum, difference, product or quotient: the node's
/// name, the op with its clamp ([`clamped`]), and by rows or planes of a per-channel
/// vector ([`rows`]); `None` for the other binary ops.
fn one_pass(op: BinaryOp) -> Option<(&'static str, KernelFn, KernelFn, KernelFn)> {
    Some(match op {
        BinaryOp::Add => ("XNNAdd", add_clamped, add_rows, add_planes),
        BinaryOp::Sub => ("XNNSubtract", sub_clamped, sub_rows, sub_planes),
        BinaryOp::Mul => ("XNNMultiply", mul_clamped, mul_rows, mul_planes),
        BinaryOp::Div => ("XNNDivide", div_clamped, div_rows, div_planes),
        _ => return None,
    })
}

/// `[x, v, swap, lo, hi, out]` (see [`by_channel`]): by rows of an NHWC `x`, or with
/// `planes` by the planes of an NCHW `x` (`[n, c, h, w]`).
fn rows<O: BinOp>(ctx: &mut KernelContext<'_>, op: O, planes: bool) -> Result<()> {
    let (x, v, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(5)?);
    let swap = ctx.bool(2)?;
    let (lo, hi) = (ctx.double(3)? as f32, ctx.double(4)? as f32);
    let hw = planes.then(|| x.sizes().iter().skip(2).product::<usize>());
    let (x, v, o) = (x.data()?, v.data()?, o.data_mut()?);
    // Without a clamp, the op alone (the same results, without the comparisons).
    if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
        return by_vector(op, x, v, hw, swap, o);
    }
    by_vector(Clamped { op, lo, hi }, x, v, hw, swap, o)
}

/// [`planes_by_vector_f32`] over planes of `hw` elements, else [`rows_by_vector_f32`].
fn by_vector<O: BinOp>(
    op: O,
    x: &[f32],
    v: &[f32],
    hw: Option<usize>,
    swap: bool,
    o: &mut [f32],
) -> Result<()> {
    match hw {
        Some(hw) => planes_by_vector_f32(op, x, v, hw, swap, o),
        None => rows_by_vector_f32(op, x, v, swap, o),
    }
}

fn add_planes(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Add, true)
}
fn sub_planes(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Sub, true)
}
fn mul_planes(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Mul, true)
}
fn div_planes(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Div, true)
}

fn add_rows(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Add, false)
}
fn sub_rows(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Sub, false)
}
fn mul_rows(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Mul, false)
}
fn div_rows(ctx: &mut KernelContext<'_>) -> Result<()> {
    rows(ctx, Div, false)
}

/// `[x, y, lo, hi, out]`: `op(x, y)` clamped to `[lo, hi]` in one pass.
fn clamped<O: BinOp>(ctx: &mut KernelContext<'_>, name: &str, op: O) -> Result<()> {
    let (lo, hi) = (ctx.double(2)? as f32, ctx.double(3)? as f32);
    tensor_tensor(ctx, name, Clamped { op, lo, hi }, 4)
}

fn add_clamped(ctx: &mut KernelContext<'_>) -> Result<()> {
    clamped(ctx, "XNNAdd", Add)
}

fn sub_clamped(ctx: &mut KernelContext<'_>) -> Result<()> {
    clamped(ctx, "XNNSubtract", Sub)
}

fn mul_clamped(ctx: &mut KernelContext<'_>) -> Result<()> {
    clamped(ctx, "XNNMultiply", Mul)
}

fn div_clamped(ctx: &mut KernelContext<'_>) -> Result<()> {
    clamped(ctx, "XNNDivide", Div)
}

fn prelu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    tensor_tensor(ctx, "XNNPReLU", PRelu, 2)
}

fn sigmoid_mul_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary_float(ctx, "XNNSigmoid*XNNMultiply", XnnSigmoidMul, 1)
}

/// XNNPACK's sigmoid, its bits on CPUs with AVX-512F (`etch_kernels::xnn_sigmoid`).
fn sigmoid_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary_float(ctx, "XNNSigmoid", XnnSigmoid, 1)
}

/// XNNPACK's SiLU, `s = XNNSigmoid(x)` (node `i`, no clamp) then `XNNMultiply(x, s)` (node
/// `i + 1`, either operand order, same shape, any clamp), where no other node and no graph
/// output reads `s`, on float32: lowered as one pass computing `x * s` with `s` rounded
/// first (the same operations, so the same bits, without writing and reading `s`).
/// Returns whether it lowered the pair; if not, nothing was emitted.
pub fn sigmoid_mul(b: &mut Builder<'_>, i: usize, node: &Node, x: u32, s: u32) -> Result<bool> {
    let g = b.graph;
    let Some(next) = g.nodes.get(i + 1) else {
        return Ok(false);
    };
    let Op::Binary {
        op: BinaryOp::Mul,
        a,
        b: y,
        out,
    } = next.op
    else {
        return Ok(false);
    };
    let unclamped = node
        .clamp
        .is_none_or(|(lo, hi)| lo == f32::NEG_INFINITY && hi == f32::INFINITY);
    let pair = x != s && ((a, y) == (x, s) || (a, y) == (s, x));
    let read_elsewhere = g.output_ids.contains(&s)
        || g.nodes
            .iter()
            .enumerate()
            .any(|(j, n)| j != i + 1 && n.op.inputs().contains(&(s as usize)));
    let float = [x, s, out]
        .iter()
        .all(|&id| b.dtype(id).is_ok_and(|t| t == etch_core::ScalarType::Float));
    let same = b.value(x).dims == b.value(s).dims && b.value(x).dims == b.value(out).dims;
    // (The memory plan never gives the product's output an operand's bytes here:
    // `memory::inplace` leaves a SiLU's product out.)
    let aliased = b.same_bytes(x, out) || b.same_bytes(s, out);
    if !(unclamped && pair && !read_elsewhere && float && same) || aliased {
        return Ok(false);
    }
    let [xv, o] = elementwise_views(b, [x, out])?;
    b.kernel_fn("XNNSigmoid*XNNMultiply", sigmoid_mul_out, &[xv, o]);
    b.clamp(o, next.clamp);
    Ok(true)
}

fn hardswish_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary_float(ctx, "XNNHardswish", Hardswish, 1)
}

/// XNNPACK's sine and cosine (a rational approximation after the argument's reduction),
/// its bits.
fn sin_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary_float(ctx, "XNNSin", XnnSin, 1)
}

fn cos_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary_float(ctx, "XNNCos", XnnCos, 1)
}

/// Kernels of the form `op(self, out)`.
fn simple_unary(op: UnaryOp) -> Option<&'static str> {
    Some(match op {
        UnaryOp::Floor => "aten::floor.out",
        UnaryOp::Ceiling => "aten::ceil.out",
        UnaryOp::SquareRoot => "aten::sqrt.out",
        UnaryOp::Negate => "aten::neg.out",
        UnaryOp::Abs => "aten::abs.out",
        UnaryOp::ReciprocalSquareRoot => "aten::rsqrt.out",
        UnaryOp::Log => "aten::log.out",
        UnaryOp::Tanh => "aten::tanh.out",
        UnaryOp::Exp => "aten::exp.out",
        _ => return None,
    })
}

/// A unary node, then the node's clamp.
pub fn unary(b: &mut Builder<'_>, node: &Node, op: UnaryOp, input: u32, output: u32) -> Result<()> {
    if op == UnaryOp::GlobalAvgPool {
        return global_avg_pool(b, node, input, output);
    }
    check_same(b, input, output)?;
    // Softmax works on the last dim of XNNPACK's shape: no NCHW views.
    let [x, o] = if op == UnaryOp::Softmax {
        [b.tensor(input)?, b.tensor(output)?]
    } else {
        elementwise_views(b, [input, output])?
    };
    if let Some(name) = simple_unary(op) {
        b.kernel(name, &[x, o])?;
        b.clamp(o, node.clamp);
        return Ok(());
    }
    match op {
        UnaryOp::Softmax => {
            let (dim, half) = (b.int(-1), b.boolean(false));
            b.kernel("aten::_softmax.out", &[x, dim, half, o])?;
        }
        UnaryOp::Clamp => {
            let (lo, hi) = b.clamp_bounds(node.clamp);
            b.kernel("aten::clamp.out", &[x, lo, hi, o])?;
            return Ok(());
        }
        UnaryOp::Hardswish => b.kernel_fn("XNNHardswish", hardswish_out, &[x, o]),
        UnaryOp::Sigmoid => b.kernel_fn("XNNSigmoid", sigmoid_out, &[x, o]),
        UnaryOp::Sin => b.kernel_fn("XNNSin", sin_out, &[x, o]),
        UnaryOp::Cos => b.kernel_fn("XNNCos", cos_out, &[x, o]),
        UnaryOp::Gelu => {
            let approx = b.string("none");
            b.kernel("aten::gelu.out", &[x, approx, o])?;
        }
        UnaryOp::Square => b.kernel("aten::mul.out", &[x, x, o])?,
        UnaryOp::Copy => b.copy(x, o)?,
        UnaryOp::Convert => {
            let (nb, mf) = (b.boolean(false), b.none());
            b.kernel("aten::_to_copy.out", &[x, nb, mf, o])?;
        }
        _ => {
            return Err(Error::internal(format!("unary {op:?} has no lowering")));
        }
    }
    b.clamp(o, node.clamp);
    Ok(())
}

/// `XNNGlobalAvgPooling2d`: the mean over the spatial dims of an NHWC (or NWC) tensor.
fn global_avg_pool(b: &mut Builder<'_>, node: &Node, input: u32, output: u32) -> Result<()> {
    let dims = b.value(input).dims;
    let (axes, kept): (&[i64], Vec<usize>) = match dims.len() {
        4 => (&[1, 2], vec![dims[0], 1, 1, dims[3]]),
        3 => (&[1], vec![dims[0], 1, dims[2]]),
        n => {
            return Err(Error::invalid_program(format!(
                "XNNGlobalAvgPooling2d of a {n}-d tensor"
            )));
        }
    };
    if super::nhwc::global_avg_pool(b, node, input, output)? {
        return Ok(());
    }
    let x = b.tensor(input)?;
    let o = b.view(output, &kept, None)?;
    let (axes, keep, dtype) = (b.ints(axes), b.boolean(true), b.none());
    b.kernel("aten::mean.out", &[x, axes, keep, dtype, o])?;
    b.clamp(o, node.clamp);
    Ok(())
}

/// `XNNELU` and `XNNLeakyReLU`.
pub fn param_unary(
    b: &mut Builder<'_>,
    node: &Node,
    elu: bool,
    p: f32,
    io: [u32; 2],
) -> Result<()> {
    let [x, o] = elementwise_views(b, io)?;
    let p = b.double(p as f64);
    if elu {
        let one = b.double(1.0);
        b.kernel("aten::elu.out", &[x, p, one, one, o])?;
    } else {
        b.kernel("aten::leaky_relu.out", &[x, p, o])?;
    }
    b.clamp(o, node.clamp);
    Ok(())
}
