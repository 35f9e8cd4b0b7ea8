#!/usr/bin/env python3
"""Export Qwen 3.5 MoE (`Qwen3_5MoeForCausalLM`, transformers 5.17) to an etch program.

    python tools/export/qwen3_5_moe.py --model CKPT_DIR -o OUT.pte \
        [--max-seq-len N] [--dtype bf16|f32] [--logits]

Only `CKPT_DIR/config.json` is read: the model is built on the `meta` device, so no weight
is ever materialised and the full 35B-A3B config exports on a small machine. Every weight
becomes an external constant named by its Hugging Face text FQN (`model.layers.0.linear_attn.
in_proj_qkv.weight`, ...), with the experts of each layer stacked as
`model.layers.N.mlp.experts.gate_up_proj` [E, 2I, H] and `...experts.down_proj` [E, H, I];
`etch run/generate --weights CKPT_DIR` finds them in the checkpoint's safetensors shards.

The program has two methods sharing their state (KV caches, conv and recurrent states, as
mutable buffers planned once for both):
    prefill(tokens i64[1, T], input_pos i64[1], sampling f32[4]) -> i64[1, 1]   (T dynamic)
    decode (tokens i64[1, 1], input_pos i64[1], sampling f32[4]) -> i64[1, 1]
returning the sampled next token (`etch::sample`: sampling = [temperature, top_k, top_p, u]);
with --logits they take (tokens, input_pos) and return the last position's logits [1, V].
Metadata methods: get_max_seq_len, get_vocab_size, get_n_layers, get_eos_ids, use_kv_cache,
enable_dynamic_shape.

The model definition below is ours (export-friendly: buffer state, `etch::` custom ops); it
equals transformers' implementation (tools/export/test_qwen3_5_moe.py checks the logits).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import etch_ops  # noqa: E402,F401  (registers torch.ops.etch.*)


class Config:
    """The fields of a Qwen3_5MoeTextConfig (or the `text_config` of the multimodal one)."""

    def __init__(self, d):
        if "text_config" in d:
            top = d
            d = dict(d["text_config"])
            for k in ("eos_token_id", "bos_token_id", "tie_word_embeddings"):
                if k not in d and k in top:
                    d[k] = top[k]
        g = d.get
        self.vocab_size = g("vocab_size", 248320)
        self.hidden_size = g("hidden_size", 2048)
        self.num_hidden_layers = g("num_hidden_layers", 40)
        self.num_attention_heads = g("num_attention_heads", 16)
        self.num_key_value_heads = g("num_key_value_heads", 2)
        self.head_dim = g("head_dim", 256)
        self.linear_num_key_heads = g("linear_num_key_heads", 16)
        self.linear_num_value_heads = g("linear_num_value_heads", 32)
        self.linear_key_head_dim = g("linear_key_head_dim", 128)
        self.linear_value_head_dim = g("linear_value_head_dim", 128)
        self.linear_conv_kernel_dim = g("linear_conv_kernel_dim", 4)
        self.num_experts = g("num_experts", 256)
        self.num_experts_per_tok = g("num_experts_per_tok", 8)
        self.moe_intermediate_size = g("moe_intermediate_size", 512)
        self.shared_expert_intermediate_size = g("shared_expert_intermediate_size", 512)
        self.rms_norm_eps = g("rms_norm_eps", 1e-6)
        self.hidden_act = g("hidden_act", "silu")
        self.tie_word_embeddings = g("tie_word_embeddings", False)
        self.attention_bias = g("attention_bias", False)
        rope = g("rope_parameters") or g("rope_scaling") or {}
        self.rope_theta = rope.get("rope_theta", g("rope_theta", 10000.0))
        self.partial_rotary_factor = rope.get("partial_rotary_factor", g("partial_rotary_factor", 0.25))
        self.rope_type = rope.get("rope_type", rope.get("type", "default"))
        self.layer_types = g("layer_types") or [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]
        eos = g("eos_token_id")
        self.eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if self.hidden_act != "silu":
            raise SystemExit(f"hidden_act {self.hidden_act!r} is not supported (only silu)")
        if self.rope_type != "default":
            raise SystemExit(f"rope_type {self.rope_type!r} is not supported (only default)")
        if self.attention_bias:
            raise SystemExit("attention_bias=True is not supported")


class RMSNorm(nn.Module):
    """Qwen 3.5's RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), in float32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return torch.ops.etch.rms_norm(x, self.weight, self.eps, True)


class GatedNorm(nn.Module):
    """RMSNormGated: w * norm(o) (in o's dtype), times silu(z), in float32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o, z):
        return torch.ops.etch.rms_norm_gated(o, z, self.weight, self.eps)


def linear(dim_in, dim_out):
    return nn.Linear(dim_in, dim_out, bias=False)


class GatedDeltaNet(nn.Module):
    def __init__(self, c: Config, dtype):
        super().__init__()
        self.hk, self.dk = c.linear_num_key_heads, c.linear_key_head_dim
        self.hv, self.dv = c.linear_num_value_heads, c.linear_value_head_dim
        conv_dim = 2 * self.hk * self.dk + self.hv * self.dv
        k = c.linear_conv_kernel_dim
        self.in_proj_qkv = linear(c.hidden_size, conv_dim)
        self.in_proj_z = linear(c.hidden_size, self.hv * self.dv)
        self.in_proj_b = linear(c.hidden_size, self.hv)
        self.in_proj_a = linear(c.hidden_size, self.hv)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, k, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.zeros(self.hv))
        self.norm = GatedNorm(self.dv, c.rms_norm_eps)
        self.out_proj = linear(self.hv * self.dv, c.hidden_size)
        self.register_buffer("conv_state", torch.zeros(1, conv_dim, k - 1, dtype=dtype))
        self.register_buffer(
            "recurrent_state", torch.zeros(1, self.hv, self.dk, self.dv, dtype=torch.float32)
        )

    def forward(self, x, input_pos, rope):
        B, T, _ = x.shape
        # The four projections of x first, one after another: `etch lower` groups
        # consecutive linears of one input into one call (one GEMV launch when decoding).
        qkv, a, b, z = self.in_proj_qkv(x), self.in_proj_a(x), self.in_proj_b(x), self.in_proj_z(x)
        o = torch.ops.etch.gated_delta_net(
            qkv, a, b, self.conv1d.weight, self.A_log, self.dt_bias, self.conv_state,
            self.recurrent_state, input_pos, self.hk, self.dk,
        )
        z = z.reshape(B, T, self.hv, self.dv)
        return self.out_proj(self.norm(o, z).reshape(B, T, self.hv * self.dv))


class Attention(nn.Module):
    def __init__(self, c: Config, max_seq_len, dtype):
        super().__init__()
        self.hq, self.hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = linear(c.hidden_size, self.hq * self.d * 2)
        self.k_proj = linear(c.hidden_size, self.hkv * self.d)
        self.v_proj = linear(c.hidden_size, self.hkv * self.d)
        self.o_proj = linear(self.hq * self.d, c.hidden_size)
        self.q_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.d, c.rms_norm_eps)
        shape = (1, max_seq_len, self.hkv, self.d)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def forward(self, x, input_pos, rope):
        B, T, _ = x.shape
        # The three projections first (grouped by `etch lower`, as in GatedDeltaNet).
        qg, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        cos, sin = rope
        # The q/gate split, q_norm, k_norm and RoPE of q and k as one op
        # (etch_ops.qk_norm_rope_ref: rope(q_norm(q)), gate, rope(k_norm(k))).
        q, gate, k = torch.ops.etch.qk_norm_rope(
            qg.view(B, T, self.hq, 2 * self.d), k.view(B, T, self.hkv, self.d),
            self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, True, cos, sin)
        v = v.view(B, T, self.hkv, self.d)
        # attention(...) * sigmoid(gate), the output gate, as one op (etch_ops.gated_attention_ref).
        o = torch.ops.etch.gated_attention(q, k, v, self.k_cache, self.v_cache, input_pos,
                                           self.d ** -0.5, gate)
        return self.o_proj(o.reshape(B, T, self.hq * self.d))


class Router(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c.num_experts, c.hidden_size))


class Experts(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        e, h, i = c.num_experts, c.hidden_size, c.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))


class SharedExpert(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        h, i = c.hidden_size, c.shared_expert_intermediate_size
        self.gate_proj = linear(h, i)
        self.up_proj = linear(h, i)
        self.down_proj = linear(i, h)


class SparseMoe(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.top_k = c.num_experts_per_tok
        self.gate = Router(c)
        self.experts = Experts(c)
        self.shared_expert = SharedExpert(c)
        self.shared_expert_gate = linear(c.hidden_size, 1)

    def forward(self, x):
        s = self.shared_expert
        return torch.ops.etch.moe(
            x, self.gate.weight, self.experts.gate_up_proj, self.experts.down_proj,
            s.gate_proj.weight, s.up_proj.weight, s.down_proj.weight,
            self.shared_expert_gate.weight, self.top_k,
        )


class DecoderLayer(nn.Module):
    def __init__(self, c: Config, layer_type, max_seq_len, dtype):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == "linear_attention":
            self.linear_attn = GatedDeltaNet(c, dtype)
        elif layer_type == "full_attention":
            self.self_attn = Attention(c, max_seq_len, dtype)
        else:
            raise SystemExit(f"layer type {layer_type!r} is not supported")
        self.mlp = SparseMoe(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, h, input_pos, rope, next_norm):
        """x: the residual stream; h: input_layernorm(x), made by the previous layer's
        fused add. Returns (x, next_norm(x)), or (x, None) without a next norm. Each residual
        add is fused with the RMSNorm that follows it (etch::add_rms_norm)."""
        mixer = self.linear_attn if self.layer_type == "linear_attention" else self.self_attn
        x, h = add_norm(x, mixer(h, input_pos, rope), self.post_attention_layernorm)
        o = self.mlp(h)
        if next_norm is None:
            return x + o, None
        return add_norm(x, o, next_norm)


def add_norm(x, y, norm: RMSNorm):
    """(x + y, norm(x + y)) in one op."""
    return torch.ops.etch.add_rms_norm(x, y, norm.weight, norm.eps, True)


class TextModel(nn.Module):
    def __init__(self, c: Config, max_seq_len, dtype):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(c, t, max_seq_len, dtype) for t in c.layer_types[: c.num_hidden_layers]
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen35Moe(nn.Module):
    """Qwen3_5MoeForCausalLM for export: forward(tokens, input_pos[, sampling])."""

    def __init__(self, c: Config, max_seq_len, dtype, sample=True):
        super().__init__()
        self.config = c
        self.sample = sample
        self.model = TextModel(c, max_seq_len, dtype)
        self.lm_head = linear(c.hidden_size, c.vocab_size)
        self.rotary_dim = int(c.head_dim * c.partial_rotary_factor)

    def rope(self, input_pos, x):
        """cos/sin [T, rotary_dim] for positions input_pos[0] + t: one etch::rope_cos_sin
        (etch_ops.rope_cos_sin_ref: HF's default rotary embedding in float32, cast to x's
        dtype)."""
        return torch.ops.etch.rope_cos_sin(input_pos, x, float(self.config.rope_theta),
                                           self.rotary_dim)

    def forward(self, tokens, input_pos, sampling=None):
        x = self.model.embed_tokens(tokens)
        rope = self.rope(input_pos, x)
        layers = self.model.layers
        h = layers[0].input_layernorm(x)
        for i, layer in enumerate(layers):
            nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else None
            x, h = layer(x, h, input_pos, rope, nxt)
        x = self.model.norm(x[:, -1, :])
        logits = self.lm_head(x)
        if sampling is None:
            return logits
        return torch.ops.etch.sample(logits, sampling)


def build(config: dict, max_seq_len, dtype, sample=True, device="meta"):
    c = Config(config)
    with torch.device(device):
        m = Qwen35Moe(c, max_seq_len, dtype, sample).to(dtype)
    # States keep their own dtype (the recurrent state is float32).
    for layer in m.model.layers:
        if layer.layer_type == "linear_attention":
            gdn = layer.linear_attn
            gdn.recurrent_state = gdn.recurrent_state.float()
    if c.tie_word_embeddings:
        m.lm_head.weight = m.model.embed_tokens.weight
    return m.eval()


# ----------------------------------------------------------------------------------------
# Export


def _patch_emitter_for_meta_constants():
    """ExecuTorch's emitter reads every constant's bytes, even external ones. Our weights
    live on the meta device (never materialised): for those, record the name only; the
    .ptd that would hold their bytes is not written (the checkpoint is the data)."""
    from executorch.exir.emit import _emitter
    from executorch.exir.schema import TensorDataLocation
    from executorch.exir.tensor import make_tensor_value
    from executorch.exir.schema import EValue

    original = _emitter._Emitter._tensor_spec_to_evalue

    def patched(self, spec, constant_tag=None):
        storage = getattr(spec, "storage", None)
        info = spec.extra_tensor_info
        if (
            spec.const
            and storage is not None
            and storage.device.type == "meta"
            and info is not None
            and info.location == TensorDataLocation.EXTERNAL
        ):
            state = self.program_state
            idx = len(state.external_constant_buffer)
            state.external_constant_buffer.append(b"")
            state.external_constant_hash["meta:" + info.fully_qualified_name] = idx
            self._save_to_external_constant_map(info.fully_qualified_name, idx, constant_tag)
            state.allocated_specs.append(spec)
            return EValue(make_tensor_value(idx, None, spec))
        return original(self, spec, constant_tag)

    _emitter._Emitter._tensor_spec_to_evalue = patched


def _inline_mutating_ops(ep):
    """Replaces each `auto_functionalized_v2(etch.op, ..., _all_bases=[...])` with a direct
    call of the mutating op on the buffers themselves (what torch's
    `unsafe_remove_auto_functionalized_pass` does, which fails on edge graphs here): the
    states are updated in place, with no clone and no copy back."""
    import operator

    af = torch.ops.higher_order.auto_functionalized_v2
    g = ep.graph
    with ep.graph_module._set_replace_hook(ep.graph_signature.get_replace_hook()):
        for node in [n for n in g.nodes if n.op == "call_function" and n.target is af]:
            op = node.args[0]
            kw = dict(node.kwargs)
            bases = kw.pop("_all_bases")
            for key in [k for k in kw if k.startswith("_") and k.endswith("_base_index")]:
                name = key[1 : -len("_base_index")]
                if any(k.startswith(f"_{name}_") for k in kw if k != key):
                    raise SystemExit(f"{op}: argument {name} is a view of a buffer")
                kw[name] = bases[kw.pop(key)]
            with g.inserting_before(node):
                new = g.call_function(op, (), kw)
            new.meta = dict(node.meta)
            new.meta["val"] = node.meta["val"][0]
            for user in list(node.users):
                if user.target is not operator.getitem:
                    raise SystemExit(f"unexpected use of {node}: {user}")
                i = user.args[1]
                user.replace_all_uses_with(new if i == 0 else bases[i - 1])
                g.erase_node(user)
            g.erase_node(node)
    g.lint()
    ep.graph_module.recompile()


def export(model: Qwen35Moe, max_seq_len, log=print):
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass
    from torch.export import Dim

    device = model.lm_head.weight.device
    sample = model.sample

    def args(T):
        a = (
            torch.zeros(1, T, dtype=torch.int64, device=device),
            torch.zeros(1, dtype=torch.int64, device=device),
        )
        if sample:
            a = a + (torch.zeros(4, dtype=torch.float32, device=device),)
        return a

    t0 = time.time()
    seq = Dim("seq_len", min=1, max=max_seq_len)
    prefill_shapes = ({1: seq}, None) + ((None,) if sample else ())
    with torch.no_grad():
        prefill = torch.export.export(
            model, args(2), dynamic_shapes=prefill_shapes, strict=False
        )
        decode = torch.export.export(model, args(1), strict=False)
    log(f"torch.export: {time.time() - t0:.1f} s")
    c = model.config
    consts = {
        "get_max_seq_len": max_seq_len,
        "get_max_context_len": max_seq_len,
        "get_vocab_size": c.vocab_size,
        "get_n_layers": c.num_hidden_layers,
        "use_kv_cache": True,
        "enable_dynamic_shape": True,
    }
    if c.eos_ids:
        consts["get_eos_ids"] = c.eos_ids
    t0 = time.time()
    keep = [torch.ops.aten.linear.default]
    edge = to_edge(
        {"prefill": prefill, "decode": decode},
        constant_methods=consts,
        compile_config=EdgeCompileConfig(
            _check_ir_validity=False, _core_aten_ops_exception_list=keep, preserve_ops=keep
        ),
    )
    log(f"to_edge: {time.time() - t0:.1f} s")
    for name in ("prefill", "decode"):
        _inline_mutating_ops(edge.exported_program(name))
    _patch_emitter_for_meta_constants()
    t0 = time.time()
    prog = edge.to_executorch(
        ExecutorchBackendConfig(
            external_constants=True,
            emit_mutable_buffer_names=True,
            memory_planning_pass=MemoryPlanningPass(
                alloc_graph_input=True, share_mutable_buffers=True, alloc_mutable_buffers=True
            ),
        )
    )
    log(f"to_executorch: {time.time() - t0:.1f} s")
    return prog


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (only config.json is read)")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--max-seq-len", type=int, default=4096)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--logits", action="store_true",
                    help="return the last position's logits instead of a sampled token")
    a = ap.parse_args(argv)
    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = build(config, a.max_seq_len, dtype, sample=not a.logits)
    n = sum(p.numel() for p in model.parameters())
    print(f"Qwen 3.5 MoE: {model.config.num_hidden_layers} layers, {n / 1e9:.2f} B parameters "
          f"({a.dtype}, never materialised), max_seq_len {a.max_seq_len}", file=sys.stderr)
    prog = export(model, a.max_seq_len, log=lambda s: print(s, file=sys.stderr))
    with open(a.output, "wb") as f:
        prog.write_to_file(f)
    print(f"wrote {a.output} ({os.path.getsize(a.output) / 1e6:.1f} MB); weights come from "
          f"the checkpoint: etch generate {a.output} --weights {a.model}", file=sys.stderr)


if __name__ == "__main__":
    main()
