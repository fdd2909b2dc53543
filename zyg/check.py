"""``zyg.check_grads``: check zyg's derivatives of a function against finite differences.

Like ``jax.test_util.check_grads``.  For ``order=1`` it compares

* reverse mode (``zyg.value_and_grad`` for a scalar result, ``zyg.pullback`` with one
  unit cotangent per output element otherwise) and
* forward mode (``zyg.jvp`` with one unit tangent per input element)

with a finite-difference Jacobian (central differences at ``h`` and ``h/2`` combined by
Richardson extrapolation, every element of every selected argument perturbed, the
arguments copied before every evaluation), and runs the dot-product test
``<J v, w> == <v, J^T w>`` between ``zyg.jvp`` (random ``v``) and ``zyg.pullback``
(random ``w``).  ``order=2`` also checks ``zyg.hessian``, ``zyg.hvp`` and nested
``zyg.grad(zyg.grad(f))`` against finite differences of zyg's (checked) gradient.

A mismatch raises :class:`GradCheckError` (an ``AssertionError``) whose message says
which check, which argument and element, the expected and the computed value, and the
largest absolute and relative errors.

    >>> import math, zyg
    >>> zyg.check_grads(lambda x, y: math.sin(x) * y, (0.3, 2.0), argnums=(0, 1),
    ...                 target="python")
"""
from __future__ import annotations

import math
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["check_grads", "GradCheckError"]

# Above these sizes the forward (reverse) Jacobian is probed along random directions
# instead of one unit tangent per input (cotangent per output) element.
_MAX_COLUMNS = 64
_MAX_ROWS = 64
_RANDOM_PROBES = 3
_SHOWN = 8          # mismatching elements listed per check


class GradCheckError(AssertionError):
    """A derivative computed by zyg differs from its reference.

    ``str(err)`` is the readable report; ``err.failures`` lists one ``(check, lines)``
    pair per failed check."""

    def __init__(self, report: str, failures: List[Tuple[str, List[str]]]):
        super().__init__(report)
        self.failures = failures


# -- values -----------------------------------------------------------------------------------

def _is_float(a: Any) -> bool:
    return isinstance(a, (float, np.floating)) and not isinstance(a, (bool, np.bool_))


def _is_float_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _is_nondiff(a: Any) -> bool:
    return isinstance(a, (bool, int, np.bool_, np.integer))


def _copy(v: Any) -> Any:
    """A copy of ``v`` that ``f`` may write into: arrays are copied, tuples recursively."""
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):
        vals = [_copy(x) for x in v]
        return type(v)(*vals) if hasattr(v, "_fields") else tuple(vals)
    return v


def _copies(args: Sequence[Any]) -> list:
    return [_copy(a) for a in args]


def _same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same values (NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b)))))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if _is_float(a) and _is_float(b) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class _Out:
    """The structure of ``f``'s result: a float, a float array, or a (named)tuple of them.

    ``vec`` flattens a result of this structure to one float64 vector; ``build`` makes a
    value of this structure (a cotangent) from such a vector."""

    def __init__(self, y: Any, fname: str):
        self.fname = fname
        self.tree = self._tree(y)
        self.size = self._count(self.tree)
        self.names: List[str] = []
        self._name(self.tree, "output")

    def _tree(self, y: Any):
        if _is_float(y) or _is_nondiff(y):
            return ()
        if _is_float_array(y):
            return ("array", y.shape)
        if isinstance(y, tuple):
            return ("tuple", type(y), [self._tree(x) for x in y])
        raise TypeError(f"check_grads: {self.fname} returns a {type(y).__name__}; it must return a "
                        "float, a float array, or a tuple of them")

    def _count(self, t) -> int:
        if t == ():
            return 1
        if t[0] == "array":
            return int(np.prod(t[1], dtype=np.int64))
        return sum(self._count(c) for c in t[2])

    def _name(self, t, prefix: str) -> None:
        if t == ():
            self.names.append(prefix)
        elif t[0] == "array":
            for k in np.ndindex(*t[1]):
                self.names.append(f"{prefix}[{', '.join(map(str, k))}]")
        else:
            for j, c in enumerate(t[2]):
                self._name(c, f"{prefix}[{j}]")

    def vec(self, y: Any) -> np.ndarray:
        parts: List[np.ndarray] = []

        def walk(t, v):
            if t == ():
                parts.append(np.array([float(v)]))
            elif t[0] == "array":
                v = np.asarray(v, dtype=np.float64)
                if v.shape != t[1]:
                    raise GradCheckError(f"check_grads: {self.fname} returned an array of shape "
                                         f"{v.shape} where its first call returned {t[1]}", [])
                parts.append(v.ravel())
            else:
                if not isinstance(v, tuple) or len(v) != len(t[2]):
                    raise GradCheckError(f"check_grads: {self.fname}'s result changed structure "
                                         "between calls", [])
                for c, x in zip(t[2], v):
                    walk(c, x)
        walk(self.tree, y)
        return np.concatenate(parts) if parts else np.zeros(0)

    def build(self, flat: np.ndarray) -> Any:
        pos = [0]

        def walk(t):
            if t == ():
                pos[0] += 1
                return float(flat[pos[0] - 1])
            if t[0] == "array":
                n = self._count(t)
                pos[0] += n
                return np.array(flat[pos[0] - n:pos[0]], dtype=np.float64).reshape(t[1])
            vals = [walk(c) for c in t[2]]
            return t[1](*vals) if hasattr(t[1], "_fields") else tuple(vals)
        return walk(self.tree)


class _Arg:
    """One selected argument: its position, kind ("float", "array" or "nondiff"), shape."""

    def __init__(self, pos: int, value: Any):
        self.pos = pos
        if _is_float(value):
            self.kind, self.shape = "float", ()
        elif _is_float_array(value):
            self.kind, self.shape = "array", value.shape
        elif _is_nondiff(value):
            self.kind, self.shape = "nondiff", ()
        else:
            raise TypeError(f"check_grads: argument {pos} is a {type(value).__name__}; the "
                            "arguments in argnums must be floats, float arrays, ints or bools")
        self.size = int(np.prod(self.shape, dtype=np.int64)) if self.kind == "array" else 1

    @property
    def diff(self) -> bool:
        return self.kind != "nondiff"

    def label(self) -> str:
        if self.kind == "array":
            return f"argument {self.pos} (array of shape {self.shape})"
        return f"argument {self.pos} ({'float' if self.kind == 'float' else 'not differentiable'})"

    def element(self, k: Tuple[int, ...]) -> str:
        return f"argument {self.pos}" if self.kind == "float" else \
            f"argument {self.pos}[{', '.join(map(str, k))}]"

    def elements(self):
        return [()] if self.kind == "float" else list(np.ndindex(*self.shape))

    def flat(self, g: Any) -> np.ndarray:
        """A derivative w.r.t. this argument as a float64 vector."""
        if self.kind == "float":
            return np.array([float(g)])
        return np.asarray(g, dtype=np.float64).ravel()


def _perturbed(args: Sequence[Any], arg: _Arg, k: Tuple[int, ...], x: float) -> list:
    """Copies of ``args`` with element ``k`` of argument ``arg`` set to ``x``."""
    a = _copies(args)
    if arg.kind == "float":
        a[arg.pos] = type(args[arg.pos])(x) if isinstance(args[arg.pos], np.floating) else x
    else:
        a[arg.pos][k] = x
    return a


def _fd_column(f: Callable, vec: Callable, args: Sequence[Any], arg: _Arg, k, eps: float):
    """d vec(f(args)) / d args[arg][k] by Richardson extrapolation of central differences at
    steps h and h/2 (error O(h^4)); also |D(h/2) - D(h)|, a bound on the error of D(h/2)."""
    x0 = float(args[arg.pos]) if arg.kind == "float" else float(args[arg.pos][k])
    h = eps * max(1.0, abs(x0))

    def central(step):
        up, dn = x0 + step, x0 - step
        fu = vec(f(*_perturbed(args, arg, k, up)))
        fd = vec(f(*_perturbed(args, arg, k, dn)))
        return (fu - fd) / (up - dn)
    d1 = central(h)
    d2 = central(h / 2.0)
    return (4.0 * d2 - d1) / 3.0, np.abs(d2 - d1)


def _fd_jacobian(f: Callable, vec: Callable, args: Sequence[Any], sel: List[_Arg],
                 n_out: int, eps: float) -> List[np.ndarray]:
    """One finite-difference Jacobian (n_out x arg.size) per differentiable selected argument."""
    out = []
    for arg in sel:
        if not arg.diff:
            out.append(None)
            continue
        J = np.empty((n_out, arg.size))
        for c, k in enumerate(arg.elements()):
            J[:, c], _ = _fd_column(f, vec, args, arg, k, eps)
        out.append(J)
    return out


# -- comparison and reporting -----------------------------------------------------------------

class _Report:
    def __init__(self, fname: str, target: str, rtol: float, atol: float):
        self.fname, self.target, self.rtol, self.atol = fname, target, rtol, atol
        self.failures: List[Tuple[str, List[str]]] = []

    def bad(self, got: np.ndarray, want: np.ndarray) -> np.ndarray:
        err = np.abs(got - want)
        tol = self.atol + self.rtol * np.maximum(np.abs(got), np.abs(want))
        return ~(err <= tol)       # NaN counts as a mismatch

    def compare(self, check: str, got: np.ndarray, want: np.ndarray, where: Callable[[int], str],
                what: str = "expected", extra: Sequence[str] = ()) -> bool:
        """Compare two equally shaped float64 arrays; record a failure with the worst elements.
        ``where(i)`` names flat element ``i``."""
        got = np.asarray(got, dtype=np.float64).ravel()
        want = np.asarray(want, dtype=np.float64).ravel()
        bad = self.bad(got, want)
        if not bad.any():
            return True
        err = np.abs(got - want)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = err / np.maximum(np.abs(want), np.abs(got))
        idx = np.flatnonzero(bad)
        order = idx[np.argsort(-np.nan_to_num(err[idx], nan=np.inf), kind="stable")]
        lines = [f"{len(idx)} of {got.size} values differ; max abs error "
                 f"{np.nanmax(err):.3g}, max rel error {np.nanmax(rel):.3g} "
                 f"(rtol={self.rtol:g}, atol={self.atol:g})"]
        for i in order[:_SHOWN]:
            lines.append(f"{where(int(i))}: {what} {float(want[i])!r}, got {float(got[i])!r} "
                         f"(abs error {err[i]:.3g})")
        if len(order) > _SHOWN:
            lines.append(f"... and {len(order) - _SHOWN} more")
        lines += list(extra)
        self.failures.append((check, lines))
        return False

    def fail(self, check: str, *lines: str) -> None:
        self.failures.append((check, list(lines)))

    def raise_if_failed(self) -> None:
        if not self.failures:
            return
        head = (f"zyg.check_grads: derivatives of {self.fname} (target={self.target!r}) do not "
                "match their references")
        parts = [head]
        for check, lines in self.failures:
            parts.append(f"- {check}:")
            parts += ["    " + ln for ln in lines]
        raise GradCheckError("\n".join(parts), self.failures)


def _normalise(argnums, nargs: int) -> List[int]:
    nums = [argnums] if isinstance(argnums, (int, np.integer)) else list(argnums)
    out = []
    for a in nums:
        a = int(a)
        if not -nargs <= a < nargs:
            raise ValueError(f"check_grads: argnums {a} out of range for {nargs} arguments")
        out.append(a % nargs)
    return out


def _called(rep: _Report, what: str, fn: Callable, args: list, orig: Sequence[Any]):
    """Run ``fn(*args)`` (copies of ``orig``) and record a failure if it changed them."""
    res = fn(*args)
    for i, (a, o) in enumerate(zip(args, orig)):
        if not _same(a, o):
            rep.fail(f"{what} changed argument {i} in place",
                     "the caller's arrays must come back unchanged (docs/arrays.md)")
    return res


# -- the checks -------------------------------------------------------------------------------

def check_grads(f: Callable, args: Sequence[Any], argnums: Union[int, Sequence[int]] = 0,
                order: int = 1, modes: Sequence[str] = ("rev", "fwd"), target: str = "cpu",
                eps: float = 1e-4, rtol: float = 1e-6, atol: Optional[float] = None,
                seed: int = 0) -> None:
    """Check zyg's derivatives of ``f`` at ``args`` against finite differences.

    ``argnums`` selects the arguments (floats, float arrays; ints and bools must get a
    ``None`` gradient).  ``order=1``: reverse mode (``"rev"`` in ``modes``), forward mode
    (``"fwd"``) and, with both, the dot-product test ``<J v, w> = <v, J^T w>``.  ``order=2``
    also checks ``zyg.hessian``, ``zyg.hvp`` and ``zyg.grad(zyg.grad(f))`` (``f`` must
    return a number).  The reference is central differences at steps ``h = eps * max(1, |x|)``
    and ``h/2`` combined by Richardson extrapolation.  A value passes when
    ``|got - expected| <= atol + rtol * max(|got|, |expected|)``; ``atol`` defaults to
    ``rtol * max(1, max |f(args)|)``.  ``seed`` fixes the random directions.

    Raises :class:`GradCheckError` (an ``AssertionError``) with a report on a mismatch;
    returns None when everything agrees.
    """
    from . import api
    if order not in (1, 2):
        raise ValueError("check_grads: order must be 1 or 2")
    modes = tuple(modes)
    for m in modes:
        if m not in ("rev", "fwd"):
            raise ValueError(f"check_grads: unknown mode {m!r}; expected 'rev' or 'fwd'")
    args = tuple(args)
    fname = getattr(f, "__name__", "f")
    nums = _normalise(argnums, len(args))
    sel = [_Arg(i, args[i]) for i in nums]
    dsel = [a for a in sel if a.diff]
    y0 = f(*_copies(args))
    out = _Out(y0, fname)
    yv = out.vec(y0)
    if not np.all(np.isfinite(yv)):
        raise ValueError(f"check_grads: {fname} is not finite at these arguments ({y0!r})")
    if atol is None:
        atol = rtol * max(1.0, float(np.max(np.abs(yv))) if yv.size else 1.0)
    rep = _Report(fname, target, rtol, atol)
    rng = np.random.default_rng(seed)
    J_fd = _fd_jacobian(f, out.vec, args, sel, out.size, eps)
    scalar_out = out.tree == ()

    def in_name(arg: _Arg) -> Callable[[int], str]:
        els = arg.elements()
        return lambda c: arg.element(els[c])

    def rand_tangents() -> list:
        t: List[Any] = [None] * len(args)
        for a in dsel:
            t[a.pos] = float(rng.standard_normal()) if a.kind == "float" else \
                rng.standard_normal(a.shape)
        return t

    def t_flat(t) -> np.ndarray:
        return np.concatenate([np.zeros(a.size) if t[a.pos] is None else a.flat(t[a.pos])
                               for a in dsel]) if dsel else np.zeros(0)

    J_all = np.concatenate([J for J in J_fd if J is not None], axis=1) if dsel else \
        np.zeros((out.size, 0))

    def jvp_at(t) -> Tuple[Any, np.ndarray]:
        tt = [t[i] if i in nums else None for i in range(len(args))]
        y, ty = _called(rep, "zyg.jvp", lambda *a: api.jvp(f, a, tuple(tt), target=target),
                        _copies(args), args)
        return y, out.vec(ty)

    def pull(w) -> Tuple[Any, Any]:
        # a fresh pullback per cotangent: back() of a function that writes into its
        # arguments may be called once only
        cp = _copies(args)
        y, back = api.pullback(f, *cp, target=target)
        if w is None:
            return y, None
        gs = back(out.build(w))
        for i, (a, o) in enumerate(zip(cp, args)):
            if not _same(a, o):
                rep.fail(f"zyg.pullback and back() changed argument {i} in place",
                         "the caller's arrays must come back unchanged (docs/arrays.md)")
        return y, gs

    # -- reverse mode --------------------------------------------------------------------
    if "rev" in modes:
        if scalar_out:
            vg = api.value_and_grad(f, tuple(nums), target=target)
            v, gs = _called(rep, "zyg.value_and_grad", vg, _copies(args), args)
            rep.compare("value of zyg.value_and_grad", out.vec(v), yv, lambda i: "value",
                        "f(*args) gives")
            for a, g, J in zip(sel, gs, J_fd):
                if not a.diff:
                    if g is not None:
                        rep.fail(f"reverse mode (zyg.grad), {a.label()}",
                                 f"the gradient of an int/bool argument must be None, got {g!r}")
                    continue
                if g is None or np.shape(g) != a.shape:
                    rep.fail(f"reverse mode (zyg.grad), {a.label()}",
                             f"expected a gradient of shape {a.shape}, got {g!r}")
                    continue
                rep.compare(f"reverse mode (zyg.grad), {a.label()}", a.flat(g), J[0],
                            in_name(a), "finite differences give")
        else:
            y, _ = pull(None)
            rep.compare("value of zyg.pullback", out.vec(y), yv, lambda i: out.names[i],
                        "f(*args) gives")
            if out.size <= _MAX_ROWS:
                cots = [(np.eye(1, out.size, r)[0], out.names[r]) for r in range(out.size)]
            else:
                cots = [(rng.standard_normal(out.size), f"random cotangent {j}")
                        for j in range(_RANDOM_PROBES)]
            for w, wname in cots:
                _, gs = pull(w)
                for a, J in zip(sel, J_fd):
                    g = gs[a.pos]
                    check = f"reverse mode (zyg.pullback), {a.label()}, cotangent {wname}"
                    if not a.diff:
                        if g is not None:
                            rep.fail(check, f"the cotangent of an int/bool argument must be None, "
                                     f"got {g!r}")
                        continue
                    if g is None or np.shape(g) != a.shape:
                        rep.fail(check, f"expected a cotangent of shape {a.shape}, got {g!r}")
                        continue
                    rep.compare(check, a.flat(g), w @ J, in_name(a), "finite differences give")

    # -- forward mode --------------------------------------------------------------------
    if "fwd" in modes and dsel:
        n_in = sum(a.size for a in dsel)
        if n_in <= _MAX_COLUMNS:
            probes = []
            for a in dsel:
                for k in a.elements():
                    t: List[Any] = [None] * len(args)
                    if a.kind == "float":
                        t[a.pos] = 1.0
                    else:
                        e = np.zeros(a.shape)
                        e[k] = 1.0
                        t[a.pos] = e
                    probes.append((t, a.element(k)))
        else:
            probes = [(rand_tangents(), f"random tangent {j}") for j in range(_RANDOM_PROBES)]
        for j, (t, tname) in enumerate(probes):
            y, ty = jvp_at(t)
            if j == 0:
                rep.compare("value of zyg.jvp", out.vec(y), yv, lambda i: out.names[i],
                            "f(*args) gives")
            rep.compare(f"forward mode (zyg.jvp), tangent {tname}", ty, J_all @ t_flat(t),
                        lambda i: out.names[i], "finite differences give")

    # -- dot-product test between forward and reverse -------------------------------------
    if "rev" in modes and "fwd" in modes and dsel:
        t = rand_tangents()
        v = t_flat(t)
        w = rng.standard_normal(out.size)
        _, jv = jvp_at(t)
        _, gs = pull(w)
        jtw = t_flat(gs)
        lhs, rhs = float(jv @ w), float(v @ jtw)
        ref = float(w @ (J_all @ v))
        err = abs(lhs - rhs)
        scale = float(np.abs(jv) @ np.abs(w) + np.abs(v) @ np.abs(jtw))
        if not err <= rep.atol + rep.rtol * scale:
            rep.fail("dot-product test <J v, w> = <v, J^T w> (random v, w)",
                     f"forward mode (zyg.jvp):      <J v, w> = {lhs!r}",
                     f"reverse mode (zyg.pullback): <v, J^T w> = {rhs!r}",
                     f"finite differences:          <J v, w> = {ref!r}",
                     f"abs error {err:.3g}, rel error {err / max(abs(lhs), abs(rhs), 1e-300):.3g} "
                     f"(rtol={rep.rtol:g}, atol={rep.atol:g})")

    rep.raise_if_failed()
    if order == 2:
        _check_second_order(f, args, sel, out, rep, target, eps, rng)
        rep.raise_if_failed()


def _check_second_order(f: Callable, args: tuple, sel: List[_Arg], out: _Out, rep: _Report,
                        target: str, eps: float, rng) -> None:
    """Hessians (``zyg.hessian``, ``zyg.hvp``) and nested gradients against finite
    differences of zyg's gradient (which the first-order checks have just verified)."""
    from . import api
    if out.tree != ():
        raise TypeError(f"check_grads(order=2): {rep.fname} must return a number")
    dsel = [a for a in sel if a.diff]
    for a in dsel:
        # d grad_a / d args[b] by finite differences of zyg's gradient w.r.t. argument a
        ga = api.grad(f, a.pos, target=target)
        ga_out = _Out(ga(*_copies(args)), rep.fname + "'s gradient")
        H_fd = _fd_jacobian(ga, ga_out.vec, args, dsel, ga_out.size, eps)
        gnames = [a.element(k) for k in a.elements()]
        if a.kind == "float" or len(a.shape) == 1:
            H = _called(rep, "zyg.hessian", api.hessian(f, a.pos, target=target),
                        _copies(args), args)
            want = H_fd[dsel.index(a)]
            rep.compare(f"second order (zyg.hessian w.r.t. {a.label()})",
                        np.asarray(H, dtype=np.float64).reshape(want.shape), want,
                        lambda i, n=a.size, gn=gnames: f"d2/d {gn[i // n]} d {gn[i % n]}",
                        "finite differences of zyg.grad give")
        if a.pos == 0:
            v = float(rng.standard_normal()) if a.kind == "float" else rng.standard_normal(a.shape)
            rest = _copies(args)
            Hv = _called(rep, "zyg.hvp", lambda x, *r: api.hvp(f, x, v, *r, target=target),
                         rest, args)
            want = H_fd[dsel.index(a)] @ a.flat(v)
            rep.compare(f"second order (zyg.hvp w.r.t. {a.label()}, random v)", a.flat(Hv), want,
                        lambda i, gn=gnames: f"(H v) at {gn[i]}",
                        "finite differences of zyg.grad give")
        if a.kind == "float":
            # nested reverse mode: grad(grad(f, a), b); the inner gradient is a number
            for b, J in zip(dsel, H_fd):
                gg = api.grad(api.grad(f, a.pos, target=target), b.pos, target=target)
                got = _called(rep, "zyg.grad(zyg.grad(f))", gg, _copies(args), args)
                rep.compare(f"second order (zyg.grad(zyg.grad(f, {a.pos}), {b.pos}))",
                            b.flat(got), J[0],
                            lambda i, b=b, els=b.elements(): f"d2/d {a.element(())} d "
                                                            f"{b.element(els[i])}",
                            "finite differences of zyg.grad give")
