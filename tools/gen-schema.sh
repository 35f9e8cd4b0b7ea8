#!/usr/bin/env bash
# Regenerates crates/etch-format/src/generated.rs from the ExecuTorch schema files that
# executorch 1.5.1's wheel ships (exir/_serialize/program.fbs, scalar_type.fbs,
# extension/flat_tensor/serialize/flat_tensor.fbs, and
# devtools/bundled_program/schema/bundled_program_schema.fbs), copied into
# crates/etch-format/schema/.
# Needs: cargo install planus-cli --version 1.3.0
set -euo pipefail
cd "$(dirname "$0")/../crates/etch-format"
planus rust -o src/generated.rs schema/program.fbs schema/flat_tensor.fbs \
  schema/bundled_program_schema.fbs
# Drop the serde derives planus adds, so the crate needs no serde.
python3 - <<'PY'
import re
p = "src/generated.rs"
s = open(p).read()
s = s.replace("            ::serde::Serialize,\n            ::serde::Deserialize,\n", "")
s = re.sub(r",\s*::serde::Serialize,\s*::serde::Deserialize", "", s)
open(p, "w").write(s)
PY
rustfmt --edition 2024 src/generated.rs
grep -c serde src/generated.rs && { echo "serde derives left in generated.rs" >&2; exit 1; } || true
