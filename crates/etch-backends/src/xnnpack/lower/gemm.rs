//! `XNNFullyConnected` and `XNNBatchMatrixMultiply`.

use super::super::graph::{FLAG_TRANSPOSE_WEIGHTS, Node};
use super::super::plan::Builder;
use super::{constant_as, constant_f32, repack_constant};
use etch_core::{Error, KernelContext, Result, ScalarType};
use etch_kernels::gemm512;

/// `out[..., n] = sum_k in[..., k] * filter[n, k] + bias[n]` (filter `[k, n]` with
/// `XNN_FLAG_TRANSPOSE_WEIGHTS`), then the node's clamp. The input is flattened to rows of
/// the filter's input channels, as XNNPACK does.
pub fn fully_connected(
    b: &mut Builder<'_>,
    node: &Node,
    [input, filter, output]: [u32; 3],
    bias: Option<u32>,
    flags: u32,
) -> Result<()> {
    let transposed = flags & FLAG_TRANSPOSE_WEIGHTS != 0;
    if b.value(input).dtype.is_quantized() || b.value(filter).dtype.is_quantized() {
        return super::quant::fully_connected(b, node, [input, filter, output], bias, transposed);
    }
    let (m, n, k) = fc_shape(b, [input, filter, output], transposed)?;
    let dtype = b.dtype(input)?;
    if dtype == ScalarType::Float
        && b.dtype(output)? == ScalarType::Float
        && b.is_constant(filter)
        && bias.is_none_or(|id| b.is_constant(id))
        && gemm512::available()
    {
        return packed_fully_connected(
            b,
            node,
            [input, filter, output],
            bias,
            transposed,
            [m, n, k],
        );
    }
    let w = match (transposed, b.is_constant(filter)) {
        (false, true) => constant_as(b, filter, dtype)?,
        (false, false) => b.tensor(filter)?,
        (true, true) => repack_constant(b, filter, &[n, k], Some(&[1, 0]), dtype)?,
        (true, false) => b.view(filter, &[n, k], Some(&[1, 0]))?,
    };
    let x = b.view(input, &[m, k], None)?;
    let o = b.view(output, &[m, n], None)?;
    let bias = bias_arg(b, bias, dtype)?;
    b.kernel("aten::linear.out", &[x, w, bias, o])?;
    b.clamp(o, node.clamp);
    Ok(())
}

/// A fully-connected node with constant weights ([`gemm512::available`]): the filter and bias packed
/// at init for [`gemm512::fully_connected`], the node's clamp fused.
fn packed_fully_connected(
    b: &mut Builder<'_>,
    node: &Node,
    [input, filter, output]: [u32; 3],
    bias: Option<u32>,
    transposed: bool,
    [m, n, k]: [usize; 3],
) -> Result<()> {
    let w = constant_f32(b, filter)?;
    let bias = bias.map(|id| constant_f32(b, id)).transpose()?;
    if w.len() != n * k || bias.as_ref().is_some_and(|v| v.len() != n) {
        return Err(Error::invalid_program(format!(
            "XNNFullyConnected filter of {} or bias of {:?} elements for {n} outputs of {k}",
            w.len(),
            bias.as_ref().map(Vec::len)
        )));
    }
    let packed = gemm512::pack_fc(
        n,
        k,
        |j, kk| {
            if transposed {
                w[kk * n + j]
            } else {
                w[j * k + kk]
            }
        },
        bias.as_deref(),
    )
    .ok_or_else(|| Error::invalid_program("XNNFullyConnected filter size overflows"))?;
    let bytes: Vec<u8> = packed.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = b.owned(ScalarType::Float, &[packed.len()], &bytes)?;
    let x = b.view(input, &[m, k], None)?;
    let o = b.view(output, &[m, n], None)?;
    let (lo, hi) = b.clamp_bounds(node.clamp);
    b.kernel_fn(
        "xnnpack::f32_fully_connected",
        run_packed_fully_connected,
        &[x, p, o, lo, hi],
    );
    Ok(())
}

/// Args `[x [m, k], packed filter, out [m, n], lo, hi]` (`m` may be fewer rows than
/// planned: see [`super::super::rows`]).
fn run_packed_fully_connected(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (x, p, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let (lo, hi) = (ctx.double(3)? as f32, ctx.double(4)? as f32);
    let (m, k, n) = (x.sizes()[0], x.sizes()[1], o.sizes()[1]);
    if o.sizes()[0] != m {
        return Err(Error::internal(
            "packed fully connected: rows of input and output differ",
        ));
    }
    gemm512::fully_connected(x.data()?, m, k, p.data()?, n, o.data_mut()?, lo, hi)
        .map_err(|e| Error::internal(format!("packed fully connected: {e}")))
}

/// The bias argument of a fully-connected node: the value (a constant converted to
/// `dtype`), or `None`.
pub fn bias_arg(b: &mut Builder<'_>, bias: Option<u32>, dtype: ScalarType) -> Result<u32> {
    Ok(match bias {
        Some(id) if b.is_constant(id) => constant_as(b, id, dtype)?,
        Some(id) => b.tensor(id)?,
        None => b.none(),
    })
}

/// `(m, n, k)` of a fully-connected node: its filter is `[n, k]` (`[k, n]` transposed),
/// its input `m` rows of `k` and its output `m` rows of `n`.
pub fn fc_shape(
    b: &Builder<'_>,
    [input, filter, output]: [u32; 3],
    transposed: bool,
) -> Result<(usize, usize, usize)> {
    let fd = b.value(filter).dims;
    if fd.len() != 2 {
        return Err(Error::invalid_program(format!(
            "XNNFullyConnected filter of shape {:?}; 2 dims expected",
            &fd[..]
        )));
    }
    let (n, k) = if transposed {
        (fd[1], fd[0])
    } else {
        (fd[0], fd[1])
    };
    let rows = |id: u32, c: usize, what: &str| -> Result<usize> {
        let numel = etch_core::checked_numel(&b.value(id).dims).unwrap_or(0);
        if c == 0 || !numel.is_multiple_of(c) {
            return Err(Error::invalid_program(format!(
                "XNNFullyConnected {what} {:?} is not rows of {c}",
                &b.value(id).dims[..]
            )));
        }
        Ok(numel / c)
    };
    let m = rows(input, k, "input")?;
    if rows(output, n, "output")? != m {
        return Err(Error::invalid_program(format!(
            "XNNFullyConnected output {:?} does not match input {:?}",
            &b.value(output).dims[..],
            &b.value(input).dims[..]
        )));
    }
    Ok((m, n, k))
}

/// Product of a shape's leading dims (all but the last two).
fn batch(dims: &[usize]) -> usize {
    dims[..dims.len() - 2].iter().product()
}

/// `out[..., m, n] = a[..., m, k] @ b[..., k, n]` (`b[..., n, k]` with
/// `XNN_FLAG_TRANSPOSE_B`), batch dims equal or `b`'s all 1 (broadcast).
pub fn batch_matmul(
    b: &mut Builder<'_>,
    node: &Node,
    [a, w, out]: [u32; 3],
    flags: u32,
) -> Result<()> {
    let (da, dw, dout) = (b.value(a).dims, b.value(w).dims, b.value(out).dims);
    if da.len() < 2 || dw.len() < 2 || dout.len() < 2 {
        return Err(Error::invalid_program(format!(
            "XNNBatchMatrixMultiply of {:?} and {:?}",
            &da[..],
            &dw[..]
        )));
    }
    let transposed = flags & FLAG_TRANSPOSE_WEIGHTS != 0;
    let (m, k) = (da[da.len() - 2], da[da.len() - 1]);
    let (r, c) = (dw[dw.len() - 2], dw[dw.len() - 1]);
    let (kb, n) = if transposed { (c, r) } else { (r, c) };
    let (ba, bw) = (batch(&da), batch(&dw));
    if kb != k || batch(&dout) != ba || dout[dout.len() - 2] != m || dout[dout.len() - 1] != n {
        return Err(Error::invalid_program(format!(
            "XNNBatchMatrixMultiply of {:?} and {:?} into {:?}",
            &da[..],
            &dw[..],
            &dout[..]
        )));
    }
    if (bw == ba || bw == 1) && super::bmm::applies(b, [a, w, out], m) {
        return super::bmm::packed(b, node, [a, w, out], transposed, [ba, bw, m, n, k]);
    }
    let order: Option<&[u8]> = if transposed { Some(&[0, 2, 1]) } else { None };
    if bw == ba {
        let x = b.view(a, &[ba, m, k], None)?;
        let y = b.view(w, &[ba, k, n], order)?;
        let o = b.view(out, &[ba, m, n], None)?;
        b.kernel("aten::bmm.out", &[x, y, o])?;
        b.clamp(o, node.clamp);
        return Ok(());
    }
    if bw == 1 {
        let x = b.view(a, &[ba * m, k], None)?;
        let y = b.view(w, &[k, n], if transposed { Some(&[1, 0]) } else { None })?;
        let o = b.view(out, &[ba * m, n], None)?;
        b.kernel("aten::mm.out", &[x, y, o])?;
        b.clamp(o, node.clamp);
        return Ok(());
    }
    Err(Error::not_supported(format!(
        "XNNBatchMatrixMultiply broadcasting {:?} against {:?}",
        &da[..],
        &dw[..]
    )))
}
