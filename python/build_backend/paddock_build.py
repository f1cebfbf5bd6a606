"""The build backend of the `paddock` package: maturin's, with the workspace's one cargo flag.

`pip install ./python` calls these hooks. They are maturin's own, except that every cargo call
gets `--ignore-rust-version`: RustPython's parser crates declare Rust 1.96 but build on 1.95,
and the workspace's Cargo.lock is pinned to versions that do (README, "Building"). The static
agent needs no step of its own: the backends crate's build script compiles it into the binary.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Mapping, Optional

import maturin

_CARGO_FLAGS = ["--ignore-rust-version"]


def _settings(config_settings: Optional[Mapping[str, Any]]) -> dict:
    """`config_settings` with the workspace's flags added to maturin's build arguments (from
    `--config-settings maturin.build-args=...`, else `MATURIN_PEP517_ARGS`, as maturin reads them)."""
    settings = dict(config_settings or {})
    given = settings.pop("maturin.build-args", settings.pop("build-args", None))
    if given is None:
        given = os.environ.get("MATURIN_PEP517_ARGS", "")
    args = shlex.split(given) if isinstance(given, str) else list(given)
    settings["maturin.build-args"] = args + [f for f in _CARGO_FLAGS if f not in args]
    return settings


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return maturin.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return maturin.build_editable(wheel_directory, _settings(config_settings), metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, _settings(config_settings))


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return maturin.prepare_metadata_for_build_editable(metadata_directory, _settings(config_settings))


build_sdist = maturin.build_sdist
get_requires_for_build_wheel = maturin.get_requires_for_build_wheel
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
get_requires_for_build_editable = maturin.get_requires_for_build_editable
