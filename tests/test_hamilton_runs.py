"""End to end through Driver -> prepare -> execute/open for Hamilton decorators: what ran, how
often and in which order, with policies and releases placed by the translation."""

from __future__ import annotations

import itertools
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sdax_hamilton import Driver, ExecutionError

_counter = itertools.count()

HEADER = """
from typing import Any
import pandas as pd
from hamilton.function_modifiers import (
    check_output, config, dataloader, datasaver, does, extract_fields, inject, group,
    mutate, parameterize, parameterized_subdag, pipe_input, pipe_output, resolve_from_config,
    source, step, subdag, tag, unpack_fields, value,
)
from sdax_hamilton import Acquisition, execution, shutdown

EVENTS: list[str] = []

class Handle:
    def __init__(self, name: str) -> None:
        self.name = name
"""


@pytest.fixture
def graph() -> Iterator[Callable[[str], types.ModuleType]]:
    """A loaded module from ``HEADER + source`` (plain annotations, no inherited futures)."""
    created: list[str] = []

    def factory(source: str) -> types.ModuleType:
        name = f"sdax_test_runs_{next(_counter)}"
        module = types.ModuleType(name)
        sys.modules[name] = module
        created.append(name)
        text = HEADER + textwrap.dedent(source)
        exec(compile(text, f"<{name}>", "exec", dont_inherit=True), module.__dict__)
        return module

    yield factory
    for name in created:
        sys.modules.pop(name, None)


async def test_config_when_runs_the_selected_variant(graph: Any) -> None:
    mod = graph(
        """
        @config.when(mode="fast")
        def speed__fast(x: int) -> str:
            EVENTS.append("fast")
            return "fast"

        @config.when(mode="slow")
        def speed__slow(x: int) -> str:
            EVENTS.append("slow")
            return "slow"

        def report(speed: str, mode: str) -> str:
            EVENTS.append("report")
            return f"{speed}/{mode}"
        """
    )
    plan = Driver(mod, config={"mode": "slow"}).prepare(["report"])
    assert dict(plan.required_inputs) == {"x": (int,)}
    assert await plan.execute(inputs={"x": 1}) == {"report": "slow/slow"}
    assert mod.EVENTS == ["slow", "report"]


async def test_config_key_replaces_a_node(graph: Any) -> None:
    mod = graph(
        """
        def base(x: int) -> int:
            EVENTS.append("base")
            return x

        def doubled(base: int) -> int:
            EVENTS.append("doubled")
            return base * 2
        """
    )
    plan = Driver(mod, config={"base": 21}).prepare(["doubled"])
    assert dict(plan.required_inputs) == {}
    assert await plan.execute() == {"doubled": 42}
    assert mod.EVENTS == ["doubled"]


async def test_parameterize_target_retries_only_the_targeted_expansion(graph: Any) -> None:
    mod = graph(
        """
        ATTEMPTS: dict[str, int] = {}

        @execution(target_="flaky", retries=2, initial_delay=0)
        @parameterize(flaky={"label": value("flaky")}, steady={"label": value("steady")})
        def fetch(label: str) -> str:
            ATTEMPTS[label] = ATTEMPTS.get(label, 0) + 1
            if ATTEMPTS[label] < 3:
                raise ConnectionError(label)
            return label
        """
    )
    driver = Driver(mod)
    assert await driver.prepare(["flaky"]).execute() == {"flaky": "flaky"}
    assert mod.ATTEMPTS == {"flaky": 3}
    with pytest.raises(ExecutionError) as info:
        await driver.prepare(["steady"]).execute()
    (leaf,) = info.value.exceptions
    assert isinstance(leaf, ConnectionError)
    assert mod.ATTEMPTS == {"flaky": 3, "steady": 1}


async def test_extract_fields_owned_dict_borrowed_fields(graph: Any) -> None:
    mod = graph(
        """
        @extract_fields({"reader": Handle, "writer": Handle})
        def pool(url: str) -> dict:
            EVENTS.append("pool")
            return {"reader": Handle("r"), "writer": Handle("w")}

        @shutdown(of=pool)
        def close_pool(acquired: Acquisition[dict]) -> None:
            EVENTS.append(f"close:{sorted(acquired.value)}")

        def query(reader: Handle) -> str:
            EVENTS.append("query")
            return reader.name
        """
    )
    driver = Driver(mod)
    assert await driver.prepare(["query"]).execute(inputs={"url": "u"}) == {"query": "r"}
    assert mod.EVENTS == ["pool", "query", "close:['reader', 'writer']"]
    del mod.EVENTS[:]
    plan = driver.prepare(["writer"])
    with pytest.raises(ValueError, match="Use open"):
        await plan.execute(inputs={"url": "u"})
    assert mod.EVENTS == []
    async with plan.open(inputs={"url": "u"}) as values:
        assert values["writer"].name == "w"
        EVENTS = mod.EVENTS
        EVENTS.append("body")
    assert mod.EVENTS == ["pool", "body", "close:['reader', 'writer']"]


async def test_unpack_fields_runs_the_call_once(graph: Any) -> None:
    mod = graph(
        """
        @unpack_fields("left", "right")
        async def both(x: int) -> tuple[int, int]:
            EVENTS.append("both")
            return x, -x

        def total(left: int, right: int) -> int:
            return left - right
        """
    )
    assert await Driver(mod).prepare(["total"]).execute(inputs={"x": 2}) == {"total": 4}
    assert mod.EVENTS == ["both"]


async def test_shutdown_order_across_parameterized_acquisitions(graph: Any) -> None:
    mod = graph(
        """
        def connection() -> Handle:
            EVENTS.append("connect")
            return Handle("conn")

        @shutdown(of=connection)
        async def disconnect(acquired: Acquisition[Handle]) -> None:
            EVENTS.append("disconnect")

        @parameterize(tx_a={"tag": value("a")}, tx_b={"tag": value("b")})
        def transaction(connection: Handle, tag: str) -> Handle:
            EVENTS.append(f"begin:{tag}")
            return Handle(tag)

        @shutdown(of=transaction, target_=["tx_a", "tx_b"])
        def end(acquired: Acquisition[Handle]) -> None:
            EVENTS.append(f"end:{acquired.value.name}")

        def both(tx_a: Handle, tx_b: Handle) -> str:
            EVENTS.append("both")
            return tx_a.name + tx_b.name
        """
    )
    assert await Driver(mod).prepare(["both"]).execute() == {"both": "ab"}
    assert mod.EVENTS[0] == "connect"
    assert sorted(mod.EVENTS[1:3]) == ["begin:a", "begin:b"]
    assert mod.EVENTS[3] == "both"
    assert sorted(mod.EVENTS[4:6]) == ["end:a", "end:b"]
    assert mod.EVENTS[6:] == ["disconnect"]


async def test_pipe_output_on_an_async_owned_acquisition(graph: Any) -> None:
    mod = graph(
        """
        def _configure(h: Handle, suffix: str) -> Handle:
            EVENTS.append(f"configure:{suffix}")
            return Handle(h.name + suffix)

        @execution(timeout=5.0)
        @pipe_output(step(_configure, suffix=value("+a")), step(_configure, suffix=value("+b")))
        async def session(url: str) -> Handle:
            EVENTS.append("open")
            return Handle(url)

        @shutdown(of=session)
        async def close(acquired: Acquisition[Handle]) -> None:
            EVENTS.append(f"close:{acquired.value.name}")

        def label(session: Handle) -> str:
            EVENTS.append("label")
            return session.name
        """
    )
    driver = Driver(mod)
    assert await driver.prepare(["label"]).execute(inputs={"url": "s"}) == {"label": "s+a+b"}
    assert mod.EVENTS == ["open", "configure:+a", "configure:+b", "label", "close:s"]
    del mod.EVENTS[:]
    async with driver.prepare(["session"]).open(inputs={"url": "s"}) as values:
        assert values["session"].name == "s+a+b"
        mod.EVENTS.append("body")
    assert mod.EVENTS == ["open", "configure:+a", "configure:+b", "body", "close:s"]


async def test_pipe_input_and_mutate_chains(graph: Any) -> None:
    mod = graph(
        """
        def _add(v: int, n: int) -> int:
            EVENTS.append(f"add:{n}")
            return v + n

        @pipe_input(step(_add, n=value(1)), step(_add, n=source("extra")))
        def piped(x: int) -> int:
            EVENTS.append("piped")
            return x * 10

        def mutated(x: int) -> int:
            EVENTS.append("mutated")
            return x

        @mutate(mutated)
        def halve(v: int) -> int:
            EVENTS.append("halve")
            return v // 2
        """
    )
    plan = Driver(mod).prepare(["piped", "mutated"])
    assert await plan.execute(inputs={"x": 4, "extra": 2}) == {"piped": 70, "mutated": 2}
    assert mod.EVENTS.index("add:1") < mod.EVENTS.index("add:2") < mod.EVENTS.index("piped")
    assert mod.EVENTS.index("mutated") < mod.EVENTS.index("halve")
    assert sorted(mod.EVENTS) == sorted(["add:1", "add:2", "piped", "mutated", "halve"])


async def test_check_output_gate(graph: Any) -> None:
    mod = graph(
        """
        from hamilton.data_quality.base import DataValidationError

        @check_output(range=(0, 10), importance="fail")
        def strict(x: int) -> int:
            EVENTS.append("strict")
            return x

        @check_output(range=(0, 10), importance="warn")
        def lenient(x: int) -> int:
            EVENTS.append("lenient")
            return x
        """
    )
    driver = Driver(mod)
    assert await driver.prepare(["strict", "lenient"]).execute(inputs={"x": 5}) == {
        "strict": 5,
        "lenient": 5,
    }
    assert await driver.prepare(["lenient"]).execute(inputs={"x": 50}) == {"lenient": 50}
    for check_outputs in (True, False):
        plan = driver.prepare(["strict"], check_outputs=check_outputs)
        with pytest.raises(ExecutionError) as info:
            await plan.execute(inputs={"x": 987654})
        (leaf,) = info.value.exceptions
        assert isinstance(leaf, mod.DataValidationError)
        assert "987654" not in str(leaf)
    with pytest.raises(ValueError):
        driver.prepare(["strict_raw"])


async def test_subdag_mount_acquires_and_releases_per_mount(graph: Any) -> None:
    inner = graph(
        """
        def session(url: str) -> Handle:
            EVENTS.append(f"open:{url}")
            return Handle(url)

        @shutdown(of=session)
        def _close(acquired: Acquisition[Handle]) -> None:
            EVENTS.append(f"close:{acquired.value.name}")

        def rows(session: Handle) -> str:
            EVENTS.append(f"rows:{session.name}")
            return session.name
        """
    )
    mod = graph(
        f"""
        import {inner.__name__} as inner

        @parameterized_subdag(
            inner,
            east={{"inputs": {{"url": value("east")}}}},
            west={{"inputs": {{"url": value("west")}}}},
        )
        def region(rows: str) -> str:
            return rows.upper()
        """
    )
    result = await Driver(mod).prepare(["east", "west"]).execute()
    assert result == {"east": "EAST", "west": "WEST"}
    events = inner.EVENTS
    assert sorted(events) == sorted(
        ["open:east", "rows:east", "close:east", "open:west", "rows:west", "close:west"]
    )
    for name in ("east", "west"):
        assert events.index(f"open:{name}") < events.index(f"rows:{name}")
        assert events.index(f"rows:{name}") < events.index(f"close:{name}")


async def test_does_inject_and_resolve(graph: Any) -> None:
    mod = graph(
        """
        def _sum(a: int, b: int) -> int:
            EVENTS.append("sum")
            return a + b

        @does(_sum)
        def total(a: int, b: int) -> int:
            pass

        @inject(parts=group(source("total"), value(100)))
        def combined(parts: list[int]) -> int:
            EVENTS.append("combined")
            return sum(parts)

        @resolve_from_config(decorate_with=lambda suffix: tag(suffix=suffix))
        def resolved(combined: int) -> int:
            EVENTS.append("resolved")
            return combined + 1
        """
    )
    driver = Driver(mod, config={"suffix": "x", "hamilton.enable_power_user_mode": True})
    assert await driver.prepare(["resolved"]).execute(inputs={"a": 1, "b": 2}) == {"resolved": 104}
    assert mod.EVENTS == ["sum", "combined", "resolved"]


async def test_load_from_retries_the_loader_and_save_to_saves_once(graph: Any) -> None:
    mod = graph(
        """
        import dataclasses
        from collections.abc import Collection
        from hamilton.function_modifiers.adapters import LoadFromDecorator, SaveToDecorator
        from hamilton.io.data_adapters import DataLoader, DataSaver

        LOADS: list[str] = []

        @dataclasses.dataclass
        class FlakyLoader(DataLoader):
            key: str

            @classmethod
            def applicable_types(cls) -> Collection[type]:
                return [int]

            def load_data(self, type_: type) -> tuple[int, dict[str, Any]]:
                LOADS.append(self.key)
                if len(LOADS) < 2:
                    raise ConnectionError("not yet")
                return len(self.key), {}

            @classmethod
            def name(cls) -> str:
                return "flaky"

        @dataclasses.dataclass
        class EventSaver(DataSaver):
            label: str

            @classmethod
            def applicable_types(cls) -> Collection[type]:
                return [int]

            def save_data(self, data: Any) -> dict[str, Any]:
                EVENTS.append(f"save:{self.label}:{data}")
                return {"label": self.label}

            @classmethod
            def name(cls) -> str:
                return "events"

        @execution(target_="size.load_data.n", retries=1, initial_delay=0)
        @SaveToDecorator([EventSaver], output_name_="stored", label=value("L"))
        @LoadFromDecorator([FlakyLoader], key=source("name"))
        def size(n: int) -> int:
            EVENTS.append("size")
            return n * 10
        """
    )
    plan = Driver(mod).prepare(["stored", "size"])
    assert await plan.execute(inputs={"name": "abcd"}) == {"stored": {"label": "L"}, "size": 40}
    assert mod.LOADS == ["abcd", "abcd"]
    assert mod.EVENTS == ["size", "save:L:40"]


async def test_dataloader_owned_and_datasaver(graph: Any) -> None:
    mod = graph(
        """
        @dataloader()
        def rows(path: str) -> tuple[list, dict]:
            EVENTS.append("load")
            return [1, 2, 3], {"path": path}

        @shutdown(of=rows)
        def release_rows(acquired: Acquisition[tuple[list, dict]]) -> None:
            EVENTS.append(f"release:{len(acquired.value[0])}")

        @datasaver()
        def store(rows: list) -> dict:
            EVENTS.append("store")
            return {"n": len(rows)}
        """
    )
    assert await Driver(mod).prepare(["store"]).execute(inputs={"path": "p"}) == {"store": {"n": 3}}
    assert mod.EVENTS == ["load", "store", "release:3"]


async def test_subdag_identity_input_keeps_the_outer_resource_alive(graph: Any) -> None:
    mod = graph(
        """
        def handle() -> Handle:
            EVENTS.append("acquire")
            return Handle("h")

        @shutdown(of=handle)
        def release(acquired: Acquisition[Handle]) -> None:
            EVENTS.append("release")

        def _use(h: Handle) -> str:
            EVENTS.append("use")
            return h.name

        @subdag(_use, inputs={"h": source("handle")})
        def used(_use: str) -> str:
            EVENTS.append("used")
            return _use + "!"
        """
    )
    assert await Driver(mod).prepare(["used"]).execute() == {"used": "h!"}
    assert mod.EVENTS == ["acquire", "use", "used", "release"]
