#!/usr/bin/env python3
"""Measures one scenario of one peer of Paddock and prints one JSON object on stdout.

Run it with the Python of the peers venv made by scripts/bench-peers.sh:

    peers=$(scripts/bench-peers.sh)
    "$peers/venv/bin/python" benches/peers/peer_driver.py PEER SCENARIO \
        [--samples N] [--warmup N] [--budget SECONDS] [--param K=V ...]

Peers and scenarios:

    monty    trivial, nested_call [calls=100 mode=sync|async], cpu [n=1000000],
             gather [calls=50], script_size [lines=100], output [chars=1000],
             throughput [concurrency=1 window=1.0 session=reuse], idle_memory [workers=4],
             startup, batch [scripts=200]
             (pydantic-monty 1.4.0 worker pool; trivial/script_size/output/throughput take a
             fresh checkout per script unless session=reuse; startup is a fresh Python process
             that makes a pool and runs one script, batch one that runs `scripts` scripts)
    cpython  the same scenarios, each script a fresh `python3 -c` subprocess [python=PATH]
    hermes   terminal [command=true]   (Hermes Agent 0.19.0 terminal_tool, local backend)
    bash     terminal [command=true]   (bare `bash -c` through subprocess)

Output (one line): on success
    {"peer", "scenario", "method", "samples_ms", "unit", "params", "setup_ms",
     "version", "wall_s"}
where "unit" is "ms" except for throughput ("scripts/s": each sample is the rate over one
window) and idle_memory ("kB": each sample is one idle worker); samples_ms keeps its name.
and exit status 0; on failure
    {"peer", "scenario", "error", ["not_installed": true]}
and exit status 1 (2 for a usage error). Nothing else is ever written to stdout: anything the
peers print goes to stderr.

Timing is time.perf_counter around the measured operation, after --warmup untimed runs.
Where a scenario is timed inside the script (nested_call, cpu, gather, as `paddock bench` does
for the same scenarios) the method says so; elsewhere the sample is the host-side wall time of
running one whole script. --budget stops sampling early (after at least 3 samples) once that
many seconds have been spent sampling, so a quick run stays quick; the count is in samples_ms.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

# stdout is the result channel: keep the real one aside and send fd 1 (Python's and every
# child's) to stderr, so a peer that prints cannot corrupt the JSON.
_RESULT_FD = os.dup(1)
os.dup2(2, 1)
sys.stdout = sys.stderr

SCENARIOS = {
    "monty": ["trivial", "nested_call", "cpu", "gather", "script_size", "output",
              "throughput", "idle_memory", "startup", "batch"],
    "cpython": ["trivial", "nested_call", "cpu", "gather", "script_size", "output",
                "throughput", "idle_memory", "startup"],
    "hermes": ["terminal"],
    "bash": ["terminal"],
}

DEFAULTS = {
    "nested_call": {"calls": 100},
    "cpu": {"n": 1_000_000},
    "gather": {"calls": 50},
    "script_size": {"lines": 100},
    "output": {"chars": 1000},
    "terminal": {"command": "true"},
    "throughput": {"concurrency": 1, "window": 1.0},
    "idle_memory": {"workers": 4},
}


class Failure(Exception):
    """A measurement that could not be made; becomes the "error" of the JSON."""

    def __init__(self, message: str, not_installed: bool = False) -> None:
        super().__init__(message)
        self.not_installed = not_installed


def emit(obj: dict[str, Any]) -> None:
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    os.write(_RESULT_FD, data)


def peers_dir() -> Path:
    env = os.environ.get("PADDOCK_PEERS_DIR")
    if env:
        return Path(env)
    # The venv is $PEERS_DIR/venv.
    return Path(sys.prefix).parent


def check_installed(peer: str) -> None:
    """Honours the verdict of scripts/bench-peers.sh: a peer it recorded as not installed is
    reported so, even if an older copy would still import."""
    try:
        entry = json.loads((peers_dir() / "peers.json").read_text()).get(peer)
    except (OSError, ValueError):
        return  # run outside a peers dir: importing decides
    if isinstance(entry, dict) and entry.get("installed") is False:
        reason = entry.get("reason") or "unknown reason"
        raise Failure(f"{peer} not installed: {reason}; run scripts/bench-peers.sh", True)


def not_installed(peer: str, err: BaseException) -> Failure:
    reason = f"{type(err).__name__}: {err}"
    status = peers_dir() / "peers.json"
    try:
        entry = json.loads(status.read_text()).get(peer, {})
        if entry.get("installed") is False and entry.get("reason"):
            reason = f"{entry['reason']} ({reason})"
    except (OSError, ValueError):
        pass
    return Failure(f"{peer} not installed: {reason}; run scripts/bench-peers.sh", True)


# ---------------------------------------------------------------------------------------------
# scripts shared by the Python-language peers


def cpu_script(n: int) -> str:
    # Byte for byte the loop `paddock bench` runs in its sandbox (benches/src/scenarios/
    # cpu.rs checks this file contains this line): module-level globals in every peer.
    return f"s = 0\nfor i in range({n}):\n    s += i * i\n"


def size_script(lines: int) -> str:
    # `lines` simple statements; the last expression is the result.
    return "v = 0\n" + "v = v + 1\n" * max(lines - 2, 0) + "v\n"


def output_script(chars: int) -> str:
    return f"print('x' * {chars})"


# ---------------------------------------------------------------------------------------------
# sampling


class Sampler:
    def __init__(self, samples: int, warmup: int, budget: float | None) -> None:
        self.samples = samples
        self.warmup = warmup
        self.budget = budget

    def run(self, once: Callable[[], float]) -> list[float]:
        """`once` runs one sample and returns its value in ms."""
        for _ in range(self.warmup):
            once()
        out: list[float] = []
        started = time.perf_counter()
        for _ in range(self.samples):
            out.append(once())
            if (
                self.budget is not None
                and len(out) >= 3
                and time.perf_counter() - started > self.budget
            ):
                break
        return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    value = fn()
    return (time.perf_counter() - t) * 1000.0, value


def private_kb(pid: int) -> int:
    """Private (not shared) memory of a process in kB, as `paddock bench` reads it."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def child_pids() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def windows(sampler: Sampler, window: float, one_window: Callable[[float], int]) -> list[float]:
    """Throughput samples: `one_window(until)` runs scripts until `until` and returns how many
    finished; each sample is that count over the window's real length, in scripts/s."""
    for _ in range(sampler.warmup):
        one_window(time.perf_counter() + min(window, 0.2))
    out: list[float] = []
    for _ in range(sampler.samples):
        t = time.perf_counter()
        done = one_window(t + window)
        out.append(done / (time.perf_counter() - t))
    return out


# ---------------------------------------------------------------------------------------------
# monty


def monty_version() -> str:
    from importlib.metadata import version

    return "pydantic-monty-client " + version("pydantic-monty-client")


def measure_monty(scenario: str, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    try:
        import pydantic_monty as m
    except ImportError as err:
        raise not_installed("monty", err) from err

    if scenario == "throughput":
        return measure_monty_throughput(m, p, sampler)
    if scenario == "idle_memory":
        return measure_monty_idle(m, p)
    if scenario == "startup":
        return measure_monty_startup(sampler)
    if scenario == "batch":
        return measure_monty_batch(p, sampler)
    if scenario == "gather" or (scenario == "nested_call" and p.get("mode") == "async"):
        return measure_monty_async(m, scenario, p, sampler)

    limits = {"max_suspensions": 1_000_000}
    reuse = p.get("session") == "reuse"
    per_script = "one session reused for every script" if reuse else (
        "a fresh checkout (worker reset between scripts) per script"
    )
    setup_ms, pool = timed(lambda: m.Monty(min_processes=2).__enter__())
    try:
        if scenario in ("trivial", "script_size", "output"):
            if scenario == "trivial":
                code, check = "1 + 1", (lambda r, out: r == 2)
                what = "`1 + 1`"
            elif scenario == "script_size":
                lines = int(p["lines"])
                code, check = size_script(lines), (lambda r, out: r == max(lines - 2, 0))
                what = f"a script of {lines} lines `v = v + 1`"
            else:
                chars = int(p["chars"])
                code = output_script(chars)
                check = lambda r, out: len(out) == chars + 1  # noqa: E731
                what = f"`print('x' * {chars})` collected with CollectString"

            session = pool.checkout(limits=limits).__enter__() if reuse else None

            def once() -> float:
                collect = m.CollectString()
                t = time.perf_counter()
                if session is not None:
                    r = session.feed_run(code, print_callback=collect)
                else:
                    with pool.checkout(limits=limits) as s:
                        r = s.feed_run(code, print_callback=collect)
                ms = (time.perf_counter() - t) * 1000.0
                if not check(r, collect.output):
                    raise Failure(f"unexpected result {r!r} / output of {len(collect.output)} chars")
                return ms

            samples = sampler.run(once)
            if session is not None:
                session.__exit__(None, None, None)
            method = (
                f"pydantic-monty 1.4.0 sync pool (Monty(min_processes=2), warm) running {what}: "
                f"host wall time of checkout + feed_run + return, {per_script}."
            )
        elif scenario == "nested_call":
            calls = int(p["calls"])
            code = (
                "import time\nnoop()\nt = time.perf_counter()\n"
                f"for _ in range({calls}):\n    noop()\n"
                f"(time.perf_counter() - t) / {calls} * 1000"
            )
            with pool.checkout(limits=limits) as s:

                def once() -> float:
                    return float(s.feed_run(code, external_lookup={"noop": lambda: None}))

                samples = sampler.run(once)
            method = (
                f"pydantic-monty 1.4.0 sync pool: a script calls the sync host function noop() "
                f"{calls} times in a loop, timed inside the script; sample = time per call."
            )
        elif scenario == "cpu":
            n = int(p["n"])
            code = (
                "import time\nt = time.perf_counter()\n"
                + cpu_script(n)
                + "(time.perf_counter() - t) * 1000"
            )

            def once() -> float:
                with pool.checkout(limits=limits) as s:
                    return float(s.feed_run(code))

            samples = sampler.run(once)
            method = (
                f"pydantic-monty 1.4.0 pool: module-level loop `s += i * i` for i in range({n}), "
                "timed inside the script (excludes start-up), fresh checkout per script."
            )
        else:
            raise Failure(f"unknown scenario {scenario}")
    finally:
        pool.__exit__(None, None, None)
    return {"method": method, "samples_ms": samples, "setup_ms": setup_ms}


def measure_monty_throughput(m: Any, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    import asyncio

    concurrency, window = int(p["concurrency"]), float(p["window"])
    reuse = p.get("session") == "reuse"

    async def main() -> tuple[float, list[float]]:
        t = time.perf_counter()
        async with m.AsyncMonty(min_processes=2) as pool:
            setup_ms = (time.perf_counter() - t) * 1000.0

            async def worker(until: float) -> int:
                done = 0
                if reuse:
                    # One session per task, kept for every script (Monty's REPL sessions).
                    async with pool.checkout() as s:
                        while time.perf_counter() < until:
                            if await s.feed_run("1 + 1") != 2:
                                raise Failure("1 + 1 did not return 2")
                            done += 1
                    return done
                while time.perf_counter() < until:
                    async with pool.checkout() as s:
                        if await s.feed_run("1 + 1") != 2:
                            raise Failure("1 + 1 did not return 2")
                    done += 1
                return done

            async def one_window(until: float) -> int:
                return sum(await asyncio.gather(*[worker(until) for _ in range(concurrency)]))

            for _ in range(sampler.warmup):
                await one_window(time.perf_counter() + min(window, 0.2))
            out: list[float] = []
            for _ in range(sampler.samples):
                t = time.perf_counter()
                done = await one_window(t + window)
                out.append(done / (time.perf_counter() - t))
            return setup_ms, out

    setup_ms, samples = asyncio.run(main())
    return {
        "method": (
            f"pydantic-monty 1.4.0 AsyncMonty pool (min_processes=2, max_processes = CPU count, "
            f"its defaults): {concurrency} concurrent tasks each running `1 + 1` "
            + ("in its own session (one checkout kept for every script)" if reuse
               else "in a fresh checkout")
            + f", over and over for {window:g} s; sample = scripts finished / window."
        ),
        "samples_ms": samples,
        "unit": "scripts/s",
        "setup_ms": setup_ms,
    }


def measure_monty_idle(m: Any, p: dict[str, Any]) -> dict[str, Any]:
    workers = int(p["workers"])
    t = time.perf_counter()
    with m.Monty(min_processes=workers, max_processes=workers) as pool:
        setup_ms = (time.perf_counter() - t) * 1000.0
        with pool.checkout() as s:
            s.feed_run("1 + 1")
        time.sleep(0.5)  # let every worker finish starting
        pids = child_pids()
        samples = [float(private_kb(pid)) for pid in pids]
    if not samples:
        raise Failure("no worker processes found under the pool")
    return {
        "method": (
            f"pydantic-monty 1.4.0 pool of {workers} workers (`monty subprocess`), one script run, "
            "then idle for 0.5 s: Private_Clean + Private_Dirty of each worker from "
            "/proc/PID/smaps_rollup; sample = one worker."
        ),
        "samples_ms": samples,
        "unit": "kB",
        "setup_ms": setup_ms,
    }


# A whole fresh Python process that makes a pool and runs one script: Monty's `paddock run`.
_MONTY_START = """\
import pydantic_monty as m
with m.Monty(min_processes=1) as pool:
    with pool.checkout() as s:
        assert s.feed_run("1 + 1") == 2
"""


# The same, running `1 + 1` SCRIPTS times, each in a fresh checkout.
_MONTY_BATCH = """\
import pydantic_monty as m
with m.Monty(min_processes=2) as pool:
    for _ in range(SCRIPTS):
        with pool.checkout() as s:
            assert s.feed_run("1 + 1") == 2
"""


def measure_fresh_python(code: str, method: str, sampler: Sampler) -> dict[str, Any]:
    """Host wall time of a fresh `python -c code` process, from spawn to exit."""

    def once() -> float:
        return wall_ms(sys.executable, code)

    return {"method": method, "samples_ms": sampler.run(once), "setup_ms": 0.0}


def measure_monty_batch(p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    scripts = int(p["scripts"])
    return measure_fresh_python(
        _MONTY_BATCH.replace("SCRIPTS", str(scripts)),
        f"a fresh `{sys.executable} -c` process that imports pydantic_monty, makes a pool "
        f"(min_processes=2), runs `1 + 1` {scripts} times, each in a fresh checkout, and "
        "exits: host wall time from spawn to exit.",
        sampler,
    )


def measure_monty_startup(sampler: Sampler) -> dict[str, Any]:
    return measure_fresh_python(
        _MONTY_START,
        f"a fresh `{sys.executable} -c` process that imports pydantic_monty, makes a pool "
        "(min_processes=1), runs `1 + 1` in it and exits: host wall time from spawn to exit.",
        sampler,
    )


def measure_monty_async(m: Any, scenario: str, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    import asyncio

    calls = int(p["calls"])

    async def noop() -> None:
        return None

    gathered = (
        "import asyncio, time\nawait asyncio.gather(noop())\nt = time.perf_counter()\n"
        f"await asyncio.gather(*[noop() for _ in range({calls})])\n"
        "(time.perf_counter() - t) * 1000"
    )
    awaited = (
        "import time\nawait noop()\nt = time.perf_counter()\n"
        f"for _ in range({calls}):\n    await noop()\n"
        "(time.perf_counter() - t) * 1000"
    )

    async def main() -> tuple[float, list[float], str]:
        t = time.perf_counter()
        async with m.AsyncMonty(min_processes=2) as pool:
            setup_ms = (time.perf_counter() - t) * 1000.0
            limits = {"max_suspensions": 10 * calls + 1000}
            code = gathered if scenario == "gather" else awaited
            how = "gathered"
            if scenario == "gather":
                try:
                    async with pool.checkout(limits=limits) as s:
                        await s.feed_run(gathered, external_lookup={"noop": noop})
                except Exception as err:  # noqa: BLE001 - any refusal means: no gather here
                    print(f"monty gather failed ({err}); measuring sequential awaits", file=sys.stderr)
                    code, how = awaited, "awaited one after another (gather failed)"

            async def once() -> float:
                async with pool.checkout(limits=limits) as s:
                    ms = float(await s.feed_run(code, external_lookup={"noop": noop}))
                return ms / calls if scenario == "nested_call" else ms

            for _ in range(sampler.warmup):
                await once()
            out: list[float] = []
            started = time.perf_counter()
            for _ in range(sampler.samples):
                out.append(await once())
                if (
                    sampler.budget is not None
                    and len(out) >= 3
                    and time.perf_counter() - started > sampler.budget
                ):
                    break
            return setup_ms, out, how

    setup_ms, samples, how = asyncio.run(main())
    if scenario == "gather":
        method = (
            f"pydantic-monty 1.4.0 AsyncMonty pool: {calls} calls of the async host function "
            f"noop() {how} with asyncio.gather, timed inside the script, fresh checkout per script."
        )
    else:
        method = (
            f"pydantic-monty 1.4.0 AsyncMonty pool: a script awaits the async host function noop() "
            f"{calls} times in a loop, timed inside the script; sample = time per call."
        )
    return {"method": method, "samples_ms": samples, "setup_ms": setup_ms}


# ---------------------------------------------------------------------------------------------
# cpython: a fresh interpreter per script

# Child side of the host-call protocol: one JSON request line out, one JSON reply line in.
_CALL_CHILD = """\
import json, sys, time
out, inp = sys.stdout, sys.stdin
def noop():
    out.write(json.dumps({"tool": "noop", "args": {}}) + "\\n"); out.flush()
    return json.loads(inp.readline())["result"]
noop()
t = time.perf_counter()
for _ in range(CALLS):
    noop()
out.write("RESULT %r\\n" % ((time.perf_counter() - t) / CALLS * 1000)); out.flush()
"""

_GATHER_CHILD = """\
import json, sys, time
out, inp = sys.stdout, sys.stdin
def announce(n):
    out.write((json.dumps({"tool": "noop", "args": {}}) + "\\n") * n); out.flush()
    return [json.loads(inp.readline())["result"] for _ in range(n)]
announce(1)
t = time.perf_counter()
announce(CALLS)
out.write("RESULT %r\\n" % ((time.perf_counter() - t) * 1000)); out.flush()
"""

_TIMED_CHILD = """\
import time
t = time.perf_counter()
BODY
print("RESULT %r" % ((time.perf_counter() - t) * 1000))
"""

# One argv string is capped by the kernel at 128 KiB (MAX_ARG_STRLEN).
_ARG_MAX = 100_000


def base_python(p: dict[str, Any]) -> str:
    if "python" in p:
        return str(p["python"])
    # The real interpreter the venv was made from, not a venv or pyenv shim.
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def run_python(py: str, code: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    if len(code) <= _ARG_MAX:
        argv, data = [py, "-c", code], stdin
    else:
        argv, data = [py, "-"], code.encode()
    return subprocess.run(argv, input=data, capture_output=True, check=False)


def wall_ms(py: str, code: str) -> float:
    """Host wall time of `code` run by a fresh `py` process, from spawn to exit; a run that
    fails is a Failure with the end of its stderr."""
    ms, proc = timed(lambda: run_python(py, code))
    if proc.returncode != 0:
        raise Failure(proc.stderr.decode(errors="replace")[-500:])
    return ms


def child_result(proc: subprocess.CompletedProcess[bytes]) -> float:
    if proc.returncode != 0:
        raise Failure(f"child exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    for line in proc.stdout.decode().splitlines():
        if line.startswith("RESULT "):
            return float(line[7:])
    raise Failure("child printed no RESULT line")


def serve_calls(py: str, code: str, batches: list[int] | None = None) -> float:
    """Runs a child that calls the host over its stdio and answers every request with {}.

    Without `batches` each request is answered at once; with it the host waits until a whole
    batch of that many requests has been announced and answers it in one write."""
    proc = subprocess.Popen([py, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if proc.stdin is None or proc.stdout is None:
        raise Failure("no pipes to the child")
    reply = (json.dumps({"result": {}}) + "\n").encode()
    sizes = list(batches or [])
    pending = 0
    result = None
    try:
        for line in proc.stdout:
            if line.startswith(b"RESULT "):
                result = float(line[7:])
                break
            json.loads(line)
            pending += 1
            if sizes and pending < sizes[0]:
                continue
            if sizes:
                sizes.pop(0)
            proc.stdin.write(reply * pending)
            proc.stdin.flush()
            pending = 0
    finally:
        proc.stdin.close()
        proc.wait()
    if result is None:
        raise Failure(f"child exited {proc.returncode} without a RESULT line")
    return result


def measure_cpython(scenario: str, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    py = base_python(p)
    if not shutil.which(py) and not os.access(py, os.X_OK):
        raise Failure(f"cpython not installed: {py} not found", True)
    version = subprocess.run(
        [py, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, check=False
    ).stdout.decode().strip()
    fresh = f"each script a fresh `{py} -c` subprocess (CPython {version})"
    if scenario == "throughput":
        concurrency, window = int(p["concurrency"]), float(p["window"])
        from concurrent.futures import ThreadPoolExecutor

        def worker(until: float) -> int:
            done = 0
            while time.perf_counter() < until:
                proc = run_python(py, "1 + 1")
                if proc.returncode != 0:
                    raise Failure(proc.stderr.decode(errors="replace")[-500:])
                done += 1
            return done

        with ThreadPoolExecutor(max_workers=concurrency) as threads:

            def one_window(until: float) -> int:
                return sum(threads.map(worker, [until] * concurrency))

            samples = windows(sampler, window, one_window)
        return {
            "method": (
                f"{concurrency} threads each spawning `1 + 1` as {fresh}, over and over for "
                f"{window:g} s; sample = scripts finished / window."
            ),
            "samples_ms": samples,
            "unit": "scripts/s",
            "setup_ms": 0.0,
            "version": "CPython " + version,
        }
    elif scenario == "idle_memory":
        workers = int(p["workers"])
        procs = [
            subprocess.Popen([py, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
            for _ in range(workers)
        ]
        try:
            time.sleep(0.5)
            samples = [float(private_kb(proc.pid)) for proc in procs]
        finally:
            for proc in procs:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait()
        return {
            "method": (
                f"{workers} idle `{py} -c 'import sys; sys.stdin.read()'` processes (CPython "
                f"{version}) after 0.5 s: Private_Clean + Private_Dirty from "
                "/proc/PID/smaps_rollup; sample = one process."
            ),
            "samples_ms": samples,
            "unit": "kB",
            "setup_ms": 0.0,
            "version": "CPython " + version,
        }
    elif scenario in ("trivial", "startup"):

        def once() -> float:
            return wall_ms(py, "1 + 1")

        method = f"`1 + 1`, {fresh}: host wall time from spawn to exit."
    elif scenario == "nested_call":
        calls = int(p["calls"])
        code = _CALL_CHILD.replace("CALLS", str(calls))

        def once() -> float:
            return serve_calls(py, code)

        method = (
            f"{fresh}; the script calls a host function noop() {calls} times, each a JSON "
            "request line on stdout answered by a JSON line on stdin, timed inside the script; "
            "sample = time per call."
        )
    elif scenario == "gather":
        calls = int(p["calls"])
        code = _GATHER_CHILD.replace("CALLS", str(calls))

        def once() -> float:
            return serve_calls(py, code, [1, calls])

        method = (
            f"{fresh}; the script announces {calls} host calls at once (JSON lines on stdout, "
            f"one write) and reads the {calls} replies the host sends back as one batch, timed "
            "inside the script."
        )
    elif scenario == "cpu":
        n = int(p["n"])
        body = cpu_script(n)
        code = _TIMED_CHILD.replace("BODY", body)

        def once() -> float:
            return child_result(run_python(py, code))

        method = (
            f"module-level loop `s += i * i` for i in range({n}), {fresh}; timed inside the "
            "script (excludes interpreter start-up)."
        )
    elif scenario == "script_size":
        lines = int(p["lines"])
        code = size_script(lines)

        def once() -> float:
            return wall_ms(py, code)

        how = "-c" if len(code) <= _ARG_MAX else "- (stdin: too long for one argv string)"
        method = (
            f"a script of {lines} lines `v = v + 1`, {fresh} (passed as `{how}`): host wall "
            "time from spawn to exit."
        )
    elif scenario == "output":
        chars = int(p["chars"])
        code = output_script(chars)

        def once() -> float:
            ms, proc = timed(lambda: run_python(py, code))
            if proc.returncode != 0 or len(proc.stdout) != chars + 1:
                raise Failure(f"exit {proc.returncode}, {len(proc.stdout)} bytes of output")
            return ms

        method = (
            f"`print('x' * {chars})`, {fresh}, stdout read through a pipe: host wall time "
            "from spawn to exit."
        )
    else:
        raise Failure(f"unknown scenario {scenario}")
    return {"method": method, "samples_ms": sampler.run(once), "setup_ms": 0.0, "version": "CPython " + version}


# ---------------------------------------------------------------------------------------------
# hermes and bash


def measure_hermes(scenario: str, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    home = peers_dir() / "hermes-home"
    home.mkdir(parents=True, exist_ok=True)
    # Must be set before the first import: hermes reads them at import time. Local backend,
    # non-interactive (so the approval guard returns early and no tirith scan runs, as in
    # the project's notes), private HERMES_HOME.
    os.environ["HERMES_HOME"] = str(home)
    os.environ["TERMINAL_ENV"] = "local"
    for var in ("HERMES_INTERACTIVE", "HERMES_GATEWAY_SESSION", "HERMES_YOLO_MODE"):
        os.environ.pop(var, None)
    t = time.perf_counter()
    try:
        from tools.terminal_tool import terminal_tool
    except ImportError as err:
        raise not_installed("hermes", err) from err
    command = str(p["command"])

    def once() -> float:
        ms, out = timed(lambda: terminal_tool(command=command))
        result = json.loads(out)
        if result.get("exit_code") != 0:
            raise Failure(f"hermes terminal_tool({command!r}) returned {out[:500]}")
        return ms

    # The first call builds the LocalEnvironment (login shell + snapshot): part of set-up.
    once()
    setup_ms = (time.perf_counter() - t) * 1000.0
    from importlib.metadata import version

    return {
        "method": (
            f"Hermes Agent {version('hermes-agent')} terminal_tool(command={command!r}), local "
            "backend, non-interactive (no approval prompt, no tirith), environment already "
            "initialised: host wall time per call."
        ),
        "samples_ms": sampler.run(once),
        "setup_ms": setup_ms,
        "version": "hermes-agent " + version("hermes-agent"),
    }


def measure_bash(scenario: str, p: dict[str, Any], sampler: Sampler) -> dict[str, Any]:
    bash = shutil.which("bash")
    if bash is None:
        raise Failure("bash not installed", True)
    command = str(p["command"])

    def once() -> float:
        ms, proc = timed(
            lambda: subprocess.run([bash, "-c", command], capture_output=True, check=False)
        )
        if proc.returncode != 0:
            raise Failure(f"bash -c {command!r} exited {proc.returncode}")
        return ms

    version = subprocess.run(
        [bash, "-c", "echo ${BASH_VERSION%%(*}"], capture_output=True, check=False
    ).stdout.decode().strip()
    return {
        "method": (
            f"bare `{bash} -c {command}` spawned with subprocess.run, stdout and stderr "
            "captured through pipes: host wall time from spawn to exit."
        ),
        "samples_ms": sampler.run(once),
        "setup_ms": 0.0,
        "version": "bash " + version,
    }


MEASURE = {
    "monty": measure_monty,
    "cpython": measure_cpython,
    "hermes": measure_hermes,
    "bash": measure_bash,
}


# ---------------------------------------------------------------------------------------------


def number(value: str) -> Any:
    """`--param` values: ints and floats as numbers (so the JSON `params` are typed), else text."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def parse_args(argv: list[str]) -> tuple[str, str, int, int, float | None, dict[str, Any]]:
    usage = (
        "usage: peer_driver.py PEER SCENARIO [--samples N] [--warmup N] [--budget S] "
        "[--param K=V ...]\n"
        + "".join(f"  {peer}: {', '.join(sc)}\n" for peer, sc in SCENARIOS.items())
    )
    pos: list[str] = []
    samples, warmup, budget = 30, 3, None
    params: dict[str, Any] = {}
    it = iter(argv)
    try:
        for arg in it:
            if arg in ("-h", "--help"):
                sys.stderr.write(usage)
                sys.exit(0)
            elif arg == "--samples":
                samples = int(next(it))
            elif arg == "--warmup":
                warmup = int(next(it))
            elif arg == "--budget":
                budget = float(next(it))
            elif arg == "--param":
                key, sep, value = next(it).partition("=")
                if not sep:
                    raise ValueError(f"--param wants K=V, got {key!r}")
                params[key] = number(value)
            elif arg.startswith("-"):
                raise ValueError(f"unknown option {arg}")
            else:
                pos.append(arg)
    except (StopIteration, ValueError) as err:
        sys.stderr.write(f"peer_driver: {err or 'option needs a value'}\n{usage}")
        sys.exit(2)
    if len(pos) != 2 or pos[0] not in SCENARIOS or pos[1] not in SCENARIOS[pos[0]]:
        sys.stderr.write(usage)
        emit({"peer": pos[0] if pos else None, "scenario": pos[1] if len(pos) > 1 else None,
              "error": "unknown peer or scenario"})
        sys.exit(2)
    if samples < 1 or warmup < 0:
        sys.stderr.write("peer_driver: --samples must be >= 1 and --warmup >= 0\n")
        sys.exit(2)
    return pos[0], pos[1], samples, warmup, budget, {**DEFAULTS.get(pos[1], {}), **params}


def main(argv: list[str]) -> int:
    peer, scenario, samples, warmup, budget, params = parse_args(argv)
    started = time.perf_counter()
    try:
        check_installed(peer)
        result = MEASURE[peer](scenario, params, Sampler(samples, warmup, budget))
    except Failure as err:
        out: dict[str, Any] = {"peer": peer, "scenario": scenario, "error": str(err)}
        if err.not_installed:
            out["not_installed"] = True
        emit(out)
        return 1
    except Exception as err:  # noqa: BLE001 - a peer's own exception becomes the error
        emit({"peer": peer, "scenario": scenario, "error": f"{type(err).__name__}: {err}"})
        return 1
    if peer == "monty":
        result.setdefault("version", monty_version())
    emit(
        {
            "peer": peer,
            "scenario": scenario,
            "method": result["method"],
            "samples_ms": result["samples_ms"],
            "unit": result.get("unit", "ms"),
            "params": params,
            "setup_ms": result["setup_ms"],
            "version": result.get("version", ""),
            "wall_s": time.perf_counter() - started,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
