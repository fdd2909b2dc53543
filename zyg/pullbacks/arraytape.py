"""Helpers of the generated code for arrays: copying an array onto a stack and
keeping one shadow buffer per array created in a loop.

An array residual is stored flattened on the stack of its element kind, its
shape on the int stack; popping gives a view of the stack (the adjoint never
pushes, so the view stays valid).
"""
from __future__ import annotations

import numpy as np



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


def shadow_like(old, x):
    """The shadow buffer of an array created in a loop: the previous one while the
    shape stays the same (shadows stay zero in the primal), else a new one."""
    if old.shape == x.shape:
        return old
    if old.size != 0:
        raise ValueError("zyg: an array created inside a loop changed shape between iterations; "
                         "differentiated loops need arrays of one shape per creation site")
    return np.zeros(x.shape, x.dtype)


def helpers_py():
    return {"_zyg_push_array": push_array, "_zyg_shadow_like": shadow_like}
