#!/usr/bin/env bash
# The E2B front end (`paddock serve --e2b`, docs/e2b.md) driven by the unmodified `e2b` and
# `e2b-code-interpreter` Python SDKs in three pinned sets (tests/e2b/requirements*.txt: the
# newest, e2b 2.7.0, and e2b-code-interpreter 2.9.0 with e2b 2.26.0), each installed into a
# virtual environment cached by its requirements' hash, against the workspace build's
# `paddock`. Only loopback is contacted by the tests.
#
#   scripts/test-e2b.sh [PYTEST ARGS...]     # after `cargo build --release ... --workspace`
#   E2B_SETS=newest scripts/test-e2b.sh      # one set only
#
# The wheels are downloaded once into $PADDOCK_PY_ENV/e2b-wheelhouse (default
# /opt/paddock-py-test); a re-run needs no network. A SDK that cannot be installed fails the
# run. With the docker test service up (scripts/test-services.sh), sandboxes are also made from
# the template "docker". Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

ENV_DIR=${PADDOCK_PY_ENV:-/opt/paddock-py-test}
WHEELHOUSE=$ENV_DIR/e2b-wheelhouse

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

# The virtual environment of one requirements file (made once, cached by its hash); its path on
# stdout.
venv_for() {
    local requirements=$1 hash venv
    hash=$(sha256sum "$requirements" | cut -c1-16)
    venv=$ENV_DIR/e2b-venv-$hash
    if [ ! -x "$venv/bin/python" ]; then
        if [ ! -f "$WHEELHOUSE/stamp-$hash" ]; then
            log "downloading the wheels of $requirements into $WHEELHOUSE (once per change of it)"
            mkdir -p "$WHEELHOUSE"
            "$python" -m pip download --quiet --disable-pip-version-check --dest "$WHEELHOUSE" -r "$requirements" >&2
            touch "$WHEELHOUSE/stamp-$hash"
        fi
        rm -rf "$venv.partial"
        "$python" -m venv "$venv.partial"
        "$venv.partial/bin/pip" install --quiet --disable-pip-version-check --no-index \
            --find-links "$WHEELHOUSE" -r "$requirements" >&2
        "$venv.partial/bin/pip" check >&2
        mv "$venv.partial" "$venv"
        log "made $venv for $requirements ($("$python" --version))"
    fi
    echo "$venv"
}

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
# The three SDK sets of DESIGN.md section 10, each against its own server: the newest e2b and
# e2b-code-interpreter (every test), e2b 2.7.0 (old create/connect paths, a bare access token
# after connect; it has no code interpreter), and e2b-code-interpreter 2.9.0 with e2b 2.26.0.
# E2B_SETS picks some of them (newest, e2b-2.7.0, ci-2.9.0).
sets=${E2B_SETS:-newest e2b-2.7.0 ci-2.9.0}
for set in $sets; do
    case $set in
    newest) requirements=tests/e2b/requirements.txt; tests=(tests/e2b) ;;
    e2b-2.7.0) requirements=tests/e2b/requirements-e2b-2.7.0.txt; tests=(tests/e2b/test_sdk.py) ;;
    ci-2.9.0)
        requirements=tests/e2b/requirements-ci-2.9.0.txt
        tests=(tests/e2b/test_sdk.py tests/e2b/test_code_interpreter.py)
        ;;
    *) log "unknown SDK set $set (E2B_SETS: newest, e2b-2.7.0, ci-2.9.0)"; exit 2 ;;
    esac
    venv=$(venv_for "$requirements")
    log "SDK set $set: $(grep -E '^e2b(-code-interpreter)?==' "$requirements" | tr '\n' ' ')"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
done
