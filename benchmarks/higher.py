"""Higher-order AD benchmark (issue 5): the Hessian of a 100-dimensional function and
the cost of a Hessian-vector product, measured side by side in one run.

* zyg ``hessian`` (forward over reverse: one jvp of the generated gradient per column);
* JAX ``jax.jit(jax.hessian(f))`` (when JAX is installed; float64);
* finite differences of zyg's gradient (2n gradient calls, central);
* ``zyg.hvp`` against one ``zyg.grad`` (goal: under 3x).

The function is a chained Rosenbrock with a data-dependent branch, written as a loop
over an array (the kind of code zyg is for).  Run ``python -m benchmarks.higher``
(``--quick`` for a smoke run); writes ``benchmarks/results/higher.md``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from benchmarks.timing import QUICK, Settings, format_seconds, measure_interleaved


def chained(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i] * x[i]
        if d > 0.0:
            s += 100.0 * d * d + (1.0 - x[i]) ** 2
        else:
            s += 50.0 * d * d + (1.0 - x[i]) ** 2 + 0.1 * x[i] ** 4
    return s


def chained_jax(x):
    import jax.numpy as jnp
    d = x[1:] - x[:-1] ** 2
    t = jnp.where(d > 0.0, 100.0 * d * d + (1.0 - x[:-1]) ** 2,
                  50.0 * d * d + (1.0 - x[:-1]) ** 2 + 0.1 * x[:-1] ** 4)
    return jnp.sum(t)


def main(argv=None) -> int:
    import zyg
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args(argv)
    n = 10 if a.quick else a.n
    settings = QUICK if a.quick else Settings(budget_s=1.5)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.5, n)
    v = rng.standard_normal(n)

    t0 = time.perf_counter()
    hess = zyg.hessian(chained, target="cpu")
    H = hess(x)
    first_h = time.perf_counter() - t0
    g = zyg.grad(chained, target="cpu")
    g(x)
    t0 = time.perf_counter()
    hv = zyg.hvp(chained, x, v, target="cpu")
    first_hvp = time.perf_counter() - t0

    def fd_hessian(x):
        h = 1e-5
        out = np.empty((x.size, x.size))
        e = np.zeros_like(x)
        for k in range(x.size):
            e[k] = h
            out[:, k] = (g(x + e) - g(x - e)) / (2 * h)
            e[k] = 0.0
        return out

    Hfd = fd_hessian(x)
    np.testing.assert_allclose(hv, H @ v, rtol=1e-10, atol=1e-8)
    err_fd = float(np.max(np.abs(Hfd - H)) / np.max(np.abs(H)))
    calls = [(hess, (x,)), (fd_hessian, (x,)), (lambda x, v: zyg.hvp(chained, x, v, target="cpu"), (x, v)),
             (g, (x,))]
    jax_h = None
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jh = jax.jit(jax.hessian(chained_jax))
        Hj = np.asarray(jh(x))
        err_jax = float(np.max(np.abs(Hj - H)) / np.max(np.abs(H)))
        jax_h = lambda x: jh(x).block_until_ready()   # noqa: E731
        calls.append((jax_h, (x,)))
    except ImportError:
        err_jax = None
    ts = [t.median_s for t in measure_interleaved(calls, settings)]
    th, tfd, thvp, tg = ts[:4]
    tj = ts[4] if jax_h is not None else None
    lines = [f"# Higher-order AD (n = {n}, target cpu)", "",
             "| measurement | time | ratio |", "|---|---|---|",
             f"| zyg.hessian (forward over reverse, {n} jvps) | {format_seconds(th)} | 1 |",
             f"| finite differences of zyg.grad ({2 * n} gradients) | {format_seconds(tfd)} | "
             f"zyg/FD = **{th / tfd:.2f}** |"]
    if tj is not None:
        lines.append(f"| JAX jit(hessian) | {format_seconds(tj)} | zyg/JAX = **{th / tj:.2f}** |")
    lines += [f"| zyg.hvp | {format_seconds(thvp)} | hvp/grad = **{thvp / tg:.2f}** (goal < 3) |",
              f"| zyg.grad | {format_seconds(tg)} | |", "",
              f"Agreement: max |H_zyg - H_FD| / max |H| = {err_fd:.1e}"
              + (f"; against JAX {err_jax:.1e}" if err_jax is not None else "") + ".",
              f"First calls (transform + numba compile): hessian {first_h:.1f} s, hvp {first_hvp:.1f} s "
              "(the hvp shares the hessian's compiled code only when called with the same kinds).",
              "", "zyg.hvp includes the Python-side call of jvp (argument flattening and checks); "
              "the hessian runs one jvp per column."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.quick:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "higher.md"), "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
