"""Generates the per-operator test table replayed by crates/etch-kernels/tests/op_table.rs:
for each kernel, cases with random shapes (broadcasting, size-0 and size-1 dims, negative
dims, channels-last inputs where ExecuTorch allows them) in the dtypes ExecuTorch's portable
library supports, with PyTorch's outputs (or the fact that PyTorch raises).

    venv/bin/python tools/export/gen_op_table.py   # writes crates/etch-kernels/tests/op_table.json

Arguments follow the `.out` schema order, as ExecuTorch serializes them; the replay adds
the return values after the arguments.
"""

import json
import os
import random

import numpy as np
import torch

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
    if dtype in FLOATS:
        return (torch.randn(shape) * 2).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    lo, hi = (0, 10) if dtype == torch.uint8 else (-8, 9)
    return torch.randint(lo, hi, shape).to(dtype)


def tensor_json(t, channels_last=False):
    t = t.detach()
    if channels_last and t.dim() == 4:
        mem = t.permute(0, 2, 3, 1).contiguous()
        order = [0, 2, 3, 1]
    else:
        mem = t.contiguous()
        order = list(range(t.dim()))
    data = mem.to(torch.float64).flatten().tolist() if t.dtype != torch.bool else mem.to(torch.int64).flatten().tolist()
    data = [None if (isinstance(v, float) and v != v) else v for v in data]
    return {"tensor": {"dtype": NAMES[t.dtype], "sizes": list(t.shape), "dim_order": order, "data": data}}


def out_json(dtype, sizes):
    return {"out": {"dtype": NAMES[dtype], "sizes": list(sizes)}}


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
        "op": op, "args": args, "expected": [tensor_json(r)["tensor"] for r in res],
        "rtol": rtol, "atol": atol,
    })


def shapes_bcast():
    base = [rng.randint(1, 4) for _ in range(rng.randint(0, 4))]
    other = list(base)
    for i in range(len(other)):
        if rng.random() < 0.3:
            other[i] = 1
    if other and rng.random() < 0.3:
        other = other[rng.randint(0, len(other) - 1):]
    return base, other


def binary_ops():
    for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div)]:
        for dtype in FLOATS + INTS[:2]:
            if name == "sub" and dtype == torch.bool:
                continue
            for _ in range(3):
                sa, sb = shapes_bcast()
                a, b = rand(sa, dtype), rand(sb, dtype)
                if name == "div" and dtype in INTS:
                    b = torch.where(b == 0, torch.ones_like(b), b)
                out_dtype = torch.result_type(a, b) if name != "div" or dtype in FLOATS else torch.float32
                shape = torch.broadcast_shapes(a.shape, b.shape)
                if name in ("add", "sub"):
                    alpha = 2 if dtype in INTS else 1.5
                    args = [tensor_json(a), tensor_json(b), {"scalar": alpha}, out_json(out_dtype, shape)]
                    case(f"aten::{name}.out", args, [3], lambda: fn(a, b, alpha=alpha).to(out_dtype))
                else:
                    args = [tensor_json(a), tensor_json(b), out_json(out_dtype, shape)]
                    case(f"aten::{name}.out", args, [2], lambda: fn(a, b).to(out_dtype))
    # Division rounding modes on integers and floats, including negatives.
    for dtype in [torch.float32, torch.int64]:
        for mode in ["trunc", "floor"]:
            a, b = rand([5], dtype), rand([5], dtype)
            b = torch.where(b == 0, torch.ones_like(b) * 3, b)
            args = [tensor_json(a), tensor_json(b), {"string": mode}, out_json(dtype, [5])]
            case("aten::div.out_mode", args, [3], lambda: torch.div(a, b, rounding_mode=mode))
    # Mixed dtype promotion: int tensor * float tensor → float.
    a, b = rand([2, 3], torch.int64), rand([3], torch.float32)
    case("aten::mul.out", [tensor_json(a), tensor_json(b), out_json(torch.float32, [2, 3])], [2], lambda: a * b)
    # Comparisons write bool.
    for op, fn in [("eq", torch.eq), ("lt", torch.lt), ("ge", torch.ge)]:
        for dtype in [torch.float32, torch.int64]:
            sa, sb = shapes_bcast()
            a, b = rand(sa, dtype), rand(sb, dtype)
            shape = torch.broadcast_shapes(a.shape, b.shape)
            case(f"aten::{op}.Tensor_out", [tensor_json(a), tensor_json(b), out_json(torch.bool, shape)], [2], lambda: fn(a, b))
    # Channels-last inputs.
    a = rand([2, 3, 4, 5], torch.float32)
    b = rand([2, 3, 4, 5], torch.float32)
    case("aten::add.out", [tensor_json(a, True), tensor_json(b, True), {"scalar": 1}, out_json(torch.float32, [2, 3, 4, 5])], [3], lambda: a + b)


def unary_ops():
    for name in ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "neg", "abs", "sin", "cos", "floor", "ceil", "round"]:
        for dtype in FLOATS:
            shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
            x = rand(shape, dtype)
            if name in ("log", "sqrt", "rsqrt"):
                x = x.abs() + 0.1
            fn = getattr(torch, name)
            case(f"aten::{name}.out", [tensor_json(x), out_json(dtype, shape)], [1], lambda: fn(x))
    for approx in ["none", "tanh"]:
        for dtype in FLOATS:
            x = rand([3, 4], dtype)
            case("aten::gelu.out", [tensor_json(x), {"string": approx}, out_json(dtype, [3, 4])], [2],
                 lambda: torch.nn.functional.gelu(x, approximate=approx))
    x = torch.tensor([1.0, float("nan"), -2.0, 0.5])
    case("aten::relu.out", [tensor_json(x), out_json(torch.float32, [4])], [1], lambda: torch.relu(x))


def reduce_ops():
    for dtype in FLOATS:
        x = rand([3, 4, 5], dtype)
        for dim in [[-1], [0, 2], [1]]:
            for keep in [False, True]:
                shape = list(torch.sum(x, dim=dim, keepdim=keep).shape)
                case("aten::sum.IntList_out", [tensor_json(x), {"int_list": dim}, {"bool": keep}, {"none": True}, out_json(dtype, shape)], [4],
                     lambda: torch.sum(x, dim=dim, keepdim=keep))
                case("aten::mean.out", [tensor_json(x), {"int_list": dim}, {"bool": keep}, {"none": True}, out_json(dtype, shape)], [4],
                     lambda: torch.mean(x, dim=dim, keepdim=keep))
        for dim in [0, -1]:
            shape = list(torch.argmax(x, dim=dim).shape)
            case("aten::argmax.out", [tensor_json(x), {"int": dim}, {"bool": False}, out_json(torch.int64, shape)], [3],
                 lambda: torch.argmax(x, dim=dim))
    x = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 2.0, -1.0]])
    case("aten::amax.out", [tensor_json(x), {"int_list": [1]}, {"bool": False}, out_json(torch.float32, [2])], [3],
         lambda: torch.amax(x, dim=1))
    for dtype in [torch.float32, torch.float16]:
        x = rand([2, 7], dtype)
        for dim in [1, -1, 0]:
            shape = list(torch.softmax(x, dim).shape)
            case("aten::_softmax.out", [tensor_json(x), {"int": dim}, {"bool": False}, out_json(dtype, shape)], [3],
                 lambda: torch._softmax(x, dim, False))


def shape_ops():
    for dtype in [torch.float32, torch.int64, torch.bool]:
        x = rand([2, 3, 4], dtype)
        case("aten::permute_copy.out", [tensor_json(x), {"int_list": [2, 0, 1]}, out_json(dtype, [4, 2, 3])], [2],
             lambda: x.permute(2, 0, 1).contiguous())
        case("aten::transpose_copy.int_out", [tensor_json(x), {"int": -1}, {"int": 0}, out_json(dtype, [4, 3, 2])], [3],
             lambda: x.transpose(-1, 0).contiguous())
        case("aten::view_copy.out", [tensor_json(x), {"int_list": [6, -1]}, out_json(dtype, [6, 4])], [2],
             lambda: x.reshape(6, -1))
        y = rand([2, 5, 4], dtype)
        case("aten::cat.out", [{"tensor_list": [tensor_json(x), tensor_json(y)]}, {"int": 1}, out_json(dtype, [2, 8, 4])], [2],
             lambda: torch.cat([x, y], 1))
        case("aten::slice_copy.Tensor_out", [tensor_json(x), {"int": 2}, {"int": 1}, {"int": 4}, {"int": 2}, out_json(dtype, [2, 3, 2])], [5],
             lambda: x[:, :, 1:4:2].contiguous())
        case("aten::select_copy.int_out", [tensor_json(x), {"int": -2}, {"int": -1}, out_json(dtype, [2, 4])], [3],
             lambda: x.select(-2, -1).contiguous())
        e = rand([3, 1], dtype)
        case("aten::expand_copy.out", [tensor_json(e), {"int_list": [2, 3, 4]}, {"bool": False}, out_json(dtype, [2, 3, 4])], [3],
             lambda: e.expand(2, 3, 4).contiguous())
    # Out-of-range select index is an error, not UB.
    x = rand([2, 3], torch.float32)
    case("aten::select_copy.int_out", [tensor_json(x), {"int": 1}, {"int": 3}, out_json(torch.float32, [2])], [3],
         lambda: x.select(1, 3))


def index_ops():
    w = rand([10, 4], torch.float32)
    idx = torch.tensor([[0, 9, 3], [2, 2, 7]])
    case("aten::embedding.out", [tensor_json(w), tensor_json(idx), {"int": -1}, {"bool": False}, {"bool": False}, out_json(torch.float32, [2, 3, 4])], [5],
         lambda: torch.nn.functional.embedding(idx, w))
    bad = torch.tensor([0, 10])
    case("aten::embedding.out", [tensor_json(w), tensor_json(bad), {"int": -1}, {"bool": False}, {"bool": False}, out_json(torch.float32, [2, 4])], [5],
         lambda: torch.nn.functional.embedding(bad, w))
    x = rand([3, 5], torch.float32)
    i = torch.tensor([[0, 4], [1, 1], [3, 2]])
    case("aten::gather.out", [tensor_json(x), {"int": 1}, tensor_json(i), {"bool": False}, out_json(torch.float32, [3, 2])], [4],
         lambda: torch.gather(x, 1, i))
    case("aten::index_select.out", [tensor_json(x), {"int": 0}, tensor_json(torch.tensor([2, 0])), out_json(torch.float32, [2, 5])], [3],
         lambda: torch.index_select(x, 0, torch.tensor([2, 0])))


def linalg_ops():
    for dtype in FLOATS:
        a, b = rand([3, 5], dtype), rand([5, 4], dtype)
        case("aten::mm.out", [tensor_json(a), tensor_json(b), out_json(dtype, [3, 4])], [2], lambda: a @ b, tol_dtype=dtype)
        c = rand([4], dtype)
        case("aten::addmm.out", [tensor_json(c), tensor_json(a), tensor_json(b), {"scalar": 0.5}, {"scalar": 2}, out_json(dtype, [3, 4])], [5],
             lambda: torch.addmm(c, a, b, beta=0.5, alpha=2), tol_dtype=dtype)
        x, y = rand([2, 3, 5], dtype), rand([2, 5, 1], dtype)
        case("aten::bmm.out", [tensor_json(x), tensor_json(y), out_json(dtype, [2, 3, 1])], [2], lambda: torch.bmm(x, y), tol_dtype=dtype)
    a, b = rand([3, 5], torch.float32), rand([4, 4], torch.float32)
    case("aten::mm.out", [tensor_json(a), tensor_json(b), out_json(torch.float32, [3, 4])], [2], lambda: a @ b)
    a, b = rand([0, 5], torch.float32), rand([5, 2], torch.float32)
    case("aten::mm.out", [tensor_json(a), tensor_json(b), out_json(torch.float32, [0, 2])], [2], lambda: a @ b)


def conv_ops():
    for cl in [False, True]:
        x = rand([2, 4, 7, 6], torch.float32)
        w = rand([6, 2, 3, 3], torch.float32)
        b = rand([6], torch.float32)
        ref = torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
        case("aten::convolution.out", [tensor_json(x, cl), tensor_json(w), tensor_json(b), {"int_list": [2, 1]}, {"int_list": [1, 2]},
                                        {"int_list": [1, 2]}, {"bool": False}, {"int_list": [0, 0]}, {"int": 2}, out_json(torch.float32, list(ref.shape))], [9],
             lambda: torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2))
        ref = torch.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)
        case("aten::max_pool2d_with_indices.out", [tensor_json(x, cl), {"int_list": [3, 3]}, {"int_list": [2, 2]}, {"int_list": [1, 1]}, {"int_list": [1, 1]},
                                                    {"bool": False}, out_json(torch.float32, list(ref[0].shape)), out_json(torch.int64, list(ref[1].shape))], [6, 7],
             lambda: torch.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True))
    for dtype in [torch.float32, torch.float16]:
        x = rand([2, 3, 8], dtype)
        wln, bln = rand([8], dtype), rand([8], dtype)
        case("aten::native_layer_norm.out", [tensor_json(x), {"int_list": [8]}, tensor_json(wln), tensor_json(bln), {"double": 1e-5},
                                              out_json(dtype, [2, 3, 8]), out_json(dtype, [2, 3, 1]), out_json(dtype, [2, 3, 1])], [5, 6, 7],
             lambda: torch.native_layer_norm(x, [8], wln, bln, 1e-5)[0:1], tol_dtype=dtype)


def main():
    binary_ops()
    unary_ops()
    reduce_ops()
    shape_ops()
    index_ops()
    linalg_ops()
    conv_ops()
    with open(OUT, "w") as f:
        json.dump(cases, f, separators=(",", ":"))
    print(f"{len(cases)} cases, {os.path.getsize(OUT)} bytes -> {OUT}")


if __name__ == "__main__":
    main()
