"""Workload 7, Bessel J_nu(z) by its power series (the NiLang paper's example).

``J_nu(z) = sum_k (-1)**k (z/2)**(2k+nu) / (k! (k+nu)!)``, summed term by term in a
while loop until the term drops below 1e-8: the trip count depends on ``z``. Integer
order nu = 2, z = 1.0, gradient w.r.t. ``z``. The loop runs only a handful of times,
so this is a small function with a data-dependent loop.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload

ATOL = 1e-8


def bessel_j(z, nu):
    """J_nu(z) for an integer order nu >= 0, by its power series."""
    x = z / 2.0
    s = x**nu
    for i in range(2, nu + 1):
        s /= i
    out = s
    k = 0
    while math.fabs(s) > 1e-8:
        k += 1
        s *= -1.0 / k / (k + nu) * x * x
        out += s
    return out


@numba.njit
def bessel_j_value_and_grad(z, nu):
    """Hand-written adjoint of :func:`bessel_j`; tapes the term ``s`` of each iteration.

    The trip count is unknown on entry, so the tape starts small and doubles.
    """
    x = z / 2.0
    s = x**nu
    fact = 1.0
    for i in range(2, nu + 1):
        s /= i
        fact *= i
    out = s
    tape = np.empty(16)
    k = 0
    while math.fabs(s) > 1e-8:
        k += 1
        if k > tape.size:
            bigger = np.empty(2 * tape.size)
            bigger[: tape.size] = tape
            tape = bigger
        tape[k - 1] = s
        s *= -1.0 / k / (k + nu) * x * x
        out += s
    # reverse: out_bar = 1 throughout
    s_bar = 0.0
    x_bar = 0.0
    for j in range(k, 0, -1):
        s_bar += 1.0  # out += s
        c = -1.0 / j / (j + nu)
        x_bar += s_bar * tape[j - 1] * c * 2.0 * x  # s = s_old * c * x * x
        s_bar *= c * x * x
    s_bar += 1.0  # out = s
    if nu > 0:
        x_bar += s_bar * nu * x ** (nu - 1) / fact
    return out, 0.5 * x_bar


def trip_count(z: float, nu: int) -> int:
    """How many times :func:`bessel_j`'s while loop runs at ``(z, nu)``."""
    x = z / 2.0
    s = x**nu
    for i in range(2, nu + 1):
        s /= i
    k = 0
    while math.fabs(s) > ATOL:
        k += 1
        s *= -1.0 / k / (k + nu) * x * x
    return k


def _exact_grad(args: Args) -> float:
    z, nu = args
    from scipy.special import jvp  # optional: without scipy there is no exact check

    return float(jvp(nu, z))


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    z0, nu0 = args
    # lax.while_loop with a data-dependent condition cannot be reverse-differentiated:
    # fix the trip count the loop takes at this z (computed by the primal), static.
    k_static = trip_count(z0, nu0)

    def f(z, nu, n_terms):
        x = z / 2.0
        s = x**nu
        for i in range(2, nu + 1):
            s = s / i

        def body(k0, carry):
            s, out = carry
            k = k0 + 1
            s = s * (-1.0 / k / (k + nu) * x * x)
            return s, out + s

        _, out = jax.lax.fori_loop(0, n_terms, body, (s, s))
        return out

    vg = jax.jit(jax.value_and_grad(f), static_argnums=(1, 2))

    def call(z, nu):
        return jax.block_until_ready(vg(z, nu, k_static))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def f(z, nu):
        x = z / 2.0
        s = x**nu
        for i in range(2, nu + 1):
            s = s / i
        out = s
        k = 0
        while torch.abs(s) > 1e-8:
            k += 1
            s = s * (-1.0 / k / (k + nu) * x * x)
            out = out + s
        return out

    def call(z, nu):
        zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
        y = f(zt, nu)
        y.backward()
        return y.detach(), zt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(z, nu):
        x = z / 2.0
        s = x**nu
        for i in range(2, nu + 1):
            s = s / i
        out = s
        k = 0
        while anp.abs(s) > 1e-8:
            k += 1
            s = s * (-1.0 / k / (k + nu) * x * x)
            out = out + s
        return out

    return autograd.value_and_grad(f)


WORKLOAD = Workload(
    number=7,
    name="bessel",
    title="Bessel J_nu(z) power series, while loop to 1e-8; nu=2, z=1",
    fn=bessel_j,
    hand=bessel_j_value_and_grad,
    cases=(Case("", (1.0, 2), (1.0, 2)),),
    fd_step=lambda args: 1e-3,
    exact_grad=_exact_grad,
    # the series is truncated at a term below 1e-8; scipy's jvp is the full series
    exact_rtol=1e-8,
    peers={
        "jax": PeerImpl(
            _jax,
            "fori_loop, trip count fixed from the primal at this z "
            "(cannot reverse a data-dependent while_loop)",
        ),
        "torch": PeerImpl(_torch, "Python while loop on 0-d tensors"),
        "autograd": PeerImpl(_autograd, "Python while loop"),
    },
)
