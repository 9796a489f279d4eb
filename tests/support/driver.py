"""Helpers for the driver tests (this module holds no tests).

Builds ``_core.Graph`` node definitions and ``NodeRuntime`` lists from plain callables with
explicit dependencies, so the driver is tested without Hamilton.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdax_hamilton import _core
from sdax_hamilton._executor import NodeRuntime, ReleaseRuntime, carrier_of, open_run
from sdax_hamilton._failures import RetryableException

DEFAULT_RETRYABLE: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    RetryableException,
)

ExcTypes = tuple[type[BaseException], ...]


@dataclass
class Node:
    """A test node: ``call`` receives keyword arguments named by ``inputs``."""

    name: str
    call: Callable[..., Any]
    inputs: tuple[str, ...] = ()
    timeout: float | None = None
    retries: int = 0
    retryable: ExcTypes = DEFAULT_RETRYABLE
    initial_delay: float = 0.001
    backoff_factor: float = 2.0
    output_type: Any = Any
    output_check: Callable[[Any], bool] | None = None
    input_checks: tuple[tuple[str, Callable[[Any], bool]], ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    borrows: tuple[str, ...] = ()
    release: Callable[[Any], Any] | None = None
    release_timeout: float | None = None
    release_retries: int = 0
    release_retryable: ExcTypes = DEFAULT_RETRYABLE
    release_initial_delay: float = 0.001

    def policy(self) -> _core.Policy:
        return _core.Policy(
            timeout=self.timeout,
            retries=self.retries,
            retryable_exceptions=self.retryable,
            initial_delay=self.initial_delay,
            backoff_factor=self.backoff_factor,
        )

    def release_policy(self) -> _core.Policy | None:
        if self.release is None:
            return None
        return _core.Policy(
            timeout=self.release_timeout,
            retries=self.release_retries,
            retryable_exceptions=self.release_retryable,
            initial_delay=self.release_initial_delay,
        )

    def runtime(self) -> NodeRuntime:
        return NodeRuntime(
            name=self.name,
            origin=f"tests.{self.name}",
            call=self.call,
            args=tuple((name, name) for name in self.inputs),
            defaults=dict(self.defaults),
            input_checks=self.input_checks,
            output_check=self.output_check,
            retryable=self.retryable,
            output_type=self.output_type,
            release=None
            if self.release is None
            else ReleaseRuntime(
                origin=f"tests.release_{self.name}",
                call=self.release,
                retryable=self.release_retryable,
            ),
        )


def prepare(
    nodes: Sequence[Node], outputs: Sequence[str], replaced: Sequence[str] = ()
) -> tuple[_core.Plan, list[NodeRuntime]]:
    graph = _core.Graph(
        [(n.name, list(n.inputs), list(n.borrows), n.policy(), n.release_policy()) for n in nodes]
    )
    plan = graph.select(list(outputs), list(replaced))
    by_name = {n.name: n for n in nodes}
    return plan, [by_name[name].runtime() for name in plan.nodes]


def opened(
    nodes: Sequence[Node],
    outputs: Sequence[str],
    values: Mapping[str, Any] | None = None,
    *,
    seed: int | None = None,
    table: dict[str, Any] | None = None,
) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
    plan, runtimes = prepare(nodes, outputs)
    if table is None:
        table = dict(values or {})
    # As a prepared plan runs: the core carries out lone quick calls (docs/internals.md).
    return open_run(plan, runtimes, table, outputs, seed=seed, carrier=carrier_of(runtimes))


async def execute(
    nodes: Sequence[Node],
    outputs: Sequence[str],
    values: Mapping[str, Any] | None = None,
    *,
    seed: int | None = None,
) -> dict[str, Any]:
    async with opened(nodes, outputs, values, seed=seed) as result:
        return result


@contextlib.contextmanager
def clean_loop() -> Iterator[list[dict[str, Any]]]:
    """Assert the block leaves no task pending, no loop error and no RuntimeWarning.

    Checks run when the block exits, before anything else gets a chance to run.
    """
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield errors
            pending = asyncio.all_tasks() - {asyncio.current_task()}
            gc.collect()
        assert pending == set(), f"tasks left pending: {pending}"
        assert errors == [], f"loop errors: {errors}"
        runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert runtime == [], f"warnings: {[str(w.message) for w in runtime]}"
    finally:
        loop.set_exception_handler(previous)


class Journal:
    """An ordered log of what the test's callables did."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def __call__(self, entry: str) -> None:
        self.entries.append(entry)

    def count(self, entry: str) -> int:
        return self.entries.count(entry)

    def index(self, entry: str) -> int:
        return self.entries.index(entry)


async def started(event: asyncio.Event, limit: float = 5.0) -> None:
    """Wait for ``event`` (with a generous limit so a bug fails instead of hanging)."""
    async with asyncio.timeout(limit):
        await event.wait()


def notes(exc: BaseException) -> list[str]:
    return list(getattr(exc, "__notes__", []))


class Mode:
    """Run one tested node alone (awaited inline) or beside a companion (as a task)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.finish = asyncio.Event()  # the tested node sets it when it returns
        self.tasks: list[asyncio.Task[Any] | None] = []

    def seen(self) -> None:
        """Call inside the tested node: records which task ran it."""
        self.tasks.append(running_task())

    def nodes(self, node: Node) -> tuple[list[Node], list[str]]:
        if self.name == "inline":
            return [node], [node.name]

        async def companion() -> None:
            await self.finish.wait()

        return [node, Node("companion", companion)], [node.name, "companion"]

    def check(self, runner: asyncio.Task[Any] | None = None) -> None:
        """The node ran inline in the run's phase task or in attempt tasks of its own,
        never in the caller's task; ``runner`` is the task that awaited the run when it is
        not the current one."""
        me = runner or asyncio.current_task()
        assert self.tasks, "the tested node never ran"
        assert all(task is not None and task is not me for task in self.tasks)
        coordinators = {coordinator_of(task) for task in self.tasks}
        if self.name == "inline":
            assert coordinators == {"coordinate"}
            assert len(set(self.tasks)) == 1  # every attempt in the one forward task
        else:
            assert coordinators == {"Calls._attempt_task"}
        if runner is None:
            assert me is not None and me.cancelling() == 0  # timeouts took their cancels back


_coordinators: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = weakref.WeakKeyDictionary()


def running_task() -> asyncio.Task[Any]:
    """``asyncio.current_task()``, remembering which coroutine that task runs, for
    :func:`coordinator_of`. Call it inside a node, while the task runs: a finished task's
    coroutine cannot be asked for (``Task.get_coro()`` returns None on CPython 3.13 and
    crashes 3.12.1 when the task ran under the eager task factory)."""
    task = asyncio.current_task()
    assert task is not None
    coroutine = task.get_coro()  # the task is running: its coroutine is there
    _coordinators[task] = str(getattr(coroutine, "__qualname__", repr(coroutine)))
    return task


def coordinator_of(task: asyncio.Task[Any] | None) -> str:
    """The qualified name of the coroutine ``task`` ran, as :func:`running_task` saw it while
    the task ran (for telling the driver's tasks apart)."""
    assert task is not None
    assert task in _coordinators, f"{task!r} was not seen running (use running_task())"
    return _coordinators[task]


MODES = ["inline", "task"]


class Runner:
    """Runs a coroutine in its own task and keeps what it raised (the very object)."""

    def __init__(self, make: Callable[[], Awaitable[Any]]) -> None:
        self.raised: BaseException | None = None
        self.task = asyncio.create_task(self._run(make))

    async def _run(self, make: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await make()
        except BaseException as exc:
            self.raised = exc
            raise

    async def outcome(self) -> BaseException | None:
        await asyncio.wait([self.task])
        return self.raised


async def yield_a_few(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)
