"""docs/contract.md#type-checker: the runtime type checker (validate_type, accepts, compatible,
checker)."""

# The legacy spellings (typing.List, Optional, Union, functional TypedDict) are under test.
# ruff: noqa: UP006, UP007, UP013, UP035, UP045

from __future__ import annotations

import collections
import collections.abc
import enum
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    Annotated,
    Any,
    ClassVar,
    Dict,
    FrozenSet,
    Generic,
    List,
    Literal,
    NewType,
    NoReturn,
    NotRequired,
    Optional,
    Protocol,
    Required,
    Set,
    SupportsInt,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
    runtime_checkable,
)

import pytest
import typing_extensions
from hypothesis import given, settings
from hypothesis import strategies as st

from sdax_hamilton._types import accepts, checker, compatible, describe, validate_type

NoneType = type(None)
T = TypeVar("T")


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Base:
    pass


class Derived(Base):
    pass


class Box(Generic[T]):
    pass


class Shape(Protocol):
    def area(self) -> float: ...


@runtime_checkable
class Closable(Protocol):
    def close(self) -> None: ...


class Implementation(Closable):
    def close(self) -> None:
        pass


class Movie(TypedDict):
    title: str
    year: int


class PartialMovie(TypedDict, total=False):
    title: Required[str]
    year: int


class Tagged(TypedDict):
    name: str
    tags: NotRequired[list[str]]


class Tree(TypedDict):
    value: int
    children: list[Tree]


class Even(TypedDict):
    odd: Optional[Odd]


class Odd(TypedDict):
    even: Optional[Even]


class BadField(TypedDict):
    items: Sequence[int]


class ExtTagged(typing_extensions.TypedDict):
    name: str
    note: typing_extensions.NotRequired[str]


Point = TypedDict("Point", {"x": int, "y": int})

UserId = NewType("UserId", int)


# --------------------------------------------------------------------------------------------
# 8.1 validate_type
# --------------------------------------------------------------------------------------------

SUPPORTED: list[Any] = [
    Any,
    None,
    NoneType,
    int,
    str,
    object,
    Base,
    Color,
    Level,
    Box,
    Implementation,
    collections.abc.Callable,
    typing.Callable,
    collections.abc.Sequence,
    Union[int, str],
    int | str,
    Optional[int],
    Optional[list[int]],
    Literal["a", 1, True, b"x", None],
    list[int],
    set[str],
    frozenset[bytes],
    List[int],
    Set[int],
    FrozenSet[int],
    list,
    set,
    frozenset,
    List,
    dict[str, int],
    Dict[str, list[int]],
    Dict,
    dict,
    tuple[int, str],
    tuple[int, ...],
    tuple[()],
    Tuple[()],
    tuple,
    Tuple,
    Tuple[int, ...],
    Movie,
    PartialMovie,
    Tagged,
    Tree,
    Even,
    Point,
    ExtTagged,
    dict[str, Tree],
    list[Union[Movie, None]],
]


@pytest.mark.parametrize("tp", SUPPORTED, ids=repr)
def test_supported_annotations_validate(tp: Any) -> None:
    validate_type(tp, where="node.x")


REJECTED: list[Any] = [
    Callable[[int], int],
    typing.Callable[[int], int],
    Sequence[int],
    typing.Sequence[int],
    Mapping[str, int],
    Iterable[int],
    Annotated[int, "meta"],
    T,
    type[int],
    typing.Type[int],
    UserId,
    Shape,
    Closable,
    SupportsInt,
    Protocol,
    Literal[Color.RED],
    Literal[Level.LOW],
    Literal[1.5],
    types.GenericAlias(list, (int, str)),
    types.GenericAlias(set, (int, int)),
    types.GenericAlias(dict, (str,)),
    types.GenericAlias(tuple, (..., int)),
    types.GenericAlias(tuple, (int, ..., str)),
    types.GenericAlias(tuple, (int, str, ...)),
    "int",
    typing.ForwardRef("int"),
    NoReturn,
    ClassVar[int],
    Box[int],
    Required[int],
    3,
    list[Sequence[int]],
    Union[int, Sequence[int]],
    dict[str, Callable[[], int]],
    tuple[int, Annotated[str, 1]],
]


@pytest.mark.parametrize("tp", REJECTED, ids=repr)
def test_unsupported_annotations_raise_type_error_naming_place_and_type(tp: Any) -> None:
    with pytest.raises(TypeError) as info:
        validate_type(tp, where="mod.node.param")
    message = str(info.value)
    assert message.startswith("mod.node.param: unsupported type annotation")
    assert repr(tp) in message


def test_nested_unsupported_member_is_named() -> None:
    with pytest.raises(TypeError, match=r"Sequence\[int\] in list\[.*Sequence\[int\]\]"):
        validate_type(list[Sequence[int]], where="w")


def test_unsupported_typeddict_field_names_field_and_class() -> None:
    with pytest.raises(TypeError, match=r"field 'items' of TypedDict .*BadField"):
        validate_type(BadField, where="w")
    with pytest.raises(TypeError, match="BadField"):
        validate_type(list[BadField], where="w")


def test_unresolvable_typeddict_annotation_is_type_error() -> None:
    namespace: dict[str, Any] = {}
    exec(
        "from typing import TypedDict\nclass Dangling(TypedDict):\n    x: 'Missing'\n",
        namespace,
    )
    with pytest.raises(TypeError, match=r"w: unsupported type annotation .*Dangling"):
        validate_type(namespace["Dangling"], where="w")


def test_recursive_typeddicts_validate_without_recursion_error() -> None:
    validate_type(Tree, where="w")
    validate_type(Even, where="w")
    validate_type(Optional[Odd], where="w")


def test_local_self_recursive_typeddict_resolves() -> None:
    class Local(TypedDict):
        child: Optional[Local]  # type: ignore[misc]

    validate_type(Local, where="w")
    assert accepts({"child": {"child": None}}, Local)
    assert not accepts({"child": {"child": 1}}, Local)


def test_validate_type_where_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        validate_type(int, "w")  # type: ignore[call-arg]


# --------------------------------------------------------------------------------------------
# 8.2 accepts
# --------------------------------------------------------------------------------------------

ACCEPTS: list[tuple[Any, Any, bool]] = [
    # Any
    (object(), Any, True),
    (None, Any, True),
    # classes and PEP 484 numeric promotion; bool is an int
    (1, int, True),
    (True, int, True),
    (1.0, int, False),
    ("1", int, False),
    (1.0, float, True),
    (1, float, True),
    (True, float, True),
    ("1.0", float, False),
    (1j, float, False),
    (1j, complex, True),
    (1.0, complex, True),
    (1, complex, True),
    ("1", complex, False),
    (True, bool, True),
    (1, bool, False),
    (Derived(), Base, True),
    (Base(), Derived, False),
    (len, collections.abc.Callable, True),
    (1, collections.abc.Callable, False),
    (len, typing.Callable, True),
    (object(), object, True),
    (Color.RED, Color, True),
    (1, Color, False),
    (Implementation(), Implementation, True),
    # None
    (None, None, True),
    (None, NoneType, True),
    (0, None, False),
    (False, None, False),
    # Union / Optional
    (None, Optional[int], True),
    (3, Optional[int], True),
    ("3", Optional[int], False),
    ("a", int | str, True),
    (2.5, Union[int, str], False),
    (1, Union[float, str], True),
    # Literal: type(value) is type(arg) and value == arg
    (1, Literal[1], True),
    (True, Literal[1], False),
    (1, Literal[True], False),
    (True, Literal[True], True),
    (1.0, Literal[1], False),
    ("a", Literal["a", "b"], True),
    ("c", Literal["a", "b"], False),
    (b"a", Literal["a"], False),
    (b"a", Literal[b"a"], True),
    (None, Literal[None], True),
    (Level.LOW, Literal[1], False),
    ([1], Literal[1], False),
    # list / set / frozenset: exact container kind, every element
    ([], list[int], True),
    ([1, 2], list[int], True),
    ([1, "x"], list[int], False),
    ((1,), list[int], False),
    ({1}, list[int], False),
    ([1, 2.5], list[float], True),
    ([1, 2], List[int], True),
    (["x"], list, True),
    ({1}, set[int], True),
    (frozenset({1}), set[int], False),
    ({"a"}, set[int], False),
    (frozenset({1}), frozenset[int], True),
    ({1}, frozenset[int], False),
    (frozenset(), FrozenSet[str], True),
    (set(), Set[str], True),
    # dict: every key and value
    ({"a": 1}, dict[str, int], True),
    ({1: 1}, dict[str, int], False),
    ({"a": "b"}, dict[str, int], False),
    ({}, dict[str, int], True),
    ([("a", 1)], dict[str, int], False),
    ({"a": [1, None]}, dict[str, list[Optional[int]]], True),
    ({"a": [1, "x"]}, dict[str, list[Optional[int]]], False),
    ({1: "a"}, Dict, True),
    (collections.OrderedDict(a=1), dict[str, int], True),
    # tuple
    ((1, "a"), tuple[int, str], True),
    ((1,), tuple[int, str], False),
    ((1, "a", 2), tuple[int, str], False),
    ([1, "a"], tuple[int, str], False),
    (("a", 1), tuple[int, str], False),
    ((), tuple[int, ...], True),
    ((1, 2, 3), tuple[int, ...], True),
    ((1, "a"), tuple[int, ...], False),
    ((), tuple[()], True),
    ((1,), tuple[()], False),
    ((), Tuple[()], True),
    ((1, "x", None), tuple, True),
    ((1, "x"), Tuple, True),
    ([], tuple, False),
    ((1, 2), Tuple[int, ...], True),
    # TypedDict: a dict, required keys present, present keys accepted, extra keys allowed
    ({"title": "t", "year": 1999}, Movie, True),
    ({"title": "t"}, Movie, False),
    ({"title": "t", "year": "1999"}, Movie, False),
    ({"title": "t", "year": 1999, "extra": object()}, Movie, True),
    ([("title", "t"), ("year", 1)], Movie, False),
    ({"title": "t"}, PartialMovie, True),
    ({"year": 1}, PartialMovie, False),
    ({"title": "t", "year": "x"}, PartialMovie, False),
    ({"name": "n"}, Tagged, True),
    ({"name": "n", "tags": ["a"]}, Tagged, True),
    ({"name": "n", "tags": [1]}, Tagged, False),
    ({"tags": []}, Tagged, False),
    ({"name": "n"}, ExtTagged, True),
    ({"name": "n", "note": 1}, ExtTagged, False),
    ({"x": 1, "y": 2}, Point, True),
    ({"x": 1}, Point, False),
    ({"value": 1, "children": [{"value": 2, "children": []}]}, Tree, True),
    ({"value": 1, "children": [{"value": "2", "children": []}]}, Tree, False),
    ({"odd": {"even": {"odd": None}}}, Even, True),
    ({"odd": {"even": {"odd": 1}}}, Even, False),
    ([{"title": "t", "year": 1}, None], list[Optional[Movie]], True),
]


@pytest.mark.parametrize(("value", "tp", "expected"), ACCEPTS, ids=repr)
def test_accepts_table(value: Any, tp: Any, expected: bool) -> None:
    assert accepts(value, tp) is expected


@pytest.mark.parametrize(("value", "tp", "expected"), ACCEPTS, ids=repr)
def test_checker_agrees_with_accepts_on_table(value: Any, tp: Any, expected: bool) -> None:
    check = checker(tp)
    assert (check is None or check(value)) is expected


def test_accepts_rejects_unsupported_annotation() -> None:
    with pytest.raises(TypeError, match="unsupported type annotation"):
        accepts([1], Sequence[int])
    with pytest.raises(TypeError, match="unsupported type annotation"):
        accepts({"items": [1]}, BadField)


def test_long_containers_are_checked_completely() -> None:
    big = list(range(100_000))
    assert accepts(big, list[int])
    check = checker(list[int])
    assert check is not None and check(big)
    big.append("last")  # type: ignore[arg-type]
    assert not accepts(big, list[int])
    assert not check(big)
    nested = [[i] for i in range(100_000)]
    assert accepts(nested, list[list[int]])
    nested.append(["x"])  # type: ignore[list-item]
    assert not accepts(nested, list[list[int]])


def _deep_tree(depth: int, leaf: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"value": leaf, "children": []}
    for i in range(depth):
        node = {"value": i, "children": [node]}
    return node


def test_deep_recursive_data_does_not_hit_recursion_limit() -> None:
    depth = sys.getrecursionlimit() * 5
    good = _deep_tree(depth, 0)
    bad = _deep_tree(depth, "bad")
    assert accepts(good, Tree)
    assert not accepts(bad, Tree)
    check = checker(Tree)
    assert check is not None
    assert check(good)
    assert not check(bad)
    chain: Any = None
    for _ in range(depth):
        chain = {"odd": {"even": chain}}
    assert accepts(chain, Optional[Even])
    assert accepts({"even": chain}, Odd)
    assert not accepts({"odd": chain}, Even)


def test_accepts_never_puts_values_in_errors() -> None:
    secret = "s3cr3t-token"
    with pytest.raises(TypeError) as info:
        accepts(secret, Sequence[str])
    assert secret not in str(info.value)


# --------------------------------------------------------------------------------------------
# 8.3 compatible
# --------------------------------------------------------------------------------------------

COMPATIBLE: list[tuple[Any, Any, bool]] = [
    # the examples of docs/contract.md#compatible
    (bool, int, True),
    (int, float, False),
    (int, Optional[int], True),
    (Optional[int], int, False),
    (list, list[int], False),
    (Literal[1, 2], int, True),
    (int | str, int, False),
    # Any on either side, equal types (after normalisation)
    (Any, int, True),
    (int, Any, True),
    (list[Any], Any, True),
    (int, int, True),
    (List[int], list[int], True),
    (Union[int, str], int | str, True),
    (Union[str, int], int | str, True),
    (None, NoneType, True),
    (Movie, Movie, True),
    (tuple[()], Tuple[()], True),
    (Dict[str, int], dict[str, int], True),
    # produced Union: every member
    (int | bool, int, True),
    (int | str, int | str | None, True),
    (Optional[int], Optional[int], True),
    (Optional[bool], Optional[int], True),
    # required Union: some member
    (bool, Union[int, str], True),
    (float, Union[int, str], False),
    (list[int], Optional[list[int]], True),
    # produced Literal: every literal accepted by the required type
    (Literal[1, 2], float, True),
    (Literal[1, "a"], int, False),
    (Literal[1], Literal[1, 2], True),
    (Literal[3], Literal[1, 2], False),
    (Literal[True], Literal[1], False),
    (Literal["a"], Optional[str], True),
    # produced TypedDict: only dict or object
    (Movie, dict, True),
    (Movie, Dict, True),
    (Movie, object, True),
    (Movie, dict[str, Any], False),
    (Movie, collections.abc.Mapping, False),
    (Movie, PartialMovie, False),
    # required TypedDict: no (unless identical)
    (dict, Movie, False),
    (dict[str, Any], Movie, False),
    # parameterised produced vs plain class: issubclass(origin, required)
    (list[int], list, True),
    (list[int], object, True),
    (list[int], collections.abc.Sequence, True),
    (dict[str, int], dict, True),
    (tuple[int, str], tuple, True),
    (tuple[int, ...], collections.abc.Sequence, True),
    (frozenset[int], set, False),
    (set[int], list, False),
    # required tuple[()]
    (tuple[int, ...], tuple[()], False),
    (tuple, tuple[()], False),
    # same container origin: only identical args
    (list[bool], list[int], False),
    (list[int], list[Optional[int]], False),
    (tuple[int, int], tuple[int, ...], False),
    (tuple[()], tuple[int, ...], False),
    (dict[str, int], dict[str, float], False),
    (list, list[Any], False),
    # two plain classes: issubclass
    (Derived, Base, True),
    (Base, Derived, False),
    (NoneType, object, True),
    (Color, object, True),
    (int, str, False),
    # otherwise no
    (int, list[int], False),
    (int, Literal[1], False),
    (list[int], tuple[int, ...], False),
]


@pytest.mark.parametrize(("produced", "required", "expected"), COMPATIBLE, ids=repr)
def test_compatible_table(produced: Any, required: Any, expected: bool) -> None:
    assert compatible(produced, required) is expected


def test_compatible_rejects_unsupported_annotations() -> None:
    with pytest.raises(TypeError, match="unsupported type annotation"):
        compatible(Sequence[int], list[int])
    with pytest.raises(TypeError, match="unsupported type annotation"):
        compatible(list[int], Sequence[int])


# --------------------------------------------------------------------------------------------
# checker
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [Any, object, Union[int, Any], Optional[object]], ids=repr)
def test_checker_returns_none_when_everything_is_accepted(tp: Any) -> None:
    assert checker(tp) is None


@pytest.mark.parametrize(
    "tp", [int, float, Optional[int], list[int], Movie, Tree, Literal["a"]], ids=repr
)
def test_checker_is_cached_by_type(tp: Any) -> None:
    first = checker(tp)
    assert first is not None
    assert checker(tp) is first


def test_checker_rejects_unsupported_annotation() -> None:
    with pytest.raises(TypeError, match="unsupported type annotation"):
        checker(Callable[[int], int])


def test_checker_with_unhashable_annotation_object_still_works() -> None:
    class Unhashable(typing._GenericAlias, _root=True):  # type: ignore[name-defined, call-arg, misc]
        __hash__ = None  # type: ignore[assignment]

    tp = Unhashable(list, (int,))
    check = checker(tp)
    assert check is not None
    assert check([1, 2]) and not check([1, "a"])
    assert accepts([1], tp) and not accepts(["a"], tp)


def test_describe_names_types_briefly() -> None:
    assert describe(None) == "None"
    assert describe(Any) == "Any"
    assert describe(Base) == "Base"
    assert describe(Optional[int]) == "Optional[int]"
    assert describe(list[int]) == "list[int]"


# --------------------------------------------------------------------------------------------
# Property: checker(tp)(v) == accepts(v, tp)
# --------------------------------------------------------------------------------------------

_LEAF_TYPES: list[Any] = [
    int,
    float,
    complex,
    bool,
    str,
    bytes,
    None,
    object,
    Any,
    Base,
    list,
    dict,
    tuple,
    set,
    frozenset,
    Literal[1],
    Literal[True, "a"],
    Literal[None, b"x", 0],
    Movie,
    PartialMovie,
    Tagged,
    Tree,
    Even,
]


def _compose(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    hashable_leaf = st.sampled_from([int, float, str, bool, bytes, None, Literal[1, "a"]])
    return st.one_of(
        children.map(lambda x: types.GenericAlias(list, (x,))),
        hashable_leaf.map(lambda x: types.GenericAlias(set, (x,))),
        hashable_leaf.map(lambda x: types.GenericAlias(frozenset, (x,))),
        st.tuples(hashable_leaf, children).map(lambda kv: types.GenericAlias(dict, kv)),
        st.lists(children, max_size=3).map(
            lambda xs: types.GenericAlias(tuple, tuple(xs)) if xs else tuple[()]
        ),
        children.map(lambda x: types.GenericAlias(tuple, (x, ...))),
        st.tuples(children, children).map(lambda ab: Union[ab]),
        children.map(lambda x: Optional[x]),
    )


TYPES = st.recursive(st.sampled_from(_LEAF_TYPES), _compose, max_leaves=6)

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.complex_numbers(max_magnitude=10, allow_nan=False, allow_infinity=False),
    st.sampled_from(["a", "b", "title", "name", "value"]),
    st.binary(max_size=2),
    st.just(Base()),
)
_HASHABLES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b"]))


def _value_compose(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.sets(_HASHABLES, max_size=3),
        st.frozensets(_HASHABLES, max_size=3),
        st.dictionaries(_HASHABLES, children, max_size=3),
        st.fixed_dictionaries(
            {"title": children, "year": children},
            optional={"name": children, "tags": children},
        ),
        st.fixed_dictionaries(
            {"value": children, "children": st.lists(children, max_size=2)},
        ),
        st.fixed_dictionaries({}, optional={"odd": children, "even": children}),
    )


ANY_VALUES = st.recursive(_SCALARS, _value_compose, max_leaves=8)


def _conforming(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values that are (mostly) accepted by ``tp``: gives the property both outcomes."""
    if depth > 4:
        return ANY_VALUES
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return ANY_VALUES
    if tp is None:
        return st.none()
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of(*[_conforming(a, depth + 1) for a in args])
    if origin is list:
        return st.lists(_conforming(args[0], depth + 1), max_size=3)
    if origin in (set, frozenset):
        base = st.sets(_conforming(args[0], depth + 1), max_size=3)
        return base if origin is set else base.map(frozenset)
    if origin is dict:
        return st.dictionaries(
            _conforming(args[0], depth + 1), _conforming(args[1], depth + 1), max_size=3
        )
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(_conforming(args[0], depth + 1), max_size=3).map(tuple)
        return st.tuples(*[_conforming(a, depth + 1) for a in args])
    if tp in (Movie, PartialMovie, Tagged, Tree, Even):
        hints = typing.get_type_hints(tp)
        return st.fixed_dictionaries(
            {k: _conforming(hints[k], depth + 1) for k in tp.__required_keys__},
            optional={k: _conforming(hints[k], depth + 1) for k in tp.__optional_keys__},
        )
    simple = {
        int: st.integers(-3, 3),
        float: st.floats(allow_nan=False),
        complex: st.complex_numbers(max_magnitude=10, allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        str: st.text(max_size=2),
        bytes: st.binary(max_size=2),
        Base: st.builds(Derived),
        list: st.lists(_SCALARS, max_size=2),
        dict: st.dictionaries(_HASHABLES, _SCALARS, max_size=2),
        tuple: st.lists(_SCALARS, max_size=2).map(tuple),
        set: st.sets(_HASHABLES, max_size=2),
        frozenset: st.frozensets(_HASHABLES, max_size=2),
    }
    return simple.get(tp, ANY_VALUES)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), tp=TYPES)
def test_checker_matches_accepts(data: st.DataObject, tp: Any) -> None:
    validate_type(tp, where="generated")
    value = data.draw(st.one_of(_conforming(tp), ANY_VALUES))
    check = checker(tp)
    assert (check is None or check(value)) is accepts(value, tp)
