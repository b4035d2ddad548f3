#!/usr/bin/env bash
# Converts the all-MiniLM-L6-v2 directory fetched by tools/fetch_minilm.sh into a GGUF file laid
# out as llama.cpp's convert_hf_to_gguf.py writes BERT encoders (tools/fixtures/
# make_bert_gguf_fixture.py, with the `gguf` package) at
# ${CYB_CACHE:-$HOME/.cache/cyb-llm}/minilm/all-MiniLM-L6-v2.gguf and prints its path.
# Idempotent. Python packages it lacks (gguf 0.19.0, safetensors, numpy) are installed from
# PyPI into $CACHE/pydeps, not into the system. Used by crates/cyb-runtime/tests/minilm_gguf.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
OUT="$CACHE/minilm/all-MiniLM-L6-v2.gguf"
if [ -s "$OUT" ]; then
    echo "$OUT"
    exit 0
fi
DIR="$(bash tools/fetch_minilm.sh)"

PY="${PYTHON:-python3}"
if [ -x /root/venv/bin/python ] && [ -z "${PYTHON:-}" ]; then PY=/root/venv/bin/python; fi
if ! "$PY" -c "import gguf, safetensors, numpy" 2>/dev/null; then
    PIP="${PIP:-pip}"
    command -v "$PIP" >/dev/null 2>&1 || PIP=pip3
    DEPS="$CACHE/pydeps"
    "$PIP" install --quiet --target "$DEPS" "gguf==0.19.0" safetensors numpy >&2
    export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" tools/fixtures/make_bert_gguf_fixture.py "$DIR" "$OUT.tmp" >&2
mv "$OUT.tmp" "$OUT"
echo "$OUT"
