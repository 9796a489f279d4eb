"""The package's PEP 517 build backend: maturin's, refusing to fetch a Rust toolchain unasked.

Building the wheel compiles the Rust extension, so it needs ``cargo``. When ``cargo`` is not
on ``PATH``, maturin's backend would download a whole Rust toolchain (several hundred
megabytes) into a cache, silently, as part of ``pip install .``. This wrapper stops the
wheel and metadata hooks at once with what to do instead (README, "Install"); building
the sdist needs no Rust and is passed through. ``SDAX_HAMILTON_FETCH_RUST=1`` lets maturin
download the toolchain as it would by itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

import maturin  # type: ignore[import-untyped, unused-ignore]
from maturin import (  # type: ignore[import-untyped, unused-ignore]
    build_sdist,
    get_requires_for_build_sdist,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

_NO_CARGO = """\
sdax-hamilton: building this package compiles its Rust extension, and `cargo` is not on PATH.
  * install a Rust toolchain (Rust 1.85 or newer: https://rustup.rs), then retry; or
  * install a published wheel of sdax-hamilton, which needs no Rust; or
  * set SDAX_HAMILTON_FETCH_RUST=1 to let maturin download a Rust toolchain (several
    hundred megabytes) into a cache for this build."""


def _check_rust() -> None:
    if shutil.which("cargo") is not None or os.environ.get("SDAX_HAMILTON_FETCH_RUST") == "1":
        return
    if os.environ.get("MATURIN_NO_INSTALL_RUST"):
        return  # the user chose maturin's own behaviour: let it report the missing cargo
    raise SystemExit(_NO_CARGO)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _check_rust()
    requires: list[str] = maturin.get_requires_for_build_wheel(config_settings)
    return requires


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _check_rust()
    requires: list[str] = maturin.get_requires_for_build_editable(config_settings)
    return requires


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _check_rust()
    name: str = maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    return name


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _check_rust()
    name: str = maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)
    return name


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _check_rust()
    name: str = maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    return name


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _check_rust()
    name: str = maturin.build_editable(wheel_directory, config_settings, metadata_directory)
    return name
