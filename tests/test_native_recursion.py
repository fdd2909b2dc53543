"""Recursive functions compiled (zyg/pullbacks/native.py): a recursive call runs a generated
primal and adjoint that call themselves and keep their records on the caller's stacks.

Every gradient is checked against central differences on both targets, against the
run-time path (``ZYG_NATIVE_RECURSION=0``, the callee's pullback through Python), and the
compiled pair is checked to be the one that ran.  Cases: scalar and tree recursion, arrays
read, written (rewound), sliced and made in each level, recursion inside counted loops (the
records of each level between the caller's), mutual recursion, a result that is not
differentiated, a recursive call that writes an integer array (GradBench's det), tapes that
grow many times, threads, pullbacks replayed, the C-stack guard, redefinitions and rebound
globals, forward mode against reverse mode, and the refusal of second order.
"""
import math
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import zyg
from zyg.nested import recpairs

# GradBench's det (cmpad's det_by_minor): integer arrays written and restored around each
# recursive call, which the adjoint rewinds
from benchmarks.gradbench.modules.det import det, det_of_minor

TARGETS = ("python", "cpu")
H = 1e-6


def fib(x, n):
    if n < 2:
        return x
    return fib(x, n - 1) * 0.5 + fib(x * 1.1, n - 2)


def rsum(a, i):
    if i < 0:
        return 0.0
    return a[i] * a[i] + rsum(a, i - 1)


def smooth(x, n):
    # an array made in each level is the next level's argument (its shadow is given)
    if n == 0:
        return np.sum(x * x)
    y = np.sin(x)
    return smooth(y, n - 1) + y[0]


def tail(a):
    # a view of the argument: the callee adds into a view of the caller's shadow
    if a.shape[0] == 1:
        return a[0]
    return a[0] * tail(a[1:]) + 1.0


def scan(a, i):
    # writes into a float array argument before recursing: rewound level by level
    if i == 0:
        return a[0]
    a[i] = a[i] + 0.5 * a[i - 1]
    return scan(a, i - 1) * a[i]


def count(n):
    if n <= 0:
        return 0
    return 1 + count(n - 1)


def with_count(x, n):
    return x * count(n)


def even(x, n):
    if n == 0:
        return x
    return odd(x * 1.5, n - 1)


def odd(x, n):
    if n == 0:
        return -x
    return even(math.sin(x), n - 1)


def tree(x, n):
    # recursive calls inside a counted loop: their records lie between the loop's
    if n <= 0:
        return x
    s = 0.0
    for i in range(3):
        s = s + math.sin(tree(x * 0.5 + i, n - 1)) * x
    return s


def chain(x, n):
    # many levels with a loop each: the stacks grow many times while the recursion runs
    if n == 0:
        return x
    s = 0.0
    for i in range(n % 7 + 3):
        s = s + math.sin(x * i)
    return chain(s * 0.1 + x, n - 1)


def scaled(x, w, n):
    # w is not differentiated at the call (grad w.r.t. x): the pair still takes a shadow
    if n == 0:
        return x * w[0]
    return scaled(x * w[n], w, n - 1) + w[n]


def perm(p, n):
    if n < 0:
        return 0
    p[n] = n
    return perm(p, n - 1) + 1


def uses_perm(x):
    # a recursive call whose result is not differentiated writes an index array that the
    # adjoint reads as it was before the call: the call's writes must be rewound
    n = x.shape[0]
    p = np.zeros(n, np.int64)
    s = 0.0
    for i in range(n):
        s += x[p[i]] * x[i]
    perm(p, n - 1)
    for i in range(n):
        s += x[p[i]] ** 3
    return s


def cpow(z, n):
    # complex values: the complex stack and a complex cotangent
    if n == 0:
        return z
    return cpow(z * z * 0.5 + 1j * z, n - 1)

def cabs_loss(x, n):
    z = cpow(x + 0.3j, n)
    return abs(z) ** 2

def wloop(x, n):
    # the recursive call inside a while loop (no trip count known)
    s = 0.0
    k = 0
    while s < 3.0 and k < n:
        s = s + 0.5 + wrec(x * s + 0.1, k) ** 2
        k += 1
    return s

def wrec(x, k):
    if k <= 0:
        return math.sin(x)
    return wrec(x * 0.9, k - 1) + x


def boolrec(x, n, flip):
    if n == 0:
        return x
    if flip:
        return -boolrec(x * 1.2, n - 1, not flip)
    return boolrec(math.cos(x), n - 1, not flip)


def two(x, n):
    # called with the caller's array and with a strided slice of it: two layouts
    if n == 0 or x.shape[0] < 2:
        return np.sum(x * x)
    return two(x, n - 1) * 0.5 + two(x[::2], n - 1)


RNG = np.random.default_rng(7)
CASES = [
    (fib, (0.7, 8), 0),
    (rsum, (RNG.random(6), 5), 0),
    (smooth, (RNG.random(4), 3), 0),
    (tail, (RNG.random(5),), 0),
    (scan, (RNG.random(5), 4), 0),
    (with_count, (1.3, 5), 0),
    (even, (0.4, 5), 0),
    (tree, (0.3, 4), 0),
    (chain, (0.2, 40), 0),
    (scaled, (0.9, RNG.random(5) + 0.5, 4), (0, 1)),
    (det, (RNG.standard_normal(16), 4), 0),
    (uses_perm, (np.array([0.3, 0.7, 1.1, 1.9]),), 0),
    (cabs_loss, (0.4, 4), 0),
    (wloop, (0.3, 6), 0),
    (boolrec, (0.7, 5, True), 0),
    (two, (np.arange(1.0, 9.0), 3), 0),
]


def _copy(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def central(f, args, i):
    x = args[i]
    if isinstance(x, np.ndarray):
        g = np.zeros_like(x)
        for k in range(x.size):
            ap, am = list(_copy(args)), list(_copy(args))
            ap[i][k] += H
            am[i][k] -= H
            g[k] = (f(*ap) - f(*am)) / (2 * H)
        return g
    ap, am = list(args), list(args)
    ap[i] = x + H
    am[i] = x - H
    return (f(*ap) - f(*am)) / (2 * H)


def _grads(f, args, argnums, target):
    got = zyg.grad(f, argnums=argnums, target=target)(*_copy(args))
    return got if isinstance(argnums, tuple) else (got,)


def _built(fn, target):
    fn = getattr(fn, "py_func", fn)         # numba's dispatcher: its Python function
    return [b for (f, _, t), (_, b) in recpairs._PAIRS.items() if f is fn and t == target]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,args,argnums", CASES, ids=[c[0].__name__ for c in CASES])
def test_against_differences(f, args, argnums, target):
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for i, g in zip(nums, _grads(f, args, argnums, target)):
        ref = central(f, _copy(args), i)
        assert np.allclose(g, ref, rtol=1e-6, atol=1e-7 * max(1.0, abs(f(*_copy(args))))), (i, g, ref)


@pytest.mark.parametrize("target", TARGETS)
def test_the_compiled_pair_runs(target):
    zyg.grad(det, target=target)(RNG.standard_normal(9), 3)
    zyg.grad(fib, target=target)(0.5, 6)
    zyg.grad(even, target=target)(0.5, 6)
    for fn in (det_of_minor, fib, even):
        built = _built(fn, target)
        assert built and all(b is not None for b in built), (fn.__name__, recpairs.LAST_REFUSAL)


@pytest.mark.parametrize("target", TARGETS)
def test_same_as_the_run_time_path(target, monkeypatch):
    native = [_grads(f, args, argnums, target) for f, args, argnums in CASES]
    monkeypatch.setenv("ZYG_NATIVE_RECURSION", "0")
    zyg.reset_caches()
    try:
        # the run-time path cannot rewind an undifferentiated call's writes: an error
        # (it gave a wrong gradient before)
        with pytest.raises(zyg.UnsupportedSyntax, match="cannot rewind"):
            zyg.grad(uses_perm, target=target)(np.array([0.3, 0.7, 1.1, 1.9]))
        for (f, args, argnums), want in zip(CASES, native):
            if f is uses_perm:
                continue
            got = _grads(f, args, argnums, target)
            for g, w in zip(got, want):
                assert np.allclose(g, w, rtol=1e-12, atol=1e-14), f.__name__
            assert not [b for b in _built(f, target) if b is not None]
    finally:
        monkeypatch.delenv("ZYG_NATIVE_RECURSION")
        zyg.reset_caches()


@pytest.mark.parametrize("target", TARGETS)
def test_pullback_replayed(target):
    y, back = zyg.pullback(fib, 0.7, 6, target=target)
    g1 = back(1.0)[0]
    g2 = back(2.0)[0]
    assert g2 == pytest.approx(2 * g1, rel=1e-14)
    assert g1 == pytest.approx(central(fib, (0.7, 6), 0), rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_pullback_of_a_writing_recursion(target):
    a = RNG.random(5)
    x = a.copy()
    y, back = zyg.pullback(scan, x, 4, target=target)
    da = back(1.0)[0]
    assert np.allclose(x, a), "back() rewinds the writes"
    assert np.allclose(da, central(scan, (a, 4), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
def test_threads(target):
    g = zyg.grad(tree, target=target)
    g(0.1, 2)
    out = {}

    def work(k):
        out[k] = [g(0.1 * k, 5) for _ in range(3)]
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k in range(4):
        want = central(tree, (0.1 * k, 5), 0)
        assert all(v == pytest.approx(want, rel=1e-6, abs=1e-9) for v in out[k])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,args,argnums", CASES, ids=[c[0].__name__ for c in CASES])
def test_jvp_equals_grad_dot_v(f, args, argnums, target):
    # forward mode through the callee's compiled forward pair (recpairs.jvp_pair_for),
    # against reverse mode: both could share a bug that differences alone would miss
    rng = np.random.default_rng(11)
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    tangents = [(rng.standard_normal(a.shape) if isinstance(a, np.ndarray) else rng.standard_normal())
                if i in nums else (np.zeros_like(a) if isinstance(a, np.ndarray) else 0 * a)
                for i, a in enumerate(args)]
    if f is cabs_loss:
        # forward mode has no complex tangents (docs/complex.md): refused by name
        with pytest.raises(zyg.ZygError, match="recursive function cpow"):
            zyg.jvp(f, _copy(args), _copy(tangents), target=target)
        return
    y, ty = zyg.jvp(f, _copy(args), _copy(tangents), target=target)
    assert y == pytest.approx(f(*_copy(args)), rel=1e-13)
    want = sum(float(np.sum(np.asarray(g) * tangents[i]))
               for i, g in zip(nums, _grads(f, args, argnums, target)))
    assert ty == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_second_order_is_refused_by_name(target):
    with pytest.raises(zyg.ZygError, match="recursive function rsum"):
        zyg.hessian(rsum, target=target)(RNG.random(4), 3)


def _run(script: str, tmp_path):
    src = tmp_path / "script.py"          # zyg reads the source of what it transforms
    src.write_text(textwrap.dedent(script))
    env = {**os.environ, "ZYG_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(src)], capture_output=True, text=True, env=env,
                          timeout=600)


def test_small_thread_stack_gives_recursion_error(tmp_path):
    # a thread with a 1 MiB stack: the guard asks for the thread's real stack size once
    # the recursion passes 256 KiB, and stops it before the stack overflows
    r = _run("""
        import threading, zyg
        def power(x, n):
            if n == 0:
                return 1.0
            return x * power(x, n - 1)
        out = []
        def work():
            try:
                out.append(zyg.grad(power)(1.0001, 100000))
            except RecursionError as e:
                out.append("RecursionError")
            out.append(zyg.grad(power)(1.5, 40))
        threading.stack_size(1 << 20)
        t = threading.Thread(target=work)
        t.start()
        t.join()
        print(out[0], round(out[1], 6))
    """, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["RecursionError", str(round(40 * 1.5 ** 39, 6))]


SCALE = 2.0


def scaled_by_global(x, n):
    if n == 0:
        return SCALE * x
    return scaled_by_global(x * x, n - 1)


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_global_rebuilds_the_pair(target):
    global SCALE
    g = zyg.grad(scaled_by_global, target=target)
    before = g(0.9, 3)
    old = SCALE
    SCALE = 5.0
    try:
        after = g(0.9, 3)
    finally:
        SCALE = old
    assert after == pytest.approx(before * 2.5, rel=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_redefinition(target, tmp_path):
    ns = {}
    src = tmp_path / "redef.py"
    src.write_text("def f(x, n):\n    if n == 0:\n        return x\n    return 2.0 * f(x, n - 1)\n")
    exec(compile(src.read_text(), str(src), "exec"), ns)
    assert zyg.grad(ns["f"], target=target)(1.0, 3) == 8.0
    src.write_text("def f(x, n):\n    if n == 0:\n        return x\n    return 3.0 * f(x, n - 1)\n")
    exec(compile(src.read_text(), str(src), "exec"), ns)
    assert zyg.grad(ns["f"], target=target)(1.0, 3) == 27.0


def test_reloaded_from_the_disk_cache(tmp_path):
    # a pair called with a bool taken back from the int stack, or with arrays of two
    # layouts, was compiled for two signatures, and the second process (numba's disk cache)
    # crashed: every operand is now cast to one type per kind
    script = """
        import numpy as np, zyg
        def two(x, n):
            if n == 0 or x.shape[0] < 2:
                return np.sum(x * x)
            return two(x, n - 1) * 0.5 + two(x[::2], n - 1)
        def boolrec(x, n, flip):
            if n == 0:
                return x
            if flip:
                return -boolrec(x * 1.2, n - 1, not flip)
            return boolrec(np.cos(x), n - 1, not flip)
        print(zyg.grad(two)(np.arange(1.0, 9.0), 3).tolist(), zyg.grad(boolrec)(0.7, 5, True))
    """
    first = _run(script, tmp_path)
    second = _run(script, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert first.stdout == second.stdout


def test_show_prints_the_pair(tmp_path):
    with open(tmp_path / "out.txt", "w") as fh:
        text = zyg.show(fib, 0.5, 4, file=fh)
    assert "=== compiled recursive pair of fib with arguments (float, int)" in text
    assert "def fib_rec_rp(" in text and "def fib_rec_ra(" in text


def sin_times_rsum(a):
    return np.sin(a) * rsum(a, a.shape[0] - 1)


@pytest.mark.parametrize("target", TARGETS)
def test_forward_jacobian(target):
    # jacobian(mode="fwd"): a recursive call has no vector form, so the scalar jvp runs per
    # column (its compiled forward pair); equal to the reverse-mode Jacobian
    a = RNG.random(4)
    jf = zyg.jacobian(sin_times_rsum, mode="fwd", target=target)(a)
    jr = zyg.jacobian(sin_times_rsum, mode="rev", target=target)(a)
    assert np.allclose(jf, jr, rtol=1e-12, atol=1e-14)
