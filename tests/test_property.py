"""Property-based tests: random small scalar programs, zyg vs finite differences.

Hypothesis builds the *source text* of a function of two floats ``x, y`` from:
expression trees over the live variables (+ - * / and bounded functions), reassignments
(of the arguments too), if/elif/else on comparisons (with and/or/not and chained
comparisons), ternaries, ``for i in range(k)`` loops, ``while`` loops whose trip count
depends on a differentiated value but that have a guaranteed bound, and break/continue.
The text is written to a real file and imported (zyg reads the source with
``inspect.getsource``).

Finite differences are unreliable next to a branch switch or where the function is
very curved, so an example is rejected (``assume``) unless central differences at two
step sizes agree closely; zyg must then agree with them to 1e-6.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import zyg

from conftest import close, fd_partial
import oracles

_DIR = tempfile.mkdtemp(prefix="zyg_prop_")
_COUNT = itertools.count()

CONSTS = ["0.5", "1.3", "-0.7", "2.0", "0.25", "-1.5"]
UNARY = ["math.sin({})", "math.cos({})", "math.tanh({})", "math.exp(math.tanh({}))",
         "math.atan({})", "math.sqrt(1.0 + ({}) ** 2)", "math.log(1.0 + ({}) ** 2)", "-({})"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + ({}) ** 2))",
          "max({}, {})", "min({}, {})"]
CMPS = ["<", ">", "<=", ">="]


@st.composite
def expressions(draw, names, depth=2):
    """A random arithmetic expression over ``names``."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()) or not names:
            return draw(st.sampled_from(CONSTS + ["x", "y"]))
        return draw(st.sampled_from(sorted(names)))
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return draw(st.sampled_from(UNARY)).format(draw(expressions(names, depth - 1)))
    if kind == 1:
        a = draw(expressions(names, depth - 1))
        b = draw(expressions(names, depth - 1))
        return draw(st.sampled_from(BINARY)).format(a, b)
    # a ternary
    c = draw(conditions(names))
    a = draw(expressions(names, depth - 1))
    b = draw(expressions(names, depth - 1))
    return f"({a} if {c} else {b})"


@st.composite
def conditions(draw, names):
    """A test: comparisons combined with and/or/not, sometimes chained."""
    pool = sorted(names | {"x", "y"})

    def atom():
        a = draw(st.sampled_from(pool))
        b = draw(st.sampled_from(pool + CONSTS))
        if draw(st.integers(0, 4)) == 0:
            c = draw(st.sampled_from(CONSTS))
            return f"{a} < {b} < {c}"
        return f"{a} {draw(st.sampled_from(CMPS))} {b}"

    k = draw(st.integers(0, 4))
    if k == 0:
        return f"{atom()} and {atom()}"
    if k == 1:
        return f"{atom()} or {atom()}"
    if k == 2:
        return f"not ({atom()})"
    return atom()


class _Gen:
    def __init__(self, draw):
        self.draw = draw
        self.n = 0

    def fresh(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def assign(self, names, ind, bounded):
        d = self.draw
        target = d(st.sampled_from(["a", "b", "x", "y"]))
        e = d(expressions(names, 2))
        if bounded:
            # inside loops, keep values bounded so that iterating cannot overflow
            e = d(st.sampled_from(["math.tanh({})", "math.sin({})", "0.5 * ({})"])).format(e)
        op = d(st.sampled_from(["=", "=", "+=", "*="])) if not bounded else "="
        return [" " * ind + f"{target} {op} {e}"]

    def block(self, names, ind, depth, in_loop):
        d = self.draw
        lines = []
        for _ in range(d(st.integers(1, 3))):
            lines += self.stmt(names, ind, depth, in_loop)
        return lines

    def stmt(self, names, ind, depth, in_loop):
        d = self.draw
        sp = " " * ind
        choices = ["assign", "assign"]
        if depth > 0:
            choices += ["if", "for", "while"]
        if in_loop:
            choices += ["break", "continue"]
        kind = d(st.sampled_from(choices))
        if kind == "assign":
            return self.assign(names, ind, in_loop)
        if kind in ("break", "continue"):
            return [sp + f"if {d(conditions(names))}:", sp + f"    {kind}"]
        if kind == "if":
            lines = [sp + f"if {d(conditions(names))}:"]
            lines += self.block(names, ind + 4, depth - 1, in_loop)
            for _ in range(d(st.integers(0, 2))):
                lines.append(sp + f"elif {d(conditions(names))}:")
                lines += self.block(names, ind + 4, depth - 1, in_loop)
            if d(st.booleans()):
                lines.append(sp + "else:")
                lines += self.block(names, ind + 4, depth - 1, in_loop)
            return lines
        if kind == "for":
            i = self.fresh("i")
            rng = d(st.sampled_from(["range({})", "range(1, {} + 1)", "range({}, 0, -1)"]))
            lines = [sp + f"for {i} in {rng.format(d(st.integers(0, 3)))}:"]
            lines += self.block(names, ind + 4, depth - 1, True)
            return lines
        # while with a counter bound; the trip count also depends on differentiated values
        c = self.fresh("c")
        bound = d(st.integers(1, 4))
        lines = [sp + f"{c} = 0",
                 sp + f"while {c} < {bound} and ({d(conditions(names))}):",
                 sp + f"    {c} += 1"]
        lines += self.block(names, ind + 4, depth - 1, True)
        return lines


@st.composite
def programs(draw):
    g = _Gen(draw)
    names = {"x", "y"}
    lines = ["import math", "", "", "def f(x, y):"]
    lines.append(f"    a = {draw(expressions(names, 2))}")
    names.add("a")
    lines.append(f"    b = {draw(expressions(names, 2))}")
    names.add("b")
    lines += g.block(names, 4, 2, False)
    if draw(st.integers(0, 3)) == 0:
        lines += [f"    if {draw(conditions(names))}:",
                  f"        return {draw(expressions(names, 2))}"]
    lines.append(f"    return {draw(expressions(names, 2))}")
    return "\n".join(lines) + "\n"


def load(src: str):
    """Write ``src`` to a fresh file and import it, so that inspect.getsource works."""
    name = f"zyg_prop_{os.getpid()}_{next(_COUNT)}"
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.f


def reliable_fd(f, args, i):
    """Central difference at h=1e-6, or None where finite differences are meaningless:
    it disagrees with h=1e-5 (a branch switch or strong curvature nearby), or f(x) is
    not the mean of f(x-h) and f(x+h) (the point itself is on a branch switch)."""
    try:
        y = f(*args)
        d6 = fd_partial(f, args, i, 1e-6)
        d5 = fd_partial(f, args, i, 1e-5)
        step = 1e-6 * max(1.0, abs(args[i]))
        up, dn = list(args), list(args)
        up[i] += step
        dn[i] -= step
        mid = 0.5 * (f(*up) + f(*dn))
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    if not all(math.isfinite(v) for v in (y, d5, d6, mid)):
        return None
    scale = max(1.0, abs(y))
    if abs(y) > 1e6 or not close(d5, d6, 1e-7, 1e-8 * scale) or abs(mid - y) > 1e-9 * scale:
        return None
    return d6


_coord = st.one_of(st.floats(-2.0, -0.01), st.floats(0.01, 2.0))


def _generic(p):
    """No exact ties between the arguments or with a constant of the generator: at a tie,
    min/max (and comparisons) sit on a kink that finite differences may not see
    (min(x, max(x, y)) is smooth in x at x == y, but its subgradient there is not 1)."""
    x, y = p
    special = [float(c) for c in CONSTS] + [0.0]
    return abs(x - y) > 1e-3 and abs(x + y) > 1e-3 and all(
        abs(v - c) > 1e-3 and abs(v + c) > 1e-3 for v in p for c in special)


points = st.tuples(_coord, _coord).filter(_generic)


def check(src, args, targets):
    f = load(src)
    fds = [reliable_fd(f, args, i) for i in (0, 1)]
    assume(all(v is not None for v in fds))
    y = f(*args)
    for t in targets:
        vg = zyg.value_and_grad(f, (0, 1), target=t)
        v, g = vg(*args)
        assert close(v, y, 1e-12, 1e-300), f"[{t}] value {v!r} != {y!r} for\n{src}at {args}"
        for i in (0, 1):
            assert close(g[i], fds[i], 1e-6, 1e-6 * max(1.0, abs(y))), (
                f"[{t}] d/d{'xy'[i]} zyg={g[i]!r} fd={fds[i]!r} at {args} for\n{src}")
        # forward against reverse, second order against first (tests/oracles.py)
        oracles.check_more("scalar programs", f, args, (0, 1), g, y, t, vg, src,
                           f" at {args} for\n{src}")


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(programs(), points)
def test_random_programs_python(src, args):
    check(src, args, ("python",))


@settings(max_examples=6, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.filter_too_much])
@given(programs(), points)
def test_random_programs_cpu(src, args):
    check(src, args, ("python", "cpu"))


def test_generator_makes_valid_python():
    """The generator's output is executable Python (guards the test itself)."""
    src = ("import math\n\n\ndef f(x, y):\n    a = x\n    b = y\n"
           "    c1 = 0\n    while c1 < 3 and a < 1.5:\n        c1 += 1\n        a = math.tanh(a * 2.0)\n"
           "    return a * b\n")
    f = load(src)
    assert f(0.3, 2.0) == pytest.approx(math.tanh(math.tanh(math.tanh(0.6) * 2) * 2) * 2.0)
    g = zyg.grad(f, (0, 1), target="python")(0.3, 2.0)
    assert g[0] == pytest.approx(fd_partial(f, (0.3, 2.0), 0), rel=1e-6)
