# The main job on the built-in default policy: a script that calls tools concurrently,
# filters what came back and returns only what matters.
#   cargo run --release --ignore-rust-version --locked --bin paddock -- run examples/quickstart.py
import asyncio

now = await tools.current_datetime(format="%Y-%m-%d %H:%M UTC")
print("started at", now["formatted"])

# Ten calls of 300 ms each, run together: the script takes about 0.3 s, not 3 s.
waits = await asyncio.gather(*[tools.wait(milliseconds=300) for _ in range(10)])
slowest = max(w["waited_ms"] for w in waits)

{"calls": len(waits), "slowest_ms": round(slowest), "started": now["formatted"]}
