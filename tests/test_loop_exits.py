"""Arrays carried from one loop iteration to the next, in loops left early.

Regression (found while adding local lists, issue 13): in the adjoint of a loop header
whose latch block is inlined (a loop with ``break``), the cotangent of an array carried by
the loop was zeroed after the latch's adjoint had added into it, so every iteration but
the last lost its contribution: ``[0, 0, 0, 2]`` instead of ``[0.25, 0.5, 1, 2]``, on both
targets, with no error.  Each function is checked against central finite differences on
both targets.
"""
import numpy as np
import pytest

import zyg
from conftest import TARGETS


def carried_with_break(x):
    h = np.zeros(2)
    for i in range(10):
        if i >= x.shape[0]:
            break
        h = h * 0.5 + x[i]
    return np.sum(h)


def carried_with_return(x):
    h = np.ones(3)
    for i in range(x.shape[0]):
        if x[i] > 5.0:
            return np.sum(h * h)
        h = h * x[i] + 1.0
    return np.sum(h)


def carried_in_while_with_break(x):
    h = np.zeros(2)
    i = 0
    while True:
        if i >= x.shape[0]:
            break
        h = np.sin(h) + x[i] * h + x[i]
        i += 1
    return np.sum(h * h)


def nested_carried_with_break(x):
    acc = np.zeros(2)
    for j in range(3):
        h = np.ones(2) * x[j]
        for i in range(x.shape[0]):
            if i > j + 1:
                break
            h = 0.5 * h + x[i] * h
        acc = acc + h
    return np.sum(acc)


def _fd(f, x, h=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


CASES = [
    (carried_with_break, np.array([1.0, 2.0, 3.0, 4.0])),
    (carried_with_return, np.array([0.5, 1.5, 0.7, 9.0, 0.3])),
    (carried_with_return, np.array([0.5, 1.5, 0.7, 0.2])),
    (carried_in_while_with_break, np.array([0.3, -0.2, 0.5])),
    (nested_carried_with_break, np.array([0.3, 0.8, -0.4, 0.6])),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,x", CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_loop_carried_array_gradient(f, x, target):
    g = zyg.grad(f, target=target)(x.copy())
    np.testing.assert_allclose(g, _fd(f, x), rtol=1e-6, atol=1e-8)


def test_the_break_case_gives_every_iteration_its_share():
    g = zyg.grad(carried_with_break)(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(g, [0.25, 0.5, 1.0, 2.0])
