"""docs/contract.md#driver: Driver construction — arguments, version gate, discovery, declaration
and release checks, snapshot semantics, generated-node checks, placement errors and config."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from sdax_hamilton import Driver
from sdax_hamilton._hamilton import admitted, version
from sdax_hamilton._spec import NodeSpec

SIMPLE = """
def a(x: int) -> int:
    return x + 1
"""


def nodes(driver: Driver) -> dict[str, NodeSpec]:
    return driver._nodes


# ------------------------------------------------------------------ 5.1 argument checks


@pytest.mark.parametrize("config", [[("a", 1)], "a=1", 5, object()])
def test_config_must_be_a_mapping(make_module: Any, config: Any) -> None:
    with pytest.raises(TypeError, match="Configuration must be a mapping"):
        Driver(make_module(SIMPLE), config=config)


@pytest.mark.parametrize("key", [1, "", None, ("a",)])
def test_config_keys_must_be_nonempty_strings(make_module: Any, key: Any) -> None:
    with pytest.raises(TypeError, match="Configuration keys must be non-empty strings"):
        Driver(make_module(SIMPLE), config={key: 1})


def test_config_is_copied_and_read_only_and_values_keep_identity(make_module: Any) -> None:
    value = object()
    config: dict[str, Any] = {"shared": value}
    driver = Driver(make_module(SIMPLE), config=config)
    config["later"] = 1
    assert dict(driver._config) == {"shared": value}
    assert driver._config["shared"] is value
    with pytest.raises(TypeError):
        driver._config["x"] = 1  # type: ignore[index]


def test_config_checks_come_before_the_module_check() -> None:
    with pytest.raises(TypeError, match="Configuration must be a mapping"):
        Driver(config=[])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Configuration keys"):
        Driver(config={1: 2})  # type: ignore[dict-item]


@pytest.mark.parametrize("args", [(), ("module",), (sys.modules[__name__], 5)])
def test_driver_requires_modules(args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match="Driver requires one or more Python modules"):
        Driver(*args)


def test_same_module_twice_is_compiled_once(make_module: Any) -> None:
    mod = make_module(SIMPLE)
    assert list(nodes(Driver(mod, mod))) == ["a"]


# ------------------------------------------------------------------ 5.2 Hamilton version


@pytest.mark.parametrize("found", ["1.91.0", "1.89.9", "2.0.0", "unknown"])
def test_hamilton_outside_the_tested_series_is_refused(
    make_module: Any, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    mod = make_module(SIMPLE)
    monkeypatch.setattr(version, "installed_hamilton_version", lambda: found)
    with pytest.raises(RuntimeError) as info:
        Driver(mod)
    assert found in str(info.value)
    assert "1.90" in str(info.value)


@pytest.mark.parametrize("found", ["1.90.0", "1.90.7", "1.90.1rc1"])
def test_hamilton_in_the_tested_series_is_admitted(
    make_module: Any, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    mod = make_module(SIMPLE)
    monkeypatch.setattr(version, "installed_hamilton_version", lambda: found)
    assert list(nodes(Driver(mod))) == ["a"]


def test_installed_hamilton_is_the_tested_series() -> None:
    assert version.series(version.installed_hamilton_version()) == (1, 90)


def test_version_gate_runs_before_the_module_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "installed_hamilton_version", lambda: "1.95.0")
    with pytest.raises(RuntimeError, match=r"1\.95\.0"):
        Driver()


def test_plugin_decorator_without_its_backend_is_refused(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = make_module(
        """
        import pandas as pd
        from hamilton.plugins.h_pandas import with_columns

        def _double(a: pd.Series) -> pd.Series:
            return a * 2

        @with_columns(_double, columns_to_pass=["a"])
        def frame(df: pd.DataFrame) -> pd.DataFrame:
            return df
        """
    )
    real = admitted.backend_installed
    monkeypatch.setattr(
        admitted, "backend_installed", lambda backend: backend != "pandas" and real(backend)
    )
    with pytest.raises(ValueError, match=r"unsupported Hamilton decorator with_columns.*pandas"):
        Driver(mod)


# ------------------------------------------------------------------ 5.3 discovery


def test_module_must_be_loaded(make_module: Any) -> None:
    stray = types.ModuleType("sdax_test_not_loaded")
    exec("def a(x: int) -> int:\n    return x\n", stray.__dict__)
    with pytest.raises(ValueError, match="Declaration module 'sdax_test_not_loaded' is not loaded"):
        Driver(stray)
    other = make_module(SIMPLE)
    replaced = types.ModuleType(other.__name__)
    with pytest.raises(ValueError, match="is not loaded"):
        Driver(replaced)


def test_public_lambda_has_an_ambiguous_defining_module(make_module: Any) -> None:
    mod = make_module(
        """
        double = lambda x: x * 2  # noqa: E731
        """
    )
    with pytest.raises(ValueError, match="ambiguous defining module"):
        Driver(mod)


def test_public_function_bound_under_another_name_is_ambiguous(make_module: Any) -> None:
    mod = make_module(
        """
        def original(x: int) -> int:
            return x

        alias = original
        del original
        """
    )
    with pytest.raises(ValueError, match="ambiguous defining module"):
        Driver(mod)


def test_private_helpers_and_imported_functions_are_not_nodes(make_module: Any) -> None:
    helper = make_module(
        """
        def imported(x: int) -> int:
            return x
        """
    )
    mod = make_module(
        f"""
        from os.path import join
        from {helper.__name__} import imported

        def _helper(untyped):
            return untyped

        def a(x: int) -> int:
            return _helper(x)
        """
    )
    assert list(nodes(Driver(mod))) == ["a"]


def test_excluded_function_is_skipped_and_need_not_be_typed(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import hamilton_exclude

        @hamilton_exclude
        def helper(untyped, *args):
            return untyped

        def a(x: int) -> int:
            return x
        """
    )
    assert list(nodes(Driver(mod))) == ["a"]


def test_excluded_function_owning_a_shutdown_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import hamilton_exclude
        from sdax_hamilton import Acquisition, shutdown

        @hamilton_exclude
        def handle() -> int:
            return 1

        @shutdown(of=handle)
        def release(acquired: Acquisition[int]) -> None:
            pass
        """
    )
    with pytest.raises(ValueError, match="hamilton_exclude"):
        Driver(mod)


RESOURCE = """
from sdax_hamilton import Acquisition, shutdown

class Handle:
    pass

def handle() -> Handle:
    return Handle()

def use(handle: Handle) -> int:
    return 1
"""


def test_release_is_found_through_its_owner_wherever_defined(make_module: Any) -> None:
    owner_module = make_module(RESOURCE)
    releases = make_module(
        f"""
        from sdax_hamilton import Acquisition, shutdown
        from {owner_module.__name__} import Handle, handle

        @shutdown(of=handle, timeout=2.0)
        def _close(acquired: Acquisition[Handle]) -> None:
            pass
        """
    )
    specs = nodes(Driver(owner_module))
    release = specs["handle"].release
    assert release is not None
    # a snapshot of the release: the same code, not the live function object
    assert release.call is not releases._close
    assert release.call.__code__ is releases._close.__code__
    assert release.origin == f"{releases.__name__}._close"
    assert release.policy.timeout == 2.0
    assert release.acquisition_type is owner_module.Handle
    assert specs["handle"].ownership_required
    assert specs["use"].release is None
    assert "_close" not in specs


def test_release_in_supplied_module_needs_its_owner_as_a_node(make_module: Any) -> None:
    owners = make_module(RESOURCE)
    releases = make_module(
        f"""
        from sdax_hamilton import Acquisition, shutdown
        from {owners.__name__} import Handle, handle

        @shutdown(of=handle)
        def close_handle(acquired: Acquisition[Handle]) -> None:
            pass
        """
    )
    with pytest.raises(ValueError, match=r"close_handle.*handle.*not a node"):
        Driver(releases)
    assert nodes(Driver(owners, releases))["handle"].release is not None


def test_release_of_a_non_function_owner_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import Acquisition, shutdown

        @shutdown(of=len)
        def release(acquired: Acquisition[int]) -> None:
            pass
        """
    )
    with pytest.raises(ValueError, match=r"release.*not a node"):
        Driver(mod)


def test_two_releases_on_the_same_node_are_refused(make_module: Any) -> None:
    mod = make_module(
        RESOURCE
        + """
@shutdown(of=handle)
def first(acquired: Acquisition[Handle]) -> None:
    pass

@shutdown(of=handle)
def second(acquired: Acquisition[Handle]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match="duplicate shutdown declaration"):
        Driver(mod)


def test_recursive_subdag_cycle_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        import sys
        from hamilton.function_modifiers import parameterized_subdag

        def inner(x: int) -> int:
            return x

        # Functions of a module are collected when the graph is built: ``outer`` is one.
        @parameterized_subdag(sys.modules[__name__], mount={})
        def outer(inner: int) -> int:
            return inner
        """
    )
    with pytest.raises(ValueError, match="cycle"):
        Driver(mod)


def test_subdag_functions_are_discovered_and_checked(make_module: Any) -> None:
    inner = make_module(
        """
        def inner(x) -> int:
            return x
        """
    )
    mod = make_module(
        f"""
        import {inner.__name__} as inner_module
        from hamilton.function_modifiers import subdag

        @subdag(inner_module)
        def outer(inner: int) -> int:
            return inner
        """
    )
    with pytest.raises(TypeError, match=r"inner\.x: missing type"):
        Driver(mod)


# ------------------------------------------------------------------ 5.4 declaration checks


@pytest.mark.parametrize(
    ("source", "error", "fragment"),
    [
        ("def g(x: int) -> int:\n    yield x\n", TypeError, "generator"),
        ("async def g(x: int) -> int:\n    yield x\n", TypeError, "generator"),
        ("def g(*xs: int) -> int:\n    return 1\n", TypeError, r"g\.xs"),
        ("def g(**kw: int) -> int:\n    return 1\n", TypeError, r"g\.kw"),
        ("def g(x: int, /) -> int:\n    return x\n", TypeError, r"g\.x"),
        ("def g(x) -> int:\n    return x\n", TypeError, r"g\.x: missing type"),
        ("def g(x: Callable[[int], int]) -> int:\n    return 1\n", TypeError, r"g\.x"),
        ("def g(x: Sequence[int]) -> int:\n    return 1\n", TypeError, r"g\.x"),
        ("def g(x: Annotated[int, 1]) -> int:\n    return 1\n", TypeError, r"g\.x"),
        ("def g(x: int = 'a') -> int:\n    return x\n", TypeError, "invalid default"),
        ("def g(x: list[int] = [1, 'a']) -> int:\n    return 1\n", TypeError, "invalid default"),
        ("def g(x: int):\n    return x\n", TypeError, "missing return type"),
        ("def g(x: int) -> Sequence[int]:\n    return [x]\n", TypeError, "g return"),
    ],
)
def test_declaration_checks(make_module: Any, source: str, error: type, fragment: str) -> None:
    mod = make_module(
        "from collections.abc import Callable, Sequence\nfrom typing import Annotated\n" + source
    )
    with pytest.raises(error, match=fragment):
        Driver(mod)


def test_keyword_only_parameters_defaults_and_async_are_accepted(make_module: Any) -> None:
    mod = make_module(
        """
        from typing import Optional

        async def g(x: int, *, y: Optional[int] = None, z: float = 1) -> float:
            return x + (y or 0) + z
        """
    )
    spec = nodes(Driver(mod))["g"]
    assert [(i.name, i.type, i.has_default, i.default) for i in spec.inputs] == [
        ("x", int, False, None),
        ("y", int | None, True, None),
        ("z", float, True, 1),
    ]


def test_unsupported_hamilton_decorator_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import base

        class custom(base.NodeDecorator):
            def __init__(self):
                super().__init__(target=None)

            def decorate_node(self, node_):
                return node_

        @custom()
        def g(x: int) -> int:
            return x
        """
    )
    with pytest.raises(ValueError, match="unsupported Hamilton decorator custom"):
        Driver(mod)


def test_subclass_of_an_admitted_decorator_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import tag

        class my_tag(tag):
            pass

        @my_tag(owner="me")
        def g(x: int) -> int:
            return x
        """
    )
    with pytest.raises(ValueError, match="unsupported Hamilton decorator my_tag"):
        Driver(mod)


def test_does_replacement_must_pass_the_declaration_rules(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import does

        def _sum(**values: int) -> int:
            return sum(values.values())

        @does(_sum)
        def total(a: int, b: int) -> int:
            pass
        """
    )
    with pytest.raises(TypeError, match=r"_sum\.values"):
        Driver(mod)


# ------------------------------------------------------------------ 5.5 release checks

RELEASE_HEADER = """
from typing import Any
from collections.abc import Callable
from hamilton.function_modifiers import tag
from sdax_hamilton import Acquisition, shutdown

class Handle:
    pass

def handle() -> Handle:
    return Handle()
"""


@pytest.mark.parametrize(
    ("release", "error", "fragment"),
    [
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[Handle]) -> None:\n    yield\n",
            TypeError,
            "generator",
        ),
        (
            "@shutdown(of=handle)\nasync def r(a: Acquisition[Handle]) -> None:\n    yield\n",
            TypeError,
            "generator",
        ),
        (
            "@tag(k='v')\n@shutdown(of=handle)\ndef r(a: Acquisition[Handle]) -> None:\n    pass\n",
            ValueError,
            "Hamilton decorators",
        ),
        ("@shutdown(of=handle)\ndef r() -> None:\n    pass\n", TypeError, "exactly one"),
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[Handle], b: int) -> None:\n    pass\n",
            TypeError,
            "exactly one",
        ),
        (
            "@shutdown(of=handle)\ndef r(*, a: Acquisition[Handle]) -> None:\n    pass\n",
            TypeError,
            "exactly one",
        ),
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[Handle] = None) -> None:\n    pass\n",
            TypeError,
            "exactly one",
        ),
        ("@shutdown(of=handle)\ndef r(a: Handle) -> None:\n    pass\n", TypeError, "Acquisition"),
        ("@shutdown(of=handle)\ndef r(a: Acquisition) -> None:\n    pass\n", TypeError, "Acq"),
        ("@shutdown(of=handle)\ndef r(a) -> None:\n    pass\n", TypeError, "Acquisition"),
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[Callable[[], int]]) -> None:\n    pass\n",
            TypeError,
            "Acquisition type",
        ),
        ("@shutdown(of=handle)\ndef r(a: Acquisition[Handle]):\n    pass\n", TypeError, "None"),
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[Handle]) -> int:\n    return 1\n",
            TypeError,
            "return None",
        ),
        (
            "@shutdown(of=handle)\ndef r(a: Acquisition[int]) -> None:\n    pass\n",
            TypeError,
            "shutdown Acquisition type does not accept handle",
        ),
    ],
)
def test_release_checks(make_module: Any, release: str, error: type, fragment: str) -> None:
    mod = make_module(RELEASE_HEADER + release)
    with pytest.raises(error, match=fragment):
        Driver(mod)


@pytest.mark.parametrize("annotation", ["Any", "object", "Handle", "Handle | None"])
def test_release_types_compatible_with_the_owner(make_module: Any, annotation: str) -> None:
    mod = make_module(
        RELEASE_HEADER
        + f"@shutdown(of=handle)\nasync def r(a: Acquisition[{annotation}], /) -> None:\n"
        "    pass\n"
    )
    release = nodes(Driver(mod))["handle"].release
    assert release is not None
    assert release.call.__code__ is mod.r.__code__  # a snapshot of the release


# ------------------------------------------------------------------ 5.6 snapshot and nodes


def test_driver_is_a_snapshot_and_user_objects_are_not_mutated(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import config, extract_fields, tag

        @tag(owner="me")
        @config.when(mode="a")
        def value__a(x: int) -> int:
            return x + 1

        @extract_fields({"left": int, "right": int})
        def pair(value: int) -> dict:
            return {"left": value, "right": -value}
        """
    )
    before = {
        name: (dict(fn.__dict__), fn.__name__, [dict(vars(m)) for m in fn.transform])
        for name, fn in (("pair", mod.pair),)
    }
    value_dict = dict(mod.value__a.__dict__)
    resolvers = [dict(vars(m)) for m in mod.value__a.resolve]
    driver = Driver(mod, config={"mode": "a"})
    assert mod.value__a.__name__ == "value__a"
    assert not hasattr(mod.value__a, "__config_decorated__")
    assert dict(mod.value__a.__dict__) == value_dict
    assert [dict(vars(m)) for m in mod.value__a.resolve] == resolvers
    assert {
        name: (dict(fn.__dict__), fn.__name__, [dict(vars(m)) for m in fn.transform])
        for name, fn in (("pair", mod.pair),)
    } == before
    # Rebinding module attributes later does not change the built Driver.
    mod.value__a = lambda x: -1
    assert nodes(driver)["value"].call(x=1) == 2
    assert nodes(Driver(mod, config={"mode": "b"})).keys() == {"pair", "left", "right"}


def test_user_exceptions_in_the_decorator_lifecycle_are_reraised_unchanged(
    make_module: Any,
) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import config

        ERROR = LookupError("from the predicate")

        def _predicate(cfg):
            raise ERROR

        @config(_predicate)
        def g(x: int) -> int:
            return x
        """
    )
    with pytest.raises(LookupError) as info:
        Driver(mod)
    assert info.value is mod.ERROR


def test_duplicate_generated_nodes_are_refused(make_module: Any) -> None:
    first = make_module(SIMPLE)
    second = make_module(SIMPLE)
    with pytest.raises(ValueError, match="Duplicate Hamilton node 'a'"):
        Driver(first, second)
    mod = make_module(
        """
        from hamilton.function_modifiers import extract_fields

        def b(x: int) -> int:
            return x

        @extract_fields({"b": int})
        def fields(x: int) -> dict:
            return {"b": x}
        """
    )
    with pytest.raises(ValueError, match="Duplicate Hamilton node 'b'"):
        Driver(mod)


@pytest.mark.parametrize(
    ("source", "output", "fragment"),
    [
        (
            "from hamilton.htypes import Parallelizable\n"
            "def items(n: int) -> Parallelizable[int]:\n    return iter(range(n))\n",
            "items",
            r"'items' is a Parallelizable node",
        ),
        (
            "from hamilton.htypes import Collect\n"
            "def total(item: Collect[int]) -> int:\n    return 1\n",
            "total",
            r"Collect node 'total' has no Parallelizable node upstream",
        ),
    ],
)
def test_parallelizable_and_collect_without_their_pair_are_refused_at_prepare(
    make_module: Any, source: str, output: str, fragment: str
) -> None:
    # Admitted by Driver(...) (docs/fanout.md); a selection that cannot fan out is refused.
    dr = Driver(make_module(source))
    with pytest.raises(ValueError, match=fragment):
        dr.prepare([output])


def test_generated_node_types_are_validated(make_module: Any) -> None:
    mod = make_module(
        """
        from collections.abc import Sequence
        from hamilton.function_modifiers import extract_fields

        @extract_fields({"items": Sequence[int]})
        def fields(x: int) -> dict:
            return {"items": [x]}
        """
    )
    with pytest.raises(TypeError, match="items"):
        Driver(mod)


@pytest.mark.parametrize(
    ("produced", "required"),
    [("int", "float"), ("Optional[int]", "int"), ("list[int]", "list[str]")],
)
def test_hamiltons_own_edge_check_runs(make_module: Any, produced: str, required: str) -> None:
    mod = make_module(
        f"""
        from typing import Optional

        def a(x: int) -> {produced}:
            return x

        def b(a: {required}) -> int:
            return 1
        """
    )
    with pytest.raises(ValueError, match="is expecting"):
        Driver(mod)


def test_config_replaced_nodes_are_kept_but_skip_hamiltons_edge_check(make_module: Any) -> None:
    mod = make_module(
        """
        def a(x: int) -> int:
            return x

        def b(a: float) -> float:
            return a
        """
    )
    with pytest.raises(ValueError, match="is expecting"):
        Driver(mod)
    specs = nodes(Driver(mod, config={"a": 1.5}))
    assert set(specs) == {"a", "b"}


# ------------------------------------------------------------------ 5.8 placement errors

PARAMETERIZED = """
from hamilton.function_modifiers import parameterize, value
from sdax_hamilton import Acquisition, execution, shutdown
"""


def test_execution_on_an_expansion_requires_target(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@execution(timeout=1.0)
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x
"""
    )
    with pytest.raises(ValueError, match=r"expanded declaration requires explicit target_.*one"):
        Driver(mod)


def test_shutdown_on_an_expansion_requires_target(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g)
def release(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match="expanded declaration requires explicit target_"):
        Driver(mod)


@pytest.mark.parametrize("decorator", ["execution", "shutdown"])
def test_targets_must_be_generated(make_module: Any, decorator: str) -> None:
    declaration = (
        "@execution(target_=['one', 'three'])\n"
        if decorator == "execution"
        else "@shutdown(of=g, target_=['three', 'one'])\n"
        "def release(a: Acquisition[int]) -> None:\n    pass\n"
    )
    body = """
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x
"""
    source = PARAMETERIZED + (
        declaration + body if decorator == "execution" else body + declaration
    )
    with pytest.raises(ValueError, match=r"targets not generated: \['three'\]"):
        Driver(make_module(source))


def test_shutdown_target_leaving_a_sibling_out(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g, target_="one")
def release(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    specs = nodes(Driver(mod))
    assert specs["one"].release is not None and specs["one"].ownership_required
    assert specs["two"].release is None and specs["two"].ownership_required


def test_split_releases_on_expansion_siblings(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g, target_="one")
def release_one(acquired: Acquisition[int]) -> None:
    pass

@shutdown(of=g, target_=["two"])
def release_two(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    specs = nodes(Driver(mod))
    assert specs["one"].release is not None
    assert specs["one"].release.call.__code__ is mod.release_one.__code__
    assert specs["two"].release is not None
    assert specs["two"].release.call.__code__ is mod.release_two.__code__


def test_overlapping_release_targets_are_duplicates(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g, target_=["one", "two"])
def release_all(acquired: Acquisition[int]) -> None:
    pass

@shutdown(of=g, target_="two")
def release_two(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match="duplicate shutdown declaration for node two"):
        Driver(mod)


# ------------------------------------------------------------------ 6.2 rule at Driver time


def test_forward_retries_on_an_owned_acquisition_are_refused(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@execution(target_="one", retries=1)
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g, target_="one")
def release(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match="Acquisition retries require attempt cleanup: one"):
        Driver(mod)


def test_forward_retries_on_an_unowned_sibling_are_fine(make_module: Any) -> None:
    mod = make_module(
        PARAMETERIZED
        + """
@execution(target_="two", retries=1)
@parameterize(one={"x": value(1)}, two={"x": value(2)})
def g(x: int) -> int:
    return x

@shutdown(of=g, target_="one")
def release(acquired: Acquisition[int]) -> None:
    pass
"""
    )
    specs = nodes(Driver(mod))
    assert specs["two"].policy.retries == 1
    assert specs["one"].policy.retries == 0


# ------------------------------------------------------------------ 5.10 config


def test_config_drives_resolution_and_is_recorded(make_module: Any) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import config

        @config.when(region="us")
        def tax__us(amount: float) -> float:
            return amount * 0.1

        @config.when_not(region="us")
        def tax__other(amount: float) -> float:
            return amount * 0.2
        """
    )
    us = Driver(mod, config={"region": "us"})
    assert nodes(us)["tax"].call(amount=10.0) == 1.0
    assert nodes(us)["tax"].origin == f"{mod.__name__}.tax__us"
    eu = Driver(mod, config={"region": "eu"})
    assert nodes(eu)["tax"].call(amount=10.0) == 2.0
    assert dict(eu._config) == {"region": "eu"}


# ------------------------------------------------------------------ optional validation profiles

PROFILED = """
from collections.abc import Sequence
from typing import Any
from hamilton.data_quality.base import DataValidator, ValidationResult
from hamilton.function_modifiers import check_output, check_output_custom

class Anything(DataValidator):
    def __init__(self):
        super().__init__(importance="warn")

    def applies_to(self, datatype):
        return True

    def description(self):
        return "anything"

    @classmethod
    def name(cls):
        return "anything"

    def validate(self, dataset):
        return ValidationResult(passes=True, message="")
"""


@pytest.fixture
def profiles(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pretend ``check_output_custom`` belongs to a profile (the backends are not installed)."""
    from hamilton.function_modifiers import validation  # type: ignore[import-untyped]

    real = admitted.profile_of

    def assign(**by_class: str) -> None:
        assigned = {getattr(validation, name): profile for name, profile in by_class.items()}
        monkeypatch.setattr(
            admitted, "profile_of", lambda modifier: assigned.get(type(modifier)) or real(modifier)
        )

    return assign


def test_more_than_one_validation_profile_is_refused(make_module: Any, profiles: Any) -> None:
    profiles(check_output_custom="pydantic", check_output="pandera")
    mod = make_module(
        PROFILED
        + """
@check_output(range=(0, 10))
@check_output_custom(Anything())
def g(x: int) -> int:
    return x
"""
    )
    with pytest.raises(ValueError, match="more than one optional validation profile"):
        Driver(mod)


def test_pydantic_profile_widens_the_validated_type(make_module: Any, profiles: Any) -> None:
    profiles(check_output_custom="pydantic")
    mod = make_module(
        PROFILED
        + """
@check_output_custom(Anything())
def g(x: int) -> int:
    return x
"""
    )
    specs = nodes(Driver(mod))
    widened = int | dict[str, Any]
    assert specs["g_raw"].type == widened
    assert specs["g"].type == widened
    assert dict((i.name, i.type) for i in specs["g"].inputs)["g_raw"] == widened
    assert [i.type for i in specs["g_anything"].inputs] == [widened]


def test_pandera_profile_normalises_to_a_dataframe(make_module: Any, profiles: Any) -> None:
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    profiles(check_output_custom="pandera")
    mod = make_module(
        PROFILED
        + """
@check_output_custom(Anything())
def g(x: int) -> Sequence[int]:
    return [x]
"""
    )
    specs = nodes(Driver(mod))
    assert specs["g_raw"].type is pd.DataFrame
    assert specs["g"].type is pd.DataFrame
