#!/usr/bin/env python3
"""ONNX models on `cyb-llm bench` and onnxruntime, same file, same input, same thread count,
programs alternating. Prints one markdown row per model and thread count: ms per run (median)
of each, and onnxruntime's time over ours (above 1: cyb-llm is faster).

    python3 tools/bench/onnx_vs_ort.py MODEL.onnx NAME=1x3x320x320 [--threads 1,2]
        [--reps 10] [--rounds 3] [--bin target/release/cyb-llm] [--backend cpu]

One float input of the given shape, random values in [-1, 1) (a fixed seed), written as .npy
and given to both. onnxruntime runs with default graph optimizations,
`intra_op_num_threads` = threads and `inter_op_num_threads` = 1, timed after one warm-up run.
Needs numpy and onnxruntime (a venv outside the repository).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def ours(args, model: str, name: str, npy: Path, threads: int) -> float:
    cmd = [args.bin, "bench", model, "--input", f"{name}={npy}", "-r", str(args.reps),
           "-t", str(threads), "--backend", args.backend, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)[0]["median_ns"] / 1e6


def theirs(args, model: str, name: str, x: np.ndarray, threads: int) -> float:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    sess.run(None, {name: x})
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("input", help="NAME=DIMS, e.g. x=1x3x320x320")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="target/release/cyb-llm")
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    name, dims = args.input.split("=", 1)
    shape = [int(d) for d in dims.split("x")]
    x = (np.random.default_rng(7).random(shape, dtype=np.float32) * 2 - 1).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        npy = Path(tmp) / "x.npy"
        np.save(npy, x)
        for threads in [int(t) for t in args.threads.split(",")]:
            a, b = [], []
            for _ in range(args.rounds):
                a.append(ours(args, args.model, name, npy, threads))
                b.append(theirs(args, args.model, name, x, threads))
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {Path(args.model).name} | {dims} | {threads} | {ma:.1f} | {mb:.1f} | "
                  f"{mb / ma:.2f}× |")


if __name__ == "__main__":
    main()
