"""Every test runs on the loop ``SDAX_TEST_LOOP`` chooses (``support/loops.py``)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from support import loops as loop_support

from sdax_hamilton import Driver

TESTS = Path(__file__).parent


async def test_async_tests_run_on_the_chosen_loop() -> None:
    loop = asyncio.get_running_loop()
    assert loop_support.on_chosen_loop(loop), (loop_support.NAME, type(loop))


async def test_tasks_start_eagerly_exactly_under_eager() -> None:
    ran: list[str] = []

    async def body() -> None:
        ran.append("body")

    task = asyncio.get_running_loop().create_task(body())
    assert ran == (["body"] if loop_support.NAME == "eager" else [])
    await task
    assert ran == ["body"]


def test_asyncio_run_as_users_call_it_gets_the_chosen_loop() -> None:
    """The docs' snippets call ``asyncio.run`` themselves."""

    async def which() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = asyncio.run(which())  # the very call a user's script makes
    assert loop_support.on_chosen_loop(loop), (loop_support.NAME, type(loop))
    assert loop.is_closed()


def test_loop_support_run_gets_the_chosen_loop(make_module: object) -> None:
    module = make_module(  # type: ignore[operator]
        """
        import asyncio

        async def where() -> str:
            return type(asyncio.get_running_loop()).__module__
        """
    )
    result = loop_support.run(Driver(module).prepare(["where"]).execute())
    assert ("uvloop" in result["where"]) == (loop_support.NAME == "uvloop")


def test_no_test_makes_a_loop_of_its_own() -> None:
    """Tests run coroutines through ``support.loops`` (or as ``async def`` tests), never with
    ``asyncio.run``/``asyncio.Runner``/``new_event_loop`` of their own, which would leave the
    chosen loop untested there."""
    offenders: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("loops.py", "test_loops.py", "test_driver_loops.py"):
            # the loops module itself, and the tests that run each kind of loop explicitly
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
                and node.attr in ("run", "Runner", "new_event_loop")
            ):
                offenders.append(f"{path.relative_to(TESTS)}:{node.lineno}: asyncio.{node.attr}")
    assert offenders == []


def test_the_campaign_counts_its_runs_on_this_loop() -> None:
    from support.campaign import RandomChooser, gen_scenario
    from support.campaign_check import run_and_check

    before = loop_support.campaign_runs
    scenario = gen_scenario(RandomChooser(7))
    states = run_and_check(scenario, runs=2)
    assert len(states) == 2
    assert loop_support.campaign_runs == before + 2
