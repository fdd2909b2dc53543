"""``x is None`` and ``x is not None`` in differentiated code.

An argument passed as ``None`` (an optional argument left at its default) is bound to
the constant ``None`` when the function is specialised (``zyg/api.py`` treats it like a
function argument: one specialisation per pattern of ``None`` arguments), so the test
folds to a constant and the branch it guards disappears.  A run-time value (a number,
an array) is never ``None``: the test becomes a call of a non-differentiable helper
that numba and Python both evaluate (to False for ``is None``).
"""
from __future__ import annotations

import operator

import gast

from . import hooks
from .ir import Const, Operand


def is_none(x):
    """``x is None`` (generated code calls it for run-time values)."""
    return x is None


def is_not_none(x):
    """``x is not None`` (generated code calls it for run-time values)."""
    return x is not None


def _declare():
    hooks.generated_nondifferentiable(is_none)
    hooks.generated_nondifferentiable(is_not_none)


_declare()


def lower_is(low, node, hint: str = "") -> Operand:
    """Lower ``a is b`` / ``a is not b`` where one side is ``None``."""
    negate = isinstance(node.ops[0], gast.IsNot)
    for a, b in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
        if isinstance(b, gast.Constant) and b.value is None:
            flag = low.none_flag(a)
            if flag is not None:
                # best = None ... best is None: the local's flag (Lowerer.write)
                if isinstance(flag, Const):
                    return Const(bool(flag.value) != negate)
                return low.emit(operator.not_, [flag], node, hint) if negate else flag
    left = low.expr(node.left)
    right = low.expr(node.comparators[0])
    if isinstance(right, Const) and right.value is None:
        other = left
    elif isinstance(left, Const) and left.value is None:
        other = right
    else:
        raise low.unsupported(node, "'is' and 'is not' are only supported against None "
                                    "in differentiated code",
                              "compare values with == and !=")
    if isinstance(other, Const):
        return Const((other.value is None) != negate)
    return low.emit(is_not_none if negate else is_none, [other], node, hint)
