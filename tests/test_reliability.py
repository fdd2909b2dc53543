"""Reliability (issue 23): long functions, Ctrl-C during a first-call compile, pullbacks of
functions whose results share memory.

- Long straight-line and branchy functions compile on both targets: no walk of zyg's
  (or of the generated module's) is as deep as the function is long.
- A SIGINT at any phase of a first-call compile (zyg's transform, numba's lazy import, its
  typing, LLVM, loading from the disk cache) leaves the process working: the same
  gradient, called again, is right.  The interrupt is sent at a chosen call inside the
  phase (tests/_sigint_compile.py), not after a delay, so the test does not depend on the
  machine's speed.
- zyg.pullback of a function returning (B, B.T), (B, B), (B, B[0]), (x, x.T), B.T: the
  cotangents of results sharing memory are summed into one shadow.
"""
from __future__ import annotations

import linecache
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zyg
from conftest import TARGETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_N = [0]


def _define(body: str, name: str = "f"):
    """A function from source, registered in linecache (zyg reads the source)."""
    _N[0] += 1
    fname = f"<zyg-reliability-{_N[0]}-{os.getpid()}>"
    src = textwrap.dedent(body)
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    ns = {"np": np}
    exec(compile(src, fname, "exec"), ns)
    return ns[name]


def _fd(f, x: float, h: float = 1e-6) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


# -- long functions -------------------------------------------------------------------------

def straight(n: int) -> str:
    lines = ["def f(x):"] + [f"    a{i} = x * {i % 7 + 1}.0 + {i}.0" for i in range(n)]
    lines.append("    return " + " + ".join(f"a{i}" for i in range(0, n, max(1, n // 25))))
    return "\n".join(lines) + "\n"


def chain(n: int) -> str:
    lines = ["def f(x):", "    y = x"] + [f"    y = (y * 0.999 + x * 0.01) * (1.0 + 0.0001 * y)"
                                           for _ in range(n)]
    return "\n".join(lines + ["    return y"]) + "\n"


def nested_ifs(n: int) -> str:
    lines = ["def f(x):", "    y = x"]
    for i in range(n):
        ind = "    " * (i + 1)
        lines += [f"{ind}if x > {-i - 10}.0:", f"{ind}    y = y * 1.01 + x * {i + 1}.0"]
    return "\n".join(lines + ["    return y"]) + "\n"


def loops(n: int) -> str:
    # n blocks of dispatch cases: an if/elif chain of n cases nested n deep in Python's AST
    lines = ["def f(x):", "    s = 0.0", "    t = x * 2.0"]
    for i in range(n):
        lines += ["    for j in range(2):", f"        s = s + x * (j + {i % 5}.0)"]
    return "\n".join(lines + ["    return s + t"]) + "\n"


# chain300 on cpu takes minutes (numba's compile of a 300-deep expression chain): a long run
# (ZYG_LONG_TESTS=1), like the property runs; straight300 keeps the 300 statements in CI
_CHAIN_TARGETS = TARGETS if os.environ.get("ZYG_LONG_TESTS") == "1" else ("python",)
LONG = [("straight300", straight(300), TARGETS), ("straight1000", straight(1000), ("python",)),
        ("chain300", chain(300), _CHAIN_TARGETS), ("nested_ifs30", nested_ifs(30), TARGETS),
        ("loops300", loops(300), ("python",)),
        ("loops20", loops(20), ("cpu",))]      # 40 dispatch cases: the search tree on cpu


@pytest.mark.parametrize("name,src,targets", LONG, ids=[c[0] for c in LONG])
def test_long_functions_compile(name, src, targets):
    f = _define(src)
    x = 0.37
    for t in targets:
        v, g = zyg.value_and_grad(f, target=t)(x)
        assert v == pytest.approx(f(x), rel=1e-12), (name, t)
        assert g == pytest.approx(_fd(f, x), rel=1e-6, abs=1e-6), (name, t)


# -- Ctrl-C during a first-call compile -------------------------------------------------------

def _sigint_default() -> None:
    """In the child: Ctrl-C as Python's KeyboardInterrupt, also where this process ignores
    it (a child inherits an ignored SIGINT, and Python then leaves it ignored; some test
    runners' workers ignore it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_run(cache: str, phases, base: int = 0) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT, ZYG_CACHE_DIR=cache, ZYG_SIGINT_BASE=str(base))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "_sigint_compile.py"), *phases],
                       env=env, capture_output=True, text=True, timeout=420,
                       preexec_fn=_sigint_default)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_during_first_call_compile(tmp_path):
    cache = str(tmp_path / "cache")
    # a fresh process and cache: the interrupt cuts numba's lazy import, zyg's transform,
    # numba's type inference and LLVM; then each gradient is built again (and cached)
    fresh = ["import:30", "zyg.pullbacks:100", "numba.core.typeinfer:100", "llvmlite:20"]
    # a second process loads those functions from the disk cache: the interrupt cuts
    # numba's import (during the load), the load of numba's cache and of zyg's module
    warm = ["import:30", "numba.core.caching:2", "zyg.compile:2"]
    out = _sigint_run(cache, fresh) + _sigint_run(cache, warm)
    lines = out.strip().splitlines()
    assert len(lines) == len(fresh) + len(warm), out
    for line, want in zip(lines, fresh + warm):
        assert line.startswith(want + " sent=True "), out
        assert " interrupted=yes " in line or " interrupted=late " in line, out
        assert line.endswith(" ok"), out


# -- pullbacks of results that share memory ----------------------------------------------------

def pb_pair_t(x):
    B = np.outer(x, x) * 1.0
    return B, B.T


def pb_pair_same(x):
    B = np.outer(x, x) * 1.0
    return B, B


def pb_row(x):
    B = np.outer(x, x) * 1.0
    return B, B[0]


def pb_arg_t(x):
    return x, x.T


def pb_arg_same(x):
    return x, x


def pb_view_only(x):
    B = np.outer(x, x) * 1.0
    return B.T


def pb_arg_view(x):
    return x.T


PB = [pb_pair_t, pb_pair_same, pb_row, pb_arg_t, pb_arg_same, pb_view_only, pb_arg_view]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", PB, ids=[f.__name__ for f in PB])
def test_pullback_of_results_sharing_memory(f, target):
    x = np.array([0.3, -0.7, 1.1])
    x0 = x.copy()
    y, back = zyg.pullback(f, x, target=target)
    single = not isinstance(y, tuple)
    ys = (y,) if single else y
    for a, b in zip(ys, (f(x0),) if single else f(x0)):
        np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(5)
    dys = tuple(rng.standard_normal(np.shape(v)) for v in ys)
    dys0 = tuple(d.copy() for d in dys)
    r = back(dys[0] if single else dys)
    (g,) = r if isinstance(r, tuple) else (r,)

    def obj(z):
        out = f(z)
        return sum(np.sum(d * v) for d, v in zip(dys0, (out,) if single else out))
    h = 1e-6
    fd = np.array([(obj(x0 + h * e) - obj(x0 - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(x, x0)          # arguments and cotangents unchanged
    for d, d0 in zip(dys, dys0):
        np.testing.assert_array_equal(d, d0)
