"""Error messages built from user data (docs/errors.md, "Bounded messages and hostile names").

* Bounded: a million extra input keys, a 50 MB name, a 1,000-node cycle each give a message
  of a few hundred characters, with counts and lengths.
* Hostile keys and names (not ``str``, ``str`` subclasses, keys whose ``__repr__``,
  ``__hash__`` or ``__eq__`` raise or lie) get the documented error class, never a
  ``RuntimeError``, ``UnicodeEncodeError`` or their own exception; a hypothesis test
  draws them.
* Suggestions (``did you mean``) and the first line of ``ExecutionError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import loops as loop_support
from support.modules import load_module

from sdax_hamilton import Driver, ExecutionError, _core, execution
from sdax_hamilton._failures import failure_group

SOURCE = """
def rows(dsn: str, limit: int, page: int = 1) -> list[int]:
    return list(range(limit))


def count(rows: list[int]) -> int:
    return len(rows)
"""

GOOD = {"dsn": "db", "limit": 3}


@pytest.fixture(scope="module")
def driver() -> Driver:
    return Driver(load_module(SOURCE))


def run(coro: Any) -> Any:
    return loop_support.run(coro)


# ---- bounds ---------------------------------------------------------------------------


def test_a_million_extra_keys_give_a_short_message_with_a_count(driver: Driver) -> None:
    inputs: dict[str, Any] = dict(GOOD)
    inputs.update((f"k{i}", i) for i in range(1_000_000))
    with pytest.raises(ValueError, match="Input shape mismatch") as caught:
        run(driver.prepare(["count"]).execute(inputs=inputs))
    message = str(caught.value)
    assert len(message) < 1_000, len(message)
    assert "… and 999,990 more" in message


def test_a_huge_key_name_is_cut_with_its_length(driver: Driver) -> None:
    huge = "a" * 50 * 2**20
    with pytest.raises(ValueError, match="Input shape mismatch") as caught:
        run(driver.prepare(["count"]).execute(inputs={**GOOD, huge: 1}))
    message = str(caught.value)
    assert len(message) < 1_000, len(message)
    assert "(52,428,800 characters)" in message


@pytest.mark.parametrize(
    "arguments",
    [
        {"final_vars": ["b" * 10_000_000]},
        {"final_vars": ["count"], "override_nodes": ["c" * 10_000_000]},
        {"final_vars": ["count"], "optional_inputs": ["d" * 10_000_000]},
        {"final_vars": ["count"], "override_nodes": [f"n{i}" for i in range(100_000)]},
    ],
    ids=["output", "override", "optional", "many-overrides"],
)
def test_prepare_messages_are_bounded(driver: Driver, arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as caught:
        driver.prepare(**arguments)
    assert len(str(caught.value)) < 1_000, len(str(caught.value))


def test_a_long_cycle_is_shown_in_part_with_its_length() -> None:
    n = 1_000
    graph = _core.Graph(
        [(f"n{i}", [f"n{(i + 1) % n}"], [], _core.Policy(), None) for i in range(n)]
    )
    with pytest.raises(ValueError, match="Dependency cycle among nodes") as caught:
        graph.select(["n0"])
    message = str(caught.value)
    assert "(1001 nodes in all)" in message and len(message) < 1_000


def test_an_execution_error_names_at_most_ten_failures_then_counts() -> None:
    leaves = []
    for i in range(25):
        leaf = ValueError(f"boom {i}")
        leaf.add_note(f"sdax_hamilton: node 'n{i}' failed after 1 attempt")
        leaves.append(leaf)
    group = failure_group(leaves)
    assert type(group) is ExecutionError
    first = str(group).splitlines()[0]
    assert first.startswith("sdax_hamilton execution failed: node 'n0' (ValueError), ")
    assert "node 'n9' (ValueError), … and 15 more" in first
    assert "n10" not in first


def test_a_split_execution_error_names_the_failures_it_holds() -> None:
    leaves = []
    for i, cls in enumerate([ValueError, KeyError]):
        leaf = cls(i)
        leaf.add_note(f"sdax_hamilton: node 'n{i}' failed after 2 attempts")
        leaves.append(leaf)
    group = failure_group(leaves)
    assert isinstance(group, ExecutionError)
    match, rest = group.split(KeyError)
    assert match is not None and rest is not None
    assert str(match).startswith("sdax_hamilton execution failed: node 'n1' (KeyError) (1")
    assert str(rest).startswith("sdax_hamilton execution failed: node 'n0' (ValueError) (1")


def test_an_execution_error_without_notes_still_says_it_failed() -> None:
    group = failure_group([ValueError("x")])
    assert str(group).startswith("sdax_hamilton execution failed (1 sub-exception)")


# ---- suggestions ----------------------------------------------------------------------


def test_unknown_names_get_close_matches(driver: Driver) -> None:
    with pytest.raises(
        ValueError, match=r"Unknown selected node: 'cont' \(did you mean 'count'\?\)"
    ):
        driver.prepare(["cont"])
    with pytest.raises(
        ValueError,
        match=r"Unknown override nodes: \['cont', 'rws'\] \(did you mean 'count' for 'cont'; "
        r"'rows' for 'rws'\?\)",
    ):
        driver.prepare(["count"], override_nodes=["rws", "cont"])
    with pytest.raises(ValueError, match=r"\['pag'\] \(did you mean 'page'\?\)"):
        driver.prepare(["count"], optional_inputs=["pag"])
    with pytest.raises(ValueError, match=r"unexpected: 'limt' \(did you mean 'limit'\?\)"):
        run(driver.prepare(["count"]).execute(inputs={"dsn": "db", "limt": 1}))


def test_a_name_with_nothing_close_gets_no_suggestion(driver: Driver) -> None:
    with pytest.raises(ValueError) as caught:
        driver.prepare(["zzzzzz"])
    assert "did you mean" not in str(caught.value)


def test_unexpected_inputs_say_what_they_are(driver: Driver) -> None:
    plan = driver.prepare(["count"])
    with pytest.raises(ValueError, match=r"'rows' \(a node; to supply its value, prepare"):
        run(plan.execute(inputs={**GOOD, "rows": [1]}))
    with pytest.raises(ValueError, match=r"optional_inputs=\['page'\]"):
        run(plan.execute(inputs={**GOOD, "page": 2}))
    overriding = driver.prepare(["count"], override_nodes=["rows"])
    with pytest.raises(ValueError, match=r"missing: \['rows'\]"):
        run(overriding.execute())


def test_a_surrogate_output_name_is_an_unknown_node(driver: Driver) -> None:
    with pytest.raises(ValueError, match="Unknown selected node") as caught:
        driver.prepare(["\udc80"])
    assert "'\\udc80'" in str(caught.value)
    str(caught.value).encode("utf-8")  # printable and loggable


def test_a_surrogate_input_name_is_an_unexpected_input(driver: Driver) -> None:
    with pytest.raises(ValueError, match="Input shape mismatch") as caught:
        run(driver.prepare(["count"]).execute(inputs={**GOOD, "\udc80": 1}))
    str(caught.value).encode("utf-8")


@pytest.mark.parametrize("inputs", ["x", 5, [("dsn", "db"), ("limit", 3)], b"ab"])
def test_inputs_that_are_not_a_mapping_are_a_type_error(driver: Driver, inputs: Any) -> None:
    plan = driver.prepare(["count"])
    with pytest.raises(TypeError, match="inputs must be a mapping of names"):
        run(plan.execute(inputs=inputs))
    with pytest.raises(TypeError, match="inputs must be a mapping of names"):
        plan.open(inputs=inputs)
    overriding = driver.prepare(["count"], override_nodes=["rows"])
    with pytest.raises(TypeError, match="overrides must be a mapping of names"):
        run(overriding.execute(overrides=inputs))


# ---- hostile keys and names -----------------------------------------------------------


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr")


class EqRaises(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = str.__hash__


def test_a_key_whose_repr_raises_gets_the_input_error(driver: Driver) -> None:
    with pytest.raises(ValueError, match=r"unexpected: <a key of type ReprRaises>"):
        run(driver.prepare(["count"]).execute(inputs={**GOOD, ReprRaises(): 1}))


def test_a_str_subclass_key_is_read_by_its_text(driver: Driver) -> None:
    plan = driver.prepare(["count"])
    assert run(plan.execute(inputs={EqRaises("dsn"): "db", "limit": 2})) == {"count": 2}
    with pytest.raises(ValueError, match=r"unexpected: 'dsm' \(did you mean 'dsn'\?\)"):
        run(plan.execute(inputs={EqRaises("dsm"): "db", "limit": 2}))


class Armed:
    """Switches the hostile methods on once the key sits in a dict."""

    on = False


class Raises(Exception):
    pass


def _hostile(base: type, text: str, raising: frozenset[str], lying_hash: bool) -> object:
    def fail(*_args: object) -> Any:
        if Armed.on:
            raise Raises("hostile")
        return None

    namespace: dict[str, Any] = {}
    if "repr" in raising:
        namespace["__repr__"] = lambda self: fail() or "key"
        namespace["__str__"] = lambda self: fail() or "key"
    if "hash" in raising or lying_hash:

        def __hash__(self: Any) -> int:
            if Armed.on and "hash" in raising:
                raise Raises("hostile")
            if Armed.on and lying_hash:
                return 12345
            return hash(text)

        namespace["__hash__"] = __hash__
    else:
        namespace["__hash__"] = lambda self: hash(text)
    if "eq" in raising:

        def __eq__(self: Any, other: object) -> bool:
            if Armed.on:
                raise Raises("hostile")
            return self is other or (base is str and str.__eq__(self, other))  # type: ignore[arg-type]

        namespace["__eq__"] = __eq__
    cls = type("Hostile", (base,), namespace)
    return cls(text) if base is str else cls()


KEY_TEXTS = st.sampled_from(["dsn", "limit", "page", "rows", "lim", "\udc80", "x" * 200, ""])
HOSTILE_KEYS = st.builds(
    _hostile,
    base=st.sampled_from([str, object]),
    text=KEY_TEXTS,
    raising=st.frozensets(st.sampled_from(["repr", "hash", "eq"])),
    lying_hash=st.booleans(),
)
PLAIN_KEYS = st.one_of(KEY_TEXTS, st.integers(), st.none(), st.tuples(st.integers()))


@pytest.fixture
def armed() -> Iterator[None]:
    yield
    Armed.on = False


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keep=st.sets(st.sampled_from(sorted(GOOD))),
    extra=st.lists(st.one_of(HOSTILE_KEYS, PLAIN_KEYS), max_size=4),
    as_overrides=st.booleans(),
)
def test_hostile_keys_get_the_documented_errors(
    driver: Driver, armed: None, keep: set[str], extra: list[object], as_overrides: bool
) -> None:
    Armed.on = False
    supplied: dict[Any, Any] = {name: GOOD[name] for name in keep}
    for key in extra:
        try:
            supplied[key] = [1]
        except TypeError:  # unhashable (never here) or a tuple of lists: skip
            continue
    Armed.on = True
    texts = []
    for key in supplied:
        text = str.__str__(key) if isinstance(key, str) else None
        texts.append(text)
    if as_overrides:
        plan = driver.prepare(["count"], override_nodes=["rows"])
        call = plan.execute(overrides=supplied)
        expected = {"rows"}
    else:
        plan = driver.prepare(["count"])
        call = plan.execute(inputs=supplied)
        expected = set(GOOD)
    exact = None not in texts and len(set(texts)) == len(texts) and set(texts) == expected
    try:
        result = run(call)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        message.encode("utf-8")  # printable: surrogates escaped
        assert len(message) < 2_000
        assert not exact or isinstance(exc, TypeError), message
        if isinstance(exc, ValueError):
            assert ("Override" if as_overrides else "Input") + " shape mismatch" in message
        else:  # the exact names, but a value of the wrong type ([1] for an input)
            assert "Invalid " in message
    else:
        assert exact
        assert result == {"count": 1 if as_overrides else 3}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    names=st.lists(st.one_of(HOSTILE_KEYS, PLAIN_KEYS), min_size=1, max_size=3),
    argument=st.sampled_from(["final_vars", "override_nodes", "optional_inputs"]),
)
def test_hostile_names_at_prepare_get_the_documented_errors(
    driver: Driver, armed: None, names: list[object], argument: str
) -> None:
    Armed.on = True
    arguments: dict[str, Any] = {"final_vars": ["count"], argument: names}
    try:
        driver.prepare(**arguments)
    except ValueError as exc:
        message = str(exc)
        message.encode("utf-8")
        assert len(message) < 2_000
    # a plan may also come out: str subclasses naming real nodes or inputs are those names


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(st.one_of(HOSTILE_KEYS, PLAIN_KEYS), min_size=1, max_size=3))
def test_hostile_target_names_get_the_documented_errors(armed: None, names: list[object]) -> None:
    Armed.on = True
    try:
        execution(target_=names)
    except ValueError as exc:
        message = str(exc)
        message.encode("utf-8")
        assert len(message) < 2_000


def test_the_core_reads_a_surrogate_name_as_no_node() -> None:
    graph = _core.Graph([("a", [], [], _core.Policy(), None)])
    assert "\udc80" not in graph and "a" in graph
    with pytest.raises(ValueError, match="Unknown selected node") as caught:
        graph.select(["\udc80"])
    assert caught.value._sdax_unknown == "\udc80"  # type: ignore[attr-defined]
    with pytest.raises(KeyError):
        graph.select(["a"]).index("\udc80")


def test_a_good_call_builds_no_message(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    import sdax_hamilton._messages as messages
    import sdax_hamilton._plan as plan_module

    def refuse(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("a message was built for a good call")

    plan = driver.prepare(["count"])
    overriding = driver.prepare(["count"], override_nodes=["rows"])
    for helper in ("name", "names", "did_you_mean", "unknown", "plain"):
        monkeypatch.setattr(messages, helper, refuse)
    monkeypatch.setattr(plan_module, "_named", refuse)
    assert run(plan.execute(inputs=dict(GOOD))) == {"count": 3}
    assert run(overriding.execute(overrides={"rows": [1, 2]})) == {"count": 2}
