//! `llama::gated_delta_rule.out(query, key, value, decay, beta, initial_state, *, out,
//! final_state_out)` (and its deprecated alias `llama::channelwise_gated_delta_rule.out`):
//! ExecuTorch's gated delta rule recurrence (`executorch/extension/llm/custom_ops`, used by
//! the Qwen 3.5 examples), float32, head-major `[B, H, T, D]`.
//!
//! Shapes: query `[B, Hq, T, K]`, key `[B, Hs, T, K]`, value `[B, Hs, T, V]`, decay (already
//! exponentiated) `[B, Hs, T]` (one per token) or `[B, Hs, T, K]` (one per key channel),
//! beta `[B, Hs, T]`, initial_state `[B, Hs, K, V]`; `Hq` a multiple of `Hs`, query head `h`
//! reading state head `h / (Hq / Hs)`. Per state head and token, with `S [K, V]`:
//! `S = diag(decay) S; v_pred = S^T k; delta = beta (v - v_pred); S += k delta^T;
//! out = S^T q` (for each query head of the group); `final_state = S`. The sums run over
//! `K` in order, as the reference's.

use crate::etch_ops::{expect_dtype, expect_shape};
use crate::scratch;
use crate::threads::{self, SharedMut};
use etch_core::{Error, KernelContext, KernelRegistry, Result, ScalarType, TensorRef};

/// Multiply-adds below which the recurrence stays on the calling thread, and the least a
/// thread is given.
const TASK: usize = 1 << 14;

/// A decoded `llama::gated_delta_rule.out` call.
pub struct GatedDeltaRuleCall<'a> {
    /// `[B, Hq, T, K]`.
    pub query: TensorRef<'a>,
    /// `[B, Hs, T, K]`.
    pub key: TensorRef<'a>,
    /// `[B, Hs, T, V]`.
    pub value: TensorRef<'a>,
    /// `[B, Hs, T]` or `[B, Hs, T, K]`, already exponentiated.
    pub decay: TensorRef<'a>,
    /// `[B, Hs, T]`.
    pub beta: TensorRef<'a>,
    /// `[B, Hs, K, V]`.
    pub initial_state: TensorRef<'a>,
    /// `[B, Hq, T, V]`.
    pub out: TensorRef<'a>,
    /// `[B, Hs, K, V]`.
    pub final_state: TensorRef<'a>,
    /// Batch, query heads, state heads, tokens, key and value head dims.
    pub batch: usize,
    /// See `batch`.
    pub heads: usize,
    /// See `batch`.
    pub state_heads: usize,
    /// See `batch`.
    pub seq: usize,
    /// See `batch`.
    pub k_dim: usize,
    /// See `batch`.
    pub v_dim: usize,
    /// Whether decay has one value per key channel (`[B, Hs, T, K]`).
    pub channelwise: bool,
}

fn check_f32(op: &str, what: &str, t: &TensorRef<'_>, dims: &[usize]) -> Result<()> {
    if !dims.contains(&t.dim()) {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be {}-D, got {:?}",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            t.sizes()
        )));
    }
    expect_dtype(op, what, t, ScalarType::Float)
}

/// Decodes and checks `llama::gated_delta_rule.out` (or `channelwise_gated_delta_rule.out`):
/// args [query, key, value, decay, beta, initial_state, out, final_state_out, (ret)]. Resizes
/// `out` to `[B, Hq, T, V]` and `final_state_out` to the state's shape.
pub fn gated_delta_rule_call<'a>(ctx: &mut KernelContext<'a>) -> Result<GatedDeltaRuleCall<'a>> {
    let op = ctx.op_name();
    let query = ctx.tensor(0)?;
    let key = ctx.tensor(1)?;
    let value = ctx.tensor(2)?;
    let decay = ctx.tensor(3)?;
    let beta = ctx.tensor(4)?;
    let initial_state = ctx.tensor(5)?;
    check_f32(op, "query", &query, &[4])?;
    check_f32(op, "key", &key, &[4])?;
    check_f32(op, "value", &value, &[4])?;
    check_f32(op, "decay", &decay, &[3, 4])?;
    check_f32(op, "beta", &beta, &[3])?;
    check_f32(op, "initial_state", &initial_state, &[4])?;
    let (q, k, v) = (query.sizes(), key.sizes(), value.sizes());
    let (batch, heads, seq, k_dim) = (q[0], q[1], q[2], q[3]);
    let (state_heads, v_dim) = (k[1], v[3]);
    if k[0] != batch || k[2] != seq || k[3] != k_dim {
        return Err(Error::invalid_argument(format!(
            "{op}: key {k:?} does not match query {q:?} in batch, tokens or head_dim"
        )));
    }
    if v[..3] != k[..3] {
        return Err(Error::invalid_argument(format!(
            "{op}: value {v:?} does not match key {k:?} in batch, heads or tokens"
        )));
    }
    if state_heads == 0 || heads % state_heads != 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: query heads ({heads}) must be a multiple of key heads ({state_heads})"
        )));
    }
    let channelwise = decay.dim() == 4;
    let decay_want: &[usize] = if channelwise { k } else { &k[..3] };
    expect_shape(op, "decay", &decay, decay_want)?;
    expect_shape(op, "beta", &beta, &k[..3])?;
    let state_sizes = [batch, state_heads, k_dim, v_dim];
    expect_shape(op, "initial_state", &initial_state, &state_sizes)?;
    let out = ctx.resize_out(6, &[batch, heads, seq, v_dim])?;
    check_f32(op, "out", &out, &[4])?;
    let final_state = ctx.resize_out(7, &state_sizes)?;
    check_f32(op, "final_state_out", &final_state, &[4])?;
    Ok(GatedDeltaRuleCall {
        query,
        key,
        value,
        decay,
        beta,
        initial_state,
        out,
        final_state,
        batch,
        heads,
        state_heads,
        seq,
        k_dim,
        v_dim,
        channelwise,
    })
}

/// `llama::gated_delta_rule.out` on the CPU: the state is updated in `final_state_out`
/// (a copy of `initial_state`), one task per range of (batch, state head) pairs.
fn gated_delta_rule_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = gated_delta_rule_call(ctx)?;
    let (hq, hs, seq, kd, vd) = (c.heads, c.state_heads, c.seq, c.k_dim, c.v_dim);
    let group = hq / hs;
    let (qs, ks, vs) = (
        c.query.data::<f32>()?,
        c.key.data::<f32>()?,
        c.value.data::<f32>()?,
    );
    let (decay, beta) = (c.decay.data::<f32>()?, c.beta.data::<f32>()?);
    let init = c.initial_state.data::<f32>()?;
    let fs = c.final_state.data_mut::<f32>()?;
    fs.copy_from_slice(init);
    let state = SharedMut::new(fs);
    let out = SharedMut::new(c.out.data_mut::<f32>()?);
    let pairs = c.batch * hs;
    let work = [seq, kd, vd, 3 + group]
        .iter()
        .fold(pairs, |w, &n| w.saturating_mul(n));
    let tasks = threads::tasks_for(work, TASK).clamp(1, pairs.max(1));
    let mut buf = scratch::take(tasks * vd, 0f32);
    let bufs = SharedMut::new(&mut buf[..]);
    let channelwise = c.channelwise;
    threads::run(tasks, &|t| {
        // SAFETY: task `t` alone uses slice `t` of the scratch buffer.
        let delta = unsafe { bufs.slice(t * vd, vd) };
        for pair in threads::part(pairs, tasks, t) {
            let (b, h) = (pair / hs, pair % hs);
            // SAFETY: the state of (batch, state head) `pair` is this task's alone.
            let s = unsafe { state.slice(pair * kd * vd, kd * vd) };
            for ti in 0..seq {
                let tok = pair * seq + ti;
                let k = &ks[tok * kd..(tok + 1) * kd];
                let v = &vs[tok * vd..(tok + 1) * vd];
                // S *= decay, then v_pred = S^T k (summed over K in order).
                delta.fill(0.0);
                for (i, ki) in k.iter().enumerate() {
                    let g = if channelwise {
                        decay[tok * kd + i]
                    } else {
                        decay[tok]
                    };
                    for (sj, acc) in s[i * vd..(i + 1) * vd].iter_mut().zip(delta.iter_mut()) {
                        *sj *= g;
                        *acc += *sj * ki;
                    }
                }
                let bt = beta[tok];
                for (d, vj) in delta.iter_mut().zip(v) {
                    *d = (vj - *d) * bt;
                }
                // The output rows of the group's query heads, zeroed, then accumulated
                // row by row of S as it is updated.
                let q_row = |g: usize| ((b * hq + h * group + g) * seq + ti) * kd;
                let o_row = |g: usize| ((b * hq + h * group + g) * seq + ti) * vd;
                for g in 0..group {
                    // SAFETY: the rows of this pair's query heads are this task's alone.
                    unsafe { out.slice(o_row(g), vd) }.fill(0.0);
                }
                for (i, ki) in k.iter().enumerate() {
                    let srow = &mut s[i * vd..(i + 1) * vd];
                    for (sj, dj) in srow.iter_mut().zip(delta.iter()) {
                        *sj += ki * dj;
                    }
                    for g in 0..group {
                        let qi = qs[q_row(g) + i];
                        // SAFETY: as above.
                        let o = unsafe { out.slice(o_row(g), vd) };
                        for (oj, sj) in o.iter_mut().zip(srow.iter()) {
                            *oj += *sj * qi;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Registers `llama::gated_delta_rule.out` and its deprecated alias.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("llama::gated_delta_rule.out", gated_delta_rule_out)?;
    reg.register(
        "llama::channelwise_gated_delta_rule.out",
        gated_delta_rule_out,
    )
}
