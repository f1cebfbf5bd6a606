#!/usr/bin/env bash
# The framework integrations (python/paddock/integrations/): each framework's own conformance
# suite against its adapter, at the pinned versions (tests/integrations/requirements.txt), with
# the package installed from the wheel the workspace build already made (scripts/build-wheel.sh:
# no second compile) into a fresh virtual environment.
#
#   scripts/test-integrations.sh [PYTEST ARGS...]     # after `cargo build --release ... --workspace`
#
# The frameworks need Python >= 3.11 (Debian 12's python3 is 3.11). Their wheels are downloaded
# once into $PADDOCK_PY_ENV/integrations-wheelhouse (default /opt/paddock-py-test), so a re-run
# needs no network. A framework that cannot be installed or imported fails the run: nothing is
# skipped for want of it. With the docker test service up (scripts/test-services.sh), the
# suites' docker runs are required too. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

ENV_DIR=${PADDOCK_PY_ENV:-/opt/paddock-py-test}
REQUIREMENTS=tests/integrations/requirements.txt
WHEELHOUSE=$ENV_DIR/integrations-wheelhouse
STAMP_TEXT="paddock-integrations v1: $(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"

log() { printf 'test-integrations: %s\n' "$*" >&2; }

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
    path=$(command -v "$candidate" || true)
    if [ -n "$path" ] && "$path" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python=$path
        break
    fi
done
if [ -z "$python" ]; then
    log "the frameworks need Python >= 3.11 and none is on PATH (apt-get install python3 on Debian 12)"
    exit 1
fi

wheel=$(scripts/build-wheel.sh)

if [ ! -f "$WHEELHOUSE/stamp" ] || [ "$(cat "$WHEELHOUSE/stamp")" != "$STAMP_TEXT" ]; then
    log "downloading the frameworks' wheels into $WHEELHOUSE (once per change of $REQUIREMENTS)"
    rm -rf "$WHEELHOUSE"
    mkdir -p "$WHEELHOUSE"
    "$python" -m pip download --quiet --disable-pip-version-check --dest "$WHEELHOUSE" \
        -r "$REQUIREMENTS"
    echo "$STAMP_TEXT" >"$WHEELHOUSE/stamp"
fi

fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
"$python" -m venv "$fresh/venv"
"$fresh/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$WHEELHOUSE" "$wheel" -r "$REQUIREMENTS"
"$fresh/venv/bin/pip" check >&2
log "installed $(basename "$wheel") and the pinned frameworks into a fresh venv ($("$python" --version))"

# The tests must find what pip installed, not the build tree's binaries.
unset PADDOCK_BIN PADDOCK_AGENT_BIN
if [ -n "${PADDOCK_TEST_POLICY:-}" ] && [[ ",${PADDOCK_SKIP_BACKENDS:-}," != *",docker,"* ]]; then
    export PADDOCK_INTEGRATIONS_DOCKER=required
fi
(cd tests/integrations && "$fresh/venv/bin/python" -m pytest -q -p no:cacheprovider "$@")
