//! The loop of the panel kernels of [`super`] ([`super::Packing::Vnni`] and
//! [`super::Packing::Maddubs`]): chunks of rows whose block sums are computed first, then
//! groups of panels by tiles of rows, with the outputs and the next filters asked for ahead.

use super::{Fc, PANEL, Packing};
use etch_kernels::threads::SharedMut;
use std::arch::x86_64::*;

/// Row block sums kept at a time (at least the tile rows of [`super::MAX_VNNI_BLOCKS`]
/// blocks for each kernel).
const SUMS: usize = 2048;

/// Asks for the output lines of `rows` x `np` panels from column `col0` (rows of `n`
/// floats) in L1 for writing, while the tile before them runs: in a model the output is not
/// in the caches, and each tile's stores would otherwise wait for their lines. The Llama
/// `8da4w` decoder's fully-connected layers, one thread: 7.2-7.5 -> 6.0-6.4 ms a run.
/// (Prefetching the next panels' filters as well gained nothing.)
#[inline]
fn prefetch_out(
    o: &SharedMut<f32>,
    n: usize,
    rows: std::ops::Range<usize>,
    col0: usize,
    np: usize,
) {
    let base = o.as_ptr();
    for row in rows {
        let mut c = col0;
        while c < (col0 + np * PANEL).min(n) {
            // SAFETY: `row < m` and `c < n`, so the element is in `o` (`[m, n]`); a prefetch
            // reads and writes nothing the program sees.
            unsafe { _mm_prefetch::<_MM_HINT_ET0>(base.add(row * n + c).cast()) };
            c += PANEL;
        }
    }
}

/// Asks for part `t` of `parts` of the filter lines of panels `panels` in L1, spread over
/// the row tiles of the panels before them: in a model the filters come from L3 (the
/// decoders' 4-bit filters unpacked to int8 are 14 MB), and the first row tile of each
/// panel group otherwise waits on them.
#[inline]
fn prefetch_filters(w: &[i8], panels: std::ops::Range<usize>, k: usize, t: usize, parts: usize) {
    let lines = panels.len() * PANEL * k / 64;
    let per = lines.div_ceil(parts.max(1));
    let first = panels.start * PANEL * k / 64;
    for line in first + t * per..first + ((t + 1) * per).min(lines) {
        if line * 64 < w.len() {
            // SAFETY: the address is inside `w`; a prefetch reads and writes nothing the
            // program sees.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().add(line * 64).cast()) };
        }
    }
}

impl Fc<'_> {
    /// Columns of panels `panels` (see [`super::pack_panels`]) of every row, with the
    /// kernel of `self.packing`: by chunks of rows whose block sums (times minus the
    /// packing's offset) are computed first, on the stack, then by groups of panels in tiles
    /// of rows.
    ///
    /// # Safety
    /// The CPU has the features of `self.packing`'s kernel (AVX-512F, BW and VNNI, or AVX2
    /// and FMA); `self.w` is packed so; no other task writes the columns of `panels` in `o`.
    pub(super) unsafe fn panels(
        &self,
        m: usize,
        n: usize,
        panels: std::ops::Range<usize>,
        o: &SharedMut<f32>,
    ) {
        let vnni = matches!(self.packing, Packing::Vnni | Packing::Nibbles);
        let (rows, group) = if vnni {
            (super::vnni::ROWS, super::vnni::PANELS)
        } else {
            (super::avx2::ROWS, super::avx2::PANELS)
        };
        let blocks = self.blocks;
        let offset = self.packing.offset();
        // `-offset * sum(a)` of each block of the rows of a chunk, `sums[row * blocks + b]`.
        let mut sums = [0i32; SUMS];
        let chunk = (SUMS / blocks) / rows * rows;
        let bl = self.k / blocks;
        for r0 in (0..m).step_by(chunk) {
            let r1 = (r0 + chunk).min(m);
            for (s, a) in sums
                .iter_mut()
                .zip(self.q[r0 * self.k..r1 * self.k].chunks(bl))
            {
                // SAFETY: the CPU has AVX-512F and BW (VNNI) or AVX2 (the caller's).
                let sum = unsafe {
                    if vnni {
                        super::vnni::sum_i8(a)
                    } else {
                        super::avx2::sum_i8(a)
                    }
                };
                *s = sum.wrapping_mul(-offset);
            }
            let mut p = panels.start;
            while p < panels.end {
                let np = (panels.end - p).min(group);
                let next = p + np..(p + np + group).min(panels.end);
                let tiles = (r1 - r0).div_ceil(rows);
                let mut row = r0;
                while row < r1 {
                    let r = (r1 - row).min(rows);
                    prefetch_out(o, n, row + r..(row + 2 * r).min(m), p * PANEL, np);
                    prefetch_filters(self.w, next.clone(), self.k, (row - r0) / rows, tiles);
                    let sums = &sums[(row - r0) * blocks..(row - r0 + r) * blocks];
                    // SAFETY: the features are the caller's; these panels are this task's.
                    unsafe {
                        if vnni {
                            self.tile_rows_vnni(r, row, p, np, n, o, sums)
                        } else {
                            self.tile_rows_avx2(r, row, p, np, n, o, sums)
                        }
                    }
                    row += r;
                }
                p += np;
            }
        }
    }
}
