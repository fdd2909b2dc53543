"""Render benchmark results: a markdown report and a plot of the ratios.

Both read only the results dict produced by :func:`benchmarks.run.run_benchmarks`
(or loaded back from ``results.json``), so a report can be re-rendered later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from benchmarks.peers import LABELS
from benchmarks.timing import format_seconds

_HEADINGS = {"primal": "numba primal", "hand": "hand adjoint", "zyg": "zyg", **LABELS}
_RATIO_KEYS = ("zyg/primal", "zyg/hand", "hand/primal", "zyg/jax", "zyg/torch", "zyg/autograd")


def _cell(rec: dict[str, Any]) -> str:
    status = rec["status"]
    if status == "ok":
        text = format_seconds(rec["median_s"])
        return f"~{text}" if "extrapolated" in rec else text
    return {
        "wrong": "**WRONG**",
        "error": "error",
        "unavailable": "n/a",
        "not written": "-",
    }.get(status, status)


def _ratio(case: dict[str, Any], key: str) -> str:
    value = case["ratios"].get(key)
    if value is None:
        return "-"
    text = f"{value:.3g}"
    return f"~{text}" if key in case["ratios_extrapolated"] else text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _commit(meta: dict[str, Any]) -> str:
    git = meta.get("git") or {}
    commit = (git.get("commit") or "unknown")[:10]
    return commit + (" with uncommitted changes in zyg/ or benchmarks/" if git.get("dirty") else "")


def _fmt_arg(a: Any) -> str:
    if isinstance(a, dict) and "shape" in a:  # a summarised array
        return "array[" + "x".join(str(n) for n in a["shape"]) + "]"
    if isinstance(a, list):  # a small array
        shape = []
        while isinstance(a, list):
            shape.append(len(a))
            a = a[0] if a else None
        return "array[" + "x".join(str(n) for n in shape) + "]"
    return repr(a)


def _fmt_args(args: Any) -> str:
    return "(" + ", ".join(_fmt_arg(a) for a in args) + ")" if isinstance(args, list) else repr(args)


def _case_notes(case: dict[str, Any]) -> str:
    notes: dict[str, list[str]] = {}  # note -> frameworks, so shared notes print once
    for name in ("jax", "torch", "autograd"):
        rec = case["columns"][name]
        if rec["status"] in ("unavailable", "not written"):
            continue
        note = rec.get("note", "")
        if "extrapolated" in rec:
            ex = rec["extrapolated"]
            note += f"; ~ measured at {_fmt_args(ex['from_args'])}, x{ex['scale']:g} linear"
        if rec["status"] in ("error", "wrong"):
            note += f"; {rec['status'].upper()}"
        notes.setdefault(note, []).append(name)
    return "; ".join(f"{', '.join(names)}: {note}" for note, names in notes.items())


def markdown(results: dict[str, Any]) -> str:
    """The full markdown report: times, ratios, first call, call overhead, checks."""
    meta, settings = results["meta"], results["settings"]
    cases = results["cases"]
    out: list[str] = ["# zyg benchmarks", ""]
    if meta.get("zyg_stand_in"):
        out += ["**THE zyg COLUMN IS A STAND-IN (--no-zyg): it times a freshly compiled "
                "copy of the hand-written adjoint. These are not zyg's numbers.**", ""]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    t = settings["timing_settings"]
    out += [
        f"{meta['date']} on {meta['cpu']} ({meta['cpu_count']} cores), Python "
        f"{meta['python']}; {versions}. Commit {_commit(meta)}.",
        "",
        f"{'Quick (tiny sizes)' if settings['quick'] else 'Full'} run: median time per "
        f"call after warm-up, repeats for about {t['budget_s']:g} s per measurement "
        f"(at least {t['min_repeats']}). Every gradient was verified before it was "
        "timed; **WRONG** = failed verification (no time). n/a = framework not "
        "available, - = not written for it, ~ = extrapolated (see notes). "
        "Ratios are of medians; below 1 means zyg is faster.",
        "",
        "## Time per call (value and gradient; primal: value only)",
        "",
    ]
    out += _table(
        ["case", "args"] + [_HEADINGS[c] for c in _HEADINGS],
        [[c["case"], _fmt_args(c["args"])] + [_cell(c["columns"][k]) for k in _HEADINGS]
         for c in cases],
    )
    out += ["", "## Ratios", ""]
    out += _table(
        ["case"] + list(_RATIO_KEYS) + ["notes"],
        [[c["case"]] + [_ratio(c, k) for k in _RATIO_KEYS] + [_case_notes(c)] for c in cases],
    )
    out += _goals_section(cases)
    out += _first_call_section(results)
    out += _overhead_section(results.get("call_overhead"))
    out += _verification_section(cases)
    problems = results.get("problems") or []
    out += ["", "## Problems", ""]
    out += [f"- {p}" for p in problems] if problems else ["None."]
    out += ["", f"Total wall time {results.get('wall_s', 0.0):.1f} s.", ""]
    return "\n".join(out)


# the goals of ../shared/BENCHMARKS.md ("Goals"): zyg/hand within 1.3, within 1.1 on the
# scalar and loop workloads; faster than JAX jit everywhere, by 10x on the small scalar
# ones; 10x faster than PyTorch eager and autograd on every loop workload
_SCALAR_LOOP = {"sincos", "pow", "taylor", "bessel", "lse_loop"}
_SMALL_SCALAR = {"sincos", "bessel"}
_LOOPS = {"pow", "taylor", "bessel", "lse_loop", "gmm", "lstm", "ode"}


def _goals_section(cases: list[dict[str, Any]]) -> list[str]:
    """Each case's ratios against the goals, with whether this run meets them."""
    def check(case, key, goal):
        v = case["ratios"].get(key)
        if v is None:
            return f"- (goal {goal:g})"
        return f"{v:.3g} {'yes' if v <= goal else '**no**'} (goal {goal:g})"
    rows = []
    for c in cases:
        w = c.get("workload", c["case"].split("[")[0])
        hand = 1.1 if w in _SCALAR_LOOP else 1.3
        jax = 0.1 if w in _SMALL_SCALAR else 1.0
        rows.append([c["case"], check(c, "zyg/hand", hand), check(c, "zyg/jax", jax),
                     check(c, "zyg/torch", 0.1) if w in _LOOPS else "-",
                     check(c, "zyg/autograd", 0.1) if w in _LOOPS else "-"])
    met = sum(cell.count(" yes ") for r in rows for cell in r[1:])
    total = sum(cell.count(" yes ") + cell.count("**no**") for r in rows for cell in r[1:])
    return ["", "## Against the goals (shared/BENCHMARKS.md)", "",
            f"{met} of {total} ratio goals met in this run. zyg/hand: 1.1 on the scalar and "
            "loop workloads, 1.3 on the others; zyg/jax: faster (below 1), by 10x on the "
            "small scalar ones; zyg/torch and zyg/autograd: 10x faster on the loop workloads.",
            ""] + _table(["case", "zyg/hand", "zyg/jax", "zyg/torch", "zyg/autograd"], rows)


def _first_call_section(results: dict[str, Any]) -> list[str]:
    first = results.get("first_call") or {}
    if not first:
        return []
    rows = []
    for name, rec in first.items():
        def proc(key: str) -> str:
            e = rec.get(key)
            if not e:
                return "-"
            if e["status"] != "ok":
                return e["status"]
            return (f"{format_seconds(e['first_call_s'])} (process "
                    f"{format_seconds(e['process_wall_s'])})")
        inproc = rec.get("in_process_s")
        imp = rec.get("fresh", {}).get("import_s")
        rows.append([
            name,
            _fmt_args(rec.get("args", rec.get("in_process_args"))),
            format_seconds(inproc) if inproc is not None else "-",
            proc("fresh"),
            proc("cached"),
            format_seconds(imp) if imp is not None else "-",
            str(rec.get("cache_files", "-")),
        ])
    lines = ["", "## zyg first call (value_and_grad + first g(...), transform + compile)", ""]
    lines += _table(
        ["workload", "args", "in this process", "fresh process, empty cache",
         "second process, cache reused", "import zyg", "cache files"],
        rows,
    )
    lines += ["", "Time of `zyg.value_and_grad(f)` plus the first `g(*args)`, at the tiny "
              "arguments shown so that it measures transform + compile, not the workload. "
              "In this process: numba is already warm; ZYG_CACHE_DIR was a fresh temporary "
              "directory unless zyg had been imported before. Process columns: the same in "
              "a new `python -c` with a fresh ZYG_CACHE_DIR, then again in a second one "
              "reusing it (in parentheses: the process's total wall time, interpreter "
              "start and imports included)."]
    return lines


def _overhead_section(overhead: Optional[dict[str, Any]]) -> list[str]:
    if not overhead:
        return []
    lines = ["", f"## Call overhead from Python (sincos at {_fmt_args(overhead['args'])})", ""]
    lines += _table(["call", "median"],
                    [[k, format_seconds(v)] for k, v in overhead["median_s"].items()])
    if "zyg_minus_hand_s" in overhead:
        lines += ["", f"zyg - hand adjoint: {round(overhead['zyg_minus_hand_s'] * 1e9)} ns per "
                  f"call (zyg/hand {overhead['zyg_over_hand']:.3g})."]
    return lines


def _verification_section(cases: list[dict[str, Any]]) -> list[str]:
    rows = []
    for c in cases:
        for col, rec in c["columns"].items():
            if "verify" not in rec:
                continue
            errs = {k["against"]: k for k in rec["verify"]["checks"]}

            def fmt(key: str) -> str:
                e = errs.get(key)
                if e is None:
                    return "-"
                mark = "" if e["ok"] else " FAIL"
                return f"{e['rel_err']:.1e}{mark}"
            rows.append([c["case"], col, fmt("primal value"), fmt("finite differences"),
                         fmt("hand adjoint"), fmt("closed form"),
                         "ok" if rec["verify"]["ok"] else "**WRONG**"])
    lines = ["", "## Verification (relative errors, before timing)", ""]
    lines += _table(["case", "column", "value vs primal", "grad vs finite diff.",
                     "grad vs hand", "grad vs closed form", ""], rows)
    return lines


def plot_ratios(results: dict[str, Any], path: Path) -> bool:
    """Bar chart of the ratios per case (log scale) to ``path``; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cases = results["cases"]
    if not cases:
        return False
    keys = [k for k in _RATIO_KEYS if any(c["ratios"].get(k) for c in cases)]
    if not keys:
        return False
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(max(7.5, 1.6 * len(cases) + 3.5), 4.5))
    for j, key in enumerate(keys):
        xs, ys, hatches = [], [], []
        for i, c in enumerate(cases):
            v = c["ratios"].get(key)
            if v:
                xs.append(i + (j - (len(keys) - 1) / 2) * width)
                ys.append(v)
                hatches.append("//" if key in c["ratios_extrapolated"] else "")
        bars = ax.bar(xs, ys, width, label=key)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
    ax.axhline(1.0, color="black", linewidth=0.8)
    # the goals of shared/BENCHMARKS.md
    ax.axhline(1.3, color="tab:orange", linestyle="--", linewidth=0.8, label="goal zyg/hand 1.3")
    ax.axhline(3.0, color="tab:blue", linestyle="--", linewidth=0.8, label="goal zyg/primal 3")
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c["case"] for c in cases], rotation=20, ha="right")
    ax.set_ylabel("ratio of median times (log)")
    title = "zyg benchmark ratios (hatched: extrapolated)"
    if results["meta"].get("zyg_stand_in"):
        title += "\nSTAND-IN: zyg column is the hand-written adjoint (--no-zyg)"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True
