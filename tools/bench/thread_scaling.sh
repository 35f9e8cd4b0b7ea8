#!/usr/bin/env bash
# Thread scaling of etch's CPU kernels: runs `etch bench --json` on every program in a
# directory with ETCH_NUM_THREADS set to each thread count, and prints markdown tables of
# the median execute time (ms) and the speedup over one thread.
#
#   tools/bench/thread_scaling.sh ETCH_BINARY MODEL_DIR [--threads "1 2 4 8 16"]
#                                 [--iterations 20] [--repeats 3]
#
# MODEL_DIR holds `NAME.pte` files, or `NAME/model.pte` directories (the layout of
# target/bench-models/ written by tools/bench/compare_executorch.py); `in*.npy` files beside
# a program are passed as its inputs (`--input`, in name order), otherwise etch makes
# deterministic random inputs. Every (program, thread count) runs `--repeats` times,
# thread counts interleaved, and the table shows the median of the runs' medians.
# Needs only bash and python3 (standard library): no Rust toolchain.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi

exec python3 - "$@" <<'PY'
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time

args = sys.argv[1:]
etch, model_dir = os.path.abspath(args[0]), args[1]
opts = {"--threads": "1 2 4 8 16", "--iterations": "20", "--repeats": "3"}
rest = args[2:]
while rest:
    key = rest.pop(0)
    if key not in opts or not rest:
        sys.exit(f"unknown option or missing value: {key}")
    opts[key] = rest.pop(0)
threads = [int(t) for t in opts["--threads"].replace(",", " ").split()]
iterations, repeats = int(opts["--iterations"]), int(opts["--repeats"])

programs = []
for p in sorted(glob.glob(os.path.join(model_dir, "*.pte"))):
    programs.append((os.path.splitext(os.path.basename(p))[0], p, []))
for p in sorted(glob.glob(os.path.join(model_dir, "*", "model.pte"))):
    d = os.path.dirname(p)
    programs.append((os.path.basename(d), p, sorted(glob.glob(os.path.join(d, "in*.npy")))))
if not programs:
    sys.exit(f"no .pte programs in {model_dir}")


def bench(pte, inputs, t):
    cmd = [etch, "bench", pte, "--iterations", str(iterations), "--json"]
    for i in inputs:
        cmd += ["--input", i]
    env = dict(os.environ, ETCH_NUM_THREADS=str(t))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  {os.path.basename(pte)} with {t} threads failed: {r.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(r.stdout)["median_ms"]


cpu = platform.processor() or platform.machine()
try:
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
except OSError:
    pass
print(f"Machine: {cpu}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}; "
      f"`etch bench --iterations {iterations}`, median of {repeats} runs' medians, ms.",
      flush=True)

results = {}
for name, pte, inputs in programs:
    for _ in range(repeats):
        for t in threads:
            ms = bench(pte, inputs, t)
            if ms is not None:
                results.setdefault((name, t), []).append(ms)
    print(f"  measured {name}", file=sys.stderr, flush=True)


def cell(name, t):
    v = results.get((name, t))
    return statistics.median(v) if v else None


head = "| model | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in threads) + " |"
rule = "| --- |" + " --- |" * len(threads)
print("\nMedian execute time (ms):\n")
print(head)
print(rule)
for name, _, _ in programs:
    row = [cell(name, t) for t in threads]
    print(f"| {name} | " + " | ".join("error" if v is None else f"{v:.2f}" for v in row) + " |")
base = threads[0]
print(f"\nSpeedup over {base} thread{'s' if base > 1 else ''}:\n")
print(head)
print(rule)
for name, _, _ in programs:
    b = cell(name, base)
    row = [cell(name, t) for t in threads]
    print(f"| {name} | " + " | ".join("-" if v is None or b is None else f"{b / v:.2f}x" for v in row) + " |")
PY
