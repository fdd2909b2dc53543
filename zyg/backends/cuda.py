"""The ``cuda`` back end: generated code runs as numba.cuda device code, one thread per call.

What it spells differently from ``cpu`` (``../shared/CUDA_AND_TASKS.md``, section 2):

* the tape (:class:`LocalStacks`): per-thread ``cuda.local.array`` stacks of a size fixed at
  compile time.  Where the transform proved a bound (``StackInit.bound``: no loop pushes, or
  only counted loops of constant trip counts) the stack has exactly that size and needs no
  checks; otherwise it has :attr:`CudaBackend.tape_size` items, and a run that needs more
  keeps going in *overflow mode*: the primal finishes (its value is right), stores past the
  end land on the last slot, the tops keep counting, and the :class:`~zyg.ssa.emit.
  TapeOverflow` test after the primal returns without running the adjoint, with a NaN
  gradient and the room needed (``zyg/pullbacks/transform.py``, ``emit_fused``);
* no allocation, no growth, no calls back into Python: such programs are refused before
  code is generated (``zyg/cuda.py``), and the nodes that would need them raise here too;
* helpers of generated code are ``cuda.jit(device=True)`` functions.

A kernel's adjoint that zyg launches itself may keep its unbounded stacks in rows of a
buffer the launcher allocates instead (:class:`RowStacks`).

numba.cuda is imported lazily (:func:`cuda_module`), after the numpy 2.5 shim that
numba-cuda 0.30.x needs (:func:`numpy_shim`).  Under numba's simulator
(``NUMBA_ENABLE_CUDASIM=1``) generated device code runs as Python: ``cuda.local.array``
is then a numpy array (:class:`_SimCuda`).
"""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, List

import numpy as np

from ..errors import UnsupportedSyntax
from ..pullbacks.tape import STACKS
from .base import Backend
from .storage import Stacks

#: items per stack of a per-thread tape whose size the transform could not bound
DEFAULT_TAPE_SIZE = 256
#: the largest stack sized by the transform's bound; a larger bound (a long counted loop)
#: gets the checked per-thread tape instead (local memory is 512 KiB per thread at most)
MAX_STATIC = 16384
#: "no limit": the room of a stack once it overflowed (every later check passes)
_UNBOUNDED = 1 << 62
#: how a device gradient of float arguments is made: ``reverse`` (a per-thread tape),
#: ``forward`` (one tangent pass per argument, no tape), ``auto`` (zyg/cuda.py chooses)
GRADIENT_MODES = ("auto", "reverse", "forward")


def numpy_shim() -> bool:
    """numba-cuda 0.30.x registers an overload of ``np.row_stack`` when it first compiles,
    and numpy 2.5 removed that function (every kernel then fails with an AttributeError):
    alias it to ``np.vstack`` (what it was) where it is missing.  Returns whether the shim
    was applied."""
    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack
    return True


def simulator() -> bool:
    """Is numba's CUDA simulator in force (``NUMBA_ENABLE_CUDASIM=1`` before numba was
    imported)?"""
    from numba import config
    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def cuda_module():
    """``numba.cuda``, imported after the numpy shim."""
    numpy_shim()
    from numba import cuda
    return cuda


class _SimLocal:
    @staticmethod
    def array(shape, dtype):
        return np.zeros(shape, dtype)


class _SimCuda:
    """What generated device code calls ``cuda`` under the simulator: the simulator's own
    ``cuda.local`` exists only inside a kernel's swapped module, which several simulated
    threads swap in and out of shared module globals; a fixed object avoids that race."""
    local = _SimLocal()


def _max2(a, b):
    return a if a > b else b


def _min2(a, b):
    return a if a < b else b


_SIM_ATOMIC_LOCK = __import__("threading").Lock()


def _atomic_add_sim(a, idx, v):
    """``a[idx] += v`` as one step for the simulator's threads (Python threads)."""
    with _SIM_ATOMIC_LOCK:
        a[idx] += v


_DEVICE_ATOMIC: Dict[int, Any] = {}


def _atomic_add_device(ndim: int):
    """A device function ``atomic_add(a, idx, v)``: ``cuda.atomic.add`` (idx a tuple of
    ``ndim`` integers; a 1-D array takes a plain integer, numba.cuda refuses a 1-tuple)."""
    got = _DEVICE_ATOMIC.get(ndim)
    if got is None:
        glob = {"cuda": cuda_module()}
        at = "idx[0]" if ndim == 1 else "idx"
        exec(f"def atomic_add(a, idx, v):\n    cuda.atomic.add(a, {at}, v)\n", glob)
        got = _DEVICE_ATOMIC[ndim] = glob["cuda"].jit(device=True)(glob["atomic_add"])
    return got


class LocalStacks(Stacks):
    """The tape on the cuda back end: per stack a ``cuda.local.array`` ``_<s>s`` of a size
    fixed at compile time, its room ``_<s>cap``, its top ``_<s>sp`` and the room a counted
    loop asked for ``_<s>want``.  One instance renders one generated module (it remembers
    each stack's size and whether the transform bounded it)."""

    def __init__(self, tape_size: int):
        self.tape_size = tape_size
        self.size: Dict[str, int] = {}
        self.checked: Dict[str, bool] = {}

    @staticmethod
    def exact(n) -> bool:
        """Whether the stack of ``StackInit`` node ``n`` gets exactly the room the transform
        proved it needs (no checks, no overflow)."""
        return n.bound is not None and n.bound <= MAX_STATIC

    def _slot(self, s: str, offset) -> str:
        e = f"_{s}sp" if offset is None else f"_{s}sp + {offset}"
        if self.checked.get(s, True):
            # overflow mode writes past the end onto the last slot (the run is discarded)
            last = self.size[s] - 1
            return f"_{s}s[{e} if {e} < {last} else {last}]"
        return f"_{s}s[{e}]"

    def _StackInit(self, n) -> List[str]:
        s = n.stack
        exact = self.exact(n)
        size = n.bound if exact else self.tape_size
        self.size[s] = size
        self.checked[s] = not exact
        return [f"_{s}s = cuda.local.array({size}, {STACKS[s][0]})", f"_{s}cap = {size}",
                f"_{s}sp = 0", f"_{s}want = 0"]

    def _Store(self, n) -> List[str]:
        return [f"{self._slot(n.stack, n.offset)} = {n.value}"]

    def _Advance(self, n) -> List[str]:
        return [f"_{n.stack}sp += {n.count}"]

    def _Pop(self, n) -> List[str]:
        return [f"_{n.stack}sp -= {n.count}"]

    def _Peek(self, n) -> List[str]:
        # the adjoint runs only on a complete tape: plain reads
        off = f"_{n.stack}sp" if n.offset is None else f"_{n.stack}sp + {n.offset}"
        return [f"{n.name} = _{n.stack}s[{off}]"]

    def _PushArray(self, n) -> List[str]:
        raise UnsupportedSyntax("an array recorded on the tape cannot live in CUDA device code "
                                "(a per-thread tape holds scalars)")

    _PopArray = _PushArray

    def _Grow(self, n) -> List[str]:
        # a local array cannot grow: from here on the stack is in overflow mode
        return [f"_{n.stack}cap = {_UNBOUNDED}"]

    def _Capacity(self, n) -> List[str]:
        return ["pass"]

    def _TapeOverflow(self, n) -> List[str]:
        return ["if " + " or ".join(f"_{s}sp > {self.size[s]}" for s in n.stacks) + ":"]


class RowStacks(LocalStacks):
    """The tape of a kernel's adjoint that zyg launches itself (``zyg/cuda_kernel.py``):
    a stack the transform bounded is a local array as in :class:`LocalStacks`; any other is
    the thread's column ``_zrow`` of a buffer the launcher allocates, ``_zt_<s>[slot,
    thread]`` (one column per thread of the grid; a slot's items of consecutive threads are
    adjacent, so a warp's stores and loads are coalesced).  Its room is the buffer's first
    dimension, a value at run time: a launch short of room is launched again with larger
    buffers and the same compiled kernel."""

    def __init__(self, tape_size: int):
        super().__init__(tape_size)
        self.rows: Dict[str, bool] = {}

    def _slot(self, s: str, offset) -> str:
        if not self.rows.get(s):
            return super()._slot(s, offset)
        e = f"_{s}sp" if offset is None else f"_{s}sp + {offset}"
        return f"_{s}s[{e} if {e} < _{s}rows else _{s}rows - 1, _zrow]"

    def _StackInit(self, n) -> List[str]:
        s = n.stack
        if self.exact(n):
            return super()._StackInit(n)
        self.rows[s] = True
        self.checked[s] = True
        return [f"_{s}s = _zt_{s}", f"_{s}rows = _zt_{s}.shape[0]", f"_{s}cap = _{s}rows",
                f"_{s}sp = 0", f"_{s}want = 0"]

    def _Peek(self, n) -> List[str]:
        if not self.rows.get(n.stack):
            return super()._Peek(n)
        off = f"_{n.stack}sp" if n.offset is None else f"_{n.stack}sp + {n.offset}"
        return [f"{n.name} = _{n.stack}s[{off}, _zrow]"]

    def _TapeOverflow(self, n) -> List[str]:
        return ["if " + " or ".join(f"_{s}sp > _{s}rows" if self.rows.get(s) else
                                    f"_{s}sp > {self.size[s]}" for s in n.stacks) + ":"]


class CudaBackend(Backend):
    """Device code for numba.cuda: one call per thread, a per-thread tape."""
    name = "cuda"
    compiled = True
    native_byte_order = True
    nd_masks = False
    # no retry path on a device: the zero-cotangent tests are always generated
    zero_guards_first = True
    strong_scalars = True
    #: the tape has a fixed size (:class:`LocalStacks`); emit_fused then takes no buffers,
    #: reports overflow and never splits the gradient into two functions
    bounded_tape = True
    host = False

    def __init__(self, tape_size: int = DEFAULT_TAPE_SIZE, mode: str = "auto", rows: bool = False):
        super().__init__()
        if mode not in GRADIENT_MODES:
            raise ValueError(f"a device gradient's mode is one of {', '.join(GRADIENT_MODES)}, "
                             f"not {mode!r}")
        self.tape_size = int(tape_size)
        #: how device gradients of numbers are made (zyg.cuda.set_gradient_mode)
        self.mode = mode
        #: the stacks the transform could not bound are rows of buffers the caller passes
        #: in (:class:`RowStacks`): for code that zyg launches itself, whose launcher
        #: allocates them (kernel adjoints, ``zyg.vmap`` batches)
        self.rows = rows
        self.storage = self._storage()

    def _storage(self) -> LocalStacks:
        return RowStacks(self.tape_size) if self.rows else LocalStacks(self.tape_size)

    def _like(self, tape_size: int, rows: bool) -> "CudaBackend":
        return CudaBackend(tape_size, self.mode, rows)

    def sized(self, tape_size: int) -> "CudaBackend":
        """This back end with another size of the unbounded per-thread tape."""
        return self if tape_size == self.tape_size else self._like(tape_size, self.rows)

    def with_rows(self) -> "CudaBackend":
        """This back end with the stacks it cannot bound in rows of buffers passed in."""
        return self if self.rows else self._like(self.tape_size, True)

    def tape_rows(self, init) -> bool:
        return self.rows and not LocalStacks.exact(init)

    def tag(self) -> str:
        sim = "simulator" if simulator() else "device"
        rows = "; the rest in rows of buffers passed in" if self.rows else ""
        return (f"# target cuda ({sim}): per-thread tape of {self.tape_size} items where "
                f"unbounded{rows}; gradients of numbers: {self.mode}")

    def prepare(self) -> None:
        cuda_module()

    def jit(self, fn: Callable, **kw) -> Callable:
        if simulator():
            return fn
        return cuda_module().jit(device=True)(fn)

    def vectorize(self, kernel: Callable, python: Callable) -> Callable:
        # array helpers are bound in every module with arrays, and never called from device
        # code (array-valued operations are refused before generation, zyg/cuda.py)
        return python

    def wrap(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType) and not \
                (getattr(obj, "__module__", "") or "").startswith("numpy"):
            return self.helper(obj)
        return obj

    def exec_source(self, src: str, label: str, glob: Dict[str, Any]) -> None:
        if simulator():
            # the simulator runs the code as Python: with the device's float semantics
            # (numpy's: 0.5 / 0.0 is inf, as on a GPU, not a ZeroDivisionError)
            from .. import numerics
            glob.update(numerics.HELPERS)
            exec(numerics.python_semantics(src, label, glob), glob)
            return
        exec(compile(src, label, "exec"), glob)

    def function(self, src: str, label: str, glob: Dict[str, Any], name: str,
                 uncacheable: bool = False) -> Callable:
        self.exec_source(src, label, glob)
        for k, v in list(glob.items()):
            if isinstance(v, types.FunctionType) and k != name and not k.startswith("__"):
                glob[k] = self.wrap(v)
        return self.jit(glob[name])

    def placeholder(self, kind: str):
        """An array variable's value before its definition runs: a one-element local array
        of its dtype and dimensions (device code cannot allocate ``np.zeros``)."""
        from ..ssa.analysis import array_dtype, array_ndim, is_array
        if not is_array(kind):
            return None
        nd = array_ndim(kind)
        shape = "1" if nd == 1 else "(" + ", ".join(["1"] * nd) + ")"
        return f"cuda.local.array({shape}, np.{array_dtype(kind)})"

    def atomic_add(self, ndim: int) -> Callable:
        """What generated device code calls for an atomic ``a[idx] += v`` (``cuda.atomic.add``;
        under the simulator, a locked Python addition)."""
        return _atomic_add_sim if simulator() else _atomic_add_device(ndim)

    def call_python(self, stmt: str, outs, glob: Dict[str, Any]):
        raise UnsupportedSyntax("a call back into Python (a recursive call, zyg.checkpoint, a "
                                "hook) cannot run in CUDA device code")

    def load(self, code, ns: Dict[str, Any], names: List[str], stem: str):
        # a fresh storage per module: it remembers the sizes of the stacks it declared
        self.storage = self._storage()
        ns = dict(ns)
        ns["cuda"] = _SimCuda() if simulator() else cuda_module()
        ns["np"] = np
        if not simulator():
            # numba's built-in numba.cuda types max() and min() through an overload of
            # *args that its device compiler rejects ("Signature mismatch"); generated code
            # calls them with two numbers (tape room, trip counts): plain device functions
            ns["max"] = self.helper(_max2)
            ns["min"] = self.helper(_min2)
        return super().load(code, ns, names, stem)

    def finish(self, f: Callable, cache: bool, code=None) -> Callable:
        # the device function is compiled where it is called (zyg/cuda.py)
        return f
