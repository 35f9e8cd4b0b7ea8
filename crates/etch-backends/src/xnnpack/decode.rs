//! Decoding of one `XNode` (the `XNodeUnion` variants) into [`Node`].

use super::fb::{self, XNodeUnionRef as U};
use super::graph::{
    BinaryOp, ConvKind, ConvParams, INVALID_ID, Node, Op, PoolParams, UnaryOp, dims_list, fb_err,
};
use etch_core::{Error, Result};
use etch_kernels::util::Shape;

type R<T> = planus::Result<T>;

fn get<T>(r: R<T>) -> Result<T> {
    r.map_err(fb_err("node field"))
}

fn opt_id(id: u32) -> Option<u32> {
    (id != INVALID_ID).then_some(id)
}

fn n2x1(op: BinaryOp, r: &fb::XnnNode2x1Ref<'_>) -> Result<Op> {
    Ok(Op::Binary {
        op,
        a: get(r.input1_id())?,
        b: get(r.input2_id())?,
        out: get(r.output_id())?,
    })
}

fn n1x1(op: UnaryOp, r: &fb::XnnNode1x1Ref<'_>) -> Result<Op> {
    Ok(Op::Unary {
        op,
        input: get(r.input_id())?,
        output: get(r.output_id())?,
    })
}

fn conv(kind: ConvKind, r: &fb::XnnNodeConvRef<'_>) -> Result<Op> {
    Ok(Op::Conv(ConvParams {
        kind,
        padding: [
            get(r.padding_top())?,
            get(r.padding_right())?,
            get(r.padding_bottom())?,
            get(r.padding_left())?,
        ],
        kernel: [get(r.kernel_height())?, get(r.kernel_width())?],
        stride: [get(r.subsampling_height())?, get(r.subsampling_width())?],
        dilation: [get(r.dilation_height())?, get(r.dilation_width())?],
        group_input_channels: get(r.group_input_channels())?,
        group_output_channels: get(r.group_output_channels())?,
        groups: get(r.groups())?,
        adjustment: [get(r.adjustment_height())?, get(r.adjustment_width())?],
        input: get(r.input1_id())?,
        filter: get(r.filter_id())?,
        bias: opt_id(get(r.bias_id())?),
        output: get(r.output_id())?,
        flags: get(r.flags())?,
    }))
}

fn pool(max: bool, r: &fb::XnnPooling2DRef<'_>) -> Result<Op> {
    Ok(Op::Pool(PoolParams {
        max,
        padding: [
            get(r.padding_top())?,
            get(r.padding_right())?,
            get(r.padding_bottom())?,
            get(r.padding_left())?,
        ],
        pooling: [get(r.pooling_height())?, get(r.pooling_width())?],
        stride: [get(r.stride_height())?, get(r.stride_width())?],
        dilation: [get(r.dilation_height())?, get(r.dilation_width())?],
        input: get(r.input_id())?,
        output: get(r.output_id())?,
        flags: get(r.flags())?,
    }))
}

fn cat(r: &fb::XnnCatRef<'_>, n: usize) -> Result<Op> {
    let all = [
        get(r.input1_id())?,
        get(r.input2_id())?,
        get(r.input3_id())?,
        get(r.input4_id())?,
        get(r.input5_id())?,
    ];
    let mut inputs = Shape::new();
    for &id in &all[..n] {
        if id == INVALID_ID {
            return Err(Error::invalid_program(format!(
                "XNNConcatenate{n} lacks one of its {n} inputs"
            )));
        }
        inputs.push(id as usize)?;
    }
    Ok(Op::Concat {
        axis: get(r.axis())?,
        inputs,
        output: get(r.output_id())?,
    })
}

fn shape_op(u: &U<'_>) -> Result<Option<Op>> {
    Ok(Some(match u {
        U::XnnStaticTranspose(r) => Op::Transpose {
            perm: dims_list(get(r.perm())?, "transpose permutation")?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnStaticReshape(r) => Op::Reshape {
            new_shape: dims_list(get(r.new_shape())?, "reshape shape")?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnStaticSlice(r) => Op::Slice {
            offsets: dims_list(get(r.offsets())?, "slice offsets")?,
            sizes: dims_list(get(r.sizes())?, "slice sizes")?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnStaticConstantPad(r) => Op::Pad {
            pre: dims_list(get(r.pre_paddings())?, "pre-paddings")?,
            post: dims_list(get(r.post_paddings())?, "post-paddings")?,
            value: get(r.padding_value())?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnStaticResizeBilinear2D(r) => Op::ResizeBilinear {
            height: get(r.new_height())?,
            width: get(r.new_width())?,
            flags: get(r.flags())?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnConcatenate2(r) => cat(r, 2)?,
        U::XnnConcatenate3(r) => cat(r, 3)?,
        U::XnnConcatenate4(r) => cat(r, 4)?,
        U::XnnConcatenate5(r) => cat(r, 5)?,
        _ => return Ok(None),
    }))
}

fn unary_kind<'a>(u: &U<'a>) -> Option<(UnaryOp, fb::XnnNode1x1Ref<'a>)> {
    use UnaryOp as O;
    Some(match u {
        U::XnnSoftmax(r) => (O::Softmax, *r),
        U::XnnSigmoid(r) => (O::Sigmoid, *r),
        U::XnnClamp(r) => (O::Clamp, *r),
        U::XnnFloor(r) => (O::Floor, *r),
        U::XnnConvert(r) => (O::Convert, *r),
        U::XnnGlobalAvgPooling2d(r) => (O::GlobalAvgPool, *r),
        U::XnnSquareRoot(r) => (O::SquareRoot, *r),
        U::XnnCeiling(r) => (O::Ceiling, *r),
        U::XnnHardswish(r) => (O::Hardswish, *r),
        U::XnnNegate(r) => (O::Negate, *r),
        U::XnnSquare(r) => (O::Square, *r),
        U::XnnAbs(r) => (O::Abs, *r),
        U::XnnReciprocalSquareRoot(r) => (O::ReciprocalSquareRoot, *r),
        U::XnnLog(r) => (O::Log, *r),
        U::XnnGelu(r) => (O::Gelu, *r),
        U::XnnTanh(r) => (O::Tanh, *r),
        U::XnnExp(r) => (O::Exp, *r),
        U::XnnSin(r) => (O::Sin, *r),
        U::XnnCos(r) => (O::Cos, *r),
        U::XnnCopy(r) => (O::Copy, *r),
        _ => return None,
    })
}

fn binary_kind<'a>(u: &U<'a>) -> Option<(BinaryOp, fb::XnnNode2x1Ref<'a>)> {
    use BinaryOp as O;
    Some(match u {
        U::XnnAdd(r) => (O::Add, *r),
        U::XnnSubtract(r) => (O::Sub, *r),
        U::XnnMultiply(r) => (O::Mul, *r),
        U::XnnDiv(r) => (O::Div, *r),
        U::XnnMinimum(r) => (O::Min, *r),
        U::XnnMaximum(r) => (O::Max, *r),
        U::XnnpReLu(r) => (O::PRelu, *r),
        _ => return None,
    })
}

fn op(u: &U<'_>) -> Result<Op> {
    if let Some((k, r)) = unary_kind(u) {
        return n1x1(k, &r);
    }
    if let Some((k, r)) = binary_kind(u) {
        return n2x1(k, &r);
    }
    if let Some(op) = shape_op(u)? {
        return Ok(op);
    }
    Ok(match u {
        U::XnnFullyConnected(r) => Op::FullyConnected {
            input: get(r.input1_id())?,
            filter: get(r.filter_id())?,
            bias: opt_id(get(r.bias_id())?),
            output: get(r.output_id())?,
            flags: get(r.flags())?,
        },
        U::XnnBatchMatrixMultiply(r) => Op::BatchMatMul {
            a: get(r.input1_id())?,
            b: get(r.input2_id())?,
            out: get(r.output_id())?,
            flags: get(r.flags())?,
        },
        U::XnnConv2d(r) => conv(ConvKind::Conv, r)?,
        U::XnnDepthwiseConv2d(r) => conv(ConvKind::Depthwise, r)?,
        U::XnnConvTranspose2d(r) => conv(ConvKind::Transpose, r)?,
        U::XnnAvgPooling2d(r) => pool(false, r)?,
        U::XnnMaxPooling2d(r) => pool(true, r)?,
        U::Xnnelu(r) => Op::Elu {
            alpha: get(r.alpha())?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        U::XnnLeakyReLu(r) => Op::LeakyRelu {
            slope: get(r.negative_slope())?,
            input: get(r.input_id())?,
            output: get(r.output_id())?,
        },
        _ => Op::Unsupported,
    })
}

/// The schema name of a node type.
pub fn name(u: &U<'_>) -> &'static str {
    match u {
        U::XnnAdd(_) => "XNNAdd",
        U::XnnFullyConnected(_) => "XNNFullyConnected",
        U::XnnSoftmax(_) => "XNNSoftmax",
        U::XnnSigmoid(_) => "XNNSigmoid",
        U::XnnStaticTranspose(_) => "XNNStaticTranspose",
        U::XnnClamp(_) => "XNNClamp",
        U::XnnConv2d(_) => "XNNConv2d",
        U::XnnDiv(_) => "XNNDiv",
        U::XnnStaticResizeBilinear2D(_) => "XNNStaticResizeBilinear2D",
        U::XnnStaticConstantPad(_) => "XNNStaticConstantPad",
        U::XnnAvgPooling2d(_) => "XNNAvgPooling2d",
        U::XnnMinimum(_) => "XNNMinimum",
        U::XnnDepthwiseConv2d(_) => "XNNDepthwiseConv2d",
        U::XnnMaxPooling2d(_) => "XNNMaxPooling2d",
        U::XnnMultiply(_) => "XNNMultiply",
        U::XnnSubtract(_) => "XNNSubtract",
        U::XnnFloor(_) => "XNNFloor",
        U::XnnConvert(_) => "XNNConvert",
        U::XnnGlobalAvgPooling2d(_) => "XNNGlobalAvgPooling2d",
        U::XnnStaticReshape(_) => "XNNStaticReshape",
        U::XnnArgMaxPooling2d(_) => "XNNArgMaxPooling2d",
        U::XnnSquareRoot(_) => "XNNSquareRoot",
        U::XnnCeiling(_) => "XNNCeiling",
        U::XnnHardswish(_) => "XNNHardswish",
        U::XnnLeakyReLu(_) => "XNNLeakyReLU",
        U::XnnMaximum(_) => "XNNMaximum",
        U::XnnNegate(_) => "XNNNegate",
        U::XnnSquare(_) => "XNNSquare",
        U::Xnnelu(_) => "XNNELU",
        U::XnnAbs(_) => "XNNAbs",
        U::XnnpReLu(_) => "XNNPReLU",
        U::XnnConcatenate2(_) => "XNNConcatenate2",
        U::XnnConcatenate3(_) => "XNNConcatenate3",
        U::XnnConcatenate4(_) => "XNNConcatenate4",
        U::XnnStaticSlice(_) => "XNNStaticSlice",
        U::XnnScaledDotProductAttention(_) => "XNNScaledDotProductAttention",
        U::XnnBatchMatrixMultiply(_) => "XNNBatchMatrixMultiply",
        U::XnnConcatenate5(_) => "XNNConcatenate5",
        U::XnnConvTranspose2d(_) => "XNNConvTranspose2d",
        U::XnnReciprocalSquareRoot(_) => "XNNReciprocalSquareRoot",
        U::XnnLog(_) => "XNNLog",
        U::XnnGelu(_) => "XNNGelu",
        U::XnnTanh(_) => "XNNTanh",
        U::XnnExp(_) => "XNNExp",
        U::XnnSin(_) => "XNNSin",
        U::XnnCopy(_) => "XNNCopy",
        U::XnnCos(_) => "XNNCos",
    }
}

/// Decodes one node.
pub fn node(n: &fb::XNodeRef<'_>) -> Result<Node> {
    let u = n
        .xnode_union()
        .map_err(|e| {
            Error::invalid_program(format!(
                "unreadable node type ({e}; a node type newer than executorch 1.5.1's schema?)"
            ))
        })?
        .ok_or_else(|| Error::invalid_program("node has no type"))?;
    let clamp = match get(n.output_min_max())? {
        Some(m) => Some((get(m.output_min())?, get(m.output_max())?)),
        None => None,
    };
    Ok(Node {
        name: name(&u),
        op: op(&u).map_err(|e| e.context(name(&u)))?,
        clamp,
        debug_handle: get(n.debug_handle())?,
    })
}
