//! `etch::attention.out(q, k, v, k_cache!, v_cache!, input_pos, scale, *, out)`: writes `k`
//! and `v` into the caches at rows `pos..pos+T` (`pos = input_pos[0]`, read from a tensor so
//! that a device program never syncs for it), then causal GQA attention of `q` over cache
//! rows `0..=pos+t` (docs/OPS.md).
//!
//! Shapes: `q [B,T,Hq,D]`, `k`/`v` `[B,T,Hkv,D]`, caches `[B,S,Hkv,D]`, `out` like `q`; one
//! float dtype. The CPU kernel is `llama::sdpa_with_kv_cache`'s, with the position from
//! the tensor.
//!
//! `etch::gated_attention.out(q, k, v, k_cache!, v_cache!, input_pos, scale, gate, *, out)`:
//! the same, times Qwen 3.5's output gate: `out = rnd(rnd(attn) * rnd(sigmoid(gate)))`, `gate`
//! shaped like `q` (one op for the attention, the sigmoid and the product; `sigmoid` is
//! `aten::sigmoid`'s, so the values are those of the three ops).

use super::{check_pos, dispatch_io, expect_dtype, expect_shape};
use crate::llama::{attend, check_attn, check_update, copy_into_cache};
use crate::unary::{FloatOp, Sigmoid};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// A decoded `etch::attention` call.
pub struct AttentionCall<'a> {
    /// `q [B,T,Hq,D]`.
    pub q: TensorRef<'a>,
    /// `k [B,T,Hkv,D]`.
    pub k: TensorRef<'a>,
    /// `v [B,T,Hkv,D]`.
    pub v: TensorRef<'a>,
    /// `k_cache [B,S,Hkv,D]`, updated in place.
    pub k_cache: TensorRef<'a>,
    /// `v_cache [B,S,Hkv,D]`, updated in place.
    pub v_cache: TensorRef<'a>,
    /// `input_pos` int64 `[1]`.
    pub pos: TensorRef<'a>,
    /// `out [B,T,Hq,D]`.
    pub out: TensorRef<'a>,
    /// Softmax scale.
    pub scale: f64,
    /// `gate`, shaped like `q` (`etch::gated_attention`), else `None`.
    pub gate: Option<TensorRef<'a>>,
}

/// Decodes and checks `etch::attention.out`: args [q, k, v, k_cache, v_cache, input_pos,
/// scale, out, (ret)]. The position is not read (it may live on a device).
pub fn attention_call<'a>(ctx: &mut KernelContext<'a>) -> Result<AttentionCall<'a>> {
    decode(ctx, false)
}

/// Decodes and checks `etch::gated_attention.out`: args [q, k, v, k_cache, v_cache,
/// input_pos, scale, gate, out, (ret)].
pub fn gated_attention_call<'a>(ctx: &mut KernelContext<'a>) -> Result<AttentionCall<'a>> {
    decode(ctx, true)
}

fn decode<'a>(ctx: &mut KernelContext<'a>, gated: bool) -> Result<AttentionCall<'a>> {
    let op = ctx.op_name();
    let q = ctx.tensor(0)?;
    let k = ctx.tensor(1)?;
    let v = ctx.tensor(2)?;
    let pos = ctx.tensor(5)?;
    let scale = ctx.double(6)?;
    super::check_io_dtype(op, "q", q.dtype())?;
    check_pos(op, &pos)?;
    let k_cache = ctx.resize_out(3, ctx.tensor(3)?.sizes())?;
    let v_cache = ctx.resize_out(4, ctx.tensor(4)?.sizes())?;
    check_update(op, &k, &k_cache, None)?;
    check_update(op, &v, &v_cache, None)?;
    expect_shape(op, "v", &v, k.sizes())?;
    expect_shape(op, "v_cache", &v_cache, k_cache.sizes())?;
    expect_dtype(op, "q", &q, k.dtype())?;
    if q.dim() != 4 || q.sizes()[..2] != k.sizes()[..2] || q.sizes()[3] != k.sizes()[3] {
        return Err(Error::invalid_argument(format!(
            "{op}: q {:?} does not match k {:?} in batch, seq or head_dim",
            q.sizes(),
            k.sizes()
        )));
    }
    let (hq, hkv) = (q.sizes()[2], k.sizes()[2]);
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: {hq} query heads are not a multiple of {hkv} KV heads"
        )));
    }
    if !scale.is_finite() {
        return Err(Error::invalid_argument(format!(
            "{op}: scale {scale} is not finite"
        )));
    }
    let gate = if gated {
        let g = ctx.tensor(7)?;
        expect_dtype(op, "gate", &g, q.dtype())?;
        expect_shape(op, "gate", &g, q.sizes())?;
        Some(g)
    } else {
        None
    };
    let out = ctx.resize_out(if gated { 8 } else { 7 }, q.sizes())?;
    expect_dtype(op, "out", &out, q.dtype())?;
    Ok(AttentionCall {
        q,
        k,
        v,
        k_cache,
        v_cache,
        pos,
        out,
        scale,
        gate,
    })
}

/// `etch::attention.out` on the CPU.
pub fn attention_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = attention_call(ctx)?;
    run(ctx.op_name(), &mut c)
}

/// `etch::gated_attention.out` on the CPU: the attention, then the gate.
pub fn gated_attention_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = gated_attention_call(ctx)?;
    run(op, &mut c)?;
    let Some(gate) = &c.gate else {
        return Ok(());
    };
    dispatch_io!(c.out.dtype(), op, "q", |T| apply_gate::<T>(
        gate, &mut c.out
    ))
}

/// `out = rnd(out * rnd(sigmoid(gate)))`, the sigmoid by `aten::sigmoid`'s row function
/// (the same value for an element wherever its row is cut), in chunks on the stack.
fn apply_gate<T: FElem<F = f32>>(gate: &TensorRef<'_>, out: &mut TensorRef<'_>) -> Result<()> {
    let g = gate.data::<T>()?;
    let o = out.data_mut::<T>()?;
    let (mut x, mut y) = ([0f32; 256], [0f32; 256]);
    for (gc, oc) in g.chunks(x.len()).zip(o.chunks_mut(x.len())) {
        let n = gc.len();
        for (xi, gi) in x.iter_mut().zip(gc) {
            *xi = gi.to_f();
        }
        Sigmoid.apply_f32_row(&x[..n], &mut y[..n]);
        for (oi, &s) in oc.iter_mut().zip(&y[..n]) {
            *oi = T::from_f(oi.to_f() * T::from_f(s).to_f());
        }
    }
    Ok(())
}

fn run(op: &str, c: &mut AttentionCall<'_>) -> Result<()> {
    let pos = c.pos.data::<i64>()?[0];
    let start = usize::try_from(pos).ok();
    let seq = c.q.sizes()[1];
    let max = c.k_cache.sizes()[1];
    match start {
        Some(s) if s < max && seq <= max - s => {
            copy_into_cache(&c.k, &mut c.k_cache, s)?;
            copy_into_cache(&c.v, &mut c.v_cache, s)?;
        }
        _ => {
            return Err(Error::invalid_argument(format!(
                "{op}: position {pos} + {seq} tokens does not fit the cache's {max} positions"
            )));
        }
    }
    let a = check_attn(
        op,
        &c.q,
        &c.k_cache,
        &c.v_cache,
        &None,
        pos,
        true,
        Some(c.scale),
    )?;
    attend(op, &a, &c.q, &c.k_cache, &c.v_cache, &None, &mut c.out)
}
