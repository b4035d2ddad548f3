#!/usr/bin/env bash
# The official `openai` Python client against `cyb-llm serve` on 127.0.0.1 with the tiny
# fixtures and, for the audio endpoints, Whisper tiny.en (tools/fetch_whisper_tiny_en.sh). The
# tests start the server on a free port and stop it (SIGTERM) at the end.
# The client lives in a venv outside the repository (~/.cache/cyb-llm/serve-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${CYB_SERVE_VENV:-$HOME/.cache/cyb-llm/serve-venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q "openai>=1.40" pytest jsonschema
# Without the model the audio tests that need it are skipped (under CI they fail).
if WHISPER_DIR="$(bash tools/fetch_whisper_tiny_en.sh)"; then
    export CYB_WHISPER_TINY_EN_CT2="$WHISPER_DIR"
fi
cargo build -q -p cyb-cli --bin cyb-llm
CYB_LLM_BIN="$PWD/target/debug/cyb-llm" "$VENV/bin/python" -m pytest -q tools/serve_tests
