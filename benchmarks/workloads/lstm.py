"""Workload 9, LSTM: the ADBench LSTM objective (diagonal weights), 2 layers, loops.

ADBench's (and GradBench's ``lstm`` eval's) LSTM: every weight "matrix" is diagonal,
so a layer is elementwise over the ``b`` channels. Arguments, as GradBench passes them:

* ``main_params`` (2 l x 4 b): for layer ``i``, row ``2 i`` holds the weights and row
  ``2 i + 1`` the biases of the forget, input, output and change gates (``b`` each);
* ``extra_params`` (3 x b): input weights, output weights, output biases;
* ``state`` (2 l x b): initial hidden (row ``2 i``) and cell (row ``2 i + 1``) state;
* ``sequence`` (c x b): the input sequence (one-hot characters here).

For each step ``t < c - 1`` the input ``sequence[t] * extra_params[0]`` runs through
the layers (forget and output gates read the layer's input, input and change gates
the layer's previous hidden state), the prediction is ``h * extra_params[1] +
extra_params[2]``, normalised by ADBench's ``log(sum(exp(y)) + 2)``, and scored
against ``sequence[t + 1]``; the objective is ``-total / (b (c - 1))``. Gradient
w.r.t. ``main_params`` and ``extra_params`` -- ``argnums=(0, 1)`` -- as GradBench
asks. Sizes as ADBench's ``lstm_l2_c1024``: l = 2, c = 1024, b = 14.

``lstm`` is written with loops over time, layers and channels, updating the hidden
and cell state arrays in place -- a sequential recurrence whose overwritten values
the reverse pass needs (it stresses the tape). The input ``state`` is copied first
and never written. JAX uses ``lax.scan`` over time (layers unrolled, vectorised over
channels); PyTorch and autograd run the time loop in Python with vectorised layers.
"""

from __future__ import annotations

import math
from typing import Optional

import numba
import numpy as np

from benchmarks.peers import import_autograd, import_jax, import_torch
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload


def lstm(main_params, extra_params, state, sequence):
    """ADBench LSTM objective, explicit loops with in-place state updates."""
    c, b = sequence.shape
    nl = state.shape[0] // 2
    hid = np.empty((nl, b))
    cel = np.empty((nl, b))
    for i in range(nl):
        for j in range(b):
            hid[i, j] = state[2 * i, j]
            cel[i, j] = state[2 * i + 1, j]
    x = np.empty(b)
    total = 0.0
    for t in range(c - 1):
        for j in range(b):
            x[j] = sequence[t, j] * extra_params[0, j]
        for i in range(nl):
            for j in range(b):
                forget = 1.0 / (1.0 + math.exp(-(x[j] * main_params[2 * i, j]
                                                 + main_params[2 * i + 1, j])))
                ingate = 1.0 / (1.0 + math.exp(-(hid[i, j] * main_params[2 * i, b + j]
                                                 + main_params[2 * i + 1, b + j])))
                outgate = 1.0 / (1.0 + math.exp(-(x[j] * main_params[2 * i, 2 * b + j]
                                                  + main_params[2 * i + 1, 2 * b + j])))
                change = math.tanh(hid[i, j] * main_params[2 * i, 3 * b + j]
                                   + main_params[2 * i + 1, 3 * b + j])
                cel[i, j] = cel[i, j] * forget + ingate * change
                hid[i, j] = outgate * math.tanh(cel[i, j])
                x[j] = hid[i, j]
        ysum = 0.0
        for j in range(b):
            x[j] = x[j] * extra_params[1, j] + extra_params[2, j]
            ysum += math.exp(x[j])
        lse = math.log(ysum + 2.0)
        for j in range(b):
            total += sequence[t + 1, j] * (x[j] - lse)
    return -total / (b * (c - 1))


@numba.njit
def lstm_value_and_grad(main_params, extra_params, state, sequence):
    """Hand-written adjoint of :func:`lstm`.

    Stores, per step, layer and channel, the new hidden and cell states and the
    four gate values (6 floats; 170k floats at c = 1024, l = 2, b = 14); the
    layers' inputs and previous states are read back from the stored states.
    """
    c, b = sequence.shape
    nl = state.shape[0] // 2
    steps = c - 1
    H = np.empty((steps, nl, b))
    C = np.empty((steps, nl, b))
    Fg = np.empty((steps, nl, b))
    Ig = np.empty((steps, nl, b))
    Og = np.empty((steps, nl, b))
    Gg = np.empty((steps, nl, b))
    x = np.empty(b)
    total = 0.0
    for t in range(steps):
        for j in range(b):
            x[j] = sequence[t, j] * extra_params[0, j]
        for i in range(nl):
            for j in range(b):
                if t == 0:
                    h_old = state[2 * i, j]
                    c_old = state[2 * i + 1, j]
                else:
                    h_old = H[t - 1, i, j]
                    c_old = C[t - 1, i, j]
                f = 1.0 / (1.0 + math.exp(-(x[j] * main_params[2 * i, j]
                                            + main_params[2 * i + 1, j])))
                ig = 1.0 / (1.0 + math.exp(-(h_old * main_params[2 * i, b + j]
                                             + main_params[2 * i + 1, b + j])))
                o = 1.0 / (1.0 + math.exp(-(x[j] * main_params[2 * i, 2 * b + j]
                                            + main_params[2 * i + 1, 2 * b + j])))
                g = math.tanh(h_old * main_params[2 * i, 3 * b + j]
                              + main_params[2 * i + 1, 3 * b + j])
                cn = c_old * f + ig * g
                hn = o * math.tanh(cn)
                Fg[t, i, j] = f
                Ig[t, i, j] = ig
                Og[t, i, j] = o
                Gg[t, i, j] = g
                C[t, i, j] = cn
                H[t, i, j] = hn
                x[j] = hn
        ysum = 0.0
        for j in range(b):
            x[j] = x[j] * extra_params[1, j] + extra_params[2, j]
            ysum += math.exp(x[j])
        lse = math.log(ysum + 2.0)
        for j in range(b):
            total += sequence[t + 1, j] * (x[j] - lse)
    value = -total / (b * (c - 1))

    mp_bar = np.zeros(main_params.shape)
    ep_bar = np.zeros(extra_params.shape)
    total_bar = -1.0 / (b * (c - 1))
    hb = np.zeros((nl, b))  # adjoint of the hidden state carried to the previous step
    cb = np.zeros((nl, b))  # adjoint of the cell state carried to the previous step
    xb = np.empty(b)
    for t in range(steps - 1, -1, -1):
        ysum = 0.0
        ssum = 0.0
        for j in range(b):
            ysum += math.exp(H[t, nl - 1, j] * extra_params[1, j] + extra_params[2, j])
            ssum += sequence[t + 1, j]
        lse_bar = -total_bar * ssum
        for j in range(b):
            htop = H[t, nl - 1, j]
            y = htop * extra_params[1, j] + extra_params[2, j]
            y_bar = total_bar * sequence[t + 1, j] + lse_bar * math.exp(y) / (ysum + 2.0)
            ep_bar[1, j] += y_bar * htop
            ep_bar[2, j] += y_bar
            xb[j] = y_bar * extra_params[1, j]
        for i in range(nl - 1, -1, -1):
            for j in range(b):
                if t == 0:
                    h_old = state[2 * i, j]
                    c_old = state[2 * i + 1, j]
                else:
                    h_old = H[t - 1, i, j]
                    c_old = C[t - 1, i, j]
                if i == 0:
                    x_in = sequence[t, j] * extra_params[0, j]
                else:
                    x_in = H[t, i - 1, j]
                f = Fg[t, i, j]
                ig = Ig[t, i, j]
                o = Og[t, i, j]
                g = Gg[t, i, j]
                tc = math.tanh(C[t, i, j])
                dh = hb[i, j] + xb[j]
                dc = cb[i, j] + dh * o * (1.0 - tc * tc)
                zf = dc * c_old * f * (1.0 - f)
                zi = dc * g * ig * (1.0 - ig)
                zo = dh * tc * o * (1.0 - o)
                zg = dc * ig * (1.0 - g * g)
                mp_bar[2 * i, j] += zf * x_in
                mp_bar[2 * i + 1, j] += zf
                mp_bar[2 * i, b + j] += zi * h_old
                mp_bar[2 * i + 1, b + j] += zi
                mp_bar[2 * i, 2 * b + j] += zo * x_in
                mp_bar[2 * i + 1, 2 * b + j] += zo
                mp_bar[2 * i, 3 * b + j] += zg * h_old
                mp_bar[2 * i + 1, 3 * b + j] += zg
                xb[j] = zf * main_params[2 * i, j] + zo * main_params[2 * i, 2 * b + j]
                hb[i, j] = zi * main_params[2 * i, b + j] + zg * main_params[2 * i, 3 * b + j]
                cb[i, j] = dc * f
        for j in range(b):
            ep_bar[0, j] += xb[j] * sequence[t, j]
    return value, (mp_bar, ep_bar)


def make_args(layers: int, chars: int, bits: int, seed: int = 9) -> Args:
    """Deterministic parameters (uniform in [-1, 1]) and a one-hot random sequence."""
    rng = np.random.default_rng(seed)
    main_params = rng.uniform(-1.0, 1.0, size=(2 * layers, 4 * bits))
    extra_params = rng.uniform(-1.0, 1.0, size=(3, bits))
    state = rng.uniform(-1.0, 1.0, size=(2 * layers, bits))
    sequence = np.zeros((chars, bits))
    sequence[np.arange(chars), rng.integers(bits, size=chars)] = 1.0
    return (main_params, extra_params, state, sequence)


def _reduce(args: Args, cap: int) -> Optional[tuple[Args, float]]:
    main_params, extra_params, state, sequence = args
    steps = sequence.shape[0] - 1
    if steps <= cap:
        return None
    return (main_params, extra_params, state, sequence[: cap + 1].copy()), steps / cap


def _layer(xp, sigmoid, w, bias, b, h, cs, x):
    """One diagonal LSTM layer, vectorised over the channels."""
    forget = sigmoid(x * w[:b] + bias[:b])
    ingate = sigmoid(h * w[b:2 * b] + bias[b:2 * b])
    outgate = sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
    change = xp.tanh(h * w[3 * b:] + bias[3 * b:])
    cs = cs * forget + ingate * change
    return outgate * xp.tanh(cs), cs


def _jax(args: Args) -> ValueAndGrad:
    jax = import_jax()
    jnp = jax.numpy

    def f(main_params, extra_params, state, sequence):
        c, b = sequence.shape
        nl = state.shape[0] // 2

        def step(carry, xs):
            hs, cs, total = carry
            inp, target = xs
            x = inp * extra_params[0]
            new_h, new_c = [], []
            for i in range(nl):
                h, cc = _layer(jnp, jax.nn.sigmoid, main_params[2 * i], main_params[2 * i + 1],
                               b, hs[i], cs[i], x)
                new_h.append(h)
                new_c.append(cc)
                x = h
            y = x * extra_params[1] + extra_params[2]
            ynorm = y - jnp.log(jnp.sum(jnp.exp(y)) + 2.0)
            return (jnp.stack(new_h), jnp.stack(new_c), total + jnp.dot(target, ynorm)), None

        carry = (state[0::2], state[1::2], jnp.zeros((), sequence.dtype))
        (_, _, total), _ = jax.lax.scan(step, carry, (sequence[:-1], sequence[1:]))
        return -total / (b * (c - 1))

    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    def call(main_params, extra_params, state, sequence):
        return jax.block_until_ready(vg(main_params, extra_params, state, sequence))

    return call


def _torch(args: Args) -> ValueAndGrad:
    torch = import_torch()

    def call(main_params, extra_params, state, sequence):
        mp = torch.from_numpy(main_params).requires_grad_(True)
        ep = torch.from_numpy(extra_params).requires_grad_(True)
        st, seq = torch.from_numpy(state), torch.from_numpy(sequence)
        c, b = sequence.shape
        nl = state.shape[0] // 2
        hs = [st[2 * i] for i in range(nl)]
        cs = [st[2 * i + 1] for i in range(nl)]
        total = torch.zeros((), dtype=torch.float64)
        for t in range(c - 1):
            x = seq[t] * ep[0]
            for i in range(nl):
                hs[i], cs[i] = _layer(torch, torch.sigmoid, mp[2 * i], mp[2 * i + 1], b,
                                      hs[i], cs[i], x)
                x = hs[i]
            y = x * ep[1] + ep[2]
            total = total + torch.dot(seq[t + 1], y - torch.log(torch.sum(torch.exp(y)) + 2.0))
        loss = -total / (b * (c - 1))
        loss.backward()
        return loss.detach(), (mp.grad, ep.grad)

    return call


def _autograd(args: Args) -> ValueAndGrad:
    autograd, anp = import_autograd()

    def sigmoid(z):
        return 1.0 / (1.0 + anp.exp(-z))

    def f(main_params, extra_params, state, sequence):
        c, b = sequence.shape
        nl = state.shape[0] // 2
        hs = [state[2 * i] for i in range(nl)]
        cs = [state[2 * i + 1] for i in range(nl)]
        total = 0.0
        for t in range(c - 1):
            x = sequence[t] * extra_params[0]
            for i in range(nl):
                hs[i], cs[i] = _layer(anp, sigmoid, main_params[2 * i], main_params[2 * i + 1],
                                      b, hs[i], cs[i], x)
                x = hs[i]
            y = x * extra_params[1] + extra_params[2]
            total = total + anp.dot(sequence[t + 1], y - anp.log(anp.sum(anp.exp(y)) + 2.0))
        return -total / (b * (c - 1))

    return autograd.value_and_grad(f, argnum=(0, 1))


WORKLOAD = Workload(
    number=9,
    name="lstm",
    title="ADBench LSTM objective, diagonal weights, l=2 c=1024 b=14, loops",
    fn=lstm,
    hand=lstm_value_and_grad,
    cases=(Case("l=2,c=1024,b=14", make_args(2, 1024, 14), make_args(2, 8, 4)),),
    fd_step=lambda args: 3e-4,
    peers={
        "jax": PeerImpl(_jax, "lax.scan over time, layers unrolled, vectorised over channels"),
        "torch": PeerImpl(_torch, "Python loop over time, vectorised layers", python_loop=True),
        "autograd": PeerImpl(_autograd, "Python loop over time, vectorised layers",
                             python_loop=True),
    },
    reduce_trip_count=_reduce,
    argnums=(0, 1),
)
