"""Workload 6, Taylor series: ``sum_{i=1..N} x**i / i`` at x = 0.5 (Enzyme paper).

Written as a numba user would, accumulating the power term by term. The reverse
pass needs the old ``t`` of every ``t *= x``, so the hand-written adjoint tapes
N floats (80 MB at N = 10**7), in a buffer it keeps between calls. The peers use their vectorised idiom
(``sum(x ** i / i)`` over ``arange(1, N + 1)``), which is how one writes this in
array frameworks; no Python loop is involved.
"""

from __future__ import annotations

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def taylor(x, n):
    """``sum_{i=1..n} x**i / i`` by a loop that accumulates the power."""
    t = 1.0
    s = 0.0
    for i in range(1, n + 1):
        t *= x
        s += t / i
    return s


@numba.njit
def _taylor_adjoint(x, n, tape):
    t = 1.0
    s = 0.0
    for i in range(1, n + 1):
        tape[i - 1] = t
        t *= x
        s += t / i
    t_bar = 0.0
    x_bar = 0.0
    for i in range(n, 0, -1):
        t_bar += 1.0 / i
        x_bar += t_bar * tape[i - 1]
        t_bar *= x
    return s, x_bar


_WORKSPACE = [np.empty(0)]


def taylor_value_and_grad(x, n):
    """Hand-written adjoint of :func:`taylor`; tapes the ``t`` of each iteration.

    The tape buffer is kept between calls (as zyg keeps its tape): 80 MB is above
    glibc's mmap threshold, so a fresh buffer would be page-faulted again on every
    call (measured: 70 ms instead of 41 ms at N = 10**7).
    """
    tape = _WORKSPACE[0]
    if tape.shape[0] < n:
        tape = _WORKSPACE[0] = np.empty(n)
    return _taylor_adjoint(x, n, tape)


def _exact_grad(args: Args) -> float:
    x, n = args
    return (1.0 - x**n) / (1.0 - x)  # sum_{i=1..n} x**(i-1)


_VECTORISED = "vectorised: sum(x**i / i) over arange(1, N+1)"


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(x, n):
        i = jnp.arange(1, n + 1, dtype=jnp.float64)
        return jnp.sum(x**i / i)

    vg = jax.jit(jax.value_and_grad(f), static_argnums=1)

    def call(x, n):
        return jax.block_until_ready(vg(x, n))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(x, n):
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        i = torch.arange(1, n + 1, dtype=torch.float64)
        y = (xt**i / i).sum()
        y.backward()
        return y.detach(), xt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(x, n):
        i = anp.arange(1, n + 1, dtype=anp.float64)
        return anp.sum(x**i / i)

    return autograd.value_and_grad(f)


WORKLOAD = Workload(
    number=6,
    name="taylor",
    title="Taylor series sum x**i/i, loop accumulating the power",
    fn=taylor,
    hand=taylor_value_and_grad,
    cases=(Case("N=1e7", (0.5, 10**7), (0.5, 1000)),),
    fd_step=lambda args: 1e-3,
    exact_grad=_exact_grad,
    peers={
        "jax": PeerImpl(_jax, _VECTORISED),
        "torch": PeerImpl(_torch, _VECTORISED),
        "autograd": PeerImpl(_autograd, _VECTORISED),
    },
)
