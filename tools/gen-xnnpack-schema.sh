#!/usr/bin/env bash
# Regenerates crates/etch-backends/src/xnnpack/generated.rs from the XNNPACK delegate's
# graph schema that executorch 1.5.1's wheel ships
# (executorch/backends/xnnpack/serialization/schema.fbs, file identifier XN01), copied into
# crates/etch-backends/schema/xnnpack.fbs.
# Needs: cargo install planus-cli --version 1.3.0
set -euo pipefail
cd "$(dirname "$0")/../crates/etch-backends"
planus rust -o src/xnnpack/generated.rs schema/xnnpack.fbs
# Drop the serde derives planus adds, so the crate needs no serde.
python3 - <<'PY'
import re
p = "src/xnnpack/generated.rs"
s = open(p).read()
s = s.replace("            ::serde::Serialize,\n            ::serde::Deserialize,\n", "")
s = re.sub(r",\s*::serde::Serialize,\s*::serde::Deserialize", "", s)
open(p, "w").write(s)
PY
rustfmt --edition 2024 src/xnnpack/generated.rs
grep -c serde src/xnnpack/generated.rs && { echo "serde derives left in generated.rs" >&2; exit 1; } || true
