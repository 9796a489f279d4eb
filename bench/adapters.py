"""Cost of Hamilton lifecycle adapters on a run (docs/adapters.md).

```console
$ python bench/adapters.py            # about 20 s
$ python bench/adapters.py --quick    # about 5 s
```

One 200-node chain of trivial ``async def`` nodes (and one 500-wide fan-out), run with
``await plan.execute(...)`` under four Drivers of the same module:

* ``none``: no adapter (the plan is run exactly as without the feature);
* ``no-op sync``: one ``NodeExecutionHook`` + ``GraphExecutionHook`` whose hooks do nothing;
* ``no-op async``: one adapter with the four ``async`` base hooks doing nothing;
* ``no-op base``: one adapter with Hamilton's sync base hooks (``pre_node_execute`` ...),
  the level ``HamiltonTracker`` uses.

Runners are timed interleaved (rotating order) and the median of the repetitions is
reported, with the overhead above ``none`` in µs per node. The clock is this process's CPU
time (``time.process_time``; everything runs on one thread), so a machine shared with other
work inflates the figures less than wall time would; ``--wall`` uses ``perf_counter``.
Standard library plus the package and Hamilton.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import textwrap
import time
import types
from typing import Any

from hamilton.lifecycle import GraphExecutionHook, NodeExecutionHook
from hamilton.lifecycle import base as lifecycle_base

from sdax_hamilton import Driver


class NoOpSync(NodeExecutionHook, GraphExecutionHook):
    def run_before_graph_execution(self, **kwargs: Any) -> None:
        pass

    def run_after_graph_execution(self, **kwargs: Any) -> None:
        pass

    def run_before_node_execution(self, **kwargs: Any) -> None:
        pass

    def run_after_node_execution(self, **kwargs: Any) -> None:
        pass


class NoOpAsync(
    lifecycle_base.BasePreGraphExecuteAsync,
    lifecycle_base.BasePostGraphExecuteAsync,
    lifecycle_base.BasePreNodeExecuteAsync,
    lifecycle_base.BasePostNodeExecuteAsync,
):
    async def pre_graph_execute(self, **kwargs: Any) -> None:
        pass

    async def post_graph_execute(self, **kwargs: Any) -> None:
        pass

    async def pre_node_execute(self, **kwargs: Any) -> None:
        pass

    async def post_node_execute(self, **kwargs: Any) -> None:
        pass


class NoOpBase(
    lifecycle_base.BasePreGraphExecute,
    lifecycle_base.BasePostGraphExecute,
    lifecycle_base.BasePreNodeExecute,
    lifecycle_base.BasePostNodeExecute,
):
    def pre_graph_execute(self, **kwargs: Any) -> None:
        pass

    def post_graph_execute(self, **kwargs: Any) -> None:
        pass

    def pre_node_execute(self, **kwargs: Any) -> None:
        pass

    def post_node_execute(self, **kwargs: Any) -> None:
        pass


def chain(n: int) -> str:
    lines = ["async def n0(x: int) -> int:", "    return x"]
    for i in range(1, n):
        lines += [f"async def n{i}(n{i - 1}: int) -> int:", f"    return n{i - 1} + 1"]
    return "\n".join(lines)


def fanout(n: int) -> str:
    lines = ["async def src(x: int) -> int:", "    return x"]
    for i in range(n):
        lines += [f"async def w{i}(src: int) -> int:", "    return src + 1"]
    params = ", ".join(f"w{i}: int" for i in range(n))
    lines += [f"async def join({params}) -> int:", "    return w0"]
    return "\n".join(lines)


def load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


RUNNERS: dict[str, list[object]] = {
    "none": [],
    "no-op sync": [NoOpSync()],
    "no-op async": [NoOpAsync()],
    "no-op base": [NoOpBase()],
}


async def measure(
    module: types.ModuleType, output: str, reps: int, batch: int, clock: Any
) -> dict[str, float]:
    plans = {
        name: Driver(module, adapters=adapters).prepare([output])
        for name, adapters in RUNNERS.items()
    }
    expected = await plans["none"].execute(inputs={"x": 0})
    for plan in plans.values():
        assert await plan.execute(inputs={"x": 0}) == expected
    gc.collect()
    gc.freeze()
    samples: dict[str, list[float]] = {name: [] for name in plans}
    order = list(plans)
    for rep in range(reps):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            plan = plans[name]
            start = clock()
            for _ in range(batch):
                await plan.execute(inputs={"x": 0})
            samples[name].append((clock() - start) / batch)
    gc.unfreeze()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--wall", action="store_true", help="wall clock instead of CPU time")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    reps, batch = (5, 3) if args.quick else (15, 5)
    cases = [
        ("chain 200", load("sdax_bench_adapters_chain", chain(200)), "n199", 200),
        ("fan-out 500", load("sdax_bench_adapters_fan", fanout(500)), "join", 502),
    ]
    print("| case | runner | µs per execute | µs per node | overhead µs per node |")
    print("|---|---|---:|---:|---:|")
    for label, module, output, nodes in cases:
        result = asyncio.run(measure(module, output, reps, batch, clock))
        base = result["none"]
        for name, seconds in result.items():
            overhead = (seconds - base) / nodes * 1e6
            print(
                f"| {label} | {name} | {seconds * 1e6:,.0f} | {seconds / nodes * 1e6:.1f} | "
                f"{'-' if name == 'none' else f'{overhead:+.1f}'} |"
            )


if __name__ == "__main__":
    main()
