"""numpy statistics, sorting, interpolation and shape functions (zyg/rules/numpy_extra.py).

Every rule goes through the generic array rule checker (tests/arraycheck.py: value,
shapes, element-wise central differences, random directions) on target "python";
at least one case per rule (``cpu=True``) also on "cpu".  Samples stay away from the
points where these functions are not differentiable: ties (sort, median, max,
running max), clip bounds, interp knots, quantile positions on a sorted index.
``test_every_extra_rule_has_a_sample`` fails when a rule is added without a case here.

A few functions in the style of user code combine many of the functions at once
(``test_user_style``): they check composition on both targets with one compile each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import pytest

import zyg
from zyg.rules import numpy_extra as nx

from arraycheck import Lit, call_source, check_expr

RNG = np.random.default_rng(20240917)


def U(shape, lo=-1.5, hi=1.5):
    if shape == ():
        return float(RNG.uniform(lo, hi))
    return RNG.uniform(lo, hi, shape)


def distinct(shape, lo=-1.5, hi=1.5, gap=0.05):
    """Values pairwise at least ``gap`` apart (no ties)."""
    while True:
        x = U(shape, lo, hi)
        v = np.sort(np.ravel(x))
        if v.size < 2 or np.min(np.diff(v)) > gap:
            return x


def with_nans(shape, k=2):
    """``k`` nans, at most one per row of a matrix (no all-nan slice)."""
    x = distinct(shape)
    if x.ndim == 1:
        x[RNG.choice(x.size, k, replace=False)] = np.nan
    else:
        for r in range(k):
            x[r, (2 * r + 1) % x.shape[1]] = np.nan
    return x


@dataclass
class Case:
    id: str
    expr: str
    args: Tuple[Any, ...]
    covers: Tuple[Any, ...]
    cpu: bool = False


CASES: List[Case] = []


def rule(fn, *args, kw=None, id: Optional[str] = None, covers: Sequence[Any] = (), cpu=False):
    expr, passed = call_source(fn, args, kw)
    shapes = ",".join("x".join(map(str, np.shape(a))) or "s" for a in passed)
    CASES.append(Case(id or f"{expr}[{shapes}]", expr, tuple(passed), tuple(covers) or (fn,), cpu))


def expr(id: str, src: str, *args, covers: Sequence[Any] = (), cpu=False):
    CASES.append(Case(id, src, tuple(args), tuple(covers), cpu))


# --- variance and standard deviation -------------------------------------------------------------
for _f in (np.var, np.std):
    rule(_f, U((5,)))
    rule(_f, U((3, 4)))
    rule(_f, U((3, 4)), kw={"axis": 0}, cpu=_f is np.var)
    rule(_f, U((3, 4)), kw={"axis": -1})
    rule(_f, U((3, 4)), kw={"ddof": 1})
    rule(_f, U((3, 4)), kw={"axis": 1, "ddof": 1}, cpu=_f is np.std)
    rule(_f, U((2, 3, 4)), kw={"axis": 1})
    rule(_f, U((3, 4)), Lit(0), id=f"np.{_f.__name__}(a0, 0)[3x4]")
expr("a.var()[5]", "a0.var()", U((5,)), covers=[np.var])
expr("a.std(ddof=1)[5]", "a0.std(ddof=1)", U((5,)), covers=[np.std])
expr("a.var(axis=0)[3x4]", "a0.var(axis=0)", U((3, 4)), covers=[np.var])

# --- nan reductions ---------------------------------------------------------------------------
for _f in (np.nansum, np.nanmean, np.nanvar, np.nanstd, np.nanmax, np.nanmin):
    rule(_f, with_nans((7,)), cpu=_f in (np.nansum, np.nanvar, np.nanstd, np.nanmin))
    rule(_f, with_nans((3, 4), 3))
    rule(_f, with_nans((3, 4), 3), kw={"axis": 0}, cpu=_f in (np.nanmean, np.nanmax))
    rule(_f, with_nans((3, 4), 3), kw={"axis": 1})
rule(np.nanvar, with_nans((3, 4), 2), kw={"ddof": 1})
# np.nan_to_num and np.polyval (issue 24; more in tests/test_realcode_arrays.py)
rule(np.nan_to_num, with_nans((7,)), cpu=True)
rule(np.nan_to_num, with_nans((3, 4), 3), kw={"nan": 1.5, "posinf": 2.0, "neginf": -2.0})
rule(np.polyval, U((3,)), U((4,)), cpu=True)
rule(np.polyval, U((4,)), U(()))
rule(np.polyval, U((2,)), U((2, 3)))
rule(np.nanstd, with_nans((3, 4), 2), kw={"axis": 1, "ddof": 1})
rule(np.nansum, distinct((5,)), id="np.nansum(a0)[5,no nan]")

# --- keepdims= on every reduction -------------------------------------------------------------
for _f in (np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.var, np.std, np.nansum,
           np.nanmean, np.nanvar, np.nanstd, np.nanmax, np.nanmin, np.median):
    _x = (with_nans((3, 4), 2) if _f.__name__.startswith("nan") else
          U((3, 4), 0.5, 1.5) if _f is np.prod else distinct((3, 4)))
    rule(_f, _x, kw={"axis": 1, "keepdims": True}, covers=[_f, "keepdims"],
         cpu=_f is np.sum)
    rule(_f, _x.copy(), kw={"keepdims": True}, covers=[_f, "keepdims"], cpu=_f is np.std)
rule(np.sum, U((3, 4)), kw={"axis": 0, "keepdims": True}, covers=["keepdims"])
rule(np.mean, U((5,)), kw={"axis": 0, "keepdims": True}, covers=["keepdims"])
rule(np.percentile, distinct((3, 4)), Lit(30.0), kw={"axis": 0, "keepdims": True}, covers=["keepdims"])
expr("a.sum(axis=1,keepdims=True)[3x4]", "a0.sum(axis=1, keepdims=True)", U((3, 4)), covers=["keepdims"])
expr("a-a.mean(axis=0,keepdims=True)[3x4]", "a0 - a0.mean(axis=0, keepdims=True)", U((3, 4)),
     covers=["keepdims"])

# --- cumulative products (with zeros) and differences --------------------------------------------
rule(np.cumprod, U((6,), 0.5, 1.5))
_z = U((6,), 0.5, 1.5)
_z[2] = 0.0
rule(np.cumprod, _z, id="np.cumprod(a0)[6,one zero]", cpu=True)
_zz = U((6,), 0.5, 1.5)
_zz[1] = _zz[4] = 0.0
rule(np.cumprod, _zz, id="np.cumprod(a0)[6,two zeros]")
_z2 = U((3, 4), 0.5, 1.5)
_z2[1, 1] = 0.0
rule(np.cumprod, _z2, id="np.cumprod(a0)[3x4,zero]")
rule(np.cumprod, _z2.copy(), kw={"axis": 0}, id="np.cumprod(a0, axis=0)[3x4,zero]", cpu=True)
rule(np.cumprod, _z2.copy(), kw={"axis": 1}, id="np.cumprod(a0, axis=1)[3x4,zero]")
expr("a.cumprod()[5]", "a0.cumprod()", U((5,), 0.5, 1.5), covers=[np.cumprod])

rule(np.diff, U((6,)), cpu=True)
rule(np.diff, U((6,)), Lit(2))
rule(np.diff, U((3, 4)))
rule(np.diff, U((3, 4)), kw={"axis": 0}, cpu=True)
rule(np.diff, U((4, 4)), kw={"n": 2, "axis": 0})
rule(np.diff, U((3, 5)), kw={"n": 3})

# --- order statistics -----------------------------------------------------------------------------
rule(np.median, distinct((5,)))
rule(np.median, distinct((6,)))
rule(np.median, distinct((3, 4)))
rule(np.median, distinct((3, 4)), kw={"axis": 0}, cpu=True)
rule(np.median, distinct((3, 5)), kw={"axis": 1})
for _f, _q in ((np.percentile, 30.0), (np.quantile, 0.3)):
    rule(_f, distinct((6,)), Lit(_q))
    rule(_f, distinct((3, 4)), Lit(_q))
    rule(_f, distinct((3, 4)), Lit(_q), kw={"axis": 1}, cpu=_f is np.quantile)
    rule(_f, distinct((3, 4)), _q * 1.1, id=f"np.{_f.__name__}(a0, a1)[3x4,q differentiated]")
    rule(_f, distinct((3, 4)), _q * 0.9, kw={"axis": 0},
         id=f"np.{_f.__name__}(a0, a1, axis=0)[3x4,q differentiated]", cpu=_f is np.percentile)
rule(np.quantile, distinct((5,)), Lit(1.0), id="np.quantile(a0, 1.0)[5]")
rule(np.quantile, distinct((5,)), Lit(0.0), id="np.quantile(a0, 0.0)[5]")

# --- weighted average -------------------------------------------------------------------------------
rule(np.average, U((5,)), kw={"weights": None}, id="np.average(a0)[5]")
expr("average(a,weights=w)[5]", "np.average(a0, weights=a1)", U((5,)), U((5,), 0.5, 1.5),
     covers=[np.average])
expr("average(a,weights=w)[3x4]", "np.average(a0, weights=a1)", U((3, 4)), U((3, 4), 0.5, 1.5),
     covers=[np.average])
expr("average(a,axis=0,weights=w)[3x4,3x4]", "np.average(a0, axis=0, weights=a1)", U((3, 4)),
     U((3, 4), 0.5, 1.5), covers=[np.average])
expr("average(a,axis=1,weights=w)[3x4,4]", "np.average(a0, axis=1, weights=a1)", U((3, 4)),
     U((4,), 0.5, 1.5), covers=[np.average], cpu=True)
expr("average(a,0,w)[3x4,3]", "np.average(a0, 0, a1)", U((3, 4)), U((3,), 0.5, 1.5), covers=[np.average])
expr("average(a,axis=1)[3x4]", "np.average(a0, axis=1)", U((3, 4)), covers=[np.average])
expr("average(a,weights=const)[5]", "np.average(a0, weights=np.array([1.0, 2.0, 3.0, 4.0, 5.0]))",
     U((5,)), covers=[np.average])

# --- sorting and interpolation ----------------------------------------------------------------------
rule(np.sort, distinct((6,)), cpu=True)
rule(np.sort, distinct((3, 4)))
rule(np.sort, distinct((3, 4)), kw={"axis": 0}, cpu=True)
rule(np.sort, distinct((3, 4)), kw={"axis": None})
expr("sort(a)*w[6]", "np.sort(a0) * np.arange(6.0)", distinct((6,)), covers=[np.sort])

_xp = np.array([0.0, 0.4, 1.1, 1.5, 2.3])
_xq = np.array([-0.3, 0.1, 0.55, 1.2, 1.49, 2.0, 2.6])       # inside, and outside on both sides
expr("interp(x,xp,fp)[7]", "np.interp(a0, np.array([0.0, 0.4, 1.1, 1.5, 2.3]), a1)", _xq, U((5,)),
     covers=[np.interp], cpu=True)
expr("interp(s,xp,fp)[s]", "np.interp(a0, np.array([0.0, 0.4, 1.1, 1.5, 2.3]), a1)", 0.8, U((5,)),
     covers=[np.interp], cpu=True)
expr("interp(x,xp_arg,fp)[7]", "np.interp(a0, a1, a2)", _xq, np.array([0, 1, 3, 4, 6]),
     U((5,)), covers=[np.interp])
expr("interp(x2d,xp,fp)[2x3]", "np.interp(a0, np.array([0.0, 0.4, 1.1, 1.5, 2.3]), a1)",
     np.array([[0.2, 0.7, 1.3], [1.8, 2.1, -0.5]]), U((5,)), covers=[np.interp])

expr("maximum.accumulate[7]", "np.maximum.accumulate(a0)", distinct((7,)),
     covers=[np.maximum.accumulate], cpu=True)
expr("minimum.accumulate[7]", "np.minimum.accumulate(a0)", distinct((7,)),
     covers=[np.minimum.accumulate], cpu=True)


def _away(shape, lo, hi, bounds, gap=0.03):
    while True:
        x = U(shape, lo, hi)
        if all(np.min(np.abs(x - b)) > gap for b in bounds):
            return x


_lo, _hi = U((4,), 0.1, 0.4), U((4,), 0.8, 1.0)
rule(np.clip, _away((3, 4), 0.0, 1.2, (0.3, 0.9)), 0.3, 0.9, id="np.clip[3x4,lo,hi]")
rule(np.clip, _away((3, 4), 0.0, 1.2, [_lo, _hi]), _lo, _hi, id="np.clip[3x4,lo_row,hi_row]", cpu=True)
rule(np.clip, _away((3, 4), 0.0, 1.2, [_lo]), _lo, Lit(None), id="np.clip[3x4,lo_row,None]", cpu=True)
rule(np.clip, _away((5,), 0.0, 1.2, [0.9]), Lit(None), 0.9, id="np.clip[5,None,hi]")
rule(np.clip, _away((5,), -1.0, 1.2, [0.2, 0.6]), 0.6, 0.2, id="np.clip[5,lo>hi]")
rule(np.clip, 0.45, _lo, 0.9, id="np.clip[s,lo_row,hi]")
expr("a.clip(lo,hi)[3x4,arrays]", "a0.clip(a1, a2)", _away((3, 4), 0.0, 1.2, [_lo, _hi]), _lo, _hi,
     covers=[np.clip])

# --- shapes ----------------------------------------------------------------------------------
rule(np.roll, U((6,)), Lit(2))
rule(np.roll, U((6,)), Lit(-3))
rule(np.roll, U((3, 4)), Lit(5))
rule(np.roll, U((3, 4)), Lit(1), kw={"axis": 0}, cpu=True)
rule(np.roll, U((3, 4)), Lit(-1), kw={"axis": 1})
rule(np.convolve, U((6,)), U((3,)), Lit("same"), cpu=True)     # all modes: tests/test_more13.py
rule(np.flip, U((6,)))
rule(np.flip, U((3, 4)))
rule(np.flip, U((3, 4)), kw={"axis": 0})
rule(np.flip, U((3, 4)), kw={"axis": -1}, cpu=True)
rule(np.tile, U((3,)), Lit(2))
rule(np.tile, U((3,)), Lit((2, 3)))
rule(np.tile, U((2, 3)), Lit(2))
rule(np.tile, U((2, 3)), Lit((3, 2)), cpu=True)
expr("tile(a,k)[3]", "np.tile(a0, a0.shape[0] - 1)", U((3,)), covers=[np.tile])
expr("repeat(a,k)[3]", "np.repeat(a0, a0.shape[0])", U((3,)), covers=[np.repeat])
rule(np.repeat, U((3,)), Lit(2))
rule(np.repeat, U((2, 3)), Lit(2))
rule(np.repeat, U((2, 3)), Lit(3), kw={"axis": 0}, cpu=True)
rule(np.repeat, U((2, 3)), Lit(2), kw={"axis": 1})
expr("a.repeat(2)[4]", "a0.repeat(2)", U((4,)), covers=[np.repeat])
for _f in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    rule(_f, U((4,)), cpu=_f is np.atleast_2d)
    rule(_f, U((2, 3)), cpu=_f is not np.atleast_2d)
    expr(f"{_f.__name__}(s)[s]", f"np.{_f.__name__}(a0)", U(()), covers=[_f])

expr("hstack[3,4]", "np.hstack((a0, a1))", U((3,)), U((4,)), covers=["hstack"], cpu=True)
expr("hstack[list,2x3,2x1]", "np.hstack([a0, a1])", U((2, 3)), U((2, 1)), covers=["hstack"])
expr("vstack[3,3]", "np.vstack((a0, a1))", U((3,)), U((3,)), covers=["vstack"], cpu=True)
expr("vstack[list,2x3,1x3,3]", "np.vstack([a0, a1, a2])", U((2, 3)), U((1, 3)), U((3,)), covers=["vstack"])
expr("column_stack[3,3]", "np.column_stack((a0, a1))", U((3,)), U((3,)), covers=["column_stack"],
     cpu=True)
expr("column_stack[list,3x2,3]", "np.column_stack([a0, a1])", U((3, 2)), U((3,)), covers=["column_stack"])
expr("concatenate[list,axis=1]", "np.concatenate([a0, a1], axis=1)", U((2, 3)), U((2, 2)), covers=["joins"])
expr("stack[list,axis=1]", "np.stack([a0, a1, a0], axis=1)", U((3,)), U((3,)), covers=["joins"])

expr("asarray(a)[3x4]", "np.asarray(a0)", U((3, 4)), covers=[np.asarray], cpu=True)
expr("asarray(a,dtype)[5]", "np.asarray(a0, dtype=np.float64)", U((5,)), covers=[np.asarray])
expr("array(a)[3x4]", "np.array(a0)", U((3, 4)), covers=[np.array], cpu=True)
expr("array(a)*a[5]", "np.array(a0) * a0", U((5,)), covers=[np.array])
expr("a.astype(float)[3x4]", "a0.astype(float)", U((3, 4)), covers=[nx.astype], cpu=True)
expr("a.astype(np.float64)[5]", "a0.astype(np.float64) * a0", U((5,)), covers=[nx.astype])
expr("a.astype(complex)[5]", "a0.astype(np.complex128) * (1.0 + 2.0j)", U((5,)), covers=[nx.astype])
expr("array([[a,b],[c,d]])", "np.array([[a0, a1], [a2, a0 * a1]])", U(()), U(()), U(()),
     covers=["nested"], cpu=True)
expr("array([[a,1.0],[2.0,b]])", "np.array([[a0, 1.0], [2.0, a1]]) @ np.array([a1, a0])", U(()), U(()),
     covers=["nested"])
expr("array(((a,b),(b,a),(a,a)))", "np.array(((a0, a1), (a1, a0), (a0, a0)))", U(()), U(()),
     covers=["nested"])
expr("a[:,np.newaxis]*b[np.newaxis,:]", "a0[:, np.newaxis] * a1[np.newaxis, :]", U((3,)), U((4,)),
     covers=["newaxis"], cpu=True)
expr("a[None,:,None][4]", "a0[None, :, None] * a1", U((4,)), U((2, 4, 3)), covers=["newaxis"])
expr("a.reshape(-1)[3x4]", "a0.reshape(-1)", U((3, 4)), covers=["reshape"])
expr("np.reshape(a,(-1,2))[3x4]", "np.reshape(a0, (-1, 2))", U((3, 4)), covers=["reshape"])
expr("a.ravel()[2x3x2]", "a0.ravel()", U((2, 3, 2)), covers=["reshape"])


# --- the generic checker, both targets ------------------------------------------------------------
def _params(cases: Sequence[Case]):
    ids = set()
    for c in cases:
        assert c.id not in ids, f"duplicate case id {c.id}"
        ids.add(c.id)
    return [pytest.param(c, id=c.id) for c in cases]


@pytest.mark.parametrize("case", _params(CASES))
def test_rule_python(case: Case):
    check_expr(case.expr, case.args, target="python", label=case.id)


@pytest.mark.parametrize("case", _params([c for c in CASES if c.cpu]))
def test_rule_cpu(case: Case):
    check_expr(case.expr, case.args, target="cpu", label=case.id)


SHAPE_PRIMS = ["hstack", "vstack", "column_stack", "keepdims", "nested", "newaxis"]


def _has(keys, k) -> bool:
    # == for bound methods (np.maximum.accumulate is a new object at each access)
    return any(k is x or (not isinstance(x, np.ufunc) and x == k) for x in keys)


def test_every_extra_rule_has_a_sample():
    """Each rule of numpy_extra (and each construct) has a case on "python" and one on "cpu"."""
    for where, cases in (("python", CASES), ("cpu", [c for c in CASES if c.cpu])):
        covered = [k for c in cases for k in c.covers]
        missing = [getattr(k, "__name__", repr(k)) for k in nx.EXTRA_RULES if not _has(covered, k)]
        missing += [p for p in SHAPE_PRIMS if not _has(covered, p)]
        assert not missing, f"rules without a {where} case in tests/test_numpy_functions.py: {missing}"


# --- functions in the style of user code: many functions per compile --------------------------------
def robust_stats(x, w):
    xs = np.sort(x)
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    z = (x - np.mean(x)) / np.std(x, ddof=1)
    q = np.percentile(x, 75.0) - np.quantile(x, 0.25)
    avg = np.average(x, weights=w)
    trimmed = np.mean(xs[1:-1])
    run = np.maximum.accumulate(x)
    return med + 0.5 * mad + np.sum(z ** 3) + q + avg * trimmed + np.sum(run * w) + np.var(x)


def table_ops(m, v):
    row = m - m.mean(axis=1, keepdims=True)
    col = m / m.std(axis=0, keepdims=True)
    d = np.diff(m, axis=0)
    c = np.cumprod(v)
    s = np.hstack((v, np.flip(v)))
    t = np.vstack((v, v * 2.0))
    u = np.column_stack((v, v ** 2))
    r = np.roll(s, 2)
    big = np.tile(v, 2) * np.repeat(v, 2)
    a2 = np.atleast_2d(v)
    arr = np.asarray(m).astype(np.float64).reshape(-1)
    return (np.sum(row ** 2) + np.sum(col) + np.sum(d * d) + np.sum(c) + np.sum(r * s)
            + np.sum(t) * np.sum(u) + np.sum(big) + np.sum(a2 @ a2.T) + np.sum(arr[::2])
            + np.nansum(m) + np.nanmax(v) - np.nanmin(v))


def lookup_table(x, fp, a, b):
    y = np.interp(x, np.array([0.0, 0.5, 1.0, 1.5, 2.0]), fp)
    R = np.array([[a, -b], [b, a]])
    p = R @ np.array([a, b])
    outer = p[:, np.newaxis] * p[None, :]
    return np.sum(np.clip(y, 0.2, None)) + np.sum(outer) + np.sum(np.clip(x, a, b))


_V = distinct((5,), 0.4, 1.6)
USER = [
    (robust_stats, (distinct((9,)), U((9,), 0.5, 1.5)), (0, 1)),
    (table_ops, (U((3, 4), 0.5, 1.5), _V), (0, 1)),
    (lookup_table, (np.array([0.1, 0.7, 1.2, 1.9, 0.35]), U((5,), 0.0, 1.0), 0.4, 1.3), (1, 2, 3)),
]


def _fd_check(f, args, argnums, target):
    """zyg's gradient of f against central differences of every element and scalar argument."""
    g = _GRADS.get((f, target))
    if g is None:
        g = _GRADS[(f, target)] = zyg.grad(f, argnums, target=target)
    got = g(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    y = float(f(*args))
    for k, i in enumerate(argnums):
        a = args[i]
        if isinstance(a, np.ndarray):
            assert got[k].shape == a.shape
        for idx in (np.ndindex(a.shape) if isinstance(a, np.ndarray) else [None]):
            up, dn = list(args), list(args)
            if idx is None:
                h = 1e-6 * max(1.0, abs(a))
                up[i], dn[i], gi = a + h, a - h, float(got[k])
            else:
                h = 1e-6 * max(1.0, abs(a[idx]))
                up[i], dn[i], gi = a.copy(), a.copy(), float(got[k][idx])
                up[i][idx] += h
                dn[i][idx] -= h
            fd = (f(*up) - f(*dn)) / (2 * h)
            assert abs(gi - fd) <= 1e-6 * max(abs(fd), abs(gi)) + 1e-8 * max(1.0, abs(y)), \
                f"[{target}] {f.__name__}: d/d arg {i} {idx}: zyg {gi!r} fd {fd!r}"


_GRADS: dict = {}


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("f,args,argnums", USER, ids=[u[0].__name__ for u in USER])
def test_user_style(f, args, argnums, target):
    _fd_check(f, args, argnums, target)


# --- what is not supported says so, at the user's line ------------------------------------------------
def interp_moving_xp(x, xp, fp):
    return np.sum(np.interp(x, xp, fp))


def repeat_counts(x, k):
    return np.sum(np.repeat(x, k))


def percentile_many(x):
    return np.sum(np.percentile(x, np.array([10.0, 90.0])))


def sort_3d(x):
    return np.sum(np.sort(x, axis=0) * x)


def var_complex(z):
    return np.var(z)


def astype_variable(x, t):
    return np.sum(x.astype(t))


@pytest.mark.parametrize("f,args,argnums,msg", [
    (interp_moving_xp, (np.array([0.3, 0.6]), np.array([0.0, 0.5, 1.0]), np.array([1.0, 2.0, 0.5])), (0, 1),
     "xp must not depend on the inputs"),
    (repeat_counts, (np.array([0.3, 0.6]), np.array([1, 2])), 0, "one integer count"),
    (percentile_many, (np.array([0.3, 0.6, 0.1]),), 0, "one \\(scalar\\) q"),
    (sort_3d, (U((2, 2, 2)),), 0, "1-D and 2-D"),
    (var_complex, (np.array([0.3 + 1j, 0.6 - 0.5j]),), 0, "no complex rule"),
], ids=["interp-xp", "repeat-counts", "percentile-q-array", "sort-3d", "var-complex"])
def test_unsupported_says_what_and_where(f, args, argnums, msg):
    with pytest.raises(zyg.ZygError, match=msg) as ei:
        zyg.grad(f, argnums, target="python")(*args)
    text = str(ei.value)
    assert "test_numpy_functions.py" in text and f.__code__.co_firstlineno + 1 == ei.value.lineno, text


def test_astype_needs_a_constant_dtype():
    with pytest.raises(zyg.UnsupportedSyntax, match="astype\\(\\) is supported with one constant dtype"):
        zyg.grad(astype_variable, 0, target="python")(np.array([0.5, 1.0]), np.float64)
