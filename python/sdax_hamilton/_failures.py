"""Exception types and the primary/secondary failure record (SPEC 4, 7.11)."""

from __future__ import annotations


class RetryableException(Exception):
    """Raise (or subclass) this to ask for a retry under the default retryable set."""


class ExecutionError(ExceptionGroup):  # type: ignore[type-arg]  # noqa: N818
    """A run failed and no caller-side exception is primary.

    One level: the leaves are the original exception objects raised by nodes and releases,
    each carrying a note that names the node and the attempts made.
    """
