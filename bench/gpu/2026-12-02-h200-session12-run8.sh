#!/usr/bin/env bash
# Session 12, GPU call 8: etch::qk_norm_rope (q/gate split, q/k norms, RoPE in one op) on top of
# gated_attention and rope_cos_sin. Op tests on the H200 (the op table has the new ops' cases), the Qwen
# fixture on CUDA, then the 20-layer decode step: base (main, old program), ga (call 7's
# binary and program), new (this binary and program); greedy ids of etch generate.
set -uo pipefail
exec > >(tee $OUT/run11.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpuq/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== op table on CUDA"; $B/cuda-op-table --nocapture 2>&1 | grep -E "cases|test result|FAIL|panicked|gated|rope_cos" | head
echo "== etch:: CUDA kernels vs CPU"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | head -5
echo "== Qwen fixture (ids equal transformers')"; $B/qwen-tests --test-threads=1 2>&1 | grep -E "test result|FAIL|panicked" | head -5
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
$B/etch lower $B/q20_ga.pte -o /tmp/q20r.pte --ops cuda > /dev/null || exit 1
$B/etch lower $B/q20_old.pte -o /tmp/q20o.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
for r in 1 2 3; do
  echo "-- base, old program"; timeout 60 $B/etch_base bench /tmp/q20o.pte $A --iterations 300 2>&1 | grep execute
  echo "-- ga, ga program"; timeout 60 $B/etch_ga bench /tmp/q20r.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new, new program"; timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
done
echo "== generate, 20 layers: new program vs old; the greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20n.pte $P > /tmp/gn.json 2>/tmp/gn.err; tail -2 /tmp/gn.err
timeout 120 $B/etch_base generate /tmp/q20o.pte $P > /tmp/go.json 2>/tmp/go.err; tail -2 /tmp/go.err
python3 - <<'PY'
import json
n, o = json.load(open("/tmp/gn.json")), json.load(open("/tmp/go.json"))
print("ids equal:", n["generated_ids"] == o["generated_ids"], len(n["generated_ids"]),
      "| decode tok/s new", round(n["decode_tok_s"], 1), "base", round(o["decode_tok_s"], 1),
      "| prefill tok/s new", round(n.get("prefill_tok_s", 0), 1), "base", round(o.get("prefill_tok_s", 0), 1))
PY
rm -rf /tmp/ck20
