#!/usr/bin/env python3
"""Runs every model of a manifest written by `export_models.py` through `etch run` and
compares the outputs with the PyTorch eager outputs (floats within rtol/atol from the
manifest, default rtol 1e-3 / atol 1e-4; integers and bools exactly). Prints one line per
model: `ok` with the largest absolute difference, or `FAIL` with the error or the diff.

    /work/venv/bin/python tools/export/check_models.py [--models target/models] [--only a,b]
        [--lower [ARGS]] [--replan]

--lower: first lowers each model with `etch lower --device cuda:0 --ops portable` (plus
ARGS, e.g. "--per-op" or "--skip-h2d-inputs --skip-d2h-outputs") and runs the lowered
program on the simulated device (`etch run --simulate-device cuda`). Each line then also
gives, per method, the delegates and the kernel calls left on the host (`etch lower
--json`), and the summary counts the programs lowered whole (one delegate and no host
kernel call per method) and lists the operators left on the host in the others.
--replan [ARGS]: first re-plans each model's memory (`etch lower --replan-only` plus ARGS,
e.g. "--no-alloc-graph-input --no-alloc-graph-output") and runs that.
--outputs DIR: runs nothing; compares DIR/<model>/output_<i>.npy (written elsewhere, e.g.
by the GPU run of scripts/gpu-test.sh) with the expected outputs.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def host_operators(etch, pte):
    """Operators of the kernel calls left on the host in a lowered program (from `etch
    inspect --json`: the outer methods' operators, minus the inserted copies)."""
    r = subprocess.run([etch, "inspect", pte, "--json"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return []
    ops = []
    for m in json.loads(r.stdout).get("methods", []):
        for o in m.get("operators", []):
            name = o.get("name") if isinstance(o, dict) else str(o)
            if name and not name.startswith("et_copy::"):
                ops.append(name)
    return ops


def check(etch, base, entry, work, lower=None, replan=None, outputs=None, report=None):
    case = entry["cases"][0]
    if outputs is not None:
        if not os.path.isdir(os.path.join(outputs, entry["name"])):
            return False, "no outputs"
        return compare(base, case, os.path.join(outputs, entry["name"]))
    out_dir = os.path.join(work, entry["name"])
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    pte = os.path.join(base, entry["pte"])
    extra = []
    if lower is not None or replan is not None:
        lowered = os.path.join(work, entry["name"] + ".lowered.pte")
        lcmd = [etch, "lower", pte, "-o", lowered]
        if replan is not None:
            lcmd += ["--replan-only"] + replan.split()
        else:
            ops = [] if "--ops" in lower.split() else ["--ops", "portable"]
            lcmd += ["--device", "cuda:0", "--json"] + ops + lower.split()
            extra = ["--simulate-device", "cuda"]
        r = subprocess.run(lcmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return False, "lower: " + (r.stderr.strip() or r.stdout.strip())[:2000]
        pte = lowered
        if report is not None and replan is None:
            methods = json.loads(r.stdout)["methods"]
            report["methods"] = [
                (m["method"], m["delegates"], m["host_instructions"]) for m in methods
            ]
            report["whole"] = all(m["delegates"] == 1 and m["host_instructions"] == 0 for m in methods)
            if not report["whole"]:
                report["host_ops"] = host_operators(etch, lowered)
    cmd = [etch, "run", pte, "--method", case["method"], "--output-dir", out_dir] + extra
    for p in case["inputs"]:
        cmd += ["--input", os.path.join(base, p)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False, "timeout"
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip()).splitlines()
        return False, " | ".join(msg)[:2000]
    return compare(base, case, out_dir)


def compare(base, case, out_dir):
    rtol, atol = case.get("rtol", 1e-3), case.get("atol", 1e-4)
    worst = 0.0
    for i, p in enumerate(case["expected"]):
        e = np.load(os.path.join(base, p))
        got_path = os.path.join(out_dir, f"output_{i}.npy")
        if not os.path.exists(got_path):
            return False, f"output {i} missing"
        got = np.load(got_path)
        if got.shape != e.shape:
            return False, f"output {i} shape {got.shape} vs expected {e.shape}"
        if e.dtype.kind in "iub":
            if not (got == e).all():
                return False, f"output {i}: {int((got != e).sum())} integer mismatch(es)"
            continue
        diff = np.abs(got.astype(np.float64) - e.astype(np.float64))
        if np.isnan(got).any() != np.isnan(e).any():
            return False, f"output {i}: NaN mismatch"
        diff = np.nan_to_num(diff, nan=0.0)
        worst = max(worst, float(diff.max(initial=0)))
        bad = diff > atol + rtol * np.abs(e)
        if bad.any():
            return False, f"output {i}: max diff {worst:.3e}, {int(bad.sum())}/{bad.size} out of tolerance"
    return True, f"max diff {worst:.2e}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--etch", default=os.path.join(ROOT, "target", "release", "etch"))
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "models"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--work", help="directory for etch outputs (default: a temporary one)")
    ap.add_argument("--lower", nargs="?", const="", default=None, metavar="ARGS")
    ap.add_argument("--replan", nargs="?", const="", default=None, metavar="ARGS")
    ap.add_argument("--outputs", help="compare outputs already in this directory")
    args = ap.parse_args()
    with open(os.path.join(args.models, "manifest.json")) as f:
        manifest = json.load(f)
    only = set(args.only.split(",")) if args.only else None
    work = args.work or tempfile.mkdtemp(prefix="etch-models-")
    failures = 0
    whole, partial = [], {}
    for entry in manifest:
        if only and entry["name"] not in only:
            continue
        if args.outputs and not os.path.isdir(os.path.join(args.outputs, entry["name"])):
            continue
        report = {}
        ok, msg = check(args.etch, args.models, entry, work, args.lower, args.replan, args.outputs, report)
        if "methods" in report:
            msg += "; " + ", ".join(f"{m}: {d} delegate(s), {h} on the host" for m, d, h in report["methods"])
            if report["whole"]:
                whole.append(entry["name"])
            else:
                partial[entry["name"]] = sorted(set(report.get("host_ops", [])))
                msg += " [host ops: " + ", ".join(partial[entry["name"]]) + "]"
        print(f"{'ok  ' if ok else 'FAIL'} {entry['name']:<20} {msg}", flush=True)
        failures += 0 if ok else 1
    if whole or partial:
        print(f"lowered whole (one delegate, no host kernel call per method): {len(whole)} of {len(whole) + len(partial)}")
        for name, ops in partial.items():
            print(f"  not whole: {name}: host ops {', '.join(ops) or '(none: several delegates)'}")
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
