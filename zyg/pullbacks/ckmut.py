"""``zyg.checkpoint`` of blocks that write into their arguments or return tuples.

``checkpoint(block, *args)`` is differentiated by recomputing ``block``'s pullback from
``args`` in the backward pass (``recursion.py``). That is right only when ``block`` is a
pure function of its arguments returning one value. Once the kinds are known, this pass
rewrites a checkpoint that is not, in the caller's IR, into one that is:

    a, b = zyg.checkpoint(block, w, x)      # block writes into w

becomes, with a generated wrapper ``ck(w, x)`` that runs ``block`` on a copy of ``w``
and returns its results and the copy's final contents packed in one float64 vector:

    z = checkpoint(ck, w, x)                # pure: recomputing it sees what the call saw
    a = z[0]; b = z[1]
    w[:] = reshape(z[2:2 + w.size], w.shape)

The write into ``w`` is then an ordinary write of the caller: recorded (the snapshot of
``w`` the recomputation needs) and rewound, and its cotangent reaches ``ck``'s pullback
through ``z``, with the Jacobian of ``w``'s new contents. Array results of such blocks
(a tuple element, or the result of a block that writes its arguments) are refused with
an error at the user's line.
"""
from __future__ import annotations

import linecache
import operator
from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import UnsupportedSyntax
from ..ssa.analysis import Aliases, array_ndim, infer_kinds, is_array, is_tuple, tuple_class, tuple_elts
from ..ssa.ir import Call, Const, Function, Stmt, Var
from ..ssa.prims import Attr, GetItem, MakeTuple, SetItem

_MUTATED: Dict[Tuple[Any, Tuple[str, ...]], List[int]] = {}
_WRAPPERS: Dict[Tuple[Any, int, Tuple[int, ...], bool], Any] = {}


def mutated_params(block: Any, kinds: List[str]) -> List[int]:
    """Indices of the array arguments that ``block`` writes into, for these argument kinds."""
    key = (block, tuple(kinds))
    got = _MUTATED.get(key)
    if got is None:
        from ..ssa.lower import lower
        from ..ssa.passes import run_pipeline
        from .specialize import specialize
        ir = run_pipeline(lower(block))
        if len(ir.params) != len(kinds):
            return []       # a wrong number of arguments: the call reports it
        ks = infer_kinds(ir, list(kinds))
        ir = specialize(ir, ks)
        ks = infer_kinds(ir, list(kinds))
        al = Aliases(ir, ks)
        got = _MUTATED[key] = [i for i, p in enumerate(ir.params)
                               if is_array(kinds[i]) and al.is_mutated(p.id)]
    return got


def _wrapper(block: Any, nargs: int, mut: Tuple[int, ...], nres: int, tup: bool) -> Any:
    """``ck(*args)``: ``block`` on copies of the written arguments; its ``nres`` numbers
    (a tuple when ``tup``) and those copies' final contents, packed in one vector."""
    key = (block, nargs, mut, nres, tup)
    w = _WRAPPERS.get(key)
    if w is not None:
        return w
    name = "".join(c if c.isalnum() else "_" for c in getattr(block, "__name__", "block"))
    fname = f"ck_{name}"
    params = [f"a{i}" for i in range(nargs)]
    call = [f"m{i}" if i in mut else f"a{i}" for i in range(nargs)]
    lines = [f"def {fname}({', '.join(params)}):"]
    lines += [f"    m{i} = a{i}.copy()" for i in mut]
    lines.append(f"    r = _zyg_block({', '.join(call)})")
    nums = [f"r[{j}]" for j in range(nres)] if tup else ["r"]
    parts = [f"np.array([{', '.join(nums)}])"] + [f"np.ravel(m{i})" for i in mut]
    lines.append(f"    return {parts[0]}" if len(parts) == 1 else
                 f"    return np.concatenate(({', '.join(parts)}, ))")
    src = "\n".join(lines) + "\n"
    filename = f"<zyg checkpoint of {name} {len(_WRAPPERS)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    glob = {"np": np, "_zyg_block": block, "__name__": "zyg.pullbacks.ckmut"}
    exec(compile(src, filename, "exec"), glob)
    w = _WRAPPERS[key] = glob[fname]
    return w


def expand_checkpoints(fn: Function, kinds: Dict[int, str]) -> bool:
    """Rewrite (in place) the checkpoints of ``fn`` whose blocks write into their array
    arguments or return tuples; True if any was."""
    from ..rules.higher import Checkpointed
    todo = [(blk, st) for blk in fn.iter_blocks() for st in blk.stmts
            if type(st.expr.fn) is Checkpointed and st.var is not None]
    if not todo:
        return False
    next_id = [1 + max([p.id for b in fn.iter_blocks() for p in b.params]
                       + [s.var.id for b in fn.iter_blocks() for s in b.stmts if s.var is not None]
                       + [p.id for p in fn.params])]

    def fresh(hint: str) -> Var:
        v = Var(next_id[0], hint)
        next_id[0] += 1
        return v

    changed = False
    al = Aliases(fn, kinds)
    for blk, st in todo:
        e = st.expr
        block = e.fn.fn
        argk = [kinds.get(a.id, "undef") if isinstance(a, Var) else "float" for a in e.args]
        if any(k in ("undef", "object") for k in argk):
            continue
        mut = tuple(mutated_params(block, argk))
        rk = kinds.get(st.var.id, "undef")
        tup = is_tuple(rk)
        if not mut and not tup:
            continue
        loc = st.loc

        def refuse(msg: str, hint: str):
            return UnsupportedSyntax(msg, loc.filename if loc else None, loc.lineno if loc else None,
                                     loc.col if loc else None, hint=hint)
        elts = tuple_elts(rk) if tup else [rk]
        bname = getattr(block, "__name__", "block")
        if any(k not in ("float", "int", "bool") for k in elts):
            what = "returns a tuple with an element that is not a number" if tup else \
                "writes into its argument and returns an array"
            raise refuse(f"zyg.checkpoint({bname}, ...): the block {what}; zyg cannot checkpoint that yet",
                         "return numbers (a tuple of floats is fine), or write the array results into "
                         "an argument array the block receives")
        for i in mut:
            a = e.args[i]
            for j, b in enumerate(e.args):
                if j != i and isinstance(b, Var) and isinstance(a, Var) and is_array(argk[j]) and \
                        a.id in al.parent and b.id in al.parent and al.find(a.id) == al.find(b.id):
                    raise refuse(f"zyg.checkpoint({bname}, ...) writes into argument {i}, which shares "
                                 f"memory with argument {j}; zyg cannot recompute that block",
                                 "pass a copy (x.copy()) as one of the two arguments")
        wrap = _wrapper(block, len(e.args), mut, len(elts), tup)
        out: List[Stmt] = []
        z = fresh("ck")
        out.append(Stmt(z, Call(Checkpointed(wrap), list(e.args), {}), loc))
        leaves = []
        for j, k in enumerate(elts):
            v = fresh("ck_r") if tup else st.var
            if k == "float":
                out.append(Stmt(v, Call(GetItem(("i",)), [z, Const(j)], {}), loc))
            else:               # packed as float64: the number it was
                t = fresh("ck_r")
                out.append(Stmt(t, Call(GetItem(("i",)), [z, Const(j)], {}), loc))
                out.append(Stmt(v, Call(int, [t], {}) if k == "int" else
                                Call(operator.ne, [t, Const(0.0)], {}), loc))
            leaves.append(v)
        if tup:
            out.append(Stmt(st.var, Call(MakeTuple(tuple_class(rk)), leaves, {}), loc))
        off: Any = Const(len(elts))
        for i in mut:
            a = e.args[i]
            size, hi, post = fresh("n"), fresh("hi"), fresh("ck_w")
            out.append(Stmt(size, Call(Attr("size"), [a], {}), loc))
            out.append(Stmt(hi, Call(operator.add, [off, size], {}), loc))
            out.append(Stmt(post, Call(GetItem(("s",)), [z, off, hi, Const(None)], {}), loc))
            if array_ndim(argk[i]) > 1:
                # numba reshapes contiguous arrays only (the vector comes from object mode)
                flat, shape, post = post, fresh("shape"), fresh("ck_w")
                cont = fresh("ck_w")
                out.append(Stmt(cont, Call(np.copy, [flat], {}), loc))
                out.append(Stmt(shape, Call(Attr("shape"), [a], {}), loc))
                out.append(Stmt(post, Call(np.reshape, [cont, shape], {}), loc))
            nd = array_ndim(argk[i])
            out.append(Stmt(None, Call(SetItem(("s",) * nd), [a] + [Const(None)] * (3 * nd) + [post], {}),
                            loc))
            off = hi
        k = next(n for n, s in enumerate(blk.stmts) if s is st)
        blk.stmts[k:k + 1] = out
        changed = True
    return changed
