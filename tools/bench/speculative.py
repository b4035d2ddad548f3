#!/usr/bin/env python3
"""Speculative decoding, measured: `cyb-llm run` of one model alone and with a draft model
(or, with DRAFT `lookup`, prompt lookup: `--draft-lookup`) at several draft lengths, repeats
alternated, greedy (--temp 0), the same prompt and token count. Prints one markdown table:
median decode tokens/s over the repeats, the ratio to the model alone, and the share of
proposed tokens the model accepted.

    python3 tools/bench/speculative.py MODEL DRAFT|lookup [--draft-max 2,4,8] [--tokens 128]
        [--reps 3] [--threads 2] [--bin target/release/cyb-llm] [--raw] [--task story|edit]

`--task edit` asks the model to repeat a short program with one change (an answer that copies
its input, where prompt lookup helps); `story` (default) asks for new text.

Standard library only.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

PROMPTS = {
    "story": "Write a short story about a robot who learns to paint.",
    "edit": (
        "Rewrite this Python function so that it is called total_price instead of f, and "
        "change nothing else. Answer with the code only.\n\n"
        "def f(items, tax):\n"
        "    subtotal = 0\n"
        "    for item in items:\n"
        "        subtotal += item.price * item.quantity\n"
        "    discount = 0.1 * subtotal if subtotal > 100 else 0\n"
        "    return (subtotal - discount) * (1 + tax)\n"
    ),
}


def one(args, draft_max: int | None) -> tuple[float, float | None]:
    cmd = [args.bin, "run", args.model, PROMPTS[args.task], "--temp", "0", "-n", str(args.tokens),
           "-t", str(args.threads), "--ignore-eos"]
    if args.raw:
        cmd.append("--raw")
    if draft_max is not None:
        drafter = ["--draft-lookup"] if args.draft == "lookup" else ["--draft", args.draft]
        cmd += drafter + ["--draft-max", str(draft_max)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    tps = re.search(r"decode ([0-9.]+) tok/s", out.stderr)
    acc = re.search(r"draft: (\d+) of (\d+) proposed", out.stderr)
    if not tps:
        sys.exit(f"no decode rate in:\n{out.stderr}")
    rate = None
    if acc:
        rate = int(acc.group(1)) / max(1, int(acc.group(2)))
    return float(tps.group(1)), rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("draft")
    ap.add_argument("--draft-max", default="2,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default="target/release/cyb-llm")
    ap.add_argument("--raw", action="store_true", help="feed the prompt without a chat template")
    ap.add_argument("--task", choices=sorted(PROMPTS), default="story")
    args = ap.parse_args()
    configs: list[int | None] = [None] + [int(k) for k in args.draft_max.split(",")]
    one(args, None)  # warm the page cache
    one(args, configs[-1])
    results: dict[int | None, list[tuple[float, float | None]]] = {c: [] for c in configs}
    for _ in range(args.reps):
        for c in configs:
            results[c].append(one(args, c))
    base = statistics.median(r[0] for r in results[None])
    print("| draft tokens per step | decode tok/s | × alone | accepted |")
    print("|---|---:|---:|---:|")
    for c in configs:
        tps = statistics.median(r[0] for r in results[c])
        accs = [r[1] for r in results[c] if r[1] is not None]
        acc = f"{100 * statistics.median(accs):.1f}%" if accs else "–"
        name = "none (model alone)" if c is None else str(c)
        print(f"| {name} | {tps:.1f} | {tps / base:.2f} | {acc} |")


if __name__ == "__main__":
    main()
