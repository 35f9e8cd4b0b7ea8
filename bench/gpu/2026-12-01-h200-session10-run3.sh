#!/usr/bin/env bash
# Session 10, GPU call 3: op tests (the delta rule with its conv loads first, and HEAD's
# kernels) incl. the tied-routing case; 20-layer decode A/B; a 4-minute multi-threaded CUDA soak.
set -uo pipefail
exec > >(tee $OUT/run3.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU, delta rule with conv loads first"; .gpu/cuda-etch-ops-tests 2>&1 | grep -E "tied|test result|FAIL|panicked" | head
echo "== etch:: CUDA kernels vs CPU, HEAD's kernels"; .gpu/cuda-etch-ops-tests-old 2>&1 | grep -E "tied|test result|FAIL|panicked" | head
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.cuda.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== decode step, 20 layers: gdn conv loads first (new) vs HEAD (old)"
for r in 1 2 3; do
  echo "-- new"; timeout 100 $B/etch bench /tmp/q20.cuda.pte $A --iterations 300 2>&1 | grep execute
  echo "-- old"; timeout 100 $B/etch_old bench /tmp/q20.cuda.pte $A --iterations 300 2>&1 | grep execute
done
rm -rf /tmp/ck20
echo "== CUDA soak, 4 minutes, several threads (HEAD + the kernel-context lock)"
(cd .gpu && timeout 330 ./examples/soak --minutes 4 --every 20 --warmup 60 --cuda 2>&1 | grep -v "planned bytes\|delegate(s) holding\|copies inserted" | tail -20)
