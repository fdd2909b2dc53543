"""GradBench ``hello``: ``square(x) = x * x`` and ``double(x)``, its derivative."""
import zyg

from benchmarks.gradbench.common import Module, primal


def square(x):
    return x * x


def make(target):
    m = Module(target)
    sq = primal(square, target)
    d = zyg.grad(square, target=target)
    m.functions["square"] = (lambda raw: (float(raw),), sq, float)
    m.functions["double"] = (lambda raw: (float(raw),), d, float)
    m.warm_up = lambda: (sq(1.0), d(1.0))
    return m
