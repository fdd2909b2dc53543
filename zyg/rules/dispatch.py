"""The array-rule lookup: one entry point over every module of array rules.

The rule modules (:mod:`.arrays` for numpy's elementwise functions and reductions,
:mod:`.numpy_extra` for statistics, sorting and shapes, :mod:`.linalg`, :mod:`.special`
for scipy.special) each keep their own table; the transforms ask this module, which
knows the order in which they are consulted.  The rule modules import :mod:`.arrays`
for the rule machinery (``ARule``, ``Ctx``) and never this module.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..ssa import hooks
from ..ssa.ir import Const
from ..ssa.prims import ArrayOf, Stacked
from . import linalg, numpy_extra, special
from .arrays import _AXIS_FNS, _COPY_RULE, _MULNZ_RULE, _NOCONST, _REDUCE_LIKE_RULE, ARRAY_RULES, \
    ARule, _array_of, _stacked, base_helpers, base_primal_call, is_mulnz


def rule_for(fn: Any) -> Optional[ARule]:
    """The array rule of ``fn``, or None."""
    if isinstance(fn, ArrayOf):
        return ARule(_array_of)
    if is_mulnz(fn):
        return _MULNZ_RULE
    if getattr(fn, "_zyg_where", False):
        fn = np.where           # a target's np.where (zyg/backends/cpu.py), in generated code
    if getattr(fn, "py_func", fn) is hooks.PRIMS.get("reduce_like"):
        return _REDUCE_LIKE_RULE
    if fn is np.ascontiguousarray:
        return _COPY_RULE
    if isinstance(fn, Stacked):
        if fn.fn in (np.vstack, np.hstack, np.column_stack):
            return numpy_extra.stacked_rule(fn.fn)
        return _stacked(fn.fn)
    extra = numpy_extra.rule_for(fn)      # statistics, sorting, shapes; keepdims=
    if extra is not None:
        return extra
    try:
        got = linalg.LINALG_RULES.get(fn) or ARRAY_RULES.get(fn)
    except TypeError:
        return None
    if got is None:
        got = special.array_rule(fn)        # scipy.special on arrays
    return got


def call_parts(fn: Any, operands: list, args: List[str], kwargs: Dict[str, Any],
               render: Callable[[Any], str]) -> Tuple[List[str], Dict[str, Any]]:
    """Rendered positional arguments and ``{name: (rendered, constant or _NOCONST)}``
    keywords of a call, with a positional axis (``np.sum(a, 0)``) moved to ``axis=``,
    as :func:`primal_call` expects."""
    def const(v):
        return v.value if isinstance(v, Const) else _NOCONST
    kw = {k: (render(v), const(v)) for k, v in kwargs.items()}
    if len(operands) == 2 and fn in _AXIS_FNS and "axis" not in kw:
        kw["axis"] = (args[1], const(operands[1]))
        args = args[:1]
    return numpy_extra.call_parts(fn, operands, list(args), kw, const)


def primal_call(fn: Any, args: List[str], kinds: List[str], kwargs: Dict[str, Any],
                result_kind: Optional[str] = None) -> Optional[str]:
    """Source of ``fn(*args, **kwargs)`` where numba needs another spelling; else None.
    ``kwargs`` maps names to (rendered, constant value or _NOCONST)."""
    sp = special.primal_call(fn, args, kinds, kwargs)
    if sp is not None:
        return sp
    sp = linalg.primal_call(fn, args, kinds, kwargs)
    if sp is not None:
        return sp
    sp = numpy_extra.primal_call(fn, args, kinds, kwargs, result_kind, primal_call)
    if sp is not None:
        return sp
    return base_primal_call(fn, args, kinds, kwargs)


def helpers(backend: Any) -> Dict[str, Any]:
    """Name -> helper object for generated code on ``backend`` (a
    :class:`zyg.backends.Backend`, which the transforms pass down)."""
    out = dict(base_helpers(backend))
    out.update(special.helpers(backend))
    out.update(numpy_extra.helpers(backend))
    out.update(linalg.helpers(backend))
    return out
