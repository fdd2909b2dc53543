"""Functions for tests/test_tasks_pickle.py that live in an importable module: their
gradients pickle by reference (the module and the qualified name)."""
import math

import numpy as np

SCALE = 1.5


def poly(x):
    r = 0.0
    for k in range(1, 5):
        r = r * x + k * SCALE
    return r + math.sin(x)


def poly_grad(x):
    return (3 * x * x + 2 * 2 * x + 3) * SCALE + math.cos(x)


def loss(w, X, y):
    r = 0.0
    for i in range(X.shape[0]):
        e = np.dot(X[i], w) - y[i]
        r += e * e
    return r


def two(x, y):
    return x * x * y + math.exp(y)


def call_twice(g, xs):
    """Runs in a worker process: ``g`` arrives pickled."""
    return [g(x) for x in xs]
