#!/usr/bin/env bash
# Builds the Python package's wheel (python/) into target/wheels/ and prints its path: the
# `paddock` binary of the workspace's release build (maturin finds every crate fresh: no second
# compile once `cargo build --release --ignore-rust-version --locked --workspace` has run) and
# the static `paddock-agent` (scripts/build-agent.sh, ~15 s cold, a freshness check after),
# which pip installs beside `paddock`, where the engine looks for it.
#
#   scripts/build-wheel.sh        # then: pip install target/wheels/paddock-*.whl
#
# maturin (pinned) lives in $PADDOCK_PY_ENV/build-venv (default /opt/paddock-py-test), installed
# from PyPI the first time. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

ENV_DIR=${PADDOCK_PY_ENV:-/opt/paddock-py-test}
MATURIN_PIN="maturin==1.16.0"
maturin="$ENV_DIR/build-venv/bin/maturin"

log() { printf 'build-wheel: %s\n' "$*" >&2; }

if [ ! -x "$maturin" ] || [ "$("$maturin" --version)" != "${MATURIN_PIN/==/ }" ]; then
    log "installing $MATURIN_PIN into $ENV_DIR/build-venv"
    rm -rf "$ENV_DIR/build-venv"
    mkdir -p "$ENV_DIR"
    python3 -m venv "$ENV_DIR/build-venv"
    "$ENV_DIR/build-venv/bin/pip" install --quiet --disable-pip-version-check "$MATURIN_PIN"
fi

# pyproject's `data = "paddock.data"`: maturin refuses to build without it, so a wheel can never
# quietly lack the agent.
agent=$(scripts/build-agent.sh)
rm -rf python/paddock.data
mkdir -p python/paddock.data/scripts
cp "$agent" python/paddock.data/scripts/paddock-agent

log "building the wheel (no compile expected)"
rm -rf target/wheels
started=$EPOCHREALTIME
(cd python && "$maturin" build --release --ignore-rust-version --locked --out ../target/wheels) >&2
log "wheel built in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $started }") s"
ls "$PWD"/target/wheels/paddock-*.whl
