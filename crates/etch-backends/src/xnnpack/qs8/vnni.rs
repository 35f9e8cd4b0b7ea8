//! Dense qs8 convolutions and fully-connected layers on AVX-512 VNNI (`vpdpbusd`):
//! tiles of 8 output pixels by 32 output channels, over filters packed at init in the
//! dynamically quantized layers' panels ([`super::super::qd8::pack_panels`]).
//! `vpdpbusd` multiplies unsigned bytes by signed ones, so one operand is offset by 128,
//! in one of two ways ([`offsets_weights`]):
//!
//! - **Rows copied into scratch** (1×1 convolutions and fully-connected layers, and the
//!   im2col rows of a stem): the copy flips each activation's sign bit (`a + 128`,
//!   unsigned), the weights stay signed, and the offset's share `128 · Σ w[n]` is a
//!   constant folded into the biases at init with the input zero point:
//!   `acc = (bias[n] - (x_zp + 128) · Σ w[n]) + Σ (a + 128) · w[n]`.
//! - **Rows read in place** through a table of tap starts (XNNPACK's indirection: each
//!   tap's `c` input channels, or a run of zero points for a tap in the padding; `c` a
//!   multiple of 4): the weights are offset instead (`w + 128`, unsigned), the activations
//!   are the broadcast operand that `vpdpbusd` loads itself, and the offset's share
//!   `128 · Σ a` of each row is computed per tile:
//!   `acc = (bias[n] - x_zp · Σ w[n]) - 128 · Σ a + Σ (w[n] + 128) · a`.
//!   (Flipping each broadcast instead was 6-8 % slower on Zen 4.)
//!
//! Either way `acc = bias[n] + Σ (a - x_zp) · w[n]`, the taps in the padding reading
//! `x_zp` (adding nothing). The sums are exact and the fp32 requantization is the scalar
//! code's (`cvtps` rounds half to even as its magic bias does), so the outputs are
//! [`super::conv`]'s bit for bit.

use super::super::qd8::vnni::lanes;
use super::Requant;
use super::conv::Geometry;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::threads::{SharedMut, run_shares, tasks_for};
use std::arch::x86_64::*;

/// Output pixels (rows) of a tile.
pub const ROWS: usize = 8;
/// Columns of a filter panel (the dynamically quantized layers' panels).
const PANEL: usize = super::super::qd8::PANEL;
/// Panels of a tile.
const PANELS: usize = 2;
/// Tasks a call splits into at most (each has its own rows of scratch).
pub const SLOTS: usize = 16;
/// Multiply-adds below which a call stays on the calling thread.
const MIN_TASK_WORK: usize = 1 << 17;

/// Whether the CPU has AVX-512F, BW, VL and VNNI (and `ETCH_QS8_SIMD` is not `0`).
pub fn available() -> bool {
    super::simd_enabled()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Input channels of the im2col rows of `g` rounded up to 4 (the panels' depth).
pub fn depth(g: &Geometry) -> usize {
    (g.shape.kernel[0] * g.shape.kernel[1] * g.shape.c).next_multiple_of(4)
}

/// Bytes of scratch a task needs: copied rows (and 64 bytes past them, which a packed
/// row's store may cover), or a run of `c` zero points.
pub fn scratch_per_task(g: &Geometry) -> usize {
    (ROWS * depth(g) + 64).max(g.shape.c)
}

/// Whether the rows of `g` are read in place through the tap table (the weights offset by
/// 128), rather than copied into scratch with the activations offset (a dense
/// convolution whose input channels are a multiple of 4 and whose taps fit the table,
/// other than a 1×1 of stride 1 without padding).
pub fn offsets_weights(g: &Geometry) -> bool {
    let s = &g.shape;
    !is_flat(g) && s.c.is_multiple_of(4) && s.kernel[0] * s.kernel[1] <= MAX_TAPS
}

/// A 1×1 of stride 1 without padding: each output pixel's row is its input pixel.
fn is_flat(g: &Geometry) -> bool {
    let s = &g.shape;
    s.kernel == [1, 1] && s.stride == [1, 1] && s.pad == [0, 0] && depth(g) == s.c
}

/// The filters `w` (`[n, k]`, padded to `k4` with zeros) as the kernel reads them for `g`:
/// panels, offset by 128 where [`offsets_weights`].
pub fn pack(g: &Geometry, w: &[i8], n: usize, k4: usize) -> Vec<u8> {
    let mut panels = super::super::qd8::pack_panels(w, n, k4, super::super::qd8::Packing::Vnni);
    if !offsets_weights(g) {
        // Back to the signed weights (the panels' padding too: 128 ^ 0x80 = 0).
        panels.iter_mut().for_each(|b| *b ^= 0x80);
    }
    panels
}

/// The biases the kernel starts from for `g` (filters `w` of `[n, k]`): `bias[n] - x_zp ·
/// Σ w[n]`, less `128 · Σ w[n]` where the activations are offset.
pub fn folded_bias(g: &Geometry, w: &[i8], k: usize, bias: &[i32]) -> Vec<i32> {
    let zp = if offsets_weights(g) {
        g.x_zp
    } else {
        g.x_zp.wrapping_add(128)
    };
    w.chunks(k.max(1))
        .zip(bias)
        .map(|(w, &b)| {
            let s: i32 = w.iter().map(|&v| v as i32).sum();
            b.wrapping_sub(zp.wrapping_mul(s))
        })
        .collect()
}

/// The operands of a call, as slices.
pub(super) struct Gemm<'a> {
    /// Packed panels `[panels, k4 / 4, PANEL, 4]` of the weights plus 128.
    pub w: &'a [u8],
    /// Folded biases ([`folded_bias`]) and requantization scales, `[n]`.
    pub bias: &'a [i32],
    pub scales: &'a [f32],
    /// Depth (multiple of 4) and columns.
    pub k4: usize,
    pub n: usize,
    pub out: Requant,
}

/// Most taps of a kernel read through the indirection (more: gathered rows).
const MAX_TAPS: usize = 64;

/// The starts of a tile's rows: tap `t` of row `r` at `[t * ROWS + r]`, each `run` bytes.
struct Table {
    at: [*const i8; ROWS * MAX_TAPS],
    taps: usize,
    run: usize,
}

/// Where a tile's rows are.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Row `r` at `base + r · stride` (one tap of the whole depth).
    Flat { base: *const i8, stride: usize },
    /// Tap `(i, j)` of pixel `p0 + r` in the input `x`, or `zps` (`c` zero points) in the
    /// padding.
    Taps {
        g: &'a Geometry,
        x: *const i8,
        zps: *const i8,
        p0: usize,
    },
}

impl Rows<'_> {
    /// Fills `t` with the starts of `rows` rows (`k4` bytes over their taps).
    fn table(&self, rows: usize, k4: usize, t: &mut Table) {
        match *self {
            Rows::Flat { base, stride } => {
                (t.taps, t.run) = (1, k4);
                for r in 0..rows {
                    t.at[r] = base.wrapping_add(r * stride);
                }
            }
            Rows::Taps { g, x, zps, p0 } => {
                let s = &g.shape;
                (t.taps, t.run) = (s.kernel[0] * s.kernel[1], s.c);
                for r in 0..rows {
                    let p = p0 + r;
                    let (b, rest) = (p / (s.oh * s.ow), p % (s.oh * s.ow));
                    let (y0, x0) = ((rest / s.ow) * s.stride[0], (rest % s.ow) * s.stride[1]);
                    for i in 0..s.kernel[0] {
                        let iy = (y0 + i * s.dil[0]).wrapping_sub(s.pad[0]);
                        for j in 0..s.kernel[1] {
                            let ix = (x0 + j * s.dil[1]).wrapping_sub(s.pad[1]);
                            t.at[(i * s.kernel[1] + j) * ROWS + r] = if iy < s.h && ix < s.w {
                                x.wrapping_add(((b * s.h + iy) * s.w + ix) * s.c)
                            } else {
                                zps
                            };
                        }
                    }
                }
            }
        }
    }
}

/// `conv_vnni(x, panels, folded bias, scales, geometry, [zp, lo, hi], scratch, out)`: a
/// dense (one group) qs8 convolution or fully-connected layer; `scratch` holds
/// [`SLOTS`] times [`scratch_per_task`] bytes.
pub fn conv_vnni(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (x, w, bias, scales) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
    );
    let g = Geometry::from_ints(ctx.int_list(4)?)?;
    let out = Requant::from_ints(ctx.int_list(5)?)?;
    let (mut scratch, mut o) = (ctx.tensor(6)?, ctx.tensor(7)?);
    let w = w.data::<i8>()?;
    // SAFETY: i8 and u8 have one layout.
    let w = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len()) };
    let gemm = Gemm {
        w,
        bias: bias.data::<i32>()?,
        scales: scales.data::<f32>()?,
        k4: depth(&g),
        n: g.shape.co,
        out,
    };
    run(
        &g,
        &gemm,
        x.data::<i8>()?,
        scratch.data_mut::<i8>()?,
        o.data_mut::<i8>()?,
    )
}

/// All outputs of `g` into `o`, split over threads by tiles of pixels.
pub(super) fn run(
    g: &Geometry,
    gemm: &Gemm<'_>,
    x: &[i8],
    scratch: &mut [i8],
    o: &mut [i8],
) -> Result<()> {
    let s = &g.shape;
    let (k4, n, per) = (gemm.k4, gemm.n, scratch_per_task(g));
    let ok = g.groups == 1
        && Some(x.len()) == s.in_len()
        && Some(o.len()) == s.out_len()
        && gemm.w.len() == n.div_ceil(PANEL) * PANEL * k4
        && gemm.bias.len() == n
        && gemm.scales.len() == n
        && scratch.len() >= SLOTS * per;
    if !ok || !available() {
        return Err(Error::internal(format!(
            "qs8 VNNI convolution operands for {g:?}"
        )));
    }
    let pixels = s.n * s.oh * s.ow;
    let tiles = pixels.div_ceil(ROWS);
    let tasks = tasks_for(pixels * n * k4, MIN_TASK_WORK).min(SLOTS);
    let (shared, scratch) = (SharedMut::new(o), SharedMut::new(scratch));
    // Split by tiles of pixels, or by pairs of panels where that shares the work more
    // evenly (few pixels: a classifier's one row).
    let pairs = n.div_ceil(PANEL * PANELS);
    let by_cols = pairs.div_ceil(tasks) * tiles < tiles.div_ceil(tasks) * pairs;
    let units = if by_cols { pairs } else { tiles };
    run_shares(units, tasks, &|t, r| {
        // SAFETY: task `t` is run by one thread at a time (run_shares), and `t < SLOTS`.
        let buf = unsafe { scratch.slice(t * per, per) };
        let (tiles, cols) = if by_cols {
            (0..tiles, r)
        } else {
            (r, 0..pairs)
        };
        // SAFETY: the CPU has the features (checked above); these outputs are this task's.
        unsafe { gemm.task(g, x, buf, tiles, cols, &shared) };
    });
    Ok(())
}

/// The byte permutation (AVX-512 VBMI) that packs a window's kernel rows, each loaded as
/// a 16-byte lane of one vector, into its im2col row: for windows of at most 4 kernel rows
/// of at most 16 bytes each (`kw · c`, dilation 1 across), 64 bytes in all (a stem of 3
/// channels: 3 rows of 9). One store a row instead of a masked store a kernel row, so the
/// products' 4-byte loads of the row are forwarded from one store (masked stores of 9
/// bytes were half a stem's time).
struct Packer {
    /// Source byte of each row byte: kernel row `i`'s byte `b` is lane `i`'s byte `b`.
    idx: [u8; 64],
    /// The row's `kh · kw · c` bytes.
    keep: u64,
    /// Kernel rows and their bytes.
    kh: usize,
    piece: usize,
}

impl Packer {
    /// The packer of `g`'s windows, if they fit and the CPU has VBMI.
    fn new(g: &Geometry) -> Option<Packer> {
        let s = &g.shape;
        let (kh, piece) = (s.kernel[0], s.kernel[1] * s.c);
        let k = kh * piece;
        let fits = kh <= 4 && piece <= 16 && k <= 64 && s.dil[1] == 1;
        if !fits || !super::flat512::vbmi_available() {
            return None;
        }
        let mut idx = [0u8; 64];
        for (j, v) in idx.iter_mut().enumerate().take(k) {
            *v = (16 * (j / piece) + j % piece) as u8;
        }
        let keep = if k == 64 { !0 } else { (1u64 << k) - 1 };
        Some(Packer {
            idx,
            keep,
            kh,
            piece,
        })
    }

    /// Row `dst` (64 bytes written, sign bits flipped) of the window whose kernel rows
    /// start at `at[..kh]` in `x`.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW, VL and VBMI; `dst` has 64 bytes; each `at[i] + piece <=
    /// x.len()`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    unsafe fn row(&self, x: &[i8], at: [usize; 4], dst: *mut i8) {
        let part = |i: usize| {
            if i >= self.kh {
                return _mm_setzero_si128();
            }
            let src = x[at[i]..].as_ptr();
            // SAFETY: 16 bytes in range, or `piece` of them (the caller's) and the rest
            // masked off.
            unsafe {
                if at[i] + 16 <= x.len() {
                    _mm_loadu_si128(src.cast())
                } else {
                    _mm_maskz_loadu_epi8(((1u32 << self.piece) - 1) as u16, src)
                }
            }
        };
        let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(part(0)), part(1));
        let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(part(2)), part(3));
        let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        // SAFETY: 64 bytes.
        let idx = unsafe { _mm512_loadu_si512(self.idx.as_ptr().cast()) };
        let v = _mm512_maskz_permutexvar_epi8(self.keep, idx, v);
        // SAFETY: `dst` has 64 bytes (the caller's).
        unsafe { _mm512_storeu_si512(dst.cast(), _mm512_xor_si512(v, _mm512_set1_epi8(i8::MIN))) };
    }
}

/// Writes the im2col rows of pixels `p0..p0 + rows` into `buf` (`k4` bytes a row), each
/// byte's sign bit flipped (offset by 128): each tap's `c` input channels, the input zero
/// point for taps in the padding. The bytes after the `kh · kw · c` of a row are not
/// meant to be read (they meet zero weights). Pixels are stepped from the first (no
/// divisions), and a window inside the input is one [`Packer::row`] where `packer` is
/// some, else one masked copy a kernel row (`memcpy` calls and the general tap ranges took
/// 60 % of a stem's time).
///
/// # Safety
/// The CPU has AVX-512F, BW and VL, and VBMI where `packer` is some; `buf` has 64 bytes
/// past `rows` rows.
unsafe fn gather(
    g: &Geometry,
    x: &[i8],
    p0: usize,
    rows: usize,
    k4: usize,
    buf: &mut [i8],
    packer: Option<&Packer>,
) {
    // SAFETY: the caller's.
    unsafe {
        match packer {
            Some(pk) => gather_vbmi(g, x, p0, rows, k4, buf, pk),
            None => gather_avx512(g, x, p0, rows, k4, buf),
        }
    }
}

/// [`gather_rows`] with a packer, compiled for VBMI (so that [`Packer::row`] is inlined).
///
/// # Safety
/// As [`gather`], with VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
unsafe fn gather_vbmi(
    g: &Geometry,
    x: &[i8],
    p0: usize,
    rows: usize,
    k4: usize,
    buf: &mut [i8],
    pk: &Packer,
) {
    // SAFETY: the caller's.
    unsafe { gather_rows(g, x, p0, rows, k4, buf, Some(pk)) }
}

/// [`gather_rows`] without a packer.
///
/// # Safety
/// As [`gather`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn gather_avx512(g: &Geometry, x: &[i8], p0: usize, rows: usize, k4: usize, buf: &mut [i8]) {
    // SAFETY: the caller's.
    unsafe { gather_rows(g, x, p0, rows, k4, buf, None) }
}

/// The body of [`gather`], inlined into its two compilations.
///
/// # Safety
/// As [`gather`].
#[inline(always)]
unsafe fn gather_rows(
    g: &Geometry,
    x: &[i8],
    p0: usize,
    rows: usize,
    k4: usize,
    buf: &mut [i8],
    packer: Option<&Packer>,
) {
    let s = &g.shape;
    let (c, k, kw) = (s.c, s.kernel[0] * s.kernel[1] * s.c, s.kernel[1]);
    let (b, rest) = (p0 / (s.oh * s.ow), p0 % (s.oh * s.ow));
    let (mut b, mut oy, mut ox) = (b, rest / s.ow, rest % s.ow);
    let (span_y, span_x) = ((s.kernel[0] - 1) * s.dil[0], (kw - 1) * s.dil[1]);
    for r in 0..rows {
        let (y0, x0) = (
            (oy * s.stride[0]).wrapping_sub(s.pad[0]),
            (ox * s.stride[1]).wrapping_sub(s.pad[1]),
        );
        let inside = y0 < s.h && y0 + span_y < s.h && x0 < s.w && x0 + span_x < s.w;
        let start = |i: usize| ((b * s.h + y0 + i * s.dil[0]) * s.w + x0) * c;
        match packer {
            Some(pk) if inside => {
                let at = std::array::from_fn(|i| if i < pk.kh { start(i) } else { 0 });
                // SAFETY: the caller's: VBMI, and 64 bytes from row `r` (`buf` has 64 past
                // the rows); the window is inside the input.
                unsafe { pk.row(x, at, buf[r * k4..].as_mut_ptr()) };
            }
            _ => {
                let row = &mut buf[r * k4..(r + 1) * k4];
                if inside && s.dil[1] == 1 {
                    for i in 0..s.kernel[0] {
                        // SAFETY: the CPU has the features.
                        unsafe {
                            flip_copy(&mut row[i * kw * c..][..kw * c], &x[start(i)..][..kw * c])
                        };
                    }
                } else {
                    let taps = s.pixel_taps(b, oy, ox);
                    row[..k].fill(g.x_zp as i8 ^ i8::MIN);
                    for i in taps.ri.clone() {
                        for j in taps.rj.clone() {
                            let (at, to) = (taps.at(i, j), (i * kw + j) * c);
                            // SAFETY: as above.
                            unsafe { flip_copy(&mut row[to..to + c], &x[at..at + c]) };
                        }
                    }
                }
            }
        }
        ox += 1;
        if ox == s.ow {
            (oy, ox) = (oy + 1, 0);
            if oy == s.oh {
                (b, oy) = (b + 1, 0);
            }
        }
    }
}

/// `dst = src ^ 0x80` byte by byte (`src` as unsigned bytes offset by 128; the shorter
/// length of the two): 64 bytes a step, the tail as one masked load and store.
///
/// # Safety
/// The CPU has AVX-512F and BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn flip_copy(dst: &mut [i8], src: &[i8]) {
    let n = dst.len().min(src.len());
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut i = 0;
    while i < n {
        let m: __mmask64 = if n - i >= 64 {
            !0
        } else {
            (1u64 << (n - i)) - 1
        };
        // SAFETY: bytes `i..n` of each slice are in range and the rest masked off.
        unsafe {
            let v = _mm512_maskz_loadu_epi8(m, src.as_ptr().add(i));
            _mm512_mask_storeu_epi8(dst.as_mut_ptr().add(i), m, _mm512_xor_si512(v, flip));
        }
        i += 64;
    }
}

impl Gemm<'_> {
    /// The outputs of tiles `tiles` of `g` in pairs of panels `cols`, with `buf` ([`scratch_per_task`] bytes) for
    /// copied rows or a run of zero points. One function with the features, so that the
    /// copies and the tables are inlined into the loop over tiles.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW, VL and VNNI; the operands are checked ([`run`]); no other
    /// task writes these tiles' outputs.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn task(
        &self,
        g: &Geometry,
        x: &[i8],
        buf: &mut [i8],
        tiles: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        o: &SharedMut<i8>,
    ) {
        let s = &g.shape;
        let (direct, indirect, k4) = (is_flat(g), offsets_weights(g), self.k4);
        let pixels = s.n * s.oh * s.ow;
        if indirect {
            buf[..s.c].fill(g.x_zp as i8);
        } else {
            // Gathered rows: their bytes past `kh · kw · c` stay zero (times zero weights).
            buf.fill(0);
        }
        // One table a task (4 KB: filled per tile, not cleared).
        let mut table = Table {
            at: [std::ptr::null(); ROWS * MAX_TAPS],
            taps: 0,
            run: 0,
        };
        let packer = if direct || indirect {
            None
        } else {
            Packer::new(g)
        };
        for tile in tiles {
            let p0 = tile * ROWS;
            let rows = ROWS.min(pixels - p0);
            let src = if direct {
                // SAFETY: the CPU has the features.
                unsafe { flip_copy(&mut buf[..rows * k4], &x[p0 * k4..][..rows * k4]) };
                Rows::Flat {
                    base: buf.as_ptr(),
                    stride: k4,
                }
            } else if indirect {
                Rows::Taps {
                    g,
                    x: x.as_ptr(),
                    zps: buf.as_ptr(),
                    p0,
                }
            } else {
                // SAFETY: the CPU has the features (and VBMI where `packer` is some); `buf`
                // has 64 bytes past the rows.
                unsafe { gather(g, x, p0, rows, k4, buf, packer.as_ref()) };
                Rows::Flat {
                    base: buf.as_ptr(),
                    stride: k4,
                }
            };
            src.table(rows, k4, &mut table);
            // SAFETY: the caller's; the table has `rows` rows of `k4` bytes in all.
            unsafe { self.rows(&table, rows, p0, indirect, cols.clone(), o) };
        }
    }

    /// The outputs of `rows` (at most [`ROWS`]) pixels from `p0`, their rows at `t` (with
    /// `128 · Σ a` taken off each row's sums where the weights are offset).
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VNNI; `t` has `rows` rows of `k4` bytes over its taps
    /// (`run` a multiple of 4); no other task writes these pixels' outputs.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn rows(
        &self,
        t: &Table,
        rows: usize,
        p0: usize,
        weights_offset: bool,
        cols: std::ops::Range<usize>,
        o: &SharedMut<i8>,
    ) {
        // -128 · Σ a of each row (the weights' offset), over its taps.
        let mut sums = [0i32; ROWS];
        let offset_rows = if weights_offset { rows } else { 0 };
        for (r, s) in sums.iter_mut().enumerate().take(offset_rows) {
            let mut sum = 0i32;
            for tap in 0..t.taps {
                // SAFETY: the tap's run of `run` bytes (the caller's); the CPU has the
                // features.
                sum = sum.wrapping_add(unsafe {
                    let a = std::slice::from_raw_parts(t.at[tap * ROWS + r], t.run);
                    super::super::qd8::vnni::sum_i8(a)
                });
            }
            *s = sum.wrapping_mul(-128);
        }
        // SAFETY: as the caller's.
        unsafe {
            if weights_offset {
                self.panels::<false>(t, rows, &sums, p0, cols, o)
            } else {
                self.panels::<true>(t, rows, &sums, p0, cols, o)
            }
        }
    }

    /// The panels of pairs `cols` of the outputs of `rows` pixels from `p0` ([`Gemm::tile`]).
    ///
    /// # Safety
    /// As [`Gemm::tile`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn panels<const U: bool>(
        &self,
        t: &Table,
        rows: usize,
        sums: &[i32; ROWS],
        p0: usize,
        cols: std::ops::Range<usize>,
        o: &SharedMut<i8>,
    ) {
        let panels = self.n.div_ceil(PANEL).min(cols.end * PANELS);
        let mut p = cols.start * PANELS;
        while p < panels {
            // SAFETY: as the caller's.
            unsafe {
                match (rows, panels - p >= PANELS) {
                    (ROWS, true) => self.tile::<ROWS, PANELS, U>(t, sums, p0, p, o),
                    (ROWS, false) => self.tile::<ROWS, 1, U>(t, sums, p0, p, o),
                    (_, true) => self.tile_short::<PANELS, U>(t, rows, sums, p0, p, o),
                    (_, false) => self.tile_short::<1, U>(t, rows, sums, p0, p, o),
                }
            }
            p += PANELS;
        }
    }

    /// [`Gemm::tile`] for fewer than [`ROWS`] rows.
    ///
    /// # Safety
    /// As [`Gemm::tile`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile_short<const P: usize, const U: bool>(
        &self,
        src: &Table,
        rows: usize,
        sums: &[i32; ROWS],
        p0: usize,
        p: usize,
        o: &SharedMut<i8>,
    ) {
        // SAFETY: as the caller's.
        unsafe {
            match rows {
                1 => self.tile::<1, P, U>(src, sums, p0, p, o),
                2 => self.tile::<2, P, U>(src, sums, p0, p, o),
                3 => self.tile::<3, P, U>(src, sums, p0, p, o),
                4 => self.tile::<4, P, U>(src, sums, p0, p, o),
                5 => self.tile::<5, P, U>(src, sums, p0, p, o),
                6 => self.tile::<6, P, U>(src, sums, p0, p, o),
                _ => self.tile::<7, P, U>(src, sums, p0, p, o),
            }
        }
    }

    /// Rows `0..R` of `src` (pixels `p0..p0 + R`) times panels `p..p + P` (`U`: the rows
    /// are the unsigned operand, else the weights): exact i32 sums, then `clamp(rne(acc · scale) + zp)` stored as int8 (columns at and past `n` masked
    /// off).
    ///
    /// # Safety
    /// As [`Gemm::rows`]; `src` has `R` rows, `run` a multiple of 4 and `taps · run ==
    /// k4`; panels `p..p + P` exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const R: usize, const P: usize, const U: bool>(
        &self,
        src: &Table,
        sums: &[i32; ROWS],
        p0: usize,
        p: usize,
        o: &SharedMut<i8>,
    ) {
        let (k4, n) = (self.k4, self.n);
        let col0 = p * PANEL;
        let mask: [__mmask16; P] = std::array::from_fn(|j| lanes(n - col0 - PANEL * j));
        let w: [*const u8; P] = std::array::from_fn(|j| self.w[(p + j) * PANEL * k4..].as_ptr());
        // SAFETY (masked loads): lanes of columns at and past `n` are masked off.
        let bias: [__m512i; P] = std::array::from_fn(|j| unsafe {
            _mm512_maskz_loadu_epi32(mask[j], self.bias.as_ptr().add(col0 + PANEL * j))
        });
        let mut acc: [[__m512i; P]; R] = std::array::from_fn(|r| {
            let s = _mm512_set1_epi32(sums[r]);
            bias.map(|b| _mm512_add_epi32(b, s))
        });
        let (taps, quads) = (src.taps, src.run / 4);
        for t in 0..taps {
            let a = &src.at[t * ROWS..t * ROWS + R];
            for q in 0..quads {
                let wq = (t * quads + q) * 64;
                // SAFETY: `wq + 64 <= PANEL * k4`, each panel's length.
                let wv: [__m512i; P] =
                    std::array::from_fn(|j| unsafe { _mm512_loadu_si512(w[j].add(wq).cast()) });
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: `4 * q + 4` bytes of the tap's run of `run` bytes.
                    let av = unsafe { (a[r].add(4 * q) as *const i32).read_unaligned() };
                    let av = _mm512_set1_epi32(av);
                    for j in 0..P {
                        acc[j] = if U {
                            _mm512_dpbusd_epi32(acc[j], av, wv[j])
                        } else {
                            _mm512_dpbusd_epi32(acc[j], wv[j], av)
                        };
                    }
                }
            }
        }
        for j in 0..P {
            let q: [__m512i; R] = std::array::from_fn(|r| acc[r][j]);
            // SAFETY: as above.
            unsafe { self.store(q, p0, col0 + PANEL * j, mask[j], o) };
        }
    }

    /// Requantizes the sums `acc` of pixels `p0..p0 + R` in the 16 columns from `col`
    /// (those of `mask`) and stores them, as XNNPACK's fp32 requantization does: in
    /// floats the scale and the upper bound, then four rows at a time packed with
    /// saturation to i16, the zero point added, packed to i8 and the lower bound applied.
    /// Equal to `clamp(rne(acc · scale) + zp, lo, hi)`: the bounds are integers, so
    /// clamping before or after rounding agrees, and the saturations only move values
    /// below `lo`.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VL; these columns of these pixels are the caller's and
    /// inside the output.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn store<const R: usize>(
        &self,
        acc: [__m512i; R],
        p0: usize,
        col: usize,
        mask: __mmask16,
        o: &SharedMut<i8>,
    ) {
        // SAFETY (masked load): lanes of columns at and past `n` are masked off.
        let scale = unsafe { _mm512_maskz_loadu_ps(mask, self.scales.as_ptr().add(col)) };
        let hi = _mm512_set1_ps((self.out.hi - self.out.zp) as f32);
        let zp = _mm512_set1_epi16(self.out.zp as i16);
        let lo = _mm512_set1_epi8(self.out.lo as i8);
        // Row `i` of a group of four at dwords `i, i + 4, i + 8, i + 12` after the packs.
        let rows_in_lanes = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let q: [__m512i; R] = acc.map(|a| {
            let v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
            _mm512_cvtps_epi32(_mm512_min_ps(v, hi))
        });
        for g in (0..R).step_by(4) {
            let row = |i: usize| q.get(g + i).copied().unwrap_or(_mm512_setzero_si512());
            let ab = _mm512_adds_epi16(_mm512_packs_epi32(row(0), row(1)), zp);
            let cd = _mm512_adds_epi16(_mm512_packs_epi32(row(2), row(3)), zp);
            let v = _mm512_max_epi8(_mm512_packs_epi16(ab, cd), lo);
            let v = _mm512_permutexvar_epi32(rows_in_lanes, v);
            let lanes = [
                _mm512_castsi512_si128(v),
                _mm512_extracti32x4_epi32::<1>(v),
                _mm512_extracti32x4_epi32::<2>(v),
                _mm512_extracti32x4_epi32::<3>(v),
            ];
            for (i, lane) in lanes.into_iter().enumerate().take(R - g) {
                // SAFETY: the caller's: pixel `p0 + g + i` is one of the tile's; lanes at
                // and past `n` are masked off.
                unsafe {
                    let dst = o.as_ptr().add((p0 + g + i) * self.n + col);
                    _mm_mask_storeu_epi8(dst, mask, lane);
                }
            }
        }
    }
}
