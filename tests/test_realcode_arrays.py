"""Array idioms of public numba code (issue 24), on both targets, against central finite
differences, and forward mode (``zyg.jvp``) against the gradient where it applies:

- boolean masks: ``~m``, ``a & b``, ``a | b``, ``a ^ b``, ``m &= ...``, ``mask * x``,
  ``np.zeros(n, dtype=np.bool_)``, ``np.isnan`` / ``np.isfinite`` masks, ``y[mask] = 0.0``,
  ``y[~np.isnan(y)]``, ``np.sum(x[mask])``, ``np.where(mask, a, b)``; integer ``<<``, ``|=``;
- ``x[rows, cols]`` with two integer index arrays (``logp[np.arange(n), labels]``), read,
  written and ``+=``, with repeated index pairs;
- ``np.nan_to_num`` (with ``nan=``, ``posinf=``, ``neginf=``) and ``np.polyval``;
- ``np.full`` / ``np.full_like`` in forward mode;
- a custom rule whose helpers call other plain Python helpers (compiled on cpu);
- arrays created in a loop whose shape changes between iterations (shrinking windows,
  ``np.zeros(n - i)``, Gaussian elimination on ``M[j, i:]``);
- an array allocated in a branch and then written; the refusal of an array written in
  place and rebound to a new array in a loop.

Every gradient is compiled once per target (the cpu compiles dominate the run time).
"""
from __future__ import annotations

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(24)
_BUILT = {}


def built(kind, f, argnums, target):
    key = (kind, f, argnums, target)
    if key not in _BUILT:
        maker = zyg.grad if kind == "grad" else zyg.value_and_grad
        _BUILT[key] = maker(f, argnums=argnums, target=target)
    return _BUILT[key]


def fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def fd(f, args, i, h=1e-6):
    """Central differences of f in every element of args[i] (float64)."""
    a = args[i]
    if not isinstance(a, np.ndarray):
        up, dn = fresh(args), fresh(args)
        up[i] += h
        dn[i] -= h
        return (f(*up) - f(*dn)) / (2 * h)
    g = np.zeros(a.shape)
    for k in np.ndindex(a.shape):
        up, dn = fresh(args), fresh(args)
        up[i][k] += h
        dn[i][k] -= h
        g[k] = (f(*up) - f(*dn)) / (2 * h)
    return g


def check(f, args, argnums=0, jvp=True, rtol=1e-6, atol=1e-6):
    """Gradient vs finite differences on both targets, the targets against each other,
    the arguments left as they were, and (``jvp``) forward mode vs the gradient."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    expect = [fd(f, list(args), i) for i in nums]
    y = f(*fresh(args))
    got_by_target = {}
    for t in TARGETS:
        before = fresh(args)
        v, g = built("vg", f, argnums, t)(*args)
        for a, b in zip(args, before):
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b, equal_nan=True), f"[{t}] an argument was left changed"
        got = (g,) if isinstance(argnums, int) else g
        assert np.isclose(v, y, rtol=1e-12, atol=1e-12), (t, v, y)
        for gi, e in zip(got, expect):
            np.testing.assert_allclose(gi, e, rtol=rtol, atol=atol, err_msg=f"[{t}] {f.__name__}")
        got_by_target[t] = got
        if jvp:
            tangents = tuple(RNG.normal(size=np.shape(args[i])) if isinstance(args[i], np.ndarray)
                             else float(RNG.normal()) for i in nums)
            primals = tuple(args[i] for i in nums)
            yj, tj = zyg.jvp(_jvp_wrapper(f, nums, args), primals, tangents, target=t)
            assert np.isclose(yj, y, rtol=1e-12, atol=1e-12)
            expect_t = sum(float(np.sum(np.asarray(gi) * ti)) for gi, ti in zip(got, tangents))
            assert np.isclose(tj, expect_t, rtol=1e-9, atol=1e-9), (t, tj, expect_t)
    for a, b in zip(got_by_target["python"], got_by_target["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


_JVP_FNS = {}


def _jvp_wrapper(f, nums, args):
    """f itself when every argument is differentiated; else f with the others fixed
    (jvp takes tangents for every argument)."""
    if len(nums) == len(args):
        return f
    return _JVP_FNS[f.__name__]


# --- 1. boolean masks --------------------------------------------------------------------------
def masks(x):
    n = x.shape[0]
    a = x > 0.3
    b = x < 0.8
    m = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        m[i] = x[i] > 0.5
    m &= ~(x > 0.9)
    m |= x < 0.1
    k = 0
    for i in range(n):
        k |= 1 << i
    y = x * x
    y[y > 0.6] = np.nan
    bad = np.isnan(y)
    good = y[~np.isnan(y)]
    y[bad] = 0.0
    s = np.sum((a & b) * x) + np.sum(x * (a | b)) * 2.0 + np.sum(x * (a ^ b)) * 3.0
    s += np.sum(x[m] ** 2) + np.sum(np.sin(good)) + np.sum(y * x)
    s += np.sum(np.where(np.isfinite(np.log(x - 0.2)), x, 2.0 * x)) + (k & 1) * 0.5
    return s + np.sum(~a * x * x)


def test_boolean_masks():
    x = np.array([0.05, 0.25, 0.45, 0.55, 0.7, 0.85, 0.95, 0.35])
    with np.errstate(invalid="ignore"):
        check(masks, [x])


# --- 2. x[rows, cols] --------------------------------------------------------------------------
def cross_entropy(logits, labels, v):
    n = logits.shape[0]
    z = logits - np.log(np.sum(np.exp(logits), axis=1)).reshape(-1, 1)
    picked = z[np.arange(n), labels]
    acc = np.zeros((3, 4))
    rows = np.array([0, 2, 1, 1, 0, 2])
    cols = np.array([3, 2, 1, 1, 3, 0])
    acc[rows, cols] += v * 2.0          # (1, 1) and (0, 3) repeat: the last write wins
    acc[rows[:2], cols[:2]] = v[:2] * v[:2]
    return -np.sum(picked) + np.sum(acc * acc) + np.sum(logits[labels, labels] ** 2)


def _cross_entropy_jvp(logits, v):
    return cross_entropy(logits, np.array([0, 2, 1, 1, 0]), v)


_JVP_FNS["cross_entropy"] = _cross_entropy_jvp


def test_two_index_arrays():
    logits = RNG.normal(size=(5, 4))
    labels = np.array([0, 2, 1, 1, 0])      # row 1 and row 0 twice in logits[labels, labels]
    v = RNG.normal(size=6)
    check(cross_entropy, [logits, labels, v], argnums=(0, 2))
    # the primal is numpy's
    for t in TARGETS:
        val, _ = built("vg", cross_entropy, (0, 2), t)(logits, labels, v)
        assert np.isclose(val, cross_entropy(logits, labels, v), rtol=1e-13)


# --- 3. np.nan_to_num, np.polyval --------------------------------------------------------------
def nan_poly(p, x):
    y = x * x
    y[0] = np.inf
    y[1] = -np.inf
    y[2] = np.nan
    s = np.sum(np.nan_to_num(y) * 1e-300) + np.sum(np.nan_to_num(y, nan=1.0, posinf=2.0, neginf=-2.0) ** 2)
    return s + np.sum(np.polyval(p, x) ** 2) + np.polyval(p, x[3]) * x[4]


def test_nan_to_num_and_polyval():
    p = RNG.normal(size=4)
    x = RNG.uniform(0.5, 1.5, 6)
    check(nan_poly, [p, x], argnums=(0, 1))
    y = x * x
    y[2] = np.nan
    y[0] = np.inf
    assert np.array_equal(zyg.pullback(lambda a: np.nan_to_num(a, posinf=5.0), y, target="python")[0],
                          np.nan_to_num(y, posinf=5.0))


# --- 4. np.full / np.full_like in forward mode --------------------------------------------------
def fills(x):
    a = np.full(x.shape[0], 2.0)
    b = np.full_like(x, 3.0)
    c = np.full(x.shape, x[0] * x[1])
    d = np.full_like(x, x[2])
    return np.sum(a * x + b * x * x + c * x + d * d)


def test_full_forward():
    check(fills, [RNG.normal(size=5)])


# --- 5. a rule whose helpers call plain helpers -------------------------------------------------
def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _dsig(x, dy):
    s = _sig(x)
    return dy * s * (1.0 - s)


def _softmax_helper(x):
    e = np.exp(x - np.max(x))
    return e / np.sum(e)


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x):
    return np.exp(x) / np.sum(np.exp(x))


def with_rules(x):
    return np.sum(softmax(x) * np.arange(x.shape[0])) + np.sum(sig(x) ** 2) + sig(x[0])


def test_rule_calls_helpers_of_helpers():
    @zyg.adjoint(sig)
    def _sig_rule(x):
        y = _sig(x)

        def back(dy):
            return (_dsig(x, dy),)
        return y, back

    @zyg.adjoint(softmax)
    def _softmax_rule(x):
        y = _softmax_helper(x)

        def back(dy):
            return (y * (dy - np.sum(dy * y)),)
        return y, back

    x = RNG.normal(size=4)
    expect = fd(with_rules, [x], 0)
    for t in TARGETS:
        np.testing.assert_allclose(zyg.grad(with_rules, target=t)(x), expect, rtol=1e-6, atol=1e-7)


# --- 6. arrays whose shape changes between iterations -------------------------------------------
def windows(x):
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        w = x[i:]
        t = np.sin(w) * x[i]            # a new array of n - i elements
        s += np.sum(t * t) * (i + 1)
        tmp = np.zeros(n - i)           # allocated, written, then read by a pullback
        for k in range(n - i):
            tmp[k] = x[i + k] * x[k]
        s += np.sum(np.sin(tmp))
    return s


def gauss_solve(A, b):
    M = A.copy()
    r = b.copy()
    n = M.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            f = M[j, i] / M[i, i]
            M[j, i:] = M[j, i:] - f * M[i, i:]
            r[j] = r[j] - f * r[i]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (r[i] - np.dot(M[i, i + 1:], x[i + 1:])) / M[i, i]
    return np.sum(x * x) + x[0]


def test_shrinking_arrays_in_loops():
    check(windows, [RNG.uniform(0.5, 1.5, 5)])


def test_gaussian_elimination_slices():
    A = RNG.normal(size=(4, 4)) + 4.0 * np.eye(4)
    b = RNG.normal(size=4)
    check(gauss_solve, [A, b], argnums=(0, 1), jvp=False)
    np.testing.assert_allclose(built("grad", gauss_solve, 1, "python")(A, b),
                               fd(gauss_solve, [A, b], 1), rtol=1e-6, atol=1e-7)


# --- 7. arrays allocated in a branch; rebound in a loop -----------------------------------------
def branch_alloc(x, flag):
    n = x.shape[0]
    if flag > 0:
        a = np.empty(n)
        for i in range(n):
            a[i] = x[i] * x[i]
    else:
        a = x * 3.0
    a[0] += x[1]
    return np.sum(np.sin(a))


def test_array_allocated_in_branch():
    x = RNG.uniform(0.5, 1.5, 5)
    for flag in (1, -1):
        expect = fd(branch_alloc, [x, flag], 0)
        for t in TARGETS:
            np.testing.assert_allclose(built("grad", branch_alloc, 0, t)(x, flag), expect,
                                       rtol=1e-6, atol=1e-7)


def rebound_in_loop(x):
    a = x.copy()
    s = 0.0
    for t in range(3):
        a = a.copy()
        for j in range(a.shape[0]):
            a[j] += np.sin(a[j - 1]) * 0.5
        s += np.sum(a * a)
    return s


def test_array_rebound_in_loop_is_refused():
    line = rebound_in_loop.__code__.co_firstlineno + 4      # a = a.copy()
    with pytest.raises(zyg.UnsupportedSyntax) as ei:
        zyg.grad(rebound_in_loop, target="python")(np.ones(4))
    msg = str(ei.value)
    assert "written in place is reassigned from an array created inside a loop" in msg
    assert f"line {line}" in msg and __file__ in msg and "a = a.copy()" in msg


def scalar_invert(x):
    b = x > 0.5
    y = x * x
    if ~(x > 1.0):          # ~ of a bool is `not` (numpy and numba), not Python's -2
        y = y * 3.0
    return y + x * ~b + (~5 & 3) + (6 >> 1) * x


def test_invert_of_a_bool_scalar():
    # plain Python computes ~True as -2: the reference is written out (numba's semantics)
    for x in (0.3, 0.7, 1.2):
        expect = (6.0 if x <= 1.0 else 2.0) * x + (x <= 0.5) + 3.0
        for t in TARGETS:
            v, g = built("vg", scalar_invert, 0, t)(x)
            assert np.isclose(v, x * x * (3.0 if x <= 1.0 else 1.0) + x * (x <= 0.5) + 2 + 3 * x,
                              rtol=1e-14), (t, x, v)
            assert np.isclose(g, expect, rtol=1e-7)


def carried_shrinking(x):
    v = x * 1.0
    s = 0.0
    for i in range(3):
        v = v[1:] * 2.0
        s += np.sum(v * v)
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_carried_array_changing_shape(target):
    # the array is carried by the loop (a block parameter) and shrinks: each entry of the
    # loop records its shadow's shape (tests/test_rebound_arrays.py has more)
    x = np.arange(1.0, 6.0) / 5.0
    g = zyg.grad(carried_shrinking, target=target)(x)
    fd = np.array([(carried_shrinking(x + h) - carried_shrinking(x - h)) / 2e-6
                   for h in np.eye(5) * 1e-6])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
