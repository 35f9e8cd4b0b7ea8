"""Checks that ExecuTorch's own runtime loads .pte files written by etch's writer and, for
CPU programs, runs them with outputs identical to the originals.

    cargo build --release --example rewrite
    venv/bin/python tools/check_writer.py                 # read -> write (examples/rewrite)
    venv/bin/python tools/check_writer.py --replan        # etch lower --replan-only
    venv/bin/python tools/check_writer.py --replan --models target/models

--replan checks the memory plans etch writes: ExecuTorch runs the re-planned program and
its outputs must equal those of the original.
--lower checks device programs etch writes (`etch lower --ops portable`): ExecuTorch's
runtime loads them and reads every method's inputs and outputs like the original's; the
pip wheel has no CUDA allocator, so loading a method must then stop exactly where it
stops for the stock exporter's device programs ("Failed to allocate ... on device 1:0").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from executorch.runtime import Runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
REWRITE = os.path.join(ROOT, "target", "release", "examples", "rewrite")
ETCH = os.path.join(ROOT, "target", "release", "etch")


def load_inputs(case, base):
    out = []
    for p, d in zip(case["inputs"], case["input_dtypes"]):
        a = np.load(os.path.join(base, p))
        if d == "bfloat16":
            out.append(torch.from_numpy(a).to(torch.bfloat16))
        elif d in ("int", "float", "bool"):
            out.append(a.item())
        else:
            out.append(torch.from_numpy(a))
    return out


def run(path, fx, ptd, base):
    rt = Runtime.get()
    prog = rt.load_program(path, data_path=ptd) if ptd else rt.load_program(path)
    results = []
    methods = {}
    for case in fx["cases"]:
        m = methods.setdefault(case["method"], prog.load_method(case["method"]))
        results.append(m.execute(load_inputs(case, base)))
    return results


def check_device_program(src, dst, fx):
    rt = Runtime.get()
    a, b = rt.load_program(src), rt.load_program(dst)
    if a.method_names != b.method_names:
        return False, f"methods {b.method_names} != {a.method_names}"
    for name in a.method_names:
        ma, mb = a.metadata(name), b.metadata(name)
        for k in ("inputs", "outputs"):
            n = getattr(ma, f"num_{k}")()
            if getattr(mb, f"num_{k}")() != n:
                return False, f"{name}: {k} differ"
            for i in range(n):
                get = f"{k[:-1]}_tensor_meta"
                try:
                    ta, tb = getattr(ma, get)(i), getattr(mb, get)(i)
                except Exception:  # noqa: BLE001  (not a tensor)
                    continue
                if (list(ta.sizes()), ta.dtype()) != (list(tb.sizes()), tb.dtype()):
                    return False, f"{name} {k} {i}: {tb} != {ta}"
        try:
            b.load_method(name)
            return False, f"{name}: loaded without a CUDA allocator?"
        except Exception as e:  # noqa: BLE001
            if "on device 1:0" not in str(e):
                return False, f"{name}: {e}"
    return True, "loads; method metadata as the original's; stops at the missing CUDA allocator"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replan", action="store_true")
    ap.add_argument("--lower", action="store_true")
    ap.add_argument("--models", default=FIX, help="a directory with a manifest.json")
    args = ap.parse_args()
    base = args.models
    with open(os.path.join(base, "manifest.json")) as f:
        manifest = json.load(f)
    tmp = tempfile.mkdtemp(prefix="etch-writer-")
    failures = 0
    for fx in manifest:
        src = os.path.join(base, fx["pte"])
        dst = os.path.join(tmp, fx["name"] + ".pte")
        if args.lower:
            subprocess.run([ETCH, "lower", src, "-o", dst, "--ops", "portable"], check=True, capture_output=True)
            ok, msg = check_device_program(src, dst, fx)
            print(f"{'ok  ' if ok else 'FAIL'} {fx['name']}: {msg}")
            failures += 0 if ok else 1
            continue
        if args.replan:
            subprocess.run([ETCH, "lower", src, "-o", dst, "--replan-only"], check=True, capture_output=True)
        else:
            subprocess.run([REWRITE, src, dst], check=True)
        ptd = os.path.join(base, fx["ptd"]) if fx.get("ptd") else None
        try:
            a = run(src, fx, ptd, base)
            b = run(dst, fx, ptd, base)
            same = all(
                all(
                    (torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y)
                    for x, y in zip(ra, rb)
                )
                for ra, rb in zip(a, b)
            )
        except Exception as e:  # noqa: BLE001
            same = False
            print(f"FAIL {fx['name']}: {e}")
        print(f"{'ok  ' if same else 'FAIL'} {fx['name']}: {len(fx['cases'])} case(s), outputs {'identical' if same else 'differ'}")
        failures += 0 if same else 1
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
