#!/usr/bin/env bash
# Session 16, call 1 (nvidia-h200): the full 40-layer Qwen3.5-35B-A3B on ONE H200. The 69.3 GB
# checkpoint does not fit the 64 GiB disk, so it goes to a RAM disk (128 GiB of memory); the
# weights then fit the 139 GiB of GPU memory. Falls back to 20 layers on /tmp without one.
# Bundle .gpuq from tools/bench/qwen35_bundle.sh with LAYERS="20 40".
set -uo pipefail
echo "== probe"; df -h / /tmp /dev/shm 2>&1; free -g; id -u; nproc
CK=""
for d in /dev/shm; do
  a=$(df --output=avail -B1G $d 2>/dev/null | tail -1 | tr -d ' ')
  [ -n "$a" ] && [ "$a" -ge 75 ] && CK=$d/ck40
done
if [ -z "$CK" ]; then
  mkdir -p /mnt/ram && mount -t tmpfs -o size=110g tmpfs /mnt/ram 2>&1 && CK=/mnt/ram/ck40
fi
df -h /dev/shm /mnt/ram 2>/dev/null
if [ -n "$CK" ]; then
  echo "== RAM disk $CK: 40 layers"
  L=40 CK=$CK BUNDLE=.gpuq OUT=$OUT STEPS=etch,hf bash tools/bench/qwen35_h200_1gpu.sh
else
  echo "== no RAM disk: 20 layers on /tmp"
  L=20 BUNDLE=.gpuq OUT=$OUT STEPS=etch,hf bash tools/bench/qwen35_h200_1gpu.sh
fi
free -g
