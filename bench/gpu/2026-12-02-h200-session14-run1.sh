#!/usr/bin/env bash
# Session 14, GPU call 1: the one-row MoE variants on the 20-layer decode step. moe_up's
# shared-expert blocks computing before the wait for moe_logits (moe_up_early, new default;
# ETCH_MOE_UP_EARLY=0 = main's kernels) crossed with the routing in the blocks of moe_up and
# moe_down_row (ETCH_MOE_ROUTE_IN_BLOCKS=1, session 13, never timed), and moe_logits with 4
# warps a router row (ETCH_MOE_LOGIT_PARTS=4, new, off by default). Op tests (MoE cases)
# in three modes; a warm-up run first (the kernels compile via NVRTC on a fresh machine),
# then 3 interleaved rounds of the 6 variants, then generate (greedy ids must agree).
# moe_up_early and ETCH_MOE_LOGIT_PARTS were reverted after this call (BENCHMARKS.md,
# session 14): on main only ETCH_MOE_ROUTE_IN_BLOCKS remains.
set -uo pipefail
exec > >(tee $OUT/run1.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpuq/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (default)"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | tail -4
for v in "ETCH_MOE_ROUTE_IN_BLOCKS=1 ETCH_MOE_LOGIT_PARTS=4" "ETCH_MOE_LOGIT_PARTS=4"; do
  echo "== etch:: CUDA kernels vs CPU ($v)"; env $v $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | tail -4
done

wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== warm-up"; timeout 150 $B/etch bench /tmp/q20n.pte $A --iterations 3 2>&1 | grep execute
V=("ETCH_MOE_UP_EARLY=0" "ETCH_MOE_UP_EARLY=1" "ETCH_MOE_UP_EARLY=1 ETCH_MOE_LOGIT_PARTS=4"
   "ETCH_MOE_UP_EARLY=0 ETCH_MOE_ROUTE_IN_BLOCKS=1" "ETCH_MOE_UP_EARLY=1 ETCH_MOE_ROUTE_IN_BLOCKS=1"
   "ETCH_MOE_UP_EARLY=1 ETCH_MOE_ROUTE_IN_BLOCKS=1 ETCH_MOE_LOGIT_PARTS=4")
for r in 1 2 3; do
  for v in "${V[@]}"; do
    echo "-- $v: $(env $v timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute)"
  done
done
echo "== generate, 20 layers: the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
i=0
for v in "${V[@]}"; do
  env $v timeout 60 $B/etch generate /tmp/q20n.pte $P > /tmp/g$i.json 2>/tmp/g$i.err; tail -1 /tmp/g$i.err; i=$((i+1))
done
python3 - "${V[@]}" <<'PY'
import json, sys
js = [json.load(open(f"/tmp/g{i}.json")) for i in range(len(sys.argv) - 1)]
for v, j in zip(sys.argv[1:], js):
    print(f"{v:50s} ids equal to the first: {j['generated_ids'] == js[0]['generated_ids']} ({len(j['generated_ids'])}) decode tok/s {j['decode_tok_s']:.1f}")
PY
echo "== elapsed ${SECONDS} s"
if [ $SECONDS -lt 380 ]; then
  echo "== ncu: the MoE kernels (graphs off), main's kernels vs all three changes"
  for v in "${V[0]}" "${V[5]}"; do
    echo "-- $v"
    env $v ETCH_CUDA_GRAPHS=0 timeout 90 /usr/local/cuda/bin/ncu --kernel-name regex:"moe_" --launch-skip 60 --launch-count 9 --section SpeedOfLight $B/etch bench /tmp/q20n.pte $A --iterations 2 2>/dev/null | grep -E "^  moe_|Duration" | paste - - | awk '{print $1, $(NF)}' | sort | uniq -c | head -12
  done
fi
rm -rf /tmp/ck20
