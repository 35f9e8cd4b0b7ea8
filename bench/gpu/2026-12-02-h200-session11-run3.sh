#!/usr/bin/env bash
# Session 11, GPU call 3: moe_down_row with its activations staged as float32 and both weight
# rounds loaded at once, with (early, the default) and without (ETCH_MOE_DOWN_EARLY=0) the
# selection read and weight loads before the PDL wait; vs main at 3a03c26 (base). Op tests
# first (moe rows=1 cases cover moe_down_row), then the 20-layer decode step.
set -uo pipefail
exec > >(tee $OUT/run3.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (early)"; .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "^moe .*rows=1 |test result|FAIL|panicked" | head -20
echo "== etch:: CUDA kernels vs CPU (ETCH_MOE_DOWN_EARLY=0)"; ETCH_MOE_DOWN_EARLY=0 .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "test result|FAIL|panicked" | head -5
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== decode step, 20 layers"
for r in 1 2 3; do
  echo "-- base"; timeout 100 $B/etch_base bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new early"; timeout 100 $B/etch bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new wait-first"; ETCH_MOE_DOWN_EARLY=0 timeout 100 $B/etch bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute
done
echo "== generate, 20 layers: base vs new; the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20.pte $P > /tmp/gf.json 2>/tmp/gf.err; tail -2 /tmp/gf.err
timeout 120 $B/etch_base generate /tmp/q20.pte $P > /tmp/gb.json 2>/tmp/gb.err; tail -2 /tmp/gb.err
python3 - <<'PY'
import json
f, b = json.load(open("/tmp/gf.json")), json.load(open("/tmp/gb.json"))
print("ids equal:", f["generated_ids"] == b["generated_ids"], len(f["generated_ids"]),
      "| decode tok/s new", round(f["decode_tok_s"], 1), "base", round(b["decode_tok_s"], 1))
PY
echo "== ncu: moe_down_row, new early vs base (one decode step, 4 instances each)"
for v in etch etch_base; do
  timeout 120 ncu --kernel-name regex:moe_down_row --launch-count 4 --section SpeedOfLight $B/$v bench /tmp/q20.pte $A --iterations 1 --no-cuda-graphs 2>&1 | grep -E "moe_down_row|Duration" | head -8
done
rm -rf /tmp/ck20
