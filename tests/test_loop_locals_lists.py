"""Arrays allocated inside a loop and read by a rule in the reverse sweep, and arrays
shared with a list (issue 23, items 1 and 8).

Item 1: a block that writes into an array created in a loop records the array's previous
iteration's contents at the allocation, between the records of the statements before and
after it.  That record was put first in the block's list of records, so the adjoint popped
it out of order when an earlier statement of the block recorded something too: with two
matrices made by ``np.zeros`` in a loop body and multiplied (GradBench's hand-tracking
model), only the last iteration's gradient was right.  Each case is checked against
central finite differences on both targets, forward (``zyg.jvp``) against reverse, and the
argument is left unchanged.

Item 8: a Python list holds the appended array itself, zyg's list a copy.  A write into an
appended array after the append (through any view or its base), or into a list element,
raises ``zyg.UnsupportedSyntax`` at the write; the uses that agree stay differentiated.
``np.asarray(a)`` of an array is ``a`` (a write through either name is seen by the other),
and ``np.asarray(list)`` is a new array.
"""
from __future__ import annotations

import linecache
import math

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")


# -- item 1: arrays made in a loop, then read by a rule ----------------------------------
def rot(tx, tz):
    rx = np.zeros((3, 3))
    rx[0, 0] = 1.0
    rx[1, 1] = math.cos(tx)
    rx[2, 1] = math.sin(tx)
    rx[1, 2] = -math.sin(tx)
    rx[2, 2] = math.cos(tx)
    rz = np.zeros((3, 3))
    rz[0, 0] = math.cos(tz)
    rz[1, 0] = math.sin(tz)
    rz[0, 1] = -math.sin(tz)
    rz[1, 1] = math.cos(tz)
    rz[2, 2] = 1.0
    return rz @ rx


def reported(theta, M):
    """The reduction in the issue (the helper without the -sin/cos entries)."""
    s = 0.0
    for b in range(M.shape[0]):
        rx = np.zeros((3, 3)); rx[0, 0] = 1.0; rx[1, 1] = math.cos(theta[b]); rx[2, 1] = math.sin(theta[b])  # noqa: E702
        rz = np.zeros((3, 3)); rz[0, 0] = math.cos(theta[b + 3]); rz[1, 0] = math.sin(theta[b + 3])  # noqa: E702
        rz[2, 2] = 1.0
        s += np.sum((rz @ rx) * M[b])
    return s


def helper_sum(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        s += np.sum(rot(theta[b], theta[b + 3]) * M[b])
    return s


def dot_sum(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        a = np.zeros((3, 3))
        a[0, 1] = theta[b]
        a[2, 2] = theta[b] * theta[b + 3]
        c = np.ones((3, 3))
        c[1, 0] = math.exp(theta[b + 3])
        s += np.sum(np.dot(c, a) * M[b])
    return s


def outer_matvec(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        u = np.zeros(3)
        u[0] = theta[b]
        u[2] = 1.0
        v = np.zeros(3)
        v[1] = theta[b + 3]
        v[0] = theta[b]
        A = np.zeros((3, 3))
        A[0, 0] = theta[b]
        A[1, 2] = theta[b + 3]
        s += np.sum(np.outer(u, v) * M[b]) + np.sum((A @ v) * M[b, 0])
    return s


def chain(theta, M):
    """The accumulated product R = R @ rot(...) of forward kinematics."""
    R = np.eye(3)
    for b in range(M.shape[0]):
        R = R @ rot(theta[b], theta[b + 3])
    return np.sum(R * M[0])


def empty_filled(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        e = np.empty((3, 3))
        for i in range(3):
            for j in range(3):
                e[i, j] = theta[b] * (i + 1) + theta[b + 3] * j
        s += np.sum((e @ e) * M[b])
    return s


def branch_alloc(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        a = np.eye(3)
        if theta[b] > 0.0:
            c = np.zeros((3, 3))
            c[0, 0] = theta[b]
            c[1, 2] = theta[b + 3]
            a = c @ c + a
        s += np.sum(a * M[b])
    return s


def nested(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        for k in range(2):
            a = np.zeros((3, 3))
            a[0, 0] = theta[b] + k
            a[1, 0] = theta[b + 3]
            a[2, 2] = theta[b] * k
            c = np.zeros((3, 3))
            c[0, 1] = theta[b + 3] - k
            c[1, 1] = 1.0
            s += np.sum((a @ c) * M[b])
    return s


def while_alloc(theta, M):
    s = 0.0
    b = 0
    while b < M.shape[0]:
        a = np.zeros((3, 3))
        a[0, 0] = theta[b]
        a[1, 0] = theta[b + 3]
        a[0, 2] = 1.0
        c = np.zeros((3, 3))
        c[0, 1] = theta[b + 3]
        c[1, 1] = theta[b]
        s += np.sum((a @ c) * M[b])
        b += 1
    return s


def scalar_read(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        rx = np.zeros((3, 3))
        rx[1, 1] = math.cos(theta[b])
        rx[0, 0] = theta[b + 3]
        rz = np.zeros((3, 3))
        rz[0, 0] = math.sin(theta[b + 3])
        rz[1, 1] = theta[b]
        s += rx[1, 1] * rz[0, 0] * theta[b] + rx[0, 0] * rz[1, 1]
    return s


def euler(a, b, c):
    rx = np.zeros((3, 3))
    rx[0, 0] = 1.0
    rx[1, 1] = math.cos(a)
    rx[1, 2] = -math.sin(a)
    rx[2, 1] = math.sin(a)
    rx[2, 2] = math.cos(a)
    ry = np.zeros((3, 3))
    ry[0, 0] = math.cos(b)
    ry[0, 2] = math.sin(b)
    ry[1, 1] = 1.0
    ry[2, 0] = -math.sin(b)
    ry[2, 2] = math.cos(b)
    rz = np.zeros((3, 3))
    rz[0, 0] = math.cos(c)
    rz[0, 1] = -math.sin(c)
    rz[1, 0] = math.sin(c)
    rz[1, 1] = math.cos(c)
    rz[2, 2] = 1.0
    return rz @ ry @ rx


def hand_fk(theta, bones):
    """GradBench-ht-like forward kinematics: each bone's rotation, built by a helper from
    three of theta's angles, composed along the chain; the joint positions are fitted to
    targets."""
    R = np.eye(3)
    p = np.zeros(3)
    err = 0.0
    for k in range(bones.shape[0]):
        R = R @ euler(theta[3 * k], theta[3 * k + 1], theta[3 * k + 2])
        p = p + R @ bones[k, 0]
        d = p - bones[k, 1]
        err += np.dot(d, d)
    return err


LOOPS = [reported, helper_sum, dot_sum, outer_matvec, chain, empty_filled, branch_alloc, nested,
         while_alloc, scalar_read]


def fd_array(f, x, *rest, h=1e-6):
    g = np.empty_like(x)
    for i in range(x.size):
        up, dn = x.copy(), x.copy()
        up.flat[i] += h
        dn.flat[i] -= h
        g.flat[i] = (f(up, *rest) - f(dn, *rest)) / (2 * h)
    return g


def check(f, x, rest, target, rtol=1e-6):
    keep = x.copy()
    y, g = zyg.value_and_grad(f, target=target)(x, *rest)
    assert np.array_equal(x, keep), "the gradient call changed its argument"
    assert y == pytest.approx(f(x, *rest), rel=1e-12)
    want = fd_array(f, x, *rest)
    np.testing.assert_allclose(g, want, rtol=rtol, atol=rtol * max(1.0, abs(y)))
    v = np.random.default_rng(3).standard_normal(x.shape)
    y2, t = zyg.jvp(f, (x,) + tuple(rest), (v,) + (None,) * len(rest), target=target)
    assert y2 == pytest.approx(y, rel=1e-12)
    assert t == pytest.approx(float(np.dot(g.ravel(), v.ravel())), rel=1e-10, abs=1e-12)
    return g


RNG = np.random.default_rng(1)
THETA = RNG.uniform(0.2, 1.0, 6)
MS = RNG.standard_normal((3, 3, 3))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", LOOPS, ids=lambda f: f.__name__)
def test_arrays_made_in_a_loop_then_multiplied(f, target):
    check(f, THETA.copy(), (MS,), target)


@pytest.mark.parametrize("target", TARGETS)
def test_every_iteration_of_the_reported_case_gets_its_gradient(target):
    g = zyg.grad(reported, target=target)(THETA.copy(), MS)
    # d/d theta[b] of sum((rz @ rx) * M[b]) by hand: rx depends on theta[b], rz on theta[b+3]
    want = np.zeros(6)
    for b in range(3):
        tx, tz = THETA[b], THETA[b + 3]
        rx = np.zeros((3, 3)); rx[0, 0] = 1.0; rx[1, 1] = math.cos(tx); rx[2, 1] = math.sin(tx)  # noqa: E702
        rz = np.zeros((3, 3)); rz[0, 0] = math.cos(tz); rz[1, 0] = math.sin(tz); rz[2, 2] = 1.0  # noqa: E702
        drx = np.zeros((3, 3)); drx[1, 1] = -math.sin(tx); drx[2, 1] = math.cos(tx)  # noqa: E702
        drz = np.zeros((3, 3)); drz[0, 0] = -math.sin(tz); drz[1, 0] = math.cos(tz)  # noqa: E702
        want[b] = np.sum((rz @ drx) * MS[b])
        want[b + 3] = np.sum((drz @ rx) * MS[b])
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_hand_forward_kinematics(target):
    rng = np.random.default_rng(7)
    bones = rng.standard_normal((4, 2, 3))
    theta = rng.uniform(-1.0, 1.0, 12)
    g = check(hand_fk, theta, (bones,), target)
    assert np.all(g != 0.0)          # every bone's angles move some joint


def f32_mats(theta, M):
    s = 0.0
    for b in range(M.shape[0]):
        rx = np.zeros((3, 3), np.float32)
        rx[1, 1] = theta[b]
        rx[0, 0] = 1.0
        rz = np.zeros((3, 3), np.float32)
        rz[0, 0] = theta[b + 3]
        rz[1, 1] = 2.0
        s += np.sum((rz @ rx) * M[b])
    return s


def f64_mats(theta, M):      # f32_mats in float64
    s = 0.0
    for b in range(M.shape[0]):
        rx = np.zeros((3, 3))
        rx[1, 1] = theta[b]
        rx[0, 0] = 1.0
        rz = np.zeros((3, 3))
        rz[0, 0] = theta[b + 3]
        rz[1, 1] = 2.0
        s += np.sum((rz @ rx) * M[b])
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_float32_arrays_made_in_a_loop(target):
    g = zyg.grad(f32_mats, target=target)(THETA.copy(), MS)
    # float32 matrices: the float64 program's derivative, to float32 rounding (a few ulps
    # of float32, about 1e-7, in each of the few terms)
    np.testing.assert_allclose(g, fd_array(f64_mats, THETA, MS), rtol=1e-5, atol=1e-6)
    # and the wrong gradient was far off: theta[0]'s entry took theta[2]'s iteration
    assert abs(g[0] - fd_array(f64_mats, THETA, MS)[0]) < 1e-5


# -- item 8: arrays shared with a list --------------------------------------------------
def append_then_write(x):
    b = x.copy()
    out = [b]
    b[0] = 3 * b[0]
    return np.sum(np.array(out) ** 2)


def write_through_view(x):
    b = x.copy()
    out = [b]
    c = b[0:1]
    c[0] = 3 * c[0]
    return np.sum(np.array(out) ** 2)


def write_base_of_row(x):
    A = np.outer(x, x)
    out = []
    out.append(A[0])
    A[0, 1] = 5.0
    return np.sum(np.array(out) ** 2)


def write_list_element(x):
    A = np.outer(x, x)
    out = [A[0] * 1.0, A[1] * 1.0]
    out[0][1] = 5.0
    return np.sum(np.array(out) ** 2)


def write_element_by_name(x):
    out = [x * 1.0, x * 2.0]
    r = out[0]
    r[1] = 5.0
    return np.sum(np.array(out))


def appended_twice(x):
    b = x * 2.0
    out = [b, b]
    b *= 3.0
    return np.sum(np.array(out) ** 2)


def loop_then_mutate(x):
    b = x.copy()
    out = []
    for i in range(3):
        out.append(b)
    b[1] = 7.0 * b[0]
    return np.sum(np.stack(out) ** 2)


def write_before_append_in_loop(x):
    b = x.copy()
    out = []
    for i in range(3):
        b[0] = b[0] * 2.0
        out.append(b)
    return np.sum(sum(out) ** 2)


def fresh_then_written(x):
    out = []
    for i in range(3):
        r = np.zeros(2)
        r[0] = x[0] * i
        out.append(r)
        r[1] = x[1]
    return np.sum(np.array(out) ** 2)


def comprehension_then_write(x):
    b = x.copy()
    out = [b for i in range(2)]
    b[0] = 3 * b[0]
    return np.sum(np.array(out) ** 2)


def argument_appended(x):
    out = [x]
    x[0] = 2.0 * x[1]
    return np.sum(np.array(out) ** 2)


REFUSED = [
    (append_then_write, "b[0] = 3 * b[0]", "appended to the list 'out'"),
    (write_through_view, "c[0] = 3 * c[0]", "appended to the list 'out'"),
    (write_base_of_row, "A[0, 1] = 5.0", "appended to the list 'out'"),
    (write_list_element, "out[0][1] = 5.0", "writing into an element of the list 'out'"),
    (write_element_by_name, "r[1] = 5.0", "writing into an element of the list 'out'"),
    (appended_twice, "b *= 3.0", "appended to the list 'out'"),
    (loop_then_mutate, "b[1] = 7.0 * b[0]", "appended to the list 'out'"),
    (write_before_append_in_loop, "b[0] = b[0] * 2.0", "appended to the list 'out'"),
    (fresh_then_written, "r[1] = x[1]", "appended to the list 'out'"),
    (comprehension_then_write, "b[0] = 3 * b[0]", "appended to the list 'out'"),
    (argument_appended, "x[0] = 2.0 * x[1]", "appended to the list 'out'"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, at, words", REFUSED, ids=lambda v: getattr(v, "__name__", None))
def test_writes_into_arrays_a_list_holds_are_refused(f, at, words, target):
    x = np.array([1.0, 2.0])
    for call in (lambda: zyg.grad(f, target=target)(x),
                 lambda: zyg.jvp(f, (x,), (np.ones(2),), target=target)):
        with pytest.raises(zyg.UnsupportedSyntax) as ei:
            call()
        e = ei.value
        assert words in str(e), str(e)
        assert e.filename == __file__
        assert at in linecache.getline(__file__, e.lineno), (e.lineno, str(e))
        assert np.array_equal(x, [1.0, 2.0])


def appended_twice_unwritten(x):
    b = x * 2.0
    out = [b, b]
    return np.sum(np.array(out) ** 2) + np.sum(sum(out) * x)


def fresh_each_iteration(x):
    out = []
    for i in range(3):
        r = np.zeros(2)
        r[0] = x[0] * i
        r[1] = x[1] * x[0] + i
        out.append(r)
    return np.sum(np.array(out) ** 2)


def written_before_append(x):
    b = x.copy()
    b[0] = 3.0 * b[1]
    out = [b, x * b]
    return np.sum(np.asarray(out) ** 2)


def asarray_of_list_is_new(x):
    b = x * 1.0
    out = [b]
    c = np.asarray(out)
    c[0, 0] = 5.0
    return np.sum(np.array(out) ** 2) + np.sum(c * x)


KEPT = [appended_twice_unwritten, fresh_each_iteration, written_before_append, asarray_of_list_is_new]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", KEPT, ids=lambda f: f.__name__)
def test_lists_of_arrays_that_agree_with_python(f, target):
    check(f, np.array([0.7, -1.3]), (), target)


def asarray_alias(x):
    b = x * 1.0
    c = np.asarray(b)
    c[0] = 5.0 * c[0]
    return np.sum(b ** 2)


def asarray_alias_dtype(x):
    b = x * 1.0
    c = np.asarray(b, dtype=np.float64)
    b[1] = 3.0 * c[0]
    return np.sum(c ** 2) + np.sum(np.asarray(b, dtype=np.float64) * x)


def asarray_alias_loop(x):
    b = x * 1.0
    for i in range(3):
        c = np.asarray(b)
        c[0] = c[0] * c[1]
    return np.sum(b ** 2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [asarray_alias, asarray_alias_dtype, asarray_alias_loop],
                         ids=lambda f: f.__name__)
def test_asarray_of_an_array_is_the_array(f, target):
    x = np.array([0.7, -1.3])
    check(f, x, (), target)
    assert zyg.value_and_grad(f, target=target)(np.array([1.0, 2.0]))[0] == f(np.array([1.0, 2.0]))


def stack_of_list(x):
    out = []
    for i in range(3):
        out.append(x * (i + 1.0))
    return np.sum(np.stack(out) ** 2) + np.sum(np.stack(out, axis=0)[1] * x)


@pytest.mark.parametrize("target", TARGETS)
def test_stack_of_a_list(target):
    check(stack_of_list, np.array([0.7, -1.3]), (), target)
