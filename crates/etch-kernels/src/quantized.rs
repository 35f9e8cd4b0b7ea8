//! Per-token affine quantization (`quantized_decomposed::` namespace, ExecuTorch's
//! `kernels/quantized`): what `export_llm`'s quantized KV-cache recipe
//! (`model.quantize_kv_cache=True`) calls to quantize each new key, value and query row
//! to int8 before `llama::update_cache` and `llama::custom_quantized_sdpa`.
//!
//! A "token" is one row along the last dimension: an input `[..., D]` has
//! `prod(sizes[..-1])` tokens, each with its own scale and zero point (`[..., 1]`).
//!
//! - `choose_qparams_per_token_asymmetric.out(input, dtype, *, scale_out, zero_point_out)`:
//!   per token, `min = min(row, 0)`, `max = max(row, 0)` (f32), `scale = (max - min) / 255`
//!   in f64 (0.1 when it is 0 or its f32 reciprocal overflows; below `6.1e-5` it is raised
//!   to `6.1e-5` with min and max scaled alike), and the zero point from whichever of
//!   `-128 - min / scale` and `127 - max / scale` has the smaller error, clamped to
//!   `[-128, 127]` and rounded half-to-even in f32. Outputs: scales f64, zero points
//!   int64. The range is int8's whatever `dtype` says, as in ExecuTorch.
//! - `quantize_per_token.out(input, scales, zero_points, quant_min, quant_max, dtype, *,
//!   out)`: `q = clamp(zp + round_half_even(x * f32(1 / f32(scale))), quant_min,
//!   quant_max)` in f32, stored as `dtype` (int8 or uint8, int16, int32).
//!
//! Inputs are f32, as ExecuTorch's kernels require.

use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, Result, ScalarType, TensorRef};

/// Scales below this are raised to it (ExecuTorch's `SMALL_SCALE_THRESHOLD`).
const SMALL_SCALE: f32 = 6.1e-5;

/// Tokens (rows) and the row length of a per-token tensor `[..., D]`.
fn tokens(op: &str, t: &TensorRef<'_>) -> Result<(usize, usize)> {
    let s = t.sizes();
    match s.last() {
        Some(&d) if d > 0 => Ok((s[..s.len() - 1].iter().product(), d)),
        _ => Err(Error::invalid_argument(format!(
            "{op}: input must have a non-empty last dimension, got {s:?}"
        ))),
    }
}

/// `sizes[..-1] + [1]`: the shape of per-token parameters.
fn qparam_shape(sizes: &[usize]) -> Result<Shape> {
    let mut s = Shape::from_slice(&sizes[..sizes.len().saturating_sub(1)])?;
    s.push(1)?;
    Ok(s)
}

fn dtype_arg(op: &str, v: i64) -> Result<ScalarType> {
    i8::try_from(v)
        .map_err(|_| Error::invalid_argument(format!("{op}: dtype {v} is not a scalar type")))
        .and_then(ScalarType::from_i8)
}

/// A decoded `choose_qparams_per_token_asymmetric.out` call.
pub struct ChooseQparamsPerTokenCall<'a> {
    /// `input [..., D]`, f32.
    pub input: TensorRef<'a>,
    /// `scale_out [..., 1]`, f64.
    pub scales: TensorRef<'a>,
    /// `zero_point_out [..., 1]`, int64.
    pub zero_points: TensorRef<'a>,
}

/// Decodes and checks `quantized_decomposed::choose_qparams_per_token_asymmetric.out`: args
/// [input, dtype, scale_out, zero_point_out, (ret), (ret)].
pub fn choose_qparams_per_token_call<'a>(
    ctx: &mut KernelContext<'a>,
) -> Result<ChooseQparamsPerTokenCall<'a>> {
    let op = ctx.op_name();
    let input = ctx.tensor(0)?;
    dtype_arg(op, ctx.int(1)?)?;
    if input.dtype() != ScalarType::Float {
        return Err(bad_dtype(op, "input", input.dtype()));
    }
    require_contiguous(op, "input", &input)?;
    tokens(op, &input)?;
    let shape = qparam_shape(input.sizes())?;
    let scales = ctx.resize_out(2, &shape)?;
    let zero_points = ctx.resize_out(3, &shape)?;
    if scales.dtype() != ScalarType::Double || zero_points.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: outputs must be float64 scales and int64 zero points, got {} and {}",
            scales.dtype(),
            zero_points.dtype()
        )));
    }
    require_contiguous(op, "scale_out", &scales)?;
    require_contiguous(op, "zero_point_out", &zero_points)?;
    Ok(ChooseQparamsPerTokenCall {
        input,
        scales,
        zero_points,
    })
}

/// Scale and zero point for values in `[min, max]` mapped onto `[qmin, qmax]`, as
/// ExecuTorch's `calculate_scale_and_zero_point`.
pub fn scale_and_zero_point(min: f32, max: f32, qmin: i32, qmax: i32) -> (f64, i64) {
    let (mut min, mut max) = (min.min(0.0), max.max(0.0));
    let range = f64::from(qmax - qmin);
    let mut scale = (f64::from(max) - f64::from(min)) / range;
    if scale as f32 == 0.0 || (1.0 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale < f64::from(SMALL_SCALE) {
        let org = scale as f32;
        scale = f64::from(SMALL_SCALE);
        if min == 0.0 {
            max = SMALL_SCALE * range as f32;
        } else if max == 0.0 {
            min = -SMALL_SCALE * range as f32;
        } else {
            let amp = SMALL_SCALE / org;
            min *= amp;
            max *= amp;
        }
    }
    let (lo, hi) = (f64::from(qmin), f64::from(qmax));
    let from_min = lo - f64::from(min) / scale;
    let from_max = hi - f64::from(max) / scale;
    let err_min = lo.abs() - (f64::from(min) / scale).abs();
    let err_max = hi.abs() - (f64::from(max) / scale).abs();
    let zp = if err_min < err_max {
        from_min
    } else {
        from_max
    };
    let zp = if zp < lo {
        i64::from(qmin)
    } else if zp > hi {
        i64::from(qmax)
    } else {
        (zp as f32).round_ties_even() as i64
    };
    (scale, zp)
}

/// `choose_qparams_per_token_asymmetric.out` on the CPU.
fn choose_qparams_per_token_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = choose_qparams_per_token_call(ctx)?;
    let (_, d) = tokens(ctx.op_name(), &c.input)?;
    let x = c.input.data::<f32>()?;
    let scales = c.scales.data_mut::<f64>()?;
    let zps = c.zero_points.data_mut::<i64>()?;
    for ((row, s), z) in x.chunks_exact(d).zip(scales.iter_mut()).zip(zps.iter_mut()) {
        // First minimum / maximum by `<`, as std::min_element / max_element.
        let (mut lo, mut hi) = (row[0], row[0]);
        for &v in &row[1..] {
            if v < lo {
                lo = v;
            }
            if hi < v {
                hi = v;
            }
        }
        (*s, *z) = scale_and_zero_point(lo, hi, -128, 127);
    }
    Ok(())
}

/// A decoded `quantize_per_token.out` call.
pub struct QuantizePerTokenCall<'a> {
    /// `input [..., D]`, f32.
    pub input: TensorRef<'a>,
    /// One f64 scale per token.
    pub scales: TensorRef<'a>,
    /// One int64 zero point per token.
    pub zero_points: TensorRef<'a>,
    /// Clamp range.
    pub quant_min: i64,
    /// Clamp range.
    pub quant_max: i64,
    /// `out`, shaped like `input`, of the requested integer dtype.
    pub out: TensorRef<'a>,
}

/// Decodes and checks `quantized_decomposed::quantize_per_token.out`: args [input, scales,
/// zero_points, quant_min, quant_max, dtype, out, (ret)].
pub fn quantize_per_token_call<'a>(
    ctx: &mut KernelContext<'a>,
) -> Result<QuantizePerTokenCall<'a>> {
    let op = ctx.op_name();
    let input = ctx.tensor(0)?;
    let scales = ctx.tensor(1)?;
    let zero_points = ctx.tensor(2)?;
    let (quant_min, quant_max) = (ctx.int(3)?, ctx.int(4)?);
    let dtype = dtype_arg(op, ctx.int(5)?)?;
    if input.dtype() != ScalarType::Float {
        return Err(bad_dtype(op, "input", input.dtype()));
    }
    let (n, _) = tokens(op, &input)?;
    if scales.dtype() != ScalarType::Double || zero_points.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: scales must be float64 and zero points int64, got {} and {}",
            scales.dtype(),
            zero_points.dtype()
        )));
    }
    if scales.numel() != n || zero_points.numel() != n {
        return Err(Error::invalid_argument(format!(
            "{op}: {n} tokens but {} scales and {} zero points",
            scales.numel(),
            zero_points.numel()
        )));
    }
    let (lo, hi) = match dtype {
        ScalarType::Byte => (0, 255),
        ScalarType::Char => (-128, 127),
        ScalarType::Short => (i16::MIN.into(), i16::MAX.into()),
        ScalarType::Int => (i32::MIN.into(), i32::MAX.into()),
        other => return Err(bad_dtype(op, "dtype", other)),
    };
    if quant_min < lo || quant_max > hi || quant_min > quant_max {
        return Err(Error::invalid_argument(format!(
            "{op}: range [{quant_min}, {quant_max}] does not fit {dtype} [{lo}, {hi}]"
        )));
    }
    for (t, what) in [
        (&input, "input"),
        (&scales, "scales"),
        (&zero_points, "zero_points"),
    ] {
        require_contiguous(op, what, t)?;
    }
    let out = ctx.resize_out(6, input.sizes())?;
    expect_out_dtype(op, &out, dtype)?;
    require_contiguous(op, "out", &out)?;
    Ok(QuantizePerTokenCall {
        input,
        scales,
        zero_points,
        quant_min,
        quant_max,
        out,
    })
}

fn expect_out_dtype(op: &str, out: &TensorRef<'_>, dtype: ScalarType) -> Result<()> {
    if out.dtype() != dtype {
        return Err(Error::invalid_argument(format!(
            "{op}: out is {} but dtype says {dtype}",
            out.dtype()
        )));
    }
    Ok(())
}

/// `quantize_per_token.out` on the CPU.
fn quantize_per_token_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = quantize_per_token_call(ctx)?;
    let (_, d) = tokens(ctx.op_name(), &c.input)?;
    let x = c.input.data::<f32>()?;
    let scales = c.scales.data::<f64>()?;
    let zps = c.zero_points.data::<i64>()?;
    let (lo, hi) = (c.quant_min, c.quant_max);
    let q = |i: usize, v: f32| {
        let inv = 1.0f32 / scales[i / d] as f32;
        // ExecuTorch adds the zero point as an int32.
        let z = zps[i / d] as i32 as f32;
        let r = (z + (inv * v).round_ties_even()) as i64;
        r.clamp(lo, hi)
    };
    macro_rules! fill {
        ($t:ty) => {{
            let o = c.out.data_mut::<$t>()?;
            for (i, (y, &v)) in o.iter_mut().zip(x).enumerate() {
                *y = q(i, v) as $t;
            }
        }};
    }
    match c.out.dtype() {
        ScalarType::Byte => fill!(u8),
        ScalarType::Char => fill!(i8),
        ScalarType::Short => fill!(i16),
        ScalarType::Int => fill!(i32),
        other => return Err(bad_dtype(ctx.op_name(), "out", other)),
    }
    Ok(())
}

/// Registers the `quantized_decomposed::` per-token kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register(
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        choose_qparams_per_token_out,
    )?;
    reg.register(
        "quantized_decomposed::quantize_per_token.out",
        quantize_per_token_out,
    )?;
    Ok(())
}
