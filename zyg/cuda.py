"""Gradients on CUDA devices and batches of gradients (issue 25, first slice).

* ``zyg.grad(f, argnums, target="cuda")`` / ``zyg.value_and_grad(..., target="cuda")``:
  :func:`device_transform` returns a function that a user's ``@cuda.jit`` kernel calls with
  ``f``'s arguments (scalars, and device arrays that it only reads).  numba types the call
  through an ``overload`` for the CUDA target: zyg generates the fused value-and-gradient
  for those argument types (``emit_fused`` with the cuda back end's fixed per-thread tape,
  ``zyg/backends/cuda.py``) and numba compiles it as device code.  Under numba's simulator
  the same generated code runs as Python from the simulated thread.
* ``zyg.vmap(fn, in_axes=None, target=...)``: :func:`vmap` maps ``fn`` (``zyg.grad(f)``,
  ``zyg.value_and_grad(f)`` or a plain function) over the first axis of the arguments
  that are batched: one thread per item on ``cuda`` (a generated kernel), a compiled
  numba loop on ``cpu``, a Python loop on ``python``.

Programs that cannot run on a device are refused before code is generated, at the user's
line (:func:`refuse_device`): arrays made or written, array results, calls back into
Python.  On a device the tape of a loop whose trip count zyg cannot bound is a local array
of ``tape_size`` items (:func:`set_tape_size`); a run that needs more returns its value and
a NaN gradient (device functions), and :func:`vmap` relaunches with a tape large enough.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import backends
from .backends.cuda import CudaBackend, cuda_module, simulator
from .build import Fused, build as build_program
from .compile import LOAD_LOCK
from .driver import _normalise_argnums
from .entry import adapt
from .errors import TypeMismatch, UnsupportedSyntax, ZygError
from .pullbacks.transform import plan
from .ssa.analysis import is_array, kind_of_value
from .ssa.build import ssa_of
from .ssa.emit import _ident
from .ssa.ir import callee_name
from .ssa.lower import unwrap

_LOCK = LOAD_LOCK      # zyg's build lock (numba's compiler lock: zyg/caches.py)
#: the most items per stack vmap grows a per-thread tape to before it gives up
MAX_TAPE_SIZE = 1 << 16
#: the most device memory the tape's rows of one launch may take (:func:`tape_rows`); past
#: it, a launch short of room gets local arrays of a size compiled in instead (up to
#: ``MAX_TAPE_SIZE`` items)
ROW_BYTES = 1 << 30


class TapeOverflowError(ZygError):
    """A per-thread tape on the device was too small for a run, and could not be made larger."""


def set_tape_size(n: int) -> None:
    """Items per stack of the per-thread tape of loops whose trip count zyg cannot bound
    (a data-dependent ``while`` loop), for device gradients built from now on (256 by
    default).  Counted loops of constant trip count get exactly the room they need."""
    if int(n) < 1:
        raise ValueError("the tape size must be positive")
    backends.register(CudaBackend(int(n), backends.get("cuda").mode))


def tape_size() -> int:
    return backends.get("cuda").tape_size


def set_gradient_mode(mode: str) -> None:
    """How device gradients of float arguments (``zyg.grad(f, target="cuda")``,
    ``zyg.value_and_grad``, ``zyg.vmap`` of them on cuda) are made, for those built from now on:

    * ``"reverse"``: reverse mode, the primal recording on a per-thread tape, then the
      adjoint sweep;
    * ``"forward"``: forward mode, one tangent pass per differentiated argument (each pass
      runs the primal again), no tape at all;
    * ``"auto"`` (the default): forward mode for one argument, and for up to
      :data:`FORWARD_MAX` arguments where the tape would be long (a loop whose trip count
      zyg cannot bound, or more than :data:`LONG_TAPE` items); reverse mode otherwise, and
      wherever forward mode has no rule for a call (a custom rule without a closed-form
      pullback).

    Both modes give the same gradient, to rounding, wherever the partial derivatives are
    finite; where a zero meets an infinite one each has its zero tests (docs/numerics.md:
    a zero cotangent, or a zero tangent or partial, contributes nothing).  Forward mode
    keeps a thread's state in registers: on the 10^6-point Bessel batch a tangent
    recurrence was 3.5x faster than a taped reverse sweep (../shared/CUDA_AND_TASKS.md,
    section 7)."""
    b = backends.get("cuda")
    backends.register(CudaBackend(b.tape_size, mode))


def gradient_mode() -> str:
    return backends.get("cuda").mode


#: ``auto`` mode: forward mode for up to this many differentiated arguments where the tape
#: would be long
FORWARD_MAX = 4
#: ``auto`` mode: a tape of more items than this (all stacks, in the longest run) is long
LONG_TAPE = 256


# -- kinds --------------------------------------------------------------------------------

def kind_of_runtime(v: Any) -> str:
    """zyg's kind of a value a device function or kernel receives (numpy and simulator
    arrays, device arrays, numbers)."""
    if isinstance(v, np.generic):
        return kind_of_value(v)
    if not isinstance(v, np.ndarray) and hasattr(v, "dtype") and hasattr(v, "shape") \
            and hasattr(v, "ndim"):
        return f"{np.dtype(v.dtype).str[1:]}[{v.ndim}]"
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    return kind_of_value(v)


def kind_of_numba(t: Any) -> str:
    """zyg's kind of a numba type (the types a kernel passes to a device gradient)."""
    # by class name: numba-cuda may type with its own copy of numba's type classes
    names = {c.__name__ for c in type(t).__mro__}
    if "Boolean" in names:
        return "bool"
    if "Integer" in names:
        return "int"
    if "Float" in names:
        return "float"
    if "Complex" in names:
        return "complex"
    if "Array" in names and hasattr(t, "ndim"):
        return f"{np.dtype(str(t.dtype)).str[1:]}[{t.ndim}]"
    raise TypeMismatch(f"a device gradient cannot take an argument of numba type {t}")


# -- building -----------------------------------------------------------------------------

class Built:
    """A generated fused value-and-gradient for one signature.  ``fn(*args[, *buffers])``
    returns ``(value, grad, ...)``: ``grad`` one number per differentiated argument (a
    tuple when several); on cuda the last item is the tape room a run lacked (0 when it had
    enough); on cpu and python the tape buffers follow.  ``mode``: ``"reverse"`` or, on a
    device, ``"forward"`` (:func:`set_gradient_mode`)."""

    def __init__(self, fn, stacks, nwrt, backend, path, mode="reverse"):
        self.fn = fn
        self.stacks = stacks
        self.nwrt = nwrt
        self.backend = backend
        self.path = path
        self.mode = mode
        self.device = None
        self.ir = None          # the IR it was built from (build(): stale when f's reads change)
        #: (stack, dtype) of the tape's stacks passed in as rows, after the arguments
        #: (``CudaBackend.with_rows``): ``fn(*args, row, *buffers)``
        self.rows: List[Tuple[str, Any]] = []


_BUILT: Dict[Any, Built] = {}


def refuse_device(p, name: str) -> None:
    """Refuse, at the user's line, what device code cannot do: make or write arrays,
    return arrays, call back into Python."""
    from .rules.higher import Checkpointed, Hooked
    from .ssa.prims import Attr, GetItem, InPlace, Recursive, SetItem

    def bad(st, msg, hint=None):
        loc = st.loc
        raise UnsupportedSyntax(msg, loc.filename if loc else None, loc.lineno if loc else None,
                                loc.col if loc else None, hint=hint)
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            fn = st.expr.fn
            what = callee_name(fn)
            if isinstance(fn, (Recursive, Checkpointed, Hooked)):
                bad(st, f"{name}: {what} runs Python at run time (recursion, zyg.checkpoint, "
                        "zyg.hook), which CUDA device code cannot call",
                    hint="write the recursion as a loop")
            if isinstance(fn, (SetItem, InPlace)) and any(
                    is_array(p.kinds.get(a.id, "")) for a in st.expr.operands() if hasattr(a, "id")):
                bad(st, f"{name}: writing into an array ({what}) is not supported in a CUDA "
                        "device gradient (arguments are read-only tables)")
            if st.var is not None and is_array(p.kinds.get(st.var.id, "")) \
                    and not isinstance(fn, (GetItem, Attr)):
                bad(st, f"{name}: {what} makes an array, and CUDA device code cannot allocate "
                        "arrays", hint="compute with scalars, or pass a preallocated array in")
    if is_array(p.ret_kind) or p.ret_kind.startswith("tuple"):
        raise UnsupportedSyntax(f"{name} returns {p.ret_kind}; a device gradient needs a "
                                "scalar result")


def build(f: Callable, kinds: Sequence[str], argnums, backend) -> Built:
    """The fused value-and-gradient of ``f`` for arguments of ``kinds`` on ``backend``."""
    py = unwrap(f)
    key = (py, tuple(kinds), argnums if isinstance(argnums, int) else tuple(argnums),
           backend.key())
    # ssa_of gives a new IR when what f reads changed (a rebound global, a redefined
    # callee): an entry built from another IR is stale
    ir = ssa_of(f)
    got = _BUILT.get(key)
    if got is not None and got.fn is not None and got.ir is ir:
        return got
    with _LOCK:
        got = _BUILT.get(key)
        if got is not None and got.ir is ir:
            return got
        fname = ir.name
        if len(kinds) != ir.nargs:
            raise TypeError(f"{fname}() takes {ir.nargs} positional arguments but "
                            f"{len(kinds)} were given")
        if len(ir.params) != ir.nargs:
            raise UnsupportedSyntax(
                f"{fname} ({ir.filename}:{ir.firstlineno}) reads arrays or functions of its "
                f"enclosing scope, which a {backend.name} batch or device gradient cannot "
                "carry", hint="pass them as arguments")
        wrt, single = _normalise_argnums(argnums, ir.nargs)
        for i in wrt:
            if kinds[i] != "float":
                raise TypeMismatch(
                    f"argument {i} of {fname} is {kinds[i]}; device and batched gradients "
                    "are of float arguments", hint="differentiate with respect to numbers; "
                    "array arguments are read-only tables")
        for i, k in enumerate(kinds):
            if k not in ("float", "int", "bool") and not is_array(k):
                raise TypeMismatch(f"argument {i} of {fname} is {k}: a device gradient takes "
                                   "numbers and arrays")
        backend.prepare()
        p = plan(ir, list(kinds), wrt, backend)
        if not backend.host:
            refuse_device(p, fname)
        if p.ret_kind != "float":
            raise TypeMismatch(f"{fname} ({ir.filename}:{ir.firstlineno}) returns "
                               f"{p.ret_kind}; its gradient needs a real scalar result")
        name = f"{_ident(fname.replace('<lambda>', 'lambda'))}_{backend.name}_vg"
        got = None
        if not backend.host and backend.mode != "reverse":
            got = _forward(ir, kinds, wrt, backend, name, p)
        if got is None:
            # (on cpu a large function comes as a primal and an adjoint that the last one calls)
            built = build_program(Fused(value=True, zero_guards=True), p, name)
            got = Built(built.fns[-1], built.info.stacks, len(wrt), backend, built.path)
            got.rows = row_dtypes(built.info.rows)
        got.ir = ir
        _BUILT[key] = got
        return got


def row_dtypes(stacks: Sequence[str]) -> List[Tuple[str, Any]]:
    """(stack, numpy dtype) of the tape's stacks passed in as rows."""
    from .pullbacks.tape import STACKS
    return [(s, np.dtype(STACKS[s][0][len("np."):])) for s in stacks]


def tape_rows(stacks: Sequence[Tuple[str, Any]], room: int, threads: int) -> Optional[List[Any]]:
    """Device buffers ``[slot, thread]`` of ``room`` slots for ``threads`` threads, one per
    stack of ``stacks`` ((stack, dtype): ``backends/cuda.RowStacks``), or None where they
    would take more than ``ROW_BYTES`` or, on a GPU, half its free memory."""
    nbytes = sum(room * threads * np.dtype(dt).itemsize for _, dt in stacks)
    limit = ROW_BYTES
    cuda = cuda_module()
    if not simulator():
        limit = min(limit, cuda.current_context().get_memory_info()[0] // 2)
    if nbytes > limit or not stacks:
        return None
    return [cuda.device_array((room, threads), dt) for _, dt in stacks]


def _tape_items(code) -> Optional[int]:
    """The most items a generated module's tape holds in any run (all stacks), or None
    where the transform could not bound a stack."""
    from .ssa.emit import StackInit
    total = 0
    for _, n in code.body:
        if isinstance(n, StackInit):
            if n.bound is None:
                return None
            total += n.bound
    return total


def _forward(ir, kinds, wrt, backend, name, p) -> Optional[Built]:
    """The device value-and-gradient of ``ir`` in forward mode, where the back end's mode
    asks for it (:func:`set_gradient_mode`; ``p``: the reverse plan, for ``auto``): the
    generated jvp ``name_jvp(*args, *tangents) -> (value, tangent)`` called once per
    differentiated argument with its unit tangent by ``name(*args) -> (value, grad, 0)``
    (no tape: never short of room).  None where reverse mode is the one to build."""
    from .build import ForwardMode, Program, load
    from .errors import NoAdjoint
    from .pullbacks.forward import check_forward_kinds
    from .ssa.emit import Code, Def
    if backend.mode == "auto" and len(wrt) > 1:
        if len(wrt) > FORWARD_MAX:
            return None
        items = _tape_items(Fused(value=True, zero_guards=True).emit(p, name).code)
        if items is not None and items <= LONG_TAPE:
            return None
    fp = plan(ir, list(kinds), list(wrt), backend)
    try:
        check_forward_kinds(fp)
        prog = ForwardMode(copy_args=False, zero_guards=True).emit(fp, name + "_jvp")
    except (NoAdjoint, TypeMismatch, UnsupportedSyntax):
        if backend.mode == "forward":
            raise
        return None         # auto: a construct forward mode has no rule for
    jvp = load(prog, backend).fns[0]
    fwd = prog.info
    act = [i for i, q in enumerate(fp.fn.params) if fwd.active(q)]
    params = [f"a{i}" for i in range(ir.nargs)]
    code = Code()
    code.put(0, Def(name, tuple(params)))
    code.add(1, f'"""Value and gradient of {ir.name}: forward mode, one tangent pass per '
                f'argument, generated by zyg."""')
    grads = []
    for d, w in enumerate(wrt):
        if w not in act:
            grads.append("0.0")         # the value does not depend on it
            continue
        tans = ["1.0" if i == w else "0.0" for i in act]
        code.add(1, f"_y, _t{d} = _jvp({', '.join(params + tans)})")
        grads.append(f"_t{d}")
    if all(g == "0.0" for g in grads):
        code.add(1, f"_y = _jvp({', '.join(params + ['0.0'] * len(act))})[0]")
    grad = grads[0] if len(grads) == 1 else "(" + ", ".join(grads) + ",)"
    code.add(1, f"return _y, {grad}, 0")
    built = load(Program(code, {"_jvp": backend.jit(jvp)}, [name], name + "_fwd"), backend)
    return Built(built.fns[0], [], len(wrt), backend, built.path, mode="forward")


# -- device functions ---------------------------------------------------------------------

def _overload():
    """numba's ``overload`` for the CUDA target (numba-cuda's own, else the built-in's)."""
    cuda_module()
    try:
        from numba.cuda.extending import overload as ov      # numba-cuda
        return lambda fn: ov(fn, target="cuda")
    except ImportError:
        from numba.core.extending import overload as ov      # numba's built-in numba.cuda
        return lambda fn: ov(fn, target="cuda")


def _device_fn(b: Built):
    """The generated function as a device function (a Python function on the simulator)."""
    if b.device is None:
        b.device = b.fn if simulator() else cuda_module().jit(device=True)(b.fn)
    return b.device


def device_transform(f: Callable, argnums, mode: str, doc: str) -> Callable:
    """``zyg.grad(f, argnums, target="cuda")``: a function a ``@cuda.jit`` kernel calls."""
    if hasattr(f, "_zyg") or hasattr(f, "_zyg_device"):
        raise UnsupportedSyntax("a device gradient of a zyg transform (a second derivative) is "
                                "not supported on the cuda target")
    f, binder = adapt(f)
    if binder is not None:
        raise UnsupportedSyntax(f"a device gradient of {getattr(f, '__name__', 'f')} cannot bind "
                                "defaults, keywords or a method's object",
                                hint="differentiate a plain function of positional arguments")
    ir = ssa_of(f)
    n = ir.nargs
    _normalise_argnums(argnums, n)
    single = isinstance(argnums, int)
    value = mode == "value_and_grad"
    params = ", ".join(f"a{i}" for i in range(n))
    tup = f"({params}{',' if n == 1 else ''})"
    glob: Dict[str, Any] = {}

    def post(r):
        return (r[0], r[1]) if value else r[1]

    def sim_call(args):
        # the simulator: the generated code as Python, from the simulated thread
        if not simulator():
            raise TypeError(f"{name} is a CUDA device function: call it from a @cuda.jit "
                            "kernel, or map it over arrays with zyg.vmap(..., target='cuda')")
        kinds = [kind_of_runtime(a) for a in args]
        b = build(f, kinds, argnums, backends.get("cuda"))
        return post(_device_fn(b)(*args))
    glob["_sim_call"] = sim_call
    name = _ident(getattr(unwrap(f), "__name__", "f").replace("<lambda>", "lambda")) + \
        ("_vg" if value else "_grad") + "_cuda"
    exec(f"def {name}({params}):\n    return _sim_call({tup})\n", glob)
    stub = glob[name]
    stub.__doc__ = doc
    stub._zyg_device = (f, argnums, mode)
    if simulator():
        return stub

    def typer_impl(types):
        kinds = [kind_of_numba(t) for t in types]
        b = build(f, kinds, argnums, backends.get("cuda"))
        ig = {"_core": _device_fn(b)}
        ret = "(_r[0], _r[1])" if value else "_r[1]"
        exec(f"def impl({params}):\n    _r = _core({params})\n    return {ret}\n", ig)
        return ig["impl"]
    tg = {"_typer_impl": typer_impl}
    exec(f"def typer({params}):\n    return _typer_impl({tup})\n", tg)
    _overload()(stub)(tg["typer"])
    return stub


# -- batches ------------------------------------------------------------------------------

def _array_params(f: Callable, ir=None) -> Dict[int, int]:
    """Parameters of ``f`` that it indexes or asks an array attribute of (it takes arrays
    there), and the dimensions it indexes them with (at least 1).  ``ir``: its SSA IR when
    the caller lowered it itself."""
    from .ssa.prims import Attr, GetItem
    ir = ssa_of(f) if ir is None else ir
    ps = {q.id: k for k, q in enumerate(ir.params[:ir.nargs])}
    out: Dict[int, int] = {}
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            fn = st.expr.fn
            if isinstance(fn, (GetItem, Attr)) and st.expr.args and \
                    getattr(st.expr.args[0], "id", None) in ps:
                k = ps[st.expr.args[0].id]
                nd = sum(c in ("i", "s") for c in fn.spec) if isinstance(fn, GetItem) else 1
                out[k] = max(out.get(k, 1), nd)
    return out


def _is_arraylike(a) -> bool:
    """A numpy array, a device array (anything with ``__cuda_array_interface__``, the
    simulator's arrays)."""
    return isinstance(a, np.ndarray) or hasattr(a, "__cuda_array_interface__") or \
        (hasattr(a, "copy_to_host") and hasattr(a, "shape"))


class _Batch:
    def __init__(self, fn, in_axes, target):
        spec = getattr(fn, "_zyg", None)
        dev = getattr(fn, "_zyg_device", None)
        if spec is not None:
            self.f, self.argnums, self.mode = spec.f, spec.argnums, spec.mode
            if self.mode not in ("grad", "value_and_grad"):
                raise TypeError("zyg.vmap maps zyg.grad, zyg.value_and_grad or a plain function")
        elif dev is not None:
            self.f, self.argnums, self.mode = dev
        else:
            self.f, self.argnums, self.mode = fn, None, "value"
        self.in_axes = in_axes
        self.target = target
        backends.get(target)
        self.kernels: Dict[Any, Any] = {}
        self._takes = None

    def axes(self, args) -> List[Optional[int]]:
        n = len(args)
        if self.in_axes is not None:
            ax = list(self.in_axes) if isinstance(self.in_axes, (tuple, list)) else [self.in_axes] * n
            if len(ax) != n:
                raise ValueError(f"in_axes has {len(ax)} entries for {n} arguments")
            for a, x in zip(ax, args):
                if a not in (None, 0):
                    raise ValueError("in_axes entries are 0 (mapped over the first axis) or None")
                if a == 0 and not _is_arraylike(x):
                    raise ValueError("in_axes says 0 for an argument that is not an array")
            return ax
        if self._takes is None:
            self._takes = _array_params(self.f)
        takes = self._takes
        out = []
        for k, a in enumerate(args):
            if not _is_arraylike(a):
                out.append(None)
            elif k in takes and len(a.shape) <= takes[k]:
                out.append(None)        # a table the function indexes: shared
            else:
                out.append(0)           # where f takes a number, or one dimension more
        if 0 not in out:
            raise ValueError("zyg.vmap found no argument to map over: pass in_axes")
        return out

    def __call__(self, *args):
        ax = self.axes(args)
        sizes = {a.shape[0] for a, x in zip(args, ax) if x == 0}
        if len(sizes) != 1:
            raise ValueError(f"mapped arguments have different lengths {sorted(sizes)}")
        n = sizes.pop()
        kinds = []
        for a, x in zip(args, ax):
            k = kind_of_runtime(a)
            if x == 0:
                nd = len(a.shape) - 1
                k = "float" if nd == 0 and np.dtype(a.dtype).kind == "f" else \
                    "int" if nd == 0 and np.dtype(a.dtype).kind in "iu" else \
                    "bool" if nd == 0 and np.dtype(a.dtype).kind == "b" else \
                    f"{np.dtype(a.dtype).str[1:]}[{nd}]"
            kinds.append(k)
        if self.target == "cuda":
            return self._cuda(args, ax, kinds, n)
        return self._host(args, ax, kinds, n)

    # the value, gradients and the outputs a batch returns
    def _nout(self, nwrt: int) -> int:
        return 1 if self.mode == "value" else (1 + nwrt if self.mode == "value_and_grad" else nwrt)

    def _wrap(self, outs, nwrt):
        if self.mode == "value":
            return outs[0]
        single = isinstance(self.argnums, int)
        grads = outs[-nwrt:]
        g = grads[0] if single else tuple(grads)
        return (outs[0], g) if self.mode == "value_and_grad" else g

    def _lines(self, call: str, nwrt: int, ind: str) -> List[str]:
        """Statements storing one item's results into the output arrays ``_o<k>``."""
        if self.mode == "value":
            return [f"{ind}_o0[i] = {call}"]
        lines = [f"{ind}_r = {call}"]
        k = 0
        if self.mode == "value_and_grad":
            lines.append(f"{ind}_o0[i] = _r[0]")
            k = 1
        if nwrt == 1:
            lines.append(f"{ind}_o{k}[i] = _r[1]")
        else:
            lines += [f"{ind}_o{k + j}[i] = _r[1][{j}]" for j in range(nwrt)]
        return lines

    def _host(self, args, ax, kinds, n):
        backend = backends.get(self.target)
        nargs = len(args)
        params = [f"a{k}" for k in range(nargs)]
        item = ", ".join(f"a{k}[i]" if x == 0 else f"a{k}" for k, x in enumerate(ax))
        if self.mode == "value":
            fn = backend.jit(unwrap(self.f)) if backend.compiled else unwrap(self.f)
            nwrt, stacks, call = 0, [], f"_f({item})"
        else:
            b = build(self.f, kinds, self.argnums, backend)
            fn, nwrt, stacks = b.fn, b.nwrt, b.stacks
            call = f"_f({item}{''.join(f', _b{s}' for s, _ in stacks)})"
        nout = self._nout(nwrt)
        lines = [f"def _batch({', '.join(params + [f'_o{k}' for k in range(nout)] + ['n'])}):"]
        for s, dt in stacks:
            lines.append(f"    _b{s} = np.empty(64, {dt})")
        lines.append("    for i in range(n):")
        lines += self._lines(call, nwrt, "        ")
        for j, (s, _) in enumerate(stacks):
            # (value, grad, *grown): a buffer that grew, or None (transform._grown)
            lines.append(f"        _g{s} = _r[{2 + j}]")
            lines.append(f"        if _g{s} is not None:")
            lines.append(f"            _b{s} = _g{s}")
        glob = {"_f": fn, "np": np}
        exec("\n".join(lines) + "\n", glob)
        runner = glob["_batch"]
        if backend.compiled:
            # keyed by what it calls: a gradient built again (f's reads changed) or the
            # plain function's current IR gets a new runner
            dep = fn if self.mode != "value" else ssa_of(self.f)
            key = (tuple(kinds), tuple(ax), backend.key())
            got = self.kernels.get(key)
            if got is None or got[1] is not dep:
                got = self.kernels[key] = (backend.jit(runner), dep)
            runner = got[0]
        host = [np.asarray(a) if _is_arraylike(a) else a for a in args]
        outs = [np.empty(n, np.float64) for _ in range(nout)]
        runner(*host, *outs, n)
        return self._wrap(outs, nwrt)

    def _cuda(self, args, ax, kinds, n):
        cuda = cuda_module()
        sim = simulator()
        size = tape_size()
        dev_args = []
        on_host = False
        for a in args:
            if isinstance(a, np.ndarray):
                on_host = True
                dev_args.append(cuda.to_device(np.ascontiguousarray(a)))
            else:
                dev_args.append(a)
        rows = None             # the tape's row buffers, once a launch ran out of room
        while True:
            backend = backends.get("cuda").sized(size)
            if rows is not None:
                backend = backend.with_rows()
            kern, nwrt, checked, stacks = self._kernel(kinds, ax, backend)
            nout = self._nout(nwrt)
            outs = [cuda.device_array(n, np.float64) for _ in range(nout)]
            status = cuda.to_device(np.zeros(1, np.int64))
            threads = 64 if sim else 256
            blocks = max(1, (n + threads - 1) // threads)
            kern[blocks, threads](*dev_args, *outs, status, n, *(rows or []))
            need = int(status.copy_to_host()[0]) if checked else 0
            if need == 0:
                break
            grown = (rows[0].shape[0] if rows else size) * 2
            while grown < need:
                grown *= 2
            if ROW_BYTES > 0:
                # the gradient with its tape in rows of buffers allocated here (built the
                # first time a launch runs short): larger rows for more room, no compile
                if rows is None:
                    stacks = self._kernel(kinds, ax, backend.with_rows())[3]
                rows = tape_rows(stacks, grown, n)
                if rows is not None:
                    continue
            if grown > MAX_TAPE_SIZE:
                raise TapeOverflowError(
                    f"a per-thread tape of {size} items was too small for "
                    f"{getattr(unwrap(self.f), '__name__', 'f')} (a run needed {need}); "
                    f"zyg.vmap grows it to {MAX_TAPE_SIZE} at most")
            size = grown
        if on_host:
            outs = [o.copy_to_host() for o in outs]
        return self._wrap(outs, nwrt)

    def _kernel(self, kinds, ax, backend):
        # keyed by what the kernel calls: a gradient built again or the plain function's
        # current IR (f's reads changed: a rebound global) gets a new kernel
        b = build(self.f, kinds, self.argnums, backend) if self.mode != "value" else None
        dep = b if b is not None else ssa_of(self.f)
        key = (tuple(kinds), tuple(ax), backend.key())
        got = self.kernels.get(key)
        if got is not None and got[1] is dep:
            return got[0]
        cuda = cuda_module()
        nargs = len(kinds)
        params = [f"a{k}" for k in range(nargs)]
        item = ", ".join(f"a{k}[i]" if x == 0 else f"a{k}" for k, x in enumerate(ax))
        rows = b.rows if b is not None else []
        bufs = [f"_zt_{s}" for s, _ in rows]
        if b is None:
            fn = unwrap(self.f) if simulator() else cuda.jit(device=True)(unwrap(self.f))
            nwrt, checked = 0, False
            call = f"_f({item})"
        else:
            fn, nwrt, checked = _device_fn(b), b.nwrt, bool(b.stacks)
            # the tape's rows: item i's column
            call = f"_f({', '.join([item] + (['i'] + bufs if rows else []))})"
        nout = self._nout(nwrt)
        lines = [f"def _zyg_batch({', '.join(params + [f'_o{k}' for k in range(nout)] + ['_status', 'n'] + bufs)}):",
                 "    i = cuda.grid(1)",
                 "    if i < n:"]
        lines += self._lines(call, nwrt, "        ")
        if checked:
            lines += ["        if _r[2] > 0:",
                      "            cuda.atomic.max(_status, 0, _r[2])"]
        glob = {"_f": fn, "cuda": cuda, "np": np, "math": __import__("math")}
        exec("\n".join(lines) + "\n", glob)
        kern = cuda.jit(glob["_zyg_batch"])
        got = (kern, nwrt, checked, rows)
        self.kernels[key] = (got, dep)
        return got


def vmap(fn: Callable, in_axes: Union[None, int, Sequence[Optional[int]]] = None, *,
         target: str = "cpu") -> Callable:
    """``fn`` mapped over a batch: ``zyg.vmap(zyg.grad(f))(xs, table)`` is
    ``[zyg.grad(f)(x, table) for x in xs]`` as an array.

    ``fn``: ``zyg.grad(f, argnums)``, ``zyg.value_and_grad(f, argnums)`` (of any target;
    the batch runs on ``target``) or a plain function (its values).  An array passed where
    ``f`` takes a number (or an array of one dimension more than ``f`` indexes) is mapped
    over its first axis; the other arguments are shared.  ``in_axes`` says it explicitly
    (JAX's convention: 0 mapped, None shared; one entry per argument, or one for all).

    ``target="cuda"``: a generated kernel, one thread per item; numpy arguments are copied
    to the device and the results come back as numpy arrays (device arrays in: device
    arrays out).  ``"cpu"``: one compiled numba loop.  ``"python"``: a Python loop.
    Gradients are of float arguments; the results are float64 arrays over the batch (a
    tuple for a tuple of argnums; ``(values, grads)`` for value_and_grad)."""
    if target not in ("cuda", "cpu", "python"):
        backends.get(target)
        raise ValueError(f"zyg.vmap runs on cuda, cpu or python, not {target!r}")
    b = _Batch(fn, in_axes, target)

    def batched(*args):
        return b(*args)
    batched.__doc__ = f"{getattr(fn, '__name__', 'f')} mapped over a batch by zyg ({target})."
    batched._zyg_batch = b
    return batched
