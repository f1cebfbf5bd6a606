"""Paddock: sandboxed code execution for AI agents, from Python.

`Engine` runs `paddock embed` (the binary this package installs) and talks to it over JSON
lines; scripts run in Paddock's confined sandbox, never in this interpreter, and call your own
functions as tools (`Engine(tools=[...])`) beside Paddock's (terminal, process,
python_execute).
"""

from ._binary import BinaryNotFound, find_paddock_bin
from ._engine import (
    Engine,
    EngineClosed,
    EngineStartError,
    HostTool,
    PaddockError,
    ToolError,
    tool,
)

__all__ = [
    "BinaryNotFound",
    "Engine",
    "EngineClosed",
    "EngineStartError",
    "HostTool",
    "PaddockError",
    "ToolError",
    "find_paddock_bin",
    "tool",
]
