"""Wall-clock timing of a callable: warm-up, calibration, median of many repeats.

Like :mod:`timeit`: each repeat calls the function ``number`` times in a plain loop
with the garbage collector off, ``number`` chosen so that a repeat lasts about
``repeat_target_s``; repeats continue until ``budget_s`` is spent (at least
``min_repeats``, at most ``max_repeats``). :func:`measure_interleaved` times
several callables with their repeats interleaved, for ratios that survive the
drift of a shared machine. Per-call times are reported, so for a
sub-microsecond function they include the cost of calling it from Python -- which
is what a user pays.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from typing import Any, Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Settings:
    """How long and how often to measure one callable."""

    budget_s: float = 1.0
    min_repeats: int = 7
    max_repeats: int = 1000
    repeat_target_s: float = 5e-3
    warmup_calls: int = 3


QUICK = Settings(budget_s=0.02, min_repeats=3, max_repeats=50, repeat_target_s=1e-3,
                 warmup_calls=1)
"""Settings for ``--quick`` and the smoke test: seconds, not minutes."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call statistics over the repeats, in seconds."""

    median_s: float
    min_s: float
    q1_s: float
    q3_s: float
    repeats: int
    number: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)


def _loop(fn: Callable[..., Any], args: tuple[Any, ...], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn(*args)
    return time.perf_counter() - t0


def _calibrate(
    fn: Callable[..., Any], args: tuple[Any, ...], settings: Settings
) -> tuple[int, float]:
    """Warm up; return (calls per repeat, time of one call)."""
    t_one = math.inf
    for _ in range(max(settings.warmup_calls, 1)):
        t_one = min(t_one, _loop(fn, args, 1))
    return max(1, math.ceil(settings.repeat_target_s / max(t_one, 1e-9))), t_one


def _summary(samples: list[float], number: int) -> Timing:
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return Timing(
        median_s=statistics.median(samples),
        min_s=min(samples),
        q1_s=q1,
        q3_s=q3,
        repeats=len(samples),
        number=number,
    )


def measure(fn: Callable[..., Any], args: tuple[Any, ...], settings: Settings) -> Timing:
    """Time ``fn(*args)``; the caller has already called it once (compiled, verified)."""
    return measure_interleaved([(fn, args)], settings)[0]


def measure_interleaved(
    calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]], settings: Settings
) -> list[Timing]:
    """Time several callables with their repeats interleaved round-robin.

    On a shared machine the speed drifts (other processes, frequency); interleaving
    lets the drift hit every callable alike, so their *ratios* stay meaningful. The
    budget is ``settings.budget_s`` per callable. Each callable must already have
    been called once.
    """
    if not calls:
        return []
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        calibrated = [_calibrate(fn, args, settings) for fn, args in calls]
        numbers = [c[0] for c in calibrated]
        # expensive calls: fewer repeats are enough and keep the run short
        slowest = max(c[1] for c in calibrated)
        min_repeats = settings.min_repeats if slowest < 0.2 else min(settings.min_repeats, 3)
        samples: list[list[float]] = [[] for _ in calls]
        deadline = time.perf_counter() + settings.budget_s * len(calls)
        rounds = 0
        while rounds < settings.max_repeats and (
            rounds < min_repeats or time.perf_counter() < deadline
        ):
            for (fn, args), number, acc in zip(calls, numbers, samples):
                acc.append(_loop(fn, args, number) / number)
            rounds += 1
    finally:
        if gc_was_enabled:
            gc.enable()
    return [_summary(acc, number) for acc, number in zip(samples, numbers)]


def format_seconds(seconds: float) -> str:
    """``1.23 µs`` style: three significant digits and a unit."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale * 0.9995:  # 999.6 ms prints as 1 s, not 1e+03 ms
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
