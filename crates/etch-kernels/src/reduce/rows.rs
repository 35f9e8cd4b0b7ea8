//! Sums and means of many short contiguous `f32` rows: the global average pooling of NCHW
//! planes (squeeze-excitation's 7² to 112² planes of 16 to 1152 channels), where the
//! general reduction's per-output closures and the per-row horizontal sums cost more than
//! the additions (efficientnet_b0_224's 1152 planes of 49 pixels: 23 µs, against 5 µs for
//! XNNPACK's NHWC mean).
//!
//! Every row is summed as the general reduction's [`sum_lanes`] sums it: eight partial sums over the row's chunks
//! of eight (from zero), then `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))`, then the
//! last `count % 8` elements in order; a mean divides by `count`. On AVX2, eight rows at a
//! time: one vector of partial sums a row, and the eight rows' final sums formed together by
//! horizontal adds (addition is commutative, so `hadd`'s operand order gives the same bits).

use super::sum_lanes;
use crate::threads::{self, SharedMut};

/// Rows summed per task at least (elements).
const TASK_ELEMS: usize = 1 << 16;

/// `out[r]` = the sum (or, with `mean`, the mean) of `x[r · count..(r + 1) · count]`, for
/// every row `r` of `out`, split over the thread pool when large. False (nothing written)
/// when `x` is shorter than `out.len() · count`.
pub fn sum_rows_f32(x: &[f32], count: usize, out: &mut [f32], mean: bool) -> bool {
    let rows = out.len();
    if rows.checked_mul(count).is_none_or(|n| n > x.len()) {
        return false;
    }
    let tasks = threads::tasks_for(rows * count, TASK_ELEMS).min(rows.div_ceil(8));
    let out = SharedMut::new(out);
    threads::run_parts(rows.div_ceil(8), tasks, &|blocks| {
        // Blocks of eight rows per task, so that the vector path takes whole blocks.
        let (r0, r1) = (blocks.start * 8, rows.min(blocks.end * 8));
        // SAFETY: rows `r0..r1` of `out` are this task's alone.
        let o = unsafe { out.slice(r0, r1 - r0) };
        rows_range(&x[r0 * count..r1 * count], count, o, mean);
    });
    true
}

/// [`sum_rows_f32`] of `o.len()` rows at `x`, on the calling thread.
fn rows_range(x: &[f32], count: usize, o: &mut [f32], mean: bool) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::util::avx2_fma() {
        done = o.len() / 8 * 8;
        for (b, ob) in o[..done].chunks_exact_mut(8).enumerate() {
            // SAFETY: AVX2 (checked); the block's eight rows are inside `x`.
            unsafe { avx2::block(&x[b * 8 * count..(b + 1) * 8 * count], count, ob, mean) };
        }
    }
    for (r, v) in o.iter_mut().enumerate().skip(done) {
        let s = sum_lanes::<f32>(&x[r * count..(r + 1) * count]);
        *v = if mean { s / count as f32 } else { s };
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Eight rows of `count` elements at `x` into `o[..8]`.
    ///
    /// # Safety
    /// AVX2; `x.len() == 8 · count`, `o.len() == 8`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block(x: &[f32], count: usize, o: &mut [f32], mean: bool) {
        debug_assert!(x.len() == 8 * count && o.len() == 8);
        let p = x.as_ptr();
        let chunks = count / 8;
        // SAFETY (all loads): row `r`'s chunk `c` is `x[r · count + 8c..][..8]`, inside the
        // row as `c < count / 8`; its last elements `x[r · count + 8 chunks + j]`, `j <
        // count % 8`, likewise.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); 8];
            for c in 0..chunks {
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_loadu_ps(p.add(r * count + 8 * c)));
                }
            }
            // Row r's (a0 + a4, a1 + a5, a2 + a6, a3 + a7) in lane r % 2 of pair r / 2.
            let pair = |a: __m256, b: __m256| {
                _mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(a, b),
                    _mm256_permute2f128_ps::<0x31>(a, b),
                )
            };
            let (x01, x23) = (pair(acc[0], acc[1]), pair(acc[2], acc[3]));
            let (x45, x67) = (pair(acc[4], acc[5]), pair(acc[6], acc[7]));
            // (b0 + b1, b2 + b3) of rows 0, 2 | 1, 3, then of 4, 6 | 5, 7; then the sums of
            // rows 0, 2, 4, 6 | 1, 3, 5, 7.
            let h = _mm256_hadd_ps(_mm256_hadd_ps(x01, x23), _mm256_hadd_ps(x45, x67));
            let mut s = _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            for j in 8 * chunks..count {
                let mut v = [0f32; 8];
                for (r, v) in v.iter_mut().enumerate() {
                    *v = *p.add(r * count + j);
                }
                s = _mm256_add_ps(s, _mm256_loadu_ps(v.as_ptr()));
            }
            if mean {
                s = _mm256_div_ps(s, _mm256_set1_ps(count as f32));
            }
            _mm256_storeu_ps(o.as_mut_ptr(), s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row count (blocks of eight and the rest) and row length (chunks and the rest,
    /// shorter than a chunk, empty), signed zeros included: the bits of [`sum_lanes`] (and
    /// its quotient), on one and two threads.
    #[test]
    fn rows_match_sum_lanes() {
        let mut seed = 7u64;
        let mut val = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            match seed >> 60 {
                0 => -0.0,
                1 => 0.0,
                _ => ((seed >> 33) % 20001) as f32 / 997.0 - 10.0,
            }
        };
        for count in [0, 1, 3, 7, 8, 9, 16, 49, 196, 3136] {
            for rows in [1, 7, 8, 9, 17, 40] {
                let x: Vec<f32> = (0..rows * count).map(|_| val()).collect();
                for mean in [false, true] {
                    for nt in [1, 2] {
                        threads::set_num_threads(nt);
                        let mut o = vec![f32::NAN; rows];
                        assert!(sum_rows_f32(&x, count, &mut o, mean));
                        threads::set_num_threads(0);
                        for (r, &v) in o.iter().enumerate() {
                            let s = sum_lanes::<f32>(&x[r * count..(r + 1) * count]);
                            let want = if mean { s / count as f32 } else { s };
                            assert_eq!(
                                v.to_bits(),
                                want.to_bits(),
                                "row {r} of {rows} x {count}, mean {mean}"
                            );
                        }
                    }
                }
            }
        }
        assert!(!sum_rows_f32(&[0.0; 5], 3, &mut [0.0; 2], true));
    }

    /// Timing against the one-row-at-a-time sums (not a test: `cargo test --release -p
    /// etch-kernels --lib rows_speed -- --ignored --nocapture`; `ETCH_BENCH_THREADS`).
    #[test]
    #[ignore]
    fn rows_speed() {
        let t = std::env::var("ETCH_BENCH_THREADS").map_or(1, |v| v.parse().unwrap_or(1));
        threads::set_num_threads(t);
        for (rows, count) in [(1152, 49), (672, 196), (240, 784), (96, 3136), (32, 12544)] {
            let x: Vec<f32> = (0..rows * count).map(|i| (i % 97) as f32).collect();
            let mut o = vec![0f32; rows];
            let time = |f: &mut dyn FnMut()| {
                (0..300)
                    .map(|_| {
                        let t0 = std::time::Instant::now();
                        f();
                        t0.elapsed().as_secs_f64()
                    })
                    .fold(f64::MAX, f64::min)
            };
            let rows_t = time(&mut || assert!(sum_rows_f32(&x, count, &mut o, true)));
            let one_t = time(&mut || {
                for (r, v) in o.iter_mut().enumerate() {
                    *v = sum_lanes::<f32>(&x[r * count..(r + 1) * count]) / count as f32;
                }
            });
            println!(
                "{rows} rows of {count}: {:.1} us (one row at a time {:.1} us)",
                rows_t * 1e6,
                one_t * 1e6
            );
        }
        threads::set_num_threads(0);
    }
}
