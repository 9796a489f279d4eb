"""Large values in ``Driver(..., cache=)``: data versions, result files, pieces (docs/caching.md).

The cache fingerprints values and writes and reads Hamilton's result files in pieces
(``python/sdax_hamilton/_hamilton/cache_io.py``), so that its threads let the event loop have
the interpreter lock between pieces. What must not change is what Hamilton sees: the same
data versions and files Hamilton's own ``Builder().with_cache()`` driver reads and writes.
How long the loop waits meanwhile is measured in bench/cache.py, not here.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hamilton import driver
from hamilton.caching import fingerprinting
from test_cache import _unload, file_module  # noqa: F401  (_unload: the fixture)

from sdax_hamilton import Driver
from sdax_hamilton._hamilton import cache_io
from sdax_hamilton._hamilton.cache_io import BATCH, CHUNK, TEXT_PIECE, data_version

BIG = 3 * CHUNK + 12_345  # several pieces, and a last one cut short

VALUES: dict[str, Any] = {
    "bytes": bytes(range(256)) * (BIG // 256),
    "empty bytes": b"",
    "float array": np.arange(BIG // 8, dtype=np.float64),
    "2-d array": np.arange(600_000, dtype=np.int32).reshape(300, 2000),
    "Fortran-order array": np.asfortranarray(np.arange(600).reshape(30, 20)),
    "strided array": np.arange(1000)[::3],
    "0-d array": np.array(3.5),
    "big-endian array": np.arange(100, dtype=">f8"),
    "structured array": np.zeros(7, dtype=[("a", "i4"), ("b", "f8")]),
    "object array": np.array([1, "a", None], dtype=object),
    "datetime array": np.arange(10).astype("M8[s]"),
    "masked array": np.ma.masked_array(np.arange(5), mask=[0, 1, 0, 0, 1]),
    "frame": pd.DataFrame({"a": np.arange(50_000), "b": np.arange(50_000) * 0.5}),
    "frame, string labels": pd.DataFrame({"a": [1, 2, 3]}, index=["x", "y", "z"]),
    "frame, date labels": pd.DataFrame({"a": [1, 2]}, index=pd.date_range("2024", periods=2)),
    "frame, repeated labels": pd.DataFrame({"a": [1, 2, 3]}, index=[0, 0, 1]),
    "frame, float labels": pd.DataFrame({"a": [1, 2]}, index=[0.0, 1.5]),
    "frame, mixed labels": pd.DataFrame({"a": [1, 2, 3]}, index=[1, "1", 1.0]),
    "frame, two-level labels": pd.DataFrame(
        {"a": [1, 2]}, index=pd.MultiIndex.from_tuples([(1, "a"), (1, "b")])
    ),
    "empty frame": pd.DataFrame(),
    "series": pd.Series(np.arange(1000)),
    "list of tuples": [(i, str(i)) for i in range(1000)],
    "long list of tuples": [(i, str(i), i * 0.5, None, True) for i in range(3 * BATCH + 7)],
    "ASCII str": "abcdefghij" * (BIG // 10),
    "non-ASCII str": "aé€😀" * (TEXT_PIECE + 3),  # 1, 2, 3 and 4 bytes of UTF-8
    "str of one piece": "é" * TEXT_PIECE,
    "empty str": "",
    "list of large str and bytes": ["x" * (TEXT_PIECE + 1), b"y" * BIG, "z"],
    "nested sequences": [(1, [2.5, ("é", b"b")]), [], (), [None, {"k": [1, 2]}]],
    "tuple": (1, "a" * (TEXT_PIECE * 2), 2.5, False),
    "dict": {"a": 1, "b": [1, 2]},
    "none": None,
}


@pytest.mark.parametrize("name", list(VALUES))
def test_data_versions_are_hamiltons(name: str) -> None:
    value = VALUES[name]
    assert data_version(value) == fingerprinting.hash_value(value)


def test_a_str_hamilton_cannot_encode_fails_as_in_hamilton() -> None:
    text = "a" * TEXT_PIECE + "\ud800"  # a lone surrogate, in the second piece
    with pytest.raises(UnicodeEncodeError):
        fingerprinting.hash_value(text)
    with pytest.raises(UnicodeEncodeError):
        data_version(text)


def test_a_changed_large_value_has_another_data_version() -> None:
    array = np.arange(BIG // 8, dtype=np.float64)
    before = data_version(array)
    array[-1] += 1  # in the last piece
    assert data_version(array) != before
    frame = pd.DataFrame({"a": np.arange(10_000)})
    before = data_version(frame)
    frame.iloc[-1, 0] = -1
    assert data_version(frame) != before
    text = "a" * BIG
    assert data_version(text[:-1] + "b") != data_version(text)
    rows = [(i, str(i)) for i in range(3 * BATCH)]
    before = data_version(rows)
    rows[-1] = (0, "0")
    assert data_version(rows) != before


def _recursive() -> list[Any]:
    value: list[Any] = [(i, str(i)) for i in range(2 * BATCH)]
    value.append(value)
    value.append({"again": value})
    return value


ROUND_TRIPS: dict[str, Any] = {
    "ASCII str": VALUES["ASCII str"],
    "non-ASCII str": VALUES["non-ASCII str"],
    "str with lone surrogates": "\udc80a" * TEXT_PIECE,  # pickle writes them; md5 cannot
    "long list of small items": VALUES["long list of tuples"],
    "long list, repeated items": [("same", 1)] * (2 * BATCH) + ["a"] * BATCH,
    "long list of lists": [[i] for i in range(2 * BATCH)],
    "long list of large str": ["x" * (TEXT_PIECE + 1)] * 3 + [str(i) for i in range(BATCH)],
    "long list of mixed items": [1, "a", b"b", None, 2.5, (1, "x" * 100), {"k": 1}] * BATCH,
    "tuple": VALUES["tuple"],
}


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_large_str_and_list_values_round_trip_as_hamilton_reads_them(
    tmp_path: Path, name: str
) -> None:
    from hamilton.caching.stores.file import FileResultStore

    value = ROUND_TRIPS[name]
    store = FileResultStore(tmp_path)
    version = f"v-{name}".replace(" ", "-").replace(",", "")
    path = Path(store._path_from_data_version(version))
    cache_io.write_result(path, value)
    assert b"sdax" not in path.read_bytes()  # only builtins: read where this package is not
    ours, theirs, hamiltons = (
        cache_io.read_result(path),
        pickle.loads(path.read_bytes()),  # what Hamilton's FileResultStore.get does
        store.get(version),
    )
    for loaded in (ours, theirs, hamiltons):
        assert type(loaded) is type(value)
        assert loaded == value


def test_a_long_list_keeps_what_its_items_share(tmp_path: Path) -> None:
    path = tmp_path / "result"
    shared = ("same", 1)
    cache_io.write_result(path, [shared] * (2 * BATCH) + [["x"]] * 2)
    for loaded in (cache_io.read_result(path), pickle.loads(path.read_bytes())):
        assert all(item is loaded[0] for item in loaded[: 2 * BATCH])
        assert loaded[-1] is loaded[-2]
    cache_io.write_result(path, _recursive())
    for loaded in (cache_io.read_result(path), pickle.loads(path.read_bytes())):
        assert loaded[-2] is loaded and loaded[-1]["again"] is loaded
        assert loaded[: 2 * BATCH] == [(i, str(i)) for i in range(2 * BATCH)]


@pytest.mark.parametrize("name", ["ASCII str", "non-ASCII str", "long list of tuples"])
def test_hamiltons_files_of_str_and_list_values_are_read_here(tmp_path: Path, name: str) -> None:
    from hamilton.caching.stores.file import FileResultStore

    value = VALUES[name]
    store = FileResultStore(tmp_path)
    store.set(data_version="v", result=value)  # Hamilton's own file (pickle.dumps)
    loaded = cache_io.read_result(Path(store._path_from_data_version("v")))
    assert type(loaded) is type(value) and loaded == value


def test_join_ascii_is_str_join_of_ascii_pieces() -> None:
    from sdax_hamilton import _core

    cases = [[], [""], ["a"], ["ab", "", "cd" * 1000], ["x" * TEXT_PIECE] * 5]
    for pieces in cases:
        joined = _core.join_ascii(pieces)
        assert type(joined) is str and joined == "".join(pieces)
        assert hash(joined) == hash("".join(pieces)) and joined.isascii()
    for refused in (["a", "é"], ["a", b"b"], [1], ["a", None]):
        with pytest.raises(ValueError, match="join_ascii takes"):
            _core.join_ascii(refused)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["ASCII str", "non-ASCII str", "str of one piece"])
def test_a_large_str_is_joined_without_the_lock_when_its_pieces_are_ascii(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    joined: list[int] = []

    def join_ascii(pieces: list[str]) -> str:
        joined.append(len(pieces))
        return _core.join_ascii(pieces)

    from sdax_hamilton import _core

    monkeypatch.setattr(cache_io, "_core", types.SimpleNamespace(join_ascii=join_ascii))
    value = VALUES[name]
    path = tmp_path / "result"
    cache_io.write_result(path, value)
    loaded = cache_io.read_result(path)
    assert type(loaded) is str and loaded == value
    # Only ASCII pieces of a str written in pieces go through join_ascii; the rest, str.join.
    pieces = -(-len(value) // TEXT_PIECE)
    assert joined == ([pieces] if value.isascii() and len(value) > TEXT_PIECE else [])


def test_str_join_and_getattr_inside_a_value_stay_themselves(tmp_path: Path) -> None:
    # A large str is written as a call of the global ``str.join``, which _Unpickler reads as
    # its lock-free join; the same objects inside a value are pickled as pickle does and read
    # back as themselves, here and by Hamilton.
    path = tmp_path / "result"
    value = [str.upper, str.join, bytes.join, getattr, "x" * (TEXT_PIECE + 1)]
    cache_io.write_result(path, value)
    assert b"str.join" not in path.read_bytes()  # only the top-level str is written so
    for loaded in (cache_io.read_result(path), pickle.loads(path.read_bytes())):
        assert loaded == value and loaded[1] is str.join and loaded[3] is getattr
    cache_io.write_result(path, "y" * (TEXT_PIECE + 1))
    assert b"str.join" in path.read_bytes()


class _Offers:
    """Counts the cache's offers of the interpreter lock (``time.sleep(0)`` in
    ``cache_io``), with ``PACE`` at 0: one offer at every step of its Python loops."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        monkeypatch.setattr(cache_io, "PACE", 0.0)
        clock = types.SimpleNamespace(perf_counter=time.perf_counter, sleep=self._sleep)
        monkeypatch.setattr(cache_io, "time", clock)

    def _sleep(self, seconds: float) -> None:
        assert seconds == 0
        self.count += 1


def test_a_large_str_is_pickled_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offers = _Offers(monkeypatch)
    text = VALUES["non-ASCII str"]
    pieces = -(-len(text) // TEXT_PIECE)
    with open(tmp_path / "result", "wb", buffering=0) as raw:
        pickler = cache_io._Pickler(cache_io._Writer(raw))
        pickler.dump(text)
    assert pickler.pieces == pieces
    assert offers.count >= pieces  # Python ran between pieces, and offered the lock
    # each piece is an item of its own in the file, encoded alone
    with open(tmp_path / "result", "rb") as file:
        reader = cache_io._Reader(file)
        assert pickle.load(reader) == text
    assert reader.calls >= pieces


def test_a_long_list_is_pickled_a_batch_at_a_time_without_a_table_of_its_small_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offers = _Offers(monkeypatch)
    rows = [(i, str(i)) for i in range(20 * BATCH)]
    with open(tmp_path / "result", "wb", buffering=0) as raw:
        pickler = cache_io._Pickler(cache_io._Writer(raw))
        pickler.dump(rows)
        assert len(pickler.memo.copy()) < 10  # not 40,000 entries: its items are not in it
    assert pickler.pieces == 20
    assert offers.count >= 20
    offers.count = 0
    with open(tmp_path / "result", "rb") as file:
        reader = cache_io._Reader(file)
        assert pickle.load(reader) == rows
    frames = (tmp_path / "result").stat().st_size // (64 * 1024)
    assert frames >= 2
    assert reader.calls >= frames and offers.count >= frames  # Python at every frame


def test_data_versions_of_str_lists_and_frames_offer_the_lock_between_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    offers = _Offers(monkeypatch)
    for value, pieces in (
        (VALUES["ASCII str"], len(VALUES["ASCII str"]) // TEXT_PIECE),
        (VALUES["long list of tuples"], len(VALUES["long list of tuples"])),
        (VALUES["frame"], len(VALUES["frame"])),
    ):
        offers.count = 0
        assert data_version(value) == fingerprinting.hash_value(value)
        assert offers.count >= pieces


LARGE = """
import numpy as np
import pandas as pd

CALLS = []

def blob(n: int) -> bytes:
    CALLS.append("blob")
    return bytes(range(256)) * (n // 256)

def array(n: int) -> np.ndarray:
    CALLS.append("array")
    return np.arange(n // 8, dtype=np.float64)

def frame(array: np.ndarray) -> pd.DataFrame:
    CALLS.append("frame")
    return pd.DataFrame({"a": array, "b": array * 2})

def rows(n: int) -> list:
    CALLS.append("rows")
    return [(i, str(i)) for i in range(n // 1000)]

def text(n: int) -> str:
    CALLS.append("text")
    return "aé€😀" * (n // 4)
"""

FINAL = ["blob", "frame", "rows", "text"]
ALL = ["array", "blob", "frame", "rows", "text"]


def same(first: dict[str, Any], second: dict[str, Any]) -> None:
    assert first["blob"] == second["blob"]
    pd.testing.assert_frame_equal(first["frame"], second["frame"])
    assert first["rows"] == second["rows"]
    assert first["text"] == second["text"]


async def test_large_values_written_here_are_hits_for_hamiltons_driver(tmp_path: Path) -> None:
    module = file_module(tmp_path, LARGE)
    directory = str(tmp_path / "shared")
    ours = await Driver(module, cache=directory).prepare(FINAL).execute(inputs={"n": BIG})
    assert sorted(module.CALLS) == ALL
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    theirs = hamilton.execute(FINAL, inputs={"n": BIG})
    assert sorted(module.CALLS) == ALL  # Hamilton: all hits
    same(ours, theirs)
    # Hamilton's own store reads each file written here.
    adapter = hamilton.cache
    store = adapter.result_store
    for name in FINAL:
        version = adapter.data_versions[adapter.last_run_id][name]
        assert version == data_version(ours[name])
        assert type(store.get(version)) is type(ours[name])


async def test_large_values_written_by_hamiltons_driver_are_hits_here(tmp_path: Path) -> None:
    module = file_module(tmp_path, LARGE)
    directory = str(tmp_path / "shared")
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    theirs = hamilton.execute(FINAL, inputs={"n": BIG})
    assert sorted(module.CALLS) == ALL
    seen: list[Any] = []
    plan = Driver(module, cache=directory).prepare(FINAL)
    ours = await plan.execute(inputs={"n": BIG}, observer=seen.append)
    assert sorted(module.CALLS) == ALL  # ours: all hits
    assert {e.node for e in seen if e.kind == "cache_hit"} == set(ALL)
    same(ours, theirs)


class _Recorded:
    """A real file whose writes and reads into buffers are recorded (kind, thread, bytes)."""

    def __init__(self, file: Any, log: list[tuple[str, str, int]]) -> None:
        self._file = file
        self._log = log
        if hasattr(file, "peek"):
            self.peek = file.peek
            self.read = file.read
            self.readline = file.readline

    def write(self, data: Any) -> int:
        self._log.append(("write", threading.current_thread().name, memoryview(data).nbytes))
        return int(self._file.write(data))

    def readinto(self, buffer: Any) -> int:
        self._log.append(("read", threading.current_thread().name, memoryview(buffer).nbytes))
        return int(self._file.readinto(buffer))

    def __enter__(self) -> _Recorded:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


BLOB = """
import numpy as np

def blob(n: int) -> bytes:
    return bytes(range(256)) * (n // 256)

def array(n: int) -> np.ndarray:
    return np.arange(n // 8, dtype=np.float64)
"""


@pytest.mark.parametrize("node", ["blob", "array"])
async def test_large_values_are_written_and_read_in_pieces_in_the_cache_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str
) -> None:
    log: list[tuple[str, str, int]] = []

    def recording_open(path: Any, mode: str, buffering: int = -1) -> _Recorded:
        return _Recorded(open(path, mode, buffering), log)

    monkeypatch.setattr(cache_io, "open", recording_open, raising=False)
    module = file_module(tmp_path, BLOB)
    plan = Driver(module, cache=tmp_path / "c").prepare([node])
    stored = await plan.execute(inputs={"n": BIG})
    writes = [entry for entry in log if entry[0] == "write"]
    log.clear()
    loaded = await plan.execute(inputs={"n": BIG})  # a hit: read back from the file
    reads = [entry for entry in log if entry[0] == "read"]
    assert stored[node] is not loaded[node]
    assert bytes(stored[node]) == bytes(loaded[node])
    nbytes = memoryview(stored[node]).nbytes
    # (the first bytes the unpickler reads come with its look-ahead read of the file)
    for pieces, least in ((writes, nbytes), (reads, nbytes - CHUNK)):
        assert sum(size for _, _, size in pieces) >= least
        assert len(pieces) >= BIG // CHUNK + 1
        assert max(size for _, _, size in pieces) <= CHUNK
        assert {thread.startswith("sdax_hamilton cache") for _, thread, _ in pieces} == {True}


@pytest.mark.parametrize("node", ["blob", "array"])
async def test_hamiltons_large_files_are_read_in_pieces_in_the_cache_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str
) -> None:
    module = file_module(tmp_path, BLOB)
    directory = str(tmp_path / "c")
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    theirs = hamilton.execute([node], inputs={"n": BIG})  # Hamilton's own file (protocol 4)
    log: list[tuple[str, str, int]] = []

    def recording_open(path: Any, mode: str, buffering: int = -1) -> _Recorded:
        return _Recorded(open(path, mode, buffering), log)

    monkeypatch.setattr(cache_io, "open", recording_open, raising=False)
    seen: list[Any] = []
    ours = (
        await Driver(module, cache=directory)
        .prepare([node])
        .execute(inputs={"n": BIG}, observer=seen.append)
    )
    assert [e.node for e in seen if e.kind == "cache_hit"] == [node]
    assert bytes(ours[node]) == bytes(theirs[node])
    reads = [entry for entry in log if entry[0] == "read"]
    assert sum(size for _, _, size in reads) >= memoryview(ours[node]).nbytes - CHUNK
    assert max(size for _, _, size in reads) <= CHUNK
    assert {thread.startswith("sdax_hamilton cache") for _, thread, _ in reads} == {True}


class Unpicklable:
    """A value Hamilton can fingerprint but pickle cannot write."""

    def __reduce__(self) -> Any:
        raise TypeError("Unpicklable cannot be pickled")


async def test_a_store_that_fails_midway_leaves_no_file_and_the_run_its_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    module = file_module(
        tmp_path,
        """
        from test_cache_io import Unpicklable
        CALLS = []

        def half(n: int) -> list:
            CALLS.append("half")
            return [bytes(n), Unpicklable()]  # pickle writes the bytes, then fails
        """,
    )
    directory = tmp_path / "c"
    plan = Driver(module, cache=directory).prepare(["half"])
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton.cache"):
        result = await plan.execute(inputs={"n": BIG})
    assert len(result["half"][0]) == BIG and isinstance(result["half"][1], Unpicklable)
    assert "value of 'half' not stored in the cache: TypeError" in caplog.text
    assert [f.name for f in directory.iterdir() if f.suffix != ".db"] == []
    await plan.execute(inputs={"n": BIG})
    assert module.CALLS == ["half", "half"]  # nothing was stored: computed again


async def test_a_large_result_cut_short_is_a_miss_and_is_written_whole_again(
    tmp_path: Path,
) -> None:
    module = file_module(tmp_path, BLOB)
    directory = tmp_path / "c"
    plan = Driver(module, cache=directory).prepare(["blob"])
    first = await plan.execute(inputs={"n": BIG})
    (result,) = [f for f in directory.iterdir() if f.suffix != ".db"]
    os.truncate(result, BIG // 2)  # a write cut short in the middle of the value's bytes
    seen: list[Any] = []
    again = await plan.execute(inputs={"n": BIG}, observer=seen.append)
    assert again == first
    assert not any(e.kind == "cache_hit" for e in seen)  # a miss: computed and stored
    seen.clear()
    assert await plan.execute(inputs={"n": BIG}, observer=seen.append) == first
    assert [e.node for e in seen if e.kind == "cache_hit"] == ["blob"]  # whole again
