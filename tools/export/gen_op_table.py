"""Generates the per-operator test table replayed by crates/etch-kernels/tests/op_table.rs:
for each kernel, cases with random shapes (broadcasting, size-0 and size-1 dims, negative
dims, channels-last inputs where ExecuTorch allows them) in the dtypes ExecuTorch's portable
library supports, with PyTorch's outputs (or the fact that PyTorch raises).

    venv/bin/python tools/export/gen_op_table.py   # writes crates/etch-kernels/tests/op_table.json

Arguments follow the `.out` schema order, as ExecuTorch serializes them; the replay adds
the return values after the arguments.
"""

import json
import math
import os
import random

import numpy as np
import torch
import executorch.exir.passes.dim_order_ops_registry  # noqa: F401  registers dim_order_ops::*

import op_table_etch  # the etch:: ops (registers torch.ops.etch.*)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "crates", "etch-kernels", "tests", "op_table.json")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
    torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
TOL = {
    torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10),
    torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2),
}

rng = random.Random(1234)
torch.manual_seed(1234)


def rand(shape, dtype):
    if dtype == torch.float64:
        # Few decimals: exactly the double the short JSON number parses to (smaller table).
        return torch.round(torch.randn(shape).double() * 2, decimals=3)
    if dtype in FLOATS:
        return (torch.randn(shape) * 2).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    lo, hi = (0, 10) if dtype == torch.uint8 else (-8, 9)
    return torch.randint(lo, hi, shape).to(dtype)


CODES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
         torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15}


def enc(v):
    """A JSON number: NaN is null, the infinities are "inf"/"-inf"."""
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


def short_half(v, dtype):
    """The shortest decimal within a quarter ulp of `v`, a float16 or bfloat16 value: it
    rounds back to `v` whatever the conversion path (direct or through float32)."""
    if v != v or v in (float("inf"), float("-inf")) or v == 0.0:
        return v
    _, ex = math.frexp(v)
    ulp = 2.0 ** max(ex - 11, -24) if dtype == torch.float16 else 2.0 ** (ex - 8)
    for p in range(1, 10):
        d = float(f"{v:.{p}g}")
        if abs(d - v) <= ulp / 4:
            return d
    return v


def tensor_json(t, channels_last=None, expected=False):
    t = t.detach()
    if channels_last is None:
        channels_last = t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
    if channels_last and t.dim() == 4:
        mem = t.permute(0, 2, 3, 1).contiguous()
        order = [0, 2, 3, 1]
    else:
        mem = t.contiguous()
        order = list(range(t.dim()))
    if t.dtype == torch.float32:
        # The shortest decimal that round-trips through float32 keeps the table small.
        data = [float(str(v)) for v in mem.flatten().numpy()]
    elif t.dtype in (torch.float16, torch.bfloat16):
        data = [short_half(float(v), t.dtype) for v in mem.to(torch.float32).flatten().numpy()]
    elif t.dtype == torch.float64 and expected:
        # 13 significant digits are well inside the float64 tolerance (1e-10).
        data = [float(f"{v:.13g}") for v in mem.flatten().tolist()]
    elif t.dtype == torch.float64:
        data = mem.flatten().tolist()
    else:
        data = mem.to(torch.int64).flatten().tolist()
    j = {"dtype": NAMES[t.dtype], "sizes": list(t.shape), "data": [enc(v) for v in data]}
    if order != list(range(t.dim())):  # the default (contiguous) dim order is left out
        j["dim_order"] = order
    return {"tensor": j}


def out_json(dtype, sizes, capacity=None):
    o = {"dtype": NAMES[dtype], "sizes": list(sizes)}
    if capacity:
        o["capacity"] = capacity
    return {"out": o}


cases = []


def case(op, args, outs, fn, tol_dtype=None):
    """args: list of JSON args (with out placeholders); fn: computes PyTorch's result tuple."""
    try:
        res = fn()
    except Exception:  # noqa: BLE001  PyTorch rejects it: etch must return an error too.
        cases.append({"op": op, "args": args, "error": True})
        return
    if not isinstance(res, tuple):
        res = (res,)
    rtol, atol = TOL.get(tol_dtype or res[0].dtype, (0.0, 0.0))
    cases.append({
        "op": op, "args": args, "expected": [tensor_json(r, False, True)["tensor"] for r in res],
        "rtol": rtol, "atol": atol,
    })


def arg_json(a, v):
    ty = str(a.type)
    if v is None:
        return {"none": True}
    if isinstance(v, torch.dtype):
        return {"int": CODES[v]}
    if isinstance(v, torch.Tensor):
        return tensor_json(v)
    if ty.startswith("List[Optional[Tensor]]"):
        return {"opt_tensor_list": [{"none": True} if t is None else tensor_json(t) for t in v]}
    if ty.startswith("List[Tensor]"):
        return {"tensor_list": [tensor_json(t) for t in v]}
    if "List[float]" in ty:
        return {"double_list": [enc(float(x)) for x in v]}
    if "List[bool]" in ty:
        return {"bool_list": list(v)}
    if "List[int]" in ty:
        return {"int_list": [v] if isinstance(v, int) else list(v)}
    if ty.startswith("Scalar") or ty.startswith("number") or "Scalar" in ty or "number" in ty:
        return {"scalar": enc(v)}
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, float):
        return {"double": enc(v)}
    if isinstance(v, str):
        return {"string": v}
    raise TypeError(f"{a.name}: {ty} {v!r}")


def op(name, *args, out=None, tol=None, ref_contig=False, out_cl=False, **kw):
    """One case of `name` (an `.out` overload): PyTorch's own out variant computes it.
    `out`: the out dtype(s) (default: the first tensor argument's dtype)."""
    ns, rest = name.split("::")
    base, _, ov = rest.partition(".")
    fn = getattr(getattr(getattr(torch.ops, ns), base), ov or "default")
    schema = fn._schema
    ins = [a for a in schema.arguments if not a.is_out]
    outs = [a for a in schema.arguments if a.is_out]
    vals = {}
    for a, v in zip(ins, args):
        vals[a.name] = v
    vals.update(kw)
    for a in ins:
        if a.name not in vals:
            vals[a.name] = a.default_value if a.has_default_value() else None
    first = next((v for v in vals.values() if isinstance(v, torch.Tensor)), None)
    if first is None:
        first = next((v[0] for v in vals.values() if isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor)), None)
    if out is None:
        out = first.dtype if first is not None else torch.float32
    out_dt = list(out) if isinstance(out, (list, tuple)) else [out] * len(outs)
    args_json = [arg_json(a, vals[a.name]) for a in ins]
    # ref_contig: PyTorch's out variant mishandles a channels-last input (seen for
    # _native_batch_norm_legit.no_stats_out); compute the reference from a contiguous copy.
    ref = {k: (v.contiguous() if ref_contig and isinstance(v, torch.Tensor) else v) for k, v in vals.items()}
    pos = [ref[a.name] for a in ins if not a.kwarg_only]
    kwo = {a.name: ref[a.name] for a in ins if a.kwarg_only}
    list_out = outs and str(outs[0].type).startswith("List")
    try:
        if list_out:
            n = kw.pop("_n", None) or out_count(name, vals)
            ot = [torch.empty(0, dtype=out_dt[0]) for _ in range(n)]
            fn(*pos, **kwo, **{outs[0].name: ot})
            res = tuple(ot)
        else:
            ot = {a.name: torch.empty(0, dtype=d) for a, d in zip(outs, out_dt)}
            fn(*pos, **kwo, **ot)
            res = tuple(ot[a.name] for a in outs)
    except Exception:  # noqa: BLE001  PyTorch rejects it: etch must return an error too.
        shape = list(first.shape) if first is not None else [1]
        if list_out:
            args_json.append({"out_list": [out_json(out_dt[0], shape, 4096)]})
        else:
            args_json += [out_json(d, shape, 4096) for d in out_dt]
        cases.append({"op": name, "args": args_json, "error": True})
        return
    if list_out:
        args_json.append({"out_list": [{"out": {"dtype": NAMES[r.dtype], "sizes": list(r.shape)}} for r in res]})
    else:
        args_json += [out_json(r.dtype, r.shape) for r in res]
        if out_cl:  # a channels-last out: the expected data is in its memory order
            for a in args_json[-len(res):]:
                a["out"]["dim_order"] = [0, 2, 3, 1]
    fl = [r.dtype for r in res if r.dtype.is_floating_point]
    rtol, atol = TOL.get(tol or (fl[0] if fl else None), (0.0, 0.0))
    cases.append({"op": name, "args": args_json, "expected": [tensor_json(r, out_cl, True)["tensor"] for r in res],
                  "rtol": rtol, "atol": atol})


def out_count(name, vals):
    t = vals["self"]
    d = vals.get("dim", 0)
    if "unbind" in name:
        return t.shape[d]
    if "split_with_sizes" in name:
        return len(vals["split_sizes"])
    n = t.shape[d]
    s = vals["split_size"]
    return max(1, -(-n // s)) if s > 0 else 1


def scalar_case(name, args, rets, fn):
    """A prim op on scalars (or a tensor): `rets` JSON return slots, `fn` PyTorch/Python's result."""
    try:
        r = fn()
    except Exception:  # noqa: BLE001
        cases.append({"op": name, "args": args + [{"ret": True}], "error": True})
        return
    key = "bool" if isinstance(r, bool) else "int" if isinstance(r, int) else "double"
    cases.append({"op": name, "args": args + [{"ret": True}], "expected_scalars": [{key: enc(r)}]})


def shape(lo=0, hi=4, nd=None):
    nd = rng.randint(0, 4) if nd is None else nd
    return [rng.randint(lo, hi) for _ in range(nd)]


def shapes_bcast():
    base = [rng.randint(1, 4) for _ in range(rng.randint(0, 4))]
    other = list(base)
    for i in range(len(other)):
        if rng.random() < 0.3:
            other[i] = 1
    if other and rng.random() < 0.3:
        other = other[rng.randint(0, len(other) - 1):]
    if rng.random() < 0.5:
        base, other = other, base
    return base, other


def cl(shape4, dtype):
    return rand(shape4, dtype).contiguous(memory_format=torch.channels_last)


def nonzero(t):
    return torch.where(t == 0, torch.ones_like(t), t)


ALL = FLOATS + INTS + [torch.bool]
REAL = FLOATS + INTS


def binary_ops():
    for name in ["add.out", "sub.out", "mul.out", "div.out", "maximum.out", "minimum.out", "floor_divide.out",
                 "remainder.Tensor_out", "fmod.Tensor_out", "pow.Tensor_Tensor_out", "atan2.out"]:
        dts = REAL + ([torch.bool] if name in ("add.out", "mul.out", "maximum.out", "minimum.out") else [])
        for dtype in dts:
            sa, sb = shapes_bcast()
            a, b = rand(sa, dtype), rand(sb, dtype)
            if name in ("floor_divide.out", "remainder.Tensor_out", "fmod.Tensor_out") and dtype in INTS:
                b = nonzero(b)
            if name == "pow.Tensor_Tensor_out" and dtype in INTS:
                b = b.abs() % 4
            out = dtype
            if name in ("div.out", "atan2.out") and dtype not in FLOATS:
                out = torch.float32
            kw = {"alpha": 2} if name in ("add.out", "sub.out") and dtype in INTS else {}
            op("aten::" + name, a, b, out=out, **kw)
        # channels-last, size-0 and float alpha
        op("aten::" + name, cl([2, 3, 2, 2], torch.float32), cl([2, 3, 2, 2], torch.float32))
        op("aten::" + name, rand([0, 3], torch.float32), rand([1, 3], torch.float32))
    # Mixed dtypes promote; a result that cannot be cast to out is an error.
    op("aten::mul.out", rand([2, 3], torch.int64), rand([3], torch.float32), out=torch.float32)
    op("aten::add.out", rand([2, 3], torch.int32), rand([3], torch.int8), out=torch.int32)
    op("aten::add.out", rand([2, 3], torch.float32), rand([3], torch.float64), out=torch.float64)
    op("aten::add.out", rand([2, 3], torch.int64), rand([3], torch.float32), out=torch.int64)  # error
    op("aten::add.out", rand([2, 3], torch.float32), rand([4], torch.float32))  # bad broadcast
    op("aten::sub.out", rand([3], torch.bool), rand([3], torch.bool))  # error: bool sub
    op("aten::add.out", rand([2, 3], torch.float32), rand([3], torch.float32), alpha=1.5)
    # Division: rounding modes, negatives, integer division by zero (error), float by zero.
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int32, torch.int8]:
        for mode in [None, "trunc", "floor"]:
            a, b = rand([6], dtype), nonzero(rand([6], dtype))
            op("aten::div.out_mode", a, b, rounding_mode=mode, out=torch.float32 if mode is None and dtype in INTS else dtype)
            op("aten::div.Scalar_mode_out", a, -3, rounding_mode=mode, out=torch.float32 if mode is None and dtype in INTS else dtype)
    op("aten::div.out_mode", torch.tensor([5, -5]), torch.tensor([0, 2]), rounding_mode="floor")  # error
    op("aten::floor_divide.out", torch.tensor([5, -7, 7]), torch.tensor([2, 2, -2]))
    op("aten::floor_divide.out", torch.tensor([5, 1]), torch.tensor([0, 2]))  # error
    op("aten::remainder.Tensor_out", torch.tensor([5, -7, 7, -7]), torch.tensor([3, 3, -3, -3]))
    op("aten::fmod.Tensor_out", torch.tensor([5, -7, 7, -7]), torch.tensor([3, 3, -3, -3]))
    op("aten::remainder.Tensor_out", torch.tensor([5.5, -7.5, 0.0, -0.0]), torch.tensor([3.0, 3.0, -3.0, 2.0]))
    op("aten::div.out", torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.0, 0.0, 0.0]))
    op("aten::maximum.out", torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([float("nan"), 1.0, 3.0]))
    op("aten::minimum.out", torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([float("nan"), 1.0, 3.0]))
    op("aten::atan2.out", torch.tensor([0.0, -0.0, 1.0, -1.0]), torch.tensor([-1.0, -1.0, 0.0, 0.0]))
    for name in ["add.Scalar_out", "sub.Scalar_out", "rsub.Scalar_out", "mul.Scalar_out", "div.Scalar_out",
                 "remainder.Scalar_out", "fmod.Scalar_out", "pow.Tensor_Scalar_out"]:
        # int16/int8 share the int64 compute path with int32: left out to keep the table small.
        for dtype in FLOATS + [torch.int64, torch.int32, torch.uint8]:
            x = rand(shape(), dtype)
            for s in [3, -2.5]:
                out = dtype if (dtype in FLOATS or isinstance(s, int)) and not (name == "div.Scalar_out" and dtype in INTS) else torch.float32
                if name == "pow.Tensor_Scalar_out" and dtype in INTS and s == 3:
                    s = 2
                op("aten::" + name, x, s, out=out)
        op("aten::" + name, cl([1, 2, 2, 3], torch.float32), 2)
    op("aten::fmod.Scalar_out", torch.tensor([3, 4]), 0)  # error: integer modulo by zero
    op("aten::remainder.Scalar_out", torch.tensor([3, -4]), 0)  # error
    op("aten::pow.Tensor_Scalar_out", rand([3], torch.float32), 2.0)
    op("aten::mul.Scalar_out", rand([3], torch.int64), 2.5, out=torch.int64)  # error: float result into int
    # Comparisons and logical ops write bool (any input dtype).
    for name in ["eq", "ne", "lt", "le", "gt", "ge"]:
        for dtype in ALL:
            sa, sb = shapes_bcast()
            op(f"aten::{name}.Tensor_out", rand(sa, dtype), rand(sb, dtype), out=torch.bool)
            op(f"aten::{name}.Scalar_out", rand(sa, dtype), 1, out=torch.bool)
        op(f"aten::{name}.Tensor_out", torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([1.0, float("nan"), 3.0]), out=torch.bool)
        op(f"aten::{name}.Scalar_out", torch.tensor([1.0, float("nan"), 2.0]), 1.5, out=torch.bool)
        op(f"aten::{name}.Tensor_out", cl([2, 2, 1, 3], torch.float32), rand([3], torch.float32), out=torch.bool)
    for name in ["logical_and", "logical_or", "logical_xor"]:
        for dtype in [torch.bool, torch.float32, torch.int64, torch.int8]:
            sa, sb = shapes_bcast()
            op(f"aten::{name}.out", rand(sa, dtype), rand(sb, dtype), out=torch.bool)
        op(f"aten::{name}.out", torch.tensor([0.0, float("nan"), 2.0]), torch.tensor([1.0, 0.0, 0.0]), out=torch.bool)
    for name in ["bitwise_and.Tensor_out", "bitwise_or.Tensor_out", "bitwise_xor.Tensor_out"]:
        for dtype in INTS + [torch.bool]:
            sa, sb = shapes_bcast()
            op("aten::" + name, rand(sa, dtype), rand(sb, dtype))
        op("aten::" + name, rand([3], torch.float32), rand([3], torch.float32))  # error: floats
    for dtype in INTS + [torch.bool]:
        op("aten::bitwise_and.Scalar_out", rand([2, 3], dtype), 6 if dtype != torch.bool else True)
    # where / masked_fill
    for dtype in ALL:
        sc, sa, sb = shape(1, 3, 2), shape(1, 3, 2), shape(1, 3, 1)
        op("aten::where.self_out", torch.rand(sc) > 0.5, rand(sa, dtype), rand(sb, dtype))
        op("aten::masked_fill.Scalar_out", rand([2, 3], dtype), torch.rand(3) > 0.5, 1 if dtype != torch.bool else True)
    op("aten::where.self_out", torch.rand([2, 3, 2, 2]) > 0.5, cl([2, 3, 2, 2], torch.float32), cl([2, 3, 2, 2], torch.float32))
    op("aten::where.self_out", torch.rand([3]) > 0.5, rand([3], torch.int32), rand([3], torch.float32), out=torch.float32)
    op("aten::masked_fill.Scalar_out", torch.tensor([1.0, 2.0, 3.0]), torch.tensor([True, False, True]), float("nan"))


def unary_ops():
    floats = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
              "cosh", "asinh", "log2", "log10", "log1p", "expm1", "erf", "reciprocal", "silu"]
    for name in floats:
        for dtype in FLOATS + [torch.int32, torch.bool]:
            x = rand(shape(), dtype)
            if dtype in FLOATS and name in ("asin", "acos"):
                x = torch.tanh(x)
            out = dtype if dtype in FLOATS else torch.float32
            if name == "silu" and dtype not in FLOATS:
                continue  # silu is defined for floats only (PyTorch rejects integer inputs)
            op(f"aten::{name}.out", x, out=out)
        op(f"aten::{name}.out", torch.tensor([0.0, -1.0, float("inf"), float("-inf"), float("nan")]))
        op(f"aten::{name}.out", cl([1, 2, 2, 3], torch.float32))
    for name in ["abs", "neg", "relu", "floor", "ceil", "round", "trunc", "sign", "bitwise_not", "logical_not",
                 "isnan", "isinf"]:
        for dtype in ALL:
            x = rand(shape(), dtype)
            out = torch.bool if name in ("isnan", "isinf", "logical_not") else dtype
            if name == "relu" and dtype == torch.bool:
                continue  # relu of bool: ExecuTorch and PyTorch both reject; covered below
            op(f"aten::{name}.out", x, out=out)
        x = torch.tensor([-2.5, -0.5, 0.5, 1.5, 2.5, -0.0, float("nan"), float("inf"), float("-inf")])
        op(f"aten::{name}.out", x, out=torch.bool if name in ("isnan", "isinf", "logical_not") else torch.float32)
        op(f"aten::{name}.out", cl([1, 2, 2, 3], torch.float32), out=torch.bool if name in ("isnan", "isinf", "logical_not") else torch.float32)
    for dtype in FLOATS:
        x = rand([2, 5], dtype)
        for approx in ["none", "tanh"]:
            op("aten::gelu.out", x, approximate=approx)
        op("aten::leaky_relu.out", x, 0.2)
        op("aten::elu.out", x, 1.5, 1.0, 1.0)
        op("aten::hardtanh.out", x, -1.0, 0.5)
        op("aten::clamp.out", x, -0.5, 0.7)
    for dtype in INTS:
        # Bounds outside uint8's range wrap in PyTorch but are rejected by ExecuTorch: keep them in range.
        lo = 0 if dtype == torch.uint8 else -2
        op("aten::clamp.out", rand([2, 5], dtype), lo, 4)
        op("aten::hardtanh.out", rand([2, 5], dtype), lo, 4)
    op("aten::gelu.out", rand([3], torch.float32), approximate="bad")  # error
    op("aten::clamp.out", torch.tensor([1.0, float("nan"), -3.0, 5.0]), -1.0, 2.0)
    op("aten::clamp.out", torch.tensor([1.0, float("nan"), -3.0, 5.0]), None, 2.0)
    op("aten::clamp.out", torch.tensor([1.0, 4.0, -3.0]), 3.0, 1.0)  # min > max: max wins
    op("aten::clamp.out", rand([3], torch.int64), 0.5, None, out=torch.float32)
    op("aten::elu.out", torch.tensor([-1.0, float("nan"), 2.0]), 1.0, 2.0, 0.5)
    op("aten::relu.out", torch.tensor([1.0, float("nan"), -2.0, 0.5]))
    op("aten::neg.out", rand([3], torch.bool))  # error
    op("aten::bitwise_not.out", rand([3], torch.float32))  # error


def reduce_ops():
    for dtype in REAL + [torch.bool]:
        x = rand([3, 4, 2], dtype)
        for dim, keep in [([-1], False), ([0, 2], True), (None, False), ([], True)]:
            if dtype in INTS + [torch.bool]:
                op("aten::sum.IntList_out", x, dim, keep, out=torch.int64)
                op("aten::mean.out", x, dim, keep, dtype=torch.float32, out=torch.float32)
            else:
                op("aten::sum.IntList_out", x, dim, keep)
                op("aten::mean.out", x, dim, keep)
                op("aten::var.correction_out", x, dim, correction=[1, 0, 2][len(cases) % 3], keepdim=keep)
                op("aten::std.correction_out", x, dim, correction=None, keepdim=keep)
            if dim:
                op("aten::amax.out", x, dim, keep)
                op("aten::amin.out", x, dim, keep)
                op("aten::any.dims_out", x, dim, keep, out=torch.bool)
        for d in [0, -1]:
            op("aten::argmax.out", x, d, d == 0)
            op("aten::argmin.out", x, d, False)
            op("aten::max.dim_max", x, d, d == 0, out=[dtype, torch.int64])
            op("aten::min.dim_min", x, d, False, out=[dtype, torch.int64])
            op("aten::any.out", x, d, True, out=torch.bool)
            op("aten::all.out", x, d, False, out=torch.bool)
            op("aten::cumsum.out", x, d, out=dtype if dtype in FLOATS else torch.int64)
            op("aten::prod.int_out", x, d, d == 0, out=dtype if dtype in FLOATS else torch.int64)
        op("aten::argmax.out", x, None, False, out=torch.int64)
        op("aten::any.all_out", x, out=torch.bool)
        op("aten::all.all_out", x, out=torch.bool)
        op("aten::prod.out", x, out=dtype if dtype in FLOATS else torch.int64)
    op("aten::argmax.out", rand([2, 3], torch.float32), None, True, out=torch.int64)
    op("aten::cumsum.out", rand([2, 3], torch.int32), 1, dtype=torch.float32, out=torch.float32)
    op("aten::sum.IntList_out", rand([2, 3], torch.int32), [1], dtype=torch.float64, out=torch.float64)
    op("aten::sum.IntList_out", rand([2, 0], torch.float32), [1])
    op("aten::mean.out", rand([2, 3], torch.int64), [1], out=torch.int64)  # error: integer mean
    op("aten::amax.out", rand([2, 0], torch.float32), [1])  # error: empty reduction
    op("aten::argmax.out", rand([0, 3], torch.float32), 0, out=torch.int64)  # error
    op("aten::max.dim_max", rand([0, 3], torch.float32), 0, out=[torch.float32, torch.int64])  # error
    op("aten::sum.IntList_out", rand([2, 3], torch.float32), [2])  # error: dim out of range
    op("aten::sum.IntList_out", cl([2, 3, 2, 2], torch.float32), [1], True)
    # NaN handling: NaN wins max/min/argmax (first NaN's index).
    nanx = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 2.0, -1.0, 5.0], [float("-inf"), 0.0, float("inf"), 0.0]])
    for d in [0, 1]:
        op("aten::amax.out", nanx, [d])
        op("aten::amin.out", nanx, [d])
        op("aten::argmax.out", nanx, d, out=torch.int64)
        op("aten::argmin.out", nanx, d, out=torch.int64)
        op("aten::max.dim_max", nanx, d, out=[torch.float32, torch.int64])
        op("aten::min.dim_min", nanx, d, out=[torch.float32, torch.int64])
        op("aten::sort.values", nanx, d, False, out=[torch.float32, torch.int64])
        op("aten::sort.values", nanx, d, True, out=[torch.float32, torch.int64])
    op("aten::var.correction_out", torch.tensor([[1.0], [2.0]]), [1])  # N - correction = 0: NaN
    op("aten::var.correction_out", rand([3], torch.int64), [0], out=torch.int64)  # error: integer var
    # Softmax.
    for dtype in FLOATS:
        x = rand([2, 3, 4], dtype)
        for dim in [0, -1, 1]:
            op("aten::_softmax.out", x, dim, False)
            op("aten::_log_softmax.out", x, dim, False)
    op("aten::_softmax.out", torch.tensor([[0.0, float("-inf"), 1.0]]), -1, False)
    # topk (distinct values, so ties do not decide indices) and sort (stable).
    for dtype in FLOATS + [torch.int64, torch.int32, torch.int8]:
        x = torch.randperm(24).reshape(2, 3, 4).to(dtype) - 10
        for k, dim, largest in [(2, -1, True), (3, 1, False), (0, 0, True), (1, 0, False)]:
            op("aten::topk.values", x, k, dim, largest, True, out=[dtype, torch.int64])
        for dim, desc in [(-1, False), (0, True), (1, False)]:
            op("aten::sort.values", x, dim, desc, out=[dtype, torch.int64])
        y = rand([3, 6], dtype)  # with ties: the stable sort keeps their order
        op("aten::sort.values_stable", y, stable=True, dim=-1, descending=True, out=[dtype, torch.int64])
        op("aten::sort.values_stable", y, stable=True, dim=0, descending=False, out=[dtype, torch.int64])
    op("aten::sort.values", rand([4], torch.bool), 0, False, out=[torch.bool, torch.int64])
    op("aten::topk.values", rand([3, 4], torch.float32), 5, -1, out=[torch.float32, torch.int64])  # error: k > n
    # NaN is the largest; rows without ties (PyTorch leaves the order of ties unspecified).
    nant = torch.tensor([[1.0, float("nan"), 3.0, -2.0], [float("-inf"), 0.5, float("inf"), 0.0]])
    op("aten::topk.values", nant, 2, 1, True, True, out=[torch.float32, torch.int64])
    op("aten::topk.values", nant, 3, 1, False, True, out=[torch.float32, torch.int64])


def shape_ops():
    # int16 and int8 copy through the same byte paths as int32/uint8: left out to keep the table small.
    for dtype in FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool]:
        x = rand([2, 3, 4], dtype)
        op("aten::permute_copy.out", x, [2, 0, -2])
        op("aten::transpose_copy.int_out", x, -1, 0)
        op("aten::view_copy.out", x, [6, -1])
        op("aten::t_copy.out", rand([2, 3], dtype))
        op("aten::cat.out", [x, rand([2, 5, 4], dtype), rand([2, 0, 4], dtype)], -2)
        op("aten::stack.out", [x, rand([2, 3, 4], dtype)], -1)
        op("aten::slice_copy.Tensor_out", x, 2, 1, 4, 2)
        op("aten::slice_copy.Tensor_out", x, -1, -3, None, 1)
        op("aten::slice_scatter.out", x, rand([2, 3, 2], dtype), 2, 0, 4, 2)
        op("aten::select_copy.int_out", x, -2, -1)
        op("aten::expand_copy.out", rand([3, 1], dtype), [2, 3, 4])
        op("aten::expand_copy.out", rand([3, 1], dtype), [-1, 5])
        op("aten::repeat.out", rand([2, 3], dtype), [2, 1, 2])
        op("aten::flip.out", x, [0, -1])
        op("aten::squeeze_copy.dim_out", rand([2, 1, 3], dtype), -2)
        op("aten::squeeze_copy.dims_out", rand([1, 2, 1, 3], dtype), [0, -2])
        op("aten::squeeze_copy.out", rand([1, 2, 1, 3], dtype))
        op("aten::unsqueeze_copy.out", x, -1)
        op("aten::unsqueeze_copy.out", x, 0)
        op("aten::split_copy.Tensor_out", x, 2, -1)
        op("aten::split_with_sizes_copy.out", x, [1, 0, 2], 1)
        op("aten::unbind_copy.int_out", x, 1)
        op("aten::clone.out", x)
        op("aten::alias_copy.out", x)
        op("aten::detach_copy.out", x)
        op("aten::constant_pad_nd.out", x, [1, 2, 0, 1], 1 if dtype != torch.bool else True)
        op("aten::as_strided_copy.out", x, [2, 2], [1, 3], 1)
        op("aten::copy.out", x, rand([3, 4], dtype))
        op("aten::full_like.out", x, 1 if dtype != torch.bool else True)
        op("aten::ones_like.out", x)
        op("aten::zeros_like.out", x)
        op("aten::fill.Scalar_out", x, 0 if dtype != torch.bool else True)
        op("aten::full.out", [2, 3], 2 if dtype != torch.bool else True, out=dtype)
        op("aten::scalar_tensor.out", 3 if dtype != torch.bool else True, out=dtype)
        for to in [torch.float32, torch.int64, torch.bool, torch.float16]:
            op("aten::_to_copy.out", x, out=to)
            op("dim_order_ops::_to_dim_order_copy.out", x, dim_order=None, out=to)
    for dtype in FLOATS + [torch.uint8, torch.int8]:
        c = cl([2, 3, 2, 2], dtype)
        op("aten::clone.out", c)
        op("aten::_to_copy.out", c, out=torch.float32)
        op("dim_order_ops::_clone_dim_order.out", c, dim_order=[0, 2, 3, 1], out_cl=True)
        op("dim_order_ops::_to_dim_order_copy.out", c, dim_order=[0, 1, 2, 3], out=torch.float32)
        op("aten::copy.out", c, rand([3, 1, 2], dtype))
        op("aten::permute_copy.out", c, [0, 3, 1, 2])
        op("aten::cat.out", [c, cl([2, 3, 2, 2], dtype)], 1)
        # ExecuTorch rejects a fill value that does not fit the dtype (PyTorch truncates it).
        op("aten::constant_pad_nd.out", c, [1, 1], -1.5 if dtype in FLOATS else -1)
    for dtype in FLOATS + INTS:
        op("aten::arange.out", 5, out=dtype)
        op("aten::arange.start_out", -2, 7, 3, out=dtype)
    op("aten::arange.start_out", 0.5, 2.0, 0.25, out=torch.float32)
    op("aten::arange.start_out", 5, 0, 1, out=torch.float32)  # error: wrong sign of step
    op("aten::arange.start_out", 0, 4, 0, out=torch.float32)  # error: zero step
    op("aten::select_copy.int_out", rand([2, 3], torch.float32), 1, 3)  # error
    op("aten::select_copy.int_out", rand([2, 3], torch.float32), 2, 0)  # error: bad dim
    op("aten::permute_copy.out", rand([2, 3], torch.float32), [0, 0])  # error
    op("aten::view_copy.out", rand([2, 3], torch.float32), [4, -1])  # error
    op("aten::cat.out", [rand([2, 3], torch.float32), rand([3, 3], torch.float32)], 1)  # error
    op("aten::cat.out", [rand([2, 3], torch.float32), rand([2, 3], torch.int32)], 0, out=torch.float32)
    op("aten::stack.out", [rand([2, 3], torch.float32), rand([3, 2], torch.float32)], 0)  # error
    op("aten::slice_copy.Tensor_out", rand([4], torch.float32), 0, 5, 10, 1)
    op("aten::slice_copy.Tensor_out", rand([4], torch.float32), 0, 0, 4, 0)  # error: step 0
    op("aten::expand_copy.out", rand([3, 2], torch.float32), [3, 4])  # error
    op("aten::squeeze_copy.dim_out", rand([2, 3], torch.float32), 1)
    op("aten::constant_pad_nd.out", rand([2, 3], torch.float32), [-1, 2])


def index_ops():
    for dtype in FLOATS + [torch.int64, torch.int32, torch.bool]:
        w = rand([10, 4], dtype)
        op("aten::embedding.out", w, torch.tensor([[0, 9, 3], [2, 2, 7]]))
        x = rand([3, 5], dtype)
        op("aten::gather.out", x, 1, torch.tensor([[0, 4], [1, 1], [3, 2]]))
        op("aten::gather.out", x, -2, torch.tensor([[0, 2, -1]]))
        op("aten::index_select.out", x, 0, torch.tensor([2, 0, 2]))
        op("aten::index_select.out", x, -1, torch.tensor([4]))
        op("aten::index.Tensor_out", x, [torch.tensor([2, 0]), torch.tensor([[1], [3]])])
        op("aten::index.Tensor_out", rand([2, 3, 4], dtype), [None, torch.tensor([2, -1])])
        op("aten::index.Tensor_out", rand([2, 3, 4], dtype), [torch.tensor([1, 0]), None, torch.tensor([3, 3])])
        op("aten::index_put.out", x, [torch.tensor([2, 0]), torch.tensor([1, 4])], rand([2], dtype), False)
        op("aten::index_put.out", x, [None, torch.tensor([1, -1])], rand([3, 1], dtype), False)
        if dtype != torch.bool:
            op("aten::index_put.out", x, [torch.tensor([1, 1, 0])], rand([5], dtype), True)
        op("aten::scatter.src_out", x, 1, torch.tensor([[0, 4], [1, 2], [3, 2]]), rand([3, 4], dtype))
        op("aten::scatter.src_out", x, -2, torch.tensor([[2, 0, 1]]), rand([2, 5], dtype))
    # Boolean masks (and uint8 masks, which PyTorch still reads as masks): the result's size
    # depends on the data; a mask over d dims acts as d index tensors of its true positions.
    # (Indexing moves elements whatever their dtype: one float, one integer, bool, half.)
    for dtype in [torch.float32, torch.int64, torch.bool, torch.float16]:
        x = rand([3, 4, 2], dtype)
        m = torch.rand(3, 4) > 0.5
        op("aten::index.Tensor_out", x, [m])  # over the leading dims
        op("aten::index.Tensor_out", x, [torch.rand(3) > 0.5, None, torch.rand(2) > 0.5])
        op("aten::index.Tensor_out", x, [None, torch.rand(4) > 0.5])  # after a slice
        op("aten::index.Tensor_out", x, [torch.zeros(3, dtype=torch.bool)])  # all false: size 0
        op("aten::index.Tensor_out", x, [None, (torch.rand(4, 2) > 0.5).to(torch.uint8)])
        op("aten::index_put.out", x, [m], rand([2], dtype), False)
        op("aten::index_put.out", x, [None, torch.tensor([True, False, True, True])], rand([3, 3, 1], dtype), False)
        if dtype != torch.bool:
            op("aten::index_put.out", x, [torch.rand(3) > 0.3], rand([1], dtype), True)
    x = rand([3, 4, 2], torch.float32)
    # Masks mixed with integer indices broadcast with the mask's true count.
    op("aten::index.Tensor_out", x, [torch.tensor([True, False, True]), torch.tensor([[3], [0]])])
    op("aten::index.Tensor_out", x, [torch.tensor([True, False, True]), None, torch.tensor([1])])
    op("aten::index.Tensor_out", x, [torch.tensor([1, 2]), torch.tensor([False, True, True, False])])
    op("aten::index_put.out", x, [torch.tensor([2, 0]), torch.tensor([True, False, False, True])], rand([2, 2], torch.float32), True)
    op("aten::index.Tensor_out", x, [torch.tensor([True, True, False]), torch.tensor([0, 1, 2])])  # error: 2 vs 3
    op("aten::index.Tensor_out", x, [torch.rand(4) > 0.5])  # error: mask shape
    op("aten::index.Tensor_out", x, [None, torch.rand(4, 3) > 0.5])  # error: mask shape
    op("aten::index.Tensor_out", x, [torch.tensor(True)])  # error: 0-d mask
    op("aten::index.Tensor_out", x, [torch.tensor([True, False, True]), torch.tensor([5])])  # error: range
    op("aten::index_put.out", x, [torch.tensor([True, False, True])], rand([3, 4, 2], torch.float32), False)  # error
    x = rand([3, 5], torch.float32)
    # Out-of-range indices are errors.
    op("aten::embedding.out", rand([10, 4], torch.float32), torch.tensor([0, 10]))
    op("aten::embedding.out", rand([10, 4], torch.float32), torch.tensor([-1]))
    op("aten::gather.out", x, 1, torch.tensor([[5]]))
    op("aten::index_select.out", x, 0, torch.tensor([3]))
    op("aten::index_select.out", x, 0, torch.tensor([-1]))  # PyTorch rejects negative indices
    op("aten::index.Tensor_out", x, [torch.tensor([3])])
    op("aten::index.Tensor_out", x, [torch.tensor([-4])])
    op("aten::index_put.out", x, [torch.tensor([3])], rand([5], torch.float32), False)
    op("aten::index_put.out", x, [torch.tensor([0, 1])], rand([3], torch.float32), False)  # values don't broadcast
    op("aten::scatter.src_out", x, 1, torch.tensor([[5]]), rand([1, 1], torch.float32))
    op("aten::scatter.src_out", x, 0, torch.tensor([[1]]), rand([1, 1], torch.float64))  # dtype mismatch
    op("aten::gather.out", x, 1, torch.tensor([[1.0]]))  # error: float index


def linalg_ops():
    for dtype in FLOATS:
        a, b = rand([3, 5], dtype), rand([5, 4], dtype)
        op("aten::mm.out", a, b)
        op("aten::addmm.out", rand([4], dtype), a, b, beta=0.5, alpha=2)
        op("aten::addmm.out", rand([3, 1], dtype), a, b)
        x, y = rand([2, 3, 5], dtype), rand([2, 5, 1], dtype)
        op("aten::bmm.out", x, y)
        op("aten::baddbmm.out", rand([1, 3, 1], dtype), x, y, beta=2, alpha=0.5)
        op("aten::linear.out", rand([2, 3, 5], dtype), rand([4, 5], dtype), rand([4], dtype))
        op("aten::linear.out", rand([5], dtype), rand([4, 5], dtype), None)
    # Integer products (ExecuTorch's portable mm/bmm/addmm take every real dtype) wrap as in
    # PyTorch: int8/uint8 sums of five products already overflow.
    for dtype in INTS:
        a, b = rand([3, 5], dtype), rand([5, 4], dtype)
        op("aten::mm.out", a, b)
        op("aten::addmm.out", rand([4], dtype), a, b, beta=2, alpha=3)
        op("aten::bmm.out", rand([2, 3, 5], dtype), rand([2, 5, 2], dtype))
        op("aten::baddbmm.out", rand([2, 1, 2], dtype), rand([2, 3, 5], dtype), rand([2, 5, 2], dtype), beta=-1, alpha=2)
        op("aten::linear.out", rand([2, 5], dtype), rand([4, 5], dtype), rand([4], dtype))
    op("aten::mm.out", torch.full([2, 3], 100, dtype=torch.int8), torch.full([3, 2], 100, dtype=torch.int8))
    op("aten::mm.out", torch.full([1, 2], 2**62, dtype=torch.int64), torch.tensor([[3], [5]]))
    op("aten::addmm.out", rand([2, 2], torch.int64), rand([2, 3], torch.int64), rand([3, 2], torch.int64), beta=0.5, alpha=2.5)
    op("aten::mm.out", rand([0, 3], torch.int32), rand([3, 2], torch.int32))
    op("aten::bmm.out", rand([2, 3, 0], torch.int16), rand([2, 0, 2], torch.int16))
    op("aten::mm.out", rand([2, 3], torch.bool), rand([3, 2], torch.bool))  # error: bool
    op("aten::mm.out", rand([2, 3], torch.int32), rand([3, 2], torch.int64), out=torch.int32)  # error: mixed
    op("aten::mm.out", rand([3, 5], torch.float32), rand([4, 4], torch.float32))  # error
    op("aten::mm.out", rand([0, 5], torch.float32), rand([5, 2], torch.float32))
    op("aten::mm.out", rand([2, 0], torch.float32), rand([0, 2], torch.float32))
    op("aten::bmm.out", rand([2, 3, 5], torch.float32), rand([3, 5, 1], torch.float32))  # error


def conv_ops():
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        for chl in [False, True]:
            x = cl([1, 4, 5, 4], dtype) if chl else rand([2, 4, 3, 3], dtype)
            w, b = rand([6, 2, 3, 3], dtype), rand([6], dtype)
            op("aten::convolution.out", x, w, b, [2, 1], [1, 2], [1, 2], False, [0, 0], 2)
            op("aten::convolution.out", x, rand([4, 3, 2, 2], dtype), None, [2, 2], [0, 1], [1, 1], True, [1, 0], 2)
            if dtype in (torch.float32, torch.bfloat16):  # in place (f32/f64) and widened paths
                # Depthwise (computed directly), a depth multiplier of 2, and 1x1 (no im2col).
                op("aten::convolution.out", x, rand([4, 1, 3, 3], dtype), rand([4], dtype), [1, 2], [1, 1], [2, 1], False, [0, 0], 4)
                op("aten::convolution.out", x, rand([8, 1, 3, 2], dtype), None, [2, 1], [1, 0], [1, 1], False, [0, 0], 4)
                op("aten::convolution.out", x, rand([5, 4, 1, 1], dtype), rand([5], dtype), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
            op("aten::max_pool2d_with_indices.out", x, [3, 3], [2, 2], [1, 1], [1, 1], chl, out=[dtype, torch.int64])
            op("aten::avg_pool2d.out", x, [3, 2], [2, 1], [1, 0], chl, not chl, None)
            op("aten::avg_pool2d.out", x, [2, 2], [], [0, 0], False, True, 3)
            op("aten::_adaptive_avg_pool2d.out", x, [3, 2])
            op("aten::upsample_nearest2d.vec_out", x, [7, 2], None)
            op("aten::upsample_nearest2d.vec_out", x, None, [1.5, 0.5])
            op("aten::upsample_bilinear2d.vec_out", x, [7, 2], chl, None)
            op("aten::upsample_bilinear2d.vec_out", x, None, False, [0.5, 1.5])
            c = x.shape[1]
            rm, rv = rand([c], dtype), rand([c], dtype).abs() + 0.5
            op("aten::_native_batch_norm_legit_no_training.out", x, rand([c], dtype), rand([c], dtype), rm, rv, 0.1, 1e-5)
            op("aten::_native_batch_norm_legit.no_stats_out", x, rand([c], dtype), None, True, 0.1, 1e-5, ref_contig=True)
        x1 = rand([2, 4, 9], dtype)
        op("aten::convolution.out", x1, rand([3, 4, 3], dtype), rand([3], dtype), [2], [1], [1], False, [0], 1)
        x = rand([2, 6, 3, 2], dtype)
        op("aten::native_group_norm.out", x, rand([6], dtype), rand([6], dtype), 2, 6, 6, 3, 1e-5)
        op("aten::native_group_norm.out", x, None, None, 2, 6, 6, 2, 1e-5)
        x = rand([2, 3, 8], dtype)
        op("aten::native_layer_norm.out", x, [8], rand([8], dtype), rand([8], dtype), 1e-5)
        op("aten::native_layer_norm.out", x, [3, 8], None, None, 1e-5)
    op("aten::convolution.out", rand([1, 3, 4, 4], torch.float32), rand([2, 2, 3, 3], torch.float32), None,
       [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # error: channels mismatch
    op("aten::max_pool2d_with_indices.out", rand([1, 1, 4, 4], torch.float32), [5, 5], [1, 1], [3, 3], [1, 1], False,
       out=[torch.float32, torch.int64])  # error: padding > kernel/2
    x = torch.tensor([[[[1.0, float("nan")], [3.0, 2.0]]]])
    op("aten::max_pool2d_with_indices.out", x, [2, 2], [1, 1], [0, 0], [1, 1], False, out=[torch.float32, torch.int64])


def prim_ops():
    t = rand([2, 0, 3, 1], torch.float32)
    for d in [0, -1, 2, 1]:
        scalar_case("aten::sym_size.int", [tensor_json(t), {"int": d}], None, lambda: t.size(d))
        scalar_case("aten::sym_stride.int", [tensor_json(t), {"int": d}], None, lambda: t.stride(d))
    scalar_case("aten::sym_size.int", [tensor_json(t), {"int": 4}], None, lambda: t.size(4))
    c = cl([2, 3, 4, 5], torch.float32)
    scalar_case("aten::sym_stride.int", [tensor_json(c), {"int": 1}], None, lambda: c.stride(1))
    scalar_case("aten::sym_numel", [tensor_json(t)], None, lambda: t.numel())
    scalar_case("aten::sym_numel.default", [tensor_json(c)], None, lambda: c.numel())
    for v in [torch.tensor([2.5]), torch.tensor(7), torch.tensor([True]), torch.tensor([1.5], dtype=torch.bfloat16)]:
        for name in ["aten::_local_scalar_dense", "aten::_local_scalar_dense.default"]:
            scalar_case(name, [tensor_json(v)], None, lambda: v.item())
    scalar_case("aten::_local_scalar_dense", [tensor_json(torch.tensor([1, 2]))], None, lambda: torch.tensor([1, 2]).item())
    import math
    import operator
    py = {
        "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
        "floordiv": operator.floordiv, "mod": operator.mod, "eq": operator.eq, "gt": operator.gt,
        "ge": operator.ge, "lt": operator.lt, "le": operator.le, "sym_max": max, "sym_min": min,
    }
    pairs = [(7, 2), (-7, 2), (7, -2), (7.5, 2), (-7.5, 2.0), (3, 3), (2, 0), (2.5, 0.0)]
    for name, fn in py.items():
        for a, b in pairs:
            ovs = ["Scalar"] + (["int"] if name in ("floordiv", "mod") and isinstance(a, int) and isinstance(b, int) else [])
            if b == 0 and isinstance(b, float) and name in ("truediv", "floordiv", "mod"):
                continue  # Python raises; ExecuTorch's prim ops give the IEEE result for doubles
            # ExecuTorch's prim ops return a double when either operand is one (Python's
            # min/max return the chosen operand unchanged).
            f = (lambda: float(fn(a, b))) if name in ("sym_max", "sym_min") and (isinstance(a, float) or isinstance(b, float)) else (lambda: fn(a, b))
            for ov in ovs:
                scalar_case(f"executorch_prim::{name}.{ov}", [num_json(a), num_json(b)], None, f)
    un = {"neg": operator.neg, "ceil": math.ceil, "round": round, "trunc": math.trunc, "sym_float": float,
          "sym_int": int, "sym_not": operator.not_}
    for name, fn in un.items():
        for a in ([True, False] if name == "sym_not" else [2, -3, 2.5, -2.5, 3.5, -0.4]):
            scalar_case(f"executorch_prim::{name}.Scalar", [num_json(a)], None, lambda: fn(a))
    # et_view: the out aliases self with the new shape.
    x = rand([2, 3], torch.float32)
    for name in ["executorch_prim::et_view", "executorch_prim::et_view.default"]:
        cases.append({"op": name, "args": [tensor_json(x), {"int_list": [3, -1]}, out_json(torch.float32, [3, 2])],
                      "expected": [tensor_json(x.reshape(3, 2))["tensor"]], "rtol": 0.0, "atol": 0.0})


def num_json(v):
    if isinstance(v, bool):
        return {"bool": v}
    return {"int": v} if isinstance(v, int) else {"double": v}


def inplace_ops():
    # `copy_` and `fill_` write into self; their return is self.
    for dtype in [torch.float32, torch.int64, torch.bool]:
        x, s = rand([2, 3], dtype), rand([3], dtype)
        cases.append({"op": "aten::copy_", "args": [{"out": {"dtype": NAMES[dtype], "sizes": [2, 3]}}, tensor_json(s), {"bool": False}],
                      "expected": [tensor_json(s.expand(2, 3))["tensor"]], "rtol": 0.0, "atol": 0.0})
        v = 3 if dtype != torch.bool else True
        cases.append({"op": "aten::fill_.Scalar", "args": [{"out": {"dtype": NAMES[dtype], "sizes": [2, 3]}}, {"scalar": v}],
                      "expected": [tensor_json(torch.full([2, 3], v, dtype=dtype))["tensor"]], "rtol": 0.0, "atol": 0.0})


def extreme_all_ops():
    """max / min over every element (`.unary_out`); appended last so that the random
    inputs of the cases before stay as they were."""
    for dtype in REAL + [torch.bool]:
        x = rand([3, 4, 2], dtype)
        op("aten::max.unary_out", x)
        op("aten::min.unary_out", x)
    nanx = torch.tensor([[1.0, float("nan"), 3.0], [float("-inf"), 0.0, float("inf")]])
    op("aten::max.unary_out", nanx)
    op("aten::min.unary_out", torch.tensor([float("-inf"), 2.0]))
    op("aten::max.unary_out", rand([2, 0], torch.float32))  # error: empty input
    op("aten::max.unary_out", torch.tensor(4.0))


def main():
    binary_ops()
    unary_ops()
    reduce_ops()
    shape_ops()
    index_ops()
    linalg_ops()
    conv_ops()
    prim_ops()
    inplace_ops()
    cases.extend(op_table_etch.cases(tensor_json, out_json, TOL))
    extreme_all_ops()
    # The replay takes the tolerance of the first floating-point output when none is given.
    by_name = {NAMES[d]: tol for d, tol in TOL.items()}
    for c in cases:
        floats = [e["dtype"] for e in c.get("expected", []) if e["dtype"] in by_name]
        if "rtol" in c and (c["rtol"], c["atol"]) == (by_name[floats[0]] if floats else (0.0, 0.0)):
            del c["rtol"], c["atol"]
    with open(OUT, "w") as f:
        json.dump(cases, f, separators=(",", ":"))
    print(f"{len(cases)} cases, {os.path.getsize(OUT)} bytes -> {OUT}")


if __name__ == "__main__":
    main()
