"""``max_delay`` and ``retry_after`` on ``execution`` / ``shutdown``: validated at decoration
time through the core's ``Policy`` (docs/lifecycle.md, "Deadlines and server-directed waits")."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from sdax_hamilton import _core, execution, shutdown


def acquire() -> int:
    return 1


def _shutdown(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return shutdown(of=acquire, **kwargs)


FACTORIES = [execution, _shutdown]


def hook(exc: BaseException) -> float | None:
    return None


@pytest.mark.parametrize("factory", FACTORIES, ids=["execution", "shutdown"])
@pytest.mark.parametrize("value", [0, 0.0, 1, 2.5, 1e9, math.inf])
def test_max_delay_accepts_numbers_at_least_zero(factory: Any, value: float) -> None:
    decorate = factory(max_delay=value)

    def f() -> int:
        return 1

    assert decorate(f) is f
    assert f.__sdax_declaration__.policy.max_delay == float(value)  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", FACTORIES, ids=["execution", "shutdown"])
@pytest.mark.parametrize("value", ["1", True, [1], 1j])
def test_max_delay_of_the_wrong_type_is_a_type_error(factory: Any, value: object) -> None:
    with pytest.raises(TypeError, match="max_delay"):
        factory(max_delay=value)


@pytest.mark.parametrize("factory", FACTORIES, ids=["execution", "shutdown"])
@pytest.mark.parametrize("value", [-1, -1e-9, math.nan, -math.inf])
def test_max_delay_negative_or_nan_is_a_value_error(factory: Any, value: float) -> None:
    with pytest.raises(ValueError, match="Invalid max_delay"):
        factory(max_delay=value)


@pytest.mark.parametrize("factory", FACTORIES, ids=["execution", "shutdown"])
@pytest.mark.parametrize("value", [1, "hook", 2.0, (hook,)])
def test_retry_after_must_be_callable(factory: Any, value: object) -> None:
    with pytest.raises(TypeError, match="retry_after must be a callable"):
        factory(retry_after=value)


@pytest.mark.parametrize("factory", FACTORIES, ids=["execution", "shutdown"])
def test_retry_after_is_kept_on_the_policy(factory: Any) -> None:
    def f() -> int:
        return 1

    factory(retry_after=hook, max_delay=None)(f)
    policy = f.__sdax_declaration__.policy  # type: ignore[attr-defined]
    assert policy.retry_after is hook
    assert policy.max_delay is None


def test_new_arguments_do_not_depend_on_retries() -> None:
    with pytest.raises(ValueError):
        execution(retries=0, max_delay=-1)
    with pytest.raises(TypeError):
        execution(retries=0, retry_after=object())


def test_policy_equality_hash_and_pickle_include_the_new_arguments() -> None:
    a = _core.Policy(max_delay=2.0, retry_after=hook)
    assert a == _core.Policy(max_delay=2, retry_after=hook)
    assert hash(a) == hash(_core.Policy(max_delay=2, retry_after=hook))
    assert a != _core.Policy(max_delay=3.0, retry_after=hook)
    assert a != _core.Policy(max_delay=2.0)
    assert a != _core.Policy(max_delay=2.0, retry_after=len)
    assert pickle.loads(pickle.dumps(a)) == a
    assert "max_delay=2.0" in repr(a) and "retry_after=hook" in repr(a)
    assert repr(_core.Policy()).endswith("backoff_factor=2.0)")


def test_delay_bounds_apply_the_cap_before_the_jitter() -> None:
    policy = _core.Policy(initial_delay=1.0, backoff_factor=10.0, max_delay=30.0)
    assert policy.delay_bounds(0) == (0.5, 1.0)
    assert policy.delay_bounds(1) == (5.0, 10.0)
    assert policy.delay_bounds(2) == (15.0, 30.0)
    assert policy.delay_bounds(50) == (15.0, 30.0)


@pytest.mark.parametrize("value", [0, 0.5, 3, None, math.inf])
def test_run_budget_accepts(value: float | None) -> None:
    expected = None if value is None or value == math.inf else float(value)
    assert _core.run_budget(value) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1", TypeError),
        (True, TypeError),
        ([1], TypeError),
        (-1, ValueError),
        (math.nan, ValueError),
    ],
)
def test_run_budget_refuses(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="timeout"):
        _core.run_budget(value)


def test_the_plan_picture_shows_the_cap_and_the_hook(make_module: Any) -> None:
    from sdax_hamilton import Driver

    module = make_module(
        """
        from sdax_hamilton import execution

        def hint(exc: BaseException) -> float | None:
            return None

        @execution(retries=2, max_delay=30.0, retry_after=hint)
        async def fetch() -> int:
            return 1
        """
    )
    dot = Driver(module).prepare(["fetch"]).to_dot()
    assert "retries 2, max wait 30s, retry_after" in dot
