//! Statically quantized convolutions and fully-connected layers, NHWC:
//! `out[p, n] = requant((bias[n] + sum((x - x_zp) * w[n])) as f32 * scale[n])` over the
//! taps of output pixel `p` inside the input (padding is the input zero point, which adds
//! nothing). A fully-connected layer is a 1×1 convolution of `[m, 1, 1, k]`. The shape is
//! the f32 NHWC kernels' [`NhwcShape`].

use super::Requant;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::conv::nhwc::NhwcShape;
use etch_kernels::threads::{SharedMut, run_parts, tasks_for};

/// Multiply-adds below which a call stays on the calling thread.
const MIN_TASK_WORK: usize = 1 << 16;

/// A convolution's shape, as the lowering passes it ([`Geometry::ints`] /
/// [`Geometry::from_ints`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Input, output, kernel, stride, top-left padding and dilation.
    pub shape: NhwcShape,
    /// Groups (a depthwise convolution: `c` groups of 1).
    pub groups: usize,
    /// Input channels a group.
    pub gic: usize,
    /// Input zero point.
    pub x_zp: i32,
}

impl Geometry {
    /// The lowering's encoding.
    pub fn ints(&self) -> Vec<i64> {
        let s = &self.shape;
        [s.n, s.h, s.w, s.c, s.oh, s.ow, s.co]
            .iter()
            .chain(&s.kernel)
            .chain(&s.stride)
            .chain(&s.pad)
            .chain(&s.dil)
            .chain(&[self.groups, self.gic])
            .map(|&v| v as i64)
            .chain([self.x_zp as i64])
            .collect()
    }

    /// Reads [`Geometry::ints`].
    pub fn from_ints(v: &[i64]) -> Result<Self> {
        if v.len() != 18 || v[..17].iter().any(|&x| x < 0) {
            return Err(Error::internal(format!("qs8 convolution geometry {v:?}")));
        }
        let u = |i: usize| v[i] as usize;
        let g = Geometry {
            shape: NhwcShape {
                n: u(0),
                h: u(1),
                w: u(2),
                c: u(3),
                oh: u(4),
                ow: u(5),
                co: u(6),
                kernel: [u(7), u(8)],
                stride: [u(9), u(10)],
                pad: [u(11), u(12)],
                dil: [u(13), u(14)],
            },
            groups: u(15),
            gic: u(16),
            x_zp: v[17] as i32,
        };
        if !g.shape.valid() || g.groups == 0 || g.shape.c != g.groups * g.gic {
            return Err(Error::internal(format!("qs8 convolution geometry {g:?}")));
        }
        Ok(g)
    }

    /// Output channels a group.
    fn goc(&self) -> usize {
        self.shape.co / self.groups
    }

    /// Checks the operands' sizes against the shape.
    fn check(&self, x: usize, w: usize, bias: usize, scales: usize, out: usize) -> Result<()> {
        let s = &self.shape;
        let ok = s.co.is_multiple_of(self.groups)
            && Some(x) == s.in_len()
            && w == s.co * s.kernel[0] * s.kernel[1] * self.gic
            && bias == s.co
            && scales == s.co
            && Some(out) == s.out_len();
        if ok {
            Ok(())
        } else {
            Err(Error::internal(format!(
                "qs8 convolution operands {x}, {w}, {bias}, {scales}, {out} for {self:?}"
            )))
        }
    }
}

/// The operands of a call, as slices.
struct Conv<'a> {
    g: Geometry,
    x: &'a [i8],
    /// Dense: `[oc, kh, kw, gic]`; depthwise: `[kh, kw, oc]`.
    w: &'a [i8],
    bias: &'a [i32],
    scales: &'a [f32],
    out: Requant,
    /// Depthwise, for the AVX-512 pixel: the biases less `x_zp · Σ w` over all taps, and
    /// `c` zero points that taps in the padding read (empty: the scalar loops).
    folded: &'a [i32],
    zps: &'a [i8],
}

/// `conv(x, w, bias, scales, geometry, [zp, lo, hi], out)`: a dense or grouped
/// convolution, filters `[oc, kh, kw, gic]`.
pub fn conv(ctx: &mut KernelContext<'_>) -> Result<()> {
    run(ctx, Kind::Dense)
}

/// `depthwise(x, w, bias, scales, geometry, [zp, lo, hi], out)`: a depthwise convolution
/// (`groups == c`, `gic == 1`, `oc` a multiple of `c`), filters `[kh, kw, oc]`.
pub fn depthwise(ctx: &mut KernelContext<'_>) -> Result<()> {
    run(ctx, Kind::Depthwise)
}

/// `transposed(x, w, bias, scales, geometry, [zp, lo, hi], out)`: a transposed (grouped)
/// convolution, XNNPACK's deconvolution: filters `[oc, kh, kw, gic]`, and input pixel
/// `(iy, ix)` reaches output pixel `(iy · sy + ky · dy - pad_top, ix · sx + kx · dx -
/// pad_left)` through tap `(ky, kx)`. The sums are exact, so their order does not matter,
/// and the requantization is the convolutions'.
pub fn transposed(ctx: &mut KernelContext<'_>) -> Result<()> {
    run(ctx, Kind::Transposed)
}

/// Which convolution a kernel call runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dense,
    Depthwise,
    Transposed,
}

fn run(ctx: &mut KernelContext<'_>, kind: Kind) -> Result<()> {
    let (x, w, bias, scales) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
    );
    let g = Geometry::from_ints(ctx.int_list(4)?)?;
    let out = Requant::from_ints(ctx.int_list(5)?)?;
    let mut o = ctx.tensor(6)?;
    let (folded, zps) = match ctx.num_args() {
        9 => (ctx.tensor(7)?, Some(ctx.tensor(8)?)),
        _ => (ctx.tensor(2)?, None),
    };
    let c = Conv {
        g,
        x: x.data::<i8>()?,
        w: w.data::<i8>()?,
        bias: bias.data::<i32>()?,
        scales: scales.data::<f32>()?,
        out,
        folded: if zps.is_some() {
            folded.data::<i32>()?
        } else {
            &[]
        },
        zps: match &zps {
            Some(z) => z.data::<i8>()?,
            None => &[],
        },
    };
    match kind {
        Kind::Transposed => c.run_transposed(o.data_mut::<i8>()?),
        _ => c.run(o.data_mut::<i8>()?, kind == Kind::Depthwise, true),
    }
}

impl Conv<'_> {
    /// All outputs (`depthwise`: filters `[kh, kw, oc]`), split over threads by pixels;
    /// `simd`: with the AVX-512 depthwise pixel where it runs.
    fn run(&self, o: &mut [i8], depthwise: bool, simd: bool) -> Result<()> {
        let g = &self.g;
        let (x, w) = (self.x.len(), self.w.len());
        g.check(x, w, self.bias.len(), self.scales.len(), o.len())?;
        if depthwise && (g.groups != g.shape.c || g.gic != 1) {
            return Err(Error::internal(format!("qs8 depthwise geometry {g:?}")));
        }
        if o.is_empty() {
            return Ok(());
        }
        let s = &g.shape;
        let pixels = s.n * s.oh * s.ow;
        let work = o.len() * s.kernel[0] * s.kernel[1] * g.gic;
        let shared = SharedMut::new(o);
        let oc = s.co;
        #[cfg(target_arch = "x86_64")]
        if simd
            && depthwise
            && oc == s.c
            && s.kernel[0] * s.kernel[1] <= super::dw512::MAX_TAPS
            && self.folded.len() == oc
            && self.zps.len() >= s.c
            && super::dw512::available()
        {
            self.run_dw512(shared, work);
            return Ok(());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = simd;
        run_parts(pixels, tasks_for(work, MIN_TASK_WORK), &|r| {
            for p in r {
                // SAFETY: each pixel's outputs are written by the one task whose range has it.
                let o = unsafe { shared.slice(p * oc, oc) };
                if depthwise {
                    self.depthwise_pixel(p, o);
                } else {
                    self.dense_pixel(p, o, false);
                }
            }
        });
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
impl Conv<'_> {
    /// A depthwise convolution of depth multiplier 1 on AVX-512 ([`super::dw512`]), split
    /// over threads by output rows, two pixels a pass. Each pixel lists the starts of all
    /// its taps: in the input, or the zero points for taps in the padding (the biases are
    /// folded); a window inside the input takes the same offsets from its corner.
    fn run_dw512(&self, o: SharedMut<'_, i8>, work: usize) {
        use super::dw512::{MAX_TAPS, pixel};
        let s = &self.g.shape;
        let (kh, kw, c) = (s.kernel[0], s.kernel[1], s.c);
        let taps = kh * kw;
        let mut corner = [0usize; MAX_TAPS];
        for (t, at) in corner.iter_mut().enumerate().take(taps) {
            *at = ((t / kw) * s.dil[0] * s.w + (t % kw) * s.dil[1]) * c;
        }
        let (span_y, span_x) = ((kh - 1) * s.dil[0], (kw - 1) * s.dil[1]);
        // The starts of pixel (b, oy, ox)'s taps.
        let fill = |(b, oy, ox): (usize, usize, usize), list: &mut [*const i8; MAX_TAPS]| {
            let x = self.x.as_ptr();
            let y0 = (oy * s.stride[0]).wrapping_sub(s.pad[0]);
            let x0 = (ox * s.stride[1]).wrapping_sub(s.pad[1]);
            if y0 < s.h && y0 + span_y < s.h && x0 < s.w && x0 + span_x < s.w {
                let base = x.wrapping_add(((b * s.h + y0) * s.w + x0) * c);
                for (l, &at) in list.iter_mut().zip(&corner[..taps]) {
                    *l = base.wrapping_add(at);
                }
                return;
            }
            let inside = s.pixel_taps(b, oy, ox);
            list[..taps].fill(self.zps.as_ptr());
            for i in inside.ri.clone() {
                for j in inside.rj.clone() {
                    list[i * kw + j] = x.wrapping_add(inside.at(i, j));
                }
            }
        };
        let (w, f, sc, out) = (self.w, self.folded, self.scales, &self.out);
        run_parts(s.n * s.oh, tasks_for(work, MIN_TASK_WORK), &|r| {
            let mut lists = [[std::ptr::null::<i8>(); MAX_TAPS]; 2];
            for row in r {
                let (b, oy) = (row / s.oh, row % s.oh);
                // SAFETY: each output row is written by the one task whose range has it.
                let o = unsafe { o.slice(row * s.ow * c, s.ow * c) };
                let mut pairs = o.chunks_mut(2 * c);
                for ox in (0..s.ow).step_by(2) {
                    let Some(o) = pairs.next() else { break };
                    let [l0, l1] = &mut lists;
                    fill((b, oy, ox), l0);
                    // SAFETY (both calls): the CPU has the features; each tap start has
                    // `c` bytes (a pixel inside `x`, or the zero points); `w` is
                    // `[kh, kw, c]`; `folded`, `scales` and each output are `[c]`.
                    if o.len() == 2 * c {
                        fill((b, oy, ox + 1), l1);
                        let (o0, o1) = o.split_at_mut(c);
                        let t = [&l0[..taps], &l1[..taps]];
                        unsafe { pixel(t, w, f, sc, out, [o0, o1]) };
                    } else {
                        unsafe { pixel([&l0[..taps]], w, f, sc, out, [o]) };
                    }
                }
            }
        });
    }
}

/// A convolution of `x` by filters `w` into `o` (dense or grouped: `[oc, kh, kw, gic]`;
/// `depthwise`: `[kh, kw, oc]`), with the scalar loops or (`simd`) the AVX-512 ones where
/// they run (tests).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(super) fn reference(
    g: Geometry,
    x: &[i8],
    w: &[i8],
    bias: &[i32],
    scales: &[f32],
    out: Requant,
    o: &mut [i8],
    (depthwise, simd): (bool, bool),
) -> Result<()> {
    let (folded, zps) = if depthwise {
        let taps = g.shape.kernel[0] * g.shape.kernel[1];
        let f = super::depthwise_folded_bias(w, taps, bias, g.x_zp);
        (f, vec![g.x_zp as i8; g.shape.c])
    } else {
        (vec![], vec![])
    };
    let c = Conv {
        g,
        x,
        w,
        bias,
        scales,
        out,
        folded: &folded,
        zps: &zps,
    };
    c.run(o, depthwise, simd)
}

/// Sum of `(x - zp) * w` over two int8 runs of one length.
#[inline(always)]
fn dot(x: &[i8], w: &[i8], zp: i32) -> i32 {
    x.iter()
        .zip(w)
        .map(|(&x, &w)| (x as i32 - zp) * w as i32)
        .sum()
}

impl Conv<'_> {
    /// All outputs of a transposed convolution ([`transposed`]), split over threads by
    /// pixels.
    fn run_transposed(&self, o: &mut [i8]) -> Result<()> {
        let g = &self.g;
        g.check(
            self.x.len(),
            self.w.len(),
            self.bias.len(),
            self.scales.len(),
            o.len(),
        )?;
        if o.is_empty() {
            return Ok(());
        }
        let s = &g.shape;
        let oc = s.co;
        let work = o.len() * s.kernel[0] * s.kernel[1] * g.gic;
        let shared = SharedMut::new(o);
        run_parts(s.n * s.oh * s.ow, tasks_for(work, MIN_TASK_WORK), &|r| {
            for p in r {
                // SAFETY: each pixel's outputs are written by the one task whose range has it.
                let o = unsafe { shared.slice(p * oc, oc) };
                self.dense_pixel(p, o, true);
            }
        });
        Ok(())
    }

    /// Calls `f(offset, tap)` for the input pixels that output pixel `p` of a transposed
    /// convolution takes: the input offset of the pixel and the tap's index in the kernel.
    fn transposed_taps(&self, p: usize, mut f: impl FnMut(usize, usize)) {
        let s = &self.g.shape;
        let (b, rest) = (p / (s.oh * s.ow), p % (s.oh * s.ow));
        // The input index along an axis of output index `o` through tap `k`, if any.
        let input = |o: usize, k: usize, axis: usize, len: usize| {
            let t = (o + s.pad[axis]).checked_sub(k * s.dil[axis])?;
            let i = t / s.stride[axis];
            (t % s.stride[axis] == 0 && i < len).then_some(i)
        };
        for ky in 0..s.kernel[0] {
            let Some(iy) = input(rest / s.ow, ky, 0, s.h) else {
                continue;
            };
            for kx in 0..s.kernel[1] {
                if let Some(ix) = input(rest % s.ow, kx, 1, s.w) {
                    f(((b * s.h + iy) * s.w + ix) * s.c, ky * s.kernel[1] + kx);
                }
            }
        }
    }

    /// Calls `f(offset, tap)` for output pixel `p`'s taps inside the input: the input
    /// offset of the tap's pixel and its index in the kernel (row-major).
    fn taps(&self, p: usize, mut f: impl FnMut(usize, usize)) {
        let s = &self.g.shape;
        let (b, rest) = (p / (s.oh * s.ow), p % (s.oh * s.ow));
        let taps = s.pixel_taps(b, rest / s.ow, rest % s.ow);
        for i in taps.ri.clone() {
            for j in taps.rj.clone() {
                f(taps.at(i, j), i * s.kernel[1] + j);
            }
        }
    }

    /// Output pixel `p` of a dense or grouped convolution (`transposed`: of a transposed
    /// one).
    fn dense_pixel(&self, p: usize, o: &mut [i8], transposed: bool) {
        let g = &self.g;
        let (goc, gic) = (g.goc(), g.gic);
        let k = g.shape.kernel[0] * g.shape.kernel[1] * gic;
        for (n, o) in o.iter_mut().enumerate() {
            let grp = n / goc;
            let w = &self.w[n * k..(n + 1) * k];
            let mut acc = self.bias[n];
            let tap = |at: usize, t: usize| {
                let x = &self.x[at + grp * gic..at + grp * gic + gic];
                acc = acc.wrapping_add(dot(x, &w[t * gic..t * gic + gic], g.x_zp));
            };
            if transposed {
                self.transposed_taps(p, tap);
            } else {
                self.taps(p, tap);
            }
            *o = self.out.apply(acc as f32 * self.scales[n]);
        }
    }

    fn depthwise_pixel(&self, p: usize, o: &mut [i8]) {
        let g = &self.g;
        let (oc, mult) = (g.shape.co, g.shape.co / g.shape.c);
        let mut acc = [0i32; 64];
        for start in (0..oc).step_by(acc.len()) {
            let len = acc.len().min(oc - start);
            let acc = &mut acc[..len];
            acc.copy_from_slice(&self.bias[start..start + len]);
            self.taps(p, |at, t| {
                let w = &self.w[t * oc + start..t * oc + start + len];
                if mult == 1 {
                    let x = &self.x[at + start..at + start + len];
                    for ((a, &x), &w) in acc.iter_mut().zip(x).zip(w) {
                        *a = a.wrapping_add((x as i32 - g.x_zp) * w as i32);
                    }
                } else {
                    for (i, (a, &w)) in acc.iter_mut().zip(w).enumerate() {
                        let x = self.x[at + (start + i) / mult] as i32;
                        *a = a.wrapping_add((x - g.x_zp) * w as i32);
                    }
                }
            });
            for (i, (o, &a)) in o[start..start + len].iter_mut().zip(acc.iter()).enumerate() {
                *o = self.out.apply(a as f32 * self.scales[start + i]);
            }
        }
    }
}
