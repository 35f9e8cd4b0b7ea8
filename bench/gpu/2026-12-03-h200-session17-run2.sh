#!/usr/bin/env bash
# Session 17, call 2 (nvidia-h200): moe_down_row reading its activations straight from global
# memory (new) instead of staging them in shared memory behind a block barrier (base = main
# before the change), on the full 40-layer model (RAM-disk checkpoint as session 16). Op tests
# of the new binary, a warm-up of each (NVRTC), 3 interleaved rounds of the decode step,
# generate with each (greedy ids must agree), ncu of moe_down_row in each.
# Lost in all three forms (calls 2, 3, 5: moe_down_row 14.3 -> 18.5 / 18.5 / 15.8 us, decode step 3.19-3.22 ->
# 3.21-3.25 ms) and reverted (BENCHMARKS.md, session 17): main's binary is the base here.
set -uo pipefail
exec > >(tee $OUT/${RUN:-run2}.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
B=.gpuq; C=/dev/shm/ck40
[ -e $B/bins.tar.xz ] && tar xJf $B/bins.tar.xz -C $B  # the binaries travel compressed
python3 $B/qwen35_bench.py make-ckpt --config $B/config40.json --out $C > /tmp/mk.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU (new)"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked" | tail -4
wait $MK; grep saved /tmp/mk.log
$B/etch lower $B/q40.pte -o /tmp/q40n.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights $C"
E=($B/etch-base $B/etch)
for e in "${E[@]}"; do echo "== warm-up $e"; timeout 200 $e bench /tmp/q40n.pte $A --iterations 3 2>&1 | grep execute; done
for r in 1 2 3; do
  for e in "${E[@]}"; do
    echo "-- $e: $(timeout 60 $e bench /tmp/q40n.pte $A --iterations 300 2>&1 | grep execute)"
  done
done
echo "== generate, 40 layers, 128-token prompt, 256 new: the greedy ids must agree"
IDS=$(python3 -c "import torch; g=torch.Generator().manual_seed(0); print(','.join(map(str, torch.randint(0, 248320, (1, 128), generator=g)[0].tolist())))")
i=0
for e in "${E[@]}"; do
  timeout 90 $e generate /tmp/q40n.pte --weights $C --prompt-ids "$IDS" --max-new-tokens 256 --warmup --json > $OUT/gen_$i.json 2>/tmp/g$i.err; tail -1 /tmp/g$i.err; i=$((i+1))
done
python3 - "$OUT" "${E[@]}" <<'PY'
import json, sys
o = sys.argv[1]
js = [json.load(open(f"{o}/gen_{i}.json")) for i in range(len(sys.argv) - 2)]
for v, j in zip(sys.argv[2:], js):
    print(f"{v:20s} ids equal to the first: {j['generated_ids'] == js[0]['generated_ids']} ({len(j['generated_ids'])}) decode tok/s {j['decode_tok_s']:.1f} prefill {j['prefill_tok_s']:.0f}")
PY
echo "== elapsed ${SECONDS} s"
echo "== ncu: moe_down_row (graphs off), duration of 8 launches"
for e in "${E[@]}"; do
  echo "-- $e"
  ETCH_CUDA_GRAPHS=0 timeout 60 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:"moe_down_row" --launch-skip 40 --launch-count 8 --section SpeedOfLight $e bench /tmp/q40n.pte $A --iterations 1 2>/dev/null | grep -E "Duration" | awk '{print $NF}' | tr '\n' ' '; echo
done
echo "== elapsed ${SECONDS} s"
