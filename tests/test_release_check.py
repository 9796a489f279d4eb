"""The release check's reading of ``auditwheel show`` (scripts/release.py, `make release`):
a wheel needing more than glibc 2.17, or output without a platform tag, fails the check."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "release.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release = _load()


def _report(tag: str, libc_versions: str) -> str:
    # The layout auditwheel 6 prints, line breaks inside the sentence included.
    return (
        f"pkg-0.3.0-cp311-abi3-linux_x86_64.whl\nis consistent with the following platform tag:\n"
        f'"{tag}".\n\nThe wheel references external versioned symbols in these\n'
        f"system-provided shared libraries: libm.so.6 with versions\n{{'GLIBC_2.2.5'}}, "
        f"libc.so.6 with versions {{{libc_versions}}}\n\n"
        f'This constrains the platform tag to "{tag}".\n'
    )


def test_a_manylinux2014_wheel_passes() -> None:
    report = _report("manylinux_2_17_x86_64", "'GLIBC_2.3', 'GLIBC_2.2.5', 'GLIBC_2.14'")
    assert release.glibc_verdict(report) == ("manylinux_2_17_x86_64", (2, 17))


def test_an_older_tag_passes_with_its_own_glibc() -> None:
    report = _report("manylinux_2_5_x86_64", "'GLIBC_2.2.5'")
    assert release.glibc_verdict(report) == ("manylinux_2_5_x86_64", (2, 5))
    assert release.glibc_verdict(_report("manylinux2014_x86_64", "'GLIBC_2.3'"))[1] == (2, 17)


@pytest.mark.parametrize(
    ("tag", "versions", "needed"),
    [
        ("manylinux_2_34_x86_64", "'GLIBC_2.34', 'GLIBC_2.14'", "2.34"),
        ("manylinux_2_17_x86_64", "'GLIBC_2.14', 'GLIBC_2.28'", "2.28"),  # a symbol over the tag
        ("manylinux_2_28_x86_64", "'GLIBC_2.2.5'", "2.28"),
    ],
)
def test_a_wheel_needing_a_newer_glibc_fails(tag: str, versions: str, needed: str) -> None:
    with pytest.raises(release.ReleaseError, match=rf"needs glibc {needed}\b"):
        release.glibc_verdict(_report(tag, versions))


@pytest.mark.parametrize(
    "report",
    [
        "",
        'pkg.whl is consistent with the following platform tag:\n"linux_x86_64".\n',
        "auditwheel: error: cannot access wheel\n",
    ],
)
def test_output_without_a_manylinux_tag_fails(report: str) -> None:
    with pytest.raises(release.ReleaseError):
        release.glibc_verdict(report)
