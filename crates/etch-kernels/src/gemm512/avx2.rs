//! The micro-kernels of [`super`] on AVX2 with FMA, for CPUs without AVX-512F (AMD Zen 1
//! to 3, Intel before Skylake-SP): the same [`Tile`]s, in 256-bit vectors of 8 lanes. A
//! tile's `16 V` columns (fully connected) or pixels (convolution) are `2 V` chunks of 8,
//! computed a few chunks at a time so that the accumulators fit the 16 `ymm` registers;
//! chunks past the tile's last lane are skipped (or computed and not stored), the last
//! partial chunk loaded (convolution `col` rows, earlier blocks' outputs) and stored in its
//! lanes only. Every output is still its bias (or the output's value, for a later block of
//! terms), then one fused multiply-add per term in order, then `min(hi, max(lo, x))`: the
//! AVX-512 kernels' bits.

use super::{MR, NR, PF_AHEAD, Tile};
use crate::transpose16::x86_avx2::{load, store};
use std::arch::x86_64::*;

/// Lanes of a vector.
const L: usize = 8;

/// The tile's columns (pixels): `16 (V - 1)` full lanes, then the last vector's mask.
fn cols<const V: usize>(t: &Tile) -> usize {
    16 * (V - 1) + t.mask.count_ones() as usize
}

/// Clamps `x` and stores its first `n` lanes at `p`.
///
/// # Safety
/// AVX2; `p` writable at `n` elements.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn put(p: *mut f32, x: __m256, n: usize, lo: __m256, hi: __m256) {
    // SAFETY: the caller's contract.
    unsafe { store(p, _mm256_min_ps(hi, _mm256_max_ps(lo, x)), n) }
}

/// A fully-connected tile: `M` rows of `x` × `16 V` columns of a packed panel, `C` chunks
/// of 8 columns at a time (`M · C` accumulators).
///
/// # Safety
/// AVX2 and FMA; `t.a` addresses `M` rows of `t.k` elements `t.a_rs` apart, `t.b` a panel
/// of `t.k` rows of [`NR`] and `t.bias` `NR` biases; `t.rows` (at most `M`) output rows of
/// the tile's columns are writable at `t.c`, `t.c_rs` apart.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn fc<const M: usize, const V: usize, const C: usize>(t: &Tile) {
    let n = cols::<V>(t);
    let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
    let mut a = [t.a; M];
    for (r, p) in a.iter_mut().enumerate() {
        // SAFETY: row `r` of `x`.
        *p = unsafe { t.a.add(r * t.a_rs) };
    }
    for c0 in (0..n.div_ceil(L)).step_by(C) {
        let mut acc = [[_mm256_setzero_ps(); C]; M];
        for c in 0..C {
            // SAFETY: the panel's biases (`NR` of them: chunk `c0 + c < NR / 8`).
            let bv = unsafe { _mm256_loadu_ps(t.bias.add(L * (c0 + c))) };
            for row in acc.iter_mut() {
                row[c] = bv;
            }
        }
        // SAFETY: chunk `c0`'s column of panel row 0.
        let mut b = unsafe { t.b.add(L * c0) };
        for kk in 0..t.k {
            let mut bv = [_mm256_setzero_ps(); C];
            for (c, x) in bv.iter_mut().enumerate() {
                // SAFETY: panel row `kk` has `NR >= 8 (c0 + c + 1)` elements.
                *x = unsafe { _mm256_loadu_ps(b.add(L * c)) };
            }
            for (row, p) in acc.iter_mut().zip(&a) {
                // SAFETY: element `kk` of a row of `x`.
                let av = _mm256_set1_ps(unsafe { *p.add(kk) });
                for (x, &w) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, w, *x);
                }
            }
            // SAFETY: the next panel row (one past the last at the end).
            b = unsafe { b.add(NR) };
        }
        for (r, row) in acc.iter().enumerate().take(t.rows) {
            for (c, &x) in row.iter().enumerate() {
                let j = L * (c0 + c);
                if j < n {
                    // SAFETY: columns `j..min(j + 8, n)` of output row `r`.
                    unsafe { put(t.c.add(r * t.c_rs + j), x, n - j, lo, hi) };
                }
            }
        }
    }
}

/// A convolution tile: the [`MR`] channels of a packed panel × `16 V` pixels of `col`, a
/// chunk of 8 pixels at a time (8 accumulators); with `IND`, `col` row `r` is at
/// `t.b + t.offs[r]`, else at `t.b + r · t.b_ks`. With `PF`, the weights are prefetched
/// ahead (by the first chunk, which reads them first).
///
/// # Safety
/// AVX2 and FMA; `t.a` addresses a panel of `t.k` rows of `MR` (`t.a_ks` apart), `t.bias`
/// `MR` biases, `t.b` `t.k` rows (`t.offs` `t.k` offsets with `IND`) of the tile's pixels;
/// `t.rows` output rows of them are writable (and readable, with `t.acc_in`) at `t.c`,
/// `t.c_rs` apart.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn conv<const V: usize, const IND: bool, const PF: bool>(t: &Tile) {
    let n = cols::<V>(t);
    let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
    for j in (0..n).step_by(L) {
        let len = (n - j).min(L);
        let mut acc = [_mm256_setzero_ps(); MR];
        if t.acc_in {
            for (r, x) in acc.iter_mut().enumerate().take(t.rows) {
                // SAFETY: pixels `j..j + len` of output row `r < t.rows`.
                *x = unsafe { load(t.c.add(r * t.c_rs + j), len) };
            }
        } else {
            for (r, x) in acc.iter_mut().enumerate() {
                // SAFETY: the panel's biases.
                *x = _mm256_set1_ps(unsafe { *t.bias.add(r) });
            }
        }
        let (mut a, mut b) = (t.a, t.b.wrapping_add(j));
        for kk in 0..t.k {
            if IND {
                // SAFETY: offset `kk` of the table; the row it gives is inside the input.
                b = unsafe { t.b.add(*t.offs.add(kk) as usize + j) };
            }
            // SAFETY: pixels `j..j + len` of a `col` row.
            let bv = unsafe { load(b, len) };
            if PF && j == 0 {
                // A hint; the address need not be inside the weights.
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PF_AHEAD) as *const i8);
            }
            for (r, x) in acc.iter_mut().enumerate() {
                // SAFETY: weight `r` of the panel row.
                let av = _mm256_set1_ps(unsafe { *a.add(r) });
                *x = _mm256_fmadd_ps(av, bv, *x);
            }
            // SAFETY: the next rows (one past the last at the end; `b` may step past the
            // end of its slice only by `wrapping_add`, it is not read then).
            a = unsafe { a.add(t.a_ks) };
            b = b.wrapping_add(t.b_ks);
        }
        for (r, &x) in acc.iter().enumerate().take(t.rows) {
            // SAFETY: pixels `j..j + len` of output row `r < t.rows`.
            unsafe { put(t.c.add(r * t.c_rs + j), x, len, lo, hi) };
        }
    }
}
