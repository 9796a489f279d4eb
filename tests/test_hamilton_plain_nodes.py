"""The Driver's shortcuts for undecorated functions equal what they replace.

``Driver`` reads a plain function's parameters off its code object instead of calling
``inspect.signature``, and builds the node Hamilton's ``resolve_nodes`` would create directly
from the facts its declaration checks computed. These tests compare both shortcuts with the
real thing, field by field, and check that functions outside the shortcut's conditions still
go through ``inspect.signature`` and Hamilton.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import pytest
from hamilton.function_modifiers import base  # type: ignore[import-untyped]

from sdax_hamilton import Driver
from sdax_hamilton._hamilton.discovery import discover
from sdax_hamilton._hamilton.interceptors import Resolver
from sdax_hamilton._hamilton.signatures import (
    SignatureChecks,
    clone,
    code_params,
    release_parameter,
)

PLAIN_SOURCE = '''
from typing import Any, Optional

SENTINEL = object()


def no_params() -> int:
    return 1


def documented(no_params: int) -> str:
    """Has a docstring."""
    return str(no_params)


def with_defaults(a: int, b: float = 2.5, c: Optional[int] = None, d: list[int] = []) -> float:
    return a + b


def keyword_only(a: int, *, k: str = "x", m: int) -> str:
    return k


def keyword_only_without_defaults(*, k: str, m: int) -> str:
    return k


def any_default(x: Any = SENTINEL) -> Any:
    return x


async def coroutine(a: int, b: int = 3) -> int:
    return a + b


def returns_none(a: int) -> None:
    return None


def with_locals(a: int, b: int = 1, *, c: int = 2) -> int:
    total = a + b + c
    return total
'''


def _params_by_inspect(fn: Any) -> list[tuple[str, Any]]:
    return [(param.name, param.default) for param in inspect.signature(fn).parameters.values()]


def _params_by_code(fn: Any) -> list[tuple[str, Any]]:
    found = code_params(fn)
    assert found is not None
    names, defaults = found
    if defaults is None:
        return [(name, inspect.Parameter.empty) for name in names]
    return list(zip(names, defaults, strict=True))


def _same_params(found: list[tuple[str, Any]], expected: list[tuple[str, Any]]) -> bool:
    return len(found) == len(expected) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(found, expected, strict=True)
    )


def _node_fields(node_: Any) -> dict[str, Any]:
    return {
        "name": node_.name,
        "type": node_.type,
        "documentation": node_.documentation,
        "role": node_.node_role,
        "input_types": node_.input_types,
        "tags": node_.tags,
        "namespace": node_.namespace,
        "user_defined": node_.user_defined,
        "default_keys": sorted(node_.default_parameter_values),
        "code": node_.callable.__code__,
        "qualname": node_.callable.__qualname__,
    }


def _resolver(mod: Any) -> tuple[Resolver, tuple[Any, ...]]:
    """A resolver over the checked declarations of ``mod``, and its roots."""
    found = discover((mod,))
    checks = SignatureChecks()
    for fn in found.declarations:
        checks.check_declaration(fn)
    return Resolver(checks.facts), found.roots


@pytest.mark.parametrize("future_annotations", [False, True])
def test_plain_nodes_equal_hamilton_resolution(make_module: Any, future_annotations: bool) -> None:
    prefix = "from __future__ import annotations\n" if future_annotations else ""
    mod = make_module(prefix + PLAIN_SOURCE)
    resolver, roots = _resolver(mod)
    assert len(roots) == 9
    for fn in roots:
        (item,) = resolver.resolve(fn, {}, ())
        assert item.private, fn.__name__  # the shortcut was taken
        ours = item.node
        (theirs,) = base.resolve_nodes(clone(fn), {})
        assert _node_fields(ours) == _node_fields(theirs), fn.__name__
        # the defaults are the function's own objects, as Hamilton records them
        for key, value in theirs.default_parameter_values.items():
            assert ours.default_parameter_values[key] is value
        # the callable is a clone, and it is the node's only originating function
        assert ours.callable is not fn
        assert ours.originating_functions == (ours.callable,)
        assert len(theirs.originating_functions) == 1


def test_code_params_equal_inspect_signature(make_module: Any) -> None:
    mod = make_module(PLAIN_SOURCE)
    checked = 0
    for name in dir(mod):
        fn = getattr(mod, name)
        if inspect.isfunction(fn):
            assert _same_params(_params_by_code(fn), _params_by_inspect(fn)), name
            checked += 1
    assert checked == 9


def _variadic(*args: int) -> int:
    return 0


def _keywords(**kwargs: int) -> int:
    return 0


def _positional_only(a: int, /) -> int:
    return a


def _target(a: int) -> int:
    return a


@functools.wraps(_target)
def _wrapper(*args: Any, **kwargs: Any) -> int:
    return _target(*args, **kwargs)


def _with_signature(a: int) -> int:
    return a


_with_signature.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=3)]
)


@pytest.mark.parametrize(
    "fn", [_variadic, _keywords, _positional_only, _wrapper, _with_signature], ids=repr
)
def test_code_params_defer_to_inspect_when_they_would_differ(fn: Any) -> None:
    assert code_params(fn) is None


def test_a_function_with_a_signature_attribute_is_resolved_by_hamilton(make_module: Any) -> None:
    # inspect.signature (which Hamilton uses) reports a default the code object lacks: the
    # Driver follows the signature, as Hamilton does.
    mod = make_module(
        """
        import inspect

        def a(x: int) -> int:
            return x

        a.__signature__ = inspect.Signature(
            [inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=3)],
            return_annotation=int,
        )
        """
    )
    spec = Driver(mod)._nodes["a"]
    (x,) = spec.inputs
    assert (x.name, x.has_default, x.default) == ("x", True, 3)
    plan = Driver(mod).prepare(["a"])
    assert dict(plan.required_inputs) == {}


def test_a_signature_default_is_checked_against_the_annotation(make_module: Any) -> None:
    mod = make_module(
        """
        import inspect

        def a(x: int) -> int:
            return x

        a.__signature__ = inspect.Signature(
            [inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="3")],
            return_annotation=int,
        )
        """
    )
    with pytest.raises(TypeError, match=r"\.a\.x: invalid default for its annotation"):
        Driver(mod)


def test_decorated_functions_are_resolved_by_hamilton(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import tag

        @tag(owner="team")
        def a(x: int) -> int:
            return x
        """
    )
    resolver, roots = _resolver(mod)
    (item,) = resolver.resolve(roots[0], {}, ())
    assert not item.private
    assert item.node.tags["owner"] == "team"


def test_extra_annotations_leave_node_roles_to_hamilton(make_module: Any) -> None:
    # Hamilton derives the node role from every type hint, also from annotations that name
    # no parameter; such a function is resolved by Hamilton itself.
    mod = make_module(
        """
        from hamilton.htypes import Collect

        def total(item: int) -> int:
            return item

        total.__annotations__["stale"] = Collect[int]
        """
    )
    with pytest.raises(ValueError, match="role COLLECT"):
        Driver(mod)


RELEASE_SHAPES = [
    "def r(a): pass",
    "def r(a, /): pass",
    "def r(a=None): pass",
    "def r(*, a): pass",
    "def r(a, b): pass",
    "def r(): pass",
    "def r(*a): pass",
    "def r(**a): pass",
    "def r(a, *, b=1): pass",
    "def r(a):\n    local = a\n    return local",
]


@pytest.mark.parametrize("source", RELEASE_SHAPES)
def test_release_parameter_equals_the_signature_rule(source: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    release = namespace["r"]
    params = list(inspect.signature(release).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    expected = (
        params[0].name
        if len(params) == 1
        and params[0].kind in positional
        and params[0].default is inspect.Parameter.empty
        else None
    )
    assert release_parameter(release) == expected


def test_building_a_driver_leaves_no_reference_cycles(make_module: Any) -> None:
    # The build's intermediate objects (translator, Hamilton nodes and the links of Hamilton's
    # edge check) are freed by reference counting, not left to the garbage collector.
    import gc

    mod = make_module(
        """
        from sdax_hamilton import Acquisition, execution, shutdown

        def a(x: int, y: int = 2) -> int:
            return x + y

        @execution(timeout=1.0)
        async def b(a: int, *, z: str = "z") -> str:
            return z * a

        @shutdown(of=b)
        def close_b(acquired: Acquisition[str]) -> None:
            return None
        """
    )
    Driver(mod)
    gc.collect()
    gc.disable()
    try:
        driver = Driver(mod)
        assert sorted(driver._nodes) == ["a", "b"]
        del driver
        assert gc.collect() == 0
    finally:
        gc.enable()
