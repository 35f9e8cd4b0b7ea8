//! Statically quantized nodes (XNNPACKQuantizer's PT2E flow): `qint8` values with one
//! scale and zero point a tensor. Converts to and from fp32, convolutions (dense, grouped,
//! depthwise) and fully-connected nodes with constant `qcint8` filters and `qcint32`
//! biases, addition, subtraction and multiplication, clamps, max pooling, the global
//! average pooling, and the data movement nodes. The kernels are in
//! [`super::super::qs8`]; any other node with a qint8 operand fails init naming it.

use super::super::graph::{BinaryOp, Datatype, Node, Op, Quant, UnaryOp};
use super::super::plan::Builder;
use super::super::qs8::{self, binary, pool};
use super::shape;
use etch_core::{Error, Result};

mod conv;
mod fuse;
pub use fuse::{fuse_clamps, fuse_luts};

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

/// Lowers a node with a qint8 operand.
pub fn lower(b: &mut Builder<'_>, node: &Node) -> Result<()> {
    match &node.op {
        Op::Unary { op, input, output } => unary(b, node, *op, *input, *output),
        Op::Binary { op, a, b: y, out } => binary_op(b, node, *op, [*a, *y, *out]),
        Op::Conv(c) => conv::convolution(b, node, c),
        Op::FullyConnected {
            input,
            filter,
            bias,
            output,
            flags,
        } => conv::fully_connected(b, node, [*input, *filter, *output], *bias, *flags),
        Op::Pool(p) if p.max => conv::max_pool(b, node, p),
        Op::Lut {
            input,
            output,
            chain,
        } => fuse::lut(b, node, *input, *output, chain),
        // Data movement: the fp32 lowering's, on int8 elements of one quantization.
        Op::Transpose { input, output, .. }
        | Op::Reshape { input, output, .. }
        | Op::Slice { input, output, .. } => {
            same_quant(b, node, &[*input], *output)?;
            super::lower(b, node)
        }
        Op::Concat { inputs, output, .. } => {
            let ids: Vec<u32> = inputs.iter().map(|&i| i as u32).collect();
            same_quant(b, node, &ids, *output)?;
            super::lower(b, node)
        }
        // The padding value is quantized.
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
        // A copy moves data, as the fp32 lowering's.
        UnaryOp::Copy => {
            same_quant(b, node, &[input], output)?;
            super::lower(b, node)
        }
        UnaryOp::Clamp if same_size => {
            let (s, zp) = same_quant(b, node, &[input], output)?;
            let r = qs8::output_range(s, zp, node.clamp)?;
            let (x, o) = (b.tensor(input)?, b.tensor(output)?);
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
    let r = qs8::output_range(qo.0, qo.1, node.clamp)?;
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
    let r = qs8::output_range(qo.0, qo.1, node.clamp)?;
    let x = b.view(input, &[n, pixels, c], None)?;
    let o = b.view(output, &[n, c], None)?;
    let (scale, zp) = (b.double(scale as f64), b.double(zp as f64));
    let range = b.ints(&[r.lo as i64, r.hi as i64]);
    b.kernel_fn("xnnpack::qs8_mean", pool::mean, &[x, scale, zp, range, o]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::super::graph::{
        Datatype, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT, Graph, Node, Op, Quant, UnaryOp,
        XValue,
    };
    use etch_core::ErrorCode;

    /// A qint8 node kind etch does not run (a softmax of int8 values) fails the delegate's
    /// init with `NotSupported`, naming the node and its qint8 operands.
    #[test]
    fn an_unknown_qs8_node_fails_init_naming_it() {
        let value = |external_id: u32, flags: u32| XValue {
            external_id: Some(external_id),
            flags,
            quant: Some(Quant::PerTensor {
                scale: 0.5,
                zero_point: -3,
            }),
            ..XValue::test(Datatype::Qint8, &[1, 8])
        };
        let g = Graph {
            values: vec![
                value(0, FLAG_EXTERNAL_INPUT),
                value(1, FLAG_EXTERNAL_OUTPUT),
            ],
            nodes: vec![Node {
                name: "XNNSoftmax",
                ..Node::test(Op::Unary {
                    op: UnaryOp::Softmax,
                    input: 0,
                    output: 1,
                })
            }],
            input_ids: vec![0],
            output_ids: vec![1],
            constants: vec![],
            num_externs: 2,
        };
        let Err(e) = super::super::super::plan_graph(&g, &[], None, None) else {
            panic!("a qint8 softmax was planned");
        };
        assert_eq!(e.code(), ErrorCode::NotSupported, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("XNNSoftmax") && msg.contains("qint8"), "{msg}");
    }
}
