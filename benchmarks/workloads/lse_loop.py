"""Workload 3a, logsumexp written as an explicit loop (the numba user's way).

``m = max(x); return m + log(sum(exp(x - m)))`` with the max found by a loop and an
``if``, the sum accumulated by a second loop. Length 1000, gradient w.r.t. ``x``
(the softmax). The max enters the result twice (``m + ...`` and ``x - m``); its
adjoint ``1 - sum(softmax)`` vanishes up to rounding, and an AD tool routes it to the
arg-max element -- the hand adjoint does the same, so that both agree to rounding.

The peers write the same computation vectorised (``max``, ``exp``, ``sum``): that is
their idiom, and a Python loop over 1000 elements would only measure the
interpreter. Workload 3b (:mod:`lse_np`) is the same function written with numpy
calls for zyg too.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def logsumexp_loop(x):
    """Stable log(sum(exp(x))) of a 1-d array, by explicit loops."""
    n = x.shape[0]
    m = x[0]
    for i in range(1, n):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(n):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@numba.njit
def logsumexp_loop_value_and_grad(x):
    """Hand-written adjoint of :func:`logsumexp_loop`; stores the n exponentials."""
    n = x.shape[0]
    m = x[0]
    k = 0
    for i in range(1, n):
        if x[i] > m:
            m = x[i]
            k = i
    e = np.empty(n)
    s = 0.0
    for i in range(n):
        e[i] = math.exp(x[i] - m)
        s += e[i]
    value = m + math.log(s)
    # reverse: s_bar = 1/s; x_bar[i] = e[i] * s_bar; m_bar = 1 - sum(e) * s_bar -> x[k]
    s_bar = 1.0 / s
    g = np.empty(n)
    m_bar = 1.0
    for i in range(n):
        g[i] = e[i] * s_bar
        m_bar -= g[i]
    g[k] += m_bar
    return value, g


def make_x(n: int, seed: int = 3) -> np.ndarray:
    """Deterministic input: standard normal entries scaled by 3."""
    return 3.0 * np.random.default_rng(seed).standard_normal(n)


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(x):
        m = jnp.max(x)
        return m + jnp.log(jnp.sum(jnp.exp(x - m)))

    vg = jax.jit(jax.value_and_grad(f))

    def call(x):
        return jax.block_until_ready(vg(x))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(x):
        xt = torch.from_numpy(x).requires_grad_(True)
        m = torch.max(xt)
        y = m + torch.log(torch.sum(torch.exp(xt - m)))
        y.backward()
        return y.detach(), xt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(x):
        m = anp.max(x)
        return m + anp.log(anp.sum(anp.exp(x - m)))

    return autograd.value_and_grad(f)


PEERS = {
    "jax": PeerImpl(_jax, "vectorised: max, exp, sum (jit)"),
    "torch": PeerImpl(_torch, "vectorised: max, exp, sum"),
    "autograd": PeerImpl(_autograd, "vectorised: max, exp, sum"),
}

WORKLOAD = Workload(
    number=3,
    name="lse_loop",
    title="logsumexp of a length-1000 vector, explicit loops",
    fn=logsumexp_loop,
    hand=logsumexp_loop_value_and_grad,
    cases=(Case("n=1000", (make_x(1000),), (make_x(20),)),),
    fd_step=lambda args: 1e-3,
    peers=PEERS,
    argnums=(0,),
)
