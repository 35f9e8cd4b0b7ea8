//! Data movement: static transpose, reshape, slice, constant pad, concatenation.

use super::super::plan::Builder;
use etch_core::{EValue, Error, Result, ScalarType};
use etch_kernels::util::Shape;

fn dims_err(what: &str, detail: String) -> Error {
    Error::invalid_program(format!("{what}: {detail}"))
}

/// `XNNStaticTranspose`: `out[i...] = in[perm...]`.
pub fn transpose(b: &mut Builder<'_>, perm: &Shape, [input, output]: [u32; 2]) -> Result<()> {
    let (di, dout) = (b.value(input).dims, b.value(output).dims);
    let mut seen = [false; super::super::graph::MAX_XNN_DIMS];
    let ok = perm.len() == di.len()
        && dout.len() == di.len()
        && perm.iter().enumerate().all(|(i, &p)| {
            p < di.len() && !std::mem::replace(&mut seen[p], true) && dout[i] == di[p]
        });
    if !ok {
        return Err(dims_err(
            "XNNStaticTranspose",
            format!(
                "permutation {:?} of {:?} into {:?}",
                &perm[..],
                &di[..],
                &dout[..]
            ),
        ));
    }
    let (x, o) = (b.tensor(input)?, b.tensor(output)?);
    let planes = perm[..] == [0, 2, 3, 1] && di[1] <= 4;
    let dtype = b.dtype(input)?;
    if planes
        && !b.is_channels_first(input)
        && !b.is_channels_first(output)
        && matches!(dtype, ScalarType::Float | ScalarType::Char)
    {
        // An NCHW image of few channels into an NHWC value.
        b.kernel_fn("XNNStaticTranspose", planes_to_pixels, &[x, o]);
        return Ok(());
    }
    let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let p = b.ints(&p);
    b.kernel("aten::permute_copy.out", &[x, p, o])
}

/// Args `[x [n, c, h, w], out [n, h, w, c]]` (both contiguous).
fn planes_to_pixels(ctx: &mut etch_core::KernelContext<'_>) -> Result<()> {
    let (x, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let &[n, c, h, w] = x.sizes() else {
        return Err(Error::internal(format!(
            "XNNStaticTranspose: input {:?}",
            x.sizes()
        )));
    };
    use etch_kernels::conv::nhwc::{planes_to_pixels_f32, planes_to_pixels_i8};
    match x.dtype() {
        ScalarType::Char => planes_to_pixels_i8(n, c, h * w, x.data()?, o.data_mut()?),
        _ => planes_to_pixels_f32(n, c, h * w, x.data()?, o.data_mut()?),
    }
    .map_err(|e| Error::internal(format!("XNNStaticTranspose: {e}")))
}

/// `XNNStaticReshape` and `XNNCopy`: the same bytes under another shape. Nothing to do
/// when the memory plan gave the output its input's bytes (reshapes between internal
/// values).
pub fn reshape(b: &mut Builder<'_>, [input, output]: [u32; 2]) -> Result<()> {
    let (x, o) = (b.tensor(input)?, b.tensor(output)?);
    if b.same_bytes(input, output) {
        return Ok(());
    }
    b.copy(x, o)
}

/// `XNNStaticSlice`: the block at `offsets` of the output's shape.
pub fn slice(b: &mut Builder<'_>, offsets: &Shape, [input, output]: [u32; 2]) -> Result<()> {
    let (di, dout) = (b.value(input).dims, b.value(output).dims);
    let ok = offsets.len() == di.len()
        && dout.len() == di.len()
        && (0..di.len()).all(|d| {
            offsets[d]
                .checked_add(dout[d])
                .is_some_and(|end| end <= di[d])
        });
    if !ok {
        return Err(dims_err(
            "XNNStaticSlice",
            format!(
                "offsets {:?} into {:?} for {:?}",
                &offsets[..],
                &di[..],
                &dout[..]
            ),
        ));
    }
    // Views first: they check that the values' sizes fit memory.
    let (x, o) = (b.tensor(input)?, b.tensor(output)?);
    // The slice is a strided view of the input's memory (in whichever layout it has).
    let EValue::Tensor(t) = b.entry(x) else {
        return Err(Error::internal("slice input is not a tensor"));
    };
    let strides: Vec<i64> = t.strides().iter().map(|&s| s as i64).collect();
    let offset = (0..di.len()).fold(0i64, |acc, d| {
        acc.saturating_add((offsets[d] as i64).saturating_mul(strides[d]))
    });
    let sizes: Vec<i64> = dout.iter().map(|&s| s as i64).collect();
    let (sz, st, off) = (b.ints(&sizes), b.ints(&strides), b.int(offset));
    b.kernel("aten::as_strided_copy.out", &[x, sz, st, off, o])
}

/// `XNNStaticConstantPad`.
pub fn pad(
    b: &mut Builder<'_>,
    pre: &Shape,
    post: &Shape,
    value: f32,
    [input, output]: [u32; 2],
) -> Result<()> {
    let (di, dout) = (b.value(input).dims, b.value(output).dims);
    let ok = pre.len() == di.len()
        && post.len() == di.len()
        && dout.len() == di.len()
        && (0..di.len()).all(|d| {
            di[d]
                .checked_add(pre[d])
                .and_then(|v| v.checked_add(post[d]))
                == Some(dout[d])
        });
    if !ok {
        return Err(dims_err(
            "XNNStaticConstantPad",
            format!(
                "paddings {:?} / {:?} of {:?} into {:?}",
                &pre[..],
                &post[..],
                &di[..],
                &dout[..]
            ),
        ));
    }
    // PyTorch's pad list runs from the last dim: [pre, post] per dim.
    let mut p = Vec::with_capacity(2 * di.len());
    for d in (0..di.len()).rev() {
        p.push(pre[d] as i64);
        p.push(post[d] as i64);
    }
    let (x, o) = (b.tensor(input)?, b.tensor(output)?);
    let (p, v) = (b.ints(&p), b.double(value as f64));
    b.kernel("aten::constant_pad_nd.out", &[x, p, v, o])
}

/// `XNNConcatenate2`..`5` along `axis`.
pub fn concat(b: &mut Builder<'_>, axis: u32, inputs: &Shape, output: u32) -> Result<()> {
    let rank = b.value(output).dims.len();
    if axis as usize >= rank {
        return Err(dims_err(
            "XNNConcatenate",
            format!("axis {axis} of a {rank}-d output"),
        ));
    }
    let dout = b.value(output).dims;
    let a = axis as usize;
    let mut total = 0usize;
    for &id in inputs.iter() {
        let d = &b.value(id as u32).dims;
        let same = d.len() == rank && (0..rank).all(|i| i == a || d[i] == dout[i]);
        if !same {
            return Err(dims_err(
                "XNNConcatenate",
                format!(
                    "input {:?} does not fit output {:?} along axis {a}",
                    &d[..],
                    &dout[..]
                ),
            ));
        }
        total = total.saturating_add(d[a]);
    }
    if total != dout[a] {
        return Err(dims_err(
            "XNNConcatenate",
            format!(
                "inputs add up to {total} along axis {a}; the output has {}",
                dout[a]
            ),
        ));
    }
    let mut items = Vec::with_capacity(inputs.len());
    for &id in inputs.iter() {
        items.push(b.tensor(id as u32)?);
    }
    let o = b.tensor(output)?;
    let (list, dim) = (b.tensors(&items), b.int(axis as i64));
    b.kernel("aten::cat.out", &[list, dim, o])
}
