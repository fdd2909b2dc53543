"""zyg.pullback: back can be replayed with different cotangents; None for ints."""
import math

import pytest

import zyg


def grow_until(x, limit):
    # data-dependent while loop: the trip count depends on x
    r = x
    while r < limit:
        r = r * x + 0.1
    return r


def fd(f, args, i, h=1e-6):
    a, b = list(args), list(args)
    a[i] += h
    b[i] -= h
    return (f(*a) - f(*b)) / (2 * h)


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("x", [1.5, 1.23, 2.7])
def test_back_replays_with_different_dy(target, x):
    y, back = zyg.pullback(grow_until, x, 10, target=target)
    assert y == pytest.approx(grow_until(x, 10), rel=1e-15)
    ref = fd(grow_until, (x, 10), 0)
    for dy in (1.0, 2.0, -0.5, 1.0, 0.0):
        gx, gn = back(dy)
        assert gn is None
        assert gx == pytest.approx(dy * ref, rel=1e-7, abs=1e-12)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_pullback_entries_per_positional_argument(target):
    def f(a, k, b, flag):
        s = 0.0
        for i in range(k):
            s = s + math.sin(a * i) * b if flag else s - b
        return s
    y, back = zyg.pullback(f, 0.3, 4, 1.7, True, target=target)
    g = back(1.0)
    assert len(g) == 4 and g[1] is None and g[3] is None
    assert g[0] == pytest.approx(fd(lambda a: f(a, 4, 1.7, True), (0.3,), 0), rel=1e-7)
    assert g[2] == pytest.approx(fd(lambda b: f(0.3, 4, b, True), (1.7,), 0), rel=1e-7)


def test_pullbacks_of_two_calls_are_independent():
    y1, back1 = zyg.pullback(grow_until, 1.5, 10)
    y2, back2 = zyg.pullback(grow_until, 2.7, 10)
    g2 = back2(1.0)[0]
    g1 = back1(1.0)[0]
    assert g1 == pytest.approx(fd(grow_until, (1.5, 10), 0), rel=1e-7)
    assert g2 == pytest.approx(fd(grow_until, (2.7, 10), 0), rel=1e-7)
