"""Gradients called from several Python threads (issue 26; docs/tasks.md).

* generated cpu code is compiled with ``nogil=True`` and really releases the GIL;
* first calls of the same new gradient from several threads at once all get the right
  value and build it once; threads building different gradients at once; a
  ``ThreadPoolExecutor.map`` over a gradient; threads sharing pooled tape buffers;
* a Ctrl-C deferred for the main thread is not raised in another thread.
"""
from __future__ import annotations

import concurrent.futures
import math
import threading
import time

import numpy as np
import pytest

import zyg
from zyg import driver, numerics

NTHREADS = 6


def _dispatcher(entry):
    """The numba dispatcher behind a cached gradient entry."""
    d = getattr(entry, "compiled", entry)
    assert hasattr(d, "targetoptions"), f"not a numba dispatcher: {d!r}"
    return d


def _count_builds(g):
    """Wrap the specialiser of ``g`` so that each built signature is counted."""
    spec = g._zyg
    calls = []
    orig = spec.build_entry

    def counting(args):
        calls.append(tuple(type(a) for a in args))
        return orig(args)
    spec.build_entry = counting
    return calls


def _run_together(n, fn):
    """Start ``n`` threads calling ``fn(k)`` at once (a barrier), return their results."""
    barrier = threading.Barrier(n)
    out = [None] * n
    errs = []

    def work(k):
        try:
            barrier.wait()
            out[k] = fn(k)
        except BaseException as e:       # reported below, in the main thread
            errs.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return out


def series(x, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i) / (i + 1.0)
    return s


def series_grad(x, n):
    i = np.arange(n, dtype=float)
    return float(np.sum(np.cos(x * i) * i / (i + 1.0)))


def test_first_call_from_many_threads_builds_once():
    g = zyg.grad(series)
    builds = _count_builds(g)
    xs = [0.1 + 0.13 * k for k in range(NTHREADS)]
    got = _run_together(NTHREADS, lambda k: g(xs[k], 200))
    for x, v in zip(xs, got):
        assert v == pytest.approx(series_grad(x, 200), rel=1e-12, abs=1e-12)
    assert builds == [(float, int)]
    # later calls: the cached code, never built again
    assert g(0.7, 50) == pytest.approx(series_grad(0.7, 50), rel=1e-12)
    assert len(builds) == 1


def test_generated_cpu_code_is_nogil():
    g = zyg.grad(series)
    g(0.3, 10)
    disp = _dispatcher(g._zyg.cache[(float, int)])
    assert disp.targetoptions.get("nogil") is True
    y, back = zyg.pullback(series, 0.3, 10)
    assert back()[0] == pytest.approx(series_grad(0.3, 10), rel=1e-12)
    spec = driver._PULLBACKS[(series, "cpu")]
    run = spec.cache[(float, int)]
    prims = [c.cell_contents for c in run.__closure__ if hasattr(c.cell_contents, "targetoptions")]
    assert prims and all(p.targetoptions.get("nogil") is True for p in prims)


def work_loop(x, n):
    s = 0.0
    for i in range(n):
        for j in range(50):
            s += math.sin(x + 1e-3 * j) * math.cos(x * i * 1e-6)
    return s


def test_compiled_call_releases_the_gil():
    """While another thread runs a long gradient, this thread keeps running Python: with
    the GIL held for the whole compiled call it would not get a single time slice."""
    g = zyg.grad(work_loop)
    g(0.5, 10)                     # compiled before the measurement
    n = 20000
    t0 = time.perf_counter()
    g(0.5, n)
    once = time.perf_counter() - t0
    n = int(n * max(1.0, 0.3 / max(once, 1e-6)))      # about 0.3 s of compiled work
    started, done = threading.Event(), threading.Event()
    box = {}

    def worker():
        started.set()
        t = time.perf_counter()
        box["v"] = g(0.5, n)
        box["t"] = time.perf_counter() - t
        done.set()
    th = threading.Thread(target=worker)
    th.start()
    started.wait()
    time.sleep(0.02)            # the worker is inside the compiled call by now
    count = 0
    while not done.is_set():
        count += 1
    th.join()
    assert box["t"] > 0.1, box
    # with the GIL held the loop above would see done set before its first few thousand
    # iterations (it only gets the GIL back when the call returns)
    assert count > 10000, (count, box["t"])
    assert np.isfinite(box["v"])


def poly_a(x):
    r = 0.0
    for k in range(1, 6):
        r = r * x + k
    return r


def poly_b(x):
    return x * math.exp(-x) + math.tanh(x)


def poly_c(x):
    s = x
    for _ in range(3):
        s = math.sin(s)
    return s


def test_threads_build_different_gradients_at_once():
    fns = [poly_a, poly_b, poly_c]
    gs = [zyg.value_and_grad(f) for f in fns]
    x = 0.37

    def call(k):
        return gs[k % 3](x + 0.01 * k)
    got = _run_together(NTHREADS, call)
    h = 1e-6
    for k, (v, d) in enumerate(got):
        f, xk = fns[k % 3], x + 0.01 * k
        assert v == f(xk)
        assert d == pytest.approx((f(xk + h) - f(xk - h)) / (2 * h), rel=1e-6)
    # each gradient agrees with itself called serially afterwards (the same compiled code)
    for k, (v, d) in enumerate(got):
        assert gs[k % 3](x + 0.01 * k) == (v, d)


def test_thread_pool_map_over_a_gradient():
    g = zyg.grad(series)
    xs = list(np.linspace(-1.0, 1.0, 40))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        got = list(ex.map(lambda x: g(x, 100), xs))
    assert got == [g(x, 100) for x in xs]
    assert got == pytest.approx([series_grad(x, 100) for x in xs], rel=1e-10, abs=1e-12)


def sq_loss(w, X, y):
    r = 0.0
    for i in range(X.shape[0]):
        p = 0.0
        for j in range(X.shape[1]):
            p += X[i, j] * w[j]
        e = math.tanh(p) - y[i]
        r += e * e
    return r


def test_threads_share_pooled_tape_buffers():
    """A gradient with a tape takes its buffers from a pool shared by every caller: threads
    calling it at once each get their own (a race left two calls on one buffer)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    y = rng.standard_normal(30)
    ws = [rng.standard_normal(4) for _ in range(NTHREADS)]
    g = zyg.grad(sq_loss)
    builds = _count_builds(g)
    # first calls with arrays at once (the per-dtype dispatch entry), then serial ones
    first = _run_together(NTHREADS, lambda k: g(ws[k], X, y))
    assert len(builds) == 1
    ref = [g(w, X, y) for w in ws]
    for a, b in zip(first, ref):
        np.testing.assert_array_equal(a, b)

    def many(k):
        return [g(ws[k], X, y) for _ in range(200)]
    got = _run_together(NTHREADS, many)
    for k in range(NTHREADS):
        for v in got[k]:
            np.testing.assert_array_equal(v, ref[k])
    # and against finite differences
    h = 1e-6
    w = ws[0]
    fd = [(sq_loss(w + h * e, X, y) - sq_loss(w - h * e, X, y)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(ref[0], fd, rtol=1e-6, atol=1e-8)


def cubic(x, a):
    return a * x ** 3 + math.sin(x)


def test_hessian_and_jvp_first_calls_from_threads():
    H = zyg.hessian(cubic)
    got = _run_together(4, lambda k: H(0.5 + k, 2.0))
    for k, v in enumerate(got):
        x = 0.5 + k
        assert v == pytest.approx(6 * 2.0 * x - math.sin(x), rel=1e-12)
    got = _run_together(4, lambda k: zyg.jvp(cubic, (0.5 + k, 2.0), (1.0, 0.0)))
    for k, (v, t) in enumerate(got):
        x = 0.5 + k
        assert v == cubic(x, 2.0)
        assert t == pytest.approx(3 * 2.0 * x ** 2 + math.cos(x), rel=1e-12)


def test_deferred_interrupt_is_the_main_threads():
    """A Ctrl-C deferred while the main thread's compiled call boxed its result is raised
    in the main thread, never in a worker thread that happens to return first."""
    g = zyg.grad(poly_a)
    g(0.5)
    box = {}
    numerics.DEFERRED[0] = True
    try:
        t = threading.Thread(target=lambda: box.setdefault("v", g(0.5)))
        t.start()
        t.join()
        assert box["v"] == pytest.approx(poly_a_grad(0.5))
        assert numerics.DEFERRED[0] is True        # left for the main thread
        with pytest.raises(KeyboardInterrupt):
            g(0.5)
        assert numerics.DEFERRED[0] is False
    finally:
        numerics.DEFERRED[0] = False


def poly_a_grad(x):
    h = 1e-6
    return (poly_a(x + h) - poly_a(x - h)) / (2 * h)


def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def test_recursive_gradients_from_threads_at_once():
    """Recursive calls keep their pending pullbacks per thread (zyg/pullbacks/records.py):
    threads running different depths at once each get their own derivative."""
    g = zyg.grad(power)
    g(1.1, 3)

    def many(k):
        n = 5 + 7 * k
        return [(n, g(1.01, n)) for _ in range(20)]
    got = _run_together(4, many)
    for rows in got:
        for n, v in rows:
            assert v == pytest.approx(n * 1.01 ** (n - 1), rel=1e-12)
