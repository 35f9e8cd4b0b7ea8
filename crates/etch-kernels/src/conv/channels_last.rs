//! Convolutions into channels-last outputs (dim order `0, 2, 3, 1`: NHWC memory), where
//! the runtime's load-time layout choice lays a portable program's feature maps out so
//! ([`rule`], registered as `aten::convolution.out`'s layout hook). They run on the XNNPACK
//! delegate's NHWC kernels ([`super::nhwc`]), with weights packed at load in their order:
//! by the convolution's load-time hook for a call on its own, by the fusion for a fused
//! one.
//!
//! The input may be channels-last too, or contiguous channels-first (a method input, say):
//! then it is transposed into scratch memory first.

use super::Conv;
use super::nhwc::{self, NhwcShape};
use super::winograd;
use crate::gemm512;
use etch_core::{Error, LayoutRule, Result, TensorRef};

/// A convolution's weights (and bias) in the NHWC kernels' order.
pub(super) enum NhwcWeights {
    /// One group: the filter `[co, kh, kw, ci]` (terms in the order `(i, j, ci)`) and the
    /// bias, packed by [`gemm512::pack_fc`].
    Dense(Vec<f32>),
    /// Depthwise: `[kh · kw, c]` and a bias.
    Depthwise { w: Vec<f32>, bias: Option<Vec<f32>> },
    /// One group, 3×3 stride 1 ([`winograd::applies`]): packed by [`winograd::pack`].
    Winograd(Vec<f32>),
}

impl NhwcWeights {
    /// Packs the weights of `c` given as `row(co, r)`: term `r` of output channel `co` in
    /// PyTorch's order (`r = (ci · kh + i) · kw + j`), and the bias; `None` where the NHWC
    /// kernels do not run `c` ([`supported`]).
    pub(super) fn pack(
        c: &Conv,
        row: impl Fn(usize, usize) -> f32,
        bias: Option<&[f32]>,
    ) -> Option<Self> {
        if !supported(c) || bias.is_some_and(|b| b.len() != c.g * c.cout_g) {
            return None;
        }
        let taps = c.kh * c.kw;
        if depthwise(c) {
            let ch = c.g;
            let mut w = vec![0f32; taps * ch];
            for (t, wr) in w.chunks_exact_mut(ch).enumerate() {
                for (k, v) in wr.iter_mut().enumerate() {
                    *v = row(k, t);
                }
            }
            let bias = bias.map(<[f32]>::to_vec);
            return Some(NhwcWeights::Depthwise { w, bias });
        }
        let cin = c.cin_g;
        // Term `r` in XNNPACK's order `(i, j, ci)`.
        let term = |co, r| row(co, r % cin * taps + r / cin);
        if winograd::applies(&shape(c)) {
            let packed = winograd::pack(c.cout_g, cin, term, bias)?;
            return Some(NhwcWeights::Winograd(packed));
        }
        let packed = gemm512::pack_fc(c.cout_g, taps * cin, term, bias)?;
        Some(NhwcWeights::Dense(packed))
    }
}

/// A depthwise convolution: one input and one output channel a group.
fn depthwise(c: &Conv) -> bool {
    c.g > 1 && c.g == c.xv.c && c.cin_g == 1 && c.cout_g == 1
}

/// Whether the NHWC kernels run `c`: depthwise, or one group on the packed kernels.
pub(super) fn supported(c: &Conv) -> bool {
    nhwc::available() && (depthwise(c) || c.g == 1 && gemm512::available())
}

/// The layout rule of a convolution the NHWC kernels run: the output (argument 9) may be
/// channels-last, and the input (argument 0) then follows or is transposed. What it gains
/// follows the XNNPACK delegate's choice of NHWC (`xnnpack::memory`), in multiply-adds:
/// with AVX-512, depthwise convolutions gain (their channels-first kernels on small planes
/// are 2.5-4.5× slower), and dense ones too on AMD's cores (`gemm512::amd_avx512`); with
/// AVX2 alone, depthwise convolutions of input planes of at least 56² gain (no packing of
/// large planes through the caches) and 1×1 convolutions of 2 to 64 output pixels lose
/// (a product over few pixels), weighed 100 to 12 as the delegate's measured rule does.
pub(super) fn rule(c: &Conv) -> Option<LayoutRule> {
    if !supported(c) {
        return None;
    }
    let macs = (c.xv.n * c.g * c.cout_g * c.oh * c.ow * c.cin_g * c.kh * c.kw) as i64;
    let gains = if winograd::applies(&shape(c)) {
        // 1.6-2.1× the direct products, on any CPU with them.
        macs
    } else if gemm512::avx512() {
        match depthwise(c) || gemm512::amd_avx512() {
            true => macs,
            false => 0,
        }
    } else if depthwise(c) && c.xv.h * c.xv.w >= 56 * 56 {
        macs.saturating_mul(100)
    } else if !depthwise(c) && c.kh * c.kw == 1 && (2..=64).contains(&(c.oh * c.ow)) {
        -macs.saturating_mul(12)
    } else {
        0
    };
    Some(LayoutRule {
        tied: vec![9],
        adapts: vec![0],
        gains,
    })
}

/// The NHWC geometry of `c`.
fn shape(c: &Conv) -> NhwcShape {
    NhwcShape {
        n: c.xv.n,
        h: c.xv.h,
        w: c.xv.w,
        c: c.xv.c,
        oh: c.oh,
        ow: c.ow,
        co: c.g * c.cout_g,
        kernel: [c.kh, c.kw],
        stride: [c.stride.0, c.stride.1],
        pad: [c.pad.0, c.pad.1],
        dil: [c.dil.0, c.dil.1],
    }
}

/// The data of a convolution's input `x` and whether it is channels-last (else contiguous
/// channels-first, which [`run`] transposes); an error for other dim orders.
pub(super) fn input<'a>(op: &str, x: &TensorRef<'a>) -> Result<(&'a [f32], bool)> {
    if !x.is_channels_last() && !x.is_default_dim_order() {
        return Err(Error::not_supported(format!(
            "{op}: input dim order {:?} with a channels-last output",
            x.dim_order()
        )));
    }
    Ok((x.data::<f32>()?, x.is_channels_last()))
}

/// Convolves `xs` (channels-last when `nhwc`, else contiguous channels-first) into `out`,
/// the NHWC memory of the output `[n, co, oh, ow]`, then clamps to `[lo, hi]`.
pub(super) fn run(
    op: &str,
    c: &Conv,
    w: &NhwcWeights,
    (xs, nhwc): (&[f32], bool),
    out: &mut [f32],
    (lo, hi): (f32, f32),
) -> Result<()> {
    let s = shape(c);
    let mut copy;
    let xs = match nhwc {
        true => xs,
        false => {
            copy = crate::scratch::take_dirty(xs.len(), 0f32);
            nhwc::planes_to_pixels_f32(s.n, s.c, s.h * s.w, xs, &mut copy)
                .map_err(|e| Error::invalid_argument(format!("{op}: {e}")))?;
            &copy[..]
        }
    };
    let done = match w {
        NhwcWeights::Dense(packed) => nhwc::conv_f32(&s, xs, packed, out, lo, hi),
        NhwcWeights::Winograd(packed) => winograd::conv_f32(&s, xs, packed, out, lo, hi),
        NhwcWeights::Depthwise { w, bias } => {
            nhwc::depthwise_f32(&s, xs, w, bias.as_deref(), out, lo, hi)
        }
    };
    done.map_err(|e| Error::invalid_argument(format!("{op}: {e}")))
}
