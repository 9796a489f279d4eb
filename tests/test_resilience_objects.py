"""The objects shared across runs, through the Python surface (docs/contract.md#shared-objects,
#bulkhead, #circuit-breaker, #retry-budget).

Construction checks every rule of docs/contract.md#shared-objects; the state machines are
driven through the core methods a run will call (``obj._core``), handed explicit times;
threads hammer one object.
"""

from __future__ import annotations

import copy
import pickle
import threading
import time
from typing import Any

import pytest

from sdax_hamilton import (
    Bulkhead,
    BulkheadFull,
    CircuitBreaker,
    CircuitOpen,
    RetryBudget,
)

HUGE = 10**400


class FloatSub(float):
    pass


class IntSub(int):
    pass


# ------------------------------ construction (docs/contract.md#shared-objects)


def test_number_subclasses_are_numbers_as_for_policies() -> None:
    # The same reading as execution(...)'s numbers (docs/contract.md#hostile-bindings): an
    # int or float subclass (numpy's scalars are) is read by its value, a bool is refused.
    assert Bulkhead(IntSub(2), max_waiting=IntSub(1)).in_use == 0
    assert CircuitBreaker(failure_ratio=FloatSub(0.5), min_calls=IntSub(3)).state == "closed"
    assert RetryBudget(ratio=FloatSub(0.1), min_per_second=IntSub(0)).available == 0.0
    with pytest.raises(ValueError, match="Invalid max_concurrent: 0;"):
        Bulkhead(IntSub(0))
    with pytest.raises(ValueError, match=r"Invalid min_per_second: -1\.0;"):
        RetryBudget(min_per_second=FloatSub(-1.0))


def test_defaults_follow_the_spec() -> None:
    b = Bulkhead(3)
    assert (b.max_concurrent, b.max_waiting, b.name) == (3, 0, None)
    cb = CircuitBreaker()
    assert (cb.failure_ratio, cb.min_calls, cb.window, cb.break_for, cb.probes) == (
        0.5,
        20,
        30.0,
        5.0,
        1,
    )
    assert cb.name is None
    assert cb.state == "closed"
    rb = RetryBudget()
    assert (rb.ratio, rb.min_per_second, rb.window) == (0.2, 10.0, 10.0)
    # No first attempt yet: the reserve, min_per_second * window.
    assert rb.available == 100.0


def test_arguments_after_the_first_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Bulkhead(1, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CircuitBreaker(0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        RetryBudget(0.2)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_concurrent": -1}, "max_concurrent"),
        ({"max_concurrent": -HUGE}, "max_concurrent"),
        ({"max_concurrent": 1, "max_waiting": -1}, "max_waiting"),
        ({"max_concurrent": 1, "max_waiting": -HUGE}, "max_waiting"),
    ],
)
def test_bulkhead_values(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError, match=f"Invalid {argument}: .*{argument} must be"):
        Bulkhead(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"max_concurrent": True}, "max_concurrent"),
        ({"max_concurrent": 1.0}, "max_concurrent"),
        ({"max_concurrent": "2"}, "max_concurrent"),
        ({"max_concurrent": None}, "max_concurrent"),
        ({"max_concurrent": 1, "max_waiting": False}, "max_waiting"),
        ({"max_concurrent": 1, "max_waiting": 0.0}, "max_waiting"),
        ({"max_concurrent": 1, "name": 3}, "name"),
        ({"max_concurrent": 1, "name": b"db"}, "name"),
    ],
)
def test_bulkhead_types(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(TypeError, match=f"Invalid {argument}: "):
        Bulkhead(**kwargs)


def test_bulkhead_huge_limits_are_valid() -> None:
    b = Bulkhead(HUGE, max_waiting=HUGE, name="db")
    assert b.name == "db"
    assert b._core.try_acquire() == "granted"


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"failure_ratio": 0}, "failure_ratio"),
        ({"failure_ratio": 0.0}, "failure_ratio"),
        ({"failure_ratio": -0.5}, "failure_ratio"),
        ({"failure_ratio": 1.0000001}, "failure_ratio"),
        ({"failure_ratio": 2}, "failure_ratio"),
        ({"failure_ratio": HUGE}, "failure_ratio"),
        ({"failure_ratio": float("nan")}, "failure_ratio"),
        ({"failure_ratio": float("inf")}, "failure_ratio"),
        ({"min_calls": 0}, "min_calls"),
        ({"min_calls": -HUGE}, "min_calls"),
        ({"window": 0}, "window"),
        ({"window": -1.0}, "window"),
        ({"window": float("inf")}, "window"),
        ({"window": float("nan")}, "window"),
        ({"window": HUGE}, "window"),
        ({"break_for": 0.0}, "break_for"),
        ({"break_for": float("inf")}, "break_for"),
        ({"break_for": HUGE}, "break_for"),
        ({"probes": 0}, "probes"),
        ({"probes": -1}, "probes"),
    ],
)
def test_breaker_values(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError, match=f"Invalid {argument}: .*{argument} must be"):
        CircuitBreaker(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"failure_ratio": True}, "failure_ratio"),
        ({"failure_ratio": "0.5"}, "failure_ratio"),
        ({"failure_ratio": None}, "failure_ratio"),
        ({"min_calls": True}, "min_calls"),
        ({"min_calls": 20.0}, "min_calls"),
        ({"window": False}, "window"),
        ({"window": "30"}, "window"),
        ({"break_for": True}, "break_for"),
        ({"break_for": None}, "break_for"),
        ({"probes": True}, "probes"),
        ({"probes": 1.0}, "probes"),
        ({"name": 1}, "name"),
    ],
)
def test_breaker_types(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(TypeError, match=f"Invalid {argument}: "):
        CircuitBreaker(**kwargs)


def test_breaker_edges_are_valid() -> None:
    cb = CircuitBreaker(failure_ratio=1, min_calls=HUGE, window=1, break_for=1e-9, probes=HUGE)
    assert (cb.failure_ratio, cb.window, cb.break_for) == (1.0, 1.0, 1e-9)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ratio": -0.1}, "ratio"),
        ({"ratio": float("inf")}, "ratio"),
        ({"ratio": float("nan")}, "ratio"),
        ({"ratio": HUGE}, "ratio"),
        ({"min_per_second": -1}, "min_per_second"),
        ({"min_per_second": float("inf")}, "min_per_second"),
        ({"min_per_second": -HUGE}, "min_per_second"),
        ({"window": 0}, "window"),
        ({"window": float("nan")}, "window"),
    ],
)
def test_budget_values(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError, match=f"Invalid {argument}: .*{argument} must be"):
        RetryBudget(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ratio": True}, "ratio"),
        ({"ratio": "0.2"}, "ratio"),
        ({"ratio": None}, "ratio"),
        ({"min_per_second": False}, "min_per_second"),
        ({"window": True}, "window"),
    ],
)
def test_budget_types(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(TypeError, match=f"Invalid {argument}: "):
        RetryBudget(**kwargs)


def test_budget_zero_ratio_and_reserve_are_valid() -> None:
    rb = RetryBudget(ratio=0, min_per_second=0, window=1)
    assert rb.available == 0.0


# ------------------------------------------------------------------ read-only, repr, copies


@pytest.mark.parametrize(
    ("obj", "attribute"),
    [
        (Bulkhead(1), "in_use"),
        (Bulkhead(1), "waiting"),
        (CircuitBreaker(), "state"),
        (RetryBudget(), "available"),
        (Bulkhead(1), "other"),
    ],
)
def test_properties_are_read_only(obj: object, attribute: str) -> None:
    with pytest.raises(AttributeError):
        setattr(obj, attribute, 0)


def test_repr_shows_name_and_state() -> None:
    b = Bulkhead(2, max_waiting=1, name="db")
    assert b._core.try_acquire() == "granted"
    assert repr(b) == "Bulkhead(name='db', max_concurrent=2, max_waiting=1, in_use=1, waiting=0)"
    assert repr(CircuitBreaker(name="api")).startswith("CircuitBreaker(name='api', state='closed'")
    assert repr(RetryBudget(ratio=0.5, min_per_second=1, window=2)) == (
        "RetryBudget(ratio=0.5, min_per_second=1.0, window=2.0, available=2.0)"
    )


def test_copies_share_the_state() -> None:
    b = Bulkhead(1)
    assert copy.copy(b) is b
    assert copy.deepcopy({"x": b})["x"] is b
    cb, rb = CircuitBreaker(), RetryBudget()
    assert copy.deepcopy(cb) is cb and copy.copy(rb) is rb


def test_exceptions() -> None:
    cb = CircuitBreaker(name="db")
    exc = CircuitOpen("circuit 'db' is open", 2.5, cb)
    assert isinstance(exc, Exception)
    assert (exc.retry_after, exc.breaker, str(exc)) == (2.5, cb, "circuit 'db' is open")
    full = BulkheadFull("bulkhead 'db' is full")
    assert isinstance(full, Exception) and full.bulkhead is None
    again = pickle.loads(pickle.dumps(full))
    assert (type(again), str(again)) == (BulkheadFull, "bulkhead 'db' is full")


# ------------------------------ bulkhead (docs/contract.md#bulkhead)


def test_bulkhead_grants_queues_fifo_and_rejects() -> None:
    b = Bulkhead(2, max_waiting=2)
    core = b._core
    assert core.try_acquire() == "granted"
    assert core.try_acquire() == "granted"
    w1, w2 = core.try_acquire(), core.try_acquire()
    assert isinstance(w1, int) and isinstance(w2, int)
    assert core.try_acquire() == "rejected"
    assert (b.in_use, b.waiting) == (2, 2)
    # Releases go to the waiters in the order they came.
    assert core.release() == w1
    assert core.claim(w1)
    assert core.release() == w2
    # w2 is cancelled before it claims: its permit goes back to the pool.
    assert core.cancel_waiter(w2) is None
    assert not core.claim(w2)
    assert (b.in_use, b.waiting) == (1, 0)
    assert core.release() is None
    assert (b.in_use, b.waiting) == (0, 0)
    with pytest.raises(RuntimeError, match="no permit"):
        core.release()


def test_cancelled_granted_waiter_passes_its_permit_on() -> None:
    b = Bulkhead(1, max_waiting=2)
    core = b._core
    assert core.try_acquire() == "granted"
    w1, w2 = core.try_acquire(), core.try_acquire()
    assert isinstance(w1, int) and isinstance(w2, int)
    assert core.release() == w1
    assert core.cancel_waiter(w1) == w2
    assert core.claim(w2)
    assert core.release() is None
    assert (b.in_use, b.waiting) == (0, 0)


def test_threads_hammering_one_bulkhead_leave_nothing() -> None:
    b = Bulkhead(3, max_waiting=4)
    core = b._core
    lock = threading.Lock()
    wakeups: dict[int, threading.Event] = {}
    running = 0
    peak = 0
    errors: list[str] = []

    def hand_on(next_waiter: int | None) -> None:
        if next_waiter is not None:
            with lock:
                event = wakeups.setdefault(next_waiter, threading.Event())
            event.set()

    def worker() -> None:
        nonlocal running, peak
        for i in range(300):
            got = core.try_acquire()
            if got == "rejected":
                continue
            if isinstance(got, int):
                with lock:
                    event = wakeups.setdefault(got, threading.Event())
                if i % 7 == 0:
                    # Gives up waiting: nothing may stay behind, granted or not.
                    hand_on(core.cancel_waiter(got))
                    continue
                event.wait()
                if not core.claim(got):
                    errors.append(f"waiter {got} woken without a permit")
                    continue
            with lock:
                running += 1
                peak = max(peak, running)
                if b.in_use > 3:
                    errors.append(f"in_use {b.in_use}")
            time.sleep(0)
            with lock:
                running -= 1
            hand_on(core.release())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert 1 <= peak <= 3
    assert (b.in_use, b.waiting) == (0, 0)


# ------------------------------ breaker (docs/contract.md#circuit-breaker)


def test_breaker_opens_rejects_half_opens_and_closes() -> None:
    cb = CircuitBreaker(failure_ratio=0.5, min_calls=4, window=10.0, break_for=5.0, probes=2)
    core = cb._core
    t = 1000.0
    assert core.record(t, True, None) is None
    assert core.record(t, True, None) is None
    assert core.record(t, False, None) is None
    # 2 failures of 4 outcomes: 0.5 >= failure_ratio.
    assert core.record(t + 1, False, None) == "open"
    assert core.state(t + 1) == "open"
    assert core.admit(t + 2) == (4.0, None)
    p1, transition = core.admit(t + 6)
    assert transition == "half_open" and isinstance(p1, int)
    p2, _ = core.admit(t + 6)
    assert isinstance(p2, int)
    # Probes all out: others are rejected.
    assert core.admit(t + 6) == (5.0, None)
    assert core.record(t + 6.5, True, p1) is None
    assert core.record(t + 6.5, True, p2) == "closed"
    assert core.state(t + 6.5) == "closed"
    assert core.outcomes(t + 6.5) == (0, 0)
    assert core.admit(t + 7) == (None, None)


def test_a_failing_probe_reopens() -> None:
    cb = CircuitBreaker(failure_ratio=1.0, min_calls=1, break_for=2.0)
    core = cb._core
    assert core.record(10.0, False, None) == "open"
    probe, _ = core.admit(12.0)
    assert isinstance(probe, int)
    assert core.record(12.5, False, probe) == "open"
    assert core.admit(13.5) == (1.0, None)


def test_a_forgotten_probe_frees_its_place() -> None:
    core = CircuitBreaker(failure_ratio=1.0, min_calls=1, break_for=1.0)._core
    core.record(0.0, False, None)
    probe, _ = core.admit(1.0)
    assert isinstance(probe, int)
    assert isinstance(core.admit(1.0)[0], float)
    core.forget_probe(probe)
    again, _ = core.admit(1.0)
    assert isinstance(again, int)


def test_state_property_reads_the_monotonic_clock() -> None:
    cb = CircuitBreaker(failure_ratio=1.0, min_calls=1, break_for=3600.0)
    assert cb._core.record(time.monotonic(), False, None) == "open"
    assert cb.state == "open"
    cb = CircuitBreaker(failure_ratio=1.0, min_calls=1, break_for=1e-9)
    assert cb._core.record(time.monotonic() - 1.0, False, None) == "open"
    assert cb.state == "half_open"


# ------------------------------ budget (docs/contract.md#retry-budget)


def test_budget_allows_ratio_plus_reserve_within_the_window() -> None:
    rb = RetryBudget(ratio=0.2, min_per_second=0.5, window=10.0)
    core = rb._core
    for _ in range(10):
        core.deposit(100.0)
    # 0.2 * 10 + 0.5 * 10 = 7.
    assert core.available(100.0) == 7.0
    taken = sum(core.try_take(101.0) for _ in range(10))
    assert taken == 7
    assert core.available(101.0) == 0.0
    assert core.counts(101.0) == (10, 7)
    # After the window, the tokens and the retries have expired: the reserve alone.
    assert core.available(111.5) == 5.0


def test_available_property_reads_the_monotonic_clock() -> None:
    rb = RetryBudget(ratio=1.0, min_per_second=0.0, window=3600.0)
    rb._core.deposit(time.monotonic())
    assert rb.available == 1.0
    assert rb._core.try_take(time.monotonic())
    assert rb.available == 0.0


def test_threads_never_exceed_the_budget() -> None:
    rb = RetryBudget(ratio=0.1, min_per_second=1.0, window=3600.0)
    core = rb._core
    now = time.monotonic()
    granted = [0] * 8

    def worker(k: int) -> None:
        for _ in range(500):
            core.deposit(now)
            granted[k] += core.try_take(now) + core.try_take(now)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    firsts, retries = core.counts(now)
    assert firsts == 4000
    assert retries == sum(granted)
    # Allowed: 0.1 * 4000 + 1.0 * 3600 = 4000; every thread asks for more than that.
    assert retries <= 4000
    assert retries >= 3990


def test_the_guard_asks_and_records_at_the_time_of_the_clock_it_is_handed() -> None:
    from sdax_hamilton import _core

    now = [100.0]
    breaker = CircuitBreaker(min_calls=1, break_for=5.0, probes=1)
    guard = _core.Guard(None, breaker._core, lambda: now[0], lambda core, waiter: None)
    assert guard.ask() == (None, None, "closed")  # closed: no probe
    assert guard.record(False, None) == "open"
    assert not guard.admit()
    admission, transition, state = guard.ask()
    assert admission == pytest.approx(5.0) and (transition, state) == (None, "open")
    now[0] = 103.0
    assert guard.ask()[0] == pytest.approx(2.0)  # retry_after counted on the handed clock
    now[0] = 105.0
    probe, transition, state = guard.ask()
    assert isinstance(probe, int) and (transition, state) == ("half_open", "half_open")
    refused, transition, state = guard.ask()  # its one probe is out
    assert isinstance(refused, float) and (transition, state) == (None, "half_open")
    assert guard.record(True, probe) == "closed"
    assert guard.admit() and guard.end(True) is None
    assert breaker._core.outcomes(now[0]) == (1, 0)  # the closed breaker's empty window, then one
    # Without a breaker there is nothing to ask or tell.
    bare = _core.Guard(Bulkhead(1)._core, None, lambda: now[0], lambda core, waiter: None)
    assert bare.ask() == (None, None, "closed") and bare.record(False, None) is None


def test_admission_at_once_takes_everything_or_nothing() -> None:
    from sdax_hamilton import _core

    woken: list[tuple[object, int]] = []
    clock: list[float] = []

    def read_clock() -> float:
        clock.append(time.monotonic())
        return clock[-1]

    def wake(core: object, waiter: int) -> None:
        woken.append((core, waiter))

    bulkhead = Bulkhead(1, max_waiting=1)
    breaker = CircuitBreaker(min_calls=1, break_for=60.0)
    guard = _core.Guard(bulkhead._core, breaker._core, read_clock, wake)
    assert guard.admit()
    assert (bulkhead.in_use, bulkhead.waiting) == (1, 0)
    assert clock == []  # a closed breaker admits without the time
    # The bulkhead full: nothing taken, nobody queued (the driver's own admission queues).
    assert not guard.admit()
    assert (bulkhead.in_use, bulkhead.waiting) == (1, 0)
    # Over: the permit back, the failure recorded at the clock's time (min_calls=1 opens
    # the breaker).
    assert guard.end(False) == "open"
    assert len(clock) == 1
    assert bulkhead.in_use == 0 and breaker.state == "open"
    # Open: refused before the bulkhead is asked, which stays untouched.
    assert not guard.admit()
    assert bulkhead.in_use == 0
    alone = _core.Guard(bulkhead._core, None, read_clock, wake)
    assert alone.admit()
    # A permit given back with a waiter queued goes to it, woken through ``wake``; nothing
    # to record reads no clock.
    assert bulkhead._core.try_acquire() == 0
    assert alone.end(None) is None
    assert woken == [(bulkhead._core, 0)] and len(clock) == 1
    assert bulkhead._core.claim(0)
    assert bulkhead._core.release() is None
    assert (bulkhead.in_use, bulkhead.waiting) == (0, 0)
