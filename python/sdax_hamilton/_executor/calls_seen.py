"""What the parts the run's ``calls.Calls`` holds read of it (a protocol module).

``Calls`` makes its parts (the guards, the hedged rounds, the cancellations) and hands them
itself; each part states what it uses of ``Calls`` as a ``Protocol`` built on ``CallsSeen``,
the members they all read, so that no part imports ``calls`` (which imports them: the
package's imports have no cycle, tests/test_import_graph.py).
"""

from __future__ import annotations

from typing import Protocol

from .. import _core
from .attempts import AttemptTable
from .jobs import JobTable
from .reporter import Reporter


class CallsSeen(Protocol):
    """The run's ``Calls`` as its parts read it: its tables, its core ``Run``, whether
    attempts are watched and which were clipped, and its reporter."""

    @property
    def table(self) -> AttemptTable: ...
    @property
    def run(self) -> _core.Run: ...
    @property
    def jobs(self) -> JobTable: ...
    @property
    def clipped(self) -> list[int] | None: ...
    @property
    def watching(self) -> bool: ...
    def report(self) -> Reporter: ...
