"""What a back end is: the one object that turns the transforms' output into callables.

The transforms (``zyg/pullbacks/``) emit a program of ordinary statements and typed tape
nodes (``zyg/ssa/emit.py``), and ask a :class:`Backend` the few questions whose answers
depend on where the code will run (is it compiled to machine code, which index form is
cheap, may an error message be built from run-time values).  The back end then

* lowers the tape nodes to its storage (:attr:`Backend.storage`: pooled growable numpy
  stacks for ``python`` and ``cpu``; a GPU back end would give fixed local arrays or
  per-thread rows, ``../shared/CUDA_AND_TASKS.md``);
* prepares the objects generated code refers to (:meth:`Backend.wrap`: on ``cpu``, plain
  Python helpers become numba functions) and the helpers of the rule tables
  (:meth:`Backend.jit`, :meth:`Backend.helper`, :meth:`Backend.vectorize`);
* chooses its compile options (:meth:`Backend.options`, named in the generated text by
  :meth:`Backend.tag`, so code compiled otherwise has another file, module and disk-cache
  entry) and compiles (:meth:`Backend.load`).

Adding a back end is a subclass in a module of this package, registered in
``zyg/backends/__init__.py``; nothing below this layer names a target.
"""
from __future__ import annotations

import os
import sys
import types
import numpy as np
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import numerics
from ..compile import LOAD_LOCK, fingerprint, ns_signature, write_source
from ..version import __version__


#: predicates telling that a value in a generated module's namespace ties its machine code
#: to this process (MPI handles read through numba-mpi): filled by ``zyg/tasks/mpi_native.py``
PROCESS_PINNED: List[Callable[[Any], bool]] = []


def _pins_process(v: Any) -> bool:
    return any(p(v) for p in PROCESS_PINNED)


class Backend:
    """A target of generated code.  Subclasses set the capabilities and override the
    methods whose behaviour differs; the defaults describe plain Python."""

    #: the target's name, as users pass it (``target="cpu"``)
    name = ""
    #: compiled to machine code (numba nopython): no Python objects at run time, errors
    #: carry constant messages, ``np.uint64`` subscripts skip the negative-index wraparound
    compiled = False
    #: arrays must be in the machine's byte order (numba): the driver runs on native copies
    #: and refuses writes into byte-swapped arrays
    native_byte_order = False
    #: ``a[m]`` with a boolean mask ``m`` of several dimensions (numba has one-dimensional
    #: masks only; a helper gathers the others)
    nd_masks = True
    #: fused gradients carry the in-loop zero-cotangent tests from the first build (the
    #: python target: speed matters less there than numpy's warnings for 0 * inf); compiled
    #: ones build without them and again with them only when a gradient comes out nan
    zero_guards_first = True
    #: arithmetic promotes a number by its type (numba: float32 array * float is float64),
    #: not as numpy 2's weak Python numbers: the transform casts such numbers to float32
    #: where zyg's kinds (numpy's semantics) say the result is float32
    strong_scalars = False
    #: generated code runs on the host, called from Python (False for device code, which
    #: only the API's device entry points build: zyg/cuda.py)
    host = True

    def __init__(self):
        from .storage import NumpyStacks
        #: how the tape nodes of generated code are spelled on this target
        self.storage = NumpyStacks(unsigned=self.compiled)
        self._helpers: Dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"<zyg back end {self.name!r}>"

    def tape_rows(self, init) -> bool:
        """Whether the stack that ``StackInit`` node ``init`` creates is passed in instead:
        a buffer ``_zt_<stack>`` after the generated function's other parameters, of which
        the thread's column ``_zrow`` (given before them) is its tape (``backends/cuda.
        RowStacks``).  Growable storages never: they allocate their own."""
        return False

    # -- options ---------------------------------------------------------------------
    def options(self) -> Dict[str, Any]:
        """The compile options in force (they change with ``zyg.set_boundscheck``)."""
        return {}

    def tag(self) -> str:
        """A comment line naming the target and its options; it goes into every generated
        module's text, so that code compiled otherwise never shares a file or a cache."""
        return f"# target {self.name}"

    def key(self) -> Tuple[str, str]:
        """What a cache of this target's compiled objects is keyed by."""
        return (self.name, self.tag())

    def prepare(self) -> None:
        """Run once before the first build of a function for this target."""

    # -- helpers of generated code ---------------------------------------------------
    def jit(self, fn: Callable, **kw) -> Callable:
        """``fn`` (a plain Python function) as this target runs it."""
        return fn

    def helper(self, fn: Callable) -> Callable:
        """:meth:`jit` of a module-level helper, one per process and options: every
        generated module refers to the same object (its fingerprint stays the same)."""
        k = (fn, self.tag())
        got = self._helpers.get(k)
        if got is None:
            got = self._helpers.setdefault(k, self.jit(fn))
        return got

    def where(self) -> Callable:
        """What generated code calls for ``np.where`` (the name ``_zyg_where`` of the rules'
        adjoints, and ``np.where`` in user code): numpy's own here."""
        return np.where

    def zeros_as(self) -> Optional[Callable]:
        """What generated code calls for a zero array shaped as another (a shadow), or
        None for numpy's spelling ``np.zeros(x.shape, x.dtype)`` (which code generated for
        python can be lowered again: forward over reverse)."""
        return None

    def vectorize(self, kernel: Callable, python: Callable) -> Callable:
        """An elementwise function (a ufunc where compiled) from the scalar ``kernel``;
        ``python``: the numpy-level version the python target uses."""
        return python

    def wrap(self, obj: Any) -> Any:
        """The object a name in generated code refers to on this target."""
        return obj

    def exec_source(self, src: str, label: str, glob: Dict[str, Any]) -> None:
        """Execute generated helper source in ``glob`` with this target's semantics
        (on python: numpy's float semantics, ``zyg/numerics.py``)."""
        glob.update(numerics.HELPERS)
        exec(numerics.python_semantics(src, label, glob), glob)

    def function(self, src: str, label: str, glob: Dict[str, Any], name: str,
                 uncacheable: bool = False) -> Callable:
        """The function ``name`` defined by ``src`` (a rule's generated forward or backward
        part, a custom rule's checked pullback), ready to be called from generated code."""
        self.exec_source(src, label, glob)
        return glob[name]

    def call_python(self, stmt: str, outs: List[Tuple[str, str]], glob: Dict[str, Any]) -> List[str]:
        """Statements of generated code that run the Python statement ``stmt`` (a call of
        an object zyg keeps at run time, such as a recursive call's pullback), which binds
        the names ``outs`` (``(name, numba type)`` pairs).  ``glob``: the globals of the
        code, to which the statements may add."""
        return [stmt]

    # -- modules ---------------------------------------------------------------------
    def load(self, code, ns: Dict[str, Any], names: List[str], stem: str):
        """Write the generated module ``code`` (its globals ``ns``) to the cache directory,
        exec it, and return ``(functions named names, path, user locations by line)``."""
        text = (f"# generated by zyg {__version__}; do not edit\n{self.tag()}\n"
                f"# depends on: {fingerprint(ns)}\n" + code.text(self.storage))
        path = write_source(text, stem)
        # a real module (registered in sys.modules) so that numba's on-disk cache can
        # rebuild the function's environment in a later process; one per target, since
        # a compiling target replaces the module's functions by its own
        modname = f"zyg_gen_{self.name}_" + os.path.splitext(os.path.basename(path))[0]
        with LOAD_LOCK:
            mod = sys.modules.get(modname)
            if mod is None or getattr(mod, "__zyg_ns_ids__", None) != ns_signature(ns):
                mod = types.ModuleType(modname)
                mod.__file__ = path
                mod.__dict__.update(ns)
                mod.__zyg_ns_ids__ = ns_signature(ns)
                self.exec_module(text, path, ns, mod.__dict__)
                sys.modules[modname] = mod
            glob = mod.__dict__
            # code calling object-mode helpers (recursive calls) cannot be reloaded from
            # numba's disk cache in another process: it is compiled afresh
            cache = not any(getattr(v, "_zyg_uncacheable", False) for v in ns.values())
            # code calling MPI through numba-mpi holds this process's addresses: numba
            # does not cache it, and it is compiled without waiting for other processes
            # compiling it too (compile.compile_for_types)
            pinned = cache and self.compiled and "numba_mpi" in sys.modules and \
                any(_pins_process(v) for v in ns.values())
            out = []
            for n in names:
                f = self.finish(glob[n], cache, code)
                if pinned and getattr(f, "_cache", None) is not None:
                    from numba.core.caching import NullCache
                    f._cache = NullCache()
                glob[n] = f
                out.append(f)
        locs = {k + 3: v for k, v in code.locs.items()}   # +3 for the header lines
        return out, path, locs

    def exec_module(self, text: str, path: str, ns: Dict[str, Any], glob: Dict[str, Any]) -> None:
        self.exec_source(text, path, glob)

    def finish(self, f: Callable, cache: bool, code=None) -> Callable:
        """A function of a loaded module (generated as ``code``) as it is called (compiled
        where the target compiles)."""
        return f
