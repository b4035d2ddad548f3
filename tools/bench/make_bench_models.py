#!/usr/bin/env python3
"""Random-weight GGUF files of real model shapes, for `cyb-llm bench` and llama-bench.

Speed depends on shapes and dtypes, not on trained values, so these files stand in for
SmolLM2-135M, Llama-3.2-1B and Llama-3.1-8B without downloading them. Architecture "llama"; weights
N(0, 0.02) rounded through f16 (norm weights 1), the same values in every dtype.

    /root/venv/bin/python tools/bench/make_bench_models.py [--shapes smollm2-135m,llama-3.2-1b]
        [--dtypes f16,q8_0,q4_0,q4_k_m] [--out DIR] [--force] [--jobs N] [--smollm2-gguf FILE]

Output: ${CYB_CACHE:-~/.cache/cyb-llm}/bench/<shape>-<dtype>.gguf (never in git). A file
that exists is kept (pass --force to remake it).

Tensor types per file (mirroring what llama.cpp's llama-quantize produces for the ftype):
- f16: every matrix F16; norms (and rope_freqs) F32.
- q8_0: every matrix Q8_0 (gguf.quants).
- q4_0: every matrix Q4_0 (gguf.quants), except the tied token_embd, which llama-quantize
  treats as the output matrix: Q6_K (our quantizer), or Q8_0 when its rows are not a
  multiple of 256.
- q4_k_m: llama.cpp's Q4_K_M rule (src/llama-quant.cpp): Q4_K by default; Q6_K for the tied
  token_embd (output); Q6_K for attn_v and ffn_down of layer i when
  use_more_bits(i, n) = i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2; then llama.cpp's
  fallback when a row is not a multiple of 256 values: Q4_K -> Q5_0, Q6_K -> Q8_0 (this hits
  every matrix with 576 columns in the SmolLM2 shape). Every quantized tensor of this file
  comes from cyb-llm's own quantizer (`cyb_tensor::quant::quantize`, through
  crates/cyb-cli/examples/quantize_raw.rs).
- q5_k_m: the same rule with Q5_K as the default type (fallback Q5_1 for rows that are not
  whole 256-value blocks, as llama.cpp).
- q6_k: every matrix Q6_K (fallback Q8_0), our quantizer.
In the Llama-3.1-8B shape the output matrix is its own tensor (`output.weight`, untied): it
takes the output's type above, and token_embd the default type.

The SmolLM2 shape carries the real SmolLM2 tokenizer, copied from the cached SmolLM2 GGUF
(`cyb-llm run` fetches it); the Llama shapes get a synthetic gpt2-style vocabulary of
128256 tokens (bench feeds random ids, so only its size matters).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

REPO = Path(__file__).resolve().parents[2]
QK_K = 256


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int
    rope_theta: float
    # Llama 3 rope scaling (factor, low_freq_factor, high_freq_factor, original context).
    llama3_rope: tuple[float, float, float, int] | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SHAPES = {
    "smollm2-135m": Shape("smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0),
    "llama-3.2-1b": Shape(
        "llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0, (32.0, 1.0, 4.0, 8192)
    ),
    # Untied output (llama-3.1-8b has its own output.weight).
    "llama-3.1-8b": Shape(
        "llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0, (8.0, 1.0, 4.0, 8192)
    ),
}

# Shapes whose output matrix is not the token embedding.
UNTIED = {"llama-3.1-8b"}

FILE_TYPES = {"f16": 1, "q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


def tensor_list(s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape [rows, cols]) in llama.cpp's conversion order; tied output."""
    kv = s.kv_heads * s.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (s.vocab, s.hidden))]
    if s.llama3_rope is not None:
        out.append(("rope_freqs.weight", (s.head_dim // 2,)))
    for i in range(s.layers):
        b = f"blk.{i}"
        out += [
            (f"{b}.attn_norm.weight", (s.hidden,)),
            (f"{b}.attn_q.weight", (s.hidden, s.hidden)),
            (f"{b}.attn_k.weight", (kv, s.hidden)),
            (f"{b}.attn_v.weight", (kv, s.hidden)),
            (f"{b}.attn_output.weight", (s.hidden, s.hidden)),
            (f"{b}.ffn_norm.weight", (s.hidden,)),
            (f"{b}.ffn_gate.weight", (s.ffn, s.hidden)),
            (f"{b}.ffn_up.weight", (s.ffn, s.hidden)),
            (f"{b}.ffn_down.weight", (s.hidden, s.ffn)),
        ]
    out.append(("output_norm.weight", (s.hidden,)))
    if s.name in UNTIED:
        out.append(("output.weight", (s.vocab, s.hidden)))
    return out


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def k_fallback(t: QT, cols: int) -> QT:
    if cols % QK_K == 0:
        return t
    return {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}.get(t, t)


def tensor_type(s: Shape, dtype: str, name: str, shape: tuple[int, ...]) -> QT:
    if len(shape) == 1:
        return QT.F32
    cols = shape[-1]
    if dtype == "f16":
        return QT.F16
    if dtype == "q8_0":
        return QT.Q8_0
    # llama-quantize treats a tied token_embd as the output.
    is_output = name == "output.weight" or (name == "token_embd.weight" and s.name not in UNTIED)
    if dtype == "q6_k":
        return k_fallback(QT.Q6_K, cols)
    if dtype == "q4_0":
        return k_fallback(QT.Q6_K, cols) if is_output else QT.Q4_0
    if dtype in ("q4_k_m", "q5_k_m"):
        t = QT.Q4_K if dtype == "q4_k_m" else QT.Q5_K
        if is_output:
            t = QT.Q6_K
        elif name.endswith((".attn_v.weight", ".ffn_down.weight")):
            layer = int(name.split(".")[1])
            if use_more_bits(layer, s.layers):
                t = QT.Q6_K
        return k_fallback(t, cols)
    raise ValueError(f"unknown dtype {dtype}")


def weights(s: Shape, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The f32 values of one tensor, the same for every dtype of a shape."""
    if name == "rope_freqs.weight":
        return llama3_rope_factors(s)
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    seed = zlib.crc32(f"{s.name}/{name}".encode())
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape, dtype=np.float32)
    w *= 0.02
    return w.astype(np.float16).astype(np.float32)


def llama3_rope_factors(s: Shape) -> np.ndarray:
    """Per-frequency divisors of Llama 3 rope scaling, as convert_hf_to_gguf stores them."""
    assert s.llama3_rope is not None
    factor, low, high, old_ctx = s.llama3_rope
    freqs = 1.0 / (s.rope_theta ** (np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def byte_len(t: QT, shape: tuple[int, ...]) -> int:
    block, size = gguf.GGML_QUANT_SIZES[t]
    n = int(np.prod(shape))
    assert n % block == 0
    return n // block * size


class OurQuantizer:
    """crates/cyb-cli/examples/quantize_raw.rs, built once."""

    def __init__(self, tmp: Path):
        self.exe = REPO / "target" / "debug" / "examples" / "quantize_raw"
        self.tmp = tmp
        self.built = False

    def build(self) -> None:
        if not self.built:
            try:
                build = subprocess.run(
                    ["cargo", "build", "-q", "-p", "cyb-cli", "--example", "quantize_raw"],
                    cwd=REPO,
                )
                failed = build.returncode != 0
            except FileNotFoundError:  # no cargo on this machine: a copied-in build may do
                failed = True
            if failed:
                if not self.exe.exists():
                    sys.exit("building crates/cyb-cli/examples/quantize_raw.rs failed")
                print(f"warning: the build failed; using the existing {self.exe}", file=sys.stderr)
            self.built = True

    def __call__(self, w: np.ndarray, t: QT) -> np.ndarray:
        self.build()
        # Workers of one pool share the folder: names per process.
        src, dst = self.tmp / f"in-{os.getpid()}.f32", self.tmp / f"out-{os.getpid()}.bin"
        np.ascontiguousarray(w, dtype="<f4").tofile(src)
        cols = w.shape[-1]
        subprocess.run([str(self.exe), t.name, str(cols), str(src), str(dst)], check=True)
        q = np.fromfile(dst, dtype=np.uint8)
        src.unlink()
        dst.unlink()
        return q.reshape(w.shape[0], -1)


def quantize(w: np.ndarray, t: QT, ours: OurQuantizer, use_ours: bool) -> np.ndarray:
    if t == QT.F32:
        return w.astype(np.float32)
    if t == QT.F16:
        return w.astype(np.float16)
    if use_ours or t not in (QT.Q8_0, QT.Q4_0, QT.Q5_0):
        return ours(w, t)
    # gguf.quants, in row chunks to bound the temporaries.
    rows = w.shape[0]
    row_bytes = byte_len(t, (w.shape[1],))
    out = np.empty((rows, row_bytes), dtype=np.uint8)
    step = max(1, (1 << 22) // w.shape[1])
    for r in range(0, rows, step):
        out[r : r + step] = gguf.quants.quantize(w[r : r + step], t)
    return out


def add_tokenizer(wr: gguf.GGUFWriter, s: Shape, smollm2: Path | None) -> None:
    if s.name == "smollm2-135m":
        src = smollm2 or cache_dir() / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if not src.exists():
            sys.exit(f"{src} is missing; run `cyb-llm run` once to fetch SmolLM2, then retry")
        reader = gguf.GGUFReader(src)
        for key, field in reader.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == VT.ARRAY else None
            wr.add_key_value(key, field.contents(), vtype, sub_type=sub)
        return
    # Synthetic byte-level BPE vocabulary: 256 byte symbols, all pairs of them, then
    # pair + symbol triples, up to 128000 regular tokens; 256 special tokens after.
    symbols = list(gpt2_byte_symbols())
    tokens, merges = list(symbols), []
    for a in symbols:
        for b in symbols:
            tokens.append(a + b)
            merges.append(f"{a} {b}")
    i = 0
    while len(tokens) < 128000:
        pair = tokens[256 + i // 256]
        c = symbols[i % 256]
        tokens.append(pair + c)
        merges.append(f"{pair} {c}")
        i += 1
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    specials += [f"<|reserved_special_token_{k}|>" for k in range(s.vocab - 128000 - 2)]
    types = [1] * len(tokens) + [3] * len(specials)
    tokens += specials
    assert len(tokens) == s.vocab
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("llama-bpe")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(128000)
    wr.add_eos_token_id(128001)
    wr.add_add_bos_token(True)


def gpt2_byte_symbols():
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = 0
    for b in range(256):
        if b in keep:
            yield chr(b)
        else:
            yield chr(256 + extra)
            extra += 1


def cache_dir() -> Path:
    env = os.environ.get("CYB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cyb-llm"


def tensor_data(s: Shape, name: str, shape: tuple[int, ...], t: QT, ours: OurQuantizer,
                use_ours: bool) -> np.ndarray:
    return quantize(weights(s, name, shape), t, ours, use_ours)


def make(s: Shape, dtype: str, out: Path, ours: OurQuantizer, smollm2: Path | None,
         workers: int) -> None:
    tensors = tensor_list(s)
    types = [tensor_type(s, dtype, n, sh) for n, sh in tensors]
    tmp_path = out.with_suffix(".gguf.partial")
    wr = gguf.GGUFWriter(tmp_path, "llama")
    wr.add_name(f"random-weight {s.name} shape ({dtype})")
    wr.add_description("cyb-llm benchmark model: random weights, made by tools/bench/make_bench_models.py")
    wr.add_context_length(s.context)
    wr.add_embedding_length(s.hidden)
    wr.add_block_count(s.layers)
    wr.add_feed_forward_length(s.ffn)
    wr.add_head_count(s.heads)
    wr.add_head_count_kv(s.kv_heads)
    wr.add_rope_freq_base(s.rope_theta)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_file_type(FILE_TYPES[dtype])
    wr.add_vocab_size(s.vocab)
    wr.add_rope_dimension_count(s.head_dim)
    wr.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(wr, s, smollm2)
    for (name, shape), t in zip(tensors, types):
        if t in (QT.F32, QT.F16):
            np_dtype = np.float32 if t == QT.F32 else np.float16
            wr.add_tensor_info(name, shape, np.dtype(np_dtype), byte_len(t, shape))
        else:
            byte_shape = (shape[0], byte_len(t, (shape[1],)))
            wr.add_tensor_info(name, byte_shape, np.dtype(np.uint8), byte_len(t, shape), raw_dtype=t)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    use_ours = dtype in ("q4_k_m", "q5_k_m", "q6_k")
    if any(use_ours or t not in (QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q5_0) for t in types):
        ours.build()
    jobs = [(s, name, shape, t, ours, use_ours) for (name, shape), t in zip(tensors, types)]
    # Tensors are made by a pool of processes and written in order; at most 2 per worker wait.
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        pending: collections.deque = collections.deque()

        def write_oldest() -> None:
            k, future = pending.popleft()
            wr.write_tensor_data(future.result())
            print(f"  {tensors[k][0]:28} {types[k].name:5} {tensors[k][1]}", file=sys.stderr)

        for k, job in enumerate(jobs):
            pending.append((k, pool.submit(tensor_data, *job)))
            if len(pending) > 2 * workers:
                write_oldest()
        while pending:
            write_oldest()
    wr.close()
    tmp_path.rename(out)
    evict(out)


def evict(path: Path) -> None:
    """Drops the file's pages from the page cache. Written pages stay there in 4 KiB folios, and
    a reader that maps the file while they do gets them so (cyb-llm's MADV_HUGEPAGE only applies
    to pages it faults in): on a Zen 4 VM the 135M F16 file then decoded at 82 tokens/s against
    92-98 once evicted. Evicted, the first run maps it in 2 MiB folios."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default=",".join(FILE_TYPES))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes making tensors (default: one per CPU)")
    ap.add_argument("--smollm2-gguf", type=Path, default=None,
                    help="a GGUF holding SmolLM2's tokenizer.* fields (default: the cached model)")
    args = ap.parse_args()
    out_dir = args.out or cache_dir() / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        ours = OurQuantizer(Path(tmp))
        for shape in args.shapes.split(","):
            s = SHAPES[shape]
            for dtype in args.dtypes.split(","):
                out = out_dir / f"{shape}-{dtype}.gguf"
                if out.exists() and not args.force:
                    print(f"{out} exists, kept", file=sys.stderr)
                    continue
                print(f"making {out}", file=sys.stderr)
                make(s, dtype, out, ours, args.smollm2_gguf, args.jobs)
                print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
