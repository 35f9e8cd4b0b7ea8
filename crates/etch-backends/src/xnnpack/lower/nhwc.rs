//! fp32 convolutions, depthwise convolutions and max pooling on values kept in XNNPACK's
//! own NHWC layout (not laid out channels-first: see `memory::channels_first`), on
//! [`etch_kernels::conv::nhwc`]: channels contiguous, as XNNPACK runs them. The filters
//! are used in XNNPACK's layout (`[1, kh, kw, c]` depthwise; `[co, kh, kw, c]` packed at
//! init for the packed products).

use super::super::graph::{ConvKind, ConvParams, Node, PoolParams};
use super::super::plan::Builder;
use super::{constant_as, constant_f32};
use etch_core::{Error, KernelContext, KernelFn, Result, ScalarType};
use etch_kernels::conv::nhwc::{self, NhwcShape};
use etch_kernels::conv::winograd;
use etch_kernels::gemm512;

/// Whether node operands `ids` are fp32 values in XNNPACK's NHWC layout (4-d, not laid out
/// channels-first).
fn nhwc_f32(b: &Builder<'_>, ids: &[u32]) -> Result<bool> {
    for &id in ids {
        if b.value(id).dims.len() != 4
            || b.is_channels_first(id)
            || b.dtype(id)? != ScalarType::Float
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Lowers an `XNNConv2d` (one group) or an `XNNDepthwiseConv2d` (one output channel a
/// group) with constant filter and bias on NHWC values; `Ok(false)` where the node is not
/// one of those (the caller lowers it otherwise). `pad`: top and left (symmetric).
pub fn convolution(
    b: &mut Builder<'_>,
    node: &Node,
    c: &ConvParams,
    pad: [i64; 2],
) -> Result<bool> {
    let (g, go) = (c.groups as usize, c.group_output_channels as usize);
    let constant = b.is_constant(c.filter) && c.bias.is_none_or(|id| b.is_constant(id));
    if !constant || !nhwc_f32(b, &[c.input, c.output])? {
        return Ok(false);
    }
    let depthwise = c.kind == ConvKind::Depthwise && go == 1 && g > 1;
    let dense = c.kind == ConvKind::Conv && g == 1 && gemm512::available();
    if !depthwise && !dense {
        return Ok(false);
    }
    // Filter `[1, kh, kw, g]` (depthwise) or `[go, kh, kw, gi]`, bias `[g · go]`.
    let cout = g * go;
    let kk = [c.kernel[0], c.kernel[1], c.group_input_channels]
        .iter()
        .try_fold(1usize, |a, &v| a.checked_mul(v as usize));
    let want = kk.and_then(|kk| kk.checked_mul(if depthwise { cout } else { go }));
    let count = |id: u32| b.value(id).dims.iter().product::<usize>();
    let (Some(kk), Some(want)) = (kk, want) else {
        return Err(Error::invalid_program(format!(
            "{}: filter size overflows",
            node.name
        )));
    };
    if count(c.filter) != want || c.bias.is_some_and(|id| count(id) != cout) {
        return Err(Error::invalid_program(format!(
            "{}: filter of {} or bias of {:?} elements for {cout} output channels and {kk} terms each",
            node.name,
            count(c.filter),
            c.bias.map(count)
        )));
    }
    let (x, o) = (b.tensor(c.input)?, b.tensor(c.output)?);
    let params = super::conv::geometry(b, c, pad);
    let (lo, hi) = b.clamp_bounds(node.clamp);
    if depthwise {
        // The filter `[1, kh, kw, c]` is `[taps, c]` as it is: the constants themselves.
        let w = constant_as(b, c.filter, ScalarType::Float)?;
        let bias = match c.bias {
            Some(id) => constant_as(b, id, ScalarType::Float)?,
            None => b.none(),
        };
        b.kernel_fn(
            "xnnpack::f32_depthwise_conv2d_nhwc",
            run_depthwise,
            &[x, w, bias, o, params, lo, hi],
        );
    } else {
        let w = constant_f32(b, c.filter)?;
        let bias = c.bias.map(|id| constant_f32(b, id)).transpose()?;
        // XNNPACK's filter `[co, kh, kw, c]`: row `j` is output channel `j`'s terms in the
        // im2col order `(i, j, ci)`.
        let row = |j: usize, r: usize| w[j * kk + r];
        let wino = c.nhwc_shape(b.graph).filter(winograd::applies);
        let (name, run, packed): (_, KernelFn, _) = match wino {
            Some(s) => (
                "xnnpack::f32_conv2d_nhwc_winograd",
                run_winograd,
                winograd::pack(go, s.c, row, bias.as_deref()),
            ),
            None => (
                "xnnpack::f32_conv2d_nhwc",
                run_conv,
                gemm512::pack_fc(go, kk, row, bias.as_deref()),
            ),
        };
        let packed = packed.ok_or_else(|| {
            Error::invalid_program(format!("{}: filter size overflows", node.name))
        })?;
        let bytes = super::quant::le_bytes(&packed);
        let p = b.owned(ScalarType::Float, &[packed.len()], &bytes)?;
        b.kernel_fn(name, run, &[x, p, o, params, lo, hi]);
    }
    Ok(true)
}

/// Lowers an fp32 `XNNMaxPooling2d` on NHWC values; `Ok(false)` otherwise. Extra bottom or
/// right padding needs nothing: taps outside the input are skipped.
pub fn max_pool(b: &mut Builder<'_>, node: &Node, p: &PoolParams) -> Result<bool> {
    if !p.max || !nhwc_f32(b, &[p.input, p.output])? {
        return Ok(false);
    }
    let (x, o) = (b.tensor(p.input)?, b.tensor(p.output)?);
    let [top, _, _, left] = p.padding;
    let dil = |d: u32| d.max(1) as i64;
    let params = b.ints(&[
        p.pooling[0] as i64,
        p.pooling[1] as i64,
        p.stride[0] as i64,
        p.stride[1] as i64,
        top as i64,
        left as i64,
        dil(p.dilation[0]),
        dil(p.dilation[1]),
    ]);
    b.kernel_fn(
        "xnnpack::f32_max_pool2d_nhwc",
        run_max_pool,
        &[x, o, params],
    );
    b.clamp(o, node.clamp);
    Ok(true)
}

/// Lowers an fp32 `XNNGlobalAvgPooling2d` of an NHWC value (the output `[n, 1, 1, c]`);
/// `Ok(false)` otherwise.
pub fn global_avg_pool(b: &mut Builder<'_>, node: &Node, input: u32, output: u32) -> Result<bool> {
    let dims = b.value(input).dims;
    let odims = b.value(output).dims;
    if !nhwc_f32(b, &[input])?
        || b.dtype(output)? != ScalarType::Float
        || b.is_channels_first(output)
    {
        return Ok(false);
    }
    if odims.iter().product::<usize>() != dims[0] * dims[3] {
        return Err(Error::invalid_program(format!(
            "{}: output {:?} of input {:?}",
            node.name,
            &odims[..],
            &dims[..]
        )));
    }
    let x = b.tensor(input)?;
    let o = b.view(output, &[dims[0], dims[3]], None)?;
    b.kernel_fn(
        "xnnpack::f32_global_avg_pool_nhwc",
        run_global_avg_pool,
        &[x, o],
    );
    b.clamp(o, node.clamp);
    Ok(true)
}

/// Args `[x [n, h, w, c], out [n, c]]`.
fn run_global_avg_pool(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_global_avg_pool_nhwc";
    let (x, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let &[n, h, w, c] = x.sizes() else {
        return Err(Error::internal(format!("{OP}: input {:?}", x.sizes())));
    };
    nhwc::global_avg_pool_f32(n, h * w, c, x.data()?, o.data_mut()?)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// The geometry of arguments `x` and `o` (NHWC tensors) and the parameter list `[kh, kw,
/// stride h, stride w, pad top, pad left, dilation h, dilation w]`.
fn shape(op: &str, x: &[usize], o: &[usize], q: &[i64]) -> Result<NhwcShape> {
    let (&[n, h, w, c], &[on, oh, ow, co]) = (x, o) else {
        return Err(Error::internal(format!("{op}: operands {x:?}, {o:?}")));
    };
    if on != n {
        return Err(Error::invalid_argument(format!(
            "{op}: input {x:?} and output {o:?}"
        )));
    }
    let [kh, kw, sh, sw, ph, pw, dh, dw] = super::conv::parse_geometry(op, q)?;
    Ok(NhwcShape {
        n,
        h,
        w,
        c,
        oh,
        ow,
        co,
        kernel: [kh, kw],
        stride: [sh, sw],
        pad: [ph, pw],
        dil: [dh, dw],
    })
}

/// Args `[x, filter [taps, c], bias or none, out, params, lo, hi]`.
fn run_depthwise(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_depthwise_conv2d_nhwc";
    let (x, w, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(3)?);
    let bias = ctx.opt_tensor(2)?;
    let s = shape(OP, x.sizes(), o.sizes(), ctx.int_list(4)?)?;
    let (lo, hi) = (ctx.double(5)? as f32, ctx.double(6)? as f32);
    let bias = bias.as_ref().map(|t| t.data::<f32>()).transpose()?;
    nhwc::depthwise_f32(&s, x.data()?, w.data()?, bias, o.data_mut()?, lo, hi)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// Args `[x, packed filter, out, params, lo, hi]`.
fn run_conv(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_conv2d_nhwc";
    let (x, p, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let s = shape(OP, x.sizes(), o.sizes(), ctx.int_list(3)?)?;
    let (lo, hi) = (ctx.double(4)? as f32, ctx.double(5)? as f32);
    nhwc::conv_f32(&s, x.data()?, p.data()?, o.data_mut()?, lo, hi)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// Args `[x, filter packed by winograd::pack, out, params, lo, hi]`.
fn run_winograd(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_conv2d_nhwc_winograd";
    let (x, p, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let s = shape(OP, x.sizes(), o.sizes(), ctx.int_list(3)?)?;
    let (lo, hi) = (ctx.double(4)? as f32, ctx.double(5)? as f32);
    winograd::conv_f32(&s, x.data()?, p.data()?, o.data_mut()?, lo, hi)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}

/// Args `[x, out, params]`.
fn run_max_pool(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "xnnpack::f32_max_pool2d_nhwc";
    let (x, mut o) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let s = shape(OP, x.sizes(), o.sizes(), ctx.int_list(2)?)?;
    nhwc::max_pool_f32(&s, x.data()?, o.data_mut()?)
        .map_err(|e| Error::internal(format!("{OP}: {e}")))
}
