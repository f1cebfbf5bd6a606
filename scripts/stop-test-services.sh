#!/usr/bin/env bash
# Stops what scripts/test-services.sh started: containers labelled paddock.managed=true,
# Apptainer instances named paddock-*, and, by their PID files, the private sshd and the dockerd
# it started (a dockerd it found already running is left alone). Idempotent. Installed
# packages, the image, the rootfs and the SIF stay, so the next start takes a few seconds.
#
# Environment: PADDOCK_SERVICES_DIR (default /tmp/paddock-services), as for test-services.sh.
set -euo pipefail
export LC_ALL=C

SERVICES_DIR=${PADDOCK_SERVICES_DIR:-/tmp/paddock-services}
APPTAINER=/opt/apptainer/bin/apptainer

log() { printf 'stop-test-services: %s\n' "$*" >&2; }

pid_of() { # pidfile exe-name: print the PID if that process is alive and is that program
    local pid exe
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    exe=${exe% (deleted)}
    [ "${exe##*/}" = "$2" ] || return 1
    echo "$pid"
}

stop_pid() { # pid name seconds: SIGTERM, wait, then SIGKILL
    local pid=$1 name=$2 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < $3 * 10; i++)); do
        [ -d "/proc/$pid" ] || { log "$name (pid $pid) stopped"; return 0; }
        sleep 0.1
    done
    log "$name (pid $pid) still running after $3 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

docker_ping() {
    [ "$(curl -fsS --max-time 3 --unix-socket /var/run/docker.sock http://localhost/_ping 2>/dev/null)" = OK ]
}

# 1. Paddock's containers, while dockerd still answers (whoever started it).
if command -v curl >/dev/null && docker_ping; then
    mapfile -t ids < <(docker ps -aq --filter label=paddock.managed=true)
    if [ ${#ids[@]} -gt 0 ]; then
        log "removing ${#ids[@]} container(s) labelled paddock.managed=true"
        docker rm -f "${ids[@]}" >/dev/null
    fi
fi

# 2. Apptainer instances named paddock-* (root's; the first line of the list is a header).
if [ -x "$APPTAINER" ]; then
    mapfile -t names < <("$APPTAINER" instance list 2>/dev/null | awk 'NR > 1 && $1 ~ /^paddock-/ {print $1}')
    for name in "${names[@]}"; do
        log "stopping apptainer instance $name"
        "$APPTAINER" instance stop "$name" >&2 || log "could not stop apptainer instance $name"
    done
fi

# 3. The private sshd, and its per-connection children (say ControlMaster sessions), which
#    would otherwise outlive the listener.
if pid=$(pid_of "$SERVICES_DIR/ssh/sshd.pid" sshd); then
    mapfile -t children < <(ps -o pid= --ppid "$pid" | tr -d ' ')
    stop_pid "$pid" sshd 10
    for child in "${children[@]}"; do
        if [ -n "$child" ] && [ -d "/proc/$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi
    done
fi
rm -f "$SERVICES_DIR/ssh/sshd.pid"

# 4. The dockerd that test-services.sh started; it stops its containers and its containerd.
if pid=$(pid_of "$SERVICES_DIR/dockerd.pid" dockerd); then
    stop_pid "$pid" dockerd 30
fi
rm -f "$SERVICES_DIR/dockerd.pid"

log "done"
