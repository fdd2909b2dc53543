"""Higher-order AD: Hessians and Hessian-vector products (forward over reverse), nested
derivatives, and gradients of functions that call zyg.grad.

Second derivatives are checked against central finite differences of zyg's own
gradient (itself checked against finite differences of the function elsewhere), and
against closed forms where there is one.
"""
import math

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")


def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        H[i + 1, i + 1] += 200.0
        H[i, i + 1] -= 400.0 * x[i]
        H[i + 1, i] -= 400.0 * x[i]
    return H


def loop_branch(x, n):
    r = x
    for i in range(n):
        if r > 1.0:
            r = math.sin(r) * x
        else:
            r = r * r + x * math.exp(-r)
    return r


def fd_of_grad(f, args, i, h=1e-5):
    """Central differences of zyg's gradient w.r.t. argument i (a float or 1-D array)."""
    g = zyg.grad(f, argnums=i, target="python")
    x = args[i]
    if isinstance(x, np.ndarray):
        cols = []
        for k in range(x.size):
            up, dn = x.copy(), x.copy()
            up[k] += h
            dn[k] -= h
            a_up, a_dn = list(args), list(args)
            a_up[i], a_dn[i] = up, dn
            cols.append((g(*a_up) - g(*a_dn)) / (2 * h))
        return np.stack(cols, axis=1)
    a_up, a_dn = list(args), list(args)
    a_up[i], a_dn[i] = x + h, x - h
    return (g(*a_up) - g(*a_dn)) / (2 * h)


@pytest.mark.parametrize("target", TARGETS)
def test_rosenbrock_hessian(target):
    x = np.array([0.3, -0.5, 1.2, 0.8, -1.1])
    H = zyg.hessian(rosenbrock, target=target)(x)
    np.testing.assert_allclose(H, rosenbrock_hessian(x), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(H, fd_of_grad(rosenbrock, (x,), 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_against_hessian_times_v(target):
    x = np.array([0.3, -0.5, 1.2, 0.8, -1.1])
    v = np.array([1.0, -2.0, 0.5, 0.25, 3.0])
    hv = zyg.hvp(rosenbrock, x, v, target=target)
    np.testing.assert_allclose(hv, rosenbrock_hessian(x) @ v, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("target", TARGETS)
def test_second_derivative_of_loops_and_branches(target):
    for x in (0.4, 0.9, 1.3):
        d2 = zyg.hessian(loop_branch, target=target)(x, 4)
        assert d2 == pytest.approx(fd_of_grad(loop_branch, (x, 4), 0), rel=1e-6, abs=1e-9)


def cubic_loop(x, y, n):
    s = 0.0
    for i in range(n):
        s = s * 0.5 + x * x * y + math.sin(x * s)
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_nested_grad_second_order(target):
    d1 = zyg.grad(loop_branch, target=target)
    d2 = zyg.grad(d1, target=target)
    for x in (0.4, 0.9, 1.3):
        assert d2(x, 4) == pytest.approx(fd_of_grad(loop_branch, (x, 4), 0), rel=1e-6, abs=1e-9)
    # mixed second derivatives: d/dy of df/dx
    dxy = zyg.grad(zyg.grad(cubic_loop, argnums=0, target=target), argnums=1, target=target)
    gx = zyg.grad(cubic_loop, argnums=0, target="python")
    h = 1e-5
    want = (gx(0.6, 1.1 + h, 5) - gx(0.6, 1.1 - h, 5)) / (2 * h)
    assert dxy(0.6, 1.1, 5) == pytest.approx(want, rel=1e-6)


# third derivatives, on both targets: tests/test_relower.py


def test_value_and_grad_of_a_gradient():
    d1 = zyg.grad(cubic_loop, target="python")
    v, d2 = zyg.value_and_grad(d1, target="python")(0.6, 1.1, 5)
    assert v == pytest.approx(d1(0.6, 1.1, 5), rel=1e-14)
    assert d2 == pytest.approx(zyg.hessian(cubic_loop, target="python")(0.6, 1.1, 5), rel=1e-12)


def vector_fn(x, c):
    # R^3 -> R^4 with a loop, a branch and an in-place update
    y = np.zeros(4)
    for i in range(3):
        if x[i] > 0.0:
            y[i] += c * math.sin(x[i])
        else:
            y[i] += x[i] * x[i]
        y[3] += x[i] * y[i]
    return y


@pytest.mark.parametrize("target", TARGETS)
def test_jacobian_both_ways(target):
    x = np.array([0.4, -0.7, 1.2])
    Jf = zyg.jacobian(vector_fn, mode="fwd", target=target)(x, 1.5)
    Jr = zyg.jacobian(vector_fn, mode="rev", target=target)(x, 1.5)
    h = 1e-6
    want = np.stack([(vector_fn(x + h * e, 1.5) - vector_fn(x - h * e, 1.5)) / (2 * h)
                     for e in np.eye(3)], axis=1)
    assert Jf.shape == Jr.shape == (4, 3)
    np.testing.assert_allclose(Jf, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(Jr, Jf, rtol=1e-12, atol=1e-14)
    # w.r.t. a float argument: shape (4,)
    Jc = zyg.jacobian(vector_fn, argnums=1, target=target)(x, 1.5)
    np.testing.assert_allclose(Jc, (vector_fn(x, 1.5 + h) - vector_fn(x, 1.5 - h)) / (2 * h), rtol=1e-6)


# -- hook and checkpoint ------------------------------------------------------------------
def clip1(g):
    return max(min(g, 1.0), -1.0)


def clip_half(g):
    return np.clip(g, -0.5, 0.5)


def hooked_scalar(x):
    y = zyg.hook(clip1, x * x)        # the cotangent of y (3.0) is clipped to 1.0
    return 3.0 * y + x


def hooked_array(a):
    b = zyg.hook(clip_half, a * 2.0)
    return np.sum(b * b)


@pytest.mark.parametrize("target", TARGETS)
def test_hook_applies_its_function_to_the_cotangent(target):
    assert zyg.grad(hooked_scalar, target=target)(0.9) == pytest.approx(2 * 0.9 + 1.0, rel=1e-14)
    a = np.array([0.1, 0.3, -0.2])
    np.testing.assert_allclose(zyg.grad(hooked_array, target=target)(a),
                               np.clip(2 * 2 * a, -0.5, 0.5) * 2, rtol=1e-14)
    # forward mode: hook is the identity
    _, t = zyg.jvp(hooked_scalar, (0.9,), (1.0,), target=target)
    assert t == pytest.approx(3 * 2 * 0.9 + 1.0, rel=1e-14)


RUNS = []


def count_run(x):
    RUNS.append(1)
    return 0.0


def stepped(x, y):
    s = 0.0
    for i in range(5):
        s = s * 0.5 + math.sin(x * i + y)
    return s + count_run(x)


def checkpointed(x, y):
    return zyg.checkpoint(stepped, x * 2.0, y) * x


def recorded(x, y):
    return stepped(x * 2.0, y) * x


def step_array(a, w):
    return a * w + np.sin(a)


def checkpointed_array(a, w):
    b = zyg.checkpoint(step_array, a, w)
    return np.sum(b * b)


def test_checkpoint_reruns_the_function_in_the_backward_pass():
    zyg.nondifferentiable(count_run)
    g_ck = zyg.grad(checkpointed, argnums=(0, 1), target="python")
    g_rec = zyg.grad(recorded, argnums=(0, 1), target="python")
    g_ck(0.7, 0.3), g_rec(0.7, 0.3)            # first calls: transforms and kind samples
    RUNS.clear()
    a = g_ck(0.7, 0.3)
    assert len(RUNS) == 2                       # the forward pass and the recomputation
    RUNS.clear()
    b = g_rec(0.7, 0.3)
    assert len(RUNS) == 1                       # recorded: runs once
    np.testing.assert_allclose(a, b, rtol=1e-14)   # and the result is unchanged
    h = 1e-6
    assert a[0] == pytest.approx((recorded(0.7 + h, 0.3) - recorded(0.7 - h, 0.3)) / (2 * h), rel=1e-7)


@pytest.mark.parametrize("target", TARGETS)
def test_checkpoint_of_arrays(target):
    a = np.array([0.1, 0.3, -0.2])
    ga, gw = zyg.grad(checkpointed_array, argnums=(0, 1), target=target)(a, 1.5)
    b = a * 1.5 + np.sin(a)
    np.testing.assert_allclose(ga, 2 * b * (1.5 + np.cos(a)), rtol=1e-14)
    assert gw == pytest.approx(np.sum(2 * b * a), rel=1e-14)
