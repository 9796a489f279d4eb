"""Seeded random scenarios: failures, timeouts, self-cancellation and caller cancellation at
arbitrary loop iterations, checked against the invariants of docs/contract.md#shutdown-phase,
#open-algorithm, #outcomes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from support.driver import Node, clean_loop, execute, opened

from sdax_hamilton._failures import ExecutionError

BEHAVIOURS = ["ok", "ok", "ok", "yield", "conn_err", "value_err", "hang", "swallow", "self"]
SCENARIOS = 300


def node_function(
    name: str, script: dict[str, list[str]], began: dict[str, int], rng: random.Random
) -> Any:
    """A node whose attempt n behaves as ``script[name][n]`` (the last entry from then on)."""

    async def call(**inputs: Any) -> str:
        attempt = began.get(name, 0)
        began[name] = attempt + 1
        behaviour = script[name][min(attempt, 2)]
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        if behaviour == "conn_err":
            raise ConnectionError(name)
        if behaviour == "value_err":
            raise ValueError(name)
        if behaviour == "self":
            raise asyncio.CancelledError
        if behaviour == "hang":
            await asyncio.Event().wait()
        if behaviour == "swallow":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass
        return name

    return call


def release_function(name: str, released: list[str], rng: random.Random) -> Any:
    """A release that records its call, yields a few times and fails one time in ten."""

    async def close(acq: Any) -> None:
        released.append(name)
        for _ in range(rng.randint(0, 2)):
            await asyncio.sleep(0)
        if rng.random() < 0.1:
            raise OSError(name)

    return close


def check_outcome(task: asyncio.Task[dict[str, Any]], cancels: int, context: object) -> None:
    """The run's outcome is one the contract allows for what the scenario injected."""
    if cancels == 0:
        assert not task.cancelled(), context
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        assert task.result() == {"query": "query", "side": "side"}, context
    elif type(exc) is BaseExceptionGroup:
        assert any(isinstance(e, asyncio.CancelledError) for e in exc.exceptions), context
    else:
        assert isinstance(exc, ExecutionError | LookupError), (context, repr(exc))


def node_timeout(behaviours: list[str], rng: random.Random) -> float | None:
    # A node that may block forever gets a timeout so every scenario ends by itself.
    if {"hang", "swallow"} & set(behaviours):
        return rng.choice([0.001, 0.003])
    return rng.choice([None, None, 0.5])


async def scenario(rng: random.Random, seed: int) -> None:
    began: dict[str, int] = {}
    released: list[str] = []
    script = {name: [rng.choice(BEHAVIOURS) for _ in range(3)] for name in NAMES}

    def make(name: str) -> Any:
        return node_function(name, script, began, rng)

    def release(name: str) -> Any:
        return release_function(name, released, rng)

    def timeout(name: str) -> float | None:
        return node_timeout(script[name], rng)

    nodes = [
        Node("conn", make("conn"), timeout=timeout("conn"), release=release("conn")),
        Node("tx", make("tx"), ("conn",), timeout=timeout("tx"), release=release("tx")),
        Node(
            "query",
            make("query"),
            ("tx",),
            timeout=timeout("query"),
            retries=rng.randint(0, 2),
            initial_delay=0.0005,
        ),
        Node(
            "side",
            make("side"),
            timeout=timeout("side"),
            retries=rng.randint(0, 1),
            initial_delay=0.0005,
        ),
    ]
    with_body = rng.random() < 0.5
    body_fails = rng.random() < 0.1

    async def run() -> dict[str, Any]:
        if with_body:
            async with opened(nodes, ["query", "side"], seed=seed) as result:
                for _ in range(rng.randint(0, 3)):
                    await asyncio.sleep(0)
                if body_fails:
                    raise LookupError("body")
                return result
        return await execute(nodes, ["query", "side"], seed=seed)

    with clean_loop():
        task = asyncio.create_task(run())
        cancels = rng.choice([0, 0, 1, 1, 3])
        for _ in range(cancels):
            for _ in range(rng.randint(0, 12)):
                await asyncio.sleep(0)
            task.cancel()
        done, _ = await asyncio.wait([task], timeout=10.0)
        assert done, (seed, script)

    context = (seed, script, began, released)
    for name in ("conn", "tx"):  # exactly once per acquisition whose call began, else never
        assert released.count(name) == (1 if began.get(name) else 0), context
    if "tx" in released and "conn" in released:
        assert released.index("tx") < released.index("conn"), context
    check_outcome(task, cancels, context)


NAMES = ("conn", "tx", "query", "side")


async def test_random_scenarios_keep_the_release_and_outcome_invariants() -> None:
    for seed in range(SCENARIOS):
        await scenario(random.Random(seed), seed)
