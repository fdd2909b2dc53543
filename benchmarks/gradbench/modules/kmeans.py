"""GradBench ``kmeans``: ``cost`` = sum over points of the squared distance to the
closest centroid; ``dir`` = the Newton direction ``H^-1 g`` w.r.t. the centroids.
The Hessian is diagonal, so ``H^-1 g = g / (H 1)``: one gradient and one
Hessian-vector product (``zyg.hvp``) with the vector of ones."""
import math

import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


def cost(centroids, points):
    n, d = points.shape
    k = centroids.shape[0]
    total = 0.0
    for i in range(n):
        closest = math.inf
        for j in range(k):
            dist = 0.0
            for l in range(d):
                diff = points[i, l] - centroids[j, l]
                dist += diff * diff
            if dist < closest:
                closest = dist
        total += closest
    return total


def make(target):
    m = Module(target)
    f = primal(cost, target)
    g = zyg.grad(cost, target=target)

    def direction(centroids, points, ones):
        return g(centroids, points) / zyg.hvp(cost, centroids, ones, points, target=target)

    def pre(raw):
        c = np.asarray(raw["centroids"], dtype=np.float64)
        return c, np.asarray(raw["points"], dtype=np.float64), np.ones_like(c)

    m.functions["cost"] = (lambda raw: pre(raw)[:2], f, float)
    m.functions["dir"] = (pre, direction, lambda r: r.tolist())
    p = np.arange(12.0).reshape(6, 2) / 7.0
    m.warm_up = lambda: (f(p[-2:].copy(), p), direction(p[-2:].copy(), p, np.ones((2, 2))))
    return m
