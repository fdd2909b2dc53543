"""target="python" and target="cpu" compute the same gradients, to rounding.

Both targets run the same generated source, so they should agree to ~1e-12 relative
(numba may fuse or reorder a few float operations, hence not bit-exact).  Each
function is also checked once against finite differences so that "both agree" cannot
mean "both wrong in the same way".
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import cached, close, fd_grad


def poly(x):
    return 3.0 * x ** 4 - 2.0 * x ** 3 + x * x - 7.0 * x + 1.0


def trig_mix(x, y):
    return math.sin(x * y) * math.cos(x - y) + math.tanh(x) * math.atan2(y, x)


def exp_log(x):
    return math.log(1.0 + math.exp(x)) - math.log1p(x * x) + math.sqrt(1.0 + x * x)


def taylor_sin(x):
    term = x
    s = x
    for n in range(1, 25):
        term = -term * x * x / ((2 * n) * (2 * n + 1))
        s = s + term
    return s


def newton_sqrt(a):
    # converge to sqrt(a) with a data-dependent number of iterations
    x = a
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
    return x


def power_loop(x, n):
    r = 1.0
    for i in range(n):
        r = r * x
    return r


def collatz_like(x):
    y = x
    k = 0
    while k < 30:
        if y > 1.0:
            y = y * 0.5
        else:
            y = 3.0 * y + 0.1
        k += 1
    return y


def piecewise(x):
    if x < -1.0:
        return -x * x
    elif x < 1.0:
        return math.sin(x)
    return math.exp(-x) * x


def nested_break(x):
    s = 0.0
    for i in range(10):
        for j in range(10):
            s = s + math.sin(x * (i + 1)) * 0.1
            if j > i:
                break
        if s > 3.0:
            break
    return s


def swap_rotate(x, y):
    a, b, c = x, y, 1.0
    for i in range(7):
        a, b, c = b, c * x, a + y
    return a * b + c


def logistic_map(r, x0):
    x = x0
    for i in range(20):
        x = r * x * (1.0 - x)
    return x


def bool_ops(x, y):
    s = 0.0
    for i in range(5):
        if (x > i * 0.3 and y < 2.0) or not (x * y > 1.0):
            s = s + x * y
        else:
            s = s - x / y
    return s


def numpy_funcs(x, y):
    return np.hypot(x, y) * np.logaddexp(x, y) + np.arcsinh(x * y) + np.cbrt(x + y)


def minmax_loop(x):
    lo = x
    hi = x
    v = x
    for i in range(12):
        v = math.sin(1.3 * v + 0.5) + 0.2 * x
        lo = min(lo, v)
        hi = max(hi, v)
    return hi - lo


def gamma_series(x):
    # a long-ish loop with a float accumulator and an early exit
    s = 0.0
    t = 1.0
    k = 1
    while k < 200:
        t = t * x / k
        s = s + t
        if t < 1e-18 * s:
            break
        k += 1
    return s


CORPUS = [
    (poly, [(0.7,), (-1.3,), (2.2,)], 0),
    (trig_mix, [(0.7, 1.1), (-1.3, 0.4), (2.2, -0.9)], (0, 1)),
    (exp_log, [(0.7,), (-1.3,), (2.2,)], 0),
    (taylor_sin, [(0.7,), (-1.3,), (2.2,)], 0),
    (newton_sqrt, [(0.7,), (2.0,), (9.3,)], 0),
    (power_loop, [(0.7, 5), (-1.3, 8), (1.02, 40)], (0, 1)),
    (collatz_like, [(0.7,), (1.3,), (5.2,)], 0),
    (piecewise, [(-1.7,), (0.3,), (2.2,)], 0),
    (nested_break, [(0.7,), (-1.3,), (0.2,)], 0),
    (swap_rotate, [(0.7, 1.1), (-1.3, 0.4), (1.2, -0.9)], (0, 1)),
    (logistic_map, [(2.7, 0.3), (3.2, 0.6), (1.5, 0.1)], (0, 1)),
    (bool_ops, [(0.7, 1.1), (2.3, 0.4), (1.2, 2.9)], (0, 1)),
    (numpy_funcs, [(0.7, 1.1), (1.3, 0.4), (2.2, 0.9)], (0, 1)),
    (minmax_loop, [(0.7,), (-1.3,), (2.2,)], 0),
    (gamma_series, [(0.7,), (3.3,), (10.5,)], 0),
]


def _tuple(g, argnums):
    return (g,) if isinstance(argnums, int) else g


@pytest.mark.parametrize("f, points, argnums", CORPUS, ids=[c[0].__name__ for c in CORPUS])
def test_python_and_cpu_agree(f, points, argnums):
    gp = cached("grad", f, argnums, "python")
    gc = cached("grad", f, argnums, "cpu")
    vp = cached("value_and_grad", f, argnums, "python")
    vc = cached("value_and_grad", f, argnums, "cpu")
    for args in points:
        a, b = _tuple(gp(*args), argnums), _tuple(gc(*args), argnums)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert (x is None) == (y is None)
            if x is not None:
                assert close(x, y, 1e-12, 1e-300), f"{f.__name__}{args}: python {x!r} cpu {y!r}"
        (v1, _), (v2, _) = vp(*args), vc(*args)
        ref = f(*args)
        assert close(v1, ref, 1e-12, 1e-300) and close(v2, ref, 1e-12, 1e-300)


@pytest.mark.parametrize("f, points, argnums", CORPUS, ids=[c[0].__name__ for c in CORPUS])
def test_corpus_matches_finite_differences(f, points, argnums):
    gp = cached("grad", f, argnums, "python")
    args = points[0]
    y = f(*args)
    got = _tuple(gp(*args), argnums)
    exp = _tuple(fd_grad(f, args, argnums), argnums)
    for g, e in zip(got, exp):
        if e is None:
            assert g is None
        else:
            assert close(g, e, 1e-6, 1e-6 * max(1.0, abs(y))), f"{f.__name__}{args}: zyg {g!r} fd {e!r}"
