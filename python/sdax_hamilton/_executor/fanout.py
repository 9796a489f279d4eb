"""Fan-out (``Parallelizable`` / ``Collect``, docs/fanout.md): the driver's side.

The core decides everything (core/src/fanout.rs): when an item is drawn, which jobs an item
grows, when the ``Collect`` node starts, when the source is closed. Here the driver carries
that out for one run:

* ``RunJobs``: the run's own job table, a copy of the plan's forward jobs that grows with the
  core (one job per branch node and item, named ``node[i]``) and gets its release jobs when
  the shutdown phase reaches them (release ``i`` is job ``n + i``, ``n`` the forward jobs
  grown by then). It reads a grown job's arguments (its item's values) and fills the
  ``Collect`` node's list.
* ``Sources``: the DRAW, CLOSE and STOP_DRAW commands: an item taken from a sync source in
  the phase's task, from an async one in a task of its own; each outcome goes through the
  coordinator's queue (``EventKind.FAN``) before the core hears of it.

Only plans with a ``Parallelizable`` node make either: every other plan keeps its tuple
``JobTable`` and never reaches this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from .. import _core
from .._failures import add_note_once
from .attempts import EventKind
from .jobs import FanOut, Job, JobTable
from .runtime import NodeRuntime

if TYPE_CHECKING:
    from .attempts import AttemptTable
    from .record import FailureRecord
    from .reporter import Reporter


class RunCalls(Protocol):
    """What ``Sources`` uses of the run's ``calls.Calls``."""

    table: AttemptTable
    run: _core.Run

    def failures(self) -> FailureRecord: ...

    def report(self) -> Reporter: ...

    def execute(self, commands: Sequence[_core.Command]) -> None: ...


_FAN: Final = EventKind.FAN
_DRAW: Final = _core.DRAW
_CLOSE: Final = _core.CLOSE
_STOP_DRAW: Final = _core.STOP_DRAW
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class _Branch:
    """How a branch node's job is made for item ``i`` (built once per run, per template)."""

    __slots__ = ("args", "fields", "job", "name", "renamed")

    def __init__(self, job: Job, per_item: frozenset[str]) -> None:
        self.job = job
        node = job.node
        self.name = node.name
        # (keyword, key, per item): a per-item key is read as ``key[i]``
        self.args = tuple((kw, key, key in per_item) for kw, key in node.args)
        # The template's other fields, given as they are to each item's node.
        self.fields = {
            f.name: getattr(node, f.name)
            for f in dataclasses.fields(node)
            if f.name not in ("name", "args")
        }
        # A call wrapped in Hamilton's node hooks (``_adapters._NodeCall``) is renamed per
        # item, so that its hooks and attempt numbers are the item's node's.
        self.renamed: Callable[[str], Any] | None = getattr(node.call, "renamed", None)

    def grown(self, item: int, job_id: int) -> Job:
        template = self.job
        name = f"{self.name}[{item}]"
        args = tuple((kw, f"{key}[{item}]" if per else key) for kw, key, per in self.args)
        fields = self.fields
        if self.renamed is not None:
            fields = {**fields, "call": self.renamed(name)}
        node = NodeRuntime(name=name, args=args, **fields)
        return Job(job_id, True, node, job_id, name, f"node {name!r}", template.retryable,
                   template.hook, None, template.guarded)  # fmt: skip


class RunJobs(list[Job]):
    """One fan-out run's job table: ``jobs[job]`` as in ``JobTable``, growing with the run."""

    nodes: tuple[NodeRuntime, ...]
    forward_count: int
    carrier: None
    cache: None
    shared: Any
    fan_outs: tuple[FanOut, ...]

    def __init__(self, plan_jobs: JobTable) -> None:
        fan_outs = plan_jobs.fan_outs
        assert fan_outs is not None
        n = plan_jobs.forward_count
        super().__init__(plan_jobs[:n])
        self._plan_jobs = plan_jobs
        self.nodes = plan_jobs.nodes
        self.forward_count = n
        self.carrier = None
        self.cache = None
        self.shared = plan_jobs.shared
        self.fan_outs = fan_outs
        self.items = [0] * len(fan_outs)
        self._plan_arguments = plan_jobs.calling.arguments
        self._branches: list[list[_Branch]] = []
        self._reads: list[tuple[tuple[str, int], ...]] = []
        self._unread: dict[str, int] = {}  # ``key[i]`` -> the item's nodes yet to read it
        for fan in fan_outs:
            per_item = frozenset(
                [plan_jobs[fan.source].name, *(plan_jobs[t].name for t in fan.templates)]
            )
            branches = [_Branch(plan_jobs[t], per_item) for t in fan.templates]
            self._branches.append(branches)
            # How many of the item's nodes read each of its values (the collected one is
            # the Collect node's): a value is dropped once the last of them has read it, so
            # a long source keeps no intermediate values of the items it is done with.
            reads: dict[str, int] = {}
            for branch in branches:
                for _kw, key, per in branch.args:
                    if per and key != fan.collected:
                        reads[key] = reads.get(key, 0) + 1
            self._reads.append(tuple(reads.items()))
        self._collects = {fan.collect: f for f, fan in enumerate(fan_outs)}
        # ``Calls._grow``, held weakly (the run's parts form no cycle).
        self.on_grow: weakref.WeakMethod[Callable[[int, bool], None]] | None = None
        self._released = False

    @property
    def calling(self) -> RunJobs:
        """Reads arguments as the plan's carrier does (``arguments`` below); a property, so
        the table refers to nothing of its own (no cycle to collect)."""
        return self

    def listed(self, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """The plan's nodes as a run lists them: a branch node only as ``node[i]``, when
        item ``i`` grows it."""
        templates = {t for fan in self.fan_outs for t in fan.templates}
        return tuple(name for i, name in enumerate(nodes) if i not in templates)

    def __getitem__(self, job: Any) -> Any:
        try:
            return list.__getitem__(self, job)
        except IndexError:
            if self._released or type(job) is not int:
                raise
        self._add_releases()
        return list.__getitem__(self, job)

    def grow(self, f: int) -> None:
        """The core grew item ``items[f]`` of fan-out ``f``: one job per branch node."""
        item = self.items[f]
        self.items[f] = item + 1
        first = len(self)
        branches = self._branches[f]
        self.extend(b.grown(item, first + k) for k, b in enumerate(branches))
        unread = self._unread
        for key, count in self._reads[f]:
            unread[f"{key}[{item}]"] = count
        self.forward_count = len(self)
        self._grew(len(branches), True)

    def _add_releases(self) -> None:
        """The shutdown phase began: release ``i`` is job ``n + i``."""
        self._released = True
        n = len(self)
        self.extend(
            Job(n + i, False, job.node, i, job.name, f"release of {job.name!r}",
                () if job.node.release is None else job.node.release.retryable,
                None if job.node.release is None else job.node.release.retry_after,
                job.node.release)
            for i, job in enumerate(list.__iter__(self))
            if i < n
        )  # fmt: skip
        self._grew(n, False)

    def _grew(self, jobs: int, forward: bool) -> None:
        grow = None if self.on_grow is None else self.on_grow()
        if grow is not None:
            grow(jobs, forward)

    def arguments(self, job: int, values: dict[str, Any]) -> dict[str, Any]:
        """A forward job's first arguments, as ``Carrier.arguments`` reads them (src/carry.rs):
        a grown job's from its item's values, a ``Collect`` node's list filled first."""
        f = self._collects.get(job)
        if f is not None:
            fan = self.fan_outs[f]
            key = fan.collected
            pop = values.pop
            values[key] = [pop(f"{key}[{i}]") for i in range(self.items[f])]
        if job < self._plan_jobs.forward_count:
            return self._plan_arguments(job, values)
        node = list.__getitem__(self, job).node
        kwargs = {kw: values[key] for kw, key in node.args}
        unread = self._unread
        for _kw, key in node.args:
            left = unread.get(key)
            if left is not None:
                if left == 1:
                    del unread[key]
                    del values[key]
                else:
                    unread[key] = left - 1
        if node.defaults:
            for kw, default in node.defaults.items():
                kwargs.setdefault(kw, default)
        for kw, check in node.input_checks:
            if not check(kwargs[kw]):
                raise TypeError(f"Invalid input for {node.name}.{kw}")
        return kwargs


class Sources:
    """The sources of one run's fan-outs: DRAW, CLOSE and STOP_DRAW carried out."""

    __slots__ = ("_abandoned", "_calls", "_closing", "_draws", "_its", "_jobs", "_values")

    def __init__(self, calls: RunCalls, jobs: RunJobs, values: dict[str, Any]) -> None:
        # Weak: ``calls`` holds this object, and a run's parts form no cycle (they are freed
        # by reference counting when the run is over, tests/test_driver_memory.py).
        self._calls = weakref.proxy(calls)
        self._jobs = jobs
        self._values = values
        self._its: dict[int, Iterator[Any] | AsyncIterator[Any] | None] = {}
        self._draws: dict[int, asyncio.Task[None]] = {}  # in flight from async sources
        self._closing: set[int] = set()  # whose task in ``_draws`` is an ``aclose()``
        self._abandoned = False  # ``salvage``: nothing more is reported to the core

    def execute(self, op: int, job: int, item: int) -> None:
        post = self._calls.table.post
        if op == _DRAW:
            if self._jobs.fan_outs[self._fan(job)].limit is None:
                # No bound: the next draw waits for a turn of the loop, so that the
                # branches already started run meanwhile (a failure among them stops an
                # endless source) rather than every item being drawn first.
                asyncio.get_running_loop().call_soon(post, (_FAN, self._draw, (job, item)))
            else:
                post((_FAN, self._draw, (job, item)))
        elif op == _CLOSE:
            post((_FAN, self._close, job))
        elif op == _STOP_DRAW:
            task = self._draws.get(job)
            if task is not None:
                task.cancel()
        else:  # pragma: no cover - contract violation by the core
            raise RuntimeError(f"sdax_hamilton internal error: unknown command {op!r}")

    def _iterator(self, job: int) -> Iterator[Any] | AsyncIterator[Any]:
        it = self._its.get(job)
        if it is None:
            source = self._values[self._jobs[job].name]
            if hasattr(source, "__anext__"):
                it = source
            elif hasattr(source, "__aiter__"):
                it = source.__aiter__()
            else:
                it = iter(source)
            self._its[job] = it
        return it

    def _draw(self, payload: tuple[int, int]) -> None:
        job, item = payload
        if self._abandoned:
            return
        run = self._calls.run
        if run.aborted:
            # Stopped while this draw waited in the queue: nothing is drawn; the core drops
            # the "item" and has the source closed.
            self._calls.execute(run.drawn(job, True))
            return
        try:
            it = self._iterator(job)
        except BaseException as exc:
            self._failed(job, item, exc)
            return
        if hasattr(it, "__anext__"):
            draw: Any = anext(cast("AsyncIterator[Any]", it))
            task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(draw)
            self._draws[job] = task
            # A callback, not code in the task: a task cancelled before its first step
            # (STOP_DRAW at once) runs none of its own code, but its callbacks run.
            task.add_done_callback(lambda done: self._draw_done(job, item, done))
            return
        try:
            value = next(it)
        except StopIteration:
            self._drawn(job, item, False, None)
        except BaseException as exc:
            self._failed(job, item, exc)
        else:
            self._drawn(job, item, True, value)

    def _draw_done(self, job: int, item: int, task: asyncio.Task[Any]) -> None:
        post = self._calls.table.post
        if task.cancelled():
            post((_FAN, self._ended, (job, item, False, False, asyncio.CancelledError())))
            return
        exc = task.exception()
        if exc is None:
            post((_FAN, self._ended, (job, item, True, True, task.result())))
        elif isinstance(exc, StopAsyncIteration):
            post((_FAN, self._ended, (job, item, True, False, None)))
        else:
            post((_FAN, self._ended, (job, item, False, False, exc)))

    def _ended(self, payload: tuple[int, int, bool, bool, Any]) -> None:
        job, item, ok, has, value = payload
        if self._abandoned:
            return
        self._draws.pop(job, None)
        if ok:
            self._drawn(job, item, has, value)
        else:
            self._failed(job, item, value)

    def _drawn(self, job: int, item: int, has: bool, value: Any) -> None:
        calls = self._calls
        run = calls.run
        if has and not run.aborted:
            fan = self._jobs.fan_outs[self._fan(job)]
            if fan.item_check is not None and not fan.item_check(value):
                name = self._jobs[job].name
                self._failed(job, item, TypeError(f"Invalid item from {name}: item {item}"))
                return
            self._values[f"{self._jobs[job].name}[{item}]"] = value
            commands = run.drawn(job, True)
            self._jobs.grow(self._fan(job))
        else:
            commands = run.drawn(job, has)
        calls.execute(commands)

    def _failed(self, job: int, item: int, exc: BaseException) -> None:
        calls = self._calls
        run = calls.run
        stopped = isinstance(exc, asyncio.CancelledError) and run.aborted
        if not stopped:
            subject = self._jobs[job].subject
            if isinstance(exc, _TERMINATION):
                calls.failures().terminate(exc)
            else:
                try:
                    add_note_once(
                        exc,
                        f"sdax_hamilton: {subject} failed: its source raised drawing item {item}",
                    )
                except BaseException:
                    pass
                calls.report().failed_for_good(job, exc, run.attempts(job))
                calls.failures().failed(exc)
        calls.execute(run.draw_failed(job))

    def _fan(self, job: int) -> int:
        for f, fan in enumerate(self._jobs.fan_outs):
            if fan.source == job:
                return f
        raise RuntimeError(f"sdax_hamilton internal error: job {job} has no fan-out")

    def _source(self, job: int) -> Any:
        it: Any = self._its.pop(job, None)
        if it is None:  # never drawn from: the source object itself may be a generator
            it = self._values.get(self._jobs[job].name)
        return it

    def _close(self, job: int) -> None:
        if self._abandoned:
            return
        it = self._source(job)
        try:
            if hasattr(it, "aclose"):
                task = asyncio.get_running_loop().create_task(it.aclose())
                self._draws[job] = task
                self._closing.add(job)
                task.add_done_callback(lambda done: self._close_done(job, done))
                return
            close = getattr(it, "close", None)
            if close is not None:
                close()
        except BaseException as exc:
            self._close_failed(job, exc)
        self._calls.execute(self._calls.run.closed(job))

    def _close_done(self, job: int, task: asyncio.Task[Any]) -> None:
        exc = asyncio.CancelledError() if task.cancelled() else task.exception()
        self._calls.table.post((_FAN, self._closed_async, (job, exc)))

    def _closed_async(self, payload: tuple[int, BaseException | None]) -> None:
        job, exc = payload
        if self._abandoned:
            return
        self._draws.pop(job, None)
        self._closing.discard(job)
        if exc is not None:
            self._close_failed(job, exc)
        self._calls.execute(self._calls.run.closed(job))

    def _close_failed(self, job: int, exc: BaseException) -> None:
        """Closing the source raised: a failure of the source node like any other."""
        calls = self._calls
        if isinstance(exc, _TERMINATION):
            calls.failures().terminate(exc)
            return
        subject = self._jobs[job].subject
        try:
            add_note_once(exc, f"sdax_hamilton: {subject} failed: closing its source raised")
        except BaseException:
            pass
        calls.failures().failed(exc)

    async def salvage(self, commands: Sequence[_core.Command]) -> None:
        """The run is being salvaged (``coordinator.salvage``): carry out the core's CLOSEs
        (``Run.close_sources``) to their end, now, reporting none of them; a draw in flight
        is stopped first, a close in flight awaited. From here on nothing queued for the
        sources reaches the core."""
        self._abandoned = True
        for _op, job, _item, _arg in commands:
            task = self._draws.pop(job, None)
            closing = job in self._closing
            self._closing.discard(job)
            if task is not None:
                if not closing:
                    task.cancel()
                try:
                    await task
                except BaseException as exc:
                    if closing:
                        self._close_failed(job, exc)
                if closing:
                    continue
            it = self._source(job)
            try:
                if hasattr(it, "aclose"):
                    await it.aclose()
                else:
                    close = getattr(it, "close", None)
                    if close is not None:
                        close()
            except BaseException as exc:
                self._close_failed(job, exc)
