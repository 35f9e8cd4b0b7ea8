#!/usr/bin/env python3
"""The Qwen 3.5 MoE fixture (tests/fixtures/qwen3_5_moe): a small random checkpoint made by
transformers' `save_pretrained` (5 layers mixing Gated DeltaNet and full attention, 6
experts, top-3, odd head sizes), our export of it, and transformers' greedy generations.

    ckpt/                  config.json, generation_config.json, model.safetensors (per-expert
                           keys, as save_pretrained writes them)
    model.pte              tools/export/qwen3_5_moe.py --dtype f32 --max-seq-len 64
    expected.json          {"cases": [{"prompt_ids": [...], "generated_ids": [...]}...]}:
                           `generate(do_sample=False)` of Qwen3_5MoeForCausalLM

    /work/venv/bin/python tools/export/export_qwen35_fixture.py
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen3_5_moe as q  # noqa: E402
import test_qwen3_5_moe as t  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "fixtures", "qwen3_5_moe")
MAX_SEQ = 64


def main():
    os.makedirs(OUT, exist_ok=True)
    cfg = t.tiny_config()
    hf = t.random_hf_model(cfg, seed=0)
    ckpt = os.path.join(OUT, "ckpt")
    hf.save_pretrained(ckpt)
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    model = q.build(config, MAX_SEQ, torch.float32, sample=True)
    prog = q.export(model, MAX_SEQ, log=lambda s: None)
    with open(os.path.join(OUT, "model.pte"), "wb") as f:
        prog.write_to_file(f)
    g = torch.Generator().manual_seed(7)
    cases = []
    for n_prompt, n_new in [(1, 12), (7, 20), (23, 16)]:
        prompt = torch.randint(0, cfg.vocab_size, (1, n_prompt), generator=g)
        with torch.no_grad():
            out = hf.generate(prompt, max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new,
                              pad_token_id=0)
        cases.append({
            "prompt_ids": prompt[0].tolist(),
            "generated_ids": out[0, n_prompt:].tolist(),
        })
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"max_seq_len": MAX_SEQ, "cases": cases}, f, indent=1)
    for c in cases:
        print(len(c["prompt_ids"]), "->", c["generated_ids"])
    sizes = {n: os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(OUT) for n in fs}
    print("fixture bytes:", sum(sizes.values()), sizes)


if __name__ == "__main__":
    main()
