//! [`super::plane_f32`] without indices for 3×3 windows at stride 2 (resnet's pooling), on
//! AVX2: separably, each input row's three-column maxima first (8 outputs from two
//! 16-element loads split into even and odd elements), then the maxima of three of those
//! rows. The window rule ([`super::window_max`]) keeps the first NaN, else the first of the
//! equal largest values, in row-major order; taking it over each row and then over the rows
//! keeps the same element, so the values are the rule's, bit for bit.

use super::PoolGeom;
use std::arch::x86_64::*;

/// Whether this path takes `g` (values only): a 3×3 window, stride 2, no dilation, padding
/// at most 1.
pub(super) fn takes(g: &PoolGeom) -> bool {
    g.kernel == [3, 3]
        && g.stride == [2, 2]
        && g.dil == [1, 1]
        && g.pad[0] <= 1
        && g.pad[1] <= 1
        && g.oh > 0
}

/// The rule's maximum of `a` (earlier) and `b` (later): `b` where it is greater, or NaN
/// while `a` is not.
#[inline]
#[target_feature(enable = "avx2")]
fn later_max(a: __m256, b: __m256) -> __m256 {
    let up = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_NLE_UQ>(b, a),
        _mm256_cmp_ps::<_CMP_ORD_Q>(a, a),
    );
    _mm256_blendv_ps(a, b, up)
}

/// The rule's maximum, one element.
#[inline]
fn later_max1(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() && !a.is_nan() {
        b
    } else {
        a
    }
}

/// The even and the odd elements of the 16 at `p`, each in the lane order
/// `(0, 2, 8, 10, 4, 6, 12, 14)` of their rank ([`in_order`] puts them in order): lane by
/// lane maxima of such vectors need the one permutation at the end.
///
/// # Safety
/// AVX2; 16 elements readable at `p`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn evens_odds(p: *const f32) -> (__m256, __m256) {
    // SAFETY: the caller's contract.
    let (l, h) = unsafe { (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) };
    (
        _mm256_shuffle_ps::<0b10_00_10_00>(l, h),
        _mm256_shuffle_ps::<0b11_01_11_01>(l, h),
    )
}

/// A vector from [`evens_odds`] in rank order.
#[inline]
#[target_feature(enable = "avx2")]
fn in_order(v: __m256) -> __m256 {
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
}

/// Row `ih` of the plane `x` into the column maxima of each output column: `hm[xo]` is the
/// rule's maximum of columns `2 xo - pad .. 2 xo - pad + 3` inside the row. Eight outputs
/// at a time where their columns are inside the row (the loads may read one element past
/// it, inside `x`; an unused lane), the last eight overlapping the ones before, the rest
/// one by one.
///
/// # Safety
/// AVX2; `ih < g.h`; `x` holds the plane (`h · w` elements); `hm` `ow` elements.
#[target_feature(enable = "avx2")]
unsafe fn columns(g: &PoolGeom, x: &[f32], ih: usize, hm: &mut [f32]) {
    let (w, pad, ow) = (g.w, g.pad[1], g.ow);
    let row = &x[ih * w..(ih + 1) * w];
    let scalar = |xo: usize| {
        let mut m: Option<f32> = None;
        for j in 0..3 {
            let c = (2 * xo + j) as isize - pad as isize;
            if (0..w as isize).contains(&c) {
                let v = row[c as usize];
                m = Some(m.map_or(v, |m| later_max1(m, v)));
            }
        }
        m.unwrap_or(f32::NEG_INFINITY)
    };
    // Eight outputs from `xo` (at least `pad`) use columns `2 xo - pad ..= 2 xo - pad + 16`
    // and read up to `2 xo - pad + 17`.
    let fits = |xo: usize| {
        xo >= pad && xo + 8 <= ow && 2 * xo - pad + 17 <= w && ih * w + 2 * xo - pad + 18 <= x.len()
    };
    let block = |xo: usize, hm: &mut [f32]| {
        let base = ih * w + 2 * xo - pad;
        // SAFETY: `base .. base + 18` lies in `x` (`fits`); `hm` has `xo + 8 <= ow`.
        unsafe {
            let (t0, t1) = evens_odds(x.as_ptr().add(base));
            let (t2, _) = evens_odds(x.as_ptr().add(base + 2));
            let m = in_order(later_max(later_max(t0, t1), t2));
            _mm256_storeu_ps(hm.as_mut_ptr().add(xo), m);
        }
    };
    let mut xo = 0;
    while xo < pad.min(ow) {
        hm[xo] = scalar(xo);
        xo += 1;
    }
    while fits(xo) {
        block(xo, hm);
        xo += 8;
    }
    if xo < ow && ow >= 8 && fits(ow - 8) {
        block(ow - 8, hm);
        xo = ow;
    }
    while xo < ow {
        hm[xo] = scalar(xo);
        xo += 1;
    }
}

/// Max pooling of one plane (values only), see the module doc.
///
/// # Safety
/// AVX2; [`takes`] `g`; `x` holds `h · w` elements, `out` `oh · ow`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn plane(g: &PoolGeom, x: &[f32], out: &mut [f32]) {
    let (ow, x) = (g.ow, &x[..g.h * g.w]);
    // Column maxima of three input rows, by input row modulo 3 (each written by `columns`
    // before it is read: scratch, not filled).
    let mut buf = crate::scratch::take_dirty(3 * ow, 0f32);
    let (r0, rest) = buf.split_at_mut(ow);
    let (r1, r2) = rest.split_at_mut(ow);
    let rows = [r0, r1, r2];
    let mut have = [usize::MAX; 3];
    for y in 0..g.oh {
        let (mut slots, mut n) = ([0usize; 3], 0);
        for i in 0..3 {
            let ih = (2 * y + i) as isize - g.pad[0] as isize;
            if ih < 0 || ih as usize >= g.h {
                continue;
            }
            let ih = ih as usize;
            if have[ih % 3] != ih {
                // SAFETY: `ih < h`; `x` is the plane; the slot holds `ow` elements.
                unsafe { columns(g, x, ih, rows[ih % 3]) };
                have[ih % 3] = ih;
            }
            slots[n] = ih % 3;
            n += 1;
        }
        let o = &mut out[y * ow..(y + 1) * ow];
        let r: [&[f32]; 3] = std::array::from_fn(|k| &*rows[slots[k]]);
        let mut xo = 0;
        while n == 3 && xo + 8 <= ow {
            // SAFETY: elements `xo .. xo + 8` of `o` and of the rows.
            unsafe {
                let v = |k: usize| _mm256_loadu_ps(r[k].as_ptr().add(xo));
                let m = later_max(later_max(v(0), v(1)), v(2));
                _mm256_storeu_ps(o.as_mut_ptr().add(xo), m);
            }
            xo += 8;
        }
        for xo in xo..ow {
            o[xo] = match n {
                0 => f32::NEG_INFINITY,
                1 => r[0][xo],
                2 => later_max1(r[0][xo], r[1][xo]),
                _ => later_max1(later_max1(r[0][xo], r[1][xo]), r[2][xo]),
            };
        }
    }
}
