"""Scalar rules: arithmetic operators, ``math`` and numpy scalar functions.

The derivatives are a *table*, not a hundred hand-written functions: each entry
becomes the source text of an ordinary ``@adjoint`` rule (the same mechanism users
have), registered in ``linecache`` under the pseudo-file ``<zyg-rules-scalar>`` so
that ``zyg.show`` and tracebacks can display it.  In the derivative expressions
``x`` is the argument, ``y`` the primal result, ``M`` the module (``math`` or ``np``).

Complex numbers (``docs/complex.md``) reuse the same table: the cotangent of a
complex value is ``dL/dRe + i dL/dIm`` (PyTorch's convention), so the pullback of a
holomorphic ``f`` is ``dz += conj(f'(z)) * dy``.  For the functions in ``HOLOMORPHIC``
each entry also generates a *complex variant* (``@complex_adjoint``) that wraps the
same derivative expression in ``np.conj``; it is used when an operand or the result
of the call is complex.  Non-holomorphic and real-valued functions (``abs``,
``np.real``, ``np.imag``, ``np.angle``, ``np.conj``, ``complex``) have their own
entries in ``COMPLEX_SPECIAL``.  Every other built-in rule is real-only: zyg
reports a complex operand of, say, ``math.sin`` instead of differentiating it wrongly.
"""
from __future__ import annotations

import ast
import builtins
import cmath
import linecache
import math
import operator
from typing import Dict, List

import numpy as np

from .registry import adjoint, complex_adjoint, lookup, nondifferentiable

# name -> derivative dy/dx as an expression in x, y, M
UNARY = {
    "sin": "M.cos(x)", "cos": "-M.sin(x)", "tan": "1.0 + y * y",
    "arcsin": "1.0 / M.sqrt(1.0 - x * x)", "arccos": "-1.0 / M.sqrt(1.0 - x * x)",
    "arctan": "1.0 / (1.0 + x * x)",
    "asin": "1.0 / M.sqrt(1.0 - x * x)", "acos": "-1.0 / M.sqrt(1.0 - x * x)",
    "atan": "1.0 / (1.0 + x * x)",
    "sinh": "M.cosh(x)", "cosh": "M.sinh(x)", "tanh": "1.0 - y * y",
    "arcsinh": "1.0 / M.sqrt(x * x + 1.0)", "arccosh": "1.0 / M.sqrt(x * x - 1.0)",
    "arctanh": "1.0 / (1.0 - x * x)",
    "asinh": "1.0 / M.sqrt(x * x + 1.0)", "acosh": "1.0 / M.sqrt(x * x - 1.0)",
    "atanh": "1.0 / (1.0 - x * x)",
    "exp": "y", "expm1": "y + 1.0", "exp2": "y * 0.6931471805599453",
    "log": "1.0 / x", "log2": "1.0 / (x * 0.6931471805599453)",
    "log10": "1.0 / (x * 2.302585092994046)", "log1p": "1.0 / (1.0 + x)",
    "sqrt": "0.5 / y", "cbrt": "1.0 / (3.0 * y * y)",
    "erf": "1.1283791670955126 * M.exp(-x * x)", "erfc": "-1.1283791670955126 * M.exp(-x * x)",
    "fabs": "(1.0 if x >= 0 else -1.0)", "absolute": "(1.0 if x >= 0 else -1.0)",
    "square": "2.0 * x", "reciprocal": "-y * y", "negative": "-1.0", "positive": "1.0",
    "radians": "0.017453292519943295", "degrees": "57.29577951308232",
    "deg2rad": "0.017453292519943295", "rad2deg": "57.29577951308232",
    "sinc": "((M.cos(M.pi * x) - y) / x if x != 0 else 0.0)",
}

# d(a ** b)/da: b * a ** (b - 1), and exactly 0 where b == 0 (numpy's 0 ** 0 == 1 is a
# constant, as in JAX). The exponent b - 1 + (b == 0) is b - 1, or 0 where b == 0 (bool b
# too, where b - (b != 0) would fail on numpy bool arrays), so 0.0 ** -1 (inf, or a
# ZeroDivisionError in numba's integer power) is never computed there: 0 * 0.0 ** -1 made
# the derivative of x ** 0 nan at x = 0. The same expression serves scalars and arrays,
# and differentiated again it gives k * (k - 1) * x ** (k - 2) with the same guard (2 at
# x = 0 for x ** 2, 0 for x ** 1).
POW_DA = "b * a ** (b - 1 + (b == 0))"

# name -> (d/da, d/db) in a, b, y, M
BINARY = {
    "atan2": ("b / (a * a + b * b)", "-a / (a * a + b * b)"),
    "arctan2": ("b / (a * a + b * b)", "-a / (a * a + b * b)"),
    "hypot": ("a / y", "b / y"),
    "pow": (POW_DA, "(y * M.log(a) if a > 0 else 0.0)"),
    "power": (POW_DA, "(y * M.log(a) if a > 0 else 0.0)"),
    "copysign": ("(1.0 if (a >= 0) == (b >= 0) else -1.0)", None),
    # np.trunc / np.floor: a float (inf stays inf); math's raise or wrap around on inf
    "fmod": ("1.0", "-np.trunc(a / b)"),
    "logaddexp": ("M.exp(a - y)", "M.exp(b - y)"),
    "maximum": ("(1.0 if a > b else (0.5 if a == b else 0.0))",
                "(1.0 if b > a else (0.5 if a == b else 0.0))"),
    "minimum": ("(1.0 if a < b else (0.5 if a == b else 0.0))",
                "(1.0 if b < a else (0.5 if a == b else 0.0))"),
    "fmax": ("(1.0 if a > b else (0.5 if a == b else 0.0))",
             "(1.0 if b > a else (0.5 if a == b else 0.0))"),
    "fmin": ("(1.0 if a < b else (0.5 if a == b else 0.0))",
             "(1.0 if b < a else (0.5 if a == b else 0.0))"),
}

# operator / builtin rules written out: (qualified name, params, back expressions, primal expr)
SPECIAL = [
    ("operator.add", "a, b", "dy, dy", "a + b"),
    ("operator.sub", "a, b", "dy, -dy", "a - b"),
    ("operator.mul", "a, b", "dy * b, dy * a", "a * b"),
    ("operator.truediv", "a, b", "dy / b, -dy * y / b", "a / b"),
    ("operator.mod", "a, b", "dy, -dy * np.floor(a / b)", "a % b"),
    ("operator.pow", "a, b", "dy * b * a ** (b - 1 + (b == 0)), (dy * y * math.log(a) if a > 0 else 0.0)", "a ** b"),
    ("operator.neg", "a", "-dy", "-a"),
    ("operator.pos", "a", "dy", "+a"),
    ("builtins.abs", "a", "(dy if a >= 0 else -dy)", "abs(a)"),
    ("builtins.float", "a", "dy", "float(a)"),
    ("np.float64", "a", "dy", "np.float64(a)"),
    ("np.float32", "a", "dy", "np.float32(a)"),
    ("builtins.max", "a, b", "(dy if a > b else (0.5 * dy if a == b else 0.0)), "
                            "(dy if b > a else (0.5 * dy if a == b else 0.0))", "max(a, b)"),
    ("builtins.min", "a, b", "(dy if a < b else (0.5 * dy if a == b else 0.0)), "
                            "(dy if b < a else (0.5 * dy if a == b else 0.0))", "min(a, b)"),
    ("math.pow", "a, b", "dy * b * a ** (b - 1 + (b == 0)), (dy * y * math.log(a) if a > 0 else 0.0)", "math.pow(a, b)"),
]

# unary entries whose derivative expression holds for complex arguments (holomorphic
# functions; the principal branches of numpy and cmath)
HOLOMORPHIC = {
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "asinh", "acosh", "atanh",
    "exp", "expm1", "exp2", "log", "log2", "log10", "log1p", "sqrt",
    "square", "reciprocal", "negative", "positive",
}
# where the real formula is not the derivative of the principal branch off the real line
COMPLEX_UNARY = {
    "arccosh": "1.0 / (M.sqrt(x - 1.0) * M.sqrt(x + 1.0))",
    "acosh": "1.0 / (M.sqrt(x - 1.0) * M.sqrt(x + 1.0))",
}
# binary entries with a complex variant: (d/da, d/db), conjugated like the unary ones
COMPLEX_BINARY = {
    "operator.mul": ("b", "a"),
    "operator.truediv": ("1.0 / b", "y / b", "-"),
    "operator.pow": (POW_DA, "(y * cmath.log(a) if a != 0 else 0j)"),
    "np.power": (POW_DA, "(y * cmath.log(a) if a != 0 else 0j)"),
}
# complex forms written out: (qualified name, params, back (complex variant), back for
# real operands or None when the real rule needs no change, primal)
COMPLEX_SPECIAL = [
    ("builtins.abs", "a", "(dy * a / y if y != 0 else 0j)", None, "abs(a)"),
    ("np.absolute", "a", "(dy * a / y if y != 0 else 0j)", None, "np.absolute(a)"),
    ("np.conjugate", "a", "np.conj(dy)", "np.conj(dy)", "np.conjugate(a)"),
    ("np.real", "a", "dy", "dy", "np.real(a)"),
    ("np.imag", "a", "1j * dy", "0.0 * dy", "np.imag(a)"),
    ("np.angle", "a", "dy * 1j * a / (a.real * a.real + a.imag * a.imag)", "0.0 * dy", "np.angle(a)"),
    ("cmath.phase", "a", "dy * 1j * a / (a.real * a.real + a.imag * a.imag)", "0.0 * dy",
     "cmath.phase(a)"),
    # a + i b: holomorphic in both (real a, b take the real part: Re dy and Im dy)
    ("builtins.complex", "a, b", "dy, -1j * dy", "dy, -1j * dy", "complex(a, b)"),
    ("cmath.rect", "a, b", "dy * np.conj(cmath.exp(1j * b)), dy * np.conj(1j * y)",
     "dy * np.conj(cmath.exp(1j * b)), dy * np.conj(1j * y)", "cmath.rect(a, b)"),
    ("real_part", "a", "dy", "dy", "a.real"),
    ("imag_part", "a", "1j * dy", "0.0 * dy", "a.imag"),
]


def real_part(z):
    """``z.real`` of a scalar (the lowering's ``.real`` attribute on numbers becomes this call)."""
    return z.real


def imag_part(z):
    """``z.imag`` of a scalar."""
    return z.imag


NONDIFF = [
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
    operator.not_, operator.truth, operator.floordiv, operator.and_, operator.or_, operator.xor,
    operator.invert, operator.lshift, operator.rshift, builtins.int, builtins.bool, builtins.round,
    builtins.len, math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite,
    np.floor, np.ceil, np.trunc, np.rint, np.round, np.sign, np.isnan, np.isinf, np.isfinite,
    np.argmax, np.argmin, np.int64, np.int32, np.bool_, cmath.isnan, cmath.isinf, cmath.isfinite,
]

def _kind_invert(kinds, consts):
    """``~b`` of a bool is a bool (numpy and numba: ``not b``; Python's ``~True`` is -2)."""
    return "bool" if list(kinds) == ["bool"] else None


_FILENAME = "<zyg-rules-scalar>"


def registry_rules():
    from .registry import all_rules
    return [r.fn for r in all_rules().values()]


# math functions numba's nopython mode cannot compile: their rules compute the
# primal with the numpy equivalent (same value on floats), so both targets work
_VIA_NUMPY = {"cbrt", "fmod"}


def _prim(mod: str, name: str) -> str:
    return f"np.{name}" if mod == "math" and name in _VIA_NUMPY else f"{mod}.{name}"


class _Substitute(ast.NodeTransformer):
    def __init__(self, names: Dict[str, ast.expr]):
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.names.get(node.id, node)


def _subst(expr: str, names: Dict[str, str]) -> str:
    """The derivative template ``expr`` (in the names ``x``, ``y``, ...) with each name
    replaced by the expression ``names[name]`` (a syntax-tree substitution)."""
    tree = ast.parse(expr, mode="eval")
    return ast.unparse(_Substitute({k: _operand(v) for k, v in names.items()}).visit(tree))


def _operand(src: str) -> ast.expr:
    """The expression ``src`` as a tree; a placeholder that is no expression (the markers
    with which ``pullbacks/arrays.py`` finds the operands a rule reads) as a name."""
    try:
        return ast.parse(src, mode="eval").body
    except SyntaxError:
        return ast.Name(id=src, ctx=ast.Load())


def with_module(template: str, mod: str) -> str:
    """A derivative template of the tables above with its module placeholder ``M`` bound
    to ``mod`` (``math``, ``np``, ``cmath``)."""
    return _subst(template, {"M": mod})


def _generate() -> str:
    out = ["# generated from the tables in zyg/rules/scalar.py", ""]
    for mod in ("math", "np"):
        for name, d in UNARY.items():
            if not hasattr(math if mod == "math" else np, name):
                continue
            expr = with_module(d, mod)
            out += [f"@adjoint({mod}.{name})",
                    f"def {mod}_{name}_rule(x):",
                    f"    y = {_prim(mod, name)}(x)",
                    "    def back(dy):",
                    f"        return (dy * ({expr}),)",
                    "    return y, back", ""]
        for name, (da, db) in BINARY.items():
            if not hasattr(math if mod == "math" else np, name) or (mod, name) == ("math", "pow"):
                continue
            da = with_module(da, mod)
            dbs = "None" if db is None else f"dy * ({with_module(db, mod)})"
            out += [f"@adjoint({mod}.{name})",
                    f"def {mod}_{name}_rule(a, b):",
                    f"    y = {_prim(mod, name)}(a, b)",
                    "    def back(dy):",
                    f"        return (dy * ({da}), {dbs})",
                    "    return y, back", ""]
    for qual, params, back, primal in SPECIAL:
        fname = qual.replace(".", "_") + "_rule"
        out += [f"@adjoint({qual})",
                f"def {fname}({params}):",
                f"    y = {primal}",
                "    def back(dy):",
                f"        return ({back},)",
                "    return y, back", ""]
    out += _generate_complex()
    return "\n".join(out) + "\n"


def _rule_text(deco: str, fname: str, params: str, primal: str, back: str) -> List[str]:
    return [deco, f"def {fname}({params}):", f"    y = {primal}", "    def back(dy):",
            f"        return ({back},)", "    return y, back", ""]


def _generate_complex() -> List[str]:
    """The complex variants and the complex-only rules (see the module docstring)."""
    out = ["# complex numbers: dz += conj(f'(z)) * dy for holomorphic f (docs/complex.md)", ""]
    for name in UNARY:
        if name not in HOLOMORPHIC:
            continue
        d = COMPLEX_UNARY.get(name, UNARY[name])
        if hasattr(np, name):
            expr = with_module(d, "np")
            out += _rule_text(f"@complex_adjoint(np.{name})", f"np_{name}_crule", "x",
                              f"np.{name}(x)", f"dy * np.conj({expr})")
        if hasattr(cmath, name):
            # cmath functions always return complex: the conjugated form is their only rule
            expr = with_module(d, "cmath")
            out += _rule_text(f"@adjoint(cmath.{name})", f"cmath_{name}_rule", "x",
                              f"cmath.{name}(x)", f"dy * np.conj({expr})")
    for qual, (da, db, *sign) in COMPLEX_BINARY.items():
        neg = "-" if sign else ""
        primal = {"operator.mul": "a * b", "operator.truediv": "a / b", "operator.pow": "a ** b",
                  "np.power": "np.power(a, b)"}[qual]
        back = f"dy * np.conj({da}), {neg}dy * np.conj({db})"
        out += _rule_text(f"@complex_adjoint({qual})", qual.replace(".", "_") + "_crule", "a, b",
                          primal, back)
    for qual, params, cback, rback, primal in COMPLEX_SPECIAL:
        fname = qual.replace(".", "_")
        if rback is not None:
            out += _rule_text(f"@adjoint({qual})", fname + "_rule", params, primal, rback)
        if cback != rback:
            out += _rule_text(f"@complex_adjoint({qual})", fname + "_crule", params, primal, cback)
    return out


def _install() -> None:
    src = _generate()
    linecache.cache[_FILENAME] = (len(src), None, src.splitlines(True), _FILENAME)
    ns = {"math": math, "cmath": cmath, "np": np, "operator": operator, "builtins": builtins,
          "adjoint": adjoint, "complex_adjoint": complex_adjoint, "real_part": real_part,
          "imag_part": imag_part}
    exec(compile(src, _FILENAME, "exec"), ns)
    for fn in NONDIFF:
        nondifferentiable(fn)
    from ..ssa import analysis
    analysis.KIND_HOOKS[operator.invert] = _kind_invert
    # every other built-in rule (math functions, min/max, %, ...) has no complex form
    complex_ok = {getattr(cmath, n) for n in UNARY if hasattr(cmath, n)} | {
        operator.add, operator.sub, operator.neg, operator.pos, builtins.complex, cmath.rect,
        np.conjugate, np.real, np.imag, np.angle, cmath.phase, real_part, imag_part}
    for fn in list(registry_rules()):
        r = lookup(fn)
        if r is not None and r.complex is None and fn not in complex_ok:
            r.real_only = True


_install()
