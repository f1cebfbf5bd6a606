#!/usr/bin/env bash
# The Python package (python/): builds the wheel from the binaries the workspace build already
# made (scripts/build-wheel.sh: no second compile), installs it into a FRESH virtual environment
# (no Rust toolchain, no PADDOCK_BIN or PADDOCK_AGENT_BIN: the engine must find the binaries pip
# put there), and runs tests/python/ with that environment's interpreter.
#
#   scripts/test-python.sh [PYTEST ARGS...]     # after `cargo build --release ... --workspace`
#
# Tools live in $PADDOCK_PY_ENV (default /opt/paddock-py-test): build-venv/ (maturin, see
# build-wheel.sh) and wheelhouse/ (pytest, pytest-timeout, pydantic, downloaded once from PyPI),
# so a re-run needs no network. The wheel goes to target/wheels/. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

ENV_DIR=${PADDOCK_PY_ENV:-/opt/paddock-py-test}
TEST_PKGS=("pytest==8.4.2" "pytest-timeout==2.4.0" "pydantic==2.14.4")
STAMP_TEXT="paddock-py-test v2: ${TEST_PKGS[*]}"

log() { printf 'test-python: %s\n' "$*" >&2; }

wheel=$(scripts/build-wheel.sh)      # also installs maturin into $ENV_DIR/build-venv

if [ ! -f "$ENV_DIR/stamp" ] || [ "$(cat "$ENV_DIR/stamp")" != "$STAMP_TEXT" ]; then
    log "downloading the test wheelhouse into $ENV_DIR/wheelhouse"
    rm -rf "$ENV_DIR/wheelhouse" "$ENV_DIR/stamp"
    "$ENV_DIR/build-venv/bin/pip" download --quiet --disable-pip-version-check \
        --dest "$ENV_DIR/wheelhouse" "${TEST_PKGS[@]}"
    echo "$STAMP_TEXT" >"$ENV_DIR/stamp"
fi

# The session API's contexts run the local backend's `python3` (the first on PATH, which
# the sandbox shares): a figure test needs matplotlib there. pip where that Python is its own
# (pyenv, a venv), apt where Debian manages it (PEP 668).
if ! python3 -c 'import matplotlib' 2>/dev/null; then
    log "installing matplotlib for $(command -v python3) (the sessions' python3)"
    if [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib >&2
    else
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore matplotlib >&2
    fi
fi

fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
python3 -m venv "$fresh/venv"
"$fresh/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$ENV_DIR/wheelhouse" "$wheel" "${TEST_PKGS[@]}"
log "installed $(basename "$wheel") into a fresh venv"

# The tests must find what pip installed, not the build tree's binaries.
unset PADDOCK_BIN PADDOCK_AGENT_BIN
(cd tests/python && "$fresh/venv/bin/python" -m pytest -q -p no:cacheprovider "$@")
