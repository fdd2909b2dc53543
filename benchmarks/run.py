"""Benchmark runner: numba primal, hand-written adjoint, zyg and peers, side by side.

Usage (from the repository root)::

    python -m benchmarks.run                      # full run, a few minutes
    python -m benchmarks.run --quick              # tiny sizes, seconds
    python -m benchmarks.run --only sincos,pow[n=1e3] --out /tmp/bench

For every case of every selected workload (see :mod:`benchmarks.workloads`) one
process measures, after warm-up, the median time per call of

* ``primal``: ``numba.njit(f)`` -- the speed of light for the function itself;
* ``hand``: the hand-written numba adjoint, returning value and gradient;
* ``zyg``: ``zyg.value_and_grad(f)`` on the cpu target, plus its first-call latency
  in this process and in two fresh processes (empty / reused on-disk cache);
* ``jax``, ``torch``, ``autograd``: the peers, each in its own idiom, when importable.

Every gradient is verified before it is timed (:mod:`benchmarks.verify`); a wrong one
is flagged and gets no time. The runner prints a markdown report and writes
``results.json``, ``results.md`` and (with matplotlib) ``ratios.png`` to ``--out``.
It exits with status 1 when a gradient is wrong.

``--no-zyg`` is a development flag for working on the runner while zyg cannot be
imported: the zyg column then times a freshly compiled copy of the hand-written
adjoint, and every report says so in bold. It is never used as a fallback.

:func:`smoke` runs everything at tiny sizes and returns the results dict, for tests.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numba
import numpy as np

from benchmarks import latency, peers, report, timing, verify, zyg_api
from benchmarks.workloads import WORKLOADS, Args, Case, Workload

COLUMNS: tuple[str, ...] = ("primal", "hand", "zyg", *peers.PEERS)
"""Measured columns, in report order."""

RATIOS: tuple[tuple[str, str], ...] = (
    ("zyg", "primal"),
    ("zyg", "hand"),
    ("hand", "primal"),
    ("zyg", "jax"),
    ("zyg", "torch"),
    ("zyg", "autograd"),
)
"""Reported ratios ``numerator / denominator`` of median times."""

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
STAND_IN = "stand-in (--no-zyg): the zyg column times the hand-written adjoint"


@dataclasses.dataclass(frozen=True)
class Config:
    """What to run and how.

    Attributes:
        quick: use each case's tiny ``quick_args`` (and usually ``timing.QUICK``).
        only: workload names or case ids to run (empty: all).
        peers: peer frameworks to measure; None means every importable one.
        no_zyg: development stand-in for zyg (see the module docstring).
        first_call_subprocess: measure zyg's first call in fresh processes.
        call_overhead: measure the Python call overhead on sincos.
        isolate_cache: point ``ZYG_CACHE_DIR`` at a fresh temporary directory
            before zyg is imported, so the in-process first call is cold.
        eager_cap: trip-count cap for peers that run the loop in Python; above it
            they are measured at the cap and extrapolated linearly.
        timing_settings: repeats and time budget of each measurement.
        fd_rtol: tolerance against finite differences.
        tight_rtol: tolerance against the hand-written adjoint (same arithmetic,
            so agreement to rounding is expected).
        value_rtol: tolerance of the returned value against the numba primal.
    """

    quick: bool = False
    only: tuple[str, ...] = ()
    peers: Optional[tuple[str, ...]] = None
    no_zyg: bool = False
    first_call_subprocess: bool = True
    call_overhead: bool = True
    isolate_cache: bool = True
    eager_cap: int = 10_000
    timing_settings: timing.Settings = timing.Settings()
    fd_rtol: float = 1e-7
    tight_rtol: float = 1e-9
    value_rtol: float = 1e-9


@dataclasses.dataclass
class _Reference:
    """Everything a gradient is checked against, at one set of arguments."""

    value: float
    fd: Any
    exact: Any
    hand_value: Any = None
    hand_grad: Any = None
    hand_first_call_s: float = 0.0
    hand_verify: Optional[dict[str, Any]] = None
    hand_error: Optional[str] = None

    @property
    def hand_ok(self) -> bool:
        return self.hand_verify is not None and self.hand_verify["ok"]


def _describe(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


JSON_ARRAY_MAX = 16
"""Arrays with more elements are summarised in the JSON (shape, norm, first entries)."""


def _jsonable(obj: Any) -> Any:
    """Arguments/values/gradients as JSON (arrays become lists, scalars floats).

    Arrays of more than :data:`JSON_ARRAY_MAX` elements (an MLP's weights, say)
    become ``{"shape": [...], "max_abs": ..., "head": [...]}`` so that the JSON stays
    readable; the verification errors are recorded separately.
    """
    if isinstance(obj, (tuple, list)):
        return [_jsonable(o) for o in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj
    arr = verify.to_array(obj)
    shape = tuple(getattr(obj, "shape", np.shape(obj)))
    if shape == ():
        return float(arr[0])
    if arr.size > JSON_ARRAY_MAX:
        return {"shape": list(shape),
                "max_abs": float(np.max(np.abs(arr))) if arr.size else 0.0,
                "head": arr[:4].tolist()}
    return arr.reshape(shape).tolist()


def describe_args(args: Args) -> str:
    """Short text for a log line: arrays as ``f64[100x10]``, scalars by repr."""
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{a.dtype.str[1:]}[{'x'.join(str(n) for n in a.shape)}]")
        else:
            parts.append(repr(a))
    return "(" + ", ".join(parts) + ")"


def _args_key(args: Args) -> tuple[Any, ...]:
    """A hashable key for the values of ``args`` (array contents included)."""
    key = []
    for a in args:
        if isinstance(a, np.ndarray):
            key.append(("array", a.dtype.str, a.shape, hash(a.tobytes())))
        else:
            key.append((type(a).__name__, repr(a)))
    return tuple(key)


def _strict_json(obj: Any) -> Any:
    """Replace non-finite floats (an infinite relative error, say) by strings."""
    if isinstance(obj, dict):
        return {k: _strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict_json(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)
    return obj


def _dump_json(results: dict[str, Any]) -> str:
    return json.dumps(_strict_json(results), indent=2, default=str, allow_nan=False) + "\n"


def _identity(x):
    return x


class _Runner:
    """One benchmark run: holds compiled primals, zyg functions and references."""

    def __init__(self, config: Config, log: Callable[[str], None]):
        self.cfg = config
        self.log = log
        self.settings = config.timing_settings
        self.primals: dict[str, Any] = {}
        self.zyg_fns: dict[str, Callable[..., Any]] = {}
        self.zyg_build_error: dict[str, str] = {}
        self.zyg_first_call_error: dict[str, str] = {}
        self.first_call: dict[str, dict[str, Any]] = {}
        self.references: dict[tuple[str, str], _Reference] = {}
        self.problems: list[str] = []
        self.peer_status: dict[str, tuple[bool, str]] = {}
        self.zyg: Any = None
        self.zyg_unavailable: Optional[str] = None
        self.in_process_cache = "n/a"

    # -- set-up --------------------------------------------------------------------

    def select_cases(self) -> list[tuple[Workload, Case]]:
        selected = []
        wanted = set(self.cfg.only)
        for w in WORKLOADS:
            for c in w.cases:
                if not wanted or w.name in wanted or w.case_id(c) in wanted:
                    selected.append((w, c))
        known = {w.name for w in WORKLOADS} | {w.case_id(c) for w in WORKLOADS for c in w.cases}
        unknown = wanted - known
        if unknown:
            raise SystemExit(
                f"unknown workload or case {sorted(unknown)}; known: {', '.join(sorted(known))}"
            )
        return selected

    def setup_peers(self) -> None:
        names = peers.PEERS if self.cfg.peers is None else self.cfg.peers
        for name in peers.PEERS:
            if name not in names:
                self.peer_status[name] = (False, "not selected")
            else:
                self.peer_status[name] = peers.availability(name)
            self.log(f"peer {name}: {self.peer_status[name][1]}")

    def setup_zyg(self) -> None:
        if self.cfg.no_zyg:
            self.log("zyg: " + STAND_IN)
            return
        if self.cfg.isolate_cache and "zyg" not in sys.modules:
            cache = tempfile.mkdtemp(prefix="zyg-bench-inproc-")
            atexit.register(shutil.rmtree, cache, True)
            os.environ["ZYG_CACHE_DIR"] = cache
            self.in_process_cache = "fresh temporary ZYG_CACHE_DIR"
        elif "zyg" in sys.modules:
            self.in_process_cache = "zyg was already imported: its cache may be warm"
        else:
            self.in_process_cache = "ZYG_CACHE_DIR as in the environment"
        try:
            self.zyg = zyg_api.import_zyg()
        except Exception as exc:
            self.zyg_unavailable = f"import zyg failed: {_describe(exc)}"
            self.log("zyg: " + self.zyg_unavailable)
            self.problems.append(self.zyg_unavailable)

    # -- references ------------------------------------------------------------------

    def primal(self, w: Workload) -> Any:
        if w.name not in self.primals:
            self.primals[w.name] = numba.njit(w.fn)
        return self.primals[w.name]

    def reference(self, w: Workload, args: Args) -> _Reference:
        key = (w.name, _args_key(args))
        if key in self.references:
            return self.references[key]
        primal = self.primal(w)
        value = primal(*args)
        fd = verify.central_difference(primal, args, w.fd_step(args), argnums=w.argnums,
                                       n_directions=w.fd_directions)
        exact = None
        if w.exact_grad is not None:
            try:
                exact = w.exact_grad(args)
            except ImportError:
                exact = None
        ref = _Reference(value=value, fd=fd, exact=exact)
        try:
            t0 = time.perf_counter()
            ref.hand_value, ref.hand_grad = w.hand(*args)
            ref.hand_first_call_s = time.perf_counter() - t0
            ref.hand_verify = self.check(w, ref.hand_value, ref.hand_grad, ref, against_hand=False)
        except Exception as exc:
            ref.hand_error = _describe(exc)
        self.references[key] = ref
        return ref

    def check(
        self, w: Workload, value: Any, grad: Any, ref: _Reference, against_hand: bool = True
    ) -> dict[str, Any]:
        """Compare ``(value, grad)`` with the references; ``ok`` when all pass."""
        checks = [
            ("primal value", verify.rel_error(value, ref.value), self.cfg.value_rtol),
            ("finite differences", verify.fd_error(grad, ref.fd), self.cfg.fd_rtol),
        ]
        if against_hand and ref.hand_ok:
            checks.append(
                ("hand adjoint", verify.rel_error(grad, ref.hand_grad), self.cfg.tight_rtol)
            )
        if ref.exact is not None:
            checks.append(("closed form", verify.rel_error(grad, ref.exact), w.exact_rtol))
        records = [
            {"against": name, "rel_err": err, "rtol": tol, "ok": bool(err <= tol)}
            for name, err, tol in checks
        ]
        return {"ok": all(r["ok"] for r in records), "checks": records}

    # -- columns ---------------------------------------------------------------------

    def verify_vg(
        self,
        w: Workload,
        vg: Callable[..., Any],
        args: Args,
        ref: _Reference,
    ) -> dict[str, Any]:
        """Call and verify a value-and-gradient callable.

        Returns a column record with status ``"verified"`` (to be timed), ``"wrong"``
        or ``"error"``.
        """
        rec: dict[str, Any] = {}
        try:
            t0 = time.perf_counter()
            value, grad = vg(*args)
            first_call_s = time.perf_counter() - t0
        except Exception as exc:
            return {"status": "error", "error": _describe(exc)}
        rec["first_call_s"] = first_call_s
        rec["value"] = _jsonable(value)
        rec["grad"] = _jsonable(grad)
        rec["verify"] = self.check(w, value, grad, ref)
        rec["status"] = "verified" if rec["verify"]["ok"] else "wrong"
        return rec

    @staticmethod
    def _timed(rec: dict[str, Any], t: timing.Timing) -> None:
        rec.update(status="ok", time=t.to_json(), median_s=t.median_s)

    def primal_column(self, w: Workload, args: Args, ref: _Reference) -> dict[str, Any]:
        return {"status": "verified", "value": _jsonable(ref.value)}

    def hand_column(self, w: Workload, args: Args, ref: _Reference) -> dict[str, Any]:
        if ref.hand_error is not None:
            return {"status": "error", "error": ref.hand_error}
        return {
            "status": "verified" if ref.hand_ok else "wrong",
            "first_call_s": ref.hand_first_call_s,
            "value": _jsonable(ref.hand_value),
            "grad": _jsonable(ref.hand_grad),
            "verify": ref.hand_verify,
        }

    def zyg_column(self, w: Workload, case: Case, args: Args, ref: _Reference) -> dict[str, Any]:
        if self.zyg_unavailable is not None:
            return {"status": "unavailable", "error": self.zyg_unavailable}
        if w.name in self.zyg_build_error:
            return {"status": "error", "error": self.zyg_build_error[w.name]}
        if w.name not in self.zyg_fns:
            error = self.zyg_first_call(w, case)
            if error is not None:
                return {"status": "error", "error": error}
        return self.verify_vg(w, self.zyg_fns[w.name], args, ref)

    def zyg_first_call(self, w: Workload, case: Case) -> Optional[str]:
        """Build zyg's ``value_and_grad`` for ``w`` and time its first call, in process.

        The first call uses the case's tiny ``quick_args`` so that it measures
        transform + compile, not the workload's size. Returns an error message or None.
        """
        tiny = case.quick_args
        t0 = time.perf_counter()
        try:
            if self.cfg.no_zyg:
                # a fresh dispatcher compiles on its first call (a Python wrapper cannot)
                py_func = getattr(w.hand, "py_func", None)
                g = numba.njit(py_func) if py_func is not None else w.hand
            else:
                g = zyg_api.value_and_grad(self.zyg, w.fn, w.argnums)
        except Exception as exc:
            self.zyg_build_error[w.name] = f"value_and_grad failed: {_describe(exc)}"
            return self.zyg_build_error[w.name]
        t1 = time.perf_counter()
        self.zyg_fns[w.name] = g
        try:
            out = g(*tiny)
        except Exception as exc:
            self.zyg_first_call_error[w.name] = f"first call failed: {_describe(exc)}"
            return self.zyg_first_call_error[w.name]
        t2 = time.perf_counter()
        record = {
            "in_process_s": t2 - t0,
            "in_process_build_s": t1 - t0,
            "in_process_call_s": t2 - t1,
            "in_process_args": _jsonable(tiny),
            "in_process_cache": self.in_process_cache,
        }
        # the compile call's result is checked too (against the hand adjoint)
        try:
            record["in_process_grad_rel_err_vs_hand"] = verify.rel_error(out[1], w.hand(*tiny)[1])
        except Exception as exc:
            record["in_process_grad_rel_err_vs_hand"] = None
            self.problems.append(f"{w.name} first call: cannot check result: {_describe(exc)}")
        else:
            if record["in_process_grad_rel_err_vs_hand"] > self.cfg.tight_rtol:
                self.problems.append(f"{w.name} first call at {describe_args(tiny)}: "
                                     "gradient differs "
                                     "from the hand adjoint")
        self.first_call.setdefault(w.name, {}).update(record)
        return None

    def peer_column(self, name: str, w: Workload, args: Args, ref: _Reference) -> dict[str, Any]:
        ok, why = self.peer_status[name]
        if not ok:
            return {"status": "unavailable", "error": why}
        impl = w.peers.get(name)
        if impl is None:
            return {"status": "not written", "error": f"no {name} version of {w.name}"}
        run_args, scale = args, 1.0
        if impl.python_loop and w.reduce_trip_count is not None:
            reduced = w.reduce_trip_count(args, self.cfg.eager_cap)
            if reduced is not None:
                run_args, scale = reduced
        run_ref = ref if run_args is args else self.reference(w, run_args)
        try:
            vg = impl.build(run_args)
        except Exception as exc:
            return {"status": "error", "error": f"build failed: {_describe(exc)}",
                    "note": impl.note}
        rec = self.verify_vg(w, vg, run_args, run_ref)
        if rec["status"] == "verified":
            self._timed(rec, timing.measure(vg, run_args, self.settings))
        rec["note"] = impl.note
        if scale != 1.0:
            rec["extrapolated"] = {"from_args": _jsonable(run_args), "scale": scale}
            if rec["status"] == "ok":
                rec["measured_median_s"] = rec["median_s"]
                rec["median_s"] = rec["median_s"] * scale
        return rec

    # -- per case / workload ---------------------------------------------------------

    def run_case(self, w: Workload, case: Case) -> dict[str, Any]:
        cid = w.case_id(case)
        args = case.arguments(self.cfg.quick)
        self.log(f"[{cid}] args={describe_args(args)}: references")
        ref = self.reference(w, args)
        cols: dict[str, dict[str, Any]] = {}
        cols["primal"] = self.primal_column(w, args, ref)
        cols["hand"] = self.hand_column(w, args, ref)
        cols["zyg"] = self.zyg_column(w, case, args, ref)
        if self.cfg.no_zyg:
            cols["zyg"]["stand_in"] = True
        # the numba columns are timed interleaved: their ratios are the headline
        fns = {"primal": self.primal(w), "hand": w.hand, "zyg": self.zyg_fns.get(w.name)}
        ready = [k for k in ("primal", "hand", "zyg") if cols[k]["status"] == "verified"]
        self.log(f"[{cid}] timing {', '.join(ready)} interleaved")
        times = timing.measure_interleaved([(fns[k], args) for k in ready], self.settings)
        for k, t in zip(ready, times):
            self._timed(cols[k], t)
        for name in peers.PEERS:
            if self.peer_status[name][1] != "not selected":
                self.log(f"[{cid}] {name}")
            cols[name] = self.peer_column(name, w, args, ref)
        for col, rec in cols.items():
            self.log(f"[{cid}] {col:8s} {_status_line(rec)}")
            if rec["status"] in ("wrong", "error"):
                self.problems.append(f"{cid} {col}: {_status_line(rec)}")
        return {
            "case": cid,
            "workload": w.name,
            "number": w.number,
            "title": w.title,
            "args": _jsonable(args),
            "columns": cols,
            "ratios": _ratios(cols),
            "ratios_extrapolated": [
                f"{a}/{b}" for a, b in RATIOS
                if "extrapolated" in cols[a] or "extrapolated" in cols[b]
            ],
        }

    def subprocess_first_call(self, w: Workload, case: Case) -> None:
        if self.zyg_unavailable is not None:
            return
        failed = self.zyg_build_error.get(w.name) or self.zyg_first_call_error.get(w.name)
        if failed:
            # no point in two fresh processes that fail the same way (seconds each)
            self.log(f"[{w.name}] first call in fresh processes skipped: {failed}")
            self.first_call.setdefault(w.name, {}).update(
                fresh={"status": "skipped", "error": failed},
                cached={"status": "skipped", "error": failed},
                args=_jsonable(case.quick_args))
            return
        mode = "hand" if self.cfg.no_zyg else "zyg"
        self.log(f"[{w.name}] first call in fresh processes ({mode})")
        res = latency.measure_first_call(w.name, case.label, True, mode)
        args = case.quick_args
        ref = self.reference(w, args)
        for key in ("fresh", "cached"):
            entry = res[key]
            if entry["status"] == "ok" and ref.hand_ok:
                err = verify.rel_error(entry.pop("grad"), ref.hand_grad)
                entry["grad_rel_err_vs_hand"] = err
                if err > self.cfg.tight_rtol:
                    entry["status"] = "wrong"
            if entry["status"] != "ok":
                self.problems.append(f"{w.name} first call ({key} process): {entry}")
        res["args"] = _jsonable(args)
        self.first_call.setdefault(w.name, {}).update(res)

    def call_overhead(self) -> dict[str, Any]:
        """Median time of calling the sincos gradient from Python, against baselines."""
        w = next(w for w in WORKLOADS if w.name == "sincos")
        args = w.cases[0].arguments(self.cfg.quick)
        noop = numba.njit(_identity)
        noop(*args)
        calls = {
            "numba no-op (x -> x)": noop,
            "numba primal sin(cos(x))": self.primal(w),
        }
        ref = self.reference(w, args)
        if ref.hand_ok:  # only verified gradients are timed
            calls["hand-written adjoint"] = w.hand
        zyg_key = "zyg value_and_grad" + (" (stand-in)" if self.cfg.no_zyg else "")
        g = self.zyg_fns.get(w.name)
        if g is not None and self.verify_vg(w, g, args, ref)["status"] == "verified":
            calls[zyg_key] = g
        times = timing.measure_interleaved([(fn, args) for fn in calls.values()],
                                           self.settings)
        rows = {k: t.median_s for k, t in zip(calls, times)}
        out: dict[str, Any] = {"args": _jsonable(args), "median_s": rows}
        if zyg_key in rows and "hand-written adjoint" in rows:
            hand_s = rows["hand-written adjoint"]
            out["zyg_minus_hand_s"] = rows[zyg_key] - hand_s
            out["zyg_over_hand"] = rows[zyg_key] / hand_s
        return out


def _status_line(rec: dict[str, Any]) -> str:
    status = rec["status"]
    if status == "ok":
        text = timing.format_seconds(rec["median_s"])
        if "extrapolated" in rec:
            text = f"~{text} (extrapolated x{rec['extrapolated']['scale']:g})"
        return text
    if status == "wrong":
        bad = [c for c in rec["verify"]["checks"] if not c["ok"]]
        return "WRONG gradient: " + "; ".join(
            f"rel err {c['rel_err']:.2e} vs {c['against']} (tol {c['rtol']:.0e})" for c in bad
        )
    return f"{status}: {rec.get('error', '')}"


def _ratios(cols: dict[str, dict[str, Any]]) -> dict[str, Optional[float]]:
    out: dict[str, Optional[float]] = {}
    for a, b in RATIOS:
        ta, tb = cols[a].get("median_s"), cols[b].get("median_s")
        ok = cols[a]["status"] == "ok" and cols[b]["status"] == "ok"
        out[f"{a}/{b}"] = ta / tb if ok and ta and tb else None
    return out


def _git(*args: str) -> Optional[str]:
    try:
        proc = subprocess.run(["git", *args], cwd=str(latency.REPO_ROOT),
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _git_state() -> dict[str, Any]:
    """HEAD commit and whether zyg/ or benchmarks/ differ from it."""
    status = _git("status", "--porcelain", "--", "zyg", "benchmarks")
    return {"commit": _git("rev-parse", "HEAD") or None,
            "dirty": None if status is None else bool(status)}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _meta(runner: _Runner, config: Config) -> dict[str, Any]:
    versions = {"numba": numba.__version__, "numpy": np.__version__}
    for name in peers.PEERS:
        if runner.peer_status.get(name, (False, ""))[0]:
            versions[name] = peers.version(name)
    if config.no_zyg:
        versions["zyg"] = STAND_IN
    elif runner.zyg is not None:
        versions["zyg"] = str(getattr(runner.zyg, "__version__", "unknown version"))
    else:
        versions["zyg"] = runner.zyg_unavailable
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "git": _git_state(),
        "versions": versions,
        "peer_status": {k: {"available": v[0], "detail": v[1]}
                        for k, v in runner.peer_status.items()},
        "zyg_stand_in": config.no_zyg,
    }
    if runner.peer_status.get("torch", (False, ""))[0]:
        meta["torch_threads"] = peers.import_torch().get_num_threads()
    return meta


def run_benchmarks(
    config: Config, log: Optional[Callable[[str], None]] = None
) -> dict[str, Any]:
    """Run the benchmarks described by ``config`` and return the results dict.

    The dict has ``meta`` (machine, versions), ``settings``, ``cases`` (one entry
    per case: ``columns`` with status/time/verification per column, ``ratios``),
    ``first_call`` (per workload), ``call_overhead`` and ``problems`` (wrong
    gradients and failures, as strings; empty when all is well).
    """
    log = log or (lambda msg: None)
    t_start = time.perf_counter()
    runner = _Runner(config, log)
    selected = runner.select_cases()
    runner.setup_peers()
    runner.setup_zyg()
    cases = []
    for i, (w, case) in enumerate(selected):
        cases.append(runner.run_case(w, case))
        last_of_workload = i + 1 == len(selected) or selected[i + 1][0] is not w
        if last_of_workload and config.first_call_subprocess:
            first_case = next(c for ww, c in selected if ww is w)
            runner.subprocess_first_call(w, first_case)
    overhead = None
    if config.call_overhead and any(w.name == "sincos" for w, _ in selected):
        log("call overhead (sincos)")
        overhead = runner.call_overhead()
    settings = dataclasses.asdict(config)
    settings["only"] = list(config.only)
    return {
        "meta": _meta(runner, config),
        "settings": settings,
        "cases": cases,
        "first_call": runner.first_call,
        "call_overhead": overhead,
        "problems": runner.problems,
        "wall_s": time.perf_counter() - t_start,
    }


def has_wrong_gradient(results: dict[str, Any]) -> bool:
    """True when any column of any case returned a wrong gradient or value."""
    return any(
        col["status"] == "wrong" for case in results["cases"] for col in case["columns"].values()
    )


def write_outputs(results: dict[str, Any], out: Path, plot: bool = True) -> list[Path]:
    """Write ``results.json``, ``results.md`` and (``plot``, matplotlib) ``ratios.png``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "results.md"]
    written[0].write_text(_dump_json(results))
    written[1].write_text(report.markdown(results))
    png = out / "ratios.png"
    if plot and report.plot_ratios(results, png):
        written.append(png)
    return written


def smoke(
    *,
    no_zyg: bool = False,
    peers: Optional[Sequence[str]] = None,
    first_call_subprocess: bool = False,
    out: Optional[Path] = None,
) -> dict[str, Any]:
    """Run every workload at tiny sizes with few repeats; return the results dict.

    Meant for a smoke test (seconds). ``peers=None`` measures every importable peer,
    ``peers=()`` none. Fresh-process first-call latency (a few seconds per
    workload) only when ``first_call_subprocess``. Files are written only when
    ``out`` is given. Check ``results["problems"]`` and
    :func:`has_wrong_gradient`.
    """
    config = Config(
        quick=True,
        peers=None if peers is None else tuple(peers),
        no_zyg=no_zyg,
        first_call_subprocess=first_call_subprocess,
        timing_settings=timing.QUICK,
    )
    results = run_benchmarks(config)
    if out is not None:
        write_outputs(results, Path(out))
    return results


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="zyg benchmarks: numba primal, hand adjoint, zyg, JAX, PyTorch, autograd.",
    )
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes and few repeats (seconds); default --out results/quick")
    p.add_argument("--only", default="",
                   help="comma-separated workloads or case ids, e.g. sincos,pow[n=1e3]")
    p.add_argument("--out", type=Path, default=None,
                   help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--peers", default=None,
                   help="comma-separated subset of jax,torch,autograd, or 'none' "
                        "(default: every importable one)")
    p.add_argument("--no-zyg", action="store_true",
                   help="DEVELOPMENT ONLY: time the hand adjoint in the zyg column")
    p.add_argument("--no-subprocess", action="store_true",
                   help="skip zyg's first-call latency in fresh processes")
    p.add_argument("--eager-cap", type=int, default=10_000,
                   help="trip-count cap for Python-loop peers, extrapolated above it")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of repeats per measurement (default 1, quick 0.02)")
    p.add_argument("--no-plot", action="store_true", help="do not write ratios.png")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit status (1 on a wrong gradient)."""
    ns = _parse_args(argv)
    settings = timing.QUICK if ns.quick else timing.Settings()
    if ns.budget is not None:
        settings = dataclasses.replace(settings, budget_s=ns.budget)
    if ns.peers is None:
        peer_names = None
    elif ns.peers.strip().lower() == "none":
        peer_names = ()
    else:
        peer_names = tuple(p.strip() for p in ns.peers.split(",") if p.strip())
        bad = set(peer_names) - set(peers.PEERS)
        if bad:
            raise SystemExit(f"unknown peer {sorted(bad)}; known: {', '.join(peers.PEERS)}")
    config = Config(
        quick=ns.quick,
        only=tuple(s.strip() for s in ns.only.split(",") if s.strip()),
        peers=peer_names,
        no_zyg=ns.no_zyg,
        first_call_subprocess=not ns.no_subprocess,
        eager_cap=ns.eager_cap,
        timing_settings=settings,
    )
    results = run_benchmarks(config, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(report.markdown(results))
    out = ns.out or (DEFAULT_OUT / "quick" if ns.quick else DEFAULT_OUT)
    written = write_outputs(results, out, plot=not ns.no_plot)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 1 if has_wrong_gradient(results) else 0


if __name__ == "__main__":
    sys.exit(main())
