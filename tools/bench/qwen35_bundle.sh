#!/usr/bin/env bash
# Makes the bundle the H200 protocols (qwen35_h200_1gpu.sh, qwen35_kernels.sh) read, here, with
# the export venv: the 35B-A3B config cut to 4 and 20 layers (and the full 40), their programs
# (sampling and --logits), the decode inputs, the benchmark scripts and the release binaries.
#
#   PY=/work/venv/bin/python tools/bench/qwen35_bundle.sh [B=.gpuq] [LAYERS="4 20"]
#
# Build first: cargo build --release --bin etch --example load_bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}; B=${1:-.gpuq}; LAYERS=${LAYERS:-4 20}
mkdir -p "$B"
for L in $LAYERS; do
  "$PY" - "$L" "$B/config$L.json" <<'PY'
import json, sys
from transformers import Qwen3_5MoeTextConfig
L, out = int(sys.argv[1]), sys.argv[2]
c = Qwen3_5MoeTextConfig()  # the class defaults are the 35B-A3B sizes
d = c.to_dict()
# The released checkpoint's RoPE: theta 1e7 on the first quarter of each head.
d["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
d["num_hidden_layers"] = L
d["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)]
d["architectures"] = ["Qwen3_5MoeForCausalLM"]
d["torch_dtype"] = "bfloat16"
json.dump(d, open(out, "w"), indent=1)
PY
  mkdir -p "/tmp/cfg$L" && cp "$B/config$L.json" "/tmp/cfg$L/config.json"
  "$PY" tools/export/qwen3_5_moe.py --model "/tmp/cfg$L" -o "$B/q$L.pte" --max-seq-len 4096
  [ "$L" = 4 ] || "$PY" tools/export/qwen3_5_moe.py --model "/tmp/cfg$L" -o "$B/q${L}l.pte" --max-seq-len 4096 --logits
done
"$PY" - "$B" <<'PY'
import sys, numpy as np
b = sys.argv[1]
np.save(f"{b}/tok1.npy", np.array([[17]], dtype=np.int64))
np.save(f"{b}/pos128.npy", np.array([128], dtype=np.int64))
# sampling = [temperature, top_k, top_p, u]: greedy
np.save(f"{b}/samp.npy", np.array([0.0, 0.0, 1.0, 0.5], dtype=np.float32))
PY
cp tools/bench/qwen35_bench.py tools/bench/ncu_sum.py "$B/"
cp target/release/etch target/release/examples/load_bench "$B/" && strip "$B/etch" "$B/load_bench"
ls -la "$B"
