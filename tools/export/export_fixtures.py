#!/usr/bin/env python3
"""Export the etch test fixtures with the stock ExecuTorch exporter.

Writes, relative to the repository root:
  tests/fixtures/<name>/model.pte          (+ model.ptd for mlp_external)
  tests/fixtures/<name>/<method>_<case>_in<k>.npy / _out<k>.npy
  tests/fixtures/manifest.json
  tests/fixtures/OPS.md
  tests/fixtures/transformer_instructions.txt
  examples/models/mlp.pte, examples/models/mlp_input.npy

Every model is exported with
  torch.export.export(model.eval(), args) -> executorch.exir.to_edge(...) -> .to_executorch()
using default settings (no delegation). Expected outputs come from running the
eager PyTorch model on the same inputs.

bfloat16 values are stored as float32 .npy (exactly representable); the real
dtype is recorded in the manifest ("input_dtypes"/"output_dtypes").
Non-tensor (python scalar) inputs/outputs are stored as 0-d .npy and get dtype
"int" / "float" / "bool".

Usage:  /work/venv/bin/python tools/export/export_fixtures.py
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from executorch.exir import ExecutorchBackendConfig, to_edge
from executorch.exir import schema
from executorch.exir._serialize._program import (
    _flatbuffer_to_program,
    _get_extended_header,
)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")
EXAMPLES = os.path.join(REPO_ROOT, "examples", "models")

# Tolerances (see brief).
TOL_F32 = dict(rtol=1e-5, atol=1e-5)
TOL_F16 = dict(rtol=1e-2, atol=1e-2)
TOL_BF16 = dict(rtol=2e-2, atol=2e-2)
TOL_EXACT = dict(rtol=0.0, atol=0.0)

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
}


# ----------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return torch.softmax(self.fc2(self.act(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.relu2 = nn.ReLU()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        # Non-trivial BN statistics and affine parameters.
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(8) * 0.5)
            self.bn.running_var.copy_(torch.rand(8) * 1.5 + 0.5)
            self.bn.weight.copy_(torch.rand(8) + 0.5)
            self.bn.bias.copy_(torch.randn(8) * 0.2)

    def forward(self, x):
        x = self.pool(self.relu1(self.bn(self.conv1(x))))
        x = self.relu2(self.conv2(x))
        x = torch.flatten(self.gap(x), 1)
        return self.fc(x)


class ConvNet(nn.Module):
    """Convolutions of the shapes etch's packed kernels take different paths for (pixel
    vectors on 28x28 planes, pixel tiles on 14x14 and 7x7 with 32 or 48 output channels,
    a 1x1 convolution, output channels not a multiple of 16), each weight a constant the
    runtime packs at load (tests/prepare.rs), with batch norms and ReLUs between."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([
            nn.Conv2d(8, 16, 3, padding=1),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.Conv2d(32, 48, 3, stride=2, padding=1),
            nn.Conv2d(48, 24, 1),
            nn.Conv2d(24, 48, 3, padding=1),
            nn.Conv2d(48, 40, 3, padding=1),
        ])
        self.bns = nn.ModuleList([nn.BatchNorm2d(c.out_channels) for c in self.convs])
        self.fc = nn.Linear(40, 10)
        with torch.no_grad():
            for bn in self.bns:
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        for conv, bn in zip(self.convs, self.bns):
            x = torch.relu(bn(conv(x)))
        return self.fc(x.mean(dim=(2, 3)))


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    return bn


class FuseNet(nn.Module):
    """Every chain etch fuses into a convolution at load (tests/fuse.rs), as torchvision's
    mobilenets and efficientnet export them: batch norm with hardswish (exported as add,
    clamps, product and division), ReLU6 (hardtanh), SiLU (sigmoid and product), ReLU, none;
    depthwise 3x3 and 5x5, a residual add, a squeeze-and-excitation block, channel counts
    on and off multiples of 16."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), _bn(16), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), _bn(16), nn.ReLU6())
        self.pw = nn.Sequential(nn.Conv2d(16, 16, 1, bias=False), _bn(16))
        self.expand = nn.Sequential(nn.Conv2d(16, 40, 1, bias=False), _bn(40), nn.SiLU())
        self.dw5 = nn.Sequential(nn.Conv2d(40, 40, 5, 2, 2, groups=40, bias=False), _bn(40), nn.SiLU())
        self.se1 = nn.Conv2d(40, 8, 1)
        self.se2 = nn.Conv2d(8, 40, 1)
        self.proj = nn.Sequential(nn.Conv2d(40, 24, 1, bias=False), _bn(24), nn.ReLU())
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.pw(self.dw(x))
        x = self.dw5(self.expand(x))
        s = torch.sigmoid(self.se2(nn.functional.silu(self.se1(x.mean((2, 3), keepdim=True)))))
        x = self.proj(x * s)
        return self.fc(x.mean((2, 3)))


class FusePlain(nn.Module):
    """Chains without a batch norm (the fused call gives the unfused calls' bits):
    convolution + ReLU, + SiLU, + ReLU6 (depthwise), + hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.c3 = nn.Conv2d(32, 20, 3, stride=2, padding=1)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = nn.functional.silu(self.c2(x))
        x = nn.functional.relu6(self.dw(x))
        return nn.functional.hardswish(self.c3(x))


class TokenModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 50)

    def forward(self, tokens):
        logits = self.head(self.norm(self.emb(tokens)))
        top = torch.topk(logits, k=5, dim=-1)
        return logits, torch.argmax(logits, dim=-1), top.values, top.indices


class Stateful(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.zeros(4))

    def forward(self, x):
        self.acc.add_(x)
        return self.acc * 2.0


class SmallMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class TwoMethodsForward(nn.Module):
    def __init__(self, w: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)
        self.b = nn.Parameter(b)

    def forward(self, x):
        return torch.relu(x @ self.w + self.b)


class DoublePlus(nn.Module):
    def forward(self, x, y):
        return 2 * x + y


class ScalarIO(nn.Module):
    """Takes a tensor and a python int; returns a 0-d tensor, a tensor and a python int.

    torch.export specializes the int input `k` to its traced value (3), so the
    program only accepts k == 3 (it is still an Int input value of the method).
    `x.shape[0]` is returned as a constant Int output.
    """

    def forward(self, x, k: int):
        return x.sum(), x.mean(dim=0) * k, x.shape[0]


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def dtype_name(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return DTYPE_NAMES[v.dtype]
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    raise TypeError(f"unsupported value type {type(v)}")


def to_numpy(v: Any) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)  # exact
        return t.numpy()
    if isinstance(v, bool):
        return np.array(v, dtype=np.bool_)
    if isinstance(v, int):
        return np.array(v, dtype=np.int64)
    if isinstance(v, float):
        return np.array(v, dtype=np.float64)
    raise TypeError(f"unsupported value type {type(v)}")


def save_values(fdir: str, name: str, prefix: str, values: Sequence[Any]) -> List[str]:
    rels = []
    for k, v in enumerate(values):
        rel = f"{name}/{prefix}{k}.npy"
        np.save(os.path.join(FIXTURES, rel), to_numpy(v))
        rels.append(rel)
    return rels


def flatten_outputs(out: Any) -> List[Any]:
    leaves, _ = tree_flatten(out)
    return leaves


def export_edge(
    models: Dict[str, nn.Module],
    args: Dict[str, tuple],
    dynamic_shapes: Optional[Dict[str, Any]] = None,
    config: Optional[ExecutorchBackendConfig] = None,
):
    eps = {}
    for m, model in models.items():
        ds = dynamic_shapes.get(m) if dynamic_shapes else None
        eps[m] = torch.export.export(model.eval(), args[m], dynamic_shapes=ds)
    edge = to_edge(eps if len(eps) > 1 or "forward" not in eps else eps["forward"])
    return edge.to_executorch(config) if config is not None else edge.to_executorch()


class Fixture:
    """Collects the cases of one fixture and writes its files."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dir = os.path.join(FIXTURES, name)
        os.makedirs(self.dir, exist_ok=True)
        self.cases: List[Dict[str, Any]] = []
        self.counters: Dict[str, int] = {}
        self.ptd: Optional[str] = None
        self.comment: Optional[str] = None

    def add_case(self, method: str, inputs: Sequence[Any], outputs: Any, tol: Dict[str, float]):
        idx = self.counters.get(method, 0)
        self.counters[method] = idx + 1
        outs = flatten_outputs(outputs)
        case = {
            "method": method,
            "inputs": save_values(self.dir, self.name, f"{method}_{idx}_in", inputs),
            "input_dtypes": [dtype_name(v) for v in inputs],
            "expected": save_values(self.dir, self.name, f"{method}_{idx}_out", outs),
            "output_dtypes": [dtype_name(v) for v in outs],
        }
        # Integer / bool / scalar-int outputs are exact; use per-output tolerance
        # only via dtype (consumers compare non-float dtypes exactly).
        case.update(tol)
        self.cases.append(case)

    def write_program(self, prog) -> None:
        with open(os.path.join(self.dir, "model.pte"), "wb") as f:
            prog.write_to_file(f)

    def manifest_entry(self) -> Dict[str, Any]:
        e: Dict[str, Any] = {"name": self.name, "pte": f"{self.name}/model.pte"}
        if self.ptd:
            e["ptd"] = self.ptd
        if self.comment:
            e["comment"] = self.comment
        e["cases"] = self.cases
        return e


def eager(model: nn.Module, *args):
    with torch.no_grad():
        return model(*args)


# ----------------------------------------------------------------------------
# Fixture builders
# ----------------------------------------------------------------------------


def build_mlp_family() -> List[Fixture]:
    fixtures = []
    torch.manual_seed(0)
    base = MLP().eval()
    torch.manual_seed(1)
    x32 = torch.randn(4, 16)

    # mlp (f32)
    fx = Fixture("mlp")
    prog = export_edge({"forward": copy.deepcopy(base)}, {"forward": (x32,)})
    fx.write_program(prog)
    fx.add_case("forward", [x32], eager(base, x32), TOL_F32)
    fixtures.append(fx)

    # mlp_f16 / mlp_bf16: same weights converted; eager expected computed in that dtype.
    for name, dt, tol in (
        ("mlp_f16", torch.float16, TOL_F16),
        ("mlp_bf16", torch.bfloat16, TOL_BF16),
    ):
        m = copy.deepcopy(base).to(dt).eval()
        x = x32.to(dt)
        fx = Fixture(name)
        prog = export_edge({"forward": copy.deepcopy(m)}, {"forward": (x,)})
        fx.write_program(prog)
        fx.add_case("forward", [x], eager(m, x), tol)
        fixtures.append(fx)

    # mlp_external: same MLP, weights in a separate .ptd file.
    fx = Fixture("mlp_external")
    prog = export_edge(
        {"forward": copy.deepcopy(base)},
        {"forward": (x32,)},
        config=ExecutorchBackendConfig(external_constants=True),
    )
    fx.write_program(prog)
    # ExecuTorch 1.5.1 keeps the external data in prog._tensor_data
    # ({file_stem: Cord}); write_tensor_data_to_file(dir) writes <stem>.ptd.
    # The default stem is "_default_external_constant"; we rename to model.ptd
    # (the .pte references tensors by name/key, not by file name).
    data = prog._tensor_data or {}
    assert len(data) == 1, f"expected exactly one external data file, got {list(data)}"
    (stem, cord), = data.items()
    with open(os.path.join(fx.dir, "model.ptd"), "wb") as f:
        cord.write_to_file(f)
    fx.ptd = "mlp_external/model.ptd"
    fx.comment = f"weights live in model.ptd (exporter's default data file name: {stem}.ptd)"
    fx.add_case("forward", [x32], eager(base, x32), TOL_F32)
    fixtures.append(fx)
    return fixtures


def build_cnn() -> Fixture:
    torch.manual_seed(2)
    m = CNN().eval()
    x = torch.randn(2, 3, 16, 16)
    fx = Fixture("cnn")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (x,)}))
    fx.add_case("forward", [x], eager(m, x), TOL_F32)
    return fx


def build_convnet() -> Fixture:
    torch.manual_seed(12)
    m = ConvNet().eval()
    x = torch.randn(1, 8, 28, 28)
    fx = Fixture("convnet")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (x,)}))
    fx.add_case("forward", [x], eager(m, x), TOL_F32)
    return fx


def build_fusenet() -> Fixture:
    torch.manual_seed(13)
    m, plain = FuseNet().eval(), FusePlain().eval()
    x = torch.randn(1, 3, 24, 24)
    fx = Fixture("fusenet")
    fx.write_program(
        export_edge(
            {"forward": copy.deepcopy(m), "plain": copy.deepcopy(plain)},
            {"forward": (x,), "plain": (x,)},
        )
    )
    fx.add_case("forward", [x], eager(m, x), TOL_F32)
    fx.add_case("plain", [x], eager(plain, x), TOL_F32)
    return fx


def build_transformer() -> Fixture:
    torch.manual_seed(3)
    m = nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
    ).eval()
    x = torch.randn(2, 8, 32)
    fx = Fixture("transformer")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (x,)}))
    with torch.no_grad():
        # Disable the fused fast path so eager uses the same decomposed math
        # that torch.export traces.
        prev = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        y = m(x)
        torch.backends.mha.set_fastpath_enabled(prev)
    # Softmax + two LayerNorms + accumulation order differences between eager
    # and the portable kernels: allow atol 1e-4 (rtol stays 1e-5).
    fx.add_case("forward", [x], y, dict(rtol=1e-5, atol=1e-4))
    return fx


def build_token_model() -> Fixture:
    torch.manual_seed(4)
    m = TokenModel().eval()
    toks = torch.randint(0, 100, (2, 6), dtype=torch.int64)
    fx = Fixture("token_model")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (toks,)}))
    fx.comment = (
        "outputs: logits f32, argmax int64, topk values f32, topk indices int64; "
        "rtol/atol apply to float outputs only, integer outputs must match exactly"
    )
    # Outputs: logits f32, argmax i64, topk values f32, topk indices i64.
    # Float outputs use the f32 tolerance; int64 outputs must match exactly
    # (consumers compare integer dtypes exactly regardless of rtol/atol).
    fx.add_case("forward", [toks], eager(m, toks), TOL_F32)
    return fx


def build_stateful() -> Fixture:
    torch.manual_seed(5)
    m = Stateful().eval()
    fx = Fixture("stateful")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (torch.zeros(4),)}))
    fx.comment = "cases must run in order on one loaded method; acc buffer accumulates"
    for _ in range(3):
        x = torch.randn(4)
        y = eager(m, x).clone()
        fx.add_case("forward", [x], y, TOL_F32)
    return fx


class CondModel(nn.Module):
    """Data-dependent control flow: ExecuTorch emits JumpFalse and Move instructions."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: t * 3.0 - 1.0, (x,))


def build_cond() -> Fixture:
    torch.manual_seed(11)
    m = CondModel().eval()
    fx = Fixture("cond")
    fx.write_program(export_edge({"forward": copy.deepcopy(m)}, {"forward": (torch.ones(2, 4),)}))
    fx.comment = "torch.cond: one case takes each branch"
    for sign in (1.0, -1.0):
        x = torch.rand(2, 4) * sign
        fx.add_case("forward", [x], eager(m, x), TOL_F32)
    return fx


def build_dynamic_batch() -> Fixture:
    torch.manual_seed(6)
    m = SmallMLP().eval()
    x4 = torch.randn(4, 8)
    batch = torch.export.Dim("batch", min=1, max=32)
    fx = Fixture("dynamic_batch")
    fx.write_program(
        export_edge(
            {"forward": copy.deepcopy(m)},
            {"forward": (x4,)},
            dynamic_shapes={"forward": {"x": {0: batch}}},
        )
    )
    fx.comment = "dim 0 dynamic in [1, 32]; traced at batch 4; cases at batch 4, 7, 1"
    for b in (4, 7, 1):
        x = x4 if b == 4 else torch.randn(b, 8)
        fx.add_case("forward", [x], eager(m, x), TOL_F32)
    return fx


class KVCache(nn.Module):
    """A decoder-style step: a dynamic number of rows is accumulated into a slice of a
    cache buffer, a counter buffer is bumped, and the output is reshaped with a size
    computed at run time (sym_size, executorch_prim::mul.Scalar, slice_scatter, copy_
    into both buffers)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(16, 8))
        self.register_buffer("count", torch.zeros(1))
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        t = x.shape[0]
        self.cache[:t].add_(self.proj(x))
        self.count.add_(1.0)
        y = self.cache[:t] * self.count
        return y.reshape(t * 8)


def build_kv_cache() -> Fixture:
    torch.manual_seed(13)
    m = KVCache().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    rows = torch.export.Dim("rows", min=1, max=16)
    fx = Fixture("kv_cache")
    fx.write_program(
        export_edge(
            {"forward": copy.deepcopy(m)},
            {"forward": (torch.randn(4, 8),)},
            dynamic_shapes={"forward": {"x": {0: rows}}},
        )
    )
    fx.comment = (
        "cases must run in order on one loaded method; dim 0 dynamic in [1, 16]; the "
        "cache and count buffers accumulate (cases at 4, 7, 2 rows)"
    )
    for t in (4, 7, 2):
        x = torch.randn(t, 8)
        fx.add_case("forward", [x], eager(m, x).clone(), TOL_F32)
    return fx


class DecoderLayer(nn.Module):
    """Attention over a key/value cache written at the given positions (index_put into
    mutable buffers), masked to the positions filled so far."""

    def __init__(self, d: int, heads: int, slots: int) -> None:
        super().__init__()
        self.heads, self.slots = heads, slots
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("k", torch.zeros(1, heads, slots, d // heads))
        self.register_buffer("v", torch.zeros(1, heads, slots, d // heads))

    def forward(self, x, pos):
        t, d = x.shape[1], x.shape[2]
        q, k, v = self.qkv(self.norm(x)).view(1, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        self.k[:, :, pos] = k
        self.v[:, :, pos] = v
        mask = torch.arange(self.slots)[None, :] <= pos[:, None]
        y = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask)
        return x + self.o(y.transpose(1, 2).reshape(1, t, d))


class KVDecoder(nn.Module):
    """A two-layer decoder with per-layer KV caches, fed a dynamic number of tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.layers = nn.ModuleList([DecoderLayer(32, 4, 16) for _ in range(2)])
        self.head = nn.Linear(32, 64)

    def forward(self, ids, pos):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, pos)
        return self.head(x)


def build_kv_decoder() -> Fixture:
    torch.manual_seed(14)
    m = KVDecoder().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    tokens = torch.export.Dim("tokens", min=1, max=8)
    fx = Fixture("kv_decoder")
    fx.write_program(
        export_edge(
            {"forward": copy.deepcopy(m)},
            {"forward": (torch.tensor([[1, 2, 3]]), torch.arange(3))},
            dynamic_shapes={"forward": ({1: tokens}, {0: tokens})},
        )
    )
    fx.comment = (
        "cases must run in order on one loaded method: a 3-token prefill, then 1 and 2 "
        "tokens; the four KV-cache buffers carry over"
    )
    steps = [([[1, 2, 3]], [0, 1, 2]), ([[7]], [3]), ([[9, 4]], [4, 5])]
    for ids, pos in steps:
        ids, pos = torch.tensor(ids), torch.tensor(pos)
        fx.add_case("forward", [ids, pos], eager(m, ids, pos).clone(), TOL_F32)
    return fx


def build_two_methods() -> Fixture:
    torch.manual_seed(7)
    fwd = TwoMethodsForward(torch.randn(8, 6) * 0.5, torch.randn(6) * 0.1).eval()
    dp = DoublePlus().eval()
    x = torch.randn(3, 8)
    a, b = torch.randn(2, 5), torch.randn(2, 5)
    fx = Fixture("two_methods")
    fx.write_program(
        export_edge(
            {"forward": copy.deepcopy(fwd), "double_plus": dp},
            {"forward": (x,), "double_plus": (a, b)},
        )
    )
    fx.add_case("forward", [x], eager(fwd, x), TOL_F32)
    fx.add_case("double_plus", [a, b], eager(dp, a, b), TOL_F32)
    x2 = torch.randn(3, 8)
    fx.add_case("forward", [x2], eager(fwd, x2), TOL_F32)
    return fx


def build_scalar_io() -> Fixture:
    torch.manual_seed(8)
    m = ScalarIO().eval()
    x = torch.randn(3, 4)
    fx = Fixture("scalar_io")
    fx.write_program(export_edge({"forward": m}, {"forward": (x, 3)}))
    fx.comment = (
        "inputs: f32 [3,4] tensor + python int k (specialized to 3 at export); "
        "outputs: 0-d f32 sum, f32 [4] mean*k, python int x.shape[0] (constant 3)"
    )
    fx.add_case("forward", [x, 3], eager(m, x, 3), TOL_F32)
    return fx


# ----------------------------------------------------------------------------
# OPS.md / instruction dump (from the serialized .pte)
# ----------------------------------------------------------------------------


FIXTURE_NOTES: Dict[str, List[str]] = {
    "mlp_external": [
        "no extended header / no segment data in the .pte; constant tensors carry "
        "extra_tensor_info.location=EXTERNAL and fully_qualified_name (fc1.weight, ...); "
        "their data_buffer_idx values (0..3) are not constant-buffer indices. "
        "The data lives in model.ptd, a FlatTensor file (magic 'FT01' + 'FH01' header), "
        "looked up by fqn key.",
    ],
    "stateful": [
        "the `acc` buffer is a memory-planned mutable tensor (value $0, planned in "
        "buffer 1); the program stores NO initial data for it, the exported graph "
        "ends with aten::copy_ (empty overload name) writing the new value back into "
        "$0. The fixture assumes the planned arena starts zeroed (the initial "
        "buffer value is zeros) and that it persists across execute() calls.",
    ],
    "scalar_io": [
        "input $2 is an Int (python int k, specialized at export to 3); output $16 "
        "is an Int constant (x.shape[0] == 3). Output $3 is a 0-d float tensor.",
    ],
    "two_methods": [
        "`2 * x` is lowered to a LONG 0-d constant tensor converted to float via "
        "dim_order_ops::_to_dim_order_copy.out, then aten::mul.out (broadcast).",
    ],
    "dynamic_batch": [
        "input/output sizes in the program are the upper bounds (32); the runtime "
        "must resize tensors to the actual batch (DYNAMIC_BOUND).",
    ],
}


def load_raw_program(path: str):
    """Parse the .pte flatbuffer without moving segments back into the program."""
    with open(path, "rb") as f:
        data = f.read()
    eh = _get_extended_header(data)
    size = eh.program_size if eh is not None and eh.is_valid() else len(data)
    return _flatbuffer_to_program(data[:size]), eh, len(data)


def short_dtype(st: Any) -> str:
    return schema.ScalarType(st).name if not isinstance(st, str) else st


def describe_value(v: schema.EValue) -> str:
    val = v.val
    tag = type(val).__name__
    if isinstance(val, schema.Tensor):
        dyn = schema.TensorShapeDynamism(val.shape_dynamism).name
        eti = val.extra_tensor_info
        if eti is not None and schema.TensorDataLocation(eti.location) == schema.TensorDataLocation.EXTERNAL:
            # data_buffer_idx is not meaningful here; data is looked up by fqn in the .ptd
            loc = f"external fqn={eti.fully_qualified_name}"
        elif val.allocation_info is not None:
            loc = "planned"
        elif val.data_buffer_idx > 0:
            loc = f"const[{val.data_buffer_idx}]"
        else:
            loc = "unplanned"
        if eti is not None and not loc.startswith("external") and eti.fully_qualified_name:
            loc += f" fqn={eti.fully_qualified_name}"
        return f"Tensor({short_dtype(val.scalar_type)}{list(val.sizes)} {dyn} {loc})"
    if isinstance(val, schema.Int):
        return f"Int({val.int_val})"
    if isinstance(val, schema.Bool):
        return f"Bool({val.bool_val})"
    if isinstance(val, schema.Double):
        return f"Double({val.double_val})"
    if isinstance(val, schema.Null):
        return "Null"
    if isinstance(val, schema.String):
        return f"String({val.string_val!r})"
    if isinstance(val, (schema.IntList, schema.TensorList, schema.OptionalTensorList)):
        return f"{tag}(value_ids={list(val.items)})"
    if isinstance(val, (schema.DoubleList, schema.BoolList)):
        return f"{tag}({list(val.items)})"
    return tag


def resolve_intlist(plan, v: schema.EValue) -> str:
    if isinstance(v.val, schema.IntList):
        ints = []
        for i in v.val.items:
            iv = plan.values[i].val
            ints.append(str(iv.int_val) if isinstance(iv, schema.Int) else f"${i}")
        return "IntList[" + ", ".join(ints) + "]"
    return describe_value(v)


def instr_text(plan, ins: schema.Instruction) -> str:
    a = ins.instr_args
    if isinstance(a, schema.KernelCall):
        op = plan.operators[a.op_index]
        args = ", ".join(f"${i}:{resolve_intlist(plan, plan.values[i])}" for i in a.args)
        return f"KernelCall {op.name}.{op.overload or '<empty>'}({args})"
    if isinstance(a, schema.DelegateCall):
        return f"DelegateCall delegate={a.delegate_index} args={a.args}"
    if isinstance(a, schema.MoveCall):
        return f"MoveCall ${a.move_from} -> ${a.move_to}"
    if isinstance(a, schema.JumpFalseCall):
        return f"JumpFalseCall cond=${a.cond_value_index} dest={a.destination_instruction}"
    if isinstance(a, schema.FreeCall):
        return f"FreeCall ${a.value_index}"
    return type(a).__name__


def ops_report(fixtures: List[Fixture]) -> str:
    lines = [
        "# Fixture operator report",
        "",
        "Generated by `tools/export/export_fixtures.py` from the serialized `.pte` files",
        "(flatbuffer parsed without restoring segments). ExecuTorch 1.5.1, default",
        "`to_edge(...).to_executorch()`, no delegation.",
        "",
        "Value notation in the instruction dump: `Tensor(dtype[sizes] dynamism where)`,",
        "where `const` = data_buffer_idx>0 (constant), `planned` = allocation_info set",
        "(memory-planned), `unplanned` = neither, `external` = data in the .ptd by fqn.",
        "`IntList[...]` is shown resolved: in the program an IntList holds value ids of Int values.",
        "",
        "General conventions observed in these programs:",
        "",
        "- Every KernelCall uses the `.out` (or other out-variant) overload; the args are the",
        "  schema args in order, then the out tensor(s), then the return value. For single-output",
        "  ops the out tensor id appears twice (out=, then return). Multi-output ops",
        "  (native_layer_norm, batch_norm, max_pool2d_with_indices, topk.values) list each out",
        "  tensor and then a TensorList of those same ids as the return value.",
        "- Static view ops are elided (remove_view_copy=True): the view is a separate Tensor value",
        "  with its own sizes but the SAME allocation_info (mem_id/offset) as its source, and no",
        "  instruction produces it. Only some reshapes remain as `aten::view_copy.out`.",
        "- non_const_buffer_sizes[0] is always 0 (reserved); planned tensors use mem_id 1.",
        "- constant_segment.offsets[0] is the empty placeholder for data_buffer_idx 0; identical",
        "  constants are deduplicated (several tensor values may share one data_buffer_idx).",
        "- Scalars that multiply tensors can appear as 0-d LONG constants converted by",
        "  `dim_order_ops::_to_dim_order_copy.out` (two_methods, scalar_io).",
        "",
    ]
    HEADER_LINES = len(lines)
    all_ops = set()
    op_fixtures: Dict[str, List[str]] = {}
    for fx in fixtures:
        prog, eh, total = load_raw_program(os.path.join(fx.dir, "model.pte"))
        lines.append(f"## {fx.name}")
        lines.append("")
        with open(os.path.join(fx.dir, "model.pte"), "rb") as f:
            ident = f.read(8)[4:8].decode("ascii", "replace")
        lines.append(f"- file size: {total} bytes; file identifier {ident!r}; program version {prog.version}")
        for note in FIXTURE_NOTES.get(fx.name, []):
            lines.append(f"- NOTE: {note}")
        if eh is not None and eh.is_valid():
            lines.append(
                f"- extended header: program_size={eh.program_size}, "
                f"segment_base_offset={eh.segment_base_offset}"
                + (f", segment_data_size={eh.segment_data_size}" if getattr(eh, "segment_data_size", None) is not None else "")
            )
        else:
            lines.append("- extended header: none")
        lines.append(f"- segments: {[(s.offset, s.size) for s in prog.segments]}")
        cs = prog.constant_segment
        lines.append(
            f"- constant_segment: segment_index={cs.segment_index}, "
            f"offsets={list(cs.offsets)} ({'used' if len(cs.offsets) > 0 else 'unused'})"
        )
        lines.append(f"- constant_buffer entries (inline): {len(prog.constant_buffer)}")
        mds = prog.mutable_data_segments
        lines.append(
            f"- mutable_data_segments: "
            + (str([(m.segment_index, list(m.offsets)) for m in mds]) if mds else "none")
        )
        nd = prog.named_data
        lines.append(
            "- named_data: " + (str([(n.key, n.segment_index) for n in nd]) if nd else "none")
        )
        lines.append(f"- backend_delegate_data: {len(prog.backend_delegate_data)}")
        if fx.ptd:
            lines.append(f"- external data file: {fx.ptd} ({os.path.getsize(os.path.join(FIXTURES, fx.ptd))} bytes)")
        for plan in prog.execution_plan:
            ops = [f"{o.name}.{o.overload}" if o.overload else f"{o.name} (overload \"\")" for o in plan.operators]
            for o in ops:
                all_ops.add(o)
                op_fixtures.setdefault(o, [])
                if fx.name not in op_fixtures[o]:
                    op_fixtures[o].append(fx.name)
            tags = sorted({type(v.val).__name__ for v in plan.values})
            dtypes = sorted(
                {short_dtype(v.val.scalar_type) for v in plan.values if isinstance(v.val, schema.Tensor)}
            )
            lines.append("")
            lines.append(f"### method `{plan.name}`")
            lines.append("")
            lines.append(f"- operators ({len(ops)}): " + ", ".join(f"`{o}`" for o in ops))
            lines.append(
                f"- delegates: "
                + (", ".join(d.id for d in plan.delegates) if plan.delegates else "none")
            )
            lines.append(f"- value tags: {', '.join(tags)}")
            lines.append(f"- tensor dtypes: {', '.join(dtypes)}")
            lines.append(f"- non_const_buffer_sizes: {list(plan.non_const_buffer_sizes)}")
            lines.append(
                f"- values: {len(plan.values)}; chains: {len(plan.chains)}; "
                f"instructions: {sum(len(c.instructions) for c in plan.chains)}"
            )
            kinds = sorted({type(i.instr_args).__name__ for c in plan.chains for i in c.instructions})
            lines.append(f"- instruction kinds: {', '.join(kinds)}")
            lines.append(
                "- inputs: "
                + "; ".join(f"${i} {describe_value(plan.values[i])}" for i in plan.inputs)
            )
            lines.append(
                "- outputs: "
                + "; ".join(f"${i} {describe_value(plan.values[i])}" for i in plan.outputs)
            )
            if plan.container_meta_type:
                lines.append(
                    f"- container_meta_type: in=`{plan.container_meta_type.encoded_inp_str}` "
                    f"out=`{plan.container_meta_type.encoded_out_str}`"
                )
            lines.append("- instructions:")
            lines.append("")
            lines.append("```")
            for c in plan.chains:
                for n, ins in enumerate(c.instructions):
                    lines.append(f"{n:3d}: {instr_text(plan, ins)}")
            lines.append("```")
        lines.append("")
    summary = ["## Union of operators over all fixtures", ""]
    for o in sorted(all_ops):
        summary.append(f"- `{o}` — {', '.join(op_fixtures[o])}")
    summary.append("")
    return "\n".join(lines[:HEADER_LINES] + summary + lines[HEADER_LINES:]) + "\n"


def dump_instructions(fx: Fixture, out_path: str) -> None:
    prog, _, _ = load_raw_program(os.path.join(fx.dir, "model.pte"))
    out = []
    for plan in prog.execution_plan:
        out.append(f"method {plan.name}")
        out.append(f"operators:")
        for k, o in enumerate(plan.operators):
            out.append(f"  [{k}] {o.name}.{o.overload}")
        out.append(f"inputs: {list(plan.inputs)}  outputs: {list(plan.outputs)}")
        out.append(f"non_const_buffer_sizes: {list(plan.non_const_buffer_sizes)}")
        out.append("values:")
        for k, v in enumerate(plan.values):
            extra = ""
            if isinstance(v.val, schema.Tensor) and v.val.allocation_info is not None:
                ai = v.val.allocation_info
                extra = f" alloc(mem_id={ai.memory_id}, off_lo={ai.memory_offset_low}, off_hi={ai.memory_offset_high})"
            if isinstance(v.val, schema.Tensor):
                extra += f" dim_order={list(v.val.dim_order)} data_buffer_idx={v.val.data_buffer_idx}"
            out.append(f"  ${k}: {describe_value(v)}{extra}")
        for ci, c in enumerate(plan.chains):
            out.append(f"chain {ci}: inputs={list(c.inputs)} outputs={list(c.outputs)}")
            for n, ins in enumerate(c.instructions):
                out.append(f"  {n:3d}: {instr_text(plan, ins)}")
        out.append("")
    with open(out_path, "w") as f:
        f.write("\n".join(out))


# ----------------------------------------------------------------------------


def export_misc() -> None:
    """Programs used by error-path tests (not in the manifest): a delegate whose backend
    etch does not register (XNNPACK)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    d = os.path.join(FIXTURES, "misc")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(8, 4)).eval()
    ep = torch.export.export(model, (torch.randn(2, 8),))
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    with open(os.path.join(d, "xnnpack_linear.pte"), "wb") as f:
        f.write(prog.buffer)


class ThreadsNet(nn.Module):
    """Operators on tensors large enough that etch splits them over threads (convolutions,
    depthwise convolution, pooling, norms, matrix products, softmax, elementwise ops)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.dw = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32)
        self.pw = nn.Conv2d(32, 64, 1)
        self.ln = nn.LayerNorm(64)
        self.qkv = nn.Linear(64, 192)
        self.proj = nn.Linear(64, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.bn(self.conv(x)))
        x = self.pw(self.dw(x))
        x = x * torch.sigmoid(x.mean(dim=(2, 3), keepdim=True))
        x = torch.nn.functional.max_pool2d(x, 2)
        t = x.flatten(2).transpose(1, 2)  # [1, 576, 64]
        q, k, v = self.qkv(self.ln(t)).reshape(1, 576, 3, 4, 16).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
        t = t + torch.nn.functional.gelu(self.proj(a.transpose(1, 2).reshape(1, 576, 64)))
        return self.head(t.mean(dim=1))


def export_threads_fixture() -> None:
    """misc/threads.pte: a small program whose activations are large enough to run on
    several threads (tests/threads.rs and tests/no_alloc.rs feed it their own inputs)."""
    torch.manual_seed(11)
    model = ThreadsNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    ep = torch.export.export(model, (torch.randn(1, 8, 96, 96),))
    d = os.path.join(FIXTURES, "misc")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "threads.pte"), "wb") as f:
        f.write(to_edge(ep).to_executorch().buffer)


def export_only(names: List[str]) -> int:
    """Re-exports the named fixtures only, replacing their manifest entries."""
    builders = {
        "kv_cache": build_kv_cache,
        "kv_decoder": build_kv_decoder,
        "convnet": build_convnet,
        "fusenet": build_fusenet,
    }
    path = os.path.join(FIXTURES, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    for name in names:
        if os.path.isdir(os.path.join(FIXTURES, name)):
            shutil.rmtree(os.path.join(FIXTURES, name))
        entry = builders[name]().manifest_entry()
        manifest = [e for e in manifest if e["name"] != name] + [entry]
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return 0


def main() -> int:
    torch.set_num_threads(1)
    if len(sys.argv) > 2 and sys.argv[1] == "--only":
        return export_only(sys.argv[2].split(","))
    if os.path.isdir(FIXTURES):
        for entry in os.listdir(FIXTURES):
            p = os.path.join(FIXTURES, entry)
            # device/ is owned by export_device_fixtures.py
            if os.path.isdir(p) and entry != "device":
                shutil.rmtree(p)
    os.makedirs(FIXTURES, exist_ok=True)
    os.makedirs(EXAMPLES, exist_ok=True)

    fixtures: List[Fixture] = []
    fixtures += build_mlp_family()
    fixtures.append(build_cnn())
    fixtures.append(build_convnet())
    fixtures.append(build_fusenet())
    fixtures.append(build_transformer())
    fixtures.append(build_token_model())
    fixtures.append(build_stateful())
    fixtures.append(build_dynamic_batch())
    fixtures.append(build_two_methods())
    fixtures.append(build_scalar_io())
    fixtures.append(build_cond())
    fixtures.append(build_kv_cache())
    fixtures.append(build_kv_decoder())

    with open(os.path.join(FIXTURES, "manifest.json"), "w") as f:
        json.dump([fx.manifest_entry() for fx in fixtures], f, indent=2)
        f.write("\n")

    with open(os.path.join(FIXTURES, "OPS.md"), "w") as f:
        f.write(ops_report(fixtures))
    dump_instructions(
        next(fx for fx in fixtures if fx.name == "transformer"),
        os.path.join(FIXTURES, "transformer_instructions.txt"),
    )

    export_misc()
    export_threads_fixture()

    # Bundled example model + input.
    shutil.copyfile(os.path.join(FIXTURES, "mlp", "model.pte"), os.path.join(EXAMPLES, "mlp.pte"))
    shutil.copyfile(os.path.join(FIXTURES, "mlp", "forward_0_in0.npy"), os.path.join(EXAMPLES, "mlp_input.npy"))

    for fx in fixtures:
        size = os.path.getsize(os.path.join(fx.dir, "model.pte"))
        assert size < 1_000_000, f"{fx.name}: .pte too large ({size} bytes)"
        print(f"{fx.name:14s} model.pte {size:7d} bytes, {len(fx.cases)} case(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
