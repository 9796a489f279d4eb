"""The admitted Hamilton decorators (docs/api.md, "Admitted Hamilton decorators").

Core decorators are admitted by exact class. A plugin decorator (``h_pandas``,
``h_polars``, ``h_spark``, ``h_pydantic``, ``h_pandera``, ``parameterize_frame``) is
recognised by the module and name of its class, without importing the plugin or its
backend: a module that uses one has imported it already, and a Driver over core decorators
only never touches a plugin backend (``tests/test_hamilton_fidelity.py``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .names import origin

# Hamilton's decorator lifecycle attribute names on functions (function_modifiers.base).
LIFECYCLE = ("resolve", "generate", "expand", "transform", "inject", "decorate_nodes", "dynamic")
LIFECYCLE_SET = frozenset(LIFECYCLE)


@dataclass(frozen=True, slots=True)
class Plugin:
    module: str
    qualname: str
    backend: str
    kind: str
    profile: str | None = None


# Plugin decorator classes, admitted only when their backend is installed.
PLUGINS = (
    Plugin("hamilton.plugins.h_pandas", "with_columns", "pandas", "with_columns"),
    Plugin(
        "hamilton.experimental.decorators.parameterize_frame",
        "parameterize_frame",
        "pandas",
        "parameterize_extract",
    ),
    Plugin("hamilton.plugins.h_polars", "with_columns", "polars", "with_columns"),
    Plugin("hamilton.plugins.h_polars_lazyframe", "with_columns", "polars", "with_columns"),
    Plugin("hamilton.plugins.h_spark", "with_columns", "pyspark", "opaque"),
    Plugin("hamilton.plugins.h_spark", "select", "pyspark", "opaque"),
    Plugin("hamilton.plugins.h_spark", "require_columns", "pyspark", "opaque"),
    Plugin("hamilton.plugins.h_pydantic", "check_output", "pydantic", "check_output", "pydantic"),
    Plugin("hamilton.plugins.h_pandera", "check_output", "pandera", "check_output", "pandera"),
)
_PLUGIN_BY_NAME = MappingProxyType({(p.module, p.qualname): p for p in PLUGINS})


def backend_installed(backend: str) -> bool:
    """Whether ``backend`` can be found (asked only when one of its decorators is met)."""
    if backend in sys.modules:
        return True
    try:
        return importlib.util.find_spec(backend) is not None
    except Exception:  # pragma: no cover - broken installations, raising import hooks
        return False


@functools.cache
def fm(name: str) -> Any:
    """A ``hamilton.function_modifiers`` submodule (the package re-binds some names, e.g.
    ``configuration`` is also a dependency helper, so attribute access is unreliable)."""
    return importlib.import_module(f"hamilton.function_modifiers.{name}")


@functools.cache
def hamilton_module(name: str) -> Any:
    """A Hamilton core module (``hamilton.node``, ``hamilton.graph``, …)."""
    return importlib.import_module(f"hamilton.{name}")


@functools.cache
def core_kinds() -> MappingProxyType[type, str]:
    """Exact admitted core class -> translation kind (built once, after the version gate)."""
    adapters = fm("adapters")
    configuration = fm("configuration")
    delayed = fm("delayed")
    expanders = fm("expanders")
    macros = fm("macros")
    metadata = fm("metadata")
    recursive = fm("recursive")
    validation = fm("validation")
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
    return MappingProxyType(table)


def plugin_of(cls: type) -> Plugin | None:
    """The plugin whose decorator ``cls`` is (exactly that class), without importing it."""
    found = _PLUGIN_BY_NAME.get((cls.__module__, cls.__qualname__))
    if found is None:
        return None
    module = sys.modules.get(found.module)
    if module is None or getattr(module, found.qualname, None) is not cls:
        return None
    return found


def admitted_kind(cls: type) -> str | None:
    """The translation kind of an admitted class, ``None`` for any other class."""
    kind = core_kinds().get(cls)
    if kind is not None:
        return kind
    plugin = plugin_of(cls)
    return plugin.kind if plugin is not None else None


def kind_of(modifier: object) -> str:
    """The translation kind of an admitted modifier, else ``ValueError`` naming its class."""
    cls = type(modifier)
    kind = core_kinds().get(cls)
    if kind is not None:
        return kind
    plugin = _PLUGIN_BY_NAME.get((cls.__module__, cls.__qualname__))
    if plugin is not None and not backend_installed(plugin.backend):
        raise ValueError(
            f"unsupported Hamilton decorator {cls.__name__}: the {plugin.module} profile "
            f"requires {plugin.backend!r}, which is not installed; install it"
        )
    plugin = plugin_of(cls)
    if plugin is not None:
        return plugin.kind
    raise ValueError(
        f"unsupported Hamilton decorator {cls.__name__}: use the decorators the README lists "
        "(Hamilton decorators), or run this module with Hamilton's own driver"
    )


def profile_of(modifier: object) -> str | None:
    """The optional validation profile a modifier belongs to (``pydantic``/``pandera``)."""
    plugin = plugin_of(type(modifier))
    return plugin.profile if plugin is not None else None


def modifiers(fn: Callable[..., Any]) -> Iterator[tuple[str, object]]:
    """(lifecycle attribute, modifier) for every Hamilton decorator on ``fn``."""
    attributes = getattr(fn, "__dict__", {})
    for lifecycle in LIFECYCLE:
        value = attributes.get(lifecycle)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ValueError(
                f"unsupported Hamilton decorator {type(value).__name__} "
                f"(attribute {lifecycle!r} of {origin(fn)}); use the decorators the README "
                "lists (Hamilton decorators)"
            )
        for modifier in value:
            yield lifecycle, modifier


def is_excluded(fn: Any) -> bool:
    """``hamilton_exclude`` is on ``fn``."""
    resolvers = getattr(fn, "__dict__", {}).get("resolve", None)
    if not resolvers:
        return False
    exclude = fm("configuration").hamilton_exclude
    return any(type(modifier) is exclude for modifier in resolvers)
