"""``t += e`` where ``e`` broadcasts over ``t``: what generated adjoints call to add a
cotangent into the shadow of an operand that was broadcast (``_zyg_acc_<nt>_<ne>``, bound
by ``rules/arrays.base_helpers``), for ``t`` of ``nt`` and ``e`` of ``ne`` dimensions.

Each element of ``e`` adds into the element of ``t`` it broadcast from: an axis of length 1
in ``t`` takes index 0, the leading axes of ``e`` that ``t`` lacks are summed over.  Written
with scalar index arithmetic, which numba types for any pair of dimensions.  They are
marked ``on_disk``: on cpu their machine code is kept in the cache directory
(``backends/cpu.helper_cache``), so a new function's first call loads them.
"""
from __future__ import annotations

from ..numerics import on_disk


@on_disk
def acc_1_1(t, e):
    if t.shape == e.shape:
        t += e
        return
    for i0 in range(e.shape[0]):
        t[(i0 if t.shape[0] != 1 else 0)] += e[i0]


@on_disk
def acc_1_2(t, e):
    for i0 in range(e.shape[0]):
        for i1 in range(e.shape[1]):
            t[(i1 if t.shape[0] != 1 else 0)] += e[i0, i1]


@on_disk
def acc_1_3(t, e):
    for i0 in range(e.shape[0]):
        for i1 in range(e.shape[1]):
            for i2 in range(e.shape[2]):
                t[(i2 if t.shape[0] != 1 else 0)] += e[i0, i1, i2]


@on_disk
def acc_2_2(t, e):
    if t.shape == e.shape:
        t += e
        return
    for i0 in range(e.shape[0]):
        for i1 in range(e.shape[1]):
            t[(i0 if t.shape[0] != 1 else 0), (i1 if t.shape[1] != 1 else 0)] += e[i0, i1]


@on_disk
def acc_2_3(t, e):
    for i0 in range(e.shape[0]):
        for i1 in range(e.shape[1]):
            for i2 in range(e.shape[2]):
                t[(i1 if t.shape[0] != 1 else 0), (i2 if t.shape[1] != 1 else 0)] += e[i0, i1, i2]


@on_disk
def acc_3_3(t, e):
    if t.shape == e.shape:
        t += e
        return
    for i0 in range(e.shape[0]):
        for i1 in range(e.shape[1]):
            for i2 in range(e.shape[2]):
                t[(i0 if t.shape[0] != 1 else 0), (i1 if t.shape[1] != 1 else 0), (i2 if t.shape[2] != 1 else 0)] += e[i0, i1, i2]


#: (dimensions of t, dimensions of e) -> the function
ACC = {(1, 1): acc_1_1, (1, 2): acc_1_2, (1, 3): acc_1_3,
       (2, 2): acc_2_2, (2, 3): acc_2_3, (3, 3): acc_3_3}
