"""Checks that ExecuTorch's own runtime loads .pte files written by etch's writer and, for
CPU programs, runs them with outputs identical to the originals.

    cargo build --release --example rewrite
    venv/bin/python tools/check_writer.py
"""

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


def load_inputs(case):
    out = []
    for p, d in zip(case["inputs"], case["input_dtypes"]):
        a = np.load(os.path.join(FIX, p))
        if d == "bfloat16":
            out.append(torch.from_numpy(a).to(torch.bfloat16))
        elif d in ("int", "float", "bool"):
            out.append(a.item())
        else:
            out.append(torch.from_numpy(a))
    return out


def run(path, fx, ptd):
    rt = Runtime.get()
    prog = rt.load_program(path, data_path=ptd) if ptd else rt.load_program(path)
    results = []
    methods = {}
    for case in fx["cases"]:
        m = methods.setdefault(case["method"], prog.load_method(case["method"]))
        results.append(m.execute(load_inputs(case)))
    return results


def main():
    with open(os.path.join(FIX, "manifest.json")) as f:
        manifest = json.load(f)
    tmp = tempfile.mkdtemp(prefix="etch-writer-")
    failures = 0
    for fx in manifest:
        src = os.path.join(FIX, fx["pte"])
        dst = os.path.join(tmp, fx["name"] + ".pte")
        subprocess.run([REWRITE, src, dst], check=True)
        ptd = os.path.join(FIX, fx["ptd"]) if fx.get("ptd") else None
        try:
            a = run(src, fx, ptd)
            b = run(dst, fx, ptd)
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
