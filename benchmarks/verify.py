"""Gradient references and checks: central finite differences and relative errors.

Every gradient is checked before it is timed, against (a) a 5-point central finite
difference of the numba primal in float64, (b) the hand-written adjoint (to
rounding), and (c) the closed form where a workload has one.
"""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

Number = Union[float, np.ndarray]


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


def rel_error(actual: Any, expected: Any) -> float:
    """Norm-wise relative error ``max|a - e| / max|e|`` (0 when both are exactly 0)."""
    a, e = to_array(actual), to_array(expected)
    if a.shape != e.shape:
        return float("inf")
    if not np.all(np.isfinite(a)):
        return float("inf")
    diff = float(np.max(np.abs(a - e))) if a.size else 0.0
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0.0 else float("inf")


def central_difference(f: Callable[..., Any], args: tuple[Any, ...], h: float) -> Number:
    """Gradient of scalar ``f`` w.r.t. ``args[0]`` by the 5-point central stencil.

    ``(-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / 12h``: truncation error O(h**4).
    ``args[0]`` may be a float or a float array (every element is perturbed, on a
    copy, so a function that mutates its input cannot corrupt the reference).
    """
    x0, rest = args[0], tuple(args[1:])

    def at(x: Any) -> float:
        return float(f(x, *rest))

    if np.ndim(x0) == 0 and not isinstance(x0, np.ndarray):
        x = float(x0)
        return (-at(x + 2 * h) + 8 * at(x + h) - 8 * at(x - h) + at(x - 2 * h)) / (12 * h)
    base = np.array(x0, dtype=np.float64)
    grad = np.empty_like(base)
    for idx in np.ndindex(base.shape):
        values = []
        for step in (2 * h, h, -h, -2 * h):
            x = base.copy()
            x[idx] += step
            values.append(at(x))
        grad[idx] = (-values[0] + 8 * values[1] - 8 * values[2] + values[3]) / (12 * h)
    return grad
