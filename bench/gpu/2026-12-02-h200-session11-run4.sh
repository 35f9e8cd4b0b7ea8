#!/usr/bin/env bash
# Session 11, GPU call 4: gdn_recur reads input_pos, its state rows and its gate constants
# before the PDL wait (new = that + call 3's moe_down_row; c3 = call 3's binary; base = main
# at 3a03c26). Op tests first (the gdn cases cover gdn_recur), then the 20-layer decode step
# and a 4-layer one, and generate's ids.
set -uo pipefail
exec > >(tee $OUT/run4.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "^gdn |test result|FAIL|panicked" | head -20
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== decode step, 20 layers"
for r in 1 2 3; do
  for v in etch_base etch_c3 etch; do
    echo "-- $v"; timeout 100 $B/$v bench /tmp/q20.pte $A --iterations 300 2>&1 | grep execute
  done
done
echo "== generate, 20 layers: base vs new; the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20.pte $P > /tmp/gf.json 2>/tmp/gf.err; tail -2 /tmp/gf.err
timeout 120 $B/etch_base generate /tmp/q20.pte $P > /tmp/gb.json 2>/tmp/gb.err; tail -2 /tmp/gb.err
python3 - <<'PY'
import json
f, b = json.load(open("/tmp/gf.json")), json.load(open("/tmp/gb.json"))
print("ids equal:", f["generated_ids"] == b["generated_ids"], len(f["generated_ids"]),
      "| decode tok/s new", round(f["decode_tok_s"], 1), "base", round(b["decode_tok_s"], 1),
      "| prefill tok/s new", round(f["prefill_tok_s"], 1), "base", round(b["prefill_tok_s"], 1))
PY
rm -rf /tmp/ck20
