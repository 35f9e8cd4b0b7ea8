#!/usr/bin/env bash
# Session 35, call 1: teacher-forced accuracy in float32 and bfloat16 at the 35B-A3B layer
# sizes (tools/bench/qwen35_accuracy.sh) with L layers: L=40, the full depth, on an H200 (the
# f32 model is 138.6 GB: it fits one H200, one engine at a time), else L=20 (71.4 GB in f32,
# fits an H100). Seeded random weights as session 16, on the RAM disk; teacher-forced over the
# prompt and the 256 ids of session 16's transformers greedy run (hf40.json =
# bench/gpu/2026-12-02-h200-session16-40layer/hf.json). Then the Qwen fixture's GPU tests
# (tests/qwen3_5_moe.rs: ids, PCIe bytes, CUDA graph counts). Bundle .gpuq: etch, qwen-tests,
# q${L}l.pte and q${L}l32.pte (tools/export/qwen3_5_moe.py --model CFG_L --logits
# [--dtype f32] --max-seq-len 4096), config${L}.json, hf40.json, qwen35_bench.py.
set -uo pipefail
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=${L:-$([ "$MIB" -ge 140000 ] && echo 40 || echo 20)}
L=$L CK=/dev/shm/ck$L IDS_JSON=.gpuq/hf40.json bash tools/bench/qwen35_accuracy.sh
echo "== the Qwen fixture on this GPU (tests/qwen3_5_moe.rs)"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
mkdir -p target/release && cp .gpuq/etch target/release/etch
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
timeout 150 .gpuq/qwen-tests --test-threads=1 2>&1 | tail -14
