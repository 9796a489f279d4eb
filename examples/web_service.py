"""A FastAPI service run by uvicorn: the plans are built once at startup, each request runs
one of them over a session of its own that is released when the run ends (docs/web.md).

    pip install '.[fastapi,otel]' uvicorn opentelemetry-sdk opentelemetry-exporter-prometheus
    uvicorn --app-dir examples web_service:app --port 8000
    curl 'http://127.0.0.1:8000/price/apple?quantity=3'
    curl 'http://127.0.0.1:8000/ledger'
    curl 'http://127.0.0.1:8000/metrics'

``GET /price/{item}`` awaits ``execute()``; a client that disconnects mid-run cancels it (its
session is still released). ``GET /rows/{item}`` streams lines while ``open()`` keeps the
session alive. ``GET /unit/{item}`` gets a run's values from a dependency. ``GET /ledger``
shows every session opened and closed (tests/test_web_service.py checks each is released
exactly once); ``GET /metrics`` the runs' metrics as Prometheus text.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import web_graph  # the service's Hamilton module; uvicorn's --app-dir puts it on sys.path
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from sdax_hamilton import Driver, ExecutionError, PreparedPlan
from sdax_hamilton.contrib.fastapi import (
    ClientLeft,
    ClosingStreamingResponse,
    Startup,
    cancelled_when_client_leaves,
    run_values,
)
from sdax_hamilton.contrib.opentelemetry import MetricsObserver

# The runs' metrics, served at /metrics from Prometheus' default registry (one per process).
metrics_observer = MetricsObserver(MeterProvider(metric_readers=[PrometheusMetricReader()]))


class Service:
    """What the service builds once, at startup: the plans, the ledger."""

    def __init__(self) -> None:
        driver = Driver(web_graph)  # compiles the module once
        self.price_plan: PreparedPlan = driver.prepare(["total"])
        self.rows_plan: PreparedPlan = driver.prepare(["session", "unit_price"])
        self.metrics = metrics_observer  # every run reports to it
        self.ledger = web_graph.Ledger()
        self.in_flight = 0
        self.clients_left = 0

    def inputs(self, request_id: str | None, **values: Any) -> dict[str, Any]:
        return {"request_id": request_id or uuid.uuid4().hex, "ledger": self.ledger, **values}


startup = Startup(Service)
app = FastAPI(lifespan=startup.lifespan)
Served = Annotated[Service, Depends(startup)]


@app.get("/price/{item}")
async def price(
    item: str,
    service: Served,
    request: Request,
    quantity: int = 1,
    work: float = 0.0,
    request_id: str | None = None,
) -> Response:
    inputs = service.inputs(request_id, item=item, quantity=quantity, work_seconds=work)
    service.in_flight += 1
    try:
        async with cancelled_when_client_leaves(request):
            result = await service.price_plan.execute(inputs=inputs, observer=service.metrics)
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


@app.get("/rows/{item}")
async def rows(
    item: str, service: Served, count: int = 5, pace: float = 0.0, request_id: str | None = None
) -> Response:
    inputs = service.inputs(request_id, item=item, work_seconds=0.0)

    async def lines() -> AsyncIterator[str]:
        service.in_flight += 1
        try:
            async with service.rows_plan.open(inputs=inputs, observer=service.metrics) as values:
                session: web_graph.Session = values["session"]  # alive until the block exits
                for number in range(1, count + 1):
                    yield f"{number} x {item} = {number * session.price(item):.2f}\n"
                    await asyncio.sleep(pace)
        finally:
            service.in_flight -= 1

    return ClosingStreamingResponse(lines(), media_type="text/plain")


def unit_inputs(item: str, service: Served, request_id: str | None = None) -> dict[str, Any]:
    return service.inputs(request_id, item=item, work_seconds=0.0)


def rows_plan(service: Served) -> PreparedPlan:
    return service.rows_plan


@app.get("/unit/{item}")
async def unit(
    item: str,
    values: Annotated[
        dict[str, Any], Depends(run_values(rows_plan, unit_inputs, observer=metrics_observer))
    ],
) -> dict[str, Any]:
    session: web_graph.Session = values["session"]  # released after the response is sent
    return {"item": item, "unit_price": values["unit_price"], "request_id": session.request_id}


@app.get("/ledger")
async def ledger(service: Served) -> dict[str, Any]:
    return {
        **service.ledger.snapshot(),
        "in_flight": service.in_flight,
        "clients_left": service.clients_left,
    }


@app.get("/metrics")
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
