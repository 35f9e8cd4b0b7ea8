#!/usr/bin/env bash
# Decode A/B and per-kernel times on the 35B-A3B layer sizes with 4 layers (LLLF): etch bench on the
# decode method with CUDA graphs (default, ETCH_MOE_FUSE=0, ETCH_CUDA_GEMV=0), then ncu over one step.
# Bundle B as in qwen35_h200_1gpu.sh plus config4.json, q4.pte and tok1/pos128/samp .npy inputs.
# A/B of decode on the 4-layer 35B-sized model (CUDA graphs), then ncu per kernel.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
B=${BUNDLE:-.gpuq}; C=/tmp/ck4
echo "== $(date -u) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
[ -f $C/config.json ] || python3 $B/qwen35_bench.py make-ckpt --config $B/config4.json --out $C 2>&1 | grep -v Writing
$B/etch lower $B/q4.pte -o /tmp/q.cuda.pte --ops cuda > /dev/null || exit 1
run() { echo "== decode (graphs) $*"; env "$@" timeout 100 $B/etch bench /tmp/q.cuda.pte --method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C --iterations 100 2>&1 | grep execute; }
STEPS=${STEPS:-decode,ncu,prefill}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
if has decode; then run X=1; run ETCH_MOE_FUSE=0; run ETCH_CUDA_GEMV=0; run X=1; fi
if has ncu; then
echo "== ncu"
timeout 200 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --print-units base $B/etch bench /tmp/q.cuda.pte --method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C --iterations 3 > $OUT/ncu.csv 2> $OUT/ncu.err
echo "rc=$? $(wc -l < $OUT/ncu.csv) lines"
fi
if has prefill; then
# Prefill of a 1024-token prompt (prefill_tok_s of etch generate, graphs off: a prompt is
# one call), A/B of the MoE prefill paths, then ncu over the prefill's kernels.
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 1024), generator=g)[0].tolist())))")
pre() { echo "== prefill 1024 $*"; env "$@" timeout 100 $B/etch generate /tmp/q.cuda.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 2 --warmup --json | python3 -c "import json,sys; d=json.load(sys.stdin); print('prefill tok/s', round(d['prefill_tok_s'],1), 'cold', round(1024 / d['warmup_prefill_s'],1))"; }
pre X=1; pre ETCH_GDN_CHUNK_FROM=1000000000; pre ETCH_MOE_TC_FROM=1000000000; pre ETCH_MOE_TC_FROM=1000000000 ETCH_MOE_BY_EXPERT_FROM=1000000000; pre X=1
echo "== ncu, prefill 1024"
timeout 300 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --print-units base $B/etch generate /tmp/q.cuda.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 1 --no-cuda-graphs > $OUT/ncu_prefill.csv 2> $OUT/ncu_prefill.err
echo "rc=$?"; python3 $B/ncu_sum.py $OUT/ncu_prefill.csv --top 30
fi
