//! The micro-kernels of [`super`] on AVX2 with FMA, for CPUs without AVX-512F (AMD Zen 1
//! to 3, Intel before Skylake-SP): the same [`Tile`]s, in 256-bit vectors of 8 lanes. A
//! tile's `16 V` columns (fully connected) or pixels (convolution) are `2 V` chunks of 8,
//! computed a few chunks at a time so that the accumulators fit the 16 `ymm` registers;
//! chunks past the tile's last lane are skipped (or computed and not stored), the last
//! partial chunk loaded (convolution `col` rows, earlier blocks' outputs) and stored in its
//! lanes only. Every output is still its bias (or the output's value, for a later block of
//! terms), then one fused multiply-add per term in order, then `min(hi, max(lo, x))`: the
//! AVX-512 kernels' bits.

use super::{NR, PF_AHEAD, Tile};
use crate::util::avx2::{load, store};
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

/// A fully-connected tile: `M` rows of `x` × `16 V` columns of a packed panel, in row
/// groups that keep the accumulators at 12 or fewer: for 7 or 8 rows, 6 rows × 2 chunks of
/// 8 columns then the rest × 4; for up to 6 rows, all of them × `C` chunks.
///
/// # Safety
/// AVX2 and FMA; `t.a` addresses `M` rows of `t.k` elements `t.a_rs` apart, `t.b` a panel
/// of `t.k` rows of [`NR`] and `t.bias` `NR` biases; `t.rows` (at most `M`) output rows of
/// the tile's columns are writable at `t.c`, `t.c_rs` apart.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn fc<const M: usize, const V: usize, const C: usize>(t: &Tile) {
    let n = cols::<V>(t);
    // SAFETY (all): the caller's contract, for the rows each group takes.
    unsafe {
        match M {
            8 => {
                fc_rows::<6, 2>(t, 0, n);
                fc_rows::<2, 4>(t, 6, n);
            }
            7 => {
                fc_rows::<6, 2>(t, 0, n);
                fc_rows::<1, 4>(t, 6, n);
            }
            _ => fc_rows::<M, C>(t, 0, n),
        }
    }
}

/// Rows `r0..r0 + M` of a fully-connected tile (those below `t.rows` stored), `C` chunks
/// of 8 of its `n` columns at a time.
///
/// # Safety
/// As [`fc`], for rows `r0..r0 + M` (`x` rows readable, output rows below `t.rows`
/// writable).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fc_rows<const M: usize, const C: usize>(t: &Tile, r0: usize, n: usize) {
    let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
    let mut a = [t.a; M];
    for (r, p) in a.iter_mut().enumerate() {
        // SAFETY: row `r0 + r` of `x`.
        *p = unsafe { t.a.add((r0 + r) * t.a_rs) };
    }
    for c0 in (0..n.div_ceil(L)).step_by(C) {
        let mut acc = [[_mm256_setzero_ps(); C]; M];
        for c in 0..C {
            // SAFETY: the panel's biases (`NR` of them: chunk `c0 + c < NR / 8`, as `C`
            // divides 4).
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
        for (r, row) in acc.iter().enumerate().take(t.rows.saturating_sub(r0)) {
            for (c, &x) in row.iter().enumerate() {
                let j = L * (c0 + c);
                if j < n {
                    // SAFETY: columns `j..min(j + 8, n)` of output row `r0 + r`.
                    unsafe { put(t.c.add((r0 + r) * t.c_rs + j), x, n - j, lo, hi) };
                }
            }
        }
    }
}

/// A convolution tile: the [`super::MR`] channels of a packed panel × `16 V` pixels of `col`, in
/// two groups of channels: 6 × 2 chunks of 8 pixels at a time, then 2 × 4 (12 and 8
/// accumulators); with `IND`, `col` row `r` is at `t.b + t.offs[r]`, else at
/// `t.b + r · t.b_ks`. With `PF`, the weights are prefetched ahead (by the first chunks,
/// which read them first).
///
/// # Safety
/// AVX2 and FMA; `t.a` addresses a panel of `t.k` rows of `MR` (`t.a_ks` apart), `t.bias`
/// `MR` biases, `t.b` `t.k` rows (`t.offs` `t.k` offsets with `IND`) of the tile's pixels;
/// `t.rows` output rows of them are writable (and readable, with `t.acc_in`) at `t.c`,
/// `t.c_rs` apart.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn conv<const V: usize, const IND: bool, const PF: bool>(t: &Tile) {
    let n = cols::<V>(t);
    // SAFETY (all): the caller's contract, for the channels each group takes.
    unsafe {
        conv_rows::<6, 2, IND, PF>(t, 0, n);
        if t.rows > 6 {
            match V {
                1 => conv_rows::<2, 2, IND, false>(t, 6, n),
                _ => conv_rows::<2, 4, IND, false>(t, 6, n),
            }
        }
    }
}

/// Channels `r0..r0 + M` of a convolution tile (those below `t.rows` stored), `C` chunks of
/// 8 of its `n` pixels at a time.
///
/// # Safety
/// As [`conv`], for channels `r0..r0 + M` of the panel.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn conv_rows<const M: usize, const C: usize, const IND: bool, const PF: bool>(
    t: &Tile,
    r0: usize,
    n: usize,
) {
    let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
    let live = t.rows.saturating_sub(r0).min(M);
    for j0 in (0..n).step_by(L * C) {
        // Pixels of each chunk (0 past the tile's last: loaded as zeros, not stored).
        let mut len = [0; C];
        for (c, len) in len.iter_mut().enumerate() {
            *len = n.saturating_sub(j0 + L * c).min(L);
        }
        let mut acc = [[_mm256_setzero_ps(); C]; M];
        for (r, row) in acc.iter_mut().enumerate() {
            for (c, x) in row.iter_mut().enumerate() {
                *x = if !t.acc_in {
                    // SAFETY: the panel's biases.
                    _mm256_set1_ps(unsafe { *t.bias.add(r0 + r) })
                } else if r < live {
                    // SAFETY: the chunk's pixels of output row `r0 + r < t.rows`.
                    unsafe { load(t.c.add((r0 + r) * t.c_rs + j0 + L * c), len[c]) }
                } else {
                    _mm256_setzero_ps()
                };
            }
        }
        // SAFETY: weight `r0` of the panel's first row.
        let mut a = unsafe { t.a.add(r0) };
        let mut b = t.b.wrapping_add(j0);
        for kk in 0..t.k {
            if IND {
                // SAFETY: offset `kk` of the table; the row it gives is inside the input.
                b = unsafe { t.b.add(*t.offs.add(kk) as usize + j0) };
            }
            let mut bv = [_mm256_setzero_ps(); C];
            for (c, x) in bv.iter_mut().enumerate() {
                // SAFETY: the chunk's pixels of a `col` row.
                *x = unsafe { load(b.add(L * c), len[c]) };
            }
            if PF && j0 == 0 {
                // A hint; the address need not be inside the weights.
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PF_AHEAD) as *const i8);
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: weight `r0 + r` of the panel row.
                let av = _mm256_set1_ps(unsafe { *a.add(r) });
                for (x, &w) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, w, *x);
                }
            }
            // SAFETY: the next rows (one past the last at the end; `b` may step past the
            // end of its slice only by `wrapping_add`, it is not read then).
            a = unsafe { a.add(t.a_ks) };
            b = b.wrapping_add(t.b_ks);
        }
        for (r, row) in acc.iter().enumerate().take(live) {
            for (c, &x) in row.iter().enumerate() {
                if len[c] > 0 {
                    // SAFETY: the chunk's pixels of output row `r0 + r < t.rows`.
                    unsafe { put(t.c.add((r0 + r) * t.c_rs + j0 + L * c), x, len[c], lo, hi) };
                }
            }
        }
    }
}
