//! `etch::sample.out(logits, sampling, *, out)`: the next token of each row of `logits`
//! `[B,V]` (float), into `out` int64 `[B,1]`, with `sampling` float32 `[4]` =
//! `(temperature, top_k, top_p, u)` and `u` a uniform number in `[0, 1)` that the host
//! draws (so that the program holds no RNG state and runs are reproducible). The rule is
//! [`crate::sample::sample_row`]'s.

use super::{check_io_dtype, expect_dtype};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};

/// A decoded `etch::sample` call.
pub struct SampleCall<'a> {
    /// `logits [B,V]`.
    pub logits: TensorRef<'a>,
    /// `sampling` float32 `[4]`.
    pub sampling: TensorRef<'a>,
    /// `out` int64 `[B,1]`.
    pub out: TensorRef<'a>,
    /// Rows and vocabulary size.
    pub rows: usize,
    /// See `rows`.
    pub vocab: usize,
}

/// Decodes and checks `etch::sample.out`: args [logits, sampling, out, (ret)].
pub fn sample_call<'a>(ctx: &mut KernelContext<'a>) -> Result<SampleCall<'a>> {
    let op = ctx.op_name();
    let logits = ctx.tensor(0)?;
    let sampling = ctx.tensor(1)?;
    check_io_dtype(op, "logits", logits.dtype())?;
    crate::util::require_contiguous(op, "logits", &logits)?;
    let vocab = logits.sizes().last().copied().unwrap_or(0);
    if logits.dim() != 2 || vocab == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: logits must be [batch, vocab] with vocab > 0, got {:?}",
            logits.sizes()
        )));
    }
    expect_dtype(op, "sampling", &sampling, ScalarType::Float)?;
    if sampling.numel() != 4 {
        return Err(Error::invalid_argument(format!(
            "{op}: sampling must hold 4 values (temperature, top_k, top_p, u), got {:?}",
            sampling.sizes()
        )));
    }
    let rows = logits.sizes()[0];
    let out = ctx.resize_out(2, &[rows, 1])?;
    expect_dtype(op, "out", &out, ScalarType::Long)?;
    Ok(SampleCall {
        logits,
        sampling,
        out,
        rows,
        vocab,
    })
}

/// `etch::sample.out` on the CPU.
pub fn sample_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = sample_call(ctx)?;
    let p = c.sampling.data::<f32>()?;
    let (temp, top_k, top_p, u) = (p[0], p[1], p[2], p[3]);
    let top_k = if top_k.is_finite() && top_k > 0.0 {
        top_k as usize
    } else {
        0
    };
    // Pooled buffers: after the first call, sampling allocates nothing.
    let mut row = crate::scratch::take(c.vocab, 0f32);
    let mut p = crate::scratch::take(c.vocab, 0f32);
    let mut order = crate::scratch::take(c.vocab, 0usize);
    let out = c.out.data_mut::<i64>()?;
    super::dispatch_io!(c.logits.dtype(), ctx.op_name(), "logits", |T| {
        let l = c.logits.data::<T>()?;
        for (r, o) in out.iter_mut().enumerate().take(c.rows) {
            for (d, s) in row.iter_mut().zip(&l[r * c.vocab..(r + 1) * c.vocab]) {
                *d = s.to_f();
            }
            let i = crate::sample::sample_row_in(&row, temp, top_k, top_p, u, &mut p, &mut order);
            *o = i as i64;
        }
        Ok(())
    })
}
