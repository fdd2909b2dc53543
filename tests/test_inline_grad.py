"""``zyg.grad(f)(x)`` written inline reuses the object a kept gradient is (issue 27): the
same object for the same function, argnums, target and mode; another for another; closures,
redefinitions and changed globals give the answers a kept gradient gives; the memo is
bounded and cleared with zyg's caches."""
from __future__ import annotations

import numpy as np
import pytest

import zyg
from zyg import api, caches

SCALE = 2.0


def sq(x):
    return SCALE * x * x


def two(x, y):
    return x * y * y


def test_same_object_for_the_same_request():
    assert zyg.grad(sq) is zyg.grad(sq)
    assert zyg.grad(sq, target="python") is zyg.grad(sq, target="python")
    assert zyg.grad(sq) is not zyg.grad(sq, target="python")
    assert zyg.grad(sq) is not zyg.value_and_grad(sq)
    assert zyg.grad(two, argnums=(0, 1)) is zyg.grad(two, argnums=(0, 1))
    assert zyg.grad(two, argnums=[0, 1]) is zyg.grad(two, argnums=(0, 1))
    assert zyg.grad(two, argnums=0) is not zyg.grad(two, argnums=1)
    assert zyg.grad(two, argnums=1)(3.0, 2.0) == pytest.approx(12.0)
    assert zyg.grad(two, argnums=0)(3.0, 2.0) == pytest.approx(4.0)


def test_inline_in_a_loop_gives_the_kept_answers():
    kept = zyg.grad(sq)
    for x in np.linspace(-1.0, 1.0, 7):
        assert zyg.grad(sq)(x) == kept(x) == pytest.approx(4.0 * x)


def test_globals_changed_between_inline_calls():
    global SCALE
    try:
        assert zyg.grad(sq, target="python")(1.5) == pytest.approx(6.0)
        SCALE = 3.0
        assert zyg.grad(sq, target="python")(1.5) == pytest.approx(9.0)
    finally:
        SCALE = 2.0
    assert zyg.grad(sq, target="python")(1.5) == pytest.approx(6.0)


def test_closures_and_redefinitions_are_other_functions():
    def make(a):
        def f(x):
            return a * np.sum(x * x)
        return f
    x = np.array([1.0, 2.0])
    f2, f3 = make(2.0), make(3.0)
    np.testing.assert_allclose(zyg.grad(f2, target="python")(x), 4.0 * x)
    np.testing.assert_allclose(zyg.grad(f3, target="python")(x), 6.0 * x)

    def g(x):
        return np.sum(x)
    first = zyg.grad(g, target="python")
    np.testing.assert_allclose(first(x), [1.0, 1.0])

    def g(x):       # noqa: F811  (a notebook cell run again with new code)
        return np.sum(x * x * x)
    assert zyg.grad(g, target="python") is not first
    np.testing.assert_allclose(zyg.grad(g, target="python")(x), 3.0 * x * x)


def test_memo_is_bounded_and_cleared_with_the_caches():
    for k in range(api._MADE_MAX + 40):
        zyg.grad(lambda x, k=k: k * x, target="python")
    assert len(api._MADE) <= api._MADE_MAX
    g = zyg.grad(sq, target="python")
    caches.invalidate()
    assert len(api._MADE) == 0
    assert zyg.grad(sq, target="python") is not g
    assert zyg.grad(sq, target="python")(1.0) == pytest.approx(4.0)
