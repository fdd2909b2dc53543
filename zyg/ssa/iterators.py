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
        # one name: np.ndindex(n) gives 1-tuples; the index tuple itself is not supported
        raise low.unsupported(tgt, "the index tuple of np.ndindex must be unpacked",
                              "name each index: for i, j in np.ndindex(a.shape)")
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
