"""Retries, timeouts and dependency-ordered shutdown for Apache Hamilton graphs on asyncio.

Decorate ordinary Hamilton functions with :func:`execution` and :func:`shutdown`, compile
modules with :class:`Driver`, and ``await`` the prepared plan inside your own event loop.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._declarations import Acquisition, execution, shutdown
from ._failures import ExecutionError, RetryableException, failures
from ._hamilton.driver import Driver
from ._latency import Latency
from ._observe import NodeReport, RunEvent, RunReport
from ._plan import PreparedPlan
from ._resilience import Bulkhead, BulkheadFull, CircuitBreaker, CircuitOpen, RetryBudget

try:
    __version__: str = _metadata.version("sdax-hamilton")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
    __version__ = "0+uninstalled"

__all__ = [
    "Acquisition",
    "Bulkhead",
    "BulkheadFull",
    "CircuitBreaker",
    "CircuitOpen",
    "Driver",
    "ExecutionError",
    "Latency",
    "NodeReport",
    "PreparedPlan",
    "RetryBudget",
    "RetryableException",
    "RunEvent",
    "RunReport",
    "__version__",
    "execution",
    "failures",
    "shutdown",
]
