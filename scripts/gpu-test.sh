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
cp "$(exe etch-kernels-cuda op_table_cuda)" .gpu/cuda-op-table
cp "$(exe etch-kernels-cuda etch_ops_vs_cpu)" .gpu/cuda-etch-ops-tests
cp "$(exe etch-kernels-cuda llama_vs_cpu)" .gpu/cuda-llama-ops-tests
cp "$(exe etch device)" .gpu/device-tests
cp "$(exe etch device_faults)" .gpu/device-fault-tests
cp "$(exe etch lower)" .gpu/lower-tests
cp "$(exe etch qwen3_5_moe)" .gpu/qwen-tests
cp "$(exe etch profile)" .gpu/profile-tests
# Exported models (tools/export/export_models.py), for `etch lower` on real CUDA; the big
# conv nets stay behind (the bundle travels with a size limit).
if [ -f target/models/manifest.json ]; then
  python3 - <<'PY'
import json, os, shutil
src, dst = "target/models", ".gpu/models"
keep = []
for e in json.load(open(os.path.join(src, "manifest.json"))):
    d = os.path.join(src, e["name"])
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    if size < 4 << 20:
        shutil.copytree(d, os.path.join(dst, e["name"]))
        keep.append(e)
json.dump(keep, open(os.path.join(dst, "manifest.json"), "w"), indent=1)
PY
fi
cp target/release/etch target/release/examples/copy_bench .gpu/
find .gpu -maxdepth 1 -type f -exec strip {} +
cat > .gpu/run.sh <<RUN
#!/usr/bin/env bash
# Runs the GPU suite from the repository root; exits non-zero if any part fails.
set -uo pipefail
cd "\$(dirname "\$0")/.."
# Tests that run the CLI find it where cargo built it.
mkdir -p target/release && cp .gpu/etch target/release/etch
# Test binaries find fixtures through the path they were built in.
[ -e "$PWD" ] || { mkdir -p "\$(dirname "$PWD")"; ln -s "\$PWD" "$PWD"; }
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:\${LD_LIBRARY_PATH:-}
status=0
# GPU tests fail, rather than skip, when no CUDA device is found.
export ETCH_REQUIRE_CUDA=1
echo "== \$(date -u '+%Y-%m-%d %H:%M UTC') on \$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# No NCCL or symmetric memory is used; keep NVLink multicast off all the same.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
echo "== etch devices"; .gpu/etch devices || status=1
ngpu=\$(nvidia-smi -L 2>/dev/null | wc -l)
for i in \$(seq 0 \$((ngpu - 1))); do
  echo "== CUDA allocator tests on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-allocator-tests --test-threads=1 --nocapture || status=1
  echo "== the per-op PyTorch table on the CUDA kernels, cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-op-table --nocapture || status=1
  echo "== CUDA kernels vs CPU kernels on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-kernel-tests --test-threads=1 --nocapture || status=1
  echo "== etch:: CUDA kernels vs CPU kernels at the model's sizes on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-etch-ops-tests --nocapture || status=1
  echo "== the same with the token-by-token delta rule for every call (ETCH_GDN_CHUNK_FROM=huge)"
  ETCH_GDN_CHUNK_FROM=1000000000 ETCH_CUDA_DEVICE=\$i .gpu/cuda-etch-ops-tests --nocapture || status=1
  echo "== llama:: / quantized_decomposed:: CUDA kernels vs CPU kernels at Llama-3.2-1B sizes on cuda:\$i"
  ETCH_CUDA_DEVICE=\$i .gpu/cuda-llama-ops-tests --nocapture || status=1
done
echo "== device fixtures (simulated and real CUDA)"; .gpu/device-tests --test-threads=1 --nocapture || status=1
echo "== device faults end in errors (real CUDA)"; .gpu/device-fault-tests --test-threads=1 --nocapture || status=1
echo "== etch run on the device fixtures, real CUDA"
for f in tests/fixtures/device/*/model.pte; do
  if [[ "\$f" == *two_gpus* && \$ngpu -lt 2 ]]; then
    echo "-- \$f: skipped (needs 2 GPUs)"; continue
  fi
  echo "-- \$f"; .gpu/etch run "\$f" --iterations 20 || status=1
done
echo "== the profiler: CUDA delegates' ops timed with CUDA events"; .gpu/profile-tests --test-threads=1 --nocapture || status=1
echo "-- etch bench --profile --etdump on one_delegate, real CUDA"
.gpu/etch bench tests/fixtures/device/one_delegate/model.pte --iterations 20 --profile --etdump "\${OUT:-/tmp}/one_delegate.etdp" || status=1
echo "== lowered fixtures (simulated and real CUDA)"; .gpu/lower-tests --test-threads=1 --nocapture || status=1
echo "== Qwen 3.5 MoE fixture: ids equal transformers' on the CPU, simulated and real CUDA"; .gpu/qwen-tests --test-threads=1 --nocapture || status=1
if [ -f .gpu/models/manifest.json ]; then
  echo "== etch lower --ops cuda on the exported models, run on real CUDA (outputs to \$OUT/lowered)"
  out=\${OUT:-/tmp/etch-gpu-out}
  python3 - "\$out" <<'PY' || status=1
import json, os, subprocess, sys
out = sys.argv[1]
man = json.load(open(".gpu/models/manifest.json"))
fail = 0
for variant, extra in [("lowered", []), ("lowered_skip", ["--skip-h2d-inputs", "--skip-d2h-outputs"])]:
    for e in man:
        d = os.path.join(".gpu/models", e["name"])
        case = e["cases"][0]
        low = f"/tmp/{e['name']}.{variant}.pte"
        r = subprocess.run([".gpu/etch", "lower", os.path.join(d, "model.pte"), "-o", low] + extra, capture_output=True, text=True)
        summary = (r.stdout.strip().splitlines() or [""])[1:2]
        if r.returncode:
            print(f"FAIL lower {variant} {e['name']}: {r.stderr.strip()}"); fail += 1; continue
        od = os.path.join(out, variant, e["name"])
        os.makedirs(od, exist_ok=True)
        cmd = [".gpu/etch", "run", low, "--output-dir", od, "--iterations", "5"]
        for p in case["inputs"]:
            cmd += ["--input", os.path.join(".gpu/models", p)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"{'ok  ' if r.returncode == 0 else 'FAIL'} {variant} {e['name']}: {' '.join(summary)} | {last if r.returncode == 0 else r.stderr.strip()}")
        fail += r.returncode != 0
sys.exit(1 if fail else 0)
PY
  # One file carries every output back.
  [ -d "\$out/lowered" ] && tar -C "\$out" -cf "\$out/lowered-outputs.tar" lowered lowered_skip && rm -rf "\$out/lowered" "\$out/lowered_skip"
fi
echo "== copy benchmark"; .gpu/copy_bench || status=1
echo "== result: \$([ \$status = 0 ] && echo PASS || echo FAIL)"
exit \$status
RUN
chmod +x .gpu/run.sh
ls -la .gpu
