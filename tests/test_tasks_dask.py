"""Data-parallel gradients beyond one process (issue 26; docs/parallel.md's recipes).

A loss that is a sum over the rows of a data set is a sum over chunks of rows: map
``zyg.value_and_grad`` over the chunks in other processes and add the values and the
gradients.  With ``dask.distributed`` (a local cluster of two worker processes: the same
code runs on a cluster of machines) and with ``concurrent.futures`` processes; the gradient
objects travel pickled, by reference (a function in an importable module) and by value (a
closure defined here, as in a notebook).  The sums must equal the serial gradient of the
whole data set to rounding.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing

import numpy as np
import pytest

import zyg
import _tasks_helpers as H

N, D, CHUNKS = 600, 5, 6


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, D))
    w_true = rng.standard_normal(D)
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ w_true))).astype(np.float64)
    w = 0.3 * rng.standard_normal(D)
    return w, X, y


def chunks(X, y):
    return [(X[k::CHUNKS].copy(), y[k::CHUNKS].copy()) for k in range(CHUNKS)]


def add_up(parts):
    value = sum(v for v, _ in parts)
    grad = np.sum([g for _, g in parts], axis=0)
    return value, grad


def ridge_loss(lam):
    """A closure (pickled by value: its source and the captured ``lam``)."""
    def loss(w, X, y):
        return H.logistic_nll(w, X, y) + lam * np.sum(w * w) / CHUNKS
    return loss


def check(parts, serial):
    value, grad = add_up(parts)
    v0, g0 = serial
    assert value == pytest.approx(v0, rel=1e-12)
    np.testing.assert_allclose(grad, g0, rtol=1e-12, atol=1e-12)


def test_dask_local_cluster(data):
    distributed = pytest.importorskip("distributed")
    w, X, y = data
    vg = zyg.value_and_grad(H.logistic_nll)
    vg_ridge = zyg.value_and_grad(ridge_loss(0.25))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        parts = chunks(X, y)
        wf = client.scatter(w, broadcast=True)
        futs = [client.submit(vg, wf, Xc, yc, pure=False) for Xc, yc in parts]
        check(client.gather(futs), vg(w, X, y))
        futs = [client.submit(vg_ridge, wf, Xc, yc, pure=False) for Xc, yc in parts]
        check(client.gather(futs), zyg.value_and_grad(_whole_ridge(0.25))(w, X, y))
        # the work really ran in the worker processes
        assert len(client.run(lambda: 1)) == 2


def _whole_ridge(lam):
    def loss(w, X, y):
        return H.logistic_nll(w, X, y) + lam * np.sum(w * w)
    return loss


def _one(vg, w, part):
    return vg(w, *part)


def test_process_pool_executor(data):
    w, X, y = data
    vg = zyg.value_and_grad(H.logistic_nll)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
        parts = list(ex.map(_one, [vg] * CHUNKS, [w] * CHUNKS, chunks(X, y)))
    check(parts, vg(w, X, y))
