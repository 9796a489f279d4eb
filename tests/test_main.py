"""``python -m sdax_hamilton`` prints the versions a bug report needs, and nothing else;
the version numbers agree and order after the predecessor's 0.2.0 (CHANGELOG.md)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import platform
import subprocess
import sys
import textwrap

from packaging.version import Version

import sdax_hamilton
from sdax_hamilton import _core

NAMES = [
    "sdax-hamilton",
    "sdax_hamilton._core",
    "apache-hamilton",
    "python",
    "uvloop",
    "event loop",
]


def _run(args: list[str]) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    pairs = [line.split(": ", 1) for line in lines]
    assert [pair[0] for pair in pairs] == NAMES, result.stdout
    return dict((name, value) for name, value in pairs)


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def test_prints_exactly_the_bug_report_versions() -> None:
    values = _run(["-m", "sdax_hamilton"])
    assert values["sdax-hamilton"] == importlib.metadata.version("sdax-hamilton")
    assert values["sdax_hamilton._core"] == _core.__version__
    assert values["apache-hamilton"] == importlib.metadata.version("apache-hamilton")
    assert values["python"] == (
        f"{platform.python_version()} ({platform.python_implementation()}, "
        f"{platform.system()} {platform.machine()})"
    )
    assert values["uvloop"] == _installed("uvloop")
    policy = asyncio.DefaultEventLoopPolicy
    loop = policy().new_event_loop()
    try:
        expected = f"{type(loop).__module__}.{type(loop).__qualname__}"
    finally:
        loop.close()
    assert values["event loop"] == (
        f"{expected} (policy {policy.__module__}.{policy.__qualname__})"
    )


def test_names_the_loop_of_the_policy_in_force() -> None:
    # A program (or uvloop.install()) that replaced the policy gets that policy's loop named.
    code = textwrap.dedent(
        """
        import asyncio, runpy

        class ReportLoop(asyncio.SelectorEventLoop):
            pass

        class ReportPolicy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self):
                return ReportLoop()

        asyncio.set_event_loop_policy(ReportPolicy())
        runpy.run_module("sdax_hamilton", run_name="__main__")
        """
    )
    values = _run(["-c", code])
    assert values["event loop"] == "__main__.ReportLoop (policy __main__.ReportPolicy)"


def test_versions_agree_and_follow_the_predecessor() -> None:
    assert sdax_hamilton.__version__ == _core.__version__
    # The distribution name's previous owner, the pure-Python predecessor, ends at 0.2.0:
    # `pip install -U sdax-hamilton` must pick this package over it.
    assert Version(sdax_hamilton.__version__) > Version("0.2.0")
