"""Generated code as a tree (zyg/ssa/emit.py: Code.tree, the header nodes Def/If/Elif/Else/
While/For and the tape headers RoomCheck/NoRoom).

* Every block header the transforms emit is a typed node: no generated statement is a
  ``Line`` ending in ``:`` -- for loops, branches, while loops left by ``break``, arrays
  (fancy indices, masks), checkpointed loops, forward mode and recursion, on both targets,
  from the emitters directly and from every module zyg.grad / zyg.jvp / zyg.hessian /
  zyg.pullback load.
* ``Code.tree()`` nests the statements as the indentation says (a loop's branches inside its
  loop block, ``else`` right after its ``if``), rejects inconsistent indentation, and
  round-trips: the tree printed is ``Code.text``, flattened it is the same statements with
  the same user locations.
* The gradients of the functions used are checked against central finite differences on
  both targets.
"""
from __future__ import annotations

import math
import re
import types

import numba
import numpy as np
import pytest

import zyg
import zyg.pullbacks.structured as structured
import zyg.pullbacks.transform as transform
from zyg import backends
from zyg.api import _kinds, _with_hidden, ssa_of
from zyg.backends.base import Backend
from zyg.pullbacks.forward import Forward
from zyg.pullbacks.transform import emit_fused, emit_split, plan
from zyg.ssa.emit import (HEADERS, Block, Code, Def, Elif, Else, For, If, Leaf, Line, NoRoom,
                          RoomCheck, While)

from conftest import TARGETS, fd_grad

RNG = np.random.default_rng(14)


# --- functions -----------------------------------------------------------------------------

def loop_branch(x, n):
    s = 0.0
    for i in range(n):
        if i % 3 == 0:
            s += x * i
        elif i % 3 == 1:
            s -= math.sin(x * i)
        else:
            s = s * 0.9 + x
    return s


def while_break(x):
    s = x
    k = 0
    while True:
        s = s * 0.9 + math.sin(s)
        k += 1
        if s > 3.0 or k >= 6:
            break
    return s * x


def data_branch(x, y):
    if x > y:
        z = x * y
    elif x > 0.5:
        z = math.exp(x)
    else:
        z = y * y
    return z * x


def nested_arrays(a, w):
    n = a.shape[0]
    b = np.zeros(n)
    for i in range(n):
        for j in range(w.shape[0]):
            b[i] += a[i] * w[j] * w[j]
    return np.sum(b * b)


IDX = np.array([0, 2, 2, 4, -1])       # a repeat, and -1 (the same element as 4)


def fancy(x, idx):
    a = x.copy()
    a[idx] = x[:idx.size] * 1.5        # a repeated write: only the last one counts
    return np.sum(x[idx] ** 2) + np.sum(a * a)


def masked(X):
    return np.sum(X[X > 0.5] ** 2)


def checkpointed(x, w, T):
    s = x
    for t in zyg.checkpointed_range(T, snapshots=2):
        s = math.sin(s) * w + 0.5 * s
    return s


def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def recursive_sum(x, n):
    s = 0.0
    for i in range(n):
        s += power(x + 0.1 * i, 3)
    return s


X5 = RNG.uniform(0.2, 1.2, 5)
X34 = RNG.uniform(0.2, 1.2, (3, 4))
CASES = [
    (loop_branch, (0.7, 7), (0,)),
    (while_break, (0.4,), (0,)),
    (data_branch, (0.8, 0.3), (0, 1)),
    (nested_arrays, (RNG.uniform(-1, 1, 4), RNG.uniform(-1, 1, 3)), (0, 1)),
    (fancy, (X5, IDX), (0,)),
    (masked, (X34,), (0,)),
    (checkpointed, (0.3, 0.8, 9), (0, 1)),
    (recursive_sum, (0.6, 4), (0,)),
    (power, (0.7, 5), (0,)),
]
IDS = [c[0].__name__ for c in CASES]
# forward mode: the plain loops and branches (not recursion: no forward rule for it yet)
JVP_CASES = [c for c in CASES if c[0] in (loop_branch, while_break, data_branch, nested_arrays)]


# --- helpers ---------------------------------------------------------------------------------

def generated(f, args, argnums, target):
    """(what, Code, storage) of every Code the emitters make for ``f``."""
    ir = ssa_of(f)
    kinds = _kinds(_with_hidden(ir, args), ir.name)

    def plan_():
        return plan(ir, kinds, list(argnums), backends.get(target))
    p = plan_()
    out = [("fused", emit_fused(p, "f_vg", value=True)[1], p.backend.storage)]
    p = plan_()
    out.append(("split", emit_split(p, "f")[0], p.backend.storage))
    return out


def forward_code(f, args, argnums, target):
    ir = ssa_of(f)
    p = plan(ir, _kinds(args, ir.name), list(argnums), backends.get(target))
    return Forward(p).emit("f_jvp"), p.backend.storage


def untyped_headers(code: Code):
    """The statements of ``code`` that are header text instead of header nodes."""
    return [node.text for _, node in code.body
            if isinstance(node, Line) and node.text.rstrip().endswith(":")]


def render_tree(tree, storage, depth: int = 0):
    """The lines of a tree, printed recursively (independently of Code.render)."""
    lines = []
    for item in tree:
        node = item.header if isinstance(item, Block) else item.node
        parts = [node.render()] if hasattr(node, "render") else storage.lower(node)
        lines += ["    " * depth + part for part in parts]
        if isinstance(item, Block):
            lines += render_tree(item.body, storage, depth + 1)
    return lines


def assert_tree_round_trips(code: Code, storage) -> list:
    tree = code.tree()
    assert "\n".join(render_tree(tree, storage)) + "\n" == code.text(storage)
    back = Code.from_tree(tree)
    assert back.body == code.body
    assert back.locs == code.locs
    return tree


def blocks(tree, depth: int = 0):
    """(depth, block, the statements around it) of every block of a tree, outermost first."""
    for item in tree:
        if isinstance(item, Block):
            yield depth, item, tree
            yield from blocks(item.body, depth + 1)


def check_typed(code: Code, storage, what: str) -> None:
    assert not untyped_headers(code), (what, untyped_headers(code), code.text(storage))
    tree = assert_tree_round_trips(code, storage)
    assert tree and all(isinstance(i, Block) and isinstance(i.header, Def) or
                        isinstance(i, Leaf) and isinstance(i.node, Line) and not i.node.text
                        for i in tree), what      # top level: functions and blank lines
    for _, b, _ in blocks(tree):
        assert isinstance(b.header, HEADERS) and b.body


# --- (a), (b): every header typed, the tree round-trips, on both targets -------------------

@pytest.mark.parametrize("structured_on", [True, False], ids=["structured", "dispatch"])
@pytest.mark.parametrize("f,args,argnums", CASES, ids=IDS)
def test_emitted_headers_are_nodes(f, args, argnums, structured_on, target, monkeypatch):
    monkeypatch.setattr(structured, "STRUCTURED", structured_on)
    for what, code, storage in generated(f, args, argnums, target):
        check_typed(code, storage, f"{f.__name__} {what} {target}")


@pytest.mark.parametrize("f,args,argnums", JVP_CASES, ids=[c[0].__name__ for c in JVP_CASES])
def test_forward_headers_are_nodes(f, args, argnums, target):
    code, storage = forward_code(f, args, argnums, target)
    check_typed(code, storage, f"{f.__name__} jvp {target}")


def test_dispatch_search_tree_headers(monkeypatch):
    # a binary search over block ids (many blocks): if _blk < k / else, nested
    monkeypatch.setattr(transform, "DISPATCH_TREE_MIN", 2)
    monkeypatch.setattr(structured, "STRUCTURED", False)
    for target in TARGETS:
        (_, code, storage), _ = generated(loop_branch, (0.7, 7), (0,), target)
        check_typed(code, storage, target)
        splits = [b for _, b, _ in blocks(code.tree())
                  if isinstance(b.header, If) and b.header.cond.startswith("_blk < ")]
        assert splits, code.text(storage)
        for b in splits:
            assert any(isinstance(i, Block) and isinstance(i.header, If) for i in b.body)


def test_structured_loop_nesting(target):
    (_, code, storage), _ = generated(loop_branch, (0.7, 7), (0,), target)
    tree = code.tree()
    assert len(tree) == 1 and isinstance(tree[0].header, Def) and tree[0].header.name == "f_vg"
    # the primal: a counted 'for' loop whose body is the if/elif/else chain as two-way
    # branches (the IR's): if ... else: if ... else ...
    fors = [b for _, b, _ in blocks(tree) if isinstance(b.header, For)]
    assert fors and all(re.fullmatch(r"_k\d+", b.header.var) for b in fors)
    chain = [i for i in fors[0].body if isinstance(i, Block)]
    assert [type(i.header) for i in chain] == [If, Else], code.text(storage)
    inner = [type(i.header) for i in chain[1].body if isinstance(i, Block)]
    assert inner == [If, Else], code.text(storage)
    # the adjoint: a reversed 'while _n > 0' loop holding branches of its own
    rev = [b for _, b, _ in blocks(tree)
           if isinstance(b.header, While) and re.fullmatch(r"_n\d+ > 0", b.header.cond)]
    assert len(rev) == 1, code.text(storage)
    inner = [i.header for i in rev[0].body if isinstance(i, Block)]
    assert any(isinstance(h, If) for h in inner) and any(isinstance(h, Else) for h in inner)
    # every else directly follows an if or elif block among its siblings
    for _, b, around in blocks(tree):
        if isinstance(b.header, (Elif, Else)):
            k = next(j for j, i in enumerate(around) if i is b)
            assert isinstance(around[k - 1], Block) and isinstance(around[k - 1].header, (If, Elif))


def test_dispatch_loop_nesting(target, monkeypatch):
    monkeypatch.setattr(structured, "STRUCTURED", False)
    (_, code, storage), _ = generated(while_break, (0.4,), (0,), target)
    tree = code.tree()
    dispatch = [(d, b) for d, b, _ in blocks(tree)
                if isinstance(b.header, While) and b.header.cond == "_blk >= 0"]
    loop = While("_blk >= 0")
    outer = [b for _, b in dispatch if any(isinstance(i, Block) and i.header == loop for i in b.body)]
    inner = [b for _, b in dispatch if b not in outer]
    assert len(inner) == 2, code.text(storage)      # the primal's and the adjoint's
    for b in inner:                 # the cases: if _blk == k / elif _blk == k ...
        assert all(isinstance(i, Block) for i in b.body)
        assert type(b.body[0].header) is If and b.body[0].header.cond.startswith("_blk == ")
        assert all(type(i.header) is Elif and i.header.cond.startswith("_blk == ") for i in b.body[1:])
    for b in outer:                 # a growing tape: the dispatch, then leave or grow
        heads = [i.header for i in b.body if isinstance(i, Block)]
        assert heads[:2] == [loop, If("_blk == -1")], code.text(storage)
        assert all(isinstance(h, RoomCheck) for h in heads[2:]), code.text(storage)


def test_room_checks_are_headers():
    # the cpu target's tape grows: RoomCheck / NoRoom open blocks that grow a stack
    (_, code, storage), _ = generated(loop_branch, (0.7, 7), (0,), "cpu")
    found = [b for _, b, _ in blocks(code.tree()) if isinstance(b.header, (RoomCheck, NoRoom))]
    assert found, code.text(storage)
    for b in found:
        assert all(isinstance(i, Leaf) or isinstance(i.header, If) for i in b.body)


def test_header_text_is_python():
    assert Def("f", ("a", "b")).render() == "def f(a, b):"
    assert Def("g", ()).render() == "def g():"
    assert If("x > 0").render() == "if x > 0:"
    assert Elif("_blk == 3").render() == "elif _blk == 3:"
    assert Else().render() == "else:"
    assert While("_n4 > 0").render() == "while _n4 > 0:"
    assert For("_k2", "range(_n2)").render() == "for _k2 in range(_n2):"


def _code(*stmts) -> Code:
    c = Code()
    for ind, node in stmts:
        c.put(ind, Line(node) if isinstance(node, str) else node)
    return c


@pytest.mark.parametrize("stmts,msg", [
    ([(0, "a = 1"), (1, "b = 2")], "body without a header"),
    ([(0, If("x")), (1, "a = 1"), (2, "b = 2")], "body without a header"),
    ([(0, If("x")), (0, "a = 1")], "header without a body"),
    ([(0, While("x"))], "header without a body"),
    ([(0, "a = 1"), (0, Else()), (1, "b = 2")], "follows no if"),
    ([(0, For("i", "range(3)")), (1, "a = 1"), (0, Else()), (1, "b = 2")], "follows no if"),
], ids=["indent", "double-indent", "empty-if", "empty-while", "bare-else", "for-else"])
def test_inconsistent_indentation_is_rejected(stmts, msg):
    with pytest.raises(AssertionError, match=msg):
        _code(*stmts).tree()


def test_subtree_from_a_statement():
    c = _code((0, Def("f", ("x",))), (1, "s = 0"), (1, While("s < x")), (2, "s += 1"),
              (2, If("s > 3")), (3, "break"), (1, "return s"))
    whole = c.tree()
    assert [type(i) for i in whole[0].body] == [Leaf, Block, Leaf]
    loop = c.tree(2)           # from the while on: it and the statement after it
    assert loop[0].header == While("s < x") and isinstance(loop[0].body[1].header, If)
    assert loop[1].node == Line("return s")
    with pytest.raises(AssertionError, match="indented less"):
        c.tree(3)              # the loop body, then a statement outside it
    assert Code.from_tree(whole).body == c.body


# --- (a) for what the api loads, (c) gradients against finite differences -----------------

def _copy(f):
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


@pytest.fixture
def loaded(monkeypatch):
    """Every Code a back end loads while the test runs."""
    seen = []
    load = Backend.load

    def spy(self, code, ns, names, stem):
        seen.append((code, self.storage, stem))
        return load(self, code, ns, names, stem)
    monkeypatch.setattr(Backend, "load", spy)
    return seen


def fd_array_grad(f, args, i, h=1e-6):
    x = np.asarray(args[i], dtype=np.float64)
    g = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        up, dn = x.copy(), x.copy()
        up[idx] += h
        dn[idx] -= h
        a_up, a_dn = list(args), list(args)
        a_up[i], a_dn[i] = up, dn
        g[idx] = (f(*a_up) - f(*a_dn)) / (2 * h)
    return g


def expected_grads(f, args, argnums):
    return [fd_array_grad(f, args, i) if isinstance(args[i], np.ndarray) else fd_grad(f, args, i)
            for i in argnums]


def parallel_stencil(u, c):
    """A prange loop in a time loop: the gradient loads the loop's compiled pair."""
    n = u.shape[0]
    a = u.copy()
    b = np.empty(n)
    for t in range(3):
        for i in numba.prange(n):
            b[i] = a[i] + c * (a[(i + 1) % n] - a[i])
        a, b = b, a
    return np.sum(a * a)


GRAD_CASES = [c for c in CASES if c[0] in (loop_branch, while_break, nested_arrays, fancy,
                                           checkpointed, power)] + \
    [(parallel_stencil, (RNG.uniform(-1, 1, 6), 0.3), (0, 1))]


@pytest.mark.parametrize("f,args,argnums", GRAD_CASES, ids=[c[0].__name__ for c in GRAD_CASES])
def test_gradients_and_loaded_code(f, args, argnums, target, loaded):
    g = zyg.grad(_copy(f), argnums=argnums if len(argnums) > 1 else argnums[0], target=target)
    got = g(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    got = got if len(argnums) > 1 else (got,)
    for i, gi, want in zip(argnums, got, expected_grads(f, args, argnums)):
        np.testing.assert_allclose(gi, want, rtol=1e-6, atol=1e-8, err_msg=f"{target}, argument {i}")
    assert loaded, "nothing was loaded"
    for code, storage, stem in loaded:
        check_typed(code, storage, stem)


def test_hessian_and_jvp_code(target, loaded):
    # api.py's hvp/hessian functions and the forward-mode module: typed headers too
    f = _copy(data_branch)
    H = zyg.hessian(f, target=target)(0.8, 0.3)
    h = 1e-5
    fd = (fd_grad(data_branch, (0.8 + h, 0.3), 0) - fd_grad(data_branch, (0.8 - h, 0.3), 0)) / (2 * h)
    assert abs(H - fd) <= 1e-5 * max(1.0, abs(fd)), (H, fd)
    y, t = zyg.jvp(_copy(loop_branch), (0.7, 7), (1.0, 0), target=target)
    assert abs(y - loop_branch(0.7, 7)) <= 1e-12 * max(1.0, abs(y))
    assert abs(t - fd_grad(loop_branch, (0.7, 7), 0)) <= 1e-6 * max(1.0, abs(t))
    assert len(loaded) >= 2
    for code, storage, stem in loaded:
        check_typed(code, storage, stem)


def test_recursion_in_a_loop_gradient(target):
    # found here: the reverse of a sum loop ran forwards and took another iteration's
    # recursive pullback (6.7 instead of 6.9); tests/test_loop_order.py has its siblings
    got = zyg.grad(_copy(recursive_sum), target=target)(0.6, 4)
    want = 3 * sum((0.6 + 0.1 * i) ** 2 for i in range(4))
    assert abs(got - want) <= 1e-9 * abs(want), (got, want)
