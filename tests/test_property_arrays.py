"""Property-based tests for arrays: random programs that read and write arrays in loops.

Hypothesis builds the source of ``f(a, b, x)`` (``a``, ``b``: length-5 float arrays,
``x``: a float) from statements that mix scalar reads with computed indices, element
writes and augmented writes (into the argument ``a`` itself, into a local copy, into a
fresh ``np.zeros``), slice writes, whole-array in-place updates, aliasing through a
second name and through a view, nested ``for`` loops and branches on array values.
zyg's gradient (every element of ``a`` and ``b``, and ``x``) must match central finite
differences, and the call must leave ``a`` and ``b`` exactly as they were.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import zyg

import oracles

_DIR = tempfile.mkdtemp(prefix="zyg_prop_arr_")
_COUNT = itertools.count()
N = 5

ARRAYS = ["a", "b", "c", "z", "v"]        # c = a.copy(), z = np.zeros(N), v = view of c
IDX = ["i", "(i + 1) % 5", "4 - i", "0", "2", "(2 * i) % 5"]
VIEW_IDX = ["0", "1", "(i % 3)"]          # v = c[1:4] has length 3


@st.composite
def scalar(draw, depth=2):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        k = draw(st.integers(0, 3))
        if k == 0:
            return draw(st.sampled_from(["x", "s", "0.5", "1.3"]))
        arr = draw(st.sampled_from(ARRAYS))
        idx = draw(st.sampled_from(VIEW_IDX if arr == "v" else IDX))
        return f"{arr}[{idx}]"
    a = draw(scalar(depth - 1))
    b = draw(scalar(depth - 1))
    op = draw(st.sampled_from(["({} + {})", "({} * {})", "({} - {})", "math.sin({} * {})",
                               "({} / (1.0 + ({}) ** 2))"]))
    return op.format(a, b)


@st.composite
def statement(draw, depth):
    k = draw(st.integers(0, 8 if depth > 0 else 6))
    arr = draw(st.sampled_from(["a", "c", "z", "v", "w"]))   # w: a second name for c
    idx = draw(st.sampled_from(VIEW_IDX if arr == "v" else IDX))
    e = draw(scalar())
    if k == 0:
        return [f"{arr}[{idx}] = {e}"]
    if k == 1:
        op = draw(st.sampled_from(["+=", "-=", "*="]))
        return [f"{arr}[{idx}] {op} {e}" if op != "*=" else f"{arr}[{idx}] *= math.tanh({e})"]
    if k == 2:
        return [f"s = s + {e}"]
    if k == 3:
        return ["c[1:4] = a[0:3] * x"]
    if k == 4:
        return [draw(st.sampled_from(["c += a * 0.5", "z *= 0.9", "c -= z", "a *= 0.95"]))]
    if k == 5:
        return [f"if {e} > 0.6:", f"    {arr}[{idx}] = {draw(scalar())}", "else:",
                f"    s = s + {draw(scalar())}"]
    if k == 6:
        return [f"s = s + {e}"]
    # a nested loop (depth-limited)
    body = draw(st.lists(statement(depth - 1), min_size=1, max_size=2))
    lines = [f"for i in range({draw(st.integers(1, 3))}):"]
    for b in body:
        lines += ["    " + ln for ln in b]
    return lines


@st.composite
def programs(draw):
    body = ["c = a.copy()", "w = c", "z = np.zeros(5)", "v = c[1:4]", "s = 0.0"]
    outer = draw(st.integers(1, 3))
    body.append(f"for i in range({outer}):")
    for stmt in draw(st.lists(statement(1), min_size=1, max_size=4)):
        body += ["    " + ln for ln in stmt]
    body.append("return s + np.sum(a * b) + np.sum(c * c) + np.sum(z * a) + x * np.sum(v)")
    return "def f(a, b, x):\n" + "\n".join("    " + ln for ln in body) + "\n"


def load(src: str):
    path = os.path.join(_DIR, f"prog{next(_COUNT)}.py")
    with open(path, "w") as fh:
        fh.write("import math\nimport numpy as np\n\n" + src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.f


def fd(f, a, b, x, h):
    ga, gb = np.zeros(N), np.zeros(N)
    for k in range(N):
        e = np.zeros(N)
        e[k] = h
        ga[k] = (f(a + e, b.copy(), x) - f(a - e, b.copy(), x)) / (2 * h)
        gb[k] = (f(a.copy(), b + e, x) - f(a.copy(), b - e, x)) / (2 * h)
    gx = (f(a.copy(), b.copy(), x + h) - f(a.copy(), b.copy(), x - h)) / (2 * h)
    return ga, gb, gx


def _check(src: str, target: str) -> None:
    f = load(src)
    rng = np.random.default_rng(len(src))
    a, b, x = rng.uniform(0.2, 1.0, N), rng.uniform(0.2, 1.0, N), 0.7
    with np.errstate(all="raise"):
        try:
            want1 = fd(f, a, b, x, 1e-6)
            want2 = fd(f, a, b, x, 1e-5)
        except FloatingPointError:
            assume(False)
    # reject points next to a branch switch: the two step sizes must agree
    for w1, w2 in zip(want1, want2):
        assume(np.allclose(w1, w2, rtol=1e-6, atol=1e-8))
    a0, b0 = a.copy(), b.copy()
    vg = zyg.value_and_grad(f, argnums=(0, 1, 2), target=target)
    val, (ga, gb, gx) = vg(a, b, x)
    np.testing.assert_array_equal(a, a0, err_msg="a changed\n" + src)
    np.testing.assert_array_equal(b, b0, err_msg="b changed\n" + src)
    assert val == pytest.approx(f(a0.copy(), b0.copy(), x), rel=1e-12), src
    for g, w in zip((ga, gb, gx), want1):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7, err_msg=src)
    # forward against reverse, second order against first (tests/oracles.py)
    oracles.check_more("array programs", f, (a0, b0, x), (0, 1, 2), (ga, gb, gx), val, target,
                       vg, src, "\n" + src)


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_array_programs_python(src):
    _check(src, "python")


@settings(max_examples=6, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_array_programs_cpu(src):
    _check(src, "cpu")
