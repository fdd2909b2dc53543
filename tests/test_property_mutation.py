"""Property-based tests for array mutation: random programs in which arrays that pullbacks
read are written afterwards.

zyg's backward pass reads arrays in place and rewinds every write (docs/arrays.md), and it
leaves out the records of writes into arrays that no pullback reads.  Both are only right if
every array a pullback reads is restored, before that pullback runs, to what the primal saw
there.  Hypothesis builds the source of ``f(a, b, m, x)`` (``a``, ``b``: length-5 float
arrays, ``m``: a 3x5 float array, ``x``: a float) from statements that

* read arrays in pullbacks (``np.sum(k * a)``, ``a @ b``, ``np.dot``, ``np.tanh(a)``,
  ``a * b``, ``e @ a``, elementwise quotients) and keep functional arrays for later;
* then write those arrays: elements (``=``, ``+=``, ``-=``, ``*=``), slices, rows and
  columns of a matrix, whole-array in-place ops (``+=``, ``-=``, ``*=``, ``/=``), through
  views (``c[1:4]``, the row ``e[1]``, rows taken in a loop), through second names and
  views made on the way (``w = c``, ``al = c[::2]``), into the arguments themselves, into
  arrays that numpy operations returned, names rebound to new arrays (``c = c * k``);
* allocate arrays inside loops and fill them in inner loops (``np.zeros``, ``zeros_like``,
  ``ones``, ``copy``, a product), then read them in pullbacks;
* swap two buffers in a loop (``p, q = q, p``);
* pass arrays to inlined callees that read them in pullbacks and write into them;
* nest loops and branch on array values.

Statements sit at the top level as well as in loops (the first bug of this class was
outside loops).  zyg's gradient with respect to every element of ``a``, ``b``, ``m`` and to
``x`` must match central finite differences, on the python and the cpu (numba) targets, the
value must match the plain call, and the gradient call must leave ``a``, ``b`` and ``m``
exactly as they were.  Programs that zyg rejects with a clear error (UnsupportedSyntax,
NoAdjoint, TypeMismatch) are skipped; a numba failure (CompileError) is a failure.

In CI the examples are few and derandomized (a fixed sequence).  To hunt for bugs, set
``ZYG_PROPERTY_EXAMPLES=<n>``: each test then runs ``n`` examples, randomly seeded (use
``--hypothesis-seed`` to reproduce a run).
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import re
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st

import zyg
from zyg.errors import NoAdjoint, TypeMismatch, UnsupportedSyntax

import oracles

_DIR = tempfile.mkdtemp(prefix="zyg_prop_mut_")
_COUNT = itertools.count()
N = 5          # length of a, b and of the rows of m
R = 3          # rows of m

_EXAMPLES = int(os.environ.get("ZYG_PROPERTY_EXAMPLES", "0"))


def _settings(ci_examples: int):
    if _EXAMPLES > 0:
        return settings(max_examples=_EXAMPLES, deadline=None, derandomize=False, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=ci_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# Helpers of the generated module: called (and inlined by zyg) with arrays that they read in
# pullbacks and write into.
HELPERS = '''
def h_scale(v, k):
    v *= k


def h_fill(dst, src, k):
    for i in range(dst.shape[0]):
        dst[i] = math.tanh(src[i] * k)


def h_bump(v, i, val):
    v[i] += val
    return np.sum(v * v)


def h_read_write(v, k):
    t = np.sum(k * v)
    v[0] = 2.0 * k
    return t


def h_read_scale(v, k):
    t = np.dot(v, v) * k
    v *= 0.5
    return t
'''

# Arrays by name: length, root (the memory they share) and whether statements may write them.
# u is only rebound (u = u + ...), never written in place.
BASE = {
    "a": (N, "a", True), "b": (N, "b", True), "c": (N, "c", True), "w": (N, "c", True),
    "z": (N, "z", True), "r": (N, "e", True), "u": (N, "u", False),
    "v": (3, "c", True),
}
PROLOGUE = ["c = a.copy()", "w = c", "z = np.zeros(5)", "v = c[1:4]", "e = m.copy()",
            "r = e[1]", "u = b * x", "s = 0.0"]
EPILOGUE = ("return (s + np.sum(c * c) + np.sum(z * b) + np.sum(e * e) + x * np.sum(v)"
            " + np.sum(u * a) + np.sum(a * b) + np.sum(m * m))")
LOOPVARS = ["i", "j", "l"]


class Ctx:
    """What a statement may use: arrays in scope (name -> (length, root, writable)) and the
    loop counters in scope."""

    def __init__(self, arrays, loops):
        self.arrays = dict(arrays)
        self.loops = list(loops)

    def inner(self, extra_loop=None):
        return Ctx(self.arrays, self.loops + ([extra_loop] if extra_loop else []))


class Gen:
    def __init__(self, draw):
        self.d = draw
        self.n = 0

    def fresh(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def pick(self, xs):
        return self.d(st.sampled_from(list(xs)))

    # -- indices and scalars ------------------------------------------------------------------
    def idx(self, ctx, length):
        opts = [str(k) for k in range(length)] + ["-1"]
        for lv in ctx.loops:
            opts += [f"{lv} % {length}", f"({lv} + 1) % {length}", f"{length - 1} - {lv} % {length}"]
        return self.pick(opts)

    def scalar(self, ctx, depth=2):
        if depth == 0 or self.d(st.integers(0, 2)) == 0:
            k = self.d(st.integers(0, 4))
            if k == 0:
                return self.pick(["x", "s", "0.5", "1.3"])
            if k == 1:
                return f"e[{self.idx(ctx, R)}, {self.idx(ctx, N)}]"
            name = self.pick(sorted(ctx.arrays))
            return f"{name}[{self.idx(ctx, ctx.arrays[name][0])}]"
        p = self.scalar(ctx, depth - 1)
        q = self.scalar(ctx, depth - 1)
        op = self.pick(["({} + {})", "({} * {})", "({} - {})", "math.sin({} * {})",
                        "({} / (1.0 + ({}) ** 2))"])
        return op.format(p, q)

    def bounded(self, ctx):
        """A factor in (-1, 1) for repeated products."""
        return self.pick(["0.9", "x", f"math.tanh({self.scalar(ctx, 1)})"])

    # -- array expressions ----------------------------------------------------------------------
    def arr(self, ctx, length):
        """An array expression of ``length`` (a name, a view or a fresh value)."""
        names = [n for n, (ln, _, _) in ctx.arrays.items() if ln == length]
        opts = names * 2
        if length == N:
            opts += [f"e[{self.idx(ctx, R)}]", "np.tanh(c)", "e[0] * x"]
        else:
            opts += ["c[0:3]", "c[2:5]", f"e[:, {self.idx(ctx, N)}]", "b[1:4]", "a[::2]"]
        return self.pick(opts)

    def read_expr(self, ctx):
        """A scalar whose pullback reads array values."""
        ln = self.pick([N, N, 3])
        p, q = self.arr(ctx, ln), self.arr(ctx, ln)
        k = self.scalar(ctx, 1)
        forms = [f"np.sum({k} * {p})", f"np.sum({p} * {q})", f"np.dot({p}, {q})", f"{p} @ {q}",
                 f"np.sum(np.tanh({p}) * {q})", f"np.sum({k} * np.tanh({p}))",
                 f"np.sum({p} / (1.0 + {q} * {q}))"]
        if ln == N:
            forms += [f"np.sum(np.sin(e @ {p}))", f"np.sum(({p} * {k}) @ e.T)"]
        else:
            forms += [f"np.sum({p} @ e) * {k}"]
        return self.pick(forms)

    # -- statements -----------------------------------------------------------------------------
    def block(self, ctx, depth, lo=1, hi=3):
        out = []
        for _ in range(self.d(st.integers(lo, hi))):
            out += self.stmt(ctx, depth)
        return out

    def writable(self, ctx, length=None):
        return sorted(n for n, (ln, _, wr) in ctx.arrays.items()
                      if wr and (length is None or ln == length))

    def stmt(self, ctx, depth):
        kinds = ["read", "read", "write", "write", "slice", "inplace", "callee", "keep", "alias"]
        if depth > 0:
            kinds += ["loop", "loop", "branch", "alloc_loop", "alloc_loop", "swap", "rows"]
        if not ctx.loops:
            kinds += ["rebind"]
        k = self.pick(kinds)
        return getattr(self, "s_" + k)(ctx, depth)

    def s_read(self, ctx, depth):
        return [f"s = s + {self.read_expr(ctx)}"]

    def s_keep(self, ctx, depth):
        """A new array from a numpy operation, kept and read later, maybe written."""
        t = self.fresh("t")
        ln = self.pick([N, 3])
        src = self.pick([f"np.tanh({self.arr(ctx, ln)}) * {self.scalar(ctx, 1)}",
                         f"{self.arr(ctx, ln)} * {self.arr(ctx, ln)}"])
        ctx.arrays[t] = (ln, t, self.d(st.booleans()))     # written later, or never
        return [f"{t} = {src}"]

    def s_alias(self, ctx, depth):
        """Another name for a writable array (or a view of it), written through later."""
        src = self.pick(self.writable(ctx))
        ln, root, _ = ctx.arrays[src]
        n = self.fresh("al")
        if ln == N and self.d(st.booleans()):
            ctx.arrays[n] = (3, root, True)
            return [f"{n} = {src}[{self.pick(['0:3', '2:5', '1:4', '::2'])}]"]
        ctx.arrays[n] = (ln, root, True)
        return [f"{n} = {src}"]

    def s_rebind(self, ctx, depth):
        """A written name bound to a new array; its other names and views keep the old one."""
        name = self.pick(["c", "z", "a"])
        ln, _, _ = ctx.arrays[name]
        ctx.arrays[name] = (ln, self.fresh("root"), True)
        return [f"{name} = {self.pick([f'{name} * {self.scalar(ctx, 1)}', f'np.tanh({name})', f'{name}.copy()'])}"]

    def s_write(self, ctx, depth):
        names = self.writable(ctx)
        if self.d(st.integers(0, 4)) == 0:
            target = f"e[{self.idx(ctx, R)}, {self.idx(ctx, N)}]"
        else:
            name = self.pick(names)
            target = f"{name}[{self.idx(ctx, ctx.arrays[name][0])}]"
        e = self.scalar(ctx)
        op = self.pick(["=", "=", "+=", "-=", "*="])
        if op == "*=":
            return [f"{target} *= math.tanh({e})"]
        return [f"{target} {op} {e}"]

    def s_slice(self, ctx, depth):
        k = self.scalar(ctx, 1)
        forms = [f"c[1:4] = {self.arr(ctx, 3)} * {k}",
                 f"{self.pick(self.writable(ctx, N))}[:] = np.tanh({self.arr(ctx, N)}) * {k}",
                 f"e[{self.idx(ctx, R)}] = {self.arr(ctx, N)} * {k}",
                 f"e[:, {self.idx(ctx, N)}] = {self.arr(ctx, 3)} + {k}",
                 f"v[0:2] = {self.arr(ctx, 3)}[1:3] * {k}"]
        return [self.pick(forms)]

    def s_inplace(self, ctx, depth):
        length = self.pick([N, N, 3])
        names = self.writable(ctx, length)
        if not names:
            return []
        t = self.pick(names)
        troot = ctx.arrays[t][1]
        # an operand that overlaps the target without being it would make numpy and numba
        # differ (numpy buffers overlapping in-place operands): only other memory, the same
        # array under another name, or a fresh value
        plain = [n for n, (ln, rt, _) in ctx.arrays.items()
                 if ln == length and (rt != troot or n == t or {n, t} == {"c", "w"})]
        operand = self.pick(plain + [f"({self.arr(ctx, length)} * 0.5)"])
        op = self.pick(["+=", "-=", "*=", "*=", "/="])
        if op == "*=":
            rhs = self.pick([self.bounded(ctx), f"np.tanh({operand})"])
        elif op == "/=":
            rhs = f"(1.0 + {operand} * {operand})"
        elif op == "-=":
            rhs = self.pick([operand, f"{self.scalar(ctx, 1)} * {operand}"])
        else:
            rhs = operand
        if self.d(st.integers(0, 5)) == 0:
            return [f"e *= {self.bounded(ctx)}"]
        return [f"{t} {op} {rhs}"]

    def s_callee(self, ctx, depth):
        k = self.scalar(ctx, 1)
        n5 = self.writable(ctx, N)
        anyw = self.writable(ctx)
        forms = [f"h_scale({self.pick(anyw)}, {self.bounded(ctx)})",
                 f"h_fill({self.pick(n5)}, {self.pick([n for n in ctx.arrays if ctx.arrays[n][0] == N])}, {k})",
                 f"s = s + h_bump({self.pick(n5)}, {self.idx(ctx, N)}, {k})",
                 f"s = s + h_read_write({self.pick(anyw)}, {k})",
                 f"s = s + h_read_scale({self.pick(anyw)}, {k})"]
        return [self.pick(forms)]

    def s_loop(self, ctx, depth):
        lv = LOOPVARS[len(ctx.loops)]
        inner = ctx.inner(lv)
        body = self.block(inner, depth - 1)
        return [f"for {lv} in range({self.d(st.integers(1, 3))}):"] + ["    " + ln for ln in body or ["pass"]]

    def s_branch(self, ctx, depth):
        cond = f"{self.scalar(ctx)} > 0.6"
        yes = self.block(Ctx(ctx.arrays, ctx.loops), depth - 1, 1, 2)
        no = self.block(Ctx(ctx.arrays, ctx.loops), depth - 1, 1, 2)
        return ([f"if {cond}:"] + ["    " + ln for ln in yes or ["pass"]] + ["else:"]
                + ["    " + ln for ln in no or ["pass"]])

    def s_alloc_loop(self, ctx, depth):
        """An array allocated in a loop, filled by an inner loop, read by pullbacks, and fed
        back into a loop-carried value."""
        lv = LOOPVARS[len(ctx.loops)]
        if len(ctx.loops) + 2 > len(LOOPVARS):
            return self.s_read(ctx, depth)
        jv = LOOPVARS[len(ctx.loops) + 1]
        tmp = self.fresh("tmp")
        outer = ctx.inner(lv)
        alloc = self.pick(["np.zeros(5)", "np.zeros_like(c)", "np.ones(5)", "c.copy()",
                           f"{self.arr(outer, N)} * {self.scalar(outer, 1)}"])
        fill_ctx = outer.inner(jv)
        fill = self.pick([f"{tmp}[{jv}] = {self.scalar(fill_ctx)}",
                          f"{tmp}[{jv}] += {self.scalar(fill_ctx)}",
                          f"{tmp}[{jv}] = {tmp}[{jv}] * {self.scalar(fill_ctx, 1)}",
                          f"{tmp}[{jv}] = u[{jv}] * u[{jv}]"])
        lines = [f"for {lv} in range({self.d(st.integers(1, 3))}):",
                 f"    {tmp} = {alloc}",
                 f"    for {jv} in range({self.pick(['5', '3', '4'])}):",
                 f"        {fill}"]
        body_ctx = Ctx(outer.arrays, outer.loops)
        body_ctx.arrays[tmp] = (N, tmp, True)
        k = self.scalar(outer, 1)
        reads = [f"s = s + np.sum({k} * {tmp})", f"s = s + np.sum(np.tanh({tmp}) * {self.arr(outer, N)})",
                 f"s = s + {tmp} @ {self.arr(outer, N)}", f"s = s + np.dot({tmp}, {tmp})"]
        lines.append("    " + self.pick(reads))
        for ln in self.block(body_ctx, 0, 0, 2):
            lines.append("    " + ln)
        upd = self.pick([f"u = u + {k} * {tmp}", f"u = np.tanh(u + 0.3 * {tmp})",
                         f"c[:] = c + 0.1 * {tmp}", f"z += 0.2 * {tmp}", f"s = s + np.sum({tmp} * u)"])
        lines.append("    " + upd)
        return lines

    def s_swap(self, ctx, depth):
        """Two preallocated buffers swapped every iteration (allocated outside loops: zyg
        rejects buffers allocated in a loop and carried by an inner one)."""
        if ctx.loops:
            return self.s_read(ctx, depth)
        lv, jv = LOOPVARS[len(ctx.loops)], LOOPVARS[len(ctx.loops) + 1]
        p, q = self.fresh("p"), self.fresh("q")
        k = self.scalar(ctx, 1)
        init = self.pick([[f"{p} = c.copy()"], [f"{p} = np.zeros(5)", f"{p}[:] = {self.arr(ctx, N)}"],
                          [f"{p} = {self.arr(ctx, N)} * 1.0"]])
        lines = init + [f"{q} = np.zeros(5)",
                        f"for {lv} in range({self.d(st.integers(1, 3))}):",
                        f"    for {jv} in range(5):",
                        f"        {q}[{jv}] = {p}[{jv}] + 0.3 * math.tanh({p}[({jv} + 1) % 5] - {p}[{jv}]) * {k}"]
        if self.d(st.booleans()):
            lines.append(f"    s = s + {self.pick([f'np.sum(x * {q})', f'np.dot({p}, {q})', f'np.sum(np.tanh({q}) * {p})'])}")
        lines.append(f"    {p}, {q} = {q}, {p}")
        lines.append(self.pick([f"s = s + np.sum({p} * b)", f"c[:] = {p}", f"s = s + np.sum({q} * {p})"]))
        return lines

    def s_rows(self, ctx, depth):
        """Writes through rows of e taken in a loop, in a nested loop."""
        if len(ctx.loops) + 2 > len(LOOPVARS):
            return self.s_write(ctx, depth)
        lv, jv = LOOPVARS[len(ctx.loops)], LOOPVARS[len(ctx.loops) + 1]
        rr = self.fresh("row")
        outer = ctx.inner(lv)
        inner = outer.inner(jv)
        inner.arrays[rr] = (N, "e", True)
        lines = [f"for {lv} in range({self.d(st.integers(1, 3))}):",
                 f"    {rr} = e[{lv} % 3]"]
        if self.d(st.booleans()):
            lines.append(f"    s = s + np.sum({rr} * {self.scalar(outer, 1)})")
        lines += [f"    for {jv} in range({self.pick(['5', '2'])}):",
                  f"        {rr}[{jv}] = {rr}[{jv}] * {self.bounded(inner)} + {self.scalar(inner, 1)}"]
        return lines


@st.composite
def programs(draw):
    g = Gen(draw)
    ctx = Ctx(BASE, [])
    body = list(PROLOGUE) + g.block(ctx, 2, 2, 6) + [EPILOGUE]
    return "def f(a, b, m, x):\n" + "\n".join("    " + ln for ln in body) + "\n"


def load(src: str):
    name = f"zyg_prop_mut_{os.getpid()}_{next(_COUNT)}"
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w") as fh:
        fh.write("import math\nimport numpy as np\n\n" + HELPERS + "\n\n" + src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.f


def fd(f, args, h):
    """Central differences of f with respect to every element of the arrays and to x."""
    out = []
    for i, v in enumerate(args):
        if isinstance(v, float):
            up, dn = list(args), list(args)
            up[i], dn[i] = v + h, v - h
            out.append((f(*[np.copy(t) for t in up]) - f(*[np.copy(t) for t in dn])) / (2 * h))
            continue
        g = np.zeros(v.shape)
        for k in np.ndindex(v.shape):
            e = np.zeros(v.shape)
            e[k] = h
            up = [t.copy() if isinstance(t, np.ndarray) else t for t in args]
            dn = [t.copy() if isinstance(t, np.ndarray) else t for t in args]
            up[i], dn[i] = v + e, v - e
            g[k] = (f(*up) - f(*dn)) / (2 * h)
        out.append(g)
    return out


def inputs(src: str):
    rng = np.random.default_rng(len(src))
    return (rng.uniform(0.2, 1.0, N), rng.uniform(0.2, 1.0, N), rng.uniform(0.2, 1.0, (R, N)), 0.7)


def check(src: str, targets) -> None:
    f = load(src)
    args = inputs(src)
    with np.errstate(all="raise"):
        try:
            y = f(*[np.copy(t) if isinstance(t, np.ndarray) else t for t in args])
            want1 = fd(f, args, 1e-6)
            want2 = fd(f, args, 1e-5)
        except FloatingPointError:
            event("rejected: floating-point error")
            assume(False)
    assume(np.isfinite(y) and abs(y) < 1e6)
    # reject points next to a branch switch: the two step sizes must agree
    for w1, w2 in zip(want1, want2):
        if not np.allclose(w1, w2, rtol=1e-6, atol=1e-8):
            event("rejected: finite differences disagree")
            assume(False)
    for target in targets:
        keep = [np.copy(t) for t in args[:3]]
        call = [np.copy(t) for t in args[:3]] + [args[3]]
        vg = zyg.value_and_grad(f, argnums=(0, 1, 2, 3), target=target)
        try:
            val, grads = vg(*call)
        except (UnsupportedSyntax, NoAdjoint, TypeMismatch) as ex:
            event(f"rejected by zyg: {type(ex).__name__}: {ex.msg[:60]}")
            assume(False)
        for name, before, after in zip("abm", keep, call[:3]):
            np.testing.assert_array_equal(after, before, err_msg=f"[{target}] {name} changed\n{src}")
        assert val == pytest.approx(y, rel=1e-12, abs=1e-12), f"[{target}] value\n{src}"
        for name, g, w in zip("abmx", grads, want1):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7,
                                       err_msg=f"[{target}] d/d{name}\n{src}")
        # forward against reverse, second order against first (tests/oracles.py)
        oracles.check_more("mutation programs", f, args, (0, 1, 2, 3), grads, y, target, vg,
                           src, "\n" + src)
    event("checked")


@_settings(45)
@given(programs())
def test_random_mutation_programs_python(src):
    check(src, ("python",))


@_settings(3)
@given(programs())
def test_random_mutation_programs_cpu(src):
    check(src, ("python", "cpu"))


def test_generator_covers_the_patterns():
    """The generator (a guard of the test itself) makes valid, deterministic programs with
    every pattern it promises, over many draws."""
    seen = set()
    marks = {"alloc in loop": r"tmp\d+ = .*\n\s+for ", "swap": r"p\d+, q\d+ = q\d+, p\d+",
             "callee": r"h_(scale|fill|bump|read_write|read_scale)\(", "row in loop": r"row\d+ = e\[",
             "whole-array in place": r"\b[a-z]\w* (\+|-|\*|/)= ", "kept array": r"t\d+ = ",
             "branch": r"if .* > 0\.6:", "nested loop": r"for i in .*\n\s+for j in ",
             "read then written": None}

    @settings(max_examples=300, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def gen(src):
        compile(src, "<prog>", "exec")
        f = load(src)
        args = inputs(src)
        with np.errstate(all="ignore"):
            y1 = f(*[np.copy(t) if isinstance(t, np.ndarray) else t for t in args])
            y2 = f(*[np.copy(t) if isinstance(t, np.ndarray) else t for t in args])
        assert np.isnan(y1) and np.isnan(y2) or y1 == y2, src
        for k, m in marks.items():
            if m is not None and re.search(m, src):
                seen.add(k)
        lines = src.splitlines()
        for n, ln in enumerate(lines):
            if "s = s + np." in ln and any(re.search(r"\] (\+|-|\*)?= ", later) for later in lines[n + 1:-1]):
                seen.add("read then written")
    gen()
    assert seen == set(marks), seen
