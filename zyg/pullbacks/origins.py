"""Where a value of unknown type comes from, to name the real cause of a rejection.

Kind inference gives ``object`` (or leaves ``undef``) to the result of a call it cannot
type: a numpy function zyg does not support (``np.linalg.cholesky`` on a sample it
rejects), a recursive call whose result depends on itself.  The rejection surfaces
later, far from the cause ("indexing a object value", "must return a number").
``origin_of`` walks back from the rejected value to the first statement whose
result is unknown while its operands are known: that call is what to report.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..ssa.ir import Function, Stmt, Var, callee_name

UNKNOWN = ("object", "undef")


def origin_of(fn: Function, kinds: Dict[int, str], v: Var) -> Optional[Stmt]:
    """The statement that first produces an unknown-kinded value flowing into ``v``."""
    defs: Dict[int, Stmt] = {}
    incoming: Dict[int, list] = {}
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            if st.var is not None:
                defs[st.var.id] = st
        for target, args in blk.term.successors():
            for p, a in zip(fn.blocks[target].params, args):
                incoming.setdefault(p.id, []).append(a)
    seen = set()
    todo = [v]
    while todo:
        x = todo.pop()
        if not isinstance(x, Var) or x.id in seen or kinds.get(x.id, "undef") not in UNKNOWN:
            continue
        seen.add(x.id)
        st = defs.get(x.id)
        if st is None:                     # a block parameter: follow what flows in
            todo.extend(incoming.get(x.id, []))
            continue
        ops = list(st.expr.args) + list(st.expr.kwargs.values())
        unknown = [a for a in ops if isinstance(a, Var) and kinds.get(a.id, "undef") in UNKNOWN]
        if not unknown:
            return st
        todo.extend(unknown)
    return None


def explain(st: Stmt) -> Tuple[str, str]:
    """The message and hint for an origin found by ``origin_of``."""
    from ..ssa.prims import Recursive
    if isinstance(st.expr.fn, Recursive):
        return (f"zyg cannot infer the type that the recursive call {st.expr.fn.name}(...) returns",
                "a recursion that splits its work (divide and conquer) is not supported yet: "
                "write it as a loop")
    return (f"zyg cannot differentiate {callee_name(st.expr.fn)}(...) here: its result has no type "
            "zyg supports (an unsupported function or argument)",
            "write it with supported numpy functions (docs/subset.md), or give it a rule "
            "with @zyg.adjoint")
