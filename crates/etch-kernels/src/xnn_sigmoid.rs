//! XNNPACK's `f32` sigmoid on AVX-512F (`xnn_f32_vsigmoid_ukernel__avx512f_rr2_lut32_p2_
//! perm2_scalef_div`, which ExecuTorch's XNNPACK runs for `XNNSigmoid` on such CPUs), for
//! the XNNPACK delegate: the same operations in the same order, so the same bits.
//!
//! With `z = -|x|`: `n = round(z · log2 e)` to 1/32 (a magic bias), `2^frac(n)` from a
//! 32-entry table, `t = z - n · ln 2` (two parts), `e^z ≈ 2^floor(n) · (l + l·t·(c1 +
//! c2·t))` (`scalef`), then `e^z / (1 + e^z)`, and `1 -` that for `x ≥ +0`, with
//! denormals flushed to zero as XNNPACK runs its operators. Its error is a few ulp for
//! normal results (etch's own `vmath::sigmoid`, for portable programs, keeps subnormal
//! results). Without AVX-512F the functions return `false`; callers then use `vmath`'s.

/// `2^(k/32)` for `k` in `0..32`, XNNPACK's table.
const TABLE: [u32; 32] = [
    0x3f80_0000,
    0x3f82_cd87,
    0x3f85_aac3,
    0x3f88_980f,
    0x3f8b_95c2,
    0x3f8e_a43a,
    0x3f91_c3d3,
    0x3f94_f4f0,
    0x3f98_37f0,
    0x3f9b_8d3a,
    0x3f9e_f532,
    0x3fa2_7043,
    0x3fa5_fed7,
    0x3fa9_a15b,
    0x3fad_583f,
    0x3fb1_23f6,
    0x3fb5_04f3,
    0x3fb8_fbaf,
    0x3fbd_08a4,
    0x3fc1_2c4d,
    0x3fc5_672a,
    0x3fc9_b9be,
    0x3fce_248c,
    0x3fd2_a81e,
    0x3fd7_44fd,
    0x3fdb_fbb8,
    0x3fe0_ccdf,
    0x3fe5_b907,
    0x3fea_c0c7,
    0x3fef_e4ba,
    0x3ff5_257d,
    0x3ffa_83b3,
];
/// [`TABLE`]'s values.
static TABLE_F32: [f32; 32] = {
    let mut t = [0f32; 32];
    let mut k = 0;
    while k < 32 {
        t[k] = f32::from_bits(TABLE[k]);
        k += 1;
    }
    t
};
/// 1.5 · 2^18: rounds `z · log2 e` to 1/32, the table index in the low mantissa bits.
const MAGIC: f32 = 393_216.0;
const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b);
const MINUS_LN2_HI: f32 = f32::from_bits(0xbf31_7218);
const MINUS_LN2_LO: f32 = f32::from_bits(0x3102_e308);
const C2: f32 = 0.5;
const C1: f32 = f32::from_bits(0x3f80_007b);

/// `v`, or a zero of its sign where it is subnormal (denormals flushed: XNNPACK runs its
/// operators with the flush-to-zero and denormals-are-zero modes on).
fn flush(v: f32) -> f32 {
    match v.is_subnormal() {
        true => f32::from_bits(v.to_bits() & 0x8000_0000),
        false => v,
    }
}

/// XNNPACK's sigmoid of one value, in scalar arithmetic (the reference of the tests, and
/// the kernel's definition): every operation rounded as its vector instruction rounds,
/// with subnormal operands and results flushed to zero.
pub fn sigmoid_ref(x: f32) -> f32 {
    let x = flush(x);
    let z = f32::from_bits(x.to_bits() | 0x8000_0000);
    let n = flush(z.mul_add(LOG2E, MAGIC));
    let l = f32::from_bits(TABLE[(n.to_bits() & 31) as usize]);
    let n = flush(n - MAGIC);
    let t = flush(n.mul_add(MINUS_LN2_HI, z));
    let t = flush(n.mul_add(MINUS_LN2_LO, t));
    let p = flush(t.mul_add(C2, C1));
    let t = flush(t * l);
    let p = flush(t.mul_add(p, l));
    // `scalef(p, n)`: `p · 2^floor(n)`, rounded once (exact in f64, then one rounding);
    // 0 for `n = -inf` (|x| ≥ 2.36e38, where `p` is NaN), as Zen 4's `vscalefps` gives.
    let e = if n == f32::NEG_INFINITY {
        0.0
    } else if p.is_nan() || n.is_nan() {
        f32::NAN
    } else {
        flush((p as f64 * 2f64.powi(n.floor().max(-1100.0) as i32)) as f32)
    };
    let f = flush(e / flush(e + 1.0));
    // `testn(x, sign)`: the sign bit of `x` clear.
    if x.to_bits() & 0x8000_0000 == 0 {
        flush(1.0 - f)
    } else {
        f
    }
}

/// `out[i] = sigmoid(x[i])` as XNNPACK's AVX-512F kernel; `false` (nothing written) without
/// AVX-512F.
pub fn sigmoid(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, false)
}

/// `out[i] = x[i] · sigmoid(x[i])`, the sigmoid rounded first: XNNPACK's `XNNSigmoid` then
/// `XNNMultiply` in one pass; `false` (nothing written) without AVX-512F.
pub fn sigmoid_mul(x: &[f32], out: &mut [f32]) -> bool {
    map(x, out, true)
}

/// [`sigmoid`], else (without AVX-512F) `vmath`'s vector sigmoid; `false` if neither runs.
pub fn sigmoid_row(x: &[f32], out: &mut [f32]) -> bool {
    sigmoid(x, out) || crate::vmath::sigmoid(x, out)
}

/// [`sigmoid_mul`], else `vmath`'s; `false` if neither runs.
pub fn sigmoid_mul_row(x: &[f32], out: &mut [f32]) -> bool {
    sigmoid_mul(x, out) || crate::vmath::sigmoid_mul(x, out)
}

fn map(x: &[f32], out: &mut [f32], mul: bool) -> bool {
    assert_eq!(
        x.len(),
        out.len(),
        "xnn_sigmoid: input and output lengths differ"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::gemm512::avx512() {
        // SAFETY: the CPU has AVX-512F; two slices of `x.len()` elements never overlap.
        unsafe { avx512::map(x.as_ptr(), out.as_mut_ptr(), x.len(), mul) };
        return true;
    }
    let _ = mul;
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// The table as two vectors.
    #[inline(always)]
    fn table() -> (__m512, __m512) {
        // SAFETY: two 16-float loads of a 32-float array, inlined into `map` (AVX-512F).
        unsafe {
            let t = &TABLE_F32;
            (
                _mm512_loadu_ps(t.as_ptr()),
                _mm512_loadu_ps(t[16..].as_ptr()),
            )
        }
    }

    /// One vector of sigmoids (times `x` when `mul`), the table's two halves in `lo`, `hi`.
    #[inline(always)]
    fn lanes(x: __m512, (lo, hi): (__m512, __m512), mul: bool) -> __m512 {
        // SAFETY (the whole body): plain lane arithmetic, inlined into `map`, which has
        // AVX-512F.
        unsafe {
            let sign = _mm512_set1_epi32(i32::MIN);
            let one = _mm512_set1_ps(1.0);
            let z = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(x), sign));
            let n = _mm512_fmadd_ps(z, _mm512_set1_ps(LOG2E), _mm512_set1_ps(MAGIC));
            let l = _mm512_permutex2var_ps(lo, _mm512_castps_si512(n), hi);
            let n = _mm512_sub_ps(n, _mm512_set1_ps(MAGIC));
            let t = _mm512_fmadd_ps(n, _mm512_set1_ps(MINUS_LN2_HI), z);
            let t = _mm512_fmadd_ps(n, _mm512_set1_ps(MINUS_LN2_LO), t);
            let p = _mm512_fmadd_ps(t, _mm512_set1_ps(C2), _mm512_set1_ps(C1));
            let t = _mm512_mul_ps(t, l);
            let p = _mm512_fmadd_ps(t, p, l);
            let e = _mm512_scalef_ps(p, n);
            let f = _mm512_div_ps(e, _mm512_add_ps(e, one));
            let positive = _mm512_testn_epi32_mask(_mm512_castps_si512(x), sign);
            let f = _mm512_mask_sub_ps(f, positive, one, f);
            if mul { _mm512_mul_ps(x, f) } else { f }
        }
    }

    /// The kernel over `n` elements from `xp` to `op`: whole vectors, then the tail with
    /// masked loads and stores.
    ///
    /// # Safety
    /// AVX-512F; `xp` readable and `op` writable for `n` elements.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn map(xp: *const f32, op: *mut f32, n: usize, mul: bool) {
        // XNNPACK's operators run with denormals flushed (`PTHREADPOOL_FLAG_DISABLE_DENORMALS`:
        // flush-to-zero and denormals-are-zero in MXCSR): so does this kernel, restoring the
        // caller's mode after. (Without it, subnormal `e^z` below x ≈ -87 took the slow
        // path of the division: efficientnet's SiLUs 0.56 → 2.7 ms.)
        let mut csr = 0u32;
        // SAFETY: `stmxcsr` stores the 4-byte control word into `csr`.
        unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack)) };
        let flushed = csr | 0x8040;
        // SAFETY: `ldmxcsr` loads a control word with only the FTZ and DAZ bits added to
        // the current one (valid bits, exceptions still masked as they were).
        unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &flushed, options(nostack)) };
        let t = table();
        let mut i = 0;
        // SAFETY: `i + 16 <= n` for the full vectors and the tail mask covers `n - i < 16`
        // lanes: every access is within both buffers (the caller's).
        unsafe {
            while i + 16 <= n {
                _mm512_storeu_ps(op.add(i), lanes(_mm512_loadu_ps(xp.add(i)), t, mul));
                i += 16;
            }
            if i < n {
                let m = ((1u32 << (n - i)) - 1) as __mmask16;
                let y = lanes(_mm512_maskz_loadu_ps(m, xp.add(i)), t, mul);
                _mm512_mask_storeu_ps(op.add(i), m, y);
            }
        }
        // SAFETY: the caller's control word back.
        unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel equals the scalar definition bit for bit (NaN for NaN) over every 97th
    /// `f32` and the edges, alone and times `x`; and XNNPACK's table is `2^(k/32)`.
    #[test]
    fn the_kernel_is_the_definition() {
        for (k, &b) in TABLE.iter().enumerate() {
            let want = 2f64.powf(k as f64 / 32.0);
            assert!((f32::from_bits(b) as f64 - want).abs() <= want * 2f64.powi(-24));
        }
        let mut x: Vec<f32> = (0..u32::MAX / 97).map(|i| f32::from_bits(i * 97)).collect();
        x.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -87.5,
            -103.9,
            88.7,
        ]);
        let (mut y, mut ym) = (vec![0f32; x.len()], vec![0f32; x.len()]);
        if !sigmoid(&x, &mut y) {
            return; // no AVX-512F
        }
        assert!(sigmoid_mul(&x, &mut ym));
        let mut worst = 0f64;
        for ((&x, &y), &ym) in x.iter().zip(&y).zip(&ym) {
            let want = sigmoid_ref(x);
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan();
            assert!(same(y, want), "x = {x:e}: {y:e} vs {want:e}");
            let want_mul = flush(flush(x) * want);
            assert!(same(ym, want_mul), "x = {x:e}: {ym:e} vs {want_mul:e}");
            if x.is_finite() && y >= f32::MIN_POSITIVE {
                let exact = 1.0 / (1.0 + (-(x as f64)).exp());
                worst = worst.max((y as f64 - exact).abs() / exact);
            }
        }
        // A few ulp of relative error (2^-24 is one half ulp).
        assert!(worst < 8.0 * 2f64.powi(-24), "relative error {worst:e}");
    }
}
#[cfg(test)]
mod speed {
    /// `cargo test --release -p etch-kernels --lib xnn_sigmoid_speed -- --ignored
    /// --nocapture`: this kernel and `vmath`'s on 64k values of three magnitudes.
    #[test]
    #[ignore]
    fn xnn_sigmoid_speed() {
        for scale in [1.0f32, 8.0, 100.0] {
            let x: Vec<f32> = (0..65536)
                .map(|i| ((i as f32 * 0.37).sin()) * scale)
                .collect();
            let mut y = vec![0f32; x.len()];
            for (name, f) in [
                ("xnn", super::sigmoid as fn(&[f32], &mut [f32]) -> bool),
                ("vmath", crate::vmath::sigmoid),
            ] {
                let t = std::time::Instant::now();
                for _ in 0..200 {
                    f(std::hint::black_box(&x), &mut y);
                }
                eprintln!(
                    "scale {scale} {name}: {:.2} el/ns",
                    (200 * x.len()) as f64 / t.elapsed().as_nanos() as f64
                );
            }
        }
    }
}
