#!/usr/bin/env python3
"""cyb-llm bench and llama.cpp's llama-bench side by side on the same GGUF files.

    /root/venv/bin/python tools/bench/compare.py MODEL.gguf... \
        [--cyb target/release/cyb-llm] [--llama-bench PATH] [-t 2 -p 128 -n 64 -r 3]
        [--bandwidth GBPS] [--only cyb|llama] [--results DIR]

Both tools get the same file, threads and -p/-n/-r, and print JSON with llama-bench's field
names; this script takes the median of each test's `samples_ts` on both sides and prints one
markdown row per file: pp and tg t/s, the ratios cyb/llama.cpp, and the decode floor
(bandwidth / weight bytes read per token; see `bytes_per_token`).

Because the machine may be shared, each run waits (up to --quiet-timeout seconds) until the
CPUs are idle (busy below --quiet-busy over two seconds, from /proc/stat), and is repeated (up
to --attempts) when other processes took more than --quiet-busy of the CPU time while it ran;
the least disturbed run is kept. That share is printed in the last column and stored with the
raw JSON in --results (default ${CYB_CACHE:-~/.cache/cyb-llm}/bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_bench_models import cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LLAMA_BENCH = Path("/root/build/llama.cpp/build2/bin/llama-bench")


def cpu_busy(interval: float = 2.0) -> float:
    """Fraction of all CPUs busy over `interval` seconds."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]  # idle + iowait
        return idle, sum(v)

    i0, t0 = sample()
    time.sleep(interval)
    i1, t1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(max_busy: float, timeout: float) -> float:
    deadline = time.time() + timeout
    while True:
        busy = cpu_busy()
        if busy <= max_busy or time.time() > deadline:
            return busy
        print(f"  waiting: CPUs {busy:.0%} busy", file=sys.stderr)


def bytes_per_token(path: Path) -> int:
    """Weight bytes one decode step reads: every tensor once, except that an untied
    token_embd is only gathered (one row), not read whole. KV-cache reads are left out (small
    at these context lengths)."""
    r = gguf.GGUFReader(path)
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        n = int(t.n_bytes)
        if t.name == "token_embd.weight" and "output.weight" in names:
            rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
            n //= max(1, rows)
        total += n
    return total


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v)
    return total - v[3] - v[4], total


def run_json(cmd: list[str]) -> tuple[list[dict], float]:
    """The command's JSON, and the share of the machine's CPU time that other processes used
    while it ran (0: it had the machine to itself)."""
    print("  $ " + " ".join(cmd), file=sys.stderr)
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = cpu_jiffies()
    c0 = os.times()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    c1 = os.times()
    b1, t1 = cpu_jiffies()
    ours = (c1.children_user - c0.children_user + c1.children_system - c0.children_system) * hz
    others = max(0.0, (b1 - b0 - ours) / max(1, t1 - t0))
    return json.loads(out), others


def measure(cmd: list[str], args: argparse.Namespace) -> tuple[list[dict], float]:
    """Runs `cmd` after waiting for idle CPUs, again (up to --attempts) while other processes
    took more than --quiet-busy of the CPU time during the run; keeps the least disturbed."""
    best: tuple[list[dict], float] | None = None
    for _ in range(args.attempts):
        wait_quiet(args.quiet_busy, args.quiet_timeout)
        res = run_json(cmd)
        print(f"  others used {res[1]:.0%} of the CPU time during the run", file=sys.stderr)
        if best is None or res[1] < best[1]:
            best = res
        if res[1] <= args.quiet_busy:
            break
    assert best is not None
    return best


def medians(tests: list[dict]) -> dict[str, float]:
    m = {}
    for t in tests:
        key = "pp" if t["n_gen"] == 0 else "tg"
        m[key] = statistics.median(t["samples_ts"])
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--report", nargs="+", type=Path, default=[],
                    help="print the table from saved result JSON files instead of running")
    ap.add_argument("--cyb", type=Path, default=REPO / "target" / "release" / "cyb-llm")
    ap.add_argument("--llama-bench", type=Path, default=DEFAULT_LLAMA_BENCH)
    ap.add_argument("--backend", default=None, help="cyb-llm --backend (default: its default)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-d", type=int, default=0, help="tokens already in the context (llama-bench -d)")
    ap.add_argument("--bandwidth", type=float, default=None, help="read bandwidth, GB/s")
    ap.add_argument("--only", choices=["cyb", "llama"], default=None)
    ap.add_argument("--quiet-busy", type=float, default=0.15)
    ap.add_argument("--quiet-timeout", type=float, default=300)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()

    results = args.results or cache_dir() / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    common = ["-t", str(args.t), "-p", str(args.p), "-n", str(args.n), "-r", str(args.r)]
    if args.d:
        common += ["-d", str(args.d)]

    rows = [json.loads(p.read_text()) for p in args.report]
    for model in args.models:
        print(model, file=sys.stderr)
        rec: dict = {"model": str(model), "bytes_per_token": bytes_per_token(model)}
        if args.only != "cyb":
            cmd = [str(args.llama_bench), "-m", str(model), *common, "-o", "json"]
            rec["llama"], rec["llama_others_busy"] = measure(cmd, args)
        if args.only != "llama":
            cmd = [str(args.cyb), "bench", str(model), *common, "--json"]
            if args.backend:
                cmd += ["--backend", args.backend]
            rec["cyb"], rec["cyb_others_busy"] = measure(cmd, args)
        out = results / f"{stamp}-{model.stem}.json"
        out.write_text(json.dumps(rec, indent=1))
        rows.append(rec)

    p, n = args.p, args.n
    if args.d:
        p, n = f"{p} @ d{args.d}", f"{n} @ d{args.d}"
    print(f"| file | llama.cpp pp{p} | cyb pp{p} | ratio | llama.cpp tg{n} | cyb tg{n} | ratio "
          f"| MB/token | floor tg t/s | cyb % of floor | others' CPU llama/cyb |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for rec in rows:
        ll = medians(rec.get("llama", []))
        cy = medians(rec.get("cyb", []))

        def fmt(d: dict, k: str) -> str:
            return f"{d[k]:.1f}" if k in d else "–"

        def ratio(k: str) -> str:
            return f"{cy[k] / ll[k]:.2f}×" if k in cy and k in ll else "–"

        def busy(r: dict, side: str) -> str:
            k = f"{side}_others_busy"
            return f"{r[k]:.0%}" if k in r else "–"

        mb = rec["bytes_per_token"] / 1e6
        if args.bandwidth:
            floor = args.bandwidth * 1e9 / rec["bytes_per_token"]
            floor_s = f"{floor:.1f}"
            pct = f"{100 * cy['tg'] / floor:.0f}%" if "tg" in cy else "–"
        else:
            floor_s = pct = "–"
        print(f"| {Path(rec['model']).name} | {fmt(ll, 'pp')} | {fmt(cy, 'pp')} | {ratio('pp')} "
              f"| {fmt(ll, 'tg')} | {fmt(cy, 'tg')} | {ratio('tg')} | {mb:.0f} | {floor_s} | {pct} "
              f"| {busy(rec, 'llama')}/{busy(rec, 'cyb')} |")
    print(f"\nraw JSON: {results}/{stamp}-*.json", file=sys.stderr)


if __name__ == "__main__":
    main()
