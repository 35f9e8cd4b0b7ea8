"""etch's portable program against its XNNPACK-delegated one, event by event (issue #14).

Both programs of one model (`portable.pte`, `xnnpack.pte` in MODEL_DIR, as
`compare_xnnpack.py` exports them) run in `etch bench --etdump`, alternately, for a few
rounds; each event's figure is its minimum over the rounds (the host may be shared: a
minimum only loses time to it). The delegate's nodes are grouped as the portable program
fuses them: a convolution with the sigmoid / clamp / hardswish / add nodes after it is
one group, as `etch::fused_convolution` runs a convolution with its batch norm,
activation and residual add; transposes are left out. The lists then line up one to one
for torchvision's conv nets, and a row marked `<<` is one where the portable program takes
15 % and 20 µs more than the delegate.

    /work/venv/bin/python tools/bench/align_events.py target/bench-models/xnnpack/efficientnet_b0_224 \\
        [--threads 2] [--rounds 5] [--iterations 10] [--etch target/release/etch]

The same kernels run both programs where the delegate keeps NCHW (efficientnet_b0_224 on
AVX2), so a marked row there is the portable path's own cost (session 28 found the SiLU
split, a scratch copy and a cold scratch this way); where the delegate runs NHWC
(mobilenet_v2/v3_large at 224²) the rows compare the layouts.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_ops as co  # noqa: E402

# Delegate nodes that the portable program's fused convolution runs after its convolution
# (hardsigmoid: add, clamps and a division by 6).
ATTACHED = {"XNNSigmoid", "XNNAdd", "XNNClamp", "XNNHardswish", "XNNDiv"}


def events(etch, pte, inputs, threads, iterations):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.etdp")
        cmd = [etch, "bench", pte, "--iterations", str(iterations), "--etdump", path]
        for p in inputs:
            cmd += ["--input", p]
        env = dict(os.environ, ETCH_NUM_THREADS=str(threads))
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        evs, execute = co.events(path)
    return [(n, ms) for n, ms in evs if n not in co.SKIP], execute


def minimums(runs, what):
    """Each event's minimum over rounds of `events` (the lists line up round to round)."""
    first = runs[0][0]
    if any(len(evs) != len(first) for evs, _ in runs):
        sys.exit(f"{what}: the event lists differ between rounds")
    return [(first[i][0], min(evs[i][1] for evs, _ in runs)) for i in range(len(first))]


def grouped(evs):
    """The delegate's events as the portable program fuses them."""
    out = []
    for name, ms in evs:
        kind = name.split(" #")[0]
        if kind in ATTACHED and out:
            out[-1][0] += "+" + kind[3:]
            out[-1][1] += ms
        elif kind != "XNNStaticTranspose":
            out.append([kind[3:] if kind.startswith("XNN") else kind, ms])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--etch", default="target/release/etch")
    a = ap.parse_args()
    inputs = sorted(
        os.path.join(a.model_dir, p) for p in os.listdir(a.model_dir) if re.fullmatch(r"in\d+\.npy", p)
    )
    runs = {"portable": [], "xnnpack": []}
    for _ in range(a.rounds):
        for kind in runs:
            pte = os.path.join(a.model_dir, kind + ".pte")
            evs, execute = events(a.etch, pte, inputs, a.threads, a.iterations)
            if kind == "portable":
                evs = [[n.replace("native_call_", "").split(" #")[0], ms] for n, ms in evs]
            else:
                evs = grouped(evs)
            runs[kind].append((evs, execute))

    p, x = minimums(runs["portable"], "portable"), minimums(runs["xnnpack"], "xnnpack")
    ex = {k: min(r[1] for r in v) for k, v in runs.items()}
    print(f"{a.model_dir}, {a.threads} thread(s), minimums of {a.rounds} rounds of {a.iterations} executions")
    print(f"execute: portable {ex['portable']:.3f} ms, XNNPACK-delegated {ex['xnnpack']:.3f} ms")
    if len(p) != len(x):
        print(f"(the lists do not line up: {len(p)} portable events, {len(x)} delegate groups)")
    print(f"{'#':>3} {'portable':24} {'µs':>8} | {'delegate':30} {'µs':>8}")
    for i in range(max(len(p), len(x))):
        pn, pm = p[i] if i < len(p) else ("", 0.0)
        xn, xm = x[i] if i < len(x) else ("", 0.0)
        mark = " <<" if pm > 1.15 * xm and pm - xm > 0.02 else ""
        print(f"{i:3} {pn[:24]:24} {pm * 1000:8.1f} | {xn[:30]:30} {xm * 1000:8.1f}{mark}")
    print(f"sum of events: portable {sum(m for _, m in p):.3f} ms, delegate {sum(m for _, m in x):.3f} ms")


if __name__ == "__main__":
    main()
