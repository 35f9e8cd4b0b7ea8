#!/usr/bin/env bash
# Teacher-forced accuracy at the 35B-A3B layer sizes: etch and transformers, each in float32 and
# bfloat16, against transformers-f32 over its 256 greedy ids. L layers of the real config (4 by
# default; 20 on the one-GPU machine). Bundle B: etch, qwen35_bench.py, configL.json and qLl.pte /
# qLl32.pte (tools/export/qwen3_5_moe.py --model CFG_L --logits [--dtype f32] --max-seq-len 4096).
# Reuses the checkpoint at CK (default /tmp/ckL) when it is there. IDS_JSON=FILE (prompt_ids and
# generated_ids, as `qwen35_bench.py hf --json` writes) teacher-forces those ids instead of
# transformers-f32's own greedy ones (any id sequence serves), which skips that greedy run.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1
B=${BUNDLE:-.gpuq}; L=${L:-4}; C=${CK:-/tmp/ck$L}; P="python3 $B/qwen35_bench.py"; T=/tmp/acc$L
mkdir -p $T
echo "== $(date -u) accuracy, $L layers"
[ -f $C/config.json ] || $P make-ckpt --config $B/config$L.json --out $C 2>&1 | grep saved
J=${IDS_JSON:-$T/hf32.json}
[ -n "${IDS_JSON:-}" ] || $P hf --ckpt $C --prompt-len 128 --new 256 --dtype f32 --json $J 2>&1 | grep -o '"decode_tok_s[^,]*'
$P teacher --ckpt $C --ids-json $J --dtype f32 --out $T/r32.npy 2>&1 | grep teacher
$P teacher --ckpt $C --ids-json $J --dtype bf16 --out $T/r16.npy 2>&1 | grep teacher
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('$J'))['prompt_ids'])))")
F=$(python3 -c "import json; print(','.join(map(str, json.load(open('$J'))['generated_ids'])))")
$B/etch lower $B/q${L}l32.pte -o $T/e32.pte --ops cuda >/dev/null && $B/etch lower $B/q${L}l.pte -o $T/e16.pte --ops cuda >/dev/null
$B/etch generate $T/e32.pte --weights $C --convert-dtype --prompt-ids "$IDS" --force-ids "$F" --save-logits $T/e32.npy --json > $T/e32.json || echo "etch f32 failed"
$B/etch generate $T/e16.pte --weights $C --prompt-ids "$IDS" --force-ids "$F" --save-logits $T/e16.npy --json > $T/e16.json || echo "etch bf16 failed"
for pair in "r32 e32" "r32 r16" "r32 e16" "r16 e16"; do set -- $pair; echo "== $1 vs $2"; $P compare --ref $T/$1.npy --etch $T/$2.npy; done
