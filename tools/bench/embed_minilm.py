#!/usr/bin/env python3
"""Sentences/s of all-MiniLM-L6-v2 embeddings: cyb-llm vs ONNX Runtime vs sentence-transformers
on this machine, at batch 1 and batch 32, every sentence 128 tokens ([CLS] + 126 + [SEP]).

Needs: tools/fetch_minilm.sh (the model), `cargo build --release -p cyb-cli`, and in the
Python used to run this: sentence-transformers, onnxruntime, onnx (pip install ...). The ONNX
file is exported from the same weights with torch.onnx (opset 17) into a temporary directory
outside the repository. Each engine runs warm-up passes, then REPEAT timed passes; the median
is reported. All engines use THREADS threads. cyb-llm and ONNX Runtime alternate ROUNDS times
(a busy moment of a shared machine then hits both); the table gives the median of the rounds
and the median of the per-round ratios. sentence-transformers runs once.

Run: /root/venv/bin/python tools/bench/embed_minilm.py [--threads 2] [--repeat 7] [--rounds 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch
from sentence_transformers import SentenceTransformer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SENTENCE = " ".join(["hello"] * 126)  # 126 word pieces + [CLS] + [SEP] = 128 tokens


def timed(fn, repeat):
    fn()
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_st(model_dir, batch, repeat):
    m = SentenceTransformer(model_dir, device="cpu")
    texts = [SENTENCE] * batch
    return timed(lambda: m.encode(texts, batch_size=batch, convert_to_numpy=True), repeat)


def export_onnx(model_dir, path):
    from transformers import AutoModel
    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones(1, 128, dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(Wrap().eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), path,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "b", 1: "l"} for n in
                                        ["input_ids", "attention_mask", "token_type_ids"]})


def bench_ort(onnx_path, tok_ids, batch, repeat, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    ids = np.array([tok_ids] * batch, dtype=np.int64)
    mask = np.ones_like(ids)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def run():
        h = s.run(None, feeds)[0]
        v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return v / np.linalg.norm(v, axis=1, keepdims=True)
    return timed(run, repeat)


def bench_cyb(binary, model_dir, batch, repeat, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write((SENTENCE + "\n") * batch)
        f.flush()
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), CYB_THREADS=str(threads))
        r = subprocess.run([binary, "embed", model_dir, "--file", f.name,
                            "--repeat", str(repeat + 2)],
                           capture_output=True, text=True, env=env, check=True)
    ms = float(re.search(r"median ([0-9.]+) ms", r.stderr).group(1))
    return ms / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "cyb-llm"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model_dir = subprocess.run(["bash", os.path.join(ROOT, "tools", "fetch_minilm.sh")],
                               check=True, capture_output=True, text=True).stdout.strip()
    m = SentenceTransformer(model_dir, device="cpu")
    tok_ids = m.tokenizer(SENTENCE)["input_ids"]
    assert len(tok_ids) == 128, len(tok_ids)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "minilm.onnx")
        export_onnx(model_dir, onnx_path)
        print(f"threads {a.threads}, repeat {a.repeat}, rounds {a.rounds}, sequence 128; "
              "sentences/s (median)")
        print(f"{'batch':>5} {'cyb-llm':>10} {'onnxruntime':>12} {'sentence-tf':>12} "
              f"{'cyb/ort':>8}  per-round cyb/ort")
        for batch in (1, 32):
            cyb, onx = [], []
            for _ in range(a.rounds):
                cyb.append(batch / bench_cyb(a.binary, model_dir, batch, a.repeat, a.threads))
                onx.append(batch / bench_ort(onnx_path, tok_ids, batch, a.repeat, a.threads))
            st = batch / bench_st(model_dir, batch, a.repeat)
            ratios = [c / o for c, o in zip(cyb, onx)]
            print(f"{batch:>5} {statistics.median(cyb):>10.1f} {statistics.median(onx):>12.1f} "
                  f"{st:>12.1f} {statistics.median(ratios):>8.2f}  "
                  + " ".join(f"{r:.2f}" for r in ratios), flush=True)

if __name__ == "__main__":
    main()
