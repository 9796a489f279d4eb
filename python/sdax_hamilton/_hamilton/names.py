"""Small shared readings of user functions: names for messages, declarations, type hints."""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _declarations, _types


def origin(fn: Any) -> str:
    """``module.qualname`` of a function, for messages."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{qualname}"


def declaration(fn: Any) -> object | None:
    """The ``execution``/``shutdown`` declaration on ``fn`` (docs/internals.md)."""
    return getattr(fn, "__sdax_declaration__", None)


def is_release(fn: Any) -> bool:
    return isinstance(declaration(fn), _declarations.ShutdownDeclaration)


def shutdowns_of(fn: Any) -> tuple[Any, ...]:
    """The ``ShutdownDeclaration``s whose owner is ``fn``."""
    found = getattr(fn, "__sdax_shutdowns__", ())
    return tuple(found) if isinstance(found, tuple | list) else ()


def loaded(module: ModuleType) -> None:
    if sys.modules.get(module.__name__) is not module:
        raise ValueError(
            f"Declaration module {module.__name__!r} is not loaded: import it (so that "
            "sys.modules holds it) before building the Driver"
        )


def check_defining_module(fn: Any, found_as: str | None = None) -> None:
    """A module function must be the object its module holds under its name.

    Hamilton's ``config.when`` renames the function object it resolves (``y__a`` becomes
    ``y``; it marks it ``__config_decorated__`` and keeps the old name in
    ``__original_name__``, which a second resolution overwrites with the new one), so a
    module Hamilton's own driver has built holds such a function under another name: the
    name discovery found it under, or its original name, identifies it too.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    name = getattr(fn, "__name__", None)
    if isinstance(module, ModuleType) and isinstance(name, str):
        held = module.__dict__
        if held.get(name) is fn:
            return
        if "__config_decorated__" in getattr(fn, "__dict__", {}):
            for alias in (getattr(fn, "__original_name__", None), found_as):
                if isinstance(alias, str) and held.get(alias) is fn:
                    return
    raise ValueError(
        f"Declaration {origin(fn)} has an ambiguous defining module: it is not "
        f"retrievable as {getattr(fn, '__module__', '?')}.{name}; define it with def "
        "under its own name in its module"
    )


def hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except RecursionError:
        # typing resolves annotations recursively: name the one nested too deeply
        # (docs/contract.md#hostile-bindings)
        annotations = getattr(fn, "__annotations__", None)
        for name, hint in (annotations if isinstance(annotations, dict) else {}).items():
            if _types.too_deep(hint):
                where = f"{origin(fn)} return" if name == "return" else f"{origin(fn)}.{name}"
                raise _types.too_deep_error(where) from None
        raise TypeError(
            f"{origin(fn)}: cannot resolve type annotations (nested too deeply to resolve)"
        ) from None
    except Exception as exc:
        raise TypeError(f"{origin(fn)}: cannot resolve type annotations ({exc})") from None
