"""``Driver(..., cache=)``: Hamilton's caching across async runs (docs/caching.md).

Graphs are real module files (Hamilton's code version is the hash of a function's source,
so a module made from a string has none and is never cached); the cache directories are
Hamilton's own, and some tests read or write them with Hamilton's ``Builder().with_cache()``
driver.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sdax_hamilton import Driver, ExecutionError, RunEvent, RunReport

_names = itertools.count()
_loaded: list[str] = []


@pytest.fixture(autouse=True)
def _unload() -> Iterator[None]:
    yield
    while _loaded:
        sys.modules.pop(_loaded.pop(), None)


def file_module(directory: Path, source: str, name: str | None = None) -> Any:
    """A module loaded from a real file (its functions' source can be read)."""
    name = name or f"sdax_cache_graph_{next(_names)}"
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _loaded.append(name)
    spec.loader.exec_module(module)
    return module


GRAPH = """
CALLS = []

def base(x: int) -> int:
    CALLS.append("base")
    return x * 2

def total(base: int, y: int = 1) -> int:
    CALLS.append("total")
    return base + y
"""


def events(into: list[RunEvent]) -> Any:
    return into.append


async def test_a_hit_uses_the_stored_value_and_makes_no_attempt(tmp_path: Path) -> None:
    module = file_module(tmp_path, GRAPH)
    plan = Driver(module, cache=tmp_path / "cache").prepare(["total"])
    assert await plan.execute(inputs={"x": 3}) == {"total": 7}
    assert module.CALLS == ["base", "total"]
    seen: list[RunEvent] = []
    report = RunReport()
    assert await plan.execute(inputs={"x": 3}, observer=[seen.append, report]) == {"total": 7}
    assert module.CALLS == ["base", "total"]  # nothing called
    kinds = [(e.kind, e.node) for e in seen if e.node]
    assert kinds == [("cache_hit", "base"), ("cache_hit", "total")]
    for name in ("base", "total"):
        node = report.nodes[name]
        assert node.cached and node.attempts == 0 and node.outcome == "succeeded"
    assert "from cache" in report.format()


async def test_the_key_is_code_version_and_input_data_versions(tmp_path: Path) -> None:
    module = file_module(tmp_path, GRAPH)
    plan = Driver(module, cache=tmp_path / "cache").prepare(["total"])
    await plan.execute(inputs={"x": 3})
    await plan.execute(inputs={"x": 4})  # another input: both miss
    assert module.CALLS == ["base", "total"] * 2
    # A new body for ``total`` (same name, same module file name): only it misses.
    changed = file_module(
        tmp_path,
        GRAPH.replace("return base + y", "return base + y + 100"),
        name=f"{module.__name__}_v2",
    )
    changed_plan = Driver(changed, cache=tmp_path / "cache").prepare(["total"])
    assert await changed_plan.execute(inputs={"x": 3}) == {"total": 107}
    assert changed.CALLS == ["total"]


async def test_cache_argument_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hamilton.caching.adapter import HamiltonCacheAdapter

    module = file_module(tmp_path, GRAPH)
    with pytest.raises(TypeError, match="cache= must be True"):
        Driver(module, cache=3)
    with pytest.raises(TypeError, match="cache= must be True"):
        Driver(module, cache=False)
    monkeypatch.chdir(tmp_path)
    await Driver(module, cache=True).prepare(["base"]).execute(inputs={"x": 1})
    assert (tmp_path / ".hamilton_cache" / "metadata_store.db").exists()
    adapter = HamiltonCacheAdapter(path=str(tmp_path / "own"), recompute=["base"])
    plan = Driver(module, cache=adapter).prepare(["total"])
    await plan.execute(inputs={"x": 1})
    await plan.execute(inputs={"x": 1})
    # ``base`` recomputed each time (the adapter's recompute=), ``total`` a hit.
    assert module.CALLS == ["base", "base", "total", "base"]


BEHAVIORS = """
from hamilton.function_modifiers import cache

CALLS = []

@cache(behavior="recompute")
def fresh(x: int) -> int:
    CALLS.append("fresh")
    return x

@cache(behavior="disable")
def off(x: int) -> int:
    CALLS.append("off")
    return x

@cache(behavior="ignore")
def noise(x: int) -> int:
    CALLS.append("noise")
    return x * 1000

def after_fresh(fresh: int) -> int:
    CALLS.append("after_fresh")
    return fresh + 1

def after_off(off: int) -> int:
    CALLS.append("after_off")
    return off + 1

def after_noise(noise: int, y: int) -> int:
    CALLS.append("after_noise")
    return y
"""


async def test_hamilton_behaviors_are_honoured(tmp_path: Path) -> None:
    module = file_module(tmp_path, BEHAVIORS)
    plan = Driver(module, cache=tmp_path / "c").prepare(["after_fresh", "after_off"])
    await plan.execute(inputs={"x": 1})
    await plan.execute(inputs={"x": 1})
    calls = module.CALLS
    # recompute: always called, but its consumer's key is unchanged: a hit.
    assert calls.count("fresh") == 2 and calls.count("after_fresh") == 1
    # disable: always called and its consumers always miss.
    assert calls.count("off") == 2 and calls.count("after_off") == 2
    noise = Driver(module, cache=tmp_path / "c").prepare(["after_noise"])
    await noise.execute(inputs={"x": 1, "y": 5})
    await noise.execute(inputs={"x": 2, "y": 5})  # ignore: noise's value is left out
    assert calls.count("noise") == 2 and calls.count("after_noise") == 1


async def test_format_stores_through_hamiltons_saver(tmp_path: Path) -> None:
    module = file_module(
        tmp_path,
        """
        from hamilton.function_modifiers import cache
        CALLS = []

        @cache(format="json")
        def doc(x: int) -> dict:
            CALLS.append(x)
            return {"x": x}
        """,
    )
    plan = Driver(module, cache=tmp_path / "c").prepare(["doc"])
    assert await plan.execute(inputs={"x": 2}) == {"doc": {"x": 2}}
    assert list((tmp_path / "c").glob("*.json"))
    assert await plan.execute(inputs={"x": 2}) == {"doc": {"x": 2}}
    assert module.CALLS == [2]


RESOURCES = """
from hamilton.function_modifiers import cache
from sdax_hamilton import Acquisition, shutdown

CALLS = []

class Client:
    def __init__(self, n: int) -> None:
        self.n = n

def client(n: int) -> Client:
    CALLS.append("client")
    return Client(n)

@shutdown(of=client)
def close(acq: Acquisition[Client]) -> None:
    CALLS.append("close")

def plain(client: Client, q: int) -> int:
    CALLS.append("plain")
    return q

@cache(behavior="default")
def asked(client: Client, q: int) -> int:
    CALLS.append("asked")
    return q * 10
"""


async def test_resources_are_never_cached_and_left_out_of_keys_when_asked(
    tmp_path: Path,
) -> None:
    module = file_module(tmp_path, RESOURCES)
    plan = Driver(module, cache=tmp_path / "c").prepare(["plain", "asked"])
    assert await plan.execute(inputs={"n": 1, "q": 2}) == {"plain": 2, "asked": 20}
    # Another client object (another n): ``asked`` hits, the resource being left out.
    assert await plan.execute(inputs={"n": 2, "q": 2}) == {"plain": 2, "asked": 20}
    calls = module.CALLS
    assert calls.count("client") == 2 and calls.count("close") == 2
    assert calls.count("plain") == 2  # takes a resource, not asked: never cached
    assert calls.count("asked") == 1


@pytest.mark.parametrize("behavior", ["default", "recompute"])
def test_asking_to_cache_a_resource_is_refused(tmp_path: Path, behavior: str) -> None:
    source = RESOURCES.replace("def client(", f'@cache(behavior="{behavior}")\ndef client(')
    module = file_module(tmp_path, source)
    with pytest.raises(ValueError, match=r"Node 'client' .* is an owned acquisition"):
        Driver(module, cache=tmp_path / "c")
    Driver(module)  # without cache= the tag is inert
    ignored = RESOURCES.replace("def client(", '@cache(behavior="ignore")\ndef client(')
    Driver(file_module(tmp_path, ignored), cache=tmp_path / "c")


def test_asking_to_cache_what_borrows_from_a_resource_is_refused(tmp_path: Path) -> None:
    module = file_module(
        tmp_path,
        """
        from hamilton.function_modifiers import cache, extract_fields
        from sdax_hamilton import Acquisition, shutdown

        @cache(behavior="default", target_="host")
        @extract_fields({"host": str, "port": int})
        def conn(dsn: str) -> dict:
            return {"host": dsn, "port": 1}

        @shutdown(of=conn)
        def close(acq: Acquisition[dict]) -> None:
            pass
        """,
    )
    with pytest.raises(ValueError, match=r"Node 'host' .* borrows from the owned acquisition"):
        Driver(module, cache=tmp_path / "c")


async def test_a_function_without_readable_source_is_never_cached(
    tmp_path: Path, make_module: Any
) -> None:
    module = make_module(GRAPH)  # compiled from a string: no source file
    plan = Driver(module, cache=tmp_path / "c").prepare(["total"])
    await plan.execute(inputs={"x": 3})
    await plan.execute(inputs={"x": 3})
    assert module.CALLS == ["base", "total"] * 2


FLAKY = """
from sdax_hamilton import execution

CALLS = []
FAIL = {"n": 0}

@execution(retries=2, initial_delay=0.0)
def flaky(x: int) -> int:
    CALLS.append("flaky")
    if FAIL["n"] > 0:
        FAIL["n"] -= 1
        raise ConnectionError("transient")
    return x + 1

def wrong(x: int) -> int:
    CALLS.append("wrong")
    return "not an int"  # type: ignore[return-value]
"""


async def test_failed_values_are_never_stored_retried_successes_are(tmp_path: Path) -> None:
    module = file_module(tmp_path, FLAKY)
    driver = Driver(module, cache=tmp_path / "c")
    plan = driver.prepare(["flaky"])
    module.FAIL["n"] = 3  # fails for good
    with pytest.raises(ExecutionError):
        await plan.execute(inputs={"x": 1})
    module.FAIL["n"] = 1  # one failure, then a success under the policy
    assert await plan.execute(inputs={"x": 1}) == {"flaky": 2}
    assert await plan.execute(inputs={"x": 1}) == {"flaky": 2}
    assert module.CALLS.count("flaky") == 5  # 3 + 2, none for the hit
    wrong = driver.prepare(["wrong"])
    for _ in range(2):
        with pytest.raises(ExecutionError):
            await wrong.execute(inputs={"x": 1})
    assert module.CALLS.count("wrong") == 2  # a value failing its check is not stored


async def test_a_cancelled_run_leaves_no_entry(tmp_path: Path) -> None:
    module = file_module(
        tmp_path,
        """
        import asyncio
        CALLS = []
        GATE = {}

        async def slow(x: int) -> int:
            CALLS.append("slow")
            await GATE["event"].wait()
            return x
        """,
    )
    module.GATE["event"] = asyncio.Event()
    plan = Driver(module, cache=tmp_path / "c").prepare(["slow"])
    task = asyncio.ensure_future(plan.execute(inputs={"x": 1}))
    while not module.CALLS:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    module.GATE["event"].set()
    assert await plan.execute(inputs={"x": 1}) == {"slow": 1}
    assert module.CALLS == ["slow", "slow"]


SHARED = """
import asyncio
CALLS = []
GATE = {}
FAIL = {"n": 0}

async def shared(x: int) -> int:
    CALLS.append("shared")
    await GATE["event"].wait()
    if FAIL["n"] > 0:
        FAIL["n"] -= 1
        raise ValueError("leader failed")
    return x * 3
"""


async def test_concurrent_misses_compute_once(tmp_path: Path) -> None:
    module = file_module(tmp_path, SHARED)
    module.GATE["event"] = asyncio.Event()
    # Two Drivers on one directory share their flights.
    plans = [Driver(module, cache=tmp_path / "c").prepare(["shared"]) for _ in range(2)]
    reports = [RunReport() for _ in range(100)]
    runs = [
        asyncio.ensure_future(plans[i % 2].execute(inputs={"x": 2}, observer=report))
        for i, report in enumerate(reports)
    ]
    while not module.CALLS:
        await asyncio.sleep(0.001)
    for _ in range(20):
        await asyncio.sleep(0)
    module.GATE["event"].set()
    results = await asyncio.gather(*runs)
    assert results == [{"shared": 6}] * 100
    assert module.CALLS == ["shared"]
    assert sum(report.nodes["shared"].cached for report in reports) == 99


async def test_a_run_whose_lookup_is_slow_is_not_raced_by_a_later_run(tmp_path: Path) -> None:
    """The first run's lookup (a miss) is still reading when a second run looks the key up:
    the second waits for the first's lookup and value, so the key is computed once. (Were
    the second to read, miss, compute and store meanwhile, the first's miss, read before
    that store, would compute it again.)"""
    import threading

    from hamilton.caching.adapter import HamiltonCacheAdapter
    from hamilton.caching.stores.sqlite import SQLiteMetadataStore

    reading, go_on = threading.Event(), threading.Event()

    class FirstLookupWaits(SQLiteMetadataStore):  # type: ignore[misc]
        waited = False

        def get(self, cache_key: str) -> str | None:
            found: str | None = super().get(cache_key=cache_key)
            if not FirstLookupWaits.waited:
                FirstLookupWaits.waited = True
                reading.set()
                go_on.wait(30)  # in the cache's thread
            return found

    module = file_module(tmp_path, SHARED)
    module.GATE["event"] = asyncio.Event()
    module.GATE["event"].set()
    directory = tmp_path / "c"
    directory.mkdir()
    adapter = HamiltonCacheAdapter(
        path=str(directory), metadata_store=FirstLookupWaits(path=str(directory))
    )
    plan = Driver(module, cache=adapter).prepare(["shared"])
    loop = asyncio.get_running_loop()
    first = asyncio.ensure_future(plan.execute(inputs={"x": 2}))
    try:
        assert await loop.run_in_executor(None, reading.wait, 30)
        second = asyncio.ensure_future(plan.execute(inputs={"x": 2}))
        # The second run waits for the first's lookup: it cannot end while that reads.
        done, _ = await asyncio.wait([second], timeout=1.0)
        assert not done
    finally:
        go_on.set()
    assert await asyncio.gather(first, second) == [{"shared": 6}] * 2
    assert module.CALLS == ["shared"]


async def test_waiters_go_on_as_if_they_had_missed_when_the_leader_fails(tmp_path: Path) -> None:
    module = file_module(tmp_path, SHARED)
    module.GATE["event"] = asyncio.Event()
    module.FAIL["n"] = 1
    plan = Driver(module, cache=tmp_path / "c").prepare(["shared"])
    runs = [asyncio.ensure_future(plan.execute(inputs={"x": 2})) for _ in range(10)]
    while not module.CALLS:
        await asyncio.sleep(0.001)
    module.GATE["event"].set()
    results = await asyncio.gather(*runs, return_exceptions=True)
    failed = [r for r in results if isinstance(r, ExecutionError)]
    assert len(failed) == 1
    assert [r for r in results if not isinstance(r, BaseException)] == [{"shared": 6}] * 9
    assert module.CALLS == ["shared", "shared"]  # the failure, then one of the waiters


INTEROP = """
CALLS = []

def raw(x: int) -> list[int]:
    CALLS.append("raw")
    return list(range(x))

def summed(raw: list[int], offset: int = 0) -> int:
    CALLS.append("summed")
    return sum(raw) + offset
"""


async def test_hamiltons_sync_cache_gives_hits_here(tmp_path: Path) -> None:
    from hamilton import driver

    module = file_module(tmp_path, INTEROP)
    directory = str(tmp_path / "shared")
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    assert hamilton.execute(["summed"], inputs={"x": 5}) == {"summed": 10}
    assert module.CALLS == ["raw", "summed"]
    seen: list[RunEvent] = []
    plan = Driver(module, cache=directory).prepare(["summed"])
    assert await plan.execute(inputs={"x": 5}, observer=seen.append) == {"summed": 10}
    assert module.CALLS == ["raw", "summed"]
    assert {e.node for e in seen if e.kind == "cache_hit"} == {"raw", "summed"}


async def test_entries_written_here_give_hits_to_hamiltons_sync_cache(tmp_path: Path) -> None:
    from hamilton import driver

    module = file_module(tmp_path, INTEROP)
    directory = str(tmp_path / "shared")
    plan = Driver(module, cache=directory).prepare(["summed"])
    assert await plan.execute(inputs={"x": 4}) == {"summed": 6}
    assert module.CALLS == ["raw", "summed"]
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    assert hamilton.execute(["summed"], inputs={"x": 4}) == {"summed": 6}
    assert module.CALLS == ["raw", "summed"]  # Hamilton called nothing
    logs = hamilton.cache.logs(hamilton.cache.last_run_id)
    assert {name for name, found in logs.items() if any(e.msg == "hit" for e in found)} == {
        "raw",
        "summed",
    }
    # Our run is recorded in Hamilton's metadata store, as its own runs are.
    run_ids = hamilton.cache.metadata_store.get_run_ids()
    assert len(run_ids) == 2


class Traced:
    """A value recording the threads that pickle and unpickle it."""

    threads: ClassVar[list[str]] = []

    def __init__(self, n: int) -> None:
        self.n = n

    def __getstate__(self) -> dict[str, Any]:
        Traced.threads.append(f"dump {threading.current_thread().name}")
        return {"n": self.n}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Traced.threads.append(f"load {threading.current_thread().name}")
        self.n = state["n"]


async def test_store_io_runs_off_the_loop(tmp_path: Path) -> None:
    module = file_module(
        tmp_path,
        """
        from test_cache import Traced

        def traced(x: int) -> Traced:
            return Traced(x)
        """,
    )
    Traced.threads.clear()
    plan = Driver(module, cache=tmp_path / "c").prepare(["traced"])
    loop_thread = threading.current_thread().name
    first = await plan.execute(inputs={"x": 1})
    second = await plan.execute(inputs={"x": 1})
    assert first["traced"].n == second["traced"].n == 1
    assert second["traced"] is not first["traced"]  # read back from the store
    assert any(t.startswith("dump") for t in Traced.threads)
    assert any(t.startswith("load") for t in Traced.threads)
    assert all(not t.endswith(loop_thread) for t in Traced.threads), Traced.threads


class Opaque:
    """A value Hamilton's fingerprinting cannot version (no ``__dict__``, not stdlib)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


async def test_an_input_without_data_version_is_neither_looked_up_nor_stored(
    tmp_path: Path,
) -> None:
    module = file_module(
        tmp_path,
        """
        from typing import Any
        CALLS = []

        def opaque_n(thing: Any) -> int:
            CALLS.append("opaque_n")
            return thing.n
        """,
    )
    driver = Driver(module, cache=tmp_path / "c")
    plan = driver.prepare(["opaque_n"])
    for _ in range(2):
        assert await plan.execute(inputs={"thing": Opaque(4)}) == {"opaque_n": 4}
    assert module.CALLS == ["opaque_n", "opaque_n"]
    assert len(driver._cache.adapter.metadata_store) == 0  # type: ignore[union-attr]


def test_hamiltons_cache_adapter_is_refused_as_an_adapter(tmp_path: Path) -> None:
    from hamilton.caching.adapter import HamiltonCacheAdapter

    module = file_module(tmp_path, GRAPH)
    with pytest.raises(ValueError, match=r"pass it as Driver\(\.\.\., cache=adapter\)"):
        Driver(module, adapters=[HamiltonCacheAdapter(path=str(tmp_path / "c"))])


class SlowToStore:
    """A value whose pickling (in a store thread) takes a while and says when it began."""

    began: ClassVar[threading.Event] = threading.Event()

    def __init__(self, n: int) -> None:
        self.n = n

    def __getstate__(self) -> dict[str, Any]:
        SlowToStore.began.set()
        threading.Event().wait(0.2)
        return {"n": self.n}


async def test_a_caller_cancelling_during_the_store_leaves_a_whole_entry(tmp_path: Path) -> None:
    module = file_module(
        tmp_path,
        """
        from test_cache import SlowToStore
        CALLS = []

        def slow_to_store(x: int) -> SlowToStore:
            CALLS.append("slow_to_store")
            return SlowToStore(x)

        def after(slow_to_store: SlowToStore) -> int:
            CALLS.append("after")
            return slow_to_store.n
        """,
    )
    SlowToStore.began.clear()
    plan = Driver(module, cache=tmp_path / "c").prepare(["after"])
    task = asyncio.ensure_future(plan.execute(inputs={"x": 3}))
    while not SlowToStore.began.is_set():
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert module.CALLS == ["slow_to_store"]  # the consumer never started
    assert await plan.execute(inputs={"x": 3}) == {"after": 3}
    assert module.CALLS == ["slow_to_store", "after"]  # the entry was whole: a hit


async def test_lifecycle_node_hooks_run_around_a_hit_as_in_hamilton(tmp_path: Path) -> None:
    from hamilton.lifecycle import NodeExecutionHook

    class Recorder(NodeExecutionHook):  # type: ignore[misc]
        def __init__(self) -> None:
            self.seen: list[tuple[str, str, Any]] = []

        def run_before_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
            self.seen.append(("before", node_name, None))

        def run_after_node_execution(
            self, *, node_name: str, result: Any, success: bool, **kwargs: Any
        ) -> None:
            self.seen.append(("after", node_name, result))

    module = file_module(tmp_path, GRAPH)
    recorder = Recorder()
    plan = Driver(module, cache=tmp_path / "c", adapters=[recorder]).prepare(["total"])
    await plan.execute(inputs={"x": 3})
    first = list(recorder.seen)
    recorder.seen.clear()
    await plan.execute(inputs={"x": 3})
    assert module.CALLS == ["base", "total"]  # the second run called nothing
    assert (
        recorder.seen
        == first
        == [
            ("before", "base", None),
            ("after", "base", 6),
            ("before", "total", None),
            ("after", "total", 7),
        ]
    )


async def test_the_timeout_bounds_the_call_not_the_lookup(tmp_path: Path) -> None:
    """A slow store: its reads take longer than the node's timeout; hits still hit, and a
    miss gets the whole timeout for its call (one attempt started and succeeded)."""
    import time as time_module

    from hamilton.caching.adapter import HamiltonCacheAdapter
    from hamilton.caching.stores.file import FileResultStore

    class SlowStore(FileResultStore):  # type: ignore[misc]
        def get(self, data_version: str, **kwargs: Any) -> Any:
            time_module.sleep(0.3)  # in the cache's thread
            return super().get(data_version, **kwargs)

    module = file_module(
        tmp_path,
        """
        import asyncio
        from sdax_hamilton import execution
        CALLS = []

        @execution(timeout=0.2)
        async def bounded(x: int) -> int:
            CALLS.append(x)
            await asyncio.sleep(0.05)
            return x
        """,
    )
    adapter = HamiltonCacheAdapter(
        path=str(tmp_path / "c"), result_store=SlowStore(str(tmp_path / "c"))
    )
    plan = Driver(module, cache=adapter).prepare(["bounded"])
    seen: list[RunEvent] = []
    assert await plan.execute(inputs={"x": 1}, observer=seen.append) == {"bounded": 1}
    assert [e.kind for e in seen if e.node] == ["attempt_started", "attempt_succeeded"]
    seen.clear()
    assert await plan.execute(inputs={"x": 1}, observer=seen.append) == {"bounded": 1}
    assert [e.kind for e in seen if e.node] == ["cache_hit"]
    assert module.CALLS == [1]


async def test_decorated_nodes_and_formats_interoperate_with_hamilton(tmp_path: Path) -> None:
    from hamilton import driver

    module = file_module(
        tmp_path,
        """
        from hamilton.function_modifiers import cache, check_output, extract_fields
        CALLS = []

        @cache(format="json")
        def settings(x: int) -> dict:
            CALLS.append("settings")
            return {"scale": x, "offset": 1}

        @extract_fields({"scale": int, "offset": int})
        def parts(settings: dict) -> dict:
            CALLS.append("parts")
            return settings

        @check_output(range=(0, 1000))
        def scaled(scale: int, offset: int) -> int:
            CALLS.append("scaled")
            return scale * 10 + offset
        """,
    )
    directory = str(tmp_path / "shared")
    plan = Driver(module, cache=directory).prepare(["scaled"])
    assert await plan.execute(inputs={"x": 4}) == {"scaled": 41}
    assert module.CALLS == ["settings", "parts", "scaled"]
    hamilton = driver.Builder().with_modules(module).with_cache(directory).build()
    assert hamilton.execute(["scaled"], inputs={"x": 4}) == {"scaled": 41}
    assert module.CALLS == ["settings", "parts", "scaled"]  # Hamilton: all hits
    assert hamilton.execute(["scaled"], inputs={"x": 5}) == {"scaled": 51}
    seen: list[RunEvent] = []
    assert await plan.execute(inputs={"x": 5}, observer=seen.append) == {"scaled": 51}
    assert module.CALLS == ["settings", "parts", "scaled"] * 2  # ours: all hits
    assert "settings" in {e.node for e in seen if e.kind == "cache_hit"}
    assert all(e.kind == "cache_hit" for e in seen if e.node)


async def test_a_result_cut_short_is_a_miss_and_is_written_whole_again(tmp_path: Path) -> None:
    module = file_module(tmp_path, INTEROP)
    directory = tmp_path / "c"
    plan = Driver(module, cache=directory).prepare(["raw"])
    assert await plan.execute(inputs={"x": 3}) == {"raw": [0, 1, 2]}
    (result,) = [f for f in directory.iterdir() if f.suffix != ".db"]
    result.write_bytes(result.read_bytes()[:5])  # a write cut short by a killed process
    assert await plan.execute(inputs={"x": 3}) == {"raw": [0, 1, 2]}  # a miss: computed
    assert await plan.execute(inputs={"x": 3}) == {"raw": [0, 1, 2]}  # whole again: a hit
    assert module.CALLS == ["raw", "raw"]
