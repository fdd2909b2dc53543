"""Vector forward mode benchmark (issue 27): ``zyg.jacobian(f, mode="fwd")`` and
``zyg.hessian`` before (one forward pass per column) and after (``jvp(batched=True)``:
the primal once, every tangent carrying JAC_CHUNK = 32 lanes), side by side in one run.

* ``jac fwd``: the Jacobian of ``stencil`` (n -> n, a loop of array writes and scalar
  arithmetic) and of ``elementwise`` (numpy expressions on arrays), n = 50 .. 200;
  before = ``zyg.jvp`` once per unit tangent (what ``jacobian(mode="fwd")`` ran);
* ``hessian``: of numpy code (``numpy_loss``: the default uses the vector pass) and of a
  chained Rosenbrock loop over numbers (the default keeps the per-column products there;
  "vector pass forced" is ``HESSIAN_BATCHED = "always"``); before =
  ``zyg.api.HESSIAN_BATCHED = False`` (one Hessian-vector product per column inside the
  generated code).

Run ``python -m benchmarks.vector_forward`` (``--quick``: n = 50 only); prints one line
per case with the ratio before / after and writes ``benchmarks/results/vector_forward.md``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def stencil(x, c):
    n = x.shape[0]
    y = np.empty(n)
    for i in range(n):
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i < n - 1 else 0.0
        y[i] = c * (left - 2.0 * x[i] + right) + np.sin(x[i]) * x[i]
    return y


def elementwise(x, c):
    z = np.exp(-c * x) * x + x * x
    return np.tanh(z) + z * c


def chained(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i] * x[i]
        if d > 0.0:
            s += 100.0 * d * d + (1.0 - x[i]) ** 2
        else:
            s += 50.0 * d * d + (1.0 - x[i]) ** 2 + 0.1 * x[i] ** 4
    return s


def numpy_loss(x):
    return np.sum(np.exp(x) * x) + np.sum(x[1:] * x[:-1]) + np.sum(np.tanh(0.3 * x) ** 2)


def per_column_jacobian(f, x, c):
    """What jacobian(mode="fwd") ran before: one scalar-tangent jvp per column."""
    import zyg
    n = x.shape[0]
    J = np.empty((n, n))
    e = np.zeros(n)
    for k in range(n):
        e[k] = 1.0
        J[:, k] = zyg.jvp(f, (x, c), (e, None))[1]
        e[k] = 0.0
    return J


def best(fn, repeat: int) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main(argv=None) -> int:
    import zyg
    import zyg.api as api
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    sizes = (50,) if a.quick else (50, 100, 200)
    repeat = 3 if a.quick else 7
    lines = ["| case | n | before (per column) | after (vector) | before / after |",
             "|---|---|---|---|---|"]
    for n in sizes:
        x = np.linspace(0.1, 1.0, n)
        for f in (stencil, elementwise):
            jac = zyg.jacobian(f, mode="fwd")
            J0, J1 = per_column_jacobian(f, x, 0.3), jac(x, 0.3)
            assert np.allclose(J0, J1, rtol=1e-12, atol=1e-12)
            t0 = best(lambda: per_column_jacobian(f, x, 0.3), repeat)
            t1 = best(lambda: jac(x, 0.3), repeat)
            lines.append(f"| jac fwd {f.__name__} | {n} | {t0 * 1e3:.3f} ms | {t1 * 1e3:.3f} ms | "
                         f"{t0 / t1:.1f}x |")
            print(lines[-1], flush=True)
        for f, modes in ((numpy_loss, (False, True)), (chained, (False, True, "always"))):
            ts = []
            for batched in modes:
                api.HESSIAN_BATCHED = batched
                h = zyg.hessian(f)
                ts.append(best(lambda: h(x), repeat))
            api.HESSIAN_BATCHED = True
            for t, m in zip(ts[1:], modes[1:]):
                what = "default" if m is True else "vector pass forced"
                lines.append(f"| hessian {f.__name__} ({what}) | {n} | {ts[0] * 1e3:.3f} ms | "
                             f"{t * 1e3:.3f} ms | {ts[0] / t:.2f}x |")
                print(lines[-1], flush=True)
    if not a.quick:
        out = os.path.join(os.path.dirname(__file__), "results", "vector_forward.md")
        with open(out, "w") as fh:
            fh.write("# Vector forward mode (issue 27)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
