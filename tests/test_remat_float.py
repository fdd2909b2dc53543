"""Float arithmetic recomputed in the adjoint instead of taped (``ArrayMixin.remat``).

A value the adjoint needs that is ``+ - * /`` or unary ``-`` of values the adjoint has
again (loop-invariant values, recomputed loop counters, other such values) is computed once
more there instead of pushed on the tape, up to ``REMAT_FLOAT_OPS`` float operations per
value.  The Bessel series' loop records one float per term (the carried term ``s``), as a
hand-written taped adjoint does, instead of three (``-x``, ``s`` and the ratio
``-x * x / (k * (k + nu))``).  Gradients are checked against finite differences, forward
mode (jvp against grad . v) and second order (hvp against differences of the gradient), on
both targets.
"""
from __future__ import annotations

import math

import pytest

import zyg
from zyg import backends
from zyg.build import Fused
from zyg.pullbacks import arrays as parrays
from zyg.pullbacks.transform import plan
from zyg.ssa.build import ssa_of
from zyg.ssa.emit import Store

TARGETS = ("python", "cpu")


from test_cuda_sim import bessel_j as bessel       # noqa: E402  (J_nu by its power series)


def long_chain(x, n):
    """A loop-invariant factor of 9 float operations: more than REMAT_FLOAT_OPS, taped."""
    s = 1.0
    for i in range(n):
        c = ((((x * x + 1.0) * x - 2.0) * x + 3.0) * x - 1.0) * x / (1.0 + x * x)
        s = s * 0.5 + c * math.sin(s)
    return s


def counter_floats(x, h, n):
    """Floats made of the loop counter and invariants (t = (i + 1) * h), and a product of
    two such values used twice."""
    s = x
    for i in range(n):
        t = (i + 1) * h
        w = t * x - h / (t + 1.0)
        s = s * w + math.cos(s) * w * t
    return s


def carried(x, y):
    """Arithmetic on the carried value: recomputing it would need the tape anyway."""
    s = x
    k = 0
    while s < 50.0 and k < 30:
        u = s * y + 1.0
        s = u * u * 0.25 + x
        k += 1
    return s


def _stored(f, kinds, wrt):
    """The names the fused gradient's tape stores (typed Store nodes)."""
    p = plan(ssa_of(f), kinds, wrt, backends.get("python"))
    prog = Fused(value=True, zero_guards=True).emit(p, f.__name__ + "_vg")
    return {n.value for _, n in prog.code.body if isinstance(n, Store)}


def test_bessel_records_only_the_carried_term():
    stored = _stored(bessel, ["float", "int"], [0])
    assert len(stored) == 1, stored
    keep = parrays.REMAT_FLOAT_OPS
    parrays.REMAT_FLOAT_OPS = 0
    try:
        before = _stored(bessel, ["float", "int"], [0])
    finally:
        parrays.REMAT_FLOAT_OPS = keep
    assert len(before) == 3 and stored < before, (before, stored)


def test_long_chains_stay_on_the_tape():
    # c (9 float operations of x) is taped, not repeated in the adjoint
    assert any(name.startswith("c_") for name in _stored(long_chain, ["float", "int"], [0]))


CASES = [
    (bessel, (3.7, 2), [0]),
    (bessel, (11.0, 3), [0]),
    (long_chain, (0.4, 7), [0]),
    (counter_floats, (0.3, 0.2, 6), [0, 1]),
    (carried, (0.5, 1.3), [0, 1]),
]


def _fd(f, args, i, h=1e-6):
    up, dn = list(args), list(args)
    up[i] += h
    dn[i] -= h
    return (f(*up) - f(*dn)) / (2 * h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,args,wrt", CASES, ids=[c[0].__name__ + str(c[1]) for c in CASES])
def test_gradients_forward_and_second_order(f, args, wrt, target):
    g = zyg.grad(f, argnums=tuple(wrt), target=target)(*args)
    scale = 1.0 + max(abs(v) for v in g)
    for i, gi in zip(wrt, g):
        assert abs(gi - _fd(f, args, i)) <= 1e-6 * scale, (i, gi, _fd(f, args, i))
    # forward against reverse: jvp with v against grad . v
    v = [0.0] * len(args)
    for k, i in enumerate(wrt):
        v[i] = 0.7 - 0.4 * k
    tangents = tuple(v[i] if i in wrt else None for i in range(len(args)))
    _, t = zyg.jvp(f, args, tangents, target=target)
    gv = sum(g[k] * v[i] for k, i in enumerate(wrt))
    assert abs(t - gv) <= 1e-12 * (1.0 + abs(gv)), (t, gv)
    # second order through the recomputed values: d2f/dx0^2 against differences of grad
    i0 = wrt[0]
    h = 1e-5

    def gi(xi):
        a = list(args)
        a[i0] = xi
        return zyg.grad(f, argnums=i0, target=target)(*a)
    fd2 = (gi(args[i0] + h) - gi(args[i0] - h)) / (2 * h)
    assert i0 == 0
    dd = zyg.hvp(f, args[0], 1.0, *args[1:], target=target)    # forward over reverse
    assert abs(dd - fd2) <= 1e-5 * (1.0 + abs(fd2)), (dd, fd2)


# -- dispatch cases of a two-block loop's body ---------------------------------------------

def _cases(f, kinds, backend):
    """The ids of the dispatch cases of the fused gradient's primal and adjoint, and the
    bodies of its two-block loops."""
    from zyg.pullbacks.transform import Emitter
    from zyg.ssa.emit import Code, Elif, If
    p = plan(ssa_of(f), kinds, [0], backends.get(backend))
    em = Emitter(p)
    adj, body = Code(), Code()
    em.adjoint(adj, 1)
    em.stack_init(body, 1, pooled=True)
    em.primal(body, 1, record=True)

    def ids(code):
        return {int(n.cond.split("==")[1]) for _, n in code.body
                if isinstance(n, (If, Elif)) and n.cond.startswith("_blk == ") and " or " not in n.cond}
    return ids(body), ids(adj), set(em.simple_loops.values())


def test_a_loop_body_has_no_adjoint_case():
    # the body of the while loop runs inside its header's case: the adjoint never enters
    # it from the dispatcher; the recording primal does, to restart it after a stack grew
    primal, adjoint, bodies = _cases(bessel, ["float", "int"], "python")
    assert bodies and not (bodies & adjoint), (bodies, adjoint)
    assert bodies <= primal
    for target in TARGETS:
        for z in (0.3, 3.7, 11.0):     # (past ~15 the series cancels: differences fail)
            g = zyg.grad(bessel, target=target)(z, 2)
            assert abs(g - _fd(bessel, (z, 2), 0)) <= 1e-6 * (1 + abs(g))
