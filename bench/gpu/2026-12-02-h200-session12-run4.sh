#!/usr/bin/env bash
# Session 12, GPU call 4: ablation of the 20-layer decode step (ETCH_CUDA_SKIP_KERNELS: the
# named kernels are not launched; results wrong, timing only): what each kernel family costs
# inside the CUDA graph.
set -uo pipefail
exec > >(tee $OUT/run7.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1
tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
run() { echo "-- $*"; env "$@" timeout 60 $B/etch bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute; }
for r in 1 2; do
  run X=1
  run ETCH_MOE_FUSE=0
  run ETCH_MOE_FUSE=0 ETCH_CUDA_SKIP_KERNELS=moe_route
  run ETCH_CUDA_SKIP_KERNELS=moe_logits
  run ETCH_CUDA_SKIP_KERNELS=moe_up
  run ETCH_CUDA_SKIP_KERNELS=moe_down_row
  run ETCH_CUDA_SKIP_KERNELS=moe_
  run ETCH_CUDA_SKIP_KERNELS=gdn_recur
  run ETCH_CUDA_SKIP_KERNELS=rms_warp
  run ETCH_CUDA_SKIP_KERNELS=rms_block
  run ETCH_CUDA_SKIP_KERNELS=rms_
  run ETCH_CUDA_SKIP_KERNELS=ew_
  run ETCH_CUDA_SKIP_KERNELS=ew_,index_,rope_
  run ETCH_CUDA_SKIP_KERNELS=attn_
  run ETCH_CUDA_SKIP_KERNELS=gemv_group
  run ETCH_CUDA_SKIP_KERNELS=gemv_bf16
  run ETCH_CUDA_SKIP_KERNELS=sample_
  run ETCH_CUDA_SKIP_KERNELS=rms_,ew_,index_,rope_,sample_,attn_,gdn_recur,moe_logits
done
echo "== kernel names launched (first decode, ncu-free list from a skip of nothing)"
