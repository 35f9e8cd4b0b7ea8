//! The qs8 depthwise convolution's pixel on AVX-512 (XNNPACK's `avx512skx_mul32`
//! flavour): 16 channels a vector, int8 widened to i32, `(x - x_zp) · w` summed exactly,
//! then the fp32 requantization (`cvtps` rounds half to even, as the scalar code's magic
//! bias does), so the outputs are the scalar kernel's bits.

use super::super::qd8::vnni::lanes;
use super::Requant;
use std::arch::x86_64::*;

/// Channel vectors a pass over the taps keeps in registers.
const VECS: usize = 4;
/// Most taps of a kernel [`pixel`] takes (more: the scalar loops).
pub const MAX_TAPS: usize = 64;

/// Whether the CPU has AVX-512F, BW and VL (and `ETCH_QS8_SIMD` is not `0`).
pub fn available() -> bool {
    super::simd_enabled()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// `PX` output pixels of a depthwise convolution of depth multiplier 1 (each filter vector
/// loaded once for them): `o[k][ch]` for every channel, from the starts of pixel `k`'s
/// taps' `c` input bytes (tap `t`: filters `w[t · c..]`, the same number of taps each),
/// biases with the input zero point folded in (taps in the padding read zero points),
/// and scales `[c]`: `acc = folded + Σ x · w`.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; each tap start has `c` bytes; `w` holds `taps · c`;
/// `folded`, `scales` and `o` hold `c`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn pixel<const PX: usize>(
    taps: [&[*const i8]; PX],
    w: &[i8],
    folded: &[i32],
    scales: &[f32],
    out: &Requant,
    mut o: [&mut [i8]; PX],
) {
    let c = o[0].len();
    let mut start = 0;
    while start < c {
        let len = (c - start).min(16 * VECS);
        // SAFETY: as the caller's; `start + len <= c`.
        unsafe {
            let p = Pass {
                taps,
                w,
                bias: folded,
                scales,
                out,
                start,
                len,
            };
            match len.div_ceil(16) {
                1 => p.run::<1>(&mut o),
                2 => p.run::<2>(&mut o),
                3 => p.run::<3>(&mut o),
                _ => p.run::<VECS>(&mut o),
            }
        }
        start += len;
    }
}

/// Channels `start..start + len` of a [`pixel`] call's `PX` pixels.
struct Pass<'a, const PX: usize> {
    taps: [&'a [*const i8]; PX],
    w: &'a [i8],
    bias: &'a [i32],
    scales: &'a [f32],
    out: &'a Requant,
    start: usize,
    len: usize,
}

impl<const PX: usize> Pass<'_, PX> {
    /// The pass in `V` vectors (`len <= 16 · V`), each filter vector loaded once for the
    /// `PX` pixels.
    ///
    /// # Safety
    /// As [`pixel`]'s.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn run<const V: usize>(&self, o: &mut [&mut [i8]; PX]) {
        let (start, len, out) = (self.start, self.len, self.out);
        let lo = _mm512_set1_ps((out.lo - out.zp) as f32);
        let hi = _mm512_set1_ps((out.hi - out.zp) as f32);
        let ozp = _mm512_set1_epi32(out.zp);
        let mask: [__mmask16; V] = std::array::from_fn(|v| lanes(len.saturating_sub(16 * v)));
        // SAFETY (masked loads and stores): lanes past `c` are masked off.
        let bias: [__m512i; V] = std::array::from_fn(|v| unsafe {
            _mm512_maskz_loadu_epi32(mask[v], self.bias.as_ptr().add(start + 16 * v))
        });
        let mut acc: [[__m512i; V]; PX] = [bias; PX];
        let c = o[0].len();
        // SAFETY: lanes past `c` are masked off; a vector of 16 lanes in range is loaded
        // whole (then the widening takes it from memory itself).
        let load = |p: *const i8, m: __mmask16| unsafe {
            if m == !0 {
                _mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))
            } else {
                _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p))
            }
        };
        for t in 0..self.taps[0].len() {
            // SAFETY: the filter row is in range (the caller's).
            let wp = unsafe { self.w.as_ptr().add(t * c + start) };
            // SAFETY: the taps' bytes are in range (the caller's).
            let xp: [*const i8; PX] =
                std::array::from_fn(|k| unsafe { self.taps[k][t].add(start) });
            for v in 0..V {
                // SAFETY: as above.
                let wv = load(unsafe { wp.add(16 * v) }, mask[v]);
                for k in 0..PX {
                    // SAFETY: as above.
                    let xv = load(unsafe { xp[k].add(16 * v) }, mask[v]);
                    acc[k][v] = _mm512_add_epi32(acc[k][v], _mm512_mullo_epi32(xv, wv));
                }
            }
        }
        for (k, o) in o.iter_mut().enumerate() {
            for v in 0..V {
                // SAFETY: lanes past `c` are masked off.
                let s = unsafe {
                    _mm512_maskz_loadu_ps(mask[v], self.scales.as_ptr().add(start + 16 * v))
                };
                let f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[k][v]), s);
                let f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), ozp);
                // SAFETY: lanes past `c` are masked off.
                unsafe {
                    _mm512_mask_cvtepi32_storeu_epi8(o.as_mut_ptr().add(start + 16 * v), mask[v], q)
                };
            }
        }
    }
}
