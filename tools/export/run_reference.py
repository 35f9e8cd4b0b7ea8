#!/usr/bin/env python3
"""Run a .pte with ExecuTorch's own runtime (executorch.runtime) as a reference.

Single run:
  run_reference.py PTE --method forward --inputs a.npy b.npy --out-dir DIR \
      [--input-dtypes float32 bfloat16 ...] [--ptd model.ptd]
  Writes DIR/out0.npy, DIR/out1.npy, ... (bf16 outputs are saved as float32;
  python scalar outputs as 0-d arrays).

Check all fixtures of a manifest (cases run in order on one loaded program):
  run_reference.py --check tests/fixtures/manifest.json [--out-dir DIR]
  Compares ExecuTorch outputs with the saved PyTorch eager expectations using
  each case's rtol/atol (integer/bool outputs compared exactly). Exit status 1
  on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from executorch.runtime import Runtime

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
}
SCALAR_TYPES = {"int": int, "float": float, "bool": bool}


def load_input(path: str, dtype: Optional[str]) -> Any:
    arr = np.load(path)
    if dtype in SCALAR_TYPES:
        return SCALAR_TYPES[dtype](arr.item())
    t = torch.from_numpy(np.ascontiguousarray(arr))
    if dtype is not None:
        t = t.to(TORCH_DTYPES[dtype])
    return t


def to_numpy(v: Any) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)
        return t.numpy()
    if isinstance(v, bool):
        return np.array(v, dtype=np.bool_)
    if isinstance(v, int):
        return np.array(v, dtype=np.int64)
    if isinstance(v, float):
        return np.array(v, dtype=np.float64)
    raise TypeError(f"unsupported output type {type(v)}")


def load_program(pte: str, ptd: Optional[str] = None):
    # executorch.runtime.Runtime.load_program(path, data_path=...) accepts the
    # external .ptd file holding the weights (external_constants=True exports).
    return Runtime.get().load_program(pte, data_path=ptd)


def run_once(program, method: str, inputs: Sequence[Any]) -> List[Any]:
    return list(program.load_method(method).execute(list(inputs)))


def value_dtype(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return {d: n for n, d in TORCH_DTYPES.items()}[v.dtype]
    return type(v).__name__


def compare(got: Any, exp: np.ndarray, dtype: str, rtol: float, atol: float) -> Optional[str]:
    g = to_numpy(got)
    if value_dtype(got) != dtype:
        return f"dtype {value_dtype(got)} != expected {dtype}"
    if g.shape != exp.shape:
        return f"shape {g.shape} != expected {exp.shape}"
    if dtype in ("float32", "float16", "bfloat16", "float64", "float"):
        gf, ef = g.astype(np.float64), exp.astype(np.float64)
        if not np.allclose(gf, ef, rtol=rtol, atol=atol):
            diff = np.abs(gf - ef)
            return f"max abs diff {diff.max():.3e} (rtol={rtol}, atol={atol})"
        return None
    if not np.array_equal(g, exp):
        return f"values differ ({int((g != exp).sum())} mismatching elements)"
    return None


def check_manifest(manifest_path: str, out_dir: Optional[str]) -> int:
    root = os.path.dirname(os.path.abspath(manifest_path))
    with open(manifest_path) as f:
        fixtures = json.load(f)
    failures = 0
    for fx in fixtures:
        ptd = os.path.join(root, fx["ptd"]) if fx.get("ptd") else None
        program = load_program(os.path.join(root, fx["pte"]), ptd)
        counters: dict = {}
        for case in fx["cases"]:
            m = case["method"]
            idx = counters.get(m, 0)
            counters[m] = idx + 1
            inputs = [
                load_input(os.path.join(root, p), d)
                for p, d in zip(case["inputs"], case["input_dtypes"])
            ]
            try:
                outs = run_once(program, m, inputs)
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {fx['name']} {m}#{idx}: execute raised {e!r}")
                failures += 1
                continue
            problems = []
            if len(outs) != len(case["expected"]):
                problems.append(f"{len(outs)} outputs != expected {len(case['expected'])}")
            worst = 0.0
            for k, (o, p, d) in enumerate(zip(outs, case["expected"], case["output_dtypes"])):
                exp = np.load(os.path.join(root, p))
                err = compare(o, exp, d, case["rtol"], case["atol"])
                if err:
                    problems.append(f"out{k}: {err}")
                if d in ("float32", "float16", "bfloat16", "float64"):
                    worst = max(worst, float(np.abs(to_numpy(o).astype(np.float64) - exp.astype(np.float64)).max(initial=0.0)))
                if out_dir:
                    d_out = os.path.join(out_dir, fx["name"])
                    os.makedirs(d_out, exist_ok=True)
                    np.save(os.path.join(d_out, f"{m}_{idx}_out{k}.npy"), to_numpy(o))
            status = "FAIL" if problems else "ok  "
            failures += bool(problems)
            print(f"{status} {fx['name']:14s} {m}#{idx}  max|float diff|={worst:.3e}  {'; '.join(problems)}")
    print(f"{failures} failing case(s)")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pte", nargs="?", help=".pte file")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--inputs", nargs="*", default=[], help="input .npy files")
    ap.add_argument("--input-dtypes", nargs="*", default=None,
                    help="real dtype per input (e.g. bfloat16 for float32-stored bf16, int for scalars)")
    ap.add_argument("--ptd", default=None, help="external data (.ptd) file")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--check", metavar="MANIFEST", default=None,
                    help="run every fixture/case of MANIFEST in order and compare")
    args = ap.parse_args()

    if args.check:
        return check_manifest(args.check, args.out_dir)
    if not args.pte or not args.out_dir:
        ap.error("PTE and --out-dir are required (or use --check MANIFEST)")
    dtypes = args.input_dtypes or [None] * len(args.inputs)
    if len(dtypes) != len(args.inputs):
        ap.error("--input-dtypes must match --inputs in length")
    program = load_program(args.pte, args.ptd)
    outs = run_once(program, args.method, [load_input(p, d) for p, d in zip(args.inputs, dtypes)])
    os.makedirs(args.out_dir, exist_ok=True)
    for k, o in enumerate(outs):
        path = os.path.join(args.out_dir, f"out{k}.npy")
        np.save(path, to_numpy(o))
        print(f"{path}: {value_dtype(o)} {tuple(to_numpy(o).shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
