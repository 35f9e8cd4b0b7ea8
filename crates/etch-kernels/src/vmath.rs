//! Vectorised `f32` math for the unary kernels: sigmoid and SiLU from one `e^x`, 16 lanes
//! at a time with AVX-512F or 8 with AVX2 + FMA, chosen at run time.
//!
//! `e^z` for `z = -|x|` (clamped at -110): `z = n·ln 2 + t` with `n = round(z·log2 e)`
//! (rounded by adding a magic bias, whose low mantissa bits then hold `n` plus the exponent
//! bias) and `|t| ≤ ln 2 / 2` (Cody-Waite reduction with `ln 2` in two parts), `e^t` by a
//! degree-6 minimax polynomial, `2^n` from `n`'s bits — the scheme of XNNPACK's
//! `rr2-p5-div` sigmoid with one more degree. The exponential is kept scaled by 2^64 so that it stays a normal
//! number down to the clamp (sigmoid is subnormal below x ≈ -87.3 and rounds to 0 below
//! x ≈ -103.9); the quotients are scaled back by one multiplication, exact for normal results
//! and correctly rounded for subnormal ones, so subnormal results are not flushed to 0.
//!
//! Both vector variants run the same IEEE operations in the same order (fused multiply-adds,
//! correctly rounded divisions), so they give the same bits; the tail of a row goes through
//! the same code with masked loads and stores, so an element's value does not depend on
//! where its row starts or ends, i.e. on how the work is split over threads. Each function
//! returns `false` (and writes nothing) on a CPU without either variant; the caller then
//! uses the scalar formula.

/// `out[i] = 1 / (1 + e^-x[i])`; `false` if the CPU has no vector variant.
pub fn sigmoid(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::Sigmoid)
}

/// `out[i] = x[i] / (1 + e^-x[i])` (SiLU; `-inf` gives NaN, as the formula does in PyTorch);
/// `false` if the CPU has no vector variant.
pub fn silu(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::Silu)
}

/// `out[i] = x[i] * sigmoid(x[i])` with sigmoid rounded first, exactly as [`sigmoid`]
/// followed by a multiplication (XNNPACK's SiLU: `XNNSigmoid` then `XNNMultiply`), in one
/// pass; `false` if the CPU has no vector variant.
pub fn sigmoid_mul(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::SigmoidMul)
}

/// `out[i] = x[i] * min(max(fma(x[i], 1/6, 1/2), 0), 1)`, XNNPACK's hardswish (what
/// `unary::Hardswish` computes, bit for bit; not PyTorch's `x * clamp(x + 3, 0, 6) / 6`,
/// which portable programs keep); `false` if the CPU has no vector variant.
pub fn hardswish(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::Hardswish)
}

/// `out[i] = sin x[i]` as XNNPACK computes its `XNNSin` nodes (what `unary::XnnSin`
/// computes, bit for bit); `false` if the CPU has no vector variant.
pub fn xnn_sin(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::Sin)
}

/// `out[i] = cos x[i]` as XNNPACK computes its `XNNCos` nodes (`unary::XnnCos`); `false`
/// if the CPU has no vector variant.
pub fn xnn_cos(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::Cos)
}

/// Whether this CPU has a vector variant (AVX-512F, or AVX2 and FMA), i.e. whether the
/// functions below do the work rather than return `false`.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f") || (has!("avx2") && has!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[i] = e^-|x[i]|` (`e^x` for `x <= 0`: softmax's `e^(x - max)`), `+0` below the
/// clamp (-110; `e^-103.98` already rounds to `+0`), NaN for NaN; `false` if the CPU has no
/// vector variant.
pub fn exp_neg_abs(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, Kind::ExpNegAbs)
}

/// [`exp_neg_abs`] in place.
pub fn exp_neg_abs_in_place(buf: &mut [f32]) -> bool {
    in_place(buf, Kind::ExpNegAbs)
}

#[derive(Clone, Copy)]
enum Kind {
    Sigmoid,
    SigmoidMul,
    Silu,
    ExpNegAbs,
    Hardswish,
    Sin,
    Cos,
}

fn map(x: &[f32], out: &mut [f32], kind: Kind) -> bool {
    assert_eq!(x.len(), out.len(), "vmath: input and output lengths differ");
    // SAFETY: `x` and `out` hold `x.len()` elements, and two slices never overlap.
    unsafe { run(x.as_ptr(), out.as_mut_ptr(), x.len(), kind) }
}

fn in_place(buf: &mut [f32], kind: Kind) -> bool {
    let p = buf.as_mut_ptr();
    // SAFETY: `buf` holds its length, read and written through the one pointer.
    unsafe { run(p, p, buf.len(), kind) }
}

/// `kind` over `n` elements from `xp` to `op` with this CPU's vector variant; `false`
/// (nothing written) if it has none.
///
/// # Safety
/// `xp` readable and `op` writable for `n` elements; `op` is `xp` or the two spans are
/// disjoint.
unsafe fn run(xp: *const f32, op: *mut f32, n: usize, kind: Kind) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") {
            // SAFETY: the CPU has AVX-512F; the spans are the caller's.
            unsafe { x86::run_avx512(xp, op, n, kind) };
            return true;
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: the CPU has AVX2 and FMA; the spans are the caller's.
            unsafe { x86::run_avx2(xp, op, n, kind) };
            return true;
        }
    }
    let _ = (xp, op, n, kind);
    false
}

/// [`sigmoid`] in place: `buf[i] = sigmoid(buf[i])`, the same bits; `false` (nothing
/// written) if the CPU has no vector variant.
pub fn sigmoid_in_place(buf: &mut [f32]) -> bool {
    in_place(buf, Kind::Sigmoid)
}

/// [`sigmoid_mul`] in place, the same bits; `false` (nothing written) if the CPU has no
/// vector variant.
pub fn sigmoid_mul_in_place(buf: &mut [f32]) -> bool {
    in_place(buf, Kind::SigmoidMul)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Kind;
    use std::arch::x86_64::*;

    /// The operations the kernels need on a vector of `f32` lanes. Every method is a thin
    /// `#[inline(always)]` wrapper of one or two intrinsics: it is only called from a
    /// `#[target_feature]` function of its instruction set, into which it is inlined.
    trait Lanes: Arith {
        const N: usize;
        type Mask: Copy;
        /// A mask of the first `n < N` lanes.
        unsafe fn tail(n: usize) -> Self::Mask;
        /// `N` lanes from `p`.
        unsafe fn load(p: *const f32) -> Self;
        /// The lanes of `m` from `p`, zeros elsewhere (the others are not read).
        unsafe fn load_masked(p: *const f32, m: Self::Mask) -> Self;
        unsafe fn store(self, p: *mut f32);
        /// Stores the lanes of `m` only.
        unsafe fn store_masked(self, p: *mut f32, m: Self::Mask);
    }

    /// The arithmetic of [`Lanes`] (also that of [`Quad`]s of them).
    trait Arith: Copy {
        unsafe fn splat(v: f32) -> Self;
        unsafe fn add(self, b: Self) -> Self;
        unsafe fn sub(self, b: Self) -> Self;
        unsafe fn mul(self, b: Self) -> Self;
        unsafe fn div(self, b: Self) -> Self;
        /// `self * b + c`, rounded once.
        unsafe fn fma(self, b: Self, c: Self) -> Self;
        /// `max(self, b)` as `maxps`: `b` where either is NaN.
        unsafe fn max(self, b: Self) -> Self;
        /// `min(self, b)` as `minps`: `b` where either is NaN.
        unsafe fn min(self, b: Self) -> Self;
        /// The bitwise or.
        unsafe fn or(self, b: Self) -> Self;
        /// The bits shifted left by 23 (a small integer in the low bits → an exponent).
        unsafe fn shl23(self) -> Self;
        /// `self > v ? a : b` (`b` where either is NaN).
        unsafe fn if_gt(self, v: Self, a: Self, b: Self) -> Self;
        /// `a` where the sign bit of `self` is clear, `b` where it is set.
        unsafe fn if_sign_clear(self, a: Self, b: Self) -> Self;
        /// Rounded to the nearest integer, ties to even.
        unsafe fn round(self) -> Self;
    }

    /// Lane methods that are one intrinsic on `self` and the other operands.
    macro_rules! lane_ops {
        ($($name:ident($($arg:ident),*) => $intrinsic:ident;)*) => {$(
            #[inline(always)]
            unsafe fn $name(self, $($arg: Self),*) -> Self {
                unsafe { $intrinsic(self, $($arg),*) }
            }
        )*};
    }

    impl Lanes for __m512 {
        const N: usize = 16;
        type Mask = __mmask16;
        #[inline(always)]
        unsafe fn tail(n: usize) -> __mmask16 {
            ((1u32 << n) - 1) as __mmask16
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn load_masked(p: *const f32, m: __mmask16) -> Self {
            unsafe { _mm512_maskz_loadu_ps(m, p) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm512_storeu_ps(p, self) }
        }
        #[inline(always)]
        unsafe fn store_masked(self, p: *mut f32, m: __mmask16) {
            unsafe { _mm512_mask_storeu_ps(p, m, self) }
        }
    }

    impl Arith for __m512 {
        lane_ops! {
            add(b) => _mm512_add_ps;
            sub(b) => _mm512_sub_ps;
            mul(b) => _mm512_mul_ps;
            div(b) => _mm512_div_ps;
            fma(b, c) => _mm512_fmadd_ps;
            max(b) => _mm512_max_ps;
            min(b) => _mm512_min_ps;
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { _mm512_set1_ps(v) }
        }
        #[inline(always)]
        unsafe fn or(self, b: Self) -> Self {
            // `_mm512_or_ps` needs AVX-512DQ; the integer form is AVX-512F.
            unsafe {
                _mm512_castsi512_ps(_mm512_or_si512(
                    _mm512_castps_si512(self),
                    _mm512_castps_si512(b),
                ))
            }
        }
        #[inline(always)]
        unsafe fn shl23(self) -> Self {
            unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(self))) }
        }
        #[inline(always)]
        unsafe fn if_gt(self, v: Self, a: Self, b: Self) -> Self {
            unsafe { _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(self, v), b, a) }
        }
        #[inline(always)]
        unsafe fn if_sign_clear(self, a: Self, b: Self) -> Self {
            unsafe {
                let neg =
                    _mm512_cmplt_epi32_mask(_mm512_castps_si512(self), _mm512_setzero_si512());
                _mm512_mask_blend_ps(neg, a, b)
            }
        }
        #[inline(always)]
        unsafe fn round(self) -> Self {
            unsafe {
                _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self)
            }
        }
    }

    impl Lanes for __m256 {
        const N: usize = 8;
        type Mask = __m256i;
        #[inline(always)]
        unsafe fn tail(n: usize) -> __m256i {
            unsafe {
                _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(n as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                )
            }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn load_masked(p: *const f32, m: __m256i) -> Self {
            unsafe { _mm256_maskload_ps(p, m) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm256_storeu_ps(p, self) }
        }
        #[inline(always)]
        unsafe fn store_masked(self, p: *mut f32, m: __m256i) {
            unsafe { _mm256_maskstore_ps(p, m, self) }
        }
    }

    impl Arith for __m256 {
        lane_ops! {
            add(b) => _mm256_add_ps;
            sub(b) => _mm256_sub_ps;
            mul(b) => _mm256_mul_ps;
            div(b) => _mm256_div_ps;
            fma(b, c) => _mm256_fmadd_ps;
            max(b) => _mm256_max_ps;
            min(b) => _mm256_min_ps;
        }
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { _mm256_set1_ps(v) }
        }
        #[inline(always)]
        unsafe fn or(self, b: Self) -> Self {
            unsafe { _mm256_or_ps(self, b) }
        }
        #[inline(always)]
        unsafe fn shl23(self) -> Self {
            unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(self))) }
        }
        #[inline(always)]
        unsafe fn if_gt(self, v: Self, a: Self, b: Self) -> Self {
            unsafe { _mm256_blendv_ps(b, a, _mm256_cmp_ps::<_CMP_GT_OQ>(self, v)) }
        }
        #[inline(always)]
        unsafe fn if_sign_clear(self, a: Self, b: Self) -> Self {
            // `blendvps` selects by the sign bit of its mask operand.
            unsafe { _mm256_blendv_ps(a, b, self) }
        }
        #[inline(always)]
        unsafe fn round(self) -> Self {
            unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self) }
        }
    }

    /// Four vectors as one: every operation applied to each in turn, so that the four
    /// independent chains of a kernel are interleaved instruction by instruction. With one
    /// vector's chain of ~20 dependent operations a loop iteration, the out-of-order window
    /// was short of work: on Zen 1 removing the sigmoid's division did not change its
    /// speed, and four vectors at a time took it from 0.60 to 0.67 elements/ns (the same
    /// operations on each lane: the same bits).
    #[derive(Clone, Copy)]
    struct Quad<V>([V; 4]);

    impl<V: Lanes> Quad<V> {
        /// Four vectors from `p`.
        ///
        /// # Safety
        /// `p` readable for `4 · V::N` elements.
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller's contract.
            unsafe { Quad([0, 1, 2, 3].map(|k| V::load(p.add(k * V::N)))) }
        }

        /// Stores the four vectors at `p`.
        ///
        /// # Safety
        /// `p` writable for `4 · V::N` elements.
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            for (k, v) in self.0.into_iter().enumerate() {
                // SAFETY: the caller's contract.
                unsafe { v.store(p.add(k * V::N)) }
            }
        }
    }

    /// `Arith` methods of a [`Quad`]: the method on each of its vectors in turn.
    macro_rules! quad_ops {
        ($($name:ident($($arg:ident),*);)*) => {$(
            #[inline(always)]
            unsafe fn $name(self, $($arg: Self),*) -> Self {
                // SAFETY: each vector's own operation, inlined into a caller with the
                // features of `V` (the contract of `Arith`'s methods).
                Quad(std::array::from_fn(|k| unsafe { self.0[k].$name($($arg.0[k]),*) }))
            }
        )*};
    }

    impl<V: Arith> Arith for Quad<V> {
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { Quad([V::splat(v); 4]) }
        }
        quad_ops! {
            add(b); sub(b); mul(b); div(b); fma(b, c); max(b); min(b); or(b); shl23();
            if_gt(v, a, b); if_sign_clear(a, b); round();
        }
    }

    /// 2^64 and 2^-64: the scale of the exponential.
    const SCALE_UP: f32 = 18446744073709551616.0;
    const SCALE_DOWN: f32 = 1.0 / SCALE_UP;

    /// The least `z` of the exponential: sigmoid(-110) and -110·sigmoid(-110) round to 0.
    const CLAMP: f32 = -110.0;

    /// `(e^z · 2^64, e^z)` for `z = -|x|`, clamped at [`CLAMP`] (NaN stays NaN).
    #[inline(always)]
    unsafe fn exp_neg_abs<V: Arith>(x: V) -> (V, V) {
        // 1.5·2^23 + 127 + 64: after rounding `z·log2 e` into this, the low mantissa bits
        // hold the biased exponent of 2^(n + 64).
        const MAGIC: f32 = 12_583_103.0;
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        // -ln 2 in two parts (-0x1.62E400p-1, -0x1.7F7D1Cp-20): the first has trailing
        // zeros, so `n·hi` is exact.
        const MINUS_LN2_HI: f32 = f32::from_bits(0xbf31_7200);
        const MINUS_LN2_LO: f32 = f32::from_bits(0xb5bf_be8e);
        // e^t ≈ 1 + t·(1 + t·(c2 + t·(c3 + t·(c4 + t·(c5 + t·c6))))) on |t| ≤ ln 2 / 2: a
        // minimax fit of the relative error (0.3·2^-24 with these f32 coefficients;
        // XNNPACK's degree 5 has 1.5·2^-24): 0x1.FFFFFCp-2, 0x1.55541Ap-3, 0x1.555822p-5,
        // 0x1.126782p-7, 0x1.6AE730p-10.
        const C2: f32 = f32::from_bits(0x3eff_fffe);
        const C3: f32 = f32::from_bits(0x3e2a_aa0d);
        const C4: f32 = f32::from_bits(0x3d2a_ac11);
        const C5: f32 = f32::from_bits(0x3c09_33c1);
        const C6: f32 = f32::from_bits(0x3ab5_7398);
        // SAFETY (all blocks): plain lane arithmetic, inlined into a caller with the
        // features of `V`.
        unsafe {
            // -|x|, then the clamp; `max` keeps its second operand when it is NaN.
            let z = V::splat(CLAMP).max(x.or(V::splat(-0.0)));
            let magic = V::splat(MAGIC);
            let n = z.fma(V::splat(LOG2E), magic);
            let s = n.shl23();
            let n = n.sub(magic);
            let t = n.fma(V::splat(MINUS_LN2_HI), z);
            let t = n.fma(V::splat(MINUS_LN2_LO), t);
            let p = t.fma(V::splat(C6), V::splat(C5));
            let p = p.fma(t, V::splat(C4));
            let p = p.fma(t, V::splat(C3));
            let p = p.fma(t, V::splat(C2));
            let p = p.fma(t, V::splat(1.0));
            let e_up = t.mul(s).fma(p, s);
            (e_up, e_up.mul(V::splat(SCALE_DOWN)))
        }
    }

    /// `1 + e` from the scaled exponential `e_up = e · 2^64` in one fused multiply-add: the
    /// same bits as scaling back and adding (exact scaling while `e` is normal; below, `1 +
    /// e` rounds to 1 either way), one operation fewer (these kernels are bound by their
    /// operation count: an Estrin polynomial, shorter but one operation longer, was slower).
    #[inline(always)]
    unsafe fn one_plus<V: Arith>(e_up: V) -> V {
        // SAFETY: as in `exp_neg_abs`.
        unsafe { e_up.fma(V::splat(SCALE_DOWN), V::splat(1.0)) }
    }

    /// One vector of results.
    #[inline(always)]
    unsafe fn lanes<V: Arith>(x: V, kind: Kind) -> V {
        // SAFETY: as in `exp_neg_abs`.
        unsafe {
            let (zero, one) = (V::splat(0.0), V::splat(1.0));
            match kind {
                Kind::Sigmoid | Kind::SigmoidMul => {
                    // sigmoid(-|x|) = e / (1 + e); sigmoid(|x|) = 1 - that. Divided as
                    // `e·2^64 / (e·2^64 + 2^64)`: scaling by 2^64 commutes with rounding
                    // while `e` is normal, and for a subnormal `e` the sum is 2^64 and the
                    // quotient `e·2^64 / 2^64` is rounded once, so these are the bits of
                    // `(e·2^64 / (1 + e))·2^-64` with an addition for a fused
                    // multiply-add and no scaling back (the multiply-adds bound the kernel).
                    let e_up = exp_neg_abs(x).0;
                    let q = e_up.div(e_up.add(V::splat(SCALE_UP)));
                    // (At ±0 both are 1/2; NaN gives NaN either way.)
                    let s = x.if_sign_clear(one.sub(q), q);
                    if matches!(kind, Kind::SigmoidMul) {
                        x.mul(s)
                    } else {
                        s
                    }
                }
                Kind::ExpNegAbs => exp_neg_abs(x).1,
                Kind::Silu => {
                    // x > 0: x / (1 + e); otherwise x·e / (1 + e) as `x·e·2^64 / (e·2^64 +
                    // 2^64)` (see `Kind::Sigmoid`; the same bits as dividing by `1 + e` and
                    // scaling back, for each of the 2^32 inputs, checked).
                    let e_up = exp_neg_abs(x).0;
                    let num = x.if_gt(zero, x, x.mul(e_up));
                    let den = x.if_gt(zero, one_plus(e_up), e_up.add(V::splat(SCALE_UP)));
                    let y = num.div(den);
                    // Below the clamp x·e^x rounds to -0: x·0 (NaN for -inf, as in
                    // PyTorch's formula).
                    V::splat(CLAMP).if_gt(x, x.mul(zero), y)
                }
                Kind::Hardswish => {
                    // XNNPACK's: `min(max(x / 6 + 1 / 2, 0), 1) · x`, the first one fused
                    // multiply-add (see `crate::unary::Hardswish`).
                    let sixth = V::splat(crate::unary::SIXTH);
                    let a = x.fma(sixth, V::splat(0.5)).max(zero).min(one);
                    a.mul(x)
                }
                Kind::Sin | Kind::Cos => {
                    // XNNPACK's `rational_5_4_div` kernels, operation for operation (see
                    // `crate::unary::XnnSin`).
                    use crate::unary::xnn_trig as c;
                    let q = x.mul(V::splat(c::INV_2PI)).round();
                    let v = q.fma(V::splat(-c::TWO_PI_HI), x);
                    let mut v = q.fma(V::splat(-c::TWO_PI_LO), v);
                    if matches!(kind, Kind::Cos) {
                        v = V::splat(c::PI_HALF).sub(v);
                    }
                    let pi = V::splat(c::PI);
                    let v = v.min(pi.sub(v));
                    let v = v.max(V::splat(-c::PI).sub(v));
                    let v = v.min(pi.sub(v));
                    let v2 = v.mul(v);
                    let p = v2.fma(V::splat(c::A5), V::splat(c::A3));
                    let p = v.mul(v2.fma(p, one));
                    let q = v2.fma(V::splat(c::B4), V::splat(c::B2));
                    p.div(v2.fma(q, one))
                }
            }
        }
    }

    /// The kernel over `n` elements from `xp` to `op`, which may be the same buffer (each
    /// vector is loaded before it is stored): whole vectors, then the tail with masked
    /// loads and stores.
    ///
    /// # Safety
    /// `xp` readable and `op` writable for `n` elements; the features of `V`.
    #[inline(always)]
    unsafe fn map_ptr<V: Lanes>(xp: *const f32, op: *mut f32, n: usize, kind: Kind) {
        let mut i = 0;
        // SAFETY: `i + N <= n` for the full vectors and the tail mask covers `n - i < N`
        // lanes, so every access is within both buffers (the caller's).
        unsafe {
            while i + 4 * V::N <= n {
                lanes(Quad::<V>::load(xp.add(i)), kind).store(op.add(i));
                i += 4 * V::N;
            }
            while i + V::N <= n {
                lanes(V::load(xp.add(i)), kind).store(op.add(i));
                i += V::N;
            }
            if i < n {
                let m = V::tail(n - i);
                lanes(V::load_masked(xp.add(i), m), kind).store_masked(op.add(i), m);
            }
        }
    }

    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(test)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn map_avx512(x: &[f32], out: &mut [f32], kind: Kind) {
        // SAFETY: AVX-512F is enabled here, as `__m512`'s methods need; both slices hold
        // the shorter one's length, and two slices never overlap.
        unsafe { map_ptr::<__m512>(x.as_ptr(), out.as_mut_ptr(), x.len().min(out.len()), kind) }
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(test)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn map_avx2(x: &[f32], out: &mut [f32], kind: Kind) {
        // SAFETY: AVX2 and FMA are enabled here, as `__m256`'s methods need; both slices
        // hold the shorter one's length, and two slices never overlap.
        unsafe { map_ptr::<__m256>(x.as_ptr(), out.as_mut_ptr(), x.len().min(out.len()), kind) }
    }

    /// [`map_ptr`] with AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; the spans as for [`map_ptr`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn run_avx512(xp: *const f32, op: *mut f32, n: usize, kind: Kind) {
        // SAFETY: AVX-512F is enabled here; the spans are the caller's.
        unsafe { map_ptr::<__m512>(xp, op, n, kind) }
    }

    /// [`map_ptr`] with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; the spans as for [`map_ptr`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn run_avx2(xp: *const f32, op: *mut f32, n: usize, kind: Kind) {
        // SAFETY: AVX2 and FMA are enabled here; the spans are the caller's.
        unsafe { map_ptr::<__m256>(xp, op, n, kind) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigmoid_ref(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    fn silu_ref(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    fn exp_neg_abs_ref(x: f64) -> f64 {
        (-x.abs()).exp()
    }

    /// `|got - want|` in units of the last place of `want` rounded to `f32` (subnormals'
    /// spacing below 2^-126); 0 when both are NaN, infinite for a NaN on one side only.
    fn ulps(got: f32, want: f64) -> f64 {
        if got.is_nan() || want.is_nan() {
            return if got.is_nan() && want.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        if got as f64 == want {
            return 0.0;
        }
        let exp = if want == 0.0 {
            -126
        } else {
            want.abs().log2().floor().max(-126.0) as i32
        };
        (got as f64 - want).abs() / 2f64.powi(exp - 23)
    }

    /// Every `step`-th bit pattern of `f32` (and the special values), through `kernel` in
    /// rows of 1000 (so tails are exercised); the largest ulp error against `reference`
    /// (over normal results only with `normal_only`) and the input where it occurs.
    fn sweep(
        kernel: impl Fn(&[f32], &mut [f32]),
        reference: fn(f64) -> f64,
        step: usize,
        normal_only: bool,
    ) -> (f64, f32) {
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MAX,
            f32::MIN,
            -87.3,
            -88.8,
            -103.9,
            -104.0,
            -110.0,
            -200.0,
        ];
        let mut xs: Vec<f32> = specials.to_vec();
        xs.extend((0..=u32::MAX).step_by(step).map(f32::from_bits));
        let mut out = vec![0.0; 1000];
        let mut worst = (0.0, 0.0);
        for chunk in xs.chunks(1000) {
            kernel(chunk, &mut out[..chunk.len()]);
            for (&x, &y) in chunk.iter().zip(&out) {
                let want = reference(x as f64);
                if normal_only && want.abs() < f32::MIN_POSITIVE as f64 {
                    continue;
                }
                let e = ulps(y, want);
                if e > worst.0 {
                    worst = (e, x);
                }
            }
        }
        worst
    }

    /// A vector variant of the kernels.
    type Variant = unsafe fn(&[f32], &mut [f32], Kind);

    /// The vector variants this CPU has, each with its name.
    #[cfg(target_arch = "x86_64")]
    fn variants() -> Vec<(&'static str, Variant)> {
        let mut v: Vec<(&'static str, Variant)> = Vec::new();
        if std::arch::is_x86_feature_detected!("avx512f") {
            v.push(("avx512f", x86::map_avx512));
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            v.push(("avx2", x86::map_avx2));
        }
        v
    }

    #[cfg(target_arch = "x86_64")]
    fn check_accuracy(step: usize) {
        for (name, f) in variants() {
            for (kind, reference, bound) in [
                (Kind::Sigmoid, sigmoid_ref as fn(f64) -> f64, 2.5),
                (Kind::Silu, silu_ref as fn(f64) -> f64, 3.5),
                (Kind::ExpNegAbs, exp_neg_abs_ref as fn(f64) -> f64, 1.5),
            ] {
                // SAFETY: `variants` lists only what this CPU has.
                let (e, x) = sweep(|x, o| unsafe { f(x, o, kind) }, reference, step, false);
                let label = match kind {
                    Kind::Sigmoid => "sigmoid",
                    Kind::SigmoidMul => "x * sigmoid",
                    Kind::Silu => "silu",
                    Kind::ExpNegAbs => "exp(-|x|)",
                    Kind::Hardswish => "hardswish",
                    Kind::Sin => "sin",
                    Kind::Cos => "cos",
                };
                eprintln!("{name} {label}: max {e:.3} ulp at x = {x:e}");
                assert!(e <= bound, "{name} {label}: {e} ulp at {x:e}");
            }
        }
    }

    /// Every 97th `f32` bit pattern, then ±0, ±inf, NaN and `extra`.
    fn every_97th(extra: &[f32]) -> Vec<f32> {
        let mut x: Vec<f32> = (0..u32::MAX / 97).map(|i| f32::from_bits(i * 97)).collect();
        x.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        x.extend(extra);
        x
    }

    /// `sigmoid_mul` is `sigmoid` followed by a multiplication, bit for bit (the two
    /// XNNPACK nodes it replaces), over every 97th f32 and the edges.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn sigmoid_mul_is_sigmoid_then_multiply() {
        let x = every_97th(&[-110.0, -104.0, 88.0]);
        for chunk in x.chunks(1 << 20) {
            let (mut s, mut y) = (vec![0.0; chunk.len()], vec![0.0; chunk.len()]);
            if !super::sigmoid(chunk, &mut s) {
                return; // no vector variant on this CPU
            }
            assert!(super::sigmoid_mul(chunk, &mut y));
            for ((&x, &s), &y) in chunk.iter().zip(&s).zip(&y) {
                assert_eq!((x * s).to_bits(), y.to_bits(), "x = {x:e}");
            }
        }
    }

    /// `hardswish` equals the scalar formula (`crate::unary::Hardswish`) bit for bit on
    /// every variant, over every 97th f32 and the edges (NaN, ±0, ±inf, -3, 3, ±6).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn hardswish_is_the_formula() {
        use crate::unary::{FloatOp, Hardswish};
        let x = every_97th(&[
            -f32::NAN,
            -3.0,
            3.0,
            -6.0,
            6.0,
            -3.0000002,
            -2.9999998,
            2.9999998,
        ]);
        for chunk in x.chunks(1 << 20) {
            for (_, f) in variants() {
                let mut y = vec![0.0; chunk.len()];
                // SAFETY: `variants` lists only what this CPU has.
                unsafe { f(chunk, &mut y, Kind::Hardswish) };
                for (&x, &y) in chunk.iter().zip(&y) {
                    let want = Hardswish.apply(x);
                    assert_eq!(want.to_bits(), y.to_bits(), "x = {x:e}: {y:e} vs {want:e}");
                }
            }
        }
    }

    /// `xnn_sin` and `xnn_cos` equal the scalar formulas (`crate::unary::XnnSin`,
    /// `XnnCos`, XNNPACK's operations in its order) bit for bit on every variant, over
    /// every 97th f32 and the edges; and they are within 4e-7 of `sin` and `cos` over
    /// `[-100, 100]` (RoPE's angles: positions times inverse frequencies).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn xnn_sin_cos_are_the_formulas() {
        use crate::unary::{FloatOp, XnnCos, XnnSin};
        let pi = std::f32::consts::PI;
        let mut x = every_97th(&[pi, -pi, pi / 2.0, -pi / 2.0, 2.0 * pi, 1e30, -1e-30]);
        x.extend((-1_000_000..=1_000_000).map(|i| i as f32 * 1e-4));
        for chunk in x.chunks(1 << 20) {
            for (_, f) in variants() {
                for (kind, op) in [(Kind::Sin, false), (Kind::Cos, true)] {
                    let mut y = vec![0.0; chunk.len()];
                    // SAFETY: `variants` lists only what this CPU has.
                    unsafe { f(chunk, &mut y, kind) };
                    let mut worst = 0f64;
                    for (&x, &y) in chunk.iter().zip(&y) {
                        let want = if op { XnnCos.apply(x) } else { XnnSin.apply(x) };
                        assert!(
                            want.to_bits() == y.to_bits() || want.is_nan() && y.is_nan(),
                            "x = {x:e}: {y:e} vs {want:e}"
                        );
                        if x.abs() <= 100.0 {
                            let exact = if op {
                                (x as f64).cos()
                            } else {
                                (x as f64).sin()
                            };
                            worst = worst.max((y as f64 - exact).abs());
                        }
                    }
                    assert!(worst <= 4e-7, "cos = {op}: error {worst:e}");
                }
            }
        }
    }

    /// The scalar formulas' error over normal results, for comparison (not checked; they
    /// flush most subnormal results to 0).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn scalar_formula_accuracy() {
        let (e, x) = sweep(
            |x, o| {
                o.iter_mut()
                    .zip(x)
                    .for_each(|(o, &x)| *o = 1.0 / (1.0 + (-x).exp()))
            },
            sigmoid_ref,
            61,
            true,
        );
        eprintln!("scalar sigmoid: max {e:.3} ulp at x = {x:e} (normal results)");
        let (e, x) = sweep(
            |x, o| {
                o.iter_mut()
                    .zip(x)
                    .for_each(|(o, &x)| *o = x / (1.0 + (-x).exp()))
            },
            silu_ref,
            61,
            true,
        );
        eprintln!("scalar silu: max {e:.3} ulp at x = {x:e} (normal results)");
    }

    /// About 70 million inputs spread over the whole `f32` range.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn accuracy_sampled() {
        check_accuracy(61);
    }

    /// Every `f32` (about a minute): `cargo test --release -p etch-kernels vmath -- --ignored`.
    #[test]
    #[ignore]
    #[cfg(target_arch = "x86_64")]
    fn accuracy_exhaustive() {
        check_accuracy(1);
    }

    /// Special values exactly as PyTorch's formulas give them.
    #[test]
    fn special_values() {
        let x = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -200.0,
            200.0,
        ];
        let mut y = [0.0; 7];
        if sigmoid(&x, &mut y) {
            assert_eq!(&y[..4], &[0.5, 0.5, 1.0, 0.0]);
            assert!(y[4].is_nan());
            assert_eq!((y[5], y[6]), (0.0, 1.0));
        }
        if silu(&x, &mut y) {
            assert_eq!(&y[..3], &[0.0, 0.0, f32::INFINITY]);
            assert!(y[3].is_nan() && y[4].is_nan());
            assert_eq!((y[5], y[6]), (0.0, 200.0));
        }
        if exp_neg_abs(&x, &mut y) {
            assert_eq!(&y[..4], &[1.0, 1.0, 0.0, 0.0]);
            assert!(y[4].is_nan());
            assert_eq!((y[5], y[6]), (0.0, 0.0));
        }
    }

    /// In place gives the same bits as into another buffer.
    #[test]
    fn in_place_matches() {
        let x: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.37).sin() * 40.0).collect();
        let (mut a, mut b) = (vec![0.0; x.len()], x.clone());
        if sigmoid(&x, &mut a) {
            assert!(sigmoid_in_place(&mut b));
            assert_eq!(bits(&a), bits(&b));
            let mut b = x.clone();
            assert!(sigmoid_mul(&x, &mut a) && sigmoid_mul_in_place(&mut b));
            assert_eq!(bits(&a), bits(&b));
            let mut b = x.clone();
            assert!(exp_neg_abs(&x, &mut a) && exp_neg_abs_in_place(&mut b));
            assert_eq!(bits(&a), bits(&b));
        }
    }

    /// The variants agree bit for bit, and an element's value does not depend on where
    /// its row starts or ends (full vectors or a masked tail).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn variants_and_splits_agree() {
        let x: Vec<f32> = (0..1000)
            .map(|i| (i as f32 * 0.7361).sin() * 30.0 - 5.0)
            .collect();
        for kind in [Kind::Sigmoid, Kind::SigmoidMul, Kind::Silu, Kind::Hardswish] {
            let mut whole = vec![0.0; x.len()];
            map(&x, &mut whole, kind);
            for (_, f) in variants() {
                let mut y = vec![0.0; x.len()];
                // SAFETY: `variants` lists only what this CPU has.
                unsafe { f(&x, &mut y, kind) };
                assert_eq!(bits(&y), bits(&whole));
                for start in [1, 3, 7, 13, 17, 31] {
                    let mut p = vec![0.0; x.len()];
                    let (mut i, mut len) = (0, start);
                    while i < x.len() {
                        let j = (i + len).min(x.len());
                        // SAFETY: as above.
                        unsafe { f(&x[i..j], &mut p[i..j], kind) };
                        (i, len) = (j, len * 2 + 1);
                    }
                    assert_eq!(bits(&p), bits(&whole));
                }
            }
        }
    }

    /// Elements per nanosecond of the scalar formula (the kernels' previous path) and of
    /// each variant, one thread, on rows that fit in L1, L2 and neither:
    /// `cargo test --release -p etch-kernels vmath::tests::speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    #[cfg(target_arch = "x86_64")]
    fn speed() {
        use std::hint::black_box;
        use std::time::Instant;
        fn rate(n: usize, f: &dyn Fn(&[f32], &mut [f32])) -> f64 {
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 8.0).collect();
            let mut y = vec![0.0; n];
            let reps = (1 << 26) / n;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    f(black_box(&x), black_box(&mut y));
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            (n * reps) as f64 / best / 1e9
        }
        for (label, kind) in [
            ("sigmoid", Kind::Sigmoid),
            ("silu", Kind::Silu),
            ("exp(-|x|)", Kind::ExpNegAbs),
            ("hardswish", Kind::Hardswish),
            ("sin (libm)", Kind::Sin),
            ("cos (libm)", Kind::Cos),
        ] {
            for n in [4096, 65536, 1 << 22] {
                let scalar = rate(n, &|x, y| {
                    for (o, &x) in y.iter_mut().zip(x) {
                        *o = match kind {
                            Kind::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                            Kind::SigmoidMul => x * (1.0 / (1.0 + (-x).exp())),
                            Kind::Silu => x / (1.0 + (-x).exp()),
                            Kind::ExpNegAbs => (-x.abs()).exp(),
                            Kind::Hardswish => {
                                use crate::unary::{FloatOp, Hardswish};
                                Hardswish.apply(x)
                            }
                            Kind::Sin => x.sin(),
                            Kind::Cos => x.cos(),
                        };
                    }
                });
                let mut line = format!("{label} n={n}: scalar {scalar:.3}");
                for (name, f) in variants() {
                    // SAFETY: `variants` lists only what this CPU has.
                    let r = rate(n, &|x, y| unsafe { f(x, y, kind) });
                    line += &format!(", {name} {r:.3}");
                }
                eprintln!("{line} elements/ns");
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
