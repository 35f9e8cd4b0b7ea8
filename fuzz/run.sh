#!/usr/bin/env bash
# Builds the fuzz targets and resumes the campaign on each, one after the other (one
# libFuzzer process at a time), from and into the committed corpora under fuzz/corpus/.
#
#   fuzz/run.sh [MINUTES_PER_TARGET] [TARGET...]     (default: 5 minutes, every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`); stable Rust with RUSTC_BOOTSTRAP=1 (set
# here) is enough. CARGO_TARGET_DIR is honoured. Crashes, panics, OOMs and timeouts are
# written to fuzz/artifacts/<target>/; logs to fuzz/logs/<target>.log. At the end it prints,
# per target, the executions, libFuzzer's coverage (`cov:` edges, `ft:` features) and the
# corpus size.
set -euo pipefail
cd "$(dirname "$0")"

minutes=${1:-5}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(load_and_run ptd safetensors lower xnnpack)
fi

export RUSTC_BOOTSTRAP=1
# Allocation failures (huge declared sizes) must come back as errors, not ASan aborts.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0}

max_len() {
    case "$1" in
        ptd) echo 16384 ;;
        safetensors) echo 16384 ;;
        *) echo 65536 ;;
    esac
}

cargo fuzz build

# Seeds, read but never written: the fixtures (at most 64 KiB) each target reads, and the
# XNNPACK templates' own payloads. The committed corpora are small; these bring back the
# coverage of whole programs.
seed() {
    mkdir -p "seeds/$1"
    find ../tests/fixtures -path ../tests/fixtures/fuzz_regressions -prune -o \
        -name "$2" -size -64k -print | while read -r f; do
        cp "$f" "seeds/$1/$(echo "${f#../tests/fixtures/}" | tr / _)"
    done
}
rm -rf seeds
seed load_and_run '*.pte'
seed lower '*.pte'
seed ptd '*.ptd'
seed safetensors '*.safetensors'
python3 xnnpack_seeds.py seeds/xnnpack >/dev/null

mkdir -p logs
summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "== $t: $minutes min"
    status=0
    cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" -print_final_stats=1 >"logs/$t.log" 2>&1 || status=$?
    last=$(grep -E '^#[0-9]+' "logs/$t.log" | tail -1 || true)
    execs=$(grep -E '^stat::number_of_executed_units' "logs/$t.log" | awk '{print $2}' || true)
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9a-zA-Z]+).*/\1/p' <<<"$last")
    result=ok
    [ "$status" -ne 0 ] && result="FOUND (exit $status, see logs/$t.log and artifacts/$t/)"
    summary+=("$(printf '%-13s %8s min %12s execs  cov %6s  ft %7s  corpus %-12s %s' \
        "$t" "$minutes" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result")")
done

echo
printf '%s\n' "${summary[@]}"
