"""GradBench ``saddle`` (Pearlmutter and Siskind): the saddle point of
``f(p1, p2) = |p1|^2 - |p2|^2`` as ``argmin_p1 max_p2 f``, both by GradBench's
gradient descent (``gd.hpp``'s rules) from ``start``; the outer descent
differentiates through the inner one (nested AD: the inner maximisation's gradient
w.r.t. p2 is itself taken by AD inside the function the outer gradient is taken of).
Output ``[p1x, p1y, p2x, p2y]``. The first letter of a variant is the outer mode,
the second the inner one: ``zyg.grad`` for r, ``zyg.jvp`` for f."""
import math

import zyg

from benchmarks.gradbench.common import Module
from benchmarks.gradbench.modules.particle import argmin


def objective(x1, y1, x2, y2):
    return (x1 * x1 + y1 * y1) - (x2 * x2 + y2 * y2)


def maximise(p1x, p1y, sx, sy, d2, d3):
    """max over p2 of objective(p1, p2), by gradient descent on its negation from s; ``d2``
    and ``d3`` give the objective's derivatives w.r.t. p2 (a function argument: zyg
    inlines it)."""
    x = sx
    y = sy
    fx = -objective(p1x, p1y, x, y)
    gx = -d2(p1x, p1y, x, y)
    gy = -d3(p1x, p1y, x, y)
    i = 0
    eta = 1e-5
    while math.sqrt(gx * gx + gy * gy) > 1e-5:
        if i == 10:
            eta *= 2.0
            i = 0
        else:
            xp = x - eta * gx
            yp = y - eta * gy
            if math.sqrt((x - xp) * (x - xp) + (y - yp) * (y - yp)) <= 1e-5:
                break
            fxp = -objective(p1x, p1y, xp, yp)
            if fxp < fx:
                x = xp
                y = yp
                fx = fxp
                gx = -d2(p1x, p1y, x, y)
                gy = -d3(p1x, p1y, x, y)
                i += 1
            else:
                eta /= 2.0
                i = 0
    return objective(p1x, p1y, x, y)


def d2_r(x1, y1, x2, y2):
    return zyg.grad(objective, argnums=2)(x1, y1, x2, y2)


def d3_r(x1, y1, x2, y2):
    return zyg.grad(objective, argnums=3)(x1, y1, x2, y2)


def d2_f(x1, y1, x2, y2):
    return zyg.jvp(objective, (x1, y1, x2, y2), (0.0, 0.0, 1.0, 0.0))[1]


def d3_f(x1, y1, x2, y2):
    return zyg.jvp(objective, (x1, y1, x2, y2), (0.0, 0.0, 0.0, 1.0))[1]


def max_r(p1x, p1y, sx, sy):
    """The inner gradient by reverse mode (zyg.grad)."""
    return maximise(p1x, p1y, sx, sy, d2_r, d3_r)


def max_f(p1x, p1y, sx, sy):
    """The inner gradient by forward mode (zyg.jvp along each coordinate)."""
    return maximise(p1x, p1y, sx, sy, d2_f, d3_f)


def make(target):
    """The four variants: the outer gradient (w.r.t. p1) by zyg.grad (r) or zyg.jvp (f),
    of the inner maximisation whose gradient is by zyg.grad (r) or zyg.jvp (f)."""
    mod = Module(target)
    zg2 = zyg.grad(objective, argnums=2, target=target)
    zg3 = zyg.grad(objective, argnums=3, target=target)

    def solve(grad_p1, inner, sx, sy):
        r1 = argmin(lambda a, b: inner(a, b, sx, sy), grad_p1(sx, sy), [sx, sy])
        r2 = argmin(lambda a, b: -objective(r1[0], r1[1], a, b),
                    lambda a, b: (-zg2(r1[0], r1[1], a, b), -zg3(r1[0], r1[1], a, b)),
                    [sx, sy])
        return [r1[0], r1[1], r2[0], r2[1]]

    def variant(outer, inner):
        if outer == "r":
            g0 = zyg.grad(inner, argnums=0, target=target)
            g1 = zyg.grad(inner, argnums=1, target=target)
            d = lambda a, b, sx, sy: (g0(a, b, sx, sy), g1(a, b, sx, sy))
        else:
            jv = lambda a, b, sx, sy, da, db: zyg.jvp(inner, (a, b, sx, sy), (da, db, 0.0, 0.0),
                                                       target=target)[1]
            d = lambda a, b, sx, sy: (jv(a, b, sx, sy, 1.0, 0.0), jv(a, b, sx, sy, 0.0, 1.0))
        run = lambda sx, sy: solve(lambda sx, sy: lambda a, b: d(a, b, sx, sy), inner, sx, sy)
        return d, run

    pre = lambda raw: (float(raw["start"][0]), float(raw["start"][1]))
    warm = []
    for name, inner in (("rr", max_r), ("fr", max_r), ("rf", max_f), ("ff", max_f)):
        d, run = variant(name[0], inner)
        mod.functions[name] = (pre, run, list)
        warm.append(d)
    mod.warm_up = lambda: [d(1.0, 1.0, 1.0, 1.0) for d in warm]
    return mod
