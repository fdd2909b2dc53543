"""The launch tape, ``zyg.cuda.Tape`` (issue 25): NVIDIA Warp's ``wp.Tape`` for numba.cuda
kernels, with overwritten buffers handled.

::

    with zyg.cuda.Tape() as tape:
        for t in range(T):
            step[blocks, threads](u0, u1, n)
            step[blocks, threads](u1, u0, n)
    tape.backward(grads=[(u0, du_final)])
    du_initial = tape.gradient(u0)

How:

* **Recording.** While a tape is active in a thread, the launch point of kernels is
  wrapped: numba.cuda's ``CUDADispatcher.call`` (what ``kernel[blocks, threads](...)``
  calls), and under the simulator ``FakeCUDAKernel.__call__``.  The wrapper is installed
  on the class when the first tape in any thread is entered and removed when the last one
  exits; it records only launches made by a thread whose innermost active tape it finds
  (:func:`_current`), and lets every other launch through untouched (other threads,
  device functions, the tape's own adjoint launches).  ``tape.launch(kernel, config,
  *args)`` records explicitly.  Recording refuses, before the launch runs, a kernel whose
  adjoint zyg cannot build (the error ``zyg.vjp`` gives, at the kernel's line).
* **Saves.** A kernel's effects come from zyg's SSA of it (:func:`effects`): the
  parameters it writes (``SetItem`` and ``AtomicAdd`` bases) and those it reads.  Before a
  launch runs, each array it writes is copied (on the device for device arrays) **if that
  launch or an earlier recorded one reads it**; otherwise nothing in backward needs its
  old contents (``Tape(save_all=True)`` saves every written array).
* **Backward.** Every array is keyed by its memory (address, shape, strides, dtype), so
  one shadow serves every launch that passes it.  The arrays that launches write are
  copied (the forward's final state); then for each launch, last first: the arrays it
  wrote that were saved are restored to their contents before it, its adjoint
  (``zyg.vjp(kernel)``) runs with the shadows, and the saved arrays are restored once
  more, so that earlier launches' adjoints see the contents their launches saw.  Last,
  the final state is put back.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np

from . import cuda as _zcuda
from . import cuda_kernel as ck
from .cuda_kernel import _copy, _host, _restore
from .backends.cuda import cuda_module, simulator
from .cuda import kind_of_runtime, tape_size
from .errors import ZygError
from .ssa.ir import Branch, Return
from .ssa.prims import Attr, GetItem, SetItem


class TapeError(ZygError):
    """A misuse of :class:`Tape`: backward twice, a gradient of an array no launch took,
    overlapping views of one buffer."""


# -- which arguments a kernel reads and writes ----------------------------------------------

_EFFECTS: Dict[Any, Tuple[frozenset, frozenset]] = {}


def effects(py: Callable) -> Tuple[frozenset, frozenset]:
    """``(written, read)``: the indices of kernel ``py``'s parameters it may write into and
    may read the contents of, from zyg's SSA of it.  Conservative: a parameter reaches a
    statement through block arguments too; one used otherwise than as the base of an
    element read or write (or ``.shape``) counts as both; an element write into something
    not traced to a parameter counts as a write into every parameter."""
    got = _EFFECTS.get(py)
    if got is not None:
        return got
    ir = ck.kernel_ir(py)
    n = ir.nargs
    alias: Dict[int, Set[int]] = {p.id: {k} for k, p in enumerate(ir.params[:n])}
    changed = True
    while changed:
        changed = False
        for blk in ir.iter_blocks():
            if blk.term is None:
                continue
            for target, args in blk.term.successors():
                for prm, a in zip(ir.blocks[target].params, args):
                    s = alias.get(getattr(a, "id", None))
                    if s:
                        cur = alias.setdefault(prm.id, set())
                        if not s <= cur:
                            cur |= s
                            changed = True
    every = set(range(n))
    written: Set[int] = set()
    read: Set[int] = set()
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            fn = st.expr.fn
            for j, a in enumerate(st.expr.operands()):
                s = alias.get(getattr(a, "id", None))
                if j == 0 and isinstance(fn, SetItem):
                    written |= s if s else every
                    continue
                if not s:
                    continue
                if isinstance(fn, Attr) and fn.attr in ("shape", "size", "ndim"):
                    continue
                read |= s
                if not (j == 0 and isinstance(fn, GetItem)):
                    written |= s            # passed on, to a helper say: it may write
        t = blk.term
        for a in ([t.cond] if isinstance(t, Branch) else [t.value] if isinstance(t, Return) else []):
            read |= alias.get(getattr(a, "id", None), set())
    got = (frozenset(written), frozenset(read))
    _EFFECTS[py] = got
    return got


# -- arrays: keys, copies, zeros ------------------------------------------------------------

def _is_float(a) -> bool:
    return ck._is_array(a) and np.dtype(a.dtype).kind == "f"


def array_key(a) -> Tuple:
    """An array's memory: (space, address, shape, strides, dtype).  Two objects viewing the
    same elements the same way (a device array passed twice, a numpy array and ``a[:]``)
    have one key."""
    if isinstance(a, np.ndarray):
        ai = a.__array_interface__
        return ("host", ai["data"][0], tuple(a.shape), a.strides, a.dtype.str)
    inner = getattr(type(a), "__mro__", ())
    if any(c.__name__ == "FakeCUDAArray" for c in inner) and isinstance(getattr(a, "_ary", None),
                                                                       np.ndarray):
        b = a._ary                  # the simulator's device array wraps a numpy array
        return ("device", b.__array_interface__["data"][0], tuple(b.shape), b.strides, b.dtype.str)
    cai = getattr(a, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        dt = np.dtype(a.dtype)
        strides = cai.get("strides")
        if strides is None:
            strides = _c_strides(tuple(cai["shape"]), dt.itemsize)
        return ("device", int(cai["data"][0] or 0), tuple(cai["shape"]), tuple(strides), dt.str)
    return ("object", id(a), tuple(a.shape), None, np.dtype(a.dtype).str)


def _c_strides(shape, itemsize) -> Tuple[int, ...]:
    out, s = [], itemsize
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out))


def _extent(key) -> Optional[Tuple[int, int]]:
    """The bytes [low, high) a key's elements span (None: unknown or empty)."""
    space, ptr, shape, strides, dt = key
    if strides is None or 0 in shape:
        return None
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + np.dtype(dt).itemsize
    return lo, hi


def _zeros_like(a):
    """A zero shadow of ``a``'s kind (a numba device array for any device array)."""
    if isinstance(a, np.ndarray):
        return np.zeros(a.shape, a.dtype)
    return cuda_module().to_device(np.zeros(tuple(a.shape), np.dtype(a.dtype)))


# -- interception of launches ---------------------------------------------------------------

_LOCAL = threading.local()
_PATCH_LOCK = threading.Lock()
_PATCHED: List[Tuple[type, str, bool, Any]] = []     # (class, name, had its own, original)
_USERS = 0


def _stack() -> List["Tape"]:
    st = getattr(_LOCAL, "tapes", None)
    if st is None:
        st = _LOCAL.tapes = []
    return st


def _current() -> Optional["Tape"]:
    """The tape that records this thread's launches now (none inside the tape's own
    launches)."""
    if getattr(_LOCAL, "quiet", 0):
        return None
    st = getattr(_LOCAL, "tapes", None)
    return st[-1] if st else None


class _Quiet:
    """Launches made inside are not recorded (the recorded launch itself, adjoints)."""

    def __enter__(self):
        _LOCAL.quiet = getattr(_LOCAL, "quiet", 0) + 1

    def __exit__(self, *exc):
        _LOCAL.quiet -= 1


def _hooks() -> List[Tuple[type, str, Callable]]:
    """(class, method, wrapper maker) of the launch points of the numba.cuda in force."""
    cuda_module()
    if simulator():
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        def sim(orig):
            def __call__(self, *args):
                tape = _current()
                if tape is None or getattr(self, "_device", False) or self.grid_dim is None:
                    return orig(self, *args)
                cfg = (self.grid_dim, self.block_dim)
                if getattr(self, "dynshared_size", 0):
                    cfg = cfg + (0, self.dynshared_size)
                return tape._record(self, cfg, args, lambda: orig(self, *args))
            return __call__
        return [(FakeCUDAKernel, "__call__", sim)]
    from numba.cuda.dispatcher import CUDADispatcher

    def dev(orig):
        # numba's built-in target calls call(args, griddim, blockdim, stream, sharedmem);
        # NVIDIA's numba-cuda calls call(args, launch_config)
        def call(self, args, *rest):
            tape = _current()
            if tape is None:
                return orig(self, args, *rest)
            if len(rest) == 1 and hasattr(rest[0], "griddim"):
                lc = rest[0]
                griddim, blockdim = lc.griddim, lc.blockdim
                stream, shared = getattr(lc, "stream", 0), getattr(lc, "sharedmem", 0)
            else:
                griddim, blockdim = rest[0], rest[1]
                stream = rest[2] if len(rest) > 2 else 0
                shared = rest[3] if len(rest) > 3 else 0
            cfg = (griddim, blockdim) + ((stream, shared) if stream or shared else ())
            return tape._record(self, cfg, tuple(args), lambda: orig(self, args, *rest))
        return call
    return [(CUDADispatcher, "call", dev)]


def _install() -> None:
    global _USERS
    with _PATCH_LOCK:
        if _USERS == 0:
            for cls, name, make in _hooks():
                own = name in cls.__dict__
                orig = getattr(cls, name)
                _PATCHED.append((cls, name, own, cls.__dict__.get(name)))
                setattr(cls, name, make(orig))
        _USERS += 1


def _uninstall() -> None:
    global _USERS
    with _PATCH_LOCK:
        _USERS -= 1
        if _USERS == 0:
            while _PATCHED:
                cls, name, own, orig = _PATCHED.pop()
                if own:
                    setattr(cls, name, orig)
                else:
                    delattr(cls, name)


def intercepting() -> bool:
    """Is the launch point wrapped now (a tape active in some thread)?"""
    return _USERS > 0


# -- the tape -------------------------------------------------------------------------------

class _Launch:
    __slots__ = ("kernel", "adjoint", "config", "args", "keys", "saves")

    def __init__(self, kernel, adjoint, config, args, keys, saves):
        self.kernel = kernel
        self.adjoint = adjoint      # zyg.vjp(kernel)
        self.config = config
        self.args = args
        self.keys = keys            # the array key of each argument (None: not an array)
        self.saves = saves          # key -> contents before the launch, of what it wrote


class Tape:
    """The launches of ``@cuda.jit`` kernels made inside ``with zyg.cuda.Tape() as
    tape:``, and their adjoints.

    * ``tape.backward(grads=[(array, cotangent), ...])`` (or a dict, for hashable device
      arrays) launches the recorded kernels' adjoints, last first, with one shadow per
      distinct float array, seeded with the cotangents of the arrays' final contents;
    * ``tape.gradient(array)`` is then the cotangent of ``array``'s contents before the
      first recorded launch: a numpy array for a numpy array, a device array for a device
      array (the tape's own shadow: copy it to keep it past ``zero``);
    * ``tape.zero()`` zeroes the gradients (``backward`` may then run again, with other
      cotangents); ``tape.reset()`` forgets the launches too.

    Arrays that launches overwrite are saved before the launch (on the device), so
    ping-pong buffers in a time loop give the right gradient.  Between the recorded
    launches and ``backward`` the arrays must not be changed other than by recorded
    launches; ``backward`` leaves them as the forward left them.
    ``save_all=True`` saves every array a launch writes, not only those read before."""

    def __init__(self, *, save_all: bool = False):
        self.save_all = save_all
        self.launches: List[_Launch] = []
        self._arrays: Dict[Tuple, Any] = {}      # key -> an array object with those elements
        self._read: Set[Tuple] = set()           # keys some recorded launch reads
        self._written: Set[Tuple] = set()        # keys some recorded launch writes
        self._adjoints: Dict[int, Tuple[Any, Any]] = {}
        self._shadows: Dict[Tuple, Any] = {}
        self._done = False

    # -- recording ----------------------------------------------------------------------

    def __enter__(self) -> "Tape":
        if self in _stack():
            raise TapeError("this tape is already recording")
        _install()
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        st = _stack()
        if st and st[-1] is self:
            st.pop()
        elif self in st:
            st.remove(self)
        _uninstall()

    def launch(self, kernel, config, *args) -> None:
        """Launch ``kernel[config](*args)`` and record it (inside a ``with`` block or not)."""
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise TypeError("tape.launch(kernel, (blocks, threads), *args)")
        self._record(kernel, config, tuple(args), lambda: kernel[config](*args))

    def _adjoint(self, kernel):
        got = self._adjoints.get(id(kernel))
        if got is None or got[0] is not kernel:
            if not ck._is_kernel(kernel):
                raise TypeError(f"a tape records launches of @cuda.jit kernels, not {kernel!r}")
            got = self._adjoints[id(kernel)] = (kernel, ck.vjp(kernel))
        return got[1]

    def _record(self, kernel, config, args, run: Callable[[], Any]):
        with _Quiet():
            dk = self._adjoint(kernel)            # not a kernel: zyg.vjp's TypeError
            kinds = [kind_of_runtime(a) for a in args]
            ck.build(kernel, kinds, tape_size())  # what its adjoint refuses, at the line
            written, read = effects(dk.py)
            keys: List[Optional[Tuple]] = []
            for a in args:
                keys.append(self._key(a) if ck._is_array(a) else None)
            for i in read:
                if i < len(keys) and keys[i] is not None:
                    self._read.add(keys[i])
            saves: Dict[Tuple, Any] = {}
            for i in sorted(written):
                k = keys[i] if i < len(keys) else None
                if k is None or k in saves:
                    continue
                self._written.add(k)
                if self.save_all or k in self._read:
                    saves[k] = _copy(args[i])
            got = run()
            self.launches.append(_Launch(kernel, dk, config, list(args), keys, saves))
            return got

    def _key(self, a) -> Tuple:
        k = array_key(a)
        if k not in self._arrays:
            ext = _extent(k)
            if ext is not None:
                for o in self._arrays:
                    e = _extent(o)
                    if o[0] == k[0] and e is not None and e[0] < ext[1] and ext[0] < e[1]:
                        raise TapeError(
                            "a recorded launch takes an array that overlaps another one a "
                            f"launch took (shape {k[2]} at {hex(k[1])}, shape {o[2]} at "
                            f"{hex(o[1])}): the tape keys arrays by their memory and cannot "
                            "give overlapping views one gradient",
                            ) from None
            self._arrays[k] = a
        return k

    # -- backward -----------------------------------------------------------------------

    def backward(self, grads=None) -> None:
        """Launch the adjoints of the recorded launches, last first.  ``grads``: the
        cotangents of arrays' final contents, as ``[(array, cotangent), ...]`` or a dict
        ``{array: cotangent}`` (device arrays are hashable, numpy arrays are not)."""
        if self._done:
            raise TapeError("tape.backward() was already called on this tape: call "
                            "tape.zero() to run it again with fresh gradients, or "
                            "tape.reset() to record new launches")
        pairs = list(grads.items()) if isinstance(grads, dict) else list(grads or [])
        for p in pairs:
            if not isinstance(p, tuple) or len(p) != 2:
                raise TypeError("grads: a dict {array: cotangent} or a list of "
                                "(array, cotangent) pairs")
        for k, a in self._arrays.items():
            if _is_float(a) and k not in self._shadows:
                self._shadows[k] = _zeros_like(a)
        seeds: Dict[Tuple, np.ndarray] = {}
        for a, cot in pairs:
            k = self._known(a, "grads")
            s = self._shadows[k]
            c = np.broadcast_to(_host(cot), tuple(s.shape)).astype(np.dtype(s.dtype))
            seeds[k] = seeds[k] + c if k in seeds else c
        for k, c in seeds.items():
            _restore(self._shadows[k], np.ascontiguousarray(c))
        with _Quiet():
            final = {k: _copy(self._arrays[k]) for k in self._written}
            for L in reversed(self.launches):
                for k, c in L.saves.items():
                    _restore(self._arrays[k], c)
                full = []
                for a, k in zip(L.args, L.keys):
                    full.append(a)
                    if k is not None and _is_float(a):
                        full.append(self._shadows[k])
                L.adjoint[L.config](*full)
                for k, c in L.saves.items():
                    _restore(self._arrays[k], c)
            for k, c in final.items():
                _restore(self._arrays[k], c)
        self._done = True

    def _known(self, a, where: str) -> Tuple:
        if not ck._is_array(a):
            raise TypeError(f"{where}: {type(a).__name__} is not an array")
        k = array_key(a)
        if k not in self._arrays:
            raise TapeError(f"{where}: an array of shape {tuple(a.shape)} that no recorded "
                            "launch took (the tape knows arrays by their memory: pass the "
                            "array the kernels were launched with)")
        if not _is_float(a):
            raise TapeError(f"{where}: an array of dtype {a.dtype} has no gradient (only "
                            "float arrays take shadows)")
        return k

    def gradient(self, array):
        """The cotangent of ``array``'s contents before the first recorded launch (after
        :meth:`backward`), of ``array``'s kind: numpy or device array."""
        k = self._known(array, "tape.gradient")
        if not self._done:
            raise TapeError("tape.gradient(): call tape.backward() first")
        return self._shadows[k]

    def zero(self) -> None:
        """Zero the gradients; ``backward`` may run again (with other cotangents)."""
        for s in self._shadows.values():
            if isinstance(s, np.ndarray):
                s[...] = 0
            else:
                s.copy_to_device(np.zeros(tuple(s.shape), np.dtype(s.dtype)))
        self._done = False

    def reset(self) -> None:
        """Forget the launches, the saved arrays and the gradients."""
        self.launches = []
        self._arrays = {}
        self._read = set()
        self._written = set()
        self._shadows = {}
        self._done = False


# zyg.cuda.Tape: set here, since zyg.cuda cannot import this module (zyg.cuda_kernel, which
# this module needs, imports zyg.cuda)
_zcuda.Tape = Tape
_zcuda.TapeError = TapeError
