#!/usr/bin/env bash
# Session 10, GPU call 2: GPU op tests with this session's delta-rule / routing changes, decode
# A/B against the binary before them (4 and 20 layers), then the 20-layer protocol of #13.
set -uo pipefail
exec > >(tee $OUT/run2.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config4.json --out /tmp/ck4 > /tmp/mk4.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; .gpu/cuda-etch-ops-tests 2>&1 | grep -E "tied|test result|FAIL|panicked" | head
echo "== token-by-token delta rule everywhere"; ETCH_GDN_CHUNK_FROM=1000000000 .gpu/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked"
echo "== Qwen 3.5 MoE fixture tests"; .gpu/qwen-tests --test-threads=1 2>&1 | grep -E "test result|FAIL|panicked"
wait $MK; tail -1 /tmp/mk4.log
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
ab() { # ab PROGRAM CKPT: decode step, new and old binaries interleaved
  local A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $2"
  for r in 1 2; do
    echo "-- new"; timeout 100 $B/etch bench $1 $A --iterations 300 2>&1 | grep execute
    echo "-- old"; timeout 100 $B/etch_old bench $1 $A --iterations 300 2>&1 | grep execute
  done
}
$B/etch lower $B/q4.pte -o /tmp/q4.cuda.pte --ops cuda > /dev/null || exit 1
echo "== decode step, 4 layers: this session's kernels (new) vs before (old)"; ab /tmp/q4.cuda.pte /tmp/ck4
rm -rf /tmp/ck4
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.cuda.pte --ops cuda > /dev/null || exit 1
echo "== decode step, 20 layers: new vs old"; ab /tmp/q20.cuda.pte /tmp/ck20
OUT=$OUT STEPS=etch,hf bash tools/bench/qwen35_h200_1gpu.sh
