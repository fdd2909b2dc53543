"""Adjoint code of advanced indexing: ``y = x[idx]``, ``x[mask]`` and writes through them.

numpy's ``dx[idx] += dy`` is buffered: with a repeated index only one contribution
lands, so the adjoint of a gather loops over the index instead (repeats accumulate).
A write ``a[idx] = v`` with a repeated index keeps the last value written (numpy and
numba agree), so only the last occurrence of each index receives the cotangent.
The loops are emitted inline, so they compile on both targets without helpers.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ..ssa.analysis import array_ndim
from ..ssa.emit import Code, For, If
from ..ssa.fancy import array_parts
from ..ssa.prims import index_src


def unsupported_reason(spec: Sequence[str], op_kinds: Sequence[str], nd_masks: bool = True
                       ) -> Optional[str]:
    """Why zyg cannot differentiate this advanced index (None when it can); ``nd_masks``:
    the target indexes with boolean masks of several dimensions (``Backend.nd_masks``)."""
    parts = array_parts(spec, op_kinds)
    if len(parts) > 1:
        # x[rows, cols]: 1-D integer arrays side by side, paired element by element
        if any(kd[0] not in "iu" or array_ndim(kd) != 1 for _, _, kd in parts):
            return "an index with several array parts that are not all 1-D integer arrays"
        if [p for p, _, _ in parts] != list(range(parts[0][0], parts[0][0] + len(parts))):
            return "array index parts that are not side by side (x[rows, :, cols])"
    if "n" in spec or "e" in spec:
        return "an array index combined with None or ..."
    pos, _, kd = parts[0]
    if kd[0] not in "biu":
        return f"an index array of kind {kd} (indices must be integer or boolean arrays)"
    if kd[0] != "b" and array_ndim(kd) != 1:
        return "an integer index array with more than one dimension"
    if kd[0] == "b" and array_ndim(kd) > 1 and not nd_masks and spec != ("i",):
        return "a boolean mask of more than one dimension combined with other index parts"
    # numpy moves the selected axis first when integers and the array are separated
    # by a slice; zyg supports the layouts where it stays in place
    adv = [p for p, s in enumerate(spec) if s == "i"]
    if adv != list(range(adv[0], adv[-1] + 1)):
        return "integer and array index parts separated by a slice"
    return None


def _parts(spec, ops, op_kinds):
    parts = array_parts(spec, op_kinds)
    pos, k, kd = parts[0]
    return pos, k, kd


def _result_index(spec, op_kinds, counter: str) -> str:
    """The subscript of the gathered array for the element ``counter`` of the selection
    (several array parts, x[rows, cols], give one axis where the first one is)."""
    pos, _, _ = _parts(spec, None, op_kinds)
    out: List[str] = []
    for p, s in enumerate(spec):
        if p == pos:
            out.append(counter)
        elif s == "s":
            out.append(":")
    return ", ".join(out)


def _paired(ops: List[str], parts, kv: str) -> tuple:
    """Several 1-D index arrays (x[rows, cols]): the length of the selection (numpy
    broadcasts arrays of length 1 against the others) and the operands with each array
    part read at the element ``kv`` of the selection."""
    sels = [ops[k] for _, k, _ in parts]
    n = sels[0] + ".shape[0]"
    for s in sels[1:]:
        n = f"max({n}, {s}.shape[0])"
    new_ops = list(ops)
    for (_, k, _), s in zip(parts, sels):
        new_ops[k] = f"{s}[min({kv}, {s}.shape[0] - 1)]"
    return n, new_ops


def selection_loop(spec, ops: List[str], op_kinds, tmp: int, body) -> Code:
    """A loop over the selected elements in order (statements at indentation 0 on).
    ``body(base_index, result_index)`` gives the loop body (one or more lines) for the
    subscript of the indexed array and of the gathered array."""
    pos, k, kd = _parts(spec, ops, op_kinds)
    sel = ops[k]
    code = Code()
    if kd[0] == "b":
        km = array_ndim(kd)
        ivars = [f"_m{tmp}_{d}" for d in range(km)]
        new_ops = list(ops)
        new_ops[k] = ", ".join(ivars)
        c = f"_cnt{tmp}"
        code.add(0, f"{c} = 0")
        ind = 0
        for d, v in enumerate(ivars):
            code.put(ind, For(v, f"range({sel}.shape[{d}])"))
            ind += 1
        code.put(ind, If(f"{sel}[{', '.join(ivars)}]"))
        ind += 1
        code.add(ind, body(index_src(spec, new_ops), _result_index(spec, op_kinds, c)))
        code.add(ind, f"{c} += 1")
        return code
    kv = f"_k{tmp}"
    parts = array_parts(spec, op_kinds)
    if len(parts) > 1:
        n, new_ops = _paired(ops, parts, kv)
        code.put(0, For(kv, f"range({n})"))
        code.add(1, body(index_src(spec, new_ops), _result_index(spec, op_kinds, kv)))
        return code
    new_ops = list(ops)
    new_ops[k] = f"{sel}[{kv}]"
    code.put(0, For(kv, f"range({sel}.shape[0])"))
    code.add(1, body(index_src(spec, new_ops), _result_index(spec, op_kinds, kv)))
    return code


def scatter_add(spec, ops: List[str], op_kinds, target: str, dy: str, tmp: int) -> Code:
    """``target[index] += dy`` with repeated indices accumulating."""
    return selection_loop(spec, ops, op_kinds, tmp,
                          lambda bi, ri: f"{target}[{bi}] += {dy}[{ri}]")


def keep_last(spec, ops: List[str], op_kinds, base: str, g: str, tmp: int) -> Optional[Code]:
    """Zero the entries of ``g`` (the gathered cotangent of a write ``base[index] = v``)
    whose index occurs again later: only the last write of an element survives.
    None when the index cannot repeat (a mask)."""
    pos, k, kd = _parts(spec, ops, op_kinds)
    if kd[0] == "b":
        return None
    sel = ops[k]
    s, kv, j = f"_s{tmp}", f"_k{tmp}", f"_j{tmp}"
    n = f"{base}.shape[{pos}]"
    gi = _result_index(spec, op_kinds, kv)
    code = Code()
    parts = array_parts(spec, op_kinds)
    if len(parts) > 1:
        # x[rows, cols] = v: an element is repeated when the whole tuple of indices is;
        # number the selected elements in C order of the axes the arrays index
        count, new_ops = _paired(ops, parts, kv)
        dims = [f"{base}.shape[{p}]" for p, _, _ in parts]
        flat = f"{new_ops[parts[0][1]]} % {dims[0]}"
        for (_, kk, _), d in zip(parts[1:], dims[1:]):
            flat = f"({flat}) * {d} + {new_ops[kk]} % {d}"
        code.add(0, f"{s} = np.zeros({' * '.join(dims)}, np.bool_)")
        code.put(0, For(kv, f"range({count} - 1, -1, -1)"))
        code.add(1, f"{j} = {flat}")
        code.put(1, If(f"{s}[{j}]"))
        code.add(2, f"{g}[{gi}] = 0")
        code.add(1, f"{s}[{j}] = True")
        return code
    code.add(0, f"{s} = np.zeros({n}, np.bool_)")
    code.put(0, For(kv, f"range({sel}.shape[0] - 1, -1, -1)"))
    code.add(1, f"{j} = {sel}[{kv}] % {n}")
    code.put(1, If(f"{s}[{j}]"))
    code.add(2, f"{g}[{gi}] = 0")
    code.add(1, f"{s}[{j}] = True")
    return code


# --- boolean masks of more than one dimension on compiled targets --------------------------
# numba indexes with 1-D boolean arrays only (a 2-D mask fails an assertion inside numba):
# on the cpu target ``x[m]`` and ``x[m] = v`` with a mask of the array's shape call these.
def mask_gather(x, m):
    """``x[m]`` for a boolean ``m`` of ``x``'s shape: the selected elements in C order."""
    if m.shape != x.shape:      # (inline: the helpers are compiled one by one)
        raise IndexError("boolean index did not match the indexed array's shape")
    n = 0
    for idx in np.ndindex(m.shape):
        if m[idx]:
            n += 1
    out = np.empty(n, x.dtype)
    k = 0
    for idx in np.ndindex(m.shape):
        if m[idx]:
            out[k] = x[idx]
            k += 1
    return out


def mask_fill(x, m, v):
    """``x[m] = v`` for a scalar ``v``."""
    if m.shape != x.shape:      # (inline: the helpers are compiled one by one)
        raise IndexError("boolean index did not match the indexed array's shape")
    for idx in np.ndindex(m.shape):
        if m[idx]:
            x[idx] = v


def mask_put(x, m, v):
    """``x[m] = v`` for a 1-D ``v`` with one value per selected element (or one value)."""
    if m.shape != x.shape:      # (inline: the helpers are compiled one by one)
        raise IndexError("boolean index did not match the indexed array's shape")
    n = 0
    for idx in np.ndindex(m.shape):
        if m[idx]:
            n += 1
    if v.size != n and v.size != 1:
        raise ValueError("boolean index assignment: the number of values does not match "
                         "the number of selected elements")
    k = 0
    for idx in np.ndindex(m.shape):
        if m[idx]:
            x[idx] = v[k if v.size != 1 else 0]
            k += 1


def helpers_py():
    return {"_zyg_mask_gather": mask_gather, "_zyg_mask_fill": mask_fill, "_zyg_mask_put": mask_put}


def needs_mask_helper(spec, op_kinds, nd_masks: bool) -> bool:
    """Is this a mask of more than one dimension that the target cannot index with?"""
    if nd_masks:
        return False
    parts = array_parts(spec, op_kinds)
    return bool(parts) and parts[0][2][0] == "b" and array_ndim(parts[0][2]) > 1


def mask_get_src(x: str, m: str) -> str:
    return f"_zyg_mask_gather({x}, {m})"


def mask_set_src(x: str, m: str, v: str, v_is_array: bool) -> str:
    return f"_zyg_mask_put({x}, {m}, {v})" if v_is_array else f"_zyg_mask_fill({x}, {m}, {v})"
