//! Dense qs8 convolutions and fully-connected layers on AVX-512 VNNI (`vpdpbusd`):
//! tiles of 8 output pixels by 32 output channels, over filters packed at init in the
//! dynamically quantized layers' panels ([`super::super::qd8::pack_panels`], weights
//! offset by 128: the unsigned operand, so that the activations are the broadcast one, an
//! operand `vpdpbusd` loads itself). The input zero point is folded into the biases at
//! init, and the offset's share is `128 · Σ a` of each row, computed per tile:
//!
//! `acc = (bias[n] - x_zp · Σ w[n]) - 128 · Σ a + Σ (w[n] + 128) · a = bias[n] + Σ (a - x_zp) · w[n]`
//!
//! where the taps in the padding read `x_zp` (adding nothing). (Offsetting the
//! activations instead, a xor of each broadcast, was 6-8 % slower on Zen 4.) The sums are exact and the
//! fp32 requantization is the scalar code's (`cvtps` rounds half to even as its magic
//! bias does), so the outputs are [`super::conv`]'s bit for bit.
//!
//! Rows come three ways ([`Rows`]): the input pixels themselves (1×1, stride 1), an
//! indirection over the taps (each tap's `c` input channels in place, or a run of zero
//! points for a tap in the padding; `c` a multiple of 4), or im2col rows gathered into
//! per-task scratch (other channel counts: a stem of 3).

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

/// Whether the CPU has AVX-512F, BW and VNNI (and `ETCH_QS8_SIMD` is not `0`).
pub fn available() -> bool {
    super::simd_enabled()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Input channels of the im2col rows of `g` rounded up to 4 (the panels' depth).
pub fn depth(g: &Geometry) -> usize {
    (g.shape.kernel[0] * g.shape.kernel[1] * g.shape.c).next_multiple_of(4)
}

/// Bytes of scratch a task needs: gathered rows, or a run of `c` zero points.
pub fn scratch_per_task(g: &Geometry) -> usize {
    (ROWS * depth(g)).max(g.shape.c)
}

/// The biases the kernel starts from: `bias[n] - x_zp · Σ w[n]` (filters `[n, k]`).
pub fn folded_bias(w: &[i8], k: usize, bias: &[i32], x_zp: i32) -> Vec<i32> {
    w.chunks(k.max(1))
        .zip(bias)
        .map(|(w, &b)| {
            let s: i32 = w.iter().map(|&v| v as i32).sum();
            b.wrapping_sub(x_zp.wrapping_mul(s))
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
    let direct = s.kernel == [1, 1] && s.stride == [1, 1] && s.pad == [0, 0] && k4 == s.c;
    let indirect = !direct && s.c.is_multiple_of(4) && s.kernel[0] * s.kernel[1] <= MAX_TAPS;
    let pixels = s.n * s.oh * s.ow;
    let tiles = pixels.div_ceil(ROWS);
    let tasks = tasks_for(pixels * n * k4, MIN_TASK_WORK).min(SLOTS);
    let (shared, scratch) = (SharedMut::new(o), SharedMut::new(scratch));
    run_shares(tiles, tasks, &|t, r| {
        // SAFETY: task `t` is run by one thread at a time (run_shares), and `t < SLOTS`.
        let buf = unsafe { scratch.slice(t * per, per) };
        if indirect {
            buf[..s.c].fill(g.x_zp as i8);
        } else {
            // Gathered rows: their bytes past `kh · kw · c` stay zero.
            buf.fill(0);
        }
        // One table a task (4 KB: filled per tile, not cleared).
        let mut table = Table {
            at: [std::ptr::null(); ROWS * MAX_TAPS],
            taps: 0,
            run: 0,
        };
        for tile in r {
            let p0 = tile * ROWS;
            let rows = ROWS.min(pixels - p0);
            let src = if direct {
                Rows::Flat {
                    base: x[p0 * k4..].as_ptr(),
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
                // SAFETY: `available()` (checked above): AVX-512F and BW.
                unsafe { gather(g, x, p0, rows, k4, buf) };
                Rows::Flat {
                    base: buf.as_ptr(),
                    stride: k4,
                }
            };
            // SAFETY: the CPU has the features (checked above); `src` has `rows` rows of
            // `k4` bytes in all; the outputs of these pixels are this task's.
            unsafe { gemm.rows(src, rows, p0, &mut table, &shared) };
        }
    });
    Ok(())
}

/// Writes the im2col rows of pixels `p0..p0 + rows` into `buf` (`k4` bytes a row): each
/// tap's `c` input channels, the input zero point for taps in the padding. The bytes
/// after the `kh · kw · c` are never written (the caller zeroes them once). Pixels are
/// stepped from the first (no divisions), and a window inside the input copies each
/// kernel row as one run (with AVX-512: one masked load and store of up to 64 bytes;
/// `memcpy` calls and the general tap ranges took 60 % of a stem's time).
///
/// # Safety
/// The CPU has AVX-512F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn gather(g: &Geometry, x: &[i8], p0: usize, rows: usize, k4: usize, buf: &mut [i8]) {
    let s = &g.shape;
    let (c, k, kw) = (s.c, s.kernel[0] * s.kernel[1] * s.c, s.kernel[1]);
    let (b, rest) = (p0 / (s.oh * s.ow), p0 % (s.oh * s.ow));
    let (mut b, mut oy, mut ox) = (b, rest / s.ow, rest % s.ow);
    let (span_y, span_x) = ((s.kernel[0] - 1) * s.dil[0], (kw - 1) * s.dil[1]);
    for row in buf.chunks_exact_mut(k4).take(rows) {
        let (y0, x0) = (
            (oy * s.stride[0]).wrapping_sub(s.pad[0]),
            (ox * s.stride[1]).wrapping_sub(s.pad[1]),
        );
        let inside = y0 < s.h && y0 + span_y < s.h && x0 < s.w && x0 + span_x < s.w;
        if inside && s.dil[1] == 1 {
            for i in 0..s.kernel[0] {
                let at = ((b * s.h + y0 + i * s.dil[0]) * s.w + x0) * c;
                // SAFETY: the CPU has the features.
                unsafe { copy(&mut row[i * kw * c..], &x[at..], kw * c) };
            }
        } else {
            let taps = s.pixel_taps(b, oy, ox);
            row[..k].fill(g.x_zp as i8);
            for i in taps.ri.clone() {
                for j in taps.rj.clone() {
                    let (at, to) = (taps.at(i, j), (i * kw + j) * c);
                    // SAFETY: as above.
                    unsafe { copy(&mut row[to..], &x[at..], c) };
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

/// Copies the first `n` bytes of `src` to `dst`: up to 64 as one masked load and store,
/// more by `copy_from_slice`.
///
/// # Safety
/// The CPU has AVX-512F and BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn copy(dst: &mut [i8], src: &[i8], n: usize) {
    let (dst, src) = (&mut dst[..n], &src[..n]);
    if n > 64 {
        dst.copy_from_slice(src);
        return;
    }
    let m: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
    // SAFETY: `n` bytes of each slice are in range and the rest masked off.
    unsafe {
        _mm512_mask_storeu_epi8(
            dst.as_mut_ptr(),
            m,
            _mm512_maskz_loadu_epi8(m, src.as_ptr()),
        )
    };
}

impl Gemm<'_> {
    /// The outputs of `rows` (at most [`ROWS`]) pixels from `p0`, rows `src`.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VNNI; `src` has `rows` rows of `k4` bytes over its
    /// taps (a `Taps` source: `c` a multiple of 4, at most [`MAX_TAPS`] taps); no other
    /// task writes these pixels' outputs.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows(&self, src: Rows<'_>, rows: usize, p0: usize, t: &mut Table, o: &SharedMut<i8>) {
        src.table(rows, self.k4, t);
        let t = &*t;
        // -128 · Σ a of each row (the weights' offset), over its taps.
        let mut sums = [0i32; ROWS];
        for (r, s) in sums.iter_mut().enumerate().take(rows) {
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
        let panels = self.n.div_ceil(PANEL);
        let mut p = 0;
        while p < panels {
            // SAFETY: as the caller's.
            unsafe {
                match (rows, panels - p >= PANELS) {
                    (ROWS, true) => self.tile::<ROWS, PANELS>(t, &sums, p0, p, o),
                    (ROWS, false) => self.tile::<ROWS, 1>(t, &sums, p0, p, o),
                    (_, true) => self.tile_short::<PANELS>(t, rows, &sums, p0, p, o),
                    (_, false) => self.tile_short::<1>(t, rows, &sums, p0, p, o),
                }
            }
            p += PANELS;
        }
    }

    /// [`Gemm::tile`] for fewer than [`ROWS`] rows.
    ///
    /// # Safety
    /// As [`Gemm::tile`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_short<const P: usize>(
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
                1 => self.tile::<1, P>(src, sums, p0, p, o),
                2 => self.tile::<2, P>(src, sums, p0, p, o),
                3 => self.tile::<3, P>(src, sums, p0, p, o),
                4 => self.tile::<4, P>(src, sums, p0, p, o),
                5 => self.tile::<5, P>(src, sums, p0, p, o),
                6 => self.tile::<6, P>(src, sums, p0, p, o),
                _ => self.tile::<7, P>(src, sums, p0, p, o),
            }
        }
    }

    /// Rows `0..R` of `src` (pixels `p0..p0 + R`) times panels `p..p + P`: exact i32 sums,
    /// then `clamp(rne(acc · scale) + zp)` stored as int8 (columns at and past `n` masked
    /// off).
    ///
    /// # Safety
    /// As [`Gemm::rows`]; `src` has `R` rows, `run` a multiple of 4 and `taps · run ==
    /// k4`; panels `p..p + P` exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<const R: usize, const P: usize>(
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
                        acc[j] = _mm512_dpbusd_epi32(acc[j], wv[j], av);
                    }
                }
            }
        }
        let lo = _mm512_set1_ps((self.out.lo - self.out.zp) as f32);
        let hi = _mm512_set1_ps((self.out.hi - self.out.zp) as f32);
        let zp = _mm512_set1_epi32(self.out.zp);
        for j in 0..P {
            // SAFETY: as above.
            let scale = unsafe {
                _mm512_maskz_loadu_ps(mask[j], self.scales.as_ptr().add(col0 + PANEL * j))
            };
            for (r, acc) in acc.iter().enumerate() {
                let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), scale);
                let v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zp);
                // SAFETY: these columns of pixel `p0 + r` are this task's and inside the
                // output (`p0 + r` is one of the call's pixels); lanes at and past `n` are
                // masked off.
                unsafe {
                    let dst = o.as_ptr().add((p0 + r) * n + col0 + PANEL * j);
                    _mm512_mask_cvtepi32_storeu_epi8(dst, mask[j], q);
                }
            }
        }
    }
}
