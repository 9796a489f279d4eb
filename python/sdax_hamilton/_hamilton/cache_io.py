"""Data versions and result files of ``Driver(..., cache=)``, in pieces (docs/caching.md).

The cache's threads (``caching.executor``) fingerprint, write and read values; the event
loop waits for the interpreter lock whenever one of them holds it. Hamilton's own calls hold
it through whole values: ``pickle.dumps`` / ``pickle.loads`` copy a 50 MB value in one call
(``FileResultStore.set`` / ``get``), ``fingerprinting.hash_value`` copies an array
(``tobytes``) and builds a dict of a data frame's rows (``to_dict``) in one call each. Here
the same data versions and the same files are made in pieces of at most ``CHUNK`` bytes,
with the lock let go between pieces:

* ``data_version``: Hamilton's ``hash_value``, its own result for every value; ``bytes``,
  ``str``, contiguous arrays and data frames (and series) with a unique index are hashed in
  pieces (the same digest, over the same bytes or the same rows in the same order), and a
  ``list`` or ``tuple`` is hashed as Hamilton hashes a sequence, over its items' data
  versions computed the same way.
* ``write_result`` / ``read_result``: the file Hamilton's ``FileResultStore`` writes and
  reads (one pickle of the value, read by ``pickle.loads``), written by ``pickle.dump`` and
  read by ``pickle.load`` through a file that moves large buffers in pieces straight
  between the value's memory and the file (protocol 5: an array's or a frame's buffers go
  in-band, without the copy protocol 4 makes), and whose ``read`` / ``write`` are Python
  code: the unpickler and the pickler call them at every frame of the pickle (64 KiB), and
  the interpreter lets the loop have the lock there when it asks for it. A large ``str``
  value is written as ``str.join`` of its pieces, and a long ``list`` value as ``list()``
  plus its items, taken from Python code a batch at a time (``_Pickler``): what
  ``pickle.loads`` makes of them is an equal ``str`` or ``list``. Read here
  (``_Unpickler``), the pieces of an ASCII ``str`` are joined by ``_core.join_ascii``, which
  copies them with the lock let go (``str.join`` holds it through 50 MB of fresh memory).
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from .. import _core

CHUNK: Final = 1 << 20
"""The most bytes hashed, written or read in one call while the interpreter lock is free."""

TEXT_PIECE: Final = CHUNK // 4
"""The most code points of a ``str`` encoded in one call (at most ``CHUNK`` bytes of UTF-8)."""

BATCH: Final = 1000
"""Items the pickler takes from a list's items between two appends (``BATCHSIZE`` of
CPython's ``pickle`` and ``_pickle``): a batch is written in one piece."""

SMALL: Final = 64
"""The longest ``str`` or ``bytes`` item counted as small (see ``_Pickler``)."""

PACE: Final = 0.0005
"""Seconds of work in the cache's Python loops between two offers of the interpreter lock
(``_Pace``): well under the interpreter's switch interval (5 ms unless the service set it)."""

PROTOCOL: Final = 5
"""Pickle protocol of the files written here; ``pickle.loads`` (Hamilton's read) reads it."""


def data_version(value: Any) -> str:
    """Hamilton's data version of ``value`` (``fingerprinting.hash_value``), computed in
    pieces where Hamilton's computation holds the interpreter lock through the value."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    kind = type(value)
    if kind is str:
        return _text_version(value)
    if kind is list or kind is tuple:
        return _item_versions()(value, 0)
    how = fp.hash_value.dispatch(kind)
    if how is fp.hash_bytes:
        return _md5(memoryview(value).cast("B"))
    if how is fp.hash_numpy_array:
        view = _array_bytes(value)
        if view is not None:
            return _md5(view)
    elif how is fp.hash_pandas_obj:
        rows = _rows(value)
        if rows is not None:
            return _rows_version(rows)
    return str(fp.hash_value(value))


def _text_version(text: str) -> str:
    """``fingerprinting.hash_primitive`` of a ``str`` (md5 of its UTF-8 encoding), encoded
    and hashed a piece at a time: the encoding of the whole is that of its pieces, one after
    the other, since a piece ends between two code points."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    digest = hashlib.md5()
    pace = _Pace()
    try:
        for start in range(0, len(text), TEXT_PIECE):
            digest.update(text[start : start + TEXT_PIECE].encode())
            pace()
    except UnicodeEncodeError:
        return str(fp.hash_value(text))  # Hamilton's own error (a lone surrogate)
    return str(fp._compact_hash(digest.digest()))


def _md5(view: memoryview) -> str:
    """``fingerprinting.hash_bytes`` of the bytes of ``view``, fed in pieces (each update
    runs without the interpreter lock)."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    digest = hashlib.md5()
    for start in range(0, view.nbytes, CHUNK):
        digest.update(view[start : start + CHUNK])
    return str(fp._compact_hash(digest.digest()))


def _array_bytes(array: Any) -> memoryview | None:
    """The bytes ``array.tobytes()`` would copy, as a view (a plain C-contiguous array of a
    dtype with a buffer format), else ``None`` (Hamilton's own computation then)."""
    import numpy

    if type(array) is not numpy.ndarray or not array.flags.c_contiguous:
        return None
    if array.dtype.hasobject:
        return None
    try:
        return array.data.cast("B")
    except (TypeError, ValueError, NotImplementedError):
        return None


def _rows(frame: Any) -> Any:
    """A pandas object's row hashes (a series), when its index makes ``to_dict()`` keep every
    row in order (unique integer, date or string labels); else ``None``."""
    from pandas.util import hash_pandas_object  # type: ignore[import-untyped, unused-ignore]

    hashed = hash_pandas_object(frame)
    index = hashed.index
    if not index.is_unique:
        return None  # to_dict() keeps one row per label
    kind = index.dtype.kind
    if kind in "iumM" or (kind == "O" and index.inferred_type == "string"):
        return hashed
    return None  # labels that may compare equal across types (1 and 1.0 and True)


def _rows_version(rows: Any) -> str:
    """``hash_pandas_obj``'s digest: Hamilton's ``hash_mapping(ignore_order=False, depth=1)``
    of the dict ``to_dict()`` makes of the row hashes, over the same pairs in the same order,
    one row at a time."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    version = _item_versions()
    digest = hashlib.sha224()
    for label, row in rows.items():
        digest.update(version(label, 2).encode())
        digest.update(version(row, 2).encode())
    return str(fp._compact_hash(digest.digest()))


def _item_versions() -> Callable[[Any, int], str]:
    """``fingerprinting.hash_value(item, depth=depth)`` for the items of a container (the
    lock offered between items): numbers and strings as Hamilton's ``hash_primitive`` (md5
    of ``str(item)``) without its dispatch, lists and tuples as its ``hash_sequence`` (sha224
    of their items' versions, in order), ``str`` and ``bytes`` in pieces."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    compact = fp._compact_hash
    md5 = hashlib.md5
    pace = _Pace()

    def version(item: Any, depth: int) -> str:
        pace()
        kind = type(item)
        if kind is int or kind is float or kind is bool:
            return str(compact(md5(str(item).encode()).digest()))
        if kind is str:
            if len(item) > TEXT_PIECE:
                return _text_version(item)
            try:
                return str(compact(md5(item.encode()).digest()))
            except UnicodeEncodeError:
                return str(fp.hash_value(item))  # Hamilton's own error (a lone surrogate)
        if kind is bytes:
            return _md5(memoryview(item))
        if kind is list or kind is tuple:
            digest = hashlib.sha224()
            for part in item:
                digest.update(version(part, depth + 1).encode())
            return str(compact(digest.digest()))
        return str(fp.hash_value(item, depth=depth))

    return version


class _Pace:
    """Called between the steps of a long loop of Python code in the cache's threads: every
    ``PACE`` seconds it lets go of the interpreter lock for a moment (``time.sleep(0)``), so
    that the loop, if it waits for the lock, takes it then rather than at the interpreter's
    switch interval."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = time.perf_counter() + PACE

    def __call__(self) -> None:
        now = time.perf_counter()
        if now >= self._next:
            time.sleep(0)
            self._next = time.perf_counter() + PACE


class _Writer:
    """What ``pickle.dump`` writes to: every buffer goes to the file in pieces."""

    __slots__ = ("_pace", "_raw")

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._pace = _Pace()

    def write(self, data: Any) -> int:
        self._pace()
        view = _bytes_of(data)
        size = view.nbytes
        done = 0
        while done < size:
            written = self._raw.write(view[done : done + CHUNK])
            if not written:
                raise OSError(f"writing the cache's result file wrote nothing at byte {done}")
            done += written
        return size


def _bytes_of(buffer: Any) -> memoryview:
    """``buffer`` as a flat view of bytes (a pickle buffer may be an array's memory)."""
    view = memoryview(buffer)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


class _Reader:
    """What ``pickle.load`` reads from: large buffers are read into in pieces, and every
    read is a call of Python code (the unpickler reads a frame, or an item larger than a
    frame, per call), where the interpreter can hand the lock to the loop."""

    __slots__ = ("_file", "_pace", "calls", "peek")

    def __init__(self, file: Any) -> None:
        self._file = file
        self._pace = _Pace()
        self.peek = file.peek
        self.calls = 0

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        self._pace()
        data: bytes = self._file.read(size)
        return data

    def readline(self) -> bytes:
        self.calls += 1
        self._pace()
        line: bytes = self._file.readline()
        return line

    def readinto(self, buffer: Any) -> int:
        view = _bytes_of(buffer)
        size = view.nbytes
        done = 0
        while done < size:
            got = self._file.readinto(view[done : done + CHUNK])
            if not got:
                break  # the end of the file: the unpickler says the pickle is cut short
            done += got
        return done


class _Unpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that joins the pieces of a large ``str`` written here (the global
    ``builtins`` ``str.join``, see ``_Pickler``) without the interpreter lock when they are
    ASCII; anything else it reads as ``pickle.load`` does."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name == "str.join":
            return _join
        return super().find_class(module, name)


def _join(separator: str, pieces: Any) -> str:
    if (
        separator == ""
        and type(pieces) is list
        and all(type(piece) is str and piece.isascii() for piece in pieces)
    ):
        return _core.join_ascii(pieces)
    return str.join(separator, pieces)


class _Items:
    """Stands for a ``list`` while it is pickled: written as ``list()`` plus its items."""

    __slots__ = ("items",)

    def __init__(self, items: Iterator[Any]) -> None:
        self.items = items


class _Text:
    """Stands for a large ``str`` while it is pickled: written as ``str.join`` of pieces."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Pickler(pickle.Pickler):
    """``pickle.Pickler`` that calls Python code between the pieces of a large value.

    The C pickler holds the interpreter lock for as long as it runs C code; the interpreter
    lets another thread have it only while Python code runs (at most every switch interval,
    ``sys.getswitchinterval()``). It runs Python here at every frame it writes
    (``_Writer.write``) and, for the two kinds of value whose pickling is mostly C code
    without frames to write, between pieces:

    * a ``str`` of more than ``TEXT_PIECE`` code points (``str`` is encoded whole in one
      call) is written as ``str.join("", [pieces])``, the pieces cut by a generator;
    * a ``list`` of more than ``BATCH`` items is written as ``list()`` followed by its
      items, which the pickler takes from a generator a batch at a time. A batch of small
      items (numbers, ``None``, ``str`` and ``bytes`` of at most ``SMALL`` characters, and
      tuples of those), none of them there twice, is written in pickle's *fast* mode: not
      entered in the table of written objects, whose growth past about a million entries
      is one call rehashing all of them. An item written so is written again where it
      recurs later in the value; read back, it is an equal, distinct object.

    Only the value itself is treated so (not a list or ``str`` inside another container).
    What ``pickle.loads`` makes of the file is a value equal to the one written.
    """

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self.pieces = 0  # Python steps taken between pieces (the tests count them)
        self._joining = False
        self._pace = _Pace()

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is _Items:
            return (list, (), None, obj.items)
        if kind is _Text:
            self._joining = True
            return (str.join, ("", _Items(self._pieces(obj.text))))
        if self._joining and obj is str.join:
            # The call a large str is written as (saved right after the _Text): the global
            # ``builtins`` ``str.join``, ``str.join`` to any reader (protocol >= 4 reads dotted
            # names). A ``str.join`` inside a value is pickled as pickle does, by
            # ``getattr(str, "join")``: only ``_Unpickler`` tells the two apart.
            self._joining = False
            return "str.join"
        return NotImplemented

    def _pieces(self, text: str) -> Iterator[str]:
        # Each piece is a new object, found nowhere else: not entered in the memo (where the
        # unpickler would keep it until the end).
        self.fast = True
        try:
            for start in range(0, len(text), TEXT_PIECE):
                self.pieces += 1
                self._pace()
                yield text[start : start + TEXT_PIECE]
        finally:
            self.fast = False

    def _items(self, stand_in: _Items, items: list[Any]) -> Iterator[Any]:
        # The stand-in has just been entered in the memo; the list itself takes its place,
        # so that the list found again inside its items is written as a reference to it.
        memo = self.memo.copy()
        index, _ = memo.pop(id(stand_in))
        memo[id(items)] = (index, items)
        self.memo = memo
        try:
            for start in range(0, len(items), BATCH):
                batch = items[start : start + BATCH]
                self.pieces += 1
                self._pace()
                self.fast = _small_and_distinct(batch)
                yield from batch
        finally:
            self.fast = False

    def dump(self, obj: Any) -> None:
        kind = type(obj)
        if kind is str and len(obj) > TEXT_PIECE:
            obj = _Text(obj)
        elif kind is list and len(obj) > BATCH:
            stand_in = _Items(iter(()))
            stand_in.items = self._items(stand_in, obj)
            obj = stand_in
        super().dump(obj)


_ATOMS: Final = frozenset({int, float, bool, type(None)})


def _small_and_distinct(batch: list[Any]) -> bool:
    """Whether every item of ``batch`` is small (see ``_Pickler``) and none is there twice."""
    seen: set[int] = set()
    for item in batch:
        kind = type(item)
        parts = item if kind is tuple else (item,)
        if kind is tuple:
            if id(item) in seen:
                return False
            seen.add(id(item))
        for part in parts:
            kind = type(part)
            if kind in _ATOMS:
                continue
            if (kind is not str and kind is not bytes) or len(part) > SMALL:
                return False
            if id(part) in seen:
                return False
            seen.add(id(part))
    return True


def write_result(path: Path, value: Any) -> None:
    """Write ``value`` as Hamilton's ``FileResultStore.set`` does (one pickle of it, no
    saver), in pieces. A write that fails leaves no file."""
    try:
        with open(path, "wb", buffering=0) as raw:
            _Pickler(_Writer(raw)).dump(value)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def read_result(path: Path) -> Any:
    """The value in a file of Hamilton's ``FileResultStore`` (as its ``get``: a pickled
    value, or a pickled ``DataLoader`` of a ``@cache(format=...)`` node, then loaded)."""
    from hamilton.io.data_adapters import DataLoader  # type: ignore[import-untyped, unused-ignore]

    with open(path, "rb") as file:
        loaded = _Unpickler(_Reader(file)).load()
    if isinstance(loaded, DataLoader):
        loaded, _metadata = loaded.load_data(None)
    return loaded
