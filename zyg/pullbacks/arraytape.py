"""Helpers of the generated code for arrays: copying an array onto a stack and
keeping one shadow buffer per array created in a loop.

An array residual is stored flattened on the stack of its element kind, its
shape on the int stack; popping gives a view of the stack (the adjoint never
pushes, so the view stays valid).
"""
from __future__ import annotations

import numpy as np

from ..numerics import on_disk

from ..ssa import hooks



@on_disk
def push_array(stack, sp, x):
    """Copy ``x`` (any layout) onto ``stack`` at ``sp``; returns the (maybe grown) stack."""
    n = x.size
    if sp + n > stack.shape[0]:
        m = stack.shape[0] * 2
        while m < sp + n:
            m *= 2
        new = np.empty(m, stack.dtype)
        for i in range(sp):
            new[i] = stack[i]
        stack = new
    k = sp
    for v in x.flat:
        stack[k] = v
        k += 1
    return stack


@on_disk
def shadow_like(old, x):
    """The shadow buffer of an array created in a loop: the previous one while the
    shape stays the same (shadows stay zero in the primal), else a new one (the
    allocation recorded the previous shape for the reverse pass)."""
    if old.shape == x.shape:
        return old
    return np.zeros(x.shape, x.dtype)


@on_disk
def zeros_as(x):
    """A zero array of ``x``'s shape and dtype: a shadow, where the back end calls a helper
    for it (``Backend.zeros_as``: on cpu one whose machine code is kept on disk, instead of
    numba's ``np.zeros`` compiled anew in every process)."""
    return np.zeros(x.shape, x.dtype)


def reduce_like(e, t):
    """``e`` summed over the axes it broadcasts over ``t``: what ``_zyg_acc_*(t, e)`` adds
    into ``t`` (its pure form, used when zyg differentiates generated code again)."""
    out = np.zeros(t.shape, t.dtype)
    if e.ndim == out.ndim and e.shape == out.shape:
        out += e
        return out
    if out.ndim == 0:
        out += np.sum(e)
        return out
    # each element of e adds into the element of out it broadcasts from (written with
    # scalar index arithmetic, which numba types for any pair of dimensions)
    lead = e.ndim - out.ndim
    flat_e = np.ascontiguousarray(e).reshape(-1)
    flat_out = out.reshape(-1)
    for k in range(flat_e.size):
        rem = k
        off = 0
        stride = 1
        for ax in range(e.ndim - 1, -1, -1):
            i = rem % e.shape[ax]
            rem //= e.shape[ax]
            if ax >= lead:
                n = out.shape[ax - lead]
                if n != 1:
                    off += i * stride
                stride *= n
        flat_out[off] += flat_e[k]
    return out


def helpers_py():
    return {"_zyg_push_array": push_array, "_zyg_shadow_like": shadow_like}


# generated code transformed again: the front end lowers _zyg_acc(t, e) with reduce_like
hooks.PRIMS["reduce_like"] = reduce_like
