"""No Rust panic crosses into Python, whatever user objects do
(docs/contract.md#hostile-bindings).

Every entry point of ``sdax_hamilton._core`` is fed hostile objects, drawn by hypothesis:
``str`` subclasses whose ``__hash__``, ``__eq__`` or ``__repr__`` change the dict they sit
in, raise or lie; ints and floats (and their subclasses) whose ``__index__``, ``__float__``
and comparisons do the same; huge ints of either sign, NaN, infinities, ``numpy.float64``;
exception classes whose metaclass misbehaves; iterables that change while they are read.
Whatever happens, a call either returns or raises a documented class (``TypeError``,
``ValueError``, ``RuntimeError`` for misuse of a ``Run``, ``KeyError`` from
``Plan.index``, ``OverflowError`` for a number a ``float`` argument cannot hold), or the
very exception the hostile object raised; never ``pyo3_runtime.PanicException`` (a
``BaseException`` that ``except Exception`` does not catch). A run fed hostile input keys
fails with the documented input error or its own key's exception, or runs on one
consistent reading of its inputs.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError, _core, execution, shutdown
from sdax_hamilton._core import Graph, Policy, Run
from sdax_hamilton._types import split_check

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Hostile(Exception):
    """What the hostile objects raise."""


class Trap:
    """What a hostile dunder does on each call after the first ``after`` calls: change
    ``target`` (add a key, remove one, clear it), raise, or lie."""

    def __init__(self, action: str, after: int, target: dict[Any, Any] | list[Any]) -> None:
        self.action = action
        self.after = after
        self.target = target
        self.calls = 0
        self.armed = False  # while an example is built, the objects behave
        _UNARMED.append(self)

    def fire(self) -> bool:
        """Act; ``True`` when the dunder should lie."""
        if not self.armed:
            return False
        self.calls += 1
        if self.calls <= self.after:
            return False
        target = self.target
        if self.action == "add":
            if isinstance(target, dict):
                target[f"extra{self.calls}"] = self.calls
            else:
                target.append(self.calls)
        elif self.action == "remove" and target:
            if isinstance(target, dict):
                target.popitem()
            else:
                target.pop()
        elif self.action == "clear":
            target.clear()
        elif self.action == "raise":
            raise Hostile(f"call {self.calls}")
        return self.action == "lie"


_UNARMED: list[Trap] = []


def arm() -> None:
    """From now on, every trap made so far acts."""
    while _UNARMED:
        _UNARMED.pop().armed = True


ACTIONS = ("add", "remove", "clear", "raise", "lie", "none")


class Key(str):
    """A ``str`` whose own code acts through its trap."""

    trap: Trap

    def __hash__(self) -> int:
        if self.trap.fire():
            return self.trap.calls  # a different hash on every call
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        if self.trap.fire():
            return bool(self.trap.calls % 2)
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        self.trap.fire()
        return str.__repr__(self)


def key(text: str, trap: Trap) -> Key:
    k = Key(text)
    k.trap = trap
    return k


class LyingInt(int):
    """An ``int`` whose conversions and comparisons act through its trap."""

    trap: Trap

    def __index__(self) -> int:
        return -7 if self.trap.fire() else int(self)

    def __int__(self) -> int:
        return -7 if self.trap.fire() else int.__int__(self)

    def __float__(self) -> float:
        return math.nan if self.trap.fire() else int.__float__(self)

    def __lt__(self, other: object) -> bool:
        return True if self.trap.fire() else int.__lt__(self, other)  # type: ignore[operator]

    def __gt__(self, other: object) -> bool:
        return True if self.trap.fire() else int.__gt__(self, other)  # type: ignore[operator]

    def __eq__(self, other: object) -> bool:
        return True if self.trap.fire() else int.__eq__(self, other)

    __hash__ = int.__hash__

    def __and__(self, other: int) -> Any:
        return "lie" if self.trap.fire() else int.__and__(self, other)

    def __repr__(self) -> str:
        self.trap.fire()
        return int.__repr__(self)


class LyingFloat(float):
    """A ``float`` whose conversions and comparisons act through its trap."""

    trap: Trap

    def __float__(self) -> float:
        return -1.0 if self.trap.fire() else float.__float__(self)

    def __lt__(self, other: object) -> bool:
        return True if self.trap.fire() else float.__lt__(self, other)  # type: ignore[operator]

    def __repr__(self) -> str:
        self.trap.fire()
        return float.__repr__(self)


class Indexable:
    """Not an int, but has ``__index__`` (and ``__float__``) acting through its trap."""

    def __init__(self, value: int, trap: Trap) -> None:
        self.value, self.trap = value, trap

    def __index__(self) -> Any:
        return "not an int" if self.trap.fire() else self.value

    def __float__(self) -> Any:
        return "not a float" if self.trap.fire() else float(self.value)


class RaisingRepr:
    def __repr__(self) -> str:
        raise Hostile("repr")


class Meta(type):
    """A metaclass whose checks act through the class's trap."""

    trap: Trap

    def __subclasscheck__(cls, other: Any) -> bool:
        if cls.trap.fire():
            return True
        return type.__subclasscheck__(cls, other)

    def __instancecheck__(cls, other: Any) -> bool:
        if cls.trap.fire():
            return True
        return type.__instancecheck__(cls, other)

    def __eq__(cls, other: object) -> bool:
        return True if cls.trap.fire() else cls is other

    def __hash__(cls) -> int:
        return 0 if cls.trap.fire() else id(cls)

    def __repr__(cls) -> str:
        cls.trap.fire()
        return type.__repr__(cls)


def hostile_exception_class(trap: Trap) -> type[BaseException]:
    cls = Meta("HostileError", (Exception,), {})
    cls.trap = trap
    return cls  # type: ignore[return-value]  # a Meta instance is an exception class


class MutatingIterable:
    """An iterable that changes ``items`` (and may raise) while it is iterated."""

    def __init__(self, items: list[Any], trap: Trap) -> None:
        self.items, self.trap = items, trap

    def __iter__(self) -> Iterator[Any]:
        i = 0
        while i < len(self.items):
            self.trap.fire()
            if i < len(self.items):
                yield self.items[i]
            i += 1


# --------------------------------------------------------------------------------------
# strategies

traps = st.builds(
    Trap,
    action=st.sampled_from(ACTIONS),
    after=st.integers(0, 6),
    target=st.just({}),
)

huge_ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from(
        [2**63, -(2**63) - 1, 2**64, 2**1023, 2**1024, -(2**1024), 10**400, -(10**400)]
    ),
    st.integers(1, 5000).map(lambda e: 2**e),
    st.integers(1, 5000).map(lambda e: -(2**e)),
)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 5e-324]))


@st.composite
def lying_ints(draw: st.DrawFn) -> LyingInt:
    n = LyingInt(draw(huge_ints))
    n.trap = draw(traps)
    return n


@st.composite
def lying_floats(draw: st.DrawFn) -> LyingFloat:
    f = LyingFloat(draw(floats))
    f.trap = draw(traps)
    return f


@st.composite
def indexables(draw: st.DrawFn) -> Indexable:
    return Indexable(draw(huge_ints), draw(traps))


@st.composite
def hostile_keys(draw: st.DrawFn) -> Key:
    return key(draw(st.text(max_size=4)), draw(traps))


numbers = st.one_of(
    huge_ints,
    floats,
    lying_ints(),
    lying_floats(),
    floats.map(numpy.float64),
    st.booleans(),
    indexables(),
)
anything = st.one_of(
    numbers,
    st.none(),
    st.text(max_size=3),
    hostile_keys(),
    st.just(RaisingRepr()),
    traps.map(hostile_exception_class),
    st.tuples(traps.map(hostile_exception_class)),
    st.just(object()),
)

ALLOWED = (TypeError, ValueError, RuntimeError, KeyError, OverflowError, Hostile)


def outcome(call: Callable[[], Any], allowed: tuple[type[BaseException], ...] = ALLOWED) -> Any:
    """``call()``'s result, or the exception it raised, which must be one of ``allowed``
    (never a panic). Arms the traps made so far."""
    arm()
    try:
        return call()
    except BaseException as exc:  # a panic is a BaseException
        assert type(exc).__name__ != "PanicException", f"a Rust panic crossed: {exc!r}"
        assert isinstance(exc, allowed), f"undocumented {type(exc).__name__}: {exc!r}"
        return exc


# --------------------------------------------------------------------------------------
# the panic of the report: a key whose __hash__ changes the inputs dict during a run


async def test_a_key_changing_the_inputs_while_they_are_read_is_no_panic(make_module: Any) -> None:
    plan = Driver(make_module("def a(x: int) -> int:\n    return x + 1\n")).prepare(["a"])
    armed = False
    inputs: dict[Any, Any] = {}

    class Growing(str):
        """Adds a key to the inputs whenever it is hashed or compared."""

        def __hash__(self) -> int:
            if armed:
                inputs[f"y{len(inputs)}"] = 1
            return str.__hash__(self)

        def __eq__(self, other: object) -> bool:
            if armed:
                inputs[f"y{len(inputs)}"] = 1
            return str.__eq__(self, other)

    inputs[Growing("x")] = 1
    armed = True
    # The dict grows while it is read: the run refuses it as inputs of the wrong shape
    # (the documented input error), where it used to raise PanicException.
    with pytest.raises(ValueError, match="Input shape mismatch"):
        await plan.execute(inputs=inputs)
    assert len(inputs) > 1

    class Hashing(str):
        """Adds a key whenever it is hashed (the case of the report): reading the inputs
        never needs its hash again, so the run takes them as they were."""

        def __hash__(self) -> int:
            if armed:
                inputs[f"z{len(inputs)}"] = 1
            return str.__hash__(self)

        __eq__ = str.__eq__

    armed = False
    inputs = {Hashing("x"): 1}
    armed = True
    assert await plan.execute(inputs=inputs) == {"a": 2}


# --------------------------------------------------------------------------------------
# InputTable.fill: the value table of a run


def _table() -> _core.InputTable:
    return _core.InputTable(
        frozenset({"x", "y"}), {"c": 0}, [("x", *split_check(int.__instancecheck__))]
    )


@st.composite
def hostile_inputs(draw: st.DrawFn) -> dict[Any, Any]:
    inputs: dict[Any, Any] = {}
    names = draw(st.lists(st.sampled_from(["x", "y", "z", ""]), max_size=4, unique=True))
    for name in names:
        trap = Trap(draw(st.sampled_from(ACTIONS)), draw(st.integers(0, 4)), inputs)
        value = draw(st.one_of(st.integers(), st.text(max_size=2), numbers))
        inputs[key(name, trap) if draw(st.booleans()) else name] = value
    return inputs


@FUZZ
@given(inputs=hostile_inputs())
def test_fill_is_none_or_exactly_the_plan_s_table(inputs: dict[Any, Any]) -> None:
    """A key's own code may change the dict, raise or lie: ``fill`` answers ``None`` (the
    plan's checks say what is wrong) or a table keyed by the plan's own plain names."""
    table = outcome(lambda: _table().fill(inputs), ())
    if table is not None:
        assert set(table) == {"c", "x", "y"}
        assert all(type(k) is str for k in table)
        assert type(table["x"]) in (int, bool) or isinstance(table["x"], int)


@FUZZ
@given(inputs=hostile_inputs())
def test_a_run_with_hostile_keys_fails_as_documented_or_runs(inputs: dict[Any, Any]) -> None:
    plan = _plan()
    result = outcome(
        lambda: loop_support.run(plan.execute(inputs=inputs)), (ValueError, TypeError, Hostile)
    )
    if not isinstance(result, BaseException):
        assert result == {"s": result["s"]} and isinstance(result["s"], int)


_PLANS: list[Any] = []


def _plan() -> Any:
    if not _PLANS:
        from support.modules import load_module

        module = load_module("def s(x: int, y: object) -> int:\n    return x\n")
        _PLANS.append(Driver(module).prepare(["s"]))
    return _PLANS[0]


def test_an_interrupt_from_a_key_propagates_as_itself() -> None:
    armed = False

    class Interrupting(str):
        def __eq__(self, other: object) -> bool:
            if armed:
                raise KeyboardInterrupt
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    inputs = {Interrupting("x"): 1, "y": 2}
    armed = True
    arm()
    with pytest.raises(KeyboardInterrupt):
        _table().fill(inputs)


# --------------------------------------------------------------------------------------
# Policy and the numbers it reads

POLICY_ARGUMENTS = (
    "timeout",
    "retries",
    "retryable_exceptions",
    "initial_delay",
    "backoff_factor",
    "max_delay",
    "retry_after",
)


@FUZZ
@given(kwargs=st.dictionaries(st.sampled_from(POLICY_ARGUMENTS), anything, max_size=4))
def test_policy_refuses_as_documented_or_builds(kwargs: dict[str, Any]) -> None:
    policy = outcome(lambda: Policy(**kwargs), (TypeError, ValueError, Hostile))
    if isinstance(policy, Policy):
        for call in (
            lambda: repr(policy),
            lambda: hash(policy),
            lambda: policy == Policy(**kwargs),
            lambda: policy.__reduce__(),
            lambda: policy.delay_bounds(0),
        ):
            outcome(call, (TypeError, ValueError, Hostile))


@FUZZ
@given(key=hostile_keys(), value=anything)
def test_policy_keyword_names_are_read_without_panic(key: Key, value: Any) -> None:
    outcome(lambda: Policy(**{key: value}), (TypeError, ValueError, Hostile))


@FUZZ
@given(args=st.tuples(anything, anything, anything, anything, anything, anything, anything))
def test_make_policy_refuses_as_documented_or_builds(args: tuple[Any, ...]) -> None:
    make = _core._make_policy  # type: ignore[attr-defined]  # pickling's helper
    outcome(lambda: make(*args), (TypeError, ValueError, Hostile))


@FUZZ
@given(value=anything)
def test_run_budget_and_delay_bounds_read_any_object(value: Any) -> None:
    outcome(lambda: _core.run_budget(value), (TypeError, ValueError, Hostile))
    outcome(lambda: Policy(retries=3).delay_bounds(value), (TypeError, ValueError, Hostile))
    assert type(outcome(lambda: _core.is_number(value), ())) is bool
    room = outcome(lambda: _core.has_room(value))
    assert type(room) is bool or isinstance(room, (TypeError, OverflowError, Hostile))


@FUZZ
@given(kwargs=st.dictionaries(st.sampled_from(POLICY_ARGUMENTS), anything, max_size=3))
def test_declarations_refuse_as_documented_or_decorate(kwargs: dict[str, Any]) -> None:
    """The public face of the policy: ``execution(...)`` and ``shutdown(...)``."""

    def acquire() -> int:
        return 1

    outcome(lambda: execution(**kwargs), (TypeError, ValueError, Hostile))
    outcome(lambda: shutdown(of=acquire, **kwargs), (TypeError, ValueError, Hostile))


@FUZZ
@given(timeout=anything)
def test_a_run_s_timeout_is_read_without_panic(timeout: Any) -> None:
    plan = _plan()
    outcome(
        lambda: loop_support.run(plan.execute(inputs={"x": 1, "y": 2}, timeout=timeout)),
        (TypeError, ValueError, Hostile, ExecutionError),  # a deadline of 0 has passed
    )


# --------------------------------------------------------------------------------------
# Graph and Plan


@st.composite
def hostile_names(draw: st.DrawFn) -> Any:
    return draw(st.one_of(hostile_keys(), st.text(max_size=3), st.just("\ud800"), anything))


@FUZZ
@given(
    names=st.lists(hostile_names(), min_size=1, max_size=4),
    trap=traps,
    wrap=st.booleans(),
)
def test_graph_and_selection_read_hostile_names(names: list[Any], trap: Trap, wrap: bool) -> None:
    nodes: list[Any] = [(n, [], [], Policy(), None) for n in names]
    nodes.append(("last", MutatingIterable(list(names), trap), [], Policy(), None))
    trap.target = nodes
    source: Any = MutatingIterable(nodes, trap) if wrap else nodes
    graph = outcome(lambda: Graph(source))
    if not isinstance(graph, Graph):
        return
    for name in [*names, "last"]:
        outcome(functools.partial(graph.__contains__, name))
        selected = MutatingIterable([name], trap)
        plan = outcome(functools.partial(graph.select, selected))  # type: ignore[arg-type]
        if isinstance(plan, _core.Plan):
            outcome(functools.partial(plan.index, name))
            outcome(plan.shutdown_order)
            outcome(plan.shutdown_edges)


# --------------------------------------------------------------------------------------
# Run


def _small_plan() -> _core.Plan:
    return Graph(
        [
            ("a", [], [], Policy(retries=2, initial_delay=0, retry_after=lambda e: None), None),
            ("b", ["a"], [], Policy(), Policy(retries=1)),
        ]
    ).select(["b"])


RUN_EVENTS = (
    "start",
    "succeeded",
    "failed",
    "hinted",
    "hint_failed",
    "elapsed",
    "drained",
    "unstarted",
    "rejected",
    "cancel",
    "begin_shutdown",
    "begin_shutdown_or_finish",
    "abandon",
    "attempts",
    "started",
    "clock",
    "set_deadline",
)


@FUZZ
@given(
    seed=anything,
    steps=st.lists(
        st.tuples(st.sampled_from(RUN_EVENTS), st.one_of(st.integers(-1, 4), anything), anything),
        max_size=25,
    ),
)
def test_a_run_driven_by_hostile_arguments_never_panics(
    seed: Any, steps: list[tuple[str, Any, Any]]
) -> None:
    run = outcome(lambda: Run(_small_plan(), seed))
    if not isinstance(run, Run):
        run = Run(_small_plan())
    for event, job, extra in steps:
        method = getattr(run, event)
        if event in ("start", "cancel", "begin_shutdown", "begin_shutdown_or_finish", "abandon"):
            outcome(method)
        elif event == "failed":
            outcome(functools.partial(method, job, True))
        elif event == "hinted":
            outcome(functools.partial(method, job, extra))
        elif event in ("clock", "set_deadline"):
            outcome(functools.partial(method, extra))
        else:
            outcome(functools.partial(method, job))
        outcome(lambda: (run.pending, run.aborted, run.finished, run.succeeded_jobs(), repr(run)))


# --------------------------------------------------------------------------------------
# Carrier, StepCatcher, InputTable constructors


@FUZZ
@given(keyword=hostile_keys(), name=hostile_names(), trap=traps)
def test_carrier_and_table_constructors_read_hostile_specs(
    keyword: Key, name: Any, trap: Trap
) -> None:
    def f(x: int) -> int:
        return x

    spec = (f, name, [(keyword, "x")], None, [(keyword, int, True)], None, int, False, True)
    outcome(
        lambda: _core.Carrier([_carried(*spec)], [None], object, callable, type(None), float),
        (TypeError, ValueError, Hostile),
    )
    names = MutatingIterable(["x", keyword], trap)
    outcome(
        lambda: _core.InputTable(frozenset(names), {keyword: 1}, [(keyword, int, True)]),
        (TypeError, ValueError, Hostile),
    )
    catcher = _core.StepCatcher()
    outcome(lambda: catcher(name, context=keyword), (TypeError,))
    outcome(lambda: catcher(name), (TypeError,))
    assert catcher.take() is not None


def _carried(
    call: Any,
    name: Any,
    args: Any,
    defaults: Any,
    checks: Any,
    output_check: Any,
    output_type: Any,
    owned: bool,
    positional: bool,
) -> Any:
    """A node's inline call as the Carrier takes it (``_core.CarriedNode``)."""
    return _core.CarriedNode(
        call=call,
        name=name,
        args=args,
        defaults=defaults,
        checks=checks,
        output_check=output_check,
        output_type=output_type,
        owned=owned,
        positional=positional,
    )


def test_a_carried_node_with_a_bulkhead_needs_a_wake_and_the_core_s_objects() -> None:
    """A permit a carried attempt gives back may go to a waiter, which only ``wake`` can
    wake: a carrier without one is refused; a bulkhead or breaker must be the core's."""

    def f(x: int) -> int:
        return x

    def node(**guards: Any) -> Any:
        return _core.CarriedNode(
            call=f, name="f", args=[("x", "x")], defaults=None, checks=[], output_check=None,
            output_type=int, owned=False, positional=True, **guards,
        )  # fmt: skip

    bulkhead = _core.Bulkhead(1, 0, None)
    breaker = _core.CircuitBreaker(0.5, 20, 30.0, 5.0, 1, None)
    with pytest.raises(ValueError, match="no wake function"):
        _core.Carrier([node(bulkhead=bulkhead)], [None], object, callable, type(None), float)
    carrier = _core.Carrier(
        [node(bulkhead=bulkhead, breaker=breaker)],
        [None], object, callable, type(None), float, wake=print,
    )  # fmt: skip
    assert len(carrier) == 1
    _core.Carrier([node(breaker=breaker)], [None], object, callable, type(None), float)
    with pytest.raises(TypeError):
        node(bulkhead=breaker)
    with pytest.raises(TypeError):
        node(breaker=object())


class Lying(list[Any]):
    """A list whose ``__len__`` claims ``claimed`` items (pyo3 would size a vector by it)."""

    claimed = 0

    def __len__(self) -> int:
        return self.claimed


@FUZZ
@given(
    claimed=st.one_of(st.integers(0, 10), st.sampled_from([sys.maxsize, 2**40, 2**62])),
    real=st.integers(0, 3),
)
def test_a_sequence_s_own_length_sizes_nothing(claimed: int, real: int) -> None:
    """A sequence claiming ``sys.maxsize`` items was a capacity-overflow panic, or an
    allocation failure that aborted the process; it is read by iterating it."""

    def lying(items: list[Any]) -> Lying:
        made = Lying(items)
        made.claimed = claimed
        return made

    def f(x: int) -> int:
        return x

    checks = lying([("x", int, True)] * real)
    table = outcome(lambda: _core.InputTable(frozenset({"x"}), {}, checks))
    assert isinstance(table, _core.InputTable)
    node = _carried(f, "f", lying([("x", "x")] * real), None, lying([]), None, int, False, False)
    carrier = outcome(
        lambda: _core.Carrier(
            lying([node] * real), lying([None] * real), object, callable, type(None), float
        )
    )
    assert isinstance(carrier, _core.Carrier) and len(carrier) == real
    nodes = lying([(f"n{i}", lying([]), lying([]), Policy(), None) for i in range(real)])
    graph = outcome(lambda: Graph(nodes))
    assert isinstance(graph, Graph) and len(graph) == real
    if real:
        assert len(graph.select(lying(["n0"]))) == 1


@FUZZ
@given(
    trap=traps,
    returned=anything,
    positional=st.booleans(),
    owned=st.booleans(),
    timeout=st.sampled_from([None, 5.0]),
)
def test_the_carrier_runs_hostile_calls_and_checks_without_panic(
    trap: Trap, returned: Any, positional: bool, owned: bool, timeout: float | None
) -> None:
    """A run carrying out its own STARTs (src/carry.rs) calls user code: the node, its
    input and output checks, its release. Each may change the run's value table, raise
    or return anything."""
    values: dict[Any, Any] = {"x": 1}
    trap.target = values

    def node(x: Any) -> Any:
        trap.fire()
        return returned

    def check(value: Any) -> bool:
        return not trap.fire()

    def release(record: Any) -> Any:
        trap.fire()
        return returned

    class Task:
        def cancelling(self) -> Any:
            return 0 if not trap.fire() else returned

    spec = (
        node,
        "n",
        [("x", "x")],
        None,
        [("x", check, False)],
        (check, False),
        int,
        owned,
        positional,
    )
    carrier = _core.Carrier(
        [_carried(*spec)], [release if owned else None], object, callable, type(None), float
    )
    policy = Policy(timeout=timeout)
    plan = Graph([("n", ["x"], [], policy, Policy() if owned else None)]).select(["n"])
    run = Run(plan)
    acquisitions: list[Any] = [None]
    carrying = (carrier, values, acquisitions, Task(), lambda: 0.0)
    outcome(functools.partial(run.start_carried, carrying))
    outcome(run.begin_shutdown_or_finish)
    outcome(functools.partial(run.succeeded, 1))


async def test_a_key_whose_hash_changes_is_an_input_error_not_a_key_error(
    make_module: Any,
) -> None:
    """A key hashed one way when the dict stored it and another when it is compared passes
    a shape check by set comparison, yet cannot be found by its name: the plan's checks
    read each input back by name, and say so with the documented input error."""
    plan = Driver(make_module("def a(x: int, y: object) -> int:\n    return x\n")).prepare(["a"])
    stored = False

    class Shifty(str):
        def __hash__(self) -> int:
            return str.__hash__(self) if stored else 12345

        __eq__ = str.__eq__

    inputs = {Shifty("x"): 1, "y": 2}
    stored = True
    with pytest.raises(ValueError, match="Input shape mismatch"):
        await plan.execute(inputs=inputs)
    with pytest.raises(ValueError, match="Input shape mismatch"):
        await plan.execute(inputs=dict(inputs))  # the Python checks, not the value table
