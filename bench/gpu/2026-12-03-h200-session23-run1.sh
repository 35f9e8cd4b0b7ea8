#!/usr/bin/env bash
# Session 23, call 1 (nvidia-h200): decode with the MoE's up and down projections in one
# kernel (moe_updown: a block per tile of 8 intermediate units and slot, partial sums of the
# down projection, then moe_updown_sum) against moe_up + moe_down_row, one binary, chosen by
# ETCH_MOE_UPDOWN (0: main's kernels, 1: fused, 2: fused with the down loads issued before
# the up products), on the full 40-layer model (RAM-disk checkpoint as session 16). Op tests
# in the three modes, a warm-up (NVRTC), 3 interleaved rounds of the decode step, generate in
# each mode, ncu of the MoE kernels.
set -uo pipefail
exec > >(tee $OUT/${RUN:-run1}.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/dev/shm/ck40
[ -e $B/bins.tar.xz ] && tar xJf $B/bins.tar.xz -C $B  # the binaries travel compressed
python3 $B/qwen35_bench.py make-ckpt --config $B/config40.json --out $C > /tmp/mk.log 2>&1 &
MK=$!
for m in 0 1 2; do
  echo "== etch:: CUDA kernels vs CPU, ETCH_MOE_UPDOWN=$m"
  ETCH_MOE_UPDOWN=$m $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked|moe bf16 rows=1 experts=256" | tail -5
done
wait $MK; grep saved /tmp/mk.log
$B/etch lower $B/q40.pte -o /tmp/q40n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C"
M=(0 1 2)
echo "== warm-up"; timeout 300 $B/etch bench /tmp/q40n.pte $A --iterations 3 2>&1 | grep execute
for r in 1 2 3; do
  for m in "${M[@]}"; do
    echo "-- ETCH_MOE_UPDOWN=$m: $(ETCH_MOE_UPDOWN=$m timeout 60 $B/etch bench /tmp/q40n.pte $A --iterations 300 2>&1 | grep execute)"
  done
done
echo "== elapsed ${SECONDS} s"
echo "== generate, 40 layers, 128-token prompt, 256 new"
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 128), generator=g)[0].tolist())))")
for m in "${M[@]}"; do
  ETCH_MOE_UPDOWN=$m timeout 90 $B/etch generate /tmp/q40n.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 256 --warmup --json > $OUT/gen_$m.json 2>/tmp/g$m.err; tail -1 /tmp/g$m.err
done
python3 - "$OUT" "${M[@]}" <<'PY'
import json, sys
o = sys.argv[1]
js = [json.load(open(f"{o}/gen_{m}.json")) for m in sys.argv[2:]]
for m, j in zip(sys.argv[2:], js):
    same = sum(a == b for a, b in zip(j['generated_ids'], js[0]['generated_ids']))
    first = next((i for i, (a, b) in enumerate(zip(j['generated_ids'], js[0]['generated_ids'])) if a != b), None)
    print(f"ETCH_MOE_UPDOWN={m}: ids equal to mode 0: {same}/{len(j['generated_ids'])} (first difference at {first}) decode tok/s {j['decode_tok_s']:.1f} prefill {j['prefill_tok_s']:.0f}")
PY
echo "== elapsed ${SECONDS} s"
echo "== ncu (graphs off): durations of 8 launches of each MoE kernel"
for m in "${M[@]}"; do
  echo "-- ETCH_MOE_UPDOWN=$m"
  ETCH_MOE_UPDOWN=$m ETCH_CUDA_GRAPHS=0 timeout 90 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:"moe_" --launch-skip 60 --launch-count 12 --section SpeedOfLight --section LaunchStats $B/etch bench /tmp/q40n.pte $A --iterations 1 2>/dev/null | grep -E "^  moe_|Duration|Registers Per|DRAM Throughput" | awk '{$1=$1; print}' | paste -sd' ' | sed 's/ moe_/\n moe_/g'
done
echo "== elapsed ${SECONDS} s"
