"""Golden tests of the IR printer, and tests of the IR verifier."""
import pytest

from zyg.ssa.ir import Block, Branch, Call, Const, Function, Jump, Return, Stmt, Var
from zyg.ssa.lower import lower
from zyg.ssa import passes
from zyg.ssa.passes import PIPELINE, VerifyError, run_pipeline, verify


def pow_loop(x, n):
    r = 1.0
    while n > 0:
        n -= 1
        r *= x
    return r


def branchy(x):
    if x > 0:
        y = x * 2.0
    else:
        y = -x
    return y + 1.0


def swap(a, b, n):
    for i in range(n):
        a, b = b, a
    return a - b


def loop_break(x, n):
    s = 0.0
    for i in range(n):
        if s > 10.0:
            break
        s = s + x * i
    return s


def short_circuit(x, d):
    return d != 0.0 and x / d > 1.0


def while_true(x):
    while True:
        x = x * 2.0
        if x > 5.0:
            return x


def body(fn):
    """The printed IR without its header line (which names the file)."""
    return "\n".join(str(run_pipeline(lower(fn))).splitlines()[1:])


def test_golden_pow_loop():
    assert body(pow_loop) == """\
1: (%1 x, %2 n)
  br 3(%2, 1.0)
3: (%3 n, %6 r)
  %4 = %3 > 0
  br %4 ? 4() : 5()
4: ()
  %5 = %3 -= 1
  %8 = %6 *= %1
  br 3(%5, %8)
5: ()
  return %6"""


def test_golden_branch():
    assert body(branchy) == """\
1: (%1 x)
  %2 = %1 > 0
  br %2 ? 3() : 4()
3: ()
  %3 = %1 * 2.0
  br 5(%3)
4: ()
  %4 = -%1
  br 5(%4)
5: (%5 y)
  %6 = %5 + 1.0
  return %6"""


def test_golden_for_with_break():
    # counter and s are header parameters; break goes to the exit through block 7
    assert body(loop_break) == """\
1: (%1 x, %2 n)
  br 3(0, 0.0)
3: (%3, %5 s)
  %4 = %3 < %2
  br %4 ? 4() : 6()
4: ()
  %6 = %5 > 10.0
  br %6 ? 7() : 8()
7: ()
  br 6()
8: ()
  %8 = %1 * %3
  %9 = %5 + %8
  %10 = %3 + 1
  br 3(%10, %9)
6: ()
  return %5"""


def test_golden_short_circuit_value():
    # `a and b` is a when a is falsy: the false edge passes %3 itself, x / d is not evaluated
    assert body(short_circuit) == """\
1: (%1 x, %2 d)
  %3 = %2 != 0.0
  br %3 ? 4() : 3(%3)
4: ()
  %4 = %1 / %2
  %5 = %4 > 1.0
  br 3(%5)
3: (%6)
  return %6"""


def test_golden_while_true_folds_the_constant_test():
    assert body(while_true) == """\
1: (%1 x)
  br 3(%1)
3: (%2 x)
  %3 = %2 * 2.0
  %4 = %3 > 5.0
  br %4 ? 6() : 7()
7: ()
  br 3(%3)
6: ()
  return %3"""


def test_str_of_ir_objects_matches_the_printer():
    fn = run_pipeline(lower(pow_loop))
    blk = fn.blocks[fn.order[1]]
    lines = str(fn).splitlines()
    assert lines[1:] == "\n".join(str(b) for b in fn.iter_blocks()).splitlines()
    assert str(blk) == "3: (%3 n, %6 r)\n  %4 = %3 > 0\n  br %4 ? 4() : 5()"
    assert str(blk.stmts[0]) == "%4 = %3 > 0"
    assert str(blk.term) == "br %4 ? 4() : 5()"
    assert str(Const(2.5)) == "2.5" and str(Var(7, "x")) == "%7"


def test_golden_swap_is_a_parallel_block_argument():
    text = body(swap)
    # the loop header takes (counter, a, b) and the latch passes (counter + 1, b, a)
    assert "br 3(0, %1, %2)" in text or "br 3(0, %2, %1)" in text
    header = [ln for ln in text.splitlines() if ln.startswith("3: (")][0]
    assert header.count("%") == 3
    latch = [ln for ln in text.splitlines() if ln.strip().startswith("br 3(%")][0]
    params = header[header.index("(") + 1:header.index(")")].split(", ")
    a, b = params[1].split()[0], params[2].split()[0]
    assert latch.strip().endswith(f", {b}, {a})")


def test_header_names_the_source_file():
    head = str(run_pipeline(lower(pow_loop))).splitlines()[0]
    assert head.startswith("function pow_loop  # ")
    assert head.endswith(f"test_ir.py:{pow_loop.__code__.co_firstlineno}")


def _tiny():
    x = Var(1, "x")
    y = Var(2, "y")
    b1 = Block(1, [x], [Stmt(y, Call(pow, [x, Const(2)]))], Jump(2, [y]))
    p = Var(3)
    b2 = Block(2, [p], [], Return(p))
    return Function("tiny", {1: b1, 2: b2}, [1, 2]), b1, b2


def test_verifier_accepts_good_ir():
    fn, _, _ = _tiny()
    verify(fn)


def test_verifier_catches_wrong_arity():
    fn, b1, _ = _tiny()
    b1.term = Jump(2, [])
    with pytest.raises(VerifyError, match="passes 0 arguments to block 2 which takes 1"):
        verify(fn, "test")


def test_verifier_catches_missing_terminator():
    fn, b1, _ = _tiny()
    b1.term = None
    with pytest.raises(VerifyError, match="block 1 has no terminator"):
        verify(fn)


def test_verifier_catches_undominated_use():
    x, c = Var(1, "x"), Var(2)
    t, f_ = Var(3), Var(4)
    b1 = Block(1, [x], [Stmt(c, Call(lambda a: a > 0, [x]))], Branch(c, 2, [], 3, []))
    b2 = Block(2, [], [Stmt(t, Call(abs, [x]))], Jump(4, []))
    b3 = Block(3, [], [], Jump(4, []))
    b4 = Block(4, [], [Stmt(f_, Call(abs, [t]))], Return(f_))   # t is defined only on one path
    fn = Function("bad", {1: b1, 2: b2, 3: b3, 4: b4}, [1, 2, 3, 4])
    with pytest.raises(VerifyError, match="not dominated"):
        verify(fn)


def test_verifier_catches_use_before_definition():
    fn, b1, _ = _tiny()
    z = Var(9)
    b1.stmts.insert(0, Stmt(Var(10), Call(abs, [z])))
    b1.stmts.append(Stmt(z, Call(abs, [Const(1.0)])))
    with pytest.raises(VerifyError, match="used before its definition"):
        verify(fn)


def test_verifier_catches_branch_to_missing_block():
    fn, b1, _ = _tiny()
    b1.term = Jump(7, [b1.stmts[0].var])
    with pytest.raises(VerifyError, match="branches to missing block 7"):
        verify(fn)


def test_verifier_catches_double_definition():
    fn, b1, b2 = _tiny()
    b2.stmts.append(Stmt(b1.stmts[0].var, Call(abs, [Const(1.0)])))
    with pytest.raises(VerifyError, match="defined twice"):
        verify(fn)


def test_verifier_catches_undefined_use():
    fn, b1, _ = _tiny()
    b1.term = Jump(2, [Var(42)])
    with pytest.raises(VerifyError, match="%42 used in block 1 but never defined"):
        verify(fn)


def test_verifier_catches_unreachable_block_and_second_return():
    fn, b1, b2 = _tiny()
    fn.blocks[3] = Block(3, [], [], Return(Const(0.0)))
    fn.order.append(3)
    with pytest.raises(VerifyError, match="exactly one return block"):
        verify(fn)
    fn.blocks[3].term = Jump(2, [Const(0.0)])
    with pytest.raises(VerifyError, match="block 3 is unreachable"):
        verify(fn)


def test_verifier_catches_entry_with_predecessor():
    fn, b1, b2 = _tiny()
    c = Var(5)
    b2.stmts.append(Stmt(c, Call(bool, [b2.params[0]])))
    b2.term = Branch(c, 1, [b2.params[0]], 3, [b2.params[0]])
    fn.blocks[3] = Block(3, [Var(6)], [], Return(Const(0.0)))
    fn.order.append(3)
    with pytest.raises(VerifyError, match="entry block has predecessors"):
        verify(fn)


def test_verifier_catches_order_table_mismatch():
    fn, _, _ = _tiny()
    fn.order.append(2)
    with pytest.raises(VerifyError, match="block order and block table disagree"):
        verify(fn)


def test_run_pipeline_names_the_pass_that_broke_the_ir(monkeypatch):
    def breaks_arity(fn):
        fn.entry.term.args.clear()
        return fn
    monkeypatch.setattr(passes, "PIPELINE", list(PIPELINE) + [("bad-pass", breaks_arity)])
    with pytest.raises(VerifyError, match="after pass 'bad-pass'"):
        run_pipeline(lower(pow_loop))


def _corpus():
    import test_agreement
    import test_constructs
    fns = [pow_loop, branchy, swap, loop_break, short_circuit, while_true]
    fns += [c[0] for c in test_constructs.CASES] + [c[0] for c in test_agreement.CORPUS]
    out, seen = [], set()
    for f in fns:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out


CORPUS = _corpus()


@pytest.mark.parametrize("fn", CORPUS, ids=lambda f: f.__name__)
def test_every_pass_leaves_verifiable_ir(fn):
    ir = lower(fn)
    for name, p in PIPELINE:
        ir = p(ir)
        verify(ir, name)


@pytest.mark.parametrize("fn", CORPUS, ids=lambda f: f.__name__)
def test_pipeline_is_idempotent(fn):
    once = run_pipeline(lower(fn))
    text = str(once)
    assert str(run_pipeline(once)) == text


def test_pipeline_verifies_by_default():
    assert passes.VERIFY is True


def test_dump_after(monkeypatch, capsys):
    monkeypatch.setenv("ZYG_DUMP_AFTER", "lower,trivial-params")
    run_pipeline(lower(branchy))
    err = capsys.readouterr().err
    assert "=== IR after lower ===" in err and "=== IR after trivial-params ===" in err
