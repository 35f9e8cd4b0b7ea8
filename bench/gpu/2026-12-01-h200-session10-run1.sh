#!/usr/bin/env bash
# Session 10, GPU call 1: the CUDA soak with the kernel-context stream-lock fix, the device
# faults, then decode on the 4-layer 35B-A3B-sized model: graphs / no graphs, ncu times at
# boost clocks without cache flush, and ncu detail sections on the MoE / delta-rule / norm kernels.
set -uo pipefail
exec > >(tee $OUT/run1.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/tmp/ck4
python3 $B/qwen35_bench.py make-ckpt --config $B/config4.json --out $C > /tmp/mk.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (default, then ETCH_PDL_EARLY=0)"
.gpu/cuda-etch-ops-tests 2>&1 | tail -3
ETCH_PDL_EARLY=0 .gpu/cuda-etch-ops-tests 2>&1 | tail -3
echo "== Qwen 3.5 MoE fixture tests (ids equal transformers')"; .gpu/qwen-tests --test-threads=1 2>&1 | tail -3
echo "== device faults"; .gpu/device-fault-tests --test-threads=1 2>&1 | tail -4
echo "== CUDA soak, 2 minutes, several threads"
(cd .gpu && timeout 200 ./examples/soak --minutes 2 --every 15 --warmup 40 --cuda 2>&1 | tail -14)
wait $MK; tail -2 /tmp/mk.log
$B/etch lower $B/q4.pte -o /tmp/q.cuda.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C"
for r in 1 2; do
  for e in X=1 ETCH_PDL_EARLY=0; do echo "== decode new $e"; env $e timeout 100 $B/etch bench /tmp/q.cuda.pte $A --iterations 300 2>&1 | grep execute; done
  echo "== decode old (HEAD before this session's kernel changes)"; timeout 100 $B/etch_old bench /tmp/q.cuda.pte $A --iterations 300 2>&1 | grep execute
done
echo "== decode new, no CUDA graphs"; ETCH_CUDA_GRAPHS=0 timeout 100 $B/etch bench /tmp/q.cuda.pte $A --iterations 200 2>&1 | grep execute
echo "== ncu times (boost clocks, no cache flush), 3 steps"
timeout 200 /usr/local/cuda/bin/ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base $B/etch bench /tmp/q.cuda.pte $A --iterations 3 > $OUT/ncu.csv 2> $OUT/ncu.err
echo "rc=$?"; python3 $B/ncu_sum.py $OUT/ncu.csv --top 30
echo "== ncu detail"
timeout 240 /usr/local/cuda/bin/ncu --cache-control none --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats -k 'regex:moe_logits|gdn_recur|moe_down_row|moe_up_bf|rms_block|rms_warp|gemv_group' --launch-skip 40 --launch-count 14 $B/etch bench /tmp/q.cuda.pte $A --iterations 3 > $OUT/ncu_detail.txt 2>&1
echo "rc=$? $(wc -l < $OUT/ncu_detail.txt) lines"
grep -E "^  [a-z_]+_bf16|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Block Limit Registers|Waves Per SM" $OUT/ncu_detail.txt | head -150
