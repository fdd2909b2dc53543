"""Forward mode's zero tests: ``zyg.jvp`` agrees with ``grad . v`` where a zero meets an
infinite partial derivative (docs/numerics.md, "A zero cotangent contributes zero").

Reverse mode skips a statement's contributions when its cotangent is zero, so a value that
does not reach the output (or reaches it through a zero factor) adds nothing even where
its derivative is infinite.  Forward mode's dual: a term ``t * p`` of a tangent is zero
where the tangent ``t`` or the partial ``p`` is zero.  ``zyg.jvp`` runs without the tests
and, when a tangent comes out nan, once more with them (``pullbacks/guards.times_nz``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")


def zero_factor(y):
    return 0.0 * math.sqrt(y) + y


def zero_weight(w, y):
    return w * math.sqrt(y) + w * y


def unused_singular(x, y):
    return x * y + 0.0 * math.sqrt(y - y)


def pair_energy(x):
    """sqrt of a square: 0 on the diagonal, d'(0) infinite, the diagonal unused."""
    n = x.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            d = math.sqrt((x[i] - x[j]) ** 2 + 0.0 * (x[i] - x[j]))
            if i != j:
                e += 1.0 / d ** 2 + 0.0 * d
            else:
                e += 0.0 * d
    return e


def regular_only(w, y):
    return w * math.sqrt(y) + w * y


def array_zero_weight(a, w):
    return np.sum(w * np.sqrt(a) + a * w)


def array_zero_factor(a):
    return np.sum(0.0 * np.sqrt(a) + a)


def really_nan(x):
    return math.sqrt(x) * x


CASES = [
    (zero_factor, (0.0,), (1.0,)),
    (zero_weight, (0.0, 0.0), (0.3, 1.0)),
    (unused_singular, (2.0, 3.0), (1.0, -0.5)),
    (pair_energy, (np.array([0.3, 1.1, 2.0]),), (np.array([1.0, -0.5, 0.25]),)),
    # elementwise on arrays: sqrt at the zeros of a, times a zero weight or factor
    (array_zero_weight, (np.array([0.0, 1.0, 4.0]), 0.0), (np.array([1.0, 2.0, -1.0]), 0.5)),
    (array_zero_factor, (np.array([0.0, 1.0, 0.0]),), (np.array([1.0, 2.0, -1.0]),)),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,args,v", CASES, ids=[c[0].__name__ for c in CASES])
def test_jvp_agrees_with_grad_at_singular_points(f, args, v, target):
    g = zyg.grad(f, argnums=tuple(range(len(args))), target=target)(*args)
    want = sum(float(np.sum(np.asarray(gi) * np.asarray(vi))) for gi, vi in zip(g, v))
    assert math.isfinite(want)
    y, t = zyg.jvp(f, args, v, target=target)
    assert y == pytest.approx(f(*args), rel=1e-14)
    assert t == pytest.approx(want, rel=1e-12, abs=1e-14), (t, want)


@pytest.mark.parametrize("target", TARGETS)
def test_a_nan_derivative_stays_nan(target):
    # sqrt at a negative number: the value and the derivative are nan, with the tests too
    y, t = zyg.jvp(really_nan, (-1.0,), (1.0,), target=target)
    assert math.isnan(y) and math.isnan(t)
    assert math.isnan(zyg.grad(really_nan, target=target)(-1.0))


@pytest.mark.parametrize("target", TARGETS)
def test_regular_points_take_the_forward_mode_without_tests(target):
    # away from the singular point the first run's tangent is kept (no second build)
    y, t = zyg.jvp(regular_only, (0.5, 2.0), (1.0, 0.0), target=target)
    assert t == pytest.approx(math.sqrt(2.0) + 2.0, rel=1e-14)
    from zyg import api
    assert not any(k[-1] == "zero tests" and k[0] is regular_only for k in api._JVPS
                   if isinstance(k, tuple) and len(k) > 1)
