"""Soak: one `paddock serve --http` under mixed load from concurrent clients keeps its memory,
file descriptors, threads and processes flat, and leaves nothing behind when it stops.

Duration: PADDOCK_SOAK_SECONDS (default 90; the long form is 1800, see README.md here),
clients: PADDOCK_SOAK_CLIENTS (default 4). The environment tools run on the local backend in
its built-in sandbox (`sandbox = "workspace-write"`, the newcomer's default);
PADDOCK_SOAK_BACKENDS=local,docker soaks docker as well (one test each; docker's
containers, counted by their `paddock.home` label, are checked like processes).

How it measures, once a second, from /proc:
  * the server: RSS, open file descriptors, threads;
  * its process tree: every descendant of the server by parent pid, plus every process whose
    command line names this server's PADDOCK_HOME (detached agents, supervisors, the sandbox
    wrappers) and their descendants: the zygote and its script children, agents, supervisors,
    bridged MCP servers, commands;
  * the zygote's RSS and descriptors, the whole tree's summed RSS (for the eye, not checked).

Phases: warm-up (one round of every kind of call from every client, both protocol eras: pools,
the zygote's idle children, the shared session's agent and lazily started bridged servers are
legitimate growth), quiet until the numbers stop moving -> baseline; the soak; then the
numbers must come back within the tolerances below. Then the server gets SIGTERM: only the
shared `default` session (the engine's own, which 2026-07-28 clients use; left to the idle
timeout by design) may outlive it; once an operator's `paddock sessions close default` ran,
nothing may remain: no process the tree ever had, no session state, no mount, no cgroup, no
container.

Every call's answer is checked too (a soak whose calls all fail measures nothing), and so is
the evidence of kills: a cancelled or killed command's process is gone from the host.

Run with `-rP` (or `-s`) to see the series of a passing run; a failing run prints it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import anyio
import mcp_types as types
import pytest
from conftest import Paddock

pytestmark = pytest.mark.anyio

SOAK_SECONDS = float(os.environ.get("PADDOCK_SOAK_SECONDS", "90"))
CLIENTS = int(os.environ.get("PADDOCK_SOAK_CLIENTS", "4"))
# Where terminal, process and python_execute run: "local" (its built-in sandbox), "docker"
# (the test services' container backend, from PADDOCK_TEST_POLICY), or both: "local,docker".
BACKENDS = [b.strip() for b in os.environ.get("PADDOCK_SOAK_BACKENDS", "local").split(",") if b.strip()]
CODEMODE_TIMEOUT_S = 5  # the timeout scripts hit it; every other script ends well within it
SAMPLE_EVERY_S = 1.0

# Tolerances, end (settled) against baseline (settled after warm-up):
# - RSS: allocators keep freed memory in their arenas and rmcp/hyper keep buffers per
#   connection; a leak of ~1 KiB per call exceeds this over the long form's ~16,000 calls,
#   the allocator's noise does not (measured: +1.0 MiB after the short form's ~800 calls,
#   +1.4 MiB after 5,500 calls in 10 minutes, flattening).
RSS_TOLERANCE_KIB = 16 * 1024
RSS_TOLERANCE_FRACTION = 0.15
# - descriptors: one idle script child in transit between the zygote and the pool holds one
#   socketpair end in the server.
FD_TOLERANCE = 2
# - threads: none; tokio's blocking threads end after 10 s idle, which the quiet wait covers.
THREAD_TOLERANCE = 0
# - processes: one idle script child may be between its fork and its report.
PROCESS_TOLERANCE = 1
QUIET_MAX_S = 45  # the longest wait for the numbers to settle (blocking threads: 10 s idle)
QUIET_STABLE_SAMPLES = 4

DENIED = "tool_approval:denied"
TIMEOUT = "codemode:timeout"


# --- /proc ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # clock ticks since boot: (pid, start) names one process, even after pid reuse
    state: str
    cmd: str


def scan_processes() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(entry)] = Proc(int(entry), int(fields[1]), int(fields[19]), fields[0], cmd.strip())
    return procs


def server_tree(server_pid: int, home: str, procs: dict[int, Proc]) -> set[int]:
    """The server and its descendants, plus what names its PADDOCK_HOME (and their descendants):
    detached agents and supervisors outlive their parent by design."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    roots = [server_pid] if server_pid in procs else []
    roots += [p.pid for p in procs.values() if home in p.cmd]
    seen: set[int] = set()
    todo = roots
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, ()))
    return {pid for pid in seen if procs[pid].state != "Z"}


def kind_of(p: Proc, server_pid: int, zygotes: set[int]) -> str:
    if p.pid == server_pid:
        return "server"
    if p.pid in zygotes:
        return "zygote"
    if p.ppid in zygotes:
        return "script-child"
    argv = p.cmd.split()
    program = Path(argv[0]).name if argv else ""
    if program == "paddock-agent":
        return "agent"
    if program == "paddock-sandbox-exec":
        return "sandbox-exec"
    if program == "paddock" and "__supervise" in argv[1:2]:
        return "supervisor"
    if any(a.endswith("_server.py") for a in argv[1:2]):
        return "bridged-server"
    return program or "?"


def mounts_under(*dirs: str) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if any(f" {d}/" in line or f" {d} " in line for d in dirs)]


def containers_of(home: str) -> list[str]:
    """Docker containers (running or not) made for sessions of this state directory (their
    `paddock.home` label: the first 8 bytes of the SHA-256 of its path, in hex)."""
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=paddock.home={digest}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, f"docker ps failed: {out.stderr}"
    return out.stdout.split()


def status_field(pid: int, name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def fd_kinds(pid: int) -> Counter[str]:
    """What the descriptors are: socket, pipe, anon_inode:[eventfd], or the file's directory."""
    kinds: Counter[str] = Counter()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("socket:", "pipe:")):
            kinds[target.split(":")[0]] += 1
        elif target.startswith("anon_inode:"):
            kinds[target] += 1
        else:
            kinds[str(Path(target).parent)] += 1
    return kinds


def cgroups_of(pid: int) -> set[tuple[str, str]]:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return set()
    out = set()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        out.add((controllers, path))
    return out


def cgroup_dir(controllers: str, path: str) -> Path | None:
    base = Path("/sys/fs/cgroup")
    for root in ([base / "unified", base] if controllers == "" else [base / c for c in controllers.split(",")]):
        if root.is_dir():
            return root / path.lstrip("/")
    return None


@dataclass
class Sample:
    t: float
    phase: str
    calls: int
    rss_kib: int | None
    fds: int | None
    threads: int | None
    procs: int
    kinds: Counter[str]
    tree_rss_kib: int
    zygote_rss_kib: int | None
    zygote_fds: int | None
    containers: int | None = None  # docker: the containers labelled with this PADDOCK_HOME
    mounts: int = 0  # mounts under PADDOCK_HOME (sessions' /tmp), as this process sees them
    members: tuple[str, ...] = ()  # "kind: command line" of every process of the tree

    def row(self) -> str:
        kinds = " ".join(f"{k}={v}" for k, v in sorted(self.kinds.items()) if k != "server")
        mib = lambda kib: "-" if kib is None else f"{kib / 1024:.1f}"  # noqa: E731
        return (
            f"{self.t:7.1f} {self.phase:<9} {self.calls:6d} {mib(self.rss_kib):>8} {self.fds or 0:5d} "
            f"{self.threads or 0:4d} {self.procs:5d} {mib(self.tree_rss_kib):>9} {mib(self.zygote_rss_kib):>7} "
            f"{self.zygote_fds or 0:4d} {self.mounts:4d}  {kinds}"
            + ("" if self.containers is None else f" containers={self.containers}")
        )


HEADER = "      t phase      calls  rss MiB   fds thr  procs tree MiB zyg MiB zfds mnts  processes by kind"


class Monitor:
    """Samples the server and its tree every second on a thread of its own."""

    def __init__(self, server_pid: int, home: Path, docker: bool = False) -> None:
        self.server_pid = server_pid
        self.home = str(home)
        self.docker = docker
        self.phase = "start"
        self.calls = 0
        self.samples: list[Sample] = []
        self.seen: dict[tuple[int, int], Proc] = {}  # every process of the tree, ever
        self.cgroups: set[tuple[str, str]] = set()
        self.own_cgroups = cgroups_of(server_pid)
        self.session_ids: set[str] = set()  # the per-client sessions (`mcp-...`) seen
        self.started = time.monotonic()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as e:  # noqa: BLE001 - reported by the waits, not lost with the thread
                self.error = e
                return
            self._stop.wait(SAMPLE_EVERY_S)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"sampling stopped: {self.error!r}") from self.error

    def sample(self) -> Sample:
        procs = scan_processes()
        tree = server_tree(self.server_pid, self.home, procs)
        zygotes = {
            pid for pid in tree if procs[pid].ppid == self.server_pid and "sandbox-zygote" in procs[pid].cmd
        }
        kind = {pid: kind_of(procs[pid], self.server_pid, zygotes) for pid in tree}
        kinds = Counter(kind.values())
        tree_rss = sum(status_field(pid, "VmRSS") or 0 for pid in tree)
        zygote = next(iter(zygotes), None)
        s = Sample(
            t=time.monotonic() - self.started,
            phase=self.phase,
            calls=self.calls,
            rss_kib=status_field(self.server_pid, "VmRSS"),
            fds=fd_count(self.server_pid),
            threads=status_field(self.server_pid, "Threads"),
            procs=len(tree),
            kinds=kinds,
            tree_rss_kib=tree_rss,
            zygote_rss_kib=status_field(zygote, "VmRSS") if zygote else None,
            zygote_fds=fd_count(zygote) if zygote else None,
            containers=len(containers_of(self.home)) if self.docker else None,
            mounts=len(mounts_under(self.home)),
            members=tuple(sorted(f"{kind[pid]}: {procs[pid].cmd[:110]}" for pid in tree)),
        )
        records = Path(self.home) / "session-records"
        ids = {r.stem for r in records.glob("mcp-*.json")} if records.is_dir() else set()
        with self._lock:
            self.session_ids |= ids
            for pid in tree:
                p = procs[pid]
                self.seen[(p.pid, p.start)] = p
                # The root and the server's own groups are not the server's to remove.
                self.cgroups |= {g for g in cgroups_of(pid) - self.own_cgroups if g[1] != "/"}
            self.samples.append(s)
        return s

    def series(self, max_rows: int = 150) -> str:
        with self._lock:
            rows = list(self.samples)
        step = max(1, len(rows) // max_rows)
        picked = rows[::step]
        if rows and picked[-1] is not rows[-1]:
            picked.append(rows[-1])
        return "\n".join([HEADER, *(r.row() for r in picked)])

    def back_to(self, base: Sample, phase: str) -> Sample:
        """Waits until a few samples in a row are within the tolerances of `base` (or
        QUIET_MAX_S), and returns the last sample."""
        return self._settle(phase, lambda recent: all(s.phase == phase and not beyond(base, s) for s in recent))

    def quiet(self, phase: str) -> Sample:
        """Waits until server fds, threads and the tree's process count hold still for a few
        samples (or QUIET_MAX_S), and returns the last sample."""

        def still(recent: list[Sample]) -> bool:
            keys = {(s.fds, s.threads, s.procs, s.containers, tuple(sorted(s.kinds.items()))) for s in recent}
            return len(keys) == 1 and recent[0].phase == phase

        return self._settle(phase, still)

    def _settle(self, phase: str, settled: Callable[[list[Sample]], bool]) -> Sample:
        """Samples under `phase` until the last QUIET_STABLE_SAMPLES samples are `settled` (or
        QUIET_MAX_S passes), and returns the last sample."""
        self.phase = phase
        deadline = time.monotonic() + QUIET_MAX_S
        time.sleep(SAMPLE_EVERY_S)
        while True:
            self.check()
            with self._lock:
                recent = self.samples[-QUIET_STABLE_SAMPLES:]
            # Judged before the count, as both callers did: `beyond` asserts on every sample.
            is_settled = settled(recent)
            if (len(recent) == QUIET_STABLE_SAMPLES and is_settled) or time.monotonic() > deadline:
                return recent[-1]
            time.sleep(SAMPLE_EVERY_S / 2)


# --- the load ---------------------------------------------------------------------------------------


class Decline:
    """An elicitation callback that declines every approval it is asked for."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked += 1
        return types.ElicitResult(action="decline")


def structured(result: types.CallToolResult) -> dict[str, Any]:
    body = result.structured_content
    if body is None:
        text = "\n".join(getattr(b, "text", "") for b in result.content)
        try:
            body = json.loads(text)
        except ValueError:
            body = {"text": text}
    assert isinstance(body, dict), result
    return body


def alive_with(token: str) -> list[int]:
    return [p.pid for p in scan_processes().values() if token in p.cmd and p.state != "Z"]


def sleep_command(seconds: int = 300) -> tuple[str, str]:
    token = f"{seconds}.{secrets.randbelow(10**9):09d}"
    return f"sleep {token} # SOAK-{uuid.uuid4().hex[:8]}", token


async def gone(token: str, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while alive_with(token):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: its process ({token}) still runs after {within} s: {alive_with(token)}")
        await anyio.sleep(0.1)


NESTED_SCRIPT = """
import asyncio
async def echo(i):
    r = await tools.terminal(command=f"echo nested-{i}")
    return r["output"].strip()
results = await asyncio.gather(
    *(echo(i) for i in range(3)),
    tools.mcp_notes__search(query="plan"),
    tools.mcp_weather__call_tool(tool_name="forecast", arguments={"city": "Oslo", "days": 1}),
    tools.wait(milliseconds=20),
    tools.current_datetime(),
)
print("gathered", len(results))
[*results[:3], results[3]["result"]["count"], results[4]["result"]["city"]]
"""


@dataclass
class Load:
    """What the workers share: the server, the counts, the failures, where victims live."""

    paddock: Paddock
    monitor: Monitor
    backend: str = "local"
    deadline: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def victim(self) -> Path:
        victim = self.paddock.workdir / "victims" / uuid.uuid4().hex[:8] / "victim"
        victim.mkdir(parents=True)
        (victim / "keep.txt").write_text("only a human may delete this\n")
        return victim

    async def call(self, client: Any, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        self.monitor.calls += 1
        with anyio.fail_after(60):
            return await client.call_tool(tool, args)

    async def script(self, client: Any, code: str) -> dict[str, Any]:
        return structured(await self.call(client, "run_tools_script", {"code": code}))

    async def cancel_in_flight(self, client: Any, tool: str, args: dict[str, Any], token: str) -> None:
        """Calls `tool`, waits until its command (named by `token`) runs, cancels the call from
        the client (the SDK's way: cancel the awaiting task) and checks the command is gone."""
        outcome: dict[str, Any] = {}
        scope = anyio.CancelScope()

        async def run() -> None:
            with scope:
                outcome["result"] = await self.call(client, tool, args)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            deadline = time.monotonic() + 30
            while not alive_with(token):
                assert "result" not in outcome, f"{tool} ended before it was cancelled: {outcome['result']}"
                assert time.monotonic() < deadline, f"{tool}'s command never started"
                await anyio.sleep(0.1)
            await anyio.sleep(0.3)
            scope.cancel()
        assert "result" not in outcome, f"{tool} ended before it was cancelled: {outcome['result']}"
        await gone(token, 10, f"cancelled {tool}")


async def op_script_trivial(load: Load, c: Any, w: Worker) -> None:
    out = await load.script(c, "6 * 7")
    assert out.get("ok") is True and out.get("result") == 42, f"{out}"


async def op_script_nested(load: Load, c: Any, w: Worker) -> None:
    out = await load.script(c, NESTED_SCRIPT)
    assert out.get("ok") is True, f"{out}"
    assert out["result"] == ["nested-0", "nested-1", "nested-2", 2, "Oslo"], out
    assert "gathered 7" in out["output"], f"{out}"


async def op_script_error(load: Load, c: Any, w: Worker) -> None:
    out = await load.script(c, "print('before')\n1 / 0\n")
    assert out.get("ok") is False and out.get("error_code") == "codemode:script_error", f"{out}"
    assert "before" in out["output"], out


async def op_script_timeout(load: Load, c: Any, w: Worker) -> None:
    # In turn: a nested call in flight at the deadline, and a script busy in its own loop.
    code = "await tools.wait(milliseconds=60000)" if w.rounds % 2 == 0 else "while True:\n    pass\n"
    out = await load.script(c, code)
    assert out.get("ok") is False and out.get("error_code") == TIMEOUT, f"{out}"


async def op_terminal_state(load: Load, c: Any, w: Worker) -> None:
    """cwd and an export kept from one command to the next. Checked in a legacy client's own
    session; in the engine's session that all 2026-07-28 clients share, another client's
    command may change the directory in between, so there a change not seen is counted, not
    failed."""
    where = load.paddock.workdir / "soak-cwd" if load.backend == "local" else Path("/tmp/soak-cwd")
    var = f"SOAK_W{w.index}"
    value = secrets.token_hex(4)
    r = await load.call(c, "terminal", {"command": f"mkdir -p {where} && cd {where} && export {var}={value}"})
    assert not r.is_error and structured(r)["exit_code"] == 0, f"{r}"
    r = await load.call(c, "terminal", {"command": f'echo "${var} $(basename "$PWD")"'})
    body = structured(r)
    assert body["exit_code"] == 0, f"{body}"
    if body["output"].strip() == f"{value} soak-cwd":
        return
    assert w.current_mode != "legacy", f"the session's state was not kept: {body}"
    load.counts["shared_session_lost_update"] += 1


async def op_terminal_pty(load: Load, c: Any, w: Worker) -> None:
    r = await load.call(c, "terminal", {"command": "tty; stty size", "pty": True})
    body = structured(r)
    assert body["exit_code"] == 0 and "/dev/pts/" in body["output"] and "40 120" in body["output"], f"{body}"


async def op_background(load: Load, c: Any, w: Worker) -> None:
    # One that ends by itself, waited for; one that is polled, read and killed.
    r = await load.call(c, "terminal", {"command": "echo bg-done", "background": True})
    quick_body = structured(r)
    assert "session_id" in quick_body, f"{quick_body}"
    quick = quick_body["session_id"]
    cmd, token = sleep_command()
    r = await load.call(c, "terminal", {"command": f"echo started; {cmd}", "background": True})
    started = structured(r)
    assert started.get("status") == "running", f"{started}"
    sid = started["session_id"]
    r = await load.call(c, "process", {"action": "wait", "session_id": quick, "timeout": 20})
    body = structured(r)
    assert body.get("exit_code") == 0 and "bg-done" in json.dumps(body), f"{body}"
    r = await load.call(c, "process", {"action": "poll", "session_id": sid})
    assert structured(r).get("state") == "running", f"{r}"
    r = await load.call(c, "process", {"action": "log", "session_id": sid})
    assert not r.is_error, f"{r}"
    r = await load.call(c, "process", {"action": "kill", "session_id": sid})
    assert not r.is_error, f"{r}"
    await gone(token, 10, "a killed background process")


async def op_background_left(load: Load, c: Any, w: Worker) -> None:
    """Left running for the session's close (legacy only: a modern client's session is the
    shared one, which outlives the client)."""
    cmd, token = sleep_command()
    r = await load.call(c, "terminal", {"command": cmd, "background": True})
    assert structured(r).get("status") == "running", f"{r}"
    w.left.append(token)


async def op_python(load: Load, c: Any, w: Worker) -> None:
    r = await load.call(c, "python_execute", {"code": "import sys\nprint(6 * 7, sys.version_info[0])"})
    body = structured(r)
    assert body.get("exit_code") == 0 and body["output"].strip() == "42 3", f"{body}"


async def op_cancel_terminal(load: Load, c: Any, w: Worker) -> None:
    cmd, token = sleep_command()
    await load.cancel_in_flight(c, "terminal", {"command": cmd}, token)


async def op_cancel_script(load: Load, c: Any, w: Worker) -> None:
    cmd, token = sleep_command()
    await load.cancel_in_flight(c, "run_tools_script", {"code": f"await tools.terminal(command={cmd!r})"}, token)


async def op_approval_declined(load: Load, c: Any, w: Worker) -> None:
    victim = load.victim()
    asked = w.decline.asked
    r = await load.call(c, "terminal", {"command": f"rm -rf {victim}"})
    assert DENIED in json.dumps(structured(r)), f"{r}"
    out = await load.script(c, f"await tools.terminal(command={f'rm -rf {victim}'!r})")
    assert out.get("ok") is False and DENIED in json.dumps(out), f"{out}"
    assert w.decline.asked == asked + 2, f"asked {w.decline.asked - asked} times, not twice"
    assert victim.is_dir(), f"{victim} deleted although the approval was declined"


async def op_approval_impossible(load: Load, c: Any, w: Worker) -> None:
    """A client without elicitation (its own, short MCP session): denied, never waited on."""
    victim = load.victim()
    async with client_for(load.paddock, w.current_mode) as bare:
        r = await load.call(bare, "terminal", {"command": f"rm -rf {victim}"})
    assert DENIED in json.dumps(structured(r)), f"{r}"
    assert victim.is_dir(), f"{victim} deleted without an approval"


OPS = [
    op_script_trivial,
    op_script_nested,
    op_script_error,
    op_script_timeout,
    op_terminal_state,
    op_terminal_pty,
    op_background,
    op_background_left,
    op_python,
    op_cancel_terminal,
    op_cancel_script,
    op_approval_declined,
    op_approval_impossible,
]


@dataclass
class Worker:
    index: int
    rounds: int = 0
    decline: Decline = field(default_factory=Decline)
    left: list[str] = field(default_factory=list)
    current_mode: str = "legacy"

    def mode(self) -> str:
        return ("legacy", "2026-07-28")[(self.index + self.rounds) % 2]


def describe(e: BaseException) -> str:
    """An exception, with those of a task group spelled out (its own text names none)."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in e.exceptions)
    return f"{type(e).__name__}: {e}"


def client_for(p: Paddock, mode: str, **options: Any) -> Any:
    """An un-entered client of `mode` (Paddock.client() reads the mode when called, with no
    await in between, so concurrent workers can each have their own)."""
    p.mode = mode
    return p.client(**options)


async def one_round(load: Load, w: Worker, stop_at_deadline: bool) -> None:
    """One client (one MCP session when legacy), every kind of call in a shuffled order."""
    mode = w.mode()
    ops = [op for op in OPS if mode == "legacy" or op is not op_background_left]
    random.Random(w.index * 7919 + w.rounds).shuffle(ops)
    w.current_mode = mode
    async with client_for(load.paddock, mode, elicitation_callback=w.decline) as c:
        for op in ops:
            if stop_at_deadline and time.monotonic() > load.deadline:
                break
            try:
                await op(load, c, w)
                load.counts[f"{op.__name__[3:]}/{mode}"] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported at the end
                load.failures.append(f"{op.__name__} ({mode}, worker {w.index}): {describe(e)}")
    # The MCP session ended: its Paddock session is closed, and what was left running with it.
    for token in w.left:
        try:
            await gone(token, 20, "a background process left for its session's close")
            load.counts["left_for_close_ended"] += 1
        except AssertionError as e:
            load.failures.append(str(e))
    w.left.clear()
    w.rounds += 1


def rss_slope(samples: list[Sample]) -> float:
    """The server's RSS growth per 100 calls over the soak (least squares), for the report."""
    points = [(s.calls, s.rss_kib) for s in samples if s.rss_kib is not None]
    if len({c for c, _ in points}) < 2:
        return 0.0
    slope, _ = statistics.linear_regression([c for c, _ in points], [r for _, r in points])
    return slope * 100


def paddock_cli(p: Paddock, *args: str) -> str:
    """`paddock ARGS --policy P` as an operator runs it: same state directory, same project
    directory (the sandbox's workspace, and so the agents' keys, default to it)."""
    out = subprocess.run(
        [str(p.binary), *args, "--policy", str(p.policy)],
        env=p.env(),
        cwd=p.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"paddock {' '.join(args)}: exit {out.returncode}: {out.stderr}"
    return out.stdout


def sessions_list(p: Paddock) -> list[str]:
    lines = paddock_cli(p, "sessions", "list").splitlines()
    return sorted(json.loads(line)["id"] for line in lines if line.strip())


def alive_of(monitor: Monitor) -> list[Proc]:
    """The processes the tree ever had that still run (same pid and start time), and any
    process naming the server's state directory."""
    procs = scan_processes()
    alive = {
        pid: procs[pid]
        for (pid, start) in monitor.seen
        if pid in procs and procs[pid].start == start and procs[pid].state != "Z"
    }
    alive.update({p.pid: p for p in procs.values() if monitor.home in p.cmd and p.state != "Z"})
    return sorted(alive.values(), key=lambda p: p.pid)


def beyond(base: Sample, end: Sample) -> list[str]:
    """How `end` exceeds the tolerances around `base` (nothing: it is back)."""
    problems = []
    assert base.rss_kib is not None and end.rss_kib is not None
    rss_limit = base.rss_kib + max(RSS_TOLERANCE_KIB, int(base.rss_kib * RSS_TOLERANCE_FRACTION))
    if end.rss_kib > rss_limit:
        problems.append(f"RSS {end.rss_kib} KiB > {rss_limit} KiB (baseline {base.rss_kib} KiB + tolerance)")
    if (end.fds or 0) > (base.fds or 0) + FD_TOLERANCE:
        problems.append(f"open descriptors {end.fds} > {base.fds} + {FD_TOLERANCE}")
    if (end.threads or 0) > (base.threads or 0) + THREAD_TOLERANCE:
        problems.append(f"threads {end.threads} > {base.threads} + {THREAD_TOLERANCE}")
    if (end.zygote_fds or 0) > (base.zygote_fds or 0) + FD_TOLERANCE:
        problems.append(f"the zygote's open descriptors {end.zygote_fds} > {base.zygote_fds} + {FD_TOLERANCE}")
    if end.mounts > base.mounts:
        problems.append(f"mounts under PADDOCK_HOME {end.mounts} > {base.mounts}")
    if (end.containers or 0) > (base.containers or 0):
        problems.append(f"docker containers {end.containers} > {base.containers}")
    if end.procs > base.procs + PROCESS_TOLERANCE:
        problems.append(
            f"processes {end.procs} ({dict(end.kinds)}) > {base.procs} ({dict(base.kinds)}) + {PROCESS_TOLERANCE}"
        )
    return problems


@pytest.fixture
def short_home() -> Any:
    """A PADDOCK_HOME short enough for the sandboxed agents' sockets (107 bytes), which
    pytest's tmp paths are not; removed after the server (fixtures end in reverse order)."""
    home = Path(tempfile.mkdtemp(prefix="pdk-soak-", dir="/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


# A backend name of the soak's own, so that its containers are easy to tell apart in `docker ps`
# (names carry the state directory too, so other tests' `default` sessions are not at risk).
DOCKER_BACKEND = "soakdocker"
LOCAL_CEILINGS = "max_processes = 1024\ntmp_size_mb = 64\n"


def docker_backend_table() -> str:
    """The test services' `[backends.docker]` (scripts/test-services.sh), as policy text, under
    a name of the soak's own (DOCKER_BACKEND)."""
    policy = os.environ.get("PADDOCK_TEST_POLICY")
    assert policy, "PADDOCK_SOAK_BACKENDS names docker: set PADDOCK_TEST_POLICY=$(scripts/test-services.sh)"
    text = Path(policy).read_text()
    start = text.find("[backends.docker]")
    assert start >= 0, f"{policy} has no [backends.docker]: is dockerd running (scripts/test-services.sh)?"
    end = text.find("\n[", start + 1)
    table = text[start:] if end < 0 else text[start : end + 1]
    return "\n" + table.replace("[backends.docker]", f"[backends.{DOCKER_BACKEND}]", 1)


@pytest.fixture
def soak_server(short_home: Path, paddock_bin: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """`paddock serve --http` whose environment tools run on the backend under test."""
    backend = request.param
    workdir = tmp_path / "soak"
    workdir.mkdir()
    extra = "" if backend == "local" else docker_backend_table()
    routed = "local" if backend == "local" else DOCKER_BACKEND
    p = Paddock(
        paddock_bin,
        "http",
        "legacy",
        workdir,
        sandbox="workspace-write",
        codemode_timeout=CODEMODE_TIMEOUT_S,
        home=short_home,
        terminal_backend=routed,
        policy_extra=extra,
    )
    routes = 'process = "local"\npython_execute = "local"\n'
    local = 'sandbox = "workspace-write"\n'
    policy = p.policy.read_text()
    assert routes in policy and local in policy, "conftest.policy_text changed its [backends.local] or [routes]"
    policy = policy.replace(routes, routes.replace('"local"', f'"{routed}"'))
    # The ceilings of policies/default.toml (a pids cgroup per session), and a tmpfs /tmp per
    # session: groups and mounts made and removed with every session.
    p.policy.write_text(policy.replace(local, local + LOCAL_CEILINGS))
    p.start()
    yield p, backend
    p.stop()
    print(f"--- {p.log_path} (last lines) ---\n{p.log_tail()}")
    # After a failure before the test's own close: the shared session would keep its agents
    # (and its container) for half an hour. (Nothing to do after a pass.)
    subprocess.run(
        [str(p.binary), "sessions", "close", "default", "--policy", str(p.policy)],
        env=p.env(),
        cwd=p.workdir,
        capture_output=True,
        timeout=60,
    )
    if backend == "docker":
        for container in containers_of(str(p.home)):
            print(f"removing container {container}, left by the failed soak")
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60)


@pytest.mark.timeout(SOAK_SECONDS + 300)
@pytest.mark.parametrize("soak_server", BACKENDS, indirect=True)
async def test_soak_serve_http_stays_flat(soak_server: tuple[Paddock, str]) -> None:
    p, backend = soak_server
    server = p.proc
    assert server is not None
    server_pid = server.pid
    workers = [Worker(i) for i in range(CLIENTS)]
    with Monitor(server_pid, p.home, docker=backend == "docker") as monitor:
        load = Load(p, monitor, backend)

        # Warm-up: one round per client, both eras at once.
        monitor.phase = "warm-up"
        async with anyio.create_task_group() as tg:
            for w in workers:
                tg.start_soon(one_round, load, w, False)
        assert not load.failures, "the warm-up failed:\n" + "\n".join(load.failures)
        base = await anyio.to_thread.run_sync(monitor.quiet, "baseline")
        base_fds = fd_kinds(server_pid)

        # The soak.
        monitor.phase = "soak"
        started = time.monotonic()
        load.deadline = started + SOAK_SECONDS

        async def keep_going(w: Worker) -> None:
            while time.monotonic() < load.deadline:
                await one_round(load, w, True)

        async with anyio.create_task_group() as tg:
            for w in workers:
                tg.start_soon(keep_going, w)
        soaked = time.monotonic() - started
        end = await anyio.to_thread.run_sync(monitor.back_to, base, "end")
        end_fds = fd_kinds(server_pid)

    monitor.check()
    soak_samples = [s for s in monitor.samples if s.phase == "soak" and s.rss_kib]
    peak = max((s.rss_kib or 0 for s in soak_samples), default=0)
    report = [
        f"soak ({backend}): {soaked:.0f} s, {CLIENTS} clients, {monitor.calls} calls, "
        f"{sum(w.rounds for w in workers)} client sessions",
        "calls by kind: " + ", ".join(f"{k}={v}" for k, v in sorted(load.counts.items())),
        f"baseline: rss {base.rss_kib} KiB, fds {base.fds}, threads {base.threads}, "
        f"processes {base.procs} {dict(base.kinds)}, containers {base.containers}",
        f"end:      rss {end.rss_kib} KiB, fds {end.fds}, threads {end.threads}, "
        f"processes {end.procs} {dict(end.kinds)}, containers {end.containers}",
        f"peak RSS during the soak: {peak} KiB; growth over the soak: {rss_slope(soak_samples):.2f} KiB per 100 calls",
        f"server descriptors, baseline -> end: {dict(base_fds)} -> {dict(end_fds)}",
        f"most mounts at once under PADDOCK_HOME: {max(s.mounts for s in monitor.samples)}; "
        f"cgroups the tree was in (besides the server's own): {len(monitor.cgroups)}, "
        + ", ".join(sorted(f"{c}:{path}" for c, path in monitor.cgroups)[:6]),
        "processes at baseline:\n  " + "\n  ".join(base.members),
        "processes at the end:\n  " + "\n  ".join(end.members),
        monitor.series(),
    ]
    print("\n".join(report))

    # Every kind of call ran, in both eras, and did what it should.
    assert not load.failures, f"{len(load.failures)} calls misbehaved:\n" + "\n".join(load.failures[:30])
    for op in OPS:
        for mode in ("legacy", "2026-07-28"):
            if op is op_background_left and mode != "legacy":
                continue
            assert load.counts[f"{op.__name__[3:]}/{mode}"] > 0, f"{op.__name__} never ran in {mode}: {load.counts}"

    problems = beyond(base, end)
    assert not problems, "\n".join(["the server did not come back to its baseline:", *problems, *report])

    # Stopped the way a service manager stops it (SIGTERM to the server alone), nothing of it
    # remains but the shared session, the engine's own that 2026-07-28 clients used: it is
    # left to the idle timeout by design (README "Sessions"), so the operator closes it.
    server.send_signal(signal.SIGTERM)
    server.wait(30)
    await anyio.sleep(1)
    remaining = sessions_list(p)
    assert set(remaining) <= {"default"}, f"sessions outlived the server: {remaining}"
    survivors = [f"{kind_of(x, -1, set())}: {x.cmd[:110]}" for x in alive_of(monitor)]
    unexpected = [x for x in survivors if x.split(":")[0] not in {"agent", "sandbox-exec", "bash"}]
    assert not unexpected, "outlived the server (only the shared session's agents may):\n" + "\n".join(survivors)
    if remaining:
        paddock_cli(p, "sessions", "close", "default")
    await assert_nothing_left(p, monitor)


async def assert_nothing_left(p: Paddock, monitor: Monitor) -> None:
    deadline = time.monotonic() + 10
    while (alive := alive_of(monitor)) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert not alive, "processes outlived the server and its sessions:\n" + "\n".join(
        f"{x.pid} {x.cmd[:120]}" for x in alive
    )
    for sub in ("sessions", "sandbox-tmp", "agents", "session-records"):
        d = p.home / sub
        left = sorted(str(f.relative_to(p.home)) for f in d.rglob("*")) if d.exists() else []
        assert not left, f"{d} is not empty after the server stopped and its sessions closed: {left[:20]}"
    if monitor.docker:
        left_containers = containers_of(monitor.home)
        assert not left_containers, f"docker containers of the server remain: {left_containers}"
    mounts = mounts_under(str(p.home), str(p.workdir))
    assert not mounts, f"mounts of the server remain: {mounts}"
    cgroups = []
    for controllers, path in sorted(monitor.cgroups):
        d = cgroup_dir(controllers, path)
        if d is not None and d.exists():
            cgroups.append(str(d))
    assert not cgroups, f"cgroups of the server's processes remain: {cgroups}"
    # And the ceilings' session groups by name (`<mount>/paddock/<backend>.<state digest>/<session>`),
    # for the per-client sessions.
    named = [str(d) for d in Path("/sys/fs/cgroup").glob("*/paddock/local.*/*") if d.name in monitor.session_ids]
    assert not named, f"session cgroups remain: {named}"
