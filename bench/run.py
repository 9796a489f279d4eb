"""sdax_hamilton benchmark suite: one command, side-by-side runners, PASS/FAIL targets.

    python bench/run.py [--quick] [--with-old] [--out PATH]

Runners (timed interleaved in one run, rotating order each repetition, medians of reps):

* ``floor``    the case's own functions awaited directly in topological order,
               ``asyncio.gather`` per wide layer (``bench/floor.py``);
* ``hamilton`` Hamilton's ``AsyncDriver`` on the same module (policies and releases
               are ignored there: it does not know them);
* ``ours``     ``await Driver(module).prepare(outputs).execute(inputs=...)``;
* ``0.2.0``    with ``--with-old``: sdax-hamilton 0.2.0 from PyPI in its own virtualenv
               (``bash bench/setup_old_venv.sh``), driven by ``bench/worker.py`` in that
               venv, with its own floor measured in the same worker; comparisons with it
               go through each implementation's ratio to its own floor.

Results are written as JSON (default ``bench/results/results.json``) and printed as
markdown tables. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import floor  # noqa: E402
import measure  # noqa: E402
import shapes  # noqa: E402
from worker import describe  # noqa: E402

DEFAULT_OLD_PYTHON = "/tmp/sdax-old-venv/bin/python"
#: Hamilton's graph execution (and 0.2.0's planning) recurse once per chain link; the
#: 2,000-node chain needs more than CPython's default 1,000 frames there. Raised for those
#: runners only after the 10,000-node chain check, which runs at the default limit.
RECURSION_LIMIT = 20_000
BIG_CHAIN = 10_000
CONCURRENCY = 100


@dataclasses.dataclass(frozen=True)
class Settings:
    reps: int  # timed batches per runner and case (median reported)
    batch_s: float  # about this long per timed batch (at least one execute)
    budget_s: float  # a slow runner gets fewer batches: about this long per case in total
    concurrent_budget_s: float  # the same for the concurrent-throughput batches
    large: bool  # time the large size of each shape too (prepare always uses both)
    hamilton_concurrent: bool  # Hamilton at 100 concurrent executes (about 10 s a batch)
    concurrent_shapes: tuple[str, ...]  # shapes whose small case is run concurrently
    concurrent_policy: bool  # the +policy variants too (Hamilton skipped: it ignores them)
    prepare_reps: int
    prepare_policy: bool  # also time prepare on the +policy variants
    old_prepare: bool  # also time 0.2.0's Driver+prepare (its wide fan-out takes seconds)
    memory_contexts: int


FULL = Settings(
    reps=7,
    batch_s=0.03,
    budget_s=1.5,
    concurrent_budget_s=3.0,
    large=True,
    hamilton_concurrent=True,
    concurrent_shapes=("chain", "fanout", "lattice", "resources"),
    concurrent_policy=True,
    prepare_reps=5,
    prepare_policy=False,
    old_prepare=True,
    memory_contexts=1000,
)
QUICK = Settings(
    reps=5,
    batch_s=0.01,
    budget_s=0.3,
    concurrent_budget_s=0.4,
    large=False,
    hamilton_concurrent=False,
    concurrent_shapes=("chain", "resources"),
    concurrent_policy=False,
    prepare_reps=1,
    prepare_policy=False,
    old_prepare=False,
    memory_contexts=200,
)

# --------------------------------------------------------------------------- runners


class Runner:
    """Something that can time ``inner`` rounds of ``concurrency`` executes of one case."""

    name: str

    def time(self, inner: int, concurrency: int = 1) -> float:
        raise NotImplementedError


class LocalRunner(Runner):
    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, execute: measure.Execute):
        self.name = name
        self.loop = loop
        self.execute = execute

    def time(self, inner: int, concurrency: int = 1) -> float:
        return self.loop.run_until_complete(measure.time_batch(self.execute, inner, concurrency))


class WorkerProcess:
    """A ``bench/worker.py`` process in some virtualenv, spoken to in JSON lines."""

    def __init__(self, python: str, log: IO[str]) -> None:
        self.proc = subprocess.Popen(
            [python, str(BENCH_DIR / "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=BENCH_DIR,
        )

    def call(self, **msg: Any) -> dict[str, Any]:
        self.send(msg)
        return self.receive()

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker exited (code {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


class RemoteRunner(Runner):
    def __init__(self, name: str, worker: WorkerProcess, case: str, kind: str) -> None:
        self.name = name
        self.worker = worker
        self.case = case
        self.kind = kind

    def time(self, inner: int, concurrency: int = 1) -> float:
        reply = self.worker.call(
            op="time", case=self.case, runner=self.kind, inner=inner, concurrency=concurrency
        )
        if "error" in reply:
            raise RuntimeError(reply["error"])
        seconds: float = reply["s"]
        return seconds


# --------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median_interleaved(
    runners: Iterable[Runner], settings: Settings, concurrency: int = 1
) -> dict[str, tuple[float, int]]:
    """Median seconds per execute and sample count for each runner.

    Batches are interleaved across runners, rotating the order each repetition. Each
    runner's first call calibrates its batch size (the case was executed once already at
    setup, so nothing is cold); a runner whose single call is slower than a batch keeps
    that call as a sample and gets only as many batches as fit in the per-case budget.
    """
    todo = list(runners)
    budget = settings.budget_s if concurrency == 1 else settings.concurrent_budget_s
    inner: dict[str, int] = {}
    batches: dict[str, int] = {}
    samples: dict[str, list[float]] = {}
    for runner in todo:
        first = runner.time(1, concurrency)  # seconds per execute
        round_s = first * concurrency  # wall time of one round of concurrent executes
        inner[runner.name] = measure.inner_for(round_s, settings.batch_s)
        fit = int(budget // (round_s * inner[runner.name]))
        batches[runner.name] = max(1, min(settings.reps, fit))
        samples[runner.name] = []
        if inner[runner.name] == 1:
            samples[runner.name].append(first)
            batches[runner.name] -= 1
    for rep in range(settings.reps):
        shift = rep % len(todo)
        for runner in todo[shift:] + todo[:shift]:
            if rep < batches[runner.name]:
                samples[runner.name].append(runner.time(inner[runner.name], concurrency))
    return {name: (statistics.median(v), len(v)) for name, v in samples.items()}


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=BENCH_DIR,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    import importlib.metadata as md

    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "hamilton": md.version("apache-hamilton"),
        "commit": commit,
        "loadavg_start": os.getloadavg(),
    }


# --------------------------------------------------------------------------- the suite


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.settings = QUICK if args.quick else FULL
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.results_dir = Path(args.out).resolve().parent
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.worker_log = (self.results_dir / "worker.log").open("w")
        self.old: WorkerProcess | None = None
        self.old_error: str | None = None
        self.ours_error: str | None = None
        wanted = set(args.shape or shapes.SIZES)
        #: every case of the selected shapes (compile times use both sizes)
        self.cases = [c for c in shapes.all_cases() if c.shape in wanted]
        #: the cases timed at run time (--quick: the small size of each shape)
        self.timed = [
            c for c in self.cases if self.settings.large or c.size == shapes.SIZES[c.shape][0]
        ]
        self.modules = {c.key: shapes.load(c) for c in self.cases}
        self.floors = {c.key: floor.Floor(c, self.modules[c.key]) for c in self.timed}
        self.expected = {
            c.key: self.loop.run_until_complete(self.floors[c.key].execute()) for c in self.timed
        }
        self.hamilton: dict[str, measure.Execute] = {}
        self.ours: dict[str, measure.SdaxRunner] = {}
        self.errors: dict[str, dict[str, str]] = {c.key: {} for c in self.cases}
        self.out: dict[str, Any] = {"machine": machine()}
        self.out["settings"] = {
            **dataclasses.asdict(self.settings),
            "mode": "quick" if args.quick else "full",
            "with_old": bool(args.with_old),
            "concurrency": CONCURRENCY,
            "recursion_limit_for_hamilton_and_old": RECURSION_LIMIT,
        }

    # ---- setup -------------------------------------------------------------------------

    def _check(self, case: shapes.Case, who: str, execute: measure.Execute) -> bool:
        try:
            got = self.loop.run_until_complete(execute())
        except Exception as exc:
            self.errors[case.key][who] = describe(exc)
            return False
        if got != self.expected[case.key]:
            self.errors[case.key][who] = "outputs differ from the floor's"
            return False
        return True

    def setup(self) -> None:
        try:
            import sdax_hamilton

            self.out["machine"]["sdax_hamilton"] = sdax_hamilton.__version__
        except Exception as exc:
            self.ours_error = describe(exc)
            log(f"this package is not importable, measuring without it: {self.ours_error}")
        from hamilton import async_driver  # type: ignore[import-untyped]

        for case in self.timed:
            module = self.modules[case.key]
            try:
                dr = self.loop.run_until_complete(
                    async_driver.Builder().with_modules(module).build()
                )
                outputs, inputs = list(case.outputs), dict(case.inputs)

                async def ham(
                    dr: Any = dr, o: list[str] = outputs, i: dict[str, Any] = inputs
                ) -> dict[str, Any]:
                    result: dict[str, Any] = await dr.execute(o, inputs=i)
                    return result

                if self._check(case, "hamilton", ham):
                    self.hamilton[case.key] = ham
            except Exception as exc:
                self.errors[case.key]["hamilton"] = describe(exc)
            if self.ours_error is None:
                try:
                    runner = measure.SdaxRunner(case, module)
                    if self._check(case, "ours", runner.execute):
                        self.ours[case.key] = runner
                except Exception as exc:
                    self.errors[case.key]["ours"] = describe(exc)
        if self.args.with_old:
            self._setup_old()
        # Everything built so far lives for the whole run: move it out of the collector's
        # way so that a collection costs the same whichever runner happens to trigger it.
        gc.collect()
        gc.freeze()
        if self.old is not None:
            self.old.call(op="freeze")

    def _setup_old(self) -> None:
        python = self.args.old_python
        if not Path(python).exists():
            self.old_error = f"{python} not found: run bash bench/setup_old_venv.sh"
            log(self.old_error)
            return
        self.old = WorkerProcess(python, self.worker_log)
        hello = self.old.call(op="hello")
        self.out["machine"]["old_worker"] = hello
        if hello["versions"].get("sdax-hamilton") != "0.2.0":
            self.old_error = f"worker venv has sdax-hamilton {hello['versions']}"
            log(self.old_error)
            self.old.close()
            self.old = None
            return
        self.old.call(op="recursionlimit", n=RECURSION_LIMIT)
        old_cases = self.cases if self.settings.old_prepare else self.timed
        for case in old_cases:
            reply = self.old.call(op="load", shape=case.shape, size=case.size, policy=case.policy)
            if not reply.get("ok"):
                self.errors[case.key]["0.2.0"] = reply.get("error", "failed")

    def old_ok(self, case: shapes.Case) -> bool:
        return self.old is not None and "0.2.0" not in self.errors[case.key]

    def runners(self, case: shapes.Case, concurrent: bool = False) -> list[Runner]:
        found: list[Runner] = [LocalRunner("floor", self.loop, self.floors[case.key].execute)]
        hamilton = not concurrent or (self.settings.hamilton_concurrent and not case.policy)
        if case.key in self.hamilton and hamilton:
            found.append(LocalRunner("hamilton", self.loop, self.hamilton[case.key]))
        if case.key in self.ours:
            found.append(LocalRunner("ours", self.loop, self.ours[case.key].execute))
        if self.old is not None and self.old_ok(case):
            found.append(RemoteRunner("0.2.0 floor", self.old, case.key, "floor"))
            found.append(RemoteRunner("0.2.0", self.old, case.key, "sdax"))
        return found

    # ---- sections ----------------------------------------------------------------------

    def latency(self) -> None:
        section: dict[str, Any] = {}
        for case in self.timed:
            t0 = time.perf_counter()
            medians = median_interleaved(self.runners(case), self.settings)
            row: dict[str, Any] = {"calls": case.calls, "nodes": case.nodes}
            for name, (seconds, count) in medians.items():
                base = medians["0.2.0 floor" if name.startswith("0.2.0") else "floor"][0]
                row[name] = {
                    "us_per_execute": seconds * 1e6,
                    "us_per_call": seconds * 1e6 / case.calls,
                    "ratio_to_floor": seconds / base,
                    "overhead_us_per_call": (seconds - base) * 1e6 / case.calls,
                    "executes_per_s": 1 / seconds,
                    "samples": count,
                }
            section[case.key] = row
            log(f"latency {case.label}: {time.perf_counter() - t0:.1f} s")
        self.out["latency"] = section

    def throughput(self) -> None:
        """``CONCURRENCY`` simultaneous executes of one plan, on the small cases."""
        section: dict[str, Any] = {}
        small = [
            c
            for c in self.timed
            if (not c.policy or self.settings.concurrent_policy)
            and c.size == shapes.SIZES[c.shape][0]
            and c.shape in self.settings.concurrent_shapes
        ]
        for case in small:
            t0 = time.perf_counter()
            medians = median_interleaved(
                self.runners(case, concurrent=True), self.settings, CONCURRENCY
            )
            row: dict[str, Any] = {}
            for name, (seconds, count) in medians.items():
                base = medians["0.2.0 floor" if name.startswith("0.2.0") else "floor"][0]
                row[name] = {
                    "executes_per_s": 1 / seconds,
                    "ratio_to_floor": seconds / base,
                    "samples": count,
                }
            for name, r in self.out["latency"][case.key].items():
                if isinstance(r, dict):
                    row.setdefault(name, {})["sequential_executes_per_s"] = r["executes_per_s"]
            ours, old = row.get("ours", {}), row.get("0.2.0", {})
            if "ratio_to_floor" in ours and "ratio_to_floor" in old:
                row["ours_vs_old"] = old["ratio_to_floor"] / ours["ratio_to_floor"]
                row["ours_vs_old_raw"] = ours["executes_per_s"] / old["executes_per_s"]
            section[case.key] = row
            log(f"throughput x{CONCURRENCY} {case.label}: {time.perf_counter() - t0:.1f} s")
        self.out["throughput"] = section

    def prepare(self) -> None:
        """Compile cost: ours ``Driver(mod)`` + ``.prepare(outputs)`` vs Hamilton's graph build."""
        from hamilton import graph

        section: dict[str, Any] = {}
        for case in self.cases:
            if case.policy and not self.settings.prepare_policy:
                continue
            module = self.modules[case.key]
            outputs = list(case.outputs)
            ham: list[float] = []
            ours: list[tuple[float, float]] = []
            nogc: list[float] = []
            old: list[float] = []
            with_old = self.settings.old_prepare and self.old is not None and self.old_ok(case)
            for _ in range(self.settings.prepare_reps):
                # Each build starts from a collected heap, so no build pays for freeing
                # what the previous one (ours or Hamilton's) left behind.
                gc.collect()
                start = time.perf_counter()
                graph.FunctionGraph.from_modules(module, config={})
                ham.append(time.perf_counter() - start)
                if self.ours_error is None and "ours" not in self.errors[case.key]:
                    try:
                        gc.collect()
                        ours.append(measure.sdax_prepare_seconds(module, outputs))
                        gc.disable()  # diagnostic: the same build without the collector
                        try:
                            nogc.append(sum(measure.sdax_prepare_seconds(module, outputs)))
                        finally:
                            gc.enable()
                    except Exception as exc:
                        self.errors[case.key]["ours"] = describe(exc)
                if with_old:
                    assert self.old is not None
                    reply = self.old.call(op="prepare", case=case.key)
                    old.append(reply["driver_s"] + reply["prepare_s"])
            row: dict[str, Any] = {
                "nodes": case.nodes,
                "hamilton_build_ms": statistics.median(ham) * 1e3,
            }
            if ours:
                total = statistics.median([d + p for d, p in ours])
                row.update(
                    {
                        "ours_driver_ms": statistics.median([d for d, _ in ours]) * 1e3,
                        "ours_prepare_ms": statistics.median([p for _, p in ours]) * 1e3,
                        "ours_total_ms": total * 1e3,
                        "ours_total_us_per_node": total * 1e6 / case.nodes,
                        "ours_total_us_per_node_gc_off": statistics.median(nogc) * 1e6 / case.nodes,
                        "ratio_to_hamilton": total * 1e3 / row["hamilton_build_ms"],
                    }
                )
            if old:
                row["old_total_ms"] = statistics.median(old) * 1e3
            section[case.key] = row
        log("prepare done")
        self.out["prepare"] = section

    def _fresh_workers(self, op: dict[str, Any], load: shapes.Case | None) -> dict[str, Any]:
        """Run ``op`` in a fresh worker per implementation, all at once (not timing-bound)."""
        pythons = {}
        if self.ours_error is None:
            pythons["ours"] = sys.executable
        if self.old is not None:
            pythons["0.2.0"] = self.args.old_python
        workers = {name: WorkerProcess(python, self.worker_log) for name, python in pythons.items()}
        found: dict[str, Any] = {}
        try:
            if load is not None:
                for name, worker in workers.items():
                    loaded = worker.call(
                        op="load", shape=load.shape, size=load.size, policy=load.policy
                    )
                    if not loaded.get("ok"):
                        found[name] = {"error": loaded.get("error", "failed")}
            for name, worker in workers.items():  # send every request, then collect
                if name not in found:
                    worker.send(op)
            for name, worker in workers.items():
                if name not in found:
                    found[name] = worker.receive()
        finally:
            for worker in workers.values():
                worker.close()
        return found

    def memory(self) -> None:
        """``open()`` contexts alive at once on resources 50, in fresh processes."""
        case = shapes.resources(50, False)
        n = self.settings.memory_contexts
        found = self._fresh_workers({"op": "memory", "case": case.key, "n": n}, case)
        self.out["memory"] = {"case": case.key, "contexts": n, **found}
        log(f"memory: {found}")

    def big_chain(self) -> None:
        """A 10,000-node chain: prepare and execute in fresh processes at the default limit."""
        from hamilton import graph

        case = shapes.chain(BIG_CHAIN, False)
        module = shapes.load(case)
        start = time.perf_counter()
        graph.FunctionGraph.from_modules(module, config={})
        elapsed = time.perf_counter() - start
        found = self._fresh_workers({"op": "big_chain", "n": BIG_CHAIN}, None)
        self.out["big_chain"] = {"nodes": BIG_CHAIN, "hamilton_build_ms": elapsed * 1e3, **found}
        log(f"chain {BIG_CHAIN}: {found}")

    # ---- targets -----------------------------------------------------------------------

    def targets(self) -> None:
        found: list[dict[str, Any]] = []

        def add(name: str, value: float | None, limit: float, ok: bool | None, unit: str) -> None:
            found.append({"target": name, "value": value, "limit": limit, "unit": unit, "pass": ok})

        lat = self.out.get("latency", {})
        for case in self.timed:
            if case.shape == "resources":
                continue
            limit = 10.0 if case.policy else 4.0
            ours = lat.get(case.key, {}).get("ours")
            value = ours["overhead_us_per_call"] if ours else None
            ok = None if value is None else value <= limit
            add(f"overhead above floor, {case.label}", value, limit, ok, "us/node <=")
        for key, row in self.out.get("throughput", {}).items():
            value = row.get("ours_vs_old")
            ok = None if value is None else value >= 8.0
            add(f"{CONCURRENCY} concurrent executes vs 0.2.0, {key}", value, 8.0, ok, "x >=")
        prep = self.out.get("prepare", {})
        for key, row in prep.items():
            value = row.get("ratio_to_hamilton")
            ok = None if value is None else value <= 1.3
            add(f"Driver()+prepare() vs Hamilton build, {key}", value, 1.3, ok, "x <=")
        for shape, (small, large) in shapes.SIZES.items():
            a = prep.get(shapes.build(shape, small, False).key, {})
            b = prep.get(shapes.build(shape, large, False).key, {})
            if "ours_total_us_per_node" in a and "ours_total_us_per_node" in b:
                value = b["ours_total_us_per_node"] / a["ours_total_us_per_node"]
                add(
                    f"compile linear, {shape}: per node large/small", value, 1.2, value <= 1.2, "<="
                )
        mem = self.out.get("memory", {}).get("ours")
        if mem and "tracemalloc_bytes" in mem:
            value = mem["tracemalloc_bytes"] / 1024
            ok = value <= 80
            add("memory per open plan, resources 50 (tracemalloc)", value, 80.0, ok, "KB <=")
        if mem and "rss_bytes" in mem:  # the target is on RSS (bench/open_memory.py)
            value = mem["rss_bytes"] / 1024
            add("memory per open plan, resources 50 (RSS)", value, 80.0, value <= 80, "KB <=")
        big = self.out.get("big_chain", {}).get("ours")
        if big is not None:
            ok = bool(big.get("ok"))
            add(f"chain of {BIG_CHAIN} prepares and executes", big.get("execute_s"), 0, ok, "s")
        self.out["targets"] = found

    # ---- run ---------------------------------------------------------------------------

    def run(self) -> None:
        t0 = time.perf_counter()
        sys.setrecursionlimit(RECURSION_LIMIT)
        self.setup()
        self.big_chain()  # in fresh processes, at the default recursion limit
        self.latency()
        self.throughput()
        self.prepare()
        self.memory()
        self.targets()
        if self.old is not None:
            self.old.close()
        self.out["errors"] = {k: v for k, v in self.errors.items() if v}
        if self.old_error:
            self.out["old_error"] = self.old_error
        if self.ours_error:
            self.out["ours_error"] = self.ours_error
        self.out["machine"]["loadavg_end"] = os.getloadavg()
        self.out["elapsed_s"] = time.perf_counter() - t0
        Path(self.args.out).write_text(json.dumps(self.out, indent=2, default=str) + "\n")
        print(render(self.out))
        log(f"results: {self.args.out} ({self.out['elapsed_s']:.0f} s)")


# --------------------------------------------------------------------------- rendering


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _render_latency(out: dict[str, Any], parts: list[str]) -> None:
    """Latency table: one execute at a time."""

    def cell(row: dict[str, Any], name: str) -> str:
        r = row.get(name)
        if r is None:
            return "n/a"
        return f"{r['us_per_call']:.2f} (x{r['ratio_to_floor']:.1f})"

    def over(row: dict[str, Any], name: str) -> str:
        r = row.get(name)
        return "n/a" if r is None else f"{r['overhead_us_per_call']:+.2f}"

    rows = []
    for key, row in out.get("latency", {}).items():
        ours = row.get("ours")
        rows.append(
            [
                key,
                str(row["calls"]),
                f"{row['floor']['us_per_call']:.2f}",
                cell(row, "hamilton"),
                cell(row, "ours"),
                over(row, "ours"),
                "n/a" if ours is None else f"{ours['us_per_execute']:.0f}",
                _fmt(row.get("0.2.0 floor", {}).get("us_per_call"), ".2f"),
                cell(row, "0.2.0"),
                over(row, "0.2.0"),
            ]
        )
    parts.append(
        "### Latency: one execute at a time (µs per call, x own floor)\n\n"
        + _table(
            [
                "case",
                "calls",
                "floor µs",
                "Hamilton",
                "ours",
                "ours over floor µs",
                "ours µs/execute",
                "0.2.0's floor µs",
                "0.2.0",
                "0.2.0 over own floor µs",
            ],
            rows,
        )
    )


def _render_throughput(out: dict[str, Any], parts: list[str]) -> None:
    """Throughput table: sequential and concurrent executes."""
    rows = []
    for key, row in out.get("throughput", {}).items():

        def tp(name: str, row: dict[str, Any] = row) -> str:
            r = row.get(name, {})
            seq = _fmt(r.get("sequential_executes_per_s"), ".0f")
            return f"{seq} / {_fmt(r.get('executes_per_s'), '.0f')}"

        rows.append(
            [
                key,
                tp("floor"),
                tp("hamilton"),
                tp("ours"),
                tp("0.2.0"),
                _fmt(row.get("ours_vs_old"), ".1f"),
                _fmt(row.get("ours_vs_old_raw"), ".1f"),
            ]
        )
    parts.append(
        f"### Throughput: executes/s, 1 / {CONCURRENCY} concurrent\n\n"
        + _table(
            [
                "case",
                "floor",
                "Hamilton",
                "ours",
                "0.2.0",
                "ours vs 0.2.0 (floor-normalised)",
                "ours vs 0.2.0 (raw)",
            ],
            rows,
        )
    )


def _render_prepare(out: dict[str, Any], parts: list[str]) -> None:
    """Compile table: Driver() and prepare() against Hamilton's build."""
    rows = []
    for key, row in out.get("prepare", {}).items():
        rows.append(
            [
                key,
                str(row["nodes"]),
                f"{row['hamilton_build_ms']:.1f}",
                _fmt(row.get("ours_driver_ms")),
                _fmt(row.get("ours_prepare_ms")),
                _fmt(row.get("ours_total_ms")),
                _fmt(row.get("ours_total_us_per_node"), ".0f"),
                _fmt(row.get("ours_total_us_per_node_gc_off"), ".0f"),
                _fmt(row.get("ratio_to_hamilton"), ".2f"),
                _fmt(row.get("old_total_ms")),
            ]
        )
    parts.append(
        "### Compile: ms (Hamilton = `FunctionGraph.from_modules(mod, config={})`)\n\n"
        + _table(
            [
                "case",
                "nodes",
                "Hamilton build",
                "ours Driver()",
                "ours prepare()",
                "ours total",
                "ours µs/node",
                "(gc off)",
                "ours / Hamilton",
                "0.2.0 total",
            ],
            rows,
        )
    )


def _render_memory_and_big_chain(out: dict[str, Any], parts: list[str]) -> None:
    """Memory per open plan and the long-chain run."""
    mem = out.get("memory", {})
    rows = []
    for name in ("ours", "0.2.0"):
        r = mem.get(name)
        if r is None:
            continue
        if "error" in r:
            rows.append([name, r["error"], ""])
        else:
            rows.append(
                [name, f"{r['tracemalloc_bytes'] / 1024:.1f}", f"{r['rss_bytes'] / 1024:.1f}"]
            )
    if rows:
        parts.append(
            f"### Memory per open plan ({mem.get('contexts')} `open()` contexts alive, "
            f"{mem.get('case')})\n\n" + _table(["runner", "tracemalloc KB", "RSS KB"], rows)
        )

    big = out.get("big_chain", {})
    if big:
        rows = [["Hamilton build", f"{big['hamilton_build_ms']:.0f} ms", "", "", ""]]
        for name in ("ours", "0.2.0"):
            r = big.get(name)
            if r is None:
                continue
            rows.append(
                [
                    name,
                    _fmt(None if "driver_s" not in r else r["driver_s"] * 1e3, ".0f"),
                    _fmt(None if "prepare_s" not in r else r["prepare_s"] * 1e3, ".0f"),
                    _fmt(None if "execute_s" not in r else r["execute_s"] * 1e3, ".0f"),
                    "ok" if r.get("ok") else r.get("error", "failed"),
                ]
            )
        parts.append(
            f"### Chain of {big['nodes']} nodes (fresh process, default recursion limit)\n\n"
            + _table(["runner", "Driver() ms", "prepare() ms", "execute ms", "result"], rows)
        )


def _render_targets_and_errors(out: dict[str, Any], parts: list[str]) -> None:
    """Targets with their verdicts, and runners that could not run."""
    rows = []
    for t in out.get("targets", []):
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        limit = "completes" if t["unit"] == "s" else f"{t['unit']} {t['limit']:g}"
        rows.append([t["target"], _fmt(t["value"], ".2f"), limit, verdict])
    parts.append("### Targets\n\n" + _table(["target", "measured", "limit", "verdict"], rows))

    errors = out.get("errors", {})
    if errors or out.get("old_error") or out.get("ours_error"):
        lines = [f"- {k}: {v}" for k, v in sorted(errors.items())]
        for name in ("ours_error", "old_error"):
            if out.get(name):
                lines.append(f"- {name}: {out[name]}")
        parts.append("### Runners that could not run a case\n\n" + "\n".join(lines))


def render(out: dict[str, Any]) -> str:
    parts: list[str] = []
    m = out["machine"]
    parts.append(
        f"{m['date']}; {m['nproc']} CPUs ({m['cpu']}); CPython {m['python']}; "
        f"Hamilton {m['hamilton']}; commit {m['commit']}; mode {out['settings']['mode']}; "
        f"load average {m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end"
    )

    for section in (
        _render_latency,
        _render_throughput,
        _render_prepare,
        _render_memory_and_big_chain,
        _render_targets_and_errors,
    ):
        section(out, parts)
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few reps, short batches")
    parser.add_argument(
        "--with-old", action="store_true", help="also run sdax-hamilton 0.2.0 (see --old-python)"
    )
    parser.add_argument(
        "--old-python",
        default=os.environ.get("SDAX_OLD_PYTHON", DEFAULT_OLD_PYTHON),
        help=f"interpreter of the 0.2.0 venv (default {DEFAULT_OLD_PYTHON})",
    )
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "results.json"))
    parser.add_argument(
        "--shape",
        action="append",
        choices=sorted(shapes.SIZES),
        help="only these shapes (repeatable)",
    )
    parser.add_argument(
        "--render", metavar="JSON", help="print the tables of an earlier results file and exit"
    )
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    Suite(args).run()


if __name__ == "__main__":
    main()
