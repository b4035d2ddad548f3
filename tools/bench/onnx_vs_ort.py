#!/usr/bin/env python3
"""ONNX models on `cyb-llm bench` and onnxruntime, same file, same inputs, same thread count,
programs alternating. Prints one markdown row per model and thread count: ms per run (median)
of each, onnxruntime's time over ours (above 1: cyb-llm is faster), and cyb-llm's first run.

    python3 tools/bench/onnx_vs_ort.py --suite [--threads 1,2] [--reps 10] [--rounds 3]
    python3 tools/bench/onnx_vs_ort.py MODEL.onnx NAME=1x3x320x320 [NAME=FILE.npy ...]
        [--threads 1,2] [--reps 10] [--rounds 3] [--bin target/release/cyb-llm] [--backend cpu]

`--suite` runs the models the project checks against onnxruntime, from the cache that
tools/fetch_onnx_models.sh and tools/fetch_silero_vad.sh fill (missing ones are skipped with a
note): the PP-OCRv4 recognizer (1x3x48x320) and detector (1x3x320x320, 1x3x640x640), the
YOLOv8n document layout detector (1x3x1024x1024), the Piper voice en_US-joe-medium (124
phoneme ids, scales [0, 1, 0]: no noise), Silero VAD v5 (one 512-sample chunk with its
state), torchvision's MobileNetV2 and ResNet-50 (1x3x224x224, exported by
tools/bench/export_torchvision.py), and a YOLOv8n at 640 (random weights, exported by
tools/bench/export_yolov8n.py). Float inputs hold random values in [-1, 1) (a fixed seed), phoneme ids random ids
below the voice's symbol count. Given a model instead, each NAME=DIMS is a float input of that
shape and each NAME=FILE.npy an input read from the file.

onnxruntime runs with default graph optimizations, `intra_op_num_threads` = threads and
`inter_op_num_threads` = 1, timed after one warm-up run. Needs numpy and onnxruntime (a venv
outside the repository).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

CACHE = Path(os.environ.get("CYB_CACHE", Path.home() / ".cache" / "cyb-llm"))


def floats(*shape: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.random(shape, dtype=np.float32) * 2 - 1).astype(np.float32)


def piper_inputs() -> dict[str, np.ndarray]:
    ids = np.random.default_rng(7).integers(1, 150, size=(1, 124), dtype=np.int64)
    return {"input": ids, "input_lengths": np.array([124], np.int64),
            "scales": np.array([0.0, 1.0, 0.0], np.float32)}


def silero_inputs() -> dict[str, np.ndarray]:
    return {"input": floats(1, 512) * 0.1, "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64)}


# name, file under the cache, what the input column says, inputs
SUITE = [
    ("PP-OCRv4 recognizer", "onnx-models/ppocr-v4/ch_PP-OCRv4_rec_infer.onnx", "1×3×48×320",
     lambda: {"x": floats(1, 3, 48, 320)}),
    ("PP-OCRv4 detector", "onnx-models/ppocr-v4/ch_PP-OCRv4_det_infer.onnx", "1×3×320×320",
     lambda: {"x": floats(1, 3, 320, 320)}),
    ("PP-OCRv4 detector", "onnx-models/ppocr-v4/ch_PP-OCRv4_det_infer.onnx", "1×3×640×640",
     lambda: {"x": floats(1, 3, 640, 640)}),
    ("YOLOv8n layout detector", "onnx-models/layout/yolov8n-doclaynet.onnx", "1×3×1024×1024",
     lambda: {"images": floats(1, 3, 1024, 1024) * 0.5 + 0.5}),
    ("YOLOv8n (COCO shape)", "onnx-models/yolov8n/yolov8n-640.onnx", "1×3×640×640",
     lambda: {"images": floats(1, 3, 640, 640) * 0.5 + 0.5}),
    ("Piper en_US-joe-medium", "onnx-models/piper/en_US-joe-medium.onnx", "124 phoneme ids",
     piper_inputs),
    ("Silero VAD v5", "silero-vad/silero_vad.onnx", "one 512-sample chunk", silero_inputs),
    ("MobileNetV2 (torchvision)", "onnx-models/torchvision/mobilenet_v2.onnx", "1×3×224×224",
     lambda: {"x": floats(1, 3, 224, 224)}),
    ("ResNet-50 (torchvision)", "onnx-models/torchvision/resnet50.onnx", "1×3×224×224",
     lambda: {"x": floats(1, 3, 224, 224)}),
]


def ours(args, model: str, files: dict[str, Path], threads: int) -> tuple[float, float]:
    """Median and first-run ms."""
    cmd = [args.bin, "bench", model, "-r", str(args.reps), "-t", str(threads),
           "--backend", args.backend, "--json"]
    for name, path in files.items():
        cmd += ["--input", f"{name}={path}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{out.stderr}")
    r = json.loads(out.stdout)[0]
    return r["median_ns"] / 1e6, r["first_ns"] / 1e6


def theirs(args, model: str, feeds: dict[str, np.ndarray], threads: int) -> float:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def compare(args, label: str, model: str, what: str, feeds: dict[str, np.ndarray]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for i, (name, x) in enumerate(feeds.items()):
            files[name] = Path(tmp) / f"in{i}.npy"
            np.save(files[name], x)
        for threads in [int(t) for t in args.threads.split(",")]:
            a, b, first = [], [], []
            for _ in range(args.rounds):
                ms, first_ms = ours(args, model, files, threads)
                a.append(ms)
                first.append(first_ms)
                b.append(theirs(args, model, feeds, threads))
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {label} | {what} | {threads} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f}× | "
                  f"{statistics.median(first):.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("inputs", nargs="*", help="NAME=DIMS (e.g. x=1x3x320x320) or NAME=FILE.npy")
    ap.add_argument("--suite", action="store_true", help="the models listed above")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="target/release/cyb-llm")
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    if args.suite == bool(args.model):
        ap.error("give a model and its inputs, or --suite")
    print("| model | input | threads | cyb-llm ms | onnxruntime ms | onnxruntime ÷ cyb-llm "
          "| cyb-llm first run ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    if args.model:
        feeds = {}
        for spec in args.inputs:
            name, value = spec.split("=", 1)
            feeds[name] = (np.load(value) if value.endswith(".npy")
                           else floats(*[int(d) for d in value.split("x")]))
        what = ", ".join(f"{k} {'×'.join(map(str, v.shape))}" for k, v in feeds.items())
        compare(args, Path(args.model).name, args.model, what, feeds)
        return
    for label, rel, what, make in SUITE:
        path = CACHE / rel
        if not path.exists():
            print(f"<!-- {label}: {path} is missing (tools/fetch_onnx_models.sh, "
                  f"tools/fetch_silero_vad.sh, tools/bench/export_torchvision.py, tools/bench/export_yolov8n.py) -->",
                  flush=True)
            continue
        compare(args, label, str(path), what, make())


if __name__ == "__main__":
    main()
