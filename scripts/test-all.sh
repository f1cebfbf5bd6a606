#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root or on a developer's machine.
# Builds once (release profile, used by both the binary and the tests), then runs every test
# against the real binary, then the lint gate. What the suites need is installed here when
# missing: python3 with the jsonschema package (an independent validator of `paddock tools`
# output), tmux (a real terminal for the approval prompt) and ripgrep (the file tools' grep is
# checked against `rg` itself). The Docker, SSH, Apptainer and
# Slurm backends are tested against real services: scripts/test-services.sh installs and starts
# dockerd, a private sshd, Apptainer and a single-node Slurm cluster (idempotent; ~50 s the
# first time, ~2 s after). PADDOCK_SKIP_BACKENDS=docker,ssh,apptainer,slurm (any subset, any
# order) leaves named backends out (their tests say so); with all four out, test-services.sh
# is not run and root is not needed.
# The MCP server is driven by the real Python `mcp` client and the official conformance suite,
# installed by scripts/mcp-test-env.sh into /opt/paddock-mcp-test (PyPI and npm; ~1 min once).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

need_root_apt() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing $*: install it (as root: apt-get install -y $*)" >&2
        exit 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

step "test prerequisites"
command -v python3 >/dev/null || need_root_apt python3 python3-pip
command -v tmux >/dev/null || need_root_apt tmux          # the terminal approver's tests
command -v rg >/dev/null || need_root_apt ripgrep         # grep's answers checked against rg's
# The egress proxy's tests: curl and pip through it, a test CA, pgrep for the proxy process.
command -v curl >/dev/null || need_root_apt curl
command -v openssl >/dev/null || need_root_apt openssl
command -v pgrep >/dev/null || need_root_apt procps
python3 -m pip --version >/dev/null 2>&1 || need_root_apt python3-pip
if ! python3 -c 'import jsonschema' 2>/dev/null; then
    python3 -m pip install --quiet jsonschema 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages jsonschema 2>/dev/null \
        || need_root_apt python3-jsonschema
fi
python3 -c 'import jsonschema' || { echo "jsonschema is still missing" >&2; exit 1; }

# rustpython-ruff_* 0.16.5 declares rust 1.96 but builds on 1.95: see README "Building".
CARGO_FLAGS=(--release --ignore-rust-version --locked)

step "test services (dockerd, sshd, apptainer, slurm)"
skips=${PADDOCK_SKIP_BACKENDS:-}
skipped_all=1
for backend in docker ssh apptainer slurm; do
    case ",${skips// /}," in
    *",$backend,"*) ;;
    *) skipped_all=0 ;;
    esac
done
if [ "$skipped_all" -eq 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/test-services.sh needs root (apt, dockerd, /opt/apptainer, Slurm); run as root," >&2
        echo "or set PADDOCK_SKIP_BACKENDS=docker,ssh,apptainer,slurm to test the local backend only" >&2
        exit 1
    fi
    PADDOCK_TEST_POLICY=$(scripts/test-services.sh)
    export PADDOCK_TEST_POLICY
fi
if [ -n "${PADDOCK_SKIP_BACKENDS:-}" ]; then
    echo "NOTE: backends left out of this run: $PADDOCK_SKIP_BACKENDS" >&2
fi

step "build (release; the first build compiles RustPython: 10-15 minutes)"
cargo build "${CARGO_FLAGS[@]}" --workspace --all-targets

step "the static paddock-agent (docker, apptainer and ssh backends place it in their environments)"
# Only the agent crate and its few dependencies, for the explicit target (~15 s cold).
PADDOCK_AGENT_BIN=$(scripts/build-agent.sh)
export PADDOCK_AGENT_BIN

step "tests"
cargo test "${CARGO_FLAGS[@]}" --workspace --no-fail-fast

step "per-session ceilings against fork bombs, disk fills and CPU spinners, alone (they load the machine on purpose)"
cargo test "${CARGO_FLAGS[@]}" -p paddock-tests --test all -- --ignored ceilings --test-threads=1

step "a compute node cut off and one killed mid-command, alone (they take a node away from every other test, and bring it back)"
cargo test "${CARGO_FLAGS[@]}" -p paddock-tests --test all -- --ignored slurm_nodes::a_compute_node --test-threads=1

step "MCP: paddock serve driven by the real Python mcp 2.3.0 client, and the conformance suite"
MCP_ENV=$(scripts/mcp-test-env.sh)       # private venv (mcp, fastmcp, pytest) + Node 22; idempotent
PADDOCK_BIN="$PWD/target/release/paddock" "$MCP_ENV/venv/bin/python" -m pytest tests/mcp -q -p no:cacheprovider
PADDOCK_BIN="$PWD/target/release/paddock" tests/mcp/run-conformance.sh

step "Python package: the wheel from the built binary (no compile), in a fresh venv, and its tests"
scripts/test-python.sh                   # maturin + a wheelhouse in /opt/paddock-py-test; idempotent

step "framework integrations: pydantic-ai, the OpenAI Agents SDK, LangChain Deep Agents, Inspect AI and smolagents, each by its own suite or a scripted model at its pinned version"
scripts/test-integrations.sh             # a wheelhouse in /opt/paddock-py-test; idempotent

step "E2B front end: paddock serve --e2b driven by the unmodified e2b SDK"
scripts/test-e2b.sh                      # a cached venv in /opt/paddock-py-test; idempotent

step "benchmarks compile"
cargo bench --ignore-rust-version --locked --no-run -p paddock-benches

step "benchmarks: the quick set, beside the peers (docs/benchmarks.md)"
# Peers are optional: one that cannot be installed is reported "not installed" by the bench.
peers=$(scripts/bench-peers.sh) || peers=/nonexistent
bench_out=$(mktemp -d)
target/release/paddock bench --quick --peers "$peers" --out "$bench_out"
rm -rf "$bench_out"

step "format and lints"
cargo fmt --all --check
scripts/check-layers.sh
cargo clippy "${CARGO_FLAGS[@]}" --workspace --all-targets -- -D warnings
