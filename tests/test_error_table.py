"""docs/errors.md's table, row by row: each user-caused error is triggered here, and its class
and the message fragment the table documents are checked against what is raised.

The rows are read from the page itself, so a row added there without a trigger here (or a
trigger without a row) fails ``test_every_row_has_a_trigger``.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import loops as loop_support
from support.modules import load_module

import sdax_hamilton
from sdax_hamilton import Driver, execution, shutdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
ROW = re.compile(
    r"^\| `(?P<id>[a-z0-9-]+)` \| (?P<when>[^|]+) \| `(?P<cls>\w+)` \| "
    r"`(?P<fragment>[^`]+)` \| (?P<todo>[^|]+) \|$"
)

# The graph of the page's examples: a connection with a release, rows read through it,
# their count, and a @check_output node.
SERVICE = """
from hamilton.function_modifiers import check_output, extract_fields, parameterize, value
from sdax_hamilton import Acquisition, execution, shutdown


class Conn:
    pass


async def connection(dsn: str) -> Conn:
    return Conn()


@shutdown(of=connection)
async def close_connection(acquired: Acquisition[Conn]) -> None:
    pass


async def rows(connection: Conn, limit: int, page: int = 1) -> list[int]:
    return list(range(limit))


def count(rows: list[int]) -> int:
    return len(rows)


@check_output(range=(0, 100))
def share(count: int) -> int:
    return count
"""

UNTIL = """
def rows(limit: int) -> list[int]:
    return list(range(limit))
"""


def _module(source: str, *, register: bool = True) -> Any:
    if register:
        return load_module(source)
    import types

    module = types.ModuleType("sdax_error_table_unregistered")
    exec(compile(textwrap.dedent(source), "<unregistered>", "exec"), module.__dict__)
    return module


def _service() -> Driver:
    return Driver(_module(SERVICE))


def _run(coro: Any) -> Any:
    return loop_support.run(coro)


async def _enter(context: Any) -> None:
    async with context:
        raise AssertionError("the body must not run")


ANY: Any = None  # untyped stand-in for arguments the signatures forbid
E: Any = execution
S: Any = shutdown
D: Any = Driver


def _owner() -> int:
    raise AssertionError("never called")


TRIGGERS: dict[str, Callable[[], object]] = {}


def trigger(row: str) -> Callable[[Callable[[], object]], Callable[[], object]]:
    def register(fn: Callable[[], object]) -> Callable[[], object]:
        assert row not in TRIGGERS, row
        TRIGGERS[row] = fn
        return fn

    return register


# ---- declarations ---------------------------------------------------------------------

trigger("policy-value")(lambda: E(retries=-1))
trigger("policy-type")(lambda: E(timeout="5"))
trigger("retryable-termination")(lambda: E(retryable_exceptions=(KeyboardInterrupt,)))
trigger("target-type")(lambda: E(target_=5))
trigger("shutdown-of")(lambda: S(of=5))
trigger("shared-object-type")(lambda: E(bulkhead=ANY or 2))
trigger("shared-object-value")(lambda: sdax_hamilton.Bulkhead(0))
trigger("in-thread-type")(lambda: E(in_thread=1))


@trigger("in-thread-async")
def _() -> object:
    async def fetch() -> int:
        return 1

    return E(in_thread=True)(fetch)


@trigger("conflicting-declaration")
def _() -> object:
    return _module(
        """
        from sdax_hamilton import execution

        @execution(retries=1)
        @execution(timeout=1.0)
        def twice() -> int:
            return 1
        """
    )


# ---- Driver(...) ----------------------------------------------------------------------

trigger("driver-modules")(lambda: D("service"))
trigger("driver-config")(lambda: D(_module(UNTIL), config=[("limit", 1)]))
trigger("driver-config-key")(lambda: D(_module(UNTIL), config={1: 2}))
trigger("module-not-loaded")(lambda: Driver(_module(UNTIL, register=False)))
trigger("missing-annotation")(lambda: Driver(_module("def rows(limit) -> int:\n    return 1\n")))
trigger("missing-return")(lambda: Driver(_module("def rows(limit: int):\n    return 1\n")))
trigger("unsupported-annotation")(
    lambda: Driver(
        _module(
            "from typing import Callable\ndef rows(f: Callable[[], int]) -> int:\n    return 1\n"
        )
    )
)
trigger("generator-node")(
    lambda: Driver(_module("from typing import Any\ndef rows() -> Any:\n    yield 1\n"))
)
trigger("invalid-default")(
    lambda: Driver(_module("def rows(limit: int = 'ten') -> int:\n    return 1\n"))
)
trigger("hamilton-edge")(
    lambda: Driver(
        _module(
            "def rows() -> list[str]:\n    return []\n\n"
            "def count(rows: list[int]) -> int:\n    return len(rows)\n"
        )
    )
)
trigger("duplicate-node")(lambda: Driver(_module(UNTIL), _module(UNTIL)))
trigger("driver-executor")(lambda: D(_module(UNTIL), executor=object()))
trigger("driver-module-overrides")(lambda: D(_module(UNTIL), allow_module_overrides=1))

RELEASE = """
from sdax_hamilton import Acquisition, shutdown

def connection() -> int:
    return 1

{release}
"""


def _release(release: str) -> Driver:
    return Driver(_module(RELEASE.format(release=textwrap.dedent(release))))


trigger("release-signature")(
    lambda: _release(
        """
        @shutdown(of=connection)
        def close(acquired: Acquisition[int], extra: int) -> None:
            pass
        """
    )
)
trigger("release-return")(
    lambda: _release(
        """
        @shutdown(of=connection)
        def close(acquired: Acquisition[int]) -> bool:
            return True
        """
    )
)
trigger("release-type")(
    lambda: _release(
        """
        @shutdown(of=connection)
        def close(acquired: Acquisition[str]) -> None:
            pass
        """
    )
)
trigger("duplicate-release")(
    lambda: _release(
        """
        @shutdown(of=connection)
        def close(acquired: Acquisition[int]) -> None:
            pass

        @shutdown(of=connection)
        def close_again(acquired: Acquisition[int]) -> None:
            pass
        """
    )
)
trigger("retried-acquisition")(
    lambda: Driver(
        _module(
            """
            from sdax_hamilton import Acquisition, execution, shutdown

            @execution(retries=2)
            def connection() -> int:
                return 1

            @shutdown(of=connection)
            def close(acquired: Acquisition[int]) -> None:
                pass
            """
        )
    )
)


@trigger("release-owner-elsewhere")
def _() -> object:
    owner = _module("def connection() -> int:\n    return 1\n")
    releases = _module(
        f"""
        from sdax_hamilton import Acquisition, shutdown
        import {owner.__name__} as owner

        @shutdown(of=owner.connection)
        def close(acquired: Acquisition[int]) -> None:
            pass
        """
    )
    return Driver(releases)


PARAMETERIZED = """
from hamilton.function_modifiers import parameterize, value
from sdax_hamilton import execution

@execution(timeout=1.0{target})
@parameterize(one={{"x": value(1)}}, three={{"x": value(3)}})
def p(x: int) -> int:
    return x
"""
trigger("expanded-without-target")(lambda: Driver(_module(PARAMETERIZED.format(target=""))))
trigger("target-not-generated")(
    lambda: Driver(_module(PARAMETERIZED.format(target=", target_='thre'")))
)
trigger("unsupported-decorator")(
    lambda: Driver(
        _module(
            """
            from hamilton.function_modifiers import tag

            class MyTag(tag):
                pass

            @MyTag(owner="me")
            def rows(limit: int) -> int:
                return limit
            """
        )
    )
)
trigger("adapter-refused")(lambda: Driver(_module(UNTIL), adapters=[object()]))
trigger("retry-budget-type")(lambda: Driver(_module(UNTIL), retry_budget=ANY or 0.2))
trigger("fallback-resource")(
    lambda: Driver(
        _module(
            """
            from sdax_hamilton import Acquisition, execution, shutdown

            @execution(fallback=lambda exc: 0)
            def connection() -> int:
                return 1

            @shutdown(of=connection)
            def close(acquired: Acquisition[int]) -> None:
                pass
            """
        )
    )
)


def _cache_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="sdax-errors-cache-")


@trigger("cache-adapter-as-adapter")
def _() -> object:
    from hamilton.caching.adapter import HamiltonCacheAdapter

    return Driver(_module(UNTIL), adapters=[HamiltonCacheAdapter(path=_cache_dir())])


trigger("cache-type")(lambda: D(_module(UNTIL), cache=False))
trigger("cache-resource")(
    lambda: Driver(
        _module(
            """
            from hamilton.function_modifiers import cache
            from sdax_hamilton import Acquisition, shutdown

            @cache(behavior="default")
            def connection() -> int:
                return 1

            @shutdown(of=connection)
            def close(acquired: Acquisition[int]) -> None:
                pass
            """
        ),
        cache=_cache_dir(),
    )
)

# ---- prepare() ------------------------------------------------------------------------

trigger("check-outputs")(lambda: _service().prepare(["count"], check_outputs=ANY or 1))
trigger("names-string")(lambda: _service().prepare(ANY or "count"))
trigger("names-duplicate")(lambda: _service().prepare(["count", "count"]))
trigger("unknown-output")(lambda: _service().prepare(["row"]))
trigger("input-as-output")(lambda: _service().prepare(["limit"]))
trigger("unknown-override")(lambda: _service().prepare(["count"], override_nodes=["rws"]))
trigger("config-override-overlap")(
    lambda: Driver(_module(SERVICE), config={"rows": [1]}).prepare(
        ["count"], override_nodes=["rows"]
    )
)
trigger("validation-internal")(lambda: _service().prepare(["share_raw"]))
trigger("replace-validation")(lambda: _service().prepare(["share"], override_nodes=["share_raw"]))
trigger("replace-owned")(lambda: _service().prepare(["count"], override_nodes=["connection"]))


@trigger("expansion-lacks-shutdown")
def _() -> object:
    return Driver(
        _module(
            """
            from hamilton.function_modifiers import parameterize, value
            from sdax_hamilton import Acquisition, shutdown

            @parameterize(primary={"x": value(1)}, replica={"x": value(2)})
            def connection(x: int) -> int:
                return x

            @shutdown(of=connection, target_="primary")
            def close(acquired: Acquisition[int]) -> None:
                pass
            """
        )
    ).prepare(["replica"])


trigger("cycle")(
    lambda: Driver(
        _module("def a(b: int) -> int:\n    return b\n\ndef b(a: int) -> int:\n    return a\n")
    ).prepare(["a"])
)
trigger("incompatible-edge")(
    lambda: Driver(
        _module(
            "def rows() -> list:\n    return []\n\n"
            "def count(rows: list[int]) -> int:\n    return len(rows)\n"
        )
    ).prepare(["count"])
)
trigger("config-replacement")(
    lambda: Driver(_module(SERVICE), config={"rows": "many"}).prepare(["count"])
)
trigger("config-input")(
    lambda: Driver(_module(SERVICE), config={"limit": "ten"}).prepare(["count"])
)
trigger("unused-override")(lambda: _service().prepare(["rows"], override_nodes=["count"]))
trigger("unused-optional")(lambda: _service().prepare(["count"], optional_inputs=["pag"]))

# ---- execute() / open() ---------------------------------------------------------------


def _plan(**kwargs: Any) -> Any:
    return _service().prepare(["count"], **kwargs)


trigger("missing-input")(lambda: _run(_plan().execute(inputs={"dsn": "db"})))
trigger("unexpected-input")(lambda: _run(_plan().execute(inputs={"dsn": "db", "limt": 10})))
trigger("defaulted-input")(
    lambda: _run(_plan().execute(inputs={"dsn": "db", "limit": 10, "page": 2}))
)
trigger("inputs-not-mapping")(lambda: _run(_plan().execute(inputs=ANY or "db")))
trigger("input-type")(lambda: _run(_plan().execute(inputs={"dsn": "db", "limit": "10"})))
trigger("override-shape")(
    lambda: _run(_plan(override_nodes=["rows"]).execute(inputs={}, overrides={"rws": [1]}))
)
trigger("override-type")(
    lambda: _run(_plan(override_nodes=["rows"]).execute(overrides={"rows": "1"}))
)
trigger("resource-output")(
    lambda: _run(_service().prepare(["connection"]).execute(inputs={"dsn": "db"}))
)
trigger("run-timeout")(
    lambda: _run(_enter(_plan().open(inputs={"dsn": "db", "limit": 1}, timeout=-1)))
)

# ---- during a run ---------------------------------------------------------------------

FAILING = """
from sdax_hamilton import Acquisition, shutdown

class Conn:
    pass

async def connection(dsn: str) -> Conn:
    return Conn()

@shutdown(of=connection)
async def close_connection(acquired: Acquisition[Conn]) -> None:
    {close}

async def rows(connection: Conn, limit: int) -> list[int]:
    {rows}
"""


def _failing(rows: str = "return []", close: str = "pass") -> object:
    plan = Driver(_module(FAILING.format(rows=rows, close=close))).prepare(["rows"])
    return _run(plan.execute(inputs={"dsn": "db", "limit": 1}))


trigger("node-failed")(lambda: _failing(rows="raise ConnectionError('reset by peer')"))
trigger("invalid-output")(lambda: _failing(rows="return ['one']"))
trigger("release-failed")(lambda: _failing(close="raise OSError('already closed')"))

GUARDED = FAILING.replace(
    "async def rows(",
    "from sdax_hamilton import Bulkhead, CircuitBreaker, execution\n"
    "BULKHEAD = Bulkhead(1)\n"
    "BREAKER = CircuitBreaker(min_calls=1, failure_ratio=1.0, break_for=60.0)\n"
    "@execution(bulkhead=BULKHEAD, breaker=BREAKER)\n"
    "async def rows(",
)


@trigger("bulkhead-full")
def _() -> object:
    module = _module(GUARDED.format(rows="return []", close="pass"))
    plan = Driver(module).prepare(["rows"])
    assert module.BULKHEAD._core.try_acquire() == "granted"  # another caller holds it
    try:
        return _run(plan.execute(inputs={"dsn": "db", "limit": 1}))
    finally:
        module.BULKHEAD._core.release()


@trigger("circuit-open")
def _() -> object:
    module = _module(GUARDED.format(rows="raise ConnectionError('down')", close="pass"))
    plan = Driver(module).prepare(["rows"])
    with pytest.raises(sdax_hamilton.ExecutionError):
        _run(plan.execute(inputs={"dsn": "db", "limit": 1}))  # opens the breaker
    return _run(plan.execute(inputs={"dsn": "db", "limit": 1}))


# ---- the tests ------------------------------------------------------------------------


def _rows() -> list[dict[str, str]]:
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match is not None:
            found.append(match.groupdict())
    return found


ROWS = _rows()


def test_every_row_has_a_trigger() -> None:
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids)), "row ids repeat"
    assert set(ids) == set(TRIGGERS), (
        f"rows without a trigger: {sorted(set(ids) - set(TRIGGERS))}; "
        f"triggers without a row: {sorted(set(TRIGGERS) - set(ids))}"
    )
    assert len(ids) >= 50


@pytest.fixture(autouse=True)
def _forget_modules() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("sdax_test_graph_"):
            del sys.modules[name]


def _class(name: str) -> type[BaseException]:
    found = getattr(sdax_hamilton, name, None) or getattr(__builtins__, name, None)
    if found is None:
        import builtins

        found = getattr(builtins, name)
    assert isinstance(found, type) and issubclass(found, BaseException), name
    return found


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_row_raises_what_the_table_says(row: dict[str, str]) -> None:
    expected = _class(row["cls"])
    with pytest.raises(BaseException) as caught:
        TRIGGERS[row["id"]]()
    assert type(caught.value) is expected, (type(caught.value), caught.value)
    message = str(caught.value)
    fragment = row["fragment"]
    assert fragment in message, f"{fragment!r} not in {message!r}"
    # Every documented message is one bounded line that says something beyond its fragment.
    assert "\n" not in message and len(message) < 1000
    assert row["todo"].strip()


def test_the_run_errors_name_their_nodes_on_the_first_line() -> None:
    with pytest.raises(sdax_hamilton.ExecutionError) as caught:
        TRIGGERS["node-failed"]()
    first = str(caught.value).splitlines()[0]
    assert "node 'rows' (ConnectionError)" in first
    assert isinstance(caught.value.exceptions[0], ConnectionError)
