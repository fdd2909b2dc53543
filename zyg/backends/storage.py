"""The tape's storage on the python and cpu back ends (``Backend.storage``): how the typed
tape nodes of generated code (``zyg/ssa/emit.py``) are spelled with growable numpy stacks.
The stacks themselves -- their kinds, initial size and the helpers generated code calls to
grow them -- are the transforms' (``zyg/pullbacks/tape.py``); a fixed-size storage for
device code is ``backends/cuda.LocalStacks``.
"""
from __future__ import annotations

from typing import List, Optional

from ..pullbacks.tape import INITIAL, STACKS


class Stacks:
    """What every storage of the tape spells the same way: the dispatch of a node to its
    lowering, and the nodes about the top, the room and the reservations of a stack, which
    are plain integer locals on every target.  :class:`NumpyStacks` (python, cpu) and
    ``backends/cuda.LocalStacks`` (device code) add the nodes that touch the buffers."""

    def lower(self, node) -> List[str]:
        """The statements (one indentation level) that ``node`` is on this storage."""
        return getattr(self, "_" + type(node).__name__)(node)

    def _SetTop(self, n) -> List[str]:
        return [f"_{n.stack}sp = {n.value}"]

    def _RoomCheck(self, n) -> List[str]:
        s = n.stack
        more = f" or _{s}want > _{s}cap" if n.want else ""
        return [f"if {n.need} > _{s}cap{more}:"]

    def _NoRoom(self, n) -> List[str]:
        return ["if " + " or ".join(f"_{s}sp + {c} > _{s}cap" for s, c in n.needs) + ":"]

    def _Want(self, n) -> List[str]:
        return [f"_{n.stack}want = {n.value}"]

    def _Reserve(self, n) -> List[str]:
        if n.start:
            return [f"_{n.stack}end = _{n.stack}sp + {n.amount}"]
        return [f"_{n.stack}end += {n.amount}"]


class NumpyStacks(Stacks):
    """The tape's storage on the python and cpu back ends: per stack a growable numpy
    buffer ``_<s>s``, its capacity ``_<s>cap``, its top ``_<s>sp`` and the room a counted
    loop asked for ``_<s>want``, all local variables of the generated function.  Buffers
    grow (``_zyg_grow``, bound by the emitter to the back end's :func:`grow`) when a block's
    room check fails, outside the hot loop.

    ``unsigned``: subscripts are cast to ``np.uint64`` (compiled code then leaves out the
    negative-index wraparound, a compare and a select on every push and pop; the top is
    never negative).  Measured on GMM: the gradient 9% faster."""

    def __init__(self, unsigned: bool):
        self.unsigned = unsigned

    def index(self, e: str) -> str:
        return f"np.uint64({e})" if self.unsigned else e

    def slot(self, s: str, offset: Optional[int]) -> str:
        return f"_{s}s[{self.index(f'_{s}sp' if offset is None else f'_{s}sp + {offset}')}]"

    def _StackInit(self, n) -> List[str]:
        s = n.stack
        if n.continued:
            return [f"_{s}cap = _{s}s.shape[0]", f"_{s}want = 0"]
        if n.pooled:
            # _<s>cap0: the size passed in (a fused gradient hands back a buffer that grew
            # past it) (the growth test compares with it)
            head = [f"_{s}s = _{s}0", f"_{s}cap = _{s}0.shape[0]", f"_{s}cap0 = _{s}cap"]
        else:
            head = [f"_{s}s = np.empty({INITIAL}, {STACKS[s][0]})", f"_{s}cap = {INITIAL}"]
        return head + [f"_{s}sp = 0", f"_{s}want = 0"]

    def _Store(self, n) -> List[str]:
        return [f"{self.slot(n.stack, n.offset)} = {n.value}"]

    def _Advance(self, n) -> List[str]:
        return [f"_{n.stack}sp += {n.count}"]

    def _Pop(self, n) -> List[str]:
        return [f"_{n.stack}sp -= {n.count}"]

    def _Peek(self, n) -> List[str]:
        return [f"{n.name} = {self.slot(n.stack, n.offset)}"]

    def _PushArray(self, n) -> List[str]:
        s = n.stack
        return [f"_{s}s = _zyg_push_array(_{s}s, _{s}sp, {n.value})"]

    def _PopArray(self, n) -> List[str]:
        s, nd = n.stack, n.ndim
        view = f"_{s}s[_{s}sp:_{s}sp + _sz]"
        if nd > 1:
            view += ".reshape((" + "".join(f"_is[_isp + {k}], " for k in range(nd)) + "))"
        if n.dtype == "bool":
            view = f"({view} != 0)"
        elif n.dtype not in ("float64", "int64", "complex128"):
            view = f"{view}.astype(np.{n.dtype})"
        return [f"_isp -= {nd}",
                "_sz = " + " * ".join(f"_is[_isp + {k}]" for k in range(nd)),
                f"_{s}sp -= _sz",
                f"{n.name} = {view}"]

    def _Grow(self, n) -> List[str]:
        return [f"_{n.stack}s = _zyg_grow(_{n.stack}s, {n.size})"]

    def _Capacity(self, n) -> List[str]:
        return [f"_{n.stack}cap = _{n.stack}s.shape[0]"]

    def _TapeOverflow(self, n) -> List[str]:
        # growable: never short of room (only fixed-size storages emit this node)
        return ["if " + " or ".join(f"_{s}sp > _{s}cap" for s in n.stacks) + ":"]

    def _NestedTape(self, n) -> List[str]:
        # np.int64: numba's own SSA pipeline (build._with_numba_ssa) types a top that is
        # still 0 as a literal, and a pair compiled for a literal top re-entered itself
        passed = [x for s in n.stacks for x in (f"_{s}s", f"np.int64(_{s}sp)")]
        out = [f"{n.out} = {n.fn}({', '.join(list(n.args) + passed)})"]
        k = n.nres
        for s in n.stacks:
            if n.adjoint:
                out.append(f"_{s}sp = {n.out}[{k}]")
                k += 1
                continue
            out += [f"_{s}s = {n.out}[{k}]", f"_{s}cap = _{s}s.shape[0]"]
            if not n.keep_tops:
                out.append(f"_{s}sp = {n.out}[{k + 1}]")
            k += 2
        return out
