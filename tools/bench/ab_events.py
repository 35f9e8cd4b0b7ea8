"""Per-event minimums of two etch binaries on one program, over interleaved rounds of
`etch bench --etdump` (issue #14): which operators a change made faster or slower, on a host
too noisy for whole-run medians.

    /work/venv/bin/python tools/bench/ab_events.py target/bench-models/xnnpack/resnet18_224 \\
        --bins OLD_ETCH,NEW_ETCH [--pte portable|xnnpack] [--threads 1] [--rounds 4] [--iterations 10]

Prints each binary's minimum execute time, then every event above 50 µs with both minimums
and their ratio (the programs' event lists line up: the same program, run by both binaries).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import align_events as ae  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--bins", required=True, help="two comma-separated etch binaries")
    ap.add_argument("--pte", default="portable", choices=["portable", "xnnpack"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=10)
    a = ap.parse_args()
    bins = a.bins.split(",")
    if len(bins) != 2:
        sys.exit("--bins takes two binaries")
    inputs = [os.path.join(a.dir, "in0.npy")]
    pte = os.path.join(a.dir, a.pte + ".pte")
    runs = {b: [] for b in bins}
    for _ in range(a.rounds):
        for b in bins:
            runs[b].append(ae.events(b, pte, inputs, a.threads, a.iterations))
    for b in bins:
        print(f"{b}: execute min {min(ex for _, ex in runs[b]):.3f} ms")
    first, second = (ae.minimums(runs[b], b) for b in bins)
    for (name, x), (_, y) in zip(first, second):
        if max(x, y) > 0.05:
            print(f"{name[:40]:40} {x * 1000:8.1f} {y * 1000:8.1f} {y / x:5.2f}")
    print(f"sum of events: {sum(m for _, m in first):.3f} ms, {sum(m for _, m in second):.3f} ms")


if __name__ == "__main__":
    main()
