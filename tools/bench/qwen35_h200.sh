#!/usr/bin/env bash
# Qwen 3.5 MoE 35B-A3B on a lent H200 machine (nvidia-h200-x2: the bf16 checkpoint is 65
# GiB on disk), etch against transformers on the same random weights.
#
#   Here:      python tools/export/qwen3_5_moe.py --model CFG_DIR -o B/qwen35moe.pte
#              (CFG_DIR/config.json: the 35B-A3B config), cp CFG_DIR/config.json B/,
#              cp target/release/etch target/release/examples/load_bench B/ (cargo build
#              --release --example load_bench), then run this script on the device with
#              BUNDLE=B and OUT=<log dir>.
#   There:     tools/bench/qwen35_h200.sh
#
# Steps: a random bf16 checkpoint (save_pretrained, per-expert keys) on local disk; `etch
# lower --ops cuda`; (step "load", not in the default steps: the weights streamed to cuda:0
# by examples/load_bench with 4, 8 and 16 copy threads, GB/s and peak RSS, then `etch
# generate`'s load_s, load_gb_s, peak_host_bytes and peak_device_bytes with the default
# threads); `etch generate` greedy, with and without CUDA graphs, on cuda:0;
# transformers (grouped_mm experts) on cuda:1 with the same prompt. Prompt: 128 ids from
# torch.Generator().manual_seed(0), as tools/bench/qwen35_bench.py hf draws them.
set -uo pipefail
BUNDLE=${BUNDLE:?the folder with etch, qwen35moe.pte and config.json}
OUT=${OUT:-/tmp/qwen35-out}
CKPT=${CKPT:-/tmp/qwen35-ckpt}
NEW=${NEW:-64}
# Steps to run (a call on the lent machines lasts at most 10 minutes: run "ckpt,etch" then
# "hf" in a second call while the machine is still warm).
STEPS=${STEPS:-ckpt,etch,hf}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
if has ckpt && [ ! -f "$CKPT/config.json" ]; then
  echo "== random bf16 checkpoint"
  python3 tools/bench/qwen35_bench.py make-ckpt --config "$BUNDLE/config.json" --out "$CKPT" || exit 1
fi
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 128), generator=g)[0].tolist())))")
if has load; then
echo "== weight loading onto cuda:0 (page cache warm after the first pass)"
[ -f /tmp/qwen35moe.cuda.pte ] || "$BUNDLE/etch" lower "$BUNDLE/qwen35moe.pte" -o /tmp/qwen35moe.cuda.pte --ops cuda > /dev/null || exit 1
for t in 16 4 8 16; do
  echo "-- load_bench, ETCH_COPY_THREADS=$t"
  ETCH_COPY_THREADS=$t timeout 300 "$BUNDLE/load_bench" /tmp/qwen35moe.cuda.pte "$CKPT"
done
echo "-- etch generate (1 token): load figures"
timeout 420 "$BUNDLE/etch" generate /tmp/qwen35moe.cuda.pte --weights "$CKPT" --prompt-ids "$IDS" \
  --max-new-tokens 1 --json > "$OUT/etch_load.json"
echo "rc=$?"; python3 -c "import json; d=json.load(open('$OUT/etch_load.json')); print({k: d[k] for k in ('load_s','load_bytes','load_gb_s','peak_host_bytes','peak_device_bytes')})"
fi
if has etch; then
echo "== etch lower --ops cuda"
"$BUNDLE/etch" lower "$BUNDLE/qwen35moe.pte" -o /tmp/qwen35moe.cuda.pte --ops cuda --json > "$OUT/lower.json" || exit 1
python3 -c "import json; d=json.load(open('$OUT/lower.json')); [print(m['method'], {k: m[k] for k in ('delegates','host_instructions','device_state','host_state')}) for m in d['methods'] if m['method'] in ('prefill','decode')]"
echo "== etch generate (CUDA graphs), cuda:0"
timeout 420 "$BUNDLE/etch" generate /tmp/qwen35moe.cuda.pte --weights "$CKPT" --prompt-ids "$IDS" \
  --max-new-tokens "$NEW" --json > "$OUT/etch.json"
echo "rc=$?"; python3 -c "import json; d=json.load(open('$OUT/etch.json')); d.pop('prompt_ids'); print(json.dumps(d))"
echo "== etch generate --no-cuda-graphs, cuda:0"
timeout 420 "$BUNDLE/etch" generate /tmp/qwen35moe.cuda.pte --weights "$CKPT" --prompt-ids "$IDS" \
  --max-new-tokens 16 --no-cuda-graphs --json > "$OUT/etch_nograph.json"
echo "rc=$?"; python3 -c "import json; d=json.load(open('$OUT/etch_nograph.json')); d.pop('prompt_ids'); print(json.dumps(d))"
fi
if has hf; then
echo "== transformers, cuda:1 (grouped_mm experts)"
CUDA_VISIBLE_DEVICES=1 timeout 420 python3 tools/bench/qwen35_bench.py hf --ckpt "$CKPT" \
  --prompt-len 128 --new 32 --json "$OUT/hf.json"
echo "== agreement of greedy ids (bf16)"
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
e = json.load(open(f"{o}/etch.json"))["generated_ids"]
h = json.load(open(f"{o}/hf.json"))["generated_ids"]
n = 0
for a, b in zip(e, h):
    if a != b:
        break
    n += 1
print(f"etch and transformers agree on the first {n} of {min(len(e), len(h))} greedy ids")
print("etch:", e[:32]); print("hf:  ", h[:32])
PY
fi
