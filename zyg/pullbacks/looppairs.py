"""Loops as compiled pairs: what ``checkpointed_range`` loops (``ckloop.py``) and ``prange``
loops (``zyg/tasks/prange.py``) share when a gradient calls them from its own compiled code
(``NativeMixin.native_loop`` in ``native.py``), as it calls a recursive function's pair.

A loop ``z = Loop(T, t0, s, *carried, *read)`` is followed, in the lowering's shape, by one
read-out per carried value; a carried array the body only writes into is also written
back (``carried[:] = part``).  Its pair, compiled per operand kinds and per which carried
arrays are written back (*in place*):

* ``rp(T, t0, s, *carried, *read, _lim, <stacks>) -> (z, <stacks>)`` pushes the contents of
  the in-place arrays onto the caller's float stack, runs the loop (in place for those),
  and returns the other carried values (*values*) packed into one float64 vector ``z``;
* ``ra(T, t0, s, *carried, *read, *shadows, *dvalues, _lim, <stacks>) -> (*cotangents of
  the float numbers, <tops>)`` restores the in-place arrays and adds the cotangents of the
  float array operands into ``shadows`` (an in-place array's shadow holds, on entry, the
  cotangent of its contents after the loop and, on exit, that of its contents before);
  ``dvalues`` are the cotangents of the values' final values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, List

from ..ssa.analysis import array_dtype, array_ndim, differentiable, is_array
from .native import STACKS

_FLOATS = ("float64", "float32")


@dataclass
class LoopPair:
    """A loop compiled as a pair (see the module's text): ``rp`` and ``ra``, the operand
    positions of the differentiable numbers (``scalar_diff``: their cotangents are ``ra``'s
    results) and arrays (``array_diff``: their shadows are ``ra``'s arguments), and the
    carried positions of the values (``values``, in the order ``z`` packs them and ``ra``
    takes their cotangents)."""
    rp: Any
    ra: Any
    scalar_diff: List[int]
    array_diff: List[int]
    values: List[int]
    fwd: Any = None         # the loops themselves (for tests and benchmarks)
    bwd: Any = None
    source: str = ""
    extra: dict = field(default_factory=dict)


def positions(kinds: List[str]):
    """(scalar_diff, array_diff): operand positions (``T, t0, s`` first) of the
    differentiable numbers and arrays among the loop's operands of kinds ``kinds``."""
    opk = ["int", "int", "int"] + list(kinds)
    scalar = [q for q in range(3, len(opk)) if differentiable(opk[q]) and not is_array(opk[q])]
    arrays = [q for q in range(3, len(opk)) if differentiable(opk[q]) and is_array(opk[q])]
    return scalar, arrays


def stack_of(k: str) -> str:
    """The stack an array of kind ``k`` is saved on: floats on the float stack, integers
    and booleans on the int stack (exactly)."""
    return "f" if array_dtype(k) in _FLOATS else "i"


def copy_loops(lines: List[str], k: str, arr: str, buf: str, top: str, save: bool,
               loop: str) -> None:
    """One pass copying array ``arr``'s elements (C order) to ``buf[top:]`` (``save``) or
    back, for any layout, over the first axis with ``loop`` (``_pl_prange`` or ``range``)."""
    nd = array_ndim(k)
    idx = [f"_j{d}" for d in range(nd)]
    lines.append(f"    if {arr}.size > 0:")
    ind = "        "
    flat = top
    for d in range(nd):
        lines.append(f"{ind}for _j{d} in {loop if d == 0 else 'range'}({arr}.shape[{d}]):")
        ind += "    "
    for d in range(nd):
        stride = " * ".join(f"{arr}.shape[{e}]" for e in range(d + 1, nd)) or "1"
        flat += f" + _j{d} * {stride}"
    el = f"{arr}[{', '.join(idx)}]"
    if save:
        lines.append(f"{ind}{buf}[{flat}] = {el}")
    elif array_dtype(k) == "bool":
        lines.append(f"{ind}{el} = {buf}[{flat}] != 0")
    else:
        lines.append(f"{ind}{el} = {buf}[{flat}]")


def save_arrays(lines: List[str], kinds: List[str], names: List[str], loop: str) -> None:
    """``rp``'s pushes: the arrays ``names`` (of ``kinds``) onto their stacks, growing them."""
    for k, a in zip(kinds, names):
        s = stack_of(k)
        lines.append(f"    if _{s}sp + {a}.size > _{s}s.shape[0]:")
        lines.append(f"        _{s}s = _pl_grow(_{s}s, _{s}sp + {a}.size)")
        copy_loops(lines, k, a, f"_{s}s", f"_{s}sp", True, loop)
        lines.append(f"    _{s}sp += {a}.size")


def restore_arrays(lines: List[str], kinds: List[str], names: List[str], loop: str) -> None:
    """``ra``'s pops: the arrays back from their stacks, in the reverse order."""
    for k, a in reversed(list(zip(kinds, names))):
        s = stack_of(k)
        lines.append(f"    _{s}sp -= {a}.size")
        copy_loops(lines, k, a, f"_{s}s", f"_{s}sp", False, loop)


def stack_params() -> List[str]:
    return [x for s in STACKS for x in (f"_{s}s", f"_{s}sp")]


def tops() -> List[str]:
    return [f"_{s}sp" for s in STACKS]


_DTYPES = ("float64", "float32", "int64", "int32", "int16", "int8", "uint8", "bool")


def operands_ok(kinds: List[str]) -> bool:
    """Can a pair take operands of these kinds?  Numbers (not complex) and arrays of
    numbers with at least one dimension (the copy loops' shapes); anything else keeps the
    run-time path, which refuses or handles it."""
    for k in kinds:
        if is_array(k):
            if array_dtype(k) not in _DTYPES or array_ndim(k) == 0:
                return False
        elif k not in ("float", "int", "bool"):
            return False
    return True


_HEADER = re.compile(r"^(def|for|if|elif|else|while)\b(.*):\s*$")


def typed_code(src: str):
    """The generated module text ``src`` (functions written as text by the loop builders) as
    a code tree of typed nodes: block headers become ``Def``/``For``/``If``/``Elif``/
    ``Else``/``While`` nodes, every other line a ``Line`` at its depth."""
    from ..ssa.emit import Code, Def, Elif, Else, For, If, While
    code = Code()
    for raw in src.splitlines():
        text = raw.strip()
        if not text:
            code.add(0, "")
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 4
        m = _HEADER.match(text)
        if m is None:
            code.add(depth, text)
            continue
        kw, rest = m.group(1), m.group(2).strip()
        if kw == "def":
            name, params = re.match(r"^(\w+)\((.*)\)$", rest).groups()
            node = Def(name, tuple(p.strip() for p in params.split(",") if p.strip()))
        elif kw == "for":
            var, it = re.match(r"^(.+?)\s+in\s+(.+)$", rest).groups()
            node = For(var, it)
        elif kw == "else":
            node = Else()
        else:
            node = {"if": If, "elif": Elif, "while": While}[kw](rest)
        code.put(depth, node)
    return code
