"""Runtime type checker (docs/contract.md#type-checker): ``validate_type``, ``accepts``,
``compatible``, ``checker``.

Every annotation is first *normalised* into a small hashable tree (``_Norm``): ``None`` becomes
``NoneType``, ``typing.List`` & co. become their runtime classes, ``X | Y`` and ``Union[X, Y]``
become the same node, unions are flattened and order-insensitive. All four public functions
work on that tree, so they agree on what a type means. An annotation nested more than
``MAX_DEPTH`` levels is refused before it is normalised (docs/contract.md#hostile-bindings).

* ``accepts`` is the reference evaluator. It walks values with an explicit stack (never the
  Python call stack), so deep *data* cannot raise ``RecursionError`` even for recursive
  ``TypedDict`` types, cyclic data ends (``_Walk``), and long containers of simple element
  types are checked in tight loops.
* ``checker`` compiles a type once into nested closures (recursion follows the finite *type*
  structure only, at most ``_COMPILE_DEPTH`` levels); a type whose structure is cyclic (a
  recursive ``TypedDict``) or deeper falls back to the iterative evaluator. Compiled
  predicates are cached by type.

Error messages name the annotation and the place it came from, never a value being checked.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any, Final, Literal, Union, get_args, get_origin

__all__ = [
    "MAX_DEPTH",
    "accepts",
    "checker",
    "compatible",
    "describe",
    "invalid_output",
    "mismatch",
    "too_deep",
    "too_deep_error",
    "validate_type",
]

NoneType: Final = type(None)

# --------------------------------------------------------------------------------------------
# Normalised form
# --------------------------------------------------------------------------------------------
# A node is a tuple whose first item is its kind:
#   (_ANY,)                          typing.Any
#   (_CLS, cls)                      plain runtime class (NoneType for None; bare list/dict/...)
#   (_UNION, frozenset[node])        flattened, >= 2 members
#   (_LIT, frozenset[(type, value)]) Literal members
#   (_SEQ, origin, node)             list[X] / set[X] / frozenset[X]
#   (_DICT, node, node)              dict[K, V]
#   (_TUPLE, tuple[node, ...])       tuple[A, B] / tuple[()]
#   (_VTUPLE, node)                  tuple[X, ...]
#   (_TD, cls)                       a TypedDict class (fields resolved lazily, see _td_info)
_ANY: Final = 0
_CLS: Final = 1
_UNION: Final = 2
_LIT: Final = 3
_SEQ: Final = 4
_DICT: Final = 5
_TUPLE: Final = 6
_VTUPLE: Final = 7
_TD: Final = 8

_Norm = tuple[Any, ...]

_ANY_NODE: Final[_Norm] = (_ANY,)
_LITERAL_TYPES: Final = frozenset({str, int, bool, bytes, NoneType})
_SEQ_ORIGINS: Final = frozenset({list, set, frozenset})


def _bare_typing_aliases() -> dict[Any, type]:
    """``typing.List`` -> ``list``, ``typing.Callable`` -> ``collections.abc.Callable``, ..."""
    found: dict[Any, type] = {}
    for name in typing.__all__:
        obj = getattr(typing, name, None)
        if obj is None or isinstance(obj, type):
            continue
        try:
            origin = get_origin(obj)
            args = get_args(obj)
        except Exception:  # pragma: no cover - defensive against odd typing members
            continue
        if isinstance(origin, type) and args == ():
            found[obj] = origin
    return found


_BARE_ALIASES: Final = _bare_typing_aliases()

_UNION_ORIGINS: Final = frozenset({Union, types.UnionType})


def _qualifiers(name: str) -> frozenset[Any]:
    """A TypedDict field qualifier (``Required``...) from typing and typing_extensions."""
    found: set[Any] = set()
    modules: list[Any] = [typing]
    try:
        import typing_extensions
    except ImportError:  # pragma: no cover - typing_extensions is normally present
        pass
    else:
        modules.append(typing_extensions)
    for module in modules:
        obj = getattr(module, name, None)
        if obj is not None:
            found.add(obj)
    return frozenset(found)


_REQUIRED: Final = _qualifiers("Required")
_NOT_REQUIRED: Final = _qualifiers("NotRequired")
_QUALIFIERS: Final = _REQUIRED | _NOT_REQUIRED | _qualifiers("ReadOnly")


class _Unsupported(Exception):
    """Internal: an annotation outside the vocabulary (converted to ``TypeError`` by callers)."""

    def __init__(self, bad: Any, reason: str = "", context: str = "") -> None:
        super().__init__(bad)
        self.bad = bad
        self.reason = reason
        self.context = context


class _TooDeep(_Unsupported):
    """Internal: an annotation nested deeper than :data:`MAX_DEPTH`."""


MAX_DEPTH: Final = 100
"""How many levels an annotation may nest (``list[list[...]]``, a ``Union`` counting one):
past it, a ``TypeError`` naming where it came from, before anything walks it recursively
(docs/contract.md#hostile-bindings)."""

_COMPILE_DEPTH: Final = 24
"""How many levels a compiled predicate nests (one closure per level); a deeper type, or
a recursive one, is checked by the iterative evaluator, which has no such limit."""


_TOO_DEEP: Final = f"nested more than {MAX_DEPTH} levels deep"


def _check_depth(tp: Any) -> None:
    """Raise :class:`_TooDeep` when ``tp`` nests more than :data:`MAX_DEPTH` levels (walked
    with an explicit stack: the check must not itself meet the recursion limit)."""
    stack = [(tp, 0)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _TooDeep(tp, _TOO_DEEP)
        try:
            origin = get_origin(current)
            args = get_args(current) if origin is not None and origin is not Literal else ()
        except Exception:  # an odd object: normalising it says what is wrong
            continue
        stack.extend((arg, depth + 1) for arg in args)


def too_deep(tp: Any) -> bool:
    """Whether ``tp`` nests more than :data:`MAX_DEPTH` levels."""
    try:
        _check_depth(tp)
    except _TooDeep:
        return True
    return False


def too_deep_error(where: str, context: str = "", reason: str = "") -> TypeError:
    """The error for an annotation nested more than :data:`MAX_DEPTH` levels (or too
    deeply for the stack left), at ``where`` (``module.function.parameter``)."""
    message = f"{where}: type annotation {reason or _TOO_DEEP}"
    if context:
        message += f" ({context})"
    return TypeError(f"{message}: name an inner level (a TypedDict, or a class) or use Any there")


def _shown(tp: Any) -> str:
    """``repr(tp)`` for a message; an annotation too deep to show is described as such."""
    try:
        return repr(tp)
    except RecursionError:
        return "<an annotation too deeply nested to show>"


def describe(tp: Any) -> str:
    """Short human-readable name of an annotation, for messages (never mentions values)."""
    if tp is None or tp is NoneType:
        return "None"
    if tp is Any:
        return "Any"
    if isinstance(tp, type) and get_origin(tp) is None:
        return tp.__qualname__
    return _shown(tp).replace("typing.", "")


def mismatch(what: str, expected: Any, value: Any) -> str:
    """``input 'dsn' expects str, got int``: what was expected and the type of what arrived
    (``what`` names the place, e.g. ``"input 'dsn'"``), never the value itself."""
    return f"{what} expects {describe(expected)}, got {describe(type(value))}"


def invalid_output(name: str, origin: str, expected: Any, value: Any) -> TypeError:
    """The error for a node output its annotation does not accept."""
    detail = mismatch(f"output {name!r}", expected, value)
    return TypeError(f"Invalid output from {name} ({origin}) — {detail}")


def _error(where: str, tp: Any, exc: _Unsupported) -> TypeError:
    if isinstance(exc, _TooDeep):  # never shown: its repr alone may be too deep to make
        return too_deep_error(where, exc.context, exc.reason)
    message = f"{where}: unsupported type annotation {_shown(exc.bad)}"
    if exc.context:
        message += f" ({exc.context})"
    elif exc.bad is not tp:
        message += f" in {_shown(tp)}"
    if exc.reason:
        message += f": {exc.reason}"
    return TypeError(message)


def _is_typeddict(tp: Any) -> bool:
    return (
        isinstance(tp, type)
        and issubclass(tp, dict)
        and hasattr(tp, "__required_keys__")
        and hasattr(tp, "__optional_keys__")
        and hasattr(tp, "__total__")
    )


# Normalisation cache: annotation -> node. Annotations are few per program; the bound only
# protects against pathological generation of fresh types.
_NORM_CACHE: dict[Any, _Norm] = {}
_CACHE_LIMIT: Final = 4096


def _norm_top(tp: Any) -> _Norm:
    """:func:`_norm` of an annotation from outside (not a part of one being normalised):
    its depth checked first (:func:`_check_depth`) unless it is already known."""
    try:
        return _NORM_CACHE[tp]
    except (KeyError, TypeError):
        pass
    _check_depth(tp)
    return _norm(tp)


def _norm(tp: Any) -> _Norm:
    try:
        return _NORM_CACHE[tp]
    except KeyError:
        pass
    except TypeError:  # unhashable annotation object: normalise without caching
        return _norm_uncached(tp)
    node = _norm_uncached(tp)
    if len(_NORM_CACHE) >= _CACHE_LIMIT:
        _NORM_CACHE.clear()
    _NORM_CACHE[tp] = node
    return node


def _norm_class(tp: type) -> _Norm:
    if _is_typeddict(tp):
        return (_TD, tp)
    if getattr(tp, "_is_protocol", False) is True:
        raise _Unsupported(tp, "Protocol classes are not supported")
    try:
        isinstance(None, tp)
    except Exception:
        raise _Unsupported(tp, "not usable with isinstance") from None
    return (_CLS, tp)


def _union(members: list[_Norm]) -> _Norm:
    flat: set[_Norm] = set()
    literals: set[tuple[type, Any]] = set()
    for member in members:
        if member[0] == _UNION:
            for inner in member[1]:
                if inner[0] == _LIT:
                    literals.update(inner[1])
                else:
                    flat.add(inner)
        elif member[0] == _LIT:
            literals.update(member[1])
        else:
            flat.add(member)
    if literals:
        flat.add((_LIT, frozenset(literals)))
    if len(flat) == 1:
        return next(iter(flat))
    return (_UNION, frozenset(flat))


def _norm_uncached(tp: Any) -> _Norm:
    if tp is Any:  # before the class test: typing.Any is a class on Python 3.11
        return _ANY_NODE
    if tp is None or tp is NoneType:
        return (_CLS, NoneType)
    if isinstance(tp, type) and not isinstance(tp, types.GenericAlias):
        return _norm_class(tp)
    try:
        bare = _BARE_ALIASES.get(tp)
    except TypeError:
        bare = None
    if bare is not None:
        return _norm_class(bare)
    origin = get_origin(tp)
    if origin is None:
        raise _Unsupported(tp)
    return _norm_generic(tp, origin, get_args(tp))


def _norm_generic(tp: Any, origin: Any, args: tuple[Any, ...]) -> _Norm:
    """A subscripted form: a union, ``Literal``, a sequence, ``dict`` or ``tuple``."""
    if origin in _UNION_ORIGINS:
        return _union([_norm(arg) for arg in args])
    if origin is Literal:
        for arg in args:
            if type(arg) not in _LITERAL_TYPES:
                raise _Unsupported(
                    tp, "Literal members must be str, int, bool, bytes or None (no enums)"
                )
        return (_LIT, frozenset((type(arg), arg) for arg in args))
    if origin in _SEQ_ORIGINS:
        if len(args) != 1:
            raise _Unsupported(tp, f"{origin.__name__}[...] takes exactly one argument")
        return (_SEQ, origin, _norm(args[0]))
    if origin is dict:
        if len(args) != 2:
            raise _Unsupported(tp, "dict[...] takes exactly two arguments")
        return (_DICT, _norm(args[0]), _norm(args[1]))
    if origin is tuple:
        return _norm_tuple(tp, args)
    raise _Unsupported(tp)


def _norm_tuple(tp: Any, args: tuple[Any, ...]) -> _Norm:
    if len(args) == 2 and args[1] is Ellipsis:
        if args[0] is Ellipsis:
            raise _Unsupported(tp, "'...' is allowed only as the second of two arguments")
        return (_VTUPLE, _norm(args[0]))
    if any(arg is Ellipsis for arg in args):
        raise _Unsupported(tp, "'...' is allowed only as the second of two arguments")
    return (_TUPLE, tuple(_norm(arg) for arg in args))


# TypedDict class -> (required keys, {key: node})
_TD_CACHE: dict[type, tuple[frozenset[str], dict[str, _Norm]]] = {}


def _td_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except NameError:
        # A recursive TypedDict defined in a local scope refers to itself by name.
        try:
            return typing.get_type_hints(cls, localns={cls.__name__: cls}, include_extras=True)
        except Exception as exc:
            raise _Unsupported(cls, f"cannot resolve field annotations ({exc})") from None
    except RecursionError:  # typing resolves recursively: name the field nested too deeply
        annotations = getattr(cls, "__annotations__", None)
        for key, hint in (annotations if isinstance(annotations, dict) else {}).items():
            if too_deep(hint):
                where = f"field {key!r} of TypedDict {cls.__module__}.{cls.__qualname__}"
                raise _TooDeep(hint, _TOO_DEEP, where) from None
        raise _TooDeep(cls, _STACK_LEFT) from None
    except Exception as exc:
        raise _Unsupported(cls, f"cannot resolve field annotations ({exc})") from None


def _td_info(cls: type) -> tuple[frozenset[str], dict[str, _Norm]]:
    try:
        return _TD_CACHE[cls]
    except KeyError:
        pass
    hints = _td_hints(cls)
    declared_required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    required: set[str] = set()
    fields: dict[str, _Norm] = {}
    for key, hint in hints.items():
        is_required: bool | None = None
        while (qualifier := get_origin(hint)) in _QUALIFIERS:
            if is_required is None and qualifier in _REQUIRED:
                is_required = True
            elif is_required is None and qualifier in _NOT_REQUIRED:
                is_required = False
            hint = get_args(hint)[0]
        if is_required is None:
            is_required = key in declared_required
        if is_required:
            required.add(key)
        try:
            fields[key] = _norm_top(hint)
        except _Unsupported as exc:
            raise type(exc)(
                exc.bad,
                exc.reason,
                f"field {key!r} of TypedDict {cls.__module__}.{cls.__qualname__}",
            ) from None
    info = (frozenset(required), fields)
    _TD_CACHE[cls] = info
    return info


def _typeddicts_in(node: _Norm) -> Iterator[type]:
    stack = [node]
    while stack:
        current = stack.pop()
        kind = current[0]
        if kind == _TD:
            yield current[1]
        elif kind == _UNION:
            stack.extend(current[1])
        elif kind == _SEQ:
            stack.append(current[2])
        elif kind == _DICT:
            stack.append(current[1])
            stack.append(current[2])
        elif kind == _TUPLE:
            stack.extend(current[1])
        elif kind == _VTUPLE:
            stack.append(current[1])


def _validate_node(node: _Norm) -> None:
    """Resolve and validate every TypedDict reachable from ``node`` (cycle-safe, iterative)."""
    seen: set[type] = set()
    pending = list(_typeddicts_in(node))
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        _, fields = _td_info(cls)
        for field in fields.values():
            pending.extend(_typeddicts_in(field))


_VALID: set[Any] = set()


def _full_norm(tp: Any, where: str) -> _Norm:
    try:
        node = _norm_top(tp)
        _validate_node(node)
    except _Unsupported as exc:
        raise _error(where, tp, exc) from None
    return node


_STACK_LEFT: Final = "nested too deeply for the stack left at this call"
"""Within :data:`MAX_DEPTH`, but the caller's own stack was already near the recursion
limit: still a ``TypeError``, never a ``RecursionError`` (docs/contract.md#hostile-bindings)."""


def validate_type(tp: Any, *, where: str) -> None:
    """Raise ``TypeError`` (naming ``where`` and the annotation) unless ``tp`` is in
    docs/contract.md#annotation-forms."""
    try:
        _validate_type(tp, where)
    except RecursionError:
        raise too_deep_error(where, reason=_STACK_LEFT) from None


def _validate_type(tp: Any, where: str) -> None:
    try:
        if tp in _VALID:
            return
    except TypeError:
        _full_norm(tp, where)
        return
    _full_norm(tp, where)
    if len(_VALID) >= _CACHE_LIMIT:
        _VALID.clear()
    _VALID.add(tp)


# --------------------------------------------------------------------------------------------
# accepts: the reference evaluator (iterative over data)
# --------------------------------------------------------------------------------------------

_ALL: Final = True  # frame mode: every child must accept
_ANY_MODE: Final = False  # frame mode: some child must accept

_Child = tuple[Any, _Norm]
_Frame = tuple[bool, Iterator[_Child]]


def _class_accepts(value: Any, cls: type) -> bool:
    if cls is float:
        return isinstance(value, (float, int))
    if cls is complex:
        return isinstance(value, (complex, float, int))
    return isinstance(value, cls)


_LEAF_KINDS: Final = frozenset({_ANY, _CLS, _LIT})


def _is_leaf(node: _Norm) -> bool:
    return node[0] in _LEAF_KINDS


def _leaf_accepts(value: Any, node: _Norm) -> bool:
    kind = node[0]
    if kind == _ANY:
        return True
    if kind == _CLS:
        return _class_accepts(value, node[1])
    return any(type(value) is t and value == arg for t, arg in node[1])


def _all_leaf(values: Any, node: _Norm) -> bool:
    kind = node[0]
    if kind == _ANY:
        return True
    if kind == _CLS:
        cls = node[1]
        if cls is float:
            return all(map(isinstance, values, repeat((float, int))))
        if cls is complex:
            return all(map(isinstance, values, repeat((complex, float, int))))
        return all(map(isinstance, values, repeat(cls)))
    return all(_leaf_accepts(value, node) for value in values)


def _step(value: Any, node: _Norm) -> bool | _Frame:
    """Decide ``value`` against ``node`` directly, or return a frame of sub-checks."""
    kind = node[0]
    if kind == _ANY:
        return True
    if kind == _CLS:
        return _class_accepts(value, node[1])
    if kind == _LIT:
        return _leaf_accepts(value, node)
    if kind == _UNION:
        members = node[1]
        if all(member[0] in _LEAF_KINDS for member in members):
            return any(_leaf_accepts(value, member) for member in members)
        return (_ANY_MODE, ((value, member) for member in members))
    return _step_container(value, node, kind)


def _step_container(value: Any, node: _Norm, kind: int) -> bool | _Frame:
    """:func:`_step` for the container kinds: sequences and tuples, then mappings."""
    if kind == _SEQ:
        if not isinstance(value, node[1]):
            return False
        elem = node[2]
        if _is_leaf(elem):
            return _all_leaf(value, elem)
        return (_ALL, zip(value, repeat(elem)))
    if kind == _VTUPLE:
        if not isinstance(value, tuple):
            return False
        elem = node[1]
        if _is_leaf(elem):
            return _all_leaf(value, elem)
        return (_ALL, zip(value, repeat(elem)))
    if kind == _TUPLE:
        if not isinstance(value, tuple) or len(value) != len(node[1]):
            return False
        return (_ALL, zip(value, node[1], strict=True))
    return _step_mapping(value, node, kind)


def _step_mapping(value: Any, node: _Norm, kind: int) -> bool | _Frame:
    """:func:`_step` for ``dict[K, V]`` and TypedDicts."""
    if kind == _DICT:
        if not isinstance(value, dict):
            return False
        key_node, value_node = node[1], node[2]
        if _is_leaf(key_node) and _is_leaf(value_node):
            return _all_leaf(value.keys(), key_node) and _all_leaf(value.values(), value_node)
        return (_ALL, _dict_children(value, key_node, value_node))
    if kind == _TD:
        if not isinstance(value, dict):
            return False
        required, fields = _td_info(node[1])
        if not value.keys() >= required:
            return False
        return (_ALL, ((value[k], f) for k, f in fields.items() if k in value))
    raise AssertionError(f"unknown normalised type kind {kind}")  # pragma: no cover


def _dict_children(value: dict[Any, Any], key_node: _Norm, value_node: _Norm) -> Iterator[_Child]:
    for k, v in value.items():
        yield k, key_node
        yield v, value_node


_NO_LOW: Final = sys.maxsize

_Pair = tuple[int, type]


class _Walk:
    """One evaluation: an explicit stack of all/any frames, cycle-safe.

    Only a ``TypedDict`` makes a type recursive, so only a ``(dict, TypedDict)`` pair can
    come back while it is being checked (a dict that contains itself): that pair is then
    taken as accepted, as Python's types allow (docs/contract.md#hostile-bindings). Each
    pair is decided once: a refusal for good (assuming more cannot refuse less), an
    acceptance for good once it rests on nothing still being checked, and otherwise for as
    long as what it rests on has not been refused. So a value is walked in time linear in
    its size, cycles and shared parts included.

    A frame is ``[mode, children, pair, mark, low]``: ``pair`` the ``(id(dict), TypedDict)``
    it checks (``None`` for other frames), ``mark`` the length of the journal when it
    started, ``low`` the lowest stack depth of a pair in progress its children took as
    accepted.
    """

    __slots__ = ("accepted", "active", "held", "journal", "provisional", "refused", "stack")

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []
        self.held: list[Any] = []  # every dict whose id is in a pair below, kept alive
        self.active: dict[_Pair, int] = {}  # pair in progress -> its stack depth
        self.refused: set[_Pair] = set()
        self.accepted: set[_Pair] = set()
        self.provisional: dict[_Pair, int] = {}  # pair -> the depth it rests on
        self.journal: list[_Pair] = []  # provisional pairs, in the order decided

    def run(self, value: Any, node: _Norm) -> bool:
        stack = self.stack
        stack.append([_ALL, iter(((value, node),)), None, 0, _NO_LOW])
        result: bool | None = None
        while True:
            frame = stack[-1]
            mode: bool = frame[0]
            if result is None or result is mode:
                child = next(frame[1], None)
                if child is not None:
                    result = self.visit(frame, child[0], child[1])
                    continue
                decided = mode  # ALL exhausted -> True; ANY exhausted -> False
            else:
                decided = result  # an ALL frame got a False, an ANY frame a True
            stack.pop()
            self.finish(frame, decided)
            if not stack:
                return decided
            parent = stack[-1]
            if frame[4] < parent[4]:
                parent[4] = frame[4]
            result = decided

    def visit(self, frame: list[Any], value: Any, node: _Norm) -> bool | None:
        """Decide ``value`` against ``node`` at once, or push its frame (``None``)."""
        pair = None
        if node[0] == _TD and isinstance(value, dict):
            pair = (id(value), node[1])
            if pair in self.refused:
                return False
            if pair in self.accepted:
                return True
            rests_on = self.active.get(pair)
            if rests_on is None:
                rests_on = self.provisional.get(pair)
            if rests_on is not None:
                if rests_on < frame[4]:
                    frame[4] = rests_on
                return True
            self.held.append(value)
        outcome = _step(value, node)
        if outcome is True or outcome is False:
            if pair is not None:
                (self.accepted if outcome else self.refused).add(pair)
            return outcome
        if pair is not None:
            self.active[pair] = len(self.stack)
        self.stack.append([outcome[0], outcome[1], pair, len(self.journal), _NO_LOW])
        return None

    def finish(self, frame: list[Any], decided: bool) -> None:
        """Record how the pair of a popped frame was decided."""
        pair = frame[2]
        if pair is None:
            return
        depth = self.active.pop(pair)
        if not decided:
            self.refused.add(pair)
            mark = frame[3]
            for dropped in self.journal[mark:]:  # they may rest on this pair
                self.provisional.pop(dropped, None)
            del self.journal[mark:]
        elif frame[4] >= depth:
            self.accepted.add(pair)
        else:
            self.provisional[pair] = frame[4]
            self.journal.append(pair)


def _evaluate(value: Any, node: _Norm) -> bool:
    """Non-recursive, cycle-safe evaluation (:class:`_Walk`)."""
    first = _step(value, node)
    if first is True or first is False:
        return first
    return _Walk().run(value, node)


def accepts(value: Any, tp: Any) -> bool:
    """Whether ``value`` is accepted by annotation ``tp`` (docs/contract.md#accepts); deep, never
    recursive."""
    try:
        return _accepts(value, tp)
    except RecursionError:
        raise too_deep_error("accepts", reason=_STACK_LEFT) from None


def _accepts(value: Any, tp: Any) -> bool:
    try:
        node = _norm_top(tp)
    except _Unsupported as exc:
        raise _error("accepts", tp, exc) from None
    try:
        return _evaluate(value, node)
    except _Unsupported as exc:  # a TypedDict field outside the vocabulary
        raise _error("accepts", tp, exc) from None


# --------------------------------------------------------------------------------------------
# compatible: static edge check (docs/contract.md#compatible)
# --------------------------------------------------------------------------------------------

_PARAMETERISED_ORIGIN: Final[dict[int, Callable[[_Norm], type]]] = {
    _SEQ: lambda node: node[1],
    _DICT: lambda node: dict,
    _TUPLE: lambda node: tuple,
    _VTUPLE: lambda node: tuple,
}


def _issubclass(a: type, b: type) -> bool:
    try:
        return issubclass(a, b)
    except TypeError:
        return False


def _compatible(produced: _Norm, required: _Norm) -> bool:
    pk, rk = produced[0], required[0]
    if pk == _ANY or rk == _ANY or produced == required:
        return True
    if pk == _UNION:
        return all(_compatible(member, required) for member in produced[1])
    if rk == _UNION:
        return any(_compatible(produced, member) for member in required[1])
    if pk == _LIT:
        return all(_evaluate(arg, required) for _, arg in produced[1])
    if pk == _TD:
        return rk == _CLS and required[1] in (dict, object)
    if rk == _TD:
        return False
    produced_origin = _PARAMETERISED_ORIGIN.get(pk)
    if produced_origin is not None and rk == _CLS:
        return _issubclass(produced_origin(produced), required[1])
    if rk == _TUPLE and not required[1]:
        return pk == _TUPLE and not produced[1]
    required_origin = _PARAMETERISED_ORIGIN.get(rk)
    if produced_origin is not None and required_origin is not None:
        # Same container origin: only identical arguments (already equal above) would pass.
        return False
    if pk == _CLS and rk == _CLS:
        return _issubclass(produced[1], required[1])
    return False


def compatible(produced: Any, required: Any) -> bool:
    """Whether a node typed ``produced`` may feed a parameter typed ``required``
    (docs/contract.md#compatible)."""
    try:
        p = _norm_top(produced)
        r = _norm_top(required)
        return _compatible(p, r)
    except _Unsupported as exc:
        raise _error("compatible", exc.bad, exc) from None
    except RecursionError:
        raise too_deep_error("compatible", reason=_STACK_LEFT) from None


# --------------------------------------------------------------------------------------------
# checker: compiled predicates
# --------------------------------------------------------------------------------------------

Predicate = Callable[[Any], bool]


class _Cyclic(Exception):
    """Internal: the type refers to itself (recursive TypedDict), or nests deeper than
    :data:`_COMPILE_DEPTH`: no compiled predicate."""


def _instance_spec(node: _Norm) -> type | tuple[type, ...] | None:
    """The ``isinstance`` second argument equivalent to a class node (with promotions)."""
    if node[0] != _CLS:
        return None
    cls: type = node[1]
    if cls is float:
        return (float, int)
    if cls is complex:
        return (complex, float, int)
    return cls


def _flatten_spec(spec: type | tuple[type, ...]) -> tuple[type, ...]:
    return spec if isinstance(spec, tuple) else (spec,)


def _compile(node: _Norm, compiling: tuple[type | None, ...]) -> Predicate | None:
    """Predicate for ``node``; ``None`` means every value is accepted. ``compiling`` holds
    the TypedDicts being compiled, and one ``None`` per level."""
    if len(compiling) >= _COMPILE_DEPTH:
        raise _Cyclic
    compiling = (*compiling, None)
    kind = node[0]
    if kind == _ANY:
        return None
    if kind == _CLS:
        return _compile_class(node)
    if kind == _LIT:
        return _compile_literal(node[1])
    if kind == _UNION:
        return _compile_union(node[1], compiling)
    if kind == _SEQ or kind == _VTUPLE:
        origin: type[Any] = node[1] if kind == _SEQ else tuple
        elem: _Norm = node[2] if kind == _SEQ else node[1]
        return _compile_homogeneous(origin, elem, compiling)
    if kind == _TUPLE:
        return _compile_tuple(node[1], compiling)
    if kind == _DICT:
        return _compile_dict(node[1], node[2], compiling)
    if kind == _TD:
        return _compile_typeddict(node[1], compiling)
    raise AssertionError(f"unknown normalised type kind {kind}")  # pragma: no cover


def _compile_class(node: _Norm) -> Predicate | None:
    cls = node[1]
    if cls is object:
        return None
    if cls is NoneType:
        return _is_none
    spec = _instance_spec(node)
    if type(spec) is type:
        # What isinstance() calls for a class of the plain metaclass, without a Python
        # frame per check (inputs are checked on every run's hot path).
        return spec.__instancecheck__

    def check_class(value: Any, spec: Any = spec) -> bool:
        return isinstance(value, spec)

    return check_class


def split_check(check: Callable[[Any], bool]) -> tuple[Any, bool]:
    """``(cls, True)`` for the check of a class of the plain metaclass, which
    ``_compile_class`` makes ``cls.__instancecheck__`` (what ``isinstance`` calls for it:
    Rust code calls ``isinstance`` instead, src/check.rs); else ``(check, False)``."""
    owner = getattr(check, "__self__", None)
    if (
        type(owner) is type
        and type(check) is types.BuiltinMethodType
        and check.__name__ == "__instancecheck__"
    ):
        return owner, True
    return check, False


def _is_none(value: Any) -> bool:
    return value is None


def _compile_literal(pairs: frozenset[tuple[type, Any]]) -> Predicate:
    kinds = frozenset(t for t, _ in pairs)

    def check_literal(value: Any) -> bool:
        t = type(value)
        return t in kinds and (t, value) in pairs

    return check_literal


def _compile_union(
    members: frozenset[_Norm], compiling: tuple[type | None, ...]
) -> Predicate | None:
    classes: list[type] = []
    others: list[Predicate] = []
    for member in members:
        spec = _instance_spec(member)
        if spec is not None:
            if member[1] is object:
                return None
            classes.extend(_flatten_spec(spec))
            continue
        predicate = _compile(member, compiling)
        if predicate is None:
            return None
        others.append(predicate)
    return _union_predicate(tuple(dict.fromkeys(classes)), others)


def _union_predicate(class_spec: tuple[type, ...], others: list[Predicate]) -> Predicate:
    """The cheapest predicate for "an instance of ``class_spec`` or accepted by ``others``"."""
    if not others:

        def check_classes(value: Any) -> bool:
            return isinstance(value, class_spec)

        return check_classes
    if not class_spec and len(others) == 1:  # pragma: no cover - unions have >= 2 members
        return others[0]
    if class_spec == (NoneType,) and len(others) == 1:
        inner = others[0]

        def check_optional(value: Any) -> bool:
            return value is None or inner(value)

        return check_optional
    if not class_spec:

        def check_any_of(value: Any) -> bool:
            return any(predicate(value) for predicate in others)

        return check_any_of

    def check_union(value: Any) -> bool:
        return isinstance(value, class_spec) or any(predicate(value) for predicate in others)

    return check_union


def _all_of(elem: _Norm, compiling: tuple[type | None, ...]) -> Callable[[Any], bool] | None:
    """``values -> every value accepted by elem``; ``None`` when every value is accepted."""
    spec = _instance_spec(elem)
    if spec is not None:
        if elem[1] is object:
            return None
        class_spec = spec

        def all_instances(values: Any) -> bool:
            return all(map(isinstance, values, repeat(class_spec)))

        return all_instances
    predicate = _compile(elem, compiling)
    if predicate is None:
        return None
    check: Predicate = predicate

    def all_accepted(values: Any) -> bool:
        return all(map(check, values))

    return all_accepted


def _compile_homogeneous(
    origin: type[Any], elem: _Norm, compiling: tuple[type | None, ...]
) -> Predicate:
    each = _all_of(elem, compiling)
    if each is None:

        def check_container(value: Any) -> bool:
            return isinstance(value, origin)

        return check_container
    check_each: Callable[[Any], bool] = each

    def check_elements(value: Any) -> bool:
        return isinstance(value, origin) and check_each(value)

    return check_elements


def _compile_tuple(elems: tuple[_Norm, ...], compiling: tuple[type | None, ...]) -> Predicate:
    size = len(elems)
    checks = [(i, _compile(elem, compiling)) for i, elem in enumerate(elems)]
    active = tuple((i, p) for i, p in checks if p is not None)

    def check_tuple(value: Any) -> bool:
        if not isinstance(value, tuple) or len(value) != size:
            return False
        for i, predicate in active:
            if not predicate(value[i]):
                return False
        return True

    return check_tuple


def _compile_dict(key: _Norm, val: _Norm, compiling: tuple[type | None, ...]) -> Predicate:
    keys_ok = _all_of(key, compiling)
    values_ok = _all_of(val, compiling)
    if keys_ok is None and values_ok is None:

        def check_plain_dict(value: Any) -> bool:
            return isinstance(value, dict)

        return check_plain_dict
    if keys_ok is None:
        assert values_ok is not None
        check_values: Callable[[Any], bool] = values_ok

        def check_dict_values(value: Any) -> bool:
            return isinstance(value, dict) and check_values(value.values())

        return check_dict_values
    check_keys: Callable[[Any], bool] = keys_ok
    if values_ok is None:

        def check_dict_keys(value: Any) -> bool:
            return isinstance(value, dict) and check_keys(value.keys())

        return check_dict_keys
    check_vals: Callable[[Any], bool] = values_ok

    def check_dict(value: Any) -> bool:
        return isinstance(value, dict) and check_keys(value.keys()) and check_vals(value.values())

    return check_dict


def _compile_typeddict(cls: type, compiling: tuple[type | None, ...]) -> Predicate:
    if cls in compiling:
        raise _Cyclic
    required, fields = _td_info(cls)
    inner = (*compiling, cls)
    field_checks = tuple(
        (key, predicate)
        for key, node in fields.items()
        if (predicate := _compile(node, inner)) is not None
    )

    def check_typeddict(value: Any) -> bool:
        if not isinstance(value, dict) or not value.keys() >= required:
            return False
        for key, predicate in field_checks:
            if key in value and not predicate(value[key]):
                return False
        return True

    return check_typeddict


_NO_CHECK: Final[Any] = object()
_CHECKERS: dict[Any, Any] = {}


def _build_checker(tp: Any) -> Predicate | None:
    try:
        node = _norm_top(tp)
        _validate_node(node)
        try:
            return _compile(node, ())
        except _Cyclic:

            def check_recursive(value: Any) -> bool:
                try:
                    return _evaluate(value, node)
                except RecursionError:  # only with the caller's stack already that deep
                    raise too_deep_error("checker", reason=_STACK_LEFT) from None

            return check_recursive
    except _Unsupported as exc:
        raise _error("checker", tp, exc) from None


def checker(tp: Any) -> Predicate | None:
    """Compile ``tp`` once into a predicate equivalent to ``accepts(value, tp)``.

    Returns ``None`` when every value is accepted (``Any``, ``object``, unions containing
    them), so callers can skip the check entirely. Cached by type where hashable.
    """
    try:
        return _checker(tp)
    except RecursionError:
        raise too_deep_error("checker", reason=_STACK_LEFT) from None


def _checker(tp: Any) -> Predicate | None:
    try:
        cached = _CHECKERS.get(tp)
    except TypeError:
        return _build_checker(tp)
    if cached is not None:
        return None if cached is _NO_CHECK else cached
    built = _build_checker(tp)
    if len(_CHECKERS) >= _CACHE_LIMIT:
        _CHECKERS.clear()
    _CHECKERS[tp] = _NO_CHECK if built is None else built
    return built
