"""Paddock: sandboxed code execution for AI agents, from Python.

`Engine` runs `paddock embed` (the binary this package installs) and talks to it over JSON
lines; scripts run in Paddock's confined sandbox, never in this interpreter, and call your own
functions as tools (`Engine(tools=[...])`) beside Paddock's (terminal, process,
python_execute). `engine.session()` gives a `Session` (DESIGN.md 8.1): commands with live
output, background processes, Python contexts, files, snapshots and forks.
"""

from ._binary import BinaryNotFound, find_paddock_bin
from ._engine import Engine, HostTool, tool
from ._errors import (
    ApprovalDenied,
    BackendUnavailable,
    CommandTimeout,
    EngineClosed,
    EngineStartError,
    FileNotFound,
    NotADirectory,
    PaddockError,
    PermissionDenied,
    SessionNotFound,
    ToolError,
)
from ._session import (
    AsyncCommandHandle,
    AsyncSession,
    CommandHandle,
    CommandResult,
    Execution,
    ExecutionError,
    FileEntry,
    Session,
    WatchEvent,
)

__all__ = [
    "ApprovalDenied",
    "AsyncCommandHandle",
    "AsyncSession",
    "BackendUnavailable",
    "BinaryNotFound",
    "CommandHandle",
    "CommandResult",
    "CommandTimeout",
    "Engine",
    "EngineClosed",
    "EngineStartError",
    "Execution",
    "ExecutionError",
    "FileEntry",
    "FileNotFound",
    "HostTool",
    "NotADirectory",
    "PaddockError",
    "PermissionDenied",
    "Session",
    "SessionNotFound",
    "ToolError",
    "WatchEvent",
    "find_paddock_bin",
    "tool",
]
