#!/usr/bin/env python3
"""Export fixtures for ExecuTorch's LLM custom ops (`llama::update_cache`,
`llama::custom_sdpa`, `llama::sdpa_with_kv_cache`, and the quantized KV-cache recipe's
`llama::custom_quantized_sdpa` with `quantized_decomposed::` per-token quantization).

Each fixture is a tiny module that keeps K/V caches in mutable buffers and calls the ops
directly, the way `export_llm` programs do (start_pos read from an int64 `input_pos`
tensor, a dynamic sequence length). It is exported with
  torch.export.export -> to_edge(_check_ir_validity=False) -> to_executorch()
and run for several calls (a prefill, decode steps, a second chunk) on ONE loaded method
of ExecuTorch's own runtime (`executorch.runtime.Runtime`; the pip wheel's runtime holds
the `llama::` kernels once `custom_ops` is imported), so the caches carry state. Those
outputs are the expected values. They are also checked against PyTorch eager running the
same module (the ops' ATen kernels from the wheel) and, for f32, against a NumPy
reference of the math documented in docs/OPS.md.

Writes tests/fixtures/llama_ops/<name>/{model.pte, <case>_in<k>.npy, <case>_out<k>.npy}
and its entries in tests/fixtures/llama_ops/manifest.json (the format of
tests/fixtures/manifest.json; other entries, such as tools/export/export_tiny_llama.py's,
are kept).

Usage:  /work/venv/bin/python tools/export/export_llama_ops_fixtures.py [NAME ...]
(only the named fixtures are rebuilt when names are given)
"""

from __future__ import annotations

import json
import math
import os
import shutil
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (registers llama::)
from executorch.exir import EdgeCompileConfig, to_edge
from executorch.runtime import Runtime

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "llama_ops")

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int8: "int8",
    torch.float64: "float64",
}
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}


class CacheAttention(torch.nn.Module):
    """q/k/v [B, S, H(kv), D] -> attention over mutable caches [B, MAX, Hkv, D].

    mode "split": update_cache(k), update_cache(v), custom_sdpa;
    mode "fused": sdpa_with_kv_cache. Returns (attention, k_cache copy, v_cache copy).
    """

    def __init__(self, mode, batch, max_seq, heads, kv_heads, dim, dtype, causal, scale, mask):
        super().__init__()
        self.mode, self.max_seq = mode, max_seq
        self.causal, self.scale, self.mask = causal, scale, mask
        shape = (batch, max_seq, kv_heads, dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def forward(self, q, k, v, input_pos, attn_mask: Optional[torch.Tensor] = None):
        start = input_pos[-1].item()
        seq = q.size(1)
        torch._check_is_size(start)
        torch._check(start < self.max_seq)
        torch._check(start + seq <= self.max_seq)
        if self.mode == "fused":
            out = torch.ops.llama.sdpa_with_kv_cache(
                q, k, v, self.k_cache, self.v_cache, start, seq,
                attn_mask, 0.0, self.causal, self.scale,
            )
        else:
            torch.ops.llama.update_cache(k, self.k_cache, start)
            torch.ops.llama.update_cache(v, self.v_cache, start)
            out = torch.ops.llama.custom_sdpa(
                q, self.k_cache, self.v_cache, start, attn_mask, 0.0, self.causal, self.scale
            )
        return out, self.k_cache.clone(), self.v_cache.clone()


def reference(q, kc, vc, start, causal, scale, mask):
    """NumPy attention as documented in docs/OPS.md (f64)."""
    b, s, h, d = q.shape
    max_seq, hk = kc.shape[1], kc.shape[2]
    group = h // hk
    kv_len = max_seq if mask is not None else start + s
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    out = np.zeros(q.shape, np.float64)
    for bi in range(b):
        for hi in range(h):
            kh = hi // group
            for r in range(s):
                n = min(start + r + 1, kv_len) if causal else kv_len
                sc = kc[bi, :n, kh, :] @ q[bi, r, hi, :] * scale
                if mask is not None:
                    sc = sc + mask[r, :n]
                p = np.exp(sc - sc.max())
                out[bi, r, hi, :] = (p / p.sum()) @ vc[bi, :n, kh, :]
    return out


def load_quantized_kernels() -> None:
    """Registers ExecuTorch's `quantized_decomposed::` CPU kernels in the runtime of the
    wheel (its pybindings lack them; the wheel's libexecutorch_kernels_quantized.so
    registers them into the shared libexecutorch.so when loaded), and their out variants
    in PyTorch."""
    import ctypes
    import executorch.extension.pybindings as pb
    import executorch.kernels.quantized  # noqa: F401  (the .out schemas, for to_executorch)

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(pb.__path__[0]))))
    ctypes.CDLL(os.path.join(root, "executorch", "lib", "libexecutorch_kernels_quantized.so"),
                mode=ctypes.RTLD_GLOBAL)


def quantize(x):
    """The recipe's per-token int8 quantization (QuantizedKVCache._quantize)."""
    s, z = torch.ops.quantized_decomposed.choose_qparams_per_token_asymmetric.default(x, torch.int8)
    q = torch.ops.quantized_decomposed.quantize_per_token(x, s, z, -128, 127, torch.int8)
    return q, s, z


class QuantizedCacheAttention(torch.nn.Module):
    """The quantized KV-cache recipe's attention (examples/models/llama/source_transformation
    custom_kv_cache.QuantizedKVCache + sdpa.QuantizedSDPA) on q/k/v [B, S, H(kv), D]:
    per-token int8 quantization of k and v into int8 caches with f32 scale and int8
    zero-point caches (llama::update_cache), then llama::custom_quantized_sdpa over the
    quantized query. Returns (attention, k_cache, k_scales, k_zero_points copies)."""

    def __init__(self, batch, max_seq, kv_heads, dim, mask):
        super().__init__()
        self.max_seq, self.mask = max_seq, mask
        shape, qshape = (batch, max_seq, kv_heads, dim), (batch, max_seq, kv_heads, 1)
        for n in "kv":
            self.register_buffer(f"{n}_cache", torch.zeros(shape, dtype=torch.int8), persistent=False)
            self.register_buffer(f"{n}_scales", torch.ones(qshape), persistent=False)
            self.register_buffer(f"{n}_zps", torch.ones(qshape, dtype=torch.int8), persistent=False)

    def forward(self, q, k, v, input_pos, attn_mask: Optional[torch.Tensor] = None):
        start = input_pos[-1].item()
        seq = q.size(1)
        torch._check_is_size(start)
        torch._check(start < self.max_seq)
        torch._check(start + seq <= self.max_seq)
        for x, c, sc, zp in ((k, self.k_cache, self.k_scales, self.k_zps),
                             (v, self.v_cache, self.v_scales, self.v_zps)):
            xq, s, z = quantize(x)
            torch.ops.llama.update_cache(xq, c, start)
            torch.ops.llama.update_cache(s.to(torch.float32), sc, start)
            torch.ops.llama.update_cache(z.to(torch.int8), zp, start)
        qq, qs, qz = quantize(q)
        out = torch.ops.llama.custom_quantized_sdpa(
            qq, self.k_cache, self.v_cache, 0 if self.mask else start, attn_mask, 0.0,
            not self.mask, None, qz.to(torch.int8), qs.to(torch.float32),
            self.k_zps, self.k_scales, self.v_zps, self.v_scales,
        )
        return out, self.k_cache.clone(), self.k_scales.clone(), self.k_zps.clone()


class PerToken(torch.nn.Module):
    """choose_qparams_per_token_asymmetric then quantize_per_token: (scales, zero points,
    int8 values)."""

    def forward(self, x):
        q, s, z = quantize(x)
        return s, z, q


def export_and_run(name, model, example, dyn, calls):
    """Exports `model`, writes model.pte and one case per input tuple in `calls` (run in
    order on one loaded method of ExecuTorch's runtime); returns the cases and outputs."""
    ep = torch.export.export(model, tuple(example), dynamic_shapes=dyn)
    prog = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    ops = sorted({str(n.target) for n in prog.exported_program().graph.nodes
                  if n.op == "call_function" and hasattr(n.target, "_schema")})
    fdir = os.path.join(OUT_DIR, name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    os.makedirs(fdir)
    with open(os.path.join(fdir, "model.pte"), "wb") as f:
        f.write(prog.buffer)
    method = Runtime.get().load_program(prog.buffer).load_method("forward")
    cases, results = [], []
    for ci, x in enumerate(calls):
        got = method.execute(x)
        results.append(got)
        ins, outs = [], []
        for k, t in enumerate(x):
            p = f"{name}/forward_{ci}_in{k}.npy"
            np.save(os.path.join(OUT_DIR, p), to_numpy(t))
            ins.append(p)
        for k, t in enumerate(got):
            p = f"{name}/forward_{ci}_out{k}.npy"
            np.save(os.path.join(OUT_DIR, p), to_numpy(t))
            outs.append(p)
        cases.append(dict(method="forward", inputs=ins,
                          input_dtypes=[DTYPE_NAMES[t.dtype] for t in x], expected=outs,
                          output_dtypes=[DTYPE_NAMES[t.dtype] for t in got]))
    print(f"{name}: ops {ops}")
    return cases, results


def build_quantized(name, *, batch=1, max_seq=16, heads=4, kv_heads=2, dim=8, mask=False,
                    steps=(5, 1, 1, 3), seed=0) -> Dict[str, Any]:
    torch.manual_seed(seed)
    model = QuantizedCacheAttention(batch, max_seq, kv_heads, dim, mask).eval()
    eager = QuantizedCacheAttention(batch, max_seq, kv_heads, dim, mask).eval()
    S = torch.export.Dim("S", min=1, max=max_seq)

    def inputs(s, pos):
        x = [torch.randn(batch, s, heads, dim), torch.randn(batch, s, kv_heads, dim),
             torch.randn(batch, s, kv_heads, dim), torch.tensor([pos], dtype=torch.int64)]
        if mask:
            m = torch.randn(s, max_seq)
            m[:, ::5] = -1e4
            x.append(m)
        return x

    calls, pos = [], 0
    for s in steps:
        calls.append(inputs(s, pos))
        pos += s
    dyn = tuple([{1: S}, {1: S}, {1: S}, None] + ([{0: S}] if mask else []))
    cases, results = export_and_run(name, model, inputs(3, 0), dyn, calls)
    # PyTorch's eager per-token ops round differently from ExecuTorch's kernels (the
    # expected values are the runtime's), so eager is only a sanity check here.
    worst, cache_diff = 0.0, 0
    for x, got, case in zip(calls, results, cases):
        exp = eager(*x)
        cache_diff += sum(int((g.float() - e.float()).abs().gt(0).sum()) for g, e in zip(got[1:], exp[1:]))
        worst = max(worst, float((got[0] - exp[0]).abs().max()))
        case.update(rtol=1e-4, atol=1e-5)
    assert mask or worst <= 0.05, (name, worst)
    print(f"{name}: runtime vs eager attention max |diff| {worst:.3g}, "
          f"{cache_diff} cache entries differ")
    return dict(
        name=name, pte=f"{name}/model.pte",
        comment=(f"quantized KV cache (per-token int8 k/v/q, update_cache, custom_quantized_sdpa): "
                 f"batch {batch}, cache {max_seq} positions, {heads}/{kv_heads} heads, head_dim {dim}, "
                 f"mask={mask}; cases run in order on one method (seq lens {list(steps)}); outputs: "
                 f"attention, k_cache, k scales, k zero points; expected = ExecuTorch runtime"),
        cases=cases,
    )


def build_per_token(name) -> Dict[str, Any]:
    torch.manual_seed(7)
    x = torch.randn(2, 6, 16) * 3
    x[0, 0] = 0.0                       # all zeros: scale 0.1
    x[0, 1] = torch.rand(16) + 0.5      # all positive: min extended to 0
    x[0, 2] = -(torch.rand(16) + 0.5)   # all negative
    x[0, 3] = torch.randn(16) * 1e-4    # tiny: the small-scale cut-off
    x[0, 4] = torch.rand(16) * 1e-4     # tiny, positive
    x[1, 0, 3] = 1e6                    # one outlier
    y = torch.randn(2, 5, 16) * 0.01
    D = torch.export.Dim("T", min=1, max=64)
    cases, results = export_and_run(name, PerToken(), [x], ({1: D},), [[x], [y]])
    for inp, got, case in zip([x, y], results, cases):
        exp = PerToken()(inp)
        print(f"{name}: zero points differ from eager at {int((got[1] != exp[1]).sum())}, "
              f"values at {int((got[2] != exp[2]).sum())} of {got[2].numel()}")
        case.update(rtol=0.0, atol=0.0)
    return dict(name=name, pte=f"{name}/model.pte",
                comment=("quantized_decomposed::choose_qparams_per_token_asymmetric + quantize_per_token "
                         "(int8) on rows with zeros, one sign, tiny values and an outlier; outputs: "
                         "scales (f64), zero points (int64), int8 values; expected = ExecuTorch runtime, exact"),
                cases=cases)


class QuantEmbedding(torch.nn.Module):
    """`quantized_decomposed::embedding_byte` / `embedding_4bit` (`.dtype` variant, as
    export_llm's embedding_quantize leaves them) on constant quantized tables."""

    def __init__(self, bits, rows, dim, groups, zero_points, dtype):
        super().__init__()
        qmin, qmax = (-128, 127) if bits == 8 else (-8, 7)
        w = torch.randint(qmin, qmax + 1, (rows, dim), dtype=torch.int8)
        if bits == 4:
            u = (w + 8).to(torch.uint8)
            w = (u[:, ::2] << 4) | u[:, 1::2]
        self.register_buffer("w", w)
        shape = (rows,) if groups == 1 else (rows, groups)
        self.register_buffer("s", (torch.rand(shape) * 0.05 + 0.01).to(dtype))
        self.register_buffer("z", torch.randint(-3, 4, shape).to(dtype) if zero_points else None)
        self.bits, self.qmin, self.qmax, self.dtype = bits, qmin, qmax, dtype

    def forward(self, idx):
        op = (torch.ops.quantized_decomposed.embedding_byte if self.bits == 8
              else torch.ops.quantized_decomposed.embedding_4bit)
        return (op.dtype(self.w, self.s, self.z, self.qmin, self.qmax, idx, dtype=self.dtype),)


def build_embedding(name, bits, *, rows=20, dim=64, groups=1, zero_points=False,
                    dtype=torch.float32, seed=0) -> Dict[str, Any]:
    torch.manual_seed(seed)
    model = QuantEmbedding(bits, rows, dim, groups, zero_points, dtype).eval()
    calls = [[torch.tensor([[0, 3, rows - 1, 3, 7]])], [torch.tensor([[5]])]]
    S = torch.export.Dim("S", min=1, max=16)
    cases, results = export_and_run(name, model, calls[0], ({1: S},), calls)
    for x, got, case in zip(calls, results, cases):
        exp = model(*x)[0]
        worst = float((got[0].float() - exp.float()).abs().max())
        assert worst <= 1e-6 * (1 if dtype == torch.float32 else 1e4), (name, worst)
        case.update(rtol=0.0, atol=0.0)
    return dict(name=name, pte=f"{name}/model.pte",
                comment=(f"quantized_decomposed::embedding_{'byte' if bits == 8 else '4bit'}.dtype_out: "
                         f"{rows}x{dim} table, {groups} group(s) a row, zero points={zero_points}, "
                         f"out {DTYPE_NAMES[dtype]}; expected = ExecuTorch runtime, exact"),
                cases=cases)


class GatedDeltaRule(torch.nn.Module):
    """`llama::gated_delta_rule` (or its deprecated alias `channelwise_gated_delta_rule`)
    over a recurrent state kept in a mutable buffer [B, Hs, K, V], as the Qwen 3.5 example
    calls it: q [B, Hq, T, K], k [B, Hs, T, K], v [B, Hs, T, V], decay [B, Hs, T(, K)],
    beta [B, Hs, T]. Returns (output, final_state)."""

    def __init__(self, batch, state_heads, k_dim, v_dim, alias):
        super().__init__()
        self.alias = alias
        self.register_buffer("state", torch.zeros(batch, state_heads, k_dim, v_dim),
                             persistent=False)

    def forward(self, q, k, v, decay, beta):
        op = (torch.ops.llama.channelwise_gated_delta_rule if self.alias
              else torch.ops.llama.gated_delta_rule)
        out, state = op(q, k, v, decay, beta, self.state)
        self.state.copy_(state)
        return out, state


def gdr_reference(q, k, v, decay, beta, state):
    """NumPy (f64) delta rule as documented in docs/OPS.md; updates `state` in place."""
    group = q.shape[1] // k.shape[1]
    out = np.zeros(q.shape[:3] + (v.shape[3],))
    if decay.ndim == 3:
        decay = np.broadcast_to(decay[..., None], k.shape)
    for t in range(q.shape[2]):
        state *= decay[:, :, t, :, None]
        pred = np.einsum("bhkv,bhk->bhv", state, k[:, :, t])
        delta = (v[:, :, t] - pred) * beta[:, :, t, None]
        state += k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = np.einsum("bhkv,bhk->bhv", np.repeat(state, group, axis=1), q[:, :, t])
    return out


def build_gdr(name, *, batch=1, heads=2, state_heads=2, k_dim=8, v_dim=6, channelwise=True,
              alias=False, steps=(5, 1, 3), seed=0) -> Dict[str, Any]:
    torch.manual_seed(seed)
    model = GatedDeltaRule(batch, state_heads, k_dim, v_dim, alias).eval()
    T = torch.export.Dim("T", min=1, max=64)

    def inputs(t):
        k = torch.nn.functional.normalize(torch.randn(batch, state_heads, t, k_dim), dim=-1)
        dshape = (batch, state_heads, t) + ((k_dim,) if channelwise else ())
        return [torch.randn(batch, heads, t, k_dim) / math.sqrt(k_dim), k,
                torch.randn(batch, state_heads, t, v_dim),
                torch.rand(dshape) * 0.6 + 0.4,            # decay, already exponentiated
                torch.sigmoid(torch.randn(batch, state_heads, t))]

    calls = [inputs(t) for t in steps]
    dyn = tuple({2: T} for _ in range(5))
    cases, results = export_and_run(name, model, inputs(3), dyn, calls)
    state = np.zeros((batch, state_heads, k_dim, v_dim))
    worst = 0.0
    for x, got, case in zip(calls, results, cases):
        r = gdr_reference(*[to_numpy(t).astype(np.float64) for t in x], state)
        worst = max(worst, float(np.abs(to_numpy(got[0]) - r).max()),
                    float(np.abs(to_numpy(got[1]) - state).max()))
        case.update(rtol=1e-4, atol=1e-5)
    assert worst <= 1e-5, (name, worst)
    print(f"{name}: runtime vs numpy reference max |diff| {worst:.3g}")
    op = "channelwise_gated_delta_rule" if alias else "gated_delta_rule"
    return dict(
        name=name, pte=f"{name}/model.pte",
        comment=(f"llama::{op}: batch {batch}, {heads} query / {state_heads} state heads, "
                 f"K {k_dim}, V {v_dim}, {'channelwise' if channelwise else 'scalar'} decay; the "
                 f"state in a mutable buffer, cases run in order on one method (T = {list(steps)}); "
                 f"outputs: output, final_state; expected = ExecuTorch runtime"),
        cases=cases,
    )


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.detach().numpy()


def build(name, mode, *, batch=1, max_seq=16, heads=4, kv_heads=2, dim=8,
          dtype=torch.float32, causal=True, scale=None, mask=False,
          steps=(5, 1, 1, 3), seed=0) -> Dict[str, Any]:
    torch.manual_seed(seed)
    args = (mode, batch, max_seq, heads, kv_heads, dim, dtype, causal, scale, mask)
    model = CacheAttention(*args).eval()
    eager = CacheAttention(*args).eval()
    S = torch.export.Dim("S", min=1, max=max_seq)

    def inputs(s, pos):
        x = [
            torch.randn(batch, s, heads, dim).to(dtype),
            torch.randn(batch, s, kv_heads, dim).to(dtype),
            torch.randn(batch, s, kv_heads, dim).to(dtype),
            torch.tensor([pos], dtype=torch.int64),
        ]
        if mask:
            m = torch.randn(s, max_seq)
            # Mask out a few keys per row (large negative, finite as real masks often are,
            # and -inf for one key).
            m[:, ::5] = -1e4
            m[0, 1] = float("-inf")
            x.append(m.to(dtype))
        return x

    example = inputs(3, 0)
    dyn = [{1: S}, {1: S}, {1: S}, None] + ([{0: S}] if mask else [])
    calls, pos = [], 0
    for s in steps:
        calls.append(inputs(s, pos))
        pos += s
    cases, results = export_and_run(name, model, example, tuple(dyn), calls)
    for c in cases:
        c.update(TOL[dtype])
    pos = 0
    kc = np.zeros((batch, max_seq, kv_heads, dim))
    vc = np.zeros_like(kc)
    worst_eager = worst_ref = 0.0
    for ci, (s, x, got) in enumerate(zip(steps, calls, results)):
        exp = eager(*x)
        for g, e in zip(got, exp):
            assert g.dtype == e.dtype and g.shape == e.shape, (name, ci)
            worst_eager = max(worst_eager, float((g.float() - e.float()).abs().max()))
        kc[:, pos:pos + s] = to_numpy(x[1])
        vc[:, pos:pos + s] = to_numpy(x[2])
        r = reference(to_numpy(x[0]).astype(np.float64), kc, vc, pos, causal, scale,
                      to_numpy(x[4]).astype(np.float64) if mask else None)
        worst_ref = max(worst_ref, float(np.abs(to_numpy(got[0]) - r).max()))
        np.testing.assert_allclose(to_numpy(got[1]), kc, rtol=0, atol=0)
        pos += s
    ref_tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert worst_ref <= ref_tol, (name, worst_ref)
    assert worst_eager <= (0 if dtype == torch.float32 else ref_tol), (name, worst_eager)
    print(f"{name}: runtime vs eager max |diff| {worst_eager:.3g}, "
          f"vs numpy reference {worst_ref:.3g}")
    return dict(
        name=name,
        pte=f"{name}/model.pte",
        comment=(f"{mode}: batch {batch}, cache {max_seq} positions, {heads} heads / {kv_heads} kv heads, "
                 f"head_dim {dim}, {DTYPE_NAMES[dtype]}, causal={causal}, scale={scale}, mask={mask}; "
                 f"cases run in order on one loaded method (seq lens {list(steps)}); outputs: "
                 f"attention, k_cache copy, v_cache copy; expected = ExecuTorch runtime"),
        cases=cases,
    )


def main() -> None:
    import sys
    # Optional fixture names to (re)build; the others are left as they are.
    only = set(sys.argv[1:])
    os.makedirs(OUT_DIR, exist_ok=True)
    load_quantized_kernels()
    todo = [
        ("custom_sdpa_causal", lambda n: build(n, "split")),
        ("sdpa_with_kv_cache", lambda n: build(n, "fused", seed=1)),
        ("custom_sdpa_noncausal", lambda n: build(n, "split", batch=2, causal=False, scale=0.3,
                                                  heads=6, kv_heads=3, seed=2)),
        ("custom_sdpa_mask", lambda n: build(n, "split", causal=False, mask=True, heads=4,
                                             kv_heads=1, seed=3)),
        ("sdpa_with_kv_cache_mha", lambda n: build(n, "fused", heads=2, kv_heads=2, dim=16,
                                                   steps=(1, 1, 4, 2), seed=4)),
        ("custom_sdpa_bf16", lambda n: build(n, "split", dtype=torch.bfloat16, seed=5)),
        ("custom_sdpa_f16", lambda n: build(n, "split", dtype=torch.float16, seed=6)),
        ("quantize_per_token", build_per_token),
        ("custom_quantized_sdpa", lambda n: build_quantized(n, seed=7)),
        ("custom_quantized_sdpa_mask", lambda n: build_quantized(
            n, mask=True, heads=4, kv_heads=1, batch=2, dim=16, steps=(3, 1, 4), seed=8)),
        ("embedding_byte", lambda n: build_embedding(n, 8, seed=9)),
        ("embedding_byte_groups", lambda n: build_embedding(n, 8, groups=4, zero_points=True,
                                                            dtype=torch.float16, seed=10)),
        ("embedding_4bit", lambda n: build_embedding(n, 4, groups=2, seed=11)),
        ("embedding_4bit_zp", lambda n: build_embedding(n, 4, groups=4, zero_points=True, seed=12)),
        ("gated_delta_rule", lambda n: build_gdr(n, seed=13)),
        ("gated_delta_rule_scalar", lambda n: build_gdr(n, batch=2, heads=4, state_heads=2, k_dim=5,
                                                        v_dim=7, channelwise=False, steps=(5, 1, 37),
                                                        seed=14)),
        ("gated_delta_rule_gqa", lambda n: build_gdr(n, heads=6, state_heads=3, k_dim=7, v_dim=3,
                                                     steps=(1, 5, 1, 33), seed=15)),
        ("channelwise_gated_delta_rule", lambda n: build_gdr(n, batch=2, k_dim=4, v_dim=4,
                                                             alias=True, steps=(5, 1), seed=16)),
    ]
    built: List[Dict[str, Any]] = [f(n) for n, f in todo if not only or n in only]
    # Keep the entries other scripts wrote (tiny_llama from export_tiny_llama.py).
    mpath = os.path.join(OUT_DIR, "manifest.json")
    names = {b["name"] for b in built}
    kept = json.load(open(mpath)) if os.path.exists(mpath) else []
    order = [n for n, _ in todo]
    manifest = built + [m for m in kept if m["name"] not in names]
    manifest.sort(key=lambda m: order.index(m["name"]) if m["name"] in order else len(order))
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(OUT_DIR) for fn in fns)
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
