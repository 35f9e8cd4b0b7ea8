#!/usr/bin/env python3
"""Export the etch device-placement fixtures with the stock ExecuTorch 1.5.1 exporter.

Writes, relative to the repository root:
  tests/fixtures/device/<name>/model.pte
  tests/fixtures/device/<name>/<method>_<case>_in<k>.npy / _out<k>.npy
  tests/fixtures/device/manifest.json   (same format as tests/fixtures/manifest.json,
                                         paths relative to tests/fixtures/device/)
  tests/fixtures/device/OPS.md

Recipe (every fixture):
  torch.export.export(model.eval(), args)
  -> to_edge_transform_and_lower(ep, partitioner=[DeviceOpPartitioner(ops)])
  -> .to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True, ...))

DeviceOpPartitioner delegates a chosen set of aten ops to `ExecutorBackend`
(executorch/exir/backend/test/demos/rpc/executor_backend_preprocess.py: the
"nested program" demo backend; its processed blob is a complete .pte of the
delegated subgraph, constants included). Its DelegationSpec carries
CompileSpec("target_device", b"cuda:0"), so PropagateDevicePass inserts
et_copy::_h2d_copy / _d2h_copy at the delegate boundaries and memory planning
puts the delegate-side tensors in a separate CUDA buffer.

Manifest additions (optional keys, ignored by the CPU harness): fixture-level
"comment"; per case "input_devices"/"output_devices" ("cpu" or "cuda:0") =
where the program expects the method inputs / leaves the method outputs
(read from extra_tensor_info of the serialized input/output values).

Usage:
  /work/venv/bin/python tools/export/export_device_fixtures.py            # export
  /work/venv/bin/python tools/export/export_device_fixtures.py --verify   # export + check
--verify (prints only, writes nothing extra) tries executorch.runtime on each
program, and runs a host-only simulation of each method: copy ops = identity,
DelegateCall = run the nested .pte with executorch.runtime, other kernels via
torch.ops out-variants; results are compared with the saved expectations.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_fixtures as ef  # noqa: E402  (helpers only; no side effects on import)

from executorch.exir import (  # noqa: E402
    ExecutorchBackendConfig,
    to_edge,
    to_edge_transform_and_lower,
)
from executorch.exir import schema  # noqa: E402
from executorch.exir._serialize._program import (  # noqa: E402
    _flatbuffer_to_program,
    _get_extended_header,
)
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (  # noqa: E402
    generate_pattern_op_partitions,
)
from executorch.exir.backend.compile_spec_schema import CompileSpec  # noqa: E402
from executorch.exir.backend.partitioner import (  # noqa: E402
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from executorch.exir.backend.test.demos.rpc.executor_backend_preprocess import (  # noqa: E402
    ExecutorBackend,
)
from executorch.exir.backend.utils import tag_constant_data  # noqa: E402
from executorch.exir.passes import MemoryPlanningPass  # noqa: E402
from executorch.exir.passes.propagate_device_pass import (  # noqa: E402
    TARGET_DEVICE_COMPILE_SPEC_KEY,
    PropagateDeviceConfig,
)
from torch.fx.passes.operator_support import OperatorSupportBase  # noqa: E402

DEVICE_FIXTURES = os.path.join(ef.FIXTURES, "device")
TARGET_DEVICE = "cuda:0"
aten = torch.ops.aten

# Op sets the fixtures choose from (aten overloads; matched against the edge op's
# underlying aten op). nn.Linear on a 2-D input decomposes to permute_copy + addmm.
LINEAR_OPS = frozenset({aten.permute_copy.default, aten.addmm.default, aten.mm.default})
ADD_OPS = frozenset({aten.add.Tensor})
MUL_OPS = frozenset({aten.mul.Tensor})
RELU_OPS = frozenset({aten.relu.default})
# The same ops as etch's kernel registry names them (for `etch lower --ops FILE`).
ETCH_OP_NAMES = {
    aten.permute_copy.default: "aten::permute_copy.out",
    aten.addmm.default: "aten::addmm.out",
    aten.mm.default: "aten::mm.out",
    aten.add.Tensor: "aten::add.out",
    aten.mul.Tensor: "aten::mul.out",
    aten.relu.default: "aten::relu.out",
}


# ----------------------------------------------------------------------------
# Partitioner
# ----------------------------------------------------------------------------


def _aten_op(target: Any) -> Any:
    # Edge dialect ops (EdgeOpOverload) wrap the aten OpOverload in `_op`.
    return getattr(target, "_op", target)


class _OpSetSupport(OperatorSupportBase):
    def __init__(self, ops: FrozenSet[Any]) -> None:
        self.ops = ops

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and _aten_op(node.target) in self.ops


class DeviceOpPartitioner(Partitioner):
    """Delegates every node whose aten op is in `ops` to ExecutorBackend on `target_device`.

    per_op=False: maximal connected groups (generate_pattern_op_partitions, i.e.
    torch's CapabilityBasedPartitioner); per_op=True: one delegate per node.
    Tags are assigned in graph order (device_tag0, device_tag1, ...), so delegate
    indices follow the order of the first node of each group. Constants used only
    inside a partition are tagged with tag_constant_data() so they are moved into
    the nested program (required by the 1.5.1 emitter).
    """

    def __init__(
        self,
        ops: Iterable[Any],
        target_device: str = TARGET_DEVICE,
        per_op: bool = False,
        devices: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__()
        self.ops = frozenset(ops)
        self.per_op = per_op
        self.op_support = _OpSetSupport(self.ops)
        # devices: the k-th delegate goes to devices[k] (the last one repeats), like
        # upstream's PerAddDeviceDelegatePartitioner; default: all on target_device.
        self.devices = list(devices) if devices else [target_device]

    def spec(self, k: int) -> DelegationSpec:
        dev = self.devices[min(k, len(self.devices) - 1)]
        return DelegationSpec(
            ExecutorBackend.__name__,
            [CompileSpec(TARGET_DEVICE_COMPILE_SPEC_KEY, dev.encode("utf-8"))],
        )

    def partition(self, exported_program) -> PartitionResult:
        gm = exported_program.graph_module
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        if self.per_op:
            groups = [
                [n] for n in gm.graph.nodes if self.op_support.is_node_supported(None, n)
            ]
        else:
            groups = [
                list(p.nodes)
                for p in generate_pattern_op_partitions(gm, op_support=self.op_support)
            ]
        groups.sort(key=lambda g: min(order[n] for n in g))
        partition_tags: Dict[str, DelegationSpec] = {}
        for k, group in enumerate(groups):
            tag = f"device_tag{k}"
            for node in group:
                node.meta["delegation_tag"] = tag
            partition_tags[tag] = self.spec(k)
        tag_constant_data(exported_program)
        return PartitionResult(
            tagged_exported_program=exported_program, partition_tags=partition_tags
        )


# ----------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------


class LinearRelu(nn.Module):
    def __init__(self, i: int = 8, o: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(i, o)

    def forward(self, x):
        return torch.relu(self.fc(x))


class TwoRegions(nn.Module):
    """fc1 (delegate 0) -> sigmoid (CPU) -> fc2(s) + h (delegate 1).

    h (delegate 0's output) is consumed both by the CPU sigmoid and by delegate 1."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x):
        h = self.fc1(x)
        s = torch.sigmoid(h)
        return self.fc2(s) + h


class SharedInput(nn.Module):
    """x feeds two delegates: a = x * w and b = x + c are delegated, sin runs on CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))
        self.c = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        a = x * self.w
        b = x + self.c
        return a * torch.sin(b)


class LinearAdd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x, y):
        return self.fc(x) + y


class Add(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)


class TwoGpuChain(nn.Module):
    """a = x * w on cuda:0, b = a + c on cuda:1, out = b * x on cuda:1: a moves from
    cuda:0 to cuda:1, x is uploaded to both GPUs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))
        self.c = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        a = x * self.w
        b = a + self.c
        return b * x


# ----------------------------------------------------------------------------
# Fixture bookkeeping
# ----------------------------------------------------------------------------


def device_str(t: schema.Tensor) -> str:
    eti = t.extra_tensor_info
    if eti is None:
        return "cpu"
    dt = schema.DeviceType(eti.device_type)
    return "cpu" if dt == schema.DeviceType.CPU else f"{dt.name.lower()}:{eti.device_index}"


class DeviceFixture:
    def __init__(self, name: str, comment: str) -> None:
        self.name = name
        self.comment = comment
        self.dir = os.path.join(DEVICE_FIXTURES, name)
        os.makedirs(self.dir, exist_ok=True)
        self.cases: List[Dict[str, Any]] = []
        self.counters: Dict[str, int] = {}
        self.notes: List[str] = []
        self.prog = None

    @property
    def pte_path(self) -> str:
        return os.path.join(self.dir, "model.pte")

    def write_program(self, lowered) -> None:
        """Writes the stock device program (model.pte) and the CPU-only export of the same
        model (cpu.pte, what `etch lower` starts from), and records how it was lowered."""
        prog, cpu_prog, self.lowering = lowered
        with open(self.pte_path, "wb") as f:
            prog.write_to_file(f)
        with open(os.path.join(self.dir, "cpu.pte"), "wb") as f:
            cpu_prog.write_to_file(f)
        self.prog, _, _ = ef.load_raw_program(self.pte_path)

    def _save(self, prefix: str, values: Sequence[Any]) -> List[str]:
        rels = []
        for k, v in enumerate(values):
            rel = f"{self.name}/{prefix}{k}.npy"
            np.save(os.path.join(DEVICE_FIXTURES, rel), ef.to_numpy(v))
            rels.append(rel)
        return rels

    def add_case(self, method: str, inputs: Sequence[Any], outputs: Any, tol=ef.TOL_F32) -> None:
        assert self.prog is not None, "write_program first"
        plan = next(p for p in self.prog.execution_plan if p.name == method)
        idx = self.counters.get(method, 0)
        self.counters[method] = idx + 1
        outs = ef.flatten_outputs(outputs)
        assert len(inputs) == len(plan.inputs) and len(outs) == len(plan.outputs)
        case = {
            "method": method,
            "inputs": self._save(f"{method}_{idx}_in", inputs),
            "input_dtypes": [ef.dtype_name(v) for v in inputs],
            "expected": self._save(f"{method}_{idx}_out", outs),
            "output_dtypes": [ef.dtype_name(v) for v in outs],
        }
        case.update(tol)
        case["input_devices"] = [device_str(plan.values[i].val) for i in plan.inputs]
        case["output_devices"] = [device_str(plan.values[i].val) for i in plan.outputs]
        self.cases.append(case)

    def manifest_entry(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "pte": f"{self.name}/model.pte",
            "comment": self.comment,
            "cpu_pte": f"{self.name}/cpu.pte",
            "lowering": self.lowering,
            "cases": self.cases,
        }


def lower(
    models: Dict[str, nn.Module],
    args: Dict[str, tuple],
    ops: Iterable[Any],
    config: ExecutorchBackendConfig,
    per_op: bool = False,
    devices: Optional[Sequence[str]] = None,
):
    eps = {m: torch.export.export(model.eval(), args[m]) for m, model in models.items()}
    arg = eps if len(eps) > 1 or "forward" not in eps else eps["forward"]
    part = DeviceOpPartitioner(ops, per_op=per_op, devices=devices)
    edge = to_edge_transform_and_lower(arg, partitioner=[part])
    stock = edge.to_executorch(config)
    # The same model exported for the CPU only (default config).
    eps = {m: torch.export.export(model.eval(), args[m]) for m, model in models.items()}
    arg = eps if len(eps) > 1 or "forward" not in eps else eps["forward"]
    cpu = to_edge(arg).to_executorch(ExecutorchBackendConfig())

    def skips(flag: str):
        pdc = config.propagate_device_config
        if isinstance(pdc, dict):
            return sorted(m for m, c in pdc.items() if getattr(c, flag))
        return "all" if getattr(pdc, flag) else []

    info = {
        "ops": sorted(ETCH_OP_NAMES[o] for o in ops),
        "per_op": per_op,
        "devices": list(devices) if devices else [TARGET_DEVICE],
        "skip_h2d_inputs": skips("skip_h2d_for_method_inputs"),
        "skip_d2h_outputs": skips("skip_d2h_for_method_outputs"),
    }
    return stock, cpu, info


def default_config(**kw) -> ExecutorchBackendConfig:
    return ExecutorchBackendConfig(enable_non_cpu_memory_planning=True, **kw)


def skip_config() -> ExecutorchBackendConfig:
    return ExecutorchBackendConfig(
        enable_non_cpu_memory_planning=True,
        propagate_device_config=PropagateDeviceConfig(
            skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True
        ),
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
    )


# ----------------------------------------------------------------------------
# Fixture builders
# ----------------------------------------------------------------------------


def build_one_delegate() -> DeviceFixture:
    torch.manual_seed(100)
    m = LinearRelu().eval()
    x = torch.randn(4, 8)
    fx = DeviceFixture(
        "one_delegate",
        "forward(x[4,8]) = relu(linear(x)); whole graph in one ExecutorBackend delegate on "
        "cuda:0; h2d_copy(x) before, d2h_copy after",
    )
    fx.write_program(
        lower({"forward": copy.deepcopy(m)}, {"forward": (x,)}, LINEAR_OPS | RELU_OPS, default_config())
    )
    fx.add_case("forward", [x], ef.eager(m, x))
    x2 = torch.randn(4, 8)
    fx.add_case("forward", [x2], ef.eager(m, x2))
    return fx


def build_two_delegates() -> DeviceFixture:
    torch.manual_seed(101)
    m = TwoRegions().eval()
    x = torch.randn(4, 8)
    fx = DeviceFixture(
        "two_delegates",
        "forward(x[4,8]) = fc2(sigmoid(h)) + h, h = fc1(x); delegate 0 = fc1, sigmoid on CPU, "
        "delegate 1 = fc2 + add; h goes d2h for sigmoid and is fed to delegate 1 directly "
        "on cuda:0 (the d2h->h2d round trip is elided by the exporter)",
    )
    fx.write_program(
        lower({"forward": copy.deepcopy(m)}, {"forward": (x,)}, LINEAR_OPS | ADD_OPS, default_config())
    )
    fx.add_case("forward", [x], ef.eager(m, x))
    x2 = torch.randn(4, 8)
    fx.add_case("forward", [x2], ef.eager(m, x2))
    return fx


def build_shared_input() -> DeviceFixture:
    torch.manual_seed(102)
    m = SharedInput().eval()
    x = torch.randn(4, 6)
    fx = DeviceFixture(
        "shared_input",
        "forward(x[4,6]) = (x*w) * sin(x+c); one delegate per op (mul, add, mul); x is "
        "consumed by two delegates (one h2d_copy per delegate input), sin on CPU; the first "
        "delegate's cuda:0 output feeds the third delegate directly (no copy)",
    )
    fx.write_program(
        lower(
            {"forward": copy.deepcopy(m)},
            {"forward": (x,)},
            MUL_OPS | ADD_OPS,
            default_config(),
            per_op=True,
        )
    )
    fx.add_case("forward", [x], ef.eager(m, x))
    x2 = torch.randn(4, 6)
    fx.add_case("forward", [x2], ef.eager(m, x2))
    return fx


def build_skip_flags() -> DeviceFixture:
    torch.manual_seed(103)
    m = LinearAdd().eval()
    x, y = torch.randn(4, 8), torch.randn(4, 16)
    fx = DeviceFixture(
        "skip_flags",
        "forward(x[4,8], y[4,16]) = linear(x) + y, one delegate on cuda:0; exported with "
        "skip_h2d_for_method_inputs + skip_d2h_for_method_outputs and "
        "MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False): inputs are "
        "expected on cuda:0, the output stays on cuda:0, no copy ops, inputs/outputs unplanned",
    )
    fx.write_program(
        lower({"forward": copy.deepcopy(m)}, {"forward": (x, y)}, LINEAR_OPS | ADD_OPS, skip_config())
    )
    fx.add_case("forward", [x, y], ef.eager(m, x, y))
    x2, y2 = torch.randn(4, 8), torch.randn(4, 16)
    fx.add_case("forward", [x2, y2], ef.eager(m, x2, y2))
    return fx


def build_two_methods_config() -> DeviceFixture:
    torch.manual_seed(104)
    fwd = LinearRelu().eval()
    dec = LinearAdd().eval()
    x = torch.randn(4, 8)
    dx, dy = torch.randn(4, 8), torch.randn(4, 16)
    fx = DeviceFixture(
        "two_methods_config",
        "forward(x[4,8]) = relu(linear(x)) with the default device config (h2d/d2h copies, "
        "planned I/O); decode(x[4,8], y[4,16]) = linear(x) + y with both skip flags and "
        "MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False) (per-method "
        "dicts for propagate_device_config and memory_planning_pass)",
    )
    config = ExecutorchBackendConfig(
        enable_non_cpu_memory_planning=True,
        propagate_device_config={
            "forward": PropagateDeviceConfig(),
            "decode": PropagateDeviceConfig(
                skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True
            ),
        },
        memory_planning_pass={
            "forward": MemoryPlanningPass(),
            "decode": MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
        },
    )
    fx.write_program(
        lower(
            {"forward": copy.deepcopy(fwd), "decode": copy.deepcopy(dec)},
            {"forward": (x,), "decode": (dx, dy)},
            LINEAR_OPS | RELU_OPS | ADD_OPS,
            config,
        )
    )
    fx.add_case("forward", [x], ef.eager(fwd, x))
    fx.add_case("decode", [dx, dy], ef.eager(dec, dx, dy))
    x2 = torch.randn(4, 8)
    fx.add_case("forward", [x2], ef.eager(fwd, x2))
    dx2, dy2 = torch.randn(4, 8), torch.randn(4, 16)
    fx.add_case("decode", [dx2, dy2], ef.eager(dec, dx2, dy2))
    return fx


def build_two_gpus() -> DeviceFixture:
    torch.manual_seed(106)
    m = TwoGpuChain().eval()
    x = torch.randn(4, 6)
    fx = DeviceFixture(
        "two_gpus",
        "forward(x[4,6]) = ((x * w) + c) * x, one delegate per op: mul on cuda:0, add and "
        "the second mul on cuda:1; a crosses from cuda:0 to cuda:1 through a d2h/h2d pair "
        "(the exporter keeps cross-device round trips)",
    )
    fx.write_program(
        lower(
            {"forward": copy.deepcopy(m)},
            {"forward": (x,)},
            MUL_OPS | ADD_OPS,
            default_config(),
            per_op=True,
            devices=["cuda:0", "cuda:1"],
        )
    )
    fx.add_case("forward", [x], ef.eager(m, x))
    x2 = torch.randn(4, 6)
    fx.add_case("forward", [x2], ef.eager(m, x2))
    return fx


def build_add_with_device() -> DeviceFixture:
    torch.manual_seed(105)
    m = Add().eval()
    a, b = torch.ones(2, 2), torch.ones(2, 2)
    fx = DeviceFixture(
        "add_with_device",
        "upstream golden fixture recreated: forward(a[2,2], b[2,2]) = a + b, add delegated to "
        "cuda:0; upstream expects non_const_buffer_sizes [0, 32, 48] and "
        "non_const_buffer_device [{buffer_idx: 2, CUDA, 0}]",
    )
    fx.write_program(
        lower({"forward": m}, {"forward": (a, b)}, ADD_OPS, default_config())
    )
    fx.add_case("forward", [a, b], ef.eager(m, a, b))
    a2, b2 = torch.randn(2, 2), torch.randn(2, 2)
    fx.add_case("forward", [a2, b2], ef.eager(m, a2, b2))
    return fx


# ----------------------------------------------------------------------------
# Program inspection (OPS.md)
# ----------------------------------------------------------------------------


def parse_pte_bytes(data: bytes):
    eh = _get_extended_header(data)
    size = eh.program_size if eh is not None and eh.is_valid() else len(data)
    return _flatbuffer_to_program(data[:size]), eh


def delegate_blob(data: bytes, prog, eh, delegate: schema.BackendDelegate) -> bytes:
    ref = delegate.processed
    loc = schema.DataLocation(ref.location)
    if loc == schema.DataLocation.INLINE:
        return bytes(prog.backend_delegate_data[ref.index].data)
    seg = prog.segments[ref.index]
    base = eh.segment_base_offset
    return data[base + seg.offset : base + seg.offset + seg.size]


def tensor_place(plan, t: schema.Tensor) -> str:
    eti = t.extra_tensor_info
    if eti is not None and schema.TensorDataLocation(eti.location) == schema.TensorDataLocation.EXTERNAL:
        return "external"
    if t.allocation_info is not None:
        ai = t.allocation_info
        off = (ai.memory_offset_high << 32) | ai.memory_offset_low
        return f"planned mem_id={ai.memory_id} offset={off}"
    if t.data_buffer_idx > 0:
        return f"const[{t.data_buffer_idx}]"
    return "unplanned"


def value_line(plan, i: int) -> str:
    v = plan.values[i].val
    if isinstance(v, schema.Tensor):
        numel = 1
        for d in v.sizes:
            numel *= d
        nbytes = numel * torch.empty((), dtype=_TORCH_OF[schema.ScalarType(v.scalar_type)]).element_size()
        role = []
        if i in plan.inputs:
            role.append(f"input{list(plan.inputs).index(i)}")
        if i in plan.outputs:
            role.append(f"output{list(plan.outputs).index(i)}")
        eti = v.extra_tensor_info
        dev = (
            f"device_type={schema.DeviceType(eti.device_type).name} device_index={eti.device_index}"
            if eti is not None
            else "extra_tensor_info=None (cpu)"
        )
        return (
            f"${i}: {ef.short_dtype(v.scalar_type)}{list(v.sizes)} {nbytes}B "
            f"{tensor_place(plan, v)}; {dev}" + (f"; {', '.join(role)}" if role else "")
        )
    return f"${i}: {ef.describe_value(plan.values[i])}"


_TORCH_OF = {
    schema.ScalarType.FLOAT: torch.float32,
    schema.ScalarType.HALF: torch.float16,
    schema.ScalarType.BFLOAT16: torch.bfloat16,
    schema.ScalarType.DOUBLE: torch.float64,
    schema.ScalarType.LONG: torch.int64,
    schema.ScalarType.INT: torch.int32,
    schema.ScalarType.BOOL: torch.bool,
    schema.ScalarType.BYTE: torch.uint8,
    schema.ScalarType.CHAR: torch.int8,
}


def op_names(plan) -> List[str]:
    return [f"{o.name}.{o.overload}" if o.overload else f'{o.name} (overload "")' for o in plan.operators]


def instr_line(plan, ins) -> str:
    a = ins.instr_args
    if isinstance(a, schema.DelegateCall):
        d = plan.delegates[a.delegate_index]
        return f"DelegateCall delegate={a.delegate_index} ({d.id}) args={list(a.args)}"
    return ef.instr_text(plan, ins)


def program_header(lines: List[str], data: bytes, prog, eh, indent: str = "") -> None:
    lines.append(f"{indent}- size: {len(data)} bytes; file identifier {data[4:8].decode('ascii', 'replace')!r}; program version {prog.version}")
    if eh is not None and eh.is_valid():
        lines.append(f"{indent}- extended header: program_size={eh.program_size}, segment_base_offset={eh.segment_base_offset}")
    else:
        lines.append(f"{indent}- extended header: none")
    lines.append(f"{indent}- segments (offset, size): {[(s.offset, s.size) for s in prog.segments]}")
    cs = prog.constant_segment
    lines.append(f"{indent}- constant_segment: segment_index={cs.segment_index}, offsets={list(cs.offsets)}")
    lines.append(f"{indent}- backend_delegate_data (inline): {len(prog.backend_delegate_data)}")


def plan_report(lines: List[str], data: bytes, prog, eh, plan, nested: bool) -> List[Tuple[int, bytes]]:
    """Appends the report of one execution plan; returns the (index, blob) of its delegates."""
    h = "####" if nested else "###"
    lines.append(f"{h} {'nested ' if nested else ''}method `{plan.name}`")
    lines.append("")
    ops = op_names(plan)
    lines.append(f"- operators ({len(ops)}): " + (", ".join(f"`{o}`" for o in ops) or "none"))
    lines.append(f"- non_const_buffer_sizes: {list(plan.non_const_buffer_sizes)}")
    nbd = plan.non_const_buffer_device
    lines.append(
        "- non_const_buffer_device: "
        + (
            "[" + ", ".join(
                f"{{buffer_idx: {b.buffer_idx}, device_type: {schema.DeviceType(b.device_type).name}, device_index: {b.device_index}}}"
                for b in nbd
            ) + "]"
            if nbd
            else "none (all non-const buffers on CPU)"
        )
    )
    lines.append("- inputs: " + "; ".join(
        f"${i} {device_str(plan.values[i].val) if isinstance(plan.values[i].val, schema.Tensor) else ''} "
        f"{tensor_place(plan, plan.values[i].val) if isinstance(plan.values[i].val, schema.Tensor) else ef.describe_value(plan.values[i])}"
        for i in plan.inputs
    ))
    lines.append("- outputs: " + "; ".join(
        f"${i} {device_str(plan.values[i].val) if isinstance(plan.values[i].val, schema.Tensor) else ''} "
        f"{tensor_place(plan, plan.values[i].val) if isinstance(plan.values[i].val, schema.Tensor) else ef.describe_value(plan.values[i])}"
        for i in plan.outputs
    ))
    blobs: List[Tuple[int, bytes]] = []
    if plan.delegates:
        lines.append("- delegates:")
        for k, d in enumerate(plan.delegates):
            blob = delegate_blob(data, prog, eh, d)
            specs = ", ".join(f"{c.key}={bytes(c.value)!r}" for c in d.compile_specs)
            lines.append(
                f"  - [{k}] id=`{d.id}` compile_specs=[{specs}] processed="
                f"{schema.DataLocation(d.processed.location).name}[{d.processed.index}] "
                f"nested .pte {len(blob)} bytes"
            )
            blobs.append((k, blob))
    else:
        lines.append("- delegates: none")
    dev_ts = [
        i for i, v in enumerate(plan.values)
        if isinstance(v.val, schema.Tensor) and device_str(v.val) != "cpu"
    ]
    lines.append(f"- tensors on a device: {', '.join(f'${i} ({device_str(plan.values[i].val)})' for i in dev_ts) or 'none'}")
    lines.append("- values:")
    lines.append("")
    lines.append("```")
    for i in range(len(plan.values)):
        lines.append(value_line(plan, i))
    lines.append("```")
    lines.append("")
    lines.append("- instructions:")
    lines.append("")
    lines.append("```")
    for c in plan.chains:
        for n, ins in enumerate(c.instructions):
            lines.append(f"{n:3d}: {instr_line(plan, ins)}")
    lines.append("```")
    lines.append("")
    return blobs


FIXTURE_NOTES: Dict[str, List[str]] = {
    "skip_flags": [
        "the outer method has no operators (no copies) and non_const_buffer_sizes [0, 0] "
        "with no non_const_buffer_device: its only tensors are the unplanned cuda:0 method "
        "inputs/outputs, which the caller provides (outputs too: alloc_graph_output=False).",
    ],
    "two_methods_config": [
        "execution plans are sorted by name: `decode` is plan 0, `forward` plan 1. "
        "Per-method configs: propagate_device_config and memory_planning_pass given as "
        "{method: ...} dicts (both supported per method by 1.5.1).",
    ],
    "add_with_device": [
        "matches the upstream golden values: non_const_buffer_sizes [0, 32, 48], "
        "non_const_buffer_device [{buffer_idx: 2, CUDA, 0}].",
    ],
}


def ops_report(fixtures: List[DeviceFixture]) -> str:
    lines = [
        "# Device fixture report",
        "",
        "Generated by `tools/export/export_device_fixtures.py` from the serialized `.pte` files",
        "(flatbuffer parsed without restoring segments). ExecuTorch 1.5.1,",
        "`to_edge_transform_and_lower(ep, partitioner=[DeviceOpPartitioner(ops)])` then",
        "`.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True, ...))`.",
        "Delegates use backend `ExecutorBackend` (the nested-program demo backend from",
        "`executorch/exir/backend/test/demos/rpc/executor_backend_preprocess.py`) with",
        "`CompileSpec(\"target_device\", b\"cuda:0\")`; each delegate blob is itself a complete",
        "`.pte` (default `to_executorch()`, CPU-only) and is reported below its parent method.",
        "",
        "Notation: `$id: dtype[sizes] nbytes placement; device`. placement is",
        "`planned mem_id=M offset=O` (allocation_info), `const[k]` (data_buffer_idx>0) or",
        "`unplanned` (no allocation_info: the caller provides the memory).",
        "Device comes from `extra_tensor_info.device_type/device_index`; tensors without",
        "extra_tensor_info are CPU. `non_const_buffer_device` lists the buffers (indices into",
        "non_const_buffer_sizes, i.e. mem_id) that live on a device; unlisted buffers are CPU.",
        "",
        "General observations:",
        "",
        "- `et_copy::_h2d_copy.out(self, out, ret)` copies a CPU tensor into a cuda:0 tensor",
        "  planned in the device buffer; `et_copy::_d2h_copy.out(self, out, ret)` copies back.",
        "  The DelegateCall args are the delegate inputs followed by its outputs; device",
        "  delegates take/produce device tensors only.",
        "- Memory planning is per device: CPU tensors use mem_id 1, cuda:0 tensors mem_id 2",
        "  (listed in non_const_buffer_device). A method with no planned CPU tensor still",
        "  reserves mem_id 1 with size 0 (see skip_flags).",
        "- Weights used only inside a delegate live in the nested program's constant segment",
        "  (tag_constant_data); the outer program has no constants.",
        "- Stock `executorch.runtime` (1.5.1 wheel) cannot run these programs: load_method",
        "  fails with `Failed to allocate N bytes for buffer 1 on device 1:0` (no CUDA allocator",
        "  registered; the runtime's buffer 1 is mem_id 2) or, without device buffers,",
        "  `Backend ExecutorBackend is not registered`. `--verify` therefore also runs a",
        "  host-only simulation (copies = identity, delegates = nested .pte via executorch.runtime).",
        "",
    ]
    for fx in fixtures:
        with open(fx.pte_path, "rb") as f:
            data = f.read()
        prog, eh = parse_pte_bytes(data)
        lines.append(f"## {fx.name}")
        lines.append("")
        lines.append(f"{fx.comment}.")
        lines.append("")
        for note in FIXTURE_NOTES.get(fx.name, []):
            lines.append(f"- NOTE: {note}")
        program_header(lines, data, prog, eh)
        lines.append("")
        for plan in prog.execution_plan:
            blobs = plan_report(lines, data, prog, eh, plan, nested=False)
            for k, blob in blobs:
                nprog, neh = parse_pte_bytes(blob)
                lines.append(f"#### `{plan.name}` delegate [{k}]: nested program")
                lines.append("")
                program_header(lines, blob, nprog, neh)
                lines.append("")
                for nplan in nprog.execution_plan:
                    inner = plan_report(lines, blob, nprog, neh, nplan, nested=True)
                    assert not inner, "nested program unexpectedly has delegates"
    return "\n".join(lines).rstrip("\n") + "\n"


# ----------------------------------------------------------------------------
# Verification (optional, --verify)
# ----------------------------------------------------------------------------


def _load_case_inputs(case) -> List[torch.Tensor]:
    return [torch.from_numpy(np.load(os.path.join(DEVICE_FIXTURES, p))) for p in case["inputs"]]


def _close(got: Sequence[torch.Tensor], case) -> bool:
    ok = len(got) == len(case["expected"])
    for g, p in zip(got, case["expected"]):
        e = np.load(os.path.join(DEVICE_FIXTURES, p))
        ok &= np.allclose(g.detach().numpy(), e, rtol=case["rtol"], atol=case["atol"])
    return bool(ok)


def simulate_method(rt, data: bytes, prog, eh, plan, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Host-only execution: copies are identity, delegates run their nested .pte."""
    vals: Dict[int, Any] = {}
    for i, v in enumerate(plan.values):
        val = v.val
        if isinstance(val, schema.Tensor):
            vals[i] = torch.zeros(list(val.sizes), dtype=_TORCH_OF[schema.ScalarType(val.scalar_type)])
            assert val.data_buffer_idx == 0, "outer program constants not handled"
        elif isinstance(val, schema.Int):
            vals[i] = val.int_val
        elif isinstance(val, schema.Double):
            vals[i] = val.double_val
        elif isinstance(val, schema.Bool):
            vals[i] = val.bool_val
        elif isinstance(val, schema.Null):
            vals[i] = None
    for i, t in zip(plan.inputs, inputs):
        vals[i] = t.clone()
    nested = {}
    for c in plan.chains:
        for ins in c.instructions:
            a = ins.instr_args
            if isinstance(a, schema.KernelCall):
                op = plan.operators[a.op_index]
                if op.name in ("et_copy::_h2d_copy", "et_copy::_d2h_copy"):
                    vals[a.args[1]].copy_(vals[a.args[0]])
                    continue
                ns, name = op.name.split("::")
                fn = getattr(getattr(getattr(torch.ops, ns), name), op.overload or "default")
                sch = fn._schema
                pos, kw = [], {}
                for arg, vid in zip(sch.arguments, a.args):
                    (kw.__setitem__(arg.name, vals[vid]) if arg.kwarg_only else pos.append(vals[vid]))
                fn(*pos, **kw)
            elif isinstance(a, schema.DelegateCall):
                if a.delegate_index not in nested:
                    blob = delegate_blob(data, prog, eh, plan.delegates[a.delegate_index])
                    np_ = rt.load_program(blob)
                    nprog, _ = parse_pte_bytes(blob)
                    nested[a.delegate_index] = (np_.load_method("forward"), len(nprog.execution_plan[0].inputs))
                meth, n_in = nested[a.delegate_index]
                outs = meth.execute([vals[i] for i in a.args[:n_in]])
                for vid, o in zip(a.args[n_in:], outs):
                    vals[vid].copy_(o)
            else:
                raise NotImplementedError(type(a).__name__)
    return [vals[i] for i in plan.outputs]


def verify(fixtures: List[DeviceFixture]) -> int:
    from executorch.runtime import Runtime

    rt = Runtime.get()
    print("registered backends:", rt.backend_registry.registered_backend_names)
    failures = 0
    for fx in fixtures:
        with open(fx.pte_path, "rb") as f:
            data = f.read()
        prog, eh = parse_pte_bytes(data)
        # 1) the stock runtime on the device program itself
        try:
            p = rt.load_program(data)
            for m in sorted(p.method_names):
                try:
                    meth = p.load_method(m)
                    case = next(c for c in fx.cases if c["method"] == m)
                    outs = meth.execute(_load_case_inputs(case))
                    print(f"[{fx.name}] executorch.runtime {m}: ran, match={_close(outs, case)}")
                except Exception as e:  # noqa: BLE001
                    print(f"[{fx.name}] executorch.runtime {m}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        except Exception as e:  # noqa: BLE001
            print(f"[{fx.name}] executorch.runtime load_program: {type(e).__name__}: {str(e)[:160]}")
        # 2) host simulation with nested programs run by executorch.runtime
        plans = {pl.name: pl for pl in prog.execution_plan}
        for case in fx.cases:
            got = simulate_method(rt, data, prog, eh, plans[case["method"]], _load_case_inputs(case))
            ok = _close(got, case)
            failures += not ok
            print(f"[{fx.name}] simulated {case['method']} case {case['inputs'][0]}: {'OK' if ok else 'MISMATCH'}")
    return failures


# ----------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if os.path.isdir(DEVICE_FIXTURES):
        shutil.rmtree(DEVICE_FIXTURES)
    os.makedirs(DEVICE_FIXTURES)

    fixtures = [
        build_one_delegate(),
        build_two_delegates(),
        build_shared_input(),
        build_skip_flags(),
        build_two_methods_config(),
        build_add_with_device(),
        build_two_gpus(),
    ]

    with open(os.path.join(DEVICE_FIXTURES, "manifest.json"), "w") as f:
        json.dump([fx.manifest_entry() for fx in fixtures], f, indent=2)
        f.write("\n")
    with open(os.path.join(DEVICE_FIXTURES, "OPS.md"), "w") as f:
        f.write(ops_report(fixtures))

    for fx in fixtures:
        size = os.path.getsize(fx.pte_path)
        assert size < 1_000_000, f"{fx.name}: .pte too large ({size} bytes)"
        sizes = {p.name: list(p.non_const_buffer_sizes) for p in fx.prog.execution_plan}
        print(f"{fx.name:20s} model.pte {size:6d} bytes, {len(fx.cases)} case(s), buffers {sizes}")
    if args.verify:
        return 1 if verify(fixtures) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
