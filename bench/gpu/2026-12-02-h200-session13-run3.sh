#!/usr/bin/env bash
# Session 13, GPU call 3: moe_down_row's activation staging loads in flight together, and
# the router / up-projection rows loaded a pass at a time (lane_dot2_batched; moe_up with 4
# or 2 vectors of each row a lane). Ops vs CPU and the Qwen fixture with the new kernels;
# 20-layer decode step: base (main) / n1 (calls 1-2: error word, candidate ranks) / new
# (batch 4) / b2 (batch 2), interleaved; generate new vs base (ids equal).
set -uo pipefail
exec > >(tee $OUT/run3.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpuq/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | tail -4
echo "== Qwen fixture"; $B/qwen-tests --test-threads=1 2>&1 | grep -E "test result|FAIL|panicked" | head -5
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
for e in etch_base etch_n1 etch_b2; do timeout 90 $B/$e bench /tmp/q20n.pte $A --iterations 3 > /dev/null 2>&1; done
for r in 1 2 3; do
  for e in etch_base etch_n1 etch etch_b2; do
    echo "-- $e $(timeout 60 $B/$e bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute)"
  done
done
echo "== generate, 20 layers: the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20n.pte $P > /tmp/gn.json 2>/tmp/gn.err; tail -1 /tmp/gn.err
timeout 120 $B/etch_base generate /tmp/q20n.pte $P > /tmp/go.json 2>/tmp/go.err; tail -1 /tmp/go.err
python3 - <<'PY'
import json
n, o = json.load(open("/tmp/gn.json")), json.load(open("/tmp/go.json"))
print("ids equal:", n["generated_ids"] == o["generated_ids"], len(n["generated_ids"]),
      "| decode tok/s new", round(n["decode_tok_s"], 1), "base", round(o["decode_tok_s"], 1))
PY
echo "== ncu durations (graphs off), new"
ETCH_CUDA_GRAPHS=0 timeout 120 /usr/local/cuda/bin/ncu --kernel-name regex:"moe_|gemv" --launch-skip 40 --launch-count 60 --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base $B/etch bench /tmp/q20n.pte $A --iterations 2 > /tmp/n.csv 2>/dev/null; python3 $B/ncu_sum.py /tmp/n.csv
rm -rf /tmp/ck20
