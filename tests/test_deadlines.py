"""Run timeouts, capped waits and ``retry_after`` end to end through ``Driver`` ->
``prepare`` -> ``execute`` / ``open`` (docs/lifecycle.md, "Deadlines and server-directed
waits"). The rules themselves are decided and tested in the core (core/tests/deadlines.rs);
here: what the caller sees, with real modules, real timers, concurrency and cancellation.
Timing bounds are generous (the machine is shared): a run that must stop at its deadline is
checked against a bound far below what it would take without one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import pytest

from sdax_hamilton import Driver, ExecutionError, RunEvent, RunReport, failures
from sdax_hamilton.testing import instant_retries

PREFIX = "sdax_hamilton: "

GRAPH = """
import asyncio
import time
from sdax_hamilton import Acquisition, execution, shutdown

LOG: list[str] = []
HINTS: list[str] = []

class Conn:
    pass

@execution(timeout=30.0)
async def conn() -> Conn:
    LOG.append("acquire")
    return Conn()

@shutdown(of=conn, timeout=5.0)
async def close_conn(record: Acquisition[Conn]) -> None:
    await asyncio.sleep(0.05)  # a release runs under its own policy, past the deadline
    LOG.append("release")

@execution(timeout=30.0, retries=100, initial_delay=0.01, backoff_factor=1.0)
async def hangs(conn: Conn) -> int:
    LOG.append("hangs")
    await asyncio.sleep(60)
    return 1

def hint(exc: BaseException) -> float | None:
    HINTS.append(type(exc).__name__)
    return getattr(exc, "retry_after", None)

class Busy(ConnectionError):
    def __init__(self, retry_after: float | None) -> None:
        super().__init__("busy")
        self.retry_after = retry_after

@execution(retries=3, initial_delay=0.01, retry_after=hint)
async def busy(waits: list) -> int:
    LOG.append("busy")
    if len([e for e in LOG if e == "busy"]) <= len(waits):
        raise Busy(waits[len([e for e in LOG if e == "busy"]) - 1])
    return 2

def block(seconds: float) -> int:
    time.sleep(seconds)  # blocks the loop: nothing can interrupt it
    return 3

async def after_block(block: int) -> int:
    LOG.append("after_block")
    return block + 1
"""


@pytest.fixture
def mod(make_module: Any) -> Any:
    return make_module(GRAPH)


def notes(exc: BaseException) -> list[str]:
    return list(getattr(exc, "__notes__", []))


def only_leaf(info: pytest.ExceptionInfo[ExecutionError]) -> BaseException:
    (leaf,) = info.value.exceptions
    return leaf


# ------------------------------------------------------------------ argument checks


@pytest.mark.parametrize("value", ["1", True, [1.0], 1j])
async def test_timeout_of_the_wrong_type_is_a_type_error(mod: Any, value: object) -> None:
    plan = Driver(mod).prepare(["hangs"])
    with pytest.raises(TypeError, match="timeout"):
        await plan.execute(timeout=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout"):
        plan.open(timeout=value)  # type: ignore[arg-type]
    assert mod.LOG == []


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, -math.inf])
async def test_timeout_negative_or_nan_is_a_value_error(mod: Any, value: float) -> None:
    plan = Driver(mod).prepare(["hangs"])
    with pytest.raises(ValueError, match="timeout"):
        await plan.execute(timeout=value)
    with pytest.raises(ValueError, match="timeout"):
        plan.open(timeout=value)
    assert mod.LOG == []


async def test_no_timeout_and_an_infinite_one_change_nothing(mod: Any) -> None:
    plan = Driver(mod).prepare(["busy"])
    assert await plan.execute(inputs={"waits": [0.0]}, timeout=None) == {"busy": 2}
    mod.LOG.clear()
    assert await plan.execute(inputs={"waits": [0.0]}, timeout=math.inf) == {"busy": 2}


async def test_a_zero_timeout_starts_nothing(mod: Any) -> None:
    plan = Driver(mod).prepare(["hangs"])
    with pytest.raises(ExecutionError) as info:
        await plan.execute(timeout=0)
    leaf = only_leaf(info)
    assert type(leaf) is TimeoutError
    assert f"{PREFIX}node 'conn': the run's timeout expired before it could start" in notes(leaf)
    assert mod.LOG == []


# ------------------------------------------------------------------ execute()


async def test_attempts_are_clipped_and_releases_still_run(mod: Any) -> None:
    plan = Driver(mod).prepare(["hangs"])
    began = time.monotonic()
    with pytest.raises(ExecutionError) as info:
        await plan.execute(timeout=0.3)
    elapsed = time.monotonic() - began
    leaf = only_leaf(info)
    assert type(leaf) is TimeoutError
    assert f"{PREFIX}node 'hangs': attempt 1 was cut short by the run's timeout" in notes(leaf)
    assert f"{PREFIX}node 'hangs' failed after 1 attempt" in notes(leaf)
    # its own timeout is 30 s and it would be retried 100 times: the run's timeout ended it
    assert mod.LOG == ["acquire", "hangs", "release"]
    assert 0.25 <= elapsed < 5.0


async def test_a_retry_that_would_end_past_the_deadline_fails_at_once(mod: Any) -> None:
    plan = Driver(mod).prepare(["busy"])
    began = time.monotonic()
    with pytest.raises(ExecutionError) as info:
        await plan.execute(inputs={"waits": [30.0]}, timeout=10.0)
    elapsed = time.monotonic() - began
    leaf = only_leaf(info)
    assert type(leaf).__name__ == "Busy"  # the last real error, not a TimeoutError
    assert (
        f"{PREFIX}node 'busy': the run's timeout left no room for a retry "
        "(its wait of 30 s would end past it)"
    ) in notes(leaf)
    assert mod.LOG == ["busy"]
    assert elapsed < 5.0


async def test_retry_after_sets_the_wait(mod: Any) -> None:
    plan = Driver(mod).prepare(["busy"])
    began = time.monotonic()
    assert await plan.execute(inputs={"waits": [0.3, None]}) == {"busy": 2}
    elapsed = time.monotonic() - began
    assert mod.HINTS == ["Busy", "Busy"]
    assert mod.LOG == ["busy", "busy", "busy"]
    assert elapsed >= 0.3 - 0.01  # the hinted wait, without jitter


async def test_max_delay_caps_a_hinted_wait(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution

        CALLS: list[int] = []

        @execution(retries=1, max_delay=0.05, retry_after=lambda exc: 3600.0)
        async def capped() -> int:
            CALLS.append(1)
            if len(CALLS) == 1:
                raise ConnectionError()
            return 1
        """
    )
    began = time.monotonic()
    assert await Driver(mod).prepare(["capped"]).execute() == {"capped": 1}
    assert time.monotonic() - began < 5.0


async def test_max_delay_caps_backoff_waits(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution

        CALLS: list[int] = []

        @execution(retries=3, initial_delay=100.0, backoff_factor=10.0, max_delay=0.02)
        async def capped() -> int:
            CALLS.append(1)
            if len(CALLS) <= 3:
                raise ConnectionError()
            return 1
        """
    )
    events: list[RunEvent] = []
    assert await Driver(mod).prepare(["capped"]).execute(observer=events.append) == {"capped": 1}
    delays = [e.delay for e in events if e.kind == "retry_scheduled"]
    assert len(delays) == 3
    assert all(d is not None and 0.01 <= d <= 0.02 for d in delays), delays


async def test_the_hook_is_not_asked_about_failures_that_are_not_retried(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution

        ASKED: list[str] = []

        def hook(exc: BaseException) -> float:
            ASKED.append(type(exc).__name__)
            return 0.0

        @execution(retries=2, retry_after=hook)
        async def fails() -> int:
            raise ValueError("not retryable")
        """
    )
    with pytest.raises(ExecutionError):
        await Driver(mod).prepare(["fails"]).execute()
    assert mod.ASKED == []


async def test_a_hook_that_raises_stops_the_retries(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution

        CALLS: list[int] = []

        def hook(exc: BaseException) -> float:
            raise KeyError("broken hook")

        @execution(retries=5, initial_delay=0.0, retry_after=hook)
        async def fails() -> int:
            CALLS.append(1)
            raise ConnectionError("down")
        """
    )
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["fails"]).execute()
    leaf = only_leaf(info)
    assert type(leaf) is ConnectionError  # the node's failure is what is reported
    assert (
        f"{PREFIX}node 'fails': its retry_after hook raised KeyError; the retry was not taken"
    ) in notes(leaf)
    (hook_error,) = failures(leaf)
    assert type(hook_error) is KeyError
    assert mod.CALLS == [1]


@pytest.mark.parametrize(
    ("returned", "described"),
    [
        ("-1.0", "an unusable wait (negative, NaN, or infinite without max_delay)"),
        ("float('nan')", "an unusable wait (negative, NaN, or infinite without max_delay)"),
        ("float('inf')", "an unusable wait (negative, NaN, or infinite without max_delay)"),
        ("'5'", "a str instead of a number or None"),
        ("True", "a bool instead of a number or None"),
    ],
)
async def test_a_hook_returning_an_unusable_wait_stops_the_retries(
    make_module: Any, returned: str, described: str
) -> None:
    mod = make_module(
        f"""
        from sdax_hamilton import execution

        CALLS: list[int] = []

        @execution(retries=5, initial_delay=0.0, retry_after=lambda exc: {returned})
        async def fails() -> int:
            CALLS.append(1)
            raise ConnectionError("down")
        """
    )
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["fails"]).execute()
    leaf = only_leaf(info)
    assert (
        f"{PREFIX}node 'fails': its retry_after hook returned {described}; the retry was not taken"
    ) in notes(leaf)
    assert mod.CALLS == [1]


async def test_a_release_hook_sets_the_release_wait(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import Acquisition, execution, shutdown

        LOG: list[str] = []

        async def res() -> int:
            return 1

        @shutdown(of=res, retries=1, initial_delay=100.0, retry_after=lambda exc: 0.01)
        async def close_res(record: Acquisition[int]) -> None:
            LOG.append("close")
            if len(LOG) == 1:
                raise ConnectionError()
        """
    )
    events: list[RunEvent] = []
    plan = Driver(mod).prepare(["res"])
    async with plan.open(observer=events.append) as out:
        assert out == {"res": 1}
    assert mod.LOG == ["close", "close"]
    assert [e.delay for e in events if e.kind == "release_retry_scheduled"] == [0.01]


async def test_a_node_ready_only_after_the_deadline_fails_with_a_timeout(mod: Any) -> None:
    plan = Driver(mod).prepare(["after_block"])
    with pytest.raises(ExecutionError) as info:
        await plan.execute(inputs={"seconds": 0.3}, timeout=0.1)
    leaf = only_leaf(info)
    assert type(leaf) is TimeoutError
    assert (
        f"{PREFIX}node 'after_block': the run's timeout expired before it could start"
    ) in notes(leaf)
    assert "after_block" not in mod.LOG


# ------------------------------------------------------------------ open()


async def test_open_clipped_failure_skips_the_body_and_releases(mod: Any) -> None:
    plan = Driver(mod).prepare(["conn", "hangs"])
    with pytest.raises(ExecutionError) as info:
        async with plan.open(timeout=0.2):
            pytest.fail("the body must not run")
    assert type(only_leaf(info)) is TimeoutError
    assert mod.LOG == ["acquire", "hangs", "release"]


async def test_open_body_is_not_counted(mod: Any) -> None:
    plan = Driver(mod).prepare(["conn"])
    async with plan.open(timeout=0.1) as out:
        assert isinstance(out["conn"], mod.Conn)
        await asyncio.sleep(0.3)  # past the run's timeout: the body is not bound by it
    assert mod.LOG == ["acquire", "release"]


# ------------------------------------------------------------------ caller side


async def test_caller_cancellation_during_a_clipped_attempt(mod: Any) -> None:
    plan = Driver(mod).prepare(["hangs"])
    events: list[RunEvent] = []
    task = asyncio.create_task(plan.execute(timeout=20.0, observer=events.append))
    async with asyncio.timeout(10):
        while "hangs" not in mod.LOG:
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mod.LOG == ["acquire", "hangs", "release"]
    started = [e for e in events if e.kind == "attempt_started" and e.node == "hangs"]
    # its own timeout is 30 s, more than the run's 20 s (a loop whose clock has millisecond
    # resolution, uvloop's, may see no time pass before the attempt: an equal timeout would
    # not be clipped)
    assert [e.clipped for e in started] == [True]


async def test_a_callers_asyncio_timeout_keeps_working(mod: Any) -> None:
    plan = Driver(mod).prepare(["hangs"])
    began = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        async with asyncio.timeout(0.2):
            await plan.execute(timeout=20.0)
    assert not isinstance(info.value, ExceptionGroup)  # the caller's own timeout
    assert time.monotonic() - began < 5.0
    assert mod.LOG == ["acquire", "hangs", "release"]


async def test_concurrent_runs_keep_their_own_deadlines(mod: Any) -> None:
    plan = Driver(mod).prepare(["busy"])
    fast = Driver(mod).prepare(["hangs"])

    async def short() -> BaseException | None:
        try:
            await fast.execute(timeout=0.2)
        except ExecutionError as exc:
            return exc
        return None

    with instant_retries():
        results = await asyncio.gather(
            short(), plan.execute(inputs={"waits": [0.3]}, timeout=10.0), short()
        )
    assert isinstance(results[0], ExecutionError) and isinstance(results[2], ExecutionError)
    assert results[1] == {"busy": 2}
    assert mod.LOG.count("release") == 2


# ------------------------------------------------------------------ observability


async def test_events_report_and_logs_show_the_deadline(
    mod: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plan = Driver(mod).prepare(["busy"])
    report = RunReport()
    events: list[RunEvent] = []
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        with pytest.raises(ExecutionError) as info:
            await plan.execute(
                inputs={"waits": [60.0]}, timeout=0.3, observer=[report, events.append]
            )
    kinds = [e.kind for e in events]
    (run_started,) = [e for e in events if e.kind == "run_started"]
    assert run_started.deadline is not None
    assert run_started.deadline - run_started.time == pytest.approx(0.3, abs=1e-9)
    assert report.timeout is not None and 0.29 <= report.timeout <= 0.31
    skipped = [e for e in events if e.kind == "retry_skipped"]
    assert [(e.node, e.attempt, e.delay) for e in skipped] == [("busy", 1, 60.0)]
    assert "retry_scheduled" not in kinds
    assert kinds.index("retry_skipped") == kinds.index("attempt_failed") + 1
    started = [e for e in events if e.kind == "attempt_started"]
    assert [e.clipped for e in started] == [True]  # no timeout of its own: the run's applies
    assert report.nodes["busy"].clipped == 1
    assert report.nodes["busy"].retry_skipped
    text = report.format()
    assert "run timeout" in text and "1 clipped" in text and "no time to retry" in text
    warnings = [r.getMessage() for r in caplog.records if r.name == "sdax_hamilton"]
    assert any("no room for a retry" in m and "'busy'" in m for m in warnings), warnings
    assert [type(e).__name__ for e in info.value.exceptions] == ["Busy"]


async def test_expiry_is_an_event_and_a_failed_node_in_the_report(mod: Any) -> None:
    plan = Driver(mod).prepare(["after_block"])
    report = RunReport()
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError):
        await plan.execute(inputs={"seconds": 0.2}, timeout=0.05, observer=[report, events.append])
    (expired,) = [e for e in events if e.kind == "deadline_expired"]
    assert expired.node == "after_block" and expired.attempt == 1
    assert type(expired.error) is TimeoutError
    node = report.nodes["after_block"]
    assert (node.outcome, node.expired, node.attempts) == ("failed", True, 0)
    assert "run timed out" in report.format()


async def test_clipped_timeouts_are_noted_in_events(mod: Any) -> None:
    plan = Driver(mod).prepare(["hangs"])
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError):
        await plan.execute(timeout=0.2, observer=events.append)
    timed_out = [e for e in events if e.kind == "attempt_timed_out"]
    assert [(e.node, e.clipped) for e in timed_out] == [("hangs", True)]


async def test_open_caller_cancellation_during_a_clipped_attempt(mod: Any) -> None:
    plan = Driver(mod).prepare(["conn", "hangs"])
    body: list[str] = []

    async def use() -> None:
        async with plan.open(timeout=30.0):
            body.append("ran")

    task = asyncio.create_task(use())
    async with asyncio.timeout(10):
        while "hangs" not in mod.LOG:
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert body == []
    assert mod.LOG == ["acquire", "hangs", "release"]


async def test_concurrent_opens_each_release_after_their_own_deadline(mod: Any) -> None:
    plan = Driver(mod).prepare(["conn", "hangs"])
    ok = Driver(mod).prepare(["conn"])

    async def failing() -> str:
        try:
            async with plan.open(timeout=0.2):
                return "body ran"
        except ExecutionError as error:
            (leaf,) = error.exceptions
            return type(leaf).__name__

    async def succeeding() -> str:
        async with ok.open(timeout=0.2) as out:
            await asyncio.sleep(0.4)  # the body outlives the run's timeout: not counted
            return type(out["conn"]).__name__

    began = time.monotonic()
    results = await asyncio.gather(failing(), succeeding(), failing())
    assert results == ["TimeoutError", "Conn", "TimeoutError"]
    assert mod.LOG.count("acquire") == 3 and mod.LOG.count("release") == 3
    assert time.monotonic() - began < 5.0


async def test_an_async_hook_is_unusable_and_never_left_unawaited(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution

        async def hook(exc: BaseException) -> float:
            return 0.0

        @execution(retries=2, initial_delay=0.0, retry_after=hook)
        async def fails() -> int:
            raise ConnectionError("down")
        """
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would be an error
        with pytest.raises(ExecutionError) as info:
            await Driver(mod).prepare(["fails"]).execute()
    assert (
        f"{PREFIX}node 'fails': its retry_after hook returned a coroutine instead of a number "
        "or None; the retry was not taken"
    ) in notes(only_leaf(info))


async def test_a_hook_raising_keyboard_interrupt_stops_the_run_after_cleanup(
    make_module: Any,
) -> None:
    mod = make_module(
        """
        from sdax_hamilton import Acquisition, execution, shutdown

        LOG: list[str] = []
        STOP = KeyboardInterrupt()

        def hook(exc: BaseException) -> float:
            raise STOP

        async def res() -> int:
            return 1

        @shutdown(of=res)
        async def close_res(record: Acquisition[int]) -> None:
            LOG.append("release")

        @execution(retries=2, initial_delay=0.0, retry_after=hook)
        async def fails(res: int) -> int:
            raise ConnectionError("down")
        """
    )
    with pytest.raises(KeyboardInterrupt) as info:
        await Driver(mod).prepare(["fails"]).execute()
    assert info.value is mod.STOP
    assert mod.LOG == ["release"]
    (node_failure,) = failures(info.value)
    assert type(node_failure) is ConnectionError


async def test_logs_name_the_runs_timeout(mod: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="sdax_hamilton"):
        with pytest.raises(ExecutionError):
            await Driver(mod).prepare(["hangs"]).execute(timeout=0.2)
        with pytest.raises(ExecutionError):
            await (
                Driver(mod).prepare(["after_block"]).execute(inputs={"seconds": 0.2}, timeout=0.05)
            )
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "sdax_hamilton"]
    debug = [m for level, m in records if level == logging.DEBUG]
    warnings = [m for level, m in records if level == logging.WARNING]
    errors = [m for level, m in records if level == logging.ERROR]
    assert any(m.startswith("run timeout 0.200 s") for m in debug), debug
    assert any(m.startswith("run timeout 0.050 s") for m in debug), debug
    assert any("(timeout clipped to the run's)" in m and "'hangs'" in m for m in debug), debug
    assert any("cut short by the run's timeout" in m and "'hangs'" in m for m in warnings)
    assert "node 'after_block': the run's timeout expired before it could start" in warnings, (
        warnings
    )
    assert any("'after_block' failed before its first attempt" in m for m in errors), errors


CAPPED = """
from sdax_hamilton import execution

CALLS: list[int] = []

@execution(retries=4, initial_delay=0.01, backoff_factor=3.0, max_delay=0.05)
async def capped() -> int:
    CALLS.append(1)
    if len(CALLS) % 5:
        raise ConnectionError()
    return 1
"""


async def test_seeded_capped_waits_are_reproducible(make_module: Any) -> None:
    from sdax_hamilton.testing import jitter_seed

    mod = make_module(CAPPED)
    plan = Driver(mod).prepare(["capped"])

    async def delays() -> list[float]:
        events: list[RunEvent] = []
        with jitter_seed(11):
            await plan.execute(observer=events.append)
        return [e.delay for e in events if e.kind == "retry_scheduled" and e.delay is not None]

    first, second = await delays(), await delays()
    assert first == second and len(first) == 4
    for k, d in enumerate(first):
        base = min(0.05, 0.01 * 3.0**k)
        assert base * 0.5 <= d <= base, (k, d)


async def test_instant_retries_skip_hinted_waits_too(mod: Any) -> None:
    plan = Driver(mod).prepare(["busy"])
    events: list[RunEvent] = []
    began = time.monotonic()
    with instant_retries():
        assert await plan.execute(inputs={"waits": [30.0, 20.0]}, observer=events.append) == {
            "busy": 2
        }
    assert [e.delay for e in events if e.kind == "retry_scheduled"] == [0.0, 0.0]
    assert time.monotonic() - began < 5.0
