"""Fixtures for the framework integrations' tests: the real `paddock` binary (`$PADDOCK_BIN`,
else the one installed with the package), the package from `python/` when none is installed, and a private state directory and an empty current directory for the whole run."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

# The installed package when there is one (CI: the wheel, with its own binary), else the source.
try:
    import paddock as _installed  # noqa: F401
except ImportError:
    _PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"
    sys.path.insert(0, str(_PYTHON_DIR))

# Before any engine starts: engines read PADDOCK_HOME when they start, and the built-in policy's
# workspace is the current directory, which these tests keep empty and never use.
_STATE = tempfile.mkdtemp(prefix="paddock-integrations-")
_HOME = os.path.join(_STATE, "home")
_CWD = os.path.join(_STATE, "cwd")
os.makedirs(_HOME)
os.makedirs(_CWD)
os.environ["PADDOCK_HOME"] = _HOME
os.environ.pop("PADDOCK_POLICY", None)


@pytest.fixture(scope="session", autouse=True)
def paddock_state() -> Iterator[Path]:
    """The run's state directory ($PADDOCK_HOME); the current directory is an empty one."""
    before = os.getcwd()
    os.chdir(_CWD)
    try:
        yield Path(_HOME)
    finally:
        os.chdir(before)
        shutil.rmtree(_STATE, ignore_errors=True)


@pytest.fixture(scope="session")
def empty_cwd() -> Path:
    return Path(_CWD)


@pytest.fixture
def anyio_backend() -> str:
    # paddock.Engine is asyncio-based.
    return "asyncio"


@pytest.fixture(scope="session")
def engine(paddock_state: Path) -> Iterator["object"]:
    """One engine (`paddock embed`) shared by the tests; each adapter makes its own session."""
    import paddock

    eng = paddock.Engine()
    try:
        yield eng
    finally:
        eng.close()
