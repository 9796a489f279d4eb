"""A run's side of ``Driver(..., cache=)``: lookups, stores and single flight.

Two hooks into the run, and nothing else: ``Calls`` asks ``CacheRun.lookup`` for the
first attempt of a node the Driver decided to look up (``_hamilton/caching.py``), and
``Outcomes`` hands a value that passed its output check to ``CacheRun.store``. Key
computation, store reads and writes run in the cache's threads, never on the loop.

Single flight: runs of one loop that look up the same key while another run looks it up or
computes it wait for that run (``_Flight``, begun before its lookup) and take its value as
a hit; if that run does not produce it (its node failed for good, or the run stopped),
they go on as if they had missed: again one looks up and computes, the rest wait.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from typing import Any, Final, Protocol

from .._hamilton.caching import LOOKUP, NodeCache, executor
from .attempts import Attempt, AttemptTable, EventKind
from .jobs import PlanCache
from .reporter import Reporter

logger = logging.getLogger("sdax_hamilton.cache")

_STORED: Final = EventKind.STORED

MISSED: Final = object()
"""What a lookup returns when it missed: the node is to be called (``Outcomes``)."""


class _Flight:
    """One key being looked up, then computed if missed, by one run; the others wait on
    ``done``."""

    __slots__ = ("done", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        self.result: tuple[str | None, Any] | None = None  # (data version, value)


# Keys in flight, per loop (a future belongs to its loop).
_flights: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[object, str], _Flight]
] = weakref.WeakKeyDictionary()


def _in_flight(loop: asyncio.AbstractEventLoop) -> dict[tuple[object, str], _Flight]:
    table = _flights.get(loop)
    if table is None:
        table = _flights[loop] = {}
    return table


class RunCalls(Protocol):
    """What a run's lookups and stores use of its ``calls.Calls`` (a protocol: ``calls``
    imports this module, which imports nothing that imports it)."""

    @property
    def table(self) -> AttemptTable: ...
    @property
    def kwargs(self) -> list[dict[str, Any] | None]: ...
    def report(self) -> Reporter: ...


class CacheRun:
    """One run's lookups and stores of its plan's caching (made with the run's ``Calls``)."""

    __slots__ = (
        "_cache",
        "_calls",
        "_flights",
        "_hits",
        "_keys",
        "_leading",
        "_loop",
        "_nodes",
        "_replays",
        "_run_id",
        "_storing",
        "_timeouts",
        "versions",
    )

    def __init__(self, plan: PlanCache, calls: RunCalls, loop: asyncio.AbstractEventLoop) -> None:
        self._cache = plan.cache
        self._nodes = plan.nodes
        self._replays = plan.replays
        self._calls = calls
        self._loop = loop
        self._flights = _in_flight(self._loop)
        n = len(plan.nodes)
        self._hits = [False] * n
        # Per job: its key once known; "" when this call has none (nothing stored).
        self._keys: list[str | None] = [None] * n
        # job -> the key it computes (with its store's scope), and its flight
        self._leading: dict[int, tuple[tuple[object, str], _Flight]] = {}
        self._run_id: str | None = None
        self._storing: dict[int, bool] = {}  # job -> cancelled by the core meanwhile
        self._timeouts: dict[int, float | None] = {}  # job -> its first call's timeout
        self.versions: dict[str, str] = {}  # node -> data version, as Hamilton's adapter

    def looks_up(self, job: int) -> bool:
        """Whether ``job``'s first attempt starts with a lookup (once: not after a miss)."""
        node = self._nodes[job]
        return node is not None and node.mode == LOOKUP and job not in self._timeouts

    def call_timeout(self, job: int) -> float | None:
        """The timeout of ``job``'s first call, after its lookup missed."""
        return self._timeouts[job]

    def hit(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` took its value from the cache (no call was made)."""
        return attempt.number == 0 and self._hits[attempt.id]

    async def lookup(
        self, attempt: Attempt, kwargs: dict[str, Any], call_timeout: float | None
    ) -> Any:
        """Before the first attempt of a looked-up node: the stored value (a hit), or the
        value a concurrent run computed for the same key, or else ``MISSED`` (then the
        node is called, with ``call_timeout``)."""
        job = attempt.job
        self._timeouts[job.id] = call_timeout
        node = self._nodes[job.id]
        assert node is not None
        cache = self._cache
        loop = self._loop
        pool = executor()
        arguments = {**job.node.defaults, **kwargs} if job.node.defaults else kwargs
        key: str | None
        try:
            key = await loop.run_in_executor(pool, cache.key, node, arguments, self.versions)
        except Exception as exc:  # a fingerprint that raised: computed, not cached
            logger.warning("cache key of %r not computed: %s", job.name, type(exc).__qualname__)
            key = None
        if key is None:
            self._keys[job.id] = ""
            return MISSED
        flights = self._flights
        flying = (cache.scope, key)
        while True:
            flight = flights.get(flying)
            if flight is not None:
                await asyncio.shield(flight.done)
                if flight.result is not None:
                    return await self._took(job.id, node, flight.result, kwargs)
                continue  # that run did not produce it: as if we had missed
            # The flight begins before the lookup: a run that misses the key meanwhile waits
            # for this lookup (and, if it misses, for the value) instead of reading a store
            # that may be written between its read and its decision to compute.
            flight = flights[flying] = _Flight(loop)
            try:
                found = await loop.run_in_executor(pool, cache.read, key)
            except Exception as exc:  # an unreadable entry is a miss
                logger.warning("cache entry of %r unreadable: %s", job.name, exc)
                found = None
            except BaseException:
                self._land(flying, flight)  # the waiters go on as if they had missed
                raise
            if found is not None:
                flight.result = found
                self._land(flying, flight)
                return await self._took(job.id, node, found, kwargs)
            self._leading[job.id] = (flying, flight)
            self._keys[job.id] = key
            break
        return MISSED

    async def _took(
        self, job: int, node: NodeCache, found: tuple[str | None, Any], kwargs: dict[str, Any]
    ) -> Any:
        """A hit: ``found`` is ``(data version, value)``."""
        version, value = found
        self._hits[job] = True
        if version is not None:
            self.versions[node.name] = version
        replay = self._replays[job]
        if replay is not None:
            value = replay(value, kwargs)
            if inspect.isawaitable(value):
                value = await value
        return value

    def store(self, attempt: Attempt, value: Any) -> bool:
        """A value of ``attempt`` passed its output check: store it (in a thread) if the
        node is cached and the value is not a hit. True when a store began: the run hears
        of it (a ``STORED`` event) when it is over, and only then is the node done."""
        job = attempt.id
        node = self._nodes[job]
        if node is None or node.mode is None or self.hit(attempt):
            return False
        kwargs = self._calls.kwargs[job]
        defaults = attempt.job.node.defaults
        arguments = {**defaults, **(kwargs or {})} if defaults else dict(kwargs or {})
        key = self._keys[job]
        if key == "":
            return False  # no key for this call (docs/caching.md)
        run_id = self._run_id
        if run_id is None:
            run_id = self._run_id = self._calls.report().run_id
        cache = self._cache
        versions = dict(self.versions)

        def write() -> str | None:
            stored_key = key if key is not None else cache.key(node, arguments, versions)
            return None if stored_key is None else cache.write(node, stored_key, value, run_id)

        self._storing[job] = False
        future = self._loop.run_in_executor(executor(), write)
        future.add_done_callback(lambda done: self._stored(attempt, node, value, done))
        return True

    def cancel(self, job: int) -> None:
        """The core cancelled ``job``: if its value is being stored, it drains afterwards."""
        if job in self._storing:
            self._storing[job] = True

    def store_cancelled(self, job: int) -> bool:
        """The store of ``job`` is over; whether the core cancelled the job meanwhile."""
        return self._storing.pop(job, False)

    def _stored(
        self, attempt: Attempt, node: NodeCache, value: Any, done: asyncio.Future[Any]
    ) -> None:
        version: str | None = None
        if done.cancelled():
            pass
        elif (exc := done.exception()) is not None:
            logger.warning(
                "value of %r not stored in the cache: %s: %s",
                node.name,
                type(exc).__qualname__,
                exc,
            )
        else:
            version = done.result()
            if version is not None:
                self.versions[node.name] = version
        leading = self._leading.pop(attempt.id, None)
        if leading is not None:
            key, flight = leading
            flight.result = (version, value)
            self._land(key, flight)
        self._calls.table.post((_STORED, attempt, None))

    def _land(self, key: tuple[object, str], flight: _Flight) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.done.done():
            flight.done.set_result(None)

    def close(self) -> None:
        """The phase is over: keys this run led but did not produce are let go (their
        waiters go on as if they had missed)."""
        leading = self._leading
        while leading:
            _job, (key, flight) = leading.popitem()
            self._land(key, flight)
        if self._run_id is not None:
            self._cache.run_over(self._run_id)
