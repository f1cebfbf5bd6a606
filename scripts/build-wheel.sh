#!/usr/bin/env bash
# Builds the Python package's wheel (python/) into target/wheels/ and prints its path: the
# `paddock` binary of the workspace's release build (it carries the static agent; maturin finds
# every crate fresh: no second compile once `cargo build --release --ignore-rust-version
# --locked --workspace` has run). It builds through python/'s own build backend, as
# `pip install ./python` does on a fresh checkout, with a pinned maturin and no build isolation
# (so no network after the first run).
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

# A wheel of an older layout shipped the agent beside the binary from here; it is carried inside
# the binary now.
rm -rf python/paddock.data

log "building the wheel (no compile expected)"
rm -rf target/wheels
started=$EPOCHREALTIME
# maturin's hooks run `maturin` from PATH (an isolated build puts its environment there).
PATH="$ENV_DIR/build-venv/bin:$PATH" "$ENV_DIR/build-venv/bin/pip" wheel --quiet --disable-pip-version-check --no-deps \
    --no-build-isolation --wheel-dir target/wheels ./python >&2
log "wheel built in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $started }") s"
ls "$PWD"/target/wheels/paddock-*.whl
