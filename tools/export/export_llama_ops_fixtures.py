#!/usr/bin/env python3
"""Export fixtures for ExecuTorch's LLM custom ops (`llama::update_cache`,
`llama::custom_sdpa`, `llama::sdpa_with_kv_cache`).

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

Usage:  /work/venv/bin/python tools/export/export_llama_ops_fixtures.py
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
    ep = torch.export.export(model, tuple(example), dynamic_shapes=tuple(dyn))
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

    tol = TOL[dtype]
    cases = []
    pos = 0
    kc = np.zeros((batch, max_seq, kv_heads, dim))
    vc = np.zeros_like(kc)
    worst_eager = worst_ref = 0.0
    for ci, s in enumerate(steps):
        x = inputs(s, pos)
        got = method.execute(x)
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
        ins, outs = [], []
        for k, t in enumerate(x):
            p = f"{name}/forward_{ci}_in{k}.npy"
            np.save(os.path.join(OUT_DIR, p), to_numpy(t))
            ins.append(p)
        for k, t in enumerate(got):
            p = f"{name}/forward_{ci}_out{k}.npy"
            np.save(os.path.join(OUT_DIR, p), to_numpy(t))
            outs.append(p)
        cases.append(dict(
            method="forward",
            inputs=ins,
            input_dtypes=[DTYPE_NAMES[t.dtype] for t in x],
            expected=outs,
            output_dtypes=[DTYPE_NAMES[t.dtype] for t in got],
            **tol,
        ))
        pos += s
    ref_tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert worst_ref <= ref_tol, (name, worst_ref)
    assert worst_eager <= (0 if dtype == torch.float32 else ref_tol), (name, worst_eager)
    print(f"{name}: ops {ops}; runtime vs eager max |diff| {worst_eager:.3g}, "
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
    os.makedirs(OUT_DIR, exist_ok=True)
    built: List[Dict[str, Any]] = [
        build("custom_sdpa_causal", "split"),
        build("sdpa_with_kv_cache", "fused", seed=1),
        build("custom_sdpa_noncausal", "split", batch=2, causal=False, scale=0.3,
              heads=6, kv_heads=3, seed=2),
        build("custom_sdpa_mask", "split", causal=False, mask=True, heads=4, kv_heads=1, seed=3),
        build("sdpa_with_kv_cache_mha", "fused", heads=2, kv_heads=2, dim=16,
              steps=(1, 1, 4, 2), seed=4),
        build("custom_sdpa_bf16", "split", dtype=torch.bfloat16, seed=5),
        build("custom_sdpa_f16", "split", dtype=torch.float16, seed=6),
    ]
    # Keep the entries other scripts wrote (tiny_llama from export_tiny_llama.py).
    mpath = os.path.join(OUT_DIR, "manifest.json")
    names = {b["name"] for b in built}
    kept = json.load(open(mpath)) if os.path.exists(mpath) else []
    manifest = built + [m for m in kept if m["name"] not in names]
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(OUT_DIR) for fn in fns)
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
