"""`paddock bench --scenario e2b`'s Python half: the unmodified e2b SDK against a started
`paddock serve --e2b` (E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set by the bench).

- `commands.run("true")` in a sandbox of template "base", alternated in one loop with
  `session.run("true")` of Paddock's own Python package (imported from PYTHONPATH, its engine
  PADDOCK_BIN);
- for each further template named in argv (docker backends with a warm pool): `Sandbox.create`
  to the first command's answer, the sandbox killed after each.

Arguments: ROUNDS CREATES [TEMPLATE...]. Prints one JSON object:
{"e2b_run": [ms...], "session_run": [ms...], "create": {"TEMPLATE": [ms...]}}."""

import json
import sys
import time

import paddock
from e2b import Sandbox


def main() -> None:
    rounds, creates = int(sys.argv[1]), int(sys.argv[2])
    templates = sys.argv[3:]
    e2b_ms, session_ms = [], []
    sandbox = Sandbox.create(template="base")
    try:
        with paddock.Engine() as engine:
            with engine.session() as session:
                for _ in range(20):
                    sandbox.commands.run("true")
                    session.run("true")
                for _ in range(rounds):
                    t = time.perf_counter()
                    sandbox.commands.run("true")
                    e2b_ms.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    r = session.run("true")
                    session_ms.append((time.perf_counter() - t) * 1000)
                    if r.exit_code != 0:
                        raise SystemExit(f"session.run('true') answered {r}")
    finally:
        sandbox.kill()
    create = {}
    for template in templates:
        # The first fills the pool (and pulls nothing: the image is local); not timed.
        Sandbox.create(template=template).kill()
        samples = []
        for _ in range(creates):
            t = time.perf_counter()
            sbx = Sandbox.create(template=template)
            sbx.commands.run("true")
            samples.append((time.perf_counter() - t) * 1000)
            sbx.kill()
            # The pool refills in the background: a create is timed on a full pool.
            time.sleep(1.0)
        create[template] = samples
    print(json.dumps({"e2b_run": e2b_ms, "session_run": session_ms, "create": create}))


if __name__ == "__main__":
    main()
