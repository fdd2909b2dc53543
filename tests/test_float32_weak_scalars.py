"""float32 arrays meeting Python numbers on cpu (issue 23, found by the round-2 families).

numpy 2 treats a Python number (and a number computed from float32 values) as weak: a
float32 array times 0.5 is float32.  numba promotes by type (float64), so on cpu a loop or a
branch that joins such a result with a float32 array did not compile ("Cannot unify
array(float32) and array(float64)"), in the primal, the adjoint's shadows and the tangents
of forward mode.  The cpu back end casts those numbers to float32 (``specialize``'s
``strong_scalars``) and keeps float32 tangents; these programs check value, gradient, jvp
and hvp on both targets against float64 finite differences.
"""
import numpy as np
import pytest

import zyg


def loop_scaled(x):
    z = x
    for i in range(2):
        z = z * (x[1] * 0.5)
    return np.sum(z)


def branch_scaled(x):
    z = x + 0.0
    if x[0] > 0:
        z = x * (x[1] + 1.0)
    return np.sum(z)


def ufuncs_where(x):
    z = np.multiply(x, x[1] * 2.0)
    w = np.where(z > 0.5, z, 0.25)
    for i in range(2):
        w = w + i * x
    return np.sum(np.maximum(w, 0.1) ** 2)


def inplace_then_loop(x):
    y = x.copy()
    c = np.sum(x) * 0.5
    y *= c
    acc = np.zeros_like(x)
    for i in range(3):
        acc = acc + y / (i + 1.0)
    return np.sum(acc * acc)


FUNCS = [loop_scaled, branch_scaled, ufuncs_where, inplace_then_loop]
X = np.array([0.5, 0.7, 0.9], dtype=np.float32)
V = np.array([1.0, -1.0, 0.5], dtype=np.float32)


def fd_grad(f, x, h=1e-6):
    x = x.astype(np.float64)
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("f", FUNCS, ids=lambda f: f.__name__)
def test_float32_value_grad_jvp_hvp(f, target):
    v, g = zyg.value_and_grad(f, target=target)(X)
    assert np.isclose(v, f(X), rtol=1e-5)
    assert g.dtype == np.float32
    ref = fd_grad(f, X)
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)   # float32: errors seen <= 1e-7
    _, t = zyg.jvp(f, (X,), (V,), target=target)
    np.testing.assert_allclose(t, ref @ V.astype(np.float64), rtol=1e-5, atol=1e-6)
    if target == "cpu" and f is not ufuncs_where:
        return      # cpu hvp (a minute of numba compile each): one function is enough in CI
    hv = zyg.hvp(f, X, V, target=target)
    g64 = zyg.grad(f, target="python")
    h = 1e-5
    x64, v64 = X.astype(np.float64), V.astype(np.float64)
    ref_hv = (g64(x64 + h * v64) - g64(x64 - h * v64)) / (2 * h)
    np.testing.assert_allclose(hv, ref_hv, rtol=1e-5, atol=1e-5)   # errors seen <= 1e-6


def test_float32_result_dtype_on_cpu_follows_numpy():
    # the primal's float32 arithmetic on cpu: the value is the float32 result numpy gives
    v = zyg.value_and_grad(branch_scaled, target="cpu")(X)[0]
    assert np.float32(v) == branch_scaled(X)


def roll_astype(x):
    y = np.roll(x, 1) * x
    return np.sum(y.astype(np.float64) ** 2)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_forward_mode_of_roll_and_astype(target):
    # both are linear: their tangents are the same call on the tangent (they had none)
    x = np.array([0.5, -0.7, 0.9, 1.1])
    v = np.array([1.0, 0.5, -0.25, 2.0])
    _, t = zyg.jvp(roll_astype, (x,), (v,), target=target)
    np.testing.assert_allclose(t, fd_grad(roll_astype, x) @ v, rtol=1e-6)
