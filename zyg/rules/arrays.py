"""Reverse rules of numpy functions on arrays (and of operators with array operands).

A rule is a function ``back(c, i)`` returning the source of the cotangent
contribution to operand ``i`` (or None when there is none), written in terms of
the context ``c``: ``c.x[k]`` the operands' values, ``c.y`` the result,
``c.dy`` the result's cotangent, ``c.kinds[k]`` their kinds, ``c.const(k)`` /
``c.kwconst(name)`` constant operands.  The emitter adds the contribution into the
operand's shadow (reducing over broadcast axes) or into its scalar cotangent
(summing).  Which values a rule reads is found by rendering it with placeholders,
so the tape records exactly those.

Elementwise derivatives come from the same table as the scalar rules
(``scalar.UNARY`` / ``scalar.BINARY``), with array-safe forms (``np.where``) where the
scalar form branches.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..ssa.analysis import array_ndim, is_array, is_complex
from .accumulate import ACC
from . import scalar
from .scalar import _subst
from .registry import nondifferentiable

_NOCONST = object()


class Ctx:
    def __init__(self, x: List[str], y: str, dy: str, kinds: List[str], consts: List[Any],
                 kwnames: List[str], kwx: Dict[str, str], kwkinds: Dict[str, str], kwconsts: Dict[str, Any]):
        self.x, self.y, self.dy, self.kinds, self.consts = x, y, dy, kinds, consts
        self.kwnames, self.kwx, self.kwkinds, self.kwconsts = kwnames, kwx, kwkinds, kwconsts

    def nd(self, k: int) -> int:
        return array_ndim(self.kinds[k]) if is_array(self.kinds[k]) else 0

    def const(self, k: int, default: Any = _NOCONST) -> Any:
        if k < len(self.consts):
            return self.consts[k]
        return default

    def kwconst(self, name: str, default: Any = None) -> Any:
        return self.kwconsts.get(name, default)

    @property
    def cplx(self) -> bool:
        """Is an operand complex?  Then the rules conjugate (docs/complex.md)."""
        return any(is_complex(k) for k in self.kinds)


class ARule:
    """``back(c, i)``; ``broadcast``: the contribution to an operand may be larger than
    the operand (elementwise ops broadcast), so accumulation must reduce."""

    def __init__(self, back: Callable[[Ctx, int], Optional[str]], broadcast: bool = False,
                 kw_ok: tuple = ()):
        self.back = back
        self.broadcast = broadcast
        self.kw_ok = kw_ok
        # fwd(c, i): the tangent from operand i's tangent ``c.dy``, for forward mode of
        # functions that are neither elementwise, linear nor reductions (rules/linalg.py)
        self.fwd: Optional[Callable[[Ctx, int], str]] = None


ARRAY_RULES: Dict[Any, ARule] = {}


# --- elementwise -------------------------------------------------------------------------
_UNARY_ARRAY = {
    "fabs": "_zyg_where(x >= 0, 1.0, -1.0)", "absolute": "_zyg_where(x >= 0, 1.0, -1.0)",
    "sinc": "_zyg_where(x != 0, (np.cos(np.pi * x) - y) / _zyg_where(x != 0, x, 1.0), 0.0)",
}
_TIE_MAX = ("_zyg_where(a > b, 1.0, _zyg_where(a == b, 0.5, 0.0))",
            "_zyg_where(b > a, 1.0, _zyg_where(a == b, 0.5, 0.0))")
_TIE_MIN = ("_zyg_where(a < b, 1.0, _zyg_where(a == b, 0.5, 0.0))",
            "_zyg_where(b < a, 1.0, _zyg_where(a == b, 0.5, 0.0))")
_POW = (scalar.POW_DA, "_zyg_where(a > 0, y * np.log(_zyg_where(a > 0, a, 1.0)), 0.0)")
_BINARY_ARRAY = {
    "power": _POW, "maximum": _TIE_MAX, "fmax": _TIE_MAX, "minimum": _TIE_MIN, "fmin": _TIE_MIN,
    "copysign": ("_zyg_where((a >= 0) == (b >= 0), 1.0, -1.0)", None),
    "fmod": ("1.0", "-np.trunc(a / b)"),
}


# complex operands: the same derivative, conjugated (dz += conj(f'(z)) * dy), for the
# holomorphic entries of the scalar table; abs has its own form; other rules raise
_ABS_COMPLEX = "_zyg_where(y != 0, x / _zyg_where(y != 0, y, 1.0), 0j)"
_POW_COMPLEX = (scalar.POW_DA, "_zyg_where(a != 0, y * np.log(_zyg_where(a != 0, a, 1.0) + 0j), 0j)")


def _no_complex(name: str) -> "_RuleError":
    return _RuleError(f"{name} has no complex rule in zyg (see docs/complex.md)")


def _times(dy: str, partial: str) -> str:
    """``dy * partial`` elementwise, exactly zero where ``dy`` is zero (even where the
    partial is inf or nan: a value that does not reach the output contributes nothing).
    One pass (a numba ufunc on cpu): ``np.where`` cost two more temporaries per operation."""
    return f"_zyg_mulnz({dy}, {partial})"


def _mulnz_kernel(dy, p):
    return dy * p if dy != 0 else 0.0        # exactly np.where(dy != 0, dy * p, 0.0)


def _mulnz_py(dy, p):
    """``mulnz(dy, p)``: ``dy * p``, exactly zero where ``dy`` is zero (the python target's
    form of the helper ``_zyg_mulnz`` that :func:`_times` emits)."""
    return np.where(dy != 0, dy * p, 0.0)


_MULNZ: Dict[str, Any] = {}


def mulnz_for(backend: Any) -> Any:
    """The object the name ``_zyg_mulnz`` holds in code generated for ``backend``: one per
    target for the whole process (a numba ufunc on cpu), so that every generated module
    refers to the same object and its fingerprint (the disk cache key) stays the same."""
    got = _MULNZ.get(backend.name)
    if got is None:
        got = _MULNZ.setdefault(backend.name, backend.vectorize(_mulnz_kernel, _mulnz_py))
    return got


def _mulnz2_kernel(t, p):
    return t * p if t != 0 and p != 0 else 0.0


def _mulnz2_py(t, p):
    """``mulnz2(t, p)``: ``t * p``, exactly zero where ``t`` or ``p`` is zero (the python
    target's form of ``_zyg_mulnz2``; the products it drops, 0 * inf, warn nothing)."""
    with np.errstate(invalid="ignore"):
        return np.where((t != 0) & (p != 0), t * p, 0.0)


_MULNZ2: Dict[str, Any] = {}


def mulnz2_for(backend: Any) -> Any:
    """``_zyg_mulnz2`` for ``backend``: a tangent times a partial derivative elementwise,
    zero where either is zero (forward mode's zero tests on arrays, ``Forward.zero_guards``),
    one object per target for the whole process."""
    got = _MULNZ2.get(backend.name)
    if got is None:
        got = _MULNZ2.setdefault(backend.name, backend.vectorize(_mulnz2_kernel, _mulnz2_py))
    return got


def is_mulnz(fn: Any) -> bool:
    """Is ``fn`` the helper ``_zyg_mulnz`` of some target (met when zyg differentiates the
    code it generated: ``zyg.hessian``, ``grad`` of ``grad``, ``jvp`` of a gradient)?"""
    return any(fn is h for h in _MULNZ.values()) or fn is _mulnz_py


def _mulnz_back(c: Ctx, i: int) -> str:
    """The reverse rule of ``y = mulnz(a, b)``: ``da = mulnz(dy, b)``, ``db = mulnz(dy, a)``
    (``b`` does not reach ``y`` where ``a`` is zero, and then ``dy * a`` is zero); zero
    wherever the cotangent ``dy`` is zero, as in every elementwise rule."""
    other = c.x[1 - i]
    return _times(c.dy, f"np.conj({other})" if c.cplx else other)


def _mulnz_fwd(c: Ctx, i: int) -> str:
    """The tangent ``mulnz(ta, b) + mulnz(a, tb)``, term ``i``: a zero ``a`` (a zero
    cotangent of the gradient being differentiated) makes the second term exactly zero
    even where the tangent of the partial ``b`` is inf or nan."""
    a, b = c.x
    return _times(c.dy, b) if i == 0 else _times(a, c.dy)


def _unary(deriv: str, cderiv: Optional[str] = None, name: str = "this function",
           conj: bool = True) -> ARule:
    """``cderiv``: the derivative for complex operands (conjugated unless ``conj`` is False:
    a real-valued function's gradient is written out directly), None if there is none."""
    def back(c: Ctx, i: int) -> str:
        if c.cplx:
            if cderiv is None:
                raise _no_complex(name)
            d = _subst(cderiv, {'x': c.x[0], 'y': c.y})
            return _times(c.dy, f"np.conj({d})" if conj else f"({d})")
        return _times(c.dy, f"({_subst(deriv, {'x': c.x[0], 'y': c.y})})")
    return ARule(back)


def _binary(da: Optional[str], db: Optional[str], cplx: Optional[tuple] = None,
            name: str = "this function") -> ARule:
    """``cplx``: (d/da, d/db) for complex operands (conjugated), None if there is none."""
    def back(c: Ctx, i: int) -> Optional[str]:
        d = (da, db)[i]
        if c.cplx:
            if cplx is None:
                raise _no_complex(name)
            d = cplx[i]
        if d is None:
            return None
        if d.strip() == "1.0":
            return c.dy
        if d.strip() == "-1.0":
            return f"-{c.dy}"
        text = _subst(d, {'a': c.x[0], 'b': c.x[1], 'y': c.y})
        return _times(c.dy, f"np.conj({text})" if c.cplx else f"({text})")
    return ARule(back, broadcast=True)


def _complex_unary(name: str) -> Optional[str]:
    if name not in scalar.HOLOMORPHIC:
        return None
    return scalar.with_module(scalar.COMPLEX_UNARY.get(name, scalar.UNARY[name]), "np")


for _name, _d in scalar.UNARY.items():
    if hasattr(np, _name):
        _cd = _ABS_COMPLEX if _name == "absolute" else _complex_unary(_name)
        ARRAY_RULES[getattr(np, _name)] = _unary(scalar.with_module(_UNARY_ARRAY.get(_name, _d), "np"), _cd,
                                                 f"np.{_name}", conj=_name != "absolute")
for _name, (_da, _db) in scalar.BINARY.items():
    if hasattr(np, _name):
        _da, _db = _BINARY_ARRAY.get(_name, (_da, _db))
        ARRAY_RULES[getattr(np, _name)] = _binary(
            scalar.with_module(_da, "np"), None if _db is None else scalar.with_module(_db, "np"),
            _POW_COMPLEX if _name == "power" else None, f"np.{_name}")

for _op, _ab, _c in [(operator.add, ("1.0", "1.0"), True), (np.add, ("1.0", "1.0"), True),
                     (operator.sub, ("1.0", "-1.0"), True), (np.subtract, ("1.0", "-1.0"), True),
                     (operator.mul, ("b", "a"), True), (np.multiply, ("b", "a"), True),
                     (operator.truediv, ("1.0 / b", "-y / b"), True),
                     (np.divide, ("1.0 / b", "-y / b"), True),
                     (operator.pow, _POW, _POW_COMPLEX), (operator.mod, ("1.0", "-np.floor(a / b)"), False)]:
    ARRAY_RULES[_op] = _binary(*_ab, cplx=(_c if isinstance(_c, tuple) else _ab) if _c else None,
                               name=getattr(_op, "__name__", "operator"))
ARRAY_RULES[operator.neg] = ARule(lambda c, i: f"-{c.dy}")
ARRAY_RULES[operator.pos] = ARule(lambda c, i: c.dy)
ARRAY_RULES[builtins.abs] = _unary("_zyg_where(x >= 0, 1.0, -1.0)", _ABS_COMPLEX, "abs", conj=False)
# complex parts: the cotangent of z is dL/dRe z + i dL/dIm z
ARRAY_RULES[np.conjugate] = ARule(lambda c, i: f"np.conj({c.dy})")
ARRAY_RULES[np.real] = ARule(lambda c, i: c.dy)
ARRAY_RULES[np.imag] = ARule(lambda c, i: f"1j * {c.dy}" if c.cplx else f"0.0 * {c.dy}")
ARRAY_RULES[np.angle] = ARule(lambda c, i: (f"{c.dy} * (1j * {c.x[0]} / (np.abs({c.x[0]}) ** 2))"
                                            if c.cplx else f"0.0 * {c.dy}"))
ARRAY_RULES[np.copy] = ARule(lambda c, i: c.dy)
ARRAY_RULES[np.ravel] = ARule(lambda c, i: f"np.reshape({c.dy}, {c.x[0]}.shape)")
# the helper of generated code (not in ARRAY_RULES: it is no numpy function users call,
# and the rule table in docs/subset.md lists those only); found by rule_for
_MULNZ_RULE = ARule(_mulnz_back, broadcast=True)
_MULNZ_RULE.fwd = _mulnz_fwd
# reduce_like(e, t) (the pure form of ``t += e`` summed over broadcast axes, in generated
# code differentiated again) is linear in e; t gives the shape only
_REDUCE_LIKE_RULE = ARule(lambda c, i: f"{c.dy} + np.zeros_like({c.x[0]})" if i == 0 else None)
# np.ascontiguousarray: the array rules emit it (the transposed operand of a matrix
# product), so nested derivatives meet it; a copy (not in ARRAY_RULES, which every entry
# of needs a sample in tests/test_array_rules.py: tests/test_mulnz.py checks it)
_COPY_RULE = ARule(lambda c, i: c.dy)


# --- reductions ----------------------------------------------------------------------------
def _axis(c: Ctx, pos: int = 1) -> Optional[int]:
    """The constant ``axis`` (positional ``pos`` or keyword), normalised; None for all axes."""
    ax = c.const(pos, None) if len(c.x) > pos else c.kwconst("axis", None)
    if ax is _NOCONST or (len(c.x) > pos and c.const(pos) is _NOCONST) or \
            ("axis" in c.kwnames and "axis" not in c.kwconsts):
        raise _RuleError("the axis must be a constant")
    if ax is None:
        return None
    ax = ax + c.nd(0) if ax < 0 else ax
    # axis 0 of a 1-D array is all of it: the result is a number, which numba cannot
    # np.expand_dims (sum(out) of a list is np.sum(out, axis=0), zyg/ssa/lists.py)
    return None if ax == 0 and c.nd(0) == 1 else ax


class _RuleError(Exception):
    pass


def _expand(c: Ctx, expr: str, ax: Optional[int]) -> str:
    return expr if ax is None else f"np.expand_dims({expr}, {ax})"


def _sum(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    return _expand(c, c.dy, _axis(c))


def _mean(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    ax = _axis(c)
    if ax is None:
        return f"{c.dy} / {c.x[0]}.size"
    return f"{_expand(c, c.dy, ax)} / {c.x[0]}.shape[{ax}]"


def _prod(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    ax = _axis(c)
    cj = "np.conj" if c.cplx else ""
    if ax is None:
        return f"{c.dy} * {cj}(_zyg_prod_grad({c.x[0]}))"
    if c.nd(0) != 2:
        raise _RuleError("np.prod with an axis is differentiable for 2-D arrays only")
    return f"{_expand(c, c.dy, ax)} * {cj}(_zyg_prod_grad_axis2({c.x[0]}, {ax}))"


def _maxmin(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    if c.cplx:
        raise _no_complex("np.max / np.min")
    ax = _axis(c)
    x, y = c.x[0], c.y
    if ax is None:
        return f"{c.dy} * (({x} == {y}) / np.sum({x} == {y}))"
    ye = f"np.expand_dims({y}, {ax})"
    return (f"np.expand_dims({c.dy}, {ax}) * (({x} == {ye}) / "
            f"np.expand_dims(np.sum({x} == {ye}, axis={ax}), {ax}))")


for _f in (np.sum,):
    ARRAY_RULES[_f] = ARule(_sum, kw_ok=("axis",))
ARRAY_RULES[np.mean] = ARule(_mean, kw_ok=("axis",))
ARRAY_RULES[np.prod] = ARule(_prod, kw_ok=("axis",))
ARRAY_RULES[np.max] = ARule(_maxmin, kw_ok=("axis",))
ARRAY_RULES[np.min] = ARule(_maxmin, kw_ok=("axis",))
ARRAY_RULES[np.amax] = ARRAY_RULES[np.max]
ARRAY_RULES[np.amin] = ARRAY_RULES[np.min]


def _cumsum(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    ax = _axis(c)
    if ax is None:
        rev = f"np.cumsum(np.ravel({c.dy})[::-1])[::-1]"
        return rev if c.nd(0) == 1 else f"np.reshape({rev}.copy(), {c.x[0]}.shape)"
    if c.nd(0) == 1:
        return f"np.cumsum({c.dy}[::-1])[::-1]"
    if c.nd(0) == 2:
        sl = "[::-1, :]" if ax == 0 else "[:, ::-1]"
        return f"_zyg_cumsum_axis({c.dy}{sl}, {ax}){sl}"
    raise _RuleError("np.cumsum with an axis is differentiable for 1-D and 2-D arrays")


ARRAY_RULES[np.cumsum] = ARule(_cumsum, kw_ok=("axis",))


# --- linear algebra ------------------------------------------------------------------------
def _conj_operands(c: Ctx) -> Tuple[str, str]:
    """The operands as the pullback of a bilinear product reads them: conjugated when complex."""
    if c.cplx:
        return f"np.conj({c.x[0]})", f"np.conj({c.x[1]})"
    return c.x[0], c.x[1]


def outer_of(u: str, v: str) -> str:
    """Text of ``np.outer(u, v)`` for 1-D ``u`` and ``v``: a broadcast product (numba's
    np.outer adds ~1 s to a first call's compile; the product shares the array-expression
    code the gradient compiles anyway)."""
    return f"(np.expand_dims({u}, 1) * ({v}))"


def _dot(c: Ctx, i: int) -> Optional[str]:
    # ``a.T @ dy`` with no copy: the transpose of a C array is an F array, which numba
    # hands to BLAS as it is (a copy of the transpose cost 5x the product itself for a
    # 128 x 784 matrix); numba copies only 'A'-layout operands, and the performance
    # warning it gives then is silenced for generated code (zyg/compile.py)
    na, nb = c.nd(0), c.nd(1)
    (a, b), dy = _conj_operands(c), c.dy
    if na == 0 or nb == 0:        # a scalar factor: elementwise product
        return f"{dy} * {b}" if i == 0 else f"{dy} * {a}"
    if (na, nb) == (1, 1):
        return f"{dy} * {b}" if i == 0 else f"{dy} * {a}"
    if (na, nb) == (2, 1):
        return outer_of(dy, b) if i == 0 else f"{a}.T @ {dy}"
    if (na, nb) == (1, 2):
        return f"{b} @ {dy}" if i == 0 else outer_of(a, dy)
    if (na, nb) == (2, 2):
        return f"{dy} @ {b}.T" if i == 0 else f"{a}.T @ {dy}"
    raise _RuleError("np.dot / @ are differentiable for 1-D and 2-D operands")


ARRAY_RULES[np.dot] = ARule(_dot)
ARRAY_RULES[operator.matmul] = ARule(_dot)
ARRAY_RULES[np.matmul] = ARule(_dot)
def _outer(c: Ctx, i: int) -> str:
    # np.outer flattens its operands
    (a, b), dy = _conj_operands(c), c.dy
    if i == 0:
        g = f"{dy} @ np.ravel({b})"
        return g if c.nd(0) == 1 else f"np.reshape({g}, {c.x[0]}.shape)"
    g = f"np.ravel({a}) @ {dy}"
    return g if c.nd(1) == 1 else f"np.reshape({g}, {c.x[1]}.shape)"


ARRAY_RULES[np.outer] = ARule(_outer)


def _inner(c: Ctx, i: int) -> Optional[str]:
    """np.inner contracts the last axes of both operands."""
    na, nb = c.nd(0), c.nd(1)
    (a, b), dy = _conj_operands(c), c.dy
    if (na, nb) in ((1, 1), (2, 1)) or na == 0 or nb == 0:
        return _dot(c, i)
    if (na, nb) == (1, 2):            # y = b @ a
        return f"{dy} @ {b}" if i == 0 else outer_of(dy, a)
    if (na, nb) == (2, 2):            # y = a @ b.T
        return f"{dy} @ {b}" if i == 0 else f"{dy}.T @ {a}"
    raise _RuleError("np.inner is differentiable for 1-D and 2-D operands")


ARRAY_RULES[np.inner] = ARule(_inner)


def _norm(c: Ctx, i: int) -> Optional[str]:
    if len(c.x) > 1 or c.kwnames:
        raise _RuleError("np.linalg.norm is differentiable as the 2-norm (no ord/axis)")
    return f"{c.dy} * {c.x[0]} / {c.y}"


ARRAY_RULES[np.linalg.norm] = ARule(_norm)


# --- selection -----------------------------------------------------------------------------
def _where(c: Ctx, i: int) -> Optional[str]:
    if i == 0:
        return None
    if i == 1:
        return f"_zyg_where({c.x[0]}, {c.dy}, 0.0)"
    return f"_zyg_where({c.x[0]}, 0.0, {c.dy})"


ARRAY_RULES[np.where] = ARule(_where, broadcast=True)


def _clip(c: Ctx, i: int) -> Optional[str]:
    """np.clip with scalar or array bounds, either of them None (no bound); exactly the
    derivative of numpy's definition minimum(maximum(x, lo), hi), also where lo > hi.
    On a bound (x == lo or x == hi) the cotangent goes to x."""
    if c.cplx:
        raise _no_complex("np.clip")
    if c.kwnames:
        raise _RuleError("pass the bounds of np.clip by position: np.clip(x, lo, hi)")
    if len(c.x) != 3:
        raise _RuleError(f"np.clip takes 3 arguments (x, lo, hi); this call passes {len(c.x)}")
    x, dy = c.x[0], c.dy
    lo = None if c.const(1, _NOCONST) is None else c.x[1]
    hi = None if c.const(2, _NOCONST) is None else c.x[2]
    m = x if lo is None else f"np.maximum({x}, {lo})"
    conds = {0: ([f"({x} >= {lo})"] if lo is not None else []) + ([f"({m} <= {hi})"] if hi is not None else []),
             1: [f"({x} < {lo})"] + ([f"({m} <= {hi})"] if hi is not None else []),
             2: [f"({m} > {hi})"]}
    if (i == 1 and lo is None) or (i == 2 and hi is None):
        return None
    cond = " & ".join(conds[i])
    if not cond:
        return f"{dy} + 0.0 * {x}"
    return f"_zyg_where({cond}, {dy}, 0.0 * {dy})"


ARRAY_RULES[np.clip] = ARule(_clip, broadcast=True)


# --- creation ------------------------------------------------------------------------------
def _full(c: Ctx, i: int) -> Optional[str]:
    return c.dy if i == 1 else None


def _full_fwd(c: Ctx, i: int) -> str:
    # the tangent of the fill value fills the tangent (the shape, or the template of
    # np.full_like, carries none)
    return f"np.full_like({c.y}, {c.dy})" if i == 1 else f"np.zeros_like({c.y})"


ARRAY_RULES[np.full] = ARule(_full)
ARRAY_RULES[np.full_like] = ARule(_full)
ARRAY_RULES[np.full].fwd = ARRAY_RULES[np.full_like].fwd = _full_fwd


def _linspace(c: Ctx, i: int) -> Optional[str]:
    t = f"np.linspace(0.0, 1.0, {c.y}.size)"
    if i == 0:
        return f"{c.dy} * (1.0 - {t})"
    if i == 1:
        return f"{c.dy} * {t}"
    return None


ARRAY_RULES[np.linspace] = ARule(_linspace)


def _array_of(c: Ctx, i: int) -> str:
    return f"{c.dy}[{i}]"


def _stacked(fn) -> ARule:
    def back(c: Ctx, i: int) -> str:
        ax = c.kwconst("axis", 0)
        if "axis" in c.kwnames and "axis" not in c.kwconsts:
            raise _RuleError("the axis must be a constant")
        nd = c.nd(0)
        if fn is np.stack:
            ax = ax + nd + 1 if ax < 0 else ax
            return f"{c.dy}[{':, ' * ax}{i}]"
        ax = ax + nd if ax < 0 else ax
        off = " + ".join(f"{c.x[k]}.shape[{ax}]" for k in range(i)) or "0"
        return f"{c.dy}[{':, ' * ax}{off}:{off} + {c.x[i]}.shape[{ax}]]"
    return ARule(back, kw_ok=("axis",))


NONDIFF_ARRAY = [np.zeros, np.ones, np.empty, np.zeros_like, np.ones_like, np.empty_like,
                 np.arange, np.shape, np.size, np.ndim, np.argsort, np.sign, np.isclose,
                 np.searchsorted, np.eye, np.identity]
for _f in NONDIFF_ARRAY:
    nondifferentiable(_f)


# --- helpers called by generated code (numba-compiled for the cpu target) -------------------
def prod_grad(x):
    """d prod(x) / dx, exact with zeros (prefix and suffix products)."""
    flat = np.ravel(x)
    n = flat.size
    g = np.empty(n, flat.dtype)
    one = np.ones(1, flat.dtype)[0]
    acc = one
    for k in range(n):
        g[k] = acc
        acc = acc * flat[k]
    acc = one
    for k in range(n - 1, -1, -1):
        g[k] = g[k] * acc
        acc = acc * flat[k]
    return np.reshape(g, x.shape)


def prod_grad_axis2(x, axis):
    g = np.empty(x.shape, x.dtype)
    if axis == 0:
        for j in range(x.shape[1]):
            g[:, j] = prod_grad(np.ascontiguousarray(x[:, j]))
    else:
        for i in range(x.shape[0]):
            g[i, :] = prod_grad(np.ascontiguousarray(x[i, :]))
    return g


# numba implements np.max/np.min/np.mean/np.prod/np.cumsum without an axis only:
# the generated code calls these (2-D, constant axis) on both targets
def max_axis(a, axis):
    if axis == 0:
        out = np.empty(a.shape[1], a.dtype)
        for j in range(a.shape[1]):
            out[j] = np.max(a[:, j])
    else:
        out = np.empty(a.shape[0], a.dtype)
        for i in range(a.shape[0]):
            out[i] = np.max(a[i, :])
    return out


def min_axis(a, axis):
    if axis == 0:
        out = np.empty(a.shape[1], a.dtype)
        for j in range(a.shape[1]):
            out[j] = np.min(a[:, j])
    else:
        out = np.empty(a.shape[0], a.dtype)
        for i in range(a.shape[0]):
            out[i] = np.min(a[i, :])
    return out


def prod_axis(a, axis):
    if axis == 0:
        out = np.empty(a.shape[1], a.dtype)
        for j in range(a.shape[1]):
            out[j] = np.prod(a[:, j])
    else:
        out = np.empty(a.shape[0], a.dtype)
        for i in range(a.shape[0]):
            out[i] = np.prod(a[i, :])
    return out


def extreme_axis3(a, axis, largest):
    """np.max (``largest``) or np.min of a 3-D array over one axis."""
    n0, n1, n2 = a.shape
    if axis == 0:
        out = np.empty((n1, n2), a.dtype)
        for j in range(n1):
            for k in range(n2):
                out[j, k] = np.max(a[:, j, k]) if largest else np.min(a[:, j, k])
    elif axis == 1:
        out = np.empty((n0, n2), a.dtype)
        for i in range(n0):
            for k in range(n2):
                out[i, k] = np.max(a[i, :, k]) if largest else np.min(a[i, :, k])
    else:
        out = np.empty((n0, n1), a.dtype)
        for i in range(n0):
            for j in range(n1):
                out[i, j] = np.max(a[i, j, :]) if largest else np.min(a[i, j, :])
    return out


def cumsum_axis(a, axis):
    out = np.empty(a.shape, a.dtype)
    if axis == 0:
        for j in range(a.shape[1]):
            out[:, j] = np.cumsum(a[:, j])
    else:
        for i in range(a.shape[0]):
            out[i, :] = np.cumsum(a[i, :])
    return out


AXIS_HELPERS = {np.max: "_zyg_max_axis", np.amax: "_zyg_max_axis", np.min: "_zyg_min_axis",
                np.amin: "_zyg_min_axis", np.prod: "_zyg_prod_axis", np.cumsum: "_zyg_cumsum_axis"}


_AXIS_FNS = (np.sum, np.mean, np.max, np.min, np.amax, np.amin, np.prod, np.cumsum)


def base_primal_call(fn: Any, args: List[str], kinds: List[str], kwargs: Dict[str, Any]) -> Optional[str]:
    """Source of ``fn(*args, **kwargs)`` for the functions of this module where numba needs
    another spelling; else None (:func:`zyg.rules.dispatch.primal_call` asks the other rule
    modules first)."""
    ax = None
    if "axis" in kwargs:
        ax = kwargs["axis"][1]
    if is_mulnz(fn) and len(args) == 2 and not kwargs:
        # by name: the target's own helper (the python form appears in the gradient source
        # that zyg.hessian and nested grads differentiate, whatever their target)
        return f"_zyg_mulnz({args[0]}, {args[1]})"
    if fn is builtins.abs and kinds and is_array(kinds[0]):
        return f"np.abs({args[0]})"
    if fn in (np.dot, np.matmul, np.inner) and len(args) == 2 and not kwargs:
        na = array_ndim(kinds[0]) if is_array(kinds[0]) else 0
        nb = array_ndim(kinds[1]) if is_array(kinds[1]) else 0
        a, b = args
        if na == 0 or nb == 0:          # numba's np.dot takes no scalars
            return f"({a} * {b})"
        if fn is np.inner and (na, nb) == (1, 2):
            return f"({b} @ {a})"
        if fn is np.inner and (na, nb) == (2, 2):
            return f"({a} @ {b}.T)"
        return f"({a} @ {b})"           # numba cannot type np.matmul itself
    if ax is None or ax is _NOCONST:
        return None
    nd = array_ndim(kinds[0]) if kinds and is_array(kinds[0]) else 0
    if ax < 0:
        ax += nd
    if fn is np.mean:
        return f"np.sum({args[0]}, axis={ax}) / {args[0]}.shape[{ax}]"
    if nd == 1 and ax == 0 and fn in (np.cumsum, np.max, np.min, np.amax, np.amin, np.prod, np.sum):
        return f"np.{fn.__name__}({args[0]})"
    if nd == 3 and fn in (np.max, np.amax, np.min, np.amin):
        return f"_zyg_extreme_axis3({args[0]}, {ax}, {fn in (np.max, np.amax)})"
    if fn in AXIS_HELPERS:
        if nd != 2:
            raise _RuleError(f"np.{fn.__name__} with an axis is supported on 2-D arrays")
        return f"{AXIS_HELPERS[fn]}({args[0]}, {ax})"
    return None


def acc_scalar_target(e):
    return np.sum(e)


_HELPERS: Dict[Any, Dict[str, Any]] = {}


def base_helpers(backend: Any) -> Dict[str, Any]:
    """Name -> helper object of this module for generated code on ``backend`` (compiled
    where it compiles); :func:`zyg.rules.dispatch.helpers` adds those of the other rule
    modules."""
    key = backend.key()
    if key in _HELPERS:
        return _HELPERS[key]
    out: Dict[str, Any] = {
        "_zyg_prod_grad": prod_grad, "_zyg_prod_grad_axis2": prod_grad_axis2,
        "_zyg_max_axis": max_axis, "_zyg_min_axis": min_axis, "_zyg_prod_axis": prod_axis,
        "_zyg_cumsum_axis": cumsum_axis, "_zyg_extreme_axis3": extreme_axis3,
    }
    for (nt, ne), acc in ACC.items():
        acc._zyg_accumulate = True     # lowered as t += reduce_like(e, t) (higher order)
        out[f"_zyg_acc_{nt}_{ne}"] = acc
    if backend.compiled:
        njit = backend.jit
        jit = {}
        pg = njit(prod_grad)
        jit["_zyg_prod_grad"] = pg
        g2 = {"np": np, "prod_grad": pg}
        exec(compile(_src_of(prod_grad_axis2), "<zyg-array-helpers>", "exec"), g2)
        jit["_zyg_prod_grad_axis2"] = njit(g2["prod_grad_axis2"])
        for k, v in out.items():
            if k not in jit:
                jit[k] = njit(v)
        out = jit
    out["_zyg_mulnz"] = mulnz_for(backend)
    out["_zyg_where"] = backend.where()      # np.where, compiled the target's way
    _HELPERS[key] = out
    return out


def _src_of(fn) -> str:
    import inspect
    import textwrap
    return textwrap.dedent(inspect.getsource(fn))
