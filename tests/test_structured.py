"""Structured emission (zyg/pullbacks/structured.py): counted loop nests emitted as real
nested ``for`` loops in the primal and reversed ``while`` loops in the adjoint, with
``if``/``else`` bodies, triangular bounds, several blocks per body and nested loops.

Every case is differentiated on both targets and compared with central finite
differences; each also checks, from ``zyg.show``, how many loops were emitted
structured (so that a change that silently sends them back to the dispatcher fails
here), and that the dispatcher fallback (``STRUCTURED = False``) agrees to rounding.
"""
from __future__ import annotations

import io
import math
import re
import types

import numpy as np
import pytest

import zyg
import zyg.pullbacks.structured as structured

from conftest import assert_grad_matches

RNG = np.random.default_rng(11)


# --- scalar loops ------------------------------------------------------------------------

def loop_if_else(x, n):
    s = 0.0
    for i in range(n):
        if i % 2 == 0:
            s += x * i
        else:
            s -= math.sin(x * i)
    return s


def loop_elif_chain(x, n):
    s = 1.0
    for i in range(n):
        if i % 3 == 0:
            s = s * x + 1.0
        elif i % 3 == 1:
            s = s - math.cos(s * x)
        else:
            s = s + x * x
    return s


def loop_if_no_else_continue(x, n):
    s = 0.0
    for i in range(1, n):
        if i % 4 == 3:
            continue
        t = x * i
        if t > 2.0:
            t = math.sqrt(t)
        s += t * x
    return s


def triangular(x, n):
    s = 0.0
    for i in range(n):
        for j in range(i):
            s += math.sin(x * (i - j)) * x
    return s


def triangular_offsets(x, n):
    # inner ranges start at an outer counter and end past it; a step of 2 and an empty range
    s = 0.0
    for i in range(1, n):
        for j in range(i - 1, i + 3):
            s += x * j / (1.0 + i)
        for k in range(0, i + 1, 2):
            s = s * 0.9 + math.cos(x * k)
        for k in range(i, 0):
            s += x
    return s


def triple_nested_carry(x, n):
    # values carried through three nested loops, swapped every inner iteration
    a = x
    b = 1.0
    for i in range(n):
        for j in range(i + 1):
            for k in range(j, i):
                a, b = b, a * 0.5 + b * x
            a = a + 0.1 * x
    return a + b


def nested_data_branch(x, n):
    # a data-dependent branch (a running max) inside an inner loop, a plain loop after it
    tot = 0.0
    for i in range(n):
        m = math.sin(x * i)
        for j in range(1, 5):
            v = math.sin(x * (i + j) + j)
            if v > m:
                m = v
        for j in range(3):
            tot += math.exp(m - j * x)
    return tot


def inner_while_fallback(x, n):
    # a data-dependent while loop inside: the outer nest stays on the dispatcher,
    # the other inner for loop is structured on its own
    s = 0.0
    for i in range(n):
        y = x + i
        while y > 1.0:
            y = y * 0.5
        for j in range(3):
            s += y * j * x
    return s


def inner_break_fallback(x, n):
    s = 0.0
    for i in range(n):
        for j in range(n):
            if j > i:
                break
            s += x * math.cos(x * j)
    return s


def data_dependent_bound(x, n):
    # the inner trip count is computed inside the outer body: no bound before the nest
    # starts, so the inner loop reserves its room (and grows the stack in place) each
    # time it starts
    s = 0.0
    for i in range(n):
        m = int(2.0 + math.sin(i) * 2.0)
        for j in range(m):
            s += x * math.sin(x + j)
    return s


SCALAR = [
    (loop_if_else, [(0.7, 7), (1.3, 0), (1.3, 1)], 1),
    (loop_elif_chain, [(0.6, 8), (0.9, 2)], 1),
    (loop_if_no_else_continue, [(0.8, 9), (0.3, 3)], 1),
    (triangular, [(0.4, 6), (0.9, 1)], 2),
    (triangular_offsets, [(0.5, 6), (0.8, 2)], 4),
    (triple_nested_carry, [(0.7, 5), (0.3, 3)], 3),
    (nested_data_branch, [(0.45, 5), (1.1, 3)], 3),
    (inner_while_fallback, [(0.9, 4), (2.5, 3)], 1),
    (inner_break_fallback, [(0.7, 5)], 0),
    (data_dependent_bound, [(0.6, 6), (0.6, 300)], 2),
]


def structured_loops(f, *args, argnums=0) -> int:
    """How many loops the fused gradient of ``f`` runs structured: ``for`` in the primal,
    ``while _n > 0`` in the adjoint (the dispatcher has ``for`` loops of its own)."""
    out = io.StringIO()
    zyg.show(f, *args, argnums=argnums, file=out)
    fused = out.getvalue().split("=== fused value-and-gradient")[1]
    fors = len(re.findall(r"^\s*for _k\d+ in range", fused, re.M))
    whiles = len(re.findall(r"^\s*while _n\d+ > 0:", fused, re.M))
    assert fors >= whiles, fused
    return whiles


@pytest.mark.parametrize("f,points,loops", SCALAR, ids=[c[0].__name__ for c in SCALAR])
def test_scalar_structured(f, points, loops, target):
    assert structured_loops(f, *points[0]) == loops
    for args in points:
        assert_grad_matches(f, args, 0, targets=(target,))


# --- array loops ---------------------------------------------------------------------------

def fd_array(f, args, i, h=1e-6):
    a = args[i]
    g = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        up = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        dn = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        up[i][idx] += h
        dn[i][idx] -= h
        g[idx] = (f(*up) - f(*dn)) / (2 * h)
    return g


def fresh(args):
    return [x.copy() if isinstance(x, np.ndarray) else x for x in args]


def check_arrays(f, args, argnums, target, rtol=1e-6, atol=1e-8):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    want_val = f(*fresh(args))
    want = [fd_array(f, fresh(args), i) for i in nums]
    before = fresh(args)
    val, g = zyg.value_and_grad(f, argnums=argnums, target=target)(*args)
    for x, b in zip(args, before):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, b, err_msg=f"{target}: an input array was changed")
    gs = (g,) if isinstance(argnums, int) else g
    assert val == pytest.approx(want_val, rel=1e-12, abs=1e-12), target
    for i, gi, wi in zip(nums, gs, want):
        np.testing.assert_allclose(gi, wi, rtol=rtol, atol=atol, err_msg=f"{target}, argument {i}")


def lower_triangle_quadratic(q, l, x):
    # GMM's inner kernel: v = (diag(exp q) + L) x, rows of L packed, triangular loop
    d = x.shape[0]
    xc = np.empty(d)
    s = 0.0
    t = 0
    for k in range(q.shape[0]):
        for j in range(d):
            xc[j] = x[j] - 0.1 * k
        t = 0
        for r in range(d):
            v = math.exp(q[k, r]) * xc[r]
            for c in range(r):
                v += l[k, t] * xc[c]
                t += 1
            s += v * v
    return s


def rows_logsumexp(a):
    # per row: a max with an if inside a loop, then a sum loop; written into an array
    n, m = a.shape
    out = np.empty(n)
    for i in range(n):
        mx = a[i, 0]
        for j in range(1, m):
            if a[i, j] > mx:
                mx = a[i, j]
        s = 0.0
        for j in range(m):
            s += math.exp(a[i, j] - mx)
        out[i] = mx + math.log(s)
    tot = 0.0
    for i in range(n):
        tot += out[i] * (i + 1)
    return tot


def branchy_writes(a, w):
    # writes in both arms of a branch inside nested loops are rewound in the adjoint
    n = a.shape[0]
    b = np.zeros(n)
    for step in range(3):
        for i in range(n):
            if (i + step) % 2 == 0:
                b[i] = b[i] * w[step] + a[i]
            else:
                b[i] = math.sin(b[i]) + a[i] * w[step]
        for i in range(1, n):
            b[i] += 0.5 * b[i - 1]
    s = 0.0
    for i in range(n):
        s += b[i] * b[i]
    return s


def stencil_steps(u0, c):
    # an ODE/heat-like step loop of several loops, updated in place
    n = u0.shape[0]
    u = u0.copy()
    k = np.empty(n)
    for step in range(4):
        k[0] = 0.0
        for i in range(1, n - 1):
            k[i] = c[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        k[n - 1] = 0.0
        for i in range(n):
            u[i] += 0.1 * k[i] + 0.01 * u[i] * u[i]
    return u[n // 2] + u[1] * u[n - 2]


ARRAYS = [
    (lower_triangle_quadratic, lambda: (RNG.uniform(-0.5, 0.5, (3, 4)), RNG.uniform(-1, 1, (3, 6)),
                                        RNG.uniform(-1, 1, 4)), (0, 1, 2), 4),
    (rows_logsumexp, lambda: (RNG.uniform(-1, 1, (4, 5)),), 0, 4),
    (branchy_writes, lambda: (RNG.uniform(-1, 1, 6), RNG.uniform(0.5, 1.0, 3)), (0, 1), 4),
    (stencil_steps, lambda: (RNG.uniform(0, 1, 7), RNG.uniform(0.2, 0.8, 7)), (0, 1), 3),
]


@pytest.mark.parametrize("f,make,argnums,loops", ARRAYS, ids=[c[0].__name__ for c in ARRAYS])
def test_array_structured(f, make, argnums, loops, target):
    args = make()
    assert structured_loops(f, *args, argnums=argnums) == loops
    check_arrays(f, list(args), argnums, target)


# --- the dispatcher fallback agrees ------------------------------------------------------------

def _copy(f):
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


@pytest.mark.parametrize("f,args,argnums", [
    (triple_nested_carry, (0.7, 5), 0),
    (nested_data_branch, (0.45, 5), 0),
    (branchy_writes, (RNG.uniform(-1, 1, 6), RNG.uniform(0.5, 1.0, 3)), (0, 1)),
], ids=["triple_nested_carry", "nested_data_branch", "branchy_writes"])
def test_dispatcher_agrees(f, args, argnums, monkeypatch):
    """The structured and the dispatch-loop emission compute the same gradient."""
    v1, g1 = zyg.value_and_grad(_copy(f), argnums=argnums, target="python")(*fresh(args))
    monkeypatch.setattr(structured, "STRUCTURED", False)
    assert structured_loops(f, *args, argnums=argnums) == 0
    v2, g2 = zyg.value_and_grad(_copy(f), argnums=argnums, target="python")(*fresh(args))
    assert v1 == v2
    for a, b in zip(g1 if isinstance(g1, tuple) else (g1,), g2 if isinstance(g2, tuple) else (g2,)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_tape_grows_from_a_small_pool(target):
    """The room check of a nest asks for the whole nest at once; a second call with the
    pooled (now large) buffers and a larger nest grows again."""
    g = zyg.grad(triangular, target=target)
    for n in (3, 40, 120):
        want = sum(math.sin(0.4 * (i - j)) + 0.4 * (i - j) * math.cos(0.4 * (i - j))
                   for i in range(n) for j in range(i))
        assert g(0.4, n) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_pullback_replays_structured_nest(target):
    """The split primal/adjoint (zyg.pullback) of a structured nest: ``back`` can be called
    again (the adjoint reads the tape with its own cursor) and scales with ``dy``."""
    y, back = zyg.pullback(nested_data_branch, 0.45, 5, target=target)
    assert y == pytest.approx(nested_data_branch(0.45, 5), rel=1e-14)
    g1 = back(1.0)
    g2 = back(2.0)
    h = 1e-6
    fd = (nested_data_branch(0.45 + h, 5) - nested_data_branch(0.45 - h, 5)) / (2 * h)
    assert g1[0] == pytest.approx(fd, rel=1e-6)
    assert g1[1] is None
    assert g2[0] == pytest.approx(2.0 * g1[0], rel=1e-14)


def slice_records(a, x, n):
    # each iteration pushes a 2-element slice's old contents, then 5 floats: an array push
    # must leave free the room its block's (or nest's) capacity check promised the floats
    s = 0.0
    for i in range(n):
        a[0:2] = a[1:3] * x
        s += math.sin(a[0] * x) * math.cos(a[1] * s)
    return s


@pytest.mark.parametrize("structured_on", [True, False])
def test_array_push_keeps_promised_room(structured_on, target, monkeypatch):
    """Regression: a 2-element array record followed by scalar records overflowed the
    float stack at capacity 128 (IndexError in Python, out-of-bounds writes in numba)."""
    monkeypatch.setattr(structured, "STRUCTURED", structured_on)
    f = _copy(slice_records)
    assert structured_loops(f, np.linspace(0.1, 0.5, 5), 0.7, 20, argnums=(0, 1)) == int(structured_on)
    for n in (20, 40):
        args = [np.linspace(0.1, 0.5, 5), 0.7, n]
        want_val = slice_records(*fresh(args))
        val, (ga, gx) = zyg.value_and_grad(f, argnums=(0, 1), target=target)(*fresh(args))
        assert val == pytest.approx(want_val, rel=1e-12)
        np.testing.assert_allclose(ga, fd_array(slice_records, fresh(args), 0), rtol=1e-6, atol=1e-8)
        h = 1e-6
        up, dn = fresh(args), fresh(args)
        up[1] += h
        dn[1] -= h
        assert gx == pytest.approx((slice_records(*up) - slice_records(*dn)) / (2 * h), rel=1e-6, abs=1e-8)


# --- random programs: structured and dispatcher emission agree ---------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402

from test_property import load, points, programs  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), points)
def test_random_programs_structured_equals_dispatcher(src, args):
    """test_property's random programs (nested for loops, if/elif/else, break, continue,
    while loops, early returns): the gradient with structured emission is the
    dispatcher's (same operations in the same order), wherever the program is defined."""
    f = load(src)
    try:
        want = f(*args)
    except (ValueError, OverflowError, ZeroDivisionError):
        return
    if not math.isfinite(want):
        return
    structured.STRUCTURED = True
    try:
        v1, g1 = zyg.value_and_grad(f, (0, 1), target="python")(*args)
        structured.STRUCTURED = False
        v2, g2 = zyg.value_and_grad(load(src), (0, 1), target="python")(*args)
    finally:
        structured.STRUCTURED = True
    assert v1 == v2 == want or (math.isnan(v1) and math.isnan(v2))
    for a, b in zip(g1, g2):
        assert a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-12 * max(1.0, abs(b)), \
            f"structured {g1} != dispatcher {g2} at {args} for\n{src}"
