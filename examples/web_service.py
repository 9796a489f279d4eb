"""A FastAPI service run by uvicorn: the plans are built once at startup, each request runs
one of them over a session of its own that is released when the run ends (docs/web.md).

    pip install '.[test]'   # brings fastapi, uvicorn and httpx
    uvicorn --app-dir examples web_service:app --port 8000
    curl 'http://127.0.0.1:8000/price/apple?quantity=3'
    curl 'http://127.0.0.1:8000/ledger'

``GET /price/{item}`` awaits ``execute()``; a client that disconnects mid-run cancels it (its
session is still released). ``GET /rows/{item}`` streams lines while ``open()`` keeps the
session alive. ``GET /ledger`` shows every session opened and closed
(tests/test_web_service.py checks each is released exactly once).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import web_graph  # the service's Hamilton module; uvicorn's --app-dir puts it on sys.path
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from sdax_hamilton import Driver, ExecutionError, PreparedPlan


class Service:
    """What the service builds once, at startup: the plans, the ledger, a few counters."""

    def __init__(self) -> None:
        driver = Driver(web_graph)  # compiles the module once
        self.price_plan: PreparedPlan = driver.prepare(["total"])
        self.rows_plan: PreparedPlan = driver.prepare(["session", "unit_price"])
        self.ledger = web_graph.Ledger()
        self.in_flight = 0
        self.clients_left = 0

    def inputs(self, request_id: str | None, **values: Any) -> dict[str, Any]:
        return {"request_id": request_id or uuid.uuid4().hex, "ledger": self.ledger, **values}


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.service = Service()
    yield


app = FastAPI(lifespan=lifespan)


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


class ClientLeft(Exception):
    """The client disconnected before the response was ready."""


@contextlib.asynccontextmanager
async def cancelled_when_client_leaves(request: Request) -> AsyncIterator[None]:
    """Cancel the body when the client disconnects, and raise ``ClientLeft`` then (the way
    ``asyncio.timeout`` cancels its body and raises ``TimeoutError``).

    uvicorn does not cancel a handler whose client went away; without this, the run would
    go on to its end for nobody.
    """
    task = asyncio.current_task()
    assert task is not None
    left = False

    async def watch() -> None:
        nonlocal left
        while (await request.receive())["type"] != "http.disconnect":
            pass
        left = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if left and task.uncancel() == 0:
            raise ClientLeft from None
        raise
    finally:
        watcher.cancel()


@app.get("/price/{item}")
async def price(
    item: str,
    request: Request,
    quantity: int = 1,
    work: float = 0.0,
    request_id: str | None = None,
) -> Response:
    service = service_of(request)
    inputs = service.inputs(request_id, item=item, quantity=quantity, work_seconds=work)
    service.in_flight += 1
    try:
        async with cancelled_when_client_leaves(request):
            result = await service.price_plan.execute(inputs=inputs)  # released when it returns
    except ClientLeft:
        service.clients_left += 1  # the run was cancelled; its session was released
        return Response(status_code=499)
    except ExecutionError as error:
        missing = [leaf for leaf in error.exceptions if isinstance(leaf, LookupError)]
        if missing:
            return JSONResponse({"error": str(missing[0])}, status_code=404)
        return JSONResponse({"error": str(error)}, status_code=502)
    finally:
        service.in_flight -= 1
    return JSONResponse({"request_id": inputs["request_id"], "total": result["total"]})


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that closes its body generator itself, in the request's task.

    When the client leaves, Starlette stops iterating and may leave the generator suspended
    at a ``yield``, inside ``plan.open()``; only closing it runs the body's exit (and so the
    releases) now, rather than whenever the generator is garbage-collected.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


@app.get("/rows/{item}")
async def rows(
    item: str,
    request: Request,
    count: int = 5,
    pace: float = 0.0,
    request_id: str | None = None,
) -> Response:
    service = service_of(request)
    inputs = service.inputs(request_id, item=item, work_seconds=0.0)

    async def lines() -> AsyncIterator[str]:
        service.in_flight += 1
        try:
            async with service.rows_plan.open(inputs=inputs) as values:
                session: web_graph.Session = values["session"]  # alive until the block exits
                for number in range(1, count + 1):
                    yield f"{number} x {item} = {number * session.price(item):.2f}\n"
                    await asyncio.sleep(pace)
        finally:
            service.in_flight -= 1

    return ClosingStreamingResponse(lines(), media_type="text/plain")


@app.get("/ledger")
async def ledger(request: Request) -> dict[str, Any]:
    service = service_of(request)
    return {
        **service.ledger.snapshot(),
        "in_flight": service.in_flight,
        "clients_left": service.clients_left,
    }
