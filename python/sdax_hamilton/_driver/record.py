"""The failure record of one run: which exception is the primary, which are secondary.

Pure bookkeeping, no event loop: the rules of docs/lifecycle.md ("Failures: primary and
secondary", "Cancellation") in one place, so they can be tested on their own
(tests/test_failure_record.py).
"""

from __future__ import annotations

import asyncio
from typing import Final

from .._failures import attach_failures, failure_group

_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class FailureRecord:
    """The primary failure of a run (what the caller gets) and the secondary ones.

    The primary is raised as the same object, with the secondary ones attached; with no
    primary, the secondary ones become an ``ExecutionError`` (or a ``BaseExceptionGroup``).
    """

    __slots__ = ("clean", "primary", "secondary")

    def __init__(self) -> None:
        self.clean = True
        """Nothing failed (yet). An attribute, not a property: the run reads it on its hot
        path."""
        self.primary: BaseException | None = None
        self.secondary: list[BaseException] = []

    def body_raised(self, exc: BaseException) -> None:
        """The ``open()`` body raised: its exception is the primary (forward phase was clean
        or the body would not have run)."""
        self.clean = False
        self.primary = exc

    def caller_cancelled(self, exc: BaseException, shutdown: bool) -> None:
        """The caller's task was cancelled: the primary, absorbed, a secondary or a demotion.

        The first cancellation becomes the primary; later ones are absorbed. During cleanup
        a cancellation demotes an earlier primary (a body exception) to secondary, except
        a process termination (``KeyboardInterrupt``/``SystemExit``), which stays primary.
        """
        self.clean = False
        primary = self.primary
        if primary is None:
            self.primary = exc
        elif isinstance(primary, asyncio.CancelledError):
            return
        elif isinstance(primary, _TERMINATION) or not shutdown:
            # In the forward phase any earlier primary is a termination (a caller
            # exception can only arrive in the body, which runs after it).
            self.secondary.append(exc)
        else:
            self.secondary.append(primary)
            self.primary = exc

    def terminate(self, exc: BaseException) -> None:
        """A ``KeyboardInterrupt`` / ``SystemExit`` out of a node, release or observer: the
        first one is the primary, whatever was there before (that becomes secondary)."""
        self.clean = False
        primary = self.primary
        if primary is None:
            self.primary = exc
        elif isinstance(primary, _TERMINATION):
            self.secondary.append(exc)
        else:
            self.secondary.append(primary)
            self.primary = exc

    def failed(self, exc: BaseException) -> None:
        """A node or release failed for good with ``exc``."""
        if isinstance(exc, _TERMINATION):
            self.terminate(exc)
        else:
            self.clean = False
            self.secondary.append(exc)

    def outcome(self) -> BaseException | None:
        """What the run raises: the primary with the secondary ones attached, else a group
        of the secondary ones, else ``None``."""
        primary = self.primary
        if primary is not None:
            if self.secondary:
                try:
                    attach_failures(primary, self.secondary)
                except BaseException as hostile:  # the primary's own ``add_note`` raised
                    if not isinstance(hostile, _TERMINATION):
                        return primary  # kept without the note
                    # A KeyboardInterrupt/SystemExit: it stops the run as out of a node.
                    self.terminate(hostile)
                    primary = self.primary
                    assert primary is not None
                    try:
                        attach_failures(primary, self.secondary)
                    except BaseException:
                        pass
            return primary
        if self.secondary:
            return failure_group(self.secondary)
        return None
