#!/usr/bin/env bash
# Session 11, GPU call 5: prefill (8 and 128 tokens) and decode steps, base = main at 3a03c26,
# c3 = moe_down_row early, new = c3 + gdn_recur early: is prefill unchanged?
set -uo pipefail
exec > >(tee $OUT/run5.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.pte --ops cuda > /dev/null || exit 1
W="--weights /tmp/ck20"
for r in 1 2 3; do
  for v in etch_base etch_c3 etch; do
    echo "-- $v prefill 8";   timeout 60 $B/$v bench /tmp/q20.pte --method prefill --input $B/tok8.npy --input $B/pos0.npy --input $B/samp.npy $W --iterations 50 2>&1 | grep execute
    echo "-- $v prefill 128"; timeout 60 $B/$v bench /tmp/q20.pte --method prefill --input $B/tok128.npy --input $B/pos0.npy --input $B/samp.npy $W --iterations 30 2>&1 | grep execute
    echo "-- $v decode";      timeout 60 $B/$v bench /tmp/q20.pte --method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy $W --iterations 300 2>&1 | grep execute
  done
done
rm -rf /tmp/ck20
