"""Vector forward mode: ``zyg.jvp(..., batched=True)`` with ``k`` tangents in one pass.

The emitter is :class:`zyg.pullbacks.forward.Forward` with every tangent given a leading
*lane* axis of length ``_K`` (a parameter of the generated function), as ``jax.vmap``
over the tangents with ``in_axes=0``.  The primal runs once.

* **Numbers.**  A float's tangent is a lane buffer ``t_v`` of shape ``(_K,)``, allocated
  once at the entry (:meth:`BatchedForward.prologue`) and written lane by lane with the
  scalar path's own expression (``t_v[_l] = t_a[_l] * cos(a)``).  The lane assignments
  of consecutive statements on numbers, and of the edges after them, are collected and
  emitted as one ``for _l in range(_K)`` loop (:meth:`defer` / :meth:`flush`): each lane
  runs the scalar jvp's straight-line code, loops allocate nothing, and every assignment
  copies (value semantics).  The pending lanes are flushed before anything that reads a
  tangent or an array a later statement could change: a statement with an array operand,
  the zero-cotangent test, a branch's condition, an edge's primal part, a return.
* **Arrays.**  The tangent of an array of shape ``S`` is ``(_K,) + S``.  Subscripts with
  integers and slices take every lane (``t_a[:, i:j]``, a view as the primal's), writes
  ``a[i] = v`` write ``t_a[:, i] = t_v``, in-place operators update every lane (a float
  operand's tangent reshaped to ``(_K, 1, ..)``).  Elementwise rules whose push-forward
  is linear-safe in the operand's tangent (:func:`_linear_safe`: reached through ``+ - *
  /`` and ``_zyg_mulnz`` only) are one broadcasting expression for all lanes.
* **Per lane.**  Every other rule is a loop over the lanes in the generated code that
  evaluates the scalar path's rule on ``t_x[_l]`` into ``t_y[_l]`` of a new ``(_K,) + S``
  array: reductions, ``np.dot`` / ``@``, linalg, ``np.where``, ``np.array([...])``,
  fancy indexing, writes that broadcast, the tape helpers of generated gradients
  (``push_array`` writes in place while the primal's tape keeps its size).
* **Not batched** (:class:`NotBatched`; ``zyg.jvp`` then runs the scalar jvp once per
  lane): a view other than such a subscript (a reshape view, ``.T``, computed per lane
  would not alias), an in-place update broadcasting a smaller active array, tuple-valued
  operations other than building a tuple, ``zyg.grad`` or checkpointed loops inside,
  communication (MPI).

A lane's numbers are the scalar path's expressions, so each lane equals the single jvp
with that lane's tangents (tests/test_jvp_batched.py).
"""
from __future__ import annotations

import ast
from typing import List

import numpy as np

from ..rules import registry
from ..ssa.analysis import array_dtype, array_ndim, is_array, is_tuple
from ..ssa.emit import For, Code, var_name
from ..ssa.emit import Else as _Else, If as _If
from ..ssa.ir import Stmt, Var
from ..ssa.prims import ArrayOf, Attr, GetItem, InPlace, MakeTuple, SetItem, Stacked, index_src
from . import guards
from .arrays import zero_of as zero_of_kind
from .forward import Forward, _helper_linear
from .reshapes import is_reshape

_LANE = "_l"
_HOLE = "_zyg_T_"       # a placeholder for an operand's tangent while checking a rule
# binary and unary operators through which a linear tangent stays linear elementwise
_SAFE_BIN = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_SAFE_UN = (ast.USub, ast.UAdd)
# a call of these on an array tangent of the result's shape is the same call on all lanes
_SAME_CALL = {np.copy, np.ascontiguousarray, np.asarray}


class NotBatched(Exception):
    """The function has a construct the batched emitter does not handle."""


def _linear_safe(text: str, holes: List[str]) -> bool:
    """Every occurrence of a hole in ``text`` reaches the top of the expression through
    ``+ - * /`` and unary signs only (so numpy broadcasting applies it to each lane), and
    never as a divisor."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    parent = {}
    for node in ast.walk(tree):
        for ch in ast.iter_child_nodes(node):
            parent[id(ch)] = node
    found = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in holes:
            found = True
            cur = node
            while id(cur) in parent:
                par = parent[id(cur)]
                if isinstance(par, ast.Expression):
                    break
                if isinstance(par, ast.BinOp) and isinstance(par.op, _SAFE_BIN):
                    if isinstance(par.op, ast.Div) and par.right is cur:
                        return False
                elif isinstance(par, ast.UnaryOp) and isinstance(par.op, _SAFE_UN):
                    pass
                elif isinstance(par, ast.Call) and isinstance(par.func, ast.Name) and \
                        par.func.id == "_zyg_mulnz" and len(par.args) == 2 and \
                        par.args[0] is cur and not par.keywords:
                    pass        # the elementwise dy * partial (a ufunc: it broadcasts)
                else:
                    return False
                cur = par
        elif isinstance(node, ast.Name) and node.id.startswith(_HOLE):
            return False
    return found


class BatchedForward(Forward):
    batched = True

    def __init__(self, p):
        super().__init__(p)
        self.lane = None        # "_l" while a statement's tangent is emitted per lane
        self.array_math = 0     # statements computing an array tangent by a rule

    # -- tangents of operands -----------------------------------------------------------
    def extra_params(self) -> List[str]:
        return ["_K"]

    def nd(self, a) -> int:
        k = self.kind(a)
        return array_ndim(k) if is_array(k) else 0

    def t(self, a):
        if not self.active(a):
            return None
        name = "t_" + var_name(a)
        return f"{name}[{_LANE}]" if self.lane else name

    def tz(self, a) -> str:
        if self.lane:
            return super().tz(a)
        t = self.t(a)
        if t is not None:
            return t
        k = self.kind(a)
        if is_array(k):
            s = self.src(a)
            return f"np.zeros((_K,) + {s}.shape, {s}.dtype)"
        return "np.zeros(_K)"

    def tzero(self, kind: str) -> str:
        if self.lane:
            return super().tzero(kind)
        if is_array(kind):
            nd = array_ndim(kind) + 1
            return f"np.zeros(({'0, ' * nd}), np.{array_dtype(kind)})"
        if is_tuple(kind):
            raise NotBatched("a tuple-valued placeholder")
        return "np.zeros(_K)"

    def scalar(self, v) -> bool:
        """A value whose tangent is a lane buffer ``(_K,)`` of its own."""
        k = self.kind(v)
        return not is_array(k) and not is_tuple(k)

    def placeholder(self, kind: str):
        if not is_array(kind) and not is_tuple(kind):
            return None         # a lane buffer from the prologue
        return self.tzero(kind)

    def prologue(self, code: Code) -> None:
        """One lane buffer per active number defined in the function (statement results
        and block parameters), allocated once: a number's tangent is written lane by lane
        into its own buffer (``t_y[_l] = ...``), so that loops allocate nothing, and every
        assignment copies (value semantics, as the scalar path's floats)."""
        params = {q.id for q in self.fn.params}
        seen = set()
        for blk in self.fn.iter_blocks():
            vs = list(blk.params) + [st.var for st in blk.stmts if st.var is not None]
            for v in vs:
                if v.id in params or v.id in seen or not self.active(v) or not self.scalar(v):
                    continue
                seen.add(v.id)
                dt = ", np.complex128" if self.kind(v) == "complex" else ""
                code.add(1, f"t_{var_name(v)} = np.zeros(_K{dt})")

    def edge(self, target: int, args, ind: int, code: Code, goto: bool = True) -> None:
        from ..ssa.ir import Undef
        params = self.fn.blocks[target].params
        lhs, rhs, llhs, lrhs = [], [], [], []
        self._in_stmt = True        # names only: the pending lanes stay pending
        try:
            self._edge_parts(params, args, lhs, rhs, llhs, lrhs)
        finally:
            self._in_stmt = False
        if llhs:
            # the lanes' parallel assignment joins the pending lane loop
            self.defer(ind, f"{', '.join(llhs)} = {', '.join(lrhs)}", None, code)
        self.flush(code)
        if lhs:
            code.add(ind, f"{', '.join(lhs)} = {', '.join(rhs)}")
        if goto:
            code.add(ind, f"_blk = {target}")

    def _edge_parts(self, params, args, lhs, rhs, llhs, lrhs) -> None:
        from ..ssa.ir import Undef
        for p, a in zip(params, args):
            lhs.append(var_name(p))
            rhs.append(zero_of_kind(self.kind(p)) if isinstance(a, Undef) else self.src(a))
            if not self.active(p):
                continue
            if self.scalar(p):
                llhs.append(f"t_{var_name(p)}[{_LANE}]")
                lrhs.append("0.0" if isinstance(a, Undef) or not self.active(a)
                            else f"t_{var_name(a)}[{_LANE}]")
            else:
                lhs.append("t_" + var_name(p))
                rhs.append(self.tzero(self.kind(p)) if isinstance(a, Undef) else self.tz(a))

    def basic(self, spec, ops) -> bool:
        """A subscript of integers and slices only (then ``t[:, idx]`` is every lane's)."""
        if not all(s in ("i", "s") for s in spec):
            return False
        k = 0
        for s in spec:
            if s == "i":
                if isinstance(ops[k], Var) and self.kind(ops[k]) != "int":
                    return False
                k += 1
            else:
                k += 3
        return True

    def lift(self, tan: str, nd: int) -> str:
        """A float's tangent ``(_K,)`` shaped ``(_K, 1, .., 1)`` to broadcast with ``nd``-d."""
        if nd == 0:
            return tan
        return f"np.ascontiguousarray({tan}).reshape((_K{', 1' * nd}))"

    def alloc(self, st: Stmt) -> str:
        y = var_name(st.var)
        k = self.kind(st.var)
        if is_array(k):
            dt = f"{y}.dtype" if array_dtype(k).startswith("float") else "np.float64"
            return f"np.empty((_K,) + {y}.shape, {dt})"
        return "np.empty(_K)"

    # -- statements -----------------------------------------------------------------------
    # -- fused lane loops --------------------------------------------------------------------
    # The lane assignments of consecutive statements on numbers go into one loop over the
    # lanes (each lane then runs the scalar path's straight-line code, values in registers),
    # flushed before anything that reads or writes what they read: a statement with an
    # array operand, the zero-cotangent test, an edge, a branch's condition, a return.
    _pending = None
    _in_stmt = False

    def defer(self, ind: int, line: str, loc, code: Code) -> None:
        if self._pending and self._pending[0][0] != ind:
            self.flush(code)
        if self._pending is None:
            self._pending = []
        self._pending.append((ind, line, loc))

    def flush(self, code: Code) -> None:
        pend = self._pending
        if not pend:
            return
        self._pending = None
        ind = pend[0][0]
        code.put(ind, For(_LANE, "range(_K)"))
        for _, line, loc in pend:
            code.add(ind + 1, line, loc)

    def src(self, a) -> str:
        if not self._in_stmt and self._pending and self._code is not None:
            self.flush(self._code)      # a condition or an edge operand: code follows
        return super().src(a)

    _code = None

    def emit(self, name: str) -> Code:
        code = super().emit(name)
        assert not self._pending
        return code

    def ret(self, t, ind: int, code: Code, loop: bool) -> None:
        self.flush(code)
        super().ret(t, ind, code, loop)

    def flush_free(self, st: Stmt) -> bool:
        """A statement whose primal line reads no tangent and no array."""
        e = st.expr
        if e.fn is guards.nonzero or isinstance(e.fn, (SetItem, InPlace)):
            return False
        return not any(is_array(self.kind(a)) or is_tuple(self.kind(a))
                       for a in list(e.args) + list(e.kwargs.values()))

    def stmt(self, st: Stmt, ind: int, code: Code) -> None:
        self._code = code
        self._in_stmt = True
        try:
            self._stmt(st, ind, code)
        finally:
            self._in_stmt = False

    def _stmt(self, st: Stmt, ind: int, code: Code) -> None:
        e = st.expr
        fn = e.fn
        args = [self.src(a) for a in e.args]
        scalar_def = st.var is not None and self.active(st.var) and self.scalar(st.var)
        if not (self.flush_free(st) or scalar_def and isinstance(fn, GetItem)
                and is_array(self.kind(e.args[0])) and self.basic(fn.spec, e.args[1:])
                and tuple(fn.spec) != ("e",)):
            self.flush(code)
        if getattr(fn, "_zyg_forward", None) is not None or getattr(fn, "_zyg_linear", None) is not None:
            raise NotBatched("communication")
        if hasattr(fn, "tangent_src"):
            raise NotBatched("a nested transform")
        if self.helper(st, args, ind, code):
            return
        if isinstance(fn, SetItem):
            base = e.args[0]
            if self.t(base) is not None:
                idx = index_src(fn.spec, args[1:-1])
                v = e.args[-1]
                tv = self.t(v)
                if self.basic(fn.spec, e.args[1:-1]):
                    nd_slot = self.nd(base) - sum(1 for s in fn.spec if s == "i")
                    if tv is None:
                        tv = "0.0"
                    elif not is_array(self.kind(v)):
                        tv = self.lift(tv, nd_slot)
                    elif self.nd(v) != nd_slot:
                        tv = None
                    if tv is not None:
                        code.add(ind, f"{self.t(base)}[:, {idx}] = {tv}", st.loc)
                else:
                    tv = None
                if tv is None:
                    # per lane: a lane of the tangent is a view of it
                    code.put(ind, For(_LANE, "range(_K)"))
                    self.lane = _LANE
                    try:
                        code.add(ind + 1, f"{self.t(base)}[{idx}] = {self.t(v) or '0.0'}", st.loc)
                    finally:
                        self.lane = None
            code.add(ind, f"{args[0]}[{index_src(fn.spec, args[1:-1])}] = {args[-1]}", st.loc)
            return
        if isinstance(fn, InPlace) and is_array(self.kind(e.args[0])):
            if self.active(e.args[1]) and is_array(self.kind(e.args[1])) and \
                    self.nd(e.args[1]) < self.nd(e.args[0]):
                raise NotBatched("an in-place update broadcasting a smaller array")
            if self.active(e.args[1]) and not is_array(self.kind(e.args[1])):
                # a float's tangent broadcast over the array's elements, per lane
                self._lifted_b = self.nd(e.args[0])
            try:
                self.inplace(st, args, ind, code)
            finally:
                self._lifted_b = None
            return
        lhs = var_name(st.var) + " = " if st.var is not None else ""
        if is_reshape(fn) and self.is_view(st.var):
            raise NotBatched("a reshape taken as a view")
        code.add(ind, lhs + self.call_src(st, args), st.loc)
        if st.var is None or not self.active(st.var):
            return
        y = "t_" + var_name(st.var)
        if self.scalar(st.var):
            self.scalar_tangent(st, args, ind, code)
            return
        self.flush(code)        # an array's tangent reads the numbers' lanes computed so far
        if is_tuple(self.kind(st.var)) and not isinstance(fn, MakeTuple):
            raise NotBatched("a tuple-valued operation")
        tan = self.vector_tangent(st, args)
        if not isinstance(fn, (GetItem, Attr, MakeTuple)) and \
                fn not in _SAME_CALL and \
                any(self.active(a) and is_array(self.kind(a)) for a in e.args):
            self.array_math += 1
        if tan is not None:
            if self.p.backend.strong_scalars and self._narrowed(st):
                tan = f"({tan}).astype(np.{array_dtype(self.kind(st.var))})"
            code.add(ind, f"{y} = {tan}", st.loc)
            return
        if self.is_view(st.var):
            raise NotBatched("a view whose tangent is computed per lane")
        if any(self.active(a) and is_tuple(self.kind(a)) for a in e.args):
            raise NotBatched("a tuple operand")
        # the scalar path's rule, one lane at a time
        code.add(ind, f"{y} = {self.alloc(st)}", st.loc)
        code.put(ind, For(_LANE, "range(_K)"))
        self.lane = _LANE
        try:
            tan = self.tangent(st, args)
        finally:
            self.lane = None
        code.add(ind + 1, f"{y}[{_LANE}] = {tan}", st.loc)

    _lifted_b = None

    def scalar_tangent(self, st: Stmt, args: List[str], ind: int, code: Code) -> None:
        """``t_y[_l] = <the scalar path's tangent of lane _l>`` for every lane."""
        e = st.expr
        fn = e.fn
        y = "t_" + var_name(st.var)
        a0 = e.args[0] if e.args else None
        if isinstance(fn, GetItem) and self.active(a0) and is_tuple(self.kind(a0)):
            tan = f"t_{var_name(a0)}[{index_src(fn.spec, args[1:])}][{_LANE}]"
        elif isinstance(fn, GetItem) and self.active(a0) and is_array(self.kind(a0)) and \
                self.basic(fn.spec, e.args[1:]) and tuple(fn.spec) != ("e",):
            tan = f"t_{var_name(a0)}[{_LANE}, {index_src(fn.spec, args[1:])}]"
        else:
            for a in e.args:
                if self.active(a) and is_tuple(self.kind(a)):
                    raise NotBatched("a tuple operand")
            self.lane = _LANE
            try:
                tan = self.tangent(st, args)
            finally:
                self.lane = None
        self.defer(ind, f"{y}[{_LANE}] = {tan}", st.loc, code)

    def call_src(self, st: Stmt, args: List[str]) -> str:
        e = st.expr
        if e.fn is guards.nonzero and not e.kwargs:
            # the zero-cotangent test: skipped only where the value and every lane of its
            # tangent are zero
            tans = [f"np.any({self.t(a)} != 0)" for a in e.args if self.active(a)]
            return f"{self.ns.ref(guards.nonzero)}({', '.join(list(args) + tans)})"
        from ..ssa.prims import Recursive
        if isinstance(e.fn, Recursive):
            # no vector form: the scalar jvp per lane runs instead, through the callee's
            # compiled forward pair (recpairs.jvp_pair_for)
            raise NotBatched("a recursive call")
        return super().call_src(st, args)

    def helper(self, st: Stmt, args: List[str], ind: int, code: Code) -> bool:
        """Tape helpers of a generated gradient (forward over reverse: Hessians): the tape's
        tangent has the lanes first, so the helpers that grow or reuse a buffer run per
        lane, in place where the primal's buffer stays the same."""
        from . import arraytape, tape
        e = st.expr
        fn = getattr(e.fn, "py_func", e.fn)
        lin = _helper_linear().get(fn)
        if lin is None:
            return False
        if fn not in (arraytape.push_array, arraytape.shadow_like, tape.grow):
            return False        # reduce_like, acc_scalar_target: new values, per lane
        if st.var is None:
            raise NotBatched("a helper without a result")
        y = var_name(st.var)
        code.add(ind, f"{y} = {self.call_src(st, args)}", st.loc)
        if not self.active(st.var):
            return True
        old = self.tz(e.args[0])
        ty = "t_" + y
        if fn is arraytape.shadow_like:
            # the previous buffer while the shape stays, else a new zero one
            code.put(ind, _If(f"{args[0]}.shape == {args[1]}.shape"))
            code.add(ind + 1, f"{ty} = {old}")
            code.put(ind, _Else())
            code.add(ind + 1, f"{ty} = {self.tzero_like(st)}")
            return True
        if fn is arraytape.push_array:
            # pushes in place while the stack has room (the primal's stack the same size)
            code.put(ind, _If(f"{y}.shape[0] == {old}.shape[1]"))
            code.put(ind + 1, For(_LANE, "range(_K)"))
            self.lane = _LANE
            try:
                lane_call = self.tangent(st, args)
            finally:
                self.lane = None
            code.add(ind + 2, lane_call)
            code.add(ind + 1, f"{ty} = {old}")
            code.put(ind, _Else())
            code.add(ind + 1, f"{ty} = {self.alloc(st)}")
            code.put(ind + 1, For(_LANE, "range(_K)"))
            code.add(ind + 2, f"{ty}[{_LANE}] = {lane_call}")
            return True
        # grow: a new, larger buffer
        code.add(ind, f"{ty} = {self.alloc(st)}", st.loc)
        code.put(ind, For(_LANE, "range(_K)"))
        self.lane = _LANE
        try:
            code.add(ind + 1, f"{ty}[{_LANE}] = {self.tangent(st, args)}", st.loc)
        finally:
            self.lane = None
        return True

    def inplace(self, st, args, ind, code):
        if self._lifted_b:
            b = st.expr.args[1]
            orig_t = self.t

            def t(a, _orig=orig_t):
                s = _orig(a)
                return self.lift(s, self._lifted_b) if (s is not None and a is b) else s
            self.t = t
            try:
                return super().inplace(st, args, ind, code)
            finally:
                del self.t
        return super().inplace(st, args, ind, code)

    def vector_tangent(self, st: Stmt, args: List[str]):
        """The tangent of all lanes as one expression, or None (then per lane)."""
        e = st.expr
        fn = e.fn.op if isinstance(e.fn, InPlace) else e.fn
        ops = e.args
        from ..rules.higher import Checkpointed, Hooked
        from ..ssa.prims import Recursive
        if isinstance(fn, Hooked):
            return self.tz(ops[0])
        if isinstance(fn, (Checkpointed, Recursive)):
            raise NotBatched("a checkpointed or recursive call")
        if isinstance(fn, GetItem):
            if is_tuple(self.kind(ops[0])):
                # an array of a tuple: the element itself (it aliases as the primal's)
                return f"{self.tz(ops[0])}[{index_src(fn.spec, args[1:])}]"
            if not is_array(self.kind(ops[0])):
                return None
            if tuple(fn.spec) == ("e",):
                return self.tz(ops[0])
            if not self.basic(fn.spec, ops[1:]):
                return None     # fancy indexing, newaxis, ellipsis: per lane (a copy)
            src = f"{self.tz(ops[0])}[:, {index_src(fn.spec, args[1:])}]"
            return src if is_array(self.kind(st.var)) else f"{src}.copy()"
        if isinstance(fn, Attr):
            return None
        if isinstance(fn, MakeTuple):
            # a number's lane buffer is copied (it is written again in a loop)
            return "(" + "".join(self.tz(a) + (".copy()" if self.active(a) and self.scalar(a)
                                                else "") + ", " for a in ops) + ")"
        if isinstance(fn, (ArrayOf, Stacked)):
            return None
        if registry.is_nondifferentiable(fn):
            return self.tzero_like(st)
        kinds = [self.kind(a) for a in ops]
        act = [i for i, a in enumerate(ops) if self.active(a)]
        if any(is_array(k) for k in kinds):
            return self.vector_array(st, args, act, kinds, fn)
        return None

    def tzero_like(self, st: Stmt) -> str:
        y = var_name(st.var)
        if is_array(self.kind(st.var)):
            return f"np.zeros((_K,) + {y}.shape, {y}.dtype)"
        return "np.zeros(_K)"

    def vector_array(self, st, args, act, kinds, fn):
        """Elementwise rules (ufuncs, operators, the listed elementwise functions) whose
        push-forward is linear-safe in the operand's tangent; a float operand lifted."""
        from ..rules import arrays as arules, dispatch
        from ..ssa.ir import Const, Undef
        from .forward import _BILINEAR, _ELEMENTWISE, _LINEAR, _LINEAR_ALL
        e = st.expr
        ops = e.args
        if not is_array(self.kind(st.var)):
            return None
        if fn in _SAME_CALL:
            if len(ops) == 1 and not e.kwargs and is_array(kinds[0]):
                return f"{self.ns.ref(fn)}({self.tz(ops[0])})"
            return None
        if fn in _BILINEAR or fn in _LINEAR or fn in _LINEAR_ALL:
            return None
        r = dispatch.rule_for(fn)
        if r is None or r.fwd is not None:
            return None
        # as Forward.array_tangent: elementwise only for these (a scalar rule says nothing
        # about what a function does to an array)
        elementwise = r.broadcast or fn in _ELEMENTWISE or isinstance(fn, np.ufunc)
        if not elementwise or e.kwargs:
            return None
        ny = self.nd(st.var)
        consts = [a.value if isinstance(a, Const) and not isinstance(a, Undef) else arules._NOCONST
                  for a in ops]
        y = var_name(st.var)
        terms = []
        for i in act:
            nd = self.nd(ops[i])
            if nd not in (0, ny):
                return None
            hole = _HOLE + str(i)
            c = arules.Ctx(list(args), y, hole, kinds, consts, [], {}, {}, {})
            try:
                src = r.back(c, i)
            except arules._RuleError:
                return None
            if src is None:
                continue
            if not _linear_safe(src, [hole]):
                return None
            tan = self.t(ops[i]) if nd == ny else self.lift(self.t(ops[i]), ny)
            terms.append(f"({src.replace(hole, tan)})")
        if not terms:
            return self.tzero_like(st)
        out = " + ".join(terms)
        if any(self.nd(ops[i]) != ny for i in act) or self.may_miss_shape(out, ops, args, kinds, y):
            # a float's term broadcasts to (_K, 1, ..) only, and an operand the terms do not
            # mention may set the result's shape (size-1 axes broadcast): to the result's shape
            out = f"({out}) + np.zeros((_K,) + {y}.shape, {y}.dtype)"
        return out
