"""Views of differentiated arrays inside loops (issue 12, item 4).

The shadow of a view is the same view of its base's shadow, so the adjoint applies
the view again: with the view's own indices, as the primal had them where the view
was used. A view rebound in an outer loop (``W = P[2 * k]``) and read in an inner
one used to find its shadow with the *last* iteration's index, so every row but the
last got no gradient (the two-layer LSTM of the issue: layer 0 got zero).

Every case runs on both targets against central finite differences of every element
of every differentiated argument, through ``zyg.value_and_grad`` and through
``zyg.pullback`` (which keeps on the tape what the fused function reads from scope),
and checks that the caller's arrays come back unchanged.
"""
import math

import numpy as np
import pytest

import zyg

RNG = np.random.default_rng(12)
TARGETS = ("python", "cpu")


def _fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _fd(f, args, i, h=1e-6):
    a = args[i]
    if isinstance(a, np.ndarray):
        g = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            up, dn = _fresh(args), _fresh(args)
            up[i][idx] += h
            dn[i][idx] -= h
            g[idx] = (f(*up) - f(*dn)) / (2 * h)
        return g
    up, dn = _fresh(args), _fresh(args)
    up[i] = a + h
    dn[i] = a - h
    return (f(*up) - f(*dn)) / (2 * h)


_BUILT = {}


def _vg(f, nums, target):
    key = (f, nums, target, "vg")
    if key not in _BUILT:
        _BUILT[key] = zyg.value_and_grad(f, argnums=nums, target=target)
    return _BUILT[key]


def check(f, args, argnums=0, rtol=1e-6, atol=1e-8, split=True):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    want_val = f(*_fresh(args))
    want = [_fd(f, _fresh(args), i) for i in nums]
    assert any(np.any(w != 0) for w in want), "a test whose gradient is zero proves little"
    for target in TARGETS:
        before = _fresh(args)
        val, g = _vg(f, nums, target)(*args)
        for x, b in zip(args, before):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, b, err_msg=f"{target}: an input array was changed")
        np.testing.assert_allclose(val, want_val, rtol=1e-12, atol=1e-14, err_msg=f"{target}: value")
        for i, gi, wi in zip(nums, g, want):
            np.testing.assert_allclose(gi, wi, rtol=rtol, atol=atol,
                                       err_msg=f"{target}: d/d(arg {i}) of {f.__name__}")
        if split:
            y, back = zyg.pullback(f, *args, target=target)
            np.testing.assert_allclose(y, want_val, rtol=1e-12, atol=1e-14)
            gb = back(1.0)
            for x, b in zip(args, before):
                if isinstance(x, np.ndarray):
                    np.testing.assert_array_equal(x, b, err_msg=f"{target}: pullback left an input changed")
            for i, wi in zip(nums, want):
                np.testing.assert_allclose(gb[i], wi, rtol=rtol, atol=atol,
                                           err_msg=f"{target} pullback: d/d(arg {i}) of {f.__name__}")


# -- the reproducer of issue 12, item 4 -----------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def layers(main_params, extra_params, state, sequence):
    L2, b = state.shape
    nl = L2 // 2
    st = state.copy()
    x = np.empty(b)
    for j in range(b):
        x[j] = sequence[0, j]
    for ly in range(nl):
        W = main_params[2 * ly]
        B = main_params[2 * ly + 1]
        for j in range(b):
            cel = st[2 * ly + 1, j]
            f = _sig(x[j] * W[j] + B[j])
            cel = cel * f
            hid = math.tanh(cel)
            x[j] = hid
    return x[0]


def layers_elems(main_params, extra_params, state, sequence):
    """The same with main_params[2*ly, j]: the reference the issue compared with."""
    L2, b = state.shape
    nl = L2 // 2
    st = state.copy()
    x = np.empty(b)
    for j in range(b):
        x[j] = sequence[0, j]
    for ly in range(nl):
        for j in range(b):
            cel = st[2 * ly + 1, j]
            f = _sig(x[j] * main_params[2 * ly, j] + main_params[2 * ly + 1, j])
            cel = cel * f
            hid = math.tanh(cel)
            x[j] = hid
    return x[0]


@pytest.mark.parametrize("b", [1, 3])
def test_issue_row_views_of_layers(b):
    mp = RNG.standard_normal((4, 4 if b == 1 else b))
    ep = RNG.standard_normal((3, b))
    st = RNG.standard_normal((4, b))
    sq = RNG.standard_normal((2, b))
    args = (mp, ep, st, sq)
    check(layers, args, 0)
    for t in TARGETS:
        np.testing.assert_allclose(_vg(layers, (0,), t)(*args)[1][0],
                                   _vg(layers_elems, (0,), t)(*args)[1][0], rtol=1e-12, atol=1e-15)


# -- rows ------------------------------------------------------------------------------------
def rows_rebound(A, x):
    """A row view rebound per outer iteration (index not a loop counter), read inside."""
    n, m = A.shape
    s = 0.0
    for k in range(n // 2):
        R = A[n - 1 - 2 * k]
        for j in range(m):
            s = s * 0.7 + R[j] * x[j]
    return s


def rows_rebound_written(A, x):
    """Written through a row view rebound per outer iteration (A is the caller's)."""
    n, m = A.shape
    for k in range(n):
        R = A[(k * 2) % n]
        for j in range(m):
            R[j] = R[j] * x[j] + 0.5 * R[j] * R[j]
    return np.sum(A * A)


def row_view_before_loop(A, x, T):
    """One view, taken before the loops, reused by every iteration."""
    r = A[1]
    s = 0.0
    for t in range(T):
        for j in range(x.shape[0]):
            s = s * 0.9 + r[j] * x[j]
    return s


def row_view_while(A, x):
    """A dispatcher loop (while, no structured nest) rebinding the view."""
    n, m = A.shape
    k = n - 1
    s = 0.0
    while k >= 0:
        R = A[k]
        j = 0
        while j < m:
            s += R[j] * x[j] * (k + 1.0)
            s = s * s * 0.5
            j += 1
        k -= 2
    return s


def row_read_before_write(A, x):
    """A read of the old value through the view, then a write, then a read again."""
    n, m = A.shape
    s = 0.0
    for k in range(n):
        R = A[n - 1 - k]
        for j in range(m):
            v = R[j]
            R[j] = v * v + x[j]
            s += R[j] * v
    return s


def view_of_view(A, x):
    """A slice of a row view, both rebound per iteration."""
    n, m = A.shape
    s = 0.0
    for k in range(n):
        R = A[n - 1 - k]
        S = R[1:m]
        for j in range(m - 1):
            s += S[j] * x[j] * (k + 1.0)
            S[j] = S[j] * 0.5
    return s + np.sum(A)


def mat_of_3d(T3, x):
    """A matrix view of a 3-D array rebound per outer iteration."""
    p, n, m = T3.shape
    s = 0.0
    for k in range(p):
        M = T3[p - 1 - k]
        for i in range(n):
            for j in range(m):
                s += M[i, j] * x[j] * M[i, j]
    return s


@pytest.mark.parametrize("f,args,argnums", [
    (rows_rebound, lambda: (RNG.uniform(0.2, 1.2, (6, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (rows_rebound_written, lambda: (RNG.uniform(0.2, 1.2, (3, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (row_view_before_loop, lambda: (RNG.uniform(0.2, 1.2, (3, 4)), RNG.uniform(0.2, 1.2, 4), 3), (0, 1)),
    (row_view_while, lambda: (RNG.uniform(0.2, 0.6, (5, 3)), RNG.uniform(0.2, 0.6, 3)), (0, 1)),
    (row_read_before_write, lambda: (RNG.uniform(0.2, 1.2, (3, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (view_of_view, lambda: (RNG.uniform(0.2, 1.2, (3, 4)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (mat_of_3d, lambda: (RNG.uniform(0.2, 1.2, (3, 2, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_rows(f, args, argnums):
    check(f, args(), argnums)


# -- slices, columns, transposes, reshapes ---------------------------------------------------
def slices_rebound(a, w):
    """A slice a[i:i+3] per iteration, with a start that is not the loop counter."""
    n = a.shape[0]
    s = 0.0
    for k in range(n - 3):
        S = a[n - 3 - k:n - k]
        for j in range(3):
            s = s * 0.8 + S[j] * w[j]
    return s


def slices_written(a, w):
    n = a.shape[0]
    for k in range(n - 2):
        S = a[n - 2 - k:n - k]
        S[0] = S[0] * w[0] + S[1] * S[1] * w[1]
    return np.sum(a * a)


def columns_rebound(A, w):
    """Column views A[:, j] rebound per outer iteration."""
    n, m = A.shape
    s = 0.0
    for k in range(m):
        c = A[:, m - 1 - k]
        for i in range(n):
            s = s * 0.9 + c[i] * c[i] * w[i]
    return s


def columns_written(A, w):
    n, m = A.shape
    for k in range(m - 1):
        c = A[:, k + 1]
        p = A[:, k]
        for i in range(n):
            c[i] = c[i] * w[i] + p[i] * p[i]
    return np.sum(A * A)


def transpose_rows(A, w):
    """Rows of A.T (columns of A), taken inside the loop."""
    n, m = A.shape
    s = 0.0
    T = A.T
    for k in range(m):
        r = T[m - 1 - k]
        for i in range(n):
            s += r[i] * w[i] * (k + 1.0)
            s = s * s * 0.25
    return s


def transpose_written(A, w):
    n, m = A.shape
    for k in range(n):
        T = A.T
        for j in range(m):
            T[j, n - 1 - k] = T[j, n - 1 - k] * w[j] + T[j, k] * 0.5
    return np.sum(A * A * A)


def reshape_rows(a, w):
    """Rows of a reshaped vector, rebound per outer iteration."""
    n = w.shape[0]
    M = a.reshape((a.shape[0] // n, n))
    s = 0.0
    for k in range(M.shape[0]):
        r = M[M.shape[0] - 1 - k]
        for j in range(n):
            s = s * 0.7 + r[j] * w[j]
    return s


def reshape_in_loop(a, w):
    """A reshape taken inside a loop, written through."""
    n = w.shape[0]
    for k in range(2):
        M = a.reshape((a.shape[0] // n, n))
        for i in range(M.shape[0]):
            M[i, k] = M[i, k] * w[i % n] + M[i, k + 1]
    return np.sum(a * a)


@pytest.mark.parametrize("f,args,argnums", [
    (slices_rebound, lambda: (RNG.uniform(0.2, 1.2, 7), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (slices_written, lambda: (RNG.uniform(0.2, 1.2, 6), RNG.uniform(0.2, 1.2, 2)), (0, 1)),
    (columns_rebound, lambda: (RNG.uniform(0.2, 1.2, (3, 4)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (columns_written, lambda: (RNG.uniform(0.2, 1.2, (3, 4)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (transpose_rows, lambda: (RNG.uniform(0.2, 0.8, (3, 4)), RNG.uniform(0.2, 0.8, 3)), (0, 1)),
    (transpose_written, lambda: (RNG.uniform(0.2, 1.2, (3, 4)), RNG.uniform(0.2, 1.2, 4)), (0, 1)),
    (reshape_rows, lambda: (RNG.uniform(0.2, 1.2, 12), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (reshape_in_loop, lambda: (RNG.uniform(0.2, 1.2, 12), RNG.uniform(0.2, 1.2, 4)), (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_slices_columns_transposes_reshapes(f, args, argnums):
    check(f, args(), argnums)


# -- views as operands of numpy rules, slice assignment, in-place updates ---------------------
def rule_on_rows(A, x):
    """np.dot / np.sum of a row view whose index is not a loop counter."""
    n, m = A.shape
    s = 0.0
    for k in range(n):
        r = A[(3 * k + 1) % n]
        s += np.dot(r, x) * (k + 1.0) + np.sum(r * r)
    return s


def rule_on_rows_nested(A, x):
    n, m = A.shape
    s = 0.0
    for k in range(n // 2):
        r = A[2 * k + 1]
        q = A[2 * k]
        for t in range(2):
            s = s * 0.5 + np.sum(np.tanh(r * x) * q)
    return s


def assign_from_view(A, x):
    """B[i] = A[k] (the value's shadow is a view) and B[i] += A[k]."""
    n, m = A.shape
    B = np.zeros((n, m))
    for i in range(n):
        k = (2 * i + 1) % n
        B[i] = A[k]
        B[i] += A[n - 1 - k] * x
    return np.sum(B * B * x)


def inplace_into_view(A, x):
    """acc += row view; row view *= s, inside loops."""
    n, m = A.shape
    acc = np.zeros(m)
    for k in range(n):
        r = A[n - 1 - k]
        acc += r * x
        r *= x[k % m]
    return np.sum(acc * acc) + np.sum(A)


def view_through_branch(A, x):
    """A view chosen in a branch inside a loop: a block parameter that receives a view."""
    n, m = A.shape
    s = 0.0
    for k in range(n):
        if x[k % m] > 0.5:
            r = A[n - 1 - k]
        else:
            r = A[(k + 1) % n]
        for j in range(m):
            s = s * 0.8 + r[j] * x[j]
    return s


def view_carried(A, x):
    """An array carried by a loop whose value on the back edge is a fresh row view."""
    n, m = A.shape
    h = A[0]
    s = 0.0
    for k in range(1, n):
        s += np.sum(h * x)
        h = A[n - k]
    return s + np.sum(h * h)


@pytest.mark.parametrize("f,args,argnums", [
    (rule_on_rows, lambda: (RNG.uniform(0.2, 1.2, (4, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (rule_on_rows_nested, lambda: (RNG.uniform(0.2, 1.2, (4, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (assign_from_view, lambda: (RNG.uniform(0.2, 1.2, (3, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (inplace_into_view, lambda: (RNG.uniform(0.2, 1.2, (4, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
    (view_through_branch, lambda: (RNG.uniform(0.2, 1.2, (4, 3)), np.array([0.3, 0.9, 0.7])), (0, 1)),
    (view_carried, lambda: (RNG.uniform(0.2, 1.2, (4, 3)), RNG.uniform(0.2, 1.2, 3)), (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_views_as_operands(f, args, argnums):
    check(f, args(), argnums)


# -- local arrays that become active only through a later write ------------------------------
def local_rows_filled(x, A):
    """Row views of a local zeros array, written with active values, read later."""
    n, m = A.shape
    B = np.zeros((n, m))
    for i in range(n):
        row = B[n - 1 - i]
        for j in range(m):
            row[j] = x[j] * A[i, j]
    s = 0.0
    for i in range(n):
        row = B[(i + 1) % n]
        for j in range(m):
            s = s * 0.9 + row[j] * row[j]
    return s


def local_view_read_before_active(x, A):
    """The view is taken (and read) before the array holds anything active."""
    n, m = A.shape
    B = np.ones((n, m))
    s = 0.0
    for i in range(n):
        row = B[n - 1 - i]
        for j in range(m):
            s += row[j] * x[j]
            row[j] = row[j] * x[j] + A[i, j]
        s = s * 0.5
    return s + np.sum(B * B)


@pytest.mark.parametrize("f,args,argnums", [
    (local_rows_filled, lambda: (RNG.uniform(0.2, 1.2, 3), RNG.uniform(0.2, 1.2, (4, 3))), (0, 1)),
    (local_view_read_before_active, lambda: (RNG.uniform(0.2, 1.2, 3), RNG.uniform(0.2, 1.2, (3, 3))),
     (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_local_views(f, args, argnums):
    check(f, args(), argnums)
