#!/usr/bin/env python3
"""Whisper on a GPU: cyb-llm's wgpu backend against transformers' WhisperForConditionalGeneration
on the same GPU, the same Hugging Face directory, the same audio and beam size.

Two steps:

  make-hf: writes the Hugging Face directory of a CTranslate2 Whisper model (what the registries
  carry; faster-whisper's format) from cyb-llm's reading of it: `cyb-llm inspect --json` gives
  the transformers config and tensor names, `inspect --tensor NAME --dump` each tensor; the
  script adds generation_config.json (special ids, suppressed tokens, alignment heads from
  CTranslate2's config.json), preprocessor_config.json and the tokenizer. Float16 weights as
  stored.

    python3 tools/bench/whisper_gpu.py make-hf --ct2 ~/.cache/cyb-llm/whisper-tiny.en-ct2 \
        --cyb target/release/cyb-llm --out /tmp/whisper-tiny.en-hf [--check AUDIO]

  (--check transcribes AUDIO with transformers on the CPU and prints the text, to compare with
  faster-whisper's.)

  bench: for each audio file, transformers on CUDA (float16 and float32; model.generate with
  the full-length features, so long files go through its sequential long-form decoding;
  timestamps on, as faster-whisper's default) and `cyb-llm transcribe --backend wgpu --bench`;
  `--repeats` runs each, the median wall time (cyb-llm transcribes the file twice in one
  process and the second is timed, as transformers gets a warm-up run); real-time factor =
  time / audio seconds; model loading excluded on both sides, feature extraction included on
  both.

    python3 tools/bench/whisper_gpu.py bench --hf /tmp/whisper-tiny.en-hf --cyb cyb-llm \
        --audio a.flac --audio b.flac [--beam 1] [--repeats 3]

Needs torch and transformers; Python reads the audio with soundfile, or with the standard
library's wave module for WAV, or as an int16 .npy given with --hf-audio.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def make_hf(args):
    import numpy as np
    import torch
    from safetensors.torch import save_file

    info = json.loads(
        subprocess.run([args.cyb, "inspect", args.ct2, "--json"], capture_output=True,
                       text=True, check=True).stdout
    )
    config = {k: v for k, v in info["metadata"].items() if not k.startswith("ctranslate2.")}
    ct2_config = json.load(open(os.path.join(args.ct2, "config.json")))
    os.makedirs(args.out, exist_ok=True)
    state = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in info["tensors"]:
            npy = os.path.join(tmp, "t.npy")
            subprocess.run([args.cyb, "inspect", args.ct2, "--tensor", t["name"], "--dump", npy],
                           capture_output=True, check=True)
            a = np.load(npy)
            dtype = torch.float16 if t["dtype"] == "F16" else torch.float32
            state[t["name"]] = torch.from_numpy(a).to(dtype).contiguous()
    save_file(state, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    vocab = config["vocab_size"]
    multilingual = vocab >= 51865
    eot = 50257 if multilingual else 50256
    tok = json.load(open(os.path.join(args.ct2, "tokenizer.json")))
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    config.update({
        "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "begin_suppress_tokens": ct2_config["suppress_ids_begin"],
        "suppress_tokens": ct2_config["suppress_ids"],
        "use_cache": True, "torch_dtype": "float16",
    })
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=1)
    gen = {
        "alignment_heads": ct2_config["alignment_heads"],
        "begin_suppress_tokens": ct2_config["suppress_ids_begin"],
        "suppress_tokens": ct2_config["suppress_ids"],
        "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "prev_sot_token_id": ids["<|startofprev|>"],
        "is_multilingual": multilingual,
        "max_initial_timestamp_index": 50,
        "max_length": 448,
    }
    if multilingual:
        gen["lang_to_id"] = {c: i for c, i in ids.items() if len(c) <= 9 and c[2:-2].isalpha()
                             and c not in ("<|translate|>", "<|transcribe|>")}
        gen["task_to_id"] = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    json.dump(gen, open(os.path.join(args.out, "generation_config.json"), "w"), indent=1)
    json.dump({
        "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": config["num_mel_bins"], "hop_length": 160, "n_fft": 400,
        "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
        "padding_value": 0.0, "processor_class": "WhisperProcessor",
        "return_attention_mask": False, "sampling_rate": 16000,
    }, open(os.path.join(args.out, "preprocessor_config.json"), "w"), indent=1)
    shutil.copy(os.path.join(args.ct2, "tokenizer.json"), args.out)
    json.dump({"tokenizer_class": "WhisperTokenizer", "model_max_length": 1024,
               "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
              open(os.path.join(args.out, "tokenizer_config.json"), "w"), indent=1)
    print("wrote", args.out)
    if args.check:
        r = transcribe_hf(args.out, args.check, "cpu", torch.float32, 5, repeats=1)
        print(json.dumps(r["text"]))


def load_audio(path):
    import numpy as np
    if path.endswith(".npy"):
        # int16 samples at 16 kHz (as faster-whisper's decode_audio gives them, ×32768).
        return np.load(path).astype(np.float32) / 32768.0
    try:
        import soundfile as sf
        a, sr = sf.read(path, dtype="float32", always_2d=True)
        a = a.mean(axis=1)
    except ImportError:
        import wave
        with wave.open(path) as w:
            sr = w.getframerate()
            a = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32)
            a = a.reshape(-1, w.getnchannels()).mean(axis=1) / 32768.0
    if sr != 16000:
        sys.exit(f"{path}: {sr} Hz, expected 16 kHz")
    return a


_MODELS = {}


def transcribe_hf(hf, audio_path, device, dtype, beam, repeats):
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor
    key = (hf, device, dtype)
    if key not in _MODELS:
        proc = WhisperProcessor.from_pretrained(hf)
        model = WhisperForConditionalGeneration.from_pretrained(hf, torch_dtype=dtype).to(device)
        model.eval()
        _MODELS[key] = (proc, model)
    proc, model = _MODELS[key]
    audio = load_audio(audio_path)
    times, text = [], ""
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        long = len(audio) > 480000
        inputs = proc(audio, sampling_rate=16000, return_tensors="pt",
                      truncation=not long, padding="longest" if long else "max_length",
                      return_attention_mask=True)
        feats = inputs.input_features.to(device, dtype)
        kw = {"attention_mask": inputs.attention_mask.to(device)} if long else {}
        with torch.inference_mode():
            ids = model.generate(feats, num_beams=beam, return_timestamps=True,
                                 condition_on_prev_tokens=True, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        text = proc.batch_decode(ids, skip_special_tokens=True)[0].strip()
        times.append(time.perf_counter() - t0)
    return {"secs": statistics.median(times), "duration": len(audio) / 16000, "text": text}


def transcribe_cyb(cyb, hf, audio, beam, repeats, backend):
    # The audio is given twice and the second transcription is the one timed: the first, in
    # the same process, is the warm-up (shader compilation, first allocations), as transformers
    # gets one below.
    times, out = [], None
    for _ in range(repeats):
        p = subprocess.run([cyb, "transcribe", hf, audio, audio, "--bench", "--backend", backend,
                            "--beam-size", str(beam), "--format", "json"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"cyb-llm failed on {audio}:\n{p.stderr[-3000:]}")
        lines = [l for l in p.stderr.splitlines() if "s of audio in" in l]
        m = re.search(r"([0-9.]+) s of audio in ([0-9.]+) s.*?encoder ([0-9.]+) ms.*?decoder "
                      r"([0-9.]+) tokens/s", lines[-1])
        dec, pos, last = json.JSONDecoder(), 0, None
        while pos < len(p.stdout):
            if p.stdout[pos].isspace():
                pos += 1
                continue
            last, pos = dec.raw_decode(p.stdout, pos)
        times.append(float(m.group(2)))
        out = {"duration": float(m.group(1)), "encoder_ms": float(m.group(3)),
               "decoder_tps": float(m.group(4)), "text": last["text"].strip()}
    out["secs"] = statistics.median(times)
    return out


def bench(args):
    import torch
    rows = []
    hf_audio = dict(zip(args.audio, args.hf_audio or args.audio))
    for audio in args.audio:
        name = os.path.basename(audio)
        c = transcribe_cyb(args.cyb, args.hf, audio, args.beam, args.repeats, args.backend)
        res = {"cyb": c}
        for label, dtype in [("hf_fp16", torch.float16), ("hf_fp32", torch.float32)]:
            transcribe_hf(args.hf, hf_audio[audio], "cuda", dtype, args.beam, 1)  # warm-up
            res[label] = transcribe_hf(args.hf, hf_audio[audio], "cuda", dtype, args.beam,
                                       args.repeats)
        rows.append((name, res))
        print(json.dumps({"file": name, **{k: {kk: v for kk, v in r.items() if kk != "text"}
                                            for k, r in res.items()},
                          "same_text_fp32": c["text"] == res["hf_fp32"]["text"]}), flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name(0)}; beam {args.beam}; median of {args.repeats}")
    print("| file | audio s | cyb-llm wgpu RTF (encoder ms/window, decoder tok/s) | "
          "transformers fp16 RTF | transformers fp32 RTF | cyb ÷ fp16 | text = transformers fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows:
        c, h16, h32 = r["cyb"], r["hf_fp16"], r["hf_fp32"]
        dur = c["duration"]
        print(f"| {name} | {dur:.1f} | {c['secs'] / dur:.4f} ({c['encoder_ms']:.1f}, "
              f"{c['decoder_tps']:.0f}) | {h16['secs'] / dur:.4f} | {h32['secs'] / dur:.4f} | "
              f"{c['secs'] / h16['secs']:.2f}× | {'yes' if c['text'] == h32['text'] else 'no'} |")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("--ct2", required=True)
    m.add_argument("--cyb", default="target/release/cyb-llm")
    m.add_argument("--out", required=True)
    m.add_argument("--check")
    b = sub.add_parser("bench")
    b.add_argument("--hf", required=True)
    b.add_argument("--cyb", default="target/release/cyb-llm")
    b.add_argument("--audio", action="append", required=True)
    b.add_argument("--hf-audio", action="append", default=None,
                   help="for each --audio, the same samples as an int16 .npy, where no audio "
                        "decoder (soundfile) is installed for Python")
    b.add_argument("--beam", type=int, default=5)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--backend", default="wgpu")
    args = p.parse_args()
    make_hf(args) if args.cmd == "make-hf" else bench(args)


if __name__ == "__main__":
    main()
