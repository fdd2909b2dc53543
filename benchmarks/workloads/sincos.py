"""Workload 1, sincos: ``sin(cos(x))`` on a scalar.

The smallest possible gradient: what is measured is the overhead of the machinery
(call dispatch, boxing, tape set-up) rather than arithmetic.
"""

from __future__ import annotations

import math

import numba

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def sincos(x):
    """``sin(cos(x))``."""
    return math.sin(math.cos(x))


@numba.njit
def sincos_value_and_grad(x):
    """Hand-written adjoint of :func:`sincos`: ``(value, d/dx)``; stores ``cos(x)``."""
    c = math.cos(x)
    value = math.sin(c)
    return value, math.cos(c) * -math.sin(x)


def _exact_grad(args: Args) -> float:
    (x,) = args
    return -math.cos(math.cos(x)) * math.sin(x)


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(x):
        return jnp.sin(jnp.cos(x))

    vg = jax.jit(jax.value_and_grad(f))

    def call(x):
        return jax.block_until_ready(vg(x))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(x):
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        y = torch.sin(torch.cos(xt))
        y.backward()
        return y.detach(), xt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(x):
        return anp.sin(anp.cos(x))

    return autograd.value_and_grad(f)


WORKLOAD = Workload(
    number=1,
    name="sincos",
    title="sin(cos(x)), scalar",
    fn=sincos,
    hand=sincos_value_and_grad,
    cases=(Case("", (0.7,), (0.7,)),),
    fd_step=lambda args: 1e-3,
    exact_grad=_exact_grad,
    peers={
        "jax": PeerImpl(_jax, "jit(value_and_grad)"),
        "torch": PeerImpl(_torch, "0-d tensor, backward()"),
        "autograd": PeerImpl(_autograd, "value_and_grad"),
    },
)
