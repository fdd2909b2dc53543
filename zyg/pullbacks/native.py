"""Recursive calls compiled: a recursive function's primal and adjoint that call themselves.

A recursive call cannot be inlined.  ``recursion.py`` runs it through ``zyg.pullback`` at
run time (the cpu target leaves compiled code through object mode at every call, 13-20 us
each).  Here, on targets whose tape grows (python, cpu), a call ``y = f(*args)`` becomes a
call of a generated pair compiled for ``f`` and the kinds of ``args``:

* ``f_rp(*args, <stacks>) -> (y, <stacks>)``: ``f``'s recording primal, which goes on
  pushing onto the caller's stacks (buffer and top of each of the four: floats, ints,
  complex, edge tags) where the caller's records stopped, and pushes last what its own
  adjoint needs besides the arguments (the scalars a once-run block kept in scope, edge
  tags, trip counts, arrays it made);
* ``f_ra(*args, *shadows, dy, <stacks>) -> (*scalar cotangents, <tops>)``: pops those,
  then runs ``f``'s adjoint backwards from the top it is given; the cotangents of the
  float array arguments are added into the ``shadows`` the caller passes (Enzyme's
  convention: on entry a shadow holds the cotangent of the array's contents after the
  call, on exit that of its contents before).

Both call themselves for ``f``'s own recursive calls of the same kinds, so one tape serves
every depth: the adjoint pops last-in first-out, which is exactly the reverse of the
order in which the calls pushed.  The caller's adjoint always calls ``f_ra`` where its
primal called ``f_rp`` (a call that neither is differentiated nor writes into an argument
array drops its records instead, ``NestedTape.keep_tops``).  A block checks its stacks'
room once, before the statements that push (a loop nest once for all its iterations): after
the call the caller checks again for the rest (a nest moves its reserved end up by the
callee's records).

Calls this cannot compile keep the run-time path: a target with a fixed-size tape (cuda),
kinds that differ from the call being built (mutual recursion through other kinds),
tuples, arrays read from globals or closures, a result that is not a number.
``ZYG_NATIVE_RECURSION=0`` turns it off (benchmarks compare both).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from ..ssa.analysis import differentiable, is_array, is_tuple
from ..ssa.emit import Capacity, Code, Grow, NestedTape, RoomCheck, ZERO, var_name

STACKS = ("c", "f", "i", "t")        # every pair passes all four (sorted, as stack_used)
_SCALARS = ("float", "int", "bool", "complex")


@dataclass
class Pair:
    """A compiled recursive pair: ``rp``, ``ra`` (names in the calling module), the
    positions of the differentiable scalar and array arguments, whether it writes into an
    argument array."""
    rp: str
    ra: str
    scalar_diff: List[int]
    array_diff: List[int]
    mutates: bool


def enabled() -> bool:
    return os.environ.get("ZYG_NATIVE_RECURSION", "1") != "0"


def _positions(kinds) -> Tuple[List[int], List[int]]:
    diff = [i for i, k in enumerate(kinds) if differentiable(k)]
    return [i for i in diff if not is_array(kinds[i])], [i for i in diff if is_array(kinds[i])]


def possible(kinds, out_kind: str, backend) -> bool:
    return enabled() and not getattr(backend, "bounded_tape", False) and out_kind in _SCALARS and \
        not any(is_tuple(k) or k in ("none", "undef", "object") for k in kinds)


def params_mutated(em) -> bool:
    return any(em.is_arr(q) and em.al.is_mutated(q.id) for q in em.fn.params)


_CASTS = {"int": "np.int64", "bool": "bool", "float": "np.float64", "complex": "np.complex128"}
_ANY_LAYOUT: Dict[str, Any] = {}


def any_layout(backend) -> Any:
    """``f(a)``: array ``a`` typed as a mutable, aligned array of layout 'A' (the same
    data; on targets that do not compile, ``a`` itself)."""
    if not backend.compiled:
        return _same
    got = _ANY_LAYOUT.get("cpu")
    if got is None:
        from numba import types
        from numba.core.imputils import impl_ret_borrowed
        from numba.extending import intrinsic

        @intrinsic
        def as_any(typingctx, a):
            if not isinstance(a, types.Array):
                return None
            out = types.Array(a.dtype, a.ndim, "A")

            def codegen(context, builder, sig, args):
                # the same structure for every layout and flag: only the type changes
                return impl_ret_borrowed(context, builder, out, args[0])
            return out(a), codegen

        def any_layout_(a):
            return as_any(a)
        got = _ANY_LAYOUT["cpu"] = backend.jit(any_layout_)
    return got


def _same(a):
    return a


def cast_arg(ns, backend, kind: str, text: str) -> str:
    """``text``, an operand of kind ``kind`` of a call of a compiled pair, cast to the one
    type that kind has (see ``NativeMixin.native_arg``)."""
    if is_array(kind):
        return f"{ns.ref(any_layout(backend), '_zyg_any_layout')}({text})"
    cast = _CASTS.get(kind)
    return f"{cast}({text})" if cast else text


# the module that builds pairs (recpairs.py) plans and emits with the emitter that this
# mixin is part of: it sits above and provides itself here (as rules/higher.py's providers)
_BUILDER: list = []


def provide_builder(impl: Any) -> None:
    _BUILDER[:] = [impl]


def builder() -> Any:
    if not _BUILDER:
        raise RuntimeError("zyg.nested.recpairs is not imported (import zyg first)")
    return _BUILDER[0]


class NativeMixin:
    """The reverse emitter's side: which recursive calls go to a compiled pair, and their
    primal and adjoint statements (kinds ``native`` and ``native_plain`` of
    ``ArrayMixin.astmts``)."""

    def native_call(self, st) -> Optional[Pair]:
        from ..ssa.prims import Recursive
        cache = self.__dict__.setdefault("_native_calls", {})
        if id(st) in cache:
            return cache[id(st)]
        got = None
        fn = st.expr.fn
        if isinstance(fn, Recursive) and st.var is not None and not st.expr.kwargs:
            kinds = tuple(self.kind(a) for a in st.expr.args)
            out = self.kind(st.var)
            me = getattr(self.p, "native_self", None)
            if me is not None and me[0] is fn.fn and me[1] == kinds:
                if possible(kinds, out, self.p.backend) and out == self.p.ret_kind:
                    sd, ad = _positions(kinds)
                    got = Pair(f"{me[2]}_rp", f"{me[2]}_ra", sd, ad, params_mutated(self))
            else:
                b = builder().pair_for(fn.fn, kinds, out, self.p.backend)
                if b is not None:
                    got = Pair(self.ns.ref(b.rp, b.rp.__name__), self.ns.ref(b.ra, b.ra.__name__),
                               b.scalar_diff, b.array_diff, b.mutates)
        cache[id(st)] = got
        return got

    def native_segments(self, blk) -> List[Set[str]]:
        """The records of ``blk``'s statements grouped by the compiled recursive calls
        between them (kind ``native``): group ``k`` was pushed after call ``k`` (none before
        the first) and before call ``k + 1``.  Empty when ``blk`` has no such call."""
        calls = 0
        seg_of: Dict[int, int] = {}
        for st in blk.stmts:
            seg_of[id(st)] = calls
            if self.astmts.get(id(st), {}).get("kind") == "native":
                calls += 1
        if not calls:
            return []
        segs: List[Set[str]] = [set() for _ in range(calls + 1)]
        for name, _, sid in self.stmt_pushes.get(blk.id, []):
            segs[seg_of.get(sid, 0)].add(name)
        return segs

    def prepare_native(self, blk, st, info: dict, pair: Pair) -> None:
        e = st.expr
        active = st.var.id in self.p.active or any(self.is_active(a) for a in e.args)
        info["pair"] = pair
        self.stack_used |= set(STACKS)
        if not active and not pair.mutates:
            info["kind"] = "native_plain"
            return
        info["kind"] = "native"
        for i in pair.array_diff:
            if self.is_active(e.args[i]):
                self.need_shadow(blk, e.args[i])
        self.finish_needed(blk, st, list(e.args))

    def primal_native(self, blk, st, info: dict, ind: int, code: Code) -> None:
        """``y = f_rp(*args, <stacks>)``, then room again for what the caller pushes after
        the call: its checks reserved room before the callee's records took some."""
        e = st.expr
        out = f"_r{self.new_tmp()}"
        keep = info["kind"] == "native_plain"
        ends = set(getattr(self, "_s_end", None) or ()) if not keep else set()
        before = {s: f"_q{s}{out}" for s in sorted(ends)}
        for s in sorted(ends):
            code.add(ind, f"{before[s]} = _{s}sp")
        code.put(ind, NestedTape(out, info["pair"].rp, tuple([self.native_arg(a) for a in e.args] + [self.native_limit()]), STACKS, 1,
                                 False, keep_tops=keep), st.loc)
        code.add(ind, f"{var_name(st.var)} = {out}[0]", st.loc)
        if keep:
            return
        demand = self.total_demand(blk)
        for s in STACKS:
            if s in ends:
                # a nest reserved room up to _<s>end: it moves up by the callee's records
                code.add(ind, f"_{s}end += _{s}sp - {before[s]}")
                need = f"_{s}end"
            elif demand.get(s):
                need = f"_{s}sp + {demand[s]}"     # the rest of the block (checked at its start)
            else:
                continue
            code.put(ind, RoomCheck(s, need))
            code.put(ind + 1, Grow(s, need))
            code.put(ind + 1, Capacity(s))

    def native_limit(self) -> str:
        """The stack limit a pair's call passes on: its own inside a pair, 0 outside."""
        return "_lim" if getattr(self.p, "native_self", None) is not None else "np.uint64(0)"

    def native_arg(self, a, text: Optional[str] = None, kind: Optional[str] = None) -> str:
        """An operand of a pair's call, cast to the one type its kind has: a pair compiled
        for two signatures calls one from the other, and numba's disk cache reloaded such a
        pair into a crash (an int64 from the tape where a bool was, an array of another
        layout or flags than the first call's).  Arrays are passed as layout 'A'."""
        return cast_arg(self.ns, self.p.backend, self.kind(a) if kind is None else kind,
                        self.src(a) if text is None else text)

    def adjoint_native(self, st, info: dict, local: Dict[str, str], ind: int, code: Code,
                       loop: bool) -> None:
        e = st.expr
        pair = info["pair"]
        x = [self.native_arg(a, self.operand_value(a, local)) for a in e.args]
        shadows = [self.native_arg(e.args[i], self.shadow(e.args[i], local) if self.is_active(e.args[i])
                                   else f"np.zeros_like({x[i]})") for i in pair.array_diff]
        dy = self.native_arg(st.var, self.dname(st.var) if self.is_active(st.var)
                             else ZERO.get(self.kind(st.var), "0.0"))
        out = f"_g{self.new_tmp()}"
        code.put(ind, NestedTape(out, pair.ra, tuple(x + shadows + [dy, self.native_limit()]), STACKS,
                                 len(pair.scalar_diff), True),
                 st.loc)
        for j, i in enumerate(pair.scalar_diff):
            self.accumulate(e.args[i], f"{out}[{j}]", 0, local, ind, code, st.loc, self.cplx(st))
        self.consume(st.var, loop, ind, code)

    # -- loops (checkpointed_range, prange) as compiled pairs (looppairs.py) ---------------
    def native_loop(self, blk, st) -> Optional[Pair]:
        """A loop ``z = Loop(T, t0, s, *carried, *read)``, its read-outs ``v = Part(k)(z,
        ...)`` and the write-backs ``carried[:] = v`` that follow it in ``blk`` (the
        lowering's shape), as one call of the loop's compiled pair (``looppairs.py``): a
        carried array written back is updated in place by the pair, which pushes its
        contents onto the caller's stacks (its adjoint restores them and adds into the
        caller's shadows); the other carried values come back packed and are read out of
        ``z``.  The read-outs and write-backs are absorbed (``astmts`` kinds ``absorbed``
        and ``ppart``).  None where the loop keeps the run-time path (a bounded tape, kinds
        the pair does not take, another shape)."""
        from ..ssa.ir import Const, Var
        from ..ssa.prims import SetItem
        e, z, loopfn = st.expr, st.var, st.expr.fn
        runner = loopfn.fn
        if not loops_enabled() or getattr(self.p.backend, "bounded_tape", False) or z is None \
                or e.kwargs or len(e.args) != 3 + len(runner.names):
            return None
        n = runner.n
        carried = e.args[3:3 + n]
        uses = self._loop_uses()
        mine = {id(s2) for s2 in blk.stmts}
        parts: Dict[int, Any] = {}
        writes: Dict[int, Any] = {}
        for ps in uses.get(z.id, []):
            k = loopfn.part_of(ps.expr.fn) if ps is not None else None
            if k is None or k in parts or id(ps) not in mine or ps.expr.args[0] is not z or ps.var is None:
                return None
            parts[k] = ps
            back = uses.get(ps.var.id, [])
            w = back[0].expr if len(back) == 1 and back[0] is not None else None
            if w is not None and id(back[0]) in mine and isinstance(w.fn, SetItem) and \
                    w.fn.spec == ("s",) and len(w.args) == 5 and isinstance(w.args[0], Var) and \
                    isinstance(carried[k], Var) and w.args[0].id == carried[k].id and \
                    w.args[4] is ps.var and all(isinstance(a, Const) and a.value is None
                                                 for a in w.args[1:4]):
                writes[k] = back[0]
        if sorted(parts) != list(range(n)):
            return None
        inplace = tuple(k in writes for k in range(n))
        kinds = [self.kind(a) for a in e.args]
        built = loopfn.compiled_pair(kinds[3:], self.p.backend, inplace)
        if built is None:
            return None
        absorbed: Dict[int, dict] = {}
        offset: List[str] = []          # the packed values before the next one
        for k in built.values:
            ps = parts[k]
            c = carried[k]
            info = {"kind": "ppart", "z": z, "at": " + ".join(offset) or "0",
                    "out": self.kind(ps.var), "like": c}
            absorbed[id(ps)] = info
            offset.append(f"{self.src(c)}.size" if self.is_arr(c) else "1")
        for k in writes:
            absorbed[id(parts[k])] = {"kind": "absorbed"}
            absorbed[id(writes[k])] = {"kind": "absorbed"}
            self.shadow_roots.pop(parts[k].var.id, None)    # values never made
        self.shadow_roots.pop(z.id, None)
        self.__dict__.setdefault("_absorbed", {}).update(absorbed)
        self.__dict__.setdefault("_ploops", {})[id(st)] = [(k, parts[k].var) for k in built.values]
        return Pair(self.ns.ref(built.rp, built.rp.__name__), self.ns.ref(built.ra, built.ra.__name__),
                    built.scalar_diff, built.array_diff, bool(writes))

    def _loop_uses(self) -> Dict[int, list]:
        """var id -> the statements using it (None for a terminator), over the function,
        computed once per emitter."""
        from ..ssa.ir import Var
        got = self.__dict__.get("_loop_uses_map")
        if got is not None:
            return got
        got = self._loop_uses_map = {}
        for b in self.fn.iter_blocks():
            for s2 in b.stmts:
                for a in list(s2.expr.args) + list(s2.expr.kwargs.values()):
                    if isinstance(a, Var):
                        got.setdefault(a.id, []).append(s2)
            for _, args in b.term.successors():
                for a in args:
                    if isinstance(a, Var):
                        got.setdefault(a.id, []).append(None)
            for a in (getattr(b.term, "value", None), getattr(b.term, "cond", None)):
                if isinstance(a, Var):
                    got.setdefault(a.id, []).append(None)
        return got

    def primal_absorbed(self, blk, st, info: dict, ind: int, code: Code) -> None:
        """A loop's read-out of a value from the pair's packed result (a write-back absorbed
        into the pair emits nothing); an array gets its shadow as any new array does."""
        if info["kind"] != "ppart":
            return
        z, at, out, like = var_name(info["z"]), info["at"], info["out"], info["like"]
        if is_array(out):
            from ..ssa.analysis import array_dtype
            lk = self.src(like)
            text = f"{z}[{at}:{at} + {lk}.size].astype(np.{array_dtype(out)}).reshape({lk}.shape)"
        elif out == "int":
            text = f"int(round({z}[{at}]))"
        else:
            text = f"{z}[{at}]"
        code.add(ind, f"{var_name(st.var)} = {text}", st.loc)
        if st.var.id in self.shadow_roots:
            self.alloc_shadow(st.var, ind, code, self.in_loop(blk.id), st.loc)

    def adjoint_ploop(self, st, info: dict, local: Dict[str, str], ind: int, code: Code,
                      loop: bool) -> None:
        """``ra(*operands, *shadows, *dvalues, <stacks>)``: restores the in-place arrays,
        adds into the shadows of the float arrays, returns the cotangents of the float
        numbers; the values' cotangents are given one by one."""
        e = st.expr
        pair = info["pair"]
        x = [self.native_arg(a, self.operand_value(a, local)) for a in e.args]
        shadows = [self.native_arg(e.args[i], self.shadow(e.args[i], local) if self.is_active(e.args[i])
                                   else f"np.zeros_like({x[i]})") for i in pair.array_diff]
        values = self._ploops[id(st)]
        dv = []
        for k, v in values:
            if self.is_arr(v):
                dv.append(self.native_arg(v, self.shadow(v, local)) if self.is_active(v)
                          else f"np.zeros_like({x[3 + k]})")
            else:
                dv.append(f"np.float64({self.dname(v)})" if self.is_active(v) else "np.float64(0.0)")
        out = f"_g{self.new_tmp()}"
        code.put(ind, NestedTape(out, pair.ra, tuple(x + shadows + dv + [self.native_limit()]), STACKS,
                                 len(pair.scalar_diff), True), st.loc)
        for j, i in enumerate(pair.scalar_diff):
            self.accumulate(e.args[i], f"{out}[{j}]", 0, local, ind, code, st.loc)
        for _, v in values:
            if self.is_active(v):
                self.consume(v, loop, ind, code)


def loops_enabled() -> bool:
    """prange and checkpointed_range loops as compiled pairs (``ZYG_NATIVE_LOOPS=0``: the
    run-time path)."""
    return os.environ.get("ZYG_NATIVE_LOOPS", "1") != "0"
