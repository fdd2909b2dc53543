"""``sparsity="detect"`` (issue 27): zyg finds the pattern of a Jacobian or Hessian itself
(zyg/sparse.py ``detected``), keeps it per function and argument shapes, and checks every
later result with one product along a random direction; a call whose pattern differs (a
branch taken otherwise) gets the dense matrix with the larger pattern, never a wrong one."""
from __future__ import annotations

import math

import numpy as np
import pytest

import zyg
from zyg import sparse

TARGETS = ["python", "cpu"]


def banded(x):
    n = x.shape[0]
    y = np.empty(n)
    for i in range(n):
        y[i] = math.sin(x[i]) * (x[i - 1] if i > 0 else 1.0) + x[(i + 1) % n] ** 2
    return y


def blocks(x):
    # three residuals per pair of coordinates: block-diagonal (bundle-adjustment-like)
    m = x.shape[0] // 2
    r = np.empty(3 * m)
    for k in range(m):
        a, b = x[2 * k], x[2 * k + 1]
        r[3 * k] = a * b
        r[3 * k + 1] = math.exp(a) - b
        r[3 * k + 2] = math.cos(a + 2.0 * b)
    return r


def arrow(x):
    # every output reads x[0]: an arrowhead Jacobian
    y = np.empty(x.shape[0])
    y[0] = np.sum(x * x)
    for i in range(1, x.shape[0]):
        y[i] = x[0] * math.tanh(x[i])
    return y


def rosen(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def arrow_loss(x):
    return x[0] * np.sum(np.sin(x)) + np.sum(x ** 4)


def branchy(x, c):
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n):
        if c > 0:
            y[i] = x[i] * x[i]
        else:
            y[i] = x[i] * x[(i + 3) % n]
    return y


def _true_pattern(D):
    return D != 0


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, n", [(banded, 11), (blocks, 10), (arrow, 9)])
def test_detected_jacobian_equals_dense(f, n, target):
    J = zyg.jacobian(f, sparsity="detect", target=target)
    dense = zyg.jacobian(f, target=target)
    rng = np.random.default_rng(1)
    for k in range(3):          # the first call detects, the others use the kept pattern
        x = rng.uniform(0.2, 1.2, n)
        S = J(x.copy())
        D = dense(x.copy())
        assert S.shape == D.shape
        np.testing.assert_allclose(S.toarray(), D, rtol=1e-12, atol=1e-12)
        assert (S.toarray() != 0).sum() == _true_pattern(D).sum()
    P = sparse._DETECTED[(f, 0, sparse._shapes((x,)), target, "jacobian")]
    assert P.nnz == _true_pattern(D).sum()      # no entry beyond the structure


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, n", [(rosen, 12), (arrow_loss, 8)])
def test_detected_hessian_equals_dense(f, n, target):
    H = zyg.hessian(f, sparsity="detect", target=target)
    dense = zyg.hessian(f, target=target)
    rng = np.random.default_rng(2)
    for k in range(3):
        x = rng.uniform(0.2, 1.2, n)
        S = H(x)
        D = dense(x)
        np.testing.assert_allclose(S.toarray(), D, rtol=1e-10, atol=1e-10)
    P = sparse._DETECTED[(f, 0, sparse._shapes((x,)), target, "hessian")]
    assert P.nnz == (D != 0).sum()


@pytest.mark.parametrize("target", TARGETS)
def test_a_pattern_that_changes_with_a_branch_is_never_wrong(target):
    B = zyg.jacobian(branchy, sparsity="detect", target=target)
    x = np.linspace(0.1, 1.0, 10)
    S1 = B(x, 1.0)
    assert S1.nnz == 10                           # detected on the diagonal branch
    S2 = B(x, -1.0)                               # the other branch: the check catches it
    np.testing.assert_allclose(S2.toarray(), zyg.jacobian(branchy, target=target)(x, -1.0),
                               rtol=1e-13, atol=1e-13)
    S3 = B(x + 0.5, -1.0)                         # kept: the union pattern
    np.testing.assert_allclose(S3.toarray(), zyg.jacobian(branchy, target=target)(x + 0.5, -1.0),
                               rtol=1e-13, atol=1e-13)
    S4 = B(x, 1.0)
    np.testing.assert_allclose(S4.toarray(), np.diag(2.0 * x), rtol=1e-13, atol=1e-13)


def test_a_missed_entry_is_caught_by_the_check(monkeypatch):
    """The check is what stands between a kept pattern and a wrong matrix: a pattern with an
    entry taken out is caught and the matrix computed densely."""
    x = np.linspace(0.3, 1.3, 8)
    J = zyg.jacobian(banded, sparsity="detect", target="python")
    J(x.copy())
    key = (banded, 0, sparse._shapes((x,)), "python", "jacobian")
    P = sparse._DETECTED[key].toarray()
    P[4, 3] = False
    import scipy.sparse as sp
    sparse._DETECTED[key] = sp.csc_matrix(P)
    S = J(x.copy())
    np.testing.assert_allclose(S.toarray(), zyg.jacobian(banded, target="python")(x.copy()),
                               rtol=1e-13, atol=1e-13)
    assert sparse._DETECTED[key].toarray()[4, 3]


def test_bad_sparsity_string():
    with pytest.raises(ValueError, match="detect"):
        zyg.jacobian(banded, sparsity="auto")(np.ones(3))
