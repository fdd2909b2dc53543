"""Building the compiled pairs of recursive functions (see ``native.py``): per function and
argument kinds, a plan whose ``wrt`` is every differentiable argument, emitted as
``<f>_rec_rp`` and ``<f>_rec_ra`` and loaded by the back end; cached per lowering of the
function (a redefinition or a rebound global builds it again), cleared with zyg's caches.
Also the guard that keeps a compiled recursion from overflowing the C stack.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from ..build import Program, Transform, build
from ..caches import BUILD_LOCK, on_invalidate
from ..ssa.analysis import array_ndim, differentiable, is_array, is_tuple
from ..ssa.emit import Capacity, Code, Def, Grow, RoomCheck, var_name
from ..pullbacks.native import STACKS, _positions, params_mutated, possible, provide_builder
from ..pullbacks.tape import KIND_STACK
from ..pullbacks.forward import Forward
from ..pullbacks.transform import Emitter, plan

RECURSION_LIMIT = 100000        # Python's limit (python target) while a pair recurses


@dataclass
class _Built:
    ir: Any
    rp: Any
    ra: Any
    scalar_diff: List[int]
    array_diff: List[int]
    mutates: bool


_PAIRS: Dict[Tuple[Any, Tuple[str, ...], str], Tuple[Any, Optional[_Built]]] = {}
_BUILDING: Set[Tuple[Any, Tuple[str, ...], str]] = set()
# why a pair could not be built, per (function, kinds, target): the call keeps the
# run-time path (for debugging)
LAST_REFUSAL: Dict[Any, str] = {}


@on_invalidate
def clear() -> None:
    _PAIRS.clear()
    LAST_REFUSAL.clear()


def _cached(cache: dict, key: tuple, fn: Any, build) -> Any:
    """``build(ir)`` for ``fn``'s current lowering, kept in ``cache`` under ``key`` (built
    again when ``fn`` is lowered again); None while the same key is being built (reached
    again through other kinds) or when building raised (the reason in LAST_REFUSAL)."""
    from ..ssa.build import ssa_of
    with BUILD_LOCK:
        ir = ssa_of(fn)
        got = cache.get(key)
        if got is not None and got[0] is ir:
            return got[1]
        if key in _BUILDING:
            return None
        _BUILDING.add(key)
        try:
            built = build(ir)
        except Exception as e:      # noqa: BLE001 - the run-time path handles (or reports) it
            LAST_REFUSAL[key] = f"{type(e).__name__}: {e}"
            built = None
        finally:
            _BUILDING.discard(key)
        cache[key] = (ir, built)
        return built


def _plan(fn: Any, ir, kinds: Tuple[str, ...], out_kind: str, backend, key: tuple):
    """The plan of a pair of ``fn`` (``wrt``: every differentiable argument), or None where
    its kinds or values rule a pair out (the reason in LAST_REFUSAL)."""
    if ir.reads.hidden or ir.nargs != len(kinds) or len(ir.params) != len(kinds):
        LAST_REFUSAL[key] = "reads arrays from globals or closures"
        return None
    scalar_diff, array_diff = _positions(kinds)
    p = plan(ir, list(kinds), sorted(scalar_diff + array_diff), backend)
    flat = p.flat
    if flat is not None and (any(t is not None for t in flat.param_trees) or flat.ret_tree is not None) \
            or p.ret_kind != out_kind:
        LAST_REFUSAL[key] = "tuples, or a result of another kind"
        return None
    return p


def _stem(fn: Any) -> str:
    return "".join(c if c.isalnum() else "_" for c in getattr(fn, "__name__", "f")) + "_rec"


def pair_for(fn: Any, kinds: Tuple[str, ...], out_kind: str, backend) -> Optional[_Built]:
    """The compiled pair of ``fn`` for argument kinds ``kinds`` on ``backend`` (built once
    per lowering of ``fn``), or None where the call keeps the run-time path."""
    if not possible(kinds, out_kind, backend):
        return None
    key = (fn, tuple(kinds), backend.name)
    return _cached(_PAIRS, key, fn, lambda ir: _build(fn, ir, tuple(kinds), out_kind, backend, key))


def _build(fn: Any, ir, kinds: Tuple[str, ...], out_kind: str, backend, key: tuple) -> Optional[_Built]:
    p = _plan(fn, ir, kinds, out_kind, backend, key)
    if p is None:
        return None
    scalar_diff, array_diff = _positions(kinds)
    stem = _stem(fn)
    p.native_self = (fn, kinds, stem)
    built = build(_Pair(), p, stem)
    (rp, ra), mutates = built.fns, built.info
    for d in (rp, ra):      # errors about the generated pair name the user's function
        getattr(d, "py_func", d)._zyg_recursive_of = fn
    return _Built(ir, rp, ra, scalar_diff, array_diff, mutates)


class _Pair(Transform):
    """The compiled pair ``stem_rp``, ``stem_ra`` of a recursive function (``info``: it
    writes into an argument array)."""

    def emit(self, p, stem: str) -> Program:
        code, ns, mutates = emit_pair(p, stem)
        ns.ns["_zyg_gil_entry"] = True      # called from compiled code only (backends/cpu.py)
        return Program(code, ns.ns, [stem + "_rp", stem + "_ra"], stem, mutates)


class _PairJvp(Transform):
    """Forward mode of a recursive function as a pair, ``stem(*args, _lim, *tangents)``
    (``info``: the emitter, which knows the tangent positions)."""

    def __init__(self, me):
        self.me = me

    def emit(self, p, stem: str) -> Program:
        fwd = _PairForward(p, self.me)
        code = fwd.emit(stem)
        fwd.ns.ns["_zyg_gil_entry"] = True
        return Program(code, fwd.ns.ns, [stem], stem, fwd)


def names_kinds(em) -> Dict[str, str]:
    """The kind of every name the generated code of ``em`` binds, shadows and edge records
    included."""
    out = em.names_kinds()
    for v in em.shadow_roots.values():
        out[em.dname(v)] = em.kind(v)
    for t in em.tag_scalars + em.count_scalars:
        out[t] = "int"
    return out


def emit_pair(p, stem: str):
    """Source of ``stem_rp`` and ``stem_ra`` (see the module's doc) for plan ``p``, whose
    ``wrt`` is every differentiable argument.  Returns (code, namespace, writes into an
    argument array)."""
    em = Emitter(p)
    params = [var_name(q) for q in p.fn.params]
    kinds = [em.kind(q) for q in p.fn.params]
    scalar_diff, array_diff = _positions(kinds)
    em.given_shadows = {p.fn.params[i].id for i in array_diff}
    em.stack_used |= set(STACKS)
    adj = Code()
    em.adjoint(adj, 1)
    outs = em.grad_outputs()
    shadows = [em.dname(p.fn.params[i]) for i in array_diff]
    stack_args = [x for s in STACKS for x in (f"_{s}s", f"_{s}sp")]

    code = Code()
    code.put(0, Def(f"{stem}_rp", tuple(params + ["_lim"] + stack_args)))
    code.add(1, f'"""Recording primal of {p.fn.name} ({p.fn.filename}:{p.fn.firstlineno}) on the '
                'caller\'s stacks, generated by zyg."""')
    _stack_check(em, code)
    em.stack_init(code, 1, continued=True)
    em.residual_init(code, 1)
    em.primal(code, 1, record=True)
    known = names_kinds(em)
    skip = set(params) | set(shadows)
    items = []
    for n in em.tag_scalars + em.count_scalars + sorted(em.adj_uses):
        if n in skip or n in (i[0] for i in items):
            continue
        k = known.get(n)
        if k is None or k in ("none", "undef", "object") or is_tuple(k):
            raise NotImplementedError(f"a value {n} of kind {k} kept for the adjoint")
        items.append((n, k))
    need: Dict[str, int] = {}
    for _, k in items:
        s = "i" if is_array(k) else KIND_STACK.get(k, "f")
        need[s] = need.get(s, 0) + (array_ndim(k) if is_array(k) else 1)
    for s in sorted(need):
        code.put(1, RoomCheck(s, f"_{s}sp + {need[s]}"))
        code.put(2, Grow(s, f"_{s}sp + {need[s]}"))
        code.put(2, Capacity(s))
    for n, k in items:
        em.push_now(n, n, k, 1, code)
    code.add(1, "return _ret, " + ", ".join(stack_args))
    code.add(0, "")

    code.put(0, Def(f"{stem}_ra", tuple(params + shadows + ["_dy", "_lim"] + stack_args)))
    code.add(1, f'"""Adjoint of {p.fn.name} reading its records from the caller\'s stacks, '
                'generated by zyg."""')
    _stack_check(em, code)
    for n, k in reversed(items):
        em.pop_now(n, k, 1, code)
    code.extend(adj)
    diff = [i for i in p.wrt if differentiable(kinds[i])]
    grads = [o for i, o in zip(diff, outs) if i in scalar_diff]
    code.add(1, "return (" + "".join(g + ", " for g in grads) + ", ".join(f"_{s}sp" for s in STACKS) + ")")
    return code, em.ns, params_mutated(em)


RECURSION_MESSAGE = ("maximum recursion depth exceeded in a differentiated recursive function: zyg "
                     "stops before the C stack runs out; run it in a thread with a larger "
                     "threading.stack_size() before its first call, raise 'ulimit -s', or write the "
                     "recursion as a loop")


# the stack a pair may use before it asks Python how large the thread's stack really is:
# small enough for any thread (macOS gives threads 512 KiB)
FIRST_BUDGET = 256 << 10


class _DeeperLimit:
    """Called (from object mode) by a pair whose frame went below ``lim``, the limit set
    :data:`FIRST_BUDGET` below the outermost pair's frame: the limit this thread's stack
    really allows (RecursionError when it is not lower).  An object, not a function: the
    cpu back end compiles the plain functions generated code refers to; numba's disk cache
    pickles it by reference."""

    def __call__(self, lim: int) -> int:
        from .. import numerics
        size = numerics.stack_size()
        budget = max(size - numerics.MARGIN, size // 2)
        # the limit it returns has its lowest bit set (frames are aligned): reached again,
        # it is final
        new = lim + FIRST_BUDGET - budget
        if lim & 1 or new >= lim:
            raise RecursionError(f"{RECURSION_MESSAGE} ({size / 2**20:.1f} MiB C stack)")
        return new | 1

    def __reduce__(self):
        return "DEEPER_LIMIT"


DEEPER_LIMIT = _DeeperLimit()




def _stack_check(em, code: Code) -> None:
    """The start of a pair on a compiling target: compiled frames are not counted by
    Python's recursion limit, and a deep recursion would overflow the C stack (SIGSEGV).
    ``_lim`` is the lowest frame address allowed: 0 from the outermost caller, which sets
    it :data:`FIRST_BUDGET` below its own frame; a call below it asks Python once for the
    limit of the thread's real stack (:data:`DEEPER_LIMIT`) and passes that on.  On python,
    Python's own recursion limit (raised here) stops a deep recursion."""
    from .. import numerics
    if not em.p.backend.compiled:
        if sys.getrecursionlimit() < RECURSION_LIMIT:
            sys.setrecursionlimit(RECURSION_LIMIT)
        return
    frame = em.ns.ref(numerics._stack_pointer(), "_zyg_frame")
    deeper = em.ns.ref(DEEPER_LIMIT, "_zyg_deeper_limit")
    code.add(1, "if _lim == 0:")
    code.add(2, f"_lim = {frame}() - np.uint64({FIRST_BUDGET})")
    code.add(1, f"elif {frame}() < _lim:")
    for line in em.p.backend.call_python(f"_limd = {deeper}(_lim)", [("_limd", "uint64")], em.ns.ns):
        code.add(2, line)
    code.add(2, "_lim = _limd")


_JVPS: Dict[Tuple[Any, Tuple[str, ...], str], Tuple[Any, Any]] = {}


@on_invalidate
def _clear_jvps() -> None:
    _JVPS.clear()


def jvp_pair_for(fn: Any, kinds: Tuple[str, ...], out_kind: str, backend):
    """Forward mode of a recursive call: ``(f_rec_jvp, tangent positions)`` for ``fn`` and
    argument kinds ``kinds``, or None (the call is refused as before).  ``f_rec_jvp(*args,
    _lim, *tangents) -> (y, dy)`` takes the tangents of the arguments at the positions
    returned, works in place on the caller's arrays (as the recursive call does) and calls
    itself for ``fn``'s own recursive calls of the same kinds."""
    if not possible(kinds, out_kind, backend):
        return None
    key = (fn, tuple(kinds), backend.name, "jvp")
    return _cached(_JVPS, key, fn, lambda ir: _build_jvp(fn, ir, tuple(kinds), out_kind, backend, key))


def _build_jvp(fn: Any, ir, kinds: Tuple[str, ...], out_kind: str, backend, key: tuple):
    from ..pullbacks.forward import check_forward_kinds
    p = _plan(fn, ir, kinds, out_kind, backend, key)
    if p is None:
        return None
    check_forward_kinds(p)
    stem = _stem(fn) + "_jvp"
    built = build(_PairJvp((fn, kinds, stem)), p, stem)
    (f,), fwd = built.fns, built.info
    getattr(f, "py_func", f)._zyg_recursive_of = fn
    return f, fwd.tangent_positions()


class _PairForward(Forward):
    """Forward mode of a recursive function as a pair: in place on the caller's arrays,
    the stack limit ``_lim`` between the primals and the tangents, the C-stack guard first."""

    def __init__(self, p, me):
        super().__init__(p)
        self.copy_args = False
        self.native_self = me

    def tangent_positions(self) -> List[int]:
        return [i for i, q in enumerate(self.fn.params) if self.active(q)]

    def extra_params(self) -> List[str]:
        return ["_lim"]

    def prologue(self, code: Code) -> None:
        _stack_check(self, code)


def pairs_in(text: str, target: str) -> List[Tuple[str, str]]:
    """``(title, source)`` of the compiled recursive pairs that generated ``text`` calls
    (``zyg.show``), read back from their generated files."""
    out = []
    for (fn, kinds, t), (_, b) in list(_PAIRS.items()):
        if b is None or t != target:
            continue
        py = getattr(b.rp, "py_func", b.rp)
        if py.__name__ not in text:
            continue
        try:
            with open(py.__code__.co_filename) as fh:
                src = fh.read()
        except OSError:
            continue
        body = "".join(ln for ln in src.splitlines(True) if not ln.startswith("# "))
        out.append((f"{getattr(fn, '__qualname__', fn)} with arguments ({', '.join(kinds)})", body))
    return out


provide_builder(sys.modules[__name__])
