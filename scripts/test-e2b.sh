#!/usr/bin/env bash
# The E2B front end (`paddock serve --e2b`, docs/e2b.md) driven by the unmodified `e2b` and
# `e2b-code-interpreter` Python SDKs at the pinned versions (tests/e2b/requirements.txt),
# installed into a virtual environment cached by the requirements' hash, against the workspace
# build's `paddock`. Only loopback is contacted by the tests.
#
#   scripts/test-e2b.sh [PYTEST ARGS...]     # after `cargo build --release ... --workspace`
#
# The wheels are downloaded once into $PADDOCK_PY_ENV/e2b-wheelhouse (default
# /opt/paddock-py-test); a re-run needs no network. A SDK that cannot be installed fails the
# run. With the docker test service up (scripts/test-services.sh), sandboxes are also made from
# the template "docker". Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

ENV_DIR=${PADDOCK_PY_ENV:-/opt/paddock-py-test}
REQUIREMENTS=tests/e2b/requirements.txt
HASH=$(sha256sum "$REQUIREMENTS" | cut -c1-16)
WHEELHOUSE=$ENV_DIR/e2b-wheelhouse
VENV=$ENV_DIR/e2b-venv-$HASH

log() { printf 'test-e2b: %s\n' "$*" >&2; }

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
    path=$(command -v "$candidate" || true)
    if [ -n "$path" ] && "$path" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        python=$path
        break
    fi
done
if [ -z "$python" ]; then
    log "the e2b SDK needs Python >= 3.10 and none is on PATH (apt-get install python3 on Debian 12)"
    exit 1
fi

binary=$PWD/target/release/paddock
if [ ! -x "$binary" ]; then
    log "$binary is missing: run cargo build --release --ignore-rust-version --locked --workspace first"
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    if [ ! -f "$WHEELHOUSE/stamp-$HASH" ]; then
        log "downloading the e2b SDK's wheels into $WHEELHOUSE (once per change of $REQUIREMENTS)"
        mkdir -p "$WHEELHOUSE"
        "$python" -m pip download --quiet --disable-pip-version-check --dest "$WHEELHOUSE" -r "$REQUIREMENTS"
        touch "$WHEELHOUSE/stamp-$HASH"
    fi
    rm -rf "$VENV.partial"
    "$python" -m venv "$VENV.partial"
    "$VENV.partial/bin/pip" install --quiet --disable-pip-version-check --no-index \
        --find-links "$WHEELHOUSE" -r "$REQUIREMENTS"
    "$VENV.partial/bin/pip" check >&2
    mv "$VENV.partial" "$VENV"
    log "made $VENV ($("$python" --version))"
fi

# The code interpreter's contexts run the local backend's `python3` (the first on PATH, which
# the sandbox shares): the figure test needs matplotlib there. pip where that Python is its own
# (pyenv, a venv), apt where Debian manages it (PEP 668). One that cannot be installed fails the
# run: the figure test is not skipped for want of it.
if ! python3 -c 'import matplotlib' 2>/dev/null; then
    log "installing matplotlib for $(command -v python3) (the sandboxes' python3)"
    if [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib >&2
    else
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore matplotlib >&2
    fi
fi

export PADDOCK_BIN=$binary
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/e2b "$@"
