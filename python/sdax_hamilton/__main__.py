"""``python -m sdax_hamilton``: the versions a bug report needs, and nothing else.

One ``name: value`` line each: this package, its Rust core, Apache Hamilton, Python, uvloop
(or ``not installed``) and the event loop class ``asyncio.run()`` would create here. The
README's "Reporting a bug" section asks for this output; tests/test_main.py checks it.
"""

from __future__ import annotations

import asyncio
import platform
import sys
import warnings
from importlib import metadata


def _installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _event_loop() -> str:
    """The class of the loop the current event loop policy creates, and the policy's."""
    with warnings.catch_warnings():  # the policy API is deprecated from Python 3.14 on
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        loop = policy.new_event_loop()
    try:
        return f"{_qualified(type(loop))} (policy {_qualified(type(policy))})"
    finally:
        loop.close()


def report() -> list[tuple[str, str]]:
    """The (name, value) pairs ``python -m sdax_hamilton`` prints, in order."""
    import sdax_hamilton
    from sdax_hamilton import _core

    return [
        ("sdax-hamilton", sdax_hamilton.__version__),
        ("sdax_hamilton._core", _core.__version__),
        ("apache-hamilton", _installed("apache-hamilton")),
        (
            "python",
            f"{platform.python_version()} ({platform.python_implementation()}, "
            f"{platform.system()} {platform.machine()})",
        ),
        ("uvloop", _installed("uvloop")),
        ("event loop", _event_loop()),
    ]


def main() -> int:
    for name, value in report():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
