"""`paddock bench --scenario session_api`'s Python half: `session.run("true")` through the
package's Session against a bare `subprocess.run(["bash", "-c", "true"])`, alternated in one
loop. Prints one JSON object: {"session_run": [ms...], "subprocess_run": [ms...]}.
Arguments: ROUNDS. The package is imported from PYTHONPATH; the engine is PADDOCK_BIN."""

import json
import subprocess
import sys
import time

import paddock


def main() -> None:
    rounds = int(sys.argv[1])
    session_ms, bare_ms = [], []
    with paddock.Engine() as engine:
        with engine.session() as s:
            for _ in range(20):
                s.run("true")
                subprocess.run(["bash", "-c", "true"], check=True)
            for _ in range(rounds):
                t = time.perf_counter()
                r = s.run("true")
                session_ms.append((time.perf_counter() - t) * 1000)
                if r.exit_code != 0:
                    raise SystemExit(f"session.run('true') answered {r}")
                t = time.perf_counter()
                subprocess.run(["bash", "-c", "true"], check=True)
                bare_ms.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"session_run": session_ms, "subprocess_run": bare_ms}))


if __name__ == "__main__":
    main()
