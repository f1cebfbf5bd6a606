"""The package's exceptions, and the one table that turns an engine `error_code` into them.

Every tool failure is a `ToolError` (its `code` is the engine's `error_code`), so code written
against the first version of the package keeps working; the subclasses add the built-in
exception a Python programmer already catches (`FileNotFoundError`, `PermissionError`,
`TimeoutError`, `LookupError`, ...), so `except FileNotFoundError` works on a sandbox's files too.
"""

from __future__ import annotations

import errno as _errno
import re
from typing import Optional, Pattern, Tuple, Type


class PaddockError(Exception):
    """Base class of this package's errors."""


class ToolError(PaddockError):
    """A tool call (or a request) the engine refused or that failed: `code` is the
    `error_code` (e.g. `tool:invalid_arguments`, `tool_approval:denied`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # The default pickles `args` (one string) into a two-argument __init__.
        return (self.__class__, (self.code, self.message))


class EngineClosed(PaddockError):
    """The engine process is gone (closed, or it exited); the message says why."""


class EngineStartError(PaddockError):
    """`paddock embed` refused to start (a bad policy, a bad host tool); the message is its."""


class _OSToolError(ToolError):
    """A ToolError that is also an `OSError`: `errno` is set, so code that checks it (as
    `shutil` and `pathlib` callers do) sees the number the operating system would give."""

    ERRNO: Optional[int] = None

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.errno = self.ERRNO


class CommandTimeout(_OSToolError, TimeoutError):
    """A command (`Session.run`, `CommandHandle.wait`) or a `run_code` execution passed its
    timeout. `stdout` and `stderr` hold what it wrote until then. A `run_code` timeout
    interrupts the execution only: the context and its names live on."""

    ERRNO = _errno.ETIMEDOUT

    def __init__(self, code: str, message: str, stdout: str = "", stderr: str = "") -> None:
        super().__init__(code, message)
        self.stdout = stdout
        self.stderr = stderr

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.__class__, (self.code, self.message, self.stdout, self.stderr))


class SessionNotFound(ToolError, LookupError):
    """The session is not live: never started, closed (by `Session.close()`, `paddock sessions
    close`, the idle sweep), or a method of a `Session` that was closed."""


class FileNotFound(_OSToolError, FileNotFoundError):
    """No such file or directory in the session's environment."""

    ERRNO = _errno.ENOENT


class NotADirectory(_OSToolError, NotADirectoryError):
    """A directory was needed (a component of the path, or `list`'s argument) and that path is
    something else."""

    ERRNO = _errno.ENOTDIR


class PermissionDenied(_OSToolError, PermissionError):
    """The sandbox or the policy refused the operation (not a question a human answered:
    that is `ApprovalDenied`)."""

    ERRNO = _errno.EACCES


class ApprovalDenied(PermissionDenied):
    """The operation needed a human's approval and it was denied (or nobody could approve)."""


class BackendUnavailable(ToolError):
    """The backend the call went to cannot be reached or started (docker down, ssh host
    unreachable, an agent that does not answer)."""


#: THE table from an engine `error_code` (and, where the engine has no code of its own for a
#: case yet, a pattern its message matches) to the exception raised. First match wins; a code
#: in no row is a plain `ToolError`. Sources of the codes: files/src/error.rs (`file:*`),
#: engine/src/vocabulary (`tool:*`, `tool_approval:denied`), the embedding protocol
#: (`sessions:not_found`), backends' `BackendError::Unavailable` (reported as `tool:failed`
#: "the KIND backend 'NAME' is not available: ..."), and this package's own `command:timeout`.
ERROR_TABLE: Tuple[Tuple[str, Optional[Pattern[str]], Type[ToolError]], ...] = (
    ("sessions:not_found", None, SessionNotFound),
    ("file:not_found", None, FileNotFound),
    ("file:not_directory", None, NotADirectory),
    ("file:permission_denied", None, PermissionDenied),
    ("tool:not_allowed", None, PermissionDenied),
    ("network:denied", None, PermissionDenied),
    ("tool_approval:denied", None, ApprovalDenied),
    ("backend:unavailable", None, BackendUnavailable),
    ("tool:failed", re.compile(r"\bbackend '[^']*' is not available\b"), BackendUnavailable),
    ("command:timeout", None, CommandTimeout),
)


def error_class(code: str, message: str = "") -> Type[ToolError]:
    """The exception class `ERROR_TABLE` gives `code` (and `message`)."""
    for row_code, pattern, cls in ERROR_TABLE:
        if row_code == code and (pattern is None or pattern.search(message)):
            return cls
    return ToolError


def error_from(code: str, message: str) -> ToolError:
    """The typed exception for an engine failure."""
    return error_class(code, message)(code, message)


#: What a shell command in the environment printed when it failed (the byte-exact transfers
#: and `make_dir` run one), as the `file:*` code the file tools would have given. Checked in
#: order, case-insensitively; the commands run with LC_ALL=C where this package starts them.
_SHELL_MESSAGES: Tuple[Tuple[Pattern[str], str], ...] = (
    (re.compile(r"not a directory|file exists", re.I), "file:not_directory"),
    (re.compile(r"no such file or directory", re.I), "file:not_found"),
    (re.compile(r"permission denied|read-only file system|operation not permitted", re.I), "file:permission_denied"),
    (re.compile(r"is a directory", re.I), "file:is_directory"),
)


def file_code_of_message(message: str, default: str) -> str:
    """The `file:*` code a failed shell command's message stands for, else `default`."""
    for pattern, code in _SHELL_MESSAGES:
        if pattern.search(message):
            return code
    return default
