"""Hamilton's reuse patterns (docs/contract.md#discovery, "Hamilton's reuse patterns"):
subdag functions defined inside another function, modules whose ``config.when`` functions
Hamilton's own driver has already renamed, and ``allow_module_overrides``. Each value is
compared with what Hamilton's own driver computes on the same modules.
"""

from __future__ import annotations

from typing import Any

import pytest
from hamilton import driver as hamilton_driver
from support import loops as loop_support

from sdax_hamilton import Driver

REUSE = """
from hamilton.function_modifiers import config, parameterized_subdag, source, subdag, value
from sdax_hamilton import Acquisition, execution, shutdown

RELEASED = []
CALLS = []


def a() -> int:
    return 1


def b() -> int:
    return 2


def _functions():
    @config.when(op="add")
    def d__add(a: int, c: int) -> int:
        return a + c

    @config.when(op="subtract")
    def d__subtract(a: int, c: int) -> int:
        return a - c

    def e(c: int) -> int:
        return c * 2

    def f(c: int, b: int, e: int) -> int:
        return c + b + e

    return [d__add, d__subtract, e, f]


@subdag(*_functions(), inputs={"c": value(10)}, config={"op": "subtract"}, namespace="v1")
def first(d: int, f: int) -> int:
    return d + f


@subdag(*_functions(), inputs={"c": source("b")}, config={"op": "add"}, namespace="v2")
def second(d: int, f: int) -> int:
    return d * f


@parameterized_subdag(
    *_functions(),
    third={"inputs": {"c": value(30)}, "config": {"op": "add"}},
    fourth={"inputs": {"c": value(40)}, "config": {"op": "subtract"}},
)
def each(d: int, e: int) -> int:
    return d - e


def total(first: int, second: int, third: int, fourth: int) -> int:
    return first + second + third + fourth
"""

OUTPUTS = ["first", "second", "third", "fourth", "total"]


def hamilton_values(
    modules: list[Any],
    outputs: list[str],
    *,
    config: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
    overrides: bool = False,
) -> dict[str, Any]:
    builder = hamilton_driver.Builder().with_modules(*modules).with_config(config or {})
    if overrides:
        builder = builder.allow_module_overrides()
    return dict(builder.build().execute(outputs, inputs=inputs or {}))


def our_values(
    driver: Driver, outputs: list[str], *, inputs: dict[str, Any] | None = None
) -> dict[str, Any]:
    return dict(loop_support.run(driver.prepare(outputs).execute(inputs=inputs or {})))


# ------------------------------------------------------------------ subdag functions in a function


def test_subdag_functions_defined_inside_a_function_build_and_match_hamilton(
    make_module: Any,
) -> None:
    mod = make_module(REUSE)
    assert not hasattr(mod, "e") and not hasattr(mod, "d__add")  # not module attributes
    ours = our_values(Driver(mod), OUTPUTS)
    assert ours == hamilton_values([mod], OUTPUTS)
    assert ours["first"] == (1 - 10) + (10 + 2 + 20)


def test_hamilton_built_the_reuse_module_first(make_module: Any) -> None:
    # Hamilton's resolution renames the config.when functions of every subdag it built.
    mod = make_module(REUSE)
    expected = hamilton_values([mod], OUTPUTS)
    assert our_values(Driver(mod), OUTPUTS) == expected


def test_declarations_on_functions_defined_inside_a_function_apply_per_mount(
    make_module: Any,
) -> None:
    mod = make_module(
        """
        from hamilton.function_modifiers import subdag, value
        from sdax_hamilton import Acquisition, execution, shutdown

        CALLS = []
        RELEASED = []


        def _functions():
            @execution(retries=1, initial_delay=0.0)
            def flaky(c: int) -> int:
                CALLS.append(c)
                if CALLS.count(c) == 1:
                    raise ConnectionError("first call fails")
                return c + 1

            def handle(flaky: int) -> list[int]:
                return [flaky]

            @shutdown(of=handle)
            def close_handle(acquired: Acquisition[list[int]]) -> None:
                RELEASED.append(acquired.value[0])

            def used(handle: list[int]) -> int:
                return handle[0] * 2

            return [flaky, handle, used]


        @subdag(*_functions(), inputs={"c": value(1)}, namespace="one")
        def one(used: int) -> int:
            return used


        @subdag(*_functions(), inputs={"c": value(5)}, namespace="two")
        def two(used: int) -> int:
            return used
        """
    )
    assert our_values(Driver(mod), ["one", "two"]) == {"one": 4, "two": 12}
    assert sorted(mod.CALLS) == [1, 1, 5, 5]  # one retry per mount
    assert sorted(mod.RELEASED) == [2, 6]  # one release per mount


# ------------------------------------------------------------------ config.when renames functions

CONFIGURED = """
from hamilton.function_modifiers import config


def x() -> int:
    return 3


@config.when(mode="a")
def y__a(x: int) -> int:
    return x + 1


@config.when(mode="b")
def y__b(x: int) -> int:
    return x * 10


@config.when(mode="a", name="z")
def z_for_a(x: int) -> int:
    return x - 1


@config.when_not(mode="a")
def z__other(x: int) -> int:
    return -x


def w(y: int, z: int) -> int:
    return y * 100 + z
"""


@pytest.mark.parametrize(("built", "then"), [("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")])
def test_a_module_hamilton_has_built_builds_here(make_module: Any, built: str, then: str) -> None:
    mod = make_module(CONFIGURED)
    hamilton_values([mod], ["w"], config={"mode": built})
    renamed = mod.y__a if built == "a" else mod.y__b
    assert renamed.__name__ == "y"  # what Hamilton's config.when does to the function
    ours = our_values(Driver(mod, config={"mode": then}), ["y", "z", "w"])
    assert ours == hamilton_values([mod], ["y", "z", "w"], config={"mode": then})


VERSIONED = """
from hamilton.function_modifiers import config


def new_param() -> str:
    return "dummy"


@config.when(version=0)
def fn() -> str:
    return "version_0"


@config.when(version=1)
def fn__v1() -> str:
    return "version_1"


@config.when(version=2)
def fn__v2(new_param: str) -> str:
    return f"version_2 {new_param}"


@config.when(version=3, name="fn")
def fn_to_rename() -> str:
    return "version_3"
"""


def test_a_module_hamilton_has_built_several_times_builds_here(make_module: Any) -> None:
    # A second resolution by Hamilton overwrites __original_name__ with the new name, and
    # the module also holds another function under that name (fn, for version 0).
    mod = make_module(VERSIONED)
    for built in (1, 2, 3):
        hamilton_values([mod], ["fn"], config={"version": built})
        hamilton_values([mod], ["fn"], config={"version": built})
        for then in (0, 1, 2, 3):
            ours = our_values(Driver(mod, config={"version": then}), ["fn"])
            assert ours == hamilton_values([mod], ["fn"], config={"version": then})


def test_our_driver_does_not_rename_the_users_functions(make_module: Any) -> None:
    mod = make_module(CONFIGURED)
    assert our_values(Driver(mod, config={"mode": "a"}), ["w"]) == {"w": 402}
    assert (mod.y__a.__name__, mod.z_for_a.__name__) == ("y__a", "z_for_a")
    assert hamilton_values([mod], ["w"], config={"mode": "a"}) == {"w": 402}


def test_a_renamed_function_under_another_name_is_still_ambiguous(make_module: Any) -> None:
    mod = make_module(
        """
        def original(x: int) -> int:
            return x

        original.__original_name__ = "elsewhere"
        alias = original
        del original
        """
    )
    with pytest.raises(ValueError, match="ambiguous defining module"):
        Driver(mod)


# ------------------------------------------------------------------ allow_module_overrides

BASE = """
def A(x: int) -> int:
    return x + 1


def B(A: int) -> int:
    return A + 100


def C(B: int) -> int:
    return B * 2
"""

OVERRIDE = """
from sdax_hamilton import execution

CALLS = []
FAIL_ONCE = [True]


@execution(retries=1, initial_delay=0.0)
def B(A: int) -> int:
    CALLS.append(A)
    if FAIL_ONCE:
        FAIL_ONCE.clear()
        raise ConnectionError("first call fails")
    return A * A
"""


def test_module_overrides_match_hamilton(make_module: Any) -> None:
    base, override = make_module(BASE), make_module(OVERRIDE)
    ours = our_values(
        Driver(base, override, allow_module_overrides=True), ["B", "C"], inputs={"x": 3}
    )
    assert ours == {"B": 16, "C": 32}
    assert override.CALLS == [4, 4]  # the later module's function, with its own policy
    assert ours == hamilton_values([base, override], ["B", "C"], inputs={"x": 3}, overrides=True)


def test_module_order_decides_which_function_wins(make_module: Any) -> None:
    base, override = make_module(BASE), make_module(OVERRIDE)
    ours = our_values(
        Driver(override, base, allow_module_overrides=True), ["B", "C"], inputs={"x": 3}
    )
    assert ours == {"B": 104, "C": 208}
    assert override.CALLS == []
    assert ours == hamilton_values([override, base], ["B", "C"], inputs={"x": 3}, overrides=True)


def test_module_overrides_are_refused_by_default(make_module: Any) -> None:
    base, override = make_module(BASE), make_module(OVERRIDE)
    with pytest.raises(ValueError, match="Duplicate Hamilton node 'B'") as info:
        Driver(base, override)
    assert "allow_module_overrides=True" in str(info.value)
    with pytest.raises(ValueError, match="Duplicate Hamilton node 'B'"):
        Driver(base, override, allow_module_overrides=False)
    with pytest.raises(ValueError, match="more than once"):
        hamilton_values([base, override], ["C"], inputs={"x": 3})


def test_allow_module_overrides_must_be_a_bool(make_module: Any) -> None:
    base = make_module(BASE)
    with pytest.raises(TypeError, match="allow_module_overrides must be True or False"):
        Driver(base, allow_module_overrides=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ helpers of pipeline steps

HELPER = """
from hamilton.function_modifiers import pipe_input, pipe_output, step
from sdax_hamilton import Acquisition, execution, shutdown

CALLS = []
RELEASED = []
FAIL_ONCE = [True]


def conn(base: int) -> list[int]:
    CALLS.append(base)
    return [base]


@shutdown(of=conn)
def close(acquired: Acquisition[list[int]]) -> None:
    RELEASED.append(acquired.value[0])


def _replacement_close(acquired: Acquisition[list[int]]) -> None:
    RELEASED.append(-1)


def _replacement_conn(base: int) -> list[int]:
    return [-1]


@execution(retries=1, initial_delay=0.0)
def _scaled(v: int) -> int:
    if FAIL_ONCE:
        FAIL_ONCE.clear()
        raise ConnectionError("first call fails")
    return v * 10


@pipe_input(step(conn))
def piped(base: list[int]) -> int:
    return base[0] + 1


@pipe_output(step(_scaled))
def scaled(base: int) -> int:
    return base
"""


async def test_a_release_on_a_helper_called_directly_and_from_a_step(make_module: Any) -> None:
    mod = make_module(HELPER)
    plan = Driver(mod).prepare(["conn", "piped"])
    # the module changes after the Driver was built: the plan keeps what it copied
    mod.close.__code__ = mod._replacement_close.__code__
    mod.conn.__code__ = mod._replacement_conn.__code__
    async with plan.open(inputs={"base": 3}) as values:
        assert dict(values) == {"conn": [3], "piped": 4}
        assert mod.RELEASED == []
    assert mod.CALLS == [3, 3]  # the node conn, and the step piped.with_conn
    assert mod.RELEASED == [3, 3]  # each acquisition released once, by the original release


async def test_an_execution_policy_on_a_step_function_governs_the_step(make_module: Any) -> None:
    mod = make_module(HELPER)
    result = await Driver(mod).prepare(["scaled"]).execute(inputs={"base": 2})
    assert result == {"scaled": 20}  # the step's first call failed and was retried
    mod.FAIL_ONCE.append(True)
    assert hamilton_values([mod], ["piped"], inputs={"base": 3}) == {"piped": 4}
