#!/usr/bin/env bash
# One-GPU protocol of issue #13 (nvidia-h200, 64 GiB disk): the 35B-A3B config cut to 20 layers.
# Bundle B (default .gpuq, made here): etch, qwen35_bench.py, config20.json (the 35B config with
# num_hidden_layers 20 and its first 20 layer_types), q20.pte and q20l.pte (tools/export/qwen3_5_moe.py
# --model CFG20 [--logits] --max-seq-len 4096), load_bench (cargo build --release --example load_bench).
# Run from the repository root on the GPU machine with OUT=<log dir>; STEPS=etch,hf.
# L=40 (with config40.json, q40.pte, q40l.pte in the bundle) runs the full depth: on
# nvidia-h200-x2, whose disk holds the 65 GiB checkpoint, or on nvidia-h200 with CK=<a RAM
# disk> (its 64 GiB disk does not hold the 69.3 GB; its 128 GiB of memory and 139 GiB of GPU
# memory do).
# Qwen3.5-35B-A3B config with 20 of its 40 layers (LLLF x 5) on one H200: etch (STEPS has
# etch) and transformers plus the teacher-forced check (STEPS has hf), same seeded weights.
# STEPS has hf_fla: transformers again with flash-linear-attention's Triton kernels for the
# Gated DeltaNet, from wheels carried in .whl (here: python3 -m pip download --no-deps -d .whl
# flash-linear-attention==0.6.0 fla-core==0.6.0; the GPU machine has triton and einops).
# load_bench runs when the bundle has it.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
L=${L:-20}; B=${BUNDLE:-.gpuq}; C=${CK:-/tmp/ck$L}; O=$OUT; STEPS=${STEPS:-etch,hf}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
[ -f $C/config.json ] || python3 $B/qwen35_bench.py make-ckpt --config $B/config$L.json --out $C 2>&1 | grep -v Writing
ids() { python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, $1), generator=g)[0].tolist())))"; }
IDS=$(ids 128); IDS1K=$(ids 1024)
show() { python3 -c "import json,sys; d=json.load(open('$1')); [d.pop(k,None) for k in ('prompt_ids','forced_ids')]; g=d.pop('generated_ids'); print(json.dumps(d)); print('first ids', g[:16])"; }
if has etch; then
  $B/etch lower $B/q$L.pte -o /tmp/q$L.cuda.pte --ops cuda > /dev/null || exit 1
  echo "== etch generate, CUDA graphs, 128-token prompt, 256 new"
  timeout 200 $B/etch generate /tmp/q$L.cuda.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 256 --warmup --json > $O/etch128.json; show $O/etch128.json
  if [ -x $B/load_bench ]; then
    echo "== load_bench (streamed weights onto the GPU, warm page cache)"
    timeout 120 $B/load_bench /tmp/q$L.cuda.pte $C 2>&1 | tail -4
  fi
  echo "== etch generate --no-cuda-graphs, 64 new"
  timeout 200 $B/etch generate /tmp/q$L.cuda.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 64 --no-cuda-graphs --warmup --json > $O/etch_nog.json; show $O/etch_nog.json
  echo "== etch generate, 1024-token prompt"
  timeout 200 $B/etch generate /tmp/q$L.cuda.pte --weights $C --prompt-ids "$IDS1K" --max-new-tokens 8 --warmup --json > $O/etch1024.json; show $O/etch1024.json
fi
# transformers' three speed runs; $1 names the variant in the headings and JSON files
# ("" or "_fla"), $2 is its PYTHONPATH.
hf_runs() {
  local tag=$1 path=$2 what="transformers${1:+ + flash-linear-attention}"
  echo "== $what (grouped_mm), 128-token prompt, 256 new"
  PYTHONPATH=$path timeout 300 python3 $B/qwen35_bench.py hf --ckpt $C --prompt-len 128 --new 256 --json $O/hf$tag.json 2>&1 | grep -v "falling back"
  echo "== $what (batched_mm), 32 new"
  PYTHONPATH=$path timeout 200 python3 $B/qwen35_bench.py hf --ckpt $C --prompt-len 128 --new 32 --experts batched_mm --json $O/hf${tag}_bmm.json 2>&1 | grep -v "falling back"
  echo "== $what (grouped_mm), 1024-token prompt"
  PYTHONPATH=$path timeout 200 python3 $B/qwen35_bench.py hf --ckpt $C --prompt-len 1024 --new 4 --json $O/hf${tag}1024.json 2>&1 | grep -v "falling back"
}
if has hf_fla; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fla-site .whl/*.whl || exit 1
  hf_runs _fla /tmp/fla-site
fi
if has hf; then
  hf_runs "" "${PYTHONPATH:-}"
  echo "== teacher-forced check over transformers' 256 greedy ids"
  timeout 200 python3 $B/qwen35_bench.py teacher --ckpt $C --ids-json $O/hf.json --out /tmp/ref.npy 2>&1 | grep -v "falling back"
  $B/etch lower $B/q${L}l.pte -o /tmp/q${L}l.cuda.pte --ops cuda > /dev/null || exit 1
  FORCE=$(python3 -c "import json; print(','.join(map(str, json.load(open('$O/hf.json'))['generated_ids'])))")
  timeout 200 $B/etch generate /tmp/q${L}l.cuda.pte --weights $C --prompt-ids "$IDS" --force-ids "$FORCE" --save-logits /tmp/etch_logits.npy --json > $O/etch_forced.json
  python3 -c "import json; d=json.load(open('$O/etch_forced.json')); print('etch picks equal to transformers greedy ids:', d['forced_agreement'], 'of', len(d['forced_ids']), '| decode tok/s (logits to host)', round(d['decode_tok_s'],1))"
  python3 $B/qwen35_bench.py compare --ref /tmp/ref.npy --etch /tmp/etch_logits.npy
fi
