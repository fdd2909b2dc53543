"""The boundary between zyg's generated code and the caller's arrays (issue 12, items 6,
9, 10 and 11; ``zyg/safety.py``, ``zyg/nested/recursion.py``):

* aliased arguments: a written argument array that shares memory with another argument
  raises ``zyg.AliasedArguments``; arrays that are only read may alias, and then the
  gradient is the right one;
* an exception in the middle of a gradient, of a pullback's primal or of ``back`` leaves
  the caller's arrays as they were before the call;
* ``back`` after the caller changed an array it reads raises ``zyg.ModifiedAfterPullback``;
* every pullback owns the records of its recursive calls: ``back``\\ s out of order, twice,
  after an exception and from 8 threads give the right gradients.

Every gradient is compared with central finite differences, on both targets.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import zyg
from conftest import TARGETS

H = 1e-6


def fd_array(f, args, i, h=H):
    """Central differences of ``f(*args)`` w.r.t. every element of the array ``args[i]``
    (mutable inputs copied before each evaluation)."""
    x = args[i]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        vals = []
        for s in (h, -h):
            a = [v.copy() if isinstance(v, np.ndarray) else v for v in args]
            a[i][idx] += s
            vals.append(f(*a))
        g[idx] = (vals[0] - vals[1]) / (2 * h)
    return g


def assert_close(got, want, rtol=1e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(want)))))


def bits(a):
    return a.view(np.int64).copy()


# -- functions under test -----------------------------------------------------------------

def scale_into(a, b):
    """Writes ``a`` (a[i] *= b[i]) and reads ``b``."""
    for i in range(a.shape[0]):
        a[i] = a[i] * b[i]
    return np.sum(a * a)


def dot(a, b):
    """Reads both arguments."""
    return np.sum(a * b)


def scale_first(t, b):
    """Writes the array inside the tuple argument ``t``."""
    a = t[0]
    for i in range(a.shape[0]):
        a[i] = a[i] * b[i] * t[1]
    return np.sum(a * b)


def doubles_then_reads(a, n):
    """Writes a[0..n-1]; an IndexError when n > len(a) (python target)."""
    for i in range(n):
        a[i] = a[i] * 2.0 + 1.0
    return np.sum(a * a)


def writes_then_broadcasts(a, c):
    """Writes every element of ``a``, then ``a * c`` fails when the shapes differ (a
    ValueError on both targets)."""
    for i in range(a.shape[0]):
        a[i] = np.sin(a[i]) + 2.0
    return np.sum(a * c)


def explode(dy):
    if dy > 0.0:
        raise FloatingPointError("explode: the backward pass failed")
    return dy


def hook_between_writes(a):
    """Writes a[0], takes a value whose backward pass raises, writes a[1]: the adjoint
    rewinds a[1], then raises before rewinding a[0]."""
    a[0] = a[0] * 3.0
    t = zyg.hook(explode, a[0] * a[2])
    a[1] = a[1] * a[0]
    return t + np.sum(a * a)


# -- item 6: aliased arguments ------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_written_argument_aliasing_another_raises(target):
    x = np.array([0.5, 1.5, -2.0, 0.7])
    before = bits(x)
    for api in (zyg.grad, zyg.value_and_grad):
        with pytest.raises(zyg.AliasedArguments) as e:
            api(scale_into, argnums=(0, 1), target=target)(x, x)
        msg = str(e.value)
        assert "scale_into writes into argument 0 ('a')" in msg
        assert "argument 1 ('b')" in msg
        assert "x.copy()" in msg and "test_pullback_safety.py" in msg
        assert (bits(x) == before).all()
    with pytest.raises(zyg.AliasedArguments, match="zyg.pullback"):
        zyg.pullback(scale_into, x, x, target=target)
    assert (bits(x) == before).all()
    # the fix the message gives: a copy, and the gradient is the derivative of f(x, y)
    y = x.copy()
    ga, gb = zyg.grad(scale_into, argnums=(0, 1), target=target)(x, y)
    assert (bits(x) == before).all()
    assert_close(ga, fd_array(scale_into, (x, y), 0))
    assert_close(gb, fd_array(scale_into, (x, y), 1))


@pytest.mark.parametrize("target", TARGETS)
def test_overlapping_views_raise_and_disjoint_views_differentiate(target):
    base = np.linspace(0.3, 1.7, 8)
    before = bits(base)
    g = zyg.grad(scale_into, argnums=(0, 1), target=target)
    for a, b in ((base[0:4], base[2:6]), (base[4:8], base[::2]), (base[:4], base[:4][::-1])):
        with pytest.raises(zyg.AliasedArguments):
            g(a, b)
        assert (bits(base) == before).all()
    # views of one array that share no element: fine, and right
    for a, b in ((base[0:4], base[4:8]), (base[0::2], base[1::2])):
        ga, gb = g(a, b)
        assert (bits(base) == before).all()
        assert_close(ga, fd_array(scale_into, (a.copy(), b.copy()), 0))
        assert_close(gb, fd_array(scale_into, (a.copy(), b.copy()), 1))


@pytest.mark.parametrize("target", TARGETS)
def test_tuple_argument_aliasing_raises(target):
    x = np.array([0.5, 1.5, -2.0])
    with pytest.raises(zyg.AliasedArguments, match=r"argument 0 \('t'\)\[0\].*argument 1 \('b'\)"):
        zyg.grad(scale_first, argnums=1, target=target)((x, 1.3), x)
    with pytest.raises(zyg.AliasedArguments):
        zyg.pullback(scale_first, (x, 1.3), x[::-1], target=target)
    y = x.copy()
    gb = zyg.grad(scale_first, argnums=1, target=target)((x, 1.3), y)
    assert_close(gb, fd_array(lambda b, c: scale_first((c, 1.3), b), (y, x), 0))


def writes_then_reads_other(a, b):
    """Reads b[1] after writing a[1]: with a and b one array, f(x, x) reads the new value."""
    a[1] = a[0] * 2.0
    return b[1] * b[1] + a[1]


@pytest.mark.parametrize("target", TARGETS)
def test_jvp_of_aliased_written_arguments_raises(target):
    x = np.array([0.5, 1.5, -2.0])
    t = np.array([1.0, -0.5, 0.25])
    with pytest.raises(zyg.AliasedArguments, match="zyg.jvp"):
        zyg.jvp(writes_then_reads_other, (x, x), (t, t), target=target)
    y = x.copy()
    v, dv = zyg.jvp(writes_then_reads_other, (x, y), (t, t), target=target)
    assert v == pytest.approx(writes_then_reads_other(x.copy(), y.copy()), rel=1e-12)
    fd = (writes_then_reads_other(x + H * t, y + H * t)
          - writes_then_reads_other(x - H * t, y - H * t)) / (2 * H)
    assert dv == pytest.approx(fd, rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_aliased_arguments_that_are_only_read(target):
    x = np.array([0.5, 1.5, -2.0, 0.7])
    before = bits(x)
    # d/dx of dot(x, x) = 2x: the two argument gradients are x each
    ga, gb = zyg.grad(dot, argnums=(0, 1), target=target)(x, x)
    total = fd_array(lambda v: dot(v, v), (x,), 0)
    assert_close(ga + gb, total)
    assert_close(ga + gb, 2 * x)
    assert_close(ga, fd_array(dot, (x, x.copy()), 0))
    y, back = zyg.pullback(dot, x, x, target=target)
    da, db = back(1.0)
    assert_close(da + db, total)
    assert (bits(x) == before).all()
    # overlapping read-only views
    v, w = x[0:3], x[1:4]
    ga, gb = zyg.grad(dot, argnums=(0, 1), target=target)(v, w)
    assert_close(ga, fd_array(dot, (v.copy(), w.copy()), 0))
    assert_close(gb, fd_array(dot, (v.copy(), w.copy()), 1))


# -- item 9: exceptions leave the inputs unchanged ----------------------------------------

def test_index_error_in_a_gradient_restores_the_argument():
    x = np.array([0.5, 1.5, -2.0])
    before = bits(x)
    for api in (zyg.grad, zyg.value_and_grad):
        with pytest.raises(IndexError):
            api(doubles_then_reads, target="python")(x, 5)
        assert (bits(x) == before).all()
    with pytest.raises(IndexError):
        zyg.pullback(doubles_then_reads, x, 5, target="python")
    assert (bits(x) == before).all()
    # and the same gradient with a valid count is right
    g = zyg.grad(doubles_then_reads, target="python")(x, 2)
    assert (bits(x) == before).all()
    assert_close(g, fd_array(doubles_then_reads, (x, 2), 0))


@pytest.mark.parametrize("target", TARGETS)
def test_error_after_writes_restores_the_argument(target):
    x = np.array([0.5, 1.5, -2.0, 0.25])
    before = bits(x)
    c_bad = np.ones(3)
    for api in (zyg.grad, zyg.value_and_grad):
        with pytest.raises(ValueError):
            api(writes_then_broadcasts, target=target)(x, c_bad)
        assert (bits(x) == before).all()
    with pytest.raises(ValueError):
        zyg.pullback(writes_then_broadcasts, x, c_bad, target=target)
    assert (bits(x) == before).all()
    c = np.array([1.0, -2.0, 0.5, 3.0])
    g = zyg.grad(writes_then_broadcasts, target=target)(x, c)
    assert (bits(x) == before).all()
    assert_close(g, fd_array(writes_then_broadcasts, (x, c), 0))


@pytest.mark.parametrize("target", TARGETS)
def test_error_in_back_restores_the_argument(target):
    x = np.array([0.5, 1.5, -2.0])
    before = bits(x)
    y, back = zyg.pullback(hook_between_writes, x, target=target)
    assert not (bits(x) == before).all()          # the primal leaves x as f leaves it
    with pytest.raises(FloatingPointError):
        back(1.0)
    assert (bits(x) == before).all()
    with pytest.raises(FloatingPointError):
        zyg.grad(hook_between_writes, target=target)(x)
    assert (bits(x) == before).all()
    # with a zero cotangent the hook does not raise: the gradient of sum(a*a) after the writes
    (g,) = zyg.pullback(hook_between_writes, x, target=target)[1](0.0)
    assert (bits(x) == before).all()
    assert_close(g, np.zeros(3))


# -- item 10: the caller writes into an argument between pullback and back ----------------

@pytest.mark.parametrize("target", TARGETS)
def test_back_after_the_caller_changed_an_argument_raises(target):
    x = np.array([0.5, 1.5, -2.0])
    w = np.array([2.0, -1.0, 0.5])
    y, back = zyg.pullback(dot, x, w, target=target)
    w[1] = 7.0
    with pytest.raises(zyg.ModifiedAfterPullback) as e:
        back(1.0)
    assert "argument 1 ('b') was modified after zyg.pullback" in str(e.value)
    assert "test_pullback_safety.py" in str(e.value)
    # put back the contents the pullback saw: back is right again
    w[1] = -1.0
    da, db = back(1.0)
    assert_close(da, fd_array(dot, (x, w), 0))
    assert_close(db, fd_array(dot, (x, w), 1))
    # NaN contents that did not change are not a change
    z = np.array([np.nan, 1.0, 2.0])
    y, back = zyg.pullback(dot, z, w, target=target)
    assert back(1.0)[1][1] == 1.0


@pytest.mark.parametrize("target", TARGETS)
def test_back_of_a_mutating_function_after_the_caller_changed_it_raises(target):
    x = np.array([0.5, 1.5, -2.0, 0.25])
    c = np.array([1.0, -2.0, 0.5, 3.0])
    y, back = zyg.pullback(writes_then_broadcasts, x, c, target=target)
    x[2] = 0.0
    with pytest.raises(zyg.ModifiedAfterPullback, match="argument 0 \\('a'\\)"):
        back(1.0)
    x0 = np.array([0.5, 1.5, -2.0, 0.25])
    y, back = zyg.pullback(writes_then_broadcasts, x0, c, target=target)
    g, _ = back(1.0)
    assert (x0 == np.array([0.5, 1.5, -2.0, 0.25])).all()
    assert_close(g, fd_array(writes_then_broadcasts, (x0, c), 0))


# -- item 11: recursive pullbacks own their records ---------------------------------------

def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def weighted(x, a, n):
    """Recursive with an array operand: sum_k a[k] x^(n-k), k < n."""
    if n == 0:
        return 0.0
    return x * (a[n - 1] + weighted(x, a, n - 1))


def failing(x, a, c, n):
    """Recursive; the innermost call fails (a * c with shapes that differ)."""
    if n == 0:
        return np.sum(a * c)
    return x * failing(x, a, c, n - 1)


def d_weighted(x, a, n):
    return (sum((n - k) * a[k] * x ** (n - k - 1) for k in range(n)),
            np.array([x ** (n - k) if k < n else 0.0 for k in range(a.shape[0])]))


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_backs_out_of_order_and_twice(target):
    y1, b1 = zyg.pullback(power, 1.5, 3, target=target)
    y2, b2 = zyg.pullback(power, 0.9, 5, target=target)
    assert b1(1.0)[0] == pytest.approx(3 * 1.5 ** 2, rel=1e-12)
    assert b2(1.0)[0] == pytest.approx(5 * 0.9 ** 4, rel=1e-12)
    assert b1(2.0)[0] == pytest.approx(2 * 3 * 1.5 ** 2, rel=1e-12)   # twice: replayed
    assert b2(1.0)[0] == pytest.approx(5 * 0.9 ** 4, rel=1e-12)
    a = np.array([0.3, -1.2, 0.8, 2.0])
    p1 = zyg.pullback(weighted, 0.7, a, 4, target=target)
    p2 = zyg.pullback(weighted, 1.3, a, 3, target=target)
    for (x, n), (y, back) in (((1.3, 3), p2), ((0.7, 4), p1), ((1.3, 3), p2)):
        dx, da, _ = back(1.0)
        wx, wa = d_weighted(x, a, n)
        assert dx == pytest.approx(wx, rel=1e-12)
        assert_close(da, wa)
        assert_close(da, fd_array(lambda v: weighted(x, v, n), (a,), 0))
        assert dx == pytest.approx((weighted(x + H, a, n) - weighted(x - H, a, n)) / (2 * H), rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_back_after_an_exception(target):
    a = np.array([0.3, -1.2, 0.8])
    y1, b1 = zyg.pullback(power, 1.5, 4, target=target)
    y2, b2 = zyg.pullback(weighted, 0.7, a, 3, target=target)
    with pytest.raises(ValueError):
        zyg.pullback(failing, 0.5, a, np.ones(2), 4, target=target)
    with pytest.raises(ValueError):
        zyg.grad(failing, target=target)(0.5, a, np.ones(2), 4)
    assert b1(1.0)[0] == pytest.approx(4 * 1.5 ** 3, rel=1e-12)
    dx, da, _ = b2(1.0)
    wx, wa = d_weighted(0.7, a, 3)
    assert dx == pytest.approx(wx, rel=1e-12)
    assert_close(da, wa)
    # the failing function with matching shapes, against finite differences
    c = np.array([0.5, 2.0, -1.0])
    g = zyg.grad(failing, target=target)(0.5, a, c, 4)
    assert g == pytest.approx((failing(0.5 + H, a, c, 4) - failing(0.5 - H, a, c, 4)) / (2 * H), rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_gradients_from_8_threads(target):
    a = np.array([0.3, -1.2, 0.8, 2.0, -0.4])
    g_pow = zyg.grad(power, target=target)
    g_w = zyg.grad(weighted, argnums=(0, 1), target=target)
    g_pow(1.1, 3)
    g_w(1.1, a, 4)                                   # compiled before the threads start
    wrong = []

    def work(t):
        for k in range(30):
            x = 0.5 + 0.01 * (t * 30 + k)
            n = 2 + (t + k) % 4
            if abs(g_pow(x, n) - n * x ** (n - 1)) > 1e-12 * n * x ** n + 1e-14:
                wrong.append(("power", t, k))
            y, back = zyg.pullback(weighted, x, a, n, target=target)
            dx, da, _ = back(1.0)
            wx, wa = d_weighted(x, a, n)
            if abs(dx - wx) > 1e-12 * (1 + abs(wx)) or not np.allclose(da, wa, rtol=1e-12, atol=1e-14):
                wrong.append(("weighted", t, k))
            dx, da = g_w(x, a, n)
            if abs(dx - wx) > 1e-12 * (1 + abs(wx)) or not np.allclose(da, wa, rtol=1e-12, atol=1e-14):
                wrong.append(("grad weighted", t, k))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wrong == []


def fill(a, n, m):
    """Recursive, writes into its argument at every level; the deepest level reads a[m]
    (an IndexError after the writes when m >= len(a), python target)."""
    if n == 0:
        return a[0] * a[m]
    a[n] = a[n] * a[n - 1]
    return fill(a, n - 1, m) + a[n]


def fill_twice(a, n, m):
    return fill(a, n, m) * 2.0


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_function_that_writes_its_argument(target):
    x = np.array([0.5, 1.5, -2.0, 0.7])
    before = bits(x)
    g = zyg.grad(fill_twice, target=target)(x, 3, 1)
    assert (bits(x) == before).all()
    assert_close(g, fd_array(fill_twice, (x, 3, 1), 0))
    if target == "python":
        # the writes happen in the recursive calls' own primals: the outer call restores them
        with pytest.raises(IndexError):
            zyg.grad(fill_twice, target=target)(x, 3, 9)
        assert (bits(x) == before).all()
        with pytest.raises(IndexError):
            zyg.pullback(fill_twice, x, 3, 9, target=target)
        assert (bits(x) == before).all()
    with pytest.raises(zyg.AliasedArguments):
        zyg.grad(lambda a, b, n: fill(a, n, 1) + np.sum(b), target=target)(x, x[1:], 2)
