"""How the runner calls zyg, in one place (zyg is imported lazily).

zyg's core is developed alongside this suite, so importing it must never be a
precondition for importing the benchmarks; :func:`import_zyg` is called only when
the zyg column is measured.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any, Callable, Sequence


def import_zyg() -> ModuleType:
    """Import and return the ``zyg`` package (raises ImportError when absent)."""
    return importlib.import_module("zyg")


def value_and_grad(
    zyg: ModuleType, fn: Callable[..., Any], argnums: Sequence[int] = (0,)
) -> Callable[..., Any]:
    """``zyg.value_and_grad(fn, argnums)`` on the cpu target; ``g(*args) -> (value, grad)``.

    ``argnums == (0,)`` is zyg's default and is not passed (the scalar workloads
    call zyg exactly as a user would); one argnum is passed as an int (the gradient
    is then one float or array), several as a tuple (a tuple of gradients).
    Passes ``target="cpu"`` explicitly when the signature accepts it (cpu is the
    default target either way).
    """
    argnums = tuple(argnums)
    try:
        params = inspect.signature(zyg.value_and_grad).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {}
    if "target" in params:
        kwargs["target"] = "cpu"
    if argnums != (0,):
        kwargs["argnums"] = argnums[0] if len(argnums) == 1 else argnums
    return zyg.value_and_grad(fn, **kwargs)
