#!/usr/bin/env bash
# Stops what scripts/test-services.sh started: containers labelled paddock.managed=true,
# Apptainer instances named paddock-*, Slurm jobs named paddock-*, and, by their PID files, the
# Slurm daemons (the compute nodes pdk-node1 and pdk-node2 with their namespaces, slurmd,
# slurmctld and munged; then the network namespaces pdk-net and pdk-node*, with them the veths,
# and the empty cgroup v1 directories Slurm leaves in /sys/fs/cgroup/*/slurm_<node>), the
# private sshd, the dockerd it started (a dockerd it found already running is left alone) and
# the loop-mounted XFS of the reflink tests.
# Idempotent, and quiet when nothing runs. Installed packages, the image, the rootfs, the SIF
# and Slurm's configuration (/etc/slurm) and state (/var/lib/slurm) stay, so the next start
# takes a few seconds. Slurm jobs not named paddock-* are left running on this machine's node:
# their slurmstepd outlives the daemons, and a restart picks them up again. On the compute
# nodes nothing outlives the node, so all jobs there are cancelled (else slurmctld would keep
# them as running ghosts after the next start).
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

running() { # pid: alive and not a zombie (init here reaps orphans only every ~2 s)
    local state
    state=$(awk '$1 == "State:" {print $2}' "/proc/$1/status" 2>/dev/null || true)
    [ -n "$state" ] && [ "$state" != Z ]
}

stop_pid() { # pid name seconds: SIGTERM, wait, then SIGKILL
    local pid=$1 name=$2 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < $3 * 10; i++)); do
        running "$pid" || { log "$name (pid $pid) stopped"; return 0; }
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

# 3. Slurm: Paddock's jobs (named paddock-*) while slurmctld still answers, then the daemons.
#    Their pid files are in /run/slurm (machine-wide, like /etc/slurm/slurm.conf) and munged's in
#    /run/munge. A pid file can be stale (the PID of another program now): pid_of checks the exe.
#    /usr/sbin/slurmctld and slurmd are symlinks to slurmctld-wlm and slurmd-wlm.
slurm_exe() { # daemon: the name of its binary
    local p
    p=$(readlink -f "/usr/sbin/$1" 2>/dev/null) || p=$1
    echo "${p##*/}"
}
paddock_jobs() { # the ids of the pending, running and completing jobs named paddock-*, and of
    # all jobs in the partition of the compute nodes
    timeout 10 squeue -h -o '%i %j %P' 2>/dev/null | awk '$2 ~ /^paddock-/ || $3 == "nodes" {print $1}'
}
if pid_of /run/slurm/slurmctld.pid "$(slurm_exe slurmctld)" >/dev/null && command -v squeue >/dev/null; then
    mapfile -t jobs < <(paddock_jobs)
    if [ ${#jobs[@]} -gt 0 ]; then
        log "cancelling ${#jobs[@]} slurm job(s) named paddock-* or in partition nodes"
        scancel "${jobs[@]}" 2>/dev/null || true
        # Until they have ended: their processes get SIGTERM, and SIGKILL after KillWait (5 s).
        for ((i = 0; i < 300; i++)); do
            [ -n "$(paddock_jobs)" ] || break
            sleep 0.1
        done
    fi
    others=$(timeout 10 squeue -h -o '%i' 2>/dev/null | wc -l)
    if [ "$others" -gt 0 ]; then log "note: $others other slurm job(s) keep running"; fi
fi
# The compute nodes first: the pid file names the `unshare` that holds a node's namespaces; its
# child is the node's init (PID 1 there), which on SIGTERM stops the node's slurmd and exits,
# and the kernel then kills whatever is left in that PID namespace (jobs not named paddock-*
# too: a node is powered off). The mounts (private tmpfs /tmp and so on) go with the namespace.
SLURM_NODES=(pdk-node1 pdk-node2)
for node in "${SLURM_NODES[@]}"; do
    if pid=$(pid_of "/run/slurm/$node.pid" unshare); then
        init=$(pgrep -P "$pid" | head -n 1 || true)
        if [ -n "$init" ]; then
            stop_pid "$init" "node $node (init)" 15
            for ((i = 0; i < 50; i++)); do
                running "$pid" || break
                sleep 0.1
            done
        fi
        if running "$pid"; then stop_pid "$pid" "node $node (unshare)" 5; fi
    fi
    rm -f "/run/slurm/$node.pid"
done
for daemon in slurmd slurmctld; do
    if pid=$(pid_of "/run/slurm/$daemon.pid" "$(slurm_exe "$daemon")"); then
        stop_pid "$pid" "$daemon" 15
    fi
    rm -f "/run/slurm/$daemon.pid"
done
if pid=$(pid_of /run/munge/munged.pid munged); then
    stop_pid "$pid" munged 10
fi
# The compute nodes' network: deleting a network namespace deletes its veths, and with them
# their peers (pdk-login here). Only once no node runs: a process in it would keep it alive.
nodes_left=
for node in "${SLURM_NODES[@]}"; do
    if pid_of "/run/slurm/$node.pid" unshare >/dev/null; then nodes_left+=" $node"; fi
done
if [ -z "$nodes_left" ]; then
    for ns in "${SLURM_NODES[@]}" pdk-net; do
        if [ -e "/run/netns/$ns" ]; then
            ip netns delete "$ns" && log "network namespace $ns removed"
        fi
    done
    if ip link show dev pdk-login >/dev/null 2>&1; then ip link delete pdk-login || true; fi
else
    log "node(s)$nodes_left still running: their network namespaces stay"
fi
# proctrack/cgroup and task/cgroup leave their (empty) top directories behind; rmdir, deepest
# first, removes only empty cgroups. Not while some slurmd (not ours, say) still runs.
slurmd_left=
for pid in $(pgrep -x slurmd || true; pgrep -x "$(slurm_exe slurmd)" || true); do
    if running "$pid"; then slurmd_left=$pid; fi
done
if [ -z "$slurmd_left" ]; then
    for d in /sys/fs/cgroup/*/slurm_"$(hostname -s)" /sys/fs/cgroup/*/slurm_pdk-node* /sys/fs/cgroup/*/slurm; do
        if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
    done
fi

# 4. The private sshd, and its per-connection children (say ControlMaster sessions), which
#    would otherwise outlive the listener.
if pid=$(pid_of "$SERVICES_DIR/ssh/sshd.pid" sshd); then
    mapfile -t children < <(ps -o pid= --ppid "$pid" | tr -d ' ')
    stop_pid "$pid" sshd 10
    for child in "${children[@]}"; do
        if [ -n "$child" ] && [ -d "/proc/$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi
    done
fi
rm -f "$SERVICES_DIR/ssh/sshd.pid"

# 5. The dockerd that test-services.sh started; it stops its containers and its containerd.
if pid=$(pid_of "$SERVICES_DIR/dockerd.pid" dockerd); then
    stop_pid "$pid" dockerd 30
fi
rm -f "$SERVICES_DIR/dockerd.pid"

# 6. The reflink test file system (its image stays, for the next start).
if mountpoint -q "$SERVICES_DIR/reflink" 2>/dev/null; then
    if umount "$SERVICES_DIR/reflink" 2>/dev/null || umount -l "$SERVICES_DIR/reflink"; then
        log "reflink file system unmounted"
    fi
fi

log "done"
