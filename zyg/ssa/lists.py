"""Local lists (``out = []``, ``out.append(v)``) and list comprehensions, lowered to arrays.

A list local of the differentiated function is two SSA variables: a **buffer** (an
array whose first axis holds the elements, with room to spare) and its **length**
``n`` (an int).  The list as a value is the view ``buffer[:n]``, so everything zyg does
with arrays works on it unchanged: ``out[i]`` and ``out[-1]``, ``len(out)``,
``for v in out``, ``enumerate``/``zip``, ``np.array(out)`` (a copy), ``np.sum(out)``,
``np.mean(out)``.  ``sum/min/max(out)`` are ``np.sum/np.min/np.max`` over the first axis.

``out.append(v)`` is one primitive, ``ListPush`` (``zyg/rules/lists.py``), a pure function of the old
buffer, the length and ``v`` (its result equals the old buffer with row ``n`` set to
``v``).  Its implementation writes in place while the buffer has room, which no one
can observe: a list only grows, and rows below ``n`` never change.  The first push
allocates the buffer with the length the enclosing counted loops give (``range``,
arrays, ``enumerate``, ``zip``), so a list built in a loop is one allocation; a push
beyond the reserved room reallocates (doubling).  Its pullback hands ``dy[n]`` to
``v`` and the rest of ``dy`` to the old buffer.  The backward pass costs O(room) per
push, so building a list of ``n`` elements is O(n^2) in the adjoint (cheap below a
few thousand elements; preallocate an array for longer ones).

A list comprehension is the loop a person would write (``tmp = []; for ...:
tmp.append(e)``), lowered by the ordinary statement lowering.

What a list cannot do here, with a message saying so: escape (``return out``,
``b = out`` aliasing), element assignment (``out[i] = v``), the other list methods
(``extend``, ``pop``, ``insert`` ...), growing inside a ``while`` loop when it is
differentiated (the buffer then changes shape between iterations), and writing into an
appended array after the append or into a list element (``check_shared_arrays``: the
buffer holds copies, where a Python list holds the arrays themselves).
"""
from __future__ import annotations

import builtins
import itertools
from typing import Any, Dict, Optional, Set

import gast
import numpy as np

from . import hooks
from .ir import Const, Operand, Undef
from .prims import GetItem

_COUNT = itertools.count()

_OTHER_METHODS = ("extend", "pop", "insert", "remove", "clear", "sort", "reverse", "index",
                  "count", "copy")


def trip_count(start, stop, step):
    """The number of iterations of ``range(start, stop, step)``."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


# -- which names are lists --------------------------------------------------------------
def _scan(node) -> Set[str]:
    """Names a function assigns a list literal or a list comprehension to."""
    out: Set[str] = set()
    body = node.body if isinstance(node.body, list) else [node.body]
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            continue
        if isinstance(n, gast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], gast.Name) \
                and isinstance(n.value, (gast.List, gast.ListComp)):
            out.add(n.targets[0].id)
        elif isinstance(n, gast.AnnAssign) and isinstance(n.target, gast.Name) and \
                isinstance(n.value, (gast.List, gast.ListComp)):
            out.add(n.target.id)
        stack.extend(gast.iter_child_nodes(n))
    return out


class _State:
    def __init__(self):
        self.names: Dict[int, Set[str]] = {}      # id(frame) -> list names
        self.depth: Dict[str, int] = {}           # prefixed name -> loop depth of creation


def _state(low) -> _State:
    st = low.__dict__.get("_zyg_lists")
    if st is None:
        st = low.__dict__["_zyg_lists"] = _State()
    return st


def _names(low) -> Set[str]:
    s = _state(low)
    names = s.names.get(id(low.f))
    if names is None:
        w = low.f.what
        node = w if isinstance(w, gast.AST) else low.src.node
        names = s.names[id(low.f)] = _scan(node)
    return names


def is_list(low, name: str) -> bool:
    """Is ``name`` a list local of the frame being lowered?"""
    if name not in _names(low):
        return False
    where, _ = low.resolve(name)
    return where == "var"


def _is_list_node(low, node) -> bool:
    return isinstance(node, gast.Name) and is_list(low, node.id)


# -- lowering ---------------------------------------------------------------------------
def view(low, name: str, node) -> Operand:
    """The list ``name`` as a value: its buffer's first ``n`` rows."""
    buf = low.read(name, low.cur)
    n = low.read(name + ".n", low.cur)
    if isinstance(buf, Undef):
        raise low.unsupported(node, f"the list {name!r} is used before anything is appended to it",
                              "zyg needs the first element to know the list's kind; append before "
                              "reading, or use an array")
    return low.emit(GetItem(("s",)), [buf, Const(None), n, Const(None)], node, name)


def create(low, name: str, node) -> None:
    """``name = []``: an empty list (no buffer yet, length 0)."""
    low.write(name, low.cur, Undef())
    low.write(name + ".n", low.cur, Const(0))
    _state(low).depth[low.f.prefix + name] = len(low.loops)


def push(low, name: str, value: Operand, node) -> None:
    """``name.append(value)``."""
    import operator
    buf = low.read(name, low.cur)
    n = low.read(name + ".n", low.cur)
    depth = _state(low).depth.get(low.f.prefix + name, 0)
    # room for every push the enclosing counted loops can still make (a bound: pushes under
    # an 'if' or before a 'break' make fewer)
    cap: Operand = Const(1)
    unbounded = False
    exits = any(isinstance(s, (gast.Break, gast.Return)) for lp in low.loops[depth:]
                if getattr(lp, "node", None) is not None for s in gast.walk(lp.node))
    for lp in low.loops[depth:]:
        trip = getattr(lp, "trip", None)
        if trip is None:
            unbounded = True    # a while loop: no bound; the buffer grows by doubling
            break
        t = low.emit(trip_count, list(trip), node)
        cap = t if isinstance(cap, Const) and cap.value == 1 else low.emit(operator.mul, [cap, t], node)
    cap = low.emit(operator.add, [n, cap], node) if not (isinstance(n, Const) and n.value == 0) else cap
    old = Const(0) if isinstance(buf, Undef) else low.emit(builtins.len, [buf], node)
    new = low.emit(hooks.PRIMS["list.append"](unbounded, name, exits), [buf, n, value, cap, old], node, name)
    low.write(name, low.cur, new)
    low.write(name + ".n", low.cur, low.emit(operator.add, [n, Const(1)], node))


def _rename_comp(low, comp):
    from .desugar import renamed_comprehension
    comp, names, _ = renamed_comprehension(low, comp, "l", next(_COUNT))
    low.f.locals |= set(names.values())
    return comp


def _name(id_: str, store: bool = False):
    return gast.Name(id=id_, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


def fill(low, name: str, comp, node) -> None:
    """``name = [elt for ... in ... if ...]``: an empty list, then the loops pushing ``elt``."""
    comp = _rename_comp(low, comp)
    create(low, name, node)
    body = [gast.Expr(value=gast.Call(
        func=gast.Attribute(value=_name(name), attr="append", ctx=gast.Load()),
        args=[comp.elt], keywords=[]))]
    for g in reversed(comp.generators):
        for cond in reversed(g.ifs):
            body = [gast.If(test=cond, body=body, orelse=[])]
        body = [gast.For(target=g.target, iter=g.iter, body=body, orelse=[], type_comment=None)]
    for st in body:
        for n in gast.walk(st):
            if isinstance(n, (gast.stmt, gast.expr)) and getattr(n, "lineno", None) is None:
                gast.copy_location(n, node)
    low.stmts(body)


def comprehension_value(low, node, hint: str) -> Operand:
    """A list comprehension used as a value (``np.array([f(v) for v in xs])``): a
    temporary list, filled by its loops; the value is the list's view."""
    tmp = f"_zyg_list{next(_COUNT)}"
    _names(low).add(tmp)
    low.f.locals.add(tmp)
    fill(low, tmp, node, node)
    return view(low, tmp, node)


def assign(low, st) -> bool:
    """Assignments that involve lists (``out = []``, ``out = [a, b]``, ``out = [... for ...]``,
    ``out = np.array(out)``); False when ``st`` is none of them."""
    tgts = st.targets
    val = st.value
    for t in tgts:
        if isinstance(t, gast.Subscript) and _is_list_node(low, t.value):
            raise low.unsupported(st, f"assigning to an element of the list {t.value.id!r} is not "
                                      "supported", "build the list with append, or use an array: "
                                      "out = np.zeros(n); out[i] = v")
    if _is_list_node(low, val) and not (len(tgts) == 1 and isinstance(tgts[0], gast.Name)
                                         and tgts[0].id == val.id):
        raise low.unsupported(st, f"the list {val.id!r} is given a second name; zyg's lists "
                                  "cannot be aliased", f"use {val.id!r} itself, or a copy: "
                                  f"np.array({val.id})")
    if not (len(tgts) == 1 and isinstance(tgts[0], gast.Name) and is_list(low, tgts[0].id)):
        return False
    name = tgts[0].id
    if isinstance(val, gast.List):
        create(low, name, st)
        for e in val.elts:
            if isinstance(e, gast.Starred):
                raise low.unsupported(e, "'*' unpacking in a list literal is not supported")
            push(low, name, low.expr(e), e)
        return True
    if isinstance(val, gast.ListComp):
        fill(low, name, val, st)
        return True
    # out = np.array(out) and the like: the name now holds an array, seen as a full list
    v = low.expr(val, name)
    low.write(name, low.cur, v)
    low.write(name + ".n", low.cur, low.emit(builtins.len, [v], st))
    return True


def augassign(low, st) -> None:
    """Reject ``out += [...]`` and ``out[i] += v`` on lists (the message says what to write)."""
    t = st.target
    if _is_list_node(low, t):
        raise low.unsupported(st, f"'{t.id} += ...' on a list is not supported",
                              f"append the elements one by one: {t.id}.append(v)")
    if isinstance(t, gast.Subscript) and _is_list_node(low, t.value):
        raise low.unsupported(st, f"assigning to an element of the list {t.value.id!r} is not "
                                  "supported", "build the list with append, or use an array: "
                                  "out = np.zeros(n); out[i] += v")


def literal_value(low, node, hint: str) -> Operand:
    """A list literal used as a value (``return [a, b]`` in a helper): a temporary list
    holding its elements; the value is the list's view."""
    tmp = f"_zyg_list{next(_COUNT)}"
    _names(low).add(tmp)
    low.f.locals.add(tmp)
    create(low, tmp, node)
    for e in node.elts:
        if isinstance(e, gast.Starred):
            raise low.unsupported(e, "'*' unpacking in a list literal is not supported")
        push(low, tmp, low.expr(e), e)
    return view(low, tmp, node)


def return_value(low, st) -> Optional[Operand]:
    """``return out`` / ``return [a, b]`` / ``return [... for ...]`` in a function that zyg
    inlines (a helper the differentiated function calls): the caller gets the list's
    view, an array whose first axis holds the elements (``l[0]``, ``len(l)``,
    ``for v in l``, ``np.array(l)`` work on it as on the list).  None: not a list."""
    v = st.value
    if len(low.frames) < 2 or v is None:
        return None
    if isinstance(v, gast.List):
        low.f.returns_list = True
        return literal_value(low, v, "ret")
    if isinstance(v, gast.ListComp) or _is_list_node(low, v):
        low.f.returns_list = True
        return low.expr(v, "ret")
    return None


def bind_returned(low, name: str, v: Operand, node) -> None:
    """``l = helper(x)`` where ``helper`` returns a list: ``l`` is a list local holding the
    returned elements (so ``sum(l)``, ``l.append(v)`` work on it as on a list)."""
    _names(low).add(name)
    low.write(name, low.cur, v)
    low.write(name + ".n", low.cur, low.emit(builtins.len, [v], node))


def check_return(low, st) -> None:
    """A list cannot leave the differentiated function: say so at the ``return``."""
    v = st.value
    parts = list(v.elts) if isinstance(v, (gast.Tuple, gast.List)) else [v]
    for n in parts:
        if isinstance(n, gast.ListComp) or _is_list_node(low, n):
            what = "a list comprehension" if isinstance(n, gast.ListComp) else f"the list {n.id!r}"
            raise low.unsupported(st, f"returning {what} is not supported: lists are local to "
                                      "differentiated code", "return an array: np.array(...)")


def call(low, fn: Any, node, hint: str) -> Optional[Operand]:
    """Calls that involve list locals: ``out.append(v)``, the other list methods (rejected),
    ``sum/min/max(out)``.  None for any other call."""
    f = node.func
    if isinstance(f, gast.Attribute) and _is_list_node(low, f.value):
        name = f.value.id
        if f.attr == "append":
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], gast.Starred):
                raise low.unsupported(node, "append() takes one value")
            push(low, name, low.expr(node.args[0]), node)
            return Const(None)
        what = f"{name}.{f.attr}()"
        raise low.unsupported(node, f"{what} is not supported on lists in differentiated code",
                              "lists support append, len, indexing, iteration, sum/min/max and "
                              "np.array(...)" + (f"; append in a loop: for v in xs: {name}.append(v)"
                                                 if f.attr == "extend" else ""))
    if fn in (builtins.sum, builtins.min, builtins.max) and node.args and \
            _is_list_node(low, node.args[0]) and not node.keywords and \
            len(node.args) <= (2 if fn is builtins.sum else 1):
        v = view(low, node.args[0].id, node.args[0])
        npfn = {builtins.sum: np.sum, builtins.min: np.min, builtins.max: np.max}[fn]
        r = low.emit(npfn, [v], node, hint, {"axis": Const(0)})
        if len(node.args) == 2:
            import operator
            r = low.emit(operator.add, [low.expr(node.args[1]), r], node, hint)
        return r
    return None


def sequence(low, node) -> Operand:
    """An argument of ``zip``/``enumerate`` in a ``for``: ``range(...)`` becomes the array
    ``np.arange(...)`` (ints, not differentiated); anything else is lowered as usual."""
    if isinstance(node, gast.Call) and not node.keywords and 1 <= len(node.args) <= 3 and \
            low.static_value(node.func) is builtins.range:
        return low.emit(np.arange, [low.expr(a) for a in node.args], node)
    return low.expr(node)


# -- arrays shared with a list ----------------------------------------------------------
def check_shared_arrays(fn, kinds, al) -> None:
    """A Python list holds its arrays themselves; zyg's list buffer holds copies of them.
    The two agree as long as nothing writes into an appended array (or a view of it, or
    its base) after the append, and nothing writes into the list's elements.  Raise
    ``UnsupportedSyntax`` at such a write instead of giving the copy's value.

    A write is "after" the append when the CFG reaches it from the append without passing
    again the allocation of the appended array: an array made anew in each iteration
    (``row = np.zeros(n); row[0] = v; out.append(row)``) is a new object the next time
    round.  That cut holds only when the alias class has one allocation and no parameter
    (of the function or of a block), so that each of its members is a view of the newest
    allocation."""
    from ..errors import UnsupportedSyntax
    from .analysis import is_array
    from .ir import Var
    from .prims import InPlace, SetItem
    push_cls = hooks.PRIMS.get("list.append")
    if push_cls is None:
        return
    arr = lambda v: isinstance(v, Var) and is_array(kinds.get(v.id, ""))
    pushes = []
    writes = []                 # (block id, index, stmt, written var)
    for blk in fn.iter_blocks():
        for k, st in enumerate(blk.stmts):
            e = st.expr
            if isinstance(e.fn, push_cls):
                pushes.append((blk.id, k, st))
            elif isinstance(e.fn, (SetItem, InPlace)) and e.args and arr(e.args[0]):
                writes.append((blk.id, k, st, e.args[0]))
    if not pushes or not writes:
        return

    def where(st):
        loc = st.loc
        return (loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None)

    # writes into the buffer of a list: into an element of the list
    bufs = {al.find(st.var.id) for _, _, st in pushes if st.var is not None and st.var.id in al.parent}
    for _, _, st, v in writes:
        if v.id in al.parent and al.find(v.id) in bufs:
            name = next(p.expr.fn.list_name for _, _, p in pushes
                        if p.var is not None and al.find(p.var.id) == al.find(v.id))
            name = "a list" if name.startswith("_zyg_list") else f"the list {name!r}"
            raise UnsupportedSyntax(
                f"writing into an element of {name} is not supported: in Python the "
                "element is the appended array itself, which zyg's lists do not share", *where(st),
                hint="write into the array before appending it, or make a new array and append that")

    params = {p.id for b in fn.iter_blocks() for p in b.params} | {p.id for p in fn.params}
    defs = {}
    for blk in fn.iter_blocks():
        for k, st in enumerate(blk.stmts):
            if st.var is not None:
                defs[st.var.id] = (blk.id, k, st)

    def alloc_of(root):
        """The one statement that allocates the class's memory, or None."""
        made = None
        for m in al.members(root):
            if m in params or m not in defs:
                return None
            if m in al.view_of:
                continue
            if made is not None:
                return None
            made = defs[m]
        return made

    for pb, pk, pst in pushes:
        v = pst.expr.args[2]
        if not arr(v) or v.id not in al.parent:
            continue
        root = al.find(v.id)
        mine = [(b, k, st) for b, k, st, w in writes if w.id in al.parent and al.find(w.id) == root]
        if not mine:
            continue
        alloc = alloc_of(root)
        cut = (alloc[0], alloc[1]) if alloc is not None else None
        hit = {(b, k): st for b, k, st in mine}

        def scan(b, start):
            """The first write reached in block ``b`` from ``start`` on, or True at the
            allocation (the path ends), or None (the path goes on to the successors)."""
            for k in range(start, len(fn.blocks[b].stmts)):
                if (b, k) == cut:
                    return True
                if (b, k) in hit:
                    return hit[(b, k)]
            return None

        found = scan(pb, pk + 1)
        seen = set()
        work = [] if found is not None else [t for t, _ in fn.blocks[pb].term.successors()]
        while found is None and work:
            b = work.pop()
            if b in seen:
                continue
            seen.add(b)
            r = scan(b, 0)
            if r is True:
                continue
            if r is not None:
                found = r
                break
            work.extend(t for t, _ in fn.blocks[b].term.successors())
        if found is None or found is True:
            continue
        name = pst.expr.fn.list_name
        name = "a list" if name.startswith("_zyg_list") else f"the list {name!r}"
        line = pst.loc.lineno if pst.loc else "?"
        raise UnsupportedSyntax(
            f"this writes into an array that was appended to {name} (line {line}): a "
            "Python list holds the array itself and would see the write, but zyg's lists hold "
            "a copy made at the append", *where(found),
            hint="append a copy (out.append(a.copy())) and keep writing into 'a', or finish "
                 "writing into the array before appending it")
