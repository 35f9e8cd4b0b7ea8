#!/usr/bin/env python3
"""Expected ids for `etch generate` on the tiny export_llm Llama fixture
(tests/fixtures/llama_ops/tiny_llama/model.pte, from export_tiny_llama.py): a greedy loop
over ExecuTorch 1.5.1's own runtime (with the llama:: custom-op kernels of the wheel), the
runner convention forward(tokens[1, T], input_pos[1]) -> logits, the prompt prefilled in
one call (the program has dynamic shapes), then one token per call.

    /work/venv/bin/python tools/export/gen_generate_expected.py [NAME]
writes tests/fixtures/llama_ops/NAME/generate.json (NAME: tiny_llama, the default;
tiny_llama_qkv, the quantized KV-cache recipe's program; tiny_llama_qemb8, 8-bit
embeddings; for the quantized ones ExecuTorch's quantized kernels are loaded into the
runtime).
"""
import json
import os
import sys

import torch
from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (registers llama::)
from executorch.runtime import Runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = sys.argv[1] if len(sys.argv) > 1 else "tiny_llama"
DIR = os.path.join(ROOT, "tests", "fixtures", "llama_ops", NAME)
PROMPTS = [[1, 5, 9, 23, 7], [42], [3, 141, 59, 26, 5, 35, 89, 79, 32, 38]]
NEW = 12


def greedy(method, prompt, new):
    logits = method.execute([torch.tensor([prompt]), torch.tensor([0])])[0]
    pos, out = len(prompt), []
    nxt = int(torch.argmax(logits.reshape(-1, logits.shape[-1])[-1]))
    while len(out) < new:
        out.append(nxt)
        if len(out) == new:
            break
        logits = method.execute([torch.tensor([[nxt]]), torch.tensor([pos])])[0]
        pos += 1
        nxt = int(torch.argmax(logits.reshape(-1, logits.shape[-1])[-1]))
    return out


def main():
    if NAME != "tiny_llama":  # the quantized recipes need ExecuTorch's quantized kernels
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from export_llama_ops_fixtures import load_quantized_kernels

        load_quantized_kernels()
    rt = Runtime.get()
    cases = []
    for p in PROMPTS:
        # A fresh program per prompt: the KV cache starts empty.
        prog = rt.load_program(os.path.join(DIR, "model.pte"))
        cases.append({"prompt_ids": p, "generated_ids": greedy(prog.load_method("forward"), p, NEW)})
    with open(os.path.join(DIR, "generate.json"), "w") as f:
        json.dump({"max_new_tokens": NEW, "cases": cases}, f, indent=1)
    print(json.dumps(cases))


if __name__ == "__main__":
    main()
