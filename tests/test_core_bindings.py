"""The Rust extension ``sdax_hamilton._core`` seen from Python.

Policy validation (docs/contract.md#policy-validation, every row), delay bounds, graph compilation
and selection errors, and a ``Run`` driven by hand: the commands it emits for chains, fan-outs,
retries, aborts and the shutdown order.
"""

from __future__ import annotations

import asyncio
import copy
import math
import pickle
from typing import Any

import pytest

from sdax_hamilton import _core
from sdax_hamilton._core import CANCEL, SLEEP, START, STOP_SLEEP, Graph, Plan, Policy, Run

NodeDef = tuple[str, list[str], list[str], Policy, Policy | None]


def node(
    name: str,
    inputs: tuple[str, ...] = (),
    *,
    borrows: tuple[str, ...] = (),
    policy: Policy | None = None,
    release: Policy | None = None,
) -> NodeDef:
    return (name, list(inputs), list(borrows), policy or Policy(), release)


def plan_of(*nodes: NodeDef, finals: tuple[str, ...], replaced: tuple[str, ...] = ()) -> Plan:
    return Graph(list(nodes)).select(list(finals), replaced)


# --------------------------------------------------------------------------------------
# module surface


def test_opcodes_are_distinct_ints_and_version_is_a_string() -> None:
    ops = [START, SLEEP, CANCEL, STOP_SLEEP]
    assert all(type(op) is int for op in ops)
    assert len(set(ops)) == 4
    assert isinstance(_core.__version__, str) and _core.__version__


# --------------------------------------------------------------------------------------
# Policy: docs/contract.md#policy-validation


def test_policy_defaults() -> None:
    p = Policy()
    assert p.timeout is None
    assert p.retries == 0
    assert p.retryable_exceptions is None
    assert p.initial_delay == 1.0
    assert p.backoff_factor == 2.0


def test_policy_keeps_accepted_values() -> None:
    p = Policy(
        timeout=5,
        retries=3,
        retryable_exceptions=(ConnectionError, TimeoutError),
        initial_delay=0,
        backoff_factor=0.5,
    )
    assert p.timeout == 5.0
    assert p.retries == 3
    assert p.retryable_exceptions == (ConnectionError, TimeoutError)
    assert p.initial_delay == 0.0
    assert p.backoff_factor == 0.5


INF = math.inf
NAN = math.nan


@pytest.mark.parametrize(
    ("kwargs", "exc", "fragments"),
    [
        # retries
        ({"retries": -1}, ValueError, ["retries must be a nonnegative integer", "-1"]),
        ({"retries": 1.5}, TypeError, ["retries must be a nonnegative integer", "1.5"]),
        ({"retries": True}, TypeError, ["retries must be a nonnegative integer", "True"]),
        ({"retries": "1"}, TypeError, ["retries must be a nonnegative integer", "'1'"]),
        ({"retries": None}, TypeError, ["retries must be a nonnegative integer"]),
        # timeout
        ({"timeout": 0}, ValueError, ["Invalid timeout: 0", "timeout must be a finite number"]),
        ({"timeout": 0.0}, ValueError, ["Invalid timeout: 0", "timeout must be a finite number"]),
        ({"timeout": -1}, ValueError, ["Invalid timeout: -1", "timeout must be a finite number"]),
        ({"timeout": INF}, ValueError, ["timeout must be a finite number", "inf"]),
        ({"timeout": NAN}, ValueError, ["timeout must be a finite number", "nan"]),
        ({"timeout": 10**400}, ValueError, ["timeout must be a finite number"]),
        ({"timeout": "5"}, TypeError, ["timeout must be a finite number", "'5'"]),
        ({"timeout": True}, TypeError, ["timeout must be a finite number", "True"]),
        # initial_delay
        (
            {"initial_delay": -1},
            ValueError,
            ["Invalid initial_delay: -1", "initial_delay must be a finite number"],
        ),
        ({"initial_delay": INF}, ValueError, ["Invalid initial_delay: inf"]),
        ({"initial_delay": NAN}, ValueError, ["Invalid initial_delay: nan"]),
        ({"initial_delay": "1"}, TypeError, ["initial_delay must be a finite number"]),
        ({"initial_delay": None}, TypeError, ["initial_delay must be a finite number"]),
        ({"initial_delay": False}, TypeError, ["initial_delay must be a finite number"]),
        # backoff_factor
        ({"backoff_factor": 0}, ValueError, ["Invalid backoff_factor: 0"]),
        ({"backoff_factor": -2.0}, ValueError, ["Invalid backoff_factor: -2.0"]),
        ({"backoff_factor": INF}, ValueError, ["Invalid backoff_factor: inf"]),
        ({"backoff_factor": NAN}, ValueError, ["Invalid backoff_factor: nan"]),
        ({"backoff_factor": "2"}, TypeError, ["backoff_factor must be a finite number"]),
        # retryable_exceptions
        (
            {"retryable_exceptions": ()},
            ValueError,
            ["retryable_exceptions must be a nonempty tuple of exception classes"],
        ),
        (
            {"retryable_exceptions": [ValueError]},
            TypeError,
            ["retryable_exceptions must be a nonempty tuple of exception classes", "list"],
        ),
        (
            {"retryable_exceptions": ValueError},
            TypeError,
            ["retryable_exceptions must be a nonempty tuple of exception classes"],
        ),
        (
            {"retryable_exceptions": (ValueError("x"),)},
            TypeError,
            ["retryable_exceptions must contain exception classes"],
        ),
        (
            {"retryable_exceptions": (int,)},
            TypeError,
            ["retryable_exceptions must contain exception classes", "int"],
        ),
        (
            {"retryable_exceptions": (ValueError, "ValueError")},
            TypeError,
            ["retryable_exceptions must contain exception classes"],
        ),
    ],
)
def test_policy_rejects(kwargs: dict[str, Any], exc: type[Exception], fragments: list[str]) -> None:
    with pytest.raises(exc) as info:
        Policy(**kwargs)
    assert type(info.value) is exc
    for fragment in fragments:
        assert fragment in str(info.value)


class _Claiming(type):
    """A metaclass whose classes claim every instance (``isinstance`` is all they see)."""

    def __instancecheck__(cls, instance: object) -> bool:
        return True


@pytest.mark.parametrize(
    "never",
    [
        BaseException,
        asyncio.CancelledError,
        KeyboardInterrupt,
        SystemExit,
        type("Interrupted", (KeyboardInterrupt,), {}),
        type("Exited", (SystemExit,), {}),
        type("Cancelled", (asyncio.CancelledError,), {}),
        type("Both", (ValueError, KeyboardInterrupt), {}),
        _Claiming("ClaimsEverything", (Exception,), {}),
    ],
    ids=lambda cls: cls.__name__,
)
@pytest.mark.parametrize("retries", [0, 3])
def test_cancellation_and_termination_are_never_retryable(
    never: type[BaseException], retries: int
) -> None:
    with pytest.raises(ValueError, match="External cancellation and process termination"):
        Policy(retries=retries, retryable_exceptions=(never,))
    with pytest.raises(ValueError, match="External cancellation and process termination"):
        Policy(retryable_exceptions=(ConnectionError, never))


@pytest.mark.parametrize(
    "accepted",
    [
        (Exception,),
        (BaseExceptionGroup,),
        (ExceptionGroup,),
        (ConnectionError, TimeoutError),
        (GeneratorExit,),
    ],
)
def test_exception_sets_accepted(accepted: tuple[type[BaseException], ...]) -> None:
    assert Policy(retryable_exceptions=accepted).retryable_exceptions == accepted


def test_tuple_subclass_is_stored_as_a_plain_tuple() -> None:
    class Classes(tuple[type[BaseException], ...]):
        pass

    stored = Policy(retryable_exceptions=Classes((ValueError,))).retryable_exceptions
    assert type(stored) is tuple
    assert stored == (ValueError,)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"retries": -1, "timeout": 0}, "retries"),
        ({"timeout": 0, "initial_delay": -1}, "timeout"),
        ({"initial_delay": -1, "backoff_factor": 0}, "initial_delay"),
        ({"backoff_factor": 0, "retryable_exceptions": ()}, "backoff_factor"),
        ({"retries": "x", "retryable_exceptions": [1]}, "retries"),
    ],
)
def test_validation_order(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        Policy(**kwargs)
    assert str(info.value).startswith(f"Invalid {named}")


def test_policy_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Policy(5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'jitter'"):
        Policy(jitter=0.5)  # type: ignore[call-arg]


def test_huge_retries_saturate_without_overflow() -> None:
    p = Policy(retries=10**30)
    assert p.retries == 10**30
    low, high = p.delay_bounds(10**30)
    assert math.isfinite(low) and math.isfinite(high)


def test_broken_repr_does_not_replace_the_validation_error() -> None:
    class Weird:
        def __repr__(self) -> str:
            raise RuntimeError("repr exploded")

    with pytest.raises(TypeError, match="timeout must be a finite number"):
        Policy(timeout=Weird())  # type: ignore[arg-type]


def test_subclass_check_errors_propagate_unchanged() -> None:
    boom = RuntimeError("subclass check exploded")

    class Meta(type):
        def __subclasscheck__(cls, sub: type) -> bool:
            raise boom

    Strange = Meta("Strange", (Exception,), {})
    # CancelledError etc. are tested against each member: Strange's check raises
    with pytest.raises(RuntimeError) as info:
        Policy(retryable_exceptions=(Strange,))  # type: ignore[arg-type]
    assert info.value is boom


# --------------------------------------------------------------------------------------
# delay_bounds


def test_delay_bounds_follow_the_formula() -> None:
    p = Policy(initial_delay=0.5, backoff_factor=2.0)
    assert p.delay_bounds(0) == (0.25, 0.5)
    assert p.delay_bounds(1) == (0.5, 1.0)
    assert p.delay_bounds(2) == (1.0, 2.0)
    shrinking = Policy(initial_delay=1, backoff_factor=0.5)
    assert shrinking.delay_bounds(3) == (0.0625, 0.125)
    assert Policy(initial_delay=0).delay_bounds(5) == (0.0, 0.0)


def test_delay_bounds_saturate_and_refuse_negative_retries() -> None:
    p = Policy(initial_delay=1e300, backoff_factor=1e300)
    low, high = p.delay_bounds(1000)
    assert high == pytest.approx(1.7976931348623157e308)
    assert math.isfinite(low) and low == high / 2
    with pytest.raises(ValueError, match="retry must be a nonnegative integer"):
        p.delay_bounds(-1)


# --------------------------------------------------------------------------------------
# equality, hashing, copying


def test_equality_hash_pickle_copy_repr() -> None:
    a = Policy(timeout=2, retries=1, retryable_exceptions=(OSError,), initial_delay=0.1)
    b = Policy(timeout=2.0, retries=1, retryable_exceptions=(OSError,), initial_delay=0.1)
    assert a == b and hash(a) == hash(b)
    assert a != Policy(timeout=2, retries=1, retryable_exceptions=(ValueError,))
    assert a != Policy(timeout=2, retries=2, retryable_exceptions=(OSError,), initial_delay=0.1)
    assert Policy() != Policy(retryable_exceptions=(OSError,))
    assert a != "policy"
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.copy(a) is a and copy.deepcopy(a) is a
    assert repr(a) == (
        "Policy(timeout=2.0, retries=1, retryable_exceptions=(OSError,), "
        "initial_delay=0.1, backoff_factor=2.0)"
    )
    with pytest.raises(AttributeError):
        a.retries = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------
# Graph and selection


def test_graph_compile_errors_name_the_nodes() -> None:
    with pytest.raises(ValueError, match='Duplicate node name: "a"'):
        Graph([node("a"), node("a")])
    with pytest.raises(ValueError) as info:
        Graph([node("field", borrows=("conn",))])
    assert '"field"' in str(info.value) and '"conn"' in str(info.value)
    assert "unknown" in str(info.value)
    with pytest.raises(ValueError) as info:
        Graph([node("conn"), node("field", borrows=("conn",))])
    assert "owns no resource" in str(info.value) and '"conn"' in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [
        "a",
        ("a", [], []),
        (1, [], [], Policy(), None),
        ("a", "x", [], Policy(), None),
        ("a", [1], [], Policy(), None),
        ("a", [], [], None, None),
        ("a", [], [], Policy(), "release"),
    ],
)
def test_malformed_node_definitions_are_type_errors(bad: Any) -> None:
    with pytest.raises(TypeError):
        Graph([bad])


def test_graph_len_and_contains() -> None:
    g = Graph([node("a", ("x",)), node("b", ("a",))])
    assert len(g) == 2
    assert "a" in g and "x" not in g and 3 not in g


def test_select_orders_and_reports() -> None:
    g = Graph(
        [
            node("c", ("b", "z")),
            node("b", ("a", "y", "y")),
            node("a", ("x",)),
            node("other", ("w",)),
        ]
    )
    p = g.select(["c"])
    assert p.nodes == ("a", "b", "c")
    assert len(p) == 3
    assert p.reached == frozenset({"a", "b", "c"})
    assert p.external == ("x", "y", "z")
    assert [p.index(n) for n in p.nodes] == [0, 1, 2]
    with pytest.raises(KeyError):
        p.index("other")
    with pytest.raises(KeyError):
        p.index("x")


def test_unknown_final_var() -> None:
    g = Graph([node("a", ("x",))])
    with pytest.raises(ValueError) as info:
        g.select(["x"])
    assert str(info.value) == "Unknown selected node: 'x'"


def test_selection_arguments_must_not_be_strings() -> None:
    g = Graph([node("a")])
    with pytest.raises(TypeError):
        g.select("a")
    with pytest.raises(TypeError):
        g.select(["a"], "a")


def test_replaced_nodes_are_reached_not_walked() -> None:
    g = Graph([node("a", ("x",)), node("b", ("a",)), node("c", ("b",))])
    p = g.select(["c"], {"b", "not-a-node"})
    assert p.nodes == ("c",)
    assert p.reached == frozenset({"b", "c"})
    assert p.external == ()


def test_cycles_are_reported_with_their_nodes() -> None:
    g = Graph([node("top", ("a",)), node("a", ("b",)), node("b", ("a",))])
    with pytest.raises(ValueError) as info:
        g.select(["top"])
    assert "'a' -> 'b' -> 'a'" in str(info.value)
    # only the selected part must be acyclic
    g2 = Graph([node("fine"), node("a", ("b",)), node("b", ("a",))])
    assert g2.select(["fine"]).nodes == ("fine",)


def test_deep_chain_selects_without_recursion() -> None:
    n = 20_000
    nodes = [node("n0")] + [node(f"n{i}", (f"n{i - 1}",)) for i in range(1, n)]
    p = Graph(nodes).select([f"n{n - 1}"])
    assert len(p) == n and p.nodes[0] == "n0"


def test_shutdown_order_waves() -> None:
    p = plan_of(
        node("conn", release=Policy()),
        node("tx", ("conn",), release=Policy()),
        node("query", ("tx",)),
        node("cache", release=Policy()),
        finals=("query", "cache"),
    )
    assert p.shutdown_order() == [["cache", "tx"], ["conn"]]


# --------------------------------------------------------------------------------------
# Run driven by hand


def jobs_of(commands: list[_core.Command], op: int) -> list[int]:
    return sorted(job for o, job, _, _ in commands if o == op)


def test_chain_runs_one_after_another() -> None:
    p = plan_of(
        node("a", ("x",)),
        node("b", ("a",)),
        node("c", ("b",), policy=Policy(timeout=3)),
        finals=("c",),
    )
    run = Run(p)
    assert run.start() == [(START, 0, 0, None)]
    assert run.pending == 1
    assert run.succeeded(0) == [(START, 1, 0, None)]
    assert run.succeeded(1) == [(START, 2, 0, 3.0)]
    assert run.succeeded(2) == []
    assert run.pending == 0
    assert run.succeeded_jobs() == [0, 1, 2]
    assert not run.finished
    assert run.begin_shutdown() == []
    assert run.finished


def test_succeeded_before_is_none_only_for_the_plain_first_start_of_the_next_job() -> None:
    p = plan_of(
        node("a", ("x",)),
        node("b", ("a",)),
        node("c", ("b",), policy=Policy(timeout=3)),
        node("d", ("c",)),
        finals=("d",),
    )
    run = Run(p)
    assert run.start() == [(START, 0, 0, None)]
    # b's first START, alone, is what the caller carries out: no list
    assert run.succeeded_before(0, 1) is None
    assert run.pending == 1
    # c's START has a timeout: the commands, as succeeded() gives them
    assert run.succeeded_before(1, 2) == [(START, 2, 0, 3.0)]
    # a START of another job than the one named: the commands
    assert run.succeeded_before(2, 7) == [(START, 3, 0, None)]
    assert run.succeeded_before(3, 4) == []
    assert run.succeeded_jobs() == [0, 1, 2, 3]


def test_fan_out_starts_together_and_joins() -> None:
    p = plan_of(
        node("src"),
        node("l", ("src",)),
        node("r", ("src",)),
        node("join", ("l", "r")),
        finals=("join",),
    )
    run = Run(p)
    assert run.start() == [(START, p.index("src"), 0, None)]
    started = run.succeeded(p.index("src"))
    assert jobs_of(started, START) == sorted([p.index("l"), p.index("r")])
    assert run.pending == 2
    assert run.succeeded(p.index("l")) == []
    assert run.succeeded(p.index("r")) == [(START, p.index("join"), 0, None)]


def test_retries_sleep_within_bounds_then_fail_for_good() -> None:
    policy = Policy(timeout=5, retries=2, initial_delay=0.5)
    p = plan_of(node("a", policy=policy), node("b"), finals=("a", "b"))
    run = Run(p, seed=42)
    a, b = p.index("a"), p.index("b")
    run.start()
    for k in range(2):
        decided, [(op, job, attempt, delay)] = run.failed(a, True)
        assert (op, job, attempt) == (SLEEP, a, k)
        assert delay is not None
        assert decided == delay  # what the core decided is what the SLEEP carries
        low, high = policy.delay_bounds(k)
        assert low <= delay <= high
        assert run.elapsed(a) == [(START, a, k + 1, 5.0)]
    assert run.attempts(a) == 3
    # third failure: retries exhausted, the running sibling is cancelled
    assert run.failed(a, True) == (None, [(CANCEL, b, 0, None)])
    assert run.aborted
    assert run.pending == 1
    with pytest.raises(RuntimeError, match="pending"):
        run.begin_shutdown()
    assert run.succeeded(b) == []  # stale: only drained counts now
    assert run.pending == 1
    assert run.drained(b) == []
    assert run.pending == 0
    assert run.succeeded_jobs() == []


def test_seeded_runs_reproduce_their_delays() -> None:
    p = plan_of(node("a", policy=Policy(retries=5)), finals=("a",))

    def delays(seed: int) -> list[float | None]:
        run = Run(p, seed)
        run.start()
        out = []
        for _ in range(5):
            _, [(_, _, _, delay)] = run.failed(0, True)
            out.append(delay)
            run.elapsed(0)
        return out

    assert delays(7) == delays(7)
    assert delays(7) != delays(8)
    assert delays(-1) == delays(2**64 - 1)  # seeds are taken modulo 2**64
    assert len(delays(10**40)) == 5


def test_nonretryable_failure_stops_waits_and_starts_nothing() -> None:
    p = plan_of(
        node("a", policy=Policy(retries=3)), node("b"), node("c", ("b",)), finals=("a", "c")
    )
    a, b = p.index("a"), p.index("b")
    run = Run(p, seed=0)
    run.start()
    _, [(op, _, _, _)] = run.failed(a, True)
    assert op == SLEEP
    assert run.failed(b, False) == (None, [(STOP_SLEEP, a, 0, None)])
    assert run.pending == 0
    assert run.elapsed(a) == []  # the timer fired anyway: ignored
    assert run.cancel() == []


def test_cancel_is_idempotent() -> None:
    p = plan_of(node("a", policy=Policy(retries=1)), node("b"), finals=("a", "b"))
    run = Run(p, seed=1)
    run.start()
    run.failed(p.index("a"), True)
    commands = run.cancel()
    assert sorted(commands) == sorted(
        [(STOP_SLEEP, p.index("a"), 0, None), (CANCEL, p.index("b"), 0, None)]
    )
    assert run.aborted
    assert run.cancel() == []
    assert run.drained(p.index("b")) == []
    assert run.begin_shutdown() == []
    assert run.finished


def test_unstarted_first_attempt_owes_no_release() -> None:
    p = plan_of(node("conn", release=Policy()), node("boom"), finals=("conn", "boom"))
    conn, boom = p.index("conn"), p.index("boom")
    run = Run(p)
    run.start()
    assert run.started(conn)
    assert run.failed(boom, False) == (None, [(CANCEL, conn, 0, None)])
    assert run.unstarted(conn) == []
    assert not run.started(conn)
    assert run.attempts(conn) == 0
    assert run.begin_shutdown() == []
    assert run.finished


def test_unstarted_running_job_aborts_the_run() -> None:
    p = plan_of(node("a"), node("b"), finals=("a", "b"))
    run = Run(p)
    run.start()
    assert run.unstarted(p.index("a")) == [(CANCEL, p.index("b"), 0, None)]
    assert run.aborted


def test_rejected_input_fails_the_node_without_an_attempt() -> None:
    p = plan_of(node("conn", release=Policy()), node("b"), finals=("conn", "b"))
    conn, b = p.index("conn"), p.index("b")
    run = Run(p)
    run.start()
    assert run.rejected(conn) == [(CANCEL, b, 0, None)]
    assert run.aborted
    assert run.attempts(conn) == 0 and not run.started(conn)  # no release owed
    with pytest.raises(RuntimeError, match=r"Run\.rejected: job 0 \(node 'conn'\) is rejected"):
        run.rejected(conn)
    assert run.drained(b) == []
    assert run.begin_shutdown() == []
    assert run.finished


def test_instant_retries_are_an_option_of_the_run() -> None:
    policy = Policy(retries=2, initial_delay=30.0)
    p = plan_of(
        node("conn", release=Policy(retries=1, initial_delay=30.0)),
        node("a", ("conn",), policy=policy),
        finals=("a",),
    )
    conn, a = p.index("conn"), p.index("a")
    assert not Run(p).instant_retries
    run = Run(p, seed=3, instant_retries=True)
    assert run.instant_retries
    run.start()
    run.succeeded(conn)
    for k in range(2):
        assert run.failed(a, True) == (0.0, [(SLEEP, a, k, 0.0)])
        assert run.elapsed(a) == [(START, a, k + 1, None)]
    assert run.failed(a, True) == (None, [])
    assert run.begin_shutdown() == [(START, len(p) + conn, 0, None)]
    assert run.failed(len(p) + conn, True) == (0.0, [(SLEEP, len(p) + conn, 0, 0.0)])
    with pytest.raises(TypeError):
        Run(p, None, True)  # type: ignore[misc]


def test_graph_refuses_forward_retries_on_an_owned_node() -> None:
    with pytest.raises(
        ValueError, match=r"^Acquisition retries require attempt cleanup: conn \(.*set retries=0"
    ):
        Graph(
            [
                node("plain", policy=Policy(retries=1)),
                node("conn", policy=Policy(retries=1), release=Policy()),
            ]
        )
    Graph([node("conn", release=Policy(retries=3))])  # the release's own retries are fine


def test_shutdown_edges_are_the_order_the_run_follows() -> None:
    p = plan_of(
        node("conn", release=Policy()),
        node("tx", ("conn",), release=Policy()),
        node("query", ("tx",)),
        node("mid", ("conn",)),
        node("other", ("mid",), release=Policy()),
        finals=("query", "other"),
    )
    assert p.shutdown_edges() == [("other", "conn"), ("tx", "conn")]
    assert plan_of(node("a"), finals=("a",)).shutdown_edges() == []


def test_shutdown_follows_dependencies_and_survives_release_failures() -> None:
    p = plan_of(
        node("conn", release=Policy(timeout=2)),
        node("tx", ("conn",), release=Policy()),
        node("query", ("tx",)),
        node("cache", release=Policy()),
        finals=("query", "cache"),
    )
    n = len(p)
    conn, tx, query, cache = (p.index(x) for x in ("conn", "tx", "query", "cache"))
    run = Run(p)
    pending = run.start()
    while pending:
        _, job, _, _ = pending.pop()
        pending.extend(run.succeeded(job))
    first = run.begin_shutdown()
    assert jobs_of(first, START) == sorted([n + tx, n + cache])
    assert all(attempt == 0 for _, _, attempt, _ in first)
    assert run.pending == 2 and not run.finished
    assert run.cancel() == []  # no effect on releases
    assert run.failed(n + tx, False) == (None, [(START, n + conn, 0, 2.0)])
    assert run.succeeded(n + conn) == []
    assert not run.finished
    assert run.succeeded(n + cache) == []
    assert run.finished and run.pending == 0
    assert run.attempts(n + conn) == 1
    assert run.started(n + conn)
    assert not run.started(n + query)  # query owns nothing: no release job ever starts


def test_releases_retry_under_their_own_policy() -> None:
    p = plan_of(node("conn", release=Policy(retries=1, initial_delay=0)), finals=("conn",))
    run = Run(p)
    run.start()
    run.failed(0, True)  # forward: no retries
    assert run.aborted
    assert run.begin_shutdown() == [(START, 1, 0, None)]
    assert run.failed(1, True) == (0.0, [(SLEEP, 1, 0, 0.0)])
    assert run.elapsed(1) == [(START, 1, 1, None)]
    assert run.failed(1, True) == (None, [])
    assert run.finished


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: r.succeeded(5), "not a job"),
        (lambda r: r.succeeded(-1), "not a job"),
        (lambda r: r.succeeded(10**30), "not a job"),
        (lambda r: r.succeeded(1), "is waiting"),
        (lambda r: r.elapsed(0), "is running"),
        (lambda r: r.drained(0), "is running"),
        (lambda r: r.failed(1, True), "is waiting"),
        (lambda r: r.start(), "already started"),
        (lambda r: r.attempts(4), "not a job"),
        (lambda r: r.begin_shutdown(), "pending"),
    ],
)
def test_misuse_raises_runtime_error_and_changes_nothing(call: Any, match: str) -> None:
    p = plan_of(node("a"), node("b", ("a",)), finals=("b",))
    run = Run(p)
    run.start()
    with pytest.raises(RuntimeError, match=match):
        call(run)
    assert run.pending == 1 and not run.aborted
    assert run.succeeded(0) == [(START, 1, 0, None)]


def test_run_arguments_are_type_checked() -> None:
    p = plan_of(node("a"), finals=("a",))
    with pytest.raises(TypeError):
        Run(p, seed="1")  # type: ignore[arg-type]
    run = Run(p)
    run.start()
    with pytest.raises(TypeError):
        run.succeeded("0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        run.failed(0, 1)  # type: ignore[arg-type]
    assert run.pending == 1


def test_empty_plan_finishes_at_once() -> None:
    p = Graph([node("a")]).select(["a"], ["a"])
    assert len(p) == 0
    run = Run(p)
    assert run.start() == []
    assert run.pending == 0
    assert run.begin_shutdown() == []
    assert run.finished


def test_out_of_range_job_ids_are_reported_as_given() -> None:
    graph = _core.Graph([("a", [], [], _core.Policy(), None)])
    run = _core.Run(graph.select(["a"]))
    run.start()
    with pytest.raises(RuntimeError, match=r"Run\.failed: 1180591620717411303424 is not a job"):
        run.failed(2**70, True)
    with pytest.raises(RuntimeError, match=r"Run\.attempts: -1180591620717411303424 is not"):
        run.attempts(-(2**70))


# --------------------------------------------------------------------------------------
# retry_after hints: the core's decision comes with its reason (docs/internals.md)


@pytest.mark.parametrize(
    ("hint", "refused"),
    [
        (0.5, None),
        (None, None),
        (-1.0, "returned an unusable wait (negative, NaN, or infinite without max_delay)"),
        (float("nan"), "returned an unusable wait (negative, NaN, or infinite without max_delay)"),
        ("5", "returned a str instead of a number or None"),
        (True, "returned a bool instead of a number or None"),
    ],
)
def test_a_refused_hint_says_why(hint: object, refused: str | None) -> None:
    policy = Policy(retries=1, retryable_exceptions=(OSError,), retry_after=lambda exc: None)
    run = Run(plan_of(node("a", policy=policy), finals=("a",)))
    [(_, a, _, _)] = run.start()
    assert run.failed(a, True) == (None, [(_core.HINT, a, 0, None)])
    decision = run.hinted(a, hint)
    assert decision.refused == refused
    if refused is None:
        assert decision.delay is not None
        assert [command[0] for command in decision.commands] == [SLEEP]
    else:
        assert decision.delay is None
        assert [command[0] for command in decision.commands] == [_core.BAD_HINT]
    assert "HintDecision(" in repr(decision)


def test_a_hook_that_raised_is_refused_without_a_reason_of_the_core() -> None:
    policy = Policy(retries=1, retryable_exceptions=(OSError,), retry_after=lambda exc: None)
    run = Run(plan_of(node("a", policy=policy), finals=("a",)))
    [(_, a, _, _)] = run.start()
    run.failed(a, True)
    decision = run.hint_failed(a)
    assert (decision.delay, decision.refused) == (None, None)
    assert [command[0] for command in decision.commands] == [_core.BAD_HINT]
