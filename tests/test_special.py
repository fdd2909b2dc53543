"""scipy.special rules and numpy's scalar ufunc forms (issue 13).

1. The numba-compilable implementations in zyg/rules/special.py (the primal on the cpu
   target) against scipy, to about 1e-13 relative where the function is smooth,
   interpreted and compiled.
2. Every new scalar rule through the generic rule checker (tests/rulecheck.py) on both
   targets (test_rules.py runs them too, with every built-in rule).
3. The array forms through the array rule checker (tests/arraycheck.py) on both targets.
4. A user function mixing them, against finite differences, and an inactive call on cpu.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sc

import zyg
from zyg.numerics import njit
from zyg.rules import special

from arraycheck import check_expr
from rulecheck import check_rule, sample_points
from zyg.rules import registry

RNG = np.random.default_rng(1313)

# (implementation, scipy reference, points)
POS = [0.013, 0.3, 0.97, 1.4616, 2.5, 7.3, 11.0, 55.5, 1e3, 3.7e6]
NEG = [-0.3, -1.7, -2.5, -7.25, -30.6]
IMPLS = [
    ("expit", special.expit, sc.expit, [-750.0, -40.0, -3.2, -0.4, 0.0, 0.7, 5.0, 36.0, 800.0]),
    ("logit", special.logit, sc.logit, [1e-12, 0.01, 0.26, 0.4, 0.5, 0.55, 0.74, 0.9, 1 - 1e-9]),
    ("gammaln", special.gammaln, sc.gammaln, POS + NEG),
    ("digamma", special.digamma, sc.digamma, POS + NEG),
    ("trigamma", special.trigamma, lambda x: sc.polygamma(1, x), POS + NEG),
    ("ndtr", special.ndtr, sc.ndtr, [-30.0, -8.0, -1.2, 0.0, 0.4, 3.0, 9.0]),
    ("log_ndtr", special.log_ndtr, sc.log_ndtr,
     [-1e5, -300.0, -38.5, -20.5, -19.5, -7.0, -1.2, 0.0, 0.4, 5.9, 6.1, 12.0, 40.0]),
]
# digamma has a root near 1.4616: relative accuracy there is limited by cancellation
ATOL = {"digamma": 1e-15}


@pytest.mark.parametrize("name,impl,ref,pts", IMPLS, ids=[c[0] for c in IMPLS])
def test_implementation_matches_scipy(name, impl, ref, pts):
    jitted = njit(impl)
    for x in pts:
        want = float(ref(x))
        for f, how in ((impl, "python"), (jitted, "numba")):
            got = f(x)
            assert got == pytest.approx(want, rel=2e-13, abs=ATOL.get(name, 0.0)), (name, how, x, got, want)


def test_xlogy_matches_scipy():
    jitted = njit(special.xlogy)
    for a, b in [(0.0, 0.0), (0.0, 3.0), (2.5, 0.3), (-1.2, 7.0)]:
        assert jitted(a, b) == pytest.approx(float(sc.xlogy(a, b)), rel=1e-15)
        assert special.xlogy(a, b) == pytest.approx(float(sc.xlogy(a, b)), rel=1e-15)


def test_logsumexp_helpers_match_scipy():
    X = RNG.normal(size=(3, 5)) * 30.0
    lse = njit(special.logsumexp_all)
    assert lse(X) == pytest.approx(float(sc.logsumexp(X)), rel=1e-14)
    assert lse(np.array([-np.inf, 0.0])) == pytest.approx(0.0, abs=1e-300)
    for ax in (0, 1):
        np.testing.assert_allclose(special.logsumexp_axis(X, ax), sc.logsumexp(X, axis=ax), rtol=1e-14)


# --- the generic checkers --------------------------------------------------------------------
SCALAR_FNS = [sc.expit, sc.logit, sc.gammaln, sc.digamma, sc.erf, sc.erfc, sc.ndtr, sc.log_ndtr,
              sc.xlogy, np.add, np.subtract, np.multiply, np.divide, np.mod]


@pytest.mark.parametrize("fn", SCALAR_FNS, ids=lambda f: f.__name__)
def test_scalar_rule_checker(fn):
    rule = registry.lookup(fn)
    pts = sample_points(rule)
    assert len(pts) >= 2, pts
    for args in pts:
        check_rule(fn, *args, target="python")
    check_rule(fn, *pts[0], target="cpu")


ARRAY_CASES = [
    ("sc.expit(a0)", [RNG.uniform(-3, 3, (3, 4))]),
    ("sc.logit(a0)", [RNG.uniform(0.1, 0.9, 5)]),
    ("sc.gammaln(a0)", [RNG.uniform(0.3, 6.0, 5)]),
    ("sc.digamma(a0)", [RNG.uniform(0.3, 6.0, (2, 3))]),
    ("sc.erf(a0)", [RNG.uniform(-2, 2, 5)]),
    ("sc.erfc(a0)", [RNG.uniform(-2, 2, 5)]),
    ("sc.ndtr(a0)", [RNG.uniform(-2, 2, 5)]),
    ("sc.log_ndtr(a0)", [RNG.uniform(-25, 8, 6)]),
    ("sc.xlogy(a0, a1)", [RNG.uniform(-2, 2, (3, 4)), RNG.uniform(0.2, 3, 4)]),
    ("sc.xlogy(a0, a1)", [RNG.uniform(-2, 2, 4), 1.7]),
    ("sc.logsumexp(a0)", [RNG.normal(size=(3, 4))]),
    ("sc.logsumexp(a0, axis=1)", [RNG.normal(size=(3, 4))]),
    ("sc.logsumexp(a0, axis=0)", [RNG.normal(size=(3, 4))]),
    ("sc.logsumexp(a0, axis=-1)", [RNG.normal(size=5)]),
]


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("expr,args", ARRAY_CASES, ids=[c[0] + str(np.shape(c[1][0])) for c in ARRAY_CASES])
def test_array_rule_checker(expr, args, target):
    check_expr(expr, args, target=target, label=f"{expr} [{target}]")


def test_every_special_array_rule_has_a_case():
    special.array_rule(sc.expit)
    covered = [getattr(sc, e.split("(")[0][3:]) for e, _ in ARRAY_CASES]
    missing = [f.__name__ for f in special.ARRAY_RULES if not any(f is c for c in covered)]
    assert not missing, missing


# --- in user code ----------------------------------------------------------------------------
def model(w, b, x, y):
    """Logistic regression with a few special functions in the loss."""
    s = 0.0
    for i in range(x.shape[0]):
        z = w * x[i] + b
        p = sc.expit(z)
        s += -sc.xlogy(y[i], p) - sc.xlogy(1.0 - y[i], 1.0 - p)
        s += 0.01 * sc.log_ndtr(z) + 0.001 * sc.gammaln(p + 1.0) + 0.001 * sc.digamma(p + 1.0)
    return s + 0.1 * sc.logit(sc.expit(w) * 0.8) + np.multiply(w, b) + np.mod(b, 0.3)


def array_model(W, x):
    z = W @ x
    return np.sum(sc.logsumexp(W * 2.0, axis=1)) - sc.logsumexp(z) + np.sum(sc.expit(z) * sc.erf(z))


X = RNG.uniform(-1, 1, 6)
Y = (RNG.uniform(size=6) > 0.5).astype(float)
_G = {t: zyg.grad(model, argnums=(0, 1), target=t) for t in ("python", "cpu")}
_GA = {t: zyg.grad(array_model, target=t) for t in ("python", "cpu")}


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_model(target):
    w, b, h = 0.7, -0.35, 1e-6
    gw, gb = _G[target](w, b, X, Y)
    fw = (model(w + h, b, X, Y) - model(w - h, b, X, Y)) / (2 * h)
    fb = (model(w, b + h, X, Y) - model(w, b - h, X, Y)) / (2 * h)
    assert gw == pytest.approx(fw, rel=1e-6) and gb == pytest.approx(fb, rel=1e-6)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_array_model(target):
    W = RNG.uniform(-1, 1, (3, 4))
    x = RNG.uniform(-1, 1, 4)
    g = _GA[target](W, x)
    fd = np.zeros_like(W)
    for k in np.ndindex(W.shape):
        u, d = W.copy(), W.copy()
        u[k] += 1e-6
        d[k] -= 1e-6
        fd[k] = (array_model(u, x) - array_model(d, x)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def const_call(x):
    return sc.expit(2.0) * x + sc.gammaln(3.5) * x * x


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_inactive_call_compiles(target):
    g = zyg.grad(const_call, target=target)(0.4)
    assert g == pytest.approx(float(sc.expit(2.0)) + 2 * 0.4 * float(sc.gammaln(3.5)), rel=1e-13)


def test_unsupported_keyword_is_reported():
    def f(x):
        return sc.logsumexp(x, b=x)
    for t in ("python", "cpu"):
        with pytest.raises(zyg.ZygError) as ei:
            zyg.grad(f, target=t)(np.ones(3))
        assert "test_special.py" in str(ei.value) and "logsumexp" in str(ei.value), str(ei.value)
    assert math.isfinite(float(sc.logsumexp(np.ones(3))))
