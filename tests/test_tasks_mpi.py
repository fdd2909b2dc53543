"""MPI programs differentiated (issue 26; zyg/tasks/mpi.py, docs/parallel.md).

Runs tests/mpi/cases.py under ``mpiexec -n 2`` (every case on both targets) and ``-n 4``
(every case on the python target, the halo exchange on cpu too: four ranks share this
machine's two cores, and each compiles its own code).  Each rank compares its gradient with the serial program's
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
CASES = ("allreduce", "heat", "bcast_reduce", "ring", "tags", "inactive", "forward")


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
    code = "import numba_mpi as m; assert m.size() == 2; m.barrier(); print('up', m.rank())"
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


def test_four_ranks_cpu_halo_exchange(mpi_starts):
    run(4, ("heat",), "cpu")


def test_refusals_name_the_call(tmp_path):
    """Calls zyg cannot reverse yet are refused at the user's line (one process)."""
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
        "def nonblocking(x):\n"
        "    req = mpi.isend(x, 0)\n"
        "    return np.sum(x)\n")
    code = (
        "import sys, numpy as np, zyg\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import prog\n"
        "for name, line in (('any_source', 5), ('maximum', 9), ('nonblocking', 12)):\n"
        "    try:\n"
        "        zyg.grad(getattr(prog, name), target='python')(np.ones(2))\n"
        "    except zyg.UnsupportedSyntax as e:\n"
        "        assert e.lineno == line and 'prog.py' in str(e), (name, str(e))\n"
        "        print('refused', name, str(e).splitlines()[0])\n"
        "    else:\n"
        "        raise SystemExit(name + ' was not refused')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("any_source", "maximum", "nonblocking"):
        assert f"refused {name}" in p.stdout
