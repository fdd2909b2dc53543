"""IR passes and the IR verifier, run as a named pipeline.

Set ``ZYG_DUMP_AFTER=lower,cleanup`` (or ``all``) to print the IR after the named
passes; tests set ``zyg.ssa.passes.VERIFY = True`` (the default) so that the
verifier runs after every pass.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Set, Tuple

from .ir import Branch, Const, Function, Jump, Operand, Return, Undef, Var

VERIFY = True


class VerifyError(AssertionError):
    """The IR broke one of its invariants (a bug in zyg, not in user code)."""


def operands_of(fn: Function):
    """Yield (block, operand) for every use in the function."""
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            for a in st.expr.operands():
                yield blk, a
        t = blk.term
        if isinstance(t, Branch):
            yield blk, t.cond
        if isinstance(t, Return):
            yield blk, t.value
        for _, args in (t.successors() if t else []):
            for a in args:
                yield blk, a


def dominators(fn: Function) -> Dict[int, Set[int]]:
    """Dominator sets, by the iterative data-flow algorithm (CFGs here are small)."""
    preds = fn.predecessors()
    allb = set(fn.order)
    dom = {b: set(allb) for b in fn.order}
    entry = fn.order[0]
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for b in fn.order[1:]:
            ps = preds[b]
            new = set.intersection(*(dom[p] for p in ps)) if ps else set()
            new = new | {b}
            if new != dom[b]:
                dom[b] = new
                changed = True
    return dom


def verify(fn: Function, after: str = "?") -> None:
    """Check the IR invariants; raise :class:`VerifyError` naming the pass."""
    def fail(msg):
        raise VerifyError(f"IR verification failed after pass '{after}': {msg}\n{fn}")

    if len(set(fn.order)) != len(fn.order) or set(fn.order) != set(fn.blocks):
        fail("block order and block table disagree")
    defined: Dict[int, int] = {}
    pos: Dict[int, int] = {}
    for blk in fn.iter_blocks():
        if blk.term is None:
            fail(f"block {blk.id} has no terminator")
        for p in blk.params:
            if p.id in defined:
                fail(f"{p} defined twice")
            defined[p.id] = blk.id
            pos[p.id] = -1
        for i, st in enumerate(blk.stmts):
            if st.var is not None:
                if st.var.id in defined:
                    fail(f"{st.var} defined twice")
                defined[st.var.id] = blk.id
                pos[st.var.id] = i
        for target, args in blk.term.successors():
            if target not in fn.blocks:
                fail(f"block {blk.id} branches to missing block {target}")
            if len(args) != len(fn.blocks[target].params):
                fail(f"block {blk.id} passes {len(args)} arguments to block {target} "
                     f"which takes {len(fn.blocks[target].params)}")
    preds = fn.predecessors()
    if preds[fn.order[0]]:
        fail("the entry block has predecessors")
    returns = [b.id for b in fn.iter_blocks() if isinstance(b.term, Return)]
    if len(returns) != 1:
        fail(f"expected exactly one return block, found {returns}")
    for b in fn.order[1:]:
        if not preds[b]:
            fail(f"block {b} is unreachable")
    dom = dominators(fn)
    for blk in fn.iter_blocks():
        uses: List[Tuple[int, Operand]] = []
        for i, st in enumerate(blk.stmts):
            uses += [(i, a) for a in st.expr.operands()]
        n = len(blk.stmts)
        t = blk.term
        if isinstance(t, Branch):
            uses.append((n, t.cond))
        if isinstance(t, Return):
            uses.append((n, t.value))
        for _, args in t.successors():
            uses += [(n, a) for a in args]
        for i, a in uses:
            if not isinstance(a, Var):
                continue
            if a.id not in defined:
                fail(f"{a} used in block {blk.id} but never defined")
            d = defined[a.id]
            if d == blk.id:
                if pos[a.id] >= i:
                    fail(f"{a} used before its definition in block {blk.id}")
            elif d not in dom[blk.id]:
                fail(f"{a} used in block {blk.id} is not dominated by its definition in block {d}")


def fold_constant_branches(fn: Function) -> Function:
    """Turn ``br <constant> ? A : B`` into a jump (``while True`` loops, constant tests)."""
    for blk in fn.iter_blocks():
        t = blk.term
        if isinstance(t, Branch) and isinstance(t.cond, Const) and not isinstance(t.cond, Undef):
            if t.cond.value:
                blk.term = Jump(t.true, t.true_args)
            else:
                blk.term = Jump(t.false, t.false_args)
    return remove_unreachable(fn)


def remove_unreachable(fn: Function) -> Function:
    """Drop blocks that cannot be reached from the entry block."""
    seen = set()
    work = [fn.order[0]]
    while work:
        b = work.pop()
        if b in seen:
            continue
        seen.add(b)
        work.extend(fn.blocks[b].successors())
    for b in list(fn.order):
        if b not in seen:
            fn.order.remove(b)
            del fn.blocks[b]
    return fn


def _substitute(fn: Function, subst: Dict[int, Operand]) -> None:
    def res(a):
        while isinstance(a, Var) and a.id in subst:
            a = subst[a.id]
        return a
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            st.expr.args = [res(a) for a in st.expr.args]
            st.expr.kwargs = {k: res(v) for k, v in st.expr.kwargs.items()}
        t = blk.term
        if isinstance(t, Jump):
            t.args = [res(a) for a in t.args]
        elif isinstance(t, Branch):
            t.cond = res(t.cond)
            t.true_args = [res(a) for a in t.true_args]
            t.false_args = [res(a) for a in t.false_args]
        elif isinstance(t, Return):
            t.value = res(t.value)


def _edges_into(fn: Function, b: int):
    """(terminator, 'true'|'false'|'jump') for every edge into block b."""
    out = []
    for blk in fn.iter_blocks():
        t = blk.term
        if isinstance(t, Jump) and t.target == b:
            out.append((t, "args"))
        elif isinstance(t, Branch):
            if t.true == b:
                out.append((t, "true_args"))
            if t.false == b:
                out.append((t, "false_args"))
    return out


def _same(a: Operand, b: Operand) -> bool:
    if isinstance(a, Var) or isinstance(b, Var):
        return a is b or (isinstance(a, Var) and isinstance(b, Var) and a.id == b.id)
    return a == b


def remove_trivial_params(fn: Function) -> Function:
    """Remove block parameters that always receive one value (or themselves)."""
    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            if blk.id == fn.order[0]:
                continue
            edges = _edges_into(fn, blk.id)
            for idx, p in enumerate(blk.params):
                vals = [getattr(t, slot)[idx] for t, slot in edges]
                uniq: List[Operand] = []
                for v in vals:
                    if isinstance(v, Var) and v.id == p.id:
                        continue
                    if not any(_same(v, u) for u in uniq):
                        uniq.append(v)
                if len(uniq) == 1:
                    blk.params.pop(idx)
                    for t, slot in edges:
                        getattr(t, slot).pop(idx)
                    _substitute(fn, {p.id: uniq[0]})
                    changed = True
                    break
    return fn


def merge_straight_blocks(fn: Function) -> Function:
    """Merge a block into its predecessor when that jump is the block's only entry.

    Fewer blocks means fewer dispatch-loop transitions in the emitted code (in
    numba, LLVM does not always thread every transition of a long chain).
    """
    changed = True
    while changed:
        changed = False
        preds = fn.predecessors()
        for b in list(fn.order):
            blk = fn.blocks.get(b)
            if blk is None or not isinstance(blk.term, Jump):
                continue
            c = blk.term.target
            if c == b or c == fn.order[0] or preds[c] != [b]:
                continue
            nxt = fn.blocks[c]
            subst = {p.id: a for p, a in zip(nxt.params, blk.term.args)}
            blk.stmts += nxt.stmts
            blk.term = nxt.term
            fn.order.remove(c)
            del fn.blocks[c]
            _substitute(fn, subst)
            changed = True
            break
    # keep the return block last
    ret = [b for b in fn.order if isinstance(fn.blocks[b].term, Return)]
    for r in ret:
        if r != fn.order[0]:
            fn.order.remove(r)
            fn.order.append(r)
    return fn


PIPELINE: List[Tuple[str, Callable[[Function], Function]]] = [
    ("unreachable", remove_unreachable),
    ("fold-branches", fold_constant_branches),
    ("trivial-params", remove_trivial_params),
    ("merge-blocks", merge_straight_blocks),
]


def _dump_requested(name: str) -> bool:
    want = os.environ.get("ZYG_DUMP_AFTER", "")
    names = {w.strip() for w in want.split(",") if w.strip()}
    return "all" in names or name in names


def run_pipeline(fn: Function) -> Function:
    """Run the cleanup passes, verifying (and optionally dumping) after each one."""
    if _dump_requested("lower"):
        print(f"=== IR after lower ===\n{fn}", file=sys.stderr)
    for name, p in PIPELINE:
        fn = p(fn)
        if VERIFY:
            verify(fn, name)
        if _dump_requested(name):
            print(f"=== IR after {name} ===\n{fn}", file=sys.stderr)
    return fn
