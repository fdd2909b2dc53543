"""zyg's exceptions.  Every error a user can cause points at the user's source.

All exceptions derive from :class:`ZygError`.  Those that concern a place in the
user's code carry ``filename``, ``lineno`` and ``col`` attributes and print them
the way Python prints a ``SyntaxError``: file, line, the source line, a caret,
then a hint saying how to proceed.
"""
from __future__ import annotations

import linecache
import pickle
from typing import Optional


class ZygError(Exception):
    """Base class of every exception zyg raises."""


class NotPicklable(ZygError, pickle.PicklingError):
    """A zyg object that cannot be pickled (``zyg.pullback``'s ``back``), or a function
    whose pickle-by-value needs something that cannot be captured (docs/tasks.md)."""

    def __init__(self, msg: str, hint: Optional[str] = None):
        self.msg = msg
        self.hint = hint
        super().__init__(msg + (f"\nhint: {hint}" if hint else ""))


class SourceError(ZygError):
    """An error tied to a location in the user's source code."""

    kind = "error"

    def __init__(self, msg: str, filename: Optional[str] = None,
                 lineno: Optional[int] = None, col: Optional[int] = None,
                 hint: Optional[str] = None):
        self.msg = msg
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [self.msg]
        if self.filename is not None and self.lineno is not None:
            where = f'  File "{self.filename}", line {self.lineno}'
            if self.col is not None:
                where += f", column {self.col + 1}"
            parts.append(where)
            line = linecache.getline(self.filename, self.lineno)
            if line:
                stripped = line.rstrip("\n")
                indent = len(stripped) - len(stripped.lstrip())
                parts.append("    " + stripped.strip())
                if self.col is not None and self.col >= indent:
                    parts.append("    " + " " * (self.col - indent) + "^")
        if self.hint:
            parts.append("hint: " + self.hint)
        return "\n".join(parts)


class UnsupportedSyntax(SourceError):
    """The function uses a construct outside the subset zyg differentiates."""


class NoAdjoint(SourceError):
    """A differentiated call has no rule and its source cannot be transformed."""


class CompileError(SourceError):
    """The generated code failed to compile (numba typing or lowering error)."""


class TypeMismatch(SourceError):
    """Values of a type zyg cannot differentiate (a string argument, indexing a float)."""


class ShapeChanged(TypeMismatch):
    """An array made at one line of a differentiated loop changed shape between iterations
    (raised while the gradient runs, at the line that makes the array)."""


class AliasedArguments(TypeMismatch):
    """An argument array the function writes shares memory with another argument."""


class ModifiedAfterPullback(TypeMismatch):
    """``back`` was called after the caller changed an array the pullback reads."""
