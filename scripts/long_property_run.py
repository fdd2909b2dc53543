"""Long run of the property families with the oracles of tests/oracles.py (issue 23).

    python scripts/long_property_run.py                      # 850 random programs per family
    python scripts/long_property_run.py -n 2000 --cpu-every 20 tests/test_fuzz_autograd.py

runs the given test files (default: tests/test_property_round2.py and
tests/test_fuzz_autograd.py; the six families of the first alone make 5,100 programs at the
default count) with ``ZYG_PROPERTY_EXAMPLES=n`` random programs per family, mismatches
counted instead of raised (``ZYG_ORACLE_COLLECT=1``), and prints per family the programs,
what each oracle checked, the refusals, the unreliable references and the mismatches, with
the first mismatching programs.  The cpu target runs on about one program of
``--cpu-every`` (a numba compile each, seconds); ``--hvp-every`` sets the share of
programs whose hvp is checked on python.  The exit status is 1 if there was a mismatch or a
test failed.  It also works on the existing families (tests/test_property*.py), whose
counts are reported under their own names.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["tests/test_property_round2.py", "tests/test_fuzz_autograd.py"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", default=DEFAULT)
    ap.add_argument("-n", "--examples", type=int, default=850, help="random programs per family")
    ap.add_argument("--cpu-every", type=int, default=10, help="cpu target on one program of k")
    ap.add_argument("--hvp-every", type=int, default=2, help="python hvp on one program of k")
    ap.add_argument("-k", default=None, help="pytest -k expression (e.g. a family)")
    ap.add_argument("--seed", default=None, help="hypothesis seed, to reproduce a run")
    a = ap.parse_args(argv)
    fd, report = tempfile.mkstemp(prefix="zyg_oracles_", suffix=".json")
    os.close(fd)
    env = dict(os.environ, ZYG_PROPERTY_EXAMPLES=str(a.examples), ZYG_ORACLE_COLLECT="1",
               ZYG_ORACLE_REPORT=report, ZYG_PROPERTY_CPU_EVERY=str(a.cpu_every),
               ZYG_ORACLE_HVP_EVERY=str(a.hvp_every))
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *a.files]
    if a.k:
        cmd += ["-k", a.k]
    if a.seed:
        cmd += [f"--hypothesis-seed={a.seed}"]
    print("running:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    with open(report) as fh:
        text = fh.read()
    stats = json.loads(text) if text.strip() else {}
    total_p = total_m = 0
    print("\n== programs and mismatches per family ==")
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
    print(f"\ntotal: {total_p} programs, {total_m} mismatches (pytest exit status {rc})")
    os.unlink(report)
    return 1 if rc != 0 or total_m else 0


if __name__ == "__main__":
    sys.exit(main())
