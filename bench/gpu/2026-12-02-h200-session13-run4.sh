#!/usr/bin/env bash
# Session 13, GPU call 4: one-row MoE routed by the blocks of moe_up and moe_down_row
# themselves (no routing tail in moe_logits). Ops vs CPU (MoE cases: 64/100/256/640
# experts, tied), then the 20-layer decode step base (main) / new / new with
# ETCH_MOE_ROUTE_IN_BLOCKS=0, and generate new vs base (ids equal).
set -uo pipefail
exec > >(tee $OUT/run4.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked|moe" | tail -6
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
timeout 60 $B/etch_base bench /tmp/q20n.pte $A --iterations 3 > /dev/null 2>&1
for r in 1 2; do
  echo "-- base $(timeout 30 $B/etch_base bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute)"
  echo "-- new $(timeout 30 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute)"
  echo "-- new, ETCH_MOE_ROUTE_IN_BLOCKS=0 $(ETCH_MOE_ROUTE_IN_BLOCKS=0 timeout 30 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute)"
done
echo "== generate, 20 layers: the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 60 $B/etch generate /tmp/q20n.pte $P > /tmp/gn.json 2>/tmp/gn.err; tail -1 /tmp/gn.err
timeout 60 $B/etch_base generate /tmp/q20n.pte $P > /tmp/go.json 2>/tmp/go.err; tail -1 /tmp/go.err
python3 - <<'PY'
import json
n, o = json.load(open("/tmp/gn.json")), json.load(open("/tmp/go.json"))
print("ids equal:", n["generated_ids"] == o["generated_ids"], len(n["generated_ids"]),
      "| decode tok/s new", round(n["decode_tok_s"], 1), "base", round(o["decode_tok_s"], 1))
PY
rm -rf /tmp/ck20
