"""Run the lifecycle guide's example: retries on a flaky query, releases in order.

python examples/lifecycle.py
"""

from __future__ import annotations

import asyncio
import logging

import guide_graph  # the example's Hamilton module; Python puts this folder on sys.path

from sdax_hamilton import Driver, ExecutionError


async def main() -> None:
    log = guide_graph.EventLog()
    plan = Driver(guide_graph).prepare(["report"])
    print("inputs the plan needs:", sorted(plan.required_inputs))

    result = await plan.execute(
        inputs={
            "database": ":memory:",
            "log": log,
            "network": guide_graph.FlakyNetwork(failures=2),
        }
    )
    print("report:", result["report"])
    for number, event in enumerate(log.events, 1):
        print(f"{number}. {event}")

    # A retryable failure that outlasts the retries (nine blips, four attempts): the run
    # fails, and every acquired resource is still released, connection last.
    log.events.clear()
    try:
        await plan.execute(
            inputs={"database": ":memory:", "log": log, "network": guide_graph.FlakyNetwork(9)}
        )
    except ExecutionError as error:  # the original exceptions are its leaves
        print("second run failed as expected:", error)
        for leaf in error.exceptions:
            print(f"  {type(leaf).__name__}: {leaf}", *getattr(leaf, "__notes__", ()), sep="\n    ")
    for number, event in enumerate(log.events, 1):
        print(f"{number}. {event}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main())
