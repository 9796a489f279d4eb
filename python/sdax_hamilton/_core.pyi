"""Typing stubs for the Rust extension ``sdax_hamilton._core``.

The extension is the core of the package: policy validation and jitter, graph compilation
and selection (including which graphs are refused), and the per-run scheduling state
machine. The asyncio executor (``_executor``) executes the commands a ``Run`` emits and reports
events back; it never decides ordering, retries or shutdown sequence itself: which job
starts when, whether a failure is retried and after which delay (test mode included),
and the order of releases (the one the plan picture draws) are all the core's.
"""

from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, Literal, final

__version__: Final[str]

# Command opcodes: each command is a tuple ``(op, job, attempt, arg)``.
#   job     forward job of active node i is ``i``; release job of node i is ``n_nodes + i``
#   attempt 0-based attempt number of that job:
#           START: the attempt to start now;
#           SLEEP: the attempt that just failed (= the retry index k of the delay formula;
#                  the attempt started after the wait is k + 1);
#           CANCEL: the running attempt; STOP_SLEEP: the failed attempt whose wait is dropped
#   arg     START: the attempt timeout in seconds, or ``None``; SLEEP: the delay in seconds
#           (always finite, >= 0); CANCEL / STOP_SLEEP: ``None``
START: Final[int]  # = 0: call the job's function now (attempt ``attempt``)
SLEEP: Final[int]  # = 1: wait ``arg`` seconds, then report ``Run.elapsed(job)``
CANCEL: Final[int]  # = 2: cancel the running attempt; report ``Run.drained(job)`` when it ends
STOP_SLEEP: Final[int]  # = 3: drop the pending retry wait of ``job``; report nothing
# Emitted only for a job with a ``retry_after`` hook, or by a run with a deadline
# (``Run.set_deadline``); see docs/internals.md "Deadlines and hints":
HINT: Final[int]  # = 4: attempt ``attempt`` failed and may be retried: call the job's
#                   retry_after hook with that failure now; report ``Run.hinted(job, value)``
#                   or, when it raised, ``Run.hint_failed(job)``
NO_ROOM: Final[int]  # = 5: attempt ``attempt``'s failure is final: the retry's wait (``arg``
#                      seconds; ``None`` when the deadline had passed) would not end before
#                      the deadline. The abort's commands follow. Report nothing.
EXPIRE: Final[int]  # = 6: the deadline passed before attempt ``attempt`` (0-based) of the
#                     forward job could start: it fails with a timeout. Report nothing.
START_CLIPPED: Final[int]  # = 7: START whose timeout ``arg`` is the time left before the
#                            deadline (shorter than the job's own timeout, or it has none)
BAD_HINT: Final[int]  # = 8: the hint for attempt ``attempt`` was unusable: its failure is
#                       final. Report nothing.
# Emitted only by a run given a ``retry_budget`` or ``fallbacks`` (docs/resilience.md):
NO_BUDGET: Final[int]  # = 9: attempt ``attempt``'s failure is final: the retry budget
#                        refused its retry. Report nothing.
FALLBACK: Final[int]  # = 10: attempt ``attempt``'s failure is final and the job has a
#                       fallback: call it once; the job stays running. Report ``succeeded``
#                       with its value, ``failed`` (final), or ``drained`` once cancelled.

DRAW: Final[int]  # = 11: ask the source of ``job`` (a Parallelizable node) for item ``attempt``;
# report ``drawn`` or ``draw_failed``
CLOSE: Final[int]  # = 12: close the source of ``job``; report ``closed`` when it has finished
STOP_DRAW: Final[int]  # = 13: cancel the draw in flight from the source of ``job``; its end is
# reported as any draw's

# Emitted only while a carrier is attached (``Run.carry_with``; src/carry.rs):
CARRIED: Final[int]  # = 0x80: the Run carried out the first attempt of ``job`` itself (a
#                      lone START) and hands it back; ``attempt`` is 0, ``arg`` a
#                      ``HandBack`` (below)
CARRIED_RAISED: Final[int]  # = 0: the call (or its first step) raised ``payload``, or the
#                             output check did (an owner's acquisition is recorded first)
CARRIED_RETURNED: Final[int]  # = 1: it returned ``payload``, for the driver to check
CARRIED_SUSPENDED: Final[int]  # = 2: ``payload`` is a coroutine whose first step yielded
#                                ``yielded``
CARRIED_AWAITABLE: Final[int]  # = 3: the call returned ``payload``, an awaitable to await
CARRIED_REJECTED: Final[int]  # = 4: an input check raised ``payload`` (a KeyboardInterrupt,
#                               say): nothing was called; the driver reports bad input
CARRIED_BREAKER: Final[int]  # = 0x81: the success of a carried attempt of ``job`` changed
#                              its breaker's state: log it; ``arg`` is the transition
#                              (``"open"``, ``"closed"``); the run's commands follow

Command = tuple[int, int, int, Any]
"""``(op, job, attempt, arg)``: ``arg`` is a float or ``None``, ``CARRIED``'s
``HandBack``, or ``CARRIED_BREAKER``'s transition."""

@final
class Guard:
    """One guarded node's ``bulkhead`` and ``breaker``, asked together in one call per
    attempt; ``clock`` (``time.monotonic``) is read only when an outcome goes to the
    breaker; ``wake(bulkhead, waiter)`` wakes the waiter a permit given back went to."""

    def __new__(
        cls,
        bulkhead: Bulkhead | None,
        breaker: CircuitBreaker | None,
        clock: Callable[[], float],
        wake: Callable[[Bulkhead, int], object],
    ) -> Guard: ...
    @property
    def bulkhead(self) -> Bulkhead | None: ...
    @property
    def breaker(self) -> CircuitBreaker | None: ...
    def admit(self) -> bool:
        """Admit an attempt at once, or take nothing (``False``): ``breaker`` (if any)
        closed (no clock read), then a permit of ``bulkhead`` (if any) free with nobody
        queued. Admitted, it holds the permit and no probe: end it with ``end``."""
    def ask(self) -> tuple[int | float | None, str | None, str]:
        """The breaker's admission at the clock's time (``CircuitBreaker.admit``), for an
        attempt ``admit`` took nothing for: ``(admission, transition, state)``, admission
        ``None`` (go ahead), an int (go ahead as this probe) or a float (refused:
        ``retry_after``); the transition it made (``"half_open"``) or ``None``; the
        breaker's state after it. Without a breaker: ``(None, None, "closed")``."""
    def record(self, success: bool, probe: int | None) -> str | None:
        """The outcome of an attempt ``ask`` let through (``probe`` as it gave it), at the
        clock's time: the breaker's transition or ``None`` (also without a breaker)."""
    def end(self, success: bool | None) -> str | None:
        """An attempt ``admit`` let through is over: its permit goes back to ``bulkhead``
        (the waiter it went to woken) and ``success`` (unless ``None``) to ``breaker``, at
        the clock's time; the breaker's transition (``"open"``, ``"closed"``) or ``None``."""

@final
class HandBack:
    """A START the ``Run`` carried out itself, handed back to the driver (``CARRIED``)."""

    @property
    def how(self) -> int:
        """How the call ended: ``CARRIED_RAISED``, ``_RETURNED``, ``_SUSPENDED``,
        ``_AWAITABLE`` or ``_REJECTED``."""
    @property
    def payload(self) -> Any:
        """What it raised or returned; the coroutine that suspended; the awaitable; what
        an input check raised."""
    @property
    def yielded(self) -> Any:
        """What a suspended coroutine's first step yielded (``None`` otherwise)."""
    @property
    def kwargs(self) -> dict[str, Any] | None:
        """A node's keyword arguments (kept for its retries); ``None`` for a release."""
    @property
    def cancelling(self) -> int | None:
        """For a release whose coroutine was stepped: its phase task's ``cancelling()``
        count before the call; ``None`` otherwise."""
    @property
    def timeout(self) -> float | None:
        """The START's timeout."""
    @property
    def started(self) -> tuple[float, float] | None:
        """``(loop time, monotonic time)`` before the call when it has a timeout."""
    @property
    def admitted(self) -> bool:
        """A guarded node's attempt the ``Run`` admitted: it holds a permit of the node's
        bulkhead (if any) and its closed breaker (if any) let it through; the driver
        gives the permit back and records the outcome when it ends."""

@final
class CarriedNode:
    """How a ``Carrier`` calls one forward node inline (built by ``carrier_of``)."""

    def __new__(
        cls,
        *,
        call: Callable[..., Any],
        name: str,
        args: Sequence[tuple[str, str]],
        defaults: dict[str, Any] | None,
        checks: Sequence[tuple[str, Any, bool]],
        output_check: tuple[Any, bool] | None,
        output_type: Any,
        owned: bool,
        positional: bool,
        declined: bool = False,
        bulkhead: Bulkhead | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> CarriedNode:
        """``args``: ``(keyword, value-table key)`` pairs; ``checks``: ``(keyword, check,
        is_class)``; ``output_check``: ``(check, is_class)``; ``owned``: the node owns an
        acquisition; ``positional``: ``args`` are the function's first parameters, in
        order; ``declined``: its STARTs are left to the driver; ``bulkhead``,
        ``breaker``: the shared objects that admit each of its attempts first (a carried
        attempt only when admitted at once, src/carry.rs)."""
    @property
    def name(self) -> str: ...

@final
class Carrier:
    """How a plan's jobs are called inline by a ``Run`` (src/carry.rs), built once per plan
    by ``sdax_hamilton._executor.carrier_of``."""

    def __new__(
        cls,
        nodes: Sequence[CarriedNode],
        releases: Sequence[Callable[[Any], Any] | None],
        acquisition: Callable[..., Any],
        isawaitable: Callable[[Any], bool],
        coroutine_type: type,
        monotonic: Callable[[], float],
        *,
        wake: Callable[[Bulkhead, int], object] | None = None,
    ) -> Carrier:
        """``nodes[i]``: ``(call, name, args, defaults, checks, output_check, output_type,
        owned, positional)`` of active node ``i``, as in its ``NodeRuntime`` (a check is
        ``(keyword, check, is_class)``, the output check ``(check, is_class)``);
        ``releases[i]``: its release function or ``None``; ``wake(bulkhead, waiter)``:
        wakes the waiter a permit given back by a carried attempt went to (``ValueError``
        without it when a node has a bulkhead)."""
    def __len__(self) -> int: ...
    def arguments(self, job: int, values: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the first attempt of forward job ``job``, read from
        ``values`` and checked as a carried START's are: ``KeyError`` for a missing value,
        ``TypeError`` ("Invalid input for node.keyword") for a value that fails its check,
        what a check raised; ``IndexError`` for an unknown job."""

@final
class InputTable:
    """A run's fresh value table from its inputs, when they are exactly right
    (src/inputs.rs); built once per plan by ``build_plan``."""

    def __new__(
        cls,
        names: frozenset[str],
        config: dict[str, Any],
        checks: Sequence[tuple[str, Any, bool]],
    ) -> InputTable: ...
    def fill(self, inputs: object) -> dict[str, Any] | None:
        """``{**config, **inputs}``, or ``None`` when ``inputs`` (a dict, or ``None``) is not
        exactly the required inputs, each passing its checks."""

@final
class StepCatcher:
    """Stands in for a loop's ``call_soon`` while a phase task is created on Python 3.11
    (src/step.rs): keeps the task's first step."""

    def __new__(cls) -> StepCatcher: ...
    def __call__(self, callback: Any, *, context: Any = None) -> None: ...
    def take(self) -> tuple[Any, Any] | None:
        """``(step, context)`` caught since the last call, or ``None``."""

@final
class Policy:
    """A validated attempt policy (docs/contract.md#policy-validation).

    Wrong types raise ``TypeError``, out-of-range values ``ValueError``; messages name the
    argument and the value. ``retryable_exceptions`` is validated here too (a nonempty tuple
    of ``BaseException`` subclasses, none a superclass of or equal to ``CancelledError``,
    ``KeyboardInterrupt`` or ``SystemExit``); ``None`` stores ``None`` and the caller
    substitutes the default set. A tuple subclass is stored as a plain tuple.

    Checks run in the order retries, timeout, initial_delay, backoff_factor,
    retryable_exceptions, max_delay (int/float, ``>= 0``, not NaN, or ``None``),
    retry_after (callable or ``None``; ``TypeError`` otherwise). ``retries`` keeps the int
    given; the core saturates it at ``2**32 - 1`` (more attempts than can ever run).
    Delays never overflow: a huge ``initial_delay * backoff_factor**k`` saturates at the
    largest finite float.
    Immutable and hashable; ``copy``/``deepcopy`` return the same object; picklable.
    """

    def __new__(
        cls,
        *,
        timeout: float | None = None,
        retries: int = 0,
        retryable_exceptions: tuple[type[BaseException], ...] | None = None,
        initial_delay: float = 1.0,
        backoff_factor: float = 2.0,
        max_delay: float | None = None,
        retry_after: Callable[[BaseException], float | None] | None = None,
    ) -> Policy: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def retries(self) -> int: ...
    @property
    def retryable_exceptions(self) -> tuple[type[BaseException], ...] | None: ...
    @property
    def initial_delay(self) -> float: ...
    @property
    def backoff_factor(self) -> float: ...
    @property
    def max_delay(self) -> float | None: ...
    @property
    def retry_after(self) -> Callable[[BaseException], float | None] | None: ...
    def delay_bounds(self, retry: int) -> tuple[float, float]:
        """``(low, high)`` of the wait before retry ``retry`` (0-based):
        ``(base / 2, base)`` with ``base = min(max_delay, initial_delay * backoff_factor**retry)``.
        ``ValueError`` for a negative or non-int ``retry``."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __copy__(self) -> Policy: ...
    def __deepcopy__(self, memo: object, /) -> Policy: ...

# A node definition handed to ``Graph``:
#   (name, inputs, borrows, policy, release_policy)
#   inputs          names this node consumes (other nodes, or external inputs/config/overrides)
#   borrows         owned nodes this node borrows from (waits on them, keeps them alive)
#   release_policy  ``None`` when the node owns no resource; otherwise the release's policy
NodeDef = tuple[str, Sequence[str], Sequence[str], Policy, Policy | None]

@final
class Graph:
    """All nodes of a Driver, compiled once.

    Raises ``ValueError`` naming the nodes for duplicate names, an owned node whose forward
    policy has retries (``"Acquisition retries require attempt cleanup: <name>"``: a failed
    attempt's acquisition would never be released), a borrow of an unknown node or of a node
    that owns no resource (checked in that order); ``TypeError`` for a malformed node tuple
    (naming the node). Inputs/borrows that name the same node twice count once. Cycles are reported
    by ``select`` (only the selected part has to be acyclic).
    """

    def __new__(cls, nodes: Sequence[NodeDef]) -> Graph: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object, /) -> bool: ...
    def select(self, final_vars: Sequence[str], replaced: Collection[str] | None = None) -> Plan:
        """Walk (iteratively) from ``final_vars`` through inputs and borrows.

        ``replaced`` nodes (config replacements and overrides) are reached but not walked
        and do not run; names in ``replaced`` that are not nodes are ignored. Raises
        ``ValueError("Unknown selected node: 'x'")`` when a final var is not a node (also one
        that is not UTF-8 text; the name as given is the error's ``_sdax_unknown``), and
        ``ValueError`` naming the nodes of a cycle (``Dependency cycle among nodes: 'a' ->
        'b' -> 'a' ...``). A bare ``str`` for either argument is a ``TypeError``.
        """

@final
class Plan:
    """The selected, active part of a graph, in a topological order."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """Active nodes (selected minus replaced), topologically ordered; index = job id."""
    @property
    def reached(self) -> frozenset[str]:
        """Every node name reached by the walk, replaced ones included."""
    @property
    def external(self) -> tuple[str, ...]:
        """Names consumed by active nodes that are not nodes of the graph, sorted."""
    def index(self, name: str) -> int:
        """Job id of an active node; ``KeyError`` otherwise."""
    def shutdown_order(self) -> list[list[str]]:
        """Owned active nodes in release waves if every one had started (for docs/tests)."""
    def shutdown_edges(self) -> list[tuple[str, str]]:
        """The order ``Run.begin_shutdown`` enforces, as sorted ``(dependent, owner)`` pairs:
        the release of ``dependent`` completes before the release of ``owner`` starts.
        Only the nearest owned dependents are listed (a path of consumers from ``owner``
        to ``dependent`` through nodes that own nothing); the order is their closure."""
    def __len__(self) -> int: ...

@final
class HintDecision:
    """What the core decided about a retry_after hint (``Run.hinted``, ``Run.hint_failed``)."""

    @property
    def delay(self) -> float | None:
        """The wait before the retry; ``None`` when the failure is final or was ignored."""
    @property
    def commands(self) -> list[Command]:
        """The commands to carry out, in order."""
    @property
    def refused(self) -> str | None:
        """Why the hint was refused, in words that never include the value (``returned a
        str instead of a number or None``, ``returned an unusable wait (...)``); ``None``
        when it was not refused."""

@final
class Run:
    """Scheduling state of one execution of a ``Plan``; not thread-safe, loop-thread only.

    Every method returns the commands to carry out, in order. Events for a job that is no
    longer waiting for them are ignored: ``elapsed`` after a ``STOP_SLEEP``;
    ``succeeded``/``failed`` for a job the core CANCELled (only ``drained`` or ``unstarted``
    ends it); a repeated ``drained``/``unstarted`` for a CANCELled job.
    Misuse (unknown job, an event in the wrong state) raises ``RuntimeError`` and changes
    nothing; the core never panics across the boundary.
    """

    def __new__(
        cls,
        plan: Plan,
        seed: int | None = None,
        *,
        instant_retries: bool = False,
        retry_budget: RetryBudget | None = None,
        fallbacks: list[int] | None = None,
        fan_outs: list[tuple[int, int, list[int], int | None]] | None = None,
    ) -> Run:
        """``seed`` (any int, taken modulo 2**64) makes the jitter of this run
        reproducible for a given build of the extension; ``None`` seeds from the OS-seeded
        thread RNG the first time a delay is drawn. ``instant_retries`` (test mode) makes
        every retry wait, of nodes and of releases, 0 seconds; attempts and retry decisions
        are unchanged. ``retry_budget``: every forward first attempt deposits in it (at
        ``time.monotonic()``) and every forward retry takes from it or is refused
        (NO_BUDGET). ``fallbacks``: the forward jobs with a fallback (FALLBACK).
        ``fan_outs``: ``(source, collect, templates, limit)`` per Parallelizable node: the
        branch's nodes (``templates``) run once per item drawn, as jobs grown at run time
        (``job_count``); ``limit`` bounds the branches at once (docs/fanout.md)."""
    def drawn(self, job: int, item: bool) -> list[Command]:
        """The DRAW of ``job``'s source ended: an item (its branch grows: one job per
        template, in template order, numbered from ``job_count`` as it was before) or,
        ``item`` false, the end."""
    def draw_failed(self, job: int) -> list[Command]:
        """The DRAW of ``job``'s source raised: the run aborts."""
    def closed(self, job: int) -> list[Command]:
        """The CLOSE of ``job``'s source has finished."""
    def close_sources(self) -> list[Command]:
        """The driver's bookkeeping failed and the run is about to be abandoned: a CLOSE
        for each source that may still be open (drawn from, a draw or a close in flight),
        each carried out to its end before ``abandon()`` and not reported. ``RuntimeError``
        once shutdown began."""
    @property
    def job_count(self) -> int:
        """The forward jobs, grown ones included (release ``i`` is job ``job_count + i``)."""
    def start(self) -> list[Command]:
        """Begin the forward phase: START every node with no active dependency."""
    def succeeded(self, job: int) -> list[Command]:
        """The current attempt returned and its value passed the output check."""
    def succeeded_before(self, job: int, next: int) -> list[Command] | None:
        """``succeeded(job)``, but ``None`` when the only command is the first attempt of
        job ``next`` with no timeout (its caller carries that START out itself)."""
    def failed(self, job: int, retryable: bool) -> tuple[float | None, list[Command]]:
        """The current attempt failed; returns ``(delay, commands)``.

        ``delay`` is what the core decided: the wait in seconds before the next attempt
        when a retry was scheduled (the SLEEP command carries it too), ``None`` when a HINT
        must be carried out first (the only command then), or when the job
        failed for good (nonretryable, retries exhausted, the run aborted) or the report
        was ignored (a job the core CANCELled). A failed forward job aborts the forward
        phase: CANCEL for running jobs, STOP_SLEEP for waiting ones, nothing new starts. A
        failed release does not stop the others.
        """
    def hinted(self, job: int, hint: object) -> HintDecision:
        """What the job's retry_after hook returned after a HINT; the decision's ``delay``
        and ``commands`` are as ``failed``'s. An int/float (subclasses included, not bool;
        read exactly, so a huge negative int is negative) is the wait (capped by
        ``max_delay``, no jitter; 0 with instant retries); ``None`` asks for the backoff
        wait; NaN, a negative value, an infinite one without a cap or any other object is
        unusable (BAD_HINT, the failure is final, ``refused`` says why). A forward wait is
        checked against the deadline (NO_ROOM). Ignored when the run aborted meanwhile
        (``delay`` ``None``)."""
    def hint_failed(self, job: int) -> HintDecision:
        """The job's retry_after hook raised after a HINT: BAD_HINT, the failure is final
        (``refused`` is ``None``: the caller knows what the hook raised)."""
    def set_deadline(self, at: float | None) -> None:
        """Give the forward phase a deadline ``at`` on the clock of ``clock`` (``None`` or
        a non-finite value: none). Call before ``start``."""
    def clock(self, now: float) -> None:
        """Tell the run the current time (the deadline's clock); read only by a run with a
        deadline. The driver calls it before each event it reports to such a run."""
    @property
    def deadline(self) -> float | None:
        """The forward phase's deadline, if any."""
    def elapsed(self, job: int) -> list[Command]:
        """The retry wait of ``job`` is over: START its next attempt (unless aborted)."""
    def drained(self, job: int) -> list[Command]:
        """A job CANCELled by the core has finished (whatever its outcome)."""
    def unstarted(self, job: int) -> list[Command]:
        """A START was never carried out (its task was cancelled before the call began).

        The attempt is not counted; for attempt 0 of a forward job this withdraws the
        release obligation. For a CANCELled job it ends the job like ``drained`` (report
        one or the other). For a running forward job the core did not cancel, it ends the
        job and aborts the forward phase (returns the CANCEL/STOP_SLEEP commands). For a
        release it completes that release (no retry).
        """
    def rejected(self, job: int) -> list[Command]:
        """The input of forward ``job`` was rejected before attempt 0 called anything.

        The node fails for good without an attempt: none is counted, no release is owed,
        and the forward phase aborts (returns the CANCEL/STOP_SLEEP commands). Only attempt
        0 can be rejected; for a job the core CANCELled meanwhile it ends the job the same
        way."""
    @property
    def instant_retries(self) -> bool:
        """Whether every retry wait of this run is 0 seconds (test mode)."""
    def cancel(self) -> list[Command]:
        """Caller cancellation or abort of the forward phase: CANCEL running forward jobs,
        STOP_SLEEP waiting ones, start nothing new. Idempotent. No effect on releases."""
    def carry_with(
        self,
        carrying: tuple[Carrier, dict[str, Any], list[Any], object, Callable[[], float]] | None,
    ) -> None:
        """Attach ``(carrier, values, acquisitions, task, clock)`` for the phase ``task``
        carries out on the loop whose ``time`` is ``clock``: ``start``, ``succeeded`` and
        ``begin_shutdown`` then carry out the lone STARTs (first attempts) among their
        commands themselves, storing values and acquisition records, and return what
        remains, or one ``CARRIED`` command. ``None`` detaches them. A carrier built for
        another plan (another number of nodes) is a ``ValueError``."""
    def begin_shutdown(self) -> list[Command]:
        """End of the forward phase (and of the body): START the first releases.

        Releases run for exactly the owned nodes whose first attempt started; a release
        starts after the releases of every owned node depending on its node (through
        inputs or borrows, transitively) have completed. Requires ``pending == 0``.
        """
    def start_carried(
        self,
        carrying: tuple[Carrier, dict[str, Any], list[Any], object, Callable[[], float]],
    ) -> list[Command]:
        """``carry_with(carrying)`` and ``start()`` in one call."""
    def abandon(self) -> list[Command]:
        """The driver's own bookkeeping of the forward phase failed (a ``RecursionError`` or
        ``MemoryError`` near the interpreter's limits): it has stopped every attempt
        without waiting. Every forward job not over is taken as over (a later ``drained``
        or ``unstarted`` of it is accepted), and the shutdown phase begins as with
        ``begin_shutdown()``: every release owed is still STARTed, in dependency order.
        ``RuntimeError`` once shutdown began."""
    def begin_shutdown_or_finish(self) -> list[Command] | None:
        """``begin_shutdown()``; ``None`` when that leaves the run finished with nothing to
        carry out, the carrier detached as by ``carry_with(None)``."""
    @property
    def pending(self) -> int:
        """Jobs currently running or waiting to retry (0 = the phase is quiescent)."""
    @property
    def lone(self) -> bool:
        """Exactly one job is pending: a START now is the run's only work (the core's rule
        for carrying it out inline, by the carrier or the driver)."""
    @property
    def aborted(self) -> bool:
        """A forward job failed for good or ``cancel`` was called."""
    @property
    def finished(self) -> bool:
        """Shutdown began and every owed release has completed."""
    def attempts(self, job: int) -> int:
        """Attempts started so far for ``job`` (forward or release job id)."""
    def started(self, job: int) -> bool:
        """Whether the job's first attempt started (forward: release owed if owned)."""
    def succeeded_jobs(self) -> list[int]:
        """Forward jobs that completed successfully."""

def has_room(frames: int) -> bool:
    """Whether ``frames`` more levels of recursion fit below the recursion limit now
    (Python 3.11's counter, which C calls share with Python frames); nothing runs."""

def run_budget(timeout: object) -> float | None:
    """Check a run's ``timeout`` (the forward phase's budget in seconds) and return it:
    ``None`` for none (``None`` or ``inf``); an int/float (subclasses included, not bool)
    ``>= 0`` otherwise, read exactly (a huge negative int is negative). ``TypeError`` for
    another type, ``ValueError`` for a negative value or NaN."""

def is_number(obj: object) -> bool:
    """Whether ``obj`` is a number as the core reads one: an int or a float, subclasses
    included, not a bool."""

# Shared state across runs (docs/contract.md#shared-objects). Every method taking ``now`` is handed
# ``time.monotonic()`` by the caller; the core never reads a clock. One lock per object.

@final
class Bulkhead:
    """Permits for at most ``max_concurrent`` calls at once; up to ``max_waiting`` callers
    queued first in, first out. ``TypeError``/``ValueError`` as docs/contract.md#shared-objects."""

    def __new__(cls, max_concurrent: int, max_waiting: int, name: str | None) -> Bulkhead: ...
    @property
    def name(self) -> str | None: ...
    @property
    def max_concurrent(self) -> int: ...
    @property
    def max_waiting(self) -> int: ...
    @property
    def in_use(self) -> int:
        """Permits out, those granted to a waiter not yet claimed included."""
    @property
    def waiting(self) -> int:
        """Callers queued for a permit."""
    def try_acquire(self) -> Literal["granted", "rejected"] | int:
        """``"granted"``: a permit is taken (give it back with ``release``);
        ``"rejected"``: fail with ``BulkheadFull``; an int: queued as this waiter id."""
    def release(self) -> int | None:
        """Give a permit back: the id of the waiter it went to (wake it), or ``None``.
        ``RuntimeError`` when no permit is out."""
    def claim(self, waiter: int) -> bool:
        """A woken waiter takes its permit; ``False``: it holds none."""
    def cancel_waiter(self, waiter: int) -> int | None:
        """The waiter goes away, queued or granted; the id of a waiter its permit went
        to (wake it), or ``None``."""

@final
class CircuitBreaker:
    """Closed, open for ``break_for`` seconds, half-open with up to ``probes`` probes
    (docs/contract.md#circuit-breaker). ``TypeError``/``ValueError`` as
    docs/contract.md#shared-objects."""

    def __new__(
        cls,
        failure_ratio: float,
        min_calls: int,
        window: float,
        break_for: float,
        probes: int,
        name: str | None,
    ) -> CircuitBreaker: ...
    @property
    def name(self) -> str | None: ...
    @property
    def failure_ratio(self) -> float: ...
    @property
    def min_calls(self) -> int: ...
    @property
    def window(self) -> float: ...
    @property
    def break_for(self) -> float: ...
    @property
    def probes(self) -> int: ...
    def state(self, now: float) -> Literal["closed", "open", "half_open"]: ...
    def outcomes(self, now: float) -> tuple[int, int]:
        """``(successes, failures)`` recorded within the window at ``now``."""
    def admit(self, now: float) -> tuple[int | float | None, Literal["half_open"] | None]:
        """``(admission, transition)``: ``None`` = go ahead; an int = go ahead as this
        probe (hand it to ``record`` or ``forget_probe``); a float = rejected, the
        ``retry_after``. Transition ``"half_open"`` when this call ended the break."""
    def record(
        self, now: float, success: bool, probe: int | None
    ) -> Literal["open", "closed"] | None:
        """The outcome of an admitted attempt; the transition it caused, if any."""
    def forget_probe(self, probe: int) -> None:
        """A probe ended with nothing to record: its place goes to another attempt."""

@final
class RetryBudget:
    """Retries at most ``ratio`` * first attempts + ``min_per_second`` * ``window``
    within the trailing window (docs/contract.md#retry-budget)."""

    def __new__(cls, ratio: float, min_per_second: float, window: float) -> RetryBudget: ...
    @property
    def ratio(self) -> float: ...
    @property
    def min_per_second(self) -> float: ...
    @property
    def window(self) -> float: ...
    def deposit(self, now: float) -> None:
        """A first attempt started at ``now``."""
    def try_take(self, now: float) -> bool:
        """A retry wants to start: ``True`` (and counted) if the budget allows it."""
    def available(self, now: float) -> float:
        """Retries the budget would allow at ``now``, never below 0."""
    def counts(self, now: float) -> tuple[int, int]:
        """``(first attempts, retries taken)`` within the window at ``now``."""

@final
class Latency:
    """The percentile of a node's successful attempts' durations within the trailing window,
    ``initial`` until ``min_samples`` (docs/contract.md#latency)."""

    def __new__(
        cls, percentile: float, window: float, min_samples: int, initial: float
    ) -> Latency: ...
    @property
    def percentile(self) -> float: ...
    @property
    def window(self) -> float: ...
    @property
    def min_samples(self) -> int: ...
    @property
    def initial(self) -> float: ...
    @property
    def capacity(self) -> int:
        """Samples a window of this configuration holds at most (its fixed memory)."""
    def new_window(self) -> LatencyWindow:
        """A new, empty window of this configuration (one per node and Driver)."""

@final
class LatencyWindow:
    """One node's latency window, shared across runs and threads."""

    def record(self, now: float, duration: float) -> None:
        """A successful attempt that took ``duration`` seconds ended at ``now``."""
    def hedge_after(self, now: float) -> float:
        """The delay after which a hedge is due at ``now`` (seconds)."""
    def samples(self, now: float) -> int:
        """Successes within the window at ``now`` that the window holds."""

def check_hedging(hedge_after: object, hedges: object) -> tuple[float | None, int]:
    """``execution(hedge_after=, hedges=)`` checked (docs/contract.md#hedging): a number or
    ``None`` (a ``Latency`` is passed as ``None``) and an int; ``bool`` refused. Returns them
    as the core keeps them."""

@final
class HedgeRound:
    """One hedged round of a node's calls (docs/contract.md#hedged-rounds): call 0 starts
    at ``now``, at most ``hedges`` more; not yet driven by runs."""

    def __new__(cls, now: float, hedges: int) -> HedgeRound: ...
    @property
    def started(self) -> int:
        """Calls started so far."""
    @property
    def winner(self) -> int | None:
        """The winning call, once one has won."""
    def next_due(self, hedge_after: float) -> float | None:
        """When the next hedge is due (``None``: no further call will start)."""
    def start_hedge(self, now: float, hedge_after: float) -> int | None:
        """Start the due hedge at ``now``: its call number, or ``None`` when none is due."""
    def skip_hedge(self, now: float, hedge_after: float) -> bool:
        """The due hedge was skipped at ``now``: ``False`` when none was due."""
    def succeeded(self, call: int) -> tuple[str, list[int]]:
        """``("won", calls to cancel)``, ``("recorded", [])`` (a loser's value) or
        ``("ignored", [])``."""
    def failed(self, call: int) -> tuple[str, list[int]]:
        """``("recorded", [])`` or ``("ignored", [])``."""
    def drained(self, call: int) -> tuple[str, list[int]]:
        """Call ``call``, told to stop, has ended: ``("recorded", [])`` or ``("ignored", [])``."""
    def abort(self) -> list[int]:
        """The round is aborted: the running calls to cancel."""
    def completion(self) -> tuple[str, list[int]] | None:
        """``None`` while a call runs or drains; else ``("won", [winner])``, ``("failed",
        [calls noted beside call 0])`` or ``("aborted", [])``."""

def join_ascii(pieces: list[str]) -> str:
    """``"".join(pieces)`` of ASCII pieces, copied with the interpreter lock let go
    (``ValueError`` for a piece that is not an ASCII ``str``)."""
