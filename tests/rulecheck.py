"""A generic checker for reverse-mode rules (in the spirit of ChainRulesTestUtils' ``test_rrule``).

``check_rule(fn, *args)`` differentiates a one-line probe ``def probe(a0, ...): return fn(a0, ...)``
with ``zyg.grad`` - so the rule goes through closure conversion, emission and (for
``target="cpu"``) numba, exactly as in user code - and compares every partial derivative
with central finite differences of ``fn`` itself.  A rule entry that is ``None`` (no
gradient) must correspond to a zero derivative.

``sample_points(rule)`` gives the points a rule is checked at: the rule's own
``samples`` when it was registered with some, otherwise candidates from a fixed list
where the primal is finite and finite differences are trustworthy (two step sizes agree,
so no kink or pole is within reach).
"""
from __future__ import annotations

import itertools
import linecache
import math
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

import zyg
from zyg.rules import registry

# chosen to avoid 0, +-1 and equal pairs: kinks (abs, min/max ties) and domain edges
CANDIDATES = [0.3, 0.7, 1.4, -0.45, 2.2, -1.6, 0.95, -0.8, 3.7, 5.3]
PAIRS = [(0.3, 1.4), (0.7, -0.45), (1.4, 2.2), (-0.45, -1.6), (2.2, 0.3), (-1.6, 0.7),
         (3.7, 1.3), (0.95, 2.6), (5.3, -2.1)]

_PROBES: Dict[Tuple[Any, int, str], Callable] = {}
_probe_ids = itertools.count()


def _fd(fn: Callable, args: Sequence[float], i: int, h: float) -> float:
    step = h * max(1.0, abs(args[i]))
    up, dn = list(args), list(args)
    up[i] += step
    dn[i] -= step
    return (float(fn(*up)) - float(fn(*dn))) / (2.0 * step)


def _rel_close(a: float, b: float, rtol: float, atol: float) -> bool:
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def usable(fn: Callable, args: Sequence[float]) -> bool:
    """``fn`` is finite at and around ``args`` and finite differences there are reliable."""
    try:
        with np.errstate(all="raise"):
            y = float(fn(*args))
            for i in range(len(args)):
                d6 = _fd(fn, args, i, 1e-6)
                d5 = _fd(fn, args, i, 1e-5)
                if not (math.isfinite(d5) and math.isfinite(d6)):
                    return False
                if not _rel_close(d5, d6, 1e-7, 1e-9 * max(1.0, abs(y))):
                    return False
    except (ValueError, ZeroDivisionError, FloatingPointError, OverflowError, TypeError):
        return False
    return math.isfinite(y)


def sample_points(rule: registry.Rule, limit: int = 3) -> List[Tuple[float, ...]]:
    """Points (argument tuples) inside the domain of ``rule.fn`` at which to check it."""
    nargs = len(rule.converted.params)
    if rule.samples:
        return [tuple(s) for s in rule.samples]
    if nargs == 1:
        cands = [(c,) for c in CANDIDATES]
    elif nargs == 2:
        cands = list(PAIRS)
    else:
        cands = [tuple(CANDIDATES[(i + k) % len(CANDIDATES)] for k in range(nargs))
                 for i in range(len(CANDIDATES))]
    return [a for a in cands if usable(rule.fn, a)][:limit]


def probe_for(fn: Callable, nargs: int, target: str) -> Callable:
    """``zyg.grad`` of ``lambda *a: fn(*a)`` w.r.t. every argument, built once per target."""
    key = (registry._key(fn), nargs, target)
    g = _PROBES.get(key)
    if g is None:
        params = ", ".join(f"a{i}" for i in range(nargs))
        src = f"def probe({params}):\n    return fn({params})\n"
        name = f"<zyg-rulecheck-{next(_probe_ids)}>"
        # zyg reads the probe's source through linecache, as for a notebook cell
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        ns: Dict[str, Any] = {"fn": fn}
        exec(compile(src, name, "exec"), ns)
        g = _PROBES[key] = zyg.value_and_grad(ns["probe"], tuple(range(nargs)), target=target)
    return g


def check_rule(fn: Callable, *args: float, target: str = "python", rtol: float = 1e-6) -> None:
    """Assert that the registered rule of ``fn`` at ``args`` matches finite differences."""
    rule = registry.lookup(fn)
    assert rule is not None, f"no rule registered for {fn!r}"
    conv = rule.converted
    assert len(conv.params) == len(args), f"{rule!r} takes {len(conv.params)} arguments"
    args = tuple(float(a) for a in args)
    y = float(fn(*args))
    v, g = probe_for(fn, len(args), target)(*args)
    assert _rel_close(v, y, 1e-14, 1e-300), f"{rule!r} at {args} [{target}]: value {v!r} != {y!r}"
    atol = 1e-8 * max(1.0, abs(y))
    for i in range(len(args)):
        ref = _fd(fn, args, i, 1e-6)
        if not conv.nonzero[i]:
            # the rule says "no gradient": the true derivative must vanish here
            assert abs(ref) <= atol, f"{rule!r} at {args}: no gradient for argument {i}, " \
                                     f"but finite differences give {ref!r}"
            continue
        assert g[i] is not None, f"{rule!r} at {args} [{target}]: gradient {i} is None"
        assert _rel_close(float(g[i]), ref, rtol, atol), \
            f"{rule!r} at {args} [{target}]: d/d(arg {i}) rule={g[i]!r} fd={ref!r}"


def builtin_rules() -> List[registry.Rule]:
    """Every rule zyg registers itself (not user rules)."""
    return [r for k, r in registry.all_rules().items() if k in registry._BUILTIN_KEYS]


def complex_valued(rule: registry.Rule) -> bool:
    """Functions of complex analysis (``cmath``, ``complex``): checked with complex samples only."""
    import builtins
    import cmath
    return getattr(rule.fn, "__module__", None) == "cmath" or getattr(cmath, getattr(
        rule.fn, "__name__", ""), None) is rule.fn or rule.fn is builtins.complex


# --- complex operands (docs/complex.md) -----------------------------------------------------------
# away from the real axis (branch cuts of log, sqrt, arccosh, ...) and from 0
C_CANDIDATES = [0.6 + 0.4j, 0.3 - 0.8j, 1.2 + 0.5j, -0.7 + 0.9j, 0.9 - 0.3j, -1.1 - 0.6j]
C_PAIRS = [(1.3, -0.6), (0.6 + 0.4j, 0.3 - 0.8j), (1.2 + 0.5j, -0.4 + 0.7j), (0.7, 0.3 - 0.8j),
           (0.9 - 0.3j, 1.4), (-0.7 + 0.9j, 1.1 + 0.2j), (0.8, 2.1)]

_CPROBES: Dict[Tuple[Any, int, str], Callable] = {}


def _cfd(fn: Callable, args: Sequence[Any], i: int, dy: complex, h: float) -> complex:
    """Finite-difference cotangent of argument ``i`` for the real loss Re(conj(dy) * fn):
    dL/dRe + i dL/dIm for a complex argument, dL/da for a real one (docs/complex.md)."""
    def loss(*a) -> float:
        return (np.conj(dy) * complex(fn(*a))).real
    units = (1.0, 1j) if isinstance(args[i], complex) else (1.0,)
    step = h * max(1.0, abs(args[i]))
    g = 0j if len(units) == 2 else 0.0
    for u in units:
        up, dn = list(args), list(args)
        up[i] += step * u
        dn[i] -= step * u
        g += u * (loss(*up) - loss(*dn)) / (2.0 * step)
    return g


def usable_complex(fn: Callable, args: Sequence[Any]) -> bool:
    """``fn`` accepts these (partly complex) arguments, is finite there, and finite
    differences are reliable (two step sizes agree, in the real and imaginary part)."""
    try:
        with np.errstate(all="raise"):
            y = complex(fn(*args))
            for i in range(len(args)):
                for dy in (1.0, 1j):
                    d6, d5 = _cfd(fn, args, i, dy, 1e-6), _cfd(fn, args, i, dy, 1e-5)
                    if not (np.isfinite(d5) and np.isfinite(d6)):
                        return False
                    if abs(d5 - d6) > 1e-7 * max(abs(d5), abs(d6)) + 1e-9 * max(1.0, abs(y)):
                        return False
    except (ValueError, ZeroDivisionError, FloatingPointError, OverflowError, TypeError):
        return False
    return bool(np.isfinite(y))


def complex_rules() -> List[registry.Rule]:
    """Built-in rules that have a complex form and whose function accepts complex numbers."""
    return [r for r in builtin_rules() if registry.for_complex(r) is not None
            and complex_sample_points(r, 1)]


def complex_sample_points(rule: registry.Rule, limit: int = 3) -> List[Tuple[Any, ...]]:
    """Points with at least one complex argument at which to check ``rule``'s complex form."""
    nargs = len(rule.converted.params)
    cands = [(c,) for c in C_CANDIDATES + [0.7]] if nargs == 1 else list(C_PAIRS) if nargs == 2 else []

    def cplx(a) -> bool:      # a complex argument, or real ones with a complex result
        return any(isinstance(v, complex) for v in a) or isinstance(rule.fn(*a), complex)
    return [a for a in cands if usable_complex(rule.fn, a) and cplx(a)][:limit]


def complex_probe_for(fn: Callable, nargs: int, target: str) -> Callable:
    """A probe ``def probe(a0, ...): return fn(a0, ...)`` (its pullback takes a complex dy)."""
    key = (registry._key(fn), nargs, target)
    g = _CPROBES.get(key)
    if g is None:
        params = ", ".join(f"a{i}" for i in range(nargs))
        src = f"def probe({params}):\n    return fn({params})\n"
        name = f"<zyg-rulecheck-c{next(_probe_ids)}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        ns: Dict[str, Any] = {"fn": fn}
        exec(compile(src, name, "exec"), ns)
        g = _CPROBES[key] = ns["probe"]
    return g


def check_rule_complex(fn: Callable, *args: Any, target: str = "python", rtol: float = 1e-6) -> None:
    """Assert that the rule zyg uses for ``fn`` at these (partly complex) arguments matches
    finite differences: ``zyg.pullback`` of a probe, with ``dy = 1`` and, for a complex
    result, ``dy = 1j`` (together they give the whole real 2x2 Jacobian of each argument)."""
    rule = registry.lookup(fn)
    assert rule is not None, f"no rule registered for {fn!r}"
    assert registry.for_complex(rule) is not None, f"{rule!r} has no complex form"
    y = fn(*args)
    probe = complex_probe_for(fn, len(args), target)
    yv, back = zyg.pullback(probe, *args, target=target)
    assert abs(complex(yv) - complex(y)) <= 1e-14 * max(1.0, abs(y)), \
        f"{rule!r} at {args} [{target}]: value {yv!r} != {y!r}"
    atol = 1e-8 * max(1.0, abs(y))
    for dy in ((1.0, 1j) if isinstance(y, (complex, np.complexfloating)) else (1.0,)):
        g = back(dy)
        for i, a in enumerate(args):
            ref = _cfd(fn, args, i, dy, 1e-6)
            assert g[i] is not None, f"{rule!r} at {args} [{target}]: gradient {i} is None"
            assert isinstance(g[i], complex) == isinstance(a, complex), \
                f"{rule!r} at {args} [{target}]: gradient {i} is {g[i]!r} for argument {a!r}"
            assert abs(g[i] - ref) <= atol + rtol * max(abs(g[i]), abs(ref)), \
                f"{rule!r} at {args} [{target}], dy={dy}: d/d(arg {i}) rule={g[i]!r} fd={ref!r}"
