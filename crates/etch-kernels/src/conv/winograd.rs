//! 3×3 stride-1 `f32` convolutions on NHWC tensors by Winograd's minimal filtering,
//! F(2×2, 3×3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
//! each 2×2 block of output pixels (a tile) takes 16 multiply-adds per input and output
//! channel instead of the direct convolution's 36, 2.25× fewer.
//!
//! - At load, [`pack`] transforms each 3×3 filter `g` into `U = G g Gᵀ` (4×4, in `f64`,
//!   rounded once) and packs the 16 matrices `U[ξ]` (`c` × `co`) for the fully-connected
//!   kernels ([`gemm512::pack_fc`]).
//! - [`conv_f32`] takes the tiles a block at a time (a block's data stays in L2): each
//!   tile's 4×4 input window `d` becomes `V = Bᵀ d B` (16 vectors of `c` channels, zeros
//!   outside the input), then 16 products `M[ξ] = V[ξ] · U[ξ]`, then `Y = Aᵀ M A`, the bias
//!   and the clamp, written to the tile's output pixels that exist.
//!
//! The transforms are additions and subtractions only (`G`'s halves are exact), so the
//! results differ from a direct convolution's by rounding alone: the terms are summed in
//! another order. Each output element is computed by one task in one order, whatever the
//! thread count or block size, so the results do not depend on the number of threads.
//! AVX-512F or AVX2 with FMA, and channel counts that are multiples of 16; [`applies`]
//! says when.

use super::nhwc::NhwcShape;
use crate::gemm512::{self, Refused};
use crate::threads::{self, SharedMut};

/// Transformed positions of a tile (4 × 4).
const XI: usize = 16;
/// Vector lanes.
const L: usize = 16;
/// Bytes of a block's transformed inputs and products (`16 · tiles · (c + co)` floats),
/// kept under the 1 MB L2 of the cores this was tuned on with the weights streaming by.
const BLOCK_BYTES: usize = 512 << 10;
/// Floats between the end of one position's rows and the next position's in a block's
/// scratch (a cache line).
const SKEW: usize = 16;
/// Rows of a fully-connected tile: the largest blocks hold whole ones.
const MR: usize = gemm512::MR;

/// Whether [`conv_f32`] runs `s`: a 3×3, stride-1, undilated convolution (any padding),
/// channel counts that are multiples of 16, AVX-512F or AVX2 with FMA (the packed
/// products: [`gemm512::available`]; `ETCH_WINOGRAD=0` turns it off).
pub fn applies(s: &NhwcShape) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("ETCH_WINOGRAD").map_or(true, |v| v != "0"));
    on && gemm512::available()
        && s.kernel == [3, 3]
        && s.stride == [1, 1]
        && s.dil == [1, 1]
        && s.c.is_multiple_of(L)
        && s.co.is_multiple_of(L)
        && s.c >= 32
        && s.co >= 32
        && s.oh >= 2
        && s.ow >= 2
        && s.valid()
}

/// Elements of the packed weights of a `c` → `co` convolution.
pub fn packed_len(co: usize, c: usize) -> Option<usize> {
    gemm512::fc_packed_len(co, c)?
        .checked_mul(XI)?
        .checked_add(co)
}

/// `G`, the filter transform (4 × 3).
const G: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];

/// Packs a `c` → `co` 3×3 filter given as `w(j, r)` (output channel `j`, term `r` in
/// XNNPACK's order `(i, j', ci)`: `r = (i · 3 + j') · c + ci`) and its bias: the 16
/// transformed matrices, each by [`gemm512::pack_fc`] with a zero bias, then the bias.
pub fn pack(
    co: usize,
    c: usize,
    w: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    if bias.is_some_and(|b| b.len() != co) {
        return None;
    }
    let mut u = vec![0f32; XI * co * c];
    // Output channel `j`'s taps (9 rows of `c`), then `G g` (4 × 3 rows), in `f64`.
    let (mut g, mut gg) = (vec![0f64; 9 * c], vec![0f64; 12 * c]);
    for j in 0..co {
        for (r, v) in g.iter_mut().enumerate() {
            *v = w(j, r) as f64;
        }
        for (al, row) in gg.chunks_exact_mut(c).enumerate() {
            let (a, l) = (al / 3, al % 3);
            row.fill(0.0);
            for i in 0..3 {
                for (o, &x) in row.iter_mut().zip(&g[(i * 3 + l) * c..][..c]) {
                    *o += G[a][i] * x;
                }
            }
        }
        // (G g) Gᵀ.
        for xi in 0..XI {
            let (a, b) = (xi / 4, xi % 4);
            let dst = &mut u[(xi * co + j) * c..][..c];
            let rows = &gg[a * 3 * c..][..3 * c];
            let (r0, r12) = rows.split_at(c);
            let (r1, r2) = r12.split_at(c);
            for (((o, &x0), &x1), &x2) in dst.iter_mut().zip(r0).zip(r1).zip(r2) {
                *o = (x0 * G[b][0] + x1 * G[b][1] + x2 * G[b][2]) as f32;
            }
        }
    }
    let mut p = Vec::with_capacity(packed_len(co, c)?);
    for m in u.chunks_exact(co * c) {
        p.extend(gemm512::pack_fc(co, c, |j, ci| m[j * c + ci], None)?);
    }
    match bias {
        Some(b) => p.extend_from_slice(b),
        None => p.resize(p.len() + co, 0.0),
    }
    Some(p)
}

/// The tiles of [`conv_f32`]: `(rows, columns)` of 2×2 output blocks an item.
fn tiles(s: &NhwcShape) -> (usize, usize) {
    (s.oh.div_ceil(2), s.ow.div_ceil(2))
}

/// The convolution `s` (see [`applies`]) with the weights from [`pack`], then the clamp
/// `min(hi, max(lo, x))`. Split over the thread pool by blocks of tiles.
pub fn conv_f32(
    s: &NhwcShape,
    x: &[f32],
    packed: &[f32],
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    if !applies(s) {
        return Err("not a Winograd convolution");
    }
    if s.in_len() != Some(x.len())
        || s.out_len() != Some(out.len())
        || packed_len(s.co, s.c) != Some(packed.len())
    {
        return Err("convolution operand sizes");
    }
    let (ty, tx) = tiles(s);
    let count = s.n * ty * tx;
    if count == 0 {
        return Ok(());
    }
    let split = Split::new(s, count);
    let scratch = XI * (split.per * (s.c + s.co) + 2 * SKEW);
    let tasks = split.tasks.min(split.units());
    let mut buf = crate::scratch::take_dirty(tasks * scratch, 0f32);
    let bufs = SharedMut::new(&mut buf[..]);
    let dst = SharedMut::new(out);
    let job = Job {
        s,
        x,
        packed,
        dst: &dst,
        lo,
        hi,
    };
    threads::run_shares(split.units(), tasks, &|t, range| {
        // SAFETY: slice `t` is task `t`'s, which one thread runs at a time.
        let buf = unsafe { bufs.slice(t * scratch, scratch) };
        for unit in range {
            let (blk, part) = (unit / split.parts, unit % split.parts);
            let first = blk * split.per;
            let panels = threads::part(split.panels, split.parts, part);
            job.block(first..count.min(first + split.per), split.per, panels, buf);
        }
    });
    Ok(())
}

/// How [`conv_f32`] splits its work: blocks of `per` tiles (whose scratch stays in L2),
/// as many as the tasks or a multiple; where there are fewer blocks than tasks (small
/// planes), each block's output channels in `parts` ranges of panels too.
struct Split {
    tasks: usize,
    per: usize,
    blocks: usize,
    parts: usize,
    panels: usize,
}

impl Split {
    fn new(s: &NhwcShape, count: usize) -> Self {
        let tasks = threads::tasks_for(count * XI * s.c * s.co, 1 << 20);
        let max_per = (BLOCK_BYTES / (XI * (s.c + s.co) * 4)).max(MR) / MR * MR;
        let mut blocks = count.div_ceil(max_per);
        if count >= tasks * MR {
            blocks = blocks.next_multiple_of(tasks);
        }
        let per = count.div_ceil(blocks);
        let blocks = count.div_ceil(per);
        let panels = s.co.div_ceil(gemm512::NR);
        let parts = tasks.div_ceil(blocks).min(panels);
        Split {
            tasks,
            per,
            blocks,
            parts,
            panels,
        }
    }

    fn units(&self) -> usize {
        self.blocks * self.parts
    }
}

/// What every block of [`conv_f32`] reads.
struct Job<'a> {
    s: &'a NhwcShape,
    x: &'a [f32],
    packed: &'a [f32],
    dst: &'a SharedMut<'a, f32>,
    lo: f32,
    hi: f32,
}

impl Job<'_> {
    /// Tiles `range` (at most `per`), output channels of `panels` (of [`gemm512::NR`]),
    /// into scratch `buf`.
    fn block(
        &self,
        range: std::ops::Range<usize>,
        per: usize,
        panels: std::ops::Range<usize>,
        buf: &mut [f32],
    ) {
        let s = self.s;
        let (c, nt) = (s.c, range.len());
        let cols = panels.start * gemm512::NR..s.co.min(panels.end * gemm512::NR);
        let n = cols.len();
        // Positions `SKEW` floats apart beyond their rows: rows a multiple of 4 KiB long
        // would put a tile's 16 vectors in one set of the L1 cache.
        let (vs, ms) = (per * c + SKEW, per * n + SKEW);
        let (v, m) = buf.split_at_mut(XI * (per * c + SKEW));
        for (i, tile) in range.clone().enumerate() {
            input_tile(s, self.x, tile, v, i * c, vs);
        }
        let fc = gemm512::fc_packed_len(s.co, c).unwrap_or(0);
        let panel = gemm512::NR * (c + 1);
        for xi in 0..XI {
            let a = &v[xi * vs..][..nt * c];
            let o = &mut m[xi * ms..][..nt * n];
            let u = &self.packed[xi * fc + panels.start * panel..][..panels.len() * panel];
            // Sizes checked by `conv_f32`: this cannot fail.
            let _ = gemm512::fully_connected_serial(
                a,
                nt,
                c,
                u,
                n,
                o,
                f32::NEG_INFINITY,
                f32::INFINITY,
            );
        }
        let bias = &self.packed[XI * fc..];
        for (i, tile) in range.enumerate() {
            // SAFETY: the tile's output pixels' channels `cols` are this unit's alone.
            unsafe { output_tile(self, tile, &m[i * n..], (ms, cols.clone()), bias) };
        }
    }
}

/// Sixteen lanes of channels: one AVX-512 vector, or two AVX2 ones. The transforms are
/// written on this trait, inlined into each `#[target_feature]` wrapper below (its methods
/// are thin `#[inline(always)]` wrappers of intrinsics, safe to call only there).
trait Lanes: Copy {
    fn zero() -> Self;
    fn splat(v: f32) -> Self;
    /// 16 channels from `p` (a bounds-checked slice of at least 16).
    fn load(p: &[f32]) -> Self;
    /// Stores the 16 lanes at `p`.
    ///
    /// # Safety
    /// `p` writable for 16 floats.
    unsafe fn store(self, p: *mut f32);
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    /// `min(hi, max(lo, self))` as `maxps` then `minps` (NaN kept).
    fn clamp(self, lo: Self, hi: Self) -> Self;
}

#[cfg(target_arch = "x86_64")]
mod lanes {
    use super::{L, Lanes};
    use std::arch::x86_64::*;

    // SAFETY (every method below): called only from the `#[target_feature]` wrappers of
    // the instruction set (`transforms!`), into which they are inlined; loads read a
    // bounds-checked slice of at least 16 floats.
    impl Lanes for __m512 {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            unsafe { _mm512_set1_ps(v) }
        }
        #[inline(always)]
        fn load(p: &[f32]) -> Self {
            unsafe { _mm512_loadu_ps(p[..L].as_ptr()) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm512_storeu_ps(p, self) }
        }
        #[inline(always)]
        fn add(self, b: Self) -> Self {
            unsafe { _mm512_add_ps(self, b) }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { _mm512_sub_ps(self, b) }
        }
        #[inline(always)]
        fn clamp(self, lo: Self, hi: Self) -> Self {
            unsafe { _mm512_min_ps(hi, _mm512_max_ps(lo, self)) }
        }
    }

    /// Two AVX2 vectors.
    #[derive(Clone, Copy)]
    pub(super) struct Pair([__m256; 2]);

    impl Lanes for Pair {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Pair([_mm256_setzero_ps(); 2]) }
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            unsafe { Pair([_mm256_set1_ps(v); 2]) }
        }
        #[inline(always)]
        fn load(p: &[f32]) -> Self {
            let p = p[..L].as_ptr();
            unsafe { Pair([_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe {
                _mm256_storeu_ps(p, self.0[0]);
                _mm256_storeu_ps(p.add(8), self.0[1]);
            }
        }
        #[inline(always)]
        fn add(self, b: Self) -> Self {
            unsafe { Pair([0, 1].map(|k| _mm256_add_ps(self.0[k], b.0[k]))) }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { Pair([0, 1].map(|k| _mm256_sub_ps(self.0[k], b.0[k]))) }
        }
        #[inline(always)]
        fn clamp(self, lo: Self, hi: Self) -> Self {
            unsafe {
                Pair([0, 1].map(|k| _mm256_min_ps(hi.0[k], _mm256_max_ps(lo.0[k], self.0[k]))))
            }
        }
    }
}

/// Sixteen lanes in plain arrays (other targets).
impl Lanes for [f32; L] {
    fn zero() -> Self {
        [0.0; L]
    }
    fn splat(v: f32) -> Self {
        [v; L]
    }
    fn load(p: &[f32]) -> Self {
        std::array::from_fn(|l| p[l])
    }
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), p, L) }
    }
    fn add(self, b: Self) -> Self {
        std::array::from_fn(|l| self[l] + b[l])
    }
    fn sub(self, b: Self) -> Self {
        std::array::from_fn(|l| self[l] - b[l])
    }
    fn clamp(self, lo: Self, hi: Self) -> Self {
        std::array::from_fn(|l| {
            let y = if lo[l] > self[l] { lo[l] } else { self[l] };
            if hi[l] < y { hi[l] } else { y }
        })
    }
}

/// Writes tile `tile`'s transformed input `Bᵀ d B` to `v`: position `ξ`'s `c` channels
/// at `v[ξ · stride + at..]`; input pixels outside the input are zeros.
#[inline(always)]
fn input_tile_body<V: Lanes>(
    s: &NhwcShape,
    x: &[f32],
    tile: usize,
    v: &mut [f32],
    at: usize,
    stride: usize,
) {
    let (ty, tx) = tiles(s);
    let (b, t) = (tile / (ty * tx), tile % (ty * tx));
    let y0 = (2 * (t / tx)) as isize - s.pad[0] as isize;
    let x0 = (2 * (t % tx)) as isize - s.pad[1] as isize;
    // The window's pixels: their offsets in `x`, or none outside the input.
    let mut at_px = [None; 16];
    for (k, e) in at_px.iter_mut().enumerate() {
        let (y, xx) = (y0 + (k / 4) as isize, x0 + (k % 4) as isize);
        if (0..s.h as isize).contains(&y) && (0..s.w as isize).contains(&xx) {
            *e = Some(((b * s.h + y as usize) * s.w + xx as usize) * s.c);
        }
    }
    let v = &mut v[..XI * stride];
    for ch in (0..s.c).step_by(L) {
        let d: [V; 16] = std::array::from_fn(|k| match at_px[k] {
            Some(o) => V::load(&x[o + ch..]),
            None => V::zero(),
        });
        // Bᵀ d: rows.
        let mut r = [V::zero(); 16];
        for q in 0..4 {
            let (d0, d1, d2, d3) = (d[q], d[4 + q], d[8 + q], d[12 + q]);
            r[q] = d0.sub(d2);
            r[4 + q] = d1.add(d2);
            r[8 + q] = d2.sub(d1);
            r[12 + q] = d1.sub(d3);
        }
        // (Bᵀ d) B: columns.
        for a in 0..4 {
            let (t0, t1, t2, t3) = (r[4 * a], r[4 * a + 1], r[4 * a + 2], r[4 * a + 3]);
            let row = [t0.sub(t2), t1.add(t2), t2.sub(t1), t1.sub(t3)];
            for (bb, val) in row.into_iter().enumerate() {
                let dst = &mut v[(4 * a + bb) * stride + at + ch..][..L];
                // SAFETY: 16 floats of `v` (a bounds-checked slice).
                unsafe { val.store(dst.as_mut_ptr()) };
            }
        }
    }
}

/// Writes channels `cols` of tile `tile`'s output pixels: `Aᵀ M A` of the products `m`
/// (position `ξ`'s channels at `m[ξ · stride..]`, from `cols.start`), the bias, the clamp
/// `min(hi, max(lo, y))` (NaN kept).
#[inline(always)]
fn output_tile_body<V: Lanes>(
    job: &Job<'_>,
    tile: usize,
    m: &[f32],
    (stride, cols): (usize, std::ops::Range<usize>),
    bias: &[f32],
) {
    let s = job.s;
    let (ty, tx) = tiles(s);
    let (b, t) = (tile / (ty * tx), tile % (ty * tx));
    let (oy, ox) = (2 * (t / tx), 2 * (t % tx));
    let rows = 2.min(s.oh - oy);
    let ncols = 2.min(s.ow - ox);
    let (lo, hi) = (V::splat(job.lo), V::splat(job.hi));
    for ch in cols.clone().step_by(L) {
        let e: [V; 16] = std::array::from_fn(|k| V::load(&m[k * stride + ch - cols.start..]));
        // Aᵀ M: rows.
        let mut r = [V::zero(); 8];
        for q in 0..4 {
            let (m0, m1, m2, m3) = (e[q], e[4 + q], e[8 + q], e[12 + q]);
            r[q] = m0.add(m1).add(m2);
            r[4 + q] = m1.sub(m2).sub(m3);
        }
        let bv = V::load(&bias[ch..]);
        for i in 0..rows {
            let (t0, t1, t2, t3) = (r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
            let ys = [t0.add(t1).add(t2), t1.sub(t2).sub(t3)];
            for (j, y) in ys.into_iter().enumerate().take(ncols) {
                let at = ((b * s.oh + oy + i) * s.ow + ox + j) * s.co + ch;
                assert!(at + L <= job.dst.len());
                // SAFETY: in bounds (asserted); the pixel's channels are this unit's (the
                // caller's contract), written by no other task.
                unsafe { y.add(bv).clamp(lo, hi).store(job.dst.as_ptr().add(at)) };
            }
        }
    }
}

/// The transforms compiled for one instruction set: `$feat` enabled in `$input` and
/// `$output`, which inline the bodies above.
macro_rules! transforms {
    ($feat:literal, $v:ty, $input:ident, $output:ident) => {
        /// [`input_tile_body`].
        ///
        /// # Safety
        /// The CPU has the target features.
        #[target_feature(enable = $feat)]
        unsafe fn $input(
            s: &NhwcShape,
            x: &[f32],
            tile: usize,
            v: &mut [f32],
            at: usize,
            stride: usize,
        ) {
            input_tile_body::<$v>(s, x, tile, v, at, stride)
        }

        /// [`output_tile_body`].
        ///
        /// # Safety
        /// The CPU has the target features; no other task writes channels `cols` of the
        /// tile's pixels.
        #[target_feature(enable = $feat)]
        unsafe fn $output(
            job: &Job<'_>,
            tile: usize,
            m: &[f32],
            at: (usize, std::ops::Range<usize>),
            bias: &[f32],
        ) {
            output_tile_body::<$v>(job, tile, m, at, bias)
        }
    };
}

#[cfg(target_arch = "x86_64")]
transforms!(
    "avx512f",
    std::arch::x86_64::__m512,
    input_avx512,
    output_avx512
);
#[cfg(target_arch = "x86_64")]
transforms!("avx2,fma", lanes::Pair, input_avx2, output_avx2);

/// [`input_tile_body`] with this CPU's vectors.
fn input_tile(s: &NhwcShape, x: &[f32], tile: usize, v: &mut [f32], at: usize, stride: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if gemm512::avx512() {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { input_avx512(s, x, tile, v, at, stride) };
        }
        // SAFETY: `applies` admits AVX-512F or AVX2 with FMA (`gemm512::available`).
        unsafe { input_avx2(s, x, tile, v, at, stride) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    input_tile_body::<[f32; L]>(s, x, tile, v, at, stride)
}

/// [`output_tile_body`] with this CPU's vectors.
///
/// # Safety
/// No other task writes channels `at.1` of the tile's pixels.
unsafe fn output_tile(
    job: &Job<'_>,
    tile: usize,
    m: &[f32],
    at: (usize, std::ops::Range<usize>),
    bias: &[f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if gemm512::avx512() {
            // SAFETY: the CPU has AVX-512F; the pixels are the caller's.
            return unsafe { output_avx512(job, tile, m, at, bias) };
        }
        // SAFETY: AVX2 with FMA (`applies`); the pixels are the caller's.
        unsafe { output_avx2(job, tile, m, at, bias) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    output_tile_body::<[f32; L]>(job, tile, m, at, bias)
}

#[cfg(test)]
#[path = "winograd_tests.rs"]
mod tests;
