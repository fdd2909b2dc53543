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
  %5 = %3 - 1
  %8 = %6 * %1
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
    assert head.startswith("function pow_loop  # ") and head.endswith(f"test_ir.py:{pow_loop.__code__.co_firstlineno}")


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


CORPUS = [pow_loop, branchy, swap]


@pytest.mark.parametrize("fn", CORPUS, ids=lambda f: f.__name__)
def test_every_pass_leaves_verifiable_ir(fn):
    ir = lower(fn)
    for name, p in PIPELINE:
        ir = p(ir)
        verify(ir, name)


def test_pipeline_verifies_by_default():
    assert passes.VERIFY is True


def test_dump_after(monkeypatch, capsys):
    monkeypatch.setenv("ZYG_DUMP_AFTER", "lower,trivial-params")
    run_pipeline(lower(branchy))
    err = capsys.readouterr().err
    assert "=== IR after lower ===" in err and "=== IR after trivial-params ===" in err
