"""``np.where`` as code compiled for cpu calls it (zyg/backends/cpu.py ``fast_where``): an
elementwise select where an operand is an array, numba's ``np.where`` otherwise.  It must give
what numba's ``np.where`` gives -- values, dtype, shape, broadcasting -- in user code and in
the rules' adjoints (abs, maximum, where ...), and compile faster (issue 24)."""
import numba
import numpy as np
import pytest

import zyg
from zyg.backends.cpu import fast_where

W = fast_where()

F32 = np.array([0.5, -0.7, 0.9], dtype=np.float32)
F64 = np.array([[0.3, -1.0, 2.0], [-0.1, 0.0, 4.0]])
I64 = np.array([1, -2, 3])
C128 = np.array([1 + 2j, -1j, 0.5])

CASES = [
    ("f32 array, python float", lambda c, a, b: (c > 0, a, 0.25), (F32, F32, None)),
    ("f64 2-D, broadcast 1-D", lambda c, a, b: (c > 0, a, b), (F64, F64, F64[0])),
    ("scalar cond, arrays", lambda c, a, b: (c[0] > 0, a, b), (F64[0], F64[0], F64[1])),
    ("int and float", lambda c, a, b: (c > 0, a, 1.5), (I64, I64, None)),
    ("complex and float", lambda c, a, b: (np.abs(c) > 0.7, c, 0.0), (C128, None, None)),
    ("bool and bool", lambda c, a, b: (c > 0, c < 1, c > 2), (F32, None, None)),
    ("all scalars", lambda c, a, b: (c[0] > 0, c[1], 2.0), (F64[0], None, None)),
    ("non-contiguous", lambda c, a, b: (c[:, ::2] > 0, a[:, ::2], -1.0), (F64, F64, None)),
]


@pytest.mark.parametrize("name,make,args", CASES, ids=[c[0] for c in CASES])
def test_same_as_numbas_np_where(name, make, args):
    py_make, make = make, numba.njit(make)

    def ours(c, a, b):
        x, y, z = make(c, a, b)
        return W(x, y, z)

    def numbas(c, a, b):
        x, y, z = make(c, a, b)
        return np.where(x, y, z)

    got = numba.njit(ours)(*args)
    want = numba.njit(numbas)(*args)
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.where(*py_make(*args)))     # and numpy's values


def test_one_argument_form():
    got = numba.njit(lambda c: W(c > 0))(F64)
    want = np.where(F64 > 0)
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))


def relu_mix(x, y):
    z = np.where(x > 0.2, x, 0.1 * x)
    return np.sum(np.maximum(z, y) * np.abs(x - y))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_through_where_maximum_abs_agree_across_targets(dtype):
    x = np.array([0.5, -0.3, 0.9, 0.15], dtype=dtype)
    y = np.array([0.2, 0.4, -0.6, 0.3], dtype=dtype)
    vp, gp = zyg.value_and_grad(relu_mix, (0, 1), target="python")(x, y)
    vc, gc = zyg.value_and_grad(relu_mix, (0, 1), target="cpu")(x, y)
    tol = 1e-6 if dtype == "float32" else 1e-12
    assert np.isclose(vp, vc, rtol=tol)
    for a, b in zip(gp, gc):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, rtol=tol)
    # forward mode through the same rules agrees with the gradient (cpu)
    vx, vy = np.ones_like(x), np.full_like(y, -0.5)
    _, t = zyg.jvp(relu_mix, (x, y), (vx, vy), target="cpu")
    assert np.isclose(t, np.dot(gc[0], vx) + np.dot(gc[1], vy), rtol=10 * tol)
    # against central differences in float64
    x64, y64 = x.astype(float), y.astype(float)
    h = 1e-6
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        fd = (relu_mix(x64 + e, y64) - relu_mix(x64 - e, y64)) / (2 * h)
        assert abs(gc[0][i] - fd) <= 1e-4 * max(1.0, abs(fd))


def test_the_rules_read_it_as_np_where():
    # generated code that holds the cpu target's where and is differentiated again
    from zyg.rules.dispatch import rule_for
    assert rule_for(W) is not None and rule_for(W) is rule_for(np.where)
