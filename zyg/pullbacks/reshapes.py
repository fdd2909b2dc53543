"""``a.reshape(s)``, ``np.reshape``, ``a.ravel()`` / ``np.ravel``: a view or a copy, as numpy decides.

numpy returns a view of ``a`` when its memory layout allows (always for a C-contiguous
array; ``ravel`` only then) and a copy otherwise (``A.T.reshape(-1)``). numba reshapes
without copying only and refuses the rest ("incompatible shape for array"). Which of the
two numpy does is decided at run time by the strides, which zyg's kinds do not carry.
It matters only where something writes into the array or into the array it was taken
from (its alias class is mutated, :class:`zyg.ssa.analysis.Aliases`):

* **nothing writes** (the common case, a flat parameter vector reshaped into weight
  matrices): a view and a copy hold the same values. The value is computed by
  :func:`reshape_any` (a view of a C-contiguous array, else a C-ordered copy, which numba
  can make). The shadow (reverse mode) of the result is the same reshape of its base's
  shadow only where that shadow is provably C-contiguous (:func:`shadow_contiguous`);
  elsewhere the result owns a shadow buffer, added into the base's shadow by the reverse
  of the reshape (``Emitter`` "viewbuf"). A tangent (forward mode) is computed like the
  value.
* **something writes**: zyg's alias analysis takes the result as a view. That is numpy's
  answer for a C-contiguous operand, checked at run time by :func:`reshape_view`, which
  raises otherwise (numpy may copy there, or not). Shadows and tangents of such a view go
  through the same check. For an operand whose layout on a compiled target may differ
  from numpy's (``np.sin(A.T)`` is F-ordered in numpy, C-ordered in numba) the run-time
  check would not answer numpy's question: zyg raises ``UnsupportedSyntax`` at the line
  (:func:`value_layouts`).
"""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import UnsupportedSyntax
from ..ssa import hooks
from ..ssa.analysis import array_ndim, is_array
from ..ssa.emit import var_name
from ..ssa.ir import Const, Stmt, Var
from ..ssa.prims import ArrayOf, Attr, GetItem, InPlace, Stacked

RESHAPES = (np.reshape, np.ravel)


def reshape_any(a, shape):
    """The values of ``np.reshape(a, shape)`` for an array nothing writes into: a view when
    ``a`` is C-contiguous, else a C-ordered copy (numba reshapes only without copying)."""
    # (numba types no reshape of an array of unknown layout; ascontiguousarray of a
    # contiguous array is that array, on both targets)
    return np.reshape(np.ascontiguousarray(a), shape)


def reshape_view(a, shape):
    """``np.reshape(a, shape)`` where the result must be a view of ``a`` (something writes into
    one of them): numpy's answer when ``a`` is C-contiguous; otherwise numpy may copy, and the
    writes would not reach the other array, so zyg raises."""
    if not a.flags.c_contiguous:
        raise ValueError("zyg: reshape or ravel of an array that is not C-contiguous, in code that "
                         "writes into the result or into the array it was taken from: numpy returns "
                         "a copy or a view there depending on the memory layout, and zyg follows "
                         "only views; copy first (a.copy().reshape(...)) if the writes need not "
                         "reach the other array, or reshape a contiguous array")
    return np.reshape(np.ascontiguousarray(a), shape)


def is_c(a) -> bool:
    """Is ``a`` C-contiguous (the checks before a reshape taken as a view)?"""
    return a.flags.c_contiguous


# the lowerer reads these back as np.reshape (generated code transformed again)
reshape_any._zyg_reshape = True
reshape_view._zyg_reshape = True
hooks.generated_nondifferentiable(is_c)


def is_reshape(fn: Any) -> bool:
    return fn is np.reshape or fn is np.ravel


def shape_src(st: Stmt, ops: list) -> str:
    """The shape argument of a reshape statement (``-1`` for ravel)."""
    return ops[0] if st.expr.fn is np.reshape else "-1"


def _c_preserving(spec, ops) -> bool:
    """Is ``a[spec]`` of a C-contiguous array C-contiguous? Leading integers, then at most one
    slice with unit step, then full slices (``a[i]``, ``a[2:]``, ``a[i, 1:3]``, ``a[...]``)."""
    if tuple(spec) == ("e",):
        return True
    k = 0
    sliced = False
    for s in spec:
        if s == "i":
            if sliced:
                return False
            k += 1
        elif s == "s":
            lo, hi, step = ops[k:k + 3]
            k += 3
            full = all(isinstance(q, Const) and q.value is None for q in (lo, hi, step))
            unit = isinstance(step, Const) and step.value in (None, 1)
            if sliced and not full:
                return False
            if not unit:
                return False
            sliced = True
        else:
            return False
    return True


def view_keeps_c(st: Stmt, kinds: Dict[int, str]) -> bool:
    """Is the view made by ``st`` of a C-contiguous array C-contiguous?"""
    fn = st.expr.fn
    base = st.expr.args[0]
    if isinstance(fn, InPlace) or is_reshape(fn):
        return True
    if isinstance(fn, GetItem):
        return _c_preserving(fn.spec, st.expr.args[1:])
    if (isinstance(fn, Attr) and fn.attr == "T") or fn is np.transpose:
        return isinstance(base, Var) and array_ndim(kinds.get(base.id, "f8[2]")) <= 1
    return False


# layouts (value_layouts): "U" (unknown: numpy and numba may lay it out differently), or
# (check, params): when the parameters ``params`` are C-contiguous at run time, the value
# is laid out as numpy lays it out, and it is C-contiguous as well unless ``check`` (then
# its own layout must be checked: a.T of a C-contiguous a)
_ALLOC = {np.zeros, np.ones, np.empty, np.full, np.arange, np.linspace, np.eye, np.identity,
          np.ascontiguousarray}
_LIKE = {np.copy, np.zeros_like, np.ones_like, np.empty_like, np.full_like}
_ARITH = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.neg,
          operator.pos, operator.floordiv, operator.mod, abs}
C = (False, frozenset())


def _meet(a, b):
    if a is None:
        return b
    if a == "U" or b == "U":
        return "U"
    return (a[0] or b[0], a[1] | b[1])


def value_layouts(fn, kinds: Dict[int, str], al) -> Dict[int, Any]:
    """The layout class of every array value of ``fn`` (see above)."""
    arr = lambda v: isinstance(v, Var) and is_array(kinds.get(v.id, ""))
    lay: Dict[int, Any] = {}
    for p in fn.params:
        if arr(p):
            lay[p.id] = (False, frozenset([p.id]))
    changed = True
    while changed:
        changed = False

        def put(v, new):
            nonlocal changed
            old = lay.get(v.id)
            new = _meet(old, new)
            if new != old:
                lay[v.id] = new
                changed = True

        for blk in fn.iter_blocks():
            for st in blk.stmts:
                v = st.var
                if v is None or not arr(v):
                    continue
                e = st.expr
                f = e.fn
                ins = [lay.get(a.id, C) if arr(a) else C for a in e.args]
                if v.id in al.view_of:
                    b = ins[0]
                    if b == "U":
                        put(v, "U")
                    elif is_reshape(f):
                        # a view when mutated (checked); reshape_any copies a non-contiguous one
                        put(v, (False, b[1]) if al.is_mutated(v.id) or not b[0] else "U")
                    elif view_keeps_c(st, kinds):
                        put(v, b)
                    else:
                        put(v, (True, b[1]))
                elif isinstance(f, (ArrayOf, Stacked)) or f in _ALLOC:
                    put(v, C)
                elif f in _LIKE or f in _ARITH or isinstance(f, np.ufunc):
                    # numpy keeps its operands' layout (order K), numba makes C arrays: the
                    # same when the operands are C-contiguous
                    if any(x == "U" or x[0] for x in ins):
                        put(v, "U")
                    else:
                        put(v, (False, frozenset().union(*[x[1] for x in ins])))
                else:
                    put(v, "U")
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if arr(p) and isinstance(a, Var):
                        # (an undefined value on a path that never reads it is no layout)
                        put(p, lay.get(a.id, C) if arr(a) else "U")
    return lay


class Reshapes:
    """How the emitters spell the reshapes of one plan (see the module docstring)."""

    def __init__(self, p, ns):
        self.p = p
        self.al = p.aliases
        self.ns = ns
        self._lay: Optional[Dict[int, Any]] = None

    def mutated(self, st: Stmt) -> bool:
        return st.var is not None and self.al.is_mutated(st.var.id)

    def layout(self, v):
        if self._lay is None:
            self._lay = value_layouts(self.p.fn, self.p.kinds, self.al)
        return self._lay.get(v.id, "U") if isinstance(v, Var) else "U"

    def checks(self, st: Stmt, base: str) -> List[str]:
        """The arrays to check C-contiguous before the reshape ``st`` of ``base`` is taken as a
        view (where something writes through it); raises where no check would do."""
        if not self.mutated(st):
            return []
        lay = self.layout(st.expr.args[0])
        if lay == "U":
            loc = st.loc
            raise UnsupportedSyntax(
                "reshape or ravel of an array that is written into (or whose result is), where "
                "zyg cannot follow numpy's choice between a view and a copy: the array's memory "
                "layout comes from an operation that numba and numpy may lay out differently",
                loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                hint="reshape a C-contiguous array (np.ascontiguousarray(a)), or reshape a copy "
                     "(a.copy().reshape(...)) if the writes need not reach the other array")
        names = {p.id: var_name(p) for p in self.p.fn.params}
        out = [names[i] for i in sorted(lay[1])]
        if lay[0]:
            out.append(base)
        return out

    def param_checks(self) -> Dict[int, Stmt]:
        """The parameters that a reshape taken as a view needs C-contiguous (id -> the first
        such reshape): forward mode checks them before it copies its arguments."""
        out: Dict[int, Stmt] = {}
        for blk in self.p.fn.iter_blocks():
            for st in blk.stmts:
                if is_reshape(st.expr.fn) and self.mutated(st) and isinstance(st.expr.args[0], Var) \
                        and st.var.id in self.al.view_of:
                    lay = self.layout(st.expr.args[0])
                    if lay != "U":
                        for i in lay[1]:
                            out.setdefault(i, st)
        return out

    def check_code(self, st: Stmt, base: str, ind: int, code, names: Optional[List[str]] = None) -> None:
        """The checks of :meth:`checks` (or of the arrays ``names``) as statements, raising at
        the user's line."""
        from ..ssa.emit import If
        names = self.checks(st, base) if names is None else names
        if not names:
            return
        loc = st.loc
        exc = self.ns.ref(UnsupportedSyntax)
        msg = ("reshape or ravel of an array that is not C-contiguous (or made from an argument "
               "that is not), in code that writes into the result or into the array it was taken "
               "from: numpy returns a copy or a view there depending on the memory layout, and "
               "zyg follows only views")
        hint = ("pass C-contiguous arrays (np.ascontiguousarray), or reshape a copy "
                "(a.copy().reshape(...)) if the writes need not reach the other array")
        isc = self.ns.ref(is_c)
        cond = " or ".join(f"not {isc}({n})" for n in names)
        code.put(ind, If(cond))
        code.add(ind + 1, f"raise {exc}({msg!r}, {loc.filename if loc else None!r}, "
                          f"{int(loc.lineno) if loc else 0}, {int(loc.col or 0) if loc else 0}, {hint!r})")

    def value(self, st: Stmt, base: str, shape: str) -> str:
        """The value of the reshape ``st`` of ``base`` (a view where something writes through
        it: the primal checked it with :meth:`check_code` first, at the user's line)."""
        if not self.mutated(st):
            return f"{self.ns.ref(reshape_any)}({base}, {shape})"
        return f"{self.ns.ref(reshape_view)}({base}, {shape})"

    def derived(self, st: Stmt, base: str, shape: str, contiguous: bool = False) -> str:
        """The same reshape of ``base``'s shadow or tangent: a checked view where writes must
        reach through it, else the values (``contiguous``: the shadow is C-contiguous)."""
        if contiguous or self.mutated(st):
            return f"{self.ns.ref(reshape_view)}({base}, {shape})"
        return f"{self.ns.ref(reshape_any)}({base}, {shape})"
