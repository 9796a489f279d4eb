"""Exception types and the primary/secondary failure record (docs/contract.md#diagnostics,
#outcomes).

A run keeps one *primary* exception (what the caller sees) and collects *secondary*
diagnostics: the original exception objects raised by nodes and releases, cancellations of
releases, shutdown-result faults and a replaced earlier primary. Secondaries are attached to
the primary by identity (never copied) and read back with :func:`failures`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from . import _messages

__all__ = [
    "DIAGNOSTICS_NOTE",
    "ExecutionError",
    "RetryableException",
    "add_note_once",
    "attach_failures",
    "failures",
    "failure_group",
]

DIAGNOSTICS_NOTE = "Additional execution/cleanup diagnostics: sdax_hamilton.failures(exception)"
"""The note added to a primary exception when secondary diagnostics were attached."""

_ATTRIBUTE = "_sdax_hamilton_failures"
"""Where the attached diagnostics live on the primary exception object."""


class RetryableException(Exception):
    """Raise (or subclass) this to ask for a retry under the default retryable set."""


class ExecutionError(ExceptionGroup[Exception]):
    """A run failed and no caller-side exception is primary.

    One level: the leaves are the original exception objects raised by nodes and releases,
    each carrying a note that names the node and the attempts made.
    """

    def derive(self, excs: Sequence[Exception]) -> ExecutionError:  # type: ignore[override]
        # ``except*`` and ``split``/``subgroup`` keep the class (the leaves stay originals),
        # and the first line names the failures the part holds, when the leaves say which.
        return ExecutionError(
            failure_message(excs) if failed_subjects(excs) else self.message, excs
        )


def failures(exc: object) -> tuple[BaseException, ...]:
    """Return the secondary diagnostics attached to ``exc`` by this package, or ``()``.

    Works on any object: something that is not an exception, or an exception to which
    nothing was attached, gives ``()``.
    """
    if not isinstance(exc, BaseException):
        return ()
    try:
        found = exc.__dict__.get(_ATTRIBUTE)
    except Exception:  # an exotic subclass without a usable __dict__
        return ()
    return found if type(found) is tuple else ()


def add_note_once(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc`` unless the exact same note is already there."""
    notes: Any = getattr(exc, "__notes__", None)
    if type(notes) is list and note in notes:
        return
    exc.add_note(note)


def attach_failures(primary: BaseException, items: Iterable[BaseException]) -> None:
    """Append ``items`` to the diagnostics of ``primary``.

    De-duplicates by identity, skips ``primary`` itself, keeps the original objects, and adds
    :data:`DIAGNOSTICS_NOTE` once, only when something was attached.

    Never raises: the primary is re-raised as the same object afterwards, so an exception
    that refuses the note (its ``__notes__`` is not a list, or ``add_note`` is broken) keeps
    its diagnostics without the note, and one whose ``__setattr__`` refuses the attribute
    gets it stored past that ``__setattr__``.
    """
    current = failures(primary)
    seen = {id(item) for item in current}
    seen.add(id(primary))
    added: list[BaseException] = []
    for item in items:
        key = id(item)
        if key in seen:
            continue
        seen.add(key)
        added.append(item)
    if not added:
        return
    collected = current + tuple(added)
    try:
        setattr(primary, _ATTRIBUTE, collected)
    except Exception:  # a __setattr__ that refuses (e.g. a frozen dataclass exception)
        try:
            object.__setattr__(primary, _ATTRIBUTE, collected)
        except Exception:  # pragma: no cover - every BaseException has a __dict__
            return
    try:
        add_note_once(primary, DIAGNOSTICS_NOTE)
    except Exception:  # __notes__ set to something that is not a list: skip the note
        pass


_FAILED_NOTE = re.compile(r"sdax_hamilton: ((?:node|release of) '.*') failed (?:after|before) ")
"""The note the driver adds to what a node or release raised for good (docs/lifecycle.md,
"Failures: primary and secondary"): ``sdax_hamilton: node 'fetch' failed after 3 attempts``."""


def failed_subjects(leaves: Iterable[BaseException]) -> list[str]:
    """``node 'fetch' (TimeoutError)``, ``release of 'conn' (OSError)``: what each leaf's note
    says failed, with the leaf's type, in order, each once (a leaf without such a note names
    nothing)."""
    subjects: dict[str, None] = {}
    for leaf in leaves:
        try:
            notes = leaf.__dict__.get("__notes__")
        except Exception:  # an exotic subclass without a usable __dict__
            continue
        if type(notes) is not list:
            continue
        for note in notes:
            if type(note) is str and (found := _FAILED_NOTE.match(note)) is not None:
                subject = f"{_bounded(found.group(1))} ({_messages.type_name(leaf)})"
                subjects.setdefault(subject, None)
                break
    return list(subjects)


def failure_message(leaves: Sequence[BaseException]) -> str:
    """The first line of a failed run's group: which nodes and releases failed, with what
    (at most a few named, the rest counted)."""
    subjects = failed_subjects(leaves)
    if not subjects:
        return "sdax_hamilton execution failed"
    named = ", ".join(subjects[: _messages.MAX_LISTED])
    rest = len(subjects) - _messages.MAX_LISTED
    if rest > 0:
        named += f", … and {rest:,} more"
    return f"sdax_hamilton execution failed: {named}"


def _bounded(subject: str) -> str:
    """A subject with an overlong name cut (the note quotes the name in full)."""
    limit = _messages.MAX_NAME + 20
    if len(subject) <= limit:
        return subject
    return f"{subject[:limit]}… ({len(subject):,} characters)"


def failure_group(collected: Sequence[BaseException]) -> BaseException:
    """Build the group a failed run raises when no caller-side exception is primary.

    ``ExecutionError`` (one level, original leaves) when every leaf is an ``Exception``;
    otherwise (for example a node's own ``CancelledError``) a plain ``BaseExceptionGroup``.
    Its first line names the failed nodes and releases. The caller raises the returned
    object.
    """
    leaves: list[BaseException] = []
    seen: set[int] = set()
    for item in collected:
        if id(item) not in seen:
            seen.add(id(item))
            leaves.append(item)
    message = failure_message(leaves)
    ordinary = [leaf for leaf in leaves if isinstance(leaf, Exception)]
    if len(ordinary) == len(leaves):
        return ExecutionError(message, ordinary)
    return BaseExceptionGroup(message, leaves)
