"""Forward mode where an operand the tangent does not mention sets the result's shape.

``np.sum(G - r)`` with ``G`` inactive (a global, or an argument given no tangent) of shape
(2, 3) and ``r`` active of shape (3,): the tangent of ``G - r`` is ``-t_r`` broadcast to
(2, 3).  Before the fix it kept ``r``'s shape and the sum counted ``r``'s entries once
instead of once per row of ``G``: a silently wrong ``jvp`` (-3 for -6), also in the batched
mode and in Hessians (forward over the reverse code).  Each case is checked against the
gradient (``jvp(v) == grad . v``) and central differences, on both targets.
"""
import numpy as np
import pytest

import zyg

G = np.linspace(0.5, 1.5, 6).reshape(2, 3)


def global_minus(r):
    return np.sum(G - r)


def global_plus_row(r):
    # r of shape (1, 3): the same number of dimensions as G, a size-1 axis broadcast
    return np.sum(np.sin(G + r))


def float_minus(s, A):
    return np.sum((A - s) ** 2)


def arg_minus(A, r):
    return np.sum(np.tanh(A - r))


def global_plus_row_sum(r):
    return np.sum(G + r) + np.sum(r * r)


def float_minus_sum(s, A):
    return np.sum(A - s) * 2.0


def arg_minus_sum(A, r):
    # A is given no tangent: inactive in the generated code, and it sets the shape
    return np.sum(A - r)


CASES = [
    (global_minus, (np.array([0.5, -1.0, 2.0]),), 0),
    (global_plus_row, (np.array([[0.3, -0.2, 0.7]]),), 0),
    (global_plus_row_sum, (np.array([[0.3, -0.2, 0.7]]),), 0),
    (float_minus, (1.5, G.copy()), 0),
    (float_minus_sum, (1.5, G.copy()), 0),
    (arg_minus, (G.copy(), np.array([0.1, 0.2, 0.3])), 1),
    (arg_minus_sum, (G.copy(), np.array([0.1, 0.2, 0.3])), 1),
]


def _fd(f, args, i, v, h=1e-6):
    up = list(args)
    dn = list(args)
    up[i] = args[i] + h * v
    dn[i] = args[i] - h * v
    return (f(*up) - f(*dn)) / (2 * h)


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("f,args,i", CASES, ids=[c[0].__name__ for c in CASES])
def test_jvp_of_broadcasting_operand(f, args, i, target):
    rng = np.random.default_rng(0)
    v = rng.standard_normal(np.shape(args[i])) if np.shape(args[i]) else 0.7
    t = [None] * len(args)
    t[i] = v
    _, ty = zyg.jvp(f, args, tuple(t), target=target)
    g = zyg.grad(f, argnums=i, target=target)(*args)
    assert np.isclose(ty, np.sum(g * v), rtol=1e-12, atol=1e-12)
    assert np.isclose(ty, _fd(f, args, i, v), rtol=1e-6, atol=1e-8)
    # batched: two lanes, the second twice the first
    V = np.stack([np.asarray(v, float), 2 * np.asarray(v, float)])
    tb = [None] * len(args)
    tb[i] = V
    _, tyb = zyg.jvp(f, args, tuple(tb), target=target, batched=True)
    assert np.allclose(tyb, [ty, 2 * ty], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_hessian_through_a_broadcasting_operand(target):
    def f(r):
        return np.sum((G - r) ** 3)
    r = np.array([0.2, -0.4, 0.9])
    H = zyg.hessian(f, target=target)(r)
    # d2/dr_j2 of sum_i (G_ij - r_j)^3 = 6 sum_i (G_ij - r_j)
    assert np.allclose(H, np.diag(6 * np.sum(G - r, axis=0)), rtol=1e-10, atol=1e-10)
