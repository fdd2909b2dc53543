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


def rotate(x, y, n):
    a, b, c = x, y, 1.0
    for i in range(n):
        a, b, c = b * x, c, a + y
    return a + 2.0 * b + 3.0 * c


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_back_equals_dy_times_grad(target):
    g = zyg.grad(grow_until, 0, target=target)
    for x in (1.5, 1.23, 2.7):
        y, back = zyg.pullback(grow_until, x, 10, target=target)
        assert back()[0] == pytest.approx(g(x, 10), rel=1e-14)
        for dy in (3.0, -0.25):
            assert back(dy)[0] == pytest.approx(dy * g(x, 10), rel=1e-14)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_old_back_survives_newer_pullbacks_with_longer_tapes(target):
    """Each pullback owns its tape: later calls (which may grow or reuse buffers)
    must not change what an earlier ``back`` returns."""
    xs = [1.5, 1.001, 1.0001, 2.7]          # trip counts from 2 to 90 (past the initial tape size)
    pbs = [zyg.pullback(grow_until, x, 10.0, target=target) for x in xs]
    for x, (y, back) in reversed(list(zip(xs, pbs))):
        assert y == grow_until(x, 10.0)
        assert back(1.0)[0] == pytest.approx(fd(grow_until, (x, 10.0), 0), rel=1e-6)
    # and repeated use in the original order gives the same values again
    first = [back(2.0)[0] for _, back in pbs]
    again = [back(2.0)[0] for _, back in pbs]
    assert first == again


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_pullback_of_rotate_loop(target):
    for n in (0, 1, 2, 5):
        y, back = zyg.pullback(rotate, 0.7, -1.2, n, target=target)
        assert y == rotate(0.7, -1.2, n)
        gx, gy, gn = back(1.5)
        assert gn is None
        assert gx == pytest.approx(1.5 * fd(rotate, (0.7, -1.2, n), 0), rel=1e-7, abs=1e-9)
        assert gy == pytest.approx(1.5 * fd(rotate, (0.7, -1.2, n), 1), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_pullback_int_and_bool_only_arguments_of_a_float_function(target):
    def f(x, n, flag):
        return x * n if flag else x - n
    y, back = zyg.pullback(f, 2.5, 3, False, target=target)
    assert y == -0.5
    assert back(1.0) == (1.0, None, None)
    y, back = zyg.pullback(f, 2.5, 3, True, target=target)
    assert back(2.0) == (6.0, None, None)
