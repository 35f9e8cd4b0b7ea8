//! Kernels of XNNPACK's dynamically quantized operators (`qd8`), with XNNPACK's arithmetic:
//!
//! - [`quantize_rows`] (`XNNConvert` fp32 -> qdint8): per row, `rmin = min(0, min(row))`,
//!   `rmax = max(0, max(row))`, `scale = 255 / (rmax - rmin)` (1 when they are equal), the
//!   zero point from whichever end has the smaller error, clamped to `[-128, 127]` and
//!   rounded half to even (`xnn_qd8_asymmetric_quantization_params`); each element
//!   `round_half_even(clamp(x * scale, -128 - zp, 127 - zp)) + zp`.
//! - [`fully_connected`] (`XNNFullyConnected` of a qdint8 input): int8 products summed in
//!   i32, then, with `inv = 1 / scale` of the row,
//!   - per-channel filters (qcint8, qcint4): `fma((acc - zp * wsum[n]) * inv, s[n], bias[n])`;
//!   - per-block filters (qbint4): `out = ksum[n] * zp`, `out = fma(acc_b, s[n, b], out)` per
//!     block, then `out * inv + bias[n]`, where `ksum[n]` is `-sum(wsum_c * s[n, b])` over
//!     chunks of 16 input channels (as XNNPACK packs it, in f32).
//!
//! Each output element is computed the same way whatever the thread count.

use etch_core::{Error, KernelContext, Result, ScalarType};
use etch_kernels::threads::{SharedMut, run_parts, tasks_for};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod panels;
#[cfg(target_arch = "x86_64")]
pub(crate) mod vnni;

/// Work (multiply-adds) below which a call stays on the calling thread.
const MIN_TASK_WORK: usize = 1 << 16;
/// Elements below which a quantization stays on the calling thread.
const MIN_QUANTIZE_WORK: usize = 1 << 14;

/// Zero point and `1 / scale` of a row with extrema `min` and `max`, and its scale.
fn row_params(min: f32, max: f32) -> (i32, f32, f32) {
    let (qmin, qmax) = (-128.0f32, 127.0f32);
    let rmin = min.min(0.0);
    let rmax = max.max(0.0);
    let scale = if rmin == rmax {
        1.0
    } else {
        (qmax - qmin) / (rmax - rmin)
    };
    let (dmin, dmax) = (rmin * scale, rmax * scale);
    let zp = if (qmin + dmin) + (qmax + dmax) > 0.0 {
        qmin - dmin
    } else {
        qmax - dmax
    };
    let zp = zp.max(qmin).min(qmax).round_ties_even() as i32;
    (zp, 1.0 / scale, scale)
}

/// `quantize_rows(x, q, params)`: quantizes each row of `x` (f32, rows of `params`) into
/// `q` (int8, same element count) and writes `params[r] = [zero point, 1 / scale]`.
pub fn quantize_rows(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let mut q = ctx.tensor(1)?;
    let mut p = ctx.tensor(2)?;
    let rows = p.sizes().first().copied().unwrap_or(0);
    let (x, q, p) = (x.data::<f32>()?, q.data_mut::<i8>()?, p.data_mut::<f32>()?);
    if rows == 0 || x.len() != q.len() || !x.len().is_multiple_of(rows) || p.len() != rows * 2 {
        return Err(Error::internal("qd8 quantize: operand sizes"));
    }
    let k = x.len() / rows;
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    let (qs, ps) = (SharedMut::new(q), SharedMut::new(p));
    run_parts(rows, tasks_for(x.len(), MIN_QUANTIZE_WORK), &|range| {
        for r in range {
            let x = &x[r * k..(r + 1) * k];
            // SAFETY: each row's outputs are written by the one task whose range has it.
            let (q, p) = unsafe { (qs.slice(r * k, k), ps.slice(2 * r, 2)) };
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                // SAFETY: the CPU has AVX-512F; x and q rows have one length.
                (p[0], p[1]) = unsafe { vnni::quantize_row(x, q) };
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2; x and q rows have one length.
                (p[0], p[1]) = unsafe { quantize_row_avx2(x, q) };
                continue;
            }
            (p[0], p[1]) = quantize_row(x, q);
        }
    });
    Ok(())
}

/// Quantizes row `x` into `q` (same length); returns its `(zero point, 1 / scale)`.
fn quantize_row(x: &[f32], q: &mut [i8]) -> (f32, f32) {
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let (zp, inv, scale) = row_params(min, max);
    let (lo, hi) = (-128.0 - zp as f32, 127.0 - zp as f32);
    for (q, &v) in q.iter_mut().zip(x) {
        *q = ((v * scale).max(lo).min(hi).round_ties_even() as i32 + zp) as i8;
    }
    (zp as f32, inv)
}

/// [`quantize_row`] with AVX2, 8 elements at a time (the rest as there): the same min/max
/// (a NaN keeps the running value, as `f32::min`/`f32::max` do; the order of a min/max does
/// not change it), the same parameters, and per element the same product, clamp (NaN goes
/// to the low end, as `f32::max` does) and rounding half to even, as the AVX-512F
/// [`vnni::quantize_row`]. (Without it, the scalar rounding is a libm call an element: 31.6
/// of a 128-token llama 8da4w run's 217 ms on a Zen 1 host.)
///
/// # Safety
/// The CPU has AVX2; `q.len() == x.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let n = x.len().min(q.len()) / 8 * 8;
    let (mut vmin, mut vmax) = (
        _mm256_set1_ps(f32::INFINITY),
        _mm256_set1_ps(f32::NEG_INFINITY),
    );
    for c in x[..n].chunks_exact(8) {
        // SAFETY: eight elements.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        // `vminps` returns its second operand when either is NaN.
        vmin = _mm256_min_ps(v, vmin);
        vmax = _mm256_max_ps(v, vmax);
    }
    let (mut lanes_min, mut lanes_max) = ([0f32; 8], [0f32; 8]);
    // SAFETY: eight floats each.
    unsafe {
        _mm256_storeu_ps(lanes_min.as_mut_ptr(), vmin);
        _mm256_storeu_ps(lanes_max.as_mut_ptr(), vmax);
    }
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for (&a, &b) in lanes_min
        .iter()
        .zip(&lanes_max)
        .chain(x[n..].iter().zip(&x[n..]))
    {
        min = min.min(a);
        max = max.max(b);
    }
    let (zp, inv, scale) = row_params(min, max);
    let (lo, hi) = (-128.0 - zp as f32, 127.0 - zp as f32);
    let (vlo, vhi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    let (vs, vz) = (_mm256_set1_ps(scale), _mm256_set1_epi32(zp));
    // The low byte of each 32-bit lane, gathered into the first 8 bytes.
    let bytes = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1,
    );
    for (c, d) in x[..n].chunks_exact(8).zip(q[..n].chunks_exact_mut(8)) {
        // SAFETY: eight elements.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        // max(NaN, lo) is lo, as `f32::max`.
        let y = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, vs), vlo), vhi);
        let y = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
        // Every value is in [-128, 127]: its low byte is the int8.
        let y = _mm256_shuffle_epi8(_mm256_add_epi32(_mm256_cvtps_epi32(y), vz), bytes);
        let (l, h) = (_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y));
        let pair = _mm_unpacklo_epi32(l, h);
        // SAFETY: eight bytes.
        unsafe { _mm_storel_epi64(d.as_mut_ptr().cast(), pair) };
    }
    for (d, &v) in q[n..].iter_mut().zip(&x[n..]) {
        *d = ((v * scale).max(lo).min(hi).round_ties_even() as i32 + zp) as i8;
    }
    (zp as f32, inv)
}

/// Sum of the products of two int8 vectors.
#[inline]
fn dot(a: &[i8], w: &[i8]) -> i32 {
    a.iter().zip(w).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// The operands of [`fully_connected`], as slices.
#[derive(Clone, Copy)]
struct Fc<'a> {
    q: &'a [i8],
    params: &'a [f32],
    w: &'a [i8],
    /// `[n, blocks]`, or with packed filters `[panels, blocks, PANEL]` ([`pack_scales`]).
    scales: &'a [f32],
    /// Per-channel: `wsum[n]` (sum of the filter row); per-block: `ksum[n]` (see module).
    wsum: &'a [i32],
    ksum: &'a [f32],
    bias: Option<&'a [f32]>,
    k: usize,
    blocks: usize,
    /// `w` is `[n, k]`, or packed in panels for one of the panel kernels ([`pack_panels`]).
    packing: Packing,
}

/// How the filters of a [`fully_connected`] layer are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// `[n, k]`, as in the program.
    Rows,
    /// Panels ([`pack_panels`]) with 128 added to every weight, for the AVX-512 VNNI kernel
    /// (`vpdpbusd` takes them unsigned).
    Vnni,
    /// Panels with 8 added to every (4-bit, `[-8, 7]`) weight, for the AVX2 kernel
    /// (`vpmaddubsw` takes them unsigned; the pair sums stay far from i16's bounds).
    Maddubs,
    /// [`Packing::Vnni`]'s panels for 4-bit weights, two to a byte with 8 added: byte
    /// `c * 4 + b` of 8-channel step `s` holds column `c`'s input channel `8 s + b` in its
    /// low nibble and `8 s + 4 + b` in its high one. The AVX-512 VNNI kernel unpacks them
    /// in registers (an and, a shift): half the bytes to bring through the caches.
    Nibbles,
}

impl Packing {
    /// What is added to each weight in the panels.
    fn offset(self) -> i32 {
        match self {
            Packing::Rows => 0,
            Packing::Vnni => 128,
            Packing::Maddubs | Packing::Nibbles => 8,
        }
    }

    /// Bytes of the packed filters of `n` columns by `k` input channels.
    fn bytes(self, n: usize, k: usize) -> usize {
        match self {
            Packing::Rows => n * k,
            Packing::Nibbles => n.div_ceil(PANEL) * PANEL * k / 2,
            Packing::Vnni | Packing::Maddubs => n.div_ceil(PANEL) * PANEL * k,
        }
    }
}

/// Columns of a panel of VNNI-packed filters.
pub(crate) const PANEL: usize = 16;
/// The most blocks per row of the fully-connected layers given VNNI-packed filters.
const MAX_VNNI_BLOCKS: usize = 256;

/// How the filters of a fully-connected layer with `k` input channels in blocks of `block`
/// are laid out: [`Packing::Vnni`] where [`use_vnni`] says so ([`Packing::Nibbles`] for
/// 4-bit filters in blocks of multiples of 8, unless `ETCH_QD8_NIBBLES` is `0`), else
/// [`Packing::Maddubs`] for 4-bit filters (`int4`) where [`use_maddubs`] says so, else
/// [`Packing::Rows`].
pub fn packing_for(k: usize, block: usize, int4: bool) -> Packing {
    let nibbles = int4
        && block.is_multiple_of(8)
        && std::env::var("ETCH_QD8_NIBBLES").map_or(true, |v| v != "0");
    if use_vnni(k, block) && nibbles {
        Packing::Nibbles
    } else if use_vnni(k, block) {
        Packing::Vnni
    } else if int4 && use_maddubs(k, block) {
        Packing::Maddubs
    } else {
        Packing::Rows
    }
}

/// Whether the fully-connected layers with `k` input channels in blocks of `block` take
/// [`Packing::Maddubs`] panels (4-bit filters only): where the CPU has AVX2 and FMA, the
/// shape fits ([`panels_fit`]), and `ETCH_QD8_MADDUBS` is not `0`.
pub fn use_maddubs(k: usize, block: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        panels_fit(k, block, "ETCH_QD8_MADDUBS") && avx2_detected()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, block);
        false
    }
}

/// Whether the fully-connected layers with `k` input channels in blocks of `block` take
/// [`Packing::Vnni`] panels ([`pack_panels`]): where the CPU has AVX-512F, BW and VNNI, the
/// shape fits ([`panels_fit`]), and `ETCH_QD8_VNNI` is not `0`.
pub fn use_vnni(k: usize, block: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        panels_fit(k, block, "ETCH_QD8_VNNI") && vnni_detected()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, block);
        false
    }
}

/// Whether a panel kernel takes `k` input channels in blocks of `block`: both multiples of
/// 4, at most [`MAX_VNNI_BLOCKS`] blocks, and the environment variable `off` is not `0`.
#[cfg(target_arch = "x86_64")]
fn panels_fit(k: usize, block: usize, off: &str) -> bool {
    k.is_multiple_of(4)
        && block.is_multiple_of(4)
        && k / block <= MAX_VNNI_BLOCKS
        && std::env::var(off).map_or(true, |v| v != "0")
}

#[cfg(target_arch = "x86_64")]
fn avx2_detected() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
fn vnni_detected() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Filters `w` (`[n, k]`, `k` a multiple of 4) packed for a panel kernel: panels of
/// [`PANEL`] columns (the last one padded with zero weights), each `[k / 4, PANEL, 4]`, with
/// `packing`'s offset added to every weight (the kernels take them unsigned).
pub fn pack_panels(w: &[i8], n: usize, k: usize, packing: Packing) -> Vec<u8> {
    let offset = packing.offset();
    if packing == Packing::Nibbles {
        // Padding columns: zero weights (8) in both nibbles.
        let mut out = vec![0x88u8; packing.bytes(n, k)];
        for (col, row) in w.chunks(k).take(n).enumerate() {
            let panel = &mut out[col / PANEL * PANEL * k / 2..][..PANEL * k / 2];
            for (i, &x) in row.iter().enumerate() {
                let (at, shift) = nibble_at(col, i);
                let v = ((x as i32 + offset) as u8 & 0xf) << shift;
                panel[at] = panel[at] & !(0xf << shift) | v;
            }
        }
        return out;
    }
    let mut out = vec![offset as u8; packing.bytes(n, k)];
    for (col, row) in w.chunks(k).take(n).enumerate() {
        let panel = &mut out[col / PANEL * PANEL * k..][..PANEL * k];
        for (i, &x) in row.iter().enumerate() {
            panel[i / 4 * PANEL * 4 + col % PANEL * 4 + i % 4] = (x as i32 + offset) as u8;
        }
    }
    out
}

/// Where [`Packing::Nibbles`] puts input channel `i` of column `col` in its panel: the byte
/// and the nibble's shift.
#[inline]
fn nibble_at(col: usize, i: usize) -> (usize, u32) {
    (
        i / 8 * PANEL * 4 + col % PANEL * 4 + i % 4,
        if i % 8 >= 4 { 4 } else { 0 },
    )
}

/// Scales `s` (`[n, blocks]`) laid out as the VNNI kernel reads them: per panel of
/// [`PANEL`] columns, `[blocks, PANEL]` (the last panel padded with zeros), so that a block's
/// scales of a panel are one vector load.
pub fn pack_scales(s: &[f32], n: usize, blocks: usize) -> Vec<f32> {
    let mut out = vec![0.0; n.div_ceil(PANEL) * PANEL * blocks];
    for (col, row) in s.chunks(blocks).take(n).enumerate() {
        for (b, &v) in row.iter().enumerate() {
            out[packed_scale_at(col, b, blocks)] = v;
        }
    }
    out
}

/// Where [`pack_scales`] puts the scale of column `col` in block `b`.
#[inline]
fn packed_scale_at(col: usize, b: usize, blocks: usize) -> usize {
    (col / PANEL * blocks + b) * PANEL + col % PANEL
}

impl Fc<'_> {
    /// The scale of column `col` in block `b`.
    #[inline]
    fn scale(&self, col: usize, b: usize) -> f32 {
        if self.packing != Packing::Rows {
            self.scales[packed_scale_at(col, b, self.blocks)]
        } else {
            self.scales[col * self.blocks + b]
        }
    }

    /// `sum(q[row, i] * w[col, i])` over `i` in `range`.
    fn dot_at(&self, row: usize, col: usize, range: std::ops::Range<usize>) -> i32 {
        let k = self.k;
        let a = &self.q[row * k..(row + 1) * k][range.clone()];
        if self.packing == Packing::Rows {
            return dot(a, &self.w[col * k..(col + 1) * k][range]);
        }
        let offset = self.packing.offset();
        if self.packing == Packing::Nibbles {
            let panel = &self.w[col / PANEL * PANEL * k / 2..][..PANEL * k / 2];
            return a
                .iter()
                .zip(range)
                .map(|(&x, i)| {
                    let (at, shift) = nibble_at(col, i);
                    let w = (panel[at] as u8 >> shift & 0xf) as i32 - offset;
                    x as i32 * w
                })
                .sum();
        }
        let panel = &self.w[col / PANEL * PANEL * k..][..PANEL * k];
        a.iter()
            .zip(range)
            .map(|(&x, i)| {
                let w = panel[i / 4 * PANEL * 4 + col % PANEL * 4 + i % 4] as u8 as i32 - offset;
                x as i32 * w
            })
            .sum()
    }

    /// Output `[row, col]`.
    #[inline]
    fn element(&self, row: usize, col: usize) -> f32 {
        let k = self.k;
        let (zp, inv) = (self.params[2 * row], self.params[2 * row + 1]);
        let bias = self.bias.map_or(0.0, |b| b[col]);
        if self.ksum.is_empty() {
            let acc = self
                .dot_at(row, col, 0..k)
                .wrapping_sub((zp as i32).wrapping_mul(self.wsum[col]));
            return (acc as f32 * inv).mul_add(self.scale(col, 0), bias);
        }
        let bl = k / self.blocks;
        let mut out = self.ksum[col] * zp;
        for b in 0..self.blocks {
            let s = self.scale(col, b);
            out = (self.dot_at(row, col, b * bl..(b + 1) * bl) as f32).mul_add(s, out);
        }
        out * inv + bias
    }
}

/// `fully_connected(q, params, w, scales, sums, bias?, out)`: `q` int8 `[m, k]` with its
/// row parameters `params` `[m, 2]` (from [`quantize_rows`]), `w` int8 `[n, k]` (or
/// [`Packing::Vnni`] panels `[panels, k / 4, 4 * PANEL]`), `scales` f32 `[n, blocks]` (with
/// panels: [`pack_scales`]), `sums` i32 `[n]` (per-channel) or f32 `[n]` (per-block,
/// `blocks > 0`), `bias` f32 `[n]`, `out` f32 `[m, n]`.
pub fn fully_connected(ctx: &mut KernelContext<'_>) -> Result<()> {
    fully_connected_with(ctx, Packing::Vnni)
}

/// [`fully_connected`] whose 3-d filters are [`Packing::Nibbles`] panels (`[panels, k / 8,
/// 4 * PANEL]`).
pub fn fully_connected_nibbles(ctx: &mut KernelContext<'_>) -> Result<()> {
    fully_connected_with(ctx, Packing::Nibbles)
}

/// [`fully_connected`] whose 3-d filters are [`Packing::Maddubs`] panels.
pub fn fully_connected_maddubs(ctx: &mut KernelContext<'_>) -> Result<()> {
    fully_connected_with(ctx, Packing::Maddubs)
}

/// [`fully_connected`], 3-d filters being `panels` panels.
fn fully_connected_with(ctx: &mut KernelContext<'_>, panels: Packing) -> Result<()> {
    let (q, params, w, scales, sums) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
        ctx.tensor(4)?,
    );
    let bias = ctx.opt_tensor(5)?;
    let mut out = ctx.tensor(6)?;
    // Packed filters are `[panels, k / 4, 4 * PANEL]` (see `pack_panels`).
    let packing = if w.dim() == 3 { panels } else { Packing::Rows };
    let packed = packing != Packing::Rows;
    let (m, n) = (params.sizes()[0], out.sizes()[1]);
    let k = match packing {
        Packing::Rows => w.sizes()[1],
        Packing::Nibbles => w.sizes()[1] * 8,
        Packing::Vnni | Packing::Maddubs => w.sizes()[1] * 4,
    };
    let blockwise = sums.dtype() == ScalarType::Float;
    let fc = Fc {
        q: q.data()?,
        params: params.data()?,
        w: w.data()?,
        scales: scales.data()?,
        wsum: if blockwise { &[] } else { sums.data()? },
        ksum: if blockwise { sums.data()? } else { &[] },
        bias: bias.as_ref().map(|b| b.data()).transpose()?,
        k,
        blocks: scales.sizes()[1],
        packing,
    };
    let o = out.data_mut::<f32>()?;
    let sizes_ok = fc.q.len() == m * fc.k
        && fc.w.len() == packing.bytes(n, fc.k)
        && (!packed || w.sizes()[0] == n.div_ceil(PANEL))
        // The panel kernels' bounds (`use_vnni`, `use_maddubs`, which chose the packing at
        // load; nibbles in steps of 8 input channels).
        && (!packed
            || (fc.blocks <= MAX_VNNI_BLOCKS && (fc.k / fc.blocks.max(1)).is_multiple_of(4)))
        && (packing != Packing::Nibbles || (fc.k / fc.blocks.max(1)).is_multiple_of(8))
        && fc.scales.len() == if packed { n.div_ceil(PANEL) * PANEL } else { n } * fc.blocks
        && fc.blocks > 0
        && fc.k.is_multiple_of(fc.blocks)
        && fc.wsum.len().max(fc.ksum.len()) == n
        && fc.bias.is_none_or(|b| b.len() == n)
        && o.len() == m * n;
    if !sizes_ok {
        return Err(Error::internal("qd8 fully connected: operand sizes"));
    }
    fc.run(m, n, o);
    Ok(())
}

impl Fc<'_> {
    /// All of `out` (`[m, n]`), split over the thread pool by output columns.
    fn run(&self, m: usize, n: usize, out: &mut [f32]) {
        let o = SharedMut::new(out);
        #[cfg(target_arch = "x86_64")]
        if matches!(self.packing, Packing::Vnni | Packing::Nibbles) && vnni_detected()
            || self.packing == Packing::Maddubs && avx2_detected()
        {
            let tasks = tasks_for(m * n * self.k, MIN_TASK_WORK);
            run_parts(n.div_ceil(PANEL), tasks, &|panels| {
                // SAFETY: the CPU has the packing's features (checked above); `w` is packed
                // so; each task writes the columns of its own panels.
                unsafe { self.panels(m, n, panels, &o) }
            });
            return;
        }
        run_parts(n, tasks_for(m * n * self.k, MIN_TASK_WORK), &|cols| {
            #[cfg(target_arch = "x86_64")]
            if self.packing == Packing::Rows && avx2_detected() {
                // SAFETY: the CPU has AVX2 and FMA; each task writes its own columns.
                return unsafe { self.tiles_avx2(m, n, cols, &o) };
            }
            for row in 0..m {
                // SAFETY: each task writes its own columns of every row.
                let o = unsafe { o.slice(row * n + cols.start, cols.len()) };
                for (o, col) in o.iter_mut().zip(cols.clone()) {
                    *o = self.element(row, col);
                }
            }
        });
    }

    /// Columns `cols` of every row, in tiles of up to [`TILE_ROWS`] rows by [`TILE_COLS`]
    /// columns whose int8 dot products are computed together with AVX2. Each element's
    /// float arithmetic is [`Fc::element`]'s, in its order (the integer sums are exact).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; no other task writes columns `cols` of `o`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tiles_avx2(
        &self,
        m: usize,
        n: usize,
        cols: std::ops::Range<usize>,
        o: &SharedMut<f32>,
    ) {
        let mut row = 0;
        while row < m {
            let rows = TILE_ROWS.min(m - row);
            let mut col = cols.start;
            while col < cols.end {
                let c = TILE_COLS.min(cols.end - col);
                // SAFETY: AVX2 and FMA are enabled here.
                let tile = unsafe {
                    match (rows, c) {
                        (TILE_ROWS, TILE_COLS) => self.tile::<TILE_ROWS, TILE_COLS>(row, col),
                        _ => {
                            // Edges: one element at a time.
                            let mut t = [[0.0; TILE_COLS]; TILE_ROWS];
                            for (r, tr) in t.iter_mut().enumerate().take(rows) {
                                for (ci, v) in tr.iter_mut().enumerate().take(c) {
                                    *v = self.tile::<1, 1>(row + r, col + ci)[0][0];
                                }
                            }
                            t
                        }
                    }
                };
                for (r, tr) in tile.iter().enumerate().take(rows) {
                    // SAFETY: columns `col..col + c` are this task's.
                    let dst = unsafe { o.slice((row + r) * n + col, c) };
                    dst.copy_from_slice(&tr[..c]);
                }
                col += c;
            }
            row += rows;
        }
    }

    /// Outputs `[row + r, col + c]` for `r < R`, `c < C` (see [`Fc::tiles_avx2`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const C: usize>(
        &self,
        row: usize,
        col: usize,
    ) -> [[f32; TILE_COLS]; TILE_ROWS] {
        let k = self.k;
        let a: [&[i8]; R] = std::array::from_fn(|r| &self.q[(row + r) * k..(row + r + 1) * k]);
        let w: [&[i8]; C] = std::array::from_fn(|c| &self.w[(col + c) * k..(col + c + 1) * k]);
        let mut out = [[0.0f32; TILE_COLS]; TILE_ROWS];
        if self.ksum.is_empty() {
            let d = dots_avx2::<R, C>(&a, &w, 0..k);
            for r in 0..R {
                let (zp, inv) = (self.params[2 * (row + r)], self.params[2 * (row + r) + 1]);
                for c in 0..C {
                    let bias = self.bias.map_or(0.0, |b| b[col + c]);
                    let acc = d[r][c].wrapping_sub((zp as i32).wrapping_mul(self.wsum[col + c]));
                    out[r][c] = (acc as f32 * inv).mul_add(self.scales[col + c], bias);
                }
            }
            return out;
        }
        let bl = k / self.blocks;
        for (r, o) in out.iter_mut().enumerate().take(R) {
            for (c, o) in o.iter_mut().enumerate().take(C) {
                *o = self.ksum[col + c] * self.params[2 * (row + r)];
            }
        }
        for b in 0..self.blocks {
            let d = dots_avx2::<R, C>(&a, &w, b * bl..(b + 1) * bl);
            for r in 0..R {
                for c in 0..C {
                    out[r][c] = (d[r][c] as f32)
                        .mul_add(self.scales[(col + c) * self.blocks + b], out[r][c]);
                }
            }
        }
        for (r, o) in out.iter_mut().enumerate().take(R) {
            let inv = self.params[2 * (row + r) + 1];
            for (c, o) in o.iter_mut().enumerate().take(C) {
                *o = *o * inv + self.bias.map_or(0.0, |b| b[col + c]);
            }
        }
        out
    }
}

/// Rows of a [`Fc::tiles_avx2`] tile.
const TILE_ROWS: usize = 4;
/// Columns of a [`Fc::tiles_avx2`] tile (3: 12 accumulators, 3 filter and 1 activation
/// vector, all of AVX2's 16 registers; 3-4 % faster than 2 in `qd8_speed` on Zen 1).
const TILE_COLS: usize = 3;

/// `d[r][c] = sum(a[r][i] * w[c][i])` over `i` in `range`, int8 products in i32: 16
/// elements at a time widened to i16 and multiplied-and-added in pairs (`vpmaddwd`), the
/// rest one by one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dots_avx2<const R: usize, const C: usize>(
    a: &[&[i8]; R],
    w: &[&[i8]; C],
    range: std::ops::Range<usize>,
) -> [[i32; C]; R] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_si256(); C]; R];
    let mut i = range.start;
    while i + 16 <= range.end {
        // SAFETY: `i + 16 <= range.end <= len` for every operand row.
        let wv: [__m256i; C] = std::array::from_fn(|c| unsafe {
            _mm256_cvtepi8_epi16(_mm_loadu_si128(w[c][i..i + 16].as_ptr().cast()))
        });
        for r in 0..R {
            // SAFETY: as above.
            let av =
                unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(a[r][i..i + 16].as_ptr().cast())) };
            for c in 0..C {
                acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(av, wv[c]));
            }
        }
        i += 16;
    }
    let mut d = [[0i32; C]; R];
    for r in 0..R {
        for c in 0..C {
            let v = acc[r][c];
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            d[r][c] =
                _mm_cvtsi128_si32(s).wrapping_add(dot(&a[r][i..range.end], &w[c][i..range.end]));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::{Fc, Packing, pack_panels, pack_scales, quantize_row, row_params};

    /// Deterministic pseudo-random values in `[lo, hi)`.
    fn values(n: usize, seed: u32, lo: i32, hi: i32) -> Vec<i32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                lo + (s >> 8) as i32 % (hi - lo)
            })
            .collect()
    }

    /// Operands with `[n, k]` filters: per channel (`wsum`) or per block (`ksum`).
    fn unpacked<'a>(
        q: &'a [i8],
        params: &'a [f32],
        w: &'a [i8],
        scales: &'a [f32],
        (wsum, ksum): (&'a [i32], &'a [f32]),
        bias: Option<&'a [f32]>,
        k: usize,
    ) -> Fc<'a> {
        Fc {
            q,
            params,
            w,
            scales,
            wsum,
            ksum,
            bias,
            k,
            blocks: scales.len() / (w.len() / k),
            packing: Packing::Rows,
        }
    }

    /// [`values`] as int8.
    fn int8s(n: usize, seed: u32, lo: i32, hi: i32) -> Vec<i8> {
        values(n, seed, lo, hi).iter().map(|&v| v as i8).collect()
    }

    /// [`values`] times `scale`.
    fn floats(n: usize, seed: u32, lo: i32, hi: i32, scale: f32) -> Vec<f32> {
        values(n, seed, lo, hi)
            .iter()
            .map(|&v| v as f32 * scale)
            .collect()
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let (m, n, k, blocks) = (3, 300, 256, 8);
        let q: Vec<i8> = int8s(m * k, 1, -128, 128);
        let w: Vec<i8> = int8s(n * k, 2, -8, 8);
        let scales: Vec<f32> = floats(n * blocks, 3, 1, 100, 1e-3);
        let ksum: Vec<f32> = floats(n, 4, -500, 500, 0.01);
        let bias: Vec<f32> = floats(n, 5, -50, 50, 0.1);
        let params = [-3.0, 0.02, 17.0, 0.5, 0.0, 1.0];
        let fc = unpacked(&q, &params, &w, &scales, (&[], &ksum), Some(&bias), k);
        let run = |threads| {
            etch_kernels::threads::set_num_threads(threads);
            let mut out = vec![0.0f32; m * n];
            fc.run(m, n, &mut out);
            out
        };
        let one = run(1);
        for threads in [2, 3, 4] {
            assert_eq!(one, run(threads), "{threads} threads");
        }
        etch_kernels::threads::set_num_threads(0);
        // Element [0, 0] by the formula.
        let dot = |r: std::ops::Range<usize>| -> i32 { r.map(|i| q[i] as i32 * w[i] as i32).sum() };
        let mut e = ksum[0] * params[0];
        for (b, &s) in scales[..blocks].iter().enumerate() {
            e = (dot(b * 32..(b + 1) * 32) as f32).mul_add(s, e);
        }
        assert_eq!(one[0], e * params[1] + bias[0]);
    }

    #[test]
    fn row_parameters_follow_xnnpack() {
        // All zeros: scale 1, and the zero point from the max end (127).
        assert_eq!(row_params(0.0, 0.0), (127, 1.0, 1.0));
        // Symmetric range: zero point near the middle.
        let (zp, inv, scale) = row_params(-1.0, 1.0);
        assert_eq!(scale, 127.5);
        assert_eq!(inv, 1.0 / 127.5);
        assert!(zp == 0 || zp == -1, "{zp}");
        // Positive only: rmin is 0, so the zero point is -128.
        assert_eq!(row_params(0.5, 2.0).0, -128);
        // Negative only: rmax is 0, so the zero point is 127.
        assert_eq!(row_params(-3.0, -1.0).0, 127);
    }

    /// The AVX-512 and AVX2 quantizations against the scalar one, bit for bit (each where
    /// the CPU has it): random rows of many lengths, values on .5 ties, zeros, constant rows,
    /// NaN and infinities.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_quantization_matches_scalar() {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        let check = |x: &[f32]| {
            let mut qs = vec![0i8; x.len()];
            let ps = quantize_row(x, &mut qs);
            let mut vectors: Vec<((f32, f32), Vec<i8>)> = Vec::new();
            if avx512 {
                let mut qv = vec![1i8; x.len()];
                // SAFETY: the CPU has AVX-512F; same lengths.
                let pv = unsafe { super::vnni::quantize_row(x, &mut qv) };
                vectors.push((pv, qv));
            }
            if avx2 {
                let mut qv = vec![1i8; x.len()];
                // SAFETY: the CPU has AVX2; same lengths.
                let pv = unsafe { super::quantize_row_avx2(x, &mut qv) };
                vectors.push((pv, qv));
            }
            for (pv, qv) in vectors {
                assert_eq!(ps.0.to_bits(), pv.0.to_bits(), "{x:?}");
                assert_eq!(ps.1.to_bits(), pv.1.to_bits(), "{x:?}");
                assert_eq!(qs, qv, "{x:?}");
            }
        };
        for len in [1, 2, 15, 16, 17, 31, 33, 64, 100, 512, 1537] {
            for seed in 0..20u32 {
                let v = values(len, seed * 31 + len as u32, -100_000, 100_000);
                let scale = [1e-4f32, 1e-2, 1.0, 3.7][seed as usize % 4];
                let mut x: Vec<f32> = v.iter().map(|&v| v as f32 * scale).collect();
                if seed % 5 == 1 {
                    // Positive only / negative only.
                    x.iter_mut()
                        .for_each(|v| *v = v.abs() * if seed % 2 == 0 { -1.0 } else { 1.0 });
                }
                check(&x);
            }
            // Ties: with max 127.5 and min -127.5 the scale is 1, values at .5.
            let mut x: Vec<f32> = (0..len).map(|i| (i % 255) as f32 - 127.5).collect();
            x[0] = -127.5;
            if len > 1 {
                x[1] = 127.5;
            }
            check(&x);
            let x: Vec<f32> = (0..len).map(|i| (i % 9) as f32 * 0.5 - 2.0).collect();
            check(&x);
            check(&vec![0.0; len]);
            check(&vec![-0.0; len]);
            check(&vec![3.25; len]);
            check(&vec![-1e-30; len]);
            for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut x: Vec<f32> = (0..len).map(|i| i as f32 * 0.37 - 5.0).collect();
                x[len / 2] = special;
                check(&x);
                check(&vec![special; len]);
            }
        }
    }

    /// The AVX2 tiles give the scalar element's bits for every output: full and edge
    /// tiles, blocks of 16 to 512 elements, extreme activations and 4-bit weights.
    #[test]
    fn avx2_tiles_match_scalar() {
        for (m, n, k, blocks) in [
            (9, 7, 256, 8),
            (4, 6, 96, 2),
            (5, 13, 1024, 2),
            (8, 3, 512, 32),
        ] {
            let mut q: Vec<i8> = int8s(m * k, 21, -128, 128);
            let mut w: Vec<i8> = int8s(n * k, 22, -8, 8);
            q[..k].iter_mut().for_each(|v| *v = -128);
            w[..k].iter_mut().for_each(|v| *v = -8);
            q[k..2 * k].iter_mut().for_each(|v| *v = 127);
            w[k..2 * k].iter_mut().for_each(|v| *v = 7);
            let scales: Vec<f32> = floats(n * blocks, 23, 1, 100, 1e-3);
            let ksum: Vec<f32> = floats(n, 24, -500, 500, 0.01);
            let params: Vec<f32> = (0..m).flat_map(|r| [r as f32 - 3.0, 0.02]).collect();
            let bias: Vec<f32> = floats(n, 25, -100, 100, 0.1);
            let fc = unpacked(&q, &params, &w, &scales, (&[], &ksum), Some(&bias), k);
            let mut out = vec![0.0f32; m * n];
            fc.run(m, n, &mut out);
            for r in 0..m {
                for c in 0..n {
                    let want = fc.element(r, c);
                    assert_eq!(
                        out[r * n + c].to_bits(),
                        want.to_bits(),
                        "{m}x{n}x{k} [{r}, {c}]"
                    );
                }
            }
        }
    }

    /// The panel kernels on packed filters against the one-element-at-a-time formula, per
    /// block and per channel, with row and column tails, on 1 and 3 threads: VNNI (where
    /// the CPU has it) with 4- and 8-bit weights, `vpmaddubsw` (AVX2) with 4-bit weights at
    /// their extremes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn panels_match_scalar() {
        for (packing, ok) in [
            (Packing::Vnni, super::vnni_detected()),
            (Packing::Nibbles, super::vnni_detected()),
            (Packing::Maddubs, super::avx2_detected()),
        ] {
            if !ok {
                continue;
            }
            for (m, n, k, blocks, range) in [
                (11, 37, 256, 8, 8),
                (17, 64, 512, 4, 8),
                (3, 5, 96, 6, 8),
                (9, 33, 100, 1, 128),
                (8, 48, 1536, 1, 128),
                (6, 16, 1536, 1, 8),
                (5, 20, 4, 1, 8),
            ] {
                let int4 = matches!(packing, Packing::Maddubs | Packing::Nibbles);
                let block: usize = k / blocks;
                if int4 && range > 8 || packing == Packing::Nibbles && !block.is_multiple_of(8) {
                    continue;
                }
                panel_case(packing, (m, n, k, blocks), range);
            }
        }
    }

    /// One case of [`panels_match_scalar`].
    fn panel_case(packing: Packing, (m, n, k, blocks): (usize, usize, usize, usize), range: i32) {
        let mut q: Vec<i8> = int8s(m * k, 11, -128, 128);
        let mut w: Vec<i8> = int8s(n * k, 12, -range, range);
        // Extremes: the largest products of either sign in the first two rows and columns.
        q[..k].iter_mut().for_each(|v| *v = -128);
        w[..k].iter_mut().for_each(|v| *v = -range as i8);
        if m > 1 && n > 1 {
            q[k..2 * k].iter_mut().for_each(|v| *v = 127);
            w[k..2 * k].iter_mut().for_each(|v| *v = (range - 1) as i8);
        }
        let scales: Vec<f32> = floats(n * blocks, 13, 1, 100, 1e-3);
        let ksum: Vec<f32> = floats(n, 14, -500, 500, 0.01);
        let wsum: Vec<i32> = w
            .chunks(k)
            .map(|r| r.iter().map(|&x| x as i32).sum())
            .collect();
        let bias: Vec<f32> = floats(n, 15, -50, 50, 0.1);
        let params: Vec<f32> = (0..m)
            .flat_map(|r| [(r as f32 * 37.0) % 255.0 - 128.0, 0.01 + r as f32 * 1e-3])
            .collect();
        let packed: Vec<i8> = pack_panels(&w, n, k, packing)
            .iter()
            .map(|&x| x as i8)
            .collect();
        let pscales = pack_scales(&scales, n, blocks);
        for bias in [Some(&bias[..]), None] {
            let plain = Fc {
                q: &q,
                params: &params,
                w: &w,
                scales: &scales,
                wsum: if blocks > 1 { &[] } else { &wsum },
                ksum: if blocks > 1 { &ksum } else { &[] },
                bias,
                k,
                blocks,
                packing: Packing::Rows,
            };
            let fc = Fc {
                w: &packed,
                scales: &pscales,
                packing,
                ..plain
            };
            let want: Vec<f32> = (0..m * n).map(|i| plain.element(i / n, i % n)).collect();
            let slow: Vec<f32> = (0..m * n).map(|i| fc.element(i / n, i % n)).collect();
            assert_eq!(want, slow);
            for threads in [1, 3] {
                etch_kernels::threads::set_num_threads(threads);
                let mut out = vec![f32::NAN; m * n];
                fc.run(m, n, &mut out);
                let (a, b): (Vec<u32>, Vec<u32>) = (
                    want.iter().map(|v| v.to_bits()).collect(),
                    out.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(
                    a, b,
                    "{packing:?} {m}x{n}x{k} blocks {blocks}, {threads} threads"
                );
            }
            etch_kernels::threads::set_num_threads(0);
        }
    }

    /// Throughput of the fully-connected kernel on the 8da4w decoders' shapes (one thread,
    /// best of 50; `ETCH_BENCH_PACKED_ONLY=1`: the packed kernel alone, best of 2000;
    /// `ETCH_BENCH_COLD=1`: its filters and outputs out of cache):
    /// `cargo test --release -p etch-backends qd8_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn qd8_speed() {
        etch_kernels::threads::set_num_threads(1);
        for (m, n, k) in [(128, 1536, 512), (128, 512, 1536), (128, 256, 512)] {
            let blocks = k / 128;
            let q = int8s(m * k, 1, -128, 128);
            let w = int8s(n * k, 2, -8, 8);
            let scales = floats(n * blocks, 3, 1, 100, 1e-3);
            let ksum = floats(n, 4, -500, 500, 0.01);
            let params: Vec<f32> = (0..m).flat_map(|_| [3.0, 0.02]).collect();
            // The panels this CPU's kernels take (VNNI, else `vpmaddubsw`).
            let packing = super::packing_for(k, 128, true);
            let panels: Vec<i8> = pack_panels(&w, n, k, packing)
                .iter()
                .map(|&x| x as i8)
                .collect();
            let pscales = pack_scales(&scales, n, blocks);
            let plain = unpacked(&q, &params, &w, &scales, (&[], &ksum), None, k);
            let only_packed = std::env::var_os("ETCH_BENCH_PACKED_ONLY").is_some();
            for fc in [
                plain,
                Fc {
                    w: &panels,
                    scales: &pscales,
                    packing,
                    ..plain
                },
            ] {
                let packed = fc.packing != Packing::Rows;
                if only_packed && !packed {
                    continue;
                }
                // `ETCH_BENCH_COLD`: the packed filters and the outputs rotate through copies
                // larger than L3, as a decoder's layers come and go.
                let copies = match std::env::var_os("ETCH_BENCH_COLD").is_some() && packed {
                    true => (64 << 20) / (n * k + 4 * m * n) + 1,
                    false => 1,
                };
                let ws: Vec<Vec<i8>> = (0..copies).map(|_| panels.clone()).collect();
                let mut outs: Vec<Vec<f32>> = (0..copies).map(|_| vec![0.0f32; m * n]).collect();
                let best = (0..if only_packed { 2000 } else { 50 })
                    .map(|i| {
                        let fc = Fc {
                            w: if packed { &ws[i % copies] } else { fc.w },
                            ..fc
                        };
                        let out = &mut outs[i % copies];
                        let t = std::time::Instant::now();
                        fc.run(m, n, out);
                        t.elapsed().as_secs_f64()
                    })
                    .fold(f64::INFINITY, f64::min);
                let gmacs = (m * n * k) as f64 / best * 1e-9;
                println!(
                    "{m}x{n}x{k} {:?}: {:.1} us, {gmacs:.0} GMAC/s",
                    fc.packing,
                    best * 1e6
                );
            }
        }
        etch_kernels::threads::set_num_threads(0);
    }
}
