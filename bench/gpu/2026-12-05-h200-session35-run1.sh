#!/usr/bin/env bash
# Session 35, call 1: teacher-forced accuracy in float32 and bfloat16 at the 35B-A3B layer
# sizes with L layers (L=40, the full depth, needs an H200: the f32 model is 138.6 GB; L=20,
# 71.4 GB in f32, fits an H100), seeded random weights as session 16: etch and transformers
# each against transformers-f32, teacher-forced over the prompt and the 256 ids of session
# 16's transformers greedy run (bench/gpu/2026-12-02-h200-session16-40layer/hf.json; any id
# sequence serves for teacher forcing). One engine on the GPU at a time. Bundle .gpuq: etch,
# q${L}l.pte and q${L}l32.pte (tools/export/qwen3_5_moe.py --model CFG_L --logits
# [--dtype f32] --max-seq-len 4096), config${L}.json, hf40.json, qwen35_bench.py.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1
export ETCH_CACHE_DIR=/tmp/etchcache  # kept while the machine stays warm
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
L=${L:-$([ "$MIB" -ge 140000 ] && echo 40 || echo 20)}; B=.gpuq; C=/dev/shm/ck$L; T=/tmp/acc$L; P="python3 $B/qwen35_bench.py"
mkdir -p $T
echo "== L=$L $(date -u) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
[ -f $C/config.json ] || $P make-ckpt --config $B/config$L.json --out $C 2>&1 | grep -E "built|saved"
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('$B/hf40.json'))['prompt_ids'])))")
F=$(python3 -c "import json; print(','.join(map(str, json.load(open('$B/hf40.json'))['generated_ids'])))")
$B/etch lower $B/q${L}l32.pte -o $T/e32.pte --ops cuda >/dev/null && $B/etch lower $B/q${L}l.pte -o $T/e16.pte --ops cuda >/dev/null
run() { local name=$1; shift; local t0=$(date +%s); "$@"; echo "[$name: rc=$? in $(( $(date +%s) - t0 )) s]"; }
echo "== etch float32, teacher-forced"
run etch32 timeout 240 $B/etch generate $T/e32.pte --weights $C --convert-dtype --prompt-ids "$IDS" --force-ids "$F" --max-new-tokens 256 --save-logits $T/e32.npy --json > $T/e32.json
python3 -c "import json; r=json.load(open('$T/e32.json')); print({k: r.get(k) for k in ('load_s','load_gb_s','peak_device_bytes','decode_tok_s','warmup_prefill_s')})"
echo "== transformers float32, teacher-forced"
run hf32 timeout 200 $P teacher --ckpt $C --ids-json $B/hf40.json --dtype f32 --out $T/r32.npy
echo "== e32 vs r32"; $P compare --ref $T/r32.npy --etch $T/e32.npy
echo "== etch bfloat16, teacher-forced"
run etch16 timeout 90 $B/etch generate $T/e16.pte --weights $C --prompt-ids "$IDS" --force-ids "$F" --max-new-tokens 256 --save-logits $T/e16.npy --json > $T/e16.json
echo "== transformers bfloat16, teacher-forced"
run hf16 timeout 120 $P teacher --ckpt $C --ids-json $B/hf40.json --dtype bf16 --out $T/r16.npy
for pair in "r32 r16" "r32 e16" "r16 e16" "e32 e16"; do set -- $pair; echo "== $1 vs $2"; $P compare --ref $T/$1.npy --etch $T/$2.npy; done
cp $T/*.json $OUT/ 2>/dev/null; free -g
echo "== the Qwen fixture on this GPU (tests/qwen3_5_moe.rs: ids, PCIe bytes, CUDA graph counts)"
mkdir -p target/release && cp $B/etch target/release/etch
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
timeout 150 $B/qwen-tests --test-threads=1 2>&1 | tail -14
