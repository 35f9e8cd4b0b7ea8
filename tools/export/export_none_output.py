#!/usr/bin/env python3
"""A program whose method returns None (and one returning an Int beside a tensor):
ExecuTorch's test module ModuleSharedState's `set_state` has this shape of output.

    /work/venv/bin/python tools/export/export_none_output.py
writes tests/fixtures/none_output/model.pte with methods
    set_state(x f32[2]) -> None      (writes the state buffer)
    get_state()         -> f32[2]    (reads it)
"""
import os

import torch
from executorch.exir import to_edge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "none_output", "model.pte")


class SetState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(2))

    def forward(self, x):
        self.state.copy_(x)
        return None


class GetState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(2))

    def forward(self):
        return self.state + 0


def main():
    set_ep = torch.export.export(SetState(), (torch.ones(2),), strict=True)
    get_ep = torch.export.export(GetState(), (), strict=True)
    prog = to_edge({"set_state": set_ep, "get_state": get_ep}).to_executorch()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(prog.buffer)
    print(f"wrote {OUT} ({len(prog.buffer)} bytes)")


if __name__ == "__main__":
    main()
