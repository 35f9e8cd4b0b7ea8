#!/usr/bin/env bash
# Session 17, call 1 (nvidia-h200): what makes moe_down_row's access pattern slow
# (tools/bench/moe_down_bench.cu, new variants), then Nsight Compute on four of them.
set -u
OUT=${OUT:-logs}; mkdir -p "$OUT"
export PATH=/usr/local/cuda-13.0/bin:/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/moe_down_bench.cu -o /tmp/mdb || exit 1
/tmp/mdb
for k in row9 row9_loads row9_v row9_half stream; do
  ncu --clock-control none --kernel-name regex:"^${k}(<|\$|\()" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats /tmp/mdb 2>&1 \
    | grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Stall Long|Warp Cycles Per Issued|L2 Hit|Mem Busy|Max Bandwidth" | head -40
done
