#!/usr/bin/env python3
"""The safetensors-weights fixture (tests/fixtures/weights): a small MLP exported with
external constants, so its weights are looked up by state_dict name, plus checkpoints:
    model.pte                 the program (no weights inside)
    model.safetensors         the state_dict (what `save_pretrained` / `save_file` writes)
    shards/                   the same state_dict split over two files
    missing.safetensors       without `net.2.weight`
    bad_shape.safetensors     `net.0.weight` transposed
    input.npy, expected.npy   an input and PyTorch's output

    /work/venv/bin/python tools/export/export_weights_fixture.py
"""
import os

import numpy as np
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "weights")


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.net(x))


def main():
    os.makedirs(os.path.join(OUT, "shards"), exist_ok=True)
    torch.manual_seed(0)
    m = Mlp().eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        y = m(x)
        ep = torch.export.export(m, (x,))
    prog = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
    with open(os.path.join(OUT, "model.pte"), "wb") as f:
        f.write(prog.buffer)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(OUT, "model.safetensors"))
    keys = sorted(sd)
    save_file({k: sd[k] for k in keys[: len(keys) // 2]}, os.path.join(OUT, "shards", "model-00001-of-00002.safetensors"))
    save_file({k: sd[k] for k in keys[len(keys) // 2:]}, os.path.join(OUT, "shards", "model-00002-of-00002.safetensors"))
    save_file({k: v for k, v in sd.items() if k != "net.2.weight"}, os.path.join(OUT, "missing.safetensors"))
    bad = dict(sd)
    bad["net.0.weight"] = sd["net.0.weight"].t().contiguous()
    save_file(bad, os.path.join(OUT, "bad_shape.safetensors"))
    np.save(os.path.join(OUT, "input.npy"), x.numpy())
    np.save(os.path.join(OUT, "expected.npy"), y.numpy())
    print("wrote", OUT, sorted(sd))


if __name__ == "__main__":
    main()
