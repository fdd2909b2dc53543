"""The reverse-mode transform: SSA function -> Python source of primal + adjoint.

Both halves are emitted as *dispatch loops* over block ids (Python has no goto),
except that nests of counted loops are emitted as real nested loops, each nest one
dispatch case (``structured.py``):

* the primal runs the original CFG; each active call is replaced by its rule's
  forward code; blocks inside loops push their residuals on typed stacks, merge
  blocks record the incoming edge (a scalar for blocks that run once, a stack
  push inside loops); values of blocks that run once are simply kept in scope;
* the adjoint walks the transposed CFG from the return block back to the entry;
  for each block it pops the residuals, runs the rules' pullbacks in reverse
  statement order accumulating cotangents, then hands the cotangents of the
  block parameters to the predecessor it came from (read from the edge record).

Cotangents live in one accumulator per active SSA value (``d<name>``): uses add
to it, and the reverse of the definition consumes it and, in loops, resets it.
Branch arguments are parallel assignments in both directions (swap loops).

``emit_fused`` gives one function returning (value, gradients) - residuals of
once-run blocks need no tape at all; ``emit_split`` gives a primal returning
(value, tape) and an adjoint taking (tape..., dy), used by ``zyg.pullback``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..errors import NoAdjoint
from ..rules import registry
from ..rules.closure import ConvertedRule, passes_cotangent, render, resolve_global
from ..ssa.analysis import (Aliases, activity, array_dtype, array_ndim, differentiable, infer_kinds, is_array,
                            is_tuple, is_complex, loops_of_blocks, natural_loops)
from .arrays import ArrayMixin, zero_of
from .native import NativeMixin
from .structured import StructuredMixin
from ..ssa.emit import (INFIX, PREFIX, ZERO, TapeOverflow, Advance, Capacity, ChainNext, ChainStart, Code, CounterSet,
                        Def, Else, For, Grow, If, Line, Namespace, NoRoom, Peek, Pop, RoomCheck,
                        StackInit, Store, Want, While, const_src, if_chain, var_name)
from ..ssa.lists import check_shared_arrays
from ..ssa.ir import Branch, Const, Function, Jump, Return, Stmt, Undef, Var, callee_name
from ..ssa.passes import dominators, fold_kinds, verify
from ..ssa.tuples import flatten_tuples, n_leaves
from ..rules.linalg import is_tuple_call, split_tuple_calls
from ..rules.higher import recursive_calls
from . import guards
from .helpers import helpers
from .specialize import specialize
from .tape import KIND_STACK, STACKS, grow, has_nan


@dataclass
class Plan:
    """Everything the emitter needs to know about one specialisation."""
    fn: Function
    kinds: Dict[int, str]
    active: Set[int]
    wrt: List[int]
    loops_of: Dict[int, Set[int]]
    preds: Dict[int, List[int]]
    defblock: Dict[int, int]
    backend: Any              # zyg.backends.Backend: what differs between targets
    loops: Dict[int, Set[int]] = field(default_factory=dict)
    aliases: Any = None
    ret_kind: str = "float"
    flat: Any = None          # tuples.Flat when tuple values were replaced by their elements
    ret_parts: Any = None     # the leaves of a returned tuple (seeded from the tuple _dy)
    keep_final: bool = False  # a kernel's adjoint: arguments keep the primal's writes (emit_kernel_step)
    native_self: Any = None   # (fn, kinds, stem): the plan of a compiled recursive pair (native.py)

    @property
    def target(self) -> str:
        """The target's name (cache keys, messages)."""
        return self.backend.name


def check_kinds(fn: Function, kinds: Dict[int, str]) -> None:
    """Report indexing and attributes of values that do not have them, at the user's line."""
    from ..errors import TypeMismatch
    from ..ssa.analysis import const_kind, tuple_class
    from ..ssa.lower import _ATTRS as ARRAY_ATTRS
    from ..ssa.prims import Attr, GetItem, SetItem

    def bad(st, msg, hint=None):
        loc = st.loc
        return TypeMismatch(msg, loc.filename if loc else None, loc.lineno if loc else None,
                            loc.col if loc else None, hint=hint)
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            e = st.expr
            if st.var is not None and kinds.get(st.var.id) == "none" and _numpy_callee(e.fn) and any(
                    is_array(kinds.get(a.id, "undef")) for a in list(e.args) + list(e.kwargs.values())
                    if isinstance(a, Var)):
                # np.put, np.fill_diagonal, np.add.at...: numpy functions that return None write
                # into an argument, which would be differentiated as if nothing were written
                from ..errors import UnsupportedSyntax
                loc = st.loc
                raise UnsupportedSyntax(
                    f"{callee_name(e.fn)}() writes into its array argument, which zyg does not model",
                    loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                    hint="write with indexing (a[idx] = v, a[mask] = v) or np.copyto(a, v)")
            if not isinstance(e.fn, (GetItem, SetItem, Attr)) or not e.args:
                continue
            base = e.args[0]
            k = kinds.get(base.id, "undef") if isinstance(base, Var) else const_kind(base)
            if k == "undef":
                continue
            if isinstance(e.fn, Attr):
                cls = tuple_class(k) if is_tuple(k) else None
                if cls is not None and e.fn.attr in cls._fields:
                    continue
                if cls is not None:
                    raise bad(st, f"{cls.__name__} has no field {e.fn.attr!r}")
                if not is_array(k) or e.fn.attr not in ARRAY_ATTRS:
                    raise bad(st, f"'.{e.fn.attr}' of a {k} value: only arrays have it")
                continue
            if isinstance(e.fn, SetItem) and e.fn.out_of:
                _check_out(e.fn, k, kinds.get(e.args[-1].id, "undef") if isinstance(e.args[-1], Var)
                           else const_kind(e.args[-1]), lambda msg, hint=None: bad(st, msg, hint))
                continue
            if is_array(k) and isinstance(e.fn, SetItem) and array_ndim(k) == 0:
                # the adjoint of a write into a 0-d array loses the cotangent (a zero gradient)
                raise bad(st, "writing into a 0-d array is not supported",
                          "use an array of shape (1,), or a number")
            if is_array(k):
                continue
            if is_tuple(k) and isinstance(e.fn, GetItem) and e.fn.spec == ("i",) and \
                    isinstance(e.args[1], Const):
                continue
            if k == "object" and isinstance(base, Var):
                from .origins import explain, origin_of
                o = origin_of(fn, kinds, base)
                if o is not None and o is not st:
                    raise bad(o, *explain(o))
            what = "a tuple with a non-constant index" if is_tuple(k) else f"a {k} value"
            raise bad(st, f"indexing {what} is not supported",
                      "index numpy arrays (a[i], a[i, j], a[lo:hi]) or tuples with constants (t[0])")


def _numpy_callee(fn) -> bool:
    """A function of numpy or scipy, or a method of a ufunc or of a numpy random generator."""
    own = getattr(fn, "__self__", None)
    if isinstance(own, np.ufunc):
        return True
    mods = (getattr(fn, "__module__", None) or "", getattr(type(own), "__module__", "") if own is not None
            else "")
    if any(m.startswith("numpy.testing") for m in mods):
        return False        # np.testing.assert_allclose(a, b): a check, no write
    return isinstance(fn, np.ufunc) or any(m == "numpy" or m.startswith(("numpy.", "scipy.")) for m in mods)


_SCALAR_DTYPES = {"float": np.float64, "int": np.int64, "bool": np.bool_, "complex": np.complex128}


def _check_out(fn, out_kind: str, value_kind: str, bad) -> None:
    """The write of a numpy function's result into its output argument
    (``zyg/ssa/desugar.lower_out_argument``): refuse what numpy refuses, at the user's line."""
    if not is_array(out_kind):
        raise bad(f"{fn.out_of}: the output argument is a {out_kind} value, not an array",
                  "pass an array as out=, or assign the result")
    if value_kind == "undef":
        return
    if is_array(value_kind):
        vt, vnd = np.dtype(array_dtype(value_kind)), array_ndim(value_kind)
    elif value_kind in _SCALAR_DTYPES:
        vt, vnd = np.dtype(_SCALAR_DTYPES[value_kind]), 0
    else:
        raise bad(f"{fn.out_of}: a {value_kind} result cannot be written into an array")
    ot, ond = np.dtype(array_dtype(out_kind)), array_ndim(out_kind)
    if ond == 0:
        raise bad(f"{fn.out_of}: a 0-d output argument is not supported",
                  "assign the result (a number)")
    # ufuncs broadcast their result into the output argument; reductions, np.cumsum, np.dot
    # and the others want the result's shape
    if vnd > ond or (not fn.broadcast and vnd != ond):
        raise bad(f"{fn.out_of}: the result has {vnd} dimensions, the output argument {ond}",
                  "the output argument must have the shape of the result")
    if not np.can_cast(vt, ot, fn.casting):
        raise bad(f"{fn.out_of}: numpy does not write a {vt} result into a {ot} output argument "
                  f"(casting={fn.casting!r})", "assign the result, or use an output array of its dtype")


def plan(fn: Function, argkinds: List[str], wrt: List[int], backend: Any,
         effects: bool = False) -> Plan:
    """The per-signature plan of ``fn``: kinds, activity, loops, tuples flattened.
    ``backend``: the target's :class:`zyg.backends.Backend` (the driver passes it).
    ``effects``: ``fn`` returns nothing and is differentiated through its writes (a CUDA
    kernel, ``zyg/cuda_kernel.py``)."""
    kinds = infer_kinds(fn, argkinds)
    strong = backend.strong_scalars
    fn = specialize(fn, kinds, strong)
    if fold_kinds(fn, kinds):       # branches the argument kinds decide (x.ndim == 2)
        verify(fn, "fold-kinds")
        kinds = infer_kinds(fn, argkinds)
        fn = specialize(fn, kinds, strong)
    from .ckmut import expand_checkpoints
    if expand_checkpoints(fn, kinds):       # blocks that write their arguments, tuple results
        kinds = infer_kinds(fn, argkinds)
        fn = specialize(fn, kinds, strong)
    kinds = infer_kinds(fn, argkinds)
    check_kinds(fn, kinds)
    flat = None
    if any(is_tuple(k) for k in kinds.values()):
        flat = flatten_tuples(fn, kinds)
        fn = flat.fn
        verify(fn, "flatten_tuples")
        if split_tuple_calls(fn, flat.kinds):     # slogdet, eigh, qr...: one statement per element
            verify(fn, "split_tuple_calls")
        leaf_of, pos = [], 0
        for t in flat.param_trees:
            n = n_leaves(t)
            leaf_of.append(list(range(pos, pos + n)))
            pos += n
        flat.leaf_of = leaf_of
        wrt = [j for i in wrt for j in leaf_of[i]]
        argkinds = [flat.kinds[q.id] for q in fn.params]
        kinds = infer_kinds(fn, argkinds)
    from .rebind import separate_rebound_arrays
    if separate_rebound_arrays(fn, kinds):      # a = np.empty(..) in a loop, then a[i] = ..
        verify(fn, "separate_rebound_arrays")
        kinds = infer_kinds(fn, argkinds)
    ret = next(b for b in fn.iter_blocks() if isinstance(b.term, Return))
    rv = ret.term.value
    rk = kinds.get(rv.id, "undef") if isinstance(rv, Var) else ("none" if rv.value is None else "float")
    if effects and rk == "none":
        pass
    elif rk in ("none", "object") or (not differentiable(rk) and rk not in ("int", "bool", "undef")):
        from ..errors import TypeMismatch
        if rk == "object" and isinstance(rv, Var):
            from .origins import explain, origin_of
            o = origin_of(fn, kinds, rv)
            if o is not None:
                loc = o.loc
                msg, hint = explain(o)
                raise TypeMismatch(msg, loc.filename if loc else None, loc.lineno if loc else None,
                                   loc.col if loc else None, hint=hint)
        raise TypeMismatch(f"{fn.name} ({fn.filename}:{fn.firstlineno}) must return a number to be "
                           "differentiated, but it may return None (or a non-number): is a 'return' missing on "
                           "some path?")
    act = activity(fn, kinds, wrt, lambda f: registry.is_nondifferentiable(f) or is_tuple_call(f),
                   outputs=wrt if effects else ())
    dom = dominators(fn)
    loops = natural_loops(fn, dom)
    defblock = {}
    for blk in fn.iter_blocks():
        for p in blk.params:
            defblock[p.id] = blk.id
        for st in blk.stmts:
            if st.var is not None:
                defblock[st.var.id] = blk.id
    ret_parts = None
    if flat is not None and flat.ret_tree is not None:
        # the returned tuple is not differentiated as a value: its leaves are seeded
        ret_parts = next(st.expr.args for st in ret.stmts if st.var is rv)
        act.discard(rv.id)
    aliases = Aliases(fn, kinds)
    check_shared_arrays(fn, kinds, aliases)      # writes into arrays that a list holds
    return Plan(fn, kinds, act, wrt, loops_of_blocks(fn, loops), fn.predecessors(), defblock, backend,
                loops, aliases, rk, flat, ret_parts)


INIT_CHAIN = True     # starts of chained inner counters recomputed backwards (Emitter.init_chains)


def _emul_int(step: int, n: str) -> str:
    return n if step == 1 else f"{step} * {n}" if step >= 0 else f"({step}) * {n}"


class Emitter(NativeMixin, ArrayMixin, StructuredMixin):
    def __init__(self, p: Plan):
        self.p = p
        self.fn = p.fn
        self.al = p.aliases
        self.ns = Namespace(p.backend.wrap)
        self.stack_used: Set[str] = set()
        self.tag_scalars: List[str] = []
        self.adj_uses: Set[str] = set()       # primal names read by the adjoint (no tape)
        self.pushes: Dict[int, List[Tuple[str, str]]] = {}   # block -> [(name, kind)]
        self.extra: Dict[int, List[Tuple[str, str]]] = {}    # stmt var id -> [(name, kind)] of fwd residuals
        self.helpers_made: Dict[Tuple[int, str], str] = {}
        self.rules: Dict[int, ConvertedRule] = {}
        # zero-cotangent tests (adjoint_stmt): False leaves out those inside loops, where
        # they cost most; the fused gradient then checks its outputs for nan instead
        self.zero_guards = True
        self.loop_guards = 0
        # the code is lowered and differentiated again (forward over reverse): the zero
        # tests are calls of guards.nonzero, which forward mode knows
        self.relowered = False
        # parameters whose shadows the caller passes to the primal (emit_step): the primal
        # allocates none for them, and the adjoint accumulates into the caller's arrays
        self.given_shadows: Set[int] = set()
        # given parameters whose element reads add into their shadow atomically (threads
        # of a parallel loop share it): see arrays.adjoint_array_stmt and pullbacks/atomics.py
        self.atomic_shadows: Set[int] = set()
        self._find_counted_loops()
        self._find_simple_loops()
        self._prepare()
        self._find_structured()         # structured.py: needs the pushes of _prepare
        for h in [h for h in self.simple_loops if h in self.struct_blocks]:
            del self.simple_loops[h]
        self.loop_bodies = set(self.simple_loops.values())     # (their own cases: primal())
        self._find_inlining()

    # -- helpers ------------------------------------------------------------------
    def kind(self, v) -> str:
        if isinstance(v, Var):
            return self.p.kinds.get(v.id, "undef")
        from ..ssa.analysis import const_kind
        return const_kind(v)

    def is_active(self, v) -> bool:
        return isinstance(v, Var) and v.id in self.p.active

    def cplx(self, st: Stmt) -> bool:
        """Does statement ``st`` have a complex operand or result (docs/complex.md)?"""
        vals = list(st.expr.operands()) + ([st.var] if st.var is not None else [])
        return any(is_complex(self.kind(a)) for a in vals)

    def proj(self, target, text: str, cplx: bool = True) -> str:
        """A cotangent contribution for ``target``: a real value promoted to complex gets
        the real part of its complex cotangent."""
        if cplx and not is_complex(self.kind(target)):
            return f"({text}).real"
        return text

    def src(self, a) -> str:
        return var_name(a) if isinstance(a, Var) else const_src(a, self.ns)

    def room_check(self, need: Dict[str, Any], ind: int, code: Code) -> None:
        """Leave the dispatch case (to grow the tape) when a stack lacks room for ``need``
        more entries (stack name -> count or count expression)."""
        if need:
            code.put(ind, NoRoom(tuple((s, need[s]) for s in sorted(need))))
            for s in sorted(need):
                code.put(ind + 1, Want(s, f"_{s}sp + {need[s]}"))
            code.add(ind + 1, "break")

    def in_loop(self, b: int) -> bool:
        return bool(self.p.loops_of[b])

    def needs_push(self, use_block: int, def_block: int) -> bool:
        return bool(self.p.loops_of[use_block] & self.p.loops_of[def_block])

    def active_stmt(self, st: Stmt) -> bool:
        return st.var is not None and self.is_active(st.var) and any(
            self.is_active(a) for a in st.expr.operands())

    def rule_for(self, blk, st: Stmt) -> ConvertedRule:
        from ..ssa.prims import Recursive
        from ..rules.higher import Checkpointed, Hooked, hook_rule
        if isinstance(st.expr.fn, (Recursive, Checkpointed)):
            return recursive_calls().recursive_rule(st.expr.fn.fn, [self.kind(a) for a in st.expr.args],
                                  self.kind(st.var), self.p.target,
                                  checkpoint=isinstance(st.expr.fn, Checkpointed))
        r = registry.lookup(st.expr.fn) if not isinstance(st.expr.fn, Hooked) else hook_rule(st.expr.fn)
        if r is None:
            loc = st.loc
            name = callee_name(st.expr.fn)
            raise NoAdjoint(
                f"no adjoint rule for {name}, which this differentiated function calls",
                loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                hint=f"write a rule with @zyg.adjoint({name}), declare it with "
                     f"zyg.nondifferentiable, or wrap the value in zyg.stop_gradient")
        if self.cplx(st):
            rc = registry.for_complex(r)
            if rc is None:
                from ..errors import TypeMismatch
                loc = st.loc
                raise TypeMismatch(f"{callee_name(st.expr.fn)} is called with complex numbers, and zyg "
                                   "has no complex rule for it", loc.filename if loc else None,
                                   loc.lineno if loc else None, loc.col if loc else None,
                                   hint="use the numpy or cmath function (np.sin, cmath.exp, abs), "
                                        "see docs/complex.md")
            r = rc
        if st.expr.kwargs:
            loc = st.loc
            raise NoAdjoint(f"keyword arguments to {callee_name(st.expr.fn)} are not supported "
                            "in differentiated calls", loc.filename, loc.lineno, loc.col)
        conv = r.converted
        if len(conv.params) != len(st.expr.args):
            loc = st.loc
            hint = None
            if st.expr.fn is math.log and len(st.expr.args) == 2:
                hint = "zyg differentiates math.log(x) only; for a base b write math.log(x) / math.log(b)"
            raise NoAdjoint(f"the rule for {callee_name(st.expr.fn)} takes {len(conv.params)} "
                            f"arguments but is called with {len(st.expr.args)}",
                            loc.filename, loc.lineno, loc.col, hint=hint)
        return conv

    def _find_counted_loops(self) -> None:
        """Loops entered by one edge and closed by one latch record a trip count, not tags.

        The adjoint of the header then goes back to the latch while the count is
        positive.  A count is pushed on the int stack when leaving a loop that is
        itself inside a loop.  Integer header parameters stepped by a constant
        (loop counters) are recomputed from the count instead of being recorded.
        """
        self.counted: Dict[int, Tuple[int, int]] = {}
        self.recompute: Dict[int, Tuple[Any, int, int]] = {}
        # counters of nested loops whose start value changes between entries (t = t0 + r):
        # the start is pushed when the loop exits, with the trip count
        self.init_push: Dict[int, List[Tuple[str, str]]] = {}
        self.init_src: Dict[Tuple[int, str], Tuple[Any, Any, int]] = {}
        for h, body in self.p.loops.items():
            ps = self.p.preds[h]
            if len(ps) != 2:
                continue
            inside = [q for q in ps if q in body]
            outside = [q for q in ps if q not in body]
            if len(inside) != 1 or len(outside) != 1:
                continue
            o, latch = outside[0], inside[0]
            self.counted[h] = (o, latch)
            oargs = self.edge_args(o, h)
            largs = self.edge_args(latch, h)
            stmts = {st.var.id: st for b in body for st in self.fn.blocks[b].stmts if st.var is not None}
            for k, prm in enumerate(self.fn.blocks[h].params):
                if self.kind(prm) != "int":
                    continue
                init, nxt = oargs[k], largs[k]
                pushed_init = isinstance(init, Var) and self.needs_push(h, self.p.defblock[init.id])
                if pushed_init and (len(self.p.loops_of[h]) < 2 or self.kind(init) != "int"):
                    continue
                if not isinstance(nxt, Var) or nxt.id not in stmts:
                    continue
                e = stmts[nxt.id].expr
                import operator as _op
                step = None
                if e.fn is _op.add and len(e.args) == 2:
                    a, b = e.args
                    if isinstance(a, Var) and a.id == prm.id and isinstance(b, Const) and type(b.value) is int:
                        step = b.value
                    elif isinstance(b, Var) and b.id == prm.id and isinstance(a, Const) and type(a.value) is int:
                        step = a.value
                elif e.fn is _op.sub and len(e.args) == 2:
                    a, b = e.args
                    if isinstance(a, Var) and a.id == prm.id and isinstance(b, Const) and type(b.value) is int:
                        step = -b.value
                if step is not None:
                    if pushed_init:
                        self.init_push.setdefault(h, []).append((var_name(init), f"_ini{prm.id}"))
                        self.init_src[(h, f"_ini{prm.id}")] = (init, prm, step)
                        init = f"_ini{prm.id}"
                    self.recompute[prm.id] = (init, step, h)
        self.count_scalars = [f"_n{h}" for h in sorted(self.counted)]

    def exit_items(self, src: int, target: int) -> List[Tuple[str, str]]:
        """What the edge src->target pushes for the nested counted loops it leaves:
        each loop's trip count and the start values of its recomputed counters (except
        chained ones, see :meth:`init_chains`), and the final values of the counters
        that chained starts are recomputed from."""
        out = []
        for h in self.exited_counts(src, target):
            if not self.s_trip_recomputed(h):
                out.append((f"_n{h}", "int"))
            chained = self.init_chains()
            out += [(name, "int") for name, ini in self.init_push.get(h, []) if (h, ini) not in chained]
            out += [(var_name(P), "int") for P, _ in self.chain_heads().get(h, [])]
        return out

    def exit_pops(self, src: int, target: int, roles: bool = False) -> list:
        """Adjoint names the exit items are popped into, in push order (with ``roles``:
        ``(name, state)`` pairs, ``state`` true for counter state carried between the
        iterations of an enclosing loop: a counter start, a chained counter)."""
        out = []
        for h in self.exited_counts(src, target):
            if not self.s_trip_recomputed(h):
                out.append((f"_n{h}", False))
            chained = self.init_chains()
            out += [(ini, True) for _, ini in self.init_push.get(h, []) if (h, ini) not in chained]
            out += [(cur, True) for _, cur in self.chain_heads().get(h, [])]
        return out if roles else [name for name, _ in out]

    def init_chains(self) -> Dict[Tuple[int, str], Tuple[Any, int, int]]:
        """Starts of inner-loop counters recomputed backwards instead of pushed.

        In ``for r in range(d): for c in range(r): ... t += 1`` the inner loop's ``t``
        starts at the outer loop's ``t``, whose next value is the inner ``t`` at exit.
        The adjoint walks the outer loop backwards, so from the outer ``t``'s final
        value (``_cur<P>``, pushed once when the outer loop exits, or read after it when
        it is not nested) each start is ``_cur - step * trip`` and becomes the next
        ``_cur``: one int per outer loop instead of one per inner loop.  Needs the inner
        trip count recomputed in the adjoint, the inner loop directly inside the outer
        one, the outer parameter's latch value the inner counter itself, and the
        counter not the inner ``range``'s own (its trip count needs its start).
        ``(inner header, start name) -> (outer parameter P, step, outer header)``."""
        cand = getattr(self, "s_cand", None)
        if cand is None or not INIT_CHAIN:
            return {}
        memo = self.__dict__.get("_chains")
        if memo is not None:
            return memo
        out: Dict[Tuple[int, str], Tuple[Any, int, int]] = {}
        for (h, ini), (P, prm, step) in sorted(self.init_src.items(), key=lambda x: (x[0][0], x[0][1])):
            if not self.s_trip_recomputed(h) or cand[h][2][0].id == prm.id:
                continue
            if not isinstance(P, Var) or P.id not in self.p.defblock:
                continue
            L = self.p.defblock[P.id]
            if L not in self.counted or L == h or not any(q.id == P.id for q in self.fn.blocks[L].params):
                continue
            if self.p.loops_of[h] != self.p.loops_of[L] | {h}:
                continue
            k = next(j for j, q in enumerate(self.fn.blocks[L].params) if q.id == P.id)
            nxt = self.edge_args(self.counted[L][1], L)[k]
            if not isinstance(nxt, Var) or nxt.id != prm.id:
                continue
            out[(h, ini)] = (P, step, L)
        self._chains = out
        return out

    def chain_heads(self) -> Dict[int, List[Tuple[Any, str]]]:
        """Outer loop -> [(P, name of its running value in the adjoint)] for the chains."""
        out: Dict[int, List[Tuple[Any, str]]] = {}
        for P, _, L in self.init_chains().values():
            if all(q.id != P.id for q, _ in out.get(L, [])):
                out.setdefault(L, []).append((P, f"_cur{P.id}"))
        return out

    def recomputable(self, a, blk_id: int) -> bool:
        """A loop counter is recomputed from the trip count inside its loop only: after
        the loop the count of a nested loop has been restored for another iteration."""
        if not isinstance(a, Var) or a.id not in self.recompute:
            return False
        h = self.recompute[a.id][2]
        return blk_id in self.p.loops[h]

    def edge_args(self, src: int, target: int):
        t = self.fn.blocks[src].term
        if isinstance(t, Jump):
            return t.args
        return t.true_args if t.true == target else t.false_args

    def exited_counts(self, src: int, target: int) -> List[int]:
        """Counted loops inside other loops that the edge src->target leaves, innermost first."""
        out = [h for h in self.p.loops_of[src] - self.p.loops_of[target]
               if h in self.counted and len(self.p.loops_of[h]) > 1]
        return sorted(out, key=lambda h: -len(self.p.loops_of[h]))

    def _prepare(self) -> None:
        """Find the rules, the residuals each block records and the edge records."""
        for blk in self.fn.iter_blocks():
            pushes: List[Tuple[str, str]] = []
            for st in blk.stmts:
                if self.is_array_stmt(st) or not self.active_stmt(st):
                    continue
                conv = self.rule_for(blk, st)
                self.rules[st.var.id] = conv
                if conv.fwd_src is not None:
                    ex = [(f"{var_name(st.var)}_r{j}", "float") for j, _ in enumerate(conv.extra_res)]
                    self.extra[st.var.id] = ex
                    if self.in_loop(blk.id):
                        pushes += ex
                for name in self.needed_names(st, conv):
                    if name in conv.params:
                        a = st.expr.args[conv.params.index(name)]
                    elif name == conv.out:
                        a = st.var
                    else:
                        continue
                    if isinstance(a, Var) and not self.recomputable(a, blk.id) and \
                            self.needs_push(blk.id, self.p.defblock[a.id]) and not self.remat(a, blk.id):
                        pushes.append((var_name(a), self.kind(a)))
                if conv.bwd_src is not None:
                    # the generated bwd takes all parameters (and the output)
                    for a in list(st.expr.args) + ([st.var] if conv.out else []):
                        if isinstance(a, Var) and not self.recomputable(a, blk.id) and \
                                self.needs_push(blk.id, self.p.defblock[a.id]) and not self.remat(a, blk.id):
                            pushes.append((var_name(a), self.kind(a)))
            seen = set()
            uniq = []
            for name, k in pushes:
                if name not in seen:
                    seen.add(name)
                    uniq.append((name, k))
            self.pushes[blk.id] = uniq
            for _, k in uniq:
                self.stack_used.add(KIND_STACK.get(k, "f"))
        self.prepare_arrays()
        for h in self.counted:
            if len(self.p.loops_of[h]) > 1:
                self.stack_used.add("i")
        for b, ps in self.p.preds.items():
            if len(ps) > 1 and b not in self.counted:
                if len(ps) > 127:
                    raise NotImplementedError("a block with more than 127 predecessors")
                if self.in_loop(b):
                    self.stack_used.add("t")
                else:
                    self.tag_scalars.append(f"_tag{b}")

    def needed_names(self, st: Stmt, conv: ConvertedRule) -> List[str]:
        """Free names of ``back`` that the entries for the active arguments read."""
        if conv.back_exprs is None:
            return list(conv.free)
        import ast as _ast
        names: Set[str] = set()
        for i, a in enumerate(st.expr.args):
            if self.is_active(a) and conv.nonzero[i]:
                names |= {n.id for n in _ast.walk(conv.back_exprs[i]) if isinstance(n, _ast.Name)}
        return [n for n in conv.free if n in names]

    def helper(self, conv: ConvertedRule, which: str) -> str:
        """Name of the generated fwd/bwd function of a rule (built once per rule and target)."""
        key = (id(conv), which)
        if key in self.helpers_made:
            return self.helpers_made[key]
        name = self._make_helper(conv, which)
        self.helpers_made[key] = name
        return name

    def _make_helper(self, conv: ConvertedRule, which: str) -> str:
        src = conv.fwd_src if which == "fwd" else conv.bwd_src
        fobj = self.p.backend.function(src, f"<zyg rule {conv.name}>", dict(conv.globals),
                                       f"{conv.name}_{which}")
        return self.ns.ref(fobj, f"{conv.name}_{which}")

    # -- stack code ----------------------------------------------------------------
    def block_demand(self, blk) -> Dict[str, int]:
        """Most slots each stack may receive while ``blk`` runs (residuals + edge tag)."""
        need: Dict[str, int] = self.array_block_demand(blk)
        for _, k in self.pushes[blk.id]:
            s = KIND_STACK.get(k, "f")
            need[s] = need.get(s, 0) + 1
        if any(len(self.p.preds[t]) > 1 and self.in_loop(t) and t not in self.counted
               for t in blk.successors()):
            need["t"] = need.get("t", 0) + 1
        exits = max([len(self.exit_items(blk.id, t)) for t in blk.successors()] or [0])
        if exits:
            need["i"] = need.get("i", 0) + exits
        return need

    def push_code(self, items: List[Tuple[str, str]], ind: int, code: Code) -> None:
        """Store items on their stacks; capacity was checked when the block started."""
        by: Dict[str, List[str]] = {}
        for name, k in items:
            by.setdefault(KIND_STACK.get(k, "f"), []).append(name)
        for s, names in by.items():
            n = len(names)
            for j, name in enumerate(names):
                code.put(ind, Store(s, j, name))
            code.put(ind, Advance(s, n))

    # -- primal --------------------------------------------------------------------
    def primal_stmt(self, blk, st: Stmt, ind: int, code: Code) -> None:
        if id(st) in self.astmts:
            self.primal_array_stmt(blk, st, ind, code, self._record)
            return
        e = st.expr
        lhs = var_name(st.var) + " = " if st.var is not None else ""
        args = [self.src(a) for a in e.args]
        from ..ssa.prims import Recursive
        from ..rules.higher import Checkpointed
        if isinstance(e.fn, (Recursive, Checkpointed)) and (st.var is None or st.var.id not in self.rules):
            # a recursive call whose result is not differentiated: a plain call
            h = self.ns.ref(recursive_calls().call_helper(e.fn.fn, [self.kind(a) for a in e.args],
                                        self.kind(st.var) if st.var is not None else "float",
                                        self.p.target, record=False))
            code.add(ind, f"{lhs}{h}({', '.join(args)})", st.loc)
            return
        if st.var is not None and st.var.id in self.rules:
            conv = self.rules[st.var.id]
            if conv.fwd_expr is not None:
                used: Set[str] = set()
                mapping = dict(zip(conv.params, args))
                text = render(conv.fwd_expr, mapping, used)
                for g in sorted(used):
                    bound = self.ns.bind(g, resolve_global(conv, g))
                    if bound != g:
                        mapping[g] = bound
                if any(mapping.get(g, g) != g for g in used):
                    text = render(conv.fwd_expr, mapping, set())
                code.add(ind, lhs + text, st.loc)
            else:
                h = self.helper(conv, "fwd")
                code.add(ind, f"_t = {h}({', '.join(args)})", st.loc)
                code.add(ind, f"{var_name(st.var)} = _t[0]", st.loc)
                for j, (name, _) in enumerate(self.extra[st.var.id]):
                    code.add(ind, f"{name} = _t[{j + 1}]", st.loc)
            return
        if e.fn in INFIX and len(args) == 2 and not e.kwargs:
            code.add(ind, f"{lhs}{args[0]} {INFIX[e.fn]} {args[1]}", st.loc)
        elif e.fn in PREFIX and len(args) == 1 and not e.kwargs:
            code.add(ind, f"{lhs}{PREFIX[e.fn]}{args[0]}", st.loc)
        else:
            f = self.ns.ref(e.fn)
            args += [f"{k}={self.src(v)}" for k, v in e.kwargs.items()]
            code.add(ind, f"{lhs}{f}({', '.join(args)})", st.loc)

    def edge(self, src_blk: int, target: int, args, ind: int, code: Code, record: bool,
             goto: bool = True) -> None:
        """The edge src_blk -> target: parameter transfer and records, then (``goto``) the
        jump: the target inlined or ``_blk = target``."""
        params = self.fn.blocks[target].params
        if params:
            lhs = [var_name(p) for p in params]
            # an undefined operand (a path that raised) keeps the parameter's kind for numba
            rhs = [self.placeholder_of(self.kind(p)) if isinstance(a, Undef) else self.src(a)
                   for p, a in zip(params, args)]
            if record:
                # written arrays carry their shadow along (pointers, as the values)
                for p, a in zip(params, args):
                    if p.id in self.shadow_roots and self.mutable(p):
                        lhs.append(self.dname(p))
                        rhs.append(self.shadow_primal(a))
            code.add(ind, f"{', '.join(lhs)} = {', '.join(rhs)}")
        ps = self.p.preds[target]
        if record:
            ex = self.exit_items(src_blk, target)
            if ex:
                self.push_code(ex, ind, code)
        if record and target in self.counted:
            if src_blk == self.counted[target][0]:
                code.add(ind, f"_n{target} = 0")
            else:
                code.add(ind, f"_n{target} += 1")
        elif record and len(ps) > 1:
            k = ps.index(src_blk)
            if self.in_loop(target):
                self.push_code([(str(k), "tag")], ind, code)
            else:
                code.add(ind, f"_tag{target} = {k}")
        if not goto:
            return
        if target in self.p_inline:
            self.primal_block(self.fn.blocks[target], ind, code, record, self._grows, inlined=True)
            return
        code.add(ind, f"_blk = {target}")

    def primal(self, code: Code, ind: int, record: bool) -> None:
        """The primal dispatch loop.

        A block that pushes first checks that its stacks have room; if not it
        leaves the dispatch loop *before running*, the stacks grow outside, and
        the block restarts.  Keeping buffer reassignment out of the hot loop
        keeps numba from adding reference-count traffic to every iteration.
        """
        grows = record and bool(self.stack_used)
        self._record = record
        self._grows = grows
        most: Dict[str, int] = {}
        for blk in self.fn.iter_blocks():
            for s, n in self.total_demand(blk).items():
                most[s] = max(most.get(s, 0), n)
        self._most = most          # room an array push leaves free (ArrayMixin.push_now)
        entry = self.fn.blocks[self.fn.order[0]]
        hoisted = self.entry_hoistable(entry)
        if hoisted:
            # the entry block runs once, first: outside the dispatch loop its arrays have
            # one unconditional definition (numba 0.68 mis-resolved arrays defined in
            # the dispatch loop's entry case inside deep branches of the adjoint)
            self.primal_block(entry, ind, code, record, grows, inlined=True)
        else:
            code.add(ind, f"_blk = {self.fn.order[0]}")
        # 'while _blk >= 0' rather than 'while True': numba 0.68 failed to type a float
        # accumulated in a 'while True' dispatch loop left only by 'break' ("type of
        # variable 'dx_1.1.1' cannot be determined"; found by tests/test_property.py)
        if grows:
            code.put(ind, While("_blk >= 0"))
            ind += 1
        code.put(ind, While("_blk >= 0"))
        def case(bid: int, i2: int) -> None:
            blk = self.fn.blocks[bid]
            if blk.id in self.struct_roots:
                # a structured loop nest: real nested loops (structured.py)
                self.s_primal_root(blk.id, i2, code, grows)
                return
            if blk.id in self.simple_loops:
                # a two-block loop runs as a real while loop inside its case
                body = self.fn.blocks[self.simple_loops[blk.id]]
                if self.counted_loop(blk, body, i2, code, record, grows):
                    return
                code.put(i2, While("True"))
                self.primal_block(blk, i2 + 1, code, record, grows)
                code.put(i2 + 1, If(f"_blk != {body.id}"))
                code.add(i2 + 2, "break")
                self.primal_block(body, i2 + 1, code, record, grows)
                if grows:
                    code.put(i2, If(f"_blk == {blk.id} or _blk == {body.id}"))
                    code.add(i2 + 1, "break")
                return
            self.primal_block(blk, i2, code, record, grows)
        # the body of a two-block loop runs inside its header's case; its own case is
        # entered only to restart it after the stacks grew (its room check left the loop)
        restarts = {b for h, b in self.simple_loops.items()
                    if record and grows and self.total_demand(self.fn.blocks[b])
                    and not (COUNTED_FOR and self.counted_pattern(self.fn.blocks[h],
                                                                  self.fn.blocks[b]))}
        dispatch(code, ind + 1, [b for b in self.fn.order if b not in self.p_inline
                                 and not (hoisted and b == entry.id)
                                 and (b not in self.struct_blocks or b in self.struct_roots)
                                 and (b not in self.loop_bodies or b in restarts)], case)
        if grows:
            code.put(ind, If("_blk == -1"))
            code.add(ind + 1, "break")
            for s in sorted(self.stack_used):
                room = most.get(s, 0) + 64
                # _<s>want: the room a whole counted loop asked for (hoisted_check)
                code.put(ind, RoomCheck(s, f"_{s}sp + {room}", want=True))
                code.put(ind + 1, Grow(s, f"max(_{s}sp + {room}, _{s}want)"))
                code.put(ind + 1, Capacity(s))
                code.put(ind + 1, Want(s, "0"))

    def primal_block(self, blk, i2: int, code: Code, record: bool, grows: bool,
                     inlined: bool = False) -> None:
        need = self.total_demand(blk) if record and not inlined else {}
        if need:
            code.put(i2, NoRoom(tuple(sorted(need.items()))))
            code.add(i2 + 1, "break")
        self.primal_body(blk, i2, code, record)
        self.primal_term(blk, i2, code, record, grows)

    def primal_body(self, blk, i2: int, code: Code, record: bool) -> None:
        """A block's statements and records, without its terminator."""
        if record:
            first = blk.id == self.fn.order[0]
            for p in blk.params:
                if first and p.id in self.given_shadows:
                    continue
                if p.id in self.shadow_roots and (first or not self.mutable(p)):
                    self.alloc_shadow(p, i2, code, self.in_loop(blk.id) and not first)
        for st in blk.stmts:
            self.primal_stmt(blk, st, i2, code)
        if record and self.pushes[blk.id]:
            self.push_code(self.pushes[blk.id], i2, code)
        if record:
            self.push_block_arrays(blk, i2, code)

    def primal_term(self, blk, i2: int, code: Code, record: bool, grows: bool) -> None:
        t = blk.term
        if isinstance(t, Jump):
            self.edge(blk.id, t.target, t.args, i2, code, record)
        elif isinstance(t, Branch):
            code.put(i2, If(self.src(t.cond)))
            self.edge(blk.id, t.true, t.true_args, i2 + 1, code, record)
            code.put(i2, Else())
            self.edge(blk.id, t.false, t.false_args, i2 + 1, code, record)
        else:
            code.add(i2, f"_ret = {self.src(t.value)}")
            if grows:
                code.add(i2, "_blk = -1")
            code.add(i2, "break")

    def _find_inlining(self) -> None:
        """Blocks emitted inside the block that jumps to them instead of as dispatch cases.

        Primal: a block with one predecessor (not a loop header, not part of a
        two-block loop) runs right after it.  Adjoint: a block with one successor
        is only ever entered, backwards, from that successor's adjoint.  This
        removes most dispatches (each one an unpredictable indirect jump) from
        code with branches and nested loops.
        """
        special = set(self.simple_loops) | set(self.simple_loops.values()) | self.struct_blocks
        entry = self.fn.order[0]
        self.p_inline: Set[int] = set()
        self.a_inline: Set[int] = set()
        for b in self.fn.order:
            ps = self.p.preds[b]
            if b != entry and b not in self.p.loops and b not in special and len(ps) == 1 \
                    and ps[0] not in special:
                self.p_inline.add(b)
            succ = set(self.fn.blocks[b].successors())
            if len(succ) == 1 and b not in special and not (succ & special) and b not in self.p.loops and \
                    len(self.fn.blocks[b].successors()) == 1:
                self.a_inline.add(b)

    def counted_pattern(self, head, body):
        """``(i, stop, step)`` when the two-block loop is ``for i in range(lo, stop, step)``
        with step > 0 and ``stop`` fixed during the loop (its header only tests
        ``i < stop``), else None."""
        import operator as _op
        if len(head.stmts) != 1 or not isinstance(head.term, Branch):
            return None
        st = head.stmts[0]
        e = st.expr
        if e.fn is not _op.lt or len(e.args) != 2 or head.term.cond != st.var:
            return None
        i, stop = e.args
        if not isinstance(i, Var) or i.id not in self.recompute or self.recompute[i.id][2] != head.id:
            return None
        step = self.recompute[i.id][1]
        if step <= 0 or head.term.true != body.id:
            return None
        if isinstance(stop, Var) and (self.p.defblock.get(stop.id) in self.p.loops[head.id]):
            return None
        if self.kind(stop) != "int":
            return None
        return i, stop, step

    def counted_loop(self, head, body, ind: int, code: Code, record: bool, grows: bool) -> bool:
        """Emit a counted two-block loop as ``for _k in range(trip)`` over its body,
        then its header once (the test is false: the loop exit).  The stack room of
        all iterations is checked once before it starts, so the body has no exit:
        a canonical loop that LLVM optimises as it does the primal's."""
        pat = self.counted_pattern(head, body) if COUNTED_FOR else None
        if pat is None:
            return False
        i, stop, step = pat
        trip = f"_trip{head.id}"
        code.add(ind, f"{trip} = ({self.src(stop)} - {var_name(i)} + {step - 1}) // {step}")
        code.put(ind, If(f"{trip} < 0"))
        code.add(ind + 1, f"{trip} = 0")
        if record and grows:
            dh = self.total_demand(head)
            db = self.total_demand(body)
            need = {k: f"{dh.get(k, 0)} * ({trip} + 1) + {db.get(k, 0)} * {trip}"
                    for k in set(dh) | set(db)}
            self.room_check(need, ind, code)
            self.s_reserve(need, self.array_stacks(), ind, code)
        code.put(ind, For(f"_k{head.id}", f"range({trip})"))
        if record:
            self.header_entry_records(head, ind + 1, code)
        self.primal_block(body, ind + 1, code, record, grows, inlined=True)
        self.primal_block(head, ind, code, record, grows, inlined=True)
        self._s_end = None
        return True

    def entry_hoistable(self, entry) -> bool:
        """The entry block (and the blocks inlined into it) push nothing and do not return."""
        if self.total_demand(entry):
            return False
        todo = [entry]
        while todo:
            b = todo.pop()
            if isinstance(b.term, Return):
                return False
            todo += [self.fn.blocks[t] for t in set(b.successors()) if t in self.p_inline]
        return True

    def total_demand(self, blk) -> Dict[str, int]:
        """Stack slots a block and the blocks inlined into it may push (checked once)."""
        need = dict(self.block_demand(blk))
        for t in set(blk.successors()):
            if t in self.p_inline:
                for k, v in self.total_demand(self.fn.blocks[t]).items():
                    need[k] = need.get(k, 0) + v
        return need

    def _find_simple_loops(self) -> None:
        """Loops of a header H and one body block B (H: test; B: body, jump back to H).

        They are emitted as real ``while`` loops inside H's dispatch case: LLVM
        does not thread jumps through the dispatch loop's header, so a hot loop
        that goes round the dispatcher pays a switch per block.
        """
        self.simple_loops: Dict[int, int] = {}
        for h, body in self.p.loops.items():
            if len(body) != 2:
                continue
            (b,) = body - {h}
            hb, bb = self.fn.blocks[h], self.fn.blocks[b]
            if not isinstance(hb.term, Branch) or not isinstance(bb.term, Jump) or bb.term.target != h:
                continue
            if self.p.preds[b] != [h] or [hb.term.true, hb.term.false].count(b) != 1:
                continue
            self.simple_loops[h] = b

    # -- adjoint -------------------------------------------------------------------
    def dname(self, v: Var) -> str:
        return "d" + var_name(v)

    def adjoint(self, code: Code, ind: int) -> None:
        fn = self.fn
        active_vars = sorted(self.p.active)
        names = {}
        for blk in fn.iter_blocks():
            for p in blk.params:
                names[p.id] = p
            for st in blk.stmts:
                if st.var is not None:
                    names[st.var.id] = st.var
        for h in sorted(self.init_push):
            for _, ini in self.init_push[h]:
                code.put(ind, CounterSet(ini, "0"))
        for L in sorted(self.chain_heads()):
            for _, cur in self.chain_heads()[L]:
                code.put(ind, CounterSet(cur, "0"))
        for vid in active_vars:
            v = names[vid]
            if self.is_arr(v):
                continue
            code.add(ind, f"{self.dname(v)} = {ZERO.get(self.kind(v), '0.0')}")
        for z in sorted(self.__dict__.get("comm_links", ())):
            # the handles of reverse messages in flight (pullbacks/comm.py)
            code.add(ind, f"{z} = np.zeros(0, np.int64)")
        ret_blk = next(b for b in fn.iter_blocks() if isinstance(b.term, Return))
        rv = ret_blk.term.value
        for k, a in enumerate(self.p.ret_parts or ()):
            # a returned tuple: _dy is a tuple of the leaves' cotangents
            # (several leaves may share memory, (B, B), (B, B.T), (x, x[0]): each adds
            # into the shadow of its base, a view of it for a view)
            if self.is_active(a):
                if self.is_arr(a) and self.given_root(a):
                    continue        # the caller's shadow holds its cotangent already
                if self.is_arr(a):
                    self.seed_array(a, f"_dy[{k}]", ind, code)
                else:
                    code.add(ind, f"{self.dname(a)} += _dy[{k}]")
        if self.is_active(rv) and not (self.is_arr(rv) and self.given_root(rv)):
            if self.is_arr(rv):
                self.seed_array(rv, "_dy", ind, code)
            else:
                code.add(ind, f"{self.dname(rv)} = _dy")
        code.add(ind, f"_blk = {ret_blk.id}")
        code.put(ind, While("_blk >= 0"))     # not 'while True': see primal()
        self._in_simple = False

        def case(bid: int, i2: int) -> None:
            blk = fn.blocks[bid]
            if blk.id in self.struct_roots:
                self.s_adj_loop(blk.id, i2, code, cont=None)
                return
            if blk.id in self.simple_loops:
                body = self.fn.blocks[self.simple_loops[blk.id]]
                self._in_simple = True
                code.put(i2, While("True"))
                self.adjoint_block(blk, i2 + 1, code)
                code.put(i2 + 1, If(f"_blk != {body.id}"))
                code.add(i2 + 2, "break")
                self.adjoint_block(body, i2 + 1, code)
                self._in_simple = False
                return
            self.adjoint_block(blk, i2, code)
        # (the adjoint of a two-block loop's body runs only inside its header's case: the
        # body's one predecessor is the header, whose adjoint is that case's loop)
        dispatch(code, ind + 1, [b for b in reversed(fn.order) if b not in self.a_inline
                                 and (b not in self.struct_blocks or b in self.struct_roots)
                                 and b not in self.loop_bodies], case)

    def atomic_root(self, a) -> bool:
        """Do reads of array ``a`` add into a shadow that threads share (``emit_step``)?"""
        if not self.atomic_shadows:
            return False
        return self.al.find(a.id) in {self.al.find(g) for g in self.atomic_shadows}

    def given_root(self, a) -> bool:
        """Is array ``a`` (a returned value) a parameter whose shadow the caller gives
        (``emit_step``), or a join of it with itself?"""
        if not self.given_shadows:
            return False
        return self.al.find(a.id) in {self.al.find(g) for g in self.given_shadows}

    def seed_array(self, a, dy: str, ind: int, code: Code) -> None:
        """Add the cotangent ``dy`` of returned array ``a`` into its shadow.  The shadow of a
        view is a view expression (``dB_3.T``, ``dB_3[0]``), which '+=' cannot assign to
        ('dB_3.T += dy' raised "attribute 'T' ... is not writable"): the accumulation helper
        adds into it in place."""
        sh = self.shadow(a, {})
        nd = array_ndim(self.kind(a))
        if sh.isidentifier() or nd == 0:
            code.add(ind, f"{sh} += {dy}")
        else:
            code.add(ind, f"_zyg_acc_{nd}_{nd}({sh}, {dy})")

    def adjoint_block(self, blk, i2: int, code: Code) -> None:
        """Reverse of one block: pop residuals, run pullbacks backwards, go to the predecessor."""
        self.adjoint_stmts(blk, i2, code)
        self.adjoint_entry(blk, i2, code)
        if blk.id == self.fn.order[0]:
            code.add(i2, "break")

    def adjoint_stmts(self, blk, i2: int, code: Code) -> None:
        """Reverse of a block's statements: pop its residuals, run the pullbacks backwards."""
        local: Dict[str, str] = {}
        self._adj_blk = blk.id
        self.pop_block_arrays(blk, local, i2, code)
        by: Dict[str, List[str]] = {}
        for name, k in self.pushes[blk.id]:
            by.setdefault(KIND_STACK.get(k, "f"), []).append(name)
        for s, pnames in by.items():
            n = len(pnames)
            code.put(i2, Pop(s, n))
            for j, name in enumerate(pnames):
                local[name] = f"{name}_b{blk.id}"
                code.put(i2, Peek(local[name], s, j))
        # a compiled recursive call (native.py) pushes its records between those of the
        # statements before it and after it: the latter are popped first, the former only
        # after the call's adjoint has popped its own
        segs = self.native_segments(blk)
        self.pop_stmt_records(blk, local, i2, code, segs[-1] if segs else None)
        k = len(segs) - 1
        for st in reversed(blk.stmts):
            if id(st) in self.astmts:
                self.adjoint_array_stmt(blk, st, local, i2, code)
            elif st.var is not None and st.var.id in self.rules:
                self.adjoint_stmt(blk, st, local, i2, code)
            if segs and self.astmts.get(id(st), {}).get("kind") == "native":
                k -= 1
                self.pop_stmt_records(blk, local, i2, code, segs[k])

    def value_ref(self, a, local: Dict[str, str]) -> str:
        if not isinstance(a, Var):
            return const_src(a, self.ns)
        if self.is_arr(a):
            return self.arr_value(a, local)
        cur = getattr(self, "_adj_blk", None)
        if cur is not None and self.recomputable(a, cur):
            init, step, h = self.recompute[a.id]
            start = init if isinstance(init, str) else self.value_ref(init, local)
            return f"({start} + {step} * _n{h})"
        n = var_name(a)
        if n in local:
            return local[n]
        cur = getattr(self, "_adj_blk", None)
        if cur is not None and is_tuple(self.kind(a)) and a.id in self.p.defblock and \
                self.needs_push(cur, self.p.defblock[a.id]) and self.tuple_parts(a) is not None:
            return self.tuple_src(a, local)     # the scope holds the last iteration's tuple
        if cur is not None and a.id in self.p.defblock and \
                self.needs_push(cur, self.p.defblock[a.id]) and self.remat(a, cur):
            return self.remat_src(a, local)
        self.adj_uses.add(n)
        return n

    def adjoint_stmt(self, blk, st: Stmt, local: Dict[str, str], ind: int, code: Code) -> None:
        conv = self.rules[st.var.id]
        dy = self.dname(st.var)
        args = st.expr.args
        targets = [(i, a) for i, a in enumerate(args) if self.is_active(a) and conv.nonzero[i]]
        # a zero cotangent contributes exactly zero, even where a partial is inf or nan
        # (0 * inf): pullbacks are linear in dy, so the contributions are skipped
        # (docs/numerics.md); not needed where every contribution is +-dy itself
        guard = self.kind(st.var) in ("float", "complex") and targets and not (
            conv.back_exprs is not None and
            all(passes_cotangent(conv.back_exprs[i], conv.back_param) for i, _ in targets))
        if guard and self.in_loop(blk.id):
            self.loop_guards += 1
            guard = self.zero_guards
        if guard and conv.back_exprs is not None:
            code.put(ind, If(self.nonzero_test(dy)), st.loc)
            ind += 1
        if conv.back_exprs is not None:
            mapping = {}
            for name in self.needed_names(st, conv):
                if name in conv.params:
                    mapping[name] = self.value_ref(args[conv.params.index(name)], local)
                elif name == conv.out:
                    mapping[name] = self.value_ref(st.var, local)
            for name, (ename, _) in zip(conv.extra_res, self.extra.get(st.var.id, [])):
                mapping[name] = local.get(ename, ename)
                if ename not in local:
                    self.adj_uses.add(ename)
            mapping[conv.back_param] = dy
            for i, a in targets:
                used: Set[str] = set()
                text = render(conv.back_exprs[i], mapping, used)
                ren = {}
                for g in sorted(used):
                    bound = self.ns.bind(g, resolve_global(conv, g))
                    if bound != g:
                        ren[g] = bound
                if ren:
                    text = render(conv.back_exprs[i], {**mapping, **ren}, set())
                code.add(ind, f"{self.dname(a)} += {self.proj(a, text, self.cplx(st))}", st.loc)
        else:
            h = self.helper(conv, "bwd")
            bargs = [self.value_ref(a, local) for a in args]
            for name, _ in self.extra.get(st.var.id, []):
                bargs.append(local.get(name, name))
                if name not in local:
                    self.adj_uses.add(name)
            if conv.out and conv.out not in conv.extra_res:
                bargs.append(self.value_ref(st.var, local))
            code.add(ind, f"_g = {h}({', '.join(bargs + [dy])})", st.loc)
            if guard:
                # the helper still runs (it may pop records); its result is dropped
                code.put(ind, If(self.nonzero_test(dy)), st.loc)
                ind += 1
            for i, a in targets:
                code.add(ind, f"{self.dname(a)} += {self.proj(a, f'_g[{i}]', self.cplx(st))}", st.loc)
        if guard:
            ind -= 1
        if self.in_loop(blk.id):
            code.add(ind, f"{dy} = {ZERO.get(self.kind(st.var), '0.0')}")

    def nonzero_test(self, dy: str) -> str:
        """The zero-cotangent test of ``dy``: ``nonzero(dy)`` in code that is lowered and
        differentiated again, whose forward mode also tests the tangent (guards.py)."""
        if self.relowered:
            return f"{self.ns.ref(guards.nonzero, '_zyg_nonzero')}({dy})"
        return f"{dy} != 0"

    def adjoint_entry(self, blk, ind: int, code: Code, only: Optional[int] = None, cont=None) -> None:
        """Hand the cotangents of ``blk``'s parameters to the edge that was taken, then go
        to its source: a jump, or the source's adjoint inlined.  ``only``: the edge from
        that predecessor, known to be the one taken.  ``cont(pred, ind)``: emits what
        follows instead of the jump (structured emission)."""
        if blk.id == self.fn.order[0]:
            return
        act = [(k, p) for k, p in enumerate(blk.params) if self.is_active(p) and not self.is_arr(p)]
        for j, (k, p) in enumerate(act):
            code.add(ind, f"_cot{j} = {self.dname(p)}")
            if self.in_loop(blk.id):
                code.add(ind, f"{self.dname(p)} = {ZERO.get(self.kind(p), '0.0')}")
        # arrays: accumulators of unwritten arrays are added into the argument's shadow;
        # written arrays get their buffer and shadow pointers back (the edge is undone)
        fun = [(k, p) for k, p in enumerate(blk.params) if self.is_arr(p) and self.is_active(p)
               and not self.mutable(p)]
        mut = [(k, p) for k, p in enumerate(blk.params) if self.is_arr(p) and self.mutable(p)]
        own = {p.id for p in blk.params}
        cyc = any(isinstance(self.edge_args(q, blk.id)[k], Var) and self.edge_args(q, blk.id)[k].id in own
                  for q in self.p.preds[blk.id] for k, _ in fun)
        if cyc:
            for k, p in fun:
                code.add(ind, f"_a{k} = {self.dname(p)}.copy()")
                if self.in_loop(blk.id):
                    self.shadow_reset(p, ind, code)
        ps = self.p.preds[blk.id]

        def to_pred(pred: int, i2: int):
            n0 = len(code)
            t = self.fn.blocks[pred].term
            if isinstance(t, Jump):
                args = t.args
            else:
                args = t.true_args if t.true == blk.id else t.false_args
            for j, (k, p) in enumerate(act):
                a = args[k]
                if self.is_active(a):
                    code.add(i2, f"{self.dname(a)} += {self.proj(a, f'_cot{j}', is_complex(self.kind(p)))}")
            for k, p in fun:
                a = args[k]
                if self.is_active(a):
                    src = f"_a{k}" if cyc else self.dname(p)
                    self.accumulate(a, src, array_ndim(self.kind(p)), {}, i2, code)
            if mut:
                lhs, rhs = [], []
                for k, p in mut:
                    a = args[k]
                    lhs.append(var_name(a))
                    rhs.append(var_name(p))
                    self.adj_uses.add(var_name(p))
                    if self.is_active(p) and self.is_active(a):
                        lhs.append(self.dname(a))
                        rhs.append(self.dname(p))
                        self.adj_uses.add(self.dname(p))
                code.add(i2, f"{', '.join(lhs)} = {', '.join(rhs)}")
            for name, state in reversed(self.exit_pops(pred, blk.id, roles=True)):
                code.put(i2, Pop("i", 1))
                read = self.p.backend.storage.slot("i", None)
                # a counter start or chained counter carries state between iterations
                code.put(i2, CounterSet(name, read) if state else Line(f"{name} = {read}"))
            left = self.p.loops_of[pred] - self.p.loops_of[blk.id]
            for L, heads in sorted(self.chain_heads().items()):
                if L in left and len(self.p.loops_of[L]) == 1:
                    for P, cur in heads:      # not nested: its final value is still there
                        code.put(i2, CounterSet(cur, var_name(P)))
                        self.adj_uses.add(var_name(P))
            chains = self.init_chains()
            for h in self.exited_counts(pred, blk.id):
                if self.s_trip_recomputed(h):
                    code.add(i2, f"_n{h} = {self.s_trip_src(h)}")
                for (h2, ini), (P, step, _) in sorted(chains.items(), key=lambda x: x[0]):
                    if h2 == h:
                        code.put(i2, ChainStart(ini, f"_cur{P.id}", _emul_int(step, f'_n{h}')))
                        code.put(i2, ChainNext(f"_cur{P.id}", ini))
            # the parameters' array cotangents were handed to the edge: zero them before
            # anything can add into them again (the predecessor's adjoint, inlined or
            # continued here, may use the parameter: a loop left by ``break``)
            for p in zero_after:
                self.shadow_reset(p, i2, code)
            if cont is not None:
                cont(pred, i2)
                self._adj_blk = blk.id
                if i2 != ind and len(code) == n0:
                    code.add(i2, "pass")
                return
            if pred in self.a_inline and not self._in_simple:
                saved = self._adj_blk
                self.adjoint_block(self.fn.blocks[pred], i2, code)
                self._adj_blk = saved
                return
            code.add(i2, f"_blk = {pred}")

        if fun and not cyc and self.in_loop(blk.id):
            zero_after = [p for _, p in fun]
        else:
            zero_after = []

        def finish():
            pass                # the zeroing is done by to_pred, on every edge
        if only is not None:
            to_pred(only, ind)
            finish()
            return
        if len(ps) == 1:
            to_pred(ps[0], ind)
            finish()
            return
        if blk.id in self.counted:
            o, latch = self.counted[blk.id]
            code.put(ind, If(f"_n{blk.id} == 0"))
            to_pred(o, ind + 1)
            code.put(ind, Else())
            code.add(ind + 1, f"_n{blk.id} -= 1")
            to_pred(latch, ind + 1)
            finish()
            return
        if self.in_loop(blk.id):
            code.put(ind, Pop("t", 1))
            code.put(ind, Peek("_tag", "t", None))
        else:
            code.add(ind, f"_tag = _tag{blk.id}")
        for k, pred in enumerate(ps):
            if k == len(ps) - 1:
                code.put(ind, Else())
            else:
                code.put(ind, if_chain(k == 0, f"_tag == {k}"))
            to_pred(pred, ind + 1)
        finish()

    # -- whole functions ---------------------------------------------------------
    def stack_init(self, code: Code, ind: int, pooled: bool = False, continued: bool = False) -> None:
        """Create the stacks; ``pooled``: start from buffers passed in as ``_f0``... ;
        ``continued``: go on with the caller's stacks (a recursive pair, native.py)."""
        bounded = getattr(self.p.backend, "bounded_tape", False)
        bound = self.static_tape_bound() if bounded else None
        for s in sorted(self.stack_used):
            code.put(ind, StackInit(s, pooled, None if bound is None else max(1, bound.get(s, 0)),
                                    continued=continued))
        if self.stack_used and not bounded:
            self.ns.ns["_zyg_grow"] = self.p.backend.helper(grow)
        if self.arr_vars:
            for k, v in helpers(self.p.backend).items():
                self.ns.ns[k] = v

    def static_tape_bound(self) -> Optional[Dict[str, int]]:
        """The most items each stack can receive in any run of the recording primal, when
        every loop that contains a pushing block is a counted loop (``for i in range(a, b,
        c)``) whose trip count is a constant; else None.  An upper bound: every block is
        counted as if it ran on every iteration of the loops around it (branches add up),
        and a loop's header once more than its body."""
        trips: Dict[int, int] = {}
        for h in self.p.loops:
            t = self._constant_trip(h)
            if t is not None:
                trips[h] = t
        total: Dict[str, int] = {}
        for b in self.fn.order:
            need = self.block_demand(self.fn.blocks[b])
            if not any(need.values()):
                continue
            mult = 1
            for h in self.p.loops_of[b]:
                if h not in trips:
                    return None
                mult *= trips[h] + 1
            for s, c in need.items():
                if not isinstance(c, int):
                    return None
                total[s] = total.get(s, 0) + c * mult
        return total

    def _constant_trip(self, h: int) -> Optional[int]:
        """The trip count of the loop headed by ``h`` when it is ``for i in range(a, b, c)``
        with constants ``a``, ``b`` and ``c > 0`` (the header tests ``i < b`` only)."""
        import operator as _op
        head = self.fn.blocks[h]
        if len(head.stmts) != 1 or not isinstance(head.term, Branch):
            return None
        st = head.stmts[0]
        e = st.expr
        if e.fn is not _op.lt or len(e.args) != 2 or head.term.cond != st.var:
            return None
        i, stop = e.args
        if not isinstance(i, Var) or i.id not in self.recompute or self.recompute[i.id][2] != h:
            return None
        init, step, _ = self.recompute[i.id]
        if head.term.true not in self.p.loops[h] or step <= 0:
            return None
        if not (isinstance(stop, Const) and type(stop.value) is int
                and isinstance(init, Const) and type(init.value) is int):
            return None
        return max(0, (stop.value - init.value + step - 1) // step)

    def names_kinds(self) -> Dict[str, str]:
        """The kind of every value name the generated code binds (SSA values, rules' extra
        residuals, the old values of writes, the records of reallocated arrays)."""
        kinds_by_name = {}
        for blk in self.fn.iter_blocks():
            for v in blk.params + [s.var for s in blk.stmts if s.var is not None]:
                kinds_by_name[var_name(v)] = self.kind(v)
        for ex in self.extra.values():
            for name, k in ex:
                kinds_by_name[name] = k
        for blk in self.fn.iter_blocks():
            for st in blk.stmts:
                info = self.astmts.get(id(st))
                if info and "old" in info:
                    kinds_by_name[info["old"]] = info["old_kind"]
                if info and "restore" in info:
                    kinds_by_name[info["restore"]] = self.kind(st.var)
        return kinds_by_name

    def residual_init(self, code: Code, ind: int) -> None:
        kinds_by_name = self.names_kinds()
        params = {var_name(p) for p in self.fn.params}
        # numba rejects a variable whose first use (in bytecode order) may precede its
        # definition, so every value crossing blocks gets a typed zero up front
        cross = set(self.adj_uses)
        for blk in self.fn.iter_blocks():
            if blk.id != self.fn.order[0]:
                cross |= {var_name(p) for p in blk.params}
            for st in blk.stmts:
                if st.var is not None:
                    cross.add(var_name(st.var))
        shadows = {self.dname(v) for v in self.shadow_roots.values()}
        # arrays defined in the entry block (which runs first, once) get no placeholder:
        # a placeholder array redefined later inside the dispatch loop made numba 0.68
        # read the placeholder in a branch of the adjoint (a size-0 array: out of bounds)
        entry = self.fn.blocks[self.fn.order[0]]
        first = {var_name(st.var) for st in entry.stmts if st.var is not None and self.is_arr(st.var)}
        first |= {self.dname(v) for v in entry.params + [st.var for st in entry.stmts if st.var is not None]
                  if v.id in self.shadow_roots}
        narrow = self.float32_scalars()
        for n in sorted(cross - params - shadows - first):
            if kinds_by_name.get(n, "float") in ("none", "undef", "object"):
                continue
            if n in narrow and kinds_by_name.get(n, "float") == "float":
                # a float32 number (np.float32(x), an element of a float32 array): a float64
                # placeholder would make numba type the variable float64, and an array
                # operation with it float64 where zyg (numpy 2) has float32
                code.add(ind, f"{n} = np.float32(0.0)")
                continue
            code.add(ind, f"{n} = {self.placeholder_of(kinds_by_name.get(n, 'float'))}")
        for vid, v in sorted(self.shadow_roots.items()):
            if self.dname(v) not in first:
                code.add(ind, f"{self.dname(v)} = {self.placeholder_of(self.kind(v))}")
        for t in self.tag_scalars + self.count_scalars:
            code.add(ind, f"{t} = 0")

    def float32_scalars(self) -> Set[str]:
        """Names of the numbers that numba types float32: ``np.float32(...)`` calls (the
        weak-scalar casts of ``specialize.py`` among them) and single elements of float32
        arrays."""
        from ..ssa.analysis import array_dtype, array_ndim
        from ..ssa.prims import GetItem
        out: Set[str] = set()
        for blk in self.fn.iter_blocks():
            for st in blk.stmts:
                if st.var is None or self.kind(st.var) != "float":
                    continue
                fn, args = st.expr.fn, st.expr.args
                if fn is np.float32:
                    out.add(var_name(st.var))
                elif isinstance(fn, GetItem) and args and self.is_arr(args[0]) and \
                        array_dtype(self.kind(args[0])) == "float32" and \
                        len(fn.spec) == array_ndim(self.kind(args[0])) and all(c == "i" for c in fn.spec):
                    out.add(var_name(st.var))
        return out

    def placeholder_of(self, kind: str) -> str:
        """The value a variable holds before its definition runs (the back end's own where
        it cannot allocate: a CUDA device)."""
        own = getattr(self.p.backend, "placeholder", None)
        got = own(kind) if own is not None else None
        return got if got is not None else zero_of(kind)

    def grad_outputs(self) -> List[str]:
        outs = []
        for i in self.p.wrt:
            p = self.fn.params[i]
            k = self.kind(p)
            if not differentiable(k):
                continue
            if is_array(k):
                if self.is_active(p):
                    self.adj_uses.add(self.dname(p))
                    outs.append(self.dname(p))
                elif p.id in self.given_shadows:
                    # the caller holds the shadow: nothing to allocate for an inactive one
                    self.adj_uses.add(var_name(p))
                    outs.append(var_name(p))
                else:
                    self.adj_uses.add(var_name(p))
                    outs.append(self.zeros_as(var_name(p)))
                continue
            outs.append(self.dname(p) if self.is_active(p) else ZERO[k])
        return outs


# Above this many cases a dispatch loop is a binary search over block ids.  Python's
# AST nests an elif chain (each 'elif' is the orelse of the 'if' before it), so a chain
# of n cases is n levels deep for every recursive walk of the generated module: the
# python target's semantics transformer (numerics.python_semantics) raised
# RecursionError at ~300 cases (a function of 300 sequential loops), CPython's own
# parser and compiler recurse on it too.  The search tree is log2(n) deep.
DISPATCH_TREE_MIN = 32


def dispatch(code: Code, ind: int, ids: List[int], case: Callable[[int, int], None]) -> None:
    """The cases of a dispatch loop: an if/elif chain for a few blocks, a binary
    search over block ids for many (a chain of 100 blocks cost GMM's primal 9x:
    LLVM does not turn numba's comparisons into a switch; and an elif chain is as
    deep as it is long, see DISPATCH_TREE_MIN)."""
    if len(ids) <= DISPATCH_TREE_MIN:
        for k, b in enumerate(ids):
            code.put(ind, if_chain(k == 0, f"_blk == {b}"))
            case(b, ind + 1)
        return

    def tree(sub: List[int], i: int) -> None:
        if len(sub) <= 3:
            for k, b in enumerate(sub):
                code.put(i, if_chain(k == 0, f"_blk == {b}"))
                case(b, i + 1)
            return
        mid = len(sub) // 2
        code.put(i, If(f"_blk < {sub[mid]}"))
        tree(sub[:mid], i + 1)
        code.put(i, Else())
        tree(sub[mid:], i + 1)
    tree(sorted(ids), ind)


def row_stacks(code: Code, backend) -> List[str]:
    """The stacks of ``code`` (by its ``StackInit`` nodes) that ``backend`` takes as rows of
    buffers passed in (``Backend.tape_rows``), in order."""
    return [n.stack for _, n in code.body if isinstance(n, StackInit) and backend.tape_rows(n)]


def row_params(stacks: List[str]) -> List[str]:
    """The parameters that pass the tape's rows in: the thread's column, then a buffer per
    stack."""
    return ["_zrow"] + [f"_zt_{s}" for s in stacks] if stacks else []


def _header(fn: Function, name: str, extra: List[str]) -> Def:
    return Def(name, tuple([var_name(p) for p in fn.params] + extra))


SPLIT_BLOCKS = 16
COUNTED_FOR = True


def emit_fused(p: Plan, name: str, value: bool = True, zero_guards: bool = True):
    """One function ``name(*args, *buffers) -> (value, grad, *grown)`` (output cotangent 1).

    grad is a tuple if several.  ``buffers`` are the initial stack buffers, one
    per stack kind used (listed in the returned ``stacks``); ``grown`` has, per buffer,
    the larger one that replaced it or ``None`` (``_grown``): the caller keeps them for
    the next call, so that a long loop's tape
    lands in memory that is already mapped (fresh pages cost more than the
    primal itself on the Taylor workload).  With ``value=False`` the value is
    omitted from the result.

    Functions with many blocks get their primal and adjoint as two functions that
    ``name`` calls: LLVM optimises the two halves of one large function much worse
    (the GMM gradient ran 3x slower as one function).  Returns also ``parts``, the
    names to compile before ``name``.

    With ``zero_guards=False`` the adjoint leaves out the zero-cotangent tests inside
    loops (docs/numerics.md) and raises ``ZeroCotangentRetry`` when a gradient comes out
    nan, which is the only way leaving them out can change a result: the caller then
    runs the variant with the tests.  The last item returned says whether any was left out.
    """
    # a back end whose tape has a fixed size (cuda: per-thread local arrays) gets one
    # function without tape buffers in or out; it returns, last, the room the tape needed
    # when it ran out (0 when it did not), and then skips the adjoint
    bounded = getattr(p.backend, "bounded_tape", False)
    if len(p.fn.order) >= SPLIT_BLOCKS and not bounded:
        return _emit_fused_split(p, name, value, zero_guards)
    em = Emitter(p)
    em.zero_guards = zero_guards
    adj = Code()
    em.adjoint(adj, 1)
    body = Code()
    em.stack_init(body, 1, pooled=not bounded)
    em.residual_init(body, 1)
    em.primal(body, 1, record=True)
    outs = em.grad_outputs()
    stacks = sorted(em.stack_used)
    code = Code()
    code.put(0, _header(p.fn, name, row_params(row_stacks(body, p.backend)) if bounded
                        else [f"_{s}0" for s in stacks]))
    what = "Value and gradient" if value else "Gradient"
    code.add(1, f'"""{what} of {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}), generated by zyg."""')
    code.add(1, "_dy = 1.0")
    code.extend(body)
    if bounded and stacks:
        code.put(1, TapeOverflow(tuple(stacks)))
        em.ns.ns["math"] = math
        nan = ["math.nan"] * len(outs)
        g = nan[0] if len(nan) == 1 else "(" + ", ".join(nan) + ")"
        res = ([("_ret")] if value else []) + [g if outs else "()"]
        res.append(" + ".join(f"_{s}sp" for s in stacks))       # >= the room it needed
        code.add(2, "return " + ", ".join(res))
    code.extend(adj)
    g = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ")"
    if not outs:
        g = "()"
    res = ([("_ret")] if value else []) + [g] + (["0"] if bounded else [_grown(f"_{s}s", f"_{s}cap0") for s in stacks])
    retry = _nan_check(em, code, outs)
    code.add(1, "return " + (", ".join(res) if len(res) > 1 else res[0]))
    diffable = [i for i in p.wrt if differentiable(em.kind(p.fn.params[i]))]
    return name, code, em.ns, diffable, [(s, STACKS[s][0]) for s in stacks], [], retry


def _grown(buf: str, size: str) -> str:
    """A fused gradient gives back a stack buffer only when it grew (``None`` otherwise):
    numba boxes a returned array into a new ndarray object on every call (~0.25 us, more
    than a small gradient itself), where ``None`` costs nothing.  Growth always makes a
    buffer larger than the one passed in, of ``size`` elements."""
    return f"({buf} if {buf}.shape[0] != {size} else None)"


def _nan_check(em: "Emitter", code: Code, outs: List[str]) -> bool:
    """When zero-cotangent tests were left out (``em.zero_guards`` False), raise
    ZeroCotangentRetry if a gradient in ``outs`` holds a nan."""
    if em.zero_guards or not em.loop_guards:
        return False
    from ..numerics import ZeroCotangentRetry
    em.ns.ns["_ZygRetry"] = ZeroCotangentRetry
    conds = []
    grads = [p for i in em.p.wrt for p in [em.fn.params[i]] if differentiable(em.kind(p))]
    for p, o in zip(grads, outs):
        if not em.is_active(p):
            continue
        conds.append(f"{em.ns.ref(has_nan, '_zyg_has_nan')}({o})" if is_array(em.kind(p))
                     else f"{o} != {o}")
    if conds:
        code.put(1, If(" or ".join(conds)))
        code.add(2, "raise _ZygRetry()")
    return True


def _emit_fused_split(p: Plan, name: str, value: bool, zero_guards: bool = True):
    em = Emitter(p)
    em.zero_guards = zero_guards
    code, tape = _split_code(em, p, name, pooled=True, replay=False)
    stacks = sorted(em.stack_used)
    outs = em.grad_outputs()
    code.add(0, "")
    code.put(0, _header(p.fn, name, [f"_{s}0" for s in stacks]))
    what = "Value and gradient" if value else "Gradient"
    code.add(1, f'"""{what} of {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}), generated by zyg."""')
    args = ", ".join([var_name(q) for q in p.fn.params] + [f"_{s}0" for s in stacks])
    code.add(1, f"_ret, _tp = {name}_primal({args})")
    code.add(1, f"_g = {name}_adjoint({''.join(f'_tp[{k}], ' for k in range(len(tape)))}1.0)")
    g = "_g[0]" if len(outs) == 1 else "_g"
    res = (["_ret"] if value else []) + [g] + [_grown(f"_tp[{tape.index(f'_{s}s')}]", f"_{s}0.shape[0]") for s in stacks]
    retry = _nan_check(em, code, [f"_g[{k}]" for k in range(len(outs))])
    code.add(1, "return " + (", ".join(res) if len(res) > 1 else res[0]))
    diffable = [i for i in p.wrt if differentiable(em.kind(p.fn.params[i]))]
    return name, code, em.ns, diffable, [(s, STACKS[s][0]) for s in stacks], \
        [name + "_primal", name + "_adjoint"], retry


def _split_code(em: "Emitter", p: Plan, name: str, pooled: bool, replay: bool):
    """Source of ``name_primal`` and ``name_adjoint``; returns (code, tape names)."""
    adj = Code()
    em.adjoint(adj, 1)
    em.grad_outputs()      # registers the shadows it returns as tape entries
    if replay:
        pro = Code()
        for vid, v in sorted(em.shadow_roots.items()):
            d = em.dname(v)
            if d in em.adj_uses:
                pro.add(1, f"{d}[...] = 0")
        pro.extend(adj)
        adj = pro
    tape = []
    for s in sorted(em.stack_used):
        tape += [f"_{s}s", f"_{s}sp"]
    tape += em.tag_scalars + em.count_scalars + sorted(em.adj_uses)
    code = Code()
    params = [var_name(q) for q in p.fn.params] + ([f"_{s}0" for s in sorted(em.stack_used)] if pooled else [])
    params += [em.dname(q) for q in p.fn.params if q.id in em.given_shadows]
    code.put(0, Def(f"{name}_primal", tuple(params)))
    code.add(1, f'"""Primal of {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}): returns (value, tape)."""')
    em.stack_init(code, 1, pooled=pooled)
    em.residual_init(code, 1)
    em.primal(code, 1, record=True)
    tt = "(" + "".join(t + ", " for t in tape) + ")"
    code.add(1, f"return _ret, {tt}")
    code.add(0, "")
    code.put(0, Def(f"{name}_adjoint", tuple(tape + ["_dy"])))
    code.add(1, f'"""Adjoint of {p.fn.name}: gradients of every float argument."""')
    code.extend(adj)
    shadow_names = {em.dname(v) for v in em.shadow_roots.values()}
    outs = [o + ".copy()" if replay and o in shadow_names else o for o in em.grad_outputs()]
    code.add(1, "return (" + "".join(o + ", " for o in outs) + ")")
    return code, tape


def emit_step(p: Plan, name: str, atomic: Sequence[int] = ()) -> Tuple[Code, Namespace, List[str], List[int]]:
    """``name_primal(*args, *shadows) -> (value, tape)`` and ``name_adjoint(*tape, _dy)`` for
    one iteration of a parallel loop (``zyg/tasks/prange.py``): the shadows of the float
    array parameters in ``p.wrt`` are given to the primal, one per such parameter in order
    (the positions are returned last), and the adjoint adds into them in place -- no array
    of the loop's size is allocated, zeroed or copied per iteration.  A returned parameter
    (an array the step writes into) is not seeded from ``_dy``: its given shadow holds its
    cotangent already.  The adjoint returns the gradients of every float argument (a given
    shadow itself for an array)."""
    em = Emitter(p)
    given = [i for i in p.wrt if is_array(em.kind(p.fn.params[i]))
             and differentiable(em.kind(p.fn.params[i]))]
    em.given_shadows = {p.fn.params[i].id for i in given}
    em.atomic_shadows = {p.fn.params[i].id for i in atomic}
    code, tape = _split_code(em, p, name, pooled=False, replay=False)
    return code, em.ns, tape, given


def emit_kernel_step(p: Plan, name: str, atomic: Sequence[int] = (), shared: Sequence[int] = (),
                     block_sync: bool = False, value: bool = False
                     ) -> Tuple[Code, Namespace, List[str], bool]:
    """One thread of a CUDA kernel's adjoint (``zyg/cuda_kernel.py``): ``name(*args,
    *shadows)`` runs the thread's primal with its own tape, then its adjoint, which adds
    into the given shadows of the float array parameters in ``p.wrt`` (one per such
    parameter, in order; atomically for the parameters ``atomic``, which other threads'
    shadows share).  A shadow holds, on entry, the cotangent of its array's contents after
    the primal and, on exit, that of its contents before.  Returns 0, or the tape room the
    run lacked (its adjoint was then skipped).

    With ``p.keep_final`` the arrays stay as the primal leaves them wherever the adjoint
    does not read what it overwrote; the last item returned says whether some write into a
    parameter is rewound all the same (the caller then plans without ``keep_final`` and
    runs the primal again after the step: ``emit_plain``).

    ``shared``: ids of arrays the threads of a block share (``cuda.shared.array``), whose
    shadows take atomic additions too.  ``block_sync``: the kernel synchronises its block,
    so a thread whose tape ran out must not leave alone: the block skips its adjoint together
    (``cuda.syncthreads_or``).

    ``value``: a device function's vector-Jacobian product instead (``zyg.vjp(f,
    target="cuda")``): the output cotangent is the last parameter, the function's value is
    returned, and NaN is returned when the tape ran out (the adjoint was skipped).

    The stacks the back end takes as rows of buffers (``Backend.tape_rows``) are parameters
    after the shadows (:func:`row_params`)."""
    em = Emitter(p)
    em.given_shadows = {p.fn.params[i].id for i in p.wrt
                        if is_array(em.kind(p.fn.params[i])) and differentiable(em.kind(p.fn.params[i]))}
    em.atomic_shadows = {p.fn.params[i].id for i in atomic} | set(shared)
    adj = Code()
    em.adjoint(adj, 1)
    body = Code()
    em.stack_init(body, 1, pooled=False)
    em.residual_init(body, 1)
    em.primal(body, 1, record=True)
    stacks = sorted(em.stack_used)
    shadows = [em.dname(q) for q in p.fn.params if q.id in em.given_shadows]
    code = Code()
    code.put(0, _header(p.fn, name, shadows + (["_dy"] if value else []) +
                        row_params(row_stacks(body, p.backend))))
    what = "The value and vector-Jacobian product of" if value else "One thread of the adjoint of kernel"
    code.add(1, f'"""{what} {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}), generated by zyg."""')
    if not value:
        code.add(1, "_dy = 0.0")
    code.extend(body)
    if stacks and value:
        em.ns.ns["math"] = math
        code.put(1, TapeOverflow(tuple(stacks)))
        code.add(2, "return math.nan")
    elif stacks and block_sync:
        code.add(1, "_ovf = 0")
        code.put(1, TapeOverflow(tuple(stacks)))
        code.add(2, "_ovf = 1")
        code.add(1, "if cuda.syncthreads_or(_ovf):")
        code.add(2, "return _ovf * (" + " + ".join(f"_{s}sp" for s in stacks) + ")")
    elif stacks:
        code.put(1, TapeOverflow(tuple(stacks)))
        code.add(2, "return " + " + ".join(f"_{s}sp" for s in stacks))
    code.extend(adj)
    code.add(1, "return _ret" if value else "return 0")
    roots = {em.al.find(q.id) for q in p.fn.params if q.id in em.al.parent}
    rewound = any(info.get("kind") in ("setitem", "inplace") and not info.get("skip_old")
                  and em.al.find(st.expr.args[0].id) in roots
                  for blk in p.fn.iter_blocks() for st in blk.stmts
                  for info in [em.astmts.get(id(st)) or {}])
    return code, em.ns, stacks, rewound


def emit_plain(p: Plan, name: str, skip_atomic: bool = False) -> Tuple[Code, Namespace]:
    """``name(*args)``: the primal alone, recording nothing (``skip_atomic``: without its
    atomic additions, which a kernel's adjoint never rewinds)."""
    em = Emitter(p)
    em.skip_atomic = skip_atomic
    body = Code()
    em.primal(body, 1, record=False)
    code = Code()
    code.put(0, _header(p.fn, name, []))
    code.add(1, f'"""The primal of {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}), generated by zyg."""')
    code.extend(body)
    code.add(1, "return 0")
    return code, em.ns


def emit_split(p: Plan, name: str, relowered: bool = False,
               pooled: bool = False) -> Tuple[Code, Namespace, List[str], bool]:
    """A primal ``name_primal(*args) -> (value, tape)`` and ``name_adjoint(*tape, _dy)``.

    The adjoint can be replayed: it zeroes the shadow buffers it receives and
    returns copies of the gradients.  (Functions that write into arrays rewind
    them in the adjoint, so their ``back`` runs once; the API enforces it.)
    ``pooled``: the primal takes the initial stack buffers after the arguments
    (``name_primal(*args, _f0, ...)``, one per stack in the tape, in its order)."""
    em = Emitter(p)
    em.relowered = relowered
    code, tape = _split_code(em, p, name, pooled=pooled, replay=True)
    mutates = bool(em.al.mutated)
    return code, em.ns, tape, mutates
