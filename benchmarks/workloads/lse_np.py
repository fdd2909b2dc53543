"""Workload 3b, logsumexp written with numpy calls.

``m = np.max(x); return m + math.log(np.sum(np.exp(x - m)))`` -- the same function
as workload 3a (:mod:`lse_loop`), written the way a numpy user writes it: whole-array
calls, temporaries allocated by numpy. Length 1000, gradient w.r.t. ``x``. The peers
are the same as for 3a (vectorised in every framework).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from benchmarks.workloads import lse_loop
from benchmarks.workloads.base import Case, Workload


def logsumexp_np(x):
    """Stable log(sum(exp(x))) of a 1-d array, by numpy calls."""
    m = np.max(x)
    return m + math.log(np.sum(np.exp(x - m)))


@numba.njit
def logsumexp_np_value_and_grad(x):
    """Hand-written adjoint of :func:`logsumexp_np`, in the same numpy style.

    Stores ``e = exp(x - m)``; the max's adjoint ``1 - sum(softmax)`` (zero up to
    rounding) goes to the arg-max element, as an AD tool routes it.
    """
    k = np.argmax(x)
    m = x[k]
    e = np.exp(x - m)
    s = np.sum(e)
    g = e / s
    g[k] += 1.0 - np.sum(g)
    return m + math.log(s), g


WORKLOAD = Workload(
    number=3,
    name="lse_np",
    title="logsumexp of a length-1000 vector, numpy calls",
    fn=logsumexp_np,
    hand=logsumexp_np_value_and_grad,
    cases=(Case("n=1000", (lse_loop.make_x(1000),), (lse_loop.make_x(20),)),),
    fd_step=lambda args: 1e-3,
    peers=lse_loop.PEERS,
    argnums=(0,),
)
