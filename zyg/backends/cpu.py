"""The ``cpu`` back end: generated code compiled by numba (nopython mode) with zyg's options.

Options (:func:`zyg.numerics.numba_options`): numpy's error model (inf and nan where
Python raises), bounds checking when ``zyg.set_boundscheck(True)`` or ``ZYG_BOUNDSCHECK``;
``cache=True`` for generated modules, so that a later process reuses their machine code
(the module's text names the options and a fingerprint of everything it refers to).
"""
from __future__ import annotations

import hashlib
import math
import os
import types
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .. import numerics
from .base import Backend


def _select(c, a, b):
    return a if c else b


_WHERE: list = []


def where(condition, x=None, y=None):
    """``np.where`` as code compiled for cpu calls it (the Python form: numpy's)."""
    if x is None and y is None:
        return np.where(condition)
    return np.where(condition, x, y)


def fast_where() -> Callable:
    """:func:`where`, with a numba implementation that is ``np.where`` itself except where
    an operand is an array of one or more dimensions: there it is an elementwise select (a
    numba ufunc, ``a if c else b``: the same values, dtype and broadcasting).  numba's own
    ``np.where`` on arrays compiles a broadcasting kernel per argument types that takes
    ~1-4 s each; the adjoints of ``np.maximum``, ``abs``, ``np.where`` ... use it often
    (issue 24: compile time)."""
    if _WHERE:
        return _WHERE[0]
    import numba
    from numba.core import types as nt
    from numba.extending import overload
    sel = numba.vectorize(nopython=True)(_select)

    def absent(t):
        return t is None or isinstance(t, (nt.NoneType, nt.Omitted))

    @overload(where, jit_options=numerics.numba_options())
    def _where_impl(condition, x=None, y=None):
        if absent(x) and absent(y):
            def one(condition, x=None, y=None):
                return np.where(condition)
            return one
        if any(isinstance(t, nt.Array) and t.ndim > 0 for t in (condition, x, y)):
            def elementwise(condition, x=None, y=None):
                return sel(condition, x, y)
            return elementwise

        def scalars(condition, x=None, y=None):
            return np.where(condition, x, y)
        return scalars

    _WHERE.append(where)
    return where


# the rules read it as np.where (generated code differentiated again: zyg/rules/dispatch.py)
where._zyg_where = True


def _plain_function(obj: Any) -> bool:
    """A Python function numba does not implement itself (not one of numpy's)."""
    return isinstance(obj, types.FunctionType) and not \
        (getattr(obj, "__module__", "") or "").startswith("numpy")


def _numba_types(fn: Any) -> bool:
    """numba types ``fn`` itself (an ``@overload`` of it is registered)."""
    from numba.core.registry import cpu_target
    ctx = cpu_target.typing_context
    try:
        ctx.refresh()           # overloads registered since the last compile
        ctx.resolve_value_type(fn)
        return True
    except Exception:
        return False


def _plain_callees(fn: Any) -> Dict[str, Any]:
    """name -> plain Python function numba does not type, for the globals ``fn``'s code
    (nested functions included) names (a function with an ``@overload``, such as
    ``ssa/iterators._tuple_set``, keeps its numba implementation)."""
    names: set = set()
    stack = [fn.__code__]
    while stack:
        co = stack.pop()
        names.update(co.co_names)
        stack.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    glob = fn.__globals__
    return {n: glob[n] for n in sorted(names)
            if n in glob and glob[n] is not fn and _plain_function(glob[n])
            and not _numba_types(glob[n])}


_PIPELINE = None


def generated_pipeline():
    """numba's compiler without its SSA reconstruction and rewrite passes, for generated
    modules with a dispatch loop.

    A dispatch loop assigns a value (a block parameter, a placeholder) in several cases;
    numba's SSA pass renames each definition and joins the versions at the loop header with
    a copy in every case that jumps back to it, each array copy with its reference counting:
    quadratic in the size of the function (forward mode over a 5-line gradient: 12 MB of
    LLVM IR, 25 s of LLVM's SROA, 52 s for its Hessian).  Without it numba keeps one variable
    per name and types it by unifying its definitions, as numba did before 0.50.  numba's
    rewrite passes (array-expression fusion among them) assume SSA names: with several
    definitions of a name in a block they fused the wrong one (a wrong gradient in
    ``tests/test_layout_join.py``), so they are off too.  Where numba cannot type the code
    this way (placeholders of another dtype than the value), the driver compiles it again
    with numba's default pipeline (``build._with_numba_ssa``)."""
    global _PIPELINE
    if _PIPELINE is None:
        from numba.core.compiler import Compiler

        class ZygGeneratedCode(Compiler):
            def define_pipelines(self):
                self.state.flags.enable_ssa = False
                self.state.flags.no_rewrites = True
                return super().define_pipelines()
        _PIPELINE = ZygGeneratedCode
    return _PIPELINE


#: providers of compiled replacements of helpers, ``natives(jit, options) -> {id(helper):
#: replacement}``: filled by ``zyg/tasks/mpi_native.py`` (a layer above) once numba-mpi is in use
NATIVE_HELPERS: List[Callable[..., Dict[int, Any]]] = []


class CpuBackend(Backend):
    name = "cpu"
    compiled = True
    native_byte_order = True
    nd_masks = False
    zero_guards_first = False
    strong_scalars = True

    def __init__(self):
        super().__init__()
        self._wrapped: Dict[Any, Any] = {}
        self._subst: Dict[str, Dict[int, Any]] = {}

    def options(self) -> Dict[str, Any]:
        return numerics.numba_options()

    def tag(self) -> str:
        return numerics.options_tag()

    def prepare(self) -> None:
        numerics.numba_ready()          # numba's lazy imports, not cut by a Ctrl-C
        numerics.install_sigint_guard()

    def jit(self, fn: Callable, **kw) -> Callable:
        d = numerics.njit(fn, **kw)
        if getattr(fn, "_zyg_on_disk", False) and not kw:
            helper_cache(d)
        return d

    def vectorize(self, kernel: Callable, python: Callable) -> Callable:
        import numba
        return numba.vectorize(nopython=True)(kernel)

    def where(self) -> Callable:
        return fast_where()

    def zeros_as(self) -> Optional[Callable]:
        from ..pullbacks.arraytape import zeros_as
        return zeros_as

    def _substitutes(self) -> Dict[int, Any]:
        """id of a function numba lacks -> what generated code calls instead (compiled with
        the options in force)."""
        got = self._subst.get(self.tag())
        if got is None:
            # math functions numba's nopython mode lacks, and their numpy equivalents
            got = {id(math.cbrt): np.cbrt, id(math.fmod): np.fmod, id(np.where): fast_where()}
            from ..rules import special        # scipy.special: numba-compilable versions
            got.update({id(fn): impl for fn, impl in special.numba_substitutes().items()})
            self._subst[self.tag()] = got
        return got

    def wrap(self, obj: Any) -> Any:
        subst = self._substitutes()
        if id(obj) in subst:
            return subst[id(obj)]
        for natives in NATIVE_HELPERS:
            # MPI calls by symbol name: code calling them can be cached (tasks/mpi_native.py)
            native = natives(self.jit, self.tag()).get(id(obj))
            if native is not None:
                return native
        if _plain_function(obj):
            # (numpy's Python-level functions such as np.ones have numba implementations)
            # a function with object-mode blocks (zyg/ssa/raising.py: messages formatted by
            # Python) calls its Python helpers from there: they stay Python
            callees = {} if getattr(obj, "_zyg_uncacheable", False) else _plain_callees(obj)
            key = (id(obj), self.tag(), tuple(id(v) for v in callees.values()))
            got = self._wrapped.get(key)
            if got is None or got[0] is not obj:
                got = (obj, self.jit(self._calling_compiled(obj, callees)))
                if getattr(obj, "_zyg_uncacheable", False):
                    # object mode inside (zyg/ssa/raising.py): callers skip the disk cache
                    got[1]._zyg_uncacheable = True
                self._wrapped[key] = got
            return got[1]
        return obj

    def _calling_compiled(self, fn: Any, callees: Dict[str, Any]) -> Any:
        """``fn`` with the plain Python functions it calls through its globals (a rule's
        helper calling another helper) replaced by their compiled versions, in a copy of
        its globals: numba cannot call a plain function from compiled code."""
        if not callees:
            return fn
        wrapping = self.__dict__.setdefault("_wrapping", set())
        if id(fn) in wrapping:          # mutual recursion: numba reports it at the call
            return fn
        wrapping.add(id(fn))
        try:
            glob = dict(fn.__globals__)
            for name, v in callees.items():
                glob[name] = self.wrap(v)
        finally:
            wrapping.discard(id(fn))
        g = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__, fn.__closure__)
        g.__kwdefaults__, g.__qualname__, g.__module__ = fn.__kwdefaults__, fn.__qualname__, fn.__module__
        g.__doc__ = fn.__doc__
        return g

    def exec_source(self, src: str, label: str, glob: Dict[str, Any]) -> None:
        exec(compile(src, label, "exec"), glob)

    def function(self, src: str, label: str, glob: Dict[str, Any], name: str,
                 uncacheable: bool = False) -> Callable:
        self.exec_source(src, label, glob)
        fobj = glob[name]
        # the globals numba resolves from glob: plain functions it calls are compiled too
        for k, v in list(glob.items()):
            if isinstance(v, types.FunctionType) and v is not fobj and not k.startswith("__"):
                glob[k] = self.wrap(v)
        if uncacheable or glob.get("_zyg_uncacheable"):
            # object mode inside (recursion.py): it runs Python, which holds the GIL
            fobj = self.jit(fobj, nogil=False)
            fobj._zyg_uncacheable = True
        else:
            fobj = self.jit(fobj)
        return fobj

    def call_python(self, stmt: str, outs, glob: Dict[str, Any]):
        import numba
        glob["numba"] = numba
        decl = ", ".join(f"{n}={t!r}" for n, t in outs)
        return [f"with numba.objmode({decl}):", "    " + stmt]

    def finish(self, f: Callable, cache: bool, code=None) -> Callable:
        if hasattr(f, "py_func"):
            return f
        # code that calls object-mode helpers (not cached: recursive calls) runs Python at
        # every level, which holds the GIL: compiled without nogil (numba warns otherwise)
        kw = {} if cache else {"nogil": False}
        if getattr(f, "__globals__", {}).get("_zyg_gil_entry"):
            # a module only ever called from compiled code (a recursive pair, whose rare
            # object-mode call takes the GIL itself): nogil matters at entry from Python
            # only, and numba would warn about object mode in a nogil function
            kw["nogil"] = False
        if getattr(f, "__name__", "") in getattr(f, "__globals__", {}).get("_zyg_parallel", ()):
            # a parallel loop's compiled pair (zyg/tasks/prange.py): its loops are prange
            kw["parallel"] = True
        if code is not None and code.has_dispatch_loop():
            return self.jit(f, cache=cache, pipeline_class=generated_pipeline(), **kw)
        return self.jit(f, cache=cache, **kw)


# -- zyg's own helpers on disk ------------------------------------------------------------
#
# The helpers generated code calls most (the tape's ``grow``, array pushes, shadow
# allocation, the nan test of a gradient) are compiled in every process that builds a new
# gradient: about 0.1-0.3 s of a small function's first call, most of it numba's own
# ``np.empty``/``np.zeros``/``any`` that they call.  Those marked ``numerics.on_disk`` keep
# their machine code in the cache directory, under a name made of zyg's version and the
# modification times and sizes of all of zyg's source files: a changed zyg (an upgrade, an
# edit of any file, which may change a helper another one calls) never loads machine code
# compiled from other sources.  numba tells the versions of one helper apart by its
# argument types and bytecode; compile options are not in its key, so helpers are kept on
# disk only with zyg's default options (not with bounds checking on).

_STAMP: List[str] = []


def _zyg_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stamp_of(root: str, version: str) -> str:
    """A hash of ``version`` and of the path, modification time and size of every ``.py``
    file under ``root``."""
    h = hashlib.sha256(version.encode())
    for dp, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dp, f)
                st = os.stat(path)
                h.update(f"{os.path.relpath(path, root)}:{st.st_mtime_ns}:{st.st_size};".encode())
    return h.hexdigest()[:16]


def sources_stamp() -> str:
    """zyg's version and its source files' :func:`stamp_of` (computed once per process)."""
    if not _STAMP:
        from ..version import __version__
        _STAMP.append(stamp_of(_zyg_root(), __version__))
    return _STAMP[0]


_CACHE_CLASS: List[Any] = []


def _helper_cache_class():
    if not _CACHE_CLASS:
        from numba.core import caching
        from ..compile import cache_dir

        class Locator(caching._CacheLocator):
            """Files of a zyg helper's numba cache: ``<cache dir>/helpers/<sources
            stamp>/<the helper's folder>``."""

            def __init__(self, py_func, py_file):
                self._py_file = py_file
                self._lineno = py_func.__code__.co_firstlineno
                self._path = os.path.join(cache_dir(), "helpers", sources_stamp(),
                                          self.get_suitable_cache_subpath(py_file))

            def get_cache_path(self):
                return self._path

            def get_source_stamp(self):
                st = os.stat(self._py_file)
                return st.st_mtime, st.st_size

            def get_disambiguator(self):
                return str(self._lineno)

            @classmethod
            def from_function(cls, py_func, py_file):
                root = _zyg_root() + os.sep
                if not os.path.abspath(py_file).startswith(root) or py_func.__closure__ is not None:
                    return None
                return cls(py_func, py_file)

        class Impl(caching.CompileResultCacheImpl):
            _locator_classes = [Locator]

        class DataFile(caching.IndexDataCacheFile):
            """numba's index and data files, the data files named by a hash of their key
            (argument types, target, bytecode) instead of a counter.  Helpers compile from
            inside other compiles, without zyg's lock between processes
            (``compile.compile_for_types``): two processes saving two signatures at once
            each took the first free number, and one index could name the other's data.
            Now a name holds one signature's code whoever writes it; a lost index entry is
            a compile later, not wrong machine code."""

            def save(self, key, data):
                pattern = getattr(self, "_data_name_pattern", None)
                if not isinstance(pattern, str) or "{number:d}" not in pattern:
                    return super().save(key, data)      # another numba's layout: its own
                name = pattern.replace("{number:d}", hashlib.sha256(str(key).encode()).hexdigest()[:16])
                overloads = self._load_index()
                if overloads.get(key) != name:
                    overloads[key] = name
                    self._save_index(overloads)
                self._save_data(name, data)

        class HelperCache(caching.FunctionCache):
            _impl_class = Impl

            def __init__(self, py_func):
                super().__init__(py_func)
                self._cache_file = DataFile(cache_path=self._cache_path,
                                            filename_base=self._impl.filename_base,
                                            source_stamp=self._impl.locator.get_source_stamp())

        _CACHE_CLASS.append(HelperCache)
    return _CACHE_CLASS[0]


def helper_cache(disp: Any) -> None:
    """Keep the machine code of ``disp`` (a dispatcher of a helper marked
    ``numerics.on_disk``) on disk, where zyg's options are the default ones and the cache
    directory can be written; else it stays compiled per process."""
    if numerics.boundscheck():
        return
    try:
        disp._cache = _helper_cache_class()(disp.py_func)
    except (RuntimeError, OSError, AttributeError, ImportError, TypeError):
        # no writable place, or a numba whose cache classes are laid out otherwise
        # (numba.core.caching is not a public API): compiled in each process, as before
        pass
