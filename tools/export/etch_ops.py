"""The `etch::` custom operators: their schemas (`torch.library`), reference
implementations in PyTorch (the oracle for etch's CPU and CUDA kernels), fake
implementations for export, and `.out` variants for ExecuTorch's out-variant pass.

Import this module before exporting a model that calls `torch.ops.etch.*`. The exact math
of each operator is documented in docs/OPS.md; the reference implementations below are
that math written in PyTorch, in float32 whatever the input dtype (outputs are cast back
to the input dtype).

Operators:
    etch::gated_delta_net  a Gated DeltaNet token mixer over T tokens: causal depthwise
                           conv (with its state), SiLU, q/k L2 norm, gates, and the delta
                           rule (with its recurrent state); both states updated in place
    etch::moe              a top-k mixture-of-experts block with stacked experts and a
                           sigmoid-gated shared expert
    etch::attention        causal GQA attention that first writes k and v into the caches
                           at the given position
    etch::gated_attention  etch::attention times sigmoid(gate) (Qwen 3.5's output gate):
                           one op for the attention, the sigmoid and the product
    etch::sample           a next-token sampler (greedy, temperature, top-k, top-p) driven
                           by a uniform number from the host
    etch::rms_norm         RMSNorm over the last dim, weight as (unit_offset + w)
    etch::rms_norm_gated   RMSNormGated: w * norm(x) times silu(z)
    etch::add_rms_norm     a residual add and the RMSNorm of its result, both returned
    etch::rope             rotate-half rotary embedding on the first R features of each
                           head (partial RoPE), in x's dtype as the model computes it
    etch::qk_norm_rope     an attention layer's q/gate split, q and k RMSNorms and RoPE of q
                           and k as one op (returns q, gate, k)
    etch::rope_cos_sin     the cos and sin tables of positions input_pos[0] + t (t < T)
                           for etch::rope, as the model computes them (one op for the
                           ~10 aranges, powers, products, cos, sin and casts)
"""
import math

import torch
import torch.nn.functional as F

_lib = torch.library.Library("etch", "DEF")

_GDN_ARGS = (
    "Tensor mixed_qkv, Tensor a, Tensor b, Tensor conv_weight, Tensor A_log, Tensor dt_bias, "
    "Tensor(a!) conv_state, Tensor(b!) recurrent_state, Tensor input_pos, int num_k_heads, "
    "int head_k_dim"
)
_MOE_ARGS = (
    "Tensor x, Tensor router_weight, Tensor experts_gate_up, Tensor experts_down, "
    "Tensor shared_gate, Tensor shared_up, Tensor shared_down, Tensor shared_expert_gate, int top_k"
)
_ATTN_ARGS = (
    "Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor input_pos, float scale"
)
_GATTN_ARGS = _ATTN_ARGS + ", Tensor gate"
_SAMPLE_ARGS = "Tensor logits, Tensor sampling"
_NORM_ARGS = "Tensor x, Tensor weight, float eps, bool unit_offset"
_GNORM_ARGS = "Tensor x, Tensor z, Tensor weight, float eps"
_ROPE_ARGS = "Tensor x, Tensor cos, Tensor sin"
_ROPE_CS_ARGS = "Tensor input_pos, Tensor x, float theta, int dim"
_QKNR_ARGS = (
    "Tensor qg, Tensor k, Tensor q_weight, Tensor k_weight, float eps, bool unit_offset, "
    "Tensor cos, Tensor sin"
)
_ADD_NORM_ARGS = "Tensor x, Tensor y, Tensor weight, float eps, bool unit_offset"

_lib.define(f"gated_delta_net({_GDN_ARGS}) -> Tensor")
_lib.define(f"gated_delta_net.out({_GDN_ARGS}, *, Tensor(c!) out) -> Tensor(c!)")
_lib.define(f"moe({_MOE_ARGS}) -> Tensor")
_lib.define(f"moe.out({_MOE_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"attention({_ATTN_ARGS}) -> Tensor")
_lib.define(f"attention.out({_ATTN_ARGS}, *, Tensor(c!) out) -> Tensor(c!)")
_lib.define(f"gated_attention({_GATTN_ARGS}) -> Tensor")
_lib.define(f"gated_attention.out({_GATTN_ARGS}, *, Tensor(c!) out) -> Tensor(c!)")
_lib.define(f"sample({_SAMPLE_ARGS}) -> Tensor")
_lib.define(f"sample.out({_SAMPLE_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"rms_norm({_NORM_ARGS}) -> Tensor")
_lib.define(f"rms_norm.out({_NORM_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"rms_norm_gated({_GNORM_ARGS}) -> Tensor")
_lib.define(f"rms_norm_gated.out({_GNORM_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"add_rms_norm({_ADD_NORM_ARGS}) -> (Tensor, Tensor)")
_lib.define(
    f"add_rms_norm.out({_ADD_NORM_ARGS}, *, Tensor(a!) sum, Tensor(b!) out) -> (Tensor(a!), Tensor(b!))"
)
_lib.define(f"rope({_ROPE_ARGS}) -> Tensor")
_lib.define(f"rope.out({_ROPE_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define(f"qk_norm_rope({_QKNR_ARGS}) -> (Tensor, Tensor, Tensor)")
_lib.define(
    f"qk_norm_rope.out({_QKNR_ARGS}, *, Tensor(a!) q, Tensor(b!) gate, Tensor(c!) k_out) "
    "-> (Tensor(a!), Tensor(b!), Tensor(c!))"
)
_lib.define(f"rope_cos_sin({_ROPE_CS_ARGS}) -> (Tensor, Tensor)")
_lib.define(
    f"rope_cos_sin.out({_ROPE_CS_ARGS}, *, Tensor(a!) cos, Tensor(b!) sin) -> (Tensor(a!), Tensor(b!))"
)


# ----------------------------------------------------------------------------------------
# etch::gated_delta_net


def _l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_delta_net_ref(mixed_qkv, a, b, conv_weight, A_log, dt_bias, conv_state,
                        recurrent_state, input_pos, num_k_heads, head_k_dim):
    """mixed_qkv [B,T,C] (C = 2*Hk*Dk + Hv*Dv), a/b [B,T,Hv], conv_weight [C,1,K],
    A_log/dt_bias [Hv], conv_state [B,C,K-1] (the previous K-1 inputs, oldest first),
    recurrent_state [B,Hv,Dk,Dv] (float32), input_pos [1] int64 (states read as zero when
    input_pos[0] == 0). Returns o [B,T,Hv,Dv] in mixed_qkv's dtype; updates both states."""
    dtype = mixed_qkv.dtype
    B, T, C = mixed_qkv.shape
    Hv = a.shape[-1]
    K = conv_weight.shape[-1]
    Dk = head_k_dim
    Hk = num_k_heads
    Dv = (C - 2 * Hk * Dk) // Hv
    fresh = bool(input_pos.reshape(-1)[0].item() == 0)
    prev = torch.zeros_like(conv_state, dtype=torch.float32) if fresh else conv_state.float()
    state = torch.zeros_like(recurrent_state, dtype=torch.float32) if fresh else recurrent_state.float()
    x = torch.cat([prev, mixed_qkv.float().transpose(1, 2)], dim=-1)  # [B,C,K-1+T]
    w = conv_weight.float().reshape(C, K)
    y = torch.zeros(B, C, T, dtype=torch.float32)
    for j in range(K):
        y = y + w[:, j : j + 1] * x[:, :, j : j + T]
    y = F.silu(y).to(dtype).float().transpose(1, 2)  # [B,T,C], rounded like the reference
    q = y[..., : Hk * Dk].reshape(B, T, Hk, Dk)
    k = y[..., Hk * Dk : 2 * Hk * Dk].reshape(B, T, Hk, Dk)
    v = y[..., 2 * Hk * Dk :].reshape(B, T, Hv, Dv)
    rep = Hv // Hk
    q = _l2norm(q.repeat_interleave(rep, dim=2)) * (Dk ** -0.5)
    k = _l2norm(k.repeat_interleave(rep, dim=2))
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    out = torch.empty(B, T, Hv, Dv, dtype=torch.float32)
    for t in range(T):
        state = state * g[:, t].exp()[..., None, None]
        kv = (state * k[:, t, :, :, None]).sum(dim=-2)
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (state * q[:, t, :, :, None]).sum(dim=-2)
    conv_state.copy_(x[:, :, -(K - 1):].to(conv_state.dtype))
    recurrent_state.copy_(state.to(recurrent_state.dtype))
    return out.to(dtype)


def _gdn_out_shape(mixed_qkv, a, num_k_heads, head_k_dim):
    B, T, C = mixed_qkv.shape
    Hv = a.shape[-1]
    return (B, T, Hv, (C - 2 * num_k_heads * head_k_dim) // Hv)


_lib.impl("gated_delta_net", gated_delta_net_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::gated_delta_net")
def _gdn_fake(mixed_qkv, a, b, conv_weight, A_log, dt_bias, conv_state, recurrent_state,
              input_pos, num_k_heads, head_k_dim):
    return mixed_qkv.new_empty(_gdn_out_shape(mixed_qkv, a, num_k_heads, head_k_dim))


def _gdn_out(mixed_qkv, a, b, conv_weight, A_log, dt_bias, conv_state, recurrent_state,
             input_pos, num_k_heads, head_k_dim, *, out):
    out.copy_(gated_delta_net_ref(mixed_qkv, a, b, conv_weight, A_log, dt_bias, conv_state,
                                  recurrent_state, input_pos, num_k_heads, head_k_dim))
    return out


_lib.impl("gated_delta_net.out", _gdn_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::moe


def moe_ref(x, router_weight, experts_gate_up, experts_down, shared_gate, shared_up,
            shared_down, shared_expert_gate, top_k):
    """x [..., H]; router_weight [E,H]; experts_gate_up [E,2I,H] (gate rows, then up rows);
    experts_down [E,H,I]; shared_gate/shared_up [Is,H]; shared_down [H,Is];
    shared_expert_gate [1,H]. Returns [..., H] in x's dtype."""
    dtype = x.dtype
    shape = x.shape
    h = x.reshape(-1, shape[-1])
    logits = F.linear(h, router_weight)
    p = torch.softmax(logits.float(), dim=-1)
    w, idx = torch.topk(p, top_k, dim=-1)
    w = (w / w.sum(dim=-1, keepdim=True)).to(dtype)
    inter = experts_down.shape[-1]
    out = torch.zeros_like(h)
    for m in range(h.shape[0]):
        for j in range(top_k):
            e = int(idx[m, j])
            gu = F.linear(h[m], experts_gate_up[e])
            act = F.silu(gu[:inter]) * gu[inter:]
            out[m] = out[m] + F.linear(act, experts_down[e]) * w[m, j]
    shared = F.linear(F.silu(F.linear(h, shared_gate)) * F.linear(h, shared_up), shared_down)
    shared = torch.sigmoid(F.linear(h, shared_expert_gate)) * shared
    return (out + shared).reshape(shape).to(dtype)


_lib.impl("moe", moe_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::moe")
def _moe_fake(x, router_weight, experts_gate_up, experts_down, shared_gate, shared_up,
              shared_down, shared_expert_gate, top_k):
    return torch.empty_like(x)


def _moe_out(x, router_weight, experts_gate_up, experts_down, shared_gate, shared_up,
             shared_down, shared_expert_gate, top_k, *, out):
    out.copy_(moe_ref(x, router_weight, experts_gate_up, experts_down, shared_gate, shared_up,
                      shared_down, shared_expert_gate, top_k))
    return out


_lib.impl("moe.out", _moe_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::attention


def attention_ref(q, k, v, k_cache, v_cache, input_pos, scale):
    """q [B,T,Hq,D]; k/v [B,T,Hkv,D]; k_cache/v_cache [B,S,Hkv,D]; input_pos [1] int64
    (0 <= pos, pos + T <= S, else an error). Writes k and v at rows pos..pos+T of the
    caches, then returns
    softmax(q K^T * scale, causal over cache rows <= pos+t) V as [B,T,Hq,D]."""
    dtype = q.dtype
    B, T, Hq, D = q.shape
    Hkv = k.shape[2]
    pos = int(input_pos.reshape(-1)[0].item())
    if pos < 0 or pos + T > k_cache.shape[1]:
        raise ValueError(f"position {pos} + {T} tokens does not fit the cache's {k_cache.shape[1]} rows")
    k_cache[:, pos : pos + T] = k.to(k_cache.dtype)
    v_cache[:, pos : pos + T] = v.to(v_cache.dtype)
    L = pos + T
    keys = k_cache[:, :L].float().repeat_interleave(Hq // Hkv, dim=2)  # [B,L,Hq,D]
    vals = v_cache[:, :L].float().repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bthd,blhd->bhtl", q.float(), keys) * scale
    mask = torch.arange(L)[None, :] > (pos + torch.arange(T))[:, None]
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhtl,blhd->bthd", p, vals).to(dtype)


_lib.impl("attention", attention_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::attention")
def _attention_fake(q, k, v, k_cache, v_cache, input_pos, scale):
    return torch.empty_like(q)


def _attention_out(q, k, v, k_cache, v_cache, input_pos, scale, *, out):
    out.copy_(attention_ref(q, k, v, k_cache, v_cache, input_pos, scale))
    return out


_lib.impl("attention.out", _attention_out, "CompositeExplicitAutograd")


def gated_attention_ref(q, k, v, k_cache, v_cache, input_pos, scale, gate):
    """attention_ref times sigmoid(gate) (gate shaped like q), in q's dtype as the model
    computes it: the attention output rounded, sigmoid(gate) rounded, their product rounded."""
    if gate.shape != q.shape or gate.dtype != q.dtype:
        raise ValueError(f"gated_attention: gate {gate.dtype} {list(gate.shape)} is not "
                         f"shaped like q {q.dtype} {list(q.shape)}")
    return attention_ref(q, k, v, k_cache, v_cache, input_pos, scale) * torch.sigmoid(gate)


_lib.impl("gated_attention", gated_attention_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::gated_attention")
def _gated_attention_fake(q, k, v, k_cache, v_cache, input_pos, scale, gate):
    return torch.empty_like(q)


def _gated_attention_out(q, k, v, k_cache, v_cache, input_pos, scale, gate, *, out):
    out.copy_(gated_attention_ref(q, k, v, k_cache, v_cache, input_pos, scale, gate))
    return out


_lib.impl("gated_attention.out", _gated_attention_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::sample


def sample_row(logits, temperature, top_k, top_p, u):
    """One row of etch::sample (docs/OPS.md): returns an index into `logits`."""
    logits = logits.float()
    if not temperature > 0 or top_k == 1:  # temperature <= 0 or NaN: greedy
        return int(torch.argmax(torch.nan_to_num(logits, nan=float("-inf"))))
    p = torch.softmax(logits / temperature, dim=-1)
    # Stable descending order: ties keep the lower index first.
    order = sorted(range(p.numel()), key=lambda i: (-float(p[i]), i))
    if top_k > 0:
        order = order[:top_k]
    if top_p < 1:
        acc, keep = 0.0, []
        for i in order:
            keep.append(i)
            acc += float(p[i])
            if acc >= top_p:
                break
        order = keep
    total = sum(float(p[i]) for i in order)
    acc = 0.0
    for i in order:
        acc += float(p[i])
        if acc > u * total:
            return i
    return order[-1]


def sample_ref(logits, sampling):
    """logits [B,V] float; sampling float32 [4] = (temperature, top_k, top_p, u).
    Returns int64 [B,1]."""
    t, k, p, u = (float(x) for x in sampling.reshape(-1)[:4])
    rows = logits.reshape(-1, logits.shape[-1])
    ids = [sample_row(r, t, int(k), p, u) for r in rows]
    return torch.tensor(ids, dtype=torch.int64).reshape(-1, 1)


_lib.impl("sample", sample_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::sample")
def _sample_fake(logits, sampling):
    return logits.new_empty((logits.reshape(-1, logits.shape[-1]).shape[0], 1), dtype=torch.int64)


def _sample_out(logits, sampling, *, out):
    out.copy_(sample_ref(logits, sampling))
    return out


_lib.impl("sample.out", _sample_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::rms_norm, etch::rms_norm_gated


def rms_norm_ref(x, weight, eps, unit_offset):
    """x [..., N], weight [N]: x * rsqrt(mean(x^2) + eps) * (unit_offset + w) in float32,
    rounded once to x's dtype (Qwen3_5MoeRMSNorm with unit_offset=True)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * ((1.0 if unit_offset else 0.0) + weight.float())).to(x.dtype)


def rms_norm_gated_ref(x, z, weight, eps):
    """x, z [..., N], weight [N] (Qwen3_5MoeRMSNormGated): the norm in float32, rounded to
    x's dtype and multiplied by w (in x's dtype), then times silu(z) in float32, rounded."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(dtype)
    return (h * F.silu(z.float())).to(dtype)


_lib.impl("rms_norm", rms_norm_ref, "CompositeExplicitAutograd")
_lib.impl("rms_norm_gated", rms_norm_gated_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::rms_norm")
def _rms_norm_fake(x, weight, eps, unit_offset):
    return torch.empty_like(x)


@torch.library.register_fake("etch::rms_norm_gated")
def _rms_norm_gated_fake(x, z, weight, eps):
    return torch.empty_like(x)


def _rms_norm_out(x, weight, eps, unit_offset, *, out):
    out.copy_(rms_norm_ref(x, weight, eps, unit_offset))
    return out


def _rms_norm_gated_out(x, z, weight, eps, *, out):
    out.copy_(rms_norm_gated_ref(x, z, weight, eps))
    return out


_lib.impl("rms_norm.out", _rms_norm_out, "CompositeExplicitAutograd")


def add_rms_norm_ref(x, y, weight, eps, unit_offset):
    """The residual add x + y in x's dtype (rounded, as the model adds), and rms_norm_ref
    of that sum: (sum, normed)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"add_rms_norm: x {list(x.shape)} and y {list(y.shape)} differ")
    s = x + y
    return s, rms_norm_ref(s, weight, eps, unit_offset)


_lib.impl("add_rms_norm", add_rms_norm_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::add_rms_norm")
def _add_rms_norm_fake(x, y, weight, eps, unit_offset):
    return torch.empty_like(x), torch.empty_like(x)


def _add_rms_norm_out(x, y, weight, eps, unit_offset, *, sum, out):
    s, n = add_rms_norm_ref(x, y, weight, eps, unit_offset)
    sum.copy_(s)
    out.copy_(n)
    return sum, out


_lib.impl("add_rms_norm.out", _add_rms_norm_out, "CompositeExplicitAutograd")
_lib.impl("rms_norm_gated.out", _rms_norm_gated_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::rope


def rope_ref(x, cos, sin):
    """x [B, T, H, D], cos/sin [T, R] (R even, R <= D): rotate-half RoPE on the first R
    features, the rest passed through. Computed in x's dtype, operation by operation, as
    the model's PyTorch code does (each product and the sum rounded to the dtype)."""
    r = cos.shape[-1]
    if x.dim() != 4 or cos.dim() != 2 or r % 2 or not 0 < r <= x.shape[-1]:
        raise ValueError(f"rope: x {list(x.shape)} and cos {list(cos.shape)} do not fit")
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x_rot, x_pass = x[..., :r], x[..., r:]
    half = r // 2
    rot = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat([x_rot * c + rot * s, x_pass], dim=-1)


_lib.impl("rope", rope_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::rope")
def _rope_fake(x, cos, sin):
    return torch.empty_like(x)


def _rope_out(x, cos, sin, *, out):
    out.copy_(rope_ref(x, cos, sin))
    return out


_lib.impl("rope.out", _rope_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::rope_cos_sin


def rope_cos_sin_ref(input_pos, x, theta, dim):
    """cos and sin [T, dim] in x's dtype for positions p_t = input_pos[0] + t, t < T =
    x.shape[1] (x [B, T, ...] only gives T and the dtype), as the default rotary embedding
    computes them in float32 (HF's inv_freq and its outer product with the positions):
    inv_freq_j = 1 / theta ** (2j / dim) (j < dim/2; the exponent divided in float32),
    f_{t,j} = float(p_t) * inv_freq_j, the table [f, f] (each half once), then cos and sin
    rounded to the dtype."""
    if (dim <= 0 or dim % 2 or input_pos.numel() != 1 or input_pos.dtype != torch.int64
            or x.dim() < 2 or not (math.isfinite(theta) and theta > 0)):
        raise ValueError(f"rope_cos_sin: dim {dim}, theta {theta}, input_pos "
                         f"{input_pos.dtype} {list(input_pos.shape)}, x {list(x.shape)}")
    t = x.shape[1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    pos = (input_pos.reshape(-1)[:1].cpu() + torch.arange(t)).to(torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype).to(x.device), emb.sin().to(x.dtype).to(x.device)


_lib.impl("rope_cos_sin", rope_cos_sin_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::rope_cos_sin")
def _rope_cos_sin_fake(input_pos, x, theta, dim):
    t = x.shape[1]
    return x.new_empty((t, dim)), x.new_empty((t, dim))


def _rope_cos_sin_out(input_pos, x, theta, dim, *, cos, sin):
    c, s = rope_cos_sin_ref(input_pos, x, theta, dim)
    cos.copy_(c)
    sin.copy_(s)
    return cos, sin


_lib.impl("rope_cos_sin.out", _rope_cos_sin_out, "CompositeExplicitAutograd")


# ----------------------------------------------------------------------------------------
# etch::qk_norm_rope


def qk_norm_rope_ref(qg, k, q_weight, k_weight, eps, unit_offset, cos, sin):
    """qg [B,T,Hq,2D] (per head: q, then the output gate), k [B,T,Hkv,D], weights [D],
    cos/sin [T,R]: (rope_ref(rms_norm_ref(q)), gate, rope_ref(rms_norm_ref(k))), each as
    the separate ops compute it (the norms rounded to the dtype, then RoPE)."""
    if qg.dim() != 4 or k.dim() != 4 or qg.shape[-1] != 2 * k.shape[-1] or \
            qg.shape[:2] != k.shape[:2]:
        raise ValueError(f"qk_norm_rope: qg {list(qg.shape)} and k {list(k.shape)} do not fit")
    d = k.shape[-1]
    q, gate = qg[..., :d], qg[..., d:]
    q = rope_ref(rms_norm_ref(q, q_weight, eps, unit_offset), cos, sin)
    k = rope_ref(rms_norm_ref(k, k_weight, eps, unit_offset), cos, sin)
    return q, gate.contiguous(), k


_lib.impl("qk_norm_rope", qk_norm_rope_ref, "CompositeExplicitAutograd")


@torch.library.register_fake("etch::qk_norm_rope")
def _qk_norm_rope_fake(qg, k, q_weight, k_weight, eps, unit_offset, cos, sin):
    d = k.shape[-1]
    shape = list(qg.shape[:-1]) + [d]
    return qg.new_empty(shape), qg.new_empty(shape), torch.empty_like(k)


def _qk_norm_rope_out(qg, k, q_weight, k_weight, eps, unit_offset, cos, sin, *, q, gate, k_out):
    a, b, c = qk_norm_rope_ref(qg, k, q_weight, k_weight, eps, unit_offset, cos, sin)
    q.copy_(a)
    gate.copy_(b)
    k_out.copy_(c)
    return q, gate, k_out


_lib.impl("qk_norm_rope.out", _qk_norm_rope_out, "CompositeExplicitAutograd")
