"""Attributes of Python objects in differentiated code: ``self.w`` in a method.

A method differentiated through ``zyg.grad(obj.method)`` (or called from differentiated
code as ``self.helper(x)``) has its object bound statically.  Its attributes are read
like captured values (``zyg/ssa/captured.py``): an array attribute becomes a hidden
parameter, fetched again at every call (never differentiated, never frozen); a number
is compiled in as a constant guarded by value, so assigning another value to the
attribute rebuilds the code; another object (``self.config``) or a bound method is
bound statically, guarded by identity.
"""
from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np

from .captured import _LIBRARY_PACKAGES, Closure, Slot
from .ir import Const, Operand
from .prims import MakeTuple

_NUMBERS = (bool, int, float, complex, np.number)


def is_instance_object(v: Any) -> bool:
    """A user object whose attributes differentiated code may read (not a module, a
    class, a function, a number, an array, or an object of a library)."""
    if v is None or isinstance(v, _NUMBERS + (np.ndarray, tuple, str, bytes, types.ModuleType, type,
                                              types.FunctionType, types.BuiltinFunctionType,
                                              types.MethodType, Closure)):
        return False
    mod = (getattr(type(v), "__module__", None) or "").split(".")[0]
    return mod not in _LIBRARY_PACKAGES


def instance_of(low, node) -> Optional[Any]:
    """The user object the expression ``node`` statically denotes, else None."""
    import gast
    if not isinstance(node, (gast.Name, gast.Attribute)):
        return None
    v = low.static_value(node)
    return v if is_instance_object(v) else None


def _slot(obj: Any, node) -> Slot:
    base = getattr(node.value, "id", None) or type(obj).__name__
    return Slot("attr", obj, node.attr, f"{base}.{node.attr}")


def _get(low, obj: Any, node) -> Any:
    try:
        return getattr(obj, node.attr)
    except AttributeError:
        raise low.unsupported(node, f"{type(obj).__name__!r} object has no attribute "
                                    f"{node.attr!r}") from None


def static_attribute(low, obj: Any, node) -> Any:
    """``obj.attr`` as a static value (a method, another object, a number), guarded; None
    for an array attribute (a run-time value)."""
    v = _get(low, obj, node)
    if isinstance(v, np.ndarray):
        return None
    if isinstance(v, types.MethodType) and v.__self__ is obj:
        # a new bound method object at every access: guard the class's function instead
        f = getattr(type(obj), node.attr, None)
        if f is v.__func__:
            low.reads.guard(Slot("attr", type(obj), node.attr,
                                 f"{type(obj).__name__}.{node.attr}"), f)
            return v
    low.reads.guard(_slot(obj, node), v)
    return v


def attribute_value(low, obj: Any, node, hint: str) -> Operand:
    """``obj.attr`` as an operand: an array is a hidden parameter read at call time; a
    number (or a tuple of numbers) a constant guarded by value."""
    v = _get(low, obj, node)
    slot = _slot(obj, node)
    if isinstance(v, np.ndarray):
        return low.hidden_param(slot)
    if v is None or isinstance(v, _NUMBERS):
        low.reads.guard(slot, v)
        return Const(v)
    if isinstance(v, tuple) and all(isinstance(e, _NUMBERS) for e in v):
        low.reads.guard(slot, v)
        return low.emit(MakeTuple(), [Const(e) for e in v], node, hint)
    raise low.unsupported(node, f"the attribute {slot.name!r} is a {type(v).__name__}; "
                                "differentiated code reads numbers, tuples of numbers and arrays "
                                "from object attributes",
                          "pass the value as an argument, or read one of its numeric attributes")
