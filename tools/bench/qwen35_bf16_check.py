#!/usr/bin/env python3
"""How far bf16 runs drift from float32 on Qwen 3.5 MoE at the 35B-A3B layer sizes, and
why greedy ids of two correct bf16 implementations part early on random weights.

A 4-layer model with the 35B-A3B dimensions (hidden 2048, head_dim 256, Gated DeltaNet
16/32 heads of 128) but 16 experts and a 4096-token vocabulary, random weights, a prompt of
N tokens, on the CPU:
- transformers in float32 (the reference), transformers in bf16, and our export model in
  bf16 (tools/export/qwen3_5_moe.py with the etch_ops.py references, which round where
  etch's kernels round);
- per layer, the mean |error| of each bf16 run against float32;
- the share of (token, layer) routings whose top-8 expert set differs from float32's.

    /work/venv/bin/python tools/bench/qwen35_bf16_check.py [N] [--experts E] [--layers L]
        [--vocab V]   (defaults: 64 tokens, 16 experts, 4 layers, 4096 ids)
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
import qwen3_5_moe as q  # noqa: E402


def config(experts=16, layers=4, vocab=4096):
    from transformers import Qwen3_5MoeTextConfig

    c = Qwen3_5MoeTextConfig()  # the 35B-A3B sizes
    d = c.to_dict()
    # Fewer than 4 layers: one of them full attention (transformers' cache needs one).
    types = c.layer_types[:layers] if layers >= 4 else c.layer_types[:layers - 1] + ["full_attention"]
    d.update(num_hidden_layers=layers, layer_types=types, num_experts=experts,
             vocab_size=vocab,
             rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                              "partial_rotary_factor": 0.25})
    cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in d.items() if k != "model_type"})
    cfg._experts_implementation = "eager"
    return cfg


def main():
    from transformers import Qwen3_5MoeForCausalLM

    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=64)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    a = ap.parse_args()
    n = a.n
    cfg = config(a.experts, a.layers, a.vocab)
    L = a.layers
    torch.manual_seed(0)
    hf32 = Qwen3_5MoeForCausalLM(cfg).eval()
    sd = hf32.state_dict()
    # The bf16 models are built in bf16 (no float32 copy: the 256-expert runs fit 24 GB).
    torch.set_default_dtype(torch.bfloat16)
    hf16 = Qwen3_5MoeForCausalLM(cfg).eval()
    ours = q.build(cfg.to_dict(), max(n, 16), torch.bfloat16, sample=False, device="cpu")
    torch.set_default_dtype(torch.float32)
    hf16.load_state_dict(sd)
    _, unexpected = ours.load_state_dict({k: v.to(torch.bfloat16) for k, v in sd.items()},
                                         strict=False)
    assert not unexpected, unexpected
    prompt = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    outs, ins = {}, {}
    models = {"hf32": hf32, "hf16": hf16, "ours": ours}
    for tag, m in models.items():
        for i, layer in enumerate(m.model.layers):
            layer.register_forward_hook(
                lambda mod, a, o, k=f"{tag}{i}": outs.__setitem__(k, o[0] if isinstance(o, tuple) else o))
            layer.mlp.register_forward_pre_hook(
                lambda mod, a, k=f"{tag}{i}": ins.__setitem__(k, a[0].reshape(-1, a[0].shape[-1])))
    with torch.no_grad():
        ref = hf32(prompt).logits[0, -1]
        l16 = hf16(prompt).logits[0, -1].float()
        lo = ours(prompt, torch.tensor([0]))[0].float()
    print(f"{n} tokens; mean |error| against float32 per layer output (all positions):")
    for i in range(L):
        t = outs[f"hf32{i}"].float()
        e = {k: (outs[f"{k}{i}"].float() - t).abs().mean().item() for k in ("hf16", "ours")}
        print(f"  layer {i} ({cfg.layer_types[i]}): transformers bf16 {e['hf16']:.5f}, "
              f"ours bf16 {e['ours']:.5f} (|x| {t.abs().mean():.4f})")

    def top8(x, w):
        p = torch.softmax(torch.nn.functional.linear(x, w).float(), -1)
        return torch.topk(p, 8).indices.sort(-1).values

    flips = {"hf16": 0, "ours": 0}
    total = 0
    with torch.no_grad():
        for i in range(L):
            w = hf32.model.layers[i].mlp.gate.weight
            r = top8(ins[f"hf32{i}"], w)
            total += r.shape[0]
            for k in flips:
                flips[k] += (top8(ins[f"{k}{i}"], w.to(torch.bfloat16)) != r).any(-1).sum().item()
    print(f"routings whose top-8 set differs from float32's: transformers bf16 "
          f"{flips['hf16']}/{total}, ours bf16 {flips['ours']}/{total}")
    print(json.dumps({
        "last_logits_mean_abs_err": {"hf16": (l16 - ref).abs().mean().item(),
                                     "ours": (lo - ref).abs().mean().item()},
        "argmax": {"f32": int(ref.argmax()), "hf16": int(l16.argmax()), "ours": int(lo.argmax())},
    }))


if __name__ == "__main__":
    main()
