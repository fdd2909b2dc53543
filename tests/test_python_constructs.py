"""Python constructs of real code in differentiated functions (issue 13): ``raise`` and
``assert``, ``is None``, default and keyword arguments, methods reading ``self.attr``,
``functools.partial``, comprehensions and generator expressions, ``print``.

Every gradient is compared with central finite differences on both targets; compiled
functions are built once per module (module-level caches).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import zyg
from conftest import TARGETS

_G: dict = {}


def grad_of(f, target, argnums=0, mode="grad"):
    key = (f if not isinstance(f, (functools.partial,)) else id(f), argnums, target, mode)
    g = _G.get(key)
    if g is None:
        maker = zyg.grad if mode == "grad" else zyg.value_and_grad
        g = _G[key] = maker(f, argnums, target=target)
    return g


def fd(f, x, h=1e-6):
    """Central differences of a scalar function of a float or an array."""
    if isinstance(x, float):
        s = h * max(1.0, abs(x))
        return (f(x + s) - f(x - s)) / (2 * s)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        s = h * max(1.0, abs(x[i]))
        up, dn = x.copy(), x.copy()
        up[i] += s
        dn[i] -= s
        g[i] = (f(up) - f(dn)) / (2 * s)
    return g


def assert_close(got, want, rtol=1e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(want)))))


# -- raise and assert --------------------------------------------------------------------

class ConvergenceError(RuntimeError):
    pass


def checked_sqrt_sum(x, n):
    if x < 0.0:
        raise ValueError("x must be non-negative")
    assert n > 0, f"n must be positive, got {n}"
    r = x
    for i in range(n):
        r = math.sqrt(r + x)
    return r


def newton_sqrt(a, tol):
    x = a
    it = 0
    while abs(x * x - a) > tol:
        x = 0.5 * (x + a / x)
        it += 1
        if it > 4:
            raise ConvergenceError(f"no convergence after {it} iterations, x={x:.3f}")
    return x


def scale_in_place(a, k):
    assert a.shape[0] == 3, "need 3 values"
    a[0] = a[0] * 2.0
    if k > 5:
        raise ValueError("k too big", k)
    return np.sum(a * a)


def positive_log(v):
    if v <= 0.0:
        raise ValueError("v must be positive")
    return math.log(v)


def calls_checked(x):
    return positive_log(x) * x


@pytest.mark.parametrize("target", TARGETS)
def test_raise_and_assert_pass_through(target):
    g = grad_of(checked_sqrt_sum, target)
    assert_close(g(2.0, 3), fd(lambda t: checked_sqrt_sum(t, 3), 2.0))
    with pytest.raises(ValueError, match="^x must be non-negative$"):
        g(-1.0, 3)
    with pytest.raises(AssertionError, match="^n must be positive, got 0$"):
        g(2.0, 0)
    gn = grad_of(newton_sqrt, target)
    assert_close(gn(2.0, 1e-10), fd(lambda t: newton_sqrt(t, 1e-10), 2.0), 1e-5)
    with pytest.raises(ConvergenceError) as info:
        gn(2.0, 1e-300)
    assert str(info.value) == "no convergence after 5 iterations, x=1.414"
    gc = grad_of(calls_checked, target)
    assert_close(gc(2.0), fd(calls_checked, 2.0))
    with pytest.raises(ValueError, match="v must be positive"):
        gc(-1.0)


@pytest.mark.parametrize("target", TARGETS)
def test_raise_restores_mutated_input(target):
    g = grad_of(scale_in_place, target)
    a = np.array([1.0, 2.0, 3.0])
    assert_close(g(a.copy(), 1), fd(lambda v: scale_in_place(v.copy(), 1), a))
    with pytest.raises(ValueError) as info:
        g(a, 7)
    assert info.value.args == ("k too big", 7)
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])


def doubled_or_raise(a):
    b = a * 2.0
    if b[0] > 10.0:
        raise ValueError("too big")
    return b


@pytest.mark.parametrize("target", TARGETS)
def test_raise_in_function_returning_array(target):
    y, back = zyg.pullback(doubled_or_raise, np.array([1.0, 2.0]), target=target)
    np.testing.assert_array_equal(y, [2.0, 4.0])
    np.testing.assert_array_equal(back(np.ones(2))[0], [2.0, 2.0])
    with pytest.raises(ValueError, match="too big"):
        zyg.pullback(doubled_or_raise, np.array([11.0, 2.0]), target=target)


# -- is None, defaults, keywords -------------------------------------------------------------

def weighted(x, w=None):
    if w is None:
        w = np.ones_like(x)
    return np.sum(w * x ** 2)


def repeated(x, scale=2.0, n=3):
    r = 0.0
    for i in range(n):
        r = r + scale * x ** (i + 1)
    return r


def kwonly_power(x, *, p=2.0):
    return x ** p


@pytest.mark.parametrize("target", TARGETS)
def test_is_none_and_optional_argument(target):
    g = grad_of(weighted, target)
    x = np.array([1.0, -2.0, 0.5])
    w = np.array([3.0, 4.0, 5.0])
    assert_close(g(x), fd(weighted, x))
    assert_close(g(x, w), fd(lambda v: weighted(v, w), x))
    assert_close(g(x, w=None), fd(weighted, x))
    assert_close(grad_of(weighted, target, 1)(x, w), fd(lambda v: weighted(x, v), w))


@pytest.mark.parametrize("target", TARGETS)
def test_default_and_keyword_arguments(target):
    g = grad_of(repeated, target)
    assert_close(g(1.5), fd(repeated, 1.5))
    assert_close(g(1.5, scale=3.0), fd(lambda t: repeated(t, scale=3.0), 1.5))
    assert_close(g(1.5, 3.0, n=2), fd(lambda t: repeated(t, 3.0, 2), 1.5))
    gs = grad_of(repeated, target, (0, 1))(1.5, n=1)
    assert_close(np.array(gs, float), [fd(lambda t: repeated(t, 2.0, 1), 1.5),
                                       fd(lambda s: repeated(1.5, s, 1), 2.0)])
    old = repeated.__defaults__
    try:
        repeated.__defaults__ = (1.0, 2)       # read at call time, never stale
        assert_close(g(1.5), fd(repeated, 1.5))
    finally:
        repeated.__defaults__ = old
    gk = grad_of(kwonly_power, target)
    assert_close(gk(2.0), 4.0)
    assert_close(gk(2.0, p=3.0), fd(lambda t: kwonly_power(t, p=3.0), 2.0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'q'"):
        g(1.5, q=1.0)
    y, back = zyg.pullback(repeated, 1.5, target=target)
    assert y == repeated(1.5)


# -- methods, self.attr, partial -------------------------------------------------------------

class Model:
    def __init__(self):
        self.w = np.array([1.0, 2.0, 3.0])
        self.alpha = 0.5
        self.n = 3

    def penalty(self, x):
        return self.alpha * np.sum(x * x)

    def loss(self, x, scale=1.0):
        r = 0.0
        for i in range(self.n):
            r += self.w[i] * x[i] ** 2
        return scale * r + self.penalty(x)


def wsum(x, data, p=2.0):
    return np.sum(data * x ** p)


@pytest.mark.parametrize("target", TARGETS)
def test_method_reads_attributes_at_call_time(target):
    m = Model()
    g = zyg.grad(m.loss, target=target)
    x = np.array([0.5, -1.0, 2.0])
    assert_close(g(x), fd(m.loss, x))
    m.w = np.array([2.0, -1.0, 0.5])      # a new array attribute
    m.alpha = 1.5                          # a new number
    assert_close(g(x), fd(m.loss, x))
    assert_close(g(x, scale=2.0), fd(lambda v: m.loss(v, 2.0), x))
    m.w[1] = 7.0                           # written in place
    assert_close(g(x), fd(m.loss, x))


@pytest.mark.parametrize("target", TARGETS)
def test_partial(target):
    d = np.array([1.0, 10.0, 100.0])
    x = np.array([0.5, -1.0, 2.0])
    p1 = functools.partial(wsum, data=d)
    assert_close(zyg.grad(p1, target=target)(x), fd(p1, x))
    p2 = functools.partial(wsum, p=3.0)
    assert_close(zyg.grad(p2, target=target)(x, d), fd(lambda v: p2(v, d), x))
    p3 = functools.partial(wsum, x)
    v, gd = zyg.value_and_grad(p3, target=target)(d)
    assert v == pytest.approx(wsum(x, d))
    assert_close(gd, fd(p3, d))


# -- comprehensions, generator expressions, print, dicts ------------------------------------

def sum_gen(x):
    n = x.shape[0]
    return sum(x[i] ** 2 for i in range(n))


def sum_listcomp_if(x):
    return sum([math.sin(v) * v for v in x if v > 0.0], 1.0)


def max_min_gen(x):
    return max(v * v for v in x) + min(abs(v) for v in x)


def nested_gen(x):
    return sum(x[i] * x[j] for i in range(3) for j in range(i))


def zip_enumerate_gen(x):
    y = x * 2.0 + 1.0
    return sum(a * b for a, b in zip(x, y)) + sum(i * v for i, v in enumerate(x))


def comprehension_does_not_leak(x):
    i = 2
    s = sum(x[i] for i in range(2))
    return s * x[i]


def prints(x):
    r = 0.0
    for i in range(2):
        r = r + x * x
        print("it", i, f"r={r:.2f}")
    return r


def dict_params(p, x):
    return np.sum(p["w"] * x) ** 2 + p["b"] * p["w"][0]


COMPREHENSIONS = [sum_gen, sum_listcomp_if, max_min_gen, nested_gen, zip_enumerate_gen,
                  comprehension_does_not_leak]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", COMPREHENSIONS, ids=lambda f: f.__name__)
def test_comprehensions(f, target):
    x = np.array([0.5, -1.3, 2.0])
    assert_close(grad_of(f, target)(x), fd(f, x))
    v, _ = grad_of(f, target, mode="vg")(x)
    assert v == pytest.approx(f(x), rel=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_print_in_primal_only(target, capfd):
    capfd.readouterr()
    y, back = zyg.pullback(prints, 1.5, target=target)
    g = back(1.0)[0]
    out = capfd.readouterr().out
    assert out == "it 0 r=2.25\nit 1 r=4.50\n"
    assert g == pytest.approx(fd(prints, 1.5), rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_dict_argument_gradient_is_a_dict(target):
    p = {"w": np.array([1.0, 2.0]), "b": 0.5}
    x = np.array([0.3, -0.4])
    g = grad_of(dict_params, target)(p, x)
    assert isinstance(g, dict) and list(g) == ["w", "b"]
    assert_close(g["w"], fd(lambda w: dict_params({"w": w, "b": 0.5}, x), p["w"]))
    assert_close(g["b"], fd(lambda b: dict_params({"w": p["w"], "b": b}, x), 0.5))
    v, (gp, gx) = grad_of(dict_params, target, (0, 1), mode="vg")(p, x)
    assert v == pytest.approx(dict_params(p, x))
    assert_close(gx, fd(lambda t: dict_params(p, t), x))
    assert_close(gp["w"], g["w"])


# -- what is not supported says so, at the user's line ---------------------------------------

def reraises(x):
    raise


def raise_from(x):
    raise ValueError("no") from None


def is_not_none_chain(x):
    return x * (x is math.pi)


@pytest.mark.parametrize("fn, words", [
    (reraises, "bare 'raise'"),
    (raise_from, "'raise ... from ...'"),
    (is_not_none_chain, "only supported against None"),
])
def test_unsupported_constructs_name_the_line(fn, words):
    with pytest.raises(zyg.UnsupportedSyntax) as info:
        zyg.grad(fn, target="python")(1.5)
    e = info.value
    assert words in e.msg
    assert e.filename == __file__ and e.lineno == fn.__code__.co_firstlineno + 1
