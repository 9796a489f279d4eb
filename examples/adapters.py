"""Hamilton's adapters on the lifecycle guide's graph: a progress bar, and the Hamilton UI.

python examples/adapters.py
python examples/adapters.py --ui http://localhost:8241 [--project ID] [--user EMAIL]

The first form shows a tqdm progress bar while the guide's graph runs. Node hooks fire around
every attempt, so the bar counts the flaky query's retries too (it ends past its total).
With ``--ui`` the run is also recorded by Hamilton's
``HamiltonTracker`` in a Hamilton UI (``pip install "apache-hamilton[ui,sdk]"`` then
``hamilton ui``); without ``--project`` a project is created through the UI's API.
See docs/adapters.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.request

import guide_graph  # the example's Hamilton module; Python puts this folder on sys.path
from hamilton.plugins.h_tqdm import ProgressBar  # type: ignore[import-untyped, unused-ignore]

from sdax_hamilton import Driver


def create_project(ui: str, user: str) -> int:
    """Create a project in the Hamilton UI through its REST API; returns its id."""
    body = {
        "name": "sdax_hamilton example",
        "description": "examples/adapters.py",
        "tags": {},
        "visibility": {
            "user_ids_visible": [],
            "team_ids_visible": [],
            "team_ids_writable": [],
            "user_ids_writable": [user],
        },
    }
    request = urllib.request.Request(
        f"{ui}/api/v1/projects",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"x-api-user": user, "x-api-key": "", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        project_id: int = json.loads(response.read())["id"]
    return project_id


async def main(ui: str | None, project: int | None, user: str) -> None:
    adapters: list[object] = [ProgressBar(desc="guide graph")]
    tracker = None
    if ui is not None:
        from hamilton_sdk.adapters import HamiltonTracker  # type: ignore[import-untyped, unused-ignore]

        if project is None:
            project = create_project(ui, user)
        tracker = HamiltonTracker(
            project_id=project,
            username=user,
            dag_name="sdax-guide-graph",
            hamilton_api_url=ui,
            hamilton_ui_url=ui,
        )
        adapters.append(tracker)

    plan = Driver(guide_graph, adapters=adapters).prepare(["report"])
    log = guide_graph.EventLog()
    result = await plan.execute(
        inputs={"database": ":memory:", "log": log, "network": guide_graph.FlakyNetwork(2)}
    )
    print("report:", result["report"])
    for number, event in enumerate(log.events, 1):  # releases last, in dependency order
        print(f"{number}. {event}")
    if tracker is not None:
        tracker.stop()  # send what the tracker still buffers
        print(f"recorded in the Hamilton UI: {ui}/dashboard/project/{project}/runs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ui", help="Hamilton UI URL, e.g. http://localhost:8241")
    parser.add_argument("--project", type=int, help="existing Hamilton UI project id")
    parser.add_argument("--user", default="example@sdax-hamilton.dev", help="UI username")
    args = parser.parse_args()
    asyncio.run(main(args.ui, args.project, args.user))
