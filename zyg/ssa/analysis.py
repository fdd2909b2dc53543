"""Analyses over SSA: value kinds (a light type lattice), activity, loops.

Kinds are strings: ``bool < int < float < complex`` (numeric promotion), ``none``,
``undef`` (bottom: no value seen yet) and ``object`` (top).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Set, Tuple

import numpy as np

from .ir import Branch, Const, Function, Jump, Return, Undef, Var

_NUMERIC = ["bool", "int", "float", "complex"]
_SAMPLES = {
    "bool": [True, False], "int": [1, 2, 3], "float": [0.5, 1.5, 2.5, -0.5],
    "complex": [0.5 + 0.25j, 1.5 - 0.5j], "none": [None],
}


def kind_of_value(v: Any) -> str:
    """Kind of a run-time argument value."""
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, (complex, np.complexfloating)):
        return "complex"
    if v is None:
        return "none"
    return "object"


def join(a: str, b: str) -> str:
    if a == "undef":
        return b
    if b == "undef" or a == b:
        return a
    if a in _NUMERIC and b in _NUMERIC:
        return _NUMERIC[max(_NUMERIC.index(a), _NUMERIC.index(b))]
    return "object"


def const_kind(c: Const) -> str:
    if isinstance(c, Undef):
        return "undef"
    return kind_of_value(c.value)


_result_cache: Dict[Tuple[Any, Tuple[str, ...]], str] = {}


def result_kind(fn: Any, kinds: Tuple[str, ...]) -> str:
    """Kind of ``fn(*args)`` for arguments of the given kinds, by evaluating on samples."""
    if any(k in ("undef",) for k in kinds):
        return "undef"
    if any(k == "object" for k in kinds):
        return "object"
    key = (fn, kinds)
    try:
        if key in _result_cache:
            return _result_cache[key]
    except TypeError:
        key = None
    out = "float"
    n = max([len(_SAMPLES[k]) for k in kinds] or [1])
    target = getattr(fn, "py_func", fn)
    for i in range(n):
        args = [_SAMPLES[k][i % len(_SAMPLES[k])] for k in kinds]
        try:
            with np.errstate(all="ignore"):
                out = kind_of_value(target(*args))
            break
        except Exception:
            continue
    if key is not None:
        _result_cache[key] = out
    return out


def infer_kinds(fn: Function, argkinds: List[str]) -> Dict[int, str]:
    """Fixpoint propagation of kinds from the argument kinds through the SSA."""
    kinds: Dict[int, str] = {}
    for p, k in zip(fn.params, argkinds):
        kinds[p.id] = k

    def k_of(a):
        return kinds.get(a.id, "undef") if isinstance(a, Var) else const_kind(a)

    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if st.var is None:
                    continue
                if st.expr.kwargs:
                    new = "float"
                else:
                    new = result_kind(st.expr.fn, tuple(k_of(a) for a in st.expr.args))
                old = kinds.get(st.var.id, "undef")
                j = join(old, new)
                if j != old:
                    kinds[st.var.id] = j
                    changed = True
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    old = kinds.get(p.id, "undef")
                    j = join(old, k_of(a))
                    if j != old:
                        kinds[p.id] = j
                        changed = True
    return kinds


DIFFERENTIABLE_KINDS = ("float", "complex")


def activity(fn: Function, kinds: Dict[int, str], wrt: List[int],
             nondiff: "callable") -> Set[int]:
    """Ids of active values: varied (depend on a ``wrt`` parameter) and useful (reach the return)."""
    def diffable(v):
        return isinstance(v, Var) and kinds.get(v.id) in DIFFERENTIABLE_KINDS

    varied: Set[int] = {fn.params[i].id for i in wrt if diffable(fn.params[i])}
    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if st.var is None or st.var.id in varied or not diffable(st.var):
                    continue
                if nondiff(st.expr.fn):
                    continue
                if any(isinstance(a, Var) and a.id in varied for a in st.expr.operands()):
                    varied.add(st.var.id)
                    changed = True
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if p.id not in varied and diffable(p) and isinstance(a, Var) and a.id in varied:
                        varied.add(p.id)
                        changed = True
    useful: Set[int] = set()
    for blk in fn.iter_blocks():
        if isinstance(blk.term, Return) and isinstance(blk.term.value, Var):
            useful.add(blk.term.value.id)
    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if st.var is not None and st.var.id in useful and not nondiff(st.expr.fn):
                    for a in st.expr.operands():
                        if isinstance(a, Var) and a.id not in useful:
                            useful.add(a.id)
                            changed = True
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if p.id in useful and isinstance(a, Var) and a.id not in useful:
                        useful.add(a.id)
                        changed = True
    return varied & useful


def natural_loops(fn: Function, dom: Dict[int, Set[int]]) -> Dict[int, Set[int]]:
    """Header id -> set of block ids of its natural loop (back edges B->H, H dom B)."""
    preds = fn.predecessors()
    loops: Dict[int, Set[int]] = {}
    for blk in fn.iter_blocks():
        for s in blk.successors():
            if s in dom[blk.id]:
                body = loops.setdefault(s, {s})
                work = [blk.id]
                while work:
                    b = work.pop()
                    if b not in body:
                        body.add(b)
                        work.extend(preds[b])
    return loops


def loops_of_blocks(fn: Function, loops: Dict[int, Set[int]]) -> Dict[int, Set[int]]:
    """Block id -> headers of the loops that contain it."""
    out = {b: set() for b in fn.order}
    for h, body in loops.items():
        for b in body:
            out[b].add(h)
    return out
