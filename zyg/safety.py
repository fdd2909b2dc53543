"""Guards at the boundary between zyg's generated code and the caller's arrays.

The generated code writes into argument arrays and rewinds them, and the adjoint reads
argument arrays assuming they hold what the primal saw.  Three things outside the
generated code can break those assumptions; this module checks or repairs each, and
costs nothing for functions that neither write into nor (for ``pullback``) read arrays:

* **aliased arguments** (:func:`check_aliasing`): an argument array the function writes
  shares memory with another argument (``f(x, x)``, overlapping slices of one array, an
  array inside a tuple argument).  The transform assumes distinct arguments are distinct
  memory, so the gradient would be the derivative of nothing: zyg raises
  :class:`~zyg.errors.AliasedArguments` instead.
* **exceptions** (:class:`Guard`): an exception in the middle of a gradient leaves the
  writes done so far in the caller's arrays.  The arrays the function writes are copied
  before the call and put back when the call (or ``back``) raises.
* **arrays changed between ``pullback`` and ``back``**: ``back`` differentiates at the
  contents of the arrays it reads.  A copy of the argument arrays the tape refers to is
  taken after the primal and compared when ``back`` runs; a difference raises
  :class:`~zyg.errors.ModifiedAfterPullback` (as PyTorch's version counters do).

It also gives every run of a primal that makes recursive calls its own record of their
pullbacks (``zyg/nested/recursion.py``).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .errors import AliasedArguments, ModifiedAfterPullback, TypeMismatch
from .pullbacks import records as recursion
from .rules.higher import Checkpointed
from .ssa.analysis import is_array
from .ssa.build import ssa_of
from .ssa.ir import Var
from .ssa.prims import InPlace, Recursive, SetItem


def _calls_that_may_write(p) -> List[Tuple[Any, List[Any]]]:
    """(call, operands it may write) for the calls in ``p.fn`` that run user code opaquely:
    recursive calls and ``zyg.checkpoint`` blocks (their writes are not in ``p.fn``)."""
    out = []
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            fn = st.expr.fn
            written = getattr(fn, "written_operands", None)
            if written is not None:
                # a primitive that knows what it writes (a checkpointed loop: its carried
                # arrays only; the read-out of a carried value: nothing)
                ops = written(st.expr.args)
                if ops is not None:
                    out.append((fn, ops))
            elif isinstance(fn, (Recursive, Checkpointed)) and _may_write(fn.fn, set()):
                out.append((fn, list(st.expr.args)))
    return out


def _may_write(fn: Any, seen: set) -> bool:
    """Whether ``fn`` (a user function run by a recursive call or a checkpoint) writes into
    any array, itself or through the functions it calls (conservative: True when unsure)."""
    if fn in seen:
        return False
    seen.add(fn)
    try:
        ir = ssa_of(fn)
    except Exception:
        return True
    for blk in ir.iter_blocks():
        for st in blk.stmts:
            f = st.expr.fn
            if isinstance(f, (SetItem, InPlace)):
                return True
            if isinstance(f, (Recursive, Checkpointed)) and _may_write(f.fn, seen):
                return True
    return False


def written_leaves(p) -> Tuple[int, ...]:
    """Positions (among the flattened arguments) of the parameters whose memory the function
    may write: their alias class is written, or is handed to a call that may write."""
    al = p.aliases
    roots = set(al.mutated)
    for _, ops in _calls_that_may_write(p):
        roots |= {al.find(a.id) for a in ops if isinstance(a, Var) and a.id in al.parent}
    return tuple(i for i, q in enumerate(p.fn.params)
                 if q.id in al.parent and al.find(q.id) in roots)


def uses_records(p) -> bool:
    """Whether the generated code keeps pullbacks of recursive calls or recomputes
    checkpointed blocks (both keep per-run state in a :class:`recursion.Records`)."""
    return any(isinstance(st.expr.fn, (Recursive, Checkpointed))
               for blk in p.fn.iter_blocks() for st in blk.stmts)


def _labels(trees: Optional[Sequence[Any]], names: Sequence[str], n: int) -> List[str]:
    """A readable name per flattened argument: ``argument 1 ('b')`` or, for an entry of a
    tuple argument, ``argument 1 ('b')[0]``."""
    if trees is None:
        trees = [None] * n
    out: List[str] = []

    def walk(t, label):
        if t is None:
            out.append(label)
        else:
            for k, sub in enumerate(t[2]):
                walk(sub, f"{label}[{k}]")
    for i, t in enumerate(trees):
        walk(t, f"argument {i}" + (f" ({names[i]!r})" if i < len(names) else ""))
    return out


_TooHard = getattr(getattr(np, "exceptions", np), "TooHardError", Exception)


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100000))
    except _TooHard:
        return True         # undecided in reasonable time: treat as overlapping


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality (so that NaN equals NaN and -0.0 differs from 0.0)."""
    if a.dtype.kind == "c":
        return _same_bits(a.real, b.real) and _same_bits(a.imag, b.imag)
    if a.dtype.kind == "f":
        it = np.dtype(f"i{a.dtype.itemsize}")
        return bool(np.array_equal(a.view(it), b.view(it)))
    return bool(np.array_equal(a, b))


def _write_locations(p) -> dict:
    """Alias class -> location of the first statement that writes into it (for messages)."""
    al = p.aliases
    out: dict = {}
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            if isinstance(st.expr.fn, (SetItem, InPlace)) and st.expr.args and \
                    isinstance(st.expr.args[0], Var) and st.expr.args[0].id in al.parent:
                out.setdefault(al.find(st.expr.args[0].id), st.loc)
    return out


class Guard:
    """The checks one specialisation needs around its calls (built once per specialisation;
    :func:`for_plan` returns None when it needs none)."""

    __slots__ = ("api", "name", "filename", "lineno", "argnames", "written", "records",
                 "trees", "arrays", "alias_check", "p")

    def __init__(self, api: str, p, ir, written: Tuple[int, ...], records: bool):
        self.api = api
        self.name = ir.name
        self.filename = ir.filename
        self.lineno = ir.firstlineno
        self.argnames = list(getattr(ir, "argnames", []) or [])
        self.written = written
        self.records = records
        self.trees = p.flat.param_trees if p.flat is not None else None
        narrays = sum(is_array(p.kinds.get(q.id, "")) for q in p.fn.params)
        self.arrays = narrays > 0
        self.alias_check = narrays > 1      # one array argument cannot alias another
        self.p = p

    def labels(self, n: int) -> List[str]:
        return _labels(self.trees, self.argnames, n)

    # -- aliased arguments ---------------------------------------------------------------
    def check_aliasing(self, leaves: Sequence[Any]) -> None:
        """Raise AliasedArguments when a written argument array overlaps another one."""
        if not self.alias_check:
            return
        for i in self.written:
            a = leaves[i]
            if not isinstance(a, np.ndarray):
                continue
            for j, b in enumerate(leaves):
                if j != i and isinstance(b, np.ndarray) and _overlap(a, b):
                    self._aliasing_error(len(leaves), i, j)

    def _aliasing_error(self, n: int, i: int, j: int):
        labels = self.labels(n)
        other = "which it writes too" if j in self.written else "which it reads"
        raise AliasedArguments(
            f"{self.api}({self.name}): {self.name} writes into {labels[i]}, and that array shares "
            f"memory with {labels[j]}, {other}; zyg differentiates functions whose arguments are "
            f"separate arrays, and the gradient of this call would be wrong",
            self.filename, self.lineno,
            hint=f"pass a copy of one of them (for example {self.name}(x, x.copy()) instead of "
                 f"{self.name}(x, x)); arrays that the function only reads may share memory")

    # -- read-only and byte-swapped arguments -------------------------------------------
    def check_writable(self, leaves: Sequence[Any], native: bool = False) -> None:
        """Raise TypeMismatch, at the line of the write, when the function writes into a
        read-only argument array (``native``: or into one in non-native byte order, which
        the cpu target would have to write through a copy)."""
        for i in self.written:
            a = leaves[i]
            if not isinstance(a, np.ndarray):
                continue
            flat = self.trees is None or all(t is None for t in self.trees)
            x = self.argnames[i] if flat and i < len(self.argnames) else "x"
            if not a.flags.writeable:
                what, hint = ("read-only (its writeable flag is False, as for np.broadcast_to, "
                              "a memory map opened read-only or a frozen array)",
                              f"pass a writable copy ({x}.copy()), or write into a copy inside "
                              f"the function; arrays the function only reads may be read-only")
            elif native and not a.dtype.isnative:
                what, hint = ("in non-native (big-endian) byte order: numba compiles native "
                              "arrays only, and the cpu target runs on a native copy it could not "
                              "write back",
                              f"pass a native array, {x}.astype({x}.dtype.newbyteorder('=')), or "
                              f"use target='python'")
            else:
                continue
            self._write_error(len(leaves), i, what, hint)

    def _write_error(self, n: int, i: int, what: str, hint: str):
        label = self.labels(n)[i]
        q = self.p.fn.params[i]
        al = self.p.aliases
        loc = _write_locations(self.p).get(al.find(q.id)) if q.id in al.parent else None
        filename, lineno, col = (loc.filename, loc.lineno, loc.col) if loc is not None else \
            (self.filename, self.lineno, None)
        raise TypeMismatch(f"{self.api}({self.name}): {self.name} writes into {label}, which is "
                           f"{what}", filename, lineno, col, hint=hint)

    # -- exceptions ----------------------------------------------------------------------
    def snapshot(self, leaves: Sequence[Any]) -> List[Any]:
        return [leaves[i].copy() if isinstance(leaves[i], np.ndarray) else None
                for i in self.written]

    def restore(self, leaves: Sequence[Any], snap: List[Any]) -> None:
        for i, s in zip(self.written, snap):
            if s is not None:
                leaves[i][...] = s

    # -- grad / value_and_grad -----------------------------------------------------------
    def wrap(self, entry: Callable) -> Callable:
        """``entry`` (a fused gradient) with the aliasing check, the restore on exceptions
        and a record for recursive calls."""
        written, records = self.written, self.records
        current = recursion.CURRENT

        def guarded(*args):
            snap = None
            if written:
                self.check_writable(args)
                self.check_aliasing(args)
                snap = self.snapshot(args)
            tok = current.set(recursion.Records()) if records else None
            try:
                return entry(*args)
            except BaseException:
                if snap is not None:
                    self.restore(args, snap)
                raise
            finally:
                if tok is not None:
                    current.reset(tok)
        return guarded

    # -- pullback ------------------------------------------------------------------------
    def primal(self, prim: Callable, args: Sequence[Any]) -> Tuple[Any, Any, "PullbackState"]:
        """Run the pullback's primal ``prim(*args)`` (``args`` flattened): ``(y, tape, state)``."""
        leaves = args
        snap = None
        if self.written:
            self.check_writable(leaves)
            self.check_aliasing(leaves)
            snap = self.snapshot(leaves)
        rec = recursion.Records() if self.records else None
        tok = recursion.CURRENT.set(rec) if rec is not None else None
        try:
            y, tp = prim(*args)
        except BaseException:
            if snap is not None:
                self.restore(leaves, snap)
            raise
        finally:
            if tok is not None:
                recursion.CURRENT.reset(tok)
        kept = []
        if self.arrays:
            # the argument arrays the tape refers to: back reads them (or rewinds them)
            tape_arrays = [t for t in tp if isinstance(t, np.ndarray)]
            for k, a in enumerate(leaves):
                if isinstance(a, np.ndarray) and any(np.may_share_memory(a, t) for t in tape_arrays):
                    kept.append((k, a, a.copy()))
        return y, tp, PullbackState(leaves, snap, rec, kept)

    def back(self, adj: Callable, tp, dyv, st: "PullbackState"):
        """Run the pullback's adjoint ``adj(*tp, dyv)`` after checking that the arrays it
        reads still hold what the primal left in them."""
        for k, a, copy in st.kept:
            if not _same_bits(a, copy):
                label = self.labels(len(st.leaves))[k]
                raise ModifiedAfterPullback(
                    f"back() of {self.name}: {label} was modified after zyg.pullback returned, and "
                    f"back needs its contents from that moment; the gradient would be taken at the "
                    f"new contents", self.filename, self.lineno,
                    hint="call zyg.pullback again after changing the array, or change a copy")
        tok = recursion.CURRENT.set(st.rec.rewound()) if st.rec is not None else None
        try:
            gs = adj(*tp, dyv)
        except BaseException:
            if st.snap is not None:
                self.restore(st.leaves, st.snap)
            raise
        finally:
            if tok is not None:
                recursion.CURRENT.reset(tok)
        return gs


class PullbackState:
    """What one ``pullback`` call keeps for its ``back``: the argument leaves, their copy
    from before the primal (restored if back raises), the record of recursive calls, and
    the copies of the arrays back reads, from after the primal."""

    __slots__ = ("leaves", "snap", "rec", "kept")

    def __init__(self, leaves, snap, rec, kept):
        self.leaves = leaves
        self.snap = snap
        self.rec = rec
        self.kept = kept


def for_plan(mode: str, p, ir) -> Optional[Guard]:
    """The guard of a specialisation with plan ``p`` of ``ir`` for the API ``mode``
    (``"grad"``, ``"value_and_grad"``, ``"pullback"``, ``"jvp"``); None when its calls need
    no check: no argument array is written, no recursion, and, for pullback, no array
    argument.  (``jvp`` only checks aliasing: forward mode writes into copies.)"""
    written = written_leaves(p)
    records = uses_records(p) and mode != "jvp"
    g = Guard(f"zyg.{mode}", p, ir, written, records)
    if mode == "pullback":
        return g if (written or records or g.arrays) else None
    return g if (written or records) else None


def guard_grad(fn: Callable, mode: str, p, ir) -> Callable:
    """The fused gradient ``fn`` (called with the flattened arguments) with the guards its
    specialisation needs (``fn`` itself when none)."""
    g = for_plan(mode, p, ir)
    return fn if g is None else g.wrap(fn)
