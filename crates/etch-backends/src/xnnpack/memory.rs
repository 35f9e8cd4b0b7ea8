//! Memory for the graph's internal values: one arena, planned once at init from the
//! values' lifetimes (the node that writes a value to the last node that reads it).
//! Values whose lifetimes overlap never share bytes, so a node's output never overlaps
//! one of its inputs.

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
        D::Fp32 | D::Int32 => numel.and_then(|n| n.checked_mul(4)),
        D::Fp16 | D::Bf16 => numel.and_then(|n| n.checked_mul(2)),
        D::Qcint4 | D::Qbint4 => match v.dims.last() {
            Some(&last) if last > 0 => numel.map(|n| n / last * last.div_ceil(2)),
            _ => numel,
        },
        D::Qdint8 | D::Qcint8 | D::Other(_) => numel,
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

/// Plans the arena: greedy first fit, largest values first.
pub fn plan(g: &Graph) -> Result<MemoryPlan> {
    let life = lifetimes(g)?;
    let mut storage = vec![Storage::Unused; g.values.len()];
    let mut internal = Vec::new();
    for (id, v) in g.values.iter().enumerate() {
        storage[id] = if v.constant != 0 {
            Storage::Constant
        } else if let Some(e) = v.external_id {
            Storage::External(e)
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

/// The values to lay out channels-first: in a graph with convolutions or pooling, every
/// internal 4-d value that only nodes with strided operands touch (global average pooling
/// may read it too). etch's convolution and pooling kernels are fastest on NCHW data, and
/// the elementwise and data-movement kernels take either layout.
pub fn channels_first(g: &Graph) -> Vec<bool> {
    let spatial = g
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::Conv(_) | Op::Pool(_)));
    let mut cf: Vec<bool> = g
        .values
        .iter()
        .map(|v| spatial && v.dims.len() == 4 && v.constant == 0 && v.external_id.is_none())
        .collect();
    for n in &g.nodes {
        let ok = strided_operands(&n.op);
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
