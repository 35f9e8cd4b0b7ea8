#!/usr/bin/env python3
"""etch on the GPU against PyTorch CUDA eager (and etch on the CPU), side by side in one run.

The models are the HF ones of tools/export/export_models.py at the same sizes (hidden 64,
2 layers, 16 tokens, vocabulary 256), at batch 1 and 8, in float32 and bfloat16, with random
weights. Programs are exported here (the export venv); the GPU machine has torch and
transformers but no executorch, so it rebuilds the same architectures for eager timing.

    # here: export the programs and their inputs into a folder that travels
    /work/venv/bin/python tools/bench/gpu_vs_torch.py export --out .gpu/bench
    # on the GPU machine, from the repository root
    python3 tools/bench/gpu_vs_torch.py run --dir .gpu/bench --etch .gpu/etch --out $OUT/bench.md

For each case `run` times, per forward call (median over --iters after warm-up, each call
synchronised):
- PyTorch eager: the model on cuda in the case's dtype, ids already on the GPU;
- etch GPU: `etch lower --skip-h2d-inputs --skip-d2h-outputs` (the whole program in CUDA
  delegates, input and logits on the GPU), `etch bench` (which synchronises the outputs'
  device), with CUDA graphs on and off (ETCH_CUDA_GRAPHS);
- etch CPU: `etch bench` on the original program (all host threads).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VOCAB, SEQ = 256, 16
MODELS = ["gpt2", "llama", "qwen3", "bert"]


def build(name: str):
    """The model of `name` (a module taking input_ids, returning one tensor)."""
    import torch
    import transformers as tf

    class Logits(torch.nn.Module):
        def __init__(self, model, key):
            super().__init__()
            self.model, self.key = model, key

        def forward(self, ids):
            return getattr(self.model(input_ids=ids, use_cache=False) if self.key == "logits"
                           else self.model(input_ids=ids), self.key)

    def eager(cfg):
        cfg._attn_implementation = "eager"
        return cfg

    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    if name == "gpt2":
        m = tf.GPT2LMHeadModel(eager(tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                                   n_positions=64, use_cache=False)))
        return Logits(m, "logits")
    if name == "llama":
        return Logits(tf.LlamaForCausalLM(eager(tf.LlamaConfig(num_key_value_heads=2, use_cache=False,
                                                                **common))), "logits")
    if name == "qwen3":
        return Logits(tf.Qwen3ForCausalLM(eager(tf.Qwen3Config(num_key_value_heads=2, head_dim=16,
                                                                use_cache=False, **common))), "logits")
    if name == "bert":
        return Logits(tf.BertModel(eager(tf.BertConfig(**common))), "last_hidden_state")
    raise ValueError(name)


def cases():
    for name in MODELS:
        for batch in (1, 8):
            for dtype in ("float32", "bfloat16"):
                yield f"{name}_b{batch}_{dtype}", name, batch, dtype


def export(out: str) -> None:
    import numpy as np
    import torch
    from executorch.exir import to_edge

    os.makedirs(out, exist_ok=True)
    manifest = []
    for key, name, batch, dtype in cases():
        d = os.path.join(out, key)
        os.makedirs(d, exist_ok=True)
        model = build(name).eval().to(getattr(torch, dtype))
        ids = torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ep = torch.export.export(model, (ids,))
        with open(os.path.join(d, "model.pte"), "wb") as f:
            f.write(to_edge(ep).to_executorch().buffer)
        np.save(os.path.join(d, "ids.npy"), ids.numpy())
        manifest.append({"key": key, "model": name, "batch": batch, "dtype": dtype})
        print("exported", key, flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def torch_eager_ms(name: str, batch: int, dtype: str, ids_path: str, iters: int) -> float:
    import numpy as np
    import torch

    model = build(name).eval().to("cuda", getattr(torch, dtype))
    ids = torch.from_numpy(np.load(ids_path)).to("cuda")
    times = []
    with torch.inference_mode():
        for _ in range(20):
            model(ids)
        torch.cuda.synchronize()
        for _ in range(iters):
            t = time.perf_counter()
            model(ids)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def etch_ms(etch: str, pte: str, ids: str, iters: int, env=None) -> float:
    r = subprocess.run([etch, "bench", pte, "--input", ids, "--iterations", str(iters), "--json"],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"etch bench {pte}: {r.stderr.strip()}")
    return json.loads(r.stdout)["median_ms"]


def run(args) -> int:
    man = json.load(open(os.path.join(args.dir, "manifest.json")))
    rows = ["| model | batch | dtype | PyTorch eager (ms) | etch GPU (ms) | etch GPU, graphs (ms) "
            "| graphs / eager | etch CPU (ms) | GPU speed-up over CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    status = 0
    for e in man:
        d = os.path.join(args.dir, e["key"])
        pte, ids = os.path.join(d, "model.pte"), os.path.join(d, "ids.npy")
        low = os.path.join("/tmp", e["key"] + ".cuda.pte")
        try:
            subprocess.run([args.etch, "lower", pte, "-o", low, "--skip-h2d-inputs",
                            "--skip-d2h-outputs"], check=True, capture_output=True, text=True)
            eager = torch_eager_ms(e["model"], e["batch"], e["dtype"], ids, args.iters)
            plain = etch_ms(args.etch, low, ids, args.iters, dict(os.environ, ETCH_CUDA_GRAPHS="0"))
            graphs = etch_ms(args.etch, low, ids, args.iters, dict(os.environ, ETCH_CUDA_GRAPHS="1"))
            cpu = etch_ms(args.etch, pte, ids, max(args.iters // 5, 5))
        except Exception as ex:  # noqa: BLE001 - report and go on
            print(f"FAIL {e['key']}: {ex}", flush=True)
            status = 1
            continue
        row = (f"| {e['model']} | {e['batch']} | {e['dtype']} | {eager:.3f} | {plain:.3f} | "
               f"{graphs:.3f} | {graphs / eager:.2f} | {cpu:.3f} | {cpu / min(plain, graphs):.1f}x |")
        rows.append(row)
        print(row, flush=True)
    text = "\n".join(rows) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--out", required=True)
    rn = sub.add_parser("run")
    rn.add_argument("--dir", required=True)
    rn.add_argument("--etch", required=True)
    rn.add_argument("--iters", type=int, default=100)
    rn.add_argument("--out")
    args = ap.parse_args()
    if args.cmd == "export":
        export(args.out)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
