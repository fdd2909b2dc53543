"""The one build step: a plan, a transform's program, a back end's functions.

Every mode of zyg makes its code the same way -- fused and split gradients, forward mode
(plain and batched), the second-order drivers, a ``zyg.grad`` inside differentiated code,
checkpointed and parallel loops, recursive pairs, CUDA device gradients and kernel
adjoints::

    plan(ir, kinds, wrt, backend)                    zyg.pullbacks.transform.plan
        -> transform.emit(p, stem) -> Program         a Transform per mode (below)
        -> load(program, backend)  -> Built           Backend.load, once, here

:func:`build` is the three in one.  A mode that adds statements of its own to the emitted
module (a driver function calling the primal and the adjoint, a schedule of checkpoints)
calls ``transform.emit``, extends the :class:`Program`, and calls :func:`load`.  A mode
whose module is not from a plan (the second-order drivers, a checkpointed loop's schedule)
makes its :class:`Program` directly and calls :func:`load`.

:func:`load` is the only place a generated module reaches a back end
(``tests/test_layers.py`` checks that no other module calls ``Backend.load``): a back end
(``zyg/backends/``) plugs in there by its ``load`` and ``finish``, once for every mode.
The functions it returns are wrapped by :meth:`Built.checked`: their first compile maps
numba's errors to :class:`~zyg.errors.CompileError` at the user's line (:class:`FirstCall`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence

from .compile import LOAD_LOCK, compile_error, compile_for_types, compile_notice
from .pullbacks.transform import Plan, emit_fused, emit_split, row_stacks
from .ssa.emit import Code


@dataclass
class Program:
    """A generated module: its text (``code``), the objects its names refer to (``ns``),
    the functions to load from it (``names``, in order) and its stem (the module's file
    name, ``module``).  ``info``: what the transform tells its caller besides the code
    (the tape's layout, the differentiable arguments, the forward emitter...)."""
    code: Code
    ns: Dict[str, Any]
    names: List[str]
    module: str
    info: Any = None


@dataclass
class Built:
    """The loaded functions of a :class:`Program` (in the order of its ``names``), the path
    of the module's source, its user locations by line, and the program's ``info``."""
    fns: List[Callable]
    path: str
    locs: Dict[int, Any]
    info: Any = None

    def checked(self, i: int, fname: str) -> Callable:
        """Function ``i``, whose first compile reports numba's errors at the user's line
        (``fname``: the user function's name, for the message)."""
        return checked(self.fns[i], self.path, self.locs, fname)


def load(program: Program, backend: Any) -> Built:
    """Hand ``program`` to ``backend`` (a :class:`zyg.backends.Backend`): its module is
    written, executed and its functions prepared for the target (compiled lazily)."""
    fns, path, locs = backend.load(program.code, program.ns, program.names, program.module)
    return Built(list(fns), path, locs, program.info)


def build(transform: "Transform", p: Plan, stem: str) -> Built:
    """``transform``'s program of plan ``p`` (module stem ``stem``), loaded by the plan's
    back end."""
    return load(transform.emit(p, stem), p.backend)


# -- the transforms ------------------------------------------------------------------------

class Transform:
    """One mode of code generation: ``emit(plan, stem)`` gives the :class:`Program`.  The
    emitters themselves are in ``zyg/pullbacks/`` (and ``zyg/tasks/``, ``zyg/cuda_kernel.py``
    for their own modes); a Transform says which one, with which options, and which
    functions of the module its mode calls."""

    def emit(self, p: Plan, stem: str) -> Program:
        raise NotImplementedError


@dataclass
class FusedInfo:
    diffable: List[int]         # the argument positions with a gradient, in its order
    stacks: List[Any]           # (stack, dtype) of the buffers the function takes last
    retry: bool                 # zero-cotangent tests were left out: a build with them exists
    rows: List[str] = field(default_factory=list)   # stacks passed in as rows (Backend.tape_rows)


@dataclass
class Fused(Transform):
    """Value and gradient in one function ``stem(*args, *buffers)`` (reverse mode, output
    cotangent 1): ``zyg.grad``, ``value_and_grad``, device gradients.  The loaded function
    is the last one (the primal and adjoint parts of a large function come first)."""
    value: bool = True
    zero_guards: bool = True

    def emit(self, p: Plan, stem: str) -> Program:
        _, code, ns, diffable, stacks, parts, retry = emit_fused(p, stem, value=self.value,
                                                                 zero_guards=self.zero_guards)
        return Program(code, ns.ns, list(parts) + [stem], stem,
                       FusedInfo(diffable, stacks, retry, row_stacks(code, p.backend)))


@dataclass
class SplitInfo:
    tape: List[str]             # the names of what the primal records, in its order
    mutates: bool               # the function writes into an argument array


@dataclass
class Split(Transform):
    """A recording primal ``stem_primal(*args) -> (value, tape)`` and its adjoint
    ``stem_adjoint(*tape, dy)``: ``zyg.pullback``, nested gradients, checkpointed steps.
    ``adjoint=False`` loads the primal alone (a plan with nothing to differentiate: the
    plain step of a loop)."""
    relowered: bool = False
    pooled: bool = False
    adjoint: bool = True

    def emit(self, p: Plan, stem: str) -> Program:
        code, ns, tape, mutates = emit_split(p, stem, relowered=self.relowered, pooled=self.pooled)
        names = [stem + "_primal"] + ([stem + "_adjoint"] if self.adjoint else [])
        return Program(code, ns.ns, names, stem, SplitInfo(tape, mutates))


@dataclass
class ForwardMode(Transform):
    """Forward mode, ``stem(*args, *tangents) -> (value, tangent)`` (``batched``: a block of
    tangents per argument, one pass).  ``info`` is the emitter (which arguments carry a
    tangent, whether the batched form has array math); a batched form that cannot be
    generated raises ``NotBatched``."""
    batched: bool = False
    copy_args: bool = True
    keep: Optional[FrozenSet[int]] = None     # ids of parameters passed through as they are
    zero_guards: bool = False                 # a zero tangent contributes nothing (0 * inf)

    def emit(self, p: Plan, stem: str) -> Program:
        if self.batched:
            from .pullbacks.forward_batched import BatchedForward
            fwd = BatchedForward(p)
        else:
            from .pullbacks.forward import Forward
            fwd = Forward(p)
        fwd.copy_args = self.copy_args
        fwd.zero_guards = self.zero_guards
        if self.keep is not None:
            fwd.keep_params = set(self.keep)
        code = fwd.emit(stem)
        return Program(code, fwd.ns.ns, [stem], stem, fwd)


# -- the first compile of a loaded function ------------------------------------------------

def checked(fn: Callable, path: str, locs, fname: str) -> Callable:
    """Compiled ``fn`` with numba errors on its first compilation mapped to CompileError."""
    if not hasattr(fn, "py_func"):
        return fn
    return FirstCall(fn, path, locs, fname)


class FirstCall:
    """Compiles a numba dispatcher for the argument types of its first call,
    turning numba's typing errors into :class:`~zyg.errors.CompileError`."""

    def __init__(self, fn, path, locs, fname):
        self.fn = fn
        self.path = path
        self.locs = locs
        self.fname = fname

    def compile_for(self, args) -> Callable:
        with LOAD_LOCK:         # self.fn may be replaced (another pipeline) while compiling
            return self._compile_for(args)

    def _compile_for(self, args) -> Callable:
        import numba
        import numba.core.errors as nerr
        sig = tuple(numba.typeof(a) for a in args)
        try:
            try:
                with compile_notice(self.fname, self.locs):
                    try:
                        compile_for_types(self.fn, sig)
                    except nerr.TypingError:
                        if not _without_ssa(self.fn):
                            raise
                        # a module compiled without numba's SSA that numba cannot type that
                        # way (a placeholder of another dtype than its value): numba's
                        # default pipeline, for every function of the module
                        self.fn = _with_numba_ssa(self.fn)
                        compile_for_types(self.fn, sig)
            except NotImplementedError as e:
                if "layout 'A'" not in str(e):
                    raise
                # numba's type inference can give a loop's array expression (``v = B * B``)
                # the layout 'A' when a variable it reads joins C and F arrays (its type
                # grows C, then A, across the fixpoint), and then cannot allocate its
                # result.  Without numba's rewrite passes the expression is not fused:
                # compiled again that way (slower elementwise chains, same values)
                self.fn = _without_rewrites(self.fn)
                compile_for_types(self.fn, sig)
        except nerr.NumbaError as e:
            raise compile_error(e, self.path, self.locs, self.fname) from None
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, AssertionError,
                NotImplementedError) as e:
            # an internal numba failure while typing or lowering the generated code: still a
            # zyg error
            raise compile_error(e, self.path, self.locs, self.fname) from e
        return self.fn

    def __call__(self, *args):
        self.compile_for(args)
        return self.fn(*args)


def compiled_now(entry: Callable, args: Sequence[Any]) -> Callable:
    """``entry`` compiled now for ``args`` if it is a :class:`FirstCall` (the bare callable
    to cache), else ``entry``."""
    if isinstance(entry, FirstCall):
        return entry.compile_for(args)
    return entry


def _without_ssa(disp) -> bool:
    from .backends.cpu import generated_pipeline
    return getattr(getattr(disp, "_compiler", None), "pipeline_class", None) is generated_pipeline()


def _rejit(disp, **extra):
    """A new dispatcher of ``disp``'s Python function with its options (and its disk cache,
    if it had one), plus ``extra``."""
    import numba
    opts = dict(disp.targetoptions)
    opts.pop("nopython", None)
    cache = getattr(disp, "_cache", None) is not None and type(disp._cache).__name__ != "NullCache"
    return numba.njit(cache=cache, **opts, **extra)(disp.py_func)


def _with_numba_ssa(disp):
    """``disp`` and the other functions of its generated module compiled without numba's
    SSA (``backends.cpu.generated_pipeline``) replaced, in the module, by dispatchers with
    numba's default pipeline; returns ``disp``'s replacement."""
    glob = disp.py_func.__globals__
    out = disp
    for name, v in list(glob.items()):
        # only the module's own functions: a dispatcher of another generated module that
        # it calls (a recursive pair, pullbacks/native.py) refers to itself by its own
        # module's name, and a copy of it here would compile it re-entrantly
        if _without_ssa(v) and getattr(v.py_func, "__globals__", None) is glob:
            glob[name] = _rejit(v)
            if v is disp:
                out = glob[name]
    return _rejit(disp) if out is disp else out


def _without_rewrites(disp):
    """A dispatcher of ``disp``'s Python function with its options, numba's rewrite passes
    off (and its disk cache, if it had one)."""
    return _rejit(disp, no_rewrites=True, pipeline_class=disp._compiler.pipeline_class)
