"""The guide's graph (examples/pg_*.py) on a real PostgreSQL server, with faults injected.

The module starts its own server (tests/support/postgres_server.py): loopback only, a free port, a
temporary directory, stopped at the end. The campaign runs many requests concurrently while
the server terminates their backends, some reads and writes sleep (pg_sleep) past their
attempt timeout, some writes hit a duplicate key, a table lock now and then holds every
query, the caller cancels some runs at random points, and (for the pool) runs outnumber
the pool's connections. After every run the database is the judge:
no session of that run remains (each run has its own ``application_name``), no session is
idle in a transaction unless its run is still going, a run that returned has its row
exactly once, and a run whose commit never started has none.

CI runs a few hundred runs per connection source; ``SDAX_PG_RUNS=5000`` runs that many each.
``SDAX_PG_SEED`` picks the fault schedule (default fixed, so CI replays the same one).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import loops as loop_support
from support.postgres_server import Server, ServerUnavailable, in_ci, start_server, unavailable

try:
    import asyncpg
except ImportError:  # the test extra was not installed
    if in_ci():
        raise
    pytest.skip("asyncpg is not installed (pip install '.[test]')", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import pg_connect
import pg_graph
import pg_pool

from sdax_hamilton import CircuitOpen, Driver, ExecutionError, RunEvent, failures

RUNS = int(os.environ.get("SDAX_PG_RUNS", "300"))
SEED = int(os.environ.get("SDAX_PG_SEED", "20261201"))
PREFIX = "sdaxpg"
SLOW_WRITE = "slow-write"
SLOW_READ = "slow-read"

# The examples' table, as a view with fault hooks: the rows live in entries_data; a note
# containing SLOW_WRITE makes its INSERT sleep past the write's 5 s attempt timeout, and
# one containing SLOW_READ keeps the row's reads sleeping until 1.5 s after it was
# written, so the read's first attempt (1 s timeout) times out and a retry finds it.
TEST_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS entries_data (
    id bigint PRIMARY KEY,
    note text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION read_delay(note text, written_at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE COST 10000 AS $$  -- STABLE and costly: evaluated after id = $1
BEGIN
    IF note LIKE '%{SLOW_READ}%' THEN
        PERFORM pg_sleep(greatest(0, extract(epoch FROM
            written_at + interval '1.5 s' - clock_timestamp())));
    END IF;
    RETURN true;
END $$;
CREATE OR REPLACE VIEW entries AS
    SELECT id, note FROM entries_data WHERE read_delay(note, written_at);
CREATE OR REPLACE FUNCTION write_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.note LIKE '%{SLOW_WRITE}%' THEN
        PERFORM pg_sleep(8);
    END IF;
    INSERT INTO entries_data (id, note) VALUES (NEW.id, NEW.note);
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS write_entry ON entries;
CREATE TRIGGER write_entry INSTEAD OF INSERT ON entries
    FOR EACH ROW EXECUTE FUNCTION write_entry();
INSERT INTO entries_data (id, note) VALUES (1, 'seed-1'), (2, 'seed-2'), (3, 'seed-3')
ON CONFLICT DO NOTHING;
{pg_graph.SCHEMA};  -- a no-op here: the view already has the name
"""
SEEDED_IDS = (1, 2, 3)  # writing one of these again is a duplicate key

# What a run may legitimately fail with under the injected faults. Anything else (a
# TypeError, an InvalidStateError, an asyncpg misuse error) is a bug the campaign reports.
INJECTED_FAILURES: tuple[type[BaseException], ...] = (
    asyncpg.UniqueViolationError,  # the duplicate key
    TimeoutError,  # the slow write
)


def connection_lost(error: BaseException) -> bool:
    """How asyncpg reports a connection whose backend the server terminated."""
    if isinstance(error, pg_graph.RETRYABLE_CONNECTION_ERRORS):
        return True  # mid-query: ConnectionDoesNotExistError, AdminShutdownError
    if isinstance(error, asyncpg.InterfaceError):
        return "connection is closed" in str(error)  # used after asyncpg saw the close
    # Used after the server's FATAL message arrived but before the socket's close did:
    # asyncpg is still consuming the error (its protocol state 2, ERROR_CONSUME).
    # Or Pool.release() racing asyncpg's own cleanup of a connection the server closed,
    # which had already given the holder back ("called on a free connection holder").
    return isinstance(error, asyncpg.exceptions.InternalClientError) and (
        "another operation (2) is in progress" in str(error)
        or "called on a free connection holder" in str(error)
    )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    try:
        started = start_server({"client_connection_check_interval": "100ms"})
    except ServerUnavailable as error:
        unavailable(error)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def dsn(server: Server) -> str:
    async def create() -> None:
        connection = await asyncpg.connect(server.dsn)
        try:
            await connection.execute(TEST_SCHEMA)
        finally:
            await connection.close()

    loop_support.run(create())
    return server.dsn


@pytest.fixture(autouse=True)
def fresh_guards() -> Iterator[None]:
    """Each test gets the examples' bulkhead and breaker as a fresh process has them.

    They are module-level objects shared by every run of the process (pg_pool.POOL,
    pg_graph.READS): without this, a test that injects failures would leave the breaker's
    window (or an open breaker) to the tests after it. Reloading the modules builds new
    ones, and the nodes the next ``Driver`` compiles name those.
    """
    importlib.reload(pg_graph)
    importlib.reload(pg_pool)
    yield
    # Nothing a test started is still holding or waiting for a permit.
    assert (pg_pool.POOL.in_use, pg_pool.POOL.waiting) == (0, 0)


# ---------------------------------------------------------------- the database as judge


class Judge:
    """Queries the server about the sessions and rows of runs (its own small pool)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, dsn: str) -> Judge:
        pool = await asyncpg.create_pool(
            dsn, min_size=1, max_size=4, server_settings={"application_name": f"{PREFIX}-judge"}
        )
        return cls(pool)

    async def close(self) -> None:
        await asyncio.wait_for(self.pool.close(), 30)

    async def sessions(self, name: str) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT coalesce(state, '?') AS state FROM pg_stat_activity "
            "WHERE application_name = $1",
            name,
        )
        return [row["state"] for row in rows]

    async def sessions_gone(self, name: str, within: float = 10.0) -> tuple[list[str], float]:
        """Waits (bounded) for the backends of a finished run to exit.

        A backend leaves ``pg_stat_activity`` a moment after its client closed the socket
        (or, while it sleeps in a query, at the server's next client check), so a session
        still there after ``within`` seconds is one the run left behind.
        """
        started = time.monotonic()
        while True:
            states = await self.sessions(name)
            waited = time.monotonic() - started
            if not states or waited > within:
                return states, waited
            await asyncio.sleep(0.02)

    async def rows(self, note: str) -> int:
        return int(
            await self.pool.fetchval("SELECT count(*) FROM entries_data WHERE note = $1", note)
        )

    async def idle_in_transaction(self) -> set[str]:
        rows = await self.pool.fetch(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE state LIKE 'idle in transaction%' "
            "AND (application_name LIKE $1 OR application_name = $2)",
            f"{PREFIX}-run-%",
            f"{PREFIX}-pool",
        )
        return {row["application_name"] for row in rows}


# ---------------------------------------------------------------- one run, observed


@dataclass
class Observed:
    """What the package told the observer about one run."""

    events: list[RunEvent] = field(default_factory=list)

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def started(self, node: str) -> bool:
        return any(e.kind == "attempt_started" and e.node == node for e in self.events)

    def count(self, kind: str, node: str | None = None) -> int:
        return sum(1 for e in self.events if e.kind == kind and node in (None, e.node))

    def release_problems(self, owned: tuple[str, ...]) -> list[str]:
        """Each owned node that started was released exactly once, and the release ended."""
        problems = []
        for node in owned:
            expected = 1 if self.started(node) else 0
            began = self.count("release_started", node)
            ended = sum(
                self.count(kind, node)
                for kind in ("release_succeeded", "release_failed", "release_timed_out")
            )
            if began != expected or ended != expected:
                problems.append(f"{node}: {began} releases started, {ended} ended, not {expected}")
        if self.count("run_started") and self.events[-1].kind != "run_finished":
            problems.append(f"last event {self.events[-1].kind}, not run_finished")
        return problems


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for member in error.exceptions for leaf in leaves(member)]
    return [error]


@dataclass
class RunPlan:
    campaign: str
    number: int
    entry_id: int
    duplicate: bool = False
    slow_write: bool = False
    slow_read: bool = False
    cancel_after: float | None = None
    cancel_again_after: float | None = None  # a second cancellation, during the cleanup
    through_open: bool = False  # ``async with plan.open()`` with a body, not execute()
    body_seconds: float = 0.0
    body_fails: bool = False

    @property
    def name(self) -> str:
        return f"{PREFIX}-run-{self.campaign}-{self.number}"

    @property
    def note(self) -> str:
        return " ".join([self.name] + [SLOW_WRITE] * self.slow_write + [SLOW_READ] * self.slow_read)


@dataclass
class RunResult:
    plan: RunPlan
    observed: Observed
    value: dict[str, Any] | None = None
    error: BaseException | None = None
    cancelled: bool = False
    cancel_delivered: bool = False
    body_reached: bool = False


class BodyFailure(Exception):
    """Raised by the ``open()`` body of some runs: the run's primary failure."""


# ---------------------------------------------------------------- the campaign


@dataclass
class Tally:
    runs: int = 0
    returned: int = 0
    failed: int = 0
    cancelled: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    ambiguous_commits: Counter[str] = field(default_factory=Counter)
    longest_linger: float = 0.0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.runs} runs: {self.returned} returned, {self.failed} failed, "
            f"{self.cancelled} cancelled; faults {dict(sorted(self.faults.items()))}; "
            f"failure leaves {dict(sorted(self.errors.items()))}; commits started by runs "
            f"that did not return {dict(self.ambiguous_commits)}; longest wait for a "
            f"finished run's backend to exit {self.longest_linger:.2f} s"
        )


class Campaign:
    def __init__(self, dsn: str, source: str, runs: int, concurrency: int, seed: int) -> None:
        self.dsn = dsn
        self.source = source
        self.runs = runs
        self.concurrency = concurrency
        self.rng = random.Random(seed)
        self.first_id = 1_000 + self.rng.randrange(1 << 40)  # apart from other campaigns
        self.tally = Tally()
        self.in_flight: set[str] = set()
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.hit: Counter[str] = Counter()  # terminations per run name
        self.pool: Any = None
        self.pool_size = 0
        self.stopping = asyncio.Event()
        module = pg_connect if source == "connect" else pg_pool
        self.plan = Driver(module, pg_graph).prepare(["stored_note"])
        self.owned = (
            ("connection", "transaction") if source == "connect" else ("lease", "transaction")
        )

    def draw(self, number: int) -> RunPlan:
        rng = self.rng
        plan = RunPlan(self.source, number, entry_id=self.first_id + number)
        roll = rng.random()
        if roll < 0.08:
            plan.duplicate = True
            plan.entry_id = rng.choice(SEEDED_IDS)
        elif roll < 0.11:
            plan.slow_write = True
        elif roll < 0.2:
            plan.slow_read = True
        if rng.random() < 0.15:
            plan.cancel_after = rng.uniform(0.0, 0.4)
            if rng.random() < 0.3:
                plan.cancel_again_after = rng.uniform(0.0, 0.1)
        if rng.random() < 0.3:
            plan.through_open = True
            plan.body_seconds = rng.uniform(0.0, 0.05)
            plan.body_fails = rng.random() < 0.3
        return plan

    async def run(self) -> Tally:
        before = asyncio.all_tasks()
        self.judge = await Judge.open(self.dsn)
        if self.source == "pool":
            self.pool_size = pg_pool.POOL_SIZE  # what its bulkhead is sized to
            assert self.pool_size < self.concurrency  # runs queue for a connection
            self.pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                server_settings={"application_name": f"{PREFIX}-pool"},
            )
            self.tally.faults[f"pool of {self.pool_size} for {self.concurrency} runs"] = 1
        injectors = [
            asyncio.create_task(self.terminate_backends()),
            asyncio.create_task(self.lock_table()),
        ]
        try:
            numbers = iter(range(self.runs))
            workers = [asyncio.create_task(self.worker(numbers)) for _ in range(self.concurrency)]
            await asyncio.gather(*workers)
        finally:
            self.stopping.set()
            await asyncio.gather(*injectors, return_exceptions=True)
            if self.pool is not None:
                await asyncio.wait_for(self.pool.close(), 30)
            await self.final_checks()
            await self.judge.close()
        # Nothing of any run is still running in the background.
        await asyncio.sleep(0.1)
        leftover = asyncio.all_tasks() - before
        self.tally.violations += [f"task still running after the campaign: {t!r}" for t in leftover]
        return self.tally

    async def worker(self, numbers: Iterator[int]) -> None:
        for number in numbers:
            plan = self.draw(number)
            result = await self.execute(plan)
            await self.check(result)

    async def execute(self, plan: RunPlan) -> RunResult:
        observed = Observed()
        inputs: dict[str, Any] = {
            "dsn": self.dsn,
            "application_name": plan.name,
            "entry_id": plan.entry_id,
            "note": plan.note,
        }
        if self.pool is not None:
            inputs["pool"] = self.pool
        result = RunResult(plan, observed)
        self.started.add(plan.name)
        self.in_flight.add(plan.name)
        if plan.through_open:
            task = asyncio.create_task(self.open_with_body(inputs, result))
        else:
            task = asyncio.create_task(self.plan.execute(inputs=inputs, observer=observed))
        canceller = None
        if plan.cancel_after is not None:
            loop = asyncio.get_running_loop()

            def cancel() -> None:
                result.cancel_delivered = task.cancel()  # False once the run is over
                if result.cancel_delivered and plan.cancel_again_after is not None:
                    loop.call_later(plan.cancel_again_after, task.cancel)

            canceller = loop.call_later(plan.cancel_after, cancel)
        try:
            result.value = await task
        except asyncio.CancelledError as error:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # the campaign itself stops
                raise
            result.cancelled = True
            result.error = error
        except Exception as error:
            result.error = error
        finally:
            if canceller is not None:
                canceller.cancel()
            self.in_flight.discard(plan.name)
            self.finished.add(plan.name)
        return result

    async def open_with_body(self, inputs: dict[str, Any], result: RunResult) -> dict[str, Any]:
        async with self.plan.open(inputs=inputs, observer=result.observed) as values:
            result.body_reached = True
            await asyncio.sleep(result.plan.body_seconds)
            if result.plan.body_fails:
                raise BodyFailure(result.plan.name)
            return {"stored_note": values["stored_note"]}

    async def check(self, result: RunResult) -> None:
        plan, tally = result.plan, self.tally
        tally.runs += 1
        name = plan.name
        problems = [f"package: {p}" for p in result.observed.release_problems(self.owned)]

        # No session of the run remains.
        states, waited = await self.judge.sessions_gone(name)
        tally.longest_linger = max(tally.longest_linger, waited)
        if states:
            problems.append(f"sessions left after {waited:.1f} s: {states}")

        # No session idle in a transaction unless its run is still going (the pool's own
        # sessions never).
        finished_before = set(self.finished)
        idle = await self.judge.idle_in_transaction()
        allowed = self.started - finished_before
        problems += [
            f"{other} idle in transaction after its run" for other in idle if other not in allowed
        ]

        if result.cancel_delivered and not result.cancelled:
            # The caller's cancellation stays the primary outcome (README "Failures").
            problems.append(f"cancelled mid-run but ended with {result.value or result.error!r}")

        rows = await self.judge.rows(plan.note)
        commit_started = result.observed.started("committed")
        if result.body_reached and rows != 1:  # the forward phase, commit included, was over
            problems.append(f"the open() body ran but {rows} rows")
        if result.value is not None:
            tally.returned += 1
            if rows != 1:
                problems.append(f"returned but has {rows} rows")
            if result.value != {"stored_note": plan.note}:
                problems.append(f"returned {result.value!r}")
            if plan.duplicate or plan.slow_write:
                problems.append("returned despite its injected write failure")
        else:
            if result.cancelled:
                tally.cancelled += 1
                tally.faults["caller cancellation landed"] += 1
            else:
                tally.failed += 1
            if not commit_started and rows != 0:
                problems.append(f"commit never started but {rows} rows")
            if commit_started:
                tally.ambiguous_commits[f"{rows} row"] += 1
            if result.error is not None and any(
                isinstance(leaf, CircuitOpen) for leaf in leaves(result.error)
            ):
                # The faults made most reads fail and the reads' breaker opened: the run
                # failed fast after its commit, which stands.
                tally.faults["run failed fast on the open reads breaker"] += 1
                if rows != 1:
                    problems.append(f"failed on the open breaker after its commit, {rows} rows")
            if rows > 1:
                problems.append(f"{rows} rows")
            problems += self.judge_error(result)
        if plan.through_open:
            tally.faults["open() body failed" if plan.body_fails else "open() body"] += 1
        if result.cancel_delivered and plan.cancel_again_after is not None:
            tally.faults["second cancellation scheduled"] += 1
        if plan.duplicate:
            tally.faults["duplicate key"] += 1
        if plan.slow_write:
            tally.faults["write slower than its timeout"] += 1
        if plan.slow_read:
            tally.faults["read slower than its timeout"] += 1
            if (
                result.value is not None
                and not self.hit[name]  # a terminated reader may retry after the window
                and result.observed.count("attempt_timed_out", "stored_note") < 1
            ):
                problems.append("slow read returned without a timed-out attempt")
        tally.faults["read attempts over their timeout"] += result.observed.count(
            "attempt_timed_out", "stored_note"
        )
        tally.faults["retries of the read"] += result.observed.count(
            "retry_scheduled", "stored_note"
        )
        queued = result.observed.count("bulkhead_waiting", "lease")
        if queued:
            tally.faults["lease queued at the pool's bulkhead"] += queued
        rejected = [e.node for e in result.observed.events if e.kind.endswith("_rejected")]
        if any(node != "stored_note" for node in rejected):
            problems.append(f"attempts rejected by a guard: {rejected}")
        if problems:
            trace = " ".join(
                f"{e.kind}:{e.node}{':' + type(e.error).__name__ if e.error else ''}"
                for e in result.observed.events
            )
            problems[-1] += f"\n    events: {trace}"
        tally.violations += [f"{name} ({self.source}): {p}" for p in problems]

    def judge_error(self, result: RunResult) -> list[str]:
        """A failed run failed with the injected faults' exceptions, and the right ones."""
        error, plan = result.error, result.plan
        if error is None:
            return ["neither returned nor raised"]
        problems = []
        primary = result.cancelled or isinstance(error, BodyFailure)
        found = list(failures(error)) if primary else leaves(error)
        terminated = self.hit[plan.name]
        if self.source == "pool":
            # A pooled connection may be terminated while pg_stat_activity still shows its
            # previous lessee's name, or while idle in the pool long before this run leased
            # it: any termination so far may have been this run's.
            terminated = sum(self.hit.values())
        for leaf in found:
            self.tally.errors[type(leaf).__name__] += 1
            if isinstance(leaf, INJECTED_FAILURES) or (terminated and connection_lost(leaf)):
                continue
            if isinstance(leaf, CircuitOpen):  # the reads' breaker, checked in check()
                continue
            if isinstance(leaf, BodyFailure) and result.cancelled and result.body_reached:
                # the body failed, then the caller was cancelled during cleanup: its
                # cancellation is the primary, the body's failure a secondary diagnostic
                # (docs/lifecycle.md, "Cancellation")
                continue
            problems.append(
                f"unexpected {type(leaf).__name__}: {leaf} {getattr(leaf, '__notes__', [])}"
                f" (backends of the run terminated: {self.hit[plan.name]})"
            )
        if result.cancelled:
            return problems
        if plan.body_fails and result.body_reached:
            if not isinstance(error, BodyFailure):  # the body's failure stays the primary
                problems.append(f"the body failed but the run raised {error!r}")
            return problems
        if not isinstance(error, ExecutionError):
            problems.append(f"raised {type(error).__name__}, not ExecutionError")
            return problems
        # The injected write failure is what the run reports, unless a backend it used (or
        # a pooled one it may have leased) was terminated and failed it first.
        kinds = {type(leaf) for leaf in found}
        lost = terminated and all(connection_lost(leaf) for leaf in found)
        if plan.duplicate and asyncpg.UniqueViolationError not in kinds and not lost:
            problems.append(f"duplicate key run failed with {kinds}")
        if plan.slow_write and TimeoutError not in kinds and not lost:
            problems.append(f"slow write run failed with {kinds}")
        return problems

    async def terminate_backends(self) -> None:
        """Now and then the server terminates one backend of a run (or an idle pooled one)."""
        rng = random.Random(self.rng.random())
        while not self.stopping.is_set():
            await asyncio.sleep(rng.uniform(0.01, 0.06))
            rows = await self.judge.pool.fetch(
                "SELECT pid, application_name, coalesce(state, '?') AS state "
                "FROM pg_stat_activity WHERE application_name LIKE $1 "
                "OR application_name = $2",
                f"{PREFIX}-run-%",
                f"{PREFIX}-pool",
            )
            if not rows:
                continue
            victim = rng.choice(rows)
            # Marked before the signal: the run may fail and be judged before this returns.
            self.hit[victim["application_name"]] += 1
            if await self.judge.pool.fetchval("SELECT pg_terminate_backend($1)", victim["pid"]):
                who = "pooled idle" if victim["application_name"].endswith("-pool") else "run"
                self.tally.faults[f"backend terminated ({who}, {victim['state']})"] += 1

    async def lock_table(self) -> None:
        """Now and then a lock holds every query on ``entries`` past the read's timeout."""
        rng = random.Random(self.rng.random())
        locker = await asyncpg.connect(
            self.dsn, server_settings={"application_name": f"{PREFIX}-locker"}
        )
        try:
            while not self.stopping.is_set():
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                try:
                    async with locker.transaction():
                        await locker.execute("SET LOCAL lock_timeout = '300ms'")
                        await locker.execute("LOCK TABLE entries IN ACCESS EXCLUSIVE MODE")
                        await asyncio.sleep(1.5)
                    self.tally.faults["table locked 1.5 s"] += 1
                except asyncpg.LockNotAvailableError:
                    pass  # a slow write held the table: try later
        finally:
            await locker.close()

    async def final_checks(self) -> None:
        leftovers = await self.judge.pool.fetch(
            "SELECT application_name, state FROM pg_stat_activity "
            "WHERE application_name LIKE $1 AND application_name <> $2",
            f"{PREFIX}-%",
            f"{PREFIX}-judge",
        )
        deadline = time.monotonic() + 10
        while leftovers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            leftovers = await self.judge.pool.fetch(
                "SELECT application_name, state FROM pg_stat_activity "
                "WHERE application_name LIKE $1 AND application_name <> $2",
                f"{PREFIX}-%",
                f"{PREFIX}-judge",
            )
        self.tally.violations += [f"after the campaign: {dict(row)} remains" for row in leftovers]
        if await self.judge.idle_in_transaction():
            self.tally.violations.append("a session idle in transaction after the campaign")


@pytest.mark.parametrize("source", ["connect", "pool"])
async def test_campaign_the_database_finds_nothing_left(dsn: str, source: str) -> None:
    campaign = Campaign(dsn, source, runs=RUNS, concurrency=16, seed=SEED + len(source))
    tally = await asyncio.wait_for(campaign.run(), timeout=60 + RUNS * 2)
    print(f"\n{source}: {tally.summary()}")
    assert not tally.violations, "\n".join(tally.violations[:40])
    assert tally.runs == RUNS
    # The faults really happened (a campaign that injected nothing proves nothing).
    assert tally.returned > 0 and tally.failed > 0
    assert tally.faults["duplicate key"] > 0
    assert any(k.startswith("backend terminated (run") for k in tally.faults)
    if source == "pool":
        assert tally.faults["lease queued at the pool's bulkhead"] > 0
    if RUNS >= 100:
        assert tally.cancelled > 0
        assert tally.faults["table locked 1.5 s"] > 0


# ---------------------------------------------------------------- one fault at a time


def _plan(source: str) -> Any:
    module = pg_connect if source == "connect" else pg_pool
    return Driver(module, pg_graph).prepare(["stored_note"])


_names = iter(range(1, 1_000_000))


def _inputs(dsn: str, pool: Any, note_suffix: str = "", entry_id: int | None = None) -> Any:
    number = next(_names)
    name = f"{PREFIX}-one-{number}"
    inputs: dict[str, Any] = {
        "dsn": dsn,
        "application_name": name,
        "entry_id": entry_id if entry_id is not None else 10_000_000 + number,
        "note": f"{name}{note_suffix}",
    }
    if pool is not None:
        inputs["pool"] = pool
    return inputs


async def _source(dsn: str, source: str) -> Any:
    if source == "connect":
        return None
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=2, server_settings={"application_name": f"{PREFIX}-pool"}
    )


async def _wait_for_query(judge: Judge, name: str, starts_with: str) -> int:
    """The pid of the run's backend once it is running a query starting with that text."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = await judge.pool.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
            "AND state = 'active' AND query LIKE $2",
            name,
            f"{starts_with}%",
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never ran {starts_with!r}")


@pytest.mark.parametrize("source", ["connect", "pool"])
async def test_a_run_commits_its_row_once_and_leaves_no_session(dsn: str, source: str) -> None:
    judge, pool = await Judge.open(dsn), await _source(dsn, source)
    try:
        inputs, observed = _inputs(dsn, pool), Observed()
        result = await _plan(source).execute(inputs=inputs, observer=observed)
        assert result == {"stored_note": inputs["note"]}
        assert await judge.rows(inputs["note"]) == 1
        assert (await judge.sessions_gone(inputs["application_name"]))[0] == []
        releases = [e.node for e in observed.events if e.kind == "release_succeeded"]
        owner = "connection" if source == "connect" else "lease"
        assert releases == ["transaction", owner]  # the transaction ends first
    finally:
        if pool is not None:
            await pool.close()
        await judge.close()


async def test_a_reader_the_server_terminates_is_retried(dsn: str) -> None:
    judge = await Judge.open(dsn)
    try:
        inputs, observed = _inputs(dsn, None, f" {SLOW_READ}"), Observed()
        run = asyncio.create_task(_plan("connect").execute(inputs=inputs, observer=observed))
        pid = await _wait_for_query(judge, inputs["application_name"], "SELECT note")
        assert await judge.pool.fetchval("SELECT pg_terminate_backend($1)", pid)
        assert await run == {"stored_note": inputs["note"]}
        failed = [e.error for e in observed.events if e.kind == "attempt_failed"]
        assert failed and all(e.node == "stored_note" for e in observed.events if e.error)
        assert isinstance(failed[0], asyncpg.PostgresConnectionError | asyncpg.AdminShutdownError)
        assert await judge.rows(inputs["note"]) == 1
        assert (await judge.sessions_gone(inputs["application_name"]))[0] == []
    finally:
        await judge.close()


@pytest.mark.parametrize("source", ["connect", "pool"])
async def test_a_duplicate_key_fails_the_run_once_and_rolls_back(dsn: str, source: str) -> None:
    judge, pool = await Judge.open(dsn), await _source(dsn, source)
    try:
        inputs, observed = _inputs(dsn, pool, entry_id=SEEDED_IDS[0]), Observed()
        with pytest.raises(ExecutionError) as raised:
            await _plan(source).execute(inputs=inputs, observer=observed)
        [leaf] = leaves(raised.value)
        assert isinstance(leaf, asyncpg.UniqueViolationError)
        assert observed.count("attempt_started", "entry") == 1
        assert not observed.started("committed")
        assert observed.count("release_succeeded") == 2
        assert await judge.rows(inputs["note"]) == 0
        assert (await judge.sessions_gone(inputs["application_name"]))[0] == []
        assert await judge.idle_in_transaction() == set()
    finally:
        if pool is not None:
            await pool.close()
        await judge.close()


@pytest.mark.parametrize("source", ["connect", "pool"])
async def test_a_caller_cancelling_a_slow_write_leaves_no_row_and_no_session(
    dsn: str, source: str
) -> None:
    judge, pool = await Judge.open(dsn), await _source(dsn, source)
    try:
        inputs, observed = _inputs(dsn, pool, f" {SLOW_WRITE}"), Observed()
        run = asyncio.create_task(_plan(source).execute(inputs=inputs, observer=observed))
        await _wait_for_query(judge, inputs["application_name"], "INSERT INTO entries")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert observed.count("attempt_cancelled", "entry") == 1
        assert observed.count("release_succeeded") == 2
        assert await judge.rows(inputs["note"]) == 0
        assert (await judge.sessions_gone(inputs["application_name"], within=5.0))[0] == []
        assert await judge.idle_in_transaction() == set()
    finally:
        if pool is not None:
            await pool.close()
        await judge.close()


async def test_runs_queue_for_a_pool_smaller_than_their_number(dsn: str) -> None:
    judge, pool = await Judge.open(dsn), await _source(dsn, "pool")  # max_size=2
    try:
        plan = _plan("pool")
        runs = [_inputs(dsn, pool) for _ in range(3 * pg_pool.POOL_SIZE)]
        observed = [Observed() for _ in runs]
        results = await asyncio.gather(
            *(plan.execute(inputs=i, observer=o) for i, o in zip(runs, observed, strict=True))
        )
        assert results == [{"stored_note": inputs["note"]} for inputs in runs]
        # POOL_SIZE leases waited inside pool.acquire(), the others in the bulkhead's queue.
        assert sum(o.count("bulkhead_waiting", "lease") for o in observed) > 0
        for inputs in runs:
            assert await judge.rows(inputs["note"]) == 1
            assert (await judge.sessions_gone(inputs["application_name"]))[0] == []
        assert pool.get_size() <= 2
    finally:
        await pool.close()
        await judge.close()


def _refusing_dsn(dsn: str) -> str:
    """``dsn`` with the port of a loopback socket nobody listens on: connecting is refused."""
    import socket
    from urllib.parse import urlsplit

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    parts = urlsplit(dsn)
    return parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{free}")).geturl()


async def test_reads_that_cannot_connect_open_the_breaker_and_runs_fail_fast(dsn: str) -> None:
    """The reads' breaker (pg_graph.READS) opens when the readers cannot connect; later runs
    commit, fail at once with CircuitOpen instead of retrying, and leave nothing behind; once
    the readers can connect again, the breaker's probe closes it."""
    judge, pool = await Judge.open(dsn), await _source(dsn, "pool")
    try:
        plan = _plan("pool")
        refusing = _refusing_dsn(dsn)  # the pool connects to dsn, the readers to this
        failing = [_inputs(refusing, pool) for _ in range(4)]
        outcomes = await asyncio.gather(
            *(plan.execute(inputs=inputs) for inputs in failing), return_exceptions=True
        )
        # 4 runs x 5 refused attempts: 20 outcomes, all failures.
        assert all(isinstance(o, ExecutionError) for o in outcomes), outcomes
        assert pg_graph.READS.state == "open"

        inputs, observed = _inputs(refusing, pool), Observed()
        with pytest.raises(ExecutionError) as raised:
            await plan.execute(inputs=inputs, observer=observed)
        [leaf] = leaves(raised.value)
        assert isinstance(leaf, CircuitOpen) and leaf.breaker is pg_graph.READS
        assert 0 < leaf.retry_after <= 2.0
        assert observed.count("circuit_rejected", "stored_note") == 1
        assert observed.count("attempt_started", "stored_note") == 1  # rejected: no call, no retry
        for run in [*failing, inputs]:
            assert await judge.rows(run["note"]) == 1  # committed before the read
            assert (await judge.sessions_gone(run["application_name"]))[0] == []

        await asyncio.sleep(leaf.retry_after)
        healthy = _inputs(dsn, pool)
        assert await plan.execute(inputs=healthy) == {"stored_note": healthy["note"]}
        assert pg_graph.READS.state == "closed"
    finally:
        await pool.close()
        await judge.close()


def test_a_server_that_cannot_start_fails_under_ci_with_its_log_and_skips_elsewhere() -> None:
    try:
        server = start_server({"no_such_setting_for_this_test": "1"})
    except ServerUnavailable as error:
        failed = error
    else:
        server.stop()
        raise AssertionError("the server started with an unknown setting")
    if "no_such_setting_for_this_test" not in failed.log:  # binaries missing: no log
        unavailable(failed)
    with pytest.raises(pytest.fail.Exception) as in_ci_run:
        unavailable(failed, {"CI": "true"})
    assert 'unrecognized configuration parameter "no_such_setting_for_this_test"' in str(
        in_ci_run.value
    )
    with pytest.raises(pytest.skip.Exception) as elsewhere:
        unavailable(failed, {})
    assert "could not be started" in str(elsewhere.value)
    assert "no_such_setting_for_this_test" not in str(elsewhere.value)  # the reason only


def test_the_example_program_runs_against_the_server(dsn: str) -> None:
    import subprocess

    program = Path(__file__).resolve().parent.parent / "examples" / "postgres.py"
    ran = subprocess.run(
        [sys.executable, str(program), dsn], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("pooled runs read back: ['request ")
    assert lines[0].count("request") == 2 * pg_pool.POOL_SIZE
    assert lines[1:] == [
        "duplicate: UniqueViolationError",
        lines[2],  # the pool's size depends on timing; at most its max_size
        "pg-pool: 0 in use, 0 waiting; pg-reads: closed",
        "dedicated run read back: on a connection of its own",
    ]
    size, idle = (int(word) for word in lines[2].split() if word.isdigit())
    assert 1 <= size <= pg_pool.POOL_SIZE and idle == size  # every leased connection came back

    async def sessions() -> list[str]:
        judge = await Judge.open(dsn)
        try:
            rows = await judge.pool.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE $1",
                "example-%",
            )
            return [row["application_name"] for row in rows]
        finally:
            await judge.close()

    assert loop_support.run(sessions()) == []


def test_the_guide_page_shows_the_examples_verbatim() -> None:
    """docs/postgres.md's code blocks are excerpts of the examples this module runs."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "postgres.md").read_text(encoding="utf-8")
    sources = "\n".join(
        path.read_text(encoding="utf-8") for path in sorted((root / "examples").glob("*.py"))
    )
    blocks = page.split("```python no-run\n")[1:]
    assert len(blocks) >= 6
    for block in blocks:
        excerpt = block.split("```", 1)[0]
        assert excerpt in sources, f"not in examples/: {excerpt[:200]!r}"


async def test_a_close_that_hangs_is_dropped_and_the_session_ends(dsn: str) -> None:
    """The connection's release terminates the connection when its polite close fails."""
    import signal

    judge = await Judge.open(dsn)
    plan = Driver(pg_connect, pg_graph).prepare(["connection", "committed"])
    inputs, observed = _inputs(dsn, None), Observed()
    inputs.pop("pool", None)
    stopped = 0
    try:
        with pytest.raises(ExecutionError) as raised:
            async with plan.open(inputs=inputs, observer=observed) as values:
                stopped = values["connection"].get_server_pid()
                os.kill(stopped, signal.SIGSTOP)  # the backend stops answering: close hangs
        [leaf] = leaves(raised.value)
        assert isinstance(leaf, TimeoutError)  # close(timeout=2.0) gave up
        assert "release of 'connection'" in " ".join(getattr(leaf, "__notes__", []))
        assert observed.count("release_failed", "connection") == 1
        os.kill(stopped, signal.SIGCONT)
        stopped = 0
        # The client dropped the socket: the resumed backend finds it gone and exits.
        assert (await judge.sessions_gone(inputs["application_name"]))[0] == []
        assert await judge.rows(inputs["note"]) == 1  # committed before the release
    finally:
        if stopped:
            os.kill(stopped, signal.SIGCONT)
        await judge.close()
