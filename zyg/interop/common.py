"""What ``zyg.torch`` and ``zyg.jax`` share: the positions ``argnums`` names, the arguments
a function writes into, numbers read out of 0-d arrays, where the user's function is.

Neither framework's memory may be written by zyg: a PyTorch tensor handed over through
numpy shares its memory with the caller's tensor, and JAX hands callbacks read-only
buffers.  zyg's pullback writes into the argument arrays its function writes (and
rewinds them in ``back``), so :func:`written_arguments` finds, once per argument
signature, which arguments those are; the interop modules pass copies of exactly those
and the others without a copy.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from .. import backends, safety
from ..caches import on_invalidate
from ..driver import _is_static, _kinds, _normalise_argnums, _with_hidden
from ..entry import adapt
from ..errors import ZygError
from ..pullbacks.transform import plan
from ..ssa.build import ssa_of

Argnums = Union[None, int, Sequence[int]]

_WRITTEN: Dict[Any, Tuple[int, ...]] = {}


@on_invalidate
def _forget_written() -> None:
    _WRITTEN.clear()


def python_function(f: Any) -> Any:
    """The plain Python function behind ``f`` (a numba dispatcher's ``py_func``,
    ``functools.wraps``' ``__wrapped__``, a partial's or method's function), or ``f``."""
    for _ in range(20):
        nxt = getattr(f, "py_func", None) or getattr(f, "__wrapped__", None) or \
            getattr(f, "func", None) or getattr(f, "__func__", None)
        if nxt is None:
            break
        f = nxt
    return f


def name_of(f: Any) -> str:
    return getattr(python_function(f), "__name__", None) or type(f).__name__


def where(f: Any) -> Tuple[Optional[str], Optional[int]]:
    """(file, first line) of the user's function, for the errors that point at it."""
    code = getattr(python_function(f), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else (None, None)


class Wrapped:
    """What ``zyg.torch.function`` / ``zyg.jax.function`` return: ``f`` made callable by a
    framework, named as ``f``, its errors pointing at ``f``'s line."""
    api = "zyg.interop"

    def __init__(self, f: Callable, argnums: Argnums, target: str):
        self.f = f
        self.argnums = argnums
        self.target = target
        self.__name__ = name_of(f)
        self.__qualname__ = getattr(python_function(f), "__qualname__", self.__name__)
        self.__doc__ = getattr(python_function(f), "__doc__", None)

    def __repr__(self) -> str:
        return f"<{self.api} of {self.__qualname__}>"

    def _error(self, msg: str, hint: Optional[str] = None):
        from ..errors import TypeMismatch
        filename, lineno = where(self.f)
        return TypeMismatch(f"{self.api}({self.__name__}): {msg}", filename, lineno, hint=hint)


def check_argnums(argnums: Argnums, api: str) -> Argnums:
    """``argnums`` as given to ``zyg.torch.function`` / ``zyg.jax.function``: None, an int
    or a tuple of ints (TypeError otherwise; the range is checked at call time)."""
    if argnums is None:
        return None
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, (bool, np.bool_)):
        return int(argnums)
    if isinstance(argnums, (tuple, list)) and all(
            isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) for a in argnums):
        return tuple(int(a) for a in argnums)
    raise TypeError(f"{api}: argnums must be None, an int or a tuple of ints, not {argnums!r}")


def positions(argnums: Argnums, nargs: int) -> Optional[Tuple[int, ...]]:
    """The argument positions ``argnums`` names in a call with ``nargs`` arguments (negative
    ones count from the end; ValueError when out of range, as ``zyg.grad``), in order and
    without repeats; None for ``argnums=None``."""
    if argnums is None:
        return None
    nums, _ = _normalise_argnums(argnums, nargs)
    return tuple(dict.fromkeys(nums))


def _holds_array(a: Any) -> bool:
    if isinstance(a, np.ndarray):
        return True
    return isinstance(a, tuple) and any(_holds_array(x) for x in a)


def copy_arrays(a: Any) -> Any:
    """``a`` with every numpy array in it (at any depth in tuples) copied."""
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, tuple):
        vals = [copy_arrays(x) for x in a]
        return tuple(vals) if type(a) is tuple else type(a)(*vals)
    return a


def written_arguments(f: Callable, args: Sequence[Any], target: str) -> Tuple[int, ...]:
    """Positions in ``args`` of the arguments holding arrays that ``zyg.pullback(f, *args)``
    may write into (zyg's alias analysis, ``safety.written_leaves``, once per argument
    signature).  Conservative: where the analysis does not apply (methods, partials,
    function arguments) or raises a zyg error, every argument that holds an array (the
    pullback itself then reports what is wrong with ``f``)."""
    holding = tuple(i for i, a in enumerate(args) if _holds_array(a))
    if not holding:
        return ()
    try:
        g, binder = adapt(f)
        full = tuple(args)
        if binder is not None:
            if binder.skip or binder.partial_kw:
                return holding
            full = binder.bind(full, {}, name_of(f))      # defaults: after the user's arguments
        if any(_is_static(a) for a in full):
            return holding
        ir = ssa_of(g)
        if ir.nargs != len(full):
            return holding
        kinds = _kinds(_with_hidden(ir, full), ir.name)
        key = (python_function(g), tuple(kinds), target, ir.reads)
        got = _WRITTEN.get(key)
        if got is None:
            p = plan(ir, kinds, list(range(ir.nargs)), backends.get(target))
            leaves = safety.written_leaves(p)
            if p.flat is not None:
                owner = {j: i for i, js in enumerate(p.flat.leaf_of) for j in js}
                leaves = tuple(owner[j] for j in leaves)
            got = _WRITTEN[key] = tuple(sorted({i for i in leaves if i < len(args)}))
        return got
    except ZygError:        # the pullback raises it again, as the user's error
        return holding


def scalar_of(a: np.ndarray) -> Any:
    """A 0-d array as the number zyg specialises on: float64 -> float, float32 ->
    ``np.float32``, an integer -> int, a bool -> bool (other kinds: the numpy scalar)."""
    v = a[()]
    k = a.dtype.kind
    if k == "b":
        return bool(v)
    if k in "iu":
        return int(v)
    if a.dtype == np.float64:
        return float(v)
    return v


def float_result_dtype(dtypes: Sequence[np.dtype]) -> np.dtype:
    """The dtype of a scalar float result: float64 when any floating input is float64 or
    none is floating, float32 when the floating inputs are all float32 (PyTorch's and
    JAX's promotion of float32 with float32)."""
    fl = [np.dtype(d) for d in dtypes if np.dtype(d).kind == "f"]
    if fl and all(d == np.float32 for d in fl):
        return np.dtype(np.float32)
    return np.dtype(np.float64)
