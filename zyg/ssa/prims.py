"""Primitive operations that the lowering introduces for arrays and tuples.

Each primitive is a small callable object (so that it can sit in :class:`Call.fn`
like any other callee, be evaluated on sample values by the kind analysis and be
hashed as a cache key) that also knows how to render itself as Python syntax:
``GetItem(('i', 's'))`` renders ``a[i, lo:hi:st]``.
"""
from __future__ import annotations

import operator
from typing import Any, List, Sequence, Tuple

import numpy as np


class Prim:
    name = "prim"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self):
        return ()

    def __repr__(self) -> str:
        return self.name


def _index(spec: Sequence[str], ops: Sequence[Any]) -> Tuple[Any, ...]:
    out: List[Any] = []
    k = 0
    for s in spec:
        if s == "i":
            out.append(ops[k])
            k += 1
        elif s == "s":
            out.append(slice(ops[k], ops[k + 1], ops[k + 2]))
            k += 3
        elif s == "n":
            out.append(None)
        else:
            out.append(Ellipsis)
    return tuple(out)


def index_src(spec: Sequence[str], ops: Sequence[str], consts: Sequence[bool] = ()) -> str:
    """``ops`` are rendered operands; a slice part whose operand is ``None`` is omitted."""
    parts: List[str] = []
    k = 0
    for s in spec:
        if s == "i":
            parts.append(ops[k])
            k += 1
        elif s == "s":
            lo, hi, st = ops[k:k + 3]
            k += 3
            txt = ("" if lo == "None" else lo) + ":" + ("" if hi == "None" else hi)
            if st != "None":
                txt += ":" + st
            parts.append(txt)
        elif s == "n":
            parts.append("None")
        else:
            parts.append("...")
    return ", ".join(parts) if parts else "..."


def n_operands(spec: Sequence[str]) -> int:
    return sum(1 if s == "i" else 3 if s == "s" else 0 for s in spec)


class GetItem(Prim):
    """``base[index]``; operands: base, then the index parts (a slice takes three)."""

    def __init__(self, spec: Tuple[str, ...]):
        self.spec = tuple(spec)
        self.name = "getitem[" + ",".join(self.spec) + "]"

    def _key(self):
        return self.spec

    def __call__(self, base, *ops):
        idx = _index(self.spec, ops)
        return base[idx if len(idx) != 1 else idx[0]]

    def with_spec(self, spec: Tuple[str, ...]) -> "GetItem":
        return GetItem(spec)

    def is_view(self) -> bool:
        """Indexing with a slice, ``None`` or ``...`` gives a view (numpy basic indexing)."""
        return any(s != "i" for s in self.spec)


class SetItem(Prim):
    """``base[index] = value``; operands: base, the index parts, value (an effect).

    ``out_of`` names the numpy function whose output argument the write is
    (``np.exp(b, b)`` is ``b[...] = np.exp(b)``, ``zyg/ssa/desugar.py``), and ``casting``
    the casting numpy allows there (``same_kind`` for ufuncs, ``equiv`` for ``np.dot``,
    ``unsafe`` as a plain write) and ``broadcast`` whether the value may have fewer
    dimensions than the output (ufuncs, ``np.copyto``): the kind check
    (``pullbacks/transform.check_kinds``) refuses the writes that numpy refuses."""

    def __init__(self, spec: Tuple[str, ...], out_of: str = "", casting: str = "unsafe",
                 broadcast: bool = False):
        self.spec = tuple(spec)
        self.out_of = out_of
        self.casting = casting
        self.broadcast = broadcast
        self.name = "setitem[" + ",".join(self.spec) + "]"

    def _key(self):
        return (self.spec, self.out_of, self.casting, self.broadcast) if self.out_of else self.spec

    def with_spec(self, spec: Tuple[str, ...]) -> "SetItem":
        return SetItem(spec, self.out_of, self.casting, self.broadcast)

    def __call__(self, base, *ops):
        idx = _index(self.spec, ops[:-1])
        base[idx if len(idx) != 1 else idx[0]] = ops[-1]
        return None


class Attr(Prim):
    """``value.attr`` for the array attributes zyg knows (shape, size, ndim, T, real, imag)."""

    VIEWS = ("T",)

    def __init__(self, attr: str):
        self.attr = attr
        self.name = "." + attr

    def _key(self):
        return self.attr

    def __call__(self, base):
        return getattr(base, self.attr)


class MakeTuple(Prim):
    """``(a, b, ...)``, or a ``collections.namedtuple`` class called on its fields in order."""

    def __init__(self, cls: Any = None):
        self.cls = cls
        self.name = "tuple" if cls is None else cls.__name__

    def _key(self):
        return self.cls

    def __call__(self, *xs):
        return tuple(xs) if self.cls is None else self.cls(*xs)


class Replace(Prim):
    """``t._replace(f=v, ...)`` of a namedtuple; operands: t, then the new values."""

    def __init__(self, fields: Tuple[str, ...]):
        self.fields = tuple(fields)
        self.name = "_replace(" + ",".join(fields) + ")"

    def _key(self):
        return self.fields

    def __call__(self, t, *vals):
        return t._replace(**dict(zip(self.fields, vals)))


def is_namedtuple_class(c: Any) -> bool:
    return isinstance(c, type) and issubclass(c, tuple) and hasattr(c, "_fields")


class ArrayOf(Prim):
    """``np.array([x, y, ...])`` of scalars."""
    name = "np.array"

    def __call__(self, *xs):
        return np.array([*xs])


class CastLike(Prim):
    """``type(x)(v)``: a cast to the type of ``x``.  The kinds specialisation
    (``zyg/pullbacks/specialize.py``) replaces it with ``float(v)``, ``int(v)``,
    ``complex(v)`` or ``bool(v)`` once the kind of ``x`` is known; for other kinds it
    reports the line."""
    name = "type(x)"

    def __call__(self, x, *vs):
        if not isinstance(x, (bool, int, float, complex, np.number, np.bool_)):
            raise TypeError("type(x)(...) of a value that is not a number")
        return type(x)(*vs)


# the joins zyg lowers to a Stacked call (their arrays are separate operands)
STACKED_FNS = (np.concatenate, np.stack, np.vstack, np.hstack, np.column_stack)


class Stacked(Prim):
    """``np.concatenate((a, b, ...), axis)`` / ``np.stack((a, b, ...), axis)``: the
    arrays are separate operands (zyg has no tuple-of-arrays values)."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.name = "np." + fn.__name__

    def _key(self):
        return self.fn

    def __call__(self, *xs, **kw):
        # np.hstack / np.vstack / np.column_stack take no axis
        return self.fn(tuple(xs), **kw)


class InPlace(Prim):
    """``a op= b``: in place on arrays (the result is ``a`` itself), plain ``op`` on numbers."""

    SYMBOL = {operator.add: "+=", operator.sub: "-=", operator.mul: "*=", operator.truediv: "/=",
              operator.pow: "**=", operator.floordiv: "//=", operator.mod: "%=",
              operator.matmul: "@=", operator.and_: "&=", operator.or_: "|=", operator.xor: "^=",
              operator.lshift: "<<=", operator.rshift: ">>="}

    def __init__(self, op: Any):
        self.op = op
        self.name = "inplace" + self.SYMBOL.get(op, "?")

    def _key(self):
        return self.op

    def __call__(self, a, b):
        if isinstance(a, np.ndarray):
            a[...] = self.op(a, b)
            return a
        return self.op(a, b)


class Recursive:
    """A recursive call of the user function ``fn`` (it cannot be inlined): the transform
    calls ``fn``'s own pullback at run time (``zyg/nested/recursion.py``).  Not a
    :class:`Prim`: it is a call with a rule, not an array primitive."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.name = getattr(fn, "__qualname__", "f")
        self.__name__ = getattr(fn, "__name__", "f")
        self.__qualname__ = self.name

    def __eq__(self, other) -> bool:
        return isinstance(other, Recursive) and other.fn is self.fn

    def __hash__(self) -> int:
        return hash(("Recursive", id(self.fn)))

    def __repr__(self) -> str:
        return self.name

    def __call__(self, *args):
        return self.fn(*args)
