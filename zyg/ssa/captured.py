"""What a lowered function reads from outside its arguments, and how to read it again.

Differentiated code reads module globals, closure cells and default values.  zyg never
freezes a mutable value into generated code: an array read from a global or a closure
becomes a *hidden parameter* of the SSA function (closure conversion), fetched again at
every call, so the compiled code reads the array's current contents, as Python does.
Everything else the lowering resolved statically (the functions it inlined, scalars it
compiled in as constants, modules it looked attributes up in) is recorded as a *guard*:
the compiled code is valid while every guard still holds, and is rebuilt when one fails
(a notebook cell redefined a helper, a global scalar was rebound to another value).

A :class:`Slot` names one place a value is read from: a key of a dict (module globals, a
module's ``__dict__``), a closure cell, or an entry of a function's ``__defaults__``.
"""
from __future__ import annotations

import types
from typing import Any, Dict, List, Tuple

import numpy as np

_MISSING = object()


class Slot:
    """A place a lowered function reads a value from: ``dict[key]``, ``cell.cell_contents``,
    ``fn.__defaults__[key]`` or ``getattr(obj, key)``."""

    __slots__ = ("kind", "obj", "key", "name")

    def __init__(self, kind: str, obj: Any, key: Any, name: str):
        self.kind = kind        # "dict", "cell", "default" or "attr" (an object's attribute)
        self.obj = obj
        self.key = key
        self.name = name        # for messages: the name the user wrote

    def ident(self) -> Tuple[str, int, Any]:
        return (self.kind, id(self.obj), self.key)

    def get(self) -> Any:
        if self.kind == "dict":
            return self.obj.get(self.key, _MISSING)
        if self.kind == "cell":
            try:
                return self.obj.cell_contents
            except ValueError:
                return _MISSING
        if self.kind == "attr":
            return getattr(self.obj, self.key, _MISSING)
        d = self.obj.__defaults__ or ()
        return d[self.key] if self.key < len(d) else _MISSING

    def expr(self, var: str) -> str:
        """Python source reading the slot, with the slot's object bound to ``var``."""
        if self.kind == "dict":
            return f"{var}.get({self.key!r}, _MISSING)"
        if self.kind == "cell":
            return f"_cell({var})"
        if self.kind == "attr":
            return f"getattr({var}, {self.key!r}, _MISSING)"
        return f"_default({var}, {self.key!r})"

    def __repr__(self) -> str:
        return f"Slot({self.kind}, {self.name})"


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:
        return _MISSING


def _default(fn, k):
    d = fn.__defaults__ or ()
    return d[k] if k < len(d) else _MISSING


def by_value(v: Any) -> bool:
    """Values a guard compares by value (compiled in as constants); others by identity."""
    return isinstance(v, (bool, int, float, complex, np.number, str, type(None))) or \
        isinstance(v, tuple) and all(by_value(e) for e in v)


def same(a: Any, b: Any) -> bool:
    """Whether a guarded value still holds: the same object, or an equal constant."""
    if a is b:
        return True
    if by_value(a) and by_value(b) and type(a) is type(b):
        try:
            return bool(a == b) or (a != a and b != b)     # nan == nan for this purpose
        except Exception:
            return False
    return False


class Reads:
    """The hidden parameters and guards of one lowered function.

    ``hidden``: slots whose values (arrays) are passed as extra trailing arguments;
    ``guards``: (slot, value seen when lowering) pairs that must still hold.
    """

    def __init__(self):
        self.hidden: List[Slot] = []
        self.guards: Dict[Tuple[str, int, Any], Tuple[Slot, Any]] = {}
        self._check = None
        self._fetch = None

    def guard(self, slot: Slot, value: Any) -> None:
        self.guards.setdefault(slot.ident(), (slot, value))

    def merge(self, other: "Reads") -> None:
        """Add another function's guards (its hidden slots stay its own)."""
        for k, g in other.guards.items():
            self.guards.setdefault(k, g)

    def __bool__(self) -> bool:
        return bool(self.hidden or self.guards)

    def values(self) -> tuple:
        """The current values of the hidden parameters."""
        if self._fetch is None:
            self._fetch = _compile_reader([s for s in self.hidden], "fetch")
        return self._fetch()

    def valid(self) -> bool:
        """Whether every guard still holds (fast identity test first, then by value)."""
        if not self.guards:
            return True
        if self._check is None:
            self._check = _compile_checker(list(self.guards.values()))
        if self._check():
            return True
        for slot, v in self.guards.values():
            if not same(slot.get(), v):
                return False
        # only equal constants were rebound: pin the new objects and keep the code
        self.guards = {k: (s, s.get()) for k, (s, _) in self.guards.items()}
        self._check = None
        return True

    def describe_stale(self) -> List[str]:
        return [s.name for s, v in self.guards.values() if not same(s.get(), v)]


def make_caller(reads: "Reads", fn, sig: tuple, slow):
    """One generated Python function that checks ``reads``' guards, fetches the hidden
    values, checks they still have the types ``sig`` the code was compiled for, and calls
    ``fn(*args, *hidden)``; on any mismatch it calls ``slow(args)`` instead."""
    ns: Dict[str, Any] = {"_MISSING": _MISSING, "_cell": _cell, "_default": _default,
                          "_fn": fn, "_slow": slow, "_ndarray": np.ndarray}
    conds, lines, hs = [], [], []
    for i, (s, v) in enumerate(reads.guards.values()):
        ns[f"g{i}"], ns[f"v{i}"] = s.obj, v
        conds.append(f"{s.expr(f'g{i}')} is v{i}")
    for i, (s, k) in enumerate(zip(reads.hidden, sig)):
        ns[f"o{i}"] = s.obj
        lines.append(f"    h{i} = {s.expr(f'o{i}')}")
        if isinstance(k, tuple):
            ns[f"k{i}"] = k
            lines.append(f"    if type(h{i}) is not _ndarray or (h{i}.dtype.num, h{i}.ndim) != k{i}:")
        else:
            ns[f"k{i}"] = k
            lines.append(f"    if type(h{i}) is not k{i}:")
        lines.append("        return _slow(args)")
        hs.append(f"h{i}")
    src = "def call(*args):\n"
    if conds:
        src += f"    if not ({' and '.join(conds)}):\n        return _slow(args)\n"
    src += "\n".join(lines) + ("\n" if lines else "")
    src += f"    return _fn(*args{''.join(', ' + h for h in hs)})\n"
    exec(src, ns)
    return ns["call"]


def _compile_reader(slots: List[Slot], name: str):
    ns: Dict[str, Any] = {"_MISSING": _MISSING, "_cell": _cell, "_default": _default}
    parts = []
    for i, s in enumerate(slots):
        ns[f"o{i}"] = s.obj
        parts.append(s.expr(f"o{i}"))
    src = f"def {name}():\n    return ({''.join(p + ', ' for p in parts)})\n"
    exec(src, ns)
    return ns[name]


def _compile_checker(guards: List[Tuple[Slot, Any]]):
    ns: Dict[str, Any] = {"_MISSING": _MISSING, "_cell": _cell, "_default": _default}
    parts = []
    for i, (s, v) in enumerate(guards):
        ns[f"o{i}"] = s.obj
        ns[f"v{i}"] = v
        parts.append(f"{s.expr(f'o{i}')} is v{i}")
    src = "def check():\n    return " + (" and ".join(parts) or "True") + "\n"
    exec(src, ns)
    return ns["check"]


def hidden_kind_sig(vals: tuple) -> tuple:
    """What the compiled code assumed of the hidden values: type, dtype and rank."""
    return tuple((a.dtype.num, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in vals)


def is_stable_module(v: Any, library: set) -> bool:
    """Library modules (numpy, math...) whose bindings zyg does not guard."""
    return isinstance(v, types.ModuleType) and (v.__name__.split(".")[0] in library)


# packages whose functions are never inlined: they are reached through rules
_LIBRARY_PACKAGES = {"numpy", "numba", "math", "cmath", "builtins", "scipy", "zyg", "operator",
                     "numba_mpi", "mpi4py"}


class Closure:
    """A function defined inside differentiated code (``def`` or ``lambda``).

    It is never a run-time value: calls to it are inlined, with its free variables
    read from the frame that defined it.
    """

    def __init__(self, node, frame: "Any", defaults: List[Any], kw_defaults: Dict[str, Any]):
        self.node = node
        self.frame = frame
        self.defaults = defaults
        self.kw_defaults = kw_defaults
        self.__name__ = getattr(node, "name", "<lambda>")
