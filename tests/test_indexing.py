"""Advanced indexing (issue 13): integer-array and boolean-mask reads and writes,
``np.where(cond)``, ``np.ndindex`` loops and ``a.flat`` reads, on both targets,
against central finite differences (every element of every float array argument).

Repeated indices: a gather ``x[idx]`` accumulates one contribution per occurrence;
a write ``a[idx] = v`` (and ``a[idx] += v``, which numpy evaluates as
``a[idx] = a[idx] + v``) keeps the last occurrence's value, so only that one gets the
cotangent. The primal values are checked against plain numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(13)
_GRADS = {}


def vg(f, argnums, target):
    key = (f, argnums, target)
    if key not in _GRADS:
        _GRADS[key] = zyg.value_and_grad(f, argnums=argnums, target=target)
    return _GRADS[key]


def fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def fd(f, args, i, h=1e-6):
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


def check(f, args, argnums=0):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    want_val = f(*fresh(args))
    want = [fd(f, args, i) for i in nums]
    for t in TARGETS:
        before = fresh(args)
        val, g = vg(f, argnums, t)(*args)
        for a, b in zip(args, before):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f"{t}: an input array was changed")
        assert val == pytest.approx(want_val, rel=1e-12, abs=1e-12), t
        gs = (g,) if isinstance(argnums, int) else g
        for i, gi, wi in zip(nums, gs, want):
            np.testing.assert_allclose(gi, wi, rtol=1e-6, atol=1e-8, err_msg=f"{t}, argument {i}")


x5 = RNG.uniform(0.2, 1.2, 5)
x6 = np.array([0.3, 0.8, 0.45, 1.1, 0.62, 0.2])
X34 = RNG.uniform(0.2, 1.2, (3, 4))
IDX = np.array([0, 2, 2, 4, -1])       # a repeat, and -1 (the same element as 4)
IDX3 = np.array([2, 0, 2])


# --- integer-array reads ------------------------------------------------------------------
def gather(x, idx):
    return np.sum(x[idx] ** 2 * np.arange(1.0, idx.size + 1.0))


def gather_rows_cols(X, idx):
    return np.sum(X[idx, :] ** 2) + np.sum(X[:, idx] * 3.0) + np.sum(np.sin(X[1, idx]))


def gather_in_loop(x, idx):
    s = 0.0
    for k in range(3):
        s += np.sum(np.exp(x[idx] * (k + 1.0)))
    return s


@pytest.mark.parametrize("f,args", [
    (gather, (x5, IDX)),
    (gather_rows_cols, (X34, IDX3)),
    (gather_in_loop, (x5, IDX)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_integer_array_read(f, args):
    check(f, args)


# --- integer-array writes -------------------------------------------------------------------
def scatter(x, idx):
    a = np.zeros(5)
    a[idx] = x[:idx.size]                  # repeated index: the last value stays
    return np.sum(a * a * np.arange(1.0, 6.0))


def scatter_scalar(x, idx, c):
    a = x.copy()
    a[idx] = c * c
    return np.sum(a * x)


def scatter_add(x, idx):
    a = x.copy()
    a[idx] += x[:idx.size] * 2.0           # numpy: a repeat does not accumulate
    return np.sum(a * a)


def scatter_rows(X, idx, r):
    A = X.copy()
    A[idx, :] = r                          # a row broadcast into the selected rows
    A[:, idx] *= 1.5
    return np.sum(A * X)


def scatter_in_loop(x, idx):
    a = x.copy()
    s = 0.0
    for k in range(3):
        a[idx] = a[idx] * 1.5 + x[k]
        s += np.sum(a[idx] ** 2)
    return s


@pytest.mark.parametrize("f,args,argnums", [
    (scatter, (x5, IDX), 0),
    (scatter_scalar, (x5, IDX, 0.7), (0, 2)),
    (scatter_add, (x5, IDX), 0),
    (scatter_rows, (X34, IDX3, RNG.uniform(0.2, 1.2, 4)), (0, 2)),
    (scatter_in_loop, (x5, IDX), 0),
], ids=lambda v: getattr(v, "__name__", ""))
def test_integer_array_write(f, args, argnums):
    check(f, args, argnums)


def test_repeated_write_primal_follows_numpy():
    def f(x, idx):
        a = x.copy()
        a[idx] += 1.0
        return a
    for t in TARGETS:
        y, _ = zyg.pullback(f, x5, IDX, target=t)
        np.testing.assert_array_equal(y, f(x5, IDX))


# --- boolean masks --------------------------------------------------------------------------
def mask_read(x):
    return np.sum(x[x > 0.5] ** 3)


def mask_read_2d(X):
    return np.sum(np.sqrt(X[X > 0.6]))


def mask_write(x):
    a = x.copy()
    a[a > 0.5] = 0.0
    return np.sum(a * x)


def mask_write_early_return(x):
    # used to generate code numba could not compile (an element kind for the old values)
    if x[0] > 10.0:
        return 0.0
    a = x.copy()
    a[a > 0.5] = 0.0
    return np.sum(a * x)


def mask_write_2d(X):
    A = X * 2.0
    if X[0, 0] > 10.0:
        return 0.0
    A[A > 1.2] = X[X * 2.0 > 1.2] ** 2
    return np.sum(A * A)


def mask_scale_in_loop(x):
    a = x.copy()
    s = 0.0
    for k in range(3):
        a[a > 0.5] *= 0.9
        s += np.sum(a * x)
    return s


@pytest.mark.parametrize("f,args", [
    (mask_read, (x6,)),
    (mask_read_2d, (X34,)),
    (mask_write, (x6,)),
    (mask_write_early_return, (x6,)),
    (mask_write_2d, (X34,)),
    (mask_scale_in_loop, (x6,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_masks(f, args):
    check(f, args)


# --- np.where(cond), np.ndindex, .flat ------------------------------------------------------
def where_indices(x):
    ix = np.where(x > 0.5)
    return np.sum(x[ix[0]] ** 2)


def where_loop(x):
    s = 0.0
    for i in np.where(x > 0.5)[0]:
        s += x[i] * x[i - 1]
    return s


def ndindex_2d(X):
    s = 0.0
    for i, j in np.ndindex(X.shape):
        s += X[i, j] ** 2 * (i + 1) * (j + 2)
    return s


def ndindex_args_break(X):
    s = 0.0
    n, m = X.shape
    for i, j in np.ndindex(n, m):
        if i == 2 and j == 1:
            break
        if j == 0:
            continue
        s += np.sin(X[i, j]) * j
    return s


def flat_iter(X):
    s = 0.0
    for v in X.flat:
        s += v ** 3
    return s


def flat_index(X):
    return X.flat[5] * X.flat[0] + np.sum(X.T.flat[2] * X)


@pytest.mark.parametrize("f,args", [
    (where_indices, (x6,)),
    (where_loop, (x6,)),
    (ndindex_2d, (X34,)),
    (ndindex_args_break, (X34,)),
    (flat_iter, (X34,)),
    (flat_index, (X34,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_where_ndindex_flat(f, args):
    check(f, args)


# --- what is not supported says so, at the user's line ------------------------------------
def two_arrays(X, i, j):
    return np.sum(X[i, j])


def flat_write(X):
    A = X.copy()
    A.flat[2] = 1.0
    return np.sum(A)


@pytest.mark.parametrize("f,args,msg", [
    # two 1-D integer arrays are supported (tests/test_realcode_arrays.py); a 2-D one is not
    (two_arrays, (X34, IDX3.reshape(3, 1), IDX3), "several array parts that are not all 1-D"),
    (flat_write, (X34,), "writing through a.flat"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_errors(f, args, msg):
    for t in TARGETS:
        with pytest.raises(zyg.ZygError) as ei:
            zyg.grad(f, target=t)(*args)
        text = str(ei.value)
        assert msg in text and "test_indexing.py" in text, text
