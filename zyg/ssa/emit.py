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
    operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.lshift: "<<",
    operator.rshift: ">>",
}
PREFIX = {operator.neg: "-", operator.pos: "+", operator.not_: "not ", operator.invert: "~"}

ZERO = {"float": "0.0", "complex": "0j", "int": "0", "bool": "False", "none": "None",
        "undef": "0.0", "object": "None"}


@dataclass(frozen=True)
class Line:
    """An ordinary statement or block header, as rendered (one line, no indentation)."""
    text: str

    def render(self) -> str:
        return self.text


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


@dataclass(frozen=True)
class ChainNext:
    """The next chained counter value, backwards: ``cur = ini`` (after :class:`ChainStart`)."""
    cur: str
    ini: str

    def render(self) -> str:
        return f"{self.cur} = {self.ini}"


# -- block headers: control flow, one level of indentation opens under each --------------

@dataclass(frozen=True)
class Def:
    """Block header ``def name(params):`` (a generated function)."""
    name: str
    params: Tuple[str, ...]

    def render(self) -> str:
        return f"def {self.name}({', '.join(self.params)}):"


@dataclass(frozen=True)
class If:
    """Block header ``if cond:``."""
    cond: str

    def render(self) -> str:
        return f"if {self.cond}:"


@dataclass(frozen=True)
class Elif:
    """Block header ``elif cond:`` (right after an :class:`If` or :class:`Elif` block)."""
    cond: str

    def render(self) -> str:
        return f"elif {self.cond}:"


@dataclass(frozen=True)
class Else:
    """Block header ``else:`` (right after an :class:`If` or :class:`Elif` block)."""

    def render(self) -> str:
        return "else:"


@dataclass(frozen=True)
class While:
    """Block header ``while cond:``."""
    cond: str

    def render(self) -> str:
        return f"while {self.cond}:"


@dataclass(frozen=True)
class For:
    """Block header ``for var in iterable:``."""
    var: str
    iterable: str

    def render(self) -> str:
        return f"for {self.var} in {self.iterable}:"


def if_chain(first: bool, cond: str) -> Union[If, Elif]:
    """The header of one case of an if/elif chain: :class:`If` for the first, else :class:`Elif`."""
    return If(cond) if first else Elif(cond)


# -- tape nodes: the back end's storage spells them (zyg/backends/storage.py: NumpyStacks) --
#
# A stack ``s`` (``f`` floats, ``i`` ints, ``c`` complex, ``t`` edge tags) has a top
# ``_<s>sp`` that the expressions of other statements may read; everything else about its
# storage (buffers, capacity, growth) is the back end's.

@dataclass(frozen=True)
class StackInit:
    """Tape operation: create stack ``stack`` (empty); ``pooled``: start from the buffer
    the caller passed in (``_<stack>0``); ``bound``: the most items the stack can hold in
    any run, where the transform proved one (no loop, or counted loops of constant trip
    counts only), else None.  A storage of fixed size (the cuda back end's local arrays)
    allocates exactly ``bound``; growable storages ignore it."""
    stack: str
    pooled: bool = False
    bound: Optional[int] = None
    # the caller's stack, passed in as ``_<stack>s`` and ``_<stack>sp`` (a recursive call's
    # primal, zyg/pullbacks/native.py): records go on after the caller's
    continued: bool = False


@dataclass(frozen=True)
class Store:
    """Tape operation: write ``value`` at the top of stack ``stack`` plus ``offset`` (a push
    is its stores, then :class:`Advance`)."""
    stack: str
    offset: Optional[int]
    value: str


@dataclass(frozen=True)
class Advance:
    """Tape operation: move the top of stack ``stack`` up by ``count`` (after its stores)."""
    stack: str
    count: Union[int, str]


@dataclass(frozen=True)
class Pop:
    """Tape operation: drop ``count`` items (an int or an expression) from stack ``stack``;
    :class:`Peek` then reads them."""
    stack: str
    count: Union[int, str]


@dataclass(frozen=True)
class Peek:
    """Tape operation: read the item at the top of stack ``stack`` plus ``offset`` into
    ``name`` (after the :class:`Pop` that uncovered it)."""
    name: str
    stack: str
    offset: Optional[int]


@dataclass(frozen=True)
class PushArray:
    """Tape operation: copy the array ``value`` (any layout) onto stack ``stack`` at its top
    (room was made by :class:`RoomCheck`); :class:`Advance` by its size follows, then its
    shape goes on the ``i`` stack."""
    stack: str
    value: str


@dataclass(frozen=True)
class PopArray:
    """Tape operation: pop an array of ``ndim`` dimensions and dtype ``dtype`` pushed by
    :class:`PushArray` (its shape, then its items) into ``name``."""
    name: str
    stack: str
    ndim: int
    dtype: str


@dataclass(frozen=True)
class SetTop:
    """Tape operation: move the top of stack ``stack`` to ``value``."""
    stack: str
    value: str


@dataclass(frozen=True)
class RoomCheck:
    """Tape operation: is there room for ``need`` items on stack ``stack`` (and for what a
    counted loop asked for with :class:`Want`, when ``want``)?  A block header: its body
    (one level deeper) is :class:`Grow` and :class:`Capacity`."""
    stack: str
    need: str
    want: bool = False


@dataclass(frozen=True)
class NoRoom:
    """Tape operation: does any of the stacks in ``needs`` (``(stack, count)`` pairs, a
    count an int or an expression) lack room for ``count`` more items?  A block header;
    its body leaves the dispatch case to grow the tape."""
    needs: Tuple[Tuple[str, Union[int, str]], ...]


@dataclass(frozen=True)
class Grow:
    """Tape operation: make room on stack ``stack`` for at least ``size`` items."""
    stack: str
    size: str


@dataclass(frozen=True)
class Capacity:
    """Tape operation: the room of stack ``stack`` read again (after it grew)."""
    stack: str


@dataclass(frozen=True)
class Want:
    """Tape operation: the room a counted loop asks stack ``stack`` for before it starts
    (``value``), checked by the next :class:`RoomCheck` with ``want``."""
    stack: str
    value: str


@dataclass(frozen=True)
class Reserve:
    """Tape room reserved so far in a structured nest: ``_<stack>end += amount`` (or
    ``= _<stack>sp + amount`` when ``start``)."""
    stack: str
    amount: str
    start: bool = False


@dataclass(frozen=True)
class TapeOverflow:
    """Tape operation of fixed-size storages (``Backend.bounded_tape``): did any of the
    ``stacks`` run out of room while the primal ran?  A block header, between the recording
    primal and the adjoint; its body leaves the function without running the adjoint (the
    tape is incomplete).  The tops ``_<s>sp`` still count every push past the end, so after
    the primal they say how much room the run needed."""
    stacks: Tuple[str, ...]


@dataclass(frozen=True)
class NestedTape:
    """Tape operation: ``out = fn(*args, <stacks>)``, a call of generated code that goes on
    recording on this function's stacks (``adjoint`` False: a recursive call's primal) or
    reads its records back from them (``adjoint``: its adjoint), zyg/pullbacks/native.py.
    The callee takes each stack of ``stacks`` (its storage and top) after ``args`` and
    returns, after its ``nres`` results, the stacks as it leaves them (the primal: the
    storage, which may have grown, and the top; the adjoint: the top).  ``keep_tops``: the
    caller keeps its own tops (the callee's records are dropped: a call whose adjoint has
    nothing to do)."""
    out: str
    fn: str
    args: Tuple[str, ...]
    stacks: Tuple[str, ...]
    nres: int
    adjoint: bool
    keep_tops: bool = False


TAPE = (StackInit, Store, Advance, Pop, Peek, PushArray, PopArray, SetTop, RoomCheck, NoRoom,
        Grow, Capacity, Want, Reserve, TapeOverflow, NestedTape)
Node = Union[Line, CounterSet, ChainStart, ChainNext, Def, If, Elif, Else, While, For,
             StackInit, Store, Advance, Pop, Peek, PushArray, PopArray, SetTop, RoomCheck, NoRoom,
             Grow, Capacity, Want, Reserve, TapeOverflow, NestedTape]
# the nodes that open a block: the statements one level deeper that follow are their body
# (RoomCheck and NoRoom are ifs whose condition the storage spells)
HEADERS = (Def, If, Elif, Else, While, For, RoomCheck, NoRoom, TapeOverflow)
# the statements that tie a reversed loop's iterations to their order
ORDERED = (Pop, PopArray, SetTop, CounterSet, ChainStart, ChainNext, Reserve, NestedTape)


@dataclass
class Leaf:
    """A statement that opens no block, in :meth:`Code.tree`: its node and user location."""
    node: Node
    loc: Optional[Loc] = None

    def nodes(self):
        yield self.node


@dataclass
class Block:
    """A block in :meth:`Code.tree`: its header (one of :data:`HEADERS`), the statements of
    its body (:class:`Leaf` and nested :class:`Block`, never empty) and the header's user
    location."""
    header: Node
    body: List[Union["Block", Leaf]]
    loc: Optional[Loc] = None

    def nodes(self):
        """Every node of the block, its header first, in statement order."""
        yield self.header
        for item in self.body:
            yield from item.nodes()


class Code:
    """Generated statements, each with its indentation level and the user location it came
    from.  Ordinary statements are :class:`Line` nodes; block headers (:data:`HEADERS`),
    tape operations and counter state are typed nodes, which the analyses of generated code
    read (they never read the text).  :meth:`tree` nests the statements into blocks.
    :meth:`render` prints the module: a back end's ``storage`` spells the tape nodes
    (``storage.lower(node)``: its lines)."""

    def __init__(self):
        self.body: List[Tuple[int, Node]] = []
        self.locs: Dict[int, Loc] = {}      # statement number (1-based) -> user location

    def __len__(self) -> int:
        return len(self.body)

    def add(self, indent: int, text: str, loc: Optional[Loc] = None) -> None:
        for part in text.split("\n"):
            self.put(indent, Line(part), loc)

    def put(self, indent: int, node: Node, loc: Optional[Loc] = None) -> None:
        self.body.append((indent, node))
        if loc is not None:
            self.locs[len(self.body)] = loc

    def has_dispatch_loop(self) -> bool:
        """Does the code hold a dispatch loop (``while _blk >= 0:``)?"""
        return any(isinstance(n, While) and n.cond == "_blk >= 0" for _, n in self.body)

    def extend(self, other: "Code") -> None:
        base = len(self.body)
        self.body += other.body
        for k, v in other.locs.items():
            self.locs[base + k] = v

    def graft(self, indent: int, other: "Code", loc: Optional[Loc] = None) -> None:
        """Append the statements of ``other`` one ``indent`` deeper, each with its own user
        location or else ``loc``."""
        for k, (ind, node) in enumerate(other.body):
            self.put(indent + ind, node, other.locs.get(k + 1, loc))

    def truncate(self, n: int) -> List[Tuple[int, Node, Optional[Loc]]]:
        """Remove and return the statements from index ``n`` on, with their locations."""
        out = [(ind, node, self.locs.get(k + 1)) for k, (ind, node) in enumerate(self.body[n:], n)]
        for k in range(n + 1, len(self.body) + 1):     # linear in what is removed
            self.locs.pop(k, None)
        del self.body[n:]
        return out

    def tree(self, start: int = 0) -> List[Union[Block, Leaf]]:
        """The statements from number ``start`` (0-based) on, nested: a header's body is the
        statements one level deeper that follow it.  Their indentation must not go below
        that of the first; AssertionError when it is inconsistent (a statement deeper than
        its block without a header, a header without a body, an ``elif``/``else`` that
        follows no ``if``)."""
        items = [(ind, node, self.locs.get(k + 1))
                 for k, (ind, node) in enumerate(self.body[start:], start)]
        if not items:
            return []
        out, k = _nest(items, 0, items[0][0], start)
        assert k == len(items), \
            f"statement {start + k + 1} is indented less than statement {start + 1}"
        return out

    @classmethod
    def from_tree(cls, tree: List[Union[Block, Leaf]], indent: int = 0) -> "Code":
        """The statements of ``tree`` (:meth:`tree`'s result) flattened back, its top level
        at ``indent``: ``Code.from_tree(c.tree())`` has the statements of ``c``."""
        code = cls()

        def put(items, ind: int) -> None:
            for item in items:
                if isinstance(item, Block):
                    code.put(ind, item.header, item.loc)
                    put(item.body, ind + 1)
                else:
                    code.put(ind, item.node, item.loc)
        put(tree, indent)
        return code

    def render(self, storage) -> Tuple[List[str], Dict[int, Loc]]:
        """The module's lines, and the user location of each line (1-based) that has one."""
        lines: List[str] = []
        locs: Dict[int, Loc] = {}
        for k, (ind, node) in enumerate(self.body):
            loc = self.locs.get(k + 1)
            parts = [node.render()] if hasattr(node, "render") else storage.lower(node)
            for part in parts:
                lines.append("    " * ind + part)
                if loc is not None:
                    locs[len(lines)] = loc
        return lines, locs

    def text(self, storage) -> str:
        return "\n".join(self.render(storage)[0]) + "\n"


def _nest(items, k: int, level: int, start: int):
    """Statements ``items[k:]`` at indentation ``level`` and their bodies, up to the first
    one indented less: ``(tree, index after it)``."""
    out: List[Union[Block, Leaf]] = []
    while k < len(items):
        ind, node, loc = items[k]
        if ind < level:
            break
        assert ind == level, \
            f"statement {start + k + 1} is indented {ind} in a block at {level}: a body without a header"
        k += 1
        if not isinstance(node, HEADERS):
            out.append(Leaf(node, loc))
            continue
        if isinstance(node, (Elif, Else)):
            prev = out[-1].header if out and isinstance(out[-1], Block) else None
            assert isinstance(prev, (If, Elif)), \
                f"statement {start + k} ({node.render()}) follows no if"
        body, k = _nest(items, k, level + 1, start)
        assert body, f"statement {start + k} is a header without a body"
        out.append(Block(node, body, loc))
    return out, k


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
