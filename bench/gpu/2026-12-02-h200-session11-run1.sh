#!/usr/bin/env bash
# Session 11, GPU call 1: the fused norm calls (etch lower's norm fusion: the norm inside the
# consumer's first kernel) -- op tests vs the CPU, the Qwen fixture on the real GPU (ids vs
# transformers, fused and not), and the 20-layer decode step with and without the fusion.
set -uo pipefail
exec > >(tee $OUT/run1.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (incl. the fused norm calls)"; .gpu/cuda-etch-ops-tests --nocapture 2>&1 | grep -E "fused|add_rms|rms_norm_linear|test result|FAIL|panicked" | head -40
echo "== Qwen fixture on the GPU"; .gpu/qwen-tests 2>&1 | grep -E "test |test result" | head -20
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20.f.pte --ops cuda | grep -E "norms|linears" | head -2
$B/etch lower $B/q20.pte -o /tmp/q20.n.pte --ops cuda --no-norm-fusion > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
echo "== decode step, 20 layers: fused norms (f) vs not (n); f+lm: LM head GEMV with the norm inside too"
for r in 1 2 3; do
  echo "-- f"; timeout 100 $B/etch bench /tmp/q20.f.pte $A --iterations 300 2>&1 | grep execute
  echo "-- n"; timeout 100 $B/etch bench /tmp/q20.n.pte $A --iterations 300 2>&1 | grep execute
  echo "-- f+lm"; ETCH_NORM_PROLOGUE_ROWS=1000000 timeout 100 $B/etch bench /tmp/q20.f.pte $A --iterations 300 2>&1 | grep execute
done
echo "== generate, 20 layers, fused (greedy ids of both programs must agree)"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 64 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20.f.pte $P > /tmp/gf.json 2>/tmp/gf.err; tail -2 /tmp/gf.err
timeout 120 $B/etch generate /tmp/q20.n.pte $P > /tmp/gn.json 2>/tmp/gn.err
python3 - <<'PY'
import json
f, n = json.load(open("/tmp/gf.json")), json.load(open("/tmp/gn.json"))
print("ids equal:", f["generated_ids"] == n["generated_ids"], len(f["generated_ids"]), "decode tok/s fused", f.get("decode_tok_s"), "unfused", n.get("decode_tok_s"))
PY
rm -rf /tmp/ck20
