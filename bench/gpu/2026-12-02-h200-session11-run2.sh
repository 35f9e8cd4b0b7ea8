#!/usr/bin/env bash
# Session 11, GPU call 2: the add_rms_norm + moe fusion only (the GEMV prologue was dropped)
# and moe_down_row with its activations staged as float32 and both weight rounds loaded at
# once. Op tests (fused == its two calls bitwise), the Qwen fixture on the GPU, and the
# 20-layer decode step: main at the start of the session (base) vs now, fused and not.
set -uo pipefail
exec > >(tee $OUT/run2.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (incl. the fused norm call)"; .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "add_rms_norm_moe|moe bfloat16 rows=1 |test result|FAIL|panicked" | head -40
echo "== Qwen fixture on the GPU"; .gpu/qwen-tests 2>&1 | grep -E "test |test result" | head -20
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.f.pte --ops cuda | grep -E "norms" | head -1
$B/etch lower $B/q20.pte -o /tmp/q20.n.pte --ops cuda --no-norm-fusion > /dev/null || exit 1
$B/etch_base lower $B/q20.pte -o /tmp/q20.b.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== decode step, 20 layers: base = main at 3a03c26; new f = fused norm, new n = not fused"
for r in 1 2 3; do
  echo "-- base"; timeout 100 $B/etch_base bench /tmp/q20.b.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new f"; timeout 100 $B/etch bench /tmp/q20.f.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new n"; timeout 100 $B/etch bench /tmp/q20.n.pte $A --iterations 300 2>&1 | grep execute
done
echo "== generate, 20 layers: base vs new (fused); the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20.f.pte $P > /tmp/gf.json 2>/tmp/gf.err; tail -2 /tmp/gf.err
timeout 120 $B/etch_base generate /tmp/q20.b.pte $P > /tmp/gb.json 2>/tmp/gb.err; tail -2 /tmp/gb.err
python3 - <<'PY'
import json
f, b = json.load(open("/tmp/gf.json")), json.load(open("/tmp/gb.json"))
print("ids equal:", f["generated_ids"] == b["generated_ids"], len(f["generated_ids"]),
      "| decode tok/s new", round(f["decode_tok_s"], 1), "base", round(b["decode_tok_s"], 1),
      "| prefill tok/s new", round(f["prefill_tok_s"], 1), "base", round(b["prefill_tok_s"], 1))
PY
rm -rf /tmp/ck20
