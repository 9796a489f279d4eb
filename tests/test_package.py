"""docs/contract.md#package-surface: the package surface."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import sdax_hamilton

SPEC_NAMES = {
    "Acquisition",
    "Driver",
    "ExecutionError",
    "PreparedPlan",
    "RetryableException",
    "__version__",
    "execution",
    "failures",
    "shutdown",
}
# Added by the observability issue: structured run events and the run report.
OBSERVABILITY_NAMES = {"NodeReport", "RunEvent", "RunReport"}
# docs/contract.md#shared-objects: objects shared across runs.
RESILIENCE_NAMES = {"Bulkhead", "BulkheadFull", "CircuitBreaker", "CircuitOpen", "RetryBudget"}
# docs/contract.md#latency: a hedge delay that follows a node's latency.
TAIL_NAMES = {"Latency"}


def test_all_is_exactly_the_public_names() -> None:
    assert (
        set(sdax_hamilton.__all__)
        == SPEC_NAMES | OBSERVABILITY_NAMES | RESILIENCE_NAMES | TAIL_NAMES
    )
    assert len(sdax_hamilton.__all__) == len(set(sdax_hamilton.__all__))
    for name in sdax_hamilton.__all__:
        assert hasattr(sdax_hamilton, name), name


def test_version_comes_from_the_distribution() -> None:
    assert sdax_hamilton.__version__ == importlib.metadata.version("sdax-hamilton")


def test_exception_classes() -> None:
    assert issubclass(sdax_hamilton.RetryableException, Exception)
    assert issubclass(sdax_hamilton.ExecutionError, ExceptionGroup)


def test_import_needs_no_sdax_distribution() -> None:
    # Block `sdax` outright: importing the package must still work, and the default
    # retryable set then holds only the builtins and our own RetryableException.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["sdax"] = None
        import sdax_hamilton
        from sdax_hamilton._declarations import default_retryable_exceptions
        assert default_retryable_exceptions() == (
            ConnectionError, TimeoutError, sdax_hamilton.RetryableException
        ), default_retryable_exceptions()
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
