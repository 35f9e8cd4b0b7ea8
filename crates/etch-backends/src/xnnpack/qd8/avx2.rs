//! AVX2 kernel of [`super`]'s fully-connected layer on [`super::Packing::Maddubs`] panels
//! (4-bit filters): `vpmaddubsw` multiplies the unsigned weights (`w + 8`, in `[0, 15]`) by
//! the signed activations and adds pairs in i16, eight steps of four channels are summed in
//! i16, then widened to i32 (`vpmaddwd` by ones). Every i16 sum stays within
//! `8 * 2 * 15 * 128 = 30720`, so the integer sums are exact, and the float arithmetic is
//! [`Fc::element`]'s, lane by lane: the results are the scalar code's, bit for bit.

use super::{Fc, PANEL};
use etch_kernels::threads::SharedMut;
use std::arch::x86_64::*;

/// Rows of a [`Fc::tile_avx2`] tile.
pub(super) const ROWS: usize = 4;
/// Panels of [`PANEL`] columns in a tile (two 8-lane vectors each).
pub(super) const PANELS: usize = 1;
/// Steps of four channels summed in i16 before widening (see the module).
const STEPS: usize = 8;

/// `sum(a)`: 32 bytes at a time offset to unsigned and summed by `vpsadbw`, the rest one by
/// one.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sum_i8(a: &[i8]) -> i32 {
    let (flip, zero) = (_mm256_set1_epi8(-128), _mm256_setzero_si256());
    let mut s = zero;
    let mut i = 0;
    while i + 32 <= a.len() {
        // SAFETY: `i + 32 <= a.len()`.
        let v = unsafe { _mm256_loadu_si256(a.as_ptr().add(i).cast()) };
        s = _mm256_add_epi64(s, _mm256_sad_epu8(_mm256_xor_si256(v, flip), zero));
        i += 32;
    }
    let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
    // Each of the first `i` bytes was offset by 128.
    let head = _mm_cvtsi128_si64(s) - 128 * i as i64;
    head as i32 + a[i..].iter().map(|&x| x as i32).sum::<i32>()
}

/// The `PANEL` values of `v` from `col0` (those below `v.len()`; zeros past it).
#[inline]
fn panel_of<T: Copy + Default>(v: &[T], col0: usize) -> [T; PANEL] {
    let mut out = [T::default(); PANEL];
    let src = &v[col0.min(v.len())..];
    let c = src.len().min(PANEL);
    out[..c].copy_from_slice(&src[..c]);
    out
}

impl Fc<'_> {
    /// [`Fc::tile_avx2`] for `r` (at most [`ROWS`]) rows of panel `p` (`np` is 1).
    ///
    /// # Safety
    /// As [`Fc::tile_avx2`].
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_rows_avx2(
        &self,
        r: usize,
        row: usize,
        p: usize,
        np: usize,
        n: usize,
        o: &SharedMut<f32>,
        sums: &[i32],
    ) {
        debug_assert_eq!(np, PANELS);
        // SAFETY: as the caller's.
        unsafe {
            match r {
                1 => self.tile_avx2::<1>(row, p, n, o, sums),
                2 => self.tile_avx2::<2>(row, p, n, o, sums),
                3 => self.tile_avx2::<3>(row, p, n, o, sums),
                _ => self.tile_avx2::<ROWS>(row, p, n, o, sums),
            }
        }
    }

    /// Outputs of rows `row..row + R` and of the columns of panel `p` (those below `n`).
    /// Per block, the i32 sums start from `-8 * sum(a)` of the block, leaving
    /// [`Fc::element`]'s exact integer sum (see the module).
    ///
    /// `sums` is `-8 * sum(a)` of each block of these rows (`[R, blocks]`).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `self.w` is packed ([`super::Packing::Maddubs`]); no other
    /// task writes the columns of panel `p` in `o`; `row + R <= m`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_avx2<const R: usize>(
        &self,
        row: usize,
        p: usize,
        n: usize,
        o: &SharedMut<f32>,
        sums: &[i32],
    ) {
        let (k, blocks) = (self.k, self.blocks);
        let bl = k / blocks;
        let col0 = p * PANEL;
        let a: [*const i8; R] = std::array::from_fn(|r| self.q[(row + r) * k..].as_ptr());
        let w = self.w[p * PANEL * k..][..PANEL * k].as_ptr();
        let zp: [f32; R] = std::array::from_fn(|r| self.params[2 * (row + r)]);
        let inv: [f32; R] = std::array::from_fn(|r| self.params[2 * (row + r) + 1]);
        let halves = |v: &[f32; PANEL]| -> [__m256; 2] {
            // SAFETY: `v` has 16 floats.
            std::array::from_fn(|j| unsafe { _mm256_loadu_ps(v.as_ptr().add(8 * j)) })
        };
        let bias = halves(&self.bias.map_or([0.0; PANEL], |b| panel_of(b, col0)));
        let blockwise = !self.ksum.is_empty();
        let wsum: [__m256i; 2] = {
            let v = panel_of(self.wsum, col0);
            // SAFETY: `v` has 16 ints.
            std::array::from_fn(|j| unsafe { _mm256_loadu_si256(v.as_ptr().add(8 * j).cast()) })
        };
        let mut out = [[_mm256_setzero_ps(); 2]; R];
        if blockwise {
            let ks = halves(&panel_of(self.ksum, col0));
            for r in 0..R {
                for j in 0..2 {
                    out[r][j] = _mm256_mul_ps(ks[j], _mm256_set1_ps(zp[r]));
                }
            }
        }
        let ones = _mm256_set1_epi16(1);
        for b in 0..blocks {
            // Integer sums wrap as the scalar code's `wrapping_sub` does, so starting from
            // the offset gives the same bits as subtracting it after.
            let mut acc: [[__m256i; 2]; R] =
                std::array::from_fn(|r| [_mm256_set1_epi32(sums[r * blocks + b]); 2]);
            let (mut q, end) = (b * bl / 4, (b + 1) * bl / 4);
            while q < end {
                let stop = (q + STEPS).min(end);
                let mut h = [[_mm256_setzero_si256(); 2]; R];
                while q < stop {
                    // SAFETY: `q * 64 + 64 <= PANEL * k`, the panel's length.
                    let wv: [__m256i; 2] = std::array::from_fn(|j| unsafe {
                        _mm256_loadu_si256(w.add(q * 64 + 32 * j).cast())
                    });
                    for r in 0..R {
                        // SAFETY: `4 * q + 4 <= k`, the length of row `row + r` of `q`.
                        let av = unsafe { (a[r].add(4 * q) as *const i32).read_unaligned() };
                        let av = _mm256_set1_epi32(av);
                        for j in 0..2 {
                            h[r][j] = _mm256_add_epi16(h[r][j], _mm256_maddubs_epi16(wv[j], av));
                        }
                    }
                    q += 1;
                }
                for r in 0..R {
                    for j in 0..2 {
                        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(h[r][j], ones));
                    }
                }
            }
            // The block's scales of this panel's columns (per channel: the only block).
            let scale: [__m256; 2] = std::array::from_fn(|j| {
                // SAFETY: `scales` is `[panels, blocks, PANEL]` (`pack_scales`) and panel
                // `p` exists.
                unsafe {
                    _mm256_loadu_ps(self.scales.as_ptr().add((p * blocks + b) * PANEL + 8 * j))
                }
            });
            for r in 0..R {
                for j in 0..2 {
                    let d = acc[r][j];
                    if blockwise {
                        out[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), scale[j], out[r][j]);
                    } else {
                        let z = _mm256_set1_epi32(zp[r] as i32);
                        let d = _mm256_sub_epi32(d, _mm256_mullo_epi32(z, wsum[j]));
                        let x = _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(inv[r]));
                        out[r][j] = _mm256_fmadd_ps(x, scale[j], bias[j]);
                    }
                }
            }
        }
        let c = (n - col0).min(PANEL);
        for r in 0..R {
            let mut v = [0.0f32; PANEL];
            for j in 0..2 {
                let x = if blockwise {
                    _mm256_add_ps(_mm256_mul_ps(out[r][j], _mm256_set1_ps(inv[r])), bias[j])
                } else {
                    out[r][j]
                };
                // SAFETY: `v` has 16 floats.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr().add(8 * j), x) };
            }
            // SAFETY: these columns of row `row + r` are this task's.
            let dst = unsafe { o.slice((row + r) * n + col0, c) };
            dst.copy_from_slice(&v[..c]);
        }
    }
}
