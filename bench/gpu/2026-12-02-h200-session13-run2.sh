#!/usr/bin/env bash
# Session 13, GPU call 2: where moe_logits' time goes (ncu durations with the routing fused
# into its last block or as moe_route, candidate ranks or all ranks) and the MoE down
# microbenchmark (tools/bench/moe_down_bench.cu); base vs new decode step again.
set -uo pipefail
exec > >(tee $OUT/run2.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== moe_down microbenchmark"
/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -std=c++17 $B/moe_down_bench.cu -o /tmp/mdb && /tmp/mdb
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
timeout 60 $B/etch_base bench /tmp/q20n.pte $A --iterations 3 > /dev/null 2>&1  # compile the base kernels
for r in 1 2 3; do
  echo "-- base"; timeout 60 $B/etch_base bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new"; timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new, ETCH_MOE_FUSE=0"; ETCH_MOE_FUSE=0 timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
done
echo "== ncu durations of the router kernels (graphs off, 20 layers x 2 steps)"
for v in "X=1" "ETCH_MOE_RANK_ALL=1" "ETCH_MOE_FUSE=0" "ETCH_MOE_FUSE=0 ETCH_MOE_RANK_ALL=1"; do
  env ETCH_CUDA_GRAPHS=0 $v timeout 120 /usr/local/cuda/bin/ncu --kernel-name regex:"moe_logits|moe_route|moe_up_bf16" --launch-skip 20 --launch-count 30 --metrics gpu__time_duration.sum --csv --print-units base $B/etch bench /tmp/q20n.pte $A --iterations 2 > /tmp/n.csv 2>/dev/null
  python3 - "$v" <<'PY'
import csv, io, sys, statistics, collections
t = open("/tmp/n.csv", errors="replace").read()
d = collections.defaultdict(list)
for r in csv.DictReader(io.StringIO(t[t.find('"ID"'):])):
    if r["Metric Name"] == "gpu__time_duration.sum":
        d[r["Kernel Name"].split("(")[0].strip()].append(float(r["Metric Value"].replace(",", "")) / 1000)
print(sys.argv[1], {k: (len(v), round(statistics.median(v), 2)) for k, v in d.items()})
PY
done
rm -rf /tmp/ck20
