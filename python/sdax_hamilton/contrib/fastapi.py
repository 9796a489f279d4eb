"""FastAPI helpers for serving runs (needs ``fastapi``: ``pip install 'sdax-hamilton[fastapi]'``).

docs/web.md walks through them; examples/web_service.py uses each:

* :class:`Startup`: the lifespan pattern. ``Driver(...)`` and ``prepare()`` run once, when
  the application starts; handlers get what was built through a dependency.
* :func:`cancelled_when_client_leaves`: cancel a handler's run when its client disconnects
  (uvicorn does not), so its resources are released now rather than after a run for nobody.
* :class:`ClosingStreamingResponse`: a streaming response that closes its body generator
  itself, so an ``open()`` run the generator is suspended in is released when the stream
  ends or the client leaves.
* :func:`run_values`: a dependency that opens a run and yields its outputs to the handler;
  the run's releases happen once the response has been sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

try:
    from fastapi import Depends, Request
    from fastapi.responses import StreamingResponse
    from starlette.types import Receive, Scope, Send
except ImportError as missing:  # pragma: no cover - exercised with the package hidden
    raise ImportError(
        "sdax_hamilton.contrib.fastapi needs the 'fastapi' package "
        "(pip install 'sdax-hamilton[fastapi]')"
    ) from missing

from .._observe import Observer
from .._plan import PreparedPlan

__all__ = [
    "ClientLeft",
    "ClosingStreamingResponse",
    "Startup",
    "cancelled_when_client_leaves",
    "run_values",
]

S = TypeVar("S")


class Startup(Generic[S]):
    """What a service builds once, at startup, and a dependency that hands it to handlers.

    ``build`` is called once by :meth:`lifespan` (pass ``lifespan=startup.lifespan`` to
    ``FastAPI``); it typically calls ``Driver(...)`` and ``prepare()``, so a declaration
    error stops the service at startup instead of failing its first request. A
    ``PreparedPlan`` serves any number of concurrent runs. The instance itself is the
    dependency::

        startup = Startup(Service)  # Service() prepares the plans
        app = FastAPI(lifespan=startup.lifespan)

        @app.get("/price/{item}")
        async def price(item: str, service: Annotated[Service, Depends(startup)]) -> ...:
            return await service.price_plan.execute(inputs={"item": item})

    What was built is kept in ``app.state`` (one instance can serve several applications,
    each with its own build).
    """

    __slots__ = ("_build", "_key")

    def __init__(self, build: Callable[[], S]) -> None:
        if not callable(build):
            raise TypeError(f"Startup() needs a callable, not {type(build).__name__}")
        self._build = build
        self._key = f"sdax_hamilton_startup_{id(self):x}"

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The application's lifespan: build once on startup, drop it on shutdown."""
        setattr(app.state, self._key, self._build())
        try:
            yield
        finally:
            delattr(app.state, self._key)

    def __call__(self, request: Request) -> S:
        """The dependency: what :meth:`lifespan` built for the request's application."""
        try:
            built: S = getattr(request.app.state, self._key)
        except AttributeError:
            raise RuntimeError(
                "nothing was built at startup: pass lifespan=startup.lifespan to FastAPI(...) "
                "(and run the server with its lifespan on)"
            ) from None
        return built


class ClientLeft(Exception):
    """The client disconnected before the response was ready (see
    :func:`cancelled_when_client_leaves`); a handler may answer 499, nobody reads it."""


@contextlib.asynccontextmanager
async def cancelled_when_client_leaves(request: Request) -> AsyncIterator[None]:
    """Cancel the body when the client disconnects, and raise :class:`ClientLeft` then.

    It works the way ``asyncio.timeout`` does: a small task watches the request's ASGI
    ``receive`` channel for ``http.disconnect`` and cancels the handler's task; the block
    takes that cancellation back (``uncancel()``) and raises ``ClientLeft``, so any other
    cancellation still propagates as ``CancelledError``. A run cancelled this way stops its
    nodes and releases what it acquired before the exception reaches the handler.

    uvicorn does not cancel a handler whose client went away; without this, the run would go
    on to its end, holding its resources, for nobody. Use it around ``execute()`` (for a
    request whose body the handler has already read, or that has none).
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("cancelled_when_client_leaves() must be entered in a task")
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


class ClosingStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` that closes its body generator itself, in the request's task.

    When the client leaves, Starlette stops iterating and may leave the generator suspended
    at a ``yield`` inside ``plan.open()``; only closing it runs the ``async with`` exit (and
    so the run's releases) now, rather than whenever the generator is garbage-collected::

        async def lines() -> AsyncIterator[str]:
            async with plan.open(inputs=...) as values:
                for row in values["rows"]:
                    yield row

        return ClosingStreamingResponse(lines(), media_type="text/plain")
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


def run_values(
    plan: Callable[..., PreparedPlan],
    inputs: Callable[..., Mapping[str, Any]],
    *,
    overrides: Callable[..., Mapping[str, Any]] | None = None,
    observer: Observer | Sequence[Observer] | None = None,
    timeout: float | None = None,
) -> Callable[..., AsyncIterator[dict[str, Any]]]:
    """A dependency (``Depends(run_values(...))``) that yields the outputs of an ``open()``
    run; the run's releases happen after the response has been sent.

    ``plan`` and ``inputs`` (and ``overrides``) are dependencies themselves, resolved by
    FastAPI for each request: ``plan`` returns the ``PreparedPlan`` (from a
    :class:`Startup`, say), ``inputs`` the run's inputs from the request's parameters.
    ``observer`` and ``timeout`` are passed to ``open()``. A failed run raises its
    ``ExecutionError`` out of the dependency (register an exception handler to answer it).
    """
    if timeout is not None and (isinstance(timeout, bool) or timeout <= 0):
        raise ValueError(f"run_values(timeout=...) must be a positive number, not {timeout!r}")

    async def values(
        prepared: PreparedPlan, given: Mapping[str, Any], replaced: Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        async with prepared.open(
            inputs=given, overrides=replaced or None, observer=observer, timeout=timeout
        ) as outputs:
            yield outputs

    # FastAPI reads the dependencies from the signature; built here, as the three
    # dependencies are only known now.
    values.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=Depends(dependency),
            )
            for name, dependency in (
                ("prepared", plan),
                ("given", inputs),
                ("replaced", overrides or _no_overrides),
            )
        ]
    )
    return values


def _no_overrides() -> dict[str, Any]:
    return {}
