#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root or on a developer's machine.
# Builds once (release profile, used by both the binary and the tests), then runs every test
# against the real binary, then the lint gate. Services the suites need are installed and
# started here when missing (none yet: code mode needs only this binary and python3 for the
# benchmark's CPython comparison).
set -euo pipefail
cd "$(dirname "$0")/.."

# rustpython-ruff_* 0.16.5 declares rust 1.96 but builds on 1.95: see README "Building".
CARGO_FLAGS=(--release --ignore-rust-version --locked)

step() { printf '\n==> %s\n' "$*" >&2; }

step "build (release; the first build compiles RustPython: 10-15 minutes)"
cargo build "${CARGO_FLAGS[@]}" --workspace --all-targets

step "tests"
cargo test "${CARGO_FLAGS[@]}" --workspace --no-fail-fast

step "benchmarks compile"
cargo bench --ignore-rust-version --locked --no-run -p paddock-benches

step "format and lints"
cargo fmt --all --check
cargo clippy "${CARGO_FLAGS[@]}" --workspace --all-targets -- -D warnings
