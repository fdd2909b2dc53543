"""numpy floating-point semantics on both targets, and zero cotangents that stay zero.

Issue 12, item 7: a value whose local derivative is infinite but whose cotangent is zero
(``math.sqrt((x[i] - x[j]) ** 2)`` computed for all pairs and used only when ``i != j``,
as Lennard-Jones code does) made the whole gradient nan on ``python`` and raised
ZeroDivisionError on ``cpu``.  Both targets now follow numpy (inf / nan, no exception),
and a zero cotangent contributes exactly zero (docs/numerics.md).
"""
from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pytest

import zyg
from conftest import TARGETS, cached, fd_grad

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _fd_array(f, x, *rest, h=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        up[k] += h
        dn[k] -= h
        g[k] = (f(up, *rest) - f(dn, *rest)) / (2 * h)
    return g


def lennard_jones(x):
    n = x.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            d = math.sqrt((x[i] - x[j]) ** 2)      # 0 on the diagonal: d' is inf there
            if i != j:
                e += 1.0 / d ** 12 - 2.0 / d ** 6
    return e


def lennard_jones_inv(x):
    # the same pattern with the inverse computed for every pair (inf on the diagonal)
    n = x.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            r = x[i] - x[j]
            inv = 1.0 / math.sqrt(r * r)
            if i != j:
                e += inv ** 12 - 2.0 * inv ** 6
    return e


X_LJ = np.array([0.1, 1.25, 2.2, 3.5])


@pytest.mark.parametrize("f", [lennard_jones, lennard_jones_inv])
@pytest.mark.parametrize("target", TARGETS)
def test_lennard_jones_pattern_has_a_finite_gradient(f, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v, g = cached("vg", f, 0, target)(X_LJ.copy())
    assert np.all(np.isfinite(g))
    # the reference: the same function compiled by numba with numpy's semantics (plain
    # Python raises ZeroDivisionError on lennard_jones_inv)
    ref = numba.njit(error_model="numpy")(f)
    np.testing.assert_allclose(v, ref(X_LJ.copy()), rtol=1e-12)
    np.testing.assert_allclose(g, _fd_array(ref, X_LJ.copy()), rtol=1e-6, atol=1e-7)


def test_lennard_jones_targets_agree():
    gp = cached("grad", lennard_jones_inv, 0, "python")(X_LJ.copy())
    gc = cached("grad", lennard_jones_inv, 0, "cpu")(X_LJ.copy())
    np.testing.assert_allclose(gp, gc, rtol=1e-13)


def sqrt_unused(x, k):
    t = math.sqrt(x * x - x * x)        # sqrt(0): its partial is inf
    u = t * 1e300 * 1e300               # and a partial that is inf times the cotangent
    if k == 0:
        return x * x * 1.5
    return t + u


@pytest.mark.parametrize("target", TARGETS)
def test_zero_cotangent_times_inf_partial_is_zero(target):
    g = cached("grad", sqrt_unused, 0, target)(0.7, 0)
    assert g == pytest.approx(fd_grad(sqrt_unused, (0.7, 0)), rel=1e-6)
    assert g == pytest.approx(2.1, rel=1e-14)


def masked_norms(x, m):
    d = np.sqrt(x * x)                   # |x|, with an infinite partial at x == 0
    return np.sum(m * d) + np.sum(m * np.log(d * d + 1.0))


@pytest.mark.parametrize("target", TARGETS)
def test_zero_cotangent_elementwise_on_arrays(target):
    x = np.array([0.0, 1.3, -2.1, 0.0])
    m = np.array([0.0, 1.0, 1.0, 0.0])
    g = cached("grad", masked_norms, 0, target)(x, m)
    want = np.array([0.0, 1 + 2 * 1.3 / (1.3 ** 2 + 1), -(1 + 2 * 2.1 / (2.1 ** 2 + 1)), 0.0])
    np.testing.assert_allclose(g, want, rtol=1e-13)
    # away from the masked zeros, finite differences agree
    x2 = np.array([0.4, 1.3, -2.1, 0.9])
    np.testing.assert_allclose(cached("grad", masked_norms, 0, target)(x2, m),
                               _fd_array(masked_norms, x2, m), rtol=1e-6, atol=1e-8)


# -- division by zero and domain errors in the primal: numpy's values, no exception --------
def div_zero(a):
    return a / (a - a)


def div_zero_loop(x, n):
    s = 0.0
    for i in range(n):
        s += x / (i - i)                 # int zero divisor
    return s


def mod_zero(a):
    return a % (a - a) + a


def pow_neg(a):
    return (a - 2.0) ** 0.5 + (a - a) ** -1.0


def domain(a):
    return math.sqrt(a - 2.0) + math.log(a - a) + math.exp(a * 1000.0)


PRIMAL_CASES = [
    (div_zero, (1.5,), (math.inf, math.nan)),
    (div_zero_loop, (1.5, 2), (math.inf, math.inf)),
    (mod_zero, (1.5,), (math.nan, math.nan)),
    (pow_neg, (1.5,), (math.nan, math.nan)),
    (domain, (1.5,), (math.nan, math.nan)),
]


@pytest.mark.parametrize("f,args,want", PRIMAL_CASES, ids=[c[0].__name__ for c in PRIMAL_CASES])
@pytest.mark.parametrize("target", TARGETS)
def test_numpy_semantics_in_the_primal_and_gradient(f, args, want, target):
    v, g = cached("vg", f, 0, target)(*args)
    np.testing.assert_equal((float(v), float(g)), want)


@pytest.mark.parametrize("f,args,want", PRIMAL_CASES, ids=[c[0].__name__ for c in PRIMAL_CASES])
def test_targets_agree_on_division_by_zero(f, args, want):
    vp = cached("vg", f, 0, "python")(*args)
    vc = cached("vg", f, 0, "cpu")(*args)
    np.testing.assert_equal([float(t) for t in vp], [float(t) for t in vc])


def smooth(x):
    return x * x * 0.5 + math.sin(x) - math.exp(-x)


@pytest.mark.parametrize("x", [math.inf, -math.inf, math.nan, 0.0, 1e308])
def test_inf_and_nan_inputs_agree(x):
    vp = cached("vg", smooth, 0, "python")(x)
    vc = cached("vg", smooth, 0, "cpu")(x)
    np.testing.assert_equal([float(t) for t in vp], [float(t) for t in vc])


def test_finite_inputs_still_match_finite_differences():
    for t in TARGETS:
        assert cached("grad", smooth, 0, t)(0.8) == pytest.approx(fd_grad(smooth, (0.8,)), rel=1e-6)


def test_python_target_keeps_python_errors_for_non_numbers():
    # the helpers fall back to numba only for numbers; other types keep Python's error
    from zyg.numerics import zyg_div
    with pytest.raises(TypeError):
        zyg_div("a", 2)
    assert zyg_div(1, 0) == math.inf and math.isnan(zyg_div(0.0, 0.0))


def test_fused_gradient_reruns_with_zero_cotangent_tests_when_nan():
    # the fused cpu gradient runs without the zero-cotangent tests inside loops (they cost up
    # to 1.6x on tight loops); a nan gradient makes it run the variant that has them
    src = zyg.show(lennard_jones, X_LJ.copy())
    fused = src[src.index("=== fused"):]
    assert "raise _ZygRetry()" in fused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cached("grad", lennard_jones, 0, "cpu")(X_LJ.copy())
        _, back = zyg.pullback(lennard_jones, X_LJ.copy(), target="cpu")
    assert np.array_equal(got, back(1.0)[0])


def sqrt_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i]) * x[i]
    return s


def test_a_true_nan_gradient_stays_nan_on_both_targets():
    x = np.array([0.5, -1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vp, gp = cached("vg", sqrt_sum, 0, "python")(x.copy())
        vc, gc = cached("vg", sqrt_sum, 0, "cpu")(x.copy())
    assert math.isnan(vp) and math.isnan(vc)
    np.testing.assert_array_equal(np.isnan(gp), [False, True, False])
    np.testing.assert_allclose(gp, gc, rtol=1e-14)
