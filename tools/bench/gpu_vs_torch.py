#!/usr/bin/env python3
"""etch on the GPU against PyTorch CUDA eager (and etch on the CPU), side by side in one run.

Models, at batch 1 and 8, in float32 and bfloat16, with random weights:
- the HF ones of tools/export/export_models.py at the same sizes (gpt2, llama, qwen3, bert:
  hidden 64, 2 layers, 16 tokens, vocabulary 256);
- `decoder_2048x8`: a Llama decoder of hidden 2048, 8 layers, 16 heads, FFN 5632,
  vocabulary 32000, 16 tokens;
- torchvision resnet18, mobilenet_v2, efficientnet_b0 and vit_b_16 at 224x224.
Programs are exported here (the export venv) with external constants, so only the small
programs travel: on the GPU machine (torch, transformers and torchvision, no executorch)
each model is rebuilt, its parameters and buffers are saved as safetensors, which etch
loads by name (`--weights`), and the same model is timed in PyTorch eager.

    # here: export the programs and their inputs into a folder that travels
    /work/venv/bin/python tools/bench/gpu_vs_torch.py export --out .gpu/bench
    # on the GPU machine, from the repository root
    python3 tools/bench/gpu_vs_torch.py run --dir .gpu/bench --etch .gpu/etch --out $OUT/bench.md

For each case `run` times, per forward call (median over --iters after warm-up, each call
synchronised):
- PyTorch eager: the model on cuda in the case's dtype, ids already on the GPU;
- etch GPU: `etch lower --skip-h2d-inputs --skip-d2h-outputs` (the whole program in CUDA
  delegates, input and logits on the GPU), `etch bench` (which synchronises the outputs'
  device), with CUDA graphs off (`--no-cuda-graphs`) and on;
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
HF = ["gpt2", "llama", "qwen3", "bert", "decoder_2048x8"]
VISION = ["resnet18", "mobilenet_v2", "efficientnet_b0", "vit_b_16"]
MODELS = HF + VISION


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
    if name == "decoder_2048x8":
        cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=2048, num_hidden_layers=8,
                             num_attention_heads=16, num_key_value_heads=16, intermediate_size=5632,
                             max_position_embeddings=64, use_cache=False)
        return Logits(tf.LlamaForCausalLM(eager(cfg)), "logits")
    if name in VISION:
        import torchvision.models as tvm
        return getattr(tvm, name)(weights=None)
    raise ValueError(name)


def example(name: str, batch: int):
    """The model's input: token ids, or an image batch (float32; etch casts for bf16)."""
    import torch
    g = torch.Generator().manual_seed(1)
    if name in VISION:
        return torch.randn(batch, 3, 224, 224, generator=g)
    return torch.randint(0, 32000 if name == "decoder_2048x8" else VOCAB, (batch, SEQ), generator=g)


def weights(model) -> dict:
    """Every parameter and buffer by name (what the program's external constants are called),
    as separate contiguous tensors (safetensors stores no shared storage)."""
    named = dict(model.state_dict())  # tied weights keep every name (gpt2's lm_head)
    named.update(dict(model.named_buffers()))  # and non-persistent buffers (rotary inv_freq)
    return {k: v.detach().clone().contiguous() for k, v in named.items()}


def cases():
    for name in MODELS:
        for batch in (1, 8):
            for dtype in ("float32", "bfloat16"):
                yield f"{name}_b{batch}_{dtype}", name, batch, dtype


def export(out: str, only=None) -> None:
    import numpy as np
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge

    os.makedirs(out, exist_ok=True)
    manifest = []
    for key, name, batch, dtype in cases():
        if only and name not in only:
            continue
        d = os.path.join(out, key)
        os.makedirs(d, exist_ok=True)
        model = build(name).eval().to(getattr(torch, dtype))
        x = example(name, batch)
        xin = x.to(getattr(torch, dtype)) if x.is_floating_point() else x
        with torch.no_grad():
            ep = torch.export.export(model, (xin,))
        prog = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
        with open(os.path.join(d, "model.pte"), "wb") as f:
            f.write(prog.buffer)
        inp = os.path.join(out, f"input_{name if name not in VISION else 'image'}_b{batch}.npy")
        if not os.path.exists(inp):
            np.save(inp, x.numpy())
        manifest.append({"key": key, "model": name, "batch": batch, "dtype": dtype,
                         "input": os.path.basename(inp)})
        print("exported", key, flush=True)
        del model, ep, prog
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def torch_eager_ms(model, x, iters: int) -> float:
    import torch

    times = []
    with torch.inference_mode():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        for _ in range(iters):
            t = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def etch_ms(etch: str, pte: str, inp: str, w: str, iters: int, extra=()) -> float:
    r = subprocess.run([etch, "bench", pte, "--input", inp, "--weights", w, "--iterations", str(iters),
                        "--json", *extra], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"etch bench {pte}: {r.stderr.strip()}")
    return json.loads(r.stdout)["median_ms"]


def run_case(args, e) -> str:
    import numpy as np
    import torch
    from safetensors.torch import save_file

    d = os.path.join(args.dir, e["key"])
    pte, inp = os.path.join(d, "model.pte"), os.path.join(args.dir, e["input"])
    low = os.path.join("/tmp", e["key"] + ".cuda.pte")
    w = os.path.join("/tmp", e["key"] + ".safetensors")
    dt = getattr(torch, e["dtype"])
    model = build(e["model"]).eval().to(dt)
    save_file(weights(model), w)
    subprocess.run([args.etch, "lower", pte, "-o", low, "--skip-h2d-inputs", "--skip-d2h-outputs"],
                   check=True, capture_output=True, text=True)
    x = torch.from_numpy(np.load(inp)).to("cuda")
    x = x.to(dt) if x.is_floating_point() else x
    eager = torch_eager_ms(model.to("cuda"), x, args.iters)
    del model
    torch.cuda.empty_cache()
    plain = etch_ms(args.etch, low, inp, w, args.iters, ["--no-cuda-graphs"])
    graphs = etch_ms(args.etch, low, inp, w, args.iters)
    cpu_iters = 3 if e["model"] in ("decoder_2048x8", "vit_b_16") or e["batch"] > 1 else 10
    cpu = etch_ms(args.etch, pte, inp, w, cpu_iters) if not args.no_cpu else float("nan")
    os.remove(w)
    return (f"| {e['model']} | {e['batch']} | {e['dtype']} | {eager:.3f} | {plain:.3f} | "
            f"{graphs:.3f} | {plain / eager:.2f} | {graphs / eager:.2f} | {cpu:.3f} | "
            f"{cpu / min(plain, graphs):.1f}x |")


def run(args) -> int:
    man = json.load(open(os.path.join(args.dir, "manifest.json")))
    rows = ["| model | batch | dtype | PyTorch eager (ms) | etch GPU (ms) | etch GPU, CUDA graphs (ms) "
            "| etch / eager | graphs / eager | etch CPU (ms) | GPU speed-up over CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    status = 0
    for e in man:
        if args.only and e["model"] not in args.only.split(","):
            continue
        try:
            row = run_case(args, e)
        except Exception as ex:  # noqa: BLE001 - report and go on
            print(f"FAIL {e['key']}: {ex}", flush=True)
            status = 1
            continue
        rows.append(row)
        print(row, flush=True)
        if args.out:  # written as it goes, so a cut-off run keeps its rows
            with open(args.out, "w") as f:
                f.write("\n".join(rows) + "\n")
    print("\n".join(rows))
    return status


def profile(args) -> int:
    """On the GPU machine: `etch bench --profile` (per-operator times) of the named cases."""
    import torch
    from safetensors.torch import save_file

    man = {e["key"]: e for e in json.load(open(os.path.join(args.dir, "manifest.json")))}
    for key in args.keys.split(","):
        e = man[key]
        pte, inp = os.path.join(args.dir, key, "model.pte"), os.path.join(args.dir, e["input"])
        low, w = f"/tmp/{key}.cuda.pte", f"/tmp/{key}.safetensors"
        save_file(weights(build(e["model"]).eval().to(getattr(torch, e["dtype"]))), w)
        subprocess.run([args.etch, "lower", pte, "-o", low, "--skip-h2d-inputs", "--skip-d2h-outputs"],
                       check=True, capture_output=True, text=True)
        r = subprocess.run([args.etch, "bench", low, "--input", inp, "--weights", w, "--iterations", "10",
                            "--profile"], capture_output=True, text=True)
        print(f"== {key}\n{r.stdout}{r.stderr}", flush=True)
        os.remove(w)
    return 0


def check(args) -> int:
    """Here, on the CPU: etch with the saved weights against PyTorch eager, per case."""
    import tempfile

    import numpy as np
    import torch
    from safetensors.torch import save_file

    man = json.load(open(os.path.join(args.dir, "manifest.json")))
    status = 0
    for e in man:
        if args.only and e["model"] not in args.only.split(","):
            continue
        dt = getattr(torch, e["dtype"])
        model = build(e["model"]).eval().to(dt)
        inp = os.path.join(args.dir, e["input"])
        x = torch.from_numpy(np.load(inp))
        with torch.no_grad():
            want = model(x.to(dt) if x.is_floating_point() else x).float().numpy()
        with tempfile.TemporaryDirectory() as tmp:
            w = os.path.join(tmp, "w.safetensors")
            save_file(weights(model), w)
            r = subprocess.run([args.etch, "run", os.path.join(args.dir, e["key"], "model.pte"), "--input", inp,
                                "--weights", w, "--output-dir", tmp], capture_output=True, text=True)
            if r.returncode:
                print(f"FAIL {e['key']}: {r.stderr.strip()}")
                status = 1
                continue
            got = np.load(os.path.join(tmp, "output_0.npy"))
        tol = 1e-3 if e["dtype"] == "float32" else 5e-2
        err = float(np.max(np.abs(got - want) / (np.abs(want) + 1)))
        ok = got.shape == want.shape and err <= tol
        status |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {e['key']}: max rel diff {err:.2e} (tolerance {tol})", flush=True)
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--out", required=True)
    ex.add_argument("--only", help="comma-separated model names")
    rn = sub.add_parser("run")
    rn.add_argument("--dir", required=True)
    rn.add_argument("--etch", required=True)
    rn.add_argument("--iters", type=int, default=100)
    rn.add_argument("--out")
    rn.add_argument("--only", help="comma-separated model names")
    rn.add_argument("--no-cpu", action="store_true", help="skip etch on the CPU")
    pf = sub.add_parser("profile")
    pf.add_argument("--dir", required=True)
    pf.add_argument("--etch", required=True)
    pf.add_argument("--keys", required=True, help="comma-separated case keys")
    ck = sub.add_parser("check")
    ck.add_argument("--dir", required=True)
    ck.add_argument("--etch", required=True)
    ck.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args()
    if args.cmd == "check":
        return check(args)
    if args.cmd == "profile":
        return profile(args)
    if args.cmd == "export":
        export(args.out, args.only.split(",") if args.only else None)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
