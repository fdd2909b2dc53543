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
    whiles = len(re.findall(r"^\s*while _n\d+ > 0:", fused, re.M)) + forward_loops(fused)
    assert fors >= whiles, fused
    return whiles


def forward_loops(text: str) -> int:
    """Reversed loops run in the forward order (``structured.ADJ_FORWARD``)."""
    return len(re.findall(r"^\s*while _n(\d+) < _e\1:", text, re.M))


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


# --- reversed loops with independent iterations run forwards (ADJ_FORWARD) --------------------

def row_dots(a, w):
    # inner loop: a sum accumulator and array reads only -> its reverse runs forwards; so
    # does the outer one's (tot is a sum; its pops of s are read at each iteration's place)
    n, m = a.shape
    tot = 0.0
    for i in range(n):
        s = 0.0
        for j in range(m):
            s += a[i, j] * w[j]
        tot += s * s
    return tot


def row_dots_minus(a, w, x):
    # ``s - e`` accumulator, a loop-invariant float read inside, triangular bound
    n, m = a.shape
    xv = x[0] * x[1]
    tot = 0.0
    for i in range(n):
        s = xv
        for j in range(i % m + 1):
            s -= a[i, j] * w[j] + xv
        tot += math.sin(s)
    return tot


def two_accumulators(a, w):
    # two independent sums in one inner loop
    n, m = a.shape
    tot = 0.0
    for i in range(n):
        s = 0.0
        q = 1.0
        for j in range(m):
            s = s + a[i, j] * w[j]
            q = a[i, j] * a[i, j] + q
        tot += s * q
    return tot


def product_loop(a, w):
    # p = p * e: the cotangent of p changes every iteration -> stays backwards (and the
    # outer loop too: the inner loop's pops are not one per outer iteration)
    n, m = a.shape
    tot = 0.0
    for i in range(n):
        p = 1.0
        for j in range(m):
            p = p * (1.0 + 0.1 * a[i, j] * w[j])
        tot += p
    return tot


def accumulator_read(a, w):
    # the running sum is read in the body (s * a[i, j]) -> stays backwards
    n, m = a.shape
    tot = 0.0
    for i in range(n):
        s = 0.0
        for j in range(m):
            s = s + math.sin(s * a[i, j]) * w[j]
        tot += s
    return tot


def reversed_sub(a, w):
    # s = e - s: the cotangent flips sign every iteration -> the inner loop stays backwards
    # (the outer one, a sum of s * s over self-contained inner loops, runs forwards)
    n, m = a.shape
    tot = 0.0
    for i in range(n):
        s = 0.5
        for j in range(m):
            s = a[i, j] * w[j] - s
        tot += s * s
    return tot


def writes_in_loop(a, w):
    # an array write in the inner loop -> stays backwards
    n, m = a.shape
    b = np.zeros(m)
    tot = 0.0
    for i in range(n):
        for j in range(m):
            b[j] = b[j] * 0.5 + a[i, j] * w[j]
        tot += b[i % m] * b[i % m]
    return tot


FORWARD = [
    (row_dots, lambda: (RNG.uniform(-1, 1, (4, 5)), RNG.uniform(-1, 1, 5)), (0, 1), 2),
    (row_dots_minus, lambda: (RNG.uniform(-1, 1, (5, 3)), RNG.uniform(-1, 1, 3), RNG.uniform(0.5, 1, 2)),
     (0, 1, 2), 2),
    (two_accumulators, lambda: (RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, 4)), (0, 1), 2),
    (lower_triangle_quadratic, lambda: (RNG.uniform(-0.5, 0.5, (3, 4)), RNG.uniform(-1, 1, (3, 6)),
                                        RNG.uniform(-1, 1, 4)), (0, 1, 2), 2),
    (product_loop, lambda: (RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, 4)), (0, 1), 0),
    (accumulator_read, lambda: (RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, 4)), (0, 1), 0),
    (reversed_sub, lambda: (RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, 4)), (0, 1), 1),
    (writes_in_loop, lambda: (RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, 4)), (0, 1), 0),
]


def _forward_count(f, args, argnums) -> int:
    out = io.StringIO()
    zyg.show(f, *args, argnums=argnums, file=out)
    return forward_loops(out.getvalue().split("=== fused value-and-gradient")[1])


@pytest.mark.parametrize("f,make,argnums,nfwd", FORWARD, ids=[c[0].__name__ for c in FORWARD])
def test_adjoint_forward_order(f, make, argnums, nfwd, target, monkeypatch):
    """Reversed loops whose iterations are independent (sum accumulators, array reads)
    run forwards; the others stay backwards. Both agree with finite differences on both
    targets and with ``ADJ_FORWARD = False`` to rounding."""
    args = make()
    assert _forward_count(f, args, argnums) == nfwd
    check_arrays(f, list(args), argnums, target)
    v1, g1 = zyg.value_and_grad(_copy(f), argnums=argnums, target=target)(*fresh(args))
    monkeypatch.setattr(structured, "ADJ_FORWARD", False)
    assert _forward_count(f, args, argnums) == 0
    v2, g2 = zyg.value_and_grad(_copy(f), argnums=argnums, target=target)(*fresh(args))
    assert v1 == v2
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_adjoint_forward_pullback_replays(target):
    """zyg.pullback of a loop reversed forwards: ``back`` can be called twice."""
    a, w = RNG.uniform(-1, 1, (4, 5)), RNG.uniform(-1, 1, 5)
    y, back = zyg.pullback(row_dots, a, w, target=target)
    g1, g2 = back(1.0), back(2.0)
    np.testing.assert_allclose(g1[0], fd_array(row_dots, [a, w], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g2[1], 2.0 * g1[1], rtol=1e-14)


from hypothesis import strategies as st  # noqa: E402

_TERMS = ["a[i, j]", "w[j]", "c", "math.sin(a[i, j] * c)", "a[i, j] * w[j]", "math.exp(0.3 * w[j])"]
# accumulator updates: the first three keep the loop's reverse order-free, the others not
_UPDATES = ["{s} = {s} + {e}", "{s} += {e}", "{s} = {s} - {e}", "{s} = {e} - {s}",
            "{s} = {s} * (1.0 + 0.1 * {e})", "{s} = {s} + math.sin({s}) * {e}"]


@st.composite
def loop_programs(draw):
    """Random inner loops over array reads with 1-2 accumulators, each updated by a sum
    (order-free reverse) or by an update that ties the iterations together."""
    nacc = draw(st.integers(1, 2))
    lines = ["import math", "", "", "def f(a, w, x):", "    n, m = a.shape", "    c = x[0] * x[1]",
             "    tot = 0.0", "    for i in range(n):"]
    bound = draw(st.sampled_from(["m", "i % m + 1", "m - 1"]))
    for k in range(nacc):
        lines.append(f"        s{k} = {draw(st.sampled_from(['0.0', 'c', 'a[i, 0]']))}")
    lines.append(f"        for j in range({bound}):")
    for k in range(nacc):
        e = " * ".join(draw(st.lists(st.sampled_from(_TERMS), min_size=1, max_size=2)))
        up = draw(st.sampled_from(_UPDATES[:3] * 3 + _UPDATES[3:]))
        lines.append("            " + up.format(s=f"s{k}", e=e))
    for k in range(nacc):
        out = draw(st.sampled_from(["s{k}", "math.sin(s{k})", "s{k} * s{k}"])).format(k=k)
        lines.append(f"        tot += {out}")
    lines.append("    return tot")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_programs(), st.integers(0, 2**31 - 1))
def test_random_loops_forward_order_agrees(src, seed):
    """Random inner loops: the gradient with ADJ_FORWARD on is the one with it off to
    rounding, and it matches finite differences; python target."""
    rng = np.random.default_rng(seed)
    args = [rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 4), rng.uniform(0.5, 1.0, 2)]
    f = load(src)
    structured.ADJ_FORWARD = True
    try:
        v1, g1 = zyg.value_and_grad(f, (0, 1, 2), target="python")(*fresh(args))
        structured.ADJ_FORWARD = False
        v2, g2 = zyg.value_and_grad(load(src), (0, 1, 2), target="python")(*fresh(args))
    finally:
        structured.ADJ_FORWARD = True
    assert v1 == v2
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=src)
    for i in range(3):
        np.testing.assert_allclose(g1[i], fd_array(f, fresh(args), i), rtol=1e-5, atol=1e-7, err_msg=src)


@st.composite
def nest_programs(draw):
    """Random triple nests in GMM's shape: a middle loop whose reverse pops one value per
    iteration (``v`` of ``tot += v * v``), an inner loop carrying a counter ``t`` on from
    the middle loop's (a chained start, constant or not), and accumulators that keep or
    break the reverse's independence at each level."""
    start = draw(st.sampled_from(["0", "0", "2", "i"]))
    step = draw(st.sampled_from([1, 1, 2, -1]))
    lines = ["import math", "", "", "def f(a, w, x):", "    n, m = a.shape", "    c = x[0] * x[1]",
             "    tot = 0.0", "    t = 0", "    for i in range(n):", f"        t = {start}"]
    bound = draw(st.sampled_from(["m", "i % m + 1", "m - 1"]))
    lines.append(f"        for r in range({bound}):")
    lines.append(f"            v = {draw(st.sampled_from(['a[i, r]', 'c * w[r]', 'math.exp(a[i, r])']))}")
    lines.append(f"            for j in range({draw(st.sampled_from(['r', 'r + 1', 'm - r']))}):")
    e = draw(st.sampled_from(["a[i, j] * w[t % m]", "w[j] * c", "math.sin(a[i, (t + j) % m])"]))
    up = draw(st.sampled_from(["v += {e}", "v += {e}", "v = v - {e}", "v = v * (1.0 + 0.1 * {e})"]))
    lines.append("                " + up.format(e=e))
    lines.append(f"                t += {step}")
    out = draw(st.sampled_from(["tot += v * v", "tot += v * v", "tot += math.sin(v)", "tot = tot * 0.9 + v"]))
    lines.append("            " + out)
    lines.append("    return tot + c * t")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nest_programs(), st.integers(0, 2**31 - 1))
def test_random_nests_forward_order_agrees(src, seed):
    """Random nests (outer loops reversed forwards with indexed pops and chained counter
    starts run up): ADJ_FORWARD on == off to rounding, and finite differences; python target."""
    rng = np.random.default_rng(seed)
    args = [rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 4), rng.uniform(0.5, 1.0, 2)]
    f = load(src)
    structured.ADJ_FORWARD = True
    try:
        v1, g1 = zyg.value_and_grad(f, (0, 1, 2), target="python")(*fresh(args))
        structured.ADJ_FORWARD = False
        v2, g2 = zyg.value_and_grad(load(src), (0, 1, 2), target="python")(*fresh(args))
    finally:
        structured.ADJ_FORWARD = True
    assert v1 == v2
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=src)
    for i in range(3):
        np.testing.assert_allclose(g1[i], fd_array(f, fresh(args), i), rtol=1e-5, atol=1e-7, err_msg=src)


def test_pool_keeps_grown_buffers_and_results_stay_right(target):
    """The fused gradient hands back a tape buffer only when it grew (None otherwise); the
    pool keeps the larger buffer, and calls after it (smaller, then larger again) are right."""
    g = zyg.grad(triangular, target=target)
    want = lambda n: sum(math.sin(0.4 * (i - j)) + 0.4 * (i - j) * math.cos(0.4 * (i - j))
                         for i in range(n) for j in range(i))
    sizes = []
    for n in (3, 120, 5, 200, 2):
        assert g(0.4, n) == pytest.approx(want(n), rel=1e-12, abs=1e-12)
        pooled = [e for e in g._zyg.cache.values() if getattr(e, "pool", None)]
        assert len(pooled) == 1 and len(pooled[0].pool) == 1
        sizes.append(max(b.shape[0] for b in pooled[0].pool[0]))
    assert sizes[0] == 64 and sizes[1] > 64           # the first call fits, the second grows
    assert sizes[2] == sizes[1] and sizes[3] > sizes[1] and sizes[4] == sizes[3]
