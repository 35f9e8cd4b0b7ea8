//! `etch::qk_norm_rope.out(qg, k, q_weight, k_weight, eps, unit_offset, cos, sin, *, q, gate,
//! k_out)`: the front of a Qwen 3.5 attention layer as one op (docs/OPS.md): `qg [B,T,Hq,2D]`
//! holds each head's query, then its output gate (`torch.chunk(q_proj(x), 2)`); `k
//! [B,T,Hkv,D]`. Returns `q = rope(rms_norm(qg[..., :D], q_weight))`, `gate = qg[..., D:]`
//! and `k_out = rope(rms_norm(k, k_weight))`, with `rms_norm` (`etch::rms_norm`, rounded to
//! the dtype) and `rope` (`etch::rope` with `cos`/`sin [T, R]`) computed exactly as those
//! ops: one kernel instead of the chunk copies, two norms and two RoPEs.

use super::norm::{rms_inv, rms_row};
use super::rope::rope_row;
use super::{check_io_dtype, dispatch_io, expect_dtype, expect_shape};
use crate::scratch;
use crate::threads::{self, SharedMut};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// A decoded `etch::qk_norm_rope` call.
pub struct QkNormRopeCall<'a> {
    /// `qg [B,T,Hq,2D]`.
    pub qg: TensorRef<'a>,
    /// `k [B,T,Hkv,D]`.
    pub k: TensorRef<'a>,
    /// `q_weight [D]`, `k_weight [D]`.
    pub w: [TensorRef<'a>; 2],
    /// `cos`, `sin` `[T,R]`.
    pub cs: [TensorRef<'a>; 2],
    /// `q [B,T,Hq,D]`, `gate [B,T,Hq,D]`, `k_out [B,T,Hkv,D]`.
    pub out: [TensorRef<'a>; 3],
    /// The norms' eps.
    pub eps: f32,
    /// 1 with `unit_offset` (`(1 + w)` norms), else 0.
    pub offset: f32,
    /// `B·T`, `Hq`, `Hkv`, `D`, `R`, `T`.
    pub dims: [usize; 6],
}

/// Decodes `etch::qk_norm_rope.out`: args [qg, k, q_weight, k_weight, eps, unit_offset, cos,
/// sin, q, gate, k_out, (ret)].
pub fn qk_norm_rope_call<'a>(ctx: &mut KernelContext<'a>) -> Result<QkNormRopeCall<'a>> {
    let op = ctx.op_name();
    let qg = ctx.tensor(0)?;
    let k = ctx.tensor(1)?;
    let w = [ctx.tensor(2)?, ctx.tensor(3)?];
    let eps = ctx.double(4)?;
    let offset = if ctx.bool(5)? { 1.0 } else { 0.0 };
    let cs = [ctx.tensor(6)?, ctx.tensor(7)?];
    let dt = qg.dtype();
    check_io_dtype(op, "qg", dt)?;
    let (&[b, t, hq, d2], &[kb, kt, hkv, d]) = (qg.sizes(), k.sizes()) else {
        return Err(Error::invalid_argument(format!(
            "{op}: qg must be [B, T, Hq, 2D] and k [B, T, Hkv, D], got {:?} and {:?}",
            qg.sizes(),
            k.sizes()
        )));
    };
    if d == 0 || d2 != 2 * d || (kb, kt) != (b, t) {
        return Err(Error::invalid_argument(format!(
            "{op}: qg {:?} must be [B, T, Hq, 2D] for k {:?} = [B, T, Hkv, D], D > 0",
            qg.sizes(),
            k.sizes()
        )));
    }
    expect_dtype(op, "qg", &qg, dt)?;
    expect_dtype(op, "k", &k, dt)?;
    for (name, x) in ["q_weight", "k_weight"].iter().zip(&w) {
        expect_dtype(op, name, x, dt)?;
        expect_shape(op, name, x, &[d])?;
    }
    let r = cs[0].sizes().get(1).copied().unwrap_or(0);
    if cs[0].dim() != 2 || r == 0 || r % 2 != 0 || r > d {
        return Err(Error::invalid_argument(format!(
            "{op}: cos must be [T, R] with R even and 0 < R <= D = {d}, got {:?}",
            cs[0].sizes()
        )));
    }
    for (name, x) in ["cos", "sin"].iter().zip(&cs) {
        expect_dtype(op, name, x, dt)?;
        expect_shape(op, name, x, &[t, r])?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid_argument(format!(
            "{op}: eps {eps} must be finite and >= 0"
        )));
    }
    let qs = [b, t, hq, d];
    let out = [
        ctx.resize_out(8, &qs)?,
        ctx.resize_out(9, &qs)?,
        ctx.resize_out(10, k.sizes())?,
    ];
    for (name, x) in ["q", "gate", "k_out"].iter().zip(&out) {
        expect_dtype(op, name, x, dt)?;
    }
    Ok(QkNormRopeCall {
        qg,
        k,
        w,
        cs,
        out,
        eps: eps as f32,
        offset,
        dims: [b * t, hq, hkv, d, r, t],
    })
}

/// Elements below which the op stays on the calling thread.
const TASK: usize = 1 << 13;

/// `etch::qk_norm_rope.out` on the CPU.
pub fn qk_norm_rope_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = qk_norm_rope_call(ctx)?;
    dispatch_io!(c.qg.dtype(), ctx.op_name(), "qg", |T| run::<T>(&mut c))
}

fn run<T: FElem<F = f32>>(c: &mut QkNormRopeCall<'_>) -> Result<()> {
    let [tokens, hq, hkv, d, r, t] = c.dims;
    let (qg, k) = (c.qg.data::<T>()?, c.k.data::<T>()?);
    let (wq, wk) = (c.w[0].data::<T>()?, c.w[1].data::<T>()?);
    let (cos, sin) = (c.cs[0].data::<T>()?, c.cs[1].data::<T>()?);
    let [q_out, gate_out, k_out] = &mut c.out;
    let (q_out, gate_out, k_out) = (
        SharedMut::new(q_out.data_mut::<T>()?),
        SharedMut::new(gate_out.data_mut::<T>()?),
        SharedMut::new(k_out.data_mut::<T>()?),
    );
    let (eps, offset) = (c.eps, c.offset);
    // Rows: every token's Hq query heads, then its Hkv key heads.
    let heads = hq + hkv;
    let rows = tokens * heads;
    let tasks = threads::tasks_for(rows * d, TASK).clamp(1, rows.max(1));
    threads::run(tasks, &|task| {
        // The normalised row (values of T) that RoPE reads; the pool's buffer, reused.
        let mut h = scratch::take(d, 0f32);
        for row in threads::part(rows, tasks, task) {
            let (tok, head) = (row / heads, row % heads);
            let pos = tok % t;
            let (cr, sr) = (&cos[pos * r..(pos + 1) * r], &sin[pos * r..(pos + 1) * r]);
            let (x, w, o) = if head < hq {
                let base = (tok * hq + head) * 2 * d;
                // SAFETY: query row (tok, head) of q and gate is this task's alone.
                let g = unsafe { gate_out.slice((tok * hq + head) * d, d) };
                g.copy_from_slice(&qg[base + d..base + 2 * d]);
                let o = unsafe { q_out.slice((tok * hq + head) * d, d) };
                (&qg[base..base + d], wq, o)
            } else {
                let i = tok * hkv + head - hq;
                // SAFETY: key row (tok, head - hq) of k_out is this task's alone.
                (&k[i * d..(i + 1) * d], wk, unsafe { k_out.slice(i * d, d) })
            };
            let inv = rms_inv(x, eps);
            rms_row(x, w, inv, offset, |j, v| h[j] = v.to_f());
            rope_row(|i| h[i], cr, sr, o);
        }
    });
    Ok(())
}
