"""Generated code lowered again (nested derivatives): dispatch-loop threading and the IR
clean-up passes that keep third-order code small enough for numba to compile.

zyg's generated code runs its CFG in a dispatch loop (``while _blk >= 0: if _blk == k:
... _blk = next``).  Lowering that naively gives every value live in the loop a
parameter at the loop header, and each derivative order multiplied the code: the third
derivative of a 10-line function took numba more than 20 minutes.  The lowerer threads
the dispatch (a case ending in ``_blk = c`` jumps straight to case ``c``), and the passes
remove what threading leaves behind.
"""
import math
import operator
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

import zyg
from zyg import api
from zyg.ssa.ir import Block, Branch, Call, Const, Function, Jump, Return, Stmt, Var
from zyg.ssa.lower import lower
from zyg.ssa.passes import fold_int_compares, remove_redundant_params, run_pipeline, verify

from conftest import assert_grad_matches, close
from test_higher import loop_branch
from test_property import load, points, programs, reliable_fd

TARGETS = ("python", "cpu")


def machine(x, n):
    """A hand-written state machine in the shape of zyg's generated code."""
    _blk = 0
    i = 0
    s = 0.0
    while _blk >= 0:
        if _blk == 0:
            if i < n:
                _blk = 1
            else:
                _blk = 2
        elif _blk == 1:
            s = s * 0.5 + math.sin(x * i)
            i = i + 1
            if s > 0.3:
                _blk = 3
            else:
                _blk = 0
        elif _blk == 3:
            s = s - 0.1 * x
            _blk = 0
        elif _blk == 2:
            _ret = s * x
            _blk = -1
    return _ret


def machine_dynamic(x, n):
    """Transitions the threading cannot resolve: a computed state, an assignment that is
    not last, an unknown state (falls back to the header), ``break`` and ``continue``."""
    _blk = 0
    i = 0
    s = x
    while _blk >= 0:
        if _blk == 0:
            nxt = 1 if i < n else 2
            _blk = nxt
        elif _blk == 1:
            _blk = 0
            i += 1
            s = s * math.cos(s) + x
            if s > 5.0:
                break
            if i == 2:
                _blk = 7          # no case 7: back to the header, then case 0 is not taken
                _blk = 0
                continue
        elif _blk == 2:
            _blk = -3
    return s


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x", [0.3, 0.9, -0.6])
def test_dispatch_loops_differentiate(target, x):
    assert_grad_matches(machine, (x, 5), 0, targets=(target,))
    assert_grad_matches(machine_dynamic, (x, 4), 0, targets=(target,))


def _calls(fn, op):
    return [st for b in fn.iter_blocks() for st in b.stmts if st.expr.fn is op]


def test_dispatch_loop_is_threaded():
    fn = run_pipeline(lower(machine))
    # every transition is known: no test of the state survives, and no block carries it
    assert _calls(fn, operator.eq) == []
    assert not any(p.hint == "_blk" for b in fn.iter_blocks() for p in b.params)
    # the state machine's own CFG: entry, the loop test, case 1 with its branch, case 3, exit
    assert len(fn.order) <= 6, str(fn)


def test_dynamic_dispatch_keeps_its_tests():
    fn = run_pipeline(lower(machine_dynamic))
    assert _calls(fn, operator.eq), "the computed state still needs the test chain"


def _sizes(fn):
    return len(fn.order), sum(len(fn.blocks[b].params) for b in fn.order)


def test_second_order_source_lowers_to_the_size_of_the_first():
    """The forward mode of the gradient's source, lowered again (what a third derivative
    transforms), is about the size of the gradient's source lowered (35 blocks and 57
    block parameters): 204 blocks and 4570 block parameters before threading, 48 and 65
    after."""
    d1 = zyg.grad(loop_branch, target="python")
    d2 = zyg.grad(d1, target="python")
    b1, p1 = _sizes(api.ssa_of(api._derivative_source(d1, (0.4, 3))))
    b2, p2 = _sizes(api.ssa_of(api._derivative_source(d2, (0.4, 3))))
    assert b2 <= 1.5 * b1 and p2 <= 1.5 * p1, (b1, p1, b2, p2)


# -- the passes on hand-built IR --------------------------------------------------------------

def _cycle_ir():
    """entry(x): P(x);  P(p): c ? Q(p) : R(p);  Q(q): c ? P(q) : R(q);  R(r): c ? Q(r) : X(r);
    X(e): return e * 2.  p, q, r only pass x around, but each has two different operands."""
    x, c, p, q, r, e, y = (Var(i, h) for i, h in enumerate("xcpqrey", 1))
    blocks = {
        1: Block(1, [x], [Stmt(c, Call(operator.gt, [x, Const(0.0)]))], Jump(2, [x])),
        2: Block(2, [p], [], Branch(c, 3, [p], 4, [p])),
        3: Block(3, [q], [], Branch(c, 2, [q], 4, [q])),
        4: Block(4, [r], [], Branch(c, 3, [r], 5, [r])),
        5: Block(5, [e], [Stmt(y, Call(operator.mul, [e, Const(2.0)]))], Return(y)),
    }
    return Function("cycle", blocks, [1, 2, 3, 4, 5], "<test>", 1, ["x"]), x


def test_redundant_parameter_cycles_are_removed():
    fn, x = _cycle_ir()
    verify(fn)
    fn = remove_redundant_params(fn)
    verify(fn)
    assert all(not fn.blocks[b].params for b in (2, 3, 4, 5))
    assert fn.blocks[5].stmts[0].expr.args[0] is x


def test_dead_parameters_are_removed():
    x, c, p, q, z = (Var(i, h) for i, h in enumerate("xcpqz", 1))
    blocks = {
        1: Block(1, [x], [Stmt(c, Call(operator.gt, [x, Const(0.0)]))], Branch(c, 2, [], 3, [])),
        2: Block(2, [], [Stmt(z, Call(operator.neg, [x]))], Jump(4, [x, z])),
        3: Block(3, [], [], Jump(4, [Const(1.0), x])),
        4: Block(4, [p, q], [], Return(q)),     # p is never used
    }
    fn = remove_redundant_params(Function("dead", blocks, [1, 2, 3, 4], "<test>", 1, ["x"]))
    verify(fn)
    assert [v.id for v in fn.blocks[4].params] == [q.id]
    assert len(fn.blocks[2].term.args) == 1 and fn.blocks[2].term.args[0] is z


def test_int_compares_fold_and_decide_branches():
    x, c, y = Var(1, "x"), Var(2, "c"), Var(3, "y")
    blocks = {
        1: Block(1, [x], [Stmt(c, Call(operator.eq, [Const(3), Const(3)]))], Branch(c, 2, [], 3, [])),
        2: Block(2, [], [Stmt(y, Call(operator.mul, [x, Const(2.0)]))], Return(y)),
        3: Block(3, [], [], Return(x)),
    }
    fn = fold_int_compares(Function("fold", blocks, [1, 2, 3], "<test>", 1, ["x"]))
    verify(fn)
    assert fn.order == [1, 2] and isinstance(fn.blocks[1].term, Jump)
    # float constants are left alone (no rounding questions in the IR)
    d = Var(4, "d")
    blocks = {
        1: Block(1, [x], [Stmt(d, Call(operator.lt, [Const(0.1), Const(0.2)]))], Branch(d, 2, [], 3, [])),
        2: Block(2, [], [], Return(x)),
        3: Block(3, [], [], Return(Const(0.0))),
    }
    fn = fold_int_compares(Function("keep", blocks, [1, 2, 3], "<test>", 1, ["x"]))
    assert len(fn.order) == 3


# -- third derivatives on both targets -----------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_third_derivative(target):
    d3 = zyg.grad(zyg.grad(zyg.grad(loop_branch, target=target), target=target), target=target)
    d2 = zyg.grad(zyg.grad(loop_branch, target="python"), target="python")
    h = 1e-4
    for x in (0.4, 1.3):
        want = (d2(x + h, 3) - d2(x - h, 3)) / (2 * h)
        assert d3(x, 3) == pytest.approx(want, rel=1e-6)


# -- random programs: their gradient's source lowered again --------------------------------

_EXAMPLES = int(os.environ.get("ZYG_PROPERTY_EXAMPLES", "0"))


def _settings(ci_examples: int):
    """A fixed seed and ``ci_examples`` examples in CI; ``ZYG_PROPERTY_EXAMPLES=<n>`` runs
    ``n`` randomly seeded ones."""
    if _EXAMPLES > 0:
        return settings(max_examples=_EXAMPLES, deadline=None, derandomize=False, database=None,
                        suppress_health_check=list(HealthCheck))
    return settings(max_examples=ci_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@_settings(25)
@given(programs(), points)
def test_random_programs_second_order(src, args):
    """``value_and_grad(grad(f))`` runs the gradient's generated source after lowering it
    again: its value must be the gradient (the same arithmetic, so to rounding), and its
    derivative the finite difference of the gradient."""
    f = load(src)
    g = zyg.grad(f, 0, target="python")
    try:
        want = reliable_fd(g, args, 0)
    except TypeError:      # a value of f is not differentiable here (reliable_fd guards)
        want = None
    assume(want is not None)
    v, d2 = zyg.value_and_grad(g, 0, target="python")(*args)
    gx = g(*args)
    assert close(v, gx, 1e-12, 1e-300), f"value {v!r} != gradient {gx!r} at {args} for\n{src}"
    assert close(d2, want, 1e-5, 1e-5 * max(1.0, abs(gx))), (
        f"second derivative {d2!r} != fd {want!r} at {args} for\n{src}")
