"""IR passes and the IR verifier, run as a named pipeline.

Set ``ZYG_DUMP_AFTER=lower,cleanup`` (or ``all``) to print the IR after the named
passes; tests set ``zyg.ssa.passes.VERIFY = True`` (the default) so that the
verifier runs after every pass.
"""
from __future__ import annotations

import operator
import os
import sys
from typing import Callable, Dict, List, Set, Tuple

import numpy as np

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
    """Dominator sets: the immediate dominators by Cooper, Harvey and Kennedy's iterative
    algorithm over the reverse postorder, then each block's set is its immediate
    dominator's plus itself.  (The data-flow algorithm over sets started every set full,
    a set of every block per block: 1.7 s of a 300-loop function's transform.)  A block
    the entry does not reach dominates only itself."""
    preds = fn.predecessors()
    entry = fn.order[0]
    post: List[int] = []
    seen = {entry}
    stack = [(entry, iter(fn.blocks[entry].successors()))]
    while stack:                     # iterative depth-first search: no recursion limit
        b, it = stack[-1]
        for s in it:
            if s not in seen:
                seen.add(s)
                stack.append((s, iter(fn.blocks[s].successors())))
                break
        else:
            stack.pop()
            post.append(b)
    rpo = post[::-1]
    num = {b: i for i, b in enumerate(rpo)}
    idom: Dict[int, int] = {entry: entry}

    def meet(a: int, b: int) -> int:
        while a != b:
            while num[a] > num[b]:
                a = idom[a]
            while num[b] > num[a]:
                b = idom[b]
        return a
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = None
            for p in preds[b]:
                if p in idom:
                    new = p if new is None else meet(p, new)
            if new is not None and idom.get(b) != new:
                idom[b] = new
                changed = True
    dom: Dict[int, Set[int]] = {}
    for b in rpo:
        dom[b] = {b} if b == entry else dom[idom[b]] | {b}
    return {b: dom.get(b, {b}) for b in fn.order}


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


def _same(a: Operand, b: Operand) -> bool:
    if isinstance(a, Var) or isinstance(b, Var):
        return a is b or (isinstance(a, Var) and isinstance(b, Var) and a.id == b.id)
    return a == b


def remove_trivial_params(fn: Function) -> Function:
    """Remove block parameters that always receive one value (or themselves), to a fixed
    point (removing one can make others trivial)."""
    inc = _incoming(fn)
    repl: Dict[int, Operand] = {}

    def res(a: Operand) -> Operand:
        while isinstance(a, Var) and a.id in repl:
            a = repl[a.id]
        return a

    changed = True
    while changed:
        changed = False
        for pid, ops in inc.items():
            if pid in repl:
                continue
            uniq: List[Operand] = []
            for v in ops:
                v = res(v)
                if isinstance(v, Var) and v.id == pid:
                    continue
                if not any(_same(v, u) for u in uniq):
                    uniq.append(v)
                    if len(uniq) > 1:
                        break
            if len(uniq) == 1:
                repl[pid] = uniq[0]
                changed = True
    _drop_params(fn, {k: res(v) for k, v in repl.items()})
    return fn


def _drop_params(fn: Function, drop: Dict[int, Operand]) -> None:
    """Remove the block parameters in ``drop`` (param id -> replacement, or None for a
    dead one) with their edge arguments, and substitute the replacements."""
    if not drop:
        return
    entry = fn.order[0]
    for blk in fn.iter_blocks():
        t = blk.term
        for slot in (("args",) if isinstance(t, Jump) else
                     ("true_args", "false_args") if isinstance(t, Branch) else ()):
            target = t.target if slot == "args" else (t.true if slot == "true_args" else t.false)
            params = fn.blocks[target].params
            if target == entry or not any(q.id in drop for q in params):
                continue
            setattr(t, slot, [a for q, a in zip(params, getattr(t, slot)) if q.id not in drop])
    for blk in fn.iter_blocks():
        if blk.id != entry:
            blk.params = [q for q in blk.params if q.id not in drop]
    _substitute(fn, {k: v for k, v in drop.items() if v is not None})


def _incoming(fn: Function) -> Dict[int, List[Operand]]:
    """Operands flowing into every (non-entry) block parameter, one per edge."""
    entry = fn.order[0]
    inc: Dict[int, List[Operand]] = {q.id: [] for b in fn.order if b != entry
                                     for q in fn.blocks[b].params}
    for blk in fn.iter_blocks():
        for target, args in (blk.term.successors() if blk.term else []):
            if target == entry:
                continue
            for q, a in zip(fn.blocks[target].params, args):
                inc[q.id].append(a)
    return inc


def _sccs(nodes: List[int], succ: Dict[int, List[int]]) -> List[List[int]]:
    """Strongly connected components (Tarjan, iterative), callees before callers."""
    index: Dict[int, int] = {}
    low: Dict[int, int] = {}
    on: Set[int] = set()
    stack: List[int] = []
    out: List[List[int]] = []
    n = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = n
                n += 1
                stack.append(v)
                on.add(v)
            ws = succ.get(v, [])
            if i < len(ws):
                work.append((v, i + 1))
                w = ws[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def remove_redundant_params(fn: Function) -> Function:
    """Remove groups of block parameters that only pass one outside value around among
    themselves (Braun et al. 2013, section 3.2: redundant phi SCCs), then parameters whose
    value is never used.

    Both come from lowering generated code again (higher-order derivatives): a value
    that is constant across a loop nest still gets a parameter at every merge of the
    dispatch structure, in cycles that :func:`remove_trivial_params` cannot see through.
    """
    inc = _incoming(fn)
    drop: Dict[int, Operand] = {}

    def resolve(a: Operand) -> Operand:
        while isinstance(a, Var) and drop.get(a.id) is not None:
            a = drop[a.id]
        return a

    def process(members: List[int]) -> None:
        mset = set(members)
        succ = {p: [a.id for a in inc[p] if isinstance(a, Var) and a.id in mset] for p in members}
        for comp in _sccs(members, succ):
            cset = set(comp)
            outer: List[Operand] = []
            for p in comp:
                for a in inc[p]:
                    a = resolve(a)
                    if isinstance(a, Var) and a.id in cset:
                        continue
                    if not any(_same(a, u) for u in outer):
                        outer.append(a)
            if len(outer) == 1:
                for p in comp:
                    drop[p] = outer[0]
            elif len(outer) > 1 and len(comp) > 1:
                inner = [p for p in comp
                         if all(isinstance(resolve(a), Var) and resolve(a).id in cset for a in inc[p])]
                if inner and len(inner) < len(comp):
                    process(inner)

    process(list(inc))
    for k in list(drop):
        drop[k] = resolve(drop[k])
    _drop_params(fn, drop)
    # dead parameters: used by no statement, test or return, nor by a used parameter
    inc = _incoming(fn)
    used: Set[int] = set()
    work: List[int] = []
    for blk in fn.iter_blocks():
        uses = [a for st in blk.stmts for a in st.expr.operands()]
        t = blk.term
        if isinstance(t, Branch):
            uses.append(t.cond)
        elif isinstance(t, Return):
            uses.append(t.value)
        for a in uses:
            if isinstance(a, Var) and a.id not in used:
                used.add(a.id)
                work.append(a.id)
    while work:
        v = work.pop()
        for a in inc.get(v, ()):
            if isinstance(a, Var) and a.id not in used:
                used.add(a.id)
                work.append(a.id)
    _drop_params(fn, {p: None for p in inc if p not in used})
    return fn


_FOLDABLE = {id(f) for f in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne)}


def fold_int_compares(fn: Function) -> Function:
    """Fold comparisons of int and bool constants, then the branches they decide.

    After threading, a dispatch loop's test chain is entered with a known block number
    (generated code lowered again); folding its tests leaves it unreachable."""
    changed = True
    while changed:
        changed = False
        subst: Dict[int, Operand] = {}
        for blk in fn.iter_blocks():
            keep = []
            for st in blk.stmts:
                args = st.expr.args
                if (id(st.expr.fn) in _FOLDABLE and len(args) == 2 and not st.expr.kwargs
                        and all(isinstance(a, Const) and not isinstance(a, Undef)
                                and type(a.value) in (int, bool) for a in args)):
                    subst[st.var.id] = Const(bool(st.expr.fn(args[0].value, args[1].value)))
                    continue
                keep.append(st)
            blk.stmts = keep
        if subst:
            _substitute(fn, subst)
            fold_constant_branches(fn)
            remove_trivial_params(fn)
            changed = True
    return fn


_COMPARES = _FOLDABLE | {id(operator.is_), id(operator.is_not), id(operator.not_)}


def fold_kinds(fn: Function, kinds: Dict[int, str]) -> bool:
    """Fold what the argument kinds decide, then the branches it decides (as numba
    prunes them): ``x.ndim``, ``len(t)`` of a tuple (``len(x.shape)``), ``x.dtype``,
    ``isinstance(x, cls)``, and comparisons of the constants they give.  A branch that
    cannot run for these kinds (``x.shape[1]`` when ``x.ndim == 2`` is false) is then
    never typed.  Per signature: ``fn`` is a copy (``specialize``); True when it changed."""
    import builtins
    from .analysis import array_dtype, array_ndim, is_array, is_tuple, tuple_elts
    from .nones import is_none, is_not_none
    from .prims import Attr

    def kind(a: Operand) -> str:
        return kinds.get(a.id, "") if isinstance(a, Var) else ""

    dtypes = {st.var.id: np.dtype(array_dtype(kind(st.expr.args[0])))
              for blk in fn.iter_blocks() for st in blk.stmts
              if st.var is not None and isinstance(st.expr.fn, Attr) and st.expr.fn.attr == "dtype"
              and is_array(kind(st.expr.args[0]))}

    def value(a: Operand):
        if isinstance(a, Var) and a.id in dtypes:
            return dtypes[a.id]         # x.dtype: compared, not replaced (it stays an operand)
        return a.value if isinstance(a, Const) and not isinstance(a, Undef) else _NONE

    def decide(st) -> Operand:
        e, args = st.expr, st.expr.args
        if e.kwargs:
            return None
        k0 = kind(args[0]) if args else ""
        if isinstance(e.fn, Attr) and is_array(k0):
            if e.fn.attr == "ndim":
                return Const(array_ndim(k0))
        if e.fn in (is_none, is_not_none) and len(args) == 1:
            # x is None after a join of None-defaulted arguments (a block parameter that
            # always holds None), or a run-time value (never None)
            if value(args[0]) is not _NONE or (k0 and k0 not in ("undef", "object")):
                isnone = value(args[0]) is None or k0 == "none"
                return Const(isnone if e.fn is is_none else not isnone)
        if e.fn is builtins.len and len(args) == 1 and is_tuple(k0):
            return Const(len(tuple_elts(k0)))
        if e.fn is builtins.isinstance and len(args) == 2 and value(args[1]) is not _NONE:
            sample = _SAMPLES.get(k0[:1] if is_array(k0) else k0, _NONE)
            if is_tuple(k0):
                sample = ()
            if sample is not _NONE:
                try:
                    return Const(bool(isinstance(sample, value(args[1]))))
                except TypeError:
                    return None
        if id(e.fn) in _COMPARES and args and all(value(a) is not _NONE for a in args):
            try:
                r = e.fn(*[value(a) for a in args])
            except Exception:
                return None
            if isinstance(r, (bool, np.bool_)):
                return Const(bool(r))
        return None

    changed_any, changed = False, True
    while changed:
        changed = False
        subst: Dict[int, Operand] = {}
        for blk in fn.iter_blocks():
            keep = []
            for st in blk.stmts:
                c = decide(st) if st.var is not None else None
                if c is not None:
                    subst[st.var.id] = c
                    continue
                keep.append(st)
            blk.stmts = keep
        if subst:
            _substitute(fn, subst)
            fold_constant_branches(fn)
            remove_trivial_params(fn)
            changed = changed_any = True
    return changed_any


_NONE = object()
# a value of each kind of number, for isinstance() (arrays: any np.ndarray)
_SAMPLES = {"float": 1.0, "int": 1, "bool": True, "complex": 1j, "none": None,
            "f": np.zeros(1), "c": np.zeros(1, complex), "i": np.zeros(1, int), "b": np.zeros(1, bool),
            "u": np.zeros(1, np.uint8)}


def merge_straight_blocks(fn: Function) -> Function:
    """Merge a block into its predecessor when that jump is the block's only entry.

    Fewer blocks means fewer dispatch-loop transitions in the emitted code (in
    numba, LLVM does not always thread every transition of a long chain).
    """
    # one sweep: each block absorbs the chain of blocks it is the only entry of (the
    # predecessor lists are updated as blocks go), and the block parameters of every
    # absorbed block are substituted once at the end (a substitution and a predecessor
    # scan of the whole function per merge made this pass quadratic: 20 s of a 24 s
    # transform for a function of 300 sequential loops)
    preds = fn.predecessors()
    subst: Dict[int, Operand] = {}
    entry = fn.order[0]
    for b in list(fn.order):
        blk = fn.blocks.get(b)
        if blk is None:
            continue
        while isinstance(blk.term, Jump):
            c = blk.term.target
            if c == b or c == entry or preds[c] != [b]:
                break
            nxt = fn.blocks[c]
            subst.update({p.id: a for p, a in zip(nxt.params, blk.term.args)})
            blk.stmts += nxt.stmts
            blk.term = nxt.term
            for s in nxt.successors():
                preds[s] = [b if q == c else q for q in preds[s]]
            del preds[c]
            fn.order.remove(c)
            del fn.blocks[c]
    if subst:
        _substitute(fn, subst)
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
    ("redundant-params", remove_redundant_params),
    ("fold-compares", fold_int_compares),
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
