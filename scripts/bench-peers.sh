#!/usr/bin/env bash
# Installs the peers that `paddock bench` measures Paddock against, into one private directory,
# from PyPI only (plus apt for python3-venv when the system Python lacks it). Idempotent: once
# every peer is in, a re-run checks the stamps and exits in about a second.
#
#   peers=$(scripts/bench-peers.sh)          # stdout: only the peers directory, as the last line
#   "$peers/venv/bin/python" benches/peers/peer_driver.py monty trivial --samples 50
#
# Peers installed (versions as measured in the project notes peer-monty.md / peer-hermes.md):
#   monty    pydantic-monty-client 1.4.0 + pydantic-monty-runtime 1.4.0 (the 1.x pool API and its
#            `monty` worker binary; the 1.5.0 metapackage pins a client/runtime 1.5.0 that PyPI
#            does not serve here, so 1.4.0 is what can be installed and was measured)
#   hermes   hermes-agent 0.19.0 (its local terminal backend is what is measured)
# The other peers of the bench need no install: a fresh `python3 -c` per script (the venv's
# Python, i.e. the system CPython) and a bare `bash -c`.
#
# If one peer cannot be installed the script says so on stderr, records why in peers.json and
# still installs the others; it then exits 0 so the bench can run and report that peer as
# "not installed". It exits non-zero only if no venv can be made at all.
#
# It writes, under $PEERS_DIR:
#   venv/          the virtualenv (one for all peers: monty's only dependency is typing-extensions)
#   hermes-home/   HERMES_HOME for the Hermes peer (so it never touches ~/.hermes)
#   peers.json     {"monty": {"installed": true, "version": "1.4.0", ...}, "hermes": {...}}
#   *.stamp        one per installed peer, holding the install key (a re-run skips the peer)
#   *.log          pip output per step; a failure names the log to read
#
# Environment:
#   PADDOCK_PEERS_DIR      all state (default /opt/paddock-peers)
#   PADDOCK_PEERS_PYTHON   interpreter to build the venv from (default /usr/bin/python3.11 if it
#                          exists, else python3 on PATH); must be 3.11-3.13 for hermes-agent
#   PADDOCK_PEERS_SKIP     comma list of monty,hermes not to install (reported as not installed)
set -euo pipefail
export LC_ALL=C

PEERS_DIR=${PADDOCK_PEERS_DIR:-/opt/paddock-peers}
SKIP=${PADDOCK_PEERS_SKIP:-}
SKIP=${SKIP// /}

MONTY_VERSION=1.4.0
HERMES_VERSION=0.19.0
MONTY_PKGS="pydantic-monty-client==$MONTY_VERSION pydantic-monty-runtime==$MONTY_VERSION"
HERMES_PKGS="hermes-agent==$HERMES_VERSION"

# stdout is reserved for the directory: everything else goes to stderr.
exec 3>&1 1>&2

log() { printf 'bench-peers: %s\n' "$*" >&2; }
T_START=$EPOCHREALTIME
elapsed() { # seconds since the EPOCHREALTIME value $1, as 1.2
    local us=$((${EPOCHREALTIME//[!0-9]/} - ${1//[!0-9]/}))
    printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}
skipped() { [[ ",$SKIP," == *",$1,"* ]]; }

mkdir -p "$PEERS_DIR"
PEERS_DIR=$(cd "$PEERS_DIR" && pwd -P)
VENV=$PEERS_DIR/venv
PY=$VENV/bin/python

# One run at a time: two concurrent pip installs into one venv corrupt it.
exec 9>"$PEERS_DIR/.lock"
if ! flock -w 900 9; then
    log "another bench-peers.sh holds $PEERS_DIR/.lock for over 15 min; giving up"
    exit 1
fi

# The key a stamp must hold: the pinned packages and this recipe's version. Changing either
# reinstalls that peer; a rebuilt venv drops every stamp.
RECIPE=1
key_of() { printf 'recipe=%s packages=%s\n' "$RECIPE" "$1"; }
stamp_ok() { # $1 = peer, $2 = packages
    [[ -x $PY && -f $PEERS_DIR/$1.stamp ]] && [[ $(<"$PEERS_DIR/$1.stamp") == "$(key_of "$2")" ]]
}

# status lines "peer<US>installed<US>version<US>reason" collected for peers.json (US = the
# ASCII unit separator: unlike a tab it is not IFS white space, so empty fields survive `read`)
US=$'\x1f'
STATUS=()
record() { STATUS+=("$1$US$2$US$3$US$4"); }

write_status() {
    local tmp=$PEERS_DIR/peers.json.tmp line peer ok ver why first=1
    {
        printf '{\n'
        for line in "${STATUS[@]}"; do
            IFS=$US read -r peer ok ver why <<<"$line"
            [[ $first == 1 ]] || printf ',\n'
            first=0
            why=${why//\\/\\\\}
            why=${why//\"/\\\"}
            printf '  "%s": {"installed": %s, "version": "%s", "reason": "%s"}' \
                "$peer" "$ok" "$ver" "$why"
        done
        printf '\n}\n'
    } >"$tmp"
    mv -f "$tmp" "$PEERS_DIR/peers.json"
}

# Fast path: every wanted peer stamped with the current key.
all_stamped=1
for peer in monty hermes; do
    skipped "$peer" && continue
    case $peer in
        monty) stamp_ok monty "$MONTY_PKGS" || all_stamped=0 ;;
        hermes) stamp_ok hermes "$HERMES_PKGS" || all_stamped=0 ;;
    esac
done
if [[ $all_stamped == 1 && -z $SKIP && -f $PEERS_DIR/peers.json ]] &&
    ! grep -q '"installed": false' "$PEERS_DIR/peers.json"; then
    log "all peers already installed in $PEERS_DIR ($(elapsed "$T_START") s)"
    printf '%s\n' "$PEERS_DIR" >&3
    exit 0
fi

# --- the venv -------------------------------------------------------------------------------
pick_python() {
    if [[ -n ${PADDOCK_PEERS_PYTHON:-} ]]; then
        printf '%s' "$PADDOCK_PEERS_PYTHON"
    elif [[ -x /usr/bin/python3.11 ]]; then
        printf '%s' /usr/bin/python3.11 # the system Python, not a pyenv shim that PATH may prefer
    else
        command -v python3
    fi
}

if [[ ! -x $PY ]] || ! "$PY" -m pip --version >/dev/null 2>&1; then
    BASE_PY=$(pick_python) || true
    if [[ -z ${BASE_PY:-} ]]; then
        log "no python3 found; cannot make the peers venv"
        exit 1
    fi
    t=$EPOCHREALTIME
    log "making the venv $VENV from $BASE_PY"
    rm -rf "$VENV"
    if ! "$BASE_PY" -m venv "$VENV" >"$PEERS_DIR/venv.log" 2>&1; then
        # Debian splits ensurepip into python3.X-venv.
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            ver=$("$BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
            log "python$ver -m venv failed; installing python$ver-venv with apt"
            apt-get update -qq >>"$PEERS_DIR/venv.log" 2>&1 || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$ver-venv" \
                >>"$PEERS_DIR/venv.log" 2>&1 || true
        fi
        rm -rf "$VENV" # a failed `venv` leaves a python without pip behind
        if ! "$BASE_PY" -m venv "$VENV" >>"$PEERS_DIR/venv.log" 2>&1; then
            rm -rf "$VENV"
            log "cannot make a venv from $BASE_PY: see $PEERS_DIR/venv.log"
            exit 1
        fi
    fi
    # A changed venv invalidates every stamp.
    rm -f "$PEERS_DIR"/*.stamp
    log "venv ready ($(elapsed "$t") s)"
fi
PY_VERSION=$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')

pip_install() { # $1 = log name, rest = requirements
    local name=$1
    shift
    "$PY" -m pip install --no-input --disable-pip-version-check --progress-bar off "$@" \
        >"$PEERS_DIR/$name.log" 2>&1
}

# --- monty ----------------------------------------------------------------------------------
install_monty() {
    if stamp_ok monty "$MONTY_PKGS"; then
        log "monty: already installed"
    else
        local t=$EPOCHREALTIME
        log "monty: pip install $MONTY_PKGS"
        # shellcheck disable=SC2086 # word splitting of the package list is intended
        if ! pip_install monty $MONTY_PKGS; then
            log "monty: NOT INSTALLED: pip failed, see $PEERS_DIR/monty.log"
            record monty false "$MONTY_VERSION" "pip install failed, see $PEERS_DIR/monty.log"
            return
        fi
        # Check it really works: a pool spawns the bundled worker binary and runs 1 + 1.
        local check
        if ! check=$("$PY" -c 'import pydantic_monty as m
with m.Monty() as pool:
    with pool.checkout() as s:
        assert s.feed_run("1 + 1") == 2
print("ok")' 2>&1); then
            log "monty: NOT INSTALLED: installed but a pool cannot run 1 + 1: ${check##*$'\n'}"
            record monty false "$MONTY_VERSION" "pool check failed: ${check##*$'\n'}"
            return
        fi
        key_of "$MONTY_PKGS" >"$PEERS_DIR/monty.stamp"
        log "monty: installed ($(elapsed "$t") s)"
    fi
    record monty true "$MONTY_VERSION" ""
}

# --- hermes ---------------------------------------------------------------------------------
install_hermes() {
    if stamp_ok hermes "$HERMES_PKGS"; then
        log "hermes: already installed"
    else
        local t=$EPOCHREALTIME
        if ! "$PY" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 14)))'; then
            log "hermes: NOT INSTALLED: hermes-agent $HERMES_VERSION needs Python 3.11-3.13, venv has $PY_VERSION"
            record hermes false "$HERMES_VERSION" "needs Python 3.11-3.13, venv has $PY_VERSION"
            return
        fi
        log "hermes: pip install $HERMES_PKGS (about 40 dependencies, pinned)"
        if ! pip_install hermes "$HERMES_PKGS"; then
            log "hermes: NOT INSTALLED: pip failed, see $PEERS_DIR/hermes.log"
            record hermes false "$HERMES_VERSION" "pip install failed, see $PEERS_DIR/hermes.log"
            return
        fi
        mkdir -p "$PEERS_DIR/hermes-home"
        local check
        if ! check=$(HERMES_HOME=$PEERS_DIR/hermes-home "$PY" -c \
            'from tools.terminal_tool import terminal_tool; print("ok")' 2>&1); then
            log "hermes: NOT INSTALLED: installed but its terminal tool does not import: ${check##*$'\n'}"
            record hermes false "$HERMES_VERSION" "terminal tool import failed: ${check##*$'\n'}"
            return
        fi
        key_of "$HERMES_PKGS" >"$PEERS_DIR/hermes.stamp"
        log "hermes: installed ($(elapsed "$t") s)"
    fi
    record hermes true "$HERMES_VERSION" ""
}

for peer in monty hermes; do
    if skipped "$peer"; then
        log "$peer: skipped (PADDOCK_PEERS_SKIP)"
        record "$peer" false "" "skipped by PADDOCK_PEERS_SKIP"
        continue
    fi
    "install_$peer"
done
record cpython true "$PY_VERSION" ""
record bash true "${BASH_VERSION%%(*}" ""
write_status

missing=$(grep -c '"installed": false' "$PEERS_DIR/peers.json" || true)
if [[ $missing != 0 ]]; then
    log "done with $missing peer(s) NOT installed (see $PEERS_DIR/peers.json) ($(elapsed "$T_START") s)"
else
    log "done: all peers installed ($(elapsed "$T_START") s)"
fi
printf '%s\n' "$PEERS_DIR" >&3
