"""The tape: typed stacks that the primal pushes residuals and edge tags onto.

A stack is a holder list with one growable numpy buffer, plus a capacity and a
top index kept in local variables of the generated function.  Only the rare
grow path reassigns the buffer (through the holder), which keeps numba's hot
loop free of reference-count traffic: measured 2.3x the primal on the pow loop,
against 14x-30x for a buffer reassigned in the loop and 16x for a typed list.
Edge tags go on their own int8 stack: besides using an eighth of the memory,
two interleaved 8-byte streams measured 3x slower than one 8-byte and one
1-byte stream in the pow loop.  The adjoint reads with a private cursor, so the tape can be replayed (``back``
may be called several times).
"""
from __future__ import annotations

import numpy as np

STACKS = {"f": ("np.float64", "float"), "i": ("np.int64", "int"), "c": ("np.complex128", "complex"),
          "t": ("np.int8", "tag")}
KIND_STACK = {"float": "f", "int": "i", "bool": "i", "complex": "c", "tag": "t"}
INITIAL = 64


def grow(holder, need):
    """Replace ``holder[0]`` by a buffer at least twice as large keeping its contents."""
    old = holder[0]
    n = old.shape[0] * 2
    while n < need:
        n *= 2
    new = np.empty(n, old.dtype)
    new[:old.shape[0]] = old
    holder[0] = new


_njit_grow = None


def grow_for(target: str):
    global _njit_grow
    if target == "python":
        return grow
    if _njit_grow is None:
        import numba
        _njit_grow = numba.njit(grow)
    return _njit_grow
