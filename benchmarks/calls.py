"""Call overhead: a small function called in a hot loop, against the same loop with
the call inlined by hand (issue 4: the zyg gradient within 1.5x of the inlined one).

Three ways to call the small function are measured, each next to its hand-inlined
twin, all with ``zyg.value_and_grad(..., target="cpu")``, interleaved in one run:

* a module-level ``@numba.njit`` function (``smooth(u, a)``);
* a closure capturing an input-dependent value, defined inside the loop's function;
* a lambda passed to a user higher-order helper (``apply_each(f, xs)``).

The numba primal of each is timed too.  Run ``python -m benchmarks.calls``
(``--quick`` for a seconds-long smoke run); it prints a markdown table and writes
it to ``benchmarks/results/calls.md`` (``--out DIR`` to change).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numba
import numpy as np

from benchmarks.timing import QUICK, Settings, format_seconds, measure_interleaved


@numba.njit
def smooth(u, a):
    """The small callee (a numba function, as in numba code): a few flops and a tanh."""
    return a * u / (1.0 + u * u) + math.tanh(u)


def loop_call(xs, a):
    s = 0.0
    for i in range(xs.shape[0]):
        s += smooth(xs[i] + s * 1e-3, a)
    return s


def loop_inline(xs, a):
    s = 0.0
    for i in range(xs.shape[0]):
        u = xs[i] + s * 1e-3
        s += a * u / (1.0 + u * u) + math.tanh(u)
    return s


def closure_call(xs, a):
    c = math.sin(a)

    def g(u):
        return c * u / (1.0 + u * u) + math.tanh(u)

    s = 0.0
    for i in range(xs.shape[0]):
        s += g(xs[i] + s * 1e-3)
    return s


def closure_inline(xs, a):
    c = math.sin(a)
    s = 0.0
    for i in range(xs.shape[0]):
        u = xs[i] + s * 1e-3
        s += c * u / (1.0 + u * u) + math.tanh(u)
    return s


def apply_each(f, xs):
    s = 0.0
    for i in range(xs.shape[0]):
        s += f(xs[i] + s * 1e-3)
    return s


def lambda_call(xs, a):
    return apply_each(lambda u: a * u / (1.0 + u * u) + math.tanh(u), xs)


PAIRS = [("module-level function", loop_call, loop_inline),
         ("closure (captures sin(a))", closure_call, closure_inline),
         ("lambda through a user helper", lambda_call, loop_inline)]


def main(argv=None) -> int:
    import zyg
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("-n", type=int, default=None)
    a = ap.parse_args(argv)
    n = a.n or (1000 if a.quick else 100_000)
    settings = QUICK if a.quick else Settings(budget_s=1.5)
    xs = np.linspace(-2.0, 2.0, n)
    args = (xs, 0.7)
    rows = []
    for title, called, inlined in PAIRS:
        fs = {}
        for tag, f in (("call", called), ("inline", inlined)):
            t0 = time.perf_counter()
            vg = zyg.value_and_grad(f, argnums=(0, 1), target="cpu")
            val, g = vg(*args)
            first = time.perf_counter() - t0
            prim = numba.njit(f) if f is not lambda_call else None
            if prim is not None:
                prim(*args)
            fs[tag] = (vg, prim, val, g, first)
        (vc, pc, valc, gc_, fc), (vi, pi, vali, gi, fi) = fs["call"], fs["inline"]
        # both versions compute the same function: gradients agree to rounding
        assert abs(valc - vali) <= 1e-12 * abs(vali), (title, valc, vali)
        np.testing.assert_allclose(gc_[0], gi[0], rtol=1e-10, atol=1e-14)
        assert abs(gc_[1] - gi[1]) <= 1e-10 * abs(gi[1])
        calls = [(vc, args), (vi, args)] + ([(pc, args)] if pc is not None else []) + [(pi, args)]
        ts = measure_interleaved(calls, settings)
        tc, ti = ts[0].median_s, ts[1].median_s
        tpc = ts[2].median_s if pc is not None else None
        tpi = ts[-1].median_s
        rows.append((title, tc, ti, tpc, tpi, fc, fi))
    lines = [f"# Call overhead (n = {n}, gradient w.r.t. xs and a, target cpu)", "",
             "| callee | zyg, call | zyg, inlined by hand | call / inlined | primal, call | "
             "primal, inlined | zyg call / its primal | first call of the zyg call version |",
             "|---|---|---|---|---|---|---|---|"]
    for title, tc, ti, tpc, tpi, fc, fi in rows:
        lines.append(f"| {title} | {format_seconds(tc)} | {format_seconds(ti)} | **{tc / ti:.2f}** | "
                     f"{format_seconds(tpc) if tpc else '-'} | {format_seconds(tpi)} | "
                     f"{tc / (tpc or tpi):.2f} | {fc:.2f} s |")
    lines += ["", "zyg inlines user functions, closures and lambdas into the caller's SSA "
              "(docs/calls.md), so the call and the hand-inlined loop compile to the same code; "
              "the ratio measures what remains (noise, and block layout)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.quick or a.out != os.path.join(os.path.dirname(__file__), "results"):
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "calls.md"), "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
