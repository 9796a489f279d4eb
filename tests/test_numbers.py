"""Numbers are read exactly over their whole range (docs/contract.md#hostile-bindings).

A huge negative int is negative (``-2**1024`` is refused wherever ``-1`` is: a policy's
``max_delay``, a run's ``timeout``, a ``retry_after`` wait); a huge positive int beyond the
float range is ``+inf``, and the rules for ``inf`` apply; an ``int`` subclass (not
``bool``) is an int and a ``float`` subclass (``numpy.float64``) a float, read by their
value, never by what their class's ``__float__``, ``__index__`` or comparisons say. The
rule itself lives in the core (``Number``, core/tests/numbers.rs); here, every Python
entry point that reads a number, against Python's own exact arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdax_hamilton import Driver, ExecutionError, _core, execution
from sdax_hamilton._core import Policy

EXACT = settings(max_examples=300, deadline=None, database=None)


class Int(int):
    """An int whose class lies about it: every conversion and comparison says otherwise."""

    def __float__(self) -> float:
        return 1.0

    def __index__(self) -> int:
        return 1

    def __int__(self) -> int:
        return 1

    def __lt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "Int(lie)"


class Float(float):
    """A float whose class lies about it."""

    def __float__(self) -> float:
        return 1.0

    def __lt__(self, other: object) -> bool:
        return False

    def __repr__(self) -> str:
        return "Float(lie)"


ints = st.one_of(
    st.integers(),
    st.integers(-5000, 5000).map(lambda e: (-1 if e < 0 else 1) * 2 ** abs(e)),
    st.sampled_from([2**1024, -(2**1024), 2**1024 - 1, -(2**1023), 10**400, -(10**400)]),
)
numbers = st.one_of(
    ints,
    ints.map(Int),
    st.floats(),
    st.floats().map(Float),
    st.floats().map(numpy.float64),
)


def value_of(x: Any) -> int | float:
    """``x`` by its value, as Python's own arithmetic has it."""
    return int.__int__(x) if isinstance(x, int) else float.__float__(x)


def as_float(x: Any) -> float:
    """What a number is as seconds: an int beyond the float range is an infinity of its
    sign."""
    v = value_of(x)
    if isinstance(v, float):
        return v
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def outcome(call: Any) -> Any:
    try:
        return call()
    except (TypeError, ValueError) as exc:
        return type(exc)


@EXACT
@given(x=numbers)
def test_max_delay_is_refused_exactly_when_negative_or_nan(x: Any) -> None:
    v = value_of(x)
    got = outcome(lambda: Policy(max_delay=x))
    if v != v or v < 0:
        assert got is ValueError
    else:
        assert isinstance(got, Policy)
        assert got.max_delay == as_float(x)


@EXACT
@given(x=numbers)
def test_timeout_delay_and_factor_follow_the_contract_over_the_whole_range(x: Any) -> None:
    f = as_float(x)
    positive_finite = math.isfinite(f) and f > 0
    got = outcome(lambda: Policy(timeout=x))
    assert (got.timeout == f) if positive_finite else got is ValueError
    got = outcome(lambda: Policy(backoff_factor=x))
    assert (got.backoff_factor == f) if positive_finite else got is ValueError
    got = outcome(lambda: Policy(initial_delay=x))
    if math.isfinite(f) and value_of(x) >= 0:
        assert got.initial_delay == f
    else:
        assert got is ValueError


@EXACT
@given(x=numbers)
def test_a_run_s_timeout_is_refused_exactly_when_negative_or_nan(x: Any) -> None:
    v, f = value_of(x), as_float(x)
    got = outcome(lambda: _core.run_budget(x))
    if v != v or v < 0:
        assert got is ValueError
    else:
        assert got == (f if math.isfinite(f) else None)


@EXACT
@given(x=st.one_of(ints, ints.map(Int)))
def test_retries_are_any_nonnegative_int_stored_as_a_plain_int(x: Any) -> None:
    v = int.__int__(x)
    got = outcome(lambda: Policy(retries=x))
    if v < 0:
        assert got is ValueError
    else:
        assert type(got.retries) is int and got.retries == v
        assert got == Policy(retries=v) and hash(got) == hash(Policy(retries=v))
        assert repr(got) == repr(Policy(retries=v))


@pytest.mark.parametrize("x", [True, False, 1.0, Float(1.0), "1", None, numpy.int64(1)])
def test_retries_refuse_what_is_not_an_int(x: Any) -> None:
    with pytest.raises(TypeError, match="retries must be a nonnegative integer"):
        Policy(retries=x)


@pytest.mark.parametrize("x", [True, "1", numpy.int64(1), object()])
def test_what_is_not_a_number_is_a_type_error(x: Any) -> None:
    for argument in ("timeout", "initial_delay", "backoff_factor", "max_delay"):
        with pytest.raises(TypeError, match=f"Invalid {argument}"):
            Policy(**{argument: x})
    with pytest.raises(TypeError, match="Invalid timeout"):
        _core.run_budget(x)


def test_the_message_shows_the_value_not_what_the_class_says() -> None:
    with pytest.raises(ValueError, match=r"Invalid max_delay: -5; max_delay must be") as info:
        Policy(max_delay=Int(-5))
    assert "lie" not in str(info.value)
    with pytest.raises(ValueError, match=r"Invalid timeout: -2\.5; timeout must be"):
        Policy(timeout=Float(-2.5))


@pytest.mark.parametrize("x", [-(2**1024), -(2**64), -(10**400), Int(-(2**2000))])
def test_huge_negative_numbers_are_refused_at_decoration_and_by_a_run(x: Any) -> None:
    with pytest.raises(ValueError, match="Invalid max_delay"):
        execution(max_delay=x)
    with pytest.raises(ValueError, match="Invalid timeout"):
        execution(timeout=x)
    with pytest.raises(ValueError, match="Invalid initial_delay"):
        execution(initial_delay=x)
    with pytest.raises(ValueError, match="Invalid retries"):
        execution(retries=x)


async def test_execute_refuses_a_huge_negative_timeout(make_module: Any) -> None:
    plan = Driver(make_module("def a() -> int:\n    return 1\n")).prepare(["a"])
    for bad in (-1, -(2**1024), Int(-(2**1024))):
        with pytest.raises(ValueError, match="Invalid timeout"):
            await plan.execute(timeout=bad)
    assert await plan.execute(timeout=2**1024) == {"a": 1}  # +inf: no deadline
    assert await plan.execute(timeout=numpy.float64(30.0)) == {"a": 1}


HOOK = """
from sdax_hamilton import execution

CALLS: list[int] = []

@execution(retries=1, initial_delay=0.0, retry_after=lambda exc: RETURNED)
async def fails() -> int:
    CALLS.append(1)
    if len(CALLS) == 1:
        raise ConnectionError("down")
    return len(CALLS)
"""


@pytest.mark.parametrize("returned", [-1, -(2**1024), -(10**400), Int(-(2**1100)), Float("-inf")])
async def test_a_hook_returning_a_huge_negative_number_stops_the_retries(
    make_module: Any, returned: Any
) -> None:
    mod = make_module(HOOK.replace("RETURNED", "HINT"))
    mod.HINT = returned
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["fails"]).execute()
    (leaf,) = info.value.exceptions
    assert "its retry_after hook returned an unusable wait" in "\n".join(leaf.__notes__)
    assert mod.CALLS == [1]


@pytest.mark.parametrize(
    "returned", [numpy.float64(0.0), Float(0.0), Int(0), 0, 0.0, numpy.float64(1e-9)]
)
async def test_a_hook_returning_an_int_or_float_subclass_sets_the_wait(
    make_module: Any, returned: Any
) -> None:
    mod = make_module(HOOK.replace("RETURNED", "HINT"))
    mod.HINT = returned
    assert await Driver(mod).prepare(["fails"]).execute() == {"fails": 2}
    assert mod.CALLS == [1, 1]


async def test_a_hook_returning_a_huge_positive_int_is_capped_by_max_delay(
    make_module: Any,
) -> None:
    source = HOOK.replace("RETURNED", "HINT").replace("retries=1,", "retries=1, max_delay=0.0,")
    mod = make_module(source)
    mod.HINT = 2**1024  # +inf, capped to 0
    assert await Driver(mod).prepare(["fails"]).execute() == {"fails": 2}


@EXACT
@given(x=numbers, cap=st.sampled_from([None, 0.0, 7.5]))
def test_a_hint_is_a_wait_exactly_when_the_contract_says(x: Any, cap: float | None) -> None:
    """``Run.hinted``: a number is the wait, capped by ``max_delay``; negative (any size),
    NaN, or infinite without a cap is unusable (``BAD_HINT``, the failure is final)."""
    policy = Policy(retries=1, initial_delay=0, max_delay=cap, retry_after=lambda exc: None)
    run = _core.Run(_core.Graph([("a", [], [], policy, None)]).select(["a"]))
    run.start()
    assert run.failed(0, True) == (None, [(_core.HINT, 0, 0, None)])
    decision = run.hinted(0, x)
    delay, commands = decision.delay, decision.commands
    v, f = value_of(x), as_float(x)
    if v != v or v < 0 or (f == math.inf and cap is None):
        assert delay is None and commands == [(_core.BAD_HINT, 0, 0, None)]
    else:
        assert delay == (f if cap is None else min(f, cap))
