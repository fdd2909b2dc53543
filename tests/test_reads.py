"""What zyg reads at call time (issue 12, items 1-3 and 8): closures and lambdas over
arrays, module globals changed or rebound between calls, helpers redefined between
calls, and a second process reusing the cache directory after the source changed.

Every expected value is computed by hand from the function as Python would run it now.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")


# -- 1. closures and lambdas over arrays -------------------------------------------------
def make_loss(data):
    def loss(w):
        return np.sum((w * data - 1.0) ** 2)
    return loss


@pytest.mark.parametrize("target", TARGETS)
def test_closures_over_different_arrays(target):
    l1 = make_loss(np.array([1.0, 2.0]))
    l2 = make_loss(np.array([10.0, 20.0]))
    v1, g1 = zyg.value_and_grad(l1, target=target)(0.5)
    v2, g2 = zyg.value_and_grad(l2, target=target)(0.5)
    assert (v1, g1) == pytest.approx((0.25, -1.0))
    assert (v2, g2) == pytest.approx((97.0, 440.0))
    # and the first one again, after the second was compiled
    assert zyg.value_and_grad(l1, target=target)(0.5) == pytest.approx((0.25, -1.0))


@pytest.mark.parametrize("target", TARGETS)
def test_lambda_over_data_sees_mutation(target):
    d = np.array([3.0, 4.0])
    lam = lambda w: np.sum(w * d)          # noqa: E731
    g = zyg.grad(lam, target=target)
    assert g(1.0) == pytest.approx(7.0)
    d[0] = 10.0                            # the closure reads the array's current contents
    assert g(1.0) == pytest.approx(14.0)


@pytest.mark.parametrize("target", TARGETS)
def test_closure_cell_rebound(target):
    data = np.array([1.0, 2.0])

    def loss(w):
        return np.sum(w * data)
    g = zyg.grad(loss, target=target)
    assert g(np.ones(2)) == pytest.approx([1.0, 2.0])
    data = np.array([5.0, 6.0])            # noqa: F841  (rebinds the cell loss reads)
    assert g(np.ones(2)) == pytest.approx([5.0, 6.0])
    data = np.array([[1.0, 2.0], [3.0, 4.0]])   # another rank: a new specialisation
    assert g(np.ones(2)) == pytest.approx([4.0, 6.0])   # the sum over the broadcast rows


@pytest.mark.parametrize("target", TARGETS)
def test_closure_scalar_rebound(target):
    scale = 2.0

    def f(x):
        return scale * x * x
    g = zyg.grad(f, target=target)
    assert g(1.5) == pytest.approx(6.0)
    scale = 3.0                            # noqa: F841
    assert g(1.5) == pytest.approx(9.0)


# -- 2. helpers redefined between calls (notebook cells) ---------------------------------
def helper(x):
    return math.sin(x)


def model(x):
    return 2.0 * helper(x)


@pytest.mark.parametrize("target", TARGETS)
def test_redefined_helper_is_seen(target):
    global helper
    old = helper
    g = zyg.grad(model, target=target)
    try:
        assert g(1.3) == pytest.approx(2.0 * math.cos(1.3))

        def helper(x):                     # noqa: F811  (a later cell redefines it)
            return math.cos(x)
        assert g(1.3) == pytest.approx(-2.0 * math.sin(1.3))
        assert zyg.grad(model, target=target)(1.3) == pytest.approx(-2.0 * math.sin(1.3))
    finally:
        helper = old
    assert g(1.3) == pytest.approx(2.0 * math.cos(1.3))


# -- 3. module-level arrays and scalars --------------------------------------------------
X = np.array([[1.0, 2.0], [3.0, 4.0]])
W = np.array([1.0, 2.0])
ALPHA = 0.5


def uses_matmul(w):
    return np.sum((X @ w) ** 2)


def uses_copy_and_shape(w):
    c = W.copy()
    s = 0.0
    for i in range(W.shape[0]):
        s += c[i] * w[i] * ALPHA
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_global_array_in_matmul(target):
    w = np.array([0.5, -1.0])
    g = zyg.grad(uses_matmul, target=target)
    np.testing.assert_allclose(g(w), 2 * X.T @ (X @ w), rtol=1e-12)
    X[0, 0] = 5.0
    try:
        np.testing.assert_allclose(g(w), 2 * X.T @ (X @ w), rtol=1e-12)
        # a new grad object sees the same current contents
        np.testing.assert_allclose(zyg.grad(uses_matmul, target=target)(w), 2 * X.T @ (X @ w),
                                   rtol=1e-12)
    finally:
        X[0, 0] = 1.0


@pytest.mark.parametrize("target", TARGETS)
def test_global_array_copy_shape_and_scalar(target):
    global W, ALPHA
    w = np.array([0.5, -1.0])
    g = zyg.grad(uses_copy_and_shape, target=target)
    old_w, old_a = W, ALPHA
    try:
        np.testing.assert_allclose(g(w), W * ALPHA)
        W[0] = 10.0                        # changed in place
        ALPHA = 2.0                        # a scalar compiled in as a constant: rebuilt
        np.testing.assert_allclose(g(w), W * ALPHA)
        W = np.array([1.0, 2.0, 3.0])      # rebound to a longer array
        np.testing.assert_allclose(g(np.ones(3)), W * ALPHA)
        W = np.array([1.0, 2.0], dtype=np.float32)   # another dtype
        np.testing.assert_allclose(g(w), np.array([1.0, 2.0]) * ALPHA)
    finally:
        W, ALPHA = old_w, old_a


def test_global_array_of_unsupported_rank_names_it():
    global W
    old = W
    W = np.zeros((1, 1, 1, 1))
    try:
        with pytest.raises(zyg.TypeMismatch, match="'W'"):
            zyg.grad(uses_copy_and_shape, target="python")(np.ones(2))
    finally:
        W = old


# -- 8. the targets do not share a cache entry ---------------------------------------------
def _poly(x):
    s = 0.0
    for i in range(3):
        s += x * i
    return s


def test_python_after_cpu_runs_python():
    assert zyg.grad(_poly, target="cpu")(1.0) == 3.0
    gp = zyg.grad(_poly, target="python")
    assert gp(1.0) == 3.0
    entry = gp._zyg.cache[float]
    assert not hasattr(entry, "py_func"), "the python target ran numba-compiled code"


# -- 1-3 and 8 across processes sharing the cache directory ----------------------------------
_MODULE = '''
import math
import numpy as np
import zyg

TABLE = np.array([{table}])


def h(v):
    return v * {h}


zyg.nondifferentiable(h)


def sq(x):
    return x * {sq}


@zyg.adjoint(sq)
def _sq_rule(x):
    def back(dy):
        return (dy * {sq},)
    return x * {sq}, back


def helper(x):
    return {helper}


def make_loss(data):
    def loss(w):
        return np.sum((w * data - 1.0) ** 2)
    return loss


def uses_table(w):
    return np.sum(w * TABLE)


def uses_h(x):
    return x * h(2.0)


def uses_rule(x):
    return sq(x)


def uses_helper(x):
    return 2.0 * helper(x)
'''

_RUN = '''
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import zyg
import readsmod as m
data = np.array([float(v) for v in sys.argv[3].split(",")])
for t in ("cpu", "python"):
    v, g = zyg.value_and_grad(m.make_loss(data), target=t)(0.5)
    print(t, repr((zyg.grad(m.uses_table, target=t)(np.ones(2)).tolist(),
                   float(zyg.grad(m.uses_h, target=t)(1.5)), float(zyg.grad(m.uses_rule, target=t)(1.5)),
                   float(zyg.grad(m.uses_helper, target=t)(float(sys.argv[2]))), (float(v), float(g)))))
'''


def _run_version(tmp_path, cache, table, hval, sqval, helper_src, data):
    (tmp_path / "readsmod.py").write_text(textwrap.dedent(_MODULE.format(
        table=table, h=hval, sq=sqval, helper=helper_src)))
    pyc = tmp_path / "__pycache__"
    if pyc.exists():
        for f in pyc.iterdir():
            f.unlink()
    script = tmp_path / "run.py"
    script.write_text(_RUN)
    env = dict(os.environ, ZYG_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, str(script), str(tmp_path), "0.7", data], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("cpu", "python"))]
    assert len(lines) == 2
    return lines


def _expected(table, hval, sqval, dhelper, data):
    d = np.array(data)
    loss = float(np.sum((0.5 * d - 1.0) ** 2))
    dloss = float(np.sum(2 * (0.5 * d - 1.0) * d))
    return ([float(v) for v in table], 2.0 * hval, sqval, dhelper, (loss, dloss))


def _parse(line):
    import ast
    t, rest = line.split(" ", 1)
    return t, ast.literal_eval(rest)


def test_second_process_sees_edited_sources(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    versions = [
        ((1.0, 2.0), 3.0, 4.0, "math.sin(x)", 2 * math.cos(0.7), (1.0, 2.0)),
        ((5.0, 7.0), 10.0, 6.0, "math.cos(x)", -2 * math.sin(0.7), (10.0, 20.0)),
    ]
    for table, hval, sqval, helper_src, dhelper, data in versions:
        lines = _run_version(tmp_path, cache, ", ".join(map(str, table)), hval, sqval, helper_src,
                             ",".join(map(str, data)))
        want = _expected(table, hval, sqval, dhelper, data)
        for line in lines:
            t, got = _parse(line)
            assert got[0] == pytest.approx(want[0]), (t, line)
            assert got[1] == pytest.approx(want[1]), (t, line)
            assert got[2] == pytest.approx(want[2]), (t, line)
            assert got[3] == pytest.approx(want[3]), (t, line)
            assert tuple(got[4]) == pytest.approx(want[4]), (t, line)


# -- the other transforms read captured arrays at call time too ------------------------------
D = np.array([1.0, 2.0, 3.0])


def _dq(x):
    return np.sum(D * x * x)


def _dscal(z):
    return z * z * D[1]


def _grad_inside(y):
    g = zyg.grad(_dq)(y)
    return np.sum(g * g)


def _ck_over_global(y):
    s = y.copy()
    for i in zyg.checkpointed_range(4, snapshots=2):
        s = s * D
    return np.sum(s)


@pytest.mark.parametrize("target", TARGETS)
def test_transforms_read_captured_arrays_at_call_time(target):
    x = np.array([0.5, 1.0, 1.5])
    v = np.array([1.0, 0.0, 0.0])
    old = D.copy()
    try:
        for scale in (1.0, 5.0):
            D[:] = old * scale
            y, t = zyg.jvp(_dq, (x,), (v,), target=target)
            assert (y, t) == pytest.approx((np.sum(D * x * x), 2 * D[0] * x[0]))
            np.testing.assert_allclose(zyg.hvp(_dq, x, v, target=target), 2 * D * v, rtol=1e-12)
            np.testing.assert_allclose(zyg.hessian(_dq, target=target)(x), np.diag(2 * D), rtol=1e-12)
            np.testing.assert_allclose(zyg.jacobian(lambda y: D * y * y, target=target)(x),
                                       np.diag(2 * D * x), rtol=1e-12)
            np.testing.assert_allclose(zyg.grad(_grad_inside, target=target)(x), 8 * D * D * x,
                                       rtol=1e-12)
            np.testing.assert_allclose(zyg.grad(_ck_over_global, target=target)(x), D ** 4, rtol=1e-12)
            assert zyg.grad(zyg.grad(_dscal), target=target)(1.0) == pytest.approx(2 * D[1])
    finally:
        D[:] = old
