"""Interleaved A/B of etch binaries on one exported model, with ExecuTorch+XNNPACK timed in
the same rounds (issue #14): a quicker look than `compare_xnnpack.py` at one model and thread
count, e.g. with another process loading a core.

    /work/venv/bin/python tools/bench/ab_etch.py target/bench-models/xnnpack/mobilenet_v2_224 \\
        --bins OLD_ETCH,NEW_ETCH [--pte portable|xnnpack|both] [--threads 2] [--rounds 4] \\
        [--iters 10] [--et]

Each round runs `etch bench` of every binary on every program (`--iters` executions, their
median), then ExecuTorch's pip runtime on the delegated program (`--et`); the summary gives
each engine's minimum and median over the rounds and every round's figure.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_xnnpack import ExecuTorch, etch_bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--bins", required=True, help="comma-separated etch binaries")
    ap.add_argument("--pte", default="both", choices=["portable", "xnnpack", "both"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--et", action="store_true", help="also time ExecuTorch+XNNPACK")
    a = ap.parse_args()
    ptes = ["portable", "xnnpack"] if a.pte == "both" else [a.pte]
    inp = os.path.join(a.dir, "in0.npy")
    et = None
    if a.et:
        et = ExecuTorch(os.path.join(a.dir, "xnnpack.pte"), [inp], a.threads)
    res = {}
    for r in range(a.rounds):
        for b in a.bins.split(","):
            for p in ptes:
                ms = etch_bench(b, os.path.join(a.dir, p + ".pte"), [inp], a.threads, a.iters)
                res.setdefault((os.path.basename(b), p), []).append(ms)
        if et:
            res.setdefault(("executorch", "xnnpack"), []).append(et.bench(a.iters))
        print("round", r, {f"{k[0]}/{k[1]}": round(v[-1], 2) for k, v in res.items()}, flush=True)
    for (engine, pte), v in res.items():
        print(f"{engine:>16} {pte:>9}  min {min(v):7.2f}  med {statistics.median(v):7.2f}  "
              f"all {[round(x, 2) for x in v]}")


if __name__ == "__main__":
    main()
