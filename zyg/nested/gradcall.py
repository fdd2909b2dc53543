"""``zyg.grad`` called inside a differentiated function (a gradient penalty).

In ``loss(w, x) = g(w, x) + lam * sum(grad(g)(w, x) ** 2)`` the call of the gradient
transform is lowered to the primitive ``GradOf(g, a)`` (``zyg/ssa/lower.py`` calls
:func:`lower_grad_call`), whose operands are the call's arguments and whose value is
``y = d g / d x_a`` (of the kind of ``x_a``).  Its derivatives are second derivatives
of ``g``, computed by forward mode over reverse mode, as ``zyg.hvp`` does:

* forward (the primal): ``g``'s recording primal and adjoint, compiled for the target
  and called from the generated code (:func:`grad_function`);
* reverse: for the cotangent ``dy`` of ``y``, the cotangent of operand ``j`` is
  ``sum_i dy_i d^2 g / (d x_a_i d x_j)``.  By the symmetry of second derivatives this
  is the directional derivative of ``d g / d x_j`` in the direction ``dy`` placed on
  argument ``a``: one forward-mode pass over the generated gradient source of ``g``
  w.r.t. ``x_j`` (:func:`tangent_function` with ``b = j``, tangent on ``{a}``);
* forward mode (``zyg.jvp`` of a function calling ``grad``): the tangent of ``y`` is
  the forward mode of the gradient source w.r.t. ``x_a`` with the operands' tangents
  (:func:`tangent_function` with ``b = a``).

All these functions are generated source compiled for the target (numba on ``cpu``)
and called directly from the generated code: no object mode, no Python in between.
``g`` is differentiated on its own (not inlined), so it must be a function zyg can
differentiate twice (``zyg.hessian`` of it works); its arguments are floats, ints,
bools and float64 arrays.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import gast

from .. import driver
from ..caches import on_invalidate
from .. import backends
from ..build import ForwardMode, Split, load
from ..driver import _grad_source_of_kinds, ssa_of
from ..errors import TypeMismatch
from ..rules import arrays as arules
from ..ssa import hooks
from ..ssa.analysis import array_dtype, differentiable, is_array, is_tuple
from ..ssa.captured import Closure
from ..ssa.emit import Def, _ident as ident, var_name
from ..ssa.lower import unwrap
from ..ssa.prims import MakeTuple, Prim
from ..pullbacks.forward import check_forward_kinds
from ..pullbacks.transform import plan


class GradOf(Prim):
    """The primitive ``zyg.grad(fn, argnums=argnum)`` applied to ``fn``'s arguments."""

    def __init__(self, fn: Any, argnum: int, nargs: int):
        self.fn = fn
        self.argnum = argnum
        self.nargs = nargs      # the user's arguments; ``fn``'s hidden ones follow them
        self.name = f"zyg.grad({getattr(fn, '__name__', 'f')}, argnums={argnum})"

    def _key(self):
        return (id(self.fn), self.argnum, self.nargs)

    def __call__(self, *args):
        return driver.transform(self.fn, self.argnum, "python", "grad", "")(*args[:self.nargs])

    def result_kind_of(self, kinds: Sequence[str]) -> Optional[str]:
        """The gradient has the kind of the argument it is taken w.r.t."""
        return kinds[self.argnum] if self.argnum < len(kinds) else None

    # -- emission (the reverse emitter in pullbacks/arrays.py, the forward one) ---------
    def check(self, em, st) -> List[str]:
        """The operands' kinds, checked: float and float64-array arguments are
        differentiated, int and bool ones passed along."""
        kinds = [em.kind(a) for a in st.expr.args]
        name = getattr(self.fn, "__name__", "f")
        for i, k in enumerate(kinds):
            if is_tuple(k) or k not in ("float", "int", "bool") and \
                    not (is_array(k) and array_dtype(k) in ("float64", "int64", "int32", "bool")):
                raise _err(st, f"zyg.grad({name}) inside a differentiated function: argument {i} "
                               f"is a {k}; floats, ints, bools and float64 arrays are supported")
        k = kinds[self.argnum]
        if not differentiable(k):
            raise _err(st, f"zyg.grad({name}) inside a differentiated function is taken w.r.t. "
                           f"argument {self.argnum}, a {k}: its gradient is None",
                       "take the gradient w.r.t. a float or float array argument")
        return kinds

    def primal_src(self, em, st, args: List[str]) -> str:
        """``y = grad_a g(*args)`` in the generated code."""
        kinds = self.check(em, st)
        h = em.ns.ref(grad_function(self.fn, kinds, self.argnum, em.p.target),
                      f"zyg_grad_{_ident(self.fn)}_d{self.argnum}")
        return f"{h}({', '.join(args)})"

    def array_rule(self, em, st, active_ops: List[int]):
        """The reverse rule: the cotangent of operand ``j`` is a Hessian-vector product."""
        kinds = self.check(em, st)
        a = self.argnum
        names: Dict[int, str] = {}
        for j in active_ops:
            fn = tangent_function(self.fn, kinds, j, (a,), em.p.target)
            names[j] = em.ns.ref(fn, f"zyg_hvp_{_ident(self.fn)}_{a}_{j}")
        return arules.ARule(lambda c, i: f"{names[i]}({', '.join(list(c.x) + [c.dy])})")

    def tangent_src(self, em, st, args: List[str]) -> str:
        """Forward mode: the tangent of ``y`` from the active operands' tangents."""
        kinds = self.check(em, st)
        act = tuple(i for i, x in enumerate(st.expr.args) if em.active(x))
        fn = tangent_function(self.fn, kinds, self.argnum, act, em.p.target)
        h = em.ns.ref(fn, f"zyg_jvp_{_ident(self.fn)}_{self.argnum}")
        return f"{h}({', '.join(list(args) + [em.t(st.expr.args[i]) for i in act])})"


class JvpOf(Prim):
    """The tangent part of ``zyg.jvp(fn, primals, tangents)`` inside a differentiated
    function: ``ty = sum_j <d fn / d x_j, t_j>`` over the arguments ``on`` given a
    tangent, for a real ``fn``.  Operands: ``fn``'s arguments (its hidden ones after the
    user's), then the tangents of ``on``.  (The value part is ``fn``'s call itself.)

    All parts are gradients and second derivatives of ``fn`` by the functions GradOf uses:
    the primal sums ``grad_function`` products; the cotangent of argument ``i`` is
    ``dy`` times the derivative of ``d fn / d x_i`` along the tangents
    (``tangent_function``, Hessian-vector symmetry), that of tangent ``t_j`` is ``dy``
    times ``d fn / d x_j``; forward mode (a jvp of a function calling jvp) adds both."""

    def __init__(self, fn: Any, on: Tuple[int, ...], nall: int, nuser: int):
        self.fn = fn
        self.on = tuple(on)
        self.nall = nall        # fn's arguments, hidden ones included
        self.nuser = nuser      # the user's arguments
        self.name = f"zyg.jvp({getattr(fn, '__name__', 'f')}, tangents on {list(on)})"

    def _key(self):
        return (id(self.fn), self.on, self.nall, self.nuser)

    def __call__(self, *ops):
        args = ops[:self.nuser]
        out = 0.0
        for j, t in zip(self.on, ops[self.nall:]):
            out += float(np.sum(driver.transform(self.fn, j, "python", "grad", "")(*args) * t))
        return out

    def result_kind_of(self, kinds: Sequence[str]) -> Optional[str]:
        return "float"

    def check(self, em, st) -> List[str]:
        kinds = [em.kind(a) for a in st.expr.args[:self.nall]]
        name = getattr(self.fn, "__name__", "f")
        for i, k in enumerate(kinds):
            if is_tuple(k) or k not in ("float", "int", "bool") and \
                    not (is_array(k) and array_dtype(k) in ("float64", "int64", "int32", "bool")):
                raise _err(st, f"zyg.jvp({name}) inside a differentiated function: argument {i} "
                               f"is a {k}; floats, ints, bools and float64 arrays are supported")
        for j, x in zip(self.on, st.expr.args[self.nall:]):
            if not differentiable(kinds[j]):
                raise _err(st, f"zyg.jvp({name}) inside a differentiated function: argument {j} "
                               f"is a {kinds[j]} and has no tangent", "give it None as its tangent")
            if em.kind(x) != kinds[j]:
                raise _err(st, f"zyg.jvp({name}): the tangent of argument {j} is a {em.kind(x)}, "
                               f"the argument a {kinds[j]}")
        return kinds

    @staticmethod
    def _dot(a: str, b: str, kind: str) -> str:
        return f"np.sum({a} * {b})" if is_array(kind) else f"({a} * {b})"

    def _grad(self, em, kinds, j) -> str:
        return em.ns.ref(grad_function(self.fn, kinds, j, em.p.target),
                         f"zyg_grad_{_ident(self.fn)}_d{j}")

    def primal_src(self, em, st, args: List[str]) -> str:
        kinds = self.check(em, st)
        xs, ts = args[:self.nall], args[self.nall:]
        terms = [self._dot(f"{self._grad(em, kinds, j)}({', '.join(xs)})", t, kinds[j])
                 for j, t in zip(self.on, ts)]
        return "(" + " + ".join(terms) + ")" if terms else "0.0"

    def array_rule(self, em, st, active_ops: List[int]):
        kinds = self.check(em, st)
        names: Dict[int, str] = {}
        for i in active_ops:
            if i < self.nall:
                fn = tangent_function(self.fn, kinds, i, self.on, em.p.target)
                names[i] = em.ns.ref(fn, f"zyg_hvp_{_ident(self.fn)}_{i}_t")
            else:
                names[i] = self._grad(em, kinds, self.on[i - self.nall])

        def rule(c, i):
            if i < self.nall:
                return f"{c.dy} * {names[i]}({', '.join(c.x)})"
            return f"{c.dy} * {names[i]}({', '.join(c.x[:self.nall])})"
        return arules.ARule(rule)

    def tangent_src(self, em, st, args: List[str]) -> str:
        kinds = self.check(em, st)
        ops = st.expr.args
        xs, ts = args[:self.nall], args[self.nall:]
        act = tuple(i for i in range(self.nall) if em.active(ops[i]))
        terms = []
        for k, j in enumerate(self.on):
            if act:
                fn = tangent_function(self.fn, kinds, j, act, em.p.target)
                h = em.ns.ref(fn, f"zyg_jvp_{_ident(self.fn)}_{j}_a")
                d = f"{h}({', '.join(xs + [em.t(ops[i]) for i in act])})"
                terms.append(self._dot(d, ts[k], kinds[j]))
            if em.active(ops[self.nall + k]):
                terms.append(self._dot(f"{self._grad(em, kinds, j)}({', '.join(xs)})",
                                       em.t(ops[self.nall + k]), kinds[j]))
        return "(" + " + ".join(terms) + ")" if terms else "0.0"


def _err(st, msg: str, hint: Optional[str] = None) -> TypeMismatch:
    loc = st.loc
    return TypeMismatch(msg, loc.filename if loc else None, loc.lineno if loc else None,
                        loc.col if loc else None, hint)


def _ident(fn: Any) -> str:
    return ident(getattr(fn, "__name__", "f").replace("<lambda>", "lambda"))


def _uncacheable(fn: Any) -> Any:
    """Code calling these functions is not put in numba's disk cache: a later process
    would not see a change of ``g`` (numba does not track the functions a cached
    function calls)."""
    if hasattr(fn, "py_func"):
        fn._zyg_uncacheable = True
    return fn


_GRADS: Dict[Any, Callable] = {}


def grad_function(g: Any, kinds: Sequence[str], a: int, target: str) -> Callable:
    """``h(*args) -> d g / d args[a]`` compiled for ``target`` (recording primal, then
    adjoint, in one generated function)."""
    key = (g, tuple(kinds), a, target, ssa_of(g).reads)
    fn = _GRADS.get(key)
    if fn is not None:
        return fn
    backend = backends.get(target)
    if not backend.compiled:
        fn = _grad_source_of_kinds(g, kinds, a)     # the driver's python source, loaded
    else:
        _grad_source_of_kinds(g, kinds, a)      # the same checks, and the source reused below
        ir = ssa_of(g)
        p = plan(ir, list(kinds), [a], backend)
        stem = f"{_ident(g)}_gd{a}"
        prog = Split().emit(p, stem)
        code = prog.code
        params = [var_name(q) for q in p.fn.params]
        code.add(0, "")
        code.put(0, Def(stem, tuple(params)))
        code.add(1, f'"""Gradient of {ir.name} w.r.t. argument {a} (zyg.grad inside a '
                    'differentiated function)."""')
        code.add(1, f"_ret, _tp = {stem}_primal({', '.join(params)})")
        code.add(1, f"_g = {stem}_adjoint(*_tp, 1.0)")
        code.add(1, "return _g[0]")
        prog.names.append(stem)
        fn = load(prog, backend).fns[-1]
    fn = _GRADS[key] = _uncacheable(fn)
    return fn


_TANGENTS: Dict[Any, Callable] = {}


def tangent_function(g: Any, kinds: Sequence[str], b: int, on: Tuple[int, ...],
                     target: str) -> Callable:
    """``h(*args, *tangents) -> `` the derivative of ``d g / d args[b]`` in the direction
    of ``tangents`` (one per argument in ``on``): forward mode over the generated
    gradient source, compiled for ``target``."""
    key = (g, tuple(kinds), b, on, target, ssa_of(g).reads)
    fn = _TANGENTS.get(key)
    if fn is not None:
        return fn
    inner = _grad_source_of_kinds(g, kinds, b)
    ir = ssa_of(inner)
    p = plan(ir, list(kinds), list(on), backends.get(target))
    check_forward_kinds(p)
    on_s = "".join(str(i) for i in on)
    stem = f"{_ident(g)}_gd{b}_t{on_s}"
    prog = ForwardMode().emit(p, stem + "_jvp")
    code, fwd = prog.code, prog.info
    params = [var_name(q) for q in p.fn.params]
    tans = [f"_t{i}" for i in on]
    passed = [f"_t{i}" for i in on if fwd.active(p.fn.params[i])]
    code.add(0, "")
    code.put(0, Def(stem, tuple(params + tans)))
    code.add(1, f'"""d/de of d {getattr(g, "__name__", "g")} / d argument {b} at the arguments '
                f'plus e times the tangents of arguments {list(on)}."""')
    code.add(1, f"return {stem}_jvp({', '.join(params + passed)})[1]")
    prog.names, prog.module = [stem + "_jvp", stem], stem
    fn = load(prog, p.backend).fns[-1]
    fn = _TANGENTS[key] = _uncacheable(fn)
    return fn


@on_invalidate
def clear_caches() -> None:
    """Forget the compiled functions (a rule was registered: ``g``'s derivatives change)."""
    _GRADS.clear()
    _TANGENTS.clear()


# -- lowering ---------------------------------------------------------------------------

def _maker(obj: Any) -> Optional[str]:
    """``"grad"`` / ``"value_and_grad"`` for ``zyg.grad`` / ``zyg.value_and_grad`` themselves
    (``zyg/api.py`` marks them), else None."""
    try:
        m = getattr(obj, "_zyg_maker", None)
    except Exception:
        return None
    return m if isinstance(m, str) else None


def transform_of(lw, fn: Any, node) -> Optional[Tuple[str, Any, Any]]:
    """Is the call ``node`` (callee value ``fn``) a call of a zyg transform?  Returns
    ``(form, transform_or_maker, inner_call)`` or None."""
    if fn is not None and not isinstance(fn, type) and hasattr(fn, "_zyg"):
        return ("global", fn, None)
    if isinstance(node.func, gast.Call):
        maker = lw.static_value(node.func.func)
        if _maker(maker) is not None:
            return ("inline", maker, node.func)
    if fn is not None and _maker(fn) is not None:
        return ("bare", fn, None)
    return None


def lower_grad_call(lw, found: Tuple[str, Any, Any], node, hint: str):
    """Lower ``G(*args)`` for a zyg transform ``G`` (a module-level ``dg = zyg.grad(g)``
    or ``zyg.grad(g, argnums=k)`` written in place) to ``GradOf(g, k)``."""
    form, obj, inner = found
    usage = ("zyg.grad inside a differentiated function: call it on the arguments, "
             "zyg.grad(g)(x, ...) or dg(x, ...) with dg = zyg.grad(g) at module level")
    if form == "bare":
        raise lw.unsupported(node, f"zyg.{obj.__name__}(...) makes a function; inside a "
                                   "differentiated function it must be called at once", usage)
    if form == "global":
        spec = obj._zyg
        what = getattr(obj, "__name__", "this transform")
        if spec.mode != "grad":
            raise lw.unsupported(node, f"{what} is a zyg.{spec.mode} transform; inside a "
                                       "differentiated function only zyg.grad is supported",
                                 "call zyg.grad(g) and g separately")
        argnums = spec.argnums
        g = spec.f
        where = node
    else:
        if _maker(obj) != "grad":
            raise lw.unsupported(inner, "zyg.value_and_grad inside a differentiated function is "
                                        "not supported; only zyg.grad is",
                                 "call zyg.grad(g) and g separately")
        if not inner.args or len(inner.args) > 2 or \
                any(isinstance(x, gast.Starred) for x in inner.args):
            raise lw.unsupported(inner, "zyg.grad(g) or zyg.grad(g, argnums) takes the function "
                                        "and at most the argnums, by position")
        g = lw.function_value(inner.args[0])
        if isinstance(inner.args[0], gast.Call) and transform_of(lw, None, inner.args[0]) is None:
            maker = lw.static_value(inner.args[0].func)
            if _maker(maker) is not None:
                g = maker     # zyg.grad(zyg.grad(h)): a transform of a transform
        argnode = inner.args[1] if len(inner.args) == 2 else None
        for k in inner.keywords:
            if k.arg == "argnums" and argnode is None:
                argnode = k.value
            elif k.arg != "target":
                raise lw.unsupported(inner, f"zyg.grad(g, {k.arg}=...) is not supported inside a "
                                            "differentiated function")
        argnums = 0 if argnode is None else _static_int(lw, argnode)
        where = inner
    if g is None or isinstance(g, Closure):
        raise lw.unsupported(where, "zyg.grad inside a differentiated function: the function must "
                                    "be defined outside the differentiated function",
                             "define g at module level (it is differentiated on its own)")
    if hasattr(g, "_zyg") or _maker(g) is not None:
        raise lw.unsupported(where, "zyg.grad of a zyg transform inside a differentiated function "
                                    "(a third derivative) is not supported",
                             "differentiate a function that calls zyg.grad once")
    several = isinstance(argnums, tuple)
    nums = argnums if several else (argnums,)
    if not nums or any(not isinstance(k, (int, np.integer)) or isinstance(k, bool) for k in nums):
        raise lw.unsupported(where, f"zyg.grad with argnums={argnums!r} inside a differentiated "
                                    "function: an int or a non-empty tuple of ints is supported")
    if node.keywords or any(isinstance(x, gast.Starred) for x in node.args):
        raise lw.unsupported(node, "a gradient inside a differentiated function takes "
                                   "positional arguments only")
    py = unwrap(g)
    code = getattr(py, "__code__", None)
    n = len(node.args)
    if code is not None and code.co_argcount != n:
        raise lw.unsupported(node, f"{py.__name__}() takes {code.co_argcount} arguments, and its "
                                   f"gradient is called with {n}")
    for k in nums:
        if not -n <= int(k) < n:
            raise lw.unsupported(where, f"argnums {int(k)} out of range for {n} arguments")
    args = [lw.expr(x) for x in node.args]
    # g's guards are guards of the calling code too, and the arrays g reads from its
    # closure and globals are passed on from the caller's hidden parameters
    reads = ssa_of(py).reads
    lw.reads.merge(reads)
    args += [lw.hidden_param(s) for s in reads.hidden]
    if not several:
        return lw.emit(GradOf(py, int(argnums) % n, n), args, node, hint)
    # a tuple of argnums: the tuple of the gradients, one primitive each (each runs g's
    # recording primal and adjoint: k passes where one could give all k)
    grads = [lw.emit(GradOf(py, int(k) % n, n), args, node, f"{hint}_d{int(k) % n}")
             for k in nums]
    return lw.emit(MakeTuple(), grads, node, hint)


def _static_int(lw, node) -> Any:
    """A compile-time argnums: a literal, a negated literal, a tuple, or a global name."""
    if isinstance(node, gast.Constant):
        return node.value
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub) and \
            isinstance(node.operand, gast.Constant) and isinstance(node.operand.value, int):
        return -node.operand.value
    if isinstance(node, (gast.Tuple, gast.List)):
        return tuple(_static_int(lw, e) for e in node.elts)
    v = lw.static_value(node) if isinstance(node, (gast.Name, gast.Attribute)) else None
    if v is None:
        raise lw.unsupported(node, "argnums of zyg.grad inside a differentiated function must be a "
                                   "constant")
    return v


def lower_jvp_call(lw, node, hint: str):
    """``zyg.jvp(g, (x, ...), (t, ...))`` inside a differentiated function: the tuple of
    ``g``'s value (its call, inlined) and the primitive JvpOf (the tangent)."""
    usage = "zyg.jvp(g, (x, y), (tx, None)) with tuples written out and g a real function"
    if len(node.args) != 3 or node.keywords and any(k.arg != "target" for k in node.keywords) or \
            not all(isinstance(a, gast.Tuple) for a in node.args[1:]) or \
            len(node.args[1].elts) != len(node.args[2].elts):
        raise lw.unsupported(node, "zyg.jvp inside a differentiated function takes the function, "
                                   "a tuple of primals and a tuple of as many tangents, written "
                                   "out", usage)
    g = lw.function_value(node.args[0])
    if g is None or isinstance(g, Closure) or hasattr(g, "_zyg") or _maker(g) is not None:
        raise lw.unsupported(node, "zyg.jvp inside a differentiated function: the function must "
                                   "be defined outside the differentiated function", usage)
    for e in node.args[1].elts:
        for sub in gast.walk(e):
            if isinstance(sub, (gast.Call, gast.NamedExpr, gast.Starred)):
                raise lw.unsupported(e, "zyg.jvp inside a differentiated function: a primal is "
                                        "read twice (the value and the tangent), so it must be a "
                                        "variable or an expression without calls", usage)
    py = unwrap(g)
    code = getattr(py, "__code__", None)
    n = len(node.args[1].elts)
    if code is not None and code.co_argcount != n:
        raise lw.unsupported(node, f"{py.__name__}() takes {code.co_argcount} arguments; zyg.jvp "
                                   f"gives it {n}")
    on, tans = [], []
    for j, t in enumerate(node.args[2].elts):
        if isinstance(t, gast.Constant) and (t.value is None or (type(t.value) in (int, float)
                                                                 and t.value == 0)):
            continue            # no tangent (zero)
        on.append(j)
        tans.append(t)
    value = lw.expr(gast.Call(func=node.args[0], args=list(node.args[1].elts), keywords=[]))
    args = [lw.expr(x) for x in node.args[1].elts]
    reads = ssa_of(py).reads
    lw.reads.merge(reads)
    args += [lw.hidden_param(s) for s in reads.hidden]
    targs = [lw.expr(t) for t in tans]
    ty = lw.emit(JvpOf(py, tuple(on), len(args), n), args + targs, node, hint + "_t")
    return lw.emit(MakeTuple(), [value, ty], node, hint)


def _lower_call(lw, fn: Any, node, hint: str):
    """The front end's hook: ``zyg.grad(g)(args)`` / ``dg(args)`` as the primitive GradOf,
    ``zyg.jvp(g, primals, tangents)`` as JvpOf."""
    if fn is not None and _maker(fn) == "jvp":
        return lower_jvp_call(lw, node, hint)
    found = transform_of(lw, fn, node)
    return None if found is None else lower_grad_call(lw, found, node, hint)


hooks.CALL_LOWERINGS.append(_lower_call)
