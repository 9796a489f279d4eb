"""docs/contract.md#admitted-decorators, #targets, #ownership: each admitted Hamilton decorator
translates, with `execution` policies and `shutdown` releases placed on the generated nodes that
actually call the declaration, and projection / validation / pipeline nodes borrowing from owned
acquisitions upstream."""

from __future__ import annotations

import inspect
import itertools
import logging
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd  # type: ignore[import-untyped, unused-ignore]
import pytest
from support import loops as loop_support

from sdax_hamilton import Driver
from sdax_hamilton._declarations import default_retryable_exceptions
from sdax_hamilton._spec import NodeSpec

HEADER = """
from typing import Any
import pandas as pd
from hamilton import function_modifiers as fm
from hamilton.function_modifiers import (
    cache, check_output, check_output_custom, config, dataloader, datasaver, does,
    extract_columns, extract_fields, group, hamilton_exclude, inject, model, mutate,
    parameterize, parameterize_extract_columns, parameterize_sources, parameterize_values,
    parameterized_inputs, parameterized_subdag, parametrized, parametrized_input, pipe,
    pipe_input, pipe_output, resolve, resolve_from_config, ResolveAt, schema, source, step,
    subdag, tag, tag_outputs, unpack_fields, value, dynamic_transform, ParameterizedExtract,
)
from hamilton.function_modifiers.metadata import ray_remote_options
from sdax_hamilton import Acquisition, execution, shutdown

class Handle:
    pass
"""


_counter = itertools.count()


@pytest.fixture
def make_module() -> Iterator[Callable[[str], types.ModuleType]]:
    """Loaded test modules compiled without inheriting this file's ``__future__`` imports,
    so their annotations are real objects (as in most user modules)."""
    created: list[str] = []

    def factory(source: str) -> types.ModuleType:
        name = f"sdax_test_decorators_{next(_counter)}"
        module = types.ModuleType(name)
        sys.modules[name] = module
        created.append(name)
        code = compile(textwrap.dedent(source), f"<{name}>", "exec", dont_inherit=True)
        exec(code, module.__dict__)
        return module

    yield factory
    for name in created:
        sys.modules.pop(name, None)


def compile_nodes(make_module: Any, source: str, **config: Any) -> tuple[Any, dict[str, NodeSpec]]:
    mod = make_module(HEADER + source)
    return mod, Driver(mod, config=config)._nodes


def run(value: Any) -> Any:
    """Await a node call's result when it is awaitable."""
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        return loop_support.run(wait())
    return value


def placed(specs: dict[str, NodeSpec]) -> dict[str, tuple[int, float | None]]:
    """Nodes carrying a non-default policy: name -> (retries, timeout)."""
    return {
        name: (spec.policy.retries, spec.policy.timeout)
        for name, spec in specs.items()
        if spec.policy.retries or spec.policy.timeout is not None
    }


def owned(specs: dict[str, NodeSpec]) -> dict[str, str]:
    return {
        name: spec.release.origin.rsplit(".", 1)[1]
        for name, spec in specs.items()
        if spec.release is not None
    }


def borrowing(specs: dict[str, NodeSpec]) -> dict[str, tuple[str, ...]]:
    return {name: spec.borrows for name, spec in specs.items() if spec.borrows}


def test_undeclared_nodes_get_the_default_policy(make_module: Any) -> None:
    _, specs = compile_nodes(make_module, "def a(x: int) -> int:\n    return x\n")
    policy = specs["a"].policy
    assert (policy.retries, policy.timeout) == (0, None)
    assert policy.retryable_exceptions == default_retryable_exceptions()
    assert specs["a"].origin.endswith(".a")
    assert specs["a"].call(x=2) == 2


def test_plain_declaration_with_execution_and_shutdown(make_module: Any) -> None:
    mod, specs = compile_nodes(
        make_module,
        """
@execution(timeout=3.0)
async def handle(x: int) -> Handle:
    return Handle()

@shutdown(of=handle, retries=2, timeout=1.0)
async def release(acquired: Acquisition[Handle]) -> None:
    pass

def use(handle: Handle) -> int:
    return 1
""",
    )
    assert placed(specs) == {"handle": (0, 3.0)}
    assert owned(specs) == {"handle": "release"}
    release = specs["handle"].release
    assert release is not None
    assert (release.policy.retries, release.policy.timeout) == (2, 1.0)
    assert release.policy.retryable_exceptions == default_retryable_exceptions()
    assert isinstance(run(specs["handle"].call(x=1)), mod.Handle)
    # An ordinary user node consuming a resource does not borrow.
    assert borrowing(specs) == {}
    assert not specs["use"].borrowed


# ------------------------------------------------------------------ config.*


@pytest.mark.parametrize(
    ("decorator", "config", "expected"),
    [
        ("config.when(mode='a')", {"mode": "a"}, "a"),
        ("config.when_not(mode='b')", {"mode": "a"}, "a"),
        ("config.when_in(mode=['a', 'c'])", {"mode": "c"}, "a"),
        ("config.when_not_in(mode=['b'])", {"mode": "a"}, "a"),
        ("config(lambda cfg: cfg.get('mode') == 'a')", {"mode": "a"}, "a"),
        ("config.when(mode='a')", {"mode": "b"}, "b"),
    ],
)
def test_config_resolvers(make_module: Any, decorator: str, config: Any, expected: str) -> None:
    mod, specs = compile_nodes(
        make_module,
        f"""
@execution(timeout=1.0)
@{decorator}
def value__a(x: int) -> str:
    return "a"

@shutdown(of=value__a)
def release_a(acquired: Acquisition[str]) -> None:
    pass

@execution(retries=2)
@config.when(mode="b")
def value__b(x: int) -> str:
    return "b"
""",
        **config,
    )
    assert set(specs) == {"value"}
    assert specs["value"].call(x=1) == expected
    assert specs["value"].origin == f"{mod.__name__}.value__{expected}"
    if expected == "a":
        assert placed(specs) == {"value": (0, 1.0)}
        assert owned(specs) == {"value": "release_a"}
    else:
        assert placed(specs) == {"value": (2, None)}
        assert owned(specs) == {}


def test_config_disabled_owner_is_harmless(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@config.when(mode="a")
def handle() -> Handle:
    return Handle()

@shutdown(of=handle)
def release(acquired: Acquisition[Handle]) -> None:
    pass

def other(x: int) -> int:
    return x
""",
        mode="b",
    )
    assert list(specs) == ["other"]


# ------------------------------------------------------------------ metadata decorators


def test_tag_cache_ray_and_schema_keep_placement(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(timeout=2.0)
@tag(owner="team")
@cache(behavior="recompute")
@ray_remote_options(num_gpus=1)
def tagged(x: int) -> Handle:
    return Handle()

@shutdown(of=tagged)
def release(acquired: Acquisition[Handle]) -> None:
    pass

@execution(retries=1)
@schema.output(("a", "int"))
def frame(x: int) -> pd.DataFrame:
    return pd.DataFrame({"a": [x]})
""",
    )
    assert placed(specs) == {"tagged": (0, 2.0), "frame": (1, None)}
    assert owned(specs) == {"tagged": "release"}
    assert list(specs["frame"].call(x=3)["a"]) == [3]


def test_tag_outputs_on_an_expansion(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(timeout=1.0)
@tag_outputs(left={"side": "l"})
@extract_fields({"left": int, "right": int})
def pair(x: int) -> dict:
    return {"left": x, "right": -x}
""",
    )
    assert placed(specs) == {"pair": (0, 1.0)}
    assert specs["left"].call(pair={"left": 1, "right": 2}) == 1


# ------------------------------------------------------------------ inject / parameterize


def test_inject_with_group_value_and_source(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(retries=3)
@inject(nums=group(source("a"), value(10), source("b")))
def total(nums: list[int]) -> int:
    return sum(nums)
""",
    )
    assert placed(specs) == {"total": (3, None)}
    assert [i.name for i in specs["total"].inputs] == ["a", "b"]
    assert specs["total"].call(a=1, b=2) == 13


def test_parameterize_with_target_and_shutdown_on_all(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_="one", timeout=5.0)
@parameterize(one={"y": value(1)}, two={"y": source("x")})
def scaled(y: int, factor: int = 10) -> int:
    return y * factor

@shutdown(of=scaled, target_=("one", "two"))
def release(acquired: Acquisition[int]) -> None:
    pass
""",
    )
    assert placed(specs) == {"one": (0, 5.0)}
    assert owned(specs) == {"one": "release", "two": "release"}
    assert specs["one"].call() == 10
    assert specs["two"].call(x=2, factor=3) == 6
    assert [(i.name, i.has_default, i.default) for i in specs["two"].inputs] == [
        ("x", False, None),
        ("factor", True, 10),
    ]


@pytest.mark.parametrize(
    ("decorator", "kwargs", "expected"),
    [
        (
            "parameterize_values(parameter='y', assigned_output={('one', 'd'): 1, "
            "('two', 'd'): 2})",
            {"one": {}, "two": {}},
            {"one": 1, "two": 2},
        ),
        (
            "parameterize_sources(one={'y': 'p'}, two={'y': 'q'})",
            {"one": {"p": 5}, "two": {"q": 7}},
            {"one": 5, "two": 7},
        ),
        (
            "parametrized(parameter='y', assigned_output={('one', 'd'): 1, ('two', 'd'): 2})",
            {"one": {}, "two": {}},
            {"one": 1, "two": 2},
        ),
        (
            "parametrized_input(parameter='y', variable_inputs={'p': ('one', 'd'), "
            "'q': ('two', 'd')})",
            {"one": {"p": 5}, "two": {"q": 7}},
            {"one": 5, "two": 7},
        ),
        (
            "parameterized_inputs(one={'y': 'p'}, two={'y': 'q'})",
            {"one": {"p": 5}, "two": {"q": 7}},
            {"one": 5, "two": 7},
        ),
    ],
)
def test_parameterize_family(
    make_module: Any, decorator: str, kwargs: dict[str, Any], expected: dict[str, int]
) -> None:
    _, specs = compile_nodes(
        make_module,
        f"""
@execution(target_=["two"], retries=1)
@{decorator}
def fam(y: int) -> int:
    return y
""",
    )
    assert set(specs) == {"one", "two"}
    assert placed(specs) == {"two": (1, None)}
    assert {name: specs[name].call(**kwargs[name]) for name in ("one", "two")} == expected


# ------------------------------------------------------------------ extract / unpack


def test_extract_fields_owned_dict_and_borrowing_fields(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(timeout=1.0)
@extract_fields({"left": int, "right": str})
def pair(x: int) -> dict:
    return {"left": x, "right": str(x)}

@shutdown(of=pair)
def release(acquired: Acquisition[dict]) -> None:
    pass

def consumer(left: int) -> int:
    return left
""",
    )
    assert placed(specs) == {"pair": (0, 1.0)}
    assert owned(specs) == {"pair": "release"}
    assert borrowing(specs) == {"left": ("pair",), "right": ("pair",)}
    assert specs["left"].borrowed and specs["right"].borrowed
    assert not specs["consumer"].borrowed and specs["consumer"].borrows == ()
    assert not specs["left"].ownership_required
    assert specs["pair"].call(x=4) == {"left": 4, "right": "4"}
    assert specs["right"].call(pair={"left": 4, "right": "4"}) == "4"


def test_extract_fields_target_naming_a_field_resolves_to_the_call(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_="left", retries=2)
@extract_fields({"left": int, "right": int})
def pair(x: int) -> dict:
    return {"left": x, "right": x}
""",
    )
    assert placed(specs) == {"pair": (2, None)}


def test_projection_of_an_unowned_node_does_not_borrow(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@extract_fields({"left": int})
def pair(x: int) -> dict:
    return {"left": x}
""",
    )
    assert borrowing(specs) == {}
    assert not specs["left"].borrowed


def test_unpack_fields(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_="second", timeout=2.0)
@unpack_fields("first", "second")
async def both(x: int) -> tuple[int, str]:
    return x, str(x)

@shutdown(of=both)
def release(acquired: Acquisition[tuple[int, str]]) -> None:
    pass
""",
    )
    assert placed(specs) == {"both": (0, 2.0)}
    assert owned(specs) == {"both": "release"}
    assert borrowing(specs) == {"first": ("both",), "second": ("both",)}
    assert run(specs["both"].call(x=3)) == (3, "3")
    assert specs["second"].type is str
    assert specs["second"].call(both=(3, "3")) == "3"


def test_extract_columns(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(retries=1)
@extract_columns("a", "b")
def frame(x: int) -> pd.DataFrame:
    return pd.DataFrame({"a": [x], "b": [x * 2]})
""",
    )
    assert placed(specs) == {"frame": (1, None)}
    assert specs["a"].type is pd.Series
    frame = specs["frame"].call(x=2)
    assert list(specs["b"].call(frame=frame)) == [4]


def test_parameterize_extract_columns(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_=["a2"], timeout=4.0)
@parameterize_extract_columns(
    ParameterizedExtract(("a1", "b1"), {"k": value(1)}),
    ParameterizedExtract(("a2", "b2"), {"k": value(2)}),
)
def frame(k: int) -> pd.DataFrame:
    return pd.DataFrame({"a": [k], "b": [k * 10]})
""",
    )
    assert set(specs) == {"frame__0", "frame__1", "a1", "b1", "a2", "b2"}
    # A column alias resolves to the underlying call of its own parameterization.
    assert placed(specs) == {"frame__1": (0, 4.0)}
    frame = specs["frame__1"].call()
    assert list(specs["b2"].call(frame__1=frame)) == [20]


# ------------------------------------------------------------------ does / model


def test_does(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
def _sum(a: int, b: int = 0) -> int:
    return a + b

@execution(retries=2)
@does(_sum)
def total(a: int, b: int = 5) -> int:
    pass
""",
    )
    assert placed(specs) == {"total": (2, None)}
    assert specs["total"].call(a=1) == 6
    assert specs["total"].call(a=1, b=1) == 2


@pytest.mark.parametrize("decorator", ["model", "dynamic_transform"])
def test_model_and_dynamic_transform(make_module: Any, decorator: str) -> None:
    _, specs = compile_nodes(
        make_module,
        f"""
from hamilton.models import BaseModel

class Weighted(BaseModel):
    def get_dependents(self) -> list[str]:
        return list(self.config_parameters)

    def predict(self, **inputs: pd.Series) -> pd.Series:
        return sum(inputs[k] * w for k, w in self.config_parameters.items())

@execution(timeout=9.0)
@{decorator}(Weighted, "weights")
def score() -> pd.Series:
    pass
""",
        weights={"a": 2, "b": 3},
    )
    assert placed(specs) == {"score": (0, 9.0)}
    assert [i.name for i in specs["score"].inputs] == ["a", "b"]
    result = specs["score"].call(a=pd.Series([1]), b=pd.Series([1]))
    assert list(result) == [5]


# ------------------------------------------------------------------ pipe family


@pytest.mark.parametrize("decorator", ["pipe", "pipe_input"])
def test_pipe_input_steps_borrow_from_an_owned_input(make_module: Any, decorator: str) -> None:
    _, specs = compile_nodes(
        make_module,
        f"""
def handle() -> int:
    return 1

@shutdown(of=handle)
def release(acquired: Acquisition[int]) -> None:
    pass

def _add(v: int, n: int) -> int:
    return v + n

@execution(retries=1)
@{decorator}(step(_add, n=value(10)), step(_add, n=source("extra")))
def final(handle: int) -> int:
    return handle * 2
""",
    )
    assert set(specs) == {"handle", "final", "final.with_add", "final.with_add_1"}
    assert placed(specs) == {"final": (1, None)}
    assert borrowing(specs) == {"final.with_add": ("handle",), "final.with_add_1": ("handle",)}
    assert specs["final.with_add"].borrowed
    assert not specs["final"].borrowed
    assert specs["final.with_add"].call(handle=1) == 11
    assert specs["final.with_add_1"].call(**{"final.with_add": 11, "extra": 1}) == 12
    assert specs["final"].call(**{"final.with_add_1": 12}) == 24


@pytest.mark.parametrize("is_async", [False, True])
def test_pipe_output_owned_raw_and_borrowing_chain(make_module: Any, is_async: bool) -> None:
    prefix = "async " if is_async else ""
    _, specs = compile_nodes(
        make_module,
        f"""
def _double(v: int) -> int:
    return v * 2

@execution(timeout=1.0)
@pipe_output(step(_double), step(_double))
{prefix}def conn(x: int) -> int:
    return x

@shutdown(of=conn)
def release(acquired: Acquisition[int]) -> None:
    pass
""",
    )
    assert set(specs) == {"conn.raw", "conn.with_double", "conn.with_double_1", "conn"}
    assert placed(specs) == {"conn.raw": (0, 1.0)}
    assert owned(specs) == {"conn.raw": "release"}
    assert borrowing(specs) == {
        "conn.with_double": ("conn.raw",),
        "conn.with_double_1": ("conn.raw",),
        "conn": ("conn.raw",),
    }
    assert run(specs["conn.raw"].call(x=3)) == 3
    assert specs["conn.with_double"].call(**{"conn.raw": 3}) == 6
    final = specs["conn"].call(**{"conn.with_double_1": 12})
    assert not inspect.isawaitable(final)
    assert final == 12


def test_pipe_output_target_naming_the_final_node(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
def _inc(v: int) -> int:
    return v + 1

@execution(target_="value", retries=2)
@pipe_output(step(_inc))
def value(x: int) -> int:
    return x
""",
    )
    assert placed(specs) == {"value.raw": (2, None)}


def test_mutate(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(retries=1)
def base(x: int) -> int:
    return x

@mutate(base)
def add_one(v: int) -> int:
    return v + 1
""",
    )
    assert set(specs) == {"base.raw", "base.with_add_one", "base"}
    assert placed(specs) == {"base.raw": (1, None)}
    assert specs["base.with_add_one"].call(**{"base.raw": 1}) == 2


# ------------------------------------------------------------------ subdag


INNER = """
from sdax_hamilton import Acquisition, execution, shutdown

class Session:
    pass

@execution(timeout=7.0)
def session(url: str) -> Session:
    return Session()

@shutdown(of=session)
def _end(acquired: Acquisition[Session]) -> None:
    pass

def rows(session: Session, limit: int = 3) -> int:
    return limit
"""


def test_subdag_mount_applies_inner_declarations(make_module: Any) -> None:
    inner = make_module(INNER)
    _, specs = compile_nodes(
        make_module,
        f"""
import {inner.__name__} as inner

@execution(retries=4)
@subdag(inner, inputs={{"url": value("db://")}}, config={{"limit": 5}})
def report(rows: int) -> int:
    return rows + 1
""",
    )
    assert set(specs) == {"report.session", "report.rows", "report.url", "report.limit", "report"}
    assert placed(specs) == {"report.session": (0, 7.0), "report": (4, None)}
    assert owned(specs) == {"report.session": "_end"}
    assert specs["report.session"].origin.endswith(".session")
    assert specs["report"].origin.endswith(".report")
    assert specs["report.url"].call() == "db://"
    assert specs["report.rows"].call(**{"report.session": object(), "report.limit": 5}) == 5
    assert specs["report"].call(**{"report.rows": 5}) == 6


def test_subdag_identity_input_borrows_an_owned_outer_node(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
def handle() -> Handle:
    return Handle()

@shutdown(of=handle)
def release(acquired: Acquisition[Handle]) -> None:
    pass

def _use(h: Handle) -> int:
    return 1

@subdag(_use, inputs={"h": source("handle")})
def used(_use: int) -> int:
    return _use
""",
    )
    assert borrowing(specs) == {"used.h": ("handle",)}
    assert not specs["used._use"].borrowed


def test_parameterized_subdag_one_mount_per_parameterization(make_module: Any) -> None:
    inner = make_module(INNER)
    _, specs = compile_nodes(
        make_module,
        f"""
import {inner.__name__} as inner

@execution(target_=["east"], timeout=2.0)
@parameterized_subdag(
    inner,
    east={{"inputs": {{"url": value("db://east")}}}},
    west={{"inputs": {{"url": value("db://west")}}}},
)
def region(rows: int) -> int:
    return rows
""",
    )
    assert {"east.session", "west.session", "east", "west"} <= set(specs)
    assert placed(specs) == {
        "east.session": (0, 7.0),
        "west.session": (0, 7.0),
        "east": (0, 2.0),
    }
    assert owned(specs) == {"east.session": "_end", "west.session": "_end"}


def test_parameterized_subdag_declaration_requires_a_target(make_module: Any) -> None:
    inner = make_module(INNER)
    with pytest.raises(ValueError, match="expanded declaration requires explicit target_"):
        compile_nodes(
            make_module,
            f"""
import {inner.__name__} as inner

@execution(timeout=2.0)
@parameterized_subdag(inner, east={{"inputs": {{}}}}, west={{"inputs": {{}}}})
def region(rows: int) -> int:
    return rows
""",
        )


def test_subdag_target_names_the_public_name(make_module: Any) -> None:
    inner = make_module(
        """
        from hamilton.function_modifiers import parameterize, value
        from sdax_hamilton import execution

        @execution(target_="low", retries=1)
        @parameterize(low={"x": value(1)}, high={"x": value(2)})
        def level(x: int) -> int:
            return x
        """
    )
    _, specs = compile_nodes(
        make_module,
        f"""
import {inner.__name__} as inner

@subdag(inner)
def a(low: int) -> int:
    return low

@subdag(inner)
def b(high: int) -> int:
    return high
""",
    )
    assert placed(specs) == {"a.low": (1, None), "b.low": (1, None)}


def test_declarations_reached_through_subdags_apply_to_every_candidate(make_module: Any) -> None:
    inner = make_module(
        """
        from hamilton.function_modifiers import parameterize, value
        from sdax_hamilton import execution

        @execution(retries=1)
        @parameterize(low={"x": value(1)}, high={"x": value(2)})
        def level(x: int) -> int:
            return x
        """
    )
    _, specs = compile_nodes(
        make_module,
        f"""
import {inner.__name__} as inner

@subdag(inner)
def a(low: int) -> int:
    return low
""",
    )
    assert placed(specs) == {"a.low": (1, None), "a.high": (1, None)}


# ------------------------------------------------------------------ resolve


def test_resolve_with_power_user_mode(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_="second", retries=1)
@resolve(
    when=ResolveAt.CONFIG_AVAILABLE,
    decorate_with=lambda names: parameterize(**{n: {"x": value(i)} for i, n in enumerate(names)}),
)
def made(x: int) -> int:
    return x
""",
        names=["first", "second"],
        **{"hamilton.enable_power_user_mode": True},
    )
    assert set(specs) == {"first", "second"}
    assert placed(specs) == {"second": (1, None)}
    assert specs["second"].call() == 1


def test_resolve_from_config(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(target_="a", timeout=1.0)
@resolve_from_config(decorate_with=lambda fields: extract_fields(fields))
def parts(x: int) -> dict:
    return {"a": x}
""",
        fields={"a": int},
        **{"hamilton.enable_power_user_mode": True},
    )
    assert placed(specs) == {"parts": (0, 1.0)}
    assert specs["a"].call(parts={"a": 3}) == 3


def test_resolve_skips_the_return_check_but_generated_types_are_checked(
    make_module: Any,
) -> None:
    source = """
from collections.abc import Sequence

@resolve_from_config(decorate_with=lambda: tag(k="v"))
def made(x: int) -> Sequence[int]:
    return [x]
"""
    with pytest.raises(TypeError, match=r"node made .*unsupported type annotation"):
        compile_nodes(make_module, source, **{"hamilton.enable_power_user_mode": True})
    without_resolve = source.replace('@resolve_from_config(decorate_with=lambda: tag(k="v"))', "")
    with pytest.raises(TypeError, match=r"made return: unsupported type annotation"):
        compile_nodes(make_module, without_resolve)


def test_resolve_requires_power_user_mode(make_module: Any) -> None:
    with pytest.raises(Exception, match="power user mode"):
        compile_nodes(
            make_module,
            """
@resolve_from_config(decorate_with=lambda: tag(k="v"))
def made(x: int) -> int:
    return x
""",
        )


def test_resolve_producing_an_unsupported_decorator_is_refused(make_module: Any) -> None:
    with pytest.raises(ValueError, match="unsupported Hamilton decorator my_tag"):
        compile_nodes(
            make_module,
            """
class my_tag(tag):
    pass

@resolve_from_config(decorate_with=lambda: my_tag(k="v"))
def made(x: int) -> int:
    return x
""",
            **{"hamilton.enable_power_user_mode": True},
        )


# ------------------------------------------------------------------ check_output


def test_check_output_internals_gate_and_ownership(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mod, specs = compile_nodes(
        make_module,
        """
from hamilton.data_quality.base import DataValidationError

@execution(timeout=1.0)
@check_output(range=(0, 10), importance="fail")
def measured(x: int) -> int:
    return x

@shutdown(of=measured)
def release(acquired: Acquisition[int]) -> None:
    pass
""",
    )
    validator = "measured_range_validator"
    assert set(specs) == {"measured_raw", validator, "measured"}
    assert placed(specs) == {"measured_raw": (0, 1.0)}
    assert owned(specs) == {"measured_raw": "release"}
    raw, check, gate = specs["measured_raw"], specs[validator], specs["measured"]
    assert raw.validation_internal and check.validation_internal and not gate.validation_internal
    assert raw.validation_gate == "measured" and check.validation_gate == "measured"
    assert gate.borrows == ("measured_raw",) and gate.borrowed
    assert check.borrows == ("measured_raw",)
    secret = 123456789
    result = check.call(measured_raw=secret)
    assert not result.passes
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        with pytest.raises(mod.DataValidationError) as info:
            gate.call(measured_raw=secret, **{validator: result})
    assert "measured" in str(info.value) and "range_validator" in str(info.value)
    assert str(secret) not in str(info.value)
    assert caplog.messages == [
        "Validation failed: node=measured; validator=range_validator; status=failed; level=fail"
    ]
    assert all(str(secret) not in record.getMessage() for record in caplog.records)
    ok = check.call(measured_raw=5)
    assert gate.call(measured_raw=5, **{validator: ok}) == 5


def test_check_output_warn_level_logs_and_passes(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@check_output(range=(0, 10), importance="warn")
def measured(x: int) -> int:
    return x
""",
    )
    validator = "measured_range_validator"
    assert specs["measured"].borrows == () and not specs["measured"].borrowed
    result = specs[validator].call(measured_raw=50)
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        assert specs["measured"].call(measured_raw=50, **{validator: result}) == 50
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "level=warn" in caplog.messages[0]


def test_check_output_custom_and_gate_target(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
from hamilton.data_quality.base import DataValidator, ValidationResult

class Positive(DataValidator):
    def __init__(self):
        super().__init__(importance="fail")

    def applies_to(self, datatype):
        return True

    def description(self):
        return "positive"

    @classmethod
    def name(cls):
        return "positive"

    def validate(self, dataset):
        return ValidationResult(passes=dataset > 0, message="")

@execution(target_="checked", retries=1)
@check_output_custom(Positive())
def checked(x: int) -> int:
    return x
""",
    )
    assert set(specs) == {"checked_raw", "checked_positive", "checked"}
    assert placed(specs) == {"checked_raw": (1, None)}
    assert specs["checked_positive"].call(checked_raw=3).passes


# ------------------------------------------------------------------ I/O adapters


LOADERS = """
import dataclasses
from collections.abc import Collection
from hamilton.function_modifiers.adapters import LoadFromDecorator, SaveToDecorator
from hamilton.io.data_adapters import DataLoader, DataSaver

LOADS: list[str] = []
SAVES: list[Any] = []

@dataclasses.dataclass
class KeyLoader(DataLoader):
    key: str

    @classmethod
    def applicable_types(cls) -> Collection[type]:
        return [int]

    def load_data(self, type_: type) -> tuple[int, dict[str, Any]]:
        LOADS.append(self.key)
        return len(self.key), {"key": self.key}

    @classmethod
    def name(cls) -> str:
        return "key"

@dataclasses.dataclass
class ListSaver(DataSaver):
    label: str

    @classmethod
    def applicable_types(cls) -> Collection[type]:
        return [int]

    def save_data(self, data: Any) -> dict[str, Any]:
        SAVES.append((self.label, data))
        return {"label": self.label}

    @classmethod
    def name(cls) -> str:
        return "list"
"""


def test_load_from_loader_is_an_io_candidate_with_a_fixed_annotation(make_module: Any) -> None:
    mod, specs = compile_nodes(
        make_module,
        LOADERS
        + """
@execution(target_="counted.load_data.n", retries=2)
@LoadFromDecorator([KeyLoader], key=source("name"))
def counted(n: int) -> int:
    return n * 10
""",
    )
    loader, selector = specs["counted.load_data.n"], specs["counted.select_data.n"]
    assert placed(specs) == {"counted.load_data.n": (2, None)}
    assert loader.type == tuple[int, dict[str, Any]]
    assert [(i.name, i.type) for i in selector.inputs] == [("counted.load_data.n", loader.type)]
    assert [i.name for i in specs["counted"].inputs] == ["counted.select_data.n"]
    loaded = loader.call(name="abc")
    assert loaded == (3, {"key": "abc"}) and mod.LOADS == ["abc"]
    assert selector.call(**{"counted.load_data.n": loaded}) == 3
    assert specs["counted"].call(**{"counted.select_data.n": 3}) == 30


def test_load_from_without_target_places_on_the_declaration(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        LOADERS
        + """
@execution(retries=1)
@LoadFromDecorator([KeyLoader], key=value("abc"))
def counted(n: int) -> int:
    return n
""",
    )
    assert placed(specs) == {"counted": (1, None)}


def test_save_to(make_module: Any) -> None:
    mod, specs = compile_nodes(
        make_module,
        LOADERS
        + """
@execution(target_=["saved", "total"], timeout=3.0)
@SaveToDecorator([ListSaver], output_name_="saved", label=value("L"))
def total(x: int) -> int:
    return x + 1
""",
    )
    assert placed(specs) == {"saved": (0, 3.0), "total": (0, 3.0)}
    assert specs["saved"].type == dict[str, Any]
    assert specs["saved"].call(total=5) == {"label": "L"}
    assert mod.SAVES == [("L", 5)]


def test_save_to_is_not_a_release_target(make_module: Any) -> None:
    with pytest.raises(ValueError, match=r"targets not generated: \['saved'\]"):
        compile_nodes(
            make_module,
            LOADERS
            + """
@SaveToDecorator([ListSaver], output_name_="saved", label=value("L"))
def total(x: int) -> int:
    return x + 1

@shutdown(of=total, target_="saved")
def release(acquired: Acquisition[int]) -> None:
    pass
""",
        )


def test_dataloader_and_datasaver(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
@execution(timeout=2.0)
@dataloader()
def rows(path: str) -> tuple[list[int], dict]:
    return [1, 2], {"path": path}

@shutdown(of=rows)
def release(acquired: Acquisition[tuple[list[int], dict]]) -> None:
    pass

@execution(retries=1)
@datasaver()
def store(rows: list[int]) -> dict:
    return {"n": len(rows)}
""",
    )
    assert set(specs) == {"rows.loader", "rows", "store"}
    assert placed(specs) == {"rows.loader": (0, 2.0), "store": (1, None)}
    assert owned(specs) == {"rows.loader": "release"}
    assert borrowing(specs) == {"rows": ("rows.loader",)}
    loaded = specs["rows.loader"].call(path="p")
    assert specs["rows"].call(**{"rows.loader": loaded}) == [1, 2]
    assert specs["store"].call(rows=[1]) == {"n": 1}


# ------------------------------------------------------------------ plugins


def test_pandas_with_columns(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
from hamilton.plugins.h_pandas import with_columns

def doubled(a: pd.Series) -> pd.Series:
    return a * 2

@execution(retries=1)
@with_columns(doubled, columns_to_pass=["a"])
def enriched(df: pd.DataFrame) -> pd.DataFrame:
    return df
""",
    )
    assert placed(specs) == {"enriched": (1, None)}
    assert "enriched.doubled" in specs
    assert specs["enriched.doubled"].origin.endswith(".doubled")
    frame = pd.DataFrame({"a": [1, 2]})
    assert list(specs["enriched.doubled"].call(**{"enriched.a": frame["a"]})) == [2, 4]


def test_projection_borrows_every_owned_acquisition_upstream(make_module: Any) -> None:
    _, specs = compile_nodes(
        make_module,
        """
def first() -> int:
    return 1

@shutdown(of=first)
def release_first(acquired: Acquisition[int]) -> None:
    pass

def second(first: int) -> int:
    return first

@shutdown(of=second)
def release_second(acquired: Acquisition[int]) -> None:
    pass

def ordinary(second: int) -> dict:
    return {"field": second}

@extract_fields({"field": int})
def fields(ordinary: dict) -> dict:
    return ordinary
""",
    )
    assert borrowing(specs) == {"field": ("first", "second")}
    assert specs["field"].borrowed
    assert not specs["ordinary"].borrowed and not specs["fields"].borrowed
