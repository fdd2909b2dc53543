"""Smoke test of ``benchmarks/gpu/run.py`` (issue 25): the GPU benchmark runs end to end
under numba's CUDA simulator at the anchors' tiny sizes, and zyg's gradient of every
workload (Bessel adjoint kernel and batch, heat tape, XSBench-like adjoint, GMM tape)
verifies against the hand-written kernels and the float64 references.

The simulator must be switched on before numba is imported, so the benchmark runs in a
child process with ``NUMBA_ENABLE_CUDASIM=1`` and ``GPU_BENCH_SMALL=1``; no time is
measured there.  The workloads' kernels, data and references are the shared GPU anchors,
which live beside the repository (``../shared/gpu_anchors``; ``ZYG_GPU_ANCHORS`` overrides
the path, e.g. from a git worktree elsewhere); they are never copied into it.
"""
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHORS = os.environ.get("ZYG_GPU_ANCHORS") or os.path.join(ROOT, "..", "shared", "gpu_anchors")
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu", "run.py")


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(ANCHORS, "kernels.py")),
    # the only reason to skip: the benchmark imports the anchors' kernels, data and
    # references at run time, and they are not part of this repository
    reason=f"the shared GPU anchors are not at {ANCHORS} (set ZYG_GPU_ANCHORS)")
def test_gpu_bench_small_under_simulator(tmp_path):
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["GPU_BENCH_SMALL"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("ZYG_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    t = time.time()
    proc = subprocess.run([sys.executable, SCRIPT, "--small", "--anchors", ANCHORS,
                           "--out", str(out)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    took = time.time() - t
    tail = proc.stdout[-6000:] + "\n" + proc.stderr[-6000:]
    assert proc.returncode == 0, tail
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ZYG_GPU_BENCH ")]
    assert line, tail
    summary = json.loads(line[-1][len("ZYG_GPU_BENCH "):])
    assert summary["failed"] == [], tail

    data = json.loads((out / "gpu.json").read_text())
    assert data["env"]["simulator"] is True and data["env"]["timed"] is False
    rows = data["rows"]
    workloads = {r["workload"] for r in rows}
    assert workloads == {"Bessel J2", "heat 1-D", "XSBench-like lookup", "GMM NLL"}, workloads
    # Bessel: the adjoint kernel, the vmap batch in both modes; GMM: block sums, shared atomics
    assert len(rows) == 7
    for r in rows:
        assert r["verified"] is True, r
        assert r["err"] is not None and r["err"] <= 1e-10, r
        assert not r.get("error"), r
        assert r["zyg_ms"] is None          # nothing is timed under the simulator
        assert r["zyg_first_s"] is not None
    assert data["checks"] and all(c["ok"] for c in data["checks"]), data["checks"]
    assert not data["errors"], data["errors"]
    md = (out / "gpu.md").read_text()
    assert "| workload | zyg gradient |" in md and "No time measured" in md
    print(f"benchmarks/gpu/run.py --small under the simulator: {took:.1f} s")
