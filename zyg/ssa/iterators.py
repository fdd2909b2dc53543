"""Lowering of the loop iterators that are not ``range``/arrays/``enumerate``/``zip``:
``for i, j in np.ndindex(shape)``.

``np.ndindex`` becomes one counted loop over the flat position ``k`` in
``range(n0 * n1 * ...)``, the indices recovered in C order (``j = k % n1``,
``i = k // n1``), so ``break``, ``continue`` and the loop's reverse pass are those of
any counted loop.
"""
from __future__ import annotations

import operator

import gast

from . import hooks
from .ir import Const
from .prims import GetItem


def lower_ndindex(low, st, it) -> None:
    """``for i, j in np.ndindex(shape)`` or ``np.ndindex(n, m)``."""
    if it.keywords or not it.args:
        raise low.unsupported(it, "np.ndindex() takes the shape: np.ndindex(a.shape) or np.ndindex(n, m)")
    tgt = st.target
    names = tgt.elts if isinstance(tgt, (gast.Tuple, gast.List)) else [tgt]
    if not all(isinstance(t, gast.Name) for t in names):
        raise low.unsupported(tgt, "the loop variables of np.ndindex must be plain names")
    if len(it.args) > 1:
        dims = [low.expr(a) for a in it.args]
        if len(dims) != len(names):
            raise low.unsupported(tgt, f"unpack np.ndindex into {len(dims)} names: "
                                       f"for {', '.join('ijkl'[:len(dims)])} in np.ndindex(...)")
    elif not isinstance(tgt, (gast.Tuple, gast.List)):
        # for idx in np.ndindex(a.shape): the index tuple, as long as the shape
        shape = low.expr(it.args[0])
        total = low.emit(ndindex_size, [shape], it)
        low.counted_loop(st, it, Const(0), total, Const(1),
                         lambda k, body: low.write(tgt.id, body, low.emit(ndindex_at, [k, shape], tgt, tgt.id)))
        return
    else:
        shape = low.expr(it.args[0])
        dims = [low.emit(GetItem(("i",)), [shape, Const(d)], it) for d in range(len(names))]
    total = dims[0]
    for d in dims[1:]:
        total = low.emit(operator.mul, [total, d], it)

    def bind(k, body):
        rest = k
        for d in range(len(names) - 1, 0, -1):
            low.write(names[d].id, body, low.emit(operator.mod, [rest, dims[d]], it, names[d].id))
            rest = low.emit(operator.floordiv, [rest, dims[d]], it)
        low.write(names[0].id, body, rest)
    low.counted_loop(st, it, Const(0), total, Const(1), bind)


def ndindex_size(shape):
    """The number of indices of ``np.ndindex(shape)``."""
    n = 1
    for s in shape:
        n *= s
    return n


def _tuple_set(t, i, v):
    return t[:i] + (v,) + t[i + 1:]


def ndindex_at(k, shape):
    """The ``k``-th index of ``np.ndindex(shape)`` (C order), a tuple as long as ``shape``."""
    idx = shape
    for d in range(len(shape) - 1, -1, -1):
        idx = _tuple_set(idx, d, k % shape[d])
        k = k // shape[d]
    return idx


def _numba_tuple_set():
    # numba cannot slice a tuple at a run-time position; it can replace one element
    from numba.core.extending import overload
    from numba.cpython.unsafe.tuple import tuple_setitem

    @overload(_tuple_set)
    def _impl(t, i, v):
        return lambda t, i, v: tuple_setitem(t, i, v)


_numba_tuple_set()
hooks.generated_nondifferentiable(ndindex_size)
hooks.generated_nondifferentiable(ndindex_at)
