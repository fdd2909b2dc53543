"""zyg as a GradBench tool: reads the eval's messages (one JSON object a line) on
stdin and writes one response a line on stdout (GradBench's protocol: start, define,
evaluate, analysis; any other kind is acknowledged with its id).

    python benchmarks/gradbench/zyg_tool.py [--target cpu|python]

``define`` imports ``benchmarks.gradbench.modules.<module>`` and compiles its
functions on a small input; its response carries that as a ``compile`` timing.
``evaluate`` runs the function ``min_runs`` times and for ``min_seconds`` at least
and returns one ``evaluate`` timing per run (JSON conversion is not timed).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

MODULES = ("hello", "lse", "llsq", "ode", "det", "kmeans", "gmm", "lstm", "ba", "ht",
           "particle", "saddle")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "python"), default="cpu",
                        help="zyg's target (cpu: numba-compiled; python: plain Python)")
    args = parser.parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr          # nothing but responses on the protocol's stream
    loaded: dict = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        response: dict = {"id": message["id"]}
        kind = message.get("kind")
        try:
            if kind == "start":
                response["tool"] = "zyg"
                response["config"] = {"target": args.target}
            elif kind == "define":
                name = message["module"]
                if name not in MODULES:
                    response.update(success=False, error=f"zyg has no module {name!r}")
                else:
                    t0 = time.perf_counter_ns()
                    mod = importlib.import_module(f"benchmarks.gradbench.modules.{name}")
                    impl = mod.make(args.target)
                    impl.warm_up()
                    loaded[name] = impl
                    response.update(success=True, timings=[
                        {"name": "compile", "nanoseconds": time.perf_counter_ns() - t0}])
            elif kind == "evaluate":
                impl = loaded[message["module"]]
                output, timings = impl.evaluate(message["function"], message["input"])
                response.update(success=True, output=output, timings=timings)
        except Exception as e:  # noqa: BLE001 - reported to the eval
            response.update(success=False, error="".join(traceback.format_exception(e)))
        out.write(json.dumps(response) + "\n")
        out.flush()


if __name__ == "__main__":
    try:
        main()
    except (EOFError, BrokenPipeError):
        pass
