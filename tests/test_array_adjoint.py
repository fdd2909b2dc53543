"""``@zyg.adjoint`` rules for functions that take or return arrays (issue 13), on both
targets, against central finite differences; and the shape checks of what a rule's
``back`` returns (a zyg error naming the rule, the argument and the rule's line).

The rules are registered at import (module level), as users write them; the
autouse fixture of conftest.py resets user rules after each test, so each test
registers the rules it needs again through ``_register``.
"""
from __future__ import annotations

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(7)


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / np.sum(e)


def mynorm(x):
    return np.sqrt(np.sum(x * x))


def scale(x, s):
    return x * s


def outer_plus(a, b):
    return np.outer(a, b) + 1.0


def pick(x, k):
    return x[k] * 2.0


def wrong_shape(x):
    return x * 2.0


def wrong_kind(x, s):
    return x * s


def _register():
    @zyg.adjoint(softmax)
    def _(x):
        y = softmax(x)
        def back(dy):  # noqa: E306
            return (y * (dy - np.sum(dy * y)),)
        return y, back

    @zyg.adjoint(mynorm)
    def _(x):
        r = mynorm(x)
        def back(dr):  # noqa: E306
            return (dr * x / r,)
        return r, back

    @zyg.adjoint(scale)
    def _(x, s):
        y = scale(x, s)
        def back(dy):  # noqa: E306
            g = dy * s                       # a pullback of several statements
            return (g, np.sum(dy * x))
        return y, back

    @zyg.adjoint(outer_plus)
    def _(a, b):
        def back(dy):  # noqa: E306
            return (dy @ b, a @ dy)
        return outer_plus(a, b), back

    @zyg.adjoint(pick)
    def _(x, k):
        y = pick(x, k)
        def back(dy):  # noqa: E306
            g = np.zeros(x.shape)
            g[k] = 2.0 * dy
            return (g, None)
        return y, back

    @zyg.adjoint(wrong_shape)
    def _(x):
        y = wrong_shape(x)
        def back(dy):  # noqa: E306
            return (dy[:2] * 2.0,)
        return y, back

    @zyg.adjoint(wrong_kind)
    def _(x, s):
        y = wrong_kind(x, s)
        def back(dy):  # noqa: E306
            return (dy * s, dy * x)          # an array for the scalar s
        return y, back


@pytest.fixture(autouse=True)
def rules():
    _register()
    yield


def f_softmax(x):
    return np.sum(softmax(x) * np.arange(1.0, x.size + 1.0))


def f_norm_loop(x):
    s = 0.0
    y = x.copy()
    for k in range(3):
        s += mynorm(y) ** 2
        y[k] = y[k] * 1.5 + 0.1              # the rule's operand changes between calls
    return s


def f_scale(x, s):
    return np.sum(scale(x, s) ** 2)


def f_outer(a, b):
    return np.sum(np.sin(outer_plus(a, b)))


def f_pick(x):
    return pick(x, 2) ** 2 + pick(x, 0)


def fd(f, args, i, h=1e-6):
    a = args[i]
    if not isinstance(a, np.ndarray):
        up, dn = list(args), list(args)
        up[i] += h
        dn[i] -= h
        return (f(*up) - f(*dn)) / (2 * h)
    g = np.zeros(a.shape)
    for k in np.ndindex(a.shape):
        up = [v.copy() if isinstance(v, np.ndarray) else v for v in args]
        dn = [v.copy() if isinstance(v, np.ndarray) else v for v in args]
        up[i][k] += h
        dn[i][k] -= h
        g[k] = (f(*up) - f(*dn)) / (2 * h)
    return g


x4 = RNG.uniform(-1, 1, 4)
CASES = [
    (f_softmax, (x4,), 0),
    (f_norm_loop, (RNG.uniform(0.2, 1.0, 5),), 0),
    (f_scale, (x4, 1.3), (0, 1)),
    (f_outer, (RNG.uniform(-1, 1, 3), RNG.uniform(-1, 1, 4)), (0, 1)),
    (f_pick, (x4,), 0),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,args,argnums", CASES, ids=[c[0].__name__ for c in CASES])
def test_array_rule_gradient(f, args, argnums, target):
    g = zyg.grad(f, argnums=argnums, target=target)(*args)
    gs = (g,) if isinstance(argnums, int) else g
    nums = (argnums,) if isinstance(argnums, int) else argnums
    for i, gi in zip(nums, gs):
        np.testing.assert_allclose(gi, fd(f, args, i), rtol=1e-6, atol=1e-8, err_msg=f"{target} arg {i}")


@pytest.mark.parametrize("target", TARGETS)
def test_array_result_pullback(target):
    x = RNG.uniform(-1, 1, 4)
    y, back = zyg.pullback(softmax_twice, x, target=target)
    np.testing.assert_allclose(y, softmax_twice(x), rtol=1e-14)
    dy = RNG.uniform(-1, 1, 4)
    (dx,) = back(dy) if isinstance(back(dy), tuple) else (back(dy),)
    want = fd(lambda v: float(np.dot(softmax_twice(v), dy)), (x,), 0)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-8)


def softmax_twice(x):
    return softmax(softmax(x) * 3.0)


def f_wrong_shape(x):
    return np.sum(wrong_shape(x))


def f_wrong_kind(x, s):
    return np.sum(wrong_kind(x, s))


@pytest.mark.parametrize("target", TARGETS)
def test_wrong_shape_is_reported(target):
    with pytest.raises(zyg.TypeMismatch) as ei:
        zyg.grad(f_wrong_shape, target=target)(x4)
    text = str(ei.value)
    assert "wrong_shape" in text and "'x'" in text and "test_array_adjoint.py" in text, text
    if target == "python":
        assert "(2,)" in text and "(4,)" in text, text


@pytest.mark.parametrize("target", TARGETS)
def test_array_for_a_scalar_is_reported(target):
    with pytest.raises(zyg.ZygError) as ei:
        zyg.grad(f_wrong_kind, argnums=(0, 1), target=target)(x4, 0.5)
    text = str(ei.value)
    assert "wrong_kind" in text and "'s'" in text and "a number" in text, text
