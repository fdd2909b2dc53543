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
import itertools
from typing import Dict, Optional

import gast

from .ir import Const, Operand

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
