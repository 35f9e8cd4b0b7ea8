#!/usr/bin/env bash
# Session 12, GPU call 6: ncu kernel list of one 20-layer decode step (new binary and
# program, CUDA graphs off so each launch is one row; boost clocks, no cache flush).
set -uo pipefail
exec > >(tee $OUT/run9.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1
tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
ETCH_CUDA_GRAPHS=0 timeout 300 /usr/local/cuda/bin/ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size --csv --print-units base $B/etch bench /tmp/q20n.pte $A --iterations 1 > $OUT/ncu20.csv 2> $OUT/ncu20.err
echo "rc=$? $(wc -l < $OUT/ncu20.csv) lines"; python3 $B/ncu_sum.py $OUT/ncu20.csv --top 40
for r in 1 2; do
  for s in X=1 ETCH_CUDA_SKIP_KERNELS=ew_bf16 ETCH_CUDA_SKIP_KERNELS=ew_f32 ETCH_CUDA_SKIP_KERNELS=ew_i64 ETCH_CUDA_SKIP_KERNELS=copy ETCH_CUDA_SKIP_KERNELS=index_ ETCH_CUDA_SKIP_KERNELS=gather ETCH_CUDA_SKIP_KERNELS=cat; do
    echo "-- $s"; env $s timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
  done
done
rm -rf /tmp/ck20
