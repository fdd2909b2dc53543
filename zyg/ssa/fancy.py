"""Advanced (numpy "fancy") indexing: an index part that is an int or bool array.

``x[idx]`` with an integer array ``idx`` gathers elements (with repeats), ``x[mask]``
with a boolean array selects them; both give a new array, never a view. This module
works out what such an index gives from the kinds alone, for the kind analysis, the
alias analysis and the pullbacks. numba supports one advanced index part per
subscript, combined with basic parts (slices, integers): zyg supports the same.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .analysis import array_ndim, is_array


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
    if kd[0] == "b":      # a mask consumes as many axes as it has, and gives one
        return nd - ints - ki + 1 + spec.count("n")
    return nd - ints - 1 + ki + spec.count("n")
