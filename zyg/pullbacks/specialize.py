"""Specialisation of a function's SSA for its kinds (before activity and emission).

The front end's SSA does not know the kinds of its values; once they are known, an
in-place operation on a number is the plain operation, and on an array its result is the
array itself.  Both the reverse transform and the checkpoint expansion (``ckmut.py``)
specialise first.
"""
from __future__ import annotations

import copy
from typing import Any, Dict

from ..rules.scalar import imag_part, real_part
from ..ssa.analysis import is_array
from ..ssa.ir import Branch, Call, Function, Jump, Return, Stmt, Var
from ..ssa.passes import _substitute, remove_trivial_params, verify
from ..ssa.prims import Attr, InPlace


def specialize(fn: Function, kinds: Dict[int, str]) -> Function:
    """A copy of ``fn`` for these kinds: ``x op= y`` on numbers is the plain operation;
    on arrays its result *is* ``x`` (same memory), so uses of the result are replaced by
    ``x`` - which makes a loop parameter carrying ``c`` through ``c += ...`` trivial."""
    out = copy.copy(fn)
    out.blocks = {}
    alias: Dict[int, Any] = {}
    for b, blk in fn.blocks.items():
        nb = copy.copy(blk)
        nb.params = list(blk.params)
        nb.stmts = []
        for st in blk.stmts:
            e = st.expr
            fnc = e.fn
            if isinstance(fnc, InPlace):
                if isinstance(e.args[0], Var) and is_array(kinds.get(e.args[0].id, "")):
                    alias[st.var.id] = e.args[0]
                else:
                    fnc = fnc.op
            elif isinstance(fnc, Attr) and fnc.attr in ("real", "imag") and e.args and \
                    kinds.get(getattr(e.args[0], "id", None), "") in ("float", "complex", "int", "bool"):
                # z.real of a number: a call with a scalar rule (docs/complex.md)
                fnc = real_part if fnc.attr == "real" else imag_part
            nb.stmts.append(Stmt(st.var, Call(fnc, list(e.args), dict(e.kwargs)), st.loc))
        t = blk.term
        if isinstance(t, Jump):
            t = Jump(t.target, list(t.args))
        elif isinstance(t, Branch):
            t = Branch(t.cond, t.true, list(t.true_args), t.false, list(t.false_args))
        elif isinstance(t, Return):
            t = Return(t.value)
        nb.term = t
        out.blocks[b] = nb
    out.order = list(fn.order)
    if alias:
        _substitute(out, alias)
        # the in-place statements keep their own operand
        remove_trivial_params(out)
        verify(out, "specialize")
    return out
