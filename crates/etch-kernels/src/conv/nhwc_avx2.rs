//! The NHWC pixel kernels of [`super`] on AVX2 with FMA (CPUs without AVX-512F): the same
//! runs, tiles and arithmetic as its AVX-512 kernels in 8-lane vectors, so the same bits
//! (the depthwise sums in tap order from the bias, the clamp `min(hi, max(lo, x))`; max
//! pooling's NaN rule; the means summed in pixel order then divided). A block's last vector
//! is loaded and stored in its lanes only (`util::avx2`).

use super::Run;
use crate::util::avx2::{load, store};
use std::arch::x86_64::*;

/// Lanes of a vector.
const L: usize = 8;

/// Lanes of vector `v` of a block of `V` whose last vector has `last` lanes.
#[inline(always)]
fn width<const V: usize>(v: usize, last: usize) -> usize {
    if v + 1 < V { L } else { last }
}

/// `P` pixels of a run from pixel `p0` × channels `c0..c0 + 8 (V - 1) + last` of a
/// depthwise convolution: the bias, a fused multiply-add a tap (the weights loaded once for
/// the `P` pixels), the clamp.
///
/// # Safety
/// AVX2 and FMA; for each tap `(o, k)` and pixel `p`, `r.x + o + (p0 + p) · r.x_step + c0`
/// and `r.w + k · c + c0` hold the block's lanes, as do `r.bias + c0` (if not null) and
/// `r.out + (p0 + p) · c + c0`.
#[inline(always)]
unsafe fn dw_tile<const P: usize, const V: usize>(
    r: Run,
    (p0, c0, last): (usize, usize, usize),
    taps: &[(usize, usize)],
    (lo, hi): (__m256, __m256),
) {
    // SAFETY (every load and store): the caller's contract.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); V]; P];
        if !r.bias.is_null() {
            for v in 0..V {
                let b = load(r.bias.add(c0 + L * v), width::<V>(v, last));
                for a in acc.iter_mut() {
                    a[v] = b;
                }
            }
        }
        let x0 = r.x.add(p0 * r.x_step + c0);
        for &(o, k) in taps {
            let wp = r.w.add(k * r.c + c0);
            let wv: [__m256; V] = std::array::from_fn(|v| load(wp.add(L * v), width::<V>(v, last)));
            for (p, a) in acc.iter_mut().enumerate() {
                let xp = x0.add(o + p * r.x_step);
                for v in 0..V {
                    let xv = load(xp.add(L * v), width::<V>(v, last));
                    a[v] = _mm256_fmadd_ps(xv, wv[v], a[v]);
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            let op = r.out.add((p0 + p) * r.c + c0);
            for (v, &y) in a.iter().enumerate() {
                let y = _mm256_min_ps(hi, _mm256_max_ps(lo, y));
                store(op.add(L * v), y, width::<V>(v, last));
            }
        }
    }
}

/// Channels `c0..` (`V` vectors, the last of `last` lanes) of every pixel of a run: tiles
/// of `P` pixels, then one at a time.
///
/// # Safety
/// As [`dw_tile`], for all `n` pixels.
#[inline(always)]
unsafe fn dw_block<const P: usize, const V: usize>(
    r: Run,
    (n, c0, last): (usize, usize, usize),
    taps: &[(usize, usize)],
    bounds: (__m256, __m256),
) {
    let mut p0 = 0;
    // SAFETY: the caller's contract, each tile inside the run.
    unsafe {
        while p0 + P <= n {
            dw_tile::<P, V>(r, (p0, c0, last), taps, bounds);
            p0 += P;
        }
        while p0 < n {
            dw_tile::<1, V>(r, (p0, c0, last), taps, bounds);
            p0 += 1;
        }
    }
}

/// A run of depthwise output pixels over `c` channels: blocks of 16 channels (4 pixels a
/// tile), then 8, then the rest in one partial vector.
///
/// # Safety
/// AVX2 and FMA; otherwise as [`super::x86::depthwise_run`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn depthwise_run(
    c: usize,
    (x, step): (&[f32], usize),
    w: &[f32],
    bias: Option<&[f32]>,
    taps: &[(usize, usize)],
    px: &mut [f32],
    lo: f32,
    hi: f32,
) {
    let n = px.len() / c.max(1);
    let r = Run::new(c, (x, step), Some(w), bias, px);
    let bounds = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    let mut c0 = 0;
    // SAFETY (every block): the caller's contract, each block inside `c` channels.
    unsafe {
        while c0 + 2 * L <= c {
            dw_block::<4, 2>(r, (n, c0, L), taps, bounds);
            c0 += 2 * L;
        }
        if c0 < c {
            dw_block::<4, 1>(r, (n, c0, (c - c0).min(L)), taps, bounds);
            c0 += L;
        }
        if c0 < c {
            dw_block::<4, 1>(r, (n, c0, c - c0), taps, bounds);
        }
    }
}

/// One pixel × channels `c0..` (`V` vectors, the last of `last` lanes) of max pooling: the
/// largest tap, NaN if any tap is NaN.
///
/// # Safety
/// As [`dw_tile`] (no weights or bias).
#[inline(always)]
unsafe fn max_tile<const V: usize>(
    r: Run,
    (p0, c0, last): (usize, usize, usize),
    taps: &[(usize, usize)],
) {
    // SAFETY (every load and store): the caller's contract.
    unsafe {
        let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); V];
        let mut nan = [_mm256_setzero_ps(); V];
        let x0 = r.x.add(p0 * r.x_step + c0);
        for &(o, _) in taps {
            let xp = x0.add(o);
            for v in 0..V {
                let xv = load(xp.add(L * v), width::<V>(v, last));
                nan[v] = _mm256_or_ps(nan[v], _mm256_cmp_ps::<_CMP_UNORD_Q>(xv, xv));
                m[v] = _mm256_max_ps(m[v], xv);
            }
        }
        let op = r.out.add(p0 * r.c + c0);
        for v in 0..V {
            let y = _mm256_blendv_ps(m[v], _mm256_set1_ps(f32::NAN), nan[v]);
            store(op.add(L * v), y, width::<V>(v, last));
        }
    }
}

/// [`depthwise_run`] for max pooling.
///
/// # Safety
/// AVX2; otherwise as [`super::x86::max_run`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn max_run(
    c: usize,
    (x, step): (&[f32], usize),
    taps: &[(usize, usize)],
    px: &mut [f32],
) {
    let n = px.len() / c.max(1);
    let r = Run::new(c, (x, step), None, None, px);
    let mut c0 = 0;
    // SAFETY (every tile): the caller's contract, each inside the run and `c`.
    unsafe {
        while c0 < c {
            let rest = c - c0;
            for p0 in 0..n {
                match rest {
                    32.. => max_tile::<4>(r, (p0, c0, L), taps),
                    _ => max_tile::<1>(r, (p0, c0, rest.min(L)), taps),
                }
            }
            c0 += if rest >= 4 * L { 4 * L } else { L };
        }
    }
}

/// The means of the first `o.len()` channels over `hw` pixels `stride` apart: 32 channels
/// at a time summed over the pixels in order in registers, then divided by `hw`.
///
/// # Safety
/// AVX2; `x` holds `(hw - 1) · stride + o.len()` elements.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn channel_means(x: &[f32], (hw, stride): (usize, usize), o: &mut [f32]) {
    let (c, div) = (o.len(), _mm256_set1_ps(hw as f32));
    let mut c0 = 0;
    while c0 < c {
        let n = (c - c0).min(4 * L);
        let lanes: [usize; 4] = std::array::from_fn(|v| n.saturating_sub(L * v).min(L));
        let mut acc = [_mm256_setzero_ps(); 4];
        for p in 0..hw {
            // SAFETY: pixel `p`'s channels `c0..c0 + n`.
            let row = unsafe { x.as_ptr().add(p * stride + c0) };
            for (v, a) in acc.iter_mut().enumerate() {
                if lanes[v] > 0 {
                    // SAFETY: as above (vector `v` of the block, in its lanes).
                    *a = _mm256_add_ps(*a, unsafe { load(row.add(L * v), lanes[v]) });
                }
            }
        }
        for (v, &a) in acc.iter().enumerate() {
            if lanes[v] > 0 {
                // SAFETY: channels `c0 + 8 v ..` of `o`, in its lanes.
                unsafe {
                    store(
                        o.as_mut_ptr().add(c0 + L * v),
                        _mm256_div_ps(a, div),
                        lanes[v],
                    )
                };
            }
        }
        c0 += n;
    }
}
