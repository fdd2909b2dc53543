"""Workload 4, logistic regression: mean binary cross-entropy of ``sigmoid(X @ w + b)``.

``X`` is 100 x 10 (standard normal), labels ``y`` in {0, 1} drawn from a true model,
weights ``w`` (10) and bias ``b`` (a float) at a random point; gradient w.r.t.
``(w, b)`` -- ``argnums=(0, 1)``, so the gradient is a tuple ``(w_bar, b_bar)``.
Written with numpy calls (``@``, ``np.exp``, ``np.log``, ``np.sum``) in every
framework: that is how everyone writes it.
"""

from __future__ import annotations

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def logreg(w, b, X, y):
    """Mean binary cross-entropy of the logistic model ``sigmoid(X @ w + b)``."""
    z = X @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    return -np.sum(y * np.log(p) + (1.0 - y) * np.log(1.0 - p)) / X.shape[0]


@numba.njit
def logreg_value_and_grad(w, b, X, y):
    """Hand-written adjoint of :func:`logreg`; stores ``p`` (one float per sample).

    ``d loss / d z_i = (p_i - y_i) / n`` (the sigmoid's and the log's derivatives
    combined), then ``w_bar = X.T @ z_bar`` and ``b_bar = sum(z_bar)``.
    """
    n = X.shape[0]
    z = X @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    value = -np.sum(y * np.log(p) + (1.0 - y) * np.log(1.0 - p)) / n
    z_bar = (p - y) / n
    return value, (X.T @ z_bar, np.sum(z_bar))


def make_args(n: int, d: int, seed: int = 4) -> Args:
    """Deterministic data: ``X`` normal, labels from a true model, a random ``(w, b)``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w_true = rng.standard_normal(d)
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(X @ w_true + 0.5)))).astype(np.float64)
    w = 0.3 * rng.standard_normal(d)
    b = 0.1
    return (w, b, X, y)


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(w, b, X, y):
        p = 1.0 / (1.0 + jnp.exp(-(X @ w + b)))
        return -jnp.sum(y * jnp.log(p) + (1.0 - y) * jnp.log(1.0 - p)) / X.shape[0]

    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    def call(w, b, X, y):
        return jax.block_until_ready(vg(w, b, X, y))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(w, b, X, y):
        wt = torch.from_numpy(w).requires_grad_(True)
        bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        p = 1.0 / (1.0 + torch.exp(-(Xt @ wt + bt)))
        loss = -torch.sum(yt * torch.log(p) + (1.0 - yt) * torch.log(1.0 - p)) / Xt.shape[0]
        loss.backward()
        return loss.detach(), (wt.grad, bt.grad)

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def f(w, b, X, y):
        p = 1.0 / (1.0 + anp.exp(-(anp.dot(X, w) + b)))
        return -anp.sum(y * anp.log(p) + (1.0 - y) * anp.log(1.0 - p)) / X.shape[0]

    return autograd.value_and_grad(f, argnum=(0, 1))


WORKLOAD = Workload(
    number=4,
    name="logreg",
    title="logistic regression, X 100x10, mean cross-entropy; gradient w.r.t. (w, b)",
    fn=logreg,
    hand=logreg_value_and_grad,
    cases=(Case("100x10", make_args(100, 10), make_args(8, 3)),),
    fd_step=lambda args: 1e-3,
    peers={
        "jax": PeerImpl(_jax, "vectorised (jit)"),
        "torch": PeerImpl(_torch, "vectorised"),
        "autograd": PeerImpl(_autograd, "vectorised"),
    },
    argnums=(0, 1),
)
