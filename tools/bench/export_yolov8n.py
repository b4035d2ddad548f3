#!/usr/bin/env python3
"""Exports a YOLOv8n detector at 640 × 640 (Ultralytics' yolov8n.yaml, random weights: speed does
not depend on trained values; the trained file is not in the package registries) to ONNX for
tools/bench/onnx_vs_ort.py's suite, into
${CYB_CACHE:-~/.cache/cyb-llm}/onnx-models/yolov8n/yolov8n-640.onnx (never in git). A file that
exists is kept.

    /path/to/venv/bin/python tools/bench/export_yolov8n.py   # ultralytics, torch, onnx

Ultralytics' own exporter (opset as it picks, not simplified), input "images" 1×3×640×640,
output "output0" [1, 84, 8400].
"""
import os
import shutil
import tempfile
from pathlib import Path

OUT = Path(os.environ.get("CYB_CACHE", Path.home() / ".cache" / "cyb-llm")) / "onnx-models" / "yolov8n"


def main():
    path = OUT / "yolov8n-640.onnx"
    if path.exists():
        return
    from ultralytics import YOLO
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        exported = YOLO("yolov8n.yaml").export(format="onnx", imgsz=640, simplify=False, dynamic=False)
        shutil.move(exported, path)
    print(path)


if __name__ == "__main__":
    main()
