#!/usr/bin/env bash
# Session 16, call 2 (nvidia-h200): the MoE routing in one warp (moe_route_warp, new default;
# ETCH_MOE_ROUTE_WARP=0 = the whole-block routing of main) on the full 40-layer model (RAM-disk
# checkpoint as call 1). Op tests in both modes, a warm-up (NVRTC), 3 interleaved rounds of
# the decode step, generate in both modes (greedy ids must agree), ncu of moe_logits.
# moe_route_warp lost (moe_logits 11.6 -> 14.7 us, decode step 3.21 -> 3.32 ms) and was reverted after
# this call (BENCHMARKS.md, session 16): on main ETCH_MOE_ROUTE_WARP does nothing.
set -uo pipefail
exec > >(tee $OUT/run2.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/dev/shm/ck40
python3 $B/qwen35_bench.py make-ckpt --config $B/config40.json --out $C > /tmp/mk.log 2>&1 &
MK=$!
for v in ETCH_MOE_ROUTE_WARP=1 ETCH_MOE_ROUTE_WARP=0; do
  echo "== etch:: CUDA kernels vs CPU ($v)"; env $v $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | tail -4
done
wait $MK; grep saved /tmp/mk.log
$B/etch lower $B/q40.pte -o /tmp/q40n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C"
echo "== warm-up"; timeout 200 $B/etch bench /tmp/q40n.pte $A --iterations 3 2>&1 | grep execute
V=("ETCH_MOE_ROUTE_WARP=0" "ETCH_MOE_ROUTE_WARP=1")
for r in 1 2 3; do
  for v in "${V[@]}"; do
    echo "-- $v: $(env $v timeout 60 $B/etch bench /tmp/q40n.pte $A --iterations 300 2>&1 | grep execute)"
  done
done
echo "== generate, 40 layers, 128-token prompt, 256 new: the greedy ids must agree"
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 128), generator=g)[0].tolist())))")
i=0
for v in "${V[@]}"; do
  env $v timeout 90 $B/etch generate /tmp/q40n.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 256 --warmup --json > $OUT/gen_$i.json 2>/tmp/g$i.err; tail -1 /tmp/g$i.err; i=$((i+1))
done
python3 - "$OUT" "${V[@]}" <<'PY'
import json, sys
o = sys.argv[1]
js = [json.load(open(f"{o}/gen_{i}.json")) for i in range(len(sys.argv) - 2)]
for v, j in zip(sys.argv[2:], js):
    print(f"{v:30s} ids equal to the first: {j['generated_ids'] == js[0]['generated_ids']} ({len(j['generated_ids'])}) decode tok/s {j['decode_tok_s']:.1f} prefill {j['prefill_tok_s']:.0f}")
PY
echo "== elapsed ${SECONDS} s"
if [ $SECONDS -lt 450 ]; then
  echo "== ncu: moe_logits (graphs off), duration of 8 launches"
  for v in "${V[@]}"; do
    echo "-- $v"
    env $v ETCH_CUDA_GRAPHS=0 timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:"moe_logits" --launch-skip 40 --launch-count 8 --section SpeedOfLight $B/etch bench /tmp/q40n.pte $A --iterations 1 2>/dev/null | grep -E "Duration" | awk '{print $NF}' | tr '\n' ' '; echo
  done
fi
echo "== elapsed ${SECONDS} s"
