#!/usr/bin/env bash
# Fetches Silero VAD v5 (silero_vad.onnx, ~2.3 MB, MIT) from the PyPI wheel silero-vad==5.1.2 into
# ${CYB_CACHE:-$HOME/.cache/cyb-llm}/silero-vad/ and prints the .onnx path. Idempotent: does
# nothing but print the path when the file is already there with the right sha256.
# Used by `cyb-llm transcribe --vad` (its default VAD model), by the VAD tests of cyb-runtime
# (crates/cyb-runtime/tests/vad.rs, which also honour CYB_SILERO_VAD) and by
# tools/fixtures/make_vad_fixtures.py.
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/silero-vad"
ONNX="$DEST/silero_vad.onnx"
WHEEL="silero_vad-5.1.2-py3-none-any.whl"
WHEEL_SHA="93b41953d7774b165407fda6b533c119c5803864e367d5034dc626c82cfdf661"
ONNX_SHA="2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$ONNX" ] && [ "$(sha "$ONNX")" = "$ONNX_SHA" ]; then
    echo "$ONNX"
    exit 0
fi

mkdir -p "$DEST"
TMP="$(mktemp -d "$DEST/download.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps "silero-vad==5.1.2" -d "$TMP" >&2
if [ "$(sha "$TMP/$WHEEL")" != "$WHEEL_SHA" ]; then
    echo "fetch_silero_vad: $WHEEL has sha256 $(sha "$TMP/$WHEEL"), expected $WHEEL_SHA" >&2
    exit 1
fi
python3 - "$TMP/$WHEEL" "$TMP" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("silero_vad/data/silero_vad.onnx", sys.argv[2])
PY
if [ "$(sha "$TMP/silero_vad/data/silero_vad.onnx")" != "$ONNX_SHA" ]; then
    echo "fetch_silero_vad: silero_vad.onnx does not match sha256 $ONNX_SHA" >&2
    exit 1
fi
mv "$TMP/silero_vad/data/silero_vad.onnx" "$ONNX"
echo "$ONNX"
