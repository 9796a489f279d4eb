"""Benchmark worker: measures floor and ``sdax_hamilton`` runs on request, in its own process.

Started by ``bench/run.py`` with some virtualenv's interpreter: sdax-hamilton 0.2.0's for
``--with-old`` (so its numbers are taken interleaved with ours and normalised by its own
floor), or the project venv's for a fresh-process memory measurement. Protocol: one JSON
object per line on stdin, one JSON reply per line on stdout; anything else the measured
code prints goes to stderr. Standard library only.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floor
import measure
import shapes


def describe(exc: BaseException) -> str:
    """Exception type and the first line of its message (bench modules carry no secrets)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200]


class Worker:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.cases: dict[str, shapes.Case] = {}
        self.floors: dict[str, floor.Floor] = {}
        self.runners: dict[str, measure.SdaxRunner] = {}

    def op_hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        import importlib.metadata as md

        versions: dict[str, str | None] = {}
        for dist in ("sdax-hamilton", "sdax", "apache-hamilton"):
            try:
                versions[dist] = md.version(dist)
            except md.PackageNotFoundError:
                versions[dist] = None
        return {"python": sys.version.split()[0], "versions": versions, "pid": os.getpid()}

    def op_recursionlimit(self, msg: dict[str, Any]) -> dict[str, Any]:
        sys.setrecursionlimit(int(msg["n"]))
        return {}

    def op_freeze(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Move everything loaded so far out of the garbage collector's generations."""
        gc.collect()
        gc.freeze()
        return {}

    def op_load(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Import, prepare and check one case; the reply says whether outputs match the floor."""
        case = shapes.build(msg["shape"], int(msg["size"]), bool(msg["policy"]))
        module = shapes.load(case)
        self.cases[case.key] = case
        fl = floor.Floor(case, module)
        self.floors[case.key] = fl
        expected = self.loop.run_until_complete(fl.execute())
        try:
            runner = measure.SdaxRunner(case, module)
            start = time.perf_counter()
            got = self.loop.run_until_complete(runner.execute())
            first = time.perf_counter() - start
        except Exception as exc:
            return {"ok": False, "error": describe(exc)}
        if got != expected:
            return {"ok": False, "error": "outputs differ from the floor's"}
        self.runners[case.key] = runner
        return {"ok": True, "first_s": first}

    def op_time(self, msg: dict[str, Any]) -> dict[str, Any]:
        key = msg["case"]
        execute = (
            self.floors[key].execute if msg["runner"] == "floor" else self.runners[key].execute
        )
        seconds = self.loop.run_until_complete(
            measure.time_batch(execute, int(msg["inner"]), int(msg.get("concurrency", 1)))
        )
        return {"s": seconds}

    def op_prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        driver_s, prepare_s = self.runners[msg["case"]].prepare_seconds()
        return {"driver_s": driver_s, "prepare_s": prepare_s}

    def op_memory(self, msg: dict[str, Any]) -> dict[str, Any]:
        runner = self.runners[msg["case"]]
        return self.loop.run_until_complete(
            measure.memory_per_open(runner.plan, dict(runner.case.inputs), int(msg["n"]))
        )

    def op_big_chain(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build, prepare and execute a long chain at the current recursion limit."""
        case = shapes.chain(int(msg["n"]), False)
        module = shapes.load(case)
        reply: dict[str, Any] = {"ok": False, "recursionlimit": sys.getrecursionlimit()}
        try:
            sdax = __import__("sdax_hamilton")
            start = time.perf_counter()
            driver = sdax.Driver(module)
            reply["driver_s"] = time.perf_counter() - start
            start = time.perf_counter()
            plan = driver.prepare(list(case.outputs))
            reply["prepare_s"] = time.perf_counter() - start
            start = time.perf_counter()
            result = self.loop.run_until_complete(plan.execute(inputs=dict(case.inputs)))
            reply["execute_s"] = time.perf_counter() - start
        except Exception as exc:
            reply["error"] = describe(exc)
            return reply
        reply["ok"] = result == {case.outputs[0]: int(msg["n"]) + 1}
        if not reply["ok"]:
            reply["error"] = "wrong result"
        return reply


def main() -> None:
    out: TextIO = sys.stdout
    sys.stdout = sys.stderr  # measured code must not corrupt the protocol channel
    worker = Worker()
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "quit":
            break
        try:
            reply = getattr(worker, f"op_{msg['op']}")(msg)
        except Exception as exc:  # report, keep serving
            reply = {"error": describe(exc)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
