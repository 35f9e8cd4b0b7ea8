//! Column tiles of a direct (1×1) convolution: the last 1 to [`MAX_COLS`] pixels of a
//! plane whose size is a multiple of 16 plus a few (7×7 planes: 48 + 1; 14×14: 192 + 4;
//! the single pixel of a squeeze-excitation convolution), with the lanes over the
//! [`MR`] output channels of a panel (one `ymm` vector per pixel) instead of over pixels,
//! where such a tail would take a whole pixel vector (16 lanes, 1 to 4 of them used) per
//! channel.
//!
//! The same sums in the same order as the pixel tiles: each output is its bias (or the
//! output's value, for a later block of terms), then one fused multiply-add per term, then
//! the clamp `min(hi, max(lo, x))`.

use super::{MR, Tile, TileFn};

/// The most pixels of a column tile.
pub(super) const MAX_COLS: usize = 4;

/// The most panels of a column tile of `cols` pixels: `panels · cols` accumulators, `cols`
/// broadcasts and a weight row in the 16 `ymm` registers (AVX2, or AVX-512F without VL).
pub(super) fn max_panels(cols: usize) -> usize {
    match cols {
        1 => 8,
        2 => 6,
        3 => 4,
        _ => 2,
    }
}

/// The column kernel for `cols` pixels (1 to [`MAX_COLS`]) of `panels` panels (1 to
/// [`max_panels`]).
#[cfg(target_arch = "x86_64")]
pub(super) fn kernel(cols: usize, panels: usize) -> TileFn {
    use x86::conv_cols as k;
    match (cols, panels) {
        (1, 1) => k::<1, 1>,
        (1, 2) => k::<2, 1>,
        (1, 3) => k::<3, 1>,
        (1, 4) => k::<4, 1>,
        (1, 5) => k::<5, 1>,
        (1, 6) => k::<6, 1>,
        (1, 7) => k::<7, 1>,
        (1, _) => k::<8, 1>,
        (2, 1) => k::<1, 2>,
        (2, 2) => k::<2, 2>,
        (2, 3) => k::<3, 2>,
        (2, 4) => k::<4, 2>,
        (2, 5) => k::<5, 2>,
        (2, _) => k::<6, 2>,
        (3, 1) => k::<1, 3>,
        (3, 2) => k::<2, 3>,
        (3, 3) => k::<3, 3>,
        (3, _) => k::<4, 3>,
        (_, 1) => k::<1, 4>,
        _ => k::<2, 4>,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, Tile};
    use std::arch::x86_64::*;

    /// `P` pixels × the [`MR`] channels of `NP` packed panels: panel `j`'s weight row `r`
    /// at `t.a + j · t.a_rs + r · MR`, its biases at `t.bias + j · MR`; pixel `p` of `col`
    /// row `r` at `t.b + r · t.b_ks + p`, output channel `c`'s at `t.c + c · t.c_rs + p`.
    ///
    /// # Safety
    /// AVX2 and FMA (every CPU with AVX-512F has them); `t.a` addresses `NP` panels of `t.k`
    /// rows of `MR`, `t.bias` `NP · MR` biases, `t.b` `t.k` rows of `P` pixels; `t.rows` (at
    /// most `NP · MR`) output rows of `P` pixels are writable (and readable, with
    /// `t.acc_in`) at `t.c`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn conv_cols<const NP: usize, const P: usize>(t: &Tile) {
        let rows = t.rows.min(NP * MR);
        let mut acc = [[_mm256_setzero_ps(); P]; NP];
        for (j, accj) in acc.iter_mut().enumerate() {
            let live = rows.saturating_sub(j * MR).min(MR);
            for (p, a) in accj.iter_mut().enumerate() {
                let mut v = [0f32; MR];
                if t.acc_in {
                    for (r, v) in v.iter_mut().enumerate().take(live) {
                        // SAFETY: output row `j · MR + r < t.rows`, pixel `p < P`.
                        *v = unsafe { *t.c.add((j * MR + r) * t.c_rs + p) };
                    }
                } else {
                    // SAFETY: panel `j`'s `MR` biases.
                    unsafe {
                        std::ptr::copy_nonoverlapping(t.bias.add(j * MR), v.as_mut_ptr(), MR)
                    };
                }
                // SAFETY: `v` holds `MR` (8) floats.
                *a = unsafe { _mm256_loadu_ps(v.as_ptr()) };
            }
        }
        let (mut a, mut b) = (t.a, t.b);
        for _ in 0..t.k {
            let mut xv = [_mm256_setzero_ps(); P];
            for (p, x) in xv.iter_mut().enumerate() {
                // SAFETY: pixel `p` of the `col` row.
                *x = _mm256_set1_ps(unsafe { *b.add(p) });
            }
            for (j, accj) in acc.iter_mut().enumerate() {
                // SAFETY: panel `j`'s row of `MR` weights.
                let w = unsafe { _mm256_loadu_ps(a.add(j * t.a_rs)) };
                for (x, &xp) in accj.iter_mut().zip(&xv) {
                    *x = _mm256_fmadd_ps(xp, w, *x);
                }
            }
            // SAFETY: the next panel rows (one past the last at the end); `b` steps by
            // `wrapping_add` and is not read past its last row.
            a = unsafe { a.add(MR) };
            b = b.wrapping_add(t.b_ks);
        }
        let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
        for (j, accj) in acc.iter().enumerate() {
            let live = rows.saturating_sub(j * MR).min(MR);
            for (p, &x) in accj.iter().enumerate() {
                let mut v = [0f32; MR];
                let y = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
                // SAFETY: `v` holds `MR` floats.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), y) };
                for (r, &v) in v.iter().enumerate().take(live) {
                    // SAFETY: output row `j · MR + r < t.rows`, pixel `p < P`.
                    unsafe { *t.c.add((j * MR + r) * t.c_rs + p) = v };
                }
            }
        }
    }
}
