//! Statically quantized pooling, NHWC: max pooling (XNNPACK's `s8_maxpool`) and the mean
//! over the pixels (`xnn_reduce_mean` of qint8: exact i32 sums, then XNNPACK's int32 ->
//! qint8 conversion with the zero points folded in f32).

use super::Requant;
use super::conv::Geometry;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::threads::{SharedMut, run_parts, tasks_for};

/// Compares below which a call stays on the calling thread.
const MIN_TASK_WORK: usize = 1 << 17;

/// `max_pool(x, geometry, [zp, lo, hi], out)`: the largest input of each window (taps in
/// the padding are skipped), clamped to the output range. The geometry is a [`Geometry`]
/// with as many output channels as input channels.
pub fn max_pool(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let g = Geometry::from_ints(ctx.int_list(1)?)?;
    let r = Requant::from_ints(ctx.int_list(2)?)?;
    let mut o = ctx.tensor(3)?;
    let (x, o) = (x.data::<i8>()?, o.data_mut::<i8>()?);
    #[cfg(target_arch = "x86_64")]
    let simd = super::flat512::available();
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    max_pool_run(&g, x, &r, o, simd)
}

/// [`max_pool`] of `x` into `o`, split over threads by pixels; `simd`: with the AVX-512
/// pixel (the CPU has AVX-512F and BW).
pub(super) fn max_pool_run(
    g: &Geometry,
    x: &[i8],
    r: &Requant,
    o: &mut [i8],
    simd: bool,
) -> Result<()> {
    let s = &g.shape;
    if s.c != s.co || Some(x.len()) != s.in_len() || Some(o.len()) != s.out_len() {
        return Err(Error::internal(format!("qs8 max pooling geometry {g:?}")));
    }
    let (c, (lo, hi)) = (s.c, (r.lo as i8, r.hi as i8));
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    let pixels = s.n * s.oh * s.ow;
    let shared = SharedMut::new(o);
    let work = shared.len().saturating_mul(s.kernel[0] * s.kernel[1]);
    run_parts(pixels, tasks_for(work, MIN_TASK_WORK), &|range| {
        for p in range {
            // SAFETY: each pixel's outputs are written by the one task whose range has it.
            let o = unsafe { shared.slice(p * c, c) };
            let (b, rest) = (p / (s.oh * s.ow), p % (s.oh * s.ow));
            let taps = s.pixel_taps(b, rest / s.ow, rest % s.ow);
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: the CPU has the features; the taps are inside `x` (checked sizes).
                unsafe { max512::pixel(x, &taps, lo, hi, o) };
                continue;
            }
            o.fill(i8::MIN);
            for i in taps.ri.clone() {
                for j in taps.rj.clone() {
                    let at = taps.at(i, j);
                    for (o, &x) in o.iter_mut().zip(&x[at..at + c]) {
                        *o = (*o).max(x);
                    }
                }
            }
            for o in o.iter_mut() {
                *o = (*o).clamp(lo, hi);
            }
        }
    });
    Ok(())
}

/// `sums[j] = Σ_p x[p · stride + j]` over `rows` rows (exact i32 sums).
pub(super) fn sum_columns(x: &[i8], rows: usize, stride: usize, sums: &mut [i32]) {
    sums.fill(0);
    for p in 0..rows {
        for (s, &v) in sums.iter_mut().zip(&x[p * stride..]) {
            *s += v as i32;
        }
    }
}

/// XNNPACK's mean of `count` qint8 values: `scale = (x_scale / out_scale) * (1 / count)`
/// and `zp = out_zp - (count * x_zp) * scale` (f32), for `rne(sum * scale + zp)`.
pub fn mean_params(count: usize, x: (f32, i32), out: (f32, i32)) -> (f32, f32) {
    let scale = (x.0 / out.0) * (1.0f32 / count as f32);
    let zp = out.1 as f32 - (count as f32 * x.1 as f32) * scale;
    (scale, zp)
}

/// `mean(x [n, pixels, c], scale, zp, [lo, hi], out [n, c])`: `clamp(rne(sum * scale +
/// zp), lo, hi)` of each channel's sum over the pixels (see [`mean_params`]).
pub fn mean(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let (scale, zp) = (ctx.double(1)? as f32, ctx.double(2)? as f32);
    let (lo, hi) = match ctx.int_list(3)? {
        &[lo, hi] if -128 <= lo && lo <= hi && hi <= 127 => (lo as f32, hi as f32),
        v => return Err(Error::internal(format!("qs8 mean range {v:?}"))),
    };
    let mut o = ctx.tensor(4)?;
    let &[n, pixels, c] = x.sizes() else {
        return Err(Error::internal(format!("qs8 mean input {:?}", x.sizes())));
    };
    let (x, o) = (x.data::<i8>()?, o.data_mut::<i8>()?);
    if o.len() != n * c {
        return Err(Error::internal("qs8 mean: operand sizes"));
    }
    #[cfg(target_arch = "x86_64")]
    let simd = super::flat512::available();
    // Tasks take whole 64-channel chunks of an item.
    let chunks = c.div_ceil(64);
    let shared = SharedMut::new(o);
    let work = n * pixels * c;
    run_parts(
        n * chunks,
        tasks_for(work, MIN_TASK_WORK).min(n * chunks),
        &|r| {
            let mut sums = [0i32; 64];
            for k in r {
                let (b, start) = (k / chunks, k % chunks * 64);
                let len = 64.min(c - start);
                let sums = &mut sums[..len];
                let x = &x[b * pixels * c + start..];
                #[cfg(target_arch = "x86_64")]
                if simd {
                    // SAFETY: the CPU has the features; `pixels` rows of `c` from `start`
                    // (checked sizes).
                    unsafe { super::flat512::sum_columns(x, pixels, c, sums) };
                } else {
                    sum_columns(x, pixels, c, sums);
                }
                #[cfg(not(target_arch = "x86_64"))]
                sum_columns(x, pixels, c, sums);
                // SAFETY: each chunk's outputs are written by the one task whose range has it.
                let o = unsafe { shared.slice(b * c + start, len) };
                for (o, &s) in o.iter_mut().zip(sums.iter()) {
                    // `round_float_to_int`: rounded half to even, then saturated (to the
                    // node's range, within int8's).
                    let v = (s as f32 * scale + zp).round_ties_even();
                    *o = v.clamp(lo, hi) as i8;
                }
            }
        },
    );
    Ok(())
}

/// The max pooling's pixel on AVX-512: 64 channels a vector.
#[cfg(target_arch = "x86_64")]
mod max512 {
    use etch_kernels::conv::nhwc::PixelTaps;
    use std::arch::x86_64::*;

    /// `o[ch] = clamp(max over the taps of x[tap + ch], lo, hi)`.
    ///
    /// # Safety
    /// The CPU has AVX-512F and BW; every tap offset plus `o.len()` is within `x`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn pixel(x: &[i8], taps: &PixelTaps, lo: i8, hi: i8, o: &mut [i8]) {
        let c = o.len();
        let (lo, hi) = (_mm512_set1_epi8(lo), _mm512_set1_epi8(hi));
        let mut start = 0;
        while start < c {
            let n = c - start;
            let m: __mmask64 = if n >= 64 { !0 } else { (1u64 << n) - 1 };
            let mut v = _mm512_set1_epi8(i8::MIN);
            for i in taps.ri.clone() {
                for j in taps.rj.clone() {
                    // SAFETY: lanes past `c` are masked off; the tap is inside `x`.
                    let xv = unsafe {
                        _mm512_maskz_loadu_epi8(m, x.as_ptr().add(taps.at(i, j) + start))
                    };
                    v = _mm512_max_epi8(v, xv);
                }
            }
            let v = _mm512_min_epi8(_mm512_max_epi8(v, lo), hi);
            // SAFETY: as above.
            unsafe { _mm512_mask_storeu_epi8(o.as_mut_ptr().add(start), m, v) };
            start += 64;
        }
    }
}
