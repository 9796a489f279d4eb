"""Per-request shapes: the fixed cost of one ``execute()`` of a small graph.

Cases (``shapes.py`` generators, trivial async bodies): chain of 3; fan-out 4 (+ source and
join); the guide shape (connection -> transaction -> query, two releases: ``resources 1``);
each with and without policies; and a chain of 200 for the per-node cost of long chains.

Runners, timed interleaved in this one process (rotating order, median of batches):

* ``floor``: ``floor.py`` (the hand-written asyncio version of the same functions);
* ``ours``: ``sdax_hamilton`` as importable here;
* each ``--before DIR`` (repeatable): a copy of an earlier ``python/sdax_hamilton`` (with its
  built ``_core``) imported as the package named by DIR's last component, which names its
  column (``git archive`` or ``cp -r`` it to e.g. ``/tmp/x/sdax_hamilton_d436780``); its
  modules import each other relatively, so all live side by side;
* ``hamilton``: Hamilton's ``AsyncDriver`` (no policies, no releases: it knows neither);
* ``0.2.0``: with ``--old-python PATH``, this script is re-run in that interpreter's
  virtualenv (sdax-hamilton 0.2.0, ``bash bench/setup_old_venv.sh``) measuring its floor and
  itself; compare through each one's ratio to its own floor.

Figures: µs per execute one at a time (C=1) and executes/s with 100 concurrent executes of
one plan (C=100, ``asyncio.gather``). The clock is the process's CPU time
(``time.process_time``): on a shared machine it moves less with the other processes' load
than the wall clock, and a single-threaded asyncio run spends its wall time on the CPU.

    python bench/per_request.py [--quick] [--before DIR ...] [--old-python PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor
import shapes

Execute = Callable[[], Awaitable[Any]]

CASES = [
    ("chain of 3", "chain", 3),
    ("fan-out 4", "fanout", 4),
    ("guide shape", "resources", 1),
    ("chain of 200", "chain", 200),
]


def _batch(loop: asyncio.AbstractEventLoop, execute: Execute, inner: int, conc: int) -> float:
    """CPU seconds per execute over ``inner`` rounds of ``conc`` simultaneous executes."""

    async def go() -> None:
        if conc == 1:
            for _ in range(inner):
                await execute()
        else:
            for _ in range(inner):
                await asyncio.gather(*(execute() for _ in range(conc)))

    start = time.process_time()
    loop.run_until_complete(go())
    return (time.process_time() - start) / (inner * conc)


def _measure(
    loop: asyncio.AbstractEventLoop,
    runners: dict[str, Execute],
    conc: int,
    reps: int,
    batch_s: float,
) -> dict[str, float]:
    """Median CPU seconds per execute for each runner, batches interleaved."""
    inner: dict[str, int] = {}
    for name, execute in runners.items():
        first = _batch(loop, execute, 3, conc)
        inner[name] = max(1, min(20000, round(batch_s / max(first * conc, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            samples[name].append(_batch(loop, runners[name], inner[name], conc))
    return {name: statistics.median(v) for name, v in samples.items()}


def _sdax_runner(package: str, case: shapes.Case, module: Any) -> Execute:
    sdax = importlib.import_module(package)
    plan = sdax.Driver(module).prepare(list(case.outputs))
    inputs = dict(case.inputs)

    def execute() -> Awaitable[Any]:
        return plan.execute(inputs=inputs)  # type: ignore[no-any-return]

    return execute


def _module_for(case: shapes.Case, package: str) -> Any:
    """The case's module with its declarations made by ``package`` (each package knows
    only its own declaration objects)."""
    name = f"{case.module_name}_{package}"
    shapes.GENERATED_DIR.mkdir(exist_ok=True)
    source = case.source.replace("sdax_hamilton", package)
    (shapes.GENERATED_DIR / f"{name}.py").write_text(source)
    if str(shapes.GENERATED_DIR) not in sys.path:
        sys.path.insert(0, str(shapes.GENERATED_DIR))
    return importlib.import_module(name)


def _hamilton_runner(loop: asyncio.AbstractEventLoop, case: shapes.Case, module: Any) -> Execute:
    from hamilton import async_driver  # type: ignore[import-untyped]

    dr = loop.run_until_complete(async_driver.Builder().with_modules(module).build())
    outputs, inputs = list(case.outputs), dict(case.inputs)

    def execute() -> Awaitable[Any]:
        return dr.execute(outputs, inputs=inputs)  # type: ignore[no-any-return]

    return execute


def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    before_pkgs: list[str] = []
    for before in args.before:
        path = Path(before).resolve()
        sys.path.insert(0, str(path.parent))
        before_pkgs.append(path.name)
    results: dict[str, Any] = {}
    for label, shape, size in CASES:
        for policy in (False, True):
            if shape == "chain" and size > 3 and policy:
                continue
            case = shapes.build(shape, size, policy)
            shapes.write(case)
            module = shapes.load(case)
            fl = floor.Floor(case, module)
            runners: dict[str, Execute] = {"floor": fl.execute}
            expected = loop.run_until_complete(fl.execute())
            runners["ours"] = _sdax_runner("sdax_hamilton", case, module)
            for pkg in before_pkgs:
                runners[pkg] = _sdax_runner(pkg, case, _module_for(case, pkg))
            if not args.old_mode and not policy and not args.no_hamilton:
                runners["hamilton"] = _hamilton_runner(loop, case, module)
            for name, execute in runners.items():
                got = loop.run_until_complete(execute())
                if got != expected:
                    raise SystemExit(f"{name} on {case.key}: outputs differ from the floor's")
            key = f"{label}{' +policy' if policy else ''}"
            print(f"measuring {key} ...", file=sys.stderr, flush=True)
            gc.collect()
            gc.freeze()
            one = _measure(loop, runners, 1, args.reps, args.batch_s)
            entry: dict[str, Any] = {
                "calls": case.nodes + case.releases,
                "c1_us": {},
                "c100_per_s": {},
            }
            for name, sec in one.items():
                entry["c1_us"][name] = sec * 1e6
            if size <= 4:
                many = _measure(loop, runners, 100, max(3, args.reps // 2), args.batch_s)
                for name, sec in many.items():
                    entry["c100_per_s"][name] = 1.0 / sec
            gc.unfreeze()
            results[key] = entry
    return results


def _old(args: argparse.Namespace) -> dict[str, Any] | None:
    cmd = [args.old_python, __file__, "--old-mode", "--reps", str(args.reps)]
    cmd += ["--batch-s", str(args.batch_s)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"0.2.0 run failed: {done.stderr[-500:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def render(results: dict[str, Any], old: dict[str, Any] | None) -> str:
    present: list[str] = []  # floor, ours, each --before, hamilton: in the order measured
    for entry in results.values():
        present += [n for n in entry["c1_us"] if n not in present]
    head = [f"{n} µs" for n in present] + [f"{n} +µs" for n in present if n != "floor"]
    if old is not None:
        head += ["0.2.0 µs", "0.2.0 +µs (vs its floor)"]
    lines = ["C=1, CPU µs per execute (+µs: above the floor)", ""]
    lines.append("| shape | " + " | ".join(head) + " |")
    lines.append("|---|" + "---:|" * len(head))
    for key, e in results.items():
        c1 = e["c1_us"]
        cells = [f"{c1[n]:.1f}" if n in c1 else "-" for n in present]
        cells += [
            f"{c1[n] - c1['floor']:+.1f}" if n in c1 else "-" for n in present if n != "floor"
        ]
        if old is not None:
            o = old.get(key, {}).get("c1_us", {})
            if "ours" in o:
                cells += [f"{o['ours']:.1f}", f"{o['ours'] - o['floor']:+.1f}"]
            else:
                cells += ["-", "-"]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "C=100 concurrent, executes per CPU second (ratio to the floor)", ""]
    head = present + (["0.2.0 (ratio to its floor)"] if old is not None else [])
    lines.append("| shape | " + " | ".join(head) + " |")
    lines.append("|---|" + "---:|" * len(head))
    for key, e in results.items():
        c = e["c100_per_s"]
        if not c:
            continue
        cells = [
            (f"{c[n]:,.0f}" if n == "floor" else f"{c[n]:,.0f} ({c[n] / c['floor']:.2f})")
            if n in c
            else "-"
            for n in present
        ]
        if old is not None:
            o = old.get(key, {}).get("c100_per_s", {})
            cells.append(f"{o['ours']:,.0f} ({o['ours'] / o['floor']:.2f})" if "ours" in o else "-")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    long = results.get("chain of 200")
    if long is not None:
        c1 = long["c1_us"]
        lines += ["", "chain of 200, µs per node above the floor: "]
        lines[-1] += ", ".join(
            f"{n} {(c1[n] - c1['floor']) / 200:.2f}" for n in present if n != "floor" and n in c1
        )
        if old is not None and "chain of 200" in old:
            o = old["chain of 200"]["c1_us"]
            lines[-1] += f", 0.2.0 {(o['ours'] - o['floor']) / 200:.2f}"
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--batch-s", type=float, default=0.05)
    parser.add_argument("--before", action="append", default=[], metavar="DIR")
    parser.add_argument("--old-python", default=None)
    parser.add_argument("--old-mode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-hamilton", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.quick:
        args.reps, args.batch_s = 5, 0.02
    results = run(args)
    if args.old_mode:
        print(json.dumps(results))
        return
    old = _old(args) if args.old_python else None
    if args.json:
        Path(args.json).write_text(json.dumps({"ours": results, "0.2.0": old}, indent=1))
    print(render(results, old))


if __name__ == "__main__":
    main()
