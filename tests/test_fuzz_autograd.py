"""Differential fuzzing against an independent AD: zyg's gradients against autograd's.

Hypothesis builds functional programs (no in-place writes: autograd cannot differentiate
them) of ``f(a, b, M, x)`` (``a``, ``b``: length-4 float arrays, ``M``: 4x4, ``x``: a float)
over numpy functions both tools differentiate: elementwise functions, products, ``@``,
``np.dot``, ``np.outer``, sums, means, cumulative sums, slices, reversals, reshape,
transpose, ravel, concatenate, integer powers.  Two families: straight-line programs, and
loops that accumulate (``s = s + ...``, ``h = np.tanh(M @ h + ...)``, reads indexed by the
loop counter).  The same source is imported twice, once with ``import numpy as np`` (for
zyg) and once with ``import autograd.numpy as np`` (for autograd).  Every gradient
(w.r.t. a, b, M and x) of zyg on the python and cpu targets must equal autograd's to
rounding, the value the plain call's, and (python) the jvp zyg's own gradient . t.

CI: 15 derandomized programs per family, the cpu target on one of 3 (a hash of the source);
``ZYG_PROPERTY_EXAMPLES=n`` runs n random ones, ``ZYG_PROPERTY_CPU_EVERY=k`` the cpu target
on about one of k.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, event, settings, strategies as st

autograd = pytest.importorskip("autograd")

import zyg  # noqa: E402

import oracles  # noqa: E402
from oracles import REFUSED, close, copies, count, mismatch  # noqa: E402

_EXAMPLES = int(os.environ.get("ZYG_PROPERTY_EXAMPLES", "0"))
# the cpu target runs on one program of CPU_EVERY (by a hash of the source): 3 in CI, where
# the other families already compare the two targets on every program and a numba compile
# costs seconds; ZYG_PROPERTY_CPU_EVERY=1 runs every program on both
CPU_EVERY = int(os.environ.get("ZYG_PROPERTY_CPU_EVERY", "3"))
_DIR = tempfile.mkdtemp(prefix="zyg_fuzz_ag_")
_COUNT = itertools.count()
N = 4


def _settings(ci_examples: int):
    if _EXAMPLES > 0:
        return settings(max_examples=_EXAMPLES, deadline=None, derandomize=False, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=ci_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


# typed expressions: "v" a length-4 vector, "s" a scalar, "m" a 4x4 matrix
V_UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.tanh({}))", "np.log(1.0 + {0} * {0})",
           "np.sqrt(1.0 + {0} * {0})", "-{}", "({}) ** 2", "({}) ** 3", "np.cumsum({})", "({})[::-1]",
           "np.concatenate([({0})[2:], ({0})[:2]])", "np.reshape({}, (2, 2)).T.ravel()",
           "np.square({})", "np.arctan({})"]
V_BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + ({}) ** 2))"]
S_OF_V = ["np.sum({})", "np.mean({})", "np.prod(np.tanh({}))", "({})[{i}]"]
S_OF_VV = ["np.dot({}, {})", "({}) @ ({})", "np.sum(np.outer({}, {}) * M)"]
S_UNARY = ["np.sin({})", "np.tanh({})", "np.exp(np.tanh({}))", "({}) ** 2", "np.sqrt(1.0 + ({}) ** 2)"]


class Gen:
    def __init__(self, draw, loopvar=None):
        self.d = draw
        self.vecs = ["a", "b"]
        self.scal = ["x"]
        self.mats = ["M"]
        self.loopvar = loopvar

    def pick(self, xs):
        return self.d(st.sampled_from(list(xs)))

    def idx(self):
        opts = ["0", "1", "2", "3", "-1"]
        if self.loopvar:
            opts += [f"{self.loopvar} % 4", f"({self.loopvar} + 1) % 4"]
        return self.pick(opts)

    def vec(self, depth=2):
        if depth == 0 or self.d(st.integers(0, 2)) == 0:
            k = self.d(st.integers(0, 4))
            if k == 0:
                return f"{self.pick(self.mats)} @ {self.pick(self.vecs)}"
            if k == 1:
                return f"{self.pick(self.mats)}[{self.idx()}]"
            return self.pick(self.vecs)
        k = self.d(st.integers(0, 3))
        if k == 0:
            return self.pick(V_UNARY).format(self.vec(depth - 1))
        if k == 1:
            return self.pick(V_BINARY).format(self.vec(depth - 1), self.vec(depth - 1))
        if k == 2:
            return f"({self.vec(depth - 1)} * {self.scalar(depth - 1)})"
        return f"(np.tanh({self.pick(self.mats)}) @ {self.vec(depth - 1)})"

    def scalar(self, depth=2):
        if depth == 0 or self.d(st.integers(0, 2)) == 0:
            return self.pick(self.scal + ["0.5", "1.3"])
        k = self.d(st.integers(0, 3))
        if k == 0:
            return self.pick(S_OF_V).format(self.vec(depth - 1), i=self.idx())
        if k == 1:
            return self.pick(S_OF_VV).format(self.vec(depth - 1), self.vec(depth - 1))
        if k == 2:
            return self.pick(S_UNARY).format(self.scalar(depth - 1))
        return self.pick(V_BINARY).format(self.scalar(depth - 1), self.scalar(depth - 1))

    def mat(self):
        v, w = self.vec(1), self.vec(1)
        return self.pick([f"np.tanh(np.outer({v}, {w}))", f"{self.pick(self.mats)}.T * {self.scalar(1)}",
                          f"np.tanh({self.pick(self.mats)} @ {self.pick(self.mats)})",
                          f"np.reshape({v}, (4, 1)) * {self.pick(self.mats)}"])


def assignments(g: Gen, n: int, ind: str = "") -> list:
    lines = []
    for _ in range(n):
        k = g.d(st.integers(0, 4))
        if k <= 1:
            name = f"v{len(g.vecs)}"
            lines.append(f"{ind}{name} = {g.vec()}")
            g.vecs.append(name)
        elif k <= 3:
            name = f"t{len(g.scal)}"
            lines.append(f"{ind}{name} = {g.scalar()}")
            g.scal.append(name)
        else:
            name = f"Q{len(g.mats)}"
            lines.append(f"{ind}{name} = {g.mat()}")
            g.mats.append(name)
    return lines


@st.composite
def straight_line(draw):
    g = Gen(draw)
    body = assignments(g, draw(st.integers(2, 6)))
    body.append(f"return {g.scalar()} + np.sum({g.pick(g.vecs[2:] or ['a'])} * b) + "
                f"{' + '.join(g.scal[1:]) or '0.0'}")
    return "def f(a, b, M, x):\n" + "\n".join("    " + ln for ln in body) + "\n"


@st.composite
def loops(draw):
    g = Gen(draw)
    body = ["s = 0.0", "h = a"]
    body += assignments(g, draw(st.integers(0, 2)))
    g.vecs.append("h")
    body.append(f"for i in range({draw(st.integers(1, 4))}):")
    g.loopvar = "i"
    inner = []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, 3))
        if k == 0:
            inner.append(f"h = np.tanh({g.pick(g.mats)} @ h + {g.vec(1)} * {g.scalar(1)})")
        elif k == 1:
            inner.append(f"s = s + {g.scalar()}")
        elif k == 2:
            inner.append(f"s = s + h[i % 4] * {g.scalar(1)} + {g.pick(g.vecs)}[(i + 1) % 4]")
        else:
            inner.append(f"s = s + np.sum({g.vec()} * h) * x")
    if draw(st.booleans()):
        inner += ["for j in range(2):", f"    s = s + np.tanh(s * 0.1 + {g.scalar(1)}) * h[j]"]
    body += ["    " + ln for ln in inner]
    body.append(f"return s + np.sum(h * {g.pick(g.vecs)})")
    return "def f(a, b, M, x):\n" + "\n".join("    " + ln for ln in body) + "\n"


def load(src: str, numpy_module: str):
    name = f"zyg_fuzz_{os.getpid()}_{next(_COUNT)}"
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w") as fh:
        fh.write(f"import {numpy_module} as np\n\n\n" + src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod.f


@st.composite
def cases(draw, programs):
    src = draw(programs)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    args = (rng.uniform(-1, 1, N), rng.uniform(-1, 1, N), rng.uniform(-1, 1, (N, N)),
            float(rng.uniform(0.2, 1.0)))
    cpu = oracles.share(src, CPU_EVERY, "fuzz-cpu")
    return src, args, ("python", "cpu") if cpu else ("python",)


def check(family: str, case) -> None:
    src, args, targets = case
    f = load(src, "numpy")
    fa = load(src, "autograd.numpy")
    where = f"\n--- program ---\n{src}--- args {args!r}, targets {targets}"
    with np.errstate(all="raise"):
        try:
            y = float(f(*copies(args)))
            want = [autograd.grad(fa, i)(*copies(args)) for i in range(4)]
        except (FloatingPointError, ZeroDivisionError, OverflowError, ValueError):
            event("rejected: floating-point error")
            assume(False)
    if not (np.isfinite(y) and abs(y) < 1e8 and all(np.all(np.isfinite(w)) for w in want)):
        event("rejected: not finite")
        assume(False)
    scale = max(1.0, abs(y), max(float(np.max(np.abs(w))) for w in want))
    for t in targets:
        call, keep = copies(args), copies(args)
        try:
            val, grads = zyg.value_and_grad(f, (0, 1, 2, 3), target=t)(*call)
        except REFUSED as ex:
            count(family, "refused")
            count(family, f"refused: {type(ex).__name__}: {str(ex).splitlines()[0][:70]}")
            return
        oracles.check_unchanged(family, t, "value_and_grad", keep, call, where)
        if not close(val, y, 1e-10, 1e-12 * scale):
            mismatch(family, "value", f"[{t}] value {val!r}, plain call {y!r}{where}")
        for i, g, w in zip(range(4), grads, want):
            if not close(g, w, 1e-8, 1e-10 * scale):
                mismatch(family, "autograd", f"[{t}] d/d arg {i}: zyg {g!r}, autograd {w!r}{where}")
        count(family, "checked autograd")
        if t == "python":
            oracles.check_jvp(family, f, args, (0, 1, 2, 3), grads, y, t, where)
    event("checked")


def test_fuzz_straight_line():
    oracles.family_test("fuzz straight-line", cases(straight_line()),
                        lambda c: check("fuzz straight-line", c), _settings(15),
                        oracles=["autograd", "jvp", "inputs unchanged"])


def test_fuzz_loops():
    oracles.family_test("fuzz loops", cases(loops()), lambda c: check("fuzz loops", c), _settings(15),
                        oracles=["autograd", "jvp", "inputs unchanged"])


def test_fuzz_programs_are_valid_for_both():
    """Guards the fuzzer: the programs run under numpy and autograd with the same value."""
    from hypothesis import given

    @settings(max_examples=40, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(cases(st.one_of(straight_line(), loops())))
    def gen(case):
        src, args, _ = case
        with np.errstate(all="ignore"):
            y1 = load(src, "numpy")(*copies(args))
            y2 = load(src, "autograd.numpy")(*copies(args))
        assert np.ndim(y1) == 0 and (np.isnan(y1) or y1 == pytest.approx(y2, rel=1e-12)), src
    gen()
