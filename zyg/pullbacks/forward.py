"""Forward mode (``zyg.jvp``) by source transformation.

The same front end, SSA, kinds, tuple flattening and activity as reverse mode
(:func:`zyg.pullbacks.transform.plan`); the emitted function runs the primal CFG
once, computing next to every active value its tangent ``t_<name>``:

* scalar rules give the push-forward from the pullback's expressions: a scalar
  pullback ``dx_i += e_i(x, y, dy)`` is linear in ``dy`` and equals
  ``dy * df/dx_i``, so the tangent is ``sum_i e_i(x, y, dx_i)``;
* elementwise array rules the same way (numpy broadcasting does the rest);
  linear numpy functions (``sum``, ``reshape``, ``transpose``, ``cumsum``...)
  are applied to the tangent; bilinear ones (``dot``, ``@``, ``outer``) by the
  product rule; functions with a scalar result by ``sum(gradient * tangent)``;
* arrays carry tangent arrays that alias exactly as the primal arrays do: a view's
  tangent is the same view of the base's tangent, a write ``a[i] = v`` writes
  ``t_a[i] = t_v``, an in-place update updates the tangent in place first.

No tape is needed.  Array arguments are copied on entry, so that ``jvp`` leaves the
caller's arrays unchanged, like a gradient does.
"""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Set

import numpy as np

from ..errors import NoAdjoint, TypeMismatch, UnsupportedSyntax
from ..rules import arrays as arules, dispatch
from ..rules import registry
from ..ssa.analysis import array_dtype, array_ndim, is_array, is_complex, is_tuple
from ..ssa.emit import INFIX, PREFIX, Code, Def, Else, If, Namespace, While, const_src, var_name
from ..ssa.ir import Branch, Const, Jump, Return, Stmt, Undef, Var, callee_name
from ..ssa.prims import ArrayOf, Attr, GetItem, InPlace, MakeTuple, SetItem, Stacked, index_src
from .arrays import inplace_src, zero_of
from ..rules.closure import render, resolve_global
from ..rules.numpy_extra import astype as _astype
from . import guards
from .helpers import helpers as tape_helpers
from .reshapes import Reshapes, is_reshape, shape_src
from .specialize import NARROW_DTYPES
from .transform import DISPATCH_TREE_MIN, dispatch as dispatch_cases

STRUCTURED_LOOPS = True     # loops as real loops where the CFG allows (Forward._find_loops)

# numpy functions linear in their first (array) operand: the tangent is the same call
_LINEAR = {np.sum, np.mean, np.transpose, np.reshape, np.ravel, np.copy, np.cumsum, np.real,
           np.imag, np.conj, np.conjugate, np.squeeze, np.expand_dims, np.flip, np.diag, np.trace,
           np.ascontiguousarray, np.array, np.asarray, np.roll, _astype}
# bilinear in their two operands: the product rule
_BILINEAR = {np.dot, np.matmul, operator.matmul, np.inner, np.outer, np.cross, np.kron}
# linear in all their float operands jointly (the others are shapes and counts)
_LINEAR_ALL = {np.full, np.full_like, np.linspace}
# functions that act on each element (besides numpy's ufuncs): the push-forward of an
# array argument is the pullback's expression with the tangent in place of the cotangent
_ELEMENTWISE = {operator.neg, operator.pos, abs, np.abs, np.absolute, np.conjugate, np.real, np.imag,
                np.angle, np.sinc}
_REDUCTIONS = {np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin}


def _helper_linear() -> Dict[Any, tuple]:
    """Helpers of generated code, linear in the operands listed (forward over reverse)."""
    from . import arraytape, tape
    from ..rules.arrays import acc_scalar_target
    return {tape.grow: (0,), arraytape.push_array: (0, 2), arraytape.shadow_like: (0,),
            arraytape.reduce_like: (0,), acc_scalar_target: (0,)}


class Forward:
    def __init__(self, p):
        self.p = p
        self.fn = p.fn
        self.ns = Namespace(p.backend.wrap)
        self.act: Set[int] = set(p.active)
        # False: the jvp writes into the caller's arrays and tangents in place (one iteration
        # of a parallel loop, zyg/tasks/prange.py: nothing of the loop's size copied per call)
        self.copy_args = True
        # ids of array parameters never copied on entry: the tape buffers that the Hessian
        # drivers keep between calls (zyg/api.py), written before they are read
        self.keep_params: Set[int] = set()
        # a number's tangent term ``t * p`` is exactly zero where the operand's tangent ``t``
        # or the partial ``p`` is zero (guards.times_nz): the dual of the reverse sweep's
        # zero-cotangent tests, so that ``0 * inf`` does not make a tangent nan where the
        # gradient of the same program is finite (device gradients in forward mode,
        # zyg/cuda.py; zyg.jvp's second run when its tangent came out nan)
        self.zero_guards = False

    batched = False     # tangents with a leading lane axis (forward_batched.BatchedForward)

    # -- helpers -------------------------------------------------------------------------
    def kind(self, a) -> str:
        if isinstance(a, Var):
            return self.p.kinds.get(a.id, "float")
        return "float"

    def active(self, a) -> bool:
        return isinstance(a, Var) and a.id in self.act

    def is_view(self, v) -> bool:
        return isinstance(v, Var) and self.p.aliases is not None and v.id in self.p.aliases.view_of

    @property
    def reshapes(self) -> Reshapes:
        got = self.__dict__.get("_reshapes")
        if got is None:
            got = self._reshapes = Reshapes(self.p, self.ns)
        return got

    def src(self, a) -> str:
        return var_name(a) if isinstance(a, Var) else const_src(a, self.ns)

    def t(self, a) -> Optional[str]:
        """The tangent of an operand, or None when it is zero."""
        return "t_" + var_name(a) if self.active(a) else None

    def tz(self, a) -> str:
        """The tangent of an operand, a typed zero when it is inactive."""
        t = self.t(a)
        if t is not None:
            return t
        k = self.kind(a)
        if is_array(k):
            return f"np.zeros_like({self.src(a)})"
        return "0.0"

    def err(self, st: Stmt, msg: str, cls=NoAdjoint, hint=None):
        loc = st.loc
        return cls(msg, loc.filename if loc else None, loc.lineno if loc else None,
                   loc.col if loc else None, hint=hint)

    # -- statements --------------------------------------------------------------------------
    def call_src(self, st: Stmt, args: List[str]) -> str:
        """The source of the statement's call with these rendered operands."""
        e = st.expr
        fn = e.fn
        if isinstance(fn, InPlace):
            fn = fn.op
        from ..rules.higher import Checkpointed, Hooked
        from ..ssa.prims import Recursive
        if isinstance(fn, Hooked):
            return f"{args[0]}.copy()" if is_array(self.kind(e.args[0])) else args[0]
        if hasattr(fn, "tangent_src"):
            # zyg.grad inside (rules/gradcall.py), checkpointed loops (rules/higher.py)
            return fn.primal_src(self, st, args)
        if isinstance(fn, (Checkpointed, Recursive)):
            msg, hint = _no_forward(fn)
            raise self.err(st, msg, hint=hint)
        if fn is guards.nonzero and not e.kwargs:
            # a zero-cotangent test of an adjoint: skip only where the cotangents and their
            # tangents are all zero (guards.py); one call again, for a third derivative
            tans = [self.t(a) for a in e.args if self.active(a)]
            return f"{self.ns.ref(guards.nonzero)}({', '.join(list(args) + tans)})"
        if isinstance(fn, GetItem):
            if tuple(fn.spec) == ("e",):
                return args[0]      # x[...] is all of x (numba cannot read x[...])
            return f"{args[0]}[{index_src(fn.spec, args[1:])}]"
        if isinstance(fn, Attr):
            return f"{args[0]}.{fn.attr}"
        if isinstance(fn, MakeTuple):
            return "(" + "".join(a + ", " for a in args) + ")"
        if isinstance(fn, ArrayOf):
            return f"np.array([{', '.join(args)}])"
        if isinstance(fn, Stacked):
            kw = "".join(f", {k}={self.src(v)}" for k, v in e.kwargs.items())
            return f"np.{fn.fn.__name__}(({''.join(a + ', ' for a in args)}){kw})"
        if is_reshape(fn) and self.is_view(st.var):
            return self.reshapes.value(st, args[0], shape_src(st, args[1:]))
        if fn in INFIX and len(args) == 2 and not e.kwargs:
            return f"({args[0]} {INFIX[fn]} {args[1]})"
        if fn in PREFIX and len(args) == 1 and not e.kwargs:
            return f"({PREFIX[fn]}{args[0]})"
        kinds = [self.kind(a) for a in e.args]
        kw = {k: (self.src(v), None) for k, v in e.kwargs.items()}
        if any(is_array(k) for k in kinds):
            args, kw = dispatch.call_parts(fn, e.args, args, e.kwargs, self.src)
            try:
                special = dispatch.primal_call(fn, list(args), kinds, kw,
                                             self.kind(st.var) if st.var is not None else None)
            except arules._RuleError as ex:
                raise self.err(st, f"{callee_name(fn)}: {ex}", UnsupportedSyntax)
            if special is not None:
                return special
        elif not kw and not registry.is_nondifferentiable(fn):
            # a call on numbers with a rule: its primal is the rule's forward expression, as in
            # reverse mode (numba compiles min(max(x, lo), hi), not np.clip on floats)
            rule = registry.lookup(fn)
            conv = rule.converted if rule is not None else None
            if conv is not None and conv.fwd_expr is not None and len(conv.params) == len(args):
                return "(" + self.rule_src(conv, conv.fwd_expr, dict(zip(conv.params, args))) + ")"
        return f"{self.ns.ref(fn)}({', '.join(list(args) + [f'{k}={v[0]}' for k, v in kw.items()])})"

    def rule_src(self, conv, ex, mapping: Dict[str, str]) -> str:
        """``ex`` (an expression of the rule ``conv``) rendered with these names, the rule's
        globals bound in the generated module."""
        used: Set[str] = set()
        text = render(ex, mapping, used)
        ren = {}
        for g in sorted(used):
            bound = self.ns.bind(g, resolve_global(conv, g))
            if bound != g:
                ren[g] = bound
        if ren:
            text = render(ex, {**mapping, **ren}, set())
        return text

    def stmt(self, st: Stmt, ind: int, code: Code) -> None:
        e = st.expr
        fn = e.fn
        args = [self.src(a) for a in e.args]
        if isinstance(fn, SetItem):
            base = e.args[0]
            if self.t(base) is not None:
                idx = index_src(fn.spec, args[1:-1])
                code.add(ind, f"{self.t(base)}[{idx}] = {self.t(e.args[-1]) or '0.0'}", st.loc)
            code.add(ind, f"{args[0]}[{index_src(fn.spec, args[1:-1])}] = {args[-1]}", st.loc)
            return
        if isinstance(fn, InPlace) and is_array(self.kind(e.args[0])):
            self.inplace(st, args, ind, code)
            return
        lhs = var_name(st.var) + " = " if st.var is not None else ""
        own = getattr(fn, "_zyg_forward", None)
        if own is not None:
            # non-blocking communication (zyg/tasks/mpi.py): the value's and the tangent's
            # messages travel under one request, which the wait completes
            val, tan = own(args, [self.tz(a) for a in e.args],
                           lambda name: self.ns.ref(fn._zyg_helpers[name], f"_zyg_{name}"))
            code.add(ind, lhs + val, st.loc)
            if tan is not None and st.var is not None and self.active(st.var):
                code.add(ind, f"t_{var_name(st.var)} = {tan}", st.loc)
            return
        if is_reshape(fn) and self.is_view(st.var):
            self.reshapes.check_code(st, args[0], ind, code)
        if self.recursive_jvp(st, args, ind, code):
            return
        code.add(ind, lhs + self.call_src(st, args), st.loc)
        linear = getattr(fn, "_zyg_linear", None)
        if linear is not None:
            # communication (zyg/tasks/mpi.py), linear in the operands listed: the tangents
            # travel as the values did, whether or not they are active here, so that every
            # rank's tangent messages are matched
            tan = self.call_src(st, [self.tz(a) if i in linear else s
                                     for i, (a, s) in enumerate(zip(e.args, args))])
            active = st.var is not None and self.active(st.var)
            code.add(ind, f"{'t_' + var_name(st.var) if active else '_zyg_t'} = {tan}", st.loc)
            return
        if st.var is None or not self.active(st.var):
            return
        tan = self.tangent(st, args)
        if self.p.backend.strong_scalars and self._narrowed(st):
            # numba promotes by type (a number's tangent is a float64, a rule's
            # np.where(.., 1.0, ..) a float64 array): the tangent of a float32 result keeps
            # the result's dtype, so that it unifies with the tangents it meets in loops
            tan = f"({tan}).astype(np.{array_dtype(self.kind(st.var))})"
        code.add(ind, f"t_{var_name(st.var)} = {tan}", st.loc)

    def recursive_jvp(self, st: Stmt, args: List[str], ind: int, code: Code) -> bool:
        """A recursive call in forward mode: value and tangent from the callee's compiled
        forward pair (``recpairs.jvp_pair_for``; itself, inside that pair).  False where
        there is none (the call is then refused)."""
        from ..ssa.prims import Recursive
        from .native import builder, cast_arg
        e = st.expr
        if not isinstance(e.fn, Recursive) or self.batched or st.var is None or e.kwargs:
            return False
        kinds = tuple(self.kind(a) for a in e.args)
        out_kind = self.kind(st.var)
        me = getattr(self, "native_self", None)
        if me is not None and me[0] is e.fn.fn and me[1] == kinds:
            if out_kind != self.p.ret_kind:
                return False
            name, tpos = me[2], self.tangent_positions()
        else:
            got = builder().jvp_pair_for(e.fn.fn, kinds, out_kind, self.p.backend)
            if got is None:
                return False
            name, tpos = self.ns.ref(got[0], getattr(got[0], "__name__", "rec_jvp")), got[1]
        b = self.p.backend
        ops = [cast_arg(self.ns, b, k, a) for k, a in zip(kinds, args)]
        lim = "_lim" if me is not None else "np.uint64(0)"
        tans = [cast_arg(self.ns, b, kinds[i], self.tz(e.args[i])) for i in tpos]
        out = f"_j{len(code.body)}"
        code.add(ind, f"{out} = {name}({', '.join(ops + [lim] + tans)})", st.loc)
        code.add(ind, f"{var_name(st.var)} = {out}[0]", st.loc)
        if self.active(st.var):
            code.add(ind, f"t_{var_name(st.var)} = {out}[1]", st.loc)
        return True

    def _narrowed(self, st: Stmt) -> bool:
        """``st``'s result is a new float32 array (not a view of its operand)."""
        k = self.kind(st.var)
        return is_array(k) and array_dtype(k) in NARROW_DTYPES and \
            not isinstance(st.expr.fn, (GetItem, Attr)) and not self.is_view(st.var)

    def inplace(self, st: Stmt, args: List[str], ind: int, code: Code) -> None:
        """``a op= b`` on an array: the tangent first (it needs the old ``a``), then ``a``."""
        e = st.expr
        op = InPlace.SYMBOL[e.fn.op][0]
        a, b = e.args[0], e.args[1]
        ta, tb = self.t(a), self.t(b)
        shared = self.p.aliases.may_share(a, b)
        if shared:
            # ``b`` (and its tangent) may share ``a``'s memory: numpy reads all of ``b``
            # before it writes, numba's ufuncs element by element; copy them first
            args = [args[0], f"{args[1]}.copy()"]
            if tb is not None and op in "+-":
                tb = f"{tb}.copy()"
        if ta is not None:
            if op in "+-":
                if tb is not None:
                    code.add(ind, inplace_src(ta, op, tb), st.loc)
            elif op == "*":
                if tb is not None:
                    code.add(ind, f"_tb = {args[0]} * {tb}", st.loc)
                code.add(ind, inplace_src(ta, "*", args[1]), st.loc)
                if tb is not None:
                    code.add(ind, inplace_src(ta, "+", "_tb"), st.loc)
            elif op == "/":
                if tb is not None:
                    code.add(ind, inplace_src(ta, "-", f"{args[0]} / {args[1]} * {tb}"), st.loc)
                code.add(ind, inplace_src(ta, "/", args[1]), st.loc)
            else:
                raise self.err(st, f"forward mode of the in-place operator {op}= on arrays is "
                                   "not supported", UnsupportedSyntax)
        code.add(ind, inplace_src(args[0], op, args[1]), st.loc)
        if st.var is not None:
            code.add(ind, f"{var_name(st.var)} = {args[0]}", st.loc)
            if ta is not None:
                code.add(ind, f"t_{var_name(st.var)} = {ta}", st.loc)

    def tangent(self, st: Stmt, args: List[str]) -> str:
        """Source of the tangent of ``st.var``."""
        e = st.expr
        fn = e.fn
        ops = e.args
        act = [i for i, a in enumerate(ops) if self.active(a)]
        if isinstance(fn, InPlace):
            fn = fn.op
        from ..rules.higher import Checkpointed, Hooked
        from ..ssa.prims import Recursive
        if isinstance(fn, Hooked):
            return self.tz(ops[0])          # hook is the identity in forward mode
        if hasattr(fn, "tangent_src"):
            # zyg.grad inside (rules/gradcall.py), checkpointed loops (rules/higher.py)
            return fn.tangent_src(self, st, args)
        if isinstance(fn, (Checkpointed, Recursive)):
            msg, hint = _no_forward(fn)
            raise self.err(st, msg, hint=hint)
        if isinstance(fn, (GetItem, Attr)):
            if isinstance(fn, Attr) and fn.attr not in ("T", "real", "imag"):
                raise self.err(st, f"'.{fn.attr}' has no tangent")
            return self.call_src(st, [self.tz(ops[0])] + args[1:])
        if isinstance(fn, (MakeTuple, ArrayOf, Stacked)):
            return self.call_src(st, [self.tz(a) for a in ops])
        kinds = [self.kind(a) for a in ops]
        y = var_name(st.var)
        if registry.is_nondifferentiable(fn):
            # an allocation (np.zeros, np.empty, ...) whose array is written later
            return f"np.zeros_like({y})" if is_array(self.kind(st.var)) else "0.0"
        lin = _helper_linear().get(getattr(fn, "py_func", fn))
        if lin is not None:
            return self.call_src(st, [self.tz(a) if i in lin else s for i, (a, s) in enumerate(zip(ops, args))])
        if any(is_array(k) for k in kinds):
            return self.array_tangent(st, args, act, kinds, y)
        if is_array(self.kind(st.var)) and getattr(dispatch.rule_for(fn), "fwd", None) is not None:
            # an array made of numbers (np.full(n, v)): the array rule's forward part
            return self.array_tangent(st, args, act, kinds, y)
        rule = registry.lookup(fn)
        conv = rule.converted if rule is not None else None
        if conv is None or conv.back_exprs is None:
            raise self.err(st, f"no forward rule for {callee_name(fn)}: its rule has no "
                               "closed-form pullback expression")
        terms = []
        for i in act:
            ex = conv.back_exprs[i] if i < len(conv.back_exprs) else None
            if ex is None:
                continue
            mapping = dict(zip(conv.params, args))
            mapping[conv.back_param] = self.t(ops[i])
            if conv.out:
                mapping[conv.out] = y
            if self.zero_guards:
                # the partial derivative apart (the rule's pullback is linear in dy), so
                # that a zero one, as a zero tangent, makes the term exactly zero
                mapping[conv.back_param] = "1.0"
                partial = self.rule_src(conv, ex, mapping)
                t = self.t(ops[i])
                # (the partial is computed only where the tangent is not zero)
                terms.append(f"({self.ns.ref(guards.times_nz, '_zyg_times_nz')}"
                             f"({t}, {partial}) if {t} != 0 else 0.0)")
                continue
            terms.append(f"({self.rule_src(conv, ex, mapping)})")
        return " + ".join(terms) if terms else "0.0"

    def zero_like(self, st: Stmt) -> str:
        """The zero tangent of ``st.var``: an array of its shape for an array (a value
        none of whose operands is active can become active later, when an active value is
        written into it: ``c = np.tanh(zeros); np.divide(c, x, c)``)."""
        return f"np.zeros_like({var_name(st.var)})" if is_array(self.kind(st.var)) else "0.0"

    def array_tangent(self, st: Stmt, args, act, kinds, y: str) -> str:
        e = st.expr
        fn = e.fn if not isinstance(e.fn, InPlace) else e.fn.op
        ops = e.args
        if registry.is_nondifferentiable(fn):
            # an allocation (np.zeros, np.empty, ...) whose array is written later
            return f"np.zeros_like({y})" if is_array(self.kind(st.var)) else "0.0"
        if fn in _LINEAR_ALL:
            return self.call_src(st, [self.t(a) or ("0.0" if self.kind(a) == "float" else s)
                                      for a, s in zip(ops, args)])
        if is_reshape(fn) and self.is_view(st.var):
            # a view of the base's tangent where writes go through it, else its values
            return self.reshapes.derived(st, self.tz(ops[0]), shape_src(st, args[1:]))
        if fn in _LINEAR:
            return self.call_src(st, [self.tz(ops[0])] + args[1:])
        if fn in _BILINEAR:
            terms = []
            for i in act:
                a2 = list(args)
                a2[i] = self.t(ops[i])
                terms.append(self.call_src(st, a2))
            return " + ".join(terms) if terms else self.zero_like(st)
        r = dispatch.rule_for(fn)
        if r is None:
            raise self.err(st, f"no forward rule for {callee_name(fn)} on arrays")
        consts = [a.value if isinstance(a, Const) and not isinstance(a, Undef) else arules._NOCONST
                  for a in ops]
        kwx = {k: self.src(v) for k, v in e.kwargs.items()}
        kwk = {k: self.kind(v) for k, v in e.kwargs.items()}
        kwc = {k: (v.value if isinstance(v, Const) else arules._NOCONST) for k, v in e.kwargs.items()}
        scalar_out = not is_array(self.kind(st.var))
        # a scalar rule says nothing about what the function does to an array (np.sum has
        # one for numbers): elementwise only for ufuncs and the listed functions
        elementwise = r.broadcast or fn in _ELEMENTWISE or isinstance(fn, np.ufunc)
        terms = []
        for i in act:
            if r.fwd is not None and not scalar_out:
                c = arules.Ctx(list(args), y, self.t(ops[i]), kinds, consts, list(e.kwargs), kwx, kwk, kwc)
                try:
                    terms.append(f"({r.fwd(c, i)})")
                except arules._RuleError as ex:
                    raise self.err(st, f"{callee_name(fn)}: {ex}", UnsupportedSyntax)
            elif elementwise:
                c = arules.Ctx(list(args), y, self.t(ops[i]), kinds, consts, list(e.kwargs), kwx, kwk, kwc)
                src = r.back(c, i)
                if src is not None and self.zero_guards:
                    # the partial apart (the pullback is elementwise and linear in dy), so
                    # that a zero one, as a zero tangent, makes the term exactly zero
                    c1 = arules.Ctx(list(args), y, "1.0", kinds, consts, list(e.kwargs), kwx, kwk, kwc)
                    partial = r.back(c1, i)
                    if partial is not None:
                        src = (f"{self.ns.ref(arules.mulnz2_for(self.p.backend), '_zyg_mulnz2')}"
                               f"({self.t(ops[i])}, {partial})")
                if src is not None:
                    terms.append(f"({src})")
            elif scalar_out:
                # d y = sum(dy/dx * dx): the pullback of dy = 1 is the gradient
                c = arules.Ctx(list(args), y, "1.0", kinds, consts, list(e.kwargs), kwx, kwk, kwc)
                src = r.back(c, i)
                if src is not None:
                    t = self.t(ops[i])
                    terms.append(f"np.sum(({src}) * {t})" if is_array(kinds[i]) else f"(({src}) * {t})")
            elif fn in _REDUCTIONS and i == 0:
                # along an axis, each element reaches one output: sum(d y/d x * t, axis)
                c = arules.Ctx(list(args), y, f"np.ones_like({y})", kinds, consts, list(e.kwargs),
                               kwx, kwk, kwc)
                src = r.back(c, i)
                if len(ops) > 1:
                    ax, axc = args[1], consts[1]
                else:
                    ax, axc = kwx.get("axis", "None"), kwc.get("axis", None)
                prod = f"(({src}) * {self.t(ops[i])})"
                keep = kwc.get("keepdims", False)
                if keep is arules._NOCONST:
                    raise self.err(st, f"{callee_name(fn)}: keepdims= must be a constant", UnsupportedSyntax)
                if axc is None:
                    # keepdims=True over all axes: an array of ones of y's shape
                    terms.append(f"np.full_like({y}, np.sum({prod}))")
                    continue
                special = dispatch.primal_call(np.sum, [prod], [kinds[0]], {"axis": (ax, axc)},
                                             self.kind(st.var))
                red = special or f"np.sum({prod}, axis={ax})"
                if keep and isinstance(axc, int):
                    # the tangent has y's shape: the reduced axis kept (keepdims=True)
                    red = f"np.expand_dims({red}, {axc + array_ndim(kinds[0]) if axc < 0 else axc})"
                terms.append(red)
            else:
                raise self.err(st, f"no forward rule for {callee_name(fn)} with an array result")
        if not terms:
            return self.zero_like(st)
        out = " + ".join(terms)
        if elementwise and not scalar_out and self.may_miss_shape(out, ops, args, kinds, y):
            # an operand the tangent does not mention sets the result's shape (np.sum(G - r),
            # G inactive (2, 3), r active (3,)): -t_r alone has r's shape, and the sum of it
            # counted r's entries once instead of once per row of G
            out = f"({out}) + np.zeros_like({y})"
        return out

    def may_miss_shape(self, out: str, ops, args, kinds, y: str) -> bool:
        """Can the elementwise tangent ``out`` of ``y`` have a smaller shape than ``y``:
        does it leave out an array operand (its value, or its tangent), which numpy's
        broadcasting of ``y`` may have followed?"""
        import re
        names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", out))
        if y in names:
            return False
        for a, src, k in zip(ops, args, kinds):
            if not is_array(k):
                continue
            tan = self.t(a)
            if src in names or (tan is not None and tan in names):
                continue
            return True
        return False

    # -- the function ---------------------------------------------------------------------------
    def emit(self, name: str) -> Code:
        fn = self.fn
        params = [var_name(q) for q in fn.params]
        tparams = [f"t_{var_name(q)}" for q in fn.params if self.active(q)]
        code = Code()
        code.put(0, Def(name, tuple(params + self.extra_params() + tparams)))
        code.add(1, f'"""Forward mode (jvp) of {fn.name} ({fn.filename}:{fn.firstlineno}), generated by zyg."""')
        # a reshape taken as a view needs these arguments C-contiguous: checked on the
        # caller's arrays, before the copies below (which are C-contiguous)
        for i, st in self.reshapes.param_checks().items():
            q = next(q for q in fn.params if q.id == i)
            self.reshapes.check_code(st, "", 1, code, [var_name(q)])
        for q in fn.params:
            if is_array(self.kind(q)) and self.copy_args and q.id not in self.keep_params:
                # jvp leaves the caller's arrays as they were
                code.add(1, f"{var_name(q)} = {var_name(q)}.copy()")
                if self.active(q):
                    code.add(1, f"t_{var_name(q)} = t_{var_name(q)}.copy()")
        entry = fn.blocks[fn.order[0]]
        self.prologue(code)
        self._find_loops()
        # placeholders for values defined in one block and used in others (numba types them)
        defined_in_entry = {st.var.id for st in entry.stmts if st.var is not None}
        cross = self.cross_block_values()
        ordered = self.defined_before_uses(entry.id)
        for blk in fn.iter_blocks():
            if blk.id == entry.id:
                continue
            for v in list(blk.params) + [st.var for st in blk.stmts if st.var is not None]:
                k = self.kind(v)
                if k in ("none", "undef", "object") or v.id in defined_in_entry or v.id not in cross \
                        or v.id in ordered:
                    continue
                code.add(1, f"{var_name(v)} = {zero_of(k)}")
                if self.active(v) and self.placeholder(k) is not None:
                    code.add(1, f"t_{var_name(v)} = {self.placeholder(k)}")
        if isinstance(self.p.ret_kind, str) and self.p.ret_kind not in ("none", "object"):
            code.add(1, f"_ret = {zero_of(self.p.ret_kind)}")
        for st in entry.stmts:
            self.stmt(st, 1, code)
        if isinstance(entry.term, Return):
            self.ret(entry.term, 1, code, loop=False)
        else:
            self.term(entry, 1, code)
            code.put(1, While("_blk >= 0"))     # not 'while True': see transform.primal()

            def case(bid: int, i: int) -> None:
                blk = fn.blocks[bid]
                if blk.id in self.s_loops:
                    # a structured loop nest: one dispatch case
                    X = self.s_loop(blk.id, i, code)
                    code.add(i, f"_blk = {X}")
                    return
                for st in blk.stmts:
                    self.stmt(st, i, code)
                if isinstance(blk.term, Return):
                    self.ret(blk.term, i, code, loop=True)
                else:
                    self.term(blk, i, code)
            # an if/elif chain, or a search tree for many blocks (bounded nesting)
            dispatch_cases(code, 2, [b.id for b in fn.iter_blocks()
                                     if b.id != entry.id and b.id not in self.s_inner], case)
        code.add(1, "return _ret, _tret")
        for k, v in tape_helpers(self.p.backend).items():
            self.ns.ns[k] = v
        return code

    def defined_before_uses(self, entry_id: int) -> Set[int]:
        """Values (not block parameters) whose defining dispatch case comes, in the generated
        text, before every other case that uses them.  numba needs a name defined before
        its first use in bytecode order; these values have that without a placeholder.  A
        placeholder is a second definition, and numba's SSA then joins the value at the
        dispatch loop's header from every case (a copy with reference counting per case and
        value: forward mode over a gradient grew quadratically, 12 MB of LLVM IR and 30 s
        of LLVM for a 5-line function).  Dominance makes the one definition run first."""
        ids = [b.id for b in self.fn.iter_blocks()
               if b.id != entry_id and b.id not in self.s_inner]
        order = ids if len(ids) <= DISPATCH_TREE_MIN else sorted(ids)
        pos = {b: i for i, b in enumerate(order)}
        pos[entry_id] = -1
        for h in self.s_loops:
            for b in self.p.loops[h]:
                pos[b] = pos[h]
        home: Dict[int, int] = {}
        for blk in self.fn.iter_blocks():
            for st in blk.stmts:
                if st.var is not None:
                    home[st.var.id] = blk.id
        ok = set(home)
        for blk in self.fn.iter_blocks():
            for a in self.block_uses(blk):
                if not isinstance(a, Var) or a.id not in home or home[a.id] == blk.id:
                    continue
                d = home[a.id]
                if d not in pos or blk.id not in pos or pos[d] >= pos[blk.id]:
                    ok.discard(a.id)
        return ok

    @staticmethod
    def block_uses(blk) -> list:
        uses = [a for st in blk.stmts for a in list(st.expr.args) + list(st.expr.kwargs.values())]
        t = blk.term
        if isinstance(t, Branch):
            uses += [t.cond] + list(t.true_args) + list(t.false_args)
        elif isinstance(t, Jump):
            uses += list(t.args)
        elif isinstance(t, Return):
            uses.append(t.value)
        return uses

    def cross_block_values(self) -> Set[int]:
        """Values used in a block other than the one defining them (block parameters are
        assigned on edges, so they count too): these need a typed placeholder."""
        home: Dict[int, int] = {}
        out: Set[int] = set()
        for blk in self.fn.iter_blocks():
            for q in blk.params:
                home[q.id] = blk.id
                out.add(q.id)
            for st in blk.stmts:
                if st.var is not None:
                    home[st.var.id] = blk.id
        for blk in self.fn.iter_blocks():
            for a in self.block_uses(blk):
                if isinstance(a, Var) and home.get(a.id, blk.id) != blk.id:
                    out.add(a.id)
        return out

    # -- structured loops ------------------------------------------------------------------
    def _find_loops(self) -> None:
        """Loops emitted as real ``while True`` loops instead of dispatch cases: the exit is
        at the header test (no ``break`` or ``return`` inside), and the body is blocks,
        ``if``/``else`` diamonds (a branch and its immediate post-dominator) and nested
        such loops.  Each transition of the dispatch loop is an indirect jump that LLVM
        does not always thread, which made forward mode over a gradient (Hessians) several
        times slower than the gradient."""
        from .structured import StructuredMixin
        self.s_loops: Dict[int, tuple] = {}     # header -> (in-loop successor, exit)
        self.s_inner: Set[int] = set()          # blocks emitted inside a structured loop
        if not STRUCTURED_LOOPS:
            return
        loops = self.p.loops
        StructuredMixin._pdoms(self)           # self.ipdom
        cand: Dict[int, tuple] = {}
        for h in sorted(loops, key=lambda h: (len(loops[h]), h)):
            body = loops[h]
            t = self.fn.blocks[h].term
            if not isinstance(t, Branch) or t.true == t.false:
                continue
            if t.true in body and t.false not in body:
                B, X = t.true, t.false
            elif t.false in body and t.true not in body:
                B, X = t.false, t.true
            else:
                continue
            if any(not self.fn.blocks[b].successors() or
                   any(q not in body for q in self.fn.blocks[b].successors()) for b in body - {h}):
                continue
            if any(h2 != h and h2 in body and h2 not in cand for h2 in loops):
                continue
            seen: Set[int] = set()
            if self._walk(B, h, seen, cand, body - {h}) and seen == body - {h}:
                cand[h] = (B, X)
        for h in cand:
            if not any(h2 != h and h in loops[h2] for h2 in cand):
                self.s_loops[h] = cand[h]
                self.s_inner |= loops[h] - {h}
        self.s_cand = cand

    def _walk(self, b: int, stop: int, seen: Set[int], cand, allowed: Set[int]) -> bool:
        """Is the region from ``b`` to ``stop`` structured (each block once)? The reverse
        emitter's walk (it reads only ``fn``, ``p.loops`` and ``ipdom``)."""
        from .structured import StructuredMixin
        return StructuredMixin._walk(self, b, stop, seen, cand, allowed)

    def s_loop(self, h: int, ind: int, code: Code) -> int:
        """``while True:`` header; exit test with the exit edge and ``break``; the body.
        Returns the exit block."""
        B, X = self.s_cand[h]
        hb = self.fn.blocks[h]
        t = hb.term
        code.put(ind, While("True"))
        for st in hb.stmts:
            self.stmt(st, ind + 1, code)
        inside_true = t.true == B
        code.put(ind + 1, If(f"{'not ' if inside_true else ''}{self.src(t.cond)}"))
        self.edge(X, t.false_args if inside_true else t.true_args, ind + 2, code, goto=False)
        code.add(ind + 2, "break")
        self.edge(B, t.true_args if inside_true else t.false_args, ind + 1, code, goto=False)
        self.s_region(B, h, ind + 1, code)
        return X

    def s_region(self, b: int, stop: int, ind: int, code: Code) -> None:
        while b != stop:
            if b in self.s_cand:
                b = self.s_loop(b, ind, code)
                continue
            blk = self.fn.blocks[b]
            for st in blk.stmts:
                self.stmt(st, ind, code)
            t = blk.term
            if isinstance(t, Jump):
                self.edge(t.target, t.args, ind, code, goto=False)
                b = t.target
                continue
            m = self.ipdom[b]
            code.put(ind, If(self.src(t.cond)))
            for k, (tgt, args) in enumerate(((t.true, t.true_args), (t.false, t.false_args))):
                if k == 1:
                    code.put(ind, Else())
                n0 = len(code)
                self.edge(tgt, args, ind + 1, code, goto=False)
                self.s_region(tgt, m, ind + 1, code)
                if len(code) == n0:
                    code.add(ind + 1, "pass")
            b = m

    def edge(self, target: int, args, ind: int, code: Code, goto: bool = True) -> None:
        params = self.fn.blocks[target].params
        lhs, rhs = [], []
        for p, a in zip(params, args):
            lhs.append(var_name(p))
            # an undefined operand (a path that raised) keeps the parameter's kind for numba
            rhs.append(zero_of(self.kind(p)) if isinstance(a, Undef) else self.src(a))
            if self.active(p):
                lhs.append("t_" + var_name(p))
                rhs.append(self.edge_tangent(p, a))
        if lhs:
            code.add(ind, f"{', '.join(lhs)} = {', '.join(rhs)}")
        if goto:
            code.add(ind, f"_blk = {target}")

    def edge_tangent(self, p, a) -> str:
        """The tangent passed to block parameter ``p`` for operand ``a``: a zero of the
        parameter's kind where ``a`` has no tangent.  An undefined operand (a path that
        raised) takes the zero of ``p``'s kind, not ``zeros_like`` of its placeholder
        (a 0-d array where ``p`` is a 1-d array: numba cannot unify them)."""
        k = self.kind(p)
        if isinstance(a, Undef):
            return self.tzero(k)
        if is_array(k) and not self.active(a):
            return f"np.zeros_like({self.src(a)})"
        return self.tz(a)

    def term(self, blk, ind: int, code: Code) -> None:
        t = blk.term
        if isinstance(t, Jump):
            self.edge(t.target, t.args, ind, code)
        elif isinstance(t, Branch):
            code.put(ind, If(self.src(t.cond)))
            self.edge(t.true, t.true_args, ind + 1, code)
            code.put(ind, Else())
            self.edge(t.false, t.false_args, ind + 1, code)

    def ret(self, t: Return, ind: int, code: Code, loop: bool) -> None:
        v = t.value
        code.add(ind, f"_ret = {self.src(v)}")
        if self.active(v):
            code.add(ind, f"_tret = {self.t(v)}")
        else:
            k = self.kind(v) if isinstance(v, Var) else "float"
            if is_tuple(k):
                code.add(ind, "_tret = (" + "".join(self.tz_leaf(x) + ", " for x in self.p.ret_parts) + ")")
            else:
                code.add(ind, f"_tret = {self.tzero(k) if self.batched else '0.0'}"
                         if not is_array(k) else f"_tret = np.zeros_like({self.src(v)})"
                         if not self.batched else f"_tret = {self.tz(v)}")
        if loop:
            code.add(ind, "break")

    def tz_leaf(self, a) -> str:
        return self.tz(a)

    def tzero(self, kind: str) -> str:
        """A typed zero tangent of a value of this kind (placeholders, undefined operands)."""
        return zero_of(kind)

    def placeholder(self, kind: str) -> Optional[str]:
        """The placeholder of a cross-block value's tangent (None: none needed)."""
        return self.tzero(kind)

    def prologue(self, code: Code) -> None:
        """Lines after the arguments' copies (batched mode: the lane buffers)."""

    def extra_params(self) -> List[str]:
        """Parameters between the primals and the tangents (the lane count, batched mode)."""
        return []


def check_forward_kinds(p) -> None:
    for q in p.fn.params:
        k = p.kinds.get(q.id, "")
        if is_complex(k) or (is_array(k) and k[0] == "c"):
            raise TypeMismatch(f"{p.fn.name}: jvp of complex arguments is not supported yet")


def _no_forward(fn) -> tuple:
    """The message and hint for forward mode of a recursive call or ``zyg.checkpoint``
    (a compiled recursive pair, pullbacks/native.py, is named by its user function)."""
    from ..ssa.prims import Recursive
    if not isinstance(fn, Recursive):
        return f"forward mode of {callee_name(fn)} is not supported yet", None
    user = getattr(fn.fn, "_zyg_recursive_of", fn.fn)
    return (f"forward mode (jvp, hvp, hessian, jacobian(mode='fwd')) of the recursive function "
            f"{getattr(user, '__qualname__', user)} is not supported yet",
            "use reverse mode (grad, vjp, jacobian(mode='rev')), or write the recursion as a loop")
