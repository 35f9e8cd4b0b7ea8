#!/usr/bin/env bash
# Regenerates crates/etch-format/src/generated.rs from the ExecuTorch schema files that
# executorch 1.5.1's wheel ships (exir/_serialize/program.fbs, scalar_type.fbs,
# extension/flat_tensor/serialize/flat_tensor.fbs, and
# devtools/bundled_program/schema/bundled_program_schema.fbs), and
# crates/etch-format/src/etdump/generated.rs from devtools/etdump/etdump_schema_flatcc.fbs
# (the profiling dumps the Inspector reads), all copied into crates/etch-format/schema/.
# Needs: cargo install planus-cli --version 1.3.0
set -euo pipefail
cd "$(dirname "$0")/../crates/etch-format"

# gen OUT.rs SCHEMA.fbs...: planus, then drop the serde derives planus adds, so the crate
# needs no serde.
gen() {
  local out=$1
  shift
  planus rust -o "$out" "$@"
  python3 - "$out" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = s.replace("            ::serde::Serialize,\n            ::serde::Deserialize,\n", "")
s = re.sub(r",\s*::serde::Serialize,\s*::serde::Deserialize", "", s)
open(p, "w").write(s)
PY
  rustfmt --edition 2024 "$out"
  grep -c serde "$out" && { echo "serde derives left in $out" >&2; exit 1; } || true
}

gen src/generated.rs schema/program.fbs schema/flat_tensor.fbs schema/bundled_program_schema.fbs
gen src/etdump/generated.rs schema/etdump_schema_flatcc.fbs
