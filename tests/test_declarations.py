"""docs/contract.md#declarations: ``execution`` and ``shutdown`` declarations."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hamilton.function_modifiers import config, tag  # type: ignore[import-untyped]
from hamilton.function_modifiers.base import resolve_nodes  # type: ignore[import-untyped]

from sdax_hamilton import _declarations
from sdax_hamilton._core import Policy
from sdax_hamilton._declarations import (
    ExecutionDeclaration,
    ShutdownDeclaration,
    default_retryable_exceptions,
    execution,
    shutdown,
)
from sdax_hamilton._failures import RetryableException


def acquire() -> int:
    return 1


Factory = Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]


def _shutdown_of_acquire(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return shutdown(of=acquire, **kwargs)


FACTORIES: list[Factory] = [execution, _shutdown_of_acquire]
FACTORY_IDS = ["execution", "shutdown"]


# --------------------------------------------------------------------------------------------
# 2.1 signatures
# --------------------------------------------------------------------------------------------


def test_signatures_are_keyword_only_with_documented_defaults() -> None:
    expected = {
        "target_": None,
        "timeout": None,
        "retries": 0,
        "retryable_exceptions": None,
        "initial_delay": 1.0,
        "backoff_factor": 2.0,
        "max_delay": None,
        "retry_after": None,
    }
    guards = ["bulkhead", "breaker", "fallback"]  # execution only (docs/resilience.md)
    hedging = ["hedge_after", "hedges"]  # execution only (docs/hedging.md)
    for factory, extra, more in (
        (execution, [], [*guards, "in_thread", *hedging]),
        (shutdown, ["of"], []),
    ):
        params = inspect.signature(factory).parameters
        assert list(params) == [*extra, *expected, *more]
        for name in more:
            defaults = {"in_thread": False, "hedges": 1}
            assert params[name].default is defaults.get(name)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
        for name, default in expected.items():
            assert params[name].default == default
    assert inspect.signature(shutdown).parameters["of"].default is inspect.Parameter.empty


def test_positional_arguments_are_type_errors() -> None:
    with pytest.raises(TypeError):
        execution(5.0)  # type: ignore[call-arg, arg-type]
    with pytest.raises(TypeError):
        shutdown(acquire)  # type: ignore[call-arg]


def test_shutdown_without_of_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="of"):
        shutdown()  # type: ignore[call-arg]


def test_default_retryable_set_is_resolved_at_decoration() -> None:
    @execution()
    def node() -> int:
        return 1

    declaration = node.__sdax_declaration__  # type: ignore[attr-defined]
    assert declaration.policy.retryable_exceptions == default_retryable_exceptions()
    assert declaration.policy.retryable_exceptions[:3] == (
        ConnectionError,
        TimeoutError,
        RetryableException,
    )


@pytest.fixture
def fresh_default_set(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_declarations, "_default_retryable", None)
    yield
    _declarations._default_retryable = None


def test_default_set_without_sdax(monkeypatch: pytest.MonkeyPatch, fresh_default_set: None) -> None:
    monkeypatch.setitem(sys.modules, "sdax", None)  # makes ``import sdax`` raise ImportError
    assert default_retryable_exceptions() == (ConnectionError, TimeoutError, RetryableException)


def test_default_set_includes_sdax_retryable_exception_when_importable(
    monkeypatch: pytest.MonkeyPatch, fresh_default_set: None
) -> None:
    fake = types.ModuleType("sdax")

    class SdaxRetryable(BaseException):
        pass

    fake.RetryableException = SdaxRetryable  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sdax", fake)
    expected = (ConnectionError, TimeoutError, RetryableException, SdaxRetryable)
    assert default_retryable_exceptions() == expected

    @shutdown(of=acquire)
    def release(acquired: Any) -> None:
        pass

    assert release.__sdax_declaration__.policy.retryable_exceptions == expected  # type: ignore[attr-defined]


def test_default_set_ignores_an_sdax_class_that_could_never_be_retryable(
    monkeypatch: pytest.MonkeyPatch, fresh_default_set: None
) -> None:
    fake = types.ModuleType("sdax")
    fake.RetryableException = BaseException  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sdax", fake)
    assert default_retryable_exceptions() == (ConnectionError, TimeoutError, RetryableException)


def test_default_set_ignores_an_sdax_class_that_is_an_interruption(
    monkeypatch: pytest.MonkeyPatch, fresh_default_set: None
) -> None:
    fake = types.ModuleType("sdax")
    fake.RetryableException = type("Stop", (KeyboardInterrupt,), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sdax", fake)
    assert default_retryable_exceptions() == (ConnectionError, TimeoutError, RetryableException)


def test_default_set_is_looked_up_once(
    monkeypatch: pytest.MonkeyPatch, fresh_default_set: None
) -> None:
    monkeypatch.setitem(sys.modules, "sdax", None)
    first = default_retryable_exceptions()
    fake = types.ModuleType("sdax")
    fake.RetryableException = type("Late", (Exception,), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sdax", fake)
    assert default_retryable_exceptions() is first


def test_user_given_set_is_kept_as_given() -> None:
    @execution(retryable_exceptions=(ValueError,), retries=2, timeout=3, initial_delay=0)
    def node() -> int:
        return 1

    policy = node.__sdax_declaration__.policy  # type: ignore[attr-defined]
    assert policy == Policy(
        retryable_exceptions=(ValueError,), retries=2, timeout=3, initial_delay=0
    )
    assert policy.retryable_exceptions == (ValueError,)
    assert policy.retries == 2
    assert policy.timeout == 3
    assert policy.initial_delay == 0
    assert policy.backoff_factor == 2.0


# --------------------------------------------------------------------------------------------
# 2.2 policy validation (at the factory call)
# --------------------------------------------------------------------------------------------

VALID_POLICIES: list[dict[str, Any]] = [
    {"retries": 0},
    {"retries": 5},
    {"timeout": None},
    {"timeout": 1},
    {"timeout": 0.001},
    {"initial_delay": 0},
    {"initial_delay": 0.0},
    {"initial_delay": 3},
    {"backoff_factor": 0.5},
    {"backoff_factor": 1},
    {"backoff_factor": 10.0},
    {"retryable_exceptions": (Exception,)},
    {"retryable_exceptions": (BaseExceptionGroup,)},
    {"retryable_exceptions": (ValueError, OSError)},
]


@pytest.mark.parametrize("factory", FACTORIES, ids=FACTORY_IDS)
@pytest.mark.parametrize("kwargs", VALID_POLICIES, ids=repr)
def test_valid_policies_are_accepted(factory: Factory, kwargs: dict[str, Any]) -> None:
    def fn() -> int:
        return 1

    assert factory(**kwargs)(fn) is fn


INVALID_POLICIES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"retries": -1}, ValueError, "retries must be a nonnegative integer"),
    ({"retries": 1.5}, TypeError, "retries must be a nonnegative integer"),
    ({"retries": True}, TypeError, "retries must be a nonnegative integer"),
    ({"retries": "1"}, TypeError, "retries must be a nonnegative integer"),
    ({"timeout": 0}, ValueError, "Invalid timeout: 0"),
    ({"timeout": -1}, ValueError, "timeout"),
    ({"timeout": float("inf")}, ValueError, "timeout must be a finite number"),
    ({"timeout": float("nan")}, ValueError, "timeout must be a finite number"),
    ({"timeout": "5"}, TypeError, "timeout must be a finite number"),
    ({"timeout": True}, TypeError, "timeout must be a finite number"),
    ({"initial_delay": -0.5}, ValueError, "Invalid initial_delay: "),
    ({"initial_delay": float("inf")}, ValueError, "initial_delay must be a finite number"),
    ({"initial_delay": float("nan")}, ValueError, "initial_delay must be a finite number"),
    ({"initial_delay": "1"}, TypeError, "initial_delay must be a finite number"),
    ({"backoff_factor": 0}, ValueError, "Invalid backoff_factor: 0"),
    ({"backoff_factor": -2}, ValueError, "backoff_factor"),
    ({"backoff_factor": float("inf")}, ValueError, "backoff_factor"),
    ({"backoff_factor": float("nan")}, ValueError, "backoff_factor"),
    (
        {"retryable_exceptions": ()},
        ValueError,
        "retryable_exceptions must be a nonempty tuple of exception classes",
    ),
    (
        {"retryable_exceptions": [ValueError]},
        TypeError,
        "retryable_exceptions must be a nonempty tuple of exception classes",
    ),
    (
        {"retryable_exceptions": (ValueError(),)},
        TypeError,
        "must contain exception classes",
    ),
    ({"retryable_exceptions": (int,)}, TypeError, "must contain exception classes"),
    (
        {"retryable_exceptions": (BaseException,)},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (asyncio.CancelledError,)},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (ValueError, KeyboardInterrupt)},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (SystemExit,)},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (BaseException,), "retries": 0},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    # a subclass is the same interruption: refused too (docs/contract.md#policy-validation)
    (
        {"retryable_exceptions": (ValueError, type("Interrupted", (KeyboardInterrupt,), {}))},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (type("Exited", (SystemExit,), {}),), "retries": 3},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
    (
        {"retryable_exceptions": (type("Cancelled", (asyncio.CancelledError,), {}),)},
        ValueError,
        "External cancellation and process termination cannot be retryable",
    ),
]


@pytest.mark.parametrize("factory", FACTORIES, ids=FACTORY_IDS)
@pytest.mark.parametrize(("kwargs", "error", "fragment"), INVALID_POLICIES, ids=repr)
def test_invalid_policies_raise_at_the_factory_call(
    factory: Factory, kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as info:
        factory(**kwargs)
    assert fragment in str(info.value)
    assert type(info.value) is error


def test_of_is_checked_before_policy() -> None:
    with pytest.raises(TypeError, match="shutdown of= must refer to an acquisition function"):
        shutdown(of=5, retries=-1)  # type: ignore[arg-type]


def test_any_callable_passes_the_of_check() -> None:
    def release(acquired: Any) -> None:
        pass

    assert shutdown(of=len)(release) is release
    assert not hasattr(len, "__sdax_shutdowns__")
    assert release.__sdax_declaration__.owner is len  # type: ignore[attr-defined]


def test_policy_is_checked_before_target() -> None:
    with pytest.raises(ValueError, match="retries"):
        execution(retries=-1, target_=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries"):
        shutdown(of=acquire, retries=-1, target_=5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# 2.3 target_
# --------------------------------------------------------------------------------------------

VALID_TARGETS: list[tuple[Any, tuple[str, ...] | None]] = [
    (None, None),
    ("a", ("a",)),
    (["a", "b"], ("a", "b")),
    (("a",), ("a",)),
    ({"a"}, ("a",)),
    (frozenset({"b"}), ("b",)),
    (OrderedDict.fromkeys(["a"]).keys(), ("a",)),
]


@pytest.mark.parametrize("factory", FACTORIES, ids=FACTORY_IDS)
@pytest.mark.parametrize(("target", "stored"), VALID_TARGETS, ids=repr)
def test_valid_targets_are_stored_as_tuples(
    factory: Factory, target: Any, stored: tuple[str, ...] | None
) -> None:
    def fn() -> int:
        return 1

    factory(target_=target)(fn)
    assert fn.__sdax_declaration__.target == stored  # type: ignore[attr-defined]


def test_target_collection_is_copied() -> None:
    names = ["a", "b"]

    def fn() -> int:
        return 1

    execution(target_=names)(fn)
    names.append("c")
    assert fn.__sdax_declaration__.target == ("a", "b")  # type: ignore[attr-defined]


INVALID_TARGETS: list[tuple[Any, type[Exception], str]] = [
    ("", ValueError, "target_"),
    ([], ValueError, "target_"),
    ((), ValueError, "target_"),
    (set(), ValueError, "target_"),
    (["a", ""], ValueError, "target_"),
    (["a", 1], ValueError, "target_"),
    ([None], ValueError, "target_"),
    (["a", "b", "a"], ValueError, "duplicate"),
    (("a", "a"), ValueError, "duplicate"),
    (b"abc", TypeError, "target_"),
    (bytearray(b"abc"), TypeError, "target_"),
    ({"a": 1}, TypeError, "target_"),
    ({}, TypeError, "target_"),
    (5, TypeError, "target_"),
    (5.0, TypeError, "target_"),
    (iter(["a"]), TypeError, "target_"),
    (object(), TypeError, "target_"),
]


@pytest.mark.parametrize("factory", FACTORIES, ids=FACTORY_IDS)
@pytest.mark.parametrize(("target", "error", "fragment"), INVALID_TARGETS, ids=repr)
def test_invalid_targets(
    factory: Factory, target: Any, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment) as info:
        factory(target_=target)
    assert type(info.value) is error


# --------------------------------------------------------------------------------------------
# 2.4 what decoration does
# --------------------------------------------------------------------------------------------


def test_execution_returns_the_same_object_and_stores_its_declaration() -> None:
    def node(x: int) -> int:
        return x + 1

    decorated = execution(timeout=2.0, retries=1, target_="node")(node)
    assert decorated is node
    declaration = node.__sdax_declaration__  # type: ignore[attr-defined]
    assert type(declaration) is ExecutionDeclaration
    assert declaration.target == ("node",)
    assert declaration.policy.timeout == 2.0
    assert declaration.policy.retries == 1


def test_shutdown_returns_the_same_object_and_records_on_owner() -> None:
    def owner() -> int:
        return 1

    def close_a(acquired: Any) -> None:
        pass

    async def close_b(acquired: Any) -> None:
        pass

    assert shutdown(of=owner, timeout=1.0)(close_a) is close_a
    assert shutdown(of=owner, target_=["x"])(close_b) is close_b
    a = close_a.__sdax_declaration__  # type: ignore[attr-defined]
    b = close_b.__sdax_declaration__  # type: ignore[attr-defined]
    assert type(a) is ShutdownDeclaration
    assert a.release is close_a and a.owner is owner
    assert a.policy.timeout == 1.0 and a.target is None
    assert b.release is close_b and b.owner is owner and b.target == ("x",)
    assert owner.__sdax_shutdowns__ == (a, b)
    assert owner.__sdax_shutdowns__[0] is a
    assert not hasattr(owner, "__sdax_declaration__")


def test_one_factory_result_can_decorate_several_functions() -> None:
    declare = execution(retries=2)

    def first() -> int:
        return 1

    def second() -> int:
        return 2

    declare(first)
    declare(second)
    assert first.__sdax_declaration__ == second.__sdax_declaration__  # type: ignore[attr-defined]


def test_declaration_records_are_frozen() -> None:
    @execution()
    def node() -> int:
        return 1

    declaration = node.__sdax_declaration__  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        declaration.target = ("x",)


def test_direct_sync_call_is_unchanged_and_never_retried() -> None:
    calls: list[int] = []

    @execution(retries=3, initial_delay=0, retryable_exceptions=(ConnectionError,))
    def flaky(x: int) -> int:
        calls.append(x)
        raise ConnectionError("down")

    assert not inspect.iscoroutinefunction(flaky)
    with pytest.raises(ConnectionError, match="down"):
        flaky(7)
    assert calls == [7]


def test_direct_sync_call_returns_plain_value() -> None:
    @execution(timeout=1.0)
    def add(x: int, y: int = 1) -> int:
        return x + y

    result = add(2, y=3)
    assert result == 5
    assert not inspect.isawaitable(result)


async def test_direct_async_call_stays_a_coroutine_without_timeout() -> None:
    release = asyncio.Event()
    calls = 0

    async def waits() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "done"

    original_code = waits.__code__
    decorated = execution(timeout=0.001, retries=2, initial_delay=0)(waits)
    assert inspect.iscoroutinefunction(decorated)
    coroutine = decorated()
    # The user's own coroutine, not a wrapper that could time out or retry.
    assert inspect.iscoroutine(coroutine)
    assert coroutine.cr_code is original_code
    task = asyncio.create_task(coroutine)
    release.set()
    assert await task == "done"
    assert calls == 1


def test_shutdown_direct_call_is_unchanged() -> None:
    seen: list[Any] = []

    @shutdown(of=acquire, retries=2, initial_delay=0, retryable_exceptions=(ValueError,))
    def release(acquired: Any) -> None:
        seen.append(acquired)
        raise ValueError("once")

    with pytest.raises(ValueError, match="once"):
        release("handle")
    assert seen == ["handle"]


def test_second_execution_conflicts() -> None:
    @execution()
    def node() -> int:
        return 1

    first = node.__sdax_declaration__  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="Conflicting execution/shutdown declaration"):
        execution(retries=1)(node)
    assert node.__sdax_declaration__ is first  # type: ignore[attr-defined]


def test_execution_then_shutdown_conflicts() -> None:
    def owner() -> int:
        return 1

    @execution()
    def node(acquired: Any) -> None:
        pass

    with pytest.raises(ValueError, match="Conflicting execution/shutdown declaration"):
        shutdown(of=owner)(node)
    assert not hasattr(owner, "__sdax_shutdowns__")
    assert type(node.__sdax_declaration__) is ExecutionDeclaration  # type: ignore[attr-defined]


def test_shutdown_then_execution_conflicts() -> None:
    def owner() -> int:
        return 1

    @shutdown(of=owner)
    def release(acquired: Any) -> None:
        pass

    with pytest.raises(ValueError, match="Conflicting execution/shutdown declaration"):
        execution()(release)
    assert type(release.__sdax_declaration__) is ShutdownDeclaration  # type: ignore[attr-defined]
    assert len(owner.__sdax_shutdowns__) == 1  # type: ignore[attr-defined]


def test_second_shutdown_on_the_same_release_conflicts() -> None:
    def owner_a() -> int:
        return 1

    def owner_b() -> int:
        return 2

    @shutdown(of=owner_a)
    def release(acquired: Any) -> None:
        pass

    with pytest.raises(ValueError, match="Conflicting execution/shutdown declaration"):
        shutdown(of=owner_b)(release)
    assert not hasattr(owner_b, "__sdax_shutdowns__")


@pytest.mark.parametrize("factory", FACTORIES, ids=FACTORY_IDS)
@pytest.mark.parametrize("target", [len, object(), 5, "text"], ids=repr)
def test_objects_rejecting_attributes_raise_attribute_error(factory: Factory, target: Any) -> None:
    with pytest.raises(AttributeError):
        factory()(target)


def test_failed_shutdown_decoration_records_nothing_on_owner() -> None:
    def owner() -> int:
        return 1

    with pytest.raises(AttributeError):
        shutdown(of=owner)(len)
    assert not hasattr(owner, "__sdax_shutdowns__")


def test_callable_objects_accepting_attributes_can_be_declared() -> None:
    class Node:
        def __call__(self) -> int:
            return 1

    instance = Node()
    assert execution()(instance) is instance
    assert type(instance.__sdax_declaration__) is ExecutionDeclaration  # type: ignore[attr-defined]


def _tagged_nodes(fn: Callable[..., Any]) -> dict[str, dict[str, Any]]:
    return {node.name: node.tags for node in resolve_nodes(fn, {"mode": "on"})}


def test_order_with_hamilton_tag_does_not_matter() -> None:
    @tag(owner="team")  # type: ignore[untyped-decorator]
    @execution(retries=1)
    def inner(x: int) -> int:
        return x

    @execution(retries=1)
    @tag(owner="team")  # type: ignore[untyped-decorator]
    def outer(x: int) -> int:
        return x

    for fn in (inner, outer):
        assert fn.__sdax_declaration__.policy.retries == 1
        (tags,) = _tagged_nodes(fn).values()
        assert tags["owner"] == "team"


def test_order_with_hamilton_config_when_does_not_matter() -> None:
    @config.when(mode="on")  # type: ignore[untyped-decorator]
    @execution(timeout=2.0)
    def value__on(x: int) -> int:
        return x

    @execution(timeout=2.0)
    @config.when(mode="on")  # type: ignore[untyped-decorator]
    def other__on(x: int) -> int:
        return x

    assert list(_tagged_nodes(value__on)) == ["value"]
    assert list(_tagged_nodes(other__on)) == ["other"]
    for fn in (value__on, other__on):
        assert fn.__sdax_declaration__.policy.timeout == 2.0


def test_shutdown_declared_before_or_after_hamilton_decorators_on_owner() -> None:
    @tag(kind="resource")  # type: ignore[untyped-decorator]
    def owner() -> int:
        return 1

    @shutdown(of=owner)
    def release(acquired: Any) -> None:
        pass

    tagged_after = tag(extra="yes")(owner)
    assert tagged_after is owner
    assert owner.__sdax_shutdowns__ == (release.__sdax_declaration__,)  # type: ignore[attr-defined]
    (tags,) = _tagged_nodes(owner).values()
    assert tags["kind"] == "resource" and tags["extra"] == "yes"


def test_no_global_registry_owner_records_are_per_function() -> None:
    def owner_a() -> int:
        return 1

    def owner_b() -> int:
        return 1

    @shutdown(of=owner_a)
    def release_a(acquired: Any) -> None:
        pass

    assert owner_a.__sdax_shutdowns__ == (release_a.__sdax_declaration__,)  # type: ignore[attr-defined]
    assert not hasattr(owner_b, "__sdax_shutdowns__")
