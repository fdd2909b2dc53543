"""Second derivatives through reshapes, and numpy's view-or-copy choice of reshape/ravel.

Hessians through ``w.reshape(...)``, ``.T`` and friends were all zeros: the adjoint
accumulates into a view of a shadow with ``np.add(np.reshape(d, s), e, np.reshape(d, s))``,
and the lowering read a ufunc's ``out`` argument as nothing, so forward mode over the
gradient lost the write (a user's ``np.multiply(x, x, out)`` lost its gradient the same way).

``A.T.reshape(-1)`` is a copy in numpy: its gradient was zero on the python target and numba
refused the reshape on cpu. A reshape that nothing writes through now owns a shadow buffer
when its base's shadow may not be contiguous; one that is written through is a view, checked
at run time (zyg/pullbacks/reshapes.py).

Checked against closed forms, against central differences of zyg's gradient, forward against
reverse, on both targets.
"""
import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")

V = np.array([[0.3, -0.2], [0.5, 0.7]])
X = np.array([[0.5, -1.0], [0.3, 0.8]])
W0 = np.array([0.4, -0.3, 0.9, 0.2])


def cube_of_reshape(w):
    return np.sum(w.reshape((2, 2)).copy() ** 3)


def tanh_layer(w):
    return np.sum(np.tanh(w.reshape((2, 2)) @ V))


def tanh_layer_hessian(w):
    """d2/dW_ik dW_lm sum_ij tanh(z_ij), z = W V: delta_il sum_j tanh''(z_ij) V_kj V_mj."""
    W = w.reshape((2, 2))
    t = np.tanh(W @ V)
    t2 = -2.0 * t * (1.0 - t * t)
    H = np.zeros((2, 2, 2, 2))
    for i in range(2):
        for k in range(2):
            for m in range(2):
                H[i, k, i, m] = np.sum(t2[i, :] * V[k, :] * V[m, :])
    return H.reshape((4, 4))


def shapes_mix(w):
    """The siblings of reshape in one program: .T, np.transpose, ravel, reshape(-1),
    np.reshape, flatten, a slice reshaped, A.T.reshape(-1) (a copy in numpy)."""
    A = np.reshape(w, (2, 2))
    s = np.sum(np.ravel(A.T) ** 3 * np.arange(4.0))
    s += np.sum(np.transpose(A) @ V * w.reshape(-1).reshape((2, 2)))
    s += np.sum(A.T.reshape(-1) ** 2 * np.arange(1.0, 5.0))
    s += np.sum(A.flatten() ** 3)
    s += np.sum(np.sin(w[2:].reshape((1, 2))) * w[:2].reshape((2, 1)))
    return s


def mlp(w):
    W1 = w[:6].reshape((2, 3))
    W2 = w[6:].reshape((3, 1))
    h = np.tanh(X @ W1)
    return np.sum((h @ W2) ** 2)


def fd_of_grad(f, x, h=1e-5):
    g = zyg.grad(f, target="python")
    cols = []
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        up[k] += h
        dn[k] -= h
        cols.append((g(up) - g(dn)) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_of_a_reshape_closed_form(target):
    H = zyg.hessian(cube_of_reshape, target=target)(W0)
    np.testing.assert_allclose(H, np.diag(6.0 * W0), rtol=1e-13, atol=1e-13)
    H = zyg.hessian(tanh_layer, target=target)(W0)
    np.testing.assert_allclose(H, tanh_layer_hessian(W0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(H, fd_of_grad(tanh_layer, W0), rtol=1e-6, atol=1e-8)
    v = np.array([0.7, -1.1, 0.25, 0.5])
    np.testing.assert_allclose(zyg.hvp(tanh_layer, W0, v, target=target), tanh_layer_hessian(W0) @ v,
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_through_every_shape_function(target):
    H = zyg.hessian(shapes_mix, target=target)(W0)
    want = fd_of_grad(shapes_mix, W0)
    assert np.abs(want).max() > 1.0
    np.testing.assert_allclose(H, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_mlp_from_one_flat_vector(target):
    w = np.linspace(-0.8, 0.9, 9)
    H = zyg.hessian(mlp, target=target)(w)
    want = fd_of_grad(mlp, w)
    np.testing.assert_allclose(H, want, rtol=1e-6, atol=1e-7)
    assert np.abs(H[:6, 6:]).max() > 0.1       # the block between the two matrices
    v = np.cos(np.arange(9.0))
    np.testing.assert_allclose(zyg.hvp(mlp, w, v, target=target), H @ v, rtol=1e-10, atol=1e-12)


def scaled_cubes(w, s):
    return s * np.sum(np.reshape(w, (2, 2)).T ** 3)


@pytest.mark.parametrize("target", TARGETS)
def test_mixed_second_derivative(target):
    # d/dw (d/ds f) = 3 w**2
    d = zyg.grad(zyg.grad(scaled_cubes, 1, target=target), 0, target=target)(W0, 1.3)
    np.testing.assert_allclose(d, 3.0 * W0 ** 2, rtol=1e-13)


dtanh = zyg.grad(tanh_layer, target="python")


def penalty(w, lam):
    return tanh_layer(w) + lam * np.sum(dtanh(w) ** 2)


def test_gradient_penalty_through_a_reshape():
    g = zyg.grad(penalty, target="python")(W0, 0.7)
    h = 1e-6
    fd = np.zeros(4)
    for k in range(4):
        e = np.zeros(4)
        e[k] = h
        fd[k] = (penalty(W0 + e, 0.7) - penalty(W0 - e, 0.7)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    # and its closed form: grad + 2 lam H grad
    want = dtanh(W0) + 2 * 0.7 * tanh_layer_hessian(W0) @ dtanh(W0)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


def test_float32_hessian():
    w = W0.astype(np.float32)
    H = zyg.hessian(cube_of_reshape, target="python")(w)
    assert H.dtype == np.float32
    np.testing.assert_allclose(H, np.diag(6.0 * w), rtol=1e-6)


# -- item 6: numpy's view or copy -------------------------------------------------------------

def transposed_flat(A):
    return np.sum(A.T.reshape(-1) * np.arange(4.0)) + np.sum(np.ravel(A.T) ** 2)


def flatten_written(A):
    b = A.flatten()          # always a copy
    b[0] = 10.0
    return np.sum(A * A) + np.sum(b * b)


def ravel_written(A):
    b = np.ravel(A)          # a view of a C-contiguous array: the write reaches A
    b[0] = 10.0
    return np.sum(A * A) + np.sum(b * np.arange(4.0))


def reshape_of_product_written(A):
    B = A * 1.5
    b = B.reshape(-1)        # a view: the write reaches B
    b[1] = 10.0
    return np.sum(B * B)


def transposed_written(A):
    b = A.T.reshape(-1)      # numpy copies here; zyg cannot follow that
    b[0] = 10.0
    return np.sum(A * A) + np.sum(b)


A0 = np.array([[1.0, 2.0], [3.0, 4.0]])


def fd(f, A, h=1e-6):
    g = np.zeros_like(A)
    for idx in np.ndindex(A.shape):
        up, dn = A.copy(), A.copy()
        up[idx] += h
        dn[idx] -= h
        g[idx] = (f(up) - f(dn)) / (2 * h)
    return g


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [transposed_flat, flatten_written, ravel_written, reshape_of_product_written])
def test_view_or_copy_follows_numpy(target, f):
    A = A0.copy()
    val, g = zyg.value_and_grad(f, target=target)(A)
    assert np.array_equal(A, A0)
    assert val == f(A0.copy())
    np.testing.assert_allclose(g, fd(f, A0), rtol=1e-7, atol=1e-9)
    v = np.array([[0.3, -1.0], [0.5, 2.0]])
    _, dv = zyg.jvp(f, (A0.copy(),), (v,), target=target)
    np.testing.assert_allclose(dv, np.sum(g * v), rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_write_through_a_reshape_numpy_may_copy_raises(target):
    with pytest.raises(zyg.UnsupportedSyntax) as e:
        zyg.grad(transposed_written, target=target)(A0.copy())
    assert "C-contiguous" in str(e.value) and "test_reshape_second_order.py" in str(e.value)


def strided_written(a):
    b = a.reshape((2, 2))
    b[0, 0] = 5.0
    return np.sum(a * a)


@pytest.mark.parametrize("target", TARGETS)
def test_write_through_reshape_of_a_strided_argument(target):
    # a C-contiguous argument: a view, as in numpy
    a = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(zyg.grad(strided_written, target=target)(a), [0.0, 4.0, 6.0, 8.0])
    # a strided one (numpy would give a view here too, but zyg does not follow strides): an error
    base = np.arange(8.0)
    with pytest.raises(zyg.UnsupportedSyntax):
        zyg.grad(strided_written, target=target)(base[::2])
    assert np.array_equal(base, np.arange(8.0))


def ufunc_out(x):
    o = np.zeros(3)
    np.multiply(x, x, o)
    np.add(o, x, out=o)
    return np.sum(o * np.sin(x))


def dot_out(x):
    o = np.zeros(3)
    np.dot(np.eye(3), x, o)
    return np.sum(o)


@pytest.mark.parametrize("target", TARGETS)
def test_ufunc_out_is_a_write(target):
    x = np.array([0.5, -1.2, 2.0])
    np.testing.assert_allclose(zyg.grad(ufunc_out, target=target)(x), fd(ufunc_out, x), rtol=1e-7)
    # np.dot's out= is the same write (zyg/ssa/desugar.lower_out_argument)
    np.testing.assert_allclose(zyg.grad(dot_out, target=target)(x), fd(dot_out, x), rtol=1e-7)


def write_through_flip(a):
    b = np.flip(a)           # a view in numpy
    b[0] = 3.0
    return np.sum(a * a)


def write_through_asarray(a):
    b = np.asarray(a)        # a itself
    b[0] = 3.0
    return np.sum(a * a)


def test_writes_through_other_numpy_views_raise():
    # its gradient was that of an untouched argument ([2, 4, 6])
    with pytest.raises(zyg.UnsupportedSyntax, match="returns a view"):
        zyg.grad(write_through_flip, target="python")(np.array([1.0, 2.0, 3.0]))


def test_write_through_asarray_reaches_the_argument():
    # np.asarray(a) of an array is a itself (zyg/pullbacks/specialize.py): the write is seen
    x = np.array([1.0, 2.0, 3.0])
    v, g = zyg.value_and_grad(write_through_asarray, target="python")(x)
    assert v == write_through_asarray(x.copy())
    np.testing.assert_allclose(g, fd(write_through_asarray, x), rtol=1e-7)
    assert np.array_equal(x, [1.0, 2.0, 3.0])


def test_jvp_checks_the_callers_array_before_copying_it():
    # jvp copies its arguments (C-ordered): the check must see the caller's F-ordered array,
    # whose reshape numpy copies (the jvp had given 129, numpy 30)
    A = np.asfortranarray(A0)
    with pytest.raises(zyg.UnsupportedSyntax, match="C-contiguous"):
        zyg.jvp(strided_written_2d, (A,), (np.ones((2, 2)),), target="python")
    y, dy = zyg.jvp(strided_written_2d, (A0.copy(),), (np.ones((2, 2)),), target="python")
    assert y == strided_written_2d(A0.copy())
    assert dy == pytest.approx(2.0 * (2.0 + 3.0 + 4.0))


def strided_written_2d(A):
    b = A.reshape(-1)
    b[0] = 10.0
    return np.sum(A * A)


def argument_written_after_flip(a):
    b = np.flip(a)           # sees the write below, in numpy
    a[0] = 3.0
    return np.sum(b * b * np.arange(3.0))


def argument_written_after_use(a):
    b = np.flip(a)
    s = np.sum(b * b)        # read before the write: fine
    a[0] = 3.0
    return s + np.sum(a)


def test_argument_written_after_a_view_function():
    # zyg's value was 6.0 (numpy: 22.0)
    with pytest.raises(zyg.UnsupportedSyntax, match="returns a view"):
        zyg.grad(argument_written_after_flip, target="python")(np.array([1.0, 2.0, 3.0]))
    a = np.array([1.0, 2.0, 3.0])
    val, g = zyg.value_and_grad(argument_written_after_use, target="python")(a.copy())
    assert val == argument_written_after_use(a.copy())
    np.testing.assert_allclose(g, [2.0, 5.0, 7.0], rtol=1e-14)
