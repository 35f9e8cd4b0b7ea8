"""Cases of the per-operator table (gen_op_table.py) for etch's own `etch::` ops, checked
against their PyTorch references in etch_ops.py.

In-place arguments (the GDN states, the KV caches) are `out` entries that carry data: the
kernel reads them and the replay compares them after the call, in argument order, followed
by the op's `out`. Odd sizes (Dk=12, Dv=10, H=40, E=6, k=3, head_dim 24) and sizes that
cross the CUDA kernels' tiles (value columns over 32, key rows over several warps, key
splits, a vocabulary over the sampler's shared-memory path) in float32, bfloat16 and
float16; T=1 and T>1; position 0 and later; and arguments the references reject
(positions out of range, wrong shapes), which must be errors.

Discrete choices (the MoE top-k, the sampled token) are kept away from ties and rounding
boundaries: a draw is redone until the choice survives small perturbations.
"""
import math

import numpy as np
import torch

import etch_ops

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


class Case:
    """Builds the table entries, with a generator of its own (the other cases stay as they
    were)."""

    def __init__(self, tensor_json, out_json, tol):
        self.tensor_json, self.out_json, self.tol = tensor_json, out_json, tol
        self.g = torch.Generator().manual_seed(2026)
        self.rng = np.random.default_rng(2026)
        self.cases = []

    def randn(self, shape, dtype, scale=1.0):
        """Normal values times `scale`, in steps of 1/64 (short in the table)."""
        x = torch.randn(shape, generator=self.g) * scale
        return (torch.round(x * 64) / 64).to(dtype)

    def add(self, op, args, ref, out_dtype, out_shape, tol=None):
        """args: tensors, ints, floats and `Inplace` tensors (schema order, `out` left out).
        ref(*args) computes the output and updates the in-place tensors; if it raises, the
        case is an error case."""
        js = []
        for v in args:
            if isinstance(v, Inplace):
                js.append({"out": self.tensor_json(v.t)["tensor"]})
            elif isinstance(v, torch.Tensor):
                js.append(self.tensor_json(v))
            elif isinstance(v, bool):
                js.append({"bool": v})
            elif isinstance(v, int):
                js.append({"int": v})
            else:
                js.append({"double": v})
        # Several outputs (a tuple-returning op): out_shape is a list of shapes.
        shapes = out_shape if out_shape and isinstance(out_shape[0], list) else [out_shape]
        for shape in shapes:
            js.append(self.out_json(out_dtype, shape, 1 << 16))
        vals = [v.t.clone() if isinstance(v, Inplace) else v for v in args]
        try:
            res = ref(*vals)
        except Exception:  # noqa: BLE001  the reference rejects it: etch must too.
            self.cases.append({"op": op, "args": js, "error": True})
            return
        for j in js[len(js) - len(shapes):]:
            j["out"].pop("capacity")
        res = list(res) if isinstance(res, tuple) else [res]
        outs = [c for c, v in zip(vals, args) if isinstance(v, Inplace)] + res
        expected = [self.tensor_json(t, False, True)["tensor"] for t in outs]
        rtol, atol = tol or self.tol.get(outs[0].dtype, (0.0, 0.0))
        self.cases.append({"op": op, "args": js, "expected": expected, "rtol": rtol, "atol": atol})


class Inplace:
    """A tensor argument the op updates in place (`Tensor(a!)`)."""

    def __init__(self, t):
        self.t = t


# float32 cases: sequential recurrences and long sums run in other orders on each backend.
F32_TOL = (1e-4, 1e-4)


def tol_for(dtype):
    return F32_TOL if dtype == torch.float32 else None


def gdn(c):
    op = "etch::gated_delta_net.out"

    def one(dtype, B, T, Hk, Dk, Hv, Dv, K, pos, state_shape=None):
        C = 2 * Hk * Dk + Hv * Dv
        args = [
            c.randn([B, T, C], dtype), c.randn([B, T, Hv], dtype), c.randn([B, T, Hv], dtype),
            c.randn([C, 1, K], dtype, 0.5), c.randn([Hv], dtype, 0.5), c.randn([Hv], dtype, 0.5),
            Inplace(c.randn(state_shape or [B, C, K - 1], dtype)),
            Inplace(c.randn([B, Hv, Dk, Dv], torch.float32, 0.1)),
            torch.tensor([pos]), Hk, Dk,
        ]
        c.add(op, args, etch_ops.gated_delta_net_ref, dtype, [B, T, Hv, Dv], tol_for(dtype))

    for dtype in DTYPES:
        one(dtype, 2, 1, 2, 12, 4, 10, 4, 0)
        one(dtype, 1, 4, 2, 12, 4, 10, 4, 7)
    # Key rows over three warps, two value-column tiles; value heads = key heads.
    one(torch.float32, 1, 3, 1, 40, 1, 33, 4, 2)
    one(torch.bfloat16, 1, 2, 1, 40, 1, 33, 3, 0)
    one(torch.float32, 1, 2, 1, 12, 1, 10, 2, 1)
    # A conv state of the wrong shape.
    one(torch.float32, 1, 2, 1, 4, 2, 3, 4, 1, state_shape=[1, 14, 4])


def moe_weights(c, dtype, H, E, I, Is, k, rows):
    """Weights whose top-k choice has a clear margin for every row of x."""
    x = c.randn([rows, H], dtype)
    for _ in range(200):
        router = c.randn([E, H], dtype, 3.0 / math.sqrt(H))
        logits = np.sort((x.double() @ router.double().T).numpy(), axis=1)[:, ::-1]
        if k >= E or np.all(logits[:, k - 1] - logits[:, k] > 0.05 * np.maximum(1.0, np.abs(logits[:, k - 1]))):
            break
    else:
        raise RuntimeError("no router with a clear top-k margin")
    s = 1.0 / math.sqrt(H)
    return x, [
        router, c.randn([E, 2 * I, H], dtype, s), c.randn([E, H, I], dtype, 1.0 / math.sqrt(I)),
        c.randn([Is, H], dtype, s), c.randn([Is, H], dtype, s), c.randn([H, Is], dtype, 1.0 / math.sqrt(Is)),
        c.randn([1, H], dtype, s),
    ]


def moe(c):
    op = "etch::moe.out"

    def one(dtype, shape, E, I, Is, k, bad=None):
        H = shape[-1]
        rows = int(np.prod(shape[:-1]))
        x, w = moe_weights(c, dtype, H, E, I, Is, k, rows)
        if bad is not None:
            w[2] = c.randn(bad, dtype)
        c.add(op, [x.reshape(shape)] + w + [k], etch_ops.moe_ref, dtype, shape, tol_for(dtype))

    for dtype in DTYPES:
        one(dtype, [2, 40], 6, 4, 4, 3)
    one(torch.float32, [1, 40], 6, 12, 20, 3)
    one(torch.float32, [2, 2, 40], 6, 4, 4, 3)
    one(torch.float32, [3, 40], 6, 4, 8, 1)
    one(torch.bfloat16, [1, 32], 6, 4, 4, 6)
    one(torch.float32, [1, 8], 2, 4, 4, 3)  # top_k > E
    one(torch.float32, [1, 8], 2, 4, 4, 1, bad=[2, 8, 5])  # experts_down's I


def attention(c):
    op = "etch::attention.out"

    def one(dtype, B, T, Hq, Hkv, D, S, pos, scale=None, q_dim=None):
        args = [
            c.randn([B, T, Hq, q_dim or D], dtype), c.randn([B, T, Hkv, D], dtype),
            c.randn([B, T, Hkv, D], dtype), Inplace(c.randn([B, S, Hkv, D], dtype)),
            Inplace(c.randn([B, S, Hkv, D], dtype)), torch.tensor([pos]),
            scale if scale is not None else 1.0 / math.sqrt(D),
        ]
        c.add(op, args, etch_ops.attention_ref, dtype, [B, T, Hq, q_dim or D], tol_for(dtype))

    # Caches over 16 positions split the keys of few query rows over several blocks.
    for dtype in DTYPES:
        one(dtype, 2, 1, 4, 2, 24, 8, 0)
        one(dtype, 1, 1, 4, 1, 24, 20, 17)
        one(dtype, 1, 3, 4, 1, 24, 20, 5, scale=0.3)
    one(torch.float32, 1, 4, 2, 2, 24, 12, 8)  # the last rows of the cache, MHA
    one(torch.bfloat16, 1, 1, 8, 1, 8, 100, 90)  # many key splits
    one(torch.bfloat16, 1, 2, 2, 1, 256, 6, 3)  # head_dim 256 (16-byte loads)
    one(torch.float32, 1, 1, 2, 1, 128, 6, 5)
    one(torch.float32, 1, 2, 2, 1, 8, 6, 5)  # pos + T > S
    one(torch.float32, 1, 1, 2, 1, 8, 6, -1)  # pos < 0
    one(torch.float32, 1, 1, 2, 1, 8, 6, 2, q_dim=4)  # q's head_dim


def rule(l, t, k, p, u):
    """sample_row in float64 (etch_ops.sample_row's rule), for the stability check."""
    l = np.asarray(l, dtype=np.float64)
    if not t > 0 or k == 1:
        return int(np.argmax(np.where(np.isnan(l), -np.inf, l)))
    e = np.exp((l - np.max(l)) / t)
    pr = e / e.sum()
    order = np.lexsort((np.arange(len(pr)), -pr))
    if k > 0:
        order = order[:k]
    if p < 1:
        cs = np.cumsum(pr[order])
        order = order[: int(np.searchsorted(cs, p)) + 1]
    cs = np.cumsum(pr[order])
    j = int(np.searchsorted(cs, u * cs[-1], side="right"))
    return int(order[min(j, len(order) - 1)])


def stable(c, logits, t, k, p, u):
    """Whether the draw survives small changes of the logits, top_p (below 1) and u.
    Greedy draws only compare values: always stable."""
    if not t > 0 or k == 1:
        return True
    want = [rule(r, t, k, p, u) for r in logits.double().numpy()]
    for _ in range(4):
        for r, w in zip(logits.double().numpy(), want):
            # Equal logits stay equal (both backends order them by index).
            jit = r * (1 + 1e-6 * np.sin(r * 12345.678 + c.rng.standard_normal()))
            du, dp = 1e-4 * c.rng.standard_normal(2)
            if rule(jit, t, k, p + dp if p < 1 else p, u + du) != w:
                return False
    return True


def sample(c):
    op = "etch::sample.out"

    def one(dtype, B, V, t, k, p, u, nan=False):
        for _ in range(100):
            logits = c.randn([B, V], dtype, 2.0)
            if nan:
                logits[0, 1] = float("nan")
                logits[-1, 3:5] = logits[-1].float().nan_to_num(-1e9).max() + 1  # tie: first wins
            if stable(c, logits, t, k, p, u):
                break
        else:
            raise RuntimeError("no stable sampling case")
        params = torch.tensor([t, k, p, u], dtype=torch.float32)
        c.add(op, [logits, params], etch_ops.sample_ref, torch.int64, [B, 1])

    for dtype in DTYPES:
        one(dtype, 2, 37, 0.0, 0, 1.0, 0.5, nan=True)  # greedy
        one(dtype, 2, 37, 0.8, 5, 0.9, 0.6)
    one(torch.bfloat16, 2, 5000, 1.0, 1, 1.0, 0.7, nan=True)  # top_k 1: greedy, two chunks
    one(torch.float32, 1, 300, float("nan"), 0, 1.0, 0.2)  # NaN temperature: greedy
    one(torch.float32, 1, 1500, 1.0, 40, 0.95, 0.3)
    one(torch.float32, 2, 37, 0.7, 0, 1.0, 0.3)
    one(torch.float32, 2, 37, 1.3, 0, 0.8, 0.95)
    # Kept sets over the shared-memory path's 1024: found by the digit searches.
    one(torch.bfloat16, 1, 1500, 1.0, 0, 0.9, 0.4)
    one(torch.float32, 1, 1500, 1.5, 1100, 1.0, 0.8)
    one(torch.float16, 1, 1500, 2.0, 0, 1.0, 0.55)
    logits = c.randn([1, 10], torch.float32)
    c.add(op, [logits, torch.tensor([1.0, 0.0, 1.0])], etch_ops.sample_ref, torch.int64, [1, 1])


def norms(c):
    """etch::rms_norm (with and without the unit offset) and etch::rms_norm_gated: odd
    rows, a row wider than a block (2048), and mismatched shapes."""
    for dtype in DTYPES:
        x, w = c.randn([3, 40], dtype), c.randn([40], dtype, 0.5)
        for unit in (True, False):
            c.add("etch::rms_norm.out", [x, w, 1e-6, unit], etch_ops.rms_norm_ref, dtype,
                  [3, 40], tol_for(dtype))
    for dtype in (torch.float32, torch.bfloat16):
        x, w = c.randn([1, 1000], dtype), c.randn([1000], dtype, 0.5)
        c.add("etch::rms_norm.out", [x, w, 1e-6, True], etch_ops.rms_norm_ref, dtype,
              [1, 1000], tol_for(dtype))
        x, z, w = c.randn([2, 5, 10], dtype), c.randn([2, 5, 10], dtype), c.randn([10], dtype)
        c.add("etch::rms_norm_gated.out", [x, z, w, 1e-6], etch_ops.rms_norm_gated_ref, dtype,
              [2, 5, 10], tol_for(dtype))
    # The CUDA kernels' three paths: a warp per row (rows of at most 128 16-byte vectors),
    # a block per row (at most 1024), and the general kernel (wider, or not whole vectors).
    for dtype, shape in ((torch.bfloat16, [1, 2048]), (torch.float32, [1, 4100]),
                         (torch.float16, [3, 4, 64])):
        x, w = c.randn(shape, dtype), c.randn(shape[-1:], dtype, 0.5)
        c.add("etch::rms_norm.out", [x, w, 1e-6, True], etch_ops.rms_norm_ref, dtype,
              shape, tol_for(dtype))
    x, z, w = (c.randn([1, 1, 4, 128], torch.bfloat16), c.randn([1, 1, 4, 128], torch.bfloat16),
               c.randn([128], torch.bfloat16))
    c.add("etch::rms_norm_gated.out", [x, z, w, 1e-6], etch_ops.rms_norm_gated_ref,
          torch.bfloat16, [1, 1, 4, 128], tol_for(torch.bfloat16))
    # add_rms_norm: both outputs compared (the table checks every out); rows of each path.
    for dtype, shape in ((torch.float32, [3, 40]), (torch.bfloat16, [1, 2048]),
                         (torch.float16, [2, 2, 24]), (torch.bfloat16, [2, 1, 10])):
        x, y = c.randn(shape, dtype), c.randn(shape, dtype)
        for unit in (True, False):
            c.add("etch::add_rms_norm.out", [x, y, c.randn(shape[-1:], dtype, 0.5), 1e-6, unit],
                  etch_ops.add_rms_norm_ref, dtype, [shape, shape], tol_for(dtype))
    x = c.randn([3, 8], torch.float32)
    c.add("etch::add_rms_norm.out", [x, c.randn([3, 7], torch.float32),
                                     c.randn([8], torch.float32), 1e-6, True],
          etch_ops.add_rms_norm_ref, torch.float32, [[3, 8], [3, 8]])
    c.add("etch::rms_norm.out", [x, c.randn([7], torch.float32), 1e-6, True],
          etch_ops.rms_norm_ref, torch.float32, [3, 8])
    c.add("etch::rms_norm_gated.out", [x, c.randn([3, 7], torch.float32),
          c.randn([8], torch.float32), 1e-6], etch_ops.rms_norm_gated_ref, torch.float32, [3, 8])


def rope(c):
    """etch::rope: partial (R < D) and full rotation, several positions and heads, and
    bad cos/sin shapes (R odd, R > D, T mismatched)."""
    for dtype in DTYPES:
        for shape, r in (([1, 3, 4, 24], 8), ([2, 2, 3, 16], 16), ([1, 1, 2, 256], 64)):
            x = c.randn(shape, dtype)
            cos, sin = c.randn([shape[1], r], dtype), c.randn([shape[1], r], dtype)
            c.add("etch::rope.out", [x, cos, sin], etch_ops.rope_ref, dtype, shape,
                  tol_for(dtype))
    x = c.randn([1, 2, 2, 8], torch.float32)
    for r, t in ((3, 2), (10, 2), (4, 3)):
        cos = c.randn([t, r], torch.float32)
        c.add("etch::rope.out", [x, cos, cos], etch_ops.rope_ref, torch.float32, [1, 2, 2, 8])


def rope_cos_sin(c):
    """etch::rope_cos_sin: one and several positions, Qwen 3.5's partial dim (64) and base
    (1e7), a small dim and base; bad dim, theta and input_pos."""
    op = "etch::rope_cos_sin.out"
    for dtype in DTYPES:
        for pos, t, dim, theta in ((0, 1, 64, 1e7), (7, 3, 8, 10000.0), (130, 1, 64, 1e7)):
            x = c.randn([1, t, 4], dtype)
            c.add(op, [torch.tensor([pos]), x, theta, dim], etch_ops.rope_cos_sin_ref, dtype,
                  [[t, dim], [t, dim]], tol_for(dtype))
    x = c.randn([1, 2, 4], torch.bfloat16)
    c.add(op, [torch.tensor([4000]), x, 1e7, 64], etch_ops.rope_cos_sin_ref, torch.bfloat16,
          [[2, 64], [2, 64]], tol_for(torch.bfloat16))
    x = c.randn([1, 1, 4], torch.float32)
    for pos, dim, theta in (([0], 5, 1e4), ([0], 0, 1e4), ([0], 8, 0.0), ([0], 8, -2.0),
                            ([0, 1], 8, 1e4)):
        c.add(op, [torch.tensor(pos), x, theta, dim], etch_ops.rope_cos_sin_ref, torch.float32,
              [[1, abs(dim)], [1, abs(dim)]])


def gated_attention(c):
    """etch::gated_attention: decode with key splits (the combine kernel stores), one split
    (the forward kernels store, row and head-group paths), several tokens, and a gate that
    is not shaped like q."""
    op = "etch::gated_attention.out"

    def one(dtype, B, T, Hq, Hkv, D, S, pos, gate_shape=None):
        q = c.randn([B, T, Hq, D], dtype)
        args = [
            q, c.randn([B, T, Hkv, D], dtype), c.randn([B, T, Hkv, D], dtype),
            Inplace(c.randn([B, S, Hkv, D], dtype)), Inplace(c.randn([B, S, Hkv, D], dtype)),
            torch.tensor([pos]), 1.0 / math.sqrt(D), c.randn(gate_shape or [B, T, Hq, D], dtype, 2.0),
        ]
        c.add(op, args, etch_ops.gated_attention_ref, dtype, [B, T, Hq, D], tol_for(dtype))

    for dtype in DTYPES:
        one(dtype, 1, 1, 4, 2, 8, 20, 14)  # key splits + combine
        one(dtype, 1, 3, 4, 1, 8, 12, 5)   # several tokens
    one(torch.bfloat16, 1, 1, 2, 1, 256, 4, 2)  # 16-byte rows
    one(torch.float32, 1, 32, 8, 4, 4, 32, 0)   # one split (256 rows), heads by KV group
    one(torch.float32, 1, 1, 2, 1, 8, 6, 2, gate_shape=[1, 1, 2, 4])


def qk_norm_rope(c):
    """etch::qk_norm_rope: partial and full rotation, several tokens and heads, Qwen 3.5's
    head size (256, R 64), without the unit offset; qg not [.., 2D], R odd, a bad weight."""
    op = "etch::qk_norm_rope.out"

    def one(dtype, B, T, Hq, Hkv, D, R, unit=True, q_last=None, wk=None):
        qg = c.randn([B, T, Hq, q_last or 2 * D], dtype)
        k = c.randn([B, T, Hkv, D], dtype)
        wq, wkk = c.randn([D], dtype, 0.5), c.randn([wk or D], dtype, 0.5)
        cos, sin = c.randn([T, R], dtype), c.randn([T, R], dtype)
        c.add(op, [qg, k, wq, wkk, 1e-6, unit, cos, sin], etch_ops.qk_norm_rope_ref, dtype,
              [[B, T, Hq, D], [B, T, Hq, D], [B, T, Hkv, D]], tol_for(dtype))

    for dtype in DTYPES:
        one(dtype, 1, 1, 4, 2, 8, 4)
        one(dtype, 2, 3, 2, 1, 16, 16, unit=False)
    one(torch.bfloat16, 1, 1, 4, 1, 256, 64)
    one(torch.float32, 1, 1, 2, 1, 8, 4, q_last=12)
    one(torch.float32, 1, 1, 2, 1, 8, 3)
    one(torch.float32, 1, 1, 2, 1, 8, 4, wk=7)


def cases(tensor_json, out_json, tol):
    """Every etch:: case, as table entries."""
    c = Case(tensor_json, out_json, tol)
    gdn(c)
    moe(c)
    attention(c)
    sample(c)
    norms(c)
    rope(c)
    rope_cos_sin(c)
    gated_attention(c)
    qk_norm_rope(c)
    return c.cases
