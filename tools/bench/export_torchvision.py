#!/usr/bin/env python3
"""Exports torchvision's MobileNetV2 and ResNet-50 (random weights: speed does not depend on
trained values) to ONNX for tools/bench/onnx_vs_ort.py's suite, into
${CYB_CACHE:-~/.cache/cyb-llm}/onnx-models/torchvision/{mobilenet_v2,resnet50}.onnx (never in
git). A file that exists is kept.

    /path/to/venv/bin/python tools/bench/export_torchvision.py   # torch, torchvision, onnx

The legacy TorchScript exporter (`dynamo=False`), opset 17, input "x" 1×3×224×224, output "y".
"""
import os
from pathlib import Path

import torch
import torchvision

OUT = Path(os.environ.get("CYB_CACHE", Path.home() / ".cache" / "cyb-llm")) / "onnx-models" / "torchvision"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, ctor in [("mobilenet_v2", torchvision.models.mobilenet_v2),
                       ("resnet50", torchvision.models.resnet50)]:
        path = OUT / f"{name}.onnx"
        if path.exists():
            continue
        torch.manual_seed(0)
        model = ctor(weights=None).eval()
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamo=False)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
