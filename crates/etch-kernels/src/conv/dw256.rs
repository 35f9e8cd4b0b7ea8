//! Depthwise convolution planes of `f32` on AVX2 with FMA, for CPUs without AVX-512F
//! (AMD Zen 1 to 3, Intel before Skylake-SP): [`super::dw512`]'s padded-plane kernel in
//! blocks of 8 pixels. Per output the taps run in order `(i, j)` from +0, `acc += w * x` as a
//! product then a sum (the portable [`super::dw_plane`]'s bits), or, with `FUSED` (the
//! XNNPACK delegate's square 3×3 and 5×5 taps, as the AVX-512 row kernel), one fused
//! multiply-add a tap; then `+ bias` and the clamp.

use super::DW_BLOCKS;
use super::dw512::Geo;
use crate::util::avx2::clamp;
use std::arch::x86_64::*;

/// Pixels of a block (one 256-bit vector of `f32`).
pub(super) const LANES: usize = 8;

/// Whether the CPU has AVX2 and FMA (and `ETCH_F32_AVX2` is not `0`).
pub(super) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::env::var("ETCH_F32_AVX2").map_or(true, |v| v != "0") && crate::util::avx2_fma()
    })
}

/// The plane's outputs in blocks of 8 pixels of a row, [`DW_BLOCKS`] blocks (of any rows)
/// at a time.
///
/// # Safety
/// The CPU has AVX2 and FMA; `pad` holds every element the taps read from a block base
/// (`y * srow + x0 * SW`, also for blocks past the last, which read from 0) through
/// `8 * SW` more; `out` holds `(oh - 1) * ostride + ow` elements.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn planes<const SW: usize, const FUSED: bool>(
    pad: &[f32],
    w: &[f32],
    bias: f32,
    (lo, hi): (f32, f32),
    out: &mut [f32],
    g: &Geo,
) {
    let xblocks = g.ow.div_ceil(LANES);
    let nblocks = g.oh * xblocks;
    let tail = (g.ow - (xblocks - 1) * LANES) as i32;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let tail_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), lane);
    let (bv, lov, hiv) = (_mm256_set1_ps(bias), _mm256_set1_ps(lo), _mm256_set1_ps(hi));
    let (p, o) = (pad.as_ptr(), out.as_mut_ptr());
    let (mut y, mut xb, mut b) = (0, 0, 0);
    while b < nblocks {
        let cnt = DW_BLOCKS.min(nblocks - b);
        let mut base = [0usize; DW_BLOCKS];
        let mut dst = [(0usize, false); DW_BLOCKS];
        for k in 0..cnt {
            base[k] = y * g.srow + xb * LANES * SW;
            dst[k] = (y * g.ostride + xb * LANES, xb + 1 == xblocks);
            xb += 1;
            if xb == xblocks {
                (xb, y) = (0, y + 1);
            }
        }
        // SAFETY: the caller's bounds on `pad`.
        let acc = unsafe { blocks::<SW, FUSED>(p, w, g, &base) };
        for (a, &(at, last)) in acc.iter().zip(&dst).take(cnt) {
            // Stride 2: the lanes hold outputs [0 1 4 5 | 2 3 6 7] (`blocks`); in order.
            let a = if SW == 2 {
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(*a)))
            } else {
                *a
            };
            let v = clamp(_mm256_add_ps(a, bv), lov, hiv);
            // SAFETY: lanes `x0..x0 + 8` of an output row (the last block of a row masked to
            // its `ow` outputs), in `out`.
            unsafe {
                if last {
                    _mm256_maskstore_ps(o.add(at), tail_mask, v);
                } else {
                    _mm256_storeu_ps(o.add(at), v);
                }
            }
        }
        b += cnt;
    }
}

/// [`DW_BLOCKS`] blocks of 8 outputs from `base[k]`: per tap in order, `acc += w * x` (one
/// fused multiply-add with `FUSED`). Stride 2 loads 16 elements and keeps the even ones by
/// one in-lane shuffle, which leaves the outputs in lanes [0 1 4 5 | 2 3 6 7] for [`planes`]
/// to put in order once a block (a cross-lane permute a tap cost Zen 1 as much as the
/// products; splitting the padded rows into even and odd columns once a plane cost more
/// than it saved on 14² to 56² planes).
///
/// # Safety
/// As [`planes`].
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn blocks<const SW: usize, const FUSED: bool>(
    p: *const f32,
    w: &[f32],
    g: &Geo,
    base: &[usize; DW_BLOCKS],
) -> [__m256; DW_BLOCKS] {
    let mut acc = [_mm256_setzero_ps(); DW_BLOCKS];
    for i in 0..g.kh {
        for j in 0..g.kw {
            let wv = _mm256_set1_ps(w[i * g.kw + j]);
            let off = i * g.rstep + j * g.cstep;
            for (a, &bk) in acc.iter_mut().zip(base) {
                // SAFETY: within `pad` (the caller's bounds).
                let x = unsafe {
                    let q = p.add(bk + off);
                    if SW == 1 {
                        _mm256_loadu_ps(q)
                    } else {
                        // [x0 x2 x8 x10 | x4 x6 x12 x14]: outputs [0 1 4 5 | 2 3 6 7].
                        let (l, h) = (_mm256_loadu_ps(q), _mm256_loadu_ps(q.add(8)));
                        _mm256_shuffle_ps::<0b10_00_10_00>(l, h)
                    }
                };
                *a = if FUSED {
                    _mm256_fmadd_ps(wv, x, *a)
                } else {
                    _mm256_add_ps(*a, _mm256_mul_ps(wv, x))
                };
            }
        }
    }
    acc
}
