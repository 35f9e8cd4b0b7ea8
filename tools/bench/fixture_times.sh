#!/usr/bin/env bash
# Prints a Markdown table of etch's load / first-run / median execute times for every
# fixture, from `etch run --iterations N` (release build). Usage: tools/bench/fixture_times.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-50}
cargo build --release -q
echo "| fixture | load | first run | median of $n |"
echo "| --- | --- | --- | --- |"
for d in tests/fixtures/*/; do
  name=$(basename "$d")
  [ -f "$d/model.pte" ] || continue
  [ "$name" = device ] && continue
  args=()
  [ -f "$d/model.ptd" ] && args+=(--data "$d/model.ptd")
  line=$(target/release/etch run "$d/model.pte" "${args[@]}" --iterations "$n" | tail -1)
  load=$(sed -E 's/^load ([0-9.]+ ms).*/\1/' <<<"$line")
  first=$(sed -E 's/.*first run ([0-9.]+ ms).*/\1/' <<<"$line")
  median=$(sed -E 's/.*median ([0-9.]+ ms).*/\1/' <<<"$line")
  echo "| $name | $load | $first | $median |"
done
for d in tests/fixtures/device/*/; do
  name=$(basename "$d")
  [ -f "$d/model.pte" ] || continue
  line=$(target/release/etch run "$d/model.pte" --simulate-device cuda --iterations "$n" | grep '^load')
  load=$(sed -E 's/^load ([0-9.]+ ms).*/\1/' <<<"$line")
  first=$(sed -E 's/.*first run ([0-9.]+ ms).*/\1/' <<<"$line")
  median=$(sed -E 's/.*median ([0-9.]+ ms).*/\1/' <<<"$line")
  echo "| device/$name (simulated cuda) | $load | $first | $median |"
done
