"""How the runner calls zyg, in one place (zyg is imported lazily).

zyg's core is developed alongside this suite, so importing it must never be a
precondition for importing the benchmarks; :func:`import_zyg` is called only when
the zyg column is measured.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any, Callable


def import_zyg() -> ModuleType:
    """Import and return the ``zyg`` package (raises ImportError when absent)."""
    return importlib.import_module("zyg")


def value_and_grad(zyg: ModuleType, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``zyg.value_and_grad(fn)`` on the cpu target; ``g(*args) -> (value, grad)``.

    Passes ``target="cpu"`` explicitly when the signature accepts it (cpu is the
    default target either way).
    """
    try:
        params = inspect.signature(zyg.value_and_grad).parameters
    except (TypeError, ValueError):
        params = {}
    if "target" in params:
        return zyg.value_and_grad(fn, target="cpu")
    return zyg.value_and_grad(fn)
