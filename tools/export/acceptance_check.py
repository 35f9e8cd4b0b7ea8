"""Exports a spread of small models of the fixture kinds (MLPs, CNNs, transformers, token
models, stateful and dynamic models) into a temporary directory, runs each through
`etch run`, and compares with PyTorch eager. A development check for operator coverage;
CI runs the committed fixtures instead.

    venv/bin/python tools/export/acceptance_check.py [--etch target/release/etch] [--keep DIR]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from executorch.exir import to_edge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Act(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def models():
    torch.manual_seed(0)
    yield "mlp_silu_logsoftmax", nn.Sequential(nn.Linear(12, 24), nn.SiLU(), nn.Linear(24, 6), nn.LogSoftmax(-1)), (torch.randn(3, 12),)
    yield "mlp_tanh_sigmoid", nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.Sigmoid()), (torch.randn(2, 5),)
    yield "mlp_gelu_tanh", nn.Sequential(nn.Linear(8, 8), nn.GELU(approximate="tanh"), nn.LayerNorm(8)), (torch.randn(4, 8),)
    yield "mlp_leaky_elu_hardswish", nn.Sequential(nn.Linear(6, 6), nn.LeakyReLU(0.1), nn.Linear(6, 6), nn.ELU(), nn.Hardswish(), nn.ReLU6()), (torch.randn(5, 6),)
    yield "mlp_3d_batch", nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3)), (torch.randn(2, 5, 8),)
    yield "cnn_avgpool_bn", nn.Sequential(
        nn.Conv2d(3, 6, 5, stride=2, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(6, 4, 3, groups=2, bias=False), nn.Flatten(), nn.Linear(4 * 3 * 3, 5)), (torch.randn(2, 3, 20, 20),)
    yield "cnn_depthwise_dilated", nn.Sequential(
        nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4), nn.Hardtanh(), nn.Conv2d(4, 8, 1),
        nn.MaxPool2d(3, stride=2, padding=1), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Softmax(-1)), (torch.randn(1, 4, 15, 15),)
    yield "cnn1d", nn.Sequential(nn.Conv1d(3, 5, 3, padding=1), nn.BatchNorm1d(5), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(), nn.Linear(5 * 8, 2)), (torch.randn(2, 3, 16),)
    yield "cnn_ceil_pool", nn.Sequential(nn.Conv2d(2, 3, 3), nn.MaxPool2d(2, ceil_mode=True), nn.Sigmoid()), (torch.randn(1, 2, 10, 10),)
    yield "transformer_enc2", nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, activation="gelu", norm_first=True), 2, enable_nested_tensor=False), (torch.randn(1, 5, 16),)
    yield "mha", Act(lambda x, m=nn.MultiheadAttention(12, 3, batch_first=True).eval(): m(x, x, x)[0]), (torch.randn(2, 4, 12),)
    yield "token_lm", TokenLM(), (torch.randint(0, 40, (2, 7)),)
    yield "stateful_counter", Counter(), (torch.randn(3),)


class TokenLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 12)
        self.ln = nn.LayerNorm(12)
        self.head = nn.Linear(12, 40, bias=False)

    def forward(self, tokens):
        h = self.ln(self.emb(tokens))
        logits = self.head(h)
        probs = F.softmax(logits, -1)
        return logits.argmax(-1), torch.topk(probs, 3, dim=-1).values, logits.max(dim=-1).values


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(3))

    def forward(self, x):
        self.n.add_(1.0)
        return x * self.n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--etch", default=os.path.join(ROOT, "target/release/etch"))
    ap.add_argument("--keep")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="etch-accept-")
    os.makedirs(work, exist_ok=True)
    failures = 0
    for name, model, inputs in models():
        model.eval()
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        try:
            ep = torch.export.export(model, inputs)
            prog = to_edge(ep).to_executorch()
            with open(os.path.join(d, "model.pte"), "wb") as f:
                f.write(prog.buffer)
        except Exception as e:  # noqa: BLE001
            print(f"SKIP {name}: export failed: {e}")
            continue
        with torch.no_grad():
            expected = model(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        cmd = [args.etch, "run", os.path.join(d, "model.pte"), "--output-dir", d]
        for i, x in enumerate(inputs):
            p = os.path.join(d, f"in{i}.npy")
            np.save(p, x.numpy())
            cmd += ["--input", p]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {name}: {r.stderr.strip()}")
            failures += 1
            continue
        worst = 0.0
        ok = True
        for i, e in enumerate(expected):
            got = np.load(os.path.join(d, f"output_{i}.npy"))
            e = e.numpy()
            if got.shape != e.shape:
                ok = False
                print(f"FAIL {name}: output {i} shape {got.shape} vs {e.shape}")
                break
            if e.dtype.kind in "iub":
                ok &= bool((got == e).all())
            else:
                diff = np.abs(got.astype(np.float64) - e.astype(np.float64))
                worst = max(worst, float(diff.max(initial=0)))
                ok &= bool((diff <= 1e-4 + 1e-3 * np.abs(e)).all())
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max diff {worst:.2e}")
        failures += 0 if ok else 1
    print(f"{failures} failure(s); files in {work}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
