"""Structured emission: nests of counted loops as real nested Python loops.

The dispatch loop (``while True: if _blk == k: ...``) handles any CFG, but every
block transition in it is an indirect jump, and every block that pushes checks
the stack capacity with an exit edge.  On array code with nested loops and
branches (GMM, the ODE) that was most of the gradient's time.  This mixin finds
*structured loop nests* and emits each as one dispatch case:

* a loop is **structured** when it is counted (one entry edge, one latch), is
  ``for i in range(lo, stop, step)`` with ``step > 0`` and ``stop`` fixed during
  the loop (``Emitter.counted_pattern``), has its only exit at the header test
  (no ``break``, no ``return`` inside), and its body, walked from the header's
  in-loop successor back to the header, is a single-entry single-exit region
  made of blocks, ``if``/``else`` diamonds (a branch and its immediate
  post-dominator) and nested structured loops;
* the **primal** of such a nest is real nested ``for _k in range(trip)`` loops
  with ``if``/``else`` inside; the records are the dispatcher's (same tape
  layout: residuals, int8 edge tags on merges, trip counts at loop exits).  The
  stack room of the whole nest is checked **once**, when the outermost loop
  starts, against an upper bound of its pushes computed from the trip counts
  (``stop - start`` as a linear form; an outer loop's counter in it is replaced
  by its extreme value, so ``range(r)`` inside ``for r in range(d)`` counts
  ``d - 1``).  An inner loop whose bound is only known when it
  starts (``range(m)``, ``m`` computed in the body) reserves its own room there,
  growing the stack in place if needed; ``_<s>end`` marks the end of the room
  reserved so far, and array records (of unknown size) push it forward too;
* the **adjoint** of a structured loop is ``while _n > 0: _n -= 1; <body
  backwards>`` with the body's blocks in reverse order; a merge block pops its
  tag and runs the reverse of the arm it came from in an ``if``/``elif``, then
  continues at its immediate dominator (the branch).  Trip counts of nested
  loops whose ``stop`` and ``start`` are known again there are recomputed
  instead of taped (``s_trip_recomputed``).

``STRUCTURED = False`` gives the previous emission (for the ablation in
``benchmarks/NOTES.md``).
"""
from __future__ import annotations

import operator
from typing import Dict, List, Optional, Set, Tuple, Union

from ..ssa.emit import (ORDERED, Block, Capacity, ChainNext, ChainStart, Code, CounterSet, Else, For,
                        Grow, If, Leaf, Pop, Reserve, RoomCheck, SetTop, While, var_name)
from ..ssa.ir import Branch, Const, Jump, Stmt, Var
from ..rules.higher import Checkpointed, Hooked
from ..ssa.prims import GetItem, Recursive
from ..ssa.passes import dominators
from .tape import KIND_STACK

STRUCTURED = True
ADJ_FOR = False            # adjoint loops as ``for _k in range(_n): _n -= 1``: measured 1.4-2.5x slower
TRIP_RECOMPUTE = True      # trip counts of nested structured loops recomputed, not taped
ADJ_FORWARD = True         # reverse of a loop with independent iterations runs them forwards

Expr = Union[int, str]



def _eadd(x: Expr, y: Expr) -> Expr:
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    if x == 0:
        return y
    if y == 0:
        return x
    return f"{x} + {y}"


def _emax(x: Expr, y: Expr) -> Expr:
    if isinstance(x, int) and isinstance(y, int):
        return max(x, y)
    if x == y:
        return x
    return f"max({x}, {y})"


def _emul(t: str, x: Expr) -> Expr:
    if x == 0:
        return 0
    if x == 1:
        return t
    return f"{t} * {x}" if isinstance(x, int) else f"{t} * ({x})"


def _dadd(a: Dict[str, Expr], b: Dict[str, Expr]) -> Dict[str, Expr]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _eadd(out.get(k, 0), v)
    return out


def _dmax(a: Dict[str, Expr], b: Dict[str, Expr]) -> Dict[str, Expr]:
    return {k: _emax(a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b))}


def _nonzero(d: Dict[str, Expr]) -> bool:
    return any(v != 0 for v in d.values())


def _ladd(a: Optional[Dict], b: Optional[Dict]) -> Optional[Dict]:
    if a is None or b is None:
        return None
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0}


def _lscale(a: Optional[Dict], c: int) -> Optional[Dict]:
    return None if a is None else {k: v * c for k, v in a.items() if v * c != 0}


def _lsub(a: Optional[Dict], b: Optional[Dict]) -> Optional[Dict]:
    return _ladd(a, _lscale(b, -1))


def _lrender(a: Dict) -> str:
    """The linear form ``a`` (name -> integer coefficient, None -> the constant) as source."""
    terms = [(a[k], k) for k in sorted((k for k in a if k is not None), key=str)]
    if a.get(None, 0) or not terms:
        terms.append((a.get(None, 0), None))
    text = ""
    for j, (c, k) in enumerate(terms):
        mag = abs(c)
        body = str(mag) if k is None else k if mag == 1 else f"{mag} * {k}"
        text += ("-" if c < 0 else "") + body if j == 0 else (" - " if c < 0 else " + ") + body
    return f"({text})" if len(terms) > 1 or terms[0][0] < 0 else text


class StructuredMixin:
    """Methods of :class:`~zyg.pullbacks.transform.Emitter` for structured loop nests."""

    # -- analysis -------------------------------------------------------------------
    def _find_structured(self) -> None:
        """Choose the structured loop nests (after ``_prepare``: the bound needs the pushes)."""
        self.struct: Dict[int, Tuple[int, int, tuple]] = {}    # header -> (body entry, exit, pattern)
        self.struct_roots: Set[int] = set()
        self.struct_blocks: Set[int] = set()
        if not STRUCTURED:
            return
        loops = self.p.loops
        self._pdoms()
        dom = dominators(self.fn)
        self.idom: Dict[int, Optional[int]] = {}
        for b, ds in dom.items():
            rest = ds - {b}
            self.idom[b] = next((d for d in sorted(rest) if dom[d] == rest), None)
        cand: Dict[int, Tuple[int, int, tuple]] = {}
        for h in sorted(loops, key=lambda h: (len(loops[h]), h)):
            info = self._loop_shape(h, cand)
            if info is not None:
                cand[h] = info
        self.s_cand = cand
        self.s_self: Dict[int, Dict[str, Expr]] = {}     # loop -> its pushes, checked at its entry
        for h in sorted(cand, key=lambda h: (-len(loops[h]), h)):
            if h in self.struct:
                continue
            own: Dict[int, Dict[str, Expr]] = {}
            if self._nest_demand(h, own) is None:
                continue
            self.s_self.update(own)
            self.struct_roots.add(h)
            for h2 in cand:
                if h2 in loops[h]:
                    self.struct[h2] = cand[h2]
            self.struct_blocks |= loops[h]

    def _pdoms(self) -> None:
        """Immediate post-dominators (iterative data flow on the reversed CFG)."""
        fn = self.fn
        allb = set(fn.order)
        exits = [b for b in fn.order if not fn.blocks[b].successors()]
        pd = {b: set(allb) for b in fn.order}
        for b in exits:
            pd[b] = {b}
        changed = True
        while changed:
            changed = False
            for b in reversed(fn.order):
                succ = fn.blocks[b].successors()
                if not succ:
                    continue
                new = set.intersection(*(pd[s] for s in succ)) | {b}
                if new != pd[b]:
                    pd[b] = new
                    changed = True
        self.ipdom: Dict[int, Optional[int]] = {}
        for b in fn.order:
            rest = pd[b] - {b}
            self.ipdom[b] = next((d for d in sorted(rest) if pd[d] == rest), None)

    def _loop_shape(self, h: int, cand) -> Optional[Tuple[int, int, tuple]]:
        """(body entry, exit, counted pattern) when loop ``h`` can be emitted structured."""
        if h not in self.counted:
            return None
        fn = self.fn
        body = self.p.loops[h]
        hb = fn.blocks[h]
        t = hb.term
        if not isinstance(t, Branch) or t.true == t.false or t.true not in body or t.false in body:
            return None
        B, X = t.true, t.false
        pat = self.counted_pattern(hb, fn.blocks[B])
        if pat is None:
            return None
        for b in body - {h}:
            succ = fn.blocks[b].successors()
            if not succ or any(s not in body for s in succ):
                return None          # a break or a return: several exits
        for h2 in self.p.loops:
            if h2 != h and h2 in body and h2 not in cand:
                return None
        seen: Set[int] = set()
        allowed = body - {h}
        if not self._walk(B, h, seen, cand, allowed) or seen != allowed:
            return None
        budget = [4000]
        if not self._bwalk(self.counted[h][1], h, cand, allowed, budget):
            return None
        return B, X, pat

    def _walk(self, b: int, stop: int, seen: Set[int], cand, allowed: Set[int]) -> bool:
        """Forward structure walk of the region from ``b`` to ``stop`` (each block once)."""
        fn = self.fn
        while b != stop:
            if b not in allowed or b in seen:
                return False
            if b in cand:
                inner = self.p.loops[b]
                if inner & seen:
                    return False
                seen |= inner
                b = cand[b][1]
                continue
            if b in self.p.loops:
                return False
            seen.add(b)
            t = fn.blocks[b].term
            if isinstance(t, Jump):
                b = t.target
                continue
            if not isinstance(t, Branch) or t.true == t.false:
                return False
            m = self.ipdom.get(b)
            if m is None or (m not in allowed and m != stop):
                return False
            if not self._walk(t.true, m, seen, cand, allowed) or not self._walk(t.false, m, seen, cand, allowed):
                return False
            b = m
        return True

    def _bwalk(self, b: int, stop: int, cand, allowed: Set[int], budget) -> bool:
        """Backward walk of the adjoint (from the latch to the header) must stay structured."""
        while b != stop:
            budget[0] -= 1
            if budget[0] < 0 or b not in allowed:
                return False
            if b in cand:
                b = self.counted[b][0]
                continue
            ps = self.p.preds[b]
            if len(ps) == 1:
                b = ps[0]
                continue
            if len(set(ps)) != len(ps):
                return False
            d = self.idom.get(b)
            if d is None or (d not in allowed and d != stop):
                return False
            for q in ps:
                if not self._bwalk(q, d, cand, allowed, budget):
                    return False
            b = d
        return True

    # -- the bound on a nest's pushes -------------------------------------------------
    def _base_demand(self, blk) -> Dict[str, Expr]:
        need: Dict[str, Expr] = dict(self.array_block_demand(blk))
        for _, k in self.pushes[blk.id]:
            s = KIND_STACK.get(k, "f")
            need[s] = need.get(s, 0) + 1
        return need

    def _nest_demand(self, h: int, own: Dict[int, Dict[str, Expr]]) -> Optional[Dict[str, Expr]]:
        """Pushes of the nest of ``h``, bounded where it starts, except those of inner loops
        whose bound is only known when they start: those reserve their own room there
        (``own``: loop -> its pushes)."""
        later: Set[int] = set()
        need = self._loop_demand(h, h, later)
        if need is None:
            return None
        for L in sorted(later):
            d = self._nest_demand(L, own)
            if d is None:
                return None
            own[L] = d
        return need

    def _loop_demand(self, h: int, h0: int, later: Set[int]) -> Optional[Dict[str, Expr]]:
        """Upper bound of the pushes of structured loop ``h``, computable where ``h0`` starts;
        inner loops whose bound is not are added to ``later`` and count nothing here."""
        B, X, _ = self.s_cand[h]
        inner: Set[int] = set()
        body = self._region_demand(B, h, h0, inner)
        per = _dadd(body, self._base_demand(self.fn.blocks[h]))
        last = dict(self.block_demand(self.fn.blocks[h]))
        if not _nonzero(per):
            later |= inner
            return last
        trip = self._trip_bound(h, h0)
        if trip is None:
            return None
        later |= inner
        return _dadd({k: _emul(trip, v) for k, v in per.items()}, last)

    def _region_demand(self, b: int, stop: int, h0: int, later: Set[int]) -> Dict[str, Expr]:
        tot: Dict[str, Expr] = {}
        while b != stop:
            if b in self.s_cand:
                inner: Set[int] = set()
                d = self._loop_demand(b, h0, inner)
                if d is None:
                    later.add(b)        # bounded only where it starts: checks its own room
                else:
                    later |= inner
                    tot = _dadd(tot, d)
                b = self.s_cand[b][1]
                continue
            blk = self.fn.blocks[b]
            tot = _dadd(tot, self.block_demand(blk))
            t = blk.term
            if isinstance(t, Jump):
                b = t.target
                continue
            m = self.ipdom[b]
            a1 = self._region_demand(t.true, m, h0, later)
            a2 = self._region_demand(t.false, m, h0, later)
            tot = _dadd(tot, _dmax(a1, a2))
            b = m
        return tot

    def _trip_bound(self, h: int, h0: int) -> Optional[str]:
        """An upper bound of loop ``h``'s trip count, computable where ``h0`` starts.

        ``stop - start`` is formed as a linear expression of values known before ``h0``
        and of the counters of enclosing structured loops; each counter is then replaced
        by its extreme value over its loop (``start <= i <= stop - 1``) on the side that
        makes the expression largest.  So ``range(i, i + 2)`` is bounded by 2, and the
        triangular ``range(r)`` inside ``for r in range(d)`` by ``d - 1``."""
        _, _, (i, stop, step) = self.s_cand[h]
        lin = _lsub(self._lin(stop, h0, h), self._lin(self._start(h), h0, h))
        while lin is not None:
            ctrs = [k for k in lin if isinstance(k, tuple)]
            if not ctrs:
                break
            key = max(ctrs, key=lambda k: (len(self.p.loops_of[k[1]]), k[1]))
            c = lin.pop(key)
            h1 = key[1]
            _, _, (_, stop1, _) = self.s_cand[h1]
            sub = _lsub(self._lin(stop1, h0, h1), {None: 1}) if c > 0 else self._lin(self._start(h1), h0, h1)
            lin = _ladd(lin, _lscale(sub, c))
        if lin is None:
            return None
        e = _lrender(lin)
        if step == 1:
            return f"max(0, {e})"
        return f"max(0, ({e} + {step - 1}) // {step})"

    def _start(self, h: int):
        _, _, (i, _, _) = self.s_cand[h]
        k = next(j for j, p in enumerate(self.fn.blocks[h].params) if p.id == i.id)
        return self.edge_args(self.counted[h][0], h)[k]

    def _lin(self, v, h0: int, use: int) -> Optional[Dict]:
        """``v`` (an int) as {name or ('ctr', header): coefficient, None: constant}, or None."""
        if isinstance(v, Const):
            return {None: v.value} if type(v.value) is int else None
        if not isinstance(v, Var) or self.kind(v) != "int" or v.id not in self.p.defblock:
            return None
        if h0 not in self.p.loops_of[self.p.defblock[v.id]]:
            return {var_name(v): 1}
        for h1, (_, _, (i1, _, step1)) in sorted(self.s_cand.items()):
            if i1.id == v.id and h1 in self.p.loops[h0] and use in self.p.loops[h1] and step1 > 0:
                return {("ctr", h1): 1}
        d = self.def_stmt(v)
        if d is None:
            return None
        e = d[2].expr
        if e.kwargs or len(e.args) != 2 or e.fn not in (operator.add, operator.sub, operator.mul):
            return None
        a, b = e.args
        if e.fn is operator.mul:
            if isinstance(a, Const):
                a, b = b, a
            if not (isinstance(b, Const) and type(b.value) is int):
                return None
            return _lscale(self._lin(a, h0, use), b.value)
        la, lb = self._lin(a, h0, use), self._lin(b, h0, use)
        return _ladd(la, lb) if e.fn is operator.add else _lsub(la, lb)

    # -- primal -----------------------------------------------------------------------
    def s_primal_root(self, h: int, ind: int, code: Code, grows: bool) -> None:
        """The dispatch case of a structured nest: one room check, then the nest."""
        if grows:
            own: Dict[int, Dict[str, Expr]] = {}
            need = self._nest_demand(h, own)
            X = self.struct[h][1]
            if X in self.p_inline:
                need = _dadd(need, self.total_demand(self.fn.blocks[X]))
            self.room_check({s: v for s, v in need.items() if v != 0}, ind, code)
            ends = self.array_stacks()
            for d in own.values():
                ends |= {s for s, v in d.items() if v != 0}
            self.s_reserve(need, ends, ind, code)
        self.s_loop(h, ind, code, goto=True)
        self._s_end = None

    def s_reserve(self, need: Dict[str, Expr], ends: Set[str], ind: int, code: Code) -> None:
        """``_<s>end``: the end of the room reserved on stack ``s``, where records of unknown
        size (arrays, inner loops with their own check) must push it forward."""
        for s in sorted(ends):
            code.put(ind, Reserve(s, str(need.get(s, 0)), start=True))
        self._s_end = ends

    def array_stacks(self) -> Set[str]:
        """Stacks that receive array data (``_zyg_push_array``) or a compiled recursive call's
        records somewhere in the function."""
        from ..ssa.analysis import is_array
        from .arrays import stack_of_array
        out: Set[str] = set()
        for b in self.fn.order:
            for item in self.stmt_pushes.get(b, []) + self.arr_pushes.get(b, []):
                if is_array(item[1]):
                    out.add(stack_of_array(item[1]))
        if any(info.get("kind") == "native" for info in self.astmts.values()):
            # a compiled recursive call pushes records of unknown size too (native.py)
            from .native import STACKS
            out |= set(STACKS)
        return out

    def s_loop(self, h: int, ind: int, code: Code, goto: bool) -> None:
        B, X, (i, stop, step) = self.struct[h]
        rec = self._record
        hb = self.fn.blocks[h]
        trip = f"_trip{h}"
        if step == 1:
            code.add(ind, f"{trip} = {self.src(stop)} - {var_name(i)}")
        else:
            code.add(ind, f"{trip} = ({self.src(stop)} - {var_name(i)} + {step - 1}) // {step}")
        code.put(ind, If(f"{trip} < 0"))
        code.add(ind + 1, f"{trip} = 0")
        if h in self.s_self and getattr(self, "_s_end", None) is not None:
            # its pushes were not bounded where the nest started: reserve them now
            for s, v in sorted(self.s_self[h].items()):
                if v == 0:
                    continue
                code.put(ind, Reserve(s, str(v)))
                code.put(ind, RoomCheck(s, f"_{s}end"))
                code.put(ind + 1, Grow(s, f"_{s}end"))
                code.put(ind + 1, Capacity(s))
        code.put(ind, For(f"_k{h}", f"range({trip})"))
        if rec:
            self.header_entry_records(hb, ind + 1, code)
        self.edge(h, B, hb.term.true_args, ind + 1, code, rec, goto=False)
        self.s_region(B, h, ind + 1, code)
        # the header once more: its test is false, the loop exits
        self.primal_body(hb, ind, code, rec)
        self.edge(h, X, hb.term.false_args, ind, code, rec, goto=goto)

    def s_region(self, b: int, stop: int, ind: int, code: Code) -> None:
        rec = self._record
        while b != stop:
            if b in self.struct:
                self.s_loop(b, ind, code, goto=False)
                b = self.struct[b][1]
                continue
            blk = self.fn.blocks[b]
            self.primal_body(blk, ind, code, rec)
            t = blk.term
            if isinstance(t, Jump):
                self.edge(b, t.target, t.args, ind, code, rec, goto=False)
                b = t.target
                continue
            m = self.ipdom[b]
            code.put(ind, If(self.src(t.cond)))
            for k, (tgt, args) in enumerate(((t.true, t.true_args), (t.false, t.false_args))):
                if k == 1:
                    code.put(ind, Else())
                n0 = len(code)
                self.edge(b, tgt, args, ind + 1, code, rec, goto=False)
                self.s_region(tgt, m, ind + 1, code)
                if len(code) == n0:
                    code.add(ind + 1, "pass")
            b = m

    # -- adjoint ----------------------------------------------------------------------
    def s_adj_loop(self, h: int, ind: int, code: Code, cont) -> None:
        """Reverse of structured loop ``h``, entered from its exit; ends with the transfer
        to the entry edge's source (then ``cont``: None = the dispatcher's jump)."""
        o, latch = self.counted[h]
        hb = self.fn.blocks[h]
        self.adjoint_stmts(hb, ind, code)
        n0 = len(code)
        if ADJ_FOR:
            code.put(ind, For(f"_k{h}", f"range(_n{h})"))
            code.add(ind + 1, f"_n{h} -= 1")
        else:
            code.put(ind, While(f"_n{h} > 0"))
            code.add(ind + 1, f"_n{h} -= 1")
        self._adj_blk = h
        self.adjoint_entry(hb, ind + 1, code, only=latch,
                           cont=lambda q, i2: self.s_adj_region(q, h, i2, code))
        self.adjoint_stmts(hb, ind + 1, code)
        fwd = self.s_adj_forward(h) and self._fwd_state(h, code.tree(n0)[0].body[1:])
        if fwd:
            # the reversed iterations are independent: run them in the forward order
            # (the body reads ``_n{h}`` only as the iteration's number)
            self._fwd_rewrite(h, code, n0, ind, *fwd)
        self.adjoint_entry(hb, ind, code, only=o, cont=cont)

    def s_adj_forward(self, h: int) -> bool:
        """Can the reverse of structured loop ``h`` run its iterations in the forward order?

        Yes when no reversed iteration depends on another: the body of ``h`` is
        straight-line blocks and nested structured loops (no ``if``), writes no array
        (array reads only), and every active header parameter of ``h`` is a sum
        accumulator -- ``p' = p + e`` or ``p - e`` with ``p`` used only there and ``p'``
        only as the latch argument -- so that its cotangent passes unchanged through
        each reversed iteration.  The reversed iterations then only read values fixed
        during the loop and add into cotangents (the order changes only their rounding).
        What ties the emitted body to the backward order is checked once more
        (:meth:`_fwd_state`): tape pops, which become reads at the iteration's own place
        on the tape, and chained counter starts, which are run forwards."""
        if not ADJ_FORWARD or ADJ_FOR:
            return False
        memo = self.__dict__.setdefault("_fwd_memo", {})
        if h not in memo:
            memo[h] = self._s_adj_forward(h)
        return memo[h]

    def _s_adj_forward(self, h: int) -> bool:
        fn = self.fn
        body = self.p.loops[h]
        heads = {h2 for h2 in self.p.loops if h2 in body}
        if any(h2 not in self.struct for h2 in heads):
            return False
        o, latch = self.counted[h]
        uses: Dict[int, int] = {}
        defs: Dict[int, Stmt] = {}

        def use(a) -> None:
            if isinstance(a, Var):
                uses[a.id] = uses.get(a.id, 0) + 1
        for b in body:
            blk = fn.blocks[b]
            t = blk.term
            if b not in heads and not isinstance(t, Jump):
                return False
            if isinstance(t, Branch):
                use(t.cond)
            for tgt, args in t.successors():
                if tgt in body:          # an exit's arguments are read once, after the loop
                    for a in args:
                        use(a)
            for st in blk.stmts:
                if st.var is None or self.extra.get(st.var.id) or _order_bound(st):
                    return False
                k = self.kind(st.var)
                if k not in ("float", "int", "bool"):
                    return False
                if self.is_array_stmt(st) and not (isinstance(st.expr.fn, GetItem)
                                                   and not st.expr.fn.is_view()):
                    return False
                defs[st.var.id] = st
                for a in st.expr.operands():
                    use(a)
        hb = fn.blocks[h]
        back = self.edge_args(latch, h)
        for k, p in enumerate(hb.params):
            if not self.is_active(p):
                continue
            if self.kind(p) != "float":
                return False
            a = back[k]
            st = defs.get(a.id) if isinstance(a, Var) else None
            if st is None or st.expr.kwargs or len(st.expr.args) != 2:
                return False
            x, y = st.expr.args
            isp = [isinstance(v, Var) and v.id == p.id for v in (x, y)]
            if st.expr.fn is operator.add:
                ok = isp[0] != isp[1]
            elif st.expr.fn is operator.sub:
                ok = isp[0] and not isp[1]
            else:
                ok = False
            if not ok or uses.get(p.id, 0) != 1 or uses.get(a.id, 0) != 1:
                return False
        return True

    def _fwd_state(self, h: int, body: List[Union[Block, Leaf]]):
        """What of the reversed body of loop ``h`` (``body``: the statements of its loop
        block after the counter's decrement, from :meth:`Code.tree`) depends on the backward
        order, if it can be run forwards:
        ``(pops, starts)`` -- the items each iteration pops per stack, and the start value
        of each chained counter ``_cur<P>`` of ``h`` (``Emitter.init_chains``); None when
        something else is order-bound (pops or counter state inside a nested loop, a pop
        of a run-time size, a chain whose start is not a constant)."""
        pops: Dict[str, int] = {}
        curs: Set[str] = set()
        for item in body:
            if isinstance(item, Block):
                if any(isinstance(node, ORDERED) for node in item.nodes()):
                    return None         # runs a variable number of times per iteration
                continue
            node = item.node
            if not isinstance(node, ORDERED):
                continue
            if isinstance(node, Pop) and type(node.count) is int:
                pops[node.stack] = pops.get(node.stack, 0) + node.count
            elif isinstance(node, ChainStart):
                curs.add(node.cur)
            elif not isinstance(node, ChainNext):
                return None
        starts: Dict[str, str] = {}
        hb = self.fn.blocks[h]
        entry = self.edge_args(self.counted[h][0], h)
        for P, _, L in self.init_chains().values():
            cur = f"_cur{P.id}"
            if cur not in curs or L != h:
                continue
            k = next(j for j, q in enumerate(hb.params) if q.id == P.id)
            if not isinstance(entry[k], Const) or type(entry[k].value) is not int:
                return None
            starts[cur] = str(entry[k].value)
        if set(starts) != curs:
            return None
        return pops, starts

    def _fwd_rewrite(self, h: int, code: Code, n0: int, ind: int, pops: Dict[str, int],
                     starts: Dict[str, str]) -> None:
        """Turn the backward loop ``while _n<h> > 0: _n<h> -= 1; <body>`` emitted from
        statement ``n0`` into a forward one. Each iteration sets the stack tops to the end
        of its own records, so the body's pops read them where they are; chained starts run
        up from the start value. Afterwards the state is what the backward loop leaves."""
        old = code.truncate(n0)
        code.add(ind, f"_e{h} = _n{h}")
        code.add(ind, f"_n{h} = 0")
        for s, c in sorted(pops.items()):
            if c:
                code.add(ind, f"_{s}base{h} = _{s}sp - {c} * _e{h}")
        for cur, v in sorted(starts.items()):
            code.put(ind, CounterSet(cur, v))
        code.put(ind, While(f"_n{h} < _e{h}"))
        for s, c in sorted(pops.items()):
            if c:
                code.put(ind + 1, SetTop(s, f"_{s}base{h} + {c} * (_n{h} + 1)"))
        pending = None
        for i2, node, loc in old[2:]:
            if i2 == ind + 1 and isinstance(node, ChainStart) and node.cur in starts:
                node, pending = CounterSet(node.ini, node.cur), node.delta
            elif i2 == ind + 1 and pending is not None and isinstance(node, ChainNext):
                node, pending = CounterSet(node.cur, f"{node.ini} + {pending}"), None
            code.put(i2, node, loc)
        code.add(ind + 1, f"_n{h} += 1")
        code.add(ind, f"_n{h} = 0")
        for s, c in sorted(pops.items()):
            if c:
                code.put(ind, SetTop(s, f"_{s}base{h}"))
        for cur, v in sorted(starts.items()):
            code.put(ind, CounterSet(cur, v))

    def s_adj_region(self, b: int, stop: int, ind: int, code: Code) -> None:
        noop = lambda q, i2: None   # noqa: E731
        while b != stop:
            if b in self.struct:
                self.s_adj_loop(b, ind, code, cont=noop)
                b = self.counted[b][0]
                continue
            blk = self.fn.blocks[b]
            self.adjoint_stmts(blk, ind, code)
            ps = self.p.preds[b]
            if len(ps) == 1:
                self.adjoint_entry(blk, ind, code, cont=noop)
                b = ps[0]
                continue
            d = self.idom[b]
            self.adjoint_entry(blk, ind, code, cont=lambda q, i2, d=d: self.s_adj_region(q, d, i2, code))
            b = d

    # -- trip counts recomputed in the adjoint instead of taped -------------------------
    def s_trip_recomputed(self, h: int) -> bool:
        """Is the trip count of nested loop ``h`` recomputed in the adjoint instead of pushed?

        Yes for a loop of structured shape (its only exit is the header test, so it runs
        ``ceil((stop - start) / step)`` times) whose ``stop`` and ``start`` are known
        again where the adjoint leaves the loop: constants, values fixed during every
        loop around ``h``, counters of enclosing loops (recomputed from their counts)
        and counter starts that are popped with the loop's exit records."""
        cand = getattr(self, "s_cand", None)
        if cand is None or h not in cand or not TRIP_RECOMPUTE:
            return False
        memo = self.__dict__.setdefault("_trip_memo", {})
        if h not in memo:
            _, X, (i, stop, _) = cand[h]
            init = self.recompute[i.id][0]
            memo[h] = self._s_known(stop, X, h) and (isinstance(init, str) or self._s_known(init, X, h))
        return memo[h]

    def _s_known(self, v, X: int, h: int) -> bool:
        if isinstance(v, Const):
            return type(v.value) is int
        if not isinstance(v, Var) or self.kind(v) != "int" or v.id not in self.p.defblock:
            return False
        return self.recomputable(v, X) or not self.needs_push(h, self.p.defblock[v.id])

    def s_trip_src(self, h: int) -> str:
        """The recomputed trip count of loop ``h`` (in the adjoint of its exit block)."""
        _, X, (i, stop, step) = self.s_cand[h]
        init = self.recompute[i.id][0]
        lo = init if isinstance(init, str) else self.value_ref(init, {})
        hi = self.value_ref(stop, {})
        if step == 1:
            return f"max(0, {hi} - {lo})"
        return f"max(0, ({hi} - {lo} + {step - 1}) // {step})"


def _order_bound(st: Stmt) -> bool:
    """Does the adjoint of ``st`` have run-time effects whose order matters?  A recursive
    call or a ``zyg.checkpoint`` takes its pullback from the records of the run, newest
    first (``zyg/nested/recursion.py``); a checkpointed loop's runner does the same; a
    ``zyg.hook`` calls the user's function, whose calls are seen in the reverse order.
    The reverse of a loop holding one runs backwards: forwards, an iteration would take
    another iteration's pullback."""
    fn = st.expr.fn
    return isinstance(fn, (Recursive, Checkpointed, Hooked)) or getattr(fn, "_zyg_runner", False)
