"""The public API: ``grad``, ``value_and_grad``, ``pullback``, ``show``.

Each transformed function is specialised per argument-type signature (like numba):
the SSA of the function is built once, and for every new signature the activity
analysis, the transform, code generation and compilation run once and are cached.
The callable returned by ``grad`` does one dict lookup on the argument types and
calls the compiled code.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import dicts as _dicts, safety
from .caches import invalidate, on_invalidate
from .compile import LOAD_LOCK
from . import backends
from .build import FirstCall as _FirstCall, ForwardMode, Fused, Split, load
from .driver import (_Specializer, _flatten_args, _full_args,  # noqa: F401
                     _grad_source, _grad_source_of_kinds, _kinds, _normalise_argnums, _with_hidden,
                     has_foreign,
                     Back, make_object, pullback as _pullback, ssa_of, to_native, transform)
from .entry import adapt
from .errors import TypeMismatch, UnsupportedSyntax
from .rules.higher import Checkpointed
from .pullbacks.transform import plan
from .ssa.analysis import differentiable, is_array, kind_of_value
from .ssa.emit import Def, For, If, While, _ident
from .ssa.lower import unwrap
from .ssa.tuples import flatten_value, unflatten

# the nested transforms: imported for their hooks (calls of zyg.grad, checkpointed loops
# and recursive calls inside differentiated code)
from .nested import ckloop as _ckloop, gradcall as _gradcall, recursion as _recursion  # noqa: F401,E402


@on_invalidate
def _invalidate_caches() -> None:
    """Forward mode and second order read rules too (a stale jvp kept an old rule)."""
    _JVPS.clear()
    _HESS.clear()
    _JVP_SOURCES.clear()


def reset_caches() -> None:
    """Clear every cache of transformed functions (for tests)."""
    invalidate()


# zyg.grad(f)(x) written inline builds one object per call: the objects made last, per
# (function, argnums, target, mode), are kept, so an inline call reuses the compiled code as
# a kept gradient does (building a new object re-planned and re-emitted the code: ~10 ms).
# The same object is what a kept gradient is; at most _MADE_MAX are kept (lambdas made in a
# loop would otherwise grow it forever), and clearing zyg's caches clears it.
_MADE: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_MADE_MAX = 256
on_invalidate(_MADE.clear)


def _make(f, argnums, target, mode, doc):
    key = (id(f), tuple(argnums) if isinstance(argnums, list) else argnums, target, mode)
    try:
        hash(key)
    except TypeError:
        key = None
    if key is not None:
        hit = _MADE.get(key)
        if hit is not None and hit[0] is f:
            try:
                _MADE.move_to_end(key)
            except KeyError:        # cleared by another thread meanwhile
                pass
            return hit[1]
    out = _make_new(f, argnums, target, mode, doc)
    if key is not None:
        _MADE[key] = (f, out)       # f held: its id is not reused while the entry lives
        while len(_MADE) > _MADE_MAX:
            try:
                _MADE.popitem(last=False)
            except KeyError:
                break
    return out


def _make_new(f, argnums, target, mode, doc):
    if target == "cuda" and mode != "pullback":
        # a device function that CUDA kernels call (zyg/cuda.py)
        from .cuda import device_transform
        return device_transform(f, argnums, mode, doc)
    if hasattr(f, "_zyg") and mode != "pullback":
        out = _nested(f, argnums, target, mode, doc)
    else:
        out = transform(f, argnums, target, mode, doc)
    # how to make it again in another process (zyg/tasks/pickling.py)
    out._zyg_recipe = (mode, f, {"argnums": argnums, "target": target})
    return out


def grad(f: Optional[Callable] = None, argnums: Union[int, Sequence[int]] = 0, *,
         target: str = "cpu") -> Callable:
    """Gradient of a scalar function ``f`` with respect to argument(s) ``argnums``.

    ``zyg.grad(f)(x)`` is df/dx.  With a tuple ``argnums`` the result is a tuple.
    Integer and boolean arguments are not differentiable: their gradient is None.
    Usable as a bare decorator (``@zyg.grad``) or with options
    (``@zyg.grad(argnums=1, target="python")``).
    """
    if f is None:
        return lambda fn: grad(fn, argnums, target=target)
    return _make(f, argnums, target, "grad", f"Gradient of {getattr(f, '__name__', 'f')} (zyg).")


grad._zyg_maker = "grad"       # recognised inside differentiated code (nested/gradcall.py)


def value_and_grad(f: Optional[Callable] = None, argnums: Union[int, Sequence[int]] = 0, *,
                   target: str = "cpu") -> Callable:
    """Like :func:`grad` but returns ``(f(*args), gradient)`` from one pass."""
    if f is None:
        return lambda fn: value_and_grad(fn, argnums, target=target)
    return _make(f, argnums, target, "value_and_grad",
                 f"Value and gradient of {getattr(f, '__name__', 'f')} (zyg).")


value_and_grad._zyg_maker = "value_and_grad"


def pullback(f: Callable, *args: Any, target: str = "cpu") -> Tuple[Any, Callable]:
    """Run ``f(*args)`` and return ``(y, back)``; ``back(dy)`` gives one cotangent per
    positional argument (None for ints and bools).  ``back`` may be called many times; it
    holds the tape of this call and does not pickle (``zyg.NotPicklable``)."""
    y, back = _pullback(f, *args, target=target)
    return y, Back(back, f)


def stop_gradient(x):
    """Identity whose result carries no gradient."""
    return x


def show(f: Callable, *args: Any, argnums: Union[int, Sequence[int]] = 0, file=None) -> str:
    """Print (and return) the SSA IR, the primal and the adjoint source zyg generates for ``f``.

    ``args`` are example arguments fixing the types (default: every parameter a float).
    """
    import sys
    ir = ssa_of(f)
    if not args:
        args = tuple(1.0 for _ in range(ir.nargs))
    kinds = _kinds(_with_hidden(ir, args), ir.name)
    wrt, _ = _normalise_argnums(argnums, ir.nargs)
    p = plan(ir, kinds, wrt, backends.get("python"))
    name = _ident(ir.name)
    code = Split().emit(p, name).code
    fused = Fused(zero_guards=False).emit(p, name + "_vg").code
    kinds_line = ", ".join(f"{q}: {p.kinds.get(q.id)}" for q in ir.params)
    act = ", ".join(f"%{v}" for v in sorted(p.active)) or "(none)"
    text = (f"=== SSA IR of {ir.name} ===\n{p.fn}\n\n"
            f"argument kinds: {kinds_line}\nactive values: {act}\n\n"
            f"=== primal and adjoint (used by zyg.pullback) ===\n{code.text(p.backend.storage)}\n"
            f"=== fused value-and-gradient (used by zyg.grad) ===\n{fused.text(p.backend.storage)}")
    from .nested.recpairs import pairs_in
    for title, src in pairs_in(text, p.backend.name):
        text += f"\n=== compiled recursive pair of {title} (docs/calls.md, Recursion) ===\n{src}"
    for blk in ir.iter_blocks():         # loops' pairs (pullbacks/looppairs.py)
        for st in blk.stmts:
            for key, lp in getattr(getattr(st.expr.fn, "fn", None), "pairs", {}).items():
                if lp is not None and key[-1] == p.backend.key():
                    text += (f"\n=== compiled pair of the {st.expr.fn.__name__} at line "
                             f"{st.loc.lineno if st.loc else '?'} (docs/design.md) ===\n{lp.source}")
    print(text, file=file or sys.stdout)
    return text


_JVPS: Dict[Any, Callable] = {}


def _bind(f: Callable, args: Sequence[Any], kwargs: Optional[dict] = None) -> Tuple[Callable, tuple]:
    """The function to transform in place of ``f`` and the full positional arguments of
    the call ``f(*args, **kwargs)``: defaults, keyword-only defaults, a method's object and
    a partial's values filled in as ``zyg.grad`` does (zyg/entry.py)."""
    g, binder = adapt(f)
    if binder is None:
        if kwargs:
            raise TypeError(f"{getattr(unwrap(f), '__name__', 'f')}() takes no keyword arguments")
        return g, tuple(args)
    return g, binder.bind(tuple(args), dict(kwargs or {}), getattr(unwrap(f), "__name__", "f"))


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any], *,
        target: str = "cpu", batched: bool = False) -> Tuple[Any, Any]:
    """Forward mode: ``(f(*primals), J @ tangents)``, the Jacobian-vector product.

    ``tangents`` has the structure of ``primals`` (a float for a float, an array of the
    same shape for an array, a tuple for a tuple); ``None`` or an int/bool argument's
    entry means no tangent.  The result's tangent has the structure of the result.
    Like ``jax.jvp``; computed by a forward-mode transform of ``f`` in one pass.

    ``batched=True``: ``k`` tangents at once.  Each tangent leaf has one extra *leading*
    axis of length ``k`` (a float's tangent is a ``(k,)`` array, an array of shape ``S``
    has a ``(k,) + S`` tangent), and so has each leaf of the result's tangent: lane ``j``
    is ``jvp`` with the tangents' lane ``j`` (``jax.vmap`` of ``jax.jvp`` over the
    tangents, ``in_axes=0``).  The primal runs once, every tangent carries the ``k``
    lanes (zyg/pullbacks/forward_batched.py).
    """
    primals = tuple(primals)
    tangents = tuple(tangents)
    if len(primals) != len(tangents):
        raise TypeMismatch(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    if batched:
        return _jvp_batched(f, primals, tangents, target)
    # defaults, methods, partials (zyg/entry.py): their values get no tangent
    f, primals = _bind(f, primals)
    tangents = tangents + (None,) * (len(primals) - len(tangents))
    backend = backends.host(target, "jvp")      # ValueError for an unknown or a device target
    if _dicts.has_dict(primals):
        # dict arguments (zyg/dicts.py): their tangents are dicts of the same keys
        code = getattr(unwrap(f), "__code__", None)
        where = (code.co_filename, code.co_firstlineno) if code else (None, None)
        tangents = tuple(_dicts.tangent_like(t, x, f"argument {i}", where)
                         for i, (t, x) in enumerate(zip(tangents, primals)))
        primals = tuple(_dicts.to_tuples(a) for a in primals)
        y, ty = jvp(f, primals, tangents, target=target)
        return _dicts.to_dicts(y), _dicts.to_dicts(ty)
    if backend.native_byte_order and has_foreign(primals + tangents):
        # numba compiles native byte order only; forward mode writes into copies anyway
        primals = tuple(to_native(a) for a in primals)
        tangents = tuple(to_native(a) for a in tangents)
    py = unwrap(f)
    name = getattr(py, "__name__", "f")
    kinds = _kinds(primals, name)
    ir = ssa_of(f)
    if len(primals) != ir.nargs:
        raise TypeError(f"{ir.name}() takes {ir.nargs} positional arguments "
                        f"but {len(primals)} were given")
    nuser = len(primals)
    primals = _with_hidden(ir, primals)
    tangents = tangents + (None,) * (len(primals) - nuser)
    kinds += [kind_of_value(a) for a in primals[nuser:]]
    given = _given(tangents, kinds, nuser, ir)
    key = (py, target, tuple(kinds), ir.reads, given)
    tested = JVP_ZERO_TESTS
    if tested:
        key = key + ("zero tests",)
    entry = _jvp_entry(key, lambda: _build_jvp(ir, kinds, nuser, backend, wrt=given,
                                               zero_guards=tested))
    fn, trees, active, ret_tree, guard = entry
    flat_p = _flatten_args(primals, trees)
    if guard is not None:
        guard.check_aliasing(flat_p)
    flat_t = _flatten_tangents(primals, tangents, trees)
    targs = [_as_tangent(t, x) for t, x, a in zip(flat_t, flat_p, active) if a]
    args = tuple(flat_p) + tuple(targs)
    y, ty = _jvp_compiled(key, entry, args)(*args)
    if _has_nan(ty) and not tested:
        # a nan tangent may be 0 * inf (a zero tangent, or a zero partial, times an
        # infinite or nan one) that reverse mode's zero-cotangent tests leave out: run
        # again with the dual tests (Forward.zero_guards, built the first time it is
        # needed; the arguments were copied)
        gkey = key + ("zero tests",)
        gentry = _jvp_entry(gkey, lambda: _build_jvp(ir, kinds, nuser, backend, wrt=given,
                                                     zero_guards=True))
        y, ty = _jvp_compiled(gkey, gentry, args)(*args)
    if ret_tree is not None:
        return unflatten(ret_tree, list(y))[0], unflatten(ret_tree, list(ty))[0]
    return y, ty


jvp._zyg_maker = "jvp"        # recognised inside differentiated code (nested/gradcall.py)


#: ``zyg.jvp`` with forward mode's zero tests from its first run (the tests' oracle of that
#: form on every generated program, tests/oracles.check_jvp); off: only after a nan
JVP_ZERO_TESTS = False


def _has_nan(t: Any) -> bool:
    if isinstance(t, tuple):
        return any(_has_nan(x) for x in t)
    if isinstance(t, np.ndarray):
        return t.dtype.kind in "fc" and bool(np.isnan(t).any())
    return isinstance(t, (float, complex, np.floating, np.complexfloating)) and t != t


def _jvp_entry(key, make: Callable[[], tuple]) -> tuple:
    """The forward-mode entry of ``_JVPS`` under ``key``, made once by ``make()`` (first
    calls from several threads: one builds)."""
    entry = _JVPS.get(key)
    if entry is None:
        with LOAD_LOCK:
            entry = _JVPS.get(key)
            if entry is None:
                entry = _JVPS[key] = make()
    return entry


def _jvp_compiled(key, entry: tuple, args: tuple) -> Callable:
    """The entry's function, compiled for ``args`` at its first call (then kept)."""
    fn = entry[0]
    if isinstance(fn, _FirstCall):
        fn = fn.compile_for(args)
        _JVPS[key] = (fn,) + tuple(entry[1:])
    return fn


def _lanes_of(tangents) -> int:
    """The common lane count ``k`` of batched tangents (their leaves' leading axis)."""
    ks = set()

    def walk(t):
        if t is None:
            return
        if isinstance(t, tuple):
            for x in t:
                walk(x)
            return
        a = np.asarray(t)
        if a.ndim == 0:
            raise TypeMismatch("jvp(batched=True): a tangent needs a leading lane axis "
                               "(a float's tangent is a (k,) array)")
        ks.add(a.shape[0])
    for t in tangents:
        walk(t)
    if len(ks) > 1:
        raise TypeMismatch(f"jvp(batched=True): tangents with different lane counts {sorted(ks)}")
    if not ks:
        raise TypeMismatch("jvp(batched=True): no tangent given, so no lane count")
    return ks.pop()


def _lane(t, j):
    if t is None:
        return None
    if isinstance(t, tuple):
        return type(t)(*[_lane(x, j) for x in t]) if hasattr(t, "_fields") else \
            tuple(_lane(x, j) for x in t)
    return np.asarray(t)[j]


def _stack(outs):
    o = outs[0]
    if isinstance(o, tuple):
        parts = [_stack([x[i] for x in outs]) for i in range(len(o))]
        return type(o)(*parts) if hasattr(o, "_fields") else tuple(parts)
    return np.stack([np.asarray(x) for x in outs])


#: keys of ``_JVPS`` whose vector form computes no array by a rule (loops over numbers)
_SCALAR_VECTOR_FORMS: set = set()


def _jvp_batched(f, primals, tangents, target, lanes_if_scalar: bool = False):
    """``jvp(..., batched=True)``: one pass of the vector forward mode, or where the
    function has a construct that has no vector form (forward_batched.NotBatched), the
    scalar jvp once per lane.  ``lanes_if_scalar`` (``jacobian``): the scalar jvp once
    per lane also where the vector form is only loops over numbers, in which the scalar
    pass keeps every value in a register and numba vectorises it: a lane loop around each
    statement does neither (hand tracking's Jacobian: 26 scalar passes 40 ms, one vector
    pass 84 ms; benchmarks/vector_forward.md found the same for Hessians)."""
    f, primals = _bind(f, primals)
    tangents = tangents + (None,) * (len(primals) - len(tangents))
    backend = backends.host(target, "jvp")
    if _dicts.has_dict(primals):
        # dict arguments (zyg/dicts.py): their tangents are dicts of the same keys, each
        # entry with the lanes first
        code = getattr(unwrap(f), "__code__", None)
        where = (code.co_filename, code.co_firstlineno) if code else (None, None)
        tangents = tuple(_dicts.tangent_like(t, x, f"argument {i}", where)
                         for i, (t, x) in enumerate(zip(tangents, primals)))
        primals = tuple(_dicts.to_tuples(a) for a in primals)
        y, ty = _jvp_batched(f, primals, tangents, target)
        return _dicts.to_dicts(y), _dicts.to_dicts(ty)
    K = _lanes_of(tangents)
    if backend.native_byte_order and has_foreign(primals + tangents):
        primals = tuple(to_native(a) for a in primals)
        tangents = tuple(to_native(a) for a in tangents)
    py = unwrap(f)
    kinds = _kinds(primals, getattr(py, "__name__", "f"))
    ir = ssa_of(f)
    if len(primals) != ir.nargs:
        raise TypeError(f"{ir.name}() takes {ir.nargs} positional arguments "
                        f"but {len(primals)} were given")
    nuser = len(primals)
    primals = _with_hidden(ir, primals)
    tangents = tangents + (None,) * (len(primals) - nuser)
    kinds += [kind_of_value(a) for a in primals[nuser:]]
    given = _given(tangents, kinds, nuser, ir)
    key = (py, target, tuple(kinds), ir.reads, given, "batched")
    entry = _jvp_entry(key, lambda: _build_jvp(ir, kinds, nuser, backend, batched=True,
                                               wrt=given, scalar_key=key))
    if entry[0] is None or lanes_if_scalar and key in _SCALAR_VECTOR_FORMS:
        # per lane: the scalar jvp k times
        outs = [jvp(f, primals[:nuser], tuple(_lane(t, j) for t in tangents[:nuser]),
                    target=target) for j in range(K)]
        return outs[0][0], _stack([o[1] for o in outs])
    fn, trees, active, ret_tree, guard = entry
    flat_p = _flatten_args(primals, trees)
    if guard is not None:
        guard.check_aliasing(flat_p)
    flat_t = _flatten_tangents(primals, tangents, trees)
    targs = [_as_tangent_batched(t, x, K) for t, x, a in zip(flat_t, flat_p, active) if a]
    if isinstance(fn, _FirstCall):
        fn = fn.compile_for(tuple(flat_p) + (K,) + tuple(targs))
        _JVPS[key] = (fn, trees, active, ret_tree, guard)
    y, ty = fn(*flat_p, K, *targs)
    if ret_tree is not None:
        return unflatten(ret_tree, list(y))[0], unflatten(ret_tree, list(ty))[0]
    return y, ty


def _as_tangent_batched(t: Any, x: Any, K: int) -> Any:
    if isinstance(x, np.ndarray):
        if t is None:
            return np.zeros((K,) + x.shape, x.dtype)
        t = np.ascontiguousarray(t, dtype=x.dtype)
        if t.shape != (K,) + x.shape:
            raise TypeMismatch(f"jvp(batched=True): a tangent has shape {t.shape}, its primal "
                               f"{x.shape}: expected {(K,) + x.shape}")
        return t
    if t is None:
        return np.zeros(K)
    t = np.ascontiguousarray(t, dtype=np.float64)
    if t.shape != (K,):
        raise TypeMismatch(f"jvp(batched=True): a float's tangent has shape {t.shape}, "
                           f"expected ({K},)")
    return t


def _given(tangents, kinds, nuser, ir) -> Tuple[int, ...]:
    """The arguments given a tangent (``None`` is zero): only they get one in the generated
    code.  Every float argument where none is given (the result's tangent is then zero),
    and in code that communicates (MPI), whose ranks must send the same tangent messages
    whatever tangents each of them was given."""
    every = tuple(i for i in range(nuser) if differentiable(kinds[i]))
    if any(getattr(st.expr.fn, "_zyg_comm", None) is not None
           for blk in ir.iter_blocks() for st in blk.stmts):
        return every
    got = tuple(i for i in every if tangents[i] is not None)
    return got or every


def _build_jvp(ir, kinds, nuser, backend, batched=False, wrt=None, scalar_key=None,
               zero_guards=False):
    """The forward-mode entry of ``ir`` for arguments of ``kinds`` (built once), with a
    tangent for the arguments ``wrt`` (every float argument by default).  A vector form
    without array math puts ``scalar_key`` in ``_SCALAR_VECTOR_FORMS``.  ``zero_guards``:
    a term of a tangent is zero where its tangent or its partial is (``Forward``)."""
    from .pullbacks.forward import check_forward_kinds
    if wrt is None:
        wrt = [i for i, k in enumerate(kinds[:nuser]) if differentiable(k)]
    p = plan(ir, kinds, list(wrt), backend)
    check_forward_kinds(p)
    stem = f"{_ident(ir.name.replace('<lambda>', 'lambda'))}_jvp" + ("k" if batched else "")
    if batched:
        from .pullbacks.forward_batched import NotBatched
        try:
            prog = ForwardMode(batched=True).emit(p, stem)
        except NotBatched:
            return (None,)
        if not prog.info.array_math and scalar_key is not None:
            _SCALAR_VECTOR_FORMS.add(scalar_key)
    else:
        prog = ForwardMode(zero_guards=zero_guards).emit(p, stem + ("_nz" if zero_guards else ""))
    built = load(prog, backend)
    fwd = prog.info
    fn = built.checked(0, ir.name)
    trees = p.flat.param_trees if p.flat is not None else [None] * len(kinds)
    active = [fwd.active(q) for q in p.fn.params]
    ret_tree = p.flat.ret_tree if p.flat is not None else None
    return (fn, trees, active, ret_tree, safety.for_plan("jvp", p, ir))


def _flatten_tangents(primals, tangents, trees) -> List[Any]:
    out: List[Any] = []
    for x, t, tree in zip(primals, tangents, trees):
        if tree is None:
            out.append(t)
            continue
        n = len(flatten_value(x))
        if t is None:
            out += [None] * n
        else:
            leaves = flatten_value(t) if isinstance(t, tuple) else None
            if leaves is None or len(leaves) != n:
                raise TypeMismatch("jvp: a tangent must have the structure of its primal")
            out += leaves
    return out


def _as_tangent(t: Any, x: Any) -> Any:
    if isinstance(x, np.ndarray):
        if t is None:
            return np.zeros_like(x)
        t = np.asarray(t, dtype=x.dtype)
        if t.shape != x.shape:
            raise TypeMismatch(f"jvp: a tangent has shape {t.shape}, its primal {x.shape}")
        return t
    return 0.0 if t is None else float(t)


def _refuse_dicts(api: str, f: Callable, args: Sequence[Any], only: Optional[int] = None) -> None:
    """A clear error for a dict argument where ``api`` does not take one (``only``: the
    position of the differentiated argument, the others may be dicts)."""
    pos = [only] if only is not None else range(len(args))
    i = next((j for j in pos if _dicts.has_dict((args[j],))), None)
    if i is None:
        return
    py = unwrap(f)
    code = getattr(py, "__code__", None)
    name = getattr(py, "__name__", "f")
    which = " as the differentiated argument" if only is not None else ""
    raise TypeMismatch(
        f"zyg.{api}({name}): argument {i} is a dict (or holds one); zyg.{api} does not take "
        f"dict arguments{which} (zyg.grad, value_and_grad, pullback and jvp do)",
        code.co_filename if code else None, code.co_firstlineno if code else None,
        hint=f"write {name} as a function of the dict's entries as separate arguments "
             f"(params['w'] -> w) and take zyg.{api} of that, or build the derivative from "
             f"zyg.jvp / zyg.pullback, which take dict arguments")


_HESS: Dict[Any, list] = {}


def _second_order(f: Callable, args: Sequence[Any], argnum: int, target: str) -> list:
    """``[hessian_driver, hvp_driver]`` of ``f`` w.r.t. argument ``argnum`` at these kinds:
    forward mode over the generated gradient, with the loop over the columns inside the
    generated code (one call from Python)."""
    nuser = len(args)
    args = _full_args(f, args)
    kinds = _kinds(args, getattr(unwrap(f), "__name__", "f"))
    key = (unwrap(f), tuple(kinds), argnum, target, ssa_of(f).reads, HESSIAN_BATCHED)
    got = _HESS.get(key)
    if got is not None:
        return got
    with LOAD_LOCK:             # first calls from several threads: one builds
        got = _HESS.get(key)
        if got is None:
            got = _HESS[key] = _build_second_order(f, args, nuser, kinds, argnum, target)
    return got


def _no_runner_loops(ir) -> None:
    """Second derivatives differentiate the generated gradient, whose parallel and
    checkpointed loops are calls of compiled runners without a forward mode of their
    reverse pass: refuse them at the loop's line."""
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            fn = st.expr.fn
            if isinstance(fn, Checkpointed) and getattr(fn.fn, "_zyg_runner", False) and \
                    hasattr(fn.fn, "names"):
                loc = st.loc
                raise UnsupportedSyntax(
                    f"second derivatives (hvp, hessian) through a {fn.__name__} are not "
                    "supported yet", loc.filename if loc else None, loc.lineno if loc else None,
                    loc.col if loc else None,
                    hint="jvp and grad work through it; for a Hessian-vector product, take "
                         "central differences of zyg.grad along v")


def _build_second_order(f, args, nuser, kinds, argnum, target) -> list:
    from .pullbacks.forward import check_forward_kinds
    from .ssa.emit import var_name
    _no_runner_loops(ssa_of(f))
    # the gradient's source with its tape buffers as arguments: the drivers below keep them
    # between calls (fresh 64-entry tapes grown in every call cost as much as the whole
    # Hessian-vector product on k-means: page faults of the new memory)
    inner = _grad_source_of_kinds(f, kinds, argnum, pooled=True)
    stacks = inner._zyg_stacks
    pooled = not any(s == "c" for s, _ in stacks)
    if not pooled:
        # a complex tape: forward mode takes no complex arguments, so it starts empty
        inner = _grad_source_of_kinds(f, kinds, argnum)
        stacks = []
    ir = ssa_of(inner)
    nk = len(kinds)
    bufkinds = [kind_of_value(np.empty(1, _np_dtype(dt))) for _, dt in stacks] + \
        (["i8[1]"] if pooled else [])
    # a tangent for the differentiated argument only: the others are constants of H @ v
    p = plan(ir, list(kinds) + bufkinds, [argnum], backends.get(target))
    check_forward_kinds(p)
    stem = f"{_ident(ir.name)}_h"
    prog = ForwardMode(keep=frozenset(q.id for q in p.fn.params[nk:])).emit(p, stem + "_jvp")
    code, fwd = prog.code, prog.info
    params = [var_name(q) for q in p.fn.params[:nk]]
    x = params[argnum]
    bufs = [f"_b{j}" for j in range(len(stacks))]
    tbufs = []          # the tangents of the buffers that hold tangents (the float stacks)
    tans = []
    for j, q in enumerate(p.fn.params):
        if fwd.active(q):
            if j == argnum:
                tans.append("_e")
            elif j >= nk:
                tbufs.append((f"_tb{j - nk}", j - nk))
                tans.append(tbufs[-1][0])
            else:
                # an array argument the function writes active values into
                tans.append(f"np.zeros_like({params[j]})" if is_array(kinds[j]) else "0.0")
    pool_params = bufs + [t for t, _ in tbufs]
    call = f"{stem}_jvp({', '.join(params + bufs + (['_hw'] if pooled else []) + tans)})[1]"

    def keep_grown(ind: int) -> None:
        # a call that outgrew a buffer: the next one starts from one of the size it reached
        # (the grown buffer itself stays inside the jvp)
        for j, (_, dt) in enumerate(stacks):
            code.put(ind, If(f"_hw[{j}] > _b{j}.shape[0]"))
            code.add(ind + 1, f"_b{j} = np.empty(_hw[{j}], {dt})")
        for t, j in tbufs:
            code.put(ind, If(f"_hw[{j}] > {t}.shape[0]"))
            code.add(ind + 1, f"{t} = np.empty(_hw[{j}], {stacks[j][1]})")
    start, ret_bufs = _driver_buffers(pool_params)
    code.add(0, "")
    code.put(0, Def(f"{stem}_hvp", tuple(params + ["_e"] + pool_params)))
    code.add(1, f"_hw = np.zeros({len(stacks)}, np.int64)")
    for line in start:
        code.add(1, line)
    code.add(1, f"_r = {call}")
    keep_grown(1)
    code.add(1, f"return (_r{ret_bufs})")
    code.add(0, "")
    code.put(0, Def(f"{stem}_hessian", tuple(params + pool_params)))
    code.add(1, f"_hw = np.zeros({len(stacks)}, np.int64)")
    for line in start:
        code.add(1, line)
    if is_array(kinds[argnum]):
        code.add(1, f"_n = {x}.shape[0]")
        code.add(1, f"_H = np.empty((_n, _n), {x}.dtype)")
        code.add(1, f"_e = np.zeros_like({x})")
        code.put(1, For("_k", "range(_n)"))
        code.add(2, "_e[_k] = 1.0")
        code.add(2, f"_H[:, _k] = {call}")
        code.add(2, "_e[_k] = 0.0")
        keep_grown(2)
        code.add(1, f"return (_H{ret_bufs})")
    else:
        code.add(1, "_e = 1.0")
        code.add(1, f"_r = {call}")
        keep_grown(1)
        code.add(1, f"return (_r{ret_bufs})")
    prog.names, prog.module = [stem + "_jvp", stem + "_hessian", stem + "_hvp"], stem
    built = load(prog, p.backend)
    pool = _TapePool([dt for _, dt in stacks] + [stacks[j][1] for _, j in tbufs])
    out = [_PooledDriver(built.checked(i, ir.name), pool) for i in (1, 2)] + [None]
    if HESSIAN_BATCHED:
        got = _batched_hessian(p, params, kinds, argnum, stem, stacks, pooled, fwd.keep_params)
        if got is not None:
            out[0], out[2] = got      # the Hessian, and H @ V.T for a block of vectors V
    return out


# zyg.hessian by the vector forward mode over the gradient (JAC_CHUNK columns per pass);
# False: one Hessian-vector product per column (the path before, kept for comparison);
# "always": the vector pass also for gradients of loops over numbers (benchmarks)
HESSIAN_BATCHED = True


def _driver_buffers(names: List[str]) -> Tuple[List[str], str]:
    """What a second-order driver with the pool buffers ``names`` adds to its first line
    (their shapes on entry) and to its result: whether one was replaced, then per buffer
    its replacement or ``None`` (numba boxes every array it returns into a new ndarray:
    ~0.25 us a buffer a call, more than a small product)."""
    start = [f"{b}_s = {b}.shape" for b in names]
    grew = " or ".join(f"{b}.shape != {b}_s" for b in names) or "False"
    ret = "".join(f"{b} if {b}.shape != {b}_s else None, " for b in names)
    return start, f", {grew}, {ret}"


def _batched_hessian(p, params, kinds, argnum, stem, stacks=(), pooled=False, keep=()):
    """The Hessian driver from one vector forward pass of the gradient per JAC_CHUNK
    columns, or None where the gradient has a construct without a vector form.

    ``stacks``: the ``(stack, dtype)`` of the gradient's tape buffers, the parameters after
    ``params`` (then, where ``pooled``, the int64 array of the capacities they reached),
    whose ids are ``keep``: the drivers take them, and the ``(lanes, capacity)`` buffers of
    their tangents, from a pool as the scalar drivers do."""
    from .pullbacks.forward_batched import NotBatched
    try:
        prog = ForwardMode(batched=True, keep=frozenset(keep)).emit(p, stem + "_jvpk")
    except NotBatched:
        return None
    code, bf = prog.code, prog.info
    if not bf.array_math and HESSIAN_BATCHED != "always":
        # a gradient of loops over numbers: the per-column loop of scalar Hessian-vector
        # products is faster there (every value in a register; benchmarks/vector_forward.py)
        return None
    x = params[argnum]
    arr = is_array(kinds[argnum])
    nk = len(params)
    bufs = [f"_b{j}" for j in range(len(stacks))]
    tbufs = [(f"_TB{j - nk}", j - nk) for j, q in enumerate(p.fn.params)
             if j >= nk and bf.active(q)]
    pool_params = bufs + [t for t, _ in tbufs]
    hw = ["_hw"] if pooled else []

    def tans(k):
        out = []
        for j, q in enumerate(p.fn.params):
            if bf.active(q):
                if j == argnum:
                    out.append("_E" if arr else "np.ones(1)")
                elif j >= nk:
                    out.append(f"_TB{j - nk}[:{k}]")       # a float stack's tangent, k lanes
                elif is_array(kinds[j]):
                    out.append(f"np.zeros(({k},) + {params[j]}.shape, {params[j]}.dtype)")
                else:
                    out.append(f"np.zeros({k})")
        return out

    def call(k: str, ind: int) -> str:
        for t, j in tbufs:
            code.put(ind, If(f"{k} > {t}.shape[0]"))
            code.add(ind + 1, f"{t} = np.empty(({k}, {t}.shape[1]), {stacks[j][1]})")
        return f"{stem}_jvpk({', '.join(params + bufs + hw + [k] + tans(k))})[1]"

    def keep_grown(ind: int) -> None:
        for j, (_, dt) in enumerate(stacks):
            code.put(ind, If(f"_hw[{j}] > _b{j}.shape[0]"))
            code.add(ind + 1, f"_b{j} = np.empty(_hw[{j}], {dt})")
        for t, j in tbufs:
            code.put(ind, If(f"_hw[{j}] > {t}.shape[1]"))
            code.add(ind + 1, f"{t} = np.empty(({t}.shape[0], _hw[{j}]), {stacks[j][1]})")
    start, ret_bufs = _driver_buffers(pool_params)
    code.add(0, "")
    code.put(0, Def(f"{stem}_hessian", tuple(params + pool_params)))
    code.add(1, f"_hw = np.zeros({len(stacks)}, np.int64)")
    for line in start:
        code.add(1, line)
    if arr:
        code.add(1, f"_n = {x}.shape[0]")
        code.add(1, f"_H = np.empty((_n, _n), {x}.dtype)")
        code.add(1, "_c = 0")
        code.put(1, While("_c < _n"))
        code.add(2, f"_k = min({JAC_CHUNK}, _n - _c)")
        code.add(2, f"_E = np.zeros((_k, _n), {x}.dtype)")
        code.put(2, For("_j", "range(_k)"))
        code.add(3, "_E[_j, _c + _j] = 1.0")
        code.add(2, f"_T = {call('_k', 2)}")
        code.put(2, For("_j", "range(_k)"))
        code.add(3, "_H[:, _c + _j] = _T[_j]")
        code.add(2, "_c += _k")
        keep_grown(2)
        code.add(1, f"return (_H{ret_bufs})")
    else:
        code.add(1, f"_r = {call('1', 1)}[0]")
        keep_grown(1)
        code.add(1, f"return (_r{ret_bufs})")
    names = [stem + "_jvpk", stem + "_hessian"]
    if arr:
        # the products with the rows of _E (sparse Hessians: every colour in one pass)
        code.add(0, "")
        code.put(0, Def(f"{stem}_hvpk", tuple(params + ["_E"] + pool_params)))
        code.add(1, f"_hw = np.zeros({len(stacks)}, np.int64)")
        for line in start:
            code.add(1, line)
        code.add(1, "_k = _E.shape[0]")
        code.add(1, f"_r = {call('_k', 1)}")
        keep_grown(1)
        code.add(1, f"return (_r{ret_bufs})")
        names.append(stem + "_hvpk")
    prog.names, prog.module = names, stem + "_k"
    built = load(prog, p.backend)
    pool = _TapePool([dt for _, dt in stacks] + [stacks[j][1] for _, j in tbufs],
                     [0] * len(stacks) + [JAC_CHUNK] * len(tbufs))
    return (_PooledDriver(built.checked(1, p.fn.name), pool),
            _PooledDriver(built.checked(2, p.fn.name), pool) if arr else None)


def _np_dtype(dt: str):
    return getattr(np, dt.split(".")[-1])


class _TapePool:
    """The tape buffers of the second-order drivers of one function and signature, kept
    between calls (as ``zyg.grad`` keeps its own: driver._pooled).

    Each call takes a set of buffers for itself (``list.pop`` is atomic: two threads never
    share one, and a call inside another takes its own) and gives it back when it returns;
    a call that raised gives nothing back, so what it left half-written is never reused.
    A fresh set (a pool emptied by calls in other threads) is sized as the set given back
    last, so that calls after the first seldom grow a tape while they run.  Tapes are
    written before they are read: what a buffer held before is never seen."""
    __slots__ = ("dtypes", "lanes", "free", "last")

    def __init__(self, dtypes, lanes=None):
        self.dtypes = [_np_dtype(dt) for dt in dtypes]
        # 0: a stack (a 1-D buffer); L: the tangents of a stack in L lanes, (L, capacity)
        self.lanes = list(lanes) if lanes is not None else [0] * len(dtypes)
        self.free: list = []
        self.last: Optional[tuple] = None     # the set given back last that had grown

    @property
    def sizes(self) -> List[int]:
        """The capacities a fresh set gets."""
        if self.last is None:
            return [64] * len(self.dtypes)
        return [b.shape[-1] for b in self.last]

    def take(self) -> tuple:
        try:
            return self.free.pop()
        except IndexError:
            return tuple(np.empty((L, n) if L else n, dt)
                         for n, dt, L in zip(self.sizes, self.dtypes, self.lanes))

    def give(self, bufs: tuple) -> None:
        self.last = bufs
        self.free.append(bufs)


class _PooledDriver:
    """A generated Hessian driver ``fn(*args, *buffers) -> (result, grew, *replacements)``
    (:func:`_driver_buffers`), called with buffers of its :class:`_TapePool`; returns the
    result."""
    __slots__ = ("fn", "pool")

    def __init__(self, fn, pool: _TapePool):
        self.fn = fn
        self.pool = pool

    def __call__(self, *args):
        pool = self.pool
        try:
            bufs = pool.free.pop()
        except IndexError:
            bufs = pool.take()
        fn = self.fn
        if isinstance(fn, _FirstCall):
            fn = self.fn = fn.compile_for(args + bufs)
        r = fn(*args, *bufs)
        if r[1]:
            # a buffer outgrown: its replacement (None for the others)
            bufs = tuple(b if g is None else g for b, g in zip(bufs, r[2:]))
            pool.last = bufs
        pool.free.append(bufs)
        return r[0]


def _run_compiled(slot: list, k: int, args: tuple):
    fn = slot[k]
    if isinstance(fn, _FirstCall):
        fn = slot[k] = fn.compile_for(args)
    return fn(*args)


def hvp(f: Callable, x: Any, v: Any, *rest: Any, target: str = "cpu") -> Any:
    """Hessian-vector product ``H(x) @ v`` of a real function ``f(x, *rest)`` w.r.t. ``x``,
    without forming the Hessian: forward mode over the reverse-mode gradient (one pass)."""
    args = (x,) + rest
    try:
        hit = _HVP_FAST.get((f, target))
    except TypeError:           # an unhashable callable
        hit = None
    if hit is not None and ssa_of(f) is hit[0] and _fast_sig(args) == hit[1] \
            and HESSIAN_BATCHED == hit[3]:
        # arguments of the kinds of the last call: its driver (the IR is the same object,
        # so nothing it reads was rebound)
        return hit[2][1](*_with_hidden(hit[0], args), _vector_like(v, x))
    backends.host(target, "hvp")
    fb, bound = _bind(f, args)     # defaults, methods, partials
    _refuse_dicts("hvp", fb, bound)
    if backends.get(target).native_byte_order:
        bound = tuple(to_native(a) for a in bound)
        x = bound[0]
    slot = _second_order(fb, bound, 0, target)
    v = _vector_like(v, x)
    out = _run_compiled(slot, 1, _full_args(fb, bound) + (v,))
    sig = _fast_sig(bound)
    if fb is f and not hasattr(f, "_zyg") and sig is not None and len(bound) == len(args) and \
            all(a is b for a, b in zip(bound, args)):
        # the call needed no binding and no copies: the next one of these kinds can skip them
        try:
            _HVP_FAST[(f, target)] = (ssa_of(f), sig, slot, HESSIAN_BATCHED)
            while len(_HVP_FAST) > _MADE_MAX:
                _HVP_FAST.popitem(last=False)
        except (TypeError, KeyError):
            pass
    return out


# zyg.hvp called again with arguments of the kinds of its last call (per function and
# target): the driver without binding, checking and keying the arguments again, which cost
# ~10 us of Python per call against ~3 us for the compiled product of a 100-d Rosenbrock
_HVP_FAST: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
on_invalidate(_HVP_FAST.clear)


def _fast_sig(args: tuple) -> Optional[tuple]:
    """The kinds of plain arguments (arrays by dtype and rank, Python numbers by type), or
    None where an argument is anything else (tuples, dicts, subclasses: the full path)."""
    out = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            out.append(a.dtype)
            out.append(a.ndim)
        elif t is float or t is int or t is bool:
            out.append(t)
        else:
            return None
    return tuple(out)


def _vector_like(v: Any, x: Any) -> Any:
    """``v`` as the direction of a Hessian-vector product at ``x``."""
    if isinstance(x, np.ndarray):
        v = np.asarray(v, dtype=x.dtype)
        if v.shape != x.shape:
            raise TypeMismatch(f"hvp: v has shape {v.shape}, x has shape {x.shape}")
        return v
    return float(v)


def hessian(f: Callable, argnums: int = 0, *, target: str = "cpu", sparsity: Any = None) -> Callable:
    """``hessian(f)(*args)``: the Hessian of a real function w.r.t. argument ``argnums``
    (a float or a 1-D array), by forward mode over reverse mode: one Hessian-vector
    product per column, looped over inside the generated code.  With ``sparsity`` (the
    ``n x n`` pattern, scipy.sparse or boolean) a ``scipy.sparse.csr_matrix`` from one
    Hessian-vector product per colour of structurally orthogonal columns;
    ``sparsity="detect"``: the pattern found by zyg (as ``jacobian``)."""
    backends.host(target, "hessian")
    if not isinstance(argnums, (int, np.integer)):
        raise TypeError("hessian takes one argnum")

    def h(*args, **kwargs):
        a = int(argnums) % len(args)
        fn, args = _bind(f, args, kwargs)       # defaults, keywords, methods, partials
        _refuse_dicts("hessian", fn, args)
        if backends.get(target).native_byte_order:
            args = tuple(to_native(a) for a in args)
        x = args[a]
        if isinstance(x, np.ndarray) and x.ndim != 1:
            raise TypeMismatch("hessian: the argument must be a float or a 1-D array")
        slot = _second_order(fn, args, a, target)
        if isinstance(sparsity, str):
            from . import sparse
            if sparsity != sparse.DETECT:
                raise ValueError(f"sparsity={sparsity!r}: give a pattern or 'detect'")
            n = int(np.size(x))

            def dense(b):
                return np.reshape(_run_compiled(slot, 0, _full_args(fn, b)), (n, n))

            def product(v):
                w = v.astype(x.dtype) if isinstance(x, np.ndarray) else float(v[0])
                return _run_compiled(slot, 1, _full_args(fn, args) + (w,))
            return sparse.detected((unwrap(fn), a, sparse._shapes(args), target, "hessian"),
                                   args, a, (n, n), dense, lambda P: hessian(
                                       fn, a, target=target, sparsity=P)(*args), product)
        if sparsity is not None:
            from . import sparse
            full = _full_args(fn, args)
            if isinstance(x, np.ndarray):
                many = None
                if slot[2] is not None:
                    # every colour's product from one vector pass (JAC_CHUNK per pass)
                    def many(V):
                        return _run_compiled(slot, 2, full + (np.ascontiguousarray(V, x.dtype),))
                return sparse.hessian(lambda v: _run_compiled(slot, 1, full + (v.astype(x.dtype),)),
                                      x.size, sparsity, many, JAC_CHUNK)
            return sparse.hessian(lambda v: np.atleast_1d(_run_compiled(slot, 1, full + (float(v[0]),))),
                                  1, sparsity)
        return _run_compiled(slot, 0, _full_args(fn, args))
    h.__name__ = h.__qualname__ = f"hessian_{getattr(unwrap(f), '__name__', 'f')}"
    return make_object(h, h, h.__doc__,
                       _zyg_recipe=("hessian", f, {"argnums": argnums, "target": target,
                                                   "sparsity": sparsity}))


def _derivative_source(G: Callable, args: Sequence[Any]) -> Callable:
    """A plain Python function (generated source) computing the zyg transform ``G`` at
    arguments of these kinds, which zyg can transform again.

    ``G = grad(f, argnums=a)``: the recording primal and the adjoint of ``f``;
    ``G = grad(H, argnums=b)`` for a transform ``H``: the forward mode of ``H``'s source
    with the unit tangent on argument ``b`` (a float).
    """
    spec = G._zyg
    if spec.mode != "grad" or not isinstance(spec.argnums, (int, np.integer)):
        raise TypeMismatch("nested derivatives: the inner transform must be zyg.grad with one "
                           "argnum (a scalar function's gradient)")
    a = int(spec.argnums) % len(args)
    if hasattr(spec.f, "_zyg"):
        inner = _derivative_source(spec.f, args)
        if not isinstance(args[a], (float, np.floating)):
            raise TypeMismatch("nested derivatives of order 3 and more are taken w.r.t. float "
                               "arguments")
        return _jvp_source(inner, _full_args(spec.f, args), a)
    return _grad_source(spec.f, args, a)


_JVP_SOURCES: Dict[Any, Callable] = {}


def _jvp_source(fn: Callable, args: Sequence[Any], b: int) -> Callable:
    """A plain Python function computing d fn / d args[b] (a float) by forward mode."""
    ir = ssa_of(fn)
    kinds = _kinds(args, ir.name)
    key = (fn, tuple(kinds), b, ir.reads)
    out = _JVP_SOURCES.get(key)
    if out is not None:
        return out
    with LOAD_LOCK:
        out = _JVP_SOURCES.get(key)
        if out is None:
            out = _JVP_SOURCES[key] = _build_jvp_source(ir, kinds, b)
    return out


def _build_jvp_source(ir, kinds, b: int) -> Callable:
    from .ssa.emit import var_name
    python = backends.get("python")
    p = plan(ir, kinds, [b], python)
    stem = f"{_ident(ir.name)}_t{b}"
    prog = ForwardMode().emit(p, stem + "_jvp")
    code, fwd = prog.code, prog.info
    params = [var_name(q) for q in p.fn.params]
    tans = [("1.0" if i == b else "0.0") for i, q in enumerate(p.fn.params) if fwd.active(q)]
    code.add(0, "")
    code.put(0, Def(stem, tuple(params)))
    code.add(1, f'"""d {ir.name} / d argument {b} (forward mode), for nested derivatives."""')
    code.add(1, f"return {stem}_jvp({', '.join(params + tans)})[1]")
    prog.names, prog.module = [stem], stem
    return load(prog, python).fns[0]


def _nested(G: Callable, argnums, target: str, mode: str, doc: str) -> Callable:
    """``grad(G)`` of a zyg transform ``G``: forward mode over ``G``'s generated source
    (one pass per float argument, one per element of an array argument)."""
    value = mode == "value_and_grad"

    binder = getattr(G, "_zyg_binder", None)

    def g(*args, **kwargs):
        if binder is not None:
            # the innermost function's defaults, keywords, method or partial (entry.py)
            args = binder.bind(args, kwargs, g.__name__)
        elif kwargs:
            raise TypeError(f"{g.__name__}() takes no keyword arguments")
        nums, single = _normalise_argnums(argnums, len(args))     # as grad: of the bound call
        src = _derivative_source(G, args)
        nuser = len(args)
        args = _full_args(G, args)         # the innermost function's hidden arguments too
        none = [None] * len(args)
        y = None
        outs = []
        for b in nums:
            x = args[b]
            if isinstance(x, np.ndarray) and x.dtype.kind == "f":
                d = np.empty(x.shape, x.dtype)
                e = np.zeros_like(x)
                for idx in np.ndindex(x.shape):
                    e[idx] = 1.0
                    t = list(none)
                    t[b] = e
                    y, dt = jvp(src, args, tuple(t), target=target)
                    if np.ndim(dt) != 0:
                        raise TypeMismatch("grad of a transform whose value is an array: the inner "
                                           "gradient must be w.r.t. a float for a nested grad")
                    d[idx] = dt
                    e[idx] = 0.0
                outs.append(d)
            elif isinstance(x, (float, np.floating)):
                t = list(none)
                t[b] = 1.0
                y, dy = jvp(src, args, tuple(t), target=target)
                outs.append(dy)
            else:
                outs.append(None)
        if np.ndim(y) != 0 and y is not None:
            raise TypeMismatch("grad of a transform whose value is an array: the inner gradient "
                               "must be w.r.t. a float for a nested grad")
        if y is None and value:
            y = src(*args)
        del nuser
        res = outs[0] if single else tuple(outs)
        return (y, res) if value else res
    g.__name__ = g.__qualname__ = f"grad_{getattr(G, '__name__', 'f')}"
    spec = _Specializer.__new__(_Specializer)
    spec.f, spec.argnums, spec.mode, spec.target = G, argnums, mode, target
    return make_object(g, g, doc, _zyg=spec, _zyg_binder=binder)


JAC_CHUNK = 32      # lanes per vector forward pass of jacobian(mode="fwd") and sparse colourings


def _detected_jacobian(fn, args, i, sparsity, mode, target):
    """``jacobian(f, sparsity="detect")``: the pattern found by zyg (zyg/sparse.py)."""
    from . import sparse
    if sparsity != sparse.DETECT:
        raise ValueError(f"sparsity={sparsity!r}: give a pattern or 'detect'")
    args = tuple(args)
    dense_jac = jacobian(fn, argnums=i, mode=mode, target=target)
    n_in = int(np.size(args[i]))

    def dense(a):
        M = np.asarray(dense_jac(*a))
        return M.reshape(-1, n_in)
    first = sparse._DETECTED.get((unwrap(fn), i, sparse._shapes(args), target, "jacobian"))
    n_out = first.shape[0] if first is not None else dense(args).shape[0]

    def product(v):
        t = [None] * len(args)
        t[i] = v.reshape(np.shape(args[i])).astype(np.asarray(args[i]).dtype) if np.shape(args[i]) \
            else float(v[0])
        return jvp(fn, args, tuple(t), target=target)[1]
    return sparse.detected((unwrap(fn), i, sparse._shapes(args), target, "jacobian"), args, i,
                           (n_out, n_in), dense,
                           lambda P: sparse.jacobian(fn, args, i, P, mode, target, jvp, _pullback,
                                                     chunk=JAC_CHUNK),
                           product)


def jacobian(f: Callable, argnums: int = 0, *, mode: str = "auto", target: str = "cpu",
             sparsity: Any = None) -> Callable:
    """``jacobian(f)(*args)``: the Jacobian of ``f`` w.r.t. argument ``argnums``.

    For a result of shape ``S`` and an argument of shape ``A`` (a float: ``()``) the
    Jacobian has shape ``S + A``, as ``jax.jacobian``.  ``mode="fwd"`` runs the vector
    forward mode (``jvp(..., batched=True)``) with one lane per element of the argument,
    ``JAC_CHUNK`` (32) lanes per pass; ``mode="rev"`` one ``pullback`` per element of the
    result; ``"auto"`` picks the one with fewer passes (forward on ties).

    ``sparsity``: the pattern of the Jacobian as a ``prod(S) x prod(A)`` scipy.sparse
    matrix or boolean array; then the result is a ``scipy.sparse.csr_matrix`` computed
    with one pass per colour of structurally orthogonal columns (or rows) (``zyg/sparse.py``).
    ``sparsity="detect"``: the pattern found by zyg and kept, every result checked by one
    product along a random direction (``zyg.sparse.detected``).
    """
    if mode not in ("auto", "fwd", "rev"):
        raise ValueError("mode must be 'auto', 'fwd' or 'rev'")
    backends.host(target, "jacobian")
    if not isinstance(argnums, (int, np.integer)):
        raise TypeError("jacobian takes one argnum")

    def jac(*args, **kwargs):
        i = int(argnums) % len(args)
        fn, args = _bind(f, args, kwargs)       # defaults, keywords, methods, partials
        _refuse_dicts("jacobian", fn, args, only=i)
        x = args[i]
        if not (isinstance(x, (float, np.floating)) or
                isinstance(x, np.ndarray) and x.dtype.kind == "f"):
            raise TypeMismatch(f"jacobian: argument {i} must be a float or a float array")
        if isinstance(sparsity, str):
            return _detected_jacobian(fn, args, i, sparsity, mode, target)
        if sparsity is not None:
            from . import sparse
            return sparse.jacobian(fn, args, i, sparsity, mode, target, jvp, _pullback,
                                   chunk=JAC_CHUNK)
        xs = np.shape(x)
        n_in = int(np.prod(xs)) if xs else 1
        dt = np.asarray(x).dtype

        def columns(c0: int):
            # vector forward mode: the unit tangents of JAC_CHUNK columns in one pass
            K = min(JAC_CHUNK, n_in - c0)
            E = np.zeros((K, n_in), dt)
            E[np.arange(K), np.arange(c0, c0 + K)] = 1.0
            t = [None] * len(args)
            t[i] = E.reshape((K,) + xs) if xs else E[:, 0].astype(np.float64)
            y, ty = _jvp_batched(fn, tuple(args), tuple(t), target, lanes_if_scalar=True)
            if isinstance(y, tuple):
                raise TypeMismatch("jacobian: tuple results are not supported; take one entry")
            return y, np.reshape(ty, (K, -1)).T
        # the result's shape comes from the first compiled pass (the function is never run
        # as plain Python to learn it: seconds on large models)
        first = None
        pb = None
        if mode == "rev" or n_in == 0:
            pb = _pullback(fn, *[a.copy() if isinstance(a, np.ndarray) else a for a in args],
                           target=target)
            y0 = pb[0]
        else:
            first = columns(0)
            y0 = first[0]
        if isinstance(y0, tuple):
            raise TypeMismatch("jacobian: tuple results are not supported; take one entry")
        ys = np.shape(y0)
        n_out = int(np.prod(ys)) if ys else 1
        m = mode if mode != "auto" else ("fwd" if n_in <= n_out else "rev")
        J = np.empty((n_out, n_in))
        if m == "fwd":
            for c0 in range(0, n_in, JAC_CHUNK):
                _, block = first if c0 == 0 and first is not None else columns(c0)
                J[:, c0:c0 + block.shape[1]] = block
        else:
            if pb is None:
                pb = _pullback(fn, *[a.copy() if isinstance(a, np.ndarray) else a for a in args],
                               target=target)
            y, back = pb
            # one primal and its tape for every row, where the function writes into no array
            replay = getattr(back, "_zyg_replayable", False)
            for r in range(n_out):
                if ys:
                    dy = np.zeros(ys, np.asarray(y).dtype)
                    dy.flat[r] = 1.0
                else:
                    dy = 1.0
                if r and not replay:
                    y, back = _pullback(fn, *[a.copy() if isinstance(a, np.ndarray) else a
                                            for a in args], target=target)
                g = back(dy)[i]
                J[r, :] = 0.0 if g is None else np.ravel(g)
        return J.reshape(ys + xs)
    jac.__name__ = jac.__qualname__ = f"jacobian_{getattr(unwrap(f), '__name__', 'f')}"
    return make_object(jac, jac, jac.__doc__, _zyg_recipe=(
        "jacobian", f, {"argnums": argnums, "mode": mode, "target": target, "sparsity": sparsity}))
