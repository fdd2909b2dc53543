"""Array support of the emitter: shadow memory, rewinding writes, numpy rules.

The model (``docs/arrays.md``, DESIGN 3.5):

* every active array value has a *shadow* of its shape.  A root array (an
  argument, the result of a numpy call, a block parameter) owns a shadow buffer
  ``d<name>``, allocated in the primal; a view (slice, ``.T``, reshape, in-place
  result) has as shadow the same view of its base's shadow, recomputed wherever
  it is needed;
* a write ``a[idx] = v`` records the old contents of ``a[idx]`` (on the tape in
  loops) and the adjoint *rewinds* it: ``dv += da[idx]; da[idx] = 0;
  a[idx] = old``.  Every array is therefore, at each point of the backward pass,
  exactly as the primal saw it there: pullbacks read arrays in place, and a
  finished gradient leaves the caller's arrays unchanged;
* arrays that are never written (functional values such as ``np.tanh(z)``) are
  pushed (copied) when a pullback in a loop needs the value of an earlier
  iteration; their shadows are accumulators, like scalar cotangents;
* an array created in a loop keeps one shadow buffer per creation site (zeroed
  when the reverse pass consumes it); if it is also written, the allocation
  records the previous iteration's contents so the reverse pass can restore them.
"""
from __future__ import annotations

import ast

import operator
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from ..errors import NoAdjoint, UnsupportedSyntax
from ..rules import arrays as arules, dispatch
from ..ssa.analysis import (array_dtype, array_ndim, differentiable, elem_kind, is_array, is_tuple,
                            tuple_elts)
from ..ssa.emit import (INFIX, PREFIX, ZERO, Advance, Capacity, Code, Else, Grow, If, Peek, Pop, PopArray,
                        PushArray, Reserve, RoomCheck, Store, var_name)
from ..ssa.ir import Const, Stmt, Undef, Var, callee_name
from ..ssa.prims import (ArrayOf, Attr, GetItem, InPlace, MakeTuple, Prim, Recursive, SetItem, Stacked,
                         index_src)
from ..rules.higher import recursive_calls, Checkpointed, Hooked
from .tape import KIND_STACK
from .reshapes import Reshapes, is_reshape, shape_src, view_keeps_c

UNSIGNED_INDEX = True   # proven non-negative array indices cast to np.uint64 (ArrayMixin.index_text)
#: float arithmetic (+ - * / and unary -) on values the adjoint has again is recomputed there
#: instead of taped, up to this many operations per value (ArrayMixin.remat); 0: never
REMAT_FLOAT_OPS = 6
_FLOAT_REMAT = (operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pos)

_STACK_OF_DTYPE = {"f": "f", "c": "c", "i": "i", "u": "i", "b": "i"}


def stack_of_array(kind: str) -> str:
    return _STACK_OF_DTYPE[kind[0]]


def zero_of(kind: str) -> str:
    if is_array(kind):
        nd = array_ndim(kind)
        return f"np.zeros(({'0, ' * nd}), np.{array_dtype(kind)})"
    if is_tuple(kind):
        return "(" + "".join(zero_of(k) + ", " for k in tuple_elts(kind)) + ")"
    return ZERO.get(kind, "0.0")


_UFUNC = {"+": "np.add", "-": "np.subtract", "*": "np.multiply", "/": "np.divide",
          "&": "np.bitwise_and", "|": "np.bitwise_or", "^": "np.bitwise_xor"}
# in-place operators on bool and int arrays (masks: m &= x > 0), never differentiated
_BITWISE_INPLACE = (operator.and_, operator.or_, operator.xor)


def inplace_src(target: str, op: str, expr: str) -> str:
    """``target op= expr`` on an array without rebinding a name: ``name += e`` makes
    numba 0.68 give the name a second definition, which its SSA reconstruction then
    mixed up with the first one inside deep branches (a size-0 array, out of bounds).
    A subscript target is a view (basic indexing: the callers pass views of shadows and
    of arrays): the ufunc writes into it too, where ``a[1:3] += e`` would store the sum
    back through numba's slice assignment, whose shape-mismatch message alone costs a
    first call ~2.5 s of compiling."""
    return f"{_UFUNC[op]}({target}, {expr}, {target})"


def base_int_or_bool(k: str) -> bool:
    """An int or bool array kind (never differentiated)."""
    return is_array(k) and k[0] in "biu"


class ArrayMixin:
    """Methods of :class:`~zyg.pullbacks.transform.Emitter` for arrays."""

    # -- classification ----------------------------------------------------------------
    def is_arr(self, v) -> bool:
        return isinstance(v, Var) and is_array(self.kind(v))

    def is_array_stmt(self, st: Stmt) -> bool:
        e = st.expr
        if isinstance(e.fn, Prim):
            return True
        if isinstance(e.fn, Recursive) and self.native_call(st) is not None:
            return True         # a compiled recursive pair (native.py): kinds native*
        if st.var is not None and (is_array(self.kind(st.var)) or is_tuple(self.kind(st.var))):
            return True
        return any(isinstance(a, Var) and (is_array(self.kind(a)) or is_tuple(self.kind(a)))
                   for a in e.operands())

    @property
    def reshapes(self) -> Reshapes:
        got = self.__dict__.get("_reshapes")
        if got is None:
            got = self._reshapes = Reshapes(self.p, self.ns)
        return got

    def is_view(self, v) -> bool:
        return isinstance(v, Var) and v.id in self.al.view_of

    def mutable(self, v) -> bool:
        return isinstance(v, Var) and self.al.is_mutated(v.id)

    def arr_active(self, v) -> bool:
        return self.is_arr(v) and v.id in self.p.active

    def err(self, st: Stmt, msg: str, hint: Optional[str] = None, cls=NoAdjoint):
        loc = st.loc
        return cls(msg, loc.filename if loc else None, loc.lineno if loc else None,
                   loc.col if loc else None, hint=hint)

    # -- preparation -------------------------------------------------------------------
    def prepare_arrays(self) -> None:
        """Find array statements, their rules and what the tape must hold for them."""
        self.astmts: Dict[int, dict] = {}
        self.stmt_pushes: Dict[int, List[Tuple[str, str, int]]] = {}   # block -> [(name, kind, stmt id)]
        self.arr_pushes: Dict[int, List[Tuple[str, str]]] = {}         # block -> [(name, kind)] at block end
        self.shadow_roots: Dict[int, Var] = {}                          # var id -> root var with a buffer
        self.arr_vars: Dict[int, Var] = {}
        for blk in self.fn.iter_blocks():
            for p in blk.params:
                if self.is_arr(p):
                    self.arr_vars[p.id] = p
            for st in blk.stmts:
                if st.var is not None and self.is_arr(st.var):
                    self.arr_vars[st.var.id] = st.var
        # roots that own a shadow buffer
        for vid, v in self.arr_vars.items():
            if vid in self.p.active and vid not in self.al.view_of:
                self.shadow_roots[vid] = v
        # Unwritten views passed along an edge (``r = A[k]`` chosen in a branch, or carried
        # by a loop) own a buffer too: the edge hands the parameter's cotangent to it, and
        # the reverse of the view's definition adds it into the base's shadow, where the
        # view's indices are those of its own block (found like any value there). The edge
        # itself is reversed before that block, where those indices are not known.
        self.buffered_views: Set[int] = set()
        for blk in self.fn.iter_blocks():
            for k, p in enumerate(blk.params):
                if not self.arr_active(p) or self.mutable(p):
                    continue
                for q in self.p.preds[blk.id]:
                    a = self.edge_args(q, blk.id)[k]
                    if self.is_view(a) and self.arr_active(a) and not self.mutable(a):
                        self.buffered_views.add(a.id)
                        self.shadow_roots[a.id] = a
        # A reshape that nothing writes through, of an array whose shadow may not be
        # contiguous (A.T.reshape(-1)), owns a buffer too: a reshape of that shadow would
        # be a copy (zyg/pullbacks/reshapes.py)
        for blk in self.fn.iter_blocks():
            for st in blk.stmts:
                v = st.var
                if v is not None and is_reshape(st.expr.fn) and self.is_view(v) and \
                        self.arr_active(v) and not self.mutable(v) and \
                        not self.shadow_contiguous(st.expr.args[0]):
                    self.buffered_views.add(v.id)
                    self.shadow_roots[v.id] = v
        self.check_params()
        for blk in self.fn.iter_blocks():
            self.stmt_pushes[blk.id] = []
            self.arr_pushes[blk.id] = []
            for st in blk.stmts:
                if self.is_array_stmt(st):
                    self.prepare_array_stmt(blk, st)
                    self.prepare_shape_record(blk, st)
            self.prepare_param_shape_records(blk)

        self.skip_unread_records()
        for blk in self.fn.iter_blocks():
            for item in self.stmt_pushes[blk.id] + self.arr_pushes[blk.id]:
                k = item[1]
                if is_array(k):
                    self.stack_used.add(stack_of_array(k))
                    self.stack_used.add("i")
                else:
                    self.stack_used.add(KIND_STACK.get(k, "f"))

    def check_params(self) -> None:
        """Array block parameters: written ones carry their buffer (and shadow) as pointers,
        which must come from arrays created outside loops."""
        for blk in self.fn.iter_blocks():
            for k, p in enumerate(blk.params):
                if not self.is_arr(p) or not self.mutable(p):
                    continue
                for q in self.p.preds[blk.id]:
                    a = self.edge_args(q, blk.id)[k]
                    bad = None
                    if not isinstance(a, Var):
                        bad = "a constant"
                    elif self.is_view(a):
                        bad = "a view (slice)"
                    elif a.id in self.p.defblock and self.in_loop(self.p.defblock[a.id]) and \
                            not any(a.id == pp.id for b2 in self.fn.iter_blocks() for pp in b2.params):
                        bad = "an array created inside a loop"
                    if bad:
                        # the line that makes the new array (a = a.copy()), else the loop's
                        got = self.def_stmt(a) if isinstance(a, Var) else None
                        loc = got[2].loc if got is not None and got[2].loc is not None and \
                            got[2].loc.lineno is not None else blk.loc
                        raise UnsupportedSyntax(
                            f"an array that is written in place is reassigned from {bad} in a loop or "
                            f"branch; zyg cannot rewind that",
                            loc.filename if loc else None, loc.lineno if loc else None,
                            getattr(loc, "col", None) if loc else None,
                            hint="allocate the arrays before the loop and copy into them (buf[:] = new) "
                                 "or swap two preallocated arrays")

    def rule_needs(self, st: Stmt, rule, targets: List[int]) -> Set[str]:
        """Placeholders ('x0', 'y', ...) the rule's backward code reads for ``targets``."""
        ops = list(st.expr.args)
        # stand-ins for the operands and the result: the names the rule's expression reads
        stand = {f"_zyg_need_x{k}": f"x{k}" for k in range(len(ops))}
        stand["_zyg_need_y"] = "y"
        c = self.make_ctx(st, list(stand)[:-1], "_zyg_need_y", "_zyg_need_dy")
        used: Set[str] = set()
        for i in targets:
            try:
                text = rule.back(c, i)
            except arules._RuleError as e:
                raise self.err(st, f"{callee_name(st.expr.fn)}: {e}")
            if text is None:
                continue
            used |= {stand[n.id] for n in ast.walk(ast.parse(text, mode="eval"))
                     if isinstance(n, ast.Name) and n.id in stand}
        return used

    def make_ctx(self, st: Stmt, x: List[str], y: str, dy: str) -> arules.Ctx:
        e = st.expr
        kinds = [self.kind(a) for a in e.args]
        consts = [a.value if isinstance(a, Const) and not isinstance(a, Undef) else arules._NOCONST
                  for a in e.args]
        kwc = {k: v.value for k, v in e.kwargs.items() if isinstance(v, Const)}
        return arules.Ctx(x, y, dy, kinds, consts, list(e.kwargs), {k: self.src(v) for k, v in e.kwargs.items()},
                          {k: self.kind(v) for k, v in e.kwargs.items()}, kwc)

    def prepare_array_stmt(self, blk, st: Stmt) -> None:
        e = st.expr
        fn = e.fn
        info: dict = {"kind": "plain"}
        self.astmts[id(st)] = info
        needed: List[Any] = []     # operands whose values the adjoint reads
        in_loop = self.in_loop(blk.id)
        if id(st) in self.__dict__.get("_absorbed", {}):
            info.update(self._absorbed[id(st)])     # a parallel loop's read-out (native.py)
            return
        if isinstance(fn, Recursive):
            pair = self.native_call(st)
            if pair is not None:
                return self.prepare_native(blk, st, info, pair)
        if hasattr(fn, "compiled_pair"):
            self.check_loop_aliases(st)
            pair = self.native_loop(blk, st)        # a loop as a compiled pair (looppairs.py)
            if pair is not None:
                info["ploop"] = True
                return self.prepare_native(blk, st, info, pair)
        if isinstance(fn, SetItem):
            base = e.args[0]
            if not self.is_arr(base):
                raise self.err(st, "item assignment is supported on arrays only", cls=UnsupportedSyntax)
            info["kind"] = "setitem"
            self.check_fancy(st, fn.spec, e.args[1:-1])
            old_kind = self.getitem_kind(base, fn.spec, e.args[1:-1])
            info["old"] = f"_o{self.new_tmp()}"
            info["old_kind"] = old_kind
            if getattr(fn, "atomic", False):
                # cuda.atomic.add in a kernel (zyg/cuda_kernel.py): threads add into the same
                # elements, so no thread's old value may be restored; the adjoint reads the
                # shadow (d(a[i] + v)/dv) and leaves it (d/d old a[i] is the identity)
                info["atomic"] = True
                info["skip_old"] = True
                needed += [a for a in e.args[1:-1]]
                self.need_shadow(blk, e.args[-1])
                self.need_value(blk, base, contents=False)
                return self.finish_needed(blk, st, needed)
            if in_loop:
                self.stmt_pushes[blk.id].append((info["old"], old_kind, id(st)))
            needed += [a for a in e.args[1:-1]]
            # the adjoint adds into the value's shadow, maybe a view: its indices are needed
            self.need_shadow(blk, e.args[-1])
            # the adjoint finds the base's shadow and rewinds the write, but reads none of
            # its contents: the write is recorded only if something else reads them
            self.need_value(blk, base, contents=False)
            return self.finish_needed(blk, st, needed)
        if isinstance(fn, InPlace) and self.is_arr(e.args[0]):
            info["kind"] = "inplace"
            if fn.op not in (operator.add, operator.sub, operator.mul, operator.truediv) and \
                    not (fn.op in _BITWISE_INPLACE and base_int_or_bool(self.kind(e.args[0]))):
                raise self.err(st, f"in-place '{InPlace.SYMBOL.get(fn.op)}' on arrays is not supported",
                               cls=UnsupportedSyntax)
            base = e.args[0]
            # ``a op= b`` where ``b`` may share ``a``'s memory (``d *= d``, ``P -= P[0]``,
            # ``b += b[::-1]``, ``B += B.T``): numpy reads every element of ``b`` before the
            # write; the primal copies ``b`` first (numba's ufuncs would compute element by
            # element) and the adjoint rewinds before it reads ``b``
            info["overlap"] = self.al.may_share(base, e.args[1])
            info["old"] = f"_o{self.new_tmp()}"
            info["old_kind"] = self.kind(base)
            if in_loop:
                self.stmt_pushes[blk.id].append((info["old"], self.kind(base), id(st)))
            needed.append(e.args[1])
            # a += b and a -= b need the base only to find its shadow; a *= s and a /= s
            # read its old contents (the adjoint of s)
            self.need_value(blk, base, contents=fn.op in (operator.mul, operator.truediv))
            return self.finish_needed(blk, st, needed)
        comm = getattr(fn, "_zyg_comm", None)
        if comm is not None:
            return self.prepare_comm(blk, st, info, comm)
        if isinstance(fn, Recursive) and (st.var is None or st.var.id not in self.p.active) and \
                any(isinstance(a, Var) and self.is_arr(a) and self.mutable(a) for a in e.args):
            # the run-time path calls an undifferentiated recursive call plainly: writes it
            # makes into an array would not be rewound for the adjoint's reads before it
            raise self.err(st, f"{callee_name(fn)} is a recursive call whose result is not differentiated "
                               "and which is passed an array that is written; zyg cannot rewind its "
                               "writes on this path (a compiled recursion can: same argument kinds "
                               "as the call being compiled, a number returned, target python or cpu)",
                           hint="pass a copy of the array, or differentiate through its result",
                           cls=UnsupportedSyntax)
        if st.var is None or st.var.id not in self.p.active:
            # inactive: but an array created in a loop and written later must be restorable
            self.prepare_loop_alloc(blk, st, info)
            return
        active_ops = [i for i, a in enumerate(e.args) if isinstance(a, Var) and a.id in self.p.active]
        if any(is_tuple(self.kind(v)) for v in [st.var] + [e.args[i] for i in active_ops]):
            raise self.err(st, f"{callee_name(fn)}: tuples of differentiated values are not supported yet",
                           hint="unpack the values into separate variables")
        if any(isinstance(v, Var) and v.id in self.p.active for v in e.kwargs.values()):
            raise self.err(st, f"keyword arguments of {callee_name(fn)} must not depend on the inputs")
        if st.var.id in self.buffered_views:
            info["kind"] = "viewbuf"   # its buffer is added into the base's shadow
            self.need_shadow(blk, st.var)
            return
        if self.is_view(st.var):
            info["kind"] = "view"      # no adjoint: the shadow is a view of the base's shadow
            return
        from ..rules import registry
        if not isinstance(fn, Prim) and registry.is_nondifferentiable(fn):
            active_ops = []
        if not active_ops and not (isinstance(fn, GetItem) and e.args and isinstance(e.args[0], Var)
                                   and e.args[0].id in self.p.active):
            # a fresh array that becomes active through writes (np.zeros(n) filled in a loop)
            info["kind"] = "source"
            self.prepare_loop_alloc(blk, st, info)
            return
        if isinstance(fn, GetItem):
            info["kind"] = "read"
            self.check_fancy(st, fn.spec, e.args[1:])
            needed += list(e.args[1:])
            self.need_shadow(blk, e.args[0])     # the adjoint adds into the base's shadow
            return self.finish_needed(blk, st, needed)
        if isinstance(fn, (Attr, MakeTuple)):
            raise self.err(st, f"{callee_name(fn)} of a differentiated value is not supported")
        if isinstance(fn, Hooked):
            hook_fn = self.ns.ref(fn.fn)
            rule = arules.ARule(lambda c, i: f"{hook_fn}({c.dy})")
        elif hasattr(fn, "array_rule"):
            rule = fn.array_rule(self, st, active_ops)      # zyg.grad inside (rules/gradcall.py)
        else:
            rule = (self.recursive_arule(st, active_ops) if isinstance(fn, (Recursive, Checkpointed))
                    else dispatch.rule_for(fn))
        if rule is None and not isinstance(fn, Prim):
            from .array_adjoint import user_array_rule      # @zyg.adjoint on arrays
            rule = user_array_rule(self, st, fn)
        if rule is None:
            raise self.err(st, f"no array rule for {callee_name(fn)}, which this differentiated function "
                               "calls with array arguments",
                           hint=f"write the loop explicitly, or a rule with @zyg.adjoint({callee_name(fn)})")
        for k in e.kwargs:
            if k not in rule.kw_ok:
                raise self.err(st, f"keyword argument {k}= of {callee_name(fn)} is not supported "
                                   "in differentiated code")
        info["kind"] = "rule"
        info["rule"] = rule
        info["targets"] = active_ops
        used = self.rule_needs(st, rule, active_ops)
        info["used"] = used
        for u in used:
            if u == "y":
                needed.append(st.var)
            else:
                needed.append(e.args[int(u[1:])])
        for i in active_ops:
            self.need_shadow(blk, e.args[i])      # the adjoint accumulates into their shadows
        self.prepare_loop_alloc(blk, st, info)
        self.finish_needed(blk, st, needed)

    def prepare_comm(self, blk, st: Stmt, info: dict, rule) -> None:
        """A primitive that communicates (``zyg/tasks/mpi.py``): its reverse communication
        runs whether or not its values are active, so that every rank's adjoint sends and
        receives the messages the other ranks' adjoints expect.  ``rule``: its ``CommRule``."""
        e = st.expr
        info["kind"] = "comm"
        info["rule"] = rule
        info["targets"] = [i for i, a in enumerate(e.args)
                           if isinstance(a, Var) and a.id in self.p.active and
                           (i == rule.main or i in rule.local)]
        link = getattr(rule, "link", None)
        if link is not None:
            # a non-blocking call: reversed at its wait, completed at its start (comm.py)
            if not self.__dict__.get("_comm_checked"):
                from .comm import check_links
                check_links(self)
                self._comm_checked = True
            from .comm import link_name
            info["link"] = link_name(st.var if link[0] == "start" else e.args[link[2]])
            self.__dict__.setdefault("comm_links", set()).add(info["link"])
        stand = [f"_zyg_need_x{k}" for k in range(len(e.args))]
        extra = ("_zyg_link",) if link is not None else ()
        texts = [rule.back(stand, "_zyg_need_dy", str, *extra)] + \
            [f(stand, "_zyg_need_dy", str) for f in rule.local.values()]
        names = {n.id for t in texts for n in ast.walk(ast.parse(t, mode="eval"))
                 if isinstance(n, ast.Name)}
        used = {k for k, n in enumerate(stand) if n in names}
        if rule.like is not None:
            used.add(rule.like)     # a zero cotangent of the result's shape, when inactive
        info["used"] = used
        for i in info["targets"]:
            self.need_shadow(blk, e.args[i])
        self.prepare_loop_alloc(blk, st, info)
        self.finish_needed(blk, st, [e.args[k] for k in sorted(used)])

    def adjoint_comm(self, st: Stmt, info: dict, local: Dict[str, str], ind: int, code: Code) -> None:
        """The reverse communication of a primitive prepared by :meth:`prepare_comm`."""
        e = st.expr
        rule = info["rule"]
        x = [self.operand_value(a, local) if k in info["used"] else "None"
             for k, a in enumerate(e.args)]
        if st.var is not None and self.arr_active(st.var):
            dy = self.cot(st.var, local)
        elif rule.like is not None:
            dy = f"np.zeros_like({x[rule.like]})"
        else:
            dy = "None"

        def ref(name: str) -> str:
            return self.ns.ref(rule.helpers[name], f"_zyg_{name}")

        link = info.get("link")
        if link is not None and rule.link[0] == "wait":
            # the reverse message starts here; the adjoint of the start completes it
            code.add(ind, f"{link} = {rule.back(x, dy, ref, link)}", st.loc)
            g = None
        else:
            g = f"_g{self.new_tmp()}"
            extra = (link,) if link is not None else ()
            code.add(ind, f"{g} = {rule.back(x, dy, ref, *extra)}", st.loc)
        parts = [(rule.main, g)] if rule.main is not None and g is not None else []
        parts += [(i, f(x, dy, ref)) for i, f in rule.local.items()]
        for i, text in parts:
            if i not in info["targets"]:
                continue
            a = e.args[i]
            ne = self.nd_of(st.var) if not self.is_arr(a) and st.var is not None and \
                self.is_arr(st.var) else -1
            self.accumulate(a, text, ne, local, ind, code, st.loc, False)

    def fancy_kinds(self, spec, ops) -> Optional[List[str]]:
        """The kinds of the index operands when the index has an array part, else None."""
        from ..ssa.fancy import is_fancy
        kinds = [self.kind(q) for q in ops]
        return kinds if is_fancy(spec, kinds) else None

    def mask_helper(self, spec, ops) -> bool:
        """Does ``x[spec]`` need the mask helpers (a 2-D mask on a compiled target)?"""
        from .fancy import needs_mask_helper
        kinds = self.fancy_kinds(spec, ops)
        return kinds is not None and needs_mask_helper(spec, kinds, self.p.backend.nd_masks)

    def get_src(self, spec, base, ops, base_txt: str, ops_txt: List[str]) -> str:
        """Source of the read ``base[index]``."""
        if self.mask_helper(spec, ops):
            from .fancy import mask_get_src
            return mask_get_src(base_txt, ops_txt[0])
        if tuple(spec) == ("e",):
            return base_txt     # x[...] is all of x (numba cannot read x[...])
        return f"{base_txt}[{self.index_text(spec, base, ops, ops_txt)}]"

    def set_src(self, spec, base, ops, base_txt: str, ops_txt: List[str], val: str, val_is_array: bool) -> str:
        """Source of the write ``base[index] = val``."""
        if self.mask_helper(spec, ops):
            from .fancy import mask_set_src
            return mask_set_src(base_txt, ops_txt[0], val, val_is_array)
        return f"{base_txt}[{self.index_text(spec, base, ops, ops_txt)}] = {val}"

    def check_loop_aliases(self, st: Stmt) -> None:
        """A checkpointed or parallel loop whose body writes an array it also reads under
        another name (``b = a`` before the loop, or a view of it) is refused: the loop's
        step takes the written arrays and the read ones as separate operands, and its
        recomputation from a snapshot would read the other name's current contents."""
        e = st.expr
        n = e.fn.fn.n
        carried, free = e.args[3:3 + n], e.args[3 + n:]
        names = e.fn.fn.names

        def root(a):
            while isinstance(a, Var) and self.is_view(a):
                a = self.al.view_of[a.id].expr.args[0]
            return a.id if isinstance(a, Var) else None
        for i, c in enumerate(carried):
            if not self.mutable(c):
                continue        # rebound by the body, never written: a value
            for j, f in enumerate(free):
                if self.is_arr(c) and self.is_arr(f) and root(c) is not None and root(c) == root(f):
                    raise self.err(st, f"the loop writes into {names[i]!r} and reads {names[n + j]!r}, "
                                       "the same array or a view of it",
                                   hint=f"read {names[i]!r} itself in the loop body, or copy "
                                        f"{names[n + j]!r} before the loop", cls=UnsupportedSyntax)

    def check_fancy(self, st: Stmt, spec, ops) -> None:
        kinds = self.fancy_kinds(spec, ops)
        if kinds is None:
            return
        from .fancy import unsupported_reason
        why = unsupported_reason(spec, kinds, self.p.backend.nd_masks)
        if why is not None:
            raise self.err(st, f"differentiating {why} is not supported",
                           hint="index with one integer or boolean array (x[idx], x[idx, :], "
                                "x[mask]), or write the loop explicitly", cls=UnsupportedSyntax)

    def recursive_arule(self, st: Stmt, active_ops: List[int]) -> "arules.ARule":
        """A recursive call with arrays: its pullback, popped by the first active operand's
        contribution (zyg/nested/recursion.py); the pullback keeps what it needs."""
        grad_helper = recursive_calls().grad_helper
        fn = st.expr.fn.fn
        ck = isinstance(st.expr.fn, Checkpointed)
        first = min(active_ops)
        n = len(st.expr.args)
        names = {i: self.ns.ref(grad_helper(fn, self.kind(st.expr.args[i]), i, self.p.target, n, ck))
                 for i in active_ops}
        return arules.ARule(lambda c, i: f"{names[i]}({i == first}, {c.dy}, {', '.join(c.x)})")

    def prepare_loop_alloc(self, blk, st: Stmt, info: dict) -> None:
        v = st.var
        if v is None or not self.is_arr(v) or self.is_view(v) or not self.mutable(v):
            return
        if self.in_loop(blk.id):
            info["restore"] = f"_o{self.new_tmp()}"
            # in statement order: the primal pushes it at the allocation, between the
            # records of the statements before and after it, and the adjoint pops in reverse
            self.stmt_pushes[blk.id].append((info["restore"], self.kind(v), id(st)))

    def prepare_shape_record(self, blk, st: Stmt) -> None:
        """An array with a shadow created in a loop may change shape between iterations
        (``w = x[i:] * 2.0``, ``tmp = np.zeros(n - i)``): its allocation records the shape
        of the shadow it replaces (the previous iteration's), so that the reverse of the
        allocation gives the shadow back the shape of the previous iteration's array."""
        v = st.var
        if v is None or v.id not in self.shadow_roots or not self.is_arr(v) or \
                not self.in_loop(blk.id) or v.id in self._edge_arrays():
            # (an array carried to a written block parameter travels with its shadow as a
            # pointer: its shadow keeps one shape, and a change raises ShapeChanged)
            return
        names = [f"_sh{self.new_tmp()}" for _ in range(array_ndim(self.kind(v)))]
        self.__dict__.setdefault("shape_records", {})[v.id] = names
        for n in names:     # after the statement's own records, as alloc_shadow pushes them
            self.stmt_pushes[blk.id].append((n, "int", id(st)))

    def prepare_param_shape_records(self, blk) -> None:
        """An unwritten array parameter of a block in a loop (``w = w[1:] * w[:-1]`` carried
        by the loop) may change shape from one entry to the next: the entry records the
        shape of the shadow it replaces, before the block's other records, and the reverse
        of the entry (``adjoint_entry``) gives the shadow that shape back."""
        if blk.id == self.fn.order[0] or not self.in_loop(blk.id):
            return
        first = []
        lists = self._list_buffers()
        for p in blk.params:
            if p.id in self.shadow_roots and self.is_arr(p) and not self.mutable(p) and p.id not in lists:
                names = [f"_sh{self.new_tmp()}" for _ in range(array_ndim(self.kind(p)))]
                self.__dict__.setdefault("shape_records", {})[p.id] = names
                first += [(n, "int", -1) for n in names]
        self.stmt_pushes[blk.id][:0] = first

    def _list_buffers(self) -> Set[int]:
        """Ids of list buffers (``out.append(v)`` results and the parameters they reach):
        their shadows keep the largest room, and the pullback of a push into an empty buffer
        keeps that shape (``rules/lists.list_back_buf``)."""
        got = self.__dict__.get("_list_buffer_ids")
        if got is None:
            from ..rules.lists import ListPush
            got = {st.var.id for b in self.fn.iter_blocks() for st in b.stmts
                   if st.var is not None and isinstance(st.expr.fn, ListPush)}
            grew = True
            while grew:
                grew = False
                for b in self.fn.iter_blocks():
                    for q in self.p.preds[b.id]:
                        for a, p in zip(self.edge_args(q, b.id), b.params):
                            if isinstance(a, Var) and a.id in got and p.id not in got:
                                got.add(p.id)
                                grew = True
            self._list_buffer_ids = got
        return got

    def header_entry_records(self, head, ind: int, code: Code) -> None:
        """The entry of a counted loop's header in an iteration of the ``for`` loop that
        replaces its test by a trip count (the header's block itself runs once, at the exit):
        array parameters that may change shape record their shadow's, as ``primal_body``
        does for every entry of a header that runs per iteration."""
        for p in head.params:
            if p.id in getattr(self, "shape_records", {}):
                self.alloc_shadow(p, ind, code, True)

    def shadow_reset(self, v, ind: int, code: Code) -> None:
        """Zero the shadow of ``v`` for the previous iteration, giving it back the shape
        recorded for that iteration where there is one."""
        d = self.dname(v)
        shape_names = getattr(self, "shape_records", {}).get(v.id)
        if not shape_names:
            code.add(ind, f"{d}[...] = 0")
            return
        shape = "(" + "".join(f"{k}, " for k in shape_names) + ")"
        code.put(ind, If(f"{d}.shape == {shape}"))
        code.add(ind + 1, f"{d}[...] = 0")
        code.put(ind, Else())
        code.add(ind + 1, f"{d} = np.zeros({shape}, {d}.dtype)")

    def _edge_arrays(self) -> Set[int]:
        """Ids of the arrays passed along an edge to a written block parameter."""
        got = self.__dict__.get("_edge_array_ids")
        if got is None:
            got = set()
            for b in self.fn.iter_blocks():
                for q in self.p.preds[b.id]:
                    got.update(a.id for a, p in zip(self.edge_args(q, b.id), b.params)
                               if isinstance(a, Var) and self.is_arr(a) and self.mutable(p))
            self._edge_array_ids = got
        return got

    def new_tmp(self) -> int:
        self._ntmp = getattr(self, "_ntmp", 0) + 1
        return self._ntmp

    def getitem_kind(self, base: Var, spec, ops=()) -> str:
        from ..ssa.analysis import array_kind
        from ..ssa.fancy import fancy_ndim
        k = self.kind(base)
        fnd = fancy_ndim(k, spec, [self.kind(q) for q in ops])
        if fnd is not None:
            return array_kind(array_dtype(k), fnd)
        nd = array_ndim(k) - spec.count("i") + spec.count("n")
        return elem_kind(k) if nd == 0 else array_kind(array_dtype(k), nd)

    def view_operands(self, st: Stmt) -> List[Any]:
        """The operands besides the base that ``view_src`` reads to apply the view
        statement ``st`` again: the indices of ``a[i]``, the shape of a reshape."""
        fn = st.expr.fn
        if isinstance(fn, GetItem) or fn is np.reshape:
            return list(st.expr.args[1:])
        return []

    def need_shadow(self, blk, a) -> None:
        """The adjoint of ``blk`` finds the shadow of array ``a``. A root's shadow is a
        buffer with a fixed name; a view's is the same view of its base's shadow, so the
        view's indices (``W = P[2 * k]`` rebound in an outer loop and read in an inner one)
        must be the instance the primal used there: popped or recomputed like any value."""
        while isinstance(a, Var) and self.is_view(a):
            st = self.al.view_of[a.id]
            for q in self.view_operands(st):
                self.need_value(blk, q)
            a = st.expr.args[0]

    def tuple_parts(self, a) -> Optional[List[Any]]:
        """What a tuple value left after scalar replacement (the shape of a reshape or
        of np.zeros) is made from: the entries of ``(n, m)``, or the array of ``b.shape``.
        None for anything else."""
        d = self.def_stmt(a)
        if d is None:
            return None
        e = d[2].expr
        if isinstance(e.fn, MakeTuple):
            return list(e.args)
        if isinstance(e.fn, Attr) and e.fn.attr == "shape" and self.is_arr(e.args[0]):
            return [e.args[0]]
        return None

    def tuple_src(self, a: Var, local: Dict[str, str]) -> str:
        """The tuple ``a`` rebuilt in the adjoint from its parts (see ``tuple_parts``)."""
        e = self.def_stmt(a)[2].expr
        if isinstance(e.fn, Attr):
            return f"{self.arr_value(e.args[0], local)}.shape"
        return "(" + "".join(self.value_ref(q, local) + ", " for q in e.args) + ")"

    def finish_needed(self, blk, st: Stmt, needed: List[Any]) -> None:
        """Record pushes for values the adjoint reads in ``blk`` (scalars, functional arrays)."""
        for a in needed:
            self.need_value(blk, a)

    def need_value(self, blk, a, contents: bool = True) -> None:
        """The adjoint of ``blk`` uses ``a``: its value, or for an array written in place
        only its identity (``contents=False``: to find its shadow or rewind a write)."""
        if not isinstance(a, Var) or self.recomputable(a, blk.id):
            return
        if self.is_view(a):
            st = self.al.view_of[a.id]
            for q in self.view_operands(st):
                self.need_value(blk, q)
            self.need_value(blk, st.expr.args[0], contents)
            return
        if is_tuple(self.kind(a)):
            parts = self.tuple_parts(a)
            if parts is not None:       # a shape (n, m): its entries, popped or recomputed
                for q in parts:
                    self.need_value(blk, q, contents=False)
                return
        if self.is_arr(a) and self.mutable(a):
            # written arrays are rewound and read in place: their writes (and, in a loop,
            # their allocations) must be recorded when the adjoint reads their contents,
            # even when no push is needed here
            if contents:
                self.mark_read(a)
            return
        if a.id not in self.p.defblock or not self.needs_push(blk.id, self.p.defblock[a.id]):
            return
        if self.remat(a, blk.id):
            return
        if self.is_arr(a):
            lst = self.arr_pushes[blk.id]
            if (var_name(a), self.kind(a)) not in lst:
                lst.append((var_name(a), self.kind(a)))
            return
        item = (var_name(a), self.kind(a))
        if item not in self.pushes[blk.id]:
            self.pushes[blk.id].append(item)
            self.stack_used.add(KIND_STACK.get(self.kind(a), "f"))

    # -- rematerialisation: values read again in the adjoint instead of taped ------------------
    def def_stmt(self, v) -> Optional[Tuple[int, int, Stmt]]:
        if not hasattr(self, "_defs"):
            self._defs = {}
            for blk in self.fn.iter_blocks():
                for k, st in enumerate(blk.stmts):
                    if st.var is not None:
                        self._defs[st.var.id] = (blk.id, k, st)
        return self._defs.get(v.id)

    def remat(self, a, blk_id: int) -> bool:
        """Can the adjoint of block ``blk_id`` recompute ``a`` instead of popping it?

        Yes for constants, recomputed loop counters, values that need no tape there,
        integer arithmetic on such values defined in the block, and scalar reads
        ``arr[idx]`` in the block from an array that no later statement of the block
        writes: every write after the block is rewound when its adjoint runs, so
        the array holds what the read saw."""
        if not isinstance(a, Var):
            return True
        key = (a.id, blk_id)
        memo = self.__dict__.setdefault("_remat_memo", {})
        if key in memo:
            return memo[key]
        memo[key] = False          # cycles (none in SSA within a block, but be safe)
        memo[key] = self._remat(a, blk_id)
        return memo[key]

    def _remat(self, a: Var, blk_id: int) -> bool:
        import operator as _o
        if self.recomputable(a, blk_id):
            return True
        db = self.p.defblock.get(a.id)
        if db is None:
            return False
        if self.is_arr(a):
            if self.is_view(a):
                st = self.al.view_of[a.id]
                return all(self.remat(q, blk_id) for q in [st.expr.args[0]] + self.view_operands(st))
            return self.mutable(a) or not self.needs_push(blk_id, db)
        if not self.needs_push(blk_id, db):
            return True
        d = self.def_stmt(a)
        if d is None or d[0] != blk_id:
            return False
        _, k, st = d
        e = st.expr
        if self.kind(a) in ("int", "bool") and e.fn in (_o.add, _o.sub, _o.mul, _o.floordiv, _o.mod) \
                and not e.kwargs:
            return all(self.remat(q, blk_id) for q in e.args)
        if self.kind(a) == "float" and e.fn in _FLOAT_REMAT and not e.kwargs and \
                all(not isinstance(q, Var) or self.kind(q) in ("float", "int", "bool") for q in e.args):
            # cheap float arithmetic: the same operations on the same values give the same
            # bits again; bounded, since every use in the adjoint repeats the expression
            return self.remat_ops(a, blk_id) <= REMAT_FLOAT_OPS and \
                all(self.remat(q, blk_id) for q in e.args)
        if isinstance(e.fn, GetItem) and e.args and self.is_arr(e.args[0]) and not self.is_arr(a):
            base = e.args[0]
            if not all(self.remat(q, blk_id) for q in e.args):
                return False
            cls = self.al.find(base.id)
            for later in self.fn.blocks[blk_id].stmts[k + 1:]:
                le = later.expr
                if (isinstance(le.fn, SetItem) or isinstance(le.fn, InPlace)) and isinstance(le.args[0], Var) \
                        and le.args[0].id in self.al.parent and self.al.find(le.args[0].id) == cls:
                    return False
            self.mark_read(base)
            return True
        return False

    def remat_ops(self, a, blk_id: int) -> int:
        """The float operations the adjoint of block ``blk_id`` repeats to recompute the
        float ``a`` from values it has (each use of a value defined in the block counted
        again)."""
        d = self.def_stmt(a) if isinstance(a, Var) and self.kind(a) == "float" else None
        if d is None or d[0] != blk_id or self.recomputable(a, blk_id) or \
                d[2].expr.fn not in _FLOAT_REMAT:
            return 0        # (integer arithmetic is recomputed however long: see _remat)
        n = 1
        for q in d[2].expr.args:
            n += self.remat_ops(q, blk_id)
            if n > REMAT_FLOAT_OPS:
                break
        return n

    def mark_read(self, a) -> None:
        """The adjoint reads ``a``'s memory: its writes must be recorded and rewound."""
        if isinstance(a, Var) and a.id in self.al.parent:
            root = self.al.find(a.id)
            reads = self.__dict__.setdefault("mem_read", set())
            if root not in reads:
                assert not getattr(self, "_mem_frozen", False), "array read found after the tape was planned"
                reads.add(root)

    def skip_unread_records(self) -> None:
        """Writes into arrays whose contents the adjoint never reads, and that are not
        the caller's (no argument shares their memory), need no record: nothing
        observes the memory after the primal (the ODE's stage arrays)."""
        reads = self.__dict__.setdefault("mem_read", set())
        # a kernel's adjoint leaves its arrays as its primal leaves them (keep_final): its
        # arguments' writes are rewound only where the adjoint reads their contents
        arg_roots = set() if getattr(self.p, "keep_final", False) else \
            {self.al.find(p.id) for p in self.fn.params if p.id in self.al.parent}
        for blk in self.fn.iter_blocks():
            keep = []
            for item in self.stmt_pushes[blk.id]:
                keep.append(item)
            for st in blk.stmts:
                info = self.astmts.get(id(st))
                if not info:
                    continue
                if info["kind"] == "inplace" and st.expr.fn.op in (operator.mul, operator.truediv) \
                        and st.expr.args[0].id in self.p.active:
                    continue            # the adjoint reads the old contents
                if info["kind"] in ("setitem", "inplace"):
                    base = st.expr.args[0]
                elif "restore" in info:
                    base = st.var
                else:
                    continue
                root = self.al.find(base.id)
                if root in reads or root in arg_roots:
                    continue
                info["skip_old"] = True
                names = {info.get("old"), info.get("restore")}
                keep = [it for it in keep if it[0] not in names]
                info.pop("restore", None)
            self.stmt_pushes[blk.id] = keep
        self._mem_frozen = True

    def remat_src(self, a: Var, local: Dict[str, str]) -> str:
        from ..ssa.emit import INFIX as _INFIX
        _, _, st = self.def_stmt(a)
        e = st.expr
        if isinstance(e.fn, GetItem):
            base = self.arr_value(e.args[0], local)
            ops = [self.value_ref(q, local) for q in e.args[1:]]
            return f"{base}[{self.index_text(e.fn.spec, e.args[0], e.args[1:], ops)}]"
        if len(e.args) == 1:
            return f"({PREFIX[e.fn]}{self.value_ref(e.args[0], local)})"
        x, y = (self.value_ref(q, local) for q in e.args)
        return f"({x} {_INFIX[e.fn]} {y})"

    # -- indices -----------------------------------------------------------------------------
    @property
    def nonneg(self) -> Dict[int, int]:
        """Int values proven non-negative (``analysis.int_lower_bounds``), computed once."""
        got = self.__dict__.get("_nonneg")
        if got is None:
            from ..ssa.analysis import int_lower_bounds
            got = self._nonneg = int_lower_bounds(self.fn, self.p.kinds)
        return got

    def index_text(self, spec, base, operands, ops: List[str]) -> str:
        """The subscript of ``base[...]`` from the rendered operands ``ops``.

        In compiled code an integer index of an array that is proven non-negative is
        cast to ``np.uint64``: numba then leaves out its negative-index wraparound (a
        compare and select on every access, which also keeps LLVM from simplifying
        the address arithmetic of inner loops). The value is the same."""
        if UNSIGNED_INDEX and self.p.backend.compiled and isinstance(base, Var) and self.is_arr(base):
            ops = list(ops)
            k = 0
            for s in spec:
                if s == "i":
                    q = operands[k]
                    if isinstance(q, Var) and self.kind(q) == "int" and q.id in self.nonneg:
                        ops[k] = f"np.uint64({ops[k]})"
                    k += 1
                elif s == "s":
                    k += 3
        return index_src(spec, ops)

    # -- values and shadows in the adjoint --------------------------------------------------
    def view_src(self, st: Stmt, base: str, ops: List[str], shadow: bool = False) -> str:
        """Apply the view-producing statement ``st`` to ``base`` (value or, ``shadow``, the
        shadow of the view's base)."""
        fn = st.expr.fn
        if is_reshape(fn):
            shape = shape_src(st, ops)
            if shadow:
                return self.reshapes.derived(st, base, shape, self.shadow_contiguous(st.expr.args[0]))
            return self.reshapes.value(st, base, shape)
        if isinstance(fn, GetItem):
            return f"{base}[{self.index_text(fn.spec, st.expr.args[0], st.expr.args[1:], ops)}]"
        if isinstance(fn, Attr):
            return f"{base}.{fn.attr}"
        if isinstance(fn, InPlace):
            return base
        if fn is np.transpose:
            return f"{base}.T"
        raise AssertionError(fn)

    def arr_value(self, a, local: Dict[str, str]) -> str:
        """Value of array ``a`` as the primal saw it at this point of the adjoint."""
        if self.is_view(a):
            st = self.al.view_of[a.id]
            base = self.arr_value(st.expr.args[0], local)
            return self.view_src(st, base, [self.value_ref(q, local) for q in self.view_operands(st)])
        n = var_name(a)
        if n in local:
            return local[n]
        self.adj_uses.add(n)
        return n

    def shadow(self, a, local: Dict[str, str]) -> str:
        """The shadow of array ``a`` in the adjoint (a view of its base's shadow for views)."""
        if self.is_view(a) and a.id not in self.buffered_views:
            st = self.al.view_of[a.id]
            base = self.shadow(st.expr.args[0], local)
            return self.view_src(st, base, [self.value_ref(q, local) for q in self.view_operands(st)], True)
        n = self.dname(a)
        self.adj_uses.add(n)
        return n

    def shadow_primal(self, a) -> str:
        if self.is_view(a) and a.id not in self.buffered_views:
            st = self.al.view_of[a.id]
            base = self.shadow_primal(st.expr.args[0])
            return self.view_src(st, base, [self.src(q) for q in self.view_operands(st)], True)
        return self.dname(a)

    def shadow_contiguous(self, a) -> bool:
        """Is the shadow of array ``a`` C-contiguous? Buffers are; a view of one is when its
        view keeps C order (``a[i]``, ``a[2:]``, a reshape; not ``a.T`` nor ``a[:, j]``)."""
        while self.is_view(a) and a.id not in self.buffered_views:
            st = self.al.view_of[a.id]
            if not view_keeps_c(st, self.p.kinds):
                return False
            a = st.expr.args[0]
        return True

    def accumulate(self, target, expr: str, ne: int, local: Dict[str, str], ind: int,
                   code: Code, loc=None, cplx: bool = False) -> None:
        """Add ``expr`` (of ndim ``ne``; it may be larger than the target when the
        forward broadcast the target) into the cotangent of operand ``target``.
        ``cplx``: ``expr`` may be complex; a real target takes its real part."""
        if not isinstance(target, Var) or target.id not in self.p.active:
            return
        if cplx and ne > 0 and not self.is_arr(target):
            expr = f"np.sum({expr})"
            ne = 0
        expr = self.proj(target, expr, cplx)
        if self.is_arr(target):
            sh = self.shadow(target, local)
            nt = array_ndim(self.kind(target))
            if ne >= nt and ne > 0:
                code.add(ind, f"_zyg_acc_{nt}_{ne}({sh}, {expr})", loc)
            else:
                code.add(ind, inplace_src(sh, "+", expr), loc)
        else:
            d = self.dname(target)
            code.add(ind, f"{d} += np.sum({expr})" if ne > 0 else f"{d} += {expr}", loc)

    def nd_of(self, v) -> int:
        return array_ndim(self.kind(v)) if self.is_arr(v) else 0

    # -- primal ------------------------------------------------------------------------------
    def primal_array_stmt(self, blk, st: Stmt, ind: int, code: Code, record: bool) -> None:
        e = st.expr
        fn = e.fn
        info = self.astmts[id(st)]
        args = [self.src(a) for a in e.args]
        lhs = var_name(st.var) + " = " if st.var is not None else ""
        loop = self.in_loop(blk.id)
        if info["kind"] in ("native", "native_plain") and record:
            return self.primal_native(blk, st, info, ind, code)
        if info["kind"] in ("absorbed", "ppart") and record:
            return self.primal_absorbed(blk, st, info, ind, code)
        if "restore" in info and record:
            # the previous iteration's contents of an array that is allocated again
            self.push_now(info["restore"], var_name(st.var), self.kind(st.var), ind, code)
        if isinstance(fn, SetItem) and info.get("atomic"):
            if not getattr(self, "skip_atomic", False):
                from .atomics import atomic_add
                f = self.ns.ref(atomic_add(self.p.backend, len(fn.spec)), "_zyg_atomic_add")
                idx = self.index_text(fn.spec, e.args[0], e.args[1:-1], args[1:-1])
                code.add(ind, f"{f}({args[0]}, ({idx},), {args[-1]})", st.loc)
            return
        if isinstance(fn, SetItem):
            idx = self.index_text(fn.spec, e.args[0], e.args[1:-1], args[1:-1])
            target = self.get_src(fn.spec, e.args[0], e.args[1:-1], args[0], args[1:-1])
            if record and not info.get("skip_old"):
                if is_array(info["old_kind"]):
                    if loop:
                        self.push_now(info["old"], target, info["old_kind"], ind, code)
                    else:
                        code.add(ind, f"{info['old']} = {target}.copy()", st.loc)
                else:
                    code.add(ind, f"{info['old']} = {target}", st.loc)
                    if loop:
                        self.push_now(info["old"], info["old"], info["old_kind"], ind, code)
            code.add(ind, self.set_src(fn.spec, e.args[0], e.args[1:-1], args[0], args[1:-1], args[-1],
                                       self.is_arr(e.args[-1])), st.loc)
            return
        if isinstance(fn, InPlace) and info["kind"] == "inplace":
            if record and not info.get("skip_old"):
                if loop:
                    self.push_now(info["old"], args[0], self.kind(e.args[0]), ind, code)
                else:
                    code.add(ind, f"{info['old']} = {args[0]}.copy()", st.loc)
            rhs = f"{args[1]}.copy()" if info["overlap"] else args[1]
            code.add(ind, inplace_src(args[0], InPlace.SYMBOL[fn.op][0], rhs), st.loc)
            code.add(ind, f"{lhs}{args[0]}", st.loc)
            return
        if isinstance(fn, InPlace):
            fn = fn.op
        if isinstance(fn, GetItem):
            code.add(ind, f"{lhs}{self.get_src(fn.spec, e.args[0], e.args[1:], args[0], args[1:])}", st.loc)
        elif is_reshape(fn) and self.is_view(st.var):
            self.reshapes.check_code(st, args[0], ind, code)
            code.add(ind, f"{lhs}{self.view_src(st, args[0], args[1:])}", st.loc)
        elif isinstance(fn, Attr):
            code.add(ind, f"{lhs}{args[0]}.{fn.attr}", st.loc)
        elif isinstance(fn, MakeTuple):
            code.add(ind, f"{lhs}({''.join(a + ', ' for a in args)})", st.loc)
        elif isinstance(fn, ArrayOf):
            code.add(ind, f"{lhs}np.array([{', '.join(args)}])", st.loc)
        elif isinstance(fn, Stacked):
            kw = "".join(f", {k}={self.src(v)}" for k, v in e.kwargs.items())
            code.add(ind, f"{lhs}np.{fn.fn.__name__}(({''.join(a + ', ' for a in args)}){kw})", st.loc)
        elif fn in INFIX and len(args) == 2 and not e.kwargs:
            code.add(ind, f"{lhs}{args[0]} {INFIX[fn]} {args[1]}", st.loc)
        elif fn in PREFIX and len(args) == 1 and not e.kwargs:
            code.add(ind, f"{lhs}{PREFIX[fn]}{args[0]}", st.loc)
        elif isinstance(fn, Hooked):
            # the identity, on a copy: the result is a new array for the alias analysis
            code.add(ind, f"{lhs}{args[0]}.copy()" if self.is_arr(e.args[0]) else f"{lhs}{args[0]}", st.loc)
        elif hasattr(fn, "primal_src"):
            code.add(ind, f"{lhs}{fn.primal_src(self, st, args)}", st.loc)   # rules/gradcall.py
        elif isinstance(fn, (Recursive, Checkpointed)):
            h = self.ns.ref(recursive_calls().call_helper(fn.fn, [self.kind(a) for a in e.args], self.kind(st.var),
                                        self.p.target, record=record and info.get("kind") == "rule"
                                        and isinstance(fn, Recursive)))
            code.add(ind, f"{lhs}{h}({', '.join(args)})", st.loc)
        else:
            args, kw = dispatch.call_parts(fn, e.args, args, e.kwargs, self.src)
            try:
                special = dispatch.primal_call(fn, args, [self.kind(a) for a in e.args], kw,
                                             self.kind(st.var) if st.var is not None else None)
            except arules._RuleError as ex:
                raise self.err(st, f"{callee_name(fn)}: {ex}", cls=UnsupportedSyntax)
            if special is not None:
                code.add(ind, f"{lhs}{special}", st.loc)
            else:
                f = self.ns.ref(fn)
                args += [f"{k}={v[0]}" for k, v in kw.items()]
                code.add(ind, f"{lhs}{f}({', '.join(args)})", st.loc)
        if record and st.var is not None and st.var.id in self.shadow_roots:
            if hasattr(fn, "shadow_src"):
                # memory the back end allocates its own way (cuda.shared.array)
                for line in fn.shadow_src(self, var_name(st.var), self.dname(st.var)):
                    code.add(ind, line, st.loc)
            else:
                self.alloc_shadow(st.var, ind, code, loop, st.loc)

    def zeros_as(self, n: str) -> str:
        """A zero array of the shape and dtype of the array named ``n``, as the back end
        spells it (``Backend.zeros_as``)."""
        h = self.p.backend.zeros_as()
        if h is None:
            return f"np.zeros({n}.shape, {n}.dtype)"
        return f"{self.ns.ref(h, '_zyg_zeros_as')}({n})"

    def alloc_shadow(self, v: Var, ind: int, code: Code, loop: bool, loc=None) -> None:
        n, d = var_name(v), self.dname(v)
        shape_names = getattr(self, "shape_records", {}).get(v.id) if loop else None
        if shape_names:
            # a statement in a loop: the shape may change, the reverse pass reshapes
            for k, name in enumerate(shape_names):
                self.push_now(name, f"{d}.shape[{k}]", "int", ind, code)
            code.add(ind, f"{d} = _zyg_shadow_like({d}, {n})")
            return
        if loop:
            if loc is not None and loc.filename is not None:
                # name the user's line where the array is made (numba raises it with constant args)
                from ..errors import ShapeChanged
                exc = self.ns.ref(ShapeChanged)
                msg = ("an array created inside a loop changes shape between iterations; "
                       "zyg differentiates loops whose arrays keep one shape per line")
                hint = ("make the array at its largest shape before the loop and use a slice "
                        "of it, or write the inner operation as a loop over indices")
                code.put(ind, If(f"{d}.size != 0 and {d}.shape != {n}.shape"))
                code.add(ind + 1, f"raise {exc}({msg!r}, {loc.filename!r}, {int(loc.lineno)}, "
                                  f"{int(loc.col or 0)}, {hint!r})")
            code.add(ind, f"{d} = _zyg_shadow_like({d}, {n})")
        else:
            code.add(ind, f"{d} = {self.zeros_as(n)}")

    def push_now(self, name: str, value: str, kind: str, ind: int, code: Code) -> None:
        """Push ``value`` right now (a statement's record); ``name`` is its adjoint name."""
        if is_array(kind):
            s = stack_of_array(kind)
            # the data must leave free the room that the scalar pushes after it were
            # promised when their block (or structured nest) checked capacity
            ends = getattr(self, "_s_end", None)
            if ends is not None and s in ends:
                code.put(ind, Reserve(s, f"{value}.size"))
                need = f"_{s}end"
            else:
                need = f"_{s}sp + {value}.size + {getattr(self, '_most', {}).get(s, 0)}"
            code.put(ind, RoomCheck(s, need))
            code.put(ind + 1, Grow(s, need))
            code.put(ind + 1, Capacity(s))
            code.put(ind, PushArray(s, value))
            code.put(ind, Advance(s, f"{value}.size"))
            code.put(ind, Capacity(s))
            nd = array_ndim(kind)
            for k in range(nd):
                code.put(ind, Store("i", k, f"{value}.shape[{k}]"))
            code.put(ind, Advance("i", nd))
        else:
            s = KIND_STACK.get(kind, "f")
            code.put(ind, Store(s, None, value))
            code.put(ind, Advance(s, 1))

    def pop_now(self, local_name: str, kind: str, ind: int, code: Code) -> None:
        if is_array(kind):
            dt = "bool" if kind[0] == "b" else array_dtype(kind)
            code.put(ind, PopArray(local_name, stack_of_array(kind), array_ndim(kind), dt))
        else:
            s = KIND_STACK.get(kind, "f")
            code.put(ind, Pop(s, 1))
            code.put(ind, Peek(local_name, s, None))

    def array_block_demand(self, blk) -> Dict[str, int]:
        need: Dict[str, int] = {}
        items = [(k,) for _, k, _ in self.stmt_pushes.get(blk.id, [])] + \
                [(k,) for _, k in self.arr_pushes.get(blk.id, [])]
        for (k,) in items:
            if is_array(k):
                nd = array_ndim(k)
                need["i"] = need.get("i", 0) + nd
            else:
                s = KIND_STACK.get(k, "f")
                need[s] = need.get(s, 0) + 1
        return need

    def push_block_arrays(self, blk, ind: int, code: Code) -> None:
        for name, k in self.arr_pushes.get(blk.id, []):
            self.push_now(name, name, k, ind, code)

    # -- adjoint ------------------------------------------------------------------------------
    def pop_block_arrays(self, blk, local: Dict[str, str], ind: int, code: Code) -> None:
        for name, k in reversed(self.arr_pushes.get(blk.id, [])):
            local[name] = f"{name}_b{blk.id}"
            self.pop_now(local[name], k, ind, code)

    def pop_stmt_records(self, blk, local: Dict[str, str], ind: int, code: Code,
                         only: Optional[Set[str]] = None) -> None:
        """Pop the records the statements of ``blk`` pushed (``only``: those named)."""
        for name, k, _ in reversed(self.stmt_pushes.get(blk.id, [])):
            if only is not None and name not in only:
                continue
            local[name] = name
            self.pop_now(name, k, ind, code)

    def adjoint_array_stmt(self, blk, st: Stmt, local: Dict[str, str], ind: int, code: Code) -> None:
        e = st.expr
        fn = e.fn
        info = self.astmts[id(st)]
        kind = info["kind"]
        loop = self.in_loop(blk.id)
        if kind == "native" and info.get("ploop"):
            return self.adjoint_ploop(st, info, local, ind, code, loop)
        if kind == "native":
            return self.adjoint_native(st, info, local, ind, code, loop)
        if kind in ("native_plain", "absorbed", "ppart"):
            return
        if hasattr(fn, "adjoint_effect"):
            # an effect the adjoint repeats at the mirrored point (cuda.syncthreads)
            code.add(ind, fn.adjoint_effect(self), st.loc)
            return
        if kind == "setitem":
            base = e.args[0]
            ops = [self.value_ref(q, local) for q in e.args[1:-1]]
            idx = self.index_text(fn.spec, base, e.args[1:-1], ops)
            val = e.args[-1]
            if base.id in self.p.active:
                sh = f"{self.shadow(base, local)}[{idx}]"
                g = f"_g{self.new_tmp()}"
                if is_array(info["old_kind"]):
                    shb = self.shadow(base, local)
                    code.add(ind, f"{g} = {self.get_src(fn.spec, base, e.args[1:-1], shb, ops)}.copy()", st.loc)
                    code.add(ind, self.set_src(fn.spec, base, e.args[1:-1], shb, ops, "0.0", False), st.loc)
                    fk = self.fancy_kinds(fn.spec, e.args[1:-1])
                    if fk is not None:     # a repeated index: only its last write counts
                        from .fancy import keep_last
                        last = keep_last(fn.spec, ops, fk, self.arr_value(base, local), g, self.new_tmp())
                        if last is not None:
                            code.graft(ind, last, st.loc)
                    self.accumulate(val, g, array_ndim(info["old_kind"]), local, ind, code, st.loc,
                                    self.cplx(st))
                else:
                    code.add(ind, f"{g} = {sh}", st.loc)
                    if not info.get("atomic"):
                        code.add(ind, f"{sh} = 0", st.loc)
                    if isinstance(val, Var) and val.id in self.p.active:
                        code.add(ind, f"{self.dname(val)} += {self.proj(val, g, self.cplx(st))}", st.loc)
            if not info.get("skip_old"):
                old = local.get(info["old"], info["old"])
                if old == info["old"] and not loop:
                    self.adj_uses.add(old)
                code.add(ind, self.set_src(fn.spec, base, e.args[1:-1], self.arr_value(base, local), ops, old,
                                           is_array(info["old_kind"])), st.loc)
            return
        if kind == "inplace":
            a, b = e.args
            old = local.get(info["old"], info["old"])
            if old == info["old"] and not loop:
                self.adj_uses.add(old)
            if info["overlap"]:
                return self.adjoint_inplace_shared(st, info, old, local, ind, code)
            if a.id in self.p.active:
                g = self.shadow(a, local)
                op = fn.op
                import operator as _o
                bv = self.value_ref(b, local) if not self.is_arr(b) else self.arr_value(b, local)
                na = self.nd_of(a)
                cx = self.cplx(st)
                if cx:      # the pullback of a product conjugates the other factor
                    old, bv = f"np.conj({old})", f"np.conj({bv})"
                if op is _o.add:
                    self.accumulate(b, g, na, local, ind, code, st.loc, cx)
                elif op is _o.sub:
                    self.accumulate(b, f"-{g}", na, local, ind, code, st.loc, cx)
                elif op is _o.mul:
                    self.accumulate(b, f"{g} * {old}", na, local, ind, code, st.loc, cx)
                    code.add(ind, inplace_src(g, "*", bv), st.loc)
                else:
                    self.accumulate(b, f"-{g} * {old} / ({bv} * {bv})", na, local, ind, code, st.loc, cx)
                    code.add(ind, inplace_src(g, "/", bv), st.loc)
                if cx:
                    old = local.get(info["old"], info["old"])
            if not info.get("skip_old"):
                code.add(ind, f"{self.arr_value(a, local)}[...] = {old}", st.loc)
            return
        if kind == "viewbuf":
            base = st.expr.args[0]
            if base.id in self.p.active:
                ops = [self.value_ref(q, local) for q in self.view_operands(st)]
                if is_reshape(st.expr.fn):
                    # the reshape's own buffer, reshaped back into the base's shadow (which
                    # may not be contiguous: a reshape of it would be a copy)
                    target = self.shadow(base, local)
                    code.add(ind, inplace_src(target, "+", f"np.reshape({self.dname(st.var)}, "
                                                           f"{target}.shape)"), st.loc)
                else:
                    target = self.view_src(st, self.shadow(base, local), ops, True)
                    code.add(ind, inplace_src(target, "+", self.dname(st.var)), st.loc)
            self.consume(st.var, loop, ind, code)
            return
        if kind in ("plain", "view", "source"):
            if kind == "source":
                self.consume(st.var, loop, ind, code)
            self.restore_alloc(st, info, local, ind, code)
            return
        if kind == "read":
            base = e.args[0]
            idx = self.index_text(fn.spec, base, e.args[1:], [self.value_ref(q, local) for q in e.args[1:]])
            dy = self.cot(st.var, local)
            fk = self.fancy_kinds(fn.spec, e.args[1:])
            if base.id in self.p.active and fk is not None:
                # x[idx]: repeated indices accumulate (numpy's dx[idx] += dy would not)
                from .fancy import scatter_add
                ops = [self.operand_value(q, local) for q in e.args[1:]]
                code.graft(ind, scatter_add(fn.spec, ops, fk, self.shadow(base, local), dy, self.new_tmp()),
                           st.loc)
            elif base.id in self.p.active and self.atomic_root(base):
                # a shadow shared by the threads of a parallel loop (zyg/tasks/prange.py)
                from .atomics import atomic_add
                f = self.ns.ref(atomic_add(self.p.backend, len(fn.spec)), "_zyg_atomic_add")
                code.add(ind, f"{f}({self.shadow(base, local)}, ({idx},), {dy})", st.loc)
            elif base.id in self.p.active and self.is_arr(st.var):
                # a view (basic indexing): added into in place, no slice assignment
                # (inplace_src)
                code.add(ind, inplace_src(f"{self.shadow(base, local)}[{idx}]", "+", dy), st.loc)
            elif base.id in self.p.active:
                code.add(ind, f"{self.shadow(base, local)}[{idx}] += {dy}", st.loc)
            self.consume(st.var, loop, ind, code)
            self.restore_alloc(st, info, local, ind, code)
            return
        if kind == "comm":
            self.adjoint_comm(st, info, local, ind, code)
            if st.var is not None and self.is_arr(st.var):
                self.consume(st.var, loop, ind, code)
            self.restore_alloc(st, info, local, ind, code)
            return
        if kind == "rule":
            rule = info["rule"]
            # only the operands the backward code reads: finding another one's value could
            # rematerialise a read of an array whose records were planned without it
            used = info["used"]
            x = [self.operand_value(a, local) if f"x{k}" in used else "None" for k, a in enumerate(e.args)]
            y = self.operand_value(st.var, local) if st.var is not None and "y" in used else "None"
            dy = self.cot(st.var, local)
            c = self.make_ctx(st, x, y, dy)
            for i in info["targets"]:
                text = rule.back(c, i)
                if text is None:
                    continue
                a = e.args[i]
                # an elementwise contribution has the result's shape and may be larger than a
                # broadcast operand; other rules give contributions that fit the operand
                ne = self.nd_of(st.var) if rule.broadcast else -1
                if not self.is_arr(a) and self.is_arr(st.var):
                    ne = self.nd_of(st.var)     # a scalar operand of an array result: sum
                self.accumulate(a, text, ne, local, ind, code, st.loc, self.cplx(st))
            self.consume(st.var, loop, ind, code)
        self.restore_alloc(st, info, local, ind, code)

    def adjoint_inplace_shared(self, st: Stmt, info: dict, old: str, local: Dict[str, str], ind: int,
                               code: Code) -> None:
        """Reverse of ``a op= b`` where ``b`` may share ``a``'s memory, and so its shadow
        ``g`` (``d *= d``, ``b += b[::-1]``, ``P -= P[0]``). ``a`` is rewound first, so that
        ``b`` reads as the primal read it (before the write); ``g``, the cotangent of the
        result, is copied before anything accumulates into ``b``'s shadow; then ``g``
        becomes the cotangent that ``a``'s old value gets through the operation, and ``b``'s
        contribution is added into its shadow, which may overlap it."""
        a, b = st.expr.args
        op = st.expr.fn.op
        if not info.get("skip_old"):
            code.add(ind, f"{self.arr_value(a, local)}[...] = {old}", st.loc)
        if a.id not in self.p.active:
            return
        g = self.shadow(a, local)
        g0 = f"_g{self.new_tmp()}"
        code.add(ind, f"{g0} = {g}.copy()", st.loc)
        na = self.nd_of(a)
        cx = self.cplx(st)
        if op in (operator.mul, operator.truediv):
            av, bv = self.arr_value(a, local), self.arr_value(b, local)     # the old values
            if cx:      # the pullback of a product conjugates the other factor
                av, bv = f"np.conj({av})", f"np.conj({bv})"
            if op is operator.mul:
                code.add(ind, f"{g}[...] = {g0} * {bv}", st.loc)
                self.accumulate(b, f"{g0} * {av}", na, local, ind, code, st.loc, cx)
            else:
                code.add(ind, f"{g}[...] = {g0} / {bv}", st.loc)
                self.accumulate(b, f"-{g0} * {av} / ({bv} * {bv})", na, local, ind, code, st.loc, cx)
        elif op is operator.add:
            self.accumulate(b, g0, na, local, ind, code, st.loc, cx)
        else:
            self.accumulate(b, f"-{g0}", na, local, ind, code, st.loc, cx)

    def restore_alloc(self, st: Stmt, info: dict, local: Dict[str, str], ind: int, code: Code) -> None:
        """Reverse of an allocation in a loop: the buffer gets the previous iteration's contents."""
        if "restore" in info:
            r = local.get(info["restore"], info["restore"])
            v = var_name(st.var)
            # (the record has its shape; a loop's array may change shape between iterations)
            code.put(ind, If(f"{r}.shape == {v}.shape"))
            code.add(ind + 1, f"{v}[...] = {r}")
            code.put(ind, Else())
            code.add(ind + 1, f"{v} = {r}.copy()")

    def operand_value(self, a, local: Dict[str, str]) -> str:
        if isinstance(a, Var) and self.is_arr(a):
            return self.arr_value(a, local)
        return self.value_ref(a, local)

    def cot(self, v, local: Dict[str, str]) -> str:
        if self.is_arr(v):
            return self.shadow(v, local)
        return self.dname(v)

    def consume(self, v, loop: bool, ind: int, code: Code) -> None:
        """After the reverse of ``v``'s definition: reset its cotangent for the previous iteration."""
        if v is None or not loop:
            return
        if self.is_arr(v):
            if v.id in self.shadow_roots:
                # the shadow of the previous iteration's array, maybe of another shape
                self.shadow_reset(v, ind, code)
        else:
            code.add(ind, f"{self.dname(v)} = {ZERO.get(self.kind(v), '0.0')}")
