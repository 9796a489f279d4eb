"""sdax_hamilton.contrib.fastapi outside a server: what a misuse says. The helpers' behaviour
under a real uvicorn is tests/test_web_service.py's.

No ``from __future__ import annotations``: FastAPI reads the handlers' annotations, which
name local dependencies."""

import importlib
import sys
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, FastAPI

from sdax_hamilton import Driver, PreparedPlan
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
