"""The front end's entry point: a Python function to its cleaned-up SSA, cached.

``ssa_of(f)`` parses ``f``'s source, lowers it to SSA (``lower.py``) and runs the passes
(``passes.py``).  The result is cached per function (and per tuple of functions passed as
arguments); an entry whose reads changed (a redefined callee, a rebound global: see
``captured.py``) is built again.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..caches import BUILD_LOCK, on_invalidate
from .ir import Function
from .lower import lower, unwrap
from .passes import run_pipeline

_IR_CACHE: Dict[Any, Function] = {}


@on_invalidate
def clear() -> None:
    _IR_CACHE.clear()


def ssa_of(f: Any, statics: Optional[Dict[int, Any]] = None) -> Function:
    """The cleaned-up SSA IR of ``f`` (cached); ``statics``: functions passed as arguments."""
    py = unwrap(f)
    key = (py, tuple(sorted(statics.items()))) if statics else py
    ir = _IR_CACHE.get(key)
    if ir is None or not ir.reads.valid():
        with BUILD_LOCK:        # two threads: one lowers, the other gets its IR
            ir = _IR_CACHE.get(key)
            if ir is None or not ir.reads.valid():
                lowered = lower(py, statics)
                ir = run_pipeline(lowered)
                ir.reads = lowered.reads
                _IR_CACHE[key] = ir
    return ir
