#!/usr/bin/env bash
# Builds the GPU test suite and benchmarks here (no GPU or CUDA toolkit needed to build)
# and bundles the binaries into .gpu/ (git-ignored) for a run on a GPU machine:
#
#   scripts/gpu-test.sh            # build + bundle
#   (on the GPU machine)  .gpu/run.sh   # runs everything, prints a log
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
cargo build --release --bin etch --example copy_bench
msg=$(cargo test --release -p etch-devices --test cuda --no-run --message-format=json 2>/dev/null)
exe=$(grep -o '"executable":"[^"]*cuda-[^"]*"' <<<"$msg" | tail -1 | sed 's/"executable":"//; s/"$//')
cp "$exe" .gpu/cuda-tests
cp target/release/etch target/release/examples/copy_bench .gpu/
strip .gpu/etch .gpu/copy_bench .gpu/cuda-tests
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs the GPU suite; exits non-zero if any part fails.
set -uo pipefail
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
status=0
echo "== $(date -u '+%Y-%m-%d %H:%M UTC') on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "== etch devices"; ./etch devices || status=1
echo "== CUDA allocator tests"; ./cuda-tests --test-threads=1 --nocapture || status=1
echo "== copy benchmark"; ./copy_bench || status=1
echo "== result: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
RUN
chmod +x .gpu/run.sh
ls -la .gpu
