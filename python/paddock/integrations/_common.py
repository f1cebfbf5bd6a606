"""What the adapters share (DESIGN.md section 9): the check of their `engine=`/`policy=`
arguments, and the working directory every adapter session gets: its own, never the
caller's current directory. On a container backend whose image has a writable `/workspace`
(docker), `/workspace`; elsewhere `/tmp/paddock-workspace-<session id>`, which on the sandboxed
local backend lies in the session's private `/tmp`. The name depends on the session only, so an
adapter attached to the session later finds the same directory."""

from __future__ import annotations

import shlex
from typing import Any, Optional

from .._engine import Engine


def check_engine_args(engine: Optional[Engine], policy: Any) -> None:
    """`engine=` (an existing engine) or `policy=` (for one the adapter starts), never both."""
    if engine is not None and policy is not None:
        raise ValueError("give engine= (an existing paddock.Engine) or policy= (for one the adapter starts), not both")
    if engine is not None and not isinstance(engine, Engine):
        raise TypeError(f"engine must be a paddock.Engine, got {type(engine).__name__}")


def private_dir(session_id: str) -> str:
    """The directory in `/tmp` a session without a `/workspace` of its own works in."""
    return f"/tmp/paddock-workspace-{session_id}"


def make_script(session_id: str) -> str:
    """Shell that makes the session's working directory, `cd`s into it and prints it (`pwd -P`)."""
    return (
        f"wd={shlex.quote(private_dir(session_id))}; "
        # A container (docker) has a /workspace of its own; the local backend (marked by
        # PADDOCK_LOCAL_SESSION) shares the machine's, so it gets the one in its private /tmp.
        'if [ -z "${PADDOCK_LOCAL_SESSION:-}" ] && [ -d /workspace ] && [ -w /workspace ]; then wd=/workspace; fi; '
        'mkdir -p -- "$wd" && cd -- "$wd" && pwd -P'
    )


def remove_script(session_id: str) -> str:
    """Shell that removes the directory `make_script` makes in /tmp (never `/workspace`): where
    `/tmp` is not the session's own (unconfined local, ssh) it would outlive the session."""
    return f"cd / && rm -rf -- {shlex.quote(private_dir(session_id))}"


def made_dir(result: Any) -> Optional[str]:
    """The directory `make_script` printed, or None when it failed."""
    lines = str(result.stdout or "").strip().splitlines()
    if result.exit_code != 0 or not lines or not lines[-1].startswith("/"):
        return None
    return lines[-1]


def failure_text(session_id: str, result: Any) -> str:
    """Why `make_script` failed, for the adapter's error."""
    said = (str(result.stderr or "") or str(result.stdout or "")).strip()
    return f"the Paddock session {session_id!r} has no usable working directory (exit {result.exit_code}: {said})"


def in_dir_script(working_dir: str, line: str) -> str:
    """`line` started in `working_dir`, made again if a command removed it. A `cd` of the script's
    own rather than the terminal's `workdir`, which Paddock checks on the engine's side, where
    the sandbox's private /tmp is not."""
    quoted = shlex.quote(working_dir)
    return f"{{ cd -- {quoted} 2>/dev/null || {{ mkdir -p -- {quoted} && cd -- {quoted}; }}; }} || exit 1\n{line}"
