"""A corpus of functions written the way public numba projects write them, differentiated unchanged.

Each field module (``stats``, ``hydrology``, ...) lists ``CASES``: a function as a numba user
writes it (``@numba.njit`` loops, numpy calls, in-place updates, early returns, helpers) and a
generator of realistic inputs.  Every case is differentiated with ``zyg.grad`` on both targets
and compared with central finite differences of every input element (step 1e-6 relative to the
element), and the caller's arguments must be unchanged afterwards.

A case that waits for a zyg feature carries ``needs=...`` and is marked
``xfail(strict=True)``: it is reported, never skipped, and an unexpected pass fails the run so
that the mark is removed when the feature lands.  ``python -m pytest tests/realworld -rxX``
lists them with their reasons; the per-field counts are in the module's ``summary`` below.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

import zyg

from . import (astronomy, epidemiology, finance, geophysics, hydrology, ml, physics,
               signal_proc, stats, timeseries)
from ._case import Case

TARGETS = ("python", "cpu")
MODULES = (stats, hydrology, finance, timeseries, geophysics, astronomy, signal_proc, physics,
           epidemiology, ml)
FD_STEP = 1e-6
RTOL = 1e-6

ALL: List[Tuple[str, Case]] = [(m.FIELD, c) for m in MODULES for c in m.CASES]


def primal_of(fn: Callable) -> Callable:
    """The plain Python function behind an ``@numba.njit`` dispatcher (no numba compile)."""
    return getattr(fn, "py_func", fn)


_GRADS: Dict[Tuple[Any, str], Callable] = {}


def grad_of(case: Case, target: str) -> Callable:
    key = (case.fn, target)
    if key not in _GRADS:
        _GRADS[key] = zyg.grad(case.fn, argnums=case.argnums, target=target)
    return _GRADS[key]


def _leaves(x: Any, path=()):
    """(path, value) of every float leaf of an argument: a float, a float array, a dict of them."""
    if isinstance(x, dict):
        for k in x:
            yield from _leaves(x[k], path + (k,))
    else:
        yield path, x


def _get(x: Any, path):
    for k in path:
        x = x[k]
    return x


def _set(x: Any, path, v):
    if not path:
        return v
    x = dict(x)
    x[path[0]] = _set(x[path[0]], path[1:], v)
    return x


def fd_leaf(f: Callable, args: Tuple[Any, ...], i: int, path) -> Any:
    """Central differences of ``f`` w.r.t. one leaf of argument ``i`` (each element of an array)."""
    leaf = _get(args[i], path)

    def at(v):
        a = [copy.deepcopy(x) for x in args]
        a[i] = _set(a[i], path, v)
        return float(f(*a))

    if isinstance(leaf, np.ndarray):
        out = np.zeros(leaf.shape)
        for idx in np.ndindex(*leaf.shape):
            x = float(leaf[idx])
            h = FD_STEP * max(1.0, abs(x))
            up = leaf.copy()
            dn = leaf.copy()
            up[idx] = x + h
            dn[idx] = x - h
            out[idx] = (at(up) - at(dn)) / (2.0 * h)
        return out
    x = float(leaf)
    h = FD_STEP * max(1.0, abs(x))
    return (at(x + h) - at(x - h)) / (2.0 * h)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    return a == b


def _param(field: str, case: Case, target: str):
    marks = []
    reason = case.needs_on(target)
    if reason is not None:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(case, target, marks=marks,
                        id=f"{field.replace(' ', '_').replace('/', '_')}-{case.name}-{target}")


@pytest.mark.parametrize("case,target", [_param(f, c, t) for f, c in ALL for t in TARGETS])
def test_realworld(case: Case, target: str) -> None:
    args = case.make_args()
    saved = copy.deepcopy(args)
    f = primal_of(case.fn)
    y = float(f(*copy.deepcopy(args)))
    assert math.isfinite(y), f"{case.name}: the test point gives {y}"
    got = grad_of(case, target)(*args)
    assert all(_same(a, b) for a, b in zip(args, saved)), f"{case.name}: arguments changed"
    nums = [case.argnums] if isinstance(case.argnums, int) else list(case.argnums)
    got_t = (got,) if isinstance(case.argnums, int) else got
    assert isinstance(got_t, tuple) and len(got_t) == len(nums), f"{case.name}: got {got!r}"
    atol = RTOL * max(1.0, abs(y))
    for i, g in zip(nums, got_t):
        for path, leaf in _leaves(args[i]):
            gl = _get(g, path)
            e = fd_leaf(f, args, i, path)
            where = f"[{target}] {case.name}: d/d(arg {i}{''.join(f'[{k!r}]' for k in path)})"
            if isinstance(leaf, np.ndarray):
                assert isinstance(gl, np.ndarray) and gl.shape == leaf.shape, \
                    f"{where}: gradient {gl!r} is not an array of shape {leaf.shape}"
            err = np.abs(np.asarray(gl, dtype=float) - e)
            tol = atol + RTOL * np.maximum(np.abs(np.asarray(gl, dtype=float)), np.abs(e))
            assert np.all(err <= tol), f"{where}\nzyg={gl!r}\nfd ={e!r}"


def test_corpus_size() -> None:
    """Acceptance 2 of issue 13: at least 30 functions from at least 8 fields."""
    assert len(ALL) >= 30
    assert len({f for f, _ in ALL}) >= 8
