"""Workload 2, pow loop: ``r = 1.0; while n > 0: n -= 1; r *= x`` (x ** n by a loop).

The example from "Don't Unroll Adjoint": a loop whose trip count is data (``n``).
The reverse pass needs every intermediate ``r`` (the adjoint of ``r *= x`` w.r.t.
``x`` is the old ``r``), so the hand-written adjoint stores one float per
iteration -- ``n`` is known on entry, so it allocates that tape once.
``x`` is close to 1 so that ``x ** n`` stays O(1) for n = 10**6.
"""

from __future__ import annotations

from typing import Optional

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload

X0 = 0.9999991


def pow_loop(x, n):
    """``x ** n`` computed by ``n`` multiplications in a while loop."""
    r = 1.0
    while n > 0:
        n -= 1
        r *= x
    return r


@numba.njit
def pow_loop_value_and_grad(x, n):
    """Hand-written adjoint of :func:`pow_loop`; tapes the ``r`` of each iteration."""
    tape = np.empty(max(n, 0))
    r = 1.0
    k = 0
    while n > 0:
        n -= 1
        tape[k] = r
        k += 1
        r *= x
    r_bar = 1.0
    x_bar = 0.0
    for j in range(k - 1, -1, -1):
        x_bar += r_bar * tape[j]
        r_bar *= x
    return r, x_bar


def _exact_grad(args: Args) -> float:
    x, n = args
    return n * x ** (n - 1) if n > 0 else 0.0


def _fd_step(args: Args) -> float:
    # The 5-point stencil's truncation error is about (h*n)**4 / 30 relative.
    x, n = args
    return 1e-2 / max(n, 1)


def _reduce(args: Args, cap: int) -> Optional[tuple[Args, float]]:
    x, n = args
    if n <= cap:
        return None
    return (x, cap), n / cap


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(x, n):
        # A data-dependent lax.while_loop cannot be reverse-differentiated; with n
        # static, fori_loop lowers to a scan, which can.
        return jax.lax.fori_loop(0, n, lambda i, r: r * x, jnp.ones_like(x))

    vg = jax.jit(jax.value_and_grad(f), static_argnums=1)

    def call(x, n):
        return jax.block_until_ready(vg(x, n))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def f(x, n):
        r = torch.ones((), dtype=torch.float64)
        while n > 0:
            n -= 1
            r = r * x  # not r *= x: in-place would clobber a value backward needs
        return r

    def call(x, n):
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        y = f(xt, n)
        y.backward()
        return y.detach(), xt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, _ = import_autograd()

    def f(x, n):
        r = 1.0
        while n > 0:
            n -= 1
            r = r * x
        return r

    return autograd.value_and_grad(f)


WORKLOAD = Workload(
    number=2,
    name="pow",
    title="pow loop: r *= x in a while loop, n times",
    fn=pow_loop,
    hand=pow_loop_value_and_grad,
    cases=(
        Case("n=1e3", (X0, 1000), (X0, 50)),
        Case("n=1e6", (X0, 10**6), (X0, 200)),
    ),
    fd_step=_fd_step,
    exact_grad=_exact_grad,
    peers={
        "jax": PeerImpl(
            _jax, "fori_loop with static n (cannot reverse a data-dependent while_loop)"
        ),
        "torch": PeerImpl(_torch, "Python while loop on 0-d tensors", python_loop=True),
        "autograd": PeerImpl(_autograd, "Python while loop", python_loop=True),
    },
    reduce_trip_count=_reduce,
)
