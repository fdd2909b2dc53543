"""Command line: ``python -m zyg demo`` and ``python -m zyg show file.py:func``.

``demo`` differentiates a few real functions (a pow loop whose trip count is data,
a Taylor series, a Bessel power series summed until it converges, a projectile
simulation with drag and a branch, a heat equation updated in place in an array) and prints, for each, the gradient, a
finite-difference check, the time of the numba primal against the zyg gradient,
and the first-call latency (transform + compile).

``show`` prints what :func:`zyg.show` prints -- the SSA IR, the generated primal
and adjoint -- for a function in a Python file::

    python -m zyg show mymodel.py:energy --args 1.0,3

Errors raised by zyg (:class:`zyg.ZygError`) are printed without a traceback and
the command exits with status 1.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import math
import os
import statistics
import sys
import time

import numpy as np
from typing import Any, Callable, List, Optional, Sequence, Tuple

# --- the demo's functions: ordinary Python, exactly as a numba user writes it ----------


def pow_loop(x, n):
    """x ** n by n multiplications; the trip count is data."""
    r = 1.0
    while n > 0:
        n -= 1
        r *= x
    return r


def taylor(x, n):
    """sum_{i=1..n} x**i / i, accumulating the power term by term."""
    t = 1.0
    s = 0.0
    for i in range(1, n + 1):
        t *= x
        s += t / i
    return s


def bessel_j(z, nu):
    """Bessel J_nu(z) for an integer order nu >= 0, summed until the terms stop mattering."""
    x = z / 2.0
    s = x ** nu
    for i in range(2, nu + 1):
        s /= i
    out = s
    k = 0
    while abs(s) > 1e-17 * abs(out):
        k += 1
        s *= -x * x / (k * (k + nu))
        out += s
    return out


def projectile(angle, speed, drag, dt):
    """Range of a projectile with air drag (explicit Euler) until it lands."""
    vx = speed * math.cos(angle)
    vy = speed * math.sin(angle)
    x = 0.0
    y = 0.0
    xp = 0.0
    yp = 0.0
    while y >= 0.0:
        xp, yp = x, y
        v = math.sqrt(vx * vx + vy * vy)
        if v > 20.0:
            k = drag * v            # quadratic drag when fast
        else:
            k = drag * 20.0         # linear drag when slow (continuous at v = 20)
        ax = -k * vx
        ay = -9.81 - k * vy
        x += dt * vx
        y += dt * vy
        vx += dt * ax
        vy += dt * ay
    # interpolate the landing point inside the last step
    return xp + (x - xp) * yp / (yp - y)


def heat(u0, alpha, steps):
    """Explicit 1-D heat equation, the array updated in place every time step."""
    u = u0.copy()
    n = u.shape[0]
    for t in range(steps):
        left = u[0]
        for i in range(1, n - 1):
            new = u[i] + alpha * (left - 2.0 * u[i] + u[i + 1])
            left = u[i]
            u[i] = new
    return np.sum(u * u)


class DemoCase:
    """One demo function with its arguments (full and --quick) and how to check it."""

    def __init__(self, fn: Callable, title: str, args: tuple, quick: tuple,
                 argnums: Any = 0, fd_step: float = 1e-4,
                 exact: Optional[Callable[..., Optional[float]]] = None):
        self.fn = fn
        self.title = title
        self.args = args
        self.quick = quick
        self.argnums = argnums
        self.fd_step = fd_step          # relative step of the 5-point stencil
        self.exact = exact              # closed-form derivative w.r.t. argument 0, if known


def _bessel_exact(z, nu):
    try:
        from scipy.special import jvp
    except ImportError:  # pragma: no cover - scipy is a dependency, but stay usable without it
        return None
    return float(jvp(nu, z))


CASES = [
    DemoCase(pow_loop, "pow loop: r *= x in a while loop, n times (trip count is data)",
             (0.99999, 100_000), (0.999, 1_000), fd_step=1e-7,
             exact=lambda x, n: n * x ** (n - 1)),
    DemoCase(taylor, "Taylor series sum x**i / i, accumulating the power (for-range loop)",
             (0.5, 1_000_000), (0.5, 1_000), fd_step=1e-4,
             exact=lambda x, n: (1.0 - x ** n) / (1.0 - x)),
    DemoCase(bessel_j, "Bessel J_nu(z) power series, while loop until converged",
             (2.5, 2), (2.5, 2), fd_step=1e-4, exact=_bessel_exact),
    DemoCase(projectile, "projectile with drag: Euler steps until it lands, branch on the speed",
             # the range is piecewise smooth: it has small kinks where the number of steps
             # changes; these points and the FD step keep the stencil between two kinks
             (0.7, 50.0, 0.002, 1e-3), (0.7, 50.0, 0.002, 1e-2), argnums=(0, 1, 2), fd_step=1e-5),
    DemoCase(heat, "heat equation: a stencil updated in place in an array, many time steps",
             (np.sin(np.linspace(0.0, np.pi, 200)), 0.2, 2_000),
             (np.sin(np.linspace(0.0, np.pi, 20)), 0.2, 50), argnums=(0, 1), fd_step=1e-5),
]

FD_TOLERANCE = 1e-6


# --- helpers --------------------------------------------------------------------------

def fd_partial(f: Callable, args: Sequence[Any], i: int, rel: float) -> float:
    """Five-point central difference of ``f`` in argument ``i`` (step relative to |x|)."""
    x = float(args[i])
    h = rel * max(abs(x), 1e-300)

    def at(v):
        a = list(args)
        a[i] = v
        return float(f(*a))
    return (8.0 * (at(x + h) - at(x - h)) - (at(x + 2 * h) - at(x - 2 * h))) / (12.0 * h)


def fd_direction(f: Callable, args: Sequence[Any], i: int, d, rel: float) -> float:
    """Five-point central difference of ``f`` along direction ``d`` of array argument ``i``."""
    x = args[i]
    h = rel * max(float(np.max(np.abs(x))), 1e-300)

    def at(t):
        a = list(args)
        a[i] = x + t * d
        return float(f(*a))
    return (8.0 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12.0 * h)


def rel_err(got: float, ref: float) -> float:
    return abs(got - ref) / max(abs(ref), 1e-300)


def fmt_time(s: float) -> str:
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def _loops_for(fn: Callable, args: tuple, target: float) -> int:
    """Calls per repeat so that one repeat lasts about ``target`` seconds."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        dt = time.perf_counter() - t0
        if dt >= target or n >= 1 << 22:
            return n
        n = max(n * 2, int(n * target / max(dt, 1e-9) * 1.2))


def median_times(fns: Sequence[Callable], args: tuple, repeats: int, target: float) -> List[float]:
    """Median seconds per call of each function, measured interleaved (one repeat of each in turn)."""
    loops = [_loops_for(f, args, target) for f in fns]
    samples: List[List[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for k, f in enumerate(fns):
            n = loops[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f(*args)
            samples[k].append((time.perf_counter() - t0) / n)
    return [statistics.median(s) for s in samples]


def _cache_files(d: str) -> set:
    try:
        return set(os.listdir(d))
    except OSError:
        return set()


def _signature(fn: Callable) -> str:
    return f"{fn.__name__}({', '.join(inspect.signature(fn).parameters)})"


# --- commands -------------------------------------------------------------------------

def run_demo(quick: bool = False, show_source: bool = True, out=None) -> int:
    """Run the demo; returns the exit status (1 if a gradient check failed)."""
    out = out or sys.stdout
    import numba
    import zyg
    from zyg.compile import cache_dir

    def say(*a):
        print(*a, file=out, flush=True)

    repeats, target = (3, 2e-4) if quick else (15, 5e-3)
    say(f"zyg {zyg.__version__} demo: gradients of ordinary Python loops and branches, compiled with "
        f"numba {numba.__version__}")
    say(f"generated code is cached in {cache_dir()} (ZYG_CACHE_DIR)")
    say("checks: 5-point central finite differences of the numba primal; times: median per call")
    rows = []
    failed = False
    for case in CASES:
        fn = case.fn
        args = case.quick if quick else case.args
        say("")
        say(f"== {case.title}")
        if show_source:
            for line in inspect.getsource(fn).rstrip().splitlines():
                say("   | " + line)
        primal = numba.njit(fn)
        t0 = time.perf_counter()
        value = primal(*args)
        t_numba_first = time.perf_counter() - t0

        # zyg works on the @njit function directly (it reads the Python source behind it)
        before = _cache_files(cache_dir())
        t0 = time.perf_counter()
        vg = zyg.value_and_grad(primal, argnums=case.argnums)
        zvalue, grad = vg(*args)
        t_first = time.perf_counter() - t0
        warm = _cache_files(cache_dir()) == before

        nums = list(case.argnums) if isinstance(case.argnums, tuple) else [case.argnums]
        grads = list(grad) if isinstance(grad, tuple) else [grad]
        names = list(inspect.signature(fn).parameters)
        shown = ", ".join(f"array[{a.size}]" if isinstance(a, np.ndarray) else repr(a) for a in args)
        say(f"   {_signature(fn)} at ({shown})")
        say(f"   value      {zvalue!r}   (numba primal: {value!r})")
        worst = 0.0
        for i, g in zip(nums, grads):
            if isinstance(g, np.ndarray):
                # an array argument: the derivative along a random direction
                d = np.random.default_rng(1).standard_normal(g.shape)
                fd = fd_direction(primal, args, i, d, case.fd_step)
                g = float(np.sum(g * d))
                label = f"d/d{names[i]}.v"
            else:
                fd = fd_partial(primal, args, i, case.fd_step)
                label = f"d/d{names[i]}"
            e = rel_err(g, fd)
            worst = max(worst, e)
            say(f"   {label:<10} {g:<22.15g} finite difference {fd:<22.15g} rel. error {e:.1e}")
        if case.exact is not None:
            ex = case.exact(*args)
            if ex is not None:
                say(f"   exact d/d{names[nums[0]]}: {ex:.15g}   "
                    f"rel. error of zyg {rel_err(grads[0], ex):.1e}")
        value_ok = rel_err(zvalue, value) <= 1e-12
        if not (worst < FD_TOLERANCE) or not value_ok:
            failed = True
            say(f"   ** CHECK FAILED: relative error {worst:.1e} (tolerance {FD_TOLERANCE:g})"
                + ("" if value_ok else f"; value {zvalue!r} != primal {value!r}"))
        tp, tz = median_times([primal, vg], args, repeats, target)
        say(f"   time       numba primal {fmt_time(tp)}   zyg value_and_grad {fmt_time(tz)}   "
            f"ratio {tz / tp:.2f}x")
        say(f"   first call zyg transform + compile + run {fmt_time(t_first)}"
            f"{' (machine code reused from the on-disk cache)' if warm else ''}   "
            f"(numba primal compile + run {fmt_time(t_numba_first)})")
        rows.append((fn.__name__, worst, tp, tz, t_first, warm))
    say("")
    say(f"{'function':<12} {'FD rel. error':>13} {'numba primal':>13} {'zyg v+g':>10} {'ratio':>7} "
        f"{'first call':>11}")
    for name, e, tp, tz, tf, warm in rows:
        say(f"{name:<12} {e:>13.1e} {fmt_time(tp):>13} {fmt_time(tz):>10} {tz / tp:>6.2f}x "
            f"{fmt_time(tf):>11}{' (cached)' if warm else ''}")
    say("")
    say("ratio = zyg value-and-gradient time / numba primal time (value only), measured side by side.")
    say("first call = zyg.value_and_grad(f) plus its first call: parse, SSA, transform, numba compile;")
    say("(cached) = numba's machine code came from the on-disk cache of an earlier run.")
    say("Full benchmarks (JAX, PyTorch, hand-written adjoints): python -m benchmarks.run")
    if failed:
        say("some gradient checks FAILED")
        return 1
    return 0


def load_function(spec: str) -> Callable:
    """Resolve ``path/to/file.py:func`` (or ``package.module:func``) to a function object."""
    if ":" not in spec:
        raise _CliError(f"expected FILE.py:FUNCTION, got {spec!r}")
    where, _, qual = spec.rpartition(":")
    if not where or not qual:
        raise _CliError(f"expected FILE.py:FUNCTION, got {spec!r}")
    if where.endswith(".py") or os.path.sep in where or os.path.exists(where):
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise _CliError(f"no such file: {where}")
        stem = os.path.splitext(os.path.basename(path))[0]
        modname = stem if stem.isidentifier() else "_zyg_cli_module"
        if modname in sys.modules:          # e.g. a file named math.py or zyg.py
            modname = "_zyg_cli_" + modname
        sys.path.insert(0, os.path.dirname(path))     # so the file can import its neighbours
        spec_ = importlib.util.spec_from_file_location(modname, path)
        if spec_ is None or spec_.loader is None:
            raise _CliError(f"cannot import {where}")
        mod = importlib.util.module_from_spec(spec_)
        sys.modules[modname] = mod
        spec_.loader.exec_module(mod)
    else:
        try:
            mod = importlib.import_module(where)
        except ImportError as e:
            raise _CliError(f"cannot import module {where!r}: {e}") from None
    obj: Any = mod
    for part in qual.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _CliError(f"{where} has no function {qual!r}") from None
    if not callable(obj):
        raise _CliError(f"{where}:{qual} is not a function")
    return obj


def parse_args_literal(text: Optional[str], option: str = "--args") -> Tuple[Any, ...]:
    """``"1.0,3"`` -> ``(1.0, 3)``: a comma-separated list of Python literals."""
    if text is None or not text.strip():
        return ()
    try:
        val = ast.literal_eval(f"({text},)")
    except (ValueError, SyntaxError):
        raise _CliError(f"{option} must be Python literals separated by commas, e.g. 1.0,3 "
                        f"(cannot read {text!r})") from None
    return tuple(val)


def run_show(spec: str, args_text: Optional[str], argnums_text: Optional[str], out=None) -> int:
    import zyg
    from zyg.ssa.lower import unwrap
    fn = load_function(spec)
    args = parse_args_literal(args_text)
    try:
        params = [p for p in inspect.signature(unwrap(fn)).parameters.values()]
    except (TypeError, ValueError):
        params = None
    if args and params is not None and len(args) != len(params):
        raise _CliError(f"{spec} takes {len(params)} arguments ({', '.join(p.name for p in params)}) "
                        f"but --args gives {len(args)}")
    argnums: Any = 0
    if argnums_text:
        nums = parse_args_literal(argnums_text, "--argnums")
        n = len(args) if args else (len(params) if params is not None else None)
        for a in nums:
            if not isinstance(a, int) or isinstance(a, bool) or (n is not None and not -n <= a < n):
                raise _CliError(f"--argnums {argnums_text}: expected argument positions of a function of "
                                f"{n} arguments")
        argnums = nums[0] if len(nums) == 1 else nums
    zyg.show(fn, *args, argnums=argnums, file=out or sys.stdout)
    return 0


class _CliError(Exception):
    """A usage error of the command line (bad path, bad --args)."""


def build_parser() -> argparse.ArgumentParser:
    import zyg
    p = argparse.ArgumentParser(
        prog="python -m zyg",
        description="zyg: reverse-mode automatic differentiation of ordinary Python by source "
                    "transformation, compiled with numba.",
        epilog="examples:\n"
               "  python -m zyg demo                 differentiate real functions, check and time them\n"
               "  python -m zyg demo --quick         the same at small sizes (a few seconds)\n"
               "  python -m zyg show model.py:energy --args 1.0,3\n"
               "                                     print the SSA IR and the generated primal/adjoint",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"zyg {zyg.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="differentiate example functions; print gradients, "
                                    "finite-difference checks and timings")
    d.add_argument("--quick", action="store_true", help="small sizes and few repeats (for tests)")
    d.add_argument("--no-source", action="store_true", help="do not print the functions' source")
    s = sub.add_parser("show", help="print the SSA IR and the generated code of FILE.py:FUNCTION",
                       description="Print zyg.show(func, *args): the SSA IR, the primal and adjoint "
                                   "(used by zyg.pullback) and the fused value-and-gradient function "
                                   "(used by zyg.grad).")
    s.add_argument("target", metavar="FILE.py:FUNCTION",
                   help="the function to show (a module path like pkg.mod:func also works)")
    s.add_argument("--args", dest="args", default=None, metavar="A,B,...",
                   help="example arguments as Python literals, e.g. 1.0,3 (they fix the types; "
                        "default: every parameter a float)")
    s.add_argument("--argnums", default=None, metavar="I[,J...]",
                   help="which arguments to differentiate (default 0)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help()
        return 2
    import zyg
    try:
        if ns.command == "demo":
            return run_demo(quick=ns.quick, show_source=not ns.no_source)
        return run_show(ns.target, ns.args, ns.argnums)
    except zyg.ZygError as e:
        print(f"zyg: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except _CliError as e:
        print(f"zyg: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
