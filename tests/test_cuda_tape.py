"""The launch tape ``zyg.cuda.Tape`` (issue 25): launches recorded as users write them,
adjoints launched last first, overwritten buffers saved (the ping-pong time loop), numpy
and device arrays, the errors.

As in tests/test_cuda_sim.py, the checks run in one child process with numba's simulator
(``NUMBA_ENABLE_CUDASIM=1`` before numba is imported) and report JSON; one more child,
without the simulator, checks that numba.cuda's real launch point is wrapped and restored
(no GPU needed: nothing is launched).  Grids stay <= 16 threads (simulated threads cost
~85 us each).
"""
import json
import math
import os
import subprocess
import sys
import threading
import traceback

import numpy as np

try:
    import pytest
except ImportError:
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: numba.cuda and numba, bound in the child (kernels find them as globals of their module)
cuda = None
numba = None


# -- kernels, as numba.cuda users write them (wrapped with cuda.jit in the child) ---------------

def heat_step(u, v, n, c):
    """One explicit step of a nonlinear 1-D heat equation, u -> v (zero boundaries)."""
    i = cuda.grid(1)
    if i < n:
        left = u[i - 1] if i > 0 else 0.0
        right = u[i + 1] if i < n - 1 else 0.0
        v[i] = u[i] + c * (left - 2.0 * u[i] + right) + 0.1 * math.sin(u[i]) * u[i]


def map_k(x, p, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = math.sin(x[i]) * p[0] + p[1] * x[i] * x[i]


def stencil_k(y, p, out, n):
    i = cuda.grid(1)
    if i > 0 and i < n - 1:
        out[i] = y[i - 1] * p[1] + y[i] * y[i + 1] - p[0] * y[i]


def divergent_sync_k(x, n):
    i = cuda.grid(1)
    if i < n:
        cuda.syncthreads()
        x[i] = 2.0 * x[i]


def fill_k(x, n):
    i = cuda.grid(1)
    if i < n:
        x[i] = 1.0


N = 16
STEPS = 5
C = 0.2


def _kernels():
    return cuda.jit(heat_step), cuda.jit(map_k), cuda.jit(stencil_k)


def _loop(step, u0, u1):
    for _ in range(STEPS):
        step[1, N](u0, u1, N, C)
        step[1, N](u1, u0, N, C)


def _fd(fn, x, h=1e-6):
    """Central differences of the scalar fn at x."""
    g = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        g.flat[j] = (fn(x + e) - fn(x - e)) / (2 * h)
    return g


def _close(a, b, tol, what):
    a, b = np.asarray(a), np.asarray(b)
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 0.0)
    assert err <= tol * scale, f"{what}: max |diff| {err:.3g}\n got {a}\n want {b}"


def _heat_case():
    rng = np.random.default_rng(11)
    u_init = rng.normal(size=N)
    w = rng.normal(size=N)

    def loss(u):
        step = cuda.jit(heat_step)
        a, b = u.copy(), np.zeros(N)
        _loop(step, a, b)
        return float(a @ w)
    return u_init, w, loss


# -- checks ---------------------------------------------------------------------------------------

def check_pingpong_heat_gradient():
    """Ping-pong buffers over STEPS steps: the gradient of w . u_final with respect to the
    initial u, against central differences of the whole loop; the arrays stay as the
    forward left them."""
    import zyg
    import zyg.cuda
    step = cuda.jit(heat_step)
    u_init, w, loss = _heat_case()
    u0, u1 = u_init.copy(), np.zeros(N)
    with zyg.cuda.Tape() as tape:
        _loop(step, u0, u1)
    assert len(tape.launches) == 2 * STEPS, len(tape.launches)
    # u1 is written by the first launch before anything read it: nothing to save there
    assert not tape.launches[0].saves and all(L.saves for L in tape.launches[1:])
    final0, final1 = u0.copy(), u1.copy()
    tape.backward(grads=[(u0, w)])
    g = tape.gradient(u0)
    assert isinstance(g, np.ndarray)
    fd = _fd(loss, u_init)
    _close(g, fd, 1e-6, "the tape's gradient of the initial u")
    _close(tape.gradient(u1), np.zeros(N), 0, "u1's initial contents do not matter")
    assert np.array_equal(u0, final0) and np.array_equal(u1, final1), \
        "backward must leave the arrays as the forward left them"
    # every written array saved: the same gradient
    a0, a1 = u_init.copy(), np.zeros(N)
    with zyg.cuda.Tape(save_all=True) as t2:
        _loop(step, a0, a1)
    assert all(L.saves for L in t2.launches)
    t2.backward(grads=[(a0, w)])
    _close(t2.gradient(a0), g, 1e-12, "save_all")


def check_pingpong_without_saves_is_wrong():
    """The saves matter: the same adjoints launched last first with the same shadows, but
    without restoring the overwritten buffers (as a tape without saves would), give another,
    wrong gradient."""
    import zyg
    step = cuda.jit(heat_step)
    dk = zyg.vjp(step)
    u_init, w, loss = _heat_case()
    u0, u1 = u_init.copy(), np.zeros(N)
    _loop(step, u0, u1)
    d0, d1 = w.copy(), np.zeros(N)
    for _ in range(STEPS):
        dk[1, N](u1, d1, u0, d0, N, C)
        dk[1, N](u0, d0, u1, d1, N, C)
    fd = _fd(loss, u_init)
    err = float(np.max(np.abs(d0 - fd)))
    assert err > 1e-3, f"the replay without saves was right ({err:.3g}): the test proves nothing"


def check_chain_with_shared_parameter():
    """A map then a stencil, a parameter array p read by both: gradients of w . out with
    respect to x and p (accumulated over the two launches), against central differences."""
    import zyg
    import zyg.cuda
    _, mk, sk = _kernels()
    rng = np.random.default_rng(5)
    x0, p0, w = rng.normal(size=N), np.array([0.7, -0.4]), rng.normal(size=N)

    def run(x, p):
        y, out = np.zeros(N), np.zeros(N)
        mk[1, N](x, p, y, N)
        sk[1, N](y, p, out, N)
        return out
    x, p, y, out = x0.copy(), p0.copy(), np.zeros(N), np.zeros(N)
    with zyg.cuda.Tape() as tape:
        mk[1, N](x, p, y, N)
        sk[1, N](y, p, out, N)
    y_f, out_f = y.copy(), out.copy()
    tape.backward(grads=[(out, w)])
    _close(tape.gradient(x), _fd(lambda v: float(run(v, p0) @ w), x0), 1e-6, "d/dx")
    _close(tape.gradient(p), _fd(lambda v: float(run(x0, v) @ w), p0), 1e-6, "d/dp")
    assert np.array_equal(y, y_f) and np.array_equal(out, out_f) and np.array_equal(x, x0)
    # nothing is saved: no launch overwrites what a launch before it read
    assert not any(L.saves for L in tape.launches)


def check_device_arrays():
    """Device arrays in (cuda.to_device, device_array), device arrays out; cotangents given
    as device arrays; the same gradients as with numpy arrays; the arrays
    as the forward left them."""
    import zyg
    import zyg.cuda
    step, mk, sk = _kernels()
    u_init, w, loss = _heat_case()
    u0 = cuda.to_device(u_init)
    u1 = cuda.device_array(N, np.float64)
    u1.copy_to_device(np.zeros(N))
    with zyg.cuda.Tape() as tape:
        _loop(step, u0, u1)
    final0, final1 = u0.copy_to_host(), u1.copy_to_host()
    # (numba's device arrays on a GPU hash, and may be dict keys; the simulator's do not)
    tape.backward(grads=[(u0, cuda.to_device(w))])
    g = tape.gradient(u0)
    assert not isinstance(g, np.ndarray) and hasattr(g, "copy_to_host"), type(g)
    _close(g.copy_to_host(), _fd(loss, u_init), 1e-6, "device arrays: d/du")
    assert np.array_equal(u0.copy_to_host(), final0) and np.array_equal(u1.copy_to_host(), final1)
    # a mix: device x, numpy p
    rng = np.random.default_rng(5)
    x0, p0, wo = rng.normal(size=N), np.array([0.7, -0.4]), rng.normal(size=N)
    x, y, out = cuda.to_device(x0), cuda.to_device(np.zeros(N)), cuda.to_device(np.zeros(N))
    p = p0.copy()
    with zyg.cuda.Tape() as t2:
        mk[1, N](x, p, y, N)
        sk[1, N](y, p, out, N)
    t2.backward(grads=[(out, wo)])

    def run(xv, pv):
        yy, oo = np.zeros(N), np.zeros(N)
        mk[1, N](xv, pv, yy, N)
        sk[1, N](yy, pv, oo, N)
        return float(oo @ wo)
    gx = t2.gradient(x)
    assert hasattr(gx, "copy_to_host") and isinstance(t2.gradient(p), np.ndarray)
    _close(gx.copy_to_host(), _fd(lambda v: run(v, p0), x0), 1e-6, "mixed: d/dx")
    _close(t2.gradient(p), _fd(lambda v: run(x0, v), p0), 1e-6, "mixed: d/dp")


def check_explicit_launch_and_interception():
    """tape.launch records without a with block; the launch point is wrapped only while a
    tape is active, and launches of other threads are not recorded."""
    import zyg
    import zyg.cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    from zyg import cuda_tape as ct
    step = cuda.jit(heat_step)
    orig = FakeCUDAKernel.__dict__["__call__"]
    u_init, w, loss = _heat_case()
    u0, u1 = u_init.copy(), np.zeros(N)
    tape = zyg.cuda.Tape()
    for _ in range(STEPS):
        tape.launch(step, (1, N), u0, u1, N, C)
        tape.launch(step, (1, N), u1, u0, N, C)
    assert not ct.intercepting() and FakeCUDAKernel.__dict__["__call__"] is orig
    tape.backward(grads=[(u0, w)])
    _close(tape.gradient(u0), _fd(loss, u_init), 1e-6, "tape.launch")
    with zyg.cuda.Tape() as t2:
        assert ct.intercepting() and FakeCUDAKernel.__dict__["__call__"] is not orig
        th = threading.Thread(target=lambda: step[1, N](u0.copy(), np.zeros(N), N, C))
        th.start()
        th.join()
        with zyg.cuda.Tape() as inner:          # the innermost tape records
            step[1, N](u0, u1, N, C)
        step[1, N](u1, u0, N, C)
    assert len(t2.launches) == 1 and len(inner.launches) == 1, len(t2.launches)
    assert not ct.intercepting() and FakeCUDAKernel.__dict__["__call__"] is orig
    step[1, N](u0, u1, N, C)                    # outside: not recorded
    assert len(t2.launches) == 1


def check_zero_and_reset():
    """zero(): fresh gradients, backward again with other cotangents (Jacobian rows, as
    with Warp); reset(): the launches forgotten."""
    import zyg
    import zyg.cuda
    step = cuda.jit(heat_step)
    u_init, w, loss = _heat_case()
    u0, u1 = u_init.copy(), np.zeros(N)
    with zyg.cuda.Tape() as tape:
        _loop(step, u0, u1)
    rows = []
    for j in (0, 5):
        e = np.zeros(N)
        e[j] = 1.0
        tape.backward(grads=[(u0, e)])
        g = tape.gradient(u0)           # the tape's shadow: zero() zeroes it
        rows.append(g.copy())
        tape.zero()
        assert not np.any(g)
    tape.backward(grads=[(u0, w)])
    _close(tape.gradient(u0), _fd(loss, u_init), 1e-6, "after zero()")

    def two(u):
        a = u.copy()
        _loop(step, a, np.zeros(N))
        return w[0] * a[0] + w[5] * a[5]
    _close(w[0] * rows[0] + w[5] * rows[1], _fd(two, u_init), 1e-6, "Jacobian rows")
    tape.reset()
    assert tape.launches == []
    try:
        tape.gradient(u0)
    except zyg.ZygError as e:
        assert "no recorded launch" in str(e), str(e)
    else:
        raise AssertionError("a reset tape gave a gradient")


def check_errors():
    import zyg
    import zyg.cuda
    from zyg import cuda_tape as ct
    step = cuda.jit(heat_step)
    u_init, w, _ = _heat_case()
    u0, u1 = u_init.copy(), np.zeros(N)
    with zyg.cuda.Tape() as tape:
        _loop(step, u0, u1)
    try:
        tape.gradient(u0)
    except zyg.ZygError as e:
        assert "backward() first" in str(e), str(e)
    else:
        raise AssertionError("a gradient before backward")
    try:
        tape.backward(grads=[(np.zeros(N), w)])
    except zyg.ZygError as e:
        assert "no recorded launch took" in str(e), str(e)
    else:
        raise AssertionError("grads of an array no launch took")
    tape.backward(grads=[(u0, w)])
    try:
        tape.backward(grads=[(u0, w)])
    except zyg.cuda.TapeError as e:
        assert "already called" in str(e) and "reset" in str(e), str(e)
    else:
        raise AssertionError("backward twice")
    idx = np.arange(N)
    with zyg.cuda.Tape() as t3:
        cuda.jit(map_k)[1, N](u0.copy(), np.ones(2), np.zeros(N), N)
    try:
        t3.gradient(idx)
    except zyg.ZygError as e:
        assert "no recorded launch" in str(e)
    else:
        raise AssertionError("an unknown array")
    # a kernel zyg cannot differentiate: zyg.vjp's error at the kernel's line, before the
    # launch runs; the launch point is restored
    x = np.ones(N)
    try:
        with zyg.cuda.Tape():
            cuda.jit(divergent_sync_k)[1, N](x, N)
    except zyg.UnsupportedSyntax as e:
        assert "different paths" in str(e) and e.filename.endswith("test_cuda_tape.py"), str(e)
    else:
        raise AssertionError("a barrier in a branch in a recorded kernel was not refused")
    assert not ct.intercepting()
    try:
        zyg.cuda.Tape().launch(heat_step, (1, N), u0, u1, N, C)
    except TypeError as e:
        assert "@cuda.jit kernel" in str(e), str(e)
    else:
        raise AssertionError("a plain function was recorded")
    # overlapping views of one buffer
    buf = np.zeros(N)
    try:
        with zyg.cuda.Tape():
            fk = cuda.jit(fill_k)
            fk[1, 8](buf[:8], 8)
            fk[1, 8](buf[4:12], 8)
    except zyg.cuda.TapeError as e:
        assert "overlaps" in str(e), str(e)
    else:
        raise AssertionError("overlapping views were not refused")


def hostcheck_real_launch_point_wrapped_and_restored():
    """Without the simulator: numba.cuda's CUDADispatcher.call is wrapped inside a tape
    and restored after (nothing is launched: no GPU needed)."""
    import zyg
    import zyg.cuda
    from numba.cuda.dispatcher import CUDADispatcher
    orig = CUDADispatcher.call
    with zyg.cuda.Tape():
        assert CUDADispatcher.call is not orig
        with zyg.cuda.Tape():
            pass
        assert CUDADispatcher.call is not orig
    assert CUDADispatcher.call is orig


def hostcheck_real_launches_recorded_and_adjoints_launched():
    """Without the simulator and without a GPU: numba.cuda's launch point replaced by a
    stand-in that only notes what it is asked to launch; kernel[blocks, threads](...)
    launches inside a tape are recorded with their configuration and saves, and backward
    asks for the adjoint kernels, last first, each float array followed by its shadow."""
    import zyg
    import zyg.cuda
    from numba.cuda.dispatcher import CUDADispatcher
    own = "call" in CUDADispatcher.__dict__
    orig = CUDADispatcher.__dict__.get("call")
    asked = []

    def stand_in(self, args, *rest):
        # numba's built-in target: (griddim, blockdim, stream, sharedmem); numba-cuda: (config,)
        griddim, blockdim = (rest[0].griddim, rest[0].blockdim) if len(rest) == 1 else rest[:2]
        asked.append((self.py_func.__name__, griddim, blockdim, len(args)))
    CUDADispatcher.call = stand_in
    try:
        step = cuda.jit(heat_step)
        u0, u1 = np.ones(N), np.zeros(N)
        with zyg.cuda.Tape() as tape:
            step[1, N](u0, u1, N, C)
            step[1, N](u1, u0, N, C)
        assert CUDADispatcher.call is stand_in
        assert [a[0] for a in asked] == ["heat_step", "heat_step"], asked
        # (numba-cuda also passes its default stream object, which the record keeps)
        assert [L.config[:2] for L in tape.launches] == [((1, 1, 1), (N, 1, 1))] * 2
        assert not tape.launches[0].saves and len(tape.launches[1].saves) == 1
        del asked[:]
        tape.backward(grads=[(u0, np.ones(N))])
        assert [(a[0], a[3]) for a in asked] == [("heat_step_adj", 6)] * 2, asked
        assert isinstance(tape.gradient(u0), np.ndarray)
    finally:
        if own:
            CUDADispatcher.call = orig
        else:
            del CUDADispatcher.call


CHECKS = [n for n in list(globals()) if n.startswith("check_")]
HOST = [n for n in list(globals()) if n.startswith("hostcheck_")]


def run_checks(names):
    global cuda, numba
    import numba as _numba
    from numba import cuda as _cuda
    cuda, numba = _cuda, _numba
    out = {}
    for n in names:
        try:
            globals()[n]()
            out[n] = None
        except BaseException:
            out[n] = traceback.format_exc()
    from numba import config
    out["_mode"] = "simulator" if config.ENABLE_CUDASIM else "device"
    print("ZYG_CUDA_RESULTS " + json.dumps(out))


def _child(names, simulated: bool):
    from test_cuda_sim import child_env
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
        return _child(CHECKS, simulated=True)

    @pytest.fixture(scope="module")
    def host_results():
        return _child(HOST, simulated=False)

    @pytest.mark.parametrize("name", CHECKS)
    def test_cuda_tape(results, name):
        err = results.get(name, "not run")
        assert err is None, f"{name}:\n{err}"

    @pytest.mark.parametrize("name", HOST)
    def test_cuda_tape_host(host_results, name):
        err = host_results.get(name, "not run")
        assert err is None, f"{name}:\n{err}"


if __name__ == "__main__":
    if "--run" in sys.argv:
        sys.path.insert(0, ROOT)
        sys.path.insert(0, HERE)
        import test_cuda_tape as mod        # the kernels' source must come from a file
        mod.run_checks([a for a in sys.argv[1:] if a.startswith(("check_", "hostcheck_"))] or
                       mod.CHECKS + mod.HOST)
