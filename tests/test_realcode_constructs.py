"""Constructs of real numba code (issue 24), on both targets, against finite differences.

``numba.prange`` loops, ``while``/``for ... else``, closures reading ``nonlocal``
variables, locals set to ``None`` before a number or an array, loops over tuples of
pairs, enum members' ``.value``, string messages of ``raise``, number types held in
locals (``T = float``), ``for idx in np.ndindex(shape)``, helpers returning lists, and
branches the argument kinds decide (``x.ndim == 2``).  The refusals name the construct
at the user's line.
"""
from __future__ import annotations

import enum
import inspect
import math

import numba
import numpy as np
import pytest
from numba import njit, prange

import zyg
from conftest import TARGETS
from zyg.errors import UnsupportedSyntax

_G: dict = {}


def grad_of(f, target):
    g = _G.get((f, target))
    if g is None:
        g = _G[(f, target)] = zyg.grad(f, target=target)
    return g


def fd(f, x, h=1e-6):
    """Central differences of a scalar function of a float or an array."""
    if isinstance(x, float):
        s = h * max(1.0, abs(x))
        return (f(x + s) - f(x - s)) / (2 * s)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        s = h * max(1.0, abs(x[i]))
        up, dn = x.copy(), x.copy()
        up[i] += s
        dn[i] -= s
        g[i] = (f(up) - f(dn)) / (2 * s)
    return g


def check(f, x, target, rtol=1e-6):
    py = getattr(f, "py_func", f)
    want = fd(py, x.copy() if isinstance(x, np.ndarray) else x)
    got = grad_of(f, target)(x.copy() if isinstance(x, np.ndarray) else x)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(want)))))


def line_of(f, text):
    src, first = inspect.getsourcelines(f)
    return first + next(k for k, s in enumerate(src) if text in s)


X = np.array([0.3, 0.5, 0.9, 1.4])


# -- 1. numba.prange --------------------------------------------------------------------

@njit(parallel=True)
def prange_energy(x):
    s = 0.0
    for i in prange(x.shape[0]):
        t = 0.0
        for j in numba.prange(x.shape[0]):
            if j != i:
                t += math.sin(x[i] * x[j])
        s += t * x[i]
    return s


def test_prange(target):
    check(prange_energy, X, target)


# -- 2. while ... else, for ... else --------------------------------------------------

def loop_else(x):
    s = 0.0
    i = 0
    while i < x.shape[0]:
        s += x[i] * x[i]
        i += 1
    else:
        s *= 2.0                    # runs: no break
    for k in range(x.shape[0]):
        if x[k] > 1.0:
            s += x[k] ** 3
            break
    else:
        s += 100.0 * x[0]           # skipped: the loop breaks
    j = 0
    while True:
        if j >= 2:
            break
        s += math.exp(x[j])
        j += 1
    else:
        s -= 1000.0                 # never runs
    for v in x[:2]:
        s += v
    else:
        s += math.sin(s)            # runs
    return s


def test_loop_else(target):
    check(loop_else, X, target)
    check(loop_else, np.array([0.2, 0.3]), target)     # the for loop ends without break


# -- 3. nonlocal read by a nested function ----------------------------------------------

def nonlocal_read(x):
    scale = 1.5
    count = 0

    def term(v):
        nonlocal scale, count
        return scale * v * v + count
    s = 0.0
    for i in range(x.shape[0]):
        s += term(x[i])
    return s


def nonlocal_write(x):
    total = 0.0

    def add(v):
        nonlocal total
        total += v
    add(x)
    return total


def test_nonlocal(target):
    check(nonlocal_read, X, target)
    with pytest.raises(UnsupportedSyntax) as e:
        grad_of(nonlocal_write, target)(0.5)
    assert "nonlocal variable 'total' is assigned" in str(e.value)
    assert e.value.lineno == line_of(nonlocal_write, "nonlocal total")


# -- 4. None, then a number or an array; None defaults ---------------------------------

def closest(x):
    best = None
    for i in range(x.shape[0]):
        v = (x[i] - 1.0) ** 2
        if best is None or v < best:
            best = v
    acc = None
    for i in range(x.shape[0] - 1):
        w = x[i:i + 2] * x[i]
        if acc is None:
            acc = w
        else:
            acc = acc + w
    if acc is not None:
        best = best + acc.sum()
    return best


def _smallest(x, best=None):
    for i in range(x.shape[0]):
        if best is None or x[i] < best:
            best = x[i]
    return best


def smallest_pair(x):
    c = None
    d = c
    if d is None:
        d = 1.5
    return _smallest(x) * _smallest(x, 0.4) * d


def scaled(x, scale=None, shift: float | None = None):
    if scale is None:
        scale = 2.0
    if shift is not None:
        scale = scale + shift
    return (x * scale).sum() ** 2


def test_none_locals_and_defaults(target):
    check(closest, X, target)
    check(smallest_pair, np.array([0.9, 0.5, 0.3, 0.7]), target)
    check(scaled, X, target)
    g = zyg.grad(scaled, argnums=(0, 1, 2), target=target)
    gx, gs, gh = g(X, 0.5, 0.25)
    np.testing.assert_allclose(gx, fd(lambda x: scaled(x, 0.5, 0.25), X), rtol=1e-6)
    np.testing.assert_allclose(gs, fd(lambda s: scaled(X, s, 0.25), 0.5), rtol=1e-6)
    np.testing.assert_allclose(gh, fd(lambda h: scaled(X, 0.5, h), 0.25), rtol=1e-6)


# -- 5. loops over tuples of pairs ------------------------------------------------------

EDGES = ((0, 1), (1, 2), (2, 3), (3, 0))


def pairs(x):
    s = 0.0
    for i, j in ((0, 1), (1, 2), (2, 0)):
        s += x[i] * x[j]
    for i, j in [(0, 3), (3, 1)]:
        if i == 3:
            continue
        s += math.cos(x[i] - x[j])
    for a, b in EDGES:
        s += (x[a] - x[b]) ** 2
    for w in (x[0], 2.0 * x[1]):
        s += w * w
    return s


def test_tuple_of_pairs(target):
    check(pairs, X, target)


# -- 6. enum members --------------------------------------------------------------------

class Mode(enum.IntEnum):
    SQUARE = 2
    CUBE = 3


class Weight(enum.Enum):
    HEAVY = 2.5


def enum_values(x):
    p = Mode.CUBE.value
    s = 0.0
    for i in range(x.shape[0]):
        s += Weight.HEAVY.value * x[i] ** p
    if Mode.SQUARE == 2:
        s += x[0]
    return s


def test_enum_value(target):
    check(enum_values, X, target)


# -- 7. strings in error paths -------------------------------------------------------

def fixed_point(x, maxit=50):
    msg = "Failed to converge"
    if x < -10.0:
        raise ValueError("x is too small")
    y = x
    it = 0
    while abs(y - math.cos(y)) > 1e-12:
        y = y - (y - math.cos(y)) / (1.0 + math.sin(y))
        it += 1
        if it > maxit:
            raise RuntimeError(msg)
    return y * x


def string_as_value(x):
    name = "x"
    return x * len(name)


def test_string_messages(target):
    check(fixed_point, 0.7, target)
    with pytest.raises(ValueError, match="x is too small"):
        grad_of(fixed_point, target)(-11.0)
    with pytest.raises(RuntimeError, match="Failed to converge"):
        grad_of(fixed_point, target)(0.7, 1)
    with pytest.raises(UnsupportedSyntax) as e:
        grad_of(string_as_value, target)(0.5)
    assert "the string 'name' is used as a value" in str(e.value)
    assert e.value.lineno == line_of(string_as_value, "len(name)")


# -- 8. number types held in locals ---------------------------------------------------

def local_types(x):
    T = float
    dtype = np.float64
    z = np.zeros(x.shape[0], dtype)
    for i in range(x.shape[0]):
        z[i] = T(0.5) * x[i] ** 2
    return z.sum() * T(3)


def test_local_types(target):
    check(local_types, X, target)


# -- 9. np.ndindex with an index tuple ---------------------------------------------------

def ndindex_tuple(a):
    s = 0.0
    for idx in np.ndindex(a.shape):
        s += a[idx] * a[idx] * (idx[0] + 1)
    b = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        b[idx] = math.sin(a[idx])
    return s + b.sum()


def test_ndindex_tuple(target):
    check(ndindex_tuple, X.reshape(2, 2), target)
    check(ndindex_tuple, np.arange(1.0, 9.0).reshape(2, 2, 2) / 7, target)


# -- 10. helpers returning lists --------------------------------------------------------

def _doubled(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2.0)
    return out


def _stages(x):
    return [x * 2.0, x + 1.0, np.sin(x)]


def _squares(x):
    return [v * v for v in x]


def list_helpers(x):
    s = 0.0
    for v in _doubled(x):
        s += v * v
    st = _stages(x)
    s += (st[0] * st[1]).sum() + st[2][1]
    sq = _squares(x)
    return s + sq[len(sq) - 1] + sum(sq)


def test_helper_returns_list(target):
    check(list_helpers, X, target)


# -- 11. branches the argument kinds decide ----------------------------------------------

def by_ndim(x, w):
    if x.ndim == 2:
        n = x.shape[1]
    else:
        n = 1
    if len(x.shape) > 1 and x.shape[1] > 1:
        s = (x[:, 1] ** 2).sum()
    else:
        s = 0.0
    if isinstance(w, float) and isinstance(x, np.ndarray):
        s += w * x.sum()
    else:
        s += (w[0] * x).sum()
    if x.dtype == np.float32:
        s += x.shape[5]
    return s * n + (x ** 3).sum()


def test_branches_decided_by_kinds(target):
    w = 0.7
    for x in (X, X.reshape(2, 2)):
        got = grad_of(by_ndim, target)(x, w)
        np.testing.assert_allclose(got, fd(lambda v: by_ndim(v, w), x), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_unsupported_loop_else_on_checkpointed_range(target):
    def f(x):
        for t in zyg.checkpointed_range(3):
            x = x * 2.0
        else:
            x = x + 1.0
        return x
    with pytest.raises(UnsupportedSyntax, match="'for ... else' over a checkpointed range"):
        zyg.grad(f, target=target)(0.5)
