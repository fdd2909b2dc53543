"""Property-based tests that compose what users write (issue 12).

The other generators (test_property*.py) build one function of its arguments.  Users also
bind data to a loss through closures and lambdas, read module globals that they change
between calls, redefine helpers in a notebook, take views of the arrays they differentiate
inside loops, checkpoint blocks that mutate, and pass one array twice.  Each family below
builds a *scenario*: the source of a module (written to a real file and imported, so zyg can
read it), and steps run against that module in order:

* ``("exec", code)``: run ``code`` in the module's namespace (make a closure, write into a
  global array, rebind a global name);
* ``("define", code)``: the same, from a new file (a notebook cell redefining a helper: a new
  function object bound to the same global name, whose source zyg can read);
* ``("call", fn_expr, fresh)``: evaluate ``fn_expr`` in the module and check zyg's gradient
  of it at the example's arguments, on the python target and (the first example of a family,
  then one in ``ZYG_PROPERTY_CPU_EVERY``, 2 by default) the cpu target: against central
  finite differences of the plain Python call at that moment (Python semantics: closures
  and globals are read at call time, a redefined helper is used from the next call on),
  the value against the plain call, the two targets against each other (same numbers to
  rounding, or the same error type), and the caller's arrays unchanged.  ``fresh`` makes a
  new ``zyg.value_and_grad`` object; otherwise the one made at an earlier call of the same
  function object is reused.

One test function per family, so a failure names the family.  In CI the examples are few and
derandomized; ``ZYG_PROPERTY_EXAMPLES=<n>`` runs ``n`` random examples per family.
``test_cross_process`` also runs a scenario's last call in a fresh process sharing
ZYG_CACHE_DIR after the module file was edited (a stale disk cache shows there).
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from hypothesis import HealthCheck, Phase, assume, event, given, settings, strategies as st

import zyg
from zyg.check import _Arg, _fd_column
from zyg.errors import ZygError

from test_property import UNARY, BINARY
import oracles

_EXAMPLES = int(os.environ.get("ZYG_PROPERTY_EXAMPLES", "0"))
# generated programs run on both targets, which are compared (issue 12, acceptance 4): the
# first of each family and then one in CPU_EVERY (2 in CI: the cpu target costs a numba
# compile per call, seconds, the suite's time).  ZYG_PROPERTY_CPU_EVERY=1 runs every example
# on cpu too; scripts/long_property_run.py runs long.
CPU_EVERY = int(os.environ.get("ZYG_PROPERTY_CPU_EVERY", "2"))


def _settings(ci_examples: int):
    """CI: few derandomized examples, no shrinking (each shrink step compiles again);
    ZYG_PROPERTY_EXAMPLES=n: n random examples per family, shrunk to a minimal failure."""
    if _EXAMPLES > 0:
        return settings(max_examples=_EXAMPLES, deadline=None, derandomize=False, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=ci_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.generate])

_DIR = tempfile.mkdtemp(prefix="zyg_prop_user_")
_COUNT = itertools.count()
TARGETS = ("python", "cpu")
HEADER = "import math\nimport numpy as np\nimport zyg\n\n\n"
BIN = [b for b in BINARY if not b.startswith(("max", "min"))]     # no kinks
N = 4                                                              # array length


# -- expressions ------------------------------------------------------------------------------

def sexpr(d, atoms: Sequence[str], depth: int = 2) -> str:
    """A smooth scalar expression over ``atoms`` (strings of scalar-valued Python)."""
    if depth == 0 or d(st.integers(0, 2)) == 0:
        return d(st.sampled_from(list(atoms) + ["0.5", "1.3", "-0.7"]))
    if d(st.booleans()):
        return d(st.sampled_from(UNARY)).format(sexpr(d, atoms, depth - 1))
    return d(st.sampled_from(BIN)).format(sexpr(d, atoms, depth - 1), sexpr(d, atoms, depth - 1))


VUNARY = ["np.sin({})", "np.tanh({})", "np.exp(np.tanh({}))", "np.cos({})", "-({})"]
VBINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + ({}) ** 2))"]


def vexpr(d, arrays: Sequence[str], scalars: Sequence[str], depth: int = 2) -> str:
    """A smooth elementwise array expression (at least one array operand)."""
    if depth == 0 or d(st.integers(0, 2)) == 0:
        return d(st.sampled_from(list(arrays)))
    if d(st.booleans()):
        return d(st.sampled_from(VUNARY)).format(vexpr(d, arrays, scalars, depth - 1))
    a = vexpr(d, arrays, scalars, depth - 1)
    b = vexpr(d, arrays, scalars, depth - 1) if d(st.booleans()) else \
        d(st.sampled_from(list(scalars) + ["0.5", "1.3"]))
    if d(st.booleans()):
        a, b = b, a
    return d(st.sampled_from(VBINARY)).format(a, b)


def lit(d, n: int = N, lo: float = -1.0, hi: float = 1.0) -> str:
    """An array literal of n values drawn from [lo, hi] (rounded, so sources are short)."""
    vals = [nonzero(d, lo, hi) for _ in range(n)]
    return "np.array([" + ", ".join(repr(v) for v in vals) + "])"


def nonzero(d, lo: float, hi: float) -> float:
    """A value in [lo, hi] at least 0.1 away from 0 (no test at zeros only)."""
    v = round(d(st.floats(0.1, max(abs(lo), abs(hi)))), 3)
    v = -v if lo < 0 and (hi <= 0 or d(st.booleans())) else v
    return min(max(v, lo), hi)


def num(d, lo: float = -1.5, hi: float = 1.5) -> str:
    return repr(nonzero(d, lo, hi))


# -- scenarios --------------------------------------------------------------------------------

class Scenario:
    """A module source, the steps run against it, the arguments and argnums of every call.

    ``expect``: "values" (the gradient must be right), or "values-or-error" (a ZygError
    with a message is also accepted: write-aliased arguments).  ``aliased``: the calls pass
    ``args[alias[1]]`` as a view of ``args[alias[0]]`` (see family_alias)."""

    def __init__(self, src: str, steps: List[tuple], args: tuple, argnums: Tuple[int, ...],
                 expect: str = "values", alias=None):
        self.src, self.steps, self.args, self.argnums = src, steps, args, argnums
        self.expect, self.alias = expect, alias
        self.targets = TARGETS

    def __repr__(self) -> str:
        lines = ["", "--- module ---", self.src, "--- steps ---"]
        for s in self.steps:
            lines.append(f"{s[0]}: {s[1]}" + (f" (fresh={s[2]})" if s[0] == "call" else ""))
        lines.append(f"--- args: {self.args!r}, argnums {self.argnums}, alias {self.alias}, "
                     f"targets {self.targets}")
        return "\n".join(lines)


def write_module(src: str, path: Optional[str] = None):
    if path is None:
        path = os.path.join(_DIR, f"zyg_user_{os.getpid()}_{next(_COUNT)}.py")
    with open(path, "w") as fh:
        fh.write(HEADER + src)
    name = os.path.basename(path)[:-3] + f"_{next(_COUNT)}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def define(mod, code: str) -> None:
    """Run ``code`` in ``mod`` from a new file (a notebook cell), so its source is readable."""
    path = os.path.join(_DIR, f"cell_{os.getpid()}_{next(_COUNT)}.py")
    with open(path, "w") as fh:
        fh.write(code)
    exec(compile(code, path, "exec"), mod.__dict__)


def copies(args) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def call_args(sc: Scenario, args) -> list:
    """The arguments of one call: copies, with the aliased pair sharing memory."""
    a = copies(args)
    if sc.alias is not None:
        i, j, kind = sc.alias
        base = a[i]
        if kind == "same":
            a[j] = base
        else:                      # overlapping views of one buffer of length N + 1
            buf = np.concatenate([base, a[j][-1:]])
            a[i], a[j] = buf[:N], buf[1:]
    return a


def reference(fn, sc: Scenario, args) -> Tuple[float, list]:
    """f's value and the finite-difference gradient (Richardson, two steps must agree:
    no kink or strong curvature nearby); ``assume(False)`` where unreliable."""
    with np.errstate(all="raise"):
        try:
            y = float(fn(*call_args(sc, args)))
            if not np.isfinite(y) or abs(y) > 1e6:
                event("rejected: value not finite or huge")
                assume(False)
            grads = []
            for i in sc.argnums:
                arg = _Arg(i, args[i])
                if not arg.diff:
                    grads.append(None)
                    continue
                g = np.empty(arg.size)
                for c, k in enumerate(arg.elements()):
                    def f(*a):
                        # independent copies: the partial derivative w.r.t. one argument
                        # (aliased calls: see check_aliased_sum)
                        return fn(*copies(a))
                    col, err = _fd_column(f, lambda v: np.array([float(v)]), args, arg, k, 1e-4)
                    if not np.all(err <= 1e-4 * max(1.0, abs(float(col[0])))):
                        event("rejected: finite differences unreliable")
                        assume(False)
                    g[c] = col[0]
                grads.append(g.reshape(arg.shape) if arg.kind == "array" else float(g[0]))
        except (FloatingPointError, ZeroDivisionError, OverflowError, ValueError):
            event("rejected: floating-point error in the plain call")
            assume(False)
    return y, grads


def close(a, b, rtol, atol) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= atol + rtol * np.maximum(np.abs(a), np.abs(b))))


def check_call(sc: Scenario, fn, grads: Dict, fresh: bool, where: str) -> None:
    y, want = reference(fn, sc, sc.args)
    scale = max(1.0, abs(y))
    got: Dict[str, Any] = {}
    for t in sc.targets:
        key = (id(fn), t)
        if fresh or key not in grads:
            grads[key] = (fn, zyg.value_and_grad(fn, sc.argnums, target=t))
        g = grads[key][1]
        a = call_args(sc, sc.args)
        keep = call_args(sc, sc.args)
        try:
            got[t] = g(*a)
        except Exception as ex:       # noqa: BLE001: every exception is compared and reported
            got[t] = ex
            continue
        for i, (x, x0) in enumerate(zip(a, keep)):
            if isinstance(x, np.ndarray):
                assert np.array_equal(x, x0), f"[{t}] {where}: argument {i} changed by the call{sc!r}"
    py, cpu = got["python"], got.get("cpu", got["python"])
    if isinstance(py, Exception) or isinstance(cpu, Exception):
        assert type(py) is type(cpu), (f"{where}: the targets disagree: python gave {py!r}, cpu gave "
                                       f"{cpu!r}{sc!r}")
        if sc.expect == "values-or-error" and isinstance(py, ZygError):
            assert str(py).strip(), f"{where}: an error without a message{sc!r}"
            event(f"zyg error: {type(py).__name__}")
            return
        raise AssertionError(f"{where}: zyg raised {type(py).__name__}: {py}{sc!r}") from py
    for t in sc.targets:
        v, gs = got[t]
        assert close(v, y, 1e-10, 1e-12 * scale), f"[{t}] {where}: value {v!r}, plain call {y!r}{sc!r}"
        for i, g, w in zip(sc.argnums, gs, want):
            if w is None:
                assert g is None, f"[{t}] {where}: d/d arg {i} should be None, got {g!r}{sc!r}"
                continue
            if sc.alias is not None and sc.expect == "values-or-error":
                continue               # compared as a sum below
            assert close(g, w, 1e-6, 1e-6 * scale), (f"[{t}] {where}: d/d arg {i}: zyg {g!r}, "
                                                     f"finite differences {w!r}{sc!r}")
        if sc.alias is not None and sc.expect == "values-or-error":
            check_aliased_sum(sc, fn, gs, t, where)
    for i, gp, gc in zip(sc.argnums, py[1], cpu[1]):
        if gp is not None:
            assert close(gp, gc, 1e-9, 1e-12 * scale), (f"{where}: targets disagree on d/d arg {i}: "
                                                        f"python {gp!r}, cpu {gc!r}{sc!r}")
    if sc.alias is None:
        # forward against reverse, second order against first (tests/oracles.py)
        for t in sc.targets:
            oracles.check_more("user scenarios", fn, sc.args, sc.argnums, got[t][1], y, t,
                               grads[(id(fn), t)][1], sc.src + where, f" {where}{sc!r}")
    event("checked")


def check_aliased_sum(sc: Scenario, fn, gs, t: str, where: str) -> None:
    """Write-aliased arguments with a gradient instead of an error: it must be the
    derivative of the aliased program (the shared buffer perturbed)."""
    i, j, kind = sc.alias
    base = sc.args[i].copy() if kind == "same" else np.concatenate([sc.args[i], sc.args[j][-1:]])

    def g_of(buf, *rest):
        a = list(rest)
        a.insert(i, None)
        a.insert(j, None)
        if kind == "same":
            a[i] = a[j] = buf
        else:
            a[i], a[j] = buf[:N], buf[1:]
        return fn(*a)
    others = [a for k, a in enumerate(sc.args) if k not in (i, j)]
    col = np.empty(base.size)
    for k in range(base.size):
        c, _ = _fd_column(g_of, lambda v: np.array([float(v)]), (base, *others),
                          _Arg(0, base), (k,), 1e-4)
        col[k] = c[0]
    gi, gj = gs[sc.argnums.index(i)], gs[sc.argnums.index(j)]
    total = np.zeros(base.size)
    if kind == "same":
        total += gi + gj
    else:
        total[:N] += gi
        total[1:] += gj
    assert close(total, col, 1e-6, 1e-6), (f"[{t}] {where}: write-aliased arguments: zyg gives "
                                           f"{total!r} for the shared buffer, the aliased program's "
                                           f"derivative is {col!r} (raise a ZygError or compute it)"
                                           f"{sc!r}")


def run(sc: Scenario):
    """Import the module and run the steps; return the module and its path."""
    mod, path = write_module(sc.src)
    grads: Dict = {}
    for n, step in enumerate(sc.steps):
        if step[0] == "exec":
            exec(step[1], mod.__dict__)
        elif step[0] == "define":
            define(mod, step[1])
        else:
            fn = eval(step[1], mod.__dict__)
            check_call(sc, fn, grads, step[2], f"step {n} (call {step[1]})")
    return mod, path


@st.composite
def with_targets(draw, scenarios, family):
    """A scenario that runs on the cpu target too: the first of each family, then about one
    example of CPU_EVERY (the draw shrinks towards the cpu target)."""
    sc = draw(scenarios)
    first = family not in _CPU_FAMILIES
    _CPU_FAMILIES.add(family)
    sc.targets = TARGETS if first or draw(st.integers(0, CPU_EVERY - 1)) == 0 else ("python",)
    return sc


_CPU_FAMILIES: set = set()


def std_args(d):
    w = np.array([nonzero(d, -1.2, 1.2) for _ in range(N)])
    return (w, nonzero(d, 0.3, 1.5))


# -- family: closures and factories capturing arrays and scalars --------------------------------

@st.composite
def closures(draw):
    atoms = ["w[i]", "D[i]", "k", "x"]
    shape = draw(st.sampled_from(["loop", "vector", "nested", "computed"]))
    if shape == "loop":
        body = ["    def loss(w, x):", "        s = 0.0",
                "        for i in range(D.shape[0]):",
                f"            s = s + {sexpr(draw, atoms)} * w[i % w.shape[0]]",
                f"        return s * {sexpr(draw, ['k', 'x'], 1)}", "    return loss"]
        src = "def make_loss(D, k):\n" + "\n".join(body) + "\n"
        make = "make_loss({}, {})"
    elif shape == "vector":
        body = ["    def loss(w, x):",
                f"        return np.sum({vexpr(draw, ['w', 'D'], ['k', 'x'])} * w) + k * x",
                "    return loss"]
        src = "def make_loss(D, k):\n" + "\n".join(body) + "\n"
        make = "make_loss({}, {})"
    elif shape == "nested":
        src = ("def outer(D):\n    E = D * 2.0\n    def mid(k):\n        def loss(w, x):\n"
               f"            return np.sum({vexpr(draw, ['w', 'D', 'E'], ['k', 'x'])} * w)\n"
               "        return loss\n    return mid\n")
        make = "outer({})({})"
    else:
        src = ("def make_loss(D, k):\n    E = np.tanh(D) * k\n    def loss(w, x):\n"
               "        s = 0.0\n        for i in range(w.shape[0]):\n"
               f"            s = s + {sexpr(draw, ['w[i]', 'E[i]', 'x', 'k'])}\n"
               "        return s\n    return loss\n")
        make = "make_loss({}, {})"
    steps = [("exec", f"D1 = {lit(draw)}\nD2 = {lit(draw)}"),
             ("exec", "L1 = " + make.format("D1", num(draw))), ("call", "L1", False),
             ("exec", "L2 = " + make.format("D2", num(draw))), ("call", "L2", draw(st.booleans()))]
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.sampled_from(["again", "mutate", "rebuild"]))
        if k == "again":
            steps.append(("call", draw(st.sampled_from(["L1", "L2"])), draw(st.booleans())))
        elif k == "mutate":         # the closure sees the array's current contents
            steps += [("exec", f"D1[{draw(st.integers(0, N - 1))}] = {num(draw)}"),
                      ("call", "L1", draw(st.booleans()))]
        else:                       # a third closure from the same factory
            steps += [("exec", "L3 = " + make.format(lit(draw), num(draw))), ("call", "L3", False)]
    return Scenario(src, steps, std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(closures(), "closures"))
def test_closures(sc):
    run(sc)


# -- family: lambdas over data arrays ----------------------------------------------------------

@st.composite
def lambdas(draw):
    v = vexpr(draw, ["w", "D"], ["x"])
    kind = draw(st.sampled_from(["factory", "module", "default"]))
    if kind == "factory":
        src = f"def make(D):\n    return lambda w, x: np.sum({v} * w) * x\n"
        steps = [("exec", f"L1 = make({lit(draw)})"), ("call", "L1", False),
                 ("exec", f"L2 = make({lit(draw)})"), ("call", "L2", False)]
    elif kind == "module":
        # a module-level lambda over a module-level array, rebound between calls
        src = f"D = {lit(draw)}\nloss = lambda w, x: np.sum({v} * w) * x\n"
        steps = [("call", "loss", False), ("exec", f"D = {lit(draw)}"),
                 ("call", "loss", draw(st.booleans()))]
    else:
        # data bound through a default argument of a lambda made in a function
        src = f"def make(data):\n    return lambda w, x, D=data: np.sum({v} * w) + x\n"
        steps = [("exec", f"L1 = make({lit(draw)})"), ("call", "L1", False),
                 ("exec", f"L2 = make({lit(draw)})"), ("call", "L2", False)]
    if draw(st.booleans()):
        steps.append(("call", steps[1][1] if kind != "module" else "loss", draw(st.booleans())))
    return Scenario(src, steps, std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(lambdas(), "lambdas"))
def test_lambdas(sc):
    run(sc)


# -- family: module globals read, mutated and rebound between calls -----------------------------

@st.composite
def module_globals(draw):
    lines = [f"G = {lit(draw)}", f"c = {num(draw)}", f"M = np.array([{lit(draw)}, {lit(draw)}])", ""]
    body = ["s = 0.0"]
    used = draw(st.lists(st.sampled_from(["loop", "vector", "matmul", "copy", "shape"]),
                         min_size=1, max_size=3, unique=True))
    for u in used:
        if u == "loop":
            body += ["for i in range(w.shape[0]):",
                     f"    s = s + {sexpr(draw, ['w[i]', 'G[i]', 'c', 'x'])}"]
        elif u == "vector":
            body.append(f"s = s + np.sum({vexpr(draw, ['w', 'G'], ['c', 'x'])} * w)")
        elif u == "matmul":
            body.append("s = s + np.sum((M @ w) ** 2) * c")
        elif u == "copy":
            body += ["H = G.copy()", "H[0] = H[0] * x", "s = s + np.sum(H * w)"]
        else:
            body += ["for j in range(G.shape[0]):", "    s = s + G[j] * w[j] * c"]
    body.append("return s")
    src = "\n".join(lines) + "\n\ndef f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    steps = [("call", "f", False)]
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.sampled_from(["G[]", "G=", "c=", "M[]", "M="]))
        code = {"G[]": f"G[{draw(st.integers(0, N - 1))}] = {num(draw)}",
                "G=": f"G = {lit(draw)}", "c=": f"c = {num(draw)}",
                "M[]": f"M[1, {draw(st.integers(0, N - 1))}] = {num(draw)}",
                "M=": f"M = np.array([{lit(draw)}, {lit(draw)}])"}[k]
        steps += [("exec", code), ("call", "f", draw(st.booleans()))]
    return Scenario(src, steps, std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(module_globals(), "module_globals"))
def test_module_globals(sc):
    run(sc)


# -- family: helpers redefined between calls (notebook style) -----------------------------------

@st.composite
def redefined(draw):
    two = draw(st.booleans())
    helper = f"def helper(t, u):\n    return {sexpr(draw, ['t', 'u'])}\n"
    src = helper
    if two:
        src += "\n\ndef mid(t, u):\n    return helper(t, u) * 0.5 + t\n"
    call = "mid" if two else "helper"
    src += ("\n\ndef model(w, x):\n    s = 0.0\n    for i in range(w.shape[0]):\n"
            f"        s = s + {call}(w[i], x) * {sexpr(draw, ['w[i]', 'x'], 1)}\n    return s\n")
    steps = [("call", "model", False)]
    for _ in range(draw(st.integers(1, 2))):
        steps += [("define", f"def helper(t, u):\n    return {sexpr(draw, ['t', 'u'])}\n"),
                  ("call", "model", draw(st.booleans()))]
    if draw(st.booleans()):          # back to the first definition
        steps += [("define", helper), ("call", "model", False)]
    return Scenario(src, steps, std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(redefined(), "redefined"))
def test_redefined_helpers(sc):
    run(sc)


# -- family: views of differentiated arrays inside loops ------------------------------------------

R = 3


@st.composite
def views(draw):
    """f(M, x) with M of shape (R, N): rows, slices, columns and transposes of M (read) and
    of a copy S (read and written) in loops; and the layered pattern of issue 12 (rows of a
    parameter matrix read in an inner loop that updates a state vector)."""
    if draw(st.integers(0, 3)) == 0:
        act = draw(st.sampled_from(["math.tanh({})", "1.0 / (1.0 + math.exp(-({})))"]))
        src = ("def f(M, x):\n    h = np.empty(M.shape[1])\n    for j in range(M.shape[1]):\n"
               "        h[j] = x * (j + 1) * 0.3\n"
               f"    for ly in range({draw(st.integers(1, 2))}):\n"
               "        W = M[ly]\n        B = M[ly + 1]\n        for j in range(M.shape[1]):\n"
               f"            h[j] = {act.format('h[j] * W[j] + B[j]')}\n"
               f"    return h[{draw(st.integers(0, N - 1))}] + {draw(st.sampled_from(['0.0', 'np.sum(h * h)']))}\n")
        args = (np.array([[nonzero(draw, -1.0, 1.0) for _ in range(N)] for _ in range(R)]),
                nonzero(draw, 0.3, 1.5))
        return Scenario(src, [("call", "f", False)], args, (0, 1))
    body = ["S = M.copy()", "s = 0.0"]
    for _ in range(draw(st.integers(1, 3))):
        view = draw(st.sampled_from([
            ("M[k]", N, False), ("S[k]", N, True), ("M[k, 1:3]", 2, False), ("S[k, 1:]", N - 1, True),
            ("M.T[k]", R, False), ("M[:, k]", R, False), ("S[:, k]", R, True), ("S.T[k]", R, True),
            ("S[k][::-1]", N, True), ("M[k:k + 2]", 2 * N, False)]))
        expr, length, writable = view
        flat2d = expr == "M[k:k + 2]"
        bound = N if expr.startswith(("M.T", "M[:", "S[:", "S.T")) else R
        if expr == "M[k:k + 2]":
            bound = R - 1
        body.append(f"for k in range({bound}):")
        body.append(f"    v = {expr}")
        elem = "v[j // 4, j % 4]" if flat2d else "v[j]"
        n = length
        body.append(f"    for j in range({n}):")
        if writable and draw(st.booleans()):
            body.append(f"        v[j] = v[j] * {sexpr(draw, ['x'], 1)} + {sexpr(draw, [elem, 'x', 's'], 1)}")
        else:
            body.append(f"        s = s + {sexpr(draw, [elem, 'x'])}")
    body.append(f"return s + np.sum(S * S) * {num(draw, 0.1, 1.0)}")
    src = "def f(M, x):\n" + "\n".join("    " + b for b in body) + "\n"
    args = (np.array([[nonzero(draw, -1.0, 1.0) for _ in range(N)] for _ in range(R)]),
            nonzero(draw, 0.3, 1.5))
    return Scenario(src, [("call", "f", False)], args, (0, 1))


@_settings(15)
@given(with_targets(views(), "views"))
def test_views_in_loops(sc):
    run(sc)


# -- family: local arrays that become active only through a later write; reads before writes ------

@st.composite
def late_active(draw):
    alloc = draw(st.sampled_from(["np.zeros(w.shape[0])", "np.ones(w.shape[0])", "np.empty(w.shape[0])"]))
    body = [f"z = {alloc}"]
    if alloc.startswith("np.empty"):
        body += ["for i in range(w.shape[0]):", "    z[i] = 0.25 * i"]
    body.append("s = np.sum(z * w) * 0.5")             # read while z is not active yet
    idx = draw(st.sampled_from(["i", "(i + 1) % 4", "3 - i"]))
    body += ["for i in range(w.shape[0]):",
             f"    s = s + z[{draw(st.sampled_from(['i', '(i + 1) % 4', '3 - i']))}] * "
             f"{sexpr(draw, ['w[i]', 'x'], 1)}",
             f"    z[{idx}] = {sexpr(draw, ['w[i]', 'x', 'z[i]'])}"]
    if draw(st.booleans()):
        body += ["t = np.zeros(w.shape[0])", "u = t", f"t[{draw(st.integers(0, N - 1))}] = x * w[1]",
                 "s = s + np.sum(u * z)"]       # activity reaches an alias through the write
    body.append(f"return s + np.sum({vexpr(draw, ['z', 'w'], ['x'], 1)} * z)")
    src = "def f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    return Scenario(src, [("call", "f", False)], std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(late_active(), "late_active"))
def test_late_active_locals(sc):
    run(sc)


@st.composite
def loop_exits(draw):
    """Arrays and numbers carried by a loop that ``break`` or ``return`` leaves at a drawn
    iteration (or never), possibly inside an outer loop: every iteration before the exit
    keeps its share of the gradient (an array's cotangent was once zeroed after the
    inlined latch adjoint added into it: tests/test_loop_exits.py)."""
    stop = draw(st.integers(0, N))
    nested = draw(st.booleans())
    ind = "    " if nested else ""
    body = ["h = w * 0.5", "s = x"]
    if nested:
        body.append("for j in range(2):")
    body.append(f"{ind}for i in range({N}):")
    body.append(f"{ind}    if i >= {'j + ' if nested and draw(st.booleans()) else ''}{stop}:")
    if draw(st.booleans()):
        body.append(f"{ind}        break")
    else:
        body.append(f"{ind}        return np.sum(h * {vexpr(draw, ['h', 'w'], ['x'], 1)}) + s")
    body.append(f"{ind}    h = {vexpr(draw, ['h', 'w'], ['x', 'w[i]', 's'])}")
    if draw(st.booleans()):
        body.append(f"{ind}    s = s + {sexpr(draw, ['w[i]', 'x', 'h[i]'], 1)}")
    body.append(f"return np.sum(h * {vexpr(draw, ['h', 'w'], ['x'], 1)}) + s")
    src = "def f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    return Scenario(src, [("call", "f", False)], std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(loop_exits(), "loop_exits"))
def test_loop_exits(sc):
    run(sc)


RECURSIVE_HELPERS = """
def rpow(v, k):
    if k == 0:
        return 1.0
    return v * rpow(v, k - 1)


def rsum(v, k):
    if k == 0:
        return v
    return math.sin(v) + 0.5 * rsum(v * 0.9, k - 1)


def blk(v):
    return math.exp(0.3 * v) * math.cos(v)


"""


@st.composite
def recursion_in_loops(draw):
    """Recursive calls and ``zyg.checkpoint`` inside loops, their results summed (or
    scaled, or subtracted) into an accumulator: their pullbacks are records of the run,
    taken newest first, so the loop's reverse must run backwards (it once ran forwards and
    took another iteration's pullback: tests/test_loop_order.py)."""
    nested = draw(st.booleans())
    ind = "    " if nested else ""
    body = ["s = x"]
    if nested:
        body.append("for j in range(2):")
    body.append(f"{ind}for i in range({N}):")
    atoms = ["w[i]", "x"] + (["w[j]"] if nested else [])
    for _ in range(draw(st.integers(1, 2))):
        # a different argument in each iteration (drawn arrays are often constant)
        e = f"{sexpr(draw, atoms, 1)} + 0.13 * i"
        # depths whose inner pullback depends on the value (the first level is inlined)
        call = draw(st.sampled_from([f"rpow({e}, {draw(st.integers(3, 4))})",
                                     f"rsum({e}, {draw(st.integers(2, 3))})",
                                     f"zyg.checkpoint(blk, {e})"]))
        form = draw(st.sampled_from(["s = s + {c}", "s += {c}", "s -= {c}", "s = s - {c}",
                                     "s += {c} * {k}"]))
        body.append(f"{ind}    " + form.format(c=call, k=sexpr(draw, atoms, 1)))
    body.append("return s")
    src = RECURSIVE_HELPERS + "def f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    return Scenario(src, [("call", "f", False)], std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(recursion_in_loops(), "recursion_in_loops"))
def test_recursion_in_loops(sc):
    run(sc)


@st.composite
def reads_before_writes(draw):
    """Values read from an array (the argument itself, a copy, a view) and the array then
    overwritten, in loops: the read value must be the one before the write."""
    target = draw(st.sampled_from(["w", "c", "v"]))
    body = ["c = w.copy()", "v = c[1:]", "s = 0.0"]
    n = {"w": N, "c": N, "v": N - 1}[target]
    body.append(f"for r in range({draw(st.integers(1, 2))}):")
    body.append(f"    for i in range({n}):")
    body.append(f"        t = {target}[i]")
    body.append(f"        u = {target}[({draw(st.sampled_from(['i + 1', 'i + 2', 'i']))}) % {n}]")
    body.append(f"        {target}[i] = {sexpr(draw, ['t', 'u', 'x'])}")
    body.append(f"        s = s + t * {sexpr(draw, ['u', 'x', target + '[i]'], 1)}")
    body.append(f"return s + np.sum({target} * {draw(st.sampled_from(['w', 'c']))})")
    src = "def f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    return Scenario(src, [("call", "f", False)], std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(reads_before_writes(), "reads_before_writes"))
def test_reads_before_writes(sc):
    run(sc)


# -- family: zyg.checkpoint around blocks that mutate ---------------------------------------------

@st.composite
def checkpoints(draw):
    muts = []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.sampled_from(["elem", "inplace", "loop"]))
        if k == "elem":
            j = draw(st.integers(0, N - 1))
            muts.append(f"v[{j}] = {sexpr(draw, [f'v[{j}]', 'k'], 1)}")
        elif k == "inplace":
            muts.append(draw(st.sampled_from(["v *= k", "v += 0.5 * k", "v -= np.tanh(v) * 0.3"])))
        else:
            muts += ["for i in range(v.shape[0] - 1):",
                     f"    v[i + 1] = v[i + 1] + {sexpr(draw, ['v[i]', 'k'], 1)} * 0.5"]
    tuple_out = draw(st.booleans())
    ret = "np.sum(v * v), v[0] * k" if tuple_out else f"np.sum({vexpr(draw, ['v'], ['k'], 1)} * v)"
    src = "def block(v, k):\n" + "\n".join("    " + m for m in muts) + f"\n    return {ret}\n\n\n"
    on = draw(st.sampled_from(["copy", "arg"]))
    pre = ["u = w.copy()"] if on == "copy" else ["u = w"]
    cp = "a, b = zyg.checkpoint(block, u, x)" if tuple_out else "a = zyg.checkpoint(block, u, x)"
    use = "a + b * x" if tuple_out else "a"
    if draw(st.booleans()):
        body = pre + ["s = 0.0", f"for r in range({draw(st.integers(1, 2))}):", f"    {cp}",
                      f"    s = s + {use}", "return s + np.sum(u * w)"]
    else:
        body = pre + [cp, f"return {use} + np.sum(u * w)"]
    src += "def f(w, x):\n" + "\n".join("    " + b for b in body) + "\n"
    return Scenario(src, [("call", "f", False)], std_args(draw), (0, 1))


@_settings(15)
@given(with_targets(checkpoints(), "checkpoints"))
def test_checkpoint_mutating_blocks(sc):
    run(sc)


# -- family: aliased arguments ---------------------------------------------------------------------

@st.composite
def aliased(draw):
    """f(a, b, x) called with b the same array as a, or a and b overlapping views of one
    buffer.  Read-only: the gradient is the one of independent arguments.  If f writes into
    a or b, zyg must raise a ZygError or give the aliased program's derivative."""
    write = draw(st.booleans())
    body = ["s = 0.0", "for i in range(a.shape[0]):"]
    body.append(f"    s = s + {sexpr(draw, ['a[i]', 'b[(i + 1) % 4]', 'x'])}")
    if write:
        body.append(f"    {draw(st.sampled_from(['a', 'b']))}[i] = "
                    f"{sexpr(draw, ['a[i]', 'b[i]', 'x'], 1)}")
        body.append(f"    s = s + b[i] * {sexpr(draw, ['a[i]', 'x'], 1)}")
    body.append(f"return s + np.sum({vexpr(draw, ['a', 'b'], ['x'], 1)} * b)")
    src = "def f(a, b, x):\n" + "\n".join("    " + b for b in body) + "\n"
    w, x = std_args(draw)
    kind = draw(st.sampled_from(["same", "overlap"]))
    # overlap: b is a[1:] followed by one more element of the shared buffer
    b = w.copy() if kind == "same" else np.concatenate([w[1:], [nonzero(draw, -1.2, 1.2)]])
    args = (w, b, x)
    return Scenario(src, [("call", "f", False)], args, (0, 1, 2),
                    "values-or-error" if write else "values", alias=(0, 1, kind))


@_settings(15)
@given(with_targets(aliased(), "aliased"))
def test_aliased_arguments(sc):
    run(sc)


# -- a fresh process sharing the cache directory ----------------------------------------------------

DRIVER = r"""
import importlib.util, json, sys
import numpy as np
import zyg
path, fn_expr, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
name = sys.argv[4]
spec = importlib.util.spec_from_file_location(name, path)
mod = importlib.util.module_from_spec(spec)
sys.modules[name] = mod
spec.loader.exec_module(mod)
fn = eval(fn_expr, mod.__dict__)
w, x = np.array(args[0]), args[1]
v, (gw, gx) = zyg.value_and_grad(fn, (0, 1), target="cpu")(w, x)
print(json.dumps([v, list(map(float, gw)), gx]))
"""


@st.composite
def edited_modules(draw):
    """A module, and an edit of its file: a global array literal, a scalar constant, the
    body of a helper, or the data a factory closes over."""
    kind = draw(st.sampled_from(["global", "scalar", "helper", "closure"]))
    e1, e2 = sexpr(draw, ["t", "u"]), sexpr(draw, ["t", "u"])
    g1, g2 = lit(draw), lit(draw)
    c1, c2 = num(draw), num(draw)

    def module(g, c, e):
        return (f"G = {g}\nC = {c}\n\n\ndef helper(t, u):\n    return {e}\n\n\n"
                "def make(D):\n    def loss(w, x):\n        return np.sum(np.tanh(w * D)) * x\n"
                "    return loss\n\n\n"
                "def f(w, x):\n    s = 0.0\n    for i in range(w.shape[0]):\n"
                "        s = s + helper(w[i], x) * G[i] + C * w[i]\n    return s\n")
    if kind == "global":
        before, after = module(g1, c1, e1), module(g2, c1, e1)
    elif kind == "scalar":
        before, after = module(g1, c1, e1), module(g1, c2, e1)
    elif kind == "helper":
        before, after = module(g1, c1, e1), module(g1, c1, e2)
    else:
        before = module(g1, c1, e1) + f"\nL = make({g1})\n"
        after = module(g1, c1, e1) + f"\nL = make({g2})\n"
    assume(before != after)
    return before, after, ("L" if kind == "closure" else "f"), std_args(draw)


@_settings(3)
@given(edited_modules())
def test_cross_process(case):
    before, after, fn_expr, args = case
    sc = Scenario(before, [("call", fn_expr, False)], args, (0, 1))
    mod_before, path = run(sc)        # compiles for cpu here, into ZYG_CACHE_DIR
    with open(path, "w") as fh:       # the user edits the file, then starts a new process
        fh.write(HEADER + after)
    mod_after, _ = write_module(after)
    fn = eval(fn_expr, mod_after.__dict__)
    sc_after = Scenario(after, [("call", fn_expr, False)], args, (0, 1))
    y, (gw, gx) = reference(fn, sc_after, args)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(zyg.__file__)),
                                         env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", DRIVER, path, fn_expr,
                          json.dumps([list(map(float, args[0])), args[1]]), mod_before.__name__],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"fresh process failed:\n{out.stderr}{sc_after!r}"
    v, gw2, gx2 = json.loads(out.stdout.strip().splitlines()[-1])
    scale = max(1.0, abs(y))
    where = f"fresh process after editing the module{sc!r}\n--- edited to ---\n{after}"
    assert close(v, y, 1e-10, 1e-12 * scale), f"value {v!r}, plain call {y!r}: {where}"
    assert close(gw2, gw, 1e-6, 1e-6 * scale), f"d/dw {gw2!r}, finite differences {gw!r}: {where}"
    assert close(gx2, gx, 1e-6, 1e-6 * scale), f"d/dx {gx2!r}, finite differences {gx!r}: {where}"


def test_generators_make_valid_scenarios():
    """Guards the test itself: every family's scenarios run as plain Python."""
    from hypothesis import HealthCheck, settings
    fams = [closures(), lambdas(), module_globals(), redefined(), views(), late_active(),
            reads_before_writes(), checkpoints(), aliased(), loop_exits(), recursion_in_loops()]

    @settings(max_examples=30, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(*fams))
    def gen(sc):
        mod, _ = write_module(sc.src)
        for step in sc.steps:
            if step[0] == "exec":
                exec(step[1], mod.__dict__)
            elif step[0] == "define":
                define(mod, step[1])
            else:
                with np.errstate(all="ignore"):
                    y = eval(step[1], mod.__dict__)(*call_args(sc, sc.args))
                assert np.ndim(y) == 0
    gen()
