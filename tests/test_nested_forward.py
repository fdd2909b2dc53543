"""``zyg.jvp`` called inside a differentiated function (issue 27): reverse over forward
(``zyg.grad`` of a function calling ``zyg.jvp``) and forward over forward (``zyg.jvp`` of
it), lowered to the primitive JvpOf (zyg/nested/gradcall.py); against central
differences of the outer function, on both targets.  GradBench's particle and saddle
``rf`` / ``ff`` variants are built on it."""
from __future__ import annotations

import math

import numpy as np
import pytest

import zyg
from zyg.errors import UnsupportedSyntax

TARGETS = ("python", "cpu")


def g(x, y):
    return np.sum(np.sin(x) * y ** 2)


def tangent_const(x, y):
    v, t = zyg.jvp(g, (x, y), (np.ones_like(x), 0.0))
    return v + t * y


def tangent_of_outer(x, y):
    # tangents computed from the outer variables: differentiated through as well
    v, t = zyg.jvp(g, (x, y), (x * x, y))
    return v * t


def pot(a, b):
    return 1.0 / math.sqrt(a * a + (b - 2.0) ** 2)


def scalar_field(a, b):
    return zyg.jvp(pot, (a, b), (1.0, None))[1] * b + zyg.jvp(pot, (a, b), (0.0, 1.0))[1]


def in_a_loop(a, b):
    s = 0.0
    for k in range(3):
        s += zyg.jvp(pot, (a + 0.1 * k, b), (b, a))[1]
    return s


def fd(f, args, i, h=1e-6):
    x = args[i]

    def at(v):
        a = list(args)
        a[i] = v
        return f(*a)
    if isinstance(x, np.ndarray):
        out = np.empty(x.size)
        for k in range(x.size):
            e = np.zeros(x.size)
            e[k] = h
            out[k] = (at(x + e) - at(x - e)) / (2 * h)
        return out
    return (at(x + h) - at(x - h)) / (2 * h)


CASES = [(tangent_const, (np.linspace(0.2, 1.0, 4), 0.7)),
         (tangent_of_outer, (np.linspace(0.2, 1.0, 4), 0.7)),
         (scalar_field, (0.3, 0.9)),
         (in_a_loop, (0.3, 0.9))]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_reverse_over_forward(f, args, target):
    got = zyg.grad(f, argnums=(0, 1), target=target)(*args)
    for i in (0, 1):
        np.testing.assert_allclose(got[i], fd(f, args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_forward_over_forward(f, args, target):
    tv = tuple(np.linspace(0.5, -0.5, a.size) if isinstance(a, np.ndarray) else 0.8 for a in args)
    _, t = zyg.jvp(f, args, tv, target=target)
    want = sum(np.sum(fd(f, args, i) * tv[i]) for i in (0, 1))
    np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-8)


def untupled(a, b):
    ts = (1.0, 0.0)
    return zyg.jvp(pot, (a, b), ts)[1]


def calls_in_primals(a, b):
    return zyg.jvp(pot, (math.sin(a), b), (1.0, 0.0))[1]


@pytest.mark.parametrize("f, words", [(untupled, "written out"), (calls_in_primals, "read twice")])
def test_unsupported_forms_are_named_at_the_line(f, words):
    with pytest.raises(UnsupportedSyntax, match=words) as ei:
        zyg.grad(f, target="python")(0.3, 0.9)
    assert ei.value.lineno == f.__code__.co_firstlineno + (2 if f is untupled else 1)


def test_gradbench_particle_forward_inside():
    """GradBench's particle rf and ff variants (python target: fast to build) give the
    eval's expected answer."""
    from benchmarks.gradbench.modules import particle
    m = particle.make("python")
    for v in ("rf", "ff"):
        assert m.functions[v][1](0.0) == pytest.approx(0.2071918746486116, rel=1e-6)
