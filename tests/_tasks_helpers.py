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


def logistic_nll(w, X, y):
    """Negative log-likelihood of a logistic regression over the rows of X (a numba user's
    loop): the loss of a data set is the sum of its chunks' losses."""
    r = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * w[j]
        # log(1 + exp(z)) - y z, stable for both signs of z
        r += max(z, 0.0) + math.log1p(math.exp(-abs(z))) - y[i] * z
    return r
