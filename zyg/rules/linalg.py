"""Rules of linear algebra: ``np.linalg``, ``scipy.linalg`` triangular solves, ``np.einsum``.

Three kinds of entries, all looked up by :func:`zyg.rules.arrays.rule_for`:

* ``LINALG_RULES``: functions with one result (``solve``, ``inv``, ``det``, ``cholesky``,
  ``norm``, ``trace``, ``diag``, ``kron``, ``tensordot``, ``einsum``, ``solve_triangular``,
  ``cho_solve``).  An :class:`~zyg.rules.arrays.ARule` whose ``back`` gives the cotangent
  contribution, and where the forward-mode machinery needs it, ``fwd`` the tangent;
* ``TUPLE_RULES``: functions returning a tuple (``slogdet``, ``eigh``, ``qr``, ``lstsq``,
  ``cho_factor``).  After tuple flattening (``zyg/ssa/tuples.py``) the call stays a
  non-differentiated statement ``r = fn(A)``, its elements are read with ``t_k = r[k]``,
  and :func:`split_tuple_calls` makes each element the user reads a statement
  ``r_k = TupleElt(fn, k)(A, ..., t_0, ..., t_n-1)`` whose primal is ``t_k`` and whose rule
  gives the contribution of ``dr_k`` alone (pullbacks are linear in the cotangents, so
  the contributions of the elements add up);
* helpers called by the generated code (``_zyg_chol_back``, ``_zyg_solve_triangular``,
  ...), numba-compiled on target "cpu", where scipy and ``np.einsum`` do not exist.
  A constant ``np.einsum`` subscript string (and ``np.tensordot``, which is turned into
  one) gets generated loop helpers: one for the result, one per operand for its cotangent
  (the einsum of ``dy`` with the other operands, subscripts rearranged).

Symmetric inputs (``cholesky``, ``eigh``, ``cho_factor``) follow numpy and LAPACK: only
one triangle of the matrix is read, so the gradient is zero on the other one and the
off-diagonal entries of the read triangle get both halves of the symmetric gradient.
Every rule is for real operands; complex ones raise (docs/linalg.md).
"""
from __future__ import annotations

import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..ssa import analysis
from ..ssa.analysis import array_dtype, array_kind, array_ndim, is_array, tuple_kind
from ..ssa.prims import Prim
from .arrays import _NOCONST, ARule, Ctx, _RuleError, outer_of

try:
    import scipy.linalg as _sla
except ImportError:         # scipy is optional: its functions are then never called
    _sla = None

LINALG_RULES: Dict[Any, ARule] = {}


def _T(x: str) -> str:
    """A transposed copy (numba's BLAS calls want contiguous operands)."""
    return f"np.ascontiguousarray({x}.T)"


def _real(c: Ctx, name: str) -> None:
    if c.cplx:
        raise _RuleError(f"{name} has no complex rule in zyg (docs/linalg.md)")


def _opt(c: Ctx, name: str, pos: int, default: Any) -> Any:
    """The constant option ``name`` (positional ``pos`` or keyword), else ``default``."""
    if len(c.x) > pos:
        v = c.const(pos)
        if v is _NOCONST:
            raise _RuleError(f"the argument {name} must be a constant")
        return v
    if name in c.kwnames:
        if name not in c.kwconsts:
            raise _RuleError(f"the argument {name}= must be a constant")
        return c.kwconsts[name]
    return default


def _only(c: Ctx, name: str, npos: int, kws: Tuple[str, ...] = ()) -> None:
    if len(c.x) > npos or any(k not in kws for k in c.kwnames):
        raise _RuleError(f"{name} is differentiable with {npos} argument(s)"
                         + (f" and {', '.join(k + '=' for k in kws)}" if kws else ""))


# --- one result ------------------------------------------------------------------------------
def _solve(c: Ctx, i: int) -> Optional[str]:
    _real(c, "np.linalg.solve")
    _only(c, "np.linalg.solve", 2)
    g = f"np.linalg.solve({_T(c.x[0])}, {c.dy})"
    if i == 1:
        return g
    return f"-{outer_of(g, c.y)}" if c.nd(1) == 1 else f"-({g} @ {_T(c.y)})"


def _solve_fwd(c: Ctx, i: int) -> str:
    if i == 1:
        return f"np.linalg.solve({c.x[0]}, {c.dy})"
    return f"-np.linalg.solve({c.x[0]}, {c.dy} @ {c.y})"


def _inv(c: Ctx, i: int) -> str:
    _real(c, "np.linalg.inv")
    _only(c, "np.linalg.inv", 1)
    return f"-({_T(c.y)} @ {c.dy} @ {_T(c.y)})"


def _det(c: Ctx, i: int) -> str:
    _real(c, "np.linalg.det")
    _only(c, "np.linalg.det", 1)
    return f"({c.dy} * {c.y}) * {_T(f'np.linalg.inv({c.x[0]})')}"


def _cholesky(c: Ctx, i: int) -> str:
    _real(c, "np.linalg.cholesky")
    _only(c, "np.linalg.cholesky", 1)
    return f"_zyg_chol_back({c.y}, {c.dy})"


def _trace(c: Ctx, i: int) -> str:
    _real(c, "np.trace")
    _only(c, "np.trace", 1)
    if c.nd(0) != 2:
        raise _RuleError("np.trace is differentiable for 2-D arrays")
    return f"{c.dy} * np.eye({c.x[0]}.shape[0], {c.x[0]}.shape[1])"


def _diag(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    _real(c, "np.diag")
    k = _opt(c, "k", 1, 0)
    if c.nd(0) == 1:
        return f"_zyg_diag_of({c.dy}, {k})"
    return f"_zyg_diag_into({c.dy}, {c.x[0]}, {k})"


def _kron(c: Ctx, i: int) -> str:
    _real(c, "np.kron")
    if c.nd(0) != c.nd(1) or c.nd(0) not in (1, 2):
        raise _RuleError("np.kron is differentiable for two 1-D or two 2-D arrays")
    return f"_zyg_kron_back{i}({c.dy}, {c.x[0]}, {c.x[1]})"


LINALG_RULES[np.linalg.solve] = ARule(_solve)
LINALG_RULES[np.linalg.solve].fwd = _solve_fwd
LINALG_RULES[np.linalg.inv] = ARule(_inv)
LINALG_RULES[np.linalg.inv].fwd = lambda c, i: f"-({c.y} @ {c.dy} @ {c.y})"
LINALG_RULES[np.linalg.det] = ARule(_det)
LINALG_RULES[np.linalg.cholesky] = ARule(_cholesky)
LINALG_RULES[np.linalg.cholesky].fwd = lambda c, i: f"_zyg_chol_fwd({c.y}, {c.dy})"
LINALG_RULES[np.trace] = ARule(_trace)
LINALG_RULES[np.diag] = ARule(_diag, kw_ok=("k",))
LINALG_RULES[np.kron] = ARule(_kron)


# --- norm ------------------------------------------------------------------------------------
def _ord_code(p: Any) -> float:
    """``ord`` as the number the helpers take (None and 'fro' are the 2-norm)."""
    if p is None or p == "fro":
        return 2.0
    if isinstance(p, str):
        raise _RuleError(f"np.linalg.norm with ord={p!r} along an axis is not supported")
    return float(p)


def _norm_parts(c: Ctx) -> Tuple[Any, Optional[int]]:
    if c.kwconst("keepdims", False) or (len(c.x) > 3 and c.const(3) not in (False, _NOCONST)):
        raise _RuleError("np.linalg.norm with keepdims=True is not supported; "
                         "use np.expand_dims on the result")
    p = _opt(c, "ord", 1, None)
    ax = _opt(c, "axis", 2, None)
    nd = c.nd(0)
    if isinstance(ax, tuple):
        if nd == 2 and sorted(a % 2 for a in ax) == [0, 1]:
            ax = None
        else:
            raise _RuleError("np.linalg.norm with a tuple axis is differentiable for (0, 1) of a 2-D array")
    if ax is not None:
        ax = ax + nd if ax < 0 else ax
        if nd == 1:
            ax = None
    return p, ax


def _fsrc(v: float) -> str:
    return "np.inf" if v == np.inf else "(-np.inf)" if v == -np.inf else repr(v)


def _vec_norm_back(x: str, y: str, dy: str, p: float) -> str:
    if p == 2.0:
        return f"{dy} * {x} / {y}"
    if p == 1.0:
        return f"{dy} * np.sign({x})"
    if p == 0.0:
        return f"0.0 * {x}"
    if p in (np.inf, -np.inf):
        m = f"(np.abs({x}) == {y})"
        return f"{dy} * np.sign({x}) * {m} / np.sum({m})"
    return f"{dy} * np.sign({x}) * (np.abs({x}) / {y}) ** {_fsrc(p - 1.0)}"


def _norm(c: Ctx, i: int) -> Optional[str]:
    if i != 0:
        return None
    p, ax = _norm_parts(c)
    x, y, dy = c.x[0], c.y, c.dy
    if ax is None and c.nd(0) in (1, 2) and (p is None or p == "fro" or (p == 2 and c.nd(0) == 1)):
        return f"{dy} * {x} / {y}"        # the 2-norm, complex operands included
    _real(c, "np.linalg.norm with this ord or an axis")
    if ax is not None:
        if c.nd(0) != 2:
            raise _RuleError("np.linalg.norm with an axis is differentiable for 2-D arrays")
        return f"_zyg_norm_axis_back({x}, {y}, {dy}, {_fsrc(_ord_code(p))}, {ax})"
    if c.nd(0) == 1:
        return _vec_norm_back(x, y, dy, _ord_code(p))
    if p is None or p == "fro":
        return f"{dy} * {x} / {y}"
    if c.nd(0) != 2:
        raise _RuleError("np.linalg.norm is differentiable for 1-D and 2-D arrays")
    code = {1: 1, -1: -1, np.inf: 3, -np.inf: -3, 2: 2, -2: -2, "nuc": 4}.get(p)
    if code is None:
        raise _RuleError(f"np.linalg.norm of a matrix with ord={p!r} is not differentiable")
    return f"{dy} * _zyg_matnorm_grad({x}, {y}, {code})"


def _norm_fwd(c: Ctx, i: int) -> str:
    """An axis: each output element is the norm of one line of ``x``."""
    p, ax = _norm_parts(c)
    g = _norm(Ctx(c.x, c.y, f"np.ones_like({c.y})", c.kinds, c.consts, c.kwnames, c.kwx,
                  c.kwkinds, c.kwconsts), 0)
    return f"np.sum(({g}) * {c.dy}, axis={ax})"


LINALG_RULES[np.linalg.norm] = ARule(_norm, kw_ok=("ord", "axis", "keepdims"))
LINALG_RULES[np.linalg.norm].fwd = _norm_fwd


# --- scipy.linalg triangular solves ------------------------------------------------------------
def _trans_code(t: Any) -> int:
    t = {"N": 0, "T": 1, "C": 1}.get(t, t) if isinstance(t, str) else t
    if t not in (0, 1, 2):
        raise _RuleError(f"solve_triangular with trans={t!r} is not supported")
    return 1 if t == 2 else int(t)     # real operands: 'C' is 'T'


def _tri_opts(c: Ctx) -> Tuple[int, bool, bool]:
    for k in c.kwnames:
        if k not in ("trans", "lower", "unit_diagonal", "overwrite_b", "check_finite"):
            raise _RuleError(f"solve_triangular's {k}= is not supported")
    if len(c.x) > 5:
        raise _RuleError("solve_triangular is supported with (a, b, trans, lower, unit_diagonal)")
    return (_trans_code(_opt(c, "trans", 2, 0)), bool(_opt(c, "lower", 3, False)),
            bool(_opt(c, "unit_diagonal", 4, False)))


def _solve_tri(c: Ctx, i: int) -> Optional[str]:
    if i > 1:
        return None
    _real(c, "scipy.linalg.solve_triangular")
    trans, lower, unit = _tri_opts(c)
    g = f"_zyg_solve_triangular({c.x[0]}, {c.dy}, {lower}, {1 - trans}, {unit})"
    if i == 1:
        return g
    return f"_zyg_tri_back_a({g}, {c.y}, {lower}, {trans}, {unit})"


def _solve_tri_fwd(c: Ctx, i: int) -> str:
    trans, lower, unit = _tri_opts(c)
    if i == 1:
        return f"_zyg_solve_triangular({c.x[0]}, {c.dy}, {lower}, {trans}, {unit})"
    # d x = -op(A)^-1 op(dA) x, with dA restricted to what the solve reads
    da = f"_zyg_tri_mask({c.dy}, {lower}, {unit})"
    op = _T(da) if trans else da
    return f"-_zyg_solve_triangular({c.x[0]}, {op} @ {c.y}, {lower}, {trans}, {unit})"


def cho_solve_parts(c, lower, b):
    """``scipy.linalg.cho_solve((c, lower), b)`` with the tuple taken apart (what
    :func:`split_tuple_calls` turns the call into; its rule is below)."""
    return _sla.cho_solve((c, lower), b)


def _cho_solve(c: Ctx, i: int) -> Optional[str]:
    if i == 1:
        return None
    _real(c, "scipy.linalg.cho_solve")
    lower = c.const(1)
    if lower is _NOCONST:
        lower = c.x[1]
    g = f"_zyg_cho_solve({c.x[0]}, {lower}, {c.dy})"
    if i == 2:
        return g
    return f"_zyg_cho_solve_back_c({c.x[0]}, {lower}, {g}, {c.y})"


def _cho_solve_fwd(c: Ctx, i: int) -> Optional[str]:
    if i == 1:
        return "0.0"          # the flag lower
    lower = c.const(1)
    if lower is _NOCONST:
        lower = c.x[1]
    if i == 2:
        return f"_zyg_cho_solve({c.x[0]}, {lower}, {c.dy})"
    return f"_zyg_cho_solve_fwd_c({c.x[0]}, {lower}, {c.dy}, {c.y})"


if _sla is not None:
    LINALG_RULES[_sla.solve_triangular] = ARule(
        _solve_tri, kw_ok=("trans", "lower", "unit_diagonal", "overwrite_b", "check_finite"))
    LINALG_RULES[_sla.solve_triangular].fwd = _solve_tri_fwd
    LINALG_RULES[cho_solve_parts] = ARule(_cho_solve)
    LINALG_RULES[cho_solve_parts].fwd = _cho_solve_fwd


# --- einsum and tensordot ------------------------------------------------------------------------
def parse_einsum(subs: Any, nops: int) -> Tuple[List[str], str]:
    """(input subscripts, output subscript) of a constant einsum string."""
    if not isinstance(subs, str):
        raise _RuleError("np.einsum needs a constant subscript string as its first argument")
    s = subs.replace(" ", "")
    if "." in s:
        raise _RuleError("np.einsum with '...' is not supported: write every axis out")
    ins_s, out = (s.split("->") + [None])[:2] if "->" in s else (s, None)
    ins = ins_s.split(",")
    if len(ins) != nops:
        raise _RuleError(f"the subscripts {subs!r} name {len(ins)} operands, the call passes {nops}")
    letters = "".join(ins)
    if not all(ch.isalpha() for ch in letters + (out or "")):
        raise _RuleError(f"np.einsum subscripts {subs!r}: only letters, ',' and '->' are supported")
    if out is None:
        out = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
    if len(set(out)) != len(out) or any(ch not in letters for ch in out):
        raise _RuleError(f"np.einsum subscripts {subs!r}: invalid output")
    return ins, out


def tensordot_spec(nda: int, ndb: int, axes: Any) -> str:
    """The einsum string of ``np.tensordot`` of arrays of these ndims."""
    if isinstance(axes, int):
        ia, ib = list(range(nda - axes, nda)), list(range(axes))
    elif isinstance(axes, tuple) and len(axes) == 2:
        ia, ib = [list(a) if isinstance(a, tuple) else [a] for a in axes]
    else:
        raise _RuleError(f"np.tensordot axes={axes!r}: give an integer or a pair of lists")
    if len(ia) != len(ib):
        raise _RuleError("np.tensordot: the two axes lists differ in length")
    ia = [a % nda for a in ia]
    ib = [b % ndb for b in ib]
    la = [chr(ord("a") + k) for k in range(nda)]
    lb, nxt = [], nda
    for k in range(ndb):
        if k in ib:
            lb.append(la[ia[ib.index(k)]])
        else:
            lb.append(chr(ord("a") + nxt))
            nxt += 1
    out = [la[k] for k in range(nda) if k not in ia] + [lb[k] for k in range(ndb) if k not in ib]
    return f"{''.join(la)},{''.join(lb)}->{''.join(out)}"


_EINSUM_PY: Dict[str, Callable] = {}      # helper name -> python implementation
_EINSUM_LOOPS: Dict[str, Callable] = {}   # helper name -> loop function (compiled for cpu)


def _loop_fn(name: str, ins: List[str], out: str, like: bool) -> Callable:
    """``name(x0, ..., [like])``: sum over all letters of prod x_k[...] into ``out[...]``
    (the shape of ``like`` when given: repeated output letters write a diagonal, output
    letters no input has take their size from it)."""
    params = [f"x{k}" for k in range(len(ins))] + (["like"] if like else [])
    lines = [f"def {name}({', '.join(params)}):"]
    size: Dict[str, str] = {}
    for k, sub in enumerate(ins):
        for pos, ch in enumerate(sub):
            size.setdefault(ch, f"x{k}.shape[{pos}]")
    if like:
        for pos, ch in enumerate(out):
            size.setdefault(ch, f"like.shape[{pos}]")
    order = []
    for ch in out + "".join(ins):
        if ch not in order:
            order.append(ch)
    for ch in order:
        lines.append(f"    n_{ch} = {size[ch]}")
    dt = "like.dtype" if like else next((f"x{k}.dtype" for k, s in enumerate(ins) if s), "np.float64")
    if like:
        lines.append(f"    out = np.zeros(like.shape, {dt})")
    elif out:
        lines.append(f"    out = np.zeros(({''.join(f'n_{ch}, ' for ch in out)}), {dt})")
    else:
        lines.append(f"    out = np.zeros(1, {dt})")
    ind = "    "
    for ch in order:
        lines.append(f"{ind}for i_{ch} in range(n_{ch}):")
        ind += "    "
    prod = " * ".join(f"x{k}[{', '.join('i_' + ch for ch in s)}]" if s else f"x{k}"
                      for k, s in enumerate(ins))
    tgt = f"out[{', '.join('i_' + ch for ch in out)}]" if out else "out[0]"
    lines.append(f"{ind}{tgt} += {prod}")
    lines.append("    return out" if out or like else "    return out[0]")
    src = "\n".join(lines) + "\n"
    ns: Dict[str, Any] = {"np": np}
    exec(compile(src, f"<zyg-einsum {name}>", "exec"), ns)
    import linecache
    linecache.cache[f"<zyg-einsum {name}>"] = (len(src), None, src.splitlines(True), f"<zyg-einsum {name}>")
    return ns[name]


def _py_einsum(spec: str, loops: Callable, like: bool) -> Callable:
    """numpy's einsum where it can express the contraction, the loops where it cannot."""
    ins, out = spec.split("->")
    ok = len(set(out)) == len(out) and all(ch in ins for ch in out)
    if not ok:
        return loops
    if like:
        return lambda *a: np.einsum(spec, *a[:-1]) + np.zeros(a[-1].shape, a[-1].dtype)
    return lambda *a: np.einsum(spec, *a)


def einsum_family(ins: List[str], out: str) -> str:
    """Register the helpers of a contraction (result, and one cotangent per operand);
    returns their common name prefix."""
    spec = ",".join(ins) + "->" + out
    base = f"_zyg_einsum_{zlib.crc32(spec.encode()):08x}"
    if base + "_f" in _EINSUM_PY:
        return base
    loops = _loop_fn(base + "_f", ins, out, False)
    _EINSUM_LOOPS[base + "_f"] = loops
    _EINSUM_PY[base + "_f"] = lambda *a: np.einsum(spec, *a)
    for k in range(len(ins)):
        bins = [out] + [s for j, s in enumerate(ins) if j != k]
        bspec = ",".join(bins) + "->" + ins[k]
        name = f"{base}_b{k}"
        loops = _loop_fn(name, bins, ins[k], True)
        _EINSUM_LOOPS[name] = loops
        _EINSUM_PY[name] = _py_einsum(bspec, loops, True)
    return base


def _einsum_ops(c: Ctx) -> Tuple[List[str], List[str], str]:
    """(operands, subscripts, helper prefix) of an einsum or tensordot call."""
    if any(k != "axes" for k in c.kwnames):
        raise _RuleError(f"keyword arguments {c.kwnames} of np.einsum / np.tensordot are not supported")
    if isinstance(c.const(0, None), str):
        ins, out = parse_einsum(c.const(0), len(c.x) - 1)
        return c.x[1:], ins, einsum_family(ins, out)
    axes = _opt(c, "axes", 2, 2)
    ins, out = parse_einsum(tensordot_spec(c.nd(0), c.nd(1), axes), 2)
    return c.x[:2], ins, einsum_family(ins, out)


def _einsum(c: Ctx, i: int) -> Optional[str]:
    _real(c, "np.einsum")
    ops, ins, base = _einsum_ops(c)
    k = i - (len(c.x) - len(ops))
    if k < 0 or k >= len(ops):
        return None
    others = [o for j, o in enumerate(ops) if j != k]
    return f"{base}_b{k}({', '.join([c.dy] + others + [ops[k]])})"


def _einsum_fwd(c: Ctx, i: int) -> str:
    """Multilinear: the result with operand ``i`` replaced by its tangent."""
    ops, ins, base = _einsum_ops(c)
    k = i - (len(c.x) - len(ops))
    args = [c.dy if j == k else o for j, o in enumerate(ops)]
    return f"{base}_f({', '.join(args)})"


LINALG_RULES[np.einsum] = ARule(_einsum)
LINALG_RULES[np.einsum].fwd = _einsum_fwd
LINALG_RULES[np.tensordot] = ARule(_einsum, kw_ok=("axes",))
LINALG_RULES[np.tensordot].fwd = _einsum_fwd


# --- tuple results -----------------------------------------------------------------------------------
class TupleRule:
    """Rules of a function with a tuple result: ``back(c, elems, k, i)`` the contribution
    of element ``k``'s cotangent ``c.dy`` to operand ``i`` (``c.y`` is element k,
    ``elems`` all elements), ``fwd(c, elems, k, i)`` the tangent of element ``k`` from
    operand ``i``'s tangent ``c.dy``."""

    def __init__(self, back, fwd=None, kw_ok: tuple = ()):
        self.back, self.fwd, self.kw_ok = back, fwd, kw_ok


TUPLE_RULES: Dict[Any, TupleRule] = {}


def _slogdet(c, e, k, i):
    _real(c, "np.linalg.slogdet")
    if k == 0:
        return None            # the sign is piecewise constant
    return f"{c.dy} * {_T(f'np.linalg.inv({c.x[0]})')}"


def _slogdet_fwd(c, e, k, i):
    if k == 0:
        return "0.0"
    return f"np.sum({_T(f'np.linalg.inv({c.x[0]})')} * {c.dy})"


def _uplo(c: Ctx) -> bool:
    u = _opt(c, "UPLO", 1, "L")
    if u not in ("L", "U"):
        raise _RuleError(f"eigh's UPLO={u!r}: 'L' or 'U'")
    return u == "L"


def _eigh(c, e, k, i):
    _real(c, "np.linalg.eigh")
    lower = _uplo(c)
    if k == 0:
        return f"_zyg_eigh_back_w({e[1]}, {c.dy}, {lower})"
    return f"_zyg_eigh_back_v({e[0]}, {e[1]}, {c.dy}, {lower})"


def _eigh_fwd(c, e, k, i):
    lower = _uplo(c)
    if k == 0:
        return f"_zyg_eigh_fwd_w({e[1]}, {c.dy}, {lower})"
    return f"_zyg_eigh_fwd_v({e[0]}, {e[1]}, {c.dy}, {lower})"


def _qr_mode(c: Ctx) -> None:
    if _opt(c, "mode", 1, "reduced") != "reduced":
        raise _RuleError("np.linalg.qr is differentiable with mode='reduced' (the default)")


def _qr(c, e, k, i):
    _real(c, "np.linalg.qr")
    _qr_mode(c)
    return f"_zyg_qr_back_{'qr'[k]}({e[0]}, {e[1]}, {c.dy})"


def _qr_fwd(c, e, k, i):
    _qr_mode(c)
    return f"_zyg_qr_fwd_{'qr'[k]}({e[0]}, {e[1]}, {c.dy})"


def _lstsq(c, e, k, i):
    _real(c, "np.linalg.lstsq")
    if k != 0:
        raise _RuleError("only the solution (the first result) of np.linalg.lstsq is differentiable; "
                         "compute the residuals from it: np.sum((b - A @ x) ** 2, axis=0)")
    A, b = c.x[0], c.x[1]
    if i == 1:
        return f"_zyg_lstsq_back_b({A}, {c.dy})"
    return f"_zyg_lstsq_back_a({A}, {b}, {e[0]}, {c.dy})"


def _lstsq_fwd(c, e, k, i):
    if k != 0:
        raise _RuleError("only the solution (the first result) of np.linalg.lstsq is differentiable")
    A, b = c.x[0], c.x[1]
    ta, tb = (c.dy, None) if i == 0 else (None, c.dy)
    return f"_zyg_lstsq_fwd({A}, {b}, {e[0]}, {ta or 'np.zeros_like(' + A + ')'}, " \
           f"{tb or 'np.zeros_like(' + b + ')'})"


def _cho_factor(c, e, k, i):
    _real(c, "scipy.linalg.cho_factor")
    if k != 0 or i != 0:
        return None
    lower = bool(_opt(c, "lower", 1, False))
    return f"_zyg_cho_factor_back({e[0]}, {c.dy}, {lower}, {cho_factor_keeps()})"


def _cho_factor_fwd(c, e, k, i):
    if k != 0 or i != 0:
        return "0.0"         # the flag lower; only the matrix has a tangent
    lower = bool(_opt(c, "lower", 1, False))
    return f"_zyg_cho_factor_fwd({e[0]}, {c.dy}, {lower}, {cho_factor_keeps()})"


TUPLE_RULES[np.linalg.slogdet] = TupleRule(_slogdet, _slogdet_fwd)
TUPLE_RULES[np.linalg.eigh] = TupleRule(_eigh, _eigh_fwd, kw_ok=("UPLO",))
TUPLE_RULES[np.linalg.qr] = TupleRule(_qr, _qr_fwd, kw_ok=("mode",))
TUPLE_RULES[np.linalg.lstsq] = TupleRule(_lstsq, _lstsq_fwd, kw_ok=("rcond",))
if _sla is not None:
    TUPLE_RULES[_sla.cho_factor] = TupleRule(_cho_factor, _cho_factor_fwd, kw_ok=("lower", "overwrite_a",
                                                                         "check_finite"))


class TupleElt(Prim):
    """Element ``k`` of the tuple result of ``fn`` called on ``nargs`` positional operands:
    operands ``(*args, t_0, ..., t_n-1)``, the elements already computed; see
    :func:`split_tuple_calls`."""

    def __init__(self, fn: Any, k: int, nargs: int):
        from ..ssa.ir import callee_name
        self.fn, self.k, self.nargs = fn, k, nargs
        self.name = f"{callee_name(fn)}(...)[{k}]"

    def _key(self):
        return (id(self.fn), self.k, self.nargs)

    def _zyg_kind(self, kinds) -> str:
        return kinds[self.nargs + self.k]

    def __call__(self, *args, **kw):
        return args[self.nargs + self.k]

    def _split(self, c: Ctx) -> Tuple[Ctx, List[str]]:
        n = self.nargs
        sub = Ctx(c.x[:n], c.y, c.dy, c.kinds[:n], c.consts[:n], c.kwnames, c.kwx, c.kwkinds,
                  c.kwconsts)
        return sub, c.x[n:]

    # reverse mode (zyg/pullbacks/arrays.py)
    def primal_src(self, em, st, args: List[str]) -> str:
        return args[self.nargs + self.k]

    def array_rule(self, em, st, active_ops) -> ARule:
        rule = TUPLE_RULES[self.fn]

        def back(c: Ctx, i: int) -> Optional[str]:
            if i >= self.nargs:
                return None
            sub, elems = self._split(c)
            return rule.back(sub, elems, self.k, i)
        return ARule(back, kw_ok=rule.kw_ok)

    # forward mode (zyg/pullbacks/forward.py)
    def tangent_src(self, fw, st, args: List[str]) -> str:
        from ..ssa.analysis import is_array as _is_arr
        rule = TUPLE_RULES[self.fn]
        e = st.expr
        from ..ssa.ir import Const, Undef
        consts = [a.value if isinstance(a, Const) and not isinstance(a, Undef) else _NOCONST
                  for a in e.args]
        kwc = {k: v.value if isinstance(v, Const) else _NOCONST for k, v in e.kwargs.items()}
        terms = []
        for i in range(self.nargs):
            t = fw.t(e.args[i])
            if t is None:
                continue
            if rule.fwd is None:
                from ..errors import NoAdjoint
                raise fw.err(st, f"no forward rule for {self.name} (zyg.jvp); use reverse mode", NoAdjoint)
            c = Ctx(args[:self.nargs], args[self.nargs + self.k], t,
                    [fw.kind(a) for a in e.args[:self.nargs]], consts[:self.nargs], list(e.kwargs),
                    {k: fw.src(v) for k, v in e.kwargs.items()},
                    {k: fw.kind(v) for k, v in e.kwargs.items()}, kwc)
            try:
                terms.append(f"({rule.fwd(c, args[self.nargs:], self.k, i)})")
            except _RuleError as ex:
                from ..errors import NoAdjoint
                raise fw.err(st, f"{self.name}: {ex}", NoAdjoint)
        if not terms:
            return "np.zeros_like(%s)" % args[self.nargs + self.k] if _is_arr(fw.kind(st.var)) else "0.0"
        return " + ".join(terms)


def is_tuple_call(fn: Any) -> bool:
    """A call whose tuple result is differentiated through :class:`TupleElt` statements
    (the call itself is not differentiated)."""
    try:
        return fn in TUPLE_RULES
    except TypeError:
        return False


def split_tuple_calls(fn, kinds: Dict[int, str]) -> bool:
    """After tuple flattening: give each differentiable element of a ``TUPLE_RULES`` call's
    result its own :class:`TupleElt` statement, and turn ``cho_solve((c, lower), b)`` into
    ``cho_solve_parts(c, lower, b)``.  ``fn`` is modified; True if anything changed."""
    from ..ssa.ir import Call, Const, Stmt, Var
    from ..ssa.prims import GetItem, MakeTuple
    top = max([p.id for b in fn.iter_blocks() for p in b.params] +
              [s.var.id for b in fn.iter_blocks() for s in b.stmts if s.var is not None] + [0])
    counter = [top]
    changed = False
    made: Dict[int, Stmt] = {}
    for blk in fn.iter_blocks():
        for st in blk.stmts:
            if st.var is not None and isinstance(st.expr.fn, MakeTuple):
                made[st.var.id] = st
    for blk in fn.iter_blocks():
        out: List[Stmt] = []
        calls: Dict[int, Tuple[Stmt, List[Optional[Var]]]] = {}
        pending: List[Tuple[Stmt, int]] = []
        for st in blk.stmts:
            e = st.expr
            if _sla is not None and e.fn is _sla.cho_solve and len(e.args) == 2 and not e.kwargs \
                    and isinstance(e.args[0], Var) and e.args[0].id in made \
                    and len(made[e.args[0].id].expr.args) == 2:
                parts = made[e.args[0].id].expr.args
                out.append(Stmt(st.var, Call(cho_solve_parts, [parts[0], parts[1], e.args[1]], {}), st.loc))
                changed = True
                continue
            if st.var is not None and is_tuple_call(e.fn) and analysis.is_tuple(kinds.get(st.var.id, "")):
                calls[st.var.id] = (st, [None] * len(analysis.tuple_elts(kinds[st.var.id])))
                out.append(st)
                continue
            if isinstance(e.fn, GetItem) and e.fn.spec == ("i",) and isinstance(e.args[0], Var) \
                    and e.args[0].id in calls and isinstance(e.args[1], Const) and st.var is not None:
                call, elems = calls[e.args[0].id]
                k = e.args[1].value
                counter[0] += 1
                t = Var(counter[0], f"{st.var.hint or 't'}_e")
                kinds[t.id] = kinds.get(st.var.id, "undef")
                elems[k] = t
                out.append(Stmt(t, Call(e.fn, list(e.args), {}), st.loc))
                if analysis.differentiable(kinds.get(st.var.id, "")):
                    pending.append((st, k))
                else:
                    out.append(Stmt(st.var, Call(e.fn, list(e.args), {}), st.loc))
                if all(x is not None for x in elems):
                    for ust, kk in pending:
                        if ust.expr.args[0].id != e.args[0].id:
                            continue
                        ce = call.expr
                        out.append(Stmt(ust.var, Call(TupleElt(ce.fn, kk, len(ce.args)),
                                                      list(ce.args) + list(elems), dict(ce.kwargs)),
                                        ust.loc))
                    pending = [p for p in pending if p[0].expr.args[0].id != e.args[0].id]
                    changed = True
                continue
            out.append(st)
        for ust, kk in pending:     # a tuple whose elements are not all read: keep the reads
            out.append(Stmt(ust.var, Call(ust.expr.fn, list(ust.expr.args), {}), ust.loc))
        blk.stmts = out
    return changed


# --- result kinds ------------------------------------------------------------------------------------
def _is_const(c: Any) -> bool:
    return c is not analysis._NOCONST


def _kind_same(kinds, consts):
    return kinds[0] if kinds and is_array(kinds[0]) else None


def _kind_einsum(kinds, consts):
    if not consts or not _is_const(consts[0]) or not isinstance(consts[0], str):
        return None
    try:
        ins, out = parse_einsum(consts[0], len(kinds) - 1)
    except _RuleError:
        return None
    arrs = [k for k in kinds[1:] if is_array(k)]
    if not arrs or any(is_array(k) and array_ndim(k) != len(s) for k, s in zip(kinds[1:], ins)):
        return None
    einsum_family(ins, out)
    dt = np.result_type(*[np.dtype(array_dtype(k)) for k in arrs])
    if not out:
        return "complex" if dt.kind == "c" else "float"
    return array_kind(dt, len(out))


def _kind_tensordot(kinds, consts):
    if len(kinds) < 2 or not (is_array(kinds[0]) and is_array(kinds[1])):
        return None
    axes = consts[2] if len(consts) > 2 and _is_const(consts[2]) else 2
    try:
        ins, out = parse_einsum(tensordot_spec(array_ndim(kinds[0]), array_ndim(kinds[1]), axes), 2)
    except (_RuleError, ValueError, IndexError):
        return None
    einsum_family(ins, out)
    dt = np.result_type(np.dtype(array_dtype(kinds[0])), np.dtype(array_dtype(kinds[1])))
    if not out:
        return "complex" if dt.kind == "c" else "float"
    return array_kind(dt, len(out))


def _kind_second(kinds, consts):
    return kinds[1] if len(kinds) > 1 and is_array(kinds[1]) else None


def _kind_cho_factor(kinds, consts):
    return tuple_kind([kinds[0], "bool"]) if kinds and is_array(kinds[0]) else None


def _kind_cho_solve_parts(kinds, consts):
    return kinds[2] if len(kinds) > 2 and is_array(kinds[2]) else None


analysis.KIND_HOOKS[np.linalg.cholesky] = _kind_same
analysis.KIND_HOOKS[np.linalg.inv] = _kind_same
analysis.KIND_HOOKS[np.einsum] = _kind_einsum
analysis.KIND_HOOKS[np.tensordot] = _kind_tensordot
analysis.KIND_HOOKS[cho_solve_parts] = _kind_cho_solve_parts
if _sla is not None:
    analysis.KIND_HOOKS[_sla.solve_triangular] = _kind_second
    analysis.KIND_HOOKS[_sla.cho_factor] = _kind_cho_factor


# --- primal calls ------------------------------------------------------------------------------------
def primal_call(fn: Any, args: List[str], kinds: List[str], kwargs: Dict[str, Any]) -> Optional[str]:
    """Source of a linear-algebra call where numba needs another spelling (helpers that
    exist on both targets); None to call ``fn`` itself.  ``kwargs``: name -> (source,
    constant or _NOCONST)."""
    if fn is np.einsum:
        ins, out = parse_einsum(_strip_quotes(args[0]), len(args) - 1)
        return f"{einsum_family(ins, out)}_f({', '.join(args[1:])})"
    if fn is np.tensordot:
        axes = kwargs["axes"][1] if "axes" in kwargs else (_eval_const(args[2]) if len(args) > 2 else 2)
        if axes is _NOCONST:
            raise _RuleError("np.tensordot's axes must be a constant")
        nd = [array_ndim(k) for k in kinds[:2]]
        ins, out = parse_einsum(tensordot_spec(nd[0], nd[1], axes), 2)
        return f"{einsum_family(ins, out)}_f({args[0]}, {args[1]})"
    if fn is np.linalg.norm and (len(args) > 1 or kwargs):
        ax = kwargs["axis"][1] if "axis" in kwargs else (_eval_const(args[2]) if len(args) > 2 else None)
        p = kwargs["ord"][1] if "ord" in kwargs else (_eval_const(args[1]) if len(args) > 1 else None)
        if ax is _NOCONST or p is _NOCONST:
            raise _RuleError("np.linalg.norm's ord and axis must be constants")
        if kwargs.get("keepdims", (None, False))[1]:
            raise _RuleError("np.linalg.norm with keepdims=True is not supported")
        nd = array_ndim(kinds[0])
        if ax is None or (nd == 1 and ax in (0, -1)) or (isinstance(ax, tuple) and nd == 2):
            if p == "nuc":
                return f"_zyg_nuc_norm({args[0]})"
            # numba takes no string ord: 'fro' is the default
            ps = "" if p in (None, "fro") else f", {args[1] if len(args) > 1 else kwargs['ord'][0]}"
            return f"np.linalg.norm({args[0]}{ps})"
        if nd != 2:
            raise _RuleError("np.linalg.norm with an axis is supported for 2-D arrays")
        return f"_zyg_norm_axis({args[0]}, {_fsrc(_ord_code(p))}, {ax % 2})"
    if fn is np.linalg.eigh and (len(args) > 1 or "UPLO" in kwargs):
        u = kwargs["UPLO"][1] if "UPLO" in kwargs else _eval_const(args[1])
        if u == "U":
            return f"_zyg_eigh_upper({args[0]})"
        return f"np.linalg.eigh({args[0]})"
    if fn is np.linalg.lstsq and ("rcond" in kwargs or len(args) > 2):
        r = kwargs["rcond"][1] if "rcond" in kwargs else _eval_const(args[2])
        if r is None:      # numba takes no None; numpy's default cutoff for rcond=None
            return f"np.linalg.lstsq({args[0]}, {args[1]})"
        return None
    if _sla is not None and fn is _sla.solve_triangular:
        pos = {"trans": 2, "lower": 3, "unit_diagonal": 4}
        vals = {}
        for name, p in pos.items():
            if name in kwargs:
                vals[name] = kwargs[name][1]
            elif len(args) > p:
                vals[name] = _eval_const(args[p])
            else:
                vals[name] = {"trans": 0, "lower": False, "unit_diagonal": False}[name]
            if vals[name] is _NOCONST:
                raise _RuleError(f"solve_triangular's {name} must be a constant")
        return (f"_zyg_solve_triangular({args[0]}, {args[1]}, {bool(vals['lower'])}, "
                f"{_trans_code(vals['trans'])}, {bool(vals['unit_diagonal'])})")
    if _sla is not None and fn is _sla.cho_factor:
        lower = kwargs["lower"][1] if "lower" in kwargs else (_eval_const(args[1]) if len(args) > 1 else False)
        if lower is _NOCONST:
            raise _RuleError("cho_factor's lower must be a constant")
        return f"_zyg_cho_factor({args[0]}, {bool(lower)}, {cho_factor_keeps()})"
    if fn is cho_solve_parts:
        return f"_zyg_cho_solve({args[0]}, {args[1]}, {args[2]})"
    if _sla is not None and fn is _sla.cho_solve:
        raise _RuleError("cho_solve is supported as cho_solve((c, lower), b) with the pair written "
                         "out or unpacked from cho_factor")
    return None


def _eval_const(src: str) -> Any:
    """A rendered constant operand back as its value (sources of constants are literals)."""
    import ast
    try:
        return ast.literal_eval(src)
    except (ValueError, SyntaxError):
        if src in ("float('inf')", "np.inf"):
            return np.inf
        if src in ("float('-inf')", "(-np.inf)"):
            return -np.inf
        return _NOCONST


def _strip_quotes(src: str) -> Any:
    v = _eval_const(src)
    if v is _NOCONST:
        raise _RuleError("np.einsum needs a constant subscript string as its first argument")
    return v


# --- helpers (numba-compatible; compiled for target "cpu") -----------------------------------------
def sym_to_triangle(G, lower):
    """The gradient of a function of the symmetric matrix built from one triangle."""
    n = G.shape[0]
    out = np.zeros((n, n), G.dtype)
    for i in range(n):
        for j in range(n):
            s = 0.5 * (G[i, j] + G[j, i])
            if i == j:
                out[i, j] = s
            elif (i > j) == lower:
                out[i, j] = 2.0 * s
    return out


def sym_from_triangle(dA, lower):
    n = dA.shape[0]
    out = np.empty((n, n), dA.dtype)
    for i in range(n):
        for j in range(n):
            if (i >= j) == lower or i == j:
                out[i, j] = dA[i, j]
            else:
                out[i, j] = dA[j, i]
    return out


def chol_back(L, dL):
    """dA of L = cholesky(A) (A's lower triangle is read)."""
    n = L.shape[0]
    P = np.tril(np.ascontiguousarray(L.T) @ dL)
    for i in range(n):
        P[i, i] *= 0.5
    Lt = np.ascontiguousarray(L.T)
    X = np.linalg.solve(Lt, P)                                   # L^-T P
    S = np.ascontiguousarray(np.linalg.solve(Lt, np.ascontiguousarray(X.T)).T)   # L^-T P L^-1
    return sym_to_triangle(S, True)


def chol_fwd(L, dA):
    dS = sym_from_triangle(dA, True)
    Linv_dA = np.linalg.solve(L, dS)
    M = np.ascontiguousarray(np.linalg.solve(L, np.ascontiguousarray(Linv_dA.T)).T)  # L^-1 dA L^-T
    P = np.tril(M)
    for i in range(L.shape[0]):
        P[i, i] *= 0.5
    return L @ P


def _lower_half_diag(M):
    """M's lower triangle with its diagonal halved, in place (Phi in Murray's rules)."""
    n = M.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            M[i, j] = 0.0
        M[i, i] *= 0.5
    return M


def chol_back_loops(L, dL):
    """chol_back for compiled code: triangular solves by substitution (numba's
    np.linalg.solve and np.tril cost ~5 s of a first call's compile)."""
    P = lower_half_diag(np.ascontiguousarray(L.T) @ dL)
    X = solve_triangular(L, P, True, 1, False)                        # L^-T P
    S = np.ascontiguousarray(solve_triangular(L, np.ascontiguousarray(X.T), True, 1, False).T)
    return sym_to_triangle(S, True)


def chol_fwd_loops(L, dA):
    dS = sym_from_triangle(dA, True)
    A = solve_triangular(L, dS, True, 0, False)                        # L^-1 dA
    M = np.ascontiguousarray(solve_triangular(L, np.ascontiguousarray(A.T), True, 0, False).T)
    return L @ lower_half_diag(M)


def diag_of(dy, k):
    """The cotangent of v in np.diag(v, k): the k-th diagonal of dy."""
    n = dy.shape[0] - abs(k)
    out = np.empty(n, dy.dtype)
    for i in range(n):
        out[i] = dy[i, i + k] if k >= 0 else dy[i - k, i]
    return out


def diag_into(dy, A, k):
    """The cotangent of A in np.diag(A, k): dy on the k-th diagonal of A's shape."""
    out = np.zeros(A.shape, dy.dtype)
    for i in range(dy.shape[0]):
        if k >= 0:
            out[i, i + k] = dy[i]
        else:
            out[i - k, i] = dy[i]
    return out


def kron_back0(dy, a, b):
    if a.ndim == 1:
        return np.ascontiguousarray(dy).reshape((a.shape[0], b.shape[0])) @ b
    out = np.zeros(a.shape, dy.dtype)
    p, q = b.shape[0], b.shape[1]
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = np.sum(dy[i * p:(i + 1) * p, j * q:(j + 1) * q] * b)
    return out


def kron_back1(dy, a, b):
    if a.ndim == 1:
        return a @ np.ascontiguousarray(dy).reshape((a.shape[0], b.shape[0]))
    out = np.zeros(b.shape, dy.dtype)
    p, q = b.shape[0], b.shape[1]
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out += a[i, j] * dy[i * p:(i + 1) * p, j * q:(j + 1) * q]
    return out


def _line_norm(v, p):
    if p == 2.0:
        return np.sqrt(np.sum(v * v))
    if p == 1.0:
        return np.sum(np.abs(v))
    if p == np.inf:
        return np.max(np.abs(v))
    if p == -np.inf:
        return np.min(np.abs(v))
    if p == 0.0:
        return float(np.sum(v != 0))
    return np.sum(np.abs(v) ** p) ** (1.0 / p)


def norm_axis(x, p, axis):
    """np.linalg.norm(x, p, axis) of a 2-D array (numba has no axis=)."""
    if axis == 0:
        out = np.empty(x.shape[1], x.dtype)
        for j in range(x.shape[1]):
            out[j] = line_norm(np.ascontiguousarray(x[:, j]), p)
    else:
        out = np.empty(x.shape[0], x.dtype)
        for i in range(x.shape[0]):
            out[i] = line_norm(np.ascontiguousarray(x[i, :]), p)
    return out


def _line_norm_back(v, y, p):
    """d norm(v, p) / dv."""
    if p == 2.0:
        return v / y
    if p == 1.0:
        return np.sign(v)
    if p == 0.0:
        return 0.0 * v
    if p == np.inf or p == -np.inf:
        m = (np.abs(v) == y) * 1.0
        return np.sign(v) * m / np.sum(m)
    return np.sign(v) * (np.abs(v) / y) ** (p - 1.0)


def norm_axis_back(x, y, dy, p, axis):
    out = np.empty(x.shape, x.dtype)
    if axis == 0:
        for j in range(x.shape[1]):
            out[:, j] = dy[j] * line_norm_back(np.ascontiguousarray(x[:, j]), y[j], p)
    else:
        for i in range(x.shape[0]):
            out[i, :] = dy[i] * line_norm_back(np.ascontiguousarray(x[i, :]), y[i], p)
    return out


def matnorm_grad(x, y, code):
    """d np.linalg.norm(x, ord) / dx of a matrix: ord 1/-1 (columns), inf/-inf (rows)
    as codes +-1, +-3; 2/-2 (extreme singular values) +-2; 'nuc' 4."""
    if code == 2 or code == -2 or code == 4:
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        if code == 4:
            return np.ascontiguousarray(u) @ np.ascontiguousarray(vt)
        k = 0 if code == 2 else s.shape[0] - 1
        return np.outer(u[:, k], vt[k, :])
    a = np.abs(x)
    out = np.zeros(x.shape, x.dtype)
    if code == 1 or code == -1:
        cnt = 0
        for j in range(x.shape[1]):
            if np.sum(a[:, j]) == y:
                cnt += 1
        for j in range(x.shape[1]):
            if np.sum(a[:, j]) == y:
                out[:, j] = np.sign(x[:, j]) / cnt
    else:
        cnt = 0
        for i in range(x.shape[0]):
            if np.sum(a[i, :]) == y:
                cnt += 1
        for i in range(x.shape[0]):
            if np.sum(a[i, :]) == y:
                out[i, :] = np.sign(x[i, :]) / cnt
    return out


def solve_triangular_loops(a, b, lower, trans, unit):
    """x with op(a) x = b, op(a) = a (trans 0) or a.T (trans 1), reading one triangle of a."""
    n = a.shape[0]
    low = lower if trans == 0 else not lower
    x = np.ascontiguousarray(b).copy()
    x2 = x.reshape((n, -1))
    for col in range(x2.shape[1]):
        for s in range(n):
            i = s if low else n - 1 - s
            acc = x2[i, col]
            for t in range(s):
                j = t if low else n - 1 - t
                aij = a[i, j] if trans == 0 else a[j, i]
                acc -= aij * x2[j, col]
            x2[i, col] = acc if unit else acc / a[i, i]
    return x


def solve_triangular_py(a, b, lower, trans, unit):
    return _sla.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)


def tri_mask(dA, lower, unit):
    out = np.tril(dA) if lower else np.triu(dA)
    if unit:
        for i in range(min(dA.shape[0], dA.shape[1])):
            out[i, i] = 0.0
    return out


def tri_back_a(g, x, lower, trans, unit):
    """dA of x = solve_triangular(A, b): -g x^T (trans 0) or -x g^T, on the triangle read."""
    g2 = np.ascontiguousarray(g).reshape((g.shape[0], -1))
    x2 = np.ascontiguousarray(x).reshape((x.shape[0], -1))
    if trans == 0:
        G = -(g2 @ np.ascontiguousarray(x2.T))
    else:
        G = -(x2 @ np.ascontiguousarray(g2.T))
    return tri_mask(G, lower, unit)


def nuc_norm_py(x):
    return np.linalg.norm(x, "nuc")


def nuc_norm_loops(x):
    return np.sum(np.linalg.svd(x)[1])


def eigh_upper_py(A):
    return np.linalg.eigh(A, UPLO="U")


def eigh_upper_loops(A):
    """numba's eigh reads the lower triangle: the upper one of A is the lower one of A.T
    (the eigenvectors may differ in sign from numpy's: LAPACK takes another path)."""
    return np.linalg.eigh(np.ascontiguousarray(A.T))


def eigh_back_w(V, dw, lower):
    G = (V * dw) @ np.ascontiguousarray(V.T)
    return sym_to_triangle(G, lower)


def eigh_back_v(w, V, dV, lower):
    n = w.shape[0]
    M = np.ascontiguousarray(V.T) @ dV
    for i in range(n):
        for j in range(n):
            M[i, j] = 0.0 if i == j else M[i, j] / (w[j] - w[i])
    G = V @ M @ np.ascontiguousarray(V.T)
    return sym_to_triangle(G, lower)


def eigh_fwd_w(V, dA, lower):
    dS = sym_from_triangle(dA, lower)
    return np.sum(V * (dS @ V), axis=0)


def eigh_fwd_v(w, V, dA, lower):
    dS = sym_from_triangle(dA, lower)
    M = np.ascontiguousarray(V.T) @ dS @ V
    n = w.shape[0]
    for i in range(n):
        for j in range(n):
            M[i, j] = 0.0 if i == j else M[i, j] / (w[j] - w[i])
    return V @ M


def _qr_check(Q, R):
    if R.shape[0] != R.shape[1]:
        raise ValueError("np.linalg.qr is differentiable for matrices with at least as many rows as columns")


def _copyltu(M):
    return np.tril(M) + np.ascontiguousarray(np.tril(M, -1).T)


def _times_rinv_t(X, R):
    """X R^-T."""
    return np.ascontiguousarray(np.linalg.solve(R, np.ascontiguousarray(X.T)).T)


def qr_back_q(Q, R, dQ):
    qr_check(Q, R)
    M = -(np.ascontiguousarray(dQ.T) @ Q)
    return times_rinv_t(dQ + Q @ copyltu(M), R)


def qr_back_r(Q, R, dR):
    qr_check(Q, R)
    M = R @ np.ascontiguousarray(dR.T)
    return times_rinv_t(Q @ copyltu(M), R)


def _qr_fwd_parts(Q, R, dA):
    qr_check(Q, R)
    C = times_rinv_t(np.ascontiguousarray(Q.T) @ dA, np.ascontiguousarray(R.T))  # Q^T dA R^-1
    L = np.tril(C, -1)
    Om = L - np.ascontiguousarray(L.T)
    dR = (C - Om) @ R
    return C, Om, dR


def qr_fwd_q(Q, R, dA):
    C, Om, dR = qr_fwd_parts(Q, R, dA)
    return times_rinv_t(dA, np.ascontiguousarray(R.T)) - Q @ C + Q @ Om


def qr_fwd_r(Q, R, dA):
    C, Om, dR = qr_fwd_parts(Q, R, dA)
    return dR


def _lstsq_check(A):
    if A.shape[0] < A.shape[1]:
        raise ValueError("np.linalg.lstsq is differentiable for matrices with at least as many "
                         "rows as columns (full column rank)")


def lstsq_back_b(A, dx):
    lstsq_check(A)
    At = np.ascontiguousarray(A.T)
    return A @ np.linalg.solve(At @ A, dx)


def lstsq_back_a(A, b, x, dx):
    lstsq_check(A)
    At = np.ascontiguousarray(A.T)
    g = np.linalg.solve(At @ A, dx)
    r = b - A @ x
    r2 = np.ascontiguousarray(r).reshape((r.shape[0], -1))
    g2 = np.ascontiguousarray(g).reshape((g.shape[0], -1))
    x2 = np.ascontiguousarray(x).reshape((x.shape[0], -1))
    return r2 @ np.ascontiguousarray(g2.T) - (A @ g2) @ np.ascontiguousarray(x2.T)


def lstsq_fwd(A, b, x, dA, db):
    lstsq_check(A)
    At = np.ascontiguousarray(A.T)
    r = b - A @ x
    rhs = np.ascontiguousarray(dA.T) @ r + At @ (db - dA @ x)
    return np.linalg.solve(At @ A, rhs)


_CHO_KEEPS = []


def cho_factor_keeps() -> bool:
    """Does the installed scipy's ``cho_factor`` keep ``a``'s entries in the triangle it does
    not write?  scipy <= 1.17 keeps them; 1.18 writes zeros there.  zyg computes the value
    and the derivatives of what the installed scipy returns: the generated code passes the
    answer as a literal, so a module generated for one scipy is not reused with another
    (its text, hence its cache key, differs)."""
    if not _CHO_KEEPS:
        a = np.array([[4.0, 1.0], [1.0, 3.0]])
        _CHO_KEEPS.append(bool(_sla.cho_factor(a, lower=False)[0][1, 0] != 0.0))
    return _CHO_KEEPS[0]


def cho_factor_loops(a, lower, keeps):
    """scipy.linalg.cho_factor(a, lower): the factor in one triangle; a's other entries
    where the installed scipy keeps them (``keeps``), else zeros."""
    n = a.shape[0]
    S = sym_from_triangle(np.ascontiguousarray(a), lower)
    L = np.linalg.cholesky(S)
    c = a.copy() if keeps else np.zeros_like(a)
    for i in range(n):
        for j in range(n):
            if i >= j:
                if lower:
                    c[i, j] = L[i, j]
                else:
                    c[j, i] = L[i, j]
    return c, lower


def cho_factor_py(a, lower, keeps):
    c, low = _sla.cho_factor(a, lower=lower)
    return c, bool(low)


def cho_factor_back(c, dc, lower, keeps):
    """dA of (c, lower) = cho_factor(A): the factor's rule on the triangle read, and the
    identity on the entries of A that c keeps (none where scipy writes zeros there)."""
    n = c.shape[0]
    L = np.tril(c) if lower else np.ascontiguousarray(np.triu(c).T)
    dL = np.tril(dc) if lower else np.ascontiguousarray(np.triu(dc).T)
    g = chol_back(L, dL)
    if not lower:
        g = np.ascontiguousarray(g.T)
    for i in range(n):
        for j in range(n):
            if keeps and i != j and (i < j) == lower:
                g[i, j] += dc[i, j]
    return g


def cho_factor_fwd(c, dA, lower, keeps):
    """The tangent of c in (c, lower) = cho_factor(A): the factor's tangent (from the
    triangle of dA that is read) in its triangle, dA itself on the entries c keeps from A."""
    n = c.shape[0]
    L = np.tril(c) if lower else np.ascontiguousarray(np.triu(c).T)
    dL = chol_fwd(L, sym_from_triangle(np.ascontiguousarray(dA), lower))
    out = np.ascontiguousarray(dA).copy() if keeps else np.zeros_like(dA)
    for i in range(n):
        for j in range(n):
            if i >= j:
                if lower:
                    out[i, j] = dL[i, j]
                else:
                    out[j, i] = dL[i, j]
    return out


def cho_solve_loops(c, lower, b):
    if lower:
        z = solve_triangular(c, b, True, 0, False)
        return solve_triangular(c, z, True, 1, False)
    z = solve_triangular(c, b, False, 1, False)
    return solve_triangular(c, z, False, 0, False)


def cho_solve_py(c, lower, b):
    return _sla.cho_solve((c, lower), b)


def cho_solve_fwd_c(c, lower, dc, x):
    """The tangent of x = cho_solve((c, lower), b) from c's: -A^-1 dA x with A = L L^T and
    dA = dL L^T + L dL^T, dL the tangent on L's triangle of c."""
    if lower:
        L = np.tril(c)
        dL = np.tril(dc)
    else:
        L = np.ascontiguousarray(np.triu(c).T)
        dL = np.ascontiguousarray(np.triu(dc).T)
    dA = dL @ np.ascontiguousarray(L.T) + L @ np.ascontiguousarray(dL.T)
    return -cho_solve_loops(c, lower, dA @ np.ascontiguousarray(x))


def cho_solve_back_c(c, lower, g, x):
    """dc of x = cho_solve((c, lower), b), g = A^-1 dx: -(g x^T + x g^T) L on L's triangle."""
    g2 = np.ascontiguousarray(g).reshape((g.shape[0], -1))
    x2 = np.ascontiguousarray(x).reshape((x.shape[0], -1))
    S = g2 @ np.ascontiguousarray(x2.T)
    S = S + np.ascontiguousarray(S.T)
    if lower:
        return -np.tril(S @ np.tril(c))
    return -np.triu(np.triu(c) @ S)


# name in generated code -> (python implementation, the one numba compiles, its helpers)
_HELPER_FNS: Dict[str, Tuple[Callable, Callable]] = {
    "_zyg_chol_back": (chol_back, chol_back_loops), "_zyg_chol_fwd": (chol_fwd, chol_fwd_loops),
    "_zyg_diag_of": (diag_of, diag_of), "_zyg_diag_into": (diag_into, diag_into),
    "_zyg_kron_back0": (kron_back0, kron_back0), "_zyg_kron_back1": (kron_back1, kron_back1),
    "_zyg_norm_axis": (norm_axis, norm_axis), "_zyg_norm_axis_back": (norm_axis_back, norm_axis_back),
    "_zyg_matnorm_grad": (matnorm_grad, matnorm_grad),
    "_zyg_solve_triangular": (solve_triangular_py, solve_triangular_loops),
    "_zyg_tri_mask": (tri_mask, tri_mask), "_zyg_tri_back_a": (tri_back_a, tri_back_a),
    "_zyg_eigh_upper": (eigh_upper_py, eigh_upper_loops),
    "_zyg_nuc_norm": (nuc_norm_py, nuc_norm_loops),
    "_zyg_eigh_back_w": (eigh_back_w, eigh_back_w), "_zyg_eigh_back_v": (eigh_back_v, eigh_back_v),
    "_zyg_eigh_fwd_w": (eigh_fwd_w, eigh_fwd_w), "_zyg_eigh_fwd_v": (eigh_fwd_v, eigh_fwd_v),
    "_zyg_qr_back_q": (qr_back_q, qr_back_q), "_zyg_qr_back_r": (qr_back_r, qr_back_r),
    "_zyg_qr_fwd_q": (qr_fwd_q, qr_fwd_q), "_zyg_qr_fwd_r": (qr_fwd_r, qr_fwd_r),
    "_zyg_lstsq_back_a": (lstsq_back_a, lstsq_back_a), "_zyg_lstsq_back_b": (lstsq_back_b, lstsq_back_b),
    "_zyg_lstsq_fwd": (lstsq_fwd, lstsq_fwd),
    "_zyg_cho_factor": (cho_factor_py, cho_factor_loops),
    "_zyg_cho_factor_back": (cho_factor_back, cho_factor_back),
    "_zyg_cho_factor_fwd": (cho_factor_fwd, cho_factor_fwd),
    "_zyg_cho_solve": (cho_solve_py, cho_solve_loops),
    "_zyg_cho_solve_back_c": (cho_solve_back_c, cho_solve_back_c),
    "_zyg_cho_solve_fwd_c": (cho_solve_fwd_c, cho_solve_fwd_c),
}
# module-level names the helpers call (bound to the compiled versions on target "cpu")
_INNER = {"sym_to_triangle": sym_to_triangle, "sym_from_triangle": sym_from_triangle,
          "chol_back": chol_back_loops, "chol_fwd": chol_fwd_loops, "line_norm": _line_norm,
          "lower_half_diag": _lower_half_diag,
          "line_norm_back": _line_norm_back,
          "qr_check": _qr_check, "copyltu": _copyltu, "times_rinv_t": _times_rinv_t,
          "qr_fwd_parts": _qr_fwd_parts, "lstsq_check": _lstsq_check,
          "solve_triangular": solve_triangular_loops, "tri_mask": tri_mask,
          "cho_solve_loops": cho_solve_loops}
for _k, _v in _INNER.items():
    globals().setdefault(_k, _v)
_CACHE: Dict[Any, Dict[str, Any]] = {}


def helpers(backend: Any) -> Dict[str, Any]:
    """Name -> helper for generated code on ``backend`` (einsum helpers registered so far
    included: a constant subscript string registers its family when its kind is found)."""
    njit = backend.jit
    got = _CACHE.setdefault(backend.key(), {})
    if not backend.compiled:
        for name, (py, _) in _HELPER_FNS.items():
            got.setdefault(name, py)
        for name, f in _EINSUM_PY.items():
            got.setdefault(name, f)
        return got
    if "_zyg_chol_back" not in got:
        import types
        g: Dict[str, Any] = {"np": np}
        order = ["sym_to_triangle", "sym_from_triangle", "solve_triangular", "lower_half_diag",
                 "chol_back", "chol_fwd", "line_norm",
                 "line_norm_back",
                 "qr_check", "copyltu", "times_rinv_t", "qr_fwd_parts", "lstsq_check",
                 "tri_mask", "cho_solve_loops"]
        compiled: Dict[str, Any] = {}

        def jit_of(fn):
            # the same code over globals where the loops it calls are the compiled ones
            ns = dict(g)
            ns.update(compiled)
            return njit(types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__))
        for name in order:
            compiled[name] = jit_of(_INNER[name])
        for name, (_, loops) in _HELPER_FNS.items():
            inner = next((k for k, v in _INNER.items() if v is loops), None)
            got[name] = compiled[inner] if inner else jit_of(loops)
    for name, f in _EINSUM_LOOPS.items():
        if name not in got:
            got[name] = njit(f)
    return got
