"""Memory of open runs: many ``open()`` contexts of one plan alive at once.

    python bench/open_memory.py                     # ours and 0.2.0, 1,000 contexts of resources 50
    python bench/open_memory.py --no-old --processes 1
    python bench/open_memory.py --policy --contexts 2000 --json /tmp/open_memory.json

Each implementation is measured in ``--processes`` fresh worker processes (``worker.py``, the
``memory`` op of ``measure.py``): one ``open()`` warms the code paths, then ``--contexts``
contexts of the ``resources`` shape are entered on one ``AsyncExitStack`` (every resource
acquired and held, no release run yet) and the growth is divided by their number: RSS first
(``/proc/self/statm``, no tracing on, before the interpreter's pools have grown), then the
Python heap (``tracemalloc``), then the objects the cyclic collector tracks. RSS also holds
the native heaps (the Rust core's ``Run``) and the allocators' slack.

Then, for ours only and in this process, a profile of what an open context keeps: the
allocation sites (``tracemalloc``, the innermost frame inside the package or the case's
module) and the context's own attributes with what each holds (``sys.getsizeof`` of the
attribute and of the containers inside it: a per-job table of dicts counts the dicts).
Attributes are found by walking ``__slots__`` and ``__dict__`` (and one level into parts
defined by the package), so the profile follows the run object whatever its layout.

Exit status 1 when our median RSS per context exceeds ``--target-kb`` (80 KB, the target).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import statistics
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import shapes  # noqa: E402
from run import DEFAULT_OLD_PYTHON, WorkerProcess  # noqa: E402

PACKAGE = "sdax_hamilton"
CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)


# ------------------------------------------------------------------ fresh processes


def measure_in_workers(
    python: str, case: shapes.Case, contexts: int, processes: int, log: Any
) -> list[dict[str, Any]]:
    """``processes`` fresh workers of ``python``, one measurement each."""
    found = []
    for _ in range(processes):
        worker = WorkerProcess(python, log)
        try:
            loaded = worker.call(op="load", shape=case.shape, size=case.size, policy=case.policy)
            if not loaded.get("ok"):
                raise RuntimeError(f"{python}: {loaded.get('error', 'load failed')}")
            hello = worker.call(op="hello")
            reply = worker.call(op="memory", case=case.key, n=contexts)
            if "error" in reply:
                raise RuntimeError(f"{python}: {reply['error']}")
            reply["versions"] = hello["versions"]
            found.append(reply)
        finally:
            worker.close()
    return found


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    rss = [s["rss_bytes"] / 1024 for s in samples]
    return {
        "rss_kb": round(statistics.median(rss), 1),
        "rss_kb_range": [round(min(rss), 1), round(max(rss), 1)],
        "traced_kb": round(statistics.median(s["tracemalloc_bytes"] / 1024 for s in samples), 1),
        "gc_objects": round(statistics.median(s.get("gc_objects", 0.0) for s in samples), 1),
        "versions": samples[0]["versions"],
    }


# ------------------------------------------------------------------ profile (ours)


def _own_frame(trace: tracemalloc.Traceback, module_file: str) -> tracemalloc.Frame:
    """The innermost frame inside the package or the case's module (else the innermost)."""
    for frame in reversed(trace):
        name = frame.filename
        if f"/{PACKAGE}/" in name or name == module_file:
            return frame
    return trace[-1]


def _short(path: str) -> str:
    marker = f"/{PACKAGE}/"
    if marker in path:
        return PACKAGE + "/" + path.split(marker, 1)[1]
    return Path(path).name


def _attributes(obj: object) -> Iterator[tuple[str, Any]]:
    seen: set[str] = set()
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in seen or name in ("__dict__", "__weakref__"):
                continue
            seen.add(name)
            try:
                yield name, getattr(obj, name)
            except AttributeError:
                continue
    for name, value in getattr(obj, "__dict__", {}).items():
        if name not in seen:
            yield name, value


def _holding(value: Any) -> tuple[int, str]:
    """Bytes of ``value`` and of the containers directly inside it (a table of dicts counts
    the dicts, not what they refer to), and what those containers are."""
    size = sys.getsizeof(value)
    inner: collections.Counter[str] = collections.Counter()
    if isinstance(value, CONTAINERS):
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            if isinstance(item, CONTAINERS):
                size += sys.getsizeof(item)
                inner[type(item).__name__] += 1
    what = ", ".join(f"{count} {name}" for name, count in inner.most_common())
    return size, what


def _describe(value: Any) -> str:
    kind = type(value).__name__
    if isinstance(value, CONTAINERS):
        return f"{kind} of {len(value)}"
    return kind


def _parts(context: object, other: object, prefix: str = "") -> list[dict[str, Any]]:
    """One row per attribute of ``context``; ``other`` (another open context of the plan)
    tells which values are the plan's, shared by every context. Parts defined by the
    package are opened one level further (their own attributes follow, prefixed)."""
    rows = []
    others = dict(_attributes(other))
    for name, value in _attributes(context):
        size, inside = _holding(value)
        # the plan's (the same object in every context), or a flag: no bytes of its own
        shared = others.get(name, object()) is value or isinstance(value, (bool, int, float))
        shared = shared or value is None
        rows.append(
            {
                "attribute": prefix + name,
                "value": _describe(value),
                "bytes": 0 if shared else size,
                "shared": shared,
                "containers inside": inside,
            }
        )
        own = type(value).__module__.startswith(PACKAGE + ".") and not isinstance(value, type)
        if own and not shared and not prefix and any(True for _ in _attributes(value)):
            rows.extend(_parts(value, others.get(name), prefix + name + "."))
    return rows


async def _held(plan: Any, inputs: dict[str, Any], contexts: int) -> dict[str, Any]:
    """Snapshots before and with ``contexts`` open contexts, and one context's attributes."""
    async with plan.open(inputs=dict(inputs)):  # first-use caches are not the contexts'
        pass
    gc.collect()
    tracemalloc.start(10)
    try:
        before = tracemalloc.take_snapshot()
        opened = []
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(contexts):
                context = plan.open(inputs=dict(inputs))
                await stack.enter_async_context(context)
                opened.append(context)
            gc.collect()
            after = tracemalloc.take_snapshot()
            one, other = opened[len(opened) // 2], opened[len(opened) // 2 + 1]
            return {
                "stats": after.compare_to(before, "traceback"),
                "context_type": f"{type(one).__module__}.{type(one).__qualname__}",
                "context_bytes": sys.getsizeof(one),
                "attributes": _parts(one, other),
            }
    finally:
        tracemalloc.stop()


def profile(case: shapes.Case, contexts: int, top: int) -> dict[str, Any]:
    module = shapes.load(case)
    module_file = str(Path(module.__file__ or "").resolve())
    sdax: Any = __import__(PACKAGE)
    plan = sdax.Driver(module).prepare(list(case.outputs))
    held = asyncio.run(_held(plan, dict(case.inputs), contexts))
    sites: collections.Counter[tuple[str, int]] = collections.Counter()
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for stat in held.pop("stats"):
        if stat.size_diff <= 0:
            continue
        frame = _own_frame(stat.traceback, module_file)
        key = (frame.filename, frame.lineno)
        sites[key] += stat.size_diff
        counts[key] += stat.count_diff
    rows = []
    for (filename, lineno), size in sites.most_common(top):
        line = ""
        with contextlib.suppress(OSError, IndexError):
            line = Path(filename).read_text().splitlines()[lineno - 1].strip()
        rows.append(
            {
                "site": f"{_short(filename)}:{lineno}",
                "bytes": round(size / contexts),
                "objects": round(counts[(filename, lineno)] / contexts, 1),
                "line": line[:70],
            }
        )
    return {"traced_bytes": round(sum(sites.values()) / contexts), "sites": rows, **held}


# ------------------------------------------------------------------ output


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render(out: dict[str, Any]) -> str:
    parts = [
        f"### {out['contexts']:,} `open()` contexts alive at once, {out['case']} "
        f"({out['processes']} fresh processes each, median)\n"
    ]
    rows = []
    for name, found in out["runs"].items():
        low, high = found["rss_kb_range"]
        rows.append(
            [
                name,
                f"{found['rss_kb']:.1f}",
                f"{low:.1f}-{high:.1f}",
                f"{found['traced_kb']:.1f}",
                f"{found['rss_kb'] - found['traced_kb']:.1f}",
                f"{found['gc_objects']:.0f}",
            ]
        )
    parts.append(
        table(
            ["runner", "RSS KB", "RSS range", "tracemalloc KB", "RSS - traced KB", "gc objects"],
            rows,
        )
    )
    ours = out["runs"].get("ours")
    if ours is not None:
        verdict = "PASS" if ours["rss_kb"] <= out["target_kb"] else "FAIL"
        parts.append(f"\nTarget: at most {out['target_kb']:.0f} KB RSS per open context: {verdict}")
    prof = out.get("profile")
    if prof:
        parts.append(
            f"\n#### Where an open context's Python heap goes (ours, {prof['traced_bytes']:,} B "
            "traced per context)\n"
        )
        parts.append(
            table(
                ["allocation site", "B per context", "objects", "line"],
                [
                    [r["site"], f"{r['bytes']:,}", r["objects"], f"`{r['line']}`"]
                    for r in prof["sites"]
                ],
            )
        )
        parts.append(
            f"\n#### One open context's own attributes (`{prof['context_type']}`, "
            f"{prof['context_bytes']} B itself; the plan's shared tables and flags left out)\n"
        )
        kept = [r for r in prof["attributes"] if not r["shared"]]
        parts.append(
            table(
                ["attribute", "value", "B (with containers inside)", "containers inside"],
                [
                    [r["attribute"], r["value"], f"{r['bytes']:,}", r["containers inside"]]
                    for r in kept
                ],
            )
        )
    return "\n".join(parts)


def main(args: argparse.Namespace) -> int:
    case = shapes.resources(args.size, args.policy)
    out: dict[str, Any] = {
        "case": case.key,
        "contexts": args.contexts,
        "processes": args.processes,
        "target_kb": args.target_kb,
        "runs": {},
    }
    pythons = {"ours": sys.executable}
    if not args.no_old:
        if not os.path.exists(args.old_python):
            print(
                f"no 0.2.0 venv at {args.old_python}: bash bench/setup_old_venv.sh", file=sys.stderr
            )
            return 2
        pythons["0.2.0"] = args.old_python
    for name, python in pythons.items():
        samples = measure_in_workers(python, case, args.contexts, args.processes, sys.stderr)
        out["runs"][name] = {**summary(samples), "samples": samples}
        print(f"{name}: {out['runs'][name]['rss_kb']} KB RSS per context", file=sys.stderr)
    if not args.no_profile:
        out["profile"] = profile(case, min(args.contexts, args.profile_contexts), args.top)
    print(render(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if out["runs"]["ours"]["rss_kb"] <= args.target_kb else 1


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--contexts", type=int, default=1000)
    parser.add_argument("--size", type=int, default=50, help="triples of the resources shape")
    parser.add_argument("--policy", action="store_true", help="the +policy variant")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per runner")
    parser.add_argument(
        "--old-python", default=os.environ.get("SDAX_OLD_PYTHON", DEFAULT_OLD_PYTHON)
    )
    parser.add_argument("--no-old", action="store_true", help="ours only")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--top", type=int, default=12, help="allocation sites listed")
    parser.add_argument(
        "--profile-contexts", type=int, default=200, help="contexts held while profiling"
    )
    parser.add_argument("--target-kb", type=float, default=80.0)
    parser.add_argument("--json", help="also write the figures here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
