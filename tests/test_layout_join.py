"""A loop variable that joins a C- and an F-ordered array (a transpose's ufunc result, then a
C-ordered one), read by an array expression: numba's type inference gives the expression the
layout 'A' and cannot allocate its result ("Don't know how to allocate array with layout
'A'", a crash the long property run found in issue 23's reshape family).  zyg compiles such
a function again without numba's rewrite passes; the values are the same."""
import numpy as np
import pytest

import zyg


def joined(a):
    B = np.tanh(a.T)
    for k in range(2):
        B = np.sin(np.ascontiguousarray(B)) * 0.5
    v = B * B
    return np.sum(v)


def reshaped(x, s):
    # the program of the long run (tests/test_property_round2.py, reshape_second_order)
    A = x.reshape(2, 3)
    t = 0.0
    A = A.T.reshape(2, 3) + A
    t = t + A.ravel() @ x
    A = (A.T.reshape(-1) * s).reshape(3, 2).T
    t = t + A.reshape(-1) @ A.reshape(-1)
    A = np.tanh(A)
    for i in range(1):
        A = np.sin(A.reshape(3, 2)).reshape(2, 3)
        t = t + A.reshape(-1) @ A.reshape(-1)
    return t + np.sum(A * A) * 1.3


def fd(f, args, i, h=1e-6):
    x = np.asarray(args[i], dtype=float)
    out = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        up, dn = [list(args), list(args)]
        xu, xd = x.copy(), x.copy()
        xu[idx] += h
        xd[idx] -= h
        up[i], dn[i] = (xu, xd) if x.shape else (float(xu), float(xd))
        out[idx] = (f(*up) - f(*dn)) / (2 * h)
    return out


CASES = [(joined, (np.array([[0.3, -0.5, 0.9], [0.2, 0.7, -0.4]]),), (0,)),
         (reshaped, (np.array([0.1, -0.641, 0.7, -0.546, -0.348, -0.7]), 0.544), (0, 1))]


@pytest.mark.parametrize("f,args,argnums", CASES, ids=["joined", "reshaped"])
def test_value_gradient_and_jvp_on_cpu(f, args, argnums):
    y = f(*args)
    v, g = zyg.value_and_grad(f, argnums, target="cpu")(*args)
    assert np.isclose(v, y, rtol=1e-12)
    g = g if isinstance(g, tuple) else (g,)
    for i, gi in zip(argnums, g):
        np.testing.assert_allclose(gi, fd(f, args, i), rtol=1e-6, atol=1e-8)
    tangents = tuple(np.ones_like(a) if isinstance(a, np.ndarray) else 1.0 for a in args)
    y2, t = zyg.jvp(f, args, tangents, target="cpu")
    want = sum(np.sum(gi * np.asarray(tv)) for gi, tv in zip(g, tangents))
    assert np.isclose(y2, y, rtol=1e-12) and np.isclose(t, want, rtol=1e-9)
