//! Depthwise planes by groups of output rows, for square 3×3 and 5×5 kernels with equal
//! strides 1 or 2 and no dilation. Each input row's tap vectors are loaded (at stride 2 also
//! deinterleaved) once and used by every output row of the group that reads that row, where
//! [`super::kernel`] loads them once per output row and tap: 3–4× fewer loads and permutes.
//! Per output the taps still run in order `(i, j)` from +0, then `+ bias` and the clamp:
//! with `FMA` false each tap is a product then a sum (the portable sums, bit for bit), with
//! `FMA` true one fused multiply-add (one rounding a tap, as XNNPACK's own kernels).

use super::Geo;
use std::arch::x86_64::*;

/// Output rows a group (where the plane has that many).
const R: usize = 4;

/// The most taps a kernel has here (5×5).
const TAPS: usize = 25;

/// One plane (see [`super::kernel::planes`] for the layout and bounds).
///
/// # Safety
/// The CPU has AVX-512F; `pad` holds every element the taps read from a block base
/// (`y * srow + x0 * S`) through `16 * S` more (`Fast::plane` asserts it); `out` holds
/// `(oh - 1) * ostride + ow` elements; `w` holds `K * K` weights.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run<const K: usize, const S: usize, const FMA: bool>(
    pad: &[f32],
    w: &[f32],
    bias: f32,
    (lo, hi): (f32, f32),
    out: &mut [f32],
    g: &Geo,
) {
    let mut wv = [_mm512_setzero_ps(); TAPS];
    for (v, &x) in wv.iter_mut().zip(&w[..K * K]) {
        *v = _mm512_set1_ps(x);
    }
    let xblocks = g.ow.div_ceil(16);
    let tail = g.ow - (xblocks - 1) * 16;
    let st = Store {
        o: out.as_mut_ptr(),
        ostride: g.ostride,
        bias: _mm512_set1_ps(bias),
        lo: _mm512_set1_ps(lo),
        hi: _mm512_set1_ps(hi),
        last: xblocks - 1,
        tail: (u32::MAX >> (32 - tail)) as u16,
    };
    let p = pad.as_ptr();
    // SAFETY (each call): rows and blocks within the plane's (the caller's bounds).
    if g.oh >= R {
        // The last group ends at the last row (overlapping the one before: those rows are
        // computed twice, the same values).
        for y0 in (0..g.oh).step_by(R) {
            unsafe { group::<K, S, R, FMA>(p, g, &wv, &st, y0.min(g.oh - R), xblocks) };
        }
    } else {
        for y in 0..g.oh {
            unsafe { group::<K, S, 1, FMA>(p, g, &wv, &st, y, xblocks) };
        }
    }
}

/// Where and how outputs are stored: `+ bias`, the clamp, masked to the row.
struct Store {
    o: *mut f32,
    ostride: usize,
    bias: __m512,
    lo: __m512,
    hi: __m512,
    /// The last block of a row and its lanes.
    last: usize,
    tail: u16,
}

impl Store {
    /// Output row `y`, block `xb`.
    ///
    /// # Safety
    /// `(y, xb)` is in the plane.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn put(&self, y: usize, xb: usize, a: __m512) {
        // `clamp_f32`: `lo` where `v < lo`, else `hi` where `v > hi` (NaN stays).
        let v = _mm512_add_ps(a, self.bias);
        let lt = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, self.lo);
        let gt = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, self.hi);
        let v = _mm512_mask_blend_ps(lt, _mm512_mask_blend_ps(gt, v, self.hi), self.lo);
        let m = if xb == self.last { self.tail } else { u16::MAX };
        // SAFETY: lanes masked to the row's outputs (the caller's bounds).
        unsafe { _mm512_mask_storeu_ps(self.o.add(y * self.ostride + xb * 16), m, v) };
    }
}

/// Output rows `y..y + RR` of every block: two blocks at a time, then the odd one.
///
/// # Safety
/// As [`run`], with `y + RR <= oh`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn group<const K: usize, const S: usize, const RR: usize, const FMA: bool>(
    p: *const f32,
    g: &Geo,
    wv: &[__m512; TAPS],
    st: &Store,
    y: usize,
    xblocks: usize,
) {
    let mut xb = 0;
    while xb + 1 < xblocks {
        // SAFETY: the caller's bounds.
        unsafe {
            let acc = tile::<K, S, RR, 2, FMA>(p.add(y * g.srow + xb * 16 * S), g.rstep, wv);
            for (r, a) in acc.iter().enumerate() {
                st.put(y + r, xb, a[0]);
                st.put(y + r, xb + 1, a[1]);
            }
        }
        xb += 2;
    }
    if xb < xblocks {
        // SAFETY: the caller's bounds.
        unsafe {
            let acc = tile::<K, S, RR, 1, FMA>(p.add(y * g.srow + xb * 16 * S), g.rstep, wv);
            for (r, a) in acc.iter().enumerate() {
                st.put(y + r, xb, a[0]);
            }
        }
    }
}

/// `RR` output rows × `CB` blocks of 16 from `p` (the first row's first block's first
/// tap): input row by input row, each row's `K` tap vectors to every output row reading it.
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile<
    const K: usize,
    const S: usize,
    const RR: usize,
    const CB: usize,
    const FMA: bool,
>(
    p: *const f32,
    rstep: usize,
    wv: &[__m512; TAPS],
) -> [[__m512; CB]; RR] {
    let mut acc = [[_mm512_setzero_ps(); CB]; RR];
    for ir in 0..(RR - 1) * S + K {
        for c in 0..CB {
            // SAFETY: the caller's bounds.
            let x = unsafe { taps::<K, S>(p.add(ir * rstep + c * 16 * S)) };
            for (r, row) in acc.iter_mut().enumerate() {
                // Output row r reads input row ir as its kernel row i.
                let Some(i) = ir.checked_sub(r * S).filter(|&i| i < K) else {
                    continue;
                };
                for (j, &xj) in x.iter().enumerate() {
                    let wij = wv[i * K + j];
                    row[c] = if FMA {
                        _mm512_fmadd_ps(wij, xj, row[c])
                    } else {
                        _mm512_add_ps(row[c], _mm512_mul_ps(wij, xj))
                    };
                }
            }
        }
    }
    acc
}

/// The `K` tap vectors of one input row for 16 outputs from `q`: lane `l` of vector `j` is
/// `q[l * S + j]` (at stride 2 deinterleaved from pairs of loads).
///
/// # Safety
/// `q[..(K - 1) + 16 * S]` is readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn taps<const K: usize, const S: usize>(q: *const f32) -> [__m512; K] {
    let mut x = [_mm512_setzero_ps(); K];
    // SAFETY: within the caller's bounds.
    unsafe {
        if S == 1 {
            for (j, v) in x.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(q.add(j));
            }
        } else {
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            for m in 0..K.div_ceil(2) {
                let (a, b) = (
                    _mm512_loadu_ps(q.add(2 * m)),
                    _mm512_loadu_ps(q.add(2 * m + 16)),
                );
                x[2 * m] = _mm512_permutex2var_ps(a, even, b);
                if 2 * m + 1 < K {
                    x[2 * m + 1] = _mm512_permutex2var_ps(a, odd, b);
                }
            }
        }
    }
    x
}
