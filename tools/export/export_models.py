#!/usr/bin/env python3
"""Export the issue-3 coverage models (torchvision, HuggingFace transformers, and a set of
`torch.nn` layers) with the stock ExecuTorch exporter, with their inputs and PyTorch eager
outputs, so that `tools/export/check_models.py` can compare `etch run` against PyTorch.

Every model is exported with
    torch.export.export(model.eval(), args) -> executorch.exir.to_edge(...) -> .to_executorch()
using default settings. Weights are random (no pretrained downloads); configs are tiny.

Writes, under --out (default target/models, gitignored):
    <name>/model.pte, <name>/forward_0_in<k>.npy, <name>/forward_0_out<k>.npy
    manifest.json (same format as tests/fixtures/manifest.json)

    /work/venv/bin/python tools/export/export_models.py [--out DIR] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from executorch.exir import to_edge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEQ = 16
VOCAB = 256


class Fn(nn.Module):
    """Wraps a callable (and the modules it uses) as a module."""

    def __init__(self, fn, **mods):
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleDict(mods)

    def forward(self, *xs):
        return self.fn(self.mods, *xs)


class HFLogits(nn.Module):
    """Calls an HF model and returns one tensor (logits or last hidden state)."""

    def __init__(self, model, key, names=("input_ids", "attention_mask"), **kwargs):
        super().__init__()
        self.model = model
        self.key = key
        self.names = names
        self.kwargs = kwargs

    def forward(self, *xs):
        out = self.model(**dict(zip(self.names, xs)), **self.kwargs)
        return getattr(out, self.key)


# --------------------------------------------------------------------------- torchvision


def torchvision_models():
    import torchvision.models as tvm
    from torchvision.models.vision_transformer import VisionTransformer

    img = lambda s: (torch.randn(1, 3, s, s),)  # noqa: E731
    yield "resnet18", lambda: tvm.resnet18(weights=None), img(64)
    yield "mobilenet_v2", lambda: tvm.mobilenet_v2(weights=None), img(64)
    yield "mobilenet_v3_large", lambda: tvm.mobilenet_v3_large(weights=None), img(64)
    yield "efficientnet_b0", lambda: tvm.efficientnet_b0(weights=None), img(64)
    yield "regnet_y_400mf", lambda: tvm.regnet_y_400mf(weights=None), img(64)
    yield "convnext_tiny", lambda: tvm.convnext_tiny(weights=None), img(64)
    yield "googlenet", lambda: tvm.googlenet(weights=None, aux_logits=False, init_weights=True), img(64)
    # vit_b_16 at a reduced size: same architecture family, image 64, 4 layers.
    def vit():
        m = VisionTransformer(image_size=64, patch_size=16, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128)
        nn.init.normal_(m.heads.head.weight, std=0.1)  # zero-initialised by torchvision
        return m

    yield "vit_b_16", vit, img(64)


# --------------------------------------------------------------------------- transformers


def hf_models():
    import transformers as tf

    ids = lambda: (torch.randint(0, VOCAB, (1, SEQ)),)  # noqa: E731
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64, use_cache=False)

    def causal(cfg_cls, model_cls, **extra):
        def make():
            kw = dict(common)
            kw.update(extra)
            cfg = cfg_cls(**kw)
            cfg._attn_implementation = "eager"
            return HFLogits(model_cls(cfg), "logits", use_cache=False)
        return make

    yield "gpt2", lambda: HFLogits(
        tf.GPT2LMHeadModel(_eager(tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                                n_positions=64, use_cache=False))),
        "logits", use_cache=False), ids()
    yield "llama", causal(tf.LlamaConfig, tf.LlamaForCausalLM, num_key_value_heads=2), ids()
    yield "mistral", causal(tf.MistralConfig, tf.MistralForCausalLM, num_key_value_heads=2,
                            sliding_window=None), ids()
    yield "qwen2", causal(tf.Qwen2Config, tf.Qwen2ForCausalLM, num_key_value_heads=2), ids()
    yield "qwen3", causal(tf.Qwen3Config, tf.Qwen3ForCausalLM, num_key_value_heads=2, head_dim=16), ids()
    yield "phi3", causal(tf.Phi3Config, tf.Phi3ForCausalLM, num_key_value_heads=2, pad_token_id=0), ids()
    yield "gemma", causal(tf.GemmaConfig, tf.GemmaForCausalLM, num_key_value_heads=1, head_dim=16), ids()

    def encoder(cfg_cls, model_cls, **extra):
        def make():
            kw = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64)
            kw.update(extra)
            cfg = cfg_cls(**kw)
            cfg._attn_implementation = "eager"
            return HFLogits(model_cls(cfg), "last_hidden_state")
        return make

    yield "bert", encoder(tf.BertConfig, tf.BertModel), ids()
    yield "roberta", encoder(tf.RobertaConfig, tf.RobertaModel, pad_token_id=1), (torch.randint(3, VOCAB, (1, SEQ)),)
    yield "distilbert", lambda: HFLogits(
        tf.DistilBertModel(_eager(tf.DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4,
                                                      hidden_dim=128, max_position_embeddings=64))),
        "last_hidden_state"), ids()
    yield "t5_encoder", lambda: HFLogits(
        tf.T5EncoderModel(_eager(tf.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                             num_heads=4, use_cache=False))),
        "last_hidden_state"), ids()

    def whisper():
        cfg = _eager(tf.WhisperConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                      decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=128,
                                      decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32,
                                      max_target_positions=32, use_cache=False, pad_token_id=0,
                                      bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))
        return HFLogits(tf.WhisperModel(cfg).get_encoder(), "last_hidden_state", names=("input_features",))

    yield "whisper_encoder", whisper, (torch.randn(1, 16, 64),)


def _eager(cfg):
    cfg._attn_implementation = "eager"
    return cfg


# --------------------------------------------------------------------------- nn layers


def nn_models():
    def lstm():
        m = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        return Fn(lambda ms, x: ms["m"](x)[0], m=m)

    def gru():
        m = nn.GRU(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        return Fn(lambda ms, x: ms["m"](x)[0], m=m)

    def mha():
        m = nn.MultiheadAttention(32, 4, batch_first=True)
        return Fn(lambda ms, q, k: ms["m"](q, k, k)[0], m=m)

    yield "lstm", lstm, (torch.randn(2, 7, 8),)
    yield "gru", gru, (torch.randn(2, 7, 8),)
    yield "mha", mha, (torch.randn(2, 5, 32), torch.randn(2, 6, 32))
    yield "conv1d", lambda: nn.Sequential(nn.Conv1d(4, 8, 3, padding=1, stride=2), nn.ReLU(),
                                          nn.Conv1d(8, 6, 5, dilation=2, groups=2)), (torch.randn(2, 4, 32),)
    yield "conv_transpose2d", lambda: nn.Sequential(
        nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.ConvTranspose2d(6, 4, 4, stride=2, groups=2, dilation=1, bias=False)), (torch.randn(1, 4, 9, 9),)
    yield "group_norm", lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(4, 8), nn.GroupNorm(1, 8)), \
        (torch.randn(2, 3, 10, 10),)
    yield "upsample_nearest", lambda: nn.Upsample(scale_factor=2, mode="nearest"), (torch.randn(1, 3, 5, 7),)
    yield "upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (torch.randn(1, 3, 5, 7),)
    yield "interp_nearest", lambda: Fn(lambda ms, x: F.interpolate(x, size=(9, 4), mode="nearest")), \
        (torch.randn(2, 3, 5, 7),)
    yield "interp_bilinear", lambda: Fn(
        lambda ms, x: F.interpolate(x, size=(9, 4), mode="bilinear", align_corners=False)), (torch.randn(2, 3, 5, 7),)
    yield "interp_bilinear_ac", lambda: Fn(
        lambda ms, x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True)), \
        (torch.randn(2, 3, 5, 7),)


# --------------------------------------------------------------------------- extra
# Further members of the same families (not in the list): a wider net for the
# operators that unseen models of these kinds use.


def extra_models():
    import torchvision.models as tvm
    import transformers as tf

    img = lambda s: (torch.randn(1, 3, s, s),)  # noqa: E731
    for name in ["resnet50", "resnext50_32x4d", "squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet0_5",
                 "mobilenet_v3_small", "regnet_x_400mf", "densenet121", "efficientnet_v2_s", "alexnet",
                 "swin_t"]:
        yield "x_" + name, (lambda n=name: getattr(tvm, n)(weights=None)), img(64)
    yield "x_inception_v3", lambda: tvm.inception_v3(weights=None, aux_logits=False, init_weights=False), img(96)

    ids = lambda: torch.randint(0, VOCAB, (1, SEQ))  # noqa: E731
    mask = torch.ones(1, SEQ, dtype=torch.long)
    mask[0, :3] = 0

    def cfg(cls, attn="eager", **kw):
        c = cls(**kw)
        c._attn_implementation = attn
        return c

    small = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=64, use_cache=False)
    yield "x_llama_sdpa", lambda: HFLogits(tf.LlamaForCausalLM(cfg(tf.LlamaConfig, "sdpa", num_key_value_heads=2,
                                                                      **small)), "logits", use_cache=False), (ids(),)
    yield "x_llama_mask", lambda: HFLogits(tf.LlamaForCausalLM(cfg(tf.LlamaConfig, num_key_value_heads=2, **small)),
                                           "logits", use_cache=False), (ids(), mask)
    yield "x_gpt2_mask", lambda: HFLogits(tf.GPT2LMHeadModel(cfg(tf.GPT2Config, vocab_size=VOCAB, n_embd=64, n_layer=2,
                                                                 n_head=4, n_positions=64, use_cache=False)),
                                          "logits", use_cache=False), (ids(), mask)
    yield "x_bert_mask", lambda: HFLogits(tf.BertModel(cfg(tf.BertConfig, **{k: v for k, v in small.items()
                                                                              if k != "use_cache"})),
                                          "last_hidden_state"), (ids(), mask)
    yield "x_gemma2", lambda: HFLogits(tf.Gemma2ForCausalLM(cfg(tf.Gemma2Config, num_key_value_heads=2, head_dim=16,
                                                                **small)), "logits", use_cache=False), (ids(),)
    yield "x_phi", lambda: HFLogits(tf.PhiForCausalLM(cfg(tf.PhiConfig, **small)), "logits", use_cache=False), (ids(),)
    yield "x_gpt_neox", lambda: HFLogits(tf.GPTNeoXForCausalLM(cfg(tf.GPTNeoXConfig, **small)), "logits",
                                         use_cache=False), (ids(),)
    yield "x_opt", lambda: HFLogits(tf.OPTForCausalLM(cfg(tf.OPTConfig, vocab_size=VOCAB, hidden_size=64,
                                                          num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                                          word_embed_proj_dim=64, max_position_embeddings=64,
                                                          use_cache=False, pad_token_id=1)),
                                    "logits", use_cache=False), (ids(),)
    yield "x_falcon", lambda: HFLogits(tf.FalconForCausalLM(cfg(tf.FalconConfig, vocab_size=VOCAB, hidden_size=64,
                                                                num_hidden_layers=2, num_attention_heads=4,
                                                                use_cache=False)), "logits", use_cache=False), (ids(),)
    yield "x_bloom", lambda: HFLogits(tf.BloomForCausalLM(cfg(tf.BloomConfig, vocab_size=VOCAB, hidden_size=64,
                                                              n_layer=2, n_head=4, use_cache=False)),
                                      "logits", use_cache=False), (ids(),)
    yield "x_stablelm", lambda: HFLogits(tf.StableLmForCausalLM(cfg(tf.StableLmConfig, num_key_value_heads=2,
                                                                    **small)), "logits", use_cache=False), (ids(),)
    enc = {k: v for k, v in small.items() if k != "use_cache"}
    yield "x_albert", lambda: HFLogits(tf.AlbertModel(cfg(tf.AlbertConfig, embedding_size=32, **enc)),
                                       "last_hidden_state"), (ids(),)
    yield "x_electra", lambda: HFLogits(tf.ElectraModel(cfg(tf.ElectraConfig, embedding_size=32, **enc)),
                                        "last_hidden_state"), (ids(),)
    yield "x_xlm_roberta", lambda: HFLogits(tf.XLMRobertaModel(cfg(tf.XLMRobertaConfig, pad_token_id=1, **enc)),
                                            "last_hidden_state"), (torch.randint(3, VOCAB, (1, SEQ)),)
    yield "x_deberta_v2", lambda: HFLogits(tf.DebertaV2Model(cfg(tf.DebertaV2Config, **enc)),
                                           "last_hidden_state"), (ids(),)
    yield "x_mobilebert", lambda: HFLogits(tf.MobileBertModel(cfg(tf.MobileBertConfig, embedding_size=32,
                                                                  intra_bottleneck_size=32, true_hidden_size=32,
                                                                  **enc)), "last_hidden_state"), (ids(),)
    yield "x_t5_encoder_gated", lambda: HFLogits(
        tf.T5EncoderModel(cfg(tf.T5Config, vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                              num_heads=4, use_cache=False, feed_forward_proj="gated-gelu")),
        "last_hidden_state"), (ids(),)

    def lstm_bi():
        m = nn.LSTM(8, 16, num_layers=1, batch_first=False, bidirectional=True)
        return Fn(lambda ms, x: ms["m"](x), m=m)

    def gru_cell():
        m = nn.GRUCell(8, 16)
        c = nn.LSTMCell(16, 12)
        return Fn(lambda ms, x: ms["c"](ms["m"](x))[0], m=m, c=c)

    def mha_masks():
        m = nn.MultiheadAttention(32, 4, batch_first=True)
        am = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
        kpm = torch.tensor([[False] * 4 + [True], [False] * 5])
        return Fn(lambda ms, x: ms["m"](x, x, x, attn_mask=am, key_padding_mask=kpm, need_weights=True), m=m)

    yield "x_lstm_bi", lstm_bi, (torch.randn(7, 2, 8),)
    yield "x_cells", gru_cell, (torch.randn(3, 8),)
    yield "x_mha_masks", mha_masks, (torch.randn(2, 5, 32),)
    yield "x_transformer_dec", lambda: Fn(
        lambda ms, x, mem: ms["d"](x, mem, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
                                   tgt_is_causal=True),
        d=nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2)), \
        (torch.randn(2, 5, 16), torch.randn(2, 6, 16))
    yield "x_acts", lambda: nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(0.2), nn.Linear(8, 8), nn.ELU(), nn.Hardswish(),
                                          nn.Linear(8, 8), nn.Hardsigmoid(), nn.Softplus(), nn.Mish(), nn.PReLU(),
                                          nn.SELU(), nn.CELU(), nn.GELU("tanh"), nn.Softsign(), nn.Tanhshrink(),
                                          nn.LogSigmoid()), (torch.randn(4, 8),)
    yield "x_conv_misc", lambda: nn.Sequential(
        nn.ReflectionPad2d(1), nn.Conv2d(3, 8, 3), nn.InstanceNorm2d(8, affine=True), nn.ReplicationPad2d((1, 2, 0, 1)),
        nn.ConstantPad2d(1, 0.5), nn.Conv2d(8, 8, 3, padding="same"), nn.PixelShuffle(2), nn.PixelUnshuffle(2),
        nn.ZeroPad2d(1), nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), nn.AdaptiveAvgPool2d(3),
        nn.Flatten(), nn.Linear(72, 4)), (torch.randn(2, 3, 12, 12),)
    yield "x_conv1d_misc", lambda: nn.Sequential(
        nn.Conv1d(4, 8, 3, padding="same"), nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1), nn.GroupNorm(2, 4),
        nn.Upsample(scale_factor=2, mode="nearest"), nn.Upsample(scale_factor=1.5, mode="linear"),
        nn.AdaptiveAvgPool1d(5), nn.MaxPool1d(2, ceil_mode=True)), (torch.randn(2, 4, 10),)
    yield "x_interp_misc", lambda: Fn(lambda ms, x: (
        F.interpolate(x, scale_factor=1.7, mode="nearest"),
        F.interpolate(x, scale_factor=0.6, mode="bilinear"),
        F.interpolate(x, size=(3, 11), mode="bilinear", align_corners=True),
        F.interpolate(x, scale_factor=3, mode="nearest-exact"),
        F.interpolate(x, scale_factor=2, mode="bicubic"),
        F.interpolate(x.contiguous(memory_format=torch.channels_last), scale_factor=2, mode="bilinear"))),\
        (torch.randn(2, 3, 5, 7),)
    # One small model per tensor op (an op outside the Core ATen opset fails only its own
    # export).
    tensor_ops = {
        "cumsum": lambda x: torch.cumsum(x, 1), "flip": lambda x: torch.flip(x, [0, 2]),
        "tril": lambda x: torch.tril(x[0]), "triu": lambda x: torch.triu(x[0], 1), "var": lambda x: x.var(1),
        "std": lambda x: x.std(-1), "max_dim": lambda x: tuple(x.max(1)), "min_dim": lambda x: tuple(x.min(-1)),
        "logsumexp": lambda x: torch.logsumexp(x, 1), "sign": torch.sign, "bitwise_not": lambda x: ~(x > 0),
        "sort": lambda x: tuple(torch.sort(x, -1)), "argsort": lambda x: torch.argsort(x, 1), "prod": lambda x: x.prod(1),
        "norm": lambda x: torch.norm(x, dim=-1), "pow_half": lambda x: x.abs().pow(0.5),
        "clamp_min": lambda x: torch.clamp_min(x, 0.1), "atan2": lambda x: torch.atan2(x, x + 1),
        "index_put": lambda x: x[0].index_put((torch.tensor([0, 2]),), torch.ones(2, 4)),
        "roll": lambda x: torch.roll(x, 2, 1), "repeat_interleave": lambda x: torch.repeat_interleave(x, 2, 1),
        "repeat": lambda x: x.repeat(1, 2, 1), "nan_to_num": lambda x: torch.nan_to_num(x.log()),
        "where_scalar": lambda x: torch.where(x > 0, x, 0.0), "masked_fill": lambda x: x.masked_fill(x < 0, 1.5),
        "remainder": lambda x: torch.remainder(x, 0.7), "floordiv": lambda x: x // 0.3,
        "amax": lambda x: torch.amax(x, (0, 2)), "einsum": lambda x: torch.einsum("bij,bkj->bik", x, x),
        "unfold": lambda x: x.unfold(2, 2, 1), "diff": lambda x: torch.diff(x, dim=1),
        "exp2": torch.exp2, "expm1": torch.expm1, "log1p": lambda x: torch.log1p(x.abs()),
        "log2": lambda x: torch.log2(x.abs() + 1), "log10": lambda x: torch.log10(x.abs() + 1), "tan": torch.tan,
        "asin": lambda x: torch.asin(x.tanh()), "acos": lambda x: torch.acos(x.tanh()), "atan": torch.atan,
        "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "isnan": torch.isnan, "isinf": torch.isinf,
        "topk_smallest": lambda x: tuple(torch.topk(x, 2, dim=1, largest=False)), "minimum": lambda x: torch.minimum(x, x.flip(0)),
        "frac": lambda x: torch.frac(x * 3), "hypot": lambda x: torch.hypot(x, x),
        "lerp": lambda x: torch.lerp(x, x * 2, 0.3), "addcmul": lambda x: torch.addcmul(x, x, x, value=0.5),
        "baddbmm": lambda x: torch.baddbmm(x, x, torch.eye(4).expand(2, 4, 4)),
        "softmax_int_dim": lambda x: torch.softmax(x, 0), "mean_neg": lambda x: x.mean((-1, -2), keepdim=True),
        "full_like_int": lambda x: torch.ones_like(x, dtype=torch.long).cumsum(-1) * 3 // 2,
        "scatter": lambda x: torch.zeros(2, 3, 4).scatter(2, torch.zeros(2, 3, 1, dtype=torch.long), x[..., :1]),
        "index_select_neg": lambda x: torch.index_select(x, -1, torch.tensor([3, 0])),
        "narrow_cat": lambda x: torch.cat([x.narrow(2, 1, 2), x[..., :1]], -1),
        "chunk": lambda x: torch.chunk(x, 2, -1), "split_uneven": lambda x: torch.split(x, [1, 3], -1),
        "bool_ops": lambda x: ((x > 0) & (x < 1)) | ((x > 1) ^ (x < -1)),
        "mul_int_float": lambda x: torch.arange(4) * x, "div_trunc": lambda x: torch.div(x * 5, 2, rounding_mode="trunc"),
        "sigmoid_glu": lambda x: F.glu(x, -1), "relu6": F.relu6, "hardswish": F.hardswish,
        "hardsigmoid": F.hardsigmoid, "softplus": F.softplus, "logsigmoid": F.logsigmoid, "silu": F.silu,
        "mish": F.mish, "celu": F.celu, "selu": F.selu, "threshold": lambda x: F.threshold(x, 0.1, 20.0),
    }
    for op, fn in tensor_ops.items():
        yield "op_" + op, (lambda f=fn: Fn(lambda ms, x: f(x))), (torch.randn(2, 3, 4),)

GROUPS = {"torchvision": torchvision_models, "hf": hf_models, "nn": nn_models, "extra": extra_models}


def dtype_name(t) -> str:
    if isinstance(t, torch.Tensor):
        return str(t.dtype).replace("torch.", "")
    return type(t).__name__


def perturb_batch_norm(model):
    """Random BatchNorm statistics and affine parameters: with torchvision's default init
    (mean 0, var 1, zero-init gammas) several nets output ~1e-10, which would make the
    comparison meaningless."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
                n = mod.num_features
                mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                if mod.affine:
                    mod.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                    mod.bias.copy_(0.2 * torch.randn(n, generator=g))


def export_one(name, make, inputs, out_dir):
    torch.manual_seed(0)
    model = make().eval()
    perturb_batch_norm(model)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with torch.no_grad():
        expected = model(*inputs)
        ep = torch.export.export(model, inputs)
    prog = to_edge(ep).to_executorch()
    with open(os.path.join(d, "model.pte"), "wb") as f:
        f.write(prog.buffer)
    flat, _ = tree_flatten(expected)
    case = {"method": "forward", "inputs": [], "input_dtypes": [], "expected": [], "output_dtypes": [],
            "rtol": 1e-3, "atol": 1e-4}
    for i, x in enumerate(inputs):
        p = f"{name}/forward_0_in{i}.npy"
        np.save(os.path.join(out_dir, p), x.numpy())
        case["inputs"].append(p)
        case["input_dtypes"].append(dtype_name(x))
    for i, y in enumerate(flat):
        p = f"{name}/forward_0_out{i}.npy"
        np.save(os.path.join(out_dir, p), y.detach().numpy())
        case["expected"].append(p)
        case["output_dtypes"].append(dtype_name(y))
    return {"name": name, "pte": f"{name}/model.pte", "cases": [case]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "models"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--groups", default="torchvision,hf,nn")
    args = ap.parse_args()
    torch.manual_seed(0)
    only = set(args.only.split(",")) if args.only else None
    os.makedirs(args.out, exist_ok=True)
    man_path = os.path.join(args.out, "manifest.json")
    manifest = {}
    if os.path.exists(man_path):
        with open(man_path) as f:
            manifest = {e["name"]: e for e in json.load(f)}
    failures = 0
    for g in args.groups.split(","):
        for name, make, inputs in GROUPS[g]():
            if only and name not in only:
                continue
            try:
                manifest[name] = export_one(name, make, inputs, args.out)
                print(f"exported {name}", flush=True)
            except Exception as e:  # noqa: BLE001
                failures += 1
                manifest.pop(name, None)
                print(f"EXPORT FAIL {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                traceback.print_exc(limit=3, file=sys.stderr)
    with open(man_path, "w") as f:
        json.dump(list(manifest.values()), f, indent=2)
    print(f"{len(manifest)} model(s) in {man_path}; {failures} export failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
