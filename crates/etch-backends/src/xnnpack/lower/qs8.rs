//! Statically quantized nodes (XNNPACKQuantizer's PT2E flow): `qint8` values with one
//! scale and zero point a tensor. Converts to and from fp32, convolutions (dense, grouped,
//! depthwise) and fully-connected nodes with constant `qcint8` filters and `qcint32`
//! biases, addition, subtraction and multiplication, clamps, max pooling, the global
//! average pooling, and the data movement nodes. The kernels are in
//! [`super::super::qs8`]; any other node with a qint8 operand fails init naming it.

use super::super::graph::{
    BinaryOp, ConvKind, ConvParams, Datatype, FLAG_TRANSPOSE_WEIGHTS, Graph, Node, Op, PoolParams,
    Quant, UnaryOp,
};
use super::super::plan::Builder;
use super::super::qs8::{self, binary, conv::Geometry, pool};
use super::{quant, shape};
use etch_core::{Error, Result, ScalarType};
use etch_kernels::conv::nhwc::NhwcShape;

/// Whether node `node` has a qint8 operand (and so is lowered here).
pub fn is_qs8(b: &Builder<'_>, node: &Node) -> bool {
    let (ins, outs) = (node.op.inputs(), node.op.outputs());
    ins.iter()
        .chain(outs.iter())
        .any(|&id| b.value(id as u32).dtype == Datatype::Qint8)
}

/// The scale and zero point of qint8 value `id`.
fn per_tensor(b: &Builder<'_>, id: u32) -> Result<(f32, i32)> {
    let v = b.value(id);
    match (v.dtype, &v.quant) {
        (Datatype::Qint8, Some(Quant::PerTensor { scale, zero_point }))
            if scale.is_normal() && *scale > 0.0 && (-128..=127).contains(zero_point) =>
        {
            Ok((*scale, *zero_point))
        }
        (d, q) => Err(Error::not_supported(format!(
            "value {id} is {} with {}: etch runs statically quantized values of qint8 with a \
             positive scale and an int8 zero point a tensor",
            d.name(),
            q.as_ref().map_or("no quantization parameters", Quant::name)
        ))),
    }
}

fn unsupported(node: &Node, what: &str) -> Error {
    Error::not_supported(format!(
        "{} with qint8 operands ({what}): etch runs statically quantized converts, \
         convolutions, depthwise convolutions, fully-connected nodes, additions, \
         subtractions, multiplications, clamps, max pooling, global average pooling and \
         data movement so far",
        node.name
    ))
}

/// Folds each clamp of a qint8 value that only the clamp reads into the node writing that
/// value, as XNNPACK's subgraph does: the producer writes the clamp's output, within both
/// ranges, and the clamp goes. Runs on the graph before memory is planned (the clamp's
/// output is then written by the producer, so its place must be live there).
pub fn fuse_clamps(g: &mut Graph) {
    let mut i = 0;
    while i + 1 < g.nodes.len() {
        if let Some(fused) = fused_clamp(g, i) {
            g.nodes[i] = fused;
            g.nodes.remove(i + 1);
        }
        i += 1;
    }
}

/// Node `i` writing node `i + 1`'s output within both ranges, where node `i + 1` is a
/// clamp (of the same quantization) of node `i`'s qint8 output, which nothing else reads.
fn fused_clamp(g: &Graph, i: usize) -> Option<Node> {
    let (node, next) = (&g.nodes[i], &g.nodes[i + 1]);
    let Op::Unary {
        op: UnaryOp::Clamp,
        input: mid,
        output,
    } = next.op
    else {
        return None;
    };
    let mut fused = node.clone();
    let slot: &mut u32 = match fused.op {
        Op::Conv(ref mut c) if c.kind != ConvKind::Transpose => &mut c.output,
        Op::FullyConnected { ref mut output, .. } => output,
        Op::Binary { ref mut out, .. } => out,
        Op::Pool(ref mut p) if p.max => &mut p.output,
        Op::Unary {
            op: UnaryOp::GlobalAvgPool,
            ref mut output,
            ..
        } => output,
        _ => return None,
    };
    let (v, o) = (g.values.get(mid as usize)?, g.values.get(output as usize)?);
    let alone = *slot == mid
        && v.external_id.is_none()
        && !g.output_ids.contains(&mid)
        && !g
            .nodes
            .iter()
            .enumerate()
            .any(|(j, n)| j != i + 1 && n.op.inputs().contains(&(mid as usize)));
    let same = v.dtype == Datatype::Qint8
        && o.dtype == Datatype::Qint8
        && matches!(v.quant, Some(Quant::PerTensor { .. }))
        && v.quant == o.quant
        && v.dims == o.dims;
    if !alone || !same {
        return None;
    }
    *slot = output;
    // Quantizing the bounds is monotonic: the intersection's bounds are the larger low and
    // the smaller high of the quantized ones.
    let full = (f32::NEG_INFINITY, f32::INFINITY);
    let (a, c) = (node.clamp.unwrap_or(full), next.clamp.unwrap_or(full));
    fused.clamp = Some((a.0.max(c.0), a.1.min(c.1)));
    Some(fused)
}

/// Folds each chain of elementwise nodes from a qint8 value to a qint8 value into one
/// [`Op::Lut`] node, as XNNPACK's subgraph does (a dequantizing convert, unary nodes on
/// fp32, a quantizing convert; every value between read by the next node alone): the
/// chain maps each of the 256 int8 inputs to one output, so a table of them, computed
/// by running the chain itself on the 256 values, gives the chain's bits. Runs on the
/// graph before memory is planned.
pub fn fuse_luts(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some(end) = lut_chain(g, i) {
            let chain: Vec<Node> = g.nodes.drain(i..=end).collect();
            let (input, output) = (chain[0].op.inputs()[0], chain[end - i].op.outputs()[0]);
            let name = chain[1.min(chain.len() - 1)].name;
            g.nodes.insert(
                i,
                Node {
                    name,
                    op: Op::Lut {
                        input: input as u32,
                        output: output as u32,
                        chain,
                    },
                    clamp: None,
                    debug_handle: g.nodes.get(i).map_or(0, |n| n.debug_handle),
                },
            );
        }
        i += 1;
    }
}

/// The last node of a LUT chain starting at node `i` (see [`fuse_luts`]).
fn lut_chain(g: &Graph, i: usize) -> Option<usize> {
    let dtype = |id: u32| g.values.get(id as usize).map(|v| v.dtype);
    let convert = |n: &Node| match n.op {
        Op::Unary {
            op: UnaryOp::Convert,
            input,
            output,
        } if n.clamp.is_none() => Some((input, output)),
        _ => None,
    };
    let (x, mut v) = convert(&g.nodes[i])?;
    if dtype(x)? != Datatype::Qint8 || dtype(v)? != Datatype::Fp32 {
        return None;
    }
    let dims = g.values[x as usize].dims;
    for j in i + 1..g.nodes.len() {
        // `v` (fp32) must be read by node `j` alone, and be no argument of the delegate.
        let val = &g.values[v as usize];
        let alone = val.external_id.is_none()
            && !g.output_ids.contains(&v)
            && g.nodes
                .iter()
                .enumerate()
                .all(|(k, n)| k == j || !n.op.inputs().contains(&(v as usize)));
        if !alone || val.dims != dims {
            return None;
        }
        let n = &g.nodes[j];
        if let Some((input, output)) = convert(n) {
            let ok = input == v && dtype(output)? == Datatype::Qint8;
            return (ok && g.values[output as usize].dims == dims).then_some(j);
        }
        v = match n.op {
            Op::Unary { op, input, output }
                if input == v
                    && !matches!(
                        op,
                        UnaryOp::Convert
                            | UnaryOp::Softmax
                            | UnaryOp::GlobalAvgPool
                            | UnaryOp::Copy
                    ) =>
            {
                output
            }
            Op::Elu { input, output, .. } | Op::LeakyRelu { input, output, .. } if input == v => {
                output
            }
            _ => return None,
        };
        if dtype(v)? != Datatype::Fp32 {
            return None;
        }
    }
    None
}

/// An [`Op::Lut`] node: its chain run on the 256 int8 values (a graph of its own, with
/// etch's own lowering and kernels, as XNNPACK runs its chain to make its table), then a
/// table lookup per element.
fn lut(b: &mut Builder<'_>, node: &Node, input: u32, output: u32, chain: &[Node]) -> Result<()> {
    let table = lut_table(b.graph, input, output, chain)
        .map_err(|e| e.context(format!("computing the table of {}", node.name)))?;
    let n = etch_core::checked_numel(&b.value(input).dims).unwrap_or(0);
    let x = b.view(input, &[n], None)?;
    let o = b.view(output, &[n], None)?;
    let t = b.owned(ScalarType::Char, &[256], &table.map(|v| v as u8))?;
    b.kernel_fn("xnnpack::qs8_lut", qs8::lut, &[x, t, o]);
    Ok(())
}

/// The outputs of `chain` for the inputs `0u8..=255` read as int8.
fn lut_table(g: &Graph, input: u32, output: u32, chain: &[Node]) -> Result<[i8; 256]> {
    use super::super::graph::{FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT, XValue};
    // The chain's values, renumbered, as 256-element vectors.
    let mut ids: Vec<u32> = Vec::new();
    let mut map = |id: usize| -> u32 {
        match ids.iter().position(|&v| v as usize == id) {
            Some(k) => k as u32,
            None => {
                ids.push(id as u32);
                (ids.len() - 1) as u32
            }
        }
    };
    let nodes: Vec<Node> = chain
        .iter()
        .map(|n| {
            let mut n = n.clone();
            n.op = match n.op {
                Op::Unary { op, input, output } => Op::Unary {
                    op,
                    input: map(input as usize),
                    output: map(output as usize),
                },
                Op::Elu {
                    alpha,
                    input,
                    output,
                } => Op::Elu {
                    alpha,
                    input: map(input as usize),
                    output: map(output as usize),
                },
                Op::LeakyRelu {
                    slope,
                    input,
                    output,
                } => Op::LeakyRelu {
                    slope,
                    input: map(input as usize),
                    output: map(output as usize),
                },
                ref op => return Err(Error::internal(format!("a LUT chain node {op:?}"))),
            };
            Ok(n)
        })
        .collect::<Result<_>>()?;
    let ramp = etch_kernels::util::Shape::from_slice(&[256])?;
    let values: Vec<XValue> = ids
        .iter()
        .map(|&id| {
            let v = &g.values[id as usize];
            let (external_id, flags) = match id {
                _ if id == input => (Some(0), FLAG_EXTERNAL_INPUT),
                _ if id == output => (Some(1), FLAG_EXTERNAL_OUTPUT),
                _ => (None, 0),
            };
            XValue {
                dtype: v.dtype,
                dims: ramp,
                constant: 0,
                external_id,
                flags,
                quant: v.quant.clone(),
            }
        })
        .collect();
    let pos = |id: u32| ids.iter().position(|&v| v == id).map(|k| k as u32);
    let (Some(i), Some(o)) = (pos(input), pos(output)) else {
        return Err(Error::internal("a LUT chain without its ends"));
    };
    let mini = Graph {
        values,
        nodes,
        input_ids: vec![i],
        output_ids: vec![o],
        constants: vec![],
        num_externs: 2,
    };
    let mut plan = super::super::plan_graph(&mini, &[], None, None)?;
    let mut ramp: [i8; 256] = std::array::from_fn(|k| k as u8 as i8);
    let mut table = [0i8; 256];
    run_on(&mut plan, &mut ramp, &mut table)?;
    Ok(table)
}

/// Runs a plan of one int8 `[256]` input and one int8 `[256]` output.
fn run_on(plan: &mut super::super::plan::Plan, x: &mut [i8; 256], o: &mut [i8; 256]) -> Result<()> {
    use etch_core::{Device, Dynamism, EValue, KernelContext, TensorImpl};
    let t = |p: *mut i8| {
        TensorImpl::new(
            ScalarType::Char,
            &[256],
            None,
            Dynamism::Static,
            Device::CPU,
            p.cast(),
            256,
        )
    };
    let mut values = [
        EValue::Tensor(t(x.as_mut_ptr())?),
        EValue::Tensor(t(o.as_mut_ptr())?),
    ];
    let args = [0u32, 1];
    // SAFETY: both tensors point at 256 bytes this function borrows for the call.
    let mut ctx = unsafe { KernelContext::new(&mut values, &args, "XNNPACK LUT chain") };
    plan.execute(&mut ctx)
}

/// Lowers a node with a qint8 operand.
pub fn lower(b: &mut Builder<'_>, node: &Node) -> Result<()> {
    match &node.op {
        Op::Unary { op, input, output } => unary(b, node, *op, *input, *output),
        Op::Binary { op, a, b: y, out } => binary_op(b, node, *op, [*a, *y, *out]),
        Op::Conv(c) => convolution(b, node, c),
        Op::FullyConnected {
            input,
            filter,
            bias,
            output,
            flags,
        } => fully_connected(b, node, [*input, *filter, *output], *bias, *flags),
        Op::Pool(p) if p.max => max_pool(b, node, p),
        Op::Lut {
            input,
            output,
            chain,
        } => lut(b, node, *input, *output, chain),
        Op::Transpose {
            perm,
            input,
            output,
        } => {
            same_quant(b, node, &[*input], *output)?;
            shape::transpose(b, perm, [*input, *output])
        }
        Op::Reshape { input, output, .. } => {
            same_quant(b, node, &[*input], *output)?;
            shape::reshape(b, [*input, *output])
        }
        Op::Slice {
            offsets,
            input,
            output,
            ..
        } => {
            same_quant(b, node, &[*input], *output)?;
            shape::slice(b, offsets, [*input, *output])
        }
        Op::Pad {
            pre,
            post,
            value,
            input,
            output,
        } => {
            let (s, zp) = same_quant(b, node, &[*input], *output)?;
            let q = qs8::quantize_bound(*value, s, zp);
            shape::pad(b, pre, post, q as f32, [*input, *output])
        }
        Op::Concat {
            axis,
            inputs,
            output,
        } => {
            let ids: Vec<u32> = inputs.iter().map(|&i| i as u32).collect();
            same_quant(b, node, &ids, *output)?;
            shape::concat(b, *axis, inputs, *output)
        }
        _ => Err(unsupported(node, "this node kind")),
    }
}

/// Checks that every input has the output's quantization (data movement changes no
/// value); returns it.
fn same_quant(b: &Builder<'_>, node: &Node, inputs: &[u32], output: u32) -> Result<(f32, i32)> {
    let q = per_tensor(b, output)?;
    for &id in inputs {
        if per_tensor(b, id)? != q {
            return Err(unsupported(
                node,
                &format!("input {id} and output {output} have different quantization"),
            ));
        }
    }
    Ok(q)
}

fn unary(b: &mut Builder<'_>, node: &Node, op: UnaryOp, input: u32, output: u32) -> Result<()> {
    let (di, dout) = (b.value(input).dtype, b.value(output).dtype);
    let same_size = etch_core::checked_numel(&b.value(input).dims)
        == etch_core::checked_numel(&b.value(output).dims);
    match op {
        UnaryOp::Convert if di == Datatype::Fp32 && dout == Datatype::Qint8 && same_size => {
            let (s, zp) = per_tensor(b, output)?;
            let (x, q) = (b.tensor(input)?, b.tensor(output)?);
            let (inv, zp) = (b.double((1.0f32 / s) as f64), b.int(zp as i64));
            b.kernel_fn("xnnpack::qs8_quantize", qs8::quantize, &[x, q, inv, zp]);
            Ok(())
        }
        UnaryOp::Convert if di == Datatype::Qint8 && dout == Datatype::Fp32 && same_size => {
            let (s, zp) = per_tensor(b, input)?;
            let (q, x) = (b.tensor(input)?, b.tensor(output)?);
            let (s, zp) = (b.double(s as f64), b.int(zp as i64));
            b.kernel_fn("xnnpack::qs8_dequantize", qs8::dequantize, &[q, x, s, zp]);
            b.clamp(x, node.clamp);
            Ok(())
        }
        UnaryOp::Clamp | UnaryOp::Copy if same_size => {
            let (s, zp) = same_quant(b, node, &[input], output)?;
            let r = qs8::output_range(s, zp, node.clamp);
            let (x, o) = (b.tensor(input)?, b.tensor(output)?);
            if b.same_bytes(input, output) && (r.lo, r.hi) == (-128, 127) {
                return Ok(());
            }
            let (lo, hi) = (b.int(r.lo as i64), b.int(r.hi as i64));
            b.kernel_fn("xnnpack::qs8_clamp", qs8::clamp, &[x, o, lo, hi]);
            Ok(())
        }
        UnaryOp::GlobalAvgPool => global_avg_pool(b, node, input, output),
        _ => Err(unsupported(
            node,
            &format!("{op:?} of {} into {}", di.name(), dout.name()),
        )),
    }
}

fn binary_op(b: &mut Builder<'_>, node: &Node, op: BinaryOp, [x, y, out]: [u32; 3]) -> Result<()> {
    let (qa, qb, qo) = (per_tensor(b, x)?, per_tensor(b, y)?, per_tensor(b, out)?);
    let bc = binary::Broadcast::new(&b.value(x).dims, &b.value(y).dims, &b.value(out).dims)?;
    let r = qs8::output_range(qo.0, qo.1, node.clamp);
    let (ta, tb, to) = (b.tensor(x)?, b.tensor(y)?, b.tensor(out)?);
    let (walk, range) = (b.ints(&bc.ints()), b.ints(&r.ints()));
    match op {
        BinaryOp::Add | BinaryOp::Sub => {
            // XNNPACK subtracts by adding `b` with its scale negated.
            let qb = if op == BinaryOp::Sub {
                (-qb.0, qb.1)
            } else {
                qb
            };
            let p = binary::AddParams::new(qa, qb, qo.0)?;
            let p = b.ints(&[
                p.a_mult as i64,
                p.b_mult as i64,
                p.bias as i64,
                p.shift as i64,
            ]);
            b.kernel_fn(
                "xnnpack::qs8_add",
                binary::add,
                &[ta, tb, to, walk, p, range],
            );
        }
        BinaryOp::Mul => {
            let scale = qa.0 * qb.0 / qo.0;
            if !(2f32.powi(-16)..256.0).contains(&scale) {
                return Err(Error::not_supported(format!(
                    "a quantized multiplication with a product / output scale ratio of \
                     {scale} (XNNPACK takes [2^-16, 256))"
                )));
            }
            let (zps, scale) = (b.ints(&[qa.1 as i64, qb.1 as i64]), b.double(scale as f64));
            b.kernel_fn(
                "xnnpack::qs8_mul",
                binary::mul,
                &[ta, tb, to, walk, zps, scale, range],
            );
        }
        _ => return Err(unsupported(node, &format!("{op:?}"))),
    }
    Ok(())
}

/// The per-channel scales of constant qcint8 filter `id` along `channel_dim`, `count`.
fn filter_scales(b: &Builder<'_>, id: u32, channel_dim: i32, count: usize) -> Result<Vec<f32>> {
    let v = b.value(id);
    match (&v.quant, v.dtype) {
        (
            Some(Quant::PerChannel {
                channel_dim: d,
                scales,
            }),
            Datatype::Qcint8,
        ) if *d == channel_dim && b.is_constant(id) => quant::scales(b, id, scales, count, false),
        (q, d) => Err(Error::not_supported(format!(
            "filter {id} of {} with {} along dim {:?}: etch runs constant qcint8 filters with \
             per-channel scales along dim {channel_dim}",
            d.name(),
            q.as_ref().map_or("no quantization parameters", Quant::name),
            q.as_ref().and_then(|q| match q {
                Quant::PerChannel { channel_dim, .. } => Some(*channel_dim),
                _ => None,
            })
        ))),
    }
}

/// The bias as i32 (a constant qcint32 value of `count`, or zeros).
fn bias_values(b: &Builder<'_>, bias: Option<u32>, count: usize) -> Result<Vec<i32>> {
    let Some(id) = bias else {
        return Ok(vec![0; count]);
    };
    let v = b.value(id);
    if !matches!(v.dtype, Datatype::Qcint32 | Datatype::Int32) || !b.is_constant(id) {
        return Err(Error::not_supported(format!(
            "bias {id} of {}: etch runs constant qcint32 biases of statically quantized nodes",
            v.dtype.name()
        )));
    }
    let bytes = b.constant_bytes(id)?;
    if bytes.len() != count * 4 {
        return Err(Error::invalid_program(format!(
            "bias {id} has {} bytes; {count} int32 expected",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Requantization scales `x_scale * w_scale[n] / out_scale` (XNNPACK's order).
fn requant_scales(x: f32, w: &[f32], out: f32) -> Result<Vec<f32>> {
    let s: Vec<f32> = w.iter().map(|&w| x * w / out).collect();
    if let Some(bad) = s.iter().find(|s| !(**s >= 0.0 && **s < 256.0)) {
        return Err(Error::not_supported(format!(
            "a requantization scale of {bad} (XNNPACK takes [0, 256))"
        )));
    }
    Ok(s)
}

/// Pushes a convolution step: filters `w` (i8 bytes in the kernel's layout), biases,
/// filter scales and the geometry.
#[allow(clippy::too_many_arguments)]
fn conv_step(
    b: &mut Builder<'_>,
    node: &Node,
    g: &Geometry,
    [x, out]: [u32; 2],
    w: Vec<u8>,
    bias: &[i32],
    w_scales: &[f32],
    depthwise: bool,
) -> Result<()> {
    let (qx, qo) = (per_tensor(b, x)?, per_tensor(b, out)?);
    let scales = requant_scales(qx.0, w_scales, qo.0)?;
    let r = qs8::output_range(qo.0, qo.1, node.clamp);
    let n = g.shape.co;
    #[cfg(target_arch = "x86_64")]
    if !depthwise && g.groups == 1 && qs8::vnni::available() {
        return conv_vnni(b, g, [x, out], &w, bias, &scales, &r);
    }
    let wt = b.owned(ScalarType::Char, &[w.len()], &w)?;
    let bt = b.owned(ScalarType::Int, &[n], &i32_bytes(bias))?;
    let st = b.owned(ScalarType::Float, &[n], &f32_bytes(&scales))?;
    let s = &g.shape;
    let tx = b.view(x, &[s.n * s.h * s.w * s.c], None)?;
    let to = b.view(out, &[s.n * s.oh * s.ow * s.co], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    if depthwise {
        // The AVX-512 pixel's operands: biases with the input zero point folded in, and
        // the zero points its taps in the padding read.
        let taps = s.kernel[0] * s.kernel[1];
        let w: Vec<i8> = w.iter().map(|&v| v as i8).collect();
        let folded = qs8::depthwise_folded_bias(&w, taps, bias, g.x_zp);
        let ft = b.owned(ScalarType::Int, &[n], &i32_bytes(&folded))?;
        let zps = b.owned(ScalarType::Char, &[s.c], &vec![g.x_zp as u8; s.c])?;
        let args = [tx, wt, bt, st, geo, range, to, ft, zps];
        b.kernel_fn("xnnpack::qs8_depthwise", qs8::conv::depthwise, &args);
        return Ok(());
    }
    b.kernel_fn(
        "xnnpack::qs8_conv",
        qs8::conv::conv,
        &[tx, wt, bt, st, geo, range, to],
    );
    Ok(())
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// [`conv_step`] on AVX-512 VNNI ([`qs8::vnni`]): the filters `[n, k]` padded to the
/// panels' depth and packed, the input zero point folded into the biases, scratch for the
/// im2col rows.
#[cfg(target_arch = "x86_64")]
fn conv_vnni(
    b: &mut Builder<'_>,
    g: &Geometry,
    [x, out]: [u32; 2],
    w: &[u8],
    bias: &[i32],
    scales: &[f32],
    r: &qs8::Requant,
) -> Result<()> {
    use super::super::qd8;
    let s = &g.shape;
    let (n, k) = (s.co, s.kernel[0] * s.kernel[1] * s.c);
    let k4 = qs8::vnni::depth(g);
    let w: Vec<i8> = w.iter().map(|&v| v as i8).collect();
    let mut padded = vec![0i8; n * k4];
    for (dst, src) in padded.chunks_exact_mut(k4).zip(w.chunks_exact(k.max(1))) {
        dst[..k].copy_from_slice(src);
    }
    let panels = qd8::pack_panels(&padded, n, k4, qd8::Packing::Vnni);
    let folded = qs8::vnni::folded_bias(&w, k, bias, g.x_zp);
    let wt = b.owned(ScalarType::Char, &[panels.len()], &panels)?;
    let bt = b.owned(ScalarType::Int, &[n], &i32_bytes(&folded))?;
    let st = b.owned(ScalarType::Float, &[n], &f32_bytes(scales))?;
    let scratch = b.scratch(ScalarType::Char, &[qs8::vnni::SLOTS * qs8::vnni::ROWS * k4])?;
    let tx = b.view(x, &[s.n * s.h * s.w * s.c], None)?;
    let to = b.view(out, &[s.n * s.oh * s.ow * s.co], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    b.kernel_fn(
        "xnnpack::qs8_conv_vnni",
        qs8::vnni::conv_vnni,
        &[tx, wt, bt, st, geo, range, scratch, to],
    );
    Ok(())
}

/// An NHWC value's dims.
fn nhwc(b: &Builder<'_>, id: u32, what: &str) -> Result<[usize; 4]> {
    match b.value(id).dims[..] {
        [n, h, w, c] => Ok([n, h, w, c]),
        ref d => Err(Error::invalid_program(format!(
            "{what} {d:?} is not a 4-d NHWC tensor"
        ))),
    }
}

/// The output size of a window of `k` taps dilated by `d` at stride `s` over `size` with
/// `pad` padding in all.
fn out_size(size: usize, pad: usize, k: usize, s: usize, d: usize) -> Option<usize> {
    let span = d * (k.max(1) - 1) + 1;
    (size + pad).checked_sub(span).map(|v| v / s.max(1) + 1)
}

/// Whether `shape`'s output is XNNPACK's for its input with `pad` padding in all (rows,
/// columns), and its sizes do not overflow.
fn fits(shape: &NhwcShape, pad: [usize; 2]) -> bool {
    let s = shape;
    s.valid()
        && out_size(s.h, pad[0], s.kernel[0], s.stride[0], s.dil[0]) == Some(s.oh)
        && out_size(s.w, pad[1], s.kernel[1], s.stride[1], s.dil[1]) == Some(s.ow)
}

fn convolution(b: &mut Builder<'_>, node: &Node, c: &ConvParams) -> Result<()> {
    if c.kind == ConvKind::Transpose {
        return Err(unsupported(node, "a transposed convolution"));
    }
    let [n, h, w, ci] = nhwc(b, c.input, "input")?;
    let [on, oh, ow, oc] = nhwc(b, c.output, "output")?;
    let [top, right, bottom, left] = c.padding.map(|v| v as usize);
    let (kh, kw) = (c.kernel[0] as usize, c.kernel[1] as usize);
    let shape = NhwcShape {
        n,
        h,
        w,
        c: ci,
        oh,
        ow,
        co: oc,
        kernel: [kh, kw],
        stride: c.stride.map(|v| v.max(1) as usize),
        pad: [top, left],
        dil: c.dilation.map(|v| v.max(1) as usize),
    };
    let g = Geometry {
        shape,
        groups: c.groups as usize,
        gic: c.group_input_channels as usize,
        x_zp: per_tensor(b, c.input)?.1,
    };
    let goc = c.group_output_channels as usize;
    let ok = on == n
        && ci == g.groups * g.gic
        && oc == g.groups * goc
        && fits(&shape, [top + bottom, left + right]);
    if !ok {
        return Err(Error::invalid_program(format!(
            "{}: input {:?}, output {:?} and {c:?} do not fit",
            node.name,
            [n, h, w, ci],
            [on, oh, ow, oc]
        )));
    }
    let fd = b.value(c.filter).dims;
    let depthwise = c.kind == ConvKind::Depthwise;
    let want: [usize; 4] = if depthwise {
        [1, kh, kw, oc]
    } else {
        [oc, kh, kw, g.gic]
    };
    if fd[..] != want[..] || (depthwise && (g.gic != 1 || g.groups != ci)) {
        return Err(Error::invalid_program(format!(
            "{}: filter {:?} does not match the node's geometry {want:?}",
            node.name,
            &fd[..]
        )));
    }
    let scales = filter_scales(b, c.filter, if depthwise { 3 } else { 0 }, oc)?;
    let bias = bias_values(b, c.bias, oc)?;
    let w = b.constant_bytes(c.filter)?.to_vec();
    conv_step(
        b,
        node,
        &g,
        [c.input, c.output],
        w,
        &bias,
        &scales,
        depthwise,
    )
}

fn fully_connected(
    b: &mut Builder<'_>,
    node: &Node,
    [input, filter, output]: [u32; 3],
    bias: Option<u32>,
    flags: u32,
) -> Result<()> {
    let transposed = flags & FLAG_TRANSPOSE_WEIGHTS != 0;
    let (m, n, k) = super::gemm::fc_shape(b, [input, filter, output], transposed)?;
    let scales = filter_scales(b, filter, if transposed { 1 } else { 0 }, n)?;
    let bias = bias_values(b, bias, n)?;
    let bytes = b.constant_bytes(filter)?;
    let w: Vec<u8> = if transposed {
        (0..n * k).map(|i| bytes[i % k * n + i / k]).collect()
    } else {
        bytes.to_vec()
    };
    let g = Geometry {
        shape: NhwcShape {
            n: m,
            h: 1,
            w: 1,
            c: k,
            oh: 1,
            ow: 1,
            co: n,
            kernel: [1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
        },
        groups: 1,
        gic: k,
        x_zp: per_tensor(b, input)?.1,
    };
    conv_step(b, node, &g, [input, output], w, &bias, &scales, false)
}

fn max_pool(b: &mut Builder<'_>, node: &Node, p: &PoolParams) -> Result<()> {
    let (s, zp) = same_quant(b, node, &[p.input], p.output)?;
    let [n, h, w, c] = nhwc(b, p.input, "input")?;
    let [on, oh, ow, oc] = nhwc(b, p.output, "output")?;
    let [top, right, bottom, left] = p.padding.map(|v| v as usize);
    let (kh, kw) = (p.pooling[0] as usize, p.pooling[1] as usize);
    let shape = NhwcShape {
        n,
        h,
        w,
        c,
        oh,
        ow,
        co: oc,
        kernel: [kh, kw],
        stride: p.stride.map(|v| v.max(1) as usize),
        pad: [top, left],
        dil: p.dilation.map(|v| v.max(1) as usize),
    };
    let g = Geometry {
        shape,
        groups: c,
        gic: 1,
        x_zp: zp,
    };
    let ok = on == n && oc == c && fits(&shape, [top + bottom, left + right]);
    if !ok {
        return Err(Error::invalid_program(format!(
            "{}: input {:?}, output {:?} and {p:?} do not fit",
            node.name,
            [n, h, w, c],
            [on, oh, ow, oc]
        )));
    }
    let r = qs8::output_range(s, zp, node.clamp);
    let x = b.view(p.input, &[n * h * w * c], None)?;
    let o = b.view(p.output, &[n * oh * ow * c], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    b.kernel_fn("xnnpack::qs8_max_pool", pool::max_pool, &[x, geo, range, o]);
    Ok(())
}

/// `XNNGlobalAvgPooling2d` (NHWC, or NWC): the mean over the pixels, then the node's clamp.
fn global_avg_pool(b: &mut Builder<'_>, node: &Node, input: u32, output: u32) -> Result<()> {
    let (qx, qo) = (per_tensor(b, input)?, per_tensor(b, output)?);
    let d = b.value(input).dims;
    let (n, pixels, c) = match d[..] {
        [n, h, w, c] => (n, h * w, c),
        [n, w, c] => (n, w, c),
        _ => {
            return Err(Error::invalid_program(format!(
                "{} of {:?}",
                node.name,
                &d[..]
            )));
        }
    };
    if etch_core::checked_numel(&b.value(output).dims) != Some(n * c) || pixels == 0 {
        return Err(Error::invalid_program(format!(
            "{}: output {:?} of input {:?}",
            node.name,
            &b.value(output).dims[..],
            &d[..]
        )));
    }
    let (scale, zp) = pool::mean_params(pixels, qx, qo);
    let r = qs8::output_range(qo.0, qo.1, node.clamp);
    let x = b.view(input, &[n, pixels, c], None)?;
    let o = b.view(output, &[n, c], None)?;
    let (scale, zp) = (b.double(scale as f64), b.double(zp as f64));
    let range = b.ints(&[r.lo as i64, r.hi as i64]);
    b.kernel_fn("xnnpack::qs8_mean", pool::mean, &[x, scale, zp, range, o]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_output_sizes() {
        assert_eq!(out_size(16, 2, 3, 2, 1), Some(8));
        assert_eq!(out_size(8, 0, 2, 2, 1), Some(4));
        assert_eq!(out_size(7, 1, 3, 2, 1), Some(3));
        assert_eq!(out_size(2, 0, 3, 1, 1), None);
    }

    #[test]
    fn requantization_scales_in_xnnpack_order() {
        let s = requant_scales(0.1, &[0.3], 0.7).unwrap();
        assert_eq!(s[0].to_bits(), (0.1f32 * 0.3 / 0.7).to_bits());
        assert!(requant_scales(1.0, &[300.0], 1.0).is_err());
    }

    #[test]
    fn requant_range_of_a_relu() {
        let r: qs8::Requant = qs8::output_range(0.1, -5, Some((0.0, f32::INFINITY)));
        assert_eq!(r.ints(), [-5, -5, 127]);
    }
}
