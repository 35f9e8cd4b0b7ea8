//! Statically quantized convolutions, fully-connected nodes and max pooling: filters and
//! biases read at init, XNNPACK's requantization scales, the window's NHWC shape checked
//! against XNNPACK's output size.

use super::super::super::graph::{
    ConvKind, ConvParams, Datatype, FLAG_TRANSPOSE_WEIGHTS, Node, PoolParams, Quant,
};
use super::super::super::plan::Builder;
use super::super::super::qs8::{self, conv::Geometry, pool};
use super::super::quant;
use super::{per_tensor, same_quant};
use etch_core::{Error, Result, ScalarType};
use etch_kernels::conv::nhwc::NhwcShape;

/// The per-channel scales of constant qcint8 filter `id` along `channel_dim`, `count`; or
/// a per-tensor qint8 filter's scale (zero point 0) for every channel, as XNNPACK's qs8
/// operators replicate it (`init_requantization_scale_qs8`).
fn filter_scales(b: &Builder<'_>, id: u32, channel_dim: i32, count: usize) -> Result<Vec<f32>> {
    let v = b.value(id);
    match (&v.quant, v.dtype) {
        (
            Some(Quant::PerTensor {
                scale,
                zero_point: 0,
            }),
            Datatype::Qint8,
        ) if b.is_constant(id) => Ok(vec![*scale; count]),
        (
            Some(Quant::PerChannel {
                channel_dim: d,
                scales,
            }),
            Datatype::Qcint8,
        ) if *d == channel_dim && b.is_constant(id) => quant::scales(b, id, scales, count, false),
        (q, d) => Err(Error::not_supported(format!(
            "filter {id} of {} with {} along dim {:?}: etch runs constant qcint8 filters with \
             per-channel scales along dim {channel_dim}, and qint8 ones with one scale and a \
             zero point of 0",
            d.name(),
            q.as_ref().map_or("no quantization parameters", Quant::name),
            q.as_ref().and_then(|q| match q {
                Quant::PerChannel { channel_dim, .. } => Some(*channel_dim),
                _ => None,
            })
        ))),
    }
}

/// The bias as i32 (a constant qcint32 value of `count`, or zeros).
fn bias_values(b: &Builder<'_>, bias: Option<u32>, count: usize) -> Result<Vec<i32>> {
    let Some(id) = bias else {
        return Ok(vec![0; count]);
    };
    let v = b.value(id);
    if !matches!(
        v.dtype,
        Datatype::Qcint32 | Datatype::Qint32 | Datatype::Int32
    ) || !b.is_constant(id)
    {
        return Err(Error::not_supported(format!(
            "bias {id} of {}: etch runs constant qcint32 and qint32 biases of statically \
             quantized nodes",
            v.dtype.name()
        )));
    }
    let bytes = b.constant_bytes(id)?;
    if bytes.len() != count * 4 {
        return Err(Error::invalid_program(format!(
            "bias {id} has {} bytes; {count} int32 expected",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Requantization scales `x_scale * w_scale[n] / out_scale` (XNNPACK's order).
fn requant_scales(x: f32, w: &[f32], out: f32) -> Result<Vec<f32>> {
    let s: Vec<f32> = w.iter().map(|&w| x * w / out).collect();
    if let Some(bad) = s.iter().find(|s| !(**s >= 0.0 && **s < 256.0)) {
        return Err(Error::not_supported(format!(
            "a requantization scale of {bad} (XNNPACK takes [0, 256))"
        )));
    }
    Ok(s)
}

/// Pushes a convolution step of `kind` (dense, depthwise or transposed: with
/// [`qs8::conv::transposed`]): filters `w` (i8 bytes in the kernel's layout), biases,
/// filter scales and the geometry.
#[allow(clippy::too_many_arguments)]
fn conv_step(
    b: &mut Builder<'_>,
    node: &Node,
    g: &Geometry,
    [x, out]: [u32; 2],
    w: Vec<u8>,
    bias: &[i32],
    w_scales: &[f32],
    kind: ConvKind,
) -> Result<()> {
    let (qx, qo) = (per_tensor(b, x)?, per_tensor(b, out)?);
    let scales = requant_scales(qx.0, w_scales, qo.0)?;
    let r = qs8::output_range(qo.0, qo.1, node.clamp)?;
    let n = g.shape.co;
    #[cfg(target_arch = "x86_64")]
    if kind == ConvKind::Conv && g.groups == 1 && g.gic > 0 && qs8::vnni::available() {
        return conv_vnni(b, g, [x, out], &w, bias, &scales, &r);
    }
    let wt = b.owned(ScalarType::Char, &[w.len()], &w)?;
    let bt = b.owned(ScalarType::Int, &[n], &i32_bytes(bias))?;
    let st = b.owned(ScalarType::Float, &[n], &quant::le_bytes(&scales))?;
    let s = &g.shape;
    let tx = b.view(x, &[s.n * s.h * s.w * s.c], None)?;
    let to = b.view(out, &[s.n * s.oh * s.ow * s.co], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    if kind == ConvKind::Depthwise {
        // The AVX-512 pixel's operands: biases with the input zero point folded in, and
        // the zero points its taps in the padding read.
        let taps = s.kernel[0] * s.kernel[1];
        let w: Vec<i8> = w.iter().map(|&v| v as i8).collect();
        let folded = qs8::depthwise_folded_bias(&w, taps, bias, g.x_zp);
        let ft = b.owned(ScalarType::Int, &[n], &i32_bytes(&folded))?;
        let zps = b.owned(ScalarType::Char, &[s.c], &vec![g.x_zp as u8; s.c])?;
        let args = [tx, wt, bt, st, geo, range, to, ft, zps];
        b.kernel_fn("xnnpack::qs8_depthwise", qs8::conv::depthwise, &args);
        return Ok(());
    }
    let (name, f): (_, etch_core::KernelFn) = match kind {
        ConvKind::Transpose => ("xnnpack::qs8_conv_transpose", qs8::conv::transposed),
        _ => ("xnnpack::qs8_conv", qs8::conv::conv),
    };
    b.kernel_fn(name, f, &[tx, wt, bt, st, geo, range, to]);
    Ok(())
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// [`conv_step`] on AVX-512 VNNI ([`qs8::vnni`]): the filters `[n, k]` padded to the
/// panels' depth and packed, the input zero point folded into the biases, scratch for the
/// im2col rows.
#[cfg(target_arch = "x86_64")]
fn conv_vnni(
    b: &mut Builder<'_>,
    g: &Geometry,
    [x, out]: [u32; 2],
    w: &[u8],
    bias: &[i32],
    scales: &[f32],
    r: &qs8::Requant,
) -> Result<()> {
    let s = &g.shape;
    let (n, k) = (s.co, s.kernel[0] * s.kernel[1] * s.c);
    let k4 = qs8::vnni::depth(g);
    let w: Vec<i8> = w.iter().map(|&v| v as i8).collect();
    let mut padded = vec![0i8; n * k4];
    for (dst, src) in padded.chunks_exact_mut(k4).zip(w.chunks_exact(k.max(1))) {
        dst[..k].copy_from_slice(src);
    }
    let panels = qs8::vnni::pack(g, &padded, n, k4);
    let folded = qs8::vnni::folded_bias(g, &w, k, bias);
    let wt = b.owned(ScalarType::Char, &[panels.len()], &panels)?;
    let bt = b.owned(ScalarType::Int, &[n], &i32_bytes(&folded))?;
    let st = b.owned(ScalarType::Float, &[n], &quant::le_bytes(scales))?;
    let scratch = b.scratch(
        ScalarType::Char,
        &[qs8::vnni::SLOTS * qs8::vnni::scratch_per_task(g)],
    )?;
    let tx = b.view(x, &[s.n * s.h * s.w * s.c], None)?;
    let to = b.view(out, &[s.n * s.oh * s.ow * s.co], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    b.kernel_fn(
        "xnnpack::qs8_conv_vnni",
        qs8::vnni::conv_vnni,
        &[tx, wt, bt, st, geo, range, scratch, to],
    );
    Ok(())
}

/// An NHWC value's dims.
fn nhwc(b: &Builder<'_>, id: u32, what: &str) -> Result<[usize; 4]> {
    match b.value(id).dims[..] {
        [n, h, w, c] => Ok([n, h, w, c]),
        ref d => Err(Error::invalid_program(format!(
            "{what} {d:?} is not a 4-d NHWC tensor"
        ))),
    }
}

/// The output size of a window of `k` taps dilated by `d` at stride `s` over `size` with
/// `pad` padding in all.
fn out_size(size: usize, pad: usize, k: usize, s: usize, d: usize) -> Option<usize> {
    let span = d * (k.max(1) - 1) + 1;
    (size + pad).checked_sub(span).map(|v| v / s.max(1) + 1)
}

/// The NHWC shape of a window (`[kernel, stride, dilation]`, padding top, right, bottom,
/// left) over `input` into `output`, checked: one batch, XNNPACK's output size, sizes
/// that do not overflow.
fn window(
    b: &Builder<'_>,
    node: &Node,
    [input, output]: [u32; 2],
    [kernel, stride, dil]: [[u32; 2]; 3],
    padding: [u32; 4],
) -> Result<NhwcShape> {
    let [n, h, w, c] = nhwc(b, input, "input")?;
    let [on, oh, ow, co] = nhwc(b, output, "output")?;
    let [top, right, bottom, left] = padding.map(|v| v as usize);
    let shape = NhwcShape {
        n,
        h,
        w,
        c,
        oh,
        ow,
        co,
        kernel: kernel.map(|v| v as usize),
        stride: stride.map(|v| v.max(1) as usize),
        pad: [top, left],
        dil: dil.map(|v| v.max(1) as usize),
    };
    if on != n || !fits(&shape, [top + bottom, left + right]) {
        return Err(Error::invalid_program(format!(
            "{}: input {:?} and output {:?} do not fit a window of {kernel:?}, stride \
             {stride:?}, dilation {dil:?} and padding {padding:?}",
            node.name,
            [n, h, w, c],
            [on, oh, ow, co]
        )));
    }
    Ok(shape)
}

/// Whether `shape`'s output is XNNPACK's for its input with `pad` padding in all (rows,
/// columns), and its sizes do not overflow.
fn fits(shape: &NhwcShape, pad: [usize; 2]) -> bool {
    let s = shape;
    s.valid()
        && out_size(s.h, pad[0], s.kernel[0], s.stride[0], s.dil[0]) == Some(s.oh)
        && out_size(s.w, pad[1], s.kernel[1], s.stride[1], s.dil[1]) == Some(s.ow)
}

pub(super) fn convolution(b: &mut Builder<'_>, node: &Node, c: &ConvParams) -> Result<()> {
    let win = [c.kernel, c.stride, c.dilation];
    let shape = if c.kind == ConvKind::Transpose {
        deconvolution_window(b, node, c)?
    } else {
        window(b, node, [c.input, c.output], win, c.padding)?
    };
    let (ci, oc, [kh, kw]) = (shape.c, shape.co, shape.kernel);
    let g = Geometry {
        shape,
        groups: c.groups as usize,
        gic: c.group_input_channels as usize,
        x_zp: per_tensor(b, c.input)?.1,
    };
    let goc = c.group_output_channels as usize;
    if ci != g.groups * g.gic || oc != g.groups * goc {
        return Err(Error::invalid_program(format!(
            "{}: {ci} input and {oc} output channels do not fit {c:?}",
            node.name
        )));
    }
    let fd = b.value(c.filter).dims;
    let depthwise = c.kind == ConvKind::Depthwise;
    let want: [usize; 4] = if depthwise {
        [1, kh, kw, oc]
    } else {
        [oc, kh, kw, g.gic]
    };
    if fd[..] != want[..] || (depthwise && (g.gic != 1 || g.groups != ci)) {
        return Err(Error::invalid_program(format!(
            "{}: filter {:?} does not match the node's geometry {want:?}",
            node.name,
            &fd[..]
        )));
    }
    let scales = filter_scales(b, c.filter, if depthwise { 3 } else { 0 }, oc)?;
    let bias = bias_values(b, c.bias, oc)?;
    let w = b.constant_bytes(c.filter)?.to_vec();
    conv_step(b, node, &g, [c.input, c.output], w, &bias, &scales, c.kind)
}

/// The NHWC shape of a transposed convolution, checked as [`window`] does, against
/// XNNPACK's output size: `stride · (size - 1) + adjustment + dilation · (kernel - 1) + 1 -
/// padding`. (The shape's padding is the top and left padding, as for a convolution.)
fn deconvolution_window(b: &Builder<'_>, node: &Node, c: &ConvParams) -> Result<NhwcShape> {
    let [n, h, w, ci] = nhwc(b, c.input, "input")?;
    let [on, oh, ow, co] = nhwc(b, c.output, "output")?;
    let [top, right, bottom, left] = c.padding.map(|v| v as usize);
    let shape = NhwcShape {
        n,
        h,
        w,
        c: ci,
        oh,
        ow,
        co,
        kernel: c.kernel.map(|v| v as usize),
        stride: c.stride.map(|v| v.max(1) as usize),
        pad: [top, left],
        dil: c.dilation.map(|v| v.max(1) as usize),
    };
    let out = |axis: usize, size: usize, pad: usize| {
        let (s, d, k) = (shape.stride[axis], shape.dil[axis], shape.kernel[axis]);
        let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
        s.checked_mul(size.checked_sub(1)?)?
            .checked_add(c.adjustment[axis] as usize)?
            .checked_add(span)?
            .checked_sub(pad)
    };
    let fits = shape.valid()
        && on == n
        && out(0, h, top + bottom) == Some(oh)
        && out(1, w, left + right) == Some(ow);
    if !fits {
        return Err(Error::invalid_program(format!(
            "{}: input {:?} and output {:?} do not fit a transposed window of {:?}, stride \
             {:?}, dilation {:?}, padding {:?} and adjustment {:?}",
            node.name,
            [n, h, w, ci],
            [on, oh, ow, co],
            c.kernel,
            c.stride,
            c.dilation,
            c.padding,
            c.adjustment
        )));
    }
    Ok(shape)
}

pub(super) fn fully_connected(
    b: &mut Builder<'_>,
    node: &Node,
    [input, filter, output]: [u32; 3],
    bias: Option<u32>,
    flags: u32,
) -> Result<()> {
    let transposed = flags & FLAG_TRANSPOSE_WEIGHTS != 0;
    let (m, n, k) = super::super::gemm::fc_shape(b, [input, filter, output], transposed)?;
    let scales = filter_scales(b, filter, if transposed { 1 } else { 0 }, n)?;
    let bias = bias_values(b, bias, n)?;
    let bytes = b.constant_bytes(filter)?;
    let w: Vec<u8> = if transposed {
        (0..n * k).map(|i| bytes[i % k * n + i / k]).collect()
    } else {
        bytes.to_vec()
    };
    let g = Geometry {
        shape: NhwcShape {
            n: m,
            h: 1,
            w: 1,
            c: k,
            oh: 1,
            ow: 1,
            co: n,
            kernel: [1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
        },
        groups: 1,
        gic: k,
        x_zp: per_tensor(b, input)?.1,
    };
    conv_step(
        b,
        node,
        &g,
        [input, output],
        w,
        &bias,
        &scales,
        ConvKind::Conv,
    )
}

pub(super) fn max_pool(b: &mut Builder<'_>, node: &Node, p: &PoolParams) -> Result<()> {
    let (s, zp) = same_quant(b, node, &[p.input], p.output)?;
    let win = [p.pooling, p.stride, p.dilation];
    let shape = window(b, node, [p.input, p.output], win, p.padding)?;
    let (n, c) = (shape.n, shape.c);
    if shape.co != c {
        return Err(Error::invalid_program(format!(
            "{}: {c} input and {} output channels",
            node.name, shape.co
        )));
    }
    let g = Geometry {
        shape,
        groups: c,
        gic: 1,
        x_zp: zp,
    };
    let r = qs8::output_range(s, zp, node.clamp)?;
    let x = b.view(p.input, &[n * shape.h * shape.w * c], None)?;
    let o = b.view(p.output, &[n * shape.oh * shape.ow * c], None)?;
    let (geo, range) = (b.ints(&g.ints()), b.ints(&r.ints()));
    b.kernel_fn("xnnpack::qs8_max_pool", pool::max_pool, &[x, geo, range, o]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_output_sizes() {
        assert_eq!(out_size(16, 2, 3, 2, 1), Some(8));
        assert_eq!(out_size(8, 0, 2, 2, 1), Some(4));
        assert_eq!(out_size(7, 1, 3, 2, 1), Some(3));
        assert_eq!(out_size(2, 0, 3, 1, 1), None);
    }

    #[test]
    fn requantization_scales_in_xnnpack_order() {
        let s = requant_scales(0.1, &[0.3], 0.7).unwrap();
        assert_eq!(s[0].to_bits(), (0.1f32 * 0.3 / 0.7).to_bits());
        assert!(requant_scales(1.0, &[300.0], 1.0).is_err());
    }

    #[test]
    fn requant_range_of_a_relu() {
        let r: qs8::Requant = qs8::output_range(0.1, -5, Some((0.0, f32::INFINITY))).unwrap();
        assert_eq!(r.ints(), [-5, -5, 127]);
    }
}
