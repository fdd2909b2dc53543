"""Arrays: reads, writes that rewind, creation, numpy functions, aliasing and views.

Every case is checked on both targets against central finite differences (every
element of every differentiated array), and every call is checked to leave the
caller's arrays exactly as they were (the contract of docs/arrays.md).
"""
import math

import numpy as np
import pytest

import zyg

RNG = np.random.default_rng(7)


def vec(n, lo=0.2, hi=1.2):
    return RNG.uniform(lo, hi, n)


def mat(n, m, lo=0.2, hi=1.2):
    return RNG.uniform(lo, hi, (n, m))


def fd_grad(f, args, i, h=1e-6):
    """Central differences of f w.r.t. argument i (an array or a float)."""
    a = args[i]
    if isinstance(a, np.ndarray):
        g = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            up = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
            dn = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
            up[i][idx] += h
            dn[i][idx] -= h
            g[idx] = (f(*up) - f(*dn)) / (2 * h)
        return g
    up = list(args)
    dn = list(args)
    up[i] = a + h
    dn[i] = a - h
    return (f(*[x.copy() if isinstance(x, np.ndarray) else x for x in up]) -
            f(*[x.copy() if isinstance(x, np.ndarray) else x for x in dn])) / (2 * h)


def fresh(args):
    return [x.copy() if isinstance(x, np.ndarray) else x for x in args]


def check(f, args, argnums=0, rtol=1e-6, atol=1e-8, targets=("python", "cpu")):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    want_val = f(*fresh(args))
    want = [fd_grad(f, fresh(args), i) for i in nums]
    for target in targets:
        before = fresh(args)
        val, g = zyg.value_and_grad(f, argnums=argnums, target=target)(*args)
        # the contract: the caller's arrays are left exactly as they were
        for x, b in zip(args, before):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, b, err_msg=f"{target}: an input array was changed")
        gs = (g,) if isinstance(argnums, int) else g
        assert val == pytest.approx(want_val, rel=1e-12, abs=1e-12), target
        for i, gi, wi in zip(nums, gs, want):
            if isinstance(args[i], np.ndarray):
                assert isinstance(gi, np.ndarray) and gi.shape == args[i].shape and gi.dtype == args[i].dtype
            np.testing.assert_allclose(gi, wi, rtol=rtol, atol=atol, err_msg=f"{target}, argument {i}")


# --- reads ----------------------------------------------------------------------------------
def read_elems(a, n):
    s = 0.0
    for i in range(n):
        s += a[i] * a[i] + math.sin(a[-1 - i])
    return s


def read_2d(a):
    s = 0.0
    n, m = a.shape
    for i in range(n):
        for j in range(m):
            s += a[i, j] * (i + 1) * a[i, m - 1 - j]
    return s


def read_slices(a):
    b = a[1:7:2]
    c = a[::-1]
    return np.sum(b * b) + np.sum(c[:3] * a[2:5]) + a.size + len(a)


def read_rows(a):
    s = 0.0
    for i in range(a.shape[0]):
        r = a[i, :]
        s += np.sum(r * r) * (i + 1.0)
    col = a[:, 1]
    return s + np.sum(np.exp(col))


def iterate(a, b):
    s = 0.0
    for v in a:
        s += v * v
    for i, v in enumerate(b):
        s += v * i
    for x, y in zip(a, b):
        s += x * y
    return s


def rows_iter(a):
    s = 0.0
    for row in a:
        s += np.sum(row) * row[0]
    return s


@pytest.mark.parametrize("f,args,argnums", [
    (read_elems, (vec(6), 6), 0),
    (read_2d, (mat(3, 4),), 0),
    (read_slices, (vec(8),), 0),
    (read_rows, (mat(3, 4),), 0),
    (iterate, (vec(5), vec(5)), (0, 1)),
    (rows_iter, (mat(3, 2),), 0),
], ids=lambda v: getattr(v, "__name__", ""))
def test_reads(f, args, argnums):
    check(f, args, argnums)


# --- writes ----------------------------------------------------------------------------------
def write_elems(a, x):
    a[0] = x * x
    a[2] = a[1] * x
    return np.sum(a * a)


def write_2d(a, x):
    n, m = a.shape
    for i in range(n):
        a[i, 0] = a[i, m - 1] * x
    return np.sum(a * a)


def write_slice(a, b):
    n = a.shape[0]
    a[1:n] = b[0:n - 1] * a[0:n - 1]
    return np.sum(a * b)


def aug_elems(a, x):
    for i in range(a.shape[0]):
        a[i] += x * i
        a[i] -= 0.5 * x
        a[i] *= x
        a[i] /= 1.0 + x
    return np.sum(a * a)


def aug_whole(a, b, s):
    a += b
    a *= s
    a -= b * b
    a /= s + 1.0
    return np.sum(a * a)


def overwrite_same(a, x):
    t = np.zeros(3)
    for k in range(10):
        t[1] = t[1] * x + a[k % a.shape[0]]
        a[0] = a[0] * x
    return t[1] + np.sum(a)


def local_writes(a):
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = a[i] * a[i]
    for i in range(1, a.shape[0]):
        out[i] = out[i] + out[i - 1]
    return np.sum(out)


def alias_name(a, x):
    b = a
    b[1] = x * a[0]
    return a[1] * b[1] + np.sum(a)


def alias_view(a, x):
    v = a[1:4]
    v[0] = x * a[0]          # writes a[1]
    v *= x
    return np.sum(a * a) + v[2]


def view_2d_row(a, x):
    r = a[1, :]
    r[0] = x
    r += a[0, :]
    return np.sum(a * a)


def read_then_overwritten(x, k):
    """A pullback reads an array (k * a) that a later statement overwrites: the adjoint
    must see the array as it was (found in 2026-11: the write was not recorded)."""
    a = np.zeros(3)
    a[1] = x
    y = np.sum(k * a)
    a[1] = 7.0 * x
    return y + np.sum(a)


def loop_alloc_filled(u0, k, T):
    """An array allocated in a loop, filled by an inner loop and read by a pullback: each
    iteration's contents must be restored in the backward pass (same bug)."""
    u = u0.copy()
    n = u.shape[0]
    for t in range(T):
        lap = np.zeros_like(u)
        for i in range(n):
            lap[i] = u[i] * u[i]
        u = u + k * lap
    return np.sum(u)


def row_int_index_written(m, x):
    """A row taken with one integer index (e[1], not e[1, :]) shares the matrix's memory:
    a write through it must reach the matrix's gradient (found by
    tests/test_property_mutation.py: x was not even active)."""
    e = m.copy()
    r = e[1]
    r[0] = x
    r *= x
    return np.sum(e * e)


def row_int_index_in_loop(m, x):
    """Rows e[i] of a matrix read by a pullback, then written through in a nested loop."""
    e = m.copy()
    s = 0.0
    for i in range(3):
        row = e[i]
        s = s + np.sum(x * row)
        for j in range(2):
            row[j] = row[j] * x + 0.5
    return s + np.sum(e * e)


def inactive_factor_in_branch_loop(m, x):
    """k * tmp with tmp a written, inactive array: the backward code of k reads tmp only,
    but finding k's value for it (a read of m) came after the tape was planned and
    tripped an internal assertion (found by tests/test_property_mutation.py)."""
    s = 0.0
    if x > 0.3:
        for i in range(2):
            tmp = np.ones(4)
            for j in range(4):
                tmp[j] = tmp[j] * (0.5 + j)
            s = s + np.sum(m[0, 1] * tmp) * x
    return s


@pytest.mark.parametrize("f,args,argnums", [
    (read_then_overwritten, (2.0, 3.0), (0, 1)),
    (inactive_factor_in_branch_loop, (mat(3, 4), 0.7), (0, 1)),
    (row_int_index_written, (mat(3, 4), 0.7), (0, 1)),
    (row_int_index_in_loop, (mat(3, 4), 0.7), (0, 1)),
    (loop_alloc_filled, (vec(5), 0.2, 3), (0, 1)),
    (write_elems, (vec(4), 0.7), (0, 1)),
    (write_2d, (mat(3, 3), 0.9), (0, 1)),
    (write_slice, (vec(6), vec(6)), (0, 1)),
    (aug_elems, (vec(4), 0.8), (0, 1)),
    (aug_whole, (vec(4), vec(4), 1.3), (0, 1, 2)),
    (overwrite_same, (vec(4), 0.9), (0, 1)),
    (local_writes, (vec(5),), 0),
    (alias_name, (vec(4), 0.6), (0, 1)),
    (alias_view, (vec(6), 0.6), (0, 1)),
    (view_2d_row, (mat(3, 4), 0.6), (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_writes(f, args, argnums):
    check(f, args, argnums)


# --- the acceptance workloads: stencil, particles, dynamic programming ----------------------
def heat(u0, alpha, steps):
    """Explicit 1-D heat equation, updated in place (a temporary row per step)."""
    u = u0.copy()
    n = u.shape[0]
    tmp = np.zeros(n)
    for t in range(steps):
        for i in range(1, n - 1):
            tmp[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        for i in range(1, n - 1):
            u[i] = tmp[i]
    return np.sum(u * u)


def heat_swap(u0, alpha, steps):
    """The same with two buffers swapped every step (double buffering)."""
    u = u0.copy()
    v = u0.copy()
    n = u.shape[0]
    for t in range(steps):
        for i in range(1, n - 1):
            v[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    return np.sum(u * u)


def heat_inplace_arg(u, alpha, steps):
    """In place on the argument itself: the gradient call must rewind it."""
    n = u.shape[0]
    for t in range(steps):
        left = u[0]
        for i in range(1, n - 1):
            new = u[i] + alpha * (left - 2.0 * u[i] + u[i + 1])
            left = u[i]
            u[i] = new
    return np.sum(u * u)


def particles(x0, v0, k, dt, steps):
    """Explicit Euler for particles on springs; positions written into a preallocated array."""
    n = x0.shape[0]
    xs = np.zeros((steps + 1, n))
    x = x0.copy()
    v = v0.copy()
    xs[0, :] = x
    for t in range(steps):
        for i in range(n):
            f = -k * x[i]
            if i > 0:
                f += 0.1 * (x[i - 1] - x[i])
            v[i] += dt * f
        for i in range(n):
            x[i] += dt * v[i]
        xs[t + 1, :] = x
    return np.sum(xs * xs)


def dp_softmin_path(c):
    """A DP table filled in place: soft-min path cost through a grid of costs."""
    n, m = c.shape
    d = np.zeros((n, m))
    d[0, 0] = c[0, 0]
    for j in range(1, m):
        d[0, j] = d[0, j - 1] + c[0, j]
    for i in range(1, n):
        d[i, 0] = d[i - 1, 0] + c[i, 0]
        for j in range(1, m):
            a = d[i - 1, j]
            b = d[i, j - 1]
            mn = min(a, b)
            d[i, j] = c[i, j] + mn - math.log(math.exp(mn - a) + math.exp(mn - b))
    return d[n - 1, m - 1]


@pytest.mark.parametrize("f,args,argnums", [
    (heat, (vec(8), 0.2, 30), (0, 1)),
    (heat_swap, (vec(8), 0.2, 31), (0, 1)),
    (heat_inplace_arg, (vec(8), 0.2, 30), (0, 1)),
    (particles, (vec(4), vec(4), 1.5, 0.05, 20), (0, 1, 2, 3)),
    (dp_softmin_path, (mat(4, 5),), 0),
], ids=lambda v: getattr(v, "__name__", ""))
def test_simulations(f, args, argnums):
    check(f, args, argnums)


# --- creation -------------------------------------------------------------------------------
def creation(a, x):
    z = np.zeros(a.shape[0]) + x
    o = np.ones(3) * x
    e = np.empty(2)
    e[0] = x
    e[1] = 2.0 * x
    zl = np.zeros_like(a)
    zl[0] = a[1] * x
    el = np.empty_like(a)
    for i in range(a.shape[0]):
        el[i] = a[i] * 3.0
    f = np.full(4, x)
    c = a.copy()
    c[0] = x
    arr = np.array([x, a[0], x * a[1]])
    r = np.arange(a.shape[0]) * 1.0
    ls = np.linspace(x, 2.0 * x, 5)
    return (np.sum(z * a) + np.sum(o) + np.sum(e * e) + np.sum(zl) + np.sum(el * a) + np.sum(f * f)
            + np.sum(c * c) + np.sum(arr * arr) + np.sum(r * a) + np.sum(ls * ls))


def full_2d(x, n):
    f = np.full((n, 3), x)
    z = np.zeros((n, 3))
    z[1, 2] = x
    return np.sum(f * f) + np.sum(z)


def test_creation():
    check(creation, (vec(4), 0.7), (0, 1))
    check(full_2d, (0.7, 3), 0)


# --- numpy functions ----------------------------------------------------------------------------
def elementwise(a, b, s):
    return np.sum(a * b + s / a - b ** 2 + (a - s) * 2.0 + -a + np.sqrt(b) * s + b / (a + 2.0))


def broadcast_rows(A, r, c):
    return np.sum((A * r + c[:, None]) ** 2) + np.sum(A - r)


def broadcast_scalar(A, s):
    return np.sum(np.tanh(A * s + s))


UNARY_FNS = ["sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "arctan",
             "arcsin", "log1p", "expm1", "square", "abs", "absolute", "cbrt", "log2", "log10",
             "reciprocal", "negative", "exp2"]


def make_unary(name):
    fn = getattr(np, name) if name != "abs" else abs
    def unary(a):
        return np.sum(fn(a) * a)
    return unary


def reductions(A):
    return (np.sum(A) + np.sum(np.sum(A, axis=0) ** 2) + np.sum(np.sum(A, axis=1) ** 3)
            + np.mean(A) + np.sum(np.mean(A, axis=0) ** 2) + np.sum(np.mean(A, axis=-1) ** 2)
            + np.prod(A) + np.sum(np.prod(A, axis=1)) + np.sum(np.prod(A, axis=0) ** 2))


def maxmin(A, v):
    return (np.max(A) * 2.0 - np.min(A) + np.sum(np.max(A, axis=0)) + np.sum(np.min(A, axis=1) ** 2)
            + v[np.argmax(v)] * 3.0 + A.max() + v.min())


def linalg(A, B, v, w):
    return (np.dot(v, w) + np.sum(A @ v) + np.sum(v @ A) + np.sum((A @ B) ** 2)
            + np.sum(np.dot(A, B)) + np.sum(np.outer(v, w) * A) + v @ w)


def shapes(A, v):
    At = A.T
    r = np.reshape(A, (A.size,))
    r2 = A.reshape(2, 6)
    return np.sum(At * At[:, 0:1]) + np.sum(np.transpose(A) ** 3) + np.sum(r * v) + np.sum(r2[1, :]) * 2.0


def selection(a, b):
    return (np.sum(np.where(a > 0.6, a * b, b * b)) + np.sum(np.maximum(a, b) ** 2)
            + np.sum(np.minimum(a, 0.7) * b) + np.sum(np.clip(a, 0.4, 0.9) * b))


def norms_and_cumsum(a, A):
    return np.linalg.norm(a) + np.sum(np.cumsum(a) ** 2) + np.sum(np.cumsum(A, axis=1) ** 2) \
        + np.sum(np.cumsum(A, axis=0) * A) + np.sum(np.exp(a) * np.log(a))


def joins(a, b, A):
    c = np.concatenate((a, b))
    s = np.stack((a, b))
    s1 = np.stack((a, b), axis=1)
    C = np.concatenate((A, A * 2.0), axis=1)
    return np.sum(c * c) + np.sum(s[0, :] * s[1, :]) + np.sum(s1 ** 3) + np.sum(C * C)


@pytest.mark.parametrize("f,args,argnums", [
    (elementwise, (vec(4), vec(4), 0.8), (0, 1, 2)),
    (broadcast_rows, (mat(3, 4), vec(4), vec(3)), (0, 1, 2)),
    (broadcast_scalar, (mat(2, 3), 0.4), (0, 1)),
    (reductions, (mat(3, 4),), 0),
    (maxmin, (mat(3, 4), vec(5)), (0, 1)),
    (linalg, (mat(3, 3), mat(3, 3), vec(3), vec(3)), (0, 1, 2, 3)),
    (shapes, (mat(3, 4), vec(12)), (0, 1)),
    (selection, (vec(6), vec(6)), (0, 1)),
    (norms_and_cumsum, (vec(5), mat(3, 4)), (0, 1)),
    (joins, (vec(3), vec(3), mat(2, 2)), (0, 1, 2)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_numpy_functions(f, args, argnums):
    check(f, args, argnums)


@pytest.mark.parametrize("name", UNARY_FNS)
def test_unary_array_functions(name):
    a = vec(4, 0.2, 0.9)
    check(make_unary(name), (a,), 0, targets=("python", "cpu") if name in ("sin", "exp", "abs", "cbrt")
          else ("python",))


# --- dtypes and 3-D -------------------------------------------------------------------------
def cube(T, x):
    s = 0.0
    for i in range(T.shape[0]):
        for j in range(T.shape[1]):
            for k in range(T.shape[2]):
                s += T[i, j, k] * T[i, j, k] * x
    T[0, 0, 0] = x
    return s + np.sum(T * T)


def test_3d():
    check(cube, (RNG.uniform(0.2, 1.2, (2, 3, 2)), 0.7), (0, 1))


def test_float32_gradient_has_the_argument_dtype():
    a = vec(5).astype(np.float32)
    for target in ("python", "cpu"):
        g = zyg.grad(lambda a: np.sum(a * a * 3.0), target=target)(a)
        assert g.dtype == np.float32 and g.shape == a.shape
        np.testing.assert_allclose(g, 6.0 * a, rtol=1e-6)


def test_noncontiguous_view_argument():
    A = mat(4, 6)
    v = A[:, 1]          # strided view
    for target in ("python", "cpu"):
        g = zyg.grad(read_elems, target=target)(v, 4)
        want = fd_grad(read_elems, (v.copy(), 4), 0)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


# --- pullback: primal mutates, back rewinds; array outputs -----------------------------------
def scale_inplace(a, x):
    for i in range(a.shape[0]):
        a[i] = a[i] * x
    return np.sum(a)


def array_out(a, x):
    b = np.sin(a) * x
    return b


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_pullback_mutation_contract(target):
    a0 = vec(4)
    a = a0.copy()
    y, back = zyg.pullback(scale_inplace, a, 1.5, target=target)
    np.testing.assert_allclose(a, a0 * 1.5)           # the primal leaves a as f leaves it
    ga, gx = back(1.0)
    np.testing.assert_array_equal(a, a0)              # back rewinds it
    np.testing.assert_allclose(ga, np.full(4, 1.5))
    assert gx == pytest.approx(np.sum(a0))
    with pytest.raises(zyg.TypeMismatch, match="already called"):
        back(1.0)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_pullback_array_output(target):
    a = vec(4)
    y, back = zyg.pullback(array_out, a, 2.0, target=target)
    np.testing.assert_allclose(y, np.sin(a) * 2.0)
    dy = vec(4)
    ga, gx = back(dy)
    np.testing.assert_allclose(ga, dy * np.cos(a) * 2.0)
    assert gx == pytest.approx(np.sum(dy * np.sin(a)))
    ga2, _ = back(dy)                                  # replays: no mutation
    np.testing.assert_allclose(ga2, ga)
    with pytest.raises(zyg.TypeMismatch, match="shape"):
        back(np.ones(3))


def test_gradient_of_array_output_is_an_error():
    with pytest.raises(zyg.TypeMismatch, match="returns an array"):
        zyg.grad(array_out)(vec(3), 1.0)


def test_specialises_per_dtype_and_ndim():
    f = lambda a: np.sum(a * a)  # noqa: E731
    g = zyg.grad(f)
    np.testing.assert_allclose(g(np.ones(3)), 2 * np.ones(3))
    np.testing.assert_allclose(g(np.ones((2, 2))), 2 * np.ones((2, 2)))
    assert g(np.ones(3, np.float32)).dtype == np.float32
    assert g._zyg.cache  # one entry per type tuple, refined per dtype/ndim inside
