"""First-call latency of zyg in fresh Python processes.

The in-process first call of the runner may be flattered (numba is already warm)
or hidden (by zyg's on-disk cache). So, per workload, the runner also starts two
child processes with ``python -c``, both with ``ZYG_CACHE_DIR`` (and
``NUMBA_CACHE_DIR``) pointing at one fresh temporary directory:

1. *fresh*: empty cache -- transform + numba compile from scratch;
2. *cached*: the same directory again -- what a user sees on the second run.

Each child times ``import zyg`` and, separately, ``zyg.value_and_grad(f)`` plus the
first ``g(*args)`` call, and prints them as JSON after a marker line. The child's
total wall time (interpreter start to exit) is measured by the parent.

With ``mode="hand"`` (the runner's ``--no-zyg`` development flag) the child times
the first call (numba compile) of the hand-written adjoint instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
MARKER = "ZYG_BENCH_LATENCY_JSON "
_CHILD_CODE = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from benchmarks.latency import child_main; child_main()"
)


def child_main() -> None:
    """Child entry point; ``sys.argv[1:] == [workload, case_label, quick, mode]``."""
    workload_name, label, quick, mode = sys.argv[1:5]
    from benchmarks.verify import to_array
    from benchmarks.workloads import get_workload

    workload = get_workload(workload_name)
    args = workload.case(label).arguments(quick == "1")
    t0 = time.perf_counter()
    if mode == "zyg":
        from benchmarks import zyg_api

        zyg = zyg_api.import_zyg()
        t1 = time.perf_counter()
        out = zyg_api.value_and_grad(zyg, workload.fn, workload.argnums)(*args)
    else:
        t1 = time.perf_counter()
        out = workload.hand(*args)
    t2 = time.perf_counter()
    grad = to_array(out[1]).tolist()
    print(MARKER + json.dumps({"import_s": t1 - t0, "first_call_s": t2 - t1, "grad": grad}))


def _count_files(directory: str) -> int:
    return sum(len(files) for _, _, files in os.walk(directory))


def _run_child(argv: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    code = _CHILD_CODE.format(root=str(REPO_ROOT))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv],
            env=env,
            cwd=str(REPO_ROOT),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"timed out after {timeout_s:g} s"}
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            record = json.loads(line[len(MARKER):])
            record.update(status="ok", process_wall_s=wall)
            return record
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"status": "error", "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def measure_first_call(
    workload: str, label: str, quick: bool, mode: str = "zyg", timeout_s: float = 300.0
) -> dict[str, Any]:
    """Run the *fresh* and *cached* children for one workload case (see module doc).

    Returns ``{"fresh": {...}, "cached": {...}, "cache_files": n}`` where each entry
    has ``status`` and, when ok, ``import_s``, ``first_call_s``, ``process_wall_s``
    and ``grad``.
    """
    cache = tempfile.mkdtemp(prefix="zyg-bench-cache-")
    env = dict(os.environ)
    env.update(ZYG_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    env.pop("PYTHONSTARTUP", None)
    argv = [workload, label, "1" if quick else "0", mode]
    try:
        fresh = _run_child(argv, env, timeout_s)
        cache_files = _count_files(cache)
        cached = _run_child(argv, env, timeout_s)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"fresh": fresh, "cached": cached, "cache_files": cache_files}
