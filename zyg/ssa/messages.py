"""What to tell the user when lowering rejects a construct: the construct itself, not a symptom.

Lowering sees one node at a time; a string constant or a call of a local value is a
symptom whose cause is the node around it (``params["a"]`` is a dict key,
``np.einsum("ij,jk", ...)`` a subscript string, ``print("x", x)`` a print, ``x.std()``
an array method, ``rng.normal()`` a random generator).  These helpers look at the
surrounding syntax and return ``(message, hint)`` for ``Lowerer.unsupported``.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import gast
import numpy as np


def _parent(root: Any, node: Any) -> Optional[Any]:
    for p in gast.walk(root):
        for c in gast.iter_child_nodes(p):
            if c is node:
                return p
    return None


def _dotted(node: Any) -> Optional[str]:
    """``np.linalg.solve`` for an attribute chain of names, None for anything else."""
    parts = []
    while isinstance(node, gast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, gast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def string_constant(root: Any, node: Any) -> Tuple[str, str]:
    """The message for a string literal at ``node`` inside the function ``root``."""
    text = repr(node.value)
    parent = _parent(root, node)
    if isinstance(parent, gast.Subscript):
        base = _dotted(parent.value) or "a value"
        return (f"indexing {base} with the string key {text} (a dict or a structured record) "
                "is not supported",
                "pass the entries as separate arguments or as a namedtuple (params.a)")
    if isinstance(parent, gast.keyword):
        parent = _parent(root, parent)
    if isinstance(parent, gast.Call):
        callee = _dotted(parent.func) or "a function"
        if callee == "print":
            return ("print is not supported in differentiated code",
                    "print outside the function, or on the value it returns")
        return (f"the string argument {text} of {callee}(...) is not supported",
                "differentiated calls take numbers and arrays; a string option (a mode, an "
                "einsum subscript) is not supported yet")
    if isinstance(parent, (gast.Raise, gast.Assert)):
        return (f"the string {text} of a {type(parent).__name__.lower()} statement is not supported",
                "check the arguments before calling the differentiated function")
    return f"constant {text} is not supported", "differentiated code works on numbers"


def local_call(node: Any) -> Tuple[str, str]:
    """The message for a call of something that is not a module-level function: a method
    of a local value (``x.std()``, ``rng.normal()``) or a local name."""
    func = node.func
    if isinstance(func, gast.Attribute):
        owner = _dotted(func.value) or "a value"
        attr = func.attr
        call = f"{owner}.{attr}()"
        if hasattr(np.random.Generator, attr) or hasattr(np.random.RandomState, attr):
            return (f"calling {call}, a method of a random generator, is not supported in "
                    "differentiated code",
                    "draw the random numbers before the call and pass them in as an argument")
        if attr == "astype":
            return (f"the array method {call} is not supported by zyg",
                    "convert the argument before calling the differentiated function")
        if hasattr(np.ndarray, attr):
            hint = (f"write np.{attr}({owner}, ...)" if callable(getattr(np, attr, None))
                    else f"compute {call} outside the function and pass the result in")
            return f"the array method {call} is not supported by zyg", hint
        return (f"calling the method {call} of a local value is not supported",
                "call module-level functions, or compute it outside and pass the result in")
    return "calling a local value is not supported", "call module-level functions"
