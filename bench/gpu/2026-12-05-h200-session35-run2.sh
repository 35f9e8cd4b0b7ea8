#!/usr/bin/env bash
# Session 35, call 2 (nvidia-h200): the 40-layer side by side of session 16 again, with
# transformers also on flash-linear-attention 0.6.0's Triton kernels for the Gated DeltaNet
# (wheels carried in .whl; causal-conv1d has no wheel, so its PyTorch fallback stays), then
# plain transformers (64 new), etch generate's closing line, and the Qwen fixture's GPU test
# (tests/qwen3_5_moe.rs: ids, PCIe bytes, CUDA graph counts). Same seeded checkpoint as session
# 16, made on the RAM disk. Bundle .gpuq: etch, qwen-tests, q40.pte, config40.json, hf40.json,
# qwen35_bench.py.
set -uo pipefail
export ETCH_CACHE_DIR=/tmp/etchcache  # kept while the machine stays warm
C=/dev/shm/ck40; B=.gpuq
L=40 CK=$C BUNDLE=$B OUT=$OUT STEPS=etch,hf_fla bash tools/bench/qwen35_h200_1gpu.sh
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1
echo "== transformers without flash-linear-attention (grouped_mm), 128-token prompt, 64 new"
timeout 100 python3 $B/qwen35_bench.py hf --ckpt $C --prompt-len 128 --new 64 --json $OUT/hf64.json 2>&1 | grep -E '^\{|Error' | cut -c1-300
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('$B/hf40.json'))['prompt_ids'])))")
echo "== etch generate's closing line (stderr), 64 new"
$B/etch generate /tmp/q40.cuda.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 64 2>&1 >/dev/null | tail -1
echo "== the Qwen fixture on this GPU (tests/qwen3_5_moe.rs)"
mkdir -p target/release && cp $B/etch target/release/etch
timeout 200 $B/qwen-tests --test-threads=1 2>&1 | tail -14
free -g
