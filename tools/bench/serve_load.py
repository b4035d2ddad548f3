#!/usr/bin/env python3
"""cyb-llm serve and llama.cpp's llama-server side by side under concurrent streamed chats.

    python3 tools/bench/serve_load.py MODEL.gguf [--clients 1,4,16] [--requests 2]
        [--max-tokens 64] [--threads 2] [--cyb target/release/cyb-llm]
        [--llama-server PATH] [--only cyb|llama] [--extra-cyb "--batch-tokens 0"]

For each client count N, each server is started on the same GGUF with N generation slots
(`--parallel N` / `-np N`, llama-server's continuous batching on, as by default) and the same
threads, then N clients each send --requests streamed `/v1/chat/completions` requests one
after another (temperature 0, `max_tokens` fixed, `ignore_eos` so every answer has the same
length, a different short prompt per request). Reported per server and N:

- aggregate tokens/s: completion tokens of all requests / wall time from the first request to
  the last answer;
- TTFT p50/p99: from sending a request to its first streamed content;
- ITL p50: median over requests of the time per token after the first
  ((last chunk - first chunk) / (completion tokens - 1)).

Only the Python standard library is used (threads and http.client), so the client costs the
same for both servers. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "List some facts about the moon.",
    "Describe a walk through a forest in autumn.",
    "What makes bread rise?",
    "Tell me about the history of maps.",
    "How do bees make honey?",
    "Describe the sound of rain on a roof.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def one_request(port: int, prompt: str, max_tokens: int) -> dict:
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    times, tokens = [], None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            tokens = ev["usage"].get("completion_tokens")
        for ch in ev.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                times.append(time.perf_counter())
    c.close()
    if not times:
        raise RuntimeError("no content streamed")
    n = tokens if tokens is not None else len(times)
    return {
        "ttft": times[0] - t0,
        # A chunk may carry several tokens (bytes that complete one character): the time
        # per token after the first, over the whole answer.
        "itl": (times[-1] - times[0]) / max(1, n - 1),
        "tokens": n,
        "end": times[-1],
    }


def load(port: int, clients: int, requests: int, max_tokens: int) -> dict:
    results, errors = [], []
    lock = threading.Lock()

    def client(k: int) -> None:
        for j in range(requests):
            prompt = PROMPTS[(k * requests + j) % len(PROMPTS)] + f" (#{k}.{j})"
            try:
                r = one_request(port, prompt, max_tokens)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return
            with lock:
                results.append(r)

    # One request first so both servers have warmed up (page cache, first allocations).
    one_request(port, PROMPTS[0], 4)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    wall = max(r["end"] for r in results) - t0
    ttft = sorted(r["ttft"] for r in results)
    itl = [r["itl"] for r in results]

    def pct(v: list[float], p: float) -> float:
        return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]

    return {
        "tps": sum(r["tokens"] for r in results) / wall,
        "ttft_p50": pct(ttft, 0.5),
        "ttft_p99": pct(ttft, 0.99),
        "itl_p50": statistics.median(itl) if itl else 0.0,
    }


def start(kind: str, args, model: Path, clients: int, port: int) -> subprocess.Popen:
    ctx = 512
    if kind == "cyb":
        cmd = [
            str(args.cyb), "serve", str(model), "--alias", "m", "--port", str(port),
            "--parallel", str(clients), "--ctx", str(ctx), "-t", str(args.threads),
        ] + args.extra_cyb.split()
    else:
        cmd = [
            str(args.llama_server), "-m", str(model), "--alias", "m", "--port", str(port),
            "-np", str(clients), "-c", str(ctx * clients), "-t", str(args.threads),
            "-tb", str(args.threads), "--no-webui",
        ] + args.extra_llama.split()
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cyb", type=Path, default=REPO / "target/release/cyb-llm")
    ap.add_argument(
        "--llama-server",
        type=Path,
        default=Path(os.environ.get("LLAMA_SERVER", "llama-server")),
    )
    ap.add_argument("--only", choices=["cyb", "llama"])
    ap.add_argument("--extra-cyb", default="")
    ap.add_argument("--extra-llama", default="")
    args = ap.parse_args()

    kinds = [k for k in ("llama", "cyb") if args.only in (None, k)]
    rows = []
    for n in [int(x) for x in args.clients.split(",")]:
        row = {"clients": n}
        for kind in kinds:
            port = free_port()
            proc = start(kind, args, args.model, n, port)
            try:
                wait_ready(port, proc)
                row[kind] = load(port, n, args.requests, args.max_tokens)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    def cell(r: dict | None) -> str:
        if not r:
            return "–"
        return (
            f"{r['tps']:.1f} | {r['ttft_p50']:.2f} / {r['ttft_p99']:.2f} s | "
            f"{r['itl_p50'] * 1e3:.0f} ms"
        )

    head = " | ".join(
        f"{k} agg tok/s | {k} TTFT p50 / p99 | {k} ITL p50" for k in kinds
    )
    print(f"| clients | {head} | ratio |")
    print("|---" * (2 + 3 * len(kinds)) + "|")
    for row in rows:
        cells = " | ".join(cell(row.get(k)) for k in kinds)
        ratio = "–"
        if "cyb" in row and "llama" in row:
            ratio = f"{row['cyb']['tps'] / row['llama']['tps']:.2f}×"
        print(f"| {row['clients']} | {cells} | {ratio} |")


if __name__ == "__main__":
    main()
