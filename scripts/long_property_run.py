"""Long run of the property families with the oracles of tests/oracles.py (issue 23).

    python scripts/long_property_run.py                      # 850 random programs per family
    python scripts/long_property_run.py -n 2000 --cpu-every 20 tests/test_fuzz_autograd.py
    python scripts/long_property_run.py -j 14 -n 400 --time-limit 420 --out report.json

runs the given test files (default: tests/test_property_round2.py and
tests/test_fuzz_autograd.py; the six families of the first alone make 5,100 programs at the
default count) with ``ZYG_PROPERTY_EXAMPLES=n`` random programs per family, mismatches
counted instead of raised (``ZYG_ORACLE_COLLECT=1``), and prints per family the programs,
what each oracle checked, the refusals, the unreliable references and the mismatches, with
the first mismatching programs.  The cpu target runs on about one program of
``--cpu-every`` (a numba compile each, seconds); ``--hvp-every`` sets the share of
programs whose hvp is checked on python.

``-j N`` runs N pytest processes at once, each on one family test (``-k``), round robin, with
its own random seed and disk cache; ``-n`` is then the count of each process.
``--time-limit S`` interrupts the processes after S seconds, and kills those still running
20 s later (what they checked so far is counted: the oracles write their report as they go).
The exit status is 1 if there was a mismatch or a test failed (an interrupt is not a
failure).  It also works on the existing families (tests/test_property*.py), whose counts are
reported under their own names.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["tests/test_property_round2.py", "tests/test_fuzz_autograd.py"]


def family_tests(files):
    """(file, test name) of each family test in ``files``: the tests that call family_test."""
    out = []
    for f in files:
        tree = ast.parse(open(os.path.join(ROOT, f)).read())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and \
                    "family_test" in ast.unparse(node):
                out.append((f, node.name))
    return out


def merge(reports):
    stats = {}
    for rep in reports:
        for fam, rec in rep.items():
            cur = stats.setdefault(fam, {"counts": Counter(), "mismatches": []})
            cur["counts"].update(rec["counts"])
            cur["mismatches"] += rec["mismatches"]
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", default=DEFAULT)
    ap.add_argument("-n", "--examples", type=int, default=850, help="random programs per family (per process)")
    ap.add_argument("--cpu-every", type=int, default=10, help="cpu target on one program of k")
    ap.add_argument("--hvp-every", type=int, default=2, help="python hvp on one program of k")
    ap.add_argument("-k", default=None, help="pytest -k expression (e.g. a family)")
    ap.add_argument("--seed", default=None, help="hypothesis seed, to reproduce a run")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="pytest processes at once")
    ap.add_argument("--time-limit", type=float, default=0, help="interrupt after this many seconds")
    ap.add_argument("--out", default=None, help="write the merged report (JSON) here")
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="zyg_longrun_")
    base = dict(os.environ, ZYG_PROPERTY_EXAMPLES=str(a.examples), ZYG_ORACLE_COLLECT="1",
                ZYG_PROPERTY_CPU_EVERY=str(a.cpu_every), ZYG_ORACLE_HVP_EVERY=str(a.hvp_every))
    if a.jobs > 1:
        fams = family_tests(a.files)
        if a.k:
            fams = [(f, t) for f, t in fams if a.k in t]
        if not fams:
            # files without family tests (the first property files): one process per file
            fams = [(f, "test_") for f in a.files]
        runs = [[f, "-k", t] for f, t in (fams[i % len(fams)] for i in range(a.jobs))]
    else:
        runs = [list(a.files) + (["-k", a.k] if a.k else [])]
    procs = []
    t0 = time.time()
    for i, args in enumerate(runs):
        report = os.path.join(tmp, f"report{i}.json")
        env = dict(base, ZYG_ORACLE_REPORT=report,
                   ZYG_CACHE_DIR=os.path.join(tmp, f"cache{i}"))
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args]
        if a.seed:
            cmd += [f"--hypothesis-seed={int(a.seed) + i}"]
        print("running:", " ".join(cmd), flush=True)
        log = open(os.path.join(tmp, f"log{i}.txt"), "w") if a.jobs > 1 else None
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                                       if log else None), report, log))
    interrupted = False
    while any(p.poll() is None for p, _, _ in procs):
        if a.time_limit and time.time() - t0 > a.time_limit and not interrupted:
            for p, _, _ in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            interrupted = time.time()
        if interrupted and time.time() - interrupted > 20:
            # not ended 20 s after the interrupt (a compile holding it): their reports,
            # written as they ran, still count
            for p, _, _ in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(1)
    rcs = [p.returncode for p, _, _ in procs]
    reports = []
    for p, report, log in procs:
        if log:
            log.close()
        if os.path.exists(report):
            with open(report) as fh:
                text = fh.read()
            if text.strip():
                reports.append(json.loads(text))
    stats = merge(reports)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"seconds": round(time.time() - t0), "exit_statuses": rcs, "families": stats},
                      fh, indent=1, sort_keys=True, default=dict)
    total_p = total_m = 0
    print(f"\n== programs and mismatches per family ({round(time.time() - t0)} s, "
          f"{len(procs)} processes{', interrupted at the time limit' if interrupted else ''}) ==")
    for fam, rec in sorted(stats.items()):
        c = rec["counts"]
        mism = sum(v for k, v in c.items() if k.startswith("mismatch"))
        total_p += c.get("programs", 0)
        total_m += mism
        print(f"{fam}: {c.get('programs', 0)} programs, {c.get('refused', 0)} refused, "
              f"{mism} mismatches")
        for k in sorted(c):
            if k.startswith(("checked", "mismatch", "unreliable", "refused", "rejected")) and k != "refused":
                print(f"    {k}: {c[k]}")
        for m in rec["mismatches"][:2]:
            print("    first mismatch: " + m[:1500].replace("\n", "\n        "))
    # an interrupted pytest exits with 2; a failed test with 1
    failed = [rc for rc in rcs if rc not in ((0, 2, -signal.SIGKILL) if interrupted else (0,))]
    print(f"\ntotal: {total_p} programs, {total_m} mismatches (pytest exit statuses {rcs})")
    if failed and a.jobs > 1:
        for i, rc in enumerate(rcs):
            if rc not in (0, 2, -signal.SIGKILL):
                print(f"--- process {i} ({' '.join(runs[i])}) exit {rc}, end of its log:")
                print(open(os.path.join(tmp, f"log{i}.txt")).read()[-3000:])
    return 1 if failed or total_m else 0


if __name__ == "__main__":
    sys.exit(main())
