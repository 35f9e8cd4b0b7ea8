#!/usr/bin/env bash
# Session 11, GPU call 6: gdn_recur prefetches its state rows into L2 before the PDL wait and
# loads everything after it (safe whatever the kernel before writes); new = that + call 3's
# moe_down_row; c3 = call 3's binary; base = main at 3a03c26. Op tests, then the decode step.
set -uo pipefail
exec > >(tee $OUT/run6.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "^gdn bfloat16 T=1 |test result|FAIL|panicked" | head -10
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
for r in 1 2 3; do
  for v in etch_base etch_c3 etch; do
    echo "-- $v decode"; timeout 60 $B/$v bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute
  done
done
rm -rf /tmp/ck20
