"""The zero-cotangent test of adjoints that zyg differentiates again.

An adjoint skips a statement's contributions when its cotangent is exactly zero
(``if dy != 0:``, docs/numerics.md), so that ``0 * inf`` never turns a gradient into nan.
Forward mode over that adjoint (``zyg.hessian``, ``zyg.hvp``, ``grad(grad(f))``, a
``zyg.grad`` call inside differentiated code) must not decide the test on the value
alone: where ``dy`` is 0 but its tangent is not, the skipped contributions
``dx += e(dy, x)`` (linear in ``dy``) have the tangent ``e(t_dy, x)``, which is dropped
when the branch is not taken (``f(x) = (x / 2) ** 2`` gave ``f''(0) = 0``, not 0.5).

So the gradient source that is lowered again writes the test as ``nonzero(dy)``, a
function the front end keeps as a call (it is declared non-differentiable), and the
forward transform writes the test of a statement with an active ``dy`` as
``nonzero(dy, t_dy)`` (one call, not ``or``: no new blocks in
the code lowered again): the contributions are skipped only where both the
value and the tangent of the cotangent are zero, which still keeps ``0 * inf`` out
wherever a value reaches neither the output nor its derivative.  (Where only ``t_dy``
is nonzero and a partial is infinite, the second derivative is infinite too, and the
result is inf or nan, not a finite wrong number.)  The test stays a call of ``nonzero`` in
the forward code, so a third derivative treats it the same way (``nonzero(d, t, t2, tt2)``).
"""
from __future__ import annotations

from ..ssa import hooks


def nonzero(d0, d1=0.0, d2=0.0, d3=0.0, d4=0.0, d5=0.0, d6=0.0, d7=0.0):
    """Whether any of its arguments is nonzero: ``nonzero(dy)`` is the zero-cotangent test
    of an adjoint that is differentiated again, ``nonzero(dy, t_dy)`` its forward mode (a
    fourth derivative passes 8).  Named parameters, not ``*ds``: numba cannot iterate a
    tuple of a float32 and a float64."""
    return (d0 != 0 or d1 != 0 or d2 != 0 or d3 != 0 or d4 != 0 or d5 != 0 or d6 != 0
            or d7 != 0)


hooks.generated_nondifferentiable(nonzero)


def times_nz(t, p):
    """``t * p``, exactly zero where the tangent ``t`` or the partial derivative ``p`` is
    zero (even where the other is inf or nan): a term of a tangent in forward mode with
    zero tests (``Forward.zero_guards``), the dual of the adjoint's ``if dy != 0:``.  A
    value that no tangent reaches, or that reaches the result only through a zero partial
    (``0.0 * math.sqrt(y)`` at ``y = 0``, ``w * math.sqrt(y)`` at ``w = 0``), adds nothing,
    as its zero cotangent does in reverse mode."""
    return t * p if t != 0 and p != 0 else 0.0
