"""Sparse Jacobians and Hessians from a given pattern (issue 27; zyg/sparse.py): against the
dense results, with the number of passes the colouring promises."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import zyg


def chain(x):
    """A tridiagonal Jacobian (each output reads its neighbours)."""
    n = x.shape[0]
    y = np.empty(n)
    for i in range(n):
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i < n - 1 else 0.0
        y[i] = left * x[i] + np.sin(right) + x[i] ** 2
    return y


def blocks(x):
    """Six outputs per pair of inputs: a block-diagonal Jacobian, taller than wide."""
    n = x.shape[0] // 2
    y = np.empty(6 * n)
    for b in range(n):
        u, v = x[2 * b], x[2 * b + 1]
        for k in range(6):
            y[6 * b + k] = np.cos(u * (k + 1)) * v + u * v * k
    return y


def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def tridiagonal(n):
    return sp.diags([1, 1, 1], [-1, 0, 1], shape=(n, n), dtype=bool)


X = np.linspace(-0.7, 1.3, 30)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_banded_jacobian_forward(target):
    J = zyg.jacobian(chain, sparsity=tridiagonal(30), mode="fwd", target=target)(X)
    assert sp.issparse(J) and J.shape == (30, 30)
    assert J.passes == 3
    dense = zyg.jacobian(chain, mode="fwd", target="python")(X)
    np.testing.assert_allclose(J.toarray(), dense, rtol=1e-13, atol=1e-14)


def test_block_jacobian_reverse_and_auto():
    x = np.linspace(0.2, 1.1, 8)
    P = sp.block_diag([np.ones((6, 2), bool)] * 4)
    dense = zyg.jacobian(blocks, target="python")(x)
    Jr = zyg.jacobian(blocks, sparsity=P, mode="rev", target="python")(x)
    assert Jr.passes == 6            # the rows of a block share columns: one pass per row of a block
    np.testing.assert_allclose(Jr.toarray(), dense, rtol=1e-13, atol=1e-14)
    Ja = zyg.jacobian(blocks, sparsity=P, target="python")(x)
    assert Ja.passes == 2            # forward: the two columns of a block
    np.testing.assert_allclose(Ja.toarray(), dense, rtol=1e-13, atol=1e-14)


def test_sparse_hessian():
    x = np.linspace(-0.5, 1.5, 25)
    H = zyg.hessian(rosenbrock, sparsity=tridiagonal(25), target="python")(x)
    assert H.passes == 3
    np.testing.assert_allclose(H.toarray(), zyg.hessian(rosenbrock, target="python")(x),
                               rtol=1e-12, atol=1e-12)


def test_a_pattern_of_the_wrong_shape_is_refused():
    with pytest.raises(zyg.TypeMismatch, match="sparsity pattern has shape"):
        zyg.jacobian(chain, sparsity=tridiagonal(29), target="python")(X)
