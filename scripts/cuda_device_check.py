#!/usr/bin/env python3
"""One run on a machine with a CUDA GPU: zyg's cuda back end checked and timed there.

    python scripts/cuda_device_check.py --anchors PATH/TO/gpu_anchors [--wheels DIR]

1. times ``zyg.vmap(zyg.value_and_grad(bessel_j), target="cuda")`` (Bessel J_2 by its power
   series, a data-dependent while loop) over 4,000 and 10^6 points beside the hand-written
   numba.cuda kernels of ``gpu_anchors/kernels.py`` (primal, derivative recurrence, reverse
   sweep over a local tape), float64, medians of synchronised samples;
2. runs the checks of ``tests/test_cuda_sim.py`` on the real GPU (a child process, no
   simulator: every kernel is compiled by numba.cuda for the device; with the time left);
3. prints a markdown table, and writes it to ``$OUT/cuda_device_check.md`` (with the raw
   numbers in ``$OUT/cuda_device_check.json``) when ``OUT`` is set.

``--anchors``: the folder holding the shared ``kernels.py`` and ``common.py`` (not part of
zyg; pass a copy carried to the machine).  ``--wheels``: a folder of wheels of zyg's pure
Python dependencies (gast, astor) used when they are not installed; they are put on the
path unpacked in a temporary folder, nothing is installed (scipy, zyg's third dependency, must be installed:
JAX brings it).  ``--small``: tiny sizes (a smoke test, also under
``NUMBA_ENABLE_CUDASIM=1`` without a GPU).  Budget: under 4 minutes (the timings stop
starting new sizes after 100 s; the checks get what is left of 225 s, at least 60 s).
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = time.time()
BUDGET_S = int(os.environ.get("ZYG_CUDA_CHECK_BUDGET", "225"))


def log(*a):
    print(f"[{time.time() - T0:6.1f} s]", *a, flush=True)


def bessel_j(z, nu):
    """J_nu(z) by its power series (the anchors' primal, as a plain function)."""
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


def wheel_paths(folder):
    """The wheels of ``folder`` unpacked into one temporary folder (a wheel is a zip file;
    astor reads a data file beside its code, so it cannot be imported from the zip)."""
    if not folder:
        return []
    wheels = sorted(glob.glob(os.path.join(folder, "*.whl")))
    if not wheels:
        return []
    import zipfile
    dest = tempfile.mkdtemp(prefix="zyg-wheels-")
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            z.extractall(dest)
    return [dest]


def run_checks(args, extra_path, results):
    limit = int(max(60, BUDGET_S - (time.time() - T0)))
    log("2/2 tests/test_cuda_sim.py checks on", "the simulator" if args.sim else "the GPU",
        f"(stopped after {limit} s)")
    env = dict(os.environ)
    if args.sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        env["ZYG_CUDA_DEVICE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + extra_path + [env.get("PYTHONPATH", "")])
    env.setdefault("ZYG_CACHE_DIR", tempfile.mkdtemp(prefix="zyg-cuda-check-"))
    t = time.time()
    try:
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "test_cuda_sim.py"), "--run"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        log(f"!!! the checks did not finish within {limit} s")
        results["checks"] = {"error": f"timeout after {limit} s", "stdout": str(e.stdout)[-3000:]}
        return
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ZYG_CUDA_RESULTS ")]
    if not line:
        log(f"!!! the checks' process failed (status {proc.returncode})")
        print(proc.stdout[-4000:], proc.stderr[-6000:], sep="\n")
        results["checks"] = {"error": f"status {proc.returncode}", "stderr": proc.stderr[-6000:]}
        return
    got = json.loads(line[-1][len("ZYG_CUDA_RESULTS "):])
    mode = got.pop("_mode")
    skipped = {k: v[5:] for k, v in got.items() if isinstance(v, str) and v.startswith("SKIP ")}
    failed = {k: v for k, v in got.items() if v is not None and k not in skipped}
    npass = sum(v is None for v in got.values())
    for name, err in got.items():
        print(f"  {'PASS' if err is None else 'SKIP' if name in skipped else 'FAIL'}  {name}")
        if name in skipped:
            print("    " + skipped[name])
        elif err is not None:
            print("    " + "\n    ".join(err.rstrip().splitlines()[-25:]))
    log(f"checks ({mode}): {npass} passed, {len(failed)} failed, {len(skipped)} skipped "
        f"in {time.time() - t:.1f} s")
    results["checks"] = {"mode": mode, "passed": npass, "total": len(got) - len(skipped),
                         "skipped": skipped, "failed": failed}


def median_time(call, sync, budget_s):
    """Median seconds per call: two warm-up calls, then >= 5 samples of `inner` calls between
    synchronisations (inner chosen so that a sample lasts >= 2 ms)."""
    call()
    sync()
    call()
    sync()
    t = time.perf_counter()
    call()
    sync()
    one = max(time.perf_counter() - t, 1e-6)
    inner = int(min(200, max(1, 2e-3 / one)))
    samples = []
    start = time.time()
    while len(samples) < 5 or (len(samples) < 9 and time.time() - start < budget_s):
        sync()
        t = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        samples.append((time.perf_counter() - t) / inner)
        if time.time() - start > budget_s and len(samples) >= 3:
            break
    return statistics.median(samples), inner, len(samples)


def run_timings(args, results):
    log("1/2 timings: Bessel J_2, value and gradient, float64")
    from zyg.backends.cuda import numpy_shim
    shim = numpy_shim()
    import numpy as np
    import numba
    from numba import cuda
    import zyg
    env = {"python": sys.version.split()[0], "numba": numba.__version__, "numpy": np.__version__,
           "numba.cuda": getattr(cuda, "implementation", "?"), "row_stack shim": shim,
           "simulator": bool(args.sim)}
    try:
        env["device"] = cuda.get_current_device().name
        if isinstance(env["device"], bytes):
            env["device"] = env["device"].decode()
    except Exception as e:        # the simulator
        env["device"] = f"({type(e).__name__})"
    results["env"] = env
    log("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))

    sys.path.insert(0, os.path.abspath(args.anchors))
    if args.small:
        os.environ["GPU_BENCH_SMALL"] = "1"
    import common as C          # noqa: E402  (the anchors)
    import kernels as K         # noqa: E402
    nu = C.NU

    def sync():
        cuda.synchronize()
    vg = zyg.vmap(zyg.value_and_grad(bessel_j), target="cuda")
    sizes = [64, 300] if args.small else [4000, 1_000_000]
    rows = []
    for n in sizes:
        if time.time() - T0 > 100:
            log(f"!!! skipping n={n}: out of time")
            continue
        row = {"n": n}
        try:
            z = C.bessel_data(n)
            zd = cuda.to_device(z)
            b = K.Bessel(z)
            share = 2.0 if n < 100_000 else 3.0
            for key, fn in (("primal", b.primal), ("hand recurrence", b.grad_fwd),
                            ("hand tape", b.grad_tape)):
                row[key] = median_time(fn, sync, share)[0] * 1e3
            t = time.time()
            v, g = vg(zd, nu)
            sync()
            row["zyg first call s"] = time.time() - t
            m = min(n, 2000)
            sel = np.linspace(0, n - 1, m).astype(int)
            vr, gr = C.bessel_ref(z[sel], nu)
            row["value rel err"] = C.rel_err(v.copy_to_host()[sel], vr)
            row["grad rel err"] = C.rel_err(g.copy_to_host()[sel], gr)
            row["zyg vmap call"] = median_time(lambda: vg(zd, nu), sync, share)[0] * 1e3
            # the generated kernel alone (outputs allocated once, as the hand kernels have them)
            batch = vg._zyg_batch
            from zyg import backends
            backend = backends.get("cuda")
            kern, nwrt, checked, _ = batch._kernel(["float", "int"], [0, None], backend)
            o0, o1 = cuda.device_array(n), cuda.device_array(n)
            status = cuda.to_device(np.zeros(1, np.int64))
            grid = (n + 255) // 256
            launch = kern[grid, 256]
            row["zyg kernel"] = median_time(lambda: launch(zd, nu, o0, o1, status, n), sync,
                                            share)[0] * 1e3
            row["tape overflowed"] = int(status.copy_to_host()[0])
            log(f"  n={n:>9,}  primal {row['primal']:.4f} ms  hand recurrence "
                f"{row['hand recurrence']:.4f}  hand tape {row['hand tape']:.4f}  zyg kernel "
                f"{row['zyg kernel']:.4f}  zyg vmap call {row['zyg vmap call']:.4f} ms  "
                f"(grad rel err {row['grad rel err']:.1e})")
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        rows.append(row)
    results["bessel"] = rows


def table(results):
    lines = ["# zyg cuda back end on a GPU", ""]
    env = results.get("env", {})
    if env:
        lines.append("; ".join(f"{k}: {v}" for k, v in env.items()))
        lines.append("")
    ch = results.get("checks", {})
    if "passed" in ch:
        lines.append(f"tests/test_cuda_sim.py on the {ch['mode']}: **{ch['passed']} of {ch['total']} "
                     "checks passed**" + ("" if not ch["failed"] else
                                          " (failed: " + ", ".join(ch["failed"]) + ")")
                     + ("" if not ch["skipped"] else
                        " (skipped: " + ", ".join(ch["skipped"]) + ")"))
    elif ch:
        lines.append(f"tests/test_cuda_sim.py: the run failed ({ch.get('error')})")
    lines += ["", "Bessel J_2 value and gradient, float64, ms (medians of synchronised samples):", "",
              "| points | primal | hand recurrence | hand local tape | zyg kernel | zyg vmap call "
              "| zyg kernel / hand tape | zyg kernel / recurrence | grad rel err | first call s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.get("bessel", []):
        if "error" in r:
            lines.append(f"| {r['n']:,} | error: {r['error']} |||||||||")
            continue
        lines.append(
            f"| {r['n']:,} | {r['primal']:.4f} | {r['hand recurrence']:.4f} | {r['hand tape']:.4f} "
            f"| {r['zyg kernel']:.4f} | {r['zyg vmap call']:.4f} | {r['zyg kernel'] / r['hand tape']:.2f} "
            f"| {r['zyg kernel'] / r['hand recurrence']:.2f} | {r['grad rel err']:.1e} "
            f"| {r['zyg first call s']:.2f} |")
    lines += ["", "zyg kernel: the generated batch kernel launched on preallocated outputs; zyg vmap "
              "call: `zyg.vmap(zyg.value_and_grad(bessel_j), target=\"cuda\")(z_device, 2)` with its "
              "output allocation and tape-overflow status read-back.", ""]
    return "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anchors", required=True, help="folder of gpu_anchors (kernels.py, common.py)")
    ap.add_argument("--wheels", default=None, help="folder of wheels of gast and astor")
    ap.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--skip-checks", action="store_true")
    args = ap.parse_args(argv)
    args.sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")
    extra = wheel_paths(args.wheels)
    for p in [ROOT] + extra:
        sys.path.insert(0, p)
    try:
        import gast  # noqa: F401
        import astor  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as e:
        log(f"!!! zyg's dependencies (gast, astor, scipy) are missing ({e}); pass --wheels DIR")
        return 2
    os.environ.setdefault("ZYG_CACHE_DIR", tempfile.mkdtemp(prefix="zyg-cuda-"))
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    results = {}
    # the timings first (about a minute), then the checks in the time left (a child process:
    # each kernel of the checks is compiled for the device, ~25 of them)
    try:
        run_timings(args, results)
    except Exception as e:
        results["timing error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    if not args.skip_checks:
        run_checks(args, extra, results)
    md = table(results)
    print()
    print(md)
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "cuda_device_check.md"), "w") as fh:
            fh.write(md)
        with open(os.path.join(out, "cuda_device_check.json"), "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        log(f"wrote {out}/cuda_device_check.md and .json")
    log("done")
    ch = results.get("checks", {})
    return 0 if ch.get("passed") == ch.get("total") and "timing error" not in results else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
