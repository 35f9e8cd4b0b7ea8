#!/usr/bin/env bash
# Teacher-forced accuracy at the 35B layer sizes (4 layers): etch and transformers, each in float32
# and bfloat16, against transformers-f32 over its 256 greedy ids (not yet run: the 2026-12-01 session ran
# out of device time; see BENCHMARKS.md). Bundle as qwen35_kernels.sh plus q4l.pte and q4l32.pte
# (--logits, and --logits --dtype f32).
# Teacher-forced accuracy at the 35B layer sizes (4 layers): etch and transformers, each in
# float32 and bfloat16, over transformers-f32's 256 greedy ids.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1
B=${BUNDLE:-.gpuq}; C=/tmp/ck4; P="python3 $B/qwen35_bench.py"
echo "== $(date -u)"
$P make-ckpt --config $B/config4.json --out $C 2>&1 | grep saved
$P hf --ckpt $C --prompt-len 128 --new 256 --dtype f32 --json /tmp/hf32.json 2>&1 | grep -o '"decode_tok_s[^,]*'
$P teacher --ckpt $C --ids-json /tmp/hf32.json --dtype f32 --out /tmp/r32.npy 2>&1 | grep teacher
$P teacher --ckpt $C --ids-json /tmp/hf32.json --dtype bf16 --out /tmp/r16.npy 2>&1 | grep teacher
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('/tmp/hf32.json'))['prompt_ids'])))")
F=$(python3 -c "import json; print(','.join(map(str, json.load(open('/tmp/hf32.json'))['generated_ids'])))")
$B/etch lower $B/q4l32.pte -o /tmp/e32.pte --ops cuda >/dev/null && $B/etch lower $B/q4l.pte -o /tmp/e16.pte --ops cuda >/dev/null
$B/etch generate /tmp/e32.pte --weights $C --convert-dtype --prompt-ids "$IDS" --force-ids "$F" --save-logits /tmp/e32.npy --json > /tmp/e32.json || echo "etch f32 failed"
$B/etch generate /tmp/e16.pte --weights $C --prompt-ids "$IDS" --force-ids "$F" --save-logits /tmp/e16.npy --json > /tmp/e16.json || echo "etch bf16 failed"
for pair in "r32 e32" "r32 r16" "r32 e16" "r16 e16"; do set -- $pair; echo "== $1 vs $2"; $P compare --ref /tmp/$1.npy --etch /tmp/$2.npy; done
