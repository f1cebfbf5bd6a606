"""`paddock serve --e2b ADDR --e2b-tls DOMAIN`: the SDK reaching Paddock by domain, as it does
once the URL overrides are gone (E2B_DOMAIN=DOMAIN:PORT, SSL_CERT_FILE=`paddock ca bundle`),
with no E2B_API_URL or E2B_SANDBOX_URL. The SDK runs in a child process with exactly that
environment: the overrides the other tests set would win otherwise."""

import importlib.util
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import KEY, PADDOCK, _free_port

DOMAIN = "sbx.localhost"

# What the child does: create, a command, a file both ways, and the signed download URL
# fetched by name (TLS to PORT-ID.DOMAIN, routed by that name and the signature alone).
CLIENT = r"""
import json, socket, ssl, sys, urllib.parse
from e2b import Sandbox
sbx = Sandbox.create()
try:
    out = {"run": sbx.commands.run("echo over tls").stdout}
    sbx.files.write("t.bin", b"\x00\x01tls\xff")
    out["read"] = list(sbx.files.read("t.bin", format="bytes"))
    url = urllib.parse.urlsplit(sbx.download_url("t.bin"))
    out["host"] = url.hostname
    ctx = ssl.create_default_context(cafile=sys.argv[1])
    with socket.create_connection(("127.0.0.1", url.port)) as raw:
        with ctx.wrap_socket(raw, server_hostname=url.hostname) as tls:
            tls.sendall(f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                        f"Connection: close\r\n\r\n".encode())
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    out["download"] = list(answer.split(b"\r\n\r\n", 1)[1])
finally:
    sbx.kill()
print(json.dumps(out))
"""


def _sdk_reaches_localhost_names():
    """The SDKs on pyqwest resolve *.localhost to loopback themselves; the httpx ones ask the
    system, which on Debian does not."""
    if importlib.util.find_spec("pyqwest") is not None:
        return True
    try:
        socket.getaddrinfo("api." + DOMAIN, 443)
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def tls_server():
    home = tempfile.mkdtemp(prefix="paddock-e2b-tls-")
    policy = pathlib.Path(home) / "policy.toml"
    policy.write_text(f'[e2b]\napi_keys = ["{KEY}"]\n')
    port = _free_port()
    env = dict(os.environ, PADDOCK_HOME=home, RUST_LOG="warn")
    bundle = pathlib.Path(home) / "bundle.pem"
    subprocess.run([PADDOCK, "ca", "bundle", "--out", str(bundle)], env=env, check=True)
    proc = subprocess.Popen(
        [PADDOCK, "serve", "--e2b", f"127.0.0.1:{port}", "--e2b-tls", DOMAIN,
         "--policy", str(policy)],
        env=env,
        stderr=open(pathlib.Path(home) / "server.log", "wb"),
    )
    ctx = ssl.create_default_context(cafile=str(bundle))
    deadline = time.time() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                with ctx.wrap_socket(raw, server_hostname="api." + DOMAIN):
                    break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(open(pathlib.Path(home) / "server.log").read())
            time.sleep(0.1)
    yield port, bundle
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(home, ignore_errors=True)


def _client_env(port, bundle):
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_DOMAIN=f"{DOMAIN}:{port}", E2B_API_KEY=KEY, SSL_CERT_FILE=str(bundle))
    return env


def test_the_sdk_by_domain_over_tls(tls_server):
    if not _sdk_reaches_localhost_names():
        from importlib.metadata import version

        pytest.skip(f"e2b {version('e2b')} resolves names through the system (httpx), and "
                    f"this system does not map *.{DOMAIN} to loopback")
    port, bundle = tls_server
    child = subprocess.run([sys.executable, "-c", CLIENT, str(bundle)],
                           env=_client_env(port, bundle), capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["run"] == "over tls\n"
    assert bytes(out["read"]) == b"\x00\x01tls\xff"
    assert out["host"].endswith("." + DOMAIN) and out["host"].startswith("49983-")
    assert bytes(out["download"]) == b"\x00\x01tls\xff"


def test_a_client_without_the_bundle_is_refused_by_its_own_tls(tls_server):
    if not _sdk_reaches_localhost_names():
        pytest.skip("see test_the_sdk_by_domain_over_tls")
    port, bundle = tls_server
    env = _client_env(port, bundle)
    del env["SSL_CERT_FILE"]
    child = subprocess.run([sys.executable, "-c", "from e2b import Sandbox; Sandbox.create()"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert child.returncode != 0
    assert "certificate" in child.stderr.lower() or "issuer" in child.stderr.lower(), child.stderr[-2000:]
