#!/usr/bin/env python3
"""Export XNNPACK-delegated fixtures and record ExecuTorch's own outputs for them.

Every model is exported with ExecuTorch's default CPU recipe
    torch.export.export(model.eval(), args)
    -> executorch.exir.to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    -> .to_executorch()
and run with ExecuTorch's runtime from the pinned wheel (`executorch.runtime.Runtime`, whose
XNNPACK backend is linked in). Its outputs are the expected outputs; the script also checks
them against PyTorch eager (loosely) so that a broken reference is noticed.

Writes, relative to the repository root:
  tests/fixtures/xnnpack/<name>/model.pte, forward_0_in<k>.npy, forward_0_out<k>.npy
  tests/fixtures/xnnpack/manifest.json   (the format of tests/fixtures/manifest.json)

Usage:
  /work/venv/bin/python tools/export/export_xnnpack_fixtures.py [--only NAME,...]
  /work/venv/bin/python tools/export/export_xnnpack_fixtures.py --torchvision [--size 224] \
      [--etch target/release/etch]
      exports torchvision resnet18 / mobilenet_v2 / mobilenet_v3_large / efficientnet_b0 with
      random weights into target/xnnpack_models/ (not committed: too big), runs them with
      ExecuTorch and with `etch run`, and prints the largest differences.
  /work/venv/bin/python tools/export/export_xnnpack_fixtures.py --quant [--etch ...]
      the same for larger 8da4w / 8da8w linear stacks (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO_ROOT, "tests", "fixtures", "xnnpack")
TOL = dict(rtol=1e-5, atol=1e-5)
# fp16 graphs: XNNPACK's fp16 kernels and etch's (f32 accumulation) round differently.
TOL_F16 = dict(rtol=1e-2, atol=1e-2)


def perturb_batch_norm(model: nn.Module) -> None:
    """Non-trivial batch-norm statistics (fresh ones are the identity)."""
    g = torch.Generator().manual_seed(3)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.3)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.2)


# --------------------------------------------------------------------------- models


class TinyCNN(nn.Module):
    """Conv/BN/ReLU, depthwise + hardswish, squeeze-excite, residual add, max/avg pools
    (ceil mode, padding), cat, transposed conv, bilinear resize, pad, global mean, linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn2 = nn.BatchNorm2d(8)
        self.se1 = nn.Conv2d(8, 4, 1)
        self.se2 = nn.Conv2d(4, 8, 1)
        self.pw = nn.Conv2d(16, 12, 1, bias=False)
        self.dil = nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=3)
        self.up = nn.ConvTranspose2d(12, 6, 2, stride=2)
        self.fc = nn.Linear(6 + 12, 10)

    def forward(self, x):
        y = F.relu(self.bn1(self.c1(x)))
        z = F.hardswish(self.bn2(self.dw(y)))
        s = torch.sigmoid(self.se2(F.relu(self.se1(z.mean((2, 3), keepdim=True)))))
        z = z * s + y
        m = F.max_pool2d(z, 3, stride=2, padding=1, ceil_mode=True)
        a = F.avg_pool2d(z, 2)
        c = torch.cat([m[:, :, : a.shape[2], : a.shape[3]], a], 1)
        c = F.relu6(self.dil(self.pw(c)))
        u = self.up(c)
        u = F.interpolate(u, scale_factor=0.5, mode="bilinear", align_corners=False)
        u = F.pad(u, (1, 1, 1, 1))
        g = torch.cat([u.mean((2, 3), keepdim=True), c.mean((2, 3), keepdim=True)], 1)
        return self.fc(g.flatten(1))


class TinyTransformer(nn.Module):
    """One pre-norm decoder block: LayerNorm (stays a portable op), q/k/v projections,
    scaled q @ k^T with a causal mask, softmax, @ v, output projection, GELU MLP."""

    def __init__(self, d=32, heads=4, seq=8):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e4), 1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, t, self.h, self.dh).permute(0, 2, 1, 3).reshape(b * self.h, t, self.dh)
        k = k.reshape(b, t, self.h, self.dh).permute(0, 2, 3, 1).reshape(b * self.h, self.dh, t)
        v = v.reshape(b, t, self.h, self.dh).permute(0, 2, 1, 3).reshape(b * self.h, t, self.dh)
        att = torch.softmax(torch.bmm(q, k) * (self.dh**-0.5) + self.mask, dim=-1)
        o = torch.bmm(att, v).reshape(b, self.h, t, self.dh).permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + self.proj(o)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Elementwise(nn.Module):
    """Binary ops with broadcasting, unary math, clamps, slices, static pads, permutes,
    matrix products without bias and with addmm."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.w = nn.Parameter(torch.randn(16, 12, generator=g) * 0.3)
        self.b = nn.Parameter(torch.randn(12, generator=g))
        self.fc = nn.Linear(12, 16, bias=False)

    def forward(self, x, y):
        a = torch.abs(x) + 0.5
        r = torch.sqrt(a) - torch.rsqrt(a) * torch.log(a)
        r = r / (y * y + 1.0)
        r = torch.maximum(r, torch.minimum(x, y)) - torch.neg(torch.exp(torch.clamp(y, -2, 2)))
        r = r + torch.sin(x) * torch.cos(y) + torch.floor(y) - torch.ceil(x * 0.5)
        r = F.elu(r) + F.leaky_relu(x, 0.1) + torch.tanh(y) + torch.pow(x, 2) * 0.1
        m = torch.addmm(self.b, r.reshape(-1, 16), self.w)
        m = self.fc(m).reshape(x.shape)
        s = torch.cat([m[:, 1:3], m[:, :1], m[:, 3:]], 1)
        s = F.pad(s.permute(0, 2, 1), (2, 1)).permute(0, 2, 1)
        return torch.clamp(s, -3.0, 3.0), torch.sigmoid(m).softmax(-1)


class MoreNodes(nn.Module):
    """PReLU, amax over H (max pooling), padded average pooling without the padding in the
    count, plain max pooling, aligned-corner resize, a product of two activations (mm),
    squeeze/unsqueeze, hardtanh."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(4, 6, 3, padding=1)
        self.prelu = nn.PReLU(6)
        self.fc = nn.Linear(10, 6)

    def forward(self, x, m):
        y = self.prelu(self.c(x))
        a = torch.amax(y, 2, keepdim=True)
        p = F.avg_pool2d(y, 3, stride=2, padding=1, count_include_pad=False)
        q = F.max_pool2d(y, 2)
        r = F.interpolate(q, size=(5, 7), mode="bilinear", align_corners=True)
        f = self.fc(m)
        s = torch.mm(f, f.t().contiguous())
        t = F.hardtanh(s.unsqueeze(-1), -0.5, 0.5).squeeze(-1)
        return a, p, r, t


def mobilenet_v2_small():
    """torchvision's mobilenet_v2 at width 0.25, its last 1x1 conv cut from 1280 to 256
    channels (the fixture stays under 1 MB)."""
    import torchvision.models as tvm
    from torchvision.ops.misc import Conv2dNormActivation

    m = tvm.mobilenet_v2(weights=None, width_mult=0.25, num_classes=10)
    cin = m.features[-1][0].in_channels
    m.features[-1] = Conv2dNormActivation(cin, 256, kernel_size=1, activation_layer=nn.ReLU6)
    m.classifier[-1] = nn.Linear(256, 10)
    return m


def hf_decoder(kind: str):
    """A tiny HF Llama or Qwen3 causal LM returning logits (eager attention, no cache)."""
    import transformers as tf

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from export_models import HFLogits

    common = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32,
                  use_cache=False)
    if kind == "llama":
        cfg = tf.LlamaConfig(**common)
        model = tf.LlamaForCausalLM
    else:
        cfg = tf.Qwen3Config(head_dim=8, **common)
        model = tf.Qwen3ForCausalLM
    cfg._attn_implementation = "eager"
    return HFLogits(model(cfg), "logits", use_cache=False)


class LinearStack(nn.Module):
    """Linear layers with bias, ReLU and without bias: what the dynamically quantized
    recipes turn into qdint8 converts and quantized fully-connected nodes."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 96)
        self.fc2 = nn.Linear(96, 64, bias=False)
        self.fc3 = nn.Linear(64, 32)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def quantize_8da(model: nn.Module, bits: int, group_size: int) -> nn.Module:
    """export_llm's `quantization.qmode=8da4w` / `8da8w` (executorch's
    examples/models/llama/source_transformation/quantize.py): torchao's
    Int8DynamicActivationIntxWeightConfig on every Linear whose input size is a multiple of
    the group size (group size 0: per output channel)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    def filter_fn(m, fqn):
        return isinstance(m, nn.Linear) and (group_size == 0 or m.weight.shape[1] % group_size == 0)

    quantize_(
        model,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=getattr(torch, f"int{bits}"),
            weight_granularity=PerAxis(0) if group_size == 0 else PerGroup(group_size),
        ),
        filter_fn=filter_fn,
    )
    return model


# name -> (make model, inputs)
MODELS = {
    "tiny_cnn": (TinyCNN, lambda: (torch.randn(1, 3, 24, 24),)),
    "tiny_transformer": (TinyTransformer, lambda: (torch.randn(2, 8, 32),)),
    "elementwise": (Elementwise, lambda: (torch.randn(2, 4, 16), torch.randn(2, 4, 16))),
    "more_nodes": (MoreNodes, lambda: (torch.randn(1, 4, 9, 11), torch.randn(5, 10))),
    "hf_llama": (lambda: hf_decoder("llama"), lambda: (torch.randint(0, 128, (1, 12)),)),
    "hf_qwen3": (lambda: hf_decoder("qwen3"), lambda: (torch.randint(0, 128, (1, 12)),)),
    "mobilenet_v2_025": (mobilenet_v2_small, lambda: (torch.randn(1, 3, 64, 64),)),
    # Dynamically quantized activations (qdint8) with 4-bit groupwise (qbint4) and 8-bit
    # per-channel (qcint8) weights.
    "linear_8da4w": (lambda: quantize_8da(LinearStack(), 4, 32), lambda: (torch.randn(2, 5, 64),)),
    "linear_8da8w": (lambda: quantize_8da(LinearStack(), 8, 0), lambda: (torch.randn(2, 5, 64),)),
    "hf_llama_8da4w": (
        lambda: quantize_8da(hf_decoder("llama"), 4, 32),
        lambda: (torch.randint(0, 128, (1, 12)),),
    ),
    "hf_qwen3_8da4w": (
        lambda: quantize_8da(hf_decoder("qwen3"), 4, 32),
        lambda: (torch.randint(0, 128, (1, 12)),),
    ),
}

# Dynamically quantized fixtures (compared with ExecuTorch at TOL: etch does XNNPACK's
# integer and f32 arithmetic in its order).
QUANTIZED = {n for n in MODELS if "_8da" in n}


class StaticQuantCNN(nn.Module):
    """The nodes of statically quantized (qs8) vision models, quantized by
    XNNPACKQuantizer's PT2E flow: a strided conv with batch norm and ReLU, a depthwise conv
    with ReLU6, a 1x1 conv and a residual add, a grouped conv, a product, a subtraction,
    max pooling, a hardswish and a sigmoid gate (fp32 between converts, which etch runs as
    256-entry tables), the global average pooling, a concatenation and a linear layer."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.g = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.pw2 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.c1(x)))
        z = F.hardtanh(self.dw(y), 0.0, 6.0)
        z = self.pw(z) + y
        z = F.relu(self.g(z)) * z - y
        z = F.max_pool2d(z, 3, stride=2, padding=1)
        z = self.pw2(F.hardswish(z))
        z = z * torch.sigmoid(z)
        a = F.adaptive_avg_pool2d(z, 1).flatten(1)
        return self.fc(torch.cat([a, a * 0.5], 1))


class StaticQuantConvTranspose(nn.Module):
    """Statically quantized transposed convolutions (XNNPACK's deconvolution): strided,
    padded with an output padding, and dilated. (XNNPACKQuantizer leaves grouped ones in
    fp32, where a last-ulp difference can flip the next quantization.)"""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(4, 8, 3, padding=1)
        self.t1 = nn.ConvTranspose2d(8, 6, 2, stride=2)
        self.t2 = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.t3 = nn.ConvTranspose2d(4, 6, 3, padding=1)
        self.t4 = nn.ConvTranspose2d(6, 3, 3, stride=2, padding=2, dilation=2, output_padding=1)

    def forward(self, x):
        y = F.relu(self.c(x))
        y = F.relu(self.t1(y))
        y = self.t2(y)
        y = F.relu(self.t3(y))
        return self.t4(y)


def quantize_static(model: nn.Module, inputs, per_channel: bool = True) -> nn.Module:
    """XNNPACKQuantizer's PT2E flow (symmetric per-channel int8 weights, or one scale a
    tensor; int8 activations), calibrated on the inputs and two perturbed copies."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=per_channel)
    quantizer = XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    g = torch.Generator().manual_seed(1)
    for k in range(3):
        prepared(*(x + 0.3 * k * torch.randn(x.shape, generator=g) for x in inputs))
    return convert_pt2e(prepared)


# Statically quantized fixtures (quantize_static after the batch norm statistics are set).
MODELS["static_qs8_cnn"] = (StaticQuantCNN, lambda: (torch.randn(1, 3, 16, 16),))
MODELS["mobilenet_v2_025_qs8"] = (mobilenet_v2_small, lambda: (torch.randn(1, 3, 64, 64),))
MODELS["static_qs8_conv_transpose"] = (StaticQuantConvTranspose, lambda: (torch.randn(1, 4, 8, 8),))
# The qs8 nodes with one weight scale a tensor (qint8 filters, qint32 biases).
MODELS["static_qs8_per_tensor"] = (StaticQuantCNN, lambda: (torch.randn(1, 3, 16, 16),))
PER_TENSOR = {"static_qs8_per_tensor"}
STATIC_QS8 = {"static_qs8_cnn", "mobilenet_v2_025_qs8", "static_qs8_conv_transpose"} | PER_TENSOR
QUANTIZED |= STATIC_QS8


class ResNetBlock(nn.Module):
    """A resnet basic block on odd plane sizes (partial 2x2 output tiles at the bottom and
    right), then an unpadded 3x3 convolution: the 3x3 stride-1 convolutions etch runs by
    Winograd's F(2x2, 3x3) with AVX-512 (channel counts multiples of 16), the direct
    products elsewhere."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(32, 48, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(48)
        self.c2 = nn.Conv2d(48, 48, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(48)
        self.short = nn.Conv2d(32, 48, 1)
        self.c3 = nn.Conv2d(48, 32, 3)

    def forward(self, x):
        y = F.relu(self.bn1(self.c1(x)))
        y = F.relu(self.bn2(self.c2(y)) + self.short(x))
        return F.relu(self.c3(y))


class ResNetBlockPooled(ResNetBlock):
    """ResNetBlock, then the mean of each channel: as a portable program its feature maps
    are intermediates, which etch lays out channels-last (a method output pins its layout
    channels-first, and a convolution ties its input's layout to its output's)."""

    def forward(self, x):
        return super().forward(x).mean((2, 3))


MODELS["resnet_block"] = (ResNetBlock, lambda: (torch.randn(1, 32, 11, 13),))
# As a portable program (`to_edge`, no partitioner; ExecuTorch's portable kernels give the
# expected outputs), on etch's NHWC kernels.
MODELS["resnet_block_portable"] = (ResNetBlockPooled, MODELS["resnet_block"][1])
PORTABLE = {"resnet_block_portable"}


# Also exported in half precision (model and inputs `.half()`), as `<name>_fp16`.
FP16 = ["tiny_cnn_fp16", "tiny_transformer_fp16"]


# --------------------------------------------------------------------------- export


def export_xnnpack(model: nn.Module, inputs, partition: bool = True):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(model, inputs)
    partitioner = [XnnpackPartitioner()] if partition else []
    return to_edge_transform_and_lower(ep, partitioner=partitioner).to_executorch()


def run_executorch(buffer: bytes, inputs):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.detach().clone() for o in method.execute(list(inputs))]


def export_fixture(name: str) -> dict:
    half = name.endswith("_fp16")
    make, make_inputs = MODELS[name[: -len("_fp16")] if half else name]
    torch.manual_seed(0)
    model = make().eval()
    perturb_batch_norm(model)
    inputs = make_inputs()
    if name in STATIC_QS8:
        model = quantize_static(model, inputs, per_channel=name not in PER_TENSOR)
    if half:
        model = model.half()
        inputs = tuple(x.half() for x in inputs)
    prog = export_xnnpack(model, inputs, partition=name not in PORTABLE)
    outs = run_executorch(prog.buffer, inputs)
    with torch.no_grad():
        eager = model(*inputs)
    eager = eager if isinstance(eager, (tuple, list)) else (eager,)
    for i, (o, e) in enumerate(zip(outs, eager)):
        err = (o - e).abs().max().item()
        # Quantization error against eager fp32 (8-bit activations, 4-bit weights).
        tol = 2e-2 if half or name in QUANTIZED else 1e-3
        assert torch.allclose(o, e, rtol=tol, atol=tol), f"{name} output {i}: ExecuTorch vs eager {err}"
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(prog.buffer)
    case = {"method": "forward", "inputs": [], "input_dtypes": [], "expected": [], "output_dtypes": []}
    for k, x in enumerate(inputs):
        np.save(os.path.join(d, f"forward_0_in{k}.npy"), x.numpy())
        case["inputs"].append(f"{name}/forward_0_in{k}.npy")
        case["input_dtypes"].append(str(x.dtype).replace("torch.", ""))
    for k, o in enumerate(outs):
        np.save(os.path.join(d, f"forward_0_out{k}.npy"), o.numpy())
        case["expected"].append(f"{name}/forward_0_out{k}.npy")
        case["output_dtypes"].append(str(o.dtype).replace("torch.", ""))
    case.update(TOL_F16 if half else TOL)
    size = len(prog.buffer)
    print(f"{name}: {size} bytes, {len(outs)} output(s)")
    return {"name": name, "pte": f"{name}/model.pte", "cases": [case]}


# --------------------------------------------------------------------------- torchvision check


def etch_run(etch: str, pte: str, x: torch.Tensor) -> np.ndarray:
    """`etch run` of a one-input, one-output program: its output."""
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "in.npy"), x.numpy())
        subprocess.run(
            [etch, "run", pte, "--input", os.path.join(tmp, "in.npy"), "--output-dir", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return np.load(os.path.join(tmp, "output_0.npy"))


def check_torchvision(size: int, etch: str) -> int:
    import torchvision.models as tvm

    out_dir = os.path.join(REPO_ROOT, "target", "xnnpack_models")
    os.makedirs(out_dir, exist_ok=True)
    worst = 0.0
    for name in ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"]:
        torch.manual_seed(0)
        model = getattr(tvm, name)(weights=None).eval()
        perturb_batch_norm(model)
        x = torch.randn(1, 3, size, size)
        prog = export_xnnpack(model, (x,))
        pte = os.path.join(out_dir, f"{name}_{size}.xnnpack.pte")
        with open(pte, "wb") as f:
            f.write(prog.buffer)
        ref = run_executorch(prog.buffer, (x,))[0].numpy()
        got = etch_run(etch, pte, x)
        diff = np.abs(got - ref).max()
        rel = diff / max(np.abs(ref).max(), 1e-12)
        worst = max(worst, rel)
        print(f"{name} {size}x{size}: max |etch - ExecuTorch| = {diff:.3g} ({rel:.3g} of max |out|)")
    return 0 if worst < 1e-4 else 1


def check_hf(etch: str, only: list) -> int:
    """The HF models of export_models.py (tiny configs), delegated to XNNPACK."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_models

    out_dir = os.path.join(REPO_ROOT, "target", "xnnpack_models")
    os.makedirs(out_dir, exist_ok=True)
    failed = 0
    for name, make, inputs in export_models.hf_models():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        try:
            model = make().eval()
            prog = export_xnnpack(model, inputs)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: export failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        pte = os.path.join(out_dir, f"hf_{name}.xnnpack.pte")
        with open(pte, "wb") as f:
            f.write(prog.buffer)
        ref = run_executorch(prog.buffer, inputs)[0].numpy()
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [etch, "run", pte, "--output-dir", tmp]
            for k, x in enumerate(inputs):
                np.save(os.path.join(tmp, f"in{k}.npy"), x.numpy())
                cmd += ["--input", os.path.join(tmp, f"in{k}.npy")]
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"{name}: etch failed: {r.stderr.strip()[:300]}")
                failed += 1
                continue
            got = np.load(os.path.join(tmp, "output_0.npy"))
        diff = np.abs(got - ref).max()
        rel = diff / max(np.abs(ref).max(), 1e-12)
        failed += rel > 1e-4
        print(f"{name}: max |etch - ExecuTorch| = {diff:.3g} ({rel:.3g} of max |out|)")
    return 1 if failed else 0


def check_quant(etch: str) -> int:
    """Larger dynamically quantized linear stacks (k up to 512, 120 rows; 8da4w at group
    sizes 32 and 128 and per channel, 8da8w): `etch run` against ExecuTorch."""
    worst = 0.0
    for bits, group in [(4, 32), (4, 128), (4, 0), (8, 0)]:
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(512, 384), nn.ReLU(), nn.Linear(384, 256)).eval()
        quantize_8da(model, bits, group)
        x = torch.randn(3, 40, 512) * 3
        prog = export_xnnpack(model, (x,))
        ref = run_executorch(prog.buffer, (x,))[0].numpy()
        with tempfile.TemporaryDirectory() as tmp:
            pte = os.path.join(tmp, "model.pte")
            with open(pte, "wb") as f:
                f.write(prog.buffer)
            got = etch_run(etch, pte, x)
        diff = float(np.abs(got - ref).max())
        worst = max(worst, diff / max(float(np.abs(ref).max()), 1e-12))
        print(f"8da{bits}w group {group}: max |etch - ExecuTorch| = {diff:.3g}, "
              f"{(got == ref).mean():.1%} of elements identical")
    return 0 if worst < 1e-5 else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--torchvision", action="store_true")
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--quant", action="store_true")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--etch", default=os.path.join(REPO_ROOT, "target", "release", "etch"))
    args = ap.parse_args()
    if args.torchvision:
        return check_torchvision(args.size, args.etch)
    if args.quant:
        return check_quant(args.etch)
    if args.hf:
        return check_hf(args.etch, [n for n in args.only.split(",") if n])
    names = [n for n in args.only.split(",") if n] or list(MODELS) + FP16
    path = os.path.join(OUT, "manifest.json")
    manifest = []
    if args.only and os.path.exists(path):
        with open(path) as f:
            manifest = [e for e in json.load(f) if e["name"] not in names]
    for n in names:
        manifest.append(export_fixture(n))
    manifest.sort(key=lambda e: (list(MODELS) + FP16).index(e["name"]))
    os.makedirs(OUT, exist_ok=True)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
