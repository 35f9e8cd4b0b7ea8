#!/usr/bin/env bash
# Session 13, GPU call 1: the CUDA error word in mapped host memory (no 4-byte read-back
# per call) and the routing's candidate ranks. Op tests on the H200, the Qwen fixture with
# the PCIe byte counts, the device-error tests; the 20-layer decode step base / new /
# new with ETCH_MOE_RANK_ALL=1; generate with device inputs (bytes per step); ncu source
# counters of the MoE and delta-rule kernels.
set -uo pipefail
exec > >(tee $OUT/run1.log) 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib ETCH_REQUIRE_CUDA=1
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
mkdir -p target/release && cp .gpuq/etch target/release/etch
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
B=.gpuq
python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 > /tmp/mk20.log 2>&1 &
MK=$!
echo "== etch:: CUDA kernels vs CPU"; $B/cuda-etch-ops-tests 2>&1 | grep -E "test result|FAIL|panicked|moe" | tail -8
echo "== op table on CUDA"; $B/cuda-op-table --nocapture 2>&1 | grep -E "cases|test result|FAIL|panicked" | head
echo "== llama ops vs CPU (device errors)"; $B/cuda-llama-tests 2>&1 | grep -E "test |test result|FAIL|panicked" | head -20
echo "== Qwen fixture (ids, PCIe bytes)"; $B/qwen-tests --test-threads=1 2>&1 | grep -E "test |test result|FAIL|panicked|assert" | head -20
wait $MK; tail -1 /tmp/mk20.log
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
$B/etch lower $B/q20.pte -o /tmp/q20d.pte --ops cuda --skip-h2d-inputs --skip-d2h-outputs > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
for r in 1 2 3; do
  echo "-- base"; timeout 60 $B/etch_base bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new"; timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
  echo "-- new, ETCH_MOE_RANK_ALL=1"; ETCH_MOE_RANK_ALL=1 timeout 60 $B/etch bench /tmp/q20n.pte $A --iterations 300 2>&1 | grep execute
done
echo "== generate, 20 layers (ids must agree); device inputs: bytes per decode step"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
for v in n d; do
  timeout 120 $B/etch generate /tmp/q20$v.pte $P > /tmp/g$v.json 2>/tmp/g$v.err; tail -1 /tmp/g$v.err
  timeout 120 $B/etch_base generate /tmp/q20$v.pte $P > /tmp/b$v.json 2>/tmp/b$v.err; tail -1 /tmp/b$v.err
done
cp /tmp/gd.json $OUT/generate-device-inputs.json
python3 - <<'PY'
import json
for v in "nd":
    n, o = json.load(open(f"/tmp/g{v}.json")), json.load(open(f"/tmp/b{v}.json"))
    print("program", "device inputs" if v == "d" else "host inputs",
          "| ids equal:", n["generated_ids"] == o["generated_ids"], len(n["generated_ids"]),
          "| decode tok/s new", round(n["decode_tok_s"], 1), "base", round(o["decode_tok_s"], 1))
    for name, j in (("new", n), ("base", o)):
        c = j["decode_calls"]; t = j["decode_transfers"]
        print(f"   {name}: {c} decode calls, h2d {t['h2d_bytes']} B in {t['h2d_copies']} copies, d2h {t['d2h_bytes']} B in {t['d2h_copies']} copies = {t['d2h_bytes']/c:.1f} B a step")
PY
echo "== ncu: MoE and delta-rule kernels, source counters (graphs off)"
ETCH_CUDA_GRAPHS=0 timeout 240 /usr/local/cuda/bin/ncu --kernel-name regex:"moe_down_row_early_bf16|gdn_recur_bf16|moe_logits_bf16|moe_up_bf16" --launch-skip 40 --launch-count 4 --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --section SchedulerStats -o $OUT/prof $B/etch bench /tmp/q20n.pte $A --iterations 2 > /tmp/ncu.log 2>&1; echo "ncu rc=$?"; tail -3 /tmp/ncu.log
/usr/local/cuda/bin/ncu -i $OUT/prof.ncu-rep --print-summary none > $OUT/prof-details.txt 2>&1; wc -l $OUT/prof-details.txt
/usr/local/cuda/bin/ncu -i $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/prof-sass.csv 2>&1; wc -c $OUT/prof-sass.csv
grep -E "^  [a-z_]+.*\(|Duration|Issued Warp|Warp Cycles Per Issued|Registers Per|Achieved Occ|Stall|stalled" $OUT/prof-details.txt | head -60
rm -rf /tmp/ck20
