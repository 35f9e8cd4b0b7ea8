#!/usr/bin/env python3
"""Writes the seeds of the `xnnpack` fuzz target into DIR: for each template program of
fuzz_targets/common/xnnpack.rs (same order), its index byte followed by its first XNNPACK
payload, found by the payload header's magic `XH00` (executorch's
xnnpack_graph_serialize.py: 4 zero bytes, `XH00`, u16 header length, u32 flatbuffer offset
and size, u32 constant data offset, u64 constant data size).

    python3 fuzz/xnnpack_seeds.py fuzz/corpus/xnnpack
"""
import pathlib
import re
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parent
SRC = (ROOT / "fuzz_targets/common/xnnpack.rs").read_text()
TEMPLATES = re.findall(r'include_bytes!\("\.\./\.\./\.\./(tests/fixtures/xnnpack/[^"]+)"\)', SRC)

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for i, rel in enumerate(TEMPLATES):
    data = (ROOT.parent / rel).read_bytes()
    at = data.index(b"XH00") - 4
    fb_off, fb_len, cd_off = struct.unpack_from("<III", data, at + 10)
    (cd_len,) = struct.unpack_from("<Q", data, at + 22)
    end = max(fb_off + fb_len, cd_off + cd_len)
    seed = bytes([i]) + data[at : at + end]
    (out / f"template_{i}").write_bytes(seed)
    print(f"{out / f'template_{i}'}: {rel}, {len(seed)} bytes")
