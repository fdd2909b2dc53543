"""Cold first-call latency of zyg's cpu target, and where the time goes (issue 24).

Every function of the real-code corpus (``tests/realworld``: numba functions as public
projects write them, 8-60 lines) that zyg differentiates on cpu is measured in fresh Python
processes, each with an empty private cache:

* ``zyg``: ``zyg.value_and_grad(f)(*args)`` after ``import zyg`` -- the first call a user
  waits for, split into exclusive phases with numba's event API: zyg's own work (parsing,
  SSA, transform, code generation, everything outside numba), numba's type inference, its
  lowering to LLVM IR (Python), LLVM itself (optimisation and machine code, time spent
  holding numba's LLVM lock), and numba's other passes; plus the lines of code generated;
* ``warm``: the same in a second process on the cache the first one left (a user's second
  run);
* ``new``: the same in a fresh process whose cache holds only zyg's own compiled helpers
  (``numerics.on_disk``: the tape's ``grow``, shadows, the nan test), left there by the
  gradients of three other functions (``SEED``) -- a user's first call of a new function on a
  machine where zyg has run before;
* ``numba``: the first call of the function itself under ``numba.njit`` in a fresh process:
  what numba alone takes to compile the *primal* -- the floor any numba-based tool starts
  from.  ``x numba`` is the ratio.

    python -m benchmarks.first_call                 # every case, 2 processes at a time
    python -m benchmarks.first_call -k stats -j 1   # cases whose id contains "stats"
    python -m benchmarks.first_call --every 3       # a third of them (23 functions)
    python -m benchmarks.first_call --out benchmarks/results/first-call

Times are wall seconds on whatever machine runs it; run it on a quiet one, and read the
ratios before the seconds.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
MARK = "ZYG_FIRST_CALL_JSON "
PHASES = ("zyg", "typing", "lowering", "llvm", "numba other")


def cases() -> List[tuple]:
    """(id, case) of the corpus cases zyg differentiates on cpu."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    from tests.realworld.test_realworld import ALL
    return [(f"{field.replace(' ', '_').replace('/', '_')}-{c.name}", c) for field, c in ALL
            if c.needs_on("cpu") is None]


class _Phases:
    """Exclusive wall time per phase from numba's nested compile events."""

    def __init__(self):
        self.stack: List[list] = []
        self.total: Dict[str, float] = {p: 0.0 for p in PHASES[1:]}

    @staticmethod
    def phase(ev) -> str:
        if ev.kind == "numba:llvm_lock":
            return "llvm"
        if ev.kind == "numba:run_pass":
            name = str((ev.data or {}).get("name", ""))
            if name.startswith("nopython_type_inference"):
                return "typing"
            if name.startswith("native_lowering"):
                return "lowering"
        return "numba other"

    def on_start(self, ev):
        self.stack.append([self.phase(ev), time.perf_counter(), 0.0])

    def on_end(self, ev):
        if not self.stack:
            return
        ph, t0, inner = self.stack.pop()
        took = time.perf_counter() - t0
        self.total[ph] += took - inner
        if self.stack:
            self.stack[-1][2] += took


def child() -> None:
    """``python -c ... child() MODE CASE_ID``: one measurement, printed as JSON."""
    mode, cid = sys.argv[1], sys.argv[2]
    found = dict(cases())
    case = found[cid]
    args = case.make_args()
    t0 = time.perf_counter()
    if mode == "numba":
        import numba
        fn = case.fn if hasattr(case.fn, "py_func") else numba.njit(case.fn)
        fn(*args)
        print(MARK + json.dumps({"first_s": time.perf_counter() - t0}))
        return
    import zyg
    from numba.core import event
    t_import = time.perf_counter() - t0
    if mode == "tiered":
        # zyg.set_tiered: the first answer (python target) and when the compiled code is in
        zyg.set_tiered(True)
        t1 = time.perf_counter()
        g = zyg.value_and_grad(case.fn, case.argnums, target="cpu")
        g(*args)
        first = time.perf_counter() - t1
        tiered = zyg.tiered.STATS["python"] + zyg.tiered.STATS["preempted"] > 0
        zyg.tiered.wait()
        ready = time.perf_counter() - t1
        print(MARK + json.dumps({"first_s": first, "ready_s": ready, "tiered": tiered,
                                 "why_not": None if tiered else zyg.tiered.why_not(case.fn)}))
        return
    rec = _Phases()
    listener = type("L", (event.Listener,), {"on_start": lambda s, e: rec.on_start(e),
                                              "on_end": lambda s, e: rec.on_end(e)})()
    for kind in ("numba:compile", "numba:run_pass", "numba:llvm_lock"):
        event.register(kind, listener)
    # (getattr: the benchmark also measures checkouts older than the notice, for "before")
    getattr(zyg, "set_compile_notice", lambda s: None)(0)
    t1 = time.perf_counter()
    zyg.value_and_grad(case.fn, case.argnums, target="cpu")(*args)
    first = time.perf_counter() - t1
    phases = dict(rec.total)
    phases["zyg"] = first - sum(phases.values())
    gen = 0
    cache = Path(os.environ["ZYG_CACHE_DIR"])
    for p in cache.glob("*.py"):
        gen += sum(1 for ln in p.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
    src = inspect.getsource(getattr(case.fn, "py_func", case.fn))
    lines = sum(1 for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "@")))
    print(MARK + json.dumps({"import_s": t_import, "first_s": first, "phases": phases,
                             "generated_lines": gen, "source_lines": lines}))


def _run(mode: str, cid: str, cache: str, timeout: float) -> Dict[str, Any]:
    env = dict(os.environ, ZYG_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache, PYTHONHASHSEED="0")
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from benchmarks.first_call import child; child()")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code, mode, cid], env=env, cwd=str(ROOT),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result after {timeout:.0f} s"}
    for ln in p.stdout.splitlines():
        if ln.startswith(MARK):
            out = json.loads(ln[len(MARK):])
            out["process_s"] = time.perf_counter() - t0
            return out
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:200]}


#: the cases whose gradients leave zyg's helpers on disk for the ``new`` measurement
SEED = ("statistics-gaussian_loglik", "machine_learning-mlp_mse", "hydrology-bucket_model")
#: the helpers folder they left (``seed_helpers``), or None
HELPERS: List[str] = []


def seed_helpers(timeout: float) -> None:
    """Run the ``SEED`` cases in one cache folder and keep its ``helpers`` folder."""
    tmp = tempfile.mkdtemp(prefix="zyg_first_call_seed_")
    for cid in SEED:
        _run("zyg", cid, os.path.join(tmp, "cache"), timeout)
    got = os.path.join(tmp, "cache", "helpers")
    if os.path.isdir(got):
        HELPERS.append(got)


def measure(cid: str, timeout: float) -> Dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="zyg_first_call_")
    try:
        cold = _run("zyg", cid, os.path.join(tmp, "zyg"), timeout)
        warm = _run("zyg", cid, os.path.join(tmp, "zyg"), timeout) if "error" not in cold else {}
        new: Dict[str, Any] = {}
        if HELPERS and "error" not in cold:
            shutil.copytree(HELPERS[0], os.path.join(tmp, "new", "helpers"))
            new = _run("zyg", cid, os.path.join(tmp, "new"), timeout)
        floor = _run("numba", cid, os.path.join(tmp, "numba"), timeout)
        tiered = _run("tiered", cid, os.path.join(tmp, "tiered"), timeout) if TIERED else {}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"case": cid, "cold": cold, "warm": warm, "new": new, "numba": floor, "tiered": tiered}


#: also measure each case with zyg.set_tiered(True) (``--tiered``)
TIERED = False


def report(rows: List[Dict[str, Any]], seconds: float) -> str:
    ok = [r for r in rows if "error" not in r["cold"]]
    firsts = sorted(r["cold"]["first_s"] for r in ok)
    warms = sorted(r["warm"]["first_s"] for r in ok if "first_s" in r.get("warm", {}))
    news = sorted(r["new"]["first_s"] for r in ok if "first_s" in r.get("new", {}))
    ratios = sorted(r["cold"]["first_s"] / r["numba"]["first_s"] for r in ok if "first_s" in r["numba"])
    per_line = sorted(r["cold"]["first_s"] / max(1, r["cold"]["source_lines"]) for r in ok)
    gen_per_line = sorted(r["cold"]["generated_lines"] / max(1, r["cold"]["source_lines"]) for r in ok)
    share = {p: sum(r["cold"]["phases"][p] for r in ok) for p in PHASES}
    whole = sum(share.values()) or 1.0
    out = [f"{len(rows)} functions, {len(ok)} measured, {seconds:.0f} s, Python "
           f"{sys.version.split()[0]}, {os.cpu_count()} cores", ""]
    if ok:
        out += [f"- cold first call (cpu, empty cache, fresh process): median {statistics.median(firsts):.2f} s, "
                f"worst {firsts[-1]:.2f} s; over 30 s: {sum(f > 30 for f in firsts)}",
                f"- new function, zyg's helpers on disk (fresh process; the cache holds only the helpers "
                f"the gradients of {len(SEED)} other functions compiled): median {statistics.median(news):.2f} s, worst {news[-1]:.2f} s"
                if news else "- new function with zyg's helpers on disk: not measured",
                f"- second process, warm cache: median {statistics.median(warms):.2f} s, worst {warms[-1]:.2f} s"
                if warms else "- second process: not measured",
                f"- zyg's first call / numba's compile of the primal: median {statistics.median(ratios):.1f}x, "
                f"range {ratios[0]:.1f}-{ratios[-1]:.1f}x" if ratios else "- numba floor: not measured",
                f"- seconds per source line: median {statistics.median(per_line):.3f}; generated lines "
                f"per source line: median {statistics.median(gen_per_line):.1f}, worst {gen_per_line[-1]:.1f}",
                "- where the cold first calls' time goes (all functions together): " + ", ".join(
                    f"{p} {100 * share[p] / whole:.0f}%" for p in PHASES), ""]
    tiers = [r for r in ok if "first_s" in r.get("tiered", {})]
    if tiers:
        tf = sorted(r["tiered"]["first_s"] for r in tiers)
        tr = sorted(r["tiered"]["ready_s"] for r in tiers)
        n_t = sum(bool(r["tiered"]["tiered"]) for r in tiers)
        out += [f"- tiered (zyg.set_tiered(True), fresh process, empty cache; {n_t} of {len(tiers)} "
                f"functions qualify): first answer median {statistics.median(tf):.2f} s, worst "
                f"{tf[-1]:.2f} s; compiled code ready median {statistics.median(tr):.2f} s, worst "
                f"{tr[-1]:.2f} s", ""]
        out += ["| function | cold s | tiered: first answer s | compiled ready s | not tiered because |",
                "|---|---|---|---|---|"]
        out += [f"| {r['case']} | {r['cold']['first_s']:.2f} | {r['tiered']['first_s']:.2f} | "
                f"{r['tiered']['ready_s']:.2f} | {r['tiered'].get('why_not') or ''} |" for r in tiers]
        out.append("")
    out += ["| function | src lines | generated | cold s | zyg | typing | lowering | llvm | numba other "
            "| new fn s | warm s | numba s | x numba |", "|" + "---|" * 13]
    for r in rows:
        c, w, n = r["cold"], r.get("warm", {}), r["numba"]
        if "error" in c:
            out.append(f"| {r['case']} | | | {c['error']} | | | | | | | | | |")
            continue
        ph = c["phases"]
        ns = n.get("first_s")
        out.append(f"| {r['case']} | {c['source_lines']} | {c['generated_lines']} | {c['first_s']:.2f} | "
                   + " | ".join(f"{ph[p]:.2f}" for p in PHASES)
                   + f" | {r.get('new', {}).get('first_s', float('nan')):.2f}"
                   + f" | {w.get('first_s', float('nan')):.2f} | "
                   + (f"{ns:.2f} | {c['first_s'] / ns:.1f}x |" if ns else f"{n.get('error', '')} | |"))
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only the cases whose id contains this")
    ap.add_argument("--every", type=int, default=1, help="every k-th case only (a quicker sample)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="cases measured at once")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    ap.add_argument("--out", default=None, help="write OUT.md and OUT.json")
    ap.add_argument("--tiered", action="store_true",
                    help="also a fresh process with zyg.set_tiered(True): the first answer, and "
                         "when the compiled code is ready")
    ap.add_argument("--no-new", action="store_true",
                    help="leave out the new-function measurement (zyg's helpers on disk)")
    a = ap.parse_args(argv)
    global TIERED
    TIERED = a.tiered
    ids = [cid for cid, _ in cases() if a.k in cid][::max(1, a.every)]
    t0 = time.time()
    if not a.no_new:
        seed_helpers(a.timeout)
    with ThreadPoolExecutor(max(1, a.jobs)) as ex:
        rows = list(ex.map(lambda cid: measure(cid, a.timeout), ids))
    text = report(rows, time.time() - t0)
    print(text)
    if a.out:
        Path(a.out + ".md").write_text("# First calls of zyg on the real-code corpus\n\n"
                                       "`python -m benchmarks.first_call` (see its docstring)\n\n" + text)
        Path(a.out + ".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
