"""A Slurm job waiting in the queue is reported to the MCP client as progress while the call
lasts, and bounded: the official Python client calls `terminal` on a slurm backend whose job is
held (`--hold`, so it never starts) and sees progress messages naming the wait, then the error
saying the job was cancelled. Runs against the single-node cluster of scripts/test-services.sh;
skipped (saying so) when PADDOCK_SKIP_BACKENDS names slurm."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from conftest import COMBOS

pytestmark = pytest.mark.anyio

SKIPPED = "slurm" in os.environ.get("PADDOCK_SKIP_BACKENDS", "").split(",")


@pytest.mark.skipif(SKIPPED, reason="PADDOCK_SKIP_BACKENDS names slurm")
@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_queued_job_is_reported_as_progress_and_cancelled_at_the_timeout(
    paddock_factory, transport: str, mode: str
) -> None:
    name = f"held{uuid.uuid4().hex[:10]}"
    # The agent socket under PADDOCK_HOME must fit in 107 bytes: a short home, not pytest's.
    home = Path(tempfile.mkdtemp(prefix="pdk-"))
    p = paddock_factory(
        transport,
        mode,
        terminal_backend=name,
        home=home,
        policy_extra=f"""
[backends.{name}]
kind = "slurm"
queue_timeout_seconds = 4
extra_args = ["--hold"]
""",
    )
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with p.client() as c:
        r = await c.call_tool("terminal", {"command": "echo never"}, progress_callback=on_progress)
    text = " ".join(getattr(block, "text", "") for block in r.content)
    assert r.is_error or '"error"' in text, r
    assert "did not start within queue_timeout_seconds = 4" in text and "cancelled" in text, text
    waits = [m for m in seen if "is waiting in the queue (JobHeldUser)" in m]
    assert waits, f"no queue progress arrived: {seen}"
    # Nothing of the held job is left in the queue.
    queued = subprocess.run(
        ["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert f"paddock-{name}-" not in queued, queued
    shutil.rmtree(home, ignore_errors=True)
