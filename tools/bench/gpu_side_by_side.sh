#!/usr/bin/env bash
# cyb-llm's wgpu backend next to llama.cpp's CUDA build on one NVIDIA GPU, same random-weight
# files, programs alternating.
#
#   bash tools/bench/gpu_side_by_side.sh CYB_LLM LLAMA_CPP_TAR_XZ OUT_DIR \
#       [SHAPES] [DTYPES] [DEPTHS] [REPS]
#
# CYB_LLM: a cyb-llm binary (release, wgpu feature). LLAMA_CPP_TAR_XZ: llama.cpp's sources as
# one archive (the `vendor/llama.cpp` folder of the llama-cpp-python source package, PyPI);
# llama-bench is built from it with CUDA (about 3.5 minutes with 16 jobs) while the files are
# made. SHAPES and DTYPES go to make_bench_models.py (default llama-3.2-1b and q4_0,q4_k_m);
# DEPTHS are llama-bench's -d (default 0,4096); REPS its -r (default 3). The K-quant files
# need crates/cyb-cli/examples/quantize_raw.rs built at target/debug/examples/quantize_raw
# (copy a release build there on a machine without cargo).
#
# Per file and program: `-p 512 -n 128 -d DEPTHS -r REPS` (cyb-llm: `bench --backend wgpu
# --json`; llama.cpp: `llama-bench -ngl 99 -fa 1 -o json`), ROUNDS rounds (default 2), the GPU memory
# in use sampled by nvidia-smi every 100 ms (peak minus what was in use before). Results:
# OUT_DIR/results.jsonl and a markdown table on stdout.
set -euo pipefail
CYB="${1:?usage: gpu_side_by_side.sh CYB_LLM LLAMA_CPP_TAR_XZ OUT_DIR [SHAPES] [DTYPES] [DEPTHS] [REPS]}"
TARBALL="${2:?llama.cpp archive}"
OUT="${3:?output folder}"
SHAPES="${4:-llama-3.2-1b}"
DTYPES="${5:-q4_0,q4_k_m}"
DEPTHS="${6:-0,4096}"
REPS="${7:-3}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="${WORK:-/tmp/gpu-side-by-side}"
mkdir -p "$WORK/files"

# llama-bench, in the background while the files are made (kept from an earlier run in the
# same WORK folder).
LLAMA_BENCH="$WORK/llama.cpp/build/bin/llama-bench"
(
    [ -x "$LLAMA_BENCH" ] && exit 0
    cd "$WORK"
    rm -rf llama.cpp
    tar xJf "$TARBALL"
    cmake -S llama.cpp -B llama.cpp/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >"$OUT/llama-build.log" 2>&1
    cmake --build llama.cpp/build --target llama-bench -j "$(nproc)" >>"$OUT/llama-build.log" 2>&1
) &
BUILD=$!

python3 "$REPO/tools/bench/make_bench_models.py" --shapes "$SHAPES" --dtypes "$DTYPES" \
    --out "$WORK/files" >"$OUT/files.log" 2>&1
if ! wait "$BUILD"; then
    echo "llama-bench did not build; the end of its log:" >&2
    tail -30 "$OUT/llama-build.log" >&2
    exit 1
fi

# Runs "$@" with nvidia-smi sampling; appends {"program", "file", "round", "gpu_mem_peak_mib",
# "tests": [...]} to results.jsonl.
measure() {
    local program="$1" file="$2" round="$3"
    shift 3
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$WORK/smi.txt" &
    local smi=$!
    "$@" >"$WORK/run.json" 2>"$WORK/run.err" || {
        kill "$smi"
        echo "$program on $file failed:" >&2
        tail -20 "$WORK/run.err" >&2
        return 1
    }
    kill "$smi"
    wait "$smi" 2>/dev/null || true
    python3 - "$program" "$file" "$round" "$base" "$WORK/smi.txt" "$WORK/run.json" \
        >>"$OUT/results.jsonl" <<'EOF'
import json, sys
program, file, rnd, base, smi, run = sys.argv[1:]
used = [int(l) for l in open(smi) if l.strip().isdigit()]
peak = max(used, default=int(base)) - int(base)
text = open(run).read()
tests = json.loads(text[text.index("["):text.rindex("]") + 1])
keep = ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "gpu_mem_bytes")
print(json.dumps({"program": program, "file": file, "round": int(rnd),
                  "gpu_mem_peak_mib": peak,
                  "tests": [{k: t[k] for k in keep if k in t} for t in tests]}))
EOF
}

# A run that fails or outlasts RUN_TIMEOUT seconds (default 300) is reported and skipped.
: >"$OUT/results.jsonl"
for shape in ${SHAPES//,/ }; do
    for dtype in ${DTYPES//,/ }; do
        f="$WORK/files/$shape-$dtype.gguf"
        name=$(basename "$f")
        for round in $(seq "${ROUNDS:-2}"); do
            measure cyb-llm "$name" "$round" timeout "${RUN_TIMEOUT:-300}" env \
                CYB_WGPU_ADAPTER=nvidia "$CYB" bench "$f" --backend wgpu -p 512 -n 128 \
                -d "$DEPTHS" -r "$REPS" --json || true
            measure llama.cpp "$name" "$round" timeout "${RUN_TIMEOUT:-300}" "$LLAMA_BENCH" \
                -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -d "$DEPTHS" -r "$REPS" -o json || true
        done
    done
done

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def ts(program, file, test):
    vals = [t["avg_ts"] for r in rows if r["program"] == program and r["file"] == file
            for t in r["tests"] if (t["n_prompt"], t["n_gen"], t["n_depth"]) == test]
    return statistics.mean(vals) if vals else None
def mem(program, file):
    return max((r["gpu_mem_peak_mib"] for r in rows
                if r["program"] == program and r["file"] == file), default=0)
print("| file | test | cyb-llm t/s | llama.cpp t/s | ratio |")
print("|---|---|---:|---:|---:|")
for file in sorted({r["file"] for r in rows}):
    tests = sorted({(t["n_prompt"], t["n_gen"], t["n_depth"]) for r in rows if r["file"] == file
                    for t in r["tests"]}, key=lambda t: (t[2], -t[0]))
    for test in tests:
        a, b = ts("cyb-llm", file, test), ts("llama.cpp", file, test)
        name = (f"pp{test[0]}" if test[0] else f"tg{test[1]}") + (f" @ d{test[2]}" if test[2] else "")
        ratio = f"{a / b:.2f}×" if a and b else "–"
        print(f"| {file} | {name} | {a or 0:.1f} | {b or 0:.1f} | {ratio} |")
    print(f"| {file} | peak GPU memory (nvidia-smi) | {mem('cyb-llm', file)} MiB | "
          f"{mem('llama.cpp', file)} MiB | {mem('cyb-llm', file) / max(1, mem('llama.cpp', file)):.2f}× |")
EOF
