"""Workload 8, GMM: log posterior of a Gaussian mixture with a Wishart prior.

The objective of the GradBench ``gmm`` eval: ADBench's GMM objective with its three
published corrections -- (1) the sign of the prior (it is the log *posterior*, so
likelihood and prior are both added with their true signs), (2) the precision matrix
of component ``k`` is ``Q_k^T Q_k`` (``Q_k`` lower triangular, so the quadratic form
is ``|Q_k (x - mu_k)|^2``), (3) the Wishart prior is over the precision matrices.
With ``Q_k = diag(exp(q_k)) + L_k`` (``L_k`` strictly lower triangular)::

    beta_ik  = alpha_k + sum_j q_kj - |Q_k (x_i - mu_k)|^2 / 2
    log p(X) = -N (D log(2 pi) / 2 + logsumexp(alpha)) + sum_i logsumexp_k(beta_ik)
    log p(Q) = K (D nu log(gamma / sqrt 2) - log Gamma_D(nu / 2))
               - gamma^2 / 2 sum_k |Q_k|_F^2 + m sum_kj q_kj,      nu = D + m + 1

and the objective is ``log p(X) + log p(Q)``. The gradient is w.r.t. ``alpha`` (K),
``mu`` (K x D), ``q`` (K x D) and ``l`` (K x D(D-1)/2) -- ``argnums=(0, 1, 2, 3)``.
``l[k]`` holds the strictly lower triangle of ``L_k`` row by row (GradBench's jagged
``l[k][r][c]``, ``c < r``, flattened): ``L_k[r, c] = l[k, r (r - 1) / 2 + c]``.
Sizes D = 10, K = 25, N = 1000; inputs drawn as GradBench's generator does
(``x``, ``q``, ``l``, ``alpha`` standard normal, ``mu`` uniform), gamma = 1, m = 0
(the quick case uses m = 2 so that the ``m`` term is exercised).

``gmm`` is written with explicit loops as a numba user would (preallocated arrays,
element reads and writes, logsumexp by a max loop and a sum loop). The constant
``log Gamma_D(nu / 2)`` is computed inside by loops of ``math.log`` (its arguments are
integers or half-integers), so the function stays in zyg's subset; it does not
depend on the differentiated arguments. The peers use the vectorised form
(broadcast ``x - mu``, ``einsum`` with the unpacked ``L``), which is their idiom.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def gmm(alpha, mu, q, l, x, gamma, m):
    """GradBench ``gmm`` objective (log posterior), explicit loops."""
    kk, d = mu.shape
    n = x.shape[0]
    # logsumexp(alpha)
    amax = alpha[0]
    for k in range(1, kk):
        if alpha[k] > amax:
            amax = alpha[k]
    asum = 0.0
    for k in range(kk):
        asum += math.exp(alpha[k] - amax)
    lse_alpha = amax + math.log(asum)
    # diagonals exp(q_k) of Q_k and sums of q_k
    qdiag = np.empty((kk, d))
    sum_q = np.zeros(kk)
    for k in range(kk):
        for j in range(d):
            qdiag[k, j] = math.exp(q[k, j])
            sum_q[k] += q[k, j]
    # likelihood: sum over points of logsumexp over components
    xc = np.empty(d)
    beta = np.empty(kk)
    slse = 0.0
    for i in range(n):
        for k in range(kk):
            for j in range(d):
                xc[j] = x[i, j] - mu[k, j]
            sq = 0.0
            t = 0
            for r in range(d):
                v = qdiag[k, r] * xc[r]
                for c in range(r):
                    v += l[k, t] * xc[c]
                    t += 1
                sq += v * v
            beta[k] = alpha[k] + sum_q[k] - 0.5 * sq
        bmax = beta[0]
        for k in range(1, kk):
            if beta[k] > bmax:
                bmax = beta[k]
        bsum = 0.0
        for k in range(kk):
            bsum += math.exp(beta[k] - bmax)
        slse += bmax + math.log(bsum)
    # Wishart prior on the precision matrices
    frob = 0.0
    q_total = 0.0
    nl = l.shape[1]
    for k in range(kk):
        for j in range(d):
            frob += qdiag[k, j] * qdiag[k, j]
        for j in range(nl):
            frob += l[k, j] * l[k, j]
        q_total += sum_q[k]
    nu = d + m + 1
    # log Gamma_d(nu / 2) = d (d - 1) / 4 log(pi) + sum_j log Gamma((nu + 1 - j) / 2)
    lmg = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        twice = nu + 1 - j
        if twice % 2 == 0:
            for s in range(1, twice // 2):
                lmg += math.log(s)
        else:
            lmg += 0.5 * math.log(math.pi)
            for s in range(1, (twice - 1) // 2 + 1):
                lmg += math.log(s - 0.5)
    log_prior = (kk * (nu * d * math.log(gamma / math.sqrt(2.0)) - lmg)
                 - 0.5 * gamma * gamma * frob + m * q_total)
    return -n * (0.5 * d * math.log(2.0 * math.pi) + lse_alpha) + slse + log_prior


@numba.njit
def gmm_value_and_grad(alpha, mu, q, l, x, gamma, m):
    """Hand-written adjoint of :func:`gmm`.

    The terms of the likelihood are independent per data point, so the reverse
    pass for point ``i`` runs right after its forward pass: per point it stores the
    centred points ``xc`` and ``v = Q_k xc`` of every component (2 K D floats,
    reused) and the ``beta_ik``; nothing is kept across points. The adjoint of
    ``beta_ik`` is the responsibility ``exp(beta_ik - lse_i)``; the max's
    rounding-level adjoint goes to the arg-max, as an AD tool routes it.
    """
    kk, d = mu.shape
    n = x.shape[0]
    nl = l.shape[1]
    amax = alpha[0]
    ka = 0
    for k in range(1, kk):
        if alpha[k] > amax:
            amax = alpha[k]
            ka = k
    ea = np.empty(kk)
    asum = 0.0
    for k in range(kk):
        ea[k] = math.exp(alpha[k] - amax)
        asum += ea[k]
    lse_alpha = amax + math.log(asum)
    qdiag = np.empty((kk, d))
    sum_q = np.zeros(kk)
    for k in range(kk):
        for j in range(d):
            qdiag[k, j] = math.exp(q[k, j])
            sum_q[k] += q[k, j]

    alpha_bar = np.zeros(kk)
    mu_bar = np.zeros((kk, d))
    qdiag_bar = np.zeros((kk, d))
    sum_q_bar = np.zeros(kk)
    l_bar = np.zeros((kk, nl))
    xc = np.empty((kk, d))
    v = np.empty((kk, d))
    beta = np.empty(kk)
    e = np.empty(kk)
    xc_bar = np.empty(d)
    slse = 0.0
    for i in range(n):
        for k in range(kk):
            for j in range(d):
                xc[k, j] = x[i, j] - mu[k, j]
            sq = 0.0
            t = 0
            for r in range(d):
                vr = qdiag[k, r] * xc[k, r]
                for c in range(r):
                    vr += l[k, t] * xc[k, c]
                    t += 1
                v[k, r] = vr
                sq += vr * vr
            beta[k] = alpha[k] + sum_q[k] - 0.5 * sq
        bmax = beta[0]
        kb = 0
        for k in range(1, kk):
            if beta[k] > bmax:
                bmax = beta[k]
                kb = k
        bsum = 0.0
        for k in range(kk):
            e[k] = math.exp(beta[k] - bmax)
            bsum += e[k]
        slse += bmax + math.log(bsum)
        # reverse for point i: beta_bar_k = e_k / bsum (+ the max's adjoint)
        resid = 1.0
        for k in range(kk):
            e[k] /= bsum
            resid -= e[k]
        e[kb] += resid
        for k in range(kk):
            p = e[k]
            alpha_bar[k] += p
            sum_q_bar[k] += p
            for j in range(d):
                xc_bar[j] = 0.0
            t = 0
            for r in range(d):
                vb = -p * v[k, r]  # d(-sq/2)/dv_r
                qdiag_bar[k, r] += vb * xc[k, r]
                xc_bar[r] += vb * qdiag[k, r]
                for c in range(r):
                    l_bar[k, t] += vb * xc[k, c]
                    xc_bar[c] += vb * l[k, t]
                    t += 1
            for j in range(d):
                mu_bar[k, j] -= xc_bar[j]

    frob = 0.0
    q_total = 0.0
    for k in range(kk):
        for j in range(d):
            frob += qdiag[k, j] * qdiag[k, j]
        for j in range(nl):
            frob += l[k, j] * l[k, j]
        q_total += sum_q[k]
    nu = d + m + 1
    lmg = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        twice = nu + 1 - j
        if twice % 2 == 0:
            for s in range(1, twice // 2):
                lmg += math.log(s)
        else:
            lmg += 0.5 * math.log(math.pi)
            for s in range(1, (twice - 1) // 2 + 1):
                lmg += math.log(s - 0.5)
    log_prior = (kk * (nu * d * math.log(gamma / math.sqrt(2.0)) - lmg)
                 - 0.5 * gamma * gamma * frob + m * q_total)
    value = -n * (0.5 * d * math.log(2.0 * math.pi) + lse_alpha) + slse + log_prior

    # -n * logsumexp(alpha)
    resid = 1.0
    for k in range(kk):
        ea[k] /= asum
        resid -= ea[k]
    ea[ka] += resid
    for k in range(kk):
        alpha_bar[k] -= n * ea[k]
    # prior: -gamma^2/2 |Q|_F^2 + m sum(q); q enters via exp(q) and sum(q)
    g2 = gamma * gamma
    q_bar = np.empty((kk, d))
    for k in range(kk):
        for j in range(d):
            qd = qdiag[k, j]
            q_bar[k, j] = (qdiag_bar[k, j] - g2 * qd) * qd + sum_q_bar[k] + m
        for j in range(nl):
            l_bar[k, j] -= g2 * l[k, j]
    return value, (alpha_bar, mu_bar, q_bar, l_bar)


def make_args(d: int, k: int, n: int, m: int = 0, gamma: float = 1.0,
              seed: int = 31337) -> Args:
    """Deterministic inputs distributed as GradBench's ``gmm`` generator draws them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    mu = rng.uniform(size=(k, d))
    q = rng.standard_normal((k, d))
    l = rng.standard_normal((k, d * (d - 1) // 2))
    alpha = rng.standard_normal(k)
    return (alpha, mu, q, l, x, gamma, m)


@functools.lru_cache(maxsize=None)
def log_prior_constant(d: int, k: int, gamma: float, m: int) -> float:
    """``K (D nu log(gamma / sqrt 2) - log Gamma_D(nu / 2))``, the prior's constant."""
    nu = d + m + 1
    lmg = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * nu + 0.5 * (1 - j)) for j in range(1, d + 1))
    return k * (nu * d * math.log(gamma / math.sqrt(2.0)) - lmg)


@functools.lru_cache(maxsize=None)
def unpack_index(d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(idx, mask)``: ``L_k = l[k][idx] * mask`` unpacks the strictly lower triangle."""
    idx = np.zeros((d, d), dtype=np.int64)
    mask = np.zeros((d, d))
    for r in range(d):
        for c in range(r):
            idx[r, c] = r * (r - 1) // 2 + c
            mask[r, c] = 1.0
    return idx, mask


def _vectorised(xp, lse_max, einsum):
    """The objective in array form for a numpy-like module ``xp``."""

    def f(alpha, mu, q, l, x, gamma, m, idx, mask, const):
        n, d = x.shape
        qdiag = xp.exp(q)
        L = l[:, idx] * mask  # (K, D, D), strictly lower
        xc = x[:, None, :] - mu[None, :, :]  # (N, K, D)
        v = qdiag[None, :, :] * xc + einsum("krc,ikc->ikr", L, xc)
        beta = alpha[None, :] + xp.sum(q, 1)[None, :] - 0.5 * xp.sum(v * v, 2)  # (N, K)
        bmax = lse_max(beta, 1)
        slse = xp.sum(bmax + xp.log(xp.sum(xp.exp(beta - bmax[:, None]), 1)))
        amax = lse_max(alpha, 0)
        lse_alpha = amax + xp.log(xp.sum(xp.exp(alpha - amax)))
        frob = xp.sum(qdiag * qdiag) + xp.sum(l * l)
        return (-n * (0.5 * d * math.log(2.0 * math.pi) + lse_alpha) + slse + const
                - 0.5 * gamma * gamma * frob + m * xp.sum(q))

    return f


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy
    f = _vectorised(jnp, lambda a, ax: jnp.max(a, axis=ax), jnp.einsum)
    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3)))

    def call(alpha, mu, q, l, x, gamma, m):
        k, d = mu.shape
        idx, mask = unpack_index(d)
        const = log_prior_constant(d, k, gamma, m)
        return jax.block_until_ready(vg(alpha, mu, q, l, x, gamma, m, idx, mask, const))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()
    f = _vectorised(torch, lambda a, ax: torch.max(a, ax).values if a.dim() > 1
                    else torch.max(a), torch.einsum)

    @functools.lru_cache(maxsize=None)
    def tensors(d: int) -> tuple[object, object]:
        idx, mask = unpack_index(d)
        return torch.from_numpy(idx), torch.from_numpy(mask)

    def call(alpha, mu, q, l, x, gamma, m):
        k, d = mu.shape
        idx, mask = tensors(d)
        params = [torch.from_numpy(a).requires_grad_(True) for a in (alpha, mu, q, l)]
        y = f(*params, torch.from_numpy(x), gamma, m, idx, mask,
              log_prior_constant(d, k, gamma, m))
        y.backward()
        return y.detach(), tuple(p.grad for p in params)

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()
    f = _vectorised(anp, lambda a, ax: anp.max(a, axis=ax), anp.einsum)
    vg = autograd.value_and_grad(f, argnum=(0, 1, 2, 3))

    def call(alpha, mu, q, l, x, gamma, m):
        k, d = mu.shape
        idx, mask = unpack_index(d)
        return vg(alpha, mu, q, l, x, gamma, m, idx, mask, log_prior_constant(d, k, gamma, m))

    return call


WORKLOAD = Workload(
    number=8,
    name="gmm",
    title="GMM log posterior with Wishart prior (GradBench gmm), d=10 K=25 N=1000, loops",
    fn=gmm,
    hand=gmm_value_and_grad,
    cases=(Case("d=10,K=25,N=1000", make_args(10, 25, 1000),
                make_args(3, 4, 20, m=2, gamma=1.3)),),
    fd_step=lambda args: 1e-4,
    peers={
        "jax": PeerImpl(_jax, "vectorised: broadcast x - mu, einsum with unpacked L (jit)"),
        "torch": PeerImpl(_torch, "vectorised: broadcast x - mu, einsum with unpacked L"),
        "autograd": PeerImpl(_autograd, "vectorised: broadcast x - mu, einsum with unpacked L"),
    },
    argnums=(0, 1, 2, 3),
)
