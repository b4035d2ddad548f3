#!/usr/bin/env python3
"""Writes a Hugging Face `tokenizer.json` for a GGUF file's byte-level BPE vocabulary.

Runtimes that take a GGUF's weights but a separate tokenizer file (candle's `quantized`
example) need one for the benchmark files of make_bench_models.py. Only `tokenizer.ggml.model
= "gpt2"` vocabularies (byte-level BPE: token list, merges, token types) are handled; tokens
of type 3 (control) and 4 (user-defined) become special added tokens.

    python tools/bench/gguf_tokenizer_json.py MODEL.gguf OUT/tokenizer.json
"""

import argparse
import json
import sys
from pathlib import Path

import gguf


def field(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    if f is None:
        sys.exit(f"{key} is missing from the GGUF file")
    return f.contents()


def tokenizer_json(path: Path) -> dict:
    """The `tokenizer.json` document for the GGUF file at `path`."""
    reader = gguf.GGUFReader(path)
    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit(f"{path}: tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is handled")
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = field(reader, "tokenizer.ggml.merges")
    types = field(reader, "tokenizer.ggml.token_type")
    if len(types) != len(tokens):
        sys.exit(f"{path}: {len(tokens)} tokens but {len(types)} token types")

    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, (t, ty) in enumerate(zip(tokens, types))
        if ty in (3, 4)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": list(merges),
        },
    }


def write(path: Path, out: Path) -> dict:
    doc = tokenizer_json(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, ensure_ascii=False))
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    doc = write(args.gguf, args.out)
    m = doc["model"]
    print(f"{args.out}: {len(m['vocab'])} tokens, {len(m['merges'])} merges, "
          f"{len(doc['added_tokens'])} special")


if __name__ == "__main__":
    main()
