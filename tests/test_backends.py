"""The back-end seam (issue 14): targets are Backend objects, and one place adds a target.

A back end defined here, outside zyg, and registered with ``zyg.backends.register`` runs
the same gradients as the built-in targets: the transforms ask it what differs, its storage
spells the tape, and its ``load`` compiles.  If some code path still branched on the target
*name*, this back end (a name zyg has never seen) would take the wrong branch or fail.
"""
import math

import numpy as np
import pytest

import zyg
from zyg import backends
from zyg.backends.python import PythonBackend
from zyg.backends.storage import NumpyStacks
from zyg.ssa import emit
from conftest import fd_partial


def fd_vector(f, x, h=1e-6):
    """Central differences of the scalar function ``f`` of the 1-D array ``x``."""
    out = np.empty_like(x)
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        up[k] += h
        dn[k] -= h
        out[k] = (f(up) - f(dn)) / (2 * h)
    return out


class CountingStacks(NumpyStacks):
    """The python storage, counting what it lowered (by node type)."""

    def __init__(self):
        super().__init__(unsigned=True)       # uint64 subscripts, as compiled code has them
        self.seen = {}

    def lower(self, node):
        self.seen[type(node).__name__] = self.seen.get(type(node).__name__, 0) + 1
        return super().lower(node)


class Tracing(PythonBackend):
    """A back end zyg does not know: python semantics, its own storage, counted loads."""
    name = "tracing"

    def __init__(self):
        super().__init__()
        self.storage = CountingStacks()
        self.loads = 0

    def tag(self):
        return "# target tracing: a test back end"

    def load(self, code, ns, names, stem):
        self.loads += 1
        self.stems.append(stem)
        return super().load(code, ns, names, stem)

    stems: list = []


TRACING = backends.register(Tracing())


def looped(x, n):
    s = 0.0
    for i in range(n):
        s = s * 0.9 + math.sin(x * i + s)     # sin's argument holds s: taped
    return s


def rows(a, w):
    out = np.zeros(a.shape[0])
    for i in range(a.shape[0]):
        r = a[i]                       # an array value pushed on the tape
        out[i] = np.sum(r * w) ** 2
        a[i] = r * 0.5                 # an overwrite the adjoint rewinds
    return np.sum(out) + np.sum(a)


def test_registry_names_the_targets():
    assert backends.get("python").name == "python"
    assert backends.get("cpu").compiled and not backends.get("python").compiled
    assert backends.get(TRACING) is TRACING
    assert "tracing" in backends.TARGETS
    with pytest.raises(ValueError, match="unknown target 'gpu'.*'python', 'cpu'"):
        backends.get("gpu")
    with pytest.raises(ValueError, match="unknown target"):
        zyg.grad(looped, target="gpu")(0.5, 3)
    with pytest.raises(TypeError):
        backends.register(object())


def test_a_registered_back_end_runs_scalar_loops():
    before = TRACING.loads
    g = zyg.grad(looped, target="tracing")(0.7, 6)
    assert g == pytest.approx(fd_partial(looped, (0.7, 6), 0), rel=1e-6)
    assert g == zyg.grad(looped, target="python")(0.7, 6)
    assert TRACING.loads > before
    seen = TRACING.storage.seen
    for node in ("StackInit", "Store", "Advance", "Pop", "Peek"):
        assert seen.get(node), (node, seen)


def test_a_registered_back_end_runs_array_tapes_and_pullbacks():
    a = np.random.default_rng(0).normal(size=(4, 3))
    w = np.random.default_rng(1).normal(size=3)
    ga, gw = zyg.grad(rows, argnums=(0, 1), target="tracing")(a.copy(), w)
    want = zyg.grad(rows, argnums=(0, 1), target="python")(a.copy(), w)
    np.testing.assert_array_equal(ga, want[0])
    np.testing.assert_array_equal(gw, want[1])
    np.testing.assert_allclose(gw, fd_vector(lambda w_: rows(a.copy(), w_), w), rtol=1e-6)
    y, back = zyg.pullback(rows, a.copy(), w, target="tracing")
    assert y == pytest.approx(rows(a.copy(), w))
    np.testing.assert_array_equal(back(1.0)[1], want[1])
    for node in ("PushArray", "PopArray", "RoomCheck", "Grow", "Capacity"):
        assert TRACING.storage.seen.get(node), (node, TRACING.storage.seen)
    # its own storage spelled the tape: compiled-style subscripts in python code
    assert TRACING.storage.seen["Store"] > 0


def test_a_registered_back_end_runs_forward_mode_and_second_order():
    y, t = zyg.jvp(looped, (0.7, 6), (1.0, None), target="tracing")
    assert t == pytest.approx(zyg.grad(looped, target="python")(0.7, 6), rel=1e-12)
    h = zyg.hessian(lambda x: math.sin(x) * x ** 3, target="tracing")(0.4)
    assert h == pytest.approx(-math.sin(0.4) * 0.4 ** 3 + 6 * math.cos(0.4) * 0.4 ** 2 + 6 * 0.4 * math.sin(0.4),
                              rel=1e-9)


def _modes(x, n):
    s = 0.0
    for i in range(n):
        s = s * 0.8 + math.cos(x * i)
    return s


def _sq(x):
    return x * x * math.sin(x)


def _penalised(x):
    return x ** 2 + zyg.grad(_sq)(x) ** 2      # zyg.grad inside differentiated code


def _stepped(x):
    s = x
    for t in zyg.checkpointed_range(6, snapshots=2):
        s = s * 0.8 + math.sin(s) * 0.1
    return s


def test_every_mode_reaches_a_back_end_through_its_load():
    """One build step (zyg/build.py, issue 25): the module of every mode -- fused gradient,
    pullback, forward mode, second order, a gradient inside differentiated code, a
    checkpointed loop's step -- reaches the back end through its ``load``, so a back end
    plugs in once.  Each value is checked against the python target."""
    TRACING.stems = []
    x = 0.6
    assert zyg.grad(_modes, target="tracing")(x, 5) == zyg.grad(_modes, target="python")(x, 5)
    y, back = zyg.pullback(_modes, x, 5, target="tracing")
    assert back(1.0)[0] == pytest.approx(zyg.grad(_modes, target="python")(x, 5), rel=1e-12)
    _, t = zyg.jvp(_modes, (x, 5), (1.0, None), target="tracing")
    assert t == pytest.approx(zyg.grad(_modes, target="python")(x, 5), rel=1e-12)
    h = zyg.hessian(_sq, target="tracing")(x)
    assert h == pytest.approx(zyg.hessian(_sq, target="python")(x), rel=1e-12)
    gp = zyg.grad(_penalised, target="tracing")(x)
    assert gp == pytest.approx(zyg.grad(_penalised, target="python")(x), rel=1e-12)
    gs = zyg.grad(_stepped, target="tracing")(x)
    assert gs == pytest.approx(zyg.grad(_stepped, target="python")(x), rel=1e-12)
    stems = " ".join(TRACING.stems)
    # (the Hessian's drivers: forward mode over the gradient's source, "_sq_d0_grad_h"; the
    # gradient inside differentiated code and its tangent: "_sq_gd0"; the checkpointed
    # loop's plain step, recorded step and schedule: "_run", "_rev", "_ck")
    for part in ("_modes_vg", "_modes_pullback", "_modes_jvp", "_sq_d0_grad_h", "_sq_gd0",
                 "_penalised_vg", "_run", "_rev", "_ck", "_stepped_vg"):
        assert part in stems, (part, TRACING.stems)


def test_every_tape_node_has_a_lowering():
    s = NumpyStacks(unsigned=False)
    u = NumpyStacks(unsigned=True)
    samples = {
        emit.StackInit: emit.StackInit("f"), emit.Store: emit.Store("f", 1, "x"),
        emit.Advance: emit.Advance("f", 2), emit.Pop: emit.Pop("f", 2),
        emit.Peek: emit.Peek("y", "f", None), emit.PushArray: emit.PushArray("f", "a"),
        emit.PopArray: emit.PopArray("a", "f", 2, "float32"), emit.SetTop: emit.SetTop("f", "3"),
        emit.RoomCheck: emit.RoomCheck("f", "_fsp + 4", want=True),
        emit.NoRoom: emit.NoRoom((("f", 2), ("i", "n"))), emit.Grow: emit.Grow("f", "9"),
        emit.Capacity: emit.Capacity("f"), emit.Want: emit.Want("f", "0"),
        emit.Reserve: emit.Reserve("f", "4", start=True),
        emit.TapeOverflow: emit.TapeOverflow(("f", "i")),
        emit.NestedTape: emit.NestedTape("_r1", "g_rp", ("x", "_lim"), ("f", "i"), 1, False),
    }
    assert set(samples) == set(emit.TAPE)
    for cls, node in samples.items():
        assert s.lower(node) and u.lower(node), cls
    assert s.lower(samples[emit.Store]) == ["_fs[_fsp + 1] = x"]
    assert u.lower(samples[emit.Store]) == ["_fs[np.uint64(_fsp + 1)] = x"]
    assert s.lower(samples[emit.NoRoom]) == ["if _fsp + 2 > _fcap or _isp + n > _icap:"]
    # a recursive pair's primal: the stacks in, then back as it leaves them (grown buffers)
    assert s.lower(samples[emit.NestedTape]) == [
        "_r1 = g_rp(x, _lim, _fs, np.int64(_fsp), _is, np.int64(_isp))",
        "_fs = _r1[1]", "_fcap = _fs.shape[0]", "_fsp = _r1[2]",
        "_is = _r1[3]", "_icap = _is.shape[0]", "_isp = _r1[4]"]
    assert s.lower(emit.NestedTape("_g", "g_ra", ("x", "dy"), ("f",), 2, True)) == [
        "_g = g_ra(x, dy, _fs, np.int64(_fsp))", "_fsp = _g[2]"]
    assert u.lower(samples[emit.PopArray])[-1] == \
        "a = _fs[_fsp:_fsp + _sz].reshape((_is[_isp + 0], _is[_isp + 1], )).astype(np.float32)"


def test_user_lines_follow_nodes_that_lower_to_several_lines():
    code = emit.Code()
    loc_a, loc_b = object(), object()
    code.add(0, "def f():")
    code.put(1, emit.PopArray("a", "f", 1, "float64"), loc_a)
    code.add(1, "return a", loc_b)
    lines, locs = code.render(NumpyStacks(unsigned=False))
    assert len(lines) == 6
    assert [locs.get(k) for k in range(1, 7)] == [None, loc_a, loc_a, loc_a, loc_a, loc_b]
    assert lines[5] == "    return a"


class Doubling(Tracing):
    """Doubles every float a loaded function returns (so code it did not build shows)."""

    def load(self, code, ns, names, stem):
        fns, path, locs = super().load(code, ns, names, stem)
        return [self._twice(f) for f in fns], path, locs

    @staticmethod
    def _twice(f):
        def g(*a):
            r = f(*a)
            if isinstance(r, tuple):
                return tuple(2 * v if isinstance(v, float) else v for v in r)
            return 2 * r if isinstance(r, float) else r
        return g


def test_replacing_a_back_end_forgets_what_was_compiled_for_its_name():
    backends.register(type("First", (Tracing,), {"name": "swap"})())
    g = zyg.grad(looped, target="swap")
    want = zyg.grad(looped, target="python")(0.7, 6)
    assert g(0.7, 6) == want
    backends.register(type("Second", (Doubling,), {"name": "swap"})())
    # the same gradient object, called again, runs what the new back end built
    assert g(0.7, 6) == 2 * want
