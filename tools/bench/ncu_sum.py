#!/usr/bin/env python3
"""Per-kernel table from an Nsight Compute CSV (`ncu --csv --print-units base --metrics
gpu__time_duration.sum[,dram__bytes_read.sum,...]`): kernels grouped by name (the dtype
suffix kept), with launches, total and mean time, share of the summed GPU time and, when
the CSV has DRAM bytes, the achieved bandwidth.

    python3 tools/bench/ncu_sum.py ncu.csv [--top 40] [--skip N]

--skip drops the first N kernel launches (warm-up, weight loading).
"""
import argparse
import collections
import csv
import io


def rows(path):
    text = open(path, errors="replace").read()
    # ncu prints its own log lines (==PROF==) before the CSV header.
    start = text.find('"ID"')
    return list(csv.DictReader(io.StringIO(text[start:])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--skip", type=int, default=0)
    a = ap.parse_args()
    launches = collections.OrderedDict()
    for r in rows(a.csv):
        k = (r["ID"], r["Kernel Name"])
        launches.setdefault(k, {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", "") or 0)
    items = list(launches.items())[a.skip:]
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for (_, name), m in items:
        e = by[name.split("(")[0]]
        e[0] += 1
        e[1] += m.get("gpu__time_duration.sum", 0.0) * 1e-3  # ns -> us
        e[2] += m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
    total = sum(e[1] for e in by.values())
    print(f"{len(items)} launches, {total / 1e3:.3f} ms of kernel time")
    print(f"{'kernel':48} {'n':>6} {'total us':>10} {'mean us':>9} {'share':>6} {'GB/s':>7}")
    for name, (n, t, b) in sorted(by.items(), key=lambda kv: -kv[1][1])[: a.top]:
        bw = f"{b / (t * 1e-6) / 1e9:7.0f}" if b and t else ""
        print(f"{name[:48]:48} {n:6d} {t:10.1f} {t / n:9.2f} {100 * t / total:5.1f}% {bw}")


if __name__ == "__main__":
    main()
