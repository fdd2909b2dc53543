"""Floating-point semantics and numba options shared by both targets.

zyg follows **numpy's floating-point semantics** on every target (docs/numerics.md):
``1.0 / 0.0`` is ``inf``, ``0.0 / 0.0`` and ``math.sqrt(-1.0)`` are ``nan``,
``math.exp(1000.0)`` is ``inf``, in the primal value and in the gradient, instead of
Python's ZeroDivisionError / ValueError / OverflowError.

* ``cpu``: every function zyg compiles goes through :func:`njit`, which passes numba
  ``error_model="numpy"`` (and ``boundscheck`` when bounds checking is on).
* ``python``: the generated module is compiled with :func:`python_semantics`, which
  routes ``/``, ``//``, ``%``, ``**`` and ``math`` calls through helpers that return
  what the compiled code returns where Python would raise (they evaluate the same
  operation with numba's semantics, so both targets agree by construction).

Bounds checking (``ZYG_BOUNDSCHECK=1`` or :func:`set_boundscheck`) makes out-of-bounds
indexing on ``cpu`` raise IndexError as on ``python``; it is part of the generated
code's cache key (:func:`options_tag`).
"""
from __future__ import annotations

import ast
import contextlib
import math
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

_BOUNDSCHECK: Optional[bool] = None


class ZeroCotangentRetry(Exception):
    """Raised by a fused gradient compiled without its in-loop zero-cotangent tests
    when a gradient came out nan; the caller runs the variant with the tests
    (``zyg.api``).  Never reaches the user."""


def boundscheck() -> bool:
    """Is bounds checking on (``set_boundscheck``, else the ``ZYG_BOUNDSCHECK`` env var)?"""
    if _BOUNDSCHECK is not None:
        return _BOUNDSCHECK
    return os.environ.get("ZYG_BOUNDSCHECK", "0").strip().lower() not in ("", "0", "false", "no")


def set_boundscheck(on: Optional[bool]) -> None:
    """Turn bounds checking of compiled (``cpu``) code on or off; None: follow the env var.

    Gradients built afterwards use the new setting (the in-memory caches are cleared;
    the on-disk cache keeps one entry per setting)."""
    global _BOUNDSCHECK
    old = boundscheck()
    _BOUNDSCHECK = None if on is None else bool(on)
    if boundscheck() != old:
        from .caches import invalidate
        invalidate()


def numba_options() -> Dict[str, Any]:
    """Options for every ``numba.njit`` zyg applies (generated code, helpers, rules).

    ``nogil=True``: compiled code releases the GIL while it runs, so that Python threads
    calling gradients run in parallel (docs/tasks.md); calls back into Python from
    compiled code (``numba.objmode``: recursive calls' pullbacks) take it again."""
    opts: Dict[str, Any] = {"error_model": "numpy", "nogil": True}
    if boundscheck():
        opts["boundscheck"] = True
    return opts


def options_tag() -> str:
    """A line naming the numba options in force and numba's optimisation level
    (``NUMBA_OPT``); it goes into the text of code generated for the cpu target
    (``zyg/backends/cpu.py``), so that code compiled otherwise has another file hash,
    module name and numba cache."""
    from numba.core import config
    opts = {**numba_options(), "opt": int(getattr(config, "OPT", 3))}   # NUMBA_OPT
    return "# target cpu: numba " + ", ".join(f"{k}={v!r}" for k, v in sorted(opts.items()))


def on_disk(fn: Callable) -> Callable:
    """Mark a helper of zyg's own whose machine code the cpu back end keeps on disk, so that
    a later process loads it instead of compiling it (``backends/cpu.py``, ``helper_cache``).
    Only for a module-level function of a zyg module that computes from its arguments
    alone: it reads no global but numpy, math and other such helpers (a global's value is
    frozen into the machine code, and the cache is told apart by zyg's sources only)."""
    fn._zyg_on_disk = True
    return fn


def njit(fn: Callable = None, **kw):
    """``numba.njit`` with zyg's options (numpy error model, bounds checking)."""
    import numba
    opts = {**numba_options(), **kw}
    if fn is None:
        return numba.njit(**opts)
    return numba.njit(**opts)(fn)


# -- the python target: numpy semantics where Python raises -----------------------------

_FALLBACKS: Dict[Any, Callable] = {}
_FB_LOCK = threading.Lock()


def _compiled(key: Any, src: str, glob: Dict[str, Any]) -> Callable:
    """A numba-compiled one-liner (numpy error model), built on first use."""
    f = _FALLBACKS.get(key)
    if f is None:
        with _FB_LOCK:
            f = _FALLBACKS.get(key)
            if f is None:
                ns = dict(glob)
                exec(src, ns)
                numba_ready()
                import numba
                f = _FALLBACKS[key] = numba.njit(error_model="numpy")(ns["_f"])
    return f


def _fallback(key: Any, src: str, glob: Dict[str, Any], exc: BaseException, *args):
    try:
        return _compiled(key, src, glob)(*args)
    except Exception:
        # not a type numba compiles (an object, a big int): Python's own error stands
        raise exc from None




def zyg_div(a, b):
    try:
        return a / b
    except ZeroDivisionError as e:
        return _fallback("div", "def _f(a, b):\n    return a / b\n", {}, e, a, b)


def zyg_floordiv(a, b):
    try:
        return a // b
    except ZeroDivisionError as e:
        return _fallback("floordiv", "def _f(a, b):\n    return a // b\n", {}, e, a, b)


def zyg_mod(a, b):
    try:
        return a % b
    except ZeroDivisionError as e:
        return _fallback("mod", "def _f(a, b):\n    return a % b\n", {}, e, a, b)


def zyg_pow(a, b):
    try:
        r = a ** b
    except (ZeroDivisionError, OverflowError) as e:
        return _fallback("pow", "def _f(a, b):\n    return a ** b\n", {}, e, a, b)
    if type(r) is complex and not isinstance(a, complex) and not isinstance(b, complex):
        # Python: (-8.0) ** 0.5 is complex; numpy and numba: nan
        return _fallback("pow", "def _f(a, b):\n    return a ** b\n", {}, ValueError(), a, b)
    return r


# math functions whose result is a float: Python raises where numpy returns inf / nan
_NOT_WRAPPED = {"floor", "ceil", "trunc", "isnan", "isinf", "isfinite", "isclose", "factorial",
                "comb", "perm", "gcd", "lcm", "isqrt", "prod", "fsum", "frexp", "modf", "dist",
                "sumprod", "nextafter", "ulp"}


def _math_wrapper(name: str, fn: Callable) -> Callable:
    def wrapped(*args):
        try:
            return fn(*args)
        except (ValueError, OverflowError, ZeroDivisionError) as e:
            params = ", ".join(f"a{i}" for i in range(len(args)))
            src = f"def _f({params}):\n    return math.{name}({params})\n"
            return _fallback(("math", name, len(args)), src, {"math": math}, e, *args)
    wrapped.__name__ = name
    wrapped.__qualname__ = "math." + name
    wrapped.__doc__ = f"math.{name} with numpy's semantics (inf / nan instead of an exception)."
    return wrapped


class _Math:
    """The ``math`` module as the python target's generated code sees it."""

    def __init__(self):
        for name in dir(math):
            obj = getattr(math, name)
            if name.startswith("_") or not callable(obj) or name in _NOT_WRAPPED:
                setattr(self, name, obj)
            else:
                setattr(self, name, _math_wrapper(name, obj))


MATH = _Math()
HELPERS = {"_zyg_div": zyg_div, "_zyg_floordiv": zyg_floordiv, "_zyg_mod": zyg_mod,
           "_zyg_pow": zyg_pow, "_zyg_math": MATH}
_BINOPS = {ast.Div: "_zyg_div", ast.FloorDiv: "_zyg_floordiv", ast.Mod: "_zyg_mod",
           ast.Pow: "_zyg_pow"}


class _Semantics(ast.NodeTransformer):
    def __init__(self, math_names):
        self.math_names = math_names

    def visit_BinOp(self, node):
        self.generic_visit(node)
        helper = _BINOPS.get(type(node.op))
        if helper is None:
            return node
        return ast.copy_location(
            ast.Call(func=ast.Name(helper, ast.Load()), args=[node.left, node.right], keywords=[]), node)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        helper = _BINOPS.get(type(node.op))
        if helper is None or not isinstance(node.target, ast.Name):
            return node     # (subscript targets: in-place on arrays, which never raise)
        call = ast.Call(func=ast.Name(helper, ast.Load()),
                        args=[ast.Name(node.target.id, ast.Load()), node.value], keywords=[])
        return ast.copy_location(ast.Assign(targets=[node.target], value=call), node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.math_names:
            return ast.copy_location(ast.Name("_zyg_math", ast.Load()), node)
        return node


def python_semantics(text: str, path: str, ns: Dict[str, Any]):
    """Compile generated source for the python target with numpy's float semantics.

    The code object keeps the text's line numbers (tracebacks point at the cache file)."""
    tree = ast.parse(text, path)
    math_names = {k for k, v in ns.items() if v is math}
    tree = ast.fix_missing_locations(_Semantics(math_names).visit(tree))
    return compile(tree, path, "exec")


# -- Ctrl-C during numba's import and the set-up of its registries ------------------------

@contextlib.contextmanager
def sigint_deferred():
    """Run a block that a Ctrl-C must not cut; an interrupt that arrives during it is
    delivered (to the handler that was in force) when it ends.  Only in the main thread,
    where signal handlers run; elsewhere the block runs as it is."""
    import signal
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: List[int] = []
    try:
        old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    except (ValueError, TypeError):     # not the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            if callable(old):
                old(signal.SIGINT, sys._getframe())
            elif old == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


_NUMBA_READY = [False]


def numba_ready() -> None:
    """Import numba and set up what its first compile sets up (its registries of typing and
    lowering, the compiler's modules), with Ctrl-C deferred.

    numba imports much of itself lazily, on the first compile.  A KeyboardInterrupt in the
    middle of an import leaves the package without the attribute of a submodule that did
    finish (the parent is removed from sys.modules and imported again, the finished
    submodule is not: "module 'numba' has no attribute 'core'" on every later compile), and
    one in the middle of a registry's first load kills the generator that streams it
    ("generator raised StopIteration").  zyg calls this before its first numba compile: a
    Ctrl-C during it waits the second or two it takes."""
    if _NUMBA_READY[0]:
        return
    with sigint_deferred():
        import numba
        import numba.core.errors            # noqa: F401  (what zyg's messages use)
        import numba.core.serialize         # noqa: F401  (the SIGINT guard)
        from numba.core.registry import cpu_target
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
        _install_dead_global_sweep()
        # the modules numba's first compile imports on its own (compiling a throwaway
        # function instead costs every process 0.04 s, a warm disk cache's load included)
        import numba.core.boxing                # noqa: F401
        import numba.core.runtime.context       # noqa: F401
        _NUMBA_READY[0] = True


_DYN = "numba.dynamic.globals"


def _sweep_dead_dynamic_globals(lib) -> None:
    """Remove from a finished numba library's module the dynamic globals nothing reads.

    numba lowers every reference to a jitted function (``acc(t, e)`` in generated code:
    the name is loaded, then called) as the constant "address of the dispatcher object",
    a ``numba.dynamic.globals`` variable, and refuses to cache code that has one (the
    address is only good in this process).  The call itself is resolved statically, so
    the loaded address is stored in the name's stack slot and never read; at
    optimisation levels 1-3 LLVM deletes the dead load, the slot and the variable, but at
    level 0 (NUMBA_OPT=0, the tests' level) they stay, and no generated module calling a
    helper could be cached: the two pytest workers and every subprocess compiled
    everything afresh.  Here, at level 0 only and only for modules that have such a
    variable, LLVM's SROA (the stack slots into SSA values), aggressive dead-code
    elimination and global dead-code elimination run: semantics-preserving passes that
    delete exactly the unread loads and the variables left without a use.  A dynamic
    global that is really used (a ctypes function pointer that is called, a dispatcher
    boxed back to Python) keeps its uses and stays, and numba then refuses the cache as
    before."""
    mod = lib._final_module
    if not any(gv.name.startswith(_DYN) for gv in mod.global_variables):
        return
    import llvmlite.binding as llvm
    pb = lib._codegen._pass_builder(opt=0)
    pm = llvm.ModulePassManager()
    pm.add_sroa_pass()
    pm.add_aggressive_dce_pass()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(mod, pb)


def _install_dead_global_sweep() -> None:
    """At numba's optimisation level 0, :func:`_sweep_dead_dynamic_globals` after a
    library's final optimisation (where numba looks for dynamic globals next)."""
    try:
        from numba.core import codegen, config
        cls = codegen.CPUCodeLibrary
        orig = cls._optimize_final_module
    except (ImportError, AttributeError):       # another numba: caching as numba decides
        return
    if getattr(orig, "_zyg_sweep", False):
        return

    def _optimize_final_module(self):
        orig(self)
        if int(config.OPT) == 0 and not config.OPT.is_opt_max:
            _sweep_dead_dynamic_globals(self)
    _optimize_final_module._zyg_sweep = True
    cls._optimize_final_module = _optimize_final_module


# -- SIGINT while numba boxes results ------------------------------------------------------

_SIGINT_INSTALLED = False
DEFERRED = [False]       # a Ctrl-C arrived while the main thread's numba boxed a result:
                         # raised on return (raise_deferred, in the main thread only)


_DEFER_LOCK = threading.Lock()     # one of raise_deferred and _redeliver takes the interrupt


def _take_deferred() -> bool:
    with _DEFER_LOCK:
        was = DEFERRED[0]
        DEFERRED[0] = False
        return was


def raise_deferred() -> None:
    """Raise the KeyboardInterrupt deferred while numba boxed a compiled call's result
    (unless the timer of the handler has delivered it already: one Ctrl-C, one
    KeyboardInterrupt; reading the flag and clearing it apart let both deliver it, the
    second inside the user's 'except KeyboardInterrupt' block)."""
    if threading.current_thread() is not threading.main_thread():
        # the interrupt is the main thread's (signal handlers run there): its own wrapper,
        # or the handler's timer, delivers it; another thread's call must not take it
        return
    if _take_deferred():
        raise KeyboardInterrupt


def _redeliver(signum: int) -> None:
    if _take_deferred():
        import _thread
        _thread.interrupt_main(signum)


def install_sigint_guard() -> None:
    """Let a Ctrl-C that arrives during a compiled call surface as a clean KeyboardInterrupt.

    numba runs a Python function (``_numba_unpickle``) while boxing the arrays a compiled
    function returns; a KeyboardInterrupt raised there leaves numba returning a result with
    an exception set (SystemError) or a tuple with missing items (a crash).  The handler
    installed here (only over Python's default one, in the main thread) defers the
    interrupt while such a frame runs and raises it as soon as control is back in
    ordinary Python code; everywhere else it is Python's default handler."""
    global _SIGINT_INSTALLED
    if _SIGINT_INSTALLED:
        return
    import signal
    if threading.current_thread() is not threading.main_thread():
        return
    _SIGINT_INSTALLED = True
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return      # the user's (or IPython's) handler: leave it alone
    try:
        from numba.core import serialize
        codes = {serialize._numba_unpickle.__code__}
    except (ImportError, AttributeError):
        return

    def handler(signum, frame):
        f = frame
        while f is not None:
            if f.f_code in codes:
                # zyg's wrappers raise it when the compiled call has returned
                # (raise_deferred); a timer delivers it again for other callers
                DEFERRED[0] = True
                t = threading.Timer(0.05, _redeliver, args=(signum,))
                t.daemon = True
                t.start()
                return
            f = f.f_back
        DEFERRED[0] = False
        signal.default_int_handler(signum, frame)
    handler.__doc__ = "Python's default SIGINT handler, deferred while numba boxes results (zyg)."
    signal.signal(signal.SIGINT, handler)


# -- stack exhaustion in recursive gradients -----------------------------------------------

_STACK = threading.local()
_SP = None
MARGIN = 1536 * 1024       # bytes left for what ran before the recursion and for the error


def _stack_pointer() -> Callable[[], int]:
    """A compiled function returning an address in its own frame (the C stack's depth)."""
    global _SP
    if _SP is None:
        import llvmlite.ir as lir
        import numba
        from numba import types
        from numba.core import cgutils
        from numba.extending import intrinsic

        @intrinsic
        def frame_address(typingctx):
            def codegen(context, builder, sig, args):
                slot = cgutils.alloca_once(builder, lir.IntType(64))
                return builder.ptrtoint(slot, lir.IntType(64))
            return types.uint64(), codegen

        @numba.njit
        def sp():
            return frame_address()
        sp()
        _SP = sp
    return _SP


def stack_size() -> int:
    """The C stack size of the calling thread (bytes; a guess where it is unlimited)."""
    if threading.current_thread() is threading.main_thread():
        try:
            import resource
            soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
            if soft > 0 and soft != resource.RLIM_INFINITY:
                return soft
        except (ImportError, ValueError, OSError):
            pass
        return 8 << 20
    return _configured_stack_size() or _thread_default()


_STACK_SIZE_LOCK = threading.Lock()


def _configured_stack_size() -> int:
    """``threading.stack_size()``, without its side effect: called without an argument it
    also *sets* the size of threads created afterwards to the default (0) and returns the
    old value, so a second call returned 0 (a recursion in a thread created with
    ``threading.stack_size(256 << 20)`` was then cut at 8 MiB)."""
    with _STACK_SIZE_LOCK:
        size = threading.stack_size()
        if size:
            threading.stack_size(size)
    return size


def _thread_default() -> int:
    # glibc gives new threads RLIMIT_STACK (8 MiB when unlimited); macOS 512 KiB
    import sys
    if sys.platform == "darwin":
        return 512 << 10
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        if soft > 0 and soft != resource.RLIM_INFINITY:
            return soft
    except (ImportError, ValueError, OSError):
        pass
    return 8 << 20


class stack_guard:
    """Context of one level of a differentiated recursion: raises RecursionError before
    the C stack runs out (compiled frames are not counted by Python's recursion limit,
    so without it a deep recursion kills the interpreter with SIGSEGV)."""

    __slots__ = ()

    def __enter__(self):
        st = _STACK
        depth = getattr(st, "depth", 0)
        here = _stack_pointer()()
        if depth == 0:
            st.base = here
            st.budget = max(stack_size() - MARGIN, stack_size() // 2)
        elif st.base - here > st.budget:
            raise RecursionError(
                f"maximum recursion depth exceeded in a differentiated recursive function: "
                f"{depth} levels used {(st.base - here) / 2**20:.1f} MiB of the "
                f"{stack_size() / 2**20:.0f} MiB C stack (zyg stops before the interpreter crashes); "
                f"run it in a thread with a larger threading.stack_size(), or raise "
                f"'ulimit -s', or write the recursion as a loop")
        st.depth = depth + 1
        return self

    def __exit__(self, *exc):
        _STACK.depth -= 1
        return False


STACK_GUARD = stack_guard()
