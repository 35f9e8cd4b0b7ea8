//! [`super::plane_f32`] on AVX2 (CPUs without AVX-512F): the AVX-512 kernel's groups of
//! blocks with 8 output columns a block, lane masks as vectors (masked loads never touch a
//! lane outside the image), and the same rule, so the same values and indices.

use super::{PoolGeom, inside};
use std::arch::x86_64::*;

/// Blocks of 8 output columns one call of [`blocks`] takes.
const NB: usize = 4;
/// Output columns of a block.
const L: usize = 8;

/// All-ones in 32-bit lanes `lo..hi`, zeros elsewhere.
#[target_feature(enable = "avx2")]
fn lanes_mask(lo: usize, hi: usize) -> __m256i {
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let ge = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo as i32 - 1));
    let lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), lane);
    _mm256_and_si256(ge, lt)
}

/// Window widths up to which [`plane`] works out each window column's lanes once per group
/// of blocks rather than for every output row.
const MAX_KW: usize = 16;

/// Window column `j` of block `b` of the group at output column `x0`: the mask of the lanes
/// that read inside the image (none past the row's end), whether that is all 8, and the
/// input column of lane 0.
#[derive(Clone, Copy)]
struct Column {
    m: __m256i,
    any: bool,
    full: bool,
    c0: isize,
}

#[target_feature(enable = "avx2")]
fn column(g: &PoolGeom, x0: usize, b: usize, j: usize) -> Column {
    let sw = g.stride[1];
    let lanes = g.ow.saturating_sub(x0 + L * b).min(L);
    let c0 = ((x0 + L * b) * sw + j * g.dil[1]) as isize - g.pad[1] as isize;
    let (lo, hi) = inside(c0, sw, g.w, lanes);
    Column {
        m: lanes_mask(lo, hi),
        any: lo < hi,
        full: lo == 0 && hi == L,
        c0,
    }
}

/// See [`super::plane_f32`]: groups of up to [`NB`] blocks of 8 columns (each window
/// column's lanes worked out once a group), then output rows.
///
/// # Safety
/// AVX2; the slices hold their planes; `h · w` fits `i32`.
#[target_feature(enable = "avx2")]
pub unsafe fn plane(g: &PoolGeom, x: &[f32], out: &mut [f32], mut idx: Option<&mut [i64]>) {
    let kw = g.kernel[1];
    for x0 in (0..g.ow).step_by(L * NB) {
        let none = Column {
            m: _mm256_setzero_si256(),
            any: false,
            full: false,
            c0: 0,
        };
        let mut cols = [[none; NB]; MAX_KW];
        if kw <= MAX_KW {
            for (j, row) in cols.iter_mut().enumerate().take(kw) {
                for (b, c) in row.iter_mut().enumerate() {
                    *c = column(g, x0, b, j);
                }
            }
        }
        let cols = (kw <= MAX_KW).then_some(&cols);
        for y in 0..g.oh {
            // SAFETY: the caller's contract.
            let (best, bi) = unsafe {
                match idx.is_some() {
                    true => blocks::<true>(g, x, y, x0, cols),
                    false => blocks::<false>(g, x, y, x0, cols),
                }
            };
            for (b, (best, bi)) in best.iter().zip(&bi).enumerate() {
                let Some(lanes) = g.ow.checked_sub(x0 + L * b).filter(|&l| l > 0) else {
                    break;
                };
                let o = y * g.ow + x0 + L * b;
                let all = lanes_mask(0, lanes.min(L));
                // SAFETY: outputs `o..o + lanes` lie in row `y` of `out` (masked).
                unsafe { _mm256_maskstore_ps(out.as_mut_ptr().add(o), all, *best) };
                if let Some(idx) = idx.as_deref_mut() {
                    let lo4 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(*bi));
                    let hi4 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(*bi));
                    let (mlo, mhi) = (
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(all)),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(all)),
                    );
                    let ip = idx.as_mut_ptr().wrapping_add(o);
                    // SAFETY: as above, for `idx` (as long as `out`'s plane).
                    unsafe {
                        _mm256_maskstore_epi64(ip, mlo, lo4);
                        _mm256_maskstore_epi64(ip.wrapping_add(4), mhi, hi4);
                    }
                }
            }
        }
    }
}

/// The maxima and their indices of [`NB`] blocks of 8 outputs of row `y` from column `x0`
/// (blocks past the row's end are left at `-inf`). Per window element in the rule's order,
/// lane `l` reads column `c0 + l · sw` (one load for stride 1, two and an even-lane shuffle
/// for stride 2 when the block's lanes are all inside, else a masked gather) and takes it
/// by the rule. `cols`: each window column's [`column`] for this group, when [`plane`]
/// worked them out. Without `IDX` the indices are left at 0.
///
/// # Safety
/// As [`plane`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn blocks<const IDX: bool>(
    g: &PoolGeom,
    x: &[f32],
    y: usize,
    x0: usize,
    cols: Option<&[[Column; NB]; MAX_KW]>,
) -> ([__m256; NB], [__m256i; NB]) {
    let [kh, kw] = g.kernel;
    let ([sh, sw], ph, dh) = (g.stride, g.pad[0], g.dil[0]);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let lane_sw = _mm256_mullo_epi32(lane, _mm256_set1_epi32(sw as i32));
    let (xp, len) = (x.as_ptr(), x.len() as isize);
    let mut best = [_mm256_set1_ps(f32::NEG_INFINITY); NB];
    let mut bi = [_mm256_setzero_si256(); NB];
    let mut have = [_mm256_setzero_si256(); NB];
    for i in 0..kh {
        let ih = (y * sh + i * dh) as isize - ph as isize;
        if ih < 0 || ih as usize >= g.h {
            continue;
        }
        let row = ih * g.w as isize;
        for j in 0..kw {
            for b in 0..NB {
                let Column { m, any, full, c0 } = match cols {
                    Some(cols) => cols[j][b],
                    None => column(g, x0, b, j),
                };
                if !any {
                    continue;
                }
                let at = row + c0;
                let p = xp.wrapping_offset(at);
                // SAFETY: every lane read (the mask's) is a column inside `0..w` of row
                // `ih < h`, so inside `x`; unmasked loads read `at..at + 8` or
                // `at..at + 16`, checked to lie inside `x`.
                let v = unsafe {
                    match sw {
                        1 if full && at + 8 <= len => _mm256_loadu_ps(p),
                        1 => _mm256_maskload_ps(p, m),
                        2 if full && at + 16 <= len => {
                            let (l, h) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
                            let e = _mm256_shuffle_ps::<0b10_00_10_00>(l, h);
                            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(
                                _mm256_castps_pd(e),
                            ))
                        }
                        _ => {
                            let z = _mm256_setzero_ps();
                            _mm256_mask_i32gather_ps::<4>(z, p, lane_sw, _mm256_castsi256_ps(m))
                        }
                    }
                };
                // Greater, or NaN (compares unordered), while the maximum is not NaN.
                let up = _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_NLE_UQ>(v, best[b]),
                    _mm256_cmp_ps::<_CMP_ORD_Q>(best[b], best[b]),
                );
                let take = _mm256_and_si256(
                    m,
                    _mm256_or_si256(_mm256_andnot_si256(have[b], m), _mm256_castps_si256(up)),
                );
                best[b] = _mm256_blendv_ps(best[b], v, _mm256_castsi256_ps(take));
                if IDX {
                    let at = _mm256_add_epi32(lane_sw, _mm256_set1_epi32(at as i32));
                    bi[b] = _mm256_blendv_epi8(bi[b], at, take);
                }
                have[b] = _mm256_or_si256(have[b], m);
            }
        }
    }
    (best, bi)
}
