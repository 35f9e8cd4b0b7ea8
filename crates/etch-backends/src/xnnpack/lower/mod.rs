//! Lowering of XNNPACK nodes to plan steps, one module per node family.

mod bmm;
mod conv;
mod elementwise;
mod gemm;
mod nhwc;
mod qs8;
pub use qs8::{fuse_clamps as fuse_qs8_clamps, fuse_luts as fuse_qs8_luts};
pub use quant::dedupe_converts;
mod quant;
mod shape;

use super::graph::{Datatype, Node, Op, UnaryOp};
use super::plan::{Builder, scalar_type};
use etch_core::{Device, Dynamism, Error, Result, ScalarType, TensorImpl, bf16, f16};

/// Checks that quantized operands of nodes without qint8 operands (those go to [`qs8`])
/// are only where etch runs them: the output of an fp32 -> qdint8 convert, the input and
/// filter of a fully-connected node.
fn check_quantized(b: &Builder<'_>, node: &Node) -> Result<()> {
    let (ins, outs) = (node.op.inputs(), node.op.outputs());
    for &id in ins.iter().chain(outs.iter()) {
        let v = b.value(id as u32);
        let ok = match &node.op {
            Op::FullyConnected { output, .. } => id != *output as usize,
            Op::Unary {
                op: UnaryOp::Convert,
                output,
                ..
            } => id == *output as usize && v.dtype == Datatype::Qdint8,
            _ => false,
        };
        if v.dtype.is_quantized() && !ok {
            return Err(Error::not_supported(format!(
                "{} with {} operand {id} ({}): besides statically quantized (qint8) nodes, etch \
                 runs quantized values only in fp32 -> qdint8 converts and dynamically \
                 quantized fully-connected nodes so far",
                node.name,
                v.dtype.name(),
                v.quant
                    .as_ref()
                    .map_or("no quantization parameters", |q| q.name())
            )));
        }
    }
    Ok(())
}

/// Lowers node `i`, and with it node `i + 1` where the two run as one step (a sigmoid
/// and the multiplication of its input by it: [`elementwise::sigmoid_mul`]). Returns how
/// many nodes it lowered.
pub fn node(b: &mut Builder<'_>, i: usize, node: &Node) -> Result<usize> {
    b.node = i as u32;
    if qs8::is_qs8(b, node) {
        return qs8::lower(b, node)
            .map(|()| 1)
            .map_err(|e| e.context(format!("XNNPACK node {i} ({})", node.name)));
    }
    let r = check_quantized(b, node).and_then(|()| {
        if let Op::Unary {
            op: UnaryOp::Sigmoid,
            input,
            output,
        } = node.op
            && elementwise::sigmoid_mul(b, i, node, input, output)?
        {
            return Ok(2);
        }
        lower(b, node).map(|()| 1)
    });
    r.map_err(|e| e.context(format!("XNNPACK node {i} ({})", node.name)))
}

fn lower(b: &mut Builder<'_>, node: &Node) -> Result<()> {
    match &node.op {
        Op::Binary { op, a, b: y, out } => elementwise::binary(b, node, *op, [*a, *y, *out]),
        Op::Unary { op, input, output } => match op {
            UnaryOp::Copy => shape::reshape(b, [*input, *output]),
            UnaryOp::Convert if b.value(*output).dtype == Datatype::Qdint8 => {
                quant::convert(b, [*input, *output])
            }
            _ => elementwise::unary(b, node, *op, *input, *output),
        },
        Op::Elu {
            alpha,
            input,
            output,
        } => elementwise::param_unary(b, node, true, *alpha, [*input, *output]),
        Op::LeakyRelu {
            slope,
            input,
            output,
        } => elementwise::param_unary(b, node, false, *slope, [*input, *output]),
        Op::FullyConnected {
            input,
            filter,
            bias,
            output,
            flags,
        } => gemm::fully_connected(b, node, [*input, *filter, *output], *bias, *flags),
        Op::BatchMatMul {
            a,
            b: w,
            out,
            flags,
        } => gemm::batch_matmul(b, node, [*a, *w, *out], *flags),
        Op::Conv(c) => conv::convolution(b, node, c),
        Op::Pool(p) => conv::pooling(b, node, p),
        Op::ResizeBilinear {
            height,
            width,
            flags,
            input,
            output,
        } => conv::resize_bilinear(b, node, [*height, *width], *flags, [*input, *output]),
        Op::Transpose {
            perm,
            input,
            output,
        } => shape::transpose(b, perm, [*input, *output]),
        Op::Reshape { input, output, .. } => shape::reshape(b, [*input, *output]),
        Op::Slice {
            offsets,
            input,
            output,
            ..
        } => shape::slice(b, offsets, [*input, *output]),
        Op::Pad {
            pre,
            post,
            value,
            input,
            output,
        } => shape::pad(b, pre, post, *value, [*input, *output]),
        Op::Concat {
            axis,
            inputs,
            output,
        } => shape::concat(b, *axis, inputs, *output),
        Op::Lut { .. } => Err(Error::internal(format!(
            "{}: a LUT chain whose ends are not qint8",
            node.name
        ))),
        Op::Unsupported => Err(Error::not_supported(format!(
            "etch does not run {} nodes yet",
            node.name
        ))),
    }
}

/// Constant `id` read through a view (`sizes` in `dim_order` over its bytes), copied into
/// a new contiguous constant of those sizes (a weight repacked at init), converted to
/// `to` (XNNPACK keeps fp32 filters and biases in fp16 graphs).
pub fn repack_constant(
    b: &mut Builder<'_>,
    id: u32,
    sizes: &[usize],
    dim_order: Option<&[u8]>,
    to: ScalarType,
) -> Result<u32> {
    let dtype = scalar_type(b.value(id), id)?;
    let src = b.constant_bytes(id)?;
    // The view's strides, from its dim order.
    let view = TensorImpl::new(
        dtype,
        sizes,
        dim_order,
        Dynamism::Static,
        Device::CPU,
        std::ptr::null_mut(),
        src.len(),
    )?;
    let es = dtype.element_size();
    if view.nbytes() != src.len() {
        return Err(Error::invalid_program(format!(
            "repacking value {id} of {} bytes as {sizes:?}",
            src.len()
        )));
    }
    let strides = view.strides();
    let mut dst = vec![0u8; src.len()];
    // An odometer over the view's index, in row-major order, tracking the source offset.
    let mut idx = [0usize; etch_core::MAX_DIMS];
    let mut off = 0usize;
    for chunk in dst.chunks_exact_mut(es) {
        chunk.copy_from_slice(&src[off * es..off * es + es]);
        for d in (0..sizes.len()).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < sizes[d] {
                break;
            }
            off -= strides[d] * sizes[d];
            idx[d] = 0;
        }
    }
    let dst = convert(&dst, dtype, to)?;
    b.owned(to, sizes, &dst)
}

/// Constant `id` as a contiguous tensor of dtype `to` (itself when it already is).
pub fn constant_as(b: &mut Builder<'_>, id: u32, to: ScalarType) -> Result<u32> {
    if scalar_type(b.value(id), id)? == to {
        return b.tensor(id);
    }
    let dims = b.value(id).dims;
    repack_constant(b, id, &dims, None, to)
}

/// Constant `id` (a float dtype) as `f32` values, in its own layout.
pub fn constant_f32(b: &Builder<'_>, id: u32) -> Result<Vec<f32>> {
    let dtype = scalar_type(b.value(id), id)?;
    let bytes = convert(b.constant_bytes(id)?, dtype, ScalarType::Float)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Converts little-endian elements between the float dtypes.
pub fn convert(bytes: &[u8], from: ScalarType, to: ScalarType) -> Result<Vec<u8>> {
    use ScalarType::{BFloat16, Float, Half};
    if from == to {
        return Ok(bytes.to_vec());
    }
    let vals: Vec<f32> = match from {
        Float => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Half => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        BFloat16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return Err(Error::not_supported(format!("a {from} constant as {to}"))),
    };
    Ok(match to {
        Float => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Half => vals
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        BFloat16 => vals
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => return Err(Error::not_supported(format!("a {from} constant as {to}"))),
    })
}
