"""The reverse of a loop whose iterations take run-time records runs backwards (issue 12).

A sum loop whose reversed iterations are independent is reversed in the forward order
(``StructuredMixin.s_adj_forward``: each iteration reads its own place on the tape).  A
recursive call, a ``zyg.checkpoint``, a checkpointed loop and a ``zyg.hook`` keep something
outside the tape: the pullbacks of recursive calls are records of the run, taken newest
first, and a hook's calls are seen by the user.  Run forwards, iteration 0's adjoint took
iteration 3's recursive pullback: a silent wrong gradient (6.7 instead of 6.9) for
``s += power(x + 0.1 * i, 3)``.  Each case is checked against finite differences on both
targets, through ``grad``, ``value_and_grad`` and ``pullback``.
"""
import math

import numpy as np
import pytest

import zyg
from conftest import fd_partial

TARGETS = ("python", "cpu")


def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def power_sum(x, n):
    s = 0.0
    for i in range(n):
        s += power(x + 0.1 * i, 3)
    return s


def power_sum_nested(x, n):
    s = 0.0
    for i in range(n):
        for j in range(2):
            s += power(x * (1.0 + 0.1 * i) + 0.05 * j, 2 + j)
    return s


def power_diff(x, n):
    s = 1.0
    for i in range(n):
        s -= 0.5 * power(math.sin(x + i), 2)
    return s


def block(v):
    return math.exp(0.3 * v) * math.sin(v)


def checkpointed_sum(x, n):
    s = 0.0
    for i in range(n):
        s += zyg.checkpoint(block, x + 0.2 * i)
    return s


def arr_power(a, k):
    if k == 0:
        return 1.0
    return np.sum(a) * arr_power(a, k - 1)


def arr_power_sum(a, n):
    s = 0.0
    for i in range(n):
        s += arr_power(a * (1.0 + 0.1 * i), 2)
    return s


CASES = [(power_sum, (0.6, 4)), (power_sum_nested, (0.7, 3)), (power_diff, (0.4, 5)),
         (checkpointed_sum, (0.5, 4))]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, args", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_records_in_a_sum_loop(f, args, target):
    want = fd_partial(f, args, 0)
    g = zyg.grad(f, target=target)(*args)
    assert g == pytest.approx(want, rel=1e-6), (g, want)
    v, g2 = zyg.value_and_grad(f, target=target)(*args)
    assert v == pytest.approx(f(*args), rel=1e-12) and g2 == pytest.approx(g, rel=1e-12)
    y, back = zyg.pullback(f, *args, target=target)
    assert back(1.0)[0] == pytest.approx(g, rel=1e-12)
    assert back(2.0)[0] == pytest.approx(2 * g, rel=1e-12)      # replayed: its own records


def test_exact_value_of_the_reported_case():
    for target in TARGETS:
        g = zyg.grad(power_sum, target=target)(0.6, 4)
        assert g == pytest.approx(3 * sum((0.6 + 0.1 * i) ** 2 for i in range(4)), rel=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_calls_with_arrays_in_a_sum_loop(target):
    a = np.array([0.3, -0.2, 0.5])
    g = zyg.grad(arr_power_sum, target=target)(a, 3)
    h = 1e-6
    want = np.empty_like(a)
    for k in range(a.size):
        up, dn = a.copy(), a.copy()
        up[k] += h
        dn[k] -= h
        want[k] = (arr_power_sum(up, 3) - arr_power_sum(dn, 3)) / (2 * h)
    np.testing.assert_allclose(g, want, rtol=1e-6)


SEEN = []


def record(dy):
    SEEN.append(dy)
    return dy


def hooked_sum(x, n):
    s = 0.0
    for i in range(n):
        s += zyg.hook(record, x * (1.0 + i)) ** 2
    return s


@pytest.mark.parametrize("target", ("python",))
def test_hooks_in_a_sum_loop_see_the_reverse_order(target):
    # a hook is called as the reverse pass reaches it: last iteration first (as PyTorch's
    # backward calls tensor hooks)
    del SEEN[:]
    g = zyg.grad(hooked_sum, target=target)(0.5, 4)
    assert g == pytest.approx(fd_partial(hooked_sum, (0.5, 4), 0), rel=1e-6)
    assert SEEN == pytest.approx([2 * 0.5 * (1.0 + i) for i in reversed(range(4))], rel=1e-12)
