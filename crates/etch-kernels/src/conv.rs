//! Convolution (im2col + `gemm`) and 2-D pooling. Inputs and outputs are read and written
//! through their strides, so channels-last tensors work without conversion.

use crate::dispatch_float;

#[path = "conv/channels_last.rs"]
mod channels_last;
#[cfg(target_arch = "x86_64")]
#[path = "conv/dw256.rs"]
mod dw256;
#[path = "conv/dw512.rs"]
mod dw512;
#[cfg(target_arch = "x86_64")]
#[path = "conv/dw_chan.rs"]
mod dw_chan;
#[cfg(target_arch = "x86_64")]
#[path = "conv/dw_small.rs"]
mod dw_small;
#[path = "conv/fused.rs"]
mod fused;
#[path = "conv/nhwc.rs"]
pub mod nhwc;
#[path = "conv/winograd.rs"]
pub mod winograd;
use crate::gemm::{Axis, Plan, Strides};
use crate::gemm512;
use crate::linalg::{GemmDims, MatRef, gemm_batched};
use crate::maxpool::{self, PoolGeom, window_max};
use crate::threads::{self, SharedMut};
use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, LayoutRule, Prepared, Result, TensorRef};

/// A 4-D view (N, C, H, W) of a 3-D or 4-D tensor: sizes and strides.
#[derive(Clone, Copy, Debug)]
pub struct View4 {
    /// Batch size.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Height (1 for 1-D tensors).
    pub h: usize,
    /// Width.
    pub w: usize,
    /// Element strides of N, C, H, W (0 for a missing dim).
    pub s: [usize; 4],
}

/// Checks the bias and dtypes of a convolution and resizes its out (argument 9) to
/// `[n, cout, (oh,) ow]`.
pub fn conv_out<'a>(
    ctx: &mut KernelContext<'a>,
    x: &TensorRef<'a>,
    w: &TensorRef<'a>,
    bias: Option<&TensorRef<'a>>,
    one_d: bool,
    [n, cout, oh, ow]: [usize; 4],
) -> Result<(TensorRef<'a>, View4)> {
    const OP: &str = "aten::convolution.out";
    if let Some(b) = bias {
        if b.numel() != cout {
            return Err(Error::invalid_argument(format!(
                "{OP}: bias has {} elements for {cout} output channels",
                b.numel()
            )));
        }
        same_dtype(OP, x.dtype(), b.dtype())?;
    }
    let mut osz = Shape::from_slice(&[n, cout])?;
    if !one_d {
        osz.push(oh)?;
    }
    osz.push(ow)?;
    let out = ctx.resize_out(9, &osz)?;
    same_dtype(OP, x.dtype(), w.dtype())?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    let ov = view4(OP, &out, true)?;
    Ok((out, ov))
}

/// Views `t` as N×C×H×W. `spatial1d`: a 3-D tensor is N×C×L (H = 1); otherwise a 3-D
/// tensor is C×H×W (N = 1).
pub fn view4(op: &str, t: &TensorRef<'_>, spatial1d: bool) -> Result<View4> {
    let (z, st) = (t.sizes(), t.strides());
    match (t.dim(), spatial1d) {
        (4, _) => Ok(View4 {
            n: z[0],
            c: z[1],
            h: z[2],
            w: z[3],
            s: [st[0], st[1], st[2], st[3]],
        }),
        (3, true) => Ok(View4 {
            n: z[0],
            c: z[1],
            h: 1,
            w: z[2],
            s: [st[0], st[1], 0, st[2]],
        }),
        (3, false) => Ok(View4 {
            n: 1,
            c: z[0],
            h: z[1],
            w: z[2],
            s: [0, st[0], st[1], st[2]],
        }),
        _ => Err(Error::invalid_argument(format!(
            "{op}: expected a 3-D or 4-D tensor, got shape {:?}",
            t.sizes()
        ))),
    }
}

/// Reads a 1- or 2-element int list as (h, w); a 1-element list repeats. For 1-D ops the
/// single value is the width and the height parameter is `h1`.
pub fn pair(op: &str, what: &str, v: &[i64], one_d: bool, h1: i64) -> Result<(usize, usize)> {
    let (h, w) = match (v.len(), one_d) {
        (1, true) => (h1, v[0]),
        (1, false) => (v[0], v[0]),
        (2, false) => (v[0], v[1]),
        _ => {
            return Err(Error::invalid_argument(format!(
                "{op}: {what} {v:?} has the wrong length"
            )));
        }
    };
    if h < 0 || w < 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} {v:?} must be non-negative"
        )));
    }
    Ok((h as usize, w as usize))
}

/// Output length of a convolution along one dim.
pub fn conv_out_size(op: &str, i: usize, k: usize, s: usize, p: usize, d: usize) -> Result<usize> {
    let eff = d * (k.max(1) - 1) + 1;
    if s == 0 || i + 2 * p < eff {
        return Err(Error::invalid_argument(format!(
            "{op}: kernel {k} (dilation {d}) does not fit input {i} with padding {p}, or stride is 0"
        )));
    }
    Ok((i + 2 * p - eff) / s + 1)
}

/// The geometry of a (non-transposed) `convolution` call from its input, weight, stride,
/// padding, dilation and groups (arguments 0, 1, 3, 4, 5, 8), with its output as the kernel
/// makes it (contiguous planes; the kernel puts the out tensor's own view in `ov`).
fn conv_geometry(ctx: &KernelContext<'_>, x: &TensorRef<'_>, w: &TensorRef<'_>) -> Result<Conv> {
    const OP: &str = "aten::convolution.out";
    let one_d = x.dim() == 3;
    if x.dim() != w.dim() || !(x.dim() == 3 || x.dim() == 4) {
        return Err(Error::invalid_argument(format!(
            "{OP}: input {:?} and weight {:?} must both be 3-D or 4-D",
            x.sizes(),
            w.sizes()
        )));
    }
    let (sh, sw) = pair(OP, "stride", ctx.int_list(3)?, one_d, 1)?;
    let (ph, pw) = pair(OP, "padding", ctx.int_list(4)?, one_d, 0)?;
    let (dh, dw) = pair(OP, "dilation", ctx.int_list(5)?, one_d, 1)?;
    let groups = ctx.int(8)?;
    let xv = view4(OP, x, true)?;
    let wv = view4(OP, w, true)?;
    if groups <= 0 || xv.c % groups as usize != 0 || wv.n % groups as usize != 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: groups={groups} does not divide {} input / {} output channels",
            xv.c, wv.n
        )));
    }
    let g = groups as usize;
    let (cin_g, cout) = (xv.c / g, wv.n);
    if wv.c != cin_g {
        return Err(Error::invalid_argument(format!(
            "{OP}: weight {:?} expects {} input channels per group, input has {cin_g}",
            w.sizes(),
            wv.c
        )));
    }
    let (kh, kw) = (wv.h, wv.w);
    let oh = conv_out_size(OP, xv.h, kh, sh, ph, dh)?;
    let ow = conv_out_size(OP, xv.w, kw, sw, pw, dw)?;
    let plane = oh * ow;
    Ok(Conv {
        xv,
        wv,
        ov: View4 {
            n: xv.n,
            c: cout,
            h: oh,
            w: ow,
            s: [cout * plane, plane, ow, 1],
        },
        g,
        cin_g,
        cout_g: cout / g,
        kh,
        kw,
        stride: (sh, sw),
        pad: (ph, pw),
        dil: (dh, dw),
        oh,
        ow,
    })
}

/// `convolution`: args [input, weight, bias?, stride, padding, dilation, transposed,
/// output_padding, groups, out].
fn convolution_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::convolution.out";
    let x = ctx.tensor(0)?;
    let w = ctx.tensor(1)?;
    let bias = ctx.opt_tensor(2)?;
    if ctx.bool(6)? {
        return conv_transposed(ctx);
    }
    let mut geom = conv_geometry(ctx, &x, &w)?;
    let (g, cout) = (geom.g, geom.wv.n);
    let shape = [geom.xv.n, cout, geom.oh, geom.ow];
    let (mut out, ov) = conv_out(ctx, &x, &w, bias.as_ref(), x.dim() == 3, shape)?;
    if ov.h > 1 && ov.s[2] != ov.w * ov.s[3] {
        return Err(Error::not_supported(format!(
            "{OP}: out dim order {:?} is not supported",
            out.dim_order()
        )));
    }
    geom.ov = ov;
    if let Some(p) = ctx.prepared::<PackedNhwc>()
        && out.is_channels_last()
        && p.weight == weight_id(&w, geom.wv)
    {
        let (xs, o) = (channels_last::input(OP, &x)?, out.data_mut::<f32>()?);
        let all = (f32::NEG_INFINITY, f32::INFINITY);
        return channels_last::run(OP, &geom, &p.weights, xs, o, all);
    }
    if x.dtype() == etch_core::ScalarType::Float && g == 1 && gemm512::available() {
        if let Some(p) = ctx.prepared::<PackedConv>()
            && prepacked_conv_f32(&geom, p, &x, &w, &mut out)?
        {
            return Ok(());
        }
        if packed_conv_f32(&geom, &x, &w, bias.as_ref(), &mut out)? {
            return Ok(());
        }
    }
    dispatch_float!(x.dtype(), OP, "input", |T| {
        let bs = match &bias {
            Some(b) => Some(b.data::<T>()?),
            None => None,
        };
        conv2d::<T>(
            &geom,
            x.data::<T>()?,
            w.data::<T>()?,
            bs,
            out.data_mut::<T>()?,
        );
        Ok(())
    })
}

/// A float32 convolution of one group on the packed kernels of [`gemm512`], its weights
/// packed a chunk at a time while it runs ([`gemm512::conv2d_unpacked`]): false (nothing
/// written) when they do not take it (weights whose rows of terms are not contiguous, an
/// output whose pixels are not contiguous within a channel).
fn packed_conv_f32(
    c: &Conv,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    bias: Option<&TensorRef<'_>>,
    out: &mut TensorRef<'_>,
) -> Result<bool> {
    let Some((s, ld)) = packed_shape(c) else {
        return Ok(false);
    };
    let ws = w.data::<f32>()?;
    let bs = match bias {
        Some(b) => Some(b.data::<f32>()?),
        None => None,
    };
    let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
    let o = out.data_mut::<f32>()?;
    let xs = x.data::<f32>()?;
    Ok(gemm512::conv2d_unpacked(&s, xs, ws, ld, bs, o, lo, hi).is_ok())
}

/// The [`gemm512`] shape of a one-group convolution and its weights' row stride, or `None`
/// when the kernels do not take it (weights whose rows of terms are not contiguous, an
/// output whose pixels are not contiguous within a channel).
fn packed_shape(c: &Conv) -> Option<(gemm512::ConvShape, usize)> {
    let (xv, wv, ov) = (c.xv, c.wv, c.ov);
    if ov.s[3] != 1 || (c.oh > 1 && ov.s[2] != c.ow) {
        return None;
    }
    let s = gemm512::ConvShape {
        n: xv.n,
        groups: 1,
        cin_g: c.cin_g,
        cout_g: c.cout_g,
        h: xv.h,
        w: xv.w,
        xs: xv.s,
        oh: c.oh,
        ow: c.ow,
        os: [ov.s[0], ov.s[1]],
        kernel: [c.kh, c.kw],
        stride: [c.stride.0, c.stride.1],
        pad: [c.pad.0, c.pad.1],
        dil: [c.dil.0, c.dil.1],
    };
    // Weight rows of `cin · kh · kw` contiguous terms (any row stride).
    let kk = c.cin_g * c.kh * c.kw;
    let rows = (c.kw == 1 || wv.s[3] == 1)
        && (c.kh == 1 || wv.s[2] == c.kw)
        && (c.cin_g == 1 || wv.s[1] == c.kh * c.kw);
    if !rows || (c.cout_g > 1 && wv.s[0] < kk) {
        return None;
    }
    Some((s, wv.s[0].max(kk)))
}

/// The weight rows of `c` in `ws` (one an output channel, `kk` contiguous terms, `ld`
/// apart, all inside `ws`) with the [`gemm512`] shape: `(shape, ld, kk)`, or `None` where
/// they are not laid out so.
fn weight_rows(c: &Conv, ws: &[f32]) -> Option<(gemm512::ConvShape, usize, usize)> {
    let (s, ld) = packed_shape(c)?;
    let kk = c.cin_g * c.kh * c.kw;
    if c.wv.n > 1 && c.wv.s[0] != ld {
        return None;
    }
    let span = c.wv.n.checked_sub(1)?.checked_mul(ld)?.checked_add(kk)?;
    (span <= ws.len()).then_some((s, ld, kk))
}

/// What identifies the weight that weights packed at load came from: its data's address
/// and its sizes (a call with another weight runs without them).
fn weight_id(w: &TensorRef<'_>, wv: View4) -> (usize, [usize; 4]) {
    (w.data_ptr() as usize, [wv.n, wv.c, wv.h, wv.w])
}

/// A constant weight and bias of a float32 one-group convolution, packed once when the
/// method loads ([`convolution_prepare`]), in the layout its shapes at load call for.
struct PackedConv {
    packed: Vec<f32>,
    layout: gemm512::ConvLayout,
    /// The weight it was packed from (its data's address and sizes).
    weight: (usize, [usize; 4]),
}

/// The convolution on weights packed at load: false (nothing written) when the weight is
/// not the one they were packed from or the kernels do not take the call. The same sums
/// in the same order as [`packed_conv_f32`].
fn prepacked_conv_f32(
    c: &Conv,
    p: &PackedConv,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &mut TensorRef<'_>,
) -> Result<bool> {
    if p.weight != weight_id(w, c.wv) {
        return Ok(false);
    }
    let Some((s, _)) = packed_shape(c) else {
        return Ok(false);
    };
    let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
    let (xs, o) = (x.data::<f32>()?, out.data_mut::<f32>()?);
    Ok(gemm512::conv2d(&s, xs, &p.packed, p.layout, o, lo, hi).is_ok())
}

/// A constant weight and bias packed at load for the NHWC kernels, where the output is
/// channels-last ([`channels_last`]).
struct PackedNhwc {
    weights: channels_last::NhwcWeights,
    /// The weight it was packed from (its data's address and sizes).
    weight: (usize, [usize; 4]),
}

/// Whether `t` is a float32 tensor.
fn f32s(t: &TensorRef<'_>) -> bool {
    t.dtype() == etch_core::ScalarType::Float
}

/// The geometry of a float32 2-D convolution (not transposed) whose weight and bias are
/// constants and whose input has a static shape: what the packing at load takes.
fn constant_conv(ctx: &KernelContext<'_>) -> Result<Option<Conv>> {
    let bias = ctx.opt_tensor(2)?;
    let (x, w) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if !ctx.is_constant(1)
        || bias.is_some() && !ctx.is_constant(2)
        || ctx.bool(6)?
        || !f32s(&x)
        || !f32s(&w)
        || bias.as_ref().is_some_and(|b| !f32s(b))
        || x.dim() != 4
        || x.dynamism() != etch_core::Dynamism::Static
    {
        return Ok(None);
    }
    Ok(conv_geometry(ctx, &x, &w).ok())
}

/// `aten::convolution.out`'s layout hook ([`channels_last::rule`]).
fn convolution_layout(ctx: &KernelContext<'_>) -> Option<LayoutRule> {
    let out = ctx.tensor(9).ok()?;
    if !f32s(&out) || out.dynamism() != etch_core::Dynamism::Static {
        return None;
    }
    channels_last::rule(&constant_conv(ctx).ok()??)
}

/// [`pack_convolution`] for a channels-last output: the weights packed for the NHWC
/// kernels ([`PackedNhwc`]), or `None` where they do not run the call.
fn pack_channels_last(ctx: &KernelContext<'_>) -> Result<Option<Prepared>> {
    let Some(c) = constant_conv(ctx)? else {
        return Ok(None);
    };
    let w = ctx.tensor(1)?;
    let bias = match ctx.opt_tensor(2)? {
        Some(b) => Some(b.data::<f32>()?),
        None => None,
    };
    let (ws, wv) = (w.data::<f32>()?, c.wv);
    let taps = c.kh * c.kw;
    let term = |co: usize, r: usize| {
        let (ci, t) = (r / taps, r % taps);
        ws[co * wv.s[0] + ci * wv.s[1] + t / c.kw * wv.s[2] + t % c.kw * wv.s[3]]
    };
    let packed = channels_last::NhwcWeights::pack(&c, term, bias).map(|weights| {
        std::sync::Arc::new(PackedNhwc {
            weights,
            weight: weight_id(&w, wv),
        }) as Prepared
    });
    Ok(packed)
}

/// `aten::convolution.out`'s load-time hook: a float32 one-group convolution whose weight
/// (and bias) are constants gets them packed once ([`PackedConv`]) instead of on every
/// call. `None` for every other call, bad arguments included (the kernel reports those
/// when it runs).
fn convolution_prepare(ctx: &KernelContext<'_>) -> Result<Option<Prepared>> {
    Ok(pack_convolution(ctx).ok().flatten())
}

/// [`convolution_prepare`]'s packing, or why not.
fn pack_convolution(ctx: &KernelContext<'_>) -> Result<Option<Prepared>> {
    let bias = ctx.opt_tensor(2)?;
    let (x, w) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if ctx.tensor(9)?.is_channels_last() {
        return pack_channels_last(ctx);
    }
    if !gemm512::available()
        || !ctx.is_constant(1)
        || bias.is_some() && !ctx.is_constant(2)
        || ctx.bool(6)?
        || !f32s(&x)
        || !f32s(&w)
        || bias.as_ref().is_some_and(|b| !f32s(b))
    {
        return Ok(None);
    }
    let Ok(c) = conv_geometry(ctx, &x, &w) else {
        return Ok(None);
    };
    let ws = w.data::<f32>()?;
    let bs = match &bias {
        Some(b) => Some(b.data::<f32>()?),
        None => None,
    };
    // (Sizes the kernel will reject when it runs: left to it.)
    let Some((s, ld, kk)) = weight_rows(&c, ws).filter(|_| c.g == 1) else {
        return Ok(None);
    };
    if bs.is_some_and(|b| b.len() != s.cout_g) {
        return Ok(None);
    }
    let layout = gemm512::conv_layout_for(&s);
    let Some(packed) = gemm512::pack_conv(1, s.cout_g, kk, |co, r| ws[co * ld + r], bs, layout)
    else {
        return Ok(None);
    };
    Ok(Some(std::sync::Arc::new(PackedConv {
        packed,
        layout,
        weight: weight_id(&w, c.wv),
    })))
}

/// Multiply-adds of a convolution below which it stays on the calling thread, and the
/// least work a thread is given.
pub const CONV_TASK_WORK: usize = 1 << 19;

/// The same for depthwise convolutions, whose multiply-adds cost more each (short rows).
pub const DEPTHWISE_TASK_WORK: usize = 1 << 16;

/// The geometry of a (non-transposed) convolution.
#[derive(Clone, Copy)]
struct Conv {
    xv: View4,
    wv: View4,
    ov: View4,
    g: usize,
    cin_g: usize,
    cout_g: usize,
    kh: usize,
    kw: usize,
    stride: (usize, usize),
    pad: (usize, usize),
    dil: (usize, usize),
    oh: usize,
    ow: usize,
}

impl Conv {
    /// A depthwise convolution (one input and one output channel a group) of `xv` into
    /// `ov` (whose height and width are the output's); the weights' view is `xv`'s.
    fn depthwise(
        xv: View4,
        ov: View4,
        [kh, kw]: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dil: [usize; 2],
    ) -> Self {
        Conv {
            xv,
            wv: xv,
            ov,
            g: xv.c,
            cin_g: 1,
            cout_g: 1,
            kh,
            kw,
            stride: (stride[0], stride[1]),
            pad: (pad[0], pad[1]),
            dil: (dil[0], dil[1]),
            oh: ov.h,
            ow: ov.w,
        }
    }

    /// Whether every plane of the input and the output is one contiguous run (rows
    /// back to back), as the small-plane depthwise kernels read and write them.
    fn dense_planes(&self) -> bool {
        let (xv, ov) = (self.xv, self.ov);
        xv.s[3] == 1 && xv.s[2] == xv.w && ov.s[3] == 1 && ov.s[2] == ov.w
    }

    /// Whether every depthwise plane of the input and the output lies inside buffers of
    /// `x_len` and `o_len` elements (the planes as [`Conv::dense_planes`] has them).
    fn dw_planes_within(&self, x_len: usize, o_len: usize) -> bool {
        let (xv, ov) = (self.xv, self.ov);
        let last_x = (xv.n - 1) * xv.s[0] + (self.g - 1) * xv.s[1] + xv.h * xv.w;
        let last_o = (ov.n - 1) * ov.s[0] + (self.g - 1) * ov.s[1] + ov.h * ov.w;
        last_x <= x_len && last_o <= o_len
    }

    /// Whether a depthwise convolution's taps are fused multiply-adds with `fused` (the
    /// XNNPACK delegate): square 3×3 and 5×5 kernels at equal strides 1 or 2 without
    /// dilation; else the product and the sum.
    fn dw_fma(&self, fused: bool) -> bool {
        fused
            && self.kh == self.kw
            && matches!(self.kh, 3 | 5)
            && self.stride.0 == self.stride.1
            && matches!(self.stride.0, 1 | 2)
            && self.dil == (1, 1)
    }
}

/// `s` as a slice of `F` when `T` is `F` (the `f32` and `f64` paths use tensors in place).
fn as_same<T: 'static, F: 'static>(s: &[T]) -> Option<&[F]> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<F>() {
        // SAFETY: `T` and `F` are the same type.
        Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<F>(), s.len()) })
    } else {
        None
    }
}

/// Calls `f(y, xs..xe, p)` for the output rows of pixels `p0..p1` (`p`: the first pixel's
/// index).
fn rows_of_pixels(
    ow: usize,
    pix: std::ops::Range<usize>,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let mut p = pix.start;
    while p < pix.end {
        let (y, x0) = (p / ow, p % ow);
        let x1 = ow.min(x0 + pix.end - p);
        f(y, x0, x1, p);
        p += x1 - x0;
    }
}

/// Convolution by im2col and `gemm`, per batch item and group. Work above
/// [`CONV_TASK_WORK`] is split over the thread pool: over (batch item, group) units when
/// there are enough of them (depthwise convolutions), else over blocks of output pixels
/// of each unit. With `f32`/`f64` data, a 1×1 stride-1 convolution reads its input in place
/// and a contiguous output is written by `gemm` directly (bias first).
fn conv2d<T: FElem>(c: &Conv, xs: &[T], ws: &[T], bs: Option<&[T]>, o: &mut [T]) {
    let zero = <T::F as Compute>::ZERO;
    let (xv, wv, ov) = (c.xv, c.wv, c.ov);
    let (cin_g, cout_g, kh, kw) = (c.cin_g, c.cout_g, c.kh, c.kw);
    let ((sh, sw), (ph, pw), (dh, dw)) = (c.stride, c.pad, c.dil);
    let (oh, ow) = (c.oh, c.ow);
    let kk = cin_g * kh * kw;
    let npix = oh * ow;
    let cout = cout_g * c.g;
    if xv.n == 0 || cout == 0 || npix == 0 {
        return;
    }
    // Weights as an F matrix [cout, kk]: the tensor itself when possible.
    let w_in_place = as_same::<T, T::F>(ws).filter(|_| {
        (kw == 1 || wv.s[3] == 1)
            && (kh == 1 || wv.s[2] == kw)
            && (cin_g == 1 || wv.s[1] == kh * kw)
            && (cout == 1 || wv.s[0] == kk)
    });
    // scratch: the weights widened to F, when not used in place.
    let mut wbuf = crate::scratch::take(0, zero);
    if w_in_place.is_none() {
        wbuf.reserve(cout * kk);
        for co in 0..cout {
            for ci in 0..cin_g {
                for i in 0..kh {
                    for j in 0..kw {
                        wbuf.push(
                            ws[co * wv.s[0] + ci * wv.s[1] + i * wv.s[2] + j * wv.s[3]].to_f(),
                        );
                    }
                }
            }
        }
    }
    let wf: &[T::F] = w_in_place.unwrap_or(&wbuf);
    if cin_g == 1 && cout_g == 1 && c.g > 1 {
        depthwise(
            c,
            xs,
            wf,
            bs,
            o,
            DwMode::Fast,
            (f32::NEG_INFINITY, f32::INFINITY),
        );
        return;
    }
    let x_same = as_same::<T, T::F>(xs);
    let direct_in = kh == 1
        && kw == 1
        && (sh, sw, ph, pw) == (1, 1, 0, 0)
        && xv.s[3] == 1
        && (xv.h == 1 || xv.s[2] == xv.w)
        && x_same.is_some();
    let direct_out =
        as_same::<T, T::F>(o).is_some() && ov.s[3] == 1 && (ov.h == 1 || ov.s[2] == ow);
    let (col_rs, acc_rs) = (
        if direct_in { xv.s[1] } else { npix },
        if direct_out { ov.s[1] } else { npix },
    );
    let strides = Strides {
        dst: [acc_rs, 1],
        lhs: [kk, 1],
        rhs: [col_rs, 1],
    };
    let plan = Plan::new::<T::F>(cout_g, npix, kk, strides);
    let units = xv.n * c.g;
    let work = units.saturating_mul(cout_g * kk).saturating_mul(npix);
    // At most two blocks per thread (should tasks per thread rise): every block packs its
    // own copy of one operand.
    let tasks = threads::tasks_for(work, CONV_TASK_WORK).min(2 * threads::num_threads());
    // Fewer units than tasks: split each unit's output pixels or, when there are too few
    // pixels (late layers), its output channels (after im2col of the whole unit).
    let blocks = |axis: Axis, len: usize| match plan.align(axis) {
        Some(a) if tasks > units => (tasks.min(len.div_ceil(a)), a),
        _ => (1, 1),
    };
    let (by_pix, pa) = blocks(Axis::Cols, npix);
    let (by_chan, ca) = blocks(Axis::Rows, cout_g);
    let (split, (chunks, a, len)) = if by_pix >= by_chan {
        (Axis::Cols, (by_pix, pa, npix))
    } else {
        (Axis::Rows, (by_chan, ca, cout_g))
    };
    let block = |j: usize| {
        let r = threads::part(len.div_ceil(a), chunks, j);
        (r.start * a)..(r.end * a).min(len)
    };
    let widest = (0..chunks).map(|j| block(j).len()).max().unwrap_or(0);
    let col_len = if direct_in { 0 } else { kk * npix };
    let acc_len = if direct_out { 0 } else { cout_g * npix };
    let ws_len = match split {
        Axis::Cols => plan.workspace_len::<T::F>(cout_g, widest),
        Axis::Rows => plan.workspace_len::<T::F>(widest, npix),
    };
    // Per task: its own im2col and accumulator buffers (unit split) or only its packing
    // workspace (block split, sharing one im2col and accumulator buffer).
    let (tasks, per_task, shared) = if chunks > 1 {
        (chunks, ws_len, col_len + acc_len)
    } else {
        (tasks.min(units), col_len + acc_len + ws_len, 0)
    };
    // scratch: im2col matrices, product accumulators and gemm packing workspaces.
    let mut buf = crate::scratch::take(shared + tasks * per_task, zero);
    let buf = SharedMut::new(&mut buf);
    let out = SharedMut::new(o);
    let (xaddr, waddr) = (xs.as_ptr() as usize, wf.as_ptr() as usize);
    // The im2col matrix (at `col` in `buf`) of unit `u`, for pixels `pix`.
    let im2col = |u: usize, pix: std::ops::Range<usize>, col: usize| {
        let (n, gi) = (u / c.g, u % c.g);
        for ci in 0..cin_g {
            let cbase = n * xv.s[0] + (gi * cin_g + ci) * xv.s[1];
            for i in 0..kh {
                for j in 0..kw {
                    let r = (ci * kh + i) * kw + j;
                    // x range whose input column is inside the image
                    let lo = (pw.saturating_sub(j * dw)).div_ceil(sw);
                    let hi = (xv.w + pw).saturating_sub(j * dw).div_ceil(sw);
                    rows_of_pixels(ow, pix.clone(), |y, x0, x1, p| {
                        // SAFETY: this unit's pixels of row `r` are written by this task only.
                        let row = unsafe { buf.slice(col + r * npix + p, x1 - x0) };
                        let ih = (y * sh + i * dh) as isize - ph as isize;
                        if ih < 0 || ih as usize >= xv.h {
                            row.fill(zero);
                            return;
                        }
                        let base = cbase + ih as usize * xv.s[2];
                        // Zeros left and right of the image, a strided copy between.
                        let a = lo.clamp(x0, x1);
                        let b = hi.clamp(a, x1);
                        row[..a - x0].fill(zero);
                        row[b - x0..].fill(zero);
                        if a == b {
                            return;
                        }
                        let first = base + (a * sw + j * dw - pw) * xv.s[3];
                        let step = sw * xv.s[3];
                        for (k, v) in row[a - x0..b - x0].iter_mut().enumerate() {
                            *v = xs[first + k * step].to_f();
                        }
                    });
                }
            }
        }
    };
    // Output channels `chans` × pixels `pix` of unit `u` (its im2col matrix done), with the
    // accumulator at `acc` in `buf` and the packing workspace `wsp`.
    let compute = |u: usize,
                   chans: std::ops::Range<usize>,
                   pix: std::ops::Range<usize>,
                   col: usize,
                   acc: usize,
                   wsp: &mut [T::F]| {
        let (n, gi) = (u / c.g, u % c.g);
        let obase = n * ov.s[0] + gi * cout_g * ov.s[1];
        if direct_out {
            // Bias first: gemm adds the product to it.
            for co in chans.clone() {
                let bv = bs.map_or(T::from_f(zero), |b| b[gi * cout_g + co]);
                rows_of_pixels(ow, pix.clone(), |y, x0, x1, _| {
                    // SAFETY: this block of the output belongs to this task.
                    let row =
                        unsafe { out.slice(obase + co * ov.s[1] + y * ov.s[2] + x0, x1 - x0) };
                    row.fill(bv);
                });
            }
        }
        let dst = if direct_out {
            out.as_ptr().cast::<T::F>().wrapping_add(obase)
        } else {
            buf.as_ptr().wrapping_add(acc)
        };
        let rhs = if direct_in {
            (xaddr as *const T::F).wrapping_add(n * xv.s[0] + gi * cin_g * xv.s[1])
        } else {
            buf.as_ptr().wrapping_add(col) as *const T::F
        };
        // SAFETY: the operands are the weight rows of group `gi`, the unit's input (or its
        // im2col matrix) and its output (or accumulator), sized for `strides`; this task
        // alone writes the block.
        unsafe {
            plan.run(
                dst,
                (waddr as *const T::F).wrapping_add(gi * cout_g * kk),
                rhs,
                strides,
                <T::F as Compute>::ONE,
                <T::F as Compute>::ONE,
                direct_out,
                chans.clone(),
                pix.clone(),
                wsp,
            );
        }
        if !direct_out {
            for co in chans {
                let bv = bs.map_or(zero, |b| b[gi * cout_g + co].to_f());
                rows_of_pixels(ow, pix.clone(), |y, x0, x1, p| {
                    // SAFETY: as above; the accumulator row segment is this task's.
                    let a = unsafe { buf.slice(acc + co * npix + p, x1 - x0) };
                    let ob = obase + co * ov.s[1] + y * ov.s[2];
                    for (k, &v) in a.iter().enumerate() {
                        // SAFETY: this output element belongs to this task.
                        unsafe { out.write(ob + (x0 + k) * ov.s[3], T::from_f(v + bv)) };
                    }
                });
            }
        }
    };
    if chunks > 1 {
        for u in 0..units {
            if split == Axis::Rows && !direct_in {
                im2col(u, 0..npix, 0);
            }
            threads::run(chunks, &|t| {
                // SAFETY: task `t` owns packing workspace `t`.
                let wsp = unsafe { buf.slice(shared + t * per_task, per_task) };
                match split {
                    Axis::Cols => {
                        if !direct_in {
                            im2col(u, block(t), 0);
                        }
                        compute(u, 0..cout_g, block(t), 0, col_len, wsp);
                    }
                    Axis::Rows => compute(u, block(t), 0..npix, 0, col_len, wsp),
                }
            });
        }
    } else {
        threads::run_shares(units, tasks, &|t, range| {
            let base = t * per_task;
            // SAFETY: task `t` owns its region of `buf`.
            let wsp = unsafe { buf.slice(base + col_len + acc_len, ws_len) };
            for u in range {
                if !direct_in {
                    im2col(u, 0..npix, base);
                }
                compute(u, 0..cout_g, 0..npix, base, base + col_len, wsp);
            }
        });
    }
}

/// A depthwise convolution (one input and one output channel per group), computed
/// directly. Each task copies its (batch item, channel) planes, widened to the compute type,
/// into a zero-padded plane, then computes the outputs in blocks of 8 or 16 pixels of a
/// row (the vector width: [`dw_plane_dispatch`]), [`DW_BLOCKS`] blocks (of any rows) at a time with the accumulators in registers:
/// every output is `sum(w[i, j] * x[.., ..])` over the taps in order `(i, j)`, from zero,
/// plus the bias. (The padding's zero products leave a sum starting from +0 unchanged, so
/// the result is the unpadded sum's.) Split over planes above [`DEPTHWISE_TASK_WORK`].
///
/// `f32` planes with strides 1 or 2 run on AVX-512F where the CPU has it ([`dw512`]), with
/// the same sums in the same order (`DwMode::Portable` forces the portable path, for the
/// tests; `DwMode::Fused`: see [`depthwise_f32`]).
fn depthwise<T: FElem>(
    c: &Conv,
    xs: &[T],
    wf: &[T::F],
    bs: Option<&[T]>,
    o: &mut [T],
    mode: DwMode,
    clamp: (f32, f32),
) -> bool {
    let zero = <T::F as Compute>::ZERO;
    let (xv, kh, kw, oh, ow) = (c.xv, c.kh, c.kw, c.oh, c.ow);
    let ((sh, sw), (pw, dh, dw)) = (c.stride, (c.pad.1, c.dil.0, c.dil.1));
    let planes = xv.n * c.g;
    let tasks = threads::tasks_for(planes * oh * ow * kh * kw, DEPTHWISE_TASK_WORK).min(planes);
    // The padded plane: rows `ih + ph` for the input rows read, `pwid` columns; then slack
    // for the lanes past the last output column of the last row (computed, not stored).
    let pwid = xv.w + 2 * pw;
    let prows = (oh - 1) * sh + (kh - 1) * dh + 1;
    let out = SharedMut::new(o);
    let g = DwGeom {
        c,
        xs,
        wf,
        bs,
        out: &out,
        pwid,
        prows,
        taps: Taps {
            kh,
            kw,
            rstep: dh * pwid,
            cstep: dw,
        },
    };
    let fast = match mode {
        DwMode::Portable => None,
        DwMode::Fast => dw512::Fast::new(&g, clamp, false),
        DwMode::Fused => dw512::Fast::new(&g, clamp, true),
    };
    // scratch: one padded plane per task (their borders stay zero). Planes on the row
    // kernel (read in place, `dw512`) do not use it, but the loan stays: without it the scratch pool's
    // buffers change hands in another order and the XNNPACK tiny_cnn fixture's next
    // convolution allocates on every run (tests/no_alloc.rs).
    let per_task = (prows * pwid + DW_LANES_MAX * sw + pwid).next_multiple_of(16);
    let mut pads = crate::scratch::take(tasks * per_task, zero);
    let pads = SharedMut::new(&mut pads);
    threads::run_shares(planes, tasks, &|t, range| {
        // SAFETY: task `t`'s own padded plane.
        let pad = unsafe { pads.slice(t * per_task, per_task) };
        for plane in range {
            match &fast {
                Some(f) => f.plane(&g, plane, pad),
                None => dw_plane_dispatch(&g, plane, pad),
            }
        }
    });
    fast.is_some()
}

/// The output clamp of the XNNPACK delegate (`lo`/`hi` kept in that order, NaN kept).
#[inline(always)]
pub fn clamp_f32(x: f32, lo: f32, hi: f32) -> f32 {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

/// An `f32` depthwise convolution (the input's `c` channels one per group) with the
/// weights `[c, kh, kw]` contiguous and an optional bias, then every output clamped with
/// [`clamp_f32`]: the sums of `aten::convolution.out`'s depthwise path, in its order. With
/// `fused` (the XNNPACK delegate), square 3×3 and 5×5 kernels at strides 1 or 2 without
/// dilation take one fused multiply-add a tap where the AVX-512 planes run (XNNPACK's own
/// rounding; the same order), other shapes and CPUs the product and sum.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_f32(
    (xv, xs): (View4, &[f32]),
    (w, bs): (&[f32], Option<&[f32]>),
    (ov, o): (View4, &mut [f32]),
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
    (lo, hi): (f32, f32),
    fused: bool,
) -> Result<()> {
    let [kh, kw] = kernel;
    let eff = |i: usize, k: usize, s: usize, p: usize, d: usize| {
        (i + 2 * p)
            .checked_sub((k.max(1) - 1) * d + 1)
            .map(|v| v / s.max(1) + 1)
    };
    let ok = xv.c == ov.c
        && xv.n == ov.n
        && kh * kw > 0
        && !stride.contains(&0)
        && !dil.contains(&0)
        && w.len() == xv.c * kh * kw
        && bs.is_none_or(|b| b.len() == xv.c)
        && eff(xv.h, kh, stride[0], pad[0], dil[0]) == Some(ov.h)
        && eff(xv.w, kw, stride[1], pad[1], dil[1]) == Some(ov.w);
    if !ok {
        return Err(Error::invalid_argument(format!(
            "depthwise: input {xv:?}, output {ov:?}, kernel {kernel:?}, {} weights",
            w.len()
        )));
    }
    if xv.n * xv.c * ov.h * ov.w == 0 {
        return Ok(());
    }
    let c = Conv::depthwise(xv, ov, kernel, stride, pad, dil);
    #[cfg(target_arch = "x86_64")]
    if dw_chan::run(&c, xs, (w, bs), o, (lo, hi), fused)
        || dw_small::run(&c, xs, (w, bs), o, (lo, hi), fused)
    {
        return Ok(());
    }
    let mode = if fused { DwMode::Fused } else { DwMode::Fast };
    if !depthwise(&c, xs, w, bs, o, mode, (lo, hi))
        && (lo > f32::NEG_INFINITY || hi < f32::INFINITY)
    {
        for n in 0..ov.n {
            for ch in 0..ov.c {
                for y in 0..ov.h {
                    for x in 0..ov.w {
                        let i = n * ov.s[0] + ch * ov.s[1] + y * ov.s[2] + x * ov.s[3];
                        o[i] = clamp_f32(o[i], lo, hi);
                    }
                }
            }
        }
    }
    Ok(())
}

/// How [`depthwise`] computes its planes.
#[derive(Clone, Copy)]
enum DwMode {
    /// The portable loops only (the tests' reference).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
    /// The AVX-512 planes where they apply: the portable sums, bit for bit.
    Fast,
    /// The same, with one fused multiply-add a tap in the row kernel.
    Fused,
}

/// The most output pixels of a row computed together (one 512-bit vector of `f32`).
const DW_LANES_MAX: usize = 16;

/// Blocks of pixels computed together (independent accumulators).
const DW_BLOCKS: usize = 4;

/// What every plane of a depthwise convolution shares: geometry, operands, output.
struct DwGeom<'a, T: FElem> {
    c: &'a Conv,
    xs: &'a [T],
    wf: &'a [T::F],
    bs: Option<&'a [T]>,
    out: &'a SharedMut<'a, T>,
    /// Padded plane width and rows.
    pwid: usize,
    prows: usize,
    taps: Taps,
}

/// Kernel taps `(i, j)`, `i < kh`, `j < kw`, whose inputs are at `i * rstep + j * cstep`
/// in the padded plane.
#[derive(Clone, Copy)]
struct Taps {
    kh: usize,
    kw: usize,
    rstep: usize,
    cstep: usize,
}

/// [`dw_plane`] with AVX-512 code generation and blocks of 16 pixels for rows of more than
/// 8 outputs, else with AVX2 and blocks of 8, where the CPU has them (every output is the
/// same sum in the same order whatever the block width: the results do not depend on it).
fn dw_plane_dispatch<T: FElem>(g: &DwGeom<'_, T>, plane: usize, pad: &mut [T::F]) {
    #[cfg(target_arch = "x86_64")]
    {
        if g.c.ow > 8 && std::arch::is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f")]
            fn avx512<T: FElem>(g: &DwGeom<'_, T>, plane: usize, pad: &mut [T::F]) {
                dw_plane::<T, 16>(g, plane, pad)
            }
            // SAFETY: the CPU has AVX-512F.
            return unsafe { avx512(g, plane, pad) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            #[target_feature(enable = "avx2")]
            fn avx2<T: FElem>(g: &DwGeom<'_, T>, plane: usize, pad: &mut [T::F]) {
                dw_plane::<T, 8>(g, plane, pad)
            }
            // SAFETY: the CPU has AVX2.
            return unsafe { avx2(g, plane, pad) };
        }
    }
    dw_plane::<T, 8>(g, plane, pad)
}

/// One (batch item, channel) plane of a depthwise convolution (see [`depthwise`]), in
/// blocks of `L` ≤ [`DW_LANES_MAX`] pixels.
#[inline(always)]
fn dw_plane<T: FElem, const L: usize>(g: &DwGeom<'_, T>, plane: usize, pad: &mut [T::F]) {
    let (c, out) = (g.c, g.out);
    let (xv, ov) = (c.xv, c.ov);
    let (kh, kw, oh, ow) = (c.kh, c.kw, c.oh, c.ow);
    let (sh, sw) = c.stride;
    let (n, ch) = (plane / c.g, plane % c.g);
    let xbase = n * xv.s[0] + ch * xv.s[1];
    let obase = n * ov.s[0] + ch * ov.s[1];
    let w = &g.wf[ch * kh * kw..(ch + 1) * kh * kw];
    let bv = g.bs.map_or(<T::F as Compute>::ZERO, |b| b[ch].to_f());
    dw_fill(g, xbase, pad);
    let pad = &*pad;
    let xblocks = ow.div_ceil(L);
    let nblocks = oh * xblocks;
    let mut b = 0;
    while b < nblocks {
        let cnt = DW_BLOCKS.min(nblocks - b);
        let mut base = [0usize; DW_BLOCKS];
        for (k, bk) in base.iter_mut().enumerate().take(cnt) {
            let (y, x0) = ((b + k) / xblocks, (b + k) % xblocks * L);
            *bk = y * sh * g.pwid + x0 * sw;
        }
        // (Blocks past `cnt` read from 0 and are not stored.)
        let acc = match sw {
            1 => dw_blocks::<T::F, 1, L>(pad, w, g.taps, &base, 1),
            2 => dw_blocks::<T::F, 2, L>(pad, w, g.taps, &base, 2),
            _ => dw_blocks::<T::F, 0, L>(pad, w, g.taps, &base, sw),
        };
        for (k, a) in acc.iter().enumerate().take(cnt) {
            let (y, x0) = ((b + k) / xblocks, (b + k) % xblocks * L);
            let lanes = L.min(ow - x0);
            let orow = obase + y * ov.s[2];
            if ov.s[3] == 1 {
                // SAFETY: plane (n, ch) is this task's.
                let o = unsafe { out.slice(orow + x0, lanes) };
                for (o, &v) in o.iter_mut().zip(a) {
                    *o = T::from_f(v + bv);
                }
            } else {
                for (l, &v) in a.iter().enumerate().take(lanes) {
                    // SAFETY: as above.
                    unsafe { out.write(orow + (x0 + l) * ov.s[3], T::from_f(v + bv)) };
                }
            }
        }
        b += cnt;
    }
}

/// Copies the plane at `xbase` into the padded plane, widened (rows and columns outside the
/// image stay 0).
#[inline(always)]
fn dw_fill<T: FElem>(g: &DwGeom<'_, T>, xbase: usize, pad: &mut [T::F]) {
    let (xs, xv, (ph, pw)) = (g.xs, g.c.xv, g.c.pad);
    for r in ph..g.prows.min(ph + xv.h) {
        let src = xbase + (r - ph) * xv.s[2];
        let dst = &mut pad[r * g.pwid + pw..r * g.pwid + pw + xv.w];
        if xv.s[3] == 1 {
            for (d, s) in dst.iter_mut().zip(&xs[src..src + xv.w]) {
                *d = s.to_f();
            }
        } else {
            for (k, d) in dst.iter_mut().enumerate() {
                *d = xs[src + k * xv.s[3]].to_f();
            }
        }
    }
}

/// [`DW_BLOCKS`] blocks of `L` outputs, block `k` reading the padded plane from `base[k]`
/// with a lane step of `sw` (`S`, or `sw` when `S` is 0): per tap in order, `acc += w * x`.
#[inline(always)]
fn dw_blocks<F: Float, const S: usize, const L: usize>(
    pad: &[F],
    w: &[F],
    taps: Taps,
    base: &[usize; DW_BLOCKS],
    sw: usize,
) -> [[F; L]; DW_BLOCKS] {
    let step = if S == 0 { sw } else { S };
    let span = (L - 1) * step + 1;
    let mut acc = [[<F as Compute>::ZERO; L]; DW_BLOCKS];
    for i in 0..taps.kh {
        for j in 0..taps.kw {
            let (wv, off) = (w[i * taps.kw + j], i * taps.rstep + j * taps.cstep);
            for (a, &bk) in acc.iter_mut().zip(base) {
                let x = &pad[bk + off..bk + off + span];
                for (l, a) in a.iter_mut().enumerate() {
                    *a += wv * x[l * step];
                }
            }
        }
    }
    acc
}

/// Transposed convolution (`convolution` with `transposed=True`): per batch item and group,
/// `col = Wᵀ · x` with `gemm`, then `col` is scattered into the output (col2im). The
/// weight is `[C_in, C_out / groups, kH, kW]`.
fn conv_transposed(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::convolution.out";
    let x = ctx.tensor(0)?;
    let w = ctx.tensor(1)?;
    let bias = ctx.opt_tensor(2)?;
    let one_d = x.dim() == 3;
    if x.dim() != w.dim() || !(x.dim() == 3 || x.dim() == 4) {
        return Err(Error::invalid_argument(format!(
            "{OP}: input {:?} and weight {:?} must both be 3-D or 4-D",
            x.sizes(),
            w.sizes()
        )));
    }
    let (sh, sw) = pair(OP, "stride", ctx.int_list(3)?, one_d, 1)?;
    let (ph, pw) = pair(OP, "padding", ctx.int_list(4)?, one_d, 0)?;
    let (dh, dw) = pair(OP, "dilation", ctx.int_list(5)?, one_d, 1)?;
    let (oph, opw) = pair(OP, "output_padding", ctx.int_list(7)?, one_d, 0)?;
    let groups = ctx.int(8)?;
    let xv = view4(OP, &x, true)?;
    let wv = view4(OP, &w, true)?;
    if groups <= 0 || xv.c % groups as usize != 0 || wv.n != xv.c {
        return Err(Error::invalid_argument(format!(
            "{OP}: groups={groups}, input channels {} and weight {:?} do not match",
            xv.c,
            w.sizes()
        )));
    }
    if sh == 0 || sw == 0 || dh == 0 || dw == 0 || oph >= sh.max(dh) || opw >= sw.max(dw) {
        return Err(Error::invalid_argument(format!(
            "{OP}: invalid stride/dilation/output_padding for a transposed convolution"
        )));
    }
    let g = groups as usize;
    let (cin_g, cout_g, kh, kw) = (xv.c / g, wv.c, wv.h, wv.w);
    let cout = cout_g * g;
    let full = |i: usize, s: usize, d: usize, k: usize, op: usize| {
        (i.max(1) - 1) * s + d * (k.max(1) - 1) + op + 1
    };
    let (fh, fw) = (full(xv.h, sh, dh, kh, oph), full(xv.w, sw, dw, kw, opw));
    if fh < 2 * ph + 1 || fw < 2 * pw + 1 {
        return Err(Error::invalid_argument(format!(
            "{OP}: padding leaves an empty output"
        )));
    }
    let (oh, ow) = (fh - 2 * ph, fw - 2 * pw);
    let (mut out, ov) = conv_out(ctx, &x, &w, bias.as_ref(), one_d, [xv.n, cout, oh, ow])?;
    let m = cout_g * kh * kw;
    let npix = xv.h * xv.w;
    let opix = oh * ow;
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let ws = w.data::<T>()?;
        let bs = match &bias {
            Some(b) => Some(b.data::<T>()?),
            None => None,
        };
        let o = out.data_mut::<T>()?;
        // scratch: widened weights [C_in, m], one group's input [cin_g, npix], the product
        // [m, npix] and the output accumulator [cout_g, opix].
        let mut wf = crate::scratch::take::<F>(0, F::ZERO);
        wf.reserve(xv.c * m);
        for ci in 0..xv.c {
            for co in 0..cout_g {
                for i in 0..kh {
                    for j in 0..kw {
                        wf.push(ws[ci * wv.s[0] + co * wv.s[1] + i * wv.s[2] + j * wv.s[3]].to_f());
                    }
                }
            }
        }
        let mut xf = crate::scratch::take(cin_g * npix, F::ZERO);
        let mut col = crate::scratch::take(m * npix, F::ZERO);
        let mut acc = crate::scratch::take(cout_g * opix, F::ZERO);
        for n in 0..xv.n {
            for gi in 0..g {
                for ci in 0..cin_g {
                    let cb = n * xv.s[0] + (gi * cin_g + ci) * xv.s[1];
                    for y in 0..xv.h {
                        for xi in 0..xv.w {
                            xf[ci * npix + y * xv.w + xi] =
                                xs[cb + y * xv.s[2] + xi * xv.s[3]].to_f();
                        }
                    }
                }
                let d = GemmDims {
                    batch: 1,
                    m,
                    n: npix,
                    k: cin_g,
                };
                let a = MatRef {
                    data: &wf[gi * cin_g * m..(gi + 1) * cin_g * m],
                    strides: [0, 1, m],
                };
                let b = MatRef {
                    data: &xf,
                    strides: [0, npix, 1],
                };
                gemm_batched(OP, d, a, b, &mut col, [0, npix, 1], F::ONE, false)?;
                acc.iter_mut().for_each(|v| *v = F::ZERO);
                for co in 0..cout_g {
                    for i in 0..kh {
                        for j in 0..kw {
                            let row = &col[((co * kh + i) * kw + j) * npix..][..npix];
                            for y in 0..xv.h {
                                let oy = (y * sh + i * dh) as isize - ph as isize;
                                if oy < 0 || oy as usize >= oh {
                                    continue;
                                }
                                let abase = co * opix + oy as usize * ow;
                                for xi in 0..xv.w {
                                    let ox = (xi * sw + j * dw) as isize - pw as isize;
                                    if ox >= 0 && (ox as usize) < ow {
                                        acc[abase + ox as usize] += row[y * xv.w + xi];
                                    }
                                }
                            }
                        }
                    }
                }
                for co in 0..cout_g {
                    let c = gi * cout_g + co;
                    let bias_v = bs.map_or(F::ZERO, |b| b[c].to_f());
                    let obase = n * ov.s[0] + c * ov.s[1];
                    for y in 0..oh {
                        for xo in 0..ow {
                            o[obase + y * ov.s[2] + xo * ov.s[3]] =
                                T::from_f(acc[co * opix + y * ow + xo] + bias_v);
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

/// Window elements of pooling work below which it stays on the calling thread, and the
/// least a thread is given.
const POOL_TASK: usize = 1 << 15;

/// Output length of a pooling window along one dim (PyTorch's rule, `ceil_mode` included).
pub fn pool_out_size(
    op: &str,
    i: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    ceil: bool,
) -> Result<usize> {
    let eff = d * (k.max(1) - 1) + 1;
    if s == 0 || k == 0 || i + 2 * p < eff || p > k / 2 {
        return Err(Error::invalid_argument(format!(
            "{op}: invalid pooling (input {i}, kernel {k}, stride {s}, padding {p}, dilation {d})"
        )));
    }
    let num = i + 2 * p - eff + if ceil { s - 1 } else { 0 };
    let mut o = num / s + 1;
    if ceil && (o - 1) * s >= i + p {
        o -= 1;
    }
    Ok(o)
}

/// `x`'s sizes with the last two replaced by `oh`, `ow`.
pub fn out_sizes(x: &TensorRef<'_>, oh: usize, ow: usize) -> Result<Shape> {
    let mut s = Shape::from_slice(x.sizes())?;
    let n = s.len();
    s[n - 2] = oh;
    s[n - 1] = ow;
    Ok(s)
}

/// `max_pool2d_with_indices`: args [self, kernel_size, stride, padding, dilation,
/// ceil_mode, out, indices]. Indices are flat offsets within each H×W plane.
/// Where nothing reads the indices ([`max_pool_prepare`]), they are not computed.
fn max_pool2d_with_indices_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let with_idx = ctx.prepared::<IndicesUnread>().is_none();
    max_pool2d(ctx, "aten::max_pool2d_with_indices.out", with_idx)
}

/// The state of a `max_pool2d_with_indices` call site whose indices nothing reads.
struct IndicesUnread;

/// `max_pool2d_with_indices`' load-time hook: a call whose indices (argument 7) nothing
/// reads computes the values alone, as XNNPACK's max pooling (torchvision's resnets use
/// the values only; the indices are int64, twice the values' bytes, and took over half
/// the pooling's time).
fn max_pool_prepare(ctx: &KernelContext<'_>) -> Result<Option<etch_core::Prepared>> {
    Ok(ctx
        .is_unread(7)
        .then(|| std::sync::Arc::new(IndicesUnread) as etch_core::Prepared))
}

/// Max pooling without the indices (XNNPACK's `XNNMaxPooling2d`, which has none): args
/// [self, kernel_size, stride, padding, dilation, ceil_mode, out], the values of
/// `max_pool2d_with_indices`.
pub fn max_pool2d_values_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    max_pool2d(ctx, "XNNMaxPooling2d", false)
}

/// [`max_pool2d_with_indices_out`], writing the indices (argument 7) when `with_idx`.
fn max_pool2d(ctx: &mut KernelContext<'_>, op: &str, with_idx: bool) -> Result<()> {
    let x = ctx.tensor(0)?;
    let (kh, kw) = pair(op, "kernel_size", ctx.int_list(1)?, false, 0)?;
    let stride = ctx.int_list(2)?;
    let (sh, sw) = if stride.is_empty() {
        (kh, kw)
    } else {
        pair(op, "stride", stride, false, 0)?
    };
    let (ph, pw) = pair(op, "padding", ctx.int_list(3)?, false, 0)?;
    let (dh, dw) = pair(op, "dilation", ctx.int_list(4)?, false, 0)?;
    let ceil = ctx.bool(5)?;
    let xv = view4(op, &x, false)?;
    let oh = pool_out_size(op, xv.h, kh, sh, ph, dh, ceil)?;
    let ow = pool_out_size(op, xv.w, kw, sw, pw, dw, ceil)?;
    let osz = out_sizes(&x, oh, ow)?;
    let mut out = ctx.resize_out(6, &osz)?;
    let mut idx = match with_idx {
        true => Some(ctx.resize_out(7, &osz)?),
        false => None,
    };
    same_dtype(op, x.dtype(), out.dtype())?;
    if let Some(idx) = &idx
        && idx.dtype() != etch_core::ScalarType::Long
    {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64, got {}",
            idx.dtype()
        )));
    }
    let ov = view4(op, &out, false)?;
    let iv = idx.as_ref().map(|i| view4(op, i, false)).transpose()?;
    let g = PoolGeom {
        h: xv.h,
        w: xv.w,
        oh,
        ow,
        kernel: [kh, kw],
        stride: [sh, sw],
        pad: [ph, pw],
        dil: [dh, dw],
    };
    let tasks = threads::tasks_for(xv.n * xv.c * oh * ow * kh * kw, POOL_TASK);
    // Channels-last float32 feature maps (the load-time layout choice): whole pixels.
    if x.dtype() == etch_core::ScalarType::Float
        && x.is_channels_last()
        && out.is_channels_last()
        && idx.as_ref().is_none_or(|i| i.is_channels_last())
    {
        let (xs, o) = (x.data::<f32>()?, out.data_mut::<f32>()?);
        let io = match &mut idx {
            Some(t) => Some(t.data_mut::<i64>()?),
            None => None,
        };
        if maxpool::pixels_f32(&g, (xv.n, xv.c), xs, o, io) {
            return Ok(());
        }
    }
    let io = match &mut idx {
        Some(idx) => Some(SharedMut::new(idx.data_mut::<i64>()?)),
        None => None,
    };
    // Contiguous float32 planes: 16 output columns at a time (same values and indices).
    let dense = |v: &View4, h: usize, w: usize| v.s[3] == 1 && (h == 1 || v.s[2] == w);
    if x.dtype() == etch_core::ScalarType::Float
        && dense(&xv, xv.h, xv.w)
        && dense(&ov, oh, ow)
        && iv.as_ref().is_none_or(|iv| dense(iv, oh, ow))
        && maxpool::fast_available(&g)
    {
        let xs = x.data::<f32>()?;
        let o = SharedMut::new(out.data_mut::<f32>()?);
        threads::run_parts(xv.n * xv.c, tasks, &|planes| {
            for plane in planes {
                let (n, c) = (plane / xv.c, plane % xv.c);
                let xb = n * xv.s[0] + c * xv.s[1];
                // SAFETY: plane (n, c) of the output and the indices is this task's.
                let (op, ip) = unsafe {
                    (
                        o.slice(n * ov.s[0] + c * ov.s[1], oh * ow),
                        io.as_ref()
                            .zip(iv.as_ref())
                            .map(|(io, iv)| io.slice(n * iv.s[0] + c * iv.s[1], oh * ow)),
                    )
                };
                maxpool::plane_f32(&g, &xs[xb..xb + xv.h * xv.w], op, ip);
            }
        });
        return Ok(());
    }
    dispatch_float!(x.dtype(), op, "input", |T| {
        let xs = x.data::<T>()?;
        let o = SharedMut::new(out.data_mut::<T>()?);
        threads::run_parts(xv.n * xv.c, tasks, &|planes| {
            for plane in planes {
                let (n, c) = (plane / xv.c, plane % xv.c);
                let base = n * xv.s[0] + c * xv.s[1];
                for y in 0..oh {
                    for xo in 0..ow {
                        let (best, bi) = window_max(&g, y, xo, |ih, iw| {
                            xs[base + ih * xv.s[2] + iw * xv.s[3]].to_f()
                        });
                        let oi = n * ov.s[0] + c * ov.s[1] + y * ov.s[2] + xo * ov.s[3];
                        // SAFETY: plane (n, c) is this task's.
                        unsafe { o.write(oi, T::from_f(best)) };
                        if let (Some(io), Some(iv)) = (&io, &iv) {
                            let ii = n * iv.s[0] + c * iv.s[1] + y * iv.s[2] + xo * iv.s[3];
                            // SAFETY: as above.
                            unsafe { io.write(ii, bi) };
                        }
                    }
                }
            }
        });
        Ok(())
    })
}

/// `avg_pool2d`: args [self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override?, out].
fn avg_pool2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::avg_pool2d.out";
    let x = ctx.tensor(0)?;
    let (kh, kw) = pair(OP, "kernel_size", ctx.int_list(1)?, false, 0)?;
    let stride = ctx.int_list(2)?;
    let (sh, sw) = if stride.is_empty() {
        (kh, kw)
    } else {
        pair(OP, "stride", stride, false, 0)?
    };
    let (ph, pw) = pair(OP, "padding", ctx.int_list(3)?, false, 0)?;
    let ceil = ctx.bool(4)?;
    let include_pad = ctx.bool(5)?;
    let divisor = ctx.opt_int(6)?;
    if divisor == Some(0) {
        return Err(Error::invalid_argument(format!(
            "{OP}: divisor_override must be non-zero"
        )));
    }
    let xv = view4(OP, &x, false)?;
    let oh = pool_out_size(OP, xv.h, kh, sh, ph, 1, ceil)?;
    let ow = pool_out_size(OP, xv.w, kw, sw, pw, 1, ceil)?;
    let osz = out_sizes(&x, oh, ow)?;
    let mut out = ctx.resize_out(7, &osz)?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    let ov = view4(OP, &out, false)?;
    let tasks = threads::tasks_for(xv.n * xv.c * oh * ow * kh * kw, POOL_TASK);
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let o = SharedMut::new(out.data_mut::<T>()?);
        threads::run_parts(xv.n * xv.c, tasks, &|planes| {
            for plane in planes {
                let (n, c) = (plane / xv.c, plane % xv.c);
                let base = n * xv.s[0] + c * xv.s[1];
                for y in 0..oh {
                    for xo in 0..ow {
                        let hs = (y * sh) as isize - ph as isize;
                        let ws = (xo * sw) as isize - pw as isize;
                        let he = (hs + kh as isize).min((xv.h + ph) as isize);
                        let we = (ws + kw as isize).min((xv.w + pw) as isize);
                        let pool = ((he - hs) * (we - ws)) as i64;
                        let (hs, ws) = (hs.max(0) as usize, ws.max(0) as usize);
                        let (he, we) = (
                            he.min(xv.h as isize) as usize,
                            we.min(xv.w as isize) as usize,
                        );
                        let mut sum = F::ZERO;
                        for ih in hs..he {
                            for iw in ws..we {
                                sum += xs[base + ih * xv.s[2] + iw * xv.s[3]].to_f();
                            }
                        }
                        let div = match divisor {
                            Some(d) => d,
                            None if include_pad => pool,
                            None => ((he.saturating_sub(hs)) * (we.saturating_sub(ws))) as i64,
                        };
                        let v = if div == 0 {
                            F::ZERO
                        } else {
                            sum.div(<F as Compute>::from_i64(div))
                        };
                        let oi = n * ov.s[0] + c * ov.s[1] + y * ov.s[2] + xo * ov.s[3];
                        // SAFETY: plane (n, c) is this task's.
                        unsafe { o.write(oi, T::from_f(v)) };
                    }
                }
            }
        });
        Ok(())
    })
}

/// `_adaptive_avg_pool2d`: args [self, output_size, out].
fn adaptive_avg_pool2d_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_adaptive_avg_pool2d.out";
    let x = ctx.tensor(0)?;
    let (oh, ow) = pair(OP, "output_size", ctx.int_list(1)?, false, 0)?;
    let xv = view4(OP, &x, false)?;
    if (oh == 0 || ow == 0) && xv.h * xv.w != 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: output_size must be positive"
        )));
    }
    let osz = out_sizes(&x, oh, ow)?;
    let mut out = ctx.resize_out(2, &osz)?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    let ov = view4(OP, &out, false)?;
    // Global pooling of contiguous planes into contiguous outputs: one row sum a plane.
    let (hw, planes) = (xv.h * xv.w, xv.n * xv.c);
    if (oh, ow) == (1, 1)
        && hw > 0
        && x.dtype() == etch_core::ScalarType::Float
        && x.is_default_dim_order()
        && out.is_default_dim_order()
    {
        let o = out.data_mut::<f32>()?;
        if let Some(o) = o.get_mut(..planes)
            && crate::reduce::sum_rows_f32(x.data::<f32>()?, hw, o, true)
        {
            return Ok(());
        }
    }
    let tasks = threads::tasks_for(xv.n * xv.c * xv.h.max(oh) * xv.w.max(ow), POOL_TASK);
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let xs = x.data::<T>()?;
        let o = SharedMut::new(out.data_mut::<T>()?);
        threads::run_parts(xv.n * xv.c, tasks, &|planes| {
            for plane in planes {
                let (n, c) = (plane / xv.c, plane % xv.c);
                let base = n * xv.s[0] + c * xv.s[1];
                for y in 0..oh {
                    let (hs, he) = (y * xv.h / oh, ((y + 1) * xv.h).div_ceil(oh));
                    for xo in 0..ow {
                        let (ws, we) = (xo * xv.w / ow, ((xo + 1) * xv.w).div_ceil(ow));
                        let mut sum = F::ZERO;
                        for ih in hs..he {
                            for iw in ws..we {
                                sum += xs[base + ih * xv.s[2] + iw * xv.s[3]].to_f();
                            }
                        }
                        let cnt = ((he - hs) * (we - ws)).max(1) as i64;
                        let oi = n * ov.s[0] + c * ov.s[1] + y * ov.s[2] + xo * ov.s[3];
                        let v = T::from_f(sum.div(<F as Compute>::from_i64(cnt)));
                        // SAFETY: plane (n, c) is this task's.
                        unsafe { o.write(oi, v) };
                    }
                }
            }
        });
        Ok(())
    })
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::convolution.out", convolution_out)?;
    reg.register_prepare("aten::convolution.out", convolution_prepare);
    reg.register_fusion("aten::convolution.out", fused::fuse_convolution);
    reg.register_layout("aten::convolution.out", convolution_layout);
    reg.register(
        "aten::max_pool2d_with_indices.out",
        max_pool2d_with_indices_out,
    )?;
    reg.register_prepare("aten::max_pool2d_with_indices.out", max_pool_prepare);
    reg.register("aten::avg_pool2d.out", avg_pool2d_out)?;
    reg.register("aten::_adaptive_avg_pool2d.out", adaptive_avg_pool2d_out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A contiguous NCHW view.
    fn view(n: usize, c: usize, h: usize, w: usize) -> View4 {
        View4 {
            n,
            c,
            h,
            w,
            s: [c * h * w, h * w, w, 1],
        }
    }

    /// Pseudo-random values in [-1, 1), with some negative zeros.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if i % 13 == 5 {
                    -0.0
                } else {
                    ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
                }
            })
            .collect()
    }

    /// The `f32` depthwise planes on AVX-512F give the portable path's bits, on 1 and 2
    /// threads, over kernel sizes, strides, dilations, paddings and row lengths (tails).
    #[test]
    fn depthwise_fast_path_is_bit_identical() {
        let shapes = [
            (1, 1),
            (7, 7),
            (14, 14),
            (16, 9),
            (17, 5),
            (33, 12),
            (56, 20),
            (112, 8),
        ];
        let mut case = 0u64;
        for (w, h) in shapes {
            for (k, dil) in [(3, 1), (5, 1), (3, 2), (1, 1)] {
                for (sh, sw) in [(1, 1), (2, 2), (1, 2), (2, 1)] {
                    for pad in [0, k / 2 * dil] {
                        let eff = (k - 1) * dil + 1;
                        if h + 2 * pad < eff || w + 2 * pad < eff {
                            continue;
                        }
                        case += 1;
                        let (n, ch) = (2, 3);
                        let (oh, ow) = ((h + 2 * pad - eff) / sh + 1, (w + 2 * pad - eff) / sw + 1);
                        let (xv, ov) = (view(n, ch, h, w), view(n, ch, oh, ow));
                        let c = Conv::depthwise(xv, ov, [k; 2], [sh, sw], [pad; 2], [dil; 2]);
                        let xs = values(n * ch * h * w, case);
                        let wf = values(ch * k * k, case + 1000);
                        let bias = values(ch, case + 2000);
                        let inf = f32::INFINITY;
                        let clamps = [(-inf, inf), (0.0, inf), (-0.3, 0.4), (0.5, -0.5)];
                        for (bi, (lo, hi)) in clamps.into_iter().enumerate() {
                            let bs = (bi % 2 == 1).then_some(&bias[..]);
                            for threads in [1, 2] {
                                threads::set_num_threads(threads);
                                let mut want = vec![f32::NAN; n * ch * oh * ow];
                                let mut got = want.clone();
                                depthwise(
                                    &c,
                                    &xs,
                                    &wf,
                                    bs,
                                    &mut want,
                                    DwMode::Portable,
                                    (-inf, inf),
                                );
                                for v in &mut want {
                                    *v = clamp_f32(*v, lo, hi);
                                }
                                let fast =
                                    depthwise(&c, &xs, &wf, bs, &mut got, DwMode::Fast, (lo, hi));
                                assert_eq!(fast, dw512::fast_available());
                                let (a, b): (Vec<u32>, Vec<u32>) = (
                                    want.iter().map(|v| v.to_bits()).collect(),
                                    got.iter().map(|v| v.to_bits()).collect(),
                                );
                                assert_eq!(
                                    a, b,
                                    "w {w} h {h} k {k} dil {dil} stride {sh}x{sw} pad {pad}"
                                );
                            }
                        }
                    }
                }
            }
        }
        threads::set_num_threads(1);
    }

    /// With `fused`, the row kernel's square 3×3 and 5×5 planes at strides 1 and 2 are one
    /// fused multiply-add a tap, in tap order from +0, then `+ bias` and the clamp (the
    /// scalar `mul_add` reference), on 1 and 2 threads; other shapes keep the portable sums.
    #[test]
    fn depthwise_fused_taps_match_mul_add() {
        let mut case = 0u64;
        for (w, h) in [
            (7, 7),
            (14, 14),
            (17, 5),
            (33, 12),
            (56, 20),
            (112, 9),
            (3, 2),
            // Small planes (`dw_small`): 4x4, 8x8, 6x5.
            (4, 4),
            (8, 8),
            (6, 5),
        ] {
            for fused in [true, false] {
                for k in [3, 5] {
                    for s in [1, 2] {
                        for pad in [0, k / 2] {
                            if h + 2 * pad < k || w + 2 * pad < k {
                                continue;
                            }
                            case += 1;
                            let (n, ch) = (2, 3);
                            let (oh, ow) = ((h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1);
                            let (xv, ov) = (view(n, ch, h, w), view(n, ch, oh, ow));
                            let xs = values(n * ch * h * w, case);
                            let wf = values(ch * k * k, case + 1000);
                            let bias = values(ch, case + 2000);
                            let mut want = vec![0f32; n * ch * oh * ow];
                            for (idx, o) in want.iter_mut().enumerate() {
                                let (x, y, c, b) = (
                                    idx % ow,
                                    idx / ow % oh,
                                    idx / (ow * oh) % ch,
                                    idx / (ow * oh * ch),
                                );
                                let mut acc = 0f32;
                                for i in 0..k {
                                    for j in 0..k {
                                        let (iy, ix) = (
                                            (y * s + i) as isize - pad as isize,
                                            (x * s + j) as isize - pad as isize,
                                        );
                                        let v = if iy < 0
                                            || ix < 0
                                            || iy >= h as isize
                                            || ix >= w as isize
                                        {
                                            0.0
                                        } else {
                                            xs[((b * ch + c) * h + iy as usize) * w + ix as usize]
                                        };
                                        let wt = wf[(c * k + i) * k + j];
                                        acc = if fused {
                                            wt.mul_add(v, acc)
                                        } else {
                                            acc + wt * v
                                        };
                                    }
                                }
                                *o = clamp_f32(acc + bias[c], -0.3, 0.4);
                            }
                            for threads in [1, 2] {
                                threads::set_num_threads(threads);
                                let mut got = vec![f32::NAN; want.len()];
                                depthwise_f32(
                                    (xv, &xs),
                                    (&wf, Some(&bias)),
                                    (ov, &mut got),
                                    [k, k],
                                    [s, s],
                                    [pad, pad],
                                    [1, 1],
                                    (-0.3, 0.4),
                                    fused,
                                )
                                .unwrap();
                                if !dw512::fast_available() {
                                    continue;
                                }
                                let a: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                                let b: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                                assert_eq!(
                                    a, b,
                                    "w {w} h {h} k {k} stride {s} pad {pad} fused {fused}"
                                );
                            }
                        }
                    }
                }
            }
        }
        threads::set_num_threads(1);
    }

    /// Timing of the depthwise planes on the mobilenet / efficientnet shapes (not a test:
    /// `ETCH_BENCH_THREADS=1 cargo test --release -p etch-kernels --lib depthwise_speed --
    /// --ignored --nocapture`; `ETCH_BENCH_FUSED=1` for the delegate's fused taps). Best of
    /// 200 runs, warm caches.
    #[test]
    #[ignore]
    fn depthwise_speed() {
        let t = std::env::var("ETCH_BENCH_THREADS").map_or(1, |v| v.parse().unwrap_or(1));
        let fused = std::env::var("ETCH_BENCH_FUSED").is_ok();
        threads::set_num_threads(t);
        let shapes = [
            (32, 112, 3, 1),
            (96, 112, 3, 2),
            (144, 56, 3, 1),
            (384, 14, 3, 1),
            (960, 7, 3, 1),
            (672, 14, 5, 1),
            (144, 56, 3, 2),
            (192, 28, 3, 2),
            (576, 14, 3, 2),
            (240, 28, 5, 2),
            (672, 14, 5, 2),
            (192, 16, 3, 1),
            (144, 32, 3, 2),
            (384, 8, 3, 1),
            (576, 8, 3, 2),
            (960, 4, 3, 1),
        ];
        // `ETCH_BENCH_SHAPES="96,112,3,2;..."`: other shapes (channels, side, kernel, stride).
        let shapes: Vec<_> = std::env::var("ETCH_BENCH_SHAPES").map_or(shapes.to_vec(), |v| {
            v.split(';')
                .map(|s| {
                    let d: Vec<usize> = s.split(',').map(|n| n.trim().parse().unwrap()).collect();
                    (d[0], d[1], d[2], d[3])
                })
                .collect()
        });
        for (ch, h, k, s) in shapes {
            let p = k / 2;
            let o = (h + 2 * p - k) / s + 1;
            let (xv, ov) = (view(1, ch, h, h), view(1, ch, o, o));
            let xs = values(ch * h * h, 1);
            let w = values(ch * k * k, 2);
            let b = values(ch, 3);
            let mut out = vec![0f32; ch * o * o];
            let mut best = f64::MAX;
            for _ in 0..200 {
                let t0 = std::time::Instant::now();
                depthwise_f32(
                    (xv, &xs),
                    (&w, Some(&b)),
                    (ov, &mut out),
                    [k, k],
                    [s, s],
                    [p, p],
                    [1, 1],
                    (0.0, 6.0),
                    fused,
                )
                .unwrap();
                best = best.min(t0.elapsed().as_secs_f64());
            }
            let macs = (ch * o * o * k * k) as f64;
            eprintln!(
                "depthwise {ch}x{h}x{h} k{k} s{s}: {:.1} us, {:.1} GMAC/s",
                best * 1e6,
                macs / best / 1e9
            );
        }
        threads::set_num_threads(1);
    }
}
