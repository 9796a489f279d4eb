"""Spark with real pyspark: ``h_spark`` decorators run where Hamilton supports them, and
``Driver(...)`` refuses what lazy evaluation would break (docs/bindings.md, "Spark").

Refusals need no Spark session; one session (``local[1]``) serves the runs of this module.
Skipped only where Java is absent.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import loops as loop_support

if shutil.which("java") is None:  # pragma: no cover - CI and the dev machine have Java 17
    pytest.skip(
        "Java is not installed: pyspark needs a JVM (install openjdk-17-jre-headless)",
        allow_module_level=True,
    )

import pyspark.sql as ps
from pyspark import cloudpickle  # type: ignore[attr-defined]

from sdax_hamilton import Driver

COLUMNS = """
import pandas as pd
from hamilton import htypes

def a(a_raw: htypes.column[pd.Series, int]) -> htypes.column[pd.Series, int]:
    return a_raw + 1

Column = htypes.column[pd.Series, int]

def b(a: Column, b_raw: Column) -> Column:
    return a * b_raw
"""

HEADER = """
import pandas as pd
import pyspark.sql as ps
from pyspark.sql import SparkSession
from hamilton.function_modifiers import dataloader, datasaver, subdag
from hamilton.plugins import h_spark
from sdax_hamilton import Acquisition, execution, shutdown
"""

GRAPH = """
import {columns} as columns

def initial(spark: SparkSession) -> ps.DataFrame:
    return spark.createDataFrame(pd.DataFrame({{"a_raw": [1, 2], "b_raw": [3, 4]}}))

@h_spark.with_columns(columns, columns_to_pass=["a_raw", "b_raw"])
def final(initial: ps.DataFrame) -> ps.DataFrame:
    return initial

def rows(final: ps.DataFrame) -> list:
    return sorted(tuple(row) for row in final.collect())
"""


@pytest.fixture
def module() -> Iterator[Callable[[str], types.ModuleType]]:
    created: list[str] = []
    counter = iter(range(10**6))

    def factory(source: str) -> types.ModuleType:
        name = f"sdax_test_spark_{id(created)}_{next(counter)}"
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        created.append(name)
        exec(compile(textwrap.dedent(source), f"<{name}>", "exec", dont_inherit=True), mod.__dict__)
        # Spark's Python workers cannot import a module made in memory: ship it by value.
        cloudpickle.register_pickle_by_value(mod)
        return mod

    yield factory
    for name in created:
        cloudpickle.unregister_pickle_by_value(sys.modules[name])
        sys.modules.pop(name, None)


@pytest.fixture
def graph(module: Callable[[str], types.ModuleType]) -> Callable[[str], types.ModuleType]:
    """A Spark graph module: ``HEADER`` + ``GRAPH`` + ``extra``, its columns in a module."""

    def factory(extra: str = "") -> types.ModuleType:
        columns = module(COLUMNS)
        return module(HEADER + GRAPH.format(columns=columns.__name__) + textwrap.dedent(extra))

    return factory


@pytest.fixture(scope="session")
def spark() -> Iterator[ps.SparkSession]:
    # Python workers must run this interpreter: PATH's python3 may be another minor version,
    # which PySpark refuses (the CI matrix runs this suite on several Pythons).
    saved = {name: os.environ.get(name) for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ.update(dict.fromkeys(saved, sys.executable))
    session = (
        ps.SparkSession.builder.master("local[1]")
        .appName("sdax-hamilton-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        # A test JVM lives for seconds: start it quickly (about half the startup time).
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# ------------------------------------------------------------------ runs


def test_with_columns_runs(graph: Callable[..., Any], spark: ps.SparkSession) -> None:
    plan = Driver(graph()).prepare(["rows"])
    result = loop_support.run(plan.execute(inputs={"spark": spark}))
    assert result == {"rows": [(1, 3, 2, 6), (2, 4, 3, 12)]}


def test_select_runs_and_default_execution_is_allowed(
    module: Callable[[str], types.ModuleType], spark: ps.SparkSession
) -> None:
    columns = module(COLUMNS)
    mod = module(
        HEADER
        + f"""
import {columns.__name__} as columns

@execution(retryable_exceptions=(ValueError,))
def initial(spark: SparkSession) -> ps.DataFrame:
    return spark.createDataFrame(pd.DataFrame({{"a_raw": [1], "b_raw": [5]}}))

@h_spark.select(columns, columns_to_pass=["a_raw", "b_raw"], output_cols=["b"])
def final(initial: ps.DataFrame) -> ps.DataFrame:
    return initial

def rows(final: ps.DataFrame) -> list:
    return [tuple(row) for row in final.collect()]
"""
    )
    result = loop_support.run(Driver(mod).prepare(["rows"]).execute(inputs={"spark": spark}))
    assert result == {"rows": [(10,)]}


# ------------------------------------------------------------------ refusals (no session needed)


def refused(mod: types.ModuleType, *parts: str) -> None:
    with pytest.raises(ValueError) as info:
        Driver(mod)
    for part in parts:
        assert part in str(info.value), str(info.value)


def test_owned_acquisition_upstream_of_a_lazy_plan_is_refused(graph: Callable[..., Any]) -> None:
    mod = graph(
        """
        def spark() -> SparkSession:
            return SparkSession.builder.getOrCreate()

        @shutdown(of=spark)
        def stop(acquired: Acquisition[SparkSession]) -> None:
            acquired.value.stop()
        """
    )
    refused(mod, "node 'spark'", "owned acquisition", "lazy Spark value")


@pytest.mark.parametrize("policy", ["timeout=5.0", "retries=2"])
@pytest.mark.parametrize("governed", ["raw", "initial"])
def test_execution_policy_on_or_upstream_of_a_lazy_plan_is_refused(
    module: Callable[[str], types.ModuleType], policy: str, governed: str
) -> None:
    raw_policy = f"@execution({policy})" if governed == "raw" else ""
    initial_policy = f"@execution({policy})" if governed == "initial" else ""
    mod = module(
        HEADER
        + f"""
{raw_policy}
def raw() -> pd.DataFrame:
    return pd.DataFrame({{"a_raw": [1], "b_raw": [2]}})

{initial_policy}
def initial(spark: SparkSession, raw: pd.DataFrame) -> ps.DataFrame:
    return spark.createDataFrame(raw)
"""
    )
    refused(mod, f"node {governed!r}", "execution policy", "lazy Spark value 'initial'")


def test_standalone_require_columns_is_refused(module: Callable[[str], types.ModuleType]) -> None:
    mod = module(
        HEADER
        + """
@h_spark.require_columns("a")
def alone(df: ps.DataFrame) -> ps.DataFrame:
    return df
"""
    )
    refused(mod, "require_columns is only supported", "alone")


@pytest.mark.parametrize("declared", ["execution", "shutdown"])
def test_policy_or_release_on_a_column_function_is_refused(
    module: Callable[[str], types.ModuleType], declared: str
) -> None:
    decoration = (
        "a = execution(timeout=1.0)(a)"
        if declared == "execution"
        else (
            "@shutdown(of=a)\n"
            "def close_a(acquired: Acquisition[pd.Series]) -> None:\n"
            "    return None\n"
        )
    )
    columns = module(
        COLUMNS.replace("import pandas as pd", "import pandas as pd\n" + HEADER) + decoration
    )
    mod = module(
        HEADER
        + f"""
import {columns.__name__} as columns

def initial(spark: SparkSession) -> ps.DataFrame:
    return spark.createDataFrame(pd.DataFrame({{"a_raw": [1], "b_raw": [2]}}))

@h_spark.with_columns(columns.a, columns.b, columns_to_pass=["a_raw", "b_raw"])
def final(initial: ps.DataFrame) -> ps.DataFrame:
    return initial
"""
    )
    refused(mod, "column function of h_spark.with_columns", ".a")


def test_spark_inside_a_subdag_is_refused(graph: Callable[..., Any]) -> None:
    inner = graph()
    mod = graph(
        f"""
        import {inner.__name__} as inner

        @subdag(inner, inputs={{}})
        def mounted(rows: list) -> int:
            return len(rows)
        """
    )
    refused(mod, "Spark inside a subdag", "mounted")


def test_saver_of_a_lazy_plan_is_refused(graph: Callable[..., Any]) -> None:
    mod = graph(
        """
        @datasaver()
        def written(final: ps.DataFrame) -> dict:
            final.write.parquet("/tmp/never")
            return {}
        """
    )
    refused(mod, "node 'written'", "loader or saver")


def test_loader_of_a_lazy_plan_is_refused(module: Callable[[str], types.ModuleType]) -> None:
    mod = module(
        HEADER
        + """
@dataloader()
def loaded(spark: SparkSession) -> tuple[ps.DataFrame, dict]:
    return spark.range(3), {}
"""
    )
    refused(mod, "loader or saver")


def test_load_from_into_a_lazy_plan_is_refused(module: Callable[[str], types.ModuleType]) -> None:
    mod = module(
        HEADER
        + """
from hamilton.function_modifiers import load_from, source, value

@load_from.csv(path=value("/tmp/never.csv"), spark=source("spark"))
def final(df: ps.DataFrame) -> ps.DataFrame:
    return df
"""
    )
    refused(mod, "loader or saver")


def test_loader_and_saver_not_connected_to_a_lazy_value_are_accepted(
    graph: Callable[..., Any], spark: ps.SparkSession, tmp_path: Any
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text('{"factor": 10}')
    saved = tmp_path / "summary.json"
    mod = graph(
        f"""
        from hamilton.function_modifiers import load_from, save_to, value

        @load_from.json(path=value({str(settings)!r}), inject_="settings")
        def scaled(settings: dict, final: ps.DataFrame) -> ps.DataFrame:
            return final.withColumn("scaled", final["b"] * settings["factor"])

        def scaled_rows(scaled: ps.DataFrame) -> list:
            return sorted(tuple(row) for row in scaled.collect())

        @save_to.json(path=value({str(saved)!r}), output_name_="summary_saved")
        def summary(scaled_rows: list) -> dict:
            return {{"rows": len(scaled_rows)}}

        @dataloader()
        def labels() -> tuple[dict, dict]:
            return {{"unit": "m"}}, {{}}

        @datasaver()
        def labels_written(labels: dict, rows: list) -> dict:
            return {{"labels": len(labels), "rows": len(rows)}}
        """
    )
    plan = Driver(mod).prepare(["scaled_rows", "summary_saved", "labels_written"])
    result = loop_support.run(plan.execute(inputs={"spark": spark}))
    assert result["scaled_rows"] == [(1, 3, 2, 6, 60), (2, 4, 3, 12, 120)]
    assert result["labels_written"] == {"labels": 1, "rows": 2}
    assert saved.read_text().replace(" ", "") == '{"rows":2}'


@pytest.mark.parametrize(
    "decorator",
    [
        "@dataloader()",
        '@load_from.json(path=value("/nonexistent/settings.json"), inject_="settings")',
        '@save_to.json(path=value("/nonexistent/out.json"), output_name_="written")',
    ],
)
def test_io_decorator_on_a_column_function_is_refused_before_anything_loads(
    module: Callable[[str], types.ModuleType], decorator: str
) -> None:
    columns = module(
        """
        import pandas as pd
        from hamilton import htypes
        from hamilton.function_modifiers import dataloader, datasaver, load_from, save_to, value

        RAN = []
        Column = htypes.column[pd.Series, int]

        def a(a_raw: Column) -> Column:
            return a_raw + 1

        {decorator}
        def b(a: Column, settings: dict) -> tuple[Column, dict]:
            RAN.append("b")
            return a, {{}}
        """.replace("{decorator}", decorator).replace("{{}}", "{}")
    )
    mod = module(
        HEADER
        + f"""
import {columns.__name__} as columns

def initial(spark: SparkSession) -> ps.DataFrame:
    return spark.createDataFrame(pd.DataFrame({{"a_raw": [1], "b_raw": [2]}}))

@h_spark.with_columns(columns.a, columns.b, columns_to_pass=["a_raw", "b_raw"])
def final(initial: ps.DataFrame) -> ps.DataFrame:
    return initial
"""
    )
    refused(mod, ".b: Hamilton I/O decorator", "column function of h_spark.with_columns")
    assert columns.RAN == []
