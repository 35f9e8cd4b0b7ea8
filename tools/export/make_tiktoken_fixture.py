#!/usr/bin/env python3
"""A tiny tiktoken-format tokenizer (Llama 3's file format: one "base64(bytes) rank" line
per token) and the ids tiktoken gives for some prompts, for etch's tiktoken support.

    /work/venv/bin/python tools/export/make_tiktoken_fixture.py

Writes tests/fixtures/tiktoken/{tokenizer.model,expected.json}. The BPE is trained on a
small corpus with tiktoken's educational trainer (Llama 3's pre-tokenizer pattern); the
oracle is tiktoken itself (what Llama 3's reference tokenizer runs), with Llama 3's 256
special tokens after the base vocabulary as ExecuTorch's runner places them. Where
pytorch_tokenizers' C++ Tiktoken (ExecuTorch's runner) gives other ids, they are
recorded as `executorch_runner_ids`.
"""
import base64
import json
import os

import tiktoken
from tiktoken._educational import SimpleBytePairEncoding
from pytorch_tokenizers import CppTiktoken
from pytorch_tokenizers.constants import CL100K_PAT_STR, LLAMA_SPECIAL_TOKENS

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "tiktoken")

CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!
It's 2026 and we're running 35 billion parameters at 461 tokens per second, aren't we?
Hello, world. Hello again, world: hello hello HELLO.
Café, naïve, résumé — unicode text. 日本語のテキスト。 Emoji: 🙂🚀.
    indented code:  def f(x):\\n        return x * 2  # comment
Numbers 1234567890 and 3.14159, email test@example.com, path /usr/local/bin.
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    enc = SimpleBytePairEncoding.train(CORPUS * 4, vocab_size=256 + 160, pat_str=CL100K_PAT_STR)
    ranks = enc.mergeable_ranks
    path = os.path.join(OUT, "tokenizer.model")
    with open(path, "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    n = len(ranks)
    specials = {t: n + i for i, t in enumerate(LLAMA_SPECIAL_TOKENS)}
    ref = tiktoken.Encoding("tiny", pat_str=CL100K_PAT_STR, mergeable_ranks=ranks,
                            special_tokens=specials)
    cpp = CppTiktoken()
    cpp.load(path)
    texts = [
        "The quick brown fox.",
        "Hello, world!  It's 2026; we're here.",
        "Café — naïve 日本 🙂 emoji 🚀 and unseen words: zebra quokka",
        "line one\nline two\n\n  indented\tand tabbed   \n",
        "12345678 digits, 3.14159",
        "<|begin_of_text|>special <|eot_id|> tokens<|start_header_id|>user<|end_header_id|>",
        "",
    ]
    cases = []
    for t in texts:
        ids = ref.encode(t, allowed_special="all")
        case = {"text": t, "ids": ids, "decoded": ref.decode(ids)}
        runner = cpp.encode(t, 0, 0)
        assert cpp.encode(t, 1, 0) == [specials["<|begin_of_text|>"]] + runner, t
        if runner != ids:
            # pytorch_tokenizers' C++ Tiktoken splits a run of spaces before a word
            # differently from tiktoken (Llama 3's reference): recorded, not followed.
            case["executorch_runner_ids"] = runner
        cases.append(case)
    meta = {
        "base_tokens": n,
        "vocab_size": cpp.vocab_size(),
        "bos": cpp.bos_tok(),
        "eos": cpp.eos_tok(),
        "cases": cases,
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print(f"{n} base tokens, vocab {meta['vocab_size']}, bos {meta['bos']}, eos {meta['eos']}, "
          f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
