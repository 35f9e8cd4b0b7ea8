//! The XNNPACK graph, decoded from its flatbuffer into owned, validated Rust values.
//!
//! Decoding reads through planus' bounds-checked accessors and copies out only what the
//! backend uses; every list that sizes a tensor or names dimensions is checked against
//! XNNPACK's limit of [`MAX_XNN_DIMS`] before it is copied, and every value id a node
//! names is checked against the value table. Malformed input is an `InvalidProgram` error.

use super::fb;
use etch_core::{Error, Result};
use etch_kernels::conv::nhwc::NhwcShape;
use etch_kernels::util::Shape;
use planus::ReadAsRoot;

/// XNNPACK's `XNN_MAX_TENSOR_DIMS`.
pub const MAX_XNN_DIMS: usize = 6;
/// XNNPACK's `XNN_INVALID_VALUE_ID` (an absent optional operand, or no external id).
pub const INVALID_ID: u32 = u32::MAX;
/// `XNN_VALUE_FLAG_EXTERNAL_INPUT`.
pub const FLAG_EXTERNAL_INPUT: u32 = 1;
/// `XNN_VALUE_FLAG_EXTERNAL_OUTPUT`.
pub const FLAG_EXTERNAL_OUTPUT: u32 = 2;
/// `XNN_FLAG_TRANSPOSE_WEIGHTS` / `XNN_FLAG_TRANSPOSE_B`.
pub const FLAG_TRANSPOSE_WEIGHTS: u32 = 1;
/// `XNN_FLAG_TENSORFLOW_LEGACY_MODE` (resize).
pub const FLAG_TENSORFLOW_LEGACY_MODE: u32 = 4;
/// `XNN_FLAG_ALIGN_CORNERS` (resize).
pub const FLAG_ALIGN_CORNERS: u32 = 8;
/// `XNN_FLAG_KEEP_DIMS` (pooling, reductions).
pub const FLAG_KEEP_DIMS: u32 = 0x40;

/// An element type of an XNNPACK value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datatype {
    /// IEEE single precision.
    Fp32,
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// 32-bit signed integers.
    Int32,
    /// Statically quantized int8 (`PerTensorQuant`: one scale and zero point).
    Qint8,
    /// Int32 with per-channel scales (a statically quantized node's bias, zero point 0).
    Qcint32,
    /// Int32 with one scale (the bias of a node whose filter has one scale, zero point 0).
    Qint32,
    /// Dynamically quantized int8 (per-row parameters computed at run time).
    Qdint8,
    /// Int8 with per-channel scales (zero point 0).
    Qcint8,
    /// 4-bit with per-channel scales (two a byte, zero point 8).
    Qcint4,
    /// 4-bit with per-block scales (two a byte, zero point 8, bf16 scales).
    Qbint4,
    /// A quantized or packed type etch does not run yet (its schema name).
    Other(&'static str),
}

impl Datatype {
    fn from_fb(d: fb::XnnDatatype) -> Self {
        use fb::XnnDatatype as D;
        match d {
            D::XnnDatatypeFp32 => Datatype::Fp32,
            D::XnnDatatypeFp16 => Datatype::Fp16,
            D::XnnDatatypeBf16 => Datatype::Bf16,
            D::XnnDatatypeInt32 => Datatype::Int32,
            D::XnnDatatypeInvalid => Datatype::Other("xnn_datatype_invalid"),
            D::XnnDatatypeQint8 => Datatype::Qint8,
            D::XnnDatatypeQuint8 => Datatype::Other("xnn_datatype_quint8"),
            D::XnnDatatypeQint32 => Datatype::Qint32,
            D::XnnDatatypeQcint8 => Datatype::Qcint8,
            D::XnnDatatypeQcint32 => Datatype::Qcint32,
            D::XnnDatatypeQcint4 => Datatype::Qcint4,
            D::XnnDatatypeQdint8 => Datatype::Qdint8,
            D::XnnDatatypeQbint4 => Datatype::Qbint4,
            D::XnnDatatypeQpint8 => Datatype::Other("xnn_datatype_qpint8"),
            D::XnnDatatypePfp32 => Datatype::Other("xnn_datatype_pfp32"),
        }
    }

    /// The schema name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Fp32 => "xnn_datatype_fp32",
            Datatype::Fp16 => "xnn_datatype_fp16",
            Datatype::Bf16 => "xnn_datatype_bf16",
            Datatype::Int32 => "xnn_datatype_int32",
            Datatype::Qint8 => "xnn_datatype_qint8",
            Datatype::Qcint32 => "xnn_datatype_qcint32",
            Datatype::Qint32 => "xnn_datatype_qint32",
            Datatype::Qdint8 => "xnn_datatype_qdint8",
            Datatype::Qcint8 => "xnn_datatype_qcint8",
            Datatype::Qcint4 => "xnn_datatype_qcint4",
            Datatype::Qbint4 => "xnn_datatype_qbint4",
            Datatype::Other(n) => n,
        }
    }

    /// Whether the type is one of the quantized types etch runs (only in the nodes that take
    /// them: see [`super::lower`]).
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            Datatype::Qint8
                | Datatype::Qcint32
                | Datatype::Qint32
                | Datatype::Qdint8
                | Datatype::Qcint8
                | Datatype::Qcint4
                | Datatype::Qbint4
        )
    }

    /// Whether elements are 4-bit (two a byte).
    pub fn is_int4(self) -> bool {
        matches!(self, Datatype::Qcint4 | Datatype::Qbint4)
    }
}

/// Where a quantized value's scales are.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Scales {
    /// In the flatbuffer (f32).
    Inline(Vec<f32>),
    /// In entry `index` of the constant table, `count` of them (f32, or bf16 for
    /// per-block scales).
    Constant { index: u32, count: u32 },
}

/// The quantization parameters of a quantized value.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Quant {
    /// `PerTensorQuant`.
    PerTensor { scale: f32, zero_point: i32 },
    /// `PerChannelQuant`: one scale per index of dim `channel_dim`.
    PerChannel { channel_dim: i32, scales: Scales },
    /// `PerChannelGroupQuant`: one scale per `group_size` elements along the input
    /// channels, for each index of dim `channel_dim`.
    PerChannelGroup {
        channel_dim: i32,
        group_size: u32,
        scales: Scales,
    },
    /// `PerTokenDynamicQuant`: one scale and zero point per row of the last
    /// `num_nonbatch_dims` dims, computed at run time.
    PerTokenDynamic { num_nonbatch_dims: u32 },
    /// A quantized value without parameters (malformed; rejected where it is used).
    Missing,
}

impl Quant {
    /// The schema name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Quant::PerTensor { .. } => "PerTensorQuant",
            Quant::PerChannel { .. } => "PerChannelQuant",
            Quant::PerChannelGroup { .. } => "PerChannelGroupQuant",
            Quant::PerTokenDynamic { .. } => "PerTokenDynamicQuant",
            Quant::Missing => "no quantization parameters",
        }
    }

    /// The scales, for per-channel and per-block parameters.
    pub fn scales(&self) -> Option<&Scales> {
        match self {
            Quant::PerChannel { scales, .. } | Quant::PerChannelGroup { scales, .. } => {
                Some(scales)
            }
            _ => None,
        }
    }

    /// The constant table entry holding the scales, if they are in constant data.
    pub fn scale_constant(&self) -> Option<u32> {
        match self.scales() {
            Some(Scales::Constant { index, .. }) => Some(*index),
            _ => None,
        }
    }
}

/// A tensor value of the graph.
#[derive(Debug, Clone)]
pub struct XValue {
    /// Element type.
    pub dtype: Datatype,
    /// Shape, in XNNPACK's layout (NHWC for image tensors).
    pub dims: Shape,
    /// Index into the graph's constant table (0: not a constant).
    pub constant: u32,
    /// The delegate argument this value is bound to (inputs, then outputs), if external.
    pub external_id: Option<u32>,
    /// `XNN_VALUE_FLAG_EXTERNAL_INPUT` / `_OUTPUT` bits.
    pub flags: u32,
    /// The quantization parameters of a quantized value.
    pub quant: Option<Quant>,
}

#[cfg(test)]
impl XValue {
    /// A value for unit tests: not a constant, not external, no flags, not quantized.
    pub(crate) fn test(dtype: Datatype, dims: &[usize]) -> Self {
        XValue {
            dtype,
            dims: Shape::from_slice(dims).expect("a test shape"),
            constant: 0,
            external_id: None,
            flags: 0,
            quant: None,
        }
    }
}

/// Where a constant's bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConstantSource {
    /// At this offset in the payload's constant data segment.
    Offset(u64),
    /// Under this key in the named data map (the program's or a `.ptd` file's).
    Named(String),
}

/// An entry of the graph's constant table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constant {
    /// Where the bytes are.
    pub source: ConstantSource,
    /// Number of valid bytes.
    pub size: u64,
}

/// Binary elementwise nodes (`_XNNNode2x1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `min(a, b)`.
    Min,
    /// `max(a, b)`.
    Max,
    /// `a > 0 ? a : a * slope` (slope broadcast over the channels).
    PRelu,
}

/// Unary nodes (`_XNNNode1x1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum UnaryOp {
    Softmax,
    Sigmoid,
    Clamp,
    Floor,
    Ceiling,
    Convert,
    GlobalAvgPool,
    SquareRoot,
    Hardswish,
    Negate,
    Square,
    Abs,
    ReciprocalSquareRoot,
    Log,
    Gelu,
    Tanh,
    Exp,
    Sin,
    Cos,
    Copy,
}

/// Which convolution a `_XNNNodeConv` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvKind {
    /// `XNNConv2d`: filter `[Cout, KH, KW, Cin/groups]`.
    Conv,
    /// `XNNDepthwiseConv2d`: filter `[1, KH, KW, Cout]`.
    Depthwise,
    /// `XNNConvTranspose2d`: filter `[Cout, KH, KW, Cin/groups]`.
    Transpose,
}

/// A 2-D convolution's parameters (NHWC input and output).
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct ConvParams {
    pub kind: ConvKind,
    /// Top, right, bottom, left.
    pub padding: [u32; 4],
    pub kernel: [u32; 2],
    pub stride: [u32; 2],
    pub dilation: [u32; 2],
    pub group_input_channels: u32,
    pub group_output_channels: u32,
    pub groups: u32,
    pub adjustment: [u32; 2],
    pub input: u32,
    pub filter: u32,
    pub bias: Option<u32>,
    pub output: u32,
    pub flags: u32,
}

impl ConvParams {
    /// The geometry of this convolution on graph `g`'s values, which XNNPACK lays out NHWC
    /// (padding: top and left); `None` unless the input and output are 4-d, of one batch.
    pub fn nhwc_shape(&self, g: &Graph) -> Option<NhwcShape> {
        let dims = |id: u32| g.values.get(id as usize).map(|v| &v.dims[..]);
        let (Some(&[n, h, w, c]), Some(&[on, oh, ow, co])) = (dims(self.input), dims(self.output))
        else {
            return None;
        };
        let u = |v: [u32; 2]| v.map(|v| v as usize);
        (on == n).then_some(NhwcShape {
            n,
            h,
            w,
            c,
            oh,
            ow,
            co,
            kernel: u(self.kernel),
            stride: u(self.stride),
            pad: u([self.padding[0], self.padding[3]]),
            dil: u(self.dilation),
        })
    }
}

/// A 2-D pooling's parameters (NHWC input and output).
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct PoolParams {
    /// True for max pooling, false for average pooling.
    pub max: bool,
    /// Top, right, bottom, left.
    pub padding: [u32; 4],
    pub pooling: [u32; 2],
    pub stride: [u32; 2],
    pub dilation: [u32; 2],
    pub input: u32,
    pub output: u32,
    pub flags: u32,
}

/// What a node computes, with its operand value ids.
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum Op {
    Binary {
        op: BinaryOp,
        a: u32,
        b: u32,
        out: u32,
    },
    Unary {
        op: UnaryOp,
        input: u32,
        output: u32,
    },
    Elu {
        alpha: f32,
        input: u32,
        output: u32,
    },
    LeakyRelu {
        slope: f32,
        input: u32,
        output: u32,
    },
    FullyConnected {
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    },
    BatchMatMul {
        a: u32,
        b: u32,
        out: u32,
        flags: u32,
    },
    Conv(ConvParams),
    Pool(PoolParams),
    Transpose {
        perm: Shape,
        input: u32,
        output: u32,
    },
    Reshape {
        new_shape: Shape,
        input: u32,
        output: u32,
    },
    Slice {
        offsets: Shape,
        sizes: Shape,
        input: u32,
        output: u32,
    },
    Pad {
        pre: Shape,
        post: Shape,
        value: f32,
        input: u32,
        output: u32,
    },
    Concat {
        axis: u32,
        inputs: Shape,
        output: u32,
    },
    ResizeBilinear {
        height: u32,
        width: u32,
        flags: u32,
        input: u32,
        output: u32,
    },
    /// A node etch decodes but does not run (its operands unknown to the planner).
    /// A chain of elementwise nodes from a qint8 value to a qint8 value through fp32 ones
    /// (a dequantizing convert, unary nodes, a quantizing convert), run as a table of its
    /// 256 outputs: XNNPACK's LUT fusion. Made by `lower::fuse_qs8_luts`, never decoded.
    Lut {
        input: u32,
        output: u32,
        chain: Vec<Node>,
    },
    Unsupported,
}

/// One node of the graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// The node's schema name (`XNNConv2d`, ...), for messages and summaries.
    pub name: &'static str,
    /// What it computes.
    pub op: Op,
    /// The fused output clamp (`output_min_max`), if any.
    pub clamp: Option<(f32, f32)>,
    /// Links the node back to the exported graph.
    pub debug_handle: u32,
}

#[cfg(test)]
impl Node {
    /// A node for unit tests, named `n`, without a clamp.
    pub(crate) fn test(op: Op) -> Self {
        Node {
            name: "n",
            op,
            clamp: None,
            debug_handle: 0,
        }
    }
}

/// A decoded XNNPACK graph.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Values, indexed by their id (`id_out`).
    pub values: Vec<XValue>,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Ids of the external input values.
    pub input_ids: Vec<u32>,
    /// Ids of the external output values.
    pub output_ids: Vec<u32>,
    /// The constant table (entry 0 is reserved).
    pub constants: Vec<Constant>,
    /// Number of external values (delegate arguments).
    pub num_externs: u32,
}

pub(crate) fn fb_err(what: &str) -> impl Fn(planus::Error) -> Error + '_ {
    move |e| Error::invalid_program(format!("malformed XNNPACK {what}: {e}"))
}

/// Copies a `[uint]` list of at most [`MAX_XNN_DIMS`] entries.
pub(crate) fn dims_list(v: Option<planus::Vector<'_, u32>>, what: &str) -> Result<Shape> {
    let Some(v) = v else {
        return Ok(Shape::new());
    };
    if v.len() > MAX_XNN_DIMS {
        return Err(Error::invalid_program(format!(
            "XNNPACK {what} has {} entries; at most {MAX_XNN_DIMS} are allowed",
            v.len()
        )));
    }
    let mut s = Shape::new();
    for x in v.iter() {
        s.push(x as usize)?;
    }
    Ok(s)
}

impl Graph {
    /// Decodes and validates a graph flatbuffer.
    pub fn decode(bytes: &[u8]) -> Result<Graph> {
        let g = fb::XnnGraphRef::read_as_root(bytes).map_err(fb_err("graph"))?;
        let values = decode_values(&g)?;
        let mut nodes = Vec::new();
        if let Some(ns) = g.xnodes().map_err(fb_err("node list"))? {
            for (i, n) in ns.iter().enumerate() {
                let n = n.map_err(fb_err("node"))?;
                nodes.push(
                    super::decode::node(&n).map_err(|e| e.context(format!("XNNPACK node {i}")))?,
                );
            }
        }
        let ids = |v: Option<planus::Vector<'_, u32>>| v.map(|v| v.iter().collect::<Vec<_>>());
        let mut constants = Vec::new();
        if let Some(cs) = g.constant_data().map_err(fb_err("constant table"))? {
            for c in cs.iter() {
                let c = c.map_err(fb_err("constant entry"))?;
                let key = c.named_key().map_err(fb_err("constant key"))?.unwrap_or("");
                let source = if key.is_empty() {
                    ConstantSource::Offset(c.offset().map_err(fb_err("constant offset"))?)
                } else {
                    ConstantSource::Named(key.to_string())
                };
                let size = c.size().map_err(fb_err("constant size"))?;
                constants.push(Constant { source, size });
            }
        }
        let graph = Graph {
            values,
            nodes,
            input_ids: ids(g.input_ids().map_err(fb_err("input ids"))?).unwrap_or_default(),
            output_ids: ids(g.output_ids().map_err(fb_err("output ids"))?).unwrap_or_default(),
            constants,
            num_externs: g.num_externs().map_err(fb_err("extern count"))?,
        };
        graph.validate()?;
        Ok(graph)
    }

    /// Checks that every id a node or the graph names exists, and constants are in range.
    fn validate(&self) -> Result<()> {
        let n = self.values.len();
        let check = |id: u32, what: &str| -> Result<()> {
            if (id as usize) < n {
                Ok(())
            } else {
                Err(Error::invalid_program(format!(
                    "XNNPACK {what} names value {id}; the graph has {n}"
                )))
            }
        };
        for &id in self.input_ids.iter().chain(&self.output_ids) {
            check(id, "graph input/output list")?;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            for id in node.op.inputs().iter().chain(node.op.outputs().iter()) {
                check(*id as u32, &format!("node {i} ({})", node.name))?;
            }
        }
        for (i, v) in self.values.iter().enumerate() {
            let scale_index = v.quant.as_ref().and_then(Quant::scale_constant);
            if let Some(scale_index) = scale_index
                && scale_index as usize >= self.constants.len()
            {
                return Err(Error::invalid_program(format!(
                    "XNNPACK value {i} has its scales in constant {scale_index}; the table has {}",
                    self.constants.len()
                )));
            }
            if v.constant as usize >= self.constants.len().max(1) {
                return Err(Error::invalid_program(format!(
                    "XNNPACK value {i} refers to constant {}; the table has {}",
                    v.constant,
                    self.constants.len()
                )));
            }
        }
        Ok(())
    }
}

fn decode_values(g: &fb::XnnGraphRef<'_>) -> Result<Vec<XValue>> {
    let mut values = Vec::new();
    let Some(vs) = g.xvalues().map_err(fb_err("value list"))? else {
        return Ok(values);
    };
    for (i, v) in vs.iter().enumerate() {
        let v = v.map_err(fb_err("value"))?;
        let u = v
            .xvalue_union()
            .map_err(fb_err("value"))?
            .ok_or_else(|| Error::invalid_program(format!("XNNPACK value {i} is empty")))?;
        let (t, quant) = match u {
            fb::XValueUnionRef::XnnTensorValue(t) => (t, None),
            fb::XValueUnionRef::XnnQuantizedTensorValue(q) => {
                let t = q.tensor_value().map_err(fb_err("quantized value"))?;
                let t = t.ok_or_else(|| {
                    Error::invalid_program(format!("XNNPACK quantized value {i} has no tensor"))
                })?;
                (t, Some(quant_params(&q)?))
            }
        };
        let id = t.id_out().map_err(fb_err("value id"))?;
        if id as usize != i {
            return Err(Error::invalid_program(format!(
                "XNNPACK value {i} has id {id}; ids must count up from 0"
            )));
        }
        let dims = dims_list(t.dims().map_err(fb_err("value dims"))?, "value dims")?;
        let ext = t.external_id().map_err(fb_err("external id"))?;
        values.push(XValue {
            dtype: Datatype::from_fb(t.datatype().map_err(fb_err("value datatype"))?),
            dims,
            constant: t.constant_buffer_idx().map_err(fb_err("constant index"))?,
            external_id: (ext != INVALID_ID).then_some(ext),
            flags: t.flags().map_err(fb_err("value flags"))?,
            quant,
        });
    }
    Ok(values)
}

fn scales(inline: Option<planus::Vector<'_, f32>>, index: u32, count: u32) -> Result<Scales> {
    if index != 0 {
        return Ok(Scales::Constant { index, count });
    }
    let v =
        inline.ok_or_else(|| Error::invalid_program("XNNPACK quantized value has no scales"))?;
    if v.len() > MAX_INLINE_SCALES {
        return Err(Error::invalid_program(format!(
            "XNNPACK quantized value has {} inline scales",
            v.len()
        )));
    }
    Ok(Scales::Inline(v.iter().collect()))
}

/// Most scales a flatbuffer may carry inline (larger lists are in constant data).
const MAX_INLINE_SCALES: usize = 1 << 20;

fn quant_params(q: &fb::XnnQuantizedTensorValueRef<'_>) -> Result<Quant> {
    let e = fb_err("quantization parameters");
    Ok(match q.quant_params().map_err(&e)? {
        None => Quant::Missing,
        Some(fb::XnnQuantParamsRef::PerChannelQuant(p)) => Quant::PerChannel {
            channel_dim: p.channel_dim().map_err(&e)?,
            scales: scales(
                p.scale().map_err(&e)?,
                p.scale_buffer_idx().map_err(&e)?,
                p.num_scales().map_err(&e)?,
            )?,
        },
        Some(fb::XnnQuantParamsRef::PerTensorQuant(p)) => Quant::PerTensor {
            scale: p.scale().map_err(&e)?,
            zero_point: p.zero_point().map_err(&e)?,
        },
        Some(fb::XnnQuantParamsRef::PerTokenDynamicQuant(p)) => {
            let n = p.num_nonbatch_dims().map_err(&e)?;
            Quant::PerTokenDynamic {
                num_nonbatch_dims: u32::try_from(n).map_err(|_| {
                    Error::invalid_program(format!("XNNPACK num_nonbatch_dims {n}"))
                })?,
            }
        }
        Some(fb::XnnQuantParamsRef::PerChannelGroupQuant(p)) => {
            let g = p.group_size().map_err(&e)?;
            Quant::PerChannelGroup {
                channel_dim: p.channel_dim().map_err(&e)?,
                group_size: u32::try_from(g)
                    .ok()
                    .filter(|&g| g > 0)
                    .ok_or_else(|| Error::invalid_program(format!("XNNPACK group size {g}")))?,
                scales: scales(
                    p.scale().map_err(&e)?,
                    p.scale_buffer_idx().map_err(&e)?,
                    p.num_scales().map_err(&e)?,
                )?,
            }
        }
    })
}

impl Op {
    /// The value ids the node reads (absent optional operands left out).
    pub fn inputs(&self) -> Shape {
        let mut s = Shape::new();
        let mut push = |id: u32| {
            let _ = s.push(id as usize);
        };
        match self {
            Op::Binary { a, b, .. } | Op::BatchMatMul { a, b, .. } => {
                push(*a);
                push(*b);
            }
            Op::Unary { input, .. }
            | Op::Elu { input, .. }
            | Op::LeakyRelu { input, .. }
            | Op::Transpose { input, .. }
            | Op::Reshape { input, .. }
            | Op::Slice { input, .. }
            | Op::Pad { input, .. }
            | Op::ResizeBilinear { input, .. } => push(*input),
            Op::FullyConnected {
                input,
                filter,
                bias,
                ..
            } => {
                push(*input);
                push(*filter);
                bias.map(&mut push);
            }
            Op::Conv(c) => {
                push(c.input);
                push(c.filter);
                c.bias.map(&mut push);
            }
            Op::Pool(p) => push(p.input),
            Op::Concat { inputs, .. } => inputs.iter().for_each(|&i| push(i as u32)),
            Op::Lut { input, .. } => push(*input),
            Op::Unsupported => {}
        }
        s
    }

    /// The value ids the node writes.
    pub fn outputs(&self) -> Shape {
        let mut s = Shape::new();
        let id = match self {
            Op::Binary { out, .. } | Op::BatchMatMul { out, .. } => *out,
            Op::Unary { output, .. }
            | Op::Elu { output, .. }
            | Op::LeakyRelu { output, .. }
            | Op::FullyConnected { output, .. }
            | Op::Transpose { output, .. }
            | Op::Reshape { output, .. }
            | Op::Slice { output, .. }
            | Op::Pad { output, .. }
            | Op::Concat { output, .. }
            | Op::Lut { output, .. }
            | Op::ResizeBilinear { output, .. } => *output,
            Op::Conv(c) => c.output,
            Op::Pool(p) => p.output,
            Op::Unsupported => return s,
        };
        let _ = s.push(id as usize);
        s
    }
}
