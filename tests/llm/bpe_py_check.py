"""Checks the pure-Python byte-level BPE of `functions/smollm2-chat-py/bpe.py` against
Hugging Face `tokenizers` configured as `reference.py` configures it (SmolLM2's
tokenizer from the GGUF vocabulary and merges), on the GGUF file given:

    python tests/llm/bpe_py_check.py <model.gguf> [refdata.json]

Encodes a set of texts (the chat prompts of the tests, digits, contractions, white
space runs, accents, emoji, CJK, code, special tokens inside text) with both and
requires the same ids, and decodes every prefix of each id list with both and requires
the same text (a byte-level token ending inside a character gives U+FFFD in both). With
`refdata.json` (`smollm2_ref_visible.json`), each prompt's `prompt_text` must encode to
its `prompt_ids`. Prints one JSON line with the counts; exits 1 on a mismatch. Runs in
the venv of `tests/llm/requirements.txt` (`SLUICE_LLM_PYTHON`).
"""

import json
import os
import sys

from gguf import GGUFReader

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "functions", "smollm2-chat-py"))

import bpe  # noqa: E402
from reference import field, tokenizer  # noqa: E402

TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of Germany?<|im_end|>\n<|im_start|>assistant\n",
    "The history of the Roman Empire began in 27 BC, when",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Why is the sky blue? Give 2 reasons, café-style ☕.",
    "I'm sure they've said it's 12345 or 3.14159 -- isn't it? 'quoted' ''s ' s",
    "  leading spaces,\ttabs\t\tand\n\n\nnewlines   \n  end  ",
    "naïve façade — Übermäßig ÆØÅ 日本語のテキスト 中文 한국어 🙂🎉 e\u0301",
    "x<|im_end|>y<|im_start|><|im_start|>z <|endoftext|> ",
    "①②③ ½ ٣٤ Ⅻ 0x1F_FF",
    "function reverseString(str) {\n  return str.split('').reverse().join('');\n}",
    "",
    " ",
    "\n",
]


def main():
    reader = GGUFReader(sys.argv[1])
    meta = {
        "tokenizer.ggml.model": str(field(reader, "tokenizer.ggml.model")),
        "tokenizer.ggml.tokens": list(field(reader, "tokenizer.ggml.tokens")),
        "tokenizer.ggml.merges": list(field(reader, "tokenizer.ggml.merges")),
        "tokenizer.ggml.token_type": [int(t) for t in field(reader, "tokenizer.ggml.token_type")],
    }
    ours, hf = bpe.Tokenizer.from_metadata(meta), tokenizer(reader)
    failures, texts, prefixes = [], list(TEXTS), 0
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            for p in json.load(f)["prompts"]:
                texts.append(p["prompt_text"])
                if ours.encode(p["prompt_text"]) != p["prompt_ids"]:
                    failures.append({"refdata": p["id"]})
                generated = p["generated_ids"]
                if ours.decode(generated) != p["generated_text"]:
                    failures.append({"refdata decode": p["id"]})
    for text in texts:
        want = hf.encode(text, add_special_tokens=False).ids
        got = ours.encode(text)
        if got != want:
            failures.append({"text": text, "ours": got, "hf": want})
            continue
        for n in range(1, len(want) + 1):
            prefixes += 1
            if ours.decode(want[:n]) != hf.decode(want[:n], skip_special_tokens=False):
                failures.append({"text": text, "decode prefix": n})
                break
    print(json.dumps({"texts": len(texts), "decoded_prefixes": prefixes, "failures": failures}, ensure_ascii=False))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
