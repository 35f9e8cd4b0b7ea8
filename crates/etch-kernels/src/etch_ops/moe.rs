//! `etch::moe.out(x, router_weight, experts_gate_up, experts_down, shared_gate, shared_up,
//! shared_down, shared_expert_gate, top_k, *, out)`: Qwen 3.5's sparse MoE block (docs/OPS.md
//! has the math).
//!
//! Shapes: `x [..., H]` (M rows); `router_weight [E,H]`; `experts_gate_up [E,2I,H]` (gate
//! rows, then up rows); `experts_down [E,H,I]`; `shared_gate`, `shared_up` `[Is,H]`;
//! `shared_down [H,Is]`; `shared_expert_gate [1,H]`; `out` like `x`. One IO dtype (float32,
//! bfloat16 or float16); dot products accumulate in float32 and every intermediate is
//! rounded to the IO dtype where the PyTorch reference rounds it.

use super::{check_io_dtype, dispatch_io, expect_dtype, expect_shape, sigmoid, silu};
use crate::scratch;
use crate::threads::{self, SharedMut};
use crate::util::FElem;
use etch_core::{Error, KernelContext, Result, TensorRef};

/// A decoded `etch::moe` call.
pub struct MoeCall<'a> {
    /// `x [..., H]`.
    pub x: TensorRef<'a>,
    /// `router_weight [E,H]`.
    pub router: TensorRef<'a>,
    /// `experts_gate_up [E,2I,H]`.
    pub gate_up: TensorRef<'a>,
    /// `experts_down [E,H,I]`.
    pub down: TensorRef<'a>,
    /// `shared_gate [Is,H]`.
    pub shared_gate: TensorRef<'a>,
    /// `shared_up [Is,H]`.
    pub shared_up: TensorRef<'a>,
    /// `shared_down [H,Is]`.
    pub shared_down: TensorRef<'a>,
    /// `shared_expert_gate [1,H]`.
    pub shared_expert_gate: TensorRef<'a>,
    /// `out`, shaped like `x`.
    pub out: TensorRef<'a>,
    /// Rows, hidden size, experts, expert and shared-expert widths, experts per row.
    pub rows: usize,
    /// See `rows`.
    pub hidden: usize,
    /// See `rows`.
    pub experts: usize,
    /// See `rows`.
    pub inter: usize,
    /// See `rows`.
    pub shared_inter: usize,
    /// See `rows`.
    pub top_k: usize,
}

/// Decodes and checks `etch::moe.out`: args [x, router_weight, experts_gate_up,
/// experts_down, shared_gate, shared_up, shared_down, shared_expert_gate, top_k, out,
/// (ret)].
pub fn moe_call<'a>(ctx: &mut KernelContext<'a>) -> Result<MoeCall<'a>> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let t: [TensorRef<'a>; 7] = [
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
        ctx.tensor(4)?,
        ctx.tensor(5)?,
        ctx.tensor(6)?,
        ctx.tensor(7)?,
    ];
    let top_k = ctx.int(8)?;
    check_io_dtype(op, "x", x.dtype())?;
    let hidden = x.sizes().last().copied().unwrap_or(0);
    if x.dim() == 0 || hidden == 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: x must be [..., hidden] with hidden > 0, got {:?}",
            x.sizes()
        )));
    }
    let (router, gate_up, down) = (&t[0], &t[1], &t[2]);
    if router.dim() != 2 || gate_up.dim() != 3 || down.dim() != 3 {
        return Err(Error::invalid_argument(format!(
            "{op}: router_weight must be [E, H], experts_gate_up [E, 2I, H] and experts_down \
             [E, H, I]; got {:?}, {:?}, {:?}",
            router.sizes(),
            gate_up.sizes(),
            down.sizes()
        )));
    }
    let experts = router.sizes()[0];
    let inter = down.sizes()[2];
    let shared_inter = t[3].sizes().first().copied().unwrap_or(0);
    let names = [
        "router_weight",
        "experts_gate_up",
        "experts_down",
        "shared_gate",
        "shared_up",
        "shared_down",
        "shared_expert_gate",
    ];
    let shapes: [&[usize]; 7] = [
        &[experts, hidden],
        &[experts, 2 * inter, hidden],
        &[experts, hidden, inter],
        &[shared_inter, hidden],
        &[shared_inter, hidden],
        &[hidden, shared_inter],
        &[1, hidden],
    ];
    for ((name, tensor), shape) in names.iter().zip(&t).zip(shapes) {
        expect_dtype(op, name, tensor, x.dtype())?;
        expect_shape(op, name, tensor, shape)?;
    }
    let top_k = match usize::try_from(top_k) {
        Ok(k) if k >= 1 && k <= experts => k,
        _ => {
            return Err(Error::invalid_argument(format!(
                "{op}: top_k {top_k} must be in 1..={experts}"
            )));
        }
    };
    crate::util::require_contiguous(op, "x", &x)?;
    let out = ctx.resize_out(9, x.sizes())?;
    expect_dtype(op, "out", &out, x.dtype())?;
    let rows = x.numel() / hidden;
    let [
        router,
        gate_up,
        down,
        shared_gate,
        shared_up,
        shared_down,
        shared_expert_gate,
    ] = t;
    Ok(MoeCall {
        x,
        router,
        gate_up,
        down,
        shared_gate,
        shared_up,
        shared_down,
        shared_expert_gate,
        out,
        rows,
        hidden,
        experts,
        inter,
        shared_inter,
        top_k,
    })
}

/// `etch::moe.out` on the CPU.
pub fn moe_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let mut c = moe_call(ctx)?;
    dispatch_io!(c.x.dtype(), ctx.op_name(), "x", |T| run::<T>(&mut c))
}

/// Multiply-adds below which a matrix-vector product stays on the calling thread.
const TASK: usize = 1 << 15;

/// `out[r] = round(w[r] . x)` for the `rows` rows of `w [rows, x.len()]`.
fn matvec<T: FElem<F = f32>>(w: &[T], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    let rows = out.len();
    let tasks = threads::tasks_for(rows * cols, TASK).clamp(1, rows.max(1));
    let o = SharedMut::new(out);
    threads::run(tasks, &|t| {
        for r in threads::part(rows, tasks, t) {
            let wr = &w[r * cols..(r + 1) * cols];
            let mut acc = [0f32; 8];
            let (wc, wt) = wr.split_at(cols / 8 * 8);
            let (xc, xt) = x.split_at(wc.len());
            for (a, b) in wc.chunks_exact(8).zip(xc.chunks_exact(8)) {
                for l in 0..8 {
                    acc[l] += a[l].to_f() * b[l];
                }
            }
            let mut s =
                (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (a, b) in wt.iter().zip(xt) {
                s += a.to_f() * b;
            }
            // SAFETY: row `r` is this task's alone.
            unsafe { o.write(r, T::from_f(s).to_f()) };
        }
    });
}

/// Rounds to `T` and back.
#[inline(always)]
fn rnd<T: FElem<F = f32>>(v: f32) -> f32 {
    T::from_f(v).to_f()
}

/// `round(down . round(round(silu(gate)) * up))` into `y`, with `gu` holding gate then up.
fn ffn<T: FElem<F = f32>>(gu: &mut [f32], down: &[T], y: &mut [f32]) {
    let inter = gu.len() / 2;
    let (g, u) = gu.split_at_mut(inter);
    for (gi, ui) in g.iter_mut().zip(u.iter()) {
        *gi = rnd::<T>(rnd::<T>(silu(*gi)) * ui);
    }
    matvec::<T>(down, g, y);
}

/// The `top_k` largest of `p` (ties: lower index first), sorted by expert index.
fn top_k(p: &[f32], k: usize, sel: &mut [(usize, f32)]) {
    for j in 0..k {
        let mut best: Option<usize> = None;
        for (e, &v) in p.iter().enumerate() {
            if sel[..j].iter().any(|s| s.0 == e) {
                continue;
            }
            if best.is_none_or(|b| v > p[b] || (p[b].is_nan() && !v.is_nan())) {
                best = Some(e);
            }
        }
        let b = best.unwrap_or(0);
        sel[j] = (b, p[b]);
    }
    sel[..k].sort_by_key(|s| s.0);
}

fn run<T: FElem<F = f32>>(c: &mut MoeCall<'_>) -> Result<()> {
    let (h, e, i, is, k) = (c.hidden, c.experts, c.inter, c.shared_inter, c.top_k);
    let x = c.x.data::<T>()?;
    let (router, gate_up, down) = (
        c.router.data::<T>()?,
        c.gate_up.data::<T>()?,
        c.down.data::<T>()?,
    );
    let (sg, su, sd, seg) = (
        c.shared_gate.data::<T>()?,
        c.shared_up.data::<T>()?,
        c.shared_down.data::<T>()?,
        c.shared_expert_gate.data::<T>()?,
    );
    let out = c.out.data_mut::<T>()?;
    let mut buf = scratch::take(3 * h + e + 2 * i.max(is) + 1, 0f32);
    let (xf, rest) = buf.split_at_mut(h);
    let (acc, rest) = rest.split_at_mut(h);
    let (y, rest) = rest.split_at_mut(h);
    let (p, rest) = rest.split_at_mut(e);
    let (gu, gate) = rest.split_at_mut(2 * i.max(is));
    let mut sel = [(0usize, 0f32); 64];
    let mut sel_big = Vec::new();
    let sel: &mut [(usize, f32)] = if k <= 64 {
        &mut sel[..]
    } else {
        sel_big.resize(k, (0, 0.0));
        &mut sel_big[..]
    };
    for m in 0..c.rows {
        for (d, s) in xf.iter_mut().zip(&x[m * h..(m + 1) * h]) {
            *d = s.to_f();
        }
        // Router: softmax over the experts in f32, top-k, renormalised, rounded.
        matvec::<T>(router, xf, p);
        let mx = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = p
            .iter_mut()
            .map(|v| {
                *v = (*v - mx).exp();
                *v
            })
            .sum();
        p.iter_mut().for_each(|v| *v /= sum);
        top_k(p, k, sel);
        let total: f32 = sel[..k].iter().map(|s| s.1).sum();
        acc.fill(0.0);
        for &(ex, w) in &sel[..k] {
            let w = rnd::<T>(w / total);
            matvec::<T>(
                &gate_up[ex * 2 * i * h..(ex + 1) * 2 * i * h],
                xf,
                &mut gu[..2 * i],
            );
            ffn::<T>(&mut gu[..2 * i], &down[ex * h * i..(ex + 1) * h * i], y);
            for (a, yv) in acc.iter_mut().zip(y.iter()) {
                *a = rnd::<T>(*a + rnd::<T>(yv * w));
            }
        }
        // Shared expert, gated by sigmoid(x . shared_expert_gate).
        matvec::<T>(sg, xf, &mut gu[..is]);
        matvec::<T>(su, xf, &mut gu[is..2 * is]);
        ffn::<T>(&mut gu[..2 * is], sd, y);
        matvec::<T>(seg, xf, &mut gate[..1]);
        let sgate = rnd::<T>(sigmoid(gate[0]));
        for (j, o) in out[m * h..(m + 1) * h].iter_mut().enumerate() {
            *o = T::from_f(acc[j] + rnd::<T>(sgate * y[j]));
        }
    }
    Ok(())
}
