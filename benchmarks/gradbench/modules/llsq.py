"""GradBench ``llsq``: ``1/2 sum_i (sign(t_i) - sum_j x_j t_i^j)^2`` with
``t_i = -1 + 2 i / (n - 1)``, and its gradient w.r.t. ``x``."""
import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


def llsq(x, n):
    m = x.shape[0]
    total = 0.0
    for i in range(n):
        ti = -1.0 + i * 2.0 / (n - 1)
        if ti > 0.0:
            r = 1.0
        elif ti < 0.0:
            r = -1.0
        else:
            r = 0.0
        mul = 1.0
        for j in range(m):
            r -= x[j] * mul
            mul *= ti
        total += r * r
    return total / 2.0


def make(target):
    m = Module(target)
    f = primal(llsq, target)
    g = zyg.grad(llsq, target=target)
    pre = lambda raw: (np.asarray(raw["x"], dtype=np.float64), int(raw["n"]))
    m.functions["primal"] = (pre, f, float)
    m.functions["gradient"] = (pre, g, lambda r: r.tolist())
    x = np.linspace(0.0, 1.0, 4)
    m.warm_up = lambda: (f(x, 5), g(x, 5))
    return m
