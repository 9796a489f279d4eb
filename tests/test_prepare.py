"""docs/contract.md#prepare (arguments, selection, plan properties) and docs/contract.md#run-checks
(per-call checks)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pytest

from sdax_hamilton import Driver, PreparedPlan

CHAIN = """
from typing import Optional

CALLS: list[str] = []

def a(x: int) -> int:
    CALLS.append("a")
    return x + 1

def b(a: int, y: Optional[int] = None) -> int:
    CALLS.append("b")
    return a + (y or 0)

def c(b: int, x: Optional[int]) -> str:
    CALLS.append("c")
    return f"{b}:{x}"

def d(c: str, scale: int = 2) -> str:
    CALLS.append("d")
    return c * scale
"""


@pytest.fixture
def chain(make_module: Any) -> Any:
    return make_module(CHAIN)


def test_plan_properties(chain: Any) -> None:
    plan = Driver(chain).prepare(["d", "b"])
    assert isinstance(plan, PreparedPlan)
    assert dataclasses.is_dataclass(plan)
    assert plan.outputs == ("d", "b")
    assert dict(plan.required_inputs) == {"x": (int, Optional[int])}  # noqa: UP045
    assert list(plan.required_inputs) == ["x"]
    assert plan.override_nodes == frozenset()
    with pytest.raises(TypeError):
        plan.required_inputs["z"] = (int,)  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.outputs = ()  # type: ignore[misc]


async def test_execute_returns_outputs_in_order(chain: Any) -> None:
    plan = Driver(chain).prepare(["d", "b"])
    assert await plan.execute(inputs={"x": 1}) == {"d": "2:12:1", "b": 2}
    assert chain.CALLS == ["a", "b", "c", "d"]


async def test_optional_inputs_become_required(chain: Any) -> None:
    plan = Driver(chain).prepare(["d"], optional_inputs=["y", "scale"])
    assert set(plan.required_inputs) == {"x", "y", "scale"}
    assert await plan.execute(inputs={"x": 1, "y": 10, "scale": 1}) == {"d": "12:1"}


def test_unused_optional_input_declaration(chain: Any) -> None:
    with pytest.raises(ValueError, match="Unused optional input declaration"):
        Driver(chain).prepare(["a"], optional_inputs=["y"])


def test_optional_input_without_default_is_harmless(chain: Any) -> None:
    plan = Driver(chain).prepare(["a"], optional_inputs=["x"])
    assert set(plan.required_inputs) == {"x"}


async def test_overrides_replace_nodes_and_skip_their_inputs(chain: Any) -> None:
    plan = Driver(chain).prepare(["d"], override_nodes=["b"])
    assert plan.override_nodes == frozenset({"b"})
    # `a` is not needed any more; `x` still is, for `c`.
    assert set(plan.required_inputs) == {"x"}
    assert await plan.execute(inputs={"x": 5}, overrides={"b": 7}) == {"d": "7:57:5"}
    assert chain.CALLS == ["c", "d"]


def test_config_supplies_inputs_and_replaces_nodes(make_module: Any) -> None:
    mod = make_module(CHAIN)
    plan = Driver(mod, config={"x": 3}).prepare(["d"])
    assert dict(plan.required_inputs) == {}
    plan = Driver(mod, config={"b": 4}).prepare(["d"])
    assert set(plan.required_inputs) == {"x"}
    with pytest.raises(TypeError, match="Invalid config replacement: b"):
        Driver(mod, config={"b": "four"}).prepare(["d"])


async def test_config_replacement_does_not_run_the_node(make_module: Any) -> None:
    mod = make_module(CHAIN)
    plan = Driver(mod, config={"b": 4}).prepare(["d"])
    assert await plan.execute(inputs={"x": 0}) == {"d": "4:04:0"}
    assert mod.CALLS == ["c", "d"]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"final_vars": "d"}, TypeError, "not a string"),
        ({"final_vars": b"d"}, TypeError, "not a string"),
        ({"final_vars": []}, ValueError, "final_vars"),
        ({"final_vars": ["d", "d"]}, ValueError, "duplicate"),
        ({"final_vars": ["d", ""]}, ValueError, "final_vars"),
        ({"final_vars": ["d", 3]}, ValueError, "final_vars"),
        ({"final_vars": ["d"], "optional_inputs": "y"}, TypeError, "not a string"),
        ({"final_vars": ["d"], "override_nodes": "b"}, TypeError, "not a string"),
        ({"final_vars": ["d"], "check_outputs": 1}, TypeError, "check_outputs"),
        ({"final_vars": ["nope"]}, ValueError, "Unknown selected node: 'nope'"),
        ({"final_vars": ["x"]}, ValueError, "Unknown selected node: 'x'"),
        ({"final_vars": ["d"], "override_nodes": ["zz"]}, ValueError, "Unknown override nodes"),
        ({"final_vars": ["a"], "override_nodes": ["c"]}, ValueError, "Unused override"),
    ],
)
def test_prepare_argument_and_selection_errors(
    chain: Any, kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    driver = Driver(chain)
    with pytest.raises(error, match=fragment):
        driver.prepare(**kwargs)


def test_check_outputs_type_is_checked_first(chain: Any) -> None:
    with pytest.raises(TypeError, match="check_outputs"):
        Driver(chain).prepare("d", check_outputs="yes")  # type: ignore[arg-type]


def test_config_and_overrides_must_be_disjoint(make_module: Any) -> None:
    mod = make_module(CHAIN)
    with pytest.raises(ValueError, match="Configuration and overrides must be disjoint"):
        Driver(mod, config={"b": 1}).prepare(["d"], override_nodes=["b"])


def test_incompatible_edge_is_a_type_error(make_module: Any) -> None:
    mod = make_module(
        """
        def items() -> list:
            return [1]

        def total(items: list[int]) -> int:
            return sum(items)
        """
    )
    with pytest.raises(TypeError, match="Incompatible edge: items -> total"):
        Driver(mod).prepare(["total"])


def test_cycle_is_refused(make_module: Any) -> None:
    mod = make_module(
        """
        def p(q: int) -> int:
            return q

        def q(p: int) -> int:
            return p
        """
    )
    with pytest.raises(ValueError) as caught:
        Driver(mod).prepare(["p"])
    assert "p" in str(caught.value) and "q" in str(caught.value)


class TestPerCallChecks:
    async def test_input_shape(self, chain: Any) -> None:
        plan = Driver(chain).prepare(["d"])
        for inputs in ({}, {"x": 1, "extra": 2}, {"x": 1, "y": 2}):
            with pytest.raises(ValueError, match="Input shape mismatch"):
                await plan.execute(inputs=inputs)
        assert chain.CALLS == []

    async def test_override_shape(self, chain: Any) -> None:
        plan = Driver(chain).prepare(["d"], override_nodes=["b"])
        with pytest.raises(ValueError, match="Override shape mismatch"):
            await plan.execute(inputs={"x": 1})
        with pytest.raises(ValueError, match="Override shape mismatch"):
            await plan.execute(inputs={"x": 1}, overrides={"b": 1, "a": 2})
        assert chain.CALLS == []

    async def test_input_type_against_every_requirement(self, chain: Any) -> None:
        plan = Driver(chain).prepare(["d"])
        with pytest.raises(TypeError, match="Invalid input: x"):
            await plan.execute(inputs={"x": None})  # fine for c, not for a
        with pytest.raises(TypeError, match="Invalid input: x"):
            await plan.execute(inputs={"x": "1"})
        assert chain.CALLS == []

    async def test_override_type(self, chain: Any) -> None:
        plan = Driver(chain).prepare(["d"], override_nodes=["b"])
        with pytest.raises(TypeError, match="Invalid override: b"):
            await plan.execute(inputs={"x": 1}, overrides={"b": "seven"})
        assert chain.CALLS == []

    async def test_open_checks_before_anything_runs(self, chain: Any) -> None:
        plan = Driver(chain).prepare(["d"])
        with pytest.raises(ValueError, match="Input shape mismatch"):
            async with plan.open(inputs={}):
                pass
        assert chain.CALLS == []

    async def test_int_accepted_where_float_declared(self, make_module: Any) -> None:
        mod = make_module(
            """
            def half(value: float) -> float:
                return value / 2

            def whole() -> float:
                return 3  # PEP 484 numeric promotion
            """
        )
        plan = Driver(mod).prepare(["half", "whole"])
        assert await plan.execute(inputs={"value": 1}) == {"half": 0.5, "whole": 3}


async def test_output_check_can_be_disabled(make_module: Any) -> None:
    from sdax_hamilton import ExecutionError

    mod = make_module(
        """
        def wrong() -> int:
            return "text"  # type: ignore[return-value]
        """
    )
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["wrong"]).execute()
    assert "Invalid output from wrong" in str(caught.value.exceptions[0])
    plan = Driver(mod).prepare(["wrong"], check_outputs=False)
    assert await plan.execute() == {"wrong": "text"}


async def test_input_checked_once_when_outputs_are_unchecked(make_module: Any) -> None:
    from sdax_hamilton import ExecutionError

    mod = make_module(
        """
        from sdax_hamilton import execution
        CALLS: list[int] = []

        def wrong() -> int:
            return "text"  # type: ignore[return-value]

        @execution(retries=3, initial_delay=0.0, retryable_exceptions=(TypeError,))
        def consumer(wrong: int) -> int:
            CALLS.append(1)
            return wrong
        """
    )
    plan = Driver(mod).prepare(["consumer"], check_outputs=False)
    with pytest.raises(ExecutionError) as caught:
        await plan.execute()
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, TypeError)
    assert "Invalid input for consumer.wrong" in str(leaf)
    assert mod.CALLS == []  # never called, never retried


def test_default_must_satisfy_every_consumer_requirement(make_module: Any) -> None:
    mod = make_module(
        """
        from typing import Optional

        def strict(x: int = 1) -> int:
            return x

        def loose(x: Optional[int] = None) -> int:
            return x or 0

        def both(strict: int, loose: int) -> int:
            return strict + loose
        """
    )
    with pytest.raises(TypeError, match="Invalid default for input 'x' of node 'loose'"):
        Driver(mod).prepare(["both"])
    # Each node alone is fine: its default satisfies its own requirement.
    assert Driver(mod).prepare(["loose"]).required_inputs == {}
