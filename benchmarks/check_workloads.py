"""Check the array workloads' objectives and hand-written adjoints (seconds).

    python -m benchmarks.check_workloads            # all array workloads
    python -m benchmarks.check_workloads gmm ode    # some

For each workload with array arguments:

* the hand-written adjoint against finite differences of the numba primal:
  every element (5-point stencil per element) at the tiny quick arguments, and
  8 random directions at the full-size arguments;
* the hand adjoint's value against the numba primal (same arithmetic: exact);
* the objective against an independent formulation where there is one: scipy's
  ``logsumexp`` (3a, 3b), GradBench's naive GMM log posterior written with
  matrices, densities and ``multigammaln`` (8), the exact solution of the ODE (10).

Prints one line per check and exits with status 1 when any check fails. The
runner's own verification (:mod:`benchmarks.verify`) runs on every benchmark run;
this is the deeper check of the references themselves.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable

import numba
import numpy as np

from benchmarks import verify
from benchmarks.workloads import WORKLOADS, Workload, gmm, ode

FD_RTOL = 1e-8
"""Required agreement of a hand adjoint with finite differences."""


def elementwise_fd(f: Callable[..., float], args: tuple[Any, ...], argnums: tuple[int, ...],
                   h: float) -> tuple[Any, ...]:
    """Full gradient by the 5-point stencil, element by element (small arguments only)."""
    out = []
    for i in argnums:
        base = args[i]
        if verify.is_scalar(base):
            def at(t: float, i=i, base=base) -> float:
                new = list(args)
                new[i] = base + t
                return float(f(*new))
            out.append((-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12 * h))
            continue
        g = np.empty(base.shape)
        for idx in np.ndindex(base.shape):
            vals = []
            for t in (2 * h, h, -h, -2 * h):
                x = np.array(base, dtype=np.float64)
                x[idx] += t
                new = list(args)
                new[i] = x
                vals.append(float(f(*new)))
            g[idx] = (-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * h)
        out.append(g)
    return tuple(out)


def _as_tuple(grad: Any, n: int) -> tuple[Any, ...]:
    return (grad,) if n == 1 else tuple(grad)


def check_hand(w: Workload, report: Callable[[str, float, float], None]) -> None:
    primal = numba.njit(w.fn)
    for quick in (True, False):
        args = w.cases[0].arguments(quick)
        value = primal(*args)
        hand_value, hand_grad = w.hand(*args)
        report(f"{w.name} {'quick' if quick else 'full'}: hand value vs primal",
               abs(hand_value - value) / max(abs(value), 1e-300), 1e-12)
        h = w.fd_step(args)
        if quick:
            fd = elementwise_fd(primal, args, w.argnums, h)
            err = verify.rel_error(_as_tuple(hand_grad, len(w.argnums)), fd)
            report(f"{w.name} quick: hand grad vs FD, every element", err, FD_RTOL)
        else:
            fd = verify.central_difference(primal, args, h, argnums=w.argnums,
                                           n_directions=8, seed=7)
            err = verify.fd_error(hand_grad, fd)
            report(f"{w.name} full: hand grad vs FD, 8 directions", err, FD_RTOL)


def naive_gmm_log_posterior(alpha, mu, q, l, x, gamma, m) -> float:
    """GradBench's naive definition: product of densities, Wishart pdf of Q^T Q."""
    from scipy.special import multigammaln

    K, D = mu.shape
    N = x.shape[0]
    phi = np.exp(alpha) / np.sum(np.exp(alpha))
    log_lik = 0.0
    precisions = []
    for k in range(K):
        Q = np.diag(np.exp(q[k]))
        for r in range(D):
            for c in range(r):
                Q[r, c] = l[k, r * (r - 1) // 2 + c]
        precisions.append(Q.T @ Q)
    for i in range(N):
        dens = 0.0
        for k in range(K):
            P = precisions[k]
            xc = x[i] - mu[k]
            dens += phi[k] * math.exp(-0.5 * xc @ P @ xc) / math.sqrt(
                (2 * math.pi) ** D / np.linalg.det(P))
        log_lik += math.log(dens)
    nu = D + m + 1
    V = np.eye(D) / gamma**2
    log_prior = 0.0
    for P in precisions:
        log_prior += ((nu - D - 1) / 2 * math.log(np.linalg.det(P))
                      - np.trace(np.linalg.inv(V) @ P) / 2
                      - nu * D / 2 * math.log(2) - nu / 2 * math.log(np.linalg.det(V))
                      - multigammaln(nu / 2, D))
    return log_lik + log_prior


def check_objectives(names: set[str], report: Callable[[str, float, float], None]) -> None:
    if {"lse_loop", "lse_np"} & names:
        from scipy.special import logsumexp

        for w in WORKLOADS:
            if w.name in ("lse_loop", "lse_np") and w.name in names:
                (x,) = w.cases[0].args
                v = numba.njit(w.fn)(x)
                report(f"{w.name}: value vs scipy logsumexp", abs(v - logsumexp(x)) / abs(v), 1e-14)
    if "gmm" in names:
        for args in (gmm.make_args(3, 4, 20, m=2, gamma=1.3), gmm.make_args(5, 3, 30)):
            v = numba.njit(gmm.gmm)(*args)
            ref = naive_gmm_log_posterior(*args)
            report(f"gmm d={args[1].shape[1]}: value vs naive GradBench log posterior",
                   abs(v - ref) / abs(ref), 1e-11)
    if "ode" in names:
        # y_{n-1}(2) = prod(x) 2^n / n! exactly; RK4 with s steps approximates it
        x, s = ode.WORKLOAD.cases[0].args
        n = x.shape[0]
        exact = math.exp(np.sum(np.log(x)) + n * math.log(2.0) - math.lgamma(n + 1))
        v = numba.njit(ode.ode)(x, s)
        report(f"ode n={n} s={s}: value vs exact solution (RK4 truncation)",
               abs(v - exact) / exact, 1e-3)


def main(argv: list[str]) -> int:
    wanted = set(argv) or {w.name for w in WORKLOADS if w.argnums != (0,) or not
                           verify.is_scalar(w.cases[0].args[0])}
    failures = []

    def report(what: str, err: float, tol: float) -> None:
        ok = err <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {err:.2e} (tol {tol:.0e})")
        if not ok:
            failures.append(what)

    for w in WORKLOADS:
        if w.name in wanted:
            check_hand(w, report)
    check_objectives(wanted, report)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
