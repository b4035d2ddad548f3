#!/usr/bin/env python3
"""Writes random-weight Whisper models of the published shapes, for speed comparisons where the
registries carry no real weights: a transformers directory (float16 safetensors) and its
CTranslate2 conversion (float16, what faster-whisper loads), side by side.

    python3 tools/bench/make_whisper_random.py --size base.en \\
        --tokenizer ~/.cache/cyb-llm/whisper-tiny.en-ct2/tokenizer.json \\
        --out ~/.cache/cyb-llm/bench/whisper-base.en-random

makes OUT/hf/ and OUT/ct2/. Weights: transformers' own initialization under
torch.manual_seed(0). The tokenizer is the given tokenizer.json (every `.en` size shares one
vocabulary, every multilingual size up to large-v2 another). Text from these models means
nothing: time them with tools/bench/whisper.py --fixed-length.

Needs torch, transformers and ctranslate2 (tools/fixtures/requirements-whisper.txt).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

# d_model, encoder/decoder layers, heads (openai-whisper's ModelDimensions).
SIZES = {
    "tiny": (384, 4, 6),
    "base": (512, 6, 8),
    "small": (768, 12, 12),
    "medium": (1024, 24, 16),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", required=True, help="tiny[.en], base[.en], small[.en], medium[.en]")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json of the same vocabulary")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    english = a.size.endswith(".en")
    d, layers, heads = SIZES[a.size.removesuffix(".en")]
    eot, sot = (50256, 50257) if english else (50257, 50258)
    cfg = WhisperConfig(
        vocab_size=51864 if english else 51865, num_mel_bins=80, d_model=d,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d,
        max_source_positions=1500, max_target_positions=448, bos_token_id=eot,
        eos_token_id=eot, pad_token_id=eot, decoder_start_token_id=sot,
        begin_suppress_tokens=[220, eot], suppress_tokens=[],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg).eval().half()
    hf = os.path.join(a.out, "hf")
    model.save_pretrained(hf)
    shutil.copy(a.tokenizer, hf)
    json.dump({"feature_size": 80, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
               "chunk_length": 30, "n_samples": 480000, "nb_max_frames": 3000,
               "feature_extractor_type": "WhisperFeatureExtractor", "padding_value": 0.0,
               "padding_side": "right", "return_attention_mask": False},
              open(os.path.join(hf, "preprocessor_config.json"), "w"))
    ct2 = os.path.join(a.out, "ct2")
    subprocess.run([sys.executable, "-m", "ctranslate2.converters.transformers", "--model", hf, "--output_dir", ct2, "--quantization", "float16",
                    "--copy_files", "tokenizer.json", "preprocessor_config.json", "--force"],
                   check=True)
    print("wrote", hf, "and", ct2)


if __name__ == "__main__":
    main()
