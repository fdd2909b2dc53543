"""Summarise run_local.py session logs (``--log``) as the markdown table of
benchmarks/results/gradbench.md: per eval and input, the median ``evaluate`` time of
the primal and of the derivative, their ratio, whether GradBench's validation passed,
and the same for another tool's logs (GradBench's manual C++ tool) where given.

    python benchmarks/gradbench/table.py LOGDIR   # reads LOGDIR/<tool>-<eval>.jsonl
"""
from __future__ import annotations

import glob
import json
import os
import statistics
import sys

PRIMAL = {"primal", "objective", "cost", "square"}
EVALS = ("lse", "llsq", "ode", "det", "kmeans", "gmm", "lstm", "ba", "ht", "particle", "saddle")


def read(path: str) -> dict:
    """{(function, description): (median ms, valid, error)} from one session log."""
    msgs, out = {}, {}
    for line in open(path):
        rec = json.loads(line)
        if "message" in rec:
            m = rec["message"]
            msgs[m["id"]] = m
            if m.get("kind") == "analysis":
                key = out_key[m["of"]]
                ms, _, err = out[key]
                out[key] = (ms, m["valid"], m.get("error"))
        else:
            r = rec["response"]
            m = msgs.get(r["id"], {})
            if m.get("kind") == "evaluate":
                key = (m["function"], m.get("description"))
                out_key[r["id"]] = key
                t = [x["nanoseconds"] for x in r.get("timings") or [] if x["name"] == "evaluate"]
                ms = statistics.median(t) / 1e6 if r.get("success") and t else None
                out[key] = (ms, None, None if r.get("success") else r.get("error", "failed"))
    return out


out_key: dict = {}


def fmt(ms):
    if ms is None:
        return "-"
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def main(logdir: str) -> None:
    rows = ["| eval | input | zyg primal ms | zyg derivative ms | derivative / primal | "
            "valid | manual C++ primal ms | manual C++ derivative ms | zyg / manual (derivative) |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for ev in EVALS:
        zp = os.path.join(logdir, f"zyg-{ev}.jsonl")
        if not os.path.exists(zp):
            continue
        z = read(zp)
        mp = os.path.join(logdir, f"manual-{ev}.jsonl")
        man = read(mp) if os.path.exists(mp) else {}
        descs = list(dict.fromkeys(d for _, d in z))
        for d in descs:
            fs = [f for f, dd in z if dd == d]
            prim = [f for f in fs if f in PRIMAL]
            ders = [f for f in fs if f not in PRIMAL]
            p = z[(prim[0], d)][0] if prim else None
            for f in ders:
                g, valid, err = z[(f, d)]
                vtxt = "yes" if valid else ("refused" if err else "NO")
                mprim = man.get((prim[0], d), (None,))[0] if prim else None
                mder = man.get((f, d), (None,))[0]
                ratio = f"{g / p:.2g}" if g and p else "-"
                vs = f"{g / mder:.2g}" if g and mder else "-"
                name = ev if len(ders) == 1 else f"{ev} {f}"
                rows.append(f"| {name} | {d} | {fmt(p)} | {fmt(g)} | {ratio} | {vtxt} | "
                            f"{fmt(mprim)} | {fmt(mder)} | {vs} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1])
