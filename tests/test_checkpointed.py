"""Checkpointed loops: ``for t in zyg.checkpointed_range(T, snapshots=s)``.

Every gradient is checked against central finite differences, and against zyg's gradient
of the same function written with ``range`` (fully recorded), for several numbers of
snapshots (1 snapshot: every step recomputed from the start; many: almost no
recomputation).  The binomial schedule is checked to run each step forward at most
``r + 1`` times and to reverse every step exactly once.
"""
import math
import os

import numpy as np
import pytest

import zyg
from zyg.errors import TypeMismatch, UnsupportedSyntax
from cachecheck import assert_second_process_compiles_nothing

TARGETS = ("python", "cpu")


def fd_array(f, args, i, h=1e-6):
    """Central differences of a scalar f w.r.t. argument i (a float or an array)."""
    x = args[i]
    if isinstance(x, np.ndarray):
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            up, dn = x.astype(np.float64).copy(), x.astype(np.float64).copy()
            up[idx] += h
            dn[idx] -= h
            a_up, a_dn = list(args), list(args)
            a_up[i], a_dn[i] = up.astype(x.dtype), dn.astype(x.dtype)
            g[idx] = (f(*a_up) - f(*a_dn)) / (2 * h)
        return g
    a_up, a_dn = list(args), list(args)
    a_up[i], a_dn[i] = x + h, x - h
    return (f(*a_up) - f(*a_dn)) / (2 * h)


_G = {}


def grad(f, argnums=0, target="cpu"):
    """zyg.grad built once per test session (numba compiles each function once)."""
    key = (f, argnums, target)
    if key not in _G:
        _G[key] = zyg.grad(f, argnums=argnums, target=target)
    return _G[key]


# -- the workloads: each in a checkpointed form and a plain (recorded) form ---------------

def heat(u0, k, T, s):
    """1-D heat equation, explicit Euler: an array carried from step to step."""
    u = u0.copy()
    n = u.shape[0]
    for t in zyg.checkpointed_range(T, snapshots=s):
        lap = np.zeros_like(u)
        for i in range(1, n - 1):
            lap[i] = u[i - 1] - 2.0 * u[i] + u[i + 1]
        u = u + k * lap
    return np.sum(u ** 2)


def heat_plain(u0, k, T, s):
    u = u0.copy()
    n = u.shape[0]
    for t in range(T):
        lap = np.zeros_like(u)
        for i in range(1, n - 1):
            lap[i] = u[i - 1] - 2.0 * u[i] + u[i + 1]
        u = u + k * lap
    return np.sum(u ** 2)


def oscillator(x0, v0, w, dt, T, s):
    """Scalars carried (x, v, an energy sum that starts as the integer 0), scalars read,
    a branch on the step number and a 'continue'."""
    x = x0
    v = v0
    e = 0
    for t in zyg.checkpointed_range(T, snapshots=s):
        a = -w * w * math.sin(x)
        v = v + dt * a
        x = x + dt * v
        if t % 3 == 2:
            continue
        e += 0.5 * v * v + w * w * (1.0 - math.cos(x))
    return x * x + 0.1 * e + v


def oscillator_plain(x0, v0, w, dt, T, s):
    x = x0
    v = v0
    e = 0.0
    for t in range(T):
        a = -w * w * math.sin(x)
        v = v + dt * a
        x = x + dt * v
        if t % 3 == 2:
            continue
        e += 0.5 * v * v + w * w * (1.0 - math.cos(x))
    return x * x + 0.1 * e + v


def particles(pos0, vel, drag, T, s):
    """An array written in place in the loop (not reassigned) and a trajectory array
    filled one row per step, both carried; an array and a float read."""
    pos = pos0.copy()
    traj = np.zeros((T, pos.shape[0]))
    for t in zyg.checkpointed_range(T, snapshots=s):
        for i in range(pos.shape[0]):
            pos[i] = pos[i] + 0.1 * vel[i] * math.exp(-drag * t) - 0.01 * pos[i] ** 3
        traj[t, :] = pos
    return np.sum(traj * traj) + np.sum(np.sin(pos))


def particles_plain(pos0, vel, drag, T, s):
    pos = pos0.copy()
    traj = np.zeros((T, pos.shape[0]))
    for t in range(T):
        for i in range(pos.shape[0]):
            pos[i] = pos[i] + 0.1 * vel[i] * math.exp(-drag * t) - 0.01 * pos[i] ** 3
        traj[t, :] = pos
    return np.sum(traj * traj) + np.sum(np.sin(pos))


def _step(y, c):
    return y - 0.05 * y ** 3 + c


def integrate(y, c, t0, t1, s):
    for t in zyg.checkpointed_range(t0, t1, snapshots=s):
        y = _step(y, c * t)
    return y


def through_callee(y0, c, t0, t1, s):
    """A checkpointed loop inside an inlined callee, with start and stop, calling a
    module-level function."""
    y = integrate(y0 * 1.0, c, t0, t1, s)
    return np.sum(y * y)


def through_callee_plain(y0, c, t0, t1, s):
    y = y0 * 1.0
    for t in range(t0, t1):
        y = _step(y, c * t)
    return np.sum(y * y)


CASES = {
    "heat": (heat, heat_plain, lambda T, s: (np.sin(np.linspace(0.0, 3.0, 9)), 0.2, T, s), (0, 1)),
    "oscillator": (oscillator, oscillator_plain, lambda T, s: (0.7, -0.2, 1.3, 0.1, T, s), (0, 1, 2, 3)),
    "particles": (particles, particles_plain,
                  lambda T, s: (np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.3, -0.4]), 0.05, T, s),
                  (0, 1, 2)),
    "callee": (through_callee, through_callee_plain,
               lambda T, s: (np.array([0.3, -0.6]), 0.01, 2, 2 + T, s), (0, 1)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_recorded_loop_and_fd(name, target):
    f, plain, make, argnums = CASES[name]
    T = 11
    ref = grad(plain, argnums, target)(*make(T, 1))
    for s in (1, 3, 30):
        args = make(T, s)
        before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        assert f(*args) == pytest.approx(plain(*args), rel=1e-13)
        got = grad(f, argnums, target)(*args)
        for a, b in zip(args, before):
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b), "the gradient changed an input array"
        for k, i in enumerate(argnums):
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} s={s} argument {i}: checkpointed != recorded")
            fd = fd_array(lambda *a: f(*a), args, i)
            np.testing.assert_allclose(got[k], fd, rtol=1e-5, atol=1e-7,
                                       err_msg=f"{name} s={s} argument {i}: zyg != finite differences")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_matches_recorded_loop_and_reverse_mode(name, target):
    """Forward mode runs the step's jvp T times (nothing to checkpoint); the tangent equals
    <gradient, direction> from reverse mode (checked against the recorded loop and finite
    differences above)."""
    f, plain, make, argnums = CASES[name]
    args = make(7, 2)
    rng = np.random.default_rng(1)
    tans = [None] * len(args)
    for i in argnums:
        a = args[i]
        tans[i] = rng.standard_normal(a.shape) if isinstance(a, np.ndarray) else float(rng.standard_normal())
    y, ty = zyg.jvp(f, args, tuple(tans), target=target)
    assert y == pytest.approx(plain(*args), rel=1e-14)
    g = grad(f, argnums, target)(*args)
    assert ty == pytest.approx(sum(float(np.sum(gi * tans[i])) for gi, i in zip(g, argnums)), rel=1e-10)


def _runner(f):
    from zyg.api import ssa_of
    from zyg.nested.ckloop import CkLoop
    for blk in ssa_of(f).iter_blocks():
        for st in blk.stmts:
            if isinstance(st.expr.fn, CkLoop):
                return st.expr.fn.fn
    raise AssertionError("no checkpointed loop")


def _beta(c, r):
    return math.comb(c + r, r)


@pytest.mark.parametrize("T,s", [(1, 1), (2, 1), (7, 1), (40, 2), (100, 3), (1000, 5), (1000, 40)])
def test_schedule_recomputes_within_the_binomial_bound(T, s, monkeypatch):
    """The backward pass runs T recorded steps plus recomputations; with c = s - 1 free
    snapshots and r the least integer with C(c + r, r) >= T, no step runs more than r + 1
    times forward in the backward pass (Griewank and Walther), and the gradient is the
    recorded loop's.  The gradient calls the loop's compiled pair; the steps are counted
    on the run-time path (ZYG_NATIVE_LOOPS=0), which runs the same schedule's code and
    reports its count to Python."""
    args = (np.array([0.3, -0.6]), 1e-4, 0, T, s)
    g = grad(through_callee, 0, "cpu")(*args)
    ref = grad(through_callee_plain, 0, "cpu")(*args)
    np.testing.assert_allclose(g, ref, rtol=1e-12)
    monkeypatch.setenv("ZYG_NATIVE_LOOPS", "0")
    zyg.reset_caches()
    try:
        g0 = zyg.grad(through_callee, argnums=0, target="cpu")(*args)
        np.testing.assert_allclose(g0, g, rtol=1e-12)
        runner = _runner(through_callee)
        steps = runner.last_forward_steps
    finally:
        monkeypatch.delenv("ZYG_NATIVE_LOOPS")
        zyg.reset_caches()
    assert steps >= T, "every step must be run (recorded) once in the backward pass"
    if s == 1:
        assert steps == T * (T + 1) // 2, "one snapshot: step k is recomputed from the start"
        return
    c = s - 1
    r = 0
    while _beta(c, r) < T:
        r += 1
    assert steps <= (r + 1) * T, f"T={T} s={s}: {steps} steps > (r + 1) T = {(r + 1) * T}"
    if s >= T:
        assert steps <= 2 * T


def test_pullback_and_array_result():
    def run(u0, k, T):
        u = u0.copy()
        for t in zyg.checkpointed_range(T, snapshots=3):
            u = u + k * np.sin(u)
        return u
    u0 = np.array([0.1, 0.5, 1.0])
    dy = np.array([1.0, -2.0, 0.5])
    for target in TARGETS:
        y, back = zyg.pullback(run, u0, 0.3, 6, target=target)
        du, dk, dT = back(dy)
        assert dT is None
        np.testing.assert_allclose(y, run(u0, 0.3, 6), rtol=1e-14)
        np.testing.assert_allclose(du, fd_array(lambda u: float(np.dot(run(u, 0.3, 6), dy)), [u0], 0),
                                   rtol=1e-6)
        assert dk == pytest.approx(fd_array(lambda k: float(np.dot(run(u0, k, 6), dy)), [0.3], 0), rel=1e-6)


def float32_run(u0, k, T):
    u = u0.copy()
    for t in zyg.checkpointed_range(T, snapshots=2):
        u = u - k * np.tanh(u)
    r = 0.0
    for i in range(u.shape[0]):
        r += float(u[i]) ** 2
    return r


@pytest.mark.parametrize("target", TARGETS)
def test_float32_state(target):
    u0 = np.array([0.1, 0.5, 1.0], np.float32)
    k = np.array([0.25, 0.5, -0.1], np.float32)        # float32 * float32 stays float32 in numba
    g, gk = zyg.grad(float32_run, argnums=(0, 1), target=target)(u0, k, 5)
    assert g.dtype == np.float32 and gk.dtype == np.float32
    # the reference: finite differences of the same code run in float64; the float32
    # gradient differs from it by float32 rounding only
    x64 = [u0.astype(np.float64), k.astype(np.float64), 5]
    np.testing.assert_allclose(g, fd_array(float32_run, x64, 0), rtol=1e-4)
    np.testing.assert_allclose(gk, fd_array(float32_run, x64, 1), rtol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_zero_and_one_steps(target):
    for T in (0, 1):
        args = (np.array([0.3, -0.6]), 0.01, 4, 4 + T, 2)
        g = grad(through_callee, (0, 1), target)(*args)
        ref = grad(through_callee_plain, (0, 1), target)(*args)
        np.testing.assert_allclose(g[0], ref[0], rtol=1e-12)
        assert g[1] == pytest.approx(ref[1], abs=1e-15)


def test_outside_differentiated_code_it_is_range():
    assert list(zyg.checkpointed_range(4, snapshots=2)) == [0, 1, 2, 3]
    assert list(zyg.checkpointed_range(2, 5)) == [2, 3, 4]
    with pytest.raises(ValueError):
        zyg.checkpointed_range(3, snapshots=0)


# -- errors -------------------------------------------------------------------------------

def bad_return(x, T):
    for t in zyg.checkpointed_range(T):
        x = x * 2.0
        if x > 3.0:
            return x
    return x


def bad_break(x, T):
    for t in zyg.checkpointed_range(T):
        x = x * 2.0
        if x > 3.0:
            break
    return x


def bad_tuple(x, T):
    st = (x, x)
    for t in zyg.checkpointed_range(T):
        st = (st[1], st[0] * 0.5)
    return st[0]


def bad_undefined(x, T):
    for t in zyg.checkpointed_range(T):
        y = x * 2.0
    return y


def bad_complex(z, T):
    w = z * 1j
    for t in zyg.checkpointed_range(T):
        w = w * 0.5
    return w.real


@pytest.mark.parametrize("f,cls,msg", [
    (bad_return, UnsupportedSyntax, "'return' inside a checkpointed loop"),
    (bad_break, UnsupportedSyntax, "'break' out of a checkpointed loop"),
    (bad_tuple, TypeMismatch, "'st' is carried"),
    (bad_undefined, UnsupportedSyntax, "'y' is assigned in the checkpointed loop and used after"),
    (bad_complex, TypeMismatch, "'w' is carried"),
])
def test_errors_point_at_the_loop(f, cls, msg):
    with pytest.raises(cls) as e:
        zyg.grad(f, target="python")(0.5, 3)
    assert msg in str(e.value)
    assert e.value.filename == __file__
    assert e.value.lineno is not None


# -- the loop as a compiled pair (pullbacks/looppairs.py) ---------------------------------

def written_and_read_alias(x, T):
    a = x.copy()
    b = a
    for t in zyg.checkpointed_range(T, snapshots=2):
        a[0] = a[0] * 0.5 + b[1] * a[1]
    return np.sum(a * a)


def written_and_read_view(x, T):
    a = x.copy()
    b = a[1:]
    for t in zyg.checkpointed_range(T, snapshots=2):
        a[0] = a[0] * 0.5 + b[0] * a[1]
    return np.sum(a * a)


@pytest.mark.parametrize("f", [written_and_read_alias, written_and_read_view])
@pytest.mark.parametrize("target", TARGETS)
def test_a_written_array_read_under_another_name_is_refused(f, target):
    # the step took them as two operands: its recomputation from a snapshot read the other
    # name's current contents (a wrong gradient on the run-time path, before this check)
    with pytest.raises(UnsupportedSyntax, match="the loop writes into 'a' and reads 'b'"):
        zyg.grad(f, target=target)(np.array([0.3, 0.7]), 4)


def mixed_carried(u0, v0, k, T, s):
    """An array written in place, an array rebound, and a number, carried together."""
    u = u0.copy()
    v = v0
    e = 0.0
    for t in zyg.checkpointed_range(T, snapshots=s):
        for i in range(u.shape[0]):
            u[i] = u[i] + k * v[i]
        v = v * 0.9 - 0.1 * u
        e = e + np.sum(u * v)
    return e + np.sum(u * u)


@pytest.mark.parametrize("target", TARGETS)
def test_the_pair_equals_the_run_time_path(target, monkeypatch):
    """The gradient calls the loop's compiled pair; ZYG_NATIVE_LOOPS=0 calls the loop
    through Python as a function of values: equal on every case and on carried values of
    every sort (in place, rebound, numbers), and equal to finite differences."""
    rng = np.random.default_rng(4)
    cases = [(f, make(7, 3), argnums) for f, _, make, argnums in CASES.values()]
    cases.append((mixed_carried, (rng.normal(size=4), rng.normal(size=4), 0.3, 6, 2), (0, 1, 2)))
    pair = [zyg.grad(f, argnums=a, target=target)(*args) for f, args, a in cases]
    f, args, argnums = cases[-1]
    for k, i in enumerate(argnums):
        np.testing.assert_allclose(pair[-1][k], fd_array(f, args, i), rtol=1e-5, atol=1e-7)
    monkeypatch.setenv("ZYG_NATIVE_LOOPS", "0")
    zyg.reset_caches()
    try:
        for (f, args, a), want in zip(cases, pair):
            got = zyg.grad(f, argnums=a, target=target)(*args)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=f.__name__)
    finally:
        monkeypatch.delenv("ZYG_NATIVE_LOOPS")
        zyg.reset_caches()


def test_a_second_process_loads_it_from_the_disk_cache(tmp_path):
    """A checkpointed loop's gradient used to be compiled again in every process (its loop
    was called through Python); its pair is cached with it: the second process compiles
    nothing."""
    assert_second_process_compiles_nothing(tmp_path, """
import numpy as np, zyg
def ode(y0, k):
    y = y0.copy()
    for t in zyg.checkpointed_range(50, snapshots=4):
        y = y + 0.01 * (-k * y * y + np.sin(y))
    return np.sum(y)
g = zyg.grad(ode, argnums=(0, 1))(np.linspace(0.1, 1.0, 5), 0.3)
RESULT = (g[0].tolist(), g[1])
""", "ode")


def float32_weak_scalars(x, k):
    y = x.astype(np.float32)
    for t in zyg.checkpointed_range(3, snapshots=2):
        y = y * np.float32(0.5) + np.float32(0.25) + y[0] * np.float32(0.1)
    return float(np.sum(y * y)) * k


def float32_weak_scalars_plain(x, k):
    y = x.astype(np.float32)
    for t in range(3):
        y = y * np.float32(0.5) + np.float32(0.25) + y[0] * np.float32(0.1)
    return float(np.sum(y * y)) * k


@pytest.mark.parametrize("target", TARGETS)
def test_float32_numbers_in_the_step(target):
    # the step's placeholders of float32 numbers (np.float32 casts, elements of float32
    # arrays) were float64 zeros: numba typed the state float64 while zyg had float32, and
    # the checkpointed loop did not compile on cpu (on both paths)
    x = np.array([0.3, -0.5, 0.8])
    got = zyg.grad(float32_weak_scalars, argnums=1, target=target)(x, 1.5)
    want = zyg.grad(float32_weak_scalars_plain, argnums=1, target=target)(x, 1.5)
    assert got == pytest.approx(want, rel=1e-12)
    assert got == pytest.approx(float32_weak_scalars(x, 1.0), rel=1e-12)


def test_show_prints_the_loop_pair():
    with open(os.devnull, "w") as fh:
        text = zyg.show(particles, np.array([0.5, -1.0]), np.array([1.0, 0.3]), 0.05, 4, 2,
                        argnums=(0, 1, 2), file=fh)
    assert "=== compiled pair of the checkpointed_range loop" in text
    assert "_ck_rp(" in text and "_ck_ra(" in text
