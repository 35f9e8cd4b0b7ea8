#!/usr/bin/env bash
# Decode A/B and per-kernel times on the 35B-A3B layer sizes with 4 layers (LLLF): etch bench on the
# decode method with CUDA graphs (default, ETCH_MOE_FUSE=0, ETCH_CUDA_GEMV=0), then ncu over one step.
# Bundle B as in qwen35_h200_1gpu.sh plus config4.json, q4.pte and tok1/pos128/samp .npy inputs.
# A/B of decode on the 4-layer 35B-sized model (CUDA graphs), then ncu per kernel.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
B=${BUNDLE:-.gpuq}; C=/tmp/ck4
echo "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
[ -f $C/config.json ] || python3 $B/qwen35_bench.py make-ckpt --config $B/config4.json --out $C 2>&1 | grep -v Writing
$B/etch lower $B/q4.pte -o /tmp/q.cuda.pte --ops cuda > /dev/null || exit 1
run() { echo "== decode (graphs) $*"; env "$@" timeout 100 $B/etch bench /tmp/q.cuda.pte --method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C --iterations 100 2>&1 | grep execute; }
run X=1; run ETCH_MOE_FUSE=0; run ETCH_CUDA_GEMV=0; run X=1
echo "== ncu"
timeout 200 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --print-units base $B/etch bench /tmp/q.cuda.pte --method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C --iterations 3 > $OUT/ncu.csv 2> $OUT/ncu.err
echo "rc=$? $(wc -l < $OUT/ncu.csv) lines"
