"""Checks that ExecuTorch's own runtime loads .pte files written by etch's writer and, for
CPU programs, runs them with outputs identical to the originals.

    cargo build --release --example rewrite
    venv/bin/python tools/check_writer.py                 # read -> write (examples/rewrite)
    venv/bin/python tools/check_writer.py --replan        # etch lower --replan-only
    venv/bin/python tools/check_writer.py --replan --models target/models

--replan checks the memory plans etch writes: ExecuTorch runs the re-planned program and
its outputs must equal those of the original.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replan", action="store_true")
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
