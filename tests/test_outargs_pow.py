"""Output arguments of numpy functions, and ``x ** k`` at ``x = 0`` (issue 23, items 5 and 7).

* ``np.add(x, y, c)``, ``np.exp(b, out=b)``, ``np.dot(A, x, c)``, ``a.clip(lo, hi, out=c)``:
  the write ``c[...] = f(x, y)``, whose value is ``c`` itself (docs/arrays.md, "Output
  arguments"). They were differentiated as if nothing were written (a zero gradient).
* ``d(x ** k)/dx`` is exactly 0 where ``k == 0`` (``0 ** 0 == 1``): it was nan on python and
  a ZeroDivisionError on cpu at ``x = 0``; second derivatives at 0 of ``x ** 1``, ``x ** 2``,
  ``x ** 3`` are 0, 2, 0.
"""
from __future__ import annotations

import numpy as np
import pytest

import zyg
from conftest import TARGETS

X0 = np.array([0.5, 1.0, 2.0])
V = np.array([0.3, -0.2, 0.7])


def fd_array(f, x, h=1e-6):
    """Central differences of a scalar function of a 1-D array (fresh copies: f may write x)."""
    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h * max(1.0, abs(x[i]))
        out[i] = (f(x + e) - f(x - e)) / (2.0 * e[i])
    return out


# --- output arguments ------------------------------------------------------------------------
def add_pos(x):
    c = np.empty_like(x)
    np.add(x, x * 2.0, c)
    return np.sum(c * c)


def exp_self(x):
    b = x * 1.0
    np.exp(b, b)
    return np.sum(b)


def tanh_arg(x):
    np.tanh(x, x)               # writes the argument: grad rewinds it
    return np.sum(x * x)


def mul_kw_value(x):
    c = np.zeros(3)
    r = np.multiply(x, x, out=c)    # r is c
    r[0] = 3.0 * x[1]
    return np.sum(c * x)


def dot_cumsum_clip(x):
    A = np.outer(x, x)
    c = np.empty(3)
    np.dot(A, x, c)
    d = np.empty(3)
    np.cumsum(c * x, out=d)
    e = np.zeros(3)
    x.clip(0.7, 1.5, out=e)     # a method
    return np.sum(d * e)


def matmul_tuple_view_bcast(x):
    A = np.outer(x, x)
    c = np.zeros(5)
    np.matmul(A, x, out=(c[1:4],))  # a view, out= as a tuple
    m = np.ones((2, 3))
    np.multiply(c[0:3], 2.0, m)     # broadcast into m
    m[0, 1] = x[2]
    return np.sum(m * m) + np.sum(c)


def float32_out(x):
    c = np.empty(3, dtype=np.float32)
    np.sin(x, c)                # cast to float32, as numpy's same_kind casting allows
    return np.sum(c * x)


def loop_2d(x):
    c = x * 1.0
    for t in range(3):              # the same output written again: each write is rewound
        np.multiply(c, x, c)
        np.sin(c, out=c)
    A = np.outer(c, x)
    B = np.empty((3, 3))
    np.add(A, A.T, B)
    s = np.zeros(3)
    B.sum(axis=0, out=s)
    return np.sum(s * c)


OUT_FNS = [add_pos, exp_self, tanh_arg, mul_kw_value, dot_cumsum_clip, matmul_tuple_view_bcast, loop_2d]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", OUT_FNS, ids=lambda f: f.__name__)
def test_out_argument_gradient(f, target):
    x = X0.copy()
    v, g = zyg.value_and_grad(f, target=target)(x)
    assert np.array_equal(x, X0), "the gradient call must leave the argument unchanged"
    assert np.isclose(v, f(X0.copy()), rtol=1e-14)
    assert np.allclose(g, fd_array(f, X0), rtol=1e-6, atol=1e-6)
    assert not np.allclose(g, 0.0)
    # forward mode: J v == grad . v, the argument unchanged
    y, t = zyg.jvp(f, (x,), (V,), target=target)
    assert np.array_equal(x, X0)
    assert np.isclose(y, v, rtol=1e-14) and np.isclose(t, g @ V, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_out_argument_float32(target):
    g = zyg.grad(float32_out, target=target)(X0.copy())
    c = np.sin(X0).astype(np.float32)
    assert np.allclose(g, np.cos(X0) * X0 + c, rtol=1e-6)


def hess_out(x):
    c = np.empty_like(x)
    np.multiply(x, x, c)
    np.sin(c, out=c)
    return np.sum(c * x)


@pytest.mark.parametrize("target", TARGETS)
def test_out_argument_hessian(target):
    H = zyg.hessian(hess_out, target=target)(X0.copy())
    g = zyg.grad(hess_out, target=target)
    h = 1e-5
    Hfd = np.array([(g(X0 + h * e) - g(X0 - h * e)) / (2 * h) for e in np.eye(3)])
    assert np.allclose(H, Hfd, rtol=1e-6, atol=1e-6)
    assert np.allclose(zyg.hvp(hess_out, X0.copy(), V, target=target), H @ V, rtol=1e-12)


def test_out_argument_pullback_rewinds():
    x = X0.copy()
    y, back = zyg.pullback(tanh_arg, x, target="python")
    assert np.array_equal(x, np.tanh(X0))     # the primal writes x as tanh_arg does
    g = back(1.0)
    assert np.array_equal(x, X0)              # back rewinds it
    assert np.allclose(g, fd_array(tanh_arg, X0), rtol=1e-6)


def test_same_name_inplace_out():
    def f(x, y):
        np.add(x, y, x)
        return np.sum(x * x)
    gx, gy = zyg.grad(f, argnums=(0, 1), target="python")(X0.copy(), 2.0 * X0)
    assert np.allclose(gx, 6.0 * X0) and np.allclose(gy, 6.0 * X0)


def copyto_fn(x):
    c = np.zeros((2, 3))
    r = np.copyto(c, x * 2.0)           # broadcast into c; the value is None
    np.copyto(c[1], np.sin(x), casting="same_kind")
    return np.sum(c * c) + (1.0 if r is None else 0.0)


@pytest.mark.parametrize("target", TARGETS)
def test_copyto(target):
    x = X0.copy()
    v, g = zyg.value_and_grad(copyto_fn, target=target)(x)
    assert np.isclose(v, copyto_fn(X0.copy()), rtol=1e-14) and np.array_equal(x, X0)
    assert np.allclose(g, 8.0 * X0 + 2.0 * np.sin(X0) * np.cos(X0), rtol=1e-12)
    y, t = zyg.jvp(copyto_fn, (x,), (V,), target=target)
    assert np.isclose(y, v, rtol=1e-14) and np.isclose(t, g @ V, rtol=1e-12)


def fill_diag(x):
    c = np.zeros((3, 3))
    np.fill_diagonal(c, x[0])
    return np.sum(c * c)


def put_fn(x):
    c = x * 1.0
    np.put(c, IDX, x[1:2])
    return np.sum(c * c)


def putmask_fn(x):
    c = x * 1.0
    np.putmask(c, x > 1.5, x * 3.0)
    return np.sum(c * c)


def ufunc_at(x):
    c = x * 1.0
    np.add.at(c, IDX, x[1])
    return np.sum(c * c)


def copyto_int(x):
    c = np.zeros(3, dtype=np.int64)
    np.copyto(c, x)
    return np.sum(x * c)


def copyto_where(x):
    c = np.zeros(3)
    np.copyto(c, x, where=x > 1.0)
    return np.sum(c)


IDX = np.array([0])


def test_ufunc_method_out():
    def acc(x):
        c = np.zeros(3)
        r = np.maximum.accumulate(x * x[0] - x[::-1] * 0.1, out=c)
        return np.sum(c * r * x)
    g = zyg.grad(acc, target="python")(X0.copy())
    assert np.allclose(g, fd_array(acc, X0), rtol=1e-6)

    def red(x):                     # was a zero gradient: now the missing rule is reported
        c = np.zeros(3)
        np.add.reduce(np.outer(x, x), axis=0, out=c)
        return np.sum(c * c)
    with pytest.raises(zyg.NoAdjoint, match="reduce"):
        zyg.grad(red, target="python")(X0.copy())


def test_nan_to_num_copy_false_and_flatten():
    def n2n(x):
        c = np.ones(3)
        r = np.nan_to_num(c, copy=False)    # r is c
        r[0] = 4.0
        return np.sum(c * x)

    def flat(x):
        b = x.flatten()                     # a copy: the write leaves x alone
        b[0] = 5.0
        return np.sum(x * x) + np.sum(b * x)

    for f in (n2n, flat):
        v, g = zyg.value_and_grad(f, target="python")(X0.copy())
        assert np.isclose(v, f(X0.copy()), rtol=1e-14)
        assert np.allclose(g, fd_array(f, X0), rtol=1e-6)

    def n2n_active(x):
        c = x * 1.0
        np.nan_to_num(c, copy=False)
        return np.sum(c * x)
    # np.nan_to_num has a rule now (issue 24): the in-place form of an active array is
    # differentiated (the identity where the values are finite)
    v, g = zyg.value_and_grad(n2n_active, target="python")(X0.copy())
    assert np.isclose(v, n2n_active(X0.copy()), rtol=1e-14)
    assert np.allclose(g, fd_array(n2n_active, X0), rtol=1e-6)


def where_kw(x):
    np.exp(x, out=x, where=x > 1.0)
    return np.sum(x)


def where_no_out(x):
    return np.sum(np.exp(x, where=x > 1.0))


def int_out(x):
    c = np.zeros(3, dtype=np.int64)
    np.add(x, 1.5, out=c)
    return np.sum(x * c)


def scalar_out(x):
    s = 1.0
    np.exp(x[0], s)
    return s


def two_outputs(x):
    a = np.empty(3)
    b = np.empty(3)
    np.divmod(x, 2.0, out=(a, b))
    return np.sum(a)


def dot_float32_out(x):
    c = np.empty(3, dtype=np.float32)
    np.dot(np.outer(x, x), x, c)
    return np.sum(c)


def more_dims(x):
    c = np.empty(3)
    np.add(x[None, :], 1.0, c)
    return np.sum(c)


def zero_d_out(x):
    c = np.zeros(())
    np.sum(x * x, out=c)
    return c[()]


def zero_d_write(x):
    c = np.zeros(())
    c[...] = np.sum(x * x)      # was a zero gradient
    return np.sum(c)


@pytest.mark.parametrize("f, err, words", [
    (where_kw, zyg.UnsupportedSyntax, "where="),
    (where_no_out, zyg.UnsupportedSyntax, "where="),
    (int_out, zyg.TypeMismatch, "int64 output"),
    (scalar_out, zyg.TypeMismatch, "not an array"),
    (two_outputs, zyg.UnsupportedSyntax, "one output"),
    (dot_float32_out, zyg.TypeMismatch, "float32"),
    (more_dims, zyg.TypeMismatch, "2 dimensions"),
    (zero_d_out, zyg.TypeMismatch, "0-d"),
    (zero_d_write, zyg.TypeMismatch, "0-d"),
    (fill_diag, zyg.UnsupportedSyntax, "writes into its array argument"),
    (put_fn, zyg.UnsupportedSyntax, "writes into its array argument"),
    (putmask_fn, zyg.UnsupportedSyntax, "writes into its array argument"),
    (ufunc_at, zyg.UnsupportedSyntax, "writes into its array argument"),
    (copyto_int, zyg.TypeMismatch, "int64 output"),
    (copyto_where, zyg.UnsupportedSyntax, "where="),
], ids=lambda v: getattr(v, "__name__", "")[:20])
def test_out_argument_refused(f, err, words):
    with pytest.raises(err) as ei:
        zyg.grad(f, target="python")(X0.copy())
    assert words in str(ei.value) and "test_outargs_pow.py" in str(ei.value)


# --- x ** k at x = 0 ---------------------------------------------------------------------------
def taylor(x):
    s = 0.0
    for k in range(4):
        s += x[0] ** k * x[1] ** (3 - k)
    return s


def array_pow(x):
    return np.sum(x ** 0) + np.sum(x ** 1) + np.sum(x ** 2) + np.sum(np.power(x, 3))


MASK = np.array([True, False, True, False])
KS = np.array([0, 1, 2, 3])


def array_exponents(x):
    return np.sum(x ** MASK) + np.sum(x ** KS)


def float_pow(x):
    return x[0] ** 2.0 + x[0] ** 1.0 + x[1] ** 0.0 + x[0] ** x[1]


def taylor_grad(x):
    # d/dx0 and d/dx1 of sum_k x0^k x1^(3-k)
    a, b = x
    return np.array([sum(k * a ** (k - 1) * b ** (3 - k) for k in range(1, 4)),
                     sum((3 - k) * a ** k * b ** (2 - k) for k in range(3))])


@pytest.mark.parametrize("target", TARGETS)
def test_integer_power_at_zero(target):
    for x in (np.array([0.0, 0.0]), np.array([0.0, 1.5]), np.array([-2.0, 0.0]), np.array([-1.5, -0.5])):
        g = zyg.grad(taylor, target=target)(x.copy())
        assert np.allclose(g, taylor_grad(x), rtol=1e-14, atol=0.0), (x, g)
        y, t = zyg.jvp(taylor, (x.copy(),), (V[:2],), target=target)
        assert np.isclose(t, taylor_grad(x) @ V[:2], rtol=1e-14, atol=1e-300)
    x = np.array([0.0, -1.0, 2.0, 0.0])
    g = zyg.grad(array_pow, target=target)(x)
    assert np.array_equal(g, 1.0 + 2.0 * x + 3.0 * x ** 2)
    g = zyg.grad(array_exponents, target=target)(x)
    assert np.array_equal(g, MASK * 1.0 + KS * x ** np.maximum(KS - 1, 0))
    H = zyg.hessian(taylor, target=target)(np.array([0.0, 0.0]))
    assert np.array_equal(H, np.zeros((2, 2)))


def p1(x):
    return x[0] ** 1


def p2(x):
    return x[0] ** 2


def p3(x):
    return x[0] ** 3 + np.sum(x ** 2)


@pytest.mark.parametrize("target", TARGETS)
def test_power_second_derivatives_at_zero(target):
    z = np.array([0.0, 0.0])
    assert np.array_equal(zyg.hessian(p1, target=target)(z), np.zeros((2, 2)))
    assert np.array_equal(zyg.hessian(p2, target=target)(z), np.array([[2.0, 0.0], [0.0, 0.0]]))
    assert np.array_equal(zyg.hessian(p3, target=target)(z), 2.0 * np.eye(2))
    assert np.array_equal(zyg.grad(p1, target=target)(z), np.array([1.0, 0.0]))
    assert np.array_equal(zyg.hvp(p2, z, np.array([1.0, 0.0]), target=target), np.array([2.0, 0.0]))


@pytest.mark.parametrize("target", TARGETS)
def test_float_power_at_zero(target):
    # d/dx0: 2 x0 + 1 + x1 x0^(x1 - 1); d/dx1: 0 (x1 ** 0.0) + x0^x1 log x0, taken 0 at x0 = 0
    g = zyg.grad(float_pow, target=target)(np.array([0.0, 2.0]))
    assert np.array_equal(g, np.array([1.0, 0.0]))
    g = zyg.grad(float_pow, target=target)(np.array([0.0, 0.0]))
    assert np.array_equal(g, np.array([1.0, 0.0]))   # 0 ** 0 == 1: a constant in x0
    with np.errstate(divide="ignore"):
        g = zyg.grad(lambda x: x[0] ** 0.5, target="python")(np.array([0.0]))
    assert g[0] == np.inf                           # the one-sided limit, as numpy's value


def _inactive_then_written(a, b, x):
    c = np.tanh(np.ones_like(a))           # no operand is active: its tangent was a float 0.0
    r = np.divide(c, 1.0 + x * x, c)       # an active value written into it
    return np.sum(r * b) + np.sum(c)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_jvp_of_an_inactive_array_made_active_by_an_output_argument(target):
    # found by the long property run (ufunc_out): the tangent of c was the number 0.0, and
    # the write through out= failed ("return arrays must be of ArrayType")
    a = np.array([0.3, 0.5, 0.7, 0.9])
    b = np.array([0.2, -0.4, 0.6, 0.8])
    x = 0.5
    tb = np.array([1.0, 0.5, -0.5, 0.25])
    y, t = zyg.jvp(_inactive_then_written, (a, b, x), (np.zeros(4), tb, 1.0), target=target)
    h = 1e-6
    fd = (_inactive_then_written(a, b + h * tb, x + h) - _inactive_then_written(a, b - h * tb, x - h)) / (2 * h)
    assert y == pytest.approx(_inactive_then_written(a, b, x), rel=1e-12)
    assert t == pytest.approx(fd, rel=1e-7)
