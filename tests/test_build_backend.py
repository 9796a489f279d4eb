"""The build backend (build_backend/sdax_hamilton_build.py): without cargo, a wheel build
stops at once with what to do, instead of maturin downloading a Rust toolchain unasked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HOOK = """
import sys
sys.path.insert(0, {backend!r})
import sdax_hamilton_build as backend
print(backend.{hook}())
"""


def run_hook(hook: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # a PATH with python's directory only: no cargo on it
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    environment = {k: v for k, v in os.environ.items() if k != "MATURIN_NO_INSTALL_RUST"}
    environment.update(PATH=str(bare), **env)
    code = HOOK.format(backend=str(ROOT / "build_backend"), hook=hook)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "hook", ["get_requires_for_build_wheel", "get_requires_for_build_editable"]
)
def test_without_cargo_a_wheel_build_stops_and_says_what_to_do(hook: str, tmp_path: Path) -> None:
    done = run_hook(hook, tmp_path)
    assert done.returncode == 1
    assert "`cargo` is not on PATH" in done.stderr
    assert "https://rustup.rs" in done.stderr and "SDAX_HAMILTON_FETCH_RUST=1" in done.stderr


def test_when_asked_the_backend_lets_maturin_fetch_rust(tmp_path: Path) -> None:
    done = run_hook("get_requires_for_build_wheel", tmp_path, SDAX_HAMILTON_FETCH_RUST="1")
    assert done.returncode == 0, done.stderr


def test_the_sdist_needs_no_rust(tmp_path: Path) -> None:
    done = run_hook("get_requires_for_build_sdist", tmp_path)
    assert done.returncode == 0, done.stderr
