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
