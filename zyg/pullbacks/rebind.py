"""Arrays rebound inside a loop and then written: a private copy at the join.

A written array that reaches a block parameter carries its buffer and shadow along the edge
as pointers (``Emitter.edge``); undoing the edge gives the argument's variable the pointers
back.  That needs the argument to be one buffer for the whole call, so an array made inside
a loop cannot reach a written parameter (``ArrayMixin.check_params`` refuses it).  Two
everyday spellings do exactly that::

    for i in range(n):                      for i in range(n):
        if i % 2 == 0:                          a[0] += x          # a: the loop's parameter
            a = np.empty(3)                     a = np.ones(3) * a[0]
        else:
            a = np.zeros(3)
        a[0] = x * i                        # a: the join's parameter, written

Where nothing else can see the parameter's memory after the join, this pass gives the join
its own array: ``p2 = np.copy(p)`` at the top of the block, and every later use of ``p``
reads ``p2``.  ``p`` itself is then never written (an ordinary functional value, as the
edges' arguments are), and ``p2`` is an array allocated in a loop and written, which the
emitter records and rewinds like any other.  Nothing else can see the memory when

* no value of the parameter's alias class is an argument of the function (the caller would
  see the write), and
* no other value of the class is still live at the join: every path from the join to a use
  of it passes that value's definition again.

Otherwise (an array rebound conditionally and carried on, a view of it read after the
join) the program is left as it is and the emitter's error names the line.
"""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import numpy as np

from ..ssa.analysis import Aliases, is_array, loops_of_blocks, natural_loops
from ..ssa.ir import Call, Function, Stmt, Var
from ..ssa.passes import dominators


def _uses(fn: Function) -> Dict[int, Set[int]]:
    """Var id -> blocks that read it (an edge argument is read by its source block)."""
    out: Dict[int, Set[int]] = {}
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            for a in st.expr.operands():
                if isinstance(a, Var):
                    out.setdefault(a.id, set()).add(blk.id)
        for _, args in blk.term.successors():
            for a in args:
                if isinstance(a, Var):
                    out.setdefault(a.id, set()).add(blk.id)
        for a in (getattr(blk.term, "value", None), getattr(blk.term, "cond", None)):
            if isinstance(a, Var):
                out.setdefault(a.id, set()).add(blk.id)
    return out


def _defs(fn: Function) -> Dict[int, int]:
    out: Dict[int, int] = {}
    for blk in fn.iter_blocks():
        for p in blk.params:
            out[p.id] = blk.id
        for st in blk.stmts:
            if st.var is not None:
                out[st.var.id] = blk.id
    return out


def _live_at(fn: Function, v: int, start: int, defs: Dict[int, int], uses: Dict[int, Set[int]]) -> bool:
    """Can a use of ``v`` run after the start of block ``start`` without ``v`` being defined
    again on the way?"""
    used = uses.get(v, set())
    d = defs.get(v)
    if start == d:
        return False        # defined in the block itself, after its start
    seen, todo = set(), [start]
    while todo:
        b = todo.pop()
        if b in seen:
            continue
        seen.add(b)
        if b == d:
            continue        # defined again there, before any use in it
        if b in used:
            return True
        todo += fn.blocks[b].successors()
    return False


def _candidates(fn: Function, kinds: Dict[str, str], al: Aliases, in_loop) -> List[Tuple[int, int]]:
    """(block, parameter index) of written array parameters that an array made in a loop reaches."""
    defs = _defs(fn)
    param_ids = {p.id for b in fn.iter_blocks() for p in b.params}
    out = []
    preds = fn.predecessors()
    for blk in fn.iter_blocks():
        if blk.id == fn.order[0]:
            continue
        for k, p in enumerate(blk.params):
            if not is_array(kinds.get(p.id, "")) or not al.is_mutated(p.id):
                continue
            for q in preds[blk.id]:
                for t, args in fn.blocks[q].term.successors():
                    if t != blk.id:
                        continue
                    a = args[k]
                    if isinstance(a, Var) and a.id not in param_ids and a.id not in al.view_of \
                            and a.id in defs and in_loop(defs[a.id]):
                        out.append((blk.id, k))
    return list(dict.fromkeys(out))


def _private(fn: Function, al: Aliases, bid: int, p: Var) -> bool:
    """Is the memory of parameter ``p`` of block ``bid`` seen by nothing but ``p`` from the
    start of ``bid`` on?"""
    args = {a.id for a in fn.params}
    root = al.find(p.id)
    defs, uses = _defs(fn), _uses(fn)
    for m in al.members(root):
        if m == p.id:
            continue
        if m in args:
            return False
        if _live_at(fn, m, bid, defs, uses):
            return False
    return True


def _replace(fn: Function, old: Var, new: Var, skip: Stmt) -> None:
    sub = lambda a: new if isinstance(a, Var) and a.id == old.id else a
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            if st is skip:
                continue
            st.expr.args = [sub(a) for a in st.expr.args]
            st.expr.kwargs = {k: sub(a) for k, a in st.expr.kwargs.items()}
        t = blk.term
        for name in ("args", "true_args", "false_args"):
            if hasattr(t, name):
                setattr(t, name, [sub(a) for a in getattr(t, name)])
        for name in ("value", "cond"):
            if hasattr(t, name):
                setattr(t, name, sub(getattr(t, name)))


def separate_rebound_arrays(fn: Function, kinds: Dict[int, str]) -> bool:
    """Give each written array parameter that an array made in a loop reaches its own copy
    where that is invisible (module docstring).  Returns whether ``fn`` changed; the caller
    infers the kinds again."""
    loops = natural_loops(fn, dominators(fn))
    loops_of = loops_of_blocks(fn, loops)
    in_loop = lambda b: bool(loops_of.get(b))
    al = Aliases(fn, kinds)
    todo = _candidates(fn, kinds, al, in_loop)
    if not todo:
        return False
    saved = _snapshot(fn)
    next_id = [1 + max([p.id for b in fn.iter_blocks() for p in b.params]
                       + [s.var.id for b in fn.iter_blocks() for s in b.stmts if s.var is not None])]
    changed = False
    for bid, k in todo:
        blk = fn.blocks[bid]
        p = blk.params[k]
        if not _private(fn, al, bid, p):
            continue
        p2 = Var(next_id[0], p.hint)
        next_id[0] += 1
        loc = blk.stmts[0].loc if blk.stmts else blk.loc
        cp = Stmt(p2, Call(np.copy, [p], {}), loc)
        blk.stmts.insert(0, cp)
        _replace(fn, p, p2, cp)
        kinds[p2.id] = kinds[p.id]
        changed = True
        al = Aliases(fn, kinds)
    if changed and _candidates(fn, kinds, al, in_loop):
        # still refused (an array re-made in a branch and carried on by the loop): leave the
        # program as the user wrote it, so that the error names their line
        _restore(fn, saved)
        return False
    return changed


def _snapshot(fn: Function):
    return [(blk, list(blk.stmts), [(st, list(st.expr.args), dict(st.expr.kwargs)) for st in blk.stmts],
             {n: (list(getattr(blk.term, n)) if n.endswith("args") else getattr(blk.term, n))
              for n in ("args", "true_args", "false_args", "value", "cond") if hasattr(blk.term, n)})
            for blk in fn.iter_blocks()]


def _restore(fn: Function, saved) -> None:
    for blk, stmts, ops, term in saved:
        blk.stmts = stmts
        for st, args, kwargs in ops:
            st.expr.args, st.expr.kwargs = args, kwargs
        for n, v in term.items():
            setattr(blk.term, n, v)
