"""Starts `cyb-llm serve` for a test module: on 127.0.0.1 and a free port, waiting for its
"listening on" line; stops it with SIGTERM at the end and checks that it exits cleanly."""

import signal
import subprocess
import threading
import time

import pytest


def serve(cmd, timeout=120):
    """A generator for a module-scoped fixture: yields the server's base URL."""
    proc = subprocess.Popen([*map(str, cmd), "--host", "127.0.0.1", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    base, lines = None, []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("listening on http://"):
            base = line.strip().removeprefix("listening on ")
            break
    if base is None:
        proc.kill()
        pytest.fail("server did not start: " + "".join(lines))
    # Keep draining stderr so the server never blocks on a full pipe.
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
    yield base
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
