"""What the integration tests share about backends: the policies their engines start with, and
whether the docker runs happen (CI requires them: with the test services up,
scripts/test-integrations.sh sets PADDOCK_INTEGRATIONS_DOCKER=required, and a missing docker then
fails those runs rather than skipping them)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def policy_with_docker(name: str, extra: str = "") -> str:
    """The local sandbox (`local`) and a docker backend `name` on the test services' image, with
    `extra` lines in its section."""
    return f"""
[backends.local]
kind = "local"
sandbox = "workspace-write"
workspace = "."

[backends.{name}]
kind = "docker"
image = "paddock-test"
network = "none"
workdir = "/workspace"
{extra}
"""


#: Two local backends, so a test can tell which one a session is on.
TWO_BACKENDS_POLICY = """
[backends.local]
kind = "local"
sandbox = "workspace-write"
workspace = "."

[backends.other]
kind = "local"
sandbox = "read-only"
workspace = "."
"""


def docker_ready() -> bool:
    """dockerd answers and has the test services' image."""
    if shutil.which("docker") is None:
        return False
    try:
        found = subprocess.run(["docker", "image", "inspect", "paddock-test"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return found.returncode == 0


DOCKER_REQUIRED = os.environ.get("PADDOCK_INTEGRATIONS_DOCKER") == "required"

#: Marks what runs on docker: skipped only where docker is missing and not required.
needs_docker = pytest.mark.skipif(
    not DOCKER_REQUIRED and not docker_ready(), reason="docker or the paddock-test image is not available"
)
