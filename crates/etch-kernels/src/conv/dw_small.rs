//! Depthwise convolutions of small planes (at most 64 input and 64 output pixels: the
//! 4×4, 7×7 and 8×8 planes at the end of mobilenets and efficientnets), a whole plane in
//! at most four vectors. The plane kernels pad and walk each plane row by row, which on
//! a 4×4 plane is mostly overhead (≈55 ns a plane); here each channel loads its plane
//! once, and each tap of each output vector is one masked two-vector permute of the loaded
//! plane (the lanes of padding zeroed by the mask) and one multiply-add: 1.7-2.8× faster
//! than the plane kernels on 4×4 and 8×8 planes, 1.1× on 7×7 (`small_planes_speed`, one
//! thread). Each geometry's permute plan is made once per thread and kept, so a warm call
//! allocates nothing.
//!
//! The same sums in the same order as [`super::depthwise`]'s AVX-512 paths: per output the
//! taps in order `(i, j)` from +0 (one fused multiply-add a tap where the row kernel would
//! fuse them, else the product then the sum), then `+ bias` and the clamp. Padding lanes
//! add `w · 0`, which leaves a sum that started from +0 unchanged.

use super::Conv;
use crate::threads::{self, SharedMut};
use std::arch::x86_64::*;

/// Where one tap of one output vector reads: the two loaded vectors its lanes come from,
/// the permute's lane indices (16 and up: the second vector), and the lanes inside the
/// input.
#[derive(Clone, Copy)]
struct Tap {
    a: usize,
    b: usize,
    idx: [i32; 16],
    mask: u16,
}

/// The taps of every output vector (`nout × kh·kw`, output vector-major).
struct Plan {
    nin: usize,
    nout: usize,
    kk: usize,
    taps: Vec<Tap>,
}

/// A plan's key: input and output plane sizes, kernel, stride, padding, dilation.
type Key = [usize; 12];

thread_local! {
    /// Plans made on this thread (a few geometries a network): made once, so a warm call
    /// allocates nothing.
    static PLANS: std::cell::RefCell<Vec<(Key, Option<std::sync::Arc<Plan>>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// [`plan`], made once per geometry on this thread.
fn cached_plan(c: &Conv) -> Option<std::sync::Arc<Plan>> {
    let key = [
        c.xv.h, c.xv.w, c.oh, c.ow, c.kh, c.kw, c.stride.0, c.stride.1, c.pad.0, c.pad.1, c.dil.0,
        c.dil.1,
    ];
    PLANS.with(|p| {
        let mut p = p.borrow_mut();
        if let Some((_, plan)) = p.iter().find(|(k, _)| *k == key) {
            return plan.clone();
        }
        let plan = plan(c).map(std::sync::Arc::new);
        p.push((key, plan.clone()));
        plan
    })
}

/// The plan for `c`'s planes, if they are small enough and each tap's lanes come from at
/// most two loaded vectors.
fn plan(c: &Conv) -> Option<Plan> {
    let (h, w, oh, ow) = (c.xv.h, c.xv.w, c.oh, c.ow);
    if h * w > 64 || oh * ow > 64 || h * w == 0 || oh * ow == 0 {
        return None;
    }
    let (nin, nout, kk) = ((h * w).div_ceil(16), (oh * ow).div_ceil(16), c.kh * c.kw);
    let mut taps = Vec::with_capacity(nout * kk);
    for j in 0..nout {
        for t in 0..kk {
            let (ky, kx) = (t / c.kw, t % c.kw);
            let mut tap = Tap {
                a: usize::MAX,
                b: usize::MAX,
                idx: [0; 16],
                mask: 0,
            };
            for l in 0..16 {
                let p = j * 16 + l;
                if p >= oh * ow {
                    break;
                }
                let iy = ((p / ow) * c.stride.0 + ky * c.dil.0) as isize - c.pad.0 as isize;
                let ix = ((p % ow) * c.stride.1 + kx * c.dil.1) as isize - c.pad.1 as isize;
                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                    continue;
                }
                let src = iy as usize * w + ix as usize;
                let v = src / 16;
                let second = if tap.a == usize::MAX || tap.a == v {
                    tap.a = v;
                    false
                } else if tap.b == usize::MAX || tap.b == v {
                    tap.b = v;
                    true
                } else {
                    return None;
                };
                tap.idx[l] = (src % 16 + if second { 16 } else { 0 }) as i32;
                tap.mask |= 1 << l;
            }
            tap.a = if tap.a == usize::MAX { 0 } else { tap.a };
            tap.b = if tap.b == usize::MAX { tap.a } else { tap.b };
            taps.push(tap);
        }
    }
    Some(Plan {
        nin,
        nout,
        kk,
        taps,
    })
}

/// The convolution `c` of `xs` (weights `[c, kh, kw]`, optional bias) into `o` with the
/// clamp, on small planes: false (nothing written) where this path does not take it.
/// `fused`: one fused multiply-add a tap where the row kernel would use them.
pub(super) fn run(
    c: &Conv,
    xs: &[f32],
    (w, bs): (&[f32], Option<&[f32]>),
    o: &mut [f32],
    clamp: (f32, f32),
    fused: bool,
) -> bool {
    let xv = c.xv;
    if !crate::gemm512::avx512() || !c.dense_planes() {
        return false;
    }
    if c.xv.h * c.xv.w > 64 || c.oh * c.ow > 64 {
        return false;
    }
    let Some(plan) = cached_plan(c) else {
        return false;
    };
    // Every plane's span in bounds (the loads and stores are masked to it).
    let planes = xv.n * c.g;
    if !c.dw_planes_within(xs.len(), o.len()) || w.len() < c.g * plan.kk {
        return false;
    }
    let fma = c.dw_fma(fused);
    let work = planes * c.oh * c.ow * plan.kk;
    let tasks = threads::tasks_for(work, super::DEPTHWISE_TASK_WORK).min(planes);
    let out = SharedMut::new(o);
    threads::run_parts(planes, tasks, &|part| {
        // SAFETY: AVX-512F (checked above); every plane's input and output spans are in
        // bounds (checked above), and the planes of `part` (their outputs) this task's alone.
        unsafe { planes_avx512(&plan, c, xs, (w, bs), &out, part, (clamp, fma)) };
    });
    true
}

/// Planes `part` (batch item × channel) of the convolution.
///
/// # Safety
/// The CPU has AVX-512F; every plane's input and output spans are in bounds, and no other
/// task writes the outputs of `part`.
#[target_feature(enable = "avx512f")]
unsafe fn planes_avx512(
    plan: &Plan,
    c: &Conv,
    xs: &[f32],
    (w, bs): (&[f32], Option<&[f32]>),
    out: &SharedMut<'_, f32>,
    part: std::ops::Range<usize>,
    (clamp, fma): ((f32, f32), bool),
) {
    let (xv, ov) = (c.xv, c.ov);
    for plane in part {
        let (n, ch) = (plane / c.g, plane % c.g);
        let x0 = n * xv.s[0] + ch * xv.s[1];
        let o0 = n * ov.s[0] + ch * ov.s[1];
        // SAFETY: this plane's outputs are this task's alone, in bounds (the caller's).
        let op = unsafe { out.slice(o0, ov.h * ov.w) };
        let wc = &w[ch * plan.kk..(ch + 1) * plan.kk];
        // SAFETY: AVX-512F (the caller's).
        unsafe {
            plane_avx512(
                plan,
                &xs[x0..x0 + xv.h * xv.w],
                wc,
                bs.map_or(0.0, |b| b[ch]),
                clamp,
                fma,
                op,
            )
        };
    }
}

/// One plane: load it, then each output vector's taps, `+ bias`, the clamp, the store.
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn plane_avx512(
    plan: &Plan,
    x: &[f32],
    w: &[f32],
    bias: f32,
    clamp: (f32, f32),
    fma: bool,
    o: &mut [f32],
) {
    let mut v = [_mm512_setzero_ps(); 4];
    for (i, vi) in v.iter_mut().enumerate().take(plan.nin) {
        let n = (x.len() - i * 16).min(16);
        let m = if n == 16 { u16::MAX } else { (1u16 << n) - 1 };
        // SAFETY: the first `n` lanes are inside `x`.
        *vi = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i * 16)) };
    }
    // SAFETY: AVX-512F (the caller's).
    let acc = unsafe {
        match plan.nout {
            1 => sums::<1>(plan, &v, w, fma),
            2 => sums::<2>(plan, &v, w, fma),
            3 => sums::<3>(plan, &v, w, fma),
            _ => sums::<4>(plan, &v, w, fma),
        }
    };
    let (lo, hi) = clamp;
    let (bv, lov, hiv) = (_mm512_set1_ps(bias), _mm512_set1_ps(lo), _mm512_set1_ps(hi));
    for (j, acc) in acc.iter().enumerate().take(plan.nout) {
        // `clamp_f32`: `lo` where `v < lo`, else `hi` where `v > hi` (NaN stays).
        let r = _mm512_add_ps(*acc, bv);
        let lt = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(r, lov);
        let gt = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(r, hiv);
        let r = _mm512_mask_blend_ps(lt, _mm512_mask_blend_ps(gt, r, hiv), lov);
        let n = (o.len() - j * 16).min(16);
        let m = if n == 16 { u16::MAX } else { (1u16 << n) - 1 };
        // SAFETY: the first `n` lanes are inside `o`.
        unsafe { _mm512_mask_storeu_ps(o.as_mut_ptr().add(j * 16), m, r) };
    }
}

/// The tap sums of the plane's `N` output vectors (the rest of the four left at zero):
/// tap by tap, each tap over the `N` vectors, so that `N` chains of multiply-adds run
/// side by side (one vector at a time, a 5×5 kernel's 25 dependent steps ran one after the
/// other: 7×7 planes took 108 ns each). Each vector's sum is still its taps in order.
///
/// # Safety
/// The CPU has AVX-512F; `N == plan.nout`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sums<const N: usize>(plan: &Plan, v: &[__m512; 4], w: &[f32], fma: bool) -> [__m512; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    for (t, wt) in w.iter().enumerate().take(plan.kk) {
        let wv = _mm512_set1_ps(*wt);
        for (j, acc) in acc.iter_mut().enumerate().take(N) {
            let tap = &plan.taps[j * plan.kk + t];
            // SAFETY: `idx` is 16 `i32`s.
            let idx = unsafe { _mm512_loadu_si512(tap.idx.as_ptr().cast()) };
            let xv = _mm512_maskz_permutex2var_ps(tap.mask, v[tap.a], idx, v[tap.b]);
            *acc = if fma {
                _mm512_fmadd_ps(wv, xv, *acc)
            } else {
                _mm512_add_ps(*acc, _mm512_mul_ps(wv, xv))
            };
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::super::{Conv, View4, depthwise_f32};

    /// A depthwise convolution of `c` planes of `h`×`h`, `k`×`k` taps, `pad`, stride `s`.
    fn conv(c: usize, h: usize, k: usize, s: usize, pad: usize) -> (Conv, View4) {
        let v = |h: usize| View4 {
            n: 1,
            c,
            h,
            w: h,
            s: [c * h * h, h * h, h, 1],
        };
        let o = (h + 2 * pad - k) / s + 1;
        (
            Conv::depthwise(v(h), v(o), [k; 2], [s; 2], [pad; 2], [1; 2]),
            v(o),
        )
    }

    /// The planes of the mobilenets' and efficientnet's last stages take this path; larger
    /// ones do not. (Its values: `depthwise_fused_taps_match_mul_add`.)
    #[test]
    fn small_planes_have_a_plan() {
        for (h, k, s, pad) in [
            (4, 3, 1, 1),
            (4, 5, 1, 2),
            (8, 3, 1, 1),
            (7, 3, 1, 1),
            (7, 5, 1, 2),
        ] {
            assert!(
                super::plan(&conv(8, h, k, s, pad).0).is_some(),
                "{h}x{h} k{k} s{s}"
            );
        }
        assert!(super::plan(&conv(8, 9, 3, 1, 1).0).is_none());
    }

    /// Timing only (`cargo test --release -p etch-kernels --lib small_planes_speed --
    /// --ignored --nocapture`, cited in BENCHMARKS.md): speed belongs in benchmarks, not
    /// in timed tests.
    #[test]
    #[ignore]
    fn small_planes_speed() {
        for (c, h, k) in [
            (96, 4, 3),
            (960, 4, 3),
            (1920, 4, 3),
            (384, 8, 3),
            (576, 8, 3),
            (1152, 4, 3),
            (960, 7, 3),
            (960, 7, 5),
            (1152, 7, 5),
        ] {
            let (_, v) = conv(c, h, k, 1, k / 2);
            let x = vec![0.5f32; c * h * h];
            let w = vec![0.25f32; c * k * k];
            let mut o = vec![0f32; c * h * h];
            let t0 = std::time::Instant::now();
            for _ in 0..1000 {
                let (io, taps) = ((v, &x[..]), (&w[..], None));
                depthwise_f32(
                    io,
                    taps,
                    (v, &mut o),
                    [k; 2],
                    [1; 2],
                    [k / 2; 2],
                    [1; 2],
                    (0.0, 6.0),
                    true,
                )
                .unwrap();
            }
            eprintln!("{c}x{h}x{h} k{k}: {:?} a call", t0.elapsed() / 1000);
        }
    }
}
