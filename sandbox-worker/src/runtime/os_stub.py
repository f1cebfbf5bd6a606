"""The sandbox's ``os``: path helpers only. Anything that would reach the host raises
PermissionError, so a script learns at once that files, processes and the environment do not
exist for it (and standard modules that merely import ``os`` keep working)."""

import abc
import sys
import posixpath as path

name = "posix"
sep = path.sep
curdir = path.curdir
pardir = path.pardir
extsep = path.extsep
altsep = path.altsep
pathsep = path.pathsep
defpath = path.defpath
linesep = "\n"
devnull = path.devnull
supports_dir_fd = set()
supports_effective_ids = set()
supports_fd = set()
supports_follow_symlinks = set()
SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2


def _denied(what):
    return PermissionError(
        f"os.{what} is not available: scripts in the Paddock sandbox have no file system, "
        "processes or environment; call a tool instead")


class _Environ(dict):
    """An environment that refuses to be read."""

    def __getitem__(self, key):
        raise _denied("environ")

    def get(self, key, default=None):
        raise _denied("environ")

    def __iter__(self):
        raise _denied("environ")

    def __len__(self):
        return 0

    def __contains__(self, key):
        return False


environ = _Environ()


def getenv(key, default=None):
    raise _denied("getenv")


def urandom(n):
    return _host_urandom(n)


def fspath(p):
    if isinstance(p, (str, bytes)):
        return p
    fspath_method = getattr(type(p), "__fspath__", None)
    if fspath_method is None:
        raise TypeError("expected str, bytes or os.PathLike object, not " + type(p).__name__)
    return fspath_method(p)


def fsencode(filename):
    filename = fspath(filename)
    return filename.encode("utf-8", "surrogateescape") if isinstance(filename, str) else filename


def fsdecode(filename):
    filename = fspath(filename)
    return filename.decode("utf-8", "surrogateescape") if isinstance(filename, bytes) else filename


class PathLike(abc.ABC):
    """Abstract base class for objects with a file system path (pathlib registers PurePath)."""

    @abc.abstractmethod
    def __fspath__(self):
        raise NotImplementedError

    @classmethod
    def __subclasshook__(cls, subclass):
        if cls is PathLike:
            return hasattr(subclass, "__fspath__")
        return NotImplemented

    __class_getitem__ = classmethod(type(list[int]))


def register_at_fork(**callbacks):
    """Scripts cannot fork; accepted so that `random` and friends import."""


def cpu_count():
    return 1


def getpid():
    return 1


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    if attr.isupper():
        return 0

    def denied(*args, **kwargs):
        raise _denied(attr)

    denied.__name__ = attr
    return denied


from _host import urandom as _host_urandom  # noqa: E402

sys.modules["os.path"] = path
