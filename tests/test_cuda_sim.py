"""The cuda back end (issue 25, first slice): device gradients called from user kernels,
``zyg.vmap`` on cuda, cpu and python, tape bounding and overflow, refusals.

numba's CUDA simulator must be switched on before numba is imported, so the checks run in
one child process (``python tests/test_cuda_sim.py --run``) with ``NUMBA_ENABLE_CUDASIM=1``;
the rest of the suite is unaffected.  With ``ZYG_CUDA_DEVICE=1`` the child runs on the real
GPU instead (``scripts/cuda_device_check.py`` does that), and the kernels are compiled by
numba.cuda for real.  Each check is one pytest test here; the child reports every check's
outcome (and traceback) as JSON.  Simulated threads cost ~85 us each: grids stay <= 64.
"""
import json
import math
import os
import re
import subprocess
import sys
import traceback

import numpy as np
import numba

try:
    import pytest
except ImportError:         # the child (--run) needs no pytest: a GPU machine may lack it
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
#: numba.cuda, bound in the child before the checks run (kernels must find it as a global of
#: their module: the simulator swaps module globals that are numba.cuda)
cuda = None
ROOT = os.path.dirname(HERE)


# -- the functions differentiated (plain Python, as users write them) -----------------------

def bessel_j(z, nu):
    """J_nu(z) by its power series, summed until the terms stop mattering (a data-dependent
    while loop: the trip count depends on z)."""
    x = z / 2.0
    s = x ** nu
    for j in range(2, nu + 1):
        s /= j
    o = s
    k = 0
    while abs(s) > 1e-17 * abs(o):
        k += 1
        s *= -x * x / (k * (k + nu))
        o += s
    return o


def branchy(x, y):
    if x > 0.5:
        r = x * y + math.exp(-x)
    elif x > -0.5:
        r = math.sin(x) * y * y
    else:
        r = y / (1.0 + x * x)
    return r + 0.25 * x


def _sq(u):
    return u * u


def _poly(u, c):
    return c * _sq(u) + u


def with_helpers(x, c):
    return _poly(math.tanh(x), c) + _sq(x) * 0.5


def table_loop(x, a):
    s = 0.0
    for i in range(8):
        s = math.sin(s * x + a[i])
    return s


def nested_loops(x, y):
    acc = 0.0
    for i in range(3):
        t = x
        for j in range(4):
            t = t * y + math.cos(t + i)
        acc += t
    return acc


def runtime_loop(x, n):
    s = x
    for i in range(n):
        s = math.sin(s) + x * 0.5
    return s


def newton_sqrt(a, x0):
    """A counted loop left by break (the trip count is only bounded)."""
    x = x0
    for it in range(50):
        nx = 0.5 * (x + a / x)
        if abs(nx - x) < 1e-13:
            x = nx
            break
        x = nx
    return x * x0


def while_break(x, limit):
    """A while True loop with break and continue, and a data-dependent trip count."""
    s = x
    k = 0
    while True:
        k += 1
        if k % 3 == 0:
            s = s * 0.5
            continue
        s = math.sin(s) + x
        if s > limit or k > 40:
            break
    return s


def many_branches(x, y):
    """Enough blocks that the cpu target splits its gradient in two functions."""
    r = 0.0
    if x > 0.1:
        r += x * y
    if x > 0.2:
        r += math.sin(x)
    if x > 0.3:
        r += x * x * y
    if y > 0.4:
        r += math.cos(y * x)
    if x > 0.5:
        r += math.exp(-x)
    if y > 0.6:
        r += y / (1.0 + x)
    if x > 0.7:
        r += x ** 3
    if y > 0.8:
        r += math.tanh(x + y)
    if x + y > 0.9:
        r += math.sqrt(x + y)
    return r


def long_loop(x):
    """A counted loop too long for an exactly sized local tape (20,000 pushes)."""
    s = 0.0
    for i in range(20000):
        s = math.sin(s + x)
    return s


def allocates(x):
    return float(np.sum(np.ones(3) * x))


def writes(x, a):
    a[0] = x
    return a[0] * x


def returns_array(x, a):
    return a * x


def recursive(x, n):
    if n == 0:
        return x
    return math.sin(recursive(x, n - 1))


def two_arg_while(x, y):
    """Two arguments and a data-dependent while loop (forward mode under ``auto``)."""
    s = x
    k = 0
    while s < 10.0 and k < 200:
        s = s * (1.0 + y) + 0.1 * math.sin(x)
        k += 1
    return s * y + k


def five_arg_while(a, b, c, d, e):
    """Five arguments: reverse mode under ``auto``, however long the tape."""
    s = a
    while s < 5.0:
        s = s * (1.0 + b * b) + c * d + e
    return s


def zero_times_inf(x, y):
    """0 * inf inside: sqrt's derivative at 0, multiplied by a zero (co)tangent."""
    return x * y + 0.0 * math.sqrt(y - y)


def zero_weight(w, y):
    """w * sqrt(y) at w = y = 0: an infinite partial times a zero one."""
    return w * math.sqrt(y) + w * y


SCALE = 2.0


def scaled_square(x):
    """Reads the module global SCALE (rebound by check_vmap_sees_rebound_globals)."""
    return x * x * SCALE


def softclip(x):
    return x / (1.0 + abs(x))


def uses_softclip(x, y):
    return softclip(x * y) + x


# -- the checks (run in the child) ------------------------------------------------------------

def _fd(f, args, i, h=1e-6):
    up = list(args)
    dn = list(args)
    up[i] += h
    dn[i] -= h
    return (f(*up) - f(*dn)) / (2 * h)


def _close(a, b, tol, what=""):
    import numpy as np
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    err = np.max(np.abs(a - b) / (1.0 + np.abs(b)))
    assert err <= tol, f"{what}: max rel error {err:.3e} > {tol:.1e}\n{a}\n{b}"


class _mode:
    """Device gradients of numbers built in this mode inside the block
    (``zyg.cuda.set_gradient_mode``): the checks of the reverse sweep's per-thread tape
    ask for ``reverse``, since ``auto`` takes forward mode for one argument."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        import zyg
        self.old = zyg.cuda.gradient_mode()
        zyg.cuda.set_gradient_mode(self.mode)

    def __exit__(self, *exc):
        import zyg
        zyg.cuda.set_gradient_mode(self.old)


def _launch(kern, n, *args):
    threads = min(64, n)
    kern[(n + threads - 1) // threads, threads](*args)


def check_branches_tuple_argnums():
    import numpy as np
    import zyg
    dg = zyg.grad(branchy, argnums=(0, 1), target="cuda")

    @cuda.jit
    def k(xs, ys, gx, gy):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            a, b = dg(xs[i], ys[i])
            gx[i] = a
            gy[i] = b
    xs = np.linspace(-1.5, 1.5, 24)
    ys = np.linspace(0.3, 2.0, 24)
    gx, gy = np.zeros(24), np.zeros(24)
    _launch(k, 24, xs, ys, gx, gy)
    cpu = zyg.grad(branchy, argnums=(0, 1))
    ref = np.array([cpu(float(x), float(y)) for x, y in zip(xs, ys)])
    _close(gx, ref[:, 0], 1e-12, "d/dx vs cpu")
    _close(gy, ref[:, 1], 1e-12, "d/dy vs cpu")
    fd = np.array([_fd(branchy, [float(x), float(y)], 0) for x, y in zip(xs, ys)])
    _close(gx, fd, 1e-6, "d/dx vs finite differences")


def check_helpers_value_and_grad():
    import numpy as np
    import zyg
    vg = zyg.value_and_grad(with_helpers, target="cuda")

    @cuda.jit
    def k(xs, c, v, g):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            v[i], g[i] = vg(xs[i], c)
    xs = np.linspace(-2, 2, 16)
    v, g = np.zeros(16), np.zeros(16)
    _launch(k, 16, xs, 0.7, v, g)
    _close(v, [with_helpers(float(x), 0.7) for x in xs], 1e-14, "value")
    _close(g, [_fd(with_helpers, [float(x), 0.7], 0) for x in xs], 1e-6, "gradient vs fd")


def check_counted_loop_static_tape():
    with _mode("reverse"):
        _counted_loop_static_tape()


def _counted_loop_static_tape():
    import numpy as np
    import zyg
    from zyg import backends
    from zyg.cuda import build
    dg = zyg.grad(table_loop, target="cuda")

    @cuda.jit
    def k(xs, a, g):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            g[i] = dg(xs[i], a)
    a = np.linspace(0.1, 0.9, 8)
    xs = np.linspace(-1, 1, 16)
    g = np.zeros(16)
    _launch(k, 16, xs, cuda.to_device(a), g)
    cpu = zyg.grad(table_loop)
    _close(g, [cpu(float(x), a) for x in xs], 1e-12, "vs cpu")
    _close(g, [_fd(table_loop, [float(x), a], 0) for x in xs], 1e-6, "vs fd")
    # 8 iterations of two pushes (header counted once more): a local array of exactly 18,
    # no overflow test on the stores
    b = build(table_loop, ["float", "f8[1]"], 0, backends.get("cuda"))
    text = open(b.path).read()
    assert "cuda.local.array(18, np.float64)" in text, text
    assert " if _fsp + 0 < " not in text


def check_nested_counted_loops():
    import numpy as np
    import zyg
    xs = np.linspace(-0.8, 0.8, 12)
    ys = np.linspace(0.2, 0.9, 12)
    gc = zyg.vmap(zyg.grad(nested_loops, argnums=(0, 1)), target="cuda")(xs, ys)
    gp = zyg.vmap(zyg.grad(nested_loops, argnums=(0, 1)), target="cpu")(xs, ys)
    _close(gc[0], gp[0], 1e-12, "dx")
    _close(gc[1], gp[1], 1e-12, "dy")
    _close(gc[1], [_fd(nested_loops, [float(x), float(y)], 1) for x, y in zip(xs, ys)], 1e-6, "fd")


def check_bessel_while_loop():
    import numpy as np
    import zyg
    dj = zyg.grad(bessel_j, target="cuda")
    vj = zyg.value_and_grad(bessel_j, target="cuda")

    @cuda.jit
    def k(z, nu, g, v, g2):
        i = cuda.grid(1)
        if i < z.shape[0]:
            g[i] = dj(z[i], nu)
            v[i], g2[i] = vj(z[i], nu)
    z = np.linspace(0.05, 12.0, 40)
    g, v, g2 = np.zeros(40), np.zeros(40), np.zeros(40)
    _launch(k, 40, z, 2, g, v, g2)
    cpu = zyg.grad(bessel_j)
    _close(g, [cpu(float(x), 2) for x in z], 1e-12, "vs cpu")
    _close(g, [_fd(bessel_j, [float(x), 2], 0) for x in z], 1e-6, "vs fd")
    _close(g2, g, 0, "value_and_grad's gradient")
    _close(v, [bessel_j(float(x), 2) for x in z], 1e-14, "value")
    # J2' = (J1 - J3) / 2
    from math import factorial
    def series(x, n):
        return sum((-1) ** m / (factorial(m) * factorial(m + n)) * (x / 2) ** (2 * m + n)
                   for m in range(60))
    _close(g, [(series(x, 1) - series(x, 3)) / 2 for x in z], 1e-9, "vs the identity")


def check_tape_overflow():
    with _mode("reverse"):
        _tape_overflow()


def _tape_overflow():
    import numpy as np
    import zyg
    old = zyg.cuda.tape_size()
    zyg.cuda.set_tape_size(8)          # Bessel needs ~3 items per term: too small
    try:
        vj = zyg.value_and_grad(bessel_j, target="cuda")

        @cuda.jit
        def k(z, v, g):
            i = cuda.grid(1)
            if i < z.shape[0]:
                v[i], g[i] = vj(z[i], 2)
        z = np.array([0.01, 3.0, 8.0, 10.0])
        v, g = np.zeros(4), np.zeros(4)
        _launch(k, 4, z, v, g)
        # the value is right; the gradient of a run whose tape overflowed is NaN, never wrong
        _close(v, [bessel_j(float(x), 2) for x in z], 1e-14, "value on overflow")
        assert np.isnan(g[1:]).all(), g
        ref = np.array([zyg.grad(bessel_j)(float(x), 2) for x in z])
        assert np.isnan(g[0]) or abs(g[0] - ref[0]) < 1e-12
        # vmap relaunches with a tape large enough: its rows in buffers passed in, built
        # once (a batch needing more room gets larger buffers and the same kernel)
        vg = zyg.vmap(zyg.grad(bessel_j), target="cuda")
        rooms, made = [], zyg.cuda.tape_rows
        zyg.cuda.tape_rows = lambda st, room, n: rooms.append(room) or made(st, room, n)
        try:
            gv = vg(z, 2)
            _close(gv, ref, 1e-12, "vmap after relaunch")
            kernels = dict(vg._zyg_batch.kernels)
            assert any(got[0][3] for got in kernels.values()), "a batch with the tape's rows"
            zb = np.array([0.01, 30.0, 60.0])            # longer series: more room
            _close(vg(zb, 2), [zyg.grad(bessel_j)(float(x), 2) for x in zb], 1e-9,
                   "vmap, larger rows")
            assert vg._zyg_batch.kernels.keys() == kernels.keys(), "compiled again for more room"
            assert len(rooms) >= 2 and rooms[-1] > rooms[0], rooms
        finally:
            zyg.cuda.tape_rows = made
        keep, keep_rows = zyg.cuda.MAX_TAPE_SIZE, zyg.cuda.ROW_BYTES
        zyg.cuda.MAX_TAPE_SIZE, zyg.cuda.ROW_BYTES = 16, 0      # no rows: local tapes
        try:
            zyg.vmap(zyg.grad(bessel_j), target="cuda")(np.array([10.0]), 2)
        except zyg.cuda.TapeOverflowError as e:
            assert "too small" in str(e)
        else:
            raise AssertionError("no TapeOverflowError past MAX_TAPE_SIZE")
        finally:
            zyg.cuda.MAX_TAPE_SIZE, zyg.cuda.ROW_BYTES = keep, keep_rows
    finally:
        zyg.cuda.set_tape_size(old)


def check_runtime_bound_loop():
    for mode in ("reverse", "auto"):
        with _mode(mode):
            _runtime_bound_loop(mode)


def _runtime_bound_loop(mode):
    import numpy as np
    import zyg
    from zyg import backends
    from zyg.cuda import build
    if mode == "auto":          # forward mode: no tape to check
        assert build(long_loop, ["float"], 0, backends.get("cuda")).mode == "forward"
        xs = np.array([0.3, 0.7])
        _close(zyg.vmap(zyg.grad(long_loop), target="cuda")(xs),
               zyg.vmap(zyg.grad(long_loop), target="cpu")(xs), 1e-12, "long loop, forward")
        return
    # a constant bound too large for local memory: the checked tape, grown by vmap
    text = open(build(long_loop, ["float"], 0, backends.get("cuda")).path).read()
    assert "cuda.local.array(256, np.float64)" in text and " if _fsp + 0 < 255 else 255]" in text
    xs = np.array([0.3, 0.7])
    _close(zyg.vmap(zyg.grad(long_loop), target="cuda")(xs),
           zyg.vmap(zyg.grad(long_loop), target="cpu")(xs), 1e-12, "long loop")
    xs = np.linspace(-1, 1, 10)
    for n in (0, 3, 50):
        gc = zyg.vmap(zyg.grad(runtime_loop), target="cuda")(xs, n)
        gp = zyg.vmap(zyg.grad(runtime_loop), target="cpu")(xs, n)
        _close(gc, gp, 1e-12, f"n={n}")


def check_break_and_continue():
    import numpy as np
    import zyg
    a = np.linspace(0.5, 9.0, 12)
    gc = zyg.vmap(zyg.grad(newton_sqrt, argnums=(0, 1)), target="cuda")(a, np.full(12, 1.5))
    gp = zyg.vmap(zyg.grad(newton_sqrt, argnums=(0, 1)), target="cpu")(a, np.full(12, 1.5))
    _close(gc[0], gp[0], 1e-12, "newton d/da vs cpu")
    _close(gc[1], gp[1], 1e-12, "newton d/dx0 vs cpu")
    _close(gc[0], [_fd(newton_sqrt, [float(v), 1.5], 0) for v in a], 1e-6, "newton vs fd")
    xs = np.linspace(0.1, 1.2, 12)
    gc = zyg.vmap(zyg.grad(while_break), target="cuda")(xs, 1.8)
    gp = zyg.vmap(zyg.grad(while_break), target="cpu")(xs, 1.8)
    _close(gc, gp, 1e-12, "while/break/continue vs cpu")
    _close(gc, [_fd(while_break, [float(x), 1.8], 0) for x in xs], 1e-5, "while/break vs fd")


def check_many_blocks():
    import numpy as np
    import zyg
    xs = np.linspace(0.05, 1.0, 11)
    ys = np.linspace(1.0, 0.3, 11)
    ref = [_fd(many_branches, [float(x), float(y)], 0) for x, y in zip(xs, ys)]
    for target in ("cuda", "cpu", "python"):
        g = zyg.vmap(zyg.grad(many_branches), target=target)(xs, ys)
        _close(g, ref, 1e-6, target)


def check_vmap_targets_agree():
    import numpy as np
    import zyg
    z = np.linspace(0.1, 6.0, 33)
    ref = np.array([zyg.grad(bessel_j)(float(x), 2) for x in z])
    for target in ("cuda", "cpu", "python"):
        g = zyg.vmap(zyg.grad(bessel_j), target=target)(z, 2)
        assert isinstance(g, np.ndarray) and g.shape == (33,), (target, type(g))
        _close(g, ref, 1e-12, target)
        v, g2 = zyg.vmap(zyg.value_and_grad(bessel_j), target=target)(z, 2)
        _close(v, [bessel_j(float(x), 2) for x in z], 1e-14, target + " values")
        _close(g2, ref, 1e-12, target + " value_and_grad")
        vals = zyg.vmap(bessel_j, target=target)(z, 2)          # a plain function: its values
        _close(vals, v, 1e-14, target + " plain")
    # explicit in_axes: the table shared, the points mapped; a grad of the cuda target too
    a = np.linspace(0.1, 0.9, 8)
    xs = np.linspace(-1, 1, 9)
    g1 = zyg.vmap(zyg.grad(table_loop, target="cuda"), in_axes=(0, None), target="cuda")(xs, a)
    g2 = zyg.vmap(zyg.grad(table_loop), target="cpu")(xs, a)
    _close(g1, g2, 1e-12, "in_axes")
    # per-item rows of a 2-D array, mapped where the function indexes a 1-D array
    rows = np.stack([a * (1 + 0.1 * k) for k in range(9)])
    g3 = zyg.vmap(zyg.grad(table_loop), in_axes=(0, 0), target="cuda")(xs, rows)
    g4 = np.array([zyg.grad(table_loop)(float(x), r.copy()) for x, r in zip(xs, rows)])
    _close(g3, g4, 1e-12, "mapped rows")
    g5 = zyg.vmap(zyg.grad(table_loop), target="cpu")(xs, rows)      # inferred: rows mapped
    _close(g5, g4, 1e-12, "mapped rows, inferred")
    # device arrays in, device arrays out
    gd = zyg.vmap(zyg.grad(bessel_j), target="cuda")(cuda.to_device(z), 2)
    assert not isinstance(gd, np.ndarray)
    _close(gd.copy_to_host(), ref, 1e-12, "device arrays")


def check_forward_mode():
    """Device gradients of numbers in forward mode (``zyg.cuda.set_gradient_mode``): which
    mode ``auto`` takes, and every mode's gradient equal to the cpu target's."""
    import numpy as np
    import zyg
    from zyg import backends
    from zyg.cuda import build

    def mode_of(f, kinds, argnums):
        return build(f, kinds, argnums, backends.get("cuda")).mode
    assert zyg.cuda.gradient_mode() == "auto"
    ff = ["float", "float"]
    assert mode_of(bessel_j, ["float", "int"], 0) == "forward"          # one argument
    assert mode_of(two_arg_while, ff, (0, 1)) == "forward"              # an unbounded tape
    assert mode_of(nested_loops, ff, (0, 1)) == "reverse"               # a short bounded tape
    assert mode_of(branchy, ff, (0, 1)) == "reverse"
    assert mode_of(five_arg_while, ["float"] * 5, (0, 1, 2, 3, 4)) == "reverse"   # > FORWARD_MAX
    with _mode("forward"):
        assert mode_of(branchy, ff, (0, 1)) == "forward"
    with _mode("reverse"):
        assert mode_of(bessel_j, ["float", "int"], 0) == "reverse"
    try:
        zyg.cuda.set_gradient_mode("sideways")
    except ValueError as e:
        assert "sideways" in str(e)
    else:
        raise AssertionError("no ValueError for an unknown mode")
    assert zyg.cuda.gradient_mode() == "auto"

    xs = np.linspace(0.2, 1.4, 9)
    ys = np.linspace(0.05, 0.6, 9)
    cases = [(two_arg_while, (0, 1), (xs, ys)), (branchy, (0, 1), (xs - 0.7, ys)),
             (zero_times_inf, (0, 1), (xs, ys)), (zero_times_inf, 1, (xs, ys)),
             (five_arg_while, (0, 1, 2, 3, 4), (xs, ys, ys, ys, ys)),
             # w = 0 at even items, y = 0 at items 2 and 6 (finite gradients throughout)
             (zero_weight, (0, 1), (xs * (np.arange(9) % 2),
                                    ys * (np.arange(9) % 2 + (np.arange(9) % 4 == 0)))),
             (bessel_j, 0, (xs * 8, np.full(9, 2, np.int64)))]
    for f, argnums, args in cases:
        ref = zyg.vmap(zyg.value_and_grad(f, argnums=argnums), target="cpu")(*args)
        for mode in ("forward", "reverse", "auto"):
            with _mode(mode):
                v, g = zyg.vmap(zyg.value_and_grad(f, argnums=argnums), target="cuda")(*args)
            what = f"{f.__name__} {argnums} {mode}"
            _close(v, ref[0], 1e-14, what + " value")
            for a, b in zip(g if isinstance(argnums, tuple) else [g],
                            ref[1] if isinstance(argnums, tuple) else [ref[1]]):
                assert np.isfinite(a).all(), what
                _close(a, b, 1e-12, what)
    # 0 * inf: the zero tangent contributes nothing, as a zero cotangent does on cpu
    _close(zyg.vmap(zyg.grad(zero_times_inf, argnums=1), target="cuda")(xs, ys), xs, 0, "0 * inf")
    _close([_fd(two_arg_while, [float(x), float(y)], 1) for x, y in zip(xs, ys)],
           zyg.vmap(zyg.grad(two_arg_while, argnums=1), target="cuda")(xs, ys), 1e-5, "fd")

    # from a user's kernel: value and a tuple of gradients, in forward mode
    vg = zyg.value_and_grad(two_arg_while, argnums=(0, 1), target="cuda")

    @cuda.jit
    def k(x, y, v, gx, gy):
        i = cuda.grid(1)
        if i < x.shape[0]:
            r = vg(x[i], y[i])
            v[i] = r[0]
            gx[i] = r[1][0]
            gy[i] = r[1][1]
    v, gx, gy = np.zeros(9), np.zeros(9), np.zeros(9)
    _launch(k, 9, xs, ys, v, gx, gy)
    cpu = zyg.vmap(zyg.value_and_grad(two_arg_while, argnums=(0, 1)), target="cpu")(xs, ys)
    _close(v, cpu[0], 1e-14, "kernel value")
    _close(gx, cpu[1][0], 1e-12, "kernel d/dx")
    _close(gy, cpu[1][1], 1e-12, "kernel d/dy")

    # a custom rule whose pullback is not one expression: no forward rule, so auto builds
    # reverse mode and forward mode says why it cannot
    @zyg.adjoint(softclip)
    def _(x):
        y = softclip(x)

        def back(dy):
            d = 1.0 + abs(x)
            return (dy / (d * d),)
        return y, back
    try:
        assert mode_of(uses_softclip, ff, 0) == "reverse"
        g = zyg.vmap(zyg.grad(uses_softclip), target="cuda")(xs - 0.5, ys)
        _close(g, zyg.vmap(zyg.grad(uses_softclip), target="cpu")(xs - 0.5, ys), 1e-14, "rule")
        with _mode("forward"):
            try:
                build(uses_softclip, ff, 0, backends.get("cuda"))
            except zyg.NoAdjoint as e:
                assert "forward rule" in str(e), str(e)
            else:
                raise AssertionError("forward mode built through a rule without a forward rule")
    finally:
        from zyg.rules.registry import reset_user_rules
        reset_user_rules()


def check_vmap_sees_rebound_globals():
    """A global rebound between two calls of the same batch: the second call uses the new
    value (the gradient and the batch kernel are built again), on every target and mode."""
    import numpy as np
    import zyg
    global SCALE
    xs = np.array([1.0, 2.0, -0.5])
    for target, mode in [("cuda", "forward"), ("cuda", "reverse"), ("cpu", None),
                         ("python", None)]:
        with _mode(mode or "auto"):
            vg = zyg.vmap(zyg.value_and_grad(scaled_square), target=target)
            plain = zyg.vmap(scaled_square, target=target)
            for scale in (2.0, 5.0, 2.0):
                SCALE = scale
                v, g = vg(xs)
                _close(v, scale * xs * xs, 1e-15, f"{target} {mode} value, SCALE={scale}")
                _close(g, 2 * scale * xs, 1e-15, f"{target} {mode} gradient, SCALE={scale}")
                _close(plain(xs), scale * xs * xs, 1e-15, f"{target} plain, SCALE={scale}")
    SCALE = 2.0


def check_refusals():
    import numpy as np
    import zyg
    from zyg import backends
    from zyg.cuda import build
    cu = backends.get("cuda")
    cases = [
        (allocates, ["float"], 0, zyg.UnsupportedSyntax, "cannot allocate"),
        (writes, ["float", "f8[1]"], 0, zyg.UnsupportedSyntax, "writing into an array"),
        (returns_array, ["float", "f8[1]"], 0, zyg.ZygError, "scalar"),
        (recursive, ["float", "int"], 0, zyg.UnsupportedSyntax, "recursion"),
        (table_loop, ["float", "f8[1]"], 1, zyg.TypeMismatch, "float arguments"),
    ]
    for f, kinds, argnums, exc, words in cases:
        try:
            build(f, kinds, argnums, cu)
        except exc as e:
            assert words in str(e), (f.__name__, str(e))
            if exc is zyg.UnsupportedSyntax and f is not returns_array:
                assert e.lineno is not None and e.filename.endswith("test_cuda_sim.py"), str(e)
        else:
            raise AssertionError(f"{f.__name__} was not refused")
    # host entry points refuse the device target; no second derivatives on it
    for call in (lambda: zyg.pullback(branchy, 1.0, 2.0, target="cuda"),
                 lambda: zyg.jvp(branchy, (1.0, 2.0), (1.0, 0.0), target="cuda"),
                 lambda: zyg.hessian(branchy, target="cuda")(1.0, 2.0)):
        try:
            call()
        except ValueError as e:
            assert "device functions" in str(e), str(e)
        else:
            raise AssertionError("a host entry point accepted target='cuda'")
    try:
        zyg.grad(zyg.grad(branchy), target="cuda")
    except zyg.UnsupportedSyntax as e:
        assert "second derivative" in str(e)
    else:
        raise AssertionError("a device gradient of a gradient was not refused")
    # the same refusal through vmap, before anything is launched
    try:
        zyg.vmap(zyg.grad(allocates), target="cuda")(np.ones(4))
    except zyg.UnsupportedSyntax as e:
        assert "np.ones" in str(e)
    else:
        raise AssertionError("vmap of an allocating function was not refused")


# -- adjoints of whole kernels: zyg.vjp(kernel) ------------------------------------------------
# written as numba.cuda users write kernels; wrapped with cuda.jit in the checks (cuda is bound
# only in the child)

def k_map(x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = math.sin(x[i]) * x[i]


def k_stencil(u, out, n):
    """Neighbour reads: the shadow of u takes atomic additions from three threads."""
    i = cuda.grid(1)
    if i > 0 and i < n - 1:
        out[i] = u[i - 1] - 2.0 * u[i] + u[i + 1] * u[i]


def k_inplace(x, w, n, m):
    """Writes read back and overwritten in a loop: rewound by the adjoint."""
    i = cuda.grid(1)
    if i < n:
        for k in range(m):
            t = x[i]
            s = t * w[k]
            if s > 0:
                x[i] = s + math.cos(t)
            else:
                x[i] = 0.5 * t


def k_scatter(x, idx, acc, n):
    """cuda.atomic.add into a histogram with repeated bins."""
    i = cuda.grid(1)
    if i < n:
        cuda.atomic.add(acc, idx[i], x[i] * x[i])


def _bump(a, b):
    return a * math.exp(-b * b)


def k_loops(x, w, y, n, m):
    """An early return, a helper, a counted while loop, a data-dependent while loop."""
    i = cuda.grid(1)
    if i >= n:
        return
    s = 0.0
    k = 0
    while k < m:
        s += _bump(w[k], x[i] - 0.1 * k)
        k += 1
    t = x[i]
    while abs(t) > 1e-3:
        t *= 0.5
    y[i] = s + t


def k_grid2(a, b, n, m):
    i, j = cuda.grid(2)
    if i < n and j < m:
        b[i, j] = a[i, j] * a[j % n, i % m] + math.tanh(a[i, j])


def k_grid2_loop(a, w, b, n, m, K):
    """A 2-D grid, a loop of a trip count known at run time, a shared parameter (w)."""
    i, j = cuda.grid(2)
    if i < n and j < m:
        s = 0.0
        for k in range(K):
            s = math.sin(s * a[i, j] + w[k])
        b[i, j] = s


def k_shared(x, y, n):
    """A tile in shared memory read at the neighbour's element after a barrier, with a
    data-dependent loop before it (its tape may overflow: the block skips its adjoint
    together)."""
    s = cuda.shared.array(16, numba.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    v = 0.0
    if i < n:
        v = x[i]
        while abs(v) > 0.05:
            v *= 0.5
        s[t] = x[i] * x[i] + v
    else:
        s[t] = 0.0
    cuda.syncthreads()
    if i < n and t < 15:
        y[i] = s[t] * math.sin(s[t + 1]) + x[i]


def k_shared_2d(a, out, n):
    """A 2-D tile and three barriers: a transpose through shared memory, then the sum of
    each tile row by the row's first thread."""
    tile = cuda.shared.array((4, 4), numba.float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i, j = cuda.grid(2)
    if i < n and j < n:
        tile[tx, ty] = a[i, j] * a[i, j]
    else:
        tile[tx, ty] = 0.0
    cuda.syncthreads()
    w = tile[ty, tx]
    cuda.syncthreads()
    tile[tx, ty] = math.exp(w * 0.1)
    cuda.syncthreads()
    if ty == 0 and i < n:
        acc = 0.0
        for k in range(4):
            acc += tile[tx, k]
        out[i, cuda.blockIdx.y] = acc


def mix_nll(mu, w, x):
    """A Gaussian mixture's negative log-likelihood of one point: every thread reads the
    same parameters (their shadows take atomic additions)."""
    m = -1e300
    for k in range(mu.shape[0]):
        d = x - mu[k]
        m = max(m, -0.5 * d * d)
    s = 0.0
    for k in range(mu.shape[0]):
        d = x - mu[k]
        s += w[k] * math.exp(-0.5 * d * d - m)
    return -(m + math.log(s))


def row_energy(r, c):
    """A function of one row, which it also scales in place (the write is rewound by the
    adjoint, then done again)."""
    e = 0.0
    for k in range(r.shape[0]):
        r[k] = r[k] * c
        e += math.sin(r[k]) * r[k]
    return e


def k_gmm(xs, mu, logw, out, n, K, d):
    """A mixture's log-likelihood per point: every thread reads all of mu and logw (shared
    parameters: their shadows are summed per block in shared memory)."""
    i = cuda.grid(1)
    if i >= n:
        return
    m = -1e300
    for k in range(K):
        q = 0.0
        for j in range(d):
            r = xs[i, j] - mu[k, j]
            q += r * r
        m = max(m, logw[k] - 0.5 * q)
    s = 0.0
    for k in range(K):
        q = 0.0
        for j in range(d):
            r = xs[i, j] - mu[k, j]
            q += r * r
        s += math.exp(logw[k] - 0.5 * q - m)
    out[i] = m + math.log(s)


def k_block_sum(x, w, out, n):
    """A local scratch array, then a shared-memory tree reduction: barriers in a loop whose
    trip count is the same for every thread, and one atomic addition per block."""
    sh = cuda.shared.array(16, numba.float64)
    scratch = cuda.local.array(3, numba.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    v = 0.0
    if i < n:
        for k in range(3):
            scratch[k] = x[i] * w[k]
        for k in range(3):
            v += math.sin(scratch[k]) * scratch[(k + 1) % 3]
    sh[t] = v
    cuda.syncthreads()
    s = 8
    while s > 0:
        if t < s:
            sh[t] += sh[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, sh[0])


SCALE = 2.0


def k_global(x, y, n):
    """Reads a module global, which the user may rebind between launches."""
    i = cuda.grid(1)
    if i < n:
        y[i] = SCALE * x[i] * x[i]


def k_refused_sync(x, n):
    i = cuda.grid(1)
    if i < n:
        cuda.syncthreads()
        x[i] = 2.0 * x[i]


def _kernel_directional(kern, cfg, args, k, bars, v, h=1e-6):
    """Central difference of sum(bars[o] * out_o) after a launch, along ``v`` in argument k
    (simulated launches are slow: a few directions check a shadow, not one per element)."""
    import numpy as np
    vals = []
    for sgn in (1, -1):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        a[k] = a[k] + sgn * h * v
        kern[cfg](*a)
        vals.append(sum(float(np.sum(a[o] * b)) for o, b in bars.items()))
    return (vals[0] - vals[1]) / (2 * h)


def _kernel_case(plain, cfg, args, bars, tol=1e-6):
    """Launch zyg.vjp(kernel) with shadows seeded from ``bars`` (argument -> cotangent of its
    final contents); compare every float array's shadow with central differences of the
    kernel, and the arrays the adjoint leaves with a launch of the kernel."""
    import numpy as np
    import zyg
    kern = cuda.jit(plain)
    dk = zyg.vjp(kern)
    own = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    full, shadows = [], {}
    for i, a in enumerate(own):
        full.append(a)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            shadows[i] = np.array(bars[i], dtype=a.dtype) if i in bars else np.zeros_like(a)
            full.append(shadows[i])
    dk[cfg](*full)
    ref = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    kern[cfg](*ref)
    for i, a in enumerate(own):
        if isinstance(a, np.ndarray):
            _close(a, ref[i], 1e-12, f"{plain.__name__}: argument {i} after the adjoint")
    rng = np.random.default_rng(5)
    for i in shadows:
        # the cotangent of the contents before (d/d(before) of sum(bar * after)), along
        # three random directions and the unit vector of the largest entry
        dirs = [rng.normal(size=args[i].shape) for _ in range(3)]
        e = np.zeros(args[i].shape)
        e.flat[int(np.argmax(np.abs(shadows[i])))] = 1.0
        for v in dirs + [e]:
            fd = _kernel_directional(kern, cfg, args, i, bars, v)
            _close(np.array([float(np.sum(shadows[i] * v))]), np.array([fd]), tol,
                   f"{plain.__name__}: shadow of argument {i} along a direction")
    assert any(np.any(shadows[i] != 0) for i in shadows), f"{plain.__name__}: every shadow is zero"
    return dk


def check_kernel_adjoints():
    import numpy as np
    rng = np.random.default_rng(7)
    n = 20
    x = rng.normal(size=n)
    _kernel_case(k_map, (2, 16), [x, np.zeros(n), n], {1: rng.normal(size=n)})
    _kernel_case(k_stencil, (2, 16), [x, np.zeros(n), n], {1: rng.normal(size=n)})
    _kernel_case(k_inplace, (2, 16), [x * 0.3, rng.normal(size=3), n, 3], {0: rng.normal(size=n)})
    idx = rng.integers(0, 4, size=n)
    _kernel_case(k_scatter, (2, 16), [x, idx, np.zeros(4), n], {2: rng.normal(size=4)})
    a = rng.normal(size=(4, 5))
    _kernel_case(k_grid2, ((2, 3), (2, 2)), [a, np.zeros((4, 5)), 4, 5], {1: rng.normal(size=(4, 5))})


def check_kernel_block_staged_shadows():
    """Shared parameters' shadows staged per block (the launcher decides from the kernel's
    SSA: never written, read at indices independent of the thread); the points' shadow is
    not staged (read at the thread's row)."""
    import numpy as np
    from zyg import cuda_kernel as ck
    rng = np.random.default_rng(4)
    n, K, d = 40, 3, 2
    kinds = ["f8[2]", "f8[2]", "f8[1]", "f8[1]", "int", "int", "int"]
    assert ck.shared_parameters(k_gmm, kinds) == [1, 2], ck.shared_parameters(k_gmm, kinds)
    _kernel_case(k_gmm, (3, 16), [rng.normal(size=(n, d)), rng.normal(size=(K, d)),
                                 rng.normal(size=K), np.zeros(n), n, K, d], {3: rng.normal(size=n)})
    staged = [b for key, b in ck._BUILT.items() if key[0] is k_gmm]
    assert staged and all(b.staged == [1, 2] for b in staged), [b.staged for b in staged]
    # 9 shadow items: each thread adds into a copy of its own, summed once per block
    assert 16 in {b.block for b in staged}, [b.block for b in staged]
    # the points are read in the thread's own row (xs[i, j], i = cuda.grid(1)): plain
    # additions (out is only written: nothing is added into its shadow by reads)
    assert ck.private_parameters(k_gmm, kinds) == [0, 3], ck.private_parameters(k_gmm, kinds)
    assert all(b.private == [0, 3] for b in staged), [b.private for b in staged]
    # neighbour reads are not private; a 2-D launch never is
    assert ck.private_parameters(k_stencil, ["f8[1]", "f8[1]", "int"]) == [1]     # u[i - 1]: not u
    assert ck.private_parameters(k_map, ["f8[1]", "f8[1]", "int"]) == [0, 1]


def check_kernel_block_sums_of_copies():
    """The staged shadows summed from each thread's own copy (``build(block=...)``) equal
    those added atomically into shared memory, on a block of 12 threads (not a power of
    two, a partial block at the end of the grid) and sums 2 entries at a time (chunks of 2
    over 6 entries of mu and 3 of logw: a last chunk of one entry), float64 and float32;
    against finite differences too (``_kernel_case``)."""
    import numpy as np
    import zyg
    from zyg import cuda_kernel as ck
    rng = np.random.default_rng(8)
    n, K, d = 29, 3, 2
    xs, mu, logw = rng.normal(size=(n, d)), rng.normal(size=(K, d)), rng.normal(size=K)
    bar = rng.normal(size=n)
    kern = cuda.jit(k_gmm)

    def shadows(items, nbytes, dtype=np.float64):
        saved = ck.PRIVATE_ITEMS, ck.SUM_BYTES
        ck.PRIVATE_ITEMS, ck.SUM_BYTES = items, nbytes
        try:
            dx, dmu, dlw = np.zeros((n, d), dtype), np.zeros((K, d), dtype), np.zeros(K, dtype)
            out = np.zeros(n, dtype)
            zyg.vjp(kern)[3, 12](xs.astype(dtype), dx, mu.astype(dtype), dmu, logw.astype(dtype),
                                 dlw, out, bar.astype(dtype), n, K, d)
        finally:
            ck.PRIVATE_ITEMS, ck.SUM_BYTES = saved
        return dx, dmu, dlw
    atomic = shadows(0, ck.SUM_BYTES)
    width = 12 * 8 * 3          # sum_width(12, 8) == 2
    copies = shadows(ck.PRIVATE_ITEMS, width)
    two = [b for key, b in ck._BUILT.items() if key[0] is k_gmm and b.block == 12 and
           "range(0, 6, 2)" in open(b.source).read()]
    assert two, "mu's shadow summed 2 entries at a time"
    blocks = {b.block for key, b in ck._BUILT.items() if key[0] is k_gmm}
    assert {0, 12} <= blocks, blocks
    for a, b in zip(atomic, copies):
        _close(b, a, 1e-12, "k_gmm: shadows summed from copies against shared atomics")
    assert np.any(copies[1] != 0) and np.any(copies[2] != 0)
    f32 = shadows(ck.PRIVATE_ITEMS, 12 * 4 * 4)      # float32: chunks of 3
    for a, b in zip(atomic, f32):
        _close(b.astype(np.float64), a, 1e-4, "k_gmm in float32")
    # and the sums of copies against finite differences, one chunk at a time
    saved = ck.SUM_BYTES
    ck.SUM_BYTES = width
    try:
        _kernel_case(k_gmm, (3, 12), [xs, mu, logw, np.zeros(n), n, K, d], {3: bar})
    finally:
        ck.SUM_BYTES = saved
    # more entries (20 of mu) than threads (12): chunks of at most one entry per thread
    # (a chunk as wide as the shared memory allows left entries nobody summed: zeros)
    K2, d2 = 5, 4
    xs2, mu2, lw2 = rng.normal(size=(n, d2)), rng.normal(size=(K2, d2)), rng.normal(size=K2)
    got = {}
    for items in (0, ck.PRIVATE_ITEMS):
        saved = ck.PRIVATE_ITEMS
        ck.PRIVATE_ITEMS = items
        try:
            dmu2, dlw2 = np.zeros((K2, d2)), np.zeros(K2)
            zyg.vjp(kern)[3, 12](xs2, np.zeros((n, d2)), mu2, dmu2, lw2, dlw2, np.zeros(n),
                                 bar.copy(), n, K2, d2)
            got[items] = (dmu2, dlw2)
        finally:
            ck.PRIVATE_ITEMS = saved
    for a, b in zip(got[0], got[ck.PRIVATE_ITEMS]):
        _close(b, a, 1e-12, "k_gmm, 20 entries on 12 threads: copies against shared atomics")
    assert np.all(got[0][0] != 0)
    # too many items to copy: atomics into shared memory, as before
    saved = ck.PRIVATE_ITEMS
    ck.PRIVATE_ITEMS = 8
    try:
        assert ck._block_threads((3, 12), [(1, (3, 2)), (2, (3,))], [xs, mu, logw]) == 0
    finally:
        ck.PRIVATE_ITEMS = saved
    assert ck._block_threads((3, 12), [(1, (3, 2)), (2, (3,))], [xs, mu, logw]) == 12
    assert ck._block_threads((3, 12, 0, 64), [(1, (3, 2))], [xs, mu, logw]) == 0  # its own shared


def check_kernel_shared_memory_and_barriers():
    import numpy as np
    import zyg.cuda as zc
    rng = np.random.default_rng(11)
    n = 28
    _kernel_case(k_shared, (2, 16), [rng.normal(size=n), np.zeros(n), n], {1: rng.normal(size=n)})
    a = rng.normal(size=(6, 6))
    _kernel_case(k_shared_2d, ((2, 2), (4, 4)), [a, np.zeros((6, 2)), 6], {1: rng.normal(size=(6, 2))})
    _kernel_case(k_block_sum, (3, 16), [rng.normal(size=40), rng.normal(size=3), np.zeros(1), 40],
                 {2: np.array([1.0])})
    # a 2-item tape: some threads of a block run out, the block skips its adjoint together
    # (a thread leaving alone would leave the others waiting at the adjoint's barriers)
    old = zc.tape_size()
    zc.set_tape_size(2)
    try:
        _kernel_case(k_shared, (2, 16), [rng.normal(size=n) * 4, np.zeros(n), n],
                     {1: rng.normal(size=n)})
    finally:
        zc.set_tape_size(old)


def check_kernel_rewound_writes_run_the_primal_again():
    from zyg import cuda_kernel as ck
    b = ck.build(cuda.jit(k_inplace), ["f8[1]", "f8[1]", "int", "int"], 256)
    assert b.final, "k_inplace's writes are rewound: its primal must run again"
    b = ck.build(cuda.jit(k_map), ["f8[1]", "f8[1]", "int"], 256)
    assert not b.final, "k_map's writes need no rewinding"


def check_kernel_tape_overflow_relaunch():
    """A data-dependent while loop on a 4-item tape: the launch overflows, the arrays and
    shadows are restored, and the adjoint is launched again with its tape in rows of
    buffers the launcher allocates (built once: a launch needing more room again gets
    larger buffers and the same kernel).  Without rows (``ROW_BYTES = 0``, or rows too
    large), the local tape grows and the adjoint is compiled again for each size."""
    import numpy as np
    import zyg
    import zyg.cuda as zc
    from zyg import cuda_kernel as ck
    rng = np.random.default_rng(3)
    n, m = 12, 5
    # w has room for a longer loop below (its shape is part of the adjoint's key: a shared
    # parameter's shadow is staged per block)
    args = [rng.normal(size=n), rng.normal(size=8 * m), np.zeros(n), n, m]
    bars = {2: rng.normal(size=n)}
    old = zc.tape_size()
    zc.set_tape_size(4)

    def built():
        return {k: b for k, b in ck._BUILT.items() if k[0] is k_loops}
    try:
        before = set(built())
        _kernel_case(k_loops, (1, 16), args, bars)
        new = {k: b for k, b in built().items() if k not in before}
        rows = [b for b in new.values() if b.rows]
        assert len(new) == 2 and len(rows) == 1, \
            f"one local tape, then rows: {[(k[2], b.rows) for k, b in new.items()]}"
        assert [st for st, _ in rows[0].rows] == ["f"], rows[0].rows
        src = open(rows[0].source).read()
        assert "_zt_f[" not in src.split("def k_loops_adj(")[1].split("k_loops_adj_step(")[0] and \
            "_fs[" in src and ", _zrow]" in src, "the step reads and writes the thread's column"
        # much more room than the first relaunch gave: larger rows, the same kernel
        once = set(built())
        big = args[:4] + [8 * m]        # a longer counted loop
        rooms, made = [], ck._tape_rows
        ck._tape_rows = lambda stacks, room, config: rooms.append(room) or made(stacks, room, config)
        try:
            _kernel_case(k_loops, (1, 16), big, bars)
        finally:
            ck._tape_rows = made
        assert set(built()) == once, "a larger room compiled the adjoint again"
        assert rooms and min(rooms) >= 8 * m, rooms
        # no rows (ROW_BYTES = 0), or rows over their budget: the local tape grows,
        # compiled again for each size
        saved = zc.ROW_BYTES
        for budget, start in ((0, 2), (16 * 8 * 8, 3)):
            zc.ROW_BYTES = budget
            try:
                zc.set_tape_size(start)
                before = set(built())
                _kernel_case(k_loops, (1, 16), args, bars)
                sizes = {k[2] for k in built() if k not in before}
                assert len(sizes) >= 2, f"rows of {budget} bytes: no larger local tape: {sizes}"
            finally:
                zc.ROW_BYTES = saved
    finally:
        zc.set_tape_size(old)
    assert zyg


def check_kernel_rows_and_block_sums_together():
    """The tape in rows and the block sums where they meet other things: a 2-D grid of
    2-D blocks (the thread's column in the whole grid; 4 threads summing 5 entries of w),
    writes the adjoint rewinds and then runs the primal again (k_inplace), all on a
    tape of 2 items that the first launch overruns."""
    import numpy as np
    import zyg.cuda as zc
    from zyg import cuda_kernel as ck
    rng = np.random.default_rng(12)
    old = zc.tape_size()
    zc.set_tape_size(2)
    try:
        n, m, K = 5, 7, 5
        _kernel_case(k_grid2_loop, ((3, 4), (2, 2)), [rng.normal(size=(n, m)), rng.normal(size=K),
                                                     np.zeros((n, m)), n, m, K],
                     {2: rng.normal(size=(n, m))})
        got = [b for key, b in ck._BUILT.items() if key[0] is k_grid2_loop]
        assert any(b.rows and b.block == 4 and b.staged == [1] for b in got), \
            [(b.rows, b.block, b.staged) for b in got]
        n = 20
        _kernel_case(k_inplace, (2, 16), [rng.normal(size=n) * 0.3, rng.normal(size=6), n, 6],
                     {0: rng.normal(size=n)})
        got = [b for key, b in ck._BUILT.items() if key[0] is k_inplace]
        assert any(b.rows and b.final for b in got), [(b.rows, b.final) for b in got]
    finally:
        zc.set_tape_size(old)


def check_device_vjp():
    """zyg.vjp(f, target="cuda"): atomic shadows of shared parameters, plain shadows of
    rows private to a thread, a function writing into its argument."""
    import numpy as np
    import zyg
    g = zyg.vjp(mix_nll, argnums=(0, 1), target="cuda")
    gp = zyg.vjp(row_energy, target="cuda", accumulate="plain")

    def kern(mu, dmu, w, dw, xs, out, rows, drows, c):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            out[i] = g(mu, dmu, w, dw, xs[i], 1.0) + gp(rows[i], drows[i], c, 0.5)
    kern = cuda.jit(kern)
    rng = np.random.default_rng(2)
    K, N = 4, 24
    mu, w, xs = rng.normal(size=K), rng.uniform(0.5, 1.5, size=K), rng.normal(size=N)
    rows = rng.normal(size=(N, 3))
    dmu, dw, out, drows = np.zeros(K), np.zeros(K), np.zeros(N), np.zeros((N, 3))
    rows_after = rows.copy()
    kern[2, 16](mu, dmu, w, dw, xs, out, rows_after, drows, 1.3)
    r2 = rows.copy()
    ref = np.array([mix_nll(mu, w, x) for x in xs]) + np.array([row_energy(r2[i], 1.3) for i in range(N)])
    _close(out, ref, 1e-12, "device vjp values")
    _close(rows_after, r2, 1e-12, "rows written as the primal writes them")

    def total(mu, w):
        return sum(mix_nll(mu, w, x) for x in xs)
    gmu = np.array([(total(mu + 1e-6 * e, w) - total(mu - 1e-6 * e, w)) / 2e-6 for e in np.eye(K)])
    gw = np.array([(total(mu, w + 1e-6 * e) - total(mu, w - 1e-6 * e)) / 2e-6 for e in np.eye(K)])
    _close(dmu, gmu, 1e-6, "shared parameters (atomic): mu")
    _close(dw, gw, 1e-6, "shared parameters (atomic): w")
    for i in range(N):
        gr = np.array([(row_energy(rows[i] + 1e-6 * e, 1.3) - row_energy(rows[i] - 1e-6 * e, 1.3)) / 2e-6
                       for e in np.eye(3)]) * 0.5
        _close(drows[i], gr, 1e-6, f"private rows (plain): row {i}")


def check_kernel_float32_and_globals():
    """float32 arrays and shadows; a global the kernel reads, rebound between launches."""
    import numpy as np
    import zyg
    global SCALE
    rng = np.random.default_rng(8)
    # float32: against the float64 adjoint (checked against differences elsewhere), to
    # float32's precision (central differences in float32 are noise)
    x, bar = rng.normal(size=20), rng.normal(size=20)
    shadows = {}
    for dt in (np.float32, np.float64):
        dx, y, dy = np.zeros(20, dt), np.zeros(20, dt), bar.astype(dt)
        zyg.vjp(cuda.jit(k_stencil))[2, 16](x.astype(dt), dx, y, dy, 20)
        assert dx.dtype == dt
        shadows[dt] = dx
    _close(shadows[np.float32], shadows[np.float64], 1e-5, "float32 shadows")
    dk = zyg.vjp(cuda.jit(k_global))
    x = rng.normal(size=20)
    for scale in (2.0, -3.0):
        SCALE = scale
        dx, y, dy = np.zeros(20), np.zeros(20), np.ones(20)
        dk[2, 16](x, dx, y, dy, 20)
        _close(dx, 2.0 * scale * x, 1e-12, f"global rebound to {scale}: gradient")
        _close(y, scale * x * x, 1e-12, f"global rebound to {scale}: value")
    SCALE = 2.0


def k_table(x, p, y, n):
    """A shared parameter read at constant indices, no loop: a tape zyg bounds."""
    i = cuda.grid(1)
    if i < n:
        y[i] = p[0] * math.sin(x[i]) + p[1] * x[i] * x[i] + p[2]


def check_kernel_launched_again():
    """A second launch with arguments of the same types and shapes goes straight to the
    generated adjoint (``KernelAdjoint._direct``, for a tape zyg bounds): the same shadows
    as the first; other shapes of a staged shadow, another block size or another dtype
    build their own; shared memory between the arrays is refused on that path too.  A
    kernel whose launch ran short of local tape starts the next launch of that kind with
    rows of the room that sufficed (one launch, not two)."""
    import numpy as np
    import zyg
    import zyg.cuda as zc
    from zyg import cuda_kernel as ck
    rng = np.random.default_rng(21)
    n = 20
    dk = zyg.vjp(cuda.jit(k_table))

    def run(p, cfg=(2, 16), dtype=np.float64):
        x = rng.normal(size=n).astype(dtype)
        bar = rng.normal(size=n).astype(dtype)
        got = []
        for _ in range(2):
            dx, dp = np.zeros(n, dtype), np.zeros(p.shape, dtype)
            dk[cfg](x, dx, p.astype(dtype), dp, np.zeros(n, dtype), bar.copy(), n)
            got.append((dx, dp))
        for a, b in zip(*got):
            _close(a, b, 1e-14 if dtype == np.float64 else 1e-6,
                   "a second launch (atomic additions in any order)")
        return got[0]
    p = rng.normal(size=3)
    run(p)
    assert len(dk._direct) == 1, dk._direct
    calls = []
    made = ck.build
    ck.build = lambda *a, **k: calls.append(a) or made(*a, **k)
    try:
        run(p)
        assert not calls, "a launch like the last one built its adjoint again"
        run(rng.normal(size=5))                 # another shape of the staged shadow
        run(p, (4, 8))                          # another block size: its own block sum
        run(p, dtype=np.float32)
        assert len(calls) == 3, len(calls)
    finally:
        ck.build = made
    assert len(dk._direct) == 4, len(dk._direct)
    # an array as its own shadow, on the direct path
    x = rng.normal(size=n)
    args = [x, np.zeros(n), p, np.zeros(3), np.zeros(n), np.ones(n), n]
    dk[2, 16](*args)
    args[1] = x
    try:
        dk[2, 16](*args)
    except zyg.AliasedArguments:
        pass
    else:
        raise AssertionError("an array as its own shadow, launched again: not refused")
    # a checked tape: the room that sufficed is where the next launch starts
    old = zc.tape_size()
    zc.set_tape_size(2)
    try:
        dg = zyg.vjp(cuda.jit(k_loops))
        x, w, bar = rng.normal(size=12), rng.normal(size=5), rng.normal(size=12)
        launches = []
        real = dg.kernel_launch
        dg.kernel_launch = lambda b, config, a: launches.append(bool(b.rows)) or real(b, config, a)
        got = []
        for _ in range(3):
            dx, dw, y = np.zeros(12), np.zeros(5), np.zeros(12)
            dg[1, 16](x, dx, w, dw, y, bar.copy(), 12, 5)
            got.append(dx)
        assert launches == [False, True, True, True], launches
        _close(got[2], got[0], 1e-14, "launched in the remembered room")
    finally:
        zc.set_tape_size(old)


def check_kernel_refusals():
    import numpy as np
    import zyg
    try:
        zyg.vjp(cuda.jit(k_refused_sync))[1, 4](np.ones(4), np.zeros(4), 4)
    except zyg.UnsupportedSyntax as e:
        assert "different paths" in str(e) and e.filename.endswith("test_cuda_sim.py"), str(e)
    else:
        raise AssertionError("a barrier in a branch was not refused")
    x = np.ones(8)
    try:
        zyg.vjp(cuda.jit(k_map))[1, 8](x, np.zeros(8), x, np.zeros(8), 8)
    except zyg.AliasedArguments as e:
        assert "share memory" in str(e), str(e)
    else:
        raise AssertionError("the same array passed twice was not refused")
    try:
        zyg.vjp(cuda.jit(k_map))[1, 8](x, x, np.zeros(8), np.zeros(8), 8)
    except zyg.AliasedArguments:
        pass
    else:
        raise AssertionError("an array passed as its own shadow was not refused")
    try:
        zyg.vjp(3.0)
    except TypeError as e:
        assert "@cuda.jit kernel or a plain function" in str(e)
    else:
        raise AssertionError("a number was taken for a kernel")
    # a kernel's body passed as a plain function is a device function's vjp, which needs a
    # number as result
    g = zyg.vjp(k_map, argnums=0, target="cuda")

    def calls(x, dx, y, n):
        g(x, dx, y, n, 1.0)
    try:
        cuda.jit(calls)[1, 4](np.ones(4), np.zeros(4), np.zeros(4), 4)
    except zyg.ZygError as e:
        assert "real scalar" in str(e) or "number" in str(e), str(e)
    else:
        raise AssertionError("a device vjp of a function returning None was not refused")
    try:
        zyg.vjp(cuda.jit(k_map))[1, 4](np.ones(4), np.zeros(4), 4)
    except TypeError as e:
        assert "followed by its shadow" in str(e), str(e)
    else:
        raise AssertionError("missing shadows were not refused")


# -- driverless PTX: the real compilation path, without a GPU ---------------------------------

class Skip(Exception):
    pass


def _ptx(fn, sig):
    """``cuda.compile_ptx`` of the kernel ``fn`` for compute capability 9.0.  Without a GPU,
    numba's built-in numba.cuda asks the driver for the device's compute capability when it
    compiles a device function called from the kernel: that question is answered here."""
    from numba import config
    if config.ENABLE_CUDASIM:
        raise Skip("the simulator compiles no PTX")
    import numba.cuda.dispatcher as disp
    if not device_mode():
        if hasattr(disp, "get_current_device"):
            import types as _t
            disp.get_current_device = lambda: _t.SimpleNamespace(compute_capability=(9, 0))
        try:
            # numba-cuda asks NVRTC which architectures exist; NVVM alone needs only the name
            from numba.cuda.cudadrv import nvrtc
            orig = getattr(nvrtc, "get_arch_option", None)
            if orig is not None and not getattr(orig, "_zyg", False):
                def arch(major, minor, *a, **k):
                    try:
                        return orig(major, minor, *a, **k)
                    except Exception:
                        return f"compute_{major}{minor}"
                arch._zyg = True
                nvrtc.get_arch_option = arch
        except ImportError:
            pass
    try:
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
    except Exception as e:
        text = str(e)
        if any(w in text for w in ("NVVM", "nvvm", "CUDA driver", "libnvrtc", "NVRTC")):
            raise Skip(f"no CUDA toolkit to compile PTX with ({type(e).__name__}: {text[:200]})")
        raise
    return ptx


def ptx_device_functions():
    import numba
    import zyg
    f8, a1 = numba.float64, numba.float64[:]
    dj = zyg.grad(bessel_j, target="cuda")
    vg = zyg.value_and_grad(branchy, argnums=(0, 1), target="cuda")
    dt = zyg.grad(table_loop, target="cuda")
    dw = zyg.grad(while_break, target="cuda")
    dh = zyg.value_and_grad(with_helpers, target="cuda")

    def k(z, a, c, out):
        i = cuda.grid(1)
        if i < z.shape[0]:
            r = vg(z[i], 0.5)
            g = r[1]
            h = dh(z[i], c)
            out[i] = dj(z[i], 2) + r[0] + g[0] + g[1] + dt(z[i], a) + dw(z[i], 1.8) + h[1]
    ptx = _ptx(k, (a1, a1, f8, a1))
    assert ".local" in ptx          # the Bessel and while_break tapes


def ptx_vmap_kernels():
    import numba
    import zyg
    from zyg import backends
    cu = backends.get("cuda")
    i8, a1, a2, i1 = numba.int64, numba.float64[:], numba.float64[:, :], numba.int64[:]
    cases = [
        (zyg.value_and_grad(bessel_j), ["float", "int"], [0, None], (a1, i8, a1, a1, i1, i8)),
        (zyg.grad(nested_loops, argnums=(0, 1)), ["float", "float"], [0, 0], (a1, a1, a1, a1, i1, i8)),
        (zyg.grad(table_loop), ["float", "f8[1]"], [0, 0], (a1, a2, a1, i1, i8)),
        (bessel_j, ["float", "int"], [0, None], (a1, i8, a1, i1, i8)),
    ]
    for fn, kinds, ax, sig in cases:
        b = zyg.vmap(fn, target="cuda")._zyg_batch
        kern, _, _, _ = b._kernel(kinds, ax, cu)
        _ptx(kern.py_func, sig)
    # the batch with the tape's rows passed in (after a launch ran short of local tape)
    with _mode("reverse"):
        b = zyg.vmap(zyg.value_and_grad(bessel_j), target="cuda")._zyg_batch
        kern, _, _, rows = b._kernel(["float", "int"], [0, None], backends.get("cuda").with_rows())
        assert [s for s, _ in rows] == ["f"], rows
        ptx = _ptx(kern.py_func, (a1, i8, a1, a1, i1, i8, a2))
        assert "st.global" in ptx and "ld.global" in ptx


def _atomic_add(ptx: str, space: str = "global") -> bool:
    """A float atomic addition in ``ptx``: in ``space``, or through a generic address
    (NVIDIA's numba-cuda emits ``atom.add.f64``, numba's built-in target ``atom.global``)."""
    return bool(re.search(rf"\batom(\.{space})?\.add\.f(32|64)", ptx))


def ptx_kernel_adjoints():
    """The generated adjoint kernels and device vector-Jacobian products compile to PTX
    (local tapes, global atomics, barriers and shared memory)."""
    import numba
    import zyg
    from zyg import cuda_kernel as ck
    i8, a1, a2, i1 = numba.int64, numba.float64[:], numba.float64[:, :], numba.int64[:]
    cases = [
        (k_map, ["f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, i8)),
        (k_stencil, ["f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, i8)),
        (k_inplace, ["f8[1]", "f8[1]", "int", "int"], (a1, a1, a1, a1, i8, i8)),
        (k_scatter, ["f8[1]", "i8[1]", "f8[1]", "int"], (a1, a1, i1, a1, a1, i8)),
        (k_loops, ["f8[1]", "f8[1]", "f8[1]", "int", "int"], (a1, a1, a1, a1, a1, a1, i8, i8)),
        (k_grid2, ["f8[2]", "f8[2]", "int", "int"], (a2, a2, a2, a2, i8, i8)),
        (k_shared, ["f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, i8)),
        (k_gmm, ["f8[2]", "f8[2]", "f8[1]", "f8[1]", "int", "int", "int"],
         (a2, a2, a2, a2, a1, a1, a1, a1, i8, i8, i8)),
        (k_shared_2d, ["f8[2]", "f8[2]", "int"], (a2, a2, a2, a2, i8)),
        (k_block_sum, ["f8[1]", "f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, a1, a1, i8)),
        (k_stencil, ["f4[1]", "f4[1]", "int"], (numba.float32[:],) * 4 + (i8,)),
    ]
    g = zyg.vjp(mix_nll, argnums=(0, 1), target="cuda")
    gp = zyg.vjp(row_energy, target="cuda", accumulate="plain")

    def kern(mu, dmu, w, dw, xs, out, rows, drows, c):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            out[i] = g(mu, dmu, w, dw, xs[i], 1.0) + gp(rows[i], drows[i], c, 0.5)
    ptx = _ptx(kern, (a1, a1, a1, a1, a1, a1, a2, a2, numba.float64))
    assert _atomic_add(ptx)                 # the shared parameters' shadows
    # the kernels of tests/test_cuda_tape.py and examples/cuda_kernels.py, whose adjoints the
    # tape launches under the simulator there
    import test_cuda_tape as tt
    tt.cuda, tt.numba = cuda, numba
    f8 = numba.float64
    cases += [
        (tt.heat_step, ["f8[1]", "f8[1]", "int", "float"], (a1, a1, a1, a1, i8, f8)),
        (tt.map_k, ["f8[1]", "f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, a1, a1, i8)),
        (tt.stencil_k, ["f8[1]", "f8[1]", "f8[1]", "int"], (a1, a1, a1, a1, a1, a1, i8)),
        (tt.fill_k, ["f8[1]", "int"], (a1, a1, i8)),
    ]
    # k_gmm once more, its staged shadows summed from each thread's copy (blocks of 64)
    cases.append(cases[[c[0] for c in cases].index(k_gmm)] + (64,))
    for plain, kinds, sig, *block in cases:
        staged = ((1, (3, 2)), (2, (3,))) if plain is k_gmm else ()
        b = ck.build(cuda.jit(plain), kinds, 256, staged, (), *block)
        ptx = _ptx(b.kernel.py_func, sig + ((i1,) if b.checked else ()))   # the status word
        if staged:
            assert _atomic_add(ptx, "shared"), "staged shadows add in shared memory"
        if block:
            # the copies are local memory; their sum is staged in shared memory between
            # barriers
            assert ".local" in ptx and re.search(r"\b(bar|barrier)\.sync", ptx), "block sum"
        assert _atomic_add(ptx) or plain in (k_map, tt.fill_k), plain.__name__
        if plain in (k_shared, k_shared_2d, k_block_sum):
            assert re.search(r"\b(bar|barrier)\.sync", ptx) and ".shared" in ptx, plain.__name__
    # the tape in rows of launcher-allocated buffers (after the status word, one per stack)
    with_rows = []
    for plain, kinds, sig, *_ in cases:
        b = ck.build(cuda.jit(plain), kinds, 4, (), (), 0, True)
        if not b.rows:
            continue            # every stack bounded: local arrays of that size
        with_rows.append(plain)
        ptx = _ptx(b.kernel.py_func, sig + (i1,) + tuple(numba.from_dtype(dt)[:, :]
                                                         for _, dt in b.rows))
        assert "ld.global" in ptx and "st.global" in ptx, plain.__name__
    assert k_loops in with_rows, with_rows


def ptx_anchor_kernel_adjoints():
    """The adjoints of the GPU anchors' own primal kernels (what benchmarks/gpu/ times:
    a data-dependent loop, a binary search, shared-memory tree reductions with barriers in
    a loop, a local array, atomics) compile to PTX."""
    import numba
    from zyg import cuda_kernel as ck
    anchors = os.environ.get("ZYG_GPU_ANCHORS") or os.path.join(ROOT, "..", "shared", "gpu_anchors")
    if not os.path.isdir(anchors):
        raise Skip(f"the GPU anchors are not beside the checkout ({anchors})")
    sys.path.insert(0, anchors)
    import kernels as AK
    types = {"f8[1]": numba.float64[:], "f8[2]": numba.float64[:, :], "int": numba.int64,
             "float": numba.float64}
    cases = [
        (AK.bessel_primal_k, ["f8[1]", "f8[1]", "int"]),
        (AK.heat_step_k, ["f8[1]", "f8[1]", "float"]),
        (AK.xs_lookup_k, ["f8[1]", "f8[2]", "f8[1]", "f8[2]", "f8[1]"]),
        (AK.gmm_prep_k, ["f8[2]", "f8[2]", "f8[1]", "f8[2]", "f8[1]", "f8[1]"]),
        (AK.gmm_primal_k, ["f8[2]", "f8[2]", "f8[2]", "f8[1]", "f8[1]"]),
    ]
    for kern, kinds in cases:
        b = ck.build(kern, kinds, 256)
        sig = []
        for k in kinds:
            sig.append(types[k])
            if k.startswith("f8["):
                sig.append(types[k])                # its shadow
        if b.checked:
            sig.append(numba.int64[:])             # the status word
        _ptx(b.kernel.py_func, tuple(sig))


CHECKS = [n for n in list(globals()) if n.startswith("check_")]
def ptx_forward_mode_has_no_tape():
    """Bessel's device gradient in forward mode keeps no per-thread tape (no local array of
    the tape's size); in reverse mode it has one."""
    import numba
    import zyg
    a1 = numba.float64[:]
    depots = {}
    for mode in ("forward", "reverse"):
        with _mode(mode):
            dj = zyg.grad(bessel_j, target="cuda")

            def k(z, out):
                i = cuda.grid(1)
                if i < z.shape[0]:
                    out[i] = dj(z[i], 2)
            ptx = _ptx(k, (a1, a1))
        sizes = [int(n) for n in re.findall(r"__local_depot\d+\[(\d+)\]", ptx)]
        depots[mode] = max(sizes, default=0)
    # the reverse tape: 256 float64 items
    assert depots["reverse"] >= 256 * 8 and depots["forward"] < 256, depots


PTX = [n for n in list(globals()) if n.startswith("ptx_")]


def run_checks(names):
    """In the child: run the checks, print one JSON object of results."""
    global cuda
    from numba import cuda as _cuda
    cuda = _cuda
    out = {}
    for n in names:
        try:
            globals()[n]()
            out[n] = None
        except Skip as e:
            out[n] = "SKIP " + str(e)
        except BaseException:           # report, go on with the next check
            out[n] = traceback.format_exc()
    from numba import config
    out["_mode"] = "simulator" if config.ENABLE_CUDASIM else "device"
    print("ZYG_CUDA_RESULTS " + json.dumps(out))


# -- the pytest side ----------------------------------------------------------------------------

def device_mode() -> bool:
    return os.environ.get("ZYG_CUDA_DEVICE", "") not in ("", "0")


def child_env(simulated: bool):
    """The environment of a child process that runs CUDA checks: numba's simulator on (it
    must be before numba is imported) or off (PTX, a GPU), zyg importable."""
    env = dict(os.environ)
    if simulated:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _child(names, simulated: bool):
    env = child_env(simulated)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run"] + names, env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ZYG_CUDA_RESULTS ")]
    assert line, f"the child failed (status {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    got = json.loads(line[-1][len("ZYG_CUDA_RESULTS "):])
    assert got["_mode"] == ("simulator" if simulated else "device"), got["_mode"]
    return got


if pytest is not None:
    @pytest.fixture(scope="module")
    def results():
        """The checks: on the simulator, or on the GPU with ZYG_CUDA_DEVICE=1."""
        return _child(CHECKS, simulated=not device_mode())

    @pytest.fixture(scope="module")
    def ptx_results():
        """Driverless PTX of the generated device code (a child without the simulator)."""
        return _child(PTX, simulated=False)

    def _verdict(got, name):
        err = got.get(name, "not run")
        if isinstance(err, str) and err.startswith("SKIP "):
            pytest.skip(err[5:])
        assert err is None, f"{name} ({got['_mode']}):\n{err}"

    @pytest.mark.parametrize("name", CHECKS)
    def test_cuda(results, name):
        _verdict(results, name)

    @pytest.mark.parametrize("name", PTX)
    def test_ptx(ptx_results, name):
        _verdict(ptx_results, name)


if __name__ == "__main__":
    if "--run" in sys.argv:
        sys.path.insert(0, ROOT)
        sys.path.insert(0, HERE)
        import test_cuda_sim as mod        # the functions' source must come from a file
        mod.run_checks([a for a in sys.argv[1:] if a.startswith(("check_", "ptx_"))] or
                       mod.CHECKS + mod.PTX)
