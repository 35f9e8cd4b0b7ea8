#!/usr/bin/env python3
"""Export a tiny random Llama with ExecuTorch's stock LLM exporter (`export_llm`) and
record ExecuTorch's runtime on a prefill and a few decode steps.

1. Writes params.json (dim 64, 2 layers, 4 heads / 2 KV heads, vocab 256) and a random
   checkpoint (seeded) for the llama example model (executorch/examples/models/llama).
2. Runs `python -m executorch.extension.llm.export.export_llm` with the default recipe
   (`model.use_kv_cache=True model.use_sdpa_with_kv_cache=True`, no backend, fp32), so
   the program calls `llama::update_cache` and `llama::custom_sdpa`.
3. Loads the .pte once in ExecuTorch's runtime and runs a prefill of 5 tokens then 4
   decode steps (the argmax token fed back), saving every call's inputs and logits as a
   fixture in the manifest format of tests/fixtures (cases run in order on one method).

With --quantize-kv the recipe adds `model.quantize_kv_cache=True` (int8 KV caches with
per-token scales and zero points: `quantized_decomposed::choose_qparams_per_token_asymmetric`
/ `quantize_per_token`, `llama::update_cache`, `llama::custom_quantized_sdpa`); ExecuTorch's
quantized kernels are then loaded into the runtime (export_llama_ops_fixtures.py's
load_quantized_kernels).

Usage:  /work/venv/bin/python tools/export/export_tiny_llama.py [--quantize-kv] [--out DIR]
(default tests/fixtures/llama_ops/tiny_llama, or tiny_llama_qkv with --quantize-kv, with a
manifest entry appended to tests/fixtures/llama_ops/manifest.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures", "llama_ops")

PARAMS = {
    "dim": 64,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "vocab_size": 256,
    "multiple_of": 32,
    "norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "use_scaled_rope": False,
}
MAX_SEQ = 32


def make_checkpoint(path: str) -> None:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    args = ModelArgs(max_seq_len=MAX_SEQ, max_context_len=MAX_SEQ, **PARAMS)
    model = construct_transformer(args)
    sd = {}
    for k, v in model.state_dict().items():
        if "cache" in k or "mask" in k or "freqs" in k:
            continue
        # Default inits give near-uniform logits; scale up so argmax decoding is decisive.
        sd[k] = (torch.randn_like(v) * (0.2 if v.dim() > 1 else 0.05) + (1.0 if "norm" in k else 0.0))
    torch.save(sd, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quantize-kv", action="store_true", help="model.quantize_kv_cache=True")
    ap.add_argument("--no-manifest", action="store_true")
    ap.add_argument("--embedding-quantize", default=None,
                    help="quantization.embedding_quantize (e.g. 8,0 or 4,32)")
    ap.add_argument("--dtype", default="fp32", help="model.dtype_override (fp32, bf16, fp16)")
    ap.add_argument("--no-sdpa", action="store_true",
                    help="model.use_sdpa_with_kv_cache=False: the plain KV-cache recipe (ATen attention, "
                         "the caches as mutable buffers updated with index_put)")
    ap.add_argument("--xnnpack-8da4w", action="store_true",
                    help="backend.xnnpack.enabled=True quantization.qmode=8da4w (group size 32): "
                         "the linears in XNNPACK delegates, 8-bit dynamic activations, 4-bit weights")
    a = ap.parse_args()
    name = "tiny_llama_qkv" if a.quantize_kv else "tiny_llama"
    if a.embedding_quantize:
        name = "tiny_llama_qemb" + a.embedding_quantize.split(",")[0]
    if a.xnnpack_8da4w:
        name = "tiny_llama_xnn8da4w"
    if a.no_sdpa:
        name = "tiny_llama_kv"
    a.out = a.out or os.path.join(FIXTURES, name)
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        params = os.path.join(tmp, "params.json")
        with open(params, "w") as f:
            json.dump(PARAMS, f)
        ckpt = os.path.join(tmp, "ckpt.pth")
        make_checkpoint(ckpt)
        cmd = [
            sys.executable, "-m", "executorch.extension.llm.export.export_llm",
            "base.model_class=llama3",
            f"base.checkpoint={ckpt}",
            f"base.params={params}",
            "model.use_kv_cache=True",
            f"model.use_sdpa_with_kv_cache={not a.no_sdpa}",
            *(["model.quantize_kv_cache=True"] if a.quantize_kv else []),
            *([f"quantization.embedding_quantize='{a.embedding_quantize}'"] if a.embedding_quantize else []),
            *(["backend.xnnpack.enabled=True", "quantization.qmode=8da4w", "quantization.group_size=32"]
              if a.xnnpack_8da4w else []),
            f"model.dtype_override={a.dtype}",
            f"export.max_seq_length={MAX_SEQ}",
            f"export.max_context_length={MAX_SEQ}",
            f"export.output_dir={a.out}",
            f"export.output_name={os.path.join(a.out, 'model.pte')}",
        ]
        print(" ".join(cmd))
        subprocess.run(cmd, check=True, cwd=tmp)

    pte = os.path.join(a.out, "model.pte")
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    from executorch.runtime import Runtime

    if a.quantize_kv or a.embedding_quantize:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from export_llama_ops_fixtures import load_quantized_kernels

        load_quantized_kernels()

    method = Runtime.get().load_program(pte).load_method("forward")
    meta = method.metadata
    print(meta)
    torch.manual_seed(1)
    prompt = torch.randint(0, PARAMS["vocab_size"], (1, 5), dtype=torch.int64)
    calls = [(prompt, 0)]
    cases = []
    pos = 0
    tokens = prompt
    for ci in range(5):
        inputs = [tokens, torch.tensor([pos], dtype=torch.int64)]
        (logits,) = method.execute(inputs)
        rel = os.path.relpath(a.out, FIXTURES)
        ins = []
        for k, t in enumerate(inputs):
            p = f"{rel}/forward_{ci}_in{k}.npy"
            np.save(os.path.join(FIXTURES, p), t.numpy())
            ins.append(p)
        p = f"{rel}/forward_{ci}_out0.npy"
        np.save(os.path.join(FIXTURES, p), logits.float().numpy())
        cases.append(dict(method="forward", inputs=ins, input_dtypes=["int64", "int64"],
                          expected=[p], output_dtypes=[str(logits.dtype).replace("torch.", "")], rtol=1e-4, atol=1e-4))
        nxt = int(logits[0, -1].argmax()) if logits.dim() == 3 else int(logits[0].argmax())
        print(f"call {ci}: tokens {tokens.tolist()} pos {pos} -> logits {tuple(logits.shape)}, next {nxt}")
        pos += tokens.shape[1]
        tokens = torch.tensor([[nxt]], dtype=torch.int64)
    if not a.no_manifest:
        mpath = os.path.join(FIXTURES, "manifest.json")
        manifest = json.load(open(mpath))
        manifest = [m for m in manifest if m["name"] != name]
        manifest.append(dict(
            name=name,
            pte=f"{os.path.relpath(a.out, FIXTURES)}/model.pte",
            comment=("export_llm (llama3 example model, random weights: dim 64, 2 layers, 4/2 heads, "
                     "vocab 256, max_seq_len 32; use_kv_cache"
                     + ("" if a.no_sdpa else " + use_sdpa_with_kv_cache")
                     + (" + quantize_kv_cache" if a.quantize_kv else "")
                     + (" + XNNPACK 8da4w, group 32" if a.xnnpack_8da4w else "") + "); a 5-token "
                     "prefill then 4 greedy decode steps on one method; expected = ExecuTorch runtime"),
            cases=cases,
        ))
        with open(mpath, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    print("pte bytes:", os.path.getsize(pte))


if __name__ == "__main__":
    main()
