#!/usr/bin/env bash
# Starts real test services for Paddock's Docker, SSH, Apptainer and Slurm backends on a Debian 12
# machine, as root, installing whatever is missing. Idempotent: when everything is already up,
# a re-run only checks each service (a few seconds) and changes nothing.
#
#   policy=$(scripts/test-services.sh)      # stdout: only the policy file's absolute path
#   scripts/stop-test-services.sh           # stops what this started
#
# It writes, under $SERVICES_DIR:
#   policy.toml    one [backends.NAME] section per service that is up
#   services.env   PADDOCK_TEST_POLICY=<policy.toml>, PADDOCK_TEST_BACKENDS=<comma list>,
#                  PADDOCK_TEST_REFLINK_DIR=<a directory on XFS with reflink> and, with Slurm,
#                  PADDOCK_TEST_SLURM_NODES=<the compute nodes' names>
#   reflink.img    a 1 GB sparse XFS image, loop-mounted on reflink/ (snapshots' reflink copies)
#   *.log          one log per step; a failure names the step and the log to read
#   slurm/         the logs of slurmctld and the slurmds (owned by the user slurm), and of the
#                  compute nodes' inits (pdk-node*.log)
#
# Environment:
#   PADDOCK_SERVICES_DIR    all state (default /tmp/paddock-services)
#   PADDOCK_SSH_PORT        port of the private sshd on 127.0.0.1 (default 2222)
#   PADDOCK_SKIP_BACKENDS   comma list of docker,docker_runsc,ssh,apptainer,slurm not to set up
#                           (left out of the policy; docker_runsc is docker under gVisor, left out
#                           with docker too)
#   PADDOCK_DEBIAN_MIRROR   Debian mirror for the sid downloads (default: the one apt already uses)
#
# Why things are done the way they are (tested recipes, timings, pitfalls): the project notes
# "backends-on-debian.md" and "slurm-on-debian.md". Outside $SERVICES_DIR this touches: apt
# packages, /var/lib/docker (image paddock-test:latest), the runtime "runsc" merged into the
# daemon.json of the dockerd in use (/etc/docker/daemon.json unless it was started with
# --config-file; the daemon reloads it on SIGHUP), /opt/apptainer, /run/sshd, the user
# paddock-ci, and for Slurm (a machine-wide cluster: this machine's node and two compute nodes in
# namespaces): /etc/slurm/slurm.conf and cgroup.conf, the munge key /etc/munge/munge.key
# (created if absent), /run/munge, /run/slurm (pid files), Slurm's state in /var/lib/slurm,
# munged's log /var/log/munge, the cgroup v1 directories /sys/fs/cgroup/*/slurm_<host> and
# slurm_pdk-node*, the network namespaces pdk-net, pdk-node1 and pdk-node2 (/run/netns), the veth
# pdk-login (10.77.0.1/24) and the directory /root/.local/state/paddock (created if absent; the
# nodes mount their own over it).
set -euo pipefail
export LC_ALL=C

SERVICES_DIR=${PADDOCK_SERVICES_DIR:-/tmp/paddock-services}
SSH_PORT=${PADDOCK_SSH_PORT:-2222}
SKIP=${PADDOCK_SKIP_BACKENDS:-}
SKIP=${SKIP// /}

IMAGE=paddock-test:latest
ROOTFS_LABEL=paddock.test-rootfs        # image label: the hash of the rootfs it was built from
APPTAINER_PREFIX=/opt/apptainer
APPTAINER=$APPTAINER_PREFIX/bin/apptainer
SSH_USER=paddock-ci
HOST_PYTHON=/usr/bin/python3.11          # the system python, not a pyenv shim that PATH may prefer
PYLIB=/usr/lib/python3.11

# The programs the image must have in /bin (Paddock's terminal and process tools use them):
# busybox applets, or the host's coreutils program where busybox-static lacks one.
REQUIRED_TOOLS="sleep cat ls mkdir rm mv cp kill ps env setsid timeout grep sed tr head tail wc
    uname id nohup mkfifo stat touch find date true false xargs sort uniq cut tee basename
    dirname readlink realpath chmod ln printf echo test expr seq"

# What every service must run: the minimum Paddock's backends rely on.
SMOKE='echo ok; python3 -c "print(1)"'
SMOKE_EXPECTED=$'ok\n1'

# From here on stdout is reserved for the policy path: fd 3 keeps the real stdout and all other
# output (ours and every command's) goes to stderr. fd 4 is the real stderr, for progress lines
# even from inside a step whose output goes to its log. Daemons get 3, 4 (and the lock, 9)
# closed, or `$(scripts/test-services.sh)` would wait for them forever.
exec 3>&1 4>&2 1>&2

log() { printf 'test-services: %s\n' "$*" >&4; }
fail() { log "$*"; exit 1; }

T_START=$EPOCHREALTIME
elapsed() { # seconds since the EPOCHREALTIME value $1, as 1.2
    local us=$((${EPOCHREALTIME//[!0-9]/} - ${1//[!0-9]/}))
    printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}

# The current step and its log: on any failure the EXIT trap names both and shows the log's tail.
STEP=setup
STEP_LOG=
STEP_T0=$EPOCHREALTIME
step() { # name [log]: start a (possibly slow) step; its commands append to the log
    STEP=$1 STEP_LOG=${2:-} STEP_T0=$EPOCHREALTIME
    if [ -n "$STEP_LOG" ]; then
        printf '\n=== %s: %s\n' "$(date -u +%FT%TZ)" "$STEP" >>"$STEP_LOG"
    fi
    log "$STEP ..."
}
step_done() { log "$STEP: ${1:-done} in $(elapsed "$STEP_T0") s"; }
on_exit() {
    local rc=$?
    [ "$rc" -eq 0 ] && return
    log "FAILED (exit $rc) in step: $STEP"
    if [ -n "$STEP_LOG" ] && [ -s "$STEP_LOG" ]; then
        log "read $STEP_LOG; its last lines:"
        tail -n 25 "$STEP_LOG" | sed 's/^/    /' >&4
    fi
}
trap on_exit EXIT

want() { case ",$SKIP," in *",$1,"*) return 1 ;; esac; }

pid_alive() { # pidfile exe-name: is the process named in the pid file alive and that program?
    local pid exe
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    exe=${exe% (deleted)}   # still the right daemon after a package upgrade replaced its binary
    [ "${exe##*/}" = "$2" ]
}

CHANGED=0
write_if_changed() { # path content: rewrite only on a change, so a re-run changes nothing
    CHANGED=0
    if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then
        return 0
    fi
    printf '%s\n' "$2" >"$1.tmp"
    mv -f "$1.tmp" "$1"
    CHANGED=1
}

# ---------------------------------------------------------------------------------------------
# Preconditions
# ---------------------------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || fail "must run as root (it installs packages and starts dockerd/sshd/Slurm)"
IFS=, read -r -a skip_list <<<"$SKIP"
for b in "${skip_list[@]}"; do
    case $b in
    docker | docker_runsc | ssh | apptainer | slurm | "") ;;
    *) fail "PADDOCK_SKIP_BACKENDS: unknown backend '$b' (known: docker,docker_runsc,ssh,apptainer,slurm)" ;;
    esac
done
if ! [[ $SSH_PORT =~ ^[0-9]{1,5}$ ]] || [ "$SSH_PORT" -lt 1 ] || [ "$SSH_PORT" -gt 65535 ]; then
    fail "PADDOCK_SSH_PORT must be a port number, not '$SSH_PORT'"
fi

mkdir -p "$SERVICES_DIR"
SERVICES_DIR=$(realpath "$SERVICES_DIR")
# The path goes verbatim into sshd_config and TOML strings: keep it free of quoting problems.
if ! [[ $SERVICES_DIR =~ ^/[A-Za-z0-9._/-]+$ ]]; then
    fail "PADDOCK_SERVICES_DIR must be a path of letters, digits and ._/- only: '$SERVICES_DIR'"
fi

# One run at a time (say CI and a developer): the second waits for the first.
exec 9>>"$SERVICES_DIR/.lock"
flock -w 900 9 || fail "another test-services.sh holds $SERVICES_DIR/.lock"

ROOTFS=$SERVICES_DIR/rootfs
SIF=$SERVICES_DIR/apptainer/paddock-test.sif
SSH_DIR=$SERVICES_DIR/ssh
DOCKERD_PIDFILE=$SERVICES_DIR/dockerd.pid
SSHD_PIDFILE=$SSH_DIR/sshd.pid
log "state in $SERVICES_DIR${SKIP:+; skipping: $SKIP}"

# ---------------------------------------------------------------------------------------------
# 1. Packages: one apt-get call for everything missing (separate calls cost ~100 s instead of
#    ~40 s on this kind of machine, mostly repeated man-db and libc triggers).
# ---------------------------------------------------------------------------------------------
# Per backend, so a skipped one installs nothing. Besides the service packages: curl (the docker
# ping), python3.11 (copied into the image; usually present) and python3 (the SSH user and the
# Slurm smoke test run it). Slurm: not the slurm-wlm metapackage, which pulls -dev packages and
# a dozen extra plugins; these four install in ~8 s with --no-install-recommends.
# xfsprogs: the reflink-capable file system of the snapshot tests (step 6b).
pkgs=(xfsprogs)
if want docker; then pkgs+=(docker.io iptables curl busybox-static python3.11); fi
# gVisor's runsc (Debian's 2022 build), a second docker runtime (step 3b).
if want docker && want docker_runsc; then pkgs+=(runsc); fi
if want ssh; then pkgs+=(openssh-server openssh-client python3); fi
if want apptainer; then
    pkgs+=(busybox-static python3.11 patchelf squashfs-tools uidmap e2fsprogs libseccomp2
        libsqlite3-0 containernetworking-plugins)
fi
# iproute2 and util-linux (ip, nsenter, unshare): the compute nodes' namespaces.
if want slurm; then pkgs+=(slurmctld slurmd slurm-client munge python3 iproute2 util-linux); fi
missing=()
if [ ${#pkgs[@]} -gt 0 ]; then
    # One dpkg-query for all; packages dpkg has never heard of print nothing (and make it exit 1).
    # shellcheck disable=SC2016 # a dpkg-query format, not shell expansions
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${pkgs[@]}" 2>/dev/null |
        awk '$2 == "ii" {print $1}' || true)
    for p in $(printf '%s\n' "${pkgs[@]}" | sort -u); do
        grep -qxF "$p" <<<"$installed" || missing+=("$p")
    done
fi
if [ ${#missing[@]} -gt 0 ]; then
    step "apt: install ${missing[*]}" "$SERVICES_DIR/apt.log"
    apt-get update >>"$STEP_LOG" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" \
        >>"$STEP_LOG" 2>&1
    step_done
fi

# ---------------------------------------------------------------------------------------------
# 2. The test rootfs, shared by the Docker image and the SIF: no registry is reachable, so it
#    is made from host binaries: busybox-static applets, the real bash, the system python3.11
#    and its stdlib, each with the libraries ldd reports. ~40 MB, a few seconds.
# ---------------------------------------------------------------------------------------------
copy_with_libs() { # root strict|optional FILE...: copy the files' libraries (ldd) into root
    local root=$1 mode=$2 lib
    shift 2
    local out
    out=$(ldd "$@" 2>&1) || true
    if grep -q 'not found' <<<"$out"; then
        if [ "$mode" = strict ]; then
            printf '%s\n' "$out" >&2
            fail "ldd: a library of $* is missing on the host"
        fi
        # Optional: a lib-dynload module whose library is absent only makes that module unusable.
        grep 'not found' <<<"$out" | sort -u | sed 's/^/  (module library absent) /' >&2
    fi
    # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x..)" and "/lib64/ld-linux-x86-64.so.2 (0x..)"
    for lib in $(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' <<<"$out" | sort -u); do
        if [ ! -e "$root$lib" ]; then
            mkdir -p "$root${lib%/*}"
            cp -L "$lib" "$root$lib"   # the soname path, dereferenced: the loader looks up that name
        fi
    done
}

build_rootfs() { # dir
    local new=$1 bb applet
    rm -rf "$new"
    # Merged /usr like the host, so library paths ldd reports (/lib/..., /lib64/...) land in usr/.
    mkdir -p "$new"/usr/{bin,sbin,lib,lib64} "$new"/{etc,root,workspace,tmp,var/tmp,proc,sys,dev,run,home}
    ln -s usr/bin "$new/bin"
    ln -s usr/sbin "$new/sbin"
    ln -s usr/lib "$new/lib"
    ln -s usr/lib64 "$new/lib64"
    chmod 1777 "$new/tmp" "$new/var/tmp"
    chmod 700 "$new/root"

    # The real bash first (Paddock's terminal needs declare -f, alias, export -p, read -d ''),
    # also as /bin/sh, so the busybox applets below never take these names.
    cp /usr/bin/bash "$new/usr/bin/bash"
    ln -s bash "$new/usr/bin/sh"
    copy_with_libs "$new" strict /usr/bin/bash

    bb=$(command -v busybox || echo /bin/busybox)
    cp -L "$bb" "$new/usr/bin/busybox"
    for applet in $("$new/usr/bin/busybox" --list); do
        if [ ! -e "$new/usr/bin/$applet" ] && [ ! -L "$new/usr/bin/$applet" ]; then
            ln -s busybox "$new/usr/bin/$applet"
        fi
    done
    # Debian's busybox-static has no nohup applet: such gaps get the host's coreutils program.
    for tool in $REQUIRED_TOOLS; do
        if [ ! -e "$new/usr/bin/$tool" ]; then
            cp "/usr/bin/$tool" "$new/usr/bin/$tool"
            copy_with_libs "$new" strict "/usr/bin/$tool"
        fi
    done

    # python3.11 (the host's, statically linked with libpython) and its stdlib, without tests,
    # GUI, pip bootstrap, bytecode caches and the 25 MB static library of the -dev package.
    cp "$HOST_PYTHON" "$new/usr/bin/python3.11"
    ln -s python3.11 "$new/usr/bin/python3"
    ln -s python3 "$new/usr/bin/python"
    copy_with_libs "$new" strict "$HOST_PYTHON"
    tar -C / -cf - \
        --exclude="${PYLIB#/}/test" --exclude="${PYLIB#/}/idlelib" --exclude="${PYLIB#/}/tkinter" \
        --exclude="${PYLIB#/}/ensurepip" --exclude="${PYLIB#/}/config-3.11-*" --exclude=__pycache__ \
        "${PYLIB#/}" | tar -C "$new" -xf -
    # Debian's sitecustomize.py is a symlink into /etc/python3.11.
    if [ -d /etc/python3.11 ]; then cp -a /etc/python3.11 "$new/etc/"; fi
    copy_with_libs "$new" optional "$PYLIB"/lib-dynload/*.so

    printf '%s\n' 'root:x:0:0:root:/root:/bin/bash' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
        >"$new/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$new/etc/group"
    echo paddock-test >"$new/etc/hostname"
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$new/etc/hosts"
    : >"$new/etc/resolv.conf"
}

# Everything Paddock's backends use inside the image; checked once per build in a chroot.
ROOTFS_CHECK="REQUIRED_TOOLS='$REQUIRED_TOOLS'"$'\n'$(
    cat <<'EOF'
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for a in $REQUIRED_TOOLS; do
    [ -x "/bin/$a" ] || { echo "missing /bin/$a" >&2; exit 1; }
done
[ "$(readlink -f /bin/sh)" = /usr/bin/bash ]
f() { echo f; }; declare -f f >/dev/null
shopt -s expand_aliases; alias ll='ls -l'; alias ll >/dev/null
export PADDOCK_X=1; export -p | grep -q PADDOCK_X
printf 'a\0b\0' | { IFS= read -r -d '' x; [ "$x" = a ]; }
timeout 5 sleep 0; echo x | sed s/x/y/ | grep -q y
python3 -c 'import json,base64,hashlib,subprocess,os,sys
assert subprocess.run(["echo","x"],capture_output=True).stdout == b"x\n"
hashlib.sha256(b"").hexdigest(); print("python ok")'
python -c 'import ssl, sqlite3, ctypes' 2>/dev/null || echo "note: ssl/sqlite3/ctypes not importable" >&2
EOF
)

rootfs_stamp() { # a hash of the recipe and of the host files it copies
    {
        declare -f build_rootfs copy_with_libs
        sha256sum /usr/bin/bash "$(command -v busybox || echo /bin/busybox)" "$HOST_PYTHON"
        # shellcheck disable=SC2016 # a dpkg-query format, not shell expansions
        dpkg-query -W -f='${Package}=${Version}\n' libc6 libpython3.11-stdlib libpython3.11-minimal \
            libssl3 2>/dev/null || true
    } | sha256sum | cut -c1-16
}

ROOTFS_STAMP=
if want docker || want apptainer; then
    ROOTFS_STAMP=$(rootfs_stamp)
    if [ -d "$ROOTFS" ] && [ "$(cat "$ROOTFS.stamp" 2>/dev/null)" = "$ROOTFS_STAMP" ]; then
        log "rootfs: up to date ($ROOTFS)"
    else
        step "rootfs: build from host binaries" "$SERVICES_DIR/rootfs.log"
        build_rootfs "$ROOTFS.new" >>"$STEP_LOG" 2>&1
        chroot "$ROOTFS.new" /bin/bash -c "$ROOTFS_CHECK" >>"$STEP_LOG" 2>&1
        rm -rf "$ROOTFS"
        mv "$ROOTFS.new" "$ROOTFS"
        echo "$ROOTFS_STAMP" >"$ROOTFS.stamp"
        step_done "$(du -sm "$ROOTFS" | cut -f1) MB"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 3. Docker: a plain dockerd works here (overlay2, cgroupfs on cgroup v1, bridge + nft iptables).
# ---------------------------------------------------------------------------------------------
docker_ping() {
    [ "$(curl -fsS --max-time 3 --unix-socket /var/run/docker.sock http://localhost/_ping 2>/dev/null)" = OK ]
}

if want docker; then
    if docker_ping; then
        log "docker: dockerd answers"
    else
        step "docker: start dockerd" "$SERVICES_DIR/dockerd.log"
        # A dockerd of ours that is alive but not answering yet is waited for, not doubled.
        dockerd_pid=$(cat "$DOCKERD_PIDFILE" 2>/dev/null || true)
        if ! pid_alive "$DOCKERD_PIDFILE" dockerd; then
            # A dockerd that was killed (-9) leaves its pid file, and a new one refuses to start;
            # its containerd lingers too, and a new dockerd would wait for it in vain.
            rm -f "$DOCKERD_PIDFILE"
            stale=/var/run/docker/containerd/containerd.pid
            if [ -f "$stale" ] && kill -0 "$(cat "$stale")" 2>/dev/null; then
                log "docker: ending the containerd a killed dockerd left behind"
                kill "$(cat "$stale")" 2>/dev/null || true
                for _ in $(seq 50); do kill -0 "$(cat "$stale")" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$(cat "$stale")" 2>/dev/null || true
            fi
            rm -f "$stale"
            # setsid: its own session, so it outlives the caller's process group.
            setsid dockerd --pidfile "$DOCKERD_PIDFILE" </dev/null >>"$STEP_LOG" 2>&1 3>&- 4>&- 9>&- &
            dockerd_pid=$!
        fi
        for _ in $(seq 150); do
            docker_ping && break
            kill -0 "$dockerd_pid" 2>/dev/null || fail "dockerd exited"
            sleep 0.2
        done
        docker_ping || fail "dockerd did not answer /_ping within 30 s"
        step_done
    fi

    current=$(docker image inspect -f "{{ index .Config.Labels \"$ROOTFS_LABEL\" }}" "$IMAGE" 2>/dev/null || true)
    if [ "$current" = "$ROOTFS_STAMP" ]; then
        log "docker: image $IMAGE up to date"
    else
        step "docker: import $IMAGE from $ROOTFS" "$SERVICES_DIR/docker-image.log"
        old=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
        tar -C "$ROOTFS" --numeric-owner -cf - . |
            docker import -c 'CMD ["/bin/bash"]' \
                -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                -c "LABEL $ROOTFS_LABEL=$ROOTFS_STAMP" - "$IMAGE" >>"$STEP_LOG" 2>&1
        if [ -n "$old" ]; then docker rmi "$old" >>"$STEP_LOG" 2>&1 || true; fi
        step_done
    fi

    STEP="docker: smoke test (docker run $IMAGE)" STEP_LOG=$SERVICES_DIR/docker-image.log
    # Labelled like Paddock's containers, so stop-test-services.sh removes it should this hang.
    out=$(docker run --rm --network none --label paddock.managed=true "$IMAGE" /bin/bash -c "$SMOKE" 2>>"$STEP_LOG") ||
        fail "docker run $IMAGE failed"
    [ "$out" = "$SMOKE_EXPECTED" ] || fail "docker run $IMAGE printed '$out'"
    log "docker: ok"
fi

# ---------------------------------------------------------------------------------------------
# 3b. gVisor: runsc registered with the running dockerd as the runtime "runsc" (the backend
#     docker_runsc, `runtime = "runsc"`), through its daemon.json and a SIGHUP: dockerd reloads
#     `runtimes` without a restart, so containers of running sessions (and other users of the
#     daemon) are left alone. The flags, for Debian 12's runsc 0.0~20221219 on this kind of VM:
#       --platform=ptrace   the kvm platform hangs on a paravirtualised KVM, and this build has no
#                           systrap platform (`runsc flags` lists ptrace and kvm only);
#       --network=none      this build decides it is in the host's network namespace when
#                           /proc/sys/net/core/rmem_default exists, which kernel 6.18 shows in
#                           every namespace, and then refuses to start any container that has a
#                           network ("cannot run with network enabled in root network
#                           namespace"): the sandbox gets loopback only, which is all Paddock's
#                           network = "none" and "proxy" give a container anyway;
#       --host-uds=all      the agent listens on a Unix socket in its bind-mounted directory,
#                           which the engine connects to from the host, and with network =
#                           "proxy" connects to the engine's egress.sock there: by default
#                           gVisor keeps sockets it creates to itself and connects to none of
#                           the host's. (A runc container reaches the sockets of its bind mounts
#                           as well: this gives the sandbox nothing runc would not.)
# ---------------------------------------------------------------------------------------------
RUNSC_RUNTIME='{"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none", "--host-uds=all"]}'

runsc_registered() { # does the daemon list runtime "runsc" exactly as RUNSC_RUNTIME says?
    docker info --format '{{json .Runtimes}}' 2>/dev/null | "$HOST_PYTHON" -c '
import json, sys
have = json.load(sys.stdin).get("runsc") or {}
want = json.loads(sys.argv[1])
sys.exit(0 if have.get("path") == want["path"]
         and (have.get("runtimeArgs") or []) == want["runtimeArgs"] else 1)' "$RUNSC_RUNTIME"
}

dockerd_pid() { # the pid of the dockerd answering on /var/run/docker.sock: ours, or the default's
    local f
    for f in "$DOCKERD_PIDFILE" /var/run/docker.pid; do
        if pid_alive "$f" dockerd; then
            cat "$f"
            return 0
        fi
    done
    # One started some other way (by hand, for another services directory): the only one there.
    local pids
    pids=$(pidof dockerd || true)
    if [ -n "$pids" ] && [ "$(wc -w <<<"$pids")" -eq 1 ]; then
        echo "$pids"
        return 0
    fi
    return 1
}

dockerd_config_file() { # pid: the daemon.json it reads (--config-file, else the default)
    local arg next=0
    while IFS= read -r -d '' arg; do
        if [ "$next" = 1 ]; then
            echo "$arg"
            return
        fi
        case $arg in
        --config-file=*) echo "${arg#--config-file=}"; return ;;
        --config-file) next=1 ;;
        esac
    done <"/proc/$1/cmdline"
    echo /etc/docker/daemon.json
}

if want docker && want docker_runsc; then
    if runsc_registered; then
        log "docker: runtime runsc registered"
    else
        step "docker: register runtime runsc (gVisor, ptrace platform)" "$SERVICES_DIR/runsc.log"
        pid=$(dockerd_pid) || fail "the dockerd answering on /var/run/docker.sock has no pid file \
($DOCKERD_PIDFILE or /var/run/docker.pid): register runsc in its daemon.json by hand, or set \
PADDOCK_SKIP_BACKENDS=docker_runsc"
        config=$(dockerd_config_file "$pid")
        mkdir -p "${config%/*}"
        # Merged into what is there: other settings of the daemon stay as they are.
        "$HOST_PYTHON" - "$config" "$RUNSC_RUNTIME" >>"$STEP_LOG" 2>&1 <<'PY' ||
import json, os, sys
path, runtime = sys.argv[1], json.loads(sys.argv[2])
config = {}
if os.path.exists(path) and open(path).read().strip():
    config = json.load(open(path))
config.setdefault("runtimes", {})["runsc"] = runtime
with open(path + ".tmp", "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
print("wrote", path)
PY
            fail "$config is not valid JSON: fix it, or set PADDOCK_SKIP_BACKENDS=docker_runsc"
        kill -HUP "$pid"
        for _ in $(seq 50); do
            runsc_registered && break
            sleep 0.2
        done
        runsc_registered || fail "dockerd (pid $pid) did not list runsc after reloading $config: \
see its log ($SERVICES_DIR/dockerd.log when this script started it)"
        step_done "merged into $config"
    fi
    STEP="docker: smoke test (docker run --runtime runsc $IMAGE)" STEP_LOG=$SERVICES_DIR/runsc.log
    out=$(docker run --rm --runtime runsc --network none --label paddock.managed=true "$IMAGE" \
        /bin/bash -c "$SMOKE; dmesg | grep -c gVisor" 2>>"$STEP_LOG") ||
        fail "docker run --runtime runsc $IMAGE failed (PADDOCK_SKIP_BACKENDS=docker_runsc leaves gVisor out)"
    [ "$out" = "$SMOKE_EXPECTED"$'\n1' ] || fail "docker run --runtime runsc $IMAGE printed '$out'"
    log "docker: runsc ok"
fi

# ---------------------------------------------------------------------------------------------
# 4. Apptainer 1.4.5 from Debian sid with a private glibc: its binaries need GLIBC_2.38 and
#    bookworm has 2.36. Nothing from sid is installed system-wide: the debs are extracted to
#    /opt/apptainer, and patchelf points the two ELF programs at the private loader and glibc.
# ---------------------------------------------------------------------------------------------
debian_mirror() { # the Debian archive apt already uses (deb822 .sources or one-line .list)
    local m
    if [ -n "${PADDOCK_DEBIAN_MIRROR:-}" ]; then
        echo "$PADDOCK_DEBIAN_MIRROR"
        return
    fi
    m=$({
        awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' /etc/apt/sources.list.d/*.sources 2>/dev/null
        awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) {print $i; break}}' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
    } | grep -E '/debian/?$' | head -n 1 || true)
    [ -n "$m" ] || fail "no Debian mirror in /etc/apt; set PADDOCK_DEBIAN_MIRROR"
    echo "${m%/}"
}

write_apptainer_wrapper() { # path
    # Apptainer run as root asks for every capability; where the bounding set lacks one (this
    # VM has no CAP_SYS_RESOURCE) that fails with "Requesting capability set ... while permitted
    # capability set is ...". The wrapper drops exactly the missing ones, computed at each call,
    # so on a runner with the full set it changes nothing.
    cat >"$1" <<'EOF'
#!/bin/bash
# Written by Paddock's scripts/test-services.sh: runs the relocated Apptainer, dropping the
# capabilities that are missing from this process's bounding set (CapBnd).
caps=(CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID
    CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST CAP_NET_ADMIN
    CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT
    CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE
    CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL
    CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM CAP_BLOCK_SUSPEND
    CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE)
bnd=
while read -r key value; do
    if [ "$key" = CapBnd: ]; then bnd=$value; fi
done </proc/self/status
if [ -n "$bnd" ]; then
    missing=
    for i in "${!caps[@]}"; do
        if (( (16#$bnd >> i & 1) == 0 )); then missing+=${missing:+,}${caps[i]}; fi
    done
    if [ -n "$missing" ]; then
        export APPTAINER_DROP_CAPS=${APPTAINER_DROP_CAPS:+$APPTAINER_DROP_CAPS,}$missing
    fi
fi
exec /opt/apptainer/usr/bin/apptainer "$@"
EOF
    chmod 755 "$1"
}

install_apptainer() {
    local A=$SERVICES_DIR/aptsid P=$APPTAINER_PREFIX new=$APPTAINER_PREFIX.new
    local G=$APPTAINER_PREFIX/glibc/usr/lib/x86_64-linux-gnu deb_app deb_libc f mirror
    local apt_sid=(apt-get -o "Dir::Etc::SourceList=$A/sources.list" -o "Dir::Etc::SourceParts=$A/sources.list.d"
        -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o APT::Sandbox::User=root
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false)
    mkdir -p "$A/lists/partial" "$A/cache" "$A/debs" "$A/sources.list.d"

    # A private apt state for sid: the host's sources and lists stay as they are.
    deb_app=$(find "$A/debs" -name 'apptainer_*.deb' | sort | tail -n 1)
    deb_libc=$(find "$A/debs" -name 'libc6_*.deb' | sort | tail -n 1)
    if [ -z "$deb_app" ] || [ -z "$deb_libc" ]; then
        mirror=$(debian_mirror)
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" >"$A/sources.list"
        "${apt_sid[@]}" update
        rm -f "$A"/debs/*.deb
        (cd "$A/debs" && "${apt_sid[@]}" download apptainer libc6)
        deb_app=$(find "$A/debs" -name 'apptainer_*.deb' | sort | tail -n 1)
        deb_libc=$(find "$A/debs" -name 'libc6_*.deb' | sort | tail -n 1)
    fi
    echo "using ${deb_app##*/} and ${deb_libc##*/}"

    # Built beside and then moved into place: a failed install never looks like a working one.
    rm -rf "$new"
    mkdir -p "$new/glibc" "$new/bin"
    dpkg-deb -x "$deb_app" "$new"
    dpkg-deb -x "$deb_libc" "$new/glibc"
    [ -e "$new/glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] || {
        echo "libc6 deb has no usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        return 1
    }
    # --force-rpath (DT_RPATH, unlike RUNPATH, also applies to dependencies) so libsqlite3's
    # libm resolves to the private glibc too instead of mixing libm 2.36 with libc 2.4x.
    # Child programs (mksquashfs, the container payload) keep the system loader.
    for f in usr/bin/apptainer usr/lib/x86_64-linux-gnu/apptainer/bin/starter; do
        patchelf --set-interpreter "$G/ld-linux-x86-64.so.2" --force-rpath \
            --set-rpath "$G:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu" "$new/$f"
    done
    # Apptainer relocates itself from the binary's location: the CLI takes prefix
    # /opt/apptainer/usr (config in $prefix/etc/apptainer), the starter /opt/apptainer/usr/lib
    # (Debian's multiarch libexec), hence the two symlinks. Without them: "failed to resolve
    # session directory /opt/apptainer/usr/lib/var/lib/apptainer/mnt/session".
    mv "$new/etc" "$new/usr/etc"
    mkdir -p "$new/usr/var/lib/apptainer/mnt/session"
    ln -s ../var "$new/usr/lib/var"
    ln -s ../etc "$new/usr/lib/etc"
    # The CNI paths are not relocated ("no net configurations found in /etc/apptainer/network").
    printf '\n# Added by Paddock scripts/test-services.sh: CNI paths are not relocated.\n%s\n%s\n' \
        "cni configuration path = $P/usr/etc/apptainer/network" "cni plugin path = /usr/lib/cni" \
        >>"$new/usr/etc/apptainer/apptainer.conf"
    write_apptainer_wrapper "$new/bin/apptainer"

    rm -rf "$P"
    mv "$new" "$P"
    "$APPTAINER" version
}

if want apptainer; then
    # Apptainer's own cache and temporary files stay under $SERVICES_DIR too.
    export APPTAINER_CACHEDIR=$SERVICES_DIR/apptainer/cache APPTAINER_TMPDIR=$SERVICES_DIR/apptainer/tmp
    mkdir -p "$APPTAINER_CACHEDIR" "$APPTAINER_TMPDIR"
    if version=$("$APPTAINER" version 2>/dev/null); then
        log "apptainer: $version installed"
    else
        step "apptainer: install from sid debs into $APPTAINER_PREFIX" "$SERVICES_DIR/apptainer-install.log"
        install_apptainer >>"$STEP_LOG" 2>&1
        version=$("$APPTAINER" version)
        step_done "$version"
        # sid keeps only its newest version; 1.4.5 is the one the recipe was tested with.
        if [ "$version" != 1.4.5 ]; then log "apptainer: note: sid now has $version (tested with 1.4.5)"; fi
    fi

    if [ -s "$SIF" ] && [ "$(cat "$SIF.stamp" 2>/dev/null)" = "$ROOTFS_STAMP" ]; then
        log "apptainer: $SIF up to date"
    else
        # lz4: the default gzip makes mksquashfs several times slower (40 s against 5 s for a Debian
        # rootfs on 2 cores).
        step "apptainer: build $SIF" "$SERVICES_DIR/apptainer-sif.log"
        rm -f "$SIF.new.sif"
        "$APPTAINER" build --mksquashfs-args "-comp lz4" "$SIF.new.sif" "$ROOTFS" >>"$STEP_LOG" 2>&1
        mv -f "$SIF.new.sif" "$SIF"
        echo "$ROOTFS_STAMP" >"$SIF.stamp"
        step_done
    fi

    STEP="apptainer: smoke test (apptainer exec $SIF)" STEP_LOG=$SERVICES_DIR/apptainer-sif.log
    out=$("$APPTAINER" exec --containall --no-home --cleanenv "$SIF" /bin/bash -c "$SMOKE" 2>>"$STEP_LOG") ||
        fail "apptainer exec $SIF failed"
    [ "$out" = "$SMOKE_EXPECTED" ] || fail "apptainer exec $SIF printed '$out'"
    log "apptainer: ok"
fi

# ---------------------------------------------------------------------------------------------
# 5. SSH: a private sshd on 127.0.0.1:$SSH_PORT, everything under $SSH_DIR, logging in as the
#    dedicated user paddock-ci. Not root: root's .bashrc here runs `pyenv init` (+0.5 s for
#    every ssh command, since bash sources .bashrc for commands run by sshd).
# ---------------------------------------------------------------------------------------------
ssh_check() {
    ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -i "$SSH_DIR/id_ed25519" \
        -o UserKnownHostsFile="$SSH_DIR/known_hosts" -o StrictHostKeyChecking=yes \
        -o ConnectTimeout=10 -p "$SSH_PORT" "$SSH_USER@127.0.0.1" "$SMOKE"
}

if want ssh; then
    STEP="ssh: user, keys and sshd_config" STEP_LOG=$SSH_DIR/sshd.log
    # sshd reads authorized_keys as the logging-in user: the directory must be searchable and
    # the file readable by paddock-ci (the private keys are 0600 anyway).
    mkdir -p "$SSH_DIR"
    chmod 755 "$SSH_DIR"

    if ! id -u "$SSH_USER" >/dev/null 2>&1; then
        log "ssh: creating user $SSH_USER"
        useradd -m -s /bin/bash -c "Paddock test services" "$SSH_USER"
    fi
    # useradd leaves the password locked ('!'), and with UsePAM no sshd refuses locked accounts
    # even for key logins; '*' means "no password" without the lock.
    if [[ $(getent shadow "$SSH_USER" | cut -d: -f2) == '!'* ]]; then usermod -p '*' "$SSH_USER"; fi
    if [ "$(getent passwd "$SSH_USER" | cut -d: -f7)" != /bin/bash ]; then usermod -s /bin/bash "$SSH_USER"; fi
    ssh_home=$(getent passwd "$SSH_USER" | cut -d: -f6)
    # Empty shell start-up files: every ssh command pays for whatever they run.
    for f in .bashrc .profile; do
        if [ ! -e "$ssh_home/$f" ] || [ -s "$ssh_home/$f" ]; then
            : >"$ssh_home/$f"
            chown "$SSH_USER:" "$ssh_home/$f"
        fi
    done

    for key in ssh_host_ed25519_key id_ed25519; do
        if [ ! -s "$SSH_DIR/$key" ]; then
            rm -f "$SSH_DIR/$key" "$SSH_DIR/$key.pub"
            ssh-keygen -q -t ed25519 -N '' -C "paddock-test-$key" -f "$SSH_DIR/$key"
        elif [ ! -s "$SSH_DIR/$key.pub" ]; then
            ssh-keygen -y -f "$SSH_DIR/$key" >"$SSH_DIR/$key.pub"
        fi
    done
    write_if_changed "$SSH_DIR/authorized_keys" "$(cat "$SSH_DIR/id_ed25519.pub")"
    chmod 644 "$SSH_DIR/authorized_keys"
    # The host key for exactly the address the policy names, so clients can check strictly.
    if [ "$SSH_PORT" = 22 ]; then kh_host=127.0.0.1; else kh_host="[127.0.0.1]:$SSH_PORT"; fi
    write_if_changed "$SSH_DIR/known_hosts" "$kh_host $(cut -d' ' -f1,2 "$SSH_DIR/ssh_host_ed25519_key.pub")"

    # StrictModes no: the files live under world-writable /tmp. No AcceptEnv line: the remote
    # environment is not influenced by the client's. The default sntrup761 key exchange costs
    # ~300 ms per connection on this CPU; without it clients settle on curve25519.
    write_if_changed "$SSH_DIR/sshd_config" "# Written by Paddock scripts/test-services.sh
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $SSH_DIR/ssh_host_ed25519_key
PidFile $SSHD_PIDFILE
AuthorizedKeysFile $SSH_DIR/authorized_keys
AllowUsers $SSH_USER
StrictModes no
UsePAM no
UseDNS no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
KexAlgorithms -sntrup761x25519-sha512@openssh.com
MaxSessions 100
MaxStartups 100:30:200
PrintMotd no
PrintLastLog no
X11Forwarding no
Subsystem sftp /usr/lib/openssh/sftp-server"
    config_changed=$CHANGED

    mkdir -p /run/sshd   # sshd's privilege-separation directory; the one path outside /tmp
    chmod 755 /run/sshd
    STEP="ssh: start sshd" STEP_LOG=$SSH_DIR/sshd.log
    /usr/sbin/sshd -t -f "$SSH_DIR/sshd_config" >>"$STEP_LOG" 2>&1 || fail "sshd -t: bad $SSH_DIR/sshd_config"
    if pid_alive "$SSHD_PIDFILE" sshd; then
        if [ "$config_changed" = 1 ]; then
            log "ssh: sshd_config changed, reloading sshd"
            kill -HUP "$(cat "$SSHD_PIDFILE")"
            sleep 0.5
        else
            log "ssh: sshd running (pid $(cat "$SSHD_PIDFILE"))"
        fi
    else
        step "ssh: start sshd on 127.0.0.1:$SSH_PORT" "$SSH_DIR/sshd.log"
        rm -f "$SSHD_PIDFILE"
        # Absolute path: sshd re-executes itself. It binds, daemonizes and writes its PidFile.
        /usr/sbin/sshd -f "$SSH_DIR/sshd_config" -E "$STEP_LOG" </dev/null >>"$STEP_LOG" 2>&1 3>&- 4>&- 9>&-
        for _ in $(seq 50); do
            pid_alive "$SSHD_PIDFILE" sshd && break
            sleep 0.1
        done
        pid_alive "$SSHD_PIDFILE" sshd || fail "sshd did not start"
        step_done
    fi

    STEP="ssh: smoke test (ssh $SSH_USER@127.0.0.1 -p $SSH_PORT)"
    out=
    for _ in 1 2 3 4 5; do
        if out=$(ssh_check 2>>"$STEP_LOG") && [ "$out" = "$SMOKE_EXPECTED" ]; then break; fi
        sleep 0.5
    done
    [ "$out" = "$SMOKE_EXPECTED" ] || fail "ssh $SSH_USER@127.0.0.1 -p $SSH_PORT printed '$out'"
    log "ssh: ok"
fi

# ---------------------------------------------------------------------------------------------
# 6. Slurm 22.05: plain daemons (no systemd here): munged (as the user munge), slurmctld (drops
#    to the user slurm) and slurmd. Cgroup v1 process tracking, so nothing a step starts
#    outlives it, and memory limits. Two partitions:
#    - debug (the default): the single node $(hostname -s), a slurmd in this machine's own
#      namespaces, as before;
#    - nodes: the "compute nodes" pdk-node1 and pdk-node2, each a slurmd in its own network,
#      mount, UTS and PID namespace (6a), with its own hostname, /tmp, Slurm spool and Paddock
#      state directory; the rest of the file system (and munged's socket) is shared, like a
#      cluster's shared file system. They reach the controller and each other only over a
#      private bridge (6a); this machine, the "login" side, reaches them at 10.77.0.1X.
#    Every node declares SLURM_CPUS CPUs whatever the machine has (config_overrides): Paddock's
#    tests hold dozens of one-CPU sessions at once, and a session mostly waits. So no CPU
#    pinning (task/affinity, ConstrainCores): cpusets of CPUs that do not exist would fail. The
#    configuration is machine-wide (clients and all slurmds read /etc/slurm/slurm.conf); only
#    the daemons' logs are in $SLURM_DIR.
# ---------------------------------------------------------------------------------------------
SLURM_DIR=$SERVICES_DIR/slurm
SLURM_RUN=/run/slurm        # the pid files: in a directory of the user slurm, so slurmctld (which
                            # runs as slurm) removes its own at exit instead of leaving a stale one
SLURM_CPUS=64
SLURM_NODE=$(hostname -s)   # slurmd finds its NodeName line by this name
SLURM_NODES=(pdk-node1 pdk-node2)   # the compute nodes; node i (from 0) has the address .(11+i)
SLURM_NET=pdk-net           # the network namespace holding the bridge
SLURM_NET_PREFIX=10.77.0    # a private /24 for the test cluster
SLURM_CTLD_ADDR=$SLURM_NET_PREFIX.1   # this machine's end (veth pdk-login): slurmctld and srun
SLURM_LOGIN_IF=pdk-login
PADDOCK_HOME_DEFAULT=/root/.local/state/paddock   # Paddock's default state directory (per node)

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
slurm_exe() { # daemon: the name of its binary (/usr/sbin/slurmctld is a symlink to slurmctld-wlm)
    local p
    p=$(readlink -f "/usr/sbin/$1")
    echo "${p##*/}"
}
slurm_pids() { # daemon: the PIDs of its live processes in this PID namespace, ours or not (the
    # compute nodes' slurmds, in PID namespaces of their own, do not count). Not zombies: init
    # here reaps orphans only every ~2 s. (pgrep -x per name: a pattern longer than 15
    # characters, the length of a process name, makes pgrep complain.)
    local pid state ns
    ns=$(readlink /proc/self/ns/pid)
    for pid in $(pgrep -x "$1" || true; pgrep -x "$(slurm_exe "$1")" || true); do
        [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" = "$ns" ] || continue
        state=$(awk '$1 == "State:" {print $2}' "/proc/$pid/status" 2>/dev/null || true)
        if [ -n "$state" ] && [ "$state" != Z ]; then echo "$pid"; fi
    done
}
slurm_node_state() { sinfo -h -n "${1:-$SLURM_NODE}" -o %T 2>/dev/null | head -n 1; }
slurm_fail() { # message: fail, showing the tails of our start log (the daemons' errors before
    # they open their logs, srun's messages) and of both daemons' logs (slurmd's by the EXIT trap)
    local f
    for f in "$SLURM_DIR/start.log" "$SLURM_DIR/slurmctld.log"; do
        log "read $f; its last lines:"
        tail -n 12 "$f" 2>/dev/null | sed 's/^/    /' >&4
    done
    STEP_LOG=${SLURM_FAIL_LOG:-$SLURM_DIR/slurmd.log}
    fail "$*"
}
slurm_stop() { # daemon: stop it by its pid file (SIGTERM, up to 10 s, then SIGKILL)
    local exe pid
    exe=$(slurm_exe "$1")
    pid_alive "$SLURM_RUN/$1.pid" "$exe" || return 0
    pid=$(cat "$SLURM_RUN/$1.pid")
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        pid_alive "$SLURM_RUN/$1.pid" "$exe" || break
        sleep 0.1
    done
    if pid_alive "$SLURM_RUN/$1.pid" "$exe"; then kill -KILL "$pid" 2>/dev/null || true; fi
    # slurmctld's helper process slurmscriptd ends with it, a moment later.
    for _ in $(seq 50); do
        [ -n "$(slurm_pids "$1")" ] || break
        sleep 0.1
    done
}
slurm_start() { # daemon: start it unless ours runs; a foreign one (other pid file) is an error
    local exe others
    exe=$(slurm_exe "$1")
    pid_alive "$SLURM_RUN/$1.pid" "$exe" && return 0
    others=$(slurm_pids "$1" | sort -un | paste -sd ' ')
    if [ -n "$others" ]; then
        fail "a $1 this script did not start runs (pid $others; $SLURM_RUN/$1.pid names no live $1): stop it first"
    fi
    rm -f "$SLURM_RUN/$1.pid"
    # It daemonizes; errors before it opens its log file (the configuration) go to STEP_LOG.
    "/usr/sbin/$1" </dev/null >>"$STEP_LOG" 2>&1 3>&- 4>&- 9>&- || slurm_fail "$1 did not start"
    SLURM_STARTED+=("$1")
}
slurm_wait_node() { # node: until it takes jobs (idle, or busy with other jobs: a re-run while
    # tests run). slurmd's first registration is sometimes retried after 1 s. A drained node (a
    # job whose processes could not be killed, say) is resumed once, and so is a node still down
    # 2 s after the start (a compute node that was powered off while slurmctld ran).
    local node=$1 waited_from=$SECONDS resumed=0
    while :; do
        state=$(slurm_node_state "$node")
        case $state in
        idle | mixed | allocated | completing | planned) break ;;
        drain* | down*)
            if [ "$resumed" = 0 ] && { [[ $state == drain* ]] || [ $((SECONDS - waited_from)) -ge 2 ]; }; then
                log "slurm: node $node is $state ($(sinfo -h -n "$node" -o %E)): resuming it"
                scontrol update NodeName="$node" State=RESUME >>"$STEP_LOG" 2>&1 || true
                resumed=1
            fi
            ;;
        esac
        # A daemon that died after daemonizing (its pid file may come a moment after the start).
        if [ $((SECONDS - waited_from)) -ge 3 ]; then
            pid_alive "$SLURM_RUN/slurmctld.pid" "$(slurm_exe slurmctld)" || slurm_fail "slurmctld exited"
            if [ "$node" = "$SLURM_NODE" ]; then
                pid_alive "$SLURM_RUN/slurmd.pid" "$(slurm_exe slurmd)" || slurm_fail "slurmd exited"
            else
                pid_alive "$SLURM_RUN/$node.pid" unshare ||
                    SLURM_FAIL_LOG=$SLURM_DIR/slurmd-$node.log slurm_fail "the slurmd of node $node exited"
            fi
        fi
        if [ $((SECONDS - waited_from)) -ge 30 ]; then
            if [ "$node" != "$SLURM_NODE" ]; then SLURM_FAIL_LOG=$SLURM_DIR/slurmd-$node.log; fi
            slurm_fail "node $node is '${state:-unreachable}' (sinfo -o %T) after 30 s, not idle"
        fi
        sleep 0.05
    done
}

# --- 6a. The compute nodes' network and namespaces ---------------------------------------------
# One network namespace $SLURM_NET holds a Linux bridge pdk-br (no address, it only switches);
# veth pairs plug into it: pdk-login (this machine's end, $SLURM_CTLD_ADDR/24; in $SLURM_NET:
# login) and, per node, eth0 in the node's network namespace (its address; in $SLURM_NET: the
# node's name). No default route anywhere, IPv6 off, and this machine does not forward what
# arrives on pdk-login (per-interface forwarding=0, whatever ip_forward Docker set): a node
# reaches the test hosts on the bridge and its own loopback, nothing else.
slurm_node_addr() { # node: its address (pdk-node1 -> .11)
    local i
    for i in "${!SLURM_NODES[@]}"; do
        if [ "${SLURM_NODES[i]}" = "$1" ]; then echo "$SLURM_NET_PREFIX.$((11 + i))"; fi
    done
}
slurm_net_ok() { # is all of it there, up and wired as slurm_net_up makes it?
    local node
    [ -e "/run/netns/$SLURM_NET" ] || return 1
    ip -n "$SLURM_NET" -o link show pdk-br 2>/dev/null | grep -q 'state UP' || return 1
    ip -o addr show dev "$SLURM_LOGIN_IF" 2>/dev/null | grep -qF " $SLURM_CTLD_ADDR/24 " || return 1
    ip -o link show dev "$SLURM_LOGIN_IF" 2>/dev/null | grep -q 'state UP' || return 1
    ip -n "$SLURM_NET" -o link show login 2>/dev/null | grep -q 'master pdk-br state UP' || return 1
    for node in "${SLURM_NODES[@]}"; do
        [ -e "/run/netns/$node" ] || return 1
        ip -n "$SLURM_NET" -o link show "$node" 2>/dev/null | grep -q 'master pdk-br state UP' || return 1
        ip -n "$node" -o addr show dev eth0 2>/dev/null | grep -qF " $(slurm_node_addr "$node")/24 " || return 1
        ip -n "$node" -o link show dev eth0 2>/dev/null | grep -q 'state UP' || return 1
    done
}
slurm_net_down() { # remove the namespaces (and with them every veth, the root side's too)
    local ns
    for ns in "${SLURM_NODES[@]}" "$SLURM_NET"; do
        if [ -e "/run/netns/$ns" ]; then ip netns delete "$ns"; fi
    done
    if ip link show dev "$SLURM_LOGIN_IF" >/dev/null 2>&1; then ip link delete "$SLURM_LOGIN_IF"; fi
}
ns_sysctl() { # netns key=value...: sysctl inside a network namespace (not `ip netns exec`, which
    # remounts /sys; nsenter only switches the network namespace, and /proc/sys/net follows it)
    local ns=$1
    shift
    nsenter --net="/run/netns/$ns" sysctl -qw "$@"
}
slurm_net_up() { # (re)build it from nothing; the nodes must not be running
    local node
    slurm_net_down
    ip netns add "$SLURM_NET"
    ns_sysctl "$SLURM_NET" net.ipv4.ip_forward=0 net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$SLURM_NET" link set lo up
    ip -n "$SLURM_NET" link add pdk-br type bridge
    ip -n "$SLURM_NET" link set pdk-br up
    # This machine's end: created here with its peer directly in $SLURM_NET.
    ip link add "$SLURM_LOGIN_IF" type veth peer name login netns "$SLURM_NET"
    sysctl -qw "net.ipv6.conf.$SLURM_LOGIN_IF.disable_ipv6=1" "net.ipv4.conf.$SLURM_LOGIN_IF.forwarding=0"
    ip addr add "$SLURM_CTLD_ADDR/24" dev "$SLURM_LOGIN_IF"
    ip link set "$SLURM_LOGIN_IF" up
    ip -n "$SLURM_NET" link set login master pdk-br up
    for node in "${SLURM_NODES[@]}"; do
        ip netns add "$node"
        ns_sysctl "$node" net.ipv4.ip_forward=0 net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
        # Made in $SLURM_NET, the peer moved straight into the node: nothing passes through here.
        ip -n "$SLURM_NET" link add "$node" type veth peer name eth0 netns "$node"
        ip -n "$SLURM_NET" link set "$node" master pdk-br up
        ip -n "$node" link set lo up
        ip -n "$node" addr add "$(slurm_node_addr "$node")/24" dev eth0
        ip -n "$node" link set eth0 up
    done
}

# The init (PID 1) of a node's PID namespace, already in the node's network namespace and in a
# new mount, UTS and IPC namespace (unshare's propagation private: nothing mounted here leaks
# out). Private tmpfs mounts: /tmp and /dev/shm; Paddock's state directory; Slurm's spool
# (slurmstepd's sockets) and /run/slurm (slurmd's pid file: slurmd signals the PID it finds
# there at start, and the shared one names this machine's slurmd). The test services'
# directory, if under /tmp, is bound back in (logs, the SIF), from a descriptor opened before
# /tmp was covered (--no-canonicalize: else mount resolves /proc/self/fd/5 to its path name,
# which by then names the new, empty directory). slurmd runs in the foreground, its log by -L
# (the configured SlurmdLogFile is this machine's slurmd's); when it exits, so does this init,
# and the kernel kills what is left in the namespace (the jobs' steps): a powered-off node.
# Bash as PID 1 reaps the orphans (slurmstepd double-forks) in its SIGCHLD handling. Written to
# $SLURM_DIR/node-init.sh (readable in ps; a change restarts the nodes).
# shellcheck disable=SC2016 # expanded by the node's bash
SLURM_NODE_INIT='#!/bin/bash
# Written by scripts/test-services.sh: PID 1 of a Slurm compute node. Arguments: node name,
# the test services directory, the Slurm log directory, the Paddock state directory.
set -euo pipefail
node=$1 services=$2 slurm_dir=$3 paddock_home=$4
hostname "$node"
exec 5<"$services"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
case $services in
/tmp/*) mkdir -p "$services"; mount --no-canonicalize --bind /proc/self/fd/5 "$services" ;;
esac
exec 5<&-
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o mode=0700 tmpfs "$paddock_home"
mount -t tmpfs -o mode=0755 tmpfs /var/lib/slurm/slurmd
mount -t tmpfs -o mode=0755 tmpfs /run/slurm
# A daemon starts in /, as a node boots: slurmstepd returns to slurmd'"'"'s directory by its path
# after forking each task, and the directory this script was started from may be under the
# /tmp just covered ("Unable to return to working directory" in every command'"'"'s output).
cd /
/usr/sbin/slurmd -D -N "$node" -L "$slurm_dir/slurmd-$node.log" </dev/null >/dev/null 2>&1 &
pid=$!
trap "kill -TERM $pid 2>/dev/null || true" TERM INT
echo "$(date -u +%FT%TZ) node $node: slurmd started"
rc=0
while kill -0 "$pid" 2>/dev/null; do wait "$pid" && rc=0 || rc=$?; done
echo "$(date -u +%FT%TZ) node $node: slurmd exited ($rc)"'

slurm_node_start() { # node: start its namespaces and slurmd unless they run
    local node=$1
    pid_alive "$SLURM_RUN/$node.pid" unshare && return 0
    rm -f "$SLURM_RUN/$node.pid"
    [ -e "$SLURM_DIR/slurmd-$node.log" ] || install -o slurm -g slurm -m 0644 /dev/null "$SLURM_DIR/slurmd-$node.log"
    # nsenter joins the node's network namespace and execs unshare, which makes the others and
    # forks the init. Its PID (unshare's) goes to the pid file; --kill-child: should unshare be
    # killed, the init gets SIGTERM and the node goes down. setsid: outlives our process group.
    setsid nsenter --net="/run/netns/$node" \
        unshare --mount --uts --ipc --pid --fork --mount-proc --propagation private --kill-child=SIGTERM \
        /bin/bash "$SLURM_DIR/node-init.sh" "$node" "$SERVICES_DIR" "$SLURM_DIR" "$PADDOCK_HOME_DEFAULT" \
        </dev/null >>"$SLURM_DIR/$node.log" 2>&1 3>&- 4>&- 9>&- &
    echo $! >"$SLURM_RUN/$node.pid"
    SLURM_STARTED+=("$node")
}
slurm_node_stop() { # node: SIGTERM its init (slurmd ends, then the namespace), up to 15 s, then SIGKILL
    local node=$1 pid init
    pid_alive "$SLURM_RUN/$node.pid" unshare || { rm -f "$SLURM_RUN/$node.pid"; return 0; }
    pid=$(cat "$SLURM_RUN/$node.pid")
    init=$(pgrep -P "$pid" | head -n 1 || true)
    kill -TERM "${init:-$pid}" 2>/dev/null || true
    for _ in $(seq 150); do
        pid_alive "$SLURM_RUN/$node.pid" unshare || break
        sleep 0.1
    done
    if pid_alive "$SLURM_RUN/$node.pid" unshare; then
        if [ -n "$init" ]; then kill -KILL "$init" 2>/dev/null || true; fi
        for _ in $(seq 50); do
            pid_alive "$SLURM_RUN/$node.pid" unshare || break
            sleep 0.1
        done
    fi
    rm -f "$SLURM_RUN/$node.pid"
}

if want slurm; then
    STEP="slurm: munge" STEP_LOG=
    if ! [ -d /sys/fs/cgroup/freezer ] || ! [ -d /sys/fs/cgroup/memory ]; then
        fail "Slurm is set up with cgroup v1 (proctrack/cgroup), and /sys/fs/cgroup has no freezer and memory" \
            "controllers; set PADDOCK_SKIP_BACKENDS=slurm"
    fi
    mkdir -p "$SLURM_DIR"
    # The package's postinst makes a key; mungekey as root writes it as root.
    if [ ! -s /etc/munge/munge.key ]; then
        log "slurm: creating the munge key /etc/munge/munge.key"
        mungekey --create
    fi
    if [ "$(stat -c %U:%a /etc/munge/munge.key)" != munge:400 ]; then
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    if munge_ok; then
        log "slurm: munged answers"
    else
        step "slurm: start munged" "$SLURM_DIR/munged-start.log"
        # systemd's RuntimeDirectory= would make its socket directory. munged refuses to run as
        # root ("PRNG seed dir is insecure"): as the user munge. Its own log: /var/log/munge.
        install -d -o munge -g munge -m 0755 /run/munge
        if ! pid_alive /run/munge/munged.pid munged; then
            runuser -u munge -- /usr/sbin/munged </dev/null >>"$STEP_LOG" 2>&1 3>&- 4>&- 9>&- ||
                fail "munged did not start (read also /var/log/munge/munged.log)"
        fi
        for _ in $(seq 50); do
            munge_ok && break
            sleep 0.1
        done
        munge_ok || fail "munged does not answer 'munge -n | unmunge' (read also /var/log/munge/munged.log)"
        step_done
    fi

    STEP="slurm: slurm.conf and cgroup.conf" STEP_LOG=
    # The hardware as slurmd sees it (works without a configuration). RealMemory must stay below
    # it, or the node is drained "Low RealMemory".
    mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9][0-9]*\).*/\1/p' | head -n 1)
    if ! [[ $mem =~ ^[0-9]+$ ]] || [ "$mem" -le 1024 ]; then fail "slurmd -C reports no usable RealMemory: '$mem'"; fi
    # The slurm user writes slurmctld's log and state; slurmd runs as root.
    install -d -o slurm -g slurm -m 0755 "$SLURM_DIR" "$SLURM_RUN" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
    for f in slurmctld.log slurmd.log; do
        [ -e "$SLURM_DIR/$f" ] || install -o slurm -g slurm -m 0644 /dev/null "$SLURM_DIR/$f"
    done
    # The nodes mount their private state directory over it: it must exist.
    mkdir -p "$PADDOCK_HOME_DEFAULT"
    node_lines=
    for node in "${SLURM_NODES[@]}"; do
        node_lines+="
NodeName=$node NodeAddr=$(slurm_node_addr "$node") CPUs=$SLURM_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$SLURM_CPUS ThreadsPerCore=1 RealMemory=$((mem - 512)) State=UNKNOWN"
    done
    mkdir -p /etc/slurm
    write_if_changed /etc/slurm/slurm.conf "# Written by Paddock's scripts/test-services.sh: a test cluster of one node on this machine
# (partition debug) and two compute nodes in namespaces of their own (partition nodes, which
# places a job on the least-loaded node, LLN=YES, as production sites do: sessions spread).
ClusterName=paddock
# The address the compute nodes reach this machine at (6a); slurmctld listens on all addresses.
SlurmctldHost=$SLURM_NODE($SLURM_CTLD_ADDR)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=$SLURM_RUN/slurmctld.pid
SlurmdPidFile=$SLURM_RUN/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# cgroup v1: nothing a step starts survives it, memory limits hold. No task/affinity and no
# ConstrainCores (cgroup.conf): the nodes below have more CPUs than the machine.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# Batch jobs start within a second instead of after 3 s.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
ReturnToService=2
# A job whose processes ignore SIGTERM blocks the single node for KillWait seconds.
KillWait=5
# Finished jobs stay visible (scontrol show job) for 5 minutes: the backend reads their end state.
MinJobAge=300
MailProg=/bin/true
# Take the nodes as declared here, not as detected: $SLURM_CPUS CPUs for many concurrent sessions.
SlurmdParameters=config_overrides
NodeName=$SLURM_NODE NodeAddr=127.0.0.1 CPUs=$SLURM_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$SLURM_CPUS ThreadsPerCore=1 RealMemory=$((mem - 512)) State=UNKNOWN$node_lines
PartitionName=debug Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=nodes Nodes=$(IFS=,; echo "${SLURM_NODES[*]}") MaxTime=INFINITE State=UP LLN=YES"
    slurm_changed=$CHANGED
    write_if_changed /etc/slurm/cgroup.conf "# Written by Paddock's scripts/test-services.sh
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainDevices=no"
    if [ "$CHANGED" = 1 ]; then slurm_changed=1; fi
    write_if_changed "$SLURM_DIR/node-init.sh" "$SLURM_NODE_INIT"
    if [ "$CHANGED" = 1 ]; then slurm_changed=1; fi
    # slurmctld reads them as the user slurm, whatever umask wrote them.
    chmod 0644 /etc/slurm/slurm.conf /etc/slurm/cgroup.conf

    SLURM_STARTED=()
    STEP="slurm: slurmctld and slurmd" STEP_LOG=$SLURM_DIR/start.log
    ctld_up=0 slurmd_up=0 nodes_up=1 some_node_up=0 net_up=0
    if pid_alive "$SLURM_RUN/slurmctld.pid" "$(slurm_exe slurmctld)"; then ctld_up=1; fi
    if pid_alive "$SLURM_RUN/slurmd.pid" "$(slurm_exe slurmd)"; then slurmd_up=1; fi
    for node in "${SLURM_NODES[@]}"; do
        if pid_alive "$SLURM_RUN/$node.pid" unshare; then some_node_up=1; else nodes_up=0; fi
    done
    if slurm_net_ok; then net_up=1; fi
    if [ "$slurm_changed" = 1 ] && [ "$ctld_up$slurmd_up$some_node_up" != 000 ]; then
        # Plugins and the node's topology need a restart, not `scontrol reconfigure`. Running
        # jobs survive it (their slurmstepd keeps running), except on the compute nodes, whose
        # slurmd ends with the node's namespaces.
        step "slurm: configuration changed: restart slurmctld and the slurmds" "$STEP_LOG"
        for node in "${SLURM_NODES[@]}"; do slurm_node_stop "$node"; done
        slurm_stop slurmd
        slurm_stop slurmctld
    elif [ "$ctld_up$slurmd_up$nodes_up$net_up" != 1111 ]; then
        step "slurm: start slurmctld and the slurmds" "$STEP_LOG"
    fi
    if [ "$net_up" = 0 ]; then
        # A node's slurmd in a namespace that is gone or broken cannot be repaired: restart it.
        for node in "${SLURM_NODES[@]}"; do slurm_node_stop "$node"; done
        slurm_net_up >>"$STEP_LOG" 2>&1 || slurm_fail "could not make the network namespaces and veths"
        slurm_net_ok || slurm_fail "the network namespaces are not as slurm_net_up made them"
        SLURM_STARTED+=(network)
    fi
    slurm_start slurmctld
    slurm_start slurmd
    for node in "${SLURM_NODES[@]}"; do slurm_node_start "$node"; done
    for node in "$SLURM_NODE" "${SLURM_NODES[@]}"; do slurm_wait_node "$node"; done
    if [ ${#SLURM_STARTED[@]} -gt 0 ]; then
        step_done "${SLURM_STARTED[*]} started, nodes $(sinfo -h -N -o '%N=%T' | sort -u | paste -sd ' ')"
    else
        log "slurm: slurmctld, slurmd and nodes ${SLURM_NODES[*]} running (pids $(cat "$SLURM_RUN/slurmctld.pid")," \
            "$(cat "$SLURM_RUN/slurmd.pid") and $(cd "$SLURM_RUN" && cat "${SLURM_NODES[@]/%/.pid}" | paste -sd ' ')):" \
            "$(sinfo -h -N -o '%N=%T' | sort -u | paste -sd ' ')"
    fi

    # A job name with paddock-, so stop-test-services.sh cancels it should this hang.
    STEP="slurm: smoke test (srun -N1 -n1)"
    # stdin /dev/null: timeout runs srun in a background process group, where reading a terminal stops it.
    srun_smoke=(timeout 60 srun -J paddock-smoke -N1 -n1 -t 1 --immediate=30)
    out=$("${srun_smoke[@]}" bash -c "$SMOKE" </dev/null 2>>"$STEP_LOG") || slurm_fail "srun -N1 -n1 failed"
    [ "$out" = "$SMOKE_EXPECTED" ] || slurm_fail "srun -N1 -n1 printed '$out'"
    if want apptainer; then
        # What the policy's slurm_apptainer backend does: the test SIF on the allocated node.
        STEP="slurm: smoke test (srun apptainer exec $SIF)"
        out=$("${srun_smoke[@]}" "$APPTAINER" exec --containall --no-home --cleanenv "$SIF" /bin/bash -c "$SMOKE" \
            </dev/null 2>>"$STEP_LOG") || slurm_fail "srun apptainer exec $SIF failed"
        [ "$out" = "$SMOKE_EXPECTED" ] || slurm_fail "srun apptainer exec $SIF printed '$out'"
    fi
    # The compute nodes: each answers with its own hostname, does not see a file this machine
    # wrote into /tmp, and has a tmpfs of its own as Paddock's state directory.
    probe=$(mktemp /tmp/paddock-node-probe.XXXXXX)
    node_check="echo \$(hostname) \$([ -e $probe ] && echo tmp-shared || echo tmp-private)"
    node_check+=" $PADDOCK_HOME_DEFAULT=\$(stat -f -c %T $PADDOCK_HOME_DEFAULT)"
    for node in "${SLURM_NODES[@]}"; do
        STEP="slurm: smoke test (srun -p nodes -w $node)"
        expected="$node tmp-private $PADDOCK_HOME_DEFAULT=tmpfs"
        out=$("${srun_smoke[@]}" -p nodes -w "$node" bash -c "$node_check" </dev/null 2>>"$STEP_LOG") ||
            out="$out (srun failed)"
        if [ "$out" != "$expected" ]; then
            rm -f "$probe"
            SLURM_FAIL_LOG=$SLURM_DIR/slurmd-$node.log slurm_fail "srun -p nodes -w $node printed '$out', not '$expected'"
        fi
    done
    rm -f "$probe"
    if want apptainer; then
        node=${SLURM_NODES[-1]}
        STEP="slurm: smoke test (srun -p nodes -w $node apptainer exec $SIF)"
        out=$("${srun_smoke[@]}" -p nodes -w "$node" "$APPTAINER" exec --containall --no-home --cleanenv "$SIF" \
            /bin/bash -c "$SMOKE" </dev/null 2>>"$STEP_LOG") ||
            SLURM_FAIL_LOG=$SLURM_DIR/slurmd-$node.log slurm_fail "srun -p nodes -w $node apptainer exec $SIF failed"
        [ "$out" = "$SMOKE_EXPECTED" ] ||
            SLURM_FAIL_LOG=$SLURM_DIR/slurmd-$node.log slurm_fail "srun -p nodes -w $node apptainer exec $SIF printed '$out'"
    fi
    log "slurm: ok"
fi

# ---------------------------------------------------------------------------------------------
# 6b. A file system with reflink (XFS on a loop device): a sandboxed session's snapshot copies
#     its workspace by reflink there, which this machine's ext4 cannot. 1 GB sparse, ~0.2 s.
# ---------------------------------------------------------------------------------------------
REFLINK_DIR=$SERVICES_DIR/reflink
if ! mountpoint -q "$REFLINK_DIR"; then
    step "reflink: loop-mounted XFS on $REFLINK_DIR" "$SERVICES_DIR/reflink.log"
    mkdir -p "$REFLINK_DIR"
    if [ ! -s "$SERVICES_DIR/reflink.img" ]; then
        truncate -s 1G "$SERVICES_DIR/reflink.img"
        mkfs.xfs -q -m reflink=1 "$SERVICES_DIR/reflink.img" >>"$STEP_LOG" 2>&1 ||
            fail "$STEP: mkfs.xfs failed (see $STEP_LOG)"
    fi
    mount -o loop "$SERVICES_DIR/reflink.img" "$REFLINK_DIR" >>"$STEP_LOG" 2>&1 ||
        fail "$STEP: mount -o loop failed (no loop devices here?) (see $STEP_LOG)"
    step_done
fi
chmod 1777 "$REFLINK_DIR"
log "reflink: ok"

# ---------------------------------------------------------------------------------------------
# 7. The policy (one backend per service that is up) and services.env.
# ---------------------------------------------------------------------------------------------
STEP="write policy" STEP_LOG=
sections=()
up=()
if want docker; then
    up+=(docker)
    sections+=("[backends.docker]
kind = \"docker\"
image = \"$IMAGE\"
network = \"none\"
memory_mb = 512
cpus = 1.0
pids_limit = 256")
    if want docker_runsc; then
        up+=(docker_runsc)
        # The same container under gVisor (step 3b).
        sections+=("[backends.docker_runsc]
kind = \"docker\"
image = \"$IMAGE\"
runtime = \"runsc\"
network = \"none\"
memory_mb = 512
cpus = 1.0
pids_limit = 256")
    fi
fi
if want ssh; then
    up+=(ssh)
    sections+=("[backends.ssh]
kind = \"ssh\"
host = \"127.0.0.1\"
port = $SSH_PORT
user = \"$SSH_USER\"
identity_file = \"$SSH_DIR/id_ed25519\"
known_hosts_file = \"$SSH_DIR/known_hosts\"")
fi
if want apptainer; then
    up+=(apptainer)
    sections+=("[backends.apptainer]
kind = \"apptainer\"
image = \"$SIF\"
binary = \"$APPTAINER\"")
fi
# The policy sections of one way to reach the cluster: NAME on PARTITION, RELAY_LINE (empty, or
# a newline and a relay setting); with apptainer also NAME_apptainer, each command run in the
# test SIF by apptainer on the allocated node.
slurm_sections() {
    local name=$1 partition=$2 relay_line=$3 common
    common="kind = \"slurm\"
partition = \"$partition\"$relay_line
cpus = 1
memory_mb = 512
queue_timeout_seconds = 120"
    sections+=("[backends.$name]
$common")
    if want apptainer; then
        sections+=("[backends.${name}_apptainer]
$common
image = \"$SIF\"
binary = \"$APPTAINER\"")
    fi
}
if want slurm; then
    up+=(slurm)
    slurm_sections slurm debug ""
    # The compute nodes (partition nodes, 6a), reached from this machine by srun as the relay.
    slurm_sections slurm_nodes nodes $'\nrelay = "tcp"'
fi
policy="# Written by scripts/test-services.sh: one backend per started test service."
for i in "${!sections[@]}"; do
    if [ "$i" -eq 0 ]; then policy+=$'\n'; else policy+=$'\n\n'; fi
    policy+=${sections[i]}
done
write_if_changed "$SERVICES_DIR/policy.toml" "$policy"
services_env="PADDOCK_TEST_POLICY=$SERVICES_DIR/policy.toml
PADDOCK_TEST_BACKENDS=$(IFS=,; echo "${up[*]}")
PADDOCK_TEST_REFLINK_DIR=$REFLINK_DIR"
if want slurm; then
    # The compute nodes' names (partition nodes), for tests that pick a node.
    services_env+=$'\n'"PADDOCK_TEST_SLURM_NODES=$(IFS=,; echo "${SLURM_NODES[*]}")"
fi
write_if_changed "$SERVICES_DIR/services.env" "$services_env"

log "up: ${up[*]:-nothing}; total $(elapsed "$T_START") s"
echo "$SERVICES_DIR/policy.toml" >&3
