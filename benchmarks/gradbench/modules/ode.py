"""GradBench ``ode``: ``s`` steps of RK4 on ``y' = (x_0, x_1 y_0, ..., x_{n-1} y_{n-2})``
from ``y = 0`` to ``t = 2``; ``primal`` returns ``y``, ``gradient`` is
``d y_{n-1} / d x``."""
import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


def ode(x, s):
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
    return y


def ode_last(x, s):
    y = ode(x, s)
    return y[x.shape[0] - 1]


def make(target):
    m = Module(target)
    f = primal(ode, target)
    g = zyg.grad(ode_last, target=target)
    pre = lambda raw: (np.asarray(raw["x"], dtype=np.float64), int(raw["s"]))
    m.functions["primal"] = (pre, f, lambda r: r.tolist())
    m.functions["gradient"] = (pre, g, lambda r: r.tolist())
    x = np.linspace(0.1, 1.0, 4)
    m.warm_up = lambda: (f(x, 2), g(x, 2))
    return m
