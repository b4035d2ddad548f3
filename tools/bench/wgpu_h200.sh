#!/usr/bin/env bash
# Benchmarks the wgpu backend on a real GPU (issue 5: an H200 through the NVIDIA Vulkan driver).
#
#   bash tools/bench/wgpu_h200.sh CYB_LLM_BINARY [BENCH_DIR] [DEFAULT_MODEL]
#
# BENCH_DIR (default ${CYB_CACHE:-~/.cache/cyb-llm}/bench) holds the random-weight files made by
# tools/bench/make_bench_models.py (llama-3.2-1b-q4_0.gguf, llama-3.2-1b-q8_0.gguf);
# DEFAULT_MODEL defaults to the file tools/fetch_smollm2.sh fetches. Runs
# `cyb-llm bench --backend wgpu -p 512 -n 128` on each (llama-bench's pp512/tg128) and prints
# the table; CYB_WGPU_ADAPTER picks the adapter (e.g. CYB_WGPU_ADAPTER=nvidia). Extra
# arguments for bench go in BENCH_ARGS (e.g. BENCH_ARGS="-r 3").
set -euo pipefail
BIN="${1:?usage: wgpu_h200.sh CYB_LLM_BINARY [BENCH_DIR] [DEFAULT_MODEL]}"
CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DIR="${2:-$CACHE/bench}"
DEFAULT="${3:-$CACHE/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"

echo "== adapters"
"$BIN" backends 2>/dev/null | sed -n '/^wgpu/,/^cuda/p' | sed '$d'
for model in "$DIR/llama-3.2-1b-q4_0.gguf" "$DIR/llama-3.2-1b-q8_0.gguf" "$DEFAULT"; do
    if [ ! -s "$model" ]; then
        echo "missing $model (make it with tools/bench/make_bench_models.py or tools/fetch_smollm2.sh)" >&2
        continue
    fi
    echo "== $(basename "$model")"
    # shellcheck disable=SC2086
    "$BIN" bench "$model" --backend wgpu -p 512 -n 128 ${BENCH_ARGS:-} --verbose 2>&1 \
        | grep -v XDG_RUNTIME_DIR
done
