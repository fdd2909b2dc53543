"""What the tape records for arrays written in place (DESIGN 3.5: only what the adjoint
needs).

A write ``a[i] = v`` is recorded (the old value pushed, to rewind it in the backward
pass) only when something reads ``a``'s contents in the adjoint, or ``a`` shares memory
with an argument (the caller's arrays are left unchanged).  Finding ``a``'s shadow, or
rewinding the write itself, reads no contents.  The ODE's stage arrays are the case
that matters: ``k[i] = x[i] * y[i - 1]`` then ``y[i] += h * k[i]`` -- the adjoint of the
update needs only ``h``, so ``k``'s writes need no record (benchmarks: ODE gradient 6.3x
-> 4.8x its numba primal).
"""
from __future__ import annotations

import io
import re

import numpy as np
import pytest

import zyg
from test_structured import fd_array

TARGETS = ("python", "cpu")


def stages(x, s):
    """Two stage arrays k, yt written every step and read only linearly."""
    n = x.shape[0]
    y = np.zeros(n)
    k = np.empty(n)
    yt = np.empty(n)
    for t in range(s):
        k[0] = x[0]
        for i in range(1, n):
            k[i] = x[i] * y[i - 1]
        for i in range(n):
            yt[i] = y[i] + 0.1 * k[i]
        for i in range(n):
            y[i] += 0.05 * (k[i] + yt[i])
    return y[n - 1] + np.sum(y * y)


def stage_read(x, s):
    """As ``stages``, but the update is a product (``k[i] * yt[i]``), whose pullback needs
    both factors: read again from memory (then the writes are recorded and rewound) or
    pushed as values, whichever the emitter picks -- the gradient must be right."""
    n = x.shape[0]
    y = np.zeros(n)
    k = np.empty(n)
    yt = np.empty(n)
    for t in range(s):
        k[0] = x[0]
        for i in range(1, n):
            k[i] = x[i] * y[i - 1]
        for i in range(n):
            yt[i] = y[i] + 0.1 * k[i]
        for i in range(n):
            y[i] += 0.05 * k[i] * yt[i]
    return y[n - 1] + np.sum(y * y)


def into_argument(x, k, s):
    """``k`` is the caller's array: its writes are recorded, so the caller gets it back."""
    n = x.shape[0]
    y = np.zeros(n)
    for t in range(s):
        for i in range(n):
            k[i] = x[i] * 0.5 + y[i]
        for i in range(n):
            y[i] += 0.1 * k[i]
    return np.sum(y * y)


X = np.array([0.7, 0.2, 0.9, 0.4, 0.6])


def recorded_writes(f, *args) -> set:
    """Names of the arrays whose writes the recording primal pushes (from ``zyg.show``)."""
    out = io.StringIO()
    zyg.show(f, *args, file=out)
    text = out.getvalue().split("=== fused value-and-gradient")[0]
    olds = set(re.findall(r"_fs\[[^\]]*\] = (_o\d+)", text))
    names = set()
    for line in text.splitlines():
        m = re.match(r"\s*(_o\d+) = (\w+)\[", line)
        if m and m.group(1) in olds and not m.group(2).startswith("_"):   # not the pop
            names.add(m.group(2).rsplit("_", 1)[0])
    return names


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [stages, stage_read])
def test_stage_arrays_gradients(f, target):
    g = zyg.grad(f, target=target)(X.copy(), 6)
    np.testing.assert_allclose(g, fd_array(f, (X.copy(), 6), 0), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("target", TARGETS)
def test_argument_written_is_given_back(target):
    k = np.full(5, 3.0)
    g = zyg.grad(into_argument, target=target)(X.copy(), k, 4)
    assert np.array_equal(k, np.full(5, 3.0))
    np.testing.assert_allclose(g, fd_array(into_argument, (X.copy(), k.copy(), 4), 0),
                               rtol=1e-6, atol=1e-9)


def test_only_arrays_whose_contents_the_adjoint_reads_are_recorded():
    # y is read (y[i - 1] in a product, y * y): recorded; k and yt only linearly: not
    assert recorded_writes(stages, X.copy(), 6) == {"y"}
    # the caller's array
    assert "k" in recorded_writes(into_argument, X.copy(), np.ones(5), 4)
