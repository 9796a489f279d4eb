"""The Hamilton version gate: only the tested series is admitted (docs/api.md, "Driver")."""

from __future__ import annotations

import functools
import importlib.metadata

SUPPORTED_HAMILTON = (1, 90)
"""The tested ``apache-hamilton`` series (major, minor): ``>=1.90,<1.91``."""
_SUPPORTED_TEXT = ">=1.90,<1.91"


@functools.cache
def installed_hamilton_version() -> str:
    """The installed ``apache-hamilton`` version string (``"unknown"`` if undeterminable).

    Read once per process (about 0.3 ms a read): the Hamilton this process has imported
    cannot change afterwards.
    """
    try:
        return importlib.metadata.version("apache-hamilton")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        from hamilton import version as hamilton_version  # type: ignore[import-untyped, unused-ignore]

        return ".".join(str(part) for part in hamilton_version.VERSION)
    except Exception:  # pragma: no cover - Hamilton missing or unrecognisable
        return "unknown"


def series(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string, ``None`` when it has no such prefix."""
    parts = version.split(".")
    if len(parts) < 2:
        return None
    digits = [""] * 2
    for index in range(2):
        for char in parts[index]:
            if not char.isdigit():
                break
            digits[index] += char
        if not digits[index]:
            return None
    return int(digits[0]), int(digits[1])


def check_hamilton_version() -> None:
    """Refuse an installed Hamilton outside the tested series (``RuntimeError``)."""
    found = installed_hamilton_version()
    if series(found) != SUPPORTED_HAMILTON:
        raise RuntimeError(
            f"sdax_hamilton requires apache-hamilton {_SUPPORTED_TEXT} (the tested "
            f"{SUPPORTED_HAMILTON[0]}.{SUPPORTED_HAMILTON[1]} series), found {found}; "
            "the translation uses Hamilton internals and refuses untested versions"
        )
