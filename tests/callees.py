"""Functions imported by tests/test_calls.py: callees that live in another module."""
import math

import numba
import numpy as np

import zyg

GAIN = 1.5                      # a module constant read by a callee (frozen at compile time)
WEIGHTS = np.array([0.5, -1.0, 2.0])


def soft(x):
    """Innermost level of a call chain: it has a custom rule (a deliberately cheap one)."""
    return math.log1p(math.exp(x))


def _soft_rule(x):
    y = soft(x)

    def back(dy):
        return (dy / (1.0 + math.exp(-x)),)
    return y, back


def register_rules():
    """Register the custom rule of ``soft`` (tests forget user rules after each test)."""
    zyg.adjoint(soft)(_soft_rule)


def rounded(x):
    """Piecewise constant: declared non-differentiable by the test that uses it."""
    return math.floor(x * 10.0) / 10.0


def middle(x, scale=2.0):
    return soft(scale * x) + GAIN * x


def outer_level(x, y):
    return middle(x) * middle(y, scale=0.5)


@numba.njit
def jitted_poly(x, c):
    # a numba dispatcher: zyg transforms its Python source
    return c * x * x + math.sin(x)


def weighted(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += WEIGHTS[i] * a[i]
    return s


class Lib:
    """A namespace of helpers, called as Lib.method(...)."""

    @staticmethod
    def sq(x):
        return x * x

    @staticmethod
    def norm2(x, y):
        return math.sqrt(Lib.sq(x) + Lib.sq(y))
