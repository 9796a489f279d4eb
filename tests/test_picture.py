"""PreparedPlan.to_dot() and visualize(): the plan picture."""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from sdax_hamilton import Driver

GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown

class Connection: ...
class Transaction: ...

def connection(dsn: str) -> Connection:
    return Connection()

@shutdown(of=connection, timeout=2.0)
def close_connection(acquired: Acquisition[Connection]) -> None:
    pass

def transaction(connection: Connection) -> Transaction:
    return Transaction()

@shutdown(of=transaction, retries=1)
def end_transaction(acquired: Acquisition[Transaction]) -> None:
    pass

@execution(timeout=5.0, retries=3)
def query(transaction: Transaction, limit: int = 10) -> str:
    return "rows"

def unrelated() -> int:
    return 1
"""


def _attrs(dot: str, node: str) -> str:
    match = re.search(rf'^  "{node}" \[(.*)\];$', dot, re.MULTILINE)
    assert match, f"node {node} missing from\n{dot}"
    return match.group(1)


def test_to_dot_marks_policies_ownership_io_and_shutdown_order(make_module: Any) -> None:
    plan = Driver(make_module(GRAPH)).prepare(["query"])
    dot = plan.to_dot()
    assert dot.startswith("digraph plan {") and dot.rstrip().endswith("}")
    assert 'label="query\\ntimeout 5s, retries 3\\noutput"' in _attrs(dot, "query")
    assert "peripheries" in _attrs(dot, "query")
    connection = _attrs(dot, "connection")
    assert "owns resource; release close_connection" in connection
    assert "release timeout 2s" in connection
    assert "bold" in connection
    assert "release retries 1" in _attrs(dot, "transaction")
    assert "parallelogram" in _attrs(dot, "dsn")
    assert '"dsn" -> "connection";' in dot
    assert '"connection" -> "transaction";' in dot
    # The shutdown order: the transaction is released before its connection.
    assert re.search(r'"transaction" -> "connection" \[style="dashed".*released before', dot)
    assert not re.search(r'"connection" -> "transaction" \[style="dashed"', dot)
    assert '"unrelated"' not in dot  # only the selection is drawn
    assert '"limit"' not in dot  # a defaulted input nobody supplies is not a run input


def test_to_dot_shows_replaced_nodes(make_module: Any) -> None:
    mod = make_module(GRAPH)
    plan = Driver(mod, config={"limit": 3}).prepare(["query", "unrelated"])
    assert '"unrelated"' in plan.to_dot()
    overridden = Driver(mod).prepare(["unrelated"], override_nodes=["unrelated"])
    assert "override value" in _attrs(overridden.to_dot(), "unrelated")


def require_dot() -> None:
    """Skip (with the reason) when Graphviz's ``dot`` program is absent, so the README's test
    command passes on a fresh machine; under CI (``CI=true``), which installs Graphviz, its
    absence fails the test instead of skipping it."""
    if shutil.which("dot") is not None:
        return
    reason = "Graphviz's `dot` program is not on PATH (apt-get install graphviz)"
    if os.environ.get("CI", "").strip().lower() in ("true", "1"):
        pytest.fail(f"CI=true: {reason}; CI installs Graphviz, so this test must run there")
    pytest.skip(reason)


def test_visualize_renders_a_png(make_module: Any, tmp_path: Path) -> None:
    require_dot()
    plan = Driver(make_module(GRAPH)).prepare(["query"])
    target = plan.visualize(tmp_path / "plan.png")
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 400 and height > 50  # four boxes laid out left to right


def test_visualize_names_what_is_missing(
    make_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "graphviz", None)
    plan = Driver(make_module(GRAPH)).prepare(["query"])
    with pytest.raises(ImportError, match="pip install graphviz"):
        plan.visualize(tmp_path / "plan.png")


def test_without_dot_the_rendering_test_skips_with_its_reason_but_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no `dot` on PATH
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Graphviz's `dot` program is not on PATH"):
        require_dot()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: Graphviz's `dot`"):
        require_dot()
    fake_dot = tmp_path / "dot"
    fake_dot.write_text("#!/bin/sh\n")
    fake_dot.chmod(0o755)
    require_dot()  # found on PATH: neither skips nor fails
