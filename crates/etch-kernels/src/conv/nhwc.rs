//! `f32` convolutions and pooling on channels-last (NHWC) tensors, as XNNPACK runs them:
//! the XNNPACK delegate's graphs are NHWC, and where it keeps them so (see the backend's
//! layout choice) its depthwise convolutions, pooling and convolutions run here.
//!
//! - Depthwise: each output pixel's channels in vectors of 16, its bias, then one fused
//!   multiply-add a tap in `(i, j)` order (taps in the padding skipped: XNNPACK adds a zero
//!   there), then the clamp `min(hi, max(lo, x))`, XNNPACK's order.
//! - Max pooling: each output pixel's channels in vectors, the taps inside the input, NaN
//!   kept (a NaN tap makes the output NaN, as PyTorch's pooling).
//! - Convolution: rows of an im2col in XNNPACK's term order `(i, j, ci)` (the filter
//!   `[cout, kh, kw, cin]` as it is), multiplied by the filter packed at load
//!   ([`gemm512::pack_fc`]); a 1×1 stride-1 convolution without padding multiplies the
//!   input itself, and with AVX-512F the im2col rows are read in place through a table of
//!   addresses (XNNPACK's indirect products), not copied.
//!
//! Every output element is computed by one task whatever the thread count, in one order:
//! the results do not depend on the number of threads.

use crate::gemm512::{self, Refused};
use crate::threads::{self, SharedMut};

/// The geometry of an NHWC convolution or pooling: input `[n, h, w, c]` and output `[n, oh,
/// ow, co]`, both contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NhwcShape {
    /// Batch size.
    pub n: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Input channels.
    pub c: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Output channels.
    pub co: usize,
    /// Kernel (height, width).
    pub kernel: [usize; 2],
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Padding at the top and the left (the bottom and the right take what the output
    /// size leaves).
    pub pad: [usize; 2],
    /// Dilation (height, width).
    pub dil: [usize; 2],
}

/// The taps of one output pixel inside the input (see [`NhwcShape::pixel_taps`]).
pub struct PixelTaps {
    /// Kernel rows inside the input.
    pub ri: std::ops::Range<usize>,
    /// Kernel columns inside the input.
    pub rj: std::ops::Range<usize>,
    base: isize,
    di: isize,
    dj: isize,
}

impl PixelTaps {
    /// The input offset of tap `(i, j)` (`i` in `ri`, `j` in `rj`).
    pub fn at(&self, i: usize, j: usize) -> usize {
        (self.base + i as isize * self.di + j as isize * self.dj) as usize
    }
}

/// Work (multiply-adds or compares) per task before a kernel here splits over threads.
const TASK_WORK: usize = 1 << 17;

impl NhwcShape {
    /// Input elements (`None` on overflow).
    pub fn in_len(&self) -> Option<usize> {
        self.n
            .checked_mul(self.h)?
            .checked_mul(self.w)?
            .checked_mul(self.c)
    }

    /// Output elements (`None` on overflow).
    pub fn out_len(&self) -> Option<usize> {
        self.n
            .checked_mul(self.oh)?
            .checked_mul(self.ow)?
            .checked_mul(self.co)
    }

    fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    /// Whether the geometry is usable: nonzero kernel, strides and dilations, sizes that
    /// do not overflow. (Taps outside the input are skipped, so any padding is safe.)
    pub fn valid(&self) -> bool {
        self.stride
            .iter()
            .chain(&self.dil)
            .chain(&self.kernel)
            .all(|&v| v > 0)
            && self.in_len().is_some()
            && self.out_len().is_some()
    }

    /// The taps of output pixel `(oy, ox)` of item `b` inside the input (rows `.0`, columns
    /// `.1`), and the input offset of tap `(i, j)` as `.2 + i · .3 + j · .4` (in range for
    /// the taps inside).
    pub fn pixel_taps(&self, b: usize, oy: usize, ox: usize) -> PixelTaps {
        let iy0 = (oy * self.stride[0]) as isize - self.pad[0] as isize;
        let ix0 = (ox * self.stride[1]) as isize - self.pad[1] as isize;
        let base = (((b * self.h) as isize + iy0) * self.w as isize + ix0) * self.c as isize;
        PixelTaps {
            ri: self.tap_range(0, oy),
            rj: self.tap_range(1, ox),
            base,
            di: (self.dil[0] * self.w * self.c) as isize,
            dj: (self.dil[1] * self.c) as isize,
        }
    }

    /// The taps of output row `oy` (or column) that fall inside the input: `i` in the
    /// returned range, input index `o · stride - pad + i · dil`.
    fn tap_range(&self, a: usize, o: usize) -> std::ops::Range<usize> {
        let (s, p, d, k) = (self.stride[a], self.pad[a], self.dil[a], self.kernel[a]);
        let size = if a == 0 { self.h } else { self.w };
        let origin = (o * s) as isize - p as isize;
        let first = if origin >= 0 {
            0
        } else {
            ((-origin) as usize).div_ceil(d)
        };
        // Taps with origin + i·d < size.
        let end = if origin >= size as isize {
            0
        } else {
            ((size as isize - origin) as usize).div_ceil(d).min(k)
        };
        first..end.max(first)
    }

    /// Output rows `(item, oy)` split over tasks by `work_per_row`.
    fn row_tasks(&self, work_per_row: usize) -> usize {
        threads::tasks_for((self.n * self.oh).saturating_mul(work_per_row), TASK_WORK)
    }
}

/// A depthwise convolution (one output channel an input channel): `w` is `[kh · kw, c]`
/// (XNNPACK's filter `[1, kh, kw, c]`), `bias` `[c]`.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_f32(
    s: &NhwcShape,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    if !s.valid()
        || s.co != s.c
        || s.in_len() != Some(x.len())
        || s.out_len() != Some(out.len())
        || w.len() != s.taps() * s.c
        || bias.is_some_and(|b| b.len() != s.c)
    {
        return Err("depthwise operand sizes");
    }
    by_rows(s, out, |row, orow, list| {
        depthwise_row(s, x, (w, bias), (row, orow), list, lo, hi)
    });
    Ok(())
}

/// The most taps (kernel positions) a pixel kernel takes at once (7×7 is 49); larger
/// kernels run the scalar loops.
const MAX_TAPS: usize = 64;

/// Runs `f(row, out_row)` for each output row (item and `oy`) of a depthwise convolution
/// or pooling of `s` (`out` checked to be `s.out_len()` long, `s.co == s.c`), split over
/// the thread pool by rows; each part's rows share one tap list.
fn by_rows(s: &NhwcShape, out: &mut [f32], f: impl Fn(usize, &mut [f32], &mut TapList) + Sync) {
    let tasks = s.row_tasks(s.ow * s.c * s.taps());
    let o = SharedMut::new(out);
    threads::run_parts(s.n * s.oh, tasks, &|range| {
        let mut list = TapList::new();
        for row in range {
            // SAFETY: output row `row` is written by this part only.
            let orow = unsafe { o.slice(row * s.ow * s.c, s.ow * s.c) };
            f(row, orow, &mut list);
        }
    });
}

/// The taps of one output pixel inside the input: each one's input offset and its index
/// in the kernel (`i · kw + j`).
struct TapList {
    n: usize,
    at: [(usize, usize); MAX_TAPS],
}

impl TapList {
    fn new() -> Self {
        TapList {
            n: 0,
            at: [(0, 0); MAX_TAPS],
        }
    }

    /// The taps of output pixel `(oy, ox)` of item `b` (at most [`MAX_TAPS`]: callers
    /// check `s.taps()`).
    fn fill(&mut self, s: &NhwcShape, b: usize, oy: usize, ox: usize) {
        let t = s.pixel_taps(b, oy, ox);
        self.n = 0;
        for i in t.ri.clone() {
            for j in t.rj.clone() {
                self.at[self.n] = (t.at(i, j), i * s.kernel[1] + j);
                self.n += 1;
            }
        }
    }

    fn taps(&self) -> &[(usize, usize)] {
        &self.at[..self.n]
    }
}

/// Runs `f(ox, n, taps)` over the output pixels of row `oy` of item `b` in runs of `n`
/// pixels from `ox` that share one tap list, filled into `list` (pixel `p` of a run reads
/// each tap's input `p · stride · c` elements past the tap's offset): the pixels whose
/// column taps are all inside the input make one run, each other pixel its own.
fn for_each_run(
    s: &NhwcShape,
    (b, oy): (usize, usize),
    list: &mut TapList,
    mut f: impl FnMut(usize, usize, &[(usize, usize)]),
) {
    let (lo, hi) = interior_columns(s);
    for ox in (0..lo).chain(hi..s.ow) {
        list.fill(s, b, oy, ox);
        f(ox, 1, list.taps());
    }
    if lo < hi {
        list.fill(s, b, oy, lo);
        f(lo, hi - lo, list.taps());
    }
}

fn depthwise_row(
    s: &NhwcShape,
    x: &[f32],
    (w, bias): (&[f32], Option<&[f32]>),
    (row, orow): (usize, &mut [f32]),
    list: &mut TapList,
    lo: f32,
    hi: f32,
) {
    let (b, oy) = (row / s.oh, row % s.oh);
    #[cfg(target_arch = "x86_64")]
    if vector() && s.taps() <= MAX_TAPS {
        for_each_run(s, (b, oy), list, |ox, n, taps| {
            let px = &mut orow[ox * s.c..(ox + n) * s.c];
            let step = s.stride[1] * s.c;
            // SAFETY: AVX-512F, or AVX2 and FMA, is present (`vector`); every tap's input
            // pixel (`c` channels) lies in `x` for each pixel of the run, and its weights
            // (`c`) in `w` (`TapList::fill`, `for_each_run`, sizes checked); `bias` has `c`
            // elements, `px` `n · c`.
            unsafe {
                match crate::util::avx512() {
                    true => x86::depthwise_run(s.c, (x, step), w, bias, taps, px, lo, hi),
                    false => x86_avx2::depthwise_run(s.c, (x, step), w, bias, taps, px, lo, hi),
                }
            };
        });
        return;
    }
    for ox in 0..s.ow {
        let t = s.pixel_taps(b, oy, ox);
        let px = &mut orow[ox * s.c..(ox + 1) * s.c];
        for (ch, y) in px.iter_mut().enumerate() {
            let mut acc = bias.map_or(0.0, |b| b[ch]);
            for i in t.ri.clone() {
                for j in t.rj.clone() {
                    acc = x[t.at(i, j) + ch].mul_add(w[(i * s.kernel[1] + j) * s.c + ch], acc);
                }
            }
            *y = clamp(acc, lo, hi);
        }
    }
}

/// Whether the pixel kernels run: AVX-512F ([`x86`]), or AVX2 and FMA ([`x86_avx2`]) (the
/// tests also run the scalar loops).
fn vector() -> bool {
    #[cfg(test)]
    if tests::SCALAR.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    available()
}

/// Whether this CPU has the pixel kernels (AVX-512F, or AVX2 and FMA): where the NHWC
/// layout can pay.
pub fn available() -> bool {
    crate::util::avx512() || crate::util::avx2_fma()
}

/// `min(hi, max(lo, x))` with NaN kept (as the vector clamp).
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    crate::conv::clamp_f32(x, lo, hi)
}

/// Max pooling (`s.co == s.c`); taps outside the input are skipped (every output pixel has
/// at least one inside: `valid`).
pub fn max_pool_f32(s: &NhwcShape, x: &[f32], out: &mut [f32]) -> Result<(), Refused> {
    if !s.valid() || s.co != s.c || s.in_len() != Some(x.len()) || s.out_len() != Some(out.len()) {
        return Err("max pooling operand sizes");
    }
    by_rows(s, out, |row, orow, list| {
        max_pool_row(s, x, (row, orow), list)
    });
    Ok(())
}

fn max_pool_row(s: &NhwcShape, x: &[f32], (row, orow): (usize, &mut [f32]), list: &mut TapList) {
    let (b, oy) = (row / s.oh, row % s.oh);
    #[cfg(target_arch = "x86_64")]
    if vector() && s.taps() <= MAX_TAPS {
        for_each_run(s, (b, oy), list, |ox, n, taps| {
            let px = &mut orow[ox * s.c..(ox + n) * s.c];
            let step = s.stride[1] * s.c;
            // SAFETY: as in `depthwise_row`.
            unsafe {
                match crate::util::avx512() {
                    true => x86::max_run(s.c, (x, step), taps, px),
                    false => x86_avx2::max_run(s.c, (x, step), taps, px),
                }
            };
        });
        return;
    }
    for ox in 0..s.ow {
        let t = s.pixel_taps(b, oy, ox);
        let px = &mut orow[ox * s.c..(ox + 1) * s.c];
        for (ch, y) in px.iter_mut().enumerate() {
            let mut m = f32::NEG_INFINITY;
            for i in t.ri.clone() {
                for j in t.rj.clone() {
                    let v = x[t.at(i, j) + ch];
                    if v > m || (v.is_nan() && !m.is_nan()) {
                        m = v;
                    }
                }
            }
            *y = m;
        }
    }
}

fn pointwise(s: &NhwcShape) -> bool {
    s.kernel == [1, 1] && s.stride == [1, 1] && s.pad == [0, 0] && s.h == s.oh && s.w == s.ow
}

/// A convolution (one group) with the filter `[co, kh, kw, c]` packed by
/// [`gemm512::pack_fc`] (`n = co`, `k = kh · kw · c`), then the clamp: a 1×1 stride-1
/// convolution without padding multiplies the input itself; others read their im2col rows
/// in place with AVX-512F ([`conv_gathered`]), or multiply an im2col copy of each output row
/// (in cache) by the filter ([`conv_copied`]).
pub fn conv_f32(
    s: &NhwcShape,
    x: &[f32],
    packed: &[f32],
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    if !s.valid() || s.in_len() != Some(x.len()) || s.out_len() != Some(out.len()) {
        return Err("convolution operand sizes");
    }
    let (m, k) = (s.n * s.oh * s.ow, s.taps() * s.c);
    if pointwise(s) {
        return gemm512::fully_connected(x, m, k, packed, s.co, out, lo, hi);
    }
    if gemm512::fc_packed_len(s.co, k) != Some(packed.len()) {
        return Err("convolution operand sizes");
    }
    match gathered(s) {
        true => conv_gathered(s, x, packed, out, lo, hi),
        false => conv_copied(s, x, packed, out, lo, hi),
    }
}

/// [`conv_f32`] on an im2col copy of each output row (in cache), split by rows.
fn conv_copied(
    s: &NhwcShape,
    x: &[f32],
    packed: &[f32],
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    let k = s.taps() * s.c;
    let rows = s.n * s.oh;
    let tasks = s.row_tasks(s.ow * s.co * k);
    let dst = SharedMut::new(out);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // One loan on the calling thread, a slice a task: the workers' pools would grow on the
    // first call that hands one of them a larger layer, which the split (timing) decides.
    let per = s.ow * k;
    let mut cols = crate::scratch::take_dirty(tasks.max(1) * per, 0f32);
    let cols = SharedMut::new(&mut cols[..]);
    threads::run_shares(rows, tasks, &|t, range| {
        // SAFETY: slice `t` is task `t`'s, which one thread runs at a time.
        let col = unsafe { cols.slice(t * per, per) };
        for row in range {
            im2col_row(s, x, row, col);
            // SAFETY: output row `row` is this part's alone.
            let o = unsafe { dst.slice(row * s.ow * s.co, s.ow * s.co) };
            if gemm512::fully_connected_serial(col, s.ow, k, packed, s.co, o, lo, hi).is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    match failed.into_inner() {
        true => Err("convolution operand sizes"),
        false => Ok(()),
    }
}

/// Whether [`conv_f32`] reads its im2col rows in place ([`conv_gathered`]): with AVX-512F
/// (`ETCH_NHWC_GATHER=0` copies them, as before), on undilated columns (so that each
/// kernel row's taps are one run of the input row).
fn gathered(s: &NhwcShape) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("ETCH_NHWC_GATHER").map_or(true, |v| v != "0"));
    on && gemm512::avx512() && s.dil[1] == 1
}

/// [`conv_f32`] without the im2col copy, as XNNPACK's indirect products: a table holds the
/// address of each output pixel's kernel rows (`kw · c` contiguous terms each) in the
/// input, and the product reads them there ([`gemm512::fully_connected_gathered`]).
/// Kernel rows outside the input read a run of zeros; pixels whose column taps leave the
/// input (the borders) have their im2col rows copied to scratch first. The terms are
/// multiplied in the same order as the copying path, so the results are the same bits.
/// Split over the thread pool by tiles of pixels (of any output rows) and blocks of output
/// channels: small planes no longer split by rows (7 rows of 7×7 went 4 and 3 on two
/// threads), and each block's weights are read once for all pixels.
fn conv_gathered(
    s: &NhwcShape,
    x: &[f32],
    packed: &[f32],
    out: &mut [f32],
    lo: f32,
    hi: f32,
) -> Result<(), Refused> {
    let (kh, seg) = (s.kernel[0], s.kernel[1] * s.c);
    let k = kh * seg;
    let (lo_c, hi_c) = interior_columns(s);
    let rows = s.n * s.oh;
    let m = rows * s.ow;
    let per_row = s.ow - (hi_c - lo_c);
    // The zero run, then each output row's border pixels' im2col rows.
    let mut aux = crate::scratch::take_dirty(seg + rows * per_row * k, 0f32);
    aux[..seg].fill(0.0);
    let mut table = crate::scratch::take_dirty(m * kh, 0usize);
    {
        let (a, t) = (SharedMut::new(&mut aux[..]), SharedMut::new(&mut table[..]));
        let work = m * kh + rows * per_row * k;
        threads::run_shares(
            rows,
            threads::tasks_for(work, TABLE_TASK_WORK),
            &|_, range| {
                for row in range {
                    // SAFETY: the row's table entries and border rows are this part's alone.
                    let (tr, ar) = unsafe {
                        let tr = t.slice(row * s.ow * kh, s.ow * kh);
                        (tr, a.slice(seg + row * per_row * k, per_row * k))
                    };
                    gather_row(s, x, row, tr, ar, a.as_ptr() as usize);
                }
            },
        );
    }
    // SAFETY: every address in the table is the start of `seg` elements of `x` (a kernel
    // row inside the input: `gather_row`) or of `aux` (the zero run, or a border pixel's
    // copied kernel row), both borrowed, unwritten and not reallocated until the call
    // returns; `kh` divides `k`.
    unsafe { gemm512::fully_connected_gathered(&table, kh, (m, k), packed, s.co, out, lo, hi) }
}

/// Table entries and border terms per task before [`conv_gathered`] builds them over the
/// thread pool (resnet's 7×7 stem: 88k entries and 448 border pixels, ≈0.17 ms on one
/// thread before the entries were written a run at a time).
const TABLE_TASK_WORK: usize = 1 << 16;

/// The table entries `t` (`kh` a pixel) of output row `row` for [`conv_gathered`]: the
/// address of each kernel row's `kw · c` terms in `x`, `zero` (a run of zeros) for kernel
/// rows outside the input, and for the border pixels (column taps outside the input)
/// their im2col rows, copied to `border` one after another in pixel order.
fn gather_row(
    s: &NhwcShape,
    x: &[f32],
    row: usize,
    t: &mut [usize],
    border: &mut [f32],
    zero: usize,
) {
    let (kh, seg) = (s.kernel[0], s.kernel[1] * s.c);
    let (b, oy) = (row / s.oh, row % s.oh);
    let (lo_c, hi_c) = interior_columns(s);
    let ri = s.tap_range(0, oy);
    let step = s.stride[1] * s.c * std::mem::size_of::<f32>();
    for i in 0..kh {
        // Kernel row `i` of the first interior pixel (the last one's bounds checked: the
        // pixels between lie between them).
        let (base, inc) = match ri.contains(&i) && lo_c < hi_c {
            true => {
                let iy = oy * s.stride[0] + i * s.dil[0] - s.pad[0];
                let at = |ox: usize| ((b * s.h + iy) * s.w + ox * s.stride[1] - s.pad[1]) * s.c;
                let _ = &x[at(hi_c - 1)..][..seg];
                (x[at(lo_c)..].as_ptr() as usize, step)
            }
            false => (zero, 0),
        };
        for (n, ox) in (lo_c..hi_c).enumerate() {
            t[ox * kh + i] = base + n * inc;
        }
    }
    let k = kh * seg;
    let pixels = (0..lo_c).chain(hi_c..s.ow);
    for (ox, r) in pixels.zip(border.chunks_exact_mut(k.max(1))) {
        im2col_pixel(s, x, (b, oy, ox), r);
        for (i, e) in t[ox * kh..][..kh].iter_mut().enumerate() {
            *e = r[i * seg..].as_ptr() as usize;
        }
    }
}

/// The im2col rows of output row `row` (item and `oy`): each output pixel's `kh · kw · c`
/// terms in the order `(i, j, ci)`, zeros in the padding. Where a pixel's column taps are
/// all inside the input (and undilated), each kernel row's terms are one contiguous run of
/// the input row.
fn im2col_row(s: &NhwcShape, x: &[f32], row: usize, col: &mut [f32]) {
    let (b, oy) = (row / s.oh, row % s.oh);
    let (kw, c) = (s.kernel[1], s.c);
    let k = s.taps() * c;
    let (lo, hi) = interior_columns(s);
    let ri = s.tap_range(0, oy);
    for ox in 0..s.ow {
        let r = &mut col[ox * k..(ox + 1) * k];
        if (lo..hi).contains(&ox) && s.dil[1] == 1 {
            let x0 = ox * s.stride[1] - s.pad[1];
            for (i, d) in r.chunks_exact_mut(kw * c).enumerate() {
                if ri.contains(&i) {
                    let iy = oy * s.stride[0] + i * s.dil[0] - s.pad[0];
                    let src = &x[((b * s.h + iy) * s.w + x0) * c..][..kw * c];
                    d.copy_from_slice(src);
                } else {
                    d.fill(0.0);
                }
            }
            continue;
        }
        im2col_pixel(s, x, (b, oy, ox), r);
    }
}

/// The im2col row `r` (`kh · kw · c` terms in the order `(i, j, ci)`, zeros in the
/// padding) of output pixel `(oy, ox)` of item `b`.
fn im2col_pixel(s: &NhwcShape, x: &[f32], (b, oy, ox): (usize, usize, usize), r: &mut [f32]) {
    let (kw, c) = (s.kernel[1], s.c);
    let t = s.pixel_taps(b, oy, ox);
    for (i, d) in r
        .chunks_exact_mut((kw * c).max(1))
        .take(s.kernel[0])
        .enumerate()
    {
        if !t.ri.contains(&i) || t.rj.is_empty() {
            d.fill(0.0);
        } else if s.dil[1] == 1 {
            // The taps inside the input are one run of the input row.
            let (j0, j1) = (t.rj.start * c, t.rj.end * c);
            d[..j0].fill(0.0);
            d[j0..j1].copy_from_slice(&x[t.at(i, t.rj.start)..][..j1 - j0]);
            d[j1..].fill(0.0);
        } else {
            for (j, dj) in d.chunks_exact_mut(c.max(1)).enumerate() {
                match t.rj.contains(&j) {
                    true => dj.copy_from_slice(&x[t.at(i, j)..][..c]),
                    false => dj.fill(0.0),
                }
            }
        }
    }
}

/// The output columns `lo..hi` whose column taps all lie inside the input.
fn interior_columns(s: &NhwcShape) -> (usize, usize) {
    let span = s.dil[1] * (s.kernel[1] - 1);
    let lo = s.pad[1].div_ceil(s.stride[1]).min(s.ow);
    let hi = match (s.w + s.pad[1]).checked_sub(span + 1) {
        Some(last) => (last / s.stride[1] + 1).clamp(lo, s.ow),
        None => lo,
    };
    (lo, hi)
}

/// The mean over the pixels of each channel of `[n, hw, c]`: `[n, c]` (the pixels summed
/// in order, then divided by their count, as `aten::mean`). Split over the thread pool by
/// blocks of 32 channels (each channel's sum is one task's, so the same bits).
pub fn global_avg_pool_f32(
    n: usize,
    hw: usize,
    c: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), Refused> {
    let len = n.checked_mul(hw).and_then(|v| v.checked_mul(c));
    if len != Some(x.len()) || n.checked_mul(c) != Some(out.len()) || hw == 0 {
        return Err("global average pooling operand sizes");
    }
    const BLOCK: usize = 32;
    let blocks = c.div_ceil(BLOCK);
    let o = SharedMut::new(out);
    threads::run_parts(
        n * blocks,
        threads::tasks_for(n * hw * c, TASK_WORK),
        &|range| {
            for u in range {
                let (b, c0) = (u / blocks, u % blocks * BLOCK);
                let cn = BLOCK.min(c - c0);
                // SAFETY: channels `c0..c0 + cn` of item `b` are this unit's alone.
                let o = unsafe { o.slice(b * c + c0, cn) };
                let xb = &x[b * hw * c..(b + 1) * hw * c];
                channel_means(xb, (hw, c, c0), o);
            }
        },
    );
    Ok(())
}

/// The means of channels `c0..c0 + o.len()` of the `[hw, c]` pixels `xb` into `o`.
fn channel_means(xb: &[f32], (hw, c, c0): (usize, usize, usize), o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if vector() {
        // SAFETY: AVX-512F, or AVX2 and FMA, is present; `xb` holds `hw` pixels of `c`, and
        // each kernel reads channels `c0..c0 + o.len()` of them as a `[hw, c]` view
        // starting at `c0`, `o.len()` wide.
        unsafe {
            let xv = &xb[c0..];
            match crate::util::avx512() {
                true => x86::channel_means(xv, (hw, c), o),
                false => x86_avx2::channel_means(xv, (hw, c), o),
            }
        };
        return;
    }
    o.fill(0.0);
    for p in 0..hw {
        let row = &xb[p * c + c0..][..o.len()];
        for (o, &v) in o.iter_mut().zip(row) {
            *o += v;
        }
    }
    for o in o.iter_mut() {
        *o /= hw as f32;
    }
}

/// `[n, c, hw]` planes into `[n, hw, c]` pixels (an NCHW image into NHWC): for few
/// channels (an RGB input), where 16×16 block transposes do not apply. Split over the
/// thread pool by pixels.
pub fn planes_to_pixels_f32(
    n: usize,
    c: usize,
    hw: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), Refused> {
    planes_to_pixels(n, c, hw, x, out, |src, range, dst| {
        #[cfg(target_arch = "x86_64")]
        if c == 3 && vector() && crate::util::avx512() {
            let end = range.start + range.len() / 16 * 16;
            // SAFETY: AVX-512F is present; `src` holds 3 planes of `hw` and `dst` the
            // pixels of `range` (sizes checked); the kernel touches pixels
            // `range.start..end` only.
            unsafe { x86::rgb_to_pixels(src, hw, range.start..end, dst) };
            return end;
        }
        let _ = (src, dst);
        range.start
    })
}

/// [`planes_to_pixels_f32`] for bytes (a statically quantized image): 64 pixels at a time
/// with AVX-512 VBMI where the image has 3 channels.
pub fn planes_to_pixels_i8(
    n: usize,
    c: usize,
    hw: usize,
    x: &[i8],
    out: &mut [i8],
) -> Result<(), Refused> {
    planes_to_pixels(n, c, hw, x, out, |src, range, dst| {
        #[cfg(target_arch = "x86_64")]
        if c == 3
            && vector()
            && crate::util::avx512()
            && std::arch::is_x86_feature_detected!("avx512vbmi")
        {
            let end = range.start + range.len() / 64 * 64;
            // SAFETY: AVX-512F, BW and VBMI are present; `src` holds 3 planes of `hw` and
            // `dst` the pixels of `range` (sizes checked); the kernel touches pixels
            // `range.start..end` only.
            unsafe { x86::rgb_bytes_to_pixels(src, hw, range.start..end, dst) };
            return end;
        }
        let _ = (src, dst);
        range.start
    })
}

/// The body of [`planes_to_pixels_f32`] and [`planes_to_pixels_i8`]: `simd(planes of
/// one item, pixels, their outputs)` does a first run of the pixels and returns where it
/// stopped; the element loop does the rest.
fn planes_to_pixels<T: Copy + Send + Sync>(
    n: usize,
    c: usize,
    hw: usize,
    x: &[T],
    out: &mut [T],
    simd: impl Fn(&[T], std::ops::Range<usize>, &mut [T]) -> usize + Sync,
) -> Result<(), Refused> {
    let len = n.checked_mul(c).and_then(|v| v.checked_mul(hw));
    if len != Some(x.len()) || len != Some(out.len()) {
        return Err("transpose operand sizes");
    }
    let o = SharedMut::new(out);
    for b in 0..n {
        let src = &x[b * c * hw..(b + 1) * c * hw];
        threads::run_parts(hw, threads::tasks_for(c * hw, TASK_WORK), &|range| {
            // SAFETY: pixels `range` of item `b` are this part's alone.
            let dst = unsafe { o.slice((b * hw + range.start) * c, range.len() * c) };
            let p0 = simd(src, range.clone(), dst);
            for p in p0..range.end {
                for ch in 0..c {
                    dst[(p - range.start) * c + ch] = src[ch * hw + p];
                }
            }
        });
    }
    Ok(())
}

/// The pointers of a run's tile, for the pixel kernels ([`x86`], [`x86_avx2`]): the input
/// at the run's first pixel (each tap's offset and channel `c0` still to add), the weights
/// and the bias (null: none), the output at the tile's first pixel; the input and output
/// steps from pixel to pixel.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Run {
    x: *const f32,
    x_step: usize,
    w: *const f32,
    bias: *const f32,
    out: *mut f32,
    c: usize,
}

#[cfg(target_arch = "x86_64")]
impl Run {
    /// The run of the `px.len() / c` output pixels `px` over `c` channels, reading `x`
    /// pixels `step` apart, with weights `w` and `bias` where given (pooling: none).
    fn new(
        c: usize,
        (x, step): (&[f32], usize),
        w: Option<&[f32]>,
        bias: Option<&[f32]>,
        px: &mut [f32],
    ) -> Self {
        Run {
            x: x.as_ptr(),
            x_step: step,
            w: w.map_or(std::ptr::null(), |w| w.as_ptr()),
            bias: bias.map_or(std::ptr::null(), |b| b.as_ptr()),
            out: px.as_mut_ptr(),
            c,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Run;

    /// The mask of the first `n` (≤ 16) lanes.
    fn lanes(n: usize) -> __mmask16 {
        if n >= 16 { !0 } else { (1u16 << n) - 1 }
    }

    /// Loads vector `v` of `V` at `p` (the last in `mask`'s lanes only).
    ///
    /// # Safety
    /// AVX-512F; the lanes read are inside their buffer.
    #[inline(always)]
    unsafe fn load<const V: usize>(p: *const f32, v: usize, mask: __mmask16) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe {
            if v + 1 < V {
                _mm512_loadu_ps(p.add(16 * v))
            } else {
                _mm512_maskz_loadu_ps(mask, p.add(16 * v))
            }
        }
    }

    /// Stores vector `v` of `V` at `p` (the last in `mask`'s lanes only).
    ///
    /// # Safety
    /// As [`load`], for writing.
    #[inline(always)]
    unsafe fn store<const V: usize>(p: *mut f32, v: usize, mask: __mmask16, y: __m512) {
        // SAFETY: the caller's contract.
        unsafe {
            if v + 1 < V {
                _mm512_storeu_ps(p.add(16 * v), y)
            } else {
                _mm512_mask_storeu_ps(p.add(16 * v), mask, y)
            }
        }
    }

    /// `P` pixels of a run from pixel `p0` × channels `c0..c0 + 16 V` of a depthwise
    /// convolution: the bias, a fused multiply-add a tap (the weights loaded once for the
    /// `P` pixels), the clamp.
    ///
    /// # Safety
    /// AVX-512F; for each tap `(o, k)` and pixel `p`, `r.x + o + (p0 + p) · r.x_step + c0`
    /// and `r.w + k · c + c0` hold the block's lanes, as do `r.bias + c0` (if not null) and
    /// `r.out + (p0 + p) · c + c0`.
    #[inline(always)]
    unsafe fn dw_tile<const P: usize, const V: usize>(
        r: Run,
        p0: usize,
        c0: usize,
        taps: &[(usize, usize)],
        mask: __mmask16,
        (lo, hi): (__m512, __m512),
    ) {
        // SAFETY (every load and store): the caller's contract.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; P];
            if !r.bias.is_null() {
                for v in 0..V {
                    let b = load::<V>(r.bias.add(c0), v, mask);
                    for a in acc.iter_mut() {
                        a[v] = b;
                    }
                }
            }
            let x0 = r.x.add(p0 * r.x_step + c0);
            for &(o, k) in taps {
                let wp = r.w.add(k * r.c + c0);
                let wv: [__m512; V] = std::array::from_fn(|v| load::<V>(wp, v, mask));
                for (p, a) in acc.iter_mut().enumerate() {
                    let xp = x0.add(o + p * r.x_step);
                    for v in 0..V {
                        a[v] = _mm512_fmadd_ps(load::<V>(xp, v, mask), wv[v], a[v]);
                    }
                }
            }
            for (p, a) in acc.iter().enumerate() {
                let op = r.out.add((p0 + p) * r.c + c0);
                for (v, &y) in a.iter().enumerate() {
                    store::<V>(op, v, mask, _mm512_min_ps(hi, _mm512_max_ps(lo, y)));
                }
            }
        }
    }

    /// Channels `c0..c0 + 16 V` of every pixel of a run: tiles of `P` pixels, then one at a
    /// time.
    ///
    /// # Safety
    /// As [`dw_tile`], for all `n` pixels.
    #[inline(always)]
    unsafe fn dw_block<const P: usize, const V: usize>(
        r: Run,
        n: usize,
        c0: usize,
        taps: &[(usize, usize)],
        mask: __mmask16,
        bounds: (__m512, __m512),
    ) {
        let mut p0 = 0;
        // SAFETY: the caller's contract, each tile inside the run.
        unsafe {
            while p0 + P <= n {
                dw_tile::<P, V>(r, p0, c0, taps, mask, bounds);
                p0 += P;
            }
            while p0 < n {
                dw_tile::<1, V>(r, p0, c0, taps, mask, bounds);
                p0 += 1;
            }
        }
    }

    /// A run of depthwise output pixels over `c` channels: blocks of 64, 32 and 16
    /// channels (4, 8 and 8 pixels a tile), then the masked rest.
    ///
    /// # Safety
    /// AVX-512F; for each pixel `p < px.len() / c` of the run and each tap `(o, k)`, `c`
    /// input elements at `o + p · step` lie in `x` and `c` weights at `k · c` in
    /// `w`; `bias` has `c` elements.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn depthwise_run(
        c: usize,
        (x, step): (&[f32], usize),
        w: &[f32],
        bias: Option<&[f32]>,
        taps: &[(usize, usize)],
        px: &mut [f32],
        lo: f32,
        hi: f32,
    ) {
        let n = px.len() / c.max(1);
        let r = Run::new(c, (x, step), Some(w), bias, px);
        let bounds = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let mut c0 = 0;
        // SAFETY (every block): the caller's contract, each block inside `c` channels.
        unsafe {
            while c0 + 64 <= c {
                dw_block::<4, 4>(r, n, c0, taps, !0, bounds);
                c0 += 64;
            }
            if c0 + 32 <= c {
                dw_block::<8, 2>(r, n, c0, taps, !0, bounds);
                c0 += 32;
            }
            if c0 + 16 <= c {
                dw_block::<8, 1>(r, n, c0, taps, !0, bounds);
                c0 += 16;
            }
            if c0 < c {
                dw_block::<8, 1>(r, n, c0, taps, lanes(c - c0), bounds);
            }
        }
    }

    /// `P` pixels × channels `c0..c0 + 16 V` of max pooling: the largest tap, NaN if any
    /// tap is NaN.
    ///
    /// # Safety
    /// As [`dw_tile`] (no weights or bias).
    #[inline(always)]
    unsafe fn max_tile<const P: usize, const V: usize>(
        r: Run,
        p0: usize,
        c0: usize,
        taps: &[(usize, usize)],
        mask: __mmask16,
    ) {
        // SAFETY (every load and store): the caller's contract.
        unsafe {
            let mut m = [[_mm512_set1_ps(f32::NEG_INFINITY); V]; P];
            let mut nan = [[0 as __mmask16; V]; P];
            let x0 = r.x.add(p0 * r.x_step + c0);
            for &(o, _) in taps {
                for p in 0..P {
                    let xp = x0.add(o + p * r.x_step);
                    for v in 0..V {
                        let xv = load::<V>(xp, v, mask);
                        nan[p][v] |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(xv, xv);
                        m[p][v] = _mm512_max_ps(m[p][v], xv);
                    }
                }
            }
            for p in 0..P {
                let op = r.out.add((p0 + p) * r.c + c0);
                for v in 0..V {
                    let y = _mm512_mask_mov_ps(m[p][v], nan[p][v], _mm512_set1_ps(f32::NAN));
                    store::<V>(op, v, mask, y);
                }
            }
        }
    }

    /// [`depthwise_run`] for max pooling.
    ///
    /// # Safety
    /// As [`depthwise_run`] (no weights).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn max_run(
        c: usize,
        (x, step): (&[f32], usize),
        taps: &[(usize, usize)],
        px: &mut [f32],
    ) {
        let n = px.len() / c.max(1);
        let r = Run::new(c, (x, step), None, None, px);
        let mut c0 = 0;
        // SAFETY (every tile): the caller's contract, each inside the run and `c`.
        unsafe {
            while c0 < c {
                let (v, mask) = match c - c0 {
                    64.. => (4, !0),
                    32.. => (2, !0),
                    rest => (1, lanes(rest)),
                };
                for p0 in 0..n {
                    match v {
                        4 => max_tile::<1, 4>(r, p0, c0, taps, mask),
                        2 => max_tile::<1, 2>(r, p0, c0, taps, mask),
                        _ => max_tile::<1, 1>(r, p0, c0, taps, mask),
                    }
                }
                c0 += 16 * v.min((c - c0).div_ceil(16));
            }
        }
    }
    /// The means of the first `o.len()` channels over `hw` pixels `stride` apart (`[hw,
    /// stride]` from the first channel): 64 channels at a time summed over the pixels in
    /// order in registers, then divided by `hw`.
    ///
    /// # Safety
    /// AVX-512F; `x` holds `(hw - 1) · stride + o.len()` elements.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn channel_means(x: &[f32], (hw, stride): (usize, usize), o: &mut [f32]) {
        let (c, div) = (o.len(), _mm512_set1_ps(hw as f32));
        let mut c0 = 0;
        while c0 < c {
            let n = (c - c0).min(64);
            let masks: [__mmask16; 4] = std::array::from_fn(|v| lanes(n.saturating_sub(16 * v)));
            let mut acc = [_mm512_setzero_ps(); 4];
            for p in 0..hw {
                // SAFETY: pixel `p`'s channels `c0..c0 + n`, in the masks' lanes.
                let row = unsafe { x.as_ptr().add(p * stride + c0) };
                for (v, a) in acc.iter_mut().enumerate() {
                    // SAFETY: as above (vector `v` of the block).
                    let xv = unsafe { _mm512_maskz_loadu_ps(masks[v], row.add(16 * v)) };
                    *a = _mm512_add_ps(*a, xv);
                }
            }
            for (v, &a) in acc.iter().enumerate() {
                // SAFETY: channels `c0 + 16 v ..` of `o`, in the mask's lanes.
                unsafe {
                    _mm512_mask_storeu_ps(
                        o.as_mut_ptr().add(c0 + 16 * v),
                        masks[v],
                        _mm512_div_ps(a, div),
                    )
                };
            }
            c0 += n;
        }
    }

    /// Pixels `range` (a multiple of 16 of them) of 3 planes of `hw` into `dst` (`[range,
    /// 3]`): 16 pixels at a time, each output vector put together from two planes then the
    /// third by two `vpermt2ps`.
    ///
    /// # Safety
    /// AVX-512F; `src` holds 3 planes of `hw`, `dst` `3 · range.len()` elements,
    /// `range.end ≤ hw`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rgb_to_pixels(
        src: &[f32],
        hw: usize,
        range: std::ops::Range<usize>,
        dst: &mut [f32],
    ) {
        // Output lane q of vector k holds element g = 16 k + q: pixel g / 3, channel g % 3.
        let idx = |k: usize, second: bool| {
            let v: [i32; 16] = std::array::from_fn(|q| {
                let g = 16 * k + q;
                let (i, ch) = ((g / 3) as i32, g % 3);
                match (second, ch) {
                    (false, 0) => i,
                    (false, _) => 16 + i,
                    (true, 2) => 16 + i,
                    (true, _) => q as i32,
                }
            });
            // SAFETY: 16 lanes read from a 16-element array.
            unsafe { _mm512_loadu_si512(v.as_ptr() as *const _) }
        };
        let first = [idx(0, false), idx(1, false), idx(2, false)];
        let second = [idx(0, true), idx(1, true), idx(2, true)];
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut p = range.start;
        while p + 16 <= range.end {
            // SAFETY: pixels `p..p + 16 <= range.end <= hw` of each plane and their 48
            // outputs (`dst` starts at pixel `range.start`).
            unsafe {
                let r = _mm512_loadu_ps(s.add(p));
                let g = _mm512_loadu_ps(s.add(hw + p));
                let b = _mm512_loadu_ps(s.add(2 * hw + p));
                for k in 0..3 {
                    let t = _mm512_permutex2var_ps(r, first[k], g);
                    _mm512_storeu_ps(
                        d.add(3 * (p - range.start) + 16 * k),
                        _mm512_permutex2var_ps(t, second[k], b),
                    );
                }
            }
            p += 16;
        }
    }

    /// [`rgb_to_pixels`] for bytes: pixels `range` (a multiple of 64 of them), 64 at a
    /// time, each output vector put together from two planes then the third by a
    /// `vpermt2b` and a masked `vpermb`.
    ///
    /// # Safety
    /// AVX-512F, BW and VBMI; `src` holds 3 planes of `hw`, `dst` `3 · range.len()`
    /// elements, `range.end ≤ hw`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) unsafe fn rgb_bytes_to_pixels(
        src: &[i8],
        hw: usize,
        range: std::ops::Range<usize>,
        dst: &mut [i8],
    ) {
        // Output byte q of vector k holds element g = 64 k + q: pixel g / 3, channel g % 3.
        let idx = |k: usize| {
            let v: [u8; 64] = std::array::from_fn(|q| {
                let g = 64 * k + q;
                let (i, ch) = ((g / 3) as u8, g % 3);
                if ch == 1 { 64 + i } else { i }
            });
            // SAFETY: 64 bytes read from a 64-byte array.
            unsafe { _mm512_loadu_si512(v.as_ptr() as *const _) }
        };
        // The bytes of channel 2 (taken from the third plane).
        let third = |k: usize| -> __mmask64 {
            (0..64)
                .filter(|q| (64 * k + q) % 3 == 2)
                .fold(0, |m, q| m | 1 << q)
        };
        let perm = [idx(0), idx(1), idx(2)];
        let masks = [third(0), third(1), third(2)];
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut p = range.start;
        while p + 64 <= range.end {
            // SAFETY: pixels `p..p + 64 <= range.end <= hw` of each plane and their 192
            // outputs (`dst` starts at pixel `range.start`).
            unsafe {
                let r = _mm512_loadu_si512(s.add(p).cast());
                let g = _mm512_loadu_si512(s.add(hw + p).cast());
                let b = _mm512_loadu_si512(s.add(2 * hw + p).cast());
                for k in 0..3 {
                    let t = _mm512_permutex2var_epi8(r, perm[k], g);
                    _mm512_storeu_si512(
                        d.add(3 * (p - range.start) + 64 * k).cast(),
                        _mm512_mask_permutexvar_epi8(t, masks[k], perm[k], b),
                    );
                }
            }
            p += 64;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "nhwc_avx2.rs"]
mod x86_avx2;

#[cfg(test)]
#[path = "nhwc_tests.rs"]
pub(super) mod tests;
