#!/usr/bin/env python3
"""mistral.rs and candle on the benchmark GGUF files, next to compare.py's table.

    /root/venv/bin/python tools/bench/others.py MODEL.gguf... \
        [--mistralrs PATH] [--candle PATH] [-p 128 -n 64 -r 3] [--results DIR]

Neither tool has llama-bench's JSON, so this script runs each the way its authors measure:

- mistral.rs: `mistralrs bench --cpu --prompt-len P --gen-len N --iterations R text -m DIR
  --format gguf -f FILE` (its own warm-up run first). It prints the mean ± standard deviation
  of R runs; prefill is P prompt tokens plus one generated token, decode is N generated tokens
  after a 4-token prompt, both timed from request to response (sampling included).
- candle: the `quantized` example of the candle-examples crate, `--cpu --temperature 0
  --repeat-penalty 1 -n N+1` with a prompt of exactly P tokens (found with the `tokenizers`
  package on a tokenizer.json written from the GGUF's own vocabulary by
  gguf_tokenizer_json.py). It prints prompt tokens/s (one forward over the prompt) and
  generated tokens/s (N single-token forwards, greedy argmax); one warm-up run is discarded and
  the median of R runs is kept.

Both use all cores (rayon / candle's own pool; pass RAYON_NUM_THREADS to change that). Output:
one markdown row per file, and the raw figures as JSON in --results (default
${CYB_CACHE:-~/.cache/cyb-llm}/bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_tokenizer_json  # noqa: E402
from make_bench_models import cache_dir  # noqa: E402

# Text whose tokens the prompt is cut from; any text works, the weights are random.
FILLER = (
    "The river ran past the old mill, where the miller counted sacks of grain by lamplight "
    "and the children argued about the shapes of clouds over the hills. "
)


def run(cmd: list[str], env: dict | None = None) -> str:
    print("  $ " + " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).splitlines()[-15:])
        raise RuntimeError(f"{cmd[0]} exited with {res.returncode}:\n{tail}")
    return res.stdout + res.stderr


def mistralrs(exe: Path, model: Path, args: argparse.Namespace) -> dict:
    cmd = [str(exe), "bench", "--prompt-len", str(args.p), "--gen-len", str(args.n),
           "--iterations", str(args.r), "text", "-m", str(model.parent), "--format", "gguf",
           "-f", model.name, "--cpu"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = run(cmd, env)
    rec: dict = {"cmd": cmd}
    for key, label in (("pp", f"Prefill ({args.p} tokens)"), ("tg", f"Decode ({args.n} tokens)")):
        m = re.search(re.escape(label) + r"\s*┆\s*([0-9.]+)\s*±\s*([0-9.]+)", out)
        if not m:
            raise RuntimeError(f"no '{label}' row in mistralrs output:\n{out[-2000:]}")
        rec[key] = float(m.group(1))
        rec[key + "_std"] = float(m.group(2))
    return rec


def exact_prompt(tok, n: int) -> str:
    """A prefix of repeated FILLER that encodes to exactly `n` tokens."""
    text = FILLER * (n // 8 + 2)
    while len(tok.encode(text).ids) < n:
        text += FILLER
    lo, hi = 0, len(text)
    while lo < hi:  # shortest prefix with >= n tokens
        mid = (lo + hi) // 2
        if len(tok.encode(text[:mid]).ids) >= n:
            hi = mid
        else:
            lo = mid + 1
    for end in range(lo, min(len(text), lo + 64)):
        if len(tok.encode(text[:end]).ids) == n:
            return text[:end]
    raise RuntimeError(f"no prefix of the filler text encodes to exactly {n} tokens")


def candle(exe: Path, model: Path, args: argparse.Namespace) -> dict:
    from tokenizers import Tokenizer

    tj = cache_dir() / "bench" / "tokenizers" / model.stem / "tokenizer.json"
    if not tj.exists():
        gguf_tokenizer_json.write(model, tj)
    tok = Tokenizer.from_file(str(tj))
    vocab = tok.get_vocab(with_added_tokens=True)
    # --which only picks the end-of-text token the example stops at (and a tokenizer repo we
    # do not use); the weights and shapes come from the GGUF file.
    if "<|end_of_text|>" in vocab:
        which = "llama3-8b"
    elif "<|endoftext|>" in vocab:
        which = "SmoLM2-360M-Instruct"
    else:
        raise RuntimeError(f"{tj}: neither <|end_of_text|> nor <|endoftext|> is in the vocabulary")
    prompt = exact_prompt(tok, args.p)
    cmd = [str(exe), "--cpu", "--model", str(model), "--tokenizer", str(tj), "--which", which,
           "--prompt", prompt, "-n", str(args.n + 1), "--temperature", "0",
           "--repeat-penalty", "1"]
    pp, tg, gen = [], [], []
    for i in range(args.r + 1):
        out = run(cmd)
        m1 = re.search(r"(\d+) prompt tokens processed: ([0-9.]+) token/s", out)
        m2 = re.search(r"(\d+) tokens generated: ([0-9.]+) token/s", out)
        if not (m1 and m2):
            raise RuntimeError(f"no speed lines in the candle output:\n{out[-2000:]}")
        if int(m1.group(1)) != args.p:
            raise RuntimeError(f"candle saw {m1.group(1)} prompt tokens, not {args.p}")
        if i == 0:
            continue  # warm-up
        pp.append(float(m1.group(2)))
        tg.append(float(m2.group(2)))
        gen.append(int(m2.group(1)))
    return {"cmd": cmd[:6] + ["..."], "which": which, "pp": statistics.median(pp),
            "tg": statistics.median(tg), "pp_samples": pp, "tg_samples": tg, "generated": gen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--mistralrs", type=Path, default=None, help="the mistralrs binary")
    ap.add_argument("--candle", type=Path, default=None, help="candle's `quantized` example binary")
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    if not (args.mistralrs or args.candle):
        ap.error("give --mistralrs PATH, --candle PATH or both")

    results = args.results or cache_dir() / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")

    rows = []
    for model in args.models:
        print(model, file=sys.stderr)
        rec: dict = {"model": str(model), "p": args.p, "n": args.n, "r": args.r}
        for name, exe, fn in (("mistralrs", args.mistralrs, mistralrs), ("candle", args.candle, candle)):
            if exe is None:
                continue
            try:
                rec[name] = fn(exe, model, args)
            except RuntimeError as e:
                print(f"  {name} failed: {e}", file=sys.stderr)
                rec[name] = {"error": str(e)}
        (results / f"{stamp}-others-{model.stem}.json").write_text(json.dumps(rec, indent=1))
        rows.append(rec)

    print(f"| file | mistral.rs pp{args.p} | mistral.rs tg{args.n} | candle pp{args.p} | candle tg{args.n} |")
    print("|---|---:|---:|---:|---:|")
    for rec in rows:
        def cell(name: str, k: str) -> str:
            r = rec.get(name)
            if not r:
                return "–"
            if "error" in r:
                return "failed"
            s = f"{r[k]:.1f}"
            return s + (f" ± {r[k + '_std']:.1f}" if k + "_std" in r else "")

        print(f"| {Path(rec['model']).name} | {cell('mistralrs', 'pp')} | {cell('mistralrs', 'tg')} "
              f"| {cell('candle', 'pp')} | {cell('candle', 'tg')} |")
    print(f"\nraw JSON: {results}/{stamp}-others-*.json", file=sys.stderr)


if __name__ == "__main__":
    main()
