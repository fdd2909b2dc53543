"""zyg.check_grads: passes on correct functions and rules, catches wrong rules with a
readable report (reverse mode, forward mode, the dot-product test, second order)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")


# -- correct functions --------------------------------------------------------------------------

def poly(x, y, n):
    return x * y ** n + math.sin(x * y)


def loop_branch(x, y):
    r = 0.0
    for i in range(4):
        if r < 1.0:
            r = r + math.tanh(x * (i + 1)) * y
        else:
            r = r * 0.5 + x
    return r


def rows_loss(w, X):
    s = 0.0
    for i in range(X.shape[0]):
        s += math.tanh(np.sum(X[i] * w))
    return s * s


def in_place(a, b, k):
    # writes into its argument: check_grads must copy the inputs before every evaluation
    for i in range(a.shape[0]):
        a[i] = a[i] * b[i] + k
    a *= 0.5
    a[0] += math.sin(b[1])
    return np.sum(a * a) + b[2] * a[1]


def array_out(x, w):
    y = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i]) * w + x[(i + 1) % x.shape[0]] ** 2
    return y


def tuple_out(x, v):
    return x * np.sum(v * v), np.cos(v) * x


X = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]])
W3 = np.array([0.7, -0.4, 0.25])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, args, argnums", [
    (poly, (0.7, 1.3, 3), (0, 1, 2)),          # an int argument: its gradient must be None
    (loop_branch, (0.4, -0.9), (0, 1)),
    (rows_loss, (W3, X), (0, 1)),
    (in_place, (np.array([0.3, -0.8, 1.1]), np.array([0.5, 0.9, -0.4]), 0.2), (0, 1, 2)),
    (array_out, (np.array([0.2, -0.5, 0.9, 1.3]), 0.6), (0, 1)),
    (tuple_out, (0.8, np.array([0.3, -1.2])), (0, 1)),
], ids=["scalars+int", "loop_branch", "rows", "in_place", "array_out", "tuple_out"])
def test_passes_on_correct_functions(f, args, argnums, target):
    keep = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert zyg.check_grads(f, args, argnums=argnums, target=target) is None
    for a, k in zip(args, keep):       # check_grads itself leaves the arguments alone
        np.testing.assert_array_equal(a, k)


@pytest.mark.parametrize("target", TARGETS)
def test_second_order_passes(target):
    zyg.check_grads(poly, (0.7, 1.3, 2), argnums=(0, 1), order=2, target=target)


def test_second_order_arrays_python():
    zyg.check_grads(rows_loss, (W3, X), argnums=0, order=2, target="python")


def test_single_mode_and_single_argnum():
    zyg.check_grads(loop_branch, (0.4, -0.9), argnums=1, modes=("fwd",), target="python")
    zyg.check_grads(loop_branch, (0.4, -0.9), argnums=-1, modes=("rev",), target="python")


# -- custom rules -------------------------------------------------------------------------------

def logistic(x):
    return 1.0 / (1.0 + math.exp(-x))


def softsign(x):
    return x / (1.0 + abs(x))


def uses_logistic(w, b):
    return (logistic(2.0 * w + b) - 0.25) ** 2


def uses_softsign(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += softsign(v[i]) * (i + 1)
    return s


def _logistic_rule_right(x):
    y = logistic(x)

    def back(dy):
        return (dy * y * (1.0 - y),)
    return y, back


def _logistic_rule_forgets_dy(x):
    y = logistic(x)

    def back(dy):
        return (y * (1.0 - y),)          # bug: not multiplied by dy (not linear in dy)
    return y, back


def _softsign_rule_right(x):
    y = softsign(x)

    def back(dy):
        return (dy / ((1.0 + abs(x)) * (1.0 + abs(x))),)
    return y, back


def _softsign_rule_statements(x):
    d = 1.0 + abs(x)
    y = x / d

    def back(dy):
        q = dy / d
        return (q / d,)
    return y, back


def _softsign_rule_wrong(x):
    y = softsign(x)

    def back(dy):
        return (dy / ((1.0 + x) * (1.0 + x)),)    # bug: forgot abs, wrong where x < 0
    return y, back


@pytest.mark.parametrize("target", TARGETS)
def test_passes_on_correct_custom_rules(target):
    zyg.adjoint(logistic)(_logistic_rule_right)
    zyg.adjoint(softsign)(_softsign_rule_right)
    zyg.check_grads(uses_logistic, (0.3, -0.1), argnums=(0, 1), target=target)
    zyg.check_grads(uses_softsign, (np.array([0.4, -0.7, 1.2, -0.2]),), target=target)


def test_passes_on_a_correct_rule_with_statements_in_reverse_mode():
    """A rule whose back() has statements has no forward rule (zyg.jvp raises NoAdjoint):
    modes=("rev",) checks reverse mode only."""
    zyg.adjoint(softsign)(_softsign_rule_statements)
    v = np.array([0.4, -0.7, 1.2, -0.2])
    zyg.check_grads(uses_softsign, (v,), modes=("rev",), target="python")
    with pytest.raises(zyg.NoAdjoint, match="no forward rule"):
        zyg.check_grads(uses_softsign, (v,), target="python")


@pytest.mark.parametrize("target", TARGETS)
def test_registering_a_rule_reaches_forward_mode_and_hessians(target):
    """Registering a rule clears the caches of jvp and hessian too, not only those of grad
    (jvp kept using the rule it was first compiled with)."""
    zyg.adjoint(logistic)(_logistic_rule_right)
    zyg.check_grads(uses_logistic, (0.3, -0.1), argnums=(0, 1), order=2, target=target)

    @zyg.adjoint(logistic)
    def _(x):
        y = logistic(x)

        def back(dy):
            return (dy * 2.0 * y * (1.0 - y),)       # twice the derivative
        return y, back
    x = 0.3
    s = logistic(2.0 * x - 0.1)
    _, t = zyg.jvp(uses_logistic, (x, -0.1), (1.0, 0.0), target=target)
    assert t == pytest.approx(2.0 * (s - 0.25) * 2.0 * 2.0 * s * (1.0 - s), rel=1e-12)
    h = zyg.hessian(uses_logistic, target=target)(x, -0.1)
    # with the rule's derivative u = 2 s (1 - s) of logistic: df/dx = 2 (s - 0.25) u 2, and
    # forward mode over it uses ds/dx = 2 u and du/dx = 2 (1 - 2 s) ds/dx
    u = 2.0 * s * (1.0 - s)
    ds = 2.0 * u
    du = 2.0 * (1.0 - 2.0 * s) * ds
    assert h == pytest.approx(4.0 * (ds * u + (s - 0.25) * du), rel=1e-10)


def _report(f, args, **kw) -> zyg.GradCheckError:
    with pytest.raises(zyg.GradCheckError) as info:
        zyg.check_grads(f, args, **kw)
    assert isinstance(info.value, AssertionError)
    return info.value


@pytest.mark.parametrize("target", TARGETS)
def test_catches_a_wrong_rule_in_reverse_mode(target):
    zyg.adjoint(softsign)(_softsign_rule_wrong)
    v = np.array([0.4, -0.7, 1.2, -0.2])
    err = _report(uses_softsign, (v,), modes=("rev",), target=target)
    text = str(err)
    assert text.startswith(f"zyg.check_grads: derivatives of uses_softsign (target='{target}')")
    assert "- reverse mode (zyg.grad), argument 0 (array of shape (4,)):" in text
    assert "2 of 4 values differ" in text
    # the wrong elements are the negative entries, 1 and 3; the right ones are not listed
    assert "argument 0[1]: finite differences give" in text
    assert "argument 0[3]: finite differences give" in text
    assert "argument 0[0]:" not in text and "argument 0[2]:" not in text
    # expected and computed values: d/dv1 of 2 * softsign(v1) at v1 = -0.7
    want = 2.0 / (1.0 + 0.7) ** 2
    got = 2.0 / (1.0 - 0.7) ** 2
    m = re.search(r"argument 0\[1\]: finite differences give (\S+), got (\S+) ", text)
    assert m is not None, text
    assert float(m.group(1)) == pytest.approx(want, rel=1e-9)
    assert float(m.group(2)) == pytest.approx(got, rel=1e-12)
    assert "max abs error" in text and "max rel error" in text
    assert [c for c, _ in err.failures] == ["reverse mode (zyg.grad), argument 0 (array of shape (4,))"]


@pytest.mark.parametrize("target", TARGETS)
def test_catches_a_wrong_rule_in_the_dot_product_test(target):
    zyg.adjoint(logistic)(_logistic_rule_forgets_dy)
    err = _report(uses_logistic, (0.3, -0.1), argnums=(0, 1), target=target)
    checks = [c for c, _ in err.failures]
    assert "dot-product test <J v, w> = <v, J^T w> (random v, w)" in checks
    text = str(err)
    assert "forward mode (zyg.jvp):      <J v, w> = " in text
    assert "reverse mode (zyg.pullback): <v, J^T w> = " in text
    assert "finite differences:          <J v, w> = " in text
    lhs = float(re.search(r"<J v, w> = (\S+)\n", text).group(1))
    rhs = float(re.search(r"<v, J\^T w> = (\S+)\n", text).group(1))
    assert abs(lhs - rhs) > 1e-3
    # reverse mode alone is wrong too, for both arguments
    assert "reverse mode (zyg.grad), argument 0 (float)" in checks
    assert "reverse mode (zyg.grad), argument 1 (float)" in checks


def test_wrong_rule_caught_by_second_order_only_when_first_order_passes():
    """order=2 reports first-order failures first (second-order references are finite
    differences of zyg's gradient, which must be right)."""
    zyg.adjoint(logistic)(_logistic_rule_forgets_dy)
    err = _report(uses_logistic, (0.3, -0.1), order=2, target="python")
    assert not any("second order" in c for c, _ in err.failures)


def test_second_order_reports_a_wrong_hessian(monkeypatch):
    """Second-order results are compared with finite differences of zyg's gradient: a
    Hessian off by a little (as a bug in forward-over-reverse would make it) is reported
    with the element and both values."""
    real = zyg.api.hessian

    def off_hessian(f, argnums=0, *, target="cpu"):
        h = real(f, argnums, target=target)
        return lambda *args: h(*args) * (1.0 + 1e-4)
    monkeypatch.setattr(zyg.api, "hessian", off_hessian)
    err = _report(rows_loss, (W3, X), argnums=0, order=2, target="python")
    assert [c for c, _ in err.failures] == \
        ["second order (zyg.hessian w.r.t. argument 0 (array of shape (3,)))"]
    text = str(err)
    m = re.search(r"d2/d argument 0\[(\d)\] d argument 0\[(\d)\]: finite differences of zyg.grad "
                  r"give (\S+), got (\S+) ", text)
    assert m is not None, text
    H = real(rows_loss, 0, target="python")(W3, X)
    i, j = int(m.group(1)), int(m.group(2))
    assert float(m.group(3)) == pytest.approx(H[i, j], rel=1e-7)
    assert float(m.group(4)) == H[i, j] * (1.0 + 1e-4)


# -- API errors ---------------------------------------------------------------------------------

def test_bad_arguments():
    with pytest.raises(ValueError, match="order"):
        zyg.check_grads(poly, (0.7, 1.3, 2), order=3)
    with pytest.raises(ValueError, match="unknown mode"):
        zyg.check_grads(poly, (0.7, 1.3, 2), modes=("backward",))
    with pytest.raises(ValueError, match="out of range"):
        zyg.check_grads(poly, (0.7, 1.3, 2), argnums=5)
    with pytest.raises(TypeError, match="argument 0 is a str"):
        zyg.check_grads(lambda s: 1.0, ("a",))
    with pytest.raises(ValueError, match="not finite"):
        zyg.check_grads(lambda x: math.inf * x, (1.0,))
    with pytest.raises(TypeError, match="must return a number"):
        zyg.check_grads(array_out, (np.array([0.2, -0.5]), 0.6), argnums=1, order=2,
                        target="python")
