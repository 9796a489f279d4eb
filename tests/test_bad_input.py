"""Bad-input catalogue: every misuse the contract names, table-driven.

Each row performs one misuse and states the exception type the contract prescribes and the
fragments its message must contain (the offending argument, node or function, plus the contract's
message fragment where it gives one). Every function in the row's modules records its calls,
and the test asserts none ran: misuse is refused before any user code executes.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import Driver, execution, shutdown

HEADER = """
import asyncio
import enum
from typing import (
    Annotated, Any, Callable, Literal, Optional, Protocol, Sequence, TypeVar,
)
from hamilton.function_modifiers import (
    check_output, config, extract_fields, hamilton_exclude, parameterize, tag, value,
)
from sdax_hamilton import Acquisition, execution, shutdown

RAN: list[str] = []
"""

_counter = itertools.count()


class Maker:
    """Builds registered modules for one row and remembers them."""

    def __init__(self) -> None:
        self.modules: list[types.ModuleType] = []

    def __call__(self, source: str, *, register: bool = True) -> types.ModuleType:
        name = f"sdax_bad_input_{next(_counter)}"
        module = types.ModuleType(name)
        if register:
            sys.modules[name] = module
        exec(compile(HEADER + textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
        self.modules.append(module)
        return module

    def ran(self) -> list[str]:
        return [call for module in self.modules for call in module.__dict__.get("RAN", [])]

    def dispose(self) -> None:
        for module in self.modules:
            sys.modules.pop(module.__name__, None)


@dataclass(frozen=True)
class Case:
    id: str
    exc: type[BaseException]
    names: tuple[str, ...]
    action: Callable[[Maker], object]


CASES: list[Case] = []


def case(id: str, exc: type[BaseException], *names: str) -> Callable[[Any], Any]:
    def register(action: Callable[[Maker], object]) -> Callable[[Maker], object]:
        CASES.append(Case(id, exc, names, action))
        return action

    return register


def policy_case(id: str, exc: type[BaseException], names: tuple[str, ...], **kwargs: Any) -> None:
    """The same bad policy argument, for ``execution`` and for ``shutdown``."""
    CASES.append(Case(f"execution-{id}", exc, names, calling(EXECUTION, **kwargs)))
    CASES.append(Case(f"shutdown-{id}", exc, names, calling(SHUTDOWN, of=_owner, **kwargs)))


def _owner() -> int:  # a callable to pass as of= in decorator-level rows
    raise AssertionError("never called")


EXECUTION: Any = execution  # untyped aliases: the rows pass what the signatures forbid
SHUTDOWN: Any = shutdown
DRIVER: Any = Driver


def calling(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Callable[[Maker], object]:
    return lambda _make: fn(*args, **kwargs)


def driver_of(source: str, prefix: str = "") -> Callable[[Maker], object]:
    return lambda make: Driver(make(prefix + textwrap.dedent(source)))


def preparing(source: str, arguments: dict[str, Any]) -> Callable[[Maker], object]:
    return lambda make: DRIVER(make(source)).prepare(**arguments)


def run(coro: Any) -> Any:
    return loop_support.run(coro)


# ------------------------------------------------------------------------------------------
# docs/contract.md#declaration-signatures, #policy-validation: policy arguments
# ------------------------------------------------------------------------------------------

policy_case("retries-negative", ValueError, ("retries", "nonnegative integer"), retries=-1)
policy_case("retries-float", TypeError, ("retries",), retries=1.5)
policy_case("retries-bool", TypeError, ("retries",), retries=True)
policy_case("retries-str", TypeError, ("retries",), retries="3")
policy_case("timeout-zero", ValueError, ("timeout", "Invalid timeout: 0"), timeout=0)
policy_case("timeout-negative", ValueError, ("timeout",), timeout=-1.0)
policy_case("timeout-inf", ValueError, ("timeout",), timeout=math.inf)
policy_case("timeout-nan", ValueError, ("timeout",), timeout=math.nan)
policy_case("timeout-str", TypeError, ("timeout",), timeout="5")
policy_case("timeout-bool", TypeError, ("timeout",), timeout=True)
policy_case("initial_delay-negative", ValueError, ("initial_delay",), initial_delay=-0.1)
policy_case("initial_delay-inf", ValueError, ("initial_delay",), initial_delay=math.inf)
policy_case("initial_delay-nan", ValueError, ("initial_delay",), initial_delay=math.nan)
policy_case("initial_delay-str", TypeError, ("initial_delay",), initial_delay="1")
policy_case("backoff-zero", ValueError, ("Invalid backoff_factor: 0",), backoff_factor=0)
policy_case("backoff-negative", ValueError, ("backoff_factor",), backoff_factor=-2.0)
policy_case("backoff-inf", ValueError, ("backoff_factor",), backoff_factor=math.inf)
policy_case("backoff-nan", ValueError, ("backoff_factor",), backoff_factor=math.nan)
policy_case("backoff-str", TypeError, ("backoff_factor",), backoff_factor="2")
policy_case(
    "retryable-empty",
    ValueError,
    ("retryable_exceptions", "nonempty tuple of exception classes"),
    retryable_exceptions=(),
)
policy_case(
    "retryable-list",
    TypeError,
    ("retryable_exceptions", "nonempty tuple of exception classes"),
    retryable_exceptions=[ValueError],
)
policy_case(
    "retryable-instance",
    TypeError,
    ("retryable_exceptions", "must contain exception classes"),
    retryable_exceptions=(ValueError(),),
)
policy_case(
    "retryable-non-exception-class",
    TypeError,
    ("retryable_exceptions", "must contain exception classes"),
    retryable_exceptions=(int,),
)
for _cls in (BaseException, asyncio.CancelledError, KeyboardInterrupt, SystemExit):
    policy_case(
        f"retryable-{_cls.__name__}",
        ValueError,
        ("External cancellation and process termination cannot be retryable",),
        retryable_exceptions=(ConnectionError, _cls),
    )
policy_case(
    "retryable-cancelled-even-without-retries",
    ValueError,
    ("cannot be retryable",),
    retries=0,
    retryable_exceptions=(asyncio.CancelledError,),
)

case("execution-positional", TypeError)(calling(EXECUTION, 5))
case("shutdown-positional", TypeError)(calling(SHUTDOWN, _owner))
case("shutdown-without-of", TypeError, "of")(calling(SHUTDOWN))
case("shutdown-of-not-callable", TypeError, "shutdown of= must refer to an acquisition function")(
    lambda _m: shutdown(of=5)  # type: ignore[arg-type]
)
case("shutdown-of-checked-before-policy", TypeError, "shutdown of=")(
    lambda _m: shutdown(of=5, retries=-1)  # type: ignore[arg-type]
)

# ------------------------------------------------------------------------------------------
# docs/contract.md#target-validation: target_
# ------------------------------------------------------------------------------------------

TARGETS: list[tuple[str, object, type[BaseException]]] = [
    ("empty-string", "", ValueError),
    ("empty-list", [], ValueError),
    ("empty-member", ["a", ""], ValueError),
    ("non-str-member", ["a", 1], ValueError),
    ("duplicate-members", ("a", "a"), ValueError),
    ("bytes", b"a", TypeError),
    ("dict", {"a": 1}, TypeError),
    ("int", 5, TypeError),
]
for _label, _target, _exc in TARGETS:
    CASES.append(
        Case(f"execution-target-{_label}", _exc, ("target_",), calling(EXECUTION, target_=_target))
    )
    CASES.append(
        Case(
            f"shutdown-target-{_label}",
            _exc,
            ("target_",),
            calling(SHUTDOWN, of=_owner, target_=_target),
        )
    )
case("target-checked-after-policy", ValueError, "retries")(
    calling(EXECUTION, retries=-1, target_=5)
)

# ------------------------------------------------------------------------------------------
# docs/contract.md#decoration: conflicting declarations
# ------------------------------------------------------------------------------------------


@case("execution-twice", ValueError, "Conflicting execution/shutdown declaration", "twice")
def _(make: Maker) -> object:
    return make(
        """
        @execution(retries=1)
        @execution(timeout=1.0)
        def twice() -> int:
            RAN.append("twice")
            return 1
        """
    )


@case("shutdown-then-execution", ValueError, "Conflicting execution/shutdown declaration", "rel")
def _(make: Maker) -> object:
    return make(
        """
        def res() -> int:
            RAN.append("res")
            return 1

        @execution(timeout=1.0)
        @shutdown(of=res)
        def rel(acquired: Acquisition[int]) -> None:
            RAN.append("rel")
        """
    )


@case("execution-then-shutdown", ValueError, "Conflicting execution/shutdown declaration", "rel")
def _(make: Maker) -> object:
    return make(
        """
        def res() -> int:
            RAN.append("res")
            return 1

        @shutdown(of=res)
        @execution(timeout=1.0)
        def rel(acquired: Acquisition[int]) -> None:
            RAN.append("rel")
        """
    )


case("declaration-on-object-refusing-attributes", AttributeError)(lambda _m: execution()(len))

# ------------------------------------------------------------------------------------------
# docs/contract.md#driver-arguments: Driver arguments
# ------------------------------------------------------------------------------------------

SIMPLE = """
def a(x: int) -> int:
    RAN.append("a")
    return x + 1
"""

case("driver-config-not-mapping", TypeError, "Configuration must be a mapping")(
    lambda make: Driver(make(SIMPLE), config=[("a", 1)])  # type: ignore[arg-type]
)
case("driver-config-key-not-str", TypeError, "Configuration keys")(
    lambda make: Driver(make(SIMPLE), config={1: 2})  # type: ignore[dict-item]
)
case("driver-config-key-empty", TypeError, "Configuration keys")(
    lambda make: Driver(make(SIMPLE), config={"": 2})
)
case("driver-no-modules", TypeError, "Driver requires one or more Python modules")(
    lambda _m: Driver()
)
case("driver-not-a-module", TypeError, "Driver requires one or more Python modules")(
    lambda make: Driver(make(SIMPLE), "a")  # type: ignore[arg-type]
)

# ------------------------------------------------------------------------------------------
# docs/contract.md#discovery: discovery
# ------------------------------------------------------------------------------------------


@case("module-not-loaded", ValueError, "is not loaded", "sdax_bad_input_")
def _(make: Maker) -> object:
    return Driver(make(SIMPLE, register=False))


@case("public-name-bound-to-lambda", ValueError, "ambiguous defining module")
def _(make: Maker) -> object:
    return Driver(make(SIMPLE + "\nb = lambda a: a\n"))


@case("release-owner-not-a-node", ValueError, "far_release", "far_owner")
def _(make: Maker) -> object:
    owner = make(
        """
        def far_owner() -> int:
            RAN.append("far_owner")
            return 1
        """
    )
    releases = make(
        f"""
        import {owner.__name__} as _owner_module

        @shutdown(of=_owner_module.far_owner)
        def far_release(acquired: Acquisition[int]) -> None:
            RAN.append("far_release")
        """
    )
    return Driver(releases)


@case("two-releases-same-node", ValueError, "duplicate shutdown declaration", "conn")
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            def conn() -> int:
                RAN.append("conn")
                return 1

            @shutdown(of=conn)
            def close_one(acquired: Acquisition[int]) -> None:
                RAN.append("close_one")

            @shutdown(of=conn)
            def close_two(acquired: Acquisition[int]) -> None:
                RAN.append("close_two")
            """
        )
    )


@case("excluded-function-owns-shutdown", ValueError, "hidden")
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            @hamilton_exclude
            def hidden():
                RAN.append("hidden")
                return 1

            @shutdown(of=hidden)
            def close_hidden(acquired: Acquisition[Any]) -> None:
                RAN.append("close_hidden")
            """
        )
    )


# ------------------------------------------------------------------------------------------
# docs/contract.md#declaration-checks: declaration checks
# ------------------------------------------------------------------------------------------

DECLARATIONS: list[tuple[str, type[BaseException], tuple[str, ...], str]] = [
    (
        "generator",
        TypeError,
        ("gen",),
        """
        def gen() -> int:
            RAN.append("gen")
            yield 1
        """,
    ),
    (
        "async-generator",
        TypeError,
        ("agen",),
        """
        async def agen() -> int:
            RAN.append("agen")
            yield 1
        """,
    ),
    (
        "var-positional",
        TypeError,
        ("star", "args"),
        """
        def star(*args: int) -> int:
            RAN.append("star")
            return 1
        """,
    ),
    (
        "var-keyword",
        TypeError,
        ("kw", "kwargs"),
        """
        def kw(**kwargs: int) -> int:
            RAN.append("kw")
            return 1
        """,
    ),
    (
        "positional-only",
        TypeError,
        ("posonly", "x"),
        """
        def posonly(x: int, /) -> int:
            RAN.append("posonly")
            return x
        """,
    ),
    (
        "missing-parameter-annotation",
        TypeError,
        ("untyped.x: missing type",),
        """
        def untyped(x) -> int:
            RAN.append("untyped")
            return x
        """,
    ),
    (
        "callable-annotation",
        TypeError,
        ("takes_callable", "f"),
        """
        def takes_callable(f: Callable[[int], int]) -> int:
            RAN.append("takes_callable")
            return 1
        """,
    ),
    (
        "sequence-annotation",
        TypeError,
        ("takes_seq", "s"),
        """
        def takes_seq(s: Sequence[int]) -> int:
            RAN.append("takes_seq")
            return 1
        """,
    ),
    (
        "annotated-annotation",
        TypeError,
        ("takes_annotated", "a"),
        """
        def takes_annotated(a: Annotated[int, "meta"]) -> int:
            RAN.append("takes_annotated")
            return 1
        """,
    ),
    (
        "typevar-annotation",
        TypeError,
        ("takes_typevar", "t"),
        """
        T = TypeVar("T")

        def takes_typevar(t: T) -> int:
            RAN.append("takes_typevar")
            return 1
        """,
    ),
    (
        "protocol-annotation",
        TypeError,
        ("takes_protocol", "p"),
        """
        class Closer(Protocol):
            def close(self) -> None: ...

        def takes_protocol(p: Closer) -> int:
            RAN.append("takes_protocol")
            return 1
        """,
    ),
    (
        "literal-enum-annotation",
        TypeError,
        ("takes_enum_literal", "c"),
        """
        class Color(enum.Enum):
            RED = 1

        def takes_enum_literal(c: Literal[Color.RED]) -> int:
            RAN.append("takes_enum_literal")
            return 1
        """,
    ),
    (
        "invalid-default",
        TypeError,
        ("invalid default", "bad_default", "x"),
        """
        def bad_default(x: int = "seven") -> int:
            RAN.append("bad_default")
            return 1
        """,
    ),
    (
        "missing-return-annotation",
        TypeError,
        ("no_return",),
        """
        def no_return(x: int):
            RAN.append("no_return")
            return x
        """,
    ),
    (
        "unsupported-return-annotation",
        TypeError,
        ("seq_return",),
        """
        def seq_return(x: int) -> Sequence[int]:
            RAN.append("seq_return")
            return [x]
        """,
    ),
    (
        "subclass-of-admitted-decorator",
        ValueError,
        ("unsupported Hamilton decorator", "MyTag"),
        """
        class MyTag(tag):
            pass

        @MyTag(owner="me")
        def tagged(x: int) -> int:
            RAN.append("tagged")
            return x
        """,
    ),
]
for _label, _exc, _names, _source in DECLARATIONS:
    CASES.append(Case(f"declaration-{_label}", _exc, _names, driver_of(_source)))

# ------------------------------------------------------------------------------------------
# docs/contract.md#release-checks: release checks
# ------------------------------------------------------------------------------------------

OWNER = """
def res() -> int:
    RAN.append("res")
    return 1
"""

RELEASES: list[tuple[str, type[BaseException], tuple[str, ...], str]] = [
    (
        "generator",
        TypeError,
        ("close_gen",),
        """
        @shutdown(of=res)
        def close_gen(acquired: Acquisition[int]) -> None:
            RAN.append("close_gen")
            yield
        """,
    ),
    (
        "async-generator",
        TypeError,
        ("close_agen",),
        """
        @shutdown(of=res)
        async def close_agen(acquired: Acquisition[int]) -> None:
            RAN.append("close_agen")
            yield
        """,
    ),
    (
        "hamilton-decorator",
        ValueError,
        ("close_tagged",),
        """
        @tag(owner="me")
        @shutdown(of=res)
        def close_tagged(acquired: Acquisition[int]) -> None:
            RAN.append("close_tagged")
        """,
    ),
    (
        "no-parameter",
        TypeError,
        ("close_none",),
        """
        @shutdown(of=res)
        def close_none() -> None:
            RAN.append("close_none")
        """,
    ),
    (
        "two-parameters",
        TypeError,
        ("close_two",),
        """
        @shutdown(of=res)
        def close_two(acquired: Acquisition[int], extra: int) -> None:
            RAN.append("close_two")
        """,
    ),
    (
        "parameter-default",
        TypeError,
        ("close_default",),
        """
        @shutdown(of=res)
        def close_default(acquired: Acquisition[int] = None) -> None:
            RAN.append("close_default")
        """,
    ),
    (
        "keyword-only-parameter",
        TypeError,
        ("close_kwonly",),
        """
        @shutdown(of=res)
        def close_kwonly(*, acquired: Acquisition[int]) -> None:
            RAN.append("close_kwonly")
        """,
    ),
    (
        "not-an-acquisition",
        TypeError,
        ("close_plain",),
        """
        @shutdown(of=res)
        def close_plain(acquired: int) -> None:
            RAN.append("close_plain")
        """,
    ),
    (
        "bare-acquisition",
        TypeError,
        ("close_bare",),
        """
        @shutdown(of=res)
        def close_bare(acquired: Acquisition) -> None:
            RAN.append("close_bare")
        """,
    ),
    (
        "unsupported-acquisition-type",
        TypeError,
        ("close_callable",),
        """
        @shutdown(of=res)
        def close_callable(acquired: Acquisition[Callable[[int], int]]) -> None:
            RAN.append("close_callable")
        """,
    ),
    (
        "missing-return-annotation",
        TypeError,
        ("close_unannotated",),
        """
        @shutdown(of=res)
        def close_unannotated(acquired: Acquisition[int]):
            RAN.append("close_unannotated")
        """,
    ),
    (
        "return-not-none",
        TypeError,
        ("close_int",),
        """
        @shutdown(of=res)
        def close_int(acquired: Acquisition[int]) -> int:
            RAN.append("close_int")
            return 0
        """,
    ),
    (
        "incompatible-acquisition-type",
        TypeError,
        ("shutdown Acquisition type does not accept", "res"),
        """
        @shutdown(of=res)
        def close_str(acquired: Acquisition[str]) -> None:
            RAN.append("close_str")
        """,
    ),
    (
        "owned-acquisition-with-retries",
        ValueError,
        ("Acquisition retries require attempt cleanup: retried",),
        """
        @execution(retries=2)
        def retried() -> int:
            RAN.append("retried")
            return 1

        @shutdown(of=retried)
        def close_retried(acquired: Acquisition[int]) -> None:
            RAN.append("close_retried")
        """,
    ),
]
for _label, _exc, _names, _source in RELEASES:
    CASES.append(Case(f"release-{_label}", _exc, _names, driver_of(_source, OWNER)))

# ------------------------------------------------------------------------------------------
# docs/contract.md#translation, #targets: generated nodes and targets
# ------------------------------------------------------------------------------------------


@case("duplicate-node-across-modules", ValueError, "Duplicate Hamilton node", "a")
def _(make: Maker) -> object:
    return Driver(make(SIMPLE), make(SIMPLE))


@case("hamilton-edge-type-mismatch", ValueError, "b")
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            def a() -> Optional[int]:
                RAN.append("a")
                return 1

            def b(a: int) -> int:
                RAN.append("b")
                return a
            """
        )
    )


@case(
    "expanded-declaration-without-target",
    ValueError,
    "expanded declaration requires explicit target_",
)
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            @execution(timeout=1.0)
            @parameterize(one={"x": value(1)}, two={"x": value(2)})
            def p(x: int) -> int:
                RAN.append("p")
                return x
            """
        )
    )


@case("target-not-generated", ValueError, "targets not generated", "nowhere")
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            @execution(timeout=1.0, target_="nowhere")
            def a(x: int) -> int:
                RAN.append("a")
                return x
            """
        )
    )


# ------------------------------------------------------------------------------------------
# docs/contract.md#prepare-arguments, #selection: prepare
# ------------------------------------------------------------------------------------------

CHAIN = """
def a(x: int) -> int:
    RAN.append("a")
    return x + 1

def b(a: int, y: int = 2) -> int:
    RAN.append("b")
    return a + y

def c(b: int) -> int:
    RAN.append("c")
    return b
"""

RESOURCE = """
class Conn:
    pass

async def conn() -> Conn:
    RAN.append("conn")
    return Conn()

@shutdown(of=conn)
async def close_conn(acquired: Acquisition[Conn]) -> None:
    RAN.append("close_conn")

async def rows(conn: Conn) -> int:
    RAN.append("rows")
    return 1
"""

PREPARE_ROWS: list[tuple[str, type[BaseException], tuple[str, ...], dict[str, Any]]] = [
    ("check-outputs-not-bool", TypeError, ("check_outputs",), {"check_outputs": 1}),
    ("final-vars-str", TypeError, ("final_vars", "not a string"), {"final_vars": "c"}),
    ("final-vars-bytes", TypeError, ("final_vars",), {"final_vars": b"c"}),
    ("final-vars-non-str", ValueError, ("final_vars",), {"final_vars": ["c", 1]}),
    ("final-vars-empty-name", ValueError, ("final_vars",), {"final_vars": [""]}),
    ("final-vars-duplicate", ValueError, ("final_vars", "c"), {"final_vars": ["c", "c"]}),
    ("final-vars-empty", ValueError, ("final_vars",), {"final_vars": []}),
    ("optional-inputs-str", TypeError, ("optional_inputs",), {"optional_inputs": "y"}),
    (
        "optional-inputs-duplicate",
        ValueError,
        ("optional_inputs", "y"),
        {"optional_inputs": ["y", "y"]},
    ),
    ("override-nodes-str", TypeError, ("override_nodes",), {"override_nodes": "a"}),
    ("override-nodes-empty-name", ValueError, ("override_nodes",), {"override_nodes": [""]}),
    ("unknown-final-var", ValueError, ("Unknown selected node: 'nope'",), {"final_vars": ["nope"]}),
    ("input-as-final-var", ValueError, ("Unknown selected node: 'x'",), {"final_vars": ["x"]}),
    ("unknown-override", ValueError, ("Unknown override nodes", "zz"), {"override_nodes": ["zz"]}),
    (
        "unused-override",
        ValueError,
        ("Unused override declaration", "c"),
        {"final_vars": ["b"], "override_nodes": ["c"]},
    ),
    (
        "unused-optional-input",
        ValueError,
        ("Unused optional input declaration", "q"),
        {"optional_inputs": ["q"]},
    ),
]
for _label, _exc, _names, _call in PREPARE_ROWS:
    CASES.append(
        Case(
            f"prepare-{_label}",
            _exc,
            _names,
            preparing(CHAIN, {"final_vars": ["c"]} | _call),
        )
    )

case(
    "prepare-config-override-overlap",
    ValueError,
    "Configuration and overrides must be disjoint",
    "a",
)(lambda make: Driver(make(CHAIN), config={"a": 1}).prepare(["c"], override_nodes=["a"]))
case("prepare-cycle", ValueError, "p", "q")(
    lambda make: Driver(
        make(
            """
            def p(q: int) -> int:
                RAN.append("p")
                return q

            def q(p: int) -> int:
                RAN.append("q")
                return p
            """
        )
    ).prepare(["p"])
)
case("prepare-override-owned", ValueError, "Cannot replace owned acquisition: conn")(
    lambda make: Driver(make(RESOURCE)).prepare(["rows"], override_nodes=["conn"])
)
case("prepare-config-replaces-owned", ValueError, "Cannot replace owned acquisition", "conn")(
    lambda make: Driver(make(RESOURCE), config={"conn": object()}).prepare(["rows"])
)
case("prepare-config-replacement-type", TypeError, "Invalid config replacement: a")(
    lambda make: Driver(make(CHAIN), config={"a": "one"}).prepare(["c"])
)
case("prepare-config-input-type", TypeError, "x")(
    lambda make: Driver(make(CHAIN), config={"x": "one"}).prepare(["c"])
)
case("prepare-incompatible-edge", TypeError, "Incompatible edge: a -> b")(
    lambda make: Driver(
        make(
            """
            def a() -> list:
                RAN.append("a")
                return []

            def b(a: list[int]) -> int:
                RAN.append("b")
                return 1
            """
        )
    ).prepare(["b"])
)


CHECKED = """
@check_output(range=(0, 10))
def checked(x: int) -> int:
    RAN.append("checked")
    return x

@extract_fields({"left": int, "right": int})
def pair(x: int) -> dict:
    RAN.append("pair")
    return {"left": x, "right": x}
"""


@case("prepare-validation-internal-output", ValueError, "checked_raw")
def _(make: Maker) -> object:
    return Driver(make(CHECKED)).prepare(["checked_raw"])


case(
    "prepare-override-validation-node",
    ValueError,
    "Cannot replace validation or borrowed nodes",
    "checked_raw",
)(lambda make: Driver(make(CHECKED)).prepare(["checked"], override_nodes=["checked_raw"]))


@case(
    "prepare-override-borrowed-node",
    ValueError,
    "Cannot replace validation or borrowed nodes",
    "left",
)
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            class Pair(dict):
                pass

            @extract_fields({"left": int, "right": int})
            def pair(x: int) -> dict:
                RAN.append("pair")
                return {"left": x, "right": x}

            @shutdown(of=pair)
            def close_pair(acquired: Acquisition[dict]) -> None:
                RAN.append("close_pair")

            def total(left: int) -> int:
                RAN.append("total")
                return left
            """
        )
    ).prepare(["total"], override_nodes=["left"])


@case(
    "prepare-acquisition-expansion-without-shutdown",
    ValueError,
    "Selected acquisition expansion lacks shutdown",
    "two",
)
def _(make: Maker) -> object:
    return Driver(
        make(
            """
            @parameterize(one={"x": value(1)}, two={"x": value(2)})
            def p(x: int) -> int:
                RAN.append("p")
                return x

            @shutdown(of=p, target_="one")
            def close_p(acquired: Acquisition[int]) -> None:
                RAN.append("close_p")
            """
        )
    ).prepare(["two"])


# ------------------------------------------------------------------------------------------
# docs/contract.md#run-checks, #execute: per call
# ------------------------------------------------------------------------------------------


def _plan(make: Maker, **kw: Any) -> Any:
    return Driver(make(CHAIN)).prepare(["c"], **kw)


case("call-missing-input", ValueError, "Input shape mismatch", "x")(
    lambda make: run(_plan(make).execute(inputs={}))
)
case("call-extra-input", ValueError, "Input shape mismatch", "zz")(
    lambda make: run(_plan(make).execute(inputs={"x": 1, "zz": 2}))
)
case("call-defaulted-input-not-declared-optional", ValueError, "Input shape mismatch", "y")(
    lambda make: run(_plan(make).execute(inputs={"x": 1, "y": 2}))
)
case("call-input-type", TypeError, "Invalid input: x")(
    lambda make: run(_plan(make).execute(inputs={"x": "1"}))
)
case("call-optional-input-type", TypeError, "Invalid input: y")(
    lambda make: run(_plan(make, optional_inputs=["y"]).execute(inputs={"x": 1, "y": 2.5}))
)
case("call-override-shape-missing", ValueError, "Override shape mismatch", "b")(
    lambda make: run(_plan(make, override_nodes=["b"]).execute(inputs={}))
)
case("call-override-shape-extra", ValueError, "Override shape mismatch", "a")(
    lambda make: run(_plan(make, override_nodes=["b"]).execute(overrides={"b": 1, "a": 1}))
)
case("call-override-type", TypeError, "Invalid override: b")(
    lambda make: run(_plan(make, override_nodes=["b"]).execute(overrides={"b": "1"}))
)
case("call-open-input-type", TypeError, "Invalid input: x")(
    lambda make: run(_enter(_plan(make).open(inputs={"x": None})))
)


@case("call-override-rejected-by-consumer", TypeError, "Invalid override: a")
def _(make: Maker) -> object:
    plan = Driver(
        make(
            """
            def a() -> Optional[int]:
                RAN.append("a")
                return 1

            def b(a: Optional[int]) -> int:
                RAN.append("b")
                return 1

            def c(a: Any, b: int) -> int:
                RAN.append("c")
                return b
            """
        )
    ).prepare(["c"], override_nodes=["a"])
    return run(plan.execute(overrides={"a": "text"}))


case(
    "execute-resource-output",
    ValueError,
    "Use open() to access resource outputs within their lifetime",
    "conn",
)(lambda make: run(Driver(make(RESOURCE)).prepare(["conn"]).execute()))


@case(
    "execute-borrowing-output",
    ValueError,
    "Use open() to access resource outputs within their lifetime",
    "left",
)
def _(make: Maker) -> object:
    plan = Driver(
        make(
            """
            @extract_fields({"left": int, "right": int})
            def pair(x: int) -> dict:
                RAN.append("pair")
                return {"left": x, "right": x}

            @shutdown(of=pair)
            def close_pair(acquired: Acquisition[dict]) -> None:
                RAN.append("close_pair")
            """
        )
    ).prepare(["left"])
    return run(plan.execute(inputs={"x": 1}))


async def _enter(context: Any) -> None:
    async with context:
        raise AssertionError("the body must not run")


# ------------------------------------------------------------------------------------------
# The table-driven test
# ------------------------------------------------------------------------------------------


@pytest.fixture
def make() -> Iterator[Maker]:
    maker = Maker()
    yield maker
    maker.dispose()


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) > 100


@pytest.mark.parametrize("row", CASES, ids=[c.id for c in CASES])
def test_misuse_is_refused_before_user_code_runs(row: Case, make: Maker) -> None:
    with pytest.raises(BaseException) as caught:
        row.action(make)
    exc = caught.value
    assert type(exc) is row.exc, (
        f"{row.id}: expected {row.exc.__name__}, got {type(exc).__name__}: {exc}"
    )
    message = str(exc)
    missing = [name for name in row.names if name not in message]
    assert not missing, f"{row.id}: message {message!r} lacks {missing}"
    assert make.ran() == [], f"{row.id}: user code ran: {make.ran()}"
