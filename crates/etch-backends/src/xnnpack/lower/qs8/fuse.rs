//! Graph rewrites of statically quantized chains, before memory is planned, as XNNPACK's
//! subgraph makes them: clamps folded into the nodes writing their inputs, and chains of
//! fp32 unary nodes between qint8 values run as 256-entry tables ([`Op::Lut`]).

use super::super::super::graph::{ConvKind, Datatype, Graph, Node, Op, Quant, UnaryOp};
use super::super::super::plan::Builder;
use super::super::super::qs8;
use etch_core::{Error, Result, ScalarType};

/// Folds each clamp of a qint8 value that only the clamp reads into the node writing that
/// value, as XNNPACK's subgraph does: the producer writes the clamp's output, within both
/// ranges, and the clamp goes. Runs on the graph before memory is planned (the clamp's
/// output is then written by the producer, so its place must be live there).
pub fn fuse_clamps(g: &mut Graph) {
    let reads = reads(g);
    let mut i = 0;
    while i + 1 < g.nodes.len() {
        if let Some(fused) = fused_clamp(g, &reads, i) {
            g.nodes[i] = fused;
            g.nodes.remove(i + 1);
        }
        i += 1;
    }
}

/// How many node inputs read each value (a fusion keeps the counts of the values left
/// outside it).
fn reads(g: &Graph) -> Vec<usize> {
    let mut r = vec![0; g.values.len()];
    for n in &g.nodes {
        for &id in n.op.inputs().iter() {
            r[id] += 1;
        }
    }
    r
}

/// Whether value `id` is read by one node input alone and is no argument of the delegate.
fn read_once(g: &Graph, reads: &[usize], id: u32) -> bool {
    let v = &g.values[id as usize];
    reads[id as usize] == 1 && v.external_id.is_none() && !g.output_ids.contains(&id)
}

/// Node `i` writing node `i + 1`'s output within both ranges, where node `i + 1` is a
/// clamp (of the same quantization) of node `i`'s qint8 output, which nothing else reads.
fn fused_clamp(g: &Graph, reads: &[usize], i: usize) -> Option<Node> {
    let (node, next) = (&g.nodes[i], &g.nodes[i + 1]);
    let Op::Unary {
        op: UnaryOp::Clamp,
        input: mid,
        output,
    } = next.op
    else {
        return None;
    };
    let (v, o) = (g.values.get(mid as usize)?, g.values.get(output as usize)?);
    let same = v.dtype == Datatype::Qint8
        && o.dtype == Datatype::Qint8
        && matches!(v.quant, Some(Quant::PerTensor { .. }))
        && v.quant == o.quant
        && v.dims == o.dims;
    if !same || !read_once(g, reads, mid) {
        return None;
    }
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
    if *slot != mid {
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
    let reads = reads(g);
    let mut i = 0;
    while i < g.nodes.len() {
        if let Some(end) = lut_chain(g, &reads, i) {
            let chain: Vec<Node> = g.nodes.drain(i..=end).collect();
            let (input, output) = (chain[0].op.inputs()[0], chain[end - i].op.outputs()[0]);
            // Named (and profiled) as the chain's first node after the convert.
            let first = &chain[1.min(chain.len() - 1)];
            let (name, debug_handle) = (first.name, first.debug_handle);
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
                    debug_handle,
                },
            );
        }
        i += 1;
    }
}

/// The last node of a LUT chain starting at node `i` (see [`fuse_luts`]).
fn lut_chain(g: &Graph, reads: &[usize], i: usize) -> Option<usize> {
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
        if !read_once(g, reads, v) || g.values[v as usize].dims != dims {
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
pub(super) fn lut(
    b: &mut Builder<'_>,
    node: &Node,
    input: u32,
    output: u32,
    chain: &[Node],
) -> Result<()> {
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
    use super::super::super::graph::{FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT, XValue};
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
    let mut plan = super::super::super::plan_graph(&mini, &[], None, None)?;
    let mut ramp: [i8; 256] = std::array::from_fn(|k| k as u8 as i8);
    let mut table = [0i8; 256];
    run_on(&mut plan, &mut ramp, &mut table)?;
    Ok(table)
}

/// Runs a plan of one int8 `[256]` input and one int8 `[256]` output.
fn run_on(
    plan: &mut super::super::super::plan::Plan,
    x: &mut [i8; 256],
    o: &mut [i8; 256],
) -> Result<()> {
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
