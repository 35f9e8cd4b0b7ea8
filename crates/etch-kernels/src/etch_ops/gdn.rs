//! `etch::gated_delta_net.out(mixed_qkv, a, b, conv_weight, A_log, dt_bias, conv_state!,
//! recurrent_state!, input_pos, num_k_heads, head_k_dim, *, out)`: Qwen 3.5's Gated
//! DeltaNet token mixer over `T` tokens (docs/OPS.md has the math).
//!
//! Shapes: `mixed_qkv [B,T,C]` with `C = 2*Hk*Dk + Hv*Dv`; `a`, `b` `[B,T,Hv]`;
//! `conv_weight [C,1,K]`; `A_log`, `dt_bias` `[Hv]`; `conv_state [B,C,K-1]` (the last `K-1`
//! inputs, oldest first); `recurrent_state [B,Hv,Dk,Dv]` float32; `input_pos` int64 `[1]`
//! (both states are read as zero when it is 0); `out [B,T,Hv,Dv]`. IO tensors are float32,
//! bfloat16 or float16 (one dtype); the math is float32, with the conv output rounded to the
//! IO dtype as the reference does.

use super::{check_io_dtype, check_pos, dispatch_io, expect_dtype, expect_shape, sigmoid, silu};
use crate::scratch;
use crate::threads::{self, SharedMut};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};

/// A decoded `etch::gated_delta_net` call.
pub struct GdnCall<'a> {
    /// `mixed_qkv [B,T,C]`.
    pub qkv: TensorRef<'a>,
    /// `a [B,T,Hv]` (decay input).
    pub a: TensorRef<'a>,
    /// `b [B,T,Hv]` (beta input).
    pub b: TensorRef<'a>,
    /// `conv_weight [C,1,K]`.
    pub conv_w: TensorRef<'a>,
    /// `A_log [Hv]`.
    pub a_log: TensorRef<'a>,
    /// `dt_bias [Hv]`.
    pub dt_bias: TensorRef<'a>,
    /// `conv_state [B,C,K-1]`, updated in place.
    pub conv_state: TensorRef<'a>,
    /// `recurrent_state [B,Hv,Dk,Dv]` float32, updated in place.
    pub state: TensorRef<'a>,
    /// `input_pos` int64 `[1]`.
    pub pos: TensorRef<'a>,
    /// `out [B,T,Hv,Dv]`.
    pub out: TensorRef<'a>,
    /// Batch, tokens, conv channels and conv taps.
    pub batch: usize,
    /// See `batch`.
    pub seq: usize,
    /// See `batch`.
    pub channels: usize,
    /// See `batch`.
    pub taps: usize,
    /// Key heads and their size; value heads and their size.
    pub hk: usize,
    /// See `hk`.
    pub dk: usize,
    /// See `hk`.
    pub hv: usize,
    /// See `hk`.
    pub dv: usize,
}

/// Decodes and checks `etch::gated_delta_net.out`: args [mixed_qkv, a, b, conv_weight,
/// A_log, dt_bias, conv_state, recurrent_state, input_pos, num_k_heads, head_k_dim, out,
/// (ret)].
pub fn gdn_call<'a>(ctx: &mut KernelContext<'a>) -> Result<GdnCall<'a>> {
    let op = ctx.op_name();
    let qkv = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    let conv_w = ctx.tensor(3)?;
    let a_log = ctx.tensor(4)?;
    let dt_bias = ctx.tensor(5)?;
    let pos = ctx.tensor(8)?;
    let (hk, dk) = (ctx.int(9)?, ctx.int(10)?);
    check_io_dtype(op, "mixed_qkv", qkv.dtype())?;
    let dt = qkv.dtype();
    if qkv.dim() != 3 || a.dim() != 3 {
        return Err(Error::invalid_argument(format!(
            "{op}: mixed_qkv and a must be 3-D [batch, seq, ...], got {:?} and {:?}",
            qkv.sizes(),
            a.sizes()
        )));
    }
    let [batch, seq, channels] = [qkv.sizes()[0], qkv.sizes()[1], qkv.sizes()[2]];
    let hv = a.sizes()[2];
    let (hk, dk) = match (usize::try_from(hk), usize::try_from(dk)) {
        (Ok(h), Ok(d)) if h > 0 && d > 0 && hv > 0 && hv % h == 0 && 2 * h * d < channels => (h, d),
        _ => {
            return Err(Error::invalid_argument(format!(
                "{op}: num_k_heads {hk} and head_k_dim {dk} do not fit {hv} value heads and \
                 {channels} channels"
            )));
        }
    };
    let vdim = channels - 2 * hk * dk;
    if !vdim.is_multiple_of(hv) {
        return Err(Error::invalid_argument(format!(
            "{op}: {vdim} value channels do not split into {hv} heads"
        )));
    }
    let dv = vdim / hv;
    if conv_w.dim() != 3 || conv_w.sizes()[0] != channels || conv_w.sizes()[1] != 1 {
        return Err(Error::invalid_argument(format!(
            "{op}: conv_weight must be [{channels}, 1, K], got {:?}",
            conv_w.sizes()
        )));
    }
    let taps = conv_w.sizes()[2];
    if taps == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: conv_weight has 0 taps"
        )));
    }
    for (what, t) in [
        ("mixed_qkv", &qkv),
        ("a", &a),
        ("b", &b),
        ("conv_weight", &conv_w),
    ] {
        expect_dtype(op, what, t, dt)?;
    }
    for (what, t) in [("A_log", &a_log), ("dt_bias", &dt_bias)] {
        expect_dtype(op, what, t, dt)?;
        expect_shape(op, what, t, &[hv])?;
    }
    expect_shape(op, "b", &b, &[batch, seq, hv])?;
    check_pos(op, &pos)?;
    let conv_state = ctx.resize_out(6, ctx.tensor(6)?.sizes())?;
    expect_dtype(op, "conv_state", &conv_state, dt)?;
    expect_shape(op, "conv_state", &conv_state, &[batch, channels, taps - 1])?;
    let state = ctx.resize_out(7, ctx.tensor(7)?.sizes())?;
    expect_dtype(op, "recurrent_state", &state, ScalarType::Float)?;
    expect_shape(op, "recurrent_state", &state, &[batch, hv, dk, dv])?;
    let out = ctx.resize_out(11, &[batch, seq, hv, dv])?;
    expect_dtype(op, "out", &out, dt)?;
    Ok(GdnCall {
        qkv,
        a,
        b,
        conv_w,
        a_log,
        dt_bias,
        conv_state,
        state,
        pos,
        out,
        batch,
        seq,
        channels,
        taps,
        hk,
        dk,
        hv,
        dv,
    })
}

/// Work per task below which the conv or the recurrence stays on the calling thread.
const TASK: usize = 1 << 14;

/// `etch::gated_delta_net.out` on the CPU.
pub fn gated_delta_net_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = gdn_call(ctx)?;
    let op = ctx.op_name();
    let fresh = c.pos.data::<i64>()?[0] == 0;
    dispatch_io!(c.qkv.dtype(), op, "mixed_qkv", |T| run::<T>(&mut c, fresh))
}

fn run<T: FElem<F = f32>>(c: &mut GdnCall<'_>, fresh: bool) -> Result<()> {
    let (bsz, seq, ch) = (c.batch, c.seq, c.channels);
    let mut y = scratch::take(bsz * seq * ch, 0f32);
    conv::<T>(c, fresh, &mut y)?;
    let (hk, dk, hv, dv) = (c.hk, c.dk, c.hv, c.dv);
    let (a, b) = (c.a.data::<T>()?, c.b.data::<T>()?);
    let (a_log, dt_bias) = (c.a_log.data::<T>()?, c.dt_bias.data::<T>()?);
    let state = SharedMut::new(c.state.data_mut::<f32>()?);
    let out = SharedMut::new(c.out.data_mut::<T>()?);
    let y = &y[..];
    let pairs = bsz * hv;
    let tasks = threads::tasks_for(pairs * seq * dk * dv * 4, TASK).clamp(1, pairs.max(1));
    let rep = hv / hk;
    let scale = 1.0 / (dk as f32).sqrt();
    let per_task = 2 * dk + 2 * dv;
    let mut buf = scratch::take(tasks * per_task, 0f32);
    let bufs = SharedMut::new(&mut buf[..]);
    threads::run(tasks, &|t| {
        // SAFETY: task `t` alone uses slice `t` of the scratch buffer.
        let w = unsafe { bufs.slice(t * per_task, per_task) };
        let (q, w) = w.split_at_mut(dk);
        let (k, w) = w.split_at_mut(dk);
        let (kv, ov) = w.split_at_mut(dv);
        for pair in threads::part(pairs, tasks, t) {
            let (bi, h) = (pair / hv, pair % hv);
            // SAFETY: the state of (batch, head) `pair` is this task's alone.
            let s = unsafe { state.slice(pair * dk * dv, dk * dv) };
            if fresh {
                s.fill(0.0);
            }
            let decay = -a_log[h].to_f().exp();
            for ti in 0..seq {
                let row = &y[(bi * seq + ti) * ch..(bi * seq + ti + 1) * ch];
                let kh = h / rep;
                l2norm(&row[kh * dk..(kh + 1) * dk], scale, q);
                l2norm(&row[(hk + kh) * dk..(hk + kh + 1) * dk], 1.0, k);
                let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
                let gi = (bi * seq + ti) * hv + h;
                let beta = T::from_f(sigmoid(b[gi].to_f())).to_f();
                let g = decay * softplus(a[gi].to_f() + dt_bias[h].to_f());
                // SAFETY: output row (batch, token, head) is this task's alone.
                let o = unsafe { out.slice(gi * dv, dv) };
                step::<T>(s, [q, k, v], g.exp(), beta, [&mut *kv, &mut *ov], o);
            }
        }
    });
    Ok(())
}

/// The causal depthwise conv over `[conv_state | mixed_qkv]` with SiLU, rounded to the IO
/// dtype, into `y [B,T,C]`; leaves the last `K-1` inputs in `conv_state`.
fn conv<T: FElem<F = f32>>(c: &mut GdnCall<'_>, fresh: bool, y: &mut [f32]) -> Result<()> {
    let (bsz, seq, ch, taps) = (c.batch, c.seq, c.channels, c.taps);
    let x = c.qkv.data::<T>()?;
    let w = c.conv_w.data::<T>()?;
    let st = SharedMut::new(c.conv_state.data_mut::<T>()?);
    let ys = SharedMut::new(y);
    let keep = taps - 1;
    let rows = bsz * ch;
    let tasks = threads::tasks_for(rows * (seq + keep) * taps, TASK).clamp(1, rows.max(1));
    let mut buf = scratch::take(tasks * (keep + seq), 0f32);
    let bufs = SharedMut::new(&mut buf[..]);
    threads::run(tasks, &|t| {
        // SAFETY: task `t` alone uses slice `t` of the scratch buffer.
        let win = unsafe { bufs.slice(t * (keep + seq), keep + seq) };
        for r in threads::part(rows, tasks, t) {
            let (bi, ci) = (r / ch, r % ch);
            // SAFETY: the state row of (batch, channel) `r` is this task's alone.
            let srow = unsafe { st.slice(r * keep, keep) };
            for (j, v) in win[..keep].iter_mut().enumerate() {
                *v = if fresh { 0.0 } else { srow[j].to_f() };
            }
            for ti in 0..seq {
                win[keep + ti] = x[(bi * seq + ti) * ch + ci].to_f();
            }
            let wr = &w[ci * taps..(ci + 1) * taps];
            for ti in 0..seq {
                let mut acc = 0f32;
                for (j, wj) in wr.iter().enumerate() {
                    acc += wj.to_f() * win[ti + j];
                }
                let v = T::from_f(silu(acc)).to_f();
                // SAFETY: element (batch, token, channel) is this task's alone.
                unsafe { ys.write((bi * seq + ti) * ch + ci, v) };
            }
            for (j, s) in srow.iter_mut().enumerate() {
                *s = T::from_f(win[seq + j]);
            }
        }
    });
    Ok(())
}

/// `x * rsqrt(sum(x^2) + 1e-6) * scale`.
fn l2norm(x: &[f32], scale: f32, out: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let inv = scale / (ss + 1e-6).sqrt();
    for (o, v) in out.iter_mut().zip(x) {
        *o = v * inv;
    }
}

/// `log(1 + e^x)`, linear above 20 (PyTorch's threshold).
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// One token of the delta rule for one head: `S *= decay; kv = S^T k;
/// S += k (beta (v - kv))^T; o = S^T q`, with `S [Dk,Dv]`. `kv` and `ov` are scratch.
fn step<T: FElem<F = f32>>(
    s: &mut [f32],
    [q, k, v]: [&[f32]; 3],
    decay: f32,
    beta: f32,
    [kv, ov]: [&mut [f32]; 2],
    o: &mut [T],
) {
    let dv = kv.len();
    kv.fill(0.0);
    for (i, ki) in k.iter().enumerate() {
        for (sj, acc) in s[i * dv..(i + 1) * dv].iter_mut().zip(kv.iter_mut()) {
            *sj *= decay;
            *acc += *sj * ki;
        }
    }
    // kv becomes delta = beta (v - kv).
    for (d, vj) in kv.iter_mut().zip(v) {
        *d = beta * (vj - *d);
    }
    // S += k delta^T, then o = S^T q, row by row so that S is read once.
    ov.fill(0.0);
    for (i, (ki, qi)) in k.iter().zip(q).enumerate() {
        let srow = &mut s[i * dv..(i + 1) * dv];
        for ((sj, dj), oj) in srow.iter_mut().zip(kv.iter()).zip(ov.iter_mut()) {
            *sj += ki * dj;
            *oj += *sj * qi;
        }
    }
    for (oj, v) in o.iter_mut().zip(ov.iter()) {
        *oj = T::from_f(*v);
    }
}
