"""Signatures: the declaration checks and the facts they learn (docs/api.md, "Driver").

Every declaration and release is checked before Hamilton resolves anything. What a check
learns about a function (parameter names, defaults, type hints) is kept as ``Facts`` and
serves node creation: a function without Hamilton decorators is not put through
``resolve_nodes``; its node is built directly (``plain_node``), equal field by field to
what Hamilton's default lifecycle makes (``tests/test_hamilton_plain_nodes.py``).
"""

from __future__ import annotations

import inspect
import sys
import typing
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from .. import _declarations
from .._types import accepts, compatible, describe, validate_type
from . import admitted
from .admitted import LIFECYCLE, LIFECYCLE_SET
from .names import declaration, hints, is_release, origin

EMPTY: Any = inspect.Parameter.empty
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_ALLOWED_KINDS = (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY)
GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_VARIADIC_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
# Function attributes through which ``inspect.signature`` departs from the code object.
_SIGNATURE_ATTRIBUTES = frozenset(
    {"__wrapped__", "__signature__", "_partialmethod", "__text_signature__"}
)
# Function attributes through which Hamilton's ``resolve_nodes`` departs from its default
# node creation (``Node.from_fn``): the lifecycle lists and ``config``'s marker.
_RESOLUTION_ATTRIBUTES = frozenset({*LIFECYCLE, "__config_decorated__"})

Params = tuple[tuple[str, ...], tuple[Any, ...] | None]
"""Parameter names, and their defaults (``inspect.Parameter.empty`` for none) or ``None``
when no parameter has a default."""


def code_params(fn: FunctionType) -> Params | None:
    """The parameters ``inspect.signature(fn)`` would report, read straight off the code
    object, when that is exactly equivalent and every parameter is positional-or-keyword or
    keyword-only; ``None`` otherwise (the caller then asks ``inspect.signature``).

    ``inspect.signature`` builds these from ``__code__``, ``__defaults__`` and
    ``__kwdefaults__`` unless one of ``_SIGNATURE_ATTRIBUTES`` is set on the function; it
    costs several microseconds per function, most of a plain node's declaration check.
    """
    if not _SIGNATURE_ATTRIBUTES.isdisjoint(fn.__dict__):
        return None
    code = fn.__code__
    if code.co_flags & _VARIADIC_FLAGS or code.co_posonlyargcount:
        return None
    count = code.co_argcount
    total = count + code.co_kwonlyargcount
    names = code.co_varnames  # parameters first, then other locals
    if len(names) != total:
        names = names[:total]
    defaults = fn.__defaults__
    kwdefaults = fn.__kwdefaults__
    if not defaults and not kwdefaults:
        return names, None
    positional = defaults or ()
    first_default = count - len(positional)
    if first_default < 0:
        return None
    values: list[Any] = [EMPTY] * first_default
    values.extend(positional)
    for name in names[count:]:
        values.append(kwdefaults.get(name, EMPTY) if kwdefaults is not None else EMPTY)
    return names, tuple(values)


def signature_params(fn: FunctionType, where: str) -> Params:
    """``inspect.signature``'s parameters, refusing kinds other than positional-or-keyword
    and keyword-only."""
    names: list[str] = []
    defaults: list[Any] = []
    params = inspect.signature(fn).parameters.values()
    for param in params:
        if param.kind not in _ALLOWED_KINDS:
            raise TypeError(
                f"{where}.{param.name}: parameter kind {param.kind.description} is not "
                "supported (use positional-or-keyword or keyword-only parameters)"
            )
    for param in params:
        names.append(param.name)
        defaults.append(param.default)
    return tuple(names), tuple(defaults)


@dataclass(slots=True)
class Facts:
    """What one build learns about a declaration's signature, computed once and shared by
    the declaration checks and node creation."""

    fn: FunctionType
    names: tuple[str, ...]
    defaults: tuple[Any, ...] | None
    """Per name: the default or ``inspect.Parameter.empty``; ``None``: no defaults at all."""
    hints: dict[str, Any]
    plain: bool
    """No Hamilton decorator and a signature read off the code object: the node Hamilton's
    ``resolve_nodes`` would create is built directly from these facts (``plain_node``)."""


def plain_node(fn_clone: FunctionType, facts: Facts) -> Any | None:
    """The node ``resolve_nodes(fn_clone, config)`` creates for an undecorated function,
    built directly from the facts the declaration checks already computed (``None`` when
    this shortcut does not apply and Hamilton must resolve the function itself).

    For a function without lifecycle attributes Hamilton 1.90 applies its defaults only:
    ``Node.from_fn`` (name, return hint, doc, ``{"module": …}`` tag, STANDARD role, inputs
    and optional values from ``inspect.signature`` and the type hints), then a copy carrying
    ``originating_functions=(fn,)``. That costs three ``get_type_hints`` calls, a signature,
    two node constructions and the lifecycle bookkeeping — most of a plain node's build.
    ``tests/test_hamilton_plain_nodes.py`` compares the two constructions field by field.
    """
    found = facts.hints
    names = facts.names
    module = sys.modules.get(fn_clone.__module__)  # inspect.getmodule of a function
    if module is None or len(found) != len(names) + 1:
        # Hamilton would fail on the module, or derives the node role from extra hints.
        return None
    node_module = admitted.hamilton_module("node")
    required = node_module.DependencyType.REQUIRED
    input_types: dict[str, tuple[Any, Any]] = {}
    defaults: dict[str, Any] = {}
    if facts.defaults is None:
        for name in names:
            input_types[name] = (found[name], required)
    else:
        optional = node_module.DependencyType.OPTIONAL
        for name, default in zip(names, facts.defaults, strict=True):
            if default is EMPTY:
                input_types[name] = (found[name], required)
            else:
                input_types[name] = (found[name], optional)
                defaults[name] = default
    return node_module.Node(
        fn_clone.__name__,
        found["return"],
        fn_clone.__doc__ or "",
        callabl=fn_clone,
        input_types=input_types,
        tags={"module": module.__name__},
        originating_functions=(fn_clone,),
        optional_values=defaults,
    )


class SignatureChecks:
    """The declaration and release checks of one build, and the facts they learn."""

    def __init__(self) -> None:
        # id(fn) -> facts, for every function whose signature was checked in this build
        # (dropped once every declaration has been resolved).
        self.facts: dict[int, Facts] = {}
        # id(release) -> (release, T of its Acquisition[T]), for every checked release.
        self.acquired: dict[int, tuple[FunctionType, Any]] = {}

    def check_signature(self, fn: FunctionType, *, shape_from_resolve: bool) -> None:
        where = origin(fn)
        if fn.__code__.co_flags & GENERATOR_FLAGS and not _parallelizable(fn):
            # inspect.isgeneratorfunction / isasyncgen…
            raise TypeError(
                f"{where}: generator functions cannot be graph nodes unless they return "
                "Parallelizable[T] (docs/fanout.md); return the value (a list, or an "
                "iterator object) instead of yielding it"
            )
        params = code_params(fn)
        plain = params is not None and not shape_from_resolve
        if params is None:
            params = signature_params(fn, where)
        names, defaults = params
        found = hints(fn)
        for index, name in enumerate(names):
            if name not in found:
                raise TypeError(
                    f"{where}.{name}: missing type; annotate the parameter (e.g. {name}: int)"
                )
            hint = found[name]
            validate_type(fan_item(hint), where=f"{where}.{name}")
            if defaults is not None:
                default = defaults[index]
                if default is not EMPTY and not accepts(default, hint):
                    raise TypeError(
                        f"{where}.{name}: invalid default for its annotation; change the "
                        "default or widen the annotation so that it accepts the default"
                    )
        if "return" not in found:
            raise TypeError(f"{where}: missing return type; annotate it (e.g. -> int)")
        if not shape_from_resolve:
            validate_type(fan_item(found["return"]), where=f"{where} return")
        plain = plain and _RESOLUTION_ATTRIBUTES.isdisjoint(fn.__dict__)
        self.facts[id(fn)] = Facts(fn, names, defaults, found, plain)

    def check_declaration(self, fn: FunctionType) -> None:
        if LIFECYCLE_SET.isdisjoint(fn.__dict__):  # no Hamilton decorator: the common case
            self.check_signature(fn, shape_from_resolve=False)
            decorators: list[object] = []
            profiles: list[str] = []
        else:
            decorators = [modifier for _lifecycle, modifier in admitted.modifiers(fn)]
            profiles = list(
                dict.fromkeys(p for m in decorators if (p := admitted.profile_of(m)) is not None)
            )
            # resolve supplies the shape later; pandera's annotation is normalised. The
            # generated nodes' types are validated after resolution either way.
            shape_later = "pandera" in profiles or any(
                admitted.admitted_kind(type(modifier)) == "dynamic" for modifier in decorators
            )
            self.check_signature(fn, shape_from_resolve=shape_later)
        for modifier in decorators:
            if admitted.kind_of(modifier) == "does":
                replacing = modifier.replacing_function  # type: ignore[attr-defined]
                if not isinstance(replacing, FunctionType):
                    raise TypeError(f"{origin(fn)}: @does requires a Python function")
                self.check_signature(replacing, shape_from_resolve=False)
                self._check_replacement_return(fn, replacing)
        if len(profiles) > 1:
            raise ValueError(
                f"{origin(fn)}: more than one optional validation profile "
                f"({', '.join(profiles)}); validate each function with one of them"
            )
        found = declaration(fn)
        if found is not None and not isinstance(
            found, _declarations.ExecutionDeclaration | _declarations.ShutdownDeclaration
        ):
            raise TypeError(f"{origin(fn)}: unrecognised __sdax_declaration__")

    def _check_replacement_return(self, fn: FunctionType, replacing: FunctionType) -> None:
        """A ``does`` replacement returns what the declaration's annotation accepts."""
        declared = self.facts[id(fn)].hints["return"]
        produced = self.facts[id(replacing)].hints["return"]
        if not compatible(produced, declared):
            raise TypeError(
                f"{origin(fn)}: @does replacement {origin(replacing)} returns "
                f"{describe(produced)}, which the declared {describe(declared)} does not accept"
            )

    def check_release(self, release: FunctionType) -> None:
        where = origin(release)
        if not isinstance(release, FunctionType):
            raise TypeError(f"Shutdown {where} must be a Python function")
        if release.__code__.co_flags & GENERATOR_FLAGS:  # inspect.isgeneratorfunction / …
            raise TypeError(
                f"Shutdown {where}: generator functions cannot be releases; release in a "
                "plain (or async) function returning None"
            )
        if any(True for _ in admitted.modifiers(release)) or not is_release(release):
            raise ValueError(
                f"Shutdown {where} cannot carry Hamilton decorators or an execution "
                "declaration; give the release's policy to shutdown(...) itself (retries=, "
                "timeout=) and remove the other decorators"
            )
        name = release_parameter(release)
        if name is None:
            raise TypeError(
                f"Shutdown {where} must take exactly one positional parameter without a "
                "default (the Acquisition record), e.g. def close(acquired: Acquisition[T]) "
                "-> None"
            )
        found = hints(release)
        acquired = acquisition_type(release, found.get(name, EMPTY))
        if found.get("return", EMPTY) is not type(None):
            raise TypeError(f"Shutdown {where} must be annotated to return None (-> None)")
        self.acquired[id(release)] = (release, acquired)

    def acquired_type(self, release: FunctionType) -> Any:
        """``T`` of a release's ``Acquisition[T]`` (checked by ``check_release``)."""
        checked = self.acquired.get(id(release))
        if checked is not None and checked[0] is release:
            return checked[1]
        found = hints(release)
        param = next(iter(inspect.signature(release).parameters))
        return acquisition_type(release, found[param])


def release_parameter(release: FunctionType) -> str | None:
    """The name of a release's only parameter, if it has exactly one, positional and
    without a default; ``None`` otherwise."""
    found = code_params(release)
    if found is not None:  # no positional-only or variadic parameter
        names, defaults = found
        if (
            len(names) == 1
            and release.__code__.co_argcount == 1
            and (defaults is None or defaults[0] is EMPTY)
        ):
            return names[0]
        return None
    params = list(inspect.signature(release).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].kind not in positional or params[0].default is not EMPTY:
        return None
    return params[0].name


def acquisition_type(release: FunctionType, hint: Any) -> Any:
    """``T`` of the ``Acquisition[T]`` annotation of a release's parameter."""
    where = origin(release)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not _declarations.Acquisition or len(args) != 1:
        raise TypeError(
            f"Shutdown {where}: its parameter must be annotated Acquisition[T], T being "
            "what the acquisition returns"
        )
    validate_type(args[0], where=f"Shutdown {where} Acquisition type")
    return args[0]


def fan_item(hint: Any) -> Any:
    """``T`` for ``Parallelizable[T]`` and ``Collect[T]`` (``Any`` when bare), else ``hint``:
    what the type checker validates of a fan-out's annotation (docs/fanout.md)."""
    htypes = admitted.hamilton_module("htypes")
    fan = (htypes.Parallelizable, htypes.Collect)
    if hint in fan:
        return Any
    if typing.get_origin(hint) in fan:
        args = typing.get_args(hint)
        return args[0] if args else Any
    return hint


def _parallelizable(fn: FunctionType) -> bool:
    """Whether ``fn``'s return annotation is ``Parallelizable[...]``."""
    try:
        hint = hints(fn).get("return")
    except Exception:  # the signature check reports unreadable annotations
        return False
    htypes = admitted.hamilton_module("htypes")
    return hint is htypes.Parallelizable or typing.get_origin(hint) is htypes.Parallelizable
