#!/usr/bin/env python3
"""Qwen 3.5 MoE on a GPU machine: a random checkpoint, and transformers' speed on it.

    python3 tools/bench/qwen35_bench.py make-ckpt --config config.json --out CKPT [--seed 0]
        A random bf16 checkpoint of the config, written by save_pretrained (per-expert
        keys, like the published ones), made on the GPU; plus tokenizer-free metadata.
    python3 tools/bench/qwen35_bench.py hf --ckpt CKPT --prompt-len 128 --new 32 \
        [--experts grouped_mm|batched_mm|eager] [--json OUT]
        transformers' Qwen3_5MoeForCausalLM on the same weights: prefill tok/s and greedy
        decode tok/s (CUDA-synchronised wall time), and the generated ids.
    python3 tools/bench/qwen35_bench.py teacher --ckpt CKPT --ids-json HF.json --out REF.npy
        transformers' logits for each of its greedy ids in one teacher-forced forward.
    python3 tools/bench/qwen35_bench.py compare --ref REF.npy --etch ETCH.npy
        top-1 agreement and |logit| differences of etch's teacher-forced logits
        (etch generate --force-ids ... --save-logits ETCH.npy on a --logits program).

Only what the lent GPU machines have is used (torch, transformers, safetensors).
"""
import argparse
import json
import os
import time

import torch


def make_ckpt(a):
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    with open(a.config) as f:
        d = json.load(f)
    text = d.get("text_config", d)
    cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in text.items() if k != "model_type"})
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    torch.manual_seed(a.seed)
    t0 = time.time()
    # Built in bf16 directly: 35B float32 parameters would not fit one GPU.
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(a.device):
        m = Qwen3_5MoeForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    print(f"built {sum(p.numel() for p in m.parameters()) / 1e9:.2f} B params on the GPU "
          f"in {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    m.save_pretrained(a.out, max_shard_size="5GB")
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"saved {size / 1e9:.1f} GB to {a.out} in {time.time() - t0:.1f} s", flush=True)


def _fla_version():
    """flash-linear-attention's version when importable (transformers then runs the Gated
    DeltaNet with its Triton kernels instead of the PyTorch reference), else None."""
    try:
        import fla

        return getattr(fla, "__version__", "unknown")
    except Exception:
        return None


def hf(a):
    from transformers import Qwen3_5MoeForCausalLM

    t0 = time.time()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = Qwen3_5MoeForCausalLM.from_pretrained(
        a.ckpt, dtype=dtype, device_map="cuda", experts_implementation=a.experts
    ).eval()
    torch.cuda.synchronize()
    load_s = time.time() - t0
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, m.config.vocab_size, (1, a.prompt_len), generator=g).cuda()
    with torch.no_grad():
        m.generate(prompt[:, :8], max_new_tokens=4, do_sample=False)  # warm-up
        # A full-length forward too, so that kernels compiled or tuned per shape (Triton's in
        # flash-linear-attention) are ready before the timed prefill.
        m(prompt, use_cache=True)
        torch.cuda.synchronize()
        t0 = time.time()
        m(prompt, use_cache=True)
        torch.cuda.synchronize()
        prefill_s = time.time() - t0
        t0 = time.time()
        out = m.generate(prompt, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False)
        torch.cuda.synchronize()
        total_s = time.time() - t0
    ids = out[0, a.prompt_len:].tolist()
    decode_s = max(total_s - prefill_s, 1e-9)
    r = {
        "experts": a.experts,
        "load_s": load_s,
        "prompt_len": a.prompt_len,
        "prompt_ids": prompt[0].tolist(),
        "generated_ids": ids,
        "prefill_tok_s": a.prompt_len / prefill_s,
        "decode_tok_s": (len(ids) - 1) / decode_s,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
        "flash_linear_attention": _fla_version(),
    }
    print(json.dumps({k: v for k, v in r.items() if k != "prompt_ids"}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)


def logits(a):
    """Last-position logits of a prompt (tokens .npy) as float32 .npy, in bf16 or f32."""
    import numpy as np
    from transformers import Qwen3_5MoeForCausalLM

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = Qwen3_5MoeForCausalLM.from_pretrained(
        a.ckpt, dtype=dtype, device_map="cuda", experts_implementation=a.experts
    ).eval()
    tokens = torch.from_numpy(np.load(a.tokens)).cuda()
    with torch.no_grad():
        out = m(tokens).logits[:, -1].float().cpu().numpy()
    np.save(a.out, out)
    print(f"{a.dtype} logits: argmax {int(out.argmax())}, max {out.max():.4f}", flush=True)


def teacher(a):
    """Teacher-forced reference: one forward over the prompt and transformers' greedy ids
    (from `hf --json`), saving the logits that predict each generated id as float32
    [new, V] .npy."""
    import numpy as np
    from transformers import Qwen3_5MoeForCausalLM

    with open(a.ids_json) as f:
        r = json.load(f)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = Qwen3_5MoeForCausalLM.from_pretrained(
        a.ckpt, dtype=dtype, device_map="cuda", experts_implementation=a.experts
    ).eval()
    p, g = r["prompt_ids"], r["generated_ids"]
    tokens = torch.tensor([p + g[:-1]]).cuda()
    with torch.no_grad():
        out = m(tokens).logits[0, len(p) - 1:].float().cpu().numpy()
    np.save(a.out, out)
    same = int((out.argmax(-1) == np.array(g)).sum())
    print(f"teacher-forced transformers: {out.shape[0]} positions; its one-pass argmax equals "
          f"its own greedy ids at {same}", flush=True)


def compare(a):
    """Top-1 agreement and logit differences of etch's teacher-forced run (`etch generate
    --force-ids ... --save-logits`) against `teacher`'s logits."""
    import numpy as np

    ref, got = np.load(a.ref), np.load(a.etch)
    n = min(len(ref), len(got))
    ref, got = ref[:n], got[:n]
    top_ref, top_got = ref.argmax(-1), got.argmax(-1)
    agree = int((top_ref == top_got).sum())
    d = np.abs(ref - got)
    r = {
        "positions": n,
        "top1_agreement": agree,
        "top1_agreement_pct": 100.0 * agree / max(n, 1),
        "max_abs_logit_diff": float(d.max()),
        "mean_abs_logit_diff": float(d.mean()),
        "logit_abs_max": float(np.abs(ref).max()),
        "rel_l2": float(np.linalg.norm(ref - got) / max(np.linalg.norm(ref), 1e-30)),
    }
    # How close the reference's own top two are: with random weights the logits are nearly
    # flat, and a pick whose margin is below the numeric noise is a coin toss for anyone.
    part = np.sort(np.partition(ref, -2, axis=-1)[:, -2:], axis=-1)
    margin = part[:, 1] - part[:, 0]
    r["ref_margin_median"] = float(np.median(margin))
    top5 = np.argpartition(ref, -5, axis=-1)[:, -5:]
    r["top1_in_ref_top5"] = int(sum(top_got[i] in top5[i] for i in range(n)))
    for t in (0.05, 0.1, 0.25):
        m = margin >= t
        r[f"agreement_margin_ge_{t}"] = f"{int((top_ref == top_got)[m].sum())}/{int(m.sum())}"
    print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-ckpt")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p = sub.add_parser("hf")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--experts", default="grouped_mm")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--json")
    p = sub.add_parser("logits")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--experts", default="grouped_mm")
    p.add_argument("--out", required=True)
    p = sub.add_parser("teacher")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--ids-json", required=True)
    p.add_argument("--experts", default="grouped_mm")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--out", required=True)
    p = sub.add_parser("compare")
    p.add_argument("--ref", required=True)
    p.add_argument("--etch", required=True)
    a = ap.parse_args()
    cmds = {"make-ckpt": make_ckpt, "hf": hf, "logits": logits, "teacher": teacher,
            "compare": compare}
    cmds[a.cmd](a)


if __name__ == "__main__":
    main()
