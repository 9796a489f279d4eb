"""Pieces of error messages built from user data, bounded and safe (docs/errors.md).

Every message that echoes names the user passed (input keys, outputs, overrides, targets)
builds them here, so that:

* a long list is shortened with a count (``['a', 'b', … and 999,990 more]``);
* a long name is cut, with its length (``'aaaa…' (52,428,800 characters)``);
* no user code runs: a key is shown by its ``str`` value when it is a ``str`` (a subclass's
  ``__repr__`` is not called), otherwise by its type's name;
* close matches are suggested with :mod:`difflib`, over a bounded amount of work.

Only error paths call these helpers.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Iterable, Sequence

__all__ = [
    "MAX_LISTED",
    "MAX_NAME",
    "did_you_mean",
    "name",
    "names",
    "plain",
    "type_name",
    "unknown",
]

MAX_LISTED = 10
"""Names shown from a list before the rest is counted."""

MAX_NAME = 80
"""Characters shown of one name before it is cut."""

_MAX_SUGGESTED_FROM = 100_000
"""Known names a suggestion is searched among (beyond that, none is offered)."""


def plain(key: object) -> str | None:
    """``key`` as a plain ``str`` when it is a ``str`` (subclasses included, without calling
    any of their methods), else ``None``."""
    if type(key) is str:
        return key
    if issubclass(type(key), str):
        return str.__str__(key)
    return None


def type_name(obj: object) -> str:
    """The name of ``obj``'s type, never raising (a metaclass may make ``__name__`` lie)."""
    try:
        found = type(obj).__qualname__
    except Exception:
        return "object"
    return found if type(found) is str and len(found) <= MAX_NAME else "object"


def name(value: object) -> str:
    """One name for a message: a ``str`` quoted (``'rows'``), cut past :data:`MAX_NAME`
    characters with its length given; anything else as ``<a key of type T>``."""
    text = plain(value)
    if text is None:
        return f"<a key of type {type_name(value)}>"
    if len(text) <= MAX_NAME:
        return repr(text)
    return f"{text[:MAX_NAME]!r}… ({len(text):,} characters)"


def names(values: Iterable[object], *, sort: bool = True) -> str:
    """A list of names for a message: ``['a', 'b']``, at most :data:`MAX_LISTED` of them,
    then ``… and N more``. ``str`` names come first, the smallest ones when ``sort`` (others
    follow in the given order); linear in the number of names."""
    items = list(values)
    if sort:
        texts: list[str] = []
        others: list[object] = []
        for item in items:
            text = plain(item)
            if text is None:
                others.append(item)
            else:
                texts.append(text)
        head: list[object] = [*heapq.nsmallest(MAX_LISTED, texts)]
        head += others[: MAX_LISTED - len(head)]
    else:
        head = items[:MAX_LISTED]
    shown = ", ".join(name(item) for item in head)
    rest = len(items) - len(head)
    if rest > 0:
        shown += f", … and {rest:,} more"
    return f"[{shown}]"


def did_you_mean(wrong: object, known: Iterable[str]) -> str:
    """`` (did you mean 'rows'?)`` when ``known`` holds close matches of ``wrong``, else
    ``""``. Long names and huge candidate sets get no suggestion (bounded work)."""
    return _did_you_mean(_matches(wrong, known))


def _did_you_mean(matches: Sequence[str]) -> str:
    return f" (did you mean {_either(matches)}?)" if matches else ""


def _matches(wrong: object, known: Iterable[str]) -> list[str]:
    text = plain(wrong)
    if text is None or not text or len(text) > MAX_NAME:
        return []
    candidates: Sequence[str] = [
        item for item in known if type(item) is str and 0 < len(item) <= MAX_NAME
    ]
    if len(candidates) > _MAX_SUGGESTED_FROM:
        return []
    matches = difflib.get_close_matches(text, candidates, n=3, cutoff=0.6)
    return [match for match in matches if match != text]


def unknown(wrong: Sequence[object], known: Iterable[str]) -> str:
    """``['zz'] (did you mean 'z'?)``: names not found as a list (bounded), then close
    matches among ``known`` for the first :data:`MAX_LISTED` of them, each naming the name
    it is for when several were not found."""
    candidates = list(known)
    found = []
    for item in wrong[:MAX_LISTED]:
        matches = _matches(item, candidates)
        if matches:
            found.append((item, matches))
    listed = names(wrong)
    if not found:
        return listed
    if len(wrong) == 1:
        return listed + _did_you_mean(found[0][1])
    parts = [f"{_either(matches)} for {name(item)}" for item, matches in found]
    return f"{listed} (did you mean {'; '.join(parts)}?)"


def _either(matches: Sequence[str]) -> str:
    return " or ".join(repr(match) for match in matches)
