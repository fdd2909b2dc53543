"""A generic checker for the reverse rules of numpy functions on arrays.

The array counterpart of ``tests/rulecheck.py``.  ``check_array_rule(fn, args)``
differentiates a small probe

    def probe(a0, a1, ..., w):
        y = fn(a0, a1, ..., axis=1)
        return np.sum(y * w)          # (or ``y * w`` when y is a scalar)

with ``zyg.value_and_grad`` w.r.t. every float argument (float scalars and float
arrays; bool/int arrays are read only), so the rule goes through lowering, the
array emitter and (for ``target="cpu"``) numba exactly as in user code.  ``w`` is a
fixed random weight of the output's shape: a random direction in output space, so
the scalar ``L`` sees every output element with a different weight.  Constant
operands (``Lit``) and keyword arguments are written into the probe's source as
literals, as a user would write ``axis=1``.  Primitives that are syntax rather
than calls (``a + b``, ``a @ b``, ``a.T``, ``np.array([x, y])``, ``np.stack((a, b))``)
go through ``check_expr`` with the expression written out.

Checks, against the probe run as plain numpy:

1. the value equals numpy's, and the caller's arrays are left unchanged;
2. every gradient has its argument's shape and dtype (float scalars get floats);
3. central finite differences of every element (step 1e-6, relative to the element);
4. three random directions ``d`` of all inputs together:
   ``(L(x + h d) - L(x - h d)) / 2h == sum(grad * d)``.

Complex operands (docs/complex.md) are differentiated too: a complex argument's
gradient is ``dL/dRe + i dL/dIm``, so its finite differences perturb the real and
the imaginary part of each element separately, and a direction ``d`` pairs with the
gradient as ``Re(sum(conj(grad) * d))``.  A complex result is weighted by a complex
``w`` and the probe returns the real part: ``np.sum(np.real(y * w))``.
"""
from __future__ import annotations

import linecache
import math
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.special

import zyg

# the names a probe's expression may use: sc.expit(a0) for the scipy.special rules; tests
# add modules they call (tests/test_linalg.py adds scipy.linalg)
PROBE_GLOBALS: Dict[str, Any] = {"np": np, "sc": scipy.special}
NAMES = PROBE_GLOBALS

FD_STEP = 1e-6
FD_MAX_ELEMS = 64          # per argument; larger arrays get a random subset of elements
DIRECTIONS = 3


class Lit:
    """A constant operand, written into the probe's source (``repr``) instead of passed."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def fn_source(fn: Any) -> str:
    """How the probe's source names ``fn``: ``np.sin``, ``np.linalg.norm``, ``abs``."""
    import builtins
    name = getattr(fn, "__name__", None)
    if name and getattr(np, name, None) is fn:
        return f"np.{name}"
    if name and getattr(np.linalg, name, None) is fn:
        return f"np.linalg.{name}"
    if name and getattr(builtins, name, None) is fn:
        return name
    raise ValueError(f"no source spelling for {fn!r}: use check_expr")


def call_source(fn: Any, args: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None
                ) -> Tuple[str, List[Any]]:
    """``fn(a0, 3, a1, axis=1)`` for ``args`` (``Lit`` operands inline) and the probe's
    arguments (the non-``Lit`` operands, in order)."""
    parts, passed = [], []
    for a in args:
        if isinstance(a, Lit):
            parts.append(repr(a))
        else:
            parts.append(f"a{len(passed)}")
            passed.append(a)
    parts += [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return f"{fn_source(fn)}({', '.join(parts)})", passed


# --- probes ----------------------------------------------------------------------------------
_PROBES: Dict[Tuple[str, int, bool, Tuple[int, ...], str], Tuple[Callable, Callable]] = {}


def _is_float(a: Any) -> bool:
    """A differentiable operand: float or complex (scalar or array)."""
    if isinstance(a, np.ndarray):
        return a.dtype.kind in "fc"
    return isinstance(a, (float, np.floating, complex, np.complexfloating))


def _is_complex(a: Any) -> bool:
    return np.iscomplexobj(a)


def make_probe(expr: str, nargs: int, scalar_out: bool, cplx_out: bool = False) -> Callable:
    """The plain-Python probe (also numpy's reference)."""
    params = "".join(f"a{i}, " for i in range(nargs)) + "w"
    if cplx_out:
        ret = "(y * w).real" if scalar_out else "np.sum(np.real(y * w))"
    else:
        ret = "y * w" if scalar_out else "np.sum(y * w)"
    src = f"def probe({params}):\n    y = {expr}\n    return {ret}\n"
    # a stable pseudo-file name: zyg reads the probe's source through linecache
    name = f"<zyg-arraycheck-{zlib.crc32(src.encode()):08x}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns: Dict[str, Any] = dict(PROBE_GLOBALS)
    exec(compile(src, name, "exec"), ns)
    return ns["probe"]


def probe_for(expr: str, nargs: int, scalar_out: bool, argnums: Tuple[int, ...], target: str,
              cache: bool = True, cplx_out: bool = False) -> Tuple[Callable, Callable]:
    key = (expr, nargs, scalar_out, argnums, target, cplx_out)
    got = _PROBES.get(key) if cache else None
    if got is None:
        ref = make_probe(expr, nargs, scalar_out, cplx_out)
        got = (ref, zyg.value_and_grad(ref, argnums, target=target))
        if cache:
            _PROBES[key] = got
    return got


# --- finite differences ------------------------------------------------------------------------
def _f64(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
    if _is_complex(a):
        return complex(a)
    return float(a) if _is_float(a) else a


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


def _fd_elements(ref: Callable, args: List[Any], i: int, w: Any, rng) -> Tuple[Any, Any]:
    """Central differences of ``ref`` w.r.t. elements of argument ``i``:
    (indices checked or None for a scalar, derivatives)."""
    a = args[i]

    def at(val) -> float:
        xs = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        xs[i] = val
        return float(ref(*xs, w))

    # a complex operand: dL/dRe + i dL/dIm (the real and imaginary parts perturbed apart)
    units = (1.0, 1j) if _is_complex(a) else (1.0,)
    if not isinstance(a, np.ndarray):
        h = FD_STEP * max(1.0, abs(a))
        return None, sum(u * (at(a + h * u) - at(a - h * u)) / (2.0 * h) for u in units)
    idxs = list(np.ndindex(a.shape))
    if len(idxs) > FD_MAX_ELEMS:
        pick = rng.choice(len(idxs), FD_MAX_ELEMS, replace=False)
        idxs = [idxs[k] for k in sorted(pick)]
    out = np.zeros(len(idxs), dtype=np.complex128 if len(units) == 2 else np.float64)
    for k, idx in enumerate(idxs):
        h = FD_STEP * max(1.0, abs(a[idx]))
        for u in units:
            up, dn = a.copy(), a.copy()
            up[idx] += h * u
            dn[idx] -= h * u
            out[k] += u * (at(up) - at(dn)) / (2.0 * h)
    return idxs, out


# --- the checker ---------------------------------------------------------------------------------
def check_expr(expr: str, args: Sequence[Any], target: str = "python", rtol: float = 1e-6,
               label: Optional[str] = None, cache: bool = True) -> None:
    """Check zyg's gradient of ``np.sum(<expr> * w)`` (operands ``a0, a1, ...`` = ``args``)."""
    label = label or expr
    args = list(args)
    argnums = tuple(i for i, a in enumerate(args) if _is_float(a))
    assert argnums, f"{label}: no float argument to differentiate"
    a64 = [_f64(a) for a in args]
    y = eval(expr, dict(PROBE_GLOBALS), {f"a{i}": a for i, a in enumerate(a64)})
    scalar_out = np.ndim(y) == 0
    cplx_out = np.iscomplexobj(y)
    rng = np.random.default_rng(_seed(expr + repr([np.shape(a) for a in args])))
    w = float(rng.normal()) if scalar_out else rng.normal(size=np.shape(y))
    if cplx_out:            # a random complex weight: every output component matters
        w = w + 1j * (float(rng.normal()) if scalar_out else rng.normal(size=np.shape(y)))
    ref, vg = probe_for(expr, len(args), scalar_out, argnums, target, cache, cplx_out)
    lowp = any(isinstance(args[i], np.ndarray) and args[i].dtype not in (np.float64, np.complex128)
               for i in argnums)
    tag = f"{label} [{target}]"

    # 1. the value, and the caller's arrays left as they were
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    val, grads = vg(*args, w)
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f"{tag}: an input array was changed")
    want = float(ref(*[a.copy() if isinstance(a, np.ndarray) else a for a in args], w))
    scale = max(1.0, abs(want), float(np.sum(np.abs(np.asarray(y) * w))))
    vtol = 1e-5 if lowp else 1e-12
    assert math.isfinite(want), f"{tag}: the sample point gives a non-finite value"
    assert abs(float(val) - want) <= vtol * scale, f"{tag}: value {val!r} != numpy's {want!r}"

    # 2. shapes and dtypes
    assert isinstance(grads, tuple) and len(grads) == len(argnums), f"{tag}: gradients {grads!r}"
    for i, g in zip(argnums, grads):
        a = args[i]
        assert g is not None, f"{tag}: the gradient of argument {i} is None"
        if isinstance(a, np.ndarray):
            assert isinstance(g, np.ndarray), f"{tag}: gradient {i} is a {type(g).__name__}, not an array"
            assert g.shape == a.shape, f"{tag}: gradient {i} has shape {g.shape}, argument {a.shape}"
            assert g.dtype == a.dtype, f"{tag}: gradient {i} has dtype {g.dtype}, argument {a.dtype}"
        elif _is_complex(a):
            assert np.ndim(g) == 0 and isinstance(g, (complex, np.complexfloating)), \
                f"{tag}: gradient {i} of a complex argument is {g!r}"
        else:
            assert np.ndim(g) == 0 and isinstance(g, (float, np.floating)), \
                f"{tag}: gradient {i} of a float argument is {g!r}"

    # 3. finite differences, element by element (in float64)
    grtol = 1e-4 if lowp else rtol
    atol = 1e-8 * scale if not lowp else 1e-4 * scale
    for i, g in zip(argnums, grads):
        idxs, fd = _fd_elements(ref, a64, i, w, rng)
        cdt = np.complex128 if _is_complex(args[i]) else np.float64
        got = cdt(g) if idxs is None else np.array([g[k] for k in idxs], dtype=cdt)
        np.testing.assert_allclose(got, fd, rtol=grtol, atol=atol,
                                   err_msg=f"{tag}: d/d(argument {i}) vs finite differences")

    # 4. random directions through all inputs at once
    xmax = max(float(np.max(np.abs(a64[i]))) for i in argnums)
    h = FD_STEP * max(1.0, xmax)
    for k in range(DIRECTIONS):
        ds = {i: (rng.normal(size=np.shape(a64[i])) if isinstance(a64[i], np.ndarray)
                  else float(rng.normal())) for i in argnums}
        for i in argnums:
            if _is_complex(a64[i]):
                ds[i] = ds[i] + 1j * (rng.normal(size=np.shape(a64[i])) if isinstance(a64[i], np.ndarray)
                                      else float(rng.normal()))
        up = list(a64)
        dn = list(a64)
        for i, d in ds.items():
            up[i] = a64[i] + h * d
            dn[i] = a64[i] - h * d
        fd = (float(ref(*up, w)) - float(ref(*dn, w))) / (2.0 * h)
        # <grad, d> in the real inner product of C = R^2: Re(conj(grad) * d)
        lin = sum(float(np.sum(np.real(np.conj(np.asarray(g)) * ds[i]))) for i, g in zip(argnums, grads))
        dscale = sum(float(np.sum(np.abs(d))) for d in ds.values())
        assert abs(fd - lin) <= grtol * max(abs(fd), abs(lin)) + atol * dscale, \
            f"{tag}: direction {k}: <grad, d> = {lin!r}, finite differences {fd!r}"


def check_array_rule(fn: Any, args: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None,
                     target: str = "python", rtol: float = 1e-6) -> None:
    """Check the reverse rule of ``fn`` at ``args`` (``Lit`` for constants) and ``kwargs``
    (constants, written into the probe)."""
    expr, passed = call_source(fn, args, kwargs)
    check_expr(expr, passed, target=target, rtol=rtol)
