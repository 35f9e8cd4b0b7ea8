//! Depthwise convolution planes of `f32` on AVX-512F, for strides 1 and 2: the portable
//! [`super::dw_plane`]'s sums, in its order (per output, from +0, `acc += w * x` per tap
//! `(i, j)` in order as a product then a sum, then `+ bias`), with whole-vector loads from
//! the padded plane (strided lanes by a two-vector permute), no bounds checks in the tap
//! loop, and masked stores for the row tails.

use super::{DW_BLOCKS, DwGeom, as_same, dw_fill};
use crate::threads::SharedMut;
use crate::util::FElem;

/// The `f32` view of a depthwise convolution whose planes run here.
pub(super) struct Fast<'a> {
    wf: &'a [f32],
    bs: Option<&'a [f32]>,
    out: &'a SharedMut<'a, f32>,
    /// The output clamp ([`super::clamp_f32`]).
    clamp: (f32, f32),
    /// The row kernel and the input as `f32`, where the shape is one it takes ([`rows_for`]):
    /// then every plane runs there, in place, without its padded plane (AVX-512F only).
    #[cfg(target_arch = "x86_64")]
    rows: Option<(RowsFn, &'a [f32])>,
    /// The CPU has AVX2 and FMA but not AVX-512F: the padded planes run on
    /// [`super::dw256`], with fused taps where `fused` and the row kernel would take the
    /// shape (`avx2_fused`).
    avx2: bool,
    avx2_fused: bool,
}

/// Whether the CPU runs some depthwise planes on [`Fast`]: AVX-512F ([`crate::gemm512::avx512`]),
/// or AVX2 with FMA ([`super::dw256::available`]).
pub(super) fn fast_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::gemm512::avx512() || super::dw256::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `s` as shared `f32`s when `T` is `f32`.
fn shared_f32<'a, T: 'static>(s: &'a SharedMut<'a, T>) -> Option<&'a SharedMut<'a, f32>> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: `T` is `f32`, so the two types are the same.
        Some(unsafe { &*(s as *const SharedMut<'a, T>).cast::<SharedMut<'a, f32>>() })
    } else {
        None
    }
}

impl<'a> Fast<'a> {
    /// The fast path for `g`, where the CPU has AVX-512F (and [`crate::gemm512::avx512`])
    /// or AVX2 with FMA ([`fast_available`]), the elements are `f32`, the stride along a row
    /// is 1 or 2 and output rows are contiguous; `fused`: one fused multiply-add a tap on
    /// the shapes the row kernel takes.
    pub(super) fn new<T: FElem>(g: &DwGeom<'a, T>, clamp: (f32, f32), fused: bool) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let c = g.c;
            if !fast_available() || !matches!(c.stride.1, 1 | 2) || c.ov.s[3] != 1 {
                return None;
            }
            let avx2 = !crate::gemm512::avx512();
            let bs = match g.bs {
                Some(b) => Some(as_same::<T, f32>(b)?),
                None => None,
            };
            Some(Fast {
                wf: as_same::<T::F, f32>(g.wf)?,
                bs,
                out: shared_f32(g.out)?,
                clamp,
                rows: rows_for(c, fused)
                    .filter(|_| !avx2)
                    .zip(as_same::<T, f32>(g.xs)),
                avx2,
                avx2_fused: avx2 && fused && rows_for(c, fused).is_some(),
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (g, clamp, fused, shared_f32::<T>);
            None
        }
    }

    /// Plane `plane` (batch item, channel) of the convolution into the output, `pad` being
    /// this task's padded plane (its borders zero).
    pub(super) fn plane<T: FElem>(&self, g: &DwGeom<'_, T>, plane: usize, pad: &mut [T::F]) {
        let c = g.c;
        let (n, ch) = (plane / c.g, plane % c.g);
        #[cfg(target_arch = "x86_64")]
        if let Some((run, xs)) = self.rows {
            return self.by_rows(c, plane, run, xs);
        }
        fill(g, n * c.xv.s[0] + ch * c.xv.s[1], pad, self.avx2);
        let pad = as_same::<T::F, f32>(pad).expect("f32 planes");
        let (kh, kw, oh, ow) = (c.kh, c.kw, c.oh, c.ow);
        let (sh, sw) = c.stride;
        let lanes = if self.avx2 { 8 } else { 16 };
        let xblocks = ow.div_ceil(lanes);
        // The furthest element read: the last block's (or a block past the last's, which
        // reads from 0) last tap, a whole vector (two with stride 2).
        let last = ((oh - 1) * sh * g.pwid + (xblocks - 1) * lanes * sw)
            + (kh - 1) * g.taps.rstep
            + (kw - 1) * g.taps.cstep
            + lanes * sw;
        assert!(last <= pad.len(), "padded plane too short");
        let obase = n * c.ov.s[0] + ch * c.ov.s[1];
        let orows = (oh - 1) * c.ov.s[2] + ow;
        // The plane's output rows, `ov.s[2]` apart, each `ow` long (contiguous: `new`).
        // SAFETY: plane (n, ch) is this task's.
        let out = unsafe { self.out.slice(obase, orows) };
        let w = &self.wf[ch * kh * kw..(ch + 1) * kh * kw];
        let bias = self.bs.map_or(0.0, |b| b[ch]);
        #[cfg(target_arch = "x86_64")]
        {
            let geo = Geo {
                kh,
                kw,
                rstep: g.taps.rstep,
                cstep: g.taps.cstep,
                srow: sh * g.pwid,
                oh,
                ow,
                ostride: c.ov.s[2],
            };
            use super::dw256::planes as p256;
            let cl = self.clamp;
            // SAFETY: `new` saw AVX-512F (else AVX2 and FMA, `avx2`); the reads end by
            // `last` (asserted) and the masked writes stay in the plane's rows (`orows`).
            unsafe {
                match (self.avx2, self.avx2_fused, sw) {
                    (false, _, 1) => kernel::planes::<1>(pad, w, bias, cl, out, &geo),
                    (false, _, _) => kernel::planes::<2>(pad, w, bias, cl, out, &geo),
                    (true, false, 1) => p256::<1, false>(pad, w, bias, cl, out, &geo),
                    (true, false, _) => p256::<2, false>(pad, w, bias, cl, out, &geo),
                    (true, true, 1) => p256::<1, true>(pad, w, bias, cl, out, &geo),
                    (true, true, _) => p256::<2, true>(pad, w, bias, cl, out, &geo),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (out, w, bias);
    }

    /// Plane `plane` by the row kernel `run` ([`rows_for`]), reading the input `xs` in place
    /// (no padded copy: faster on every mobilenet and efficientnet shape, the ignored
    /// `depthwise_speed` timing run).
    #[cfg(target_arch = "x86_64")]
    fn by_rows(&self, c: &super::Conv, plane: usize, run: RowsFn, xs: &[f32]) {
        let kh = c.kh;
        let (n, ch) = (plane / c.g, plane % c.g);
        let (xv, ov) = (c.xv, c.ov);
        let xbase = n * xv.s[0] + ch * xv.s[1];
        let x = &xs[xbase..xbase + (xv.h - 1) * xv.s[2] + xv.w];
        let src = rows::Plane {
            p: x.as_ptr(),
            h: xv.h,
            w: xv.w,
            rs: xv.s[2],
            ph: c.pad.0,
            pw: c.pad.1,
        };
        let obase = n * ov.s[0] + ch * ov.s[1];
        // SAFETY: plane (n, ch) is this task's.
        let out = unsafe { self.out.slice(obase, (c.oh - 1) * ov.s[2] + c.ow) };
        let w = &self.wf[ch * kh * kh..(ch + 1) * kh * kh];
        let bias = self.bs.map_or(0.0, |b| b[ch]);
        // SAFETY: `new` saw AVX-512F; `src` spans the input plane, `out` its output rows,
        // `oh`/`ow` the convolution's.
        unsafe { run(&src, w, bias, self.clamp, out, (c.oh, c.ow, ov.s[2])) };
    }
}

/// [`dw_fill`] with AVX-512 (or, with `avx2`, AVX2) code generation (whole-vector copies
/// of the rows).
fn fill<T: FElem>(g: &DwGeom<'_, T>, xbase: usize, pad: &mut [T::F], avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn avx512<T: FElem>(g: &DwGeom<'_, T>, xbase: usize, pad: &mut [T::F]) {
            dw_fill(g, xbase, pad)
        }
        #[target_feature(enable = "avx2")]
        fn avx2_fill<T: FElem>(g: &DwGeom<'_, T>, xbase: usize, pad: &mut [T::F]) {
            dw_fill(g, xbase, pad)
        }
        // SAFETY: a `Fast` exists only where the CPU has AVX-512F, or AVX2 when `avx2`
        // (`Fast::new`).
        unsafe {
            if avx2 {
                avx2_fill(g, xbase, pad)
            } else {
                avx512(g, xbase, pad)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = avx2;
        dw_fill(g, xbase, pad)
    }
}

/// [`rows::run`]: the input plane in place, weights, bias, clamp, output rows, and the
/// output's rows, columns and row stride.
#[cfg(target_arch = "x86_64")]
type RowsFn = unsafe fn(&rows::Plane, &[f32], f32, (f32, f32), &mut [f32], (usize, usize, usize));

/// The row kernel for `c` where it takes the shape (square 3×3 or 5×5 taps, equal strides
/// 1 or 2, no dilation, input rows of contiguous elements), fused or not.
#[cfg(target_arch = "x86_64")]
fn rows_for(c: &super::Conv, fused: bool) -> Option<RowsFn> {
    fn pick<const K: usize, const S: usize>(fused: bool) -> RowsFn {
        if fused {
            rows::run::<K, S, true>
        } else {
            rows::run::<K, S, false>
        }
    }
    let (k, (sh, sw)) = (c.kh, c.stride);
    if k != c.kw || sh != sw || c.dil != (1, 1) || c.xv.s[3] != 1 {
        return None;
    }
    Some(match (k, sw) {
        (3, 1) => pick::<3, 1>(fused),
        (3, 2) => pick::<3, 2>(fused),
        (5, 1) => pick::<5, 1>(fused),
        (5, 2) => pick::<5, 2>(fused),
        _ => return None,
    })
}

/// One plane's geometry.
#[cfg(target_arch = "x86_64")]
pub(super) struct Geo {
    pub(super) kh: usize,
    pub(super) kw: usize,
    /// Padded-plane steps between kernel rows and columns, and between output rows.
    pub(super) rstep: usize,
    pub(super) cstep: usize,
    pub(super) srow: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    /// Output row stride.
    pub(super) ostride: usize,
}

#[cfg(target_arch = "x86_64")]
#[path = "dw512_rows.rs"]
mod rows;

#[cfg(target_arch = "x86_64")]
mod kernel {
    use super::{DW_BLOCKS, Geo};
    use std::arch::x86_64::*;

    /// The plane's outputs in blocks of 16 pixels of a row, [`DW_BLOCKS`] blocks (of any
    /// rows) at a time.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `pad` holds every element the taps read from a block base
    /// (`y * srow + x0 * SW`, also for blocks past the last, which read from 0) through
    /// `16 * SW` more; `out` holds `(oh - 1) * ostride + ow` elements.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn planes<const SW: usize>(
        pad: &[f32],
        w: &[f32],
        bias: f32,
        (lo, hi): (f32, f32),
        out: &mut [f32],
        g: &Geo,
    ) {
        let xblocks = g.ow.div_ceil(16);
        let nblocks = g.oh * xblocks;
        let tail = g.ow - (xblocks - 1) * 16;
        let tail_mask = (u32::MAX >> (32 - tail)) as u16;
        let (bv, lov, hiv) = (_mm512_set1_ps(bias), _mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let (p, o) = (pad.as_ptr(), out.as_mut_ptr());
        let (mut y, mut xb, mut b) = (0, 0, 0);
        while b < nblocks {
            let cnt = DW_BLOCKS.min(nblocks - b);
            let mut base = [0usize; DW_BLOCKS];
            let mut dst = [(0usize, 0u16); DW_BLOCKS];
            for k in 0..cnt {
                base[k] = y * g.srow + xb * 16 * SW;
                let m = if xb + 1 == xblocks {
                    tail_mask
                } else {
                    u16::MAX
                };
                dst[k] = (y * g.ostride + xb * 16, m);
                xb += 1;
                if xb == xblocks {
                    (xb, y) = (0, y + 1);
                }
            }
            // SAFETY: the caller's bounds on `pad`.
            let acc = unsafe { blocks::<SW>(p, w, g, &base) };
            for (a, &(at, m)) in acc.iter().zip(&dst).take(cnt) {
                // `clamp_f32`: `lo` where `v < lo`, else `hi` where `v > hi` (ordered
                // compares: NaN stays).
                let v = _mm512_add_ps(*a, bv);
                let (lt, gt) = (
                    _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, lov),
                    _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, hiv),
                );
                let v = _mm512_mask_blend_ps(lt, _mm512_mask_blend_ps(gt, v, hiv), lov);
                // SAFETY: lanes `x0..x0 + 16` masked to the row's `ow` outputs, in `out`.
                unsafe { _mm512_mask_storeu_ps(o.add(at), m, v) };
            }
            b += cnt;
        }
    }

    /// [`DW_BLOCKS`] blocks of 16 outputs from `base[k]`: per tap in order, `acc += w * x`.
    ///
    /// # Safety
    /// As [`planes`].
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn blocks<const SW: usize>(
        p: *const f32,
        w: &[f32],
        g: &Geo,
        base: &[usize; DW_BLOCKS],
    ) -> [__m512; DW_BLOCKS] {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let mut acc = [_mm512_setzero_ps(); DW_BLOCKS];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let wv = _mm512_set1_ps(w[i * g.kw + j]);
                let off = i * g.rstep + j * g.cstep;
                for (a, &bk) in acc.iter_mut().zip(base) {
                    // SAFETY: within `pad` (the caller's bounds).
                    let x = unsafe {
                        let q = p.add(bk + off);
                        if SW == 1 {
                            _mm512_loadu_ps(q)
                        } else {
                            let (lo, hi) = (_mm512_loadu_ps(q), _mm512_loadu_ps(q.add(16)));
                            _mm512_permutex2var_ps(lo, even, hi)
                        }
                    };
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(wv, x));
                }
            }
        }
        acc
    }
}
