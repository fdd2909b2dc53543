"""Gradient references and checks: central finite differences and relative errors.

Every gradient is checked before it is timed, against (a) a 5-point central finite
difference of the numba primal in float64, (b) the hand-written adjoint (to
rounding), and (c) the closed form where a workload has one.

Gradients w.r.t. several arguments are tuples (one entry per argument, in
``argnums`` order); they are compared argument by argument (:func:`rel_error`).
Where a differentiated argument is an array, the finite-difference reference is a
handful of *directional* derivatives (:class:`Directional`): probing every element
of an MLP's weight matrices would take minutes, a few random directions take
milliseconds and catch any wrong component with probability one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence, Union

import numpy as np

Number = Union[float, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Directional:
    """Finite-difference directional derivatives of a scalar function.

    Attributes:
        directions: one entry per probe; each is a tuple with one perturbation per
            differentiated argument (a float for a scalar argument, an array of the
            argument's shape for an array argument).
        values: the central-difference estimate of ``d/dt f(args + t * direction)``
            at ``t = 0``, one per probe.
    """

    directions: tuple[tuple[Any, ...], ...]
    values: np.ndarray


def is_scalar(x: Any) -> bool:
    """True for Python/numpy scalars (not 0-d or larger arrays)."""
    return np.ndim(x) == 0 and not isinstance(x, np.ndarray)


def to_array(obj: Any) -> np.ndarray:
    """Flatten a value or gradient from any framework into a float64 numpy array.

    Accepts Python and numpy scalars, numpy/JAX arrays, torch tensors and (nested)
    tuples or lists of those (several gradients are concatenated).
    """
    if isinstance(obj, (tuple, list)):
        parts = [to_array(o) for o in obj]
        return np.concatenate(parts) if parts else np.zeros(0)
    if hasattr(obj, "detach"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    return np.asarray(obj, dtype=np.float64).ravel()


def _rel_error_flat(a: np.ndarray, e: np.ndarray, scale: float) -> float:
    if a.shape != e.shape:
        return float("inf")
    if not np.all(np.isfinite(a)):
        return float("inf")
    diff = float(np.max(np.abs(a - e))) if a.size else 0.0
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0.0 else float("inf")


def rel_error(actual: Any, expected: Any) -> float:
    """Norm-wise relative error ``max|a - e| / max|e|`` (0 when both are exactly 0).

    When both are tuples of the same length (gradients w.r.t. several arguments),
    each argument's gradient is compared with its own scale and the largest error
    is returned, so that a small gradient cannot hide behind a large one; an
    argument whose expected gradient is exactly zero is scaled by the largest of
    all. Otherwise both are flattened and concatenated (:func:`to_array`).
    """
    if (isinstance(actual, tuple) and isinstance(expected, tuple)
            and len(actual) == len(expected) and len(expected) > 1):
        parts = [(to_array(a), to_array(e)) for a, e in zip(actual, expected)]
        overall = max((float(np.max(np.abs(e))) if e.size else 0.0) for _, e in parts)
        errs = []
        for a, e in parts:
            own = float(np.max(np.abs(e))) if e.size else 0.0
            errs.append(_rel_error_flat(a, e, own if own > 0.0 else overall))
        return max(errs)
    a, e = to_array(actual), to_array(expected)
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    return _rel_error_flat(a, e, scale)


def _as_grad_tuple(grad: Any, n: int) -> tuple[Any, ...]:
    """``grad`` as a tuple with one entry per differentiated argument."""
    if n == 1:
        return (grad,)
    if not isinstance(grad, (tuple, list)) or len(grad) != n:
        raise ValueError(f"expected a gradient for each of {n} arguments, got {type(grad)}")
    return tuple(grad)


def directional_values(grad: Any, fd: Directional) -> np.ndarray:
    """``dot(grad, direction)`` for each direction of ``fd``."""
    n = len(fd.directions[0])
    parts = [to_array(g) for g in _as_grad_tuple(grad, n)]
    out = np.empty(len(fd.directions))
    for i, direction in enumerate(fd.directions):
        total = 0.0
        for g, d in zip(parts, direction):
            dd = to_array(d)
            if g.shape != dd.shape:
                return np.full(len(fd.directions), np.inf)
            total += float(np.dot(g, dd))
        out[i] = total
    return out


def fd_error(grad: Any, fd: Any) -> float:
    """Relative error of ``grad`` against a finite-difference reference.

    ``fd`` is either a full gradient (scalar arguments; compared with
    :func:`rel_error`) or a :class:`Directional` (array arguments: the directional
    derivatives ``dot(grad, d)`` are compared, norm-wise over the directions).
    """
    if isinstance(fd, Directional):
        try:
            dots = directional_values(grad, fd)
        except ValueError:
            return float("inf")
        return rel_error(dots, fd.values)
    return rel_error(grad, fd)


def _stencil(at: Callable[[float], float], h: float) -> float:
    return (-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12 * h)


def central_difference(
    f: Callable[..., Any],
    args: tuple[Any, ...],
    h: float,
    argnums: Sequence[int] = (0,),
    n_directions: int = 3,
    seed: int = 20251121,
) -> Any:
    """Finite-difference reference for the gradient of scalar ``f`` w.r.t. ``argnums``.

    5-point central stencil ``(-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / 12h``
    (truncation error O(h**4)).

    * When every differentiated argument is a scalar: the full gradient -- a float
      for one argument, a tuple of floats for several.
    * When any of them is an array: a :class:`Directional` with ``n_directions``
      directional derivatives along fixed pseudo-random directions (standard normal
      entries, seeded); every argument is perturbed on a copy, so a function that
      mutates its input cannot corrupt the reference.
    """
    argnums = tuple(argnums)
    args = tuple(args)

    def call(new: dict[int, Any]) -> float:
        full = [new.get(i, a) for i, a in enumerate(args)]
        return float(f(*full))

    if all(is_scalar(args[i]) for i in argnums):
        grads = []
        for i in argnums:
            x0 = float(args[i])
            grads.append(_stencil(lambda t, i=i, x0=x0: call({i: x0 + t}), h))
        return grads[0] if len(grads) == 1 else tuple(grads)

    rng = np.random.default_rng(seed)
    bases = {i: (float(args[i]) if is_scalar(args[i])
                 else np.array(args[i], dtype=np.float64)) for i in argnums}
    directions = []
    values = []
    for _ in range(n_directions):
        direction = tuple(
            float(rng.standard_normal()) if is_scalar(bases[i])
            else rng.standard_normal(bases[i].shape)
            for i in argnums
        )

        def at(t: float, direction=direction) -> float:
            new = {}
            for i, d in zip(argnums, direction):
                b = bases[i]
                new[i] = b + t * d if is_scalar(b) else (b + t * d).astype(np.float64)
            return call(new)

        directions.append(direction)
        values.append(_stencil(at, h))
    return Directional(tuple(directions), np.array(values))
