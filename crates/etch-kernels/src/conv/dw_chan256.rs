//! [`super`]'s channel groups on AVX2 with FMA, for CPUs without AVX-512F (AMD Zen 1 to
//! 3, Intel before Skylake-SP): 8 channels a group (one 256-bit vector). A group's planes
//! are contiguous, so they are moved into the pixel-major buffer and back as flat
//! `[8, h · w]` matrices, 8 pixels at a time through 8×8 transposes (only a plane's last
//! block is partial); each output row is summed at most [`CHUNK`] pixels at a time (one
//! accumulator a pixel, with the weights and an input vector, in the 16 vector registers)
//! into a pixel-major output tile. Per output the same operations in the same order as the
//! 16-channel kernel, so the same bits.

use super::super::Conv;
use super::Geo;
use crate::threads::SharedMut;
use crate::transpose16::x86_avx2::transpose;
use crate::util::avx2::{clamp, load, store};
use std::arch::x86_64::*;

/// Channels of a group (lanes of a vector).
pub(super) const L: usize = 8;
/// The most output pixels of a row summed together.
const CHUNK: usize = 8;

/// Floats of a group's output tile: `oh · ow` pixels of 8 channels, rounded up to whole
/// blocks of 8 pixels.
pub(super) fn tile_len(oh: usize, ow: usize) -> usize {
    (oh * ow).div_ceil(L) * L * L
}

/// Unit `u` (batch item × group of 8 channels): pack, sum row by row, unpack.
///
/// # Safety
/// AVX2 and FMA; the unit's 8 input and output planes (dense: [`Conv::dense_planes`]) in
/// bounds of `xs` and `out`, its outputs this task's alone; `buf` holds the padded buffer
/// (`hp · wp · 8`, zero borders), the weights (`kk · 8`) and the output tile
/// ([`tile_len`]).
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn group(
    c: &Conv,
    g: &Geo,
    xs: &[f32],
    (w, bs): (&[f32], Option<&[f32]>),
    out: &SharedMut<'_, f32>,
    u: usize,
    buf: &mut [f32],
    (lo, hi): (f32, f32),
) {
    let (xv, ov) = (c.xv, c.ov);
    let (n, ch0) = (u / (c.g / L), u % (c.g / L) * L);
    let (pad, rest) = buf.split_at_mut(g.hp * g.wp * L);
    let (wk, tile) = rest.split_at_mut(g.kk * L);
    // The group's weights (`[8, kk]` in `w`), 8 taps at a time, tap-major.
    for t0 in (0..g.kk).step_by(L) {
        let n = (g.kk - t0).min(L);
        let mut r = [_mm256_setzero_ps(); L];
        for (l, r) in r.iter_mut().enumerate() {
            // SAFETY: `n` taps of channel `ch0 + l` (`w` has `c.g · kk`: the caller's).
            *r = unsafe { load(w.as_ptr().add((ch0 + l) * g.kk + t0), n) };
        }
        for (t, v) in transpose(r).into_iter().take(n).enumerate() {
            // SAFETY: tap `t0 + t < kk` of `wk` (`kk · 8`).
            unsafe { _mm256_storeu_ps(wk.as_mut_ptr().add((t0 + t) * L), v) };
        }
    }
    // The input planes, 8 pixels at a time; each pixel's 8 channels into the padded
    // buffer's interior: row by row where rows are whole blocks or long (runs of the
    // buffer, few partial blocks), else as flat planes (a 4×4 plane in 2 blocks, not 4;
    // 14×14 in 25, not 28 of which 14 partial).
    let x0 = n * xv.s[0] + ch0 * xv.s[1];
    if xv.w.is_multiple_of(L) || xv.w >= 32 {
        for y in 0..xv.h {
            let at = ((y + c.pad.0) * g.wp + c.pad.1) * L;
            for c0 in (0..xv.w).step_by(L) {
                let cols = (xv.w - c0).min(L);
                let mut r = [_mm256_setzero_ps(); L];
                for (i, r) in r.iter_mut().enumerate() {
                    // SAFETY: `cols` elements of row `y` of plane `ch0 + i` (in bounds: the
                    // caller's).
                    *r = unsafe { load(xs.as_ptr().add(x0 + i * xv.s[1] + y * xv.w + c0), cols) };
                }
                for (j, v) in transpose(r).into_iter().take(cols).enumerate() {
                    // SAFETY: pixel `(y, c0 + j)` of the interior (`c0 + j < w`).
                    unsafe { _mm256_storeu_ps(pad.as_mut_ptr().add(at + (c0 + j) * L), v) };
                }
            }
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { pack_flat(c, g, xs, x0, pad) };
    }
    let bias = match bs {
        // SAFETY: 8 biases (`bs` has `c.g`: checked by the caller).
        Some(b) => unsafe { _mm256_loadu_ps(b.as_ptr().add(ch0)) },
        None => _mm256_setzero_ps(),
    };
    let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    // Rows of up to 4 outputs are summed several rows at a time (8 accumulators).
    let rows = if ov.w <= CHUNK { rows_per(ov.w) } else { 1 };
    let mut oy = 0;
    while oy < ov.h {
        let rr = if ov.h - oy >= rows { rows } else { 1 };
        for ox in (0..ov.w).step_by(CHUNK) {
            let cw = (ov.w - ox).min(CHUNK);
            let r = Row {
                x: pad[(oy * c.stride.0 * g.wp + ox * c.stride.1) * L..].as_ptr(),
                wp: g.wp,
                rs: c.stride.0 * g.wp * L,
                ts: ov.w * L,
                w: wk.as_ptr(),
                kh: c.kh,
                kw: c.kw,
                sw: c.stride.1,
                bias,
                lo,
                hi,
            };
            // SAFETY: the chunk's taps read rows `oy · sh..(oy + rr - 1) · sh + kh` of the
            // padded buffer (`<= hp`), columns up to `(ow - 1) · sw + kw <= wp` (`run`); the
            // tile holds `oh · ow` pixels of 8.
            unsafe { row_kernel(cw, rr, g.fma)(&r, tile.as_mut_ptr().add((oy * ov.w + ox) * L)) };
        }
        oy += rr;
    }
    // The tile, 8 pixels at a time, into the 8 output planes.
    let o0 = n * ov.s[0] + ch0 * ov.s[1];
    let ohw = ov.h * ov.w;
    for p0 in (0..ohw).step_by(L) {
        let mut r = [_mm256_setzero_ps(); L];
        for (i, r) in r.iter_mut().enumerate() {
            // SAFETY: tile pixel `p0 + i` (the tile has whole blocks of 8).
            *r = unsafe { _mm256_loadu_ps(tile.as_ptr().add((p0 + i) * L)) };
        }
        for (ch, v) in transpose(r).into_iter().enumerate() {
            // SAFETY: elements `p0..p0 + n` of output plane `ch0 + ch`: inside `out` and
            // this unit's.
            unsafe {
                store(
                    out.as_ptr().add(o0 + ch * ov.s[1] + p0),
                    v,
                    (ohw - p0).min(L),
                )
            };
        }
    }
}

/// The group's input planes (from `x0`) into the padded buffer's interior as flat
/// `[8, h · w]` matrices, 8 pixels at a time (planes with rows under 8 pixels).
///
/// # Safety
/// As [`group`]: AVX2; the group's 8 dense planes in bounds of `xs`; `pad` the padded
/// buffer.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_flat(c: &Conv, g: &Geo, xs: &[f32], x0: usize, pad: &mut [f32]) {
    let xv = c.xv;
    let hw = xv.h * xv.w;
    let (mut y, mut x) = (0, 0);
    for p0 in (0..hw).step_by(L) {
        let cols = (hw - p0).min(L);
        let mut r = [_mm256_setzero_ps(); L];
        for (i, r) in r.iter_mut().enumerate() {
            // SAFETY: `cols` elements of plane `ch0 + i` (in bounds: the caller's).
            *r = unsafe { load(xs.as_ptr().add(x0 + i * xv.s[1] + p0), cols) };
        }
        for v in transpose(r).into_iter().take(cols) {
            let at = ((y + c.pad.0) * g.wp + x + c.pad.1) * L;
            // SAFETY: pixel `(y, x)` of the interior (`y + pad < hp`, `x + pad < wp`).
            unsafe { _mm256_storeu_ps(pad.as_mut_ptr().add(at), v) };
            x += 1;
            if x == xv.w {
                (y, x) = (y + 1, 0);
            }
        }
    }
}

/// One chunk of an output row's taps (or of `R` rows').
struct Row {
    /// The padded buffer at the chunk's first input pixel of its first input row.
    x: *const f32,
    wp: usize,
    /// Floats between the first input pixels of consecutive output rows (`sh · wp · 8`),
    /// and between consecutive output rows in the tile (`ow · 8`).
    rs: usize,
    ts: usize,
    /// The group's weights, `[kk, 8]`.
    w: *const f32,
    kh: usize,
    kw: usize,
    sw: usize,
    bias: __m256,
    lo: __m256,
    hi: __m256,
}

type RowFn = unsafe fn(&Row, *mut f32);

/// Output rows summed together for rows of `ow` (at most [`CHUNK`]) outputs.
fn rows_per(ow: usize) -> usize {
    match ow {
        1 => 8,
        2 => 4,
        3 | 4 => 2,
        _ => 1,
    }
}

/// The kernel for `ow` outputs (1 to [`CHUNK`]) of `rows` rows (1, or [`rows_per`]).
fn row_kernel(ow: usize, rows: usize, fma: bool) -> RowFn {
    macro_rules! by_width {
        ($fma:literal) => {
            match (ow, rows) {
                (1, 1) => row::<1, 1, $fma>,
                (1, _) => row::<1, 8, $fma>,
                (2, 1) => row::<2, 1, $fma>,
                (2, _) => row::<2, 4, $fma>,
                (3, 1) => row::<3, 1, $fma>,
                (3, _) => row::<3, 2, $fma>,
                (4, 1) => row::<4, 1, $fma>,
                (4, _) => row::<4, 2, $fma>,
                (5, _) => row::<5, 1, $fma>,
                (6, _) => row::<6, 1, $fma>,
                (7, _) => row::<7, 1, $fma>,
                _ => row::<8, 1, $fma>,
            }
        };
    }
    if fma {
        by_width!(true)
    } else {
        by_width!(false)
    }
}

/// `R` rows of `OW` output pixels × 8 channels: the taps in order from +0, `+ bias`, the
/// clamp (`clamp_f32`: `lo` where below, else `hi` where above, NaN kept), into `tile`
/// rows.
///
/// # Safety
/// AVX2 and FMA; `r.x` holds the chunk's `R` output rows' `kh` padded input rows (`r.rs`
/// apart) of `wp` pixels (8 floats each) from its first pixel, `r.w` `kh · kw` vectors;
/// `tile` `R` rows (`r.ts` apart) of `OW` pixels of 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn row<const OW: usize, const R: usize, const FMA: bool>(r: &Row, tile: *mut f32) {
    let mut acc = [[_mm256_setzero_ps(); OW]; R];
    for i in 0..r.kh {
        for j in 0..r.kw {
            // SAFETY: tap `(i, j)`'s weights and, per output `(y, x)`, padded pixel
            // `(y · sh + i, x · sw + j)` of the chunk (the caller's contract).
            unsafe {
                let wv = _mm256_loadu_ps(r.w.add((i * r.kw + j) * L));
                let base = r.x.add((i * r.wp + j) * L);
                for (y, acc) in acc.iter_mut().enumerate() {
                    for (x, acc) in acc.iter_mut().enumerate() {
                        let xv = _mm256_loadu_ps(base.add(y * r.rs + x * r.sw * L));
                        *acc = if FMA {
                            _mm256_fmadd_ps(wv, xv, *acc)
                        } else {
                            _mm256_add_ps(*acc, _mm256_mul_ps(wv, xv))
                        };
                    }
                }
            }
        }
    }
    for (y, acc) in acc.iter().enumerate() {
        for (x, acc) in acc.iter().enumerate() {
            let v = clamp(_mm256_add_ps(*acc, r.bias), r.lo, r.hi);
            // SAFETY: tile pixel `(y, x)` (the caller's contract).
            unsafe { _mm256_storeu_ps(tile.add(y * r.ts + x * L), v) };
        }
    }
}
