"""GradBench ``lstm``: ADBench's LSTM (diagonal weights: each layer is elementwise
over the ``b`` channels) predicting each character of ``sequence`` from the previous
one; ``objective`` is the mean negative log-likelihood and ``jacobian`` its gradient
w.r.t. ``main_params`` and ``extra_params``, flattened and concatenated."""
import math

import numba
import numpy as np
import zyg

from benchmarks.gradbench.common import Module, primal


@numba.njit
def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def lstm(main_params, extra_params, state, sequence):
    nl = main_params.shape[0] // 2
    b = sequence.shape[1]
    c = sequence.shape[0]
    st = np.empty((2 * nl, b))
    for i in range(2 * nl):
        for j in range(b):
            st[i, j] = state[i, j]
    inp = np.empty(b)
    ypred = np.empty(b)
    total = 0.0
    count = 0
    for t in range(c - 1):
        for j in range(b):
            inp[j] = sequence[t, j] * extra_params[0, j]
        for li in range(nl):
            w = 2 * li
            for j in range(b):
                if li == 0:
                    xin = inp[j]
                else:
                    xin = st[2 * li - 2, j]
                hid = st[2 * li, j]
                forget = sigmoid(xin * main_params[w, j] + main_params[w + 1, j])
                ingate = sigmoid(hid * main_params[w, b + j] + main_params[w + 1, b + j])
                outgate = sigmoid(xin * main_params[w, 2 * b + j] + main_params[w + 1, 2 * b + j])
                change = math.tanh(hid * main_params[w, 3 * b + j] + main_params[w + 1, 3 * b + j])
                cell = st[2 * li + 1, j] * forget + ingate * change
                st[2 * li + 1, j] = cell
                st[2 * li, j] = outgate * math.tanh(cell)
        s = 0.0
        for j in range(b):
            ypred[j] = st[2 * nl - 2, j] * extra_params[1, j] + extra_params[2, j]
            s += math.exp(ypred[j])
        lse = math.log(s + 2.0)
        for j in range(b):
            total += sequence[t + 1, j] * (ypred[j] - lse)
        count += b
    return -total / count


def pre(raw):
    f = lambda key: np.asarray(raw[key], dtype=np.float64)
    return f("main_params"), f("extra_params"), f("state"), f("sequence")


def make(target):
    m = Module(target)
    f = primal(lstm, target)
    g = zyg.grad(lstm, argnums=(0, 1), target=target)
    post = lambda r: np.concatenate([r[0].ravel(), r[1].ravel()]).tolist()
    m.functions["objective"] = (pre, f, float)
    m.functions["jacobian"] = (pre, g, post)
    rng = np.random.default_rng(0)
    small = (rng.random((4, 8)), rng.random((3, 2)), rng.random((4, 2)),
             (rng.random((3, 2)) > 0.5).astype(np.float64))
    m.warm_up = lambda: (f(*small), g(*small))
    return m
