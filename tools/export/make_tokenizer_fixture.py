"""Writes tests/fixtures/tokenizer/: a tiny byte-level BPE tokenizer shaped like Qwen's, and
what Hugging Face's own libraries make of it, for `etch generate --prompt/--chat` tests.

The tokenizer has exactly 256 ids, so it fits the tiny Llama fixture (vocab 256): 233 byte
tokens (GPT-2's byte-to-unicode alphabet, less the control bytes 0x00-0x08, 0x0E-0x1A and
0x7F), 20 merges and 3 special tokens (<|endoftext|>, <|im_start|>, <|im_end|>). Like
Qwen2/3's tokenizer.json it has an NFC normalizer, a Split pre-tokenizer with Qwen's regex
(with the `\\s+(?!\\S)` look-ahead that needs fancy-regex rather than the `regex` crate),
then ByteLevel without its own regex, and ByteLevel decoding.

tokenizer_config.json carries a ChatML chat template in the style of Qwen3's (namespace,
reversed slices, str.startswith/split/rstrip/lstrip, tojson, raise_exception), and
generation_config.json the EOS ids. expected.json holds encodings (tokenizers), decodings
(tokenizers), and the chat rendering and ids (transformers' apply_chat_template).

    /work/venv/bin/python tools/export/make_tokenizer_fixture.py
"""

import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors
from tokenizers.pre_tokenizers import ByteLevel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DROPPED = set(range(0x00, 0x09)) | set(range(0x0E, 0x1B)) | {0x7F}
MERGES = [
    ("h", "e"), ("l", "l"), ("Ġ", "t"), ("Ġt", "he"), ("i", "n"), ("Ġ", "w"), ("o", "r"),
    ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"), ("he", "ll"), ("hell", "o"), ("Ġ", "i"),
    ("Ġi", "s"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at"), ("Ġ", "in"), ("Ġ", "a"), ("Ċ", "Ċ"),
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}{{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=messages|length - 1, searching=true) %}
{%- for message in messages[::-1] %}
    {%- set i = (messages|length - 1) - loop.index0 %}
    {%- if ns.searching and message.role == 'user' and not message.content.startswith('<tool_response>') %}
        {%- set ns.searching = false %}
        {%- set ns.last_query = i %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('unknown role: ' + message.role) }}
    {%- endif %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' + content.rstrip('\\n') + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""


def build():
    alphabet = ByteLevel.alphabet()  # the 256 byte characters, unordered
    byte_chars = {}
    # GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256 + n.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    n = 0
    for b in range(256):
        if b in printable:
            byte_chars[b] = chr(b)
        else:
            byte_chars[b] = chr(256 + n)
            n += 1
    assert set(byte_chars.values()) == set(alphabet)
    vocab = {}
    for b in range(256):
        if b not in DROPPED:
            vocab[byte_chars[b]] = len(vocab)
    for a, b in MERGES:
        assert a in vocab and b in vocab, (a, b)
        vocab[a + b] = len(vocab)
    assert len(vocab) + len(SPECIALS) == 256, len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(SPECIALS)
    assert [tok.token_to_id(s) for s in SPECIALS] == [253, 254, 255]
    return tok


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = build()
    tok.save(os.path.join(OUT, "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [255, 253]}, f, indent=2)
        f.write("\n")

    texts = ["hello world", "the cat is in the house", "Grüße, 世界!  \n\nok"]
    encode = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
    with open(os.path.join(ROOT, "tests", "fixtures", "llama_ops", "tiny_llama", "generate.json")) as f:
        cases = json.load(f)["cases"]
    id_lists = [c["generated_ids"] for c in cases] + [e["ids"] for e in encode]
    decode = [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=True)} for ids in id_lists]

    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(OUT)
    prompt = "hello world"
    rendered = hf.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    chat = {
        "prompt": prompt,
        "rendered": rendered,
        "ids": tok.encode(rendered, add_special_tokens=False).ids,
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"encode": encode, "decode": decode, "chat": chat}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")
    print(json.dumps(chat, ensure_ascii=False))
    for d in decode:
        print(repr(d["text"]))


if __name__ == "__main__":
    main()
