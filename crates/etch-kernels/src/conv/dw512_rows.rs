//! Depthwise planes by groups of output rows, for square 3×3 and 5×5 kernels with equal
//! strides 1 or 2 and no dilation, read in place (no padded copy). Each input row's tap
//! vectors are loaded (at stride 2 also deinterleaved) once and used by every output row of
//! the group that reads that row, where [`super::kernel`] loads them once per output row and
//! tap: 3–4× fewer loads and permutes. Rows above and below the image are skipped and
//! columns outside it read as zeros (masked loads, in the blocks at the row ends only): the
//! padding's products would add zeros to sums that start from +0, which changes nothing.
//! Per output the taps still run in order `(i, j)` from +0, then `+ bias` and the clamp:
//! with `FMA` false each tap is a product then a sum (the portable sums, bit for bit), with
//! `FMA` true one fused multiply-add (one rounding a tap, as XNNPACK's own kernels).

use std::arch::x86_64::*;

/// Output rows a group (where the plane has that many).
const R: usize = 4;

/// The most taps a kernel has here (5×5).
const TAPS: usize = 25;

/// One input plane, read in place: rows of `w` elements `rs` apart from `p`, `h` of them;
/// the convolution's padding `ph`, `pw`.
pub(super) struct Plane {
    pub p: *const f32,
    pub h: usize,
    pub w: usize,
    pub rs: usize,
    pub ph: usize,
    pub pw: usize,
}

/// One plane of outputs, `oh` rows of `ow`, `ostride` apart.
///
/// # Safety
/// The CPU has AVX-512F; `x.p` points at `(h - 1) * rs + w` readable elements; `out` holds
/// `(oh - 1) * ostride + ow` elements; `w` holds `K * K` weights; `oh` and `ow` are the
/// convolution's for `x` (so that every tap of an output inside the plane reads a row in
/// `-ph..h + ph` and a column in `-pw..w + pw`).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run<const K: usize, const S: usize, const FMA: bool>(
    x: &Plane,
    w: &[f32],
    bias: f32,
    (lo, hi): (f32, f32),
    out: &mut [f32],
    (oh, ow, ostride): (usize, usize, usize),
) {
    let mut wv = [_mm512_setzero_ps(); TAPS];
    for (v, &x) in wv.iter_mut().zip(&w[..K * K]) {
        *v = _mm512_set1_ps(x);
    }
    let xblocks = ow.div_ceil(16);
    let tail = ow - (xblocks - 1) * 16;
    let st = Store {
        o: out.as_mut_ptr(),
        ostride,
        bias: _mm512_set1_ps(bias),
        lo: _mm512_set1_ps(lo),
        hi: _mm512_set1_ps(hi),
        last: xblocks - 1,
        tail: (u32::MAX >> (32 - tail)) as u16,
    };
    // SAFETY (each call): rows and blocks within the plane's (the caller's bounds).
    if oh >= R {
        // The last group ends at the last row (overlapping the one before: those rows are
        // computed twice, the same values).
        for y0 in (0..oh).step_by(R) {
            unsafe { group::<K, S, R, FMA>(x, &wv, &st, y0.min(oh - R), xblocks) };
        }
    } else {
        for y in 0..oh {
            unsafe { group::<K, S, 1, FMA>(x, &wv, &st, y, xblocks) };
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

/// Output rows `y..y + RR` of every block: blocks whose taps all fall inside the rows two
/// at a time with plain loads, the others (at the row ends) one at a time, masked.
///
/// # Safety
/// As [`run`], with `y + RR <= oh`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn group<const K: usize, const S: usize, const RR: usize, const FMA: bool>(
    x: &Plane,
    wv: &[__m512; TAPS],
    st: &Store,
    y: usize,
    xblocks: usize,
) {
    // The first input column of block xb's first tap, and whether every element its loads
    // touch (through `K - 1 + 16 * S` further columns) lies in the row.
    let col = |xb: usize| (xb * 16 * S) as isize - x.pw as isize;
    let inside = |c: isize| c >= 0 && c + (K - 1 + 16 * S) as isize <= x.w as isize;
    // Whether some input row of the group lies outside the image (the first and last groups).
    let first = (y * S) as isize - x.ph as isize;
    let edge = first < 0 || first + ((RR - 1) * S + K) as isize > x.h as isize;
    let mut xb = 0;
    while xb < xblocks {
        let c = col(xb);
        // SAFETY: the caller's bounds; `inside` or the masks keep the loads in the rows.
        xb += unsafe {
            if inside(c) && xb + 1 < xblocks && inside(col(xb + 1)) {
                match edge {
                    false => blocks::<K, S, RR, 2, FMA, false>(x, wv, st, y, xb, None),
                    true => blocks::<K, S, RR, 2, FMA, true>(x, wv, st, y, xb, None),
                }
            } else {
                let m = (!inside(c)).then(|| masks::<K, S>(c, x.w));
                match edge {
                    false => blocks::<K, S, RR, 1, FMA, false>(x, wv, st, y, xb, m),
                    true => blocks::<K, S, RR, 1, FMA, true>(x, wv, st, y, xb, m),
                }
            }
        };
    }
}

/// Blocks `xb..xb + CB` of rows `y..y + RR`, with masked loads where `m` is given (the row
/// ends); returns `CB`.
///
/// # Safety
/// As [`group`]; without `m` every load of the blocks lies in the rows.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn blocks<
    const K: usize,
    const S: usize,
    const RR: usize,
    const CB: usize,
    const FMA: bool,
    const EDGE: bool,
>(
    x: &Plane,
    wv: &[__m512; TAPS],
    st: &Store,
    y: usize,
    xb: usize,
    m: Option<[u16; 6]>,
) -> usize {
    let c = (xb * 16 * S) as isize - x.pw as isize;
    // SAFETY: the caller's bounds.
    unsafe {
        let acc = match &m {
            Some(m) => tile::<K, S, RR, CB, FMA, true, EDGE>(x, y, c, wv, m),
            None => tile::<K, S, RR, CB, FMA, false, EDGE>(x, y, c, wv, &[0; 6]),
        };
        for (r, a) in acc.iter().enumerate() {
            for (cb, &v) in a.iter().enumerate() {
                st.put(y + r, xb + cb, v);
            }
        }
    }
    CB
}

/// The load masks of a block whose first tap reads column `c` of rows `w` long: lane `l` of
/// load `q` reads column `c + off(q) + l`, kept where that is in `0..w`; `off(j) = j` at
/// stride 1, `off(2m) = 2m` and `off(2m + 1) = 2m + 16` (the pair of loads deinterleaved
/// into taps `2m` and `2m + 1`) at stride 2.
fn masks<const K: usize, const S: usize>(c: isize, w: usize) -> [u16; 6] {
    let mut m = [0u16; 6];
    let loads = if S == 1 { K } else { 2 * K.div_ceil(2) };
    for (q, mq) in m.iter_mut().enumerate().take(loads) {
        let off = if S == 1 { q } else { q / 2 * 2 + q % 2 * 16 };
        let first = c + off as isize;
        let lo = (-first).clamp(0, 16) as u32;
        let hi = (w as isize - first).clamp(0, 16) as u32;
        let below = |n: u32| ((1u32 << n) - 1) as u16;
        *mq = below(hi) & !below(lo);
    }
    m
}

/// `RR` output rows from `y` × `CB` blocks of 16 whose first tap reads column `c`: input
/// row by input row (rows outside the image skipped), each row's `K` tap vectors to every
/// output row reading it, in tap order per output.
///
/// # Safety
/// As [`run`]; without `MASKED` every block's loads lie in the rows (`group`'s `inside`),
/// without `EDGE` every input row read lies in the image (no check: the loop unrolls).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile<
    const K: usize,
    const S: usize,
    const RR: usize,
    const CB: usize,
    const FMA: bool,
    const MASKED: bool,
    const EDGE: bool,
>(
    x: &Plane,
    y: usize,
    c: isize,
    wv: &[__m512; TAPS],
    m: &[u16; 6],
) -> [[__m512; CB]; RR] {
    let mut acc = [[_mm512_setzero_ps(); CB]; RR];
    for ir in 0..(RR - 1) * S + K {
        let iy = (y * S + ir) as isize - x.ph as isize;
        if EDGE && (iy < 0 || iy >= x.h as isize) {
            continue;
        }
        for cb in 0..CB {
            let at = iy * x.rs as isize + c + (cb * 16 * S) as isize;
            // SAFETY: the caller's bounds (masked lanes are not read).
            let xv = unsafe { taps::<K, S, MASKED>(x.p.wrapping_offset(at), m) };
            for (r, row) in acc.iter_mut().enumerate() {
                // Output row r reads input row ir as its kernel row i.
                let Some(i) = ir.checked_sub(r * S).filter(|&i| i < K) else {
                    continue;
                };
                for (j, &xj) in xv.iter().enumerate() {
                    let wij = wv[i * K + j];
                    row[cb] = if FMA {
                        _mm512_fmadd_ps(wij, xj, row[cb])
                    } else {
                        _mm512_add_ps(row[cb], _mm512_mul_ps(wij, xj))
                    };
                }
            }
        }
    }
    acc
}

/// The `K` tap vectors of one input row for 16 outputs from `q`: lane `l` of vector `j` is
/// `q[l * S + j]` (at stride 2 deinterleaved from pairs of loads), masked loads with
/// [`masks`]' `m` where `MASKED`.
///
/// # Safety
/// Every element a load reads (all lanes, or the lanes of its mask) is readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn taps<const K: usize, const S: usize, const MASKED: bool>(
    q: *const f32,
    m: &[u16; 6],
) -> [__m512; K] {
    let mut x = [_mm512_setzero_ps(); K];
    if S == 1 {
        for (j, v) in x.iter_mut().enumerate() {
            *v = unsafe { ld::<MASKED>(q, j, m[j]) };
        }
    } else {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        for p in 0..K.div_ceil(2) {
            // SAFETY: the caller's bounds.
            let (a, b) = unsafe {
                (
                    ld::<MASKED>(q, 2 * p, m[2 * p]),
                    ld::<MASKED>(q, 2 * p + 16, m[2 * p + 1]),
                )
            };
            x[2 * p] = _mm512_permutex2var_ps(a, even, b);
            if 2 * p + 1 < K {
                x[2 * p + 1] = _mm512_permutex2var_ps(a, odd, b);
            }
        }
    }
    x
}

/// 16 elements from `q + off`, only the lanes of `k` where `MASKED` (the others zero).
///
/// # Safety
/// Those elements are readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn ld<const MASKED: bool>(q: *const f32, off: usize, k: u16) -> __m512 {
    // SAFETY: the caller's bounds.
    unsafe {
        if MASKED {
            _mm512_maskz_loadu_ps(k, q.wrapping_add(off))
        } else {
            _mm512_loadu_ps(q.wrapping_add(off))
        }
    }
}
