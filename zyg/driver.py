"""The driver: specialisation, compilation and the caches of transformed functions.

Every transformed function (``zyg.grad``, ``value_and_grad``, ``pullback``, and the nested
transforms: a ``zyg.grad`` call inside differentiated code, a checkpointed loop, a
recursive call) goes through this module.  It

* builds the SSA of a function once (``ssa_of``, the front end's cached entry point),
* works out the kinds of the arguments of a call (``_kinds``) and keys a cache on them,
* for every new signature runs the activity analysis and the reverse transform
  (``zyg.pullbacks.transform``), hands the generated module to the back end
  (``zyg.compile``) and caches the compiled entry,
* wraps entries in the guards of ``zyg.safety`` and the dispatch on static (function)
  and array arguments.

``zyg.api`` builds the public functions on top of it; the nested transforms call it
directly (they sit above it: the transforms reach them through the hooks of
``zyg.ssa.hooks`` and ``zyg.rules.higher``).
"""
from __future__ import annotations

import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import dicts as _dicts, safety
from .caches import on_invalidate
from . import backends
from . import tiered
from .build import FirstCall as _FirstCall, Fused, Split, build, compiled_now as _fast, load as _load
from .compile import LOAD_LOCK
from .entry import adapt
from .errors import TypeMismatch
from .numerics import DEFERRED as _DEFERRED, ZeroCotangentRetry, raise_deferred as _raise_deferred
from .pullbacks.transform import plan
from .ssa.analysis import differentiable, is_array, is_tuple, kind_of_value
from .ssa.build import ssa_of
from .ssa.captured import hidden_kind_sig, make_caller
from .ssa.emit import Def, _ident
from .ssa.ir import Function
from .ssa.lower import unwrap
from .ssa.tuples import flatten_value, unflatten

_LIVE: "weakref.WeakSet[_Specializer]" = weakref.WeakSet()


@on_invalidate
def _invalidate_caches() -> None:
    """Forget compiled specialisations (called when a rule is registered)."""
    for s in list(_LIVE):
        s.cache.clear()
        s.tiers.clear()
    _GRAD_SOURCES.clear()
    tiered.forget()


def _with_hidden(ir: Function, args: Sequence[Any]) -> tuple:
    """``args`` followed by the current values of ``ir``'s hidden parameters (the arrays
    it reads from closures, globals and defaults), each checked like an argument."""
    if not ir.reads.hidden:
        return tuple(args)
    vals = ir.reads.values()
    for s, v in zip(ir.reads.hidden, vals):
        _check_arg(v, f"the array {s.name!r} that {ir.name} reads")
    return tuple(args) + vals


def _is_static(a: Any) -> bool:
    """Arguments passed as functions: inlined into the transformed code, not differentiated."""
    # None (an optional argument left at its default) is bound as a constant: ``x is None``
    return a is None or callable(a) and not isinstance(a, (np.ndarray, np.generic, type))


_ALLOWED = ("bool", "int", "float", "complex")
_ARRAY_DTYPES = ("f8", "f4", "c16", "i8", "i4", "b1")


def _kinds(args: Sequence[Any], fname: str) -> List[str]:
    for i, a in enumerate(args):
        _check_arg(a, f"argument {i} of {fname}")
    return [kind_of_value(a) for a in args]


def has_foreign(args: Sequence[Any]) -> bool:
    """Whether an array in ``args`` (at any depth in tuples) is in non-native byte order,
    which numba does not compile."""
    for a in args:
        if isinstance(a, np.ndarray):
            if not a.dtype.isnative:
                return True
        elif isinstance(a, tuple) and has_foreign(a):
            return True
    return False


def to_native(v: Any) -> Any:
    """``v`` with every non-native byte order array replaced by a native copy (the cpu
    target's calls with such arrays; the function must not write into them, see
    ``safety.Guard.check_writable``)."""
    if isinstance(v, np.ndarray):
        return v if v.dtype.isnative else v.astype(v.dtype.newbyteorder("="))
    if isinstance(v, tuple):
        vals = [to_native(x) for x in v]
        return tuple(vals) if type(v) is tuple else type(v)(*vals)
    return v


def _native_calls(entry: Callable) -> Callable:
    """``entry`` called with native copies of byte-swapped arrays."""
    def call(*args):
        return entry(*[to_native(a) for a in args])
    call.compiled = getattr(entry, "compiled", entry)
    return call


def _check_arg(a: Any, what: str) -> None:
    if isinstance(a, tuple):
        # tuples and namedtuples: their elements are checked (the gradient is a tuple)
        for j, x in enumerate(a):
            _check_arg(x, f"{what}[{j}]")
        return
    k = kind_of_value(a)
    if isinstance(a, np.ndarray):
        if a.dtype.str[1:] not in _ARRAY_DTYPES or not 1 <= a.ndim <= 3:
            raise TypeMismatch(
                f"{what} is a {a.ndim}-D {a.dtype} array; zyg differentiates "
                f"float64, float32 and complex128 arrays of 1 to 3 dimensions (and reads int and "
                f"bool arrays)")
        return
    if k not in _ALLOWED:
        raise TypeMismatch(
            f"{what} is a {type(a).__name__}; this version of zyg "
            f"differentiates functions of float, complex, int and bool scalars, numpy "
            f"arrays, and tuples and namedtuples of them")


def _normalise_argnums(argnums: Union[int, Sequence[int]], nargs: int) -> Tuple[List[int], bool]:
    single = isinstance(argnums, (int, np.integer))
    nums = [int(argnums)] if single else [int(a) for a in argnums]
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums {a} out of range for a function of {nargs} arguments")
        out.append(a % nargs)
    return out, single


class _Specializer:
    """Builds and caches compiled code per argument-type signature."""

    def __init__(self, f: Callable, argnums, target: str, mode: str,
                 statics: Optional[Dict[int, Any]] = None):
        self.statics = statics
        backends.host(target, mode)      # ValueError for an unknown or a device target
        self.f = f
        self.argnums = argnums
        self.target = target
        self.mode = mode
        self.cache: Dict[Tuple[type, ...], Callable] = {}
        # background builds of tiered first calls, by argument signature (zyg/tiered.py)
        self.tiers: Dict[Any, Any] = {}
        self._python: Optional["_Specializer"] = None
        self.name = _ident(getattr(unwrap(f), "__name__", "f").replace("<lambda>", "lambda"))
        with LOAD_LOCK:         # a WeakSet: not iterated while another thread adds to it
            _LIVE.add(self)

    @property
    def backend(self):
        """The target's back end, looked up when code is built (a back end registered
        under the name later replaces it; zyg.backends.register clears the caches)."""
        return backends.get(self.target)

    def python_twin(self) -> "_Specializer":
        """The same function's specialiser on the python target (tiered first calls)."""
        if self._python is None:
            self._python = _Specializer(self.f, self.argnums, "python", self.mode, self.statics)
        return self._python

    def cached(self, args: Sequence[Any]) -> Optional[Callable]:
        """What a call with ``args`` finds in the cache (None: the slow path)."""
        return self.cache.get(_type_key(args))

    def install(self, args: Sequence[Any], entry: Callable) -> None:
        """Put ``entry``, built by ``self.build_entry(args)`` elsewhere (a tiered first
        call's background build, zyg/tiered.py), where :meth:`build` would have put it.
        Under the load lock."""
        key = _type_key(args)
        if any(isinstance(a, (np.ndarray, tuple)) for a in args):
            disp = self.cache.get(key)
            if not isinstance(disp, _ArrayDispatch):
                disp = self.cache[key] = _ArrayDispatch(self)
            disp.entries.setdefault(disp.key(args), entry)
        else:
            self.cache.setdefault(key, entry)

    def build(self, args: Sequence[Any]) -> Callable:
        # first calls from several threads build one at a time (calls of built code do not lock)
        with LOAD_LOCK:
            key = _type_key(args)
            got = self.cache.get(key)
            if got is not None and not isinstance(got, (_StaticDispatch, _ArrayDispatch)):
                return got
            self.backend.prepare()
            return self._build(args, key)

    def _build(self, args: Sequence[Any], key) -> Callable:
        if self.statics is None and any(_is_static(a) for a in args):
            disp = self.cache.get(key)
            if not isinstance(disp, _StaticDispatch):
                disp = self.cache[key] = _StaticDispatch(self)
            disp.entry_for(args)
            return disp
        if any(isinstance(a, (np.ndarray, tuple)) for a in args):
            disp = self.cache.get(key)
            if not isinstance(disp, _ArrayDispatch):
                disp = self.cache[key] = _ArrayDispatch(self)
            disp.entry_for(args)
            return disp
        entry = self.build_entry(args)
        self.cache[key] = entry
        return entry

    def build_entry(self, args: Sequence[Any]) -> Callable:
        ir = ssa_of(self.f, self.statics)
        if len(args) != ir.nargs:
            raise TypeError(f"{ir.name}() takes {ir.nargs} positional arguments "
                            f"but {len(args)} were given")
        kinds = _kinds(args, ir.name)
        # numba compiles arrays in the machine's byte order only: the cpu target runs on
        # native copies of byte-swapped arrays (refused where the function writes into one)
        foreign = self.backend.native_byte_order and has_foreign(args)
        full = _with_hidden(ir, args)
        self._orig = full if foreign else None
        if foreign:
            full = tuple(to_native(a) for a in full)
        kinds += [kind_of_value(a) for a in full[len(args):]]
        self._args = full
        try:
            if self.mode == "pullback":
                entry = self._build_pullback(ir, kinds)
            else:
                entry = self._build_grad(ir, kinds)
        finally:
            self._args = self._orig = None
        if ir.reads:
            entry = _guarded(entry, ir.reads, hidden_kind_sig(full[len(args):]), self)
        if foreign:
            entry = _native_calls(entry)
        return entry

    def _refuse_unwritable(self, p, ir: Function) -> None:
        """Before compiling: a clear error, at the line of the write, when the function
        writes into a read-only or (on cpu) byte-swapped argument array."""
        g = safety.for_plan(self.mode, p, ir)
        if g is None or not g.written:
            return
        orig = self._orig if self._orig is not None else self._args
        if p.flat is not None and self._orig is not None:
            orig = _flatten_args(orig, p.flat.param_trees)
        g.check_writable(orig, native=self.backend.native_byte_order)

    def rebuild(self, args: Sequence[Any]) -> Any:
        """A guard failed (a helper, global or captured value changed): forget every
        specialisation of this function, lower it again and call it."""
        with LOAD_LOCK:         # not while another thread builds into the cache
            self.cache.clear()
            entry = self.build(args)
        return entry(*args)

    def _build_grad(self, ir: Function, kinds: List[str]) -> Callable:
        wrt, single = _normalise_argnums(self.argnums, ir.nargs)
        value = self.mode == "value_and_grad"
        # grad runs the value-and-gradient code and drops the value: the generated module is
        # the same text for both, so zyg.grad(f) and zyg.value_and_grad(f) compile it once
        # (the value costs nothing: the primal computes it anyway)
        p = plan(ir, kinds, wrt, self.backend)
        if p.ret_kind == "complex":
            raise TypeMismatch(f"{ir.name} ({ir.filename}:{ir.firstlineno}) returns a complex number; grad "
                               "and value_and_grad need a real output (as JAX's grad without "
                               "holomorphic=True)",
                               hint="differentiate a real loss such as abs(z) ** 2 or z.real, or use "
                                    "zyg.pullback(f, x) and pass a complex dy to back (docs/complex.md)")
        if is_array(p.ret_kind) or is_tuple(p.ret_kind):
            what = "an array" if is_array(p.ret_kind) else "a tuple"
            raise TypeMismatch(f"{ir.name} ({ir.filename}:{ir.firstlineno}) returns {what}; grad and "
                               "value_and_grad need a scalar output",
                               hint="reduce it (np.sum, a loss), or use zyg.pullback(f, x) and pass an "
                                    "array dy to back")
        fname = f"{self.name}_vg"
        if p.flat is not None:
            self._args = tuple(_flatten_args(self._args, p.flat.param_trees))
        self._refuse_unwritable(p, ir)
        backend = self.backend

        def make(zero_guards: bool, args):
            name = fname if not zero_guards else fname + "_z"
            built = build(Fused(value=True, zero_guards=zero_guards), p, name)
            diffable, stacks = built.info.diffable, built.info.stacks
            fn = built.fns[-1]
            slow = _lazy(lambda a: make(True, a)) if built.info.retry else None
            if stacks:
                if backend.compiled:
                    fn = built.checked(-1, ir.name).compile_for(
                        tuple(args) + tuple(np.empty(1, _dtype(dt)) for _, dt in stacks))
                return _pooled(fn, stacks, value, len(args), slow), diffable
            fn = _fast(built.checked(-1, ir.name), args)
            if not value:
                fn = _drop_value(fn, len(args))
            if slow is not None:
                fn = _with_zero_guards(fn, slow)
            return fn, diffable

        # zero-cotangent tests inside loops cost up to 1.6x on tight loops; the gradient runs
        # without them and, in the rare case that a gradient comes out nan (which is when
        # leaving them out can matter), again with them, compiled then (docs/numerics.md).
        # Not on python: speed matters less there than numpy's warnings for the 0 * inf
        fn, diffable = make(backend.zero_guards_first, self._args)
        fn = safety.guard_grad(fn, self.mode, p, ir)
        if p.flat is not None and any(t is not None for t in p.flat.param_trees):
            # tuple parameters: flattened in, gradients regrouped (a tuple only among the
            # function's values, such as ``X.shape``, leaves the parameters as they are)
            return _flat_entry(fn, p.flat, wrt, diffable, single, value)
        if single:
            if wrt[0] in diffable:
                return fn
            if value:
                return lambda *a: (fn(*a)[0], None)
            return lambda *a: None
        # tuple argnums: None for non-differentiable entries
        slots = [diffable.index(i) if i in diffable else None for i in wrt]
        n = len(diffable)

        def post(g):
            g = g if isinstance(g, tuple) or n != 1 else (g,)
            return tuple(None if s is None else g[s] for s in slots)
        if value:
            return lambda *a: _vg_post(fn(*a), post)
        return lambda *a: post(fn(*a))

    def _build_pullback(self, ir: Function, kinds: List[str]) -> Callable:
        wrt = list(range(ir.nargs))      # not the hidden parameters
        nhidden = len(ir.params) - ir.nargs
        p = plan(ir, kinds, wrt, self.backend)
        flat = p.flat
        if flat is not None:
            self._args = tuple(_flatten_args(self._args, flat.param_trees))
            kinds = [flat.kinds[q.id] for q in p.fn.params]
        self._refuse_unwritable(p, ir)
        stem = f"{self.name}_pullback"
        built = build(Split(), p, stem)
        prim = _fast(built.checked(0, ir.name), self._args)
        adj = built.checked(1, ir.name)
        mutates = built.info.mutates
        guard = safety.for_plan(self.mode, p, ir)
        slots = [i for i, k in enumerate(kinds[:len(kinds) - nhidden]) if differentiable(k)]
        nargs = len(kinds)
        nuser = ir.nargs
        ret_array = is_array(p.ret_kind)
        ret_complex = p.ret_kind == "complex"

        adj_state = [adj]

        def run(*args):
            if flat is not None:
                args = _flatten_args(args, flat.param_trees)
            y, tp, st = guard.primal(prim, args) if guard else (*prim(*args), None)
            calls = [0]

            def back(dy=1.0):
                """Cotangents of every positional argument (None for ints and bools)."""
                if flat is not None and flat.ret_tree is not None:
                    dyv = _flat_cotangent(dy, y, flat.ret_tree, ir.name)
                elif ret_array:
                    dyv = np.zeros_like(y) if dy is None else np.asarray(dy, dtype=y.dtype)
                    if dyv.shape != y.shape:
                        raise TypeMismatch(f"back() of {ir.name}: dy has shape {dyv.shape}, the output "
                                           f"has shape {y.shape}")
                else:
                    if dy is None:
                        dy = 0.0
                    dyv = complex(dy) if ret_complex else float(dy)
                if mutates and calls[0]:
                    raise TypeMismatch(f"back() of {ir.name} was already called: {ir.name} writes into "
                                       "arrays and the first back() rewound them",
                                       hint="call zyg.pullback again for another cotangent")
                calls[0] += 1
                a = adj_state[0]
                if isinstance(a, _FirstCall):
                    a = adj_state[0] = a.compile_for(tuple(tp) + (dyv,))
                gs = guard.back(a, tp, dyv, st) if guard else a(*tp, dyv)
                out: List[Any] = [None] * nargs
                for s, g in zip(slots, gs):
                    out[s] = g if isinstance(g, np.ndarray) else \
                        complex(g) if kinds[s] == "complex" else float(g)
                if flat is not None:
                    return _regroup(out, flat.param_trees)[:nuser]
                return tuple(out[:nuser])
            # back may be called again (one primal, many cotangents: zyg.jacobian's rows)
            # unless the function writes into arrays, which its first call rewinds
            back._zyg_replayable = not mutates
            if flat is not None and flat.ret_tree is not None:
                return unflatten(flat.ret_tree, list(y))[0], back
            return y, back
        return run


def _lazy(make: Callable) -> Callable:
    """``slow(args)``: calls ``make(args)[0]``, built on the first call only (under the
    load lock: two threads may want it at once)."""
    built: List[Callable] = []

    def slow(args):
        if not built:
            with LOAD_LOCK:
                if not built:
                    built.append(make(args)[0])
        return built[0](*args)
    return slow


def _with_zero_guards(fast: Callable, slow: Callable) -> Callable:
    """``fast`` (a fused gradient without in-loop zero-cotangent tests), falling back to
    ``slow(args)``, the variant with them, when ``fast`` raises ZeroCotangentRetry."""
    def run(*args):
        try:
            return fast(*args)
        except ZeroCotangentRetry:
            return slow(args)
    run.compiled = getattr(fast, "compiled", fast)
    return run


def _guarded(fn, reads, sig, spec) -> Callable:
    """A specialisation of a function that reads values besides its arguments: checks
    the guards of what was compiled in, passes the captured arrays' current values as
    hidden trailing arguments, and rebuilds when either no longer matches."""
    def slow(args):
        return spec.rebuild(args)
    call = make_caller(reads, fn, sig, slow)
    call.compiled = getattr(fn, "compiled", fn)    # what runs behind the guards
    return call


def _tierable(target: str, mode: str) -> bool:
    """Whether first calls of this target and mode may be tiered (zyg/tiered.py)."""
    return target == "cpu" and mode in ("grad", "value_and_grad")


def _first_call(spec: _Specializer, args: tuple, tiers: bool) -> Any:
    """A call that found no compiled code for its types: tiered where allowed and on,
    else built (and compiled) first."""
    if tiers and tiered.enabled():
        r = tiered.call(spec, args)
        if r is not tiered.NO:
            return r
    return spec.build(args)(*args)


class _StaticDispatch:
    """Cache entry for calls with function arguments: one specialiser per tuple of
    functions passed (they are inlined), called with the other arguments."""

    __slots__ = ("spec", "entries")

    def __init__(self, spec):
        self.spec = spec
        self.entries: Dict[Any, Callable] = {}

    def entry_for(self, args) -> Callable:
        statics = {i: a for i, a in enumerate(args) if _is_static(a)}
        k = tuple(statics.items())
        e = self.entries.get(k)
        if e is None:
            with LOAD_LOCK:
                e = self.entries.get(k)
                if e is None:
                    e = self.entries[k] = self._make(statics, len(args))
        return e

    def _make(self, statics: Dict[int, Any], nargs: int) -> Callable:
        outer = self.spec
        dyn = [i for i in range(nargs) if i not in statics]
        pos = {i: j for j, i in enumerate(dyn)}
        mode = outer.mode
        if mode == "pullback":
            nums, single = [], False
            sub_argnums = 0
        else:
            nums, single = _normalise_argnums(outer.argnums, nargs)
            kept = [pos[i] for i in nums if i in pos]
            sub_argnums = tuple(kept) if kept else (0 if dyn else ())
        sub = _Specializer(outer.f, sub_argnums, outer.target, mode, statics)
        # arguments left at None may be tiered (zyg/tiered.py); functions passed are not
        tiers = _tierable(outer.target, mode) and all(v is None for v in statics.values())

        def call(*d):
            fn = sub.cache.get(_type_key(d))
            if fn is None:
                return _first_call(sub, d, tiers)
            return fn(*d)
        value = mode == "value_and_grad"

        def grads(g):
            per = dict(zip([i for i in nums if i in pos], g if nums and any(i in pos for i in nums)
                           else ()))
            out = tuple(per.get(i) for i in nums)
            return out[0] if single else out
        if mode == "pullback":
            def run(*a):
                y, back = call(*[a[i] for i in dyn])

                def back2(dy=1.0):
                    gs = back(dy)
                    out = [None] * nargs
                    for i, g in zip(dyn, gs):
                        out[i] = g
                    return tuple(out)
                return y, back2
            return run
        if value:
            return lambda *a: (lambda r: (r[0], grads(r[1])))(call(*[a[i] for i in dyn]))
        return lambda *a: grads(call(*[a[i] for i in dyn]))

    def __call__(self, *args):
        statics = tuple((i, a) for i, a in enumerate(args) if _is_static(a))
        e = self.entries.get(statics)
        if e is None:
            e = self.entry_for(args)
        return e(*args)


class _ArrayDispatch:
    """Cache entry for argument tuples with arrays: the generated code depends on each
    array's dtype and number of dimensions, which ``type()`` does not show."""

    __slots__ = ("spec", "entries")

    def __init__(self, spec):
        self.spec = spec
        self.entries: Dict[Any, Callable] = {}

    @staticmethod
    def key(args) -> Any:
        # the dtype itself, not its number: a byte-swapped array gets its own entry
        return tuple((a.dtype, a.ndim) if isinstance(a, np.ndarray)
                     else (kind_of_value(a), has_foreign(a)) if isinstance(a, tuple) else type(a)
                     for a in args)

    def entry_for(self, args) -> Callable:
        k = self.key(args)
        e = self.entries.get(k)
        if e is None:
            with LOAD_LOCK:
                e = self.entries.get(k)
                if e is None:
                    e = self.entries[k] = self.spec.build_entry(args)
        return e

    def __call__(self, *args):
        e = self.entries.get(self.key(args))
        if e is None:
            e = self.entry_for(args)
        return e(*args)


def _flatten_args(args, trees) -> List[Any]:
    out: List[Any] = []
    for a, t in zip(args, trees):
        if t is None:
            out.append(a)
        else:
            out += flatten_value(a)
    return out


def _regroup(leaf_vals: List[Any], trees) -> tuple:
    """Per-parameter values (tuples rebuilt, namedtuples of their class) from per-leaf ones."""
    out, pos = [], 0
    for t in trees:
        v, pos = unflatten(t, leaf_vals, pos)
        out.append(v)
    return tuple(out)


def _flat_entry(fn, flat, wrt: List[int], diffable: List[int], single: bool, value: bool):
    """The gradient entry for functions with tuple arguments: flatten in, regroup out."""
    trees = flat.param_trees
    nleaf = sum(len(ix) for ix in flat.leaf_of)
    n = len(diffable)

    def grads(g):
        g = g if isinstance(g, tuple) and n != 1 else (g,)
        vals: List[Any] = [None] * nleaf
        for j, x in zip(diffable, g):
            vals[j] = x
        per = _regroup(vals, trees)
        return per[wrt[0]] if single else tuple(per[i] for i in wrt)
    if value:
        def vg(*a):
            r = fn(*_flatten_args(a, trees))
            return r[0], grads(r[1])
        return vg
    return lambda *a: grads(fn(*_flatten_args(a, trees)))


def _flat_cotangent(dy, y, shape, fname: str) -> tuple:
    """The leaves of a tuple cotangent ``dy`` for the flat output ``y`` (None: zero)."""
    if dy is None or (isinstance(dy, float) and dy == 1.0 and shape is not None):
        dy = None
    leaves: List[Any] = []

    def walk(d, sh, pos):
        if sh is None:
            yv = y[pos]
            if d is None:
                leaves.append(np.zeros_like(yv) if isinstance(yv, np.ndarray) else type(yv)(0))
            elif isinstance(yv, np.ndarray):
                dv = np.asarray(d, dtype=yv.dtype)
                if dv.shape != yv.shape:
                    raise TypeMismatch(f"back() of {fname}: a dy entry has shape {dv.shape}, the "
                                       f"output has shape {yv.shape}")
                leaves.append(dv)
            else:
                leaves.append(complex(d) if isinstance(yv, complex) else float(d))
            return pos + 1
        subs = sh[2]
        if d is not None and (not isinstance(d, tuple) or len(d) != len(subs)):
            raise TypeMismatch(f"back() of {fname}: the output is a tuple of {len(subs)} entries; "
                               f"dy must be a tuple of the same structure (None for a zero entry)")
        for k, s in enumerate(subs):
            pos = walk(None if d is None else d[k], s, pos)
        return pos
    walk(dy, shape, 0)
    return tuple(leaves)


def _dtype(dt: str):
    return getattr(np, dt.split(".")[-1])


def _pooled(compiled: Callable, stacks, value: bool, nargs: int,
            slow: Optional[Callable] = None) -> Callable:
    """``g(*args)``: a fused gradient ``compiled(*args, *buffers)`` whose tape buffers are
    kept between calls; with ``slow``, the variant to call when it raises
    ZeroCotangentRetry (``_with_zero_guards``).

    A pool (not a single slot) keeps this correct under recursion and threads: each call
    takes buffers from the pool or allocates small ones, and puts them back afterwards,
    replaced by the larger ones the call grew (``emit_fused`` returns ``None`` for a
    buffer that did not grow).  The wrapper is generated with ``nargs`` parameters: a
    ``*args`` wrapper costs more than a small gradient (sincos, Bessel)."""
    pool: list = []
    dts = [_dtype(dt) for _, dt in stacks]

    def fresh():
        return tuple(np.empty(64, d) for d in dts)

    def merge(old, grown):
        return tuple(o if n is None else n for o, n in zip(old, grown))

    params = ", ".join(f"a{i}" for i in range(nargs))
    call = f"_r = compiled({params}{', ' if nargs else ''}{', '.join(f'_b[{k}]' for k in range(len(dts)))})"
    if slow is not None:
        call = (f"try:\n        {call}\n    except Retry:\n"
                f"        return slow(({params}{',' if nargs == 1 else ''}))")
    grown = " or ".join(f"_r[{2 + k}] is not None" for k in range(len(dts)))
    src = (f"def g({params}):\n"
           f"    try:\n"
           f"        _b = pop()       # atomic: another thread may take the last one\n"
           f"    except IndexError:\n"
           f"        _b = fresh()\n"
           f"    {call}\n"
           f"    if {grown}:\n"
           f"        _b = merge(_b, _r[2:])\n"
           f"    append(_b)\n"
           f"    if deferred[0]:\n"
           f"        raise_deferred()     # Ctrl-C during the call (zyg/numerics.py)\n"
           f"    return {'(_r[0], _r[1])' if value else '_r[1]'}\n")
    ns = {"pop": pool.pop, "append": pool.append, "fresh": fresh, "merge": merge,
          "compiled": compiled, "slow": slow, "Retry": ZeroCotangentRetry,
          "deferred": _DEFERRED, "raise_deferred": _raise_deferred}
    exec(src, ns)
    g = ns["g"]
    g.compiled = compiled
    g.pool = pool
    return g


def _drop_value(fn: Callable, nargs: int) -> Callable:
    """``grad`` from the value-and-gradient code: the gradient part of its result (a
    wrapper of fixed arity: ~40 ns where ``*args`` costs ~120 ns)."""
    params = ", ".join(f"a{i}" for i in range(nargs))
    ns = {"fn": fn}
    exec(f"def g({params}):\n    return fn({params})[1]\n", ns)
    g = ns["g"]
    g.compiled = getattr(fn, "compiled", fn)
    return g


def _vg_post(r, post):
    return r[0], post(r[1])


def _type_key(args) -> Any:
    """Cache key of an argument tuple: the type of a single argument, else the tuple of types."""
    if len(args) == 1:
        return type(args[0])
    return tuple([type(a) for a in args])


def _fast_wrapper(pyf, cache, slow) -> Callable:
    """A Python wrapper of fixed arity: the type lookup costs ~50 ns instead of
    ~250 ns for ``tuple(map(type, args))`` on a ``*args`` wrapper."""
    code = getattr(pyf, "__code__", None)
    n = code.co_argcount if code is not None and not (code.co_flags & 0x0C) else None
    if n is None or n > 8 or pyf.__defaults__ or code.co_kwonlyargcount:
        def g(*args):
            fn = cache.get(_type_key(args))
            if fn is None:
                return slow(args)
            return fn(*args)
        return g
    names = list(code.co_varnames[:n])
    if any(nm in ("cache", "slow", "fn", "type", "r", "deferred", "raise_deferred") for nm in names):
        names = [f"a{i}" for i in range(n)]
    params = ", ".join(names)
    if n == 1:
        key = f"type({names[0]})"
    else:
        key = "(" + ", ".join(f"type({a})" for a in names) + ("," if n == 1 else "") + ")"
    src = (f"def g({params}):\n"
           f"    fn = cache.get({key})\n"
           f"    if fn is None:\n"
           f"        return slow(({params}{',' if n == 1 else ''}))\n"
           f"    r = fn({params})\n"
           f"    if deferred[0]:\n"
           f"        raise_deferred()\n"
           f"    return r\n")
    ns = {"cache": cache, "slow": slow, "deferred": _DEFERRED, "raise_deferred": _raise_deferred}
    exec(src, ns)
    return ns["g"]


def transform(f, argnums, target: str, mode: str, doc: str) -> Callable:
    """The callable ``grad(f)`` / ``value_and_grad(f)`` returns (``mode``): a dict lookup on
    the argument types, then the compiled specialisation (built on the first call)."""
    f, binder = adapt(f)
    spec = _Specializer(f, argnums, target, mode)
    cache = spec.cache

    tiers = _tierable(target, mode)

    def run(args):
        return _first_call(spec, args, tiers)

    def slow(args):
        if _dicts.has_dict(args):
            # dict arguments (zyg/dicts.py): never in the cache, so only these calls pay
            _dicts.check_records_not_wrt(unwrap(f), args, _normalise_argnums(argnums, len(args))[0])
            args = tuple(_dicts.to_tuples(a) for a in args)
            return _dicts.to_dicts(run(args))
        return run(args)
    g = _fast_wrapper(unwrap(f), cache, slow)
    if binder is not None:
        # defaults, keywords, a method's object or a partial's values (zyg/entry.py)
        g = binder.wrap(g, getattr(unwrap(f), "__name__", "f"))
    # not a transparent wrapper (no __wrapped__): zyg must not differentiate it as if it were f
    return make_object(g, unwrap(f) if binder is None else binder.fn, doc,
                       _zyg=spec, _zyg_binder=binder)   # binder: for grad of it (api._nested)


#: the function that pickles a :class:`ZygFunction` (``zyg.tasks.pickling`` registers it)
REDUCERS: List[Callable] = []


class ZygFunction:
    """What ``zyg.grad``, ``value_and_grad``, ``jacobian`` and ``hessian`` return: a
    callable object.

    Each one is the only instance of its own subclass, whose ``__call__`` is the generated
    fixed-arity wrapper (a staticmethod): a call costs one look-up of the type's
    ``__call__`` more than the plain function it used to be (about 50 ns, measured in
    docs/tasks.md), and the object has a ``__reduce__``, which a function cannot have
    (``pickle`` saves every function by its module and name, so a gradient could not be
    sent to another process).  ``_zyg_recipe``: ``(maker, f, options)``, how to make it
    again (``zyg.tasks.pickling``)."""

    __slots__ = ("__dict__", "__weakref__")

    def __reduce__(self):
        recipe = self.__dict__.get("_zyg_recipe")
        if recipe is None or not REDUCERS:
            from .errors import NotPicklable
            raise NotPicklable(f"{self!r} cannot be pickled: it was not made by zyg.grad, "
                               "value_and_grad, jacobian or hessian")
        return REDUCERS[0](self, recipe)

    def __get__(self, obj, cls=None):
        # as a function: a gradient stored on a class is a method of its instances
        return self if obj is None else types.MethodType(self, obj)

    @property
    def __signature__(self):
        import inspect
        return inspect.signature(type(self).__dict__["__call__"].__func__)

    def __repr__(self):
        recipe = self.__dict__.get("_zyg_recipe")
        what = recipe[0] if recipe else "transform"
        return f"<zyg {what} of {self.__dict__.get('__qualname__', '?')}>"


def make_object(fn: Callable, like: Any, doc: Optional[str], **attrs) -> ZygFunction:
    """A :class:`ZygFunction` calling ``fn``, named as ``like`` (the user's function)."""
    name = getattr(like, "__name__", None) or getattr(fn, "__name__", "f")
    cls = type(_ident(str(name).replace("<lambda>", "lambda")), (ZygFunction,),
               {"__slots__": (), "__call__": staticmethod(fn), "__doc__": doc,
                "__module__": __name__})
    obj = cls()
    d = obj.__dict__
    for a in ("__module__", "__name__", "__qualname__"):
        v = getattr(like, a, None)
        if v is not None:
            d[a] = v
    d.setdefault("__name__", name)
    d.setdefault("__qualname__", name)
    d["__doc__"] = doc
    d.update(attrs)
    return obj


class Back:
    """The ``back`` that ``zyg.pullback`` returns (``api.pullback``; the driver's own
    :func:`pullback`, which recursive calls use at every level, returns the plain function):
    calls the adjoint of one recorded call.  It holds that call's tape (and the arrays it
    rewinds), which lives in this process: pickling it raises
    :class:`~zyg.errors.NotPicklable`."""

    __slots__ = ("_fn", "_f")

    def __init__(self, fn: Callable, f: Any):
        self._fn = fn
        self._f = f

    @property
    def _name(self) -> str:
        return getattr(unwrap(self._f), "__name__", "f")

    def __call__(self, dy=1.0):
        return self._fn(dy)

    @property
    def __doc__(self):
        return self._fn.__doc__

    def __reduce__(self):
        from .errors import NotPicklable
        raise NotPicklable(
            f"the back function of zyg.pullback({self._name}, ...) holds the tape of one call "
            f"of {self._name} in this process's memory and cannot be pickled or sent to "
            "another process",
            hint=f"send {self._name} itself, or zyg.value_and_grad({self._name}) / "
                 f"zyg.grad({self._name}) (they pickle), and call zyg.pullback on the other side")


_PULLBACKS: Dict[Tuple[Any, str], _Specializer] = {}


def pullback(f: Callable, *args: Any, target: str = "cpu") -> Tuple[Any, Callable]:
    """Run ``f(*args)`` and return ``(y, back)``; ``back(dy)`` gives one cotangent per
    positional argument (None for ints and bools).  ``back`` may be called many times."""
    f, binder = adapt(f)
    if binder is not None:
        args = binder.bind(args, {}, getattr(unwrap(f), "__name__", "f"))
    key = (unwrap(f), target)
    spec = _PULLBACKS.get(key)
    if spec is None:
        with LOAD_LOCK:
            spec = _PULLBACKS.get(key)
            if spec is None:
                spec = _PULLBACKS[key] = _Specializer(f, 0, target, "pullback")
    if _dicts.has_dict(args):
        # dict arguments (zyg/dicts.py): their cotangents are dicts of the same keys
        args = tuple(_dicts.to_tuples(a) for a in args)
        y, back = spec.build(args)(*args)

        def back_dicts(dy=1.0):
            return _dicts.to_dicts(back(dy))
        back_dicts.__doc__ = back.__doc__
        return _dicts.to_dicts(y), back_dicts
    entry = spec.cache.get(_type_key(args))
    if entry is None:
        entry = spec.build(args)
    return entry(*args)


_GRAD_SOURCES: Dict[Any, Callable] = {}


def _grad_source(f: Callable, args: Sequence[Any], argnum: int) -> Callable:
    """A plain Python function (generated source on disk) computing the gradient of ``f``
    w.r.t. argument ``argnum`` at arguments of these kinds: the recording primal, then
    the adjoint.  zyg can transform it again (forward over reverse)."""
    ir = ssa_of(f)
    return _grad_source_of_kinds(f, _kinds(_with_hidden(ir, args), ir.name), argnum)


def _full_args(f: Callable, args: Sequence[Any]) -> tuple:
    """``args`` and the hidden arguments of ``f`` (the innermost function of a transform)."""
    while hasattr(f, "_zyg"):
        f = f._zyg.f
    return _with_hidden(ssa_of(f), args)


def _grad_source_of_kinds(f: Callable, kinds: Sequence[str], argnum: int,
                          pooled: bool = False) -> Callable:
    """:func:`_grad_source` for arguments of these kinds.

    ``pooled``: the variant the Hessian drivers transform (zyg/api.py), which keeps its
    tape between calls: ``name(*args, *buffers, _hw)`` starts its stacks from
    ``buffers`` (one per stack, in the order of the function's ``_zyg_stacks``: pairs
    ``(stack, dtype)``) and writes into the int64 array ``_hw`` the capacity each stack
    had at the end (what the next call's buffers need to run without growing)."""
    ir = ssa_of(f)
    kinds = list(kinds)
    key = (unwrap(f), tuple(kinds), argnum, ir.reads, pooled)
    fn = _GRAD_SOURCES.get(key)
    if fn is not None:
        return fn
    with LOAD_LOCK:
        fn = _GRAD_SOURCES.get(key)
        if fn is None:
            fn = _GRAD_SOURCES[key] = _build_grad_source(f, ir, kinds, argnum, pooled)
    return fn


def _build_grad_source(f: Callable, ir: Function, kinds: List[str], argnum: int,
                       pooled: bool = False) -> Callable:
    from .pullbacks.tape import STACKS
    from .ssa.emit import var_name
    if any(is_tuple(k) for k in kinds):
        raise TypeMismatch(f"{ir.name}: higher-order derivatives of functions of tuples are not "
                           "supported yet")
    if len(kinds) != len(ir.params):
        raise TypeError(f"{ir.name}() takes {ir.nargs} positional arguments")
    python = backends.get("python")
    p = plan(ir, kinds, [argnum], python)
    if not differentiable(kinds[argnum]):
        raise TypeMismatch(f"argument {argnum} of {ir.name} is not differentiable ({kinds[argnum]})")
    if not (p.ret_kind == "float"):
        raise TypeMismatch(f"{ir.name} must return a real number for a Hessian (it returns {p.ret_kind})")
    stem = f"{_ident(ir.name.replace('<lambda>', 'lambda'))}_d{argnum}"
    # relowered: the zero-cotangent tests are written for forward mode (pullbacks/guards.py)
    prog = Split(relowered=True, pooled=pooled).emit(p, stem)
    code, tape = prog.code, prog.info.tape
    params = [var_name(q) for q in p.fn.params]
    # the stacks the tape holds, in the order the pooled primal takes their buffers
    stacks = [s for s in sorted(STACKS) if f"_{s}s" in tape]
    bufs = [f"_{s}0" for s in stacks] + ["_hw"] if pooled else []
    code.add(0, "")
    code.put(0, Def(f"{stem}_grad", tuple(params + bufs)))
    code.add(1, f'"""Gradient of {ir.name} w.r.t. argument {argnum} (for forward-over-reverse)."""')
    code.add(1, f"_ret, _tp = {stem}_primal({', '.join(params + bufs[:-1])})")
    if pooled:
        for j, s in enumerate(stacks):
            code.add(1, f"_hw[{j}] = _tp[{tape.index(f'_{s}s')}].shape[0]")
    code.add(1, f"_g = {stem}_adjoint(*_tp, 1.0)")
    code.add(1, "return _g[0]")
    prog.names = [stem + "_grad"]
    fn = _load(prog, python).fns[0]
    if pooled:
        fn._zyg_stacks = [(s, STACKS[s][0]) for s in stacks]
    return fn
