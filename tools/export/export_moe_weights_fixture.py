#!/usr/bin/env python3
"""The Hugging Face checkpoint fixture (tests/fixtures/moe_weights): a tiny mixture-of-experts
language model whose parameters carry the names of transformers' Qwen 3.5 MoE text model
(`model.embed_tokens.weight`, `model.layers.0.mlp.gate.weight`, stacked experts
`model.layers.0.mlp.experts.gate_up_proj` [E, 2I, H] and `...experts.down_proj` [E, H, I],
`model.norm.weight`, `lm_head.weight`), exported with external constants, and the ways real
checkpoints store those weights:
    model.pte                 the program (no weights inside); input tokens.npy
    fused/                    the state_dict as the model holds it (stacked experts)
    per_expert/               experts saved one by one, as `save_pretrained` writes them
                              (`...experts.E.{gate,up,down}_proj.weight`; checked below
                              against transformers' own Qwen3_5MoeForCausalLM)
    multimodal/               text weights under `model.language_model.`, per expert, plus
                              vision (`model.visual.*`) and `mtp.*` tensors to ignore (one of
                              them complex64, a dtype etch does not load)
    sharded/                  per expert, split over two shards (an expert's gate and up in
                              different files) with model.safetensors.index.json
    tied/                     no `lm_head.weight`; config.json ties it to the embedding
    bf16/, bf16_per_expert/   every tensor bfloat16 (fused / per expert)
    missing_up/               per expert without `model.layers.0.mlp.experts.2.up_proj.weight`
    bad_expert_shape/         per expert, expert 1's down_proj transposed
    expected.npy              PyTorch's logits with the weights
    expected_tied.npy         ... with lm_head = the embedding
    expected_bf16.npy         ... with every weight rounded to bfloat16 (computed in float32)

    /work/venv/bin/python tools/export/export_moe_weights_fixture.py
"""
import json
import os
import shutil
import tempfile

import numpy as np
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "moe_weights")
V, H, I, E, T = 16, 8, 4, 4, 5


class Experts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(E, 2 * I, H) * 0.5)
        self.down_proj = torch.nn.Parameter(torch.randn(E, H, I) * 0.5)

    def forward(self, x, probs):
        # Every expert runs (dense), so each expert's weights reach the output.
        gu = torch.matmul(x.unsqueeze(0), self.gate_up_proj.transpose(1, 2))  # [E, T, 2I]
        gate, up = gu[..., :I], gu[..., I:]
        y = torch.matmul(torch.nn.functional.silu(gate) * up, self.down_proj.transpose(1, 2))
        return (y * probs.t().unsqueeze(-1)).sum(0)  # [T, H]


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(H, E, bias=False)
        self.experts = Experts()

    def forward(self, x):
        return self.experts(x, torch.softmax(self.gate(x), dim=-1))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(H))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class TextModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList([Layer()])
        self.norm = Norm()


class CausalLm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = TextModel()
        self.lm_head = torch.nn.Linear(H, V, bias=False)

    def forward(self, tokens):
        h = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            h = h + layer.mlp(h)
        return self.lm_head(self.model.norm(h))


def per_expert(sd, prefix="model."):
    """The state_dict as `save_pretrained` writes it: experts one by one, text keys under
    `prefix` instead of `model.`."""
    out = {}
    for k, v in sd.items():
        name = prefix + k[len("model."):] if k.startswith("model.") else k
        if k.endswith("experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(E):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :I].clone()
                out[f"{base}{e}.up_proj.weight"] = v[e, I:].clone()
        elif k.endswith("experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(E):
                out[f"{base}{e}.down_proj.weight"] = v[e].clone()
        else:
            out[name] = v
    return out


def check_save_pretrained_layout():
    """transformers 5.17's save_pretrained of Qwen3_5MoeForCausalLM writes per-expert keys,
    gate rows first in gate_up_proj: what `per_expert` imitates."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    from safetensors import safe_open

    cfg = Qwen3_5MoeTextConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, moe_intermediate_size=4,
        shared_expert_intermediate_size=4, num_experts=3, num_experts_per_tok=2,
        layer_types=["full_attention"], linear_num_key_heads=1, linear_num_value_heads=1,
        linear_key_head_dim=4, linear_value_head_dim=4)
    m = Qwen3_5MoeForCausalLM(cfg)
    d = tempfile.mkdtemp()
    try:
        m.save_pretrained(d)
        f = safe_open(os.path.join(d, "model.safetensors"), "pt")
        gu = m.state_dict()["model.layers.0.mlp.experts.gate_up_proj"]
        p = "model.layers.0.mlp.experts.1."
        assert "model.layers.0.mlp.experts.gate_up_proj" not in f.keys()
        assert torch.equal(f.get_tensor(p + "gate_proj.weight"), gu[1, :4])
        assert torch.equal(f.get_tensor(p + "up_proj.weight"), gu[1, 4:])
    finally:
        shutil.rmtree(d)


def save(sd, name, file="model.safetensors", config=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(d, file))
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)


def save_sharded(sd):
    d = os.path.join(OUT, "sharded")
    os.makedirs(d, exist_ok=True)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    # Alternate keys in sorted order: each expert's gate and up land in different shards.
    shards = [{}, {}]
    weight_map = {}
    for i, k in enumerate(sorted(sd)):
        shards[i % 2][k] = sd[k].contiguous()
        weight_map[k] = files[i % 2]
    for f, s in zip(files, shards):
        save_file(s, os.path.join(d, f))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


def main():
    check_save_pretrained_layout()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    torch.manual_seed(0)
    m = CausalLm().eval()
    tokens = torch.tensor([3, 0, 15, 7, 7])
    with torch.no_grad():
        ep = torch.export.export(m, (tokens,))
        prog = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
        with open(os.path.join(OUT, "model.pte"), "wb") as f:
            f.write(prog.buffer)
        sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
        np.save(os.path.join(OUT, "tokens.npy"), tokens.numpy())
        np.save(os.path.join(OUT, "expected.npy"), m(tokens).numpy())

        save(sd, "fused")
        pe = per_expert(sd)
        save(pe, "per_expert")
        mm = per_expert(sd, "model.language_model.")
        mm["model.visual.blocks.0.attn.qkv.weight"] = torch.randn(6, 4)
        mm["mtp.fc.weight"] = torch.randn(2, 2, dtype=torch.complex64)
        save(mm, "multimodal", config={"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                                       "tie_word_embeddings": False,
                                       "text_config": {"tie_word_embeddings": False}})
        save_sharded(pe)
        save({k: v for k, v in sd.items() if k != "lm_head.weight"}, "tied",
             config={"tie_word_embeddings": True})
        save({k: v.bfloat16() for k, v in sd.items()}, "bf16")
        save({k: v.bfloat16() for k, v in pe.items()}, "bf16_per_expert")
        save({k: v for k, v in pe.items() if k != "model.layers.0.mlp.experts.2.up_proj.weight"},
             "missing_up")
        bad = dict(pe)
        bad["model.layers.0.mlp.experts.1.down_proj.weight"] = \
            pe["model.layers.0.mlp.experts.1.down_proj.weight"].t()
        save(bad, "bad_expert_shape")

        m.lm_head.weight.copy_(m.model.embed_tokens.weight)
        np.save(os.path.join(OUT, "expected_tied.npy"), m(tokens).numpy())
        m.load_state_dict({k: v.bfloat16().float() for k, v in sd.items()})
        np.save(os.path.join(OUT, "expected_bf16.npy"), m(tokens).numpy())
    print("wrote", OUT, sorted(sd))


if __name__ == "__main__":
    main()
