"""Reverse rules of numpy statistics, sorting, interpolation and shape functions.

The companion of :mod:`zyg.rules.arrays` (same ``ARule`` / ``Ctx`` protocol): ``np.var``,
``np.std``, the ``nan*`` reductions, ``keepdims=`` on every reduction, ``np.cumprod``,
``np.diff``, ``np.median`` / ``np.percentile`` / ``np.quantile``, ``np.average``,
``np.sort``, ``np.interp``, ``np.maximum.accumulate``, ``np.roll``, ``np.flip``,
``np.tile``, ``np.repeat``, ``np.convolve`` (mode 'full', 'same', 'valid'), ``np.atleast_*d``, ``np.hstack`` / ``np.vstack`` /
``np.column_stack``, ``np.asarray`` / ``np.array`` of an array and ``astype``.

numba implements many of these without ``axis=``, ``ddof=`` or ``keepdims=``, so
:func:`primal_call` spells the primal with expressions numba compiles (or with the
helpers at the end of this module, numba-compiled for target ``"cpu"``), the same
spelling on both targets.  Every rule is checked against finite differences by
``tests/test_numpy_functions.py`` (``test_every_extra_rule_has_a_sample``).

Ties (points where these functions are not differentiable): ``np.sort``, ``np.median``
and ``np.percentile`` send the cotangent of a sorted position to the element a stable
sort puts there (the first of equal elements comes first); ``np.maximum.accumulate``
to the first element that attains the running maximum; ``np.nanmax`` / ``np.nanmin``,
like ``np.max``, split it evenly between equal maxima; ``np.interp`` at a knot uses
the slope of the segment to its right.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..ssa import hooks
from .arrays import _NOCONST, ARRAY_RULES, ARule, Ctx, _maxmin, _RuleError

EXTRA_RULES: Dict[Any, ARule] = {}

# parameters after the leading operands, by position: call_parts moves them to keywords
# (with their constant values) so that primal_call sees np.var(x, 0) as np.var(x, axis=0)
SIGS: Dict[Any, Tuple[int, Tuple[str, ...]]] = {
    np.var: (1, ("axis", "dtype", "out", "ddof")), np.std: (1, ("axis", "dtype", "out", "ddof")),
    np.nanvar: (1, ("axis", "dtype", "out", "ddof")), np.nanstd: (1, ("axis", "dtype", "out", "ddof")),
    np.nansum: (1, ("axis",)), np.nanmean: (1, ("axis",)), np.nanmax: (1, ("axis",)),
    np.nanmin: (1, ("axis",)), np.cumprod: (1, ("axis",)), np.diff: (1, ("n", "axis")),
    np.median: (1, ("axis",)), np.percentile: (2, ("axis",)), np.quantile: (2, ("axis",)),
    np.average: (1, ("axis", "weights")), np.sort: (1, ("axis",)), np.roll: (2, ("axis",)),
    np.flip: (1, ("axis",)), np.repeat: (2, ("axis",)), np.convolve: (2, ("mode",)),
}

# reductions that take keepdims= (those of arrays.py too)
KEEPDIMS = (np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.var, np.std, np.nansum,
            np.nanmean, np.nanvar, np.nanstd, np.nanmax, np.nanmin, np.median, np.percentile,
            np.quantile)


def _param(c: Ctx, pos: int, name: str, default: Any = None) -> Any:
    """The constant parameter at position ``pos`` or keyword ``name``; raises when it is
    not a constant."""
    if len(c.x) > pos:
        v = c.const(pos)
    elif name in c.kwnames:
        v = c.kwconsts.get(name, _NOCONST)
    else:
        return default
    if v is _NOCONST:
        raise _RuleError(f"the argument {name}= must be a constant")
    return v


def _norm_axis(ax: Any, nd: int, fname: str) -> Optional[int]:
    if ax is None:
        return None
    if not isinstance(ax, (int, np.integer)):
        raise _RuleError(f"{fname}: axis must be one integer (write the reductions one axis at a time)")
    ax = int(ax)
    if not -nd <= ax < nd:
        raise _RuleError(f"{fname}: axis {ax} is out of range for a {nd}-D array")
    return ax + nd if ax < 0 else ax


def _red_axis(c: Ctx, fname: str, pos: int = 1) -> Optional[int]:
    """The reduction axis, None for all (a 1-D array reduced along 0 is reduced entirely)."""
    nd = c.nd(0)
    ax = _norm_axis(_param(c, pos, "axis"), nd, fname)
    return None if nd == 1 else ax


def _real_only(c: Ctx, fname: str) -> None:
    if c.cplx:
        raise _RuleError(f"{fname} has no complex rule in zyg (see docs/complex.md)")


def _E(s: str, ax: Optional[int]) -> str:
    return s if ax is None else f"np.expand_dims({s}, {ax})"


def _S(s: str, ax: Optional[int]) -> str:
    return f"np.sum({s})" if ax is None else f"np.sum({s}, axis={ax})"


def _n(x: str, ax: Optional[int]) -> str:
    return f"{x}.size" if ax is None else f"{x}.shape[{ax}]"


# --- keepdims= --------------------------------------------------------------------------------
def _squeeze(s: str, ax: Optional[int], nd: int) -> str:
    """``s`` (a keepdims result or its cotangent) without the kept axis (a number for all axes)."""
    if ax is None:
        return f"{s}[{', '.join(['0'] * nd)}]"
    return f"{s}[{':, ' * ax}0]"


def _keepdims_ax(c: Ctx, fn: Any) -> Tuple[bool, Optional[int]]:
    kd = c.kwconst("keepdims", False) if "keepdims" in c.kwnames else False
    if "keepdims" in c.kwnames and "keepdims" not in c.kwconsts:
        raise _RuleError("keepdims= must be a constant")
    if not kd:
        return False, None
    pos = 2 if fn in (np.percentile, np.quantile) else 1
    ax = _norm_axis(_param(c, pos, "axis"), c.nd(0), "keepdims")
    return True, (None if c.nd(0) == 1 else ax)


def with_keepdims(fn: Any, base: ARule) -> ARule:
    """``base``, also for ``keepdims=True``: the result's cotangent and value are read
    without the kept axis, as the base rule expects."""
    def back(c: Ctx, i: int) -> Optional[str]:
        rule = EXTRA_RULES.get(fn) or ARRAY_RULES[fn]
        kd, ax = _keepdims_ax(c, fn)
        if kd:
            nd = c.nd(0)
            c = Ctx(c.x, _squeeze(c.y, ax, nd), _squeeze(c.dy, ax, nd), c.kinds, c.consts,
                    [k for k in c.kwnames if k != "keepdims"], c.kwx, c.kwkinds, c.kwconsts)
        return rule.back(c, i)
    return ARule(back, base.broadcast, tuple(base.kw_ok) + ("keepdims",))


# --- variance and standard deviation -----------------------------------------------------------
def _moments(c: Ctx, fname: str, nan: bool):
    """(axis, the mean expression (reduced), the centred x (masked for nan*), the divisor)."""
    _real_only(c, fname)
    ax = _red_axis(c, fname)
    ddof = _param(c, 4, "ddof", 0)
    x = c.x[0]
    if nan:
        mask = f"_zyg_where(np.isnan({x}), 0.0, 1.0)"
        cnt = _S(mask, ax)
        mean = f"({_S(f'_zyg_where(np.isnan({x}), 0.0, {x})', ax)} / {cnt})"
        cen = f"({mask} * (_zyg_where(np.isnan({x}), 0.0, {x}) - {_E(mean, ax)}))"
        div = f"({cnt} - {ddof})"
    else:
        mean = f"({_S(x, ax)} / {_n(x, ax)})"
        cen = f"({x} - {_E(mean, ax)})"
        div = f"({_n(x, ax)} - {ddof})"
    return ax, mean, cen, div


def _var_rule(nan: bool, std: bool, fname: str) -> ARule:
    def back(c: Ctx, i: int) -> Optional[str]:
        if i != 0:
            return None
        ax, _, cen, div = _moments(c, fname, nan)
        if not std:
            return f"{_E(f'({c.dy} / {div})', ax)} * 2.0 * {cen}"
        # d std = d var / (2 std); where std is 0 every centred value is 0 too
        if ax is None:
            ys = f"({c.y} if {c.y} != 0 else 1.0)"
        else:
            ys = f"_zyg_where({c.y} != 0, {c.y}, 1.0)"
        return f"{_E(f'({c.dy} / ({div} * {ys}))', ax)} * {cen}"
    return ARule(back, kw_ok=("axis", "ddof"))


def _var_primal(fn: Any, x: str, nd: int, kw: Dict[str, Any]) -> str:
    nan = fn in (np.nanvar, np.nanstd)
    ax = _norm_axis(kw.get("axis"), nd, fn.__name__)
    ax = None if nd == 1 else ax
    ddof = kw.get("ddof", 0)
    if nan:
        mask = f"_zyg_where(np.isnan({x}), 0.0, 1.0)"
        xz = f"_zyg_where(np.isnan({x}), 0.0, {x})"
        cnt = _S(mask, ax)
        mean = f"({_S(xz, ax)} / {cnt})"
        var = f"({_S(f'({mask} * ({xz} - {_E(mean, ax)})) ** 2', ax)} / ({cnt} - {ddof}))"
    else:
        mean = f"({_S(x, ax)} / {_n(x, ax)})"
        var = f"({_S(f'({x} - {_E(mean, ax)}) ** 2', ax)} / ({_n(x, ax)} - {ddof}))"
    return f"np.sqrt({var})" if fn in (np.std, np.nanstd) else var


for _f, _nan, _std in [(np.var, False, False), (np.std, False, True), (np.nanvar, True, False),
                       (np.nanstd, True, True)]:
    EXTRA_RULES[_f] = _var_rule(_nan, _std, f"np.{_f.__name__}")


# --- nan reductions ------------------------------------------------------------------------------
def _nansum(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real_only(c, "np.nansum")
    ax = _red_axis(c, "np.nansum")
    return f"_zyg_where(np.isnan({c.x[0]}), 0.0, 1.0) * {_E(c.dy, ax)}"


def _nanmean(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real_only(c, "np.nanmean")
    ax = _red_axis(c, "np.nanmean")
    mask = f"_zyg_where(np.isnan({c.x[0]}), 0.0, 1.0)"
    return f"{mask} * {_E(f'({c.dy} / {_S(mask, ax)})', ax)}"


def _nanmaxmin(c: Ctx, i: int) -> Optional[str]:
    # nan == y is False: the nan elements get nothing, ties share as in np.max
    if i == 0:
        _red_axis(c, "np.nanmax / np.nanmin")
    return _maxmin(c, i)


EXTRA_RULES[np.nansum] = ARule(_nansum, kw_ok=("axis",))
EXTRA_RULES[np.nanmean] = ARule(_nanmean, kw_ok=("axis",))
EXTRA_RULES[np.nanmax] = ARule(_nanmaxmin, kw_ok=("axis",))
EXTRA_RULES[np.nanmin] = ARule(_nanmaxmin, kw_ok=("axis",))


# --- cumulative products and differences -------------------------------------------------------
def _cumprod(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real_only(c, "np.cumprod")
    nd = c.nd(0)
    ax = _norm_axis(_param(c, 1, "axis"), nd, "np.cumprod")
    x, dy = c.x[0], c.dy
    if ax is None or nd == 1:
        g = f"_zyg_cumprod_grad(np.ravel({x}), np.ravel({dy}))"
        return g if nd == 1 else f"np.reshape({g}, {x}.shape)"
    if nd != 2:
        raise _RuleError("np.cumprod with an axis is differentiable for 1-D and 2-D arrays")
    return f"_zyg_cumprod_grad_axis({x}, {dy}, {ax})"


EXTRA_RULES[np.cumprod] = ARule(_cumprod, kw_ok=("axis",))


def _diff_params(nd: int, kw: Dict[str, Any]) -> Tuple[int, int]:
    n = kw.get("n", 1)
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise _RuleError("np.diff: n= must be a constant non-negative integer")
    ax = _norm_axis(kw.get("axis", -1), nd, "np.diff")
    if nd > 2:
        raise _RuleError("np.diff is differentiable for 1-D and 2-D arrays")
    return int(n), ax


def _diff(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real_only(c, "np.diff")
    nd = c.nd(0)
    n, ax = _diff_params(nd, {"n": _param(c, 1, "n", 1), "axis": _param(c, 2, "axis", -1)})
    g = c.dy
    last = ax == nd - 1
    if not last:
        g = f"np.ascontiguousarray({g}.T)"
    for _ in range(n):
        g = f"_zyg_diff_adj{nd}({g})"
    return g if last else f"{g}.T"


EXTRA_RULES[np.diff] = ARule(_diff, kw_ok=("n", "axis"))


# --- order statistics: median, percentile, quantile ----------------------------------------------
def _q_scale(fn: Any) -> float:
    return 100.0 if fn is np.percentile else 1.0


def _order_rule(fn: Any) -> ARule:
    fname = f"np.{fn.__name__}"

    def back(c: Ctx, i: int) -> Optional[str]:
        _real_only(c, fname)
        nd = c.nd(0)
        pos = 1 if fn is np.median else 2
        ax = _norm_axis(_param(c, pos, "axis"), nd, fname)
        ax = None if nd == 1 else ax
        if ax is not None and nd != 2:
            raise _RuleError(f"{fname} with an axis is differentiable for 2-D arrays")
        if fn is np.median:
            q = "0.5"
        else:
            if c.nd(1) != 0:
                raise _RuleError(f"{fname} is differentiable for one (scalar) q; call it once per q")
            q = f"({c.x[1]} / {_q_scale(fn)})"
        x, dy = c.x[0], c.dy
        if i == 0:
            if ax is None:
                g = f"_zyg_quantile_grad(np.ravel({x}), {q}, {dy})"
                return g if nd == 1 else f"np.reshape({g}, {x}.shape)"
            return f"_zyg_quantile_grad_axis({x}, {q}, {dy}, {ax})"
        if i == 1 and fn is not np.median:
            if ax is None:
                return f"{dy} * _zyg_quantile_dq(np.ravel({x}), {q}) / {_q_scale(fn)}"
            return f"np.sum({dy} * _zyg_quantile_dq_axis({x}, {q}, {ax})) / {_q_scale(fn)}"
        return None
    return ARule(back, kw_ok=("axis",))


for _f in (np.median, np.percentile, np.quantile):
    EXTRA_RULES[_f] = _order_rule(_f)


def _order_primal(fn: Any, args: List[str], nd: int, kw: Dict[str, Any]) -> str:
    ax = _norm_axis(kw.get("axis"), nd, f"np.{fn.__name__}")
    ax = None if nd == 1 else ax
    x = args[0]
    q = "0.5" if fn is np.median else f"({args[1]} / {_q_scale(fn)})"
    if ax is None:
        return f"_zyg_quantile(np.ravel({x}), {q})"
    if nd != 2:
        raise _RuleError(f"np.{fn.__name__} with an axis is supported on 2-D arrays")
    return f"_zyg_quantile_axis({x}, {q}, {ax})"


# --- weighted average -------------------------------------------------------------------------
def _average_parts(nd: int, nw: Optional[int], ax: Any) -> Tuple[Optional[int], str]:
    """(axis, how the weights broadcast against a: '' same shape, 'row'/'col' 1-D along an axis)."""
    ax = _norm_axis(ax, nd, "np.average")
    if nw is None or nw == nd:
        return (None if nd == 1 else ax), ""
    if nw == 1 and ax is not None and nd in (1, 2):
        return (None if nd == 1 else ax), ("col" if ax == 0 and nd == 2 else "")
    raise _RuleError("np.average: weights must have the shape of a, or be 1-D along the axis")


def _wb(w: str, how: str) -> str:
    return f"np.expand_dims({w}, 1)" if how == "col" else w


def _average(c: Ctx, i: int) -> Optional[str]:
    _real_only(c, "np.average")
    nd = c.nd(0)
    has_w = len(c.x) > 2 and c.const(2, _NOCONST) is not None
    nw = c.nd(2) if has_w else None
    ax, how = _average_parts(nd, nw, _param(c, 1, "axis"))
    x, y, dy = c.x[0], c.y, c.dy
    if not has_w:
        return f"{_E(f'({dy} / {_n(x, ax)})', ax)}" if i == 0 else None
    w = _wb(c.x[2], how)
    # 1-D weights along the axis of a matrix: their sum is the divisor of every slice
    sw = "np.sum(" + c.x[2] + ")" if nw != nd else _S(w, ax)
    share = _E(f"({dy} / {sw})", ax)
    if i == 0:
        return f"{share} * {w}"
    if i == 2:
        g = f"{share} * ({x} - {_E(y, ax)})"
        if nw != nd:          # reduce over the axis the weights broadcast along
            return f"np.sum({g}, axis={1 - ax})"
        return g
    return None


EXTRA_RULES[np.average] = ARule(_average)


def _average_primal(args: List[str], kinds_nd: List[int], kw: Dict[str, Any]) -> str:
    x, nd = args[0], kinds_nd[0]
    w = kw.get("weights_src")
    if w is None:
        ax = _norm_axis(kw.get("axis"), nd, "np.average")
        ax = None if nd == 1 else ax
        return f"({_S(x, ax)} / {_n(x, ax)})"
    ax, how = _average_parts(nd, kinds_nd[1], kw.get("axis"))
    wb = _wb(w, how)
    sw = f"np.sum({w})" if kinds_nd[1] != nd else _S(wb, ax)
    return f"({_S(f'{x} * {wb}', ax)} / {sw})"


# --- sorting and interpolation ---------------------------------------------------------------
def _sort_axis(nd: int, ax: Any) -> Optional[int]:
    if ax is None:
        return None
    ax = _norm_axis(ax, nd, "np.sort")
    if nd > 2:
        raise _RuleError("np.sort with an axis is differentiable for 1-D and 2-D arrays")
    return ax


def _sort(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real_only(c, "np.sort")
    nd = c.nd(0)
    ax = _sort_axis(nd, _param(c, 1, "axis", -1))
    x, dy = c.x[0], c.dy
    if ax is None:
        g = f"_zyg_unsort1(np.ravel({x}), {dy})"
        return g if nd == 1 else f"np.reshape({g}, {x}.shape)"
    if nd == 1:
        return f"_zyg_unsort1({x}, {dy})"
    if ax == 1:
        return f"_zyg_unsort2({x}, {dy})"
    return f"_zyg_unsort2(np.ascontiguousarray({x}.T), np.ascontiguousarray({dy}.T)).T"


EXTRA_RULES[np.sort] = ARule(_sort, kw_ok=("axis", "kind"))   # every kind sorts alike


def _sort_primal(x: str, nd: int, kw: Dict[str, Any]) -> str:
    ax = _sort_axis(nd, kw.get("axis", -1))
    if ax is None:
        return f"np.sort(np.ravel({x}))"
    if nd == 1 or ax == 1:
        return f"np.sort({x})"
    return f"np.ascontiguousarray(np.sort(np.ascontiguousarray({x}.T)).T)"


def _interp(c: Ctx, i: int) -> Optional[str]:
    _real_only(c, "np.interp")
    if any(k in c.kwnames for k in ("left", "right", "period")):
        raise _RuleError("np.interp is differentiable without left=, right= and period=")
    x, xp, fp, dy = c.x[0], c.x[1], c.x[2], c.dy
    sfx = "s" if c.nd(0) == 0 else "a"
    if i == 0:
        return f"{dy} * _zyg_interp_slope_{sfx}({x}, {xp}, {fp})"
    if i == 1:
        raise _RuleError("np.interp is differentiable in x and fp; the sample points xp must "
                         "not depend on the inputs (wrap them in zyg.stop_gradient if they "
                         "are constants for the derivative)")
    return f"_zyg_interp_dfp_{sfx}({x}, {xp}, {fp}, {dy})"


EXTRA_RULES[np.interp] = ARule(_interp)


# --- np.nan_to_num, np.polyval -----------------------------------------------------------------
def _nan_to_num(c: Ctx, i: int) -> Optional[str]:
    """The finite elements pass through; nan and the infinities become constants (the
    replacement values are keywords, which must not depend on the inputs)."""
    _real_only(c, "np.nan_to_num")
    return f"_zyg_where(np.isfinite({c.x[0]}), {c.dy}, 0.0 * {c.dy})" if i == 0 else None


EXTRA_RULES[np.nan_to_num] = ARule(_nan_to_num, broadcast=True, kw_ok=("nan", "posinf", "neginf"))
SIGS[np.nan_to_num] = (1, ("copy", "nan", "posinf", "neginf"))


def _nan_to_num_primal(args: List[str], kinds: List[str], kw: Dict[str, Any]) -> str:
    from ..ssa.analysis import array_dtype, is_array
    if not kinds or not is_array(kinds[0]) or kinds[0][0] != "f":
        raise _RuleError("np.nan_to_num is supported on float arrays")
    if "copy" in kw:
        raise _RuleError("np.nan_to_num(): copy= must be a constant True or False")
    big = repr(float(np.finfo(array_dtype(kinds[0])).max))

    def val(name: str, default: str) -> str:
        got = kw.get(name)
        return default if got is None or got[1] is None else got[0]
    return (f"_zyg_nan_to_num({args[0]}, {val('nan', '0.0')}, {val('posinf', big)}, "
            f"{val('neginf', '-' + big)})")


def _polyval(c: Ctx, i: int) -> Optional[str]:
    """d/dp[k] = x ** (n - 1 - k), summed over x's elements; d/dx = p'(x)."""
    _real_only(c, "np.polyval")
    if c.nd(0) != 1:
        raise _RuleError("np.polyval is differentiable for 1-D coefficients p")
    if i == 0:
        return f"_zyg_polyval_dp_{'s' if c.nd(1) == 0 else 'a'}({c.x[0]}, {c.x[1]}, {c.dy})"
    return f"{c.dy} * _zyg_polyval_dx({c.x[0]}, {c.x[1]})"


EXTRA_RULES[np.polyval] = ARule(_polyval)
# forward mode: linear in p; p'(x) times x's tangent
EXTRA_RULES[np.polyval].fwd = lambda c, i: (f"_zyg_polyval({c.dy}, {c.x[1]})" if i == 0 else
                                            f"_zyg_polyval_dx({c.x[0]}, {c.x[1]}) * {c.dy}")

_CONV_MODES = {"full": 0, "same": 1, "valid": 2}


def _conv_mode(mode: Any) -> int:
    if mode not in _CONV_MODES:
        raise _RuleError(f"np.convolve: mode must be a constant 'full', 'same' or 'valid' "
                         f"(got {mode!r})")
    return _CONV_MODES[mode]


def _convolve(c: Ctx, i: int) -> Optional[str]:
    _real_only(c, "np.convolve")
    if c.nd(0) != 1 or c.nd(1) != 1:
        raise _RuleError("np.convolve is differentiable for two 1-D arrays")
    mode = _conv_mode(_param(c, 2, "mode", "full"))
    return f"_zyg_convolve_grad({c.x[0]}, {c.x[1]}, {c.dy}, {mode}, {i})"


EXTRA_RULES[np.convolve] = ARule(_convolve, kw_ok=("mode",))


def _accumulate(which: str) -> ARule:
    def back(c: Ctx, i: int) -> Optional[str]:
        _real_only(c, f"np.{which}.accumulate")
        if c.nd(0) != 1 or len(c.x) > 1 or c.kwnames:
            raise _RuleError(f"np.{which}.accumulate is differentiable on 1-D arrays (no axis)")
        return f"_zyg_acc_arg_grad({c.x[0]}, {c.y}, {c.dy})"
    return ARule(back)


EXTRA_RULES[np.maximum.accumulate] = _accumulate("maximum")
EXTRA_RULES[np.minimum.accumulate] = _accumulate("minimum")




# --- shapes ------------------------------------------------------------------------------------
def _roll(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    nd = c.nd(0)
    ax = _norm_axis(_param(c, 2, "axis"), nd, "np.roll")
    if ax is None or nd == 1:
        g = f"np.roll(np.ravel({c.dy}), -({c.x[1]}))"
        return g if nd == 1 else f"np.reshape({g}, {c.x[0]}.shape)"
    if nd != 2:
        raise _RuleError("np.roll with an axis is differentiable for 2-D arrays")
    return f"_zyg_roll2({c.dy}, -({c.x[1]}), {ax})"


def _roll_primal(args: List[str], nd: int, kw: Dict[str, Any]) -> str:
    ax = _norm_axis(kw.get("axis"), nd, "np.roll")
    if ax is None or nd == 1:
        return f"np.roll({args[0]}, {args[1]})"
    if nd != 2:
        raise _RuleError("np.roll with an axis is supported on 2-D arrays")
    return f"_zyg_roll2({args[0]}, {args[1]}, {ax})"


EXTRA_RULES[np.roll] = ARule(_roll, kw_ok=("axis",))


def _flip_src(s: str, nd: int, ax: Optional[int]) -> str:
    if ax is None:
        return f"{s}[{', '.join(['::-1'] * nd)}]"
    return f"{s}[{':, ' * ax}::-1]"


def _flip(c: Ctx, i: int) -> Optional[str]:
    nd = c.nd(0)
    return _flip_src(c.dy, nd, _norm_axis(_param(c, 1, "axis"), nd, "np.flip")) if i == 0 else None


EXTRA_RULES[np.flip] = ARule(_flip, kw_ok=("axis",))


def _nreps(kind: str) -> int:
    """How many repetitions np.tile's reps gives: 1 for an int, n for an n-tuple of ints."""
    from ..ssa.analysis import is_tuple, tuple_elts
    if kind == "int":
        return 1
    if is_tuple(kind) and all(k == "int" for k in tuple_elts(kind)):
        return len(tuple_elts(kind))
    raise _RuleError("reps must be an integer or a tuple of integers")


def _tile_check(nd: int, nreps: int) -> None:
    if nd not in (1, 2) or nreps > 2:
        raise _RuleError("np.tile is differentiable for 1-D and 2-D arrays and at most two repetitions")


def _tile(c: Ctx, i: int) -> Optional[str]:
    # the repetitions are read from the shapes: reps may be a run-time value
    if i != 0:
        return None
    nd, nr = c.nd(0), _nreps(c.kinds[1])
    _tile_check(nd, nr)
    x, dy = c.x[0], f"np.ascontiguousarray({c.dy})"
    if nd == 1 and nr == 1:
        return f"np.sum(np.reshape({dy}, ({c.dy}.shape[0] // {x}.shape[0], {x}.shape[0])), axis=0)"
    if nd == 1:            # (r0, r1) of a vector: a (r0, r1 * n) matrix
        return (f"np.sum(np.sum(np.reshape({dy}, ({c.dy}.shape[0], {c.dy}.shape[1] // {x}.shape[0], "
                f"{x}.shape[0])), axis=0), axis=0)")
    return (f"np.sum(np.sum(np.reshape({dy}, ({c.dy}.shape[0] // {x}.shape[0], {x}.shape[0], "
            f"{c.dy}.shape[1] // {x}.shape[1], {x}.shape[1])), axis=2), axis=0)")


def _tile_primal(args: List[str], kinds: List[str], nd: int) -> str:
    x, r = args[0], args[1]
    nr = _nreps(kinds[1])
    _tile_check(nd, nr)
    if nd == 1 and nr == 1:
        return f"_zyg_tile1({x}, {r})"
    if nd == 1:
        return f"_zyg_tile2(np.reshape({x}, (1, {x}.shape[0])), {r}[0], {r}[1])"
    if nr == 1:
        return f"_zyg_tile2({x}, 1, {r})"
    return f"_zyg_tile2({x}, {r}[0], {r}[1])"


EXTRA_RULES[np.tile] = ARule(_tile)


def _repeat(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    if c.kinds[1] != "int":
        raise _RuleError("np.repeat is differentiable with one integer count (for a count per "
                         "element, build the index array and index with it)")
    k = c.x[1]
    nd = c.nd(0)
    ax = _norm_axis(_param(c, 2, "axis"), nd, "np.repeat")
    x, dy = c.x[0], f"np.ascontiguousarray({c.dy})"
    if ax is None or nd == 1:
        g = f"np.sum(np.reshape({dy}, ({x}.size, {k})), axis=1)"
        return g if nd == 1 else f"np.reshape({g}, {x}.shape)"
    if nd != 2:
        raise _RuleError("np.repeat with an axis is differentiable for 2-D arrays")
    if ax == 0:
        return f"np.sum(np.reshape({dy}, ({x}.shape[0], {k}, {x}.shape[1])), axis=1)"
    return f"np.sum(np.reshape({dy}, ({x}.shape[0], {x}.shape[1], {k})), axis=2)"


def _repeat_primal(x: str, k: str, nd: int, kw: Dict[str, Any]) -> str:
    ax = _norm_axis(kw.get("axis"), nd, "np.repeat")
    if ax is None or nd == 1:
        return f"np.repeat({x}, {k})"
    if nd != 2:
        raise _RuleError("np.repeat with an axis is supported on 2-D arrays")
    return f"_zyg_repeat2({x}, {k}, {ax})"


EXTRA_RULES[np.repeat] = ARule(_repeat, kw_ok=("axis",))


def _reshape_back(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    if c.nd(0) == 0:
        return f"np.sum({c.dy})"
    return f"np.reshape(np.ascontiguousarray({c.dy}), {c.x[0]}.shape)"


for _f in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    EXTRA_RULES[_f] = ARule(_reshape_back)


def _identity(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    if c.nd(0) == 0:
        return f"np.sum({c.dy})"
    # a real array cast to complex: the cotangent of the real part
    return c.dy if _cplx_kind(c.kinds[0]) else f"np.real({c.dy})"


def _cplx_kind(k: str) -> bool:
    from ..ssa.analysis import is_complex
    return is_complex(k)


def astype(x: Any, dtype: Any) -> Any:
    """``x.astype(dtype)`` (array methods are lowered to calls of functions)."""
    return x.astype(dtype)


EXTRA_RULES[np.asarray] = ARule(_identity, kw_ok=("dtype",))
EXTRA_RULES[np.array] = ARule(_identity, kw_ok=("dtype",))
EXTRA_RULES[astype] = ARule(_identity)
SIGS[astype] = (1, ("dtype",))


def _dtype_src(d: Any) -> str:
    try:
        name = np.dtype(d).name
    except TypeError:
        raise _RuleError(f"astype: the dtype {d!r} must be a constant numpy type")
    return f"np.{name}"


# --- joins numpy spells differently: hstack, vstack, column_stack ------------------------------------
def stacked_rule(fn: Any) -> ARule:
    """Rules of ``np.hstack`` / ``np.vstack`` / ``np.column_stack`` of separate operands."""
    def back(c: Ctx, i: int) -> str:
        nds = [c.nd(k) for k in range(len(c.x))]
        if fn is np.hstack and all(n == 1 for n in nds):
            ax = 0
        elif fn is np.hstack:
            ax = 1
        else:
            ax = 0 if fn is np.vstack else 1
        if any(n == 0 for n in nds) or max(nds) > 2:
            raise _RuleError(f"np.{fn.__name__} is differentiable for 1-D and 2-D arrays")
        flat = (fn is np.vstack and max(nds) <= 2) or fn is np.column_stack

        def width(k: int) -> str:
            if flat and nds[k] == 1:
                return "1"
            return f"{c.x[k]}.shape[{ax}]"
        off = " + ".join(width(k) for k in range(i)) or "0"
        if flat and nds[i] == 1:
            return f"{c.dy}[{':, ' * ax}{off}]"
        return f"{c.dy}[{':, ' * ax}{off}:{off} + {width(i)}]"
    return ARule(back)


# --- lookups called from zyg.rules.arrays ------------------------------------------------------
_KEEP_WRAPPED: Dict[Any, ARule] = {}


def rule_for(fn: Any) -> Optional[ARule]:
    """The rule of ``fn`` from this module (with keepdims= on reductions), or None."""
    try:
        r = EXTRA_RULES.get(fn)
        if fn in KEEPDIMS:
            got = _KEEP_WRAPPED.get(fn)
            if got is None:
                base = r or ARRAY_RULES.get(fn)
                got = _KEEP_WRAPPED[fn] = with_keepdims(fn, base)
            return got
        return r
    except TypeError:
        return None


def call_parts(fn: Any, operands: list, args: List[str], kw: Dict[str, Any],
               const: Callable[[Any], Any]) -> Tuple[List[str], Dict[str, Any]]:
    """Positional parameters past the operands of ``fn`` moved to keywords (see ``SIGS``)."""
    try:
        sig = SIGS.get(fn)
    except TypeError:
        sig = None
    if sig is None:
        return args, kw
    nkeep, names = sig
    kw = dict(kw)
    for k in range(nkeep, len(args)):
        kw[names[k - nkeep]] = (args[k], const(operands[k]))
    return args[:nkeep], kw


def _consts(kw: Dict[str, Any], fname: str) -> Dict[str, Any]:
    out = {}
    for k, (_, v) in kw.items():
        if v is _NOCONST:
            raise _RuleError(f"{fname}: the argument {k}= must be a constant")
        out[k] = v
    return out


def primal_call(fn: Any, args: List[str], kinds: List[str], kwargs: Dict[str, Any],
                result_kind: Optional[str], base: Callable) -> Optional[str]:
    """Source of the primal call of a function of this module (the same spelling on both
    targets: numba lacks axis=, ddof=, keepdims= on many of them); None if none is needed.
    ``base`` is :func:`zyg.rules.arrays.primal_call` (reductions with keepdims= wrap it)."""
    from ..ssa.analysis import array_ndim, is_array
    try:
        known = fn in SIGS or fn in EXTRA_RULES or fn in KEEPDIMS
    except TypeError:
        return None
    if not known:
        return None
    nd = array_ndim(kinds[0]) if kinds and is_array(kinds[0]) else 0
    name = getattr(fn, "__name__", "?")
    if "keepdims" in kwargs and fn in KEEPDIMS:
        kd = kwargs["keepdims"][1]
        if kd is _NOCONST:
            raise _RuleError("keepdims= must be a constant")
        rest = {k: v for k, v in kwargs.items() if k != "keepdims"}
        inner = primal_call(fn, args, kinds, rest, None, base)
        if inner is None:
            inner = base(fn, args, kinds, rest, None)
        if inner is None:
            inner = f"np.{name}({', '.join(args + [f'{k}={v[0]}' for k, v in rest.items()])})"
        if not kd or nd == 0:
            return inner
        ax = _norm_axis(rest.get("axis", (None, None))[1], nd, f"np.{name}")
        if ax is None or nd == 1:
            return f"np.full(({'1, ' * nd}), {inner})"
        return f"np.expand_dims({inner}, {ax})"
    if fn is np.nan_to_num:
        return _nan_to_num_primal(args, kinds, kwargs)
    if fn is np.polyval:
        if len(args) != 2 or kwargs:
            raise _RuleError("np.polyval takes p and x by position")
        return f"_zyg_polyval({args[0]}, {args[1]})"
    if fn in (np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin):
        return None         # arrays.primal_call
    kw = _consts({k: v for k, v in kwargs.items() if k != "weights"}, f"np.{name}")
    if fn in (np.var, np.std, np.nanvar, np.nanstd):
        return _var_primal(fn, args[0], nd, kw)
    if fn in (np.nansum, np.nanmean, np.nanmax, np.nanmin):
        ax = _norm_axis(kw.get("axis"), nd, f"np.{name}")
        if ax is None or nd == 1:
            return f"np.{name}({args[0]})"
        x = args[0]
        if fn is np.nansum:
            return _S(f"_zyg_where(np.isnan({x}), 0.0, {x})", ax)
        if fn is np.nanmean:
            return (f"({_S(f'_zyg_where(np.isnan({x}), 0.0, {x})', ax)} / "
                    f"{_S(f'_zyg_where(np.isnan({x}), 0.0, 1.0)', ax)})")
        if nd != 2:
            raise _RuleError(f"np.{name} with an axis is supported on 2-D arrays")
        fill = "-np.inf" if fn is np.nanmax else "np.inf"
        helper = "_zyg_max_axis" if fn is np.nanmax else "_zyg_min_axis"
        return f"{helper}(_zyg_where(np.isnan({x}), {fill}, {x}), {ax})"
    if fn is np.cumprod:
        ax = _norm_axis(kw.get("axis"), nd, "np.cumprod")
        if ax is None or nd == 1:
            return f"np.cumprod({args[0]})"
        if nd != 2:
            raise _RuleError("np.cumprod with an axis is supported on 2-D arrays")
        return f"_zyg_cumprod_axis({args[0]}, {ax})"
    if fn is np.diff:
        n, ax = _diff_params(nd, kw)
        if ax == nd - 1:
            return f"np.diff({args[0]}, {n})"
        return f"np.ascontiguousarray(np.diff(np.ascontiguousarray({args[0]}.T), {n}).T)"
    if fn in (np.median, np.percentile, np.quantile):
        if fn is not np.median and is_array(kinds[1]):
            raise _RuleError(f"np.{name} is supported for one (scalar) q; call it once per q")
        return _order_primal(fn, args, nd, kw)
    if fn is np.average:
        w = kwargs.get("weights")
        if w is not None and w[1] is None:
            w = None
        nds = [nd, None]
        if w is not None:
            kw["weights_src"] = w[0]
            k = kinds[2] if len(kinds) > 2 else None
            nds[1] = array_ndim(k) if k and is_array(k) else 0
        return _average_primal(args, nds, kw)
    if fn is np.sort:
        return _sort_primal(args[0], nd, kw)
    if fn is np.interp:
        if kw:
            raise _RuleError("np.interp is supported without left=, right= and period=")
        return None
    if fn is np.roll:
        return _roll_primal(args, nd, kw)
    if fn is np.convolve:
        if nd != 1 or not (len(kinds) > 1 and is_array(kinds[1]) and array_ndim(kinds[1]) == 1):
            raise _RuleError("np.convolve is supported for two 1-D arrays")
        return f"_zyg_convolve({args[0]}, {args[1]}, {_conv_mode(kw.get('mode', 'full'))})"
    if fn is np.flip:
        ax = _norm_axis(kw.get("axis"), nd, "np.flip")
        return f"{_flip_src(args[0], nd, ax)}.copy()"
    if fn is np.tile:
        return _tile_primal(args, kinds, nd)
    if fn is np.repeat:
        if len(args) < 2:
            raise _RuleError("np.repeat takes the count by position")
        return _repeat_primal(args[0], args[1], nd, kw)
    if fn in (np.asarray, np.array):
        dt = kw.get("dtype")
        if nd == 0:
            return None
        if dt is not None:
            return f"{args[0]}.astype({_dtype_src(dt)})"
        return f"{args[0]}.copy()" if fn is np.array else f"np.asarray({args[0]})"
    if fn is astype:
        if "dtype" not in kw:
            raise _RuleError("astype() takes the dtype by position")
        return astype_call(args[0], kw["dtype"])
    try:
        if fn in (np.maximum.accumulate, np.minimum.accumulate):
            if nd != 1 or len(args) > 1 or kwargs:
                raise _RuleError(f"{fn.__self__.__name__}.accumulate is supported on 1-D arrays (no axis)")
            return f"_zyg_{fn.__self__.__name__}_accumulate({args[0]})"
    except TypeError:
        pass
    return None


def astype_call(x: str, dtype_value: Any) -> str:
    """``x.astype(<dtype>)`` in a spelling numba compiles (``float`` -> ``np.float64``)."""
    return f"{x}.astype({_dtype_src(dtype_value)})"


# --- helpers called by generated code (numba-compiled for the cpu target) -----------------------
def cumprod_grad(x, dy):
    """d/dx of sum(dy * cumprod(x)) for 1-D x, exact with zeros: g[k] = P[k-1] * S[k] with
    P the prefix products and S[k] = dy[k] + x[k+1] * S[k+1]."""
    n = x.size
    g = np.empty(n, x.dtype)
    s = 0.0 * x[0] if n else 0.0
    for k in range(n - 1, -1, -1):
        if k + 1 < n:
            s = dy[k] + x[k + 1] * s
        else:
            s = dy[k] + 0.0 * x[k]
        g[k] = s
    p = 1.0 + 0.0 * x[0] if n else 1.0
    for k in range(n):
        g[k] = g[k] * p
        p = p * x[k]
    return g


def cumprod_axis(a, axis):
    out = np.empty(a.shape, a.dtype)
    if axis == 0:
        for j in range(a.shape[1]):
            out[:, j] = np.cumprod(a[:, j])
    else:
        for i in range(a.shape[0]):
            out[i, :] = np.cumprod(a[i, :])
    return out


def cumprod_grad_axis(x, dy, axis):
    g = np.empty(x.shape, x.dtype)
    if axis == 0:
        for j in range(x.shape[1]):
            g[:, j] = cumprod_grad(np.ascontiguousarray(x[:, j]), np.ascontiguousarray(dy[:, j]))
    else:
        for i in range(x.shape[0]):
            g[i, :] = cumprod_grad(np.ascontiguousarray(x[i, :]), np.ascontiguousarray(dy[i, :]))
    return g


def diff_adj1(d):
    """The adjoint of one np.diff of a vector: (D^T d)."""
    out = np.zeros(d.shape[0] + 1, d.dtype)
    out[1:] += d
    out[:-1] -= d
    return out


def diff_adj2(d):
    out = np.zeros((d.shape[0], d.shape[1] + 1), d.dtype)
    out[:, 1:] += d
    out[:, :-1] -= d
    return out


def quantile(x, q):
    """The q-quantile (linear interpolation, numpy's default) of a vector."""
    s = np.sort(x)
    n = s.size
    pos = q * (n - 1)
    lo = int(np.floor(pos))
    if lo >= n - 1:
        return s[n - 1]
    if lo < 0:
        return s[0]
    f = pos - lo
    return s[lo] + f * (s[lo + 1] - s[lo])


def quantile_grad(x, q, dy):
    n = x.size
    p = np.argsort(x, kind="mergesort")
    g = np.zeros(n, x.dtype)
    pos = q * (n - 1)
    lo = int(np.floor(pos))
    if lo >= n - 1:
        g[p[n - 1]] += dy
        return g
    if lo < 0:
        g[p[0]] += dy
        return g
    f = pos - lo
    g[p[lo]] += dy * (1.0 - f)
    g[p[lo + 1]] += dy * f
    return g


def quantile_dq(x, q):
    """d quantile / dq: (n - 1) times the slope between the two sorted neighbours."""
    s = np.sort(x)
    n = s.size
    lo = int(np.floor(q * (n - 1)))
    if lo >= n - 1 or lo < 0:
        return 0.0 * s[0]
    return (s[lo + 1] - s[lo]) * (n - 1)


def quantile_axis(x, q, axis):
    if axis == 0:
        out = np.empty(x.shape[1], x.dtype)
        for j in range(x.shape[1]):
            out[j] = quantile(np.ascontiguousarray(x[:, j]), q)
    else:
        out = np.empty(x.shape[0], x.dtype)
        for i in range(x.shape[0]):
            out[i] = quantile(np.ascontiguousarray(x[i, :]), q)
    return out


def quantile_grad_axis(x, q, dy, axis):
    g = np.empty(x.shape, x.dtype)
    if axis == 0:
        for j in range(x.shape[1]):
            g[:, j] = quantile_grad(np.ascontiguousarray(x[:, j]), q, dy[j])
    else:
        for i in range(x.shape[0]):
            g[i, :] = quantile_grad(np.ascontiguousarray(x[i, :]), q, dy[i])
    return g


def quantile_dq_axis(x, q, axis):
    if axis == 0:
        out = np.empty(x.shape[1], x.dtype)
        for j in range(x.shape[1]):
            out[j] = quantile_dq(np.ascontiguousarray(x[:, j]), q)
    else:
        out = np.empty(x.shape[0], x.dtype)
        for i in range(x.shape[0]):
            out[i] = quantile_dq(np.ascontiguousarray(x[i, :]), q)
    return out


def unsort1(x, dy):
    """The cotangent of np.sort(x) sent back through the (stable) permutation."""
    p = np.argsort(x, kind="mergesort")
    g = np.empty(x.shape[0], dy.dtype)
    for k in range(p.shape[0]):
        g[p[k]] = dy[k]
    return g


def unsort2(x, dy):
    g = np.empty(x.shape, dy.dtype)
    for i in range(x.shape[0]):
        p = np.argsort(x[i], kind="mergesort")
        for k in range(p.shape[0]):
            g[i, p[k]] = dy[i, k]
    return g


def _segment(x, xp):
    """The segment j of xp holding x (xp[j] <= x < xp[j+1]), -1 left of it, n-1 at or right of its end."""
    n = xp.shape[0]
    if x < xp[0]:
        return -1
    if x >= xp[n - 1]:
        return n - 1
    return np.searchsorted(xp, x, side="right") - 1


def interp_slope_s(x, xp, fp):
    j = _segment(x, xp)
    if j < 0 or j >= xp.shape[0] - 1:
        return 0.0
    return (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])


def interp_slope_a(x, xp, fp):
    flat = np.ravel(x)
    out = np.empty(flat.shape[0], np.float64)
    for k in range(flat.shape[0]):
        out[k] = interp_slope_s(flat[k], xp, fp)
    return np.reshape(out, x.shape)


def interp_dfp_s(x, xp, fp, dy):
    g = np.zeros(fp.shape[0], np.float64)
    n = xp.shape[0]
    j = _segment(x, xp)
    if j < 0:
        g[0] += dy
    elif j >= n - 1:
        g[n - 1] += dy
    else:
        t = (x - xp[j]) / (xp[j + 1] - xp[j])
        g[j] += dy * (1.0 - t)
        g[j + 1] += dy * t
    return g


def interp_dfp_a(x, xp, fp, dy):
    g = np.zeros(fp.shape[0], np.float64)
    flat = np.ravel(x)
    dflat = np.ravel(dy)
    for k in range(flat.shape[0]):
        g += interp_dfp_s(flat[k], xp, fp, dflat[k])
    return g


def maximum_accumulate(x):
    out = np.empty(x.shape[0], x.dtype)
    for k in range(x.shape[0]):
        out[k] = x[k] if k == 0 or x[k] > out[k - 1] else out[k - 1]
    return out


def minimum_accumulate(x):
    out = np.empty(x.shape[0], x.dtype)
    for k in range(x.shape[0]):
        out[k] = x[k] if k == 0 or x[k] < out[k - 1] else out[k - 1]
    return out


def acc_arg_grad(x, y, dy):
    """Cotangent of a running max/min y of x: each y[k] came from the first element that
    attained it (the last one where y changed)."""
    g = np.zeros(x.shape[0], dy.dtype)
    src = 0
    for k in range(x.shape[0]):
        if k > 0 and y[k] != y[k - 1]:
            src = k
        g[src] += dy[k]
    return g


def roll2(a, shift, axis):
    out = np.empty(a.shape, a.dtype)
    n = a.shape[axis]
    if n == 0:
        return out
    s = shift % n
    for k in range(n):
        if axis == 0:
            out[(k + s) % n, :] = a[k, :]
        else:
            out[:, (k + s) % n] = a[:, k]
    return out


def tile1(x, r):
    n = x.shape[0]
    out = np.empty(n * r, x.dtype)
    for k in range(r):
        out[k * n:(k + 1) * n] = x
    return out


def tile2(x, r0, r1):
    n0, n1 = x.shape
    out = np.empty((n0 * r0, n1 * r1), x.dtype)
    for a in range(r0):
        for b in range(r1):
            out[a * n0:(a + 1) * n0, b * n1:(b + 1) * n1] = x
    return out


def repeat2(x, k, axis):
    n0, n1 = x.shape
    if axis == 0:
        out = np.empty((n0 * k, n1), x.dtype)
        for i in range(n0 * k):
            out[i, :] = x[i // k, :]
    else:
        out = np.empty((n0, n1 * k), x.dtype)
        for j in range(n1 * k):
            out[:, j] = x[:, j // k]
    return out


def _conv_window(n, m, mode):
    """(offset, length) of np.convolve's mode (0 full, 1 same, 2 valid) in the full result."""
    if mode == 0:
        return 0, n + m - 1
    if mode == 1:
        return (min(n, m) - 1) // 2, max(n, m)
    return min(n, m) - 1, max(n, m) - min(n, m) + 1


def _conv_full(a, v):
    """The full convolution of two vectors (numba's np.convolve takes no mode; one loop
    spelling for both targets)."""
    n, m = a.shape[0], v.shape[0]
    out = np.zeros(n + m - 1, (a[:1] * v[:1]).dtype)
    for i in range(n):
        for j in range(m):
            out[i + j] += a[i] * v[j]
    return out


def convolve(a, v, mode):
    """np.convolve(a, v, mode) with mode 0 'full', 1 'same', 2 'valid'."""
    off, ln = _conv_window(a.shape[0], v.shape[0], mode)
    return _conv_full(a, v)[off:off + ln].copy()


def convolve_grad(a, v, dy, mode, which):
    """The cotangent of operand ``which`` (0: a, 1: v) of np.convolve(a, v, mode): the
    cotangent of the window put into the full result, correlated with the other operand."""
    n, m = a.shape[0], v.shape[0]
    off, ln = _conv_window(n, m, mode)
    dfull = np.zeros(n + m - 1, dy.dtype)
    dfull[off:off + ln] = dy
    if which == 0:
        g = np.zeros(n, dfull.dtype)
        for i in range(n):
            for j in range(m):
                g[i] += dfull[i + j] * v[j]
        return g
    g = np.zeros(m, dfull.dtype)
    for j in range(m):
        for i in range(n):
            g[j] += dfull[i + j] * a[i]
    return g


# in dependency order: a helper may call those before it (by its Python name)

def nan_to_num(x, nan, posinf, neginf):
    """np.nan_to_num(x, nan=, posinf=, neginf=) on a float array (numba's takes no posinf=)."""
    out = x.copy()
    flat = out.reshape(-1)
    for k in range(flat.shape[0]):
        v = flat[k]
        if np.isnan(v):
            flat[k] = nan
        elif np.isinf(v):
            flat[k] = posinf if v > 0 else neginf
    return out


def polyval(p, x):
    """np.polyval by Horner's rule, in numpy's order of operations (the same rounding)."""
    y = x * 0.0
    for k in range(p.shape[0]):
        y = y * x + p[k]
    return y


def polyval_dx(p, x):
    """p'(x) by Horner's rule on p and its derivative together."""
    d = x * 0.0
    v = x * 0.0
    for k in range(p.shape[0]):
        d = d * x + v
        v = v * x + p[k]
    return d


def polyval_dp_s(p, x, dy):
    g = np.zeros(p.shape[0], p.dtype)
    w = 1.0
    for k in range(p.shape[0] - 1, -1, -1):
        g[k] = dy * w
        w = w * x
    return g


def polyval_dp_a(p, x, dy):
    g = np.zeros(p.shape[0], p.dtype)
    w = np.ones_like(x)
    for k in range(p.shape[0] - 1, -1, -1):
        g[k] = np.sum(dy * w)
        w = w * x
    return g


_HELPER_FNS = [cumprod_grad, cumprod_axis, cumprod_grad_axis, diff_adj1, diff_adj2, quantile,
               quantile_grad, quantile_dq, quantile_axis, quantile_grad_axis, quantile_dq_axis,
               unsort1, unsort2, _segment, interp_slope_s, interp_slope_a, interp_dfp_s,
               interp_dfp_a, maximum_accumulate, minimum_accumulate, acc_arg_grad, roll2, tile1,
               tile2, repeat2, _conv_window, _conv_full, convolve, convolve_grad, nan_to_num,
               polyval, polyval_dx, polyval_dp_s, polyval_dp_a]


_HELPERS: Dict[Any, Dict[str, Any]] = {}


def helpers(backend: Any) -> Dict[str, Any]:
    """``_zyg_<name>`` -> helper for generated code on ``backend`` (compiled where it
    compiles; the helpers call each other through the compiled versions), one set per
    target and options."""
    if not backend.compiled:
        return {f"_zyg_{f.__name__.lstrip('_')}": f for f in _HELPER_FNS}
    got = _HELPERS.get(backend.key())
    if got is None:
        ns: Dict[str, Any] = {"np": np}
        got = {}
        for f in _HELPER_FNS:
            g = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__)
            ns[f.__name__] = got[f"_zyg_{f.__name__.lstrip('_')}"] = backend.jit(g)
        got = _HELPERS.setdefault(backend.key(), got)
    return dict(got)


# --- np.clip on numbers ------------------------------------------------------------------------
from .registry import adjoint, lookup  # noqa: E402


@adjoint(np.clip)
def _clip_scalar_rule(x, lo, hi):
    # one forward expression and one return of closed forms: the rule's forward mode (zyg.jvp)
    # is read from them.  y is min(max(x, lo), hi): hi wins when lo > hi, as in numpy
    y = min(max(x, lo), hi)

    def back(dy):
        return (dy if (x >= lo and x <= hi) else 0.0, dy if (x < lo and lo <= hi) else 0.0,
                dy if (x > hi or lo > hi) else 0.0)
    return y, back


lookup(np.clip).real_only = True

# the front end lowers x.astype(dtype) to the primitive astype
hooks.PRIMS["astype"] = astype
