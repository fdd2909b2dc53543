"""``zyg.grad`` of a function that calls ``zyg.grad`` (a gradient penalty).

The loss calls the gradient of ``g`` (module-level ``dg = zyg.grad(g)`` or
``zyg.grad(g)(...)`` written in place); its gradient needs second derivatives of
``g``, which zyg computes by forward mode over the reverse-mode gradient
(``zyg/rules/gradcall.py``).  Every gradient is checked against central finite
differences of the loss evaluated in plain Python (calling ``g`` and ``zyg.grad(g)``),
on both targets.
"""
import math
import os

import numpy as np
import pytest

import zyg
from zyg.errors import UnsupportedSyntax

HERE = __file__
TARGETS = ("python", "cpu")
STEP = 1e-6
RTOL = 1e-6


def fd(f, args, i, h=STEP):
    """Central differences of the scalar ``f`` w.r.t. argument ``i`` (a float or an
    array, element by element), with a step relative to each element."""
    x = args[i]

    def at(v):
        a = [b.copy() if isinstance(b, np.ndarray) else b for b in args]
        a[i] = v
        return float(f(*a))
    if isinstance(x, np.ndarray):
        out = np.empty(x.shape)
        for k in np.ndindex(x.shape):
            s = h * max(1.0, abs(x[k]))
            up, dn = x.copy(), x.copy()
            up[k] += s
            dn[k] -= s
            out[k] = (at(up) - at(dn)) / (2 * s)
        return out
    s = h * max(1.0, abs(x))
    return (at(x + s) - at(x - s)) / (2 * s)


def check(got, expect, scale):
    """zyg's derivative equals the finite difference up to ``RTOL`` (relative, with an
    absolute slack of ``RTOL`` times the loss's size: the rounding of the difference)."""
    np.testing.assert_allclose(got, expect, rtol=RTOL, atol=RTOL * max(1.0, abs(scale)))


# -- the inner functions ---------------------------------------------------------------

def g(w, x):
    """A scalar function of arrays with a loop and a branch."""
    s = 0.0
    for i in range(w.shape[0]):
        t = w[i] * x[i]
        if t > 0.0:
            s += math.sin(t) * w[i] + 0.5 * t ** 3
        else:
            s += t * t * math.exp(w[i])
    return s


dg = zyg.grad(g, target="python")            # module level (its own target: unrelated)
dg_x = zyg.grad(g, argnums=1, target="python")


def g_inplace(w, x):
    """Writes into an array it made (rewound by zyg's gradient of g)."""
    z = w * x
    z[0] += w[1] * w[2]
    z *= 0.5
    for i in range(z.shape[0]):
        z[i] = math.tanh(z[i]) + z[i] ** 2
    return np.sum(z * w)


dg_inplace = zyg.grad(g_inplace, target="python")


def h(t, c):
    """A function of floats: d h/dt = c cos(ct) + 3 t^2 exp(c)."""
    return math.sin(c * t) + t ** 3 * math.exp(c)


dh = zyg.grad(h, target="python")


# -- the losses --------------------------------------------------------------------------

def penalty(w, x, lam):
    gw = dg(w, x)
    return g(w, x) + lam * np.sum(gw ** 2)


def penalty_inline(w, x, lam):
    gw = zyg.grad(g)(w, x)
    return g(w, x) + lam * np.sum(gw ** 2)


def input_penalty(w, x, lam):
    """The gradient w.r.t. the data (argnums=1), as in a WGAN-GP critic loss."""
    gx = zyg.grad(g, argnums=1)(w, x)
    return g(w, x) + lam * (np.sqrt(np.sum(gx ** 2)) - 1.0) ** 2


def input_penalty_ref(w, x, lam):
    gx = dg_x(w, x)
    return g(w, x) + lam * (np.sqrt(np.sum(gx ** 2)) - 1.0) ** 2


def inplace_penalty(w, x, lam):
    gw = dg_inplace(w, x)
    return g_inplace(w, x) + lam * np.sum(gw * gw * x)


def float_loss(t, c):
    """d/dt of h: its gradient is h's second derivatives."""
    return dh(t, c) * 2.0 + t


def float_loss_exact(t, c):
    """(d/dt, d/dc) of float_loss, from the closed form of h."""
    e = math.exp(c)
    d_tt = -c * c * math.sin(c * t) + 6.0 * t * e
    d_tc = math.cos(c * t) - c * t * math.sin(c * t) + 3.0 * t * t * e
    return 2.0 * d_tt + 1.0, 2.0 * d_tc


def batch_penalty(w, X, lam):
    """The penalty summed over data points: one gradient of g per iteration."""
    s = 0.0
    for k in range(X.shape[0]):
        xk = X[k]
        gk = dg(w, xk)
        s += g(w, xk) + lam * np.sum(gk ** 2)
    return s / X.shape[0]


W = np.array([0.3, -0.5, 1.2, 0.8])
X = np.array([1.1, 2.0, -0.7, 0.4])
XB = np.array([[1.1, 2.0, -0.7, 0.4], [-0.6, 0.9, 1.3, -1.5], [0.2, -1.1, 0.5, 0.7]])
LAM = 0.3


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_penalty_wrt_weights_and_lambda(target):
    args = (W.copy(), X.copy(), LAM)
    gw, glam = zyg.grad(penalty, argnums=(0, 2), target=target)(*args)
    L = penalty(*args)
    check(gw, fd(penalty, args, 0), L)
    check(glam, fd(penalty, args, 2), L)
    np.testing.assert_array_equal(args[0], W)       # the caller's arrays are left alone
    # value_and_grad and pullback go through the same rule
    v, gx = zyg.value_and_grad(penalty, argnums=1, target=target)(*args)
    assert abs(v - L) <= 1e-12 * abs(L)
    check(gx, fd(penalty, args, 1), L)
    y, back = zyg.pullback(penalty, *args, target=target)
    dw, dx, dlam = back(2.0)
    check(dw, 2.0 * fd(penalty, args, 0), L)
    check(dlam, 2.0 * fd(penalty, args, 2), L)


@pytest.mark.parametrize("target", TARGETS)
def test_inline_grad_call(target):
    args = (W.copy(), X.copy(), LAM)
    assert penalty_inline(*args) == penalty(*args)
    gw = zyg.grad(penalty_inline, target=target)(*args)
    check(gw, fd(penalty, args, 0), penalty(*args))


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_wrt_the_data_argnums_1(target):
    args = (W.copy(), X.copy(), LAM)
    assert input_penalty(*args) == input_penalty_ref(*args)
    gw, glam = zyg.grad(input_penalty, argnums=(0, 2), target=target)(*args)
    L = input_penalty_ref(*args)
    check(gw, fd(input_penalty_ref, args, 0), L)
    check(glam, fd(input_penalty_ref, args, 2), L)


@pytest.mark.parametrize("target", TARGETS)
def test_second_derivative_of_a_float_function(target):
    t, c = 0.7, -0.4
    dt, dc = zyg.grad(float_loss, argnums=(0, 1), target=target)(t, c)
    et, ec = float_loss_exact(t, c)
    assert abs(dt - et) <= 1e-12 * max(1.0, abs(et))
    assert abs(dc - ec) <= 1e-12 * max(1.0, abs(ec))
    check(dt, fd(float_loss, (t, c), 0), float_loss(t, c))
    check(dc, fd(float_loss, (t, c), 1), float_loss(t, c))


@pytest.mark.parametrize("target", TARGETS)
def test_inner_function_writing_in_place(target):
    args = (W.copy(), X.copy(), LAM)
    gw, glam = zyg.grad(inplace_penalty, argnums=(0, 2), target=target)(*args)
    L = inplace_penalty(*args)
    check(gw, fd(inplace_penalty, args, 0), L)
    check(glam, fd(inplace_penalty, args, 2), L)
    np.testing.assert_array_equal(args[0], W)


@pytest.mark.parametrize("target", TARGETS)
def test_penalty_in_a_loop_over_data_points(target):
    args = (W.copy(), XB.copy(), LAM)
    gw, gX, glam = zyg.grad(batch_penalty, argnums=(0, 1, 2), target=target)(*args)
    L = batch_penalty(*args)
    check(gw, fd(batch_penalty, args, 0), L)
    check(gX, fd(batch_penalty, args, 1), L)
    check(glam, fd(batch_penalty, args, 2), L)
    np.testing.assert_array_equal(args[1], XB)


@pytest.mark.parametrize("target", TARGETS)
def test_forward_mode_of_a_loss_calling_grad(target):
    args = (W.copy(), X.copy(), LAM)
    vw = np.array([0.5, -1.0, 0.25, 2.0])
    vlam = -0.7
    y, ty = zyg.jvp(penalty, args, (vw, None, vlam), target=target)
    assert abs(y - penalty(*args)) <= 1e-12 * abs(y)

    def along(e):
        return penalty(W + e * vw, X, LAM + e * vlam)
    check(ty, fd(along, (0.0,), 0), y)


# the cpu version compiles one generated function of about 1,400 lines: 1-3 minutes of numba,
# the slowest test of the suite; a long test (ZYG_LONG_TESTS=1), the python version in CI
_THIRD_ORDER_TARGETS = TARGETS if os.environ.get("ZYG_LONG_TESTS") == "1" else ("python",)


@pytest.mark.parametrize("target", _THIRD_ORDER_TARGETS)
def test_hessian_of_a_loss_calling_grad(target):
    """Third derivatives of g: forward mode over the generated gradient of the loss, which
    calls the generated second-order functions (inlined when lowered again).  On the cpu
    target it is one function of about 1,400 lines: numba takes a minute or more to
    compile it (docs/higher_order.md)."""
    args = (W.copy(), X.copy(), LAM)
    H = zyg.hessian(penalty, target=target)(*args)
    grad = zyg.grad(penalty, target="python")
    cols = np.stack([fd(lambda *b: grad(*b)[k], args, 0) for k in range(W.size)])
    check(H, cols, np.max(np.abs(grad(*args))))


# -- errors ------------------------------------------------------------------------------

def line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return start + k
    raise AssertionError(text)


vg = zyg.value_and_grad(g)
dg_tuple = zyg.grad(g, argnums=(0, 1))


def calls_value_and_grad(w, x):
    v, gw = vg(w, x)
    return v + np.sum(gw)


def calls_value_and_grad_inline(w, x):
    v, gw = zyg.value_and_grad(g)(w, x)
    return v + np.sum(gw)


def calls_tuple_argnums(w, x):
    gw, gx = dg_tuple(w, x)
    return np.sum(gw * gx)


def calls_tuple_argnums_inline(w, x):
    gw, gx = zyg.grad(g, argnums=(0, 1))(w, x)
    return np.sum(gw * gx)


def calls_tuple_argnums_reversed(w, x):
    gx, gw = zyg.grad(g, argnums=(-1, 0))(w, x)
    return np.sum(gw * w) + np.sum(np.sin(gx))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [calls_tuple_argnums, calls_tuple_argnums_inline,
                                calls_tuple_argnums_reversed])
def test_grad_with_a_tuple_of_argnums_inside(fn, target):
    """zyg.grad(g, argnums=(i, j)) inside a differentiated function: the tuple of the
    gradients, differentiated in reverse and forward mode (one GradOf per argnum)."""
    w, x = W.copy(), X.copy()
    got = zyg.grad(fn, argnums=(0, 1), target=target)(w.copy(), x.copy())
    y = fn(w.copy(), x.copy())
    for i in (0, 1):
        check(got[i], fd(fn, (w, x), i), y)
    tw, tx = np.linspace(-1.0, 1.0, w.size), np.linspace(0.5, -0.5, x.size)
    _, t = zyg.jvp(fn, (w.copy(), x.copy()), (tw, tx), target=target)
    check(t, np.sum(got[0] * tw) + np.sum(got[1] * tx), y)


def test_a_tuple_argnum_out_of_range_points_at_the_call():
    def bad(w, x):
        return np.sum(zyg.grad(g, argnums=(0, 2))(w, x)[0])
    with pytest.raises(UnsupportedSyntax, match="out of range"):
        zyg.grad(bad, target="python")(W.copy(), X.copy())


def calls_grad_of_grad(w, x):
    return zyg.grad(zyg.grad(h))(w[0], x[0])


def keeps_the_transform(w, x):
    d = zyg.grad(g)
    return np.sum(d(w, x))


@pytest.mark.parametrize("fn, at, words", [
    (calls_value_and_grad, "vg(w, x)", "value_and_grad"),
    (calls_value_and_grad_inline, "zyg.value_and_grad(g)(w, x)", "value_and_grad"),
    (calls_grad_of_grad, "zyg.grad(zyg.grad(h))", "third derivative"),
    (keeps_the_transform, "d = zyg.grad(g)", "called at once"),
])
def test_unsupported_forms_point_at_the_call(fn, at, words):
    with pytest.raises(UnsupportedSyntax) as ei:
        zyg.grad(fn, target="python")(W.copy(), X.copy())
    e = ei.value
    assert e.lineno == line_of(fn, at)
    assert e.filename == HERE
    assert words in str(e)
