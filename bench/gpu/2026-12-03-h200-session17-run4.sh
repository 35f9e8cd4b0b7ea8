#!/usr/bin/env bash
# Session 17, call 4 (nvidia-h200): why moe_down_row reading its activations from global memory
# (call 3's binary, .gpuq/etch, reverted on main) is slower than main's staging (.gpuq/etch-base):
# Nsight Compute's launch statistics (registers), memory workload (local-memory spills) and warp
# stalls of one launch each, graphs off, on the 40-layer RAM-disk checkpoint.
set -uo pipefail
exec > >(tee $OUT/run4.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/dev/shm/ck40
[ -e $B/bins.tar.xz ] && tar xJf $B/bins.tar.xz -C $B
python3 $B/qwen35_bench.py make-ckpt --config $B/config40.json --out $C > /tmp/mk.log 2>&1 &
MK=$!
# NVRTC compiles of both binaries' kernels meanwhile (the op tests are the new binary's)
$B/cuda-etch-ops-tests > /dev/null 2>&1
wait $MK; grep saved /tmp/mk.log
$B/etch lower $B/q40.pte -o /tmp/q40n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C"
for e in $B/etch-base $B/etch; do
  echo "== $e"
  timeout 200 $e bench /tmp/q40n.pte $A --iterations 3 2>&1 | grep execute
  ETCH_CUDA_GRAPHS=0 timeout 120 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:"moe_down_row" --launch-skip 40 --launch-count 1 \
    --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SpeedOfLight --metrics smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_lg_throttle \
    $e bench /tmp/q40n.pte $A --iterations 1 2>/dev/null | grep -vE "^==PROF==|^\s*$" | grep -E "Registers|Duration|DRAM Through|Achieved Occ|local|stalled|Stall|Warp Cycles|Theoretical Occ|Block Limit" | head -30
done
echo "== elapsed ${SECONDS} s"
