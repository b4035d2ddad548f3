#!/usr/bin/env python3
"""Vision-language time to first token: cyb-llm next to PyTorch eager (transformers) on the
same weights and image.

A SmolVLM-256M-shape Idefics3 model with random weights (transformers' initialization, seed 0):
SigLIP tower 768 wide, 12 blocks, 512 px tiles of 16 px patches, pixel shuffle 4 (64 tokens a
tile); SmolLM2-135M decoder (576 wide, 30 blocks, 9 heads, 3 KV heads); images resized to a
longest edge of 2048 and cut into 512 px tiles plus the global view, as SmolVLM's processor
does. Made once into CACHE/bench-vlm/smolvlm-256m/ with a word-level tokenizer holding the
special tokens and filler words up to the decoder's 49,280 ids (the text is a few words; the
image tokens dominate the prompt).

Per program: the prompt "describe this picture" with one image (tests/fixtures/images/
src_wide.png, 4 × 3 tiles + the global view = 832 image tokens), time to the first token:
preprocessing, the tower on every tile, the connector and the prefill. cyb-llm: the `ttft`
that `cyb-llm run --image -n 1` reports; PyTorch: processor + one forward. Median of REPS runs
after a warm-up, THREADS threads each.

  python tools/bench/vlm_vs_torch.py CYB_LLM [--threads 2] [--reps 3]
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
PROMPT = "describe this picture"
TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    rows = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    specials = ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<fake_token_around_image>", "<global-img>",
                "<end_of_utterance>"] + rows
    words = "user assistant : describe this picture a the is".split()
    # Filler words, so every id the random decoder may pick decodes.
    words += [f"w{i}" for i in range(49280 - len(specials) - len(words))]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + words)}, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<end_of_utterance>",
                                      pad_token="<pad>", unk_token="<unk>", additional_special_tokens=specials[4:])


def make(d):
    torch.manual_seed(0)
    vc = tf.Idefics3VisionConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                 num_attention_heads=12, image_size=512, patch_size=16)
    tc = tf.LlamaConfig(vocab_size=49280, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    cfg = tf.Idefics3Config(vision_config=vc, text_config=tc, scale_factor=4, image_token_id=4)
    model = tf.Idefics3ForConditionalGeneration(cfg).eval()
    proc = tf.Idefics3Processor(
        image_processor=tf.Idefics3ImageProcessor(size={"longest_edge": 2048}, max_image_size={"longest_edge": 512}),
        tokenizer=tokenizer(), image_seq_len=64, chat_template=TEMPLATE)
    model.save_pretrained(d)
    proc.save_pretrained(d)


def cyb_ttft(binary, d, threads):
    out = subprocess.run([binary, "run", d, "--image", IMAGE, PROMPT, "-n", "1", "--temp", "0", "-t", str(threads)],
                         capture_output=True, text=True, check=True)
    m = re.search(r"ttft ([0-9.]+) ms", out.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cyb_llm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    d = os.path.join(CACHE, "bench-vlm", "smolvlm-256m")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        make(d)
    torch.set_num_threads(a.threads)
    proc = tf.AutoProcessor.from_pretrained(d)
    model = tf.Idefics3ForConditionalGeneration.from_pretrained(d).eval()
    img = Image.open(IMAGE).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True)

    def torch_ttft():
        t0 = time.perf_counter()
        inputs = proc(images=[img], text=text, return_tensors="pt")
        with torch.no_grad():
            model(**inputs).logits[0, -1].argmax()
        return (time.perf_counter() - t0) * 1e3, inputs["input_ids"].shape[1]

    _, n_prompt = torch_ttft()
    cyb_ttft(a.cyb_llm, d, a.threads)
    tt, ct = [], []
    for _ in range(a.reps):
        tt.append(torch_ttft()[0])
        ct.append(cyb_ttft(a.cyb_llm, d, a.threads))
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}, {a.threads} threads, torch {torch.__version__}, transformers {tf.__version__}")
    print(f"prompt: {n_prompt} tokens (one image: 12 tiles + the global view)")
    print("| model | PyTorch ms | cyb-llm ms | PyTorch ÷ cyb-llm |")
    print("| --- | --- | --- | --- |")
    t, c = statistics.median(tt), statistics.median(ct)
    print(f"| SmolVLM-256M shape, TTFT with one image | {t:.0f} | {c:.0f} | {t / c:.2f} |")


if __name__ == "__main__":
    main()
