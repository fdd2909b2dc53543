"""Comprehensions reduced on the spot, rewritten into loops before lowering.

``sum(x[i] ** 2 for i in range(n))``, ``sum([f(v) for v in xs])``, ``max(... for ...)``
and ``min(...)`` become the loop a person would write::

    acc = <first element>       # sum(..., start): the start value
    for i in range(n):          # each 'for' clause a loop, each 'if' a test
        acc = acc + x[i] ** 2

built as gast statements (with the comprehension's source locations) and lowered by
the ordinary statement lowering, so every loop form zyg supports (``range``, arrays,
``enumerate``, ``zip``) works here too.  The comprehension's variables are renamed to
fresh names: as in Python 3, they do not leak into the function.
"""
from __future__ import annotations

import builtins
import copy
import inspect
import itertools
from typing import Dict, Optional

import gast
import numpy as np

from .ir import Call, Const, Operand, Stmt
from .prims import SetItem

_COUNT = itertools.count()
REDUCERS = (builtins.sum, builtins.min, builtins.max)


def _name(id_: str, store: bool = False):
    return gast.Name(id=id_, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


class _Rename(gast.NodeTransformer):
    def __init__(self, names: Dict[str, str]):
        self.names = names

    def visit_Name(self, node):
        if node.id in self.names:
            node.id = self.names[node.id]
        return node

    def visit_Lambda(self, node):
        return node


def _targets(t, out: list) -> None:
    if isinstance(t, gast.Name):
        out.append(t.id)
    elif isinstance(t, (gast.Tuple, gast.List)):
        for e in t.elts:
            _targets(e, out)


def is_reduction(fn, node) -> bool:
    """``sum/min/max`` of one comprehension or generator expression."""
    return fn in REDUCERS and len(node.args) in (1, 2) and not node.keywords and \
        isinstance(node.args[0], (gast.GeneratorExp, gast.ListComp)) and \
        (fn is builtins.sum or len(node.args) == 1)


def renamed_comprehension(low, comp, tag: str, k: Optional[int] = None):
    """A copy of the comprehension ``comp`` whose loop variables have fresh names
    ``_zyg_<tag><k>_<name>``, so that they do not leak into the function:
    ``(copy, {old: new}, k)``."""
    comp = copy.deepcopy(comp)
    k = next(_COUNT) if k is None else k
    names: Dict[str, str] = {}
    for g in comp.generators:
        if getattr(g, "is_async", 0):
            raise low.unsupported(comp, "async comprehensions are not supported")
        found: list = []
        _targets(g.target, found)
        for n in found:
            names[n] = f"_zyg_{tag}{k}_{n}"
    return _Rename(names).visit(comp), names, k


def lower_reduction(low, fn, node, hint: str) -> Operand:
    """Lower ``sum/min/max(<comprehension>[, start])`` as a loop; returns the result."""
    comp, names, k = renamed_comprehension(low, node.args[0], "c")
    acc, first = f"_zyg_acc{k}", f"_zyg_first{k}"
    low.f.locals |= set(names.values()) | {acc, first}
    elt = comp.elt
    if fn is builtins.sum and len(node.args) == 2:
        update = [gast.Assign(targets=[_name(acc, True)],
                              value=gast.BinOp(left=_name(acc), op=gast.Add(), right=elt),
                              type_comment=None)]
    else:
        # the first element starts the reduction (Python's min/max raise on an empty
        # sequence).  sum starts there too rather than at 0: its terms may be arrays,
        # whose kind an int start would not join; an empty sum is the zero of the kind
        cur = f"_zyg_e{k}"
        low.f.locals.add(cur)
        if fn is builtins.sum:
            keep = gast.BinOp(left=_name(acc), op=gast.Add(), right=_name(cur))
        else:
            keep = gast.Call(func=gast.Name(id=fn.__name__, ctx=gast.Load(), annotation=None,
                                            type_comment=None),
                             args=[_name(acc), _name(cur)], keywords=[])
        update = [gast.Assign(targets=[_name(cur, True)], value=elt, type_comment=None),
                  gast.If(test=_name(first),
                          body=[gast.Assign(targets=[_name(acc, True)], value=_name(cur),
                                            type_comment=None),
                                gast.Assign(targets=[_name(first, True)],
                                            value=gast.Constant(value=False, kind=None),
                                            type_comment=None)],
                          orelse=[gast.Assign(targets=[_name(acc, True)], value=keep,
                                              type_comment=None)])]
    body = update
    for g in reversed(comp.generators):
        for cond in reversed(g.ifs):
            body = [gast.If(test=cond, body=body, orelse=[])]
        body = [gast.For(target=g.target, iter=g.iter, body=body, orelse=[], type_comment=None)]
    for st in body:
        for n in gast.walk(st):
            if hasattr(n, "lineno") or isinstance(n, (gast.stmt, gast.expr)):
                if getattr(n, "lineno", None) is None:
                    gast.copy_location(n, node)
    if fn is builtins.sum and len(node.args) == 2:
        low.write(acc, low.cur, low.expr(node.args[1]))
    else:
        low.write(first, low.cur, Const(True))
    low.stmts(body)
    return low.read(acc, low.cur)


# --- output arguments: np.add(x, y, c), np.exp(b, out=b), np.cumsum(x, out=c) ---------------
# the ufunc keywords that change what is computed or where: zyg models none of them
_UFUNC_KEYWORDS = ("where", "casting", "order", "dtype", "subok", "signature", "axes", "axis",
                   "keepdims", "extobj")


def _out_position(fn):
    """(position of the ``out`` parameter or None when it is keyword-only, casting) of a
    numpy function with one; None for other callees."""
    if isinstance(fn, np.ufunc):
        return fn.nin, "same_kind"
    if isinstance(getattr(fn, "__self__", None), np.ufunc):
        # np.add.reduce(a, axis, dtype, out), accumulate, reduceat(a, indices, axis, dtype, out):
        # "cast if necessary"; outer(a, b, out=c): a ufunc call
        return {"reduce": (3, "unsafe"), "accumulate": (3, "unsafe"), "reduceat": (4, "unsafe"),
                "outer": (None, "same_kind")}.get(fn.__name__)
    if fn is np.dot:
        return 2, "equiv"           # numpy: the exact dtype of the result, or ValueError
    if fn is np.clip:
        return 3, "same_kind"       # numpy's clip is a ufunc
    mod = getattr(fn, "__module__", None) or ""
    if not (mod == "numpy" or mod.startswith(("numpy.", "scipy."))):
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for k, p in enumerate(params):
        if p.name == "out":
            pos = k if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None
            return pos, "unsafe"     # reductions, cumsum, round: "cast if necessary"
    return None


def _is_none(n) -> bool:
    return isinstance(n, gast.Constant) and n.value is None


def lower_out_argument(low, fn, node, hint: str, method=None) -> Optional[Operand]:
    """A call of a numpy function with an output argument, ``f(x, y, c)`` or
    ``f(x, y, out=c)`` (or ``out=(c,)``): the write ``c[...] = f(x, y)``, whose value is
    ``c`` itself (the same array: ``r = np.exp(b, b)`` makes ``r`` another name of ``b``).
    The write broadcasts and casts as numpy's does; the casting numpy refuses
    (``same_kind`` for ufuncs) is refused by the kind check. None when the call has no
    output argument. ``method``: the numpy function of a method call ``a.sum(out=c)``
    (its receiver is the function's first parameter)."""
    if fn is np.nan_to_num:
        return _nan_to_num(low, node, hint)
    info = _out_position(method if method is not None else fn)
    if info is None:
        return None
    pos, casting = info
    if method is not None and pos is not None:
        pos -= 1
    f = method if method is not None else fn
    mod = getattr(f, "__module__", None) or "numpy"
    name = getattr(f, "__name__", "function")
    if isinstance(getattr(f, "__self__", None), np.ufunc):
        name = f"{f.__self__.__name__}.{name}"
    what = f"{'np' if mod.startswith('numpy') else mod}.{name}()"
    args, kws = list(node.args), [k for k in node.keywords]
    outs = []
    if pos is not None and len(args) > pos:
        outs = args[pos:]
        if not isinstance(f, np.ufunc) and len(outs) > 1:
            raise low.unsupported(node, f"{what}: arguments after the output argument are not supported",
                                  "pass them as keywords")
        args = args[:pos]
    for k in kws:
        if k.arg == "out":
            if outs:
                raise low.unsupported(node, f"{what} got the output argument twice")
            outs = list(k.value.elts) if isinstance(k.value, gast.Tuple) else [k.value]
    if isinstance(f, np.ufunc):
        for k in kws:
            if k.arg in _UFUNC_KEYWORDS:
                raise low.unsupported(node, f"{what}: the keyword {k.arg}= is not supported",
                                      "compute the value without it (np.where(m, f(x), old) for where=)")
    had_out = any(k.arg == "out" for k in kws) or len(args) != len(node.args)
    if not had_out:
        return None
    kws = [k for k in kws if k.arg != "out"]
    if all(_is_none(o) for o in outs):
        outs = []
    nout = getattr(f, "nout", 1)
    if outs and (nout != 1 or len(outs) != 1):
        raise low.unsupported(node, f"{what} with output arguments: only functions with one output "
                                    "are supported", "assign the results instead of passing out=")
    call = gast.Call(func=node.func, args=args, keywords=kws)
    gast.copy_location(call, node)
    value = low.expr(call, hint)
    if not outs:
        return value
    # ufuncs (and np.clip, one in numpy) broadcast their result into the output argument
    return _write_out(low, node, outs[0], value, what, casting, casting == "same_kind")


def _write_out(low, node, out_node, value: Operand, what: str, casting: str, broadcast: bool) -> Operand:
    """``out[...] = value`` (``what``: the call, for the kind check's messages); its value
    is the output argument itself."""
    out = low.expr(out_node)
    low.blocks[low.cur].stmts.append(
        Stmt(None, Call(SetItem(("e",), what, casting, broadcast), [out, value]), low.src.loc(node)))
    return out


def _nan_to_num(low, node, hint: str) -> Optional[Operand]:
    """``np.nan_to_num(x, copy=False)`` replaces in ``x`` and returns ``x``: ``x`` is its
    output argument. ``copy=True`` (the default) is the plain call."""
    copy = node.args[1] if len(node.args) > 1 else next(
        (k.value for k in node.keywords if k.arg == "copy"), None)
    if copy is None:
        return None
    if not (isinstance(copy, gast.Constant) and isinstance(copy.value, bool)):
        raise low.unsupported(node, "np.nan_to_num(): copy= must be a constant True or False")
    if len(node.args) > 2 or not node.args:
        raise low.unsupported(node, "np.nan_to_num(): pass x positionally, and nan=, posinf= and "
                                    "neginf= as keywords")
    call = gast.Call(func=node.func, args=node.args[:1],
                     keywords=[k for k in node.keywords if k.arg != "copy"])
    gast.copy_location(call, node)
    value = low.expr(call, hint)
    return value if copy.value else _write_out(low, node, node.args[0], value, "np.nan_to_num()",
                                               "unsafe", False)


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def lower_copyto(low, node) -> Operand:
    """``np.copyto(dst, src)`` (``casting=`` a constant, ``where=`` refused): the write
    ``dst[...] = src``, broadcast and cast as numpy's; the call's value is None."""
    names = ("dst", "src", "casting", "where")
    if len(node.args) > len(names) or any(k.arg not in names for k in node.keywords):
        raise low.unsupported(node, "np.copyto() takes dst, src, casting= and where=")
    got = dict(zip(names, node.args))
    got.update({k.arg: k.value for k in node.keywords})
    if "dst" not in got or "src" not in got:
        raise low.unsupported(node, "np.copyto() needs dst and src")
    where = got.get("where")
    if where is not None and not (isinstance(where, gast.Constant) and where.value is True):
        raise low.unsupported(node, "np.copyto(): where= is not supported",
                              "dst[...] = np.where(mask, src, dst)")
    casting = got.get("casting")
    if casting is None:
        casting = "same_kind"
    elif isinstance(casting, gast.Constant) and casting.value in _CASTINGS:
        casting = casting.value
    else:
        raise low.unsupported(node, f"np.copyto(): casting= must be one of {', '.join(_CASTINGS)}, "
                                    "written as a constant")
    src = low.expr(got["src"])
    _write_out(low, node, got["dst"], src, "np.copyto()", casting, True)
    return Const(None)
