"""Python source emission helpers: a line builder that remembers user locations,
names for SSA values, and a namespace of the objects generated code refers to.

Emission is deterministic: the same IR gives the same text (names derive from
value ids and source hints, never from object ids or randomness).
"""
from __future__ import annotations

import keyword
import math
import operator
import re
import builtins
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .ir import Const, Loc, Undef, Var, callee_name

INFIX = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**",
    operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
    operator.eq: "==", operator.ne: "!=", operator.matmul: "@",
}
PREFIX = {operator.neg: "-", operator.pos: "+", operator.not_: "not "}

ZERO = {"float": "0.0", "complex": "0j", "int": "0", "bool": "False", "none": "None",
        "undef": "0.0", "object": "None"}


@dataclass(frozen=True)
class Line:
    """An ordinary statement or block header, as rendered (one line, no indentation)."""
    text: str

    def render(self) -> str:
        return self.text


@dataclass(frozen=True)
class Pop:
    """Tape operation: drop ``count`` items (an int or an expression) from stack ``stack``
    (``_<stack>sp -= count``); the items were read at ``_<stack>s[_<stack>sp - k]`` before."""
    stack: str
    count: Union[int, str]

    def render(self) -> str:
        return f"_{self.stack}sp -= {self.count}"


@dataclass(frozen=True)
class CounterSet:
    """Counter state carried from one loop iteration to the next: ``name = value``
    (the chained starts of nested loops, ``_cur<P>`` / ``_ini<P>``)."""
    name: str
    value: str

    def render(self) -> str:
        return f"{self.name} = {self.value}"


@dataclass(frozen=True)
class ChainStart:
    """A chained counter start, backwards: ``ini = cur - delta`` (``delta`` the distance the
    inner loop's counter travelled), then :class:`CounterSet` ``cur = ini``."""
    ini: str
    cur: str
    delta: str

    def render(self) -> str:
        return f"{self.ini} = {self.cur} - {self.delta}"


def _slot(stack: str, offset: Optional[int], unsigned: bool) -> str:
    """``_<stack>s[...]`` at the top of the stack plus ``offset``; ``unsigned``: the index
    cast to ``np.uint64`` (numba then leaves out the negative-index wraparound)."""
    e = f"_{stack}sp" if offset is None else f"_{stack}sp + {offset}"
    return f"_{stack}s[np.uint64({e})]" if unsigned else f"_{stack}s[{e}]"


@dataclass(frozen=True)
class Store:
    """Tape operation: write ``value`` at the top of stack ``stack`` plus ``offset`` (a push
    is its stores, then :class:`Advance`)."""
    stack: str
    offset: Optional[int]
    value: str
    unsigned: bool = False

    def render(self) -> str:
        return f"{_slot(self.stack, self.offset, self.unsigned)} = {self.value}"


@dataclass(frozen=True)
class Advance:
    """Tape operation: move the top of stack ``stack`` up by ``count`` (after its stores)."""
    stack: str
    count: Union[int, str]

    def render(self) -> str:
        return f"_{self.stack}sp += {self.count}"


@dataclass(frozen=True)
class Peek:
    """Tape operation: read the item at the top of stack ``stack`` plus ``offset`` into
    ``name`` (after the :class:`Pop` that uncovered it)."""
    name: str
    stack: str
    offset: Optional[int]
    unsigned: bool = False

    def render(self) -> str:
        return f"{self.name} = {_slot(self.stack, self.offset, self.unsigned)}"


@dataclass(frozen=True)
class RoomCheck:
    """Tape operation: is there room for ``need`` items on stack ``stack`` (and for what a
    counted loop asked for, ``_<stack>want``, when ``want``)?  Its body (one level deeper)
    is :class:`Grow` and :class:`Capacity`."""
    stack: str
    need: str
    want: bool = False

    def render(self) -> str:
        s = self.stack
        more = f" or _{s}want > _{s}cap" if self.want else ""
        return f"if {self.need} > _{s}cap{more}:"


@dataclass(frozen=True)
class Grow:
    """Tape operation: a larger stack ``stack`` holding at least ``size`` items."""
    stack: str
    size: str

    def render(self) -> str:
        return f"_{self.stack}s = _zyg_grow(_{self.stack}s, {self.size})"


@dataclass(frozen=True)
class Capacity:
    """Tape operation: the capacity of stack ``stack`` read again (after it grew)."""
    stack: str

    def render(self) -> str:
        return f"_{self.stack}cap = _{self.stack}s.shape[0]"


@dataclass(frozen=True)
class ChainNext:
    """The next chained counter value, backwards: ``cur = ini`` (after :class:`ChainStart`)."""
    cur: str
    ini: str

    def render(self) -> str:
        return f"{self.cur} = {self.ini}"


@dataclass(frozen=True)
class SetTop:
    """Tape operation: move the top of stack ``stack`` to ``value`` (``_<stack>sp = value``)."""
    stack: str
    value: str

    def render(self) -> str:
        return f"_{self.stack}sp = {self.value}"


@dataclass(frozen=True)
class Reserve:
    """Tape room reserved so far in a structured nest: ``_<stack>end += amount`` (or
    ``= _<stack>sp + amount`` when ``start``)."""
    stack: str
    amount: str
    start: bool = False

    def render(self) -> str:
        if self.start:
            return f"_{self.stack}end = _{self.stack}sp + {self.amount}"
        return f"_{self.stack}end += {self.amount}"


Node = Union[Line, Store, Advance, Peek, Pop, SetTop, RoomCheck, Grow, Capacity, CounterSet,
             ChainStart, ChainNext, Reserve]
# the statements that tie a reversed loop's iterations to their order
ORDERED = (Pop, SetTop, CounterSet, ChainStart, ChainNext, Reserve)


class Code:
    """Generated statements, each with its indentation level and the user location it came
    from.  Ordinary statements are :class:`Line` nodes; tape operations and counter state
    are typed nodes (:data:`ORDERED`), which the analyses of generated code read (they
    never read the text).  :meth:`text` renders the module, one line per node."""

    def __init__(self):
        self.body: List[Tuple[int, Node]] = []
        self.locs: Dict[int, Loc] = {}      # line number (1-based) -> user location

    def __len__(self) -> int:
        return len(self.body)

    def add(self, indent: int, text: str, loc: Optional[Loc] = None) -> None:
        for part in text.split("\n"):
            self.put(indent, Line(part), loc)

    def put(self, indent: int, node: Node, loc: Optional[Loc] = None) -> None:
        self.body.append((indent, node))
        if loc is not None:
            self.locs[len(self.body)] = loc

    def extend(self, other: "Code") -> None:
        base = len(self.body)
        self.body += other.body
        for k, v in other.locs.items():
            self.locs[base + k] = v

    def truncate(self, n: int) -> List[Tuple[int, Node, Optional[Loc]]]:
        """Remove and return the statements from index ``n`` on, with their locations."""
        out = [(ind, node, self.locs.get(k + 1)) for k, (ind, node) in enumerate(self.body) if k >= n]
        del self.body[n:]
        self.locs = {k: v for k, v in self.locs.items() if k <= n}
        return out

    @property
    def lines(self) -> List[str]:
        """The rendered lines (read-only view)."""
        return ["    " * ind + node.render() for ind, node in self.body]

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _ident(s: str) -> str:
    s = re.sub(r"\W", "_", s)
    return s if s and not keyword.iskeyword(s) else (s + "_" if s else "v")


def var_name(v: Var) -> str:
    if v.hint and not v.hint.startswith("."):
        return f"{_ident(v.hint)}_{v.id}"
    return f"v{v.id}"


class Namespace:
    """The globals of a generated module: maps readable names to objects."""

    def __init__(self, wrap=None):
        self.ns: Dict[str, Any] = {"np": np, "math": math}
        self.ids: Dict[int, str] = {id(np): "np", id(math): "math"}
        self.wrap = wrap or (lambda obj: obj)

    def ref(self, obj: Any, prefer: Optional[str] = None) -> str:
        if id(obj) in self.ids:
            return self.ids[id(obj)]
        if getattr(builtins, getattr(obj, "__name__", ""), None) is obj:
            name = obj.__name__
            self.ns[name] = obj
            self.ids[id(obj)] = name
            return name
        base = _ident(prefer or callee_name(obj).replace(".", "_"))
        name = base
        k = 1
        while name in self.ns and self.ns[name] is not obj:
            k += 1
            name = f"{base}_{k}"
        self.ns[name] = self.wrap(obj)
        self.ids[id(obj)] = name
        return name

    def bind(self, name: str, obj: Any) -> str:
        """Bind a global name used by inlined rule code; rename on conflict."""
        if name in self.ns and self.ns[name] is obj:
            return name
        if name not in self.ns and id(obj) not in self.ids:
            self.ns[name] = self.wrap(obj)
            self.ids[id(obj)] = name
            return name
        return self.ref(obj, name)


def const_src(c: Const, ns: Namespace) -> str:
    if isinstance(c, Undef):
        return "0.0"
    v = c.value
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return f"float('{v}')"
    if isinstance(v, (int, float, complex)) and not isinstance(v, bool):
        text = repr(v)
        # a negative literal must not bind looser than the operator it feeds: (-0.25) ** 2
        return f"({text})" if text.startswith("-") or isinstance(v, complex) else text
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, str) or _int_tuple(v):
        return repr(v)      # literals: np.einsum's subscripts, np.tensordot's axes
    return ns.ref(v, "const")


def _int_tuple(v: Any) -> bool:
    return isinstance(v, tuple) and type(v) is tuple and \
        all(type(x) is int or _int_tuple(x) for x in v)
