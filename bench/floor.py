"""The hand-written asyncio floor: the case's own functions awaited directly.

Layers run in topological order; a one-call layer is awaited inline and a wider layer is
``asyncio.gather``-ed. On the resources shape the releases then run layer by layer in
shutdown order (transactions, then connections), each handed the raw resource (the floor
builds no ``Acquisition`` record). No policies, no type checks, no bookkeeping: this is the
cost of the user's code plus the minimum asyncio needs to run it concurrently.

Standard library only (the ``--with-old`` worker imports it from another virtualenv).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from shapes import Call, Case

AsyncFn = Callable[..., Awaitable[Any]]
Layer = tuple[tuple[str, AsyncFn, tuple[tuple[str, str], ...]], ...]


# Keyword names are interned so that CPython matches them to parameters by identity: with
# fresh (equal but distinct) strings a call with n keywords costs O(n^2) string compares,
# 57 ms instead of 2 ms for the 4,000-parameter join of the wide fan-out.
def _resolve(module: ModuleType, layers: tuple[tuple[Call, ...], ...]) -> tuple[Layer, ...]:
    return tuple(
        tuple(
            (c.name, getattr(module, c.name), tuple((sys.intern(p), k) for p, k in c.params))
            for c in layer
        )
        for layer in layers
    )


class Floor:
    """``await floor.execute()`` runs the case once and returns its requested outputs."""

    def __init__(self, case: Case, module: ModuleType) -> None:
        self._inputs = dict(case.inputs)
        self._outputs = case.outputs
        self._layers = _resolve(module, case.layers)
        self._release_layers = _resolve(module, case.release_layers)

    async def _run(self, layers: tuple[Layer, ...], values: dict[str, Any]) -> None:
        for layer in layers:
            if len(layer) == 1:
                name, fn, params = layer[0]
                values[name] = await fn(**{p: values[k] for p, k in params})
            else:
                results = await asyncio.gather(
                    *(fn(**{p: values[k] for p, k in params}) for _, fn, params in layer)
                )
                for (name, _, _), result in zip(layer, results, strict=True):
                    values[name] = result

    async def execute(self) -> dict[str, Any]:
        values: dict[str, Any] = dict(self._inputs)
        await self._run(self._layers, values)
        result = {name: values[name] for name in self._outputs}
        if self._release_layers:
            await self._run(self._release_layers, values)
        return result
