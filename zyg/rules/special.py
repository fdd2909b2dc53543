"""Rules of ``scipy.special`` functions and of numpy's scalar ufunc forms.

numba cannot call ``scipy.special``, so each function has a numba-compilable
implementation here (accurate to a few ulps against scipy where the function is
smooth; ``tests/test_special.py`` checks them) that the rules use as the primal on
both targets. Derivatives: ``expit' = y (1 - y)``, ``logit' = 1 / (p (1 - p))``,
``gammaln' = digamma`` (and ``math.lgamma``; ``math.gamma' = gamma digamma``),
``digamma' = trigamma`` (polygamma(1)), ``erf' = 2/sqrt(pi)
exp(-x^2)``, ``log_ndtr' = phi(x) / Phi(x)``, ``xlogy``: ``(log y, x / y)``,
``logsumexp``: ``exp(a - y)`` (softmax) along the reduced axes.

On arrays the same functions are elementwise array rules (``ARRAY_RULES`` here,
consulted by :func:`zyg.rules.arrays.rule_for`), computed on the cpu target by the
loop helpers of :func:`helpers` and on the python target by scipy itself.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np
import scipy.special as sc

from . import arrays as arules
from .arrays import _NOCONST, _RuleError
from .registry import adjoint

_LOG_SQRT_2PI = 0.9189385332046727      # log(sqrt(2 pi))
_SQRT1_2 = 0.7071067811865476


# --- numba-compilable implementations (scalars) ----------------------------------------------
def expit(x):
    """The logistic function 1 / (1 + exp(-x)), without overflow."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def logit(p):
    """log(p / (1 - p)); near p = 1/2 through log1p (2p - 1 and 1 - p are exact there)."""
    if 0.25 < p < 0.75:
        return math.log1p((2.0 * p - 1.0) / (1.0 - p))
    return math.log(p / (1.0 - p))


def gammaln(x):
    """log |Gamma(x)|."""
    return math.lgamma(x)


def digamma(x):
    """psi(x) = d/dx log Gamma(x): reflection below 0, recurrence up to 10, then the
    asymptotic series (its remainder is below 1e-17 there)."""
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    r = 0.0
    if x < 0.0:
        # psi(x) = psi(1 - x) - pi / tan(pi x)
        r = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < 10.0:
        r -= 1.0 / x
        x += 1.0
    z = 1.0 / (x * x)
    s = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (
        1.0 / 132 - z * (691.0 / 32760 - z / 12.0))))))
    return r + math.log(x) - 0.5 / x - s


def trigamma(x):
    """psi'(x) = polygamma(1, x): reflection below 0, recurrence up to 10, then the
    asymptotic series."""
    if x <= 0.0 and x == math.floor(x):
        return math.inf
    r = 0.0
    sign = 1.0
    if x < 0.0:
        # psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)
        s = math.sin(math.pi * x)
        r = math.pi * math.pi / (s * s)
        sign = -1.0
        x = 1.0 - x
    acc = 0.0
    while x < 10.0:
        acc += 1.0 / (x * x)
        x += 1.0
    z = 1.0 / (x * x)
    t = 1.0 / x + 0.5 * z + (z / x) * (1.0 / 6 - z * (1.0 / 30 - z * (1.0 / 42 - z * (
        1.0 / 30 - z * (5.0 / 66 - z * (691.0 / 2730 - z * 7.0 / 6))))))
    return r + sign * (acc + t)


def ndtr(x):
    """The standard normal cdf Phi(x)."""
    return 0.5 * math.erfc(-x * _SQRT1_2)


def log_ndtr(x):
    """log Phi(x): log1p(-Phi(-x)) for positive x, the asymptotic series far in the lower
    tail (where erfc underflows), log(erfc) between."""
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x * _SQRT1_2))     # log(1 - Phi(-x))
    if x > -20.0:
        return math.log(0.5 * math.erfc(-x * _SQRT1_2))
    # Phi(x) = phi(x) / (-x) * (1 - 1/x^2 + 3/x^4 - 15/x^6 + ...)
    z = 1.0 / (x * x)
    term = 1.0
    s = 1.0
    for k in range(1, 16):
        term *= -(2.0 * k - 1.0) * z
        s += term
    return -0.5 * x * x - _LOG_SQRT_2PI - math.log(-x) + math.log(s)


def xlogy(x, y):
    """x * log(y), and 0 where x == 0."""
    if x == 0.0:
        return 0.0
    return x * math.log(y)


def _log_ndtr_grad(x, y):
    """phi(x) / Phi(x) = exp(log phi(x) - log Phi(x))."""
    return math.exp(-0.5 * x * x - _LOG_SQRT_2PI - y)


# --- scalar rules ---------------------------------------------------------------------------
@adjoint(sc.expit)
def _expit_rule(x):
    y = expit(x)
    def back(dy):  # noqa: E306
        return (dy * y * (1.0 - y),)
    return y, back


@adjoint(sc.logit)
def _logit_rule(p):
    y = logit(p)
    def back(dy):  # noqa: E306
        return (dy / (p * (1.0 - p)),)
    return y, back


@adjoint(sc.gammaln)
def _gammaln_rule(x):
    y = gammaln(x)
    def back(dy):  # noqa: E306
        return (dy * digamma(x),)
    return y, back


# math.lgamma and math.gamma: the same derivatives on Python floats (numba compiles both)
@adjoint(math.lgamma)
def _lgamma_rule(x):
    y = math.lgamma(x)
    def back(dy):  # noqa: E306
        return (dy * digamma(x),)
    return y, back


@adjoint(math.gamma, samples=[(0.3,), (1.4,), (2.2,), (-0.45,), (3.7,)])
def _gamma_rule(x):
    y = math.gamma(x)
    def back(dy):  # noqa: E306
        return (dy * y * digamma(x),)
    return y, back


@adjoint(sc.digamma)
def _digamma_rule(x):
    y = digamma(x)
    def back(dy):  # noqa: E306
        return (dy * trigamma(x),)
    return y, back


@adjoint(sc.erf)
def _erf_rule(x):
    y = math.erf(x)
    def back(dy):  # noqa: E306
        return (dy * 1.1283791670955126 * math.exp(-x * x),)
    return y, back


@adjoint(sc.erfc)
def _erfc_rule(x):
    y = math.erfc(x)
    def back(dy):  # noqa: E306
        return (-dy * 1.1283791670955126 * math.exp(-x * x),)
    return y, back


@adjoint(sc.ndtr)
def _ndtr_rule(x):
    y = ndtr(x)
    def back(dy):  # noqa: E306
        return (dy * math.exp(-0.5 * x * x - _LOG_SQRT_2PI),)
    return y, back


@adjoint(sc.log_ndtr)
def _log_ndtr_rule(x):
    y = log_ndtr(x)
    def back(dy):  # noqa: E306
        return (dy * _log_ndtr_grad(x, y),)
    return y, back


@adjoint(sc.xlogy, samples=[(0.7, 1.4), (-1.6, 0.3), (2.2, 5.3)])
def _xlogy_rule(a, b):
    y = xlogy(a, b)
    def back(dy):  # noqa: E306
        return (dy * math.log(b), dy * a / b)
    return y, back


# numpy's scalar forms of the arithmetic ufuncs (np.add(a, b) with float operands)
@adjoint(np.add)
def _np_add_rule(a, b):
    y = a + b
    def back(dy):  # noqa: E306
        return (dy, dy)
    return y, back


@adjoint(np.subtract)
def _np_subtract_rule(a, b):
    y = a - b
    def back(dy):  # noqa: E306
        return (dy, -dy)
    return y, back


@adjoint(np.multiply)
def _np_multiply_rule(a, b):
    y = a * b
    def back(dy):  # noqa: E306
        return (dy * b, dy * a)
    return y, back


@adjoint(np.divide)
def _np_divide_rule(a, b):
    y = a / b
    def back(dy):  # noqa: E306
        return (dy / b, -dy * y / b)
    return y, back


@adjoint(np.mod)
def _np_mod_rule(a, b):
    y = np.mod(a, b)
    def back(dy):  # noqa: E306
        return (dy, -dy * np.floor(a / b))
    return y, back


def _real_only() -> None:
    # these rules are written for real numbers: zyg reports a complex operand instead
    # of applying them (docs/complex.md)
    from .registry import lookup
    for fn in (sc.expit, sc.logit, sc.gammaln, sc.digamma, math.lgamma, math.gamma, sc.erf, sc.erfc, sc.ndtr, sc.log_ndtr,
               sc.xlogy, np.add, np.subtract, np.multiply, np.divide, np.mod):
        lookup(fn).real_only = True


_real_only()


# --- array rules ----------------------------------------------------------------------------
# fn -> (helper name, scalar implementation, scipy's vectorised function on target "python")
ELEMENTWISE: Dict[Any, tuple] = {
    sc.expit: ("_zyg_sp_expit", expit, sc.expit),
    sc.logit: ("_zyg_sp_logit", logit, sc.logit),
    sc.gammaln: ("_zyg_sp_gammaln", gammaln, sc.gammaln),
    sc.digamma: ("_zyg_sp_digamma", digamma, sc.digamma),
    sc.erf: ("_zyg_sp_erf", math.erf, sc.erf),
    sc.erfc: ("_zyg_sp_erfc", math.erfc, sc.erfc),
    sc.ndtr: ("_zyg_sp_ndtr", ndtr, sc.ndtr),
    sc.log_ndtr: ("_zyg_sp_log_ndtr", log_ndtr, sc.log_ndtr),
}
_EXTRA_ELEMENTWISE = {"_zyg_sp_trigamma": (trigamma, lambda x: sc.polygamma(1, x))}

# the derivative of each elementwise function, in x and y (as in rules/arrays.py)
_DERIV = {
    sc.expit: "y * (1.0 - y)",
    sc.logit: "1.0 / (x * (1.0 - x))",
    sc.gammaln: "_zyg_sp_digamma(x)",
    sc.digamma: "_zyg_sp_trigamma(x)",
    sc.erf: "1.1283791670955126 * np.exp(-x * x)",
    sc.erfc: "-1.1283791670955126 * np.exp(-x * x)",
    sc.ndtr: f"np.exp(-0.5 * x * x - {_LOG_SQRT_2PI})",
    sc.log_ndtr: f"np.exp(-0.5 * x * x - {_LOG_SQRT_2PI} - y)",
}


def _array_rules() -> Dict[Any, Any]:
    out: Dict[Any, Any] = {}
    for fn, d in _DERIV.items():
        out[fn] = arules._unary(d, None, f"scipy.special.{fn.__name__}")
    out[sc.xlogy] = arules._binary("np.log(b)", "a / b", None, "scipy.special.xlogy")

    def lse(c, i):
        if i != 0:
            return None
        if c.cplx:
            raise arules._no_complex("scipy.special.logsumexp")
        ax = arules._axis(c)
        if ax is None or c.nd(0) == 1:       # a scalar result
            return f"{c.dy} * np.exp({c.x[0]} - {c.y})"
        return f"np.expand_dims({c.dy}, {ax}) * np.exp({c.x[0]} - np.expand_dims({c.y}, {ax}))"
    out[sc.logsumexp] = arules.ARule(lse, kw_ok=("axis",))
    return out


ARRAY_RULES: Dict[Any, Any] = {}


def array_rule(fn: Any) -> Any:
    """The array rule of a scipy.special function (None for other functions)."""
    if not ARRAY_RULES:
        ARRAY_RULES.update(_array_rules())
    try:
        return ARRAY_RULES.get(fn)
    except TypeError:
        return None


def logsumexp_all(a):
    """log(sum(exp(a))) over all elements, shifted by the maximum."""
    m = np.max(a)
    if not np.isfinite(m):
        m = 0.0
    return m + math.log(np.sum(np.exp(a - m)))


def logsumexp_axis(a, axis):
    """logsumexp of a 2-D array along a constant axis."""
    if axis == 0:
        out = np.empty(a.shape[1])
        for j in range(a.shape[1]):
            out[j] = logsumexp_all(a[:, j])
    else:
        out = np.empty(a.shape[0])
        for i in range(a.shape[0]):
            out[i] = logsumexp_all(a[i, :])
    return out


def primal_call(fn: Any, args, kinds, kwargs) -> Any:
    """Source of the call of a scipy.special function on arrays (None: not one of ours).
    ``kwargs`` maps names to (rendered, constant value or the no-constant marker)."""
    from ..ssa.analysis import array_ndim, is_array
    if fn in ELEMENTWISE and len(args) == 1 and not kwargs:
        return f"{ELEMENTWISE[fn][0]}({args[0]})"
    if fn is sc.xlogy and len(args) == 2 and not kwargs:
        a, b = args
        return f"_zyg_where({a} == 0, 0.0 * {b}, {a} * np.log({b}))"
    if fn is sc.logsumexp:
        if len(args) != 1 or set(kwargs) - {"axis"}:
            raise _RuleError("is supported as logsumexp(a) and logsumexp(a, axis=k)")
        ax = kwargs["axis"][1] if "axis" in kwargs else None
        if ax is _NOCONST:
            raise _RuleError("the axis must be a constant")
        nd = array_ndim(kinds[0]) if is_array(kinds[0]) else 0
        if ax is not None and ax < 0:
            ax += nd
        if ax is None or (nd == 1 and ax == 0):
            return f"_zyg_sp_logsumexp_all({args[0]})"
        if nd != 2:
            raise _RuleError("with an axis is supported on 2-D arrays")
        return f"_zyg_sp_logsumexp_axis({args[0]}, {ax})"
    return None


def _vectorised_src(name: str) -> str:
    return (f"def {name}(x):\n"
            "    out = np.empty(x.shape)\n"
            "    for idx in np.ndindex(x.shape):\n"
            "        out[idx] = f(x[idx])\n"
            "    return out\n")


def helpers(backend: Any) -> Dict[str, Any]:
    """Helper name -> function for generated code on ``backend``: scipy where it runs
    Python, loops over the compiled implementations where it compiles."""
    table = {name: (impl, vec) for name, impl, vec in ELEMENTWISE.values()}
    table.update(_EXTRA_ELEMENTWISE)
    out: Dict[str, Any] = {}
    if not backend.compiled:
        for name, (_, vec) in table.items():
            out[name] = vec
        out["_zyg_sp_logsumexp_all"] = lambda a: float(sc.logsumexp(a))
        out["_zyg_sp_logsumexp_axis"] = lambda a, axis: sc.logsumexp(a, axis=axis)
        return out
    njit = backend.jit
    for name, (impl, _) in table.items():
        ns = {"np": np, "f": njit(impl) if not isinstance(impl, type(math.erf)) else impl}
        exec(_vectorised_src(name), ns)
        out[name] = njit(ns[name])
    lse = njit(logsumexp_all)
    out["_zyg_sp_logsumexp_all"] = lse
    ns = {"np": np, "logsumexp_all": lse}
    import inspect
    import textwrap
    exec(textwrap.dedent(inspect.getsource(logsumexp_axis)), ns)
    out["_zyg_sp_logsumexp_axis"] = njit(ns["logsumexp_axis"])
    return out


_SUBST: Dict[Any, Any] = {}


def numba_substitutes() -> Dict[Any, Any]:
    """scipy.special function -> numba-compiled scalar implementation, for calls that no
    rule replaces (a call whose result is not differentiated) on compiled targets."""
    from ..numerics import njit, options_tag
    tag = options_tag()
    if tag not in _SUBST:
        got = _SUBST[tag] = {}
        for fn, (_, impl, _) in ELEMENTWISE.items():
            got[fn] = impl if isinstance(impl, type(math.erf)) else njit(impl)
        got[sc.xlogy] = njit(xlogy)
    return _SUBST[tag]
