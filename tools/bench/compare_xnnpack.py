"""Side-by-side CPU benchmark on XNNPACK-delegated programs (issue #14): per model and
thread count, one run measures

  A  etch on the XNNPACK-delegated .pte  (`etch bench`, etch's own kernels)
  B  etch on the portable .pte           (`etch bench`, the same model exported with to_edge)
  C  ExecuTorch's pip runtime on the XNNPACK-delegated .pte (`executorch.runtime`, XNNPACK
     linked into the wheel)

with the same inputs, interleaved (A, B, C, A, B, C, ...): each round runs every engine for
`--iterations` timed executions after a warm-up execution; a round's figure is its median and
the table shows the median over `--rounds` rounds. Outputs are checked against
ExecuTorch+XNNPACK's before timing. Writes the table into BENCHMARKS.md between
`<!-- xnnpack-compare:begin -->` and `<!-- xnnpack-compare:end -->`.

    CARGO_TARGET_DIR=... /work/venv/bin/python tools/bench/compare_xnnpack.py \\
        [--iterations 10] [--rounds 5] [--threads 1,2] [--models resnet18_128,...] [--no-write]
        [--etch BIN] [--baseline-etch OLD_BIN]   # OLD_BIN: timed in the same rounds (before/after)

Threads: etch's pool size is ETCH_NUM_THREADS; ExecuTorch's is its global threadpool, which
the pip wheel resizes with `executorch.extension.pybindings.portable_lib.
_unsafe_reset_threadpool(n)` (XNNPACK takes the pool when a method is loaded, so the method
is loaded again after each resize).

Models (exported into target/bench-models/xnnpack/, not committed): torchvision resnet18,
mobilenet_v2, mobilenet_v3_large and efficientnet_b0 (random weights, seeded, non-trivial
batch-norm statistics) at 1x3x128x128 and 1x3x224x224; HF Llama and Qwen3 causal LMs
(hidden 512, 4 layers, 8 heads, 4 KV heads, MLP 1536, vocabulary 2048, one 128-token
prompt, logits out; random init) in fp32 and in 8da4w (torchao's
Int8DynamicActivationIntxWeightConfig, 4-bit weights in groups of 128, as export_llm's
`quantization.qmode=8da4w`).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "export"))
from compare_executorch import ROOT, BENCH_DIR, write_table  # noqa: E402

OUT_DIR = os.path.join(BENCH_DIR, "xnnpack")
# Largest |difference| / max |reference| accepted between engines: fp32 programs, and 8da4w
# ones, where an activation that lands on the other side of an int8 rounding boundary
# (after ulp-level differences upstream) moves the logits by a quantization step.
TOL = 1e-4
TOL_QUANT = 5e-2


def default_etch():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    return os.path.join(target, "release", "etch")


# --------------------------------------------------------------------------- models


def torchvision_model(name):
    import torchvision.models as tvm
    from export_xnnpack_fixtures import perturb_batch_norm

    model = getattr(tvm, name)(weights=None).eval()
    perturb_batch_norm(model)
    return model


def hf_decoder(kind, quant):
    import transformers as tf
    from export_models import HFLogits
    from export_xnnpack_fixtures import quantize_8da

    common = dict(vocab_size=2048, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, intermediate_size=1536, max_position_embeddings=256,
                  use_cache=False)
    if kind == "llama":
        cfg, cls = tf.LlamaConfig(**common), tf.LlamaForCausalLM
    else:
        cfg, cls = tf.Qwen3Config(head_dim=64, **common), tf.Qwen3ForCausalLM
    cfg._attn_implementation = "eager"
    model = HFLogits(cls(cfg), "logits", use_cache=False).eval()
    return quantize_8da(model, 4, 128) if quant else model


def static_qs8(model, size):
    from export_xnnpack_fixtures import quantize_static

    return quantize_static(model, (torch.randn(1, 3, size, size),))


def models():
    """name -> (make model, make inputs)."""
    out = {}
    for size in (128, 224):
        for n in ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"]:
            out[f"{n}_{size}"] = (lambda n=n: torchvision_model(n),
                                  lambda size=size: (torch.randn(1, 3, size, size),))
    # Statically quantized (XNNPACKQuantizer's PT2E flow, calibrated on the seeded input).
    for n in ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"]:
        out[f"{n}_224_qs8"] = (lambda n=n: static_qs8(torchvision_model(n), 224),
                               lambda: (torch.randn(1, 3, 224, 224),))
    for kind in ["llama", "qwen3"]:
        for quant in [False, True]:
            out[f"{kind}_h512_l4{'_8da4w' if quant else ''}"] = (
                lambda kind=kind, quant=quant: hf_decoder(kind, quant),
                lambda: (torch.randint(0, 2048, (1, 128)),),
            )
    return out


def export(name, make, make_inputs):
    """Writes xnnpack.pte, portable.pte and in<k>.npy under OUT_DIR/name (once)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    d = os.path.join(OUT_DIR, name)
    xnn, portable = os.path.join(d, "xnnpack.pte"), os.path.join(d, "portable.pte")
    torch.manual_seed(0)
    model = make()
    inputs = make_inputs()
    paths = []
    os.makedirs(d, exist_ok=True)
    for k, x in enumerate(inputs):
        paths.append(os.path.join(d, f"in{k}.npy"))
        if not os.path.exists(paths[-1]):
            np.save(paths[-1], x.numpy())
    inputs = tuple(torch.from_numpy(np.load(p)) for p in paths)
    for pte, lower in [(xnn, True), (portable, False)]:
        failed = pte + ".failed"
        if os.path.exists(pte) or os.path.exists(failed):
            continue
        t = time.perf_counter()
        ep = torch.export.export(model, inputs)
        try:
            if lower:
                prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
            else:
                prog = to_edge(ep).to_executorch()
        except Exception as e:  # noqa: BLE001
            if lower:
                raise
            # 8da4w: torchao's quantize/dequantize ops have no portable out variants.
            with open(failed, "w") as f:
                f.write(f"{type(e).__name__}: {e}\n")
            print(f"{name}: no portable program: {str(e)[:200]}", file=sys.stderr)
            continue
        with open(pte, "wb") as f:
            f.write(prog.buffer)
        print(f"{name}: exported {os.path.basename(pte)} ({len(prog.buffer) / 2**20:.1f} MiB, "
              f"{time.perf_counter() - t:.0f} s)", file=sys.stderr)
    return xnn, portable, paths


# --------------------------------------------------------------------------- engines


def etch_env(threads):
    env = dict(os.environ)
    env["ETCH_NUM_THREADS"] = str(threads)
    return env


def etch_bench(etch, pte, inputs, threads, n):
    cmd = [etch, "bench", pte, "--iterations", str(n), "--json"]
    for p in inputs:
        cmd += ["--input", p]
    r = subprocess.run(cmd, capture_output=True, text=True, env=etch_env(threads))
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-500:])
    return json.loads(r.stdout)["median_ms"]


def etch_outputs(etch, pte, inputs, threads):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [etch, "run", pte, "--output-dir", tmp]
        for p in inputs:
            cmd += ["--input", p]
        r = subprocess.run(cmd, capture_output=True, text=True, env=etch_env(threads))
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-500:])
        outs, k = [], 0
        while os.path.exists(os.path.join(tmp, f"output_{k}.npy")):
            outs.append(np.load(os.path.join(tmp, f"output_{k}.npy")))
            k += 1
        return outs


class ExecuTorch:
    """ExecuTorch's pip runtime with `threads` pool threads, one method loaded."""

    def __init__(self, pte, inputs, threads):
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        # Resize first: XNNPACK's runtime keeps the pool it was created with.
        portable_lib._unsafe_reset_threadpool(threads)
        assert portable_lib._threadpool_get_thread_count() == threads
        self.args = [torch.from_numpy(np.load(p)) for p in inputs]
        self.method = Runtime.get().load_program(pte).load_method("forward")

    def outputs(self):
        return [o.detach().clone().numpy() for o in self.method.execute(self.args)]

    def bench(self, n):
        self.method.execute(self.args)  # warm-up
        times = []
        for _ in range(n):
            t = time.perf_counter()
            self.method.execute(self.args)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3


def rel_diff(got, ref):
    if len(got) != len(ref):
        return float("inf")
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return float("inf")
        worst = max(worst, float(np.abs(g.astype(np.float64) - r).max()) / max(float(np.abs(r).max()), 1e-12))
    return worst


def wait_for_load(limit, timeout=600):
    """Waits (polling every 30 s, up to `timeout`) for the 1-minute load average to fall
    below `limit`; returns it."""
    t0 = time.time()
    while os.getloadavg()[0] >= limit and time.time() - t0 < timeout:
        time.sleep(30)
    return os.getloadavg()[0]


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--etch", default=default_etch())
    ap.add_argument("--baseline-etch", default="",
                    help="another etch binary (e.g. before a change) timed on the XNNPACK .pte in "
                         "the same interleaved rounds; its figures go to stderr and --json only")
    ap.add_argument("--baseline-on", choices=["xnnpack", "portable", "both"], default="xnnpack",
                    help="which .pte the baseline binary runs (default: the XNNPACK one)")
    ap.add_argument("--max-load", type=float, default=1.2,
                    help="first wait (up to 10 minutes) for the 1-minute load average to fall below this")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", default="", help="also write the raw figures (and loads) to this file")
    ap.add_argument("--render", default="", help="only render the table from a --json file")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            j = json.load(f)
        return render(j["rows"], j["loads"], args)
    threads = sorted({int(t) for t in args.threads.split(",")})
    all_models = models()
    names = [n for n in args.models.split(",") if n] or list(all_models)

    exported = {n: export(n, *all_models[n]) for n in names}
    if args.export_only:
        return

    rows, loads = [], [wait_for_load(args.max_load)]
    for name in names:
        xnn, portable, inputs = exported[name]
        for t in threads:
            loads.append(os.getloadavg()[0])
            et = ExecuTorch(xnn, inputs, t)
            ref = et.outputs()
            row = {"model": name, "threads": t, "load_before": loads[-1]}
            engines = {}
            for key, pte in [("etch_xnnpack", xnn), ("etch_portable", portable)]:
                if not os.path.exists(pte):
                    row[f"{key}_error"] = open(pte + ".failed").read().strip()[:200]
                    continue
                try:
                    row[f"{key}_diff"] = rel_diff(etch_outputs(args.etch, pte, inputs, t), ref)
                    engines[key] = lambda pte=pte: etch_bench(args.etch, pte, inputs, t, args.iterations)
                except Exception as e:  # noqa: BLE001
                    print(f"{name} {key}: {e}", file=sys.stderr)
                    row[f"{key}_error"] = str(e)[:200]
            if args.baseline_etch and "etch_xnnpack" in engines and args.baseline_on != "portable":
                row["etch_baseline_diff"] = rel_diff(etch_outputs(args.baseline_etch, xnn, inputs, t), ref)
                engines["etch_baseline"] = lambda: etch_bench(args.baseline_etch, xnn, inputs, t, args.iterations)
            if args.baseline_etch and "etch_portable" in engines and args.baseline_on != "xnnpack":
                row["etch_baseline_portable_diff"] = rel_diff(
                    etch_outputs(args.baseline_etch, portable, inputs, t), ref)
                engines["etch_baseline_portable"] = lambda: etch_bench(
                    args.baseline_etch, portable, inputs, t, args.iterations)
            engines["executorch_xnnpack"] = lambda: et.bench(args.iterations)
            rounds = {k: [] for k in engines}
            for _ in range(args.rounds):
                for k, f in engines.items():
                    rounds[k].append(f())
            for k, v in rounds.items():
                row[k] = statistics.median(v)
                row[f"{k}_rounds"] = v
            del et
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"loads": loads, "rows": rows}, f, indent=1)
    render(rows, loads, args)


def render(rows, loads, args):
    """Prints the table and, unless --no-write, writes it into BENCHMARKS.md."""
    fmt = lambda v: f"{v:.2f}" if v is not None else "n/a"  # noqa: E731
    # The rounds the figures are medians of (a rendered --json file keeps them per row).
    counts = [len(v) for r in rows for k, v in r.items() if k.endswith("_rounds")]
    rounds = max(counts) if counts else args.rounds
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; executorch 1.5.1 (pip runtime, "
        f"XNNPACK) vs etch; median over {rounds} interleaved rounds of the median of "
        f"{args.iterations} executions after a warm-up; ms. Ratio = etch on the XNNPACK .pte / "
        f"ExecuTorch+XNNPACK (below 1: etch faster). Diff = max |out - ExecuTorch+XNNPACK| / "
        f"max |ExecuTorch+XNNPACK|. 1-minute load average at the start and before each model: "
        f"{min(loads):.2f}-{max(loads):.2f}. `tools/bench/compare_xnnpack.py`, {time.strftime('%Y-%m-%d')}.",
        "",
        "| model | threads | etch XNNPACK .pte | etch portable .pte | ExecuTorch+XNNPACK | ratio | diff XNNPACK .pte | diff portable .pte |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        tol = TOL_QUANT if "8da" in r["model"] else TOL
        # A statically quantized portable program rounds fp32 products, not XNNPACK's
        # integer sums: quantization steps apart.
        tol_portable = TOL_QUANT if "qs8" in r["model"] else tol
        diff = lambda v, tol=tol: "n/a" if v is None else f"{v:.1e}" + ("" if v <= tol else " (over tolerance)")  # noqa: E731
        a, b, c = r.get("etch_xnnpack"), r.get("etch_portable"), r.get("executorch_xnnpack")
        ratio = f"{a / c:.2f}" if a and c else "n/a"
        lines.append(
            f"| {r['model']} | {r['threads']} | {fmt(a)} | {fmt(b)} | {fmt(c)} | {ratio} | "
            f"{diff(r.get('etch_xnnpack_diff'))} | {diff(r.get('etch_portable_diff'), tol_portable)} |"
        )
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_table("xnnpack-compare", table)


if __name__ == "__main__":
    main()
