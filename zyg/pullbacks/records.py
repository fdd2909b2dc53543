"""The records of one run: the pullbacks of the recursive calls a primal made.

Each run of a primal owns its :class:`Records` (``zyg/safety.py`` makes one per gradient
call and per ``pullback`` call, and hands it to ``back``), found through the context
variable :data:`CURRENT`: the compiled code cannot carry a Python object, and a context
variable is per thread, so pullbacks called out of order, twice, after an exception or
from several threads each see their own records (``recursion.py`` fills them).
"""
from __future__ import annotations

import contextvars
import threading
from typing import Any, List, Optional

from ..errors import TypeMismatch


class Records:
    """The pullbacks of the recursive calls made by one run of a primal, in call order.

    ``take`` hands them out newest first; ``rewound`` starts over, so that a ``back``
    that may be called again (a function that writes no array) replays them.  ``pending``
    holds the cotangents the newest pullback returned, read one operand at a time by
    array operands (:class:`_Take`, :class:`_RecomputeTake`).  A record that is not owned
    by a ``back`` (``keep=False``) forgets each pullback once used.
    """

    __slots__ = ("backs", "pos", "pending", "keep")

    def __init__(self, keep: bool = True):
        self.backs: List[Any] = []
        self.pos = 0
        self.pending: List[Any] = []
        self.keep = keep

    def push(self, back: Any) -> None:
        self.backs.append(back)
        self.pos = len(self.backs)

    def take(self) -> Any:
        if self.pos == 0:
            raise TypeMismatch("internal error: the adjoint asked for the pullback of a recursive "
                               "call that its primal did not make")
        self.pos -= 1
        if self.keep:
            return self.backs[self.pos]
        return self.backs.pop()

    def rewound(self) -> "Records":
        self.pos = len(self.backs)
        return self


CURRENT: "contextvars.ContextVar[Optional[Records]]" = contextvars.ContextVar(
    "zyg_recursion_records", default=None)
_THREAD = threading.local()


def current() -> Records:
    """The record of the primal or adjoint now running in this thread.  Generated code run
    outside the API (forward over reverse) gets a per-thread record used as a stack."""
    r = CURRENT.get()
    if r is None:
        r = getattr(_THREAD, "records", None)
        if r is None:
            r = _THREAD.records = Records(keep=False)
    return r
