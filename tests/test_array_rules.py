"""Every reverse rule of zyg.rules.arrays through the generic checker (tests/arraycheck.py).

Each rule has its own sample inputs, inside its domain and away from kinks and ties
(no equal elements for max/min/maximum, no element on a clip bound, no integer
quotient for fmod/%), with broadcasting cases for the elementwise rules.  Every case
runs on target "python"; a representative subset (``cpu=True``) also on "cpu"
(numba compiles each probe, ~1 s).  ``test_every_array_rule_has_a_sample`` fails
when a rule is added to ``ARRAY_RULES`` without a sample here.
"""
from __future__ import annotations

import builtins
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest

from zyg.rules import arrays as arules
from zyg.rules import scalar as srules

from arraycheck import Lit, call_source, check_array_rule, check_expr

RNG = np.random.default_rng(20240611)


# --- samples ---------------------------------------------------------------------------------
def U(shape, lo, hi):
    """Uniform in [lo, hi); a Python float for shape ()."""
    if shape == ():
        return float(RNG.uniform(lo, hi))
    return RNG.uniform(lo, hi, shape)


def S(shape, lo, hi):
    """Random sign times uniform in [lo, hi): away from zero."""
    if shape == ():
        return float(RNG.choice([-1.0, 1.0]) * RNG.uniform(lo, hi))
    return RNG.choice([-1.0, 1.0], shape) * RNG.uniform(lo, hi, shape)


def distinct(shape, lo=-1.5, hi=1.5, gap=0.05):
    """Uniform values, pairwise at least ``gap`` apart (no ties for max/min)."""
    while True:
        x = U(shape, lo, hi)
        v = np.sort(np.ravel(x))
        if v.size < 2 or np.min(np.diff(v)) > gap:
            return x


@dataclass
class Case:
    id: str
    expr: str
    args: Tuple[Any, ...]
    covers: Tuple[Any, ...]
    cpu: bool = False
    xfail: Optional[str] = None        # a known zyg bug (both targets): strict xfail
    xfail_cpu: Optional[str] = None    # a known bug on target "cpu" only
    fn: Any = None                     # set for cases built by check_array_rule
    fn_args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)

    def run(self, target: str) -> None:
        if self.fn is not None:
            check_array_rule(self.fn, self.fn_args, self.kwargs or None, target=target)
        else:
            check_expr(self.expr, self.args, target=target, label=self.id)

    @property
    def broadcasts(self) -> bool:
        shapes = {np.shape(a) for a in self.args if not isinstance(a, np.ndarray) or a.dtype.kind == "f"}
        return len(shapes) > 1


CASES: List[Case] = []


def rule(fn, *args, kw: Optional[Dict[str, Any]] = None, id: Optional[str] = None, **opts) -> Case:
    expr, passed = call_source(fn, args, kw)
    shapes = ",".join("x".join(map(str, np.shape(a))) or "s" for a in passed)
    c = Case(id or f"{expr}[{shapes}]", expr, tuple(passed), (fn,), fn=fn, fn_args=args,
             kwargs=dict(kw or {}), **opts)
    CASES.append(c)
    return c


def expr(id: str, src: str, *args, covers: Sequence[Any] = (), **opts) -> Case:
    c = Case(id, src, args, tuple(covers), **opts)
    CASES.append(c)
    return c


# --- elementwise unary ---------------------------------------------------------------------
UNARY_DOMAIN = {
    "arcsin": (U, -0.8, 0.8), "arccos": (U, -0.8, 0.8), "arctanh": (U, -0.8, 0.8),
    "arccosh": (U, 1.3, 3.0), "tan": (U, -1.2, 1.2),
    "log": (U, 0.3, 2.0), "log2": (U, 0.3, 2.0), "log10": (U, 0.3, 2.0), "sqrt": (U, 0.3, 2.0),
    "reciprocal": (U, 0.3, 2.0), "cbrt": (U, 0.3, 2.0), "log1p": (U, -0.5, 2.0),
    "fabs": (S, 0.2, 1.5), "absolute": (S, 0.2, 1.5), "sinc": (S, 0.2, 1.8),
}
UNARY_CPU = {"sin", "cbrt"}

UNARY_FNS = []
for _name in srules.UNARY:
    _f = getattr(np, _name, None)
    if _f is not None and _f not in UNARY_FNS:          # np.asin is np.arcsin
        UNARY_FNS.append(_f)
for _f in UNARY_FNS:
    _gen, _lo, _hi = UNARY_DOMAIN.get(_f.__name__, (U, -1.5, 1.5))
    rule(_f, _gen((3, 4), _lo, _hi), cpu=_f.__name__ in UNARY_CPU)
rule(np.sin, U((5,), -1.5, 1.5))
rule(np.exp, U((2, 3, 2), -1.5, 1.5))
rule(builtins.abs, S((3, 4), 0.2, 1.5), cpu=True)
rule(builtins.abs, S((5,), 0.2, 1.5))
expr("neg[3x4]", "-a0", S((3, 4), 0.2, 1.5), covers=[operator.neg])
expr("pos[3x4]", "+a0", S((3, 4), 0.2, 1.5), covers=[operator.pos])


# --- elementwise binary, with broadcasting ----------------------------------------------------
def _frac_ok(q):
    return np.all(np.abs(q - np.round(q)) > 0.05)


def pair_sampler(name: str) -> Callable[[tuple, tuple], Tuple[Any, Any]]:
    def draw(sa, sb):
        for _ in range(10000):
            if name in ("power", "pow"):
                a, b = U(sa, 0.4, 2.0), U(sb, -1.5, 2.5)
            elif name in ("fmod", "mod"):
                a, b = S(sa, 0.3, 4.0), S(sb, 0.6, 1.7)
            else:
                a, b = S(sa, 0.3, 1.6), S(sb, 0.3, 1.6)
            A, B = np.broadcast_arrays(np.asarray(a), np.asarray(b))
            if name in ("maximum", "minimum", "fmax", "fmin") and np.min(np.abs(A - B)) < 0.05:
                continue
            if name in ("fmod", "mod") and not _frac_ok(A / B):
                continue
            return a, b
        raise AssertionError(f"no sample for {name}")
    return draw


BROADCASTS = [("same", (3, 4), (3, 4)), ("row", (3, 4), (4,)), ("col", (3, 4), (3, 1)),
              ("scalar_r", (3, 4), ()), ("scalar_l", (), (3, 4)), ("outer", (3, 1), (1, 4)),
              ("1d", (5,), (5,))]
BROADCASTS_3D = [("3d_row", (2, 3, 4), (4,)), ("3d_mat", (3, 4), (2, 3, 4))]

BINARY_FNS = [np.add, np.subtract, np.multiply, np.divide, np.power, np.arctan2, np.hypot,
              np.logaddexp, np.maximum, np.minimum, np.fmax, np.fmin, np.copysign, np.fmod]
OPERATORS = [("+", operator.add), ("-", operator.sub), ("*", operator.mul), ("/", operator.truediv),
             ("**", operator.pow), ("%", operator.mod)]
# (rule, broadcast case) also run on cpu
BINARY_CPU = {("add", "row"), ("multiply", "col"), ("maximum", "row"), ("arctan2", "outer"),
              ("**", "same"), ("-", "3d_row")}

for _f in BINARY_FNS:
    _draw = pair_sampler(_f.__name__)
    for _bc, _sa, _sb in BROADCASTS + (BROADCASTS_3D if _f in (np.add, np.multiply, np.maximum) else []):
        _a, _b = _draw(_sa, _sb)
        rule(_f, _a, _b, id=f"np.{_f.__name__}[{_bc}]", cpu=(_f.__name__, _bc) in BINARY_CPU)
for _sym, _op in OPERATORS:
    _draw = pair_sampler(_op.__name__)
    for _bc, _sa, _sb in BROADCASTS + (BROADCASTS_3D if _sym in ("-", "*") else []):
        _a, _b = _draw(_sa, _sb)
        expr(f"a{_sym}b[{_bc}]", f"a0 {_sym} a1", _a, _b, covers=[_op], cpu=(_sym, _bc) in BINARY_CPU)
# the same operand on both sides: two contributions into one shadow
expr("a*a[3x4]", "a0 * a0", S((3, 4), 0.3, 1.6), covers=[operator.mul])
rule(np.maximum, distinct((3, 4)), Lit(0.1), id="np.maximum(a0, 0.1)[3x4]")


# --- reductions ------------------------------------------------------------------------------
REDUCTIONS = [np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin]
RED_CPU = {("sum", 0), ("mean", -1), ("prod", 1), ("max", None)}
for _f in REDUCTIONS:
    for _ax in (None, 0, 1, -1):
        _x = U((3, 4), 0.5, 1.5) if _f is np.prod else distinct((3, 4))
        rule(_f, _x, kw=None if _ax is None else {"axis": _ax},
             cpu=(_f.__name__, _ax) in RED_CPU)
for _f in REDUCTIONS:
    rule(_f, distinct((5,)))                       # 1-D, all axes
rule(np.sum, U((2, 3, 4), -1.5, 1.5), kw={"axis": 1})
rule(np.sum, U((2, 3, 4), -1.5, 1.5), kw={"axis": -1})
rule(np.mean, U((2, 3, 4), -1.5, 1.5), kw={"axis": 0})
rule(np.sum, U((3, 4), -1.5, 1.5), Lit(1))          # positional axis
_z = U((3, 4), 0.5, 1.5)
_z[1, 2] = 0.0                                      # prod: exact with a zero element
rule(np.prod, _z, id="np.prod(a0)[3x4,zero]")
rule(np.prod, _z.copy(), kw={"axis": 1}, id="np.prod(a0, axis=1)[3x4,zero]")
rule(np.prod, _z.copy(), kw={"axis": 0}, id="np.prod(a0, axis=0)[3x4,zero]")
expr("a.sum(axis=0)[3x4]", "a0.sum(axis=0)", U((3, 4), -1.5, 1.5), covers=[np.sum])
expr("a.mean()[3x4]", "a0.mean()", U((3, 4), -1.5, 1.5), covers=[np.mean])
expr("a.prod(axis=1)[3x4]", "a0.prod(axis=1)", U((3, 4), 0.5, 1.5), covers=[np.prod])
expr("a.max()[3x4]", "a0.max()", distinct((3, 4)), covers=[np.max])
expr("a.min(axis=0)[3x4]", "a0.min(axis=0)", distinct((3, 4)), covers=[np.min])

rule(np.cumsum, U((5,), -1.5, 1.5))
rule(np.cumsum, U((5,), -1.5, 1.5), kw={"axis": 0},
     cpu=True)
rule(np.cumsum, U((3, 4), -1.5, 1.5), cpu=True)
for _ax in (0, 1, -1):
    rule(np.cumsum, U((3, 4), -1.5, 1.5), kw={"axis": _ax}, cpu=_ax == 0)
rule(np.cumsum, U((3, 4), -1.5, 1.5), Lit(1))
expr("a.cumsum()[5]", "a0.cumsum()", U((5,), -1.5, 1.5), covers=[np.cumsum])


# --- linear algebra ------------------------------------------------------------------------
for _name, _f in [("np.dot", np.dot), ("np.matmul", np.matmul), ("@", operator.matmul),
                  ("np.inner", np.inner)]:
    _shapes = [("1,1", (4,), (4,)), ("2,1", (3, 4), (4,)), ("1,2", (3,), (3, 4)),
               ("2,2", (3, 4), (4, 2))]
    if _f is np.inner:
        _shapes = [("1,1", (4,), (4,)), ("2,1", (3, 4), (4,)), ("1,2", (4,), (3, 4)),
                   ("2,2", (3, 4), (5, 4))]
    for _tag, _sa, _sb in _shapes:
        _a, _b = U(_sa, -1.5, 1.5), U(_sb, -1.5, 1.5)
        _cpu = (_name, _tag) in {("@", "2,2"), ("np.dot", "2,1"), ("np.matmul", "1,2"), ("np.inner", "1,1"), ("np.inner", "2,2")}
        if _f is operator.matmul:
            expr(f"a@b[{_tag}]", "a0 @ a1", _a, _b, covers=[_f], cpu=_cpu)
        else:
            rule(_f, _a, _b, id=f"{_name}[{_tag}]", cpu=_cpu)
rule(np.dot, U((), 0.5, 1.5), U((3, 4), -1.5, 1.5), id="np.dot[scalar,2]", cpu=True)
rule(np.dot, U((3,), -1.5, 1.5), U((), 0.5, 1.5), id="np.dot[1,scalar]")
expr("a.dot(b)[2,1]", "a0.dot(a1)", U((3, 4), -1.5, 1.5), U((4,), -1.5, 1.5), covers=[np.dot])
expr("a@a.T[3x4]", "a0 @ a0.T", U((3, 4), -1.5, 1.5), covers=[operator.matmul])

rule(np.outer, U((3,), -1.5, 1.5), U((4,), -1.5, 1.5), cpu=True)
rule(np.outer, U((2, 2), -1.5, 1.5), U((3,), -1.5, 1.5))
rule(np.linalg.norm, U((5,), -1.5, 1.5), cpu=True)
rule(np.linalg.norm, U((3, 4), -1.5, 1.5))


# --- selection -----------------------------------------------------------------------------
_cond = RNG.uniform(size=(3, 4)) > 0.5
rule(np.where, _cond.copy(), U((3, 4), -1.5, 1.5), U((3, 4), -1.5, 1.5))
rule(np.where, _cond.copy(), U((3, 4), -1.5, 1.5), U((), -1.5, 1.5), id="np.where[3x4,scalar]", cpu=True)
rule(np.where, _cond.copy(), U((), -1.5, 1.5), U((3, 4), -1.5, 1.5), id="np.where[scalar,3x4]")
rule(np.where, _cond.copy(), U((4,), -1.5, 1.5), U((3, 4), -1.5, 1.5), id="np.where[row,3x4]")
rule(np.where, RNG.uniform(size=(3, 1)) > 0.5, U((3, 4), -1.5, 1.5), U((3, 4), -1.5, 1.5),
     id="np.where[cond_col,3x4,3x4]")
rule(np.where, _cond.copy(), U((3, 4), -1.5, 1.5), Lit(0.0), id="np.where[3x4,0.0]")
rule(np.where, RNG.uniform(size=5) > 0.5, U((5,), -1.5, 1.5), U((5,), -1.5, 1.5), id="np.where[1d]")
_wa, _wb = pair_sampler("maximum")((3, 4), (3, 4))
expr("where(a>b,a,b)[3x4]", "np.where(a0 > a1, a0, a1)", _wa, _wb, covers=[np.where])


def _away(shape, lo, hi, bounds, gap=0.03):
    while True:
        x = U(shape, lo, hi)
        if all(np.min(np.abs(x - b)) > gap for b in bounds):
            return x


rule(np.clip, _away((3, 4), 0.0, 1.2, (0.3, 0.9)), Lit(0.3), Lit(0.9), id="np.clip(a0, 0.3, 0.9)[3x4]")
rule(np.clip, _away((3, 4), 0.0, 1.2, (0.3, 0.9)), 0.3, 0.9, id="np.clip[3x4,lo,hi]", cpu=True)
rule(np.clip, _away((5,), 0.0, 1.2, (0.3, 0.9)), 0.3, 0.9, id="np.clip[5,lo,hi]")
_lo = U((4,), 0.2, 0.5)
rule(np.clip, _away((3, 4), 0.0, 1.2, [_lo, 0.9]), _lo, 0.9, id="np.clip[3x4,lo_row,hi]")
expr("a.clip(0.3, 0.9)[3x4]", "a0.clip(0.3, 0.9)", _away((3, 4), 0.0, 1.2, (0.3, 0.9)),
     covers=[np.clip])


# --- creation ------------------------------------------------------------------------------
rule(np.full, Lit((3, 2)), U((), -1.5, 1.5), cpu=True)
rule(np.full, Lit(4), U((), -1.5, 1.5))
rule(np.full_like, U((3, 4), -1.5, 1.5), U((), -1.5, 1.5))
rule(np.full_like, U((5,), -1.5, 1.5), U((), -1.5, 1.5))
rule(np.linspace, U((), -1.5, 0.0), U((), 0.5, 2.0), Lit(5), cpu=True)
rule(np.linspace, Lit(0.0), U((), 0.5, 2.0), Lit(4))
rule(np.linspace, U((), -1.5, 0.0), U((), 0.5, 2.0), Lit(1))
rule(np.copy, U((3, 4), -1.5, 1.5))
rule(np.copy, U((5,), -1.5, 1.5))
expr("a.copy()[3x4]", "a0.copy()", U((3, 4), -1.5, 1.5), covers=[np.copy])
rule(np.ravel, U((3, 4), -1.5, 1.5), cpu=True)
rule(np.ravel, U((5,), -1.5, 1.5))
rule(np.ravel, U((2, 3, 2), -1.5, 1.5))
expr("a.ravel()[3x4]", "a0.ravel()", U((3, 4), -1.5, 1.5), covers=[np.ravel])
expr("a.flatten()[3x4]", "a0.flatten()", U((3, 4), -1.5, 1.5), covers=[np.ravel])
expr("np.array([a,b,c])", "np.array([a0, a1, a2])", U((), -1.5, 1.5), U((), -1.5, 1.5),
     U((), -1.5, 1.5), covers=["ArrayOf"], cpu=True)
expr("np.array([a,2.0,b])", "np.array([a0, 2.0, a1])", U((), -1.5, 1.5), U((), -1.5, 1.5),
     covers=["ArrayOf"])
expr("np.array([a,a])", "np.array([a0, a0])", U((), -1.5, 1.5), covers=["ArrayOf"])


# --- joins -------------------------------------------------------------------------------------
def _u(*shape):
    return U(shape, -1.5, 1.5)


expr("concatenate[3,4]", "np.concatenate((a0, a1))", _u(3), _u(4), covers=["concatenate"])
expr("concatenate[2x3,4x3]", "np.concatenate((a0, a1), axis=0)", _u(2, 3), _u(4, 3),
     covers=["concatenate"])
expr("concatenate[3x2,3x4,axis=1]", "np.concatenate((a0, a1), axis=1)", _u(3, 2), _u(3, 4),
     covers=["concatenate"], cpu=True)
expr("concatenate[3x2,3x4,axis=-1]", "np.concatenate((a0, a1), axis=-1)", _u(3, 2), _u(3, 4),
     covers=["concatenate"])
expr("concatenate[3x2,3x4,1]", "np.concatenate((a0, a1), 1)", _u(3, 2), _u(3, 4),
     covers=["concatenate"])
expr("concatenate[3,2,4]", "np.concatenate((a0, a1, a2))", _u(3), _u(2), _u(4), covers=["concatenate"])
expr("concatenate[a,a]", "np.concatenate((a0, a0))", _u(3), covers=["concatenate"])
expr("concatenate[list]", "np.concatenate([a0, a1])", _u(3), _u(2), covers=["concatenate"])
expr("stack[4,4]", "np.stack((a0, a1))", _u(4), _u(4), covers=["stack"])
expr("stack[4,4,axis=1]", "np.stack((a0, a1), axis=1)", _u(4), _u(4), covers=["stack"], cpu=True)
expr("stack[3x2,3x2,axis=0]", "np.stack((a0, a1), axis=0)", _u(3, 2), _u(3, 2), covers=["stack"])
expr("stack[3x2,3x2,axis=1]", "np.stack((a0, a1), axis=1)", _u(3, 2), _u(3, 2), covers=["stack"])
expr("stack[3x2,3x2,axis=2]", "np.stack((a0, a1), axis=2)", _u(3, 2), _u(3, 2), covers=["stack"])
expr("stack[3x2,3x2,axis=-1]", "np.stack((a0, a1), axis=-1)", _u(3, 2), _u(3, 2), covers=["stack"])
expr("stack[3,3,3]", "np.stack((a0, a1, a2))", _u(3), _u(3), _u(3), covers=["stack"])
expr("stack[a,a]", "np.stack((a0, a0), axis=1)", _u(3), covers=["stack"])


# --- views -----------------------------------------------------------------------------------
expr("a.T[3x4]", "a0.T", _u(3, 4), covers=["view"], cpu=True)
expr("np.transpose[3x4]", "np.transpose(a0)", _u(3, 4), covers=["view"])
expr("a.transpose()[3x4]", "a0.transpose()", _u(3, 4), covers=["view"])
expr("a.T*b[3x4]", "a0.T * a1", _u(3, 4), _u(4, 3), covers=["view"])
expr("a.reshape(2,6)[3x4]", "a0.reshape(2, 6)", _u(3, 4), covers=["view"])
expr("a.reshape((6,2))[3x4]", "a0.reshape((6, 2))", _u(3, 4), covers=["view"])
expr("np.reshape(a,(4,3))[3x4]", "np.reshape(a0, (4, 3))", _u(3, 4), covers=["view"])
expr("np.reshape(a,(2,3))[6]", "np.reshape(a0, (2, 3))", _u(6), covers=["view"])
expr("a.reshape(12)[3x4]", "a0.reshape(12)", _u(3, 4), covers=["view"])
expr("a[1:4][6]", "a0[1:4]", _u(6), covers=["view"])
expr("a[::-1][6]", "a0[::-1]", _u(6), covers=["view"])
expr("a[::2]*b[6]", "a0[::2] * a1", _u(6), _u(3), covers=["view"])
expr("a[:,::2][3x4]", "a0[:, ::2]", _u(3, 4), covers=["view"])
expr("a[1][3x4]", "a0[1]", _u(3, 4), covers=["view"])
expr("a[:,1][3x4]", "a0[:, 1]", _u(3, 4), covers=["view"])
expr("a[1:,:-1][3x4]", "a0[1:, :-1]", _u(3, 4), covers=["view"])
expr("a[2][5]", "a0[2]", _u(5), covers=["view"])
# rules applied to views: the contribution goes into a view of the base's shadow
expr("sin(a[1:3])[3x4]", "np.sin(a0[1:3])", _u(3, 4), covers=["view"])
expr("sin(a[:,1])[3x4]", "np.sin(a0[:, 1])", _u(3, 4), covers=["view"])
expr("sin(a[::-1])[6]", "np.sin(a0[::-1])", _u(6), covers=["view"])
expr("maximum(a.T,0.1)[3x4]", "np.maximum(a0.T, 0.1)", distinct((3, 4)), covers=["view"])
expr("sin(a.T)[3x4]", "np.sin(a0.T)", _u(3, 4), covers=["view"], cpu=True)
expr("-(a.T)[3x4]", "-(a0.T)", _u(3, 4), covers=["view"])
expr("sin(np.transpose(a))[3x4]", "np.sin(np.transpose(a0))", _u(3, 4), covers=["view"])
expr("sum(a.T,axis=0)[3x4]", "np.sum(a0.T, axis=0)", _u(3, 4), covers=["view"])
expr("a.T@b[3x4,3x2]", "a0.T @ a1", _u(3, 4), _u(3, 2), covers=["view"])
expr("sin(a.reshape(2,6))[3x4]", "np.sin(a0.reshape(2, 6))", _u(3, 4), covers=["view"], cpu=True)


# --- float32 -----------------------------------------------------------------------------------
_f32 = lambda *s: U(s, -1.5, 1.5).astype(np.float32)  # noqa: E731
rule(np.sin, _f32(3, 4), id="np.sin[3x4,f32]")
rule(np.add, _f32(3, 4), _f32(4), id="np.add[row,f32]")
rule(np.sum, _f32(3, 4), kw={"axis": 0}, id="np.sum(a0, axis=0)[3x4,f32]")
expr("a@b[2,2,f32]", "a0 @ a1", _f32(3, 4), _f32(4, 2), covers=[operator.matmul])


# --- complex operands (docs/complex.md) -----------------------------------------------------------
def C(shape, re=(-1.5, 1.5), im=(-1.5, 1.5)):
    """Complex samples, real and imaginary parts uniform; a Python complex for shape ()."""
    if shape == ():
        return complex(U((), *re), U((), *im))
    return U(shape, *re) + 1j * U(shape, *im)


def CD(shape):
    """Inside the domain of every holomorphic function of the table: right half plane,
    away from the real axis (branch cuts of log, sqrt, arccosh, arcsin, ...) and from 0."""
    return C(shape, (0.3, 1.2), (0.2, 1.0))


# rules with no complex form: zyg raises for complex operands (test_real_only_rules_reject_complex)
REAL_ONLY_ARRAY = {np.maximum, np.minimum, np.fmax, np.fmin, np.arctan2, np.hypot, np.logaddexp,
                   np.copysign, np.fmod, operator.mod, np.max, np.min, np.amax, np.amin, np.clip,
                   np.fabs, np.cbrt, np.radians, np.degrees, np.deg2rad, np.rad2deg, np.sinc,
                   np.linspace}
COMPLEX_CPU = {"np.exp[3x4,c]", "abs[3x4,c]", "np.multiply[row,f*c]", "a**b[same,c]", "np.dot[2,1,c]",
               "np.sum(a0, axis=0)[3x4,c]", "np.imag[3x4,c]", "a.real*b[3x4,c]"}

for _f in UNARY_FNS:
    if _f in REAL_ONLY_ARRAY:
        continue
    _id = f"np.{_f.__name__}[3x4,c]"
    rule(_f, CD((3, 4)), id=_id, cpu=_id in COMPLEX_CPU)
rule(builtins.abs, C((3, 4)), id="abs[3x4,c]", cpu=True)
rule(np.sqrt, CD((5,)), id="np.sqrt[5,c]")
for _f in (np.real, np.imag, np.conjugate, np.angle):
    _id = f"np.{_f.__name__}[3x4,c]"
    rule(_f, C((3, 4)), id=_id, cpu=_id in COMPLEX_CPU)
    rule(_f, U((5,), -1.5, 1.5), id=f"np.{_f.__name__}[5,f]")       # a real operand
expr("a.conj()[3x4,c]", "a0.conj()", C((3, 4)), covers=[np.conjugate])

# binary: complex with complex, float with complex (promotion: the float operand gets the
# real part of its cotangent), with broadcasting
_CBIN = [("same", C((3, 4)), C((3, 4)), "c"), ("row", U((3, 4), -1.5, 1.5), C((4,)), "f*c"),
         ("col", C((3, 4)), U((3, 1), 0.5, 1.5), "c*f"), ("scalar_l", C(()), U((3, 4), 0.5, 1.5), "c*f"),
         ("scalar_r", U((3, 4), 0.5, 1.5), C(()), "f*c"), ("outer", C((3, 1)), C((1, 4)), "c")]
for _f in (np.add, np.subtract, np.multiply, np.divide):
    for _bc, _a, _b, _t in _CBIN:
        _id = f"np.{_f.__name__}[{_bc},{_t}]"
        rule(_f, _a, _b, id=_id, cpu=_id in COMPLEX_CPU)
rule(np.power, CD((3, 4)), C((3, 4), (-1.0, 2.0), (-0.5, 0.5)), id="np.power[same,c]")
rule(np.power, CD((3, 4)), U((4,), -1.0, 2.0), id="np.power[row,c*f]")
rule(np.power, U((3, 4), 0.5, 2.0), C((), (-1.0, 2.0), (-0.5, 0.5)), id="np.power[scalar_r,f*c]")
for _sym, _op in OPERATORS:
    if _op is operator.mod:
        continue
    for _bc, _a, _b, _t in _CBIN[:3]:
        if _op is operator.pow:
            _a = CD(np.shape(_a)) if np.iscomplexobj(_a) else U(np.shape(_a), 0.5, 2.0)
            _b = C(np.shape(_b), (-1.0, 2.0), (-0.5, 0.5)) if np.iscomplexobj(_b) else U(np.shape(_b), -1.0, 2.0)
        _id = f"a{_sym}b[{_bc},{_t}]"
        expr(_id, f"a0 {_sym} a1", _a, _b, covers=[_op], cpu=_id in COMPLEX_CPU)
expr("a*conj(a)[3x4,c]", "a0 * np.conj(a0)", C((3, 4)), covers=[operator.mul, np.conjugate])
expr("1j*a[3x4,f]", "1j * a0", U((3, 4), -1.5, 1.5), covers=[operator.mul])
expr("neg[3x4,c]", "-a0", C((3, 4)), covers=[operator.neg])
expr("pos[3x4,c]", "+a0", C((3, 4)), covers=[operator.pos])
expr("abs(a)**2[5,c]", "np.abs(a0) ** 2", C((5,)), covers=[np.absolute, operator.pow])

# reductions, linear algebra, selection, creation, joins and views
for _f in (np.sum, np.mean, np.prod, np.cumsum):
    for _ax in (None, 0, 1):
        _id = f"{_f.__name__}[{_ax}]"
        rule(_f, C((3, 4), (0.5, 1.5), (-0.5, 0.5)), kw=None if _ax is None else {"axis": _ax},
             id=f"np.{_f.__name__}(a0{'' if _ax is None else f', axis={_ax}'})[3x4,c]",
             cpu=f"np.{_f.__name__}(a0, axis={_ax})[3x4,c]" in COMPLEX_CPU)
for _name, _f in [("np.dot", np.dot), ("np.matmul", np.matmul), ("np.inner", np.inner)]:
    for _tag, _sa, _sb in [("1,1", (4,), (4,)), ("2,1", (3, 4), (4,)), ("2,2", (3, 4), (4, 4))]:
        _id = f"{_name}[{_tag},c]"
        rule(_f, C(_sa), C(_sb), id=_id, cpu=_id in COMPLEX_CPU)
rule(np.dot, U((3, 4), -1.5, 1.5), C((4,)), id="np.dot[2,1,f*c]")
rule(np.dot, C((3,)), C((3, 4)), id="np.dot[1,2,c]")
rule(np.dot, C(()), C((3, 4)), id="np.dot[scalar,2,c]")
expr("a@b[2,2,c]", "a0 @ a1", C((3, 4)), C((4, 2)), covers=[operator.matmul])
expr("a@b[2,2,f*c]", "a0 @ a1", U((3, 4), -1.5, 1.5), C((4, 2)), covers=[operator.matmul])
rule(np.outer, C((3,)), C((4,)), id="np.outer[c]")
rule(np.outer, U((3,), -1.5, 1.5), C((4,)), id="np.outer[f*c]")
rule(np.linalg.norm, C((5,)), id="np.linalg.norm[5,c]")
rule(np.where, _cond.copy(), C((3, 4)), C((3, 4)), id="np.where[3x4,c]")
rule(np.where, _cond.copy(), C((3, 4)), U((), -1.5, 1.5), id="np.where[3x4,f,c]")
rule(np.full, Lit((3, 2)), C(()), id="np.full[c]")
rule(np.full_like, C((3, 4)), C(()), id="np.full_like[c]")
rule(np.copy, C((3, 4)), id="np.copy[3x4,c]")
rule(np.ravel, C((3, 4)), id="np.ravel[3x4,c]")
expr("np.array([a,b])[c]", "np.array([a0, a1])", C(()), C(()), covers=["ArrayOf"])
expr("concatenate[3,4,c]", "np.concatenate((a0, a1))", C((3,)), C((4,)), covers=["concatenate"])
expr("concatenate[evens,odds,c]", "np.concatenate((a0[0::2], a0[1::2]))", C((6,)), covers=["concatenate"])
expr("stack[4,4,c]", "np.stack((a0, a1), axis=1)", C((4,)), C((4,)), covers=["stack"])
expr("a[0::2]*b[1::2][6,c]", "a0[0::2] * a1[1::2]", C((6,)), C((6,)), covers=["view"])
expr("a.T[3x4,c]", "a0.T", C((3, 4)), covers=["view"])
expr("a.real*b[3x4,c]", "a0.real * a1", C((3, 4)), U((3, 4), -1.5, 1.5), covers=["view"], cpu=True)
expr("a.imag[3x4,c]", "a0.imag", C((3, 4)), covers=["view"])
expr("sin(a[::-1])[6,c]", "np.sin(a0[::-1])", C((6,)), covers=["view"])
expr("exp(a)[2x3x2,c]", "np.exp(a0)", C((2, 3, 2)), covers=[np.exp])


# --- the tests ---------------------------------------------------------------------------------
def _params(cases: Sequence[Case], target: str):
    ids, out = set(), []
    for c in cases:
        assert c.id not in ids, f"duplicate case id {c.id}"
        ids.add(c.id)
        why = c.xfail or (c.xfail_cpu if target == "cpu" else None)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


CPU_CASES = [c for c in CASES if c.cpu]


@pytest.mark.parametrize("case", _params(CASES, "python"))
def test_rule_python(case: Case):
    case.run("python")


@pytest.mark.parametrize("case", _params(CPU_CASES, "cpu"))
def test_rule_cpu(case: Case):
    case.run("cpu")


def _covered() -> List[Any]:
    # an xfail case counts: the rule goes through the checker and its bug stays visible
    return [k for c in CASES for k in c.covers]


def _has(keys: Sequence[Any], k: Any) -> bool:
    return any(k is x or (isinstance(x, str) and x == k) for x in keys)


def test_every_array_rule_has_a_sample():
    covered = _covered()
    missing = [getattr(k, "__name__", repr(k)) for k in arules.ARRAY_RULES if not _has(covered, k)]
    missing += [p for p in ("ArrayOf", "concatenate", "stack", "view") if not _has(covered, p)]
    assert not missing, f"array rules without a sample in tests/test_array_rules.py: {missing}"


def test_every_broadcasting_rule_has_a_broadcasting_sample():
    missing = []
    for k, r in arules.ARRAY_RULES.items():
        if r.broadcast and not any(_has(c.covers, k) and c.broadcasts for c in CASES):
            missing.append(getattr(k, "__name__", repr(k)))
    assert not missing, f"broadcasting rules without a broadcasting sample: {missing}"


def test_cpu_subset_is_small_and_varied():
    assert 15 <= len(CPU_CASES) <= 48
    assert len(CASES) > 3 * len(CPU_CASES)


def test_checker_catches_a_wrong_rule(monkeypatch):
    """The checker is not vacuous: a rule with a wrong derivative, or one that forgets
    to reduce over a broadcast axis, fails it."""
    monkeypatch.setitem(arules.ARRAY_RULES, np.sin, arules._unary("np.sin(x)"))
    with pytest.raises(AssertionError, match="finite differences"):
        check_expr("np.sin(a0)", [U((3, 4), -1.5, 1.5)], cache=False)
    # d/db of a * b with the factor of a dropped
    monkeypatch.setitem(arules.ARRAY_RULES, np.multiply, arules._binary("b", "1.0"))
    with pytest.raises(AssertionError, match="finite differences"):
        check_expr("np.multiply(a0, a1)", [U((3, 4), -1.5, 1.5), U((4,), -1.5, 1.5)], cache=False)


def test_checker_catches_a_wrong_complex_rule(monkeypatch):
    """A complex rule that forgets to conjugate the derivative (dz += f'(z) * dy instead of
    conj(f'(z)) * dy) fails the checker, and so does one that drops the imaginary part."""
    monkeypatch.setitem(arules.ARRAY_RULES, np.exp, arules._unary("y", "y", conj=False))
    with pytest.raises(AssertionError, match="finite differences"):
        check_expr("np.exp(a0)", [C((3, 4))], cache=False)
    monkeypatch.setitem(arules.ARRAY_RULES, np.multiply, arules._binary("b", "a", ("np.real(b)", "a")))
    with pytest.raises(AssertionError, match="finite differences"):
        check_expr("np.multiply(a0, a1)", [C((3, 4)), C((4,))], cache=False)


def _complex_covered() -> List[Any]:
    return [k for c in CASES if any(np.iscomplexobj(a) for a in c.args) for k in c.covers]


def test_every_array_rule_has_a_complex_sample_or_is_real_only():
    """Each array rule either goes through the checker with complex operands or is listed
    in REAL_ONLY_ARRAY (and then rejects them: test_real_only_rules_reject_complex)."""
    covered = _complex_covered()
    missing = [getattr(k, "__name__", repr(k)) for k in arules.ARRAY_RULES
               if k not in REAL_ONLY_ARRAY and not _has(covered, k)]
    missing += [p for p in ("ArrayOf", "concatenate", "stack", "view") if not _has(covered, p)]
    assert not missing, f"array rules without a complex sample: {missing}"
    assert not [k for k in REAL_ONLY_ARRAY if _has(covered, k)]


@pytest.mark.parametrize("src", ["np.maximum(a0, a1)", "np.fmin(a0, a1)", "np.max(a0)",
                                 "np.min(a0, axis=0)"])
def test_real_only_rules_reject_complex(src):
    import zyg
    with pytest.raises((zyg.NoAdjoint, zyg.TypeMismatch, zyg.UnsupportedSyntax), match="complex"):
        check_expr(src, [C((3, 4)), C((3, 4))] if "a1" in src else [C((3, 4))], cache=False)
