"""Array indices proven non-negative are unsigned in compiled code.

``analysis.int_lower_bounds`` proves lower bounds of int values (range counters,
shape entries, ``i - 1`` in ``range(1, n)``, ``%``, ``//``, ``min``/``max``); the
emitter (``ArrayMixin.index_text``) casts such an index of an array to ``np.uint64``
in the cpu target, so numba leaves out its negative-index wraparound. An index that
may be negative (``a[i - 2]`` at ``i = 1``, ``a[n - 1 - i]``, ``a[-1]``) keeps
Python's semantics. Checked: the analysis on small programs, finite differences on
both targets, and random index expressions (cpu with the cast == cpu without it, to
the bit, and == the Python target to rounding).
"""
from __future__ import annotations

import numpy as np
import pytest

import zyg
from zyg import backends
import zyg.pullbacks.arrays as zarrays
from zyg.api import _kinds, ssa_of
from zyg.pullbacks.transform import plan
from zyg.ssa.analysis import int_lower_bounds
from zyg.ssa.ir import Var
from zyg.ssa.prims import GetItem, SetItem

RNG = np.random.default_rng(11)


def shifted_reads(a, x):
    n = a.shape[0]
    s = 0.0
    for i in range(1, n):
        s += a[i] * a[i - 1] * x + a[i - 2]       # a[i - 2] is a[-1] at i = 1
    return s


def mixed_indices(a, x):
    n = a.shape[0]
    b = np.zeros(n)
    for i in range(n):
        b[i] = a[n - 1 - i] * x                   # n - 1 - i: not proven (a difference of variables)
    for i in range(n):
        b[(i * 3 + 1) % n] += a[i // 2] * a[-1]    # % and // of non-negatives; a constant -1
    k = n - 1
    while k > 0:
        b[k] += b[min(k, 2)] * x                   # a while counter that goes down: not proven
        k -= 1
    return np.sum(b * b)


def packed_triangle(l, x):
    d = x.shape[0]
    t = 0
    s = 0.0
    for r in range(d):
        v = x[r]
        for c in range(r):
            v += l[t] * x[c]                       # t: carried through the inner loop, >= 0
            t += 1
        s += v * v
    return s


def index_proofs(f, args, argnums=(0,)):
    """For each array read and write in ``f``, in order: is its first index proven >= 0?"""
    ir = ssa_of(f)
    p = plan(ir, _kinds(args, ir.name), list(argnums), backends.get("cpu"))
    lb = int_lower_bounds(p.fn, p.kinds)
    out = []
    for blk in p.fn.iter_blocks():
        for s in blk.stmts:
            if isinstance(s.expr.fn, (GetItem, SetItem)) and p.kinds.get(s.expr.args[0].id, "").startswith("f8"):
                q = s.expr.args[1]
                out.append(isinstance(q, Var) and q.id in lb)
    return out


def test_bounds_of_small_programs():
    a = RNG.uniform(-1, 1, 6)
    # a[i], a[i - 1] proven (i >= 1), a[i - 2] not
    assert index_proofs(shifted_reads, (a, 0.5)) == [True, True, False]
    # in evaluation order: a[n-1-i] no, b[i] yes; b[(3i+1)%n] read yes, a[i//2] yes, a[-1] (a
    # constant) no, b[(3i+1)%n] write yes; b[k] read no, b[min(k, 2)] no (k unproven), b[k] write no
    got = index_proofs(mixed_indices, (a, 0.5))
    assert got == [False, True, True, True, False, True, False, False, False], got
    assert all(index_proofs(packed_triangle, (RNG.uniform(-1, 1, 10), RNG.uniform(-1, 1, 5))))


def fd_array(f, args, i, h=1e-6):
    x = np.array(args[i], dtype=float)
    g = np.zeros_like(x)
    for j in np.ndindex(*x.shape):
        up, dn = x.copy(), x.copy()
        up[j] += h
        dn[j] -= h
        a_up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        a_dn = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        a_up[i], a_dn[i] = up, dn
        g[j] = (f(*a_up) - f(*a_dn)) / (2 * h)
    return g


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("f,make", [
    (shifted_reads, lambda: (RNG.uniform(-1, 1, 7), 0.6)),
    (mixed_indices, lambda: (RNG.uniform(-1, 1, 6), 0.7)),
    (packed_triangle, lambda: (RNG.uniform(-1, 1, 10), RNG.uniform(-1, 1, 5))),
])
def test_gradients(f, make, target):
    args = make()
    keep = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    val, g = zyg.value_and_grad(f, argnums=(0, 1), target=target)(*args)
    for a, k in zip(args, keep):
        np.testing.assert_array_equal(a, k)
    assert val == pytest.approx(f(*args), rel=1e-12)
    np.testing.assert_allclose(g[0], fd_array(f, args, 0), rtol=1e-6, atol=1e-8)
    if isinstance(args[1], np.ndarray):
        np.testing.assert_allclose(g[1], fd_array(f, args, 1), rtol=1e-6, atol=1e-8)


def test_compiled_source_casts_only_proven_indices():
    from zyg.pullbacks.transform import emit_fused
    args = (RNG.uniform(-1, 1, 6), 0.5)
    ir = ssa_of(shifted_reads)
    for target in ("python", "cpu"):
        p = plan(ir, _kinds(args, ir.name), [0], backends.get(target))
        text = emit_fused(p, "f_vg", value=True)[1].text(p.backend.storage)
        # three reads, two of them again in the adjoint, three shadow updates (da_1[...]):
        # all but a[i - 2]'s are cast
        assert text.count("a_1[") == 8, text
        assert text.count("a_1[np.uint64(") == (6 if target == "cpu" else 0), text


# --- random index expressions ---------------------------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from test_property import load  # noqa: E402

# each may be negative for some i (then Python's wraparound applies) but stays in [-n, n)
_INDEX = ["i", "i - {c}", "{c} - i", "(i * {c} + 1) % n", "i // 2", "min(i, {c})",
          "max(i - 3, 0)", "n - 1 - i", "-1", "j // 4", "j // 4 - 1"]


@st.composite
def index_programs(draw):
    """A loop over ``range(lo, n)`` (and a counter ``j`` from 0) reading and updating
    arrays at random index expressions."""
    lo = draw(st.integers(0, 2))

    def idx():
        return draw(st.sampled_from(_INDEX)).format(c=draw(st.integers(0, 3)))
    lines = ["import numpy as np", "", "", "def f(a, x):", "    n = a.shape[0]",
             "    b = np.zeros(n)", "    s = 0.0", "    j = 0", f"    for i in range({lo}, n):"]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            lines.append(f"        s += a[{idx()}] * x * a[{idx()}]")
        else:
            lines.append(f"        b[{idx()}] += a[{idx()}] * x + b[{idx()}] * 0.5")
        if draw(st.booleans()):
            lines.append("        j += 1")
    lines.append("    return s + np.sum(b * b)")
    return "\n".join(lines) + "\n"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index_programs(), st.floats(0.2, 1.5), st.integers(4, 7))
def test_random_indices(src, x, n):
    a = np.linspace(-0.9, 0.8, n) + 0.05 * x
    want = load(src)(a.copy(), x)
    v_py, g_py = zyg.value_and_grad(load(src), argnums=(0, 1), target="python")(a.copy(), x)
    v_on, g_on = zyg.value_and_grad(load(src), argnums=(0, 1), target="cpu")(a.copy(), x)
    zarrays.UNSIGNED_INDEX = False
    try:
        v_off, g_off = zyg.value_and_grad(load(src), argnums=(0, 1), target="cpu")(a.copy(), x)
    finally:
        zarrays.UNSIGNED_INDEX = True
    assert v_on == v_off and v_py == pytest.approx(want, rel=1e-12, abs=1e-12)
    np.testing.assert_array_equal(g_on[0], g_off[0])
    assert g_on[1] == g_off[1]
    np.testing.assert_allclose(g_on[0], g_py[0], rtol=1e-12, atol=1e-12)
    assert g_on[1] == pytest.approx(g_py[1], rel=1e-12, abs=1e-12)
    f = load(src)
    np.testing.assert_allclose(g_py[0], fd_array(f, [a, x], 0), rtol=1e-5, atol=1e-7)
