#!/usr/bin/env python3
"""zyg's gradients of the four GPU workloads beside the primal, the hand-written adjoints and
JAX, in one run (issue 25, "Tests and measurements").

    python benchmarks/gpu/run.py [--anchors PATH] [--small] [--tiny] [--out DIR] [--budget S]
                                 [--only bessel,heat,xs,gmm] [--jax auto|yes|no] [--wheels DIR]

The workloads, their data, float64 references, hand-written kernels and timer are the shared
GPU anchors (``../shared/gpu_anchors``: ``kernels.py``, ``common.py``, ``peers.py``), imported
at run time from ``--anchors``; nothing of them is copied here.  zyg differentiates the
anchors' own PRIMAL kernels as written (``zyg_side.py``):

1. Bessel J2: ``zyg.vjp(bessel_primal_k)`` (output shadow 1) and
   ``zyg.vmap(zyg.value_and_grad(j2), target="cuda")``, beside ``bessel_grad_tape_k`` and
   ``bessel_grad_fwd_k``;
2. 1-D heat: ``zyg.cuda.Tape`` over T launches of ``heat_step_k`` (du0 only: alpha is a
   number, and kernel adjoints give shadows to arrays), beside the gather/scatter adjoints;
3. XSBench-like lookup: ``zyg.vjp(xs_lookup_k)`` (loss shadow 1), beside ``xs_grad_k``;
4. GMM NLL: ``zyg.cuda.Tape`` over ``gmm_prep_k`` + ``gmm_primal_k`` (the shadows of the
   parameters summed per block from each thread's copy, and added atomically into shared
   memory), beside the atomic,
   block and staged hand kernels.

Each zyg gradient is first verified against the hand-written kernel's gradient and the
anchors' float64 numpy reference (relative, normwise, tolerance ``TOL``), then, on a GPU,
timed with the anchors' timer (``common.bench``: synchronised medians) at the anchors' sizes.
Without a GPU, numba's simulator runs the verification at tiny sizes and no time is measured.

Output: a markdown table and JSON, rewritten after every result, in ``--out`` (default
``benchmarks/results/`` on a GPU: ``gpu.md``, ``gpu.json``; a temporary folder otherwise).
Exit status 1 if a zyg gradient failed or could not be built, 2 if the anchors are missing.
A full GPU run stops starting new work after ``--budget`` seconds (default 270).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
T0 = time.time()
TOL = 1e-10          # relative, normwise; measured errors are ~1e-13 (Bessel) to 1e-16
WORKLOADS = ("bessel", "heat", "xs", "gmm")
# share of the budget each section may use (a section also stops at the overall budget)
SHARE = {"bessel": 0.30, "heat": 0.25, "xs": 0.18, "gmm": 0.27}


def log(*a):
    print(f"[{time.time() - T0:6.1f} s]", *a, flush=True)


def has_gpu() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except Exception:
        return False


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anchors", default=os.path.join(ROOT, "..", "shared", "gpu_anchors"),
                   help="the gpu_anchors folder (default: <repo>/../shared/gpu_anchors)")
    p.add_argument("--small", action="store_true",
                   help="the anchors' tiny sizes (GPU_BENCH_SMALL=1); forced without a GPU")
    p.add_argument("--tiny", action="store_true",
                   help="smaller still for the simulator smoke test (heat: 2 steps); implies --small")
    p.add_argument("--out", default=None, help="folder for gpu.md and gpu.json")
    p.add_argument("--budget", type=float, default=270.0, help="seconds (default 270)")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    p.add_argument("--sim-timing", action="store_true",
                   help="development: run the timing code under the simulator too, at the small "
                        "sizes (the figures mean nothing; they exercise the GPU path's code)")
    p.add_argument("--wheels", default=None,
                   help="a folder of wheels of zyg's pure Python dependencies (gast, astor), "
                        "put on the path unpacked when they are not installed (a GPU machine)")
    p.add_argument("--jax", choices=("auto", "yes", "no"), default="auto",
                   help="JAX rows: auto = only when JAX runs on a GPU; yes = also on the CPU")
    return p.parse_args(argv)


def wheel_paths(folder):
    """The wheels of ``folder`` unpacked into one temporary folder (astor reads a data file
    beside its code, so it cannot be imported from the zip); nothing is installed."""
    import glob
    import zipfile
    wheels = sorted(glob.glob(os.path.join(folder, "*.whl"))) if folder else []
    if not wheels:
        return []
    dest = tempfile.mkdtemp(prefix="zyg-wheels-")
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            z.extractall(dest)
    return [dest]


class Report:
    """Rows, checks and errors; gpu.json and gpu.md rewritten after every result."""

    def __init__(self, out, env):
        self.out = out
        self.data = {"env": env, "rows": [], "checks": [], "errors": []}
        self.flush()

    def row(self, **r):
        self.data["rows"].append(r)
        self.flush()

    def check(self, name, err, tol, detail=""):
        ok = bool(err == err and err <= tol)
        line = f"{'PASS' if ok else 'FAIL'} {name}: rel err {err:.2e} (tol {tol:.0e}){' ' + detail if detail else ''}"
        log("  " + line)
        self.data["checks"].append({"name": name, "ok": ok, "err": err, "tol": tol})
        self.flush()
        return ok

    def error(self, where, exc):
        msg = f"{type(exc).__name__}: {exc}"
        log(f"  ERROR in {where}: {msg}")
        self.data["errors"].append({"where": where, "error": msg,
                                    "traceback": traceback.format_exc()[-4000:]})
        self.data["checks"].append({"name": where, "ok": False, "err": None, "tol": None,
                                    "error": msg})
        self.flush()
        return msg

    def flush(self):
        if not self.out:
            return
        os.makedirs(self.out, exist_ok=True)
        for name, text in (("gpu.json", json.dumps(self.data, indent=1, default=float)),
                           ("gpu.md", markdown(self.data))):
            tmp = os.path.join(self.out, name + ".tmp")
            with open(tmp, "w") as fh:
                fh.write(text)
            os.replace(tmp, os.path.join(self.out, name))


def _ms(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.4g}"


def markdown(data):
    env = data["env"]
    measured = env.get("timed")
    lines = ["# zyg on the GPU workloads: gradients beside the primal, hand-written adjoints and JAX", ""]
    lines.append("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()
                                             if k not in ("first_call_s",)))
    lines.append("")
    if not measured:
        lines += ["**No time measured**: " + env.get("why_not_timed", "") +
                  " (verification only, at the sizes shown).", ""]
    lines += ["| workload | zyg gradient | size | primal ms | hand gradient ms | zyg gradient ms "
              "| zyg/hand | zyg/primal | JAX grad ms | zyg first call s | verified (rel err) | notes |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        hand = r.get("hand_ms") or {}
        if isinstance(hand, dict) and hand:
            hand_s = " / ".join(f"{_ms(v)} {k}" for k, v in hand.items())
        else:
            hand_s = _ms(hand or None)
        ver = r.get("verified")
        ver_s = ("-" if ver is None else ("yes" if ver else "**NO**"))
        if r.get("err") is not None:
            ver_s += f" ({r['err']:.1e})"
        notes = r.get("notes", "")
        if r.get("error"):
            notes = f"**error: {r['error']}**" + ("; " + notes if notes else "")
        elif measured and r.get("zyg_ms") is None:
            notes = "not timed (out of the time budget); " + notes
        lines.append("| " + " | ".join([
            r.get("workload", ""), r.get("zyg", ""), r.get("size", ""), _ms(r.get("primal_ms")),
            hand_s, _ms(r.get("zyg_ms")), _ms(r.get("zyg_over_hand")), _ms(r.get("zyg_over_primal")),
            _ms(r.get("jax_ms")), _ms(r.get("zyg_first_s")), ver_s,
            " ".join(notes.split()).replace("|", "\\|")]) + " |")
    lines += ["", "Times: medians of synchronised samples (the anchors' `common.bench`), value and "
              "gradient from the inputs with shadows zeroed inside the call; zyg/hand is against "
              f"the fastest hand-written variant. Verified: zyg's gradient against the hand-written "
              f"kernel's and the anchors' float64 numpy reference, relative normwise error "
              f"(largest shown), tolerance {TOL:.0e}.", ""]
    lines.append("## Checks")
    lines.append("")
    for c in data["checks"]:
        if c.get("error"):
            lines.append(f"- FAIL {c['name']}: " + " ".join(c["error"].split()))
        else:
            lines.append(f"- {'PASS' if c['ok'] else 'FAIL'} {c['name']}: rel err {c['err']:.2e} "
                         f"(tol {c['tol']:.0e})")
    if data["errors"]:
        lines += ["", "## Errors", ""]
        for e in data["errors"]:
            lines.append(f"- {e['where']}:")
            lines += ["", "```", e["error"], "```", ""]
    first = env.get("first_call_s") or {}
    if first:
        lines += ["", "First calls (compile + run, s): " +
                  ", ".join(f"{k} {v:.2f}" for k, v in first.items())]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    anchors = os.path.abspath(args.anchors)
    if not os.path.isfile(os.path.join(anchors, "kernels.py")):
        print(f"gpu anchors not found at {anchors} (pass --anchors PATH/TO/gpu_anchors)",
              file=sys.stderr)
        return 2
    gpu = has_gpu()
    if not gpu:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"      # before numba is imported
        args.small = True
    if args.tiny:
        args.small = True
    if args.small:
        os.environ["GPU_BENCH_SMALL"] = "1"           # before the anchors' common is imported
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX beside numba.cuda
    sys.path[:0] = [anchors, HERE, ROOT]
    sys.path += wheel_paths(args.wheels)      # after what is installed

    import numpy as np
    import numba
    from numba import cuda
    import common as C           # noqa: E402  (the anchors)
    import kernels as K          # noqa: E402
    import zyg
    import zyg_side as Z         # noqa: E402

    out = args.out
    if out is None:
        out = (os.path.join(ROOT, "benchmarks", "results") if gpu
               else tempfile.mkdtemp(prefix="zyg-gpu-bench-"))
    out = os.path.abspath(out)
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "python": sys.version.split()[0], "numba": numba.__version__,
           "numpy": np.__version__, "numba.cuda": getattr(cuda, "implementation", "?"),
           "zyg": getattr(zyg, "__version__", "?"), "simulator": not gpu,
           "small": bool(args.small), "tiny": bool(args.tiny), "timed": gpu, "anchors": anchors}
    if gpu:
        try:
            name = cuda.get_current_device().name
            env["device"] = name.decode() if isinstance(name, bytes) else str(name)
        except Exception as e:
            env["device"] = f"error: {e}"
    else:
        env["why_not_timed"] = "no GPU here, numba's CUDA simulator"
    first = env["first_call_s"] = {}
    rep = Report(out, env)
    log(f"zyg GPU benchmark: {'GPU ' + env.get('device', '') if gpu else 'SIMULATOR (no GPU)'}; "
        f"anchors {anchors}; out {out}")
    deadline = T0 + args.budget
    sync = K.sync
    bench_kw = dict(runs=7, budget_s=0.5 if args.small else 2.0)

    def bench(call):
        return C.bench(call, sync, **bench_kw)[0]

    def first_call(name, call):
        t = time.perf_counter()
        call()
        sync()
        first[name] = time.perf_counter() - t
        return first[name]

    # ------------------------------------------------------------------ JAX (optional)
    jax_impl = None

    def jax():
        nonlocal jax_impl
        if jax_impl is not None or args.jax == "no" or (not gpu and args.jax != "yes"):
            return jax_impl or None
        try:
            import peers as P                     # noqa: E402  (the anchors)
            impl = P.jax_impl()
            if impl["on_gpu"] or args.jax == "yes":
                jax_impl = impl
                env["jax"] = impl["env"]
            else:
                env["jax"] = f"not on a GPU ({impl['env'].get('backend')}): not timed"
                jax_impl = False
        except Exception as e:
            env["jax"] = f"not importable: {type(e).__name__}: {e}"
            jax_impl = False
        rep.flush()
        return jax_impl or None

    def jax_time(fn):
        """Median ms of a JAX call, or a note."""
        j = jax()
        if not j:
            return None
        try:
            return C.bench(fn(j), j["sync"], **bench_kw)[0] * 1e3
        except Exception as e:
            return "error: " + rep.error("jax", e)

    only = [w.strip() for w in args.only.split(",") if w.strip()]
    if args.tiny:
        verify_sizes = dict(C.VERIFY, heat=(C.VERIFY["heat"][0], 2))
    else:
        verify_sizes = C.VERIFY
    timed_sizes = C.SIZES if gpu or args.sim_timing else None
    if args.sim_timing and not gpu:
        env["timed"] = True
        env["sim_timing"] = "figures measured under the SIMULATOR: meaningless, code path check only"
    failed = []

    def section_deadline(name):
        return min(deadline, time.time() + SHARE[name] * args.budget)

    def left(d, need, what):
        if time.time() + need > d:
            log(f"  SKIP {what}: out of this section's budget")
            return False
        return True

    def ratios(zyg_ms, hand, primal):
        best = min(v for v in hand.values() if isinstance(v, float)) if hand else None
        return (zyg_ms / best if best else None), (zyg_ms / primal if primal else None)

    # ================================================================== 1. Bessel
    if "bessel" in only:
        d = section_deadline("bessel")
        log(f"1. Bessel J{C.NU}")
        errs = {}
        n = verify_sizes["bessel"]
        z = C.bessel_data(n)
        j_ref, dj_ref = C.bessel_ref(z)
        hb = K.Bessel(z)
        hb.grad_tape()
        dz_tape = hb.dz.copy_to_host()
        zb = Z.Bessel(z)
        try:
            first_call("zyg bessel adjoint", zb.grad_adjoint)
            dz = zb.dz.copy_to_host()
            e = max(C.rel_err(dz, dz_tape), C.rel_err(dz, dj_ref))
            rep.check("bessel zyg adjoint vs hand reverse (local tape)", C.rel_err(dz, dz_tape), TOL)
            rep.check("bessel zyg adjoint vs reference (J1-J3)/2", C.rel_err(dz, dj_ref), TOL)
            rep.check("bessel zyg adjoint value", C.rel_err(zb.out.copy_to_host(), j_ref), 1e-12)
            errs["adjoint"] = e
        except Exception as ex:
            errs["adjoint"] = rep.error("bessel zyg adjoint", ex)
        try:
            first_call("zyg bessel vmap", zb.grad_vmap)
            g = zb.grads.copy_to_host()
            e = max(C.rel_err(g, dz_tape), C.rel_err(g, dj_ref))
            rep.check("bessel zyg vmap vs hand reverse (local tape)", C.rel_err(g, dz_tape), TOL)
            rep.check("bessel zyg vmap vs reference (J1-J3)/2", C.rel_err(g, dj_ref), TOL)
            rep.check("bessel zyg vmap value", C.rel_err(zb.vals.copy_to_host(), j_ref), 1e-12)
            errs["vmap"] = e
        except Exception as ex:
            errs["vmap"] = rep.error("bessel zyg vmap", ex)
        try:
            first_call("zyg bessel vmap reverse", zb.grad_vmap_reverse)
            g = zb.grads_r.copy_to_host()
            e = max(C.rel_err(g, dz_tape), C.rel_err(g, dj_ref))
            rep.check("bessel zyg vmap (reverse mode) vs reference (J1-J3)/2", C.rel_err(g, dj_ref), TOL)
            errs["vmap reverse"] = e
        except Exception as ex:
            errs["vmap reverse"] = rep.error("bessel zyg vmap reverse", ex)
        # (the batch's device gradient: forward mode under zyg.cuda's default "auto", and
        # reverse mode with its per-thread tape, side by side)
        kinds = {"adjoint": ("zyg.vjp(bessel_primal_k), dout = 1", "adjoint"),
                 "vmap": ('zyg.vmap(zyg.value_and_grad(j2), target="cuda") (forward mode)', "vmap"),
                 "vmap reverse": ('the same vmap, set_gradient_mode("reverse")', "vmap reverse")}
        runs = {"adjoint": ("grad_adjoint", "dz"), "vmap": ("grad_vmap", "grads"),
                "vmap reverse": ("grad_vmap_reverse", "grads_r")}
        for n_t in (timed_sizes["bessel"] if timed_sizes else [n]):
            times = {}
            if timed_sizes and left(d, 10, f"bessel n={n_t}"):
                try:
                    z = C.bessel_data(n_t)
                    hb = K.Bessel(z)
                    zb = Z.Bessel(z)
                    times["primal"] = bench(hb.primal) * 1e3
                    times["hand"] = {"recurrence": bench(hb.grad_fwd) * 1e3,
                                     "local tape": bench(hb.grad_tape) * 1e3}
                    for key in kinds:
                        if isinstance(errs.get(key), str):
                            continue
                        fn = getattr(zb, runs[key][0])
                        times[key] = bench(fn) * 1e3
                        sel = np.linspace(0, n_t - 1, min(n_t, 2000)).astype(int)
                        got = getattr(zb, runs[key][1]).copy_to_host()[sel]
                        err = C.rel_err(got, C.bessel_ref(z[sel])[1])
                        rep.check(f"bessel zyg {key} n={n_t} subset vs reference", err, TOL)
                        errs[key] = max(errs[key], err)
                    nterms = None
                    try:
                        import peers as P             # noqa: E402
                        nterms = P.bessel_nterms()
                    except Exception:
                        pass
                    times["jax"] = jax_time(lambda j: (lambda g, zz: (lambda: g(zz)))(
                        j["make_bessel"](nterms)[1], j["asarray"](z)))
                except Exception as ex:
                    times["error"] = rep.error(f"bessel n={n_t} timing", ex)
            for key, (what, _) in kinds.items():
                e = errs.get(key)
                row = dict(workload=f"Bessel J{C.NU}", zyg=what, size=f"{n_t:,} points",
                           primal_ms=times.get("primal"), hand_ms=times.get("hand"),
                           zyg_ms=times.get(key), jax_ms=times.get("jax"),
                           zyg_first_s=first.get(f"zyg bessel {key}"),
                           verified=(None if e is None else (not isinstance(e, str) and e <= TOL)),
                           err=(e if isinstance(e, float) else None),
                           notes=("against bessel_grad_tape_k and (J1-J3)/2"
                                  + ("; hand = bessel_grad_fwd_k / bessel_grad_tape_k" if timed_sizes else "")),
                           error=(e if isinstance(e, str) else times.get("error")))
                if isinstance(row["zyg_ms"], float) and row["hand_ms"]:
                    row["zyg_over_hand"], row["zyg_over_primal"] = ratios(row["zyg_ms"], row["hand_ms"], row["primal_ms"])
                if row["verified"] is False or isinstance(e, str) or times.get("error"):
                    failed.append(f"bessel {key}")
                rep.row(**row)
        log(f"   Bessel done (elapsed {time.time() - T0:.1f} s)")

    # ================================================================== 2. heat
    if "heat" in only:
        d = section_deadline("heat")
        n, T = verify_sizes["heat"]
        log(f"2. heat 1-D, n={n}, T={T} (verification)")
        err, msg = None, None
        try:
            u0, alpha = C.heat_data(n)
            L_ref, du_ref, _ = C.heat_ref(u0, alpha, T)
            hh = K.Heat(u0, alpha, T, "gather")
            hh.grad()
            du_hand = hh.du0.copy_to_host()
            zh = Z.Heat(u0, alpha, T)
            first_call("zyg heat tape", zh.grad)
            du = np.asarray(zh.du0.copy_to_host())
            err = max(C.rel_err(du, du_hand), C.rel_err(du, du_ref))
            rep.check("heat zyg du0 vs hand gather adjoint", C.rel_err(du, du_hand), TOL)
            rep.check("heat zyg du0 vs numpy reverse", C.rel_err(du, du_ref), TOL)
            rep.check("heat zyg loss", abs(zh.loss - L_ref) / abs(L_ref), 1e-12)
        except Exception as ex:
            msg = rep.error("heat zyg tape", ex)
        times = {}
        size = f"n={n:,}, T={T}"
        if timed_sizes and msg is None and left(d, 15, "heat timing"):
            n, T = timed_sizes["heat"]
            size = f"n={n:,}, T={T}"
            try:
                u0, alpha = C.heat_data(n)
                times["hand"] = {}
                for variant in ("gather", "scatter"):
                    hh = K.Heat(u0, alpha, T, variant)
                    if "primal" not in times:
                        times["primal"] = bench(hh.primal) * 1e3
                    times["hand"][variant] = bench(hh.grad) * 1e3
                    del hh
                zh = Z.Heat(u0, alpha, T)
                times["zyg"] = bench(zh.grad) * 1e3
                del zh
                times["jax"] = jax_time(lambda j: (lambda g, uu, aa: (lambda: g(uu, aa)))(
                    j["make_heat"](T)[1], j["asarray"](u0), j["asarray"](alpha)))
            except Exception as ex:
                times["error"] = rep.error("heat timing", ex)
        row = dict(workload="heat 1-D", zyg="zyg.cuda.Tape over T launches of heat_step_k",
                   size=size, primal_ms=times.get("primal"), hand_ms=times.get("hand"),
                   zyg_ms=times.get("zyg"), jax_ms=times.get("jax"),
                   zyg_first_s=first.get("zyg heat tape"),
                   verified=(False if msg else None if err is None else err <= TOL), err=err,
                   notes="du0 only (alpha is a number: kernel adjoints give shadows to arrays; the "
                         "hand kernels and JAX also give dalpha); against heat_adj_gather_k and numpy",
                   error=msg or times.get("error"))
        if isinstance(row["zyg_ms"], float):
            row["zyg_over_hand"], row["zyg_over_primal"] = ratios(row["zyg_ms"], row["hand_ms"], row["primal_ms"])
        if msg or not row["verified"] or times.get("error"):
            failed.append("heat")
        rep.row(**row)
        log(f"   heat done (elapsed {time.time() - T0:.1f} s)")

    # ================================================================== 3. XS
    if "xs" in only:
        d = section_deadline("xs")
        G, N = verify_sizes["xs"]
        log(f"3. XSBench-like lookup, G={G}, N={N} (verification)")
        err, msg = None, None
        try:
            eg, xs, en = C.xs_data(G, N)
            L_ref, dxs_ref = C.xs_ref(eg, xs, en)
            hx = K.XS(eg, xs, en)
            hx.grad()
            dxs_hand = hx.dxs.copy_to_host()
            zx = Z.XS(eg, xs, en)
            first_call("zyg xs adjoint", zx.grad)
            dxs = zx.dxs.copy_to_host()
            err = max(C.rel_err(dxs, dxs_hand), C.rel_err(dxs, dxs_ref))
            rep.check("xs zyg dxs vs hand xs_grad_k", C.rel_err(dxs, dxs_hand), TOL)
            rep.check("xs zyg dxs vs bincount reference", C.rel_err(dxs, dxs_ref), TOL)
            rep.check("xs zyg loss", abs(zx.loss.copy_to_host()[0] - L_ref) / abs(L_ref), 1e-12)
            rep.check("xs zyg loss shadow stays 1", abs(zx.dloss.copy_to_host()[0] - 1.0), 0.0)
        except Exception as ex:
            msg = rep.error("xs zyg adjoint", ex)
        times = {}
        size = f"G={G:,}, N={N:,}"
        if timed_sizes and msg is None and left(d, 10, "xs timing"):
            G, N = timed_sizes["xs"]
            size = f"G={G:,}, N={N:,}"
            try:
                eg, xs, en = C.xs_data(G, N)
                hx = K.XS(eg, xs, en)
                times["primal"] = bench(hx.primal) * 1e3
                times["hand"] = {"atomics": bench(hx.grad) * 1e3}
                zx = Z.XS(eg, xs, en)
                times["zyg"] = bench(zx.grad) * 1e3
                _, dxs_ref = C.xs_ref(eg, xs, en)
                e2 = C.rel_err(zx.dxs.copy_to_host(), dxs_ref)
                rep.check(f"xs zyg dxs at N={N} vs bincount reference", e2, TOL)
                err = max(err, e2)
                times["jax"] = jax_time(lambda j: (lambda g, a, b, c: (lambda: g(a, b, c)))(
                    j["xs"][1], j["asarray"](xs), j["asarray"](eg), j["asarray"](en)))
            except Exception as ex:
                times["error"] = rep.error("xs timing", ex)
        row = dict(workload="XSBench-like lookup", zyg="zyg.vjp(xs_lookup_k), dloss = 1",
                   size=size, primal_ms=times.get("primal"), hand_ms=times.get("hand"),
                   zyg_ms=times.get("zyg"), jax_ms=times.get("jax"),
                   zyg_first_s=first.get("zyg xs adjoint"),
                   verified=(False if msg else None if err is None else err <= TOL), err=err,
                   notes="zyg also computes d/degrid and d/denergies (every float array has a "
                         "shadow); against xs_grad_k and bincount",
                   error=msg or times.get("error"))
        if isinstance(row["zyg_ms"], float):
            row["zyg_over_hand"], row["zyg_over_primal"] = ratios(row["zyg_ms"], row["hand_ms"], row["primal_ms"])
        if msg or not row["verified"] or times.get("error"):
            failed.append("xs")
        rep.row(**row)
        log(f"   xs done (elapsed {time.time() - T0:.1f} s)")

    # ================================================================== 4. GMM
    if "gmm" in only:
        d = section_deadline("gmm")
        N = verify_sizes["gmm"]
        log(f"4. GMM NLL, N={N}, d={C.GMM_D}, K={C.GMM_K} (verification)")
        # the shadows of mu, iv and cst (shared by every thread) summed per block from a
        # copy each thread keeps, and (the earlier way) added atomically into shared memory
        variants = {"block sums": ("zyg.cuda.Tape over gmm_prep_k + gmm_primal_k", "grad"),
                    "shared atomics": ("the same, shadows added atomically in shared memory",
                                       "grad_shared_atomics")}
        errs, msgs = {}, {}
        X, mu, lv, al = C.gmm_data(N)
        L_ref, dmu_ref, dlv_ref, da_ref = C.gmm_ref(X, mu, lv, al)
        hand = None
        for v, (_, meth) in variants.items():
            try:
                if hand is None:
                    hg = K.GMM(X, mu, lv, al)
                    hg.grad("staged")
                    hand = (hg.dmu.copy_to_host(), hg.dlv.copy_to_host(), hg.dalpha.copy_to_host())
                zg = Z.GMM(X, mu, lv, al)
                first_call(f"zyg gmm tape, {v}", getattr(zg, meth))
                got = (zg.dmu.copy_to_host(), zg.dlv.copy_to_host(), zg.dalpha.copy_to_host())
                e_hand = max(C.rel_err(a, b) for a, b in zip(got, hand))
                e_ref = max(C.rel_err(a, b) for a, b in zip(got, (dmu_ref, dlv_ref, da_ref)))
                errs[v] = max(e_hand, e_ref)
                rep.check(f"gmm zyg ({v}: dmu, dlv, dalpha) vs hand staged kernel", e_hand, TOL)
                rep.check(f"gmm zyg ({v}: dmu, dlv, dalpha) vs closed form", e_ref, TOL)
                rep.check(f"gmm zyg ({v}) loss", abs(zg.loss - L_ref) / abs(L_ref), 1e-12)
            except Exception as ex:
                msgs[v] = rep.error(f"gmm zyg tape, {v}", ex)
        times = {}
        size = f"N={N:,}, d={C.GMM_D}, K={C.GMM_K}"
        if timed_sizes and len(msgs) < len(variants) and left(d, 12, "gmm timing"):
            N = timed_sizes["gmm"]
            size = f"N={N:,}, d={C.GMM_D}, K={C.GMM_K}"
            try:
                X, mu, lv, al = C.gmm_data(N)
                hg = K.GMM(X, mu, lv, al)
                times["primal"] = bench(hg.primal) * 1e3
                times["hand"] = {}
                for variant in ("staged", "block", "atomic"):
                    if left(d, 6, f"gmm hand {variant}"):
                        times["hand"][variant] = bench(lambda: hg.grad(variant)) * 1e3
                zg = Z.GMM(X, mu, lv, al)
                for v, (_, meth) in variants.items():
                    if v not in msgs and left(d, 4, f"gmm zyg {v}"):
                        times[v] = bench(getattr(zg, meth)) * 1e3
                times["jax"] = jax_time(lambda j: (lambda g, a, b, c, x: (lambda: g(a, b, c, x)))(
                    j["gmm"][1], j["asarray"](mu), j["asarray"](lv), j["asarray"](al), j["asarray"](X)))
            except Exception as ex:
                times["error"] = rep.error("gmm timing", ex)
        for v, (what, _) in variants.items():
            err, msg = errs.get(v), msgs.get(v)
            row = dict(workload="GMM NLL", zyg=what,
                       size=size, primal_ms=times.get("primal"), hand_ms=times.get("hand"),
                       zyg_ms=times.get(v), jax_ms=times.get("jax"),
                       zyg_first_s=first.get(f"zyg gmm tape, {v}"),
                       verified=(False if msg else None if err is None else err <= TOL), err=err,
                       notes="w.r.t. mu, lv, alpha (the adjoints also give dX); against the staged "
                             "hand kernel and the closed form",
                       error=msg or times.get("error"))
            if isinstance(row["zyg_ms"], float):
                row["zyg_over_hand"], row["zyg_over_primal"] = ratios(row["zyg_ms"], row["hand_ms"],
                                                                      row["primal_ms"])
            if msg or not row["verified"] or times.get("error"):
                failed.append("gmm")
            rep.row(**row)
        log(f"   gmm done (elapsed {time.time() - T0:.1f} s)")

    rep.flush()
    print()
    print(markdown(rep.data))
    npass = sum(1 for c in rep.data["checks"] if c["ok"])
    log(f"checks: {npass} passed, {len(rep.data['checks']) - npass} failed; wrote "
        f"{os.path.join(out, 'gpu.md')} and gpu.json")
    print("ZYG_GPU_BENCH " + json.dumps({"failed": failed, "out": out,
                                          "verified": {r["workload"] + ": " + r["zyg"]: r["verified"]
                                                       for r in rep.data["rows"]}}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
