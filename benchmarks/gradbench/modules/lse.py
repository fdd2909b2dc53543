"""GradBench ``lse``: ``log(sum(exp(x)))`` (shifted by the max) and its gradient."""
import math

import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


def logsumexp(x):
    n = x.shape[0]
    a = x[0]
    for i in range(1, n):
        if x[i] > a:
            a = x[i]
    s = 0.0
    for i in range(n):
        s += math.exp(x[i] - a)
    return math.log(s) + a


def make(target):
    m = Module(target)
    f = primal(logsumexp, target)
    g = zyg.grad(logsumexp, target=target)
    pre = lambda raw: (np.asarray(raw["x"], dtype=np.float64),)
    m.functions["primal"] = (pre, f, float)
    m.functions["gradient"] = (pre, g, lambda r: r.tolist())
    x = np.linspace(0.0, 1.0, 5)
    m.warm_up = lambda: (f(x), g(x))
    return m
