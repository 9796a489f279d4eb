"""Every value that reaches user code is checked, and a built Driver never changes.

Bound literals of every Hamilton binding form are checked at ``Driver(...)``; parameters
bound to one source keep every requirement; ``does`` replacements are checked; a Driver is a
snapshot of the decorator objects and functions it was built from; per-call errors say what
was expected and what arrived (docs/bindings.md). Real Hamilton decorators throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError

HEADER = """
from typing import Any
from hamilton.function_modifiers import (
    does, extract_fields, group, inject, load_from, mutate, parameterize,
    parameterize_sources, parameterize_values, pipe_input, pipe_output, save_to, source,
    step, value,
)
from sdax_hamilton import Acquisition, execution, shutdown
"""


def run(driver: Driver, outputs: list[str], **kwargs: Any) -> dict[str, Any]:
    plan = driver.prepare(outputs, **{k: v for k, v in kwargs.items() if k == "override_nodes"})
    call = {k: v for k, v in kwargs.items() if k in ("inputs", "overrides")}
    return loop_support.run(plan.execute(**call))


def refused(make_module: Any, source: str, error: type[Exception], *parts: str) -> str:
    mod = make_module(HEADER + textwrap.dedent(source))
    with pytest.raises(error) as info:
        Driver(mod)
    message = str(info.value)
    for part in parts:
        assert part in message, message
    return message


# ------------------------------------------------------------------ bound literals


def test_inject_value_literal_is_checked(make_module: Any) -> None:
    message = refused(
        make_module,
        """
        @inject(x=value("secret-text"))
        def a(x: int) -> int:
            return x
        """,
        TypeError,
        "node 'a'",
        "parameter 'x'",
        "expects int, got str",
    )
    assert "secret-text" not in message


@pytest.mark.parametrize(
    "decorator",
    [
        'parameterize(b={"x": value("no")})',
        'parameterize_values(parameter="x", assigned_output={("b", ""): "no"})',
    ],
)
def test_parameterize_family_literals_are_checked(make_module: Any, decorator: str) -> None:
    refused(
        make_module,
        f"""
        @{decorator}
        def a(x: int) -> int:
            return x
        """,
        TypeError,
        "node 'b'",
        "parameter 'x'",
        "expects int, got str",
    )


def test_good_literals_build_and_run(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
@inject(x=value(2), xs=group(value(1), value(2)))
def a(x: int, xs: list[int]) -> int:
    return x + sum(xs)

@parameterize(b={"y": value(5)})
def p(y: int) -> int:
    return y
"""
    )
    assert run(Driver(mod), ["a", "b"]) == {"a": 5, "b": 5}


def test_each_group_element_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        @inject(xs=group(value(1), value("two"), value(3)))
        def a(xs: list[int]) -> int:
            return sum(xs)
        """,
        TypeError,
        "node 'a'",
        "parameter 'xs'",
        "expects int, got str",
        "group(...)",
    )


def test_group_of_keyword_literals_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        @inject(xs=group(one=value(1), two=value(2.5)))
        def a(xs: dict[str, int]) -> int:
            return sum(xs.values())
        """,
        TypeError,
        "parameter 'xs'",
        "expects int, got float",
    )


def test_pipe_input_step_literal_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        def _add(v: int, amount: int) -> int:
            return v + amount

        @pipe_input(step(_add, amount=value("wrong")))
        def a(v: int) -> int:
            return v
        """,
        TypeError,
        "step _add",
        "parameter 'amount'",
        "expects int, got str",
    )


def test_step_positional_literal_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        def _add(v: int, amount: int) -> int:
            return v + amount

        @pipe_input(step(_add, "wrong"))
        def a(v: int) -> int:
            return v
        """,
        TypeError,
        "parameter 'amount'",
        "expects int, got str",
    )


def test_pipe_output_step_plain_literal_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        def _scale(v: int, factor: int) -> int:
            return v * factor

        @pipe_output(step(_scale, factor=1.5))
        def a(v: int) -> int:
            return v
        """,
        TypeError,
        "parameter 'factor'",
        "expects int, got float",
    )


WHEN = """
def _add(v: int, amount: int) -> int:
    return v + amount

@{decorator}(
    step(_add, amount=value("bad")).when(mode="bad"),
    step(_add, amount=value(10)).when(mode="good"),
)
{kind}def a(v: int) -> int:
    return v
"""


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
@pytest.mark.parametrize("kind", ["", "async "])
def test_steps_config_disables_are_not_checked_enabled_ones_are(
    make_module: Any, kind: str, decorator: str
) -> None:
    mod = make_module(HEADER + WHEN.format(kind=kind, decorator=decorator))
    driver = Driver(mod, config={"mode": "good"})
    assert run(driver, ["a"], inputs={"v": 1}) == {"a": 11}
    with pytest.raises(TypeError, match=r"parameter 'amount' expects int, got str"):
        Driver(mod, config={"mode": "bad"})


def test_mutate_step_literal_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        def a(v: int) -> int:
            return v

        @mutate(a, amount=value("x"))
        def _add(x: int, amount: int) -> int:
            return x + amount
        """,
        TypeError,
        "parameter 'amount'",
        "expects int, got str",
    )


def test_load_from_literal_is_checked_before_the_adapter_exists(make_module: Any) -> None:
    refused(
        make_module,
        """
        @load_from.json(path=value(3))
        def loaded(data: dict) -> dict:
            return data
        """,
        TypeError,
        "parameter 'path'",
        "expects str, got int",
        "@load_from",
    )


def test_save_to_literal_is_checked(make_module: Any) -> None:
    refused(
        make_module,
        """
        @save_to.json(path=value(4), output_name_="saved")
        def data(x: int) -> dict:
            return {"x": x}
        """,
        TypeError,
        "parameter 'path'",
        "expects str, got int",
        "@save_to",
    )


def test_load_and_save_with_good_literals_run(make_module: Any, tmp_path: Path) -> None:
    source_file = tmp_path / "in.json"
    source_file.write_text(json.dumps({"k": 1}))
    target = tmp_path / "out.json"
    mod = make_module(
        HEADER
        + f"""
@load_from.json(path=value({str(source_file)!r}))
def loaded(data: dict) -> dict:
    return data

@save_to.json(path=value({str(target)!r}), output_name_="saved")
def out(loaded: dict) -> dict:
    return {{"seen": loaded["k"]}}
"""
    )
    result = run(Driver(mod), ["loaded", "saved"])
    assert result["loaded"] == {"k": 1}
    assert json.loads(target.read_text()) == {"seen": 1}


def test_configuration_binding_hamilton_would_ignore_is_refused(make_module: Any) -> None:
    # Hamilton 1.90's parameterize family leaves such a parameter an ordinary input.
    mod = make_module(
        HEADER
        + """
from hamilton.function_modifiers import configuration

@inject(x=configuration("k"))
def a(x: int) -> int:
    return x
"""
    )
    with pytest.raises(ValueError, match=r"node 'a': parameter 'x' is bound with configuration"):
        Driver(mod, config={"k": 1})


def test_subdag_literal_input_is_checked_by_the_edge_check(make_module: Any) -> None:
    inner = make_module(
        """
def inner(y: int) -> int:
    return y
"""
    )
    mod = make_module(
        HEADER
        + f"""
import {inner.__name__} as inner_module
from hamilton.function_modifiers import subdag

@subdag(inner_module, inputs={{"y": value("text")}})
def mounted(inner: int) -> int:
    return inner
"""
    )
    with pytest.raises(ValueError, match=r"mounted.inner is expecting mounted.y"):
        Driver(mod)


# ------------------------------------------------------------------ does


def test_does_replacement_returning_an_incompatible_type_is_refused(make_module: Any) -> None:
    refused(
        make_module,
        """
        def _text(x: int) -> str:
            return str(x)

        @does(_text)
        def a(x: int) -> int:
            pass
        """,
        TypeError,
        "@does replacement",
        "_text",
        "returns str",
    )


def test_does_replacement_result_is_checked_at_run_time(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
def _liar(x: int) -> int:
    return "not an int"  # type: ignore[return-value]

@does(_liar)
def a(x: int) -> int:
    pass
"""
    )
    with pytest.raises(ExecutionError) as info:
        run(Driver(mod), ["a"], inputs={"x": 1})
    (leaf,) = info.value.exceptions
    assert isinstance(leaf, TypeError)
    assert "output 'a' expects int, got str" in str(leaf)
    assert "not an int" not in str(leaf)


# ------------------------------------------------------------------ one source, many parameters


MERGED = """
@inject(b=source("k"), c=source("k"))
def a(b: int, c: float) -> float:
    return b + c
"""


def test_parameters_bound_to_one_source_keep_every_requirement(make_module: Any) -> None:
    mod = make_module(HEADER + MERGED)
    plan = Driver(mod).prepare(["a"])
    assert set(plan.required_inputs["k"]) == {int, float}
    assert loop_support.run(plan.execute(inputs={"k": 2})) == {"a": 4}
    with pytest.raises(TypeError, match=r"input 'k' expects int, got float"):
        loop_support.run(plan.execute(inputs={"k": 2.5}))


def test_a_bound_source_named_like_an_unbound_parameter_keeps_both(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
@inject(b=source("k"))
def a(b: int, k: object) -> int:
    return b
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert set(plan.required_inputs["k"]) == {int, object}
    with pytest.raises(TypeError, match=r"input 'k' expects int, got str"):
        loop_support.run(plan.execute(inputs={"k": "x"}))
    assert loop_support.run(plan.execute(inputs={"k": 4})) == {"a": 4}


def test_producer_must_satisfy_every_bound_parameter(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + MERGED
        + """
def k() -> float:
    return 1.5
"""
    )
    with pytest.raises(TypeError, match=r"Incompatible edge: k -> a"):
        Driver(mod).prepare(["a"])


def test_override_must_satisfy_every_bound_parameter(make_module: Any) -> None:
    # Hamilton keeps only the last parameter's annotation (object): b's int must survive
    mod = make_module(
        HEADER
        + """
@inject(b=source("k"), c=source("k"))
def a(b: int, c: object) -> int:
    return b

def k() -> int:
    return 1
"""
    )
    plan = Driver(mod).prepare(["a"], override_nodes=["k"])
    with pytest.raises(TypeError, match=r"override 'k' expects int, got float"):
        loop_support.run(plan.execute(overrides={"k": 0.5}))
    assert loop_support.run(plan.execute(overrides={"k": 3})) == {"a": 3}


def test_identical_defaults_keep_a_merged_source_optional(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
@inject(b=source("k"), c=source("k"))
def a(b: int = 3, c: int = 3) -> int:
    return b * c
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert "k" not in plan.required_inputs
    assert loop_support.run(plan.execute()) == {"a": 9}


def test_one_default_among_bound_parameters_leaves_the_source_required(
    make_module: Any,
) -> None:
    mod = make_module(
        HEADER
        + """
@inject(b=source("k"), c=source("k"))
def a(b: int, c: int = 3) -> int:
    return b * c
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert plan.required_inputs["k"] == (int,)


def test_conflicting_defaults_on_one_source_are_refused(make_module: Any) -> None:
    refused(
        make_module,
        """
        @inject(b=source("k"), c=source("k"))
        def a(b: int = 1, c: int = 2) -> int:
            return b * c
        """,
        ValueError,
        "'b'",
        "'c'",
        "source 'k'",
        "different defaults",
    )


def test_step_binding_two_parameters_to_one_source_is_refused(make_module: Any) -> None:
    refused(
        make_module,
        """
        def _add(v: int, x: int, y: int) -> int:
            return v + x + y

        @pipe_input(step(_add, x=source("k"), y=source("k")))
        def a(v: int) -> int:
            return v
        """,
        ValueError,
        "'x'",
        "'y'",
        "source 'k'",
    )


# ------------------------------------------------------------------ Hamilton's wrapper names


@pytest.mark.parametrize(
    "binding",
    ["former_inputs=value(1)", 'x=source("former_inputs")', "literal_dependencies=value(1)"],
)
def test_names_of_hamiltons_wrappers_are_refused(make_module: Any, binding: str) -> None:
    parameter = binding.split("=")[0]
    refused(
        make_module,
        f"""
        @inject({binding})
        def a({parameter}: int) -> int:
            return 1
        """,
        ValueError,
        "node 'a'",
        "reserved",
    )


# ------------------------------------------------------------------ snapshot


SNAPSHOT = """
V = value(1)
S = source("k")
def _add(v: int, amount: int) -> int:
    return v + amount
def _sub(v: int, amount: int) -> int:
    return v - amount
ST = step(_add, amount=value(10))

@inject(x=V)
def lit(x: int) -> int:
    return x

@inject(y=S)
def src(y: int) -> int:
    return y

@pipe_input(ST)
def piped(v: int) -> int:
    return v

def _double(x: int) -> int:
    return 2 * x
def _triple(x: int) -> int:
    return 3 * x

@does(_double)
def replaced(x: int) -> int:
    pass

RELEASED: list[str] = []

@execution()
def conn() -> int:
    return 1

@shutdown(of=conn)
def close(acquired: Acquisition[int]) -> None:
    RELEASED.append("close")

def _other_close(acquired: Acquisition[int]) -> None:
    RELEASED.append("other")
"""


def test_a_built_driver_is_a_snapshot(make_module: Any) -> None:
    mod = make_module(HEADER + SNAPSHOT)
    driver = Driver(mod)
    plan = driver.prepare(["lit", "src", "piped", "replaced", "conn"])
    # every object the decorators and declarations hold is changed afterwards
    mod.V.value = 100
    mod.S.source = "j"
    mod.ST.kwargs["amount"] = value_of(mod, 1000)
    mod.ST.fn = mod._sub
    mod._add.__code__ = mod._sub.__code__
    mod._double.__code__ = mod._triple.__code__
    mod.close.__code__ = mod._other_close.__code__
    inputs = {"k": 5, "v": 1, "x": 4}
    for built in (plan, driver.prepare(["lit", "src", "piped", "replaced", "conn"])):

        async def go(built: Any = built) -> dict[str, Any]:
            async with built.open(inputs=inputs) as values:
                return dict(values)

        assert loop_support.run(go()) == {"lit": 1, "src": 5, "piped": 11, "replaced": 8, "conn": 1}
    assert mod.RELEASED == ["close", "close"]
    # a new Driver sees the changes
    fresh = Driver(mod).prepare(["lit", "src", "piped", "replaced", "conn"])
    assert set(fresh.required_inputs) == {"j", "v", "x"}

    async def again() -> dict[str, Any]:
        async with fresh.open(inputs={"j": 5, "v": 1, "x": 4}) as values:
            return dict(values)

    assert loop_support.run(again()) == {
        "lit": 100,
        "src": 5,
        "piped": -999,
        "replaced": 12,
        "conn": 1,
    }
    assert mod.RELEASED[-1] == "other"


def value_of(mod: Any, literal: Any) -> Any:
    from hamilton.function_modifiers import value  # type: ignore[import-untyped]

    return value(literal)


# ------------------------------------------------------------------ per-call messages


def test_input_override_and_output_errors_say_expected_and_arrived(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
def dsn_len(dsn: str) -> int:
    return len(dsn)

def doubled(dsn_len: int) -> int:
    return dsn_len * 2

def liar(dsn_len: int) -> str:
    return dsn_len  # type: ignore[return-value]
"""
    )
    driver = Driver(mod)
    plan = driver.prepare(["doubled"])
    with pytest.raises(TypeError) as info:
        loop_support.run(plan.execute(inputs={"dsn": 12345}))
    assert "input 'dsn' expects str, got int" in str(info.value)
    assert "12345" not in str(info.value)
    overridden = driver.prepare(["doubled"], override_nodes=["dsn_len"])
    with pytest.raises(TypeError, match=r"override 'dsn_len' expects int, got str"):
        loop_support.run(overridden.execute(overrides={"dsn_len": "7"}))
    with pytest.raises(ExecutionError) as failed:
        loop_support.run(driver.prepare(["liar"]).execute(inputs={"dsn": "abc"}))
    assert "output 'liar' expects str, got int" in str(failed.value.exceptions[0])


# ------------------------------------------------------------------ plugin backends


BACKEND_PROBE = r"""
import asyncio, importlib.abc, sys, textwrap, types

BLOCKED = {"polars", "pyspark", "pydantic", "pandera"}
MODE = sys.argv[1]

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            if MODE == "absent":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            raise RuntimeError(f"import of {name} refused by the test")
        return None

if MODE == "absent":
    # Not installed: Hamilton's own extension autoloading meets the missing backends too.
    sys.meta_path.insert(0, Refuse())
    import hamilton.function_modifiers
else:
    # Raising at import: Hamilton's autoloading (disabled for this run) would not survive
    # it, so the hook is installed once Hamilton itself is imported.
    import hamilton.function_modifiers
    sys.meta_path.insert(0, Refuse())
assert not [n for n in sys.modules if n.split(".")[0] in BLOCKED]

source = textwrap.dedent('''
    from hamilton.function_modifiers import (
        check_output, extract_fields, inject, pipe_input, source, step, subdag, value,
    )
    from sdax_hamilton import execution

    def _inc(v: int, by: int) -> int:
        return v + by

    @extract_fields({"low": int, "high": int})
    def bounds(x: int) -> dict:
        return {"low": x, "high": x + 1}

    @check_output(range=(0, 100))
    @pipe_input(step(_inc, by=value(1)))
    @execution(retries=1)
    def total(low: int, high: int) -> int:
        return low + high

    @inject(y=source("total"))
    def shown(y: int) -> str:
        return str(y)
''')
module = types.ModuleType("probe_graph")
sys.modules["probe_graph"] = module
exec(compile(source, "<probe_graph>", "exec"), module.__dict__)

from sdax_hamilton import Driver

plan = Driver(module).prepare(["shown"])
print(asyncio.run(plan.execute(inputs={"x": 3})))
loaded = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
print("loaded", loaded)
assert not loaded, loaded
"""


@pytest.mark.parametrize("mode", ["absent", "raising"])
def test_core_decorators_need_no_plugin_backend(mode: str, tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(BACKEND_PROBE)
    env = dict(os.environ)
    if mode == "raising":
        env["HAMILTON_AUTOLOAD_EXTENSIONS"] = "0"
    done = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "{'shown': '8'}" in done.stdout
    assert "loaded []" in done.stdout


def test_parameterize_extract_columns_bindings_are_a_snapshot(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
import pandas as pd
from hamilton.function_modifiers import ParameterizedExtract, parameterize_extract_columns

SCALE = value(2)

@parameterize_extract_columns(ParameterizedExtract(("c",), {"factor": SCALE}))
def frame(factor: int) -> pd.DataFrame:
    return pd.DataFrame({"c": [factor]})
"""
    )
    driver = Driver(mod)
    mod.SCALE.value = 100
    assert run(driver, ["c"])["c"].tolist() == [2]
    assert run(Driver(mod), ["c"])["c"].tolist() == [100]


def test_pipeline_steps_on_one_source_keep_every_requirement(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
def _add(v: int, amount: int) -> int:
    return v + amount

def _scale(v: int, factor: object) -> int:
    return v * 2 if factor else v

@pipe_input(step(_add, amount=source("k")), step(_scale, factor=source("k")))
def a(v: int) -> int:
    return v
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert set(plan.required_inputs["k"]) == {int, object}
    assert loop_support.run(plan.execute(inputs={"v": 1, "k": 2})) == {"a": 6}
    with pytest.raises(TypeError, match=r"input 'k' expects int, got float"):
        loop_support.run(plan.execute(inputs={"v": 1, "k": 2.0}))


# ------------------------------------------------------------------ step parameters on one source

STEPS = """
def _add(v: int, amount: int{add_default}) -> int:
    return v + amount

def _scale(v: int, factor: int{scale_default}) -> int:
    return v * factor

@{decorator}(step(_add, amount=source("k")), step(_scale, factor=source("k")))
def a(v: int) -> int:
    return v
"""


def steps_module(make_module: Any, decorator: str, add: str, scale: str) -> Any:
    return make_module(
        HEADER + STEPS.format(decorator=decorator, add_default=add, scale_default=scale)
    )


def hamilton_result(mod: Any, outputs: list[str], inputs: dict[str, Any]) -> dict[str, Any]:
    from hamilton import driver as hamilton_driver  # type: ignore[import-untyped]

    return dict(hamilton_driver.Builder().with_modules(mod).build().execute(outputs, inputs=inputs))


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
def test_identical_step_defaults_keep_a_merged_source_optional(
    make_module: Any, decorator: str
) -> None:
    mod = steps_module(make_module, decorator, " = 3", " = 3")
    plan = Driver(mod).prepare(["a"])
    assert "k" not in plan.required_inputs
    ours = loop_support.run(plan.execute(inputs={"v": 1}))
    assert ours == {"a": 12} == hamilton_result(mod, ["a"], {"v": 1})
    # declared optional, a supplied k reaches every step
    optional = Driver(mod).prepare(["a"], optional_inputs=["k"])
    assert set(optional.required_inputs["k"]) == {int}
    assert loop_support.run(optional.execute(inputs={"v": 1, "k": 2})) == {"a": 6}
    assert hamilton_result(mod, ["a"], {"v": 1, "k": 2}) == {"a": 6}


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
def test_conflicting_step_defaults_on_one_source_are_refused(
    make_module: Any, decorator: str
) -> None:
    mod = steps_module(make_module, decorator, " = 1", " = 2")
    with pytest.raises(ValueError) as info:
        Driver(mod)
    for part in ("node 'a'", "'amount'", "'factor'", "source 'k'", "different defaults"):
        assert part in str(info.value)


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
def test_one_step_default_leaves_the_merged_source_required(
    make_module: Any, decorator: str
) -> None:
    mod = steps_module(make_module, decorator, " = 1", "")
    plan = Driver(mod).prepare(["a"])
    assert plan.required_inputs["k"] == (int,)
    assert loop_support.run(plan.execute(inputs={"v": 1, "k": 5})) == {"a": 30}
    assert hamilton_result(mod, ["a"], {"v": 1, "k": 5}) == {"a": 30}


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
def test_an_override_of_the_source_reaches_every_step(make_module: Any, decorator: str) -> None:
    mod = steps_module(make_module, decorator, " = 3", " = 3")
    mod_k = make_module(HEADER + "def k() -> int:\n    return 1\n")
    plan = Driver(mod, mod_k).prepare(["a"], override_nodes=["k"])
    assert loop_support.run(plan.execute(inputs={"v": 1}, overrides={"k": 4})) == {"a": 20}
    from hamilton import driver as hamilton_driver

    hamilton = hamilton_driver.Builder().with_modules(mod, mod_k).build()
    assert hamilton.execute(["a"], inputs={"v": 1}, overrides={"k": 4}) == {"a": 20}
    with pytest.raises(TypeError, match=r"override 'k' expects int, got str"):
        loop_support.run(plan.execute(inputs={"v": 1}, overrides={"k": "4"}))
    produced = Driver(mod, mod_k).prepare(["a"])
    assert loop_support.run(produced.execute(inputs={"v": 1})) == {"a": 2}


@pytest.mark.parametrize("decorator", ["pipe_input", "pipe_output"])
def test_a_step_source_nobody_supplies_is_completed_with_its_default(
    make_module: Any, decorator: str
) -> None:
    mod = make_module(
        HEADER
        + f"""
def _add(v: int, amount: int = 4) -> int:
    return v + amount

@{decorator}(step(_add, amount=source("k")))
def a(v: int) -> int:
    return v
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert set(plan.required_inputs) == {"v"}
    assert loop_support.run(plan.execute(inputs={"v": 5})) == {"a": 9}
    assert hamilton_result(mod, ["a"], {"v": 5}) == {"a": 9}


def test_a_bound_parameter_with_a_default_is_completed_with_it(make_module: Any) -> None:
    mod = make_module(
        HEADER
        + """
@inject(b=source("k"))
def a(b: int = 3) -> int:
    return b * 2
"""
    )
    plan = Driver(mod).prepare(["a"])
    assert plan.required_inputs == {}
    assert loop_support.run(plan.execute()) == {"a": 6}
    assert loop_support.run(
        Driver(mod).prepare(["a"], optional_inputs=["k"]).execute(inputs={"k": 5})
    ) == {"a": 10}
