#!/usr/bin/env bash
# The official MCP conformance suite (server scenarios) against `paddock serve --http`.
#
#   tests/mcp/run-conformance.sh                  # exit 0: no regression against the baseline
#   tests/mcp/run-conformance.sh --no-baseline    # every failing check as `scenario:check-id`
#                                                 # (candidates for conformance-baseline.yml)
#
# Environment:
#   PADDOCK_BIN                 the binary (default: <repo>/target/release/paddock)
#   PADDOCK_CONFORMANCE_POLICY  a policy for the server (default: the built-in one)
#   CONFORMANCE_OUT             where results go (default: a new temp dir, printed at the end)
#   PADDOCK_MCP_ENV             the test env dir (see scripts/mcp-test-env.sh)
#
# Which scenarios: the ones that apply to a product server (no fixture tools, no prompts or
# resources), each at every protocol revision it applies to: 2025-11-25 (initialize handshake,
# sessions) and 2026-07-28 (stateless). Left out: tools-call-* / input-required-result-* /
# elicitation-* / json-schema-2020-12 / server-sse-polling (need fixture tools),
# http-custom-header-server-validation (needs x-mcp-header tools), prompts-* / resources-* /
# completion-complete / sep-2164-resource-not-found (not implemented), tasks-* / sep-2640-*
# (extensions).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

USE_BASELINE=1
case "${1:-}" in
    --no-baseline) USE_BASELINE=0 ;;
    "") ;;
    *) echo "usage: $0 [--no-baseline]" >&2; exit 2 ;;
esac

LEGACY_SCENARIOS=(
    server-initialize
    server-session-lifecycle
    ping
    logging-set-level
    tools-list
    tools-call-error
    dns-rebinding-protection
    server-sse-multiple-streams
)
MODERN_SCENARIOS=(
    server-stateless
    http-header-validation
    caching
    tools-list
    tools-call-error
    dns-rebinding-protection
    server-sse-multiple-streams
)

ENV_DIR=$(scripts/mcp-test-env.sh | tail -n 1)
export PATH=$ENV_DIR/node/bin:$PATH
PY=$ENV_DIR/venv/bin/python
BIN=${PADDOCK_BIN:-$REPO/target/release/paddock}
[ -x "$BIN" ] || { echo "no paddock binary at $BIN (cargo build --release, or set PADDOCK_BIN)" >&2; exit 2; }
BASELINE=$REPO/tests/mcp/conformance-baseline.yml
OUT=${CONFORMANCE_OUT:-$(mktemp -d /tmp/paddock-conformance.XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/paddock-conformance-run.XXXXXX)

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

serve_args=(serve --http 127.0.0.1:0)
[ -n "${PADDOCK_CONFORMANCE_POLICY:-}" ] && serve_args+=(--policy "$PADDOCK_CONFORMANCE_POLICY")
mkdir -p "$WORK/home"
PADDOCK_HOME=$WORK/home "$BIN" "${serve_args[@]}" </dev/null >"$OUT/server.log" 2>&1 &
SERVER_PID=$!

URL=
for _ in $(seq 600); do   # 60 s
    URL=$(sed -n 's|.*paddock: serving MCP on \(http://[^ ]*\).*|\1|p' "$OUT/server.log" | head -n 1)
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$URL" ]; then
    echo "paddock serve did not print its URL; its log ($OUT/server.log):" >&2
    tail -n 40 "$OUT/server.log" >&2
    exit 1
fi
echo "conformance $(conformance --version) against $URL (results: $OUT)" >&2

failed=()
run() {  # run VERSION SCENARIO
    local version=$1 scenario=$2 args=()
    [ "$USE_BASELINE" = 1 ] && args+=(--expected-failures "$BASELINE")
    if conformance server --url "$URL" --scenario "$scenario" --spec-version "$version" \
        -o "$OUT/$version" "${args[@]}" >"$OUT/$version-$scenario.txt" 2>&1; then
        echo "ok    $version $scenario" >&2
    else
        echo "FAIL  $version $scenario   (see $OUT/$version-$scenario.txt)" >&2
        failed+=("$version $scenario")
    fi
}
for s in "${LEGACY_SCENARIOS[@]}"; do run 2025-11-25 "$s"; done
for s in "${MODERN_SCENARIOS[@]}"; do run 2026-07-28 "$s"; done

# Every failing check (a WARNING counts as a failure against a baseline), as a baseline entry
# would name it.
"$PY" - "$OUT" <<'EOF' >&2
import json, pathlib, sys
seen = set()
for checks in sorted(pathlib.Path(sys.argv[1]).glob("*/server-*/checks.json")):
    scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]  # strip the timestamp
    for c in json.loads(checks.read_text()):
        status = c.get("status")
        if status in ("FAILURE", "WARNING") and (scenario, c.get("id")) not in seen:
            seen.add((scenario, c.get("id")))
            why = (c.get("errorMessage") or c.get("description") or "")[:110]
            print(f"  {status.lower()}: - {scenario}:{c.get('id')}  # {why}")
EOF

if [ ${#failed[@]} -gt 0 ]; then
    echo "conformance: ${#failed[@]} scenario run(s) failed$([ "$USE_BASELINE" = 1 ] && echo ' against the baseline (a regression, or a stale baseline entry)'): ${failed[*]}" >&2
    exit 1
fi
echo "conformance: all scenario runs passed$([ "$USE_BASELINE" = 1 ] && echo ' (expected failures excepted)')" >&2
