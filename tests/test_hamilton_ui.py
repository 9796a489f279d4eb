"""The Hamilton UI's ``HamiltonTracker`` recording runs of this Driver in a real UI server.

A session fixture starts the Hamilton UI (package ``apache-hamilton[ui,sdk]``) on loopback
with a fresh sqlite database (``tests/support/ui_server.py``), and stops it at the end.
The tests create a project through the UI's REST API, run graphs with a retried node and a
release under the tracker, then read the runs back through the same API.

When the server cannot start (package missing, no free port, no answer in time): under CI
(``CI=true``) the tests fail with the server's output; elsewhere they are skipped with the
reason.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ui_server import USERNAME, HamiltonUI, free_port

from sdax_hamilton import Driver, ExecutionError

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"Hamilton UI server unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"Hamilton UI server unavailable: {reason}")


@pytest.fixture(scope="session")
def hamilton_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HamiltonUI]:
    missing = [
        name
        for name in ("hamilton_ui", "hamilton_sdk", "django")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        _unavailable(f"{', '.join(missing)} not installed (pip install 'apache-hamilton[ui,sdk]')")
    server = HamiltonUI(tmp_path_factory.mktemp("hamilton-ui"), free_port())
    try:
        server.start()
    except RuntimeError as exc:
        _unavailable(str(exc))
    try:
        yield server
    finally:
        server.stop()


GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown

LOG = []
FAIL_FIRST = {"fetch": 1}


class Connection:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.open = True


def connection(dsn: str) -> Connection:
    return Connection(dsn)


@shutdown(of=connection)
def close_connection(acq: Acquisition[Connection]) -> None:
    if acq.value is not None:
        acq.value.open = False
    LOG.append("released connection")


@execution(retries=2, initial_delay=0.0)
async def fetch(connection: Connection, limit: int) -> int:
    if FAIL_FIRST["fetch"] > 0:
        FAIL_FIRST["fetch"] -= 1
        raise ConnectionError("transient: retried")
    return limit * 2


def report(fetch: int) -> int:
    if fetch < 0:
        raise ValueError("negative count")
    return fetch + 1
"""


@pytest.fixture
def tracked_module(tmp_path: Path) -> Iterator[Any]:
    """The graph as a real module file (the tracker uploads the modules' code)."""
    name = f"sdax_ui_graph_{os.getpid()}_{int(time.monotonic_ns())}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(GRAPH))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(name, None)


def tracker_for(server: HamiltonUI, project_id: int) -> Any:
    from hamilton_sdk.adapters import HamiltonTracker

    tracker = HamiltonTracker(
        project_id=project_id,
        username=USERNAME,
        dag_name="sdax-adapters",
        tags={"suite": "sdax_hamilton"},
        hamilton_api_url=server.url,
        hamilton_ui_url=server.url,
    )
    return tracker


def flush(tracker: Any) -> None:
    """Send everything the tracker's client still holds (its own atexit hook would again)."""
    tracker.stop()
    atexit.unregister(tracker.client.stop)


def node_runs(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["node_name"]: node for node in run["node_runs"]}


async def test_tracker_records_a_run_with_a_retry_and_a_release(
    hamilton_ui: HamiltonUI, tracked_module: Any
) -> None:
    project_id = hamilton_ui.create_project("sdax retried run")
    tracker = tracker_for(hamilton_ui, project_id)
    plan = Driver(tracked_module, adapters=[tracker]).prepare(["report"])
    result = await plan.execute(inputs={"dsn": "sqlite://", "limit": 4})
    assert result == {"report": 9}
    assert tracked_module.LOG == ["released connection"]
    flush(tracker)

    (summary,) = hamilton_ui.latest_runs(project_id)
    assert summary["run_status"] == "SUCCESS"
    assert summary["outputs"] == ["report"]
    assert summary["inputs"] == {"dsn": "sqlite://", "limit": 4}
    run = hamilton_ui.run(summary["id"])
    nodes = node_runs(run)
    # Every Hamilton node of the run; the release is not a node and is not reported.
    assert sorted(nodes) == ["connection", "fetch", "report"]
    assert {name: node["status"] for name, node in nodes.items()} == {
        "connection": "SUCCESS",
        "fetch": "SUCCESS",
        "report": "SUCCESS",
    }
    # The retried node's failed first attempt left its stack trace.
    errors = [a for a in nodes["fetch"]["attributes"] if a["type"] == "error"]
    assert errors, nodes["fetch"]
    trace = "".join(errors[0]["value"]["stack_trace"])
    assert "ConnectionError" in trace and "transient: retried" in trace
    assert not [a for a in nodes["report"]["attributes"] if a["type"] == "error"]


async def test_tracker_records_a_failed_run(hamilton_ui: HamiltonUI, tracked_module: Any) -> None:
    project_id = hamilton_ui.create_project("sdax failed run")
    tracker = tracker_for(hamilton_ui, project_id)
    tracked_module.FAIL_FIRST["fetch"] = 0
    plan = Driver(tracked_module, adapters=[tracker]).prepare(["report"])
    with pytest.raises(ExecutionError):
        await plan.execute(inputs={"dsn": "sqlite://", "limit": -3})
    assert tracked_module.LOG == ["released connection"]
    flush(tracker)

    (summary,) = hamilton_ui.latest_runs(project_id)
    assert summary["run_status"] == "FAILURE"
    nodes = node_runs(hamilton_ui.run(summary["id"]))
    assert nodes["connection"]["status"] == "SUCCESS"
    assert nodes["fetch"]["status"] == "SUCCESS"
    assert nodes["report"]["status"] == "FAILURE"
    errors = [a for a in nodes["report"]["attributes"] if a["type"] == "error"]
    assert "negative count" in "".join(errors[0]["value"]["stack_trace"])


async def test_tracker_records_cached_nodes(
    hamilton_ui: HamiltonUI, tracked_module: Any, tmp_path: Path
) -> None:
    """With ``cache=`` (docs/caching.md) a hit runs the node hooks around the stored value,
    as Hamilton's own driver does around a cached node: the UI shows the node in both runs.
    ``fetch`` takes the connection (a resource) and is never cached; ``report`` is."""
    project_id = hamilton_ui.create_project("sdax cached run")
    tracker = tracker_for(hamilton_ui, project_id)
    tracked_module.FAIL_FIRST["fetch"] = 0
    driver = Driver(tracked_module, adapters=[tracker], cache=tmp_path / "cache")
    plan = driver.prepare(["report"])
    hits: list[list[str]] = []
    for _ in range(2):
        seen: list[Any] = []
        result = await plan.execute(inputs={"dsn": "sqlite://", "limit": 4}, observer=seen.append)
        assert result == {"report": 9}
        hits.append([event.node for event in seen if event.kind == "cache_hit"])
    assert hits == [[], ["report"]]
    flush(tracker)

    runs = hamilton_ui.latest_runs(project_id)
    assert len(runs) == 2
    for summary in runs:
        assert summary["run_status"] == "SUCCESS"
        nodes = node_runs(hamilton_ui.run(summary["id"]))
        assert sorted(nodes) == ["connection", "fetch", "report"]
        assert {node["status"] for node in nodes.values()} == {"SUCCESS"}


def test_example_records_its_run_in_the_ui(hamilton_ui: HamiltonUI) -> None:
    """``examples/adapters.py --ui URL`` creates a project, runs with a progress bar and the
    tracker, and the run is in the UI."""
    import subprocess

    example = Path(__file__).resolve().parent.parent / "examples" / "adapters.py"
    done = subprocess.run(
        [sys.executable, str(example), "--ui", hamilton_ui.url, "--user", USERNAME],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "report: north=150.5, south=99.5" in done.stdout
    assert "guide graph" in done.stderr  # the progress bar
    marker = f"{hamilton_ui.url}/dashboard/project/"
    (line,) = [line for line in done.stdout.splitlines() if marker in line]
    project_id = int(line.split(marker)[1].split("/")[0])
    (summary,) = hamilton_ui.latest_runs(project_id)
    assert summary["run_status"] == "SUCCESS"
    nodes = node_runs(hamilton_ui.run(summary["id"]))
    assert {name: node["status"] for name, node in nodes.items()} == {
        "connection": "SUCCESS",
        "transaction": "SUCCESS",
        "report": "SUCCESS",
    }


async def test_async_tracker_records_a_run_with_a_retry_and_a_release(
    hamilton_ui: HamiltonUI, tracked_module: Any
) -> None:
    """``AsyncHamiltonTracker``: async construction hook and ``ainit`` before the first run,
    async node and graph hooks awaited on the caller's loop."""
    import asyncio

    from hamilton_sdk.adapters import AsyncHamiltonTracker

    project_id = hamilton_ui.create_project("sdax async tracker")
    tracker = AsyncHamiltonTracker(
        project_id=project_id,
        username=USERNAME,
        dag_name="sdax-adapters-async",
        hamilton_api_url=hamilton_ui.url,
        hamilton_ui_url=hamilton_ui.url,
    )
    plan = Driver(tracked_module, adapters=[tracker]).prepare(["report"])
    assert await plan.execute(inputs={"dsn": "sqlite://", "limit": 4}) == {"report": 9}
    assert tracked_module.LOG == ["released connection"]
    # The client's worker task (started by ainit on this loop) sends node updates in
    # batches, at least every few seconds: keep the loop running until they arrive.

    deadline = time.monotonic() + 60
    while True:
        runs = hamilton_ui.latest_runs(project_id)
        nodes = node_runs(hamilton_ui.run(runs[0]["id"])) if runs else {}
        statuses = {name: node["status"] for name, node in nodes.items()}
        if len(statuses) == 3 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    (summary,) = runs
    assert summary["run_status"] == "SUCCESS"
    assert statuses == {"connection": "SUCCESS", "fetch": "SUCCESS", "report": "SUCCESS"}
    errors = [a for a in nodes["fetch"]["attributes"] if a["type"] == "error"]
    assert "transient: retried" in "".join(errors[0]["value"]["stack_trace"])


def test_a_server_that_cannot_start_fails_under_ci_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness reports the server's own output; CI turns that into a failure, a
    developer machine into a skip with the reason."""
    import socket

    import test_hamilton_ui as this

    if importlib.util.find_spec("hamilton_ui") is None:
        _unavailable("hamilton_ui not installed")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = HamiltonUI(tmp_path / "ui", busy.getsockname()[1])
        with pytest.raises(RuntimeError) as info:
            server.start(timeout=120)
    assert "already in use" in str(info.value)  # Django's own message, from the output
    assert server.process is None or server.process.poll() is not None

    monkeypatch.setattr(this, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="unavailable under CI: port busy"):
        this._unavailable("port busy")
    monkeypatch.setattr(this, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="unavailable: port busy"):
        this._unavailable("port busy")
