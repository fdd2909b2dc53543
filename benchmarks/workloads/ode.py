"""Workload 10, ODE: cmpad's ``an_ode`` as GradBench's ``ode`` eval computes it.

Solve ``y_0' = x_0``, ``y_i' = x_i y_{i-1}`` (i > 0), ``y(0) = 0`` on ``[0, 2]`` with
``s`` fixed steps of the classical Runge-Kutta method (RK4), and return the last
state element ``y_{n-1}(2)``; the gradient is w.r.t. the parameter vector ``x``
(``argnums=(0,)``; ``s`` is an inactive int). ``x`` is uniform in [0, 1), as
GradBench draws it. The arithmetic follows GradBench's C++ reference (``ode.hpp``):
``y_tmp = y + h * k / 2`` and ``y += h * (k1 + 2 k2 + 2 k3 + k4) / 6``.

Sizes: n = 100, s = 1000. (GradBench's own sizes, n >= 1000 with s <= 100, give an
identically zero result and gradient in float64: one RK4 step propagates a nonzero
value four places along ``y``, so ``y_{n-1}`` stays exactly 0 while ``n - 1 > 4 s``;
and ``y_{n-1}(2) ~ prod(x) 2^n / n!`` underflows for n above ~150. A zero gradient
verifies nothing, so we keep the problem and choose sizes where it is not zero.)

``ode`` is written with explicit loops over steps and elements, preallocated stage
arrays and in-place updates of ``y`` -- the sequential loop with ``s`` steps needs a
tape. The peers write the right-hand side vectorised (``concatenate([x[:1],
x[1:] * y[:-1]])``); JAX runs the steps in ``lax.fori_loop`` with ``s`` static (a
scan), PyTorch and autograd in a Python loop.
"""

from __future__ import annotations

from typing import Optional

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def ode(x, s):
    """Last element of the RK4 solution of cmpad's ``an_ode`` at t = 2, ``s`` steps."""
    n = x.shape[0]
    h = 2.0 / s
    y = np.zeros(n)
    k1 = np.empty(n)
    k2 = np.empty(n)
    k3 = np.empty(n)
    k4 = np.empty(n)
    yt = np.empty(n)
    for step in range(s):
        k1[0] = x[0]
        for i in range(1, n):
            k1[i] = x[i] * y[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k1[i] / 2.0
        k2[0] = x[0]
        for i in range(1, n):
            k2[i] = x[i] * yt[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k2[i] / 2.0
        k3[0] = x[0]
        for i in range(1, n):
            k3[i] = x[i] * yt[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k3[i]
        k4[0] = x[0]
        for i in range(1, n):
            k4[i] = x[i] * yt[i - 1]
        for i in range(n):
            y[i] += h * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) / 6.0
    return y[n - 1]


@numba.njit
def ode_value_and_grad(x, s):
    """Hand-written adjoint of :func:`ode`.

    Stores ``y`` at the start of every step (n s floats) and recomputes the three
    intermediate stage points of a step in the reverse sweep (the right-hand side is
    one multiplication per element, cheaper to recompute than to store and reload).
    """
    n = x.shape[0]
    h = 2.0 / s
    tape = np.empty((s, n))
    y = np.zeros(n)
    k1 = np.empty(n)
    k2 = np.empty(n)
    k3 = np.empty(n)
    k4 = np.empty(n)
    yt = np.empty(n)
    for step in range(s):
        for i in range(n):
            tape[step, i] = y[i]
        k1[0] = x[0]
        for i in range(1, n):
            k1[i] = x[i] * y[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k1[i] / 2.0
        k2[0] = x[0]
        for i in range(1, n):
            k2[i] = x[i] * yt[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k2[i] / 2.0
        k3[0] = x[0]
        for i in range(1, n):
            k3[i] = x[i] * yt[i - 1]
        for i in range(n):
            yt[i] = y[i] + h * k3[i]
        k4[0] = x[0]
        for i in range(1, n):
            k4[i] = x[i] * yt[i - 1]
        for i in range(n):
            y[i] += h * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) / 6.0
    value = y[n - 1]

    # reverse sweep; yb is the adjoint of y after the step being reversed
    xb = np.zeros(n)
    yb = np.zeros(n)
    yb[n - 1] = 1.0
    y0b = np.empty(n)
    yt1 = np.empty(n)
    yt2 = np.empty(n)
    yt3 = np.empty(n)
    kb = np.empty(n)
    for step in range(s - 1, -1, -1):
        y0 = tape[step]
        # recompute the stage points yt1, yt2, yt3
        yt1[0] = y0[0] + h * x[0] / 2.0
        for i in range(1, n):
            yt1[i] = y0[i] + h * (x[i] * y0[i - 1]) / 2.0
        yt2[0] = y0[0] + h * x[0] / 2.0
        for i in range(1, n):
            yt2[i] = y0[i] + h * (x[i] * yt1[i - 1]) / 2.0
        yt3[0] = y0[0] + h * x[0]
        for i in range(1, n):
            yt3[i] = y0[i] + h * (x[i] * yt2[i - 1])
        # y += h (k1 + 2 k2 + 2 k3 + k4) / 6
        for i in range(n):
            y0b[i] = yb[i]
            yb[i] = h * yb[i] / 6.0  # reused: the adjoint of k1 and k4 (k2, k3: twice)
        # k4 = f(yt3); yt3 = y0 + h k3
        xb[0] += yb[0]
        for i in range(1, n):
            xb[i] += yb[i] * yt3[i - 1]
        kb[n - 1] = 2.0 * yb[n - 1]
        for i in range(n - 1):
            b3 = yb[i + 1] * x[i + 1]  # adjoint of yt3[i]
            y0b[i] += b3
            kb[i] = 2.0 * yb[i] + h * b3  # adjoint of k3
        # k3 = f(yt2); yt2 = y0 + h k2 / 2
        xb[0] += kb[0]
        for i in range(1, n):
            xb[i] += kb[i] * yt2[i - 1]
        for i in range(n - 1):
            b2 = kb[i + 1] * x[i + 1]
            y0b[i] += b2
            kb[i] = 2.0 * yb[i] + h * b2 / 2.0  # adjoint of k2
        kb[n - 1] = 2.0 * yb[n - 1]
        # k2 = f(yt1); yt1 = y0 + h k1 / 2
        xb[0] += kb[0]
        for i in range(1, n):
            xb[i] += kb[i] * yt1[i - 1]
        for i in range(n - 1):
            b1 = kb[i + 1] * x[i + 1]
            y0b[i] += b1
            kb[i] = yb[i] + h * b1 / 2.0  # adjoint of k1
        kb[n - 1] = yb[n - 1]
        # k1 = f(y0)
        xb[0] += kb[0]
        for i in range(1, n):
            xb[i] += kb[i] * y0[i - 1]
        for i in range(n - 1):
            y0b[i] += kb[i + 1] * x[i + 1]
        for i in range(n):
            yb[i] = y0b[i]
    return value, xb


def make_args(n: int, s: int, seed: int = 31337) -> Args:
    """``x`` uniform in [0, 1) (as GradBench draws it) and the step count."""
    return (np.random.default_rng(seed).uniform(size=n), s)


def _reduce(args: Args, cap: int) -> Optional[tuple[Args, float]]:
    x, s = args
    if s <= cap:
        return None
    return (x, cap), s / cap


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(x, s):
        h = 2.0 / s

        def fun(y):
            return jnp.concatenate([x[:1], x[1:] * y[:-1]])

        def body(_, y):
            k1 = fun(y)
            k2 = fun(y + h * k1 / 2.0)
            k3 = fun(y + h * k2 / 2.0)
            k4 = fun(y + h * k3)
            return y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0

        return jax.lax.fori_loop(0, s, body, jnp.zeros_like(x))[-1]

    vg = jax.jit(jax.value_and_grad(f), static_argnums=1)

    def call(x, s):
        return jax.block_until_ready(vg(x, s))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(x, s):
        xt = torch.from_numpy(x).requires_grad_(True)
        h = 2.0 / s
        head, tail = xt[:1], xt[1:]

        def fun(y):
            return torch.cat([head, tail * y[:-1]])

        y = torch.zeros_like(xt)
        for _ in range(s):
            k1 = fun(y)
            k2 = fun(y + h * k1 / 2.0)
            k3 = fun(y + h * k2 / 2.0)
            k4 = fun(y + h * k3)
            y = y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0
        out = y[-1]
        out.backward()
        return out.detach(), xt.grad

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(x, s):
        h = 2.0 / s

        def fun(y):
            return anp.concatenate([x[:1], x[1:] * y[:-1]])

        y = anp.zeros(x.shape[0])
        for _ in range(s):
            k1 = fun(y)
            k2 = fun(y + h * k1 / 2.0)
            k3 = fun(y + h * k2 / 2.0)
            k4 = fun(y + h * k3)
            y = y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0
        return y[-1]

    return autograd.value_and_grad(f)


WORKLOAD = Workload(
    number=10,
    name="ode",
    title="cmpad an_ode (GradBench ode): RK4, n=100, s=1000; d y[n-1] / d x",
    fn=ode,
    hand=ode_value_and_grad,
    cases=(Case("n=100,s=1000", make_args(100, 1000), make_args(8, 4)),),
    fd_step=lambda args: 1e-5,
    peers={
        "jax": PeerImpl(_jax, "fori_loop over steps with s static (a scan), vectorised rhs"),
        "torch": PeerImpl(_torch, "Python loop over steps, vectorised rhs", python_loop=True),
        "autograd": PeerImpl(_autograd, "Python loop over steps, vectorised rhs",
                             python_loop=True),
    },
    reduce_trip_count=_reduce,
    argnums=(0,),
)
