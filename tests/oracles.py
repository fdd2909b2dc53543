"""Oracles shared by the property families (issue 23): what every generated program is
checked against besides finite differences of the plain call and python against cpu.

* **forward against reverse** (``check_jvp``): ``zyg.jvp(f)(x, t)`` equals the value and
  ``grad(f)(x) . t`` for a random tangent ``t`` (rounding only);
* **second order against first** (``check_hvp``): ``zyg.hvp(f, x, v, *rest)`` equals central
  differences of zyg's own (already compiled) gradient along ``v``; ``check_hessian`` does
  the same for ``zyg.hessian`` and ``check_nested`` for ``zyg.grad(zyg.grad(f, k), 0)``;
* **inputs unchanged**: every call (gradient, jvp, hvp) leaves the caller's arrays equal to
  the bit (``check_unchanged``).

A program that zyg refuses with a clear error (``REFUSED``: UnsupportedSyntax, NoAdjoint,
TypeMismatch and its subclasses) is a refusal, counted per oracle, never a pass; a
CompileError (numba could not compile what zyg generated) is a failure.

Counts: ``STATS[family]`` counts the programs, and per oracle the programs it checked, the
refusals, the points where finite differences were unreliable, and the mismatches.
``family_test`` runs a hypothesis strategy through a checker and then asserts that every
oracle the family promises checked at least one program and that refusals are a minority.

Environment (all optional; CI uses the defaults):

* ``ZYG_ORACLE_COLLECT=1``: a mismatch is counted and recorded instead of raised, so a long
  run counts every mismatch (the family test fails at its end if there was one);
* ``ZYG_ORACLE_REPORT=path``: the counts (and the first recorded mismatches) are written
  there as JSON when the process exits (``scripts/long_property_run.py`` reads them);
* ``ZYG_ORACLE_JVP_CPU_EVERY=k`` (default 10): the cpu jvp runs on one program of k (a
  deterministic share, by a hash of the source; the python jvp runs on every program);
* ``ZYG_ORACLE_HVP_EVERY=k`` (default 2) / ``ZYG_ORACLE_HVP_CPU_EVERY=k`` (default 0,
  never): the share of programs whose hvp is checked on python / cpu (a cpu hvp is a numba
  compile of forward over reverse, 5-20 s).
"""
from __future__ import annotations

import atexit
import json
import os
import time
import zlib
from collections import Counter, defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

import zyg
from zyg.errors import NoAdjoint, TypeMismatch, UnsupportedSyntax

REFUSED = (UnsupportedSyntax, NoAdjoint, TypeMismatch)

COLLECT = os.environ.get("ZYG_ORACLE_COLLECT", "") == "1"
REPORT = os.environ.get("ZYG_ORACLE_REPORT", "")


def _every(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


JVP_CPU_EVERY = _every("ZYG_ORACLE_JVP_CPU_EVERY", 10)
HVP_EVERY = _every("ZYG_ORACLE_HVP_EVERY", 2)
HVP_CPU_EVERY = _every("ZYG_ORACLE_HVP_CPU_EVERY", 0)

STATS: Dict[str, Counter] = defaultdict(Counter)
MISMATCHES: Dict[str, List[str]] = defaultdict(list)


def _write_report() -> None:
    if not REPORT:
        return
    out = {fam: {"counts": dict(c), "mismatches": MISMATCHES.get(fam, [])[:5]}
           for fam, c in STATS.items()}
    with open(REPORT, "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)


atexit.register(_write_report)


_LAST_WRITE = [0.0]


def count(family: str, key: str, n: int = 1) -> None:
    STATS[family][key] += n
    if REPORT and time.time() - _LAST_WRITE[0] > 5.0:
        # written as the run goes too: a long run stopped by a time limit keeps its counts
        _LAST_WRITE[0] = time.time()
        _write_report()


def mismatch(family: str, oracle: str, msg: str) -> None:
    """A wrong result: raised (CI, so hypothesis reports the example), or recorded."""
    STATS[family][f"mismatch {oracle}"] += 1
    if COLLECT:
        MISMATCHES[family].append(f"{oracle}: {msg}"[:4000])
        return
    raise AssertionError(f"[{family}] {oracle}: {msg}")


def share(src: str, every: int, salt: str = "") -> bool:
    """A deterministic share of the programs: one in ``every`` (never for 0)."""
    if every <= 0:
        return False
    return every == 1 or zlib.crc32((salt + src).encode()) % every == 0


def copies(args: Sequence[Any]) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def is_float_arg(a: Any) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype.kind == "f"
    return isinstance(a, (float, np.floating)) and not isinstance(a, (bool, np.bool_))


def low_precision(args: Sequence[Any]) -> bool:
    return any(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in args)


def close(a, b, rtol: float, atol: float) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= atol + rtol * np.maximum(np.abs(a), np.abs(b))))


def check_unchanged(family: str, target: str, what: str, before: Sequence[Any],
                    after: Sequence[Any], where: str) -> bool:
    """Every array argument equal to the bit (NaNs in the same places) after a call."""
    ok = True
    for i, (x0, x) in enumerate(zip(before, after)):
        if isinstance(x0, np.ndarray) and not np.array_equal(x0, x, equal_nan=x0.dtype.kind == "f"):
            ok = False
            mismatch(family, "inputs unchanged", f"[{target}] {what} changed argument {i}: "
                                                 f"{x0!r} -> {x!r}{where}")
    count(family, "checked inputs unchanged")
    return ok


def tangents(args: Sequence[Any], argnums: Sequence[int], seed: int) -> list:
    """A random tangent (in [-1, 1]) for each differentiated float argument, None otherwise."""
    rng = np.random.default_rng(seed)
    out = []
    for i, a in enumerate(args):
        if i not in argnums or not is_float_arg(a):
            out.append(None)
        elif isinstance(a, np.ndarray):
            out.append(rng.uniform(-1.0, 1.0, a.shape).astype(a.dtype))
        else:
            out.append(float(rng.uniform(-1.0, 1.0)))
    return out


def check_jvp(family: str, f: Callable, args: Sequence[Any], argnums: Sequence[int],
              grads: Sequence[Any], y: float, target: str, where: str = "") -> None:
    """Forward against reverse: ``jvp(f, args, t)`` is ``(y, sum_i grads_i . t_i)``.

    ``grads``: zyg's reverse-mode gradients w.r.t. ``argnums`` (already checked against
    finite differences), ``y`` the value of the plain call."""
    argnums = list(argnums)
    t = tangents(args, argnums, zlib.crc32(where.encode()) & 0xFFFF)
    call, keep = copies(args), copies(args)
    try:
        y2, ty = zyg.jvp(f, tuple(call), tuple(t), target=target)
    except REFUSED as ex:
        count(family, "refused jvp")
        count(family, f"refused jvp: {type(ex).__name__}")
        return
    check_unchanged(family, target, "jvp", keep, call, where)
    want, mag = 0.0, 0.0
    for i, g in zip(argnums, grads):
        if t[i] is None or g is None:
            continue
        prod = np.asarray(g, dtype=float) * np.asarray(t[i], dtype=float)
        want += float(np.sum(prod))
        mag += float(np.sum(np.abs(prod)))
    lp = low_precision(args)
    rtol = 1e-4 if lp else 1e-8
    scale = max(1.0, abs(float(y)))
    if not (np.ndim(ty) == 0 and close(float(ty), want, rtol, rtol * (mag + scale))):
        mismatch(family, "jvp", f"[{target}] jvp tangent {ty!r}, grad . t {want!r} (t = {t!r}){where}")
    if not close(float(y2), float(y), 1e-5 if lp else 1e-10, (1e-5 if lp else 1e-12) * scale):
        mismatch(family, "jvp", f"[{target}] jvp value {y2!r}, plain call {y!r}{where}")
    count(family, "checked jvp")
    if target == "python" and share(where, 2, "zero tests"):
        # the form with forward mode's zero tests (a term t * p is 0 where t or p is):
        # what jvp runs after a nan tangent, and CUDA device gradients in forward mode
        from zyg import api
        api.JVP_ZERO_TESTS = True
        try:
            y3, ty3 = zyg.jvp(f, tuple(copies(args)), tuple(t), target=target)
        finally:
            api.JVP_ZERO_TESTS = False
        if not (np.ndim(ty3) == 0 and close(float(ty3), want, rtol, rtol * (mag + scale))
                and close(float(y3), float(y), 1e-5 if lp else 1e-10,
                          (1e-5 if lp else 1e-12) * scale)):
            mismatch(family, "jvp", f"[{target}] jvp with zero tests {(y3, ty3)!r}, value {y!r}, "
                                    f"grad . t {want!r} (t = {t!r}){where}")
        count(family, "checked jvp with zero tests")
    # the first differentiated argument given no tangent: the generated code then treats it
    # as a constant (an inactive operand, which may set a result's shape by broadcasting)
    given = [i for i, g in zip(argnums, grads) if t[i] is not None and g is not None]
    if len(given) < 2:
        return
    t2 = list(t)
    t2[given[0]] = None
    try:
        _, ty2 = zyg.jvp(f, tuple(copies(args)), tuple(t2), target=target)
    except REFUSED:
        count(family, "refused jvp (a tangent left out)")
        return
    want2, mag2 = 0.0, 0.0
    for i, g in zip(argnums, grads):
        if t2[i] is None or g is None:
            continue
        prod = np.asarray(g, dtype=float) * np.asarray(t2[i], dtype=float)
        want2 += float(np.sum(prod))
        mag2 += float(np.sum(np.abs(prod)))
    if not (np.ndim(ty2) == 0 and close(float(ty2), want2, rtol, rtol * (mag2 + scale))):
        mismatch(family, "jvp", f"[{target}] jvp tangent {ty2!r} with argument {given[0]} "
                                f"given no tangent, grad . t {want2!r} (t = {t2!r}){where}")
    count(family, "checked jvp with a tangent left out")


def _fd_along(family: str, g_at: Callable[[float], Any], h: float, tol_of: Callable[[Any], float]):
    """Central difference of ``g_at`` at 0 with step h, or None where it disagrees with the
    step h/2 (a kink or strong curvature nearby)."""
    try:
        with np.errstate(all="raise"):
            d1 = (np.asarray(g_at(h), float) - np.asarray(g_at(-h), float)) / (2 * h)
            d2 = (np.asarray(g_at(h / 2), float) - np.asarray(g_at(-h / 2), float)) / h
    except (FloatingPointError, ZeroDivisionError, OverflowError, ValueError):
        return None
    if not (np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))):
        return None
    if not close(d1, d2, 1e-5, tol_of(d2)):
        return None
    return d2


def _second_order_tol(want, gscale: float) -> float:
    return 1e-5 * max(1.0, float(np.max(np.abs(want))) if np.size(want) else 1.0, gscale)


def check_hvp(family: str, f: Callable, args: Sequence[Any], grad0: Callable[[Sequence[Any]], Any],
              target: str, where: str = "") -> None:
    """Second order against first: ``hvp(f, x, v, *rest)`` equals central differences of
    zyg's gradient w.r.t. argument 0 (``grad0(args)``, a compiled gradient) along ``v``."""
    if low_precision(args) or not is_float_arg(args[0]):
        return
    x = args[0]
    v = tangents(args, [0], zlib.crc32(("hvp" + where).encode()) & 0xFFFF)[0]
    call, keep = copies(args), copies(args)
    try:
        hv = zyg.hvp(f, call[0], v, *call[1:], target=target)
    except REFUSED as ex:
        count(family, "refused hvp")
        count(family, f"refused hvp: {type(ex).__name__}")
        return
    check_unchanged(family, target, "hvp", keep, call, where)

    def g_at(s):
        a = copies(args)
        a[0] = x + s * v if isinstance(x, np.ndarray) else x + s * v
        return grad0(a)
    g0 = np.asarray(grad0(copies(args)), float)
    gscale = float(np.max(np.abs(g0))) if g0.size else 1.0
    h = 1e-4 * max(1.0, float(np.max(np.abs(x))))
    want = _fd_along(family, g_at, h, lambda w: _second_order_tol(w, gscale))
    if want is None:
        count(family, "unreliable hvp")
        return
    if not close(hv, want, 1e-5, _second_order_tol(want, gscale)):
        mismatch(family, "hvp", f"[{target}] hvp {hv!r}, differences of the gradient {want!r} "
                                f"(v = {v!r}){where}")
    count(family, "checked hvp")


def check_hessian(family: str, f: Callable, args: Sequence[Any], grad0: Callable, target: str,
                  where: str = "") -> None:
    """``zyg.hessian(f)`` (argument 0, a float or 1-D array) times a random v equals
    differences of the gradient along v, and is symmetric."""
    if low_precision(args):
        return
    x = args[0]
    v = tangents(args, [0], zlib.crc32(("hess" + where).encode()) & 0xFFFF)[0]
    call, keep = copies(args), copies(args)
    try:
        H = zyg.hessian(f, 0, target=target)(*call)
    except REFUSED as ex:
        count(family, "refused hessian")
        count(family, f"refused hessian: {type(ex).__name__}")
        return
    check_unchanged(family, target, "hessian", keep, call, where)
    g0 = np.asarray(grad0(copies(args)), float)
    gscale = float(np.max(np.abs(g0))) if g0.size else 1.0

    def g_at(s):
        a = copies(args)
        a[0] = x + s * v
        return grad0(a)
    want = _fd_along(family, g_at, 1e-4 * max(1.0, float(np.max(np.abs(x)))),
                     lambda w: _second_order_tol(w, gscale))
    if want is None:
        count(family, "unreliable hessian")
        return
    Hv = np.asarray(H, float) @ np.asarray(v, float) if np.ndim(H) else float(H) * v
    if not close(Hv, want, 1e-5, _second_order_tol(want, gscale)):
        mismatch(family, "hessian", f"[{target}] hessian @ v {Hv!r}, differences of the gradient "
                                    f"{want!r}\nH = {H!r}{where}")
    elif np.ndim(H) == 2 and not close(H, np.asarray(H).T, 1e-6, _second_order_tol(H, gscale)):
        mismatch(family, "hessian", f"[{target}] hessian not symmetric: {H!r}{where}")
    count(family, "checked hessian")


def check_nested(family: str, f: Callable, args: Sequence[Any], k: int, grad0: Callable,
                 target: str, where: str = "") -> None:
    """Nested gradients: ``grad(grad(f, argnums=k), argnums=0)`` (``args[k]`` a float) is
    d2f/dx_k dx_0, against differences in ``args[k]`` of zyg's gradient w.r.t. argument 0."""
    if low_precision(args):
        return
    call, keep = copies(args), copies(args)
    try:
        got = zyg.grad(zyg.grad(f, argnums=k, target=target), argnums=0, target=target)(*call)
    except REFUSED as ex:
        count(family, "refused nested grad")
        count(family, f"refused nested grad: {type(ex).__name__}")
        return
    check_unchanged(family, target, "nested grad", keep, call, where)
    g0 = np.asarray(grad0(copies(args)), float)
    gscale = float(np.max(np.abs(g0))) if g0.size else 1.0

    def g_at(s):
        a = copies(args)
        a[k] = args[k] + s
        return grad0(a)
    want = _fd_along(family, g_at, 1e-4 * max(1.0, abs(args[k])), lambda w: _second_order_tol(w, gscale))
    if want is None:
        count(family, "unreliable nested grad")
        return
    if not close(got, want, 1e-5, _second_order_tol(want, gscale)):
        mismatch(family, "nested grad", f"[{target}] grad(grad(f, {k}), 0) {got!r}, differences of "
                                        f"the gradient {want!r}{where}")
    count(family, "checked nested grad")


def check_more(family: str, f: Callable, args: Sequence[Any], argnums: Sequence[int],
               grads: Sequence[Any], y: float, target: str, vg: Optional[Callable], src: str,
               where: str = "") -> None:
    """The oracles the existing families add after their own checks at one target: the jvp
    (every program on python, a share on cpu) and the hvp w.r.t. argument 0 (a share),
    reusing ``vg``, the value_and_grad already built for ``argnums``.  The CPU seconds it
    takes are added up under "oracle cpu-seconds" (the cost of the oracles in CI)."""
    t0 = time.process_time()
    try:
        _check_more(family, f, args, argnums, grads, y, target, vg, src, where)
    finally:
        STATS[family]["oracle cpu-seconds"] += round(time.process_time() - t0, 3)


def _check_more(family, f, args, argnums, grads, y, target, vg, src, where) -> None:
    if target == "python" or share(src, JVP_CPU_EVERY, "jvp"):
        check_jvp(family, f, args, argnums, grads, y, target, where)
    every = HVP_EVERY if target == "python" else HVP_CPU_EVERY
    if vg is not None and 0 in argnums and share(src, every, "hvp"):
        j = list(argnums).index(0)
        check_hvp(family, f, args, lambda a: vg(*a)[1][j], target, where)


def family_test(family: str, strategy, check: Callable, hsettings, *, oracles: Sequence[str],
                max_refused: float = 0.5) -> None:
    """Run ``check`` on the programs of ``strategy`` under ``hsettings``, then require every
    oracle in ``oracles`` to have checked a program, refusals to be a minority of the
    programs, and (collect mode) no recorded mismatch."""
    from hypothesis import given

    before = Counter(STATS[family])

    from hypothesis.errors import UnsatisfiedAssumption

    @hsettings
    @given(strategy)
    def run(prog):
        count(family, "programs")
        t0 = time.process_time()
        try:
            check(prog)
        except UnsatisfiedAssumption:
            count(family, "rejected (unreliable reference)")
            raise
        finally:
            STATS[family]["cpu-seconds"] += round(time.process_time() - t0, 3)
    run()
    got = STATS[family] - before
    print(f"\n{family}: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())))
    assert got["programs"] > 0, f"{family}: no program generated"
    for o in oracles:
        assert got[f"checked {o}"] > 0, f"{family}: the {o} oracle checked no program: {dict(got)}"
    assert got["refused"] <= max_refused * got["programs"], \
        f"{family}: zyg refused {got['refused']} of {got['programs']} programs: {dict(got)}"
    bad = {k: v for k, v in got.items() if k.startswith("mismatch")}
    assert not bad, f"{family}: mismatches {bad}; first: {MISMATCHES[family][:3]}"
