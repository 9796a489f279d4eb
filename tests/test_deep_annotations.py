"""Deeply nested annotations: accepted up to ``MAX_DEPTH`` levels, refused past it with a
``TypeError`` naming the function and parameter, never a ``RecursionError``
(docs/contract.md#hostile-bindings).

About 400 levels of ``list[...]`` used to raise a raw ``RecursionError`` from the type
normaliser at ``Driver(...)`` (300 passed, 600 got a clear ``TypeError`` only because
``typing.get_type_hints`` failed first). The depth is now measured with an explicit stack
before anything walks an annotation recursively.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import pytest

from sdax_hamilton import Driver
from sdax_hamilton._types import MAX_DEPTH, accepts, checker, compatible, validate_type

FORMS: dict[str, Callable[[Any, int], Any]] = {
    "list": lambda t, level: list[t],  # type: ignore[valid-type]
    "dict": lambda t, level: dict[str, t],  # type: ignore[valid-type]
    "tuple": lambda t, level: tuple[t, int],  # type: ignore[valid-type]
    "tuple...": lambda t, level: tuple[t, ...],  # type: ignore[valid-type]
    "optional": lambda t, level: (t | None) if level % 2 else list[t],  # type: ignore[valid-type]
}
DEPTHS = [MAX_DEPTH, MAX_DEPTH + 1, 300, 400, 500, 600, 5000]
TOO_DEEP = f"type annotation nested more than {MAX_DEPTH} levels deep"


def levels(form: str, depth: int) -> Any:
    """An annotation ``depth`` levels deep around ``int``."""
    t: Any = int
    for level in range(depth):
        t = FORMS[form](t, level)
    return t


def module_with(annotation: Any, *, position: str) -> types.ModuleType:
    module = types.ModuleType(f"deep_{position}_{id(annotation)}")

    if position == "parameter":

        def f(x: int) -> int:
            return 1

        f.__annotations__ = {"x": annotation, "return": int}
    else:

        def f(x: int) -> int:
            return 1

        f.__annotations__ = {"x": int, "return": annotation}
    f.__module__ = module.__name__
    f.__qualname__ = "f"
    module.f = f  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("position", ["parameter", "return"])
def test_driver_accepts_or_refuses_every_depth_cleanly(
    form: str, depth: int, position: str, registered: list[str]
) -> None:
    annotation = levels(form, depth)
    module = module_with(annotation, position=position)
    registered.append(module.__name__)
    where = f"{module.__name__}.f.x" if position == "parameter" else f"{module.__name__}.f return"
    if depth <= MAX_DEPTH:
        Driver(module)
        return
    with pytest.raises(TypeError) as info:
        Driver(module)
    assert str(info.value).startswith(f"{where}: {TOO_DEEP}")


@pytest.mark.parametrize("depth", [150, 600])
def test_string_annotations_too_deep_are_refused_cleanly(depth: int, registered: list[str]) -> None:
    """A string annotation is parsed first: past the parser's own nesting limit that
    fails, within it the depth limit does; a ``TypeError`` naming the function either way."""
    module = module_with("list[" * depth + "int" + "]" * depth, position="parameter")
    registered.append(module.__name__)
    with pytest.raises(TypeError, match=rf"^{module.__name__}\.f[.:]"):
        Driver(module)


@pytest.mark.parametrize("depth", DEPTHS)
def test_every_checker_entry_point_refuses_past_the_limit(depth: int) -> None:
    annotation = levels("list", depth)
    calls: list[Callable[[], object]] = [
        lambda: validate_type(annotation, where="m.f.x"),
        lambda: checker(annotation),
        lambda: accepts([], annotation),
        lambda: compatible(annotation, annotation),
    ]
    for call in calls:
        if depth <= MAX_DEPTH:
            call()
        else:
            with pytest.raises(TypeError, match=TOO_DEEP):
                call()


def test_a_typeddict_field_too_deep_names_the_field() -> None:
    holder = TypedDict("holder", {"rows": levels("list", 5000)})  # type: ignore[misc]  # noqa: UP013
    with pytest.raises(TypeError, match=rf"m\.f\.x: {TOO_DEEP} \(field 'rows' of TypedDict"):
        validate_type(holder, where="m.f.x")


def test_a_deep_annotation_within_the_limit_checks_values_of_any_depth() -> None:
    annotation = levels("list", MAX_DEPTH)
    value: Any = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    check = checker(annotation)
    assert check is not None and check(value) and accepts(value, annotation)
    value[0] = "x"
    assert not check(value) and not accepts(value, annotation)


def with_headroom(headroom: int, call: Callable[[], Any]) -> Any:
    """``call()`` with only about ``headroom`` frames left before the recursion limit."""
    limit = sys.getrecursionlimit()
    left = 0

    def down() -> None:
        nonlocal left
        left += 1
        down()

    try:
        down()
    except RecursionError:
        pass
    sys.setrecursionlimit(limit - left + headroom)  # the interpreter's own count of depth
    try:
        return call()
    finally:
        sys.setrecursionlimit(limit)


def test_near_the_recursion_limit_a_deep_annotation_is_a_type_error() -> None:
    annotation = levels("dict", MAX_DEPTH)  # within the limit, but a fresh one to normalise
    # CPython 3.12+ counts C recursion apart from Python frames (and what an earlier test
    # normalised may be reused): there a call may find its answer within the room left.
    # Either an answer or the TypeError, never a RecursionError; on 3.11 always the TypeError.
    strict = sys.version_info < (3, 12)
    for call in (
        lambda: validate_type(annotation, where="m.f.x"),
        lambda: checker(annotation),
        lambda: accepts([], annotation),
        lambda: compatible(annotation, int),
    ):
        try:
            with_headroom(60, call)
        except TypeError as exc:
            assert "too deeply for the stack left" in str(exc)
        else:
            assert not strict, "expected the TypeError with the stack nearly spent"
    validate_type(annotation, where="m.f.x")  # with the stack back, it is accepted


async def test_a_plan_with_an_annotation_at_the_limit_runs(registered: list[str]) -> None:
    module = module_with(levels("list", MAX_DEPTH), position="parameter")
    registered.append(module.__name__)
    plan = Driver(module).prepare(["f"])
    value: Any = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    assert await plan.execute(inputs={"x": value}) == {"f": 1}
    value[0] = "x"
    with pytest.raises(TypeError, match="Invalid input: x"):
        await plan.execute(inputs={"x": value})


class Chain(TypedDict):
    next: Chain | None


def test_a_deep_value_near_the_recursion_limit_is_decided_or_a_type_error() -> None:
    """Values are walked with an explicit stack (recursive types) or as deep as the type
    (at most a few dozen levels): a value far deeper than the recursion limit is decided,
    and with the caller's stack nearly spent it is a ``TypeError``, not ``RecursionError``."""

    value: Any = None
    for _ in range(sys.getrecursionlimit() * 10):
        value = {"next": value}
    check = checker(Chain)
    assert check is not None and check(value) and accepts(value, Chain)
    for headroom in (5, 8, 30):
        for call in (lambda: check(value), lambda: accepts(value, Chain)):
            try:
                assert with_headroom(headroom, call) is True
            except TypeError as exc:
                assert "too deeply for the stack left" in str(exc)
