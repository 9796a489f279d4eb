"""Data versions and result files of ``Driver(..., cache=)``, in pieces (docs/caching.md).

The cache's threads (``caching.executor``) fingerprint, write and read values; the event
loop waits for the interpreter lock whenever one of them holds it. Hamilton's own calls hold
it through whole values: ``pickle.dumps`` / ``pickle.loads`` copy a 50 MB value in one call
(``FileResultStore.set`` / ``get``), ``fingerprinting.hash_value`` copies an array
(``tobytes``) and builds a dict of a data frame's rows (``to_dict``) in one call each. Here
the same data versions and the same files are made in pieces of at most ``CHUNK`` bytes,
with the lock let go between pieces:

* ``data_version``: Hamilton's ``hash_value``, its own result for every value; ``bytes``,
  contiguous arrays and data frames (and series) with a unique index are hashed in pieces
  (the same digest, over the same bytes or the same rows in the same order).
* ``write_result`` / ``read_result``: the file Hamilton's ``FileResultStore`` writes and
  reads (one pickle of the value, read by ``pickle.loads``), written by ``pickle.dump`` and
  read by ``pickle.load`` through a file that moves large buffers in pieces straight
  between the value's memory and the file (protocol 5: an array's or a frame's buffers go
  in-band, without the copy protocol 4 makes).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

CHUNK: Final = 1 << 20
"""The most bytes hashed, written or read in one call while the interpreter lock is free."""

PROTOCOL: Final = 5
"""Pickle protocol of the files written here; ``pickle.loads`` (Hamilton's read) reads it."""


def data_version(value: Any) -> str:
    """Hamilton's data version of ``value`` (``fingerprinting.hash_value``), computed in
    pieces where Hamilton's computation holds the interpreter lock through the value."""
    from hamilton.caching import fingerprinting as fp  # type: ignore[import-untyped, unused-ignore]

    how = fp.hash_value.dispatch(type(value))
    if how is fp.hash_bytes:
        return _md5(memoryview(value).cast("B"))
    if how is fp.hash_numpy_array:
        view = _array_bytes(value)
        if view is not None:
            return _md5(view)
    elif how is fp.hash_pandas_obj:
        rows = _rows(value)
        if rows is not None:
            # Hamilton's own digest of the rows: ``hash_pandas_obj`` passes the same rows,
            # as a dict built in one call, at the same depth.
            return str(fp.hash_mapping(rows, ignore_order=False, depth=1))
    return str(fp.hash_value(value))


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


class _Rows(Mapping[Any, Any]):
    """A pandas object's row hashes as the mapping ``hash_pandas_obj`` builds with
    ``to_dict()``: the same pairs in the same order, produced one at a time."""

    __slots__ = ("_hashed",)

    def __init__(self, hashed: Any) -> None:
        self._hashed = hashed

    def items(self) -> Any:
        return self._hashed.items()

    def __getitem__(self, key: Any) -> Any:
        return self._hashed[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._hashed.index)

    def __len__(self) -> int:
        return len(self._hashed)


def _rows(frame: Any) -> _Rows | None:
    """The row hashes of a pandas object, when its index makes ``to_dict()`` keep every row
    in order (unique integer, date or string labels); else ``None``."""
    from pandas.util import hash_pandas_object  # type: ignore[import-untyped, unused-ignore]

    hashed = hash_pandas_object(frame)
    index = hashed.index
    if not index.is_unique:
        return None  # to_dict() keeps one row per label
    kind = index.dtype.kind
    if kind in "iumM" or (kind == "O" and index.inferred_type == "string"):
        return _Rows(hashed)
    return None  # labels that may compare equal across types (1 and 1.0 and True)


class _Writer:
    """What ``pickle.dump`` writes to: every buffer goes to the file in pieces."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        size = view.nbytes
        done = 0
        while done < size:
            written = self._raw.write(view[done : done + CHUNK])
            if not written:
                raise OSError(f"writing the cache's result file wrote nothing at byte {done}")
            done += written
        return size


class _Reader:
    """What ``pickle.load`` reads from: large buffers are read into in pieces."""

    __slots__ = ("_file", "peek", "read", "readline")

    def __init__(self, file: Any) -> None:
        self._file = file
        self.read = file.read
        self.readline = file.readline
        self.peek = file.peek

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        size = view.nbytes
        done = 0
        while done < size:
            got = self._file.readinto(view[done : done + CHUNK])
            if not got:
                break  # the end of the file: the unpickler says the pickle is cut short
            done += got
        return done


def write_result(path: Path, value: Any) -> None:
    """Write ``value`` as Hamilton's ``FileResultStore.set`` does (one pickle of it, no
    saver), in pieces. A write that fails leaves no file."""
    try:
        with open(path, "wb", buffering=0) as raw:
            pickle.dump(value, _Writer(raw), protocol=PROTOCOL)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def read_result(path: Path) -> Any:
    """The value in a file of Hamilton's ``FileResultStore`` (as its ``get``: a pickled
    value, or a pickled ``DataLoader`` of a ``@cache(format=...)`` node, then loaded)."""
    from hamilton.io.data_adapters import DataLoader  # type: ignore[import-untyped, unused-ignore]

    with open(path, "rb") as file:
        loaded = pickle.load(_Reader(file))
    if isinstance(loaded, DataLoader):
        loaded, _metadata = loaded.load_data(None)
    return loaded
