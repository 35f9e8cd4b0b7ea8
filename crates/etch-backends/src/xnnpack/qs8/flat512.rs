//! qs8 elementwise loops on AVX-512 (16 lanes in i32 or f32), each the scalar loop's
//! arithmetic lane by lane: the addition's exact i32 sum and arithmetic shift, the
//! quantization's product, clamp (a NaN goes to the high end, as `f32::min` does:
//! `vminps` returns its second operand) and rounding half to even (`cvtps`).

use super::super::qd8::vnni::lanes;
use super::Requant;
use super::binary::{AddParams, Operand};
use std::arch::x86_64::*;

/// Whether the CPU has AVX-512F, BW and VL (and `ETCH_QS8_SIMD` is not `0`).
pub fn available() -> bool {
    super::dw512::available()
}

/// Lanes `i..` of an operand (masked by `m`), widened to i32.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; a run holds the lanes of `m` from `i`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn load(x: Operand<'_>, i: usize, m: __mmask16) -> __m512i {
    match x {
        // SAFETY: as the caller's.
        Operand::Run(s) => unsafe {
            _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, s.as_ptr().add(i)))
        },
        Operand::Splat(v) => _mm512_set1_epi32(v as i32),
    }
}

/// `o[i] = add(a[i], b[i])` (XNNPACK's `qs8_vadd`).
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; runs `a` and `b` hold `o.len()` elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn add(a: Operand<'_>, b: Operand<'_>, o: &mut [i8], p: &AddParams, r: &Requant) {
    let (am, bm, bias) = (
        _mm512_set1_epi32(p.a_mult),
        _mm512_set1_epi32(p.b_mult),
        _mm512_set1_epi32(p.bias),
    );
    let shift = _mm_cvtsi32_si128(p.shift as i32);
    let (zp, lo, hi) = (
        _mm512_set1_epi32(r.zp),
        _mm512_set1_epi32(r.lo),
        _mm512_set1_epi32(r.hi),
    );
    let mut i = 0;
    while i < o.len() {
        let m = lanes(o.len() - i);
        // SAFETY: lanes past the end are masked off.
        let (av, bv) = unsafe { (load(a, i, m), load(b, i, m)) };
        let acc = _mm512_add_epi32(bias, _mm512_mullo_epi32(av, am));
        let acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(bv, bm));
        let q = _mm512_add_epi32(_mm512_sra_epi32(acc, shift), zp);
        let q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
        // SAFETY: as above.
        unsafe { _mm512_mask_cvtepi32_storeu_epi8(o.as_mut_ptr().add(i), m, q) };
        i += 16;
    }
}

/// `o[i] = requant((a[i] - a_zp) · (b[i] - b_zp) · scale)` (XNNPACK's `qs8_vmul`).
///
/// # Safety
/// As [`add`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn mul(
    a: Operand<'_>,
    b: Operand<'_>,
    o: &mut [i8],
    (a_zp, b_zp): (i32, i32),
    scale: f32,
    r: &Requant,
) {
    let (azp, bzp, s) = (
        _mm512_set1_epi32(a_zp),
        _mm512_set1_epi32(b_zp),
        _mm512_set1_ps(scale),
    );
    let lo = _mm512_set1_ps((r.lo - r.zp) as f32);
    let hi = _mm512_set1_ps((r.hi - r.zp) as f32);
    let zp = _mm512_set1_epi32(r.zp);
    let mut i = 0;
    while i < o.len() {
        let m = lanes(o.len() - i);
        // SAFETY: lanes past the end are masked off.
        let (av, bv) = unsafe { (load(a, i, m), load(b, i, m)) };
        let p = _mm512_mullo_epi32(_mm512_sub_epi32(av, azp), _mm512_sub_epi32(bv, bzp));
        let f = _mm512_mul_ps(_mm512_cvtepi32_ps(p), s);
        let f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
        // SAFETY: as above.
        unsafe { _mm512_mask_cvtepi32_storeu_epi8(o.as_mut_ptr().add(i), m, q) };
        i += 16;
    }
}

/// `q[i] = clamp(rne(x[i] · inv) + zp)`.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; `x` and `q` have one length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize(x: &[f32], q: &mut [i8], inv: f32, zp: i32) {
    let inv = _mm512_set1_ps(inv);
    let lo = _mm512_set1_ps((-128 - zp) as f32);
    let hi = _mm512_set1_ps((127 - zp) as f32);
    let zpv = _mm512_set1_epi32(zp);
    let mut i = 0;
    while i < q.len() {
        let m = lanes(q.len() - i);
        // SAFETY: lanes past the end are masked off.
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
        let v = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v, inv), hi), lo);
        let r = _mm512_add_epi32(_mm512_cvtps_epi32(v), zpv);
        // SAFETY: as above.
        unsafe { _mm512_mask_cvtepi32_storeu_epi8(q.as_mut_ptr().add(i), m, r) };
        i += 16;
    }
}

/// `x[i] = (q[i] - zp) · scale`.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; `q` and `x` have one length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn dequantize(q: &[i8], x: &mut [f32], scale: f32, zp: i32) {
    let (s, zpv) = (_mm512_set1_ps(scale), _mm512_set1_epi32(zp));
    let mut i = 0;
    while i < x.len() {
        let m = lanes(x.len() - i);
        // SAFETY: lanes past the end are masked off.
        let v = unsafe { _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, q.as_ptr().add(i))) };
        let f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, zpv)), s);
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_ps(x.as_mut_ptr().add(i), m, f) };
        i += 16;
    }
}

/// Whether the CPU has AVX-512 VBMI besides [`available`]'s features.
pub fn vbmi_available() -> bool {
    available() && std::arch::is_x86_feature_detected!("avx512vbmi")
}

/// `o[i] = t[x[i] as u8]`: two-table byte permutes for each half of the table, the
/// index's top bit choosing between them.
///
/// # Safety
/// The CPU has AVX-512F, BW and VBMI; `x` and `o` have one length.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub unsafe fn lut(x: &[i8], t: &[i8; 256], o: &mut [i8]) {
    // SAFETY: 4 × 64 bytes of the table.
    let q: [__m512i; 4] =
        std::array::from_fn(|k| unsafe { _mm512_loadu_si512(t.as_ptr().add(64 * k).cast()) });
    let mut i = 0;
    while i < o.len() {
        let n = o.len() - i;
        let m: __mmask64 = if n >= 64 { !0 } else { (1u64 << n) - 1 };
        // SAFETY: lanes past the end are masked off.
        let v = unsafe { _mm512_maskz_loadu_epi8(m, x.as_ptr().add(i)) };
        let lo = _mm512_permutex2var_epi8(q[0], v, q[1]);
        let hi = _mm512_permutex2var_epi8(q[2], v, q[3]);
        let r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_epi8(o.as_mut_ptr().add(i), m, r) };
        i += 64;
    }
}

/// `sums[j] = Σ_p x[p · stride + j]` over `rows` rows, for the first `sums.len()` (at most
/// 64) columns: exact i32 sums, 16 columns a vector.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL; `(rows - 1) · stride + sums.len() <= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn sum_columns(x: &[i8], rows: usize, stride: usize, sums: &mut [i32]) {
    let len = sums.len();
    let mask: [__mmask16; 4] = std::array::from_fn(|v| lanes(len.saturating_sub(16 * v)));
    let mut acc = [_mm512_setzero_si512(); 4];
    for p in 0..rows {
        // SAFETY: row `p` holds `len` bytes (the caller's); lanes past `len` are masked off.
        let row = unsafe { x.as_ptr().add(p * stride) };
        for v in 0..4 {
            if mask[v] == 0 {
                break;
            }
            // SAFETY: as above.
            let b = unsafe { _mm_maskz_loadu_epi8(mask[v], row.add(16 * v)) };
            acc[v] = _mm512_add_epi32(acc[v], _mm512_cvtepi8_epi32(b));
        }
    }
    for v in 0..4 {
        if mask[v] == 0 {
            break;
        }
        // SAFETY: lanes past `len` are masked off.
        unsafe { _mm512_mask_storeu_epi32(sums.as_mut_ptr().add(16 * v), mask[v], acc[v]) };
    }
}
