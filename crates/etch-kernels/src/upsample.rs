//! 2-D upsampling: `upsample_nearest2d.vec` and `upsample_bilinear2d.vec`. Source indices
//! and weights are computed as PyTorch's CPU kernels compute them (in `f32` for every
//! dtype but `f64`), so results match bit for bit where the arithmetic allows. Tensors are
//! read and written through their strides (channels-last works).

use crate::util::*;
use crate::{dispatch_all, dispatch_float};
use etch_core::{Error, KernelContext, KernelRegistry, Result, TensorRef};

/// N, C, H, W sizes and strides of a 4-D tensor.
pub fn nchw(op: &str, t: &TensorRef<'_>) -> Result<([usize; 4], [usize; 4])> {
    if t.dim() != 4 {
        return Err(Error::invalid_argument(format!(
            "{op}: expected a 4-D input, got shape {:?}",
            t.sizes()
        )));
    }
    let (z, s) = (t.sizes(), t.strides());
    Ok(([z[0], z[1], z[2], z[3]], [s[0], s[1], s[2], s[3]]))
}

/// The output (H, W) and the scale factors to pass on (`None` when `output_size` is given).
pub type OutPlan = ((usize, usize), [Option<f64>; 2]);

/// Resolves the output size from `output_size` or the scale factors.
pub fn out_size(
    op: &str,
    ctx: &KernelContext<'_>,
    size_i: usize,
    scales_i: usize,
    ih: usize,
    iw: usize,
) -> Result<OutPlan> {
    if let Some(sz) = ctx.opt_int_list(size_i)? {
        if sz.len() != 2 || sz.iter().any(|&v| v <= 0) {
            return Err(Error::invalid_argument(format!(
                "{op}: output_size {sz:?} must be two positive sizes"
            )));
        }
        return Ok(((sz[0] as usize, sz[1] as usize), [None, None]));
    }
    let sc = match ctx.value(scales_i)? {
        etch_core::EValue::None => None,
        _ => Some(ctx.double_list(scales_i)?),
    };
    match sc {
        Some(&[sh, sw]) if sh > 0.0 && sw > 0.0 && sh.is_finite() && sw.is_finite() => {
            let oh = (ih as f64 * sh) as usize;
            let ow = (iw as f64 * sw) as usize;
            if oh == 0 || ow == 0 {
                return Err(Error::invalid_argument(format!(
                    "{op}: scale factors [{sh}, {sw}] give an empty output for input {ih}x{iw}"
                )));
            }
            Ok(((oh, ow), [Some(sh), Some(sw)]))
        }
        _ => Err(Error::invalid_argument(format!(
            "{op}: needs either output_size or two positive scale factors"
        ))),
    }
}

/// PyTorch's `compute_scales_value`: `1 / scale` when given, else `input / output`.
fn scales_value<F: Float>(scale: Option<f64>, i: usize, o: usize) -> F {
    match scale {
        Some(s) if s > 0.0 => F::from_f64(1.0 / s),
        _ => F::from_f64(i as f64).div(F::from_f64(o as f64)),
    }
}

/// PyTorch's `nearest_idx`.
fn nearest_idx<F: Float>(o: usize, i: usize, out: usize, scale: Option<f64>) -> usize {
    if out == i {
        o
    } else if out == 2 * i {
        o >> 1
    } else {
        let s: F = scales_value(scale, i, out);
        let v = (F::from_f64(o as f64) * s).floor().to_f64();
        (v.max(0.0) as usize).min(i - 1)
    }
}

/// `upsample_nearest2d.vec`: args [input, output_size?, scale_factors?, out].
fn upsample_nearest2d_vec_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::upsample_nearest2d.vec_out";
    let x = ctx.tensor(0)?;
    let (z, sx) = nchw(OP, &x)?;
    let ((oh, ow), sc) = out_size(OP, ctx, 1, 2, z[2], z[3])?;
    let mut out = ctx.resize_out(3, &[z[0], z[1], oh, ow])?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    if out.numel() == 0 || z[2] == 0 || z[3] == 0 {
        return Ok(());
    }
    let (_, so) = nchw(OP, &out)?;
    let f64_idx = x.dtype() == etch_core::ScalarType::Double;
    // scratch: one source index per output row and column (pooled, reused across calls).
    let mut hi = crate::scratch::take(0, 0usize);
    hi.extend((0..oh).map(|o| {
        if f64_idx {
            nearest_idx::<f64>(o, z[2], oh, sc[0])
        } else {
            nearest_idx::<f32>(o, z[2], oh, sc[0])
        }
    }));
    let mut wi = crate::scratch::take(0, 0usize);
    wi.extend((0..ow).map(|o| {
        if f64_idx {
            nearest_idx::<f64>(o, z[3], ow, sc[1])
        } else {
            nearest_idx::<f32>(o, z[3], ow, sc[1])
        }
    }));
    dispatch_all!(x.dtype(), OP, "input", |T| {
        let xs = x.data::<T>()?;
        let o = out.data_mut::<T>()?;
        for n in 0..z[0] {
            for c in 0..z[1] {
                let (bx, bo) = (n * sx[0] + c * sx[1], n * so[0] + c * so[1]);
                for (y, &h) in hi.iter().enumerate() {
                    let (rx, ro) = (bx + h * sx[2], bo + y * so[2]);
                    for (xo, &w) in wi.iter().enumerate() {
                        o[ro + xo * so[3]] = xs[rx + w * sx[3]];
                    }
                }
            }
        }
        Ok(())
    })
}

/// Source indices and weights of linear interpolation along one dim (PyTorch's
/// `compute_source_index_and_lambda`).
fn linear_taps<F: Float + crate::scratch::ScratchElem>(
    i: usize,
    out: usize,
    align_corners: bool,
    scale: Option<f64>,
) -> Taps<F> {
    let ratio: F = if align_corners {
        if out > 1 {
            F::from_f64((i - 1) as f64).div(F::from_f64((out - 1) as f64))
        } else {
            F::ZERO
        }
    } else {
        scales_value(scale, i, out)
    };
    // scratch: one tap per output index (pooled, reused across calls).
    let mut taps = Taps {
        i0: crate::scratch::take(0, 0usize),
        i1: crate::scratch::take(0, 0usize),
        w0: crate::scratch::take(0, F::ZERO),
        w1: crate::scratch::take(0, F::ZERO),
    };
    for (i0, i1, w0, w1) in (0..out).map(|o| {
        if out == i {
            return (o, o, F::ONE, F::ZERO);
        }
        let of = F::from_f64(o as f64);
        let real = if align_corners {
            ratio * of
        } else {
            let r = ratio * (of + F::from_f64(0.5)) + F::from_f64(-0.5);
            if r < F::ZERO { F::ZERO } else { r }
        };
        let i0 = (real.floor().to_f64().max(0.0) as usize).min(i - 1);
        let mut l1 = real.sub(F::from_f64(i0 as f64));
        if l1 < F::ZERO {
            l1 = F::ZERO;
        } else if l1 > F::ONE {
            l1 = F::ONE;
        }
        let i1 = if i0 < i - 1 { i0 + 1 } else { i0 };
        (i0, i1, F::ONE.sub(l1), l1)
    }) {
        taps.i0.push(i0);
        taps.i1.push(i1);
        taps.w0.push(w0);
        taps.w1.push(w1);
    }
    taps
}

/// Interpolation taps of one axis: source indices and weights per output index.
struct Taps<F: crate::scratch::ScratchElem> {
    i0: crate::scratch::Scratch<usize>,
    i1: crate::scratch::Scratch<usize>,
    w0: crate::scratch::Scratch<F>,
    w1: crate::scratch::Scratch<F>,
}

impl<F: crate::scratch::ScratchElem> Taps<F> {
    fn iter(&self) -> impl Iterator<Item = (usize, usize, F, F)> + '_ {
        (0..self.i0.len()).map(|k| (self.i0[k], self.i1[k], self.w0[k], self.w1[k]))
    }
}

/// `upsample_bilinear2d.vec`: args [input, output_size?, align_corners, scale_factors?,
/// out].
fn upsample_bilinear2d_vec_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::upsample_bilinear2d.vec_out";
    let x = ctx.tensor(0)?;
    let (z, sx) = nchw(OP, &x)?;
    let align = ctx.bool(2)?;
    let ((oh, ow), sc) = out_size(OP, ctx, 1, 3, z[2], z[3])?;
    let mut out = ctx.resize_out(4, &[z[0], z[1], oh, ow])?;
    same_dtype(OP, x.dtype(), out.dtype())?;
    if out.numel() == 0 || z[2] == 0 || z[3] == 0 {
        return Ok(());
    }
    let (_, so) = nchw(OP, &out)?;
    dispatch_float!(x.dtype(), OP, "input", |T| {
        type F = <T as FElem>::F;
        let ht = linear_taps::<F>(z[2], oh, align, sc[0]);
        let wt = linear_taps::<F>(z[3], ow, align, sc[1]);
        let xs = x.data::<T>()?;
        let o = out.data_mut::<T>()?;
        for n in 0..z[0] {
            for c in 0..z[1] {
                let (bx, bo) = (n * sx[0] + c * sx[1], n * so[0] + c * so[1]);
                for (y, (h0, h1, hl0, hl1)) in ht.iter().enumerate() {
                    let (r0, r1, ro) = (bx + h0 * sx[2], bx + h1 * sx[2], bo + y * so[2]);
                    for (xo, (w0, w1, wl0, wl1)) in wt.iter().enumerate() {
                        let (a0, a1) = (w0 * sx[3], w1 * sx[3]);
                        let top = wl0 * xs[r0 + a0].to_f() + wl1 * xs[r0 + a1].to_f();
                        let bot = wl0 * xs[r1 + a0].to_f() + wl1 * xs[r1 + a1].to_f();
                        o[ro + xo * so[3]] = T::from_f(hl0 * top + hl1 * bot);
                    }
                }
            }
        }
        Ok(())
    })
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register(
        "aten::upsample_nearest2d.vec_out",
        upsample_nearest2d_vec_out,
    )?;
    reg.register(
        "aten::upsample_bilinear2d.vec_out",
        upsample_bilinear2d_vec_out,
    )?;
    Ok(())
}
