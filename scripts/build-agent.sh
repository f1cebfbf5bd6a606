#!/usr/bin/env bash
# Builds the static paddock-agent (the in-environment agent that docker, ssh, apptainer and slurm
# backends place into their environments) and prints its path. The `paddock` binary already
# carries one (backends/build.rs runs this same build while the workspace compiles); this script
# is for tests and operators who want the file itself (PADDOCK_AGENT_BIN, or a paddock-agent
# beside the binary). Only the agent crate and its five small dependencies are compiled for the
# explicit target (about 15 s cold), in a target directory of their own (target/agent-static,
# shared with build.rs, so one of the two finds the other's build fresh): crt-static applies to
# them alone, so the workspace's one release build is not redone with other flags.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -m)" != x86_64 ]; then
    echo "build-agent: only x86-64 Linux is supported (this machine is $(uname -m))" >&2
    exit 1
fi
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --ignore-rust-version --locked -p paddock-agent \
    --target x86_64-unknown-linux-gnu --target-dir target/agent-static >&2
agent="$PWD/target/agent-static/x86_64-unknown-linux-gnu/release/paddock-agent"
if ! file "$agent" 2>/dev/null | grep -q 'static'; then
    # `file` may be missing; the engine checks for a dynamic loader itself.
    command -v file >/dev/null && { echo "build-agent: $agent is not static" >&2; exit 1; }
fi
echo "$agent"
