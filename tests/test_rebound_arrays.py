"""Arrays rebound inside loops (issue 24): made again in a branch or an iteration and then
written in place, and arrays carried by a loop whose shape changes from one iteration to the
next (a shrinking window, a Schur complement).  Both targets, against central differences of
every input element, forward mode against reverse, and the caller's arrays unchanged."""
from __future__ import annotations

import numpy as np
import pytest

import zyg

from conftest import TARGETS


def branch_alloc(x, n):
    # a = np.empty(..) in one branch, np.zeros(..) in the other, then written
    s = 0.0
    for i in range(n):
        if i % 2 == 0:
            a = np.empty(3)
        else:
            a = np.zeros(3)
        a[0] = x[0] * i
        a[1] = x[1] + a[0]
        a[2] = a[1] * x[2]
        s += np.sum(a * a)
    return s


def rebound_each_iteration(x, n):
    # the loop's array is written at the top of an iteration, then made anew
    a = np.zeros(3)
    s = 0.0
    for i in range(n):
        a[0] += x[0]
        a[1] = a[0] * x[1]
        s += np.sum(a * x)
        a = np.tanh(a) * x[2]
    return s + np.sum(a)


def view_after_join(x, n):
    # a view of the joined array, taken after the join, read after a write through it
    s = 0.0
    for i in range(n):
        if i % 2 == 0:
            a = x * 2.0
        else:
            a = x * 3.0
        v = a[1:]
        a[0] = v[0] * x[2]
        s += np.sum(a * v[0])
    return s


def rebound_in_while(x, tol):
    # a while loop making its work array again when it restarts, carried on (refused below)
    s = 0.0
    k = 0
    w = x.copy()
    while k < 5 and s < tol:
        if k % 3 == 0:
            w = np.ones(x.shape[0]) * x[k % x.shape[0]]
        w[k % w.shape[0]] = w[k % w.shape[0]] * x[0] + 0.5
        s += np.sum(w * w)
        k += 1
    return s


def shrinking_window(x, n):
    # the loop's array shrinks by one each iteration
    s = 0.0
    w = x.copy()
    for k in range(n):
        w = w[1:] * w[:-1]
        s += np.sum(w)
    return s


def written_and_shrinking(x, n):
    # written at the top of each iteration, then rebound to a shorter array
    v = x.copy()
    s = 0.0
    for i in range(n):
        v[0] += x[1] * v[-1]
        v = v[1:] * 2.0
        s += np.sum(v * v)
    return s


def schur_complement(M):
    # Gaussian elimination as successive Schur complements: a 2-D array shrinking in both axes
    A = M.copy()
    logdet = 0.0
    while A.shape[0] > 0:
        p = A[0, 0]
        logdet += np.log(p)
        A = A[1:, 1:] - np.outer(A[1:, 0], A[0, 1:]) / p
    return logdet


def window_in_while_with_break(x, stop):
    s = 0.0
    w = np.tanh(x)
    while w.shape[0] > 1:
        w = 0.5 * (w[1:] + w[:-1]) * x[0]
        s += np.sum(w * w)
        if s > stop:
            break
    return s + np.sum(w)


def grow_and_shrink(x, n):
    # the carried array grows and shrinks
    s = 0.0
    w = x[:2].copy()
    for k in range(n):
        if k % 2 == 0:
            w = np.concatenate((w, w[:1] * x[2]))
        else:
            w = w[1:] * x[1]
        s += np.sum(np.sin(w))
    return s


X = np.array([0.3, 0.5, 0.7, 0.9, 0.4])
SPD = np.array([[4.0, 1.0, 0.5, 0.2], [1.0, 3.0, 0.2, 0.1], [0.5, 0.2, 2.0, 0.3], [0.2, 0.1, 0.3, 1.5]])

CASES = {
    "branch_alloc": (branch_alloc, (X[:3], 5)),
    "rebound_each_iteration": (rebound_each_iteration, (X[:3], 4)),
    "view_after_join": (view_after_join, (X[:3], 4)),
    "shrinking_window": (shrinking_window, (X[:4], 3)),
    "schur_complement": (schur_complement, (SPD,)),
    "written_and_shrinking": (written_and_shrinking, (X, 3)),
    "window_in_while_with_break": (window_in_while_with_break, (X, 0.4)),
    "grow_and_shrink": (grow_and_shrink, (X[:3], 5)),
}


def fd(f, args):
    x = args[0]
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        h = 1e-6 * max(1.0, abs(x[i]))
        up, dn = x.copy(), x.copy()
        up[i] += h
        dn[i] -= h
        g[i] = (f(up, *args[1:]) - f(dn, *args[1:])) / (2 * h)
    return g


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_and_tangent(name, target):
    f, args = CASES[name]
    x0 = args[0].copy()
    value, g = zyg.value_and_grad(f, target=target)(*args)
    np.testing.assert_array_equal(args[0], x0)      # the caller's array is unchanged
    assert value == pytest.approx(f(*args), rel=1e-12)
    np.testing.assert_allclose(g, fd(f, args), rtol=1e-5, atol=1e-8)
    # forward mode along a direction agrees with the gradient
    v = np.linspace(-1.0, 1.0, x0.size).reshape(x0.shape)
    y, t = zyg.jvp(f, (args[0], *args[1:]), (v, *([None] * (len(args) - 1))), target=target)
    assert y == pytest.approx(value, rel=1e-12)
    assert t == pytest.approx(float(np.sum(g * v)), rel=1e-9, abs=1e-12)


def test_second_order_through_a_shrinking_window():
    f, args = CASES["shrinking_window"]
    x = args[0]
    H = zyg.hessian(f, target="python")(*args)
    G = lambda z: zyg.grad(f, target="python")(z, *args[1:])
    ref = np.array([(G(x + h) - G(x - h)) / 2e-6 for h in np.eye(x.size) * 1e-6])
    np.testing.assert_allclose(H, ref, rtol=1e-5, atol=1e-7)


def view_before_join(x, n):
    # b's view v is read after a write through the joined array: the copy would hide it
    s = 0.0
    for i in range(n):
        b = x * 2.0
        v = b[1:]
        if i % 2 == 0:
            a = b
        else:
            a = np.zeros(3)
        a[1] = 5.0 * x[0]
        s += v[0] * x[1]
    return s


def reallocated_then_carried(x, n):
    buf = np.zeros(3)
    s = 0.0
    for i in range(n):
        if i % 2 == 0:
            buf = np.ones(3) * x[0]
        buf[i % 3] += x[1] * i
        s += np.sum(buf * x)
    return s


MAKES = {"view_before_join": ["b = x * 2.0", "np.zeros(3)"],
         "reallocated_then_carried": ["buf = np.ones(3)"],
         "rebound_in_while": ["w = np.ones("]}


@pytest.mark.parametrize("f", [view_before_join, reallocated_then_carried, rebound_in_while])
def test_still_refused_where_a_copy_would_change_the_program(f):
    """Where another value could see the joined array's memory, zyg refuses at the line that
    makes the array (never a silently different program)."""
    with pytest.raises(zyg.UnsupportedSyntax) as e:
        zyg.grad(f, target="python")(X[:3].copy(), 4)
    assert "reassigned from an array created inside a loop" in str(e.value)
    # the error is at the user's line that makes a new array
    import inspect
    lines, first = inspect.getsourcelines(f)
    made = {first + k for k, line in enumerate(lines) if any(m in line for m in MAKES[f.__name__])}
    assert e.value.lineno in made, (e.value.lineno, made)
