"""Profile this package's hot path on one benchmark case.

    python bench/profile_ours.py chain 2000 [--policy] [--what execute|prepare]
        [--runs N] [--tool cprofile|pyinstrument] [--top 25]

``execute``: N sequential ``plan.execute()`` calls of a prepared plan (after one warm-up);
``prepare``: N ``Driver(module).prepare(outputs)`` builds. cProfile prints the functions
with the most own time; pyinstrument (``pip install pyinstrument``) prints a call tree.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure
import shapes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=sorted(shapes.SIZES))
    parser.add_argument("size", type=int)
    parser.add_argument("--policy", action="store_true")
    parser.add_argument("--what", choices=("execute", "prepare"), default="execute")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tool", choices=("cprofile", "pyinstrument"), default="cprofile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime")
    args = parser.parse_args()

    case = shapes.build(args.shape, args.size, args.policy)
    module = shapes.load(case)
    runner = measure.SdaxRunner(case, module)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(runner.execute())

    def work() -> None:
        if args.what == "execute":

            async def many() -> None:
                for _ in range(args.runs):
                    await runner.execute()

            loop.run_until_complete(many())
        else:
            for _ in range(args.runs):
                measure.sdax_prepare_seconds(module, list(case.outputs))

    start = time.perf_counter()
    work()
    plain = time.perf_counter() - start
    unit, per = (case.calls, "call") if args.what == "execute" else (case.nodes, "node")
    print(
        f"{case.label}: {args.what} x{args.runs} unprofiled {plain * 1e3:.1f} ms, "
        f"{plain * 1e6 / (args.runs * unit):.2f} us per {per}"
    )
    if args.tool == "pyinstrument":
        import pyinstrument

        profiler: Any = pyinstrument.Profiler(interval=0.0002, async_mode="disabled")
        profiler.start()
        work()
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    prof = cProfile.Profile()
    prof.enable()
    work()
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
