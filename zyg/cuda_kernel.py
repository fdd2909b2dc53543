"""Adjoints of whole CUDA kernels: ``dk = zyg.vjp(kernel)`` (issue 25).

``dk[blocks, threads](x, dx, y, dy, n)`` is launched with the kernel's configuration; each
float array argument is followed by its shadow.  On entry a shadow holds the cotangent of
its array's contents after the kernel, on exit that of its contents before (Enzyme's
convention); the kernel's own writes are performed as a launch of the kernel would.

How (``../shared/CUDA_AND_TASKS.md`` section 3):

* The front end reads the kernel as an ordinary function.  Inside it, ``numba.cuda``'s
  names resolve through :func:`_resolve` (a hook of ``ssa/hooks.STATIC_ATTRS``): the thread
  geometry (``cuda.threadIdx.x``, ``blockIdx``, ``blockDim``, ``gridDim``) becomes hidden
  integer parameters of the function, ``cuda.grid(d)`` / ``cuda.gridsize(d)`` arithmetic on
  them, and ``cuda.atomic.add(a, i, v)`` the write primitive :class:`AtomicAdd`.
* Each thread runs :func:`~zyg.pullbacks.transform.emit_kernel_step`: its primal with its
  own tape (per-thread local arrays, ``backends/cuda.LocalStacks``), then its adjoint at
  once.  A race-free kernel's threads never read what another thread writes, so each
  thread's adjoint needs only its own tape.  Shadows of arrays the kernel reads add
  atomically (another thread may read the same element: stencil neighbours, shared
  tables); the shadow of a written element belongs to its writer.
* Writes into the arguments stay as the primal leaves them where the adjoint does not
  read what they overwrote.  Otherwise every write is rewound by the adjoint and the
  thread runs its primal once more (:func:`~zyg.pullbacks.transform.emit_plain`), without
  its atomic additions, which are never rewound.
* The generated kernel sets the geometry, calls the step (and the primal), and reports the
  tape room a thread lacked; the launcher then restores the written arrays and shadows it
  saved, and launches again with a tape large enough.
* Shadows of shared parameters (arrays every thread reads at the same places) are summed
  per block: from a copy each thread adds into plainly, or atomically in shared memory
  (:func:`build`, :func:`_block_sum`); once per block and element into the global shadow.

Refused at the line (a :class:`~zyg.UnsupportedSyntax`, docs/cuda.md): barriers and
shared arrays where a block's threads may take different paths, shared and local arrays
allocated in a loop, other atomics, reading the value an atomic addition returns, arrays
made in the kernel, arrays read from the enclosing scope.
"""
from __future__ import annotations

import operator
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import backends
from .backends.cuda import CudaBackend, cuda_module, simulator
from .build import Program, load
from .compile import LOAD_LOCK
from . import cuda as zc
from .cuda import MAX_TAPE_SIZE, TapeOverflowError, kind_of_runtime, row_dtypes, tape_rows, tape_size
from .errors import TypeMismatch, UnsupportedSyntax
from .pullbacks.transform import emit_kernel_step, emit_plain, plan, row_stacks
from .ssa import hooks
from .ssa.analysis import differentiable, is_array
from .ssa.captured import Slot
from .ssa.emit import Code, _ident
from .ssa.ir import Call, Const, Return, Stmt, callee_name
from .ssa.prims import GetItem, MakeTuple, Prim, SetItem

# -- the front end inside a kernel --------------------------------------------------------

_STATE = threading.local()
#: the owner of the geometry's hidden-parameter slots (never read through: the generated
#: kernel passes the values)
_GEOMETRY = object()
_DIMS = ("threadIdx", "blockIdx", "blockDim", "gridDim")


def _in_kernel() -> bool:
    return getattr(_STATE, "on", False)


class AtomicAdd(SetItem):
    """``cuda.atomic.add(base, index, value)``: ``base[index] += value`` as one atomic
    operation, an effect (operands as :class:`~zyg.ssa.prims.SetItem`'s: base, the index
    parts, the value added).  The back end spells it (``backends/cuda.atomic_add``)."""
    atomic = True

    def __init__(self, spec):
        super().__init__(spec)
        self.name = "cuda.atomic.add[" + ",".join(self.spec) + "]"

    def with_spec(self, spec):
        return AtomicAdd(spec)

    def __call__(self, base, *ops):
        from .ssa.prims import _index
        idx = _index(self.spec, ops[:-1])
        base[idx if len(idx) != 1 else idx[0]] += ops[-1]
        return None


class SyncThreads(Prim):
    """``cuda.syncthreads()``: the block's barrier, an effect.  The adjoint runs it again at
    the mirrored point, so that the reversed phases are separated as the primal's were."""
    name = "cuda.syncthreads"

    def _zyg_kind(self, kinds):
        return "none"

    def primal_src(self, em, st, args) -> str:
        return "cuda.syncthreads()"

    def adjoint_effect(self, em) -> str:
        return "cuda.syncthreads()"

    def __call__(self):
        raise RuntimeError("cuda.syncthreads() runs only inside a kernel")


class SharedArray(Prim):
    """``cuda.shared.array(shape, dtype)``: memory the threads of a block share.  Its shadow
    is shared memory too, zeroed by the block's threads together before anyone adds into
    it (atomically: ``Emitter.atomic_shadows``)."""

    def __init__(self, shape: Tuple[int, ...], dtype: np.dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = f"cuda.shared.array{self.shape}"

    def _key(self):
        return (self.shape, self.dtype.str)

    def _zyg_kind(self, kinds):
        return f"{self.dtype.str[1:]}[{len(self.shape)}]"

    def _type(self, em) -> str:
        import numba
        return em.ns.ref(numba.from_dtype(self.dtype), "_nb_" + self.dtype.name)

    def _shape(self) -> str:
        return str(self.shape[0]) if len(self.shape) == 1 else repr(self.shape)

    def primal_src(self, em, st, args) -> str:
        return f"cuda.shared.array({self._shape()}, {self._type(em)})"

    def shadow_src(self, em, n: str, d: str) -> List[str]:
        size = int(np.prod(self.shape))
        idx = _flat_index(self.shape, "_zk")
        return [f"{d} = cuda.shared.array({self._shape()}, {self._type(em)})",
                "_zk = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + "
                "cuda.blockDim.y * cuda.threadIdx.z)",
                f"while _zk < {size}:",
                f"    {d}[{idx}] = 0",
                "    _zk += cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z",
                "cuda.syncthreads()"]

    def __call__(self):
        raise RuntimeError("cuda.shared.array runs only inside a kernel")


class LocalArray(SharedArray):
    """``cuda.local.array(shape, dtype)``: a thread's own scratch memory; its shadow is a
    local array too, zeroed by the thread."""

    def __init__(self, shape, dtype):
        super().__init__(shape, dtype)
        self.name = f"cuda.local.array{self.shape}"

    def primal_src(self, em, st, args) -> str:
        return f"cuda.local.array({self._shape()}, {self._type(em)})"

    def shadow_src(self, em, n: str, d: str) -> List[str]:
        size = int(np.prod(self.shape))
        idx = _flat_index(self.shape, "_zk")
        return [f"{d} = cuda.local.array({self._shape()}, {self._type(em)})",
                f"for _zk in range({size}):",
                f"    {d}[{idx}] = 0"]

    def __call__(self):
        raise RuntimeError("cuda.local.array runs only inside a kernel")


class CudaName:
    """A name of ``numba.cuda`` read inside a kernel (``grid``, ``threadIdx.x``,
    ``atomic.add``): resolved by the front end's hooks, never at run time."""

    def __init__(self, path: str):
        self.path = path

    def __getattr__(self, attr: str) -> "CudaName":
        if attr.startswith("_"):
            raise AttributeError(attr)
        return CudaName(f"{self.path}.{attr}")

    def __repr__(self) -> str:
        return f"cuda.{self.path}"

    def _zyg_lower_value(self, lw, node, hint):
        parts = self.path.split(".")
        if len(parts) == 2 and parts[0] in _DIMS and parts[1] in ("x", "y", "z"):
            return geometry(lw, parts[0], parts[1])
        raise lw.unsupported(node, f"cuda.{self.path} is not supported in a differentiated kernel")


def geometry(lw, dim: str, axis: str):
    """The hidden integer parameter holding ``cuda.<dim>.<axis>``."""
    return lw.hidden_param(Slot("cuda", _GEOMETRY, f"{dim}.{axis}", f"{dim}_{axis}"))


def _resolve(lw, base, node):
    if isinstance(base, types.ModuleType) and base.__name__ == "numba.cuda":
        if not _in_kernel():
            raise lw.unsupported(node, f"cuda.{node.attr} is read outside a kernel given to "
                                       "zyg.vjp", "differentiate the kernel: zyg.vjp(kernel)")
        return CudaName(node.attr)
    return None


def _lower_call(lw, fn, node, hint):
    if not isinstance(fn, CudaName):
        return None
    path = fn.path
    if node.keywords:
        raise lw.unsupported(node, f"cuda.{path}() with keyword arguments is not supported")
    if path in ("grid", "gridsize"):
        import gast
        a = node.args[0] if len(node.args) == 1 else None
        nd = a.value if isinstance(a, gast.Constant) else None
        if nd not in (1, 2, 3):
            raise lw.unsupported(node, f"cuda.{path}() takes a constant 1, 2 or 3")
        out = []
        for axis in "xyz"[:nd]:
            bd = geometry(lw, "blockDim", axis)
            if path == "grid":
                b = lw.emit(operator.mul, [geometry(lw, "blockIdx", axis), bd], node)
                out.append(lw.emit(operator.add, [b, geometry(lw, "threadIdx", axis)], node, hint))
            else:
                out.append(lw.emit(operator.mul, [geometry(lw, "gridDim", axis), bd], node, hint))
        return out[0] if nd == 1 else lw.emit(MakeTuple(), out, node, hint)
    if path == "atomic.add":
        if len(node.args) != 3:
            raise lw.unsupported(node, "cuda.atomic.add takes an array, an index and a value")
        base = lw.expr(node.args[0])
        spec, ops = lw.index(node.args[1])
        if any(c != "i" for c in spec):
            raise lw.unsupported(node, "cuda.atomic.add: the index must be integers")
        value = lw.expr(node.args[2])
        lw.blocks[lw.cur].stmts.append(
            Stmt(None, Call(AtomicAdd(spec), [base] + ops + [value]), lw.src.loc(node)))
        return Const(None)
    if path == "syncthreads":
        if node.args:
            raise lw.unsupported(node, "cuda.syncthreads() takes no arguments")
        lw.blocks[lw.cur].stmts.append(Stmt(None, Call(SyncThreads(), []), lw.src.loc(node)))
        return Const(None)
    if path == "shared.array":
        return lw.emit(_shared(lw, node), [], node, hint)
    if path == "local.array":
        sa = _shared(lw, node)
        return lw.emit(LocalArray(sa.shape, sa.dtype), [], node, hint)
    if path in ("const.array_like",):
        raise lw.unsupported(node, f"cuda.{path} in a differentiated kernel is not supported yet",
                             "zyg.vjp differentiates kernels whose threads share no memory but "
                             "global arrays (docs/cuda.md)")
    raise lw.unsupported(node, f"cuda.{path}() is not supported in a differentiated kernel")


def _shared(lw, node) -> SharedArray:
    """The primitive of ``cuda.shared.array(shape, dtype)``: a constant shape and dtype."""
    import gast

    ops = {gast.Add: operator.add, gast.Sub: operator.sub, gast.Mult: operator.mul,
           gast.FloorDiv: operator.floordiv}

    def const(n):
        # what numba takes as a constant: literals, globals, and arithmetic of them
        if isinstance(n, gast.Constant):
            return n.value
        if isinstance(n, gast.Tuple):
            return tuple(const(e) for e in n.elts)
        if isinstance(n, gast.BinOp) and type(n.op) in ops:
            a, b = const(n.left), const(n.right)
            return ops[type(n.op)](a, b) if isinstance(a, int) and isinstance(b, int) else None
        return lw.static_value(n)
    args = list(node.args) + [k.value for k in node.keywords]
    if len(args) != 2:
        raise lw.unsupported(node, "cuda.shared.array and cuda.local.array take a shape and a dtype")
    shape, dt = const(args[0]), const(args[1])
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, tuple) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise lw.unsupported(node, "cuda.shared.array needs a constant shape (an int or a tuple "
                                   "of ints)")
    try:
        from numba.np.numpy_support import as_dtype
        dtype = as_dtype(dt) if not isinstance(dt, (type, np.dtype, str)) else np.dtype(dt)
    except Exception:
        raise lw.unsupported(node, f"cuda.shared.array: {dt!r} is not a dtype") from None
    if dtype.kind != "f":
        raise lw.unsupported(node, "cuda.shared.array of non-float data is not supported in a "
                                   "differentiated kernel yet")
    return SharedArray(shape, dtype)


hooks.STATIC_ATTRS.append(_resolve)
hooks.CALL_LOWERINGS.insert(0, _lower_call)


def _py_function(kernel) -> Callable:
    """The Python function of a ``@cuda.jit`` kernel (numba.cuda's dispatcher, the
    simulator's kernel) or a plain function."""
    for attr in ("py_func", "fn"):
        f = getattr(kernel, attr, None)
        if isinstance(f, types.FunctionType):
            return f
    if isinstance(kernel, types.FunctionType):
        return kernel
    raise TypeError(f"zyg.vjp: {kernel!r} is not a @cuda.jit kernel or a function")


_IR: Dict[Any, Any] = {}


def kernel_ir(py: Callable):
    """The SSA IR of kernel ``py`` with ``numba.cuda``'s names resolved (cached)."""
    ir = _IR.get(py)
    if ir is not None and ir.reads.valid():
        return ir
    from .caches import BUILD_LOCK
    from .ssa.build import lower, run_pipeline
    with BUILD_LOCK:
        _STATE.on = True
        try:
            lowered = lower(py)
        finally:
            _STATE.on = False
        ir = run_pipeline(lowered)
        ir.reads = lowered.reads
        for s in ir.reads.hidden:
            if s.kind != "cuda":
                raise UnsupportedSyntax(
                    f"kernel {ir.name} ({ir.filename}:{ir.firstlineno}) reads {s.name!r} of its "
                    "enclosing scope, which its adjoint cannot carry",
                    hint="pass it to the kernel as an argument")
        _IR[py] = ir
    return ir


# -- building -----------------------------------------------------------------------------

class _LaunchCuda:
    """Under the simulator, what a device function's generated code calls ``cuda``: the
    running launch's simulated module (thread indices, local arrays), whichever kernel
    called the function (the simulator swaps the module only into the kernel's globals)."""

    def __getattr__(self, name):
        from numba.cuda.simulator.kernel import _get_kernel_context
        mod = _get_kernel_context()
        if mod is None:
            raise RuntimeError("a zyg device function runs only inside a kernel")
        return getattr(mod, name)


class _KernelBackend(CudaBackend):
    """The cuda back end for kernels: generated code reads the thread geometry through the
    launch's own ``cuda`` module (under the simulator, the kernel's swapped one, or, for a
    device function, the running launch's: :class:`_LaunchCuda`)."""

    def __init__(self, tape_size: int, device_fn: bool = False, rows: bool = False):
        super().__init__(tape_size, rows=rows)
        self.device_fn = device_fn

    def _like(self, tape_size: int, rows: bool) -> "_KernelBackend":
        return _KernelBackend(tape_size, self.device_fn, rows)

    def tag(self) -> str:
        return super().tag() + "; kernel adjoint"

    def load(self, code, ns: Dict[str, Any], names: List[str], stem: str):
        from .backends.cuda import _max2, _min2
        from .backends.base import Backend
        self.storage = self._storage()
        ns = dict(ns)
        ns["cuda"] = _LaunchCuda() if self.device_fn and simulator() else cuda_module()
        ns["np"] = np
        if not simulator():
            ns["max"] = self.helper(_max2)
            ns["min"] = self.helper(_min2)
        return Backend.load(self, code, ns, names, stem)


class Built:
    def __init__(self, kernel, nargs, floats, checked, final, source):
        self.kernel = kernel        # the generated adjoint kernel
        self.nargs = nargs          # the kernel's own arguments
        self.floats = floats        # which of them are float arrays (followed by a shadow)
        self.checked = checked      # the tape may overflow (a status word is passed)
        self.final = final          # the primal runs again after the adjoint
        self.source = source
        self.rows: List[Tuple[str, Any]] = []   # (stack, dtype) of the tape's row buffers


_BUILT: Dict[Any, Built] = {}


def _refuse(p, name: str, nargs: int) -> None:
    """What a kernel's adjoint cannot do, at the user's line."""
    from .rules.higher import Checkpointed, Hooked
    from .ssa.prims import Attr, Recursive

    def bad(st, msg, hint=None):
        loc = st.loc
        raise UnsupportedSyntax(msg, loc.filename if loc else None, loc.lineno if loc else None,
                                loc.col if loc else None, hint=hint)
    params = {q.id for q in p.fn.params}
    params |= {st.var.id for blk in p.fn.iter_blocks() for st in blk.stmts
               if isinstance(st.expr.fn, (SharedArray, LocalArray))}
    divergent = _divergent(p.fn, _tainted(p.fn, nargs))
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            e = st.expr
            fn = e.fn
            what = callee_name(fn)
            if isinstance(fn, (Recursive, Checkpointed, Hooked)):
                bad(st, f"kernel {name}: {what} runs Python at run time, which a kernel cannot call")
            if type(fn) in (SyncThreads, SharedArray) and blk.id in divergent:
                bad(st, f"kernel {name}: {what} runs where the threads of a block may take "
                        "different paths (under a condition on the thread's position, in a loop "
                        "whose trip count depends on it, or after an early return); every thread "
                        "of the block must run it alike",
                    hint="branch on the thread's position after it, or only around the work")
            if isinstance(fn, (SharedArray, LocalArray)) and p.loops_of.get(blk.id):
                bad(st, f"kernel {name}: {what} inside a loop is not supported",
                    hint="allocate it once, before the loop")
            if isinstance(fn, (SharedArray, LocalArray)):
                continue
            if st.var is not None and is_array(p.kinds.get(st.var.id, "")):
                bad(st, f"kernel {name}: {what} makes an array (or a view), which a kernel's "
                        "adjoint does not support", hint="index the argument arrays element by "
                                                         "element")
            for k, a in enumerate(e.args):
                if getattr(a, "id", None) in params and is_array(p.kinds.get(a.id, "")):
                    ok = k == 0 and isinstance(fn, (GetItem, SetItem)) and \
                        all(c == "i" for c in fn.spec)
                    if isinstance(fn, Attr) and fn.attr in ("shape", "size", "ndim"):
                        ok = True
                    if not ok:
                        bad(st, f"kernel {name}: {what} uses array {a.id!r} other than by its "
                                "elements (a[i], a[i, j] = v, a.shape)")


def _tainted(fn, nargs: int) -> set:
    """Ids of the values that depend on the thread's position (the geometry parameters,
    after the ``nargs`` arguments, and what is computed from them)."""
    tainted = {q.id for q in fn.params[nargs:]}
    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if st.var is not None and st.var.id not in tainted and \
                        any(getattr(a, "id", None) in tainted for a in st.expr.operands()):
                    tainted.add(st.var.id)
                    changed = True
            for target, args in blk.term.successors():
                for q, a in zip(fn.blocks[target].params, args):
                    if q.id not in tainted and getattr(a, "id", None) in tainted:
                        tainted.add(q.id)
                        changed = True
    return tainted


def _divergent(fn, tainted: set) -> set:
    """Blocks that some threads of a block may run and others not: those between a branch on
    a thread-dependent condition and the point where its paths join again (its nearest
    post-dominator)."""
    from .ssa.ir import Branch
    ids = [b.id for b in fn.iter_blocks()]
    succ = {b.id: [t for t, _ in b.term.successors()] for b in fn.iter_blocks()}
    exits = [b.id for b in fn.iter_blocks() if isinstance(b.term, Return)]
    pdom = {b: set(ids) for b in ids}
    for e in exits:
        pdom[e] = {e}
    changed = True
    while changed:
        changed = False
        for b in ids:
            if b in exits or not succ[b]:
                continue
            new = set.intersection(*(pdom[t] for t in succ[b])) | {b}
            if new != pdom[b]:
                pdom[b] = new
                changed = True
    out: set = set()
    for blk in fn.iter_blocks():
        t = blk.term
        if not isinstance(t, Branch) or getattr(t.cond, "id", None) not in tainted:
            continue
        cands = pdom[blk.id] - {blk.id}
        # the nearest post-dominator: the one every other candidate post-dominates
        join = next((c for c in cands if all(o in pdom[c] for o in cands)), None)
        work = list(succ[blk.id])
        while work:
            b = work.pop()
            if b == join or b in out:
                continue
            out.add(b)
            work.extend(succ[b])
    return out


#: the most shared memory the shadows of a block's shared parameters may take
STAGED_BYTES = 32 * 1024
_CANDIDATES: Dict[Any, List[int]] = {}


def shared_parameters(py: Callable, kinds: Sequence[str]) -> List[int]:
    """The float array parameters every thread reads at the same places (GMM's means, a
    lookup table): never written, read only by elements at indices that do not depend on
    the thread's position.  Their shadows are staged per block in shared memory
    (:func:`build`)."""
    key = (py, tuple(kinds))
    ir = kernel_ir(py)
    got = _CANDIDATES.get(key)
    if got is not None and got[0] is ir:
        return got[1]
    allk = list(kinds) + ["int"] * len(ir.reads.hidden)
    p = plan(ir, allk, [], backends.get("python"), effects=True)
    fn = p.fn
    tainted = _tainted(fn, ir.nargs)
    out = []
    for i, k in enumerate(kinds):
        if not (is_array(k) and differentiable(k)):
            continue
        root = p.aliases.find(fn.params[i].id)
        ok = True
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                e = st.expr
                args = [a for a in e.operands() if getattr(a, "id", None) in p.aliases.parent
                        and p.aliases.find(a.id) == root]
                if not args:
                    continue
                if isinstance(e.fn, SetItem) and getattr(e.args[0], "id", None) in p.aliases.parent \
                        and p.aliases.find(e.args[0].id) == root:
                    ok = False
                elif isinstance(e.fn, GetItem) and any(getattr(a, "id", None) in tainted
                                                       for a in e.args[1:]):
                    ok = False
        if ok:
            out.append(i)
    _CANDIDATES[key] = (ir, out)
    return out


_PRIVATE: Dict[Any, List[int]] = {}


def private_parameters(py: Callable, kinds: Sequence[str]) -> List[int]:
    """The float array parameters a thread of a 1-D launch reads only in its own row: every
    element read's first index is ``cuda.grid(1)`` (``blockIdx.x * blockDim.x +
    threadIdx.x``), which no other thread of such a launch shares.  Their shadows take plain
    additions."""
    key = (py, tuple(kinds))
    ir = kernel_ir(py)
    got = _PRIVATE.get(key)
    if got is not None and got[0] is ir:
        return got[1]
    allk = list(kinds) + ["int"] * len(ir.reads.hidden)
    p = plan(ir, allk, [], backends.get("python"), effects=True)
    fn = p.fn
    geo = {s.key: q.id for s, q in zip(ir.reads.hidden, fn.params[ir.nargs:])}
    bx, bdx, tx = geo.get("blockIdx.x"), geo.get("blockDim.x"), geo.get("threadIdx.x")
    defs = {st.var.id: st.expr for blk in fn.iter_blocks() for st in blk.stmts if st.var is not None}

    def ids(e):
        return {getattr(a, "id", None) for a in e.args}
    thread = set()
    for v, e in defs.items():
        if e.fn is operator.add and len(e.args) == 2 and tx in ids(e):
            other = [a for a in e.args if getattr(a, "id", None) != tx]
            m = defs.get(getattr(other[0], "id", None)) if other else None
            if m is not None and m.fn is operator.mul and ids(m) == {bx, bdx} and None not in (bx, bdx):
                thread.add(v)
    out = []
    for i, k in enumerate(kinds):
        if not (is_array(k) and differentiable(k)) or not thread:
            continue
        root = p.aliases.find(fn.params[i].id)
        ok = True
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                e = st.expr
                if isinstance(e.fn, GetItem) and not isinstance(e.fn, SetItem) and e.args and \
                        getattr(e.args[0], "id", None) in p.aliases.parent and \
                        p.aliases.find(e.args[0].id) == root:
                    if len(e.args) < 2 or getattr(e.args[1], "id", None) not in thread or \
                            e.fn.spec[0] != "i":
                        ok = False
        if ok:
            out.append(i)
    _PRIVATE[key] = (ir, out)
    return out


def build(kernel, kinds: Sequence[str], size: int,
          staged: Tuple[Tuple[int, Tuple[int, ...]], ...] = (),
          private: Tuple[int, ...] = (), block: int = 0, rows: bool = False) -> Built:
    """The adjoint kernel of ``kernel`` for arguments of ``kinds``, with a per-thread tape of
    ``size`` items where unbounded; ``staged``: (parameter, shape) of the shared parameters
    whose shadows a block sums in shared memory before adding them into the global shadow
    once per element; ``private``: parameters whose shadows take plain additions (each
    thread reads only its own row: :func:`private_parameters`, for a 1-D launch).

    ``block``: the threads of a block, for launches of that size only.  Where given, each
    thread adds its contributions to the staged shadows plainly into a local copy of its
    own, and the block sums the copies once at the end (:func:`_block_sum`) instead of
    adding every contribution atomically into shared memory.

    ``rows``: the stacks the transform could not bound are columns of buffers the launcher
    passes after the status word, ``_zt_<stack>[slot, thread]`` (``Built.rows`` lists their
    stacks and dtypes), one column per thread of the grid, instead of local arrays of
    ``size`` items: their room is the buffers' at run time."""
    py = _py_function(kernel)
    backend = _KernelBackend(size, rows=rows)
    block = int(block) if staged else 0
    key = (py, tuple(kinds), backend.key(), simulator(), tuple(staged), tuple(private), block,
           SUM_BYTES if block else 0)
    got = _cached(key, py)
    if got is not None:
        return got
    with LOAD_LOCK:
        got = _cached(key, py)
        if got is not None:
            return got
        ir = kernel_ir(py)
        name = ir.name
        if len(kinds) != ir.nargs:
            raise TypeError(f"kernel {name} takes {ir.nargs} arguments (besides the shadows) "
                            f"but {len(kinds)} were given")
        geo = [s.key for s in ir.reads.hidden]
        allk = list(kinds) + ["int"] * len(geo)
        floats = [i for i, k in enumerate(kinds) if is_array(k) and differentiable(k)]
        sync = any(isinstance(st.expr.fn, SyncThreads) for blk in ir.iter_blocks()
                   for st in blk.stmts)
        stem = _ident(name) + "_adj"
        code, ns, stacks, run_code = _emit(
            ir, allk, floats, backend, stem,
            [i for i in floats if i not in private and not (block and i in dict(staged))],
            lambda p: _refuse(p, name, ir.nargs), effects=True, sync=sync)
        checked = bool(stacks)
        given = row_stacks(code, backend)
        params, full = _interleaved(len(kinds), floats)
        geo_src = [f"cuda.{g}" for g in geo]
        head = full + (["_status"] if checked else []) + [f"_zt_{st}" for st in given]
        lines = [f"def {stem}({', '.join(head)}):"]
        stage = dict(staged)
        if stage or given:
            lines.append("    _t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + "
                         "cuda.blockDim.y * cuda.threadIdx.z)")
            lines.append("    _nt = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z")
        if given:
            # the thread's column of the tape's buffers: its index in the whole grid
            lines.append("    _zrow = _t + _nt * (cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + "
                         "cuda.gridDim.y * cuda.blockIdx.z))")
        if stage:
            # a block's contributions to a shared parameter's shadow are summed in shared
            # memory, then added into the global shadow once per element and block
            import numba
            for i, shape in stage.items():
                dt = np.dtype(kinds[i][:kinds[i].index("[")])
                ns.ns[f"_nb_{dt.name}"] = numba.from_dtype(dt)
                shp = str(shape[0]) if len(shape) == 1 else repr(tuple(shape))
                lines.append(f"    _s{i} = cuda.shared.array({shp}, _nb_{dt.name})")
                lines.append("    _k = _t")
                lines.append(f"    while _k < {int(np.prod(shape))}:")
                lines.append(f"        _s{i}[{_flat_index(shape)}] = 0")
                lines.append("        _k += _nt")
                if block:
                    # the thread's own copy, added into plainly
                    lines.append(f"    _p{i} = cuda.local.array({shp}, _nb_{dt.name})")
                    lines.append(f"    for _k in range({int(np.prod(shape))}):")
                    lines.append(f"        _p{i}[{_flat_index(shape)}] = 0")
            lines.append("    cuda.syncthreads()")
        call = ", ".join(params + geo_src + [(f"_p{i}" if block else f"_s{i}") if i in stage
                                             else f"d{i}" for i in floats] +
                         (["_zrow"] + [f"_zt_{st}" for st in given] if given else []))
        lines.append(f"    _need = {stem}_step({call})")
        if checked:
            lines.append("    if _need > 0:")
            lines.append("        cuda.atomic.max(_status, 0, _need)")
        if stage:
            lines.append("    cuda.syncthreads()")
            if block:
                lines.extend(_block_sum(stage, kinds, block))
            for i, shape in stage.items():
                idx = _flat_index(shape)
                lines.append("    _k = _t")
                lines.append(f"    while _k < {int(np.prod(shape))}:")
                lines.append(f"        cuda.atomic.add(d{i}, {idx if len(shape) == 1 else '(' + idx + ')'}, "
                             f"_s{i}[{idx}])")
                lines.append("        _k += _nt")
        if run_code is not None:
            lines.append(f"    {stem}_run({', '.join(params + geo_src)})")
        raw, path = _load(backend, stem, code, run_code, lines, ns)
        got = Built(cuda_module().jit(raw), len(kinds), floats, checked, run_code is not None,
                    path)
        got.ir = ir
        got.staged = [i for i, _ in staged]
        got.private = list(private)
        got.block = block
        got.rows = row_dtypes(given)
        _BUILT[key] = got
        return got


#: the most items of staged shadows a thread keeps a copy of (``build(block=...)``):
#: zeroing and summing the copies costs each thread that many steps whatever it adds
PRIVATE_ITEMS = 512
#: the shared memory the block sum of those copies stages them in (beside STAGED_BYTES;
#: the two stay under the 48 KiB of static shared memory a block may have)
SUM_BYTES = 16 * 1024


def sum_width(block: int, itemsize: int) -> int:
    """How many entries of a shadow a block of ``block`` threads sums at a time: each thread
    stages that many of its own in a row of shared memory (one fewer than fit in
    ``SUM_BYTES``, so that a row padded to an odd length still fits)."""
    return SUM_BYTES // (block * itemsize) - 1


def _block_sum(stage: Dict[int, Tuple[int, ...]], kinds: Sequence[str], block: int) -> List[str]:
    """The lines that sum the threads' own copies ``_p<i>`` of the staged shadows into the
    block's ``_s<i>`` (after a barrier every thread reaches: the end of the kernel).  Chunk
    by chunk of ``c`` entries: each thread writes its chunk into its row of ``_r``; then
    ``w = block // m`` threads per entry sum every ``w``-th row and add the partial into
    ``_s<i>``: ``w`` shared atomic additions per entry and block, where adding every
    contribution costs one per thread and contribution."""
    out = []
    made = set()
    for i, shape in stage.items():
        dt = np.dtype(kinds[i][:kinds[i].index("[")])
        # at most one entry per thread: each entry of a chunk needs a thread to sum it
        c = min(sum_width(block, dt.itemsize), block)
        buf = f"_r_{dt.name}"
        if buf not in made:
            made.add(buf)
            # rows of an odd number of items: a warp's threads write and read one column
            # of consecutive rows, which then fall on distinct banks
            out.append(f"    {buf} = cuda.shared.array(({block}, {c | 1}), _nb_{dt.name})")
        n = int(np.prod(shape))
        at = _flat_index(shape)
        at = at if len(shape) == 1 else f"({at})"
        out += [f"    for _b in range(0, {n}, {c}):",
                f"        _m = min({c}, {n} - _b)",
                "        for _j in range(_m):",
                "            _k = _b + _j",
                f"            {buf}[_t, _j] = _p{i}[{_flat_index(shape)}]",
                "        cuda.syncthreads()",
                f"        _w = {block} // _m",
                "        if _t < _m * _w:",
                "            _j = _t % _m",
                "            _row = _t // _m",
                f"            _q = {buf}[_row, _j]",
                "            _row += _w",
                f"            while _row < {block}:",
                f"                _q += {buf}[_row, _j]",
                "                _row += _w",
                "            _k = _b + _j",
                f"            cuda.atomic.add(_s{i}, {at}, _q)",
                "        cuda.syncthreads()"]
    return out


def _cached(key, py):
    """A generated adjoint, unless a global its kernel reads was rebound since (its IR is
    rebuilt then, and so is the adjoint)."""
    got = _BUILT.get(key)
    return got if got is not None and got.ir is kernel_ir(py) else None


def _interleaved(n: int, wrt: Sequence[int]) -> Tuple[List[str], List[str]]:
    """The argument names ``a<i>``, and the same with a shadow ``d<i>`` after each of ``wrt``."""
    params, full = [], []
    for i in range(n):
        params.append(f"a{i}")
        full.append(f"a{i}")
        if i in wrt:
            full.append(f"d{i}")
    return params, full


def _emit(ir, allk, wrt, backend, stem: str, atomic, check, effects: bool, sync: bool = False,
          value: bool = False):
    """One thread's step (``<stem>_step``) and, where it rewinds writes, the primal it runs
    again (``<stem>_run``): (code, namespace, stacks, code of the run or None).  ``check``
    sees the first plan (refusals at the user's line)."""
    def shared_of(p):
        return [st.var.id for blk in p.fn.iter_blocks() for st in blk.stmts
                if type(st.expr.fn) is SharedArray]
    p = plan(ir, allk, list(wrt), backend, effects=effects)
    check(p)
    p.keep_final = True
    code, ns, stacks, rewound = emit_kernel_step(p, stem + "_step", atomic, shared_of(p), sync,
                                                 value)
    if not rewound:
        return code, ns, stacks, None
    # a write the adjoint rewinds: rewind them all, then run the primal again
    p = plan(ir, allk, list(wrt), backend, effects=effects)
    code, ns, stacks, _ = emit_kernel_step(p, stem + "_step", atomic, shared_of(p), sync, value)
    p0 = plan(ir, allk, [], backend, effects=effects)
    run_code, ns0 = emit_plain(p0, stem + "_run", skip_atomic=True)
    ns.ns.update(ns0.ns)
    return code, ns, stacks, run_code


def _load(backend, stem: str, code, run_code, lines: List[str], ns):
    """Load the step, the run and the entry ``stem`` (``lines``) as one module; on a device
    the step and the run become device functions.  Returns the entry's Python function and
    the module's path."""
    whole = Code()
    whole.extend(code)
    if run_code is not None:
        whole.add(0, "")
        whole.extend(run_code)
    whole.add(0, "")
    for ln in lines:
        whole.add(0, ln)
    names = [stem + "_step"] + ([stem + "_run"] if run_code is not None else []) + [stem]
    built = load(Program(whole, ns.ns, names, stem), backend)
    loaded, path = built.fns, built.path
    raw = loaded[-1]
    if not simulator():
        cuda = cuda_module()
        glob = raw.__globals__
        for n in names[:-1]:
            glob[n] = cuda.jit(device=True)(glob[n])
    return raw, path


def _flat_index(shape: Tuple[int, ...], k: str = "_k") -> str:
    """The index of flat position ``k`` in an array of ``shape`` (C order)."""
    if len(shape) == 1:
        return k
    strides = [int(np.prod(shape[j + 1:])) for j in range(len(shape))]
    return ", ".join(f"({k} // {st}) % {dim}" for st, dim in zip(strides, shape))


# -- launching ----------------------------------------------------------------------------

_ARRAY_TYPES: Dict[type, bool] = {}


def _is_array(a) -> bool:
    """A numpy array, a device array (numba's, the simulator's) or anything with
    ``__cuda_array_interface__``: decided once per type (the launch path asks of every
    argument of every launch)."""
    t = type(a)
    got = _ARRAY_TYPES.get(t)
    if got is None:
        got = _ARRAY_TYPES[t] = isinstance(a, np.ndarray) or \
            hasattr(a, "__cuda_array_interface__") or \
            (hasattr(a, "copy_to_host") and hasattr(a, "shape"))
    return got


#: the most kinds of launch a kernel adjoint remembers for its direct path (and the room
#: its tape needed)
DIRECT_KINDS = 64


class KernelAdjoint:
    """``zyg.vjp(kernel)``: index it with a launch configuration, then call it with the
    kernel's arguments, each float array followed by its shadow."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.py = _py_function(kernel)
        self.__name__ = getattr(self.py, "__name__", "kernel") + "_vjp"
        self.__doc__ = f"The adjoint of kernel {self.__name__[:-4]}, generated by zyg."
        #: launches whose adjoint keeps no checked tape, by what decided it (:meth:`_key`):
        #: the generated kernel, launched on the arguments as given
        self._direct: Dict[Any, Built] = {}
        #: the tape's room (in rows) that the last launch of that kind ran in: the next one
        #: starts there instead of running short of the local tape again
        self._room: Dict[Any, int] = {}

    @staticmethod
    def _key(config, args) -> Tuple[Any, ...]:
        """Everything :meth:`launch` decides the adjoint from, but the kernel's IR (checked
        on every launch: a rebound global builds it again): the configuration, the tape's
        size and the limits of the shadows' sums, and each argument's type (with an
        array's dtype and shape)."""
        sig = tuple((type(a), a.dtype, a.shape) if _is_array(a) else type(a) for a in args)
        return (config, tape_size(), zc.ROW_BYTES, STAGED_BYTES, PRIVATE_ITEMS, SUM_BYTES) + sig

    def __getitem__(self, config):
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise TypeError("launch the adjoint as dk[blocks, threads](...)")
        return lambda *args: self.launch(config, args)

    def _split(self, args) -> Tuple[List[Any], List[Any]]:
        """The kernel's arguments and the shadows that follow its float arrays."""
        nargs = kernel_ir(self.py).nargs
        own, shadows = [], []
        k = 0
        for _ in range(nargs):
            if k >= len(args):
                raise TypeError(f"{self.__name__}: too few arguments (each float array is "
                                "followed by its shadow)")
            a = args[k]
            own.append(a)
            k += 1
            if _is_array(a) and np.dtype(a.dtype).kind == "f":
                if k >= len(args) or not _is_array(args[k]):
                    raise TypeError(f"{self.__name__}: argument {len(own) - 1} (a float array) "
                                    "must be followed by its shadow")
                s = args[k]
                if tuple(s.shape) != tuple(a.shape) or np.dtype(s.dtype) != np.dtype(a.dtype):
                    raise TypeError(f"{self.__name__}: the shadow of argument {len(own) - 1} has "
                                    f"shape {tuple(s.shape)} and dtype {s.dtype}, not those of "
                                    f"its array ({tuple(a.shape)}, {a.dtype})")
                shadows.append(s)
                k += 1
        if k != len(args):
            raise TypeError(f"{self.__name__}: {len(args) - k} arguments too many")
        _distinct([a for a in own if _is_array(a)] + shadows, self.py)
        return own, shadows

    def plan(self, config, own) -> Tuple[List[str], Tuple[Tuple[int, Tuple[int, ...]], ...],
                                         Tuple[int, ...], int]:
        """How the adjoint of a launch of ``config`` on the kernel's arguments ``own`` is
        built (:func:`build`'s arguments besides the tape): the arguments' kinds, the
        shared parameters whose shadows are staged per block (with their shapes), the
        parameters whose shadows take plain additions, and the block size of the sums of
        the threads' copies (0: atomics in shared memory)."""
        kinds = [kind_of_runtime(a) for a in own]
        staged, room = [], STAGED_BYTES
        for i in shared_parameters(self.py, kinds):
            nbytes = int(np.prod(own[i].shape)) * np.dtype(own[i].dtype).itemsize
            if 0 < nbytes <= room:
                staged.append((i, tuple(int(d) for d in own[i].shape)))
                room -= nbytes
        private: Tuple[int, ...] = ()
        block = _block_threads(config, staged, own)
        if all(isinstance(c, int) or (isinstance(c, tuple) and len(c) == 1)
               for c in config[:2]):
            # a 1-D launch: a thread's row, indexed by cuda.grid(1), is its own
            private = tuple(i for i in private_parameters(self.py, kinds)
                            if i not in dict(staged))
        return kinds, tuple(staged), private, block

    def launch(self, config, args) -> None:
        key = self._key(config, args)
        try:
            b = self._direct.get(key)
        except TypeError:       # something unhashable in the configuration
            key = b = None
        if b is not None and b.ir is kernel_ir(self.py):
            # launched before with arguments of these types and shapes: the arguments as
            # given are the adjoint's (each float array followed by its shadow)
            _distinct([a for a in args if _is_array(a)], self.py)
            self.kernel_launch(b, config, list(args))
            return
        cuda = cuda_module()
        own, shadows = self._split(args)
        kinds, staged, private, block = self.plan(config, own)
        size = tape_size()
        saved = None
        rows = None             # the tape's row buffers, once a launch ran out of room
        if key is not None and key in self._room:
            stacks = build(self.kernel, kinds, size, staged, private, block, True).rows
            rows = _tape_rows(stacks, self._room[key], config) if stacks else None
        while True:
            b = build(self.kernel, kinds, size, staged, private, block, rows is not None)
            full = []
            j = 0
            for i, a in enumerate(own):
                full.append(a)
                if i in b.floats:
                    full.append(shadows[j])
                    j += 1
            if not b.checked:
                self.kernel_launch(b, config, full)
                if key is not None and rows is None and \
                        [id(a) for a in full] == [id(a) for a in args]:
                    if len(self._direct) >= DIRECT_KINDS:
                        self._direct.clear()    # (shapes that keep changing)
                    self._direct[key] = b
                return
            if saved is None:
                # a tape that may overflow: what the launch changes (the arrays the kernel
                # writes, the shadows) is saved, on the device, to launch again
                written = _written_params(self.py)
                saved = [(a, _copy(a)) for i, a in enumerate(own)
                         if _is_array(a) and i in written] + [(d, _copy(d)) for d in shadows]
            status = cuda.to_device(np.zeros(1, np.int64))
            self.kernel_launch(b, config, full + [status] + (rows or []))
            need = int(status.copy_to_host()[0])
            if need == 0:
                if rows and key is not None:
                    if len(self._room) >= DIRECT_KINDS:
                        self._room.clear()
                    self._room[key] = rows[0].shape[0]
                return
            for a, c in saved:
                _restore(a, c)
            room = rows[0].shape[0] if rows else size
            grown = room * 2
            while grown < need:
                grown *= 2
            if zc.ROW_BYTES > 0:
                # the kernel with its tape in rows of launcher-allocated buffers (built the
                # first time a launch runs short): no compile for each larger room
                stacks = b.rows or build(self.kernel, kinds, size, staged, private, block,
                                         True).rows
                rows = _tape_rows(stacks, grown, config) if stacks else None
                if rows is not None:
                    continue
            if grown > MAX_TAPE_SIZE:
                raise TapeOverflowError(
                    f"a per-thread tape of {size} items was too small for the adjoint of "
                    f"{self.py.__name__} (a thread needed {need}); it grows to "
                    f"{MAX_TAPE_SIZE} at most")
            size = grown

    @staticmethod
    def kernel_launch(b: Built, config, args) -> None:
        b.kernel[config](*args)


def _tape_rows(stacks: List[Tuple[str, Any]], room: int, config) -> Optional[List[Any]]:
    """The tape's row buffers (:func:`zyg.cuda.tape_rows`) for every thread of a launch of
    ``config``."""
    def count(c):
        return int(np.prod(c)) if isinstance(c, tuple) else int(c)
    return tape_rows(stacks, room, count(config[0]) * count(config[1]))


def _block_threads(config, staged, own) -> int:
    """The threads of a block where the staged shadows are summed from copies each thread
    keeps (:func:`build`'s ``block``), else 0 (contributions added atomically into shared
    memory): where the copies are at most PRIVATE_ITEMS items, a row of each fits the
    shared memory of the sum, and the launch asks for no dynamic shared memory of its own."""
    if not staged or PRIVATE_ITEMS <= 0 or (len(config) == 4 and config[3]):
        return 0
    threads = config[1]
    nt = int(np.prod(threads)) if isinstance(threads, tuple) else int(threads)
    items = sum(int(np.prod(shape)) for _, shape in staged)
    size = max(np.dtype(own[i].dtype).itemsize for i, _ in staged)
    if not 0 < nt <= 1024 or items > PRIVATE_ITEMS or sum_width(nt, size) < 1:
        return 0
    return nt


_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds


def _extent(a) -> Tuple[str, int, int]:
    """(memory space, first byte, one past the last byte) of an array's buffer."""
    if isinstance(a, np.ndarray):
        lo, hi = _byte_bounds(a)
        return "host", lo, hi
    host = a.__dict__.get("_ary") if hasattr(a, "__dict__") else None
    if isinstance(host, np.ndarray):            # the simulator's device arrays
        return _extent(host)
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is not None:
        ptr = iface["data"][0]
        n = int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
        return "device", ptr, ptr + n          # (a conservative extent for strided views)
    return "?", id(a), id(a) + 1


def _distinct(arrays, py) -> None:
    """Arrays and shadows of one launch must not share memory: the adjoint reads and writes
    them as separate buffers (a kernel given the same array twice would get a wrong
    gradient)."""
    from .errors import AliasedArguments
    ext = [_extent(a) for a in arrays]
    for i in range(len(ext)):
        for j in range(i + 1, len(ext)):
            si, lo, hi = ext[i]
            sj, lo2, hi2 = ext[j]
            if si == sj and lo < hi2 and lo2 < hi:
                raise AliasedArguments(
                    f"the adjoint of {getattr(py, '__name__', 'the kernel')} was given arrays "
                    "(or shadows) that share memory",
                    hint="pass distinct arrays, and a separate zeroed shadow for each")


def _written_params(py) -> set:
    """The parameters kernel ``py`` writes into (element writes and atomic additions, through
    block arguments too), from its SSA."""
    ir = kernel_ir(py)
    params = {q.id: k for k, q in enumerate(ir.params[:ir.nargs])}
    alias = dict(params)
    changed = True
    while changed:
        changed = False
        for blk in ir.iter_blocks():
            for target, args in blk.term.successors():
                for q, a in zip(ir.blocks[target].params, args):
                    k = alias.get(getattr(a, "id", None))
                    if k is not None and q.id not in alias:
                        alias[q.id] = k
                        changed = True
    out = set()
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            if isinstance(st.expr.fn, SetItem):
                k = alias.get(getattr(st.expr.args[0], "id", None))
                if k is None:
                    return set(range(ir.nargs))      # a write zyg cannot place: save all
                out.add(k)
    return out


def _numba_array(a):
    """A numba device array of ``a``'s memory (``a`` itself, or a view of another
    library's array through ``__cuda_array_interface__``: CuPy, PyTorch)."""
    if hasattr(a, "copy_to_device"):
        return a
    return cuda_module().as_cuda_array(a)


def _copy(a):
    """A copy of ``a``'s contents where ``a`` lives (a device copy of a device array)."""
    if isinstance(a, np.ndarray):
        return a.copy()
    a = _numba_array(a)
    c = cuda_module().device_array_like(a)
    c.copy_to_device(a)
    return c


def _restore(a, saved) -> None:
    """Copy ``saved`` (host or device contents) into ``a``."""
    if isinstance(a, np.ndarray):
        a[...] = _host(saved)
    else:
        _numba_array(a).copy_to_device(saved)


def _host(v) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "copy_to_host"):
        return v.copy_to_host()
    return np.asarray(v)


def _is_kernel(f) -> bool:
    """A ``@cuda.jit`` kernel: numba.cuda's dispatcher or the simulator's kernel."""
    cls = type(f)
    return (cls.__module__ or "").startswith("numba.cuda") and \
        isinstance(getattr(f, "py_func", getattr(f, "fn", None)), types.FunctionType) and \
        not getattr(f, "_device", False) and "device" not in cls.__name__.lower()


def vjp(f, argnums=None, *, target: str = "cuda", accumulate: str = "atomic"):
    """Vector-Jacobian products on a CUDA device (docs/cuda.md).

    * ``zyg.vjp(kernel)`` for a ``@cuda.jit`` kernel: its adjoint, launched as
      ``dk[blocks, threads](x, dx, y, dy, n)`` with the kernel's configuration.  Each float
      array argument is followed by its shadow, which holds on entry the cotangent of the
      array's contents after the kernel, and on exit that of its contents before (Enzyme's
      convention); the kernel's own writes are performed as a launch of it would.  Shadows
      accumulate: zero them before the first launch.
    * ``zyg.vjp(f, argnums, target="cuda")`` for a function of arrays returning a number: a
      device function for your kernels taking ``f``'s arguments, each differentiated array
      (``argnums``; by default the arguments ``f`` indexes) followed by its shadow, and last
      the output cotangent ``dy``; it returns ``f``'s value and adds ``dy * df/da`` into each
      shadow (atomically, or with ``accumulate="plain"`` where the shadows are private to
      the thread).  A NaN value says the per-thread tape was too small
      (``zyg.cuda.set_tape_size``): nothing was added then."""
    if target != "cuda":
        raise ValueError("zyg.vjp works on CUDA devices (target='cuda'); on the host, "
                         "zyg.pullback(f, *args) gives the vector-Jacobian product")
    if _is_kernel(f):
        if argnums is not None:
            raise TypeError("zyg.vjp(kernel) takes no argnums: every float array argument "
                            "has a shadow")
        return KernelAdjoint(f)
    cls = type(f)
    if (cls.__module__ or "").startswith("numba.cuda") or not callable(f):
        raise TypeError(f"zyg.vjp takes a @cuda.jit kernel or a plain function, not {f!r}")
    return device_vjp(f, argnums, accumulate)


# -- vector-Jacobian products as device functions -----------------------------------------

class _VjpBuilt:
    def __init__(self, fn, final, path):
        self.fn = fn            # the generated device function (Python under the simulator)
        self.final = final
        self.path = path


def build_vjp(f: Callable, kinds: Sequence[str], wrt: Sequence[int], accumulate: str,
              size: int) -> _VjpBuilt:
    """``f``'s value and vector-Jacobian product as one device function of ``f``'s
    arguments, the shadows of the arrays ``wrt`` after them, and the output cotangent."""
    from .ssa.lower import unwrap
    py = unwrap(f)
    backend = _KernelBackend(size, device_fn=True)
    key = ("vjp", py, tuple(kinds), tuple(wrt), accumulate, backend.key(), simulator())
    got = _cached(key, py)
    if got is not None:
        return got
    with LOAD_LOCK:
        got = _cached(key, py)
        if got is not None:
            return got
        ir = kernel_ir(py)
        name = ir.name
        if len(kinds) != ir.nargs:
            raise TypeError(f"{name}() takes {ir.nargs} arguments (besides the shadows and the "
                            f"cotangent) but {len(kinds)} were given")
        for i in wrt:
            if not (is_array(kinds[i]) and differentiable(kinds[i])):
                raise TypeMismatch(f"argument {i} of {name} is {kinds[i]}: zyg.vjp(..., "
                                   "target='cuda') differentiates float arrays (each followed "
                                   "by its shadow)", hint="use zyg.grad(f, target='cuda') for "
                                                          "numbers")
        geo = [s.key for s in ir.reads.hidden]
        allk = list(kinds) + ["int"] * len(geo)

        def check(p):
            for blk in p.fn.iter_blocks():
                for st in blk.stmts:
                    if type(st.expr.fn) in (SharedArray, SyncThreads):
                        loc = st.loc
                        raise UnsupportedSyntax(
                            f"{name}: {callee_name(st.expr.fn)} in a device function's "
                            "vector-Jacobian product is not supported (write it in the kernel "
                            "and differentiate the kernel: zyg.vjp(kernel))",
                            loc.filename if loc else None, loc.lineno if loc else None)
            _refuse(p, name, ir.nargs)
            if p.ret_kind != "float":
                raise TypeMismatch(f"{name} ({ir.filename}:{ir.firstlineno}) returns "
                                   f"{p.ret_kind}; its vector-Jacobian product needs a real "
                                   "scalar")
        stem = _ident(name.replace("<lambda>", "lambda")) + "_vjp"
        code, ns, stacks, run_code = _emit(
            ir, allk, wrt, backend, stem, list(wrt) if accumulate == "atomic" else [], check,
            effects=False, value=True)
        params, full = _interleaved(len(kinds), wrt)
        geo_src = [f"cuda.{g}" for g in geo]
        lines = [f"def {stem}({', '.join(full + ['dy'])}):",
                 f"    _v = {stem}_step({', '.join(params + geo_src + [f'd{i}' for i in wrt] + ['dy'])})"]
        if run_code is not None:
            lines.append(f"    {stem}_run({', '.join(params + geo_src)})")
        lines.append("    return _v")
        raw, path = _load(backend, stem, code, run_code, lines, ns)
        if not simulator():
            raw = cuda_module().jit(device=True)(raw)
        got = _VjpBuilt(raw, run_code is not None, path)
        got.ir = ir
        _BUILT[key] = got
        return got


def device_vjp(f: Callable, argnums, accumulate: str) -> Callable:
    """``zyg.vjp(f, argnums, target="cuda")``: a device function for a user's kernel."""
    from .cuda import _array_params, _overload, kind_of_numba
    from .driver import _normalise_argnums
    from .entry import adapt
    from .ssa.lower import unwrap
    if accumulate not in ("atomic", "plain"):
        raise ValueError("accumulate is 'atomic' (shadows shared by threads) or 'plain' "
                         "(each thread's own shadows)")
    f, binder = adapt(f)
    if binder is not None:
        raise UnsupportedSyntax(f"the vector-Jacobian product of {getattr(f, '__name__', 'f')} "
                                "cannot bind defaults, keywords or a method's object",
                                hint="differentiate a plain function of positional arguments")
    ir = kernel_ir(unwrap(f))
    n = ir.nargs
    if argnums is None:
        wrt = sorted(_array_params(f, ir))
        if not wrt:
            raise TypeError(f"{getattr(f, '__name__', 'f')} indexes no argument: pass argnums "
                            "(the float arrays to differentiate)")
    else:
        wrt, _ = _normalise_argnums(argnums, n)
        wrt = sorted(wrt)
    params, own = [], []
    for i in range(n):
        params.append(f"a{i}")
        own.append(f"a{i}")
        if i in wrt:
            params.append(f"d{i}")
    params.append("dy")
    name = _ident(getattr(unwrap(f), "__name__", "f").replace("<lambda>", "lambda")) + "_vjp_cuda"

    def sim_call(args):
        if not simulator():
            raise TypeError(f"{name} is a CUDA device function: call it from a @cuda.jit kernel")
        ownargs = [args[params.index(o)] for o in own]
        kinds = [kind_of_runtime(a) for a in ownargs]
        b = build_vjp(f, kinds, wrt, accumulate, tape_size())
        return b.fn(*args)
    glob: Dict[str, Any] = {"_sim_call": sim_call}
    exec(f"def {name}({', '.join(params)}):\n    return _sim_call(({', '.join(params)},))\n", glob)
    stub = glob[name]
    stub.__doc__ = (f"The value of {getattr(f, '__name__', 'f')} and its vector-Jacobian product "
                    f"(a CUDA device function generated by zyg): arguments {', '.join(params)}.")
    stub._zyg_device_vjp = (f, wrt, accumulate)
    if simulator():
        return stub

    def typer_impl(types):
        kinds = [kind_of_numba(types[params.index(o)]) for o in own]
        b = build_vjp(f, kinds, wrt, accumulate, tape_size())
        ig = {"_core": b.fn}
        exec(f"def impl({', '.join(params)}):\n    return _core({', '.join(params)})\n", ig)
        return ig["impl"]
    tg = {"_typer_impl": typer_impl}
    exec(f"def typer({', '.join(params)}):\n    return _typer_impl(({', '.join(params)},))\n", tg)
    _overload()(stub)(tg["typer"])
    return stub
