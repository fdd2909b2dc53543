"""Tiered first calls (zyg/tiered.py): the python target answers while the cpu code
compiles in the background; the answers agree with the compiled code's, the arguments'
writes are the compiled code's, and calls that could tell the difference take the
ordinary path."""
import os
import threading
import time

import numpy as np
import pytest

import zyg
from zyg import tiered
from zyg.errors import CompileError
from tests.realworld.timeseries import ses_sse     # an argument left at None


@pytest.fixture
def tiers():
    """Tiering on, the test hooks cleared afterwards, counters from zero."""
    zyg.set_tiered(True)
    for k in tiered.STATS:
        tiered.STATS[k] = 0
    warm, tiered.WARM_WAIT = tiered.WARM_WAIT, 0.0     # the race itself, cache or not
    yield tiered.STATS
    tiered.WARM_WAIT = warm
    zyg.set_tiered(False)
    tiered._HOLD_BUILD[0] = None
    tiered._HOLD_PYTHON[0] = None


def _finished(g=None):
    assert tiered.wait(300), "the background build did not finish"


def _helper(a, b):
    return a * np.exp(-b)


def loop_with_helper(x, out, c):
    s = 0.0
    for i in range(x.shape[0]):
        out[i] = _helper(x[i], c)       # an output argument (not differentiated)
        s += out[i] * x[i] + np.sin(c * x[i])
    return s


def matrix_weights(A, v):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            s += A[i, j] * v[j] ** 2
    v[0] = 2.0 * v[0]                   # written in place, differentiated
    return s + v[0]


def tuple_arg(p, x):
    a, b = p
    return np.sum(a * x ** 2 + b * x)


def f32_sum(x, k):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i] * x[i] * k
    return s


CASES = {
    "helper_and_output": (loop_with_helper, lambda: (np.linspace(0.1, 1.0, 9), np.zeros(9), 0.7), (0, 2)),
    # an F-ordered matrix and a strided view: the copies keep the layout numba compiles for
    "fortran_and_strided": (matrix_weights, lambda: (np.asfortranarray(np.arange(12.).reshape(3, 4)),
                                                     np.linspace(1, 2, 8)[::2]), (0, 1)),
    "tuple": (tuple_arg, lambda: ((1.5, -0.5), np.linspace(-1, 1, 5)), (0, 1)),
    "float32": (f32_sum, lambda: (np.linspace(0, 1, 6).astype(np.float32), 1.25), (0, 1)),
}


def _same(a, b, rtol):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k], rtol)
        return
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y, rtol)
        return
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_answer_is_the_python_targets_and_agrees_with_the_compiled_code(tiers, name):
    f, make, argnums = CASES[name]
    hold = tiered._HOLD_BUILD[0] = threading.Event()     # the build waits: python answers
    g = zyg.value_and_grad(f, argnums)
    first_args = make()
    first = g(*first_args)
    assert tiers["python"] == 1 and len(g._zyg.tiers) == 1
    hold.set()
    _finished(g)
    compiled_args = make()
    compiled = g(*compiled_args)
    assert tiers["python"] == 1, "the second call ran the python target again"
    rtol = 1e-5 if name == "float32" else 1e-12
    _same(first, compiled, rtol)
    for a, b in zip(first_args, compiled_args):       # the writes into the arguments agree
        _same(a, b, rtol)
    # the compiled code was installed where the ordinary path looks: no second compile
    disp = g._zyg.cache[tuple(type(a) for a in compiled_args)]
    assert len(getattr(disp, "entries", {0: 0})) == 1


def test_a_compiled_build_that_wins_stops_the_python_run(tiers):
    hold = tiered._HOLD_PYTHON[0] = threading.Event()   # python waits: the build wins
    g = zyg.grad(loop_with_helper, 0)
    x, out = np.linspace(0.1, 1.0, 9), np.zeros(9)
    r = g(x, out, 0.7)
    assert tiers["preempted"] == 1 and tiers["python"] == 0
    hold.set()
    deadline = time.time() + 10
    while any(t.name == "zyg-python-run" for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "zyg-python-run" for t in threading.enumerate())
    zyg.set_tiered(False)
    expect = zyg.grad(loop_with_helper, 0)(np.linspace(0.1, 1.0, 9), np.zeros(9), 0.7)
    np.testing.assert_allclose(r, expect, rtol=1e-13)


def test_a_long_python_run_is_stopped_mid_loop(tiers):
    # no hooks: a 400,000-step python run against a compile; whichever wins, the answer
    # is the compiled code's, and no python run is left behind
    def long_loop(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sin(x[i]) * x[i]
        return s
    x = np.linspace(0, 1, 400_000)
    r = zyg.grad(long_loop)(x)
    np.testing.assert_allclose(r, np.sin(x) + x * np.cos(x), rtol=1e-12)
    assert tiers["python"] + tiers["preempted"] == 1
    deadline = time.time() + 10
    while any(t.name == "zyg-python-run" for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "zyg-python-run" for t in threading.enumerate())


def raises_when_large(x):
    if x[0] > 100.0:
        raise ValueError("too large")
    return np.sum(x ** 2)


def test_a_python_error_waits_for_the_compiled_code(tiers):
    with pytest.raises(ValueError, match="too large"):
        zyg.grad(raises_when_large)(np.array([200.0, 1.0]))
    assert tiers["python_raised"] == 1


def test_a_read_only_argument_written_is_refused_as_without_tiers(tiers):
    x = np.linspace(0, 1, 4)
    x.flags.writeable = False
    with pytest.raises(zyg.ZygError):
        zyg.grad(matrix_weights, 0)(np.ones((2, 4)), x)
    zyg.set_tiered(False)
    with pytest.raises(zyg.ZygError):
        zyg.grad(matrix_weights, 0)(np.ones((2, 4)), x)


def test_a_failed_build_is_raised_by_the_next_call(tiers):
    def small(x):
        return np.sum(np.cos(x))
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.grad(small)
    spec = g._zyg

    def refuse(args):
        raise CompileError("refused for the test")
    spec.build_entry = refuse
    x = np.linspace(0, 1, 3)
    np.testing.assert_allclose(g(x), -np.sin(x), rtol=1e-14)    # python answered
    hold.set()
    _finished(g)
    for _ in range(2):
        with pytest.raises(CompileError, match="refused for the test"):
            g(x)


def prints(x):
    print("x", x[0])
    return np.sum(x)


def draws(x):
    return np.sum(x * np.random.rand())


def calls_prints(x):
    return prints(x) * 2.0


def test_what_is_not_tiered_and_why(tiers):
    assert "prints" in tiered.why_not(prints)
    assert "np.RandomState.rand" in tiered.why_not(draws)
    assert "prints" in tiered.why_not(calls_prints)
    assert tiered.why_not(loop_with_helper) is None

    @zyg.adjoint(my_rule)
    def _(x):
        return my_rule(x), lambda dy: (3.0 * dy,)

    def rule_user(x):
        return my_rule(x) + 1.0
    assert "rule" in tiered.why_not(rule_user)
    # such functions, and arguments that share memory or are lists, take the ordinary path
    g = zyg.grad(draws)
    g(np.ones(3))
    assert not g._zyg.tiers
    g = zyg.grad(tuple_arg, 1)
    a = np.linspace(0, 1, 5)
    g((a, a), a)
    assert not g._zyg.tiers
    assert tiers == {"python": 0, "preempted": 0, "python_raised": 0}


def my_rule(x):
    return x * 3.0


def test_threads_first_calls_at_once(tiers):
    g = zyg.value_and_grad(tuple_arg, 1)
    res = [None] * 4

    def run(k):
        res[k] = g((1.0 + k, 0.5), np.linspace(0, 1, 6))
    ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k in range(4):
        np.testing.assert_allclose(res[k][1], 2 * (1.0 + k) * np.linspace(0, 1, 6) + 0.5, rtol=1e-14)
    assert len(g._zyg.tiers) == 1


def test_reset_caches_forgets_tiers(tiers):
    g = zyg.grad(f32_sum)
    g(np.ones(3, np.float32), 2.0)
    _finished(g)
    zyg.reset_caches()
    assert not g._zyg.tiers


def record_params(p, x):
    return np.sum((p["a"] * x - p["b"]) ** 2)


def test_none_defaults_and_dicts_are_tiered(tiers):
    y = np.cumsum(np.linspace(0.1, 1.0, 8))
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.value_and_grad(ses_sse, (0, 1))
    r = g(y, 0.45)
    assert tiers["python"] == 1
    hold.set()
    zyg.set_tiered(False)
    r0 = zyg.value_and_grad(ses_sse, (0, 1))(y, 0.45)
    _same(r, r0, 1e-13)
    r1 = g(y, 0.45, 2.0)        # init given: another specialisation, not tiered now
    _same(r1, zyg.value_and_grad(ses_sse, (0, 1))(y, 0.45, 2.0), 1e-13)
    zyg.set_tiered(True)
    tiers["python"] = 0
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.value_and_grad(record_params, 0)
    x = np.linspace(0, 1, 4)
    first = g({"a": 2.0, "b": 0.5}, x)
    assert tiers["python"] == 1
    hold.set()
    _finished(g)
    again = g({"a": 2.0, "b": 0.5}, x)
    assert tiers["python"] == 1
    assert first[1].keys() == again[1].keys() == {"a", "b"}
    for k in ("a", "b"):
        assert type(first[1][k]) is type(again[1][k])
        np.testing.assert_allclose(first[1][k], again[1][k], rtol=1e-13)


def _corpus(every: int):
    from tests.realworld.test_realworld import ALL
    ok = [(f"{field}-{c.name}", c) for field, c in ALL if c.needs_on("cpu") is None
          and c.needs_on("python") is None]
    return ok[::every]


# the real-code corpus: all of it with ZYG_LONG_TESTS=1 (~2 min), every eighth case in CI
_LONG = os.environ.get("ZYG_LONG_TESTS") == "1"


@pytest.mark.parametrize("cid,case", _corpus(1 if _LONG else 8), ids=lambda v: v if isinstance(v, str) else "")
def test_real_code_first_answers_agree_with_the_compiled_code(tiers, cid, case):
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.value_and_grad(case.fn, case.argnums)
    a1, a2 = case.make_args(), case.make_args()
    first = g(*a1)
    why = tiered.why_not(case.fn)
    hold.set()
    _finished(g)
    compiled = g(*a2)
    if why is None and tiers["python"] == 1:
        _same(first, compiled, 1e-9)
    else:
        # not tiered (it prints, its arguments are lists, ...): both answers compiled
        assert tiers["python"] == 0
        _same(first, compiled, 0.0)
    for x, y in zip(a1, a2):
        if isinstance(x, np.ndarray):
            np.testing.assert_allclose(x, y, rtol=1e-12)


TABLE = np.linspace(1.0, 2.0, 4)
SCALE = 2.0


def reads_table(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += TABLE[i] * x[i] ** 2 * SCALE
    return s


def writes_beside_table(x):
    buf = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        buf[i] = TABLE[i] * x[i]
    return np.sum(buf ** 2)


def writes_table(x):
    TABLE[0] += x[0]
    s = np.sum(TABLE * x)
    TABLE[0] -= x[0]
    return s


def writes_table_view(x):
    t = TABLE[1:]
    for i in range(t.shape[0]):
        t[i] = t[i] * 1.0
    return np.sum(t * x[1:])


def test_globals_read_at_call_time_and_global_arrays_with_writes(tiers):
    global SCALE
    assert tiered.why_not(reads_table) is None
    assert tiered.why_not(writes_beside_table) is None      # a local array written
    assert "global or captured array" in tiered.why_not(writes_table)
    assert "global or captured array" in tiered.why_not(writes_table_view)
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.grad(reads_table)
    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(g(x), 2 * TABLE * x * SCALE, rtol=1e-14)
    SCALE = 3.0         # changed while the build (which saw 2.0) has not started
    try:
        np.testing.assert_allclose(g(x), 2 * TABLE * x * 3.0, rtol=1e-14)
        hold.set()
        _finished(g)
        np.testing.assert_allclose(g(x), 2 * TABLE * x * 3.0, rtol=1e-14)
        TABLE[0] = 5.0
        np.testing.assert_allclose(g(x), 2 * TABLE * x * 3.0, rtol=1e-14)
    finally:
        SCALE = 2.0
        TABLE[0] = 1.0
    g = zyg.grad(writes_table)
    np.testing.assert_allclose(g(x), TABLE, rtol=1e-14)
    assert not g._zyg.tiers


def writes_arg_reads_table(x):
    x[0] = 7.0
    return np.sum(TABLE * x)


def test_an_argument_sharing_memory_with_a_global_is_not_tiered(tiers):
    # the ordinary path's refusal, not a python answer on a copy
    g = zyg.value_and_grad(writes_arg_reads_table)
    with pytest.raises(zyg.errors.AliasedArguments):
        g(TABLE)
    assert not g._zyg.tiers and tiers["python"] == 0
    np.testing.assert_array_equal(TABLE, np.linspace(1.0, 2.0, 4))


def divides(x):
    return x[0] / x[1] + np.log(x[2])


def test_no_numpy_warnings_from_the_python_run(tiers):
    import warnings
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    x = np.array([1.0, 0.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = zyg.value_and_grad(divides)(x)
    assert tiers["python"] == 1
    hold.set()
    _finished(None)
    zyg.set_tiered(False)
    r0 = zyg.value_and_grad(divides)(x)
    np.testing.assert_array_equal(r[1], r0[1])
    assert np.isnan(r[0]) and np.isnan(r0[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_fork_waits_for_the_build_in_flight(tiers):
    hold = tiered._HOLD_BUILD[0] = threading.Event()
    g = zyg.grad(divides)
    x = np.array([1.0, 2.0, 3.0])
    g(x)
    assert tiers["python"] == 1 and tiered._INFLIGHT
    threading.Timer(0.3, hold.set).start()
    r, w = os.pipe()
    pid = os.fork()         # waits (os.register_at_fork) until the build is in
    if pid == 0:
        try:
            os.write(w, b"ok" if not tiered._INFLIGHT and g._zyg.cached((x,)) is not None else b"no")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 2) == b"ok"
    assert not tiered._INFLIGHT


def warm_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.tanh(x[i]) * x[i]
    return s


def test_code_cached_on_disk_is_loaded_rather_than_raced(tiers, tmp_path, monkeypatch):
    monkeypatch.setenv("ZYG_CACHE_DIR", str(tmp_path))
    x = np.linspace(0, 1, 5)
    zyg.set_tiered(False)
    expect = zyg.grad(warm_loop)(x)         # compiled, and written to the disk cache
    zyg.reset_caches()
    zyg.set_tiered(True)
    assert tiered._looks_cached("warm_loop")
    tiered.WARM_WAIT = 60.0
    r = zyg.grad(warm_loop)(x)
    assert tiers == {"python": 0, "preempted": 0, "python_raised": 0}
    np.testing.assert_array_equal(r, expect)
