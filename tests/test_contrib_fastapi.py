"""sdax_hamilton.contrib.fastapi in process (httpx's ASGI transport): what a misuse says,
and run_values' order of run, handler and releases. The helpers under a real uvicorn, with
clients that leave: tests/test_web_service.py.

No ``from __future__ import annotations``: FastAPI reads the handlers' annotations, which
name local dependencies."""

import importlib
import sys
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse

from sdax_hamilton import Driver, ExecutionError, PreparedPlan
from sdax_hamilton.contrib.fastapi import Startup, run_values


async def test_a_startup_dependency_without_its_lifespan_says_what_to_pass() -> None:
    startup = Startup(lambda: "built")
    app = FastAPI()  # lifespan=startup.lifespan forgotten

    @app.get("/")
    async def root(value: Annotated[str, Depends(startup)]) -> str:
        return value

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with pytest.raises(RuntimeError, match=r"lifespan=startup\.lifespan"):
            await client.get("/")


async def test_each_application_gets_its_own_build_once() -> None:
    builds: list[int] = []

    def build() -> int:
        builds.append(len(builds))
        return len(builds)

    startup = Startup(build)
    apps = [FastAPI(lifespan=startup.lifespan) for _ in range(2)]
    for app in apps:

        @app.get("/")
        async def root(value: Annotated[int, Depends(startup)]) -> int:
            return value

    async with startup.lifespan(apps[0]), startup.lifespan(apps[1]):
        for number, app in enumerate(apps, 1):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert [(await client.get("/")).json() for _ in range(3)] == [number] * 3
    assert builds == [0, 1]


def test_misuses_are_refused_early(make_module: Any) -> None:
    with pytest.raises(TypeError, match="needs a callable"):
        Startup("not callable")  # type: ignore[arg-type]
    plan = Driver(make_module("def x() -> int:\n    return 1\n")).prepare(["x"])

    def the_plan() -> PreparedPlan:
        return plan

    with pytest.raises(ValueError, match="positive"):
        run_values(the_plan, dict, timeout=0)


def test_importing_without_fastapi_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name in ("fastapi", "starlette") or name.startswith(("fastapi.", "starlette.")):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.delitem(sys.modules, "sdax_hamilton.contrib.fastapi", raising=False)
    with pytest.raises(ImportError, match=r"sdax-hamilton\[fastapi\]") as info:
        importlib.import_module("sdax_hamilton.contrib.fastapi")
    assert isinstance(info.value.__cause__, ImportError)


RESOURCE = """
from sdax_hamilton import Acquisition, shutdown


class Handle:
    def __init__(self, log: list) -> None:
        self.log = log
        log.append("opened")


def handle(log: list) -> Handle:
    return Handle(log)


@shutdown(of=handle)
def close(acquired: Acquisition[Handle]) -> None:
    acquired.value.log.append("closed")


def price(handle: Handle, item: str) -> float:
    if item == "caviar":
        raise LookupError(item)
    handle.log.append("priced")
    return 2.5
"""


async def test_run_values_yields_the_outputs_and_releases_after_the_handler(
    make_module: Any,
) -> None:
    log: list[str] = []
    plan = Driver(make_module(RESOURCE)).prepare(["handle", "price"])

    def the_plan() -> PreparedPlan:
        return plan

    def inputs(item: str) -> dict[str, Any]:
        return {"item": item, "log": log}

    app = FastAPI()

    @app.exception_handler(ExecutionError)
    async def failed(request: Any, error: ExecutionError) -> JSONResponse:
        return JSONResponse({"failed": [type(e).__name__ for e in error.exceptions]}, 404)

    @app.get("/price/{item}")
    async def price(
        values: Annotated[dict[str, Any], Depends(run_values(the_plan, inputs))],
    ) -> float:
        assert log[-1] == "priced"  # the run's resource is still open in the handler
        value: float = values["price"]
        return value

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/price/apple")).json() == 2.5
        assert log == ["opened", "priced", "closed"]
        response = await client.get("/price/caviar")
    assert (response.status_code, response.json()) == (404, {"failed": ["LookupError"]})
    assert log == ["opened", "priced", "closed", "opened", "closed"]
