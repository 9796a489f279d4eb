"""A run's value table from its inputs (src/inputs.rs, ``_core.InputTable``).

``PreparedPlan._values`` asks the plan's ``InputTable`` first: it builds the table when the
inputs are exactly right and answers ``None`` otherwise, so that the plan's own checks say
what is wrong. Whatever it answers, a run sees the same table and the same errors.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from sdax_hamilton import Driver, _core
from sdax_hamilton._types import split_check

SOURCE = """
from typing import Literal


def doubled(x: int, mode: Literal["a", "b"]) -> int:
    return x * 2 if mode == "a" else x


def shown(doubled: int, label: str) -> str:
    return f"{label}={doubled}"
"""


def _table(**config: Any) -> _core.InputTable:
    def positive(value: Any) -> bool:
        if value == "boom":
            raise ValueError("a check that raises fails")
        if value == "stop":
            raise KeyboardInterrupt
        return bool(value)

    return _core.InputTable(
        frozenset({"x", "y"}),
        dict(config),
        [("x", *split_check(int.__instancecheck__)), ("y", positive, False)],
    )


def test_exact_inputs_make_a_fresh_table_config_first() -> None:
    table = _table(c=0, x=-1)
    first = table.fill({"y": 1, "x": 2})
    assert first == {"c": 0, "x": 2, "y": 1}
    assert list(first or {}) == ["c", "x", "y"]  # as {**config, **inputs}
    second = table.fill({"y": 1, "x": 2})
    assert second == first and second is not first
    assert table.fill({"x": True, "y": 1}) == {"c": 0, "x": True, "y": 1}  # bool is an int


@pytest.mark.parametrize(
    "inputs",
    [
        None,
        {},
        {"x": 1},
        {"x": 1, "y": 1, "z": 1},
        {"x": 1, "z": 1},
        {"x": "1", "y": 1},
        {"x": 1, "y": 0},
        {"x": 1, "y": "boom"},
        MappingProxyType({"x": 1, "y": 1}),
        [("x", 1), ("y", 1)],
    ],
)
def test_anything_else_is_left_to_the_plan_s_checks(inputs: Any) -> None:
    assert _table().fill(inputs) is None


def test_no_inputs_is_none_or_an_empty_dict() -> None:
    table = _core.InputTable(frozenset(), {"c": 1}, [])
    assert table.fill(None) == {"c": 1}
    assert table.fill({}) == {"c": 1}
    assert table.fill({"x": 1}) is None


def test_an_interrupt_in_a_check_propagates() -> None:
    with pytest.raises(KeyboardInterrupt):
        _table().fill({"x": 1, "y": "stop"})


@pytest.mark.parametrize(
    ("inputs", "error", "match"),
    [
        ({"x": 1, "mode": "a"}, ValueError, "Input shape mismatch"),
        ({"x": "1", "mode": "a", "label": "l"}, TypeError, "Invalid input: x"),
        ({"x": 1, "mode": "c", "label": "l"}, TypeError, "Invalid input: mode"),
    ],
)
async def test_a_run_with_bad_inputs_fails_as_the_contract_says(
    inputs: dict[str, Any], error: type[Exception], match: str, make_module: Any
) -> None:
    plan = Driver(make_module(SOURCE)).prepare(["shown"])
    assert plan._program.inputs is not None
    with pytest.raises(error, match=match):
        await plan.execute(inputs=inputs)


async def test_any_mapping_of_good_inputs_runs(make_module: Any) -> None:
    plan = Driver(make_module(SOURCE)).prepare(["shown"])
    good = {"x": 2, "mode": "a", "label": "l"}
    assert await plan.execute(inputs=good) == {"shown": "l=4"}
    assert await plan.execute(inputs=MappingProxyType(good)) == {"shown": "l=4"}


async def test_a_plan_with_override_nodes_checks_every_run_itself(make_module: Any) -> None:
    plan = Driver(make_module(SOURCE)).prepare(["shown"], override_nodes=["doubled"])
    assert plan._program.inputs is None
    result = await plan.execute(inputs={"label": "l"}, overrides={"doubled": 7})
    assert result == {"shown": "l=7"}
