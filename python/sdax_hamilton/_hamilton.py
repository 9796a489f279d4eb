"""Hamilton translation: ``Driver`` (SPEC 5).

This is the only module that touches Hamilton internals. It discovers the declarations of
the supplied modules, checks them, expands each one with Hamilton's own decorator lifecycle
(``resolve_nodes``) on a private clone, records which generated nodes actually call which
declaration (candidates), which only project, validate or pipe a value (borrowing kinds),
and which are synthetic I/O adapters, then places ``execution`` policies and ``shutdown``
releases on the generated nodes and hands planning a table of ``NodeSpec``.

Provenance is recorded by interceptors installed on shallow copies of the admitted
modifier objects (exact classes only, SPEC 5.7); the interceptors are removed once the
declaration has been resolved, and user objects (functions, modifier objects, modules) are
never mutated.

Decisions where SPEC is silent (see also the report in the commit history):

* every generated node is kept in ``Driver._nodes``, including nodes whose name is a config
  key: planning treats such config keys as replacements. Hamilton's edge check
  (``update_dependencies``) runs on the nodes that config does not replace.
* A declaration whose function config disables (or that resolves to no node at all) is
  still checked (SPEC 5.4) but places nothing; a release whose owner resolves to no node is
  therefore harmless.
* A Hamilton ``OPTIONAL`` dependency without a recorded default (for example an optional
  ``load_from`` argument mapped to ``source(...)``) is an ordinary input without a default.
* Compile cost (issue 4): a function without any Hamilton decorator is not put through
  ``resolve_nodes``; its node is built directly (``_plain_node``) from the signature and
  type hints the declaration checks computed, equal field by field to what Hamilton's
  default lifecycle makes (``tests/test_hamilton_plain_nodes.py``). Signatures are read off
  the code object when that is what ``inspect.signature`` would report.
"""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import sys
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import FunctionType, MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from . import _declarations
from ._adapters import Adapters, check_adapters, pre_do_anything
from ._spec import InputSpec, NodeSpec, ReleaseSpec
from ._types import accepts, compatible, validate_type

if TYPE_CHECKING:
    from . import _core
    from ._plan import PreparedPlan

__all__ = ["SUPPORTED_HAMILTON", "Driver"]

_log = logging.getLogger("sdax_hamilton")

SUPPORTED_HAMILTON = (1, 90)
"""The tested ``apache-hamilton`` series (major, minor): ``>=1.90,<1.91``."""
_SUPPORTED_TEXT = ">=1.90,<1.91"

# Hamilton's decorator lifecycle attribute names on functions (function_modifiers.base).
_LIFECYCLE = ("resolve", "generate", "expand", "transform", "inject", "decorate_nodes", "dynamic")

_LIFECYCLE_SET = frozenset(_LIFECYCLE)

_POWER_USER_MODE = "hamilton.enable_power_user_mode"

# Provenance kinds of generated nodes.
_CALL = "call"  # calls the declared function (a candidate)
_ALIAS = "alias"  # projection / validation / pipeline step / gate: calls no declaration, borrows
_IO = "io"  # synthetic I/O adapter (load_from / save_to): candidate for an explicit target_
_STATIC = "static"  # literal value node (subdag inputs/config): no inputs, nothing to borrow


# --------------------------------------------------------------------------------------------
# Hamilton version gate (SPEC 5.2)
# --------------------------------------------------------------------------------------------


_FOUND_VERSION: list[str] = []  # the distribution's version, once read


def _installed_hamilton_version() -> str:
    """The installed ``apache-hamilton`` version string (``"unknown"`` if undeterminable).

    The distribution metadata is read once per process (about 0.3 ms a read): the Hamilton
    this process has imported cannot change afterwards.
    """
    if _FOUND_VERSION:
        return _FOUND_VERSION[0]
    try:
        found = importlib.metadata.version("apache-hamilton")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        _FOUND_VERSION.append(found)
        return found
    try:
        from hamilton import version as hamilton_version  # type: ignore[import-untyped, unused-ignore]

        return ".".join(str(part) for part in hamilton_version.VERSION)
    except Exception:  # pragma: no cover - Hamilton missing or unrecognisable
        return "unknown"


def _series(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    if len(parts) < 2:
        return None
    digits = [""] * 2
    for index in range(2):
        for char in parts[index]:
            if not char.isdigit():
                break
            digits[index] += char
        if not digits[index]:
            return None
    return int(digits[0]), int(digits[1])


def _check_hamilton_version() -> None:
    found = _installed_hamilton_version()
    if _series(found) != SUPPORTED_HAMILTON:
        raise RuntimeError(
            f"sdax_hamilton requires apache-hamilton {_SUPPORTED_TEXT} (the tested "
            f"{SUPPORTED_HAMILTON[0]}.{SUPPORTED_HAMILTON[1]} series), found {found}; "
            "the translation uses Hamilton internals and refuses untested versions"
        )


# --------------------------------------------------------------------------------------------
# Admitted decorators (SPEC 5.7)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plugin:
    module: str
    qualname: str
    backend: str
    kind: str
    profile: str | None = None


# Plugin decorator classes, admitted only when their backend is importable.
_PLUGINS = (
    _Plugin("hamilton.plugins.h_pandas", "with_columns", "pandas", "with_columns"),
    _Plugin(
        "hamilton.experimental.decorators.parameterize_frame",
        "parameterize_frame",
        "pandas",
        "parameterize_extract",
    ),
    _Plugin("hamilton.plugins.h_polars", "with_columns", "polars", "with_columns"),
    _Plugin("hamilton.plugins.h_polars_lazyframe", "with_columns", "polars", "with_columns"),
    _Plugin("hamilton.plugins.h_spark", "with_columns", "pyspark", "opaque"),
    _Plugin("hamilton.plugins.h_spark", "select", "pyspark", "opaque"),
    _Plugin("hamilton.plugins.h_spark", "require_columns", "pyspark", "opaque"),
    _Plugin("hamilton.plugins.h_pydantic", "check_output", "pydantic", "check_output", "pydantic"),
    _Plugin("hamilton.plugins.h_pandera", "check_output", "pandera", "check_output", "pandera"),
)


def _backend_installed(backend: str) -> bool:
    try:
        return importlib.util.find_spec(backend) is not None
    except (ImportError, ValueError):  # pragma: no cover - broken installations
        return False


_ADMITTED: dict[type, str] | None = None
_PROFILES: dict[type, str] = {}
_PLUGIN_OF: dict[type, _Plugin] = {}


def _fm(name: str) -> Any:
    """A ``hamilton.function_modifiers`` submodule (the package re-binds some names, e.g.
    ``configuration`` is also a dependency helper, so attribute access is unreliable)."""
    module = _FM_CACHE.get(name)
    if module is None:
        module = _FM_CACHE[name] = importlib.import_module(f"hamilton.function_modifiers.{name}")
    return module


_FM_CACHE: dict[str, Any] = {}


def _admitted() -> dict[type, str]:
    """Exact admitted class -> translation kind (built once, after the version gate)."""
    global _ADMITTED
    if _ADMITTED is not None:
        return _ADMITTED
    adapters = _fm("adapters")
    configuration = _fm("configuration")
    delayed = _fm("delayed")
    expanders = _fm("expanders")
    macros = _fm("macros")
    metadata = _fm("metadata")
    recursive = _fm("recursive")
    validation = _fm("validation")
    table: dict[type, str] = {
        configuration.config: "resolver",
        configuration.hamilton_exclude: "resolver",
        metadata.tag: "decorate",
        metadata.tag_outputs: "decorate",
        metadata.SchemaOutput: "decorate",
        metadata.cache: "decorate",
        metadata.RayRemote: "decorate",
        expanders.inject: "parameterize",
        expanders.parameterize: "parameterize",
        expanders.parameterize_values: "parameterize",
        expanders.parameterize_sources: "parameterize",
        expanders.parametrized: "parameterize",
        expanders.parametrized_input: "parameterize",
        expanders.parameterized_inputs: "parameterize",
        expanders.extract_fields: "extract",
        expanders.unpack_fields: "extract",
        expanders.extract_columns: "extract",
        expanders.parameterize_extract_columns: "parameterize_extract",
        macros.does: "does",
        macros.pipe: "pipe_input",
        macros.pipe_input: "pipe_input",
        macros.pipe_output: "pipe_output",
        macros.model: "model",
        macros.dynamic_transform: "model",
        recursive.subdag: "subdag",
        recursive.parameterized_subdag: "parameterized_subdag",
        delayed.resolve: "dynamic",
        delayed.resolve_from_config: "dynamic",
        validation.check_output: "check_output",
        validation.check_output_custom: "check_output",
        adapters.LoadFromDecorator: "load_from",
        adapters.SaveToDecorator: "save_to",
        adapters.dataloader: "dataloader",
        adapters.datasaver: "creator",
    }
    for plugin in _PLUGINS:
        # Whether the backend is installed is checked whenever a plugin decorator is met
        # (_kind_of); here only plugins that import at all are recorded.
        if importlib.util.find_spec(plugin.backend.split(".")[0]) is None:
            continue
        try:
            module = importlib.import_module(plugin.module)
            cls = getattr(module, plugin.qualname)
        except Exception:  # pragma: no cover - backend present but plugin unusable
            continue
        if isinstance(cls, type):
            table[cls] = plugin.kind
            _PLUGIN_OF[cls] = plugin
            if plugin.profile is not None:
                _PROFILES[cls] = plugin.profile
    _ADMITTED = table
    return table


def _kind_of(modifier: object) -> str:
    """The translation kind of an admitted modifier, else ``ValueError`` naming its class."""
    cls = type(modifier)
    kind = _admitted().get(cls)
    found = _PLUGIN_OF.get(cls)
    if found is None:
        found = next(
            (
                plugin
                for plugin in _PLUGINS
                if cls.__module__ == plugin.module and cls.__qualname__ == plugin.qualname
            ),
            None,
        )
    if found is not None and not _backend_installed(found.backend):
        raise ValueError(
            f"unsupported Hamilton decorator {cls.__name__}: the {found.module} profile "
            f"requires {found.backend!r}, which is not installed"
        )
    if kind is not None:
        return kind
    raise ValueError(f"unsupported Hamilton decorator {cls.__name__}")


def _modifiers(fn: Callable[..., Any]) -> Iterator[tuple[str, object]]:
    """(lifecycle attribute, modifier) for every Hamilton decorator on ``fn``."""
    attributes = getattr(fn, "__dict__", {})
    for lifecycle in _LIFECYCLE:
        value = attributes.get(lifecycle)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ValueError(
                f"unsupported Hamilton decorator {type(value).__name__} "
                f"(attribute {lifecycle!r} of {_origin(fn)})"
            )
        for modifier in value:
            yield lifecycle, modifier


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _origin(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{qualname}"


def _declaration(fn: Any) -> object | None:
    return getattr(fn, "__sdax_declaration__", None)


def _is_release(fn: Any) -> bool:
    return isinstance(_declaration(fn), _declarations.ShutdownDeclaration)


def _shutdowns_of(fn: Any) -> tuple[Any, ...]:
    found = getattr(fn, "__sdax_shutdowns__", ())
    return tuple(found) if isinstance(found, tuple | list) else ()


def _default_retryable() -> tuple[type[BaseException], ...]:
    """The resolved default retryable set, owned by ``_declarations`` (SPEC 2.1)."""
    return _declarations.default_retryable_exceptions()


def _is_excluded(fn: Any) -> bool:
    resolvers = getattr(fn, "__dict__", {}).get("resolve", None)
    if not resolvers:
        return False
    exclude = _fm("configuration").hamilton_exclude
    return any(type(modifier) is exclude for modifier in resolvers)


def _loaded(module: ModuleType) -> None:
    if sys.modules.get(module.__name__) is not module:
        raise ValueError(f"Declaration module {module.__name__!r} is not loaded")


def _check_defining_module(fn: Any) -> None:
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    name = getattr(fn, "__name__", None)
    if (
        not isinstance(module, ModuleType)
        or not isinstance(name, str)
        or module.__dict__.get(name) is not fn
    ):
        raise ValueError(
            f"Declaration {_origin(fn)} has an ambiguous defining module: it is not "
            f"retrievable as {getattr(fn, '__module__', '?')}.{name}"
        )


def _module_functions(module: ModuleType) -> list[FunctionType]:
    """Hamilton's own discovery (``graph_utils.find_functions``), identity-deduplicated."""
    from hamilton import graph_utils  # type: ignore[import-untyped, unused-ignore]

    _loaded(module)
    found: list[FunctionType] = []
    seen: set[int] = set()
    for _name, fn in graph_utils.find_functions(module):
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        _check_defining_module(fn)
        found.append(fn)
    return found


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"{_origin(fn)}: cannot resolve type annotations ({exc})") from None


_EMPTY: Any = inspect.Parameter.empty
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_ALLOWED_KINDS = (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY)
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_VARIADIC_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
# Function attributes through which ``inspect.signature`` departs from the code object.
_SIGNATURE_ATTRIBUTES = frozenset(
    {"__wrapped__", "__signature__", "_partialmethod", "__text_signature__"}
)
# Function attributes through which Hamilton's ``resolve_nodes`` departs from its default
# node creation (``Node.from_fn``): the lifecycle lists and ``config``'s marker.
_RESOLUTION_ATTRIBUTES = frozenset({*_LIFECYCLE, "__config_decorated__"})

_Params = tuple[tuple[str, ...], tuple[Any, ...] | None]
"""Parameter names, and their defaults (``inspect.Parameter.empty`` for none) or ``None``
when no parameter has a default."""


def _code_params(fn: FunctionType) -> _Params | None:
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
    values: list[Any] = [_EMPTY] * first_default
    values.extend(positional)
    for name in names[count:]:
        values.append(kwdefaults.get(name, _EMPTY) if kwdefaults is not None else _EMPTY)
    return names, tuple(values)


def _signature_params(fn: FunctionType, origin: str) -> _Params:
    """``inspect.signature``'s parameters, refusing kinds other than positional-or-keyword
    and keyword-only (SPEC 5.4)."""
    names: list[str] = []
    defaults: list[Any] = []
    params = inspect.signature(fn).parameters.values()
    for param in params:
        if param.kind not in _ALLOWED_KINDS:
            raise TypeError(
                f"{origin}.{param.name}: parameter kind {param.kind.description} is not "
                "supported (use positional-or-keyword or keyword-only parameters)"
            )
    for param in params:
        names.append(param.name)
        defaults.append(param.default)
    return tuple(names), tuple(defaults)


@dataclass(slots=True)
class _Facts:
    """What one build learns about a declaration's signature, computed once and shared by
    the declaration checks and node creation."""

    fn: FunctionType
    names: tuple[str, ...]
    defaults: tuple[Any, ...] | None
    """Per name: the default or ``inspect.Parameter.empty``; ``None``: no defaults at all."""
    hints: dict[str, Any]
    plain: bool
    """No Hamilton decorator and a signature read off the code object: the node Hamilton's
    ``resolve_nodes`` would create is built directly from these facts (``_plain_node``)."""


def _clone(fn: FunctionType) -> FunctionType:
    """A new function sharing code, globals and closure; modifier lists re-created with
    shallow-copied modifier objects, so resolution cannot mutate the user's objects."""
    new = FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
    if fn.__dict__:
        new.__dict__.update(fn.__dict__)
    for lifecycle in _LIFECYCLE:
        modifiers = fn.__dict__.get(lifecycle)
        if isinstance(modifiers, list):
            new.__dict__[lifecycle] = [copy.copy(modifier) for modifier in modifiers]
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__annotations__ = dict(fn.__annotations__)
    return new


def _plain_node(clone: FunctionType, facts: _Facts) -> Any | None:
    """The node ``resolve_nodes(clone, config)`` creates for an undecorated function, built
    directly from the facts the declaration checks already computed (``None`` when this
    shortcut does not apply and Hamilton must resolve the function itself).

    For a function without lifecycle attributes Hamilton 1.90 applies its defaults only:
    ``Node.from_fn`` (name, return hint, doc, ``{"module": …}`` tag, STANDARD role, inputs
    and optional values from ``inspect.signature`` and the type hints), then a copy carrying
    ``originating_functions=(fn,)``. That costs three ``get_type_hints`` calls, a signature,
    two node constructions and the lifecycle bookkeeping — most of a plain node's build.
    ``tests/test_hamilton_plain_nodes.py`` compares the two constructions field by field.
    """
    hints = facts.hints
    names = facts.names
    module = sys.modules.get(clone.__module__)  # inspect.getmodule of a function
    if module is None or len(hints) != len(names) + 1:
        # Hamilton would fail on the module, or derives the node role from extra hints.
        return None
    node_module = _hamilton_node()
    required = node_module.DependencyType.REQUIRED
    input_types: dict[str, tuple[Any, Any]] = {}
    defaults: dict[str, Any] = {}
    if facts.defaults is None:
        for name in names:
            input_types[name] = (hints[name], required)
    else:
        optional = node_module.DependencyType.OPTIONAL
        for name, default in zip(names, facts.defaults, strict=True):
            if default is _EMPTY:
                input_types[name] = (hints[name], required)
            else:
                input_types[name] = (hints[name], optional)
                defaults[name] = default
    return node_module.Node(
        clone.__name__,
        hints["return"],
        clone.__doc__ or "",
        callabl=clone,
        input_types=input_types,
        tags={"module": module.__name__},
        originating_functions=(clone,),
        optional_values=defaults,
    )


def _hamilton_node() -> Any:
    module = _HAMILTON_NODE.get("node")
    if module is None:
        module = _HAMILTON_NODE["node"] = importlib.import_module("hamilton.node")
    return module


_HAMILTON_NODE: dict[str, Any] = {}


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prov:
    """Where a generated node comes from."""

    kind: str
    decl: FunctionType
    """The user function whose resolution produced the node."""
    mount: tuple[str, ...]
    """Subdag namespaces the declaration was reached through (``()`` at the root)."""
    internal: bool = False
    """A ``check_output`` internal (``<name>_raw`` or a validator node)."""
    gate: str | None = None
    """For internals: the gate's name in the declaration's own scope."""


class _Resolution:
    """Provenance of the nodes of one declaration's resolution, keyed by current name."""

    def __init__(self, fn: FunctionType, mount: tuple[str, ...], config: dict[str, Any]) -> None:
        self.fn = fn
        self.mount = mount
        self.config = config
        self.roles: dict[str, _Prov] = {}
        self.installed: list[tuple[object, str]] = []

    def role(self, name: str) -> _Prov:
        # Nodes nobody recorded come from Hamilton's default node creator: the call itself.
        found = self.roles.get(name)
        return found if found is not None else _Prov(_CALL, self.fn, self.mount)

    def made(self, kind: str, **extra: Any) -> _Prov:
        return _Prov(kind, self.fn, self.mount, **extra)

    def install(self, target: object, attribute: str, value: Any) -> None:
        target.__dict__[attribute] = value
        self.installed.append((target, attribute))

    def remove_interceptors(self) -> None:
        for target, attribute in reversed(self.installed):
            target.__dict__.pop(attribute, None)
        self.installed.clear()


# --------------------------------------------------------------------------------------------
# Generated-node rewrites for Hamilton 1.90 quirks
# --------------------------------------------------------------------------------------------


def _profile_type(profile: str, declared: Any) -> Any:
    """The type of a value validated under an optional validation profile (SPEC 5.6)."""
    if profile == "pydantic":
        # h_pydantic validates a model instance or the dict it would be built from.
        return declared | dict[str, Any]
    if profile == "pandera":
        import pandas  # type: ignore[import-untyped, unused-ignore]

        return pandas.DataFrame
    return declared  # pragma: no cover - no other profiles


def _sync_stand_in(name: str) -> Callable[..., Any]:
    """A synchronous function named ``name`` (for Hamilton code that only reads the name)."""

    def stand_in() -> None:  # pragma: no cover - never called
        return None

    stand_in.__name__ = name
    stand_in.__qualname__ = name
    return stand_in


def _validation_gate(
    name: str, raw_name: str, checks: tuple[tuple[str, str, str], ...]
) -> Callable[..., Any]:
    """A ``check_output`` gate whose failure messages name nodes and validators only.

    ``checks`` holds ``(validator node, validator name, level)``. Failing validators are
    logged as "Validation failed: node=…; validator=…; status=failed; level=…"; a failing
    ``fail``-level validator raises ``DataValidationError`` (independently of
    ``check_outputs``). The validation payloads are never put into messages.
    """
    from hamilton.data_quality.base import DataValidationError  # type: ignore[import-untyped, unused-ignore]

    def validation_gate(**kwargs: Any) -> Any:
        failed: list[str] = []
        for node_name, validator_name, level in checks:
            if kwargs[node_name].passes:
                continue
            _log.log(
                logging.ERROR if level == "fail" else logging.WARNING,
                "Validation failed: node=%s; validator=%s; status=failed; level=%s",
                name,
                validator_name,
                level,
            )
            if level == "fail":
                failed.append(validator_name)
        if failed:
            raise DataValidationError(
                f"Validation failed: node={name}; validators={', '.join(failed)}; level=fail"
            )
        return kwargs[raw_name]

    return validation_gate


# --------------------------------------------------------------------------------------------
# The translation
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Generated:
    node: Any
    prov: _Prov
    private: bool = False
    """The node is this build's own (``_plain_node``): nothing else refers to it."""


class _Translator:
    """Compiles modules into ``NodeSpec``s; one instance per ``Driver``."""

    def __init__(self, modules: tuple[ModuleType, ...], config: Mapping[str, Any]) -> None:
        self.modules = modules
        self.config = config
        self.roots: list[FunctionType] = []
        self.declarations: list[FunctionType] = []  # roots + nested, in discovery order
        self.releases: list[FunctionType] = []
        # id(fn) -> facts, for every function whose signature was checked in this build
        # (dropped once every declaration has been resolved).
        self.facts: dict[int, _Facts] = {}
        # id(release) -> (release, T of its Acquisition[T]), for every checked release.
        self.acquired: dict[int, tuple[FunctionType, Any]] = {}

    # ---------------------------------------------------------------- discovery (5.3)

    def discover(self) -> None:
        module_releases: list[FunctionType] = []
        seen_roots: set[int] = set()
        for module in self.modules:
            for fn in _module_functions(module):
                if id(fn) in seen_roots:
                    continue
                seen_roots.add(id(fn))
                if _is_release(fn):
                    module_releases.append(fn)
                elif _is_excluded(fn):
                    if _shutdowns_of(fn):
                        raise ValueError(
                            f"{_origin(fn)} is excluded from the graph (hamilton_exclude) but "
                            f"owns a shutdown declaration ({_origin(_shutdowns_of(fn)[0].release)})"
                        )
                else:
                    self.roots.append(fn)

        reached: dict[int, FunctionType] = {}
        active: set[int] = set()
        for root in self.roots:
            self._visit(root, reached, active)
        self.declarations = list(reached.values())

        releases: dict[int, FunctionType] = {}
        for fn in self.declarations:
            for declaration in _shutdowns_of(fn):
                release = declaration.release
                releases.setdefault(id(release), release)
        for release in module_releases:
            if id(release) not in releases:
                owner = _declaration(release).owner  # type: ignore[attr-defined]
                raise ValueError(
                    f"Shutdown {_origin(release)} is declared for {_origin(owner)}, which is "
                    "not a node of this Driver"
                )
        self.releases = list(releases.values())

    def _visit(self, fn: FunctionType, reached: dict[int, FunctionType], active: set[int]) -> None:
        """Reach ``fn`` and, depth first, the declarations its subdags resolve."""
        if id(fn) in active:
            raise ValueError(f"Recursive subdag declaration cycle at {_origin(fn)}")
        if id(fn) in reached:
            return
        active.add(id(fn))
        reached[id(fn)] = fn
        for child in self._nested(fn):
            if _is_release(child):
                continue
            if _is_excluded(child):
                if _shutdowns_of(child):
                    raise ValueError(
                        f"{_origin(child)} is excluded from the graph (hamilton_exclude) "
                        "but owns a shutdown declaration"
                    )
                continue
            self._visit(child, reached, active)
        active.discard(id(fn))

    def _nested(self, fn: FunctionType) -> list[FunctionType]:
        """Functions a ``subdag``/``parameterized_subdag``/``with_columns`` resolves."""
        if _LIFECYCLE_SET.isdisjoint(fn.__dict__):
            return []
        recursive = _fm("recursive")
        nested: list[FunctionType] = []
        for lifecycle, modifier in _modifiers(fn):
            cls = type(modifier)
            sources: Iterable[Any]
            if lifecycle == "generate" and cls is recursive.subdag:
                sources = modifier.subdag_functions  # type: ignore[attr-defined]
            elif lifecycle == "generate" and cls is recursive.parameterized_subdag:
                sources = recursive.subdag.collect_functions(modifier.load_from)  # type: ignore[attr-defined]
            elif lifecycle == "inject" and _admitted().get(cls) == "with_columns":
                sources = modifier.subdag_functions  # type: ignore[attr-defined]
            else:
                continue
            for source in sources:
                if not isinstance(source, FunctionType):
                    raise TypeError(
                        f"{_origin(fn)}: subdag source {type(source).__name__} is not a "
                        "Python function"
                    )
                _check_defining_module(source)
                nested.append(source)
        return nested

    # ---------------------------------------------------------------- checks (5.4, 5.5)

    def check_declarations(self) -> None:
        for fn in self.declarations:
            self._check_declaration(fn)
        for release in self.releases:
            self._check_release(release)

    def _check_signature(self, fn: FunctionType, *, shape_from_resolve: bool) -> None:
        origin = _origin(fn)
        if fn.__code__.co_flags & _GENERATOR_FLAGS:  # inspect.isgeneratorfunction / isasyncgen…
            raise TypeError(f"{origin}: generator functions cannot be graph nodes")
        params = _code_params(fn)
        plain = params is not None and not shape_from_resolve
        if params is None:
            params = _signature_params(fn, origin)
        names, defaults = params
        hints = _hints(fn)
        for index, name in enumerate(names):
            if name not in hints:
                raise TypeError(f"{origin}.{name}: missing type")
            hint = hints[name]
            validate_type(hint, where=f"{origin}.{name}")
            if defaults is not None:
                default = defaults[index]
                if default is not _EMPTY and not accepts(default, hint):
                    raise TypeError(f"{origin}.{name}: invalid default for its annotation")
        if "return" not in hints:
            raise TypeError(f"{origin}: missing return type")
        if not shape_from_resolve:
            validate_type(hints["return"], where=f"{origin} return")
        plain = plain and _RESOLUTION_ATTRIBUTES.isdisjoint(fn.__dict__)
        self.facts[id(fn)] = _Facts(fn, names, defaults, hints, plain)

    def _check_declaration(self, fn: FunctionType) -> None:
        if _LIFECYCLE_SET.isdisjoint(fn.__dict__):  # no Hamilton decorator: the common case
            self._check_signature(fn, shape_from_resolve=False)
            decorators: list[object] = []
            profiles: list[str] = []
        else:
            admitted = _admitted()  # also fills _PROFILES
            decorators = [modifier for _lifecycle, modifier in _modifiers(fn)]
            profiles = list(dict.fromkeys(p for m in decorators if (p := _PROFILES.get(type(m)))))
            # resolve supplies the shape later; pandera's annotation is normalised (5.6). The
            # generated nodes' types are validated after resolution either way.
            shape_later = "pandera" in profiles or any(
                admitted.get(type(modifier)) == "dynamic" for modifier in decorators
            )
            self._check_signature(fn, shape_from_resolve=shape_later)
        for modifier in decorators:
            if _kind_of(modifier) == "does":
                replacing = modifier.replacing_function  # type: ignore[attr-defined]
                if not isinstance(replacing, FunctionType):
                    raise TypeError(f"{_origin(fn)}: @does requires a Python function")
                self._check_signature(replacing, shape_from_resolve=False)
        if len(profiles) > 1:
            raise ValueError(
                f"{_origin(fn)}: more than one optional validation profile ({', '.join(profiles)})"
            )
        declaration = _declaration(fn)
        if declaration is not None and not isinstance(
            declaration, _declarations.ExecutionDeclaration | _declarations.ShutdownDeclaration
        ):
            raise TypeError(f"{_origin(fn)}: unrecognised __sdax_declaration__")

    def _check_release(self, release: FunctionType) -> None:
        origin = _origin(release)
        if not isinstance(release, FunctionType):
            raise TypeError(f"Shutdown {origin} must be a Python function")
        if release.__code__.co_flags & _GENERATOR_FLAGS:  # inspect.isgeneratorfunction / …
            raise TypeError(f"Shutdown {origin}: generator functions cannot be releases")
        if any(True for _ in _modifiers(release)) or not _is_release(release):
            raise ValueError(
                f"Shutdown {origin} cannot carry Hamilton decorators or an execution declaration"
            )
        name = self._release_parameter(release)
        if name is None:
            raise TypeError(
                f"Shutdown {origin} must take exactly one positional parameter without a "
                "default (the Acquisition record)"
            )
        hints = _hints(release)
        acquired = self._acquisition_type(release, hints.get(name, inspect.Parameter.empty))
        if hints.get("return", inspect.Parameter.empty) is not type(None):
            raise TypeError(f"Shutdown {origin} must be annotated to return None")
        self.acquired[id(release)] = (release, acquired)

    @staticmethod
    def _release_parameter(release: FunctionType) -> str | None:
        """The name of a release's only parameter, if it has exactly one, positional and
        without a default (SPEC 5.5); ``None`` otherwise."""
        found = _code_params(release)
        if found is not None:  # no positional-only or variadic parameter
            names, defaults = found
            if (
                len(names) == 1
                and release.__code__.co_argcount == 1
                and (defaults is None or defaults[0] is _EMPTY)
            ):
                return names[0]
            return None
        params = list(inspect.signature(release).parameters.values())
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if (
            len(params) != 1
            or params[0].kind not in positional
            or params[0].default is not inspect.Parameter.empty
        ):
            return None
        return params[0].name

    @staticmethod
    def _acquisition_type(release: FunctionType, hint: Any) -> Any:
        origin = _origin(release)
        args = typing.get_args(hint)
        if typing.get_origin(hint) is not _declarations.Acquisition or len(args) != 1:
            raise TypeError(f"Shutdown {origin}: its parameter must be annotated Acquisition[T]")
        validate_type(args[0], where=f"Shutdown {origin} Acquisition type")
        return args[0]

    # ---------------------------------------------------------------- resolution (5.6)

    def resolve_all(self) -> list[_Generated]:
        generated: list[_Generated] = []
        for fn in self.roots:
            generated.extend(self._resolve(fn, dict(self.config), ()))
        return generated

    def _resolve(
        self, fn: FunctionType, config: dict[str, Any], mount: tuple[str, ...]
    ) -> list[_Generated]:
        """Expand one declaration with Hamilton's lifecycle, recording provenance."""
        clone = _clone(fn)
        facts = self.facts.get(id(fn))
        if facts is not None and facts.fn is fn and facts.plain:
            node_ = _plain_node(clone, facts)
            if node_ is not None:
                return [_Generated(node_, _Prov(_CALL, fn, mount), True)]
        base = _fm("base")
        resolution = _Resolution(fn, mount, config)
        try:
            for _lifecycle, modifier in _modifiers(clone):
                self._intercept(modifier, resolution)
            nodes = base.resolve_nodes(clone, config)
            return [_Generated(node_, resolution.role(node_.name)) for node_ in nodes]
        finally:
            resolution.remove_interceptors()

    def _intercept(self, modifier: object, res: _Resolution) -> None:
        kind = _kind_of(modifier)
        handler = getattr(self, f"_intercept_{kind}", None)
        if handler is not None:
            handler(modifier, res)

    # Each interceptor wraps the lifecycle method Hamilton calls on the (copied) modifier and
    # records what the outputs are, relative to the node(s) it received.

    @staticmethod
    def _intercept_parameterize(modifier: Any, res: _Resolution) -> None:
        original = modifier.expand_node

        def expand_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
            out = list(original(node_, config, fn))
            source = res.role(node_.name)
            for produced in out:
                res.roles[produced.name] = source
            return out

        res.install(modifier, "expand_node", expand_node)

    @staticmethod
    def _intercept_parameterize_extract(modifier: Any, res: _Resolution) -> None:
        original = modifier.expand_node
        columns: set[str] = set()
        for extract in modifier.extract_config:
            for column in extract.outputs:
                columns.add(column[0] if isinstance(column, tuple) else column)

        def expand_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
            out = list(original(node_, config, fn))
            source = res.role(node_.name)
            for produced in out:
                res.roles[produced.name] = res.made(_ALIAS) if produced.name in columns else source
            return out

        res.install(modifier, "expand_node", expand_node)

    @staticmethod
    def _intercept_transform(modifier: Any, res: _Resolution, new_role: str) -> None:
        """A ``transform_node`` modifier: the transformed node keeps its role, every node
        it adds gets ``new_role``."""
        original = modifier.transform_node

        def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
            source = res.role(node_.name)
            out = list(original(node_, config, fn))
            for produced in out:
                res.roles[produced.name] = (
                    source if produced.name == node_.name else res.made(new_role)
                )
            return out

        res.install(modifier, "transform_node", transform_node)

    @staticmethod
    def _intercept_extract(modifier: Any, res: _Resolution) -> None:
        _Translator._intercept_transform(modifier, res, _ALIAS)

    @staticmethod
    def _intercept_pipe_input(modifier: Any, res: _Resolution) -> None:
        original = modifier.inject_nodes

        def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
            nodes, renames = original(params, config, fn)
            for produced in nodes:
                res.roles[produced.name] = res.made(_ALIAS)
            return nodes, renames

        res.install(modifier, "inject_nodes", inject_nodes)

    @staticmethod
    def _intercept_pipe_output(modifier: Any, res: _Resolution) -> None:
        original = modifier.transform_node

        def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
            source = res.role(node_.name)
            if inspect.iscoroutinefunction(fn):
                # Hamilton 1.90 builds the chain's final identity for an async declaration
                # as an unannotated async function (its expansion fails) that would await a
                # plain value. Only the name and the async-ness of ``fn`` are consulted, so
                # expand with a synchronous stand-in: the final node is a plain identity.
                fn = _sync_stand_in(fn.__name__)
            out = list(original(node_, config, fn))
            if len(out) == 1:
                return out
            raw, *steps, final = out
            res.roles[raw.name] = source
            for produced in steps:
                res.roles[produced.name] = res.made(_ALIAS)
            res.roles[final.name] = res.made(_ALIAS)
            return out

        res.install(modifier, "transform_node", transform_node)

    @staticmethod
    def _intercept_check_output(modifier: Any, res: _Resolution) -> None:
        original_validators = modifier.get_validators
        original = modifier.transform_node
        captured: list[list[Any]] = []

        def get_validators(node_to_validate: Any) -> Any:
            validators = original_validators(node_to_validate)
            captured.append(list(validators))
            return validators

        def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
            source = res.role(node_.name)
            captured.clear()
            out = list(original(node_, config, fn))
            validators = captured[-1] if captured else []
            *validator_nodes, gate, raw = out
            if len(validator_nodes) != len(validators):  # pragma: no cover - Hamilton changed
                raise RuntimeError(f"unexpected check_output expansion of {node_.name}")
            checks = tuple(
                (validator_node.name, validator.name(), validator.importance.value)
                for validator_node, validator in zip(validator_nodes, validators, strict=True)
            )
            gate = gate.copy_with(callabl=_validation_gate(gate.name, raw.name, checks))
            profile = _PROFILES.get(type(modifier))
            if profile is not None:
                validated = _profile_type(profile, node_.type)
                raw = raw.copy_with(typ=validated)
                gate = gate.copy_with(
                    typ=validated,
                    input_types={
                        **gate.input_types,
                        raw.name: (validated, gate.input_types[raw.name][1]),
                    },
                )
                validator_nodes = [
                    v.copy_with(input_types={raw.name: (validated, v.input_types[raw.name][1])})
                    for v in validator_nodes
                ]
            res.roles[raw.name] = replace(source, internal=True, gate=gate.name)
            for validator_node in validator_nodes:
                res.roles[validator_node.name] = res.made(_ALIAS, internal=True, gate=gate.name)
            res.roles[gate.name] = res.made(_ALIAS)
            return [*validator_nodes, gate, raw]

        res.install(modifier, "get_validators", get_validators)
        res.install(modifier, "transform_node", transform_node)

    @staticmethod
    def _intercept_load_from(modifier: Any, res: _Resolution) -> None:
        from hamilton.node import DependencyType  # type: ignore[import-untyped, unused-ignore]

        original = modifier.inject_nodes

        def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
            (loader, selector), renames = original(params, config, fn)
            # Hamilton 1.90 annotates the loader as tuple[metadata, data] while it returns
            # (data, metadata); the selector takes element 0.
            fixed = tuple[selector.type, dict[str, Any]]  # type: ignore[name-defined]
            loader = loader.copy_with(typ=fixed)
            selector = selector.copy_with(
                input_types={loader.name: (fixed, DependencyType.REQUIRED)}
            )
            res.roles[loader.name] = res.made(_IO)
            res.roles[selector.name] = res.made(_ALIAS)
            return [loader, selector], renames

        res.install(modifier, "inject_nodes", inject_nodes)

    @staticmethod
    def _intercept_save_to(modifier: Any, res: _Resolution) -> None:
        _Translator._intercept_transform(modifier, res, _IO)

    @staticmethod
    def _intercept_dataloader(modifier: Any, res: _Resolution) -> None:
        original = modifier.generate_nodes

        def generate_nodes(fn: Any, config: dict[str, Any]) -> Any:
            loader, selector = original(fn, config)
            res.roles[loader.name] = res.made(_CALL)
            res.roles[selector.name] = res.made(_ALIAS)
            return [loader, selector]

        res.install(modifier, "generate_nodes", generate_nodes)

    @staticmethod
    def _intercept_model(modifier: Any, res: _Resolution) -> None:
        original = modifier.generate_nodes

        def generate_nodes(fn: Any, config: dict[str, Any]) -> Any:
            # Hamilton 1.90's dynamic_transform declares its config key through a misspelt
            # hook (``require_config``), so the lifecycle filters it out; give it the
            # configuration it reads.
            return original(fn, {**config, **res.config})

        res.install(modifier, "generate_nodes", generate_nodes)

    def _intercept_dynamic(self, modifier: Any, res: _Resolution) -> None:
        original = modifier.resolve

        def resolve(config: dict[str, Any], fn: Any) -> Any:
            if _POWER_USER_MODE not in config:
                config = {**config, _POWER_USER_MODE: False}
            decorator = original(config, fn)
            if _kind_of(decorator) == "dynamic":
                raise ValueError(
                    f"unsupported Hamilton decorator {type(decorator).__name__} "
                    "(produced by resolve)"
                )
            decorator = copy.copy(decorator)
            self._intercept(decorator, res)
            return decorator

        res.install(modifier, "resolve", resolve)

    def _mount_nodes(
        self,
        functions: Iterable[Any],
        config: dict[str, Any],
        mount: tuple[str, ...],
        inner: dict[str, _Prov],
        non_final: bool,
    ) -> list[Any]:
        """Resolve the functions of a subdag mount (recursively), recording provenance."""
        non_final_tags = _fm("recursive").NON_FINAL_TAGS
        nodes: list[Any] = []
        for function in functions:
            if _is_release(function):
                continue
            for item in self._resolve(function, config, mount):
                node_ = item.node
                if non_final:
                    node_ = node_.copy_with(tags={**node_.tags, **non_final_tags})
                inner[node_.name] = item.prov
                nodes.append(node_)
        return nodes

    @staticmethod
    def _adopt_mount(
        produced: Iterable[Any], namespace: str, inner: dict[str, _Prov], res: _Resolution
    ) -> None:
        prefix = namespace + "."
        for node_ in produced:
            name = node_.name
            found = inner.get(name[len(prefix) :]) if name.startswith(prefix) else None
            if found is not None:
                res.roles[name] = found
            elif name not in res.roles:
                res.roles[name] = res.made(_ALIAS if node_.input_types else _STATIC)

    def _intercept_subdag(self, modifier: Any, res: _Resolution) -> None:
        original = modifier.generate_nodes

        def generate_nodes(fn: Any, configuration: dict[str, Any]) -> Any:
            namespace = modifier._derive_namespace(fn)
            inner: dict[str, _Prov] = {}

            def collect_nodes(config: dict[str, Any], subdag_functions: Any) -> list[Any]:
                return self._mount_nodes(
                    subdag_functions, config, (*res.mount, namespace), inner, True
                )

            res.install(modifier, "collect_nodes", collect_nodes)
            out = list(original(fn, configuration))
            *rest, final = out
            res.roles[final.name] = res.made(_CALL)
            self._adopt_mount(rest, namespace, inner, res)
            return out

        res.install(modifier, "generate_nodes", generate_nodes)

    def _intercept_parameterized_subdag(self, modifier: Any, res: _Resolution) -> None:
        original = modifier._gather_subdag_generators

        def gather_subdag_generators() -> Any:
            generators = original()
            for generator in generators:
                self._intercept_subdag(generator, res)
            return generators

        res.install(modifier, "_gather_subdag_generators", gather_subdag_generators)

    def _intercept_with_columns(self, modifier: Any, res: _Resolution) -> None:
        original = modifier.inject_nodes

        def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
            namespace = fn.__name__ if modifier.namespace is None else modifier.namespace
            inner: dict[str, _Prov] = {}

            def get_subdag_nodes(fn: Any, config: dict[str, Any]) -> list[Any]:
                return self._mount_nodes(
                    modifier.subdag_functions, config, (*res.mount, namespace), inner, True
                )

            res.install(modifier, "get_subdag_nodes", get_subdag_nodes)
            nodes, renames = original(params, config, fn)
            self._adopt_mount(nodes, namespace, inner, res)
            return nodes, renames

        res.install(modifier, "inject_nodes", inject_nodes)

    @staticmethod
    def _intercept_opaque(modifier: Any, res: _Resolution) -> None:
        """Plugin decorators whose added nodes are treated as generated projections."""
        if "inject_nodes" in dir(modifier):
            original_inject = modifier.inject_nodes

            def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
                nodes, renames = original_inject(params, config, fn)
                for produced in nodes:
                    res.roles.setdefault(produced.name, res.made(_ALIAS))
                return nodes, renames

            res.install(modifier, "inject_nodes", inject_nodes)
        if "transform_node" in dir(modifier):
            _Translator._intercept_transform(modifier, res, _ALIAS)

    # ---------------------------------------------------------------- the node table

    def build(self) -> dict[str, NodeSpec]:
        from hamilton import graph as hamilton_graph  # type: ignore[import-untyped, unused-ignore]
        from hamilton.lifecycle.base import LifecycleAdapterSet  # type: ignore[import-untyped, unused-ignore]
        from hamilton.node import NodeType  # type: ignore[import-untyped, unused-ignore]

        generated = self.resolve_all()
        self.facts.clear()  # served node creation; free it before the specs are made

        standard = NodeType.STANDARD
        by_name: dict[str, _Generated] = {}
        valid_types: set[Any] = set()  # node types this loop has validated
        for item in generated:
            node_ = item.node
            name = node_.name
            if node_.node_role != standard:
                raise ValueError(
                    f"Hamilton node {name} ({_origin(item.prov.decl)}) has role "
                    f"{node_.node_role.name}; Parallelizable/Collect nodes are not supported"
                )
            previous = by_name.get(name)
            if previous is not None:
                raise ValueError(
                    f"Duplicate Hamilton node {name!r}: generated by "
                    f"{_origin(previous.prov.decl)} and {_origin(item.prov.decl)}"
                )
            by_name[name] = item
            node_type = node_.type
            try:
                if node_type in valid_types:
                    continue
            except TypeError:  # unhashable annotation: validate every time
                validate_type(node_type, where=f"node {name} ({_origin(item.prov.decl)})")
                continue
            validate_type(node_type, where=f"node {name} ({_origin(item.prov.decl)})")
            valid_types.add(node_type)

        # Hamilton's own edge check over every node that config does not replace. It links
        # the nodes it is given; nodes Hamilton made are copied without references first, so
        # the node callables do not keep Hamilton's graph alive. Afterwards the links are
        # dropped again, so the checked graph is freed at once rather than by the collector.
        checked = {
            name: item.node if item.private else item.node.copy(include_refs=False)
            for name, item in by_name.items()
            if name not in self.config
        }
        hamilton_graph.update_dependencies(checked, LifecycleAdapterSet(), reset_dependencies=False)
        for node_ in checked.values():
            node_.dependencies.clear()
            node_.depended_on_by.clear()
        del checked

        # Hamilton's own nodes, for the FunctionGraph that lifecycle adapters are shown.
        self.hamilton_nodes = {name: item.node for name, item in by_name.items()}
        policies, releases, ownership = self._place(by_name)
        default_policy = self._default_policy()

        for name, (release_spec, _release) in releases.items():
            node_type = by_name[name].node.type
            if not compatible(node_type, release_spec.acquisition_type):
                raise TypeError(
                    f"shutdown Acquisition type does not accept {name} "
                    f"({release_spec.origin} for {by_name[name].prov.decl.__qualname__})"
                )
            policy = policies.get(name)
            if policy is not None and policy.retries > 0:
                raise ValueError(f"Acquisition retries require attempt cleanup: {name}")

        owned = frozenset(releases)
        borrows = self._borrows(by_name, owned)

        specs: dict[str, NodeSpec] = {}
        origins: dict[int, str] = {}  # id(declaration) -> _origin(declaration)
        for name, item in by_name.items():
            node_ = item.node
            prov = item.prov
            defaults = node_.default_parameter_values
            inputs = tuple(
                [
                    InputSpec(
                        name=input_name,
                        type=input_type,
                        has_default=True,
                        default=defaults[input_name],
                    )
                    if input_name in defaults
                    else InputSpec(name=input_name, type=input_type, has_default=False)
                    for input_name, (input_type, _dependency) in node_.input_types.items()
                ]
            )
            node_borrows = borrows.get(name, ())
            gate = None
            if prov.internal and prov.gate is not None:
                gate = ".".join((*prov.mount, prov.gate))
            release_entry = releases.get(name)
            origin = origins.get(id(prov.decl))
            if origin is None:
                origin = origins[id(prov.decl)] = _origin(prov.decl)
            specs[name] = NodeSpec(
                name=name,
                type=node_.type,
                call=node_.callable,
                inputs=inputs,
                policy=policies.get(name, default_policy),
                origin=origin,
                release=release_entry[0] if release_entry is not None else None,
                borrows=node_borrows,
                ownership_required=name in ownership,
                validation_internal=prov.internal,
                validation_gate=gate,
                borrowed=prov.kind == _ALIAS and bool(node_borrows),
            )
        return specs

    @staticmethod
    def _default_policy() -> _core.Policy:
        from . import _core

        return _core.Policy(retryable_exceptions=_default_retryable())

    def _place(
        self, by_name: Mapping[str, _Generated]
    ) -> tuple[
        dict[str, _core.Policy],
        dict[str, tuple[ReleaseSpec, FunctionType]],
        frozenset[str],
    ]:
        """Map policies and releases onto generated nodes (SPEC 5.8, 5.9)."""
        # Only declarations with an execution policy or a shutdown place anything.
        groups: dict[int, dict[tuple[str, ...], list[str]]] = {
            id(fn): {}
            for fn in self.declarations
            if isinstance(_declaration(fn), _declarations.ExecutionDeclaration) or _shutdowns_of(fn)
        }
        if groups:
            for name, item in by_name.items():
                mounts = groups.get(id(item.prov.decl))
                if mounts is not None:
                    mounts.setdefault(item.prov.mount, []).append(name)

        policies: dict[str, _core.Policy] = {}
        releases: dict[str, tuple[ReleaseSpec, FunctionType]] = {}
        ownership: set[str] = set()

        for fn in self.declarations:
            mounts = groups.get(id(fn), {})
            declaration = _declaration(fn)
            if isinstance(declaration, _declarations.ExecutionDeclaration):
                for name in self._targets(fn, declaration.target, mounts, by_name, io=True):
                    if name in policies:
                        raise ValueError(f"Node {name} receives more than one execution policy")
                    policies[name] = declaration.policy
            shutdowns = _shutdowns_of(fn)
            if not shutdowns:
                continue
            for names in mounts.values():
                ownership.update(name for name in names if by_name[name].prov.kind == _CALL)
            for shutdown in shutdowns:
                release = shutdown.release
                checked = self.acquired.get(id(release))
                if checked is not None and checked[0] is release:
                    acquired = checked[1]
                else:
                    hints = _hints(release)
                    param = next(iter(inspect.signature(release).parameters))
                    acquired = self._acquisition_type(release, hints[param])
                spec = ReleaseSpec(
                    call=release,
                    policy=shutdown.policy,
                    acquisition_type=acquired,
                    origin=_origin(release),
                )
                for name in self._targets(fn, shutdown.target, mounts, by_name, io=False):
                    if by_name[name].prov.kind != _CALL:  # pragma: no cover - io=False
                        continue
                    previous = releases.get(name)
                    if previous is not None and previous[1] is not release:
                        raise ValueError(
                            f"duplicate shutdown declaration for node {name}: "
                            f"{previous[0].origin} and {spec.origin}"
                        )
                    releases[name] = (spec, release)
        return policies, releases, frozenset(ownership)

    @staticmethod
    def _public(name: str, mount: tuple[str, ...]) -> str:
        prefix = ".".join(mount) + "." if mount else ""
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    def _targets(
        self,
        fn: FunctionType,
        target: tuple[str, ...] | str | None,
        mounts: Mapping[tuple[str, ...], list[str]],
        by_name: Mapping[str, _Generated],
        *,
        io: bool,
    ) -> list[str]:
        """The nodes a declaration of ``fn`` lands on (SPEC 5.8)."""
        if isinstance(target, str):
            target = (target,)
        placed: list[str] = []
        missing: list[str] = []
        for mount, names in mounts.items():
            calls = [name for name in names if by_name[name].prov.kind == _CALL]
            if target is None:
                if not mount and len(calls) > 1:
                    raise ValueError(
                        f"expanded declaration requires explicit target_: {_origin(fn)} "
                        f"generates {sorted(calls)}"
                    )
                placed.extend(calls)
                continue
            candidates = calls + (
                [name for name in names if by_name[name].prov.kind == _IO] if io else []
            )
            for wanted in target:
                matched = [
                    name
                    for name in candidates
                    if name == wanted or self._public(name, mount) == wanted
                ]
                if not matched:
                    aliases = [
                        name
                        for name in names
                        if by_name[name].prov.kind == _ALIAS
                        and (name == wanted or self._public(name, mount) == wanted)
                    ]
                    matched = self._upstream_calls(aliases, set(names), by_name)
                if not matched:
                    if wanted not in missing:
                        missing.append(wanted)
                    continue
                placed.extend(name for name in matched if name not in placed)
        if missing:
            raise ValueError(f"targets not generated: {missing} (declared on {_origin(fn)})")
        unique: list[str] = []
        for name in placed:
            if name not in unique:
                unique.append(name)
        return unique

    @staticmethod
    def _upstream_calls(
        aliases: list[str], group: set[str], by_name: Mapping[str, _Generated]
    ) -> list[str]:
        """The calls of the same declaration and mount that an alias derives from."""
        found: list[str] = []
        seen = set(aliases)
        stack = list(aliases)
        while stack:
            name = stack.pop()
            for input_name in by_name[name].node.input_types:
                if input_name in seen or input_name not in group:
                    continue
                seen.add(input_name)
                if by_name[input_name].prov.kind == _CALL:
                    found.append(input_name)
                else:
                    stack.append(input_name)
        return sorted(found)

    @staticmethod
    def _borrows(
        by_name: Mapping[str, _Generated], owned: frozenset[str]
    ) -> dict[str, tuple[str, ...]]:
        """Owned acquisitions each borrowing-kind node borrows from (SPEC 5.9).

        A projection, validation or pipeline node borrows every owned acquisition in its
        upstream closure (through nodes of any kind, owned ones included).
        """
        aliases = [name for name, item in by_name.items() if item.prov.kind == _ALIAS]
        if not owned or not aliases:
            return {}
        empty: frozenset[str] = frozenset()
        memo: dict[str, frozenset[str]] = {}
        visiting: set[str] = set()

        def producers(name: str) -> list[str]:
            return [p for p in by_name[name].node.input_types if p in by_name]

        def closure(start: str) -> frozenset[str]:
            # Iterative post-order; an edge back into the current path (a cycle, reported
            # by planning when selected) contributes nothing.
            stack: list[tuple[str, bool]] = [(start, False)]
            while stack:
                name, expanded = stack.pop()
                if name in memo:
                    continue
                if not expanded:
                    if name in visiting:
                        continue
                    visiting.add(name)
                    stack.append((name, True))
                    stack.extend(
                        (p, False) for p in producers(name) if p not in memo and p not in visiting
                    )
                    continue
                found: set[str] = set()
                for producer in producers(name):
                    if producer in owned:
                        found.add(producer)
                    found.update(memo.get(producer, empty))
                memo[name] = frozenset(found) if found else empty
                visiting.discard(name)
            return memo[start]

        return {name: tuple(sorted(closure(name))) for name in aliases}


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


class Driver:
    """Compiles Hamilton modules once, with their ``execution``/``shutdown`` declarations.

    The Driver is a snapshot: declarations are copied when it is built, so rebinding module
    attributes afterwards does not change it. Build another Driver to change declarations.
    """

    _nodes: dict[str, NodeSpec]
    _config: Mapping[str, Any]

    def __init__(
        self,
        *modules: ModuleType,
        config: Mapping[str, Any] | None = None,
        adapters: Sequence[object] | None = None,
    ) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"Configuration must be a mapping, not {type(config).__name__}")
        values: dict[str, Any] = dict(config) if config is not None else {}
        for key in values:
            if not isinstance(key, str) or not key:
                raise TypeError(
                    "Configuration keys must be non-empty strings, got "
                    + (repr(key) if isinstance(key, str) else type(key).__name__)
                )
        _check_hamilton_version()
        if not modules or not all(isinstance(module, ModuleType) for module in modules):
            raise TypeError("Driver requires one or more Python modules")
        unique: list[ModuleType] = []
        for module in modules:
            if not any(module is seen for seen in unique):
                unique.append(module)
        accepted = check_adapters(adapters)
        if accepted:
            pre_do_anything(accepted)
        translator = _Translator(tuple(unique), values)
        translator.discover()
        translator.check_declarations()
        self._nodes = translator.build()
        self._config = MappingProxyType(values)
        # Lifecycle adapters (docs/adapters.md): build-time hooks run here.
        self._adapters = (
            Adapters(accepted, translator.hamilton_nodes, unique, values) if accepted else None
        )
        self._graph: _core.Graph | None = None

    def prepare(
        self,
        final_vars: Iterable[str],
        *,
        optional_inputs: Iterable[str] = (),
        override_nodes: Iterable[str] = (),
        check_outputs: bool = True,
    ) -> PreparedPlan:
        """Select ``final_vars`` and compile a reusable ``PreparedPlan`` (SPEC 6)."""
        from ._plan import build_plan, compile_graph

        if self._graph is None:
            self._graph = compile_graph(self._nodes)
        return build_plan(
            self._nodes,
            self._config,
            final_vars,
            optional_inputs=optional_inputs,
            override_nodes=override_nodes,
            check_outputs=check_outputs,
            graph=self._graph,
            adapters=self._adapters,
        )
