"""MPI programs differentiated (issue 26; zyg/tasks/mpi.py, docs/parallel.md).

Runs tests/mpi/cases.py under ``mpiexec -n 2`` and ``-n 4``, every case on both targets
(four ranks share this machine's two cores: one compiles each gradient while the others
wait for it on the disk cache).  Each rank compares its gradient with the serial program's
(the derivative of the sum over ranks of the outputs, with respect to the rank's inputs) and
aborts the run on a mismatch.  Needs ``pip install ".[mpi]"`` (mpich, mpi4py, numba-mpi).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("numba_mpi", reason='the MPI tests need pip install ".[mpi]"')

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ("allreduce", "heat", "bcast_reduce", "ring", "tags", "inactive", "forward", "nonblocking")


def mpiexec() -> str:
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep +
                       os.environ.get("PATH", ""))
    if exe is None:
        pytest.skip('mpiexec not found (pip install ".[mpi]" installs mpich)')
    return exe


@pytest.fixture(scope="module")
def mpi_starts():
    """Two ranks of a trivial program: where the machine cannot start MPI at all (no shared
    memory, no local sockets), the tests are skipped with mpiexec's own words; where it can,
    every case must pass."""
    # one write per rank ("up 0\n"): print('up', r) writes its pieces one by one where
    # stdout is unbuffered (PYTHONUNBUFFERED), and the ranks' pieces interleave ("upup 0")
    code = ("import sys, numba_mpi as m; assert m.size() == 2; m.barrier(); "
            "sys.stdout.write('up %d\\n' % m.rank())")
    try:
        p = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip("mpiexec -n 2 did not start two ranks within 180 s")
    if p.returncode != 0 or "up 0" not in p.stdout or "up 1" not in p.stdout:
        pytest.skip(f"mpiexec cannot start two ranks here: {(p.stdout + p.stderr)[-800:]}")


def run(n: int, cases, targets: str):
    env = dict(os.environ, ZYG_MPI_TARGETS=targets)
    p = subprocess.run([mpiexec(), "-n", str(n), sys.executable, os.path.join(HERE, "mpi", "cases.py"),
                        *cases], capture_output=True, text=True, timeout=900, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    for case in cases:
        for t in targets.split(","):
            for r in range(n):
                assert f"OK {case} {t} rank {r}" in out, out[-4000:]


def test_two_ranks_every_case_both_targets(mpi_starts):
    run(2, CASES, "python,cpu")


def test_four_ranks_python(mpi_starts):
    run(4, CASES, "python")


def test_four_ranks_cpu(mpi_starts):
    # one rank compiles each gradient while the others wait, then they load it from the
    # disk cache (the non-blocking calls too: zyg/tasks/mpi_native.py)
    run(4, CASES, "cpu")


def test_refusals_name_the_call(tmp_path):
    """Calls zyg cannot reverse are refused at the user's line (one process): among them the
    non-blocking requests whose wait zyg cannot link to their start, or whose reverse
    messages could pair differently from the primal's."""
    src = tmp_path / "prog.py"
    src.write_text(
        "import numpy as np\n"
        "import numba_mpi as mpi\n"
        "def any_source(x):\n"
        "    buf = np.zeros(2)\n"
        "    mpi.recv(buf)\n"
        "    return np.sum(buf * x)\n"
        "def maximum(x):\n"
        "    out = np.zeros(2)\n"
        "    mpi.allreduce(x, out, mpi.Operator.MAX)\n"
        "    return np.sum(out)\n"
        "def never_waited(x):\n"
        "    req = mpi.isend(x, 0)\n"
        "    return np.sum(x)\n"
        "def from_branch(x):\n"
        "    buf = np.zeros(2)\n"
        "    if x[0] > 0:\n"
        "        s, r = mpi.irecv(buf, 0, 1)\n"
        "    else:\n"
        "        s, r = mpi.irecv(buf, 0, 2)\n"
        "    mpi.wait(r)\n"
        "    return np.sum(buf * x)\n"
        "def other_iteration(x):\n"
        "    s, r = mpi.isend(x, 0, 1)\n"
        "    for i in range(3):\n"
        "        mpi.wait(r)\n"
        "    return np.sum(x)\n"
        "def twice(x):\n"
        "    s, r = mpi.isend(x, 0, 1)\n"
        "    mpi.wait(r)\n"
        "    mpi.wait(r)\n"
        "    return np.sum(x)\n"
        "def out_of_order(x):\n"
        "    s, a = mpi.isend(x, 0, 1)\n"
        "    s, b = mpi.isend(x * 2.0, 0, 1)\n"
        "    mpi.wait(b)\n"
        "    mpi.wait(a)\n"
        "    return np.sum(x)\n"
        "def blocking_between(x):\n"
        "    buf = np.zeros(2)\n"
        "    s, a = mpi.irecv(buf, 0, 1)\n"
        "    mpi.recv(x, 0, 1)\n"
        "    mpi.wait(a)\n"
        "    return np.sum(x * buf)\n"
        "def wait_in_branch(x):\n"
        "    s, a = mpi.isend(x, 0, 1)\n"
        "    if x[0] > 0:\n"
        "        mpi.wait(a)\n"
        "    return np.sum(x)\n"
        "def break_between(x):\n"
        "    for i in range(3):\n"
        "        s, a = mpi.isend(x, 0, 1)\n"
        "        if x[0] > i:\n"
        "            break\n"
        "        mpi.wait(a)\n"
        "    return np.sum(x)\n"
        "def testing(x):\n"
        "    s, a = mpi.isend(x, 0, 1)\n"
        "    mpi.test(a)\n"
        "    return np.sum(x)\n"
        "def stored(x):\n"
        "    s, a = mpi.isend(x, 0, 1)\n"
        "    reqs = np.zeros(1, dtype=mpi.RequestType)\n"
        "    reqs[0] = a[0]\n"
        "    mpi.waitall(reqs)\n"
        "    return np.sum(x)\n")
    expected = {"any_source": (5, "any source"), "maximum": (9, "MIN or MAX"),
                "never_waited": (12, "never waited"), "from_branch": (20, "cannot tell which"),
                "other_iteration": (25, "cannot tell which"), "twice": (30, "twice"),
                "out_of_order": (35, "order they were started"),
                "blocking_between": (41, "order they were started"),
                "wait_in_branch": (45, "before its wait"), "break_between": (51, "before its wait"),
                "testing": (58, "test() is not supported"), "stored": (64, "cannot tell which")}
    code = (
        "import sys, numpy as np, zyg\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import prog\n"
        f"for name, (line, words) in {expected!r}.items():\n"
        "    try:\n"
        "        zyg.grad(getattr(prog, name), target='python')(np.ones(2))\n"
        "    except zyg.UnsupportedSyntax as e:\n"
        "        assert e.lineno == line and 'prog.py' in str(e) and words in str(e), (name, str(e))\n"
        "        print('refused', name, str(e).splitlines()[0])\n"
        "    else:\n"
        "        raise SystemExit(name + ' was not refused')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in expected:
        assert f"refused {name}" in p.stdout
