#!/usr/bin/env python3
"""cyb-llm transcribe against faster-whisper on the same audio, threads and beam size.

Each configuration runs in its own process (so peak RSS is its own), configurations
alternating, `--repeats` times; the table shows the median wall time of the transcription
(model load excluded on both sides, audio decoding included on both), the real-time factor
(time / audio seconds) and the peak RSS, and whether the text equals faster-whisper fp32's.

    python3 tools/bench/whisper.py --model ~/.cache/cyb-llm/whisper-tiny.en-ct2 \
        --cyb target/release/cyb-llm --audio tests/fixtures/whisper/speech/long_paragraph.flac \
        [--cyb-model /tmp/tiny-q8.model] [--threads 1,2] [--beam 5] [--repeats 3] \
        [--fixed-length]

--fixed-length compares speed on random-weight models of a real shape (base, small, ...; made
by tools/bench/make_whisper_random.py): end of text is suppressed on both sides, so each 30 s
window decodes to max_length whatever the weights (and the text column is then only a check
that both decoded alike).

Needs faster-whisper (pip install -r tools/fixtures/requirements-whisper.txt). cyb-llm's
--cyb-model defaults to --model (the CTranslate2 directory, its fp16 weights as stored); pass a
`cyb-llm import --quant Q8_0` file to time 8-bit weights like faster-whisper's int8.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

FW_CHILD = r"""
import json, resource, sys, time
from faster_whisper import WhisperModel
model_dir, audio, compute, threads, beam, extra = sys.argv[1:7]
m = WhisperModel(model_dir, device="cpu", compute_type=compute, cpu_threads=int(threads))
if audio.endswith(".npy"):
    # Samples as faster-whisper's decoder gives them (int16 / 32768), decoded beforehand.
    import numpy as np
    audio = np.load(audio).astype(np.float32) / 32768.0
t0 = time.perf_counter()
segments, info = m.transcribe(audio, beam_size=int(beam), language="en", vad_filter=False,
                              **json.loads(extra))
text = "".join(s.text for s in segments)
secs = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"secs": secs, "rss_mib": rss, "duration": info.duration, "text": text.strip()}))
"""


def run_fw(model, audio, compute, threads, beam, fixed):
    # Fixed-length decoding: end of text suppressed, no timestamps, no fallback, no prompt, so
    # every 30 s window decodes max_length tokens whatever the weights say.
    extra = {"suppress_tokens": [-1, fixed], "without_timestamps": True, "temperature": 0.0,
             "condition_on_previous_text": False} if fixed is not None else {}
    out = subprocess.run(
        [sys.executable, "-c", FW_CHILD, model, audio, compute, str(threads), str(beam),
         json.dumps(extra)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cyb(cyb, model, audio, threads, beam, fixed):
    extra = ["--suppress-tokens", f"-1,{fixed}", "--without-timestamps", "--temperature", "0",
             "--no-condition-on-previous-text"] if fixed is not None else []
    out = subprocess.run(
        [cyb, "transcribe", model, audio, "--bench", "-t", str(threads),
         "--beam-size", str(beam), "--language", "en", "--format", "json", *extra],
        capture_output=True, text=True, check=True,
    )
    m = re.search(r"of audio in ([0-9.]+) s.*?encoder ([0-9.]+) ms.*?decoder ([0-9.]+) tokens/s"
                  r".*?peak RSS (\d+) MiB", out.stderr, re.S)
    d = re.search(r"([0-9.]+) s of audio", out.stderr)
    return {
        "secs": float(m.group(1)), "rss_mib": float(m.group(4)), "duration": float(d.group(1)),
        "encoder_ms": float(m.group(2)), "decoder_tps": float(m.group(3)),
        "text": json.loads(out.stdout)["text"].strip(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="CTranslate2 Whisper directory")
    p.add_argument("--cyb", default="target/release/cyb-llm")
    p.add_argument("--cyb-model", action="append", default=None,
                   help="model(s) cyb-llm loads (default: --model); repeatable")
    p.add_argument("--audio", action="append", required=True)
    p.add_argument("--fw-audio", action="append", default=None,
                   help="for each --audio, the same samples as an int16 .npy for faster-whisper "
                        "(16 kHz mono, as its decode_audio gives them ×32768), where its audio "
                        "decoder (PyAV) is not installed; its time then excludes decoding")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fixed-length", action="store_true",
                   help="suppress end of text (and timestamps, fallback, prompting) so every "
                        "window decodes max_length tokens: a like-for-like speed comparison on "
                        "random-weight models, whose text means nothing")
    a = p.parse_args()
    fixed = None
    if a.fixed_length:
        tok = json.load(open(os.path.join(a.model, "tokenizer.json")))
        fixed = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|endoftext|>")
    cyb_models = a.cyb_model or [a.model]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"CPU: {cpu}; beam {a.beam}; median of {a.repeats}\n")
    print("| audio | threads | engine | weights | time s | RTF | encoder ms/window | "
          "decoder tok/s | peak RSS MiB | text = fw fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fw_audio = dict(zip(a.audio, a.fw_audio or a.audio))
    for audio in a.audio:
        for threads in [int(t) for t in a.threads.split(",")]:
            configs = [("faster-whisper", "int8"), ("faster-whisper", "float32")]
            configs += [("cyb-llm", m) for m in cyb_models]
            runs = {c: [] for c in configs}
            for _ in range(a.repeats):
                for c in configs:
                    if c[0] == "faster-whisper":
                        r = run_fw(a.model, fw_audio[audio], c[1], threads, a.beam, fixed)
                    else:
                        r = run_cyb(a.cyb, c[1], audio, threads, a.beam, fixed)
                    runs[c].append(r)
            reference = runs[("faster-whisper", "float32")][0]["text"]
            for c in configs:
                rs = runs[c]
                secs = statistics.median(r["secs"] for r in rs)
                dur = rs[0]["duration"]
                enc = statistics.median(r.get("encoder_ms", float("nan")) for r in rs)
                tps = statistics.median(r.get("decoder_tps", float("nan")) for r in rs)
                rss = max(r["rss_mib"] for r in rs)
                same = all(r["text"] == reference for r in rs)
                weights = c[1] if c[0] == "faster-whisper" else os.path.basename(c[1].rstrip("/"))
                fmt = lambda x: "–" if x != x else f"{x:.0f}"
                print(f"| {os.path.basename(audio)} ({dur:.1f} s) | {threads} | {c[0]} | {weights} "
                      f"| {secs:.3f} | {secs / dur:.4f} | {fmt(enc)} | {fmt(tps)} | {rss:.0f} "
                      f"| {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
