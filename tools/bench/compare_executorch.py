"""Side-by-side benchmark: ExecuTorch's own runtime (`executorch.runtime` from the pip
wheel) and etch on the same .pte files, the same inputs, the same machine, in one run.
Writes the table into BENCHMARKS.md between the `<!-- compare:begin -->` and
`<!-- compare:end -->` markers.

    venv/bin/python tools/bench/compare_executorch.py [--iterations 20] [--models all|fixtures|nets]

Models: every CPU fixture (first case's inputs), plus conv nets from torchvision and small
HF decoders (hidden 512, 4 layers, sequence 128) exported into target/bench-models/.
XNNPACK-delegated programs (etch vs ExecuTorch+XNNPACK): tools/bench/compare_xnnpack.py,
which uses `write_table` from here.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ETCH = os.path.join(ROOT, "target", "release", "etch")
BENCH_DIR = os.path.join(ROOT, "target", "bench-models")


def fixture_models():
    fdir = os.path.join(ROOT, "tests", "fixtures")
    with open(os.path.join(fdir, "manifest.json")) as f:
        manifest = json.load(f)
    for fx in manifest:
        if fx.get("ptd"):
            continue
        case = fx["cases"][0]
        if case["method"] != "forward" or any(d in ("int", "float", "bool", "bfloat16") for d in case["input_dtypes"]):
            continue
        yield fx["name"], os.path.join(fdir, fx["pte"]), [os.path.join(fdir, p) for p in case["inputs"]]


def export(name, model, args):
    from executorch.exir import to_edge

    d = os.path.join(BENCH_DIR, name)
    os.makedirs(d, exist_ok=True)
    pte = os.path.join(d, "model.pte")
    inputs = []
    for i, a in enumerate(args):
        p = os.path.join(d, f"in{i}.npy")
        np.save(p, a.numpy())
        inputs.append(p)
    if not os.path.exists(pte):
        ep = torch.export.export(model.eval(), args)
        with open(pte, "wb") as f:
            f.write(to_edge(ep).to_executorch().buffer)
    return name, pte, inputs


def net_models():
    import torchvision.models as tv

    torch.manual_seed(0)
    img = (torch.randn(1, 3, 128, 128),)
    for n in ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"]:
        yield export(n, getattr(tv, n)(weights=None), img)
    try:
        import transformers as tf

        tokens = (torch.randint(0, 1000, (1, 128)),)
        for n, cfg_cls, model_cls in [
            ("llama_h512_l4", tf.LlamaConfig, tf.LlamaForCausalLM),
            ("qwen2_h512_l4", tf.Qwen2Config, tf.Qwen2ForCausalLM),
        ]:
            cfg = cfg_cls(
                hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                num_key_value_heads=8, vocab_size=1000, max_position_embeddings=256, use_cache=False,
            )
            m = model_cls(cfg).eval()

            class Logits(torch.nn.Module):
                def __init__(self, inner):
                    super().__init__()
                    self.inner = inner

                def forward(self, ids):
                    return self.inner(input_ids=ids, use_cache=False).logits

            yield export(n, Logits(m), tokens)
    except Exception as e:  # noqa: BLE001
        print(f"skipping HF decoders: {e}", file=sys.stderr)


def bench_executorch(pte, inputs, n):
    from executorch.runtime import Runtime

    args = [torch.from_numpy(np.load(p)) for p in inputs]
    t0 = time.perf_counter()
    prog = Runtime.get().load_program(pte)
    method = prog.load_method("forward")
    load = time.perf_counter() - t0
    times = []
    for _ in range(n + 1):
        t = time.perf_counter()
        method.execute(args)
        times.append(time.perf_counter() - t)
    return load * 1e3, times[0] * 1e3, statistics.median(times[1:]) * 1e3


def bench_etch(pte, inputs, n):
    cmd = [ETCH, "bench", pte, "--iterations", str(n), "--json"]
    for p in inputs:
        cmd += ["--input", p]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    j = json.loads(r.stdout)
    return j["load_ms"], j["first_run_ms"], j["median_ms"], j.get("peak_rss_bytes"), j.get("overhead_bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--models", default="all", choices=["all", "fixtures", "nets"])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    torch.set_num_threads(os.cpu_count() or 1)

    models = []
    if args.models in ("all", "fixtures"):
        models += list(fixture_models())
    if args.models in ("all", "nets"):
        models += list(net_models())

    rows = []
    for name, pte, inputs in models:
        try:
            et = bench_executorch(pte, inputs, args.iterations)
        except Exception as e:  # noqa: BLE001
            et = None
            print(f"{name}: executorch failed: {e}", file=sys.stderr)
        try:
            ours = bench_etch(pte, inputs, args.iterations)
        except Exception as e:  # noqa: BLE001
            ours = None
            print(f"{name}: etch failed: {e}", file=sys.stderr)
        rows.append((name, et, ours))
        print(name, et, ours, file=sys.stderr)

    fmt = lambda v: f"{v:.3f}" if v is not None else "n/a"
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; executorch 1.5.1 runtime (pip) vs etch, "
        f"{args.iterations} iterations after a first run; times in ms; ratio = etch / ExecuTorch median "
        f"(below 1 means etch is faster). Generated by `tools/bench/compare_executorch.py` on "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| model | ExecuTorch median | etch median | ratio | ExecuTorch load | etch load | etch first run | etch peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, et, ours in rows:
        ratio = ours[2] / et[2] if et and ours and et[2] > 0 else None
        rss = f"{ours[3] / 2**20:.1f} MiB" if ours and ours[3] else "n/a"
        lines.append(
            f"| {name} | {fmt(et[2] if et else None)} | {fmt(ours[2] if ours else None)} | "
            f"{fmt(ratio)} | {fmt(et[0] if et else None)} | {fmt(ours[0] if ours else None)} | "
            f"{fmt(ours[1] if ours else None)} | {rss} |"
        )
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_table("compare", table)


def write_table(marker, table):
    """Replaces BENCHMARKS.md's text between `<!-- MARKER:begin -->` and `<!-- MARKER:end -->`
    with `table` (appends both markers and the table when they are missing)."""
    path = os.path.join(ROOT, "BENCHMARKS.md")
    text = open(path).read() if os.path.exists(path) else ""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    if begin in text and end in text:
        text = text[: text.index(begin) + len(begin)] + "\n" + table + "\n" + text[text.index(end):]
    else:
        text += f"\n{begin}\n{table}\n{end}\n"
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
