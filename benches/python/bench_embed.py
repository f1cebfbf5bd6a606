"""Host-tool calls from Python, side by side: the `paddock` package (`paddock embed`) and
pydantic-monty's Python API, in one run. Run by hand (not in CI):

    PADDOCK_BIN=target/release/paddock /opt/paddock-peers/venv/bin/python \
        benches/python/bench_embed.py [--rounds 7] [--json]

The `paddock` package is imported from python/ (or the installed wheel); Monty from the peers'
venv (scripts/bench-peers.sh). Per-call figures are timed inside the script, as
benches/peers/peer_driver.py does for Monty: a loop of N awaited calls, minus nothing (the loop
itself costs well under 1 us per turn in both). Each figure is the median of `--rounds` runs,
with the minimum beside it.

Scenarios (the issue's targets in brackets):
- sync_call: per call of a sync host function that returns None [<= 40 us, Monty's];
- async_call: per call of an async host function [<= 201 us, Monty's];
- gather50: asyncio.gather of 50 async host calls, whole gather [<= 2 ms];
- trivial: a trivial script (`1 + 1`) through the Python API, caller's wall time, against the
  engine's own warm pool (`paddock bench --scenario trivial`) [within 1.2x].
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import paddock  # noqa: E402

CALLS = 200


def noop() -> None:
    return None


async def anoop() -> None:
    return None


def loop_script(call: str, calls: int) -> str:
    return (
        f"import time\n{call}\nt = time.perf_counter()\n"
        f"for _ in range({calls}):\n    {call}\n"
        f"(time.perf_counter() - t) / {calls} * 1e6"
    )


GATHER = (
    "import asyncio, time\nawait asyncio.gather(tools.anoop())\nt = time.perf_counter()\n"
    "await asyncio.gather(*[tools.anoop() for _ in range(50)])\n"
    "(time.perf_counter() - t) * 1e3"
)


def summary(samples: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "n": len(samples)}


def bench_paddock(rounds: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}

    async def main() -> None:
        async with paddock.Engine(tools=[noop, anoop]) as engine:
            limits = {"max_tool_calls": 10 * CALLS}
            await engine.run_tools_script("1")

            async def value(code: str) -> float:
                result = await engine.run_tools_script(code, **limits)
                if not result.get("ok"):
                    raise RuntimeError(f"paddock script failed: {result}")
                return float(result["result"])

            runs: Dict[str, List[float]] = {k: [] for k in ("sync_call", "async_call", "gather50", "trivial", "builtin_call")}
            for _ in range(rounds):
                runs["sync_call"].append(await value(loop_script("await tools.noop()", CALLS)))
                runs["async_call"].append(await value(loop_script("await tools.anoop()", CALLS)))
                runs["builtin_call"].append(await value(loop_script("await tools.wait(milliseconds=0)", CALLS)))
                runs["gather50"].append(await value(GATHER))
                for _ in range(20):
                    # As `paddock bench --scenario trivial` does: a 3 ms pause, so that each script
                    # finds an idle child (the replacement is forked when a script ends).
                    await asyncio.sleep(0.003)
                    started = time.perf_counter()
                    result = await engine.run_tools_script("1 + 1")
                    runs["trivial"].append((time.perf_counter() - started) * 1e3)
                    assert result["result"] == 2, result
            for key, samples in runs.items():
                out[key] = summary(samples)

    asyncio.run(main())
    out["sync_call"]["unit"] = out["async_call"]["unit"] = out["builtin_call"]["unit"] = "us"
    out["gather50"]["unit"] = out["trivial"]["unit"] = "ms"
    return out


def bench_protocol_hop(binary: str, rounds: int) -> Dict[str, Any]:
    """The cost of the process boundary alone: a minimal JSON-lines client that answers each
    host call in its own read loop (no threads), per call of a host tool against the built-in
    `wait` (same dispatch, no hop), timed inside the script."""
    proc = subprocess.Popen([binary, "embed"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: Dict[str, Any]) -> None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def run(code: str) -> float:
        send({"type": "run_tools_script", "id": 1, "code": code, "limits": {"max_tool_calls": 10 * CALLS}})
        while True:
            message = json.loads(proc.stdout.readline())
            if message["type"] == "host_call":
                send({"type": "host_result", "id": message["id"], "ok": True, "value": None})
            elif message["type"] == "result":
                return float(message["value"]["result"])

    send({"type": "hello", "protocol": 1, "tools": [{"name": "noop", "input_schema": {"type": "object"}}]})
    json.loads(proc.stdout.readline())
    run("1")
    host, builtin = [], []
    for _ in range(rounds):
        host.append(run(loop_script("await tools.noop()", CALLS)))
        builtin.append(run(loop_script("await tools.wait(milliseconds=0)", CALLS)))
    send({"type": "close"})
    proc.wait(timeout=30)
    hop = [h - b for h, b in zip(host, builtin)]
    return {
        "host_call": {**summary(host), "unit": "us"},
        "builtin_call": {**summary(builtin), "unit": "us"},
        "hop": {**summary(hop), "unit": "us"},
    }


def bench_engine_pool(binary: str) -> Dict[str, Any]:
    """The engine's own warm pool: `paddock bench --quick --scenario trivial`."""
    with tempfile.TemporaryDirectory(prefix="paddock-bench-embed-") as out:
        proc = subprocess.run(
            [binary, "bench", "--quick", "--scenario", "trivial", "--json", "--out", out],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-500:]}
    data = json.loads(proc.stdout)
    for scenario in data.get("scenarios", []):
        for entry in scenario.get("entries", []):
            if entry.get("contender") == "paddock" and entry.get("samples"):
                samples = entry["samples"]
                return {"trivial": {**summary(samples), "unit": "ms"}}
    return {"error": "no paddock trivial samples in `paddock bench --json`"}


def bench_monty(rounds: int) -> Dict[str, Any]:
    try:
        import pydantic_monty as m
    except ImportError as err:
        return {"error": f"pydantic_monty is not installed here ({err}); run with the peers' venv"}
    out: Dict[str, Any] = {}
    limits = {"max_suspensions": 1_000_000}
    sync_code = loop_script("noop()", CALLS).replace("import time\nnoop()", "import time\nnoop()")
    with m.Monty(min_processes=2) as pool:
        with pool.checkout(limits=limits) as s:
            s.feed_run("1")
            out["sync_call"] = summary(
                [float(s.feed_run(sync_code, external_lookup={"noop": noop})) for _ in range(rounds)]
            )

    async def main() -> None:
        async with m.AsyncMonty(min_processes=2) as pool:
            async def feed(code: str) -> float:
                async with pool.checkout(limits=limits) as s:
                    return float(await s.feed_run(code, external_lookup={"noop": anoop}))

            await feed("1")
            out["async_call"] = summary([await feed(loop_script("await noop()", CALLS)) for _ in range(rounds)])
            out["gather50"] = summary(
                [await feed(GATHER.replace("tools.anoop", "noop")) for _ in range(rounds)]
            )
            samples = []
            for _ in range(rounds * 20):
                await asyncio.sleep(0.003)
                started = time.perf_counter()
                async with pool.checkout(limits=limits) as s:
                    await s.feed_run("1 + 1")
                samples.append((time.perf_counter() - started) * 1e3)
            out["trivial"] = summary(samples)

    asyncio.run(main())
    out["sync_call"]["unit"] = out["async_call"]["unit"] = "us"
    out["gather50"]["unit"] = out["trivial"]["unit"] = "ms"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-pool", action="store_true", help="skip `paddock bench --scenario trivial`")
    args = parser.parse_args()
    binary = paddock.find_paddock_bin()
    results = {
        "load_average": os.getloadavg(),
        "protocol": bench_protocol_hop(binary, args.rounds),
        "paddock": bench_paddock(args.rounds),
        "monty": bench_monty(args.rounds),
    }
    if not args.no_pool:
        results["paddock_pool"] = bench_engine_pool(binary)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"load average {results['load_average']}")
    print(f"{'scenario':<14}{'paddock median (min)':>26}{'monty median (min)':>26}")
    for key in ("sync_call", "async_call", "gather50", "trivial", "builtin_call"):
        p = results["paddock"].get(key)
        mo = results["monty"].get(key) if isinstance(results["monty"], dict) else None
        fmt = lambda r: f"{r['median']:.3g} ({r['min']:.3g}) {r.get('unit', '')}" if r else "-"  # noqa: E731
        print(f"{key:<14}{fmt(p):>26}{fmt(mo):>26}")
    hop = results["protocol"]
    print(
        f"process boundary alone (minimal client): host call {hop['host_call']['median']:.0f} us, "
        f"built-in wait {hop['builtin_call']['median']:.0f} us, hop {hop['hop']['median']:.0f} us "
        f"(min {hop['hop']['min']:.0f})"
    )
    pool = results.get("paddock_pool", {}).get("trivial")
    if pool:
        api = results["paddock"]["trivial"]["median"]
        print(
            f"engine's own pool, trivial (paddock bench): median {pool['median']:.3g} ms (min "
            f"{pool['min']:.3g}); Python API / pool = {api / pool['median']:.2f}x"
        )
    elif "paddock_pool" in results:
        print("engine pool:", results["paddock_pool"].get("error"))


if __name__ == "__main__":
    main()
