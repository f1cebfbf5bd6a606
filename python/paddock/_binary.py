"""Finding the `paddock` binary: the one this package was installed with, as ruff and uv do."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import List, Optional


class BinaryNotFound(FileNotFoundError):
    """No `paddock` binary was found; the message lists where it was looked for."""


def _scripts_dirs() -> List[Path]:
    dirs: List[Path] = []
    # The environment this package is installed in (pip puts the wheel's binary there).
    dirs.append(Path(sysconfig.get_path("scripts")))
    user_scheme = (
        "nt_user" if sys.platform == "win32" else ("osx_framework_user" if sys.platform == "darwin" and sys._framework else "posix_user")  # type: ignore[attr-defined]
    )
    try:
        dirs.append(Path(sysconfig.get_path("scripts", scheme=user_scheme)))
    except KeyError:  # pragma: no cover - platform without a user scheme
        pass
    # A package installed with --target or --prefix: <prefix>/lib/pythonX.Y/site-packages/paddock
    # -> <prefix>/bin.
    here = Path(__file__).resolve().parent
    for parent in here.parents:
        if parent.name == "lib" or parent.name == "Lib":
            dirs.append(parent.parent / "bin")
            break
    return dirs


def find_paddock_bin(explicit: Optional[str] = None) -> str:
    """The `paddock` binary: `explicit`, else `$PADDOCK_BIN`, else the one installed beside this
    package (the scripts directory of its environment), else the first on `PATH`."""
    looked: List[str] = []
    for candidate in (explicit, os.environ.get("PADDOCK_BIN")):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
            raise BinaryNotFound(
                f"paddock binary {candidate!r} (given {'explicitly' if candidate == explicit else 'by PADDOCK_BIN'}) "
                "is not an executable file"
            )
    for directory in _scripts_dirs():
        path = directory / "paddock"
        looked.append(str(path))
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    on_path = shutil.which("paddock")
    if on_path:
        return on_path
    looked.append("PATH")
    raise BinaryNotFound(
        "the paddock binary was not found (looked in: "
        + ", ".join(looked)
        + "); install the wheel (`pip install paddock`), put `paddock` on PATH, "
        "or set PADDOCK_BIN"
    )
