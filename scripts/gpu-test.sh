#!/usr/bin/env bash
# Builds the GPU test suite and benchmarks here (no GPU or CUDA toolkit needed to build)
# and bundles the binaries into .gpu/ (git-ignored) for a run on a GPU machine:
#
#   scripts/gpu-test.sh                 # build + bundle
#   (on the GPU machine) .gpu/run.sh    # runs everything from the repo root, prints a log
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
cargo build --release --bin etch --example copy_bench
exe() { # exe PACKAGE TEST -> path of that test binary
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == sys.argv[1] and "test" in t.get("kind", []) and m.get("executable"):
        print(m["executable"])
' "$2"
}
cp "$(exe etch-devices cuda)" .gpu/cuda-allocator-tests
cp "$(exe etch-kernels-cuda vs_cpu)" .gpu/cuda-kernel-tests
cp "$(exe etch device)" .gpu/device-tests
cp target/release/etch target/release/examples/copy_bench .gpu/
strip .gpu/*
cat > .gpu/run.sh <<RUN
#!/usr/bin/env bash
# Runs the GPU suite from the repository root; exits non-zero if any part fails.
set -uo pipefail
cd "\$(dirname "\$0")/.."
# Test binaries find fixtures through the path they were built in.
[ -e "$PWD" ] || { mkdir -p "\$(dirname "$PWD")"; ln -s "\$PWD" "$PWD"; }
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:\${LD_LIBRARY_PATH:-}
status=0
echo "== \$(date -u '+%Y-%m-%d %H:%M UTC') on \$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# No NCCL or symmetric memory is used; keep NVLink multicast off all the same.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
echo "== etch devices"; .gpu/etch devices || status=1
ngpu=\$(nvidia-smi -L 2>/dev/null | wc -l)
for i in \$(seq 0 \$((ngpu - 1))); do
  echo "== CUDA allocator tests on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-allocator-tests --test-threads=1 --nocapture || status=1
  echo "== CUDA kernels vs CPU kernels on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-kernel-tests --test-threads=1 --nocapture || status=1
done
echo "== device fixtures (simulated and real CUDA)"; .gpu/device-tests --test-threads=1 --nocapture || status=1
echo "== etch run on the device fixtures, real CUDA"
for f in tests/fixtures/device/*/model.pte; do
  if [[ "\$f" == *two_gpus* && \$ngpu -lt 2 ]]; then
    echo "-- \$f: skipped (needs 2 GPUs)"; continue
  fi
  echo "-- \$f"; .gpu/etch run "\$f" --iterations 20 || status=1
done
echo "== copy benchmark"; .gpu/copy_bench || status=1
echo "== result: \$([ \$status = 0 ] && echo PASS || echo FAIL)"
exit \$status
RUN
chmod +x .gpu/run.sh
ls -la .gpu
