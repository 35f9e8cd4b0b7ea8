//! Dynamically quantized nodes (the `8da4w` / `8da8w` recipes): `XNNConvert` of fp32 to
//! qdint8 (per-row dynamic quantization) and `XNNFullyConnected` of a qdint8 input with a
//! constant qcint8, qcint4 (per-channel) or qbint4 (per-block) filter. Filters are
//! unpacked at init into int8 `[n, k]` with f32 scales and the sums the kernel needs
//! (see [`super::super::qd8`]).

use super::super::graph::{Datatype, Graph, Node, Op, Quant, Scales, UnaryOp};
use super::super::plan::Builder;
use super::super::qd8;
use super::gemm::{bias_arg, fc_shape};
use etch_core::{Error, Result, ScalarType, bf16};

/// Rows of a dynamically quantized value: the product of its batch dims.
fn rows(b: &Builder<'_>, id: u32) -> Result<usize> {
    let v = b.value(id);
    let Some(Quant::PerTokenDynamic { num_nonbatch_dims }) = v.quant else {
        return Err(Error::invalid_program(format!(
            "qdint8 value {id} has {}; PerTokenDynamicQuant expected",
            v.quant
                .as_ref()
                .map_or("no quantization parameters", Quant::name)
        )));
    };
    let nb = (num_nonbatch_dims as usize).min(v.dims.len());
    Ok(v.dims[..v.dims.len() - nb].iter().product())
}

/// `XNNConvert` of an fp32 value to a qdint8 value.
pub fn convert(b: &mut Builder<'_>, [input, output]: [u32; 2]) -> Result<()> {
    let (i, o) = (b.value(input), b.value(output));
    if i.dtype != Datatype::Fp32 || i.dims != o.dims {
        return Err(Error::not_supported(format!(
            "XNNConvert of {} {:?} to qdint8 {:?} (etch quantizes fp32 values of the same shape)",
            i.dtype.name(),
            &i.dims[..],
            &o.dims[..]
        )));
    }
    if o.external_id.is_some() {
        return Err(Error::not_supported(
            "a qdint8 value as a delegate argument",
        ));
    }
    let rows = rows(b, output)?;
    let x = b.tensor(input)?;
    let q = b.tensor(output)?;
    let p = b.row_params(output, rows)?;
    b.kernel_fn("xnnpack::qd8_quantize", qd8::quantize_rows, &[x, q, p]);
    Ok(())
}

/// Drops each fp32 -> qdint8 convert of a value that an earlier convert already quantizes
/// the same way, and points the fully-connected nodes reading its output at the earlier
/// one's (values are written once, so the two outputs are equal). An attention's q, k and
/// v projections each convert the same normalized rows, as do an MLP's gate and up
/// projections: XNNPACK quantizes inside each fully-connected operator, etch once. Runs on
/// the graph before memory is planned.
pub fn dedupe_converts(g: &mut Graph) {
    let dynamic = |id: u32| {
        let v = &g.values[id as usize];
        let single = v.external_id.is_none() && !g.output_ids.contains(&id);
        (v.dtype == Datatype::Qdint8 && single).then(|| (v.dims, v.quant.clone()))
    };
    // (input, output dims and quantization) -> the first output.
    let mut first = Vec::new();
    let mut renamed: Vec<(u32, u32)> = Vec::new();
    let mut keep = vec![true; g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        let Op::Unary {
            op: UnaryOp::Convert,
            input,
            output,
        } = node.op
        else {
            continue;
        };
        let Some(key) = dynamic(output) else { continue };
        match first.iter().find(|(x, k, _)| *x == input && *k == key) {
            Some(&(_, _, to)) => {
                renamed.push((output, to));
                keep[i] = false;
            }
            None => first.push((input, key, output)),
        }
    }
    if renamed.is_empty() {
        return;
    }
    let mut keep = keep.into_iter();
    g.nodes.retain(|_| keep.next().unwrap_or(true));
    for node in &mut g.nodes {
        if let Op::FullyConnected { input, .. } = &mut node.op
            && let Some(&(_, to)) = renamed.iter().find(|(from, _)| from == input)
        {
            *input = to;
        }
    }
}

/// The filter's scales as f32, `count` of them (bf16 in constant data for per-block
/// scales, f32 otherwise; inline scales are f32).
pub(super) fn scales(
    b: &Builder<'_>,
    id: u32,
    s: &Scales,
    count: usize,
    is_bf16: bool,
) -> Result<Vec<f32>> {
    let v: Vec<f32> = match s {
        // XNNPACK takes per-block scales as bf16: executorch truncates inline f32 ones.
        Scales::Inline(v) if is_bf16 => v
            .iter()
            .map(|x| f32::from_bits(x.to_bits() & 0xffff_0000))
            .collect(),
        Scales::Inline(v) => v.clone(),
        Scales::Constant { .. } => {
            let bytes = b.scale_bytes(id)?;
            if is_bf16 {
                let c = bytes.chunks_exact(2);
                c.map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect()
            } else {
                let c = bytes.chunks_exact(4);
                c.map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            }
        }
    };
    if v.len() < count {
        return Err(Error::invalid_program(format!(
            "filter value {id} has {} scales; {count} expected",
            v.len()
        )));
    }
    Ok(v[..count].to_vec())
}

/// The filter `[n, k]` as int8 (4-bit values unpacked, low nibble first, less their zero
/// point 8), its scales `[n, blocks]` and the number of blocks.
fn unpack_filter(
    b: &Builder<'_>,
    id: u32,
    n: usize,
    k: usize,
) -> Result<(Vec<i8>, Vec<f32>, usize)> {
    let v = b.value(id);
    let (group, s) = match (&v.quant, v.dtype) {
        (
            Some(Quant::PerChannel {
                channel_dim: 0,
                scales,
            }),
            Datatype::Qcint8 | Datatype::Qcint4,
        ) => (k, scales),
        (
            Some(Quant::PerChannelGroup {
                channel_dim: 0,
                group_size,
                scales,
            }),
            Datatype::Qbint4,
        ) if (*group_size as usize).is_multiple_of(16)
            && k.is_multiple_of(*group_size as usize) =>
        {
            (*group_size as usize, scales)
        }
        (q, d) => {
            return Err(Error::not_supported(format!(
                "XNNFullyConnected filter {id} of {} with {} {:?}",
                d.name(),
                q.as_ref().map_or("no quantization parameters", Quant::name),
                q
            )));
        }
    };
    let blocks = k / group.max(1);
    let scales = scales(b, id, s, n * blocks, v.dtype == Datatype::Qbint4)?;
    let bytes = b.constant_bytes(id)?;
    let w: Vec<i8> = if v.dtype.is_int4() {
        let row = k.div_ceil(2);
        (0..n * k)
            .map(|i| {
                let byte = bytes[i / k * row + i % k / 2];
                let nibble = if (i % k).is_multiple_of(2) {
                    byte & 15
                } else {
                    byte >> 4
                };
                nibble as i8 - 8
            })
            .collect()
    } else {
        bytes.iter().map(|&x| x as i8).collect()
    };
    Ok((w, scales, blocks))
}

/// `XNNFullyConnected` of a qdint8 input: `out = dequantized(input) @ filter^T + bias`,
/// with XNNPACK's integer products and f32 scaling, then the node's clamp.
pub fn fully_connected(
    b: &mut Builder<'_>,
    node: &Node,
    [input, filter, output]: [u32; 3],
    bias: Option<u32>,
    transposed: bool,
) -> Result<()> {
    let (din, dw) = (b.value(input).dtype, b.value(filter).dtype);
    if din != Datatype::Qdint8 || !dw.is_quantized() {
        return Err(Error::not_supported(format!(
            "XNNFullyConnected of a {} input with a {} filter",
            din.name(),
            dw.name()
        )));
    }
    if transposed || !b.is_constant(filter) || b.is_constant(input) {
        return Err(Error::not_supported(
            "a dynamically quantized XNNFullyConnected with transposed, non-constant filters or a constant input",
        ));
    }
    let (m, n, k) = fc_shape(b, [input, filter, output], false)?;
    if rows(b, input)? != m || b.value(output).dtype != Datatype::Fp32 {
        return Err(Error::not_supported(format!(
            "XNNFullyConnected of qdint8 {:?} rows of {k} into {}",
            &b.value(input).dims[..],
            b.value(output).dtype.name()
        )));
    }
    let (w, scales, blocks) = unpack_filter(b, filter, n, k)?;
    let sums = if b.value(filter).dtype == Datatype::Qbint4 {
        let ksum = block_sums(&w, &scales, k, k / blocks);
        b.owned(ScalarType::Float, &[n], &le_bytes(&ksum))?
    } else {
        let wsum: Vec<i32> = w
            .chunks(k)
            .map(|r| r.iter().map(|&x| x as i32).sum())
            .collect();
        let bytes: Vec<u8> = wsum.iter().flat_map(|v| v.to_le_bytes()).collect();
        b.owned(ScalarType::Int, &[n], &bytes)?
    };
    let packing = qd8::packing_for(k, k / blocks, b.value(filter).dtype.is_int4());
    let packed = packing != qd8::Packing::Rows;
    let wt = if packed {
        // Panels of 4 input channels a 64-byte step, 8 with nibbles.
        let step = if packing == qd8::Packing::Nibbles {
            8
        } else {
            4
        };
        b.owned(
            ScalarType::Char,
            &[n.div_ceil(16), k / step, 64],
            &qd8::pack_panels(&w, n, k, packing),
        )?
    } else {
        b.owned(
            ScalarType::Char,
            &[n, k],
            &w.iter().map(|&x| x as u8).collect::<Vec<_>>(),
        )?
    };
    let st = if packed {
        let packed = qd8::pack_scales(&scales, n, blocks);
        b.owned(
            ScalarType::Float,
            &[packed.len() / blocks, blocks],
            &le_bytes(&packed),
        )?
    } else {
        b.owned(ScalarType::Float, &[n, blocks], &le_bytes(&scales))?
    };
    let bias = bias_arg(b, bias, ScalarType::Float)?;
    let x = b.view(input, &[m, k], None)?;
    let p = b.row_params(input, m)?;
    let o = b.view(output, &[m, n], None)?;
    let (name, kernel): (_, etch_core::KernelFn) = match packing {
        qd8::Packing::Maddubs => (
            "xnnpack::qd8_fully_connected_maddubs",
            qd8::fully_connected_maddubs,
        ),
        qd8::Packing::Nibbles => (
            "xnnpack::qd8_fully_connected_nibbles",
            qd8::fully_connected_nibbles,
        ),
        _ => ("xnnpack::qd8_fully_connected", qd8::fully_connected),
    };
    b.kernel_fn(name, kernel, &[x, p, wt, st, sums, bias, o]);
    b.clamp(o, node.clamp);
    Ok(())
}

/// Per-block filters: `ksum[n] = -sum(sum(w[n, c]) * s[n, block(c)])` over chunks `c` of
/// 16 input channels, in f32 (XNNPACK's packing).
fn block_sums(w: &[i8], scales: &[f32], k: usize, group: usize) -> Vec<f32> {
    const CHUNK: usize = 16;
    let blocks = k / group;
    w.chunks(k)
        .zip(scales.chunks(blocks))
        .map(|(row, s)| {
            let mut acc = 0.0f32;
            for (i, c) in row.chunks(CHUNK).enumerate() {
                let sum: i32 = c.iter().map(|&x| x as i32).sum();
                acc -= sum as f32 * s[i * CHUNK / group];
            }
            acc
        })
        .collect()
}

/// The little-endian bytes of `v`.
pub(super) fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::super::super::graph::{Datatype, Graph, Node, Op, Quant, UnaryOp, XValue};

    fn value(dtype: Datatype, dims: &[usize], quant: Option<Quant>) -> XValue {
        XValue {
            quant,
            ..XValue::test(dtype, dims)
        }
    }

    fn node(op: Op) -> Node {
        Node::test(op)
    }

    /// Two converts of one value (as an attention's q and k projections have) become one,
    /// and both fully-connected nodes read its output; a convert of another value, or with
    /// other parameters, stays.
    #[test]
    fn converts_of_one_value_are_merged() {
        let dynamic = |n| {
            Some(Quant::PerTokenDynamic {
                num_nonbatch_dims: n,
            })
        };
        let convert = |input, output| Op::Unary {
            op: UnaryOp::Convert,
            input,
            output,
        };
        let fc = |input, output| Op::FullyConnected {
            input,
            filter: 9,
            bias: None,
            output,
            flags: 0,
        };
        let mut g = Graph {
            values: vec![
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Qdint8, &[4, 8], dynamic(1)),
                value(Datatype::Qdint8, &[4, 8], dynamic(1)),
                value(Datatype::Qdint8, &[4, 8], dynamic(2)),
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Fp32, &[4, 8], None),
                value(Datatype::Qcint8, &[8, 8], None),
            ],
            nodes: vec![
                node(convert(0, 1)),
                node(fc(1, 4)),
                node(convert(0, 2)),
                node(fc(2, 5)),
                node(convert(0, 3)),
                node(fc(3, 6)),
            ],
            input_ids: vec![],
            output_ids: vec![],
            constants: vec![],
            num_externs: 0,
        };
        super::dedupe_converts(&mut g);
        let ops: Vec<(Vec<usize>, Vec<usize>)> = g
            .nodes
            .iter()
            .map(|n| (n.op.inputs().to_vec(), n.op.outputs().to_vec()))
            .collect();
        assert_eq!(
            ops,
            vec![
                (vec![0], vec![1]),
                (vec![1, 9], vec![4]),
                (vec![1, 9], vec![5]),
                (vec![0], vec![3]),
                (vec![3, 9], vec![6]),
            ]
        );
    }
}
