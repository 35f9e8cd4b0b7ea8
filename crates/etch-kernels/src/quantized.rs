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
//!
//! Weight-only quantized embeddings (`export_llm`'s `quantization.embedding_quantize`,
//! ExecuTorch's `op_embedding.cpp` / `op_embedding4b.cpp`): row `i` of `weight` is
//! dequantized per group, `out[.., j] = (w[i, j] - zp[i, g]) * scale[i, g]` in f32 with
//! `g = j / group_size` (one group per row when the scales are `[rows]`, else
//! `[rows, groups]`; no zero points means 0), and stored as the output dtype.
//!
//! - `embedding_byte.dtype_out(weight, weight_scales, weight_zero_points?, quant_min,
//!   quant_max, indices, *, dtype=None, out)`: `weight [rows, dim]` int8 or uint8
//!   (`8,0` is per-channel int8).
//! - `embedding_4bit.dtype_out(...)` (same arguments): `weight [rows, dim / 2]` uint8,
//!   two 4-bit values a byte (high nibble first), each `nibble - 8` (`4,32`: groups of 32).
//!
//! Also the `.out` variants (no `dtype`). `indices` are int64 (any shape, each in
//! `[0, rows)`, else an error); `out` is `indices.sizes + [dim]`, f32, f16 or bf16 (the
//! `dtype` when given); scales are f32, f16 or bf16, zero points of the scales' dtype.

use crate::util::*;
use etch_core::{Error, KernelContext, KernelFn, KernelRegistry, Result, ScalarType, TensorRef};

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

/// A decoded `embedding_byte` / `embedding_4bit` call (`.out` or `.dtype_out`).
pub struct QuantizedEmbeddingCall<'a> {
    /// `weight [rows, dim]` (int8 / uint8), or `[rows, dim / 2]` packed nibbles (uint8).
    pub weight: TensorRef<'a>,
    /// `[rows]` or `[rows, groups]`.
    pub scales: TensorRef<'a>,
    /// Shaped and typed like `scales`, if any.
    pub zero_points: Option<TensorRef<'a>>,
    /// `indices`, int64.
    pub indices: TensorRef<'a>,
    /// Unpacked row length.
    pub dim: usize,
    /// Values per scale.
    pub group_size: usize,
    /// Whether the weight holds two 4-bit values a byte.
    pub packed4: bool,
    /// `indices.sizes + [dim]`.
    pub out: TensorRef<'a>,
}

fn is_half_or_float(t: ScalarType) -> bool {
    matches!(
        t,
        ScalarType::Float | ScalarType::Half | ScalarType::BFloat16
    )
}

/// Checks the quantization parameters of a `[rows, dim]` embedding table and returns
/// the group size.
fn embedding_params(
    op: &str,
    rows: usize,
    dim: usize,
    scales: &TensorRef<'_>,
    zero_points: Option<&TensorRef<'_>>,
) -> Result<usize> {
    if !is_half_or_float(scales.dtype()) {
        return Err(bad_dtype(op, "weight_scales", scales.dtype()));
    }
    let groups = match scales.sizes() {
        [r] if *r == rows => 1,
        [r, g] if *r == rows && *g > 0 && dim.is_multiple_of(*g) => *g,
        s => {
            return Err(Error::invalid_argument(format!(
                "{op}: weight_scales {s:?} do not fit {rows} rows of {dim} values"
            )));
        }
    };
    if let Some(z) = zero_points {
        if z.dtype() != scales.dtype() || z.sizes() != scales.sizes() {
            return Err(Error::invalid_argument(format!(
                "{op}: weight_zero_points ({} {:?}) must match weight_scales ({} {:?})",
                z.dtype(),
                z.sizes(),
                scales.dtype(),
                scales.sizes()
            )));
        }
        require_contiguous(op, "weight_zero_points", z)?;
    }
    require_contiguous(op, "weight_scales", scales)?;
    Ok(dim / groups)
}

/// Decodes and checks `quantized_decomposed::embedding_byte` / `embedding_4bit` (`.out`:
/// args [weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, out,
/// (ret)]; `.dtype_out`: `dtype` before `out`).
pub fn quantized_embedding_call<'a>(
    ctx: &mut KernelContext<'a>,
    packed4: bool,
    has_dtype: bool,
) -> Result<QuantizedEmbeddingCall<'a>> {
    let op = ctx.op_name();
    let weight = ctx.tensor(0)?;
    let scales = ctx.tensor(1)?;
    let zero_points = ctx.opt_tensor(2)?;
    let (qmin, qmax) = (ctx.int(3)?, ctx.int(4)?);
    let indices = ctx.tensor(5)?;
    let dtype = if has_dtype {
        ctx.opt_int(6)?.map(|v| dtype_arg(op, v)).transpose()?
    } else {
        None
    };
    let (rows, cols) = match weight.sizes() {
        [r, c] => (*r, *c),
        s => {
            return Err(Error::invalid_argument(format!(
                "{op}: weight must be 2-D, got {s:?}"
            )));
        }
    };
    let ok = match weight.dtype() {
        ScalarType::Byte => true,
        ScalarType::Char => !packed4,
        _ => false,
    };
    if !ok {
        return Err(bad_dtype(op, "weight", weight.dtype()));
    }
    if qmin > qmax {
        return Err(Error::invalid_argument(format!(
            "{op}: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    let dim = if packed4 { cols * 2 } else { cols };
    let group_size = embedding_params(op, rows, dim, &scales, zero_points.as_ref())?;
    if indices.dtype() != ScalarType::Long {
        return Err(bad_dtype(op, "indices", indices.dtype()));
    }
    require_contiguous(op, "weight", &weight)?;
    require_contiguous(op, "indices", &indices)?;
    let mut shape = Shape::from_slice(indices.sizes())?;
    shape.push(dim)?;
    let out = ctx.resize_out(if has_dtype { 7 } else { 6 }, &shape)?;
    if let Some(dt) = dtype {
        expect_out_dtype(op, &out, dt)?;
    }
    if !is_half_or_float(out.dtype()) {
        return Err(bad_dtype(op, "out", out.dtype()));
    }
    require_contiguous(op, "out", &out)?;
    Ok(QuantizedEmbeddingCall {
        weight,
        scales,
        zero_points,
        indices,
        dim,
        group_size,
        packed4,
        out,
    })
}

/// Dequantizes the looked-up rows, with `S` the parameter type and `O` the output's.
fn embed<S: FElem<F = f32>, O: FElem<F = f32>>(
    op: &str,
    c: &mut QuantizedEmbeddingCall<'_>,
) -> Result<()> {
    let (dim, gs) = (c.dim, c.group_size);
    if dim == 0 {
        // Rows of no values (a weight with no columns): nothing to write. The group size
        // is 0 then.
        return Ok(());
    }
    let groups = dim / gs;
    let rows = c.weight.sizes()[0];
    let scales = c.scales.data::<S>()?;
    let zps = c.zero_points.as_ref().map(|z| z.data::<S>()).transpose()?;
    let idx = c.indices.data::<i64>()?;
    let out = c.out.data_mut::<O>()?;
    // The weight as bytes: int8 values are read back through `as i8`.
    let signed = c.weight.dtype() == ScalarType::Char;
    let w: &[u8] = if signed {
        let w = c.weight.data::<i8>()?;
        // SAFETY: i8 and u8 have the same size and alignment and every bit pattern is
        // valid for both; the slice borrows the same tensor data for the same lifetime.
        unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len()) }
    } else {
        c.weight.data::<u8>()?
    };
    let row_bytes = c.weight.sizes()[1];
    for (&i, o) in idx.iter().zip(out.chunks_exact_mut(dim)) {
        let r = usize::try_from(i)
            .ok()
            .filter(|&r| r < rows)
            .ok_or_else(|| {
                Error::invalid_argument(format!("{op}: index {i} is out of bounds for {rows} rows"))
            })?;
        let row = &w[r * row_bytes..(r + 1) * row_bytes];
        let q = &scales[r * groups..(r + 1) * groups];
        let z = zps.map(|z| &z[r * groups..(r + 1) * groups]);
        for (j, y) in o.iter_mut().enumerate() {
            let v = if c.packed4 {
                let b = row[j / 2];
                let n = if j % 2 == 0 { b >> 4 } else { b & 0x0f };
                f32::from(n as i8 - 8)
            } else if signed {
                f32::from(row[j] as i8)
            } else {
                f32::from(row[j])
            };
            let g = j / gs;
            let zp = z.map_or(0.0, |z| z[g].to_f());
            *y = O::from_f((v - zp) * q[g].to_f());
        }
    }
    Ok(())
}

fn quantized_embedding(ctx: &mut KernelContext<'_>, packed4: bool, has_dtype: bool) -> Result<()> {
    let op = ctx.op_name();
    let mut c = quantized_embedding_call(ctx, packed4, has_dtype)?;
    macro_rules! by_out {
        ($S:ty) => {
            match c.out.dtype() {
                ScalarType::Float => embed::<$S, f32>(op, &mut c),
                ScalarType::Half => embed::<$S, etch_core::f16>(op, &mut c),
                ScalarType::BFloat16 => embed::<$S, etch_core::bf16>(op, &mut c),
                other => Err(bad_dtype(op, "out", other)),
            }
        };
    }
    match c.scales.dtype() {
        ScalarType::Float => by_out!(f32),
        ScalarType::Half => by_out!(etch_core::f16),
        ScalarType::BFloat16 => by_out!(etch_core::bf16),
        other => Err(bad_dtype(op, "weight_scales", other)),
    }
}

fn embedding_byte_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, false, false)
}

fn embedding_byte_dtype_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, false, true)
}

fn embedding_4bit_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, true, false)
}

fn embedding_4bit_dtype_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    quantized_embedding(ctx, true, true)
}

/// Registers the `quantized_decomposed::` per-token and embedding kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    for (name, f) in [
        ("embedding_byte.out", embedding_byte_out as KernelFn),
        ("embedding_byte.dtype_out", embedding_byte_dtype_out),
        ("embedding_4bit.out", embedding_4bit_out),
        ("embedding_4bit.dtype_out", embedding_4bit_dtype_out),
    ] {
        reg.register(&format!("quantized_decomposed::{name}"), f)?;
    }
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
