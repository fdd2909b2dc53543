"""Checkpointed loops: tape memory and time against the fully recorded loop.

    python -m benchmarks.checkpointing            # T = 10**4 and 10**5, s = 10, 20, 50, 100
    python -m benchmarks.checkpointing --quick    # T = 10**3 and 10**4, s = 10, 100

The workload is a time-stepping loop ``u = u + dt * (tanh(A @ u + b) - u)`` (n = 64) and the
gradient of ``sum(u_T ** 2)`` w.r.t. ``u0``, ``A`` and ``b``, written once with ``range``
(zyg records every step) and once with ``zyg.checkpointed_range(T, snapshots=s)``.

Each configuration runs in a fresh process: it compiles at a small T, resets the kernel's
peak-RSS counter (``/proc/self/clear_refs``), runs the gradient at the full T and reports
how far the peak resident memory rose above the memory in use before the call: the tape,
the snapshots and every other buffer the gradient allocates.  Times are the median of
``--repeat`` calls in that process; ratios to the recorded loop are what to read (the
machines are shared).  Results go to benchmarks/results/checkpointing.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import zyg

N = 64


def loss_recorded(u0, A, b, T, s):
    u = u0.copy()
    for t in range(T):
        u = u + 0.01 * (np.tanh(A @ u + b) - u)
    return np.sum(u ** 2)


def loss_checkpointed(u0, A, b, T, s):
    u = u0.copy()
    for t in zyg.checkpointed_range(T, snapshots=s):
        u = u + 0.01 * (np.tanh(A @ u + b) - u)
    return np.sum(u ** 2)


def inputs(T, s):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(N), rng.standard_normal((N, N)) / np.sqrt(N),
            0.1 * rng.standard_normal(N), T, s)


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def measure(mode: str, T: int, s: int, repeat: int) -> dict:
    """In this process: compile, then peak memory growth and time of the gradient at T."""
    f = loss_recorded if mode == "recorded" else loss_checkpointed
    g = zyg.grad(f, argnums=(0, 1, 2))
    g(*inputs(8, s))                       # compile (same kinds as the measured call)
    args = inputs(T, s)
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                  # reset the peak RSS (VmHWM) to the current RSS
        base = _status("VmRSS")
        peak_ok = True
    except OSError:
        base, peak_ok = _status("VmHWM"), False
    t0 = time.perf_counter()
    grads = g(*args)
    first = time.perf_counter() - t0
    peak = _status("VmHWM")
    times = [first]
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        g(*args)
        times.append(time.perf_counter() - t0)
    out = {"mode": mode, "T": T, "s": s, "peak_growth_bytes": max(0, peak - base),
           "peak_reset": peak_ok, "time_s": float(np.median(times)),
           "grad_u0": [float(x) for x in grads[0][:4]], "grad_norm": float(np.linalg.norm(grads[1]))}
    if mode == "checkpointed":
        import types
        from zyg.api import ssa_of
        from zyg.nested.ckloop import CkLoop
        # the gradient calls the loop's compiled pair, which keeps no count: the steps are
        # counted on the run-time path (the same schedule's code), for a copy of the loss
        f0 = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
        os.environ["ZYG_NATIVE_LOOPS"] = "0"
        try:
            zyg.grad(f0, argnums=(0, 1, 2))(*args)
        finally:
            del os.environ["ZYG_NATIVE_LOOPS"]
        runner = next(st.expr.fn.fn for blk in ssa_of(f0).iter_blocks() for st in blk.stmts
                      if isinstance(st.expr.fn, CkLoop))
        out["forward_steps"] = runner.last_forward_steps
        out["snapshot_bytes"] = s * N * 8
        out["step_tape_bytes"] = runner.step_tape_bytes("cpu", T, 0, s, args[0].copy(), args[1], args[2])
    return out


def run_child(mode, T, s, repeat) -> dict:
    r = subprocess.run([sys.executable, "-m", "benchmarks.checkpointing", "--child", mode, str(T),
                        str(s), str(repeat)], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def _mb(b: float) -> str:
    if b < 4096:
        return "< 4 KiB"        # below the resolution of the resident-memory counter (a page)
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        mode, T, s, rep = a.child
        print(json.dumps(measure(mode, int(T), int(s), int(rep))))
        return
    Ts = [10**3, 10**4] if a.quick else [10**4, 10**5]
    ss = [10, 100] if a.quick else [10, 20, 50, 100]
    rows = []
    for T in Ts:
        rec = run_child("recorded", T, 1, a.repeat)
        rows.append(rec)
        print(f"T={T} recorded: {_mb(rec['peak_growth_bytes'])}, {rec['time_s']:.3f} s", file=sys.stderr)
        for s in ss:
            r = run_child("checkpointed", T, s, a.repeat)
            err = max(abs(x - y) / max(1e-300, abs(y)) for x, y in zip(r["grad_u0"], rec["grad_u0"]))
            r["rel_err_vs_recorded"] = err
            r["time_ratio"] = r["time_s"] / rec["time_s"]
            r["memory_ratio"] = r["peak_growth_bytes"] / max(1, rec["peak_growth_bytes"])
            rows.append(r)
            print(f"T={T} s={s}: {_mb(r['peak_growth_bytes'])}, {r['time_s']:.3f} s, "
                  f"{r['forward_steps'] / T:.2f} steps/T, err {err:.1e}", file=sys.stderr)
    lines = ["# Checkpointed loops: memory and time against the recorded loop", "",
             f"`python -m benchmarks.checkpointing{' --quick' if a.quick else ''}`; "
             f"u = u + 0.01 (tanh(A u + b) - u), n = {N}, gradient w.r.t. u0, A, b; zyg "
             f"{zyg.__version__}, numba cpu target, one process per row.", "",
             "Peak memory growth: how far the resident memory rose above its level before "
             "the gradient call (tape, snapshots, every buffer), in pages of 4 KiB. "
             "Snapshots + one step's tape: what the checkpointed backward pass holds at once "
             "(the step's tape measured from one recorded step). Forward steps: steps run by "
             "the backward pass (recomputation plus the one recorded run of each step).", "",
             "| T | loop | snapshots | peak memory growth | snapshots + one step's tape | "
             "time | time / recorded | forward steps / T | max rel. diff. vs recorded |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["mode"] == "recorded":
            lines.append(f"| {r['T']:.0e} | recorded (`range`) | - | {_mb(r['peak_growth_bytes'])} | - | "
                         f"{r['time_s'] * 1e3:.1f} ms | 1 | - | - |")
        else:
            held = r['snapshot_bytes'] + r['step_tape_bytes']
            lines.append(f"| {r['T']:.0e} | checkpointed | {r['s']} | {_mb(r['peak_growth_bytes'])} | "
                         f"{_mb(held)} | {r['time_s'] * 1e3:.1f} ms | "
                         f"{r['time_ratio']:.2f} | {r['forward_steps'] / r['T']:.2f} | "
                         f"{r['rel_err_vs_recorded']:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.quick:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "checkpointing.md"), "w") as fh:
            fh.write(text)
        with open(os.path.join(a.out, "checkpointing.json"), "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
