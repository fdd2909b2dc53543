"""What every eval module of the zyg GradBench tool shares: the target, the primal
(numba-compiled on ``cpu``, plain Python on ``python``) and GradBench's repeat loop
(``min_runs`` / ``min_seconds``: one ``evaluate`` timing per run)."""
from __future__ import annotations

import time
from typing import Any, Callable

import numba


def primal(f: Callable, target: str) -> Callable:
    """``f`` as a numba user runs it: ``numba.njit`` on the cpu target."""
    return numba.njit(f) if target == "cpu" else f


def repeat(raw: dict, fn: Callable, args: tuple) -> tuple[Any, list[dict]]:
    """Run ``fn(*args)`` at least ``min_runs`` times and until ``min_seconds`` have
    passed (GradBench's ``Runs``); one ``evaluate`` timing per run."""
    min_runs = int(raw.get("min_runs", 1)) if isinstance(raw, dict) else 1
    min_seconds = float(raw.get("min_seconds", 0.0)) if isinstance(raw, dict) else 0.0
    timings: list[dict] = []
    elapsed = 0
    out = None
    while len(timings) < max(min_runs, 1) or elapsed < min_seconds * 1e9:
        t0 = time.perf_counter_ns()
        out = fn(*args)
        t1 = time.perf_counter_ns()
        timings.append({"name": "evaluate", "nanoseconds": t1 - t0})
        elapsed += t1 - t0
    return out, timings


class Module:
    """An eval module: ``functions[name] = (pre, fn, post)``; ``pre`` turns the JSON
    input into the arguments of ``fn`` (not timed), ``post`` turns its result into JSON."""

    def __init__(self, target: str):
        self.target = target
        self.functions: dict[str, tuple[Callable, Callable, Callable]] = {}

    def warm_up(self) -> None:
        """Compile every function on a small input (so that timings leave compiles out)."""

    def evaluate(self, function: str, raw: Any) -> tuple[Any, list[dict]]:
        pre, fn, post = self.functions[function]
        args = pre(raw)
        out, timings = repeat(raw, fn, args)
        return post(out), timings
