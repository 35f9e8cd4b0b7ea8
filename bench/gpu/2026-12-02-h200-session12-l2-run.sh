#!/usr/bin/env bash
# Session 12, GPU calls 1-3: the L2 prefetch / GEMV microbenchmark (nvcc on the H200).
# tools/bench/l2_prefetch_bench.cu is call 3's version; calls 1 and 2 ran the same kernels
# with other loops in main() (call 1: spin -> prefetch grid -> GEMV chains; call 2: GEMV
# variants and a streaming read), as their logs show.
set -u
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/l2_prefetch_bench.cu -o /tmp/l2bench 2>&1 | tail -5
/tmp/l2bench
