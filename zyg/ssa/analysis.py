"""Analyses over SSA: value kinds (a light type lattice), activity, loops.

Kinds are strings: ``bool < int < float < complex`` (numeric promotion), ``none``,
``undef`` (bottom: no value seen yet) and ``object`` (top); arrays are
``<dtype>[<ndim>]`` (``f8[2]``, ``c16[1]``, ``i8[1]``) and tuples
``tuple(<kind>,...)``.  Result kinds are found by evaluating the callee on sample
values of the argument kinds (and on the actual value of constant operands).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .ir import Branch, Const, Function, Jump, Return, Undef, Var

_NUMERIC = ["bool", "int", "float", "complex"]
_SAMPLES = {
    "bool": [True, False], "int": [1, 2, 3], "float": [0.5, 1.5, 2.5, -0.5],
    "complex": [0.5 + 0.25j, 1.5 - 0.5j], "none": [None], "dtype": [np.float64], "str": [""],
}

# fn -> kind_of(kinds, consts) for functions that samples cannot type (np.linalg.cholesky
# needs a positive definite matrix, np.einsum a constant subscript string); filled by the
# rule modules (zyg/rules/linalg.py); None from a hook: fall back to samples
KIND_HOOKS: Dict[Any, Any] = {}


def kind_of_value(v: Any) -> str:
    """Kind of a run-time argument value."""
    if isinstance(v, np.ndarray):
        return f"{v.dtype.str[1:]}[{v.ndim}]"
    if isinstance(v, tuple):
        return tuple_kind([kind_of_value(x) for x in v], type(v))
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, (complex, np.complexfloating)):
        return "complex"
    if isinstance(v, str):
        return "str"
    if v is None:
        return "none"
    if isinstance(v, type) and issubclass(v, (np.number, np.bool_)) or isinstance(v, np.dtype):
        # a dtype argument: a constant (np.complex128) or a.dtype passed to np.zeros
        return f"dtype:{np.dtype(v).name}"
    return "object"


def is_array(k: str) -> bool:
    return k.endswith("]")


def is_complex(k: str) -> bool:
    """A complex scalar or an array of complex numbers."""
    return k == "complex" or (k.endswith("]") and k[0] == "c")


def array_dtype(k: str) -> str:
    """numpy dtype name of an array kind: 'f8[2]' -> 'float64'."""
    return np.dtype(k[:k.index("[")]).name


def array_ndim(k: str) -> int:
    return int(k[k.index("[") + 1:-1])


def array_kind(dtype: Any, ndim: int) -> str:
    return f"{np.dtype(dtype).str[1:]}[{ndim}]"


def elem_kind(k: str) -> str:
    """The scalar kind of an array's elements."""
    c = k[0]
    return {"f": "float", "c": "complex", "i": "int", "u": "int", "b": "bool"}.get(c, "object")


# namedtuple classes seen in kinds: 'tuple:<n>(float,int)' is an instance of _NAMED[n]
_NAMED: List[type] = []


def tuple_kind(elts: List[str], cls: Any = tuple) -> str:
    """The kind of a tuple (or of a namedtuple of class ``cls``) with these element kinds."""
    tag = ""
    if cls is not tuple and cls is not None:
        if cls not in _NAMED:
            _NAMED.append(cls)
        tag = f":{_NAMED.index(cls)}"
    return f"tuple{tag}(" + ",".join(elts) + ")"


def tuple_class(k: str) -> Any:
    """The namedtuple class of a tuple kind (None for a plain tuple)."""
    if not k.startswith("tuple:"):
        return None
    return _NAMED[int(k[6:k.index("(")])]


def is_tuple(k: str) -> bool:
    return k.startswith("tuple")


def tuple_elts(k: str) -> List[str]:
    inner = k[k.index("(") + 1:-1]
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur:
        out.append(cur)
    return out


def sample(k: str, i: int) -> Any:
    """The i-th sample value of kind ``k`` (fresh arrays: callees may write into them)."""
    if is_array(k):
        nd = array_ndim(k)
        n = 4 ** nd
        base = 0.5 + (np.arange(n) % 7) * 0.125 + 0.03 * i
        return base.reshape((4,) * nd).astype(array_dtype(k))
    if is_tuple(k):
        vals = tuple(sample(e, i) for e in tuple_elts(k))
        cls = tuple_class(k)
        return vals if cls is None else cls(*vals)
    if k.startswith("dtype:"):
        return np.dtype(k[6:])
    vals = _SAMPLES[k]
    return vals[i % len(vals)]


def n_samples(k: str) -> int:
    if is_array(k) or is_tuple(k):
        return 3
    if k.startswith("dtype:"):
        return 1
    return len(_SAMPLES[k])


def join(a: str, b: str) -> str:
    if a == "undef":
        return b
    if b == "undef" or a == b:
        return a
    if a in _NUMERIC and b in _NUMERIC:
        return _NUMERIC[max(_NUMERIC.index(a), _NUMERIC.index(b))]
    if is_tuple(a) and is_tuple(b) and tuple_class(a) is tuple_class(b):
        ea, eb = tuple_elts(a), tuple_elts(b)
        if len(ea) == len(eb):
            return tuple_kind([join(x, y) for x, y in zip(ea, eb)], tuple_class(a) or tuple)
    return "object"


def const_kind(c: Const) -> str:
    if isinstance(c, Undef):
        return "undef"
    return kind_of_value(c.value)


_result_cache: Dict[Tuple[Any, Tuple[str, ...]], str] = {}


_NOCONST = object()


def _structural_kind(fn: Any, kinds, consts) -> Any:
    """Kinds that samples cannot find reliably (indices out of the sample's range,
    reshapes to sizes the sample does not have)."""
    from .prims import Attr, GetItem, Prim, SetItem
    if isinstance(fn, SetItem):
        return "none"
    try:
        hook = KIND_HOOKS.get(getattr(fn, "py_func", fn))
    except TypeError:
        hook = None
    if hook is not None:
        k = hook(kinds, consts)
        if k is not None:
            return k
    own = getattr(fn, "_zyg_kind", None)        # checkpointed loops (rules/higher.py)
    if own is not None:
        return own(kinds)
    if isinstance(fn, Prim) and hasattr(fn, "result_kind_of"):
        return fn.result_kind_of(kinds)          # zyg.grad inside (rules/gradcall.py)
    if isinstance(fn, GetItem) and kinds:
        base = kinds[0]
        if is_array(base) and any(is_tuple(k) for k in kinds[1:]):
            # a[idx] with idx = (i, j): the tuple's elements are the index (tuples.py)
            spec, ops = expand_tuple_index(fn.spec, list(kinds[1:]), list(kinds[1:]), lambda k: tuple_elts(k))
            fn, kinds = GetItem(spec), (base,) + tuple(ops)
        if is_array(base) and is_fancy(fn.spec, kinds[1:]):
            nd = fancy_ndim(base, fn.spec, kinds[1:])
            return None if nd is None or nd < 1 else array_kind(array_dtype(base), nd)
        if is_array(base):
            nd = array_ndim(base) - fn.spec.count("i") + fn.spec.count("n")
            if "e" not in fn.spec and nd >= 0:
                return elem_kind(base) if nd == 0 else array_kind(array_dtype(base), nd)
        if is_tuple(base) and fn.spec == ("i",) and consts[1] is not _NOCONST:
            elts = tuple_elts(base)
            try:
                return elts[consts[1]]
            except (IndexError, TypeError):
                return None
    if isinstance(fn, Attr) and kinds and tuple_class(kinds[0]) is not None:
        cls = tuple_class(kinds[0])
        if fn.attr in cls._fields:
            return tuple_elts(kinds[0])[cls._fields.index(fn.attr)]
    if fn is np.reshape and len(kinds) == 2 and is_array(kinds[0]):
        shp = kinds[1]
        nd = len(tuple_elts(shp)) if is_tuple(shp) else 1
        return array_kind(array_dtype(kinds[0]), nd)
    return None


def result_kind(fn: Any, kinds: Tuple[str, ...], consts: Tuple[Any, ...] = (),
                kwnames: Tuple[str, ...] = ()) -> str:
    """Kind of ``fn(*args, **kwargs)`` for operands of the given kinds, by evaluating on
    samples; ``consts[i]`` is the value of operand i when it is a constant (else
    ``_NOCONST``); the last ``len(kwnames)`` operands are keyword arguments."""
    if getattr(fn, "accepts_undef", False):
        return fn.result_kind_of(kinds)     # appending to an empty list (zyg/ssa/lists.py)
    if any(k in ("undef",) for k in kinds):
        return "undef"
    if any(k == "object" for k in kinds):
        return "object"
    consts = consts or (_NOCONST,) * len(kinds)
    structural = _structural_kind(fn, kinds, consts)
    if structural is not None:
        return structural
    ckey = tuple(None if c is _NOCONST else (type(c), c) for c in consts
                 if not isinstance(c, np.ndarray))
    key = (fn, kinds, ckey, kwnames)
    try:
        if key in _result_cache:
            return _result_cache[key]
    except TypeError:
        key = None
    out = None
    n = max([n_samples(k) for k in kinds] or [1])
    target = getattr(fn, "py_func", fn)
    npos = len(kinds) - len(kwnames)
    for i in range(n):
        vals = [c if c is not _NOCONST else sample(k, i) for k, c in zip(kinds, consts)]
        try:
            with np.errstate(all="ignore"):
                r = target(*vals[:npos], **dict(zip(kwnames, vals[npos:])))
            out = kind_of_value(r)
            break
        except Exception:
            continue
    if out is None:
        # no sample works: arrays give 'object' (zyg reports it), numbers keep 'float'
        out = "object" if any(is_array(k) or is_tuple(k) for k in kinds) else "float"
    if key is not None:
        _result_cache[key] = out
    return out


def infer_kinds(fn: Function, argkinds: List[str]) -> Dict[int, str]:
    """Fixpoint propagation of kinds from the argument kinds through the SSA."""
    kinds: Dict[int, str] = {}
    for p, k in zip(fn.params, argkinds):
        kinds[p.id] = k

    def k_of(a):
        return kinds.get(a.id, "undef") if isinstance(a, Var) else const_kind(a)

    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if st.var is None:
                    continue
                ops = list(st.expr.args) + list(st.expr.kwargs.values())
                new = result_kind(st.expr.fn, tuple(k_of(a) for a in ops),
                                  tuple(a.value if isinstance(a, Const) and not isinstance(a, Undef)
                                        else _NOCONST for a in ops),
                                  tuple(st.expr.kwargs))
                old = kinds.get(st.var.id, "undef")
                j = join(old, new)
                if j != old:
                    kinds[st.var.id] = j
                    changed = True
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    old = kinds.get(p.id, "undef")
                    j = join(old, k_of(a))
                    if j != old:
                        kinds[p.id] = j
                        changed = True
    return kinds


DIFFERENTIABLE_KINDS = ("float", "complex")


def differentiable(k: str) -> bool:
    if is_tuple(k):
        return any(differentiable(e) for e in tuple_elts(k))
    return k in DIFFERENTIABLE_KINDS or (is_array(k) and k[0] in "fc")


def is_view_op(fn: Any, args, kinds) -> bool:
    """Does ``fn(*args)`` return (a view of) its first argument's memory?"""
    from .prims import Attr, GetItem, InPlace
    if not args or not isinstance(args[0], Var) or not is_array(kinds.get(args[0].id, "")):
        return False
    if isinstance(fn, GetItem):
        # fewer integer indices than dimensions (a row e[1] of a matrix) is a view too
        if is_fancy(fn.spec, [kinds.get(a.id, "") if isinstance(a, Var) else "" for a in args[1:]]):
            return False      # x[idx], x[mask]: a new array
        return fn.is_view() or array_ndim(kinds[args[0].id]) > len(fn.spec)
    if isinstance(fn, Attr):
        return fn.attr in ("T", "real", "imag")
    if isinstance(fn, InPlace):
        return True
    # reshape and ravel: a view where anything writes through them (checked at run time,
    # zyg/pullbacks/reshapes.py), values alone otherwise
    return fn in (np.reshape, np.ravel, np.transpose)


# numpy functions whose result may be a view of their first argument, which zyg's alias
# analysis takes as new arrays (Aliases.refuse_writes_through_views)
_VIEW_FNS = {np.asarray, np.ascontiguousarray, np.asfortranarray, np.atleast_1d, np.atleast_2d,
             np.atleast_3d, np.squeeze, np.expand_dims, np.flip, np.fliplr, np.flipud, np.diagonal,
             np.swapaxes, np.moveaxis, np.broadcast_to, np.real, np.imag, np.rot90}


class Aliases:
    """Alias classes of array values: a view, an in-place result and a block
    parameter share memory with (or may be) their source.  ``mutated`` holds
    the classes written by ``a[i] = v`` or ``a op= b``."""

    def __init__(self, fn: Function, kinds: Dict[int, str]):
        from .prims import InPlace, SetItem
        self.parent: Dict[int, int] = {}
        self.view_of: Dict[int, Any] = {}      # view var id -> defining Stmt
        arr = lambda v: isinstance(v, Var) and is_array(kinds.get(v.id, ""))
        mutated_vars: Set[int] = set()
        for blk in fn.iter_blocks():
            for p in blk.params:
                if arr(p):
                    self.find(p.id)
            for st in blk.stmts:
                e = st.expr
                if st.var is not None and arr(st.var):
                    self.find(st.var.id)
                    if is_view_op(e.fn, e.args, kinds):
                        self.union(st.var.id, e.args[0].id)
                        self.view_of[st.var.id] = st
                        if isinstance(e.fn, InPlace):
                            mutated_vars.add(e.args[0].id)
                if isinstance(e.fn, SetItem) and arr(e.args[0]):
                    mutated_vars.add(e.args[0].id)
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if arr(p) and arr(a):
                        self.union(p.id, a.id)
        self.mutated = {self.find(v) for v in mutated_vars}
        self.refuse_writes_through_views(fn, kinds)

    def refuse_writes_through_views(self, fn: Function, kinds: Dict[int, str]) -> None:
        """numpy functions that return a view of their argument (``np.flip``, ``np.asarray``,
        ``np.atleast_2d``...) are new arrays to zyg: a write through their result would reach
        the argument in numpy but not in zyg's gradient, so it is refused at the line."""
        from ..errors import UnsupportedSyntax
        from .prims import InPlace, SetItem
        defs = {st.var.id: st for blk in fn.iter_blocks() for st in blk.stmts if st.var is not None}
        writes: Dict[int, List[Tuple[int, int]]] = {}      # class -> [(block, position)]
        for blk in fn.iter_blocks():
            for k, st in enumerate(blk.stmts):
                e = st.expr
                if isinstance(e.fn, (SetItem, InPlace)) and e.args and isinstance(e.args[0], Var) \
                        and is_array(kinds.get(e.args[0].id, "")):
                    writes.setdefault(self.find(e.args[0].id), []).append((blk.id, k))

        uses: Dict[int, List[Tuple[int, int]]] = {}     # var -> [(block, position)]
        carried: Dict[int, Set[int]] = {}                 # var -> block parameters it is passed to
        for blk in fn.iter_blocks():
            for k, st in enumerate(blk.stmts):
                for a in list(st.expr.args) + list(st.expr.kwargs.values()):
                    if isinstance(a, Var):
                        uses.setdefault(a.id, []).append((blk.id, k))
            for t, args in blk.term.successors():
                for p, a in zip(fn.blocks[t].params, args):
                    if isinstance(a, Var):
                        uses.setdefault(a.id, []).append((blk.id, len(blk.stmts)))
                        carried.setdefault(a.id, set()).add(p.id)
            for a in (getattr(blk.term, "value", None), getattr(blk.term, "cond", None)):
                if isinstance(a, Var):
                    uses.setdefault(a.id, []).append((blk.id, len(blk.stmts)))

        def reach(bid: int, barrier: Optional[int]) -> Set[int]:
            """Blocks reachable from the end of ``bid``, not through ``barrier``."""
            seen, todo = set(), [t for t, _ in fn.blocks[bid].term.successors()]
            while todo:
                b = todo.pop()
                if b not in seen:
                    seen.add(b)
                    if b != barrier:
                        todo += [t for t, _ in fn.blocks[b].term.successors()]
            seen.discard(barrier)
            return seen

        def after(b1: int, k1: int, b2: int, k2: int, barrier: Optional[int] = None) -> bool:
            """Can position (b2, k2) run after (b1, k1) (without passing block ``barrier``,
            where the value read is defined again)?"""
            return (b2 == b1 and k2 > k1) or b2 in reach(b1, barrier)

        def written_then_read(a: int, v: int, bid: int, pos: int) -> bool:
            """Is the class of ``a`` written after (bid, pos), and ``v`` read after that write?
            (a block parameter carrying ``v`` on is a read)"""
            names, todo = set(), [v]
            while todo:
                x = todo.pop()
                if x not in names:
                    names.add(x)
                    todo += list(carried.get(x, ()))
            at = [u for x in names for u in uses.get(x, [])]
            for wb, wk in writes.get(self.find(a), []):
                if after(bid, pos, wb, wk) and any(after(wb, wk, ub, uk, bid) for ub, uk in at):
                    return True
            return False

        for blk in fn.iter_blocks():
            for pos, st in enumerate(blk.stmts):
                e = st.expr
                if st.var is None or not is_array(kinds.get(st.var.id, "")) or not e.args:
                    continue
                try:
                    if e.fn not in _VIEW_FNS:
                        continue
                except TypeError:
                    continue
                a0 = e.args[0]
                if not self.is_mutated(st.var.id) and not (
                        isinstance(a0, Var) and a0.id in self.parent and
                        written_then_read(a0.id, st.var.id, blk.id, pos)):
                    continue
                a = e.args[0]
                if not isinstance(a, Var) or not is_array(kinds.get(a.id, "")):
                    continue
                if e.fn is np.ascontiguousarray and a.id in defs and defs[a.id].expr.fn is np.copy:
                    continue        # of a fresh copy (a.flatten()): never another array's memory
                loc = st.loc
                name = getattr(e.fn, "__name__", "this function")
                raise UnsupportedSyntax(
                    f"np.{name}() returns a view of its argument (numpy shares the memory), and the "
                    "result or the argument is written into afterwards: zyg does not follow writes "
                    "through it",
                    loc.filename if loc else None, loc.lineno if loc else None, loc.col if loc else None,
                    hint=f"write into a copy (np.{name}(a).copy()) or into the argument itself")

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def members(self, root: int) -> List[int]:
        return [v for v in self.parent if self.find(v) == root]

    def is_mutated(self, v: int) -> bool:
        return v in self.parent and self.find(v) in self.mutated

    def may_share(self, a: Any, b: Any) -> bool:
        """May arrays ``a`` and ``b`` (operands) share memory? Only values of one alias
        class can: a view and its base, two views of one base, an array and an in-place
        result or a block parameter it may be. Arguments that the function writes never
        share memory with other arguments (``safety.py`` rejects the call)."""
        return (isinstance(a, Var) and isinstance(b, Var) and a.id in self.parent and b.id in self.parent
                and self.find(a.id) == self.find(b.id))


def activity(fn: Function, kinds: Dict[int, str], wrt: List[int],
             nondiff: "callable", outputs: Sequence[int] = ()) -> Set[int]:
    """Ids of active values: varied (depend on a ``wrt`` parameter) and useful (reach the
    return, or the final contents of the array parameters ``outputs``: a kernel's).

    Arrays are tracked per alias class: writing a varied value into an array makes
    every value sharing its memory varied, and a useful array makes the values
    written into it useful.
    """
    from .prims import SetItem
    al = Aliases(fn, kinds)

    def diffable(v):
        return isinstance(v, Var) and differentiable(kinds.get(v.id, ""))

    def spread(ids: Set[int]) -> bool:
        """Extend ``ids`` to whole alias classes; True if it grew."""
        roots = {al.find(v) for v in ids if v in al.parent}
        new = {v for v in al.parent if al.find(v) in roots and v not in ids and diffable_id(v)}
        ids |= new
        return bool(new)

    all_vars: Dict[int, Var] = {}
    for blk in fn.iter_blocks():
        for p in blk.params:
            all_vars[p.id] = p
        for st in blk.stmts:
            if st.var is not None:
                all_vars[st.var.id] = st.var

    def diffable_id(i):
        return differentiable(kinds.get(i, ""))

    varied: Set[int] = {fn.params[i].id for i in wrt if diffable(fn.params[i])}
    changed = True
    while changed:
        changed = spread(varied)
        for blk in fn.iter_blocks():
            for st in blk.stmts:
                if isinstance(st.expr.fn, SetItem):
                    base, val = st.expr.args[0], st.expr.args[-1]
                    if isinstance(val, Var) and val.id in varied and isinstance(base, Var) \
                            and base.id not in varied and diffable(base):
                        varied.add(base.id)
                        changed = True
                    continue
                if st.var is None or st.var.id in varied or not diffable(st.var):
                    continue
                if getattr(st.expr.fn, "_zyg_linear", None) is not None:
                    # a message may carry another rank's varied values (zyg/tasks/mpi.py)
                    varied.add(st.var.id)
                    changed = True
                    continue
                if nondiff(st.expr.fn):
                    continue
                if any(isinstance(a, Var) and a.id in varied for a in st.expr.operands()):
                    varied.add(st.var.id)
                    changed = True
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if p.id not in varied and diffable(p) and isinstance(a, Var) and a.id in varied:
                        varied.add(p.id)
                        changed = True
    useful: Set[int] = set()
    for blk in fn.iter_blocks():
        if isinstance(blk.term, Return) and isinstance(blk.term.value, Var):
            useful.add(blk.term.value.id)
    useful |= {fn.params[i].id for i in outputs if diffable(fn.params[i])}
    changed = True
    blocks_back = [fn.blocks[b] for b in reversed(fn.order)]
    while changed:
        changed = spread(useful)
        # backwards, as usefulness flows: in block order each round carried it one
        # block further up, a round per block (quadratic in the number of blocks)
        for blk in blocks_back:
            for target, args in blk.term.successors():
                for p, a in zip(fn.blocks[target].params, args):
                    if p.id in useful and isinstance(a, Var) and a.id not in useful:
                        useful.add(a.id)
                        changed = True
            for st in reversed(blk.stmts):
                if isinstance(st.expr.fn, SetItem):
                    base, val = st.expr.args[0], st.expr.args[-1]
                    if isinstance(base, Var) and base.id in useful and isinstance(val, Var) \
                            and val.id not in useful:
                        useful.add(val.id)
                        changed = True
                    continue
                if getattr(st.expr.fn, "_zyg_linear", None) is not None:
                    # what a rank sends may reach another rank's result (zyg/tasks/mpi.py)
                    for a in st.expr.operands():
                        if isinstance(a, Var) and a.id not in useful and diffable(a):
                            useful.add(a.id)
                            changed = True
                    continue
                if st.var is not None and st.var.id in useful and not nondiff(st.expr.fn):
                    for a in st.expr.operands():
                        if isinstance(a, Var) and a.id not in useful:
                            useful.add(a.id)
                            changed = True
    return varied & useful


def natural_loops(fn: Function, dom: Dict[int, Set[int]]) -> Dict[int, Set[int]]:
    """Header id -> set of block ids of its natural loop (back edges B->H, H dom B)."""
    preds = fn.predecessors()
    loops: Dict[int, Set[int]] = {}
    for blk in fn.iter_blocks():
        for s in blk.successors():
            if s in dom[blk.id]:
                body = loops.setdefault(s, {s})
                work = [blk.id]
                while work:
                    b = work.pop()
                    if b not in body:
                        body.add(b)
                        work.extend(preds[b])
    return loops


def loops_of_blocks(fn: Function, loops: Dict[int, Set[int]]) -> Dict[int, Set[int]]:
    """Block id -> headers of the loops that contain it."""
    out = {b: set() for b in fn.order}
    for h, body in loops.items():
        for b in body:
            out[b].add(h)
    return out


_LB_CAP = 64


def int_lower_bounds(fn: Function, kinds: Dict[int, str]) -> Dict[int, int]:
    """Var id -> a proven lower bound ``>= 0`` of that int (or bool) value.

    A greatest fixpoint: every block parameter starts optimistic and is lowered to
    the least bound of what its edges pass, statements take the bound their operation
    gives (``+``, ``*``, ``//``, ``%``, ``-`` a constant, ``min``/``max``, ``len``,
    shape entries). Values not proven non-negative are left out. Bounds are capped
    at a small number so the iteration stops quickly on ``i - 1`` loops. Used to
    index arrays with unsigned integers in compiled code, which spares numba's
    negative-index wraparound (the value is the same). Function arguments are not
    assumed non-negative; int64 overflow is not modelled.
    """
    import operator as _o
    from .prims import Attr, GetItem, InPlace

    def is_int(v) -> bool:
        return kinds.get(v.id) in ("int", "bool")

    defs: Dict[int, Any] = {}
    shape_ids: Set[int] = set()
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            if st.var is None:
                continue
            if isinstance(st.expr.fn, Attr) and st.expr.fn.attr == "shape":
                shape_ids.add(st.var.id)
            if is_int(st.var):
                defs[st.var.id] = st
    lb: Dict[int, int] = {i: _LB_CAP for i in defs}
    incoming: Dict[int, List[Any]] = {}
    entry = fn.entry.id
    for blk in fn.iter_blocks():
        for target, args in blk.term.successors():
            for p, a in zip(fn.blocks[target].params, args):
                incoming.setdefault(p.id, []).append(a)
    for blk in fn.iter_blocks():
        if blk.id != entry:
            for p in blk.params:
                if is_int(p):
                    lb[p.id] = _LB_CAP

    def bound(a) -> Optional[int]:
        """Lower bound of operand ``a``; constants give their (possibly negative) value."""
        if isinstance(a, Undef):
            return None
        if isinstance(a, Const):
            v = a.value
            return int(v) if isinstance(v, (bool, int, np.integer)) else None
        return lb.get(a.id)

    def of_stmt(st) -> Optional[int]:
        e = st.expr
        f = e.fn.op if isinstance(e.fn, InPlace) else e.fn
        if kinds.get(st.var.id) == "bool":
            return 0
        if e.kwargs:
            return None
        b = [bound(a) for a in e.args]
        if f is len or (isinstance(f, Attr) and f.attr in ("size", "ndim")):
            return 0
        if isinstance(f, GetItem) and e.args and isinstance(e.args[0], Var) \
                and e.args[0].id in shape_ids:
            return 0
        if len(b) == 2 and f in (_o.add, _o.mul, _o.sub, _o.floordiv, _o.mod):
            x, y = b
            if f is _o.mod:
                return 0 if y is not None and y >= 0 else None
            if f is _o.sub:
                return x - y if x is not None and isinstance(e.args[1], Const) and y is not None \
                    else None
            if x is None or y is None or x < 0 or y < 0:
                return None
            if f is _o.add:
                return x + y
            if f is _o.mul:
                return x * y
            return 0                                  # floordiv of non-negatives
        if f is min and b and all(x is not None for x in b):
            return min(b)
        if f is max and b and any(x is not None for x in b):
            return max(x for x in b if x is not None)
        return None

    def settle(i: int, v: Optional[int]) -> bool:
        v = None if v is None or v < 0 else min(v, _LB_CAP)
        if v == lb.get(i):
            return False
        if v is None:
            lb.pop(i, None)
        else:
            lb[i] = v
        return True

    changed = True
    while changed:
        changed = False
        for blk in fn.iter_blocks():
            if blk.id != entry:
                for p in blk.params:
                    if p.id in lb:
                        bs = [bound(a) for a in incoming.get(p.id, [])]
                        v = min(bs) if bs and all(x is not None for x in bs) else None
                        changed |= settle(p.id, v)
            for st in blk.stmts:
                if st.var is not None and st.var.id in lb:
                    changed |= settle(st.var.id, of_stmt(st))
    return lb


# -- integer-array (fancy) indexing: which index operands are arrays -------------------
def array_parts(spec: Sequence[str], op_kinds: Sequence[str]) -> List[Tuple[int, int, str]]:
    """(position in ``spec``, operand index, kind) of every index part that is an array."""
    out = []
    k = 0
    for pos, s in enumerate(spec):
        if s == "i":
            if k < len(op_kinds) and is_array(op_kinds[k]):
                out.append((pos, k, op_kinds[k]))
            k += 1
        elif s == "s":
            k += 3
    return out


def expand_tuple_index(spec: Sequence[str], ops: List[Any], op_kinds: List[str], parts) -> Tuple[Tuple[str, ...], List[Any]]:
    """The subscript ``a[..., t, ...]`` with the tuple ``t`` spelled out as its elements
    (``parts(op)``: the elements of the operand ``op``): spec and operands."""
    out_spec: List[str] = []
    out_ops: List[Any] = []
    k = 0
    for s in spec:
        if s == "i":
            if is_tuple(op_kinds[k]):
                elts = parts(ops[k])
                out_spec += ["i"] * len(elts)
                out_ops += list(elts)
            else:
                out_spec.append("i")
                out_ops.append(ops[k])
            k += 1
        elif s == "s":
            out_spec.append(s)
            out_ops += ops[k:k + 3]
            k += 3
        else:
            out_spec.append(s)
    return tuple(out_spec), out_ops + list(ops[k:])


def is_fancy(spec: Sequence[str], op_kinds: Sequence[str]) -> bool:
    """Does the subscript have an advanced (array) part?"""
    return bool(array_parts(spec, op_kinds))


def fancy_ndim(base_kind: str, spec: Sequence[str], op_kinds: Sequence[str]) -> Optional[int]:
    """Number of dimensions of ``base[index]`` when the index has one array part; None
    when it has none (or the result is not an array numba can give)."""
    parts = array_parts(spec, op_kinds)
    if not parts or not is_array(base_kind) or "e" in spec:
        return None
    nd = array_ndim(base_kind)
    ints = 0
    k = 0
    for s in spec:
        if s == "i":
            if not is_array(op_kinds[k]):
                ints += 1
            k += 1
        elif s == "s":
            k += 3
    _, _, kd = parts[0]
    ki = array_ndim(kd)
    if len(parts) > 1:    # x[rows, cols]: each array consumes an axis; they broadcast together
        return nd - ints - len(parts) + max(array_ndim(k) for _, _, k in parts) + spec.count("n")
    if kd[0] == "b":      # a mask consumes as many axes as it has, and gives one
        return nd - ints - ki + 1 + spec.count("n")
    return nd - ints - 1 + ki + spec.count("n")
