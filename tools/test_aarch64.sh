#!/usr/bin/env bash
# Runs the cpu backend's kernel tests for aarch64 (the NEON kernel set next to the portable
# one) under qemu user-mode emulation, on an x86-64 machine. Needs the Rust target
# aarch64-unknown-linux-gnu (rustup), a cross linker and qemu-user (Debian: gcc-aarch64-linux-gnu,
# qemu-user); installs what is missing. Emulation is slow: only the kernel tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
T=aarch64-unknown-linux-gnu
if ! rustup target list --installed | grep -qx "$T"; then
    rustup target add "$T"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
cargo test -p cyb-cpu --target "$T" --lib --test matmul --test ops "$@"
