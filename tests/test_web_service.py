"""examples/web_service.py served by a real uvicorn on loopback, on the loop the suite runs on
(``loop_support``): concurrent requests, failing ones, clients that give up mid-run and
mid-stream; every session opened is closed exactly once and the service keeps serving."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import loops as loop_support

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

# Runs in the server's process: binds a free loopback port, prints it, serves until SIGINT.
LAUNCH = """
import socket, sys
import uvicorn
from support import loops as loop_support

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
config = uvicorn.Config(
    "web_service:app",
    loop="none",  # loop_support.run makes the loop
    lifespan="on",
    log_level="warning",
    # idle keep-alive connections stay open for the whole test: a server closing one just as
    # the client reuses it would fail a request for a reason not the service's
    timeout_keep_alive=300,
)
try:
    loop_support.run(uvicorn.Server(config).serve(sockets=[sock]))
except KeyboardInterrupt:  # uvicorn passes the SIGINT on once it has shut down, as uvicorn.run
    pass
print("server stopped", flush=True)
"""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "examples"), str(TESTS)])
    env["SDAX_TEST_LOOP"] = loop_support.NAME
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCH],
        cwd=tmp_path,  # not the source tree: the installed sdax_hamilton is served
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line.strip().isdigit(), f"server did not start: {line!r} {process.stderr.read()}"
        url = f"http://127.0.0.1:{int(line)}"
        deadline = time.monotonic() + 30.0
        while True:  # lifespan startup (the plans) done when /ledger answers
            try:
                if httpx.get(f"{url}/ledger", timeout=5.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server never answered"
            time.sleep(0.05)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30.0)
    return process.returncode, out, err


async def settled(client: httpx.AsyncClient) -> dict[str, Any]:
    """The ledger once no request is in flight (cancelled runs finish their releases)."""
    deadline = time.monotonic() + 30.0
    while True:
        ledger: dict[str, Any] = (await client.get("/ledger")).json()
        if ledger["in_flight"] == 0:
            return ledger
        assert time.monotonic() < deadline, f"requests still in flight: {ledger}"
        await asyncio.sleep(0.05)


async def opened(client: httpx.AsyncClient, request_id: str) -> None:
    """Wait until the server opened ``request_id``'s session (the run is under way)."""
    deadline = time.monotonic() + 30.0
    while request_id not in (await client.get("/ledger")).json()["opened"]:
        assert time.monotonic() < deadline, f"{request_id} never opened its session"
        await asyncio.sleep(0.02)


def released_once(ledger: dict[str, Any]) -> collections.Counter[str]:
    opened_ids = collections.Counter(ledger["opened"])
    assert all(count == 1 for count in opened_ids.values()), opened_ids
    assert collections.Counter(ledger["closed"]) == opened_ids, ledger
    return opened_ids


async def test_concurrent_requests_and_clients_that_give_up_release_every_session_once(
    service: tuple[str, subprocess.Popen[str]],
) -> None:
    url, process = service
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:

        async def ok(number: int) -> None:
            response = await client.get(
                "/price/apple",
                params={"quantity": number, "work": 0.05, "request_id": f"ok-{number}"},
            )
            assert response.status_code == 200, response.text
            assert response.json() == {"request_id": f"ok-{number}", "total": 0.5 * number}

        async def missing(number: int) -> None:
            response = await client.get(
                "/price/caviar", params={"request_id": f"missing-{number}", "work": 0.01}
            )
            assert response.status_code == 404
            assert "caviar" in response.json()["error"]

        async def times_out(number: int) -> None:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(
                    "/price/bread",
                    params={"work": 60.0, "request_id": f"timeout-{number}"},
                    timeout=5.0,  # long enough to be under way on a loaded machine
                )

        async def cancels(number: int) -> None:
            request_id = f"cancel-{number}"
            call = asyncio.ensure_future(
                client.get("/price/bread", params={"work": 60.0, "request_id": request_id})
            )
            await opened(client, request_id)  # mid-run: the session is open, the work waits
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call

        started = time.monotonic()
        await asyncio.gather(
            *(ok(n) for n in range(1, 21)),
            *(missing(n) for n in range(5)),
            *(times_out(n) for n in range(4)),
            *(cancels(n) for n in range(4)),
        )
        ledger = await settled(client)
        assert time.monotonic() - started < 30.0  # cancelled runs did not wait out their 60 s
        ids = released_once(ledger)
        assert {f"ok-{n}" for n in range(1, 21)} <= set(ids)
        assert {f"missing-{n}" for n in range(5)} <= set(ids)
        assert {f"cancel-{n}" for n in range(4)} <= set(ids)
        assert {f"timeout-{n}" for n in range(4)} <= set(ids)
        assert ledger["clients_left"] == 8

        # ... and the service keeps serving.
        await asyncio.gather(*(ok(n) for n in range(21, 31)))
        ledger = await settled(client)
        assert len(released_once(ledger)) == 43

    code, out, err = stop(process)
    assert code == 0, err
    assert "server stopped" in out
    assert "Traceback" not in err and "ASGI" not in err, err


async def test_streamed_rows_hold_the_session_and_a_client_leaving_mid_stream_releases_it(
    service: tuple[str, subprocess.Popen[str]],
) -> None:
    url, process = service
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        response = await client.get("/rows/cheese", params={"count": 3, "request_id": "whole"})
        assert response.status_code == 200
        assert response.text == "1 x cheese = 7.00\n2 x cheese = 14.00\n3 x cheese = 21.00\n"

        async def leaves(number: int) -> None:
            request_id = f"leaves-{number}"
            params: dict[str, Any] = {"count": 1000, "pace": 0.05, "request_id": request_id}
            async with client.stream("GET", "/rows/bread", params=params) as stream:
                lines = stream.aiter_lines()
                assert await anext(lines) == "1 x bread = 2.25"
                assert await anext(lines) == "2 x bread = 4.50"
            # leaving the block closes the connection mid-stream

        await asyncio.gather(*(leaves(n) for n in range(5)))
        ledger = await settled(client)
        ids = released_once(ledger)
        assert set(ids) == {"whole", *(f"leaves-{n}" for n in range(5))}

        response = await client.get("/rows/apple", params={"count": 2, "request_id": "after"})
        assert response.text == "1 x apple = 0.50\n2 x apple = 1.00\n"
        released_once(await settled(client))

    code, _out, err = stop(process)
    assert code == 0, err
    assert "Traceback" not in err, err


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition -> {(metric, labels): value}."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = frozenset(
            (key, raw.strip('"'))
            for key, _, raw in (pair.partition("=") for pair in rest.rstrip("}").split(",") if pair)
        )
        found[(name, labels)] = float(value)
    return found


async def test_the_runs_metrics_are_scraped_as_prometheus_text_and_a_dependency_yields_values(
    service: tuple[str, subprocess.Popen[str]],
) -> None:
    url, process = service
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        for number in range(3):
            response = await client.get("/price/apple", params={"request_id": f"m-{number}"})
            assert response.status_code == 200
        assert (await client.get("/price/caviar", params={"request_id": "m-x"})).status_code == 404
        response = await client.get("/unit/cheese", params={"request_id": "dep"})
        assert response.json() == {"item": "cheese", "unit_price": 7.0, "request_id": "dep"}
        # the dependency's run is released once the response is sent: wait for it
        deadline = time.monotonic() + 30.0
        while "dep" not in (ledger := await settled(client))["closed"]:
            assert time.monotonic() < deadline, f"the dependency's session never closed: {ledger}"
            await asyncio.sleep(0.02)
        assert set(released_once(ledger)) == {"m-0", "m-1", "m-2", "m-x", "dep"}

        response = await client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        scraped = samples(response.text)

    def value(name: str, **labels: str) -> float:
        wanted = frozenset(
            (k if k in ("error_type", "le") else f"sdax_hamilton_{k}", v) for k, v in labels.items()
        )
        return sum(v for (n, have), v in scraped.items() if n == name and wanted <= have)

    assert value("sdax_hamilton_runs_total", outcome="succeeded") == 4  # /unit too
    assert value("sdax_hamilton_runs_total", outcome="failed") == 1
    # caviar has no price: unit_price fails once (a LookupError is not retried)
    assert value("sdax_hamilton_attempts_total", node="unit_price", outcome="failed") == 1
    assert value("sdax_hamilton_failures_total", node="unit_price", error_type="LookupError") == 1
    assert value("sdax_hamilton_attempts_total", node="total", outcome="succeeded") == 3
    assert value("sdax_hamilton_releases_total", node="session", outcome="succeeded") == 5
    assert value("sdax_hamilton_run_duration_seconds_count") == 5
    assert value("sdax_hamilton_attempt_duration_seconds_count", node="session") == 10
    # seconds buckets: every attempt here took less than a second
    assert value("sdax_hamilton_attempt_duration_seconds_bucket", le="1") == value(
        "sdax_hamilton_attempt_duration_seconds_count"
    )
    code, _out, err = stop(process)
    assert code == 0, err
