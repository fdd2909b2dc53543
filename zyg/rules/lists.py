"""The primitive ``out.append(v)`` of local lists: its run-time helpers and its rule.

The front end (``zyg/ssa/lists.py``) lowers a local list to an array buffer and a length;
an append is this primitive, which the front end gets through ``zyg.ssa.hooks.PRIMS``.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..numerics import on_disk

from ..errors import UnsupportedSyntax
from ..ssa import hooks
from ..ssa.analysis import array_dtype, array_kind, array_ndim, is_array
from ..ssa.ir import Var, Undef
from ..ssa.prims import Prim
from . import arrays as arules


# -- the primitive ----------------------------------------------------------------------
@on_disk
def list_push(buf, n, v, cap):
    """``buf`` with ``v`` stored at row ``n``: in place while there is room, else in a new
    buffer of ``max(cap, 2 * room)`` rows (the old rows copied)."""
    room = buf.shape[0]
    if n >= room:
        size = max(cap, 2 * room, n + 1)
        new = np.zeros((size,) + np.shape(v), buf.dtype)
        for k in range(n):
            new[k] = buf[k]
        buf = new
    buf[n] = v
    return buf


@on_disk
def list_push_first(n, v, cap, like):
    """The first push into an empty list: a new buffer of ``cap`` rows shaped like ``v``
    and of the dtype of ``like`` (a zero of the element kind)."""
    size = max(cap, n + 1)
    buf = np.zeros((size,) + np.shape(v), np.asarray(like).dtype)
    buf[n] = v
    return buf


def list_back_buf(dy, n, old):
    """The old buffer's cotangent: ``dy`` without row ``n``, cut to the old room.  An empty
    old buffer (the first push) takes nothing: its cotangent keeps ``dy``'s shape, the
    shape of the loop parameter's shadow it may be added into, and is dropped with the
    undefined value on the edge that entered the loop."""
    m = old if old > 0 else dy.shape[0]
    out = dy[:m].copy()
    if n < m:
        out[n] = 0
    return out


def list_back_elem(dy, n):
    """The pushed element's cotangent: row ``n`` of ``dy`` (a copy for arrays)."""
    return dy[n].copy()


class ListPush(Prim):
    """``out.append(v)``: operands ``buf, n, v, cap, old`` (``old`` = the buffer's room before
    the push, for the pullback); the result is the buffer after the push.  ``buf`` is
    undefined for the first push into a new list."""

    name = "list.append"
    accepts_undef = True      # the buffer of an empty list: the result kind comes from v

    def __init__(self, unbounded: bool = False, list_name: str = "out", exits: bool = False):
        self.unbounded = unbounded      # inside a while loop: no length known in advance
        self.list_name = list_name
        self.exits = exits              # inside a loop that a break or return leaves

    def _key(self):
        return (self.unbounded, self.list_name, self.exits)

    def __call__(self, buf, n, v, cap, old):
        if buf is None or np.shape(buf)[0] == 0:
            return list_push_first(n, v, cap, np.zeros(1, np.result_type(v)))
        return list_push(buf, n, v, cap)

    def result_kind_of(self, kinds) -> Optional[str]:
        v = kinds[2]
        if v == "undef":
            return "undef"
        if is_array(v):
            return array_kind(array_dtype(v), array_ndim(v) + 1)
        dt = {"float": np.float64, "complex": np.complex128, "int": np.int64, "bool": np.bool_}.get(v)
        return array_kind(dt, 1) if dt is not None else "object"

    def primal_src(self, em, st, args: List[str]) -> str:
        buf = st.expr.args[0]
        k = em.kind(st.var)
        kb = em.kind(buf) if isinstance(buf, Var) else k
        if k == "object" or not is_array(k) or kb != k:
            loc = st.loc
            raise UnsupportedSyntax(
                "the elements appended to this list are not numbers or arrays of one kind",
                loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                "keep the elements of a list all floats, all ints or all arrays of one shape")
        if isinstance(buf, Undef) or not isinstance(buf, Var):
            first = em.ns.ref(list_push_first, "_zyg_list_push_first")
            zero = {"f": "0.0", "c": "0j", "i": "0", "u": "0", "b": "False"}[k[0]]
            if k[0] == "f" and array_dtype(k) != "float64":
                zero = f"np.{array_dtype(k)}(0)"
            return f"{first}({args[1]}, {args[2]}, {args[3]}, {zero})"
        push = em.ns.ref(list_push, "_zyg_list_push")
        return f"{push}({args[0]}, {args[1]}, {args[2]}, {args[3]})"

    def tangent_src(self, em, st, args: List[str]) -> str:
        """Forward mode: the push is linear in the buffer and the element, so the tangent
        list is the same push of their tangents into the tangent buffer."""
        buf, v = st.expr.args[0], st.expr.args[2]
        targs = list(args)
        if isinstance(buf, Var):
            targs[0] = em.tz(buf)
        targs[2] = em.tz(v)
        return self.primal_src(em, st, targs)

    def array_rule(self, em, st, active_ops: List[int]):
        if self.unbounded:
            # the buffer would grow between iterations, and a differentiated array keeps
            # one shape per line in a loop (docs/arrays.md)
            loc = st.loc
            n = self.list_name
            raise UnsupportedSyntax(
                f"the list {n!r} is appended to in a 'while' loop and differentiated; zyg needs "
                "a bound on its length before the loop",
                loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                f"loop over range(max_iter) with a 'break' instead of 'while', or preallocate an "
                f"array: {n} = np.zeros(max_iter); {n}[k] = v")
        back_buf = em.ns.ref(list_back_buf, "_zyg_list_back_buf")
        back_elem = em.ns.ref(list_back_elem, "_zyg_list_back_elem")

        def back(c, i):
            if i == 0:
                return f"{back_buf}({c.dy}, {c.x[1]}, {c.x[4]})"
            if i == 2:
                return f"{back_elem}({c.dy}, {c.x[1]})" if c.nd(2) > 0 else f"{c.dy}[{c.x[1]}]"
            return None
        return arules.ARule(back)


hooks.PRIMS["list.append"] = ListPush
