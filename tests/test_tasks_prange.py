"""Parallel loops (numba.prange) differentiated, running in parallel (issue 26;
zyg/tasks/prange.py, docs/parallel.md).

The cases (tests/prange/cases.py) are written as numba users write them: independent
writes with a scalar sum, a gather with repeated indices, a heat stencil in a time loop
with ping-pong buffers, GMM-style shared parameters, conditional and integer sums with
``continue`` and a nested prange, a written array read elsewhere, min and max reductions
(the value before the loop winning or not).  Each gradient is
checked against central differences of the serial program (prange is range in plain
Python) on both targets, with 1 and 2 threads; a stress test adds a million contributions
into two shared elements (lost additions would show); numba's ``workqueue`` layer runs in
a subprocess (``omp`` is the default here)."""
from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import zyg
from cachecheck import assert_second_process_compiles_nothing
from tests.prange import cases as C

CASES = C.inputs()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_GRADS = {}


def grad_of(name, target):
    """One gradient object per case and target for the whole file (compiled once)."""
    key = (name, target)
    if key not in _GRADS:
        f, _, argnums = CASES[name]
        _GRADS[key] = zyg.grad(f, argnums=argnums, target=target)
    return _GRADS[key]


def check_case(name, target):
    f, args, argnums = CASES[name]
    before = [np.copy(a) for a in args]
    g = grad_of(name, target)(*args)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)         # the caller's arrays are unchanged
    for k, i in enumerate(argnums):
        np.testing.assert_allclose(g[k], C.central(f, args, i), rtol=1e-5, atol=1e-6)
    return g


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_target_is_the_serial_program(name):
    check_case(name, "python")


# on cpu every path of the reverse loop once (independent writes and sums are in the others)
CPU = ["gather", "stencil", "gmm_like", "branches", "shared_read", "extremes", "matrix_steps",
       "into_argument", "through_row"]


@pytest.mark.parametrize("name", CPU)
def test_cpu_parallel_with_one_and_two_threads(name):
    prev = numba.get_num_threads()
    try:
        got = []
        for nt in (2, 1):
            numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
            got.append(check_case(name, "cpu"))
        py = grad_of(name, "python")(*CASES[name][1])
        for a, b, c in zip(got[0], got[1], py):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
            np.testing.assert_allclose(a, c, rtol=1e-11, atol=1e-12)
    finally:
        numba.set_num_threads(prev)


def _parallel_loops_checked(compiled) -> int:
    seen = 0
    for r, c in compiled:
        for fn, want in ((c.fwd, True), (c.bwd, not r.shared)):
            if not want and not fn.targetoptions.get("parallel"):
                seen += 1           # a serial loop, compiled without parallel=True
                continue
            diag = fn.get_metadata(fn.signatures[0])["parfor_diagnostics"]
            loops = [p for p in diag.get_parfors()
                     if any(getattr(ln.stop, "name", ln.stop) == "T" for ln in p.loop_nests)]
            assert bool(loops) == want, (r.names, fn)
            seen += 1
    return seen


def _fresh_gradients_agree(names) -> None:
    """New cpu gradients of the cases (after the caches were reset) equal the python
    target's."""
    for name in names:
        f, args, argnums = CASES[name]
        g = zyg.grad(f, argnums=argnums, target="cpu")(*args)
        np.testing.assert_allclose(g[0], grad_of(name, "python")(*args)[0], rtol=1e-11, atol=1e-12)


def test_the_loops_are_compiled_parallel(tmp_path, monkeypatch):
    """The forward and backward loops of the cpu gradient are numba parfors (the backward
    of a written array read elsewhere is the serial exception): in the compiled pair that
    the gradient calls (and on the run-time path, next test)."""
    from zyg.tasks import prange as P
    # an empty cache: code loaded from numba's disk cache has no parfor diagnostics
    monkeypatch.setenv("ZYG_CACHE_DIR", str(tmp_path))
    zyg.reset_caches()
    try:
        _fresh_gradients_agree(("gmm_like", "shared_read"))
        pairs = [(r, c) for r in _live(P.PRunner) for (kinds, key), c in r.pairs.items()
                 if key[0] == "cpu" and c.bwd.signatures]
        assert _parallel_loops_checked(pairs) >= 4
    finally:
        monkeypatch.delenv("ZYG_CACHE_DIR")
        zyg.reset_caches()


def test_the_run_time_path_loops_are_compiled_parallel(monkeypatch):
    """ZYG_NATIVE_LOOPS=0: the loop called through Python, as a function of values (the
    path kept for kinds the pair does not take), with the same gradient."""
    from zyg.tasks import prange as P
    monkeypatch.setenv("ZYG_NATIVE_LOOPS", "0")
    zyg.reset_caches()
    try:
        _fresh_gradients_agree(("gmm_like", "shared_read"))
        runners = {r.names and r.step.__name__: r for r in _live(P.PRunner)}
        seen = 0
        for r in runners.values():
            for (kinds, target), c in r.cache.items():
                if target != "cpu" or not c.bwd.signatures:
                    continue
                seen += _parallel_loops_checked([(r, c)])
        assert seen >= 4
    finally:
        monkeypatch.delenv("ZYG_NATIVE_LOOPS")
        zyg.reset_caches()


def _grads_now(name, target):
    f, args, argnums = CASES[name]
    return zyg.grad(f, argnums=argnums, target=target)(*args)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_the_pair_equals_the_run_time_path(target, monkeypatch):
    """The gradient calls the loop's compiled pair (no Python between its steps); with
    ZYG_NATIVE_LOOPS=0 it calls the loop through Python as a function of values: the
    two agree to rounding on every case."""
    names = sorted(CASES) if target == "python" else CPU
    native = {nm: grad_of(nm, target)(*CASES[nm][1]) for nm in names}
    monkeypatch.setenv("ZYG_NATIVE_LOOPS", "0")
    zyg.reset_caches()
    try:
        for nm in names:
            for a, b in zip(_grads_now(nm, target), native[nm]):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13, err_msg=nm)
    finally:
        monkeypatch.delenv("ZYG_NATIVE_LOOPS")
        zyg.reset_caches()


def written_f32(x, w):
    n = x.shape[0]
    y = np.zeros(n, np.float32)
    flags = np.zeros(n, np.bool_)
    for i in prange(n):
        y[i] = x[i] * w + y[i]
        flags[i] = x[i] > 0.0
    s = 0.0
    for i in range(n):
        if flags[i]:
            s += y[i] * x[i]
    return s


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_float32_and_bool_written_arrays(target):
    # the pair saves a float32 array on the float stack and a bool array on the int stack,
    # and restores them exactly (the gradient reads y's values in the adjoint of s)
    x = np.random.default_rng(5).normal(size=9)
    g = zyg.grad(written_f32, argnums=(0, 1), target=target)(x, 0.6)
    y = (x * 0.6).astype(np.float32).astype(np.float64)
    pos = x > 0
    np.testing.assert_allclose(g[0], np.where(pos, 2 * 0.6 * x, 0.0), rtol=1e-6)
    assert g[1] == pytest.approx(float(np.sum((x * x)[pos])), rel=1e-6)
    assert np.all(np.isfinite(y))


def test_show_prints_the_loop_pair():
    with open(os.devnull, "w") as fh:
        text = zyg.show(C.into_argument, np.ones(4), np.zeros(4), file=fh)
    assert "=== compiled pair of the prange loop" in text
    assert "_pl_rp(" in text and "_pl_ra(" in text and "rec_prange_loop" not in text


def test_reloaded_from_the_disk_cache_in_a_second_process(tmp_path):
    """The gradient and the loop's pair (parallel functions) are loaded from numba's disk
    cache in a second process: nothing is compiled again and the gradient is the same."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert_second_process_compiles_nothing(tmp_path, f"""
import sys
sys.path.insert(0, {root!r})
import numpy as np, zyg
from tests.prange.cases import stencil
g = zyg.grad(stencil, argnums=(0, 1), target="cpu")(np.linspace(0.0, 1.0, 16), 0.2)
RESULT = (g[0].tolist(), g[1])
""", "stencil")


def _live(cls):
    import gc
    return [o for o in gc.get_objects() if type(o) is cls]


def test_stress_shared_shadow_has_no_race():
    """A million iterations add into two elements of a read array's shadow, through atomic
    additions (gather) and through per-thread rows (shared_params).  Seen on this machine
    at two threads: plain additions instead of the atomic ones lost about 80% of the sum,
    one shared row instead of per-thread rows lost additions in 2 runs out of 3."""
    prev = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        x, idx, y = C.stress()
        want = C.stress_exact(x, idx, y)
        g = grad_of("gather", "cpu")
        for _ in range(4):
            np.testing.assert_allclose(g(x, idx, y)[0], want, rtol=1e-10)
        w = np.array([0.3, -0.2])
        want = C.shared_params_exact(y)
        g = zyg.grad(C.shared_params, argnums=0, target="cpu")
        for _ in range(4):
            np.testing.assert_allclose(g(w, y), want, rtol=1e-10)
    finally:
        numba.set_num_threads(prev)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_jvp(target):
    for name in (["independent", "stencil", "gmm_like", "branches"] if target == "python"
                 else ["stencil"]):
        f, args, _ = CASES[name]
        v = np.random.default_rng(3).normal(size=np.shape(args[0]))
        y, t = zyg.jvp(f, args, (v,) + (None,) * (len(args) - 1), target=target)
        h = 1e-6
        want = (f(args[0] + h * v, *args[1:]) - f(args[0] - h * v, *args[1:])) / (2 * h)
        assert y == pytest.approx(f(*args), rel=1e-12)
        assert t == pytest.approx(want, rel=1e-6), name
        # forward against reverse: jvp = grad . v (finite differences alone miss shared bugs)
        g = zyg.grad(f, target=target)(*args)
        assert t == pytest.approx(float(np.sum(g * v)), rel=1e-10), name


def test_workqueue_layer_in_a_subprocess():
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "tests.prange.cases", "stencil", "stress_rows"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if " ok " in ln]
    assert len(lines) == 2 and all("layer=workqueue threads=2" in ln for ln in lines), r.stdout


# -- what is refused, at the user's line ------------------------------------------------

def not_a_sum(x):
    p = 1.0
    for i in prange(x.shape[0]):
        p *= x[i]
    return p


def last_value(x):
    v = 0.0
    for i in prange(x.shape[0]):
        v = x[i] * 2.0
    return v


def through_view(x):
    out = np.zeros((x.shape[0], 2))
    for i in prange(x.shape[0]):
        row = out[i]
        row[0] = x[i]
    return np.sum(out)


def stepped(x):
    s = 0.0
    for i in prange(0, x.shape[0], 2):
        s += x[i]
    return s


def aliased(x):
    n = x.shape[0]
    y = np.zeros(n)
    z = y
    for i in prange(n):
        y[i] = z[(i + 1) % n] + x[i]
    return np.sum(y)


def second_order(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] ** 3
    return s


prange = numba.prange


def _line_of(f, text):
    import inspect
    src, first = inspect.getsourcelines(f)
    return first + next(k for k, ln in enumerate(src) if text in ln)


@pytest.mark.parametrize("f, text, words", [
    (not_a_sum, "p *= x[i]", "not a sum, min or max reduction"),
    (last_value, "v = x[i] * 2.0", "read after it"),
    (stepped, "prange(0, x.shape[0], 2)", "prange(start, stop)"),
    (aliased, "for i in prange(n):", "writes into 'y' and reads 'z', the same array"),
])
def test_refused_at_the_line(f, text, words):
    with pytest.raises(zyg.UnsupportedSyntax) as e:
        zyg.grad(f, target="python")(np.arange(1.0, 5.0))
    assert words in str(e.value)
    assert e.value.lineno == _line_of(f, text)


def test_write_through_a_view_refused():
    with pytest.raises(zyg.UnsupportedSyntax) as e:
        zyg.grad(through_view, target="python")(np.arange(1.0, 5.0))
    assert "through a view" in str(e.value)
    assert e.value.lineno == _line_of(through_view, "for i in prange")


def test_second_order_refused_clearly():
    x = np.arange(1.0, 5.0)
    np.testing.assert_allclose(zyg.grad(second_order, target="python")(x), 3 * x ** 2)
    with pytest.raises(zyg.UnsupportedSyntax) as e:
        zyg.hvp(second_order, x, x, target="python")
    assert "prange loop" in str(e.value)
    assert e.value.lineno == _line_of(second_order, "for i in prange")


def test_mpi_inside_prange_refused(tmp_path):
    """numba-mpi calls in a parallel body would communicate from several threads in no
    fixed order: refused at the loop (in a subprocess: importing numba-mpi starts MPI)."""
    pytest.importorskip("numba_mpi", reason="numba-mpi is the mpi extra: pip install \".[mpi]\"")
    src = (
        "import numpy as np, zyg, numba_mpi as mpi\n"
        "from numba import prange\n"
        "def f(x):\n"
        "    s = 0.0\n"
        "    for i in prange(x.shape[0]):\n"
        "        r = np.empty(1)\n"
        "        mpi.allreduce(x[i:i + 1], r, mpi.Operator.SUM)\n"
        "        s += r[0]\n"
        "    return s\n"
        "try:\n"
        "    zyg.grad(f, target='python')(np.ones(3))\n"
        "except zyg.UnsupportedSyntax as e:\n"
        "    print('refused', e.lineno, str(e).splitlines()[0])\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = tmp_path / "mpi_in_prange.py"
    script.write_text(src)
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert "refused 5 the body of a prange loop calls MPI" in r.stdout, r.stdout + r.stderr
