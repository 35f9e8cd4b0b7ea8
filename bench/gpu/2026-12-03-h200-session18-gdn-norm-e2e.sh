#!/usr/bin/env bash
# Session 18: kept as the record of branch gdn-norm (not merged: no gain); the bundle and binaries are that branch's.
# gdn-norm branch, H200 call 4: the 20-layer 35B-A3B-config decode step (random bf16 weights),
# one binary: the new program (etch::gated_delta_net_norm) with the fused norm (default: last
# block; cluster; 0: off) and the program of main (gated_delta_net + rms_norm_gated); greedy
# ids of new vs old. Bundle .gpu-gdn (git-ignored, made here): etch (release, stripped),
# q20.pte (tools/export/qwen3_5_moe.py --model CFG20 --max-seq-len 4096, CFG20 as
# tools/bench/qwen35_bundle.sh writes config20.json), q20_old.pte (the same with main's
# exporter), config20.json, qwen35_bench.py, tok1/pos128/samp.npy (as qwen35_bundle.sh).
# Run from the repository root with carry [".gpu-gdn"]. (Call 4 ran it with 60 s timeouts:
# the first two benches timed out loading the weights into a cold page cache.)
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
B=.gpu-gdn
t0=$(date +%s)
timeout 240 python3 $B/qwen35_bench.py make-ckpt --config $B/config20.json --out /tmp/ck20 2>&1 | grep -v Writing | tail -2
echo "make-ckpt $(( $(date +%s) - t0 )) s"
$B/etch lower $B/q20.pte -o /tmp/q20n.pte --ops cuda > /dev/null || exit 1
$B/etch lower $B/q20_old.pte -o /tmp/q20o.pte --ops cuda > /dev/null || exit 1
A="--method decode --input $B/tok1.npy --input $B/pos128.npy --input $B/samp.npy --weights /tmp/ck20"
for r in 1 2; do
  echo "-- r$r last"; timeout 180 $B/etch bench /tmp/q20n.pte $A --iterations 500 2>&1 | grep execute
  echo "-- r$r cluster"; ETCH_GDN_NORM_FUSE=cluster timeout 180 $B/etch bench /tmp/q20n.pte $A --iterations 500 2>&1 | grep execute
  echo "-- r$r off"; ETCH_GDN_NORM_FUSE=0 timeout 180 $B/etch bench /tmp/q20n.pte $A --iterations 500 2>&1 | grep execute
  echo "-- r$r old program"; timeout 180 $B/etch bench /tmp/q20o.pte $A --iterations 500 2>&1 | grep execute
done
echo "== generate 128 new: new program (default, cluster) vs old; greedy ids must agree"
P="--prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 128 --warmup --weights /tmp/ck20 --json"
timeout 120 $B/etch generate /tmp/q20n.pte $P > /tmp/gn.json 2>/tmp/gn.err; tail -1 /tmp/gn.err
ETCH_GDN_NORM_FUSE=cluster timeout 120 $B/etch generate /tmp/q20n.pte $P > /tmp/gc.json 2>/tmp/gc.err; tail -1 /tmp/gc.err
timeout 120 $B/etch generate /tmp/q20o.pte $P > /tmp/go.json 2>/tmp/go.err; tail -1 /tmp/go.err
python3 - <<'PY'
import json
n, c, o = (json.load(open(f"/tmp/g{x}.json")) for x in "nco")
print("ids new==old:", n["generated_ids"] == o["generated_ids"], "cluster==old:", c["generated_ids"] == o["generated_ids"], len(n["generated_ids"]))
for k, d in (("new", n), ("cluster", c), ("old", o)):
    print(k, "decode tok/s", round(d["decode_tok_s"], 1), "prefill tok/s", round(d.get("prefill_tok_s", 0), 1))
PY
echo "total $(( $(date +%s) - t0 )) s"
