"""The tape buffers of ``zyg.hvp`` and ``zyg.hessian`` kept between calls (issue 27).

The second-order drivers take their tapes from a pool (zyg/api.py ``_TapePool``) sized to
the largest tape seen.  What must hold: results equal central differences of zyg's
gradient whatever the previous call left in the buffers (a larger input after a smaller
one, then a smaller one again), two threads never share a buffer, and a call that raised
leaves the pool usable.
"""
import math
import threading

import numpy as np
import pytest

import zyg
from zyg import api

TARGETS = ["python", "cpu"]


def kmeans(centroids, points):
    n, d = points.shape
    k = centroids.shape[0]
    total = 0.0
    for i in range(n):
        closest = math.inf
        for j in range(k):
            dist = 0.0
            for l in range(d):
                diff = points[i, l] - centroids[j, l]
                dist += diff * diff
            if dist < closest:
                closest = dist
        total += closest
    return total


def smooth(x, w):
    # loops over numbers with a data-dependent trip count: float and int tapes, a branch
    s = 0.0
    for i in range(x.shape[0]):
        t = math.sin(x[i] * w[i]) * x[i]
        for j in range(i % 3 + 1):
            t = t * 0.5 + math.exp(0.1 * x[(i + j) % x.shape[0]])
        if t > 1.0:
            s += t * t
        else:
            s += t
    return s


def scalar_loop(a, n):
    s = 0.0
    for i in range(n):
        s += math.sin(a * (i + 1)) * a
    return s


def raises_midway(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 3 * math.cos(x[i])
        if x[i] > 100.0:
            raise ValueError("x too big")
    return s


def fd_hvp(f, x, v, rest, target, h=1e-6):
    """Central differences of zyg's gradient along v."""
    g = zyg.grad(f, target=target)
    return (g(x + h * v, *rest) - g(x - h * v, *rest)) / (2 * h)


def kmeans_data(k, n, d, seed):
    rng = np.random.default_rng(seed)
    pts = rng.random((n, d))
    return pts[-k:].copy() + 0.01, pts


def pool_of(f, args, target):
    return api._second_order(f, args, 0, target)[1].pool


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_kmeans_against_fd_growing_and_shrinking(target):
    # sizes up, down, up: a small call after a large one runs in the large buffers
    sizes = [(2, 6, 2), (6, 200, 3), (3, 9, 2), (5, 60, 4), (2, 6, 2)]
    got = {}
    for s, (k, n, d) in enumerate(sizes):
        c, pts = kmeans_data(k, n, d, k * n * d)      # the same size, the same input
        v = np.random.default_rng(n).standard_normal(c.shape)
        hv = zyg.hvp(kmeans, c, v, pts, target=target)
        want = fd_hvp(kmeans, c, v, (pts,), target)
        np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        got[s] = hv
    # the first and last calls had the same input: the same result to the bit
    np.testing.assert_array_equal(got[0], got[len(sizes) - 1])
    pool = pool_of(kmeans, (c, pts), target)
    # one set of buffers kept, as large as the largest call's tape: a branch tag per point
    # and centroid (6*200; the differences are read again from the arrays, not taped)
    assert len(pool.free) == 1
    tags = [n for b, n in zip(pool.free[0], pool.sizes) if b.dtype == np.int8]
    assert tags and tags[0] >= 6 * 200
    assert all(b.shape[0] == n for b, n in zip(pool.free[0], pool.sizes))


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_reuses_the_kept_buffers(target):
    c, pts = kmeans_data(4, 50, 3, 7)
    v = np.ones_like(c)
    zyg.hvp(kmeans, c, v, pts, target=target)
    pool = pool_of(kmeans, (c, pts), target)
    kept = [id(b) for b in pool.free[0]]
    a = zyg.hvp(kmeans, c, v, pts, target=target)
    # the same buffers came back: the second call allocated and grew no tape
    assert [id(b) for b in pool.free[0]] == kept
    np.testing.assert_array_equal(a, zyg.hvp(kmeans, c, v, pts, target=target))


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_smooth_against_fd_and_targets_agree(target):
    out = {}
    for n in (3, 40, 7):
        x = np.linspace(0.2, 1.4, n)
        w = np.cos(np.arange(n) + 0.5)
        v = np.sin(np.arange(n) * 1.3 + 0.2)
        hv = zyg.hvp(smooth, x, v, w, target=target)
        want = fd_hvp(smooth, x, v, (w,), target)
        np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
        out[n] = hv
    other = "cpu" if target == "python" else "python"
    x = np.linspace(0.2, 1.4, 7)
    w = np.cos(np.arange(7) + 0.5)
    v = np.sin(np.arange(7) * 1.3 + 0.2)
    np.testing.assert_allclose(out[7], zyg.hvp(smooth, x, v, w, target=other), rtol=1e-12, atol=1e-12)


def fd_hessian(f, x, rest, target, h=1e-6):
    g = zyg.grad(f, target=target)
    H = np.empty((x.size, x.size))
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = h
        H[:, k] = (g(x + e, *rest) - g(x - e, *rest)) / (2 * h)
    return H


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("batched", [True, False])
def test_hessian_against_fd_growing_and_shrinking(target, batched, monkeypatch):
    # smooth() is loops over numbers: the per-column driver, which keeps its tapes
    monkeypatch.setattr(api, "HESSIAN_BATCHED", batched)
    H = zyg.hessian(smooth, target=target)
    for n in (2, 25, 4, 11):
        x = np.linspace(0.3, 1.2, n)
        w = np.cos(np.arange(n) + 0.5)
        got = H(x, w)
        want = fd_hessian(smooth, x, (w,), target)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
    assert np.shape(got) == (11, 11)


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_without_a_tape(target, monkeypatch):
    # no tape at all (no loop): the driver returns its result and no buffers
    monkeypatch.setattr(api, "HESSIAN_BATCHED", False)

    def f(x):
        return np.sum(np.sin(x) * x * x)
    x = np.linspace(0.1, 1.0, 6)
    d = 2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)
    np.testing.assert_allclose(zyg.hessian(f, target=target)(x), np.diag(d), rtol=1e-12, atol=1e-12)
    v = np.arange(6.0)
    np.testing.assert_allclose(zyg.hvp(f, x, v, target=target), d * v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_and_hvp_of_a_float(target):
    def d2(a, n):
        return sum(-math.sin(a * (i + 1)) * a * (i + 1) ** 2 + 2 * (i + 1) * math.cos(a * (i + 1))
                   for i in range(n))
    H = zyg.hessian(scalar_loop, target=target)
    for n in (3, 40, 5):
        a = 0.7
        np.testing.assert_allclose(H(a, n), d2(a, n), rtol=1e-12)
        np.testing.assert_allclose(zyg.hvp(scalar_loop, a, 2.0, n, target=target), 2 * d2(a, n),
                                   rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_two_threads_each_get_their_own_answer(target):
    inputs = [kmeans_data(3, 40, 2, 1), kmeans_data(8, 300, 3, 2)]
    vs = [np.random.default_rng(5 + i).standard_normal(c.shape) for i, (c, _) in enumerate(inputs)]
    want = [zyg.hvp(kmeans, c, v, pts, target=target) for (c, pts), v in zip(inputs, vs)]
    for (c, pts), v, w in zip(inputs, vs, want):
        np.testing.assert_allclose(w, fd_hvp(kmeans, c, v, (pts,), target), rtol=1e-6,
                                   atol=1e-6 * np.abs(w).max())
    # start from an empty pool: both threads grow their own buffers while the other runs
    pool_of(kmeans, inputs[0], target).free.clear()
    barrier = threading.Barrier(2)
    errors = []

    def work(i):
        try:
            c, pts = inputs[i]
            barrier.wait()
            for _ in range(25):
                np.testing.assert_array_equal(zyg.hvp(kmeans, c, vs[i], pts, target=target), want[i])
        except BaseException as e:      # reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert 1 <= len(pool_of(kmeans, inputs[0], target).free) <= 2


@pytest.mark.parametrize("target", TARGETS)
def test_an_exception_midway_does_not_poison_the_pool(target):
    x = np.linspace(0.1, 1.0, 30)
    v = np.cos(np.arange(30.0))
    want = fd_hvp(raises_midway, x, v, (), target)
    first = zyg.hvp(raises_midway, x, v, target=target)
    np.testing.assert_allclose(first, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
    bad = x.copy()
    bad[20] = 200.0         # raises after 20 iterations have written the tape
    big = np.linspace(0.1, 1.0, 400)
    big[350] = 200.0        # raises in a call that had grown the tape
    for b in (bad, big):
        with pytest.raises(ValueError, match="x too big"):
            zyg.hvp(raises_midway, b, np.ones_like(b), target=target)
    with pytest.raises(ValueError, match="x too big"):
        zyg.hessian(raises_midway, target=target)(bad)
    np.testing.assert_array_equal(zyg.hvp(raises_midway, x, v, target=target), first)
    small = x[:7].copy()
    np.testing.assert_allclose(zyg.hvp(raises_midway, small, v[:7], target=target),
                               fd_hvp(raises_midway, small, v[:7], (), target), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(zyg.hessian(raises_midway, target=target)(small),
                               fd_hessian(raises_midway, small, (), target), rtol=1e-6, atol=1e-7)


def no_writes(x):
    return np.sin(x[:6]) * np.sum(x ** 2) + x[1:7] * x[0]


def writes(x):
    out = np.zeros(6)
    for i in range(x.shape[0]):
        out[i % 6] += math.sin(x[i]) * x[(i + 1) % x.shape[0]]
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [no_writes, writes])
def test_jacobian_rev_rows_from_one_primal(target, f):
    # no_writes: every row from one primal's back (replayed); writes: a primal per row
    x = np.linspace(0.2, 1.3, 9)
    J = zyg.jacobian(f, mode="rev", target=target)(x)
    np.testing.assert_allclose(J, zyg.jacobian(f, mode="fwd", target=target)(x), rtol=1e-12,
                               atol=1e-12)
    h = 1e-6
    fd = np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(9)], axis=1)
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-8)
    y, back = zyg.pullback(f, x, target=target)
    assert back._fn._zyg_replayable == (f is no_writes)


def rows(x, W):
    # array code in a loop: the vector pass, whose tape holds arrays
    s = 0.0
    for i in range(W.shape[0]):
        y = np.tanh(W[i] * x)
        s += np.sum(y * y * x)
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_vector_pass_hessian_keeps_its_tapes(target):
    H = zyg.hessian(rows, target=target)
    rng = np.random.default_rng(3)
    # 40 columns: a chunk of 32 lanes and one of 8; rows up, down, up
    for n, m in [(5, 3), (40, 60), (3, 2), (40, 7)]:
        x = rng.standard_normal(n) * 0.5
        W = rng.standard_normal((m, n))
        got = H(x, W)
        want = fd_hessian(rows, x, (W,), target)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
    slot = api._second_order(rows, (x, W), 0, target)
    assert isinstance(slot[0], api._PooledDriver) and slot[0].pool is slot[2].pool
    pool = slot[0].pool
    assert len(pool.free) == 1 and max(pool.lanes) == api.JAC_CHUNK
    assert pool.sizes[0] >= 60 * 40      # the largest tape held (at least one array a row)


SCALE = 2.0
WEIGHTS = np.array([1.0, 2.0, 3.0])


def reads_globals(x):
    return SCALE * np.sum(WEIGHTS * x ** 3)


@pytest.mark.parametrize("target", TARGETS)
def test_repeated_hvp_sees_rebound_globals_and_new_kinds(target):
    # the second call of the same kinds takes hvp's fast path: it must still see a global
    # rebound, an array global rebound to another shape, arguments of another dtype
    global SCALE, WEIGHTS
    old = SCALE, WEIGHTS
    x = np.array([0.5, -1.0, 1.5])
    v = np.array([1.0, 2.0, -1.0])
    try:
        for scale in (2.0, 2.0, 3.0, 3.0):
            SCALE = scale
            np.testing.assert_allclose(zyg.hvp(reads_globals, x, v, target=target),
                                       6 * scale * WEIGHTS * x * v, rtol=1e-13)
        WEIGHTS = np.array([1.0, -1.0, 0.5, 2.0])
        x4 = np.array([0.5, -1.0, 1.5, 0.7])
        for _ in range(2):
            np.testing.assert_allclose(zyg.hvp(reads_globals, x4, np.ones(4), target=target),
                                       6 * SCALE * WEIGHTS * x4, rtol=1e-13)
        WEIGHTS[0] = 7.0        # written in place: the next call reads it
        np.testing.assert_allclose(zyg.hvp(reads_globals, x4, np.ones(4), target=target),
                                   6 * SCALE * WEIGHTS * x4, rtol=1e-13)
        x32 = x4.astype(np.float32)
        got = zyg.hvp(reads_globals, x32, np.ones(4), target=target)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, 6 * SCALE * WEIGHTS * x4, rtol=1e-5)
        # back to float64 after float32, and a shape mismatch of v still refused
        np.testing.assert_allclose(zyg.hvp(reads_globals, x4, np.ones(4), target=target),
                                   6 * SCALE * WEIGHTS * x4, rtol=1e-13)
        with pytest.raises(zyg.TypeMismatch, match="v has shape"):
            zyg.hvp(reads_globals, x4, np.ones(3), target=target)
    finally:
        SCALE, WEIGHTS = old


@pytest.mark.parametrize("target", TARGETS)
def test_repeated_hvp_of_closures_defaults_and_redefinitions(target):
    w = np.array([1.0, 2.0])

    def f(x, p=3.0):
        return np.sum(w * x ** 3) * p
    x = np.array([0.5, 1.5])
    for _ in range(2):
        np.testing.assert_allclose(zyg.hvp(f, x, np.ones(2), target=target), 18 * w * x)
        np.testing.assert_allclose(zyg.hvp(f, x, np.ones(2), 1.0, target=target), 6 * w * x)
    w[1] = -4.0             # the captured array, written in place
    np.testing.assert_allclose(zyg.hvp(f, x, np.ones(2), target=target), 18 * w * x)

    def f(x, p=3.0):        # noqa: F811  (a notebook cell run again, changed)
        return np.sum(w * x ** 4) * p
    np.testing.assert_allclose(zyg.hvp(f, x, np.ones(2), target=target), 36 * w * x * x)


def gather(x, idx):
    s = 0.0
    for i in range(idx.shape[0]):
        s += x[idx[i]] ** 3 * x[i % x.shape[0]]
    return s


def test_a_bad_index_midway_does_not_poison_the_pool():
    # the python target checks indices (the cpu target's compiled code does not)
    x = np.linspace(0.2, 1.0, 5)
    v = np.cos(np.arange(5.0))
    good = np.array([0, 1, 4, 2, 3, 3])
    want = zyg.hvp(gather, x, v, good, target="python")
    np.testing.assert_allclose(want, fd_hvp(gather, x, v, (good,), "python"), rtol=1e-6,
                               atol=1e-8)
    bad = np.array([0, 1, 4, 2, 3] * 40 + [9])      # fails after 200 iterations recorded
    with pytest.raises(IndexError):
        zyg.hvp(gather, x, v, bad, target="python")
    np.testing.assert_array_equal(zyg.hvp(gather, x, v, good, target="python"), want)
