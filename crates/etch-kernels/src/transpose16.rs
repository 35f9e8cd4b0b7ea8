//! A 16×16 block of 4-byte elements transposed through AVX-512F registers: sixteen row
//! loads, four rounds of sixteen shuffles, sixteen row stores. The transposing copies of
//! [`crate::util`] (`permute_copy`, `transpose_copy`, XNNPACK's static transposes: a key
//! cache `[8, 128, 64] -> [8, 64, 128]`) take it for their full blocks; it moves bits, so
//! it serves `f32`, `i32` and `u32` alike.

/// Whether [`block`] can run here: 4-byte elements and a CPU with AVX-512F.
pub(crate) fn usable<T>() -> bool {
    std::mem::size_of::<T>() == 4 && crate::util::avx512()
}

/// `dst[j * ds + i] = src[i * ss + j]` for `i, j < 16`.
///
/// # Safety
/// [`usable::<T>`] holds; `src` readable at the 16 runs of 16 elements `ss` apart, `dst`
/// writable at the 16 runs of 16 elements `ds` apart; the two blocks do not overlap.
pub(crate) unsafe fn block<T>(src: *const T, ss: usize, dst: *mut T, ds: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract.
    unsafe {
        x86::block16(src.cast(), ss, !0, dst.cast(), ds, !0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (src, ss, dst, ds);
        unreachable!("transpose16::block without AVX-512F")
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// Interleaves the 64-bit halves of `a` and `b` within each 128-bit lane (`hi`: the
    /// upper ones).
    #[inline(always)]
    unsafe fn pd<const HI: bool>(a: __m512, b: __m512) -> __m512 {
        // SAFETY: plain lane shuffles, inlined into `block16` (AVX-512F).
        unsafe {
            let (a, b) = (_mm512_castps_pd(a), _mm512_castps_pd(b));
            _mm512_castpd_ps(if HI {
                _mm512_unpackhi_pd(a, b)
            } else {
                _mm512_unpacklo_pd(a, b)
            })
        }
    }

    /// See [`super::block`]; only the elements `j` of `lm` of each source row are read (the
    /// others taken as 0) and only the elements `i` of `sm` of each output row written.
    /// Row `i`'s element `j` is `r[i][j]`; lane `L` of a vector is its elements `4L..4L + 4`.
    ///
    /// # Safety
    /// AVX-512F; the spans as [`super::block`]'s, for the lanes of the masks.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn block16(
        src: *const f32,
        ss: usize,
        lm: u16,
        dst: *mut f32,
        ds: usize,
        sm: u16,
    ) {
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, r) in r.iter_mut().enumerate() {
            // SAFETY: the lanes of `lm` of source row `i` (the caller's contract).
            *r = unsafe { _mm512_maskz_loadu_ps(lm, src.add(i * ss)) };
        }
        // a[2k], a[2k + 1]: rows 2k and 2k + 1 interleaved, elements 4L, 4L + 1 (lo) and
        // 4L + 2, 4L + 3 (hi) of each lane.
        let mut a = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        // b[4k + c], lane L: column 4L + c, rows 4k..4k + 4.
        let mut b = [_mm512_setzero_ps(); 16];
        for k in 0..4 {
            // SAFETY: lane shuffles (AVX-512F, enabled here).
            unsafe {
                b[4 * k] = pd::<false>(a[4 * k], a[4 * k + 2]);
                b[4 * k + 1] = pd::<true>(a[4 * k], a[4 * k + 2]);
                b[4 * k + 2] = pd::<false>(a[4 * k + 1], a[4 * k + 3]);
                b[4 * k + 3] = pd::<true>(a[4 * k + 1], a[4 * k + 3]);
            }
        }
        // Output row 4L + c: lane L of b[c], b[4 + c], b[8 + c], b[12 + c].
        for c in 0..4 {
            let (p, q, s, t) = (b[c], b[4 + c], b[8 + c], b[12 + c]);
            let e0 = _mm512_shuffle_f32x4::<0x44>(p, q); // p.L0 p.L1 q.L0 q.L1
            let e1 = _mm512_shuffle_f32x4::<0xEE>(p, q); // p.L2 p.L3 q.L2 q.L3
            let f0 = _mm512_shuffle_f32x4::<0x44>(s, t);
            let f1 = _mm512_shuffle_f32x4::<0xEE>(s, t);
            let rows = [
                _mm512_shuffle_f32x4::<0x88>(e0, f0), // lanes 0 of p, q, s, t
                _mm512_shuffle_f32x4::<0xDD>(e0, f0), // lanes 1
                _mm512_shuffle_f32x4::<0x88>(e1, f1), // lanes 2
                _mm512_shuffle_f32x4::<0xDD>(e1, f1), // lanes 3
            ];
            for (l, v) in rows.into_iter().enumerate() {
                // SAFETY: the lanes of `sm` of output row 4l + c (the caller's contract).
                unsafe { _mm512_mask_storeu_ps(dst.add((4 * l + c) * ds), sm, v) };
            }
        }
    }
}

/// 8×8 blocks of `f32` transposed in AVX2 registers, for CPUs without AVX-512F: three
/// rounds of shuffles; the callers load and store the rows where their layouts put them
/// ([`crate::util::avx2`]'s partial loads and stores).
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_avx2 {
    use std::arch::x86_64::*;

    /// The transpose of the rows `r`: lane `i` of row `j` is lane `j` of `r[i]`.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn transpose(r: [__m256; 8]) -> [__m256; 8] {
        // t[2k], t[2k + 1]: rows 2k and 2k + 1 interleaved (columns 0, 1, 4, 5 and 2, 3,
        // 6, 7).
        let mut t = [r[0]; 8];
        for k in 0..4 {
            t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        // u[4h + c]: rows 4h..4h + 4 of column c (low half) and c + 4 (high half).
        let mut u = [r[0]; 8];
        for h in 0..2 {
            let (a, b, c, d) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
            u[4 * h] = _mm256_shuffle_ps::<0x44>(a, c);
            u[4 * h + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
            u[4 * h + 2] = _mm256_shuffle_ps::<0x44>(b, d);
            u[4 * h + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
        }
        let mut o = [r[0]; 8];
        for c in 0..4 {
            o[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
            o[4 + c] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    /// Every element lands where the transpose puts it, through strides wider than 16.
    #[test]
    fn block_transposes() {
        if !super::usable::<u32>() {
            return;
        }
        let (ss, ds) = (21usize, 19usize);
        let src: Vec<u32> = (0..16 * ss).map(|v| v as u32 * 2654435761).collect();
        let mut dst = vec![0u32; 16 * ds];
        // SAFETY: AVX-512F (checked); 16 rows of 16 within each buffer.
        unsafe { super::block(src.as_ptr(), ss, dst.as_mut_ptr(), ds) };
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(dst[j * ds + i], src[i * ss + j], "({i}, {j})");
            }
        }
        for j in 0..16 {
            assert!(dst[j * ds + 16..(j + 1) * ds].iter().all(|&v| v == 0));
        }
    }

    /// The 8×8 AVX2 transpose, with partial loads (the other lanes 0) and stores
    /// (nothing else written).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_blocks_transpose_within_their_lanes() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        #[target_feature(enable = "avx2")]
        unsafe fn run(src: &[f32], ss: usize, cols: usize, dst: &mut [f32], ds: usize, n: usize) {
            use super::x86_avx2::transpose;
            use crate::util::avx2::{load, store};
            // SAFETY: 8 rows of `cols` in `src`, of `n` in `dst` (the test's sizes).
            unsafe {
                let mut r = [std::arch::x86_64::_mm256_setzero_ps(); 8];
                for (i, r) in r.iter_mut().enumerate() {
                    *r = load(src.as_ptr().add(i * ss), cols);
                }
                for (j, v) in transpose(r).into_iter().enumerate() {
                    store(dst.as_mut_ptr().add(j * ds), v, n);
                }
            }
        }
        let (ss, ds) = (11usize, 13usize);
        let src: Vec<f32> = (0..8 * ss).map(|v| v as f32 + 0.5).collect();
        for (cols, n) in [(8, 8), (3, 8), (8, 5), (6, 2), (1, 1), (8, 7), (8, 3)] {
            let mut dst = vec![-1f32; 8 * ds];
            // SAFETY: AVX2 (checked).
            unsafe { run(&src, ss, cols, &mut dst, ds, n) };
            for j in 0..8 {
                for i in 0..ds {
                    let want = match i < n {
                        true if j < cols => src[i * ss + j],
                        true => 0.0,
                        false => -1.0,
                    };
                    assert_eq!(dst[j * ds + i], want, "{cols} {n}: ({i}, {j})");
                }
            }
        }
    }

    /// `copy1`'s transposing copies (blocks where tiles are full, the element loop at the
    /// edges) against the element loop alone, for `[outer, r, c] -> [outer, c, r]` with
    /// ragged and aligned sides, and a batch dim between them.
    #[test]
    fn transposing_copies_match_the_element_loop() {
        for (outer, r, c) in [
            (1, 64, 64),
            (3, 100, 70),
            (8, 128, 64),
            (2, 97, 129),
            (1, 200, 33),
        ] {
            let a: Vec<i32> = (0..outer * r * c).map(|v| v as i32 * 7 - 3).collect();
            // Source strides for the output order [outer, c, r].
            let (sizes, sa, so) = ([outer, c, r], [r * c, 1, c], [c * r, r, 1]);
            let mut want = vec![0i32; a.len()];
            crate::util::map1(&sizes, &a, &sa, &mut want, &so, |x| x);
            let mut got = vec![0i32; a.len()];
            crate::util::copy1(&sizes, &a, &sa, &mut got, &so);
            assert_eq!(got, want, "{outer}x{r}x{c}");
            for o in 0..outer {
                for i in 0..r {
                    for j in 0..c {
                        assert_eq!(got[o * r * c + j * r + i], a[o * r * c + i * c + j]);
                    }
                }
            }
        }
    }

    /// One thread, XNNPACK's key transpose in the decoders (`[8, 128, 64] -> [8, 64, 128]`):
    /// `cargo test --release -p etch-kernels --lib transpose_speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn transpose_speed() {
        crate::threads::set_num_threads(1);
        let (outer, r, c) = (8usize, 128usize, 64usize);
        let a: Vec<f32> = (0..outer * r * c).map(|v| v as f32).collect();
        let (sizes, sa, so) = ([outer, c, r], [r * c, 1, c], [c * r, r, 1]);
        let mut out = vec![0f32; a.len()];
        for _ in 0..3 {
            let mut best = [f64::MAX; 2];
            for (k, best) in best.iter_mut().enumerate() {
                for _ in 0..50 {
                    let t = std::time::Instant::now();
                    if k == 0 {
                        crate::util::map1(&sizes, &a, &sa, &mut out, &so, |x| x);
                    } else {
                        crate::util::copy1(&sizes, &a, &sa, &mut out, &so);
                    }
                    *best = best.min(t.elapsed().as_secs_f64());
                }
            }
            println!(
                "transpose {outer}x{r}x{c}: element loop {:.1} us, 16x16 blocks {:.1} us",
                best[0] * 1e6,
                best[1] * 1e6
            );
        }
        crate::threads::set_num_threads(0);
    }
}
