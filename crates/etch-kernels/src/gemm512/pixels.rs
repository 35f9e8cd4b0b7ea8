//! Pixel tiles of a convolution ([`Mode::Pixels`]): the lanes over output channels (16 or
//! 32 of them, two or four packed panels) and the broadcasts over up to [`PX`]
//! consecutive pixels of an output row, read from the phase planes at the term offsets
//! as the indirect modes read them. Small planes take them: a 7×7 output fills 49 of the
//! 64 lanes of two 32-pixel tiles, 4×4 half of one, while output channels come in
//! multiples of 16.
//!
//! The same sums in the same order as the pixel-vector tiles: each output is its bias,
//! then one fused multiply-add per term in term order (all blocks of [`CONV_KC`] terms in
//! one pass, the accumulators in registers), then the clamp `min(hi, max(lo, x))`; so the
//! same bits.

use super::{CONV_KC, ConvLayout, ConvOps, ConvPlan, ConvShape, MR, Mode, conv_weight_at};
use std::ops::Range;

/// The most pixels of a tile.
pub(super) const PX: usize = 8;

/// The cost of one output element's store (a scattered lane), in term-lanes.
const STORE_COST: usize = 64;

/// Per-mille cost of a pixel tile's term-lane against a pixel-vector tile's (its loads:
/// four half-panel rows and up to 8 broadcasts per 16 multiply-adds, against 2 and 8).
/// The AVX2 tiles take the same figure: on Zen 1 (`resnet18_conv_speed`) it sends 7×7 and
/// 14×14 planes to pixel tiles (512 -> 512 on 7×7: 9.4 -> 6.3 ms; 256 -> 256 on 14×14: 6.6
/// -> 6.1), and 256 -> 256 on 8×8 too, where an im2col is 6% faster (1.89 against 2.00
/// ms); 1150 keeps the 8×8 plane in an im2col but sends the 14×14 planes to the wide grid
/// (8-30% slower).
const PX_PERMILLE: usize = 1050;
/// [`PX_PERMILLE`] on AMD's AVX-512 cores (Zen 4: `resnet18_conv_speed`), where pixel tiles
/// beat the wide grid on resnet18's 56² and 28² planes (64 -> 64 on 56²: 2.29 -> 2.19 ms;
/// 128 -> 128 on 28²: 2.36 -> 2.16) and 64 -> 128 on 32² at stride 2 (0.47 -> 0.39), while
/// 64 -> 64 on 32² stays in rows (pixel tiles 0.89 against 0.71 ms): any figure between
/// 889 and 939 makes those choices.
const PX_PERMILLE_AMD512: usize = 900;

/// Whether convolutions may take pixel tiles: where the packed products run (AVX-512F, or
/// AVX2 and FMA: [`x86_avx2`]), unless `ETCH_CONV_PIXELS=0` (never, for comparisons).
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        super::available() && std::env::var("ETCH_CONV_PIXELS").map_or(true, |v| v != "0")
    })
}

/// Pixels per tile in an output row of `ow`: the row split evenly into tiles of at most
/// [`PX`] (a 14-pixel row in two of 7, not 8 and 6).
pub(super) fn row_tiles(ow: usize) -> (usize, usize) {
    let per_row = ow.div_ceil(PX);
    (per_row, ow.div_ceil(per_row))
}

/// The fewest tiles a plane takes in pixel tiles: each block of weights, read from memory
/// by its first tile, is read from L1 by the others. With 4 tiles (4×4 outputs: resnet18
/// at 128², 4.7–9.4 MB of weights a convolution) they ran at 40–50 GMAC/s against 48–51
/// for 16-pixel vector tiles (`resnet18_conv_speed`); with 7 or more they win.
const MIN_TILES: usize = 6;

/// Whether a convolution that can take pixel tiles should, its other costs aside: at
/// least [`MIN_TILES`] tiles.
pub(super) fn worth(s: &ConvShape) -> bool {
    s.oh * row_tiles(s.ow).0 >= MIN_TILES
}

/// The term-lanes of a convolution in pixel tiles, comparable with the other modes'
/// (per output channel), or `None` where it cannot take them: output channels not a
/// multiple of 16, a 1×1 kernel (no phase planes), or output offsets past `i32` (the
/// scattered stores).
pub(super) fn cost(s: &ConvShape, kk: usize) -> Option<usize> {
    let npix = s.oh * s.ow;
    let fits = s.cout_g.is_multiple_of(16)
        && s.kernel != [1, 1]
        && s.os[1]
            .checked_mul(32)
            .is_some_and(|v| v < i32::MAX as usize);
    let permille = match super::amd_avx512() {
        true => PX_PERMILLE_AMD512,
        false => PX_PERMILLE,
    };
    fits.then(|| npix * (kk * permille / 1000 + STORE_COST))
}

/// The units of a convolution in pixel tiles: (batch item and group, 32-channel group).
pub(super) fn units(s: &ConvShape) -> usize {
    s.n * s.groups * s.cout_g.div_ceil(32)
}

/// One tile over one block of terms: `M` consecutive pixels of an output row × 16 `V`
/// output channels.
struct PxTile {
    /// Terms of the block.
    k: usize,
    /// The tile's first pixel in the item's phase planes, and the block's term offsets.
    x: *const f32,
    offs: *const u32,
    /// The first row of the block's pair of panels of channels `co..co + 16` (rows
    /// `2 MR` apart); the next pair's `ps` after it.
    a: *const f32,
    ps: usize,
    /// The biases of channels `co..` (the first block starts from them).
    bias: *const f32,
    /// The tile's accumulators between blocks (`M` rows of 32), read unless `first`,
    /// written unless `last`.
    acc: *mut f32,
    first: bool,
    last: bool,
    /// The output of channel `co`, at the tile's first pixel; channels `c_rs` apart
    /// (written by the last block).
    out: *mut f32,
    c_rs: usize,
    lo: f32,
    hi: f32,
    /// Cache lines to prefetch while the tile runs (the next block's weights), `pf_n` of
    /// them from `pf`.
    pf: *const f32,
    pf_n: usize,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, PxTile};
    use std::arch::x86_64::*;

    /// `M` pixels × `16 V` channels over one block of terms (see the module doc).
    ///
    /// # Safety
    /// AVX-512F; `t.a` addresses `t.k` rows of 16 (`2 MR` apart) of `V` pairs of panels
    /// `t.ps` apart, `t.bias`
    /// `16 V` biases; `t.offs` `t.k` offsets, each `t.x + off + m` (`m < M`) inside the
    /// phase planes; `t.acc` `M` rows of 32 (read unless `t.first`, written unless
    /// `t.last`); with `t.last`, output pixel `m` of channel `c` (`c < 16 V`) writable at
    /// `t.out + c · t.c_rs + m`, with `16 V · t.c_rs < i32::MAX`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile<const M: usize, const V: usize>(t: &PxTile) {
        let mut acc = [[_mm512_setzero_ps(); V]; M];
        for (m, row) in acc.iter_mut().enumerate() {
            for (v, y) in row.iter_mut().enumerate() {
                // SAFETY: the biases, or the tile's accumulators (the caller's contract).
                *y = unsafe {
                    if t.first {
                        _mm512_loadu_ps(t.bias.add(16 * v))
                    } else {
                        _mm512_loadu_ps(t.acc.add(32 * m + 16 * v))
                    }
                };
            }
        }
        let per = t.pf_n.div_ceil(t.k.max(1));
        let (mut a, mut pf, mut pf_left) = (t.a, t.pf, t.pf_n);
        for kk in 0..t.k {
            // SAFETY: term `kk`'s offset; the pixels it gives are inside the planes; the
            // panels' rows `kk` of the block.
            unsafe {
                let x = t.x.add(*t.offs.add(kk) as usize);
                let mut wv = [_mm512_setzero_ps(); V];
                for (v, w) in wv.iter_mut().enumerate() {
                    *w = _mm512_loadu_ps(a.add(v * t.ps));
                }
                for (m, row) in acc.iter_mut().enumerate() {
                    let xb = _mm512_set1_ps(*x.add(m));
                    for (y, &w) in row.iter_mut().zip(&wv) {
                        *y = _mm512_fmadd_ps(xb, w, *y);
                    }
                }
                a = a.add(2 * MR);
            }
            for _ in 0..per.min(pf_left) {
                // A hint: the address need not be valid.
                _mm_prefetch::<_MM_HINT_T0>(pf as *const i8);
                pf = pf.wrapping_add(16);
                pf_left -= 1;
            }
        }
        if !t.last {
            for (m, row) in acc.iter().enumerate() {
                for (v, &y) in row.iter().enumerate() {
                    // SAFETY: the tile's accumulators.
                    unsafe { _mm512_storeu_ps(t.acc.add(32 * m + 16 * v), y) };
                }
            }
            return;
        }
        let (lo, hi) = (_mm512_set1_ps(t.lo), _mm512_set1_ps(t.hi));
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let idx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(t.c_rs as i32));
        for (m, row) in acc.iter().enumerate() {
            for (v, &y) in row.iter().enumerate() {
                let y = _mm512_min_ps(hi, _mm512_max_ps(lo, y));
                // SAFETY: channels `co + 16 v ..` of pixel `m` (the caller's contract).
                unsafe { _mm512_i32scatter_ps::<4>(t.out.add(16 * v * t.c_rs + m), idx, y) };
            }
        }
    }
}

/// The pixel tiles on AVX2 with FMA: a tile's 16 channels of a pair of panels are two
/// 8-lane vectors, its pixels taken at most 4 at a time (8 accumulators) and its pairs one
/// at a time, each pass over the whole block of terms; the outputs are stored lane by lane
/// (no scatter). The same sums in the same order as [`x86::tile`], so the same bits.
#[cfg(target_arch = "x86_64")]
mod x86_avx2 {
    use super::{MR, PxTile};
    use std::arch::x86_64::*;

    /// Pixels `m0..m0 + M` × the 16 channels of pair `v` of `t`, over its block of terms;
    /// with `pf`, the tile's prefetches too.
    ///
    /// # Safety
    /// As [`tile`], for these pixels and this pair.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn pass<const M: usize>(t: &PxTile, v: usize, m0: usize, pf: bool) {
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        for (m, row) in acc.iter_mut().enumerate() {
            for (h, y) in row.iter_mut().enumerate() {
                // SAFETY: the pair's biases, or the tile's accumulators of pixel `m0 + m`.
                *y = unsafe {
                    if t.first {
                        _mm256_loadu_ps(t.bias.add(16 * v + 8 * h))
                    } else {
                        _mm256_loadu_ps(t.acc.add(32 * (m0 + m) + 16 * v + 8 * h))
                    }
                };
            }
        }
        let per = if pf { t.pf_n.div_ceil(t.k.max(1)) } else { 0 };
        let (mut pf, mut pf_left) = (t.pf, if per > 0 { t.pf_n } else { 0 });
        // SAFETY: pair `v`'s first row of the block.
        let mut a = unsafe { t.a.add(v * t.ps) };
        for kk in 0..t.k {
            // SAFETY: term `kk`'s offset; the pixels it gives are inside the planes; the
            // pair's row `kk` of the block.
            unsafe {
                let x = t.x.add(*t.offs.add(kk) as usize + m0);
                let (w0, w1) = (_mm256_loadu_ps(a), _mm256_loadu_ps(a.add(8)));
                for (m, row) in acc.iter_mut().enumerate() {
                    let xb = _mm256_set1_ps(*x.add(m));
                    row[0] = _mm256_fmadd_ps(xb, w0, row[0]);
                    row[1] = _mm256_fmadd_ps(xb, w1, row[1]);
                }
                a = a.add(2 * MR);
            }
            for _ in 0..per.min(pf_left) {
                // A hint: the address need not be valid.
                _mm_prefetch::<_MM_HINT_T0>(pf as *const i8);
                pf = pf.wrapping_add(16);
                pf_left -= 1;
            }
        }
        if !t.last {
            for (m, row) in acc.iter().enumerate() {
                for (h, &y) in row.iter().enumerate() {
                    // SAFETY: the tile's accumulators.
                    unsafe { _mm256_storeu_ps(t.acc.add(32 * (m0 + m) + 16 * v + 8 * h), y) };
                }
            }
            return;
        }
        let (lo, hi) = (_mm256_set1_ps(t.lo), _mm256_set1_ps(t.hi));
        for (m, row) in acc.iter().enumerate() {
            let mut y = [0f32; 16];
            for (h, &v) in row.iter().enumerate() {
                let v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
                // SAFETY: `y` holds 16 floats.
                unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(8 * h), v) };
            }
            for (c, &y) in y.iter().enumerate() {
                // SAFETY: channel `co + 16 v + c` of pixel `m0 + m` (the caller's contract).
                unsafe { *t.out.add((16 * v + c) * t.c_rs + m0 + m) = y };
            }
        }
    }

    /// `M` pixels × `16 V` channels over one block of terms, as [`super::x86::tile`].
    ///
    /// # Safety
    /// AVX2 and FMA; otherwise [`super::x86::tile`]'s contract (without its bound on
    /// `t.c_rs`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile<const M: usize, const V: usize>(t: &PxTile) {
        for v in 0..V {
            let pf = v == 0;
            // SAFETY: the caller's contract, for pixels split in passes of at most 4.
            unsafe {
                match M {
                    1 => pass::<1>(t, v, 0, pf),
                    2 => pass::<2>(t, v, 0, pf),
                    3 => pass::<3>(t, v, 0, pf),
                    4 => pass::<4>(t, v, 0, pf),
                    5 => {
                        pass::<3>(t, v, 0, pf);
                        pass::<2>(t, v, 3, false);
                    }
                    6 => {
                        pass::<3>(t, v, 0, pf);
                        pass::<3>(t, v, 3, false);
                    }
                    7 => {
                        pass::<4>(t, v, 0, pf);
                        pass::<3>(t, v, 4, false);
                    }
                    _ => {
                        pass::<4>(t, v, 0, pf);
                        pass::<4>(t, v, 4, false);
                    }
                }
            }
        }
    }
}

type PxFn = unsafe fn(&PxTile);

/// `$tile::<M, V>` for `$m` pixels (1 to [`PX`]) and `$v` vectors of 16 channels (1 or 2).
#[cfg(target_arch = "x86_64")]
macro_rules! kernel_of {
    ($tile:path, $m:expr, $v:expr) => {{
        use $tile as tile;
        macro_rules! by_pixels {
            ($vv:literal) => {
                match $m {
                    1 => tile::<1, $vv> as PxFn,
                    2 => tile::<2, $vv>,
                    3 => tile::<3, $vv>,
                    4 => tile::<4, $vv>,
                    5 => tile::<5, $vv>,
                    6 => tile::<6, $vv>,
                    7 => tile::<7, $vv>,
                    _ => tile::<8, $vv>,
                }
            };
        }
        if $v > 1 { by_pixels!(2) } else { by_pixels!(1) }
    }};
}

/// The kernel for `m` pixels (1 to [`PX`]) and `v` vectors of channels (1 or 2), on the
/// packed products' instruction set.
#[cfg(target_arch = "x86_64")]
fn kernel(m: usize, v: usize) -> PxFn {
    match super::avx512() {
        true => kernel_of!(x86::tile, m, v),
        false => kernel_of!(x86_avx2::tile, m, v),
    }
}

/// Scratch elements of a task: each tile's accumulators between blocks of terms.
pub(super) fn scratch_len(s: &ConvShape) -> usize {
    s.oh * row_tiles(s.ow).0 * PX * 32
}

/// Units `range` of a convolution in pixel tiles: per (item, 32-channel group) and block
/// of [`CONV_KC`] terms, every tile of the item's output rows (the block's weights, 32 KiB,
/// stay in L1 while they pass over it), prefetching the next block's.
pub(super) fn task(
    s: &ConvShape,
    p: &ConvPlan,
    ops: &ConvOps<'_>,
    range: Range<usize>,
    accs: &mut [f32],
) {
    debug_assert_eq!(p.mode, Mode::Pixels);
    let groups32 = s.cout_g.div_ceil(32);
    let (per_row, width) = row_tiles(s.ow);
    let tiles = s.oh * per_row;
    // Unit `u`'s group weights (biases first), and the first row of its channels' block
    // starting at term `r0` (the block's pairs of panels are contiguous).
    let block = |u: usize, r0: usize| {
        let (g, co) = (u / groups32 % s.groups, u % groups32 * 32);
        let w = g * p.panels * MR * (p.kk + 1);
        (
            w,
            w + conv_weight_at(p.panels, p.kk, co, r0, ConvLayout::Pairs),
        )
    };
    for u in range.clone() {
        let (item, co) = (u / groups32, u % groups32 * 32);
        let (b, g) = (item / s.groups, item % s.groups);
        let v = (s.cout_g - co).min(32) / 16;
        let planes = ops.padded.as_ptr().wrapping_add(item * p.item_planes(s));
        let out = b * s.os[0] + (g * s.cout_g + co) * s.os[1];
        for r0 in (0..p.kk).step_by(CONV_KC) {
            let r1 = p.kk.min(r0 + CONV_KC);
            let (w, a) = block(u, r0);
            // The next block's weights: this unit's, or the next unit's first.
            let next = match (r1 < p.kk, u + 1 < range.end) {
                (true, _) => Some((block(u, r1).1, CONV_KC.min(p.kk - r1), v)),
                (false, true) => {
                    let nv = (s.cout_g - (u + 1) % groups32 * 32).min(32) / 16;
                    Some((block(u + 1, 0).1, CONV_KC.min(p.kk), nv))
                }
                _ => None,
            };
            let lines = next.map_or(0, |(_, rows, nv)| (rows * 2 * nv * MR).div_ceil(16));
            let per_tile = lines.div_ceil(tiles);
            for i in 0..tiles {
                let (y, x0) = (i / per_row, i % per_row * width);
                let m = width.min(s.ow - x0);
                let pf0 = (i * per_tile).min(lines);
                let tile = PxTile {
                    k: r1 - r0,
                    x: planes.wrapping_add(y * p.phase_w + x0),
                    offs: ops.offs.as_ptr().wrapping_add(r0),
                    a: ops.packed.as_ptr().wrapping_add(a),
                    ps: (r1 - r0) * 2 * MR,
                    bias: ops.packed.as_ptr().wrapping_add(w + co),
                    acc: accs.as_mut_ptr().wrapping_add(i * PX * 32),
                    first: r0 == 0,
                    last: r1 == p.kk,
                    out: ops.out.as_ptr().wrapping_add(out + y * s.ow + x0),
                    c_rs: s.os[1],
                    lo: ops.lo,
                    hi: ops.hi,
                    pf: next.map_or(std::ptr::null(), |(at, ..)| {
                        ops.packed.as_ptr().wrapping_add(at + pf0 * 16)
                    }),
                    pf_n: per_tile.min(lines - pf0),
                };
                // SAFETY: AVX-512F, or AVX2 and FMA, was detected (`conv2d`, `kernel`); the group's packed weights
                // have `p.panels` panels of `p.kk` terms (the length checked), channels
                // `co..co + 16 v` among them (`cost`: a multiple of 16), so the block's
                // rows of its `2 v` panels and their biases; the term offsets from pixel
                // `(y, x0 + m)` of the phase planes stay inside them (as for `Mode::Rows`
                // tiles); tile `i`'s accumulators are inside this task's scratch
                // (`scratch_len`); the output pixels `x0..x0 + m` of row `y`, channels
                // `co..co + 16 v`, are inside `out` (`fits`) and this unit's alone;
                // `cost` bounds `32 · c_rs` by `i32::MAX`.
                unsafe { kernel(m, v)(&tile) }
            }
        }
    }
}
