"""Build every release artefact and check it (`make release`).

1. `maturin build --release --zig --compatibility manylinux2014`: one abi3 wheel for x86_64
   Linux, glibc 2.17 and newer; `maturin sdist`: the source archive.
2. Lists both archives: LICENSE must be in each; the wheel carries the package and its
   extension, the sdist the Rust sources, Cargo.lock and the Python tests.
3. `auditwheel show`: its platform tag and every versioned glibc symbol it lists must need
   nothing newer than glibc 2.17, else this fails.
4. The wheel goes into a clean virtualenv of every CPython >= 3.11 found here (pyenv's
   versions and `python3.N` on PATH), where `examples/lifecycle.py` and
   `python -m sdax_hamilton` run from outside the source tree; a tested Python (the
   pyproject classifiers) that is missing gets a line saying so. One of them installs
   `[all]`, the optional extras, and imports what they provide.
5. The sdist is installed (built from itself by pip, with cargo) into a clean virtualenv with
   its test extra; the example runs and the tests it ships run against that install.

Usage: python scripts/release.py [--out DIR]   (default dist/, emptied first)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_GLIBC = (2, 17)
# Legacy manylinux aliases (PEP 600) and the glibc each stands for.
LEGACY_TAGS = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
# Tests of the sdist that run against its install: quick, and they need no Graphviz `dot`.
SDIST_TESTS = ["tests/test_package.py", "tests/test_main.py", "tests/test_core_bindings.py"]


class ReleaseError(Exception):
    pass


def run(
    args: list[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> str:
    """Run a command, echo it, return its stdout; a failure raises with its output."""
    shown = " ".join(str(a) for a in args)
    print(f"+ {shown}", flush=True)
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ReleaseError(
            f"`{shown}` exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


def build(out: Path) -> tuple[Path, Path]:
    if out.exists():
        shutil.rmtree(out)
    run(
        ["maturin", "build", "--release", "--zig", "--compatibility", "manylinux2014",
         "--out", out, "--quiet"],
        cwd=ROOT,
    )  # fmt: skip
    run(["maturin", "sdist", "--out", out], cwd=ROOT)
    wheels = sorted(out.glob("*.whl"))
    sdists = sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise ReleaseError(f"expected one wheel and one sdist in {out}: {os.listdir(out)}")
    wheel = wheels[0]
    if "-cp311-abi3-" not in wheel.name or "manylinux2014_x86_64" not in wheel.name:
        raise ReleaseError(f"expected a cp311-abi3 manylinux2014_x86_64 wheel: {wheel.name}")
    return wheel, sdists[0]


def check_contents(wheel: Path, sdist: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    print(f"== {wheel.name} ({wheel.stat().st_size // 1024} KiB)")
    for name in names:
        print(f"   {name}")
    _require(names, r"\.dist-info/licenses/LICENSE$", wheel)
    _require(names, r"^sdax_hamilton/_core\.abi3\.so$", wheel)
    _require(names, r"^sdax_hamilton/py\.typed$", wheel)
    _require(names, r"^sdax_hamilton/__main__\.py$", wheel)
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    print(f"== {sdist.name} ({sdist.stat().st_size // 1024} KiB, {len(names)} files)")
    for name in names:
        print(f"   {name}")
    for pattern in (r"^[^/]+/LICENSE$", r"^[^/]+/Cargo\.lock$", r"^[^/]+/core/src/lib\.rs$",
                    r"^[^/]+/tests/conftest\.py$", r"^[^/]+/CHANGELOG\.md$"):  # fmt: skip
        _require(names, pattern, sdist)


def _require(names: list[str], pattern: str, archive: Path) -> None:
    if not any(re.search(pattern, name) for name in names):
        raise ReleaseError(f"{archive.name} has no file matching {pattern}")


def glibc_verdict(report: str) -> tuple[str, tuple[int, int]]:
    """From `auditwheel show` output: the platform tag and the newest glibc the wheel needs.

    Raises ReleaseError when the output has no platform tag or needs more than 2.17.
    """
    match = re.search(r"consistent with the following platform tag:\s*\"([^\"]+)\"", report)
    if match is None:
        raise ReleaseError(f"auditwheel show named no platform tag:\n{report}")
    tag = match.group(1)
    if (legacy := tag.split("_x86_64")[0]) in LEGACY_TAGS:
        tag_glibc = LEGACY_TAGS[legacy]
    elif (m := re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)) is not None:
        tag_glibc = (int(m.group(1)), int(m.group(2)))
    else:
        raise ReleaseError(f"auditwheel's platform tag {tag!r} is not a manylinux tag")
    symbols = [(int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", report)]
    needed = max([tag_glibc, *symbols])
    if needed > MAX_GLIBC:
        raise ReleaseError(
            f"the wheel needs glibc {needed[0]}.{needed[1]} (tag {tag}), "
            f"newer than {MAX_GLIBC[0]}.{MAX_GLIBC[1]}:\n{report}"
        )
    return tag, needed


def check_auditwheel(wheel: Path) -> None:
    report = run(["auditwheel", "show", wheel])
    print(report.rstrip())
    tag, needed = glibc_verdict(report)
    symbols = sorted({(int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", report)})
    newest = f"GLIBC_{symbols[-1][0]}.{symbols[-1][1]}" if symbols else "none"
    print(
        f"== auditwheel verdict: platform tag {tag}, newest versioned glibc symbol {newest}; "
        f"needs glibc {needed[0]}.{needed[1]} <= {MAX_GLIBC[0]}.{MAX_GLIBC[1]}: OK"
    )


def tested_pythons() -> list[tuple[int, int]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = []
    for classifier in meta["project"]["classifiers"]:
        m = re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", classifier)
        if m is not None:
            found.append((3, int(m.group(1))))
    return sorted(found)


def find_cpythons() -> dict[str, Path]:
    """Every CPython >= 3.11 on this machine, by full version: pyenv's, then PATH's."""
    candidates: list[Path] = []
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = Path(run([pyenv, "root"]).strip())
    else:  # pyenv installed but not on PATH
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(root.glob("versions/*/bin/python3"))
    for minor in range(11, 30):
        if (on_path := shutil.which(f"python3.{minor}")) is not None:
            candidates.append(Path(on_path))
    candidates.append(Path(sys.executable))
    found: dict[str, Path] = {}
    probe = (
        "import platform, sys; "
        "print(platform.python_implementation(), sys.version_info >= (3, 11), "
        "platform.python_version())"
    )
    for exe in candidates:
        try:
            out = subprocess.run(
                [exe, "-c", probe], capture_output=True, text=True, check=True, timeout=30
            ).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        implementation, recent, version = out[0], out[1] == "True", out[2]
        if implementation == "CPython" and recent and version not in found:
            found[version] = exe
    return dict(sorted(found.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("."))))


def fresh_venv(python: Path, where: Path) -> Path:
    run([python, "-m", "venv", where])
    venv_python = where / "bin" / "python"
    run([venv_python, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    return venv_python


def run_example(venv_python: Path, away: Path, version: str) -> None:
    """The example and `python -m sdax_hamilton`, from outside the source tree."""
    where = run(
        [venv_python, "-c", "import sdax_hamilton; print(sdax_hamilton.__file__)"], cwd=away
    ).strip()
    if "site-packages" not in where:
        raise ReleaseError(f"imported sdax_hamilton from {where}, not from the install")
    output = run([venv_python, ROOT / "examples" / "lifecycle.py"], cwd=away)
    print("   " + output.rstrip().replace("\n", "\n   "))
    report = run([venv_python, "-m", "sdax_hamilton"], cwd=away)
    print("   " + report.rstrip().replace("\n", "\n   "))
    if f"sdax-hamilton: {version}\n" not in report:
        raise ReleaseError(f"python -m sdax_hamilton did not report {version}")


def check_wheel_installs(wheel: Path, work: Path) -> None:
    version = wheel.name.split("-")[1]
    pythons = find_cpythons()
    minors = {tuple(int(x) for x in v.split(".")[:2]) for v in pythons}
    for major, minor in tested_pythons():
        if (major, minor) not in minors:
            print(f"== python {major}.{minor}: not found on this machine, wheel NOT tested on it")
    if not pythons:
        raise ReleaseError("no CPython >= 3.11 found")
    for index, (full_version, exe) in enumerate(pythons.items()):
        extras = "[all]" if index == 0 else ""
        print(f"== python {full_version} ({exe}): install the wheel{extras}, run the example")
        venv_python = fresh_venv(exe, work / f"venv-{full_version}")
        run([venv_python, "-m", "pip", "install", "-q", f"{wheel}{extras}"])
        if extras:
            run([venv_python, "-c", "import opentelemetry.trace, graphviz, hamilton_sdk"])
        run_example(venv_python, work, version)
    print(f"== wheel ran on: {', '.join(pythons)}")


def check_sdist_installs(sdist: Path, work: Path) -> None:
    version = sdist.name.removesuffix(".tar.gz").split("-")[1]
    print(f"== sdist: build and install from {sdist.name} in a clean virtualenv (cargo builds)")
    venv_python = fresh_venv(Path(sys.executable), work / "venv-sdist")
    # Reuse the crates.io dependencies this tree compiled for `pip install .` (target/release);
    # the package's own two crates are compiled from the sdist's sources (cargo tells them
    # apart by path).
    env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "target")}
    run([venv_python, "-m", "pip", "install", "-q", f"{sdist}[test]"], env=env)
    run_example(venv_python, work, version)
    unpacked = work / "sdist"
    with tarfile.open(sdist) as archive:
        archive.extractall(unpacked, filter="data")
    (source,) = unpacked.iterdir()
    # The shipped tests, run against the installed package (not the unpacked sources:
    # python/ is not on sys.path).
    output = run([venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SDIST_TESTS],
                 cwd=source)  # fmt: skip
    print("   " + output.rstrip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    args = parser.parse_args()
    try:
        wheel, sdist = build(args.out.resolve())
        check_contents(wheel, sdist)
        check_auditwheel(wheel)
        with tempfile.TemporaryDirectory(prefix="sdax-release-") as tmp:
            check_wheel_installs(wheel, Path(tmp))
            check_sdist_installs(sdist, Path(tmp))
    except ReleaseError as error:
        print(f"RELEASE CHECK FAILED: {error}", file=sys.stderr)
        return 1
    print(f"== release artefacts checked: {wheel.name}, {sdist.name} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
