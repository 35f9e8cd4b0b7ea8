//! Memory for the graph's internal values: one arena, planned once at init from the
//! values' lifetimes (the node that writes a value to the last node that reads it).
//! Values whose lifetimes overlap never share bytes, so a node's output never overlaps
//! one of its inputs, with one exception: a reshape's output takes its input's bytes
//! ([`reshape_roots`]), so that the reshape copies nothing.

use super::graph::{Graph, Op, UnaryOp};
use etch_core::{Error, HOST_ALIGNMENT, Result};

/// Where each value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Not used by any node.
    Unused,
    /// A constant (entry of the graph's constant table).
    Constant,
    /// A delegate argument.
    External(u32),
    /// At this byte offset of the arena.
    Arena(usize),
}

/// The arena layout.
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    /// Per value id.
    pub storage: Vec<Storage>,
    /// Arena size in bytes.
    pub arena_bytes: usize,
}

/// Bytes of value `id` (checked). 4-bit values pack two elements a byte, each row of
/// the last dim padded to a whole byte (as executorch serializes them).
pub fn value_bytes(g: &Graph, id: usize) -> Result<usize> {
    use super::graph::Datatype as D;
    let v = &g.values[id];
    let numel = etch_core::checked_numel(&v.dims);
    let bytes = match v.dtype {
        D::Fp32 | D::Int32 | D::Qcint32 | D::Qint32 => numel.and_then(|n| n.checked_mul(4)),
        D::Fp16 | D::Bf16 => numel.and_then(|n| n.checked_mul(2)),
        D::Qcint4 | D::Qbint4 => match v.dims.last() {
            Some(&last) if last > 0 => numel.map(|n| n / last * last.div_ceil(2)),
            _ => numel,
        },
        D::Qint8 | D::Qdint8 | D::Qcint8 | D::Other(_) => numel,
    };
    bytes
        .filter(|&n| n <= isize::MAX as usize / 2)
        .ok_or_else(|| {
            Error::invalid_program(format!(
                "XNNPACK value {id} of shape {:?} is too large",
                &v.dims[..]
            ))
        })
}

/// Lifetimes `[first, last]` (node indices) of the values nodes touch, checking that every
/// internal value is written before it is read.
fn lifetimes(g: &Graph) -> Result<Vec<Option<(usize, usize)>>> {
    let mut life: Vec<Option<(usize, usize)>> = vec![None; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &id in n.op.inputs().iter() {
            let v = &g.values[id];
            if v.constant == 0 && v.external_id.is_none() && life[id].is_none() {
                return Err(Error::invalid_program(format!(
                    "XNNPACK node {i} ({}) reads value {id}, which no earlier node writes",
                    n.name
                )));
            }
            if let Some((_, last)) = &mut life[id] {
                *last = i;
            }
        }
        for &id in n.op.outputs().iter() {
            let v = &g.values[id];
            if v.constant != 0 {
                return Err(Error::invalid_program(format!(
                    "XNNPACK node {i} ({}) writes constant value {id}",
                    n.name
                )));
            }
            match &mut life[id] {
                Some((_, last)) => *last = i,
                None => life[id] = Some((i, i)),
            }
        }
    }
    Ok(life)
}

/// For each value, the value whose bytes it takes: itself, or, across an `XNNStaticReshape`
/// between two values of the same size, the other one's:
/// - an internal output takes its input's place (the input's own root: an internal value
///   or a delegate input);
/// - an internal input whose place nothing shares yet takes the place of an output that is
///   a delegate output, so that its producer writes there directly.
///
/// Every value is written by one node and never again, so neither changes while the other
/// is read; a reshape's operands are laid out contiguously (never channels-first:
/// [`channels_first`]), so the bytes are the same. Constants keep their copies.
pub fn reshape_roots(g: &Graph) -> Result<Vec<usize>> {
    let mut root: Vec<usize> = (0..g.values.len()).collect();
    let kind = |id: usize| match &g.values[id] {
        v if v.constant != 0 => None,
        v => Some(v.external_id.is_some()),
    };
    for n in &g.nodes {
        let Op::Reshape { input, output, .. } = n.op else {
            continue;
        };
        let (i, o) = (input as usize, output as usize);
        if value_bytes(g, i)? != value_bytes(g, o)? {
            continue;
        }
        match (kind(i), kind(o)) {
            (Some(_), Some(false)) if root[o] == o => root[o] = root[i],
            (Some(false), Some(true)) if delegate_output(g, o) => {
                let alone = root[i] == i && root.iter().enumerate().all(|(v, &r)| r != i || v == i);
                if alone {
                    root[i] = o;
                }
            }
            _ => {}
        }
    }
    Ok(root)
}

/// Whether value `id` is one of the delegate's outputs (as `plan::Builder` binds them).
fn delegate_output(g: &Graph, id: usize) -> bool {
    g.values[id].flags & super::graph::FLAG_EXTERNAL_OUTPUT != 0
        || g.output_ids.contains(&(id as u32))
}

/// A float32 sum, difference, product or quotient whose output may take the bytes of one of its inputs, by shape:
/// the input `x` has the output's dims and layout, and the other operand `y` meets it
/// element by element, repeated along it, by columns or as a scalar
/// ([`etch_kernels::binary::inplace_f32`]'s runs). The multiplication of XNNPACK's SiLU
/// (lowered with its sigmoid as one pass) is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InPlace {
    /// The input whose bytes the output takes, and the other operand.
    pub x: u32,
    pub y: u32,
    /// `y`'s element `(i / run) % len` meets element `i`.
    pub run: usize,
    /// `y` is the first operand (`op(y, x)`).
    pub swap: bool,
}

/// [`InPlace`] for node `i` of `g` (`cf`: [`channels_first`]), where the shapes allow it.
pub fn inplace(g: &Graph, cf: &[bool], i: usize) -> Option<InPlace> {
    use super::graph::{BinaryOp, Datatype};
    let Op::Binary { op, a, b, out } = g.nodes[i].op else {
        return None;
    };
    let float = [a, b, out]
        .iter()
        .all(|&id| g.values[id as usize].dtype == Datatype::Fp32);
    let arithmetic = matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    );
    if !arithmetic || !float || a == b || silu_product(g, i) {
        return None;
    }
    let v = |id: u32| &g.values[id as usize];
    let dout = &v(out).dims[..];
    let numel = |d: &[usize]| d.iter().product::<usize>();
    let spread = |x: u32, y: u32| -> Option<usize> {
        let (dy, same_layout) = (&v(y).dims[..], cf[x as usize] == cf[out as usize]);
        if v(x).dims[..] != *dout || !same_layout {
            return None;
        }
        if numel(dy) == 1 {
            return Some(numel(dout));
        }
        if dy == dout && cf[y as usize] == cf[out as usize] {
            return Some(1);
        }
        if cf[y as usize] || cf[out as usize] || dy.len() > dout.len() {
            return None;
        }
        // `y` right-aligned: ones, then dims equal to the output's, then ones.
        let at = dout.len() - dy.len();
        let first = dy.iter().position(|&d| d != 1)?;
        let last = dy.iter().rposition(|&d| d != 1)?;
        let middle = (first..=last).all(|j| dy[j] == dout[at + j]);
        middle.then(|| numel(&dout[at + last + 1..]))
    };
    if let Some(run) = spread(a, b) {
        return Some(InPlace {
            x: a,
            y: b,
            run,
            swap: false,
        });
    }
    spread(b, a).map(|run| InPlace {
        x: b,
        y: a,
        run,
        swap: true,
    })
}

/// Whether node `i` is the multiplication of a SiLU: node `i - 1` a sigmoid of one of its
/// operands into the other (`lower::elementwise::sigmoid_mul` lowers the pair together).
fn silu_product(g: &Graph, i: usize) -> bool {
    let Op::Binary { a, b, .. } = g.nodes[i].op else {
        return false;
    };
    i > 0
        && matches!(g.nodes[i - 1].op, Op::Unary { op: UnaryOp::Sigmoid, input, output }
            if (input, output) == (a, b) || (input, output) == (b, a))
}

/// Gives the outputs of binary nodes the bytes of an input they read last ([`inplace`]),
/// as XNNPACK's runtime does: `root` and `life` as [`plan`] keeps them (roots, their
/// lifetimes merged).
fn share_inplace(g: &Graph, root: &mut [usize], life: &mut [Option<(usize, usize)>]) {
    let cf = channels_first(g);
    for i in 0..g.nodes.len() {
        let Some(ip) = inplace(g, &cf, i) else {
            continue;
        };
        let Op::Binary { out, .. } = g.nodes[i].op else {
            continue;
        };
        let (r, o, ry) = (root[ip.x as usize], out as usize, root[ip.y as usize]);
        let internal = |id: usize| {
            let v = &g.values[id];
            v.constant == 0 && v.external_id.is_none()
        };
        let ok = internal(r)
            && internal(o)
            && root[o] == o
            && ry != r
            && life[r].is_some_and(|(_, last)| last == i);
        if !ok {
            continue;
        }
        for v in root.iter_mut() {
            if *v == o {
                *v = r;
            }
        }
        if let (Some((f, l)), Some((rf, rl))) = (life[o], life[r]) {
            life[r] = Some((rf.min(f), rl.max(l)));
        }
    }
}

/// Plans the arena: greedy first fit, largest values first. A reshape's output shares its
/// input's place ([`reshape_roots`]), and so does a binary node's output an input read
/// last there ([`share_inplace`]), each kept from the first write to the last read of
/// either.
pub fn plan(g: &Graph) -> Result<MemoryPlan> {
    let mut life = lifetimes(g)?;
    let mut root = reshape_roots(g)?;
    for id in 0..g.values.len() {
        let r = root[id];
        if r != id
            && let (Some((f, l)), Some((rf, rl))) = (life[id], life[r])
        {
            life[r] = Some((rf.min(f), rl.max(l)));
        }
    }
    if std::env::var_os("ETCH_NO_INPLACE").is_none() {
        share_inplace(g, &mut root, &mut life);
    }
    let mut storage = vec![Storage::Unused; g.values.len()];
    let mut internal = Vec::new();
    for (id, v) in g.values.iter().enumerate() {
        storage[id] = if v.constant != 0 {
            Storage::Constant
        } else if let Some(e) = v.external_id {
            Storage::External(e)
        } else if root[id] != id {
            continue;
        } else if let Some(l) = life[id] {
            internal.push((value_bytes(g, id)?.next_multiple_of(HOST_ALIGNMENT), l, id));
            continue;
        } else {
            Storage::Unused
        };
    }
    internal.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
    // (offset, end, first, last) of the values placed so far.
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut arena_bytes = 0usize;
    for (bytes, (first, last), id) in internal {
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= last && first <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        busy.sort_unstable();
        let mut offset = 0usize;
        for (s, e) in busy {
            if offset + bytes <= s {
                break;
            }
            offset = offset.max(e);
        }
        placed.push((offset, offset + bytes, first, last));
        arena_bytes = arena_bytes.max(offset + bytes);
        storage[id] = Storage::Arena(offset);
    }
    for id in 0..g.values.len() {
        if root[id] != id {
            storage[id] = storage[root[id]];
        }
    }
    Ok(MemoryPlan {
        storage,
        arena_bytes,
    })
}

/// Whether each node reads and writes its 4-d operands through their strides, so that
/// they may be laid out channels-first (NCHW in memory) rather than as XNNPACK's NHWC.
fn strided_operands(op: &Op) -> bool {
    match op {
        Op::Conv(_)
        | Op::Pool(_)
        | Op::ResizeBilinear { .. }
        | Op::Binary { .. }
        | Op::Elu { .. }
        | Op::LeakyRelu { .. }
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Pad { .. }
        | Op::Slice { .. } => true,
        Op::Unary { op, .. } => !matches!(
            op,
            UnaryOp::Softmax | UnaryOp::Copy | UnaryOp::Convert | UnaryOp::GlobalAvgPool
        ),
        _ => false,
    }
}

/// How the delegate lays out the image values of graphs with convolutions or pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Internal 4-d values channels-first where the nodes allow it (see
    /// [`channels_first`]): convolutions on NCHW planes.
    ChannelsFirst,
    /// Every value in XNNPACK's own NHWC layout: convolutions, depthwise convolutions and
    /// max pooling on channels-last kernels (`etch_kernels::conv::nhwc`).
    Nhwc,
}

/// 0: not set, else `Layout as u8 + 1`.
static LAYOUT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets the layout of graphs initialised from now on, overriding `ETCH_XNNPACK_LAYOUT`
/// (`nhwc` or `nchw`); `None` goes back to the default.
pub fn set_layout(layout: Option<Layout>) {
    let v = layout.map_or(0, |l| l as u8 + 1);
    LAYOUT.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// The layout for graph `g`: [`set_layout`]'s, else `ETCH_XNNPACK_LAYOUT`'s (`nhwc` or
/// `nchw`), else NHWC for graphs with depthwise convolutions (mobilenets, efficientnets:
/// their depthwise layers run at XNNPACK's speed only channels-last) and channels-first
/// for the others (resnets: etch's NCHW convolutions are as fast there on Intel's cores,
/// and the portable program's layout), except on AMD's AVX-512 cores (see
/// [`nhwc_pays`]).
pub fn layout(g: &Graph) -> Layout {
    match LAYOUT.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return Layout::ChannelsFirst,
        2 => return Layout::Nhwc,
        _ => {}
    }
    match std::env::var("ETCH_XNNPACK_LAYOUT").as_deref() {
        Ok("nhwc" | "NHWC") => return Layout::Nhwc,
        Ok("nchw" | "NCHW") => return Layout::ChannelsFirst,
        _ => {}
    }
    if nhwc_pays(g) {
        Layout::Nhwc
    } else {
        Layout::ChannelsFirst
    }
}

/// Whether graph `g` has depthwise convolutions (or the CPU is an AMD one with AVX-512)
/// and every convolution and pooling node of it has an NHWC kernel (`lower/nhwc.rs`):
/// fp32, one group or one output channel a group, max pooling; and the CPU has AVX-512F
/// ([`etch_kernels::gemm512::avx512`]), or AVX2 and FMA with enough depthwise work on
/// large planes ([`avx2_nhwc_pays`]).
fn nhwc_pays(g: &Graph) -> bool {
    use super::graph::{ConvKind, Datatype};
    let f32_value = |id: u32| {
        g.values
            .get(id as usize)
            .is_some_and(|v| v.dtype == Datatype::Fp32)
    };
    let mut depthwise = false;
    for n in &g.nodes {
        let ok = match &n.op {
            Op::Conv(c) => {
                let dw =
                    c.kind == ConvKind::Depthwise && c.group_output_channels == 1 && c.groups > 1;
                depthwise |= dw;
                (dw || (c.kind == ConvKind::Conv && c.groups == 1))
                    && f32_value(c.input)
                    && f32_value(c.output)
            }
            Op::Pool(p) => p.max && f32_value(p.input),
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    // Graphs without depthwise convolutions (resnets) too on AMD's AVX-512 cores
    // ([`etch_kernels::gemm512::amd_avx512`]), and wherever most of the multiply-adds are
    // in Winograd convolutions ([`winograd_pays`]).
    let isa_pays = (depthwise || etch_kernels::gemm512::amd_avx512())
        && (etch_kernels::gemm512::avx512()
            || etch_kernels::conv::nhwc::available() && avx2_nhwc_pays(g));
    isa_pays || etch_kernels::conv::nhwc::available() && winograd_pays(g)
}

/// Whether at least half of graph `g`'s convolution multiply-adds are in 3×3 stride-1
/// convolutions that run by Winograd's F(2×2, 3×3) on NHWC values
/// ([`etch_kernels::conv::winograd::applies`]): 1.6-2.1× the direct products, which is
/// more than the other convolutions lose in NHWC on any CPU measured (resnets).
fn winograd_pays(g: &Graph) -> bool {
    use super::graph::ConvKind;
    let (mut wino, mut all) = (0u64, 0u64);
    for n in &g.nodes {
        let Op::Conv(c) = &n.op else { continue };
        let Some(s) = c.nhwc_shape(g) else { continue };
        let taps = (s.kernel[0] * s.kernel[1]) as u64;
        let macs = (s.n * s.oh * s.ow * s.co) as u64 * c.group_input_channels as u64 * taps;
        all += macs;
        if c.kind == ConvKind::Conv && c.groups == 1 && etch_kernels::conv::winograd::applies(&s) {
            wino += macs;
        }
    }
    all > 0 && wino * 2 >= all
}

/// On AVX2 (Zen 1) the NHWC depthwise kernels beat the channel groups on large planes (no
/// packing of 112² and 56² planes through the caches), while the NHWC 1×1 convolutions of
/// small planes (a fully-connected product over 16 to 64 pixels) lose 5-40 % to the
/// channels-first tiles. Whole nets, NHWC against NCHW in one run (one and two threads,
/// `bench/cpu/2026-12-04-session26-nhwc-zen1.json`): mobilenet_v2_224 0.96 / 0.90,
/// mobilenet_v3_large_224 1.02 / 0.99, efficientnet_b0_224 1.01 / 0.99, the 128² nets
/// 1.02-1.27. So NHWC is chosen when the depthwise multiply-adds on input planes of at
/// least 56² are at least 12 % of the 1×1 ones on output planes of at most 8² (pixels
/// above one): 0.15 and 0.16 for mobilenet_v2/v3_large at 224², 0.11 for efficientnet_b0,
/// 0.03-0.04 at 128².
fn avx2_nhwc_pays(g: &Graph) -> bool {
    let plane = |id: u32| {
        g.values
            .get(id as usize)
            .filter(|v| v.dims.len() == 4)
            .map_or(0, |v| v.dims[1] as u64 * v.dims[2] as u64)
    };
    let numel = |id: u32| {
        g.values
            .get(id as usize)
            .map_or(0, |v| v.dims.iter().map(|&d| d as u64).product::<u64>())
    };
    let (mut big_dw, mut small_pw) = (0u64, 0u64);
    for n in &g.nodes {
        let Op::Conv(c) = &n.op else { continue };
        let taps = c.kernel[0] as u64 * c.kernel[1] as u64;
        let macs = numel(c.output) * c.group_input_channels as u64 * taps;
        if c.groups > 1 && plane(c.input) >= 56 * 56 {
            big_dw += macs;
        } else if c.groups == 1 && taps == 1 && (2..=64).contains(&plane(c.output)) {
            small_pw += macs;
        }
    }
    big_dw * 100 >= small_pw * 12
}

/// The values to lay out channels-first: in a graph with convolutions or pooling, every
/// internal 4-d value that only nodes with strided operands touch (global average pooling
/// may read it too). etch's convolution and pooling kernels are fastest on NCHW data, and
/// the elementwise and data-movement kernels take either layout.
pub fn channels_first(g: &Graph) -> Vec<bool> {
    let spatial = layout(g) == Layout::ChannelsFirst
        && g.nodes
            .iter()
            .any(|n| matches!(n.op, Op::Conv(_) | Op::Pool(_)));
    let mut cf: Vec<bool> = g
        .values
        .iter()
        .map(|v| spatial && v.dims.len() == 4 && v.constant == 0 && v.external_id.is_none())
        .collect();
    for n in &g.nodes {
        // Statically quantized nodes read and write XNNPACK's own layout.
        let qs8 =
            n.op.inputs()
                .iter()
                .chain(n.op.outputs().iter())
                .any(|&id| g.values[id].dtype == super::graph::Datatype::Qint8);
        let ok = strided_operands(&n.op) && !qs8;
        let reads_only = matches!(
            n.op,
            Op::Unary {
                op: UnaryOp::GlobalAvgPool,
                ..
            }
        );
        for &id in n.op.inputs().iter() {
            cf[id] &= ok || reads_only;
        }
        for &id in n.op.outputs().iter() {
            cf[id] &= ok;
        }
    }
    cf
}

#[cfg(test)]
mod tests {
    use super::super::graph::{Datatype, Graph, Node, Op, UnaryOp, XValue};
    use super::*;
    use etch_kernels::util::Shape;

    fn value(dims: &[usize], external_id: Option<u32>) -> XValue {
        XValue {
            external_id,
            ..XValue::test(Datatype::Fp32, dims)
        }
    }

    fn node(op: Op) -> Node {
        Node::test(op)
    }

    /// in -> sigmoid -> v1 -> reshape v2 -> reshape v3 -> sigmoid -> v4 -> sigmoid -> out:
    /// v1, v2 and v3 share one place, kept until v3's last read, which v4 may not take.
    #[test]
    fn reshapes_share_their_input_bytes() {
        let unary = |input, output| Op::Unary {
            op: UnaryOp::Sigmoid,
            input,
            output,
        };
        let reshape = |input, output, dims: &[usize]| Op::Reshape {
            new_shape: Shape::from_slice(dims).unwrap(),
            input,
            output,
        };
        let g = Graph {
            values: vec![
                value(&[4, 8], Some(0)),
                value(&[4, 8], None),
                value(&[32], None),
                value(&[2, 16], None),
                value(&[2, 16], None),
                value(&[2, 16], Some(1)),
            ],
            nodes: vec![
                node(unary(0, 1)),
                node(reshape(1, 2, &[32])),
                node(reshape(2, 3, &[2, 16])),
                node(unary(3, 4)),
                node(unary(4, 5)),
            ],
            input_ids: vec![0],
            output_ids: vec![5],
            constants: vec![],
            num_externs: 2,
        };
        assert_eq!(reshape_roots(&g).unwrap(), vec![0, 1, 1, 1, 4, 5]);
        let p = plan(&g).unwrap();
        let Storage::Arena(a) = p.storage[1] else {
            panic!("{:?}", p.storage)
        };
        assert_eq!(p.storage[2], Storage::Arena(a));
        assert_eq!(p.storage[3], Storage::Arena(a));
        // v4 is written while v3 (v1's bytes) is read: another place.
        assert_ne!(p.storage[4], Storage::Arena(a));
        assert_eq!(p.arena_bytes, 2 * 128usize.next_multiple_of(HOST_ALIGNMENT));
    }

    /// A sum's output takes the bytes of an input it reads last (rows of a vector; the
    /// vector as the first operand too); not those of an input read again later, nor of a
    /// delegate argument, nor a SiLU's product (lowered with its sigmoid).
    #[test]
    fn binary_outputs_take_inputs_read_last() {
        use super::super::graph::BinaryOp;
        let bin = |op, a, b, out| Op::Binary { op, a, b, out };
        let sigmoid = |input, output| Op::Unary {
            op: UnaryOp::Sigmoid,
            input,
            output,
        };
        let g = Graph {
            values: vec![
                value(&[4, 8], Some(0)),
                value(&[8], Some(1)),
                value(&[4, 8], None),
                value(&[4, 8], None),
                value(&[4, 8], None),
                value(&[4, 8], None),
                value(&[4, 8], None),
                value(&[4, 8], Some(2)),
            ],
            nodes: vec![
                // v2 = in * vec: the input is an argument.
                node(bin(BinaryOp::Mul, 0, 1, 2)),
                // v3 = vec - v2: in v2's bytes (swapped).
                node(bin(BinaryOp::Sub, 1, 2, 3)),
                // v4 = v3 + v3: one value twice.
                node(bin(BinaryOp::Add, 3, 3, 4)),
                // v5 = sigmoid(v4), v6 = v4 * v5: a SiLU.
                node(sigmoid(4, 5)),
                node(bin(BinaryOp::Mul, 4, 5, 6)),
                // out = v6 + v4: an argument.
                node(bin(BinaryOp::Add, 6, 4, 7)),
            ],
            input_ids: vec![0, 1],
            output_ids: vec![7],
            constants: vec![],
            num_externs: 3,
        };
        let cf = channels_first(&g);
        assert_eq!(
            inplace(&g, &cf, 0).map(|ip| (ip.x, ip.run, ip.swap)),
            Some((0, 1, false))
        );
        assert_eq!(
            inplace(&g, &cf, 1).map(|ip| (ip.x, ip.run, ip.swap)),
            Some((2, 1, true))
        );
        assert_eq!(inplace(&g, &cf, 2), None);
        assert_eq!(inplace(&g, &cf, 4), None);
        let p = plan(&g).unwrap();
        assert_eq!(p.storage[3], p.storage[2]);
        assert_ne!(p.storage[4], p.storage[3]);
        assert_ne!(p.storage[6], p.storage[4]);
        assert_ne!(p.storage[6], p.storage[5]);
        assert_eq!(p.storage[7], Storage::External(2));
    }

    /// in -> reshape v1 -> sigmoid v2 -> reshape out: v1 is a view of the input, and the
    /// sigmoid writes into the output's bytes; nothing is left for the arena.
    #[test]
    fn reshapes_of_delegate_arguments_share_their_bytes() {
        let g = Graph {
            values: vec![
                value(&[4, 8], Some(0)),
                value(&[32], None),
                value(&[32], None),
                value(&[4, 8], Some(1)),
            ],
            nodes: vec![
                node(Op::Reshape {
                    new_shape: Shape::from_slice(&[32]).unwrap(),
                    input: 0,
                    output: 1,
                }),
                node(Op::Unary {
                    op: UnaryOp::Sigmoid,
                    input: 1,
                    output: 2,
                }),
                node(Op::Reshape {
                    new_shape: Shape::from_slice(&[4, 8]).unwrap(),
                    input: 2,
                    output: 3,
                }),
            ],
            input_ids: vec![0],
            output_ids: vec![3],
            constants: vec![],
            num_externs: 2,
        };
        assert_eq!(reshape_roots(&g).unwrap(), vec![0, 0, 3, 3]);
        let p = plan(&g).unwrap();
        assert_eq!(
            p.storage,
            vec![
                Storage::External(0),
                Storage::External(0),
                Storage::External(1),
                Storage::External(1)
            ]
        );
        assert_eq!(p.arena_bytes, 0);
    }
}
