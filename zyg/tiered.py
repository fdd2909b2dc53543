"""Tiered first calls: the python target answers while the cpu code compiles.

A cpu gradient's first call waits for numba (a median of ~4 s on the real-code corpus,
``benchmarks/results/first-call.md``); the python target runs the same generated program
in ~0.02 s plus its run time.  With tiering on (``zyg.set_tiered(True)`` or
``ZYG_TIERED=1``), a call of ``grad(f)`` / ``value_and_grad(f)`` (target ``"cpu"``) that
finds no compiled code for its argument types:

* starts building and compiling the cpu code in a background thread, which runs it once
  on private copies of the arguments (that is how numba compiles it: for the types of a
  call) and then installs it where later calls find it;
* runs the python target in a worker thread, on copies of the arguments, and waits for
  whichever finishes first:

  - the python run: its result is returned, and what it wrote into its copies of the
    argument arrays is copied into the caller's arrays (the function's writes, as the
    compiled code would have made them);
  - the cpu build: the python run is stopped (an exception raised in its thread: it only
    ever touched its copies) and the compiled code runs on the caller's arguments.

  A python run that raises is not trusted to speak for the cpu code: the call waits for
  the build and runs the compiled code, which raises its own error or answers.

The two targets run one generated program (the tests check that they agree), so a tiered
call returns what the compiled one does, up to rounding where numba's and numpy's
elementary functions or summation orders differ in the last bits.

Only calls that can be run twice without a visible difference are tiered; the others take
the ordinary path (compile, then run):

* the function (and every function it calls) has no effect but writing into its argument
  arrays: no ``print``, no random numbers (numba's and numpy's generators are distinct),
  no MPI, no call into Python code (object mode) or a user rule, and no write into any
  array where it reads a global or captured array (those are not copied);
* the arguments are numbers, arrays and tuples of them, or dicts of those (taken as
  records); no lists (whose contents a function may change), no two arrays sharing memory
  (copies would undo the aliasing), no function passed (its code is not checked);
  arguments left at ``None`` are bound into the code, and the rest tiered.

If the background build fails, the error is raised by the first call that finds it
(after a python answer, the next call).  ``zyg.tiered.why_not(f)`` says why a function is
not tiered.
"""
from __future__ import annotations

import builtins
import ctypes
import math
import os
import threading
from typing import Any, Dict, List, Optional

import numpy as np

from .compile import LOAD_LOCK
from .errors import ZygError

_ON = [os.environ.get("ZYG_TIERED", "0") not in ("", "0")]

#: returned by :func:`call` when the call takes the ordinary path
NO = object()

#: how tiered calls were answered: by the python target, or by the compiled code once the
#: build won the race (the python run stopped) or the python run raised
STATS = {"python": 0, "preempted": 0, "python_raised": 0}

# for tests: events the background build / the python run wait for before starting
_HOLD_BUILD: List[Optional[threading.Event]] = [None]
_HOLD_PYTHON: List[Optional[threading.Event]] = [None]


def set_tiered(on: bool = True) -> None:
    """Turn tiered first calls on or off (see :mod:`zyg.tiered`); the default is off, or
    on when the environment sets ``ZYG_TIERED=1``."""
    _ON[0] = bool(on)


def enabled() -> bool:
    return _ON[0]


# -- which functions may be run twice ---------------------------------------------------

_PURE_BUILTINS = {getattr(builtins, n) for n in (
    "abs", "all", "any", "bool", "complex", "divmod", "enumerate", "float", "int", "isinstance",
    "len", "max", "min", "pow", "range", "reversed", "round", "sorted", "sum", "tuple", "zip",
    "slice", "hasattr", "getattr", "type", "iter", "next", "map", "filter", "list")}
_PURE_MODULES = ("numpy", "math", "cmath", "operator", "_operator", "scipy.special",
                 "scipy.linalg", "numba.np", "numba.misc.special", "zyg.ssa", "zyg.rules",
                 "zyg.numerics", "zyg.nested.gradcall")
_IMPURE_MODULES = ("numpy.random", "numba.np.random", "numba_mpi", "mpi4py", "zyg.tasks.mpi")


def _module_of(fn: Any) -> str:
    if isinstance(fn, np.ufunc):
        return "numpy"
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type(math)):
        # a bound method: numpy's random generators are the case that matters
        return type(owner).__module__ or ""
    return getattr(fn, "__module__", None) or ""


def _under(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def _callee_reason(fn: Any, seen: set) -> Optional[str]:
    """None where calling ``fn`` twice (on copies) is invisible, else why not."""
    from .ssa.ir import callee_name
    from .ssa.prims import Prim, Recursive, is_namedtuple_class
    if getattr(fn, "_zyg_prints", False):
        return "it prints"
    if getattr(fn, "_zyg_kind", None) is not None and getattr(fn, "__module__", None) is None:
        return None         # zyg's raise / assert helpers (zyg/ssa/raising.py)
    if isinstance(fn, Recursive):
        return _function_reason(getattr(fn, "fn", None), seen)
    if isinstance(fn, Prim):
        mod = type(fn).__module__
        return None if _under(mod, _PURE_MODULES) else f"it calls {callee_name(fn)}"
    if isinstance(fn, np.ufunc):
        return None
    try:
        if fn in _PURE_BUILTINS:
            return None
    except TypeError:       # unhashable
        pass
    mod = _module_of(fn)
    if _under(mod, _IMPURE_MODULES):
        return f"it calls {callee_name(fn)}"
    if isinstance(fn, type):
        if fn.__module__ == "builtins" or _under(fn.__module__, ("numpy",)) or is_namedtuple_class(fn):
            return None
        return f"it calls {callee_name(fn)}"
    if mod == "builtins":
        return f"it calls {callee_name(fn)}"
    if _under(mod, _PURE_MODULES):
        return None
    py = getattr(fn, "py_func", fn)
    if getattr(py, "__code__", None) is not None:
        from .ssa.hooks import has_rule
        if has_rule(fn) or has_rule(py):
            return f"it calls {callee_name(fn)}, which has a rule (the rule's code is not checked)"
        return _function_reason(py, seen)
    return f"it calls {callee_name(fn)}"


def _function_reason(fn: Any, seen: set) -> Optional[str]:
    if fn is None:
        return "it calls a function zyg cannot see"
    if id(fn) in seen:
        return None
    seen.add(id(fn))
    from .ssa.build import ssa_of
    try:
        ir = ssa_of(fn)
    except Exception as e:      # noqa: BLE001 - the ordinary path reports it
        return f"{getattr(fn, '__name__', 'a function')} is not lowered ({type(e).__name__})"
    shared = _aliases_of_hidden(ir)
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            why = _callee_reason(st.expr.fn, seen)
            if why is None and shared and _may_write(st.expr, shared):
                # the global or captured arrays are not copied: a python run stopped
                # midway, or the background build's run beside it, would change them
                why = "it may write into a global or captured array"
            if why is not None:
                name = getattr(fn, "__name__", "f")
                line = f", line {st.loc.lineno}" if getattr(st, "loc", None) is not None else ""
                return f"{name}{line}: {why}"
    return None


_WRITING_METHODS = ("copyto", "fill", "sort", "put", "place", "putmask", "itemset", "resize",
                    "setflags", "partition", "at", "fill_diagonal")


def _ids(ops) -> List[int]:
    from .ssa.ir import Var
    return [o.id for o in ops if isinstance(o, Var)]


def _fresh(fn: Any) -> bool:
    """Calls whose result never shares memory with an operand."""
    return isinstance(fn, np.ufunc) or _module_of(fn) in ("operator", "_operator", "math", "cmath")


def _aliases_of_hidden(ir) -> set:
    """Ids of the values that may be (views of) the function's hidden parameters, the
    global and captured arrays it reads: the hidden parameters, block parameters that may
    receive one, and the results of calls given one (but arithmetic and ufuncs)."""
    if ir.reads is None or not ir.reads.hidden:
        return set()
    out = {v.id for v in ir.params[ir.nargs:]}
    changed = True
    while changed:
        changed = False
        for blk in ir.iter_blocks():
            for st in blk.stmts:
                if st.var is not None and st.var.id not in out and not _fresh(st.expr.fn) \
                        and any(i in out for i in _ids(st.expr.operands())):
                    out.add(st.var.id)
                    changed = True
            for succ, sargs in (blk.term.successors() if blk.term else []):
                for p, a in zip(ir.blocks[succ].params, sargs):
                    if p.id not in out and any(i in out for i in _ids([a])):
                        out.add(p.id)
                        changed = True
    return out


def _may_write(call, shared: set) -> bool:
    """Whether a statement may write into one of the values ``shared``: an assignment into
    it, an in-place operator on it, an ``out=`` or a writing method, or a call of another
    function it is passed to (conservatively)."""
    from .ssa.prims import InPlace, SetItem
    fn = call.fn
    ops = _ids(call.operands())
    if not any(i in shared for i in ops):
        return False
    if isinstance(fn, (SetItem, InPlace)):
        return bool(call.args) and any(i in shared for i in _ids(call.args[:1]))
    if "out" in call.kwargs or (getattr(fn, "__name__", "") or "") in _WRITING_METHODS:
        return True
    if _fresh(fn) or type(fn).__module__ == "zyg.ssa.prims" or isinstance(fn, type):
        return False        # reads (indexing, attributes), arithmetic, constructors
    # numpy's functions write into their operands only through out= or the names above;
    # anything else (a user function, a bound method) may
    return not (_under(_module_of(fn), ("numpy",)) and getattr(fn, "__self__", None) is None)


_REASONS: "Dict[Any, Optional[str]]" = {}


def why_not(f: Any) -> Optional[str]:
    """Why calls of ``grad(f)`` are not tiered, or None when they may be (given arguments
    that qualify: numbers, arrays and tuples of them, none sharing memory)."""
    from .entry import adapt
    from .ssa.lower import unwrap
    fn = unwrap(adapt(f)[0])    # a method, a partial, defaults: what grad(f) lowers
    got = _REASONS.get(fn, NO)
    if got is NO:
        got = _REASONS[fn] = _function_reason(getattr(fn, "py_func", fn), set())
    return got


def forget() -> None:
    """Forget the verdicts (zyg.reset_caches, a rule registered)."""
    _REASONS.clear()


# -- arguments: which qualify, copies, and writing the copies back ------------------------

def _leaves(a: Any, out: List[np.ndarray]) -> bool:
    if isinstance(a, np.ndarray):
        out.append(a)
        return a.dtype != object
    if isinstance(a, (bool, int, float, complex, np.generic)):
        return True         # (None, like a function, is bound into the code first)
    if isinstance(a, tuple):
        return all(_leaves(x, out) for x in a)
    return False


def _twin(a: np.ndarray) -> np.ndarray:
    """A copy with ``a``'s dtype, memory order (C, F or neither, which numba compiles
    for) and writability."""
    if a.flags.c_contiguous or a.flags.f_contiguous or a.ndim == 0 or a.shape[-1] < 2:
        c = np.empty_like(a, order="K")
    else:
        c = np.empty(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)[..., ::2]
    c[...] = a
    if not a.flags.writeable:
        c.flags.writeable = False
    return c


def _copy(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return _twin(a)
    if isinstance(a, tuple):
        items = [_copy(x) for x in a]
        return type(a)(*items) if hasattr(a, "_fields") else tuple(items)
    return a


def _pairs(orig: Any, copy: Any, out: list) -> None:
    if isinstance(orig, np.ndarray):
        out.append((orig, copy))
    elif isinstance(orig, tuple):
        for o, c in zip(orig, copy):
            _pairs(o, c, out)


def _plain(r: Any) -> Any:
    """The compiled code's result types: Python numbers where numba boxes scalars."""
    if isinstance(r, np.generic):
        return r.item()
    if isinstance(r, tuple):
        items = [_plain(x) for x in r]
        return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
    return r


def _fine_key(args) -> tuple:
    return tuple((type(a), a.dtype, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous)
                 if isinstance(a, np.ndarray) else (type(a), _fine_key(a)) if isinstance(a, tuple)
                 else type(a) for a in args)


# -- the race ---------------------------------------------------------------------------

class _Preempted(BaseException):
    """Raised in a python run's thread once the compiled code is ready."""


def _raise_in(thread_id: int, exc: Any) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


class _Build:
    """The background build of one argument signature's cpu code."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done = False
        self.error: Optional[BaseException] = None
        self.waiters: List[threading.Event] = []
        self.finished = threading.Event()

    def start(self, spec, copies: tuple) -> None:
        with _TIERS_LOCK:
            _INFLIGHT.add(self)
        threading.Thread(target=self._run, args=(spec, copies), daemon=True,
                         name=f"zyg-build-{spec.name}").start()

    def _run(self, spec, copies) -> None:
        entry = None
        hold = _HOLD_BUILD[0]
        if hold is not None:
            hold.wait(120)       # (a test hook; bounded, so a failing test cannot hang)
        try:
            with LOAD_LOCK:
                spec.backend.prepare()
                entry = spec.build_entry(copies)
            entry(*copies)          # compiles for these types (numba), on private copies
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
        if entry is not None and not isinstance(self.error, ZygError):
            # compiled (a run-time error of the function is the caller's to meet again)
            with LOAD_LOCK:
                spec.install(copies, entry)
        with self.lock:
            self.done = True
            waiters, self.waiters = self.waiters, []
        with _TIERS_LOCK:
            _INFLIGHT.discard(self)
        self.finished.set()
        for ev in waiters:
            ev.set()


class _PythonRun:
    """The python target's run of one call, on copies, in a worker thread."""

    def __init__(self, fn, copies, wake: threading.Event):
        self.fn, self.copies, self.wake = fn, copies, wake
        self.lock = threading.Lock()
        self.state = "running"      # -> "done" | "preempted"
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="zyg-python-run")

    def _run(self) -> None:
        try:
            try:
                hold = _HOLD_PYTHON[0]
                while hold is not None and not hold.wait(0.005):
                    pass        # (a wait that a preemption can interrupt)
                # numba's compiled code warns of no inf or nan: neither does its stand-in
                with np.errstate(all="ignore"):
                    r, e = self.fn(*self.copies), None
            except _Preempted:
                return
            except BaseException as exc:    # noqa: BLE001 - the caller decides
                r, e = None, exc
            with self.lock:
                if self.state != "running":
                    # preempted as it finished: the exception may still be pending
                    _raise_in(threading.get_ident(), None)
                    return
                self.state = "done"
                self.result, self.error = r, e
            self.wake.set()
        except _Preempted:
            pass

    def preempt(self) -> None:
        with self.lock:
            if self.state == "running":
                self.state = "preempted"
                _raise_in(self.thread.ident, _Preempted)


def call(spec, args: tuple) -> Any:
    """A tiered call of ``spec``'s code (see the module's docstring), or :data:`NO` where
    the call takes the ordinary path.  ``args``: positional, dicts already made tuples."""
    if spec.statics and any(v is not None for v in spec.statics.values()):
        return NO       # a function passed as an argument: its code is not checked
    if why_not(spec.f) is not None:
        return NO
    arrays: List[np.ndarray] = []
    if not all(_leaves(a, arrays) for a in args):
        return NO
    n = len(arrays)
    from .ssa.build import ssa_of
    reads = ssa_of(spec.f, spec.statics).reads
    if reads is not None and reads.hidden:
        # the global and captured arrays it reads: an argument sharing memory with one
        # would be written on a copy while the function reads the original
        arrays = arrays + [v for v in reads.values() if isinstance(v, np.ndarray)]
    for i in range(n):
        for j in range(i + 1, len(arrays)):
            if np.may_share_memory(arrays[i], arrays[j]):
                return NO
    key = _fine_key(args)
    build = spec.tiers.get(key)
    if build is not None and build.done:
        return _after(spec, key, build)
    py = _python_entry(spec, args)
    if py is None:
        return NO
    from .numerics import install_sigint_guard
    install_sigint_guard()          # in the caller's (main) thread, as a cpu build would
    fresh = False
    with _TIERS_LOCK:
        build = spec.tiers.get(key)
        if build is None:
            build = spec.tiers[key] = _Build()
            build.start(spec, tuple(_copy(a) for a in args))
            fresh = True
    if fresh and _looks_cached(spec.name) and build.finished.wait(WARM_WAIT):
        # machine code on disk: loading it beats a python run that would share the GIL
        return _after(spec, key, build)
    wake = threading.Event()
    with build.lock:
        if build.done:
            return NO
        build.waiters.append(wake)
    copies = tuple(_copy(a) for a in args)
    run = _PythonRun(py, copies, wake)
    run.thread.start()
    wake.wait()
    with run.lock:
        state = run.state
    if state == "done" and run.error is None and not _aliases(run.result, copies):
        pairs: list = []
        _pairs(args, copies, pairs)
        for orig, c in pairs:
            if orig.flags.writeable:
                np.copyto(orig, c)
        STATS["python"] += 1
        return _plain(run.result)
    if state == "done":
        # the python run raised (or returned a view of its copies): the compiled code decides
        STATS["python_raised"] += 1
        build.finished.wait()
    else:
        STATS["preempted"] += 1
        run.preempt()
    return _after(spec, key, build)


def _after(spec, key, build: _Build) -> Any:
    """Once the build has finished: its zyg error (compile or refusal) is raised, by
    this call and the later ones of these types, as the ordinary path raises it on every
    call; else the ordinary path runs the installed code."""
    if isinstance(build.error, ZygError):
        raise build.error
    return NO


_TIERS_LOCK = threading.RLock()
_INFLIGHT: "set[_Build]" = set()


def wait(timeout: Optional[float] = None) -> bool:
    """Wait until the background builds started so far have finished (their compiled code
    installed, or their error kept for the next call); False if ``timeout`` seconds
    passed first."""
    import time
    end = None if timeout is None else time.monotonic() + timeout
    with _TIERS_LOCK:
        builds = list(_INFLIGHT)
    for b in builds:
        left = None if end is None else max(0.0, end - time.monotonic())
        if not b.finished.wait(left):
            return False
    return True


# a fork while a build holds numba's compiler lock would leave the child a lock that no
# thread of it will release (multiprocessing's fork start method, dask's process pools):
# forks wait for the builds in flight
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)


#: seconds a first call waits for a build that looks cached on disk before the python run
WARM_WAIT = 1.0


def _looks_cached(name: str) -> bool:
    """Whether numba's disk cache holds an index for a generated module of a function of
    this name (a hint only: which path answers, never what it answers)."""
    import glob
    from .compile import cache_dir
    pattern = f"{glob.escape(name)}_*.nbi"
    try:
        from numba.core.config import CACHE_DIR
    except ImportError:         # pragma: no cover
        CACHE_DIR = ""
    places = [os.path.join(cache_dir(), "__pycache__")]
    if CACHE_DIR:
        places.append(os.path.join(CACHE_DIR, "**"))
    return any(glob.glob(os.path.join(p, pattern), recursive=True) for p in places)


def _aliases(result: Any, copies: tuple) -> bool:
    res: List[np.ndarray] = []
    _leaves(result, res)
    if not res:
        return False
    cs: List[np.ndarray] = []
    for c in copies:
        _leaves(c, cs)
    return any(np.may_share_memory(r, c) for r in res for c in cs)


def _python_entry(spec, args) -> Any:
    """The python target's code for ``args`` (built in the caller's thread, before the
    cpu build takes the build lock), or None where the python target refuses it."""
    tw = spec.python_twin()
    got = tw.cached(args)
    if got is not None:
        return got
    try:
        return tw.build(args)
    except ZygError:
        return None
