#!/usr/bin/env python3
"""Export the bundled-program fixtures (`.bpte`) for `etch test` with the stock tooling.

Writes, relative to the repository root:
  tests/fixtures/bundled/two_methods.bpte  forward(x f32[4,8]) = relu(linear(x)) and
                                           add_mul(a, b f32[2,5]) = (a + b, a * b);
                                           3 test cases per method
  tests/fixtures/bundled/mixed_io.bpte     forward(x f32[3,4], idx i64[3,4], mask bool[3,4],
                                           k int) = (where(mask, x * k, -x), idx * 2 + k,
                                           ~mask): tensor, Int inputs; f32, i64 and bool
                                           outputs; 3 test cases
  tests/fixtures/bundled/device.bpte       relu(linear(x)) lowered to one ExecutorBackend
                                           delegate on cuda:0 (the recipe of the
                                           device/one_delegate fixture, whose partitioner
                                           export_device_fixtures.py defines), with
                                           h2d/d2h copies; 2 test cases

Each program is exported with the stock exporter, then bundled with the stock
BundledProgram tooling:

  BundledProgram(executorch_program_manager, [MethodTestSuite(name, [MethodTestCase(
      inputs, expected_outputs)...])...])
  -> serialize_from_bundled_program_to_flatbuffer(...)   (file identifier "BP08")

The expected outputs are the eager PyTorch model's outputs on the same inputs: the oracle
that `etch test` compares against (upstream's verify_method_outputs tolerances, rtol 1e-5
and atol 1e-8 by default, are chosen by the runner: a .bpte stores none).

Usage:  /work/venv/bin/python tools/export/export_bundled.py [NAME...] [--verify]
--verify then runs every case of the CPU fixtures with ExecuTorch's own runtime
(portable_lib's BundledModule.verify_result_with_bundled_expected_output, default
tolerances) and prints PASS/FAIL per case; the device fixture needs a device allocator,
which the pip runtime has none of, so it is skipped there.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any, Callable, Dict, List, Sequence

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_device_fixtures as edf  # noqa: E402  (helpers only; no side effects on import)
import export_fixtures as ef  # noqa: E402

from executorch.devtools import BundledProgram  # noqa: E402
from executorch.devtools.bundled_program.config import (  # noqa: E402
    MethodTestCase,
    MethodTestSuite,
)
from executorch.devtools.bundled_program.serialize import (  # noqa: E402
    serialize_from_bundled_program_to_flatbuffer,
)

OUT_DIR = os.path.join(ef.FIXTURES, "bundled")


class AddMul(nn.Module):
    def forward(self, a, b):
        return a + b, a * b


class MixedIO(nn.Module):
    """Tensor inputs of three dtypes and a python int (specialized to its traced value, 3,
    as torch.export does: the program still takes it as an Int input)."""

    def forward(self, x, idx, mask, k: int):
        return torch.where(mask, x * k, -x), idx * 2 + k, torch.logical_not(mask)


def suite(method: str, model: nn.Module, inputs: Sequence[Sequence[Any]]) -> MethodTestSuite:
    """Test cases whose expected outputs are the eager model's outputs."""
    cases = []
    for args in inputs:
        out = ef.eager(model, *args)
        outs = out if isinstance(out, tuple) else (out,)
        cases.append(MethodTestCase(inputs=list(args), expected_outputs=list(outs)))
    return MethodTestSuite(method_name=method, test_cases=cases)


def write_bundle(name: str, program, suites: List[MethodTestSuite]) -> None:
    bundled = BundledProgram(program, suites)
    data = serialize_from_bundled_program_to_flatbuffer(bundled)
    assert data[4:8] == b"BP08", data[4:8]
    path = os.path.join(OUT_DIR, f"{name}.bpte")
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {os.path.relpath(path, ef.REPO_ROOT)} ({len(data)} bytes)")


def build_two_methods() -> None:
    torch.manual_seed(16)
    fwd = edf.LinearRelu().eval()
    am = AddMul().eval()
    x = torch.randn(4, 8)
    a, b = torch.randn(2, 5), torch.randn(2, 5)
    program = ef.export_edge(
        {"forward": copy.deepcopy(fwd), "add_mul": am},
        {"forward": (x,), "add_mul": (a, b)},
    )
    suites = [
        suite("forward", fwd, [(x,)] + [(torch.randn(4, 8),) for _ in range(2)]),
        suite("add_mul", am, [(a, b)] + [(torch.randn(2, 5), torch.randn(2, 5)) for _ in range(2)]),
    ]
    write_bundle("two_methods", program, suites)


def build_mixed_io() -> None:
    torch.manual_seed(17)
    m = MixedIO().eval()

    def args() -> tuple:
        return (
            torch.randn(3, 4),
            torch.randint(-5, 5, (3, 4), dtype=torch.int64),
            torch.rand(3, 4) > 0.5,
            3,
        )

    first = args()
    program = ef.export_edge({"forward": m}, {"forward": first})
    write_bundle("mixed_io", program, [suite("forward", m, [first, args(), args()])])


def build_device() -> None:
    torch.manual_seed(18)
    m = edf.LinearRelu().eval()
    x = torch.randn(4, 8)
    program, _cpu, _info = edf.lower(
        {"forward": copy.deepcopy(m)},
        {"forward": (x,)},
        edf.LINEAR_OPS | edf.RELU_OPS,
        edf.default_config(),
    )
    write_bundle("device", program, [suite("forward", m, [(x,), (torch.randn(4, 8),)])])


BUILDERS: Dict[str, Callable[[], None]] = {
    "two_methods": build_two_methods,
    "mixed_io": build_mixed_io,
    "device": build_device,
}


def verify_with_executorch(names: List[str]) -> int:
    """Runs the cases with ExecuTorch's runtime; the number of failures."""
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )
    from executorch.extension.pybindings import portable_lib

    failures = 0
    for n in names:
        if n == "device":
            continue
        with open(os.path.join(OUT_DIR, f"{n}.bpte"), "rb") as f:
            data = f.read()
        bundle = portable_lib._load_bundled_program_from_buffer(data)
        for s in deserialize_from_flatbuffer_to_bundled_program(data).method_test_suites:
            for i in range(len(s.test_cases)):
                try:
                    bundle.verify_result_with_bundled_expected_output(s.method_name, i)
                    print(f"executorch: {n} {s.method_name} case {i}: PASS")
                except RuntimeError as e:
                    failures += 1
                    print(f"executorch: {n} {s.method_name} case {i}: FAIL ({e})")
    return failures


def main() -> int:
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    args = [a for a in sys.argv[1:] if a != "--verify"]
    names = args or list(BUILDERS)
    for n in names:
        BUILDERS[n]()
    if "--verify" in sys.argv[1:]:
        return 1 if verify_with_executorch(names) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
