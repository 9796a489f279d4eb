"""A throwaway PostgreSQL server for the tests: initdb + pg_ctl in a temporary directory.

The server listens on 127.0.0.1 only, on a free port, with its Unix socket inside the
temporary directory; it runs as the ``postgres`` system user when the tests run as root
(initdb refuses root) and as the current user otherwise. ``stop()`` shuts it down and
removes the directory.

When the server cannot be started, :func:`unavailable` decides what the test session sees:
under CI (``CI=true``) a failure carrying the server's log, elsewhere a skip with the reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import pytest

SERVER_USER = "postgres"
DATABASE = "postgres"


class ServerUnavailable(Exception):
    """PostgreSQL could not be started; ``log`` holds what the server (or initdb) said."""

    def __init__(self, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() in {"1", "true", "yes"}


def unavailable(error: ServerUnavailable, environ: Mapping[str, str] | None = None) -> NoReturn:
    """Fail (CI) or skip (elsewhere) because PostgreSQL could not be started."""
    if in_ci(environ):
        pytest.fail(
            f"PostgreSQL could not be started: {error.reason}\n--- server log ---\n"
            f"{error.log or '(empty)'}",
            pytrace=False,
        )
    pytest.skip(f"PostgreSQL could not be started: {error.reason}")


def find_bindir() -> str:
    """The directory of initdb/pg_ctl: $SDAX_PG_BINDIR, else the newest Debian install."""
    configured = os.environ.get("SDAX_PG_BINDIR")
    candidates = [configured] if configured else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for directory in candidates:
        if all(os.access(os.path.join(directory, tool), os.X_OK) for tool in ("initdb", "pg_ctl")):
            return directory
    raise ServerUnavailable(
        "initdb/pg_ctl not found (looked in $SDAX_PG_BINDIR, /usr/lib/postgresql/*/bin and "
        "PATH); install Debian's `postgresql` package (.ci/postgres.sh does)"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    bindir: str
    settings: dict[str, str] = field(default_factory=dict)
    port: int = 0
    directory: str = ""
    _as_user: list[str] = field(default_factory=list)
    _options: str = ""

    @property
    def data(self) -> str:
        return os.path.join(self.directory, "data")

    @property
    def logfile(self) -> str:
        return os.path.join(self.directory, "server.log")

    @property
    def dsn(self) -> str:
        # No TLS on this loopback server: asking for it would only add a round trip.
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{DATABASE}?sslmode=disable"

    def read_log(self) -> str:
        try:
            with open(self.logfile, encoding="utf-8", errors="replace") as log:
                return log.read()[-20_000:]
        except OSError as error:
            return f"(no server log: {error})"

    def _run(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as_user, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.directory,  # the server user may not be able to enter the caller's cwd
        )

    def start(self, attempts: int = 3) -> None:
        self.directory = tempfile.mkdtemp(prefix="sdax-pg-")
        os.chmod(self.directory, 0o755)
        os.makedirs(os.path.join(self.directory, "socket"))
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam(SERVER_USER)
            except KeyError as error:
                raise ServerUnavailable(
                    f"running as root and there is no {SERVER_USER!r} system user to run "
                    "the server as (initdb refuses root)"
                ) from error
            for path in (self.directory, os.path.join(self.directory, "socket")):
                os.chown(path, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", SERVER_USER, "--"]
        initdb = self._run(
            os.path.join(self.bindir, "initdb"),
            "-D",
            self.data,
            "-U",
            SERVER_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        if initdb.returncode != 0:
            raise ServerUnavailable(
                f"initdb exited with {initdb.returncode}", initdb.stdout + initdb.stderr
            )
        failure = ServerUnavailable("pg_ctl start was not attempted")
        for _ in range(attempts):  # a free port can be taken between probing and binding
            self.port = free_port()
            options = [
                "-c listen_addresses=127.0.0.1",
                f"-c port={self.port}",
                f"-c unix_socket_directories={os.path.join(self.directory, 'socket')}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ] + [f"-c {name}={value}" for name, value in self.settings.items()]
            self._options = " ".join(options)
            started = self._pg_ctl_start()
            if started.returncode == 0:
                return
            failure = ServerUnavailable(
                f"pg_ctl start exited with {started.returncode}",
                started.stdout + started.stderr + "\n" + self.read_log(),
            )
            if "already in use" not in failure.log:
                break
        self.remove()
        raise failure

    def _pg_ctl_start(self) -> subprocess.CompletedProcess[str]:
        return self._run(
            os.path.join(self.bindir, "pg_ctl"),
            "-D",
            self.data,
            "-l",
            self.logfile,
            "-w",
            "-t",
            "60",
            "-o",
            self._options,
            "start",
        )

    def interrupt(self) -> None:
        """An outage: ``pg_ctl stop -m fast`` (sessions are terminated), data kept."""
        stopped = self._run(
            os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"
        )
        if stopped.returncode != 0:
            raise ServerUnavailable("pg_ctl stop failed", stopped.stdout + stopped.stderr)

    def resume(self) -> None:
        """The server back after :meth:`interrupt`, on the same port and data."""
        started = self._pg_ctl_start()
        if started.returncode != 0:
            raise ServerUnavailable(
                "pg_ctl start failed", started.stdout + started.stderr + self.read_log()
            )

    def stop(self) -> None:
        if self.directory and os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run(
                os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"
            )
        self.remove()

    def remove(self) -> None:
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_server(settings: Mapping[str, str] | None = None) -> Server:
    """Start a server or raise :class:`ServerUnavailable` (with the log)."""
    server = Server(find_bindir(), dict(settings or {}))
    server.start()
    return server
