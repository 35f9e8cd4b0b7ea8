//! Convolutions, 2-D pooling and bilinear resize: XNNPACK's NHWC tensors are viewed as
//! NCHW tensors in channels-last dim order, which etch's kernels read and write through
//! their strides. Constant filters are repacked once, at init, into the contiguous OIHW
//! layout the convolution kernel uses in place.

use super::super::graph::{
    ConvKind, ConvParams, FLAG_ALIGN_CORNERS, FLAG_TENSORFLOW_LEGACY_MODE, Node, PoolParams,
};
use super::super::plan::Builder;
use super::{constant_as, constant_f32, repack_constant};
use etch_core::{Error, KernelContext, Result, ScalarType};
use etch_kernels::conv::{depthwise_f32, pool_out_size, view4};
use etch_kernels::gemm512;

/// Channels-last dim order of an NCHW view.
const NHWC: [u8; 4] = [0, 2, 3, 1];

fn nchw(b: &mut Builder<'_>, id: u32, what: &str) -> Result<(u32, [usize; 4])> {
    b.nchw(id, what)
}

fn symmetric(p: [u32; 4], what: &str) -> Result<[i64; 2]> {
    let [top, right, bottom, left] = p;
    if top != bottom || left != right {
        return Err(Error::not_supported(format!(
            "{what} with asymmetric padding (top {top}, bottom {bottom}, left {left}, right {right})"
        )));
    }
    Ok([top as i64, left as i64])
}

/// The filter as a PyTorch weight (`[cout, cin/g, kh, kw]`, or `[cin, cout/g, kh, kw]` for
/// a transposed convolution).
fn filter(
    b: &mut Builder<'_>,
    c: &ConvParams,
    kh: usize,
    kw: usize,
    to: ScalarType,
) -> Result<u32> {
    let (g, gi, go) = (
        c.groups as usize,
        c.group_input_channels as usize,
        c.group_output_channels as usize,
    );
    let want: [usize; 4] = match c.kind {
        ConvKind::Depthwise => [1, kh, kw, g * go],
        _ => [g * go, kh, kw, gi],
    };
    let fd = b.value(c.filter).dims;
    if fd[..] != want[..] {
        return Err(Error::invalid_program(format!(
            "filter {:?} does not match the node's geometry {want:?}",
            &fd[..]
        )));
    }
    match c.kind {
        ConvKind::Conv => repack_or_view(b, c.filter, &[g * go, gi, kh, kw], &NHWC, to),
        ConvKind::Depthwise => repack_or_view(b, c.filter, &[g * go, 1, kh, kw], &[1, 2, 3, 0], to),
        ConvKind::Transpose => transposed_filter(b, c.filter, [g, gi, go, kh, kw], to),
    }
}

fn repack_or_view(
    b: &mut Builder<'_>,
    id: u32,
    sizes: &[usize],
    order: &[u8],
    to: ScalarType,
) -> Result<u32> {
    if b.is_constant(id) {
        repack_constant(b, id, sizes, Some(order), to)
    } else {
        b.view(id, sizes, Some(order))
    }
}

/// XNNPACK's `[g*go, kh, kw, gi]` as PyTorch's transposed weight `[g*gi, go, kh, kw]`.
fn transposed_filter(
    b: &mut Builder<'_>,
    id: u32,
    [g, gi, go, kh, kw]: [usize; 5],
    to: ScalarType,
) -> Result<u32> {
    if !b.is_constant(id) {
        return Err(Error::not_supported(
            "XNNConvTranspose2d with a filter computed at run time",
        ));
    }
    let dtype = super::super::plan::scalar_type(b.value(id), id)?;
    let es = dtype.element_size();
    let src = b.constant_bytes(id)?;
    let mut dst = vec![0u8; src.len()];
    for gg in 0..g {
        for i in 0..gi {
            for o in 0..go {
                for y in 0..kh {
                    for x in 0..kw {
                        let s = ((((gg * go + o) * kh + y) * kw + x) * gi + i) * es;
                        let d = ((((gg * gi + i) * go + o) * kh + y) * kw + x) * es;
                        dst[d..d + es].copy_from_slice(&src[s..s + es]);
                    }
                }
            }
        }
    }
    let dst = super::convert(&dst, dtype, to)?;
    b.owned(to, &[g * gi, go, kh, kw], &dst)
}

/// Output length along one dim, as XNNPACK computes it.
fn out_len(c: &ConvParams, i: usize, k: usize, axis: usize) -> Option<usize> {
    let (s, d) = (c.stride[axis] as usize, c.dilation[axis] as usize);
    // Top + bottom for the height, right + left for the width.
    let pad = c.padding[axis] as usize + c.padding[axis + 2] as usize;
    let eff = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    match c.kind {
        ConvKind::Transpose => (i.checked_sub(1)?)
            .checked_mul(s)?
            .checked_add(c.adjustment[axis] as usize + eff)?
            .checked_sub(pad),
        _ => Some((i + pad).checked_sub(eff)? / s.max(1) + 1),
    }
}

/// `XNNConv2d`, `XNNDepthwiseConv2d`, `XNNConvTranspose2d`, then the node's clamp.
pub fn convolution(b: &mut Builder<'_>, node: &Node, c: &ConvParams) -> Result<()> {
    if c.flags != 0 {
        return Err(Error::not_supported(format!(
            "{} flags {:#x} (TensorFlow SAME padding)",
            node.name, c.flags
        )));
    }
    let [kh, kw] = c.kernel.map(|k| k as usize);
    if c.stride.contains(&0) || c.dilation.contains(&0) || c.groups == 0 {
        return Err(Error::invalid_program(format!(
            "{} with zero stride, dilation or groups",
            node.name
        )));
    }
    let pad = symmetric(c.padding, node.name)?;
    let (x, xs) = nchw(b, c.input, "input")?;
    let (o, os) = nchw(b, c.output, "output")?;
    let (g, gi, go) = (
        c.groups as usize,
        c.group_input_channels as usize,
        c.group_output_channels as usize,
    );
    let expect = [
        xs[0],
        g * go,
        out_len(c, xs[2], kh, 0).unwrap_or(0),
        out_len(c, xs[3], kw, 1).unwrap_or(0),
    ];
    if xs[1] != g * gi || os != expect {
        return Err(Error::invalid_program(format!(
            "{}: input {:?} and output {:?} (NCHW) do not match groups {g} x ({gi} -> {go}) and kernel {kh}x{kw}",
            node.name, xs, os
        )));
    }
    if super::nhwc::convolution(b, node, c, pad)? {
        return Ok(());
    }
    let dtype = b.dtype(c.input)?;
    if c.kind == ConvKind::Conv
        && dtype == ScalarType::Float
        && b.dtype(c.output)? == ScalarType::Float
        && b.is_constant(c.filter)
        && c.bias.is_none_or(|id| b.is_constant(id))
        && b.is_channels_first(c.output)
        && gemm512::available()
    {
        return packed_convolution(b, node, c, (x, o), pad, (xs, os));
    }
    if c.kind == ConvKind::Depthwise
        && go == 1
        && g > 1
        && dtype == ScalarType::Float
        && b.dtype(c.output)? == ScalarType::Float
        && b.is_constant(c.filter)
        && c.bias.is_none_or(|id| b.is_constant(id))
    {
        return depthwise(b, node, c, (x, o), pad);
    }
    let w = filter(b, c, kh, kw, dtype)?;
    let bias = match c.bias {
        Some(id) if b.is_constant(id) => constant_as(b, id, dtype)?,
        Some(id) => b.tensor(id)?,
        None => b.none(),
    };
    let stride = b.ints(&[c.stride[0] as i64, c.stride[1] as i64]);
    let padding = b.ints(&pad);
    let dilation = b.ints(&[c.dilation[0] as i64, c.dilation[1] as i64]);
    let transposed = b.boolean(c.kind == ConvKind::Transpose);
    let adj = b.ints(&[c.adjustment[0] as i64, c.adjustment[1] as i64]);
    let groups = b.int(g as i64);
    b.kernel(
        "aten::convolution.out",
        &[
            x, w, bias, stride, padding, dilation, transposed, adj, groups, o,
        ],
    )?;
    b.clamp(o, node.clamp);
    Ok(())
}

/// An `XNNConv2d` with constant weights ([`gemm512::available`]) whose output is laid out
/// channels-first: the filter and bias packed at init for [`gemm512::conv2d`], in the
/// layout the node's shapes (`xs`, `os`: NCHW) call for, the node's clamp fused.
fn packed_convolution(
    b: &mut Builder<'_>,
    node: &Node,
    c: &ConvParams,
    (x, o): (u32, u32),
    pad: [i64; 2],
    (xs, os): ([usize; 4], [usize; 4]),
) -> Result<()> {
    let [kh, kw] = c.kernel.map(|k| k as usize);
    let (g, gi, go) = (
        c.groups as usize,
        c.group_input_channels as usize,
        c.group_output_channels as usize,
    );
    let w = constant_f32(b, c.filter)?;
    let bias = c.bias.map(|id| constant_f32(b, id)).transpose()?;
    let kk = gi * kh * kw;
    if w.len() != g * go * kk || bias.as_ref().is_some_and(|v| v.len() != g * go) {
        return Err(Error::invalid_program(format!(
            "{}: filter of {} or bias of {:?} elements for {g} x ({gi} -> {go}) channels and kernel {kh}x{kw}",
            node.name,
            w.len(),
            bias.as_ref().map(Vec::len)
        )));
    }
    // XNNPACK's filter is `[g * go, kh, kw, gi]`; term `r` is `(ci * kh + i) * kw + j`.
    let at = |co: usize, r: usize| {
        let (ci, ij) = (r / (kh * kw), r % (kh * kw));
        w[(co * kh * kw + ij) * gi + ci]
    };
    let shape = gemm512::ConvShape {
        n: xs[0],
        groups: g,
        cin_g: gi,
        cout_g: go,
        h: xs[2],
        w: xs[3],
        xs: [xs[1] * xs[2] * xs[3], xs[2] * xs[3], xs[3], 1],
        oh: os[2],
        ow: os[3],
        os: [os[1] * os[2] * os[3], os[2] * os[3]],
        kernel: [kh, kw],
        stride: c.stride.map(|v| v as usize),
        pad: pad.map(|v| v as usize),
        dil: c.dilation.map(|v| v as usize),
    };
    let layout = gemm512::conv_layout_for(&shape);
    let packed = gemm512::pack_conv(g, go, kk, at, bias.as_deref(), layout)
        .ok_or_else(|| Error::invalid_program(format!("{}: filter size overflows", node.name)))?;
    let bytes: Vec<u8> = packed.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = b.owned(ScalarType::Float, &[packed.len()], &bytes)?;
    let params = geometry(b, c, pad);
    let packing = b.ints(&[g as i64, (layout == gemm512::ConvLayout::Pairs) as i64]);
    let (lo, hi) = b.clamp_bounds(node.clamp);
    b.kernel_fn(
        "xnnpack::f32_conv2d",
        run_packed_convolution,
        &[x, p, o, params, packing, lo, hi],
    );
    Ok(())
}

/// Args `[x (NCHW view), packed filter, out (NCHW view, contiguous planes), [`geometry`],
/// [groups, pairs (the filter's layout: 1 for `ConvLayout::Pairs`)], lo, hi]`.
fn run_packed_convolution(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_conv2d";
    let (x, p, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let [kh, kw, sh, sw, ph, pw, dh, dw] = parse_geometry(OP, ctx.int_list(3)?)?;
    let &[g, pairs] = ctx.int_list(4)? else {
        return Err(Error::internal(format!("{OP}: groups and layout")));
    };
    let (lo, hi) = (ctx.double(5)? as f32, ctx.double(6)? as f32);
    let (xv, ov) = (view4(OP, &x, false)?, view4(OP, &o, false)?);
    let layout = match pairs {
        0 => gemm512::ConvLayout::Panels,
        _ => gemm512::ConvLayout::Pairs,
    };
    let g = g.max(0) as usize;
    if g == 0
        || xv.c % g != 0
        || ov.c % g != 0
        || ov.s[3] != 1
        || (ov.h > 1 && ov.s[2] != ov.w)
        || xv.n != ov.n
    {
        return Err(Error::internal(format!("{OP}: output layout or groups")));
    }
    let s = gemm512::ConvShape {
        n: xv.n,
        groups: g,
        cin_g: xv.c / g,
        cout_g: ov.c / g,
        h: xv.h,
        w: xv.w,
        xs: xv.s,
        oh: ov.h,
        ow: ov.w,
        os: [ov.s[0], ov.s[1]],
        kernel: [kh, kw],
        stride: [sh, sw],
        pad: [ph, pw],
        dil: [dh, dw],
    };
    gemm512::conv2d(&s, x.data()?, p.data()?, layout, o.data_mut()?, lo, hi)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// An `f32` `XNNDepthwiseConv2d` (one output channel per group) with constant weights:
/// the filter repacked `[c, kh, kw]` at init for [`depthwise_f32`], the node's clamp fused
/// (the same sums, and the same clamp, as `aten::convolution.out` then the clamp step).
fn depthwise(
    b: &mut Builder<'_>,
    node: &Node,
    c: &ConvParams,
    (x, o): (u32, u32),
    pad: [i64; 2],
) -> Result<()> {
    let [kh, kw] = c.kernel.map(|k| k as usize);
    let ch = c.groups as usize;
    let w = constant_f32(b, c.filter)?;
    let bias = c.bias.map(|id| constant_f32(b, id)).transpose()?;
    if w.len() != ch * kh * kw || bias.as_ref().is_some_and(|v| v.len() != ch) {
        return Err(Error::invalid_program(format!(
            "{}: filter of {} or bias of {:?} elements for {ch} channels and kernel {kh}x{kw}",
            node.name,
            w.len(),
            bias.as_ref().map(Vec::len)
        )));
    }
    // XNNPACK's depthwise filter is `[1, kh, kw, c]`.
    let mut packed = Vec::with_capacity(w.len());
    for k in 0..ch {
        packed.extend((0..kh * kw).map(|ij| w[ij * ch + k]));
    }
    let bytes: Vec<u8> = packed.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = b.owned(ScalarType::Float, &[packed.len()], &bytes)?;
    let bias = match bias {
        Some(v) => {
            let bytes: Vec<u8> = v.iter().flat_map(|v| v.to_le_bytes()).collect();
            b.owned(ScalarType::Float, &[v.len()], &bytes)?
        }
        None => b.none(),
    };
    let params = geometry(b, c, pad);
    let (lo, hi) = b.clamp_bounds(node.clamp);
    b.kernel_fn(
        "xnnpack::f32_depthwise_conv2d",
        run_depthwise,
        &[x, p, bias, o, params, lo, hi],
    );
    Ok(())
}

/// The int list `[kh, kw, stride h, stride w, pad h, pad w, dilation h, dilation w]` of a
/// convolution node (`pad`: top and left).
pub(super) fn geometry(b: &mut Builder<'_>, c: &ConvParams, pad: [i64; 2]) -> u32 {
    b.ints(&[
        c.kernel[0] as i64,
        c.kernel[1] as i64,
        c.stride[0] as i64,
        c.stride[1] as i64,
        pad[0],
        pad[1],
        c.dilation[0] as i64,
        c.dilation[1] as i64,
    ])
}

/// [`geometry`]'s list back: `[kh, kw, stride h, stride w, pad h, pad w, dilation h,
/// dilation w]`.
pub(super) fn parse_geometry(op: &str, q: &[i64]) -> Result<[usize; 8]> {
    let q: [i64; 8] = q
        .try_into()
        .map_err(|_| Error::internal(format!("{op}: {} parameters", q.len())))?;
    Ok(q.map(|v| v.max(0) as usize))
}

/// Args `[x (NCHW view), filter [c, kh, kw], bias or none, out (NCHW view), [kh, kw,
/// stride h, stride w, pad h, pad w, dilation h, dilation w], lo, hi]`.
fn run_depthwise(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_depthwise_conv2d";
    let (x, p, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(3)?);
    let bias = ctx.opt_tensor(2)?;
    let q = ctx.int_list(4)?;
    let (lo, hi) = (ctx.double(5)? as f32, ctx.double(6)? as f32);
    let (xv, ov) = (view4(OP, &x, false)?, view4(OP, &o, false)?);
    let [kh, kw, sh, sw, ph, pw, dh, dw] = parse_geometry(OP, q)?;
    let bs = match &bias {
        Some(t) => Some(t.data::<f32>()?),
        None => None,
    };
    depthwise_f32(
        (xv, x.data()?),
        (p.data()?, bs),
        (ov, o.data_mut()?),
        [kh, kw],
        [sh, sw],
        [ph, pw],
        [dh, dw],
        (lo, hi),
        true,
    )
    .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// `XNNMaxPooling2d` / `XNNAvgPooling2d`. Extra bottom/right padding (how the exporter
/// writes `ceil_mode`) runs as PyTorch's ceil mode when that gives the same output size.
pub fn pooling(b: &mut Builder<'_>, node: &Node, p: &PoolParams) -> Result<()> {
    let [top, right, bottom, left] = p.padding.map(|v| v as usize);
    let (kh, kw) = (p.pooling[0] as usize, p.pooling[1] as usize);
    let (sh, sw) = (p.stride[0] as usize, p.stride[1] as usize);
    let dil = |d: u32| d.max(1) as usize;
    let (dh, dw) = if p.max {
        (dil(p.dilation[0]), dil(p.dilation[1]))
    } else {
        (1, 1)
    };
    let (x, xs) = nchw(b, p.input, "input")?;
    let (o, os) = nchw(b, p.output, "output")?;
    let ceil = bottom != top || right != left;
    if bottom < top || right < left || (ceil && !p.max) {
        return Err(Error::not_supported(format!(
            "{} with padding top {top}, right {right}, bottom {bottom}, left {left}",
            node.name
        )));
    }
    let oh = pool_out_size(node.name, xs[2], kh, sh, top, dh, ceil)?;
    let ow = pool_out_size(node.name, xs[3], kw, sw, left, dw, ceil)?;
    if os != [xs[0], xs[1], oh, ow] {
        return Err(Error::not_supported(format!(
            "{}: output {os:?} (NCHW) of input {xs:?} is not PyTorch's pooling size",
            node.name
        )));
    }
    if super::nhwc::max_pool(b, node, p)? {
        return Ok(());
    }
    let kernel = b.ints(&[kh as i64, kw as i64]);
    let stride = b.ints(&[sh as i64, sw as i64]);
    let padding = b.ints(&[top as i64, left as i64]);
    let ceil = b.boolean(ceil);
    if p.max {
        // Without indices: XNNPACK's pooling has none, and working them out and writing
        // them (8 bytes an output) cost more than the maxima.
        let dilation = b.ints(&[dh as i64, dw as i64]);
        b.kernel_fn(
            "XNNMaxPooling2d",
            etch_kernels::conv::max_pool2d_values_out,
            &[x, kernel, stride, padding, dilation, ceil, o],
        );
    } else {
        let (include_pad, divisor) = (b.boolean(false), b.none());
        b.kernel(
            "aten::avg_pool2d.out",
            &[x, kernel, stride, padding, ceil, include_pad, divisor, o],
        )?;
    }
    b.clamp(o, node.clamp);
    Ok(())
}

/// `XNNStaticResizeBilinear2D` (half-pixel centers, or aligned corners).
pub fn resize_bilinear(
    b: &mut Builder<'_>,
    node: &Node,
    [h, w]: [u32; 2],
    flags: u32,
    [input, output]: [u32; 2],
) -> Result<()> {
    if flags & FLAG_TENSORFLOW_LEGACY_MODE != 0 {
        return Err(Error::not_supported(format!(
            "{} in TensorFlow legacy mode",
            node.name
        )));
    }
    let (x, _) = nchw(b, input, "input")?;
    let (o, os) = nchw(b, output, "output")?;
    if os[2] != h as usize || os[3] != w as usize {
        return Err(Error::invalid_program(format!(
            "{}: output {os:?} (NCHW) is not {h}x{w}",
            node.name
        )));
    }
    let size = b.ints(&[h as i64, w as i64]);
    let align = b.boolean(flags & FLAG_ALIGN_CORNERS != 0);
    let scales = b.none();
    b.kernel(
        "aten::upsample_bilinear2d.vec_out",
        &[x, size, align, scales, o],
    )?;
    b.clamp(o, node.clamp);
    Ok(())
}
