#!/usr/bin/env python3
"""Memory planning: the bytes the stock ExecuTorch exporter planned for each program
against the bytes `etch lower --replan-only` plans for the same program (sum over every
method's planned buffers). Prints a markdown table for BENCHMARKS.md.

    cargo build --release
    python3 tools/bench/planning_table.py [DIR_WITH_MANIFEST_OR_PTES ...]

"lower bound": the most bytes live at any one instruction under etch's lifetimes (no plan
of those lifetimes needs less).

Default directories: tests/fixtures, tests/fixtures/device, tests/fixtures/models,
target/models and target/models_extra (tools/export/export_models.py), target/bench-models
(tools/bench/compare_executorch.py).
"""

import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ETCH = os.path.join(ROOT, "target", "release", "etch")
DEFAULT = [
    "tests/fixtures",
    "tests/fixtures/device",
    "tests/fixtures/models",
    "target/models",
    "target/models_extra",
    "target/bench-models",
]


def programs(d):
    man = os.path.join(d, "manifest.json")
    if os.path.exists(man):
        with open(man) as f:
            for e in json.load(f):
                yield e["name"], os.path.join(d, e["pte"])
    else:
        for p in sorted(glob.glob(os.path.join(d, "*.pte"))):
            yield os.path.splitext(os.path.basename(p))[0], p


def main():
    dirs = sys.argv[1:] or [os.path.join(ROOT, d) for d in DEFAULT]
    tmp = tempfile.mkdtemp(prefix="etch-plan-")
    rows = []
    for d in dirs:
        if not os.path.isdir(d):
            print(f"skipping {d} (missing)", file=sys.stderr)
            continue
        for name, pte in programs(d):
            out = os.path.join(tmp, "out.pte")
            r = subprocess.run(
                [ETCH, "lower", pte, "-o", out, "--replan-only", "--json"],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                rows.append((os.path.relpath(d, ROOT), name, None, None, None, r.stderr.strip()))
                continue
            j = json.loads(r.stdout)
            before = sum(m["total_before"] for m in j["methods"])
            after = sum(m["total_after"] for m in j["methods"])
            bound = sum(m["lower_bound"] for m in j["methods"])
            kept = sum(1 for m in j["methods"] if m["kept_original"])
            rows.append((os.path.relpath(d, ROOT), name, before, after, bound, "original kept" if kept else ""))
    print("| set | program | stock planned bytes | etch planned bytes | etch / stock | lower bound | note |")
    print("|---|---|---:|---:|---:|---:|---|")
    worse = 0
    smaller = 0
    optimal = 0
    for s, name, b, a, bound, note in rows:
        if b is None:
            print(f"| {s} | {name} | | | | | error: {note} |")
            worse += 1
            continue
        ratio = a / b if b else 1.0
        smaller += a < b
        worse += a > b
        optimal += a <= bound
        print(f"| {s} | {name} | {b:,} | {a:,} | {ratio:.3f} | {bound:,} | {note} |")
    ok = [r for r in rows if r[2] is not None]
    tb = sum(r[2] for r in ok)
    ta = sum(r[3] for r in ok)
    print(f"\n{len(ok)} programs: {smaller} planned smaller, {len(ok) - smaller - worse} equal, {worse} larger or failed; "
          f"{optimal} at the lower bound; total {tb:,} -> {ta:,} bytes ({ta / tb:.3f}).")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
