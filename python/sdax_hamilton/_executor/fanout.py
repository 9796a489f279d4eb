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
* ``Items``: the items' nodes carried out one after the other in a task per item, with no
  record per item, until something needs the driver (docs/internals.md, "Carried items").

Only plans with a ``Parallelizable`` node make either: every other plan keeps its tuple
``JobTable`` and never reaches this module.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import inspect
import itertools
import types
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from .. import _core
from .._failures import add_note_once
from .attempts import (
    CALLED,
    CANCEL_MISSED,
    CANCELLED,
    RAISED,
    RETURNED,
    RUNNING,
    UNSTARTED,
    Attempt,
    AttemptState,
    EventKind,
)
from .jobs import FanOut, Job, JobTable
from .runtime import NodeRuntime, _takes_positionally

if TYPE_CHECKING:
    from .attempts import AttemptTable
    from .record import FailureRecord
    from .reporter import Reporter


class RunCalls(Protocol):
    """What ``Sources`` uses of the run's ``calls.Calls``."""

    table: AttemptTable
    run: _core.Run
    watching: bool
    clipped: list[int] | None
    kwargs: list[dict[str, Any] | None]

    def failures(self) -> FailureRecord: ...

    def report(self) -> Reporter: ...

    def execute(self, commands: Sequence[_core.Command]) -> None: ...


_FAN: Final = EventKind.FAN
_DRAW: Final = _core.DRAW
_CLOSE: Final = _core.CLOSE
_STOP_DRAW: Final = _core.STOP_DRAW
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)
_FAN_OPS: Final = (_DRAW, _CLOSE, _STOP_DRAW)
_START: Final = _core.START
_CoroutineType: Final = types.CoroutineType
_isawaitable: Final = inspect.isawaitable
# What a call of an item's node came to, when not its value (``Items._settled``).
_AWAIT: Final = object()
_HANDED: Final = object()
_MISSING: Final = object()
_UNCALLED: Final = object()  # ``Items._go``: the node is yet to be called


def _passes(check: Callable[[Any], bool], value: Any) -> bool:
    """Whether ``value`` passes an output check; one that raises fails it (the driver checks
    it again, and reports what it raised)."""
    try:
        return check(value)
    except BaseException:
        return False


class _Branch:
    """How a branch node's job is made for item ``i`` (built once per run, per template).

    Until something needs a grown job's record (``Job``, with its item's ``NodeRuntime``),
    the run's table holds this object in its place: an item whose nodes ``Items.carry``
    carries out to their end never gets one (``RunJobs.__getitem__`` makes it on demand)."""

    __slots__ = (
        "after", "args", "call", "carried", "checks", "fan", "fields", "hands", "job", "name",
        "output_check", "own", "pos", "positional", "renamed",
    )  # fmt: skip

    def __init__(
        self, job: Job, fan: int, pos: int, per_item: frozenset[str], carried: bool
    ) -> None:
        self.job = job
        self.fan = fan
        self.pos = pos  # its place in the branch: item ``i``'s job is ``first[i] + pos``
        node = job.node
        self.name = node.name
        # (keyword, key, per item): a per-item key is read as ``key[i]``
        self.args = tuple((kw, key, key in per_item) for kw, key in node.args)
        keywords = [kw for kw, _key in node.args]
        # Its input checks by the index of their argument in ``args`` (a check of a
        # keyword given by its default: not carried).
        checked = all(kw in keywords for kw, _check in node.input_checks)
        self.checks = tuple(
            (keywords.index(kw), check) for kw, check in node.input_checks if kw in keywords
        )
        # The template's other fields, given as they are to each item's node.
        self.fields = {
            f.name: getattr(node, f.name)
            for f in dataclasses.fields(node)
            if f.name not in ("name", "args")
        }
        # A call wrapped in Hamilton's node hooks (``_adapters._NodeCall``) is renamed per
        # item, so that its hooks and attempt numbers are the item's node's.
        self.renamed: Callable[[str], Any] | None = getattr(node.call, "renamed", None)
        self.call = node.call
        self.output_check = node.output_check
        self.positional = not node.defaults and _takes_positionally(node.call, node.args)
        # Its first attempts may be carried out by ``Items.carry``: nothing around the
        # call needs the driver's records (no guard, hedging, release or node hooks).
        self.carried = (
            checked
            and carried
            and not (job.guarded or node.release is not None or self.renamed is not None)
        )
        # The item's next node of the branch (``RunJobs.__init__``), when it may be carried
        # too: what an item's task goes on with after this node (``Items._go``).
        self.after: _Branch | None = None
        # Its arguments' keys when each is its item's own value read by this node alone and
        # unchecked (``RunJobs.carried_args`` takes them out of the values at once).
        self.own: tuple[str, ...] | None = None
        # Its value goes to ``after`` alone, as that node's only argument: an item's task
        # hands it over without storing it (``Items._onward``).
        self.hands = False

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


def _link(branches: list[_Branch], once: set[str]) -> None:
    """What an item's task needs to go from node to node of one fan-out's ``branches``
    (``_Branch.after``, ``own`` and ``hands``); ``once``: the per-item values read by one
    node of the item."""
    for branch, after in itertools.pairwise(branches):
        if after.carried:
            branch.after = after
    for branch in branches:
        if not branch.checks and all(per and key in once for _kw, key, per in branch.args):
            branch.own = tuple(key for _kw, key, _per in branch.args)
    for branch in branches:
        following = branch.after
        branch.hands = following is not None and following.own == (branch.name,)


class RunJobs(list[Any]):
    """One fan-out run's job table: ``jobs[job]`` as in ``JobTable``, growing with the run.

    A grown job's place holds its template's ``_Branch`` until its record is first read
    (``__getitem__``), and a release's place its owner's id until then: a run whose items
    are carried out to their end (``Items.carry``) makes no record per item."""

    __slots__ = (
        "_branches", "_collects", "_on_grow", "_once", "_plan_arguments", "_plan_jobs",
        "_reads", "_released", "_room", "_unread", "cache", "carrier", "fan_of", "fan_outs",
        "firsts", "forward_count", "items", "nodes", "plan_forward", "shared", "source_names",
    )  # fmt: skip

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
        self.plan_forward = n
        self.carrier = None
        self.cache = None
        self.shared = plan_jobs.shared
        self.fan_outs = fan_outs
        self.items = [0] * len(fan_outs)
        self._plan_arguments = plan_jobs.calling.arguments
        self._branches: list[list[_Branch]] = []
        self._reads: list[tuple[tuple[str, int], ...]] = []
        self._unread: dict[str, int] = {}  # ``key[i]`` -> the item's nodes yet to read it
        self._once: set[str] = set()  # per-item values read by one node of the item
        # Per fan-out, per item: the id of its first grown job (its jobs are contiguous).
        self.firsts: list[list[int]] = [[] for _ in fan_outs]
        carried = plan_jobs.cache is None
        for f, fan in enumerate(fan_outs):
            per_item = frozenset(
                [plan_jobs[fan.source].name, *(plan_jobs[t].name for t in fan.templates)]
            )
            branches = [
                _Branch(plan_jobs[t], f, pos, per_item, carried)
                for pos, t in enumerate(fan.templates)
            ]
            self._branches.append(branches)
            # How many of the item's nodes read each of its values (the collected one is
            # the Collect node's): a value is dropped once the last of them has read it, so
            # a long source keeps no intermediate values of the items it is done with.
            # A value read by one node is dropped by that read (``_once``); the others are
            # counted per item (``_unread``).
            reads: dict[str, int] = {}
            for branch in branches:
                for _kw, key, per in branch.args:
                    if per and key != fan.collected:
                        reads[key] = reads.get(key, 0) + 1
            self._reads.append(tuple((key, n) for key, n in reads.items() if n > 1))
            self._once.update(key for key, n in reads.items() if n == 1)
            _link(branches, self._once)
        self._collects = {fan.collect: f for f, fan in enumerate(fan_outs)}
        self.fan_of = {fan.source: f for f, fan in enumerate(fan_outs)}  # by source job
        self.source_names = [plan_jobs[fan.source].name for fan in fan_outs]
        self._on_grow: weakref.WeakMethod[Callable[[int, bool], None]] | None = None
        self._released = False
        self._room = n  # job ids the run's other tables have room for (``_grew``)

    @property
    def on_grow(self) -> weakref.WeakMethod[Callable[[int, bool], None]] | None:
        """``Calls._grow``, held weakly (the run's parts form no cycle); its tables are
        made with room for the jobs there are when it is set."""
        return self._on_grow

    @on_grow.setter
    def on_grow(self, grow: weakref.WeakMethod[Callable[[int, bool], None]] | None) -> None:
        self._on_grow = grow
        self._room = len(self)

    def __iter__(self) -> Iterator[Any]:
        for job in range(len(self)):
            yield self[job]

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
            entry = list.__getitem__(self, job)
        except IndexError:
            if self._released or type(job) is not int:
                raise
            self._add_releases()
            entry = list.__getitem__(self, job)
        if type(entry) is _Branch:  # a grown job's record, made when first read
            entry = entry.grown(self.item_of(job, entry), job)
            list.__setitem__(self, job, entry)
        elif type(entry) is int:  # a release's, likewise
            entry = self._release(job, self[entry])
            list.__setitem__(self, job, entry)
        return entry

    def item_of(self, job: int, branch: _Branch) -> int:
        """The item of grown job ``job`` of ``branch``."""
        return bisect.bisect_right(self.firsts[branch.fan], job) - 1

    def unmade(self, job: int) -> _Branch | None:
        """The branch of grown job ``job`` while it has no record (``None``: it has one, or
        it is not a grown job)."""
        entry = list.__getitem__(self, job)
        return entry if type(entry) is _Branch else None

    def grow(self, f: int) -> None:
        """The core grew item ``items[f]`` of fan-out ``f``: one job per branch node."""
        item = self.items[f]
        self.items[f] = item + 1
        self.firsts[f].append(len(self))
        self.extend(self._branches[f])
        unread = self._unread
        for key, count in self._reads[f]:
            unread[f"{key}[{item}]"] = count
        n = self.forward_count = len(self)
        if n > self._room:
            # The run's tables per job id grow ahead, by half again (ids past the jobs
            # are never used): not once per item.
            more = max(n - self._room, self._room // 2)
            self._room += more
            self._grew(more, True)

    def _add_releases(self) -> None:
        """The shutdown phase began: release ``i`` is job ``n + i`` (its record made when
        first read)."""
        self._released = True
        n = len(self)
        self.extend(range(n))
        # Release ``i`` is job ``n + i``: the tables have room for ids up to ``2n`` (they
        # hold ``_room >= n`` forward ids already).
        self._grew(n, False)

    @staticmethod
    def _release(job: int, owner: Job) -> Job:
        release = owner.node.release
        return Job(job, False, owner.node, owner.id, owner.name, f"release of {owner.name!r}",
                   () if release is None else release.retryable,
                   None if release is None else release.retry_after, release)  # fmt: skip

    def _grew(self, jobs: int, forward: bool) -> None:
        grow = None if self._on_grow is None else self._on_grow()
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
        if job < self.plan_forward:
            return self._plan_arguments(job, values)
        node = self[job].node
        kwargs = {kw: values[key] for kw, key in node.args}
        self._read((key for _kw, key in node.args), values)
        if node.defaults:
            for kw, default in node.defaults.items():
                kwargs.setdefault(kw, default)
        for kw, check in node.input_checks:
            if not check(kwargs[kw]):
                raise TypeError(f"Invalid input for {node.name}.{kw}")
        return kwargs

    def _read(self, keys: Iterable[str], values: dict[str, Any]) -> None:
        """A grown job's arguments were read: a value none of its item's nodes is yet to
        read is dropped."""
        unread = self._unread
        once = self._once
        for key in keys:
            left = unread.get(key)
            if left is None:
                if key.rpartition("[")[0] in once:
                    values.pop(key, None)
            elif left == 1:
                del unread[key]
                values.pop(key, None)
            else:
                unread[key] = left - 1

    def carried_args(
        self, branch: _Branch, suffix: str, values: dict[str, Any]
    ) -> list[Any] | None:
        """The arguments (in ``branch.args``' order) of the first attempt of ``branch``'s
        node for the item whose values' keys end in ``suffix`` (``"[i]"``), read and checked
        as ``arguments`` does, a value none of the item's nodes is yet to read dropped;
        ``None`` when they cannot be passed so (a value missing, a check failing or raising:
        nothing is dropped, and ``arguments`` reads them again for the driver, which
        reports)."""
        owned = branch.own
        if owned is not None:  # each its item's own, read by this node alone: taken out now
            if len(owned) == 1:
                got = values.pop(owned[0] + suffix, _MISSING)
                return None if got is _MISSING else [got]
            keys = [key + suffix for key in owned]
            if not all(key in values for key in keys):
                return None
            pop = values.pop
            return [pop(key) for key in keys]
        read = []
        once: list[str] = []  # read by this node only
        counted: list[str] = []  # read by others of the item too
        try:
            for _kw, key, per in branch.args:
                if per:
                    own = key + suffix
                    (once if key in self._once else counted).append(own)
                    read.append(values[own])
                else:
                    read.append(values[key])
            checks = branch.checks
            if checks:
                for index, check in checks:
                    if not check(read[index]):
                        return None
        except Exception:
            return None
        for key in once:
            values.pop(key, None)
        if counted:
            self._read(counted, values)
        return read


class Sources:
    """The sources of one run's fan-outs: DRAW, CLOSE and STOP_DRAW carried out; its
    ``items`` carry out the items' nodes (``Items``)."""

    __slots__ = (
        "__weakref__", "_abandoned", "_calls", "_closing", "_draws", "_here", "_its", "_jobs",
        "_run", "_values", "cancel", "cancel_all", "carry", "items",
    )  # fmt: skip

    carry: Callable[[int, int, float | None], bool]
    """``Items.carry``."""
    cancel: Callable[[int], bool]
    """``Items.cancel``."""
    cancel_all: Callable[[], None]
    """``Items.cancel_all``."""

    def __init__(self, calls: RunCalls, jobs: RunJobs, values: dict[str, Any]) -> None:
        # Weak: ``calls`` holds this object, and a run's parts form no cycle (they are freed
        # by reference counting when the run is over, tests/test_driver_memory.py).
        self._calls = weakref.proxy(calls)
        self._run = calls.run  # the core's Run refers to nothing of the driver's
        self._jobs = jobs
        self._values = values
        self._its: dict[int, Iterator[Any] | AsyncIterator[Any] | None] = {}
        # Sync sources with a bound, by job: an item's end draws the next item from one
        # in the item's task (``draw_here``).
        self._here: dict[int, Iterator[Any]] = {}
        self._draws: dict[int, asyncio.Task[None]] = {}  # in flight from async sources
        self._closing: set[int] = set()  # whose task in ``_draws`` is an ``aclose()``
        self._abandoned = False  # ``salvage``: nothing more is reported to the core
        self.items = Items(calls, jobs, values, self)
        # Its methods the run's ``Calls`` and the coordinator call, at no extra call.
        self.carry = self.items.carry
        self.cancel = self.items.cancel
        self.cancel_all = self.items.cancel_all

    def draw_here(self, job: int, item: int) -> bool:
        """An item's end freed the place the DRAW of ``item`` from ``job``'s source is for:
        from a sync source with a bound, it is drawn now, in the item's task, as the
        coordinator would have (``True``)."""
        it = self._here.get(job)
        if it is None:
            return False
        if self._abandoned or self._run.aborted:
            self._draw((job, item))  # which says what then
        else:
            self._next_of(job, item, it)
        return True

    def execute(self, op: int, job: int, item: int) -> None:
        post = self._calls.table.post
        if op == _DRAW:
            if self._jobs.fan_outs[self._jobs.fan_of[job]].limit is None:
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
                if self._jobs.fan_outs[self._jobs.fan_of[job]].limit is not None:
                    self._here[job] = it
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
        here = self._here.get(job)
        if here is not None:
            self._next_of(job, item, here)
            return
        it = self._its.get(job)
        if it is None:
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
        self._next_of(job, item, it)

    def _next_of(self, job: int, item: int, it: Iterator[Any]) -> None:
        """Draw ``item`` from ``job``'s sync source ``it``, now."""
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
        run = self._run
        if has and not run.aborted:
            jobs = self._jobs
            f = jobs.fan_of[job]
            check = jobs.fan_outs[f].item_check
            if check is not None and not check(value):
                name = jobs[job].name
                self._failed(job, item, TypeError(f"Invalid item from {name}: item {item}"))
                return
            suffix = f"[{item}]"  # the end of the item's values' keys
            self._values[jobs.source_names[f] + suffix] = value
            commands = run.drawn(job, True)
            jobs.grow(f)
            if len(commands) == 1:  # the item's first START, most often
                op, first, attempt, timeout = commands[0]
                if (
                    op == _START
                    and first >= jobs.firsts[f][-1]
                    and self.items.carry(first, attempt, timeout, suffix)
                ):
                    return
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
        f = self._jobs.fan_of.get(job)
        if f is None:
            raise RuntimeError(f"sdax_hamilton internal error: job {job} has no fan-out")
        return f

    def _source(self, job: int) -> Any:
        self._here.pop(job, None)
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


class Items:
    """One run's items carried out (its ``Sources.items``).

    The core STARTs each grown job as it STARTs any job; a first attempt without a
    timeout of a node that needs no record around its call (``_Branch.carried``) is
    carried out here, the way the core's carrier carries out a lone START (src/carry.rs):
    called with its item's values, its value stored, the core told, and the item's next
    START carried out the same way. An item's async nodes run in one task of its own
    (``_fly``), one after the other, as a hand-written ``gather`` of items would: the
    first step of every node runs in the task that goes on with it. Whatever needs the
    driver (a failure, a cancellation, a value whose check fails) is handed to it as the
    attempt it would have had at that point (``_hand_off``), with the job's record made
    then. Nothing is decided here: which job starts next is the core's.
    """

    __slots__ = (
        "_calls", "_carrying", "_flights", "_jobs", "_run", "_sources", "_table", "_values",
    )  # fmt: skip

    def __init__(
        self, calls: RunCalls, jobs: RunJobs, values: dict[str, Any], sources: Sources
    ) -> None:
        self._calls = weakref.proxy(calls)
        self._sources = weakref.proxy(sources)  # which holds this object
        self._jobs = jobs
        self._values = values
        # Whether the run lets items be carried out (nobody watches attempts, no run
        # timeout); the items in flight, by the job each is at.
        self._carrying = not calls.watching and calls.clipped is None
        self._flights: dict[int, _Flight] = {}
        self._run = calls.run  # the core's Run refers to nothing of the driver's
        # The run's attempts and coordinator's queue (``Calls`` holds it for the run too).
        self._table = calls.table

    def carry(
        self, job: int, attempt: int, timeout: float | None, suffix: str | None = None
    ) -> bool:
        """Carry out START ``job`` (``attempt``, ``timeout``; ``suffix``: its item's
        ``"[i]"``, when the caller knows it) if it may be; else ``False`` and the driver
        carries it out (``Calls._start``)."""
        jobs = self._jobs
        if (
            attempt
            or timeout is not None
            or not self._carrying
            or not jobs.plan_forward <= job < jobs.forward_count
        ):
            return False
        branch = list.__getitem__(jobs, job)
        if type(branch) is not _Branch or not branch.carried:
            return False
        if suffix is None:
            suffix = f"[{jobs.item_of(job, branch)}]"
        args = jobs.carried_args(branch, suffix, self._values)
        if args is None:
            return False
        flight = _Flight(job, branch, suffix, args)
        if self._go(flight, _UNCALLED, False):
            table = self._table
            table.live += 1  # before create_task: an eager task factory may finish it at once
            self._flights[flight.job] = flight
            flight.task = asyncio.get_running_loop().create_task(self._fly(flight))
        return True

    def _settled(self, flight: _Flight, result: Any) -> Any:
        """What a call that did not return a coroutine returned: an awaitable (``_AWAIT``,
        in ``flight.aw``), a value that passes its node's output check, or ``_HANDED`` to
        the driver (which checks a value again and reports)."""
        try:
            awaitable = _isawaitable(result)
        except BaseException as exc:  # user code asked (a ``__class__`` property)
            self._hand_off(flight, RAISED, exc, CALLED)
            return _HANDED
        if awaitable:
            flight.aw = result
            return _AWAIT
        check = flight.branch.output_check
        if check is not None and not _passes(check, result):
            self._hand_off(flight, RETURNED, result, flight.state)
            return _HANDED
        return result

    async def _fly(self, flight: _Flight) -> None:
        """An item's task: its carried nodes, one after the other."""
        flight.state = RUNNING
        table = self._table
        flights = self._flights
        try:
            while True:
                try:
                    value = await flight.aw
                except BaseException as exc:  # never let anything escape a task
                    del flights[flight.job]
                    table.live -= 1
                    self._hand_off(flight, RAISED, exc, flight.state)
                    return
                del flights[flight.job]
                if flight.state is not RUNNING or table.events:
                    # The core cancelled it meanwhile, or outcomes the core has not heard
                    # yet wait in the coordinator's queue (another item's failure, say):
                    # this one follows them there, so the core hears of them in order.
                    table.live -= 1
                    self._hand_off(flight, RETURNED, value, flight.state)
                    return
                check = flight.branch.output_check
                if check is not None and not _passes(check, value):
                    table.live -= 1  # the driver checks it again and reports
                    self._hand_off(flight, RETURNED, value, flight.state)
                    return
                if not self._go(flight, value, True):
                    table.live -= 1
                    return
                flights[flight.job] = flight
        finally:
            del flight
            if table.live == 0:
                self._wake()

    def _go(self, flight: _Flight, value: Any, here: bool) -> bool:
        """Carry ``flight``'s item on: from its node's success with ``value``, or from the
        call of its node (``value`` is ``_UNCALLED``: its arguments read), in the item's
        task (``here``) or in ``carry``. The item's next START, if the core gives one and
        it may be carried, is called; ``True`` when what it returned is to be awaited in
        the item's task (``flight.aw``). The core's other commands are passed on
        (``_pass_on``); a call that raised, or a value the driver must see, is handed to
        it."""
        branch = flight.branch
        while True:
            if value is not _UNCALLED:
                onward = self._onward(flight, value, here)
                if onward is None:
                    return False
                branch = onward
            try:
                if branch.positional:
                    result = branch.call(*flight.args)
                else:
                    result = branch.call(**flight.kwargs())
            except BaseException as exc:
                self._hand_off(flight, RAISED, exc, CALLED)
                return False
            if type(result) is _CoroutineType:
                flight.aw = result
                return True
            value = self._settled(flight, result)
            if value is _AWAIT or value is _HANDED:
                return value is _AWAIT

    def _onward(self, flight: _Flight, value: Any, here: bool) -> _Branch | None:
        """``flight``'s node succeeded with ``value``: stored, and the core told. The
        item's next node, when the core STARTs it and it may be carried here, with
        ``flight`` moved on to it (its arguments read); else ``None``, the core's commands
        passed on."""
        branch = flight.branch
        job = flight.job
        suffix = flight.suffix
        values = self._values
        jobs = self._jobs
        hands = branch.hands
        if not hands:
            values[branch.name + suffix] = value
        after = branch.after
        commands: list[_core.Command] | None
        if after is None:
            commands = self._run.succeeded(job)
        else:  # ``None``: the core STARTs the item's next node alone
            commands = self._run.succeeded_before(job, job + 1)
        if after is not None and commands is None and list.__getitem__(jobs, job + 1) is after:
            # its job not made into a record: carried on here
            command = (_START, job + 1, 0, None)
            args = [value] if hands else jobs.carried_args(after, suffix, values)
        else:
            if commands is None:
                commands = [(_START, job + 1, 0, None)]
            if hands:  # read by the driver or after the coordinator's turn
                values[branch.name + suffix] = value
            if not commands:
                return None
            follow = self._elsewhere(flight, commands, here)
            if follow is None:
                return None
            command, after = follow
            args = jobs.carried_args(after, suffix, values)
        if args is None:  # the driver reads them again and reports
            self._pass_on([command], here, True)
            return None
        flight.job, flight.branch, flight.args = command[1], after, args
        flight.aw = None
        return after

    def _elsewhere(
        self, flight: _Flight, commands: list[_core.Command], here: bool
    ) -> tuple[_core.Command, _Branch] | None:
        """``commands`` are not the START of ``flight``'s item's next node alone: that START
        among them, if it may be carried, is returned and the others passed on; else all
        are passed on (``None``)."""
        op, job, item, _arg = commands[0]
        if len(commands) == 1 and op != _START:
            # In an item's task, the draw of the next item from a sync source with a bound
            # is made now (``Sources.draw_here``), as the coordinator would have.
            if not (here and op == _DRAW and self._sources.draw_here(job, item)):
                self._pass_on(commands, here)
            return None
        follow = self._follow(flight, commands)
        if follow is None:
            self._pass_on(commands, here)
            return None
        if len(commands) > 1:
            self._pass_on([other for other in commands if other is not follow[0]], here)
        return follow

    def _follow(
        self, flight: _Flight, commands: list[_core.Command]
    ) -> tuple[_core.Command, _Branch] | None:
        """The START among ``commands`` of ``flight``'s item's next job, if it may be
        carried out in the item's task."""
        jobs = self._jobs
        # The item's jobs are contiguous, in branch order, from ``first``.
        first = flight.job - flight.branch.pos
        fan = flight.branch.fan
        end = jobs.forward_count
        for command in commands:
            op, job, attempt, timeout = command
            if op == _START and not attempt and timeout is None and first < job < end:
                branch = list.__getitem__(jobs, job)
                if (
                    type(branch) is _Branch
                    and branch.carried
                    and branch.fan == fan
                    and job - branch.pos == first
                ):
                    return command, branch
        return None

    def _pass_on(self, commands: list[_core.Command], here: bool, starts: bool = False) -> None:
        """Commands of the core an item does not carry out itself. From ``carry`` (not
        ``here``) they are carried out at once, as any command there. In an item's task
        draws and closes are carried out as they are (``Sources`` queues them), and the
        others are queued for the coordinator."""
        calls = self._calls
        if not here:
            calls.execute(commands)
            return
        if not starts and all(command[0] in _FAN_OPS for command in commands):
            calls.execute(commands)
        else:
            calls.table.post((_FAN, calls.execute, commands))

    def _wake(self) -> None:
        """Wake the coordinator (nothing of the run may be left running)."""
        table = self._calls.table
        waiter = table.waiter
        if waiter is not None:
            table.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _hand_off(
        self, flight: _Flight, kind: EventKind, payload: Any, state: AttemptState
    ) -> None:
        """The driver goes on with ``flight``'s attempt: the attempt it would have had at
        this point (the job's record made now) and the outcome it would have posted."""
        calls = self._calls
        job = flight.job
        attempt = Attempt(self._jobs[job], 0, None)
        attempt.state = state
        attempt.aw = flight.aw
        # A call that raised or returned at once ran in no task of its own (as the
        # driver's own sync calls).
        attempt.task = None if flight.aw is None else flight.task
        calls.table.add(attempt)
        calls.kwargs[job] = flight.kwargs()  # read by its retries
        calls.table.post((kind, attempt, payload))

    def cancel(self, job: int) -> bool:
        """CANCEL ``job``: ``True`` when it is a carried item's (its task cancelled once)."""
        flight = self._flights.get(job)
        if flight is None:
            return False
        if flight.state >= CANCELLED:
            return True
        task = flight.task
        assert task is not None
        if flight.state is RUNNING:
            # False when the task has already finished: its outcome is its own.
            flight.state = CANCELLED if task.cancel() else CANCEL_MISSED
            return True
        flight.state = CANCELLED  # its task never ran a step: nothing was awaited
        task.cancel()
        task.add_done_callback(lambda _task: self._unstarted(flight))
        return True

    def _unstarted(self, flight: _Flight) -> None:
        # The task holds the cancellation it ended with, whose traceback holds its frame,
        # which holds ``flight``: no reference back to the task (no cycle).
        flight.task = None
        self._flights.pop(flight.job, None)
        self._calls.table.live -= 1
        self._hand_off(flight, UNSTARTED, None, flight.state)

    def cancel_all(self) -> None:
        """Cancel every carried item (the run is being salvaged or abandoned)."""
        for job in list(self._flights):
            self.cancel(job)


class _Flight:
    """An item carried out (``Items.carry``): the job it is at and its attempt's state."""

    __slots__ = ("args", "aw", "branch", "job", "state", "suffix", "task")

    def __init__(self, job: int, branch: _Branch, suffix: str, args: list[Any]) -> None:
        self.job = job
        self.branch = branch
        self.suffix = suffix  # its item's values' keys end in it: ``"[i]"``
        self.args = args
        self.aw: Any = None
        self.task: asyncio.Task[None] | None = None
        self.state = CALLED

    def kwargs(self) -> dict[str, Any]:
        """The attempt's arguments by keyword (as the driver keeps them for retries)."""
        given = {
            kw: value for (kw, _key, _per), value in zip(self.branch.args, self.args, strict=True)
        }
        defaults = self.branch.job.node.defaults
        if defaults:
            for kw, default in defaults.items():
                given.setdefault(kw, default)
        return given
