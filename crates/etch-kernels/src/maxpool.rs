//! 2-D max pooling: the window rule every path follows, and a fast path for contiguous
//! float32 planes that takes 16 output columns at a time with AVX-512F, or 8 with AVX2
//! (`maxpool_avx2.rs`; values only of 3×3 windows at stride 2: `maxpool_sep.rs`).
//!
//! The rule ([`window_max`]): the window's elements inside the image, row by row and left
//! to right; the first one starts the maximum, a later one replaces it when it is greater,
//! or when it is NaN and the maximum is not (so the first NaN wins, and of equal values
//! the first). A window with no element inside the image gives `-inf` at index 0. The
//! index is the element's offset in its `H×W` plane.

use crate::util::Float;

/// The geometry of a 2-D max pooling over one plane.
#[derive(Clone, Copy, Debug)]
pub struct PoolGeom {
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height and width.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window (height, width).
    pub kernel: [usize; 2],
    /// Stride (height, width), at least 1.
    pub stride: [usize; 2],
    /// Padding (top = bottom, left = right).
    pub pad: [usize; 2],
    /// Dilation (height, width), at least 1.
    pub dil: [usize; 2],
}

/// Calls `f(ih, iw)` for the elements of output `(y, xo)`'s window inside the image, row
/// by row and left to right.
#[inline(always)]
fn window(g: &PoolGeom, y: usize, xo: usize, mut f: impl FnMut(usize, usize)) {
    for i in 0..g.kernel[0] {
        let ih = (y * g.stride[0] + i * g.dil[0]) as isize - g.pad[0] as isize;
        if ih < 0 || ih as usize >= g.h {
            continue;
        }
        for j in 0..g.kernel[1] {
            let iw = (xo * g.stride[1] + j * g.dil[1]) as isize - g.pad[1] as isize;
            if iw >= 0 && (iw as usize) < g.w {
                f(ih as usize, iw as usize);
            }
        }
    }
}

/// The maximum of output `(y, xo)`'s window and its index in the plane, reading input
/// element `(ih, iw)` through `at` (the rule of the module doc).
#[inline(always)]
pub fn window_max<F: Float>(
    g: &PoolGeom,
    y: usize,
    xo: usize,
    at: impl Fn(usize, usize) -> F,
) -> (F, i64) {
    let mut best = F::NEG_INFINITY;
    let mut bi: i64 = -1;
    window(g, y, xo, |ih, iw| {
        let v = at(ih, iw);
        if bi < 0 || v > best || v.is_nan() && !best.is_nan() {
            best = v;
            bi = (ih * g.w + iw) as i64;
        }
    });
    (best, bi.max(0))
}

/// Max pooling of channels-last pixels `x` (`[n, h, w, c]` in memory) into `out` (`[n, oh,
/// ow, c]`) and their indices `idx` (each the element's offset in its `H×W` plane), by the
/// rule of the module doc, over whole pixels of channels at a time; split over the thread
/// pool by output rows. `false` (nothing written) for operands of other sizes.
pub fn pixels_f32(
    g: &PoolGeom,
    (n, c): (usize, usize),
    x: &[f32],
    out: &mut [f32],
    idx: Option<&mut [i64]>,
) -> bool {
    let len = |h: usize, w: usize| n.checked_mul(h)?.checked_mul(w)?.checked_mul(c);
    let olen = len(g.oh, g.ow);
    if len(g.h, g.w) != Some(x.len())
        || olen != Some(out.len())
        || idx.as_ref().is_some_and(|i| Some(i.len()) != olen)
        || c == 0
        || g.kernel[0].saturating_mul(g.kernel[1]) > MAX_TAPS
        || g.h.saturating_mul(g.w) > i32::MAX as usize
    {
        return false;
    }
    let work = out.len() * g.kernel[0] * g.kernel[1];
    let tasks = crate::threads::tasks_for(work, 1 << 15);
    let o = crate::threads::SharedMut::new(out);
    let io = idx.map(crate::threads::SharedMut::new);
    let row_len = g.ow * c;
    // The widest variant of `pool_row` this CPU has.
    let row_fn: RowFn = {
        #[cfg(target_arch = "x86_64")]
        if crate::util::avx512() {
            row_avx512
        } else if std::arch::is_x86_feature_detected!("avx2") {
            row_avx2
        } else {
            row_baseline
        }
        #[cfg(not(target_arch = "x86_64"))]
        row_baseline
    };
    crate::threads::run_parts(n * g.oh, tasks, &|rows| {
        for row in rows {
            // SAFETY: output row `row` (of values and of indices) is this part's alone.
            let (orow, irow) = unsafe {
                (
                    o.slice(row * row_len, row_len),
                    io.as_ref().map(|i| i.slice(row * row_len, row_len)),
                )
            };
            // SAFETY: `row_fn` is a variant the CPU has (above).
            unsafe { row_fn(g, (row, c), x, orow, irow) };
        }
    });
    true
}

/// A variant of [`pool_row`]; unsafe as its variants need their instruction sets.
type RowFn = unsafe fn(&PoolGeom, (usize, usize), &[f32], &mut [f32], Option<&mut [i64]>);

/// [`pool_row`] compiled for each instruction set (its channel loops in the set's vectors).
macro_rules! row_variants {
    ($($(#[$attr:meta])* $name:ident, $needs:literal;)*) => {$(
        /// [`pool_row`] for the variants of [`RowFn`].
        ///
        /// # Safety
        #[doc = $needs]
        $(#[$attr])*
        unsafe fn $name(
            g: &PoolGeom,
            rc: (usize, usize),
            x: &[f32],
            orow: &mut [f32],
            irow: Option<&mut [i64]>,
        ) {
            pool_row(g, rc, x, orow, irow)
        }
    )*};
}

row_variants! {
    row_baseline, "None (unsafe only to share [`RowFn`]'s type).";
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    row_avx2, "The CPU has AVX2.";
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    row_avx512, "The CPU has AVX-512F.";
}

/// The most window elements [`pool_row`] takes (larger windows: the strided path).
const MAX_TAPS: usize = 64;

/// Output row `row` (item and `y`) of [`pixels_f32`] into `orow` and `irow` (`c` channels
/// a pixel): per pixel, its window's elements inside the image, then blocks of 16
/// channels kept in registers over them (indices as `i32`, widened at the store).
#[inline(always)]
fn pool_row(
    g: &PoolGeom,
    (row, c): (usize, usize),
    x: &[f32],
    orow: &mut [f32],
    mut irow: Option<&mut [i64]>,
) {
    const L: usize = 16;
    let (b, y) = (row / g.oh, row % g.oh);
    #[cfg(target_arch = "x86_64")]
    let wide = crate::util::avx512();
    let mut taps = [(0usize, 0i32); MAX_TAPS];
    for xo in 0..g.ow {
        let mut n = 0;
        window(g, y, xo, |ih, iw| {
            taps[n] = (((b * g.h + ih) * g.w + iw) * c, (ih * g.w + iw) as i32);
            n += 1;
        });
        let best = &mut orow[xo * c..(xo + 1) * c];
        let mut ix = irow.as_mut().map(|i| &mut i[xo * c..(xo + 1) * c]);
        if n == 0 {
            best.fill(f32::NEG_INFINITY);
            if let Some(ix) = ix {
                ix.fill(0);
            }
            continue;
        }
        let taps = &taps[..n];
        let mut c0 = 0;
        while c0 < c {
            let w = L.min(c - c0);
            #[cfg(target_arch = "x86_64")]
            if w == L && wide && ix.is_none() {
                let four = c - c0 >= 4 * L;
                // SAFETY: as for `pixel_block` below, for 64 or 16 channels from `c0`.
                unsafe {
                    match four {
                        true => avx512::pixel_values::<4>(x, taps, c0, &mut best[c0..]),
                        false => avx512::pixel_values::<1>(x, taps, c0, &mut best[c0..]),
                    }
                }
                c0 += if four { 4 * L } else { L };
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if w == L && wide {
                // SAFETY: AVX-512F is present; every tap's pixel holds `c` channels of `x`
                // (offsets from in-image elements, sizes checked by `pixels_f32`), so 16
                // from `c0`; `best` and `ix` hold `c`.
                unsafe {
                    avx512::pixel_block(
                        x,
                        taps,
                        c0,
                        &mut best[c0..c0 + L],
                        ix.as_deref_mut().map(|i| &mut i[c0..c0 + L]),
                    )
                };
                c0 += w;
                continue;
            }
            let (mut bv, mut bi) = ([f32::NEG_INFINITY; L], [taps[0].1; L]);
            bv[..w].copy_from_slice(&x[taps[0].0 + c0..][..w]);
            for &(off, at) in &taps[1..] {
                let xr = &x[off + c0..][..w];
                if let Ok(xr) = <&[f32; L]>::try_from(xr) {
                    for k in 0..L {
                        let (v, m) = (xr[k], bv[k]);
                        let take = v > m || v.is_nan() && !m.is_nan();
                        bv[k] = if take { v } else { m };
                        bi[k] = if take { at } else { bi[k] };
                    }
                } else {
                    for (k, &v) in xr.iter().enumerate() {
                        let m = bv[k];
                        if v > m || v.is_nan() && !m.is_nan() {
                            (bv[k], bi[k]) = (v, at);
                        }
                    }
                }
            }
            best[c0..c0 + w].copy_from_slice(&bv[..w]);
            if let Some(ix) = ix.as_deref_mut() {
                for (d, &s) in ix[c0..c0 + w].iter_mut().zip(&bi) {
                    *d = s as i64;
                }
            }
            c0 += w;
        }
    }
}

/// Whether [`plane_f32`] takes planes of this geometry: AVX-512F or AVX2 on the CPU, and
/// plane offsets that fit `i32`.
pub fn fast_available(g: &PoolGeom) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        g.h.checked_mul(g.w)
            .is_some_and(|n| n < i32::MAX as usize / 2)
            && g.stride[0] > 0
            && g.stride[1] > 0
            && g.w < (1 << 24)
            && (std::arch::is_x86_feature_detected!("avx512f")
                || std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = g;
        false
    }
}

/// Max pooling of one contiguous `h×w` float32 plane `x` into the contiguous `oh×ow`
/// plane `out` (and its indices into `idx`), with the values and indices of
/// [`window_max`]. Only where [`fast_available`] says so.
///
/// # Panics
/// If a slice is shorter than its plane, or the fast path is not available.
pub fn plane_f32(g: &PoolGeom, x: &[f32], out: &mut [f32], idx: Option<&mut [i64]>) {
    assert!(fast_available(g), "max pooling: no AVX-512F or AVX2 path");
    assert!(x.len() >= g.h * g.w && out.len() >= g.oh * g.ow);
    assert!(idx.as_ref().is_none_or(|i| i.len() >= g.oh * g.ow));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F, else AVX2, was detected (`fast_available`); the slices hold their
    // planes (checked above).
    unsafe {
        if std::arch::is_x86_feature_detected!("avx512f") {
            avx512::plane(g, x, out, idx)
        } else if idx.is_none() && sep::takes(g) {
            sep::plane(g, x, out)
        } else {
            avx2::plane(g, x, out, idx)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "maxpool_avx2.rs"]
mod avx2;
#[cfg(target_arch = "x86_64")]
#[path = "maxpool_sep.rs"]
mod sep;

/// The lanes `lo..hi` of a block whose window column for lane `l` is `c0 + l · sw` that lie
/// inside `0..w`, and within the block's `lanes` (both vector kernels).
#[cfg(target_arch = "x86_64")]
fn inside(c0: isize, sw: usize, w: usize, lanes: usize) -> (usize, usize) {
    let lo = if c0 < 0 {
        c0.unsigned_abs().div_ceil(sw)
    } else {
        0
    };
    let hi = if (w as isize) > c0 {
        (w as isize - c0).unsigned_abs().div_ceil(sw)
    } else {
        0
    };
    (lo, hi.min(lanes))
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{PoolGeom, inside};
    use std::arch::x86_64::*;

    /// 16 channels from `c0` of one channels-last pixel: the maxima over the window
    /// elements `taps` (each its offset in `x` and its index in the plane; at least one) by
    /// the rule of the module doc, into `best` and (as `i64`) `ix`.
    ///
    /// # Safety
    /// AVX-512F is present; `x` holds 16 elements from `off + c0` for every tap; `best` and
    /// `ix` (when given) hold 16 elements.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pixel_block(
        x: &[f32],
        taps: &[(usize, i32)],
        c0: usize,
        best: &mut [f32],
        ix: Option<&mut [i64]>,
    ) {
        debug_assert!(!taps.is_empty() && best.len() >= 16);
        let xp = x.as_ptr();
        // SAFETY: the caller's bounds (16 elements a tap, 16 outputs).
        unsafe {
            let mut bv = _mm512_loadu_ps(xp.add(taps[0].0 + c0));
            let mut bi = _mm512_set1_epi32(taps[0].1);
            for &(off, at) in &taps[1..] {
                debug_assert!(off + c0 + 16 <= x.len());
                let v = _mm512_loadu_ps(xp.add(off + c0));
                let gt = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, bv);
                let v_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
                let b_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(bv, bv);
                let take = gt | (v_nan & !b_nan);
                bv = _mm512_mask_mov_ps(bv, take, v);
                bi = _mm512_mask_mov_epi32(bi, take, _mm512_set1_epi32(at));
            }
            _mm512_storeu_ps(best.as_mut_ptr(), bv);
            if let Some(ix) = ix {
                debug_assert!(ix.len() >= 16);
                let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bi));
                let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(bi));
                _mm512_storeu_si512(ix.as_mut_ptr().cast(), lo);
                _mm512_storeu_si512(ix.as_mut_ptr().add(8).cast(), hi);
            }
        }
    }

    /// [`pixel_block`] without the indices, for `16 V` channels from `c0`: a chain of
    /// `max(v, best)` (which keeps `best` on ties, so the first of equal zeros, and keeps a
    /// NaN `best`), and the first NaN of each lane, which replaces the maximum where there
    /// is one: the rule's values, in fewer steps a tap.
    ///
    /// # Safety
    /// AVX-512F is present; `x` holds `16 V` elements from `off + c0` for every tap (at
    /// least one); `best` holds `16 V`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pixel_values<const V: usize>(
        x: &[f32],
        taps: &[(usize, i32)],
        c0: usize,
        best: &mut [f32],
    ) {
        debug_assert!(!taps.is_empty() && best.len() >= 16 * V);
        let xp = x.as_ptr();
        // SAFETY: the caller's bounds (`16 V` elements a tap, `16 V` outputs).
        unsafe {
            let first = xp.add(taps[0].0 + c0);
            let mut m: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(first.add(16 * v)));
            let mut nan_v = m;
            let mut seen: [__mmask16; V] =
                std::array::from_fn(|v| _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m[v], m[v]));
            for &(off, _) in &taps[1..] {
                debug_assert!(off + c0 + 16 * V <= x.len());
                let row = xp.add(off + c0);
                for v in 0..V {
                    let xv = _mm512_loadu_ps(row.add(16 * v));
                    let new = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(xv, xv) & !seen[v];
                    nan_v[v] = _mm512_mask_mov_ps(nan_v[v], new, xv);
                    seen[v] |= new;
                    m[v] = _mm512_max_ps(xv, m[v]);
                }
            }
            for v in 0..V {
                let y = _mm512_mask_mov_ps(m[v], seen[v], nan_v[v]);
                _mm512_storeu_ps(best.as_mut_ptr().add(16 * v), y);
            }
        }
    }

    /// Lanes `lo..hi` (of 32).
    fn bits(lo: usize, hi: usize) -> u32 {
        debug_assert!(lo < hi && hi <= 32);
        (u32::MAX >> (32 - (hi - lo))) << lo
    }

    /// Blocks of 16 output columns one call of [`blocks`] takes (their maxima are
    /// independent chains of compares, interleaved).
    const NB: usize = 4;

    /// Window widths up to which [`plane`] works out each window column's lanes once per
    /// group of blocks rather than for every output row (wider windows: every time).
    const MAX_KW: usize = 16;

    /// Window column `j` of block `b` of the group at output column `x0`: the lanes that
    /// read inside the image (none past the row's end) and the input column of lane 0.
    fn column(g: &PoolGeom, x0: usize, b: usize, j: usize) -> (u16, isize) {
        let lanes = g.ow.saturating_sub(x0 + 16 * b).min(16);
        let c0 = ((x0 + 16 * b) * g.stride[1] + j * g.dil[1]) as isize - g.pad[1] as isize;
        let (lo, hi) = inside(c0, g.stride[1], g.w, lanes);
        let m = if lo < hi { bits(lo, hi) as u16 } else { 0 };
        (m, c0)
    }

    /// See [`super::plane_f32`]: groups of up to [`NB`] blocks of 16 columns, then output
    /// rows (see [`blocks`]).
    ///
    /// # Safety
    /// AVX-512F; the slices hold their planes; `h · w` fits `i32`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn plane(g: &PoolGeom, x: &[f32], out: &mut [f32], mut idx: Option<&mut [i64]>) {
        let kw = g.kernel[1];
        for x0 in (0..g.ow).step_by(16 * NB) {
            // Which lanes each window column reads is the same on every output row.
            let mut cols = [[(0u16, 0isize); NB]; MAX_KW];
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
                    let Some(lanes) = g.ow.checked_sub(x0 + 16 * b).filter(|&l| l > 0) else {
                        break;
                    };
                    let o = y * g.ow + x0 + 16 * b;
                    let all = bits(0, lanes.min(16)) as u16;
                    // SAFETY: outputs `o..o + lanes` lie in row `y` of `out` (masked).
                    unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(o), all, *best) };
                    if let Some(idx) = idx.as_deref_mut() {
                        let lo8 = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(*bi));
                        let hi8 = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(*bi));
                        let ip = idx.as_mut_ptr().wrapping_add(o);
                        // SAFETY: as above, for `idx` (as long as `out`'s plane).
                        unsafe {
                            _mm512_mask_storeu_epi64(ip, all as u8, lo8);
                            _mm512_mask_storeu_epi64(ip.wrapping_add(8), (all >> 8) as u8, hi8);
                        }
                    }
                }
            }
        }
    }

    /// The maxima and their indices of [`NB`] blocks of 16 outputs of row `y` from column
    /// `x0` (blocks past the row's end are left at `-inf`). Per window element in the
    /// rule's order, lane `l` reads column `c0 + l · sw` (one load for stride 1, two and an
    /// even-lane permutation for stride 2, a gather otherwise; lanes outside the image are
    /// masked off, never read) and takes it by the rule. `cols`: each window column's
    /// [`column`] for this group, when [`plane`] worked them out. Without `IDX` the indices
    /// are not worked out (left at 0).
    ///
    /// # Safety
    /// As [`plane`].
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn blocks<const IDX: bool>(
        g: &PoolGeom,
        x: &[f32],
        y: usize,
        x0: usize,
        cols: Option<&[[(u16, isize); NB]; MAX_KW]>,
    ) -> ([__m512; NB], [__m512i; NB]) {
        let [kh, kw] = g.kernel;
        let ([sh, sw], ph, dh) = (g.stride, g.pad[0], g.dil[0]);
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let lane_sw = _mm512_mullo_epi32(lane, _mm512_set1_epi32(sw as i32));
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let (xp, len) = (x.as_ptr(), x.len() as isize);
        let mut best = [_mm512_set1_ps(f32::NEG_INFINITY); NB];
        let mut bi = [_mm512_setzero_si512(); NB];
        let mut have = [0u16; NB];
        for i in 0..kh {
            let ih = (y * sh + i * dh) as isize - ph as isize;
            if ih < 0 || ih as usize >= g.h {
                continue;
            }
            let row = ih * g.w as isize;
            for j in 0..kw {
                for b in 0..NB {
                    let (m, c0) = match cols {
                        Some(cols) => cols[j][b],
                        None => column(g, x0, b, j),
                    };
                    if m == 0 {
                        continue;
                    }
                    let at = row + c0;
                    // Column `c0` of row `ih`; may lie outside `x`, only lanes inside the
                    // row are read through it (or, unmasked, a span inside `x`).
                    let p = xp.wrapping_offset(at);
                    // SAFETY: every lane read (the mask's) is a column inside `0..w` of
                    // row `ih < h`, so inside `x`; unmasked loads read `at..at + 16` or
                    // `at..at + 32`, checked to lie inside `x`.
                    let v = unsafe {
                        match sw {
                            1 if m == u16::MAX && at + 16 <= len => _mm512_loadu_ps(p),
                            1 => _mm512_maskz_loadu_ps(m, p),
                            2 if m == u16::MAX && at + 32 <= len => {
                                let (a, c) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
                                _mm512_permutex2var_ps(a, even, c)
                            }
                            2 => {
                                // The mask's lanes are `lo..hi`, contiguous.
                                let lo = m.trailing_zeros() as usize;
                                let hi = 16 - m.leading_zeros() as usize;
                                let m2 = bits(2 * lo, 2 * hi - 1);
                                let a = _mm512_maskz_loadu_ps(m2 as u16, p);
                                let q = p.wrapping_add(16);
                                let c = _mm512_maskz_loadu_ps((m2 >> 16) as u16, q);
                                _mm512_permutex2var_ps(a, even, c)
                            }
                            _ => {
                                let z = _mm512_setzero_ps();
                                _mm512_mask_i32gather_ps::<4>(z, m, lane_sw, p)
                            }
                        }
                    };
                    // Greater, or NaN (compares unordered), while the maximum is not NaN.
                    let up = _mm512_mask_cmp_ps_mask::<_CMP_NLE_UQ>(m, v, best[b])
                        & _mm512_cmp_ps_mask::<_CMP_ORD_Q>(best[b], best[b]);
                    let take = (m & !have[b]) | up;
                    best[b] = _mm512_mask_mov_ps(best[b], take, v);
                    if IDX {
                        let at = _mm512_add_epi32(lane_sw, _mm512_set1_epi32(at as i32));
                        bi[b] = _mm512_mask_mov_epi32(bi[b], take, at);
                    }
                    have[b] |= m;
                }
            }
        }
        (best, bi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// A random pooling of up to 4×4 windows (strides up to 3, dilation up to 2, padding,
        /// ceil mode) over an image of up to `max_h` × `max_w`; `None` where it has no
        /// output.
        fn geometry(&mut self, max_h: usize, max_w: usize) -> Option<PoolGeom> {
            let (kh, kw) = (1 + self.below(4), 1 + self.below(4));
            let (sh, sw) = (1 + self.below(3), 1 + self.below(3));
            let (dh, dw) = (1 + self.below(2), 1 + self.below(2));
            let (ph, pw) = (self.below(kh / 2 + 1), self.below(kw / 2 + 1));
            let (h, w) = (1 + self.below(max_h), 1 + self.below(max_w));
            let ceil = self.below(2) == 1;
            Some(PoolGeom {
                h,
                w,
                oh: out_len(h, kh, sh, ph, dh, ceil)?,
                ow: out_len(w, kw, sw, pw, dw, ceil)?,
                kernel: [kh, kw],
                stride: [sh, sw],
                pad: [ph, pw],
                dil: [dh, dw],
            })
        }
        /// Few distinct values (many ties), with NaNs and infinities.
        fn val(&mut self) -> f32 {
            match self.below(40) {
                0 => f32::NAN,
                1 => -f32::NAN,
                2 => f32::NEG_INFINITY,
                3 => f32::INFINITY,
                4 => -0.0,
                _ => (self.below(9) as f32 - 4.0) * 0.5,
            }
        }
    }

    fn out_len(i: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
        crate::conv::pool_out_size("test", i, k, s, p, d, ceil).ok()
    }

    /// The fast plane against [`window_max`] (the portable kernel's rule) on random planes
    /// with NaNs, infinities and ties, over strides (1, 2, 3), padding, dilation and ceil
    /// mode, with and without indices.
    #[test]
    fn fast_plane_matches_the_rule() {
        let mut rng = Rng(7);
        let mut cases = 0;
        for trial in 0..3000 {
            let Some(g) = rng.geometry(20, 70) else {
                continue;
            };
            let (h, w, oh, ow) = (g.h, g.w, g.oh, g.ow);
            if !fast_available(&g) {
                return;
            }
            // Sometimes planes of one repeated value, or all NaN, or all -inf.
            let x: Vec<f32> = match trial % 11 {
                0 => vec![1.5; h * w],
                1 => vec![f32::NEG_INFINITY; h * w],
                2 => vec![f32::NAN; h * w],
                _ => (0..h * w).map(|_| rng.val()).collect(),
            };
            let mut out = vec![7f32; oh * ow];
            let mut idx = vec![-7i64; oh * ow];
            let with_idx = trial % 3 != 0;
            plane_f32(&g, &x, &mut out, with_idx.then_some(&mut idx[..]));
            for y in 0..oh {
                for xo in 0..ow {
                    let (v, i) = window_max(&g, y, xo, |ih, iw| x[ih * w + iw]);
                    let k = y * ow + xo;
                    assert_eq!(
                        out[k].to_bits(),
                        v.to_bits(),
                        "{g:?} output ({y}, {xo}): {} vs {v}",
                        out[k]
                    );
                    if with_idx {
                        assert_eq!(idx[k], i, "{g:?} index of output ({y}, {xo})");
                    } else {
                        assert_eq!(idx[k], -7);
                    }
                }
            }
            cases += 1;
        }
        assert!(cases > 1000, "{cases} cases");
    }

    /// The channels-last path ([`pixels_f32`]: 16-channel blocks, then the rest) against
    /// [`window_max`] on each channel's plane, the same bits and indices, on random
    /// feature maps with NaNs, infinities, signed zeros and ties.
    #[test]
    fn channels_last_pixels_match_the_rule() {
        let mut rng = Rng(5);
        let mut cases = 0;
        for trial in 0..400 {
            let (n, c) = (1 + rng.below(2), [1, 5, 16, 21, 35, 64, 83][trial % 7]);
            let Some(g) = rng.geometry(12, 12) else {
                continue;
            };
            let (h, w, oh, ow) = (g.h, g.w, g.oh, g.ow);
            let x: Vec<f32> = (0..n * h * w * c).map(|_| rng.val()).collect();
            let mut out = vec![7f32; n * oh * ow * c];
            let mut idx = vec![-7i64; n * oh * ow * c];
            let with_idx = trial % 3 != 0;
            assert!(pixels_f32(
                &g,
                (n, c),
                &x,
                &mut out,
                with_idx.then_some(&mut idx[..])
            ));
            for (b, ch, y, xo) in (0..n * c * oh * ow).map(|i| {
                let (b, r) = (i / (c * oh * ow), i % (c * oh * ow));
                (b, r / (oh * ow), r % (oh * ow) / ow, r % ow)
            }) {
                let (v, i) = window_max(&g, y, xo, |ih, iw| x[((b * h + ih) * w + iw) * c + ch]);
                let k = ((b * oh + y) * ow + xo) * c + ch;
                assert_eq!(out[k].to_bits(), v.to_bits(), "{g:?} c={c} at {k}");
                assert_eq!(idx[k], if with_idx { i } else { -7 }, "{g:?} c={c} at {k}");
            }
            cases += 1;
        }
        assert!(cases > 200, "{cases} cases");
    }

    /// The separable values-only path (3×3, stride 2, padding 0 or 1: `maxpool_sep.rs`)
    /// against [`window_max`] on planes with NaNs of both signs, infinities, signed zeros
    /// and ties, narrow and wide rows, floor and ceil modes.
    #[test]
    fn separable_plane_matches_the_rule() {
        let mut rng = Rng(11);
        for trial in 0..600 {
            let (ph, pw) = (rng.below(2), rng.below(2));
            let (h, w) = (1 + rng.below(24), 1 + rng.below(120));
            let ceil = rng.below(2) == 1;
            let (Some(oh), Some(ow)) =
                (out_len(h, 3, 2, ph, 1, ceil), out_len(w, 3, 2, pw, 1, ceil))
            else {
                continue;
            };
            let g = PoolGeom {
                h,
                w,
                oh,
                ow,
                kernel: [3, 3],
                stride: [2, 2],
                pad: [ph, pw],
                dil: [1, 1],
            };
            if !fast_available(&g) {
                return;
            }
            let x: Vec<f32> = match trial % 7 {
                0 => vec![f32::NAN; h * w],
                1 => (0..h * w)
                    .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
                    .collect(),
                _ => (0..h * w).map(|_| rng.val()).collect(),
            };
            let mut out = vec![7f32; oh * ow];
            plane_f32(&g, &x, &mut out, None);
            for y in 0..oh {
                for xo in 0..ow {
                    let (v, _) = window_max(&g, y, xo, |ih, iw| x[ih * w + iw]);
                    let got = out[y * ow + xo];
                    assert_eq!(
                        got.to_bits(),
                        v.to_bits(),
                        "{g:?} ({y}, {xo}): {got} vs {v}"
                    );
                }
            }
        }
    }

    /// Resnet18's pooling (64 planes 112×112, 3×3, stride 2, padding 1), fast path and
    /// the rule, one thread: `cargo test --release -p etch-kernels maxpool_speed --
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn maxpool_speed() {
        let g = PoolGeom {
            h: 112,
            w: 112,
            oh: 56,
            ow: 56,
            kernel: [3, 3],
            stride: [2, 2],
            pad: [1, 1],
            dil: [1, 1],
        };
        let mut rng = Rng(1);
        let x: Vec<f32> = (0..64 * 112 * 112).map(|_| rng.val()).collect();
        let (mut out, mut idx) = (vec![0f32; 64 * 56 * 56], vec![0i64; 64 * 56 * 56]);
        let n = 56 * 56;
        for round in 0..3 {
            let t = std::time::Instant::now();
            for _ in 0..10 {
                for c in 0..64 {
                    let xs = &x[c * 112 * 112..(c + 1) * 112 * 112];
                    let (o, i) = (&mut out[c * n..(c + 1) * n], &mut idx[c * n..(c + 1) * n]);
                    plane_f32(&g, xs, o, Some(i));
                }
            }
            let fast = t.elapsed().as_secs_f64() / 10.0;
            let t = std::time::Instant::now();
            for _ in 0..10 {
                for c in 0..64 {
                    let xs = &x[c * 112 * 112..(c + 1) * 112 * 112];
                    plane_f32(&g, xs, &mut out[c * n..(c + 1) * n], None);
                }
            }
            let values = t.elapsed().as_secs_f64() / 10.0;
            let t = std::time::Instant::now();
            for c in 0..64 {
                let xs = &x[c * 112 * 112..(c + 1) * 112 * 112];
                for y in 0..56 {
                    for xo in 0..56 {
                        let (v, i) = window_max(&g, y, xo, |ih, iw| xs[ih * 112 + iw]);
                        out[c * n + y * 56 + xo] = v;
                        idx[c * n + y * 56 + xo] = i;
                    }
                }
            }
            let rule = t.elapsed().as_secs_f64();
            println!(
                "round {round}: fast {:.3} ms, values only {:.3} ms, rule {:.3} ms",
                fast * 1e3,
                values * 1e3,
                rule * 1e3
            );
        }
    }
}
