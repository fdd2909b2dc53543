"""Scalar replacement of tuples: every tuple value becomes its elements.

Once kinds are known, a tuple (or namedtuple) value is a fixed number of
elements, indexed only with constants.  This pass replaces each tuple-kinded
value by its elements ("leaves"), so that the transform never sees a tuple:

* ``t = (a, b)`` and ``State(a, b)`` disappear; ``t[0]`` and ``s.field`` become
  the element itself; ``s._replace(f=v)`` swaps one element;
* tuple parameters of blocks and of the function become one parameter per leaf
  (the API flattens tuple arguments the same way and regroups their gradients);
* a returned tuple becomes one flat ``MakeTuple`` of its leaves just before the
  return (the API rebuilds the nesting and the namedtuple classes from
  :attr:`Flat.ret_tree`);
* tuples produced by other calls (``a.shape``) are kept, and their elements read
  with ``GetItem`` once; tuples passed to other calls (``np.zeros((n, m))``) are
  rebuilt right before the call.

Cotangents of tuples are then just the cotangents of their elements (SSA values),
as in Zygote, without any tuple arithmetic in the generated code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .analysis import expand_tuple_index, is_array, is_tuple, tuple_class, tuple_elts, tuple_kind
from .ir import Branch, Call, Const, Function, Jump, Operand, Return, Stmt, Undef, Var
from .prims import Attr, GetItem, MakeTuple, Replace, SetItem

# a tree: a leaf operand, or ("tuple", cls, [subtrees])
Tree = Any


@dataclass
class Flat:
    fn: Function
    kinds: Dict[int, str]
    param_trees: List[Any]        # per original parameter: None (not a tuple) or a shape tree
    ret_tree: Any                 # None, or the shape tree of the returned tuple


def shape_of(t: Tree) -> Any:
    """The nesting of a tree without its operands: ("tuple", cls, [...]) / None for a leaf."""
    if isinstance(t, tuple) and t and t[0] == "tuple":
        return ("tuple", t[1], [shape_of(x) for x in t[2]])
    return None


def leaves(t: Tree) -> List[Operand]:
    if isinstance(t, tuple) and t and t[0] == "tuple":
        out: List[Operand] = []
        for x in t[2]:
            out += leaves(x)
        return out
    return [t]


def n_leaves(shape: Any) -> int:
    return 1 if shape is None else sum(n_leaves(s) for s in shape[2])


def flatten_value(v: Any) -> List[Any]:
    """The leaves of a Python value (tuples and namedtuples flattened, in order)."""
    if isinstance(v, tuple):
        out: List[Any] = []
        for x in v:
            out += flatten_value(x)
        return out
    return [v]


def unflatten(shape: Any, vals: List[Any], pos: int = 0) -> Tuple[Any, int]:
    """Rebuild a value of ``shape`` from ``vals[pos:]``; returns (value, next position)."""
    if shape is None:
        return vals[pos], pos + 1
    _, cls, subs = shape
    items = []
    for s in subs:
        x, pos = unflatten(s, vals, pos)
        items.append(x)
    return (tuple(items) if cls is None else cls(*items)), pos


def _rpo(fn: Function) -> List[int]:
    entry = fn.order[0]
    seen, post = set(), []
    stack = [(entry, iter([t for t, _ in fn.blocks[entry].term.successors()]))]
    seen.add(entry)
    while stack:
        b, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            post.append(b)
            stack.pop()
        elif nxt not in seen:
            seen.add(nxt)
            stack.append((nxt, iter([t for t, _ in fn.blocks[nxt].term.successors()])))
    return list(reversed(post))


def flatten_tuples(fn: Function, kinds: Dict[int, str]) -> Flat:
    """Replace tuple values by their elements (``fn`` is modified: pass a copy)."""
    kinds = dict(kinds)
    top = max([p.id for b in fn.iter_blocks() for p in b.params] +
              [s.var.id for b in fn.iter_blocks() for s in b.stmts if s.var is not None] + [0])
    counter = [top]
    tree: Dict[int, Tree] = {}
    subst: Dict[int, Operand] = {}

    def fresh(kind: str, hint: str) -> Var:
        counter[0] += 1
        v = Var(counter[0], hint)
        kinds[v.id] = kind
        return v

    def kind_of(a: Operand) -> str:
        if isinstance(a, Var):
            return kinds.get(a.id, "undef")
        if isinstance(a, Undef):
            return "undef"
        return "tuple" if isinstance(a.value, tuple) else "scalar"

    def new_tree(kind: str, hint: str) -> Tree:
        if is_tuple(kind):
            return ("tuple", tuple_class(kind), [new_tree(e, f"{hint}_{i}")
                                                 for i, e in enumerate(tuple_elts(kind))])
        return fresh(kind, hint)

    def res(a: Operand) -> Operand:
        while isinstance(a, Var) and a.id in subst:
            a = subst[a.id]
        return a

    def tree_of(a: Operand, shape_kind: Optional[str] = None) -> Tree:
        a = res(a)
        if isinstance(a, Var) and a.id in tree:
            return tree[a.id]
        if isinstance(a, Const) and not isinstance(a, Undef) and isinstance(a.value, tuple):
            v = a.value
            return ("tuple", None if type(v) is tuple else type(v), [tree_of(Const(x)) for x in v])
        if isinstance(a, Undef) and shape_kind is not None and is_tuple(shape_kind):
            return ("tuple", tuple_class(shape_kind), [tree_of(Undef(), e) for e in tuple_elts(shape_kind)])
        return a

    def rebuild(t: Tree, out: List[Stmt], loc) -> Operand:
        """An operand holding the tuple ``t`` (MakeTuple statements appended to ``out``)."""
        if not (isinstance(t, tuple) and t and t[0] == "tuple"):
            return t
        parts = [rebuild(x, out, loc) for x in t[2]]
        kind = tuple_kind([kind_of(p) if isinstance(p, Var) else _const_kind(p) for p in parts],
                          t[1] or tuple)
        v = fresh(kind, "t")
        out.append(Stmt(v, Call(MakeTuple(t[1]), parts, {}), loc))
        return v

    # 1. parameters: one per leaf
    orig_params = {b: list(blk.params) for b, blk in fn.blocks.items()}
    param_trees: List[Any] = []
    entry = fn.order[0]
    for b, blk in fn.blocks.items():
        new: List[Var] = []
        for p in blk.params:
            k = kinds.get(p.id, "undef")
            if is_tuple(k):
                t = new_tree(k, p.hint or "t")
                tree[p.id] = t
                new += leaves(t)
                if b == entry:
                    param_trees.append(shape_of(t))
            else:
                new.append(p)
                if b == entry:
                    param_trees.append(None)
        blk.params = new

    # 2. statements, in reverse postorder (definitions before uses)
    order = _rpo(fn)
    for b in order:
        blk = fn.blocks[b]
        out: List[Stmt] = []
        for st in blk.stmts:
            e = st.expr
            f = e.fn
            args = [res(a) for a in e.args]
            kw = {k: res(a) for k, a in e.kwargs.items()}
            base_k = kind_of(args[0]) if args else ""
            if isinstance(f, MakeTuple) and st.var is not None:
                tree[st.var.id] = ("tuple", f.cls, [tree_of(a) for a in args])
                continue
            if isinstance(f, GetItem) and f.spec == ("i",) and is_tuple(base_k) and \
                    isinstance(args[1], Const) and st.var is not None:
                _pick(tree_of(args[0]), args[1].value, st.var, tree, subst)
                continue
            if isinstance(f, Attr) and st.var is not None and tuple_class(base_k) is not None and \
                    f.attr in tuple_class(base_k)._fields:
                _pick(tree_of(args[0]), tuple_class(base_k)._fields.index(f.attr), st.var, tree, subst)
                continue
            if isinstance(f, Replace) and st.var is not None:
                t = tree_of(args[0])
                cls = tuple_class(base_k)
                items = list(t[2])
                for name, val in zip(f.fields, args[1:]):
                    items[cls._fields.index(name)] = tree_of(val)
                tree[st.var.id] = ("tuple", t[1], items)
                continue
            if isinstance(f, (GetItem, SetItem)) and is_array(base_k) and \
                    any(is_tuple(kind_of(a)) for a in args[1:]):
                # a[idx], a[idx] = v with a tuple idx: indexed by its elements
                spec, ops = expand_tuple_index(f.spec, args[1:], [kind_of(a) for a in args[1:]],
                                               lambda a: leaves(tree_of(a)))
                f = f.with_spec(spec)
                args = [args[0]] + ops
            # any other call: tuples in, tuples out as real tuples
            args = [rebuild(tree_of(a), out, st.loc) if is_tuple(kind_of(a)) else a for a in args]
            kw = {k: rebuild(tree_of(a), out, st.loc) if is_tuple(kind_of(a)) else a for k, a in kw.items()}
            out.append(Stmt(st.var, Call(f, args, kw), st.loc))
            if st.var is not None and is_tuple(kinds.get(st.var.id, "")):
                tree[st.var.id] = _read_elements(st.var, kinds[st.var.id], out, st.loc, fresh)
        blk.stmts = out

    # 3. terminators: tuple arguments become their leaves
    ret_tree = None
    for b in order:
        blk = fn.blocks[b]
        t = blk.term

        def expand(target: int, args: List[Operand]) -> List[Operand]:
            outa: List[Operand] = []
            for p, a in zip(orig_params[target], args):
                k = kinds.get(p.id, "undef")
                if is_tuple(k):
                    outa += leaves(tree_of(a, k))
                else:
                    outa.append(res(a))
            return outa
        if isinstance(t, Jump):
            t.args = expand(t.target, t.args)
        elif isinstance(t, Branch):
            t.cond = res(t.cond)
            t.true_args = expand(t.true, t.true_args)
            t.false_args = expand(t.false, t.false_args)
        elif isinstance(t, Return):
            v = res(t.value)
            rt = tree_of(v)
            if isinstance(rt, tuple) and rt and rt[0] == "tuple":
                ret_tree = shape_of(rt)
                parts = leaves(rt)
                kind = tuple_kind([kind_of(p) if isinstance(p, Var) else _const_kind(p) for p in parts])
                r = fresh(kind, "ret")
                blk.stmts.append(Stmt(r, Call(MakeTuple(), parts, {}), None))
                t.value = r
            else:
                t.value = v
    return Flat(fn, kinds, param_trees, ret_tree)


def _const_kind(c: Operand) -> str:
    from .analysis import const_kind
    return const_kind(c)


def _pick(t: Tree, k: int, var: Var, tree: Dict[int, Tree], subst: Dict[int, Operand]) -> None:
    sub = t[2][k]
    if isinstance(sub, tuple) and sub and sub[0] == "tuple":
        tree[var.id] = sub
    else:
        subst[var.id] = sub


def _read_elements(v: Var, kind: str, out: List[Stmt], loc, fresh) -> Tree:
    """Elements of a tuple made by a call, read once with constant indices."""
    items = []
    for i, e in enumerate(tuple_elts(kind)):
        x = fresh(e, f"{v.hint or 't'}_{i}")
        out.append(Stmt(x, Call(GetItem(("i",)), [v, Const(i)], {}), loc))
        items.append(_read_elements(x, e, out, loc, fresh) if is_tuple(e) else x)
    return ("tuple", tuple_class(kind), items)
