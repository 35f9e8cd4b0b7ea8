#!/usr/bin/env python3
"""Llama-3.2-1B-shaped random checkpoint: etch against PyTorch on one GPU.

Here (with /work/venv: executorch, the pinned exporter):
    llama_bench.py export --config CFG.json --dtype fp32|bf16 -o OUT.pte \
        [--max-seq-len 512] [--max-context-len 2048]
        ExecuTorch's stock LLM exporter (export_llm: llama3_2 model class,
        use_kv_cache + use_sdpa_with_kv_cache, dynamic shapes) run in-process on the config,
        with every weight an external constant recorded by name only: the program holds no
        weight bytes (a few hundred KB, where a 1B fp32 .pte would be 5 GB), and
        `etch generate --weights DIR` binds the weights from a safetensors file by their
        names (`layers.0.attention.wq.weight`, ...: ExecuTorch's Llama names). The weights
        the exporter traces are views of one sparse file, so nothing is materialised.
    llama_bench.py check-tiny --etch target/release/etch
        The whole pipeline on a tiny config, on the CPU: a random LlamaForCausalLM, its
        weights converted to ExecuTorch's names, a tiny program exported as above, then
        greedy ids of `etch generate` (CPU, and lowered to the simulated device) against
        transformers' greedy ids.

On the GPU machine (torch, transformers, safetensors only):
    llama_bench.py make-ckpt --config CFG.json --out DIR [--seed 0]
        A seeded random LlamaForCausalLM (float32) saved by save_pretrained to DIR/hf, and
        the same weights under ExecuTorch's names in DIR/etch/model.safetensors (q/k
        projections permuted from Hugging Face's rotate-half layout to the interleaved pairs
        ExecuTorch's Llama rotates; `output.weight` a copy of the tied embedding). DIR/etch
        holds no config.json, so etch knows no end-of-sequence id and always generates the
        requested count, as transformers does with min_new_tokens.
    llama_bench.py hf --ckpt DIR/hf --dtype fp32|bf16 --prompt-len 128 --new 256 --json OUT
        transformers' generate, eager PyTorch (dynamic cache, sdpa attention, no compile).
    llama_bench.py graphs --ckpt DIR/hf --dtype fp32|bf16 ... --json OUT
        PyTorch with CUDA graphs: generate with a static cache and the forward compiled by
        torch.compile(mode="reduce-overhead", fullgraph=True) (transformers' CompileConfig),
        warmed up on a first run (compile and graph capture not timed).
    llama_bench.py report A.json B.json ...
        One line per engine: decode tok/s, prefill tok/s, and how many leading greedy ids
        agree with the first file's.

Timings are CUDA-synchronised wall times, as in qwen35_bench.py: prefill = one forward of
the prompt; decode tok/s = new tokens / (generate time - prefill time).
"""
import argparse
import json
import os
import sys
import time

import torch


def _cfg(path):
    with open(path) as f:
        d = json.load(f)
    return {k: v for k, v in d.items() if k not in ("model_type", "architectures", "torch_dtype")}


def meta_params(cfg):
    """ExecuTorch's llama params.json for a Hugging Face Llama config."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    p = {
        "dim": cfg["hidden_size"],
        "n_layers": cfg["num_hidden_layers"],
        "n_heads": cfg["num_attention_heads"],
        "n_kv_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        "vocab_size": cfg["vocab_size"],
        "hidden_dim": cfg["intermediate_size"],
        "norm_eps": cfg.get("rms_norm_eps", 1e-5),
        "rope_theta": cfg.get("rope_theta", rs.get("rope_theta", 10000.0)),
        "use_scaled_rope": rs.get("rope_type") == "llama3",
    }
    if p["use_scaled_rope"]:
        # ExecuTorch's llama3_2 class hard-codes Llama 3's other scaling constants.
        want = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
        for k, v in want.items():
            if float(rs.get(k, v)) != v:
                raise SystemExit(f"rope_scaling {k}={rs[k]}: ExecuTorch's llama3_2 uses {v}")
    return p


# ----------------------------------------------------------------------------------------
# Hugging Face -> ExecuTorch names


def _unpermute(w, n_heads):
    """Hugging Face's q/k projection rows (rotate-half pairs i, i + D/2) back to Meta's
    interleaved pairs (2i, 2i + 1): the inverse of convert_llama_weights_to_hf's permute."""
    d1, d2 = w.shape
    return w.view(n_heads, 2, d1 // n_heads // 2, d2).transpose(1, 2).reshape(d1, d2)


def hf_to_meta(sd, cfg):
    """A LlamaForCausalLM state dict under ExecuTorch's Llama names."""
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    out = {"tok_embeddings.weight": sd["model.embed_tokens.weight"],
           "norm.weight": sd["model.norm.weight"]}
    out["output.weight"] = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    names = {
        "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
        "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
        "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
        "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for i in range(cfg["num_hidden_layers"]):
        for hf, et in names.items():
            w = sd[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                w = _unpermute(w, nh)
            elif hf == "self_attn.k_proj":
                w = _unpermute(w, nkv)
            out[f"layers.{i}.{et}.weight"] = w
    # safetensors stores no shared storage: every tensor its own contiguous copy.
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def _build_hf(cfg, seed, device, init_scale=None):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        m = LlamaForCausalLM(LlamaConfig(**cfg)).float().eval()
    if init_scale:
        # Decisive logits for small test models (default inits give near-uniform ones).
        with torch.no_grad():
            for n, p in m.named_parameters():
                if p.dim() > 1:
                    p.normal_(0.0, init_scale)
    return m


def make_ckpt(a):
    from safetensors.torch import save_file

    cfg = _cfg(a.config)
    t0 = time.time()
    m = _build_hf(cfg, a.seed, a.device, a.init_scale)
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    n = sum(p.numel() for p in m.parameters())
    print(f"built {n / 1e9:.2f} B params in {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    m.save_pretrained(os.path.join(a.out, "hf"))
    os.makedirs(os.path.join(a.out, "etch"), exist_ok=True)
    sd = {k: v.cpu() for k, v in hf_to_meta(m.state_dict(), cfg).items()}
    save_file(sd, os.path.join(a.out, "etch", "model.safetensors"))
    print(f"saved {a.out}/hf and {a.out}/etch in {time.time() - t0:.1f} s", flush=True)


# ----------------------------------------------------------------------------------------
# PyTorch engines


def _prompt(vocab, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=g)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _load(a):
    from transformers import LlamaForCausalLM

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    t0 = time.time()
    m = LlamaForCausalLM.from_pretrained(a.ckpt, dtype=dtype).to(a.device).eval()
    _sync()
    return m, time.time() - t0


def _timed_generate(m, prompt, new, **kw):
    """Prefill time (one forward of the prompt) and generate time, synchronised."""
    with torch.no_grad():
        _sync()
        t0 = time.time()
        m(prompt, use_cache=True)
        _sync()
        prefill_s = time.time() - t0
        t0 = time.time()
        out = m.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, **kw)
        _sync()
        total_s = time.time() - t0
    return prefill_s, total_s, out[0, prompt.shape[1]:].tolist()


def _result(a, engine, load_s, prefill_s, total_s, ids):
    decode_s = max(total_s - prefill_s, 1e-9)
    r = {
        "engine": engine,
        "dtype": a.dtype,
        "load_s": load_s,
        "prompt_len": a.prompt_len,
        "new_tokens": len(ids),
        "prefill_tok_s": a.prompt_len / prefill_s,
        "decode_tok_s": len(ids) / decode_s,
        "generated_ids": ids,
    }
    print(json.dumps({k: v for k, v in r.items() if k != "generated_ids"}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    return r


def hf(a):
    m, load_s = _load(a)
    prompt = _prompt(m.config.vocab_size, a.prompt_len).to(a.device)
    with torch.no_grad():
        m.generate(prompt[:, :8], max_new_tokens=4, do_sample=False)  # warm-up
    prefill_s, total_s, ids = _timed_generate(m, prompt, a.new)
    return _result(a, "transformers eager", load_s, prefill_s, total_s, ids)


def graphs(a):
    from transformers import CompileConfig

    m, load_s = _load(a)
    prompt = _prompt(m.config.vocab_size, a.prompt_len).to(a.device)
    kw = dict(
        cache_implementation="static",
        compile_config=CompileConfig(mode="reduce-overhead", fullgraph=True),
    )
    t0 = time.time()
    with torch.no_grad():
        # Compiles and captures (the same lengths as the timed run, so nothing recompiles).
        for _ in range(2):
            m.generate(prompt, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, **kw)
    _sync()
    # transformers compiles only where it can (a CUDA device and a static cache); say so.
    compiled = hasattr(m, "_compiled_call")
    print(f"warm-up (compile + CUDA graph capture): {time.time() - t0:.1f} s, "
          f"forward compiled: {compiled}", flush=True)
    prefill_s, total_s, ids = _timed_generate(m, prompt, a.new, **kw)
    name = "torch.compile reduce-overhead (CUDA graphs)" if compiled else "static cache, NOT compiled"
    return _result(a, name, load_s, prefill_s, total_s, ids)


def report(a):
    rows = [json.load(open(p)) for p in a.files]
    ref = rows[0].get("generated_ids", [])
    print(f"{'engine':48} {'dtype':5} {'decode tok/s':>12} {'prefill tok/s':>13} {'same ids':>9}")
    for r in rows:
        ids = r.get("generated_ids", [])
        same = next((i for i, (x, y) in enumerate(zip(ids, ref)) if x != y), min(len(ids), len(ref)))
        print(f"{r.get('engine', '?'):48} {r.get('dtype', '?'):5} {r.get('decode_tok_s', 0):12.1f} "
              f"{r.get('prefill_tok_s', 0):13.1f} {same:>5}/{len(ids)}")


# ----------------------------------------------------------------------------------------
# Export (here, with executorch)


def _sparse_weights(params, dtype, path):
    """ExecuTorch's Llama state dict as views of one sparse file (never read)."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    with torch.device("meta"):
        shapes = construct_transformer(ModelArgs(max_seq_len=8, max_context_len=8, **params))
    sd = {k: v.shape for k, v in shapes.state_dict().items()
          if not any(s in k for s in ("cache", "mask", "freqs"))}
    total = sum(s.numel() for s in sd.values())
    with open(path, "wb") as fh:
        fh.truncate(total * dtype.itemsize)
    flat = torch.from_file(path, shared=True, size=total, dtype=dtype)
    out, off = {}, 0
    for k, s in sd.items():
        out[k] = flat[off:off + s.numel()].view(s)
        off += s.numel()
    return out


def _patch_for_external_names(ckpt_path, weights):
    """export_llm with: `torch.load(ckpt_path)` giving `weights`; every parameter an
    external constant; the emitter recording external constants by name only."""
    import executorch.examples.models.llama.model as llama_model
    from executorch.exir.emit import _emitter
    from executorch.exir.schema import EValue, TensorDataLocation
    from executorch.exir.tensor import make_tensor_value
    from executorch.extension.llm.export.builder import LLMEdgeManager

    load = torch.load

    def patched_load(path, *args, **kwargs):
        return dict(weights) if str(path) == ckpt_path else load(path, *args, **kwargs)

    llama_model.torch.load = patched_load

    to_executorch = LLMEdgeManager.to_executorch

    def patched_to_executorch(self, passes=None, external_constants_tag=None,
                              share_mutable_buffers=False):
        # Parameters (placeholders p_*) go external, keyed by their FQN; buffers (the RoPE
        # tables) stay in the program.
        tag = external_constants_tag or (lambda n: "model" if n.name.startswith("p_") else None)
        return to_executorch(self, passes, tag, share_mutable_buffers)

    LLMEdgeManager.to_executorch = patched_to_executorch

    to_evalue = _emitter._Emitter._tensor_spec_to_evalue

    def patched_to_evalue(self, spec, constant_tag=None):
        info = spec.extra_tensor_info
        if spec.const and info is not None and info.location == TensorDataLocation.EXTERNAL:
            state = self.program_state
            idx = len(state.external_constant_buffer)
            state.external_constant_buffer.append(b"")
            state.external_constant_hash["name:" + info.fully_qualified_name] = idx
            self._save_to_external_constant_map(info.fully_qualified_name, idx, constant_tag)
            state.allocated_specs.append(spec)
            return EValue(make_tensor_value(idx, None, spec))
        return to_evalue(self, spec, constant_tag)

    _emitter._Emitter._tensor_spec_to_evalue = patched_to_evalue


def export(a):
    import tempfile

    cfg = _cfg(a.config)
    params = meta_params(cfg)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    out = os.path.abspath(a.output)
    with tempfile.TemporaryDirectory() as tmp:
        ppath = os.path.join(tmp, "params.json")
        with open(ppath, "w") as f:
            json.dump(params, f)
        ckpt = os.path.join(tmp, "weights.pth")
        open(ckpt, "w").close()
        weights = _sparse_weights(params, dtype, os.path.join(tmp, "weights.bin"))
        _patch_for_external_names(ckpt, weights)
        from executorch.extension.llm.export.export_llm import main

        sys.argv = [
            "export_llm", "base.model_class=llama3_2", f"base.checkpoint={ckpt}",
            f"base.params={ppath}", "model.use_kv_cache=True",
            "model.use_sdpa_with_kv_cache=True", f"model.dtype_override={a.dtype}",
            f"export.max_seq_length={a.max_seq_len}",
            f"export.max_context_length={a.max_context_len}",
            f"export.output_dir={tmp}", f"export.output_name={out}",
            f"hydra.run.dir={tmp}",
        ]
        cwd = os.getcwd()
        os.chdir(tmp)  # the exporter writes an (empty) model.ptd and logs in the cwd
        try:
            main()
        finally:
            os.chdir(cwd)
    print(f"wrote {out}: {os.path.getsize(out)} bytes", flush=True)


def check_tiny(a):
    """The pipeline end to end on a tiny config, on the CPU."""
    import subprocess
    import tempfile

    cfg = json.load(open(a.config)) if a.config else TINY
    with tempfile.TemporaryDirectory() as tmp:
        cpath = os.path.join(tmp, "config.json")
        json.dump(cfg, open(cpath, "w"))
        ck = argparse.Namespace(config=cpath, out=tmp, seed=0, device="cpu", init_scale=0.2)
        make_ckpt(ck)
        pte = os.path.join(tmp, "tiny.pte")
        subprocess.run([sys.executable, __file__, "export", "--config", cpath, "--dtype", "fp32",
                        "-o", pte, "--max-seq-len", "32", "--max-context-len", "64"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from transformers import LlamaForCausalLM

        m = LlamaForCausalLM.from_pretrained(os.path.join(tmp, "hf")).eval()
        prompt = _prompt(cfg["vocab_size"], 7)
        with torch.no_grad():
            want = m.generate(prompt, max_new_tokens=a.new, min_new_tokens=a.new,
                              do_sample=False)[0, 7:].tolist()
        low = os.path.join(tmp, "tiny.cuda.pte")
        subprocess.run([a.etch, "lower", pte, "-o", low, "--ops", "cuda"], check=True,
                       stdout=subprocess.DEVNULL)
        ids = ",".join(map(str, prompt[0].tolist()))
        ok = True
        for name, prog, extra in [("cpu", pte, []), ("lowered, simulated device", low,
                                                      ["--simulate-device", "cuda"])]:
            r = subprocess.run([a.etch, "generate", prog, "--weights", os.path.join(tmp, "etch"),
                                "--prompt-ids", ids, "--max-new-tokens", str(a.new), "--json",
                                *extra], check=True, capture_output=True, text=True)
            got = json.loads(r.stdout)["generated_ids"]
            print(f"etch {name}: {got}\ntransformers:  {want}")
            ok &= got == want
    print("same greedy ids" if ok else "DIFFERENT ids")
    sys.exit(0 if ok else 1)


# A small Llama-3-style config (llama3 RoPE scaling, GQA, tied embeddings) for check-tiny.
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": True,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    "bos_token_id": 1, "eos_token_id": 2,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--config", required=True)
    e.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    e.add_argument("-o", "--output", required=True)
    e.add_argument("--max-seq-len", type=int, default=512)
    e.add_argument("--max-context-len", type=int, default=2048)
    c = sub.add_parser("make-ckpt")
    c.add_argument("--config", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    c.add_argument("--init-scale", type=float, default=None,
                   help="std of the matrices (default: the config's initializer_range)")
    for name in ("hf", "graphs"):
        p = sub.add_parser(name)
        p.add_argument("--ckpt", required=True)
        p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
        p.add_argument("--prompt-len", type=int, default=128)
        p.add_argument("--new", type=int, default=256)
        p.add_argument("--device", default="cuda")
        p.add_argument("--json")
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    t = sub.add_parser("check-tiny")
    t.add_argument("--etch", default="target/release/etch")
    t.add_argument("--config", default=None)
    t.add_argument("--new", type=int, default=12)
    a = ap.parse_args(argv)
    {"export": export, "make-ckpt": make_ckpt, "hf": hf, "graphs": graphs, "report": report,
     "check-tiny": check_tiny}[a.cmd](a)


if __name__ == "__main__":
    main()
