"""Tape shape of GMM-like loop nests (zyg/pullbacks/transform.py):

* tape stacks are indexed with ``np.uint64`` in compiled code (no wraparound test on
  every push and pop), plain ints in the Python target;
* the start of an inner counter that continues an outer one (``t += 1`` inside
  ``for c in range(r)``, GMM's packed triangle) is recomputed backwards from the
  outer counter's final value (``Emitter.init_chains``) instead of being pushed once
  per inner loop.

Each program is checked against central finite differences on both targets, against
the emission without chains (``INIT_CHAIN = False``), and, from ``zyg.show``, for the
shape of the generated code.
"""
from __future__ import annotations

import io
import math
import types

import numpy as np
import pytest

import zyg
import zyg.pullbacks.transform as transform
from conftest import assert_grad_matches

RNG = np.random.default_rng(5)


def _copy(f):
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def fused_source(f, *args, argnums=0) -> str:
    out = io.StringIO()
    zyg.show(f, *args, argnums=argnums, file=out)
    return out.getvalue().split("=== fused value-and-gradient")[1]


# --- programs ---------------------------------------------------------------------------

def top_level_chain(x, n):
    # the outer loop is not nested: the counter's final value is read after it
    t = 0
    s = 0.0
    for r in range(n):
        v = x * r
        for c in range(r):
            v += math.sin(x * t + c)
            t += 1
        s += v * v
    return s + t * x


def nested_chain_step2(x, n):
    # outer loop nested twice (final value pushed when it exits), a step of 2, restart per i
    s = 0.0
    for i in range(3):
        for k in range(2):
            t = i - k
            for r in range(n):
                for c in range(r):
                    s += math.cos(x * t) * (c + 1)
                    t += 2
                s = s * 0.5 + x
    return s


def down_chain(x, n):
    # a counter that goes down, and an inner range with a nonzero start
    t = 100
    s = 0.0
    for r in range(n):
        for c in range(r, n):
            s += x * t / (1.0 + c)
            t -= 1
    return s


def chain_in_branch(x, n):
    # the inner loop runs only on some iterations: no chain (the latch value is a merge)
    t = 0
    s = 0.0
    for r in range(n):
        if r % 2 == 0:
            for c in range(r):
                s += math.sin(x * t)
                t += 1
        s += x
    return s


def packed_triangle(q, l, x):
    # GMM's kernel, with a counter that runs on across the components
    d = x.shape[0]
    s = 0.0
    t = 0
    for k in range(q.shape[0]):
        for r in range(d):
            v = math.exp(q[k, r]) * x[r]
            for c in range(r):
                v += l[t] * x[c]
                t += 1
            s += v * v
    return s


SCALAR = [
    (top_level_chain, [(0.7, 5), (0.3, 0), (0.4, 1)], True),
    (nested_chain_step2, [(0.6, 4), (0.9, 1)], True),
    (down_chain, [(0.5, 5), (0.8, 2)], True),
    (chain_in_branch, [(0.45, 6)], False),
]


@pytest.mark.parametrize("f,points,chained", SCALAR, ids=[c[0].__name__ for c in SCALAR])
def test_chained_counter_fd(f, points, chained, target):
    src = fused_source(f, *points[0])
    assert ("_cur" in src) == chained, src
    for args in points:
        assert_grad_matches(f, args, 0, targets=(target,))


@pytest.mark.parametrize("f,points,chained", SCALAR, ids=[c[0].__name__ for c in SCALAR])
def test_chained_equals_pushed(f, points, chained, monkeypatch):
    """Recomputing the starts gives the gradient of pushing them, to the last bit.

    Both with the adjoint's loops in reverse order: where nothing else is taped, recomputed
    starts let the adjoint run an outer loop's iterations forwards (``ADJ_FORWARD``),
    which adds the iterations' contributions in another order (another rounding)."""
    from zyg.pullbacks import structured
    monkeypatch.setattr(structured, "ADJ_FORWARD", False)
    for args in points:
        v1, g1 = zyg.value_and_grad(_copy(f), target="python")(*args)
        monkeypatch.setattr(transform, "INIT_CHAIN", False)
        assert "_cur" not in fused_source(f, *args)
        v2, g2 = zyg.value_and_grad(_copy(f), target="python")(*args)
        monkeypatch.setattr(transform, "INIT_CHAIN", True)
        assert v1 == v2 and g1 == g2


def fd_array(f, args, i, h=1e-6):
    g = np.zeros(args[i].shape)
    for idx in np.ndindex(args[i].shape):
        up = [a.copy() for a in args]
        dn = [a.copy() for a in args]
        up[i][idx] += h
        dn[i][idx] -= h
        g[idx] = (f(*up) - f(*dn)) / (2 * h)
    return g


def test_packed_triangle(target):
    q, l, x = RNG.uniform(-0.5, 0.5, (3, 4)), RNG.uniform(-1, 1, 18), RNG.uniform(-1, 1, 4)
    src = fused_source(packed_triangle, q, l, x, argnums=(0, 1, 2))
    assert "_cur" in src and "np.uint64" not in src          # show() prints the Python target
    val, g = zyg.value_and_grad(packed_triangle, argnums=(0, 1, 2), target=target)(q, l, x)
    assert val == pytest.approx(packed_triangle(q, l, x), rel=1e-12)
    for i, gi in enumerate(g):
        np.testing.assert_allclose(gi, fd_array(packed_triangle, [q, l, x], i), rtol=1e-6, atol=1e-8)


def test_compiled_tape_index_is_unsigned():
    from zyg.pullbacks.transform import emit_fused, plan
    from zyg.api import _kinds, ssa_of
    from zyg import backends
    args = (0.7, 5)
    ir = ssa_of(top_level_chain)
    for target, want in (("python", False), ("cpu", True)):
        p = plan(ir, _kinds(args, ir.name), [0], backends.get(target))
        text = emit_fused(p, "f_vg", value=True)[1].text(p.backend.storage)
        assert ("_fs[np.uint64(_fsp" in text) == want, text
        assert ("_fs[_fsp" in text) != want, text


# --- random nests: chained and pushed starts agree -------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@st.composite
def chain_programs(draw):
    """Nests of 2-3 counted loops with an int counter carried through the innermost one
    (random start, step and bounds), used in the float computation."""
    depth = draw(st.integers(2, 3))
    step = draw(st.sampled_from([1, 2, -1, 3]))
    t0 = draw(st.integers(-3, 3))
    lines = ["import math", "", "", "def f(x, n):", "    s = 0.0", f"    t = {t0}"]
    ind = "    "
    names = ["a", "b", "c"][:depth]
    for j, nm in enumerate(names):
        lo = draw(st.sampled_from(["0", "1"] + names[:j]))
        hi = draw(st.sampled_from(["n", "n + 1"] + [f"{p} + 1" for p in names[:j]] + [f"{p} + 2" for p in names[:j]]))
        if j == depth - 2 and draw(st.booleans()):
            lines.append(f"{ind}t = {t0} + {names[j - 1]}" if j else f"{ind}t = {t0}")
        lines.append(f"{ind}for {nm} in range({lo}, {hi}):")
        ind += "    "
        if j < depth - 1 and draw(st.booleans()):
            lines.append(f"{ind}s = s * 0.9 + x * {nm}")
    lines.append(f"{ind}s += math.sin(x * t + {names[-1]}) * x")
    lines.append(f"{ind}t += {step}")
    lines.append("    return s + x * t")
    return "\n".join(lines) + "\n"


from test_property import load  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_programs(), st.floats(0.1, 1.5), st.integers(0, 4))
def test_random_chains_equal_pushed(src, x, n):
    want = load(src)(x, n)
    transform.INIT_CHAIN = True
    try:
        v1, g1 = zyg.value_and_grad(load(src), target="python")(x, n)
        transform.INIT_CHAIN = False
        v2, g2 = zyg.value_and_grad(load(src), target="python")(x, n)
    finally:
        transform.INIT_CHAIN = True
    assert v1 == v2 == want
    assert g1 == g2, f"chained {g1} != pushed {g2} at {(x, n)} for\n{src}"
