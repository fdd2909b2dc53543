"""GradBench ``particle`` (Pearlmutter and Siskind's charged particle): a particle
starting at (0, 8) with velocity (0.75, 0) moves by naive Euler steps (dt = 0.1) in
the field of two unit charges at (10, 10 - w) and (10, 0); the acceleration is minus
the gradient of the potential ``1/|x - c0| + 1/|x - c1|``, which is itself taken by
AD inside the simulation. ``x0(t_f)^2`` (where the path crosses the x axis, by
linear interpolation) is minimised over ``w`` by GradBench's gradient descent
(``gd.hpp``'s rules). The four variants choose the mode of each derivative: the
first letter the outer one (the descent's gradient w.r.t. w), the second the inner
one (the acceleration): ``zyg.grad`` for r, ``zyg.jvp`` for f."""
import math

import zyg

from benchmarks.gradbench.common import Module


def potential(x0, x1, w):
    return (1.0 / math.sqrt((x0 - 10.0) ** 2 + (x1 - (10.0 - w)) ** 2)
            + 1.0 / math.sqrt((x0 - 10.0) ** 2 + x1 ** 2))


def accel_r(x0, x1, w):
    return zyg.grad(potential, argnums=0)(x0, x1, w), zyg.grad(potential, argnums=1)(x0, x1, w)


def accel_f(x0, x1, w):
    gx = zyg.jvp(potential, (x0, x1, w), (1.0, 0.0, 0.0))[1]
    gy = zyg.jvp(potential, (x0, x1, w), (0.0, 1.0, 0.0))[1]
    return gx, gy


def euler_r(w):
    x0, x1 = 0.0, 8.0
    v0, v1 = 0.75, 0.0
    dt = 0.1
    while True:
        a0, a1 = accel_r(x0, x1, w)
        x0 = x0 + dt * v0
        x1 = x1 + dt * v1
        if x1 <= 0.0:
            dtf = -x1 / v1
            xf = x0 + dtf * v0
            return xf * xf
        v0 = v0 - dt * a0
        v1 = v1 - dt * a1


def euler_f(w):
    x0, x1 = 0.0, 8.0
    v0, v1 = 0.75, 0.0
    dt = 0.1
    while True:
        a0, a1 = accel_f(x0, x1, w)
        x0 = x0 + dt * v0
        x1 = x1 + dt * v1
        if x1 <= 0.0:
            dtf = -x1 / v1
            xf = x0 + dtf * v0
            return xf * xf
        v0 = v0 - dt * a0
        v1 = v1 - dt * a1


def argmin(f, grad, x):
    """GradBench's gradient descent (gd.hpp's multivariate_argmin), for a list ``x``."""
    fx = f(*x)
    gx = grad(*x)
    i = 0
    eta = 1e-5
    while True:
        if math.sqrt(sum(g * g for g in gx)) <= 1e-5:
            return x
        if i == 10:
            eta *= 2
            i = 0
            continue
        xp = [a - eta * g for a, g in zip(x, gx)]
        if math.sqrt(sum((a - b) ** 2 for a, b in zip(x, xp))) <= 1e-5:
            return x
        fxp = f(*xp)
        if fxp < fx:
            x, fx = xp, fxp
            gx = grad(*x)
            i += 1
        else:
            eta /= 2
            i = 0


def descent(outer, euler, target):
    """GradBench's descent of ``euler`` with its derivative by ``outer``: ``zyg.grad`` (r)
    or ``zyg.jvp`` (f)."""
    if outer == "r":
        d = zyg.grad(euler, target=target)
        return d, lambda w: argmin(euler, lambda w: (d(w),), [w])[0]
    d = lambda w: zyg.jvp(euler, (w,), (1.0,), target=target)[1]
    return d, lambda w: argmin(euler, lambda w: (d(w),), [w])[0]


def make(target):
    """The four variants: the outer derivative by zyg.grad (r) or zyg.jvp (f) of a
    simulation whose acceleration comes from zyg.grad (r) or zyg.jvp (f) inside it."""
    mod = Module(target)
    pre = lambda raw: (float(raw["w"]),)
    warm = []
    for name, euler in (("rr", euler_r), ("fr", euler_r), ("rf", euler_f), ("ff", euler_f)):
        d, run = descent(name[0], euler, target)
        mod.functions[name] = (pre, run, float)
        warm.append(d)
    mod.warm_up = lambda: [d(0.0) for d in warm]
    return mod
