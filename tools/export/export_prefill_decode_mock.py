"""Writes tests/fixtures/prefill_decode/: tiny stand-ins for etch's Qwen 3.5 program
convention, for `etch generate` tests (no real model: a rule that tests can recompute).

Each program has methods
    prefill(tokens i64[1, T], input_pos i64[1], sampling f32[4])
    decode(tokens i64[1, 1], input_pos i64[1], sampling f32[4])
sharing one mutable buffer `cache` (i64[1, 16], exported with share_mutable_buffers), into
which each call writes its tokens at input_pos. The next token is
    greedy = (sum(cache) + input_pos + T) % 16
and sampling = [temperature, top_k, top_p, u]:
- sampled.pte: returns i64[1, 1]: greedy when temperature <= 0, else floor(u * 16); prefill
  T is dynamic (1..8).
- logits.pte: returns f32[1, 16] logits, 10 at `greedy` and 0 elsewhere (the host samples);
  prefill T dynamic (1..8).
- static.pte: as sampled.pte, but prefill takes exactly T = 4 tokens.
Metadata methods: get_max_seq_len 8 (4 for static), get_max_context_len 16,
get_vocab_size 16, get_eos_ids [15], use_kv_cache, enable_dynamic_shape.

The script checks the rule against ExecuTorch's own runtime before writing.

    /work/venv/bin/python tools/export/export_prefill_decode_mock.py
"""

import os

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge
from executorch.exir.passes import MemoryPlanningPass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "prefill_decode")
V = 16
CONTEXT = 16
EOS = 15


class Mock(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits
        self.register_buffer("cache", torch.zeros(1, CONTEXT, dtype=torch.int64))

    def forward(self, tokens, input_pos, sampling):
        t = tokens.shape[1]
        pos = input_pos + torch.arange(t)
        self.cache[0, pos] = tokens[0]
        greedy = (self.cache.sum() + input_pos + t) % V
        if self.logits:
            return (torch.arange(V) == greedy).to(torch.float32).reshape(1, V) * 10.0
        drawn = torch.clamp((sampling[3] * V).floor().to(torch.int64), max=V - 1)
        return torch.where(sampling[0] > 0, drawn, greedy).reshape(1, 1)


def export(name, logits, static_prefill):
    model = Mock(logits)
    sampling = torch.tensor([0.0, 0.0, 1.0, 0.5])
    prefill_len = 4 if static_prefill else 3
    prefill_args = (torch.ones(1, prefill_len, dtype=torch.int64), torch.tensor([0]), sampling)
    dynamic = None
    if not static_prefill:
        dynamic = ({1: torch.export.Dim("T", min=1, max=8)}, None, None)
    eps = {
        "prefill": torch.export.export(model, prefill_args, dynamic_shapes=dynamic),
        "decode": torch.export.export(
            model, (torch.ones(1, 1, dtype=torch.int64), torch.tensor([3]), sampling)),
    }
    meta = {
        "get_max_seq_len": 4 if static_prefill else 8,
        "get_max_context_len": CONTEXT,
        "get_vocab_size": V,
        "get_eos_ids": [EOS],
        "use_kv_cache": True,
        "enable_dynamic_shape": not static_prefill,
    }
    prog = to_edge(eps, constant_methods=meta).to_executorch(
        ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True)))
    path = os.path.join(OUT, f"{name}.pte")
    with open(path, "wb") as f:
        f.write(prog.buffer)
    return path


def rule(prompt, n):
    """Greedy ids by the rule (no EOS stop)."""
    cache = list(prompt)
    out = []
    nxt = (sum(cache) + len(cache)) % V
    for _ in range(n):
        out.append(nxt)
        cache.append(nxt)
        nxt = (sum(cache) + len(cache)) % V
    return out


def check(path, static_prefill, logits):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path)
    prefill, decode = program.load_method("prefill"), program.load_method("decode")
    greedy = torch.tensor([0.0, 0.0, 1.0, 0.0])
    prompt = [3, 1, 4, 1] if static_prefill else [3, 1, 4]
    out = prefill.execute([torch.tensor([prompt]), torch.tensor([0]), greedy])[0]
    got = [int(out.argmax()) if logits else int(out[0, 0])]
    pos = len(prompt)
    for _ in range(5):
        out = decode.execute([torch.tensor([[got[-1]]]), torch.tensor([pos]), greedy])[0]
        got.append(int(out.argmax()) if logits else int(out[0, 0]))
        pos += 1
    want = rule(prompt, 6)
    assert got == want, (path, got, want)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, logits, static in [
        ("sampled", False, False), ("logits", True, False), ("static", False, True)
    ]:
        path = export(name, logits, static)
        check(path, static, logits)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
