"""Recursive calls: the callee's own pullback, called at run time.

A recursive call cannot be inlined.  The transform treats ``y = f(args)`` (with
``f`` on the inlining stack) as a call with a rule whose forward part runs
``zyg.pullback(f, *args)`` and keeps ``back`` in a :class:`Records`, and whose backward
part takes the newest one not yet used and calls ``back(dy)``: last-in first-out, which
is exactly the order in which the adjoint needs the pullbacks, at every depth of the
recursion.  Each run of a primal owns its ``Records`` (``zyg/safety.py`` makes one per
gradient call and per ``pullback`` call, and hands it to ``back``), found through the
context variable :data:`CURRENT`: the compiled code cannot carry a Python object, and a
context variable is per thread, so pullbacks called out of order, twice, after an
exception or from several threads each see their own records.

On the cpu target the calls leave compiled code through ``numba.objmode`` (about a
microsecond each, plus the Python side of ``pullback``), so recursion costs per call;
the work inside each call runs compiled.  The pullback of ``f`` is compiled once per
argument kinds, and ``f``'s own recursive calls go through the same rule, so the
transformer itself never recurses.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import TypeMismatch
from .. import backends
from ..numerics import STACK_GUARD
from ..ssa.analysis import array_dtype, array_ndim, differentiable, is_array, is_tuple
from ..driver import pullback
from ..rules import higher
from ..rules.closure import ConvertedRule
from ..pullbacks.records import CURRENT, Records, current  # noqa: F401  (the records of a run)

RECURSION_LIMIT = 100000        # Python's limit while recursive calls run (default 1000)


class _Forward:
    """``y = f(*args)``, keeping ``f``'s pullback (a callable object: numba calls it from
    object mode, and the cpu wrapper leaves it as it is)."""

    def __init__(self, fn: Any, target: str):
        self.fn = fn
        self.target = target

    def __call__(self, *args):
        if sys.getrecursionlimit() < RECURSION_LIMIT:
            # each level of the user's recursion is a few Python frames (pullback, object mode)
            sys.setrecursionlimit(RECURSION_LIMIT)
        with STACK_GUARD:
            y, back = pullback(self.fn, *args, target=self.target)
        current().push(back)
        return y


class _Backward:
    """Take the newest pending pullback and return the cotangents of the differentiable
    arguments."""

    def __init__(self, diff: List[int]):
        self.diff = diff

    def __call__(self, dy):
        back = current().take()
        with STACK_GUARD:
            gs = back(dy)
        return tuple(gs[i] for i in self.diff)


def numba_type(kind: str) -> str:
    if is_array(kind):
        return f"{array_dtype(kind)}[{', '.join(':' * 1 for _ in range(array_ndim(kind)))}]"
    try:
        return {"float": "float64", "int": "int64", "bool": "boolean", "complex": "complex128"}[kind]
    except KeyError:
        raise TypeMismatch(f"a recursive call returning or taking a {kind} value is not supported "
                           "(numbers and arrays are)") from None


_RULES: Dict[Tuple[Any, Tuple[str, ...], str, str], ConvertedRule] = {}


def _cotangents(fn: Any, target: str, args, dy) -> list:
    """The cotangents of all operands of ``fn(*args)`` for ``dy``: from ``fn``'s pullback,
    recomputed, or from the primitive's own compiled backward pass (checkpointed loops,
    ``zyg/nested/ckloop.py``)."""
    if getattr(fn, "_zyg_runner", False):
        return fn.vjp(target, args, dy)
    y, back = pullback(fn, *args, target=target)
    return list(back(dy))


class _Recompute:
    """``checkpoint``'s backward part: run ``fn``'s pullback from the saved arguments
    (recomputing ``fn``) and apply it to ``dy``."""

    def __init__(self, fn: Any, target: str, diff: List[int]):
        self.fn = fn
        self.target = target
        self.diff = diff

    def __call__(self, *args_dy):
        *args, dy = args_dy
        gs = _cotangents(self.fn, self.target, args, dy)
        return tuple(0.0 if gs[i] is None else gs[i] for i in self.diff)


def recursive_rule(fn: Any, kinds: List[str], out_kind: str, target: str,
                   checkpoint: bool = False) -> ConvertedRule:
    """The rule of a recursive call of ``fn`` with operands of these kinds, or (with
    ``checkpoint``) of ``zyg.checkpoint(fn, ...)``: a plain call forward, ``fn``'s pullback
    recomputed backward."""
    key = (fn, tuple(kinds), out_kind, target, checkpoint)
    conv = _RULES.get(key)
    if conv is not None:
        return conv
    if is_tuple(out_kind) or any(is_tuple(k) for k in kinds):
        raise TypeMismatch(f"recursive calls of {fn.__qualname__} with tuples are not supported yet")
    n = len(kinds)
    params = [f"a{i}" for i in range(n)]
    diff = [i for i, k in enumerate(kinds) if differentiable(k)]
    name = "rec_" + "".join(c if c.isalnum() else "_" for c in fn.__name__)
    glob = {"np": np, "_zyg_rec_fwd": _Forward(fn, target), "_zyg_rec_bwd": _Backward(diff),
            "_zyg_uncacheable": True}
    bcall = "_zyg_rec_bwd(dy)"
    if checkpoint:
        glob["_zyg_rec_fwd"] = _Plain(fn, target)
        glob["_zyg_rec_bwd"] = _Recompute(fn, target, diff)
        bcall = f"_zyg_rec_bwd({', '.join(params + ['dy'])})"
        name = name.replace("rec_", "ckpt_", 1)
    call = f"_zyg_rec_fwd({', '.join(params)})"
    gnames = [f"g{i}" for i in diff]
    zeros = [f"    g{i} = 0.0" for i in range(n) if i not in diff]
    rets = ", ".join(f"g{i}" for i in range(n)) + ("," if n == 1 else "")
    backend = backends.get(target)
    fwd = (f"def {name}_fwd({', '.join(params)}):\n"
           + "".join(f"    {ln}\n" for ln in backend.call_python(f"y = {call}", [("y", numba_type(out_kind))],
                                                                   glob))
           + "    return (y,)\n")
    back = f"{', '.join(gnames)}{',' if len(gnames) == 1 else ''} = {bcall}" if gnames else bcall
    outs = [(f"g{i}", numba_type(kinds[i])) for i in diff]
    bwd = (f"def {name}_bwd({', '.join(params + ['dy'])}):\n"
           + "".join(f"    {ln}\n" for ln in backend.call_python(back, outs, glob))
           + "".join(z + "\n" for z in zeros) + f"    return ({rets})\n")
    conv = ConvertedRule(name=name, params=params, out=None, fwd_expr=None, back_param="dy",
                         back_exprs=None, free=list(params), fwd_src=fwd, bwd_src=bwd,
                         nonzero=[i in diff for i in range(n)], extra_res=[], globals=glob,
                         filename=getattr(getattr(fn, "__code__", None), "co_filename", ""),
                         lineno=getattr(getattr(fn, "__code__", None), "co_firstlineno", 0))
    _RULES[key] = conv
    return conv


class _Plain:
    """``f(*args)`` without a pullback (a recursive call whose result is not differentiated,
    the forward part of ``checkpoint``)."""

    def __init__(self, fn: Any, target: str = "python"):
        self.fn = fn
        self.target = target

    def __call__(self, *args):
        if getattr(self.fn, "_zyg_runner", False):
            return self.fn.forward(self.target, *args)
        return self.fn(*args)


class _Take:
    """The cotangent of operand ``i`` of the newest recursive call: the first operand's
    request takes the pullback and computes all of them; the others read them."""

    def __call__(self, first: bool, i: int, dy):
        rec = current()
        if first:
            back = rec.take()
            rec.pending = list(back(dy))
        g = rec.pending[i]
        return 0.0 if g is None else g


_HELPERS: Dict[Any, Any] = {}


def _python_call(name: str, params: List[str], call: str, kind: str, glob: Dict[str, Any], target: str):
    """Compile ``def name(*params): return call`` where ``call`` runs Python code (on a
    compiling back end, its result declared of ``kind``)."""
    backend = backends.get(target)
    src = (f"def {name}({', '.join(params)}):\n"
           + "".join(f"    {ln}\n" for ln in backend.call_python(f"r = {call}", [("r", numba_type(kind))],
                                                                   glob))
           + "    return r\n")
    return backend.function(src, f"<zyg recursion {name}>", glob, name, uncacheable=True)


def call_helper(fn: Any, kinds: List[str], out_kind: str, target: str, record: bool):
    """A function ``h(*args) -> y`` running the recursive call (keeping its pullback when
    ``record``), callable from generated code on ``target``."""
    key = ("call", fn, tuple(kinds), out_kind, target, record)
    h = _HELPERS.get(key)
    if h is None:
        params = [f"a{i}" for i in range(len(kinds))]
        name = f"rec_{fn.__name__}_{'rec' if record else 'call'}"
        glob = {"np": np, "_zyg_f": _Forward(fn, target) if record else _Plain(fn, target)}
        h = _HELPERS[key] = _python_call(name, params, f"_zyg_f({', '.join(params)})", out_kind,
                                         glob, target)
    return h


class _RecomputeTake:
    """``checkpoint``'s backward part for arrays: the first active operand's request
    recomputes ``fn``'s pullback from the saved arguments; the others read it."""

    def __init__(self, fn: Any, target: str):
        self.fn = fn
        self.target = target

    def __call__(self, first: bool, i: int, dy, *args):
        rec = current()
        if first:
            rec.pending = _cotangents(self.fn, self.target, args, dy)
        g = rec.pending[i]
        return 0.0 if g is None else g


def grad_helper(fn: Any, kind: str, i: int, target: str, nargs: int = 0, checkpoint: bool = False):
    """A function ``h(first, dy, *args)`` returning the cotangent of operand ``i`` (of kind
    ``kind``) of the newest recursive call of ``fn`` (``args`` are unused), or of
    ``checkpoint(fn, *args)`` (recomputed from ``args``)."""
    key = ("grad", fn, kind, i, target, nargs, checkpoint)
    h = _HELPERS.get(key)
    if h is None:
        name = f"{'ckpt' if checkpoint else 'rec'}_{fn.__name__}_d{i}"
        glob = {"np": np, "_zyg_take": _RecomputeTake(fn, target) if checkpoint else _Take()}
        params = ["first", "dy"] + [f"a{k}" for k in range(nargs)]
        extra = "".join(f", a{k}" for k in range(nargs)) if checkpoint else ""
        h = _HELPERS[key] = _python_call(name, params, f"_zyg_take(first, {i}, dy{extra})", kind,
                                         glob, target)
    return h


# the transforms reach this module through rules/higher.py (it calls the driver at run time)
higher.provide_recursive_calls(sys.modules[__name__])
# recursive calls that compile (pullbacks/native.py) are built by recpairs.py, which sits
# above the transform as this module does
from . import recpairs  # noqa: E402,F401
