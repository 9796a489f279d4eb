"""Instructions per execute (callgrind): the per-request shapes, on a count that the
machine's load does not move.

Each runner's batch of executes runs inside a different C iterator of ``itertools``
(``starmap``, ``filterfalse``, ``takewhile``, ``accumulate``), so callgrind's inclusive
count of that iterator's ``*_next`` function is the instructions of that runner's
executes, interpreter included; nothing else in the process calls them. Run it under
valgrind; ``--report`` reads the output:

    valgrind --tool=callgrind --callgrind-out-file=OUT python bench/instructions.py \\
        SHAPE SIZE [-n N] [--policy [--guards]] [--before DIR ...]
    python bench/instructions.py --report OUT [-n N]

``--guards`` adds one ``Bulkhead(100)`` and one ``CircuitBreaker()``, shared by every node, to
each node's policy (``bench/guards.py`` has the same variant, timed).

Runners: the floor (``floor.py``), ours, and each ``--before DIR`` (as in
``per_request.py``). SHAPE SIZE as in ``shapes.py`` (``chain 3``, ``resources 1``). The
first batch of each runner (10 executes, warming caches) is run outside the iterators.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import gc
import itertools
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor
import shapes
from per_request import _module_for, _sdax_runner

# The C function of each wrapper, in the order runners are given to them.
WRAPPERS = ("starmap_next", "filterfalse_next", "takewhile_next", "accumulate_next")


def _drive(loop: asyncio.AbstractEventLoop, execute: Callable[[], Any], n: int) -> None:
    async def go() -> None:
        for _ in range(n):
            await execute()

    loop.run_until_complete(go())


def _inside(wrapper: str, batch: Callable[[], None]) -> None:
    """Run ``batch`` once inside the C iterator named ``wrapper``."""
    if wrapper == "starmap_next":
        collections.deque(itertools.starmap(batch, [()]), maxlen=0)
    elif wrapper == "filterfalse_next":
        collections.deque(itertools.filterfalse(lambda _: batch(), [0]), maxlen=0)
    elif wrapper == "takewhile_next":
        collections.deque(itertools.takewhile(lambda _: batch() or True, [0]), maxlen=0)
    else:
        collections.deque(itertools.accumulate([0, 0], lambda _a, _b: batch()), maxlen=0)


@dataclasses.dataclass(frozen=True)
class _Guarded(shapes.Case):
    """A case whose policies also name a shared bulkhead and breaker (``--guards``)."""

    @property
    def module_name(self) -> str:
        return super().module_name + "_guards"


def _guarded(case: shapes.Case) -> shapes.Case:
    imports = "from sdax_hamilton import Acquisition, execution, shutdown"
    source = case.source.replace(
        imports,
        imports + "\nfrom sdax_hamilton import Bulkhead, CircuitBreaker\n\n"
        "BULKHEAD = Bulkhead(100)\nBREAKER = CircuitBreaker()",
    ).replace(shapes.POLICY, shapes.POLICY[:-1] + ", bulkhead=BULKHEAD, breaker=BREAKER)")
    fields = {f.name: getattr(case, f.name) for f in dataclasses.fields(case)}
    return _Guarded(**{**fields, "source": source})


def measure(args: argparse.Namespace) -> None:
    case = shapes.build(args.shape, args.size, args.policy)
    if args.guards:
        if not args.policy:
            raise SystemExit("--guards goes with --policy")
        case = _guarded(case)
    shapes.write(case)
    module = shapes.load(case)
    loop = asyncio.new_event_loop()
    runners: dict[str, Callable[[], Any]] = {"floor": floor.Floor(case, module).execute}
    runners["ours"] = _sdax_runner("sdax_hamilton", case, module)
    for before in args.before:
        path = Path(before).resolve()
        sys.path.insert(0, str(path.parent))
        runners[path.name] = _sdax_runner(path.name, case, _module_for(case, path.name))
    if len(runners) > len(WRAPPERS):
        raise SystemExit(f"at most {len(WRAPPERS) - 2} --before")
    for execute in runners.values():
        _drive(loop, execute, 10)
    gc.collect()
    gc.freeze()
    for (name, execute), wrapper in zip(runners.items(), WRAPPERS, strict=False):
        print(f"{wrapper} {name}", file=sys.stderr)
        _inside(wrapper, lambda execute=execute: _drive(loop, execute, args.n))


def report(out: str, n: int) -> None:
    """Inclusive instructions of each wrapper, per execute, and above the floor's."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        for wrapper in WRAPPERS:
            if re.search(rf"\b{wrapper}\b", line):
                counts.setdefault(wrapper, int(line.split()[0].replace(",", "")))
    floor_ir = counts.get(WRAPPERS[0], 0) / n
    for wrapper in WRAPPERS:
        if wrapper in counts:
            per = counts[wrapper] / n
            print(f"{wrapper:18s} {per:12,.0f} instructions per execute, {per - floor_ir:+12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", nargs="?")
    parser.add_argument("size", nargs="?", type=int)
    parser.add_argument("-n", type=int, default=2000, help="executes per runner")
    parser.add_argument("--policy", action="store_true")
    parser.add_argument("--guards", action="store_true", help="a bulkhead and a breaker too")
    parser.add_argument("--before", action="append", default=[], metavar="DIR")
    parser.add_argument("--report", metavar="OUT")
    args = parser.parse_args()
    if args.report:
        report(args.report, args.n)
    else:
        measure(args)


if __name__ == "__main__":
    main()
