"""What the shared objects cost when nothing fails (docs/resilience.md, "What it costs").

A chain of 3 nodes, each ``@execution(timeout=60.0, retries=2)`` with a trivial async body,
executed one at a time; nothing fails, so nothing is retried, rejected or queued. Its first
attempts are lone: the core's ``Run`` carries them out (src/carry.rs). ``--fanout`` takes a
fan-out of 4 instead (a source, 4 nodes on it, a join: 6 nodes), whose 4 parallel attempts
the driver admits and awaits (python/sdax_hamilton/_executor/guards.py). Variants:

* ``policy``: the policy alone;
* ``budget``: ``Driver(retry_budget=RetryBudget())`` (every first attempt deposits);
* ``fallback``: ``fallback=`` on every node (never called);
* ``bulkhead``: one ``Bulkhead(100)`` shared by the three nodes;
* ``breaker``: one ``CircuitBreaker()`` shared by the three nodes;
* ``bulkhead+breaker``: both on every node (each attempt takes a permit, gives it back and
  records its success).

Runners, timed interleaved in this one process (rotating order, median of batches, CPU
time per execute as in ``per_request.py``): ``ours`` (``sdax_hamilton`` as importable here)
and each ``--before DIR``, an earlier build imported side by side under DIR's last
component (bench/README.md, "Per-request shapes", says how to make one). The figure to
read is each variant's µs per execute minus ``policy``'s, per attempt (three per execute).

    python bench/guards.py [--quick] [--fanout] [--before DIR ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import per_request
import shapes

Execute = Callable[[], Awaitable[Any]]

VARIANTS = ("policy", "budget", "fallback", "bulkhead", "breaker", "bulkhead+breaker")
NODES = 3

HEADER = """
from PKG import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead(100, name="bench")
BREAKER = CircuitBreaker(name="bench")


def _fallback(error: BaseException) -> int:
    return -1
"""

NODE = """

@execution(timeout=60.0, retries=2EXTRA)
async def NAME(PARAMS) -> int:
    return BODY
"""

EXTRAS = {
    "policy": "",
    "budget": "",
    "fallback": ", fallback=_fallback",
    "bulkhead": ", bulkhead=BULKHEAD",
    "breaker": ", breaker=BREAKER",
    "bulkhead+breaker": ", bulkhead=BULKHEAD, breaker=BREAKER",
}


def _nodes(fanout: bool) -> list[tuple[str, list[str]]]:
    """``(name, parameters)`` of each node."""
    if fanout:
        wide = [f"w{i}" for i in range(4)]
        return [("src", ["x"]), *((w, ["src"]) for w in wide), ("join", wide)]
    return [(f"c{i}", ["x" if i == 0 else f"c{i - 1}"]) for i in range(NODES)]


def _module(variant: str, package: str, fanout: bool) -> Any:
    """The case's module for ``variant``, its declarations made by ``package``."""
    parts = [HEADER.replace("PKG", package)]
    for name, params in _nodes(fanout):
        parts.append(
            NODE.replace("EXTRA", EXTRAS[variant])
            .replace("NAME", name)
            .replace("PARAMS", ", ".join(f"{p}: int" for p in params))
            .replace("BODY", " + ".join(params) + " + 1")
        )
    tag = variant.replace("+", "_")
    name = f"guards_{'fanout' if fanout else 'chain'}_{tag}_{package}"
    shapes.GENERATED_DIR.mkdir(exist_ok=True)
    (shapes.GENERATED_DIR / f"{name}.py").write_text("".join(parts))
    if str(shapes.GENERATED_DIR) not in sys.path:
        sys.path.insert(0, str(shapes.GENERATED_DIR))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def _runner(package: str, variant: str, fanout: bool) -> Execute:
    sdax = importlib.import_module(package)
    budget = sdax.RetryBudget() if variant == "budget" else None
    output = _nodes(fanout)[-1][0]
    module = _module(variant, package, fanout)
    plan = sdax.Driver(module, retry_budget=budget).prepare([output])
    inputs = {"x": 1}

    def execute() -> Awaitable[Any]:
        return plan.execute(inputs=inputs)  # type: ignore[no-any-return]

    return execute


def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    loop = asyncio.new_event_loop()
    packages = ["sdax_hamilton"]
    columns = {"sdax_hamilton": "ours"}
    for before in args.before:
        path = Path(before).resolve()
        sys.path.insert(0, str(path.parent))
        packages.append(path.name)
        columns[path.name] = path.name
    runners: dict[str, Execute] = {}
    expected = {"join": 4 * 3 + 1} if args.fanout else {f"c{NODES - 1}": 1 + NODES}
    for package in packages:
        for variant in VARIANTS:
            execute = _runner(package, variant, args.fanout)
            got = loop.run_until_complete(execute())
            if got != expected:
                raise SystemExit(f"{package} {variant}: wrong result {got!r}")
            runners[f"{columns[package]}|{variant}"] = execute
    gc.collect()
    gc.freeze()
    measured = per_request._measure(loop, runners, 1, args.reps, args.batch_s)
    results: dict[str, dict[str, float]] = {}
    for key, seconds in measured.items():
        column, variant = key.split("|")
        results.setdefault(variant, {})[column] = seconds * 1e6
    return results


def render(results: dict[str, dict[str, float]], fanout: bool = False) -> str:
    columns = list(results["policy"])
    head = " | ".join(f"{c} µs/execute | {c} +µs/attempt" for c in columns)
    attempts = len(_nodes(fanout))
    lines = [
        f"| {'fan-out 4' if fanout else 'chain of 3'} | {head} |",
        "|---|" + "---:|" * (2 * len(columns)),
    ]
    for variant in VARIANTS:
        cells = []
        for c in columns:
            us = results[variant][c]
            extra = (us - results["policy"][c]) / attempts
            cells.append(f"{us:.1f} | {'-' if variant == 'policy' else f'{extra:+.2f}'}")
        lines.append(f"| {variant} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions")
    parser.add_argument("--fanout", action="store_true", help="a fan-out of 4, not a chain")
    parser.add_argument("--before", action="append", default=[], help="an earlier build's dir")
    parser.add_argument("--reps", type=int, default=None, help="batches per runner")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    if args.reps is None:
        args.reps = 5 if args.quick else 15
    args.batch_s = 0.02 if args.quick else 0.05
    results = run(args)
    print(render(results, args.fanout))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
