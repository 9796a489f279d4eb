"""``Latency`` (docs/contract.md#latency): its signature and validation, and the core window
behind it driven with explicit times (core/tests/latency.rs has the properties), shared by
threads.
"""

from __future__ import annotations

import copy
import inspect
import math
import pickle
import threading
from typing import Any

import pytest

from sdax_hamilton import Latency, _core

HUGE = 10**400


class FloatSub(float):
    pass


class IntSub(int):
    pass


def test_signature_and_defaults() -> None:
    signature = inspect.signature(Latency)
    assert str(signature) == (
        "(percentile: 'float' = 95.0, *, window: 'float' = 60.0, min_samples: 'int' = 20, "
        "initial: 'float' = 0.1) -> 'None'"
    )
    latency = Latency()
    assert (latency.percentile, latency.window, latency.min_samples, latency.initial) == (
        95.0,
        60.0,
        20,
        0.1,
    )
    assert repr(latency) == "Latency(percentile=95.0, window=60.0, min_samples=20, initial=0.1)"
    assert Latency(99) == Latency(99.0) and Latency(99) != Latency(95)
    assert hash(Latency(99, window=5)) == hash(Latency(99.0, window=5.0))
    with pytest.raises(TypeError):
        Latency(95.0, 60.0)  # type: ignore[call-arg]  # window is keyword-only


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"percentile": 0}, r"Invalid percentile: 0; percentile must be a number greater than 0"),
        ({"percentile": -5.0}, r"Invalid percentile: -5\.0;"),
        ({"percentile": 100.5}, r"Invalid percentile: 100\.5;"),
        ({"percentile": math.nan}, r"Invalid percentile: nan;"),
        ({"percentile": math.inf}, r"Invalid percentile: inf;"),
        ({"percentile": HUGE}, r"Invalid percentile: 1000"),
        ({"window": 0.0}, r"Invalid window: 0\.0; window must be a finite number greater than 0"),
        ({"window": -1}, r"Invalid window: -1;"),
        ({"window": math.inf}, r"Invalid window: inf;"),
        ({"window": math.nan}, r"Invalid window: nan;"),
        ({"min_samples": 0}, r"Invalid min_samples: 0; min_samples must be an integer of at least"),
        ({"min_samples": -HUGE}, r"Invalid min_samples: -1000"),
        ({"initial": -0.001}, r"Invalid initial: -0\.001; initial must be a finite number"),
        ({"initial": math.inf}, r"Invalid initial: inf;"),
        ({"initial": math.nan}, r"Invalid initial: nan;"),
    ],
)
def test_wrong_values_are_value_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Latency(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"percentile": True}, r"Invalid percentile: True \(bool\)"),
        ({"percentile": "95"}, r"Invalid percentile: '95' \(str\)"),
        ({"percentile": None}, r"Invalid percentile: None \(NoneType\)"),
        ({"window": False}, r"Invalid window: False \(bool\)"),
        ({"window": "60"}, r"Invalid window: '60' \(str\)"),
        ({"min_samples": True}, r"Invalid min_samples: True \(bool\)"),
        ({"min_samples": 20.0}, r"Invalid min_samples: 20\.0 \(float\)"),
        ({"min_samples": "20"}, r"Invalid min_samples: '20' \(str\)"),
        ({"initial": True}, r"Invalid initial: True \(bool\)"),
        ({"initial": None}, r"Invalid initial: None \(NoneType\)"),
    ],
)
def test_wrong_types_are_type_errors_and_bool_is_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Latency(**kwargs)


def test_the_first_wrong_argument_is_named_types_before_values() -> None:
    with pytest.raises(ValueError, match="Invalid percentile"):
        Latency(0, window=0, min_samples=0, initial=-1)
    with pytest.raises(TypeError, match="Invalid initial"):
        Latency(0, window=0, min_samples=0, initial=True)


def test_edges_and_number_subclasses_are_accepted() -> None:
    assert Latency(100).percentile == 100.0
    assert Latency(1e-9, window=1e-9, min_samples=1, initial=0).initial == 0.0
    sub = Latency(FloatSub(90.0), window=IntSub(5), min_samples=IntSub(3), initial=FloatSub(0.5))
    assert (sub.percentile, sub.window, sub.min_samples, sub.initial) == (90.0, 5.0, 3, 0.5)
    assert type(sub.min_samples) is int and type(sub.percentile) is float


def test_copies_and_pickles_keep_the_configuration() -> None:
    latency = Latency(99.0, window=5.0, min_samples=3, initial=0.25)
    assert copy.copy(latency) is latency and copy.deepcopy(latency) is latency
    again = pickle.loads(pickle.dumps(latency))
    assert again == latency and repr(again) == repr(latency)


def test_the_window_answers_initial_then_the_percentile_at_the_times_handed_in() -> None:
    window = _core.Latency(95.0, 10.0, 20, 0.1).new_window()
    assert window.hedge_after(0.0) == 0.1
    for i in range(20):
        window.record(1.0 + i * 0.1, 0.001 * (i + 1))
    assert window.samples(3.0) == 20
    assert window.hedge_after(3.0) == pytest.approx(0.019)  # the 19th of 20, nearest rank
    assert window.samples(11.05) == 19  # the first sample is 10 s old
    assert window.hedge_after(11.05) == 0.1  # fewer than min_samples again
    assert window.hedge_after(100.0) == 0.1


def test_the_python_window_reads_the_monotonic_clock() -> None:
    window = Latency(100.0, min_samples=2, initial=0.5)._new_window()
    assert window.hedge_after() == 0.5
    window.record(0.002)
    window.record(0.004)
    assert window.samples == 2
    assert window.hedge_after() == 0.004


def test_one_window_is_shared_by_threads() -> None:
    window = _core.Latency(50.0, 60.0, 800, 0.0).new_window()  # room for 800 samples
    barrier = threading.Barrier(4)
    answers: list[float] = []

    def work(offset: int) -> None:
        barrier.wait()
        for i in range(200):
            window.record(1.0, (offset * 200 + i) / 1e6)
            answers.append(window.hedge_after(1.0))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert window.samples(1.0) == 800
    # initial (0.0) until the 800th sample, whichever thread recorded it, then the median:
    # only the asks after every record (one per thread at most) see it.
    assert len(answers) == 800 and answers.count(0.0) >= 796
    assert {answer for answer in answers if answer != 0.0} <= {399 / 1e6}
    assert window.hedge_after(1.0) == pytest.approx(399 / 1e6)  # the 400th of 0..799 µs


def test_memory_is_fixed() -> None:
    assert _core.Latency(95.0, 60.0, 20, 0.1).capacity == 512
    assert _core.Latency(95.0, 60.0, 2000, 0.1).capacity == 2000
    assert _core.Latency(95.0, 60.0, 10**9, 0.1).capacity == 65536
    window = _core.Latency(100.0, 1e6, 1, 0.0).new_window()
    for i in range(2000):
        window.record(float(i), 5.0 if i < 1000 else 0.001)
    assert window.samples(2000.0) == 512
    assert window.hedge_after(2000.0) == 0.001
