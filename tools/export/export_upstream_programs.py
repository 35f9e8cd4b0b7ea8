#!/usr/bin/env python3
"""Export upstream ExecuTorch's own runtime test programs as etch fixtures.

Upstream builds the programs its C++ runtime tests load with
`test/models/export_program.py` (through `test/end2end/exported_module.py`) and
`test/models/export_program_with_device_info.py`. Neither ships in the pip wheel, so
this script carries the same module definitions and the same export recipe (read from
pytorch/executorch at the 1.4/1.5 release line; the 1.5.1 wheel is the pinned exporter):

  torch.export.export (per method, patch_forward) -> to_edge(_check_ir_validity=False)
  -> to_executorch(ExecutorchBackendConfig(passes=[DebugPass, to_scratch_op_pass],
     memory_planning_pass=MemoryPlanningPass(alloc_mutable_buffers=not
     export_state_names, share_mutable_buffers=...), ToOutVarPass(...),
     external_constants=..., emit_mutable_buffer_names=export_state_names))

Every module is written as tests/fixtures/upstream/<Module>.pte, and, for the modules
that have constants, again with external constants as <Module>Program.pte +
<Module>Program.ptd (upstream's naming for `--external-constants`).

Expected outputs come from ExecuTorch's own runtime (executorch.runtime, the wheel's
portable kernels), not from eager PyTorch. Each fixture lists a sequence of calls that
run in order on ONE loaded program (`Runtime.load_program`, which shares its host
arenas between methods as upstream's Module(share_memory_arenas=true) does), so
stateful modules record how their state evolves (ModuleStateful, the KV-cache modules
with increasing positions, and ModuleSharedState's forward/get_state/set_state sequence
from upstream's module_test.cpp TestSharedMemoryBuffer).

Files per fixture: <name>_<call>_<method>_in<k>.npy / _out<k>.npy. Non-tensor values
(int, float, bool) are 0-d .npy files with dtype "int" / "float" / "bool"; a None
output has no file and dtype "none". The manifest is tests/fixtures/upstream/manifest.json.
A fixture that ExecuTorch's runtime in the wheel cannot run (a demo backend only
upstream's C++ test harness registers) has no calls and a "skip" reason.

Usage:  /work/venv/bin/python tools/export/export_upstream_programs.py [--outdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.export import Dim, export
from torch.export._trace import _export
from torch.export.experimental import _export_forward_backward

import executorch.exir as exir
from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
from executorch.exir.capture._capture import patch_forward
from executorch.exir.dynamic_shape import DynamicMemoryPlanningMode
from executorch.exir.passes import (
    DebugPass,
    MemoryPlanningPass,
    to_scratch_op_pass,
    ToOutVarPass,
)
from executorch.runtime import Runtime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_fixtures as ef  # noqa: E402  (helpers only; no side effects on import)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUTDIR = os.path.join(REPO_ROOT, "tests", "fixtures", "upstream")

TOL_F32 = dict(rtol=1e-5, atol=1e-5)
TOL_F16 = dict(rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------
# Upstream's modules (test/models/export_program.py), unchanged.
# ----------------------------------------------------------------------------


class ModuleBasic(nn.Module):
    def forward(self, x):
        return torch.sin(x).max()

    def get_random_inputs(self):
        return (torch.randn(100),)

    @staticmethod
    def get_export_kwargs() -> Dict[str, Any]:
        # aten::max.default does not have an out variant.
        return {"ignore_to_out_var_failure": True}


class ModuleIndex(nn.Module):
    def forward(self, x):
        return x[1::2, torch.tensor([1, 2])]

    def get_random_inputs(self):
        return (torch.randn(10, 10, 10),)


class ModuleIntBool(nn.Module):
    def forward(self, x: torch.Tensor, y: int, z: bool):
        return x + y + int(z)

    def get_random_inputs(self):
        return (torch.ones(1), 1, True)


class ModuleNoOp(nn.Module):
    def forward(self, x, y):
        return (x, y)

    def get_random_inputs(self):
        return (torch.randn(2, 2), torch.randn(2, 2))


class ModuleAdd(nn.Module):
    def forward(self, x, y, alpha):
        return torch.add(x, y, alpha=alpha)

    def get_random_inputs(self):
        return (torch.randn(2, 2), torch.randn(2, 2), 1.0)


class ModuleAddHalf(nn.Module):
    def forward(self, x, y, alpha):
        return torch.add(x, y, alpha=alpha)

    def get_random_inputs(self):
        return (torch.randn(2, 2).half(), torch.randn(2, 2).half(), 1.0)


class ModuleDynamicCatUnallocatedIO(nn.Module):
    def __init__(self):
        super().__init__()
        self._inputs = (torch.randn(3, 4),)

    def forward(self, k):
        return torch.cat((k, torch.ones(1, 4)))

    def get_random_inputs(self):
        return self._inputs

    def get_dynamic_shapes(self):
        return ({0: Dim("dim0_k", max=3)},)

    def get_memory_planning_pass(self):
        return MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)


class ModuleAddMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = 3 * torch.ones(2, 2, dtype=torch.float)
        self.b = 2 * torch.ones(2, 2, dtype=torch.float)

    def forward(self, x: torch.Tensor):
        return torch.add(torch.mul(self.a, x), self.b)

    def get_random_inputs(self):
        return (torch.ones(2, 2, dtype=torch.float),)


class ModuleLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor):
        return self.linear(x)

    def get_random_inputs(self):
        return (torch.randn(3),)


class ModuleMultipleEntry(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = 3 * torch.ones(2, 2, dtype=torch.float)
        self.b = 2 * torch.ones(2, 2, dtype=torch.float)

    def forward(self, x: torch.Tensor):
        return x + self.a

    def forward2(self, x: torch.Tensor):
        return x + self.a + self.b

    def get_random_inputs(self):
        return (torch.ones(2, 2, dtype=torch.float),)

    @staticmethod
    def get_method_names_to_export() -> List[str]:
        return ["forward", "forward2"]


class ModuleSimpleTrain(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.linear(x).softmax(dim=0), y)

    def get_random_inputs(self):
        return (torch.randn(3), torch.tensor([1.0, 0.0, 0.0]))

    @staticmethod
    def export_joint():
        return True


class ModuleStateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(1, dtype=torch.int32))

    def forward(self, x):
        self.state.add_(1)
        return x + self.state

    def get_random_inputs(self):
        return (torch.ones(1),)

    @staticmethod
    def export_state_names():
        return True


class ModuleKVCacheInputPos(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x, input_pos):
        return (self.linear(x.to(torch.float)).to(torch.long) + input_pos).to(
            torch.float
        )

    def get_random_inputs(self):
        return (
            torch.randint(100, [1, 3], dtype=torch.long),
            torch.tensor([0], dtype=torch.long),
        )


class ModuleKVCacheCachePos(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x, cache_positions):
        return (self.linear(x.to(torch.float)).to(torch.long) + cache_positions).to(
            torch.float
        )

    def get_random_inputs(self):
        return (
            torch.randint(100, [1, 3], dtype=torch.long),
            torch.arange(3, dtype=torch.long),
        )


class ModuleNoKVCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x.to(torch.float))

    def get_random_inputs(self):
        return (torch.randint(100, [1, 3], dtype=torch.long),)


class ModuleSharedState(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.ones(1))

    def forward(self, x):
        return self.state.add_(1) + x

    def get_state(self):
        return self.state

    def set_state(self, x):
        self.state.copy_(x)

    def get_random_inputs(self):
        return (torch.ones(1),)

    def get_random_inputs_per_method(self):
        return {
            "forward": (torch.ones(1),),
            "get_state": (),
            "set_state": (torch.ones(1),),
        }

    @staticmethod
    def get_method_names_to_export() -> List[str]:
        return ["forward", "get_state", "set_state"]

    @staticmethod
    def share_mutable_buffers():
        return True


# The modules of upstream's :exported_programs genrule, plus ModuleLinear (exported
# there with external constants) and ModuleNoOp.
MODULES = [
    ModuleAdd,
    ModuleAddHalf,
    ModuleAddMul,
    ModuleBasic,
    ModuleKVCacheCachePos,
    ModuleKVCacheInputPos,
    ModuleMultipleEntry,
    ModuleNoKVCache,
    ModuleIndex,
    ModuleIntBool,
    ModuleDynamicCatUnallocatedIO,
    ModuleSimpleTrain,
    ModuleStateful,
    ModuleSharedState,
    ModuleLinear,
    ModuleNoOp,
]


# ----------------------------------------------------------------------------
# Export (test/end2end/exported_module.py's ExportedModule.export).
# ----------------------------------------------------------------------------


def _flag(cls, name: str, default):
    return getattr(cls, name)() if hasattr(cls, name) else default


def export_module(cls, external_constants: bool):
    """Exports `cls` as upstream's export_module_to_program does."""
    torch.manual_seed(0)
    kwargs = _flag(cls, "get_export_kwargs", {})
    export_joint = _flag(cls, "export_joint", False)
    state_names = _flag(cls, "export_state_names", False)
    share = _flag(cls, "share_mutable_buffers", False)
    methods = _flag(cls, "get_method_names_to_export", ["forward"])

    eager = cls().eval()
    inputs = eager.get_random_inputs()
    per_method = {}
    for m in methods:
        if hasattr(eager, "get_random_inputs_per_method"):
            inputs = eager.get_random_inputs_per_method()[m]
        per_method[m] = inputs
    dyn = eager.get_dynamic_shapes() if hasattr(eager, "get_dynamic_shapes") else None
    planning = MemoryPlanningPass(
        alloc_mutable_buffers=not state_names, share_mutable_buffers=share
    )
    if hasattr(eager, "get_memory_planning_pass"):
        planning = eager.get_memory_planning_pass()

    exported = {}
    for m, args in per_method.items():
        if export_joint:
            ep = _export(eager, args, dynamic_shapes=dyn, pre_dispatch=True)
            exported[m] = _export_forward_backward(ep)
        else:
            with patch_forward(eager, getattr(eager, m)):
                exported[m] = export(eager, args, dynamic_shapes=dyn)

    prog = to_edge(
        exported, compile_config=exir.EdgeCompileConfig(_check_ir_validity=False)
    ).to_executorch(
        ExecutorchBackendConfig(
            passes=[
                DebugPass(
                    show_src=True,
                    show_spec=False,
                    show_full_path=True,
                    show_all_frames=True,
                ),
                to_scratch_op_pass,
            ],
            dynamic_memory_planning_mode=DynamicMemoryPlanningMode.UPPER_BOUND,
            memory_planning_pass=planning,
            to_out_var_pass=ToOutVarPass(kwargs.get("ignore_to_out_var_failure", False)),
            external_constants=external_constants,
            emit_mutable_buffer_names=state_names,
        )
    )
    return prog


# ----------------------------------------------------------------------------
# Call sequences run on one loaded program.
# ----------------------------------------------------------------------------


def call_sequence(cls) -> List[Tuple[str, Sequence[Any]]]:
    """The calls a fixture makes, in order, on one loaded program."""
    torch.manual_seed(1)
    name = cls.__name__
    if name == "ModuleSharedState":
        # upstream extension/module/test/module_test.cpp, TestSharedMemoryBuffer.
        two = torch.tensor([2.0])
        return [
            ("get_state", ()),
            ("forward", (two,)),
            ("forward", (two,)),
            ("get_state", ()),
            ("set_state", (torch.zeros(1),)),
            ("get_state", ()),
            ("forward", (two,)),
            ("get_state", ()),
        ]
    if name == "ModuleKVCacheInputPos":
        x = torch.randint(100, [1, 3], dtype=torch.long)
        return [("forward", (x, torch.tensor([p]))) for p in range(4)]
    if name == "ModuleKVCacheCachePos":
        x = torch.randint(100, [1, 3], dtype=torch.long)
        return [("forward", (x, torch.arange(p, p + 3))) for p in range(4)]
    if name == "ModuleStateful":
        return [("forward", (torch.ones(1),)) for _ in range(3)]
    if name == "ModuleDynamicCatUnallocatedIO":
        return [("forward", (torch.randn(n, 4),)) for n in (3, 1, 2)]
    eager = cls()
    methods = _flag(cls, "get_method_names_to_export", ["forward"])
    calls = []
    for m in methods:
        calls.append((m, eager.get_random_inputs()))
        calls.append((m, eager.get_random_inputs()))
    return calls


def _value_dtype(v) -> str:
    return "none" if v is None else ef.dtype_name(v)


def _save(path: str, v) -> None:
    np.save(path, ef.to_numpy(v))


def _tolerance(dtypes: Sequence[str]) -> Dict[str, float]:
    return TOL_F16 if "float16" in dtypes else TOL_F32


def record_calls(outdir: str, name: str, pte: str, ptd: Optional[str], calls) -> list:
    """Runs `calls` on one program loaded by ExecuTorch's runtime and saves values."""
    program = Runtime.get().load_program(
        os.path.join(outdir, pte),
        data_path=os.path.join(outdir, ptd) if ptd else None,
    )
    cases = []
    for ci, (method, args) in enumerate(calls):
        outs = program.load_method(method).execute(list(args))
        case = dict(method=method, inputs=[], input_dtypes=[], expected=[], output_dtypes=[])
        for k, a in enumerate(args):
            f = f"{name}_{ci}_{method}_in{k}.npy"
            _save(os.path.join(outdir, f), a)
            case["inputs"].append(f)
            case["input_dtypes"].append(_value_dtype(a))
        for k, o in enumerate(outs):
            dt = _value_dtype(o)
            f = None
            if dt != "none":
                f = f"{name}_{ci}_{method}_out{k}.npy"
                _save(os.path.join(outdir, f), o)
            case["expected"].append(f)
            case["output_dtypes"].append(dt)
        case.update(_tolerance(case["input_dtypes"] + case["output_dtypes"]))
        cases.append(case)
    return cases


# Fixtures with no recorded calls: ExecuTorch's runtime in the wheel cannot run them.
SKIP = {
    "ModuleStateful": "state without planned memory: exported with "
    "alloc_mutable_buffers=False (export_state_names), so the buffer 'state' has no "
    "memory until the caller attaches some (upstream's method_test does it with the C++ "
    "Method::get_attribute(\"state\")->set_data); the wheel's Python runtime cannot, and "
    "crashes (SIGSEGV) executing it",
}


def export_all(outdir: str) -> list:
    manifest = []
    for cls in MODULES:
        for external in (False, True):
            torch.manual_seed(0)
            name = cls.__name__ + ("Program" if external else "")
            prog = export_module(cls, external)
            pte = f"{name}.pte"
            with open(os.path.join(outdir, pte), "wb") as fp:
                prog.write_to_file(fp)
            ptd = None
            if external:
                if not prog._tensor_data:
                    os.remove(os.path.join(outdir, pte))
                    continue  # No constants: the same program as without.
                prog._tensor_data[name] = prog._tensor_data.pop("_default_external_constant")
                prog.write_tensor_data_to_file(outdir)
                ptd = f"{name}.ptd"
            entry = dict(name=name, pte=pte, ptd=ptd, cases=[])
            if cls.__name__ in SKIP:
                entry["skip"] = SKIP[cls.__name__]
            else:
                entry["cases"] = record_calls(outdir, name, pte, ptd, call_sequence(cls))
            manifest.append(entry)
            print(f"{name}: {len(entry['cases'])} calls")
    manifest.append(export_device_info(outdir))
    return manifest


# ----------------------------------------------------------------------------
# test/models/export_program_with_device_info.py
# ----------------------------------------------------------------------------


class ModuleAddWithDevice(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.add(a, b)

    def get_random_inputs(self):
        return (torch.randn(2, 2), torch.randn(2, 2))


def export_device_info(outdir: str) -> dict:
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    torch.manual_seed(0)
    model = ModuleAddWithDevice()
    edge = to_edge(
        export(model, model.get_random_inputs()),
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    prog = edge.to_backend(DeviceAwarePartitioner()).to_executorch(
        ExecutorchBackendConfig(emit_stacktrace=False, enable_non_cpu_memory_planning=True)
    )
    with open(os.path.join(outdir, "ModuleAddWithDevice.pte"), "wb") as fp:
        fp.write(prog.buffer)
    registered = Runtime.get().backend_registry.registered_backend_names
    assert "BackendWithCompilerDemo" not in registered, "the demo backend is registered now"
    print("ModuleAddWithDevice: no calls (BackendWithCompilerDemo)")
    return dict(
        name="ModuleAddWithDevice",
        pte="ModuleAddWithDevice.pte",
        ptd=None,
        cases=[],
        skip="BackendWithCompilerDemo: the add is delegated to upstream's demo backend, "
        "which only upstream's C++ test harness registers (ExecuTorch's runtime in the "
        "wheel cannot run it either); the program is checked for its cuda:0 device "
        "annotations instead",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default=OUTDIR)
    args = parser.parse_args()
    shutil.rmtree(args.outdir, ignore_errors=True)
    os.makedirs(args.outdir)
    manifest = export_all(args.outdir)
    with open(os.path.join(args.outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
