"""Second order where an adjoint is exactly zero, hvp of loops on cpu, and the entry
handling (defaults, keywords, methods) of jvp / hvp / hessian / jacobian.

* An adjoint skips a statement's contributions where its cotangent ``dy`` is exactly 0
  (``if dy != 0:``, docs/numerics.md).  Forward mode over that adjoint must still see
  the tangent of ``dy``: ``f(x) = (x / 2) ** 2`` has ``f''(0) = 0.5``, and zyg gave 0.
  The guards still keep ``0 * inf`` out where a value reaches nothing (first and second
  order).
* cpu hvp of a loop carrying an array did not compile (a float placeholder's
  ``zeros_like`` as the tangent of an array on a path that raised).
* jvp, hvp, hessian and jacobian ignored default arguments (grad handled them).

Second derivatives are compared with closed forms and with central differences of
zyg's own gradient.
"""
import math

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
H = 1e-5


def fd2(f, x, *rest, target):
    """Central differences of zyg.grad: the Hessian (a float, or a matrix for an array)."""
    g = zyg.grad(f, target=target)
    if isinstance(x, np.ndarray):
        cols = []
        for k in range(x.size):
            e = np.zeros_like(x)
            e[k] = H
            cols.append((g(x + e, *rest) - g(x - e, *rest)) / (2 * H))
        return np.stack(cols, axis=1)
    return (g(x + H, *rest) - g(x - H, *rest)) / (2 * H)


# -- 1. zero adjoints -------------------------------------------------------------------------

def half_square(x):
    y = x * 0.5
    return y * y                    # dy = 2 y dret = 0 at x = 0; f'' = 0.5


def sin_times(x):
    return math.sin(x) * x          # the adjoint of sin(x) is x * dret = 0 at x = 0; f'' = 2


def zero_factor(x, c):
    return (x * c) * x + c * c      # at x = 0: d(x*c) = x dret = 0; d2f/dx2 = 2c


def loop_square(x):
    s = 0.0
    for i in range(3):
        y = x * 0.5
        s = s + y * y + math.sin(x) * x     # in-loop guards; f'' = 3 (0.5 + 2 cos 0 ...)
    return s


def loop_square_d2(x):
    return 3 * (0.5 + 2 * math.cos(x) - x * math.sin(x))


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_where_adjoint_is_zero(target):
    cases = [(half_square, (), lambda x: 0.5),
             (sin_times, (), lambda x: 2 * math.cos(x) - x * math.sin(x)),
             (zero_factor, (1.5,), lambda x: 3.0),
             (loop_square, (), loop_square_d2)]
    for f, rest, d2 in cases:
        for x in (0.0, 0.7):
            h = zyg.hessian(f, target=target)(x, *rest)
            assert h == pytest.approx(d2(x), rel=1e-12, abs=1e-12), (f.__name__, x)
            assert h == pytest.approx(fd2(f, x, *rest, target=target), rel=1e-6, abs=1e-6)
            assert zyg.hvp(f, x, 2.0, *rest, target=target) == pytest.approx(2 * d2(x), abs=1e-12)
        gg = zyg.grad(zyg.grad(f, target=target), target=target)
        assert gg(0.0, *rest) == pytest.approx(d2(0.0), abs=1e-12), f.__name__


def sum_half_squares(a):
    return np.sum((a * 0.5) ** 2)


def sum_products(a):
    return np.sum(a * a * 0.5) + a[0] * a[1]


@pytest.mark.parametrize("target", TARGETS)
def test_array_hessian_where_adjoint_is_zero(target):
    a0 = np.zeros(3)
    h = zyg.hessian(sum_half_squares, target=target)(a0)
    np.testing.assert_allclose(h, 0.5 * np.eye(3), rtol=0, atol=1e-14)
    np.testing.assert_allclose(h, fd2(sum_half_squares, a0, target=target), atol=1e-6)
    v = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(zyg.hvp(sum_half_squares, a0, v, target=target), 0.5 * v, atol=1e-14)
    want = np.eye(3)
    want[0, 1] = want[1, 0] = 1.0
    h = zyg.hessian(sum_products, target=target)(a0)
    np.testing.assert_allclose(h, want, atol=1e-14)
    np.testing.assert_allclose(h, fd2(sum_products, a0, target=target), atol=1e-6)


def third(x):
    y = x * 0.5
    return y * y * y                # f''' = 6 / 8 at every x


def test_third_derivative_where_adjoint_is_zero():
    d3 = zyg.grad(zyg.grad(zyg.grad(third, target="python"), target="python"), target="python")
    assert d3(0.0) == pytest.approx(0.75, abs=1e-12)
    assert d3(0.3) == pytest.approx(0.75, abs=1e-12)


def unused_singular(x):
    d = math.sqrt(x * x)            # d'(0) = inf, but d reaches nothing at x = 0
    if x > 1.0:
        return d
    return x * x + math.sin(x) * x


@pytest.mark.parametrize("target", TARGETS)
def test_guards_still_keep_inf_times_zero_out(target):
    # first order: the zero cotangent of d skips 0 * inf
    assert zyg.grad(unused_singular, target=target)(0.0) == 0.0
    # second order: the cotangent of d and its tangent are both zero, so still skipped
    h = zyg.hessian(unused_singular, target=target)(0.0)
    assert h == pytest.approx(4.0, abs=1e-12)
    assert zyg.grad(zyg.grad(unused_singular, target=target), target=target)(0.0) == \
        pytest.approx(4.0, abs=1e-12)


# -- 2. cpu hvp of loops ----------------------------------------------------------------------

def loop_sum(a):
    s = 0.0
    for i in range(3):
        s = s + np.sum(a * a)
    return s


def loop_array(a):
    b = a * 1.0
    for i in range(2):
        b = b * a
    return np.sum(b) + np.sum(a * 0.0)      # sum(a ** 3): H = diag(6 a)


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_of_loops_carrying_arrays(target):
    a = np.array([1.0, 2.0, -0.5])
    v = np.array([1.0, 1.0, 2.0])
    np.testing.assert_allclose(zyg.hvp(loop_sum, a, v, target=target), 6.0 * v, rtol=1e-12)
    np.testing.assert_allclose(zyg.hessian(loop_sum, target=target)(a), 6.0 * np.eye(3), rtol=1e-12)
    h = zyg.hessian(loop_array, target=target)(a)
    np.testing.assert_allclose(h, np.diag(6.0 * a), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, fd2(loop_array, a, target=target), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(zyg.hvp(loop_array, a, v, target=target), 6.0 * a * v, rtol=1e-12)


# -- 3. defaults, keywords, methods -----------------------------------------------------------

def with_default(w, x, k=2.0):
    return w * w * x * k


def with_kwonly(w, x, *, k=3.0):
    return w * w * w * x * k


class Model:
    def __init__(self):
        self.c = 2.0

    def loss(self, w, x):
        return self.c * w * w * x


@pytest.mark.parametrize("target", TARGETS)
def test_forward_and_second_order_take_defaults(target):
    w, x = 1.5, 0.5
    y, t = zyg.jvp(with_default, (w, x), (1.0, 0.0), target=target)
    assert (y, t) == pytest.approx((w * w * x * 2.0, 2 * w * x * 2.0))
    assert zyg.jvp(with_kwonly, (w, x), (1.0, 0.0), target=target)[1] == \
        pytest.approx(3 * w * w * x * 3.0)
    assert zyg.hvp(with_default, w, 1.0, x, target=target) == pytest.approx(2 * x * 2.0)
    assert zyg.hessian(with_default, target=target)(w, x) == pytest.approx(2 * x * 2.0)
    assert zyg.hessian(with_default, target=target)(w, x, k=4.0) == pytest.approx(2 * x * 4.0)
    assert zyg.hessian(with_kwonly, target=target)(w, x) == pytest.approx(6 * w * x * 3.0)
    assert zyg.jacobian(with_default, target=target)(w, x) == pytest.approx(2 * w * x * 2.0)
    gg = zyg.grad(zyg.grad(with_default, target=target), target=target)
    assert gg(w, x) == pytest.approx(2 * x * 2.0)
    assert gg(w, x, k=4.0) == pytest.approx(2 * x * 4.0)

    m = Model()
    assert zyg.jvp(m.loss, (w, x), (1.0, 0.0), target=target)[1] == pytest.approx(2 * 2.0 * w * x)
    assert zyg.hvp(m.loss, w, 1.0, x, target=target) == pytest.approx(2 * 2.0 * x)
    assert zyg.hessian(m.loss, target=target)(w, x) == pytest.approx(2 * 2.0 * x)
    assert zyg.jacobian(m.loss, target=target)(w, x) == pytest.approx(2 * 2.0 * w * x)


def test_lambda_default_capturing_an_array():
    D = np.array([1.0, 2.0])
    f = lambda w, x, D=D: np.sum(D * w * w) * x     # noqa: E731
    w = np.array([1.0, 2.0])
    y, t = zyg.jvp(f, (w, 0.5), (np.ones(2), 0.0), target="python")
    assert y == pytest.approx(4.5) and t == pytest.approx(np.sum(2 * D * w) * 0.5)
    np.testing.assert_allclose(zyg.hessian(f, target="python")(w, 0.5), np.diag(D), rtol=1e-12)
    np.testing.assert_allclose(zyg.hvp(f, w, np.ones(2), 0.5, target="python"), D, rtol=1e-12)
    np.testing.assert_allclose(zyg.jacobian(f, mode="fwd", target="python")(w, 0.5), D * w, rtol=1e-12)
    np.testing.assert_allclose(zyg.jacobian(f, mode="rev", target="python")(w, 0.5), D * w, rtol=1e-12)
    # the default is read at call time
    np.testing.assert_allclose(zyg.hessian(f, target="python")(w, 0.5, 2 * D), np.diag(2 * D))


def test_bad_calls_still_raise():
    with pytest.raises(TypeError, match="missing required argument"):
        zyg.jvp(with_default, (1.0,), (1.0,), target="python")
    with pytest.raises(TypeError, match="unexpected keyword"):
        zyg.hessian(with_default, target="python")(1.0, 0.5, q=1.0)


def grad_penalty(x):
    return zyg.grad(half_square)(x) + math.sin(x)     # x / 2 + sin x: derivative 1.5 at 0


def test_grad_call_inside_where_adjoint_is_zero():
    # the reverse rule and the forward mode of a zyg.grad call are forward over reverse too
    assert zyg.grad(grad_penalty, target="python")(0.0) == pytest.approx(1.5, abs=1e-12)
    assert zyg.jvp(grad_penalty, (0.0,), (1.0,), target="python")[1] == pytest.approx(1.5, abs=1e-12)
