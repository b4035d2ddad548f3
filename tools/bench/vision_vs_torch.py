#!/usr/bin/env python3
"""ViTStyle image encoders: cyb-llm next to PyTorch eager (transformers) on the same weights.

Real-shape models with random weights (transformers' initialization, seed 0), made once into
CACHE/bench-vision/<name>/ (safetensors + preprocessor_config.json):
  vit-b16    ViTModel, ViT-Base/16 at 224 (google/vit-base-patch16-224's shape)
  clip-b32   CLIPModel, CLIP ViT-B/32 at 224 (openai/clip-vit-base-patch32's shape)
  dinov2-s14 Dinov2Model, DINOv2-S/14 (facebook/dinov2-small's shape), images cropped to 224
Per model and program: one image (tests/fixtures/images/src_wide.png) end to end — preprocessing
(the PIL-backend processor / cyb-llm's Pillow resize) and the image embedding (CLIP:
get_image_features; the others: pooler output) — timed over REPS runs after a warm-up, the
median reported, THREADS threads each (torch.set_num_threads; cyb-llm -t). Programs alternate.

  python tools/bench/vision_vs_torch.py CYB_LLM [--threads 2] [--reps 10] [--models vit-b16,clip-b32]

Prints a markdown table (ms per image, PyTorch ÷ cyb-llm) and the CPU.
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import time

import torch
import transformers as tf
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("CYB_CACHE", os.path.expanduser("~/.cache/cyb-llm"))
IMAGE = os.path.join(ROOT, "tests", "fixtures", "images", "src_wide.png")


def make(name, d):
    torch.manual_seed(0)
    if name == "vit-b16":
        m = tf.ViTModel(tf.ViTConfig(), add_pooling_layer=False)
        proc = tf.ViTImageProcessorPil(size={"height": 224, "width": 224})
    elif name == "clip-b32":
        m = tf.CLIPModel(tf.CLIPConfig(vision_config={"patch_size": 32}, projection_dim=512))
        proc = tf.CLIPImageProcessorPil()
    else:
        m = tf.Dinov2Model(tf.Dinov2Config(hidden_size=384, num_attention_heads=6, image_size=518, patch_size=14))
        proc = tf.BitImageProcessorPil(size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224},
                                       do_center_crop=True, image_mean=[0.485, 0.456, 0.406],
                                       image_std=[0.229, 0.224, 0.225])
    m.save_pretrained(d, safe_serialization=True)
    proc.save_pretrained(d)
    p = os.path.join(d, "preprocessor_config.json")
    text = open(p).read().replace("ProcessorPil", "Processor")
    open(p, "w").write(text)


def load_torch(name, d):
    if name == "clip-b32":
        m = tf.CLIPModel.from_pretrained(d).eval()
        proc = tf.CLIPImageProcessorPil.from_pretrained(d)
        run = lambda pv: m.get_image_features(pixel_values=pv)
    else:
        cls = tf.ViTModel if name == "vit-b16" else tf.Dinov2Model
        m = cls.from_pretrained(d).eval()
        proc = (tf.ViTImageProcessorPil if name == "vit-b16" else tf.BitImageProcessorPil).from_pretrained(d)
        run = lambda pv: m(pixel_values=pv).pooler_output if name != "vit-b16" else m(pixel_values=pv).last_hidden_state[:, 0]
    return proc, run


def time_torch(name, d, reps):
    proc, run = load_torch(name, d)
    img = Image.open(IMAGE).convert("RGB")
    times = []
    with torch.inference_mode():
        for i in range(reps + 1):
            t0 = time.perf_counter()
            run(proc(img, return_tensors="pt")["pixel_values"])
            if i:
                times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def time_cyb(cyb, d, reps, threads):
    out = subprocess.run([cyb, "embed", d, "--image", IMAGE, "--repeat", str(reps + 1), "-t", str(threads),
                          "--backend", "cpu"], capture_output=True, text=True, check=True)
    m = re.search(r"\(([\d.]+) ms per image\)", out.stderr)
    return float(m.group(1))


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cyb")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--models", default="vit-b16,clip-b32,dinov2-s14")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"CPU: {cpu_name()}, {a.threads} threads, torch {torch.__version__}, transformers {tf.__version__}")
    print("| model | PyTorch ms | cyb-llm ms | PyTorch ÷ cyb-llm |")
    print("| --- | --- | --- | --- |")
    for name in a.models.split(","):
        d = os.path.join(CACHE, "bench-vision", name)
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            make(name, d)
        tt = time_torch(name, d, a.reps)
        tc = time_cyb(a.cyb, d, a.reps, a.threads)
        tt2 = time_torch(name, d, a.reps)
        tc2 = time_cyb(a.cyb, d, a.reps, a.threads)
        t_torch, t_cyb = min(tt, tt2), min(tc, tc2)
        print(f"| {name} | {t_torch:.1f} | {t_cyb:.1f} | {t_torch / t_cyb:.2f} |", flush=True)


if __name__ == "__main__":
    main()
