"""Gradient objects pickle (issue 26; zyg/tasks/pickling.py, docs/tasks.md).

By reference where the function is importable (tests/_tasks_helpers.py), by value where it
lives in ``__main__`` or a notebook (a module made here by exec'ing source registered with
linecache, as IPython does) or is a closure or a lambda.  In-process round trips, a
``multiprocessing`` pool and a ``ProcessPoolExecutor`` with the spawn start method, and a
script run with ``python script.py`` whose ``__main__`` maps ``zyg.grad(f)`` over a pool.
"""
from __future__ import annotations

import concurrent.futures
import functools
import itertools
import json
import linecache
import math
import multiprocessing
import os
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest

import zyg
import _tasks_helpers as H

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CELLS = itertools.count()

NOTEBOOK = '''
import math
import numpy as np
import numba

K = 3.0
W = np.array([0.5, -1.0, 2.0])

def helper(x):
    return x * x + K

def f(x):
    return helper(x) * math.sin(x) + np.sum(W) * x

def fact(n, x):
    if n <= 0:
        return 1.0
    return x * fact(n - 1, x)

def withdef(x, k=2.5, *, c=1.5):
    return c * x ** k

@numba.njit
def jitted(x):
    return math.exp(-x * x)

def uses_jitted(x):
    return jitted(x) * x

def two(x, y):
    return helper(x) * y + math.sin(x * y)

sq = lambda x: x * x * K

import zyg

def cube(x):
    return x * x * x

dcube = zyg.grad(cube)

def penalty(x):
    return math.sin(x) + dcube(x) ** 2

def outer(c):
    scale = lambda t: t * c
    def inner(x):
        return scale(x) + math.exp(x)
    return inner
'''


def notebook(src: str = NOTEBOOK, name: str = "__main__") -> types.ModuleType:
    """A module as a notebook or ``python script.py`` makes it: named ``__main__`` (not
    the real one, not importable), its source readable through linecache only."""
    mod = types.ModuleType(name)
    fname = f"<ipython-input-{next(_CELLS)}-zyg-test>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), mod.__dict__)
    return mod


def make_closure(a):
    def f(x):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * math.sin(x * (i + 1))
        return s
    return f


def closure_grad(a, x):
    i = np.arange(1, a.shape[0] + 1)
    return float(np.sum(a * i * np.cos(x * i)))


def fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def roundtrip(g):
    return pickle.loads(pickle.dumps(g))


# -- in-process round trips ----------------------------------------------------------------

def test_by_reference_roundtrip():
    g = zyg.grad(H.poly)
    data = pickle.dumps(g)
    assert b"_tasks_helpers" in data and b"poly" in data
    assert b"def poly" not in data            # no source: the module is imported
    h = pickle.loads(data)
    # made again by zyg.grad(poly): in this process that is the object zyg.grad keeps for
    # the same request (api._make), the gradient itself
    assert isinstance(h, zyg.driver.ZygFunction) and h is zyg.grad(H.poly)
    for x in (0.3, -1.2, 2.0):
        assert h(x) == g(x)
        assert g(x) == pytest.approx(H.poly_grad(x), rel=1e-12)


def test_by_value_notebook_function_with_helper_and_globals():
    nb = notebook()
    g = zyg.grad(nb.f)
    data = pickle.dumps(g)
    assert b"def f(x)" in data and b"def helper(x)" in data      # the source travels
    h = pickle.loads(data)
    for x in (0.4, 1.7):
        assert h(x) == g(x)
        assert g(x) == pytest.approx(fd(nb.f, x), rel=1e-7)
    # the rebuilt function is a new one, with its source in linecache
    rebuilt = h._zyg.f
    assert rebuilt is not nb.f and rebuilt.__name__ == "f"
    assert "<zyg pickled f" in rebuilt.__code__.co_filename
    assert rebuilt.__globals__["helper"] is not nb.helper
    assert rebuilt.__globals__["K"] == 3.0


def test_by_value_closure_over_array_captures_it_at_pickling_time():
    a = np.array([1.0, -0.5, 0.25, 2.0])
    f = make_closure(a)
    g = zyg.grad(f)
    data = pickle.dumps(g)
    x = 0.8
    before = g(x)
    assert before == pytest.approx(closure_grad(a, x), rel=1e-12)
    a[:] = [3.0, 1.0, -1.0, 0.5]             # changed after pickling
    h = pickle.loads(data)
    assert h(x) == before                    # the pickle holds the old values
    assert g(x) == pytest.approx(closure_grad(a, x), rel=1e-12)     # the original: the new
    assert g(x) != before


def test_recursive_function_by_value():
    nb = notebook()
    g = zyg.grad(nb.fact, argnums=1)
    h = roundtrip(g)
    assert h(4, 1.3) == g(4, 1.3) == pytest.approx(4 * 1.3 ** 3, rel=1e-12)
    rebuilt = h._zyg.f
    assert rebuilt.__globals__["fact"] is rebuilt      # the recursion reaches itself


def test_defaults_and_keyword_only_defaults():
    nb = notebook()
    g = zyg.value_and_grad(nb.withdef)
    h = roundtrip(g)
    assert h(2.0) == g(2.0) == pytest.approx((1.5 * 2.0 ** 2.5, 1.5 * 2.5 * 2.0 ** 1.5))
    assert h(2.0, 3.0) == g(2.0, 3.0)
    assert h(2.0, c=2.0) == g(2.0, c=2.0)


def test_argnums_tuple_and_python_target():
    nb = notebook()
    for target in ("cpu", "python"):
        g = zyg.grad(nb.two, argnums=(0, 1), target=target)
        h = roundtrip(g)
        assert h._zyg.target == target
        dx, dy = h(0.7, 1.1)
        assert (dx, dy) == g(0.7, 1.1)
        assert dx == pytest.approx(fd(lambda t: nb.two(t, 1.1), 0.7), rel=1e-7)
        assert dy == pytest.approx(fd(lambda t: nb.two(0.7, t), 1.1), rel=1e-7)


def test_njit_function_lambda_partial_and_method_by_value():
    nb = notebook()
    g = zyg.grad(nb.uses_jitted)
    h = roundtrip(g)
    assert h(0.6) == g(0.6) == pytest.approx(fd(nb.uses_jitted, 0.6), rel=1e-7)
    assert hasattr(h._zyg.f.__globals__["jitted"], "py_func")      # a dispatcher again
    g = zyg.grad(nb.sq)
    assert roundtrip(g)(1.5) == g(1.5) == pytest.approx(2 * 1.5 * 3.0)
    p = functools.partial(nb.two, y=0.5)
    g = zyg.grad(p)
    assert roundtrip(g)(0.9) == g(0.9) == pytest.approx(fd(p, 0.9), rel=1e-7)


def test_gradient_inside_and_closure_over_a_lambda():
    nb = notebook()
    g = zyg.grad(nb.penalty)                 # its global dcube is a zyg gradient
    h = roundtrip(g)
    assert h(0.7) == g(0.7) == pytest.approx(math.cos(0.7) + 2 * 3 * 0.49 * 6 * 0.7, rel=1e-12)
    assert isinstance(h._zyg.f.__globals__["dcube"], zyg.driver.ZygFunction)
    f = nb.outer(2.5)                        # a closure over a lambda over c
    g = zyg.value_and_grad(f)
    assert roundtrip(g)(0.3) == g(0.3) == (pytest.approx(f(0.3), rel=1e-14),
                                          pytest.approx(2.5 + math.exp(0.3), rel=1e-12))


def test_hessian_jacobian_and_nested_grad():
    nb = notebook()
    Hs = zyg.hessian(nb.f)
    assert roundtrip(Hs)(0.5) == Hs(0.5) == pytest.approx(fd(zyg.grad(nb.f), 0.5), rel=1e-6)
    J = zyg.jacobian(H.loss, argnums=0)
    X = np.arange(6.0).reshape(3, 2)
    y = np.array([1.0, 0.0, -1.0])
    w = np.array([0.2, -0.1])
    np.testing.assert_array_equal(roundtrip(J)(w, X, y), J(w, X, y))
    np.testing.assert_allclose(J(w, X, y), 2 * X.T @ (X @ w - y), rtol=1e-12)
    gg = zyg.grad(zyg.grad(nb.f))
    assert roundtrip(gg)(0.5) == gg(0.5) == pytest.approx(Hs(0.5), rel=1e-10)


def test_memo_one_object_per_pickled_content():
    g = zyg.grad(make_closure(np.array([1.0, 2.0])))
    data = pickle.dumps(g)
    assert pickle.loads(data) is pickle.loads(data)
    assert pickle.loads(pickle.dumps(g)) is pickle.loads(data)


# -- what does not pickle: clear errors -----------------------------------------------------

def test_pullback_back_refuses_with_a_zyg_error():
    y, back = zyg.pullback(H.poly, 0.5)
    with pytest.raises(zyg.NotPicklable, match="tape of one call"):
        pickle.dumps(back)
    assert back()[0] == pytest.approx(H.poly_grad(0.5), rel=1e-12)


def test_unpicklable_global_names_it():
    src = "import threading\nLOCK = threading.Lock()\n\ndef f(x):\n    if LOCK is None:\n" \
          "        return x\n    return x * x\n"
    nb = notebook(src)
    g = zyg.grad(nb.f)
    with pytest.raises(zyg.NotPicklable, match="'LOCK'"):
        pickle.dumps(g)


def test_class_of_main_names_it():
    src = "import collections\nP = collections.namedtuple('P', 'a b')\nPT = P(2.0, 3.0)\n\n" \
          "def f(x):\n    return PT.a * x * x\n"
    nb = notebook(src)
    g = zyg.grad(nb.f)
    assert g(1.0) == pytest.approx(4.0)
    with pytest.raises(zyg.NotPicklable, match="'PT'.*another process cannot import"):
        pickle.dumps(g)


def test_function_without_source():
    ns: dict = {"__name__": "__main__"}
    exec("def f(x):\n    return x * x\n", ns)           # no linecache entry: no source
    g = zyg.grad(ns["f"], target="python")
    with pytest.raises(zyg.NotPicklable, match="source is not available"):
        pickle.dumps(g)


# -- other processes -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as p:
        yield p


@pytest.fixture(scope="module")
def executor():
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as ex:
        yield ex


def test_pool_spawn_by_reference(pool):
    g = zyg.grad(H.poly)
    xs = [0.1 * k for k in range(12)]
    got = pool.map(g, xs, chunksize=2)
    assert got == [g(x) for x in xs]
    assert got == pytest.approx([H.poly_grad(x) for x in xs], rel=1e-12)


def test_pool_spawn_by_value_notebook_and_closure(pool):
    nb = notebook()
    g = zyg.grad(nb.f)
    xs = [0.2 + 0.3 * k for k in range(6)]
    got = pool.map(g, xs, chunksize=1)
    assert got == [g(x) for x in xs]
    assert got == pytest.approx([fd(nb.f, x) for x in xs], rel=1e-7)
    a = np.array([0.5, 1.5, -2.0])
    c = zyg.value_and_grad(make_closure(a))
    got = pool.map(c, xs)
    assert got == [c(x) for x in xs]
    assert [d for _, d in got] == pytest.approx([closure_grad(a, x) for x in xs], rel=1e-12)


def test_process_pool_executor_spawn(executor):
    nb = notebook()
    g = zyg.grad(nb.two, argnums=(0, 1), target="python")
    got = list(executor.map(g, [0.3, 0.6], [1.0, 2.0]))
    assert got == [g(0.3, 1.0), g(0.6, 2.0)]
    X = np.arange(6.0).reshape(3, 2)
    y = np.array([1.0, 0.0, -1.0])
    w = np.array([0.2, -0.1])
    gl = zyg.grad(H.loss)
    fut = executor.submit(H.call_twice, zyg.grad(make_closure(np.array([2.0, 1.0]))), [0.4, 0.9])
    assert fut.result() == pytest.approx([closure_grad(np.array([2.0, 1.0]), x)
                                          for x in (0.4, 0.9)], rel=1e-12)
    d = executor.submit(gl, w, X, y).result()
    np.testing.assert_allclose(d, 2 * X.T @ (X @ w - y), rtol=1e-12)


SCRIPT = '''
import json, math, multiprocessing, sys
import numpy as np
import zyg

A = np.array([0.3, -1.0, 2.0])

def helper(x):
    return math.exp(-x * x)

def f(x):
    s = 0.0
    for i in range(A.shape[0]):
        s += A[i] * helper(x * (i + 1))
    return s

if __name__ == "__main__":
    xs = [0.1 * k for k in range(8)]
    g = zyg.grad(f)
    with multiprocessing.get_context(sys.argv[1]).Pool(2) as pool:
        got = pool.map(g, xs)
    h = 1e-6
    print(json.dumps({"pool": got, "here": [g(x) for x in xs],
                      "fd": [(f(x + h) - f(x - h)) / (2 * h) for x in xs]}))
'''


def test_script_main_pool_map(tmp_path):
    """The real user case: a script whose ``__main__`` defines ``f`` maps ``zyg.grad(f)``
    over a pool (spawn: the workers cannot see the parent's ``__main__``)."""
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path), "spawn"], capture_output=True, text=True,
                       env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["pool"] == out["here"]
    assert out["pool"] == pytest.approx(out["fd"], rel=1e-6, abs=1e-9)
