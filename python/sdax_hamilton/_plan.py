"""Planning: ``Driver.prepare`` (docs/contract.md#prepare), ``PreparedPlan`` and its per-call checks
(docs/contract.md#run-checks).

Everything static about a selection is decided here, once: which nodes run, which values
come from config, inputs or overrides, which edges are type-compatible, and which runtime
value checks remain necessary. The per-run work left for ``execute``/``open`` is a shape
check, the input/override value checks and the driver.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import os
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import _core, _messages
from ._branches import fan_outs
from ._executor import (
    NEVER_ENTERED,
    HeldRun,
    JobTable,
    NodeRuntime,
    ReleaseRuntime,
    RunContext,
    carrier_of,
    open_run,
)
from ._executor.threads import in_thread
from ._observe import Observer
from ._spec import InputSpec, NodeSpec
from ._types import accepts, checker, compatible, describe, mismatch, split_check, validate_type

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ._adapters import Adapters
    from ._hamilton.caching import Cache
    from ._resilience import RetryBudget

Check = Callable[[Any], bool]

_RESOURCE_OUTPUT = "Use open() to access resource outputs within their lifetime"
_NO_DEFAULTS: Mapping[str, Any] = MappingProxyType({})
"""Shared by every node without defaults: fewer objects per node for the collector."""


def compile_graph(nodes: Mapping[str, NodeSpec]) -> _core.Graph:
    """Compile every node of a Driver into the core graph (once per Driver)."""
    return _core.Graph(
        [
            (
                spec.name,
                [inp.name for inp in spec.inputs],
                spec.borrows,
                spec.policy,
                spec.release.policy if spec.release is not None else None,
            )
            for spec in nodes.values()
        ]
    )


def _names(value: object, what: str, *, allow_empty: bool) -> tuple[str, ...]:
    """Validate a collection of node names (docs/contract.md#prepare-arguments); the names
    as plain ``str`` (a subclass's methods are never called again)."""
    if isinstance(value, (str, bytes)):
        example = _messages.name(value) if isinstance(value, str) else "'name'"
        raise TypeError(
            f"{what} must be a collection of node names, not a string; "
            f"pass a list, e.g. {what}=[{example}]"
        )
    if not isinstance(value, Iterable):
        raise TypeError(
            f"{what} must be a collection of node names, not {_messages.type_name(value)}; "
            f"pass a list, e.g. {what}=['name']"
        )
    names: list[str] = []
    for item in value:
        text = _messages.plain(item)
        if not text:
            shown = _messages.type_name(item) if text is None else "''"
            raise ValueError(
                f"{what} must contain nonempty node names, got {shown}; names are non-empty str"
            )
        names.append(text)
    if len(set(names)) != len(names):
        duplicates = [name for name, count in Counter(names).items() if count > 1]
        raise ValueError(
            f"{what} contains duplicate names: {_messages.names(duplicates)}; name each once"
        )
    if not names and not allow_empty:
        raise ValueError(f"{what} must name at least one node")
    return tuple(names)


def _unknown_selected(exc: ValueError, nodes: Mapping[str, NodeSpec]) -> ValueError:
    """The core's "Unknown selected node" (src/graph.rs: it carries the name as given) with
    what to do: a close match among the nodes, or that the name is an input (which no plan
    can output)."""
    wrong = exc.__dict__.get("_sdax_unknown")
    if wrong is None:
        return exc
    text = _messages.plain(wrong) or ""
    if any(inp.name == text for spec in nodes.values() for inp in spec.inputs):
        hint = " — an input of the graph, not a node: pass it in inputs=, outputs are nodes"
    else:
        known = [name for name, spec in nodes.items() if not spec.validation_internal]
        hint = _messages.did_you_mean(text, known) + " — final_vars must name nodes of this Driver"
    # The name quoted here, not as the core could show it: a lone surrogate is kept escaped.
    return ValueError(f"Unknown selected node: {_messages.name(wrong)}{hint}")


def _dedupe(types: Iterable[Any]) -> tuple[Any, ...]:
    unique: list[Any] = []
    for tp in types:
        if not any(tp is seen or tp == seen for seen in unique):
            unique.append(tp)
    return tuple(unique)


def _all_of(types: Iterable[Any]) -> tuple[tuple[Check, Any], ...]:
    """A compiled check per annotation that needs one, with the annotation it checks."""
    return tuple((check, tp) for tp in types if (check := checker(tp)) is not None)


@dataclass(frozen=True, slots=True)
class _Program:
    """The compiled, immutable part of a plan that every run shares."""

    plan: _core.Plan
    runtimes: tuple[NodeRuntime, ...]
    config: Mapping[str, Any]
    input_checks: tuple[tuple[str, tuple[tuple[Check, Any], ...]], ...]
    """Input name -> (check, the annotation it checks) per distinct requirement."""
    override_checks: tuple[tuple[str, tuple[tuple[Check, Any], ...]], ...]
    resource_outputs: tuple[str, ...]
    seed: int | None
    specs: tuple[NodeSpec, ...]
    """Active node specs, in ``plan.nodes`` order (for pictures and reports)."""
    replaced: Mapping[str, str]
    """Reached nodes that do not run: name -> ``"config"`` or ``"override"``."""
    adapters: Adapters | None = None
    """The Driver's Hamilton lifecycle adapters, if any (docs/adapters.md)."""
    input_names: frozenset[str] = frozenset()
    """The run inputs every run must supply (the keys of ``PreparedPlan.required_inputs``)."""
    config_table: dict[str, Any] = field(default_factory=dict)
    """``config`` as the plain dict each run's value table starts from."""
    jobs: JobTable | None = None
    """The plan's job table (what each of the core's job ids stands for) with its carrier
    (how runs carry out their lone STARTs in the core: docs/internals.md), built from
    ``runtimes`` as runs call them."""
    inputs: _core.InputTable | None = None
    """A run's value table from inputs that pass every check below, in one call
    (src/inputs.rs); ``None`` for a plan with override nodes."""
    defaulted: frozenset[str] = frozenset()
    """External inputs whose defaults are used (not in ``input_names``): for error hints."""


@dataclass(frozen=True, eq=False)
class PreparedPlan:
    """A selection of a Driver's graph, compiled once; run it with ``execute`` or ``open``.

    Users get plans from :meth:`Driver.prepare`; a plan holds only immutable compiled state,
    so it can be run repeatedly and concurrently, each run with its own resources.
    """

    outputs: tuple[str, ...]
    """The requested final variables, in the order given."""
    required_inputs: Mapping[str, tuple[Any, ...]]
    """Input name -> every type its consumers require, sorted by name."""
    override_nodes: frozenset[str]
    """Nodes whose values each run must supply through ``overrides``."""
    _program: _Program = field(repr=False)

    def _values(
        self, inputs: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """docs/contract.md#run-checks: shape and value checks, then the run's fresh value table."""
        program = self._program
        if overrides is None and program.inputs is not None:
            try:
                table = program.inputs.fill(inputs)
            except Exception:  # a key whose __hash__ or __eq__ raises: said below
                table = None
            if table is not None:
                return table  # else a check below fails and says why
        supplied = _supplied(inputs, program.input_names, self._input_hint, "Input")
        replaced = None
        if overrides is not None or self.override_nodes:
            replaced = _supplied(overrides, self.override_nodes, self._override_hint, "Override")
        _check_values(program.input_checks, supplied, "input")
        table = {**program.config_table, **supplied}
        if replaced:
            _check_values(program.override_checks, replaced, "override")
            table.update(replaced)
        return table

    def _input_hint(self, name: str) -> str:
        """What to do about ``name`` passed in ``inputs`` though not a required input."""
        program = self._program
        quoted = _messages.name(name)
        if name in program.defaulted:
            return f"it has a default; to pass it, prepare with optional_inputs=[{quoted}]"
        if name in self.override_nodes:
            return "an override node: pass it in overrides="
        if name in program.config:
            return "set by the Driver's config"
        if name in program.plan.reached:
            return (
                f"a node; to supply its value, prepare with override_nodes=[{quoted}] "
                "and pass it in overrides="
            )
        return ""

    def _override_hint(self, name: str) -> str:
        """What to do about ``name`` passed in ``overrides`` though not an override node."""
        program = self._program
        if name in program.input_names or name in program.defaulted:
            return "an input: pass it in inputs="
        if name in program.plan.reached:
            return f"not declared: prepare with override_nodes=[{_messages.name(name)}]"
        return ""

    def open(
        self,
        *,
        inputs: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        observer: Observer | Sequence[Observer] | None = None,
        timeout: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        """Run the plan and keep its resources alive through the ``async with`` body.

        The body receives ``{output: value}``; every release runs after the body exits,
        also when it raises or is cancelled. ``observer`` (a callable, or a sequence of
        them) receives a ``RunEvent`` for each step of the run. ``timeout`` bounds the
        forward phase, in seconds from entering the ``async with`` (the body and the
        releases are not counted): docs/lifecycle.md, "Deadlines and server-directed waits".
        """
        budget = None if timeout is None else _core.run_budget(timeout)
        values = self._values(inputs, overrides)
        program = self._program
        adapters = program.adapters
        if adapters is None:
            return self._held_run(values, observer, budget)
        return _Entered(
            adapters.open(
                functools.partial(self._held_run, values, observer, budget),
                final_vars=self.outputs,
                inputs=inputs or {},
                overrides=overrides or {},
                execution_path=program.plan.nodes,
            )
        )

    def _run(self, values: dict[str, Any], observer: object, budget: float | None) -> RunContext:
        """One run of this plan over the value table ``values`` (not entered yet)."""
        program = self._program
        jobs = program.jobs
        assert jobs is not None  # set by build_plan
        return open_run(program.plan, jobs, values, self.outputs, program.seed, observer, budget)

    def _held_run(self, values: dict[str, Any], observer: object, budget: float | None) -> HeldRun:
        """``_run`` for ``open()``, whose context may be dropped without being exited."""
        return HeldRun(self._run(values, observer, budget))

    def to_dot(self) -> str:
        """Graphviz DOT of the selected graph.

        Boxes are nodes labelled with their policy; a bold rounded box owns a resource and
        names its release; parallelograms are run inputs; double borders are outputs;
        dashed grey edges read "released before" (the shutdown order).
        """
        from ._picture import plan_to_dot

        program = self._program
        return plan_to_dot(
            program.specs,
            outputs=self.outputs,
            inputs=tuple(self.required_inputs),
            replaced=program.replaced,
            shutdown=program.plan.shutdown_edges(),
        )

    def visualize(self, path: str | os.PathLike[str], *, format: str | None = None) -> Path:
        """Render :meth:`to_dot` to ``path`` (format from the suffix, e.g. ``.png``, ``.svg``).

        Needs the ``graphviz`` Python package and Graphviz's ``dot`` program.
        """
        from ._picture import render

        return render(self.to_dot(), path, format=format)

    async def execute(
        self,
        *,
        inputs: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        observer: Observer | Sequence[Observer] | None = None,
        # The run's own budget, handed to the core (docs/lifecycle.md, "Deadlines and
        # server-directed waits"); the caller's asyncio.timeout() composes with it.
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """Run the plan; return ``{output: value}`` after every release has finished.

        ``observer`` and ``timeout`` (the forward phase's budget in seconds, from this
        call) as for :meth:`open`.
        """
        program = self._program
        if program.resource_outputs:
            raise ValueError(
                f"{_RESOURCE_OUTPUT}: {_messages.names(program.resource_outputs, sort=False)}"
                " — read them in the body of async with plan.open(...), or select nodes "
                "that consume them"
            )
        if program.adapters is None:
            budget = None if timeout is None else _core.run_budget(timeout)
            run = self._run(self._values(inputs, overrides), observer, budget)
            results = run.execute_at_once()  # a quick run needs no coroutine of its own
            return results if results is not None else await run.execute_rest()
        async with self.open(
            inputs=inputs, overrides=overrides, observer=observer, timeout=timeout
        ) as results:
            return results


class _Entered(contextlib.AbstractAsyncContextManager[dict[str, Any]]):
    """``open()`` with adapters: their context (a generator's), exited only once entered
    (a generator's ``__aexit__`` alone would run the whole run, then complain). Dropped
    while entered, it warns as a plain run's does (``HeldRun``); the generator's own
    finalization (asyncio's, for async generators) carries out the releases."""

    __slots__ = ("_context", "_held")

    def __init__(self, context: contextlib.AbstractAsyncContextManager[dict[str, Any]]) -> None:
        self._context = context
        self._held: bool | None = None  # None: never entered

    async def __aenter__(self) -> dict[str, Any]:
        self._held = False
        values = await self._context.__aenter__()
        self._held = True
        return values

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        if self._held is None:
            raise RuntimeError(NEVER_ENTERED)
        self._held = False
        return await self._context.__aexit__(*exc_info)

    def __del__(self) -> None:
        if self._held:
            warnings.warn(
                "sdax_hamilton: an open() context was dropped while entered, never exited; "
                "its releases run when asyncio finalizes it. Exit it: "
                "`async with plan.open(...) as values:`",
                ResourceWarning,
                stacklevel=2,
            )


def _copy(
    supplied: dict[Any, Any], expected: frozenset[str], hint: Callable[[str], str], kind: str
) -> dict[Any, Any]:
    """A snapshot of the caller's dict; when copying it runs a key's raising ``__eq__`` (two
    keys of one hash), the keys are read by their text instead (:func:`_named`, which runs
    no method of a key and says what is wrong)."""
    try:
        return dict(supplied)
    except Exception:
        return _named(supplied, expected, hint, kind)


def _supplied(
    value: Mapping[str, Any] | None,
    expected: frozenset[str],
    hint: Callable[[str], str],
    kind: str,
) -> dict[str, Any]:
    """A caller's ``inputs``/``overrides`` checked for shape and keyed by the plan's own names.

    A snapshot first: a key's own ``__hash__`` or ``__eq__``, run by the checks, may change the
    caller's dict (docs/contract.md#hostile-bindings). Then read back by the plan's names: a
    key whose ``__hash__`` or ``__eq__`` lies may pass the shape check and still not be found
    by its name."""
    what = "inputs" if kind == "Input" else "overrides"
    supplied = (
        _copy(value, expected, hint, kind)
        if type(value) is dict
        else {}
        if value is None
        else _read(value, what)
    )
    if not _same_names(supplied, expected):
        supplied = _named(supplied, expected, hint, kind)
    return _by_name(supplied, expected, kind)


def _by_name(supplied: dict[Any, Any], names: Collection[str], kind: str) -> dict[str, Any]:
    """``supplied``'s value for each of ``names``, keyed by the plan's own names: a key whose
    ``__hash__`` or ``__eq__`` lies may pass the shape check and still not be found by its
    name (docs/contract.md#hostile-bindings), which is an input error, not a ``KeyError``
    from inside the run."""
    try:
        return {name: supplied[name] for name in names}
    except Exception:
        raise ValueError(
            f"{kind} shape mismatch: a key could not be read back by its name (its __hash__ "
            "or __eq__ is inconsistent); pass a dict with plain str keys"
        ) from None


def _same_names(supplied: dict[Any, Any], expected: frozenset[str]) -> bool:
    """Whether the keys are exactly ``expected`` (a key whose ``__hash__`` or ``__eq__``
    raises counts as a difference: :func:`_named` then says which)."""
    try:
        return supplied.keys() == expected
    except Exception:
        return False


def _read(value: object, what: str) -> dict[Any, Any]:
    """A caller's ``inputs``/``overrides`` that is not a dict, as a dict (a ``TypeError``
    when it is not a mapping)."""
    if not isinstance(value, Mapping) and not callable(getattr(type(value), "keys", None)):
        example = "{'name': value}"
        raise TypeError(
            f"{what} must be a mapping of names (str) to values, not "
            f"{_messages.type_name(value)}; pass e.g. {what}={example}"
        )
    mapping: Any = value
    try:
        return dict(mapping)
    except Exception as exc:
        kind = "Input" if what == "inputs" else "Override"
        raise ValueError(
            f"{kind} shape mismatch: {what} could not be read as a mapping "
            f"({_messages.type_name(exc)} while reading its keys); pass a dict of str "
            "names to values"
        ) from exc


def _named(
    supplied: dict[Any, Any],
    expected: frozenset[str],
    hint: Callable[[str], str],
    kind: str,
) -> dict[str, Any]:
    """The supplied values under plain ``str`` names, when those are exactly ``expected``;
    else the ``ValueError`` "<kind> shape mismatch" naming what is missing and unexpected,
    with close matches and what to do. Runs only when the names differ (or could not be
    compared): no user ``__hash__``/``__eq__``/``__repr__`` is called here."""
    named: dict[str, Any] = {}
    bad: list[object] = []  # keys that are not str, or the same str twice
    for key, value in supplied.items():
        text = _messages.plain(key)
        if text is None or text in named:
            bad.append(key)
        else:
            named[text] = value
    given = set(named)
    missing = expected - given
    extra = given - expected
    unexpected = heapq.nsmallest(_messages.MAX_LISTED, extra)  # all of them are counted
    if not missing and not extra and not bad:
        return named
    what = "inputs" if kind == "Input" else "overrides"
    wanted = "plan.required_inputs" if kind == "Input" else "plan.override_nodes"
    parts = [
        f"{kind} shape mismatch: expected {_messages.names(expected)}, "
        f"got {_messages.names([*named, *bad])}"
    ]
    if missing:
        parts.append(f"missing: {_messages.names(missing)}")
    if extra or bad:
        explained = []
        for name in unexpected:
            why = hint(name)
            explained.append(
                _messages.name(name)
                + (f" ({why})" if why else _messages.did_you_mean(name, missing))
            )
        listed = len(explained)
        for key in bad[: max(0, _messages.MAX_LISTED - listed)]:
            explained.append(
                f"{_messages.name(key)} (names are str)"
                if _messages.plain(key) is None
                else f"{_messages.name(key)} (given twice)"
            )
        rest = len(extra) + len(bad) - len(explained)
        more = f", … and {rest:,} more" if rest > 0 else ""
        parts.append(f"unexpected: {', '.join(explained)}{more}")
    return_hint = f"pass exactly the names in {wanted} as {what}={{...}}"
    raise ValueError("; ".join(parts) + f" — {return_hint}")


def _check_values(
    checks: tuple[tuple[str, tuple[tuple[Check, Any], ...]], ...],
    values: Mapping[str, Any],
    what: str,
) -> None:
    """Each value against every requirement on it: ``TypeError`` "Invalid input: x — ..."
    (or "Invalid override: ...") naming the first one it fails."""
    for name, requirements in checks:
        value = values[name]
        for check, tp in requirements:
            if not check(value):
                raise TypeError(
                    f"Invalid {what}: {name} — {mismatch(f'{what} {name!r}', tp, value)}"
                )


def build_plan(
    nodes: Mapping[str, NodeSpec],
    config: Mapping[str, Any],
    final_vars: object,
    *,
    optional_inputs: object = (),
    override_nodes: object = (),
    check_outputs: object = True,
    graph: _core.Graph | None = None,
    seed: int | None = None,
    adapters: Adapters | None = None,
    retry_budget: RetryBudget | None = None,
    cache: Cache | None = None,
    executor: Executor | None = None,
) -> PreparedPlan:
    """Validate a selection and compile it into a ``PreparedPlan`` (docs/api.md,
    "prepare")."""
    if type(check_outputs) is not bool:
        raise TypeError(f"check_outputs must be a bool, got {type(check_outputs).__name__}")
    outputs = _names(final_vars, "final_vars", allow_empty=False)
    optional = _names(optional_inputs, "optional_inputs", allow_empty=True)
    overridden = _names(override_nodes, "override_nodes", allow_empty=True)

    config_replaced = _check_replacements(nodes, config, outputs, overridden)
    # The walk itself (unknown names, cycles) is the core's, iterative and linear; the
    # per-node rules follow over what it reached.
    replaced = frozenset(config_replaced) | frozenset(overridden)
    if graph is None:
        graph = compile_graph(nodes)
    try:
        core_plan = graph.select(list(outputs), replaced)
    except ValueError as exc:
        raise _unknown_selected(exc, nodes) from None
    _check_reached(nodes, config, core_plan.reached, replaced)
    fans = fan_outs(nodes, core_plan, outputs, replaced, check_outputs)
    if fans is not None and cache is not None:
        raise ValueError(
            "Driver(cache=...) does not run plans with a Parallelizable node: prepare this "
            "selection with a Driver without cache"
        )
    consumed = _consumed(nodes, config, core_plan.nodes)
    required = _required_inputs(consumed, core_plan.reached, optional, overridden)
    _check_config_inputs(nodes, config, consumed)
    program = _program(
        nodes,
        config,
        core_plan,
        outputs=outputs,
        overridden=overridden,
        config_replaced=config_replaced,
        required=required,
        consumed=consumed,
        check_outputs=check_outputs,
        seed=seed,
        executor=executor,
    )
    if adapters is not None:  # node hooks around every call (docs/adapters.md)
        program = replace(program, runtimes=adapters.wrap(program.runtimes), adapters=adapters)
    input_names = frozenset(required)
    defaulted = frozenset(consumed.external_defaults) - input_names
    config_table = dict(config)  # never changed: the Python checks and the table share it
    program = replace(
        program,
        input_names=input_names,
        defaulted=defaulted,
        config_table=config_table,
        jobs=_jobs(program.runtimes, program.specs, cache, retry_budget)
        if fans is None
        else JobTable(program.runtimes, None, retry_budget=retry_budget, fan_outs=fans),
        inputs=None
        if overridden
        else _core.InputTable(
            input_names,
            config_table,
            [
                (name, *split_check(check))
                for name, requirements in program.input_checks
                for check, _ in requirements
            ],
        ),
    )
    return PreparedPlan(
        outputs=outputs,
        required_inputs=MappingProxyType(required),
        override_nodes=frozenset(overridden),
        _program=program,
    )


def _check_replacements(
    nodes: Mapping[str, NodeSpec],
    config: Mapping[str, Any],
    outputs: tuple[str, ...],
    overridden: tuple[str, ...],
) -> list[str]:
    """Overrides and config replacements name replaceable nodes; the config keys that
    replace a node."""
    unknown = sorted(name for name in overridden if name not in nodes)
    if unknown:
        raise ValueError(
            f"Unknown override nodes: {_messages.unknown(unknown, nodes)} — override_nodes "
            "must name nodes of this Driver (inputs are passed in inputs=)"
        )
    overlap = sorted(name for name in overridden if name in config)
    if overlap:
        raise ValueError(
            f"Configuration and overrides must be disjoint: {_messages.names(overlap)} — "
            "a node set by the Driver's config does not run; drop it from override_nodes "
            "or from the config"
        )
    internal_outputs = sorted(
        name for name in outputs if name in nodes and nodes[name].validation_internal
    )
    if internal_outputs:
        gates = sorted({gate for name in internal_outputs if (gate := nodes[name].validation_gate)})
        raise ValueError(
            f"Cannot select validation internal nodes: {_messages.names(internal_outputs)} — "
            f"select {' and '.join(_messages.name(gate) for gate in gates[:3])} instead"
        )
    config_replaced = [name for name in config if name in nodes]
    protected = sorted(
        name
        for name in (*config_replaced, *overridden)
        if nodes[name].validation_internal or nodes[name].borrows
    )
    if protected:
        raise ValueError(
            f"Cannot replace validation or borrowed nodes: {_messages.names(protected)} — "
            "they are generated from another node and call no code of yours; replace the "
            "node they come from, or a node that consumes them"
        )
    return config_replaced


def _check_reached(
    nodes: Mapping[str, NodeSpec],
    config: Mapping[str, Any],
    reached: Iterable[str],
    replaced: frozenset[str],
) -> None:
    """Owned acquisitions reached keep their release and run; config replacements fit."""
    for name in sorted(reached):
        spec = nodes[name]
        if spec.ownership_required and spec.release is None:
            raise ValueError(
                f"Selected acquisition expansion lacks shutdown: {name} — "
                "its declaration has a shutdown whose target_ leaves this node out; add it to "
                "that target_, or select only the nodes the shutdown covers"
            )
        if spec.release is not None:
            if name in replaced:
                raise ValueError(
                    f"Cannot replace owned acquisition: {name} — a node with a shutdown "
                    "must run so that its release runs; replace a node that consumes it "
                    "instead"
                )
        if name in config and not accepts(config[name], spec.type):
            detail = mismatch(f"config {name!r}", spec.type, config[name])
            raise TypeError(f"Invalid config replacement: {name} — {detail}")


@dataclass(slots=True)
class _Consumed:
    """What the active nodes consume that no active node produces."""

    requirements: dict[str, list[Any]] = field(default_factory=dict)
    """Name -> every type its consumers require, in topological consumer order."""
    external_defaults: dict[str, bool] = field(default_factory=dict)
    """External input -> whether every consumer has a default for it."""
    defaulted: list[tuple[str, InputSpec]] = field(default_factory=list)
    """(consumer, input) for every default standing in for an external input."""


def _consumed(
    nodes: Mapping[str, NodeSpec], config: Mapping[str, Any], active: Iterable[str]
) -> _Consumed:
    """Edges checked; what each consumed name must satisfy; which inputs have defaults."""
    consumed = _Consumed()
    for name in active:
        spec = nodes[name]
        for inp in spec.inputs:
            types = inp.types
            for tp in types:
                validate_type(tp, where=f"{name}.{inp.name}")
            consumed.requirements.setdefault(inp.name, []).extend(types)
            producer = nodes.get(inp.name)
            if producer is not None:
                for tp in types:
                    _check_edge(producer, spec, inp, tp)
            elif inp.name not in config:
                # External input: required unless every consumer has a default and it
                # was not declared optional (then the defaults are used).
                consumed.external_defaults[inp.name] = (
                    consumed.external_defaults.get(inp.name, True) and inp.has_default
                )
                if inp.has_default:
                    consumed.defaulted.append((name, inp))
    # A default stands in for an external input, so it must satisfy every consumer's
    # requirement of that input, not only its own node's.
    for name, inp in consumed.defaulted:
        for tp in consumed.requirements[inp.name]:
            if not accepts(inp.default, tp):
                raise TypeError(
                    f"Invalid default for input {inp.name!r} of node {name!r}: "
                    f"not accepted by every consumer's requirement ({describe(tp)}) — change the "
                    f"default, or the annotations of the parameters named {inp.name!r}, so "
                    "that every one of them accepts it"
                )
    return consumed


def _required_inputs(
    consumed: _Consumed,
    reached: Collection[str],
    optional: tuple[str, ...],
    overridden: tuple[str, ...],
) -> dict[str, tuple[Any, ...]]:
    """Every override and optional input is used; the inputs each run must supply."""
    unused_overrides = sorted(name for name in overridden if name not in reached)
    if unused_overrides:
        raise ValueError(
            f"Unused override declaration: {_messages.unknown(unused_overrides, reached)} — "
            "the selected outputs do not depend on them; drop them from override_nodes"
        )
    external_defaults = consumed.external_defaults
    unused_optional = sorted(name for name in optional if name not in external_defaults)
    if unused_optional:
        raise ValueError(
            "Unused optional input declaration: "
            f"{_messages.unknown(unused_optional, external_defaults)} — optional_inputs must "
            "name inputs of the selected nodes; this selection's are "
            f"{_messages.names(external_defaults)}"
        )
    optional_set = frozenset(optional)
    return {
        name: _dedupe(consumed.requirements[name])
        for name in sorted(external_defaults)
        if not external_defaults[name] or name in optional_set
    }


def _check_config_inputs(
    nodes: Mapping[str, NodeSpec], config: Mapping[str, Any], consumed: _Consumed
) -> None:
    """Config values consumed by active nodes satisfy every consumer."""
    for name, types in consumed.requirements.items():
        if name in config and name not in nodes:
            for tp in types:
                if not accepts(config[name], tp):
                    detail = mismatch(f"config {name!r}", tp, config[name])
                    raise TypeError(f"Invalid config value for input: {name} — {detail}")


def _program(
    nodes: Mapping[str, NodeSpec],
    config: Mapping[str, Any],
    core_plan: _core.Plan,
    *,
    outputs: tuple[str, ...],
    overridden: tuple[str, ...],
    config_replaced: list[str],
    required: Mapping[str, tuple[Any, ...]],
    consumed: _Consumed,
    check_outputs: bool,
    seed: int | None,
    executor: Executor | None = None,
) -> _Program:
    """The compiled, immutable part of the plan."""
    active = core_plan.nodes
    reached = core_plan.reached
    replaced = frozenset(config_replaced) | frozenset(overridden)
    active_set = frozenset(active)
    runtimes = tuple(
        _runtime(nodes[name], nodes, config, required, active_set, check_outputs, executor)
        for name in active
    )
    resource_outputs = tuple(
        name
        for name in outputs
        if name not in replaced and (nodes[name].release is not None or nodes[name].borrows)
    )
    return _Program(
        plan=core_plan,
        runtimes=runtimes,
        config=config,
        input_checks=tuple((name, _all_of(types)) for name, types in required.items()),
        override_checks=tuple(
            (
                name,
                _all_of(_dedupe([nodes[name].type, *consumed.requirements.get(name, ())])),
            )
            for name in sorted(overridden)
        ),
        resource_outputs=resource_outputs,
        seed=seed,
        specs=tuple(nodes[name] for name in active),
        replaced=MappingProxyType(
            {name: "config" for name in config_replaced if name in reached}
            | {name: "override" for name in overridden}
        ),
    )


def _check_edge(producer: NodeSpec, consumer: NodeSpec, inp: InputSpec, required: Any) -> None:
    if producer.validation_internal and not (
        consumer.validation_internal or consumer.name == producer.validation_gate
    ):
        raise ValueError(
            f"Validation internal node {producer.name!r} cannot be consumed by "
            f"{consumer.name!r}; consume the validated node {producer.validation_gate!r}"
        )
    if not compatible(producer.type, required):
        raise TypeError(
            f"Incompatible edge: {producer.name} -> {consumer.name} "
            f"({producer.type!r} is not accepted as {required!r}) — change the return "
            f"annotation of {producer.name!r} or the annotation of {consumer.name}'s "
            f"parameter {inp.name!r} so that it accepts what {producer.name!r} returns"
        )


def _jobs(
    runtimes: tuple[NodeRuntime, ...],
    specs: tuple[NodeSpec, ...],
    cache: Cache | None,
    retry_budget: RetryBudget | None = None,
) -> JobTable:
    """The plan's job table; with a cache, its nodes' caching (docs/caching.md), and no
    carrier: a looked-up node's first attempt begins with the lookup, in the driver."""
    nodes = None if cache is None else [cache.nodes.get(spec.name) for spec in specs]
    if nodes is None or not any(node is not None and node.mode for node in nodes):
        return JobTable(runtimes, carrier_of(runtimes), retry_budget=retry_budget)
    from ._adapters import _NodeCall
    from ._executor.jobs import PlanCache

    assert cache is not None
    # Lifecycle adapters' node hooks run around a hit too (``_NodeCall.replay``).
    replays = [rt.call.replay if isinstance(rt.call, _NodeCall) else None for rt in runtimes]
    return JobTable(runtimes, None, PlanCache(cache, nodes, replays), retry_budget)


def _runtime(
    spec: NodeSpec,
    nodes: Mapping[str, NodeSpec],
    config: Mapping[str, Any],
    required: Collection[str],
    active: Collection[str],
    check_outputs: bool,
    executor: Executor | None = None,
) -> NodeRuntime:
    args: list[tuple[str, str]] = []
    defaults: dict[str, Any] = {}
    input_checks: list[tuple[str, Check]] = []
    for inp in spec.inputs:
        if inp.name in nodes or inp.name in config or inp.name in required:
            args.append((inp.name, inp.name))
            if inp.name == spec.collects:
                continue  # a list of the branch's results, each checked where it was made
            # Produced values are checked at their producer and edges were proven
            # compatible above; only unchecked producers (check_outputs=False) leave a
            # check for their consumers, once before the first attempt.
            if not check_outputs and inp.name in active:
                for tp in inp.types:
                    check = checker(tp)
                    if check is not None:
                        input_checks.append((inp.name, check))
        else:
            defaults[inp.name] = inp.default
    release = spec.release
    return NodeRuntime(
        name=spec.name,
        origin=spec.origin,
        call=in_thread(spec.call, executor) if spec.in_thread else spec.call,
        args=tuple(args),
        defaults=MappingProxyType(defaults) if defaults else _NO_DEFAULTS,
        input_checks=tuple(input_checks),
        # A Parallelizable node's value is its source; its items are checked as drawn
        # (``FanOut.item_check``).
        output_check=checker(spec.type) if check_outputs and spec.fan != "expand" else None,
        retryable=_retryable(spec.policy),
        output_type=spec.type,
        release=None
        if release is None
        else ReleaseRuntime(
            origin=release.origin,
            call=release.call,
            retryable=_retryable(release.policy),
            retry_after=release.policy.retry_after,
        ),
        retry_after=spec.policy.retry_after,
        bulkhead=spec.bulkhead,
        breaker=spec.breaker,
        fallback=spec.fallback,
        hedge=spec.hedge,
    )


def _retryable(policy: _core.Policy) -> tuple[type[BaseException], ...]:
    retryable = policy.retryable_exceptions
    if retryable is None:  # declarations always resolve the default set
        raise RuntimeError("policy without a resolved retryable set")
    return retryable
