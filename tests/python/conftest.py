"""The Python package's tests run in a fresh virtual environment where only the wheel (and
pytest) is installed: scripts/test-python.sh makes it. They use the `paddock` binary that
`pip install` put in that environment, never the build tree's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator, List, Set

import pytest


def pytest_configure(config: pytest.Config) -> None:
    for variable in ("PADDOCK_BIN", "PADDOCK_AGENT_BIN"):
        if os.environ.get(variable):
            raise pytest.UsageError(
                f"{variable} is set: these tests check the binaries installed with the wheel; unset it"
            )


@pytest.fixture(autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test's engine keeps its state (sessions, logs, approvals) in a directory of its own
    and runs in an empty workspace (the built-in policy's workspace is the current directory)."""
    home = tmp_path_factory.mktemp("paddock-home")
    work = tmp_path_factory.mktemp("workspace")
    monkeypatch.setenv("PADDOCK_HOME", str(home))
    monkeypatch.delenv("PADDOCK_POLICY", raising=False)
    monkeypatch.chdir(work)
    yield work


def descendants(pid: int) -> Set[int]:
    """Every live process below `pid`, from /proc (the evidence that nothing outlives an engine)."""
    children: dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: Set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def venv_bin() -> Path:
    return Path(sys.prefix) / "bin"
