"""Scale: 10,000-node graphs (chain, fan-out, lattice, resource chain) compile, prepare and
run with no recursion limit in the way (docs/contract.md#decisions, graph size) and in linear-ish
time.

The time bounds are deliberately generous (tens of seconds for what takes about one on this
machine): they catch quadratic behaviour (10,000^2 Python steps take minutes), not jitter.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError

N = 10_000
BOUND = 60.0
"""Seconds allowed for build + prepare + run of one 10,000-node graph (takes ~1-2 s)."""


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def check(self, what: str) -> None:
        elapsed = time.perf_counter() - self.start
        assert elapsed < BOUND, f"{what} took {elapsed:.1f}s for {N} nodes"


@pytest.fixture
def load() -> Iterator[Any]:
    names: list[str] = []

    def factory(source: str, **globals_: Any) -> types.ModuleType:
        name = f"sdax_scale_{len(names)}_{id(names)}"
        module = types.ModuleType(name)
        module.__dict__.update(globals_)
        sys.modules[name] = module
        names.append(name)
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
        return module

    yield factory
    for name in names:
        sys.modules.pop(name, None)


def chain_source(n: int, *, policy: str = "") -> str:
    lines = ["from sdax_hamilton import execution", "", "def n0(x: int) -> int:", "    return x"]
    for i in range(1, n):
        if policy:
            lines.append(f"@execution({policy})")
        # alternate async and sync so both paths run deep
        if i % 2:
            lines.append(f"async def n{i}(n{i - 1}: int) -> int:")
        else:
            lines.append(f"def n{i}(n{i - 1}: int) -> int:")
        lines.append(f"    return n{i - 1} + 1")
    return "\n".join(lines) + "\n"


def test_chain(load: Any) -> None:
    timer = Timer()
    plan = Driver(load(chain_source(N))).prepare([f"n{N - 1}"])
    result = loop_support.run(plan.execute(inputs={"x": 0}))
    assert result == {f"n{N - 1}": N - 1}
    timer.check("chain")


def test_chain_with_timeouts_and_retries_on_every_node(load: Any) -> None:
    timer = Timer()
    source = chain_source(N, policy="timeout=5.0, retries=2, initial_delay=0.0")
    plan = Driver(load(source)).prepare([f"n{N - 1}"])
    result = loop_support.run(plan.execute(inputs={"x": 0}))
    assert result == {f"n{N - 1}": N - 1}
    timer.check("chain with policies")


def fan_out_source(n: int) -> str:
    lines = ["import asyncio", "", "async def root(x: int) -> int:", "    return x"]
    for i in range(n):
        lines.append(f"async def leaf{i}(root: int) -> int:")
        lines.append("    await asyncio.sleep(0)")
        lines.append(f"    return root + {i}")
    return "\n".join(lines) + "\n"


def test_fan_out(load: Any) -> None:
    timer = Timer()
    outputs = [f"leaf{i}" for i in range(N)]
    plan = Driver(load(fan_out_source(N))).prepare(outputs)
    result = loop_support.run(plan.execute(inputs={"x": 1}))
    assert list(result) == outputs
    assert all(result[f"leaf{i}"] == 1 + i for i in range(N))
    timer.check("fan-out")


def test_fan_out_abort_cancels_and_drains_every_running_leaf(load: Any) -> None:
    """One leaf fails while 9,999 others are suspended: all are cancelled and drained, no
    task is left behind, and the failure is the single leaf of the ExecutionError."""
    timer = Timer()
    lines = [
        "import asyncio",
        "",
        "async def root(x: int) -> int:",
        "    return x",
        "",
        "async def failing(root: int) -> int:",
        "    await asyncio.sleep(0.05)",
        "    raise BOOM",
    ]
    for i in range(N - 2):
        lines += [
            f"async def leaf{i}(root: int) -> int:",
            "    try:",
            "        await asyncio.sleep(60)",
            "    except asyncio.CancelledError:",
            "        DRAINED.append(1)",
            "        raise",
            "    return root",
        ]
    boom = ValueError("boom")
    drained: list[int] = []
    module = load("\n".join(lines) + "\n", BOOM=boom, DRAINED=drained)
    plan = Driver(module).prepare(["failing", *(f"leaf{i}" for i in range(N - 2))])

    async def main() -> ExecutionError:
        before = asyncio.all_tasks()
        with pytest.raises(ExecutionError) as caught:
            await plan.execute(inputs={"x": 1})
        assert [t for t in asyncio.all_tasks() - before if not t.done()] == []
        return caught.value

    error = loop_support.run(main())
    assert error.exceptions == (boom,)
    assert len(drained) == N - 2
    timer.check("fan-out abort")


def lattice_source(layers: int, width: int) -> str:
    lines = [f"def l0_{j}(x: int) -> int:\n    return x + {j}" for j in range(width)]
    for i in range(1, layers):
        for j in range(width):
            a, b = f"l{i - 1}_{j}", f"l{i - 1}_{(j + 1) % width}"
            kind = "async def" if (i + j) % 2 else "def"
            lines.append(f"{kind} l{i}_{j}({a}: int, {b}: int) -> int:")
            lines.append(f"    return ({a} + {b}) % 1000003")
    return "\n".join(lines) + "\n"


def test_lattice(load: Any) -> None:
    timer = Timer()
    layers = width = 100
    plan = Driver(load(lattice_source(layers, width))).prepare(
        [f"l{layers - 1}_{j}" for j in range(width)]
    )
    result = loop_support.run(plan.execute(inputs={"x": 1}))
    # the same recurrence in plain Python
    row = [1 + j for j in range(width)]
    for _ in range(1, layers):
        row = [(row[j] + row[(j + 1) % width]) % 1000003 for j in range(width)]
    assert [result[f"l{layers - 1}_{j}"] for j in range(width)] == row
    timer.check("lattice")


def resource_chain_source(n: int) -> str:
    lines = [
        "from sdax_hamilton import Acquisition, shutdown",
        "",
        "async def r0(x: int) -> int:",
        "    return x",
    ]
    for i in range(1, n):
        lines.append(f"async def r{i}(r{i - 1}: int) -> int:")
        lines.append(f"    return r{i - 1} + 1")
    for i in range(n):
        lines.append(f"@shutdown(of=r{i})")
        lines.append(f"def close_r{i}(acquired: Acquisition[int]) -> None:")
        lines.append(f"    RELEASED.append({i})")
    lines.append(f"async def use(r{n - 1}: int) -> int:")
    lines.append(f"    return r{n - 1}")
    return "\n".join(lines) + "\n"


def test_resource_chain_releases_in_reverse_dependency_order(load: Any) -> None:
    timer = Timer()
    released: list[int] = []
    plan = Driver(load(resource_chain_source(N), RELEASED=released)).prepare(["use"])
    result = loop_support.run(plan.execute(inputs={"x": 0}))
    assert result == {"use": N - 1}
    assert released == list(range(N - 1, -1, -1))
    timer.check("resource chain")


def test_resource_chain_open_keeps_all_alive_then_releases_after_a_failing_body(
    load: Any,
) -> None:
    timer = Timer()
    released: list[int] = []
    plan = Driver(load(resource_chain_source(N), RELEASED=released)).prepare([f"r{N - 1}"])
    body_error = KeyError("body")

    async def main() -> None:
        with pytest.raises(KeyError) as caught:
            async with plan.open(inputs={"x": 0}) as values:
                assert values == {f"r{N - 1}": N - 1}
                assert released == []
                raise body_error
        assert caught.value is body_error

    loop_support.run(main())
    assert released == list(range(N - 1, -1, -1))
    timer.check("resource chain open")


def test_caller_cancellation_deep_in_a_resource_chain(load: Any) -> None:
    """Cancel while acquisition 5,000 of 10,000 runs: the 5,001 started acquisitions are
    released in reverse order, the rest never run, the caller sees its CancelledError."""
    timer = Timer()
    released: list[int] = []
    half = N // 2
    lines = resource_chain_source(N).splitlines()
    # make r{half} wait until cancelled
    index = lines.index(f"async def r{half}(r{half - 1}: int) -> int:")
    lines[index + 1 : index + 2] = [
        "    STARTED.set()",
        "    await __import__('asyncio').sleep(60)",
        f"    return r{half - 1} + 1",
    ]

    async def main() -> None:
        started = asyncio.Event()
        module = load("\n".join(lines) + "\n", RELEASED=released, STARTED=started)
        plan = Driver(module).prepare(["use"])
        task = asyncio.ensure_future(plan.execute(inputs={"x": 0}))
        await started.wait()
        task.cancel("stop")
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
        assert caught.value.args == ("stop",)

    loop_support.run(main())
    assert released == list(range(half, -1, -1))
    timer.check("cancelled resource chain")
