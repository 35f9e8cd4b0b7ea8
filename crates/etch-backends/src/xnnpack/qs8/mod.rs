//! Statically quantized int8 kernels (XNNPACKQuantizer's PT2E flow: `qint8` activations
//! with one scale and zero point a tensor, `qcint8` filters and `qcint32` biases with a
//! scale an output channel).
//!
//! Every kernel does XNNPACK's arithmetic (its `fp32` requantization on x86), so the
//! outputs are XNNPACK's bit for bit:
//!
//! - sums of int8 products are exact in i32;
//! - a convolution or fully-connected output is `clamp(rne(acc * scale[n]) + zp)`, with
//!   `scale[n] = input_scale * filter_scale[n] / output_scale` in f32, in that order;
//! - `fp32 -> qint8` is `clamp(rne(x * (1 / scale)) + zp)` (a NaN goes to 127), and
//!   `qint8 -> fp32` is `(q - zp) as f32 * scale`;
//! - a node's fused clamp is quantized as `xnn_qs8_quantize` does: `rne(clamp(v / scale +
//!   zp, -128, 127))`.
//!
//! Values are in XNNPACK's layout (NHWC); see [`conv`], [`binary`] and [`pool`].

pub mod binary;
pub mod conv;
#[cfg(target_arch = "x86_64")]
mod dw512;
#[cfg(target_arch = "x86_64")]
mod flat512;
pub mod pool;
#[cfg(all(test, target_arch = "x86_64"))]
mod simd_tests;
#[cfg(target_arch = "x86_64")]
pub mod vnni;

use etch_core::{Error, KernelContext, Result};
use etch_kernels::threads::{SharedMut, run_parts, tasks_for};

/// Elements of a flat loop below which it stays on the calling thread, and the pieces it
/// splits into.
const FLAT_TASK: usize = 1 << 14;

/// Runs `f(i, o)` over pieces `o = out[i..]` of `out`, split over threads.
fn flat<T: Send>(out: &mut [T], f: &(dyn Fn(usize, &mut [T]) + Sync)) {
    let n = out.len();
    let pieces = n.div_ceil(FLAT_TASK);
    let shared = SharedMut::new(out);
    run_parts(pieces, tasks_for(n, FLAT_TASK), &|r| {
        let (start, end) = (r.start * FLAT_TASK, (r.end * FLAT_TASK).min(n));
        // SAFETY: the tasks' ranges of pieces are disjoint.
        f(start, unsafe { shared.slice(start, end - start) });
    });
}

/// Whether the SIMD kernels may run (`ETCH_QS8_SIMD=0` keeps the scalar loops, for
/// comparisons; read once).
pub fn simd_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_QS8_SIMD").map_or(true, |v| v != "0"))
}

/// Adding and subtracting it rounds an f32 of magnitude below 2^22 to the nearest integer,
/// ties to even (XNNPACK's "magic bias").
const MAGIC: f32 = 12_582_912.0;

/// `rne(v)` for `|v| < 2^22`.
#[inline(always)]
fn round_magic(v: f32) -> f32 {
    (v + MAGIC) - MAGIC
}

/// An output range and zero point: `clamp(rne(v) + zp, lo, hi)` of a scaled accumulator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Requant {
    /// Output zero point.
    pub zp: i32,
    /// Lowest output (at least -128).
    pub lo: i32,
    /// Highest output (at most 127).
    pub hi: i32,
}

impl Requant {
    /// Reads `[zp, lo, hi]` from `v`.
    pub fn from_ints(v: &[i64]) -> Result<Self> {
        match v {
            &[zp, lo, hi] if (-128..=127).contains(&lo) && lo <= hi && hi <= 127 => Ok(Requant {
                zp: zp as i32,
                lo: lo as i32,
                hi: hi as i32,
            }),
            _ => Err(Error::internal(format!("qs8 output range {v:?}"))),
        }
    }

    /// `[zp, lo, hi]`.
    pub fn ints(&self) -> [i64; 3] {
        [self.zp as i64, self.lo as i64, self.hi as i64]
    }

    /// XNNPACK's fp32 requantization of `v = acc * scale`: clamped to the range less the
    /// zero point (bounds that are integers, so before or after rounding is the same),
    /// rounded half to even, plus the zero point.
    #[inline(always)]
    pub fn apply(&self, v: f32) -> i8 {
        let v = v
            .max((self.lo - self.zp) as f32)
            .min((self.hi - self.zp) as f32);
        (round_magic(v) as i32 + self.zp) as i8
    }
}

/// `xnn_qs8_quantize`: a float bound (of a node's output range) as an int8 of the output's
/// quantization, `rne(clamp(v / scale + zp, -128, 127))`.
/// (`max` then `min` as `fmaxf` / `fminf`: a NaN goes to -128, where `clamp` keeps it.)
#[allow(clippy::manual_clamp)]
pub fn quantize_bound(v: f32, scale: f32, zp: i32) -> i32 {
    (v / scale + zp as f32)
        .max(-128.0)
        .min(127.0)
        .round_ties_even() as i32
}

/// The output range of a node with output quantization `(scale, zp)` and fused clamp
/// `range` (none: the whole int8 range); an error where the range holds no int8 value.
pub fn output_range(scale: f32, zp: i32, range: Option<(f32, f32)>) -> Result<Requant> {
    let (lo, hi) = match range {
        Some((lo, hi)) => (quantize_bound(lo, scale, zp), quantize_bound(hi, scale, zp)),
        None => (-128, 127),
    };
    if lo > hi {
        return Err(Error::invalid_program(format!(
            "an output range {range:?} that holds no value of scale {scale} and zero point {zp}"
        )));
    }
    Ok(Requant { zp, lo, hi })
}

/// A depthwise convolution's biases less `x_zp · Σ w` over its `taps` (filters `[taps,
/// c]`), for kernels whose taps in the padding read the zero point.
pub fn depthwise_folded_bias(w: &[i8], taps: usize, bias: &[i32], x_zp: i32) -> Vec<i32> {
    let c = bias.len();
    (0..c)
        .map(|ch| {
            let s: i32 = (0..taps).map(|t| w[t * c + ch] as i32).sum();
            bias[ch].wrapping_sub(x_zp.wrapping_mul(s))
        })
        .collect()
}

/// `quantize(x, q, inv_scale, zp)`: `q = clamp(rne(x * inv_scale) + zp)` (XNNPACK's
/// `f32_qs8_vcvt`: a NaN goes to 127).
pub fn quantize(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let mut q = ctx.tensor(1)?;
    let inv = ctx.double(2)? as f32;
    let zp = ctx.int(3)? as i32;
    let (x, q) = (x.data::<f32>()?, q.data_mut::<i8>()?);
    if x.len() != q.len() {
        return Err(Error::internal("qs8 quantize: operand sizes"));
    }
    #[cfg(target_arch = "x86_64")]
    let simd = flat512::available();
    flat(q, &|at, q| {
        let x = &x[at..at + q.len()];
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: the CPU has the features; `x` and `q` have one length.
            unsafe { flat512::quantize(x, q, inv, zp) };
            return;
        }
        quantize_run(x, q, inv, zp);
    });
    Ok(())
}

/// [`quantize`]'s scalar loop.
pub(super) fn quantize_run(x: &[f32], q: &mut [i8], inv: f32, zp: i32) {
    let (lo, hi) = ((-128 - zp) as f32, (127 - zp) as f32);
    for (q, &x) in q.iter_mut().zip(x) {
        // f32::min/max return the other operand for a NaN: it becomes `hi`.
        let v = (x * inv).min(hi).max(lo);
        *q = (round_magic(v) as i32 + zp) as i8;
    }
}

/// `dequantize(q, x, scale, zp)`: `x = (q - zp) as f32 * scale`.
pub fn dequantize(ctx: &mut KernelContext<'_>) -> Result<()> {
    let q = ctx.tensor(0)?;
    let mut x = ctx.tensor(1)?;
    let scale = ctx.double(2)? as f32;
    let zp = ctx.int(3)? as i32;
    let (q, x) = (q.data::<i8>()?, x.data_mut::<f32>()?);
    if x.len() != q.len() {
        return Err(Error::internal("qs8 dequantize: operand sizes"));
    }
    #[cfg(target_arch = "x86_64")]
    let simd = flat512::available();
    flat(x, &|at, x| {
        let q = &q[at..at + x.len()];
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: the CPU has the features; `q` and `x` have one length.
            unsafe { flat512::dequantize(q, x, scale, zp) };
            return;
        }
        for (x, &q) in x.iter_mut().zip(q) {
            *x = (q as i32 - zp) as f32 * scale;
        }
    });
    Ok(())
}

/// `lut(x, table, out)`: `out[i] = table[x[i] as u8]` (a [`Op::Lut`] chain's table).
///
/// [`Op::Lut`]: super::graph::Op::Lut
pub fn lut(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (x, t) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let mut o = ctx.tensor(2)?;
    let (x, t, o) = (x.data::<i8>()?, t.data::<i8>()?, o.data_mut::<i8>()?);
    let Ok(t) = <&[i8; 256]>::try_from(t) else {
        return Err(Error::internal("qs8 LUT: a table of 256"));
    };
    if x.len() != o.len() {
        return Err(Error::internal("qs8 LUT: operand sizes"));
    }
    #[cfg(target_arch = "x86_64")]
    let vbmi = flat512::vbmi_available();
    flat(o, &|at, o| {
        let x = &x[at..at + o.len()];
        #[cfg(target_arch = "x86_64")]
        if vbmi {
            // SAFETY: the CPU has the features; `x` and `o` have one length.
            unsafe { flat512::lut(x, t, o) };
            return;
        }
        for (o, &x) in o.iter_mut().zip(x) {
            *o = t[x as u8 as usize];
        }
    });
    Ok(())
}

/// `clamp(x, out, lo, hi)`: int8 clamp (input and output share their quantization).
pub fn clamp(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let mut o = ctx.tensor(1)?;
    let (lo, hi) = (ctx.int(2)?, ctx.int(3)?);
    let (x, o) = (x.data::<i8>()?, o.data_mut::<i8>()?);
    if x.len() != o.len() || !(-128 <= lo && lo <= hi && hi <= 127) {
        return Err(Error::internal("qs8 clamp: operand sizes or range"));
    }
    let (lo, hi) = (lo as i8, hi as i8);
    for (o, &x) in o.iter_mut().zip(x) {
        *o = x.clamp(lo, hi);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantization_rounds_half_to_even_and_clamps() {
        let r = Requant {
            zp: -10,
            lo: -128,
            hi: 127,
        };
        assert_eq!(r.apply(2.5), -8);
        assert_eq!(r.apply(3.5), -6);
        assert_eq!(r.apply(-2.5), -12);
        assert_eq!(r.apply(1e9), 127);
        assert_eq!(r.apply(-1e9), -128);
        let relu = output_range(0.5, -10, Some((0.0, f32::INFINITY))).unwrap();
        assert_eq!((relu.lo, relu.hi), (-10, 127));
        assert_eq!(relu.apply(-3.0), -10);
        let six = output_range(0.05, 3, Some((0.0, 6.0))).unwrap();
        assert_eq!((six.lo, six.hi), (3, 123));
        assert!(output_range(0.05, 3, Some((6.0, 0.0))).is_err());
    }
}
