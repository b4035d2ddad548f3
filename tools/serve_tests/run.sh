#!/usr/bin/env bash
# The official `openai` Python client against `cyb-llm serve` on 127.0.0.1 with the tiny chat
# fixture. The tests start the server on a free port and stop it (SIGTERM) at the end.
# The client lives in a venv outside the repository (~/.cache/cyb-llm/serve-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${CYB_SERVE_VENV:-$HOME/.cache/cyb-llm/serve-venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q "openai>=1.40" pytest jsonschema
cargo build -q -p cyb-cli --bin cyb-llm
CYB_LLM_BIN="$PWD/target/debug/cyb-llm" "$VENV/bin/python" -m pytest -q tools/serve_tests
