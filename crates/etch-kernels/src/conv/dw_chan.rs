//! Depthwise convolutions of small planes with many channels (efficientnet's and
//! mobilenet_v3's 14×14 and 7×7 layers of 240 to 1152 channels) sixteen channels at a time,
//! as XNNPACK's channels-last kernels run them: a plane row of 7 or 14 outputs fills a
//! vector badly, while 16 channels of one pixel fill it exactly. Per group of 16 channels,
//! the input planes are transposed into a zero-padded pixel-major buffer (16 channels a
//! pixel), each output row's pixels are summed tap by tap in registers, and the row is
//! transposed back into the 16 output planes ([`crate::transpose16`]'s shuffles, masked).
//! Without AVX-512F, groups of 8 channels on AVX2 (`dw_chan256.rs`).
//!
//! Per output the same operations in the same order as the plane kernels (`dw_small`, the
//! row kernel): taps `(i, j)` in order from +0 (one fused multiply-add a tap where they use
//! them, else the product and the sum; padding taps add `w · 0`), then `+ bias`, then the
//! clamp; so the same bits.

use super::Conv;
use crate::threads::{self, SharedMut};
use crate::transpose16::x86::block16;
use std::arch::x86_64::*;

#[path = "dw_chan256.rs"]
mod avx2;

/// The widest output row (one accumulator an output pixel).
const MAX_OW: usize = 16;
/// The largest padded plane, in floats, for groups of 16 channels (its buffer, 64 KiB,
/// stays in L1/L2).
const MAX_PADDED: usize = 16 << 10;
/// The same for groups of 8 channels (512 KiB, Zen's L2: mobilenet_v2's 96 × 112² stride-2
/// layer, padded 114², takes 416 KiB; 753–785 → 515–519 µs against the plane kernel).
const MAX_PADDED_AVX2: usize = 128 << 10;

/// The convolution `c` (weights `[c, kh, kw]`, optional bias) of `xs` into `o` with the
/// clamp, when its planes are small and its channels many: false (nothing written) where
/// this path does not take it. `fused` as `dw_small::run`.
pub(super) fn run(
    c: &Conv,
    xs: &[f32],
    (w, bs): (&[f32], Option<&[f32]>),
    o: &mut [f32],
    clamp: (f32, f32),
    fused: bool,
) -> bool {
    let (xv, ov) = (c.xv, c.ov);
    let ((ph, pw), (sh, sw)) = (c.pad, c.stride);
    let wp = (xv.w + 2 * pw).max((ov.w - 1) * sw + c.kw);
    let hp = (xv.h + 2 * ph).max((ov.h - 1) * sh + c.kh);
    // Channels a group: 16 with AVX-512F, else 8 with AVX2 and FMA (`avx2`).
    let lanes = if crate::util::avx512() {
        16
    } else if super::dw256::available() {
        avx2::L
    } else {
        return false;
    };
    // Groups of 8 sum rows of any width in chunks, into a tile in scratch: only their
    // padded buffer is bounded.
    let fits = match lanes {
        16 => ov.w <= MAX_OW && ov.h * ov.w <= 256 && hp * wp * 16 <= MAX_PADDED,
        _ => hp * wp * lanes <= MAX_PADDED_AVX2,
    };
    let takes =
        c.dense_planes() && c.g.is_multiple_of(lanes) && c.g >= 64 && c.dil == (1, 1) && fits;
    if !takes {
        return false;
    }
    let kk = c.kh * c.kw;
    if !c.dw_planes_within(xs.len(), o.len())
        || w.len() < c.g * kk
        || bs.is_some_and(|b| b.len() < c.g)
    {
        return false;
    }
    let fma = c.dw_fma(fused);
    let units = xv.n * c.g / lanes;
    let work = units * lanes * ov.h * ov.w * kk;
    let tasks = threads::tasks_for(work, super::DEPTHWISE_TASK_WORK).min(units);
    // Per task: the padded buffer (its borders stay zero) and the group's weights.
    // (and, for groups of 8, the output tile).
    let tile = if lanes == 16 {
        0
    } else {
        avx2::tile_len(ov.h, ov.w)
    };
    let per = (hp * wp + kk) * lanes + tile;
    let mut bufs = crate::scratch::take(tasks * per, 0f32);
    let bufs = SharedMut::new(&mut bufs);
    let out = SharedMut::new(o);
    let geo = Geo { hp, wp, kk, fma };
    threads::run_shares(units, tasks, &|t, range| {
        // SAFETY: task `t`'s own buffer.
        let buf = unsafe { bufs.slice(t * per, per) };
        for u in range {
            // SAFETY: AVX-512F (`util::avx512`) for 16 lanes, else AVX2 and FMA
            // (`dw256::available`); the group's input and output planes are in bounds
            // (checked above) and its outputs this task's alone.
            unsafe {
                if lanes == 16 {
                    group(c, &geo, xs, (w, bs), &out, u, buf, clamp)
                } else {
                    avx2::group(c, &geo, xs, (w, bs), &out, u, buf, clamp)
                }
            };
        }
    });
    true
}

/// The padded buffer's rows and columns, the taps, and whether they fuse.
struct Geo {
    hp: usize,
    wp: usize,
    kk: usize,
    fma: bool,
}

/// Unit `u` (batch item × group of 16 channels): pack, sum row by row, unpack.
///
/// # Safety
/// AVX-512F; the unit's 16 input and output planes in bounds of `xs` and `out`, its outputs
/// this task's alone; `buf` holds the padded buffer and the weights (zero borders).
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn group(
    c: &Conv,
    g: &Geo,
    xs: &[f32],
    (w, bs): (&[f32], Option<&[f32]>),
    out: &SharedMut<'_, f32>,
    u: usize,
    buf: &mut [f32],
    (lo, hi): (f32, f32),
) {
    let (xv, ov) = (c.xv, c.ov);
    let (n, ch0) = (u / (c.g / 16), u % (c.g / 16) * 16);
    let (pad, wk) = buf.split_at_mut(g.hp * g.wp * 16);
    for l in 0..16 {
        for t in 0..g.kk {
            wk[t * 16 + l] = w[(ch0 + l) * g.kk + t];
        }
    }
    // The input planes, 16 pixels of a row at a time, into the padded buffer's interior.
    let x0 = n * xv.s[0] + ch0 * xv.s[1];
    let mut tile = [0f32; 256];
    for y in 0..xv.h {
        for c0 in (0..xv.w).step_by(16) {
            let cols = (xv.w - c0).min(16);
            let lm = if cols == 16 { !0 } else { (1u16 << cols) - 1 };
            let src = xs[x0 + y * xv.w + c0..].as_ptr();
            // SAFETY: 16 planes' `cols` elements of row `y` (in bounds: the caller's); the
            // tile's 16 rows of 16.
            unsafe { block16(src, xv.s[1], lm, tile.as_mut_ptr(), 16, !0) };
            let at = ((y + c.pad.0) * g.wp + c0 + c.pad.1) * 16;
            pad[at..at + cols * 16].copy_from_slice(&tile[..cols * 16]);
        }
    }
    let bias = match bs {
        // SAFETY: 16 biases (`bs` has `c.g`: checked by the caller).
        Some(b) => unsafe { _mm512_loadu_ps(b.as_ptr().add(ch0)) },
        None => _mm512_setzero_ps(),
    };
    let o0 = n * ov.s[0] + ch0 * ov.s[1];
    let sm = if ov.w == 16 { !0 } else { (1u16 << ov.w) - 1 };
    let kernel = row_kernel(ov.w, g.fma);
    for oy in 0..ov.h {
        let r = Row {
            x: pad[oy * c.stride.0 * g.wp * 16..].as_ptr(),
            wp: g.wp,
            w: wk.as_ptr(),
            kh: c.kh,
            kw: c.kw,
            sw: c.stride.1,
            bias,
            lo: _mm512_set1_ps(lo),
            hi: _mm512_set1_ps(hi),
        };
        // SAFETY: the row's taps read rows `oy · sh..oy · sh + kh` of the padded buffer,
        // columns up to `(ow - 1) · sw + kw <= wp` (`run`); the tile holds 16 rows of 16.
        unsafe { kernel(&r, tile.as_mut_ptr()) };
        // SAFETY: the tile's `ow` pixels of 16 channels; the 16 output planes' row `oy`,
        // `ow` elements each (masked), inside `out` and this unit's.
        unsafe {
            let dst = out.as_ptr().add(o0 + oy * ov.w);
            block16(tile.as_ptr(), 16, !0, dst, ov.s[1], sm);
        }
    }
}

/// One output row's taps.
struct Row {
    /// The padded buffer at the row's first input row.
    x: *const f32,
    wp: usize,
    /// The group's weights, `[kk, 16]`.
    w: *const f32,
    kh: usize,
    kw: usize,
    sw: usize,
    bias: __m512,
    lo: __m512,
    hi: __m512,
}

type RowFn = unsafe fn(&Row, *mut f32);

/// The row kernel for `ow` outputs (1 to [`MAX_OW`]).
fn row_kernel(ow: usize, fma: bool) -> RowFn {
    macro_rules! by_width {
        ($fma:literal) => {
            match ow {
                1 => row::<1, $fma>,
                2 => row::<2, $fma>,
                3 => row::<3, $fma>,
                4 => row::<4, $fma>,
                5 => row::<5, $fma>,
                6 => row::<6, $fma>,
                7 => row::<7, $fma>,
                8 => row::<8, $fma>,
                9 => row::<9, $fma>,
                10 => row::<10, $fma>,
                11 => row::<11, $fma>,
                12 => row::<12, $fma>,
                13 => row::<13, $fma>,
                14 => row::<14, $fma>,
                15 => row::<15, $fma>,
                _ => row::<16, $fma>,
            }
        };
    }
    if fma {
        by_width!(true)
    } else {
        by_width!(false)
    }
}

/// `OW` output pixels × 16 channels: the taps in order from +0, `+ bias`, the clamp
/// (`clamp_f32`: `lo` where below, else `hi` where above, NaN kept), into `tile` rows.
///
/// # Safety
/// AVX-512F; `r.x` holds the row's `kh` padded rows of `wp` pixels (16 floats each), `r.w`
/// `kh · kw` vectors; `tile` `OW` rows of 16.
#[target_feature(enable = "avx512f")]
unsafe fn row<const OW: usize, const FMA: bool>(r: &Row, tile: *mut f32) {
    let mut acc = [_mm512_setzero_ps(); OW];
    for i in 0..r.kh {
        for j in 0..r.kw {
            // SAFETY: tap `(i, j)`'s weights and, per output `x`, padded pixel
            // `(i, x · sw + j)` of the row (the caller's contract).
            unsafe {
                let wv = _mm512_loadu_ps(r.w.add((i * r.kw + j) * 16));
                let base = r.x.add((i * r.wp + j) * 16);
                for (x, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm512_loadu_ps(base.add(x * r.sw * 16));
                    *acc = if FMA {
                        _mm512_fmadd_ps(wv, xv, *acc)
                    } else {
                        _mm512_add_ps(*acc, _mm512_mul_ps(wv, xv))
                    };
                }
            }
        }
    }
    for (x, acc) in acc.iter().enumerate() {
        let v = _mm512_add_ps(*acc, r.bias);
        let lt = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, r.lo);
        let gt = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, r.hi);
        let v = _mm512_mask_blend_ps(lt, _mm512_mask_blend_ps(gt, v, r.hi), r.lo);
        // SAFETY: tile row `x` (the caller's contract).
        unsafe { _mm512_storeu_ps(tile.add(x * 16), v) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Conv, View4, clamp_f32};
    use crate::threads;

    fn view(n: usize, c: usize, h: usize, w: usize) -> View4 {
        View4 {
            n,
            c,
            h,
            w,
            s: [c * h * w, h * w, w, 1],
        }
    }

    /// This path against the scalar sums (taps in order from +0, one `mul_add` a tap when
    /// it fuses, else the product and the sum, then `+ bias` and the clamp), bit for bit, on
    /// the small-plane shapes it takes, 1 and 2 threads.
    #[test]
    fn channel_groups_match_the_scalar_sums() {
        if !crate::util::avx512() && !super::super::dw256::available() {
            return;
        }
        let mut seed = 7u32;
        let mut val = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        // (h, w, k, stride, pad)
        let shapes = [
            (7, 7, 3, 1, 1),
            (7, 7, 5, 1, 2),
            (14, 14, 3, 2, 1),
            (14, 14, 5, 1, 2),
            (28, 28, 3, 2, 1),
            (4, 4, 3, 1, 1),
            (13, 9, 3, 1, 1),
            (16, 16, 3, 1, 1),
            (9, 9, 3, 1, 0),
        ];
        // Groups of 8 (AVX2) also take channels in multiples of 8 and larger planes.
        let avx2 = !crate::util::avx512();
        let more: &[_] = match avx2 {
            true => &[
                (32, 32, 3, 2, 1),
                (40, 40, 3, 1, 1),
                (64, 64, 3, 2, 1),
                (112, 112, 3, 2, 1),
                (2, 2, 3, 1, 1),
                (6, 3, 3, 1, 1),
                (5, 1, 3, 1, 1),
                (8, 2, 5, 1, 2),
                (7, 9, 5, 2, 2),
            ],
            false => &[],
        };
        let chans: &[usize] = if avx2 { &[64, 80, 72] } else { &[64, 80] };
        for &(h, w, k, s, pad) in shapes.iter().chain(more) {
            for &ch in chans {
                for fused in [true, false] {
                    let n = 2;
                    let (oh, ow) = ((h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1);
                    let (xv, ov) = (view(n, ch, h, w), view(n, ch, oh, ow));
                    let xs: Vec<f32> = (0..n * ch * h * w).map(|_| val()).collect();
                    let wf: Vec<f32> = (0..ch * k * k).map(|_| val()).collect();
                    let bias: Vec<f32> = (0..ch).map(|_| val()).collect();
                    let fma = fused && matches!(k, 3 | 5);
                    let mut want = vec![0f32; n * ch * oh * ow];
                    for (idx, o) in want.iter_mut().enumerate() {
                        let (x, y) = (idx % ow, idx / ow % oh);
                        let (c, b) = (idx / (ow * oh) % ch, idx / (ow * oh * ch));
                        let mut acc = 0f32;
                        for i in 0..k {
                            for j in 0..k {
                                let iy = (y * s + i) as isize - pad as isize;
                                let ix = (x * s + j) as isize - pad as isize;
                                let inside =
                                    iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize;
                                let v = match inside {
                                    true => xs[((b * ch + c) * h + iy as usize) * w + ix as usize],
                                    false => 0.0,
                                };
                                let wt = wf[(c * k + i) * k + j];
                                acc = if fma {
                                    wt.mul_add(v, acc)
                                } else {
                                    acc + wt * v
                                };
                            }
                        }
                        *o = clamp_f32(acc + bias[c], -0.3, 0.4);
                    }
                    let c = Conv::depthwise(xv, ov, [k, k], [s, s], [pad, pad], [1, 1]);
                    for t in [1, 2] {
                        threads::set_num_threads(t);
                        let mut got = vec![f32::NAN; want.len()];
                        let ran =
                            super::run(&c, &xs, (&wf, Some(&bias)), &mut got, (-0.3, 0.4), fused);
                        assert!(ran, "{h}x{w} k{k} s{s} ch {ch}: not taken");
                        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{h}x{w} k{k} s{s} p{pad} ch {ch} fused {fused} [{i}]"
                            );
                        }
                    }
                }
            }
        }
        threads::set_num_threads(0);
    }
}
