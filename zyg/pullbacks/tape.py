"""The tape: typed stacks that the primal pushes residuals and edge tags onto.

A stack is a numpy buffer plus a capacity and a top index, all local variables
of the generated function.  Blocks check capacity when they start and leave the
dispatch loop to grow the buffer, so the hot loop never reassigns it: a buffer
reassigned inside the loop measured 14x-30x the primal on the pow loop (numba's
reference counting), a typed list 16x.
Edge tags go on their own int8 stack: besides using an eighth of the memory,
two interleaved 8-byte streams measured 3x slower than one 8-byte and one
1-byte stream in the pow loop.  The adjoint reads with a private cursor, so the tape can be replayed (``back``
may be called several times).
"""
from __future__ import annotations

import numpy as np

from ..numerics import on_disk

STACKS = {"f": ("np.float64", "float"), "i": ("np.int64", "int"), "c": ("np.complex128", "complex"),
          "t": ("np.int8", "tag")}
KIND_STACK = {"float": "f", "int": "i", "bool": "i", "complex": "c", "tag": "t"}
INITIAL = 64


@on_disk
def grow(old, need):
    """A buffer holding ``old``'s contents, twice as large or ``need`` if that is more: a
    nest that reserved its room gets exactly that (doubling up to it could map nearly twice
    the tape), a block short of room doubles."""
    n = old.shape[0] * 2
    if n < need:
        n = need
    new = np.empty(n, old.dtype)
    # an explicit loop: numba's slice assignment drags in its shape-mismatch error
    # formatting, which costs ~2.5 s of compilation on the first call
    for i in range(old.shape[0]):
        new[i] = old[i]
    return new


@on_disk
def has_nan(a):
    """Whether the array ``a`` holds a nan: the test of a gradient computed without the
    zero-cotangent tests (``transform._nan_check``).  A loop, which stops at the first
    nan, instead of ``np.isnan(a).any()``, whose numba implementation compiles anew in
    every process (this one is kept on disk)."""
    for v in a.flat:
        if v != v:
            return True
    return False
