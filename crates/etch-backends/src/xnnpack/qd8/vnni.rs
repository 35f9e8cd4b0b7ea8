//! AVX-512 kernels of [`super`]: the per-row quantization (AVX-512F) and the fully-connected
//! layer on VNNI-packed filters (AVX-512 VNNI, `vpdpbusd`). Every result is the scalar
//! code's, bit for bit: the same float operations on each element, in the same order, and
//! exact integer sums.

use super::{Fc, PANEL};
use etch_kernels::threads::SharedMut;
use std::arch::x86_64::*;

/// Rows of a [`Fc::tile_vnni`] tile.
pub(super) const ROWS: usize = 8;
/// Panels of [`PANEL`] columns in a [`Fc::tile_vnni`] tile.
pub(super) const PANELS: usize = 2;

/// The first `n` (at most 16) lanes.
#[inline]
pub(crate) fn lanes(n: usize) -> __mmask16 {
    if n >= 16 { !0 } else { (1u16 << n) - 1 }
}

/// [`super::quantize_row`] with AVX-512F, 16 elements at a time: the same min/max (a NaN
/// keeps the running value, as `f32::min`/`f32::max` do; the order of a min/max does not
/// change it), the same parameters, and per element the same product, clamp (NaN goes to
/// the low end, as `f32::max` does) and rounding half to even.
///
/// # Safety
/// The CPU has AVX-512F; `q.len() == x.len()`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize_row(x: &[f32], q: &mut [i8]) -> (f32, f32) {
    debug_assert_eq!(x.len(), q.len());
    let len = x.len();
    // Four running extrema each (one dependent chain per vector would bound the loop by
    // the min/max latency).
    let mut vmin = [_mm512_set1_ps(f32::INFINITY); 4];
    let mut vmax = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
    let mut i = 0;
    while i + 64 <= len {
        for (u, (lo, hi)) in vmin.iter_mut().zip(&mut vmax).enumerate() {
            // SAFETY: elements `i + 16 u..i + 16 u + 16` are inside `x`.
            let v = unsafe { _mm512_loadu_ps(x.as_ptr().add(i + 16 * u)) };
            // `vminps` returns its second operand when either is NaN.
            *lo = _mm512_min_ps(v, *lo);
            *hi = _mm512_max_ps(v, *hi);
        }
        i += 64;
    }
    while i < len {
        let m = lanes(len - i);
        // SAFETY: lanes at and past `len` are masked off.
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
        vmin[0] = _mm512_mask_min_ps(vmin[0], m, v, vmin[0]);
        vmax[0] = _mm512_mask_max_ps(vmax[0], m, v, vmax[0]);
        i += 16;
    }
    // NaN never enters the running extrema, so the order they are combined in does not
    // change them.
    let vmin = _mm512_min_ps(
        _mm512_min_ps(vmin[0], vmin[1]),
        _mm512_min_ps(vmin[2], vmin[3]),
    );
    let vmax = _mm512_max_ps(
        _mm512_max_ps(vmax[0], vmax[1]),
        _mm512_max_ps(vmax[2], vmax[3]),
    );
    let (min, max) = (_mm512_reduce_min_ps(vmin), _mm512_reduce_max_ps(vmax));
    let (zp, inv, scale) = super::row_params(min, max);
    let lo = _mm512_set1_ps(-128.0 - zp as f32);
    let hi = _mm512_set1_ps(127.0 - zp as f32);
    let (vs, vz) = (_mm512_set1_ps(scale), _mm512_set1_epi32(zp));
    let quantize = |v: __m512| {
        // max(NaN, lo) is lo, as `f32::max`.
        let y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, vs), lo), hi);
        let y = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
        // Every value is in [-128, 127].
        _mm512_add_epi32(y, vz)
    };
    let mut i = 0;
    while i + 16 <= len {
        // SAFETY: elements `i..i + 16` are inside `x` and `q` (`q` has `x`'s length).
        unsafe {
            let y = quantize(_mm512_loadu_ps(x.as_ptr().add(i)));
            // Narrowed in a register and stored whole: the masked narrowing store
            // (`vpmovdb` to memory) is slow on Zen 4.
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi8(y));
        }
        i += 16;
    }
    if i < len {
        let m = lanes(len - i);
        // SAFETY: lanes at and past `len` are masked off.
        unsafe {
            let y = quantize(_mm512_maskz_loadu_ps(m, x.as_ptr().add(i)));
            _mm512_mask_cvtepi32_storeu_epi8(q.as_mut_ptr().add(i), m, y);
        }
    }
    (zp as f32, inv)
}

/// `sum(a)`: 64 bytes at a time, offset to unsigned and summed by `vpsadbw`.
///
/// # Safety
/// The CPU has AVX-512F and AVX-512BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn sum_i8(a: &[i8]) -> i32 {
    let (flip, zero) = (_mm512_set1_epi8(-128), _mm512_setzero_si512());
    let mut s = zero;
    let mut i = 0;
    while i < a.len() {
        let rem = a.len() - i;
        let m = if rem >= 64 { !0u64 } else { (1u64 << rem) - 1 };
        // SAFETY: bytes at and past `a.len()` are masked off (loaded as 0, flipped to 128).
        let v = unsafe { _mm512_maskz_loadu_epi8(m, a.as_ptr().add(i)) };
        s = _mm512_add_epi64(s, _mm512_sad_epu8(_mm512_xor_si512(v, flip), zero));
        i += 64;
    }
    // Each of the `i` bytes was offset by 128.
    (_mm512_reduce_add_epi64(s) - 128 * i as i64) as i32
}

impl Fc<'_> {
    /// [`Fc::tile_vnni`] for `r` (at most [`ROWS`]) rows and `np` (at most [`PANELS`])
    /// panels.
    ///
    /// # Safety
    /// As [`Fc::tile_vnni`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_rows_vnni(
        &self,
        r: usize,
        row: usize,
        p: usize,
        np: usize,
        n: usize,
        o: &SharedMut<f32>,
        sums: &[i32],
    ) {
        // SAFETY: as the caller's.
        unsafe {
            match (np == PANELS, self.packing == super::Packing::Nibbles) {
                (true, false) => self.tile_rows::<PANELS, false>(r, row, p, n, o, sums),
                (false, false) => self.tile_rows::<1, false>(r, row, p, n, o, sums),
                (true, true) => self.tile_rows::<PANELS, true>(r, row, p, n, o, sums),
                (false, true) => self.tile_rows::<1, true>(r, row, p, n, o, sums),
            }
        }
    }

    /// [`Fc::tile_vnni`] for `r` (at most [`ROWS`]) rows.
    ///
    /// # Safety
    /// As [`Fc::tile_vnni`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_rows<const P: usize, const NIB: bool>(
        &self,
        r: usize,
        row: usize,
        p: usize,
        n: usize,
        o: &SharedMut<f32>,
        sums: &[i32],
    ) {
        // SAFETY: as the caller's.
        unsafe {
            match r {
                1 => self.tile_vnni::<1, P, NIB>(row, p, n, o, sums),
                2 => self.tile_vnni::<2, P, NIB>(row, p, n, o, sums),
                3 => self.tile_vnni::<3, P, NIB>(row, p, n, o, sums),
                4 => self.tile_vnni::<4, P, NIB>(row, p, n, o, sums),
                5 => self.tile_vnni::<5, P, NIB>(row, p, n, o, sums),
                6 => self.tile_vnni::<6, P, NIB>(row, p, n, o, sums),
                7 => self.tile_vnni::<7, P, NIB>(row, p, n, o, sums),
                _ => self.tile_vnni::<ROWS, P, NIB>(row, p, n, o, sums),
            }
        }
    }

    /// Outputs of rows `row..row + R` and of the columns of panels `p..p + P` (those below
    /// `n`). Per block, `vpdpbusd` sums `(w + 128) * a` in i32 over four channels per lane
    /// (one column per lane), from `-128 * sum(a)` of the block (a broadcast load, no
    /// vector ALU work), leaving
    /// [`Fc::element`]'s exact integer sum; the float arithmetic is its, lane by lane.
    ///
    /// `sums` is `-128 * sum(a)` of each block of these rows (`[R, blocks]`).
    ///
    /// # Safety
    /// As [`Fc::panels`]; `row + R <= m`, `p + P` panels at most.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_vnni<const R: usize, const P: usize, const NIB: bool>(
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
        let mask: [__mmask16; P] = std::array::from_fn(|j| lanes(n - col0 - PANEL * j));
        let a: [&[i8]; R] = std::array::from_fn(|r| &self.q[(row + r) * k..(row + r + 1) * k]);
        // A panel's bytes: `PANEL · k`, half that in nibbles.
        let pk = if NIB { PANEL * k / 2 } else { PANEL * k };
        let w: [&[i8]; P] = std::array::from_fn(|j| &self.w[(p + j) * pk..][..pk]);
        let zp: [f32; R] = std::array::from_fn(|r| self.params[2 * (row + r)]);
        let inv: [f32; R] = std::array::from_fn(|r| self.params[2 * (row + r) + 1]);
        // SAFETY (masked loads below): lanes of columns at and past `n` are masked off.
        let bias: [__m512; P] = std::array::from_fn(|j| match self.bias {
            Some(b) => unsafe { _mm512_maskz_loadu_ps(mask[j], b.as_ptr().add(col0 + PANEL * j)) },
            None => _mm512_setzero_ps(),
        });
        let blockwise = !self.ksum.is_empty();
        let wsum: [__m512i; P] = std::array::from_fn(|j| match blockwise {
            true => _mm512_setzero_si512(),
            // SAFETY: as above (`wsum` is `[n]`).
            false => unsafe {
                _mm512_maskz_loadu_epi32(mask[j], self.wsum.as_ptr().add(col0 + PANEL * j))
            },
        });
        let mut out = [[_mm512_setzero_ps(); P]; R];
        if blockwise {
            for j in 0..P {
                // SAFETY: as above.
                let ks = unsafe {
                    _mm512_maskz_loadu_ps(mask[j], self.ksum.as_ptr().add(col0 + PANEL * j))
                };
                for r in 0..R {
                    out[r][j] = _mm512_mul_ps(ks, _mm512_set1_ps(zp[r]));
                }
            }
        }
        for b in 0..blocks {
            // Integer sums wrap as the scalar code's `wrapping_sub` does, so starting from
            // the offset gives the same bits as subtracting it after.
            let mut acc: [[__m512i; P]; R] =
                std::array::from_fn(|r| [_mm512_set1_epi32(sums[r * blocks + b]); P]);
            // One step of 4 input channels `q` of every row, times the panels' weights `wv`.
            let mut step = |q: usize, wv: &[__m512i; P]| {
                for (acc, a) in acc.iter_mut().zip(&a) {
                    // SAFETY: `4 * q + 4 <= k`, the length of each row of `a`.
                    let av = unsafe { (a.as_ptr().add(4 * q) as *const i32).read_unaligned() };
                    let av = _mm512_set1_epi32(av);
                    for j in 0..P {
                        acc[j] = _mm512_dpbusd_epi32(acc[j], wv[j], av);
                    }
                }
            };
            if NIB {
                // Two steps a load: the low nibbles, then the high.
                let low = _mm512_set1_epi8(0x0f);
                for s in b * bl / 8..(b + 1) * bl / 8 {
                    // SAFETY: `s * 64 + 64 <= PANEL * k / 2`, the length of each `w[j]`.
                    let packed: [__m512i; P] = std::array::from_fn(|j| unsafe {
                        _mm512_loadu_si512(w[j].as_ptr().add(s * 64).cast())
                    });
                    step(2 * s, &packed.map(|v| _mm512_and_si512(v, low)));
                    step(
                        2 * s + 1,
                        &packed.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), low)),
                    );
                }
            } else {
                for q in b * bl / 4..(b + 1) * bl / 4 {
                    // SAFETY: `q * 64 + 64 <= PANEL * k`, the length of each `w[j]`.
                    let wv: [__m512i; P] = std::array::from_fn(|j| unsafe {
                        _mm512_loadu_si512(w[j].as_ptr().add(q * 64).cast())
                    });
                    step(q, &wv);
                }
            }
            // The block's scales of this tile's columns (per channel: the only block).
            let scale: [__m512; P] = std::array::from_fn(|j| {
                // SAFETY: `scales` is `[panels, blocks, PANEL]` (`pack_scales`) and panel
                // `p + j` exists.
                unsafe { _mm512_loadu_ps(self.scales.as_ptr().add(((p + j) * blocks + b) * PANEL)) }
            });
            for r in 0..R {
                for j in 0..P {
                    let d = acc[r][j];
                    if blockwise {
                        out[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale[j], out[r][j]);
                    } else {
                        let z = _mm512_set1_epi32(zp[r] as i32);
                        let d = _mm512_sub_epi32(d, _mm512_mullo_epi32(z, wsum[j]));
                        let x = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(inv[r]));
                        out[r][j] = _mm512_fmadd_ps(x, scale[j], bias[j]);
                    }
                }
            }
        }
        for r in 0..R {
            for j in 0..P {
                let v = if blockwise {
                    _mm512_add_ps(_mm512_mul_ps(out[r][j], _mm512_set1_ps(inv[r])), bias[j])
                } else {
                    out[r][j]
                };
                // SAFETY: these columns of row `row + r` are this task's; lanes at and past
                // `n` are masked off.
                unsafe {
                    let c = (n - col0 - PANEL * j).min(PANEL);
                    let dst = o.slice((row + r) * n + col0 + PANEL * j, c);
                    _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask[j], v);
                }
            }
        }
    }
}
