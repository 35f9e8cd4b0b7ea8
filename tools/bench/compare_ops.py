"""Per-operator profile of one program, side by side: ExecuTorch+XNNPACK against etch (issue #14).

Both engines write an ETDump of the same program with the same input, one after the other:

  ExecuTorch  the pip runtime (`portable_lib._load_for_executorch(..., enable_etdump=True)`);
              the wheel's XNNPACK delegate logs one event per XNNPACK operator ("Convolution
              (NHWC, F32) IGEMM #3", "Fully Connected (NC, QDU8, F32, QB4W) GEMM #1", ...)
  etch        `etch bench --etdump` (one event per delegate node: "XNNConv2d #3", ...)

and `executorch.devtools.Inspector` reads both. Each event's figure is its median over the
runs; the script prints the totals by operator class, then both event lists in execution
order. The two lists do not align one to one (XNNPACK fuses a convert into its quantized
fully-connected operators and logs clamps and reshapes; etch logs the delegate's nodes as the
program has them), so the classes are the comparison; the lists show where a class's time goes.

    /work/venv/bin/python tools/bench/compare_ops.py target/bench-models/xnnpack/resnet18_224 \\
        [--threads 1] [--runs 20] [--etch target/release/etch] [--events 40]

MODEL_DIR holds xnnpack.pte and in0.npy (`compare_xnnpack.py` writes them).
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch

CLASSES = [
    # (class, pattern over ExecuTorch+XNNPACK's and etch's event names)
    ("convolution / fully connected", r"Convolution \(NHWC, F32\) IGEMM|Fully Connected|XNNConv2d|"
     r"XNNFullyConnected|XNNConvolution|Convolution \(NHWC, F32\) GEMM"),
    ("depthwise convolution", r"DWConv|XNNDepthwiseConv2d"),
    ("batch matrix multiply", r"Batch Matrix Multiply|XNNBatchMatrixMultiply"),
    ("pooling / mean", r"Pooling|Mean|XNNGlobalAvgPooling|XNNMaxPooling|XNNAvgPooling"),
    ("softmax", r"Softmax|XNNSoftmax"),
    ("dynamic quantization", r"Convert|XNNConvert"),
    ("transpose / copy / slice / concat", r"Transpose|Copy \(|Slice|Concatenat|Reshape|XNNStatic|"
     r"XNNConcatenate|XNNCopy"),
    ("elementwise", r"Add|Multiply|Subtract|Divide|Square|Sigmoid|HardSwish|Hardswish|Clamp|"
     r"Negate|Sine|Cosine|Root|XNNAdd|XNNMultiply|XNNSub|XNNDiv|XNNSquare|XNNSigmoid|XNNClamp|"
     r"XNNNegate|XNNSin|XNNCos|XNNReciprocal|XNNTanh|XNNSoftplus|XNNGelu|XNNExp|XNNAbs|XNNFloor|"
     r"XNNCeiling|XNNElu|XNNLeakyReLU|XNNMaximum|XNNMinimum|XNNSquareRoot"),
    ("portable operators (outside the delegates)", r"^native_call_|^aten::|^dim_order_ops::|"
     r"^quantized_decomposed::|^llama::|^etch::"),
]
SKIP = {"Method::init", "Program::load_method", "DELEGATE_CALL", "OPERATOR_CALL", "Method::execute"}


def executorch_etdump(pte, inputs, threads, runs, path):
    from executorch.extension.pybindings import portable_lib as pl

    pl._unsafe_reset_threadpool(threads)
    m = pl._load_for_executorch(pte, enable_etdump=True, debug_buffer_size=0)
    for _ in range(runs):
        m.forward(inputs)
    m.write_etdump_result_to_file(path)


def events(path):
    """[(name, median ms)] in execution order, and the execute time (ms)."""
    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ins = Inspector(etdump_path=path)
    out, execute = [], None
    for blk in ins.event_blocks:
        for ev in blk.events:
            if ev.perf_data is None:
                continue
            t = float(np.median(ev.perf_data.raw))
            if ev.name == "Method::execute":
                execute = t
            out.append((ev.name, t))
    return out, execute


def classify(name):
    for cls, pat in CLASSES:
        if re.search(pat, name):
            return cls
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--etch", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "target", "release", "etch"))
    ap.add_argument("--events", type=int, default=40, help="events of each list to print (0: all)")
    a = ap.parse_args()

    pte = os.path.join(a.model_dir, "xnnpack.pte")
    paths = sorted(p for p in os.listdir(a.model_dir) if re.fullmatch(r"in\d+\.npy", p))
    arrays = [np.load(os.path.join(a.model_dir, p)) for p in paths]
    inputs = tuple(torch.from_numpy(x) for x in arrays)
    with tempfile.TemporaryDirectory() as tmp:
        et_path, etch_path = os.path.join(tmp, "et.etdp"), os.path.join(tmp, "etch.etdp")
        executorch_etdump(pte, inputs, a.threads, a.runs, et_path)
        cmd = [a.etch, "bench", pte, "--iterations", str(a.runs), "--etdump", etch_path]
        for p in paths:
            cmd += ["--input", os.path.join(a.model_dir, p)]
        env = dict(os.environ, ETCH_NUM_THREADS=str(a.threads))
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        lists = {"ExecuTorch+XNNPACK": events(et_path), "etch": events(etch_path)}

    print(f"{os.path.basename(os.path.normpath(a.model_dir))}, {a.threads} thread(s), medians of "
          f"{a.runs} runs (ms)\n")
    totals = {}
    for engine, (evs, _) in lists.items():
        t = collections.defaultdict(float)
        for name, ms in evs:
            if name not in SKIP:
                t[classify(name)] += ms
        totals[engine] = t
    names = list(lists)
    print(f"| class | {' | '.join(names)} | etch / ExecuTorch |")
    print("| --- | " + " | ".join("---" for _ in names) + " | --- |")
    for cls in [c for c, _ in CLASSES] + ["other"]:
        v = [totals[n].get(cls, 0.0) for n in names]
        if max(v) < 1e-3:
            continue
        ratio = f"{v[1] / v[0]:.2f}" if v[0] > 1e-3 else "-"
        print(f"| {cls} | " + " | ".join(f"{x:.3f}" for x in v) + f" | {ratio} |")
    ex = [lists[n][1] for n in names]
    print("| **Method::execute** | " + " | ".join(f"**{x:.3f}**" if x else "-" for x in ex) + " | "
          + (f"**{ex[1] / ex[0]:.2f}**" if ex[0] and ex[1] else "-") + " |")
    for engine, (evs, _) in lists.items():
        shown = [(n, t) for n, t in evs if n not in SKIP]
        if a.events:
            shown = shown[: a.events]
        print(f"\n{engine}, events in execution order (µs):")
        for n, t in shown:
            print(f"  {t * 1e3:9.1f}  {n}")


if __name__ == "__main__":
    sys.exit(main())
