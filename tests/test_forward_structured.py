"""Forward mode emits loops as real loops (``Forward._find_loops``) where the CFG allows:
the exit at the header test, a body of blocks, ``if``/``else`` diamonds and nested such
loops.  Everything else stays on the dispatch loop.  This is what makes forward over
reverse (``hessian``, ``hvp``) cost a few gradients instead of many: the re-lowered
gradient is loops over tape pushes and pops.

Checked: random programs give the same ``jvp`` to the bit with and without it, and the
finite difference; loops with ``break`` fall back; the generated code has the shape.
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hypothesis import given

import zyg
from zyg import backends
import zyg.pullbacks.forward as forward
from zyg import api
from zyg.pullbacks.forward import Forward
from zyg.pullbacks.transform import plan

from benchmarks.higher import chained
from test_property import load, points, programs, reliable_fd
from test_relower import _settings

TARGETS = ("python", "cpu")


def _copy(f):
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def jvp_source(f, args) -> str:
    ir = api.ssa_of(f)
    kinds = api._kinds(args, ir.name)
    p = plan(ir, kinds, [i for i, k in enumerate(kinds) if k in ("float", "f8[:]")],
             backends.get("python"))
    return Forward(p).emit("f_jvp").text(p.backend.storage)


def nest(x, n):
    s = 0.0
    for i in range(n):
        t = x * i
        for j in range(i):
            if t > 1.0:
                t = math.sin(t) + x
            else:
                t = t * t + 0.5
        s += t
    k = 0
    while k < 3:
        s = s * 0.9 + x
        k += 1
    return s


def with_break(x, n):
    s = 0.0
    for i in range(n):
        s = s * x + 1.0
        if s > 5.0:
            break
    return s


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f, args", [(nest, (0.7, 4)), (nest, (1.3, 5)), (with_break, (1.4, 9)),
                                     (with_break, (0.5, 6))])
def test_jvp_against_finite_differences(f, args, target):
    y, t = zyg.jvp(f, args, (1.0, None), target=target)
    assert y == f(*args)
    h = 1e-6
    want = (f(args[0] + h, args[1]) - f(args[0] - h, args[1])) / (2 * h)
    assert t == pytest.approx(want, rel=1e-6)


def test_loops_are_emitted_as_loops():
    text = jvp_source(nest, (0.7, 4))
    # the for-nest and the while loop: three loops, none of their inner blocks a dispatch
    # case; the cases left are the two loops, the block between them and the return
    assert text.count("while True:") == 3
    assert text.count("_blk ==") == 4, text
    # a loop with a break keeps the dispatch loop
    assert "while True:" not in jvp_source(with_break, (1.4, 9))


def test_hessian_source_has_structured_loops():
    x = np.array([0.3, -0.5, 1.2, 0.8, -1.1])
    src = api._grad_source(chained, (x,), 0)
    text = jvp_source(src, (x,))
    # the recording loop and the reversed loop of the gradient
    assert text.count("while True:") >= 2
    H = zyg.hessian(chained, target="cpu")(x)
    np.testing.assert_array_equal(H, zyg.hessian(chained, target="python")(x))


@_settings(40)
@given(programs(), points)
def test_random_programs_structured_equals_dispatch(src, args):
    f = load(src)
    fd = reliable_fd(f, args, 0)
    on = zyg.jvp(_copy(f), args, (1.0, 0.5), target="python")
    forward.STRUCTURED_LOOPS = False
    try:
        off = zyg.jvp(_copy(f), args, (1.0, 0.5), target="python")
    finally:
        forward.STRUCTURED_LOOPS = True
    assert on == off, f"structured {on} != dispatch {off} for\n{src}"
    if fd is not None:
        fy = reliable_fd(f, args, 1)
        if fy is not None:
            want = fd + 0.5 * fy
            assert abs(on[1] - want) <= 1e-6 * max(1.0, abs(want), abs(on[0])), (on, want, src)
