"""The scipy.optimize recipe of docs/api.md ("scipy.optimize"): ``minimize`` with
``zyg.value_and_grad`` as ``fun`` and ``jac=True``, and ``zyg.hvp`` as ``hessp`` for
Newton-CG and trust-region methods; extra data through ``args``."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

import zyg


def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2
    return s


def nll(w, X, y, lam):
    r = 0.0
    for i in range(X.shape[0]):
        z = np.dot(X[i], w)
        r += np.log1p(np.exp(z)) - y[i] * z
    return r + lam * np.dot(w, w)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_bfgs_with_value_and_grad(target):
    x0 = np.array([-1.2, 1.0, -0.5, 0.8])
    res = minimize(zyg.value_and_grad(rosenbrock, target=target), x0, jac=True, method="BFGS",
                   options={"gtol": 1e-9})
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(4), atol=1e-5)


@pytest.mark.parametrize("method", ["Newton-CG", "trust-krylov"])
def test_newton_with_hvp(method):
    x0 = np.array([-1.2, 1.0, -0.5, 0.8])
    hessp = lambda x, p: zyg.hvp(rosenbrock, x, p)      # noqa: E731
    res = minimize(zyg.value_and_grad(rosenbrock), x0, jac=True, hessp=hessp, method=method,
                   options={"xtol": 1e-10} if method == "Newton-CG" else {"gtol": 1e-9})
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(4), atol=1e-5)
    assert res.nhev > 0         # the Hessian-vector products were used


def test_args_and_hessp_with_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    y = (rng.random(60) < 1 / (1 + np.exp(-X @ np.array([1.0, -2.0, 0.5])))).astype(np.float64)
    lam = 0.1
    hessp = lambda w, p, *args: zyg.hvp(nll, w, p, *args)      # noqa: E731
    res = minimize(zyg.value_and_grad(nll), np.zeros(3), args=(X, y, lam), jac=True,
                   hessp=hessp, method="trust-ncg", options={"gtol": 1e-10})
    assert res.success, res.message
    # the optimum: the gradient of the penalised likelihood vanishes (checked independently)
    z = X @ res.x
    g = X.T @ (1 / (1 + np.exp(-z)) - y) + 2 * lam * res.x
    assert np.max(np.abs(g)) < 1e-7
