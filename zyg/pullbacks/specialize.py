"""Specialisation of a function's SSA for its kinds (before activity and emission).

The front end's SSA does not know the kinds of its values; once they are known, an
in-place operation on a number is the plain operation, and on an array its result is the
array itself; ``type(x)(v)`` is the cast of x's kind (``float(v)``, ``int(v)``...), and
``np.sum(x)`` (``np.mean``, ``np.max``...) of one number is ``x``.  Both the reverse transform and the checkpoint expansion
(``ckmut.py``) specialise first.
"""
from __future__ import annotations

import builtins
import copy
import operator
from typing import Any, Dict

import numpy as np

from ..errors import UnsupportedSyntax
from ..rules.scalar import imag_part, real_part
from ..ssa.analysis import array_dtype, is_array, kind_of_value
from ..ssa.ir import Branch, Call, Const, Function, Jump, Return, Stmt, Var
from ..ssa.passes import _substitute, remove_trivial_params, verify
from ..ssa.prims import Attr, CastLike, InPlace, MakeTuple


_BITWISE = {operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.invert: "~",
            operator.lshift: "<<", operator.rshift: ">>"}


def _check_bitwise(st: Stmt, fnc: Any, kinds: Dict[int, str]) -> None:
    """Bitwise operators take ints and bools (and int or bool arrays), as in numpy."""
    for a in st.expr.args:
        k = kinds.get(a.id, "") if isinstance(a, Var) else kind_of_value(getattr(a, "value", None))
        if k in ("float", "complex") or is_array(k) and k[0] in "fc":
            loc = st.loc
            raise UnsupportedSyntax(
                f"the bitwise operator {_BITWISE[fnc]} takes integers and booleans (and int or "
                f"bool arrays); here an operand is {_describe_number(k)}",
                loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                hint="bitwise operators are not differentiable: compare instead (x > 0), or "
                     "convert with int(...)")


def specialize(fn: Function, kinds: Dict[int, str], strong_scalars: bool = False) -> Function:
    """A copy of ``fn`` for these kinds: ``x op= y`` on numbers is the plain operation;
    on arrays its result *is* ``x`` (same memory), so uses of the result are replaced by
    ``x`` - which makes a loop parameter carrying ``c`` through ``c += ...`` trivial.

    ``strong_scalars``: the target promotes a number by its type (numba: a float32 array
    times a float is float64), where numpy 2 treats Python numbers as weak (float32).  The
    numbers meeting a float32 array in an elementwise operation whose result zyg's kinds
    say is float32 are then cast first (``np.float32(c)``), so the target computes what
    numpy computes (and the shadows, declared of the kinds' dtype, unify)."""
    out = copy.copy(fn)
    out.blocks = {}
    alias: Dict[int, Any] = {}
    counter = [max([p.id for b in fn.iter_blocks() for p in b.params] +
                   [st.var.id for b in fn.iter_blocks() for st in b.stmts if st.var is not None] + [0])]
    # constant tuples (the front end builds (0, 1) with a MakeTuple of constants)
    tuples = {st.var.id: tuple(a.value for a in st.expr.args) for b in fn.iter_blocks() for st in b.stmts
              if st.var is not None and isinstance(st.expr.fn, MakeTuple) and not st.expr.kwargs
              and all(isinstance(a, Const) for a in st.expr.args)}
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
            if fnc in _BITWISE:
                _check_bitwise(st, fnc, kinds)
            if fnc is operator.invert and len(e.args) == 1 and \
                    kinds.get(getattr(e.args[0], "id", None)) == "bool" or \
                    fnc is operator.invert and isinstance(e.args[0], Const) and \
                    isinstance(e.args[0].value, bool):
                fnc = operator.not_         # ~b of a bool is numpy's and numba's not b
            if _same_array(fnc, e, kinds):
                alias[st.var.id] = e.args[0]       # np.asarray(a) is a: one memory, one name
                continue
            args = list(e.args)
            if isinstance(fnc, CastLike):
                fnc, args = _cast(st, kinds)
            elif _is_number_reduction(fnc, e, kinds):
                # np.sum(x) of one number is x (real code reduces scalars too)
                fnc = operator.pos
            else:
                chain = _tuple_axis_chain(st, kinds, counter, tuples)
                if chain is not None:
                    nb.stmts += chain
                    continue
            if strong_scalars:
                args = _weak_scalars(st, fnc, args, kinds, counter, nb.stmts)
            nb.stmts.append(Stmt(st.var, Call(fnc, args, dict(e.kwargs)), st.loc))
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


# elementwise operations whose Python-number operands numpy 2 treats as weak
_ELEMENTWISE_OPS = (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
                    operator.mod, operator.pow, np.where, np.clip)
_NARROW = {"float32": np.float32}
NARROW_DTYPES = tuple(_NARROW)


def is_elementwise(fnc: Any) -> bool:
    """A ufunc or an elementwise operator (numpy 2 treats its Python numbers as weak)."""
    try:
        return isinstance(fnc, np.ufunc) or fnc in _ELEMENTWISE_OPS
    except TypeError:
        return False


def _weak_scalars(st: Stmt, fnc: Any, args: list, kinds: Dict[int, str], counter, out: list) -> list:
    """``args`` with each number operand of an elementwise ``fnc`` whose result is a
    float32 array cast to float32 by a statement appended to ``out`` (see specialize)."""
    if st.var is None:
        return args
    k = kinds.get(st.var.id, "")
    if not is_array(k) or array_dtype(k) not in _NARROW:
        return args
    if not is_elementwise(fnc):
        return args
    cast = _NARROW[array_dtype(k)]
    new = list(args)
    for i, a in enumerate(args):
        ka = kinds.get(a.id, "undef") if isinstance(a, Var) else kind_of_value(a.value)
        if ka not in ("float", "int") or (fnc is np.where and i == 0):
            continue
        counter[0] += 1
        v = Var(counter[0], f"{getattr(a, 'hint', '') or 'c'}_f32")
        out.append(Stmt(v, Call(cast, [a], {}), st.loc))
        new[i] = v
    return new


def _same_array(fnc: Any, e: Call, kinds: Dict[int, str]) -> bool:
    """``np.asarray(a)`` (or ``np.asarray(a, dtype=...)`` of a's own dtype) of an array
    returns ``a`` itself, so that a write through either name is seen through the other."""
    if fnc is not np.asarray or len(e.args) != 1 or not isinstance(e.args[0], Var):
        return False
    k = kinds.get(e.args[0].id, "")
    if not is_array(k) or set(e.kwargs) - {"dtype"}:
        return False
    if "dtype" in e.kwargs:
        d = e.kwargs["dtype"]
        try:
            return isinstance(d, Const) and np.dtype(d.value) == np.dtype(array_dtype(k))
        except TypeError:
            return False
    return True


# reductions that are the identity on one number (np.nansum is not: nansum(nan) is 0)
_NUMBER_IDENTITIES = (np.sum, np.prod, np.mean, np.max, np.min, np.amax, np.amin, np.median,
                      np.average)


def _is_number_reduction(fnc: Any, e: Call, kinds: Dict[int, str]) -> bool:
    """``np.sum(x)`` (and the other reductions above) of a float or complex number,
    without keywords: the identity."""
    if e.kwargs or len(e.args) != 1 or not isinstance(e.args[0], Var):
        return False
    try:
        if fnc not in _NUMBER_IDENTITIES:
            return False
    except TypeError:
        return False
    return kinds.get(e.args[0].id, "") in ("float", "complex")


_TUPLE_AXIS_FNS = (np.sum, np.mean, np.max, np.min, np.amax, np.amin, np.prod)


def _tuple_axis_chain(st: Stmt, kinds: Dict[int, str], counter, tuples: Dict[int, tuple]):
    """``np.sum(a, axis=(0, 2))`` as ``np.sum(np.sum(a, axis=2), axis=0)`` (the last axis
    first, so that the others keep their numbers; with ``keepdims=True`` every step keeps
    its axis); an axis tuple of all the axes is no axis.  Each step is then a reduction
    over one axis, with its own rule.  The statements, or None when ``st`` is not such a call."""
    e = st.expr
    try:
        if e.fn not in _TUPLE_AXIS_FNS:
            return None
    except TypeError:
        return None
    kw = dict(e.kwargs)
    args = list(e.args)
    if len(args) == 2 and "axis" not in kw:
        kw["axis"] = args.pop()
    ax = kw.get("axis")
    if isinstance(ax, Var) and ax.id in tuples:
        ax = Const(tuples[ax.id])
    if len(args) != 1 or not isinstance(ax, Const) or not isinstance(ax.value, tuple) or \
            not isinstance(args[0], Var) or not is_array(kinds.get(args[0].id, "")):
        return None
    k = kinds[args[0].id]
    nd = int(k[k.index("[") + 1:-1])
    try:
        axes = sorted({int(a) + nd if int(a) < 0 else int(a) for a in ax.value})
    except (TypeError, ValueError):
        return None
    if not axes or any(not 0 <= a < nd for a in axes) or len(axes) != len(ax.value):
        return None            # numpy's own error (the sample evaluation reports it)
    if len(axes) == nd:
        del kw["axis"]
        return [Stmt(st.var, Call(e.fn, args, kw), st.loc)]
    out = []
    cur = args[0]
    for j, a in enumerate(reversed(axes)):
        last = j == len(axes) - 1
        if last:
            v = st.var
        else:
            counter[0] += 1
            v = Var(counter[0], f"{st.var.hint or 'r'}_ax{a}")
        out.append(Stmt(v, Call(e.fn, [cur], {**kw, "axis": Const(a)}), st.loc))
        cur = v
    return out


_CASTS = {"float": builtins.float, "int": builtins.int, "bool": builtins.bool}


def _cast(st: Stmt, kinds: Dict[int, str]):
    """``type(x)(v)`` as the cast of x's kind: (callee, operands)."""
    x, v = st.expr.args

    def kind(a):
        return kinds.get(a.id, "undef") if isinstance(a, Var) else kind_of_value(a.value)
    kx, kv = kind(x), kind(v)
    if kx in _CASTS:
        return _CASTS[kx], [v]
    if kx == "complex":
        # complex(v) of a complex v is v; of a real v the rule complex(a, b) with b = 0
        return (operator.pos, [v]) if kv == "complex" else (builtins.complex, [v, Const(0.0)])
    loc = st.loc
    raise UnsupportedSyntax(
        f"type(x)(...) casts are supported when x is a number; here x is {_describe(kx)}",
        loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
        hint="for an array write np.asarray(v, dtype=x.dtype) or v.astype(x.dtype); "
             "for a number float(v), complex(v) or int(v)")


def _describe_number(k: str) -> str:
    if is_array(k):
        return f"a {array_dtype(k)} array"
    return {"float": "a float", "complex": "a complex number"}.get(k, _describe(k))


def _describe(k: str) -> str:
    if is_array(k):
        return f"a {k[k.index('[') + 1:-1]}-D array"
    if k.startswith("tuple"):
        return "a tuple"
    return f"a value of kind {k!r}"
