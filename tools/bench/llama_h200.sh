#!/usr/bin/env bash
# Llama-3.2-1B-shaped random checkpoint on one H200: etch against transformers (eager) and
# PyTorch with CUDA graphs (torch.compile reduce-overhead, static cache), fp32 and bf16,
# 256 new tokens after a 128-token prompt, greedy. Prints decode tok/s per engine.
#
#   tools/bench/llama_h200.sh bundle      # here: builds etch, exports the programs (needs
#                                         # /work/venv with executorch) into $BUNDLE
#   OUT=<log dir> tools/bench/llama_h200.sh run     # on the GPU machine, from the repo root
#
# Bundle ($BUNDLE, default .gpuq-llama, git-ignored; carry it to the GPU machine): etch
# (release, stripped), llama_bench.py, config.json (below), llama_fp32.pte and
# llama_bf16.pte. The programs are ExecuTorch's stock export_llm output for the config
# (llama3_2 class, use_kv_cache + use_sdpa_with_kv_cache, dynamic prompt length up to 512,
# KV cache of 2048 positions) with every weight an external constant known by name only, so
# they hold no weight bytes (a 1B fp32 .pte would be 5 GB). On the GPU machine make-ckpt
# builds a seeded random LlamaForCausalLM (transformers), saves it for transformers, and
# writes the same weights under ExecuTorch's names for `etch generate --weights` (the bf16
# program reads the float32 file with --convert-dtype). Both engines see the same weights.
# STEPS (default ckpt,hf,graphs,etch) picks the parts; the checkpoint is kept in $CK; NEW
# and PLEN change the token counts; ETCH_EXTRA adds etch generate options; TORCH_DEVICE
# (default cuda) is where the PyTorch engines run (cpu: to try the script without a GPU).
set -uo pipefail
B=${BUNDLE:-.gpuq-llama}

config() {
  cat <<'JSON'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "use_cache": true,
  "vocab_size": 128256
}
JSON
}

bundle() {
  local py=${PYTHON:-/work/venv/bin/python}
  rm -rf "$B" && mkdir -p "$B"
  cargo build --release --bin etch || exit 1
  cp "${CARGO_TARGET_DIR:-target}/release/etch" "$B/" && strip "$B/etch"
  cp tools/bench/llama_bench.py "$B/"
  config > "$B/config.json"
  for dt in fp32 bf16; do
    "$py" tools/bench/llama_bench.py export --config "$B/config.json" --dtype $dt \
      -o "$B/llama_$dt.pte" --max-seq-len 512 --max-context-len 2048 > "$B/export_$dt.log" 2>&1 \
      || { tail -20 "$B/export_$dt.log"; exit 1; }
    "$B/etch" lower "$B/llama_$dt.pte" -o /tmp/llama_$dt.cuda.pte --ops cuda | sed -n 2,5p
  done
  du -sh "$B"/*
}

run() {
  export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
  export PYTHONUNBUFFERED=1 ETCH_REQUIRE_CUDA=1
  local O=${OUT:-/tmp/llama-bench} CK=${CK:-/tmp/llama1b} STEPS=${STEPS:-ckpt,hf,graphs,etch}
  local NEW=${NEW:-256} PLEN=${PLEN:-128}
  has() { [[ ",$STEPS," == *",$1,"* ]]; }
  mkdir -p "$O"
  echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  if has ckpt && [ ! -f "$CK/etch/model.safetensors" ]; then
    python3 "$B/llama_bench.py" make-ckpt --config "$B/config.json" --out "$CK" --seed 0 2>&1 | grep -v Writing || exit 1
  fi
  local ids
  # The prompt llama_bench.py's engines use: seeded ids below the vocabulary size.
  ids=$(python3 -c "import json, torch; v=json.load(open('$B/config.json'))['vocab_size']; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, v, (1, $PLEN), generator=g)[0].tolist())))")
  for dt in fp32 bf16; do
    if has hf; then
      echo "== transformers eager, $dt"
      timeout 300 python3 "$B/llama_bench.py" hf --ckpt "$CK/hf" --dtype $dt --prompt-len "$PLEN" --new "$NEW" --device "${TORCH_DEVICE:-cuda}" --json "$O/hf_$dt.json"
    fi
    if has graphs; then
      echo "== PyTorch + CUDA graphs (torch.compile reduce-overhead, static cache), $dt"
      timeout 540 python3 "$B/llama_bench.py" graphs --ckpt "$CK/hf" --dtype $dt --prompt-len "$PLEN" --new "$NEW" --device "${TORCH_DEVICE:-cuda}" --json "$O/graphs_$dt.json" 2>&1 | grep -v "^W\|warn" | tail -5
    fi
    if has etch; then
      echo "== etch generate, $dt (lowered with --ops cuda)"
      "$B/etch" lower "$B/llama_$dt.pte" -o "/tmp/llama_$dt.cuda.pte" --ops cuda | sed -n 2,4p
      local conv=""; [ $dt = bf16 ] && conv=--convert-dtype
      # shellcheck disable=SC2086 # $conv and $ETCH_EXTRA are lists of words
      timeout 300 "$B/etch" generate "/tmp/llama_$dt.cuda.pte" --weights "$CK/etch" $conv ${ETCH_EXTRA:-} \
        --prompt-ids "$ids" --max-new-tokens "$NEW" --warmup --json > "$O/etch_$dt.raw.json" || echo "etch $dt failed"
      python3 - "$O/etch_$dt.raw.json" "$O/etch_$dt.json" $dt "$PLEN" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = {"engine": "etch (CUDA graphs)", "dtype": sys.argv[3], "load_s": d.get("load_s"),
     "prompt_len": int(sys.argv[4]), "new_tokens": len(d["generated_ids"]),
     "prefill_tok_s": d.get("prefill_tok_s"), "decode_tok_s": d.get("decode_tok_s"),
     "generated_ids": d["generated_ids"], "peak_device_bytes": d.get("peak_device_bytes")}
json.dump(r, open(sys.argv[2], "w"))
print(json.dumps({k: v for k, v in r.items() if k != "generated_ids"}))
PY
      echo "== etch generate --no-cuda-graphs, $dt, 64 new"
      # shellcheck disable=SC2086
      timeout 300 "$B/etch" generate "/tmp/llama_$dt.cuda.pte" --weights "$CK/etch" $conv ${ETCH_EXTRA:-} \
        --prompt-ids "$ids" --max-new-tokens 64 --no-cuda-graphs --warmup --json \
        | python3 -c "import json,sys; d=json.load(sys.stdin); print('decode tok/s', round(d['decode_tok_s'],1), 'prefill tok/s', round(d['prefill_tok_s'],1))"
    fi
  done
  echo "== summary (same ids: leading greedy ids equal to the first row's, per dtype)"
  for dt in fp32 bf16; do
    local files=()
    for e in hf graphs etch; do [ -f "$O/${e}_$dt.json" ] && files+=("$O/${e}_$dt.json"); done
    [ ${#files[@]} -gt 0 ] && python3 "$B/llama_bench.py" report "${files[@]}"
  done
}

case "${1:-}" in
  bundle) bundle ;;
  run) run ;;
  config) config ;;
  *) echo "usage: $0 bundle|run|config" >&2; exit 2 ;;
esac
