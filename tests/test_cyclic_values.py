"""Value checks end on cyclic data, in time linear in its size
(docs/contract.md#hostile-bindings).

A dict that contains itself, checked against a recursive ``TypedDict`` (as ``accepts``, as
a compiled ``checker``, as a run's input or a node's output), used to be walked forever.
Now a ``(dict, TypedDict)`` pair met again while it is being checked is taken as accepted,
as Python's types allow: the answer is the greatest fixed point, which hypothesis compares
with a reference that computes it by iteration over random cyclic graphs of dicts.
"""

from __future__ import annotations

import sys
import types
import typing
from typing import Any, NotRequired, TypedDict, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdax_hamilton import Driver, _types
from sdax_hamilton._types import accepts, checker


class Tree(TypedDict):
    value: int
    children: list[Tree]


class Even(TypedDict):
    odd: NotRequired[Odd]


class Odd(TypedDict):
    even: NotRequired[Even]


class Left(TypedDict):
    tag: int
    next: Left | Right | None


class Right(TypedDict):
    tag: str
    next: Left | Right | None


Either = Left | Right
TYPES = [Tree, Even, Odd, Left, Right, Either, list[Tree], Either | None]


def test_a_dict_containing_itself_is_accepted_against_a_recursive_typeddict() -> None:
    tree: dict[str, Any] = {"value": 1, "children": []}
    tree["children"].append(tree)
    assert accepts(tree, Tree)
    check = checker(Tree)
    assert check is not None and check(tree)
    tree["children"].append({"value": "bad", "children": []})
    assert not accepts(tree, Tree)
    assert not check(tree)


def test_mutual_cycles_are_decided() -> None:
    even: dict[str, Any] = {}
    odd: dict[str, Any] = {"even": even}
    even["odd"] = odd
    assert accepts(even, Even) and accepts(odd, Odd)
    even["odd"] = {"even": even, "odd": 1}  # extra keys are allowed, wrong fields are not
    assert accepts(even, Even)
    even["odd"] = {"even": 1}
    assert not accepts(even, Even)
    left: dict[str, Any] = {"tag": 1}
    right: dict[str, Any] = {"tag": "r", "next": left}
    left["next"] = right
    assert accepts(left, Either) and accepts(right, Either)
    assert accepts(left, Left) and not accepts(left, Right)
    right["next"] = [left]
    assert not accepts(left, Either) and not accepts(right, Either)


def test_shared_cycles_take_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixty dicts, each holding the next twice, the last the first: a walk that followed
    every path would take 2**60 steps."""
    steps = 0
    step = _types._step

    def counted(value: Any, node: Any) -> Any:
        nonlocal steps
        steps += 1
        return step(value, node)

    monkeypatch.setattr(_types, "_step", counted)
    ring: list[dict[str, Any]] = [{"value": i, "children": []} for i in range(60)]
    for here, after in zip(ring, ring[1:] + ring[:1], strict=True):
        here["children"] = [after, after]
    assert accepts(ring[0], Tree)
    assert steps <= 10 * len(ring)
    ring[30]["value"] = "bad"
    steps = 0
    assert not accepts(ring[0], Tree)
    assert steps <= 10 * len(ring)


def test_deep_values_are_decided_without_recursion() -> None:
    deep: Any = {"value": 0, "children": []}
    for i in range(sys.getrecursionlimit() * 5):
        deep = {"value": i, "children": [deep, deep]}  # shared: a DAG of 2**5000 paths
    assert accepts(deep, Tree)
    check = checker(Tree)
    assert check is not None and check(deep)


async def test_a_run_checks_a_cyclic_input_and_output(make_module: Any) -> None:
    module = make_module(
        """
        from __future__ import annotations
        from typing import TypedDict

        class Node(TypedDict):
            name: str
            children: list[Node]

        def looped(seed: Node) -> Node:
            node = {"name": seed["name"] + "!", "children": []}
            node["children"].append(node)
            return node

        def names(looped: Node) -> str:
            return looped["name"]
        """
    )
    seed: dict[str, Any] = {"name": "a", "children": []}
    seed["children"].append(seed)
    plan = Driver(module).prepare(["names"])
    assert await plan.execute(inputs={"seed": seed}) == {"names": "a!"}
    seed["children"].append({"name": 1, "children": []})
    with pytest.raises(TypeError, match="Invalid input: seed"):
        await plan.execute(inputs={"seed": seed})


# --------------------------------------------------------------------------------------
# against a reference: the greatest fixed point, by iteration


def _reference(root: Any, tp: Any) -> bool:
    """Assume every (dict, TypedDict) pair accepted, then drop the pairs whose own fields
    fail under what is still assumed, until nothing changes."""
    tds = [Tree, Even, Odd, Left, Right]
    dicts: dict[int, Any] = {}
    stack = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if id(item) in dicts:
                continue
            dicts[id(item)] = item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    assumed = {(i, td) for i in dicts for td in tds}

    def ok(value: Any, t: Any) -> bool:
        origin, args = typing.get_origin(t), typing.get_args(t)
        if t in tds:
            return isinstance(value, dict) and (id(value), t) in assumed
        if origin in (Union, types.UnionType):
            return any(ok(value, a) for a in args)
        if origin is list:
            return isinstance(value, list) and all(ok(v, args[0]) for v in value)
        if t is type(None):
            return value is None
        return isinstance(value, t)

    def local(value: dict[str, Any], td: Any) -> bool:
        for k, h in typing.get_type_hints(td, include_extras=True).items():
            optional = typing.get_origin(h) is NotRequired
            inner = typing.get_args(h)[0] if optional else h
            if k in value:
                if not ok(value[k], inner):
                    return False
            elif not optional:
                return False
        return True

    changed = True
    while changed:
        changed = False
        for pair in list(assumed):
            if not local(dicts[pair[0]], pair[1]):
                assumed.discard(pair)
                changed = True
    return ok(root, tp)


@st.composite
def cyclic_graphs(draw: st.DrawFn) -> dict[str, Any]:
    """A few dicts whose fields hold scalars, other dicts of the graph, or lists of them."""
    count = draw(st.integers(1, 6))
    dicts: list[dict[str, Any]] = [{} for _ in range(count)]
    ref = st.integers(0, count - 1).map(lambda i: dicts[i])
    scalar = st.one_of(st.integers(-2, 2), st.sampled_from(["a", "b"]), st.none())
    field = st.one_of(scalar, ref, st.lists(ref, max_size=3))
    for d in dicts:
        for name in draw(
            st.sets(st.sampled_from(["value", "children", "odd", "even", "tag", "next"]))
        ):
            d[name] = draw(field)
    return dicts[0]


@settings(max_examples=250, deadline=None, database=None)
@given(root=cyclic_graphs(), tp=st.sampled_from(TYPES))
def test_accepts_and_checker_are_the_greatest_fixed_point(root: dict[str, Any], tp: Any) -> None:
    expected = _reference(root, tp)
    assert accepts(root, tp) is expected
    check = checker(tp)
    assert check is None or check(root) is expected
