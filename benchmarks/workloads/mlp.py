"""Workload 5, MLP 784 -> 128 (tanh) -> 10 with loss ``logsumexp(out) - out[label]``.

One sample (an MNIST-sized input ``x`` in [0, 1]^784 and an integer label), weights
``W1`` (128 x 784), ``b1`` (128), ``W2`` (10 x 128), ``b2`` (10) at a scaled random
initialisation; gradient w.r.t. all four -- ``argnums=(0, 1, 2, 3)``. Written with
numpy calls (``@``, ``np.tanh``, ``np.max``, ``np.exp``, ``np.sum``) in every
framework. The loss is the cross-entropy of the softmax, with a stable logsumexp.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def mlp(W1, b1, W2, b2, x, label):
    """Cross-entropy loss of a one-hidden-layer tanh MLP on one sample."""
    h = np.tanh(W1 @ x + b1)
    out = W2 @ h + b2
    m = np.max(out)
    return m + math.log(np.sum(np.exp(out - m))) - out[label]


@numba.njit
def mlp_value_and_grad(W1, b1, W2, b2, x, label):
    """Hand-written adjoint of :func:`mlp`; stores ``h`` and ``exp(out - m)``.

    ``out_bar = softmax(out) - onehot(label)`` (plus the max's rounding-level
    adjoint on the arg-max, as an AD tool routes it); ``W2_bar = outer(out_bar, h)``;
    ``a_bar = (W2.T @ out_bar) * (1 - h**2)``; ``W1_bar = outer(a_bar, x)``.
    """
    h = np.tanh(W1 @ x + b1)
    out = W2 @ h + b2
    k = np.argmax(out)
    m = out[k]
    e = np.exp(out - m)
    s = np.sum(e)
    value = m + math.log(s) - out[label]
    out_bar = e / s
    out_bar[k] += 1.0 - np.sum(out_bar)
    out_bar[label] -= 1.0
    a_bar = (W2.T @ out_bar) * (1.0 - h * h)
    return value, (np.outer(a_bar, x), a_bar, np.outer(out_bar, h), out_bar)


def make_args(n_in: int, n_hidden: int, n_out: int, seed: int = 5) -> Args:
    """Deterministic weights (scaled normal), biases (small normal), input and label."""
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((n_hidden, n_in)) / math.sqrt(n_in)
    b1 = 0.1 * rng.standard_normal(n_hidden)
    W2 = rng.standard_normal((n_out, n_hidden)) / math.sqrt(n_hidden)
    b2 = 0.1 * rng.standard_normal(n_out)
    x = rng.uniform(size=n_in)
    label = int(rng.integers(n_out))
    return (W1, b1, W2, b2, x, label)


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(W1, b1, W2, b2, x, label):
        h = jnp.tanh(W1 @ x + b1)
        out = W2 @ h + b2
        m = jnp.max(out)
        return m + jnp.log(jnp.sum(jnp.exp(out - m))) - out[label]

    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3)))

    def call(W1, b1, W2, b2, x, label):
        return jax.block_until_ready(vg(W1, b1, W2, b2, x, label))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(W1, b1, W2, b2, x, label):
        params = [torch.from_numpy(a).requires_grad_(True) for a in (W1, b1, W2, b2)]
        W1t, b1t, W2t, b2t = params
        h = torch.tanh(W1t @ torch.from_numpy(x) + b1t)
        out = W2t @ h + b2t
        m = torch.max(out)
        loss = m + torch.log(torch.sum(torch.exp(out - m))) - out[label]
        loss.backward()
        return loss.detach(), tuple(p.grad for p in params)

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(W1, b1, W2, b2, x, label):
        h = anp.tanh(anp.dot(W1, x) + b1)
        out = anp.dot(W2, h) + b2
        m = anp.max(out)
        return m + anp.log(anp.sum(anp.exp(out - m))) - out[label]

    return autograd.value_and_grad(f, argnum=(0, 1, 2, 3))


WORKLOAD = Workload(
    number=5,
    name="mlp",
    title="MLP 784 -> 128 tanh -> 10, loss logsumexp(out) - out[label]; all weights and biases",
    fn=mlp,
    hand=mlp_value_and_grad,
    cases=(Case("784-128-10", make_args(784, 128, 10), make_args(12, 6, 4)),),
    fd_step=lambda args: 3e-5,
    peers={
        "jax": PeerImpl(_jax, "vectorised (jit)"),
        "torch": PeerImpl(_torch, "vectorised"),
        "autograd": PeerImpl(_autograd, "vectorised"),
    },
    argnums=(0, 1, 2, 3),
)
