#!/usr/bin/env python3
"""Checks that our export model (tools/export/qwen3_5_moe.py, with the `etch::` reference
ops of tools/export/etch_ops.py) equals transformers' `Qwen3_5MoeForCausalLM`: on a small
random config, the logits of a prompt and of several decode steps agree within 1e-4 in
float32, and greedy generation gives the same tokens.

    /work/venv/bin/python tools/export/test_qwen3_5_moe.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_5_moe as q  # noqa: E402


def tiny_config(**over):
    from transformers import Qwen3_5MoeTextConfig

    kw = dict(
        vocab_size=97, hidden_size=40, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=12, linear_value_head_dim=10, linear_conv_kernel_dim=4,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=14,
        shared_expert_intermediate_size=18, rms_norm_eps=1e-6, initializer_range=0.1,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25},
    )
    kw.update(over)
    return Qwen3_5MoeTextConfig(**kw)


def random_hf_model(cfg, seed=0):
    """A Qwen3_5MoeForCausalLM with every weight random (norm weights too, so nothing is
    trivially 0 or 1)."""
    from transformers import Qwen3_5MoeForCausalLM

    torch.manual_seed(seed)
    # The eager experts path (a python loop over the hit experts): the default grouped_mm
    # path needs 16-byte aligned strides, which odd test sizes do not have.
    cfg._experts_implementation = "eager"
    m = Qwen3_5MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(p + 0.2 * torch.randn_like(p))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.5, 4)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            else:
                p.copy_(torch.randn_like(p) * 0.2)
    return m


def ours_from_hf(hf, cfg_dict, max_seq_len):
    m = q.build(cfg_dict, max_seq_len, torch.float32, sample=False, device="cpu")
    sd = hf.state_dict()
    missing, unexpected = m.load_state_dict(sd, strict=False)
    buffers = {n for n, _ in m.named_buffers()}
    assert not unexpected, unexpected
    assert set(missing) <= buffers, set(missing) - buffers
    return m


def main():
    cfg = tiny_config()
    hf = random_hf_model(cfg)
    ours = ours_from_hf(hf, cfg.to_dict(), max_seq_len=64)
    torch.manual_seed(1)
    prompt = torch.randint(0, cfg.vocab_size, (1, 11))
    worst = 0.0
    with torch.no_grad():
        out = hf(prompt, use_cache=True)
        past = out.past_key_values
        ref = out.logits[:, -1]
        got = ours(prompt, torch.tensor([0]))
        worst = max(worst, (ref - got).abs().max().item())
        pos = prompt.shape[1]
        tok = ref.argmax(-1, keepdim=True)
        for _ in range(6):
            out = hf(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            ref = out.logits[:, -1]
            got = ours(tok, torch.tensor([pos]))
            worst = max(worst, (ref - got).abs().max().item())
            pos += 1
            tok = ref.argmax(-1, keepdim=True)
        # A second prompt chunk after decoding (prefill at a non-zero position).
        chunk = torch.randint(0, cfg.vocab_size, (1, 5))
        out = hf(chunk, past_key_values=past, use_cache=True)
        got = ours(chunk, torch.tensor([pos]))
        worst = max(worst, (out.logits[:, -1] - got).abs().max().item())
        # A fresh sequence resets the states (input_pos 0).
        ref = hf(prompt[:, :4]).logits[:, -1]
        got = ours(prompt[:, :4], torch.tensor([0]))
        worst = max(worst, (ref - got).abs().max().item())
    scale = ref.abs().max().item()
    print(f"max |logits diff| = {worst:.3g} (logits up to {scale:.3g})")
    assert worst < 1e-4, worst
    print("ok: our export model equals transformers' Qwen3_5MoeForCausalLM")


if __name__ == "__main__":
    main()
