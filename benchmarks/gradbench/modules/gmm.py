"""GradBench ``gmm``: the log posterior of a Gaussian mixture with a Wishart prior
(ADBench's objective with its corrections) and its gradient w.r.t. ``alpha``, ``mu``,
``q``, ``l``. ``Q_k = diag(exp(q_k)) + L_k``; ``l[k]`` holds the strict lower
triangle of ``L_k`` column by column (GradBench's order). The constant part of the
Wishart prior (``log Gamma_d``) does not depend on the parameters and is computed
once in ``pre`` with ``math.lgamma``."""
import math

import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


def gmm(alpha, mu, q, l, x, gamma, m, const):
    kk, d = mu.shape
    n = x.shape[0]
    amax = alpha[0]
    for k in range(1, kk):
        if alpha[k] > amax:
            amax = alpha[k]
    asum = 0.0
    for k in range(kk):
        asum += math.exp(alpha[k] - amax)
    lse_alpha = amax + math.log(asum)
    qdiag = np.empty((kk, d))
    sum_q = np.zeros(kk)
    for k in range(kk):
        for j in range(d):
            qdiag[k, j] = math.exp(q[k, j])
            sum_q[k] += q[k, j]
    xc = np.empty(d)
    qx = np.empty(d)
    beta = np.empty(kk)
    slse = 0.0
    for i in range(n):
        for k in range(kk):
            for j in range(d):
                xc[j] = x[i, j] - mu[k, j]
                qx[j] = qdiag[k, j] * xc[j]
            t = 0
            for c in range(d):
                for r in range(c + 1, d):
                    qx[r] += l[k, t] * xc[c]
                    t += 1
            sq = 0.0
            for j in range(d):
                sq += qx[j] * qx[j]
            beta[k] = alpha[k] + sum_q[k] - 0.5 * sq
        bmax = beta[0]
        for k in range(1, kk):
            if beta[k] > bmax:
                bmax = beta[k]
        bsum = 0.0
        for k in range(kk):
            bsum += math.exp(beta[k] - bmax)
        slse += bmax + math.log(bsum)
    frob = 0.0
    qsum = 0.0
    nl = l.shape[1]
    for k in range(kk):
        for j in range(d):
            frob += qdiag[k, j] * qdiag[k, j]
        for j in range(nl):
            frob += l[k, j] * l[k, j]
        qsum += sum_q[k]
    prior = -(0.5 * gamma * gamma * frob - m * qsum) + kk * const
    return -n * d * 0.5 * math.log(2.0 * math.pi) + slse - n * lse_alpha + prior


def wishart_constant(d, gamma, m):
    nu = d + m + 1
    lg = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lg += math.lgamma(0.5 * nu + 0.5 * (1 - j))
    return nu * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lg


def pre(raw):
    d, k = int(raw["d"]), int(raw["k"])
    arr = lambda key, w: np.asarray(raw[key], dtype=np.float64).reshape(-1, w)
    gamma, m = float(raw["gamma"]), int(raw["m"])
    return (np.asarray(raw["alpha"], dtype=np.float64), arr("mu", d), arr("q", d),
            np.asarray(raw["l"], dtype=np.float64).reshape(k, d * (d - 1) // 2),
            arr("x", d), gamma, m, wishart_constant(d, gamma, m))


def make(target):
    mod = Module(target)
    f = primal(gmm, target)
    g = zyg.grad(gmm, argnums=(0, 1, 2, 3), target=target)
    post = lambda r: {"alpha": r[0].tolist(), "mu": r[1].tolist(), "q": r[2].tolist(),
                      "l": r[3].tolist()}
    mod.functions["objective"] = (pre, f, float)
    mod.functions["jacobian"] = (pre, g, post)
    rng = np.random.default_rng(0)
    small = {"d": 3, "k": 2, "n": 4, "m": 0, "gamma": 1.0,
             "alpha": rng.normal(size=2).tolist(), "mu": rng.normal(size=(2, 3)).tolist(),
             "q": rng.normal(size=(2, 3)).tolist(), "l": rng.normal(size=(2, 3)).tolist(),
             "x": rng.normal(size=(4, 3)).tolist()}
    mod.warm_up = lambda: (f(*pre(small)), g(*pre(small)))
    return mod
