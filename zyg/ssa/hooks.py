"""Extension points of the front end.

The front end (parsing, SSA construction, passes, analyses) imports nothing from the
layers above it.  What it must know about them it reads from the tables below, which
those layers fill in when they are imported (``import zyg`` imports them all):

* :data:`KNOWN_CALLEES`: predicates telling that a callee is reached through a rule
  (the rule registry), so that its source is never inlined;
* :data:`FUNCTION_PRIMS`: ``zyg.hook`` / ``zyg.checkpoint``, lowered to the primitive
  their layer defines (``zyg/rules/higher.py``);
* :data:`CALL_LOWERINGS`: lowerings of whole calls owned by another layer
  (``zyg.grad(g)(x)`` inside differentiated code: ``zyg/rules/gradcall.py``);
* :data:`LOOPS`: iterators whose ``for`` loop lowers to primitives of another layer
  (``zyg.checkpointed_range``: ``zyg/nested/ckloop.py``);
* :data:`PRIMS`: primitives the front end emits for a method call (``x.astype``);
* :data:`STATIC_ATTRS`: attributes of library modules that another layer resolves itself
  (``cuda.threadIdx.x`` inside a kernel: ``zyg/cuda_kernel.py``); a resolved object may
  lower itself as a value (``_zyg_lower_value(lowerer, node, hint)``);
* :func:`generated_nondifferentiable`: functions the front end generates (raisers,
  ``is None`` tests), declared to whoever keeps the non-differentiable functions.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional

KNOWN_CALLEES: List[Callable[[Any], bool]] = []
FUNCTION_PRIMS: Dict[Any, "FunctionPrim"] = {}
CALL_LOWERINGS: List[Callable[[Any, Any, Any, str], Optional[Any]]] = []
LOOPS: Dict[Any, "LoopPrims"] = {}
PRIMS: Dict[str, Any] = {}
STATIC_ATTRS: List[Callable[[Any, str, Any], Any]] = []

_GENERATED: List[Any] = []
_GENERATED_LISTENERS: List[Callable[[Any], None]] = []


class FunctionPrim(NamedTuple):
    """``name(f, *args)``: ``make(f)`` is the primitive applied to ``args``; ``nargs`` the
    number of values it takes (None: any)."""
    name: str
    make: Callable[[Any], Any]
    nargs: Optional[int]


class LoopPrims(NamedTuple):
    """``for t in it(...)`` lowered to a step function and two primitives:
    ``loop(step, ncarried, names, loc)`` runs the loop, ``part(k)`` reads carried value k."""
    loop: Callable[..., Any]
    part: Callable[[int], Any]
    parallel: bool = False      # a parallel loop (numba.prange): Lowerer.parallel_loop


def has_rule(fn: Any) -> bool:
    """Whether a layer above reaches ``fn`` through a rule (so it is never inlined)."""
    return any(p(fn) for p in KNOWN_CALLEES)


def generated_nondifferentiable(fn: Any) -> Any:
    """Declare a function the front end generated non-differentiable (for good)."""
    _GENERATED.append(fn)
    for listener in _GENERATED_LISTENERS:
        listener(fn)
    return fn


def on_generated_nondifferentiable(listener: Callable[[Any], None]) -> None:
    """Call ``listener`` on every generated function, those declared already included."""
    _GENERATED_LISTENERS.append(listener)
    for fn in _GENERATED:
        listener(fn)
