//! `f32` matrix products with a constant operand packed once, at load, for AVX-512F
//! micro-kernels, or their AVX2 versions (`gemm512/avx2.rs`: the same tiles in 8-lane
//! chunks, the same bits) on CPUs without AVX-512F.
//!
//! Two products:
//!
//! - Fully connected, `out[i, j] = clamp(bias[j] + sum_k x[i, k] · w[j, k])`: the weights
//!   are packed in panels of [`NR`] output columns ([`pack_fc`]: the panel's `NR` biases,
//!   then `k` rows of `NR` weights, zero-padded); a tile of up to [`MR`] rows of `x`
//!   broadcasts `x[i, k]` and multiplies panel row `k` (two `zmm` vectors).
//! - Convolution on NCHW planes, `out[co, p] = clamp(bias[co] + sum_r w[co, r] · col[r, p])`
//!   (`col`: im2col of the input, `r` over `(ci, i, j)`): the weights are packed in panels
//!   of [`MR`] output channels ([`pack_conv`]: the biases, then per block of terms each
//!   panel's rows of `MR` weights);
//!   a tile broadcasts `w[co, r]` and multiplies `NR` pixels of `col` row `r`, read from the
//!   input planes themselves for 1×1 stride-1 convolutions on contiguous planes, else from
//!   an im2col of the tile's pixels (or windows of padded phase planes). On small planes
//!   with weights packed in pairs of panels ([`ConvLayout::Pairs`]), a tile turns the other
//!   way: it broadcasts up to 8 pixels of an output row and multiplies 16 or 32 output
//!   channels of a weight row (`gemm512/pixels.rs`).
//!
//! Every output element is its bias, then one fused multiply-add per term in `k` (or `r`)
//! order, computed in one tile, then clamped: the result does not depend on how the
//! product is split into tiles or over threads. Scratch memory (im2col tiles) comes from
//! the scratch pool, so nothing allocates once warm.

use crate::threads::{self, SharedMut};
use std::ops::Range;
use std::ptr::null;

#[cfg(target_arch = "x86_64")]
#[path = "gemm512/avx2.rs"]
mod avx2;
#[path = "gemm512/cols.rs"]
mod cols;
#[path = "gemm512/pixels.rs"]
mod pixels;

/// Rows of a fully-connected tile, and output channels of a convolution panel.
pub const MR: usize = 8;
/// Columns of a fully-connected panel, and pixels of a convolution tile (two vectors).
pub const NR: usize = 32;
/// Packed weights of a fully-connected product are walked in blocks of panels of about
/// this many bytes, which stay in L2 while every row tile passes over them.
const FC_BLOCK_BYTES: usize = 512 << 10;
/// Terms per block of a convolution: a block's `col` rows (`CONV_KC · NR` elements, 32 KiB)
/// stay in L1 while every panel of output channels passes over them.
const CONV_KC: usize = 256;
/// Pixel tiles per unit of a convolution: each panel's weights of a block of terms are
/// read once for all of them (their `col` rows, 128 KiB, stay in L2).
const CONV_TILES: usize = 4;

/// Output bytes of a direct convolution (per batch item and group) above which its tile
/// groups grow ([`direct_group`]).
const DIRECT_OUT_L2: usize = 2 << 20;
/// The input rows of a grown direct tile group.
const DIRECT_GROUP_BYTES: usize = 256 << 10;

/// How far ahead (in weights, 4 bytes each) a convolution tile that reads a panel's
/// weights first prefetches them.
const PF_AHEAD: usize = 1024;

/// The cost of copying one output pixel of a [`Mode::Wide`] grid to the output, in the
/// term-lanes by which [`ConvPlan::new`] compares the modes (a tile's lane over one term).
/// It decides for convolutions of few terms: mobilenet's first (3 channels, 3×3, stride 2:
/// 27 terms) took 1.5× (one thread) to 2× (two) as long on the wide grid as by rows.
const WIDE_COPY: usize = 8;

/// Whether the CPU has AVX-512F, or AVX2 with FMA (`avx2.rs`'s kernels), and
/// `ETCH_F32_GEMM512` is not `0`: the packed products run only then; callers keep their
/// other path otherwise.
pub fn available() -> bool {
    isa() != Isa::None
}

/// Whether the packed products run on AVX-512F (else on AVX2, or not at all): for callers
/// whose own kernels, or whose choice of layout, need AVX-512F.
pub fn avx512() -> bool {
    isa() == Isa::Avx512
}

/// Whether the CPU is AMD's and the packed products run on AVX-512F (Zen 4 and later,
/// where each 512-bit operation is two 256-bit halves). There the NHWC convolutions (an
/// im2col block times weights packed at load, [`fully_connected`]'s tiles) beat the
/// channels-first ones on resnet18 (one thread 0.96x, two 0.80x, session 29), where on
/// Intel's AVX-512 cores they lost (session 22: 1.05-1.2x).
pub fn amd_avx512() -> bool {
    avx512() && crate::util::amd_cpu()
}

/// The instruction set the packed products run on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Isa {
    None,
    Avx2,
    Avx512,
}

fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let var = std::env::var("ETCH_F32_GEMM512");
        let enabled = var.as_deref() != Ok("0");
        // `ETCH_F32_GEMM512=avx2`: the AVX2 kernels on an AVX-512 CPU too (for tests).
        let avx512_ok = var.as_deref() != Ok("avx2");
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match enabled {
                true if avx512_ok && has!("avx512f") => Isa::Avx512,
                true if has!("avx2") && has!("fma") => Isa::Avx2,
                _ => Isa::None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (enabled, avx512_ok);
            Isa::None
        }
    })
}

/// Elements of the packed weights of an `n`-output, depth-`k` fully-connected product.
pub fn fc_packed_len(n: usize, k: usize) -> Option<usize> {
    n.div_ceil(NR)
        .checked_mul(NR)?
        .checked_mul(k.checked_add(1)?)
}

/// Packs the weights `w(j, k)` (output column `j`, depth `k`) and the bias of an
/// `n`-output, depth-`k` fully-connected product (see the module doc).
pub fn pack_fc(
    n: usize,
    k: usize,
    w: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    let mut p = vec![0f32; fc_packed_len(n, k)?];
    for (panel, dst) in p.chunks_exact_mut(NR * (k + 1)).enumerate() {
        for jj in 0..NR.min(n - panel * NR) {
            let j = panel * NR + jj;
            dst[jj] = bias.map_or(0.0, |b| b[j]);
            for kk in 0..k {
                dst[NR + kk * NR + jj] = w(j, kk);
            }
        }
    }
    Some(p)
}

/// Elements of the packed weights of a convolution with `groups` groups of `cout_g`
/// output channels and `kk` terms (`cin_g · kh · kw`) per output.
pub fn conv_packed_len(groups: usize, cout_g: usize, kk: usize) -> Option<usize> {
    groups
        .checked_mul(cout_g.div_ceil(MR))?
        .checked_mul(MR)?
        .checked_mul(kk.checked_add(1)?)
}

/// How a convolution's weights are packed: after each group's biases, blocks of up to 256
/// terms, each holding its rows of every panel of `MR` output channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvLayout {
    /// Each block's rows panel by panel, `MR` weights a row.
    Panels,
    /// Pairs of panels interleaved row by row (rows of 16 output channels), which pixel
    /// tiles read a vector at a time (small planes): output channels per group a
    /// multiple of 16, and a kernel larger than 1×1.
    Pairs,
}

impl ConvLayout {
    /// Elements between a panel's consecutive rows.
    fn row_step(self) -> usize {
        match self {
            ConvLayout::Panels => MR,
            ConvLayout::Pairs => 2 * MR,
        }
    }
}

/// The layout to pack a convolution of shape `s` in: [`ConvLayout::Pairs`] when it would
/// take pixel tiles (small planes), else [`ConvLayout::Panels`]. Either layout runs any
/// shape the weights fit.
pub fn conv_layout_for(s: &ConvShape) -> ConvLayout {
    if pixels::enabled() && ConvPlan::new(s, None, true).mode == Mode::Pixels {
        ConvLayout::Pairs
    } else {
        ConvLayout::Panels
    }
}

/// Packs the weights `w(co, r)` (output channel `co` of all groups, term
/// `r = (ci · kh + i) · kw + j`) and the bias (one per output channel) of a convolution
/// (see the module doc) in `layout`; `None` on overflow, or [`ConvLayout::Pairs`] with
/// output channels per group not a multiple of 16.
pub fn pack_conv(
    groups: usize,
    cout_g: usize,
    kk: usize,
    w: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
    layout: ConvLayout,
) -> Option<Vec<f32>> {
    if layout == ConvLayout::Pairs && !cout_g.is_multiple_of(16) {
        return None;
    }
    let mut p = vec![0f32; conv_packed_len(groups, cout_g, kk)?];
    let panels = cout_g.div_ceil(MR);
    for (g, dst) in p.chunks_exact_mut(panels * MR * (kk + 1)).enumerate() {
        for co in 0..cout_g {
            dst[co] = bias.map_or(0.0, |b| b[g * cout_g + co]);
            for r in 0..kk {
                dst[conv_weight_at(panels, kk, co, r, layout)] = w(g * cout_g + co, r);
            }
        }
    }
    Some(p)
}

/// Where weight `(co, r)` of a group lies in its packed weights: after the group's biases
/// (`panels · MR`), blocks of [`CONV_KC`] terms, each holding every panel's rows of the
/// block in turn (`rows · MR` elements per panel), so that a block's weights are read in
/// order; with [`ConvLayout::Pairs`], each pair of panels' rows interleaved (panel `2q +
/// 1`'s row after panel `2q`'s, rows `2 MR` apart).
fn conv_weight_at(panels: usize, kk: usize, co: usize, r: usize, layout: ConvLayout) -> usize {
    let r0 = r / CONV_KC * CONV_KC;
    let rows = CONV_KC.min(kk - r0);
    let block = panels * MR + r0 * panels * MR;
    match layout {
        ConvLayout::Panels => block + co / MR * rows * MR + (r - r0) * MR + co % MR,
        ConvLayout::Pairs => {
            block + co / (2 * MR) * rows * 2 * MR + (r - r0) * 2 * MR + co % (2 * MR)
        }
    }
}

/// One tile of a product: what the micro-kernels read and write.
#[derive(Clone, Copy)]
struct Tile {
    /// Depth.
    k: usize,
    /// Broadcast operand: rows of `x` (`a_rs` apart, contiguous along `k`), or a packed
    /// convolution panel (after its biases), its rows `a_ks` apart ([`ConvLayout`]).
    a: *const f32,
    a_rs: usize,
    a_ks: usize,
    /// Vector operand: a packed fully-connected panel (after its biases), or `col` rows
    /// (`b_ks` apart).
    b: *const f32,
    b_ks: usize,
    /// The biases of the tile's columns (fully connected) or rows (convolution).
    bias: *const f32,
    /// Output rows, `c_rs` apart; `rows` of them are stored.
    c: *mut f32,
    c_rs: usize,
    rows: usize,
    /// Lanes of the last vector to store (convolution: to load too).
    mask: u16,
    /// Start from the output's values (a later block of terms) rather than the biases.
    acc_in: bool,
    /// Indirect convolution tiles: `col` row `r` is at `b + offs[r]` (not `b + r · b_ks`).
    offs: *const u32,
    /// Gathered fully-connected tiles (AVX-512F only; else null): the rows' terms in
    /// `segs` segments of `k / segs`, row `r`'s segment `s` at the address `ind[r · segs +
    /// s]` (not `a + r · a_rs`): an NHWC convolution's im2col rows read in place.
    ind: *const usize,
    segs: usize,
    lo: f32,
    hi: f32,
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    use super::{MR, NR, PF_AHEAD, Tile};
    use std::arch::x86_64::*;

    /// Clamps and stores the accumulators: `max(lo, x)` then `min(hi, x)`, which keeps NaN
    /// and gives the plan's clamp step's values.
    ///
    /// # Safety
    /// AVX-512F; `t.rows` (at most `M`) rows of `V` vectors (the last one masked by
    /// `t.mask`) are writable at `t.c`. Always inlined (into the AVX-512F kernels): a call
    /// would take the accumulators' address, and the kernel then kept them in memory.
    #[inline(always)]
    unsafe fn store<const M: usize, const V: usize>(acc: &[[__m512; V]; M], t: &Tile) {
        // SAFETY: the CPU has AVX-512F (caller's contract).
        let (lo, hi) = unsafe { (_mm512_set1_ps(t.lo), _mm512_set1_ps(t.hi)) };
        for (r, row) in acc.iter().enumerate().take(t.rows) {
            // SAFETY: row `r < t.rows` of the tile (caller's contract).
            let c = unsafe { t.c.add(r * t.c_rs) };
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: AVX-512F, as above.
                let y = unsafe { _mm512_min_ps(hi, _mm512_max_ps(lo, x)) };
                // SAFETY: vector `v` of the row; the last one only in its masked lanes.
                unsafe {
                    if v + 1 < V {
                        _mm512_storeu_ps(c.add(16 * v), y);
                    } else {
                        _mm512_mask_storeu_ps(c.add(16 * v), t.mask, y);
                    }
                }
            }
        }
    }

    /// A fully-connected tile: `M` rows of `x` × `16 V` columns of a packed panel, the
    /// rows' terms in `t.segs` segments (one unless the rows are gathered, `t.ind`).
    ///
    /// # Safety
    /// AVX-512F; `t.a` addresses `M` rows of `t.k` elements `t.a_rs` apart (or, with
    /// `t.ind` not null, `t.ind` addresses `M · t.segs` addresses of `t.k / t.segs`
    /// readable elements each, `t.segs` dividing `t.k`), `t.b` a panel of `t.k` rows of
    /// [`NR`] and `t.bias` `NR` biases; the output as in [`store`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fc<const M: usize, const V: usize>(t: &Tile) {
        let mut acc = [[_mm512_setzero_ps(); V]; M];
        for v in 0..V {
            // SAFETY: the panel's biases.
            let bv = unsafe { _mm512_loadu_ps(t.bias.add(16 * v)) };
            for row in acc.iter_mut() {
                row[v] = bv;
            }
        }
        let seg = t.k / t.segs.max(1);
        let mut b = t.b;
        for s in 0..t.segs {
            let mut a = [t.a; M];
            for (r, p) in a.iter_mut().enumerate() {
                // SAFETY: row `r` of `x`, or its segment `s`'s address in the table.
                *p = unsafe {
                    match t.ind.is_null() {
                        true => t.a.add(r * t.a_rs),
                        false => *t.ind.add(r * t.segs + s) as *const f32,
                    }
                };
            }
            for kk in 0..seg {
                let mut bv = [_mm512_setzero_ps(); V];
                for (v, x) in bv.iter_mut().enumerate() {
                    // SAFETY: panel row `kk` has `NR >= 16 V` elements.
                    *x = unsafe { _mm512_loadu_ps(b.add(16 * v)) };
                }
                for (row, p) in acc.iter_mut().zip(&a) {
                    // SAFETY: element `kk` of a row (segment) of `x`.
                    let av = _mm512_set1_ps(unsafe { *p.add(kk) });
                    for (x, &w) in row.iter_mut().zip(&bv) {
                        *x = _mm512_fmadd_ps(av, w, *x);
                    }
                }
                // SAFETY: the next panel row (one past the last at the end).
                b = unsafe { b.add(NR) };
            }
        }
        // SAFETY: the caller's contract.
        unsafe { store(&acc, t) }
    }

    /// A convolution tile: the [`MR`] channels of a packed panel × `16 V` pixels of `col`
    /// (the last vector loaded in `t.mask`'s lanes only); with `IND`, `col` row `r` is at
    /// `t.b + t.offs[r]`, else at `t.b + r · t.b_ks`. With `PF`, the weights are
    /// prefetched ahead.
    ///
    /// # Safety
    /// AVX-512F; `t.a` addresses a panel of `t.k` rows of `MR` (`t.a_ks` apart), `t.bias`
    /// `MR` biases, `t.b`
    /// `t.k` rows (`t.offs` `t.k` offsets with `IND`) of `16 V` elements (the last vector's
    /// masked lanes only); the output as in [`store`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn conv<const V: usize, const IND: bool, const PF: bool>(t: &Tile) {
        let mut acc = [[_mm512_setzero_ps(); V]; MR];
        if t.acc_in {
            for (r, row) in acc.iter_mut().enumerate().take(t.rows) {
                // SAFETY: row `r < t.rows` of the tile, the last vector in its lanes only.
                let c = unsafe { t.c.add(r * t.c_rs) };
                for (v, x) in row.iter_mut().enumerate() {
                    *x = unsafe {
                        if v + 1 < V {
                            _mm512_loadu_ps(c.add(16 * v))
                        } else {
                            _mm512_maskz_loadu_ps(t.mask, c.add(16 * v))
                        }
                    };
                }
            }
        } else {
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: the panel's biases.
                let bv = _mm512_set1_ps(unsafe { *t.bias.add(r) });
                for x in row.iter_mut() {
                    *x = bv;
                }
            }
        }
        let (mut a, mut b) = (t.a, t.b);
        for kk in 0..t.k {
            if IND {
                // SAFETY: offset `kk` of the table; the row it gives is inside the input.
                b = unsafe { t.b.add(*t.offs.add(kk) as usize) };
            }
            let mut bv = [_mm512_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                // SAFETY: a `col` row's vector `v` (the last in its masked lanes only).
                *x = unsafe {
                    if v + 1 < V {
                        _mm512_loadu_ps(b.add(16 * v))
                    } else {
                        _mm512_maskz_loadu_ps(t.mask, b.add(16 * v))
                    }
                };
            }
            if PF {
                // Weights are read once per tile group, mostly from memory: fetch them
                // ahead (a hint; the address need not be inside the weights).
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PF_AHEAD) as *const i8);
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: weight `r` of the panel row.
                let av = _mm512_set1_ps(unsafe { *a.add(r) });
                for (x, &w) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, w, *x);
                }
            }
            // SAFETY: the next rows (one past the last at the end; `b` may step past the
            // end of its slice only by `wrapping_add`, it is not read then).
            a = unsafe { a.add(t.a_ks) };
            b = b.wrapping_add(t.b_ks);
        }
        // SAFETY: the caller's contract.
        unsafe { store(&acc, t) }
    }
}

type TileFn = unsafe fn(&Tile);

/// The fully-connected micro-kernel for `rows` rows (1 to [`MR`]) and `cols` columns (1
/// to [`NR`]).
#[cfg(target_arch = "x86_64")]
fn fc_kernel(rows: usize, cols: usize) -> TileFn {
    if !avx512() {
        return fc_kernel_avx2(rows, cols);
    }
    use kernels::fc;
    macro_rules! by_rows {
        ($v:literal) => {
            match rows {
                1 => fc::<1, $v>,
                2 => fc::<2, $v>,
                3 => fc::<3, $v>,
                4 => fc::<4, $v>,
                5 => fc::<5, $v>,
                6 => fc::<6, $v>,
                7 => fc::<7, $v>,
                _ => fc::<8, $v>,
            }
        };
    }
    if cols > 16 { by_rows!(2) } else { by_rows!(1) }
}

/// [`fc_kernel`] on AVX2: chunks of 8 columns at a time, as many as keep the accumulators
/// (rows × chunks) at 12 or fewer.
#[cfg(target_arch = "x86_64")]
fn fc_kernel_avx2(rows: usize, cols: usize) -> TileFn {
    use avx2::fc;
    macro_rules! by_rows {
        ($v:literal) => {
            match rows {
                1 => fc::<1, $v, 4>,
                2 => fc::<2, $v, 4>,
                3 => fc::<3, $v, 4>,
                4 => fc::<4, $v, 2>,
                5 => fc::<5, $v, 2>,
                6 => fc::<6, $v, 2>,
                7 => fc::<7, $v, 1>,
                _ => fc::<8, $v, 1>,
            }
        };
    }
    if cols > 16 { by_rows!(2) } else { by_rows!(1) }
}

/// The convolution micro-kernel: two vectors of pixels (`wide`) or one, phase-plane
/// windows (`ind`), prefetching (`pf`).
#[cfg(target_arch = "x86_64")]
fn conv_kernel(wide: bool, ind: bool, pf: bool) -> TileFn {
    if !avx512() {
        use avx2::conv;
        return match (wide, ind, pf) {
            (false, false, false) => conv::<1, false, false>,
            (false, false, true) => conv::<1, false, true>,
            (false, true, false) => conv::<1, true, false>,
            (false, true, true) => conv::<1, true, true>,
            (true, false, false) => conv::<2, false, false>,
            (true, false, true) => conv::<2, false, true>,
            (true, true, false) => conv::<2, true, false>,
            (true, true, true) => conv::<2, true, true>,
        };
    }
    use kernels::conv;
    macro_rules! by_flags {
        ($v:literal) => {
            match (ind, pf) {
                (false, false) => conv::<$v, false, false>,
                (false, true) => conv::<$v, false, true>,
                (true, false) => conv::<$v, true, false>,
                (true, true) => conv::<$v, true, true>,
            }
        };
    }
    if wide { by_flags!(2) } else { by_flags!(1) }
}

/// The lanes of the last vector of a tile of `cols` columns.
fn last_mask(cols: usize) -> u16 {
    let rem = cols - (cols - 1) / 16 * 16;
    if rem >= 16 {
        u16::MAX
    } else {
        (1u16 << rem) - 1
    }
}

/// Why a packed product was not run.
pub type Refused = &'static str;

/// `out[i, j] = clamp(bias[j] + sum_k x[i, k] · w[j, k], lo, hi)` for `m` rows: `x` is
/// `[m, k]` and `out` `[m, n]` (row-major), `packed` from [`pack_fc`]. Split over the
/// thread pool by blocks of rows and panels.
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[f32],
    m: usize,
    k: usize,
    packed: &[f32],
    n: usize,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    fc_checked(x, m, k, packed, n, out, lo, hi, true)
}

/// [`fully_connected`] on the calling thread alone (for callers that split the work
/// themselves).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected_serial(
    x: &[f32],
    m: usize,
    k: usize,
    packed: &[f32],
    n: usize,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    fc_checked(x, m, k, packed, n, out, lo, hi, false)
}

/// [`fully_connected`]'s checks, then the product (over the thread pool when `threaded`).
#[allow(clippy::too_many_arguments)]
fn fc_checked(
    x: &[f32],
    m: usize,
    k: usize,
    packed: &[f32],
    n: usize,
    out: &mut [f32],
    lo: f32,
    hi: f32,
    threaded: bool,
) -> Result<(), Refused> {
    if !available() {
        return Err("the CPU has neither AVX-512F nor AVX2 with FMA");
    }
    if fc_packed_len(n, k) != Some(packed.len())
        || m.checked_mul(k).is_none_or(|l| l > x.len())
        || m.checked_mul(n).is_none_or(|l| l > out.len())
    {
        return Err("operand sizes");
    }
    if m > 0 && n > 0 {
        fc_split(
            Lhs::Rows(x.as_ptr() as usize),
            m,
            k,
            packed,
            n,
            out,
            lo,
            hi,
            threaded,
        );
    }
    Ok(())
}

/// The left operand of a fully-connected product ([`fc_split`]), as addresses (`usize`,
/// for the thread pool's closures).
#[derive(Clone, Copy)]
enum Lhs {
    /// `x`: rows of `k` elements, one after another.
    Rows(usize),
    /// Gathered rows: a table of `segs` addresses a row, each of `k / segs` elements.
    Gathered { table: usize, segs: usize },
}

/// [`fully_connected`] with rows gathered from anywhere: row `i`'s terms are `segs`
/// segments of `k / segs` elements, segment `s` at the address `table[i · segs + s]`.
/// NHWC convolutions read their im2col rows in place this way (a segment a kernel row).
/// AVX-512F only (it refuses otherwise, with nothing written).
///
/// # Safety
/// Each address in `table` (`m · segs` of them) points at `k / segs` readable `f32`s that
/// no one writes during the call; `segs` divides `k`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn fully_connected_gathered(
    table: &[usize],
    segs: usize,
    (m, k): (usize, usize),
    packed: &[f32],
    n: usize,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    if !avx512() {
        return Err("gathered rows need AVX-512F");
    }
    if segs == 0
        || k % segs != 0
        || fc_packed_len(n, k) != Some(packed.len())
        || m.checked_mul(segs).is_none_or(|l| l > table.len())
        || m.checked_mul(n).is_none_or(|l| l > out.len())
    {
        return Err("operand sizes");
    }
    if m > 0 && n > 0 {
        let lhs = Lhs::Gathered {
            table: table.as_ptr() as usize,
            segs,
        };
        fc_split(lhs, m, k, packed, n, out, lo, hi, true);
    }
    Ok(())
}

/// Outputs of at least this many bytes have their rows fetched ahead ([`fc_split`]).
const FC_PF_OUT_BYTES: usize = 1 << 20;
/// How many row tiles ahead.
const FC_PF_TILES: usize = 2;

/// Whether large outputs are fetched ahead (`ETCH_FC_PREFETCH=0` / `1` forces it): on by
/// default, measured on Zen 5 (session 22: mobilenet_v2_224 at one thread 4.22-4.43
/// against 4.37-5.92 ms), except on AMD's AVX-512 cores of family 0x19 (Zen 4), where the
/// fetches slowed the 1×1 convolutions they were for: mobilenet_v2's 16 -> 96 at 112²
/// with cold outputs 754 against 490 µs without, and in the net 509 against 383
/// (`nhwc_conv_speed`, `tools/bench/ab_events.py`, session 30).
fn fc_prefetch() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var("ETCH_FC_PREFETCH") {
        Ok(v) => v != "0",
        Err(_) => !(amd_avx512() && crate::util::cpu_family() == 0x19),
    })
}

/// Whether [`fc_split`] splits many row tiles by rows rather than by blocks of panels
/// (`ETCH_FC_SPLIT_ROWS=0`: by blocks, as before session 31).
fn fc_split_rows() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_FC_SPLIT_ROWS").map_or(true, |v| v != "0"))
}

/// Prefetches the `len` elements at `p` for writing (a hint: the addresses need not be
/// valid).
fn prefetch_write(p: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
        let mut i = 0;
        while i < len {
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_ET0>(p.wrapping_add(i) as *const i8) };
            i += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// The product of [`fully_connected`] (sizes checked, AVX-512F present, `m`, `n` > 0), over
/// the thread pool when `threaded`; `lhs`'s rows as checked by the caller.
#[allow(clippy::too_many_arguments)]
fn fc_split(
    lhs: Lhs,
    m: usize,
    k: usize,
    packed: &[f32],
    n: usize,
    out: &mut [f32],
    lo: f32,
    hi: f32,
    threaded: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let panels = n.div_ceil(NR);
        let row_tiles = m.div_ceil(MR);
        // A row tile loads each weight once however few rows it has: counted as full
        // tiles, a one-row product of 5 MB of weights (1280 -> 1000) splits too.
        let work = m.max(MR).saturating_mul(n).saturating_mul(k);
        let tasks = match threaded {
            true => threads::tasks_for(work, crate::linalg::GEMM_TASK_WORK),
            false => 1,
        };
        // Blocks of panels that stay in L2, of equal sizes; with few row tiles for the
        // tasks (1×1 convolutions of 7×7 NHWC planes: 7 tiles), one panel a block, so
        // that the tasks' shares of the panels are even (blocks of 25 and 5 panels put
        // mobilenet_v3_large_224's 160 -> 960 at 7² on two threads at 1.6x XNNPACK's).
        let fit = (FC_BLOCK_BYTES / (k.max(1) * NR * 4)).clamp(1, panels);
        let per_block = match tasks > 1 && row_tiles < 4 * tasks {
            true => 1,
            false => panels.div_ceil(panels.div_ceil(fit)),
        };
        let blocks = panels.div_ceil(per_block);
        let units = blocks * row_tiles;
        let tasks = tasks.min(units);
        let o = SharedMut::new(out);
        let pp = packed.as_ptr() as usize;
        // Large outputs (1×1 convolutions of NHWC images: 4.8 MB for mobilenet_v2's
        // 16 -> 96 at 112²) are written from memory: their lines are fetched ahead.
        let pf_out = m * n * 4 >= FC_PF_OUT_BYTES && fc_prefetch();
        let unit = |blk: usize, rt: usize| {
            {
                let r0 = rt * MR;
                let rows = MR.min(m - r0);
                if pf_out && rt + FC_PF_TILES < row_tiles {
                    // This block's columns of the rows `FC_PF_TILES` tiles on, for writing.
                    let c0 = blk * per_block * NR;
                    let c1 = n.min((blk + 1) * per_block * NR);
                    let first = (r0 + FC_PF_TILES * MR) * n;
                    for r in 0..MR.min(m - r0 - FC_PF_TILES * MR) {
                        let row = o.as_ptr().wrapping_add(first + r * n) as *const f32;
                        prefetch_write(row.wrapping_add(c0), c1 - c0);
                    }
                }
                for panel in blk * per_block..panels.min((blk + 1) * per_block) {
                    let cols = NR.min(n - panel * NR);
                    let base = (pp as *const f32).wrapping_add(panel * NR * (k + 1));
                    let (a, ind, segs) = match lhs {
                        Lhs::Rows(xp) => ((xp as *const f32).wrapping_add(r0 * k), null(), 1),
                        Lhs::Gathered { table, segs } => {
                            let ind = (table as *const usize).wrapping_add(r0 * segs);
                            (null(), ind, segs)
                        }
                    };
                    let tile = Tile {
                        k,
                        a,
                        a_rs: k,
                        a_ks: 0,
                        b: base.wrapping_add(NR),
                        b_ks: NR,
                        bias: base,
                        c: o.as_ptr().wrapping_add(r0 * n + panel * NR),
                        c_rs: n,
                        rows,
                        mask: last_mask(cols),
                        acc_in: false,
                        offs: null(),
                        ind,
                        segs,
                        lo,
                        hi,
                    };
                    // SAFETY: AVX-512F (or AVX2 and FMA) was detected (AVX-512F for
                    // gathered rows); rows `r0..r0 + rows` of `x` (or their table entries,
                    // whose addresses the caller vouches for) and the panel lie inside their
                    // slices (sizes checked above); the tile's output elements are inside
                    // `out` and belong to this unit only.
                    unsafe { fc_kernel(rows, cols)(&tile) }
                }
            }
        };
        match tasks > 1 && row_tiles >= 4 * tasks && fc_split_rows() {
            // Many row tiles: the tasks split the rows (pixels), each running every block
            // over the rows it claims, so that consecutive operations split the same way
            // (by pixels) find their data in the cache of the core that wrote it.
            true => threads::run_shares(row_tiles, tasks, &|_, range| {
                for blk in 0..blocks {
                    range.clone().for_each(|rt| unit(blk, rt));
                }
            }),
            false => threads::run_shares(units, tasks, &|_, range| {
                range.for_each(|u| unit(u / row_tiles, u % row_tiles));
            }),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (lhs, m, k, packed, n, out, lo, hi, threaded);
}

/// The geometry of a convolution on NCHW tensors (any strides for the input; the output's
/// planes contiguous).
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    /// Batch size.
    pub n: usize,
    /// Groups.
    pub groups: usize,
    /// Input channels per group.
    pub cin_g: usize,
    /// Output channels per group.
    pub cout_g: usize,
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Input strides (N, C, H, W), in elements.
    pub xs: [usize; 4],
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Output batch and channel strides (pixels are contiguous within a channel).
    pub os: [usize; 2],
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Padding (top = bottom, left = right).
    pub pad: [usize; 2],
    /// Dilation (height, width).
    pub dil: [usize; 2],
}

impl ConvShape {
    fn kk(&self) -> usize {
        self.cin_g * self.kernel[0] * self.kernel[1]
    }

    /// A 1×1 stride-1 convolution whose input planes are contiguous: `col` is the input.
    /// One-pixel planes (squeeze-excitation convolutions on pooled values, which XNNPACK
    /// graphs give strides `[c, 1, c, c]`) are, whatever their row and column strides.
    fn direct(&self) -> bool {
        self.kernel == [1, 1]
            && self.stride == [1, 1]
            && self.pad == [0, 0]
            && (self.h * self.w == 1 || self.xs[3] == 1 && (self.h == 1 || self.xs[2] == self.w))
    }

    /// Whether every input and output element the product addresses lies in slices of
    /// `x_len` and `o_len` elements, and the output size is the convolution's.
    fn fits(&self, x_len: usize, o_len: usize) -> bool {
        let last = |sizes: &[usize], strides: &[usize]| -> Option<usize> {
            sizes
                .iter()
                .zip(strides)
                .try_fold(0usize, |acc, (&s, &st)| {
                    acc.checked_add(s.checked_sub(1)?.checked_mul(st)?)
                })
        };
        let c = self.groups.checked_mul(self.cin_g);
        let co = self.groups.checked_mul(self.cout_g);
        let (Some(c), Some(co), Some(npix)) = (c, co, self.oh.checked_mul(self.ow)) else {
            return false;
        };
        let out_len = |i: usize, a: usize| -> Option<usize> {
            let eff = self.dil[a]
                .checked_mul(self.kernel[a].checked_sub(1)?)?
                .checked_add(1)?;
            let padded = i.checked_add(self.pad[a].checked_mul(2)?)?;
            Some(padded.checked_sub(eff)? / self.stride[a].max(1) + 1)
        };
        let any_empty = [self.n, c, co, self.h, self.w, npix].contains(&0);
        !any_empty
            && self.stride[0] > 0
            && self.stride[1] > 0
            && out_len(self.h, 0) == Some(self.oh)
            && out_len(self.w, 1) == Some(self.ow)
            && last(&[self.n, c, self.h, self.w], &self.xs).is_some_and(|l| l < x_len)
            && last(&[self.n, co, npix], &[self.os[0], self.os[1], 1]).is_some_and(|l| l < o_len)
    }
}

/// Copies `col` rows `rows` (terms `r = (ci · kh + i) · kw + j`) of pixels `p0..p0 + len`
/// of (batch item, group) `(b, g)` into `col` (`NR` elements per row).
///
/// Kernel position by kernel position: the tile's pixels read the same offsets in every
/// input channel, so their offsets (or padding) are worked out once per position and the
/// channels' rows are then plain copies (a contiguous run) or gathers through that table.
/// Dividing out `(ci, i, j)` and each pixel's row for every `col` row took 8 % of a
/// resnet18 run at 128² (its 4×4 layers: 16 pixels, 4608 rows).
#[allow(clippy::too_many_arguments)]
fn im2col(
    s: &ConvShape,
    x: &[f32],
    b: usize,
    g: usize,
    p0: usize,
    len: usize,
    rows: std::ops::Range<usize>,
    col: &mut [f32],
) {
    let [kh, kw] = s.kernel;
    let ([sh, sw], [ph, pw], [dh, dw]) = (s.stride, s.pad, s.dil);
    let taps = kh * kw;
    let base = b * s.xs[0] + g * s.cin_g * s.xs[1];
    // Each pixel's input offset from its channel's first element, `usize::MAX`: padding.
    let mut offs = [0usize; NR];
    let offs = &mut offs[..len];
    for tap in 0..taps {
        // Rows `ci · taps + tap` inside `rows`.
        let first = rows.start.saturating_sub(tap).div_ceil(taps);
        let end = rows.end.saturating_sub(tap).div_ceil(taps);
        if first >= end {
            continue;
        }
        let (i, j) = (tap / kw, tap % kw);
        let (mut y, mut ox) = (p0 / s.ow, p0 % s.ow);
        for o in offs.iter_mut() {
            let ih = (y * sh + i * dh).wrapping_sub(ph);
            let iw = (ox * sw + j * dw).wrapping_sub(pw);
            *o = if ih < s.h && iw < s.w {
                ih * s.xs[2] + iw * s.xs[3]
            } else {
                usize::MAX
            };
            ox += 1;
            if ox == s.ow {
                (y, ox) = (y + 1, 0);
            }
        }
        let run = offs[0] != usize::MAX
            && offs
                .iter()
                .enumerate()
                .all(|(q, &o)| o == offs[0].wrapping_add(q));
        for ci in first..end {
            let at = (ci * taps + tap - rows.start) * NR;
            let dst = &mut col[at..at + len];
            let src = base + ci * s.xs[1];
            if run {
                dst.copy_from_slice(&x[src + offs[0]..src + offs[0] + len]);
            } else {
                for (d, &o) in dst.iter_mut().zip(offs.iter()) {
                    *d = if o == usize::MAX { 0.0 } else { x[src + o] };
                }
            }
        }
    }
}

/// How a convolution is split: pixel tiles (of up to [`NR`] pixels), groups of up to
/// [`CONV_TILES`] of them per (batch item, group), ranges ("chunks") of output-channel
/// panels, and units of work (one tile group × one chunk) handed out to tasks.
///
/// Indirect convolutions (any but 1×1 ones) read a zero-padded copy of the input split
/// into `sh · sw` stride phases (phase `(a, b)` of a plane holds padded rows `a, a + sh,
/// …` and columns `b, b + sw, …`), so that term `(ci, i, j)` of output pixel `(y, x)` is
/// element `(y + i·dh / sh, x + j·dw / sw)` of phase `(i·dh % sh, j·dw % sw)`: a `col` row
/// of consecutive pixels of an output row is a window of a phase plane, at a table of
/// offsets, with no im2col. Their tiles either stay within output rows
/// ([`Mode::Rows`]), or run over a "wide" grid of `oh` rows of `phase_w` pixels
/// ([`Mode::Wide`]: the columns past `ow` read the next row and are dropped), computed
/// into scratch and copied out after the last block of terms. The mode that costs the
/// fewest vector lanes ([`lanes`]) is taken, an im2col counted 15% dearer.
#[derive(Clone, Copy, Debug)]
struct ConvPlan {
    /// Terms per output (`cin_g · kh · kw`).
    kk: usize,
    /// Pixel tiles per tile group.
    group: usize,
    /// Direct convolutions: the plane's last pixels computed by a column tile ([`cols`]),
    /// after the last tile group's pixel tiles (0 to [`cols::MAX_COLS`]).
    cols: usize,
    mode: Mode,
    /// Tiles per output row ([`Mode::Rows`]).
    per_row: usize,
    /// Pixel tiles per (batch item, group).
    tiles: usize,
    /// Tile groups per (batch item, group).
    per_item: usize,
    /// Panels of [`MR`] output channels per group.
    panels: usize,
    /// Panel ranges per tile group.
    chunks: usize,
    /// Units of work: (item, tile group, chunk), the chunk varying fastest; or, with
    /// `by_panels`, (item, chunk, tile group).
    units: usize,
    /// Whether the units of an item run chunk by chunk (each chunk over every tile group):
    /// with few tile groups, no im2col to share between a group's chunks and more weights
    /// than inputs (output channels than pixels), the tasks then split the output channels
    /// evenly rather than tile groups of unequal size (14² planes: 4 tiles and 2 plus
    /// columns), each reading half the weights. (With more inputs, reading all of them in
    /// every task cost more than the imbalance: mobilenet's 192 → 32 on 28², 60 → 90 µs.)
    by_panels: bool,
    tasks: usize,
    /// im2col scratch per task.
    col_len: usize,
    /// Width and size of a phase plane (indirect modes).
    phase_w: usize,
    phase: usize,
}

/// Where a convolution's `col` rows come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The input itself (1×1, stride 1, contiguous planes).
    Direct,
    /// An im2col of each tile group, per block of terms.
    Im2col,
    /// Phase planes, tiles within output rows.
    Rows,
    /// Phase planes, tiles over the wide grid (output through scratch).
    Wide,
    /// Phase planes, the lanes over output channels and the broadcasts over the pixels of
    /// an output row ([`pixels`]): small planes.
    Pixels,
}

/// Pixel tiles per tile group of a direct (1×1) convolution. [`CONV_TILES`], whose input
/// rows stay in L1 while every panel passes over them, unless the output is larger than
/// L2 ([`DIRECT_OUT_L2`]): then each output plane is written in runs long enough for the
/// hardware prefetcher to follow (one run per plane and tile group: with short runs on
/// many planes, the misses of the stores' line fills are not overlapped), and the tile
/// group's input rows, now read from L2 by each panel, take up to [`DIRECT_GROUP_BYTES`].
fn direct_group(s: &ConvShape, kk: usize) -> usize {
    let out_bytes = s.cout_g.saturating_mul(s.oh * s.ow).saturating_mul(4);
    if out_bytes > DIRECT_OUT_L2 {
        (DIRECT_GROUP_BYTES / (CONV_KC.min(kk) * NR * 4)).max(CONV_TILES)
    } else {
        CONV_TILES
    }
}

/// Tile groups of near-equal size (at most `group` tiles) for `tasks` tasks; a single
/// (batch item, group) whose tiles fall into few groups takes a multiple of `tasks` of
/// them, so that each task's contiguous share of the units holds as many tiles
/// (112² planes of 392 direct tiles had groups of 128, 128, 128 and 8: two threads took
/// 256 and 136 tiles; 14² planes of 6 tiles, 4 and 2).
fn balanced_group(tiles: usize, group: usize, items: usize, tasks: usize) -> usize {
    if tasks <= 1 {
        return group;
    }
    let mut groups = tiles.div_ceil(group.max(1));
    if items == 1 && groups < 4 * tasks {
        groups = groups.next_multiple_of(tasks);
    }
    tiles.div_ceil(groups).max(1)
}

/// Whether direct planes end in column tiles (the tests time and check both ways).
fn cols_enabled() -> bool {
    #[cfg(test)]
    return !tests::NO_COLS.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    true
}

/// The cost of `n` pixels in tiles of [`NR`], in lanes of a two-vector tile: a last tile
/// of up to 16 pixels takes one vector, at 18 (it is bound by its loads: 9 per 8
/// multiply-adds, where two-vector tiles are bound by their 16 multiply-adds).
fn lanes(n: usize) -> usize {
    match n % NR {
        0 => n,
        r => n - r + if r <= 16 { 18 } else { NR },
    }
}

impl ConvPlan {
    /// The plan of `s`: in `force`'s mode where it can take it, else the cheapest;
    /// [`Mode::Pixels`] only with `pixels` (weights packed at load).
    fn new(s: &ConvShape, force: Option<Mode>, pixels: bool) -> Self {
        let (kk, npix) = (s.kk(), s.oh * s.ow);
        let [sh, sw] = s.stride;
        let phase_w = (s.w + 2 * s.pad[1]).div_ceil(sw);
        let phase = (s.h + 2 * s.pad[0]).div_ceil(sh) * phase_w;
        let per_row = s.ow.div_ceil(NR);
        let mode = if s.direct() {
            Mode::Direct
        } else if force == Some(Mode::Im2col)
            || s.kernel == [1, 1]
            // Offsets into an item's phase planes are `u32`.
            || s.cin_g.saturating_mul(sh * sw).saturating_mul(phase) >= u32::MAX as usize
        {
            Mode::Im2col
        } else {
            // Term-lanes of each mode (per output channel), plus the wide grid's copy to
            // the output.
            let rows = s.oh * lanes(s.ow) * kk;
            let wide = lanes(s.oh * phase_w) * kk + npix * WIDE_COPY;
            let im2col = lanes(npix) * 115 / 100 * kk;
            let px = pixels::cost(s, kk).filter(|_| pixels);
            match force.filter(|&m| m != Mode::Direct) {
                Some(Mode::Pixels) if px.is_some() => Mode::Pixels,
                Some(m) if m != Mode::Pixels => m,
                _ if px.is_some_and(|c| c < rows.min(wide).min(im2col)) && pixels::worth(s) => {
                    Mode::Pixels
                }
                _ if rows < wide && rows <= im2col => Mode::Rows,
                _ if wide <= im2col => Mode::Wide,
                _ => Mode::Im2col,
            }
        };
        // A direct plane of `16 k + 1` to `16 k + 4` pixels: the last ones in a column tile.
        let cols = match npix % 16 {
            r if mode == Mode::Direct && r <= cols::MAX_COLS && cols_enabled() => r,
            _ => 0,
        };
        let tiles = match mode {
            Mode::Rows => s.oh * per_row,
            Mode::Pixels => s.oh * pixels::row_tiles(s.ow).0,
            Mode::Wide => (s.oh * phase_w).div_ceil(NR),
            // At least one (empty when all pixels are columns), which carries the columns.
            _ => (npix - cols).div_ceil(NR).max(1),
        };
        let panels = s.cout_g.div_ceil(MR);
        let items = s.n * s.groups;
        // A tile (or column tile) loads each weight once however few pixels it has:
        // planes under a tile count as one, so that one-pixel convolutions of large
        // weights (squeeze-excitation, 960 -> 240) split too, as one-row products do.
        let work = items
            .saturating_mul(s.cout_g)
            .saturating_mul(kk)
            .saturating_mul(npix.max(NR));
        let tasks = threads::tasks_for(work, crate::conv::CONV_TASK_WORK);
        let group = if mode == Mode::Direct {
            direct_group(s, kk)
        } else {
            CONV_TILES
        };
        let group = balanced_group(tiles, group, items, tasks);
        let per_item = tiles.div_ceil(group);
        // Few tile groups: each also takes a range of the panels. A task's consecutive
        // units of one tile group run as one (one im2col for all their panels).
        let chunks = if tasks > 1 && items * per_item < 4 * tasks {
            (4 * tasks).div_ceil(items * per_item).min(panels)
        } else {
            1
        };
        let units = if mode == Mode::Pixels {
            pixels::units(s)
        } else {
            items * per_item * chunks
        };
        let by_panels = chunks > 1 && mode != Mode::Im2col && s.cout_g > npix;
        let col_len = match mode {
            Mode::Im2col => CONV_TILES * CONV_KC.min(kk) * NR,
            Mode::Pixels => pixels::scratch_len(s),
            _ => 0,
        };
        ConvPlan {
            kk,
            group,
            cols,
            mode,
            per_row,
            tiles,
            per_item,
            panels,
            chunks,
            units,
            by_panels,
            tasks: tasks.min(units),
            col_len,
            phase_w,
            phase,
        }
    }

    /// Whether `col` rows are windows of phase planes.
    fn indirect(&self) -> bool {
        matches!(self.mode, Mode::Rows | Mode::Wide | Mode::Pixels)
    }

    /// Tile `t` of an item: its first pixel in the output plane (in the wide grid for
    /// [`Mode::Wide`]), its length, and its first pixel's offset in a phase plane.
    fn tile_at(&self, s: &ConvShape, t: usize) -> (usize, usize, usize) {
        match self.mode {
            Mode::Rows => {
                let (y, x0) = (t / self.per_row, t % self.per_row * NR);
                (y * s.ow + x0, NR.min(s.ow - x0), y * self.phase_w + x0)
            }
            Mode::Wide => {
                let n = s.oh * self.phase_w;
                (t * NR, NR.min(n - t * NR), t * NR)
            }
            _ => {
                let n = s.oh * s.ow - self.cols;
                (t * NR, n.saturating_sub(t * NR).min(NR), 0)
            }
        }
    }

    /// Elements of an item's phase planes (`cin_g` planes of `sh · sw` phases).
    fn item_planes(&self, s: &ConvShape) -> usize {
        s.cin_g * s.stride[0] * s.stride[1] * self.phase
    }

    /// Elements of an item's wide output (`cout_g` planes of `oh · phase_w`).
    fn item_wide(&self, s: &ConvShape) -> usize {
        s.cout_g * s.oh * self.phase_w
    }
}

/// The phase planes of an indirect convolution (see [`ConvPlan`]), split over its tasks.
fn pad_planes(s: &ConvShape, p: &ConvPlan, x: &[f32], padded: &mut [f32]) {
    let [sh, sw] = s.stride;
    let per_plane = sh * sw * p.phase;
    let planes = s.n * s.groups * s.cin_g;
    let dst = SharedMut::new(padded);
    threads::run_parts(planes, p.tasks, &|range| {
        for q in range {
            // SAFETY: plane `q` is written by this part only.
            let d = unsafe { dst.slice(q * per_plane, per_plane) };
            let (item, ci) = (q / s.cin_g, q % s.cin_g);
            let (b, g) = (item / s.groups, item % s.groups);
            let base = b * s.xs[0] + (g * s.cin_g + ci) * s.xs[1];
            for (ph, d) in d.chunks_exact_mut(p.phase).enumerate() {
                let (a, c) = (ph / sw, ph % sw);
                // Phase columns whose input column `c + X·sw - pad` is inside the image.
                let lo = s.pad[1].saturating_sub(c).div_ceil(sw);
                let hi = (s.pad[1] + s.w)
                    .saturating_sub(c)
                    .div_ceil(sw)
                    .min(p.phase_w);
                for (yy, row) in d.chunks_exact_mut(p.phase_w).enumerate() {
                    let y = (a + yy * sh).checked_sub(s.pad[0]).filter(|&y| y < s.h);
                    let Some(y) = y.filter(|_| lo < hi) else {
                        row.fill(0.0);
                        continue;
                    };
                    row[..lo].fill(0.0);
                    row[hi..].fill(0.0);
                    let (step, first) = (sw * s.xs[3], c + lo * sw - s.pad[1]);
                    let src = base + y * s.xs[2] + first * s.xs[3];
                    let mid = &mut row[lo..hi];
                    if step == 1 {
                        mid.copy_from_slice(&x[src..src + mid.len()]);
                    } else {
                        gather(&x[src..], step, mid);
                    }
                }
            }
        }
    });
}

/// `dst[i] = x[i · step]`; stride 2 (every stride-2 convolution's phase planes) in blocks of
/// 16 from 32 consecutive elements, which the compiler turns into vector shuffles (AVX-512
/// or AVX2 ones, as the packed products run).
fn gather(x: &[f32], step: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn avx512(x: &[f32], step: usize, dst: &mut [f32]) {
            gather_rows(x, step, dst)
        }
        #[target_feature(enable = "avx2")]
        fn avx2(x: &[f32], step: usize, dst: &mut [f32]) {
            gather_rows(x, step, dst)
        }
        // SAFETY: phase planes are built only for `conv2d_with`, which checked `available()`
        // (AVX-512F, or else AVX2).
        unsafe {
            match self::avx512() {
                true => avx512(x, step, dst),
                false => avx2(x, step, dst),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    gather_rows(x, step, dst)
}

/// [`gather`]'s loops.
#[inline(always)]
fn gather_rows(x: &[f32], step: usize, dst: &mut [f32]) {
    let mut done = 0;
    if step == 2 && !fill_scratch() {
        for (d, s) in dst.chunks_exact_mut(16).zip(x.chunks_exact(32)) {
            for (i, d) in d.iter_mut().enumerate() {
                *d = s[2 * i];
            }
            done += 16;
        }
    }
    for (i, d) in dst.iter_mut().enumerate().skip(done) {
        *d = x[i * step];
    }
}

/// Whether the convolution's scratch is filled and its stride-2 gather scalar, as before
/// (the tests time and check both ways).
fn fill_scratch() -> bool {
    #[cfg(test)]
    return tests::OLD_PAD.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    false
}

/// What the tasks of a convolution read and write.
struct ConvOps<'a> {
    x: &'a [f32],
    packed: &'a [f32],
    layout: ConvLayout,
    /// The phase planes, the term offsets and the wide output (indirect convolutions;
    /// else empty).
    padded: &'a [f32],
    offs: &'a [u32],
    wide: SharedMut<'a, f32>,
    out: SharedMut<'a, f32>,
    /// Unpacked weights (rows `ld` apart) and bias, each panel's block packed by the unit
    /// that uses it, into its task's buffer (small planes: few units read each weight).
    lazy: Option<RowWeights<'a>>,
    lo: f32,
    hi: f32,
}

/// Unpacked weights: rows of terms, the row stride, the bias.
type RowWeights<'a> = (&'a [f32], usize, Option<&'a [f32]>);

/// Elements of a task's buffer for one panel's block of packed weights (its biases, then
/// up to [`CONV_KC`] rows of [`MR`]).
const LAZY_LEN: usize = MR * (CONV_KC + 1);

/// Packs the biases of channels `co..co + MR` and their weights of terms `r0..r1` (rows
/// `ld` apart in `w`; channels past `n` zero) into `dst` as one panel's block.
#[allow(clippy::too_many_arguments)]
fn pack_block(
    dst: &mut [f32],
    w: &[f32],
    ld: usize,
    bias: Option<&[f32]>,
    co: usize,
    n: usize,
    r0: usize,
    r1: usize,
) {
    let (b, rows) = dst.split_at_mut(MR);
    let rows = &mut rows[..(r1 - r0) * MR];
    for rr in 0..MR {
        let c = co + rr;
        b[rr] = match bias {
            Some(bias) if c < n => bias[c],
            _ => 0.0,
        };
        if c < n {
            for (k, &v) in w[c * ld + r0..c * ld + r1].iter().enumerate() {
                rows[k * MR + rr] = v;
            }
        } else {
            for k in 0..r1 - r0 {
                rows[k * MR + rr] = 0.0;
            }
        }
    }
}

/// Units `range` of a task: one at a time when they run by panels
/// ([`ConvPlan`]`::by_panels`); else runs of consecutive units of one tile group become one
/// range of panels.
fn conv_task(
    s: &ConvShape,
    p: &ConvPlan,
    ops: &ConvOps<'_>,
    range: Range<usize>,
    colt: &mut [f32],
) {
    let per = p.per_item * p.chunks;
    let mut u = range.start;
    while u < range.end {
        let (item, rest) = (u / per, u % per);
        // Chunks `c0..c1` of tile group `tg`.
        let (tg, c0, c1) = if p.by_panels {
            u += 1;
            let c = rest / p.per_item;
            (rest % p.per_item, c, c + 1)
        } else {
            let (tg, c0) = (rest / p.chunks, rest % p.chunks);
            let c1 = p.chunks.min(c0 + range.end - u);
            u += c1 - c0;
            (tg, c0, c1)
        };
        let panels = threads::part(p.panels, p.chunks, c0).start
            ..threads::part(p.panels, p.chunks, c1 - 1).end;
        conv_unit(s, p, ops, item, tg, panels.clone(), colt);
        if p.mode == Mode::Wide {
            copy_wide(s, p, ops, item, tg, panels);
        }
    }
}

/// Copies the outputs of tile group `tg` of `item`, channels of `panels`, from the wide
/// grid to the output (dropping the columns past `ow`).
fn copy_wide(
    s: &ConvShape,
    p: &ConvPlan,
    ops: &ConvOps<'_>,
    item: usize,
    tg: usize,
    panels: std::ops::Range<usize>,
) {
    let (b, g) = (item / s.groups, item % s.groups);
    let (q0, _, _) = p.tile_at(s, tg * p.group);
    let (q_last, len, _) = p.tile_at(s, p.tiles.min((tg + 1) * p.group) - 1);
    let q1 = q_last + len;
    let wide_plane = s.oh * p.phase_w;
    for co in panels.start * MR..s.cout_g.min(panels.end * MR) {
        let w0 = item * p.item_wide(s) + co * wide_plane;
        let o0 = b * s.os[0] + (g * s.cout_g + co) * s.os[1];
        let mut q = q0;
        while q < q1 {
            let (y, x) = (q / p.phase_w, q % p.phase_w);
            let end = q1.min((y + 1) * p.phase_w);
            if x < s.ow {
                let n = s.ow.min(x + end - q) - x;
                // SAFETY: the wide pixels of this unit's tiles and channels, and the output
                // pixels they give, are this unit's alone.
                unsafe {
                    let src = ops.wide.slice(w0 + q, n);
                    ops.out.slice(o0 + y * s.ow + x, n).copy_from_slice(src);
                }
            }
            q = end;
        }
    }
}

/// Tile group `tg` of (batch item, group) `item`, output channels of `panels`: per block
/// of [`CONV_KC`] terms, the tiles' im2col (unless direct or indirect), then each panel
/// over every tile.
#[allow(clippy::too_many_arguments)]
fn conv_unit(
    s: &ConvShape,
    p: &ConvPlan,
    ops: &ConvOps<'_>,
    item: usize,
    tg: usize,
    panels: std::ops::Range<usize>,
    colt: &mut [f32],
) {
    let kk = p.kk;
    let (b, g) = (item / s.groups, item % s.groups);
    let (colt, wbuf) = colt.split_at_mut(p.col_len);
    let tile_range = tg * p.group..p.tiles.min((tg + 1) * p.group);
    let group = ops
        .packed
        .as_ptr()
        .wrapping_add(g * p.panels * MR * (kk + 1));
    let wide_plane = s.oh * p.phase_w;
    let prefetch = p.mode == Mode::Direct && prefetches(s);
    for r0 in (0..kk).step_by(CONV_KC) {
        let r1 = kk.min(r0 + CONV_KC);
        if p.mode == Mode::Im2col {
            for (i, tile) in tile_range.clone().enumerate() {
                let (p0, len, _) = p.tile_at(s, tile);
                let dst = &mut colt[i * (r1 - r0) * NR..(i + 1) * (r1 - r0) * NR];
                im2col(s, ops.x, b, g, p0, len, r0..r1, dst);
            }
        }
        // Clamped after the last block only.
        let (lo, hi) = if r1 == kk {
            (ops.lo, ops.hi)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        for panel in panels.clone() {
            let co = panel * MR;
            let (a, bias) = match ops.lazy {
                Some((w, ld, bias)) => {
                    pack_block(wbuf, w, ld, bias, co, s.cout_g, r0, r1);
                    (wbuf[MR..].as_ptr(), wbuf.as_ptr())
                }
                None => (
                    group.wrapping_add(conv_weight_at(p.panels, kk, co, r0, ops.layout)),
                    group.wrapping_add(co),
                ),
            };
            if p.cols > 0 && tile_range.end == p.tiles && ops.lazy.is_some() {
                // Lazily packed weights: one panel at a time.
                let tile = col_tile(s, p, ops, item, co..co + MR, r0..r1, (a, bias), (lo, hi));
                // SAFETY: as for the panels' columns after this loop.
                unsafe { cols::kernel(p.cols, 1)(&tile) }
            }
            for (i, tile) in tile_range.clone().enumerate() {
                let (p0, len, q0) = p.tile_at(s, tile);
                if len == 0 {
                    continue;
                }
                if prefetch {
                    let first = panel == panels.start;
                    prefetch_direct(s, ops, item, co, r0..r1, p0, first);
                }
                let (bp, b_ks) = match p.mode {
                    Mode::Direct => {
                        let off = b * s.xs[0] + (g * s.cin_g + r0) * s.xs[1] + p0;
                        (ops.x.as_ptr().wrapping_add(off), s.xs[1])
                    }
                    // (Pixel tiles never come here: `pixels::task`.)
                    Mode::Rows | Mode::Wide | Mode::Pixels => {
                        let off = item * p.item_planes(s) + q0;
                        (ops.padded.as_ptr().wrapping_add(off), 0)
                    }
                    Mode::Im2col => (colt.as_ptr().wrapping_add(i * (r1 - r0) * NR), NR),
                };
                let (c, c_rs) = if p.mode == Mode::Wide {
                    let off = item * p.item_wide(s) + co * wide_plane + p0;
                    (ops.wide.as_ptr().wrapping_add(off), wide_plane)
                } else {
                    let off = b * s.os[0] + (g * s.cout_g + co) * s.os[1] + p0;
                    (ops.out.as_ptr().wrapping_add(off), s.os[1])
                };
                let tile = Tile {
                    k: r1 - r0,
                    a,
                    a_rs: 1,
                    // Lazily packed blocks: panels.
                    a_ks: if ops.lazy.is_some() {
                        MR
                    } else {
                        ops.layout.row_step()
                    },
                    b: bp,
                    b_ks,
                    bias,
                    c,
                    c_rs,
                    rows: MR.min(s.cout_g - co),
                    mask: last_mask(len),
                    acc_in: r0 > 0,
                    offs: ops.offs.as_ptr().wrapping_add(r0),
                    ind: std::ptr::null(),
                    segs: 1,
                    lo,
                    hi,
                };
                let kernel = conv_kernel(len > 16, p.indirect(), i == 0);
                // SAFETY: AVX-512F (or AVX2 and FMA) was detected (`conv2d`); the panel's
                // rows `r0..r1` lie in `packed` (its length checked) or, lazily packed, in
                // `wbuf`; `col` rows are the tile's im2col rows,
                // input pixels `p0..p0 + len` of channels `r0..r1` (`fits` checked the
                // input's extent), or windows of the phase planes (inside them and their
                // slack, see `conv2d`), read in the mask's lanes only; the output elements
                // (channels of the panel, pixels of the tile, in `out` or the wide grid)
                // are inside their buffer and this unit's alone (its earlier blocks wrote
                // them).
                unsafe { kernel(&tile) }
            }
        }
        if p.cols > 0 && tile_range.end == p.tiles && ops.lazy.is_none() {
            // Several panels per column tile: as many accumulator chains as panels.
            let np = cols::max_panels(p.cols);
            for pc in panels.clone().step_by(np) {
                let pe = panels.end.min(pc + np);
                let (co, rows) = (pc * MR, (r1 - r0) * MR);
                let a = group.wrapping_add(conv_weight_at(p.panels, kk, co, r0, ops.layout));
                let chans = co..s.cout_g.min(pe * MR);
                let mut tile = col_tile(s, p, ops, item, chans, r0..r1, (a, group), (lo, hi));
                // Panel `j`'s rows of the block `rows · MR` after panel `j - 1`'s, its
                // biases `MR` after.
                (tile.a_rs, tile.bias) = (rows, group.wrapping_add(co));
                // SAFETY: AVX-512F (or AVX2 and FMA) was detected (`conv2d`); the panels'
                // rows of the block and their biases lie in `packed`; the columns' input pixels (channels
                // `r0..r1`) and output pixels (the panels' channels) are inside `x` and
                // `out` (`fits`), the latter this unit's alone (the last tile group's).
                unsafe { cols::kernel(p.cols, pe - pc)(&tile) }
            }
        }
    }
}

/// Direct tiles of planes of at least this many pixels prefetch ahead
/// ([`prefetch_direct`]); smaller planes stay in cache between layers.
const PF_MIN_PIXELS: usize = 1024;
/// How many tiles ahead a direct tile prefetches its input rows (the first panel of a
/// unit, which reads them from memory) and its output rows (every panel).
const PF_IN_TILES: usize = 2;
const PF_OUT_TILES: usize = 4;

/// Whether the direct tiles of `s` prefetch: planes of [`PF_MIN_PIXELS`] or more, unless
/// `ETCH_CONV_PREFETCH=0` (never, for comparisons).
fn prefetches(s: &ConvShape) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("ETCH_CONV_PREFETCH").map_or(true, |v| v != "0"));
    on && s.oh * s.ow >= PF_MIN_PIXELS
}

/// Before a direct tile (of a convolution that [`prefetches`]) at pixel `p0` of (batch
/// item, group) `item`, channels from `co`, terms `rs`: prefetches the output rows of the
/// panel [`PF_OUT_TILES`] tiles ahead and, for the unit's `first` panel, the input rows
/// [`PF_IN_TILES`] ahead. Large 1×1 layers
/// (mobilenet_v2's 16 -> 96 and 32 -> 16 at 112²) read 16-144 input planes and write as
/// many output planes at once, more streams than the hardware prefetchers follow: with
/// inputs and outputs out of cache they ran at 20-50 GMAC/s, and these hints took the
/// six such layers of mobilenet_v2_224 from 0.96-1.16 to 0.82-0.91 ms in the network.
fn prefetch_direct(
    s: &ConvShape,
    ops: &ConvOps<'_>,
    item: usize,
    co: usize,
    rs: std::ops::Range<usize>,
    p0: usize,
    first: bool,
) {
    let npix = s.oh * s.ow;
    let (b, g) = (item / s.groups, item % s.groups);
    let ahead = p0 + PF_OUT_TILES * NR;
    if ahead < npix {
        let off = b * s.os[0] + (g * s.cout_g + co) * s.os[1] + ahead;
        let rows = MR.min(s.cout_g - co);
        prefetch_rows(ops.out.as_ptr().wrapping_add(off), rows, s.os[1]);
    }
    let ahead = p0 + PF_IN_TILES * NR;
    if first && ahead < npix {
        let off = b * s.xs[0] + (g * s.cin_g + rs.start) * s.xs[1] + ahead;
        prefetch_rows(ops.x.as_ptr().wrapping_add(off), rs.len(), s.xs[1]);
    }
}

/// Prefetches the [`NR`] elements at `x` of `rows` rows `step` apart into L1 (a hint: the
/// addresses need not be valid).
fn prefetch_rows(x: *const f32, rows: usize, step: usize) {
    #[cfg(target_arch = "x86_64")]
    for r in 0..rows {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = x.wrapping_add(r * step);
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(16) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, rows, step);
}

/// The column tile of a direct convolution's (batch item, group) `item`, channels `chans`
/// (those of one or more panels), terms `rs`, with the first panel's weights and biases
/// `(a, bias)` (see [`cols`]).
#[allow(clippy::too_many_arguments)]
fn col_tile(
    s: &ConvShape,
    p: &ConvPlan,
    ops: &ConvOps<'_>,
    item: usize,
    chans: std::ops::Range<usize>,
    rs: std::ops::Range<usize>,
    (a, bias): (*const f32, *const f32),
    (lo, hi): (f32, f32),
) -> Tile {
    let (b, g) = (item / s.groups, item % s.groups);
    let px = s.oh * s.ow - p.cols;
    let x0 = b * s.xs[0] + (g * s.cin_g + rs.start) * s.xs[1] + px;
    let o0 = b * s.os[0] + (g * s.cout_g + chans.start) * s.os[1] + px;
    Tile {
        k: rs.len(),
        a,
        a_rs: 1,
        a_ks: MR,
        b: ops.x.as_ptr().wrapping_add(x0),
        b_ks: s.xs[1],
        bias,
        c: ops.out.as_ptr().wrapping_add(o0),
        c_rs: s.os[1],
        rows: chans.end.min(s.cout_g) - chans.start,
        mask: 0,
        acc_in: rs.start > 0,
        offs: std::ptr::null(),
        ind: std::ptr::null(),
        segs: 1,
        lo,
        hi,
    }
}

/// The convolution `out[b, g·cout_g + co, p] = clamp(bias + sum_r w[co, r] · col[r, p])`
/// with weights `packed` by [`pack_conv`] in `layout`, split over the thread pool by tiles
/// of pixels (and, when there are few of them, by ranges of output-channel panels), or
/// (small planes, [`ConvLayout::Pairs`]) by groups of output channels.
pub fn conv2d(
    s: &ConvShape,
    x: &[f32],
    packed: &[f32],
    layout: ConvLayout,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    conv2d_with(s, x, Weights::Packed(packed, layout), out, lo, hi, None)
}

/// Weights of a convolution: packed by [`pack_conv`], or rows of `kk` terms `ld` apart
/// (output channel `co`'s term `r` at `w[co · ld + r]`) with a bias, packed chunk by chunk
/// while the convolution runs.
#[derive(Clone, Copy)]
enum Weights<'a> {
    Packed(&'a [f32], ConvLayout),
    Unpacked {
        w: &'a [f32],
        ld: usize,
        bias: Option<&'a [f32]>,
    },
}

/// Bytes of packed weights an unpacked convolution packs at a time (they stay in L2 while
/// every tile passes over them).
const UNPACKED_CHUNK_BYTES: usize = 512 << 10;

/// The convolution of [`conv2d`] (one group), with weights as a portable kernel gets
/// them: output channel `co`'s term `r = (ci · kh + i) · kw + j` at `w[co · ld + r]`, and
/// an optional bias. They are packed into scratch a chunk of output channels at a time
/// (about 512 KiB, split over the threads), each chunk's outputs computed before the next
/// is packed. Same sums in the same order as [`conv2d`] on [`pack_conv`]'s weights.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_unpacked(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    ld: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    let kk = s.kk();
    let rows_fit = s.cout_g == 0
        || ld >= kk
            && (s.cout_g - 1)
                .checked_mul(ld)
                .and_then(|l| l.checked_add(kk))
                <= Some(w.len());
    if s.groups != 1 || bias.is_some_and(|b| b.len() < s.cout_g) || !rows_fit {
        return Err("groups, weight or bias size");
    }
    conv2d_with(s, x, Weights::Unpacked { w, ld, bias }, out, lo, hi, None)
}

/// [`conv2d`] in the mode the geometry calls for, or in `force` (for tests; a direct
/// convolution stays direct, a 1×1 one is never indirect): the same sums in the same
/// order in every mode.
fn conv2d_with(
    s: &ConvShape,
    x: &[f32],
    weights: Weights<'_>,
    out: &mut [f32],
    lo: f32,
    hi: f32,
    force: Option<Mode>,
) -> Result<(), Refused> {
    if !available() {
        return Err("the CPU has neither AVX-512F nor AVX2 with FMA");
    }
    let packed_ok = match weights {
        Weights::Packed(p, layout) => {
            conv_packed_len(s.groups, s.cout_g, s.kk()) == Some(p.len())
                && (layout == ConvLayout::Panels
                    || (s.cout_g.is_multiple_of(16) && s.kernel != [1, 1]))
        }
        Weights::Unpacked { .. } => s.groups == 1,
    };
    if !packed_ok || !s.fits(x.len(), out.len()) {
        return Err("operand sizes");
    }
    #[cfg(target_arch = "x86_64")]
    {
        let pixels = matches!(weights, Weights::Packed(_, ConvLayout::Pairs)) && pixels::enabled();
        let p = ConvPlan::new(s, force, pixels);
        let items = s.n * s.groups;
        // The last tile's windows may run past the last phase plane's end by up to
        // `NR + (kw - 1) · dw / sw` elements (into columns that are dropped).
        let slack = NR + s.kernel[1] * s.dil[1];
        let (planes_len, offs_len) = if p.indirect() {
            (items * p.item_planes(s) + slack, p.kk)
        } else {
            (0, 0)
        };
        let wide_len = if p.mode == Mode::Wide {
            items * p.item_wide(s)
        } else {
            0
        };
        // Unpacked weights on few tile groups: each unit packs the panels it uses, as it
        // uses them (each weight is packed at most twice); else chunks of output channels
        // are packed ahead, each read by every tile group.
        let lazy = match weights {
            Weights::Unpacked { w, ld, bias } if items * p.per_item <= 2 => Some((w, ld, bias)),
            _ => None,
        };
        let task_len = p.col_len + if lazy.is_some() { LAZY_LEN } else { 0 };
        let col_len = p.tasks * task_len;
        // Output channels per chunk of packed weights (all of them when packed already).
        let chunk = match weights {
            Weights::Unpacked { .. } if lazy.is_none() => {
                let per_panel = MR * (p.kk + 1) * 4;
                (UNPACKED_CHUNK_BYTES / per_panel).max(1) * MR
            }
            _ => s.cout_g,
        };
        let pack_len = match weights {
            Weights::Unpacked { .. } if lazy.is_none() => {
                conv_packed_len(1, chunk.min(s.cout_g), p.kk).unwrap_or(0)
            }
            _ => 0,
        };
        // scratch: the im2col rows of a group of tiles per task, the phase planes
        // (indirect), the wide output and a chunk of packed weights (unpacked weights), in
        // one buffer (one loan from the pool, so that convolutions of other modes in turn
        // do not trade its buffers around); the term offsets (indirect). Every element is
        // written before it is read (im2col rows, phase planes, wide outputs, packed
        // weights), except the planes' slack, read only into lanes that are dropped: the
        // buffer need not be filled.
        let len = col_len + planes_len + wide_len + pack_len;
        let mut buf = if fill_scratch() {
            crate::scratch::take(len, 0f32)
        } else {
            crate::scratch::take_dirty(len, 0f32)
        };
        let (col, rest) = buf.split_at_mut(col_len);
        let (padded, rest) = rest.split_at_mut(planes_len);
        let (wide, pack) = rest.split_at_mut(wide_len);
        let col = SharedMut::new(col);
        let mut offs = crate::scratch::take(offs_len, 0u32);
        if p.indirect() {
            let ([kh, kw], [sh, sw], [dh, dw]) = (s.kernel, s.stride, s.dil);
            for (r, o) in offs.iter_mut().enumerate() {
                let (ci, i, j) = (r / (kh * kw), r / kw % kh, r % kw);
                let (ii, jj) = (i * dh, j * dw);
                let phase = (ii % sh) * sw + jj % sw;
                let off = (ci * sh * sw + phase) * p.phase + ii / sh * p.phase_w + jj / sw;
                // In range: `ConvPlan::new` takes no indirect mode for larger planes.
                *o = off as u32;
            }
            pad_planes(s, &p, x, padded);
        }
        let out = SharedMut::new(out);
        for c0 in (0..s.cout_g).step_by(chunk) {
            let sub = ConvShape {
                cout_g: chunk.min(s.cout_g - c0),
                ..*s
            };
            let sp = ConvPlan::new(&sub, force, pixels);
            let packed: &[f32] = match weights {
                Weights::Packed(w, _) => w,
                Weights::Unpacked { .. } if lazy.is_some() => &[],
                Weights::Unpacked { w, ld, bias } => {
                    let len = conv_packed_len(1, sub.cout_g, p.kk).unwrap_or(0);
                    let rows = &w[c0 * ld..];
                    let bias = bias.map(|b| &b[c0..]);
                    pack_chunk(&mut pack[..len], sub.cout_g, p.kk, rows, ld, bias, sp.tasks);
                    &pack[..len]
                }
            };
            // SAFETY: the chunk's output channels: the tasks below are the only users.
            let out_c = unsafe { out.slice(c0 * s.os[1], out.len() - c0 * s.os[1]) };
            let ops = ConvOps {
                x,
                packed,
                layout: match weights {
                    Weights::Packed(_, layout) => layout,
                    Weights::Unpacked { .. } => ConvLayout::Panels,
                },
                padded,
                offs: &offs,
                wide: SharedMut::new(&mut *wide),
                out: SharedMut::new(out_c),
                lazy,
                lo,
                hi,
            };
            threads::run_shares(sp.units, sp.tasks, &|t, units| {
                // SAFETY: task `t` owns buffer `t` (`sp.tasks <= p.tasks`: fewer channels,
                // no more work; the same im2col length).
                let colt = unsafe { col.slice(t * task_len, task_len) };
                if sp.mode == Mode::Pixels {
                    pixels::task(&sub, &sp, &ops, units, colt);
                } else {
                    conv_task(&sub, &sp, &ops, units, colt);
                }
            });
        }
    }
    Ok(())
}

/// Packs the `n` output channels of `w` (rows of `kk` terms `ld` apart) and their biases
/// into `dst` as [`pack_conv`] packs an `n`-channel group, split over `tasks` by panels:
/// per block of terms, the panel's rows interleaved from its channels' rows.
#[allow(clippy::too_many_arguments)]
fn pack_chunk(
    dst: &mut [f32],
    n: usize,
    kk: usize,
    w: &[f32],
    ld: usize,
    bias: Option<&[f32]>,
    tasks: usize,
) {
    let panels = n.div_ceil(MR);
    let d = SharedMut::new(dst);
    threads::run_parts(panels, tasks, &|range| {
        for panel in range {
            let live = MR.min(n - panel * MR);
            // SAFETY: the panel's biases and rows are this part's alone; the packed
            // length holds them (`conv_packed_len`).
            let b = unsafe { d.slice(panel * MR, MR) };
            for (rr, b) in b.iter_mut().enumerate() {
                *b = match bias {
                    Some(bias) if rr < live => bias[panel * MR + rr],
                    _ => 0.0,
                };
            }
            for r0 in (0..kk).step_by(CONV_KC) {
                let rows = CONV_KC.min(kk - r0);
                let at = conv_weight_at(panels, kk, panel * MR, r0, ConvLayout::Panels);
                // SAFETY: as above (the block's rows of this panel).
                let blk = unsafe { d.slice(at, rows * MR) };
                for rr in 0..MR {
                    if rr < live {
                        let co = panel * MR + rr;
                        let src = &w[co * ld + r0..co * ld + r0 + rows];
                        for (k, &v) in src.iter().enumerate() {
                            blk[k * MR + rr] = v;
                        }
                    } else {
                        for k in 0..rows {
                            blk[k * MR + rr] = 0.0;
                        }
                    }
                }
            }
        }
    });
}

#[cfg(test)]
#[path = "gemm512/tests.rs"]
mod tests;
