#!/usr/bin/env bash
# Session 10, GPU call 4: device-resident decode inputs (etch lower --skip-h2d-inputs
# --skip-d2h-outputs; etch generate keeps token, position and sampling on the device).
# The Qwen fixture tests on the real GPU (ids vs transformers, transfer counts), then
# the 4-layer 35B-sized model: host inputs vs device inputs, 64 new tokens, CUDA graphs.
set -uo pipefail
exec > >(tee $OUT/run4.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpu/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/tmp/ck4
python3 $B/qwen35_bench.py make-ckpt --config $B/config4.json --out $C > /tmp/mk4.log 2>&1 &
MK=$!
echo "== Qwen 3.5 MoE fixture tests on the H200"; .gpu/qwen-tests --test-threads=1 2>&1 | grep -E "^test |test result|panicked"
wait $MK; tail -1 /tmp/mk4.log
$B/etch lower $B/q4.pte -o /tmp/q4.host.pte --ops cuda > /dev/null || exit 1
$B/etch lower $B/q4.pte -o /tmp/q4.dev.pte --ops cuda --skip-h2d-inputs --skip-d2h-outputs > /dev/null || exit 1
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 128), generator=g)[0].tolist())))")
for r in 1 2; do for m in host dev; do
  echo "-- $m inputs"
  timeout 120 $B/etch generate /tmp/q4.$m.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 128 --warmup --json | python3 -c "import json,sys; d=json.load(sys.stdin); print('decode tok/s', round(d['decode_tok_s'],1), 'calls', d['decode_calls'], d['decode_transfers'], 'first ids', d['generated_ids'][:8])"
done; done
