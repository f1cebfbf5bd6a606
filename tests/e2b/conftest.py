"""The server every E2B test talks to: `paddock serve --e2b` on a free loopback port, with a
PADDOCK_HOME of its own, started once per run; `template` runs a test once per template ("base",
and "docker" when PADDOCK_TEST_POLICY names a policy with a `[backends.docker]`)."""

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PADDOCK = os.environ.get("PADDOCK_BIN", str(REPO / "target" / "release" / "paddock"))
KEY = "e2b_" + "0123456789abcdef" * 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _docker_policy():
    path = os.environ.get("PADDOCK_TEST_POLICY")
    if path and os.path.exists(path) and "[backends.docker]" in open(path).read():
        return path
    return None


@pytest.fixture(scope="session")
def server():
    home = tempfile.mkdtemp(prefix="paddock-e2b-")
    policy = pathlib.Path(home) / "policy.toml"
    base = open(_docker_policy()).read() if _docker_policy() else ""
    policy.write_text(base + '\n[e2b]\napi_keys = ["${PADDOCK_E2B_TEST_KEY}", "e2b_ff"]\n')
    port = _free_port()
    env = dict(os.environ, PADDOCK_HOME=home, PADDOCK_E2B_TEST_KEY=KEY, RUST_LOG="warn")
    workdir = pathlib.Path(home) / "cwd"
    workdir.mkdir()
    proc = subprocess.Popen(
        [PADDOCK, "serve", "--e2b", f"127.0.0.1:{port}", "--policy", str(policy)],
        env=env,
        cwd=workdir,
        stderr=open(pathlib.Path(home) / "server.log", "wb"),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/v2/sandboxes", timeout=1)
        except urllib.error.HTTPError:
            break  # 401: it is up
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(open(pathlib.Path(home) / "server.log").read())
            time.sleep(0.1)
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(home, ignore_errors=True)


TEMPLATES = ["base"] + (["docker"] if _docker_policy() else [])


@pytest.fixture(params=TEMPLATES)
def template(request):
    return request.param
