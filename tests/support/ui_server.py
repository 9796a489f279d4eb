"""A real Hamilton UI server on loopback for the tests, and a small client for its REST API.

``python tests/support/ui_server.py BASE_DIR PORT`` does what ``hamilton ui --no-open
--port PORT --base-dir BASE_DIR`` does (``hamilton_ui.commands.run``: create the directories,
migrate the sqlite database, run Django's server with the ``mini`` settings), except that it
binds ``127.0.0.1`` instead of ``0.0.0.0`` and runs without Django's autoreloader, so the
test owns exactly one process and nothing listens beyond loopback.

:class:`HamiltonUI` starts that process, waits for ``/api/v1/health``, and stops it; its
``get``/``post`` talk to the API as a local user (the ``mini`` settings authenticate by the
``x-api-user`` header, creating the user on first sight).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

USERNAME = "sdax-tests@example.com"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HamiltonUI:
    """One Hamilton UI server process (sqlite under ``base_dir``) on ``127.0.0.1:port``."""

    def __init__(self, base_dir: Path, port: int) -> None:
        self.base_dir = base_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.api = f"{self.url}/api"
        self.log_path = base_dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 240.0) -> None:
        """Start the server; ``RuntimeError`` with its output if it is not healthy in time."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(self.base_dir), str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the Hamilton UI server exited with {self.process.returncode}:\n"
                    + self.output()
                )
            try:
                with urllib.request.urlopen(f"{self.api}/v1/health", timeout=5) as response:
                    if response.status == 200 and json.loads(response.read()) is True:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the Hamilton UI server did not answer within {timeout:.0f} s:\n" + self.output()
        )

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return "(no output)"

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # Django's server stops cleanly on SIGINT
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)

    # ----------------------------------------------------------------- API client

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.api}{path}",
            data=data,
            method=method,
            headers={
                "x-api-user": USERNAME,
                "x-api-key": "",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def create_project(self, name: str) -> int:
        """Create a project writable by the test user, through the UI's API; its id.

        (A user listed as both reader and writer makes the server insert the same
        membership twice and fail, so the user is listed once, as a writer.)"""
        project = self.request(
            "POST",
            "/v1/projects",
            {
                "name": name,
                "description": "sdax_hamilton adapter tests",
                "tags": {},
                "visibility": {
                    "user_ids_visible": [],
                    "team_ids_visible": [],
                    "team_ids_writable": [],
                    "user_ids_writable": [USERNAME],
                },
            },
        )
        project_id: int = project["id"]
        return project_id

    def latest_runs(self, project_id: int) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.request(
            "GET", f"/v1/dag_runs/latest/?project_id={project_id}"
        )
        return runs

    def run(self, run_id: int) -> dict[str, Any]:
        """One DAG run with its node runs (and their error/result attributes)."""
        (found,) = self.request("GET", f"/v1/dag_runs/{run_id}?attr=error&attr=result_summary")
        result: dict[str, Any] = found
        return result


def _serve(base_dir: str, port: str) -> None:
    """What ``hamilton_ui.commands.run`` does for the ``mini`` settings, bound to loopback."""
    import hamilton_ui  # type: ignore[import-untyped, unused-ignore]
    from django.core.management import execute_from_command_line  # type: ignore[import-untyped, unused-ignore]

    os.makedirs(os.path.join(base_dir, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(base_dir, "db"), exist_ok=True)
    os.environ["HAMILTON_BASE_DIR"] = base_dir
    sys.path.insert(0, hamilton_ui.__path__[0])
    settings = "--settings=server.settings_mini"
    execute_from_command_line(["manage.py", "migrate", settings])
    execute_from_command_line(
        ["manage.py", "runserver", settings, f"127.0.0.1:{port}", "--insecure", "--noreload"]
    )


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
