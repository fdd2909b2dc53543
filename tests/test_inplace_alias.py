"""In-place operators whose operand shares memory with their target (issue 23, items 2, 3).

numpy reads all of ``b`` before ``a op= b`` writes ``a``, also when ``b`` is ``a`` itself,
a reversed or transposed view of it, or a row broadcast over it (numpy buffers
overlapping operands); numba's ufuncs compute element by element. zyg gives numpy's
semantics on every target:

* the primal and the forward mode copy ``b`` first when it may share ``a``'s memory
  (its alias class), on cpu where numba would have read elements already written;
* the adjoint rewinds ``a`` before it reads ``b`` (``b``'s value is the one before the
  write) and copies the result's cotangent before it accumulates into ``b``'s shadow,
  which shares memory with it (``d *= d`` gave ``d**2 + d**3`` instead of ``2 d``).

Subscripted augmented writes (``a[1:] += a[:-1]``, ``A[i] += A[j]``) and overlapping
slice assignments (``a[1:] = a[:-1]``) are checked too: they read the whole right-hand
side before the write, as numpy does.

Every function is checked on both targets: the value against numpy, every element of
the gradient against central finite differences, ``zyg.jvp`` against the
finite-difference directional derivative, and the caller's arrays unchanged.
"""
import io

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(23)

W4 = np.arange(1.0, 5.0)
W6 = np.arange(1.0, 7.0).reshape((3, 2))
W22 = np.arange(4.0).reshape((2, 2))


def _fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _fd(f, args, h=1e-6):
    """Central differences of f in every element of its first argument (float64)."""
    a = np.asarray(args[0], np.float64)
    g = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        up, dn = _fresh([a] + list(args[1:])), _fresh([a] + list(args[1:]))
        up[0][idx] += h
        dn[0][idx] -= h
        g[idx] = (f(*up) - f(*dn)) / (2 * h)
    return g


_BUILT = {}


def _vg(f, target):
    key = (f, target)
    if key not in _BUILT:
        _BUILT[key] = zyg.value_and_grad(f, target=target)
    return _BUILT[key]


def check(f, args, split=False, rtol=1e-6, atol=1e-8):
    args = tuple(args)
    want_val = f(*_fresh(args))
    want = _fd(f, args)
    assert np.any(want != 0), "a test whose gradient is zero proves little"
    # central differences carry a rounding error of about eps * |f| / h on every element:
    # the absolute tolerance is relative to the largest gradient element
    atol = atol * max(1.0, float(np.max(np.abs(want))))
    v = RNG.standard_normal(args[0].shape)
    want_dir = float(np.sum(want * v))
    for target in TARGETS:
        before = _fresh(args)
        val, g = _vg(f, target)(*args)
        for x, b in zip(args, before):
            np.testing.assert_array_equal(x, b, err_msg=f"{target}: an input array was changed")
        np.testing.assert_allclose(val, want_val, rtol=1e-12, atol=1e-14, err_msg=f"{target}: value")
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, err_msg=f"{target}: gradient of {f.__name__}")
        y, ty = zyg.jvp(f, _fresh(args), (v,) + tuple(np.zeros_like(a) for a in args[1:]), target=target)
        np.testing.assert_allclose(y, want_val, rtol=1e-12, atol=1e-14, err_msg=f"{target}: jvp value")
        np.testing.assert_allclose(ty, want_dir, rtol=rtol, atol=atol, err_msg=f"{target}: jvp of {f.__name__}")
        assert abs(ty - float(np.sum(g * v))) <= 1e-9 * max(1.0, abs(ty)), f"{target}: jvp != grad . v"
        if split:
            y, back = zyg.pullback(f, *args, target=target)
            np.testing.assert_allclose(y, want_val, rtol=1e-12, atol=1e-14)
            gb = back(1.0)
            for x, b in zip(args, before):
                np.testing.assert_array_equal(x, b, err_msg=f"{target}: pullback left an input changed")
            np.testing.assert_allclose(gb[0], want, rtol=rtol, atol=atol, err_msg=f"{target} pullback")


# -- the issue's examples ---------------------------------------------------------------------
def mul_self(x):
    y = x * 0.5
    d = x - y
    d *= d
    return np.sum(d)


def sub_row(P):
    P = P * 1.0
    P -= P[0]
    return np.sum(P * P)


def add_transpose(B):
    B = B * 1.0
    B += B.T
    return np.sum(B * B * W22)


def add_reversed(b):
    b = b * 1.0
    b += b[::-1]
    return np.sum(b * b * W4)


@pytest.mark.parametrize("f, shape, split", [
    (mul_self, (4,), True), (sub_row, (3, 2), False), (add_transpose, (2, 2), True),
    (add_reversed, (4,), False)])
def test_issue_examples(f, shape, split):
    check(f, [RNG.standard_normal(shape)], split=split)


def test_issue_numbers_cpu():
    """numba's element-by-element value was 127 where numpy gives 48 (b += b[::-1])."""
    def rev_sum(b):
        b = b * 1.0
        b += b[::-1]
        return np.sum(b * b)
    x = np.arange(1.0, 5.0)
    assert rev_sum(x) == 100.0
    for target in TARGETS:
        assert zyg.value_and_grad(rev_sum, target=target)(x)[0] == 100.0


# -- every operator with the same array, a reversed view, a row, a transpose -------------------
def add_self(a):
    a = a * 1.0
    a += a
    return np.sum(a * a * W4)


def sub_self(a):
    a = a * 1.0
    c = a * a
    a -= a                       # zero, whatever a was: no gradient through it
    a += c
    return np.sum(a * a * W4)


def div_self_plus(a):
    a = a * 1.0 + 3.0
    b = a.reshape((2, 2))         # another name for the same memory
    c = a * a[::-1]
    b /= b                       # ones: no gradient through it
    b *= c.reshape((2, 2))
    b += a.reshape((2, 2))[::-1]
    return np.sum(a * a * W4)


def mul_reversed(a):
    a = a * 1.0
    a *= a[::-1]
    return np.sum(a * W4)


def div_reversed(a):
    a = a * 1.0 + 3.0
    a /= a[::-1]
    return np.sum(a * W4)


def sub_reversed(a):
    a = a * 1.0
    a -= a[::-1]
    return np.sum(a * a * W4)


def mul_transpose(B):
    B = B * 1.0
    B *= B.T
    return np.sum(B * W22)


def div_row(A):
    A = A * 1.0 + 3.0
    A /= A[1]
    return np.sum(A * W6)


def add_row_mul_row(A):
    A = A * 1.0
    A += A[0]
    A *= A[2]
    return np.sum(A * A * W6)


def add_column(A):
    A = A * 1.0
    A += A[:, 1:2]
    return np.sum(A * A * W6)


def tensor3(T):
    T = T * 1.0
    T += T[0]
    T *= T[:, ::-1]
    return np.sum(T * T * T)


def row_views_in_loop(A):
    A = A * 1.0
    for i in range(1, 3):
        row = A[i]
        row *= A[i - 1]
        row += A[0]
        A -= A[i] * 0.5
    return np.sum(A * A * W6)


@pytest.mark.parametrize("f, shape", [
    (row_views_in_loop, (3, 2)), (add_self, (4,)), (sub_self, (4,)), (div_self_plus, (4,)), (mul_reversed, (4,)),
    (div_reversed, (4,)), (sub_reversed, (4,)), (mul_transpose, (2, 2)), (div_row, (3, 2)),
    (add_row_mul_row, (3, 2)), (add_column, (3, 2)), (tensor3, (2, 3, 2))])
def test_operators_on_shared_memory(f, shape):
    check(f, [RNG.standard_normal(shape)])


# -- views made earlier, views as targets, loops and branches ---------------------------------
def view_made_earlier(a):
    a = a * 1.0
    r = a[::-1]
    t = a * 2.0
    a += r
    return np.sum(a * a * W4) + np.sum(t * r)


def view_target_base_operand(a):
    a = a * 1.0
    v = a[1:]
    v *= a[:-1]
    return np.sum(a * a * W4)


def view_target_view_operand(a):
    a = a * 1.0
    v = a[:3]
    w = a[1:]
    v -= w
    w /= v + 4.0
    return np.sum(a * a * W4)


def in_loop(a):
    a = a * 1.0
    for k in range(3):
        a *= a[::-1] * 0.5 + 0.7
        a += a[0]
        a -= a[::-1] * 0.25
    return np.sum(a * W4)


def in_branches(a):
    a = a * 1.0
    for k in range(2):
        if a[k] > 0.0:
            a += a[::-1]
        else:
            a *= a[::-1]
    return np.sum(a * a * W4)


def swapped_buffers(a):
    u = a * 1.0
    v = a * 2.0
    for k in range(3):
        u += v          # u and v are one alias class (copied, conservatively)
        u, v = v, u
    return np.sum(u * W4) + np.sum(v * v)


@pytest.mark.parametrize("f", [view_made_earlier, view_target_base_operand, view_target_view_operand,
                               in_loop, in_branches, swapped_buffers])
def test_views_loops_branches(f):
    check(f, [RNG.standard_normal(4)], split=f in (in_loop, in_branches))


# -- subscripted augmented writes and overlapping slice assignment ----------------------------
def slice_shift_add(a):
    a = a * 1.0
    a[1:] += a[:-1]
    return np.sum(a * a * W4)


def colon_times_reversed(a):
    a = a * 1.0
    a[:] *= a[::-1]
    return np.sum(a * W4)


def rows(A):
    A = A * 1.0
    A[2] += A[0]
    A[0] *= A[1]
    A[1, :] -= A[0, :] * 0.7
    A[2, :] /= A[0, :] + 3.0
    return np.sum(A * A * W6)


def rows_in_loop(A):
    A = A * 1.0
    for i in range(1, 3):
        A[i] += A[i - 1] * 0.5
        A[i - 1] *= A[i]
    return np.sum(A * A * W6)


def plain_shift(a):
    a = a * 1.0
    a[1:] = a[:-1]
    return np.sum(a * a * W4)


def plain_reverse(a):
    a = a * 1.0
    a[:] = a[::-1]
    a[1:3] = a[0:2] * 2.0
    return np.sum(a * a * W4)


def scalar_entries(a):
    a = a * 1.0
    a[1] *= a[0]
    a[2] += a[1]
    a[0] /= a[3] + 2.0
    a[3] -= a[3]
    a[2] *= a[2]
    return np.sum(a * a * W4)


@pytest.mark.parametrize("f, shape", [
    (slice_shift_add, (4,)), (colon_times_reversed, (4,)), (rows, (3, 2)), (rows_in_loop, (3, 2)),
    (plain_shift, (4,)), (plain_reverse, (4,)), (scalar_entries, (4,))])
def test_subscripted_writes(f, shape):
    check(f, [RNG.standard_normal(shape)])


# -- float32 --------------------------------------------------------------------------------
def f32_rows(A):
    A = A.copy()
    A += A[0]
    A *= A[::-1]
    A -= A.T[0]
    return np.sum(A * A * A)


def f32_loop(a):
    a = a.copy()
    for k in range(2):
        a *= a[::-1]
        a += a[0]
    return np.sum(a * a * a)


@pytest.mark.parametrize("f, shape", [(f32_rows, (3, 3)), (f32_loop, (4,))])
def test_float32(f, shape):
    x64 = RNG.standard_normal(shape) * 0.5
    x = x64.astype(np.float32)
    want_val = f(x.copy())
    want = _fd(f, [x64])        # the float64 function's gradient at the same point
    for target in TARGETS:
        val, g = _vg(f, target)(x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(val, want_val, rtol=2e-6, err_msg=f"{target}: value")
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5, err_msg=f"{target}: gradient")


# -- the cost stays off the unaliased path ----------------------------------------------------
def separate(a, b):
    a = a * 1.0
    a *= b
    a += b[::-1]
    return np.sum(a * a)


def test_no_copy_without_sharing():
    """``a op= b`` where ``b`` cannot share ``a``'s memory copies nothing but the record."""
    out = io.StringIO()
    text = zyg.show(separate, np.ones(3), np.ones(3), file=out)
    ops = [ln for ln in text.splitlines() if "np.multiply(a_" in ln or "np.add(a_" in ln]
    assert ops and not any(".copy()" in ln for ln in ops), ops
    check(separate, [RNG.standard_normal(3), RNG.standard_normal(3)])


# -- a.flatten() is a copy (it was np.ravel, a view of a contiguous array) --------------------
def flatten_then_write(a):
    a = a * 1.0
    b = a.flatten()
    a[0] = 3.0
    a[3] *= 2.0
    return np.sum(b * b) + np.sum(a * W4)


def test_flatten_is_a_copy():
    check(flatten_then_write, [RNG.standard_normal(4)])
